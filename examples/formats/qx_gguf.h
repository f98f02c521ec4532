/* qx_gguf.h - GGUF (llama.cpp / ggml) files <-> qx_store.

   Layout (v2 and v3, little-endian): "GGUF", u32 version, u64 tensor count, u64 key/value count;
   key/value pairs (key: u64 length + bytes; u32 value type; value: scalar, string = u64 length +
   bytes, or array = u32 element type + u64 count + elements, arrays may nest); tensor infos (name,
   u32 n_dims <= 4, n_dims x u64 ne[] innermost first, u32 ggml type, u64 offset); zero padding to
   general.alignment (default 32, a power of two); the data section, each tensor at an offset that
   is a multiple of the alignment. ggml's ne[] order is quarot_tensor's, so W[out][in] has
   ne = {in, out}.

   Reading (hostile input): every count, length and offset is bounded by the bytes that remain
   before it is used (no allocation larger than the file implies), nesting depth is bounded, keys
   and tensor names must be unique, tensor names shorter than 256 bytes without NUL, ne[] products
   must not overflow, tensors of known element size must lie inside the data section without
   overlapping. Loading into a store needs general.architecture "llama" (Mistral's GGUF files are
   "llama" too), "qwen2" (q/k/v biases: blk.N.attn_q.bias, ...) or "qwen3" (per-head q/k norms:
   blk.N.attn_q_norm.weight, blk.N.attn_k_norm.weight) or "phi3" (fused blk.N.attn_qkv.weight = q|k|v
   and blk.N.ffn_up.weight = gate|up, stored as self_attn.qkv_proj / mlp.gate_up_proj; NEOX RoPE)
   or "qwen2vl" (the text decoder of Qwen2-VL / Qwen2.5-VL, qwen2's keys under "qwen2vl." plus
   rope.dimension_sections summing to head_dim / 2; read as arch "qwen2" with the blob "gguf.vl"; its
   vision tower lives in a separate mmproj file not read here); any other is refused by name (gemma2 / gemma3 with the reason, qx_gemma_norms_reason). The <arch>.*
   keys (embedding_length, feed_forward_length, block_count, attention.head_count[_kv],
   attention.key_length, attention.layer_norm_rms_epsilon, rope.freq_base, context_length,
   vocab_size) map to quarot_model_config with arch = the GGUF name; rope_interleaved = 1 for llama
   (llama.cpp's converter permutes its q/k rows into the interleaved RoPE layout, ROPE_TYPE_NORM)
   and 0 for qwen2/qwen3 (NEOX RoPE: the rows stay in Hugging Face's half-split order); tied when
   there is no output.weight. F32,
   F16, BF16 and F64 tensors load (views of the mapping when aligned, else copies); Q4_0 and Q8_0
   tensors load dequantized into F32 copies (row by row, exactly ggml's formula, see below); other
   quantized types (Q4_1, K-quants, IQ*, ...) and integer types are refused with the tensor's name
   and type. Names map to Hugging Face's through one table (qx_gguf_name_to_hf / _from_hf); names
   outside it pass through unchanged. All key/value pairs are kept verbatim as blob "gguf.kv"
   (u64 count + the pairs as in the file).

   Writing: the same plan / put (any order) / finish / abort scheme as qx_safetensors.h, one file
   through a temporary, never overwriting without force. Key/value pairs come from a blob in the
   "gguf.kv" format (kept verbatim and in order) with the caller's changes applied (replaced in
   place, removed, or appended); tensors keep the alignment of general.alignment. qx_gguf_save
   converts a store in Hugging Face's half-split RoPE layout (rope_interleaved = 0) to the
   interleaved one for llama (permuting q_proj/k_proj rows), and an interleaved qwen store back to
   half-split.

   Quantized tensors use ggml's two simplest block types (type ids and layouts as in ggml's ggml-common.h / ggml-quants.c,
   GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q8_0 = 8). A row of ne[0] elements (a multiple of 32) is cut into
   consecutive blocks of 32; every block starts with its scale d as an IEEE binary16 (2 bytes,
   little-endian), followed by the codes:
     Q4_0 (18 bytes): 16 bytes b[0..15]; element i (0..15) is the low nibble of b[i], element i+16
                      the high nibble of b[i]; value = (nibble - 8) * d, nibble - 8 in [-8, 7].
     Q8_0 (34 bytes): 32 signed bytes c[0..31]; value = c[i] * d.
   The product is taken in float (d converted from f16 exactly), as ggml's dequantize_row_* do. A
   tensor of such a type occupies ne[0]/32 blocks per row, rows contiguous. llama.cpp's file type
   key general.file_type says "mostly Q4_0" with 2 and "mostly Q8_0" with 7. */
