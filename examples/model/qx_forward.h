/* qx_forward.h - the reference FP32 forward pass of the examples and tests.

   It runs a decoder-only transformer straight from a qx_store (Hugging Face tensor names, config in
   store->config), in plain FP32, so that a rotated model can be checked against the original and so
   that perplexity can be measured under fake quantization. It is a reference, not an engine: simple
   loops, one GEMM per linear layer, a KV cache for generation.

   Families (config.arch, then the flags of quarot_model_config):
     "llama"  (also Mistral and anything else not named below): RMSNorm, RoPE, grouped-query
              attention, gated SiLU MLP. Names:
                model.embed_tokens.weight                          [vocab][hidden]
                model.layers.{i}.input_layernorm.weight            [hidden]
                model.layers.{i}.self_attn.{q,k,v,o}_proj.weight   q [n_heads*head_dim][hidden],
                                                                   k/v [n_kv_heads*head_dim][hidden],
                                                                   o [hidden][n_heads*head_dim]
                model.layers.{i}.self_attn.{q,k,v,o}_proj.bias     (see "biases" below)
                model.layers.{i}.post_attention_layernorm.weight   [hidden]
                model.layers.{i}.mlp.{gate,up}_proj.weight         [intermediate][hidden]
                model.layers.{i}.mlp.down_proj.weight              [hidden][intermediate]
                model.norm.weight                                  [hidden]
                lm_head.weight                                     [vocab][hidden]
     "qwen2"  the same with q/k/v biases (config.attn_qkv_bias).
     "qwen3"  the same plus a per-head RMSNorm of q and k before RoPE (config.qk_norm):
                model.layers.{i}.self_attn.{q,k}_norm.weight       [head_dim]
     "opt"    pre-LayerNorm OPT: LayerNorm with bias, learned positional embeddings (position p reads
              row p + 2, OPT's offset), plain MLP fc1 -> ReLU -> fc2, biases on every linear:
                model.decoder.embed_tokens.weight                  [vocab][hidden]
                model.decoder.embed_positions.weight               [max_pos + 2][hidden]
                model.decoder.layers.{i}.self_attn_layer_norm.{weight,bias}
                model.decoder.layers.{i}.self_attn.{q,k,v,out}_proj.{weight,bias}
                model.decoder.layers.{i}.final_layer_norm.{weight,bias}
                model.decoder.layers.{i}.fc1.{weight,bias}, fc2.{weight,bias}
                model.decoder.final_layer_norm.{weight,bias}
              (lm_head.weight when present, else the token embedding).
     "mixtral", "qwen2_moe", "qwen3_moe"  mixture of experts (config.n_experts > 0): the llama / qwen2 /
              qwen3 attention, and in every layer quarot_config_layer_is_moe says is one, instead of the
              dense MLP (dense layers of a MoE model keep the names above):
                router        model.layers.{i}.block_sparse_moe.gate.weight (Mixtral) or
                              model.layers.{i}.mlp.gate.weight                     [n_experts][hidden]
                experts       ...block_sparse_moe.experts.{e}.w1 / w3 / w2.weight (gate / up / down) or
                              ...mlp.experts.{e}.gate_proj / up_proj / down_proj.weight,
                              [expert_intermediate][hidden], down [hidden][expert_intermediate]; with
                              config.experts_stacked one 3-D tensor per projection (the names without
                              ".{e}", [n_experts][out][in], GGUF), read one expert's 2-D view at a time
                shared expert (Qwen2-MoE, shared_intermediate > 0) mlp.shared_expert.{gate,up,down}_proj.weight
                              and mlp.shared_expert_gate.weight [1][hidden]
              Per token: router logits r = a W_router^T (f32), p = softmax(r) (max-shifted, in double),
              the n_experts_used largest logits chosen (ties to the lower expert index), weights p_e,
              divided by their sum when norm_topk_prob (Mixtral's reader always sets it, as HF's
              MixtralSparseMoeBlock always renormalizes; Qwen2-MoE / Qwen3-MoE take it from the config);
              y = sum over the chosen experts, in expert index order, of w_e * down_e(act(gate_e a) * up_e a),
              plus, with a shared expert, sigmoid(a . w_shared_gate) * shared(a) (HF's order: the routed
              sum, then the shared term). The rows routed to an expert are gathered and run as one GEMM
              per projection (one per expert, not one per token). The router and the shared-expert gate
              are never quantized (they choose and scale experts; the header's >>moe default); the
              experts' and the shared expert's linears are quantized as the dense ones (weights at
              load, activations per token at each input), and the online hooks run before each
              expert's down_proj (QX_SITE_EXPERT_DOWN_INPUT, once per expert on its routed rows) and
              the shared one's (QX_SITE_SHARED_DOWN_INPUT).
   What the config decides, for every family: norm kind (RMS or LayerNorm, eps = norm_eps), MLP kind
   (gated or plain) and activation, RoPE layout (rope_interleaved: pairs (2i, 2i+1) as llama2.c, else
   HF halves (i, i + head_dim/2)) and theta, head geometry. So a rotated OPT whose pipeline switched
   config.norm to RMS runs as such.
   Biases: a bias the config requires (attn_qkv_bias, attn_out_bias, mlp_bias) must be present; any
   other bias or norm bias is used when present (norm fusion may create them, lm_head.bias included). lm_head.weight is used
   when present, else the token embedding (an error when config.tied_embeddings is 0).
   Weights may be f32, f16 or bf16 (any strided view): qx_forward_init copies them to f32 once, or,
   with opts.stream_weights, one decoder layer at a time when it runs (layer-wise, for models that
   do not fit in memory in f32).

   Order of operations in decoder layer i (x = residual stream [T][hidden], T tokens at once):
       a  = norm1(x)                      capture q,k,v inputs; fake-quant a (A bits)
       q  = a*Wq^T + bq,  k = a*Wk^T + bk,  v = a*Wv^T + bv
       q, k <- per-head RMSNorm (qk_norm); q, k <- RoPE(position)
       online(Q_ROPE, q), online(K_ROPE, k); fake-quant k, v (KV bits); k, v -> KV cache
       o  = causal softmax(q k^T / sqrt(head_dim)) v      (query head h reads KV head h / (n_heads/n_kv_heads))
       online(O_INPUT, o); capture o_proj input; fake-quant o;  x += o*Wo^T + bo
       a  = norm2(x)                      capture gate,up (fc1) inputs; fake-quant a
       h  = act(a*Wg^T + bg) * (a*Wu^T + bu)        (plain MLP: h = act(a*W1^T + b1))
       online(DOWN_INPUT, h); capture down (fc2) input; fake-quant h;  x += h*Wd^T + bd
   then logits = norm_final(x) * W_lm^T. The embeddings, the final norm and lm_head stay FP (as in
   QuaRot: only the linears inside decoder layers are quantized).

   Fake quantization (qx_fake_quant_opts): weights of the decoder linears are quantized once at init
   (per output channel, or per group of w_group along the input); activations per token at every
   decoder-linear input; K and V per token per head as they enter the cache (after RoPE and the
   K online rotation). The quantizer is quarot.h's (quarot_fake_quant_f32 semantics).

   Threads: opts.env's parallel hook (see qx_forward_opts.env); quarot_parallel.run is never called
   from inside one of its own tasks.

   Errors: functions return quarot_result; where a qx_err is given, a one-line message names the
   tensor or the argument at fault. */
