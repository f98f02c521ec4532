/* qx_tok_load.h - where a model's tokenizer comes from, and token ids given directly.

   qx_tokenizer_for_model picks, in this order:
     1. --tokenizer FILE when given: a GGUF file with tokenizer.ggml.* metadata, a Hugging Face
        tokenizer.json (tokenizer_config.json beside it is read for add_bos_token / add_eos_token and
        the BOS/EOS token names), a directory holding a tokenizer.json, or a llama2.c tokenizer.bin;
     2. the model itself when it is a GGUF file with tokenizer.ggml.tokens;
     3. tokenizer.json in the model's directory (a Hugging Face model);
     4. tok<vocab>.bin, tok512.bin or tokenizer.bin beside a llama2.c model.
   A tokenizer with more tokens than the model's vocabulary is refused.

   --tokens FILE (qx_tokens_read): token ids, whitespace separated, or a JSON array of integers
   (a JSON array of arrays is flattened in order); every id must be in [0, vocab). */
#ifndef QX_TOK_LOAD_H
#define QX_TOK_LOAD_H

#include "tokenizer/qx_tokenizer.h"
#include "tokenizer/qx_vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qx_gguf_file;

/* A vocabulary from a parsed GGUF file's tokenizer.ggml.* keys; 0 / 1: whether it has any. */
int qx_gguf_has_tokenizer(const struct qx_gguf_file* f);
quarot_result qx_vocab_from_gguf(qx_vocab* v, const struct qx_gguf_file* f, const char* name, qx_err* e);

/* A vocabulary from a tokenizer.json text (and optionally tokenizer_config.json's, may be NULL).
   Supported: model.type "BPE" with either a ByteLevel pre-tokenizer (alone, or after Split /
   Digits pre-tokenizers whose regexes qx_tok_pre.h knows: byte-level BPE) or a Metaspace
   pre-tokenizer / Prepend+Replace normalizer with byte_fallback (SentencePiece BPE). */
quarot_result qx_vocab_from_hf_json(qx_vocab* v, const char* json, size_t len, const char* config, size_t config_len,
                                    const char* name, qx_err* e);

/* Loads a tokenizer of any kind from one path (see 1. above); vocab_size is passed on to the
   llama2.c loader (0 = read to the end). */
quarot_result qx_tokenizer_load_any(qx_tokenizer* t, const char* path, int32_t vocab_size, qx_err* e);
/* Wraps a built vocabulary (taken over; *v is emptied) into t. */
quarot_result qx_tokenizer_from_vocab(qx_tokenizer* t, qx_vocab* v, qx_err* e);

/* The tokenizer of a model (see above). tok_opt: --tokenizer (NULL = search). model_vocab: the
   model's vocabulary size (0 = unknown). used (may be NULL) gets the path it came from. */
quarot_result qx_tokenizer_for_model(qx_tokenizer* t, const char* model_path, const char* tok_opt, int64_t model_vocab,
                                     char* used, size_t used_cap, qx_err* e);

/* The llama2.c tokenizer beside a model (step 4 above): the first regular file of tok<vocab>.bin
   (vocab > 0 and not 512), tok512.bin, tokenizer.bin in the model's directory (qx_model_dir).
   Returns 1 with its path in out (cap bytes), else 0; looked (may be NULL) gets the paths tried,
   separated by ", ", for the error line. */
int qx_tokenizer_find_bin(const char* model_path, int64_t vocab, char* out, size_t cap, char* looked, size_t looked_cap);

/* Reads --tokens FILE into a malloc'ed array. vocab > 0: every id must be below it. */
quarot_result qx_tokens_read(const char* path, int64_t vocab, int32_t** ids, int64_t* n, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