#ifndef QX_GGUF_H
#define QX_GGUF_H

#include "formats/qx_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GGUF metadata value types (the numbers are the file format's). */
typedef enum qx_gguf_type {
    QX_GGUF_U8 = 0, QX_GGUF_I8 = 1, QX_GGUF_U16 = 2, QX_GGUF_I16 = 3, QX_GGUF_U32 = 4, QX_GGUF_I32 = 5,
    QX_GGUF_F32 = 6, QX_GGUF_BOOL = 7, QX_GGUF_STRING = 8, QX_GGUF_ARRAY = 9, QX_GGUF_U64 = 10,
    QX_GGUF_I64 = 11, QX_GGUF_F64 = 12
} qx_gguf_type;

/* ggml tensor types this code reads and writes (others are only named in messages). */
#define QX_GGML_F32 0
#define QX_GGML_F16 1
#define QX_GGML_F64 28
#define QX_GGML_BF16 30
#define QX_GGML_Q4_0 2
#define QX_GGML_Q8_0 8
#define QX_GGML_QK 32               /* elements per Q4_0 / Q8_0 block */
#define QX_GGML_Q4_0_BLOCK 18       /* bytes per block: f16 d + 16 bytes of nibbles */
#define QX_GGML_Q8_0_BLOCK 34       /* f16 d + 32 int8 */
#define QX_LLAMA_FTYPE_Q4_0 2       /* general.file_type values (llama.cpp's LLAMA_FTYPE_MOSTLY_*) */
#define QX_LLAMA_FTYPE_Q8_0 7

/* Bytes of one row of n elements of ggml type `type` (F32, F16, BF16, F64, Q4_0, Q8_0); 0 when the
   type is not one of these or n is not a multiple of the block (32) for Q4_0 / Q8_0. */
uint64_t qx_ggml_row_bytes(uint32_t type, int64_t n);
/* Encodes one row of n elements (a multiple of 32) as Q4_0 or Q8_0 blocks into out
   (qx_ggml_row_bytes(type, n) bytes) from integer codes q[n] and one scale per block
   scales[n/32] (the value of element i is q[i] * scales[i/32]). Each scale is rounded to f16
   (nearest even); codes must lie in [-8, 7] (Q4_0) or [-128, 127] (Q8_0). Errors (nothing
   guaranteed written): a code out of range, a scale that is not finite or overflows f16 ->
   QUAROT_ERR_INVALID_ARGUMENT / QUAROT_ERR_NONFINITE; `what` names the tensor in e. */
quarot_result qx_ggml_encode_row(uint32_t type, const int8_t* q, const float* scales, int64_t n, void* out,
                                 const char* what, qx_err* e);
/* Decodes one row of n elements (a multiple of 32) of Q4_0 / Q8_0 blocks into out[n] with ggml's
   formula (see above). Other types: returns QUAROT_ERR_UNSUPPORTED_DTYPE. */
quarot_result qx_ggml_decode_row(uint32_t type, const void* blocks, int64_t n, float* out);

/* One key/value pair; pointers into the parsed image (strings are NOT NUL-terminated). */
typedef struct qx_gguf_kv {
    const char* key;
    uint64_t key_len;
    uint32_t type;              /* qx_gguf_type */
    const unsigned char* val;   /* scalar bytes; STRING: the characters; ARRAY: the first element */
    uint64_t val_len;           /* STRING: its length; scalars: their size; ARRAY: bytes of the elements */
    uint32_t arr_type;          /* ARRAY only */
    uint64_t arr_count;         /* ARRAY only */
    const unsigned char* raw;   /* the whole encoded pair, key included */
    uint64_t raw_len;
} qx_gguf_kv;

typedef struct qx_gguf_tinfo {
    const char* name;           /* into the image, name_len bytes */
    uint64_t name_len;
    uint32_t n_dims;
    int64_t ne[QUAROT_MAX_DIMS];   /* unused dimensions 1 */
    uint32_t type;              /* ggml type */
    uint64_t offset;            /* from the start of the data section */
    uint64_t nbytes;            /* 0 when the type's size is not known here */
} qx_gguf_tinfo;