#ifndef QX_FORWARD_H
#define QX_FORWARD_H

#include "support/qx_arena.h"
#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the online-rotation callback is called, in place on the activations: */
typedef enum qx_site {
    QX_SITE_DOWN_INPUT = 0,   /* down_proj / fc2 input, [T][intermediate] */
    QX_SITE_O_INPUT = 1,      /* o_proj / out_proj input, all heads concatenated, [T][n_heads*head_dim] */
    QX_SITE_Q_ROPE = 2,       /* q after qk-norm and RoPE, [T*n_heads][head_dim] */
    QX_SITE_K_ROPE = 3,       /* k after qk-norm and RoPE, [T*n_kv_heads][head_dim], before the KV cache */
    QX_SITE_EXPERT_DOWN_INPUT = 4,   /* MoE: a routed expert's down_proj input, [rows routed to it][expert_intermediate]
                                        (one call per expert that has rows, in expert order) */
    QX_SITE_SHARED_DOWN_INPUT = 5,   /* MoE: the shared expert's down_proj input, [T][shared_intermediate] */
    QX_SITE_COUNT = 6
} qx_site;

/* Short name of a site ("down_input", "o_input", "q_rope", "k_rope"). */
const char* qx_site_name(qx_site s);   /* ... "expert_down_input", "shared_down_input" */

