/* qx_cmd_quantize.c - `quarot quantize IN OUT`: rotation and weight quantization in one run, writing
   real integer weights.

   Two outputs:
     GGUF (OUT *.gguf)             llama.cpp's own Q4_0 / Q8_0 blocks (qx_gguf.h): R1 + R2 folded and the
                                   norms fused, no online rotation, so stock llama.cpp runs the file.
     packed (OUT *.safetensors)    the quarot-packed W4A4 format (qx_packed.h): integer codes, scales
                                   (and zeros), the activation / KV settings and the online hook list
                                   in the file's metadata, for W4A4 engines. A GGUF source's 3-D
                                   experts [n_experts][out][in] go in as one 2-D linear per expert
                                   under the Hugging Face per-expert name (qx_hf_expert_name).
   The rotation is `quarot rotate`'s, run layer by layer through qx_rotate_file with this file's
   output (a qx_rotate_sink) in place of the format's writer: every tensor reaches put() once, in
   f32, right after its layer was rotated. The weight quantizer is one call (qz_weight_codes), RTN
   by default; its integer codes map exactly onto the output (GGUF: groups of 32 = ggml's blocks).

   --w-quant gptq (qz_stage_write) takes another road, because calibration needs the whole rotated
   model: the rotation's tensors are collected into an f32 store (the same qx_rotate_file run, into
   qz_collect), quarot.h's >>quantize stage runs over it through qx_wquant (the driver of `quarot eval
   --w-quant`: layer by layer with the online hooks, each layer calibrated on the quantized layers
   before it), its report hands over each linear's integer codes and scales, and the store is then
   written tensor by tensor through the same output code, the linears taking the stage's codes. */
#include "eval/qx_calib.h"
#include "cli/qx_cli.h"
#include "eval/qx_evalkit.h"
#include "eval/qx_spin.h"
#include "support/qx_file.h"
#include "formats/qx_gguf.h"
#include "formats/qx_packed.h"
#include "pipeline/qx_convert.h"
#include "pipeline/qx_rotate_file.h"
#include "tokenizer/qx_tok_load.h"
#include "tokenizer/qx_tokenizer.h"
#include "tokenizer/qx_tok_write.h"
#include "eval/qx_wquant.h"
#include "formats/qx_load.h"
#include "support/qx_str.h"
#include "cli/qx_opts.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

enum { QZ_GGUF = 1, QZ_PACKED = 2 };

typedef struct qz_opts {
    int format;
    int bits;                      /* weights: GGUF 4 (Q4_0) or 8 (Q8_0); packed 2..8 */
    int64_t group;                 /* GGUF: 32; packed: 0 = per output channel */
    int asym, clip_search;
    quarot_dtype scale_dtype;      /* packed */
    quarot_dtype plain_dtype;      /* matrices left unquantized */
    int quant_embeddings;
    qx_packed_settings act;        /* packed: activation / KV fields */
    int rotate;                    /* 0: --rotation none */
    int gptq;                      /* --w-quant gptq: through the >>quantize stage (qz_stage_write) */
    int text_only;                 /* --text-only: a vision-language model's vision tower ("visual.*") not written */
    int whole_experts;             /* --whole-experts: a GGUF's 3-D expert tensors rotated and quantized whole */
} qz_opts;

/* ---- what each tensor becomes ---- */

enum { QZ_VECTOR = 0, QZ_PLAIN = 1, QZ_QUANT = 2, QZ_SKIP = 3 };

typedef struct qz_item {
    char* name;
    int kind;
    quarot_dtype dt;               /* VECTOR / PLAIN */
    int n_dims;
    int64_t ne[QUAROT_MAX_DIMS];
    char why[96];                  /* a fallback's reason */
    int done;
    double rel_err, max_err;       /* QUANT: sum (w - w^)^2 / sum w^2, max |w - w^| */
    double err_num, err_den;       /* those sums (a 3-D tensor written packed: over its experts) */
    int staged;                    /* the codes came from the >>quantize stage (its report below) */
    int method, fallback;          /* QUAROT_WQUANT_GPTQ / _RTN; 1 = GPTQ asked, dead input, RTN */
    double out_err, rtn_err;       /* calibration output error / ||x W^T||^2, and RTN's (NaN: none) */
    double gptq_loss;
} qz_item;

/* What the stage chose for one linear: codes [rows][cols], scales / zeros [rows][groups] in
   quarot_quantize_f32's layout, the weights before quantization (for the summary) and its report. */
typedef struct qz_codes {
    char* name;
    int64_t rows, cols, groups;
    int8_t* q;
    float *sc, *zr, *orig;
    quarot_qlinear_report rep;     /* pointers cleared */
} qz_codes;

static int qz_is_linear(const char* name) {
    static const char* const suf[] = {".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight",
                                      ".self_attn.o_proj.weight", ".mlp.gate_proj.weight", ".mlp.up_proj.weight",
                                      ".mlp.down_proj.weight", ".self_attn.qkv_proj.weight", ".mlp.gate_up_proj.weight"};
    size_t k;
    if (strncmp(name, "model.layers.", 13) != 0) return 0;   /* so a suffix match is never the whole name */
    for (k = 0; k < sizeof suf / sizeof suf[0]; ++k)
        if (qx_str_ends_with(name, suf[k])) return 1;
    return 0;
}

/* A mixture-of-experts linear: a routed expert's (one tensor per expert or the 3-D stacked one) or the
   shared expert's gate / up / down (the router and the shared-expert gate are not: "*.gate.weight"). */
static int qz_is_expert(const char* name) {
    static const char* const suf[] = {".gate_proj.weight", ".up_proj.weight", ".down_proj.weight", ".w1.weight", ".w2.weight",
                                      ".w3.weight"};
    size_t k;
    if (strncmp(name, "model.layers.", 13) != 0 || (!strstr(name, ".experts.") && !strstr(name, ".shared_expert.")))
        return 0;
    for (k = 0; k < sizeof suf / sizeof suf[0]; ++k)
        if (qx_str_ends_with(name, suf[k])) return 1;
    return 0;
}

/* Fills it's kind / dtype / why for tensor `name` of shape ne; returns 0, or -1 with the reason in
   e (a packed group size or odd row that cannot work). */
static int qz_decide(const qz_opts* o, qz_item* it, qx_err* e) {
    int64_t in = it->ne[0];
    int mat = it->n_dims >= 2 && it->ne[1] > 1;
    int emb = strcmp(it->name, "model.embed_tokens.weight") == 0 || strcmp(it->name, "lm_head.weight") == 0;
    it->why[0] = '\0';
    if (strncmp(it->name, "llama2c.", 8) == 0) {   /* llama2.c's RoPE tables: derived, not model weights */
        it->kind = QZ_SKIP;
        snprintf(it->why, sizeof it->why, "llama2.c RoPE table, not written");
        return 0;
    }
    if (!mat) { it->kind = QZ_VECTOR; it->dt = QUAROT_DTYPE_F32; return 0; }
    it->kind = QZ_PLAIN;
    it->dt = o->plain_dtype;
    if (strncmp(it->name, "model.layers.", 13) == 0 &&   /* mixture of experts: said per tensor and in the total */
        (strstr(it->name, ".gate.weight") || strstr(it->name, "shared_expert_gate.weight"))) {
        snprintf(it->why, sizeof it->why, "MoE gate, kept F32 (it chooses / scales experts)");
        it->dt = QUAROT_DTYPE_F32;   /* as llama.cpp keeps ffn_gate_inp */
        return 0;
    }
    if (!(qz_is_linear(it->name) || qz_is_expert(it->name) || (o->quant_embeddings && emb))) return 0;
    if (it->n_dims != 2 && !(it->n_dims == 3 && qz_is_expert(it->name))) return 0;   /* 3-D: [n_experts][out][in] */
    if (it->n_dims == 3 && o->format != QZ_GGUF)   /* the packed format holds 2-D linears: one per expert */
        snprintf(it->why, sizeof it->why, "%lld experts, each its own packed linear", (long long)it->ne[2]);
    if (o->format == QZ_GGUF) {
        if (in % QX_GGML_QK != 0) {
            snprintf(it->why, sizeof it->why, "rows of %lld are not a multiple of 32", (long long)in);
            it->dt = QUAROT_DTYPE_F16;
            return 0;
        }
    } else {
        int64_t g = o->group ? o->group : in;
        if (in % g != 0) {
            qx_err_set(e, "%s: --group-size %lld does not divide its rows of %lld", it->name, (long long)g, (long long)in);
            return -1;
        }
        if (o->bits <= 4 && in % 2 != 0) {
            qx_err_set(e, "%s: rows of %lld (odd) cannot hold two 4-bit codes per byte", it->name, (long long)in);
            return -1;
        }
    }
    it->kind = QZ_QUANT;
    return 0;
}

static const char* qz_type_name(const qz_opts* o, const qz_item* it, char* buf, size_t n) {
    if (it->kind == QZ_SKIP) return "-";
    if (it->kind != QZ_QUANT) return quarot_dtype_name(it->dt);
    if (o->format == QZ_GGUF) return o->bits == 4 ? "Q4_0" : "Q8_0";
    snprintf(buf, n, "int%d%s", o->bits, o->asym ? "a" : "");
    return buf;
}

/* The weight quantizer: integer codes q[rows][cols] and scales / zeros [rows][cols/group] in
   quarot_quantize_f32's layout. Switching to GPTQ is replacing this call. */
static quarot_result qz_weight_codes(const qz_opts* o, const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales,
                                     float* zeros) {
    quarot_quant_desc d;
    memset(&d, 0, sizeof d);
    d.bits = o->bits;
    d.asymmetric = o->asym;
    d.group_size = o->format == QZ_GGUF ? QX_GGML_QK : o->group;
    d.clip_search = o->clip_search ? QUAROT_CLIP_SEARCH_LP : 0;
    return quarot_quantize_f32(w, rows, cols, cols, &d, q, scales, zeros);
}

/* ---- the output (a qx_rotate_sink) ---- */

typedef struct qz_sink {
    const qz_opts* o;
    qx_cli* cli;
    const char* path;
    int force;
    qz_item* it;
    int64_t n;
    qx_gguf_writer* gw;
    qx_packed_writer* pw;
    int64_t head_dim;
    int permute;                   /* GGUF from a half-split RoPE store: q/k rows made interleaved */
    const quarot_online_list* hooks;
    const qx_rotate_file_stats* rot;
    const qx_tokenizer* tok;       /* GGUF from a non-GGUF input: embedded as tokenizer.ggml.* (may be NULL) */
    const char* tok_dir;           /* else a Hugging Face input's directory: its tokenizer.json converted (or NULL) */
    char tok_note[4200];           /* what became of tokenizer.json (the summary), or "" */
    int tok_warn;                  /* tokenizer.json could not be converted (a warning) */
    int64_t written;
    qz_codes* codes;               /* --w-quant gptq: the stage's codes per linear */
    int64_t n_codes, cap_codes;
    const qx_store* staged;        /* the store the stage quantizes (originals are read from it) */
} qz_sink;

static const qz_codes* qz_find_codes(const qz_sink* k, const char* name) {
    int64_t i;
    for (i = 0; i < k->n_codes; ++i)
        if (strcmp(k->codes[i].name, name) == 0) return &k->codes[i];
    return NULL;
}

static void qz_codes_free(qz_sink* k) {
    int64_t i;
    for (i = 0; i < k->n_codes; ++i) {
        free(k->codes[i].name);
        free(k->codes[i].q);
        free(k->codes[i].sc);
        free(k->codes[i].zr);
        free(k->codes[i].orig);
    }
    free(k->codes);
    k->codes = NULL;
    k->n_codes = k->cap_codes = 0;
}

static qz_item* qz_find(qz_sink* k, const char* name) {
    int64_t i;
    for (i = 0; i < k->n; ++i)
        if (strcmp(k->it[i].name, name) == 0) return &k->it[i];
    return NULL;
}

static void qz_items_free(qz_sink* k) {
    int64_t i;
    for (i = 0; i < k->n; ++i) free(k->it[i].name);
    free(k->it);
    k->it = NULL;
    k->n = 0;
}