typedef struct qx_gguf_file {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    qx_gguf_kv* kv;
    qx_gguf_tinfo* t;
    const unsigned char* kv_begin;   /* the key/value section as in the file */
    uint64_t kv_bytes;
    uint64_t data_offset;            /* of the data section in the image */
    const unsigned char* data;
    uint64_t data_len;
} qx_gguf_file;

/* Parses and validates an image (kept by the caller while f is used). */
quarot_result qx_gguf_parse(const void* buf, size_t len, const char* name, qx_gguf_file* f, qx_err* e);
void qx_gguf_file_free(qx_gguf_file* f);
/* Lookups by key; typed reads accept any integer type (range-checked) or F32/F64. */
const qx_gguf_kv* qx_gguf_find(const qx_gguf_file* f, const char* key);
quarot_result qx_gguf_kv_int(const qx_gguf_kv* kv, int64_t* out);
quarot_result qx_gguf_kv_float(const qx_gguf_kv* kv, double* out);
/* The string and its length (not NUL-terminated), or NULL when kv is not a string. */
const char* qx_gguf_kv_string(const qx_gguf_kv* kv, uint64_t* len);
/* "Q4_K", "F16", ... or "type 123". */
const char* qx_ggml_type_name(uint32_t type, char buf[16]);

typedef struct qx_gguf_read_opts {
    int copy;                   /* copy tensor data instead of viewing the mapping */
} qx_gguf_read_opts;

/* Loads a GGUF file into an EMPTY store; on failure the store is left empty. */
quarot_result qx_gguf_load(const char* path, qx_store* s, const qx_gguf_read_opts* opts, qx_err* e);
/* The same from memory (data copied), e.g. for fuzzing. */
quarot_result qx_gguf_read_mem(const void* buf, size_t len, const char* name, qx_store* s, qx_err* e);

/* Name mapping (one table, both directions): writes the other side's name into out (size n) and
   returns 1, or copies the name unchanged and returns 0 when it is not in the table; -1 when out
   is too small. "blk.N.attn_q.weight" <-> "model.layers.N.self_attn.q_proj.weight", ... */
int qx_gguf_name_to_hf(const char* gguf, char* out, size_t n);
int qx_gguf_name_from_hf(const char* hf, char* out, size_t n);

/* 1 if arch ("llama", "qwen2", "qwen3") is read and written here, and then *interleaved (may be NULL)
   = the RoPE layout of its q/k rows in GGUF files (1 llama, 0 qwen2/qwen3); else 0. */
int qx_gguf_arch_supported(const char* arch, int* interleaved);

/* A change to the key/value pairs: set key to a scalar or string, or remove it. */
typedef struct qx_gguf_set {
    const char* key;
    int type;                   /* qx_gguf_type (not ARRAY), or -1 to remove the key */
    uint64_t u;                 /* U8..U64, BOOL */
    int64_t i;                  /* I8..I64 */
    double f;                   /* F32, F64 */
    const char* str;            /* STRING */
} qx_gguf_set;

typedef struct qx_gguf_write_opts {
    int force;
    const qx_gguf_set* set;     /* changes, applied in order */
    int n_set;
    const uint32_t* block_types;/* NULL, or one per plan entry: 0 = the plan's dtype, QX_GGML_Q4_0 /
                                   QX_GGML_Q8_0 = stored as those blocks (ne[0] a multiple of 32), its
                                   bytes given through qx_gguf_writer_put_raw */
} qx_gguf_write_opts;

typedef struct qx_gguf_writer qx_gguf_writer;

/* kv / kv_len: pairs in the "gguf.kv" blob format (NULL: none). Plan names are the store's
   (Hugging Face) names; the file gets their GGUF names. Tensor dtypes F32, F16, BF16, F64. */
quarot_result qx_gguf_writer_begin(qx_gguf_writer** w, const char* path, const qx_tensor_plan* plan, int64_t n,
                                   const void* kv, size_t kv_len, const qx_gguf_write_opts* opts, qx_err* e);
quarot_result qx_gguf_writer_put(qx_gguf_writer* w, const char* name, const quarot_tensor* t, qx_err* e);
quarot_result qx_gguf_writer_put_permuted(qx_gguf_writer* w, const char* name, const quarot_tensor* t,
                                          int64_t head_dim, int to_interleaved, qx_err* e);
/* Rows [row0, row0 + t->ne[1]) of the 2-D tensor `name` (t: {ne[0], n}); windows in order from
   row 0, the tensor counts as written with its last row (the streamed embedding and lm_head). */
