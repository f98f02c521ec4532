/* qx_convert.h - what a checkpoint needs besides its tensors when it changes format (what
   `quarot rotate IN OUT` uses when OUT's format is not IN's).

   Formats and the output paths that select them (qx_convert_format_of_path):
     *.bin          llama2.c (legacy v0 unless IN was a version-1 export)
     *.gguf         GGUF (llama, qwen2, qwen3)
     *.safetensors  one safetensors file (config.json beside it)
     anything else  no opinion: `--format`, else IN's format (a safetensors OUT is then a directory)
   Where the formats differ:
     - RoPE row order of q/k (and qwen3's q/k norms): llama2.c and llama GGUF store the interleaved
       layout, Hugging Face and qwen2/qwen3 GGUF the half-split one (qx_convert_interleaved); the
       writer permutes rows when the two differ (qx_rope_src_row).
     - GGUF metadata: a GGUF input keeps its key/value pairs; anything else gets the <arch>.* keys
       from its config (qx_gguf_kv_from_config) and, for a llama2.c model with its tokenizer.bin, the
       vocabulary as llama.cpp's SentencePiece arrays (qx_convert_gguf_kv):
         tokenizer.ggml.model "llama", tokens (U+2581 for the spaces llama2.c's export wrote, "<s>" /
         "</s>" for its "\n<s>\n" / "\n</s>\n"), scores, token_type (2 unknown for id 0, 3 control for
         BOS 1 / EOS 2, 6 byte for "<0xXX>", 1 normal), bos/eos/unknown ids 1/2/0, add_bos_token true.
     - config.json: the input's (Hugging Face) or one generated from the config, with torch_dtype set
       to the dtype the matrices were written in (qx_convert_hf_config).
     - Hugging Face side files (QX_CONVERT_HF_FILES: tokenizer.json, tokenizer_config.json,
       generation_config.json, special_tokens_map.json, tokenizer.model) are copied from the input's
       directory into an output directory.
     - Tokenizers of real models (qx_convert_tok_to_gguf / qx_convert_tok_to_hf, serialized by the
       tokenizer module, qx_tok_write.h): a Hugging Face directory's tokenizer.json (+
       tokenizer_config.json) becomes tokenizer.ggml.* pairs in a GGUF output (padded with
       "[PAD<id>]" unused tokens up to the model's vocabulary, as llama.cpp's converter does), and a
       GGUF's tokenizer.ggml.* becomes tokenizer.json + tokenizer_config.json in a safetensors output
       directory. Kinds: SentencePiece BPE ("llama") and byte-level BPE ("gpt2" with merges and a
       `pre` llama.cpp names). A tokenizer that cannot be converted is reported by the caller as a
       warning (the model itself is still written).
   Not converted: llama2.c's tokenizer into tokenizer.json. */
#ifndef QX_CONVERT_H
#define QX_CONVERT_H

#include "formats/qx_json.h"
#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "llama2c", "gguf", "safetensors" for a path ending in .bin, .gguf, .safetensors; NULL otherwise. */
const char* qx_convert_format_of_path(const char* path);

/* The RoPE layout a format stores q/k rows in: 1 interleaved (llama2.c, llama GGUF), 0 half-split
   (safetensors, qwen2/qwen3 GGUF). fmt: a source_format or a qx_convert_format_of_path name. */
int qx_convert_interleaved(const char* fmt, const char* arch);

/* GGUF key/value pairs ("gguf.kv" blob format) for a store that did not come from GGUF: the config
   keys, plus the llama2.c tokenizer at tokenizer_path (NULL: none) as tokenizer.ggml.* arrays. */
quarot_result qx_convert_gguf_kv(const qx_store* s, const char* tokenizer_path, qx_sb* out, qx_err* e);

/* config.json text for s (qx_hf_config_write) with "torch_dtype" set to torch_dtype ("float32",
   "float16", "bfloat16"; NULL: as qx_hf_config_write has it). */
quarot_result qx_convert_hf_config(const qx_store* s, const char* torch_dtype, qx_sb* out, qx_err* e);

/* Outcomes of the tokenizer conversions: note (cap bytes) gets one line for the summary. */
enum { QX_TOKCONV_ERROR = -2, QX_TOKCONV_UNFIT = -1, QX_TOKCONV_NONE = 0, QX_TOKCONV_DONE = 1 };

/* src_dir's tokenizer.json (+ tokenizer_config.json) appended to the "gguf.kv" blob kv as
   tokenizer.ggml.* pairs, padded to model_vocab tokens. DONE, NONE (no tokenizer.json), UNFIT (a
   kind or a file GGUF cannot hold / this reader refuses: note says why; kv unchanged) or ERROR (out
   of memory; e set). */
int qx_convert_tok_to_gguf(const char* src_dir, int64_t model_vocab, qx_sb* kv, char* note, size_t cap, qx_err* e);

/* The GGUF file's tokenizer.ggml.* written as tokenizer.json and tokenizer_config.json into the
   existing directory dst_dir (the caller publishes them). DONE, NONE (no tokenizer.ggml.tokens),
   UNFIT (note says why) or ERROR (cannot write / out of memory; e set). */
int qx_convert_tok_to_hf(const char* gguf_path, int64_t model_vocab, const char* dst_dir, char* note, size_t cap, qx_err* e);

/* "float32" / "float16" / "bfloat16" / "float64" for a dtype. */
const char* qx_convert_torch_dtype(quarot_dtype dt);

/* The Hugging Face files copied beside a model directory's weights, NULL-terminated. */
extern const char* const QX_CONVERT_HF_FILES[];

#ifdef __cplusplus
}
#endif
#endif
