/* qx_synth.h - deterministic random models of every family, for tests of the rotation pipeline.

   qx_synth_model fills a qx_store with a small random decoder of the requested family, using only
   the Hugging Face names qx_forward.h lists, from a seed (quarot_rng: the same model on every
   platform). The models are built so that rotation and quantization have something to show:
     - grouped-query attention (n_kv_heads < n_heads) where the family has it;
     - q/k/v biases (qwen2), per-head q_norm/k_norm (qwen3), LayerNorm with biases, learned positions
       and biases everywhere (opt);
     - tied (qwen2, opt) and untied (llama, qwen3) embeddings;
     - non-unit random norm gains (in [0.5, 1.5]), so that norm fusion matters;
     - LLM-like activation outliers: n_outliers hidden channels whose gains in every decoder norm
       (input_layernorm / post_attention_layernorm, OPT's two LayerNorms) are outlier_scale times
       larger, with the weight columns that read those channels (q/k/v, gate/up, fc1) as many times
       smaller: every q/k/v and gate/up input then carries outliers (max/median channel magnitude
       ~15-20 at the default scale 16) while the function is that of an ordinary model, so norm
       fusion plus a rotation removes them exactly; and n_outliers intermediate channels whose
       gate/up rows are 4x larger (down_proj columns 16x smaller, 4x for OPT's plain MLP), so the
       down_proj input carries outliers too. Per-token 4-bit activations then lose the ordinary
       channels, and rotations help, as in real LLMs;
     - intermediate sizes that are not powers of two but have Hadamard matrices (320 = 20*16,
       172 = the stories260K size, 192 = 12*16, 96 = 12*8).
   Weights: embeddings N(0, 1) (OPT positions N(0, 0.25)), linears N(0, 1/in), biases N(0, 0.3^2)
   (qwen2 q/k/v) or N(0, 0.1^2) (OPT), norm gains U(0.5, 1.5). Logits have a standard deviation of
   about 2 and depend on the context through attention (tests/test_synth.c prints both).

   Mixture-of-experts families (mixtral, qwen2_moe, qwen3_moe) put a router and n_experts gated
   experts (top n_experts_used) in every MoE layer, with their Hugging Face names (Mixtral's
   block_sparse_moe.gate and experts.E.w1 / w3 / w2; Qwen's mlp.gate and mlp.experts.E.*_proj), a
   shared expert with its sigmoid gate for qwen2_moe, and dense layers between MoE layers when
   sparse_step > 1. The router and the shared-expert gate read the normed stream, so their columns
   carry the hidden outliers like every reader; each expert (and the shared expert) has n_outliers
   intermediate outlier channels of its own width. experts_stacked = 1 stores each projection of a
   layer as one 3-D tensor [n_experts][out][in] under the names without the expert index (GGUF's
   layout, as the tool's GGUF reader names it). Experts are drawn one after the other, router first.
   qwen2vl is qwen2's decoder (tied) plus the vision side a Qwen2-VL checkpoint has around it: a 5-D
   Conv3d patch embedding visual.patch_embed.proj.weight [16, 3, 2, 4, 4], the merger's LayerNorm
   (visual.merger.ln_q) and its two linears (visual.merger.mlp.0 [64][64], visual.merger.mlp.2
   [hidden][64], both with biases), and the Hugging Face config.json of the older layout
   (Qwen2VLForConditionalGeneration, mrope_section summing to head_dim / 2) kept as the blob
   "hf.config.json", so that the model saves as a directory transformers would take. */
#ifndef QX_SYNTH_H
#define QX_SYNTH_H

#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_synth_desc {       /* zero-init = family defaults (table in qx_synth.c) */
    const char* arch;                /* "llama" (NULL), "qwen2", "qwen3", "opt", "phi3" (fused q|k|v and
                                        gate|up: self_attn.qkv_proj, mlp.gate_up_proj; not in qx_synth_family) */
    uint64_t seed;
    int64_t hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim, vocab, max_seq;
    int tied;                        /* 0 = family default, 1 = tied embeddings, -1 = untied */
    int rope_interleaved;            /* 0 = HF halves, 1 = pairs (2i, 2i+1) */
    int64_t n_outliers;              /* outlier channels (hidden and intermediate): 0 = 2, -1 = none */
    float outlier_scale;             /* 0 = 16 */
    quarot_dtype dtype;              /* stored dtype: 0 = f32, or f16 / bf16 */
    /* mixture of experts (mixtral, qwen2_moe, qwen3_moe; 0 = family default, refused elsewhere) */
    int64_t n_experts, n_experts_used;
    int64_t expert_intermediate;     /* mixtral: always intermediate (its config has one width) */
    int64_t shared_intermediate;     /* qwen2_moe only: the shared expert's width */
    int64_t sparse_step;             /* qwen2_moe: layer l is MoE when (l + 1) % sparse_step == 0 (0 = 1: all) */
    int experts_stacked;             /* 1: 3-D expert tensors [n_experts][out][in] (GGUF's layout) */
} qx_synth_desc;

/* The dense families with separate projections (llama, qwen2, qwen3, opt), for loops in tests:
   i = 0, 1, ... until NULL. */
const char* qx_synth_family(int i);

/* Every family qx_synth_model builds (the above, then phi3, mixtral, qwen2_moe, qwen3_moe, qwen2vl):
   i = 0, 1, ... until NULL. */
const char* qx_synth_any_family(int i);

/* Fill d's zero fields with the defaults of its family (d->arch NULL = "llama"). */
quarot_result qx_synth_resolve(qx_synth_desc* d, qx_err* e);

/* Build the model into s (initialized here; free with qx_store_free). d may be NULL (llama, seed 0). */
quarot_result qx_synth_model(qx_store* s, const qx_synth_desc* d, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