quarot_result qx_gguf_writer_put_rows(qx_gguf_writer* w, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e);
/* The encoded bytes of a tensor planned with a block type (qx_ggml_encode_row, rows in order);
   n must equal its planned size. Only for block-typed tensors. */
quarot_result qx_gguf_writer_put_raw(qx_gguf_writer* w, const char* name, const void* data, uint64_t n, qx_err* e);
/* The encoded bytes of rows [row0, row0 + rows) of a block-typed tensor (rows counted across the
   higher dimensions: expert e of a 3-D [n][out][in] is rows e * out ..), in order from row 0; n
   must be rows x its row bytes; the tensor counts as written with its last row. */
quarot_result qx_gguf_writer_put_raw_rows(qx_gguf_writer* w, const char* name, int64_t row0, int64_t rows, const void* data,
                                          uint64_t n, qx_err* e);
/* Checks every tensor was written, syncs, renames; frees w in every case. */
quarot_result qx_gguf_writer_finish(qx_gguf_writer* w, qx_err* e);
void qx_gguf_writer_abort(qx_gguf_writer* w);

typedef struct qx_gguf_save_opts {
    int force;
    quarot_dtype dtype;         /* DEFAULT: keep each tensor's */
    const qx_gguf_set* set;
    int n_set;
} qx_gguf_save_opts;

/* Writes a llama / qwen2 / qwen3 store: its "gguf.kv" blob (or pairs generated from its config when it came from
   elsewhere) with opts' changes, tensors under GGUF names, q/k rows made interleaved if needed. */
quarot_result qx_gguf_save(const qx_store* s, const char* path, const qx_gguf_save_opts* opts, qx_err* e);

/* The <arch>.* key/value pairs (in the blob format) that describe s->config (llama, qwen2, qwen3),
   general.architecture and general.file_type. */
quarot_result qx_gguf_kv_from_config(const qx_store* s, qx_sb* out, qx_err* e);

/* llama.cpp's Qwen2-VL / Qwen2.5-VL mmproj file (general.architecture "clip"): the vision tower,
   whose merger output projection mm.2.weight ([hidden][in], GGUF ne {in, hidden}) and mm.2.bias
   ([hidden]) write into the text model's residual stream. Stages at `out` (through o, a temporary:
   publish it with qx_out_publish, or qx_out_abort) a byte copy of `in` with those two tensors
   rotated on their output side by r1 (the text model's R1: quarot_command_apply, rounded once to
   their F32 / F16 / BF16 type; r1 NULL: copied unchanged). hidden must be the text model's; a
   missing tensor, another width, another architecture or type: an error naming it, nothing staged.
   *output_failed (may be NULL) is set to 1 when the failure was writing `out`, else 0. */
quarot_result qx_gguf_mmproj_stage(qx_out* o, const char* in, const char* out, int64_t hidden, const quarot_rotation* r1,
                                   int force, int* output_failed, qx_err* e);

/* Key/value pairs appended to a buffer in the file's encoding (also the "gguf.kv" blob's, after
   its u64 pair count), as every GGUF writer here builds them. Like every qx_sb append they never
   fail loudly: check b->failed once at the end.
     qx_gguf_put_str       a string value or STRING array element: u64 length, then the n bytes
     qx_gguf_put_f32       an F32 value or array element (its bits)
     qx_gguf_kv_key        a pair's key and value type; the value follows (qx_sb_le for a scalar)
     qx_gguf_kv_str / _u32 / _bool   a whole STRING / U32 / BOOL pair (bool: v != 0 -> 1)
     qx_gguf_kv_arr_begin  an ARRAY pair's key, element type and count; the count elements follow
   qx_gguf_kv_count_add adds n to the pair count that starts a blob b: -1 (b unchanged) when b is
   failed or shorter than the count's 8 bytes, else 0. */
void qx_gguf_put_str(qx_sb* b, const char* s, uint64_t n);
void qx_gguf_put_f32(qx_sb* b, float v);
void qx_gguf_kv_key(qx_sb* b, const char* key, uint32_t type);
void qx_gguf_kv_str(qx_sb* b, const char* key, const char* s, uint64_t n);
void qx_gguf_kv_u32(qx_sb* b, const char* key, uint32_t v);
void qx_gguf_kv_bool(qx_sb* b, const char* key, int v);
void qx_gguf_kv_arr_begin(qx_sb* b, const char* key, uint32_t elem, uint64_t count);
int qx_gguf_kv_count_add(qx_sb* b, uint64_t n);

#ifdef __cplusplus
}
#endif
#endif
