#!/usr/bin/env bash
# Builds each fuzz/fuzz_*.c as a libFuzzer harness (clang, ASan + UBSan) and runs it for the given
# number of seconds from its seed corpus. Ends with "N passed, M failed".
#   fuzz/seeds/NAME/    seed inputs of fuzz_NAME (optional)
#   fuzz/fuzz_NAME.dict a libFuzzer dictionary (optional)
# A new harness needs no edit here. The run takes about (number of harnesses / FUZZ_JOBS) x seconds
# plus one build. FUZZ_ONLY=REGEX runs only the harnesses whose source path matches.
# ASan keeps 16 MB of freed memory in quarantine instead of 256 MB (unless ASAN_OPTIONS says
# otherwise): every run frees far less than that, so a use after free within a run is still caught,
# and the harnesses run 2-3x faster (the big quarantine made most of the time page faults).
set -u
cd "$(dirname "$0")/.."
. tests/jobs.sh
secs=${1:-60}
only=${FUZZ_ONLY:-.}
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16}
passed=0; failed=0
mkdir -p build-fuzz/obj
# The tool's sources are compiled once (instrumented, not linked with the fuzzer's main), then each
# harness links against them: far faster than compiling quarot.h's implementation per harness.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
INC="-I. -Iexamples"
objs=""; objfail=0
for c in examples/*/*.c; do
    o="build-fuzz/obj/$(echo "${c#examples/}" | tr / _ | sed 's/\.c$/.o/')"
    objs="$objs $o"
    if [ ! -e "$o" ] || [ "$c" -nt "$o" ] || [ quarot.h -nt "$o" ] || [ -n "$(find examples -name '*.h' -newer "$o" 2>/dev/null | head -n 1)" ]; then
        clang -std=c99 -g -O1 -fsanitize=fuzzer-no-link $SAN -D_POSIX_C_SOURCE=200809L $INC -c "$c" -o "$o" \
            > "$o.log" 2>&1 || { echo "  FAIL build $c"; sed 's/^/    /' "$o.log" | head -n 20; objfail=1; }
    fi
done
[ "$objfail" -eq 0 ] || { echo "0 passed, 1 failed"; exit 1; }
# Build every harness first, then run them FUZZ_JOBS at a time (default: the number of CPUs; each
# libFuzzer process runs on one core), each into its own log, and report them in source order.
names=""
for src in fuzz/fuzz_*.c; do
    [ -e "$src" ] || continue
    echo "$src" | grep -Eq -- "$only" || continue
    name=$(basename "$src" .c)
    if ! clang -std=c99 -g -O1 -fsanitize=fuzzer $SAN -D_POSIX_C_SOURCE=200809L $INC "$src" $objs \
         -o "build-fuzz/$name" -lm > "build-fuzz/$name.log" 2>&1; then
        echo "  FAIL $name (build)"; sed 's/^/    /' "build-fuzz/$name.log" | head -n 20; failed=$((failed + 1)); continue
    fi
    names="$names $name"
done
run_one() {   # name: runs the harness for $secs seconds
    local name=$1 corpus="build-fuzz/corpus-$1" seeds="fuzz/seeds/${1#fuzz_}" dict="fuzz/$1.dict"
    mkdir -p "$corpus"
    "build-fuzz/$name" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
        $( [ -f "$dict" ] && echo "-dict=$dict" ) \
        -artifact_prefix="build-fuzz/$name-" "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) > "build-fuzz/$name.run.log" 2>&1
}
jobs_max=$(jobs_limit "${FUZZ_JOBS:-}")
for name in $names; do
    jobs_start "$jobs_max" "build-fuzz/$name.rc" run_one "$name"
done
wait
for name in $names; do
    if [ "$(jobs_rc "build-fuzz/$name.rc")" -eq 0 ]; then
        echo "  ok   $name ($(grep -E 'stat::number_of_executed_units' "build-fuzz/$name.run.log" | awk '{print $2}') runs in ${secs}s," \
             "$(grep -E '^#[0-9]+.*(DONE|INITED)' "build-fuzz/$name.run.log" | tail -n 1 | grep -Eo 'cov: [0-9]+ ft: [0-9]+'))"
        passed=$((passed + 1))
    else
        echo "  FAIL $name"; grep -E -A20 'ERROR|SUMMARY' "build-fuzz/$name.run.log" | head -n 40; failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
