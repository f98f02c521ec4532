/* qx_safetensors.h - safetensors files and Hugging Face model directories <-> qx_store.

   File layout: [u64 little-endian N][N bytes of JSON header][data]. The header maps each tensor
   name to {"dtype": "F32", "shape": [rows, cols] (outermost first), "data_offsets": [begin, end]}
   (offsets relative to the data section) plus an optional "__metadata__" object of strings.

   Reading (hostile input): N at most 100 MB and within the file; the header strict JSON; every
   shape, offset and byte length checked with overflow-safe arithmetic (end >= begin, byte length
   == product(shape) * dtype size, all inside the data section); tensors cover the data section
   exactly, without overlaps or holes (the reference implementation's rule). F32, F16, BF16 and
   F64 tensors enter the store as views of the file mapping (zero copy, copy-on-write private
   mapping) or as copies on request; a tensor whose offset is not aligned to its element size is
   always copied. Other dtypes (I64, U8, F8_E4M3, ...) are refused with the tensor's name and
   dtype, except for names on the skip list (derived buffers: "*.rotary_emb.inv_freq") and when
   opts.skip_unsupported is set. __metadata__ is kept as blob "safetensors.metadata".

   Directories: config.json plus model.safetensors, or the shards listed in
   model.safetensors.index.json ("weight_map": tensor -> shard file; shard names must be plain
   file names; every tensor of the index must be in its shard and every shard tensor in the index).
   config.json becomes the store's quarot_model_config (see qx_hf_config_parse) and blob
   "hf.config.json"; names saved without the "model." prefix ("layers.0...", OPT's "decoder...")
   get it; with tied embeddings a stored lm_head.weight is dropped (Hugging Face ties it to the
   embedding on load); the tensors are then checked against the config (qx_hf_check_tensors).
   A .safetensors file given directly uses a config.json beside it when there is one.

   Writing: a "plan" (name, dtype, shape of every tensor) first; the writer lays out the header(s)
   and offsets, writes the header into a temporary file, then takes tensor data by name in any
   order (positional writes), and finish syncs and renames everything into place (abort removes
   the temporaries). Output never replaces an existing file unless `force`. Data are ordered
   deterministically: shards take tensors in natural name order ("layers.2" before "layers.10");
   inside a file the larger element sizes come first (so every tensor is aligned to its element
   size) then natural name order. Headers are padded with spaces to a multiple of 8 bytes.

   RoPE layout: safetensors / Hugging Face checkpoints hold q/k projections in the half-split
   layout. qx_st_save converts a store whose config says rope_interleaved (llama2.c, GGUF) back to
   it by permuting the rows of q_proj/k_proj (see qx_rope_src_row); the reader always reports
   rope_interleaved = 0. */
#ifndef QX_SAFETENSORS_H
#define QX_SAFETENSORS_H

#include "support/qx_file.h"
#include "formats/qx_json.h"
#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QX_ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct qx_st_read_opts {
    int copy;                 /* copy tensor data into the store instead of viewing the mapping */
    int skip_unsupported;     /* skip (instead of refusing) tensors of other dtypes or with a 0 in their shape */
    int no_config;            /* do not read config.json (tensors only; config left zero) */
} qx_st_read_opts;

/* Loads a .safetensors file or a Hugging Face directory into an EMPTY store (opts may be NULL).
   On failure the store is left empty and e says which file, tensor or key, and why. */
quarot_result qx_st_load(const char* path, qx_store* s, const qx_st_read_opts* opts, qx_err* e);

/* Reads one safetensors image held in memory into s (which may already hold tensors; a name that
   exists already is an error). Data are always copied. `name` labels error messages. On failure
   s may hold some of the image's tensors (qx_st_load builds into a scratch store for this reason). */
quarot_result qx_st_read_mem(const void* buf, size_t len, const char* name, qx_store* s,
                             const qx_st_read_opts* opts, qx_err* e);

/* config.json -> config, for LlamaForCausalLM, MistralForCausalLM (arch "llama"), Qwen2ForCausalLM
   ("qwen2": q/k/v biases), Qwen3ForCausalLM ("qwen3": q/k norms) and OPTForCausalLM ("opt":
   LayerNorm, plain ReLU MLP, biases; refused unless word_embed_proj_dim == hidden_size and
   do_layer_norm_before is true) and Phi3ForCausalLM ("phi3": fused self_attn.qkv_proj = q|k|v and
   mlp.gate_up_proj = gate|up, no biases; partial_rotary_factor < 1 and rope_scaling refused).
   architectures[0] names the class (model_type when absent).
   Missing optional keys take the Hugging Face defaults; rope_interleaved = 0. Keys that do not
   change the weights (rope_scaling, sliding_window, torch_dtype, token ids) are not read; "gelu"
   (erf) maps to the library's tanh GELU. */
