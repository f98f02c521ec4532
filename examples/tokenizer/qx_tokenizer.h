/* qx_tokenizer.h - THE tokenizer API of the tool, for every kind: llama2.c's tokenizer.bin (this
   file's loader, below), and real models' vocabularies (SentencePiece BPE, byte-level BPE) from GGUF
   metadata or tokenizer.json (qx_tok_load.h loads them into a qx_tokenizer; qx_vocab.h has the
   algorithms). encode / decode / max_tokens below work on all of them; for a vocabulary tokenizer
   `vocab` is set and bos / eos mean the model's BOS / EOS ids (bos_id, eos_id).

   llama2.c's tokenizer.bin: load, encode (exactly as run.c), decode.

   File format (little-endian): uint32 max_token_length, then for each token id 0..vocab-1:
   float32 score, uint32 len, len bytes of the piece (sentencepiece's U+2581 already turned into ' ').
   The file does not store the vocabulary size: pass it (the model's vocab) or 0 to read to the end.

   Encoding is run.c's `encode` (sentencepiece BPE with byte fallback):
     1. [BOS = 1 if asked]; a dummy-prefix " " token when the text is non-empty;
     2. each UTF-8 codepoint (a byte and at most 3 following continuation bytes) becomes its token
        when the vocabulary has it, else one token per byte: id = byte + 3 (<0xXX> tokens);
     3. repeatedly merge the adjacent pair whose concatenated piece is in the vocabulary with the
        highest score (> -1e10; the leftmost pair on ties) until no pair merges;
     4. [EOS = 2 if asked].
   run.c rescans the whole sequence per merge (quadratic); this one keeps a linked list of symbols
   and a heap of candidate pairs ordered by (score desc, position asc), discarding stale entries
   when popped, which yields the same merges in the same order in O(n log n).
   Conventions where run.c is undefined or crashes, kept identical in the tests' slow port:
     - pieces are C strings in run.c: a piece is cut at its first NUL byte;
     - equal pieces: lookups give the lowest id;
     - no " " token: the dummy prefix falls back to byte 0x20 (id 35);
     - the text is (pointer, length) and may contain NUL bytes (run.c stops at the first), which
       encode as their byte token <0x00> (id 3);
     - a byte-fallback id outside the vocabulary is an error (QUAROT_ERR_PARSE), not a wild index. */
#ifndef QX_TOKENIZER_H
#define QX_TOKENIZER_H

#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_tokenizer {
    int32_t vocab_size;
    uint32_t max_token_length;   /* as stored in the file */
    float* scores;               /* [vocab_size] */
    char** pieces;               /* [vocab_size], NUL-terminated, into one block */
    int32_t* lens;               /* [vocab_size], strlen of each piece */
    int32_t max_len;             /* longest piece actually present */
    int32_t* hash;               /* open-addressing table of ids, -1 = empty; piece -> lowest id */
    uint64_t hash_mask;
    char* blob;                  /* the pieces' bytes */
    unsigned char byte_pieces[512];  /* "\xNN\0" for decode's raw bytes */
    /* every kind: */
    struct qx_vocab* vocab;      /* GGUF / tokenizer.json vocabulary; NULL for tokenizer.bin */
    int32_t bos_id, eos_id;      /* -1 = none (tokenizer.bin: 1 and 2) */
    int add_bos;                 /* the model adds BOS to a prompt (add_bos_token; tokenizer.bin: 1) */
    char kind[64];               /* "llama2.c", "SentencePiece BPE", "byte-level BPE (pre qwen2)", ... */
} qx_tokenizer;

#define QX_TOK_BOS 1
#define QX_TOK_EOS 2

/* Load from a file / a buffer (copied; the buffer may be freed afterwards). vocab_size > 0: exactly
   that many tokens and nothing after them; 0: as many as the data holds. Checks every length against
   the remaining bytes and against max_token_length (which must be <= 65536). name labels messages
   (memory: NULL = "<memory>"). On failure *t is left empty (qx_tokenizer_free is harmless). */
quarot_result qx_tokenizer_load(qx_tokenizer* t, const char* path, int32_t vocab_size, qx_err* err);
quarot_result qx_tokenizer_load_memory(qx_tokenizer* t, const void* data, size_t size, int32_t vocab_size,
                                       const char* name, qx_err* err);
void qx_tokenizer_free(qx_tokenizer* t);

/* Id of the piece equal to the len bytes at s (lowest such id), or -1. */
int32_t qx_tokenizer_lookup(const qx_tokenizer* t, const char* s, size_t len);

/* The BOS a perplexity / calibration window starts with: the tokenizer's BOS when the model adds
   one (add_bos_token; tokenizer.bin: 1), else -1 (no BOS, e.g. Qwen2, GPT-2). */
int32_t qx_tokenizer_window_bos(const qx_tokenizer* t);

/* Most tokens encode can produce for len bytes of text, any kind: 4 * len + 5 (tokenizer.bin needs
   len + 3: BOS, dummy prefix, EOS; SentencePiece turns " " into 3 bytes that may fall back to byte
   tokens and prefixes every fragment after a special token with one more "▁": at most 3 per raw byte,
   3 + 1 per special token, BOS and EOS). */
int64_t qx_tokenizer_max_tokens(size_t len);

/* Encode len bytes of text into tokens[0..*n_tokens). cap is the room in tokens; when it is too small
   the result is QUAROT_ERR_WORKSPACE and *n_tokens holds the count needed (cap >=
   qx_tokenizer_max_tokens(len) always suffices). bos / eos: nonzero adds token 1 / 2 (vocabulary
   tokenizers: bos_id / eos_id, when they have one; their text must be valid UTF-8, and added tokens
   of type USER_DEFINED in the text become their ids). Allocates its
   own work memory (at most about 90 bytes per input byte); the tokenizer is not modified, so
   threads may share it. */
quarot_result qx_tokenizer_encode(const qx_tokenizer* t, const char* text, size_t len, int bos, int eos,
                                  int32_t* tokens, int64_t cap, int64_t* n_tokens, qx_err* err);

/* The text of token `token` after token `prev` (run.c's decode): after BOS a leading space is
   dropped; a piece "<0xXX>" (two hex digits) stands for the raw byte XX. Returns a pointer into the
   tokenizer (valid while it lives) and its byte count in *len (may be NULL); NULL when token is out
   of range. Vocabulary tokenizers: the token's text (qx_vocab.h); a leading space is dropped after
   BOS for SentencePiece vocabularies. The bytes may be any value: see qx_tokenizer_safe_piece for printing. */
const char* qx_tokenizer_decode(const qx_tokenizer* t, int32_t prev, int32_t token, size_t* len);
/* run.c's safe_printf filter: 0 for a one-byte piece that is neither printable nor whitespace. */
int qx_tokenizer_safe_piece(const char* piece, size_t len);

/* Read a whole text file and encode it as one text (bos/eos as above). *n_tokens gets the count;
   *tokens_out (may be NULL) gets a malloc'ed array of them (free with free()). */
quarot_result qx_tokenize_file(const qx_tokenizer* t, const char* path, int bos, int eos, int32_t** tokens_out,
                               int64_t* n_tokens, qx_err* err);

#ifdef __cplusplus
}
#endif
#endif