static int qz_is_qk(const char* name) {
    return strncmp(name, "model.layers.", 13) == 0 && (strstr(name, ".self_attn.q_proj.") || strstr(name, ".self_attn.k_proj."));
}

/* Items from a plan (names and shapes), each decided. */
static quarot_result qz_items(qz_sink* k, const qx_tensor_plan* plan, int64_t n, qx_err* e) {
    int64_t i;
    k->it = (qz_item*)calloc((size_t)(n + 1), sizeof *k->it);
    if (!k->it) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (i = 0; i < n; ++i) {
        qz_item* it = &k->it[i];
        size_t len = strlen(plan[i].name);
        int vision = k->o->text_only && strncmp(plan[i].name, "visual.", 7) == 0;
        if (!vision && plan[i].shape && plan[i].rank > QUAROT_MAX_DIMS) {   /* a Conv3d patch embedding (Qwen2-VL) */
            qx_err_set(e, "tensor \"%.120s\" has %d dimensions; the quantized outputs (packed W4A4, GGUF) hold at most %d "
                       "(quarot rotate keeps it; --text-only writes the text decoder without the vision tower)", plan[i].name,
                       plan[i].rank, QUAROT_MAX_DIMS);
            return QUAROT_ERR_UNSUPPORTED;
        }
        if (!(it->name = (char*)malloc(len + 1))) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
        memcpy(it->name, plan[i].name, len + 1);
        k->n = i + 1;
        it->n_dims = plan[i].n_dims;
        memcpy(it->ne, plan[i].ne, sizeof it->ne);
        if (vision) {
            it->kind = QZ_SKIP;
            snprintf(it->why, sizeof it->why, "vision tower, not written (--text-only)");
        } else if (qz_decide(k->o, it, e) != 0) {
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    return QUAROT_OK;
}

/* Bytes the online hook text will about take (so the packed header rarely has to move the data):
   a line per hook, and a table of K*(K+1) characters for each odd Hadamard order K (the odd part of
   the intermediate size, the head count and the head size). */
static uint64_t qz_odd_table(int64_t n) {
    while (n > 1 && n % 2 == 0) n /= 2;
    return n > 1 ? (uint64_t)n * (uint64_t)(n + 1) + 32 : 0;
}
static uint64_t qz_online_estimate(const quarot_model_config* c) {
    int64_t hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 1);
    return 1024 + (uint64_t)c->n_layers * 4 * 96 + qz_odd_table(c->intermediate) + qz_odd_table(c->n_heads) + qz_odd_table(hd);
}

static quarot_result qz_begin(void* user, const qx_store* s, const qx_tensor_plan* plan, int64_t n, qx_err* e) {
    qz_sink* k = (qz_sink*)user;
    const qz_opts* o = k->o;
    quarot_result r;
    int64_t i, j = 0;
    const quarot_model_config* c = &s->config;
    k->head_dim = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
    if ((r = qz_items(k, plan, n, e)) != QUAROT_OK) { qz_items_free(k); return r; }
    if (o->format == QZ_GGUF) {
        qx_tensor_plan* gp = (qx_tensor_plan*)calloc((size_t)(n + 1), sizeof *gp);
        uint32_t* bt = (uint32_t*)calloc((size_t)(n + 1), sizeof *bt);
        qx_gguf_write_opts wo;
        qx_gguf_set set;
        qx_sb gen;
        size_t kv_len = 0;
        const void* kv = qx_store_get_blob(s, "gguf.kv", &kv_len);
        memset(&gen, 0, sizeof gen);
        {   /* llama.cpp's interleaved q/k rows for llama only; qwen2 / qwen3 (and their MoE) stay half-split */
            int want = 1;
            (void)qx_gguf_arch_supported(c->arch, &want);
            k->permute = want && !c->rope_interleaved;
        }
        r = gp && bt ? qx_gguf_kv_from_config(s, &gen, e) : QUAROT_ERR_OUT_OF_MEMORY;
        if (!kv && r == QUAROT_OK && k->tok) r = qx_tokenizer_write_gguf_kv(k->tok, "default", &gen, k->path, e);
        if (!kv && r == QUAROT_OK && !k->tok && k->tok_dir) {   /* tokenizer.json -> tokenizer.ggml.*, as rotate does */
            int tc = qx_convert_tok_to_gguf(k->tok_dir, c->vocab, &gen, k->tok_note, sizeof k->tok_note, e);
            if (tc == QX_TOKCONV_ERROR) r = QUAROT_ERR_OUT_OF_MEMORY;
            k->tok_warn = tc == QX_TOKCONV_UNFIT;
            if (k->tok_warn) {   /* never silent: stderr now, the summary at the end */
                if (k->cli->progress_open) { fputc('\n', stderr); k->cli->progress_open = 0; }
                fprintf(stderr, "quarot quantize: warning: tokenizer %s\n", k->tok_note);
            }
        }
        if (!kv && gen.failed) r = QUAROT_ERR_OUT_OF_MEMORY;
        if (!kv) { kv = gen.p; kv_len = gen.len; }
        for (i = 0, j = 0; i < n && r == QUAROT_OK; ++i) {
            if (k->it[i].kind == QZ_SKIP) continue;
            gp[j] = plan[i];
            gp[j].dtype = k->it[i].kind == QZ_QUANT ? QUAROT_DTYPE_F32 : k->it[i].dt;
            bt[j] = k->it[i].kind == QZ_QUANT ? (o->bits == 4 ? QX_GGML_Q4_0 : QX_GGML_Q8_0) : 0;
            ++j;
        }
        memset(&wo, 0, sizeof wo);
        memset(&set, 0, sizeof set);
        set.key = "general.file_type";
        set.type = QX_GGUF_U32;
        set.u = o->bits == 4 ? QX_LLAMA_FTYPE_Q4_0 : QX_LLAMA_FTYPE_Q8_0;
        wo.force = k->force;
        wo.set = &set;
        wo.n_set = 1;
        wo.block_types = bt;
        if (r == QUAROT_OK) r = qx_gguf_writer_begin(&k->gw, k->path, gp, j, kv, kv_len, &wo, e);
        else if (r == QUAROT_ERR_OUT_OF_MEMORY) qx_err_set(e, "out of memory");
        free(gp);
        free(bt);
        qx_sb_free(&gen);
    } else {
        qx_packed_entry* pe;
        qx_packed_settings st = o->act;
        qx_packed_write_opts wo;
        qx_sb cfg;
        char rot[400], *names = NULL;
        int64_t n_pe = 0, n_ex = 0, x;
        for (i = 0; i < n; ++i) {   /* a 3-D expert tensor [n_experts][out][in]: one 2-D entry per expert */
            int stacked = k->it[i].kind == QZ_QUANT && k->it[i].n_dims == 3;
            n_pe += stacked ? k->it[i].ne[2] : 1;
            n_ex += stacked ? k->it[i].ne[2] : 0;
        }
        pe = (qx_packed_entry*)calloc((size_t)(n_pe + 1), sizeof *pe);
        names = n_ex ? (char*)malloc((size_t)n_ex * QUAROT_NAME_MAX) : NULL;
        memset(&cfg, 0, sizeof cfg);
        r = pe && (names || !n_ex) ? qx_hf_config_write(s, &cfg, e) : QUAROT_ERR_OUT_OF_MEMORY;
        for (i = 0, j = 0, x = 0; i < n && r == QUAROT_OK; ++i) {
            const qz_item* it = &k->it[i];
            int64_t ex;
            if (it->kind == QZ_SKIP) continue;
            if (it->kind == QZ_QUANT && it->n_dims == 3) {
                for (ex = 0; ex < it->ne[2] && r == QUAROT_OK; ++ex, ++x, ++j) {
                    char* nm = names + x * QUAROT_NAME_MAX;
                    if (!qx_hf_expert_name(it->name, ex, nm, QUAROT_NAME_MAX)) {
                        qx_err_set(e, "%s: no per-expert name for expert %lld", it->name, (long long)ex);
                        r = QUAROT_ERR_INVALID_ARGUMENT;
                    }
                    pe[j].name = nm;
                    pe[j].packed = 1;
                    pe[j].dtype = it->dt;
                    pe[j].n_dims = 2;
                    pe[j].ne[0] = it->ne[0];
                    pe[j].ne[1] = it->ne[1];
                }
                continue;
            }
            pe[j].name = it->name;
            pe[j].packed = it->kind == QZ_QUANT;
            pe[j].dtype = it->dt;
            pe[j].n_dims = it->n_dims;
            memcpy(pe[j].ne, it->ne, sizeof pe[j].ne);
            ++j;
        }
        st.w_bits = o->bits;
        st.w_group_size = o->group;
        st.w_asym = o->asym;
        st.scale_dtype = o->scale_dtype;
        snprintf(st.w_quantizer, sizeof st.w_quantizer, "%s%s", o->gptq ? "gptq" : "rtn", o->clip_search ? "-clip" : "");
        st.rope_interleaved = c->rope_interleaved;
        if (k->rot && o->rotate) snprintf(rot, sizeof rot, "R1 %s; R2 %s; norms fused", k->rot->r1, k->rot->r2);
        else snprintf(rot, sizeof rot, "none");
        memset(&wo, 0, sizeof wo);
        wo.force = k->force;
        wo.online_reserve = qz_online_estimate(c);
        wo.config_json = cfg.p;
        wo.rotation = rot;
        if (r == QUAROT_OK) r = qx_packed_writer_begin(&k->pw, k->path, pe, j, &st, &wo, e);
        else if (r == QUAROT_ERR_OUT_OF_MEMORY) qx_err_set(e, "out of memory");
        free(pe);
        free(names);
        qx_sb_free(&cfg);
    }
    if (r != QUAROT_OK) qz_items_free(k);
    return r;
}

/* Quantizes one linear (rows of f32, already in the output's row order) and writes it; with c (the
   stage's codes) its codes and scales are taken instead, row r from c's row src(r) (the q/k
   permutation of a GGUF output, identity otherwise), and w holds the weights before quantization.
   An expert of a 3-D tensor (row0 >= 0: its first row in the tensor) goes to a GGUF as those rows of
   the tensor, to a packed file as its own linear under wname; the item's error sums add up over
   such calls. */
static quarot_result qz_put_quant(qz_sink* k, qz_item* it, const char* wname, int64_t row0, const float* w, int64_t rows,
                                  int64_t cols, const qz_codes* c, int perm, qx_err* e) {
    const qz_opts* o = k->o;
    int64_t groups = cols / (o->format == QZ_GGUF ? QX_GGML_QK : (o->group ? o->group : cols)), r, j;
    int8_t* q = (int8_t*)malloc((size_t)(rows * cols));
    float* sc = (float*)malloc((size_t)(rows * groups) * sizeof *sc);
    float* zr = o->asym ? (float*)malloc((size_t)(rows * groups) * sizeof *zr) : NULL;
    float* back = (float*)malloc((size_t)cols * sizeof *back);
    unsigned char* enc = NULL;
    uint64_t rb = 0;
    double num = 0.0, den = 0.0, mx = 0.0;
    quarot_result res;
    if (!q || !sc || !back || (o->asym && !zr)) { res = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "out of memory"); goto done; }
    if (c) {
        if (c->rows != rows || c->cols != cols || c->groups != groups || (o->asym && !c->zr)) {
            res = QUAROT_ERR_INTERNAL;
            qx_err_set(e, "%s: the stage's codes do not fit the output (%lldx%lld, %lld groups)", it->name, (long long)c->rows,
                       (long long)c->cols, (long long)c->groups);
            goto done;
        }
        for (r = 0; r < rows; ++r) {
            int64_t sr = perm ? qx_rope_src_row(r, k->head_dim, 1) : r;
            memcpy(q + r * cols, c->q + sr * cols, (size_t)cols);
            memcpy(sc + r * groups, c->sc + sr * groups, (size_t)groups * sizeof *sc);
            if (zr) memcpy(zr + r * groups, c->zr + sr * groups, (size_t)groups * sizeof *zr);
        }
        it->staged = 1;
        it->method = (int)c->rep.method;
        it->fallback = c->rep.fallback;
        it->out_err = c->rep.rows > 0 && c->rep.ref > 0 ? c->rep.err / c->rep.ref : (double)NAN;
        it->rtn_err = c->rep.rows > 0 && c->rep.ref > 0 ? c->rep.err_rtn / c->rep.ref : (double)NAN;
        it->gptq_loss = c->rep.gptq_loss;
        res = QUAROT_OK;
    } else {
        res = qz_weight_codes(o, w, rows, cols, q, sc, zr);
    }
    if (res != QUAROT_OK) { qx_err_set(e, "%s: cannot quantize: %s", it->name, quarot_result_string(res)); goto done; }
    if (o->format == QZ_GGUF) {
        uint32_t bt = o->bits == 4 ? QX_GGML_Q4_0 : QX_GGML_Q8_0;
        rb = qx_ggml_row_bytes(bt, cols);
        enc = (unsigned char*)malloc((size_t)(rb * (uint64_t)rows));
        if (!enc) { res = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "out of memory"); goto done; }
        for (r = 0; r < rows && res == QUAROT_OK; ++r) {
            res = qx_ggml_encode_row(bt, q + r * cols, sc + r * groups, cols, enc + (size_t)r * rb, it->name, e);
            if (res == QUAROT_OK) res = qx_ggml_decode_row(bt, enc + (size_t)r * rb, cols, back);
            for (j = 0; j < cols && res == QUAROT_OK; ++j) {
                double d = (double)back[j] - (double)w[r * cols + j];
                num += d * d;
                den += (double)w[r * cols + j] * (double)w[r * cols + j];
                if (fabs(d) > mx) mx = fabs(d);
            }
        }
        if (res == QUAROT_OK && row0 >= 0) res = qx_gguf_writer_put_raw_rows(k->gw, it->name, row0, rows, enc, rb * (uint64_t)rows, e);
        else if (res == QUAROT_OK) res = qx_gguf_writer_put_raw(k->gw, it->name, enc, rb * (uint64_t)rows, e);
    } else {
        int half = 1 << (o->bits - 1);
        for (r = 0; r < rows; ++r)
            for (j = 0; j < cols; ++j) {
                int64_t gi = r * groups + j / (cols / groups);
                float s = sc[gi], z = zr ? zr[gi] : 0.0f, x;
                double d;
                if (o->scale_dtype == QUAROT_DTYPE_F16) {   /* the value the file will give */
                    uint16_t h;
                    quarot_f32_to_f16(&s, &h, 1);
                    quarot_f16_to_f32(&h, &s, 1);
                }
                x = ((float)(q[r * cols + j] + half) - (z + (float)half)) * s;
                d = (double)x - (double)w[r * cols + j];
                num += d * d;
                den += (double)w[r * cols + j] * (double)w[r * cols + j];
                if (fabs(d) > mx) mx = fabs(d);
            }
        res = qx_packed_writer_put_linear(k->pw, wname, q, sc, zr, e);
    }
    it->err_num += num;
    it->err_den += den;
    it->rel_err = it->err_den > 0.0 ? it->err_num / it->err_den : 0.0;
    if (mx > it->max_err) it->max_err = mx;