/* Gemma 2 / Gemma 3 (Hugging Face classes and model types, GGUF "gemma2" / "gemma3"): refused for a
   reason of their own, shared by both readers: 1 when cls names one of them. */
int qx_gemma_norms_refused(const char* cls);
extern const char* const qx_gemma_norms_reason;

quarot_result qx_hf_config_parse(const char* text, size_t len, const char* name, quarot_model_config* c,
                                 qx_err* e);
/* Checks that the store holds the tensors its config implies, with the implied shapes (every
   layer's projections, norms and biases, embeddings, lm_head unless tied) and no layer beyond
   n_layers. Names are Hugging Face's ("model.layers.N...", OPT "model.decoder.layers.N..."). */
quarot_result qx_hf_check_tensors(const qx_store* s, const char* name, qx_err* e);
/* config.json text for the store: the original ("hf.config.json" blob) with tie_word_embeddings
   set to false when lm_head.weight exists, or one generated from s->config. */
quarot_result qx_hf_config_write(const qx_store* s, qx_sb* out, qx_err* e);

/* Qwen2-VL / Qwen2.5-VL (Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration, arch
   "qwen2vl"): the reader takes the text decoder's keys from config.json (or its "text_config"),
   requires rope_scaling.mrope_section (or a top-level mrope_section) to sum to head_dim / 2 and the
   vision tower's output width (vision_config.out_hidden_size, else hidden_size) to equal the text
   hidden size. The newer name layout (model.language_model.*, model.visual.*) is read under the
   older names (model.*, visual.*; lm_head.weight in both) so that everything downstream sees one
   layout, and recorded as the blob "hf.names" = "qwen2vl-lm"; qx_hf_file_renames gives the writers
   the renames back. qx_hf_check_tensors requires the merger's output projection
   (visual.merger.mlp.2.weight [hidden][in], bias [hidden]). */
#define QX_VL_MERGER_WEIGHT "visual.merger.mlp.2.weight"
#define QX_VL_MERGER_BIAS "visual.merger.mlp.2.bias"
/* The {store prefix, file prefix} pairs that write s under the names it was read with (*pairs static);
   returns how many (0: none). */
int qx_hf_file_renames(const qx_store* s, const char* const** pairs);
/* Hugging Face names of mixture-of-experts weights: one expert's tensor is
   "<pre>.experts.<e>.<proj>.weight", all experts as one 3-D tensor [n_experts][out][in] (the name the
   GGUF reader gives ffn_{gate,up,down}_exps) "<pre>.experts.<proj>.weight"; proj is gate_proj /
   up_proj / down_proj or Mixtral's w1 / w3 / w2.
   qx_hf_expert_stacked_name: one expert's name -> the stacked name in out; returns e (0 .. 65536),
   -1 when name is no expert's tensor or out is too small.
   qx_hf_expert_name: a stacked name -> expert e's name in out; 1, or 0 when name is no stacked
   expert tensor or out is too small. */
int64_t qx_hf_expert_stacked_name(const char* name, char* out, size_t n);
int qx_hf_expert_name(const char* stacked, int64_t e, char* out, size_t n);
/* The number of tensors of s under "visual." (a vision tower), 0 when none. */
int64_t qx_vl_tensor_count(const qx_store* s);
/* M-RoPE's sections of a qwen2vl store read from Hugging Face (mrope_section in its "hf.config.json"
   blob, where qx_hf_config_parse finds it): sec[0..*n) the sections, the rest of the 4 zero (llama.cpp's
   qwen2vl.rope.dimension_sections holds 4). */
quarot_result qx_vl_mrope_sections(const qx_store* s, int64_t sec[4], int* n, qx_err* e);

/* One tensor of a writer's plan. ne[] innermost first as in quarot_tensor; n_dims 1..4. shape (when
   not NULL) is the shape to write instead, rank sizes outermost first (rank 0..QX_MAX_RANK), whose
   qx_shape_fold must equal ne: a written shape the store recorded (qx_store_get_shape). */
typedef struct qx_tensor_plan {
    const char* name;
    quarot_dtype dtype;
    int n_dims;
    int64_t ne[QUAROT_MAX_DIMS];
    int rank;
    const int64_t* shape;
} qx_tensor_plan;

/* The rank a plan gives sizes ne: the dimensions up to the last one > 1, at least 1 (a [hidden]
   gain stays 1-D). */
