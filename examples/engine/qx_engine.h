/* qx_engine.h - a reference W4A4 inference engine on the CPU, built on quarot.h.

   What an edge runtime vendoring quarot.h would write: a LLaMA-family decoder (GQA, RoPE, SwiGLU,
   RMSNorm; Qwen2 q/k/v biases, Qwen3 q/k norms; Phi-3's fused q|k|v and gate|up, each one product
   split after; the Qwen2-VL text decoder; mixture-of-experts layers of Mixtral, Qwen2-MoE and
   Qwen3-MoE, routed as the reference forward pass routes, each expert's tokens gathered into one
   product per linear, the shared expert beside them) whose decoder linears run through quarot.h's integer
   kernels (>>qgemm: packed int4 or int8 weights x int8-coded per-token activations, int32
   accumulation), whose online rotations run through quarot_online_apply on preallocated workspace,
   and whose KV cache is stored quantized. Prefill runs a block of tokens through every layer at once
   (the matrix-matrix kernels); decode runs one token (matrix-vector), with a KV cache.

   Quantization sites and rounding are those of the reference forward pass under fake quantization
   (model/qx_forward.h, what `quarot eval` scores), with quarot.h's quantizers:
     weights     per output channel (or per group of w_group inputs), RTN symmetric, quantized once
                 at load by quarot_quantize_f32; 2..4 bits are held in the packed int4 container,
                 5..8 bits in the int8 one.
     activations per token, symmetric, clip a_clip, at every decoder-linear input: after norm1 (q/k/v
                 share the codes), after the O_INPUT hook, after norm2 (gate/up share), after the
                 DOWN_INPUT hook; in a MoE layer on each expert's gathered rows (gate/up share),
                 after its EXPERT_DOWN_INPUT (SHARED_DOWN_INPUT) hook; never the router or the
                 shared-expert gate; quarot_quantize_f32 gives the codes, quarot_qact_sums their sums.
     KV cache    after RoPE and the Q_ROPE/K_ROPE hooks, per token per KV head, asymmetric (kv_sym: 0)
                 as `quarot eval`: codes (4 bits: two per byte; 5..8 bits: one byte), a scale and a
                 zero point per head; attention reads (code - zero) * scale, the very values the fake
                 quantizer produces.
   So the engine differs from the reference only in float summation order: the integer dot product is
   exact, then scaled once (sum q_w q_x) * s_w * s_x, where the reference sums (q_w s_w)(q_x s_x).
   With no bits set the engine is an FP32 engine (quarot_sgemm), the baseline of the benchmarks. With
   weight bits but no activation bits (or the reverse) the linears run in FP32 on fake-quantized
   values (no integer kernel applies).

   Threads: every GEMM and integer GEMM goes through the env's parallel hook (support/qx_threads.h);
   each output element is computed by one task in a fixed order, so results are identical for any
   thread count. Nothing is allocated per token: buffers are sized for max_tokens rows and the
   context at init.

   Model struct: qx_engine holds the quantized model in plain arrays (qx_eng_linear: a quarot_qmat
   with its owned data and scales, or FP32 weights); qx_engine_init fills it from a float qx_store
   (llama2.c, safetensors, GGUF via the CLI loader) and quantizes at load; qx_engine_init_packed fills
   it from the packed W4A4 file of `quarot quantize` (codes and scales as stored, the settings and the
   online hooks from the file's metadata). */
#ifndef QX_ENGINE_H
#define QX_ENGINE_H

#include "support/qx_arena.h"
#include "model/qx_forward.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_engine_opts {      /* zero-init = FP32, context = config max_seq (or 2048) */
    int w_bits;                      /* 0 or 16 = FP32 weights; 2..8 */
    int64_t w_group;                 /* 0 = per output channel */
    int a_bits;                      /* 0 or 16 = FP activations; 2..8 */
    float a_clip;                    /* 0 = 1.0 */
    int kv_bits;                     /* 0 or 16 = FP32 KV cache; 2..8 */
    int kv_sym;                      /* 1: symmetric KV (default asymmetric, as `quarot eval`) */
    int64_t context;                 /* KV cache positions; 0 = config max_seq, else 2048 */
    int64_t max_tokens;              /* rows one forward call may take (prefill block); 0 = 512 */
    const quarot_online_list* hooks; /* online rotations (NULL = none); must outlive the engine */
    quarot_isa isa;                  /* integer kernels; DEFAULT = best compiled in */
    const quarot_env* env;           /* parallel hook (copied); NULL = serial */
    int profile;                     /* time the online hooks and activation quantization: 1 wall clock,
                                        2 the calling thread's CPU time (for one-thread runs) */
    int fp_linears;                  /* 1: no integer kernels: FP32 GEMMs on fake-quantized weights and
                                        activations, the reference's arithmetic (a diagnostic: what is
                                        left between the two is integer vs float summation order) */
    int no_amx;                      /* 1: never AMX-INT8 tiles; 0: blocks of >= 16 tokens run
                                        quarot_qgemm_amx when quarot_amx_request() grants tile state
                                        (same results as quarot_qgemm) */
} qx_engine_opts;