done:
    free(q); free(sc); free(zr); free(back); free(enc);
    return res;
}

/* Expert ex of a quantized tensor (a 2-D linear: ex 0 of 1) from t's rows trow0 .. trow0 + out
   (with the stage's codes c: its rows of them), quantized and written: a 3-D tensor one expert at a
   time, so only one expert's rows are ever held in f32 here. */
static quarot_result qz_quant_expert(qz_sink* k, qz_item* it, const quarot_tensor* t, int64_t trow0, int64_t ex, const qz_codes* c,
                                     int perm, qx_err* e) {
    const int stacked = it->n_dims == 3;
    const int64_t cols = it->ne[0], out = it->ne[1], row0 = ex * out;
    float* w = (float*)malloc((size_t)(out * cols) * sizeof *w);
    char wname[QUAROT_NAME_MAX];
    qz_codes sub;   /* expert ex's rows of the stage's codes */
    quarot_result r = QUAROT_OK;
    int64_t i;
    if (!w) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset(&sub, 0, sizeof sub);
    if (c) {
        sub = *c;
        sub.rows = out;
        sub.q = c->q + row0 * c->cols;
        sub.sc = c->sc + row0 * c->groups;
        sub.zr = c->zr ? c->zr + row0 * c->groups : NULL;
        sub.orig = c->orig + row0 * c->cols;
        if (c->rows != out * (stacked ? it->ne[2] : 1)) {
            qx_err_set(e, "%s: the stage's codes have %lld rows, the tensor %lld", it->name, (long long)c->rows,
                       (long long)(out * (stacked ? it->ne[2] : 1)));
            r = QUAROT_ERR_INTERNAL;
        }
    }
    if (r == QUAROT_OK && stacked && k->o->format == QZ_PACKED && !qx_hf_expert_name(it->name, ex, wname, sizeof wname)) {
        qx_err_set(e, "%s: no per-expert name for expert %lld", it->name, (long long)ex);
        r = QUAROT_ERR_INTERNAL;
    }
    for (i = 0; i < out && r == QUAROT_OK; ++i) {   /* output row i takes source row src(i) */
        int64_t sr = perm ? qx_rope_src_row(i, k->head_dim, 1) : i;
        if (c) memcpy(w + i * cols, sub.orig + sr * cols, (size_t)cols * sizeof *w);
        else if ((r = quarot_tensor_get_row_f32(t, trow0 + sr, w + i * cols)) != QUAROT_OK)
            qx_err_set(e, "%s: cannot read: %s", it->name, quarot_result_string(r));
    }
    if (r == QUAROT_OK)
        r = qz_put_quant(k, it, stacked && k->o->format == QZ_PACKED ? wname : it->name, stacked ? row0 : -1, w, out, cols,
                         c ? &sub : NULL, perm, e);
    free(w);
    return r;
}

static quarot_result qz_put(void* user, const char* name, const quarot_tensor* t, qx_err* e) {
    qz_sink* k = (qz_sink*)user;
    qz_item* it = qz_find(k, name);
    int perm;
    quarot_result r;
    if (!it) { qx_err_set(e, "%s: tensor \"%s\" is not in the plan", k->path, name); return QUAROT_ERR_NOT_FOUND; }
    perm = k->o->format == QZ_GGUF && k->permute && qz_is_qk(name);
    if (it->kind == QZ_SKIP) {
        r = QUAROT_OK;
    } else if (it->kind == QZ_QUANT) {   /* 3-D experts [n_experts][out][in]: expert by expert, as ggml's rows e * out */
        const qz_codes* c = k->o->gptq ? qz_find_codes(k, name) : NULL;
        const int64_t n_ex = it->n_dims == 3 ? it->ne[2] : 1;
        int64_t ex;
        r = QUAROT_OK;
        if (k->o->gptq && (qz_is_linear(name) || qz_is_expert(name)) && !c) {   /* every decoder linear went through the stage */
            qx_err_set(e, "%s: the quantization stage gave no codes for it", name);
            r = QUAROT_ERR_INTERNAL;
        }
        if (r == QUAROT_OK && quarot_tensor_nrows(t) != n_ex * it->ne[1]) {
            qx_err_set(e, "%s: %lld rows, the plan %lld", name, (long long)quarot_tensor_nrows(t), (long long)(n_ex * it->ne[1]));
            r = QUAROT_ERR_SHAPE_MISMATCH;
        }
        for (ex = 0; ex < n_ex && r == QUAROT_OK; ++ex) r = qz_quant_expert(k, it, t, ex * it->ne[1], ex, c, perm, e);
    } else if (k->o->format == QZ_GGUF) {
        r = qx_gguf_writer_put_permuted(k->gw, name, t, perm ? k->head_dim : 0, 1, e);
    } else {
        r = qx_packed_writer_put(k->pw, name, t, e);
    }
    if (r == QUAROT_OK) { it->done = 1; k->written++; }
    return r;
}

/* A 3-D expert tensor one expert at a time from the rotation (qx_rotate_sink.put_expert): expert ex's
   rows t {in, out}, experts in order; the same bytes as the whole tensor through qz_put. */
