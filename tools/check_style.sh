#!/usr/bin/env bash
# check_style.sh FILE... - the checkable part of the header's style (STYLE.md, .clang-format).
#   every file:  no line longer than STYLE_WIDTH (120) columns
#   a file with a TABLE OF CONTENTS (quarot.h):  the table lists every "// >>name" section marker once,
#                in file order; the declaration half and the implementation half (split at the
#                IMPLEMENTATION banner) open the same sections in the same order, the kernel bodies
#                after the implementation (the _body sections) included; no section of the
#                implementation runs past STYLE_SECTION_MAX (600) lines.
# Ends with "N passed, M failed" (one check per file and rule).
set -u
width=${STYLE_WIDTH:-120}; section_max=${STYLE_SECTION_MAX:-600}
passed=0; failed=0
result() {   # status, what
    if [ "$1" -eq 0 ]; then passed=$((passed + 1)); echo "  ok   $2"; else failed=$((failed + 1)); echo "  FAIL $2"; fi
}
for f in "$@"; do
    long=$(awk -v w="$width" 'length($0) > w { printf "    %s:%d: %d columns\n", FILENAME, FNR, length($0); n++ }
                              END { exit n > 0 }' "$f")
    result $? "$f: lines of at most $width columns"
    [ -n "$long" ] && echo "$long" | head -n 20
    grep -q '^TABLE OF CONTENTS' "$f" || continue
    out=$(awk -v max="$section_max" '
        /^TABLE OF CONTENTS/ { toc = 1; next }
        toc && /^[ \t]*$/ { toc = 0 }
        toc && /^    >>/ { t = $1; sub(/^>>/, "", t); ntoc++; tocname[ntoc] = t; next }
        /=  IMPLEMENTATION  =/ { half = 1 }
        /^\/\/ >>[A-Za-z0-9_]+/ {
            name = $2; sub(/^>>/, "", name)
            if (half) { ni++; impl[ni] = name; start[ni] = NR } else { nd++; decl[nd] = name }
            if (!seen[name]++) { nu++; order[nu] = name }
        }
        END {
            bad = 0
            if (nu != ntoc) { printf "    the table lists %d sections, the file opens %d\n", ntoc, nu; bad = 1 }
            for (i = 1; i <= nu || i <= ntoc; i++)
                if (order[i] != tocname[i]) { printf "    section %d: table \"%s\", file \"%s\"\n", i, tocname[i], order[i]; bad = 1; break }
            if (nd != ni) { printf "    %d markers in the declarations, %d in the implementation\n", nd, ni; bad = 1 }
            for (i = 1; i <= nd || i <= ni; i++)
                if (decl[i] != impl[i]) { printf "    marker %d: declarations \"%s\", implementation \"%s\"\n", i, decl[i], impl[i]; bad = 1; break }
            start[ni + 1] = NR + 1
            for (i = 1; i <= ni; i++)
                if (start[i + 1] - start[i] > max) { printf "    >>%s: %d lines\n", impl[i], start[i + 1] - start[i]; big = 1 }
            exit bad * 1 + big * 2
        }' "$f")
    rc=$?
    result $((rc & 1)) "$f: table of contents and section markers agree"
    result $((rc & 2)) "$f: implementation sections of at most $section_max lines"
    [ -n "$out" ] && echo "$out"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