/* Fake quantization (quantize then dequantize, in FP32). Zero-init = everything FP.
   Rounding, scales and clipping follow quarot.h's >>quant (ALGORITHMS.md section 4). */
typedef struct qx_fake_quant_opts {
    int w_bits;              /* decoder-linear weights: 0 = FP, else 2..8 (per output channel) */
    int w_asym;              /* 1: asymmetric with a zero point */
    int64_t w_group;         /* 0 = whole input row per output channel; else group size along the input */
    float w_clip;            /* clip ratio in (0, 1]; 0 = 1.0 */
    int w_clip_search;       /* 1: per group, search the clip ratio 1.0 .. 0.5 minimizing the squared error */
    int a_bits;              /* decoder-linear inputs, per token: 0 = FP, else 2..8 */
    int a_asym;              /* 1: asymmetric per token (default symmetric) */
    float a_clip;            /* 0 = 1.0 (QuaRot commonly uses 0.9) */
    int k_bits, v_bits;      /* KV cache, per token per head: 0 = FP, else 2..8 */
    int kv_sym;              /* 1: symmetric KV (default asymmetric, as QuaRot) */
    float kv_clip;           /* 0 = 1.0 */
    /* QuaRot's finer levers (zero = the behaviour above) */
    int64_t a_group;         /* activation groups of a_group along each token's row (0 = whole row) */
    int a_down_bits;         /* down_proj input bits instead of a_bits (8: QuaRot's --int8_down_proj) */
    int64_t k_group, v_group;/* K / V groups along the row (0 = head_dim: per token per head) */
    int k_sym, v_sym;        /* 1: K / V symmetric (also when kv_sym is set) */
    float k_clip, v_clip;    /* 0 = kv_clip */
    /* Quantized linears: with weight and activation bits both set (symmetric weights, symmetric
       activations per token, no activation groups: what an integer kernel runs) the product is the
       exact integer dot product of the codes, scaled once, as the inference engine computes it
       (model/qx_qlinear.h); weights a reader dequantized from codes (the store's grids) take that
       path with w_bits 0. Every other setting is the float product of the fake-quantized values.
       1: the float product everywhere (the arithmetic of the engine's fp_linears, a diagnostic). */
    int float_linears;
} qx_fake_quant_opts;

/* Online rotation hook: rotate x[rows][n] in place (see qx_site for the shapes). */
typedef void (*qx_online_fn)(void* user, int64_t layer, qx_site site, float* x, int64_t rows, int64_t n);
/* Activation capture: x[rows][n] is the input of the linear whose weight is named linear_name
   ("model.layers.3.mlp.up_proj.weight"), after any online rotation and before activation
   quantization. Called once per linear of every decoder layer (q, k and v each get the same x). */
typedef void (*qx_capture_fn)(void* user, int64_t layer, const char* linear_name, const float* x,
                              int64_t rows, int64_t n);

/* MoE routing: the experts chosen in MoE layer `layer` for each of T tokens, experts[T][k] (k =
   n_experts_used), each token's in decreasing router logit (ties: the lower index first). */
typedef void (*qx_route_fn)(void* user, int64_t layer, const int32_t* experts, int64_t T, int64_t k);