static quarot_result qz_put_expert(void* user, const char* name, int64_t ex, const quarot_tensor* t, qx_err* e) {
    qz_sink* k = (qz_sink*)user;
    qz_item* it = qz_find(k, name);
    quarot_result r;
    if (!it) { qx_err_set(e, "%s: tensor \"%s\" is not in the plan", k->path, name); return QUAROT_ERR_NOT_FOUND; }
    if (it->n_dims != 3 || ex < 0 || ex >= it->ne[2] || t->ne[0] != it->ne[0] || quarot_tensor_nrows(t) != it->ne[1]) {
        qx_err_set(e, "%s: expert %lld of shape [%lld, %lld] does not fit the plan", name, (long long)ex, (long long)t->ne[1],
                   (long long)t->ne[0]);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    if (it->kind == QZ_SKIP) r = QUAROT_OK;
    else if (it->kind == QZ_QUANT) r = qz_quant_expert(k, it, t, 0, ex, NULL, 0, e);
    else if (k->o->format == QZ_GGUF) r = qx_gguf_writer_put_rows(k->gw, name, ex * it->ne[1], t, e);   /* F16: rows not whole blocks */
    else r = qx_packed_writer_put_rows(k->pw, name, ex * it->ne[1], t, e);
    if (r == QUAROT_OK && ex + 1 == it->ne[2]) { it->done = 1; k->written++; }   /* the last expert */
    return r;
}

/* The embedding and lm_head in row windows (qx_rotate_file_opts.global_window_rows): offered only
   where they are written plain (not quantized, no GPTQ stage), so each window goes to the writer as
   it is; the tensor counts once, with its last rows. */
static quarot_result qz_put_rows(void* user, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e) {
    qz_sink* k = (qz_sink*)user;
    qz_item* it = qz_find(k, name);
    quarot_result r;
    if (!it) { qx_err_set(e, "%s: tensor \"%s\" is not in the plan", k->path, name); return QUAROT_ERR_NOT_FOUND; }
    if (it->kind == QZ_QUANT) { qx_err_set(e, "%s: a quantized tensor cannot come in row windows", name); return QUAROT_ERR_STATE; }
    if (it->kind == QZ_SKIP) r = QUAROT_OK;
    else if (k->o->format == QZ_GGUF) r = qx_gguf_writer_put_rows(k->gw, name, row0, t, e);
    else r = qx_packed_writer_put_rows(k->pw, name, row0, t, e);
    if (r == QUAROT_OK && row0 + t->ne[1] == it->ne[1]) { it->done = 1; k->written++; }   /* the last rows */
    return r;
}

static quarot_result qz_finish(void* user, qx_err* e) {
    qz_sink* k = (qz_sink*)user;
    quarot_result r;
    if (k->gw) { r = qx_gguf_writer_finish(k->gw, e); k->gw = NULL; return r; }
    r = QUAROT_OK;
    if (k->hooks && k->hooks->count) {
        size_t need = 0;
        char* text = NULL;
        r = quarot_online_write(k->hooks, NULL, 0, &need);
        if (r == QUAROT_OK && !(text = (char*)malloc(need))) r = QUAROT_ERR_OUT_OF_MEMORY;
        if (r == QUAROT_OK) r = quarot_online_write(k->hooks, text, need, &need);
        if (r == QUAROT_OK) r = qx_packed_writer_set_online(k->pw, text);
        if (r != QUAROT_OK) qx_err_set(e, "%s: cannot record the online hooks: %s", k->path, quarot_result_string(r));
        free(text);
    }
    if (r != QUAROT_OK) { qx_packed_writer_abort(k->pw); k->pw = NULL; return r; }
    r = qx_packed_writer_finish(k->pw, e);
    k->pw = NULL;
    return r;
}

static void qz_abort(void* user) {
    qz_sink* k = (qz_sink*)user;
    qx_gguf_writer_abort(k->gw);
    qx_packed_writer_abort(k->pw);
    k->gw = NULL;
    k->pw = NULL;
}

/* ---- --w-quant gptq: the rotated model in memory, the >>quantize stage, then the output ---- */

/* A qx_rotate_sink that keeps every rotated tensor in dst as f32 (with the output config and the
   input's blobs), for the stage to calibrate on. */
typedef struct qz_collect {
    qx_store* dst;
    const qx_store* src;
} qz_collect;

static quarot_result qz_collect_begin(void* user, const qx_store* s, const qx_tensor_plan* plan, int64_t n, qx_err* e) {
    qz_collect* c = (qz_collect*)user;
    int64_t i;
    quarot_result r = QUAROT_OK;
    (void)plan;
    (void)n;
    c->src = s;
    c->dst->config = s->config;
    snprintf(c->dst->source_format, sizeof c->dst->source_format, "%s", s->source_format);
    for (i = 0; i < s->n_blobs && r == QUAROT_OK; ++i) r = qx_store_set_blob(c->dst, s->blobs[i].key, s->blobs[i].data, s->blobs[i].len);
    if (r != QUAROT_OK) qx_err_set(e, "keeping the rotated model: out of memory");
    return r;
}

static quarot_result qz_collect_put(void* user, const char* name, const quarot_tensor* t, qx_err* e) {
    qz_collect* c = (qz_collect*)user;
    quarot_tensor* d = NULL;
    int64_t ne[QUAROT_MAX_DIMS], i, rows = quarot_tensor_nrows(t);
    int nd = 1, k;
    quarot_result r;
    for (k = 0; k < QUAROT_MAX_DIMS; ++k) {
        ne[k] = t->ne[k];
        if (t->ne[k] > 1) nd = k + 1;
    }
    r = qx_store_add(c->dst, name, QUAROT_DTYPE_F32, nd, ne, NULL, &d);
    for (i = 0; i < rows && r == QUAROT_OK; ++i) r = quarot_tensor_get_row_f32(t, i, (float*)d->data + i * t->ne[0]);
    if (r != QUAROT_OK) qx_err_set(e, "%s: cannot keep the rotated tensor: %s", name, quarot_result_string(r));
    return r;
}

static quarot_result qz_collect_finish(void* user, qx_err* e) {
    qz_collect* c = (qz_collect*)user;
    (void)e;
    c->dst->config = c->src->config;   /* after post_run */
    return QUAROT_OK;
}

static void qz_collect_abort(void* user) { (void)user; }

static const char* qz_short(const char* name) {
    const char* p = strstr(name, "layers.");
    return p ? p + 7 : name;
}

/* The stage's report: keep the codes, the scales and the weights before quantization (the staged
   store is written back after the layer, so it still holds them), and say how it went. */
/* A new entry of k's list for `name` (rows x cols codes, `groups` scales per row, zeros when
   has_zeros), its buffers allocated and not yet filled; owned by the list once appended, so a
   failed allocation leaves nothing to free here. */
static quarot_result qz_codes_add(qz_sink* k, const char* name, int64_t rows, int64_t cols, int64_t groups, int has_zeros,
                                  qz_codes** out) {
    size_t len = strlen(name);
    qz_codes* c;
    if (k->n_codes == k->cap_codes) {
        int64_t cap = k->cap_codes ? 2 * k->cap_codes : 64;
        qz_codes* nc = (qz_codes*)realloc(k->codes, (size_t)cap * sizeof *nc);
        if (!nc) return QUAROT_ERR_OUT_OF_MEMORY;
        k->codes = nc;
        k->cap_codes = cap;
    }
    c = &k->codes[k->n_codes];
    memset(c, 0, sizeof *c);
    c->rows = rows;
    c->cols = cols;
    c->groups = groups;
    c->name = (char*)malloc(len + 1);
    c->q = (int8_t*)malloc((size_t)(rows * cols));
    c->sc = (float*)malloc((size_t)(rows * groups) * sizeof(float));
    c->zr = has_zeros ? (float*)malloc((size_t)(rows * groups) * sizeof(float)) : NULL;
    c->orig = (float*)malloc((size_t)(rows * cols) * sizeof(float));
    k->n_codes++;   /* owned by the list from here (freed with it) */
    if (!c->name || !c->q || !c->sc || !c->orig || (has_zeros && !c->zr)) return QUAROT_ERR_OUT_OF_MEMORY;
    memcpy(c->name, name, len + 1);
    *out = c;
    return QUAROT_OK;
}

/* An expert of a 3-D tensor: its codes go into that tensor's entry at rows e * out (the entry made
   at the first expert, for every expert's rows); the tensor's report sums the experts'. */
static quarot_result qz_on_expert(qz_sink* k, const quarot_qlinear_report* r, const char* sname, int64_t ex) {
    const quarot_tensor* t = qx_store_find(k->staged, sname);
    int64_t groups = r->group_size > 0 ? r->in / r->group_size : 1, i, total, row0 = ex * r->out;
    quarot_result res = QUAROT_OK;
    qz_codes* c = NULL;
    if (!t || !r->q || !r->scales || t->ne[0] != r->in || quarot_tensor_nrows(t) < row0 + r->out) return QUAROT_ERR_INTERNAL;
    total = quarot_tensor_nrows(t);
    for (i = 0; i < k->n_codes && !c; ++i)
        if (strcmp(k->codes[i].name, sname) == 0) c = &k->codes[i];
    if (!c) {
        if ((res = qz_codes_add(k, sname, total, r->in, groups, r->zeros != NULL, &c)) != QUAROT_OK) return res;
        c->rep = *r;
        c->rep.name = c->name;
        c->rep.q = NULL;
        c->rep.scales = c->rep.zeros = NULL;
        c->rep.err = c->rep.err_rtn = c->rep.ref = 0.0;
        c->rep.rows = 0;
        c->rep.fallback = 0;
        c->rep.method = QUAROT_WQUANT_RTN;
    }
    if (c->cols != r->in || c->groups != groups || (r->zeros != NULL) != (c->zr != NULL)) return QUAROT_ERR_INTERNAL;
    memcpy(c->q + row0 * r->in, r->q, (size_t)(r->out * r->in));
    memcpy(c->sc + row0 * groups, r->scales, (size_t)(r->out * groups) * sizeof(float));
    if (c->zr) memcpy(c->zr + row0 * groups, r->zeros, (size_t)(r->out * groups) * sizeof(float));
    for (i = 0; i < r->out && res == QUAROT_OK; ++i) res = quarot_tensor_get_row_f32(t, row0 + i, c->orig + (row0 + i) * r->in);
    if (r->method == QUAROT_WQUANT_GPTQ) c->rep.method = QUAROT_WQUANT_GPTQ;
    c->rep.fallback |= r->fallback;
    if (r->rows > 0 && r->ref > 0) {
        c->rep.err += r->err;
        c->rep.err_rtn += r->err_rtn;
        c->rep.ref += r->ref;
        c->rep.rows += r->rows;
    }
    return res;
}

static quarot_result qz_on_linear(void* user, const quarot_qlinear_report* r) {
    qz_sink* k = (qz_sink*)user;
    const quarot_tensor* t = k->staged ? qx_store_find(k->staged, r->name) : NULL;
    int64_t groups = r->group_size > 0 ? r->in / r->group_size : 1, i, ex;
    quarot_result res = QUAROT_OK;
    qz_codes* c;
    char sname[QUAROT_NAME_MAX];
    if (!t && k->staged && (ex = qx_hf_expert_stacked_name(r->name, sname, sizeof sname)) >= 0) {
        res = qz_on_expert(k, r, sname, ex);
        if (res == QUAROT_OK && r->fallback)
            qx_cli_info(k->cli, "%s: no calibration token routed to it: RTN instead of GPTQ", r->name);
        return res;
    }
    if (!t || !r->q || !r->scales || t->ne[0] != r->in || quarot_tensor_nrows(t) != r->out) return QUAROT_ERR_INTERNAL;
    if ((res = qz_codes_add(k, r->name, r->out, r->in, groups, r->zeros != NULL, &c)) != QUAROT_OK) return res;
    memcpy(c->q, r->q, (size_t)(r->out * r->in));
    memcpy(c->sc, r->scales, (size_t)(r->out * groups) * sizeof(float));
    if (c->zr) memcpy(c->zr, r->zeros, (size_t)(r->out * groups) * sizeof(float));
    for (i = 0; i < r->out && res == QUAROT_OK; ++i) res = quarot_tensor_get_row_f32(t, i, c->orig + i * r->in);
    c->rep = *r;
    c->rep.name = c->name;
    c->rep.q = NULL;
    c->rep.scales = c->rep.zeros = NULL;
    if (r->fallback && qz_is_expert(r->name))
        qx_cli_info(k->cli, "%s: no calibration token routed to it: RTN instead of GPTQ", r->name);
    else if (r->fallback)
        qx_cli_info(k->cli, "%s: dead input (no calibration row reaches it: all-zero Hessian): RTN instead of GPTQ", r->name);
    else if (r->method == QUAROT_WQUANT_GPTQ)
        qx_cli_info(k->cli, "%-24s GPTQ loss %.4e, output error %.4e of %.4e (RTN %.4e)%s", qz_short(r->name), r->gptq_loss, r->err, r->ref,
                    r->err_rtn, r->retries ? " (more damping)" : "");
    else
        qx_cli_info(k->cli, "%-24s RTN, weight MSE %.4e", qz_short(r->name), r->w_mse);
    return res;
}

static void qz_on_layer(void* user, int64_t done, int64_t n) {
    qz_sink* k = (qz_sink*)user;
    qx_cli_info(k->cli, "layer %lld/%lld quantized", (long long)done, (long long)n);
}

/* The stage over q (f32, owned; quantized in place), then q written through the output sink. */
static quarot_result qz_stage_write(qz_sink* k, qx_store* q, const quarot_quantize_desc* base, const quarot_online_list* hooks,
                                    const qx_windows* calib, qx_wq_stats* wst, qx_err* e) {
    qx_wq_opts wo;
    quarot_result r;
    int64_t n = q->count, j;
    qx_tensor_plan* pl;
    memset(&wo, 0, sizeof wo);
    wo.desc = *base;
    wo.desc.on_linear = qz_on_linear;
    wo.desc.user_data = k;
    wo.hooks = hooks && hooks->count ? hooks : NULL;
    wo.calib = calib;
    wo.on_layer = qz_on_layer;
    wo.user = k;
    k->staged = q;
    r = qx_wq_quantize(q, &wo, wst, e);
    k->staged = NULL;
    if (r != QUAROT_OK) return r;
    if (wst && wst->moe_note[0]) qx_cli_info(k->cli, "mixture of experts: %s", wst->moe_note);
    pl = qx_store_plan(q, QUAROT_DTYPE_F32, 1);
    if (!pl) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = qz_begin(k, q, pl, n, e);
    free(pl);
    for (j = 0; j < n && r == QUAROT_OK; ++j) r = qz_put(k, q->items[j].name, &q->items[j].t, e);
    if (r == QUAROT_OK) r = qz_finish(k, e);
    else qz_abort(k);
    return r;
}

/* ---- the command ---- */

typedef struct quantize_opts {
    const char *in, *out, *tokenizer;
    int format, scale_dtype, plain_dtype, quant_embeddings, dry, text_only, whole_experts;
    int64_t bits, group, nsamples, seq_len;
    double percdamp;
    int64_t a_bits, k_bits, v_bits, a_group, k_group, v_group;
    double a_clip;
    int group_given, gptq_given, k_given, v_given;
    qx_opts_common c;
    qx_opts_rotation rot;
    qx_opts_quant q;
    qx_opts_gptq g;
} quantize_opts;

static int check_wbits(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    int64_t x = *(int64_t*)((char*)base + o->off);
    (void)v;
    if (x < 2 || x > 8) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: %lld is outside 2..8", name, (long long)x), 0;
    return 1;
}

static int bits_ok(qx_cli* cli, const char* name, int64_t x) {
    if ((x < 2 || x > 8) && x != 16) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: %lld is outside 2..8 (16 = not quantized)", name, (long long)x), 0;
    return 1;
}

static int check_bits(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    (void)v;
    return bits_ok(cli, name, *(int64_t*)((char*)base + o->off));
}

/* --kv-bits N: --k-bits N --v-bits N */
static int parse_kv_bits(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    quantize_opts* q = (quantize_opts*)base;
    int64_t x;
    (void)o;
    if (!qx_cli_int(cli, name, v, INT64_MIN, INT64_MAX, &x) || !bits_ok(cli, name, x)) return 0;
    q->k_bits = q->v_bits = x;
    q->k_given = q->v_given = 1;
    return 1;
}

static const qx_opt_choice qz_formats[] = {{"gguf", QZ_GGUF}, {"packed", QZ_PACKED}, {NULL, 0}};
static const qx_opt_choice qz_dtypes[] = {{"f16", QUAROT_DTYPE_F16}, {"f32", QUAROT_DTYPE_F32}, {NULL, 0}};

static const qx_opt quantize_table[] = {
    {QX_OPT_CHOICE, "--format", QX_AT(quantize_opts, format), .choices = qz_formats, .def = "from OUT's extension", .help = "output form"},
    {QX_OPT_INT, "--bits", .arg = "N", QX_AT(quantize_opts, bits), .lo = INT64_MIN, .hi = INT64_MAX, .fn = check_wbits, .def = "4",
     .help = "weight bits: GGUF 4 (Q4_0) or 8 (Q8_0); packed 2..8"},
    {QX_OPT_INT, "--group-size", .arg = "N", QX_AT(quantize_opts, group), QX_GIVEN(quantize_opts, group_given), .lo = 0,
     .hi = (int64_t)1 << 40, .def = "0",
     .help = "GGUF: 32 only (ggml's block); packed: 0 = per output channel or N dividing every quantized row"},
    {QX_OPT_CHOICE, "--scale-dtype", QX_AT(quantize_opts, scale_dtype), .choices = qz_dtypes, .def = "f16", .help = "packed: dtype of the scales"},
    {QX_OPT_CHOICE, "--dtype", QX_AT(quantize_opts, plain_dtype), .choices = qz_dtypes, .def = "f16", .help = "matrices left unquantized"},
    {QX_OPT_FLAG, "--quantize-embeddings", QX_AT(quantize_opts, quant_embeddings),
     .help = "also the embeddings and lm_head (llama.cpp quantizes them too)"},
    {QX_OPT_STRING, "--tokenizer", .arg = "FILE", QX_AT(quantize_opts, tokenizer),
     .help = "GGUF from llama2.c / safetensors: the llama2.c tokenizer.bin to embed as tokenizer.ggml.* (default: tok<vocab>.bin "
             "/ tokenizer.bin beside IN, else a Hugging Face IN's tokenizer.json); with --calib-text also the tokenizer of the calibration text (default: the model's own)"},
    {QX_OPT_FLAG, "--text-only", QX_AT(quantize_opts, text_only),
     .help = "a vision-language model (Qwen2-VL / Qwen2.5-VL): write the text decoder alone, leaving the vision tower "
             "(visual.*) out, as llama.cpp's qwen2vl GGUF holds it; the merger's output projection is rotated with the "
             "text stream, so image prompts need the vision tower of a rotated checkpoint (quarot rotate)"},
    {QX_OPT_FLAG, "--whole-experts", QX_AT(quantize_opts, whole_experts),
     .help = "a GGUF's 3-D expert tensors rotated and quantized a whole tensor at a time (in f32: n_expert times the "
             "memory) instead of one expert at a time; the same bytes"},
    {QX_OPT_FLAG, "--dry-run", QX_AT(quantize_opts, dry), .help = "print what each tensor would become; write nothing"},
    {QX_OPT_END}
};
static const qx_opt_group quantize_group = {"options:", quantize_table, NULL};

static const qx_opt quantize_gptq_table[] = {
    {QX_OPT_INT, "--nsamples", .arg = "N", QX_AT(quantize_opts, nsamples), QX_GIVEN(quantize_opts, gptq_given), .lo = 1,
     .hi = INT64_C(1) << 30, .def = "128", .ref = "--nsamples", .help = "calibration windows"},
    {QX_OPT_INT, "--seq-len", .arg = "N", QX_AT(quantize_opts, seq_len), QX_GIVEN(quantize_opts, gptq_given), .lo = 2,
     .hi = INT64_C(1) << 24, .def = "2048 or the model's context if shorter", .ref = "--seqlen",
     .help = "tokens per window (stream windowing)"},
    {QX_OPT_FLOAT, "--percdamp", .arg = "R", QX_AT(quantize_opts, percdamp), QX_GIVEN(quantize_opts, gptq_given), .flo = 0.0,
     .fhi = 1e6, .def = "0.01", .ref = "--percdamp",
     .help = "damping, fraction of the mean Hessian diagonal; a failed Cholesky factorization retries with 10x and 100x that"},
    {QX_OPT_END}
};
static const qx_opt_group quantize_gptq_group = {
    NULL, quantize_gptq_table,
    "GPTQ on GGUF: groups of 32, so the codes are ggml's blocks; rows not whole blocks stay F16. GPTQ holds the rotated model "
    "in memory in f32. A linear no calibration row reaches (all-zero Hessian) is quantized by RTN instead, and the summary "
    "says so."};

static const qx_opt quantize_act_table[] = {
    {QX_OPT_INT, "--a-bits", .arg = "N", QX_AT(quantize_opts, a_bits), .lo = INT64_MIN, .hi = INT64_MAX, .fn = check_bits,
     .def = "4", .ref = "--a_bits", .help = "activation bits, 2..8 (16 = none)"},
    {QX_OPT_INT, "--a-group-size", .arg = "N", QX_AT(quantize_opts, a_group), .lo = 0, .hi = (int64_t)1 << 40,
     .def = "0 = the whole row", .ref = "--a_groupsize", .help = "activation groups of N channels"},
    {QX_OPT_FLOAT, "--a-clip", .arg = "R", QX_AT(quantize_opts, a_clip), .flo = 1e-6, .fhi = 1.0, .def = "1", .ref = "--a_clip_ratio",
     .help = "activation clip ratio"},
    {QX_OPT_INT, "--k-bits", .arg = "N", QX_AT(quantize_opts, k_bits), QX_GIVEN(quantize_opts, k_given), .lo = INT64_MIN,
     .hi = INT64_MAX, .fn = check_bits, .def = "16 = none", .ref = "--k_bits", .help = "K cache bits, 2..8"},
    {QX_OPT_INT, "--v-bits", .arg = "N", QX_AT(quantize_opts, v_bits), QX_GIVEN(quantize_opts, v_given), .lo = INT64_MIN,
     .hi = INT64_MAX, .fn = check_bits, .def = "16 = none", .ref = "--v_bits", .help = "V cache bits, 2..8"},
    {QX_OPT_CUSTOM, "--kv-bits", .arg = "N", .fn = parse_kv_bits, .help = "--k-bits N and --v-bits N"},
    {QX_OPT_INT, "--k-group-size", .arg = "N", QX_AT(quantize_opts, k_group), .lo = 0, .hi = (int64_t)1 << 40, .ref = "--k_groupsize",
     .help = "K cache groups of N"},
    {QX_OPT_INT, "--v-group-size", .arg = "N", QX_AT(quantize_opts, v_group), .lo = 0, .hi = (int64_t)1 << 40, .ref = "--v_groupsize",
     .help = "V cache groups of N"},
    {QX_OPT_END}
};
static const qx_opt_group quantize_act_group = {"recorded in the packed file for the engine (QuaRot's flag in brackets):", quantize_act_table, NULL};

const qx_opts_cmd qx_cmd_quantize_spec = {
    .name = "quantize",
    .about = "Rotate the checkpoint IN as `quarot rotate` does and quantize its decoder linears (q/k/v/o,\n"
             "gate/up/down) to integers, writing OUT in one of two forms:\n"
             "  OUT.gguf          llama.cpp GGUF with ggml's own Q4_0 (--bits 4, default) or Q8_0 (--bits 8)\n"
             "                    blocks of 32 (f16 scale, codes); rows whose length is not a multiple of 32 stay\n"
             "                    F16, as llama.cpp does. No online rotation: R1 + R2 folded and the norms fused,\n"
             "                    so stock llama.cpp runs the file (a GGUF input keeps its tokenizer keys; from\n"
             "                    llama2.c the tokenizer.bin beside IN is embedded).\n"
             "  OUT.safetensors   the quarot-packed W4A4 format for engines (docs/formats.md):\n"
             "                    int codes two per byte (low nibble first), f16/f32 scales (and zeros), the\n"
             "                    activation / KV settings and the online hook list in __metadata__.\n"
             "Everything else (embeddings, norms, lm_head) is kept: matrices in --dtype, vectors in f32. A Qwen2-VL /\n"
             "Qwen2.5-VL checkpoint needs --text-only: the text decoder alone (the GGUF as llama.cpp's qwen2vl).\n",
    .operands = {{"IN", offsetof(quantize_opts, in)}, {"OUT", offsetof(quantize_opts, out)}},
    .usage_on_excess = 1,
    .uses = {{&quantize_group, 0, 0, NULL},
             {&qx_opts_quant_group, offsetof(quantize_opts, q), QX_QUANT_ASYM | QX_QUANT_W_CLIP, NULL},
             {&qx_opts_gptq_group, offsetof(quantize_opts, g), 0, "weight quantizer (QuaRot's flag in brackets):"},
             {&quantize_gptq_group, 0, 0, NULL},
             {&quantize_act_group, 0, 0, NULL},
             {&qx_opts_quant_group, offsetof(quantize_opts, q), QX_QUANT_A_ASYM | QX_QUANT_KV_ASYM | QX_QUANT_KV_CLIP, NULL},
             {&qx_opts_rotation_group, offsetof(quantize_opts, rot),
              QX_ROTATION_KIND | QX_ROTATION_CONTEXT | QX_ROTATION_ROTATIONS | QX_ROTATION_SEED | QX_ROTATION_BLOCK | QX_ROTATION_NO_R2 | QX_ROTATION_TP |
                  QX_ROTATION_NO_ONLINE, "rotation (as quarot rotate):"},
             {&qx_opts_common_group, offsetof(quantize_opts, c), QX_COMMON_FORCE | QX_COMMON_QUIET, NULL}},
    .epilog = "Prints a summary with each quantized tensor's relative error sum (w - w^)^2 / sum w^2 and max |w - w^|\n"
              "(GPTQ: also the calibration output error against RTN's); progress per layer and per linear (GPTQ's\n"
              "loss) on stderr. OUT appears only when complete. Exit codes: 0 ok, 1 usage, 2 input, 3 output, 4\n"
              "cannot quantize as asked (e.g. calibration text too short for --nsamples), 5 internal.\n",
};

typedef struct qz_progress {
    qx_cli* cli;
    const char* stage;
} qz_progress;

static void qz_on_progress(void* user, const char* stage, int64_t done, int64_t total) {
    qz_progress* p = (qz_progress*)user;
    if (!p->stage || strcmp(p->stage, stage) != 0) {
        if (p->stage) qx_cli_progress_end(p->cli, "validation");
        p->stage = stage;
        qx_cli_phase(p->cli);
    }
    qx_cli_progress(p->cli, done, total, strcmp(stage, "validate") == 0 ? "validating layer" : "rotating + quantizing layer");
}

/* The per-tensor table and totals (stdout). */
static void qz_summary(const qz_opts* o, const qz_sink* k) {
    int64_t i, nq = 0, nf = 0, ndead = 0, nmoe = 0, n3 = 0, nex = 0;
    double sum = 0.0, worst = 0.0;
    char tb[16];
    for (i = 0; i < k->n; ++i)
        if (o->format == QZ_PACKED && k->it[i].kind == QZ_QUANT && k->it[i].n_dims == 3) { ++n3; nex += k->it[i].ne[2]; }
    if (o->gptq)
        printf("  %-52s %-6s %-11s %-10s %-10s %-9s %-10s %s\n", "tensor", "type", "shape", "rel.err", "max|err|", "method", "out.err", "RTN out.err");
    else
        printf("  %-52s %-6s %-11s %-10s %s\n", "tensor", "type", "shape", "rel.err", "max|err|");
    for (i = 0; i < k->n; ++i) {
        const qz_item* it = &k->it[i];
        char shape[32];
        if (it->kind == QZ_VECTOR || it->kind == QZ_SKIP) continue;
        if (it->n_dims >= 3 && it->ne[2] > 1)
            snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)it->ne[2], (long long)it->ne[1], (long long)it->ne[0]);
        else
            snprintf(shape, sizeof shape, "%lldx%lld", (long long)it->ne[1], (long long)it->ne[0]);
        if (it->kind == QZ_QUANT && it->staged) {
            printf("  %-52s %-6s %-11s %-10.3e %-10.3e %-9s %-10.3e %.3e\n", it->name, qz_type_name(o, it, tb, sizeof tb), shape, it->rel_err,
                   it->max_err, it->fallback ? "RTN*" : it->method == QUAROT_WQUANT_GPTQ ? "GPTQ" : "RTN", it->out_err, it->rtn_err);
            ++nq;
            ndead += it->fallback;
            sum += it->rel_err;
            if (it->rel_err > worst) worst = it->rel_err;
        } else if (it->kind == QZ_QUANT) {
            printf("  %-52s %-6s %-11s %-10.3e %.3e\n", it->name, qz_type_name(o, it, tb, sizeof tb), shape, it->rel_err, it->max_err);
            ++nq;
            sum += it->rel_err;
            if (it->rel_err > worst) worst = it->rel_err;
        } else {
            printf("  %-52s %-6s %-11s %s\n", it->name, qz_type_name(o, it, tb, sizeof tb), shape, it->why[0] ? it->why : "kept");
            if (strncmp(it->why, "MoE ", 4) == 0) ++nmoe;
            else nf += it->why[0] != 0;
        }
    }
    printf("  %lld tensors quantized (mean rel.err %.3e, worst %.3e)", (long long)nq, nq ? sum / (double)nq : 0.0, worst);
    if (nf) printf("; %lld linears kept in F16 because their rows are not a multiple of 32 (llama.cpp's fallback)", (long long)nf);
    if (nmoe)
        printf("; %lld mixture-of-experts routers / shared-expert gates kept F32 (they choose and scale the experts; the "
               "experts are quantized)", (long long)nmoe);
    printf("\n");
    if (n3)
        printf("  3-D experts: %lld tensors [n_experts][out][in] written as %lld per-expert packed linears "
               "(\"...experts.E.<proj>.weight\"; their rows above cover all experts)\n", (long long)n3, (long long)nex);
    if (o->gptq)
        printf("  rel.err = sum (w - w^)^2 / sum w^2; out.err = sum ||x (W - W^)^T||^2 / sum ||x W^T||^2 over the calibration rows\n"
               "  (RTN out.err: the same for round-to-nearest with the same quantizer)\n");
    if (ndead)
        printf("  RTN*: %lld linears with a dead input (no calibration row reaches them: all-zero Hessian) were quantized by RTN "
               "instead of GPTQ\n", (long long)ndead);
}

