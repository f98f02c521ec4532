/* qx_llama2c.h - read and write Karpathy's llama2.c checkpoints (float32 formats).

   Two layouts exist, both little-endian float32 after a header:

   legacy "v0" (run.c's format; export.py --version 0):
       int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len    (28 bytes)
       vocab_size < 0 means a separate classifier wcls follows at the end; > 0 a shared one.
       float32, each block for all layers in turn (kv_dim = n_kv_heads * dim / n_heads):
         token_embedding_table [vocab][dim]
         rms_att_weight [L][dim], wq [L][dim][dim], wk [L][kv_dim][dim], wv [L][kv_dim][dim],
         wo [L][dim][dim], rms_ffn_weight [L][dim], w1 [L][hidden][dim], w2 [L][dim][hidden],
         w3 [L][hidden][dim], rms_final_weight [dim],
         freq_cis_real [seq_len][head_dim/2], freq_cis_imag [seq_len][head_dim/2], [wcls [vocab][dim]]
   version 1 (export.py --version 1):
       uint32 magic 0x616b3432 ("ak42"), int32 version = 1, the same 7 int32 (vocab > 0),
       uint8 shared_classifier, zeros up to byte 256; then float32:
         rms_att [L][dim], rms_ffn [L][dim], rms_final [dim], token_embedding [vocab][dim],
         wq, wk, wv, wo, w1, w2, w3 (each for all layers), [wcls [vocab][dim]]   (no freq_cis)
   Version 2 (int8 Q8_0) and unknown versions are refused.

   Store names (Hugging Face style; [out][in] as run.c's matmul reads them, ne = {in, out}):
       model.embed_tokens.weight [vocab][dim]
       model.layers.{i}.input_layernorm.weight [dim]          (rms_att_weight)
       model.layers.{i}.self_attn.q_proj.weight [dim][dim]    (wq)
       model.layers.{i}.self_attn.k_proj.weight [kv_dim][dim] (wk)
       model.layers.{i}.self_attn.v_proj.weight [kv_dim][dim] (wv)
       model.layers.{i}.self_attn.o_proj.weight [dim][dim]    (wo)
       model.layers.{i}.post_attention_layernorm.weight [dim] (rms_ffn_weight)
       model.layers.{i}.mlp.gate_proj.weight [hidden][dim]    (w1)
       model.layers.{i}.mlp.down_proj.weight [dim][hidden]    (w2)
       model.layers.{i}.mlp.up_proj.weight [hidden][dim]      (w3)
       model.norm.weight [dim]
       lm_head.weight [vocab][dim]                            (only with a separate classifier)
       llama2c.freq_cis_real, llama2c.freq_cis_imag [seq_len][head_dim/2]   (v0 files only)
   q and k keep llama2.c's interleaved RoPE layout (config.rope_interleaved = 1: pairs (2i, 2i+1)).

   Errors name the file (or the `name` given for a memory buffer) and the reason. */
#ifndef QX_LLAMA2C_H
#define QX_LLAMA2C_H

#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qx_l2c_format {
    QX_L2C_DEFAULT = 0,   /* writing: the format the store was read from (source_format), else V0 */
    QX_L2C_V0 = 1,        /* legacy: 28-byte header, freq_cis tables, negative vocab = separate wcls */
    QX_L2C_V1 = 2         /* "ak42" version 1: 256-byte header, no freq_cis */
} qx_l2c_format;

/* What a header says, checked (sizes positive and consistent, no overflow) but not yet matched
   against the file size: expected_size is the exact byte count the header implies. */
typedef struct qx_l2c_header {
    qx_l2c_format format;
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;  /* vocab_size > 0 */
    int shared_classifier;   /* 1: the output projection is the embedding (no wcls / lm_head) */
    uint64_t header_bytes;   /* 28 (v0) or 256 (v1) */
    uint64_t n_floats;       /* float32 values after the header */
    uint64_t expected_size;  /* header_bytes + 4 * n_floats */
} qx_l2c_header;

/* Parse and check a header from the first `size` bytes of a file (size may be the whole file or
   just its start). Fails with QUAROT_ERR_PARSE (bad fields, truncated header), QUAROT_ERR_UNSUPPORTED
   (version 2 or unknown) or QUAROT_ERR_OVERFLOW. `name` labels the messages. */
quarot_result qx_l2c_parse_header(const void* data, size_t size, const char* name, qx_l2c_header* h, qx_err* err);

typedef struct qx_l2c_read_opts {
    int copy;       /* 1: tensors are owned heap copies; 0 (default): views of the mapping / buffer */
    int writable;   /* file views only: 1 maps the file copy-on-write (MAP_PRIVATE, PROT_WRITE) so
                       tensors may be edited in place; the file itself is never changed. 0: read-only
                       pages (call qx_store_make_owned before editing a tensor). */
} qx_l2c_read_opts;

