#!/usr/bin/env bash
# Builds each fuzz/fuzz_*.c as a libFuzzer harness (clang, ASan + UBSan) and runs it for the given
# number of seconds from its seed corpus. Ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
secs=${1:-60}
passed=0; failed=0
mkdir -p build-fuzz
for src in fuzz/fuzz_*.c; do
    [ -e "$src" ] || continue
    name=$(basename "$src" .c)
    if ! clang -std=c99 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
         -D_POSIX_C_SOURCE=200809L -I. $(for d in examples/*/; do printf -- "-I%s " "${d%/}"; done) "$src" examples/*/*.c -o "build-fuzz/$name" -lm \
         > "build-fuzz/$name.log" 2>&1; then
        echo "  FAIL $name (build)"; sed 's/^/    /' "build-fuzz/$name.log" | head -n 20; failed=$((failed + 1)); continue
    fi
    corpus="build-fuzz/corpus-$name"; mkdir -p "$corpus"
    seeds="fuzz/seeds/${name#fuzz_}"
    if "build-fuzz/$name" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
         -artifact_prefix="build-fuzz/$name-" "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) > "build-fuzz/$name.run.log" 2>&1; then
        echo "  ok   $name ($(grep -E 'stat::number_of_executed_units' "build-fuzz/$name.run.log" | awk '{print $2}') runs in ${secs}s)"
        passed=$((passed + 1))
    else
        echo "  FAIL $name"; grep -E -A20 'ERROR|SUMMARY' "build-fuzz/$name.run.log" | head -n 40; failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