/* ---- the run, step by step ---- */

/* What one run reads and builds; qz_cmd_free frees it all. */
typedef struct qz_cmd {
    qx_cli cli;
    quantize_opts opt;
    qz_opts o;
    const char* rotation;          /* --rotation's word */
    char tok_found[4096];          /* the tokenizer found beside IN (opt.tokenizer may point here) */
    char* tok_dir;                 /* a Hugging Face input's directory, for its tokenizer.json (GGUF output) */
    quarot_adapt_context ctx;      /* --context */
    qx_spin_rot learned;           /* --rotations */
    qx_store s;                    /* the input */
    qx_tokenizer tok;              /* GGUF output: the vocabulary to embed (have_tok) */
    qx_tokenizer ctok;             /* --w-quant gptq: the calibration text's tokenizer (have_ctok) */
    qx_windows cw;                 /* --w-quant gptq: the calibration windows (have_cw) */
    qx_store qs;                   /* --w-quant gptq: the model in f32 for the stage (have_q) */
    int have_tok, have_ctok, have_cw, have_q;
    qz_sink sink;
    int64_t n_vision;              /* the input's vision tower tensors (qwen2vl), merger included */
    uint64_t vision_bytes;         /* their bytes in the input */
    quarot_online_list list;       /* the online hooks the rotation asks for */
    qx_rotate_file_stats st;
    qx_wq_stats wst;
    qx_err e;
} qz_cmd;

