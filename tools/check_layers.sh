#!/bin/sh
# check_layers.sh [ROOT] - the layering of the quarot tool's folders under ROOT/examples/ (ROOT
# defaults to the repository this script sits in). Lowest first:
#   1 support/    error type, tensor store, files, threads, arena, block cache, strings, quarot_impl.c
#   2 formats/    JSON, YAML, safetensors, GGUF, llama2.c, packed W4A4, qx_load_model
#   3 tokenizer/
#   4 model/      forward pass, adapters, online hooks, synthetic models, logits, scoring windows
#   5 pipeline/   streaming rotate writer, format conversion, layer-wise rotation
#   6 eval/ and engine/ (siblings: neither includes the other)
#   7 cli/        the commands and the shared CLI code
# Every #include "..." of examples/*/*.c and examples/*/*.h must name a header with its folder
# ("formats/qx_gguf.h", also within the same folder) or be "quarot.h", and a folder may include only
# itself and the folders below it. Offences are printed one a line,
#   FILE:LINE: #include "X": RULE
# (and a file in a folder the table above does not place: FILE: folder F/ is not in the layering),
# then "layers: N files checked, M violations"; the exit status is 1 when M > 0 (2 on bad usage).
# The programs examples/*.c, tests/, bench/ and fuzz/ may include anything (with a single include
# root, -I. -Iexamples, a tool header without its folder does not compile there).
set -u
root=${1:-$(dirname "$0")/..}
if [ ! -d "$root/examples" ]; then
    echo "check_layers: $root/examples: no such directory" >&2
    exit 2
fi
cd "$root" || exit 2
files=$(ls examples/*/*.c examples/*/*.h 2>/dev/null)
if [ -z "$files" ]; then
    echo "check_layers: no examples/*/*.c or *.h under $root" >&2
    exit 2
fi
awk '
function rank(d) {
    if (d == "support") return 1
    if (d == "formats") return 2
    if (d == "tokenizer") return 3
    if (d == "model") return 4
    if (d == "pipeline") return 5
    if (d == "eval" || d == "engine") return 6
    if (d == "cli") return 7
    return 0
}
function offend(what, rule) {
    printf "%s:%d: #include \"%s\": %s\n", FILENAME, FNR, what, rule
    bad++
}
function stray(d) {
    printf "%s: folder %s/ is not in the layering (give it a place in tools/check_layers.sh)\n", FILENAME, d
    bad++
}
FNR == 1 {
    nfiles++
    split(FILENAME, part, "/")
    own = part[2]
    if (rank(own) == 0) stray(own)
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
    inc = $0
    sub(/^[ \t]*#[ \t]*include[ \t]*"/, "", inc)
    sub(/".*$/, "", inc)
    if (inc == "quarot.h") next
    n = split(inc, seg, "/")
    if (n == 1) { offend(inc, "a tool header without its folder (write \"<folder>/" inc "\")"); next }
    if (n != 2 || rank(seg[1]) == 0) { offend(inc, "not a header of a tool folder (<folder>/<name>)"); next }
    if (rank(own) == 0) next
    dst = seg[1]
    if (rank(dst) > rank(own)) { offend(inc, own "/ may not include " dst "/, a folder above it"); next }
    if (rank(dst) == rank(own) && dst != own) offend(inc, own "/ and " dst "/ are siblings: neither includes the other")
}
END {
    printf "layers: %d files checked, %d violations\n", nfiles, bad
    exit (bad > 0 ? 1 : 0)
}
' $files