int qx_plan_rank(const int64_t ne[QUAROT_MAX_DIMS]);
/* The plan of every tensor of s in store order: s's names (not copied), sizes, qx_plan_rank (and the
   written shape the store recorded, qx_store_get_shape: a view of its blob), and
   dtype dt (QUAROT_DTYPE_DEFAULT: each tensor's own). calloc'ed with `extra` zeroed entries more
   (free with free()); NULL when out of memory. */
qx_tensor_plan* qx_store_plan(const qx_store* s, quarot_dtype dt, int64_t extra);

typedef struct qx_st_write_opts {
    int force;                /* replace existing output files */
    uint64_t shard_bytes;     /* directory output: >0 splits tensor data into shards of at most this
                                 many bytes (a bigger tensor gets a shard of its own) */
    const char* metadata_json;/* "__metadata__" as a JSON object of strings; NULL: {"format":"pt"} */
    const char* config_json;  /* directory output: text written as config.json; NULL: none */
    int direct;               /* write the model file(s) through O_DIRECT block buffers (qx_out_direct) */
    int* direct_mode;         /* not NULL: set on finish to the qx_direct_mode the files were written with
                                 (the weakest over the shards) */
    const quarot_env* env;    /* not NULL: f32 tensors written as f16 / bf16 convert on its pool (qx_out.env) */
    const char* const* rename;/* n_rename pairs {store prefix, file prefix}: a planned or put name starting with
                                 a pair's store prefix (the first that matches) is written with the file
                                 prefix instead (qx_hf_file_renames) */
    int n_rename;
} qx_st_write_opts;

typedef struct qx_st_writer qx_st_writer;

/* out ending in ".safetensors": one file at that path. Otherwise out is a directory (created if
   missing): model.safetensors, or model-0000i-of-0000n.safetensors shards with
   model.safetensors.index.json, plus config.json when given. With force, the other layout's
   entry file (index or model.safetensors) left by an earlier save is removed on finish.
   A planned 3-D expert tensor "<pre>experts.<proj>.weight" [n_experts][out][in] (GGUF's layout, as
   the GGUF reader names it; proj w1 / w2 / w3 or gate_proj / up_proj / down_proj) is written as
   Hugging Face holds experts: n_experts tensors "<pre>experts.<e>.<proj>.weight" [out][in]. It is
   still put under its stacked name: whole (3-D), or by put_rows with rows counted over all experts
   in order (expert e's rows start at e * out). */
quarot_result qx_st_writer_begin(qx_st_writer** w, const char* out, const qx_tensor_plan* plan, int64_t n,
                                 const qx_st_write_opts* opts, qx_err* e);
/* Writes tensor `name` from t (any strides; its dtype is converted to the planned one, rounding to
   nearest even). t->ne must equal the planned shape. Each tensor exactly once, in any order. */
quarot_result qx_st_writer_put(qx_st_writer* w, const char* name, const quarot_tensor* t, qx_err* e);
/* The same, with the rows permuted between RoPE layouts (qx_rope_src_row) in heads of head_dim
   rows (a 1-D tensor: its elements). */
quarot_result qx_st_writer_put_permuted(qx_st_writer* w, const char* name, const quarot_tensor* t,
                                        int64_t head_dim, int to_interleaved, qx_err* e);
/* Rows [row0, row0 + t->ne[1]) of the 2-D tensor `name` (t: {ne[0], n}); windows in order from
   row 0, the tensor counts as written with its last row (the streamed embedding and lm_head). */
quarot_result qx_st_writer_put_rows(qx_st_writer* w, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e);
/* Checks every tensor was written, syncs, renames into place; frees w in every case (on failure
   the temporaries are removed and no output appears). */
quarot_result qx_st_writer_finish(qx_st_writer* w, qx_err* e);
/* Removes the temporaries and frees w (NULL is fine). */
void qx_st_writer_abort(qx_st_writer* w);

typedef struct qx_st_save_opts {
    int force;
    uint64_t shard_bytes;     /* as in qx_st_write_opts */
    quarot_dtype dtype;       /* DEFAULT: keep each tensor's dtype; else convert all to this one */
} qx_st_save_opts;

/* Writes the whole store (see qx_st_writer_begin for `out`): tensors in its dtype(s) (the rank is
   the number of dimensions up to the last one > 1), __metadata__ from the store, config.json from
   qx_hf_config_write for directory output when s->config.arch is set. */
quarot_result qx_st_save(const qx_store* s, const char* out, const qx_st_save_opts* opts, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
