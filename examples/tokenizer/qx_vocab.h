/* qx_vocab.h - vocabulary tokenizers of real models: SentencePiece-style BPE with byte fallback
   (Llama-2, Mistral, TinyLlama, Phi-3) and byte-level BPE (GPT-2, Llama-3, Qwen2/2.5/3, DeepSeek,
   MPT / GPT-NeoX), built from GGUF `tokenizer.ggml.*` metadata (qx_tok_gguf.c) or a Hugging Face
   tokenizer.json (qx_tok_json.c). Reached through qx_tokenizer (qx_tokenizer.h): one API for every
   kind; this header is the builder and the algorithms.

   Encoding (as llama.cpp's llama_tokenize, whose test vectors it must reproduce exactly):
     1. special tokens: the text is cut at occurrences of added tokens (token type USER_DEFINED
        always; CONTROL too when parse_special is set), leftmost first, the longest token at a
        position; each occurrence becomes its id, the rest is "raw text";
     2. SPM (kind QX_VOCAB_SPM): each raw fragment gets a leading " " when add_space_prefix is set
        and it is the first fragment or follows a special token; every " " becomes U+2581 "▁"; the
        fragment's UTF-8 characters are the initial symbols; repeatedly the adjacent pair whose
        concatenation is a token merges, the pair with the highest token score first (merges list
        present instead: the lowest merge rank), the leftmost on ties; a final symbol that is not a
        token becomes its bytes' tokens "<0xXX>" (byte fallback; else the unknown token);
     3. BPE (kind QX_VOCAB_BPE): each raw fragment is split by the pre-tokenizer (qx_tok_pre.h);
        every word's bytes are mapped to GPT-2's printable byte alphabet (bytes_to_unicode);
        with ignore_merges a word that is a token is emitted whole; else its characters merge by
        the merges list, the lowest rank first, the leftmost on ties; a final symbol that is not a
        token contributes the tokens of those of its single bytes that are tokens;
     4. BOS / EOS when asked.
   Text must be well-formed UTF-8 (an error names the byte offset). Token strings equal to each
   other: lookups give the highest id (llama.cpp's map keeps the last).

   Decoding: SPM pieces turn "▁" into " " and "<0xXX>" byte tokens into the byte; BPE pieces map
   the byte alphabet back to bytes; special tokens decode to their text. */
#ifndef QX_VOCAB_H
#define QX_VOCAB_H

#include "support/qx_store.h"
#include "tokenizer/qx_tok_pre.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { QX_VOCAB_SPM = 1, QX_VOCAB_BPE = 2 };

/* token types (GGUF tokenizer.ggml.token_type, llama.cpp's numbering) */
enum {
    QX_TT_UNDEFINED = 0, QX_TT_NORMAL = 1, QX_TT_UNKNOWN = 2, QX_TT_CONTROL = 3, QX_TT_USER_DEFINED = 4,
    QX_TT_UNUSED = 5, QX_TT_BYTE = 6
};

/* Limits on what a file may ask for (checked while building). */
#define QX_VOCAB_MAX_TOKENS 4000000
#define QX_VOCAB_MAX_MERGES 16000000
#define QX_VOCAB_MAX_PIECE 65536

typedef struct qx_vocab {
    int kind;                   /* QX_VOCAB_SPM / QX_VOCAB_BPE */
    qx_pre pre;                 /* BPE */
    int32_t n;                  /* tokens */
    char** text;                /* [n] piece bytes (NUL-terminated copies) */
    int32_t* len;               /* [n] */
    float* score;               /* [n] (SPM) */
    unsigned char* type;        /* [n] QX_TT_* */
    char** dec;                 /* [n] decoded bytes */
    int32_t* dec_len;           /* [n] */
    int32_t* hash;              /* piece -> id, open addressing, -1 empty */
    uint64_t hash_mask;
    int64_t n_merges;
    uint64_t* mkey;             /* merge table: key (left id << 32 | right id) + 1, 0 = empty */
    int32_t* mrank;             /* rank of each slot */
    int32_t* mres;              /* id of the merged piece, -1 when it is no token */
    uint64_t mmask;
    int use_merges;             /* SPM from tokenizer.json: merge by rank instead of by score */
    int32_t* special;           /* ids of USER_DEFINED and CONTROL tokens, longest text first */
    int32_t n_special;
    int32_t byte_tok[256];      /* SPM: <0xXX> (or the 1-byte piece) per byte, -1 none */
    int32_t bos, eos, unk;      /* -1 = none */
    int add_bos, add_eos, add_space_prefix, byte_fallback;
    int32_t max_len;
    char* blob;                 /* storage of text[] and dec[] */
    size_t blob_len, blob_cap;
} qx_vocab;

/* Building: begin (n tokens, all empty), set every token, add merges (BPE, or SPM with merges),
   then finish (checks, hash tables, decoded texts). Errors name `name` (the file) and the field. */
quarot_result qx_vocab_begin(qx_vocab* v, int kind, int64_t n_tokens, const char* name, qx_err* e);
quarot_result qx_vocab_set(qx_vocab* v, int32_t id, const char* text, size_t len, float score, int type,
                           const char* name, qx_err* e);
/* Pre-sizes the merge table (optional). */
quarot_result qx_vocab_reserve_merges(qx_vocab* v, int64_t n, const char* name, qx_err* e);
/* A merge "left right" of rank = the count of merges added before it. Both must be tokens. */
quarot_result qx_vocab_add_merge(qx_vocab* v, const char* left, size_t left_len, const char* right, size_t right_len,
                                 const char* name, const char* field, qx_err* e);
quarot_result qx_vocab_finish(qx_vocab* v, const char* name, qx_err* e);
/* Builds the piece -> id table once every token is set (finish and add_merge call it). */
quarot_result qx_vocab_index(qx_vocab* v, const char* name, qx_err* e);
void qx_vocab_free(qx_vocab* v);

int32_t qx_vocab_lookup(const qx_vocab* v, const char* s, size_t len);

/* Encodes text[0..len) (see above) into a malloc'ed array *out of *n ids. */
quarot_result qx_vocab_encode(const qx_vocab* v, const char* text, size_t len, int add_bos, int add_eos,
                              int parse_special, int32_t** out, int64_t* n, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