typedef struct qx_forward_opts {     /* zero-init = plain FP32, no hooks */
    qx_fake_quant_opts quant;
    qx_online_fn online;             /* NULL = no online rotation */
    void* online_user;
    qx_capture_fn capture;           /* NULL = no capture */
    void* capture_user;
    int capture_router;              /* 1: capture also gets a MoE layer's router input (its norm2 rows,
                                        "model.layers.{l}.mlp.gate.weight"); routed experts' linears
                                        come per expert ("mlp.experts.{e}.up_proj.weight") */
    const quarot_env* env;           /* allocator and parallel hook; NULL = default (serial). The hook
                                        splits the GEMMs, the row-wise steps (norms, fake quantization,
                                        RoPE, activations, residual adds; in row chunks) and attention
                                        (groups of heads): logits are bit-identical for any thread
                                        count. Hooks (online, capture) are called from the caller's
                                        thread. */
    int stream_weights;              /* 1: layer-wise. qx_forward_init only checks the decoder layers'
                                        tensors; every qx_forward_tokens call converts layer i's weights
                                        (f16/bf16/f64 -> f32 per row, then the weight fake quantization)
                                        into one reused layer buffer just before running layer i, and f32
                                        contiguous tensors that need no quantization are read in place.
                                        Memory: one decoder layer in f32 plus the globals (an f32
                                        contiguous embedding / lm_head is read in place too) instead of
                                        the whole model in f32; a MoE layer's MLP: its router, its shared
                                        expert and one routed expert at a time (converted when it runs). The logits are bit-identical to the
                                        default (copy everything at init). The store must then outlive
                                        f and stay unchanged. 0: copies at init (s may be freed). */
    void (*layer_done)(void* user, int64_t layer);   /* stream_weights: called with i after each of
                                        layer i's tensors was converted into the layer buffer, after each
                                        of its linears and after layer i ran, and with -1 after the lm_head: the weights read so
                                        far are no longer needed (e.g. hand a file mapping's pages back
                                        to the kernel, qx_lw_layer_done); NULL = none */
    void* layer_done_user;
    qx_route_fn route;               /* NULL = none; called from the caller's thread */
    void* route_user;
} qx_forward_opts;

/* The decoder linears' integer forms (qx_forward_layer.qm): q, k, v, o, gate, up (fc1), down (fc2). */
enum { QX_QL_Q, QX_QL_K, QX_QL_V, QX_QL_O, QX_QL_GATE, QX_QL_UP, QX_QL_DOWN, QX_QL_COUNT };

typedef struct qx_forward_layer {    /* f32 copies, [out][in] row-major; NULL when absent */
    float *norm1_w, *norm1_b, *norm2_w, *norm2_b;
    float *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo;
    float *q_norm, *k_norm;
    float *w_gate, *w_up, *w_down, *b_gate, *b_up, *b_down;   /* plain MLP: up = fc1, down = fc2 */
    quarot_qmat qm[QX_QL_COUNT];     /* integer products (quant.float_linears off): packed codes and
                                        scales of a linear whose product is an integer one; data NULL
                                        for the float product on the weights above */
    struct qx_forward_moe* moe;      /* MoE layer: its router and experts (the dense MLP slots NULL);
                                        NULL for a dense layer */
} qx_forward_layer;

/* The MLP of a MoE layer. Projections p: 0 gate, 1 up, 2 down. */
typedef struct qx_forward_moe {
    float* router;                   /* [n_experts][hidden] (stream_weights: filled when the layer runs) */
    float* shared_gate;              /* [hidden] or NULL */
    float* shared[3];                /* the shared expert's gate, up, down or NULL */
    quarot_qmat shared_qm[3];
    float** w;                       /* [n_experts * 3] expert e's projection p at [3e + p] (copy path;
                                        stream_weights: NULL, converted one expert at a time) */
    quarot_qmat* qm;                 /* [n_experts * 3] their integer forms (copy path) */
} qx_forward_moe;

#define QX_FWD_SLOTS 20            /* float pointers in qx_forward_layer */