typedef struct qx_eng_linear {
    int64_t out, in;
    int int_kernel;                  /* 1: quarot_qgemm on qm; 0: quarot_sgemm on w */
    quarot_qmat qm;                  /* packed weights (owned data and scales) */
    float* w;                        /* [out][in] FP32 (or fake-quantized) weights */
    float* bias;                     /* [out] or NULL */
} qx_eng_linear;

/* A mixture-of-experts MLP: the router and the shared-expert gate in FP32 (never quantized), the
   routed experts' and the shared expert's gated MLPs as decoder linears. */
typedef struct qx_eng_moe {
    float* router;                   /* [n_experts][hidden] */
    float* shared_gate;              /* [hidden] (Qwen2-MoE) or NULL */
    qx_eng_linear* experts;          /* [n_experts][3]: gate, up, down */
    qx_eng_linear shared[3];         /* the shared expert's gate, up, down (out 0: none) */
} qx_eng_moe;

typedef struct qx_eng_layer {
    float *norm1, *norm2, *q_norm, *k_norm;                  /* RMSNorm gains; q/k norms may be NULL */
    qx_eng_linear q, k, v, o, gate, up, down;                /* phi3: q is the fused q|k|v, gate the fused
                                                                gate|up (k, v, up empty) */
    qx_eng_moe* moe;                                         /* MoE layer (gate, up, down empty), or NULL */
    const quarot_online_hook* hook[6];                       /* Q_ROPE, K_ROPE, O_INPUT, DOWN_INPUT,
                                                                EXPERT_DOWN_INPUT, SHARED_DOWN_INPUT */
} qx_eng_layer;

typedef struct qx_engine {
    quarot_model_config cfg;         /* defaults resolved */
    qx_engine_opts opts;
    quarot_env env;
    int64_t q_dim, kv_dim, context, max_tokens;
    int fused;                       /* phi3: fused q|k|v and gate|up */
    int is_mixtral;                  /* MoE names under block_sparse_moe (w1 / w3 / w2) */
    int64_t e_inter, s_inter;        /* MoE: the routed experts' and the shared expert's widths (0: none) */
    float *embed, *final_norm, *lm_head;   /* lm_head may alias embed */
    qx_eng_layer* layers;
    /* KV cache: [layer][position][kv_dim] floats, or codes ([kv_dim] bytes, or kv_dim/2 at <= 4 bits)
       with scales and zeros [layer][position][n_kv_heads] */
    float *k_f, *v_f;
    uint8_t *k_q, *v_q;
    float *k_s, *k_z, *v_s, *v_z;
    int64_t kv_row_bytes, pos;
    int64_t n_att;                   /* attention tasks (threads, at most n_kv_heads) */
    int amx;                         /* 1: prefill products on AMX tiles (granted), 0: VNNI / the isa */
    void* amx_work;                  /* quarot_qgemm_amx's workspace */
    size_t amx_work_size;
    /* scratch for max_tokens rows */
    float *x, *a, *qb, *kb, *vb, *att, *tmp, *g, *u, *scores, *rope, *kdeq, *vdeq, *act_s;
    float* fused_out;                /* phi3: [max_tokens][max(q|k|v, gate|up)] before the split */
    /* MoE: router logits [T][n_experts], chosen experts and weights [T][k], the gate of the shared
       expert [T], rows gathered for one expert and its output [T][hidden], the counting sort */
    float *moe_logit, *moe_w, *moe_rw, *moe_sg, *moe_xg, *moe_ye;
    int32_t* moe_sel;
    int64_t *moe_cnt, *moe_rt, *moe_fill;
    int8_t* act_q;
    int32_t* act_sum;
    void* hook_work;
    size_t hook_work_size;
    int8_t* kv_codes;                /* [max_tokens][kv_dim] staging for KV quantization */
    float *kv_sc, *kv_zp;
    /* statistics */
    size_t weight_bytes;             /* decoder linears as stored (packed codes + scales, or FP32) */
    size_t kv_bytes;                 /* the KV cache as allocated */
    double t_hooks, t_actq;          /* seconds in online hooks / activation quantization (profile) */
    qx_arena arena;                  /* every allocation, freed together */
    /* packed models (qx_engine_init_packed) */
    const struct qx_packed_file* pk; /* the parsed file, during init only */
    quarot_online_list* file_hooks;  /* the file's hook list (owned), or NULL */
    int64_t pk_used;                 /* packed decoder linears taken from the file */
} qx_engine;