static void qz_cmd_init(qz_cmd* q) {
    memset(q, 0, sizeof *q);
    quarot_adapt_context_init(&q->ctx, NULL);
    qx_store_init(&q->s);
    qx_store_init(&q->qs);
    quarot_online_list_init(&q->list, NULL);
}

static void qz_cmd_free(qz_cmd* q) {
    qx_tokenizer_free(&q->tok);
    free(q->tok_dir);
    if (q->have_ctok) qx_tokenizer_free(&q->ctok);
    if (q->have_cw) qx_windows_free(&q->cw);
    if (q->have_q) qx_store_free(&q->qs);
    qz_codes_free(&q->sink);
    qz_items_free(&q->sink);
    quarot_online_list_free(&q->list);
    quarot_adapt_context_free(&q->ctx);
    qx_spin_rot_free(&q->learned);
    qx_store_free(&q->s);
}

/* The defaults and the command line; QX_OPTS_RUN to go on, else the exit code. */
static int qz_parse_options(qz_cmd* q, int argc, char** argv) {
    quantize_opts* opt = &q->opt;
    qx_cli_init(&q->cli, "quantize", 0);
    opt->bits = 4;
    opt->scale_dtype = opt->plain_dtype = QUAROT_DTYPE_F16;
    opt->a_bits = 4;
    opt->a_clip = 1.0;
    opt->k_bits = opt->v_bits = 16;
    opt->q.k_asym = opt->q.v_asym = 1;
    opt->q.k_clip = opt->q.v_clip = 1.0;
    qx_opts_rotation_init(&opt->rot);
    return qx_opts_parse(&qx_cmd_quantize_spec, &q->cli, argc, argv, opt);
}

/* The options as the output code reads them (qz_opts). */
static void qz_settings(qz_cmd* q) {
    const quantize_opts* opt = &q->opt;
    qz_opts* o = &q->o;
    o->bits = (int)opt->bits;
    o->group = opt->group;
    o->asym = opt->q.w_asym;
    o->clip_search = opt->q.w_clip;
    o->scale_dtype = (quarot_dtype)opt->scale_dtype;
    o->plain_dtype = (quarot_dtype)opt->plain_dtype;
    o->quant_embeddings = opt->quant_embeddings;
    o->gptq = opt->g.w_quant == QX_WQ_GPTQ;
    o->text_only = opt->text_only;
    o->whole_experts = opt->whole_experts;
    o->act.a_bits = (int)opt->a_bits;
    o->act.a_group_size = opt->a_group;
    o->act.a_asym = opt->q.a_asym;
    o->act.a_clip = opt->a_clip;
    o->act.k_bits = (int)opt->k_bits;
    o->act.v_bits = (int)opt->v_bits;
    o->act.k_group_size = opt->k_group;
    o->act.v_group_size = opt->v_group;
    o->act.k_asym = opt->q.k_asym;
    o->act.v_asym = opt->q.v_asym;
    o->act.k_clip = opt->q.k_clip;
    o->act.v_clip = opt->q.v_clip;
}

/* The output form, the rotation and the weight quantizer, checked together, and OUT: every usage
   error before any file is read. */
static int qz_check_options(qz_cmd* q) {
    quantize_opts* opt = &q->opt;
    qz_opts* o = &q->o;
    qx_cli* cli = &q->cli;
    const char* format;
    q->cli.quiet = opt->c.quiet;
    if (opt->g.act_order) opt->gptq_given = 1;
    qz_settings(q);
    if (!opt->in || !opt->out) return qx_cli_fail(cli, QX_EXIT_USAGE, "needs IN and OUT (usage: quarot quantize IN OUT [options])");
    format = qx_opt_word(qz_formats, opt->format);
    if (!format) {
        if (qx_str_ends_with(opt->out, ".gguf")) format = "gguf";
        else if (qx_str_ends_with(opt->out, ".safetensors")) format = "packed";
        else return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: cannot tell the output form from the name: end it in .gguf or .safetensors, or "
                                                     "give --format gguf|packed", opt->out);
    }
    o->format = strcmp(format, "gguf") == 0 ? QZ_GGUF : QZ_PACKED;
    if (opt->rot.context && opt->rot.rotation == QX_ROT_HADAMARD) opt->rot.rotation = QX_ROT_ADAPT;
    q->rotation = qx_opt_word(qx_opts_rotations, opt->rot.rotation);
    if (strcmp(q->rotation, "adapt") == 0 && !opt->rot.context)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--rotation adapt needs --context FILE (run `quarot calibrate` first)");
    if (opt->rot.context && strcmp(q->rotation, "adapt") != 0)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--context goes with --rotation adapt, not --rotation %s", q->rotation);
    if (opt->rot.rotations && !opt->rot.rotation_given) q->rotation = "learned";   /* --rotations alone means them */
    if (opt->rot.rotations && strcmp(q->rotation, "learned") != 0)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--rotations goes with --rotation learned, not --rotation %s", q->rotation);
    if (strcmp(q->rotation, "learned") == 0 && !opt->rot.rotations)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--rotation learned needs --rotations FILE (run `quarot calibrate --method spinquant` first)");
    o->rotate = strcmp(q->rotation, "none") != 0;
    if (o->gptq && !opt->g.calib_text)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--w-quant gptq needs --calib-text FILE (the calibration text for the Hessians)");
    if (!o->gptq && (opt->gptq_given || opt->g.calib_text))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--calib-text / --nsamples / --seq-len / --percdamp / --act-order are GPTQ options: add --w-quant gptq");
    if (o->format == QZ_GGUF) {
        if (o->bits != 4 && o->bits != 8)
            return qx_cli_fail(cli, QX_EXIT_USAGE, "--bits %d: GGUF output has Q4_0 (--bits 4) and Q8_0 (--bits 8) only", o->bits);
        if (opt->group_given && o->group != QX_GGML_QK)
            return qx_cli_fail(cli, QX_EXIT_USAGE, "--group-size %lld: %s blocks hold groups of 32 (ggml's layout); leave --group-size out "
                                                   "or give 32", (long long)o->group, o->bits == 4 ? "Q4_0" : "Q8_0");
        if (o->asym) return qx_cli_fail(cli, QX_EXIT_USAGE, "--asym: Q4_0 / Q8_0 blocks are symmetric (use the packed output for zero points)");
        o->group = QX_GGML_QK;
        opt->rot.no_online = 1;               /* stock llama.cpp applies no online rotation */
    }
    if (qx_same_file(opt->in, opt->out)) return qx_cli_fail(cli, QX_EXIT_OUTPUT, "%s: is the input; the input is never modified", opt->out);
    if (!opt->dry && !opt->c.force && qx_path_exists(opt->out)) return qx_cli_fail(cli, QX_EXIT_OUTPUT, "%s: exists already; use --force to replace it", opt->out);
    if (!opt->dry && qx_is_dir(opt->out)) return qx_cli_fail(cli, QX_EXIT_OUTPUT, "%s: is a directory (expected a file name)", opt->out);
    return QX_EXIT_OK;
}

