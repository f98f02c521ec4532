#!/usr/bin/env bash
# Runs the given test programs (with an optional runner prefix in $QT_RUNNER, e.g. qemu-aarch64),
# QT_JOBS at a time (default: the number of CPUs), shows their output in the order given, and ends
# with the sum of their "N passed, M failed, K skipped" lines. A program that crashes or prints no
# summary counts as one failure. The programs share nothing (each makes its own temporary
# directory), so running them side by side changes no result, only the wall time.
set -u
. "$(dirname "$0")/jobs.sh"
passed=0; failed=0; skipped=0
jobs=$(jobs_limit "${QT_JOBS:-}")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qt_run_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
run_one() {   # program, output file (its wall seconds go to FILE.s)
    local t0 rc
    t0=$(date +%s)
    ${QT_RUNNER:-} "$1" > "$2" 2>&1
    rc=$?
    echo $(( $(date +%s) - t0 )) > "$2.s"
    return $rc
}
i=0
for t in "$@"; do
    jobs_start "$jobs" "$tmp/$i.rc" run_one "$t" "$tmp/$i.out"
    i=$((i + 1))
done
wait
i=0
for t in "$@"; do
    name=$(basename "$t")
    out=$(cat "$tmp/$i.out" 2>/dev/null); rc=$(jobs_rc "$tmp/$i.rc")
    echo "$(cat "$tmp/$i.out.s" 2>/dev/null || echo 0) $name" >> "$tmp/times"
    i=$((i + 1))
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
# the slowest programs, for whoever keeps the suite fast (wall seconds, QT_JOBS side by side)
echo "slowest: $(sort -rn "$tmp/times" | head -n 6 | awk '{printf "%s%s %ss", (NR > 1 ? ", " : ""), $2, $1}')"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
