# quarot.h - build, test and benchmark.
#   make            everything (library objects, examples, tests, benchmarks)
#   make demo       the whole story on an embedded default model
#   make test       every test program; ends with "N passed, M failed, K skipped"
#   make matrix     the compiler / language / ISA matrix of quarot_impl_test.c
#   make check-layers  no back-arrow between the tool's folders (tools/check_layers.sh)
#   make test-san   the tests under AddressSanitizer + UndefinedBehaviorSanitizer (QT_QUICK sizes)
#   make test-neon  the tests cross-compiled for aarch64 (NEON) and run under qemu-user
#   make fuzz       libFuzzer harnesses of the checkpoint readers, FUZZ_SECONDS each
#   make bench      benchmarks (run on a quiet machine)
#   make regen      rewrite quarot.h's generated blocks (>>generated) from their programs in tools/
#   make regen-check  fail when make regen would change quarot.h (a CI step)
#   make style-check  quarot.h's stated style (tools/check_style.sh: line width, section markers)
CC      ?= cc
CXX     ?= c++
OPT     ?= -O2
ARCH    ?= -march=native
SAN     ?=
BUILD   ?= build
FUZZ_SECONDS ?= 60

# The header itself is held to the full STYLE.md warning set; programs around it to a lighter one.
WARN_STRICT = -Wall -Wextra -pedantic -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
              -Wconversion -Wdouble-promotion -Wundef
WARN        = -Wall -Wextra -pedantic -Werror -Wshadow
# The tool's parts live in one folder each under examples/ (support/, formats/, tokenizer/, model/,
# pipeline/, eval/, engine/, cli/; a folder includes only itself and the ones before it, make
# check-layers): every .c there goes into libqx.a. One include root: quarot.h from the top, the
# tool's headers with their folder ("formats/qx_gguf.h").
CFLAGS_BASE = -std=c99 $(OPT) -g $(ARCH) $(SAN) -I. -Iexamples -D_POSIX_C_SOURCE=200809L
LDLIBS      = -lm
LDFLAGS     ?=

COMMON_SRCS = $(filter-out examples/support/quarot_impl.c,$(wildcard examples/*/*.c))
COMMON_OBJS = $(COMMON_SRCS:examples/%.c=$(BUILD)/lib/%.o) $(BUILD)/lib/support/quarot_impl.o
COMMON_HDRS = $(wildcard examples/*/*.h) quarot.h
LIBQX       = $(BUILD)/libqx.a

TEST_SRCS   = $(wildcard tests/test_*.c)
TESTS       = $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_HELPERS= $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/helper_*.c))
EXAMPLE_SRCS= $(wildcard examples/*.c)
EXAMPLES    = $(EXAMPLE_SRCS:examples/%.c=$(BUILD)/%)
BENCH_SRCS  = $(wildcard bench/bench_*.c)
BENCHES     = $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)
# Generators of quarot.h's >>generated blocks that are C programs (tools/regen.sh runs them).
TOOLS       = $(patsubst tools/%.c,$(BUILD)/tools/%,$(wildcard tools/*.c))
STYLE_FILES = quarot.h

# OpenBLAS beside our SGEMM in the benchmark, when its development files are installed.
OPENBLAS_H  := $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h /usr/include/openblas/cblas.h /usr/include/cblas.h)
ifneq ($(OPENBLAS_H),)
BENCH_BLAS_CFLAGS = -DBENCH_HAVE_CBLAS -I$(dir $(firstword $(OPENBLAS_H)))
BENCH_BLAS_LIBS   = -lopenblas
endif

.PHONY: all test demo bench matrix check-layers test-san test-neon fuzz regen regen-check style-check clean
all: $(LIBQX) $(EXAMPLES) $(TESTS) $(TEST_HELPERS) $(BENCHES) $(TOOLS)

$(BUILD)/lib/support/quarot_impl.o: examples/support/quarot_impl.c quarot.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(WARN_STRICT) -c $< -o $@

$(BUILD)/lib/%.o: examples/%.c $(COMMON_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(WARN) -c $< -o $@

$(LIBQX): $(COMMON_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(LIBQX) $(COMMON_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(WARN) $< $(LIBQX) -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/quickstart: examples/quickstart.c quarot.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(WARN) -Wno-declaration-after-statement $< -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/%: examples/%.c $(LIBQX) $(COMMON_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(WARN) $< $(LIBQX) -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(LIBQX) $(COMMON_HDRS) $(wildcard bench/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(WARN) $(BENCH_BLAS_CFLAGS) $< $(LIBQX) -o $@ $(LDFLAGS) $(BENCH_BLAS_LIBS) $(LDLIBS)

$(BUILD)/tools/%: tools/%.c $(BUILD)/lib/support/quarot_impl.o quarot.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(WARN) $< $(BUILD)/lib/support/quarot_impl.o -o $@ $(LDFLAGS) $(LDLIBS)

test: $(TESTS) $(EXAMPLES) $(TEST_HELPERS)
	@QT_RUNNER="$(QT_RUNNER)" QT_QUICK="$(QT_QUICK)" tests/run.sh $(TESTS)

demo: $(BUILD)/quarot
	$(BUILD)/quarot demo

bench: $(BENCHES) $(BUILD)/quarot   # bench_moe_rotate runs the tool
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

matrix:
	@tests/matrix.sh

# one check, counted as CI's steps count theirs
check-layers:
	@if sh tools/check_layers.sh; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; exit 1; fi

test-san:
	$(MAKE) test BUILD=build-san OPT=-O1 SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" QT_QUICK=1

test-neon:
	$(MAKE) test BUILD=build-neon CC=aarch64-linux-gnu-gcc ARCH= QT_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu" QT_QUICK=1

fuzz:
	@tests/fuzz.sh $(FUZZ_SECONDS)

regen: $(BUILD)/tools/gen_mixr
	@tools/regen.sh quarot.h $(BUILD)/tools/gen_mixr

regen-check: $(BUILD)/tools/gen_mixr
	@tools/regen.sh --check quarot.h $(BUILD)/tools/gen_mixr

style-check:
	@tools/check_style.sh $(STYLE_FILES)

clean:
	rm -rf build build-san build-neon build-fuzz build-matrix