typedef struct qx_forward {
    quarot_model_config cfg;         /* with defaults resolved (n_kv_heads, head_dim, eps, theta) */
    qx_forward_opts opts;
    int is_opt;                      /* OPT names and learned positions */
    int64_t q_dim, kv_dim;           /* n_heads*head_dim, n_kv_heads*head_dim */
    float* embed;                    /* [vocab][hidden] */
    float* pos_embed;                /* OPT: [n_pos][hidden] (row p + 2 for position p), else NULL */
    int64_t n_pos;
    float *final_w, *final_b;
    float* lm_head;                  /* [vocab][hidden]; may alias embed */
    float* lm_head_b;                /* [vocab] or NULL: a fused LayerNorm bias (rotated OPT) */
    qx_forward_layer* layers;        /* [n_layers]; stream_weights: [1], the layer being run */
    const quarot_tensor** wt;        /* stream_weights: [n_layers][QX_FWD_SLOTS] the store's tensors (or NULL) */
    float* layer_buf;                /* stream_weights: f32 conversions of one layer */
    size_t layer_floats;
    int int_linears;                 /* activations quantized as an integer kernel takes them (see
                                        qx_fake_quant_opts.float_linears): linears with codes use them */
    void* qmem[QX_QL_COUNT];         /* stream_weights: one layer's integer forms, per linear */
    int8_t* qcodes;                  /* stream_weights: code scratch for the largest linear */
    qx_grid* grids;                  /* stream_weights: [n_layers][QX_QL_COUNT] the store's weight grids
                                        (bits 0: none) */
    qx_arena arena;                  /* every weight copy, freed together (also after a failed init);
                                        the KV cache and scratch are separate: they are resized */
    /* KV cache: [n_layers][cache_cap][kv_dim] each; pos = tokens already in it */
    float *k_cache, *v_cache;
    int64_t cache_cap, pos;
    /* scratch for up to scratch_rows tokens */
    float* scratch;
    int64_t scratch_rows;
    size_t scratch_floats;
    int is_moe;                      /* config.n_experts > 0 */
    int is_mixtral;                  /* block_sparse_moe.* names (else mlp.*) */
    int64_t e_inter, s_inter;        /* expert_intermediate (resolved), shared_intermediate (0: none) */
    const quarot_tensor** mwt;       /* stream_weights, MoE: [n_layers][5 + 3 n_experts] router, shared gate,
                                        shared gate/up/down, expert 3e+p (a stacked tensor repeated) */
    qx_forward_moe moe_stream;       /* stream_weights: the layer being run's MoE weights */
    float* moe_buf;                  /* stream_weights: router + shared + one expert in f32 */
    void* moe_qmem[6];               /* stream_weights: the shared expert's (0..2) and one routed expert's
                                        (3..5) integer forms */
    quarot_qmat moe_eqm[3];          /* stream_weights: the routed expert's, over moe_qmem[3..5] */
    int is_fused;                    /* phi3: wq/bq/qm[Q] hold q|k|v (self_attn.qkv_proj), w_gate/qm[GATE]
                                        gate|up (mlp.gate_up_proj); wk, wv, w_up are NULL */
} qx_forward;

/* Copies (and converts) the weights from s, quantizes them if asked, checks every shape. s may be
   freed afterwards. o may be NULL (FP32, no hooks). */
quarot_result qx_forward_init(qx_forward* f, const qx_store* s, const qx_forward_opts* o, qx_err* e);
void qx_forward_free(qx_forward* f);

/* Empties the KV cache (the next token is at position 0). */
void qx_forward_reset(qx_forward* f);

/* Runs T tokens at positions pos .. pos+T-1 (pos = tokens already in the KV cache), appending their
   K/V to the cache; the whole block goes through every layer at once (one GEMM per linear, causal
   attention over the cache). logits: [T][vocab] or NULL (prefill only). The cache grows as needed. */
quarot_result qx_forward_tokens(qx_forward* f, const int32_t* tokens, int64_t T, float* logits, qx_err* e);

/* A whole window from position 0: qx_forward_reset, then qx_forward_tokens. */
quarot_result qx_forward_window(qx_forward* f, const int32_t* tokens, int64_t T, float* logits, qx_err* e);

/* One token of incremental decoding: qx_forward_tokens with T = 1. logits: [vocab]. */
quarot_result qx_forward_step(qx_forward* f, int32_t token, float* logits, qx_err* e);

/* Layer-wise use (calibration, sequential quantization): the embeddings of tokens[T] (plus learned
   positions from 0) into x[T][hidden]; then decoder layer `layer` alone on x in place, as a window
   from position 0 (that layer's KV cache rows 0..T-1 are overwritten; f->pos is left alone), with
   the options' online hooks, capture and fake quantization. */
quarot_result qx_forward_embed(qx_forward* f, const int32_t* tokens, int64_t T, float* x, qx_err* e);
quarot_result qx_forward_layer_run(qx_forward* f, int64_t layer, float* x, int64_t T, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