/* Read a checkpoint (format detected from its first bytes) into *out, which this call initializes;
   out->config is filled (arch "llama", RMSNorm eps 1e-5, RoPE theta 10000 interleaved, SiLU gated
   MLP, tied_embeddings = shared classifier) and out->source_format set to "llama2c-v0"/"llama2c-v1".
   The file is mapped with mmap; views keep the mapping alive until qx_store_free. The file size must
   equal what the header implies. opts may be NULL (views, read-only). On failure *out is empty. */
quarot_result qx_l2c_read_file(const char* path, const qx_l2c_read_opts* opts, qx_store* out, qx_err* err);
/* The same from memory. With views (copy = 0) the buffer must outlive the store and the tensors point
   into it (writes through them modify the buffer); a buffer whose float data is not 4-byte aligned
   is copied instead. name labels messages (NULL: "<memory>"). */
quarot_result qx_l2c_read_memory(const void* data, size_t size, const char* name, const qx_l2c_read_opts* opts,
                                 qx_store* out, qx_err* err);

typedef struct qx_l2c_write_opts {
    qx_l2c_format format; /* DEFAULT: V1 if s->source_format is "llama2c-v1", else V0 (run.c reads V0) */
    int force;            /* 1: replace an existing output file; 0: refuse (QUAROT_ERR_IO) */
    int allow_extra;      /* 1: ignore store tensors the format has no place for; 0: refuse them */
} qx_l2c_write_opts;

/* Write the store as a llama2.c checkpoint. Shapes come from s->config (hidden, intermediate,
   n_layers, n_heads, n_kv_heads, vocab, max_seq) and every tensor is checked against them before
   anything is written. lm_head.weight present = separate classifier (v0: negative vocab; v1: flag 0).
   Tensors may be f32, f16, bf16 or f64, contiguous or strided: they are converted to float32
   (f64 rounds to nearest), since both formats are float32 only. V0 needs freq_cis tables: the store's
   llama2c.freq_cis_* are written verbatim when present (so read -> write gives identical bytes),
   otherwise computed in model.py's float32 steps, angle = pos * (1 / 10000^(2i/head_dim)), then
   cos/sin (within an ulp of PyTorch's tables; run.c no longer reads them).
   The config must describe what run.c computes (RMSNorm, eps 1e-5, theta 10000, interleaved RoPE,
   gated SiLU, no biases, no qk-norm, head_dim = hidden / n_heads): anything else is refused
   (QUAROT_ERR_UNSUPPORTED) rather than silently changing the model.
   The file appears atomically: it is written to a temporary beside `path`, fsync'd and renamed into
   place when complete; on any failure the temporary is removed and no output is left. opts may be
   NULL (DEFAULT format, no force, no extras). */
quarot_result qx_l2c_write_file(const qx_store* s, const char* path, const qx_l2c_write_opts* opts, qx_err* err);
/* The same bytes into a malloc'ed buffer (*data, *size; free with free()). opts->force is ignored. */
quarot_result qx_l2c_write_memory(const qx_store* s, const qx_l2c_write_opts* opts, void** data, size_t* size,
                                  qx_err* err);

/* Streaming writer (what `quarot rotate` uses to write layer by layer). The layout follows from the
   config alone (shapes as qx_l2c_write_file checks them; shared_classifier = 1: no lm_head.weight
   segment), so begin creates the temporary beside `path` and writes the header before any tensor
   exists; put writes one tensor (store name, f32/f16/bf16/f64, any strides, converted to float32)
   at its offset, in any order, each once; finish checks every tensor was written (v0 freq_cis
   tables not given are computed as qx_l2c_write_file does), syncs and renames into place, and
   frees w in every case; abort removes the temporary and frees w (NULL is fine).
   opts: format (DEFAULT = V0), force, allow_extra (put ignores names without a place). */
typedef struct qx_l2c_writer qx_l2c_writer;
quarot_result qx_l2c_writer_begin(qx_l2c_writer** w, const char* path, const quarot_model_config* cfg,
                                  int shared_classifier, const qx_l2c_write_opts* opts, qx_err* err);
quarot_result qx_l2c_writer_put(qx_l2c_writer* w, const char* name, const quarot_tensor* t, qx_err* err);
quarot_result qx_l2c_writer_finish(qx_l2c_writer* w, qx_err* err);
void qx_l2c_writer_abort(qx_l2c_writer* w);

#ifdef __cplusplus
}
#endif
#endif