/* --context: Adapt Rotation's stage-1 result, read before the model; it sets the block size. */
static int qz_load_context(qz_cmd* q) {
    quantize_opts* opt = &q->opt;
    quarot_result r;
    if (!opt->rot.context) return QX_EXIT_OK;
    r = qx_calib_context_load(opt->rot.context, &q->ctx, &q->e);
    if (r != QUAROT_OK) return qx_cli_fail(&q->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", q->e.msg);
    if (opt->rot.seed_given && (uint64_t)opt->rot.seed != q->ctx.seed)
        return qx_cli_fail(&q->cli, QX_EXIT_USAGE, "--seed %lld conflicts with the context's seed %llu", (long long)opt->rot.seed,
                           (unsigned long long)q->ctx.seed);
    opt->rot.block_size = q->ctx.block;
    return QX_EXIT_OK;
}

/* A vision-language IN: its vision tower counted; --text-only asked for one that has it, and a GGUF
   output (llama.cpp keeps the vision tower in a separate mmproj file) only with --text-only. */
static int qz_check_vision(qz_cmd* q) {
    const qx_store* s = &q->s;
    int64_t i;
    q->n_vision = strcmp(s->config.arch, "qwen2vl") == 0 ? qx_vl_tensor_count(s) : 0;
    for (i = 0; i < s->count; ++i)
        if (q->n_vision > 0 && strncmp(s->items[i].name, "visual.", 7) == 0) q->vision_bytes += quarot_tensor_nbytes(&s->items[i].t);
    if (q->opt.text_only && q->n_vision == 0)
        return qx_cli_fail(&q->cli, QX_EXIT_USAGE, "--text-only: %s (%s) has no vision tower to leave out (it is for Qwen2-VL / "
                                                   "Qwen2.5-VL checkpoints)", q->opt.in, s->config.arch);
    if (!q->opt.text_only && q->n_vision > 0 && q->o.format == QZ_GGUF)
        return qx_cli_fail(&q->cli, QX_EXIT_PROCESS, "%s: %s has a vision tower (%lld tensors), which llama.cpp keeps in a separate mmproj "
                                                     "file this tool does not write: --text-only writes the text decoder alone (llama.cpp's "
                                                     "qwen2vl GGUF)", q->opt.out, s->config.arch, (long long)q->n_vision);
    return QX_EXIT_OK;
}

/* IN, and what its architecture allows. */
static int qz_load_input(qz_cmd* q) {
    const quantize_opts* opt = &q->opt;
    qx_load_opts lo;
    quarot_result r;
    memset(&lo, 0, sizeof lo);
    r = qx_load_model(opt->in, &lo, &q->s, &q->e);
    if (r != QUAROT_OK) return qx_cli_fail(&q->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", q->e.msg);
    if (q->s.config.norm == QUAROT_NORM_LAYER && q->o.rotate)
        return qx_cli_fail(&q->cli, QX_EXIT_PROCESS, "%s: architecture %s: a rotated LayerNorm model cannot be written (RMSNorm needed)", opt->in,
                           q->s.config.arch);
    if (opt->rot.context && q->ctx.hidden != q->s.config.hidden)
        return qx_cli_fail(&q->cli, QX_EXIT_PROCESS, "%s: the Adapt Rotation context is for hidden size %lld, the model has %lld", opt->in,
                           (long long)q->ctx.hidden, (long long)q->s.config.hidden);
    if (opt->rot.rotations) {   /* the learned rotations: this model's (digest, shapes), orthogonal */
        char digest[QX_DIGEST_LEN];
        r = qx_spin_load(opt->rot.rotations, &q->learned, &q->e);
        if (r != QUAROT_OK) return qx_cli_fail(&q->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", q->e.msg);
        r = qx_spin_model_digest(opt->in, digest, &q->e);
        if (r == QUAROT_OK) r = qx_spin_check(&q->learned, &q->s.config, digest, NULL, &q->e);
        if (r != QUAROT_OK)
            return qx_cli_fail(&q->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s: %s: %s", opt->in, opt->rot.rotations,
                               q->e.msg);
    }
    if (q->o.format == QZ_PACKED && !opt->k_given && !opt->v_given) q->o.act.k_bits = q->o.act.v_bits = 16;
    return qz_check_vision(q);
}

/* GGUF from llama2.c / safetensors: llama.cpp needs the vocabulary in the file; take --tokenizer or
   the llama2.c tokenizer found beside the model (a GGUF input keeps its own keys). */
static int qz_pick_tokenizer(qz_cmd* q) {
    quantize_opts* opt = &q->opt;
    char tok_looked[1024];
    quarot_result r;
    if (q->o.format == QZ_GGUF && !qx_store_get_blob(&q->s, "gguf.kv", NULL)) {
        if (!opt->tokenizer &&
            qx_tokenizer_find_bin(opt->in, q->s.config.vocab, q->tok_found, sizeof q->tok_found, tok_looked, sizeof tok_looked))
            opt->tokenizer = q->tok_found;
        if (opt->tokenizer) {
            r = qx_tokenizer_load(&q->tok, opt->tokenizer, (int32_t)q->s.config.vocab, &q->e);
            if (r != QUAROT_OK) return qx_cli_fail(&q->cli, QX_EXIT_INPUT, "%s", q->e.msg);
            q->have_tok = 1;
        } else if (qx_is_dir(opt->in) || qx_str_ends_with(opt->in, ".safetensors")) {   /* its tokenizer.json, if any */
            q->tok_dir = qx_is_dir(opt->in) ? qx_path_join(opt->in, ".") : qx_path_dir(opt->in);
            if (!q->tok_dir) return qx_cli_fail(&q->cli, QX_EXIT_INTERNAL, "out of memory");
        }
    } else if (opt->tokenizer && !q->o.gptq) {
        return qx_cli_fail(&q->cli, QX_EXIT_USAGE, "--tokenizer: only for a GGUF output from a llama2.c or safetensors input (a GGUF input keeps "
                                                   "its own), or for --calib-text");
    }
    return QX_EXIT_OK;
}

/* The output sink, and the input's tensors (and the lm_head that untying creates) decided as the
   run will: a group size that does not fit is refused before any work; --dry-run prints the list. */
static int qz_plan_tensors(qz_cmd* q) {
    qz_sink* k = &q->sink;
    qx_tensor_plan* pl;
    const quarot_tensor* em = qx_store_find(&q->s, "model.embed_tokens.weight");
    int64_t j = q->s.count;
    quarot_result r;
    k->o = &q->o;
    k->cli = &q->cli;
    k->path = q->opt.out;
    k->force = q->opt.c.force;
    k->hooks = &q->list;
    k->rot = &q->st;
    k->tok = q->have_tok ? &q->tok : NULL;
    k->tok_dir = q->tok_dir;
    if (!(pl = qx_store_plan(&q->s, QUAROT_DTYPE_DEFAULT, 1))) return qx_cli_fail(&q->cli, QX_EXIT_INTERNAL, "out of memory");
    if (q->o.rotate && q->s.config.tied_embeddings && em) {
        pl[j].name = "lm_head.weight";
        memcpy(pl[j].ne, em->ne, sizeof pl[j].ne);
        pl[j].n_dims = 2;
        ++j;
    }
    r = qz_items(k, pl, j, &q->e);
    free(pl);
    if (r != QUAROT_OK) return qx_cli_fail(&q->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s", q->e.msg);
    return QX_EXIT_OK;
}

/* --w-quant gptq: the calibration windows before any work (the model's tokenizer, stream windowing). */
static int qz_calibration_windows(qz_cmd* q) {
    quantize_opts* opt = &q->opt;
    const quarot_model_config* c = &q->s.config;
    qx_calib_text ct;
    char used[4096];
    int64_t ctx_len = c->max_seq > 0 ? c->max_seq : 2048;
    quarot_result r;
    if (!opt->seq_len) opt->seq_len = ctx_len < 2048 ? ctx_len : 2048;
    if (!opt->nsamples) opt->nsamples = 128;
    if (c->max_seq > 0 && opt->seq_len > c->max_seq)
        return qx_cli_fail(&q->cli, QX_EXIT_PROCESS, "--seq-len %lld is longer than the model's context (%lld tokens)", (long long)opt->seq_len,
                           (long long)c->max_seq);
    r = qx_tokenizer_for_model(&q->ctok, opt->in, opt->tokenizer, c->vocab, used, sizeof used, &q->e);
    if (r != QUAROT_OK) return qx_cli_fail(&q->cli, qx_cli_exit_for(r), "--calib-text needs a tokenizer: %s", q->e.msg);
    q->have_ctok = 1;
    r = qx_calib_text_load(opt->g.calib_text, &ct, &q->e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&q->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : QX_EXIT_INPUT,
                           "%s", q->e.msg);
    r = qx_calib_windows(&ct, &q->ctok, QX_WINDOWING_STREAM, opt->seq_len, 0, &q->cw, &q->e);
    qx_calib_text_free(&ct);
    if (r == QUAROT_ERR_INVALID_ARGUMENT)
        return qx_cli_fail(&q->cli, QX_EXIT_PROCESS, "%s: calibration text too short for one window of %lld tokens (--nsamples %lld)",
                           opt->g.calib_text, (long long)opt->seq_len, (long long)opt->nsamples);
    if (r != QUAROT_OK) return qx_cli_fail(&q->cli, qx_cli_exit_for(r), "%s: calibration windows: %s", opt->g.calib_text, q->e.msg);
    q->have_cw = 1;
    if (q->cw.n < opt->nsamples)
        return qx_cli_fail(&q->cli, QX_EXIT_PROCESS, "%s: calibration text too short: %lld windows of %lld tokens, --nsamples %lld",
                           opt->g.calib_text, (long long)q->cw.n, (long long)opt->seq_len, (long long)opt->nsamples);
    return QX_EXIT_OK;
}

/* --dry-run: what each tensor would become (stdout). */
static void qz_print_dry_run(const qz_cmd* q) {
    const qz_opts* o = &q->o;
    char tb[16];
    int64_t i;
    printf("dry run: %s (%s, %lld layers) -> %s (%s), rotation %s; nothing written\n", q->opt.in, q->s.source_format,
           (long long)q->s.config.n_layers, q->opt.out, o->format == QZ_GGUF ? (o->bits == 4 ? "GGUF Q4_0" : "GGUF Q8_0") : "quarot-packed",
           q->rotation);
    for (i = 0; i < q->sink.n; ++i) {
        const qz_item* it = &q->sink.it[i];
        char shape[48];
        if (it->n_dims >= 2) snprintf(shape, sizeof shape, "%lldx%lld", (long long)it->ne[1], (long long)it->ne[0]);
        else snprintf(shape, sizeof shape, "%lld", (long long)it->ne[0]);
        printf("  %-52s %-11s -> %s%s%s%s\n", it->name, shape, qz_type_name(o, it, tb, sizeof tb), it->why[0] ? " (" : "", it->why,
               it->why[0] ? ")" : "");
    }
}

/* --w-quant gptq: the >>quantize stage's options. */
static void qz_stage_desc(const qz_cmd* q, quarot_quantize_desc* qd) {
    const qz_opts* o = &q->o;
    memset(qd, 0, sizeof *qd);
    qd->method = QUAROT_WQUANT_GPTQ;
    qd->weight.bits = o->bits;
    qd->weight.asymmetric = o->asym;
    qd->weight.group_size = o->format == QZ_GGUF ? QX_GGML_QK : o->group;
    qd->weight.clip_search = o->clip_search ? QUAROT_CLIP_SEARCH_LP : 0;
    qd->percdamp = q->opt.percdamp;
    qd->act_order = q->opt.g.act_order;
    qd->nsamples = q->opt.nsamples;
    qd->seq_len = q->opt.seq_len;
    qd->keep_indivisible = o->format == QZ_GGUF;   /* rows not whole blocks of 32 stay F16 */
    qd->dead_fallback = 1;
}

/* The rotation as quarot rotate builds it, with the online hooks (and R3 for a quantized KV cache)
   unless the output takes none. */
static void qz_rotate_desc(qz_cmd* q, quarot_rotate_desc* desc) {
    const qx_opts_rotation* rot = &q->opt.rot;
    memset(desc, 0, sizeof *desc);
    desc->rotation = rot->context ? QUAROT_ROTATION_ADAPT : strcmp(q->rotation, "random") == 0 ? QUAROT_ROTATION_RANDOM_ORTHOGONAL
                                                                                                 : QUAROT_ROTATION_HADAMARD;
    desc->r2_rotation = rot->context ? QUAROT_ROTATION_HADAMARD : desc->rotation;
    desc->seed = rot->context ? q->ctx.seed : (uint64_t)rot->seed;
    desc->context = rot->context ? &q->ctx : NULL;
    desc->block_size = rot->block_size;
    desc->no_r2 = rot->no_r2;
    desc->online = !rot->no_online;
    desc->r3 = !rot->no_online && (q->o.act.k_bits < 16 || q->o.act.v_bits < 16);
    desc->max_tp_size = rot->max_tp_size;
    if (q->learned.r1) qx_spin_desc(&q->learned, desc);   /* R1 MATRIX, one R2 per layer */
    if (desc->online || desc->r3) desc->online_out = &q->list;
}

/* Rotated: qx_rotate_file layer by layer straight into the output; with GPTQ into an f32 store
   first (qz_collect), then the stage over it. */
static quarot_result qz_write_rotated(qz_cmd* q, const quarot_quantize_desc* qd) {
    quarot_rotate_desc desc;
    qx_rotate_file_opts ro;
    qx_rotate_sink rs, cs;
    qz_collect col;
    qz_progress pr;
    quarot_result r;
    memset(&rs, 0, sizeof rs);
    rs.begin = qz_begin;
    rs.put = qz_put;
    rs.put_rows = q->o.quant_embeddings ? NULL : qz_put_rows;   /* the tables stream only when written plain */
    rs.put_expert = qz_put_expert;                               /* 3-D experts one at a time */
    rs.finish = qz_finish;
    rs.abort = qz_abort;
    rs.user = &q->sink;
    memset(&pr, 0, sizeof pr);
    pr.cli = &q->cli;
    qz_rotate_desc(q, &desc);
    memset(&ro, 0, sizeof ro);
    ro.out_path = q->opt.out;
    ro.force = q->opt.c.force;
    ro.dtype = QUAROT_DTYPE_F32;
    ro.drop_pages = 1;
    ro.progress = qz_on_progress;
    ro.user = &pr;
    ro.sink = &rs;
    ro.whole_experts = q->o.whole_experts;
    if (!q->o.gptq) {
        r = qx_rotate_file(&q->s, &desc, &ro, &q->st, &q->e);
        if (pr.stage) qx_cli_progress_end(&q->cli, "rotation + quantization");
        return r;
    }
    memset(&col, 0, sizeof col);   /* the rotated model into qs, then the stage */
    col.dst = &q->qs;
    memset(&cs, 0, sizeof cs);
    cs.begin = qz_collect_begin;
    cs.put = qz_collect_put;
    cs.finish = qz_collect_finish;
    cs.abort = qz_collect_abort;
    cs.user = &col;
    ro.sink = &cs;
    q->have_q = 1;
    r = qx_rotate_file(&q->s, &desc, &ro, &q->st, &q->e);
    if (pr.stage) qx_cli_progress_end(&q->cli, "rotation");
    if (r != QUAROT_OK) return r;
    qx_cli_phase(&q->cli);
    return qz_stage_write(&q->sink, &q->qs, qd, &q->list, &q->cw, &q->wst, &q->e);
}

/* --rotation none with GPTQ: the model as it is, in f32, through the stage. */
static quarot_result qz_write_staged_copy(qz_cmd* q, const quarot_quantize_desc* qd) {
    quarot_result r = qx_store_clone(&q->s, &q->qs);
    if (r == QUAROT_OK) {
        q->have_q = 1;
        r = qx_store_convert(&q->qs, QUAROT_DTYPE_F32);
    }
    if (r != QUAROT_OK) {
        qx_err_set(&q->e, "copying the model: %s", quarot_result_string(r));
        return r;
    }
    return qz_stage_write(&q->sink, &q->qs, qd, NULL, &q->cw, &q->wst, &q->e);
}

/* --rotation none: every tensor of the model as it is straight to the output. */
static quarot_result qz_write_unrotated(qz_cmd* q) {
    const qx_store* s = &q->s;
    qx_tensor_plan* pl = qx_store_plan(s, QUAROT_DTYPE_F32, 1);
    int64_t n = s->count, j;
    quarot_result r;
    if (!pl) { qx_err_set(&q->e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = qz_begin(&q->sink, s, pl, n, &q->e);
    free(pl);
    for (j = 0; j < n && r == QUAROT_OK; ++j) {
        r = qz_put(&q->sink, s->items[j].name, &s->items[j].t, &q->e);
        qx_cli_progress(&q->cli, j + 1, n, "quantizing tensor");
    }
    if (r == QUAROT_OK) r = qz_finish(&q->sink, &q->e);
    else qz_abort(&q->sink);
    qx_cli_progress_end(&q->cli, "quantization");
    return r;
}

/* The work: rotation (unless --rotation none), quantization and the output file. */
static int qz_rotate_and_quantize(qz_cmd* q) {
    quarot_quantize_desc qd;
    quarot_result r;
    int rc;
    qz_items_free(&q->sink);   /* the sink decides again from the plan it is given */
    qz_stage_desc(q, &qd);
    qx_cli_phase(&q->cli);
    if (q->o.rotate) r = qz_write_rotated(q, &qd);
    else if (q->o.gptq) r = qz_write_staged_copy(q, &qd);
    else r = qz_write_unrotated(q);
    if (r == QUAROT_OK) return QX_EXIT_OK;
    rc = r == QUAROT_ERR_OVERFLOW ? QX_EXIT_PROCESS   /* a value the output dtype cannot hold, as in rotate */
         : q->st.output_error || r == QUAROT_ERR_IO ? QX_EXIT_OUTPUT : qx_cli_exit_for(r);
    if (rc == QX_EXIT_OK) rc = QX_EXIT_INTERNAL;
    return qx_cli_fail(&q->cli, rc, "%s", q->e.msg);
}

/* --text-only, never silent (stderr, even with --quiet): what was left out, and what image prompts need. */
static void qz_vision_note(qz_cmd* q) {
    if (!q->o.text_only) return;
    if (q->cli.progress_open) { fputc('\n', stderr); q->cli.progress_open = 0; }
    fprintf(stderr, "quarot quantize: --text-only: %s: the text decoder only; the vision tower (%lld tensors, %llu bytes) is not "
                    "written. %s\n", q->opt.out, (long long)q->n_vision, (unsigned long long)q->vision_bytes,
            q->o.rotate ? "Its merger output projection (" QX_VL_MERGER_WEIGHT ", " QX_VL_MERGER_BIAS ") was rotated by R1 with the "
                          "text stream: image embeddings enter this model right only through the vision tower with that rotated "
                          "merger (`quarot rotate IN DIR` with the same rotation options writes it; the original one's merger "
                          "is unrotated), so with the original vision tower only text prompts are right"
                        : "No rotation (--rotation none): the original vision tower fits it");
}

/* The summary (stdout): what was read and written, the rotation, the format, the weight quantizer
   and the per-tensor table. */
static void qz_print_report(const qz_cmd* q) {
    const quantize_opts* opt = &q->opt;
    const qz_opts* o = &q->o;
    const qx_store* s = &q->s;
    char gline[400];
    printf("quantized %s (%s, %s, %lld layers, hidden %lld) -> %s\n", opt->in, s->source_format, s->config.arch, (long long)s->config.n_layers,
           (long long)s->config.hidden, opt->out);
    if (o->rotate) {
        printf("  R1: %s\n  R2: %s\n  norms fused\n", q->st.r1, opt->rot.no_r2 ? "off (--no-r2)" : q->st.r2);
        printf("  online hooks: %lld%s\n", (long long)q->list.count, q->list.count ? " (recorded in the file's metadata: quarot.online)" : " (none needed)");
    } else {
        printf("  no rotation (--rotation none)\n");
    }
    if (qx_rotate_file_globals_line(&q->st, gline, sizeof gline)) printf("  %s\n", gline);
    if (q->st.expert_slices)
        printf("  3-D experts: read, rotated, quantized and written one expert at a time (%lld experts; largest writable copies "
               "held at once %.1f MiB)\n", (long long)q->st.expert_slices, (double)q->st.peak_copy_bytes / 1048576.0);
    else if (o->whole_experts)
        printf("  3-D experts: rotated and quantized a whole tensor at a time (--whole-experts; largest writable copies held "
               "at once %.1f MiB)\n", (double)q->st.peak_copy_bytes / 1048576.0);
    if (o->text_only)
        printf("  vision tower: not written (--text-only): %lld tensors, %llu bytes; %s\n", (long long)q->n_vision,
               (unsigned long long)q->vision_bytes,
               o->rotate ? "its merger output projection was rotated by R1 with the text stream, so image prompts need the vision "
                           "tower of the rotated checkpoint (quarot rotate IN DIR, same rotation options), not the original's"
                         : "no rotation, so the original vision tower fits");
    if (o->format == QZ_GGUF) {
        printf("  format: GGUF, %s blocks of 32 (f16 scale), general.file_type %d\n", o->bits == 4 ? "Q4_0" : "Q8_0",
               o->bits == 4 ? QX_LLAMA_FTYPE_Q4_0 : QX_LLAMA_FTYPE_Q8_0);
        if (q->have_tok) printf("  tokenizer: %s (%d tokens) as tokenizer.ggml.* (sentencepiece \"llama\")\n", opt->tokenizer, q->tok.vocab_size);
        else if (q->sink.tok_note[0]) printf("  %s: %s\n", q->sink.tok_warn ? "WARNING tokenizer" : "tokenizer", q->sink.tok_note);
        else if (!qx_store_get_blob(s, "gguf.kv", NULL)) printf("  tokenizer: none found beside the input (--tokenizer FILE): llama.cpp needs one\n");
    }
    else
        printf("  format: quarot-packed v%d, %d-bit %s weights, %s, %s scales; activations %d-bit, K %d-bit, V %d-bit\n", QX_PACKED_VERSION,
               o->bits, o->asym ? "asymmetric" : "symmetric", o->group ? "per group" : "per output channel",
               o->scale_dtype == QUAROT_DTYPE_F16 ? "f16" : "f32", o->act.a_bits, o->act.k_bits, o->act.v_bits);
    if (o->gptq)
        printf("  weights: GPTQ%s per %s on %s: %lld windows of %lld tokens (stream windowing, %lld tokens), percdamp %g%s, "
               "layer by layer%s, each calibrated on the quantized layers before it (%.1f s)\n",
               o->clip_search ? " with clip search (|err|^2.4)" : "", o->format == QZ_GGUF || o->group ? "group" : "output channel", opt->g.calib_text,
               (long long)q->wst.windows, (long long)opt->seq_len, (long long)q->wst.tokens, opt->percdamp > 0 ? opt->percdamp : 0.01,
               opt->g.act_order ? ", act-order (static groups)" : "", q->list.count ? " with the online hooks" : "", q->wst.seconds);
    else
        printf("  weights: RTN%s (round to nearest per %s)\n", o->clip_search ? " with clip search (|err|^2.4)" : "",
               o->format == QZ_GGUF || o->group ? "group" : "output channel");
    if (o->gptq && s->config.n_experts > 0)
        printf("  mixture of experts: each expert by GPTQ on the calibration rows routed to it (the shared expert on all)%s%s\n",
               q->wst.moe_note[0] ? "; " : "", q->wst.moe_note);
    qz_summary(o, &q->sink);
    fflush(stdout);
}

/* quarot quantize IN OUT: check the options; load the context, the model and the tokenizer to
   embed; decide what each tensor becomes; GPTQ's calibration windows; then either print the plan
   (--dry-run) or rotate, quantize, write and print the summary. */
int qx_cmd_quantize(int argc, char** argv) {
    qz_cmd q;
    int rc;
    signal(SIGXFSZ, SIG_IGN);
    qz_cmd_init(&q);
    if ((rc = qz_parse_options(&q, argc, argv)) != QX_OPTS_RUN) return rc;
    if ((rc = qz_check_options(&q)) != QX_EXIT_OK) return rc;
    rc = qz_load_context(&q);
    if (rc == QX_EXIT_OK) rc = qz_load_input(&q);
    if (rc == QX_EXIT_OK) rc = qz_pick_tokenizer(&q);
    if (rc == QX_EXIT_OK) rc = qz_plan_tensors(&q);
    if (rc == QX_EXIT_OK && !q.opt.dry && q.o.gptq) rc = qz_calibration_windows(&q);
    if (rc == QX_EXIT_OK && q.opt.dry) qz_print_dry_run(&q);
    else if (rc == QX_EXIT_OK && (rc = qz_rotate_and_quantize(&q)) == QX_EXIT_OK) {
        qz_vision_note(&q);
        qz_print_report(&q);
    }
    qz_cmd_free(&q);
    return rc;
}