/* Build the engine from a float model (llama / qwen2 / qwen3 / phi3 / qwen2vl / mixtral / qwen2_moe /
   qwen3_moe names as model/qx_forward.h): copies the
   embeddings, norms and lm_head as FP32, quantizes the decoder linears as asked. Errors: one line in e
   (bad options: QUAROT_ERR_INVALID_ARGUMENT; missing tensor or shape: as qx_forward; hook list for
   another model: QUAROT_ERR_SHAPE_MISMATCH). */
quarot_result qx_engine_init(qx_engine* en, const qx_store* s, const qx_engine_opts* o, qx_err* e);
void qx_engine_free(qx_engine* en);
void qx_engine_reset(qx_engine* en);

/* The packed W4A4 file `quarot quantize OUT.safetensors` writes (formats/qx_packed.h), from its
   image buf[len] (the caller keeps it only for the call: everything is copied). The decoder linears'
   codes and scales are taken as they are (the file's nibble order repacked into quarot_qmat's, F16
   scales converted exactly; no dequantize / requantize); 2..4-bit codes run the int4 kernels, 5..8
   the int8 ones. Embeddings, norms, biases, lm_head and linears the file left in float are read as
   FP32 (an embedding or lm_head stored packed is dequantized, the format's exact value). The
   quantization settings and the online hook list come from the file's metadata: in o, w_bits,
   w_group, a_bits, a_clip, kv_bits and kv_sym are 0 to take the file's, or must equal them (else
   QUAROT_ERR_INVALID_ARGUMENT naming the contradiction); o->hooks must be NULL (the file carries
   them). o's context, max_tokens, isa, env, profile and fp_linears apply as for qx_engine_init.
   Files the engine cannot run exactly (asymmetric weights or activations, activation groups, K and
   V with different bits / symmetry / groups other than the head, KV clipping): QUAROT_ERR_UNSUPPORTED.
   A file whose metadata and tensors disagree, a hook list for another model, a tensor of this model
   missing or a packed linear the model does not have: one line in e, nothing allocated. The qx_engine
   must not be copied by value (it points at its own hook list). */
quarot_result qx_engine_init_packed(qx_engine* en, const void* buf, size_t len, const char* name, const qx_engine_opts* o,
                                    qx_err* e);
/* 1 when the file at path starts like a packed file (qx_packed_sniff on its first bytes). */
int qx_engine_is_packed_file(const char* path);
/* The same from a file (mapped for the call). */
quarot_result qx_engine_load_packed(qx_engine* en, const char* path, const qx_engine_opts* o, qx_err* e);

/* Run tokens[T] at positions pos .. pos+T-1 (T <= max_tokens, pos + T <= context, else
   QUAROT_ERR_INVALID_ARGUMENT with the reason). logits: [T][vocab] when all_logits, else [vocab] for
   the last token; NULL for none. */
quarot_result qx_engine_forward(qx_engine* en, const int32_t* tokens, int64_t T, float* logits, int all_logits,
                                qx_err* e);

/* Sampling: temperature 0 = greedy (argmax, lowest index on ties); else softmax(logits / temp) cut to
   the smallest set of top tokens whose mass reaches top_p (0 or >= 1: all), drawn with quarot_rng. */
int32_t qx_engine_sample(const float* logits, int64_t vocab, float temp, float top_p, quarot_rng* rng, float* work);

/* Perplexity over windows, as qx_eval_windows (each window from position 0, one prefill, every
   logit row scored, NLL in double). Windows longer than max_tokens are refused. */
struct qx_windows;
struct qx_ppl_result;
quarot_result qx_engine_eval(qx_engine* en, const struct qx_windows* w, struct qx_ppl_result* res, qx_err* e);

/* `quarot eval --engine int`: the perplexity of one (model, hooks, setting) cell computed by the
   engine, with the fake-quantization options of the reference mapped onto it (weights RTN symmetric,
   activations per token symmetric, KV asymmetric; other quantizer options are refused). The engine is
   sized for the longest window; env may be NULL. */
quarot_result qx_engine_eval_quant(const qx_store* s, const quarot_online_list* hooks, const qx_fake_quant_opts* q,
                                   const struct qx_windows* w, const quarot_env* env, struct qx_ppl_result* res, qx_err* e);

/* `quarot eval PACKED --engine int`: the perplexity of the packed file's own setting, computed by
   the engine from its codes; the engine is sized for the longest window; env may be NULL. */
quarot_result qx_engine_eval_packed(const char* path, const struct qx_windows* w, const quarot_env* env,
                                    struct qx_ppl_result* res, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
