#!/usr/bin/env bash
# Runs the given test programs (with an optional runner prefix in $QT_RUNNER, e.g. qemu-aarch64),
# shows their output, and ends with the sum of their "N passed, M failed, K skipped" lines.
# A program that crashes or prints no summary counts as one failure.
set -u
passed=0; failed=0; skipped=0
for t in "$@"; do
    name=$(basename "$t")
    out=$(${QT_RUNNER:-} "$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E "^$name: [0-9]+ passed, [0-9]+ failed" | tail -n 1)
    if [ -z "$line" ]; then
        echo "$name: crashed or printed no summary (exit $rc)"
        failed=$((failed + 1)); continue
    fi
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -nE 's/.* ([0-9]+) skipped.*/\1/p'); s=${s:-0}
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$name: exited with $rc"; failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
