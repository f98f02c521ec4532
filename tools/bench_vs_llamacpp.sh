#!/bin/sh
# bench_vs_llamacpp.sh LLAMA_BUILD_DIR [WORK_DIR] - the engine beside llama.cpp on the same CPU, same
# shapes, same thread counts. Not part of CI: llama.cpp is built by hand outside this repository, e.g.
#   cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF && cmake --build build -j --target llama-bench
# Steps: bench_engine --save writes its 7B-shaped 2-layer decoder (hidden 4096, intermediate 11008,
# 32 heads x 128, vocab 512); `quarot quantize` turns it into a Q4_0 GGUF; llama-bench runs
# -p 64,512 -n 16 -t 1,2 on it; bench_engine prints the engine's table for the same shapes. Run it on
# idle cores: both programs time wall clock.
set -eu
LLAMA=${1:?usage: tools/bench_vs_llamacpp.sh LLAMA_BUILD_DIR [WORK_DIR]}
WORK=${2:-/tmp/quarot_vs_llamacpp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH="$LLAMA/bin/llama-bench"
[ -x "$BENCH" ] || BENCH="$LLAMA/llama-bench"
[ -x "$BENCH" ] || { echo "no llama-bench under $LLAMA (bin/llama-bench or llama-bench)" >&2; exit 1; }
make -C "$ROOT" -s build/quarot build/bench/bench_engine
mkdir -p "$WORK"
"$ROOT/build/bench/bench_engine" --layers 2 --save "$WORK/model"
# llama.cpp loads no GGUF without a tokenizer: any 512-token one fits the vocab (stories260K's by default)
TOK=${TOKENIZER:-$ROOT/../shared/models/stories260K/tok512.bin}
[ -f "$TOK" ] || { echo "no tokenizer $TOK (set TOKENIZER=FILE: a 512-token llama2.c or GGUF tokenizer)" >&2; exit 1; }
"$ROOT/build/quarot" quantize "$WORK/model" "$WORK/model-q4_0.gguf" --force --tokenizer "$TOK"
echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs"
echo "== quarot.h commit: $(git -C "$ROOT" rev-parse --short HEAD)"
echo "== llama.cpp commit: ${LLAMA_COMMIT:-$(git -C "$LLAMA/.." rev-parse --short HEAD 2>/dev/null || echo unknown)}"
echo "== $BENCH -m $WORK/model-q4_0.gguf -p 64,512 -n 16 -t 1,2"
"$BENCH" -m "$WORK/model-q4_0.gguf" -p 64,512 -n 16 -t 1,2
echo "== $ROOT/build/bench/bench_engine --layers 2"
"$ROOT/build/bench/bench_engine" --layers 2
