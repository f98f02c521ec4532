#!/usr/bin/env bash
# The compile matrix of quarot_impl_test.c: every build must compile without a warning (warnings are
# errors) and its program must run and report ok. Ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
. tests/jobs.sh
out=build-matrix; mkdir -p $out
passed=0; failed=0
WARN_C="-std=c99 -Wall -Wextra -pedantic -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wconversion -Wdouble-promotion -Wundef"
WARN_CXX="-std=c++11 -fno-exceptions -fno-rtti -Wall -Wextra -pedantic -Werror -Wshadow -Wconversion -Wdouble-promotion -Wundef"
# Each case compiles the whole implementation (tens of seconds at -O1), so the cases run MATRIX_JOBS
# at a time (default: the number of CPUs), each into its own log, and are reported in the order given.
jobs_max=$(jobs_limit "${MATRIX_JOBS:-}")
names=""
build_and_run() {   # name, runner, compiler and flags...
    local name=$1 runner=$2; shift 2
    "$@" -o "$out/$name" -lm > "$out/$name.log" 2>&1 && $runner "$out/$name" >> "$out/$name.log" 2>&1
}
run_case() {   # name, runner, compiler and flags...: starts the case; its status goes to NAME.rc
    names="$names $1"
    jobs_start "$jobs_max" "$out/$1.rc" build_and_run "$@"
}
for cc in gcc clang; do
    command -v $cc >/dev/null || { echo "  skip $cc (not installed)"; continue; }
    cxx=g++; [ $cc = clang ] && cxx=clang++
    # Every instruction set with external linkage; linkage and allocator hooks (which no ISA changes)
    # on the widest one, where the most code is compiled.
    for case in nosimd-extern avx2-extern native-extern native-static native-alloc; do
        case ${case%-*} in nosimd) iflags="-DQUAROT_NO_SIMD";; avx2) iflags="-mavx2 -mfma";; native) iflags="-march=native";; esac
        case ${case#*-} in extern) vflags="";; static) vflags="-DQUAROT_STATIC";; alloc) vflags="-DIMPL_TEST_ALLOCATOR";; esac
        run_case "$cc-c99-$case" "" $cc $WARN_C -O1 $iflags $vflags -I. quarot_impl_test.c
        run_case "$cc-cxx11-$case" "" $cxx $WARN_CXX -O1 $iflags $vflags -I. quarot_impl_test.cpp
    done
done
# The header by other paths: the implementation includes itself again by name (QUAROT_HEADER_FILE), which
# must resolve beside the header, not beside the includer or on the include path. No -I here.
mkdir -p $out/vendor && cp quarot.h $out/vendor/quarot_copy.h
# Include resolution is the preprocessor's, the same for every ISA: the scalar build keeps these quick.
run_case "gcc-c99-nosimd-relpath" "" gcc $WARN_C -O1 -DQUAROT_NO_SIMD -DQUAROT_STATIC '-DIMPL_TEST_HEADER="tests/../quarot.h"' quarot_impl_test.c
run_case "gcc-cxx11-nosimd-relpath" "" g++ $WARN_CXX -O1 -DQUAROT_NO_SIMD '-DIMPL_TEST_HEADER="tests/../quarot.h"' quarot_impl_test.cpp
run_case "gcc-c99-nosimd-renamed" "" gcc $WARN_C -O1 -DQUAROT_NO_SIMD "-DIMPL_TEST_HEADER=\"$out/vendor/quarot_copy.h\"" '-DQUAROT_HEADER_FILE="quarot_copy.h"' quarot_impl_test.c
if command -v clang >/dev/null; then
    run_case "clang-c99-nosimd-renamed" "" clang $WARN_C -O1 -DQUAROT_NO_SIMD "-DIMPL_TEST_HEADER=\"$out/vendor/quarot_copy.h\"" '-DQUAROT_HEADER_FILE="quarot_copy.h"' quarot_impl_test.c
fi
# One instruction set switched off below a wider one (AVX-512 kernels without the AVX2 ones).
run_case "gcc-c99-native-noavx2" "" gcc $WARN_C -O1 -march=native -DQUAROT_NO_AVX2 -I. quarot_impl_test.c
# Optional CBLAS routing, where a CBLAS is installed.
blas_h=$(ls /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h /usr/include/cblas.h 2>/dev/null | head -n 1)
if [ -n "$blas_h" ]; then
    run_case "gcc-c99-native-cblas" "" gcc $WARN_C -O1 -march=native -DQUAROT_USE_CBLAS -I"$(dirname "$blas_h")" -I. quarot_impl_test.c -lopenblas
else
    echo "  skip cblas (no cblas.h installed)"
fi
# NEON: Debian's aarch64 cross compiler, run under qemu-user.
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
    run_case "aarch64-c99-neon" "qemu-aarch64 -L /usr/aarch64-linux-gnu" aarch64-linux-gnu-gcc $WARN_C -O1 -I. quarot_impl_test.c
    run_case "aarch64-c99-nosimd" "qemu-aarch64 -L /usr/aarch64-linux-gnu" aarch64-linux-gnu-gcc $WARN_C -O1 -DQUAROT_NO_SIMD -I. quarot_impl_test.c
else
    echo "  skip aarch64 (cross compiler or qemu-user not installed)"
fi
wait
for name in $names; do
    if [ "$(jobs_rc "$out/$name.rc")" -eq 0 ]; then
        passed=$((passed + 1)); echo "  ok   $name"
    else
        failed=$((failed + 1)); echo "  FAIL $name"; sed 's/^/    /' "$out/$name.log" | head -n 30
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
