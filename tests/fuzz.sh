#!/usr/bin/env bash
# Builds each fuzz/fuzz_*.c as a libFuzzer harness (clang, ASan + UBSan) and runs it for the given
# number of seconds from its seed corpus. Ends with "N passed, M failed".
#   fuzz/seeds/NAME/   seed inputs of fuzz_NAME (optional)
#   fuzz/fuzz_NAME.dict a libFuzzer dictionary (optional)
# A new harness needs no edit here. The examples are compiled once (build-fuzz/obj, rebuilt when a
# source or header is newer) and linked into every harness, so the run takes about
# (number of harnesses) x seconds plus one build. FUZZ_ONLY=REGEX runs only the matching harnesses.
# ASan keeps 16 MB of freed memory in quarantine instead of 256 MB (unless ASAN_OPTIONS says
# otherwise): every run frees far less than that, so a use after free within a run is still caught,
# and the harnesses run 2-3x faster (the big quarantine made most of the time page faults).
set -u
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16}
cd "$(dirname "$0")/.."
secs=${1:-60}
only=${FUZZ_ONLY:-.}
passed=0; failed=0
cflags="-std=c99 -g -O1 -fno-sanitize-recover=all -D_POSIX_C_SOURCE=200809L -I. $(for d in examples/*/; do printf -- "-I%s " "${d%/}"; done)"
mkdir -p build-fuzz/obj
newest=$(ls -t quarot.h examples/*/*.h 2>/dev/null | head -n 1)
objs=""
for src in examples/*/*.c; do
    obj="build-fuzz/obj/$(echo "${src#examples/}" | tr / _ | sed 's/\.c$/.o/')"
    objs="$objs $obj"
    if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || [ "$newest" -nt "$obj" ]; then
        if ! clang $cflags -fsanitize=fuzzer-no-link,address,undefined -c "$src" -o "$obj" > build-fuzz/obj/build.log 2>&1; then
            echo "  FAIL $src (build)"; sed 's/^/    /' build-fuzz/obj/build.log | head -n 20; rm -f "$obj"
            echo "0 passed, 1 failed"; exit 1
        fi
    fi
done
for src in fuzz/fuzz_*.c; do
    [ -e "$src" ] || continue
    name=$(basename "$src" .c)
    echo "$name" | grep -Eq -- "$only" || continue
    if ! clang $cflags -fsanitize=fuzzer,address,undefined "$src" $objs -o "build-fuzz/$name" -lm \
         > "build-fuzz/$name.log" 2>&1; then
        echo "  FAIL $name (build)"; sed 's/^/    /' "build-fuzz/$name.log" | head -n 20; failed=$((failed + 1)); continue
    fi
    corpus="build-fuzz/corpus-$name"; mkdir -p "$corpus"
    seeds="fuzz/seeds/${name#fuzz_}"
    dict="fuzz/$name.dict"
    if "build-fuzz/$name" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
         $( [ -f "$dict" ] && echo "-dict=$dict" ) \
         -artifact_prefix="build-fuzz/$name-" "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) > "build-fuzz/$name.run.log" 2>&1; then
        echo "  ok   $name ($(grep -E 'stat::number_of_executed_units' "build-fuzz/$name.run.log" | awk '{print $2}') runs in ${secs}s," \
             "$(grep -E '^#[0-9]+.*(DONE|INITED)' "build-fuzz/$name.run.log" | tail -n 1 | grep -Eo 'cov: [0-9]+ ft: [0-9]+'))"
        passed=$((passed + 1))
    else
        echo "  FAIL $name"; grep -E -A20 'ERROR|SUMMARY' "build-fuzz/$name.run.log" | head -n 40; failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
