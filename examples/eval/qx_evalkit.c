/* qx_evalkit.c - see qx_evalkit.h. */
#include "eval/qx_evalkit.h"
#include "model/qx_model.h"
#include "support/qx_file.h"
#include "pipeline/qx_layerwise.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

quarot_result qx_ek_read_file(const char* path, char** data, size_t* len, qx_err* e) {
    /* a file or a stream (a pipe, /dev/stdin), never blocking in open() (a FIFO without a writer is
       refused at once); up to QX_EK_MAX_TEXT - 1 bytes */
    quarot_result r = qx_read_stream(path, QX_EK_MAX_TEXT - 1, data, len, e);
    if (r == QUAROT_ERR_OVERFLOW)
        qx_err_set(e, "%s: longer than the limit of %llu MiB for a text", path, (unsigned long long)(QX_EK_MAX_TEXT >> 20));
    return r;
}

/* ---- QuaRot on a copy --------------------------------------------------------------------- */

/* Append printf-style text to buf (cap bytes, NUL-terminated, truncating). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static void qx__cat(char* buf, size_t cap, const char* fmt, ...) {
    size_t n;
    va_list ap;
    if (!buf || !cap) return;
    n = strlen(buf);
    if (n + 1 >= cap) return;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* The hooks' sites, counted for the recipe lines. */
static void qx__recipe_hooks(const quarot_online_list* hooks, const char* r4, const char* heads, const char* r3t, int r3,
                             char* recipe, size_t recipe_cap) {
    int64_t i, n_down = 0, n_heads = 0, n_q = 0, n_k = 0, n_e = 0, n_sh = 0, e_size = 0, sh_size = 0, n_experts = 0;
    for (i = 0; i < hooks->count; ++i) {
        switch (hooks->hooks[i].site) {
            case QUAROT_SITE_DOWN_INPUT: n_down++; break;
            case QUAROT_SITE_O_INPUT: n_heads++; break;
            case QUAROT_SITE_Q_ROPE: n_q++; break;
            case QUAROT_SITE_K_ROPE: n_k++; break;
            case QUAROT_SITE_EXPERT_DOWN_INPUT: n_e++; e_size = hooks->hooks[i].size; n_experts = hooks->hooks[i].experts; break;
            case QUAROT_SITE_SHARED_DOWN_INPUT: n_sh++; sh_size = hooks->hooks[i].size; break;
            default: break;
        }
    }
    if (n_e) qx__cat(recipe, recipe_cap, "R4  online rotation of %lld before each of the %lld routed experts' down_proj, %lld MoE layers "
                     "(offline half in the experts' down_proj)\n", (long long)e_size, (long long)n_experts, (long long)n_e);
    if (n_sh) qx__cat(recipe, recipe_cap, "R4  online rotation of %lld before the shared expert's down_proj, %lld MoE layers\n",
                      (long long)sh_size, (long long)n_sh);
    (void)r3;
    if (n_down) qx__cat(recipe, recipe_cap, "R4  online %s before down_proj, %lld layers (offline half in down_proj)\n", r4, (long long)n_down);
    if (n_heads) qx__cat(recipe, recipe_cap, "Rh  online %s across heads before o_proj, %lld layers (offline half in o_proj)\n", heads, (long long)n_heads);
    if (n_q || n_k) qx__cat(recipe, recipe_cap, "R3  online %s on q and k after RoPE, %lld layers (for the KV cache)\n", r3t, (long long)n_q);
}

/* The rotation both roads run: QuaRot's (r1 when not the default), or with a context stage 2 of
   Adapt Rotation (R1 = H*R_best, H and R2 from the context's seed); returns the seed it uses. */
static uint64_t qx__rotate_desc(quarot_rotate_desc* d, uint64_t seed, const quarot_adapt_context* context, int r3, int online,
                                quarot_rotation_kind r1, quarot_online_list* hooks) {
    memset(d, 0, sizeof *d);
    d->seed = seed;
    if (context) {
        d->rotation = QUAROT_ROTATION_ADAPT;
        d->context = context;
        d->seed = seed = context->seed;
    }
    if (!context && r1 != QUAROT_ROTATION_DEFAULT) d->rotation = r1;
    d->online = online;
    d->r3 = r3;
    d->online_out = hooks;
    return seed;
}

/* The recipe's R1 line: the rotation's text, then what it is and where it went. */
static void qx__recipe_note(char* note, size_t cap, uint64_t seed, const quarot_adapt_context* context) {
    note[0] = '\0';
    if (context)
        qx__cat(note, cap, ", seed %llu, R learned by stage 1 (%s, %d steps, loss %.4e -> %.4e)", (unsigned long long)seed,
                context->bits == 8 ? "int8" : "int4", context->steps_run, context->start_loss, context->best_loss);
    else
        qx__cat(note, cap, ", seed %llu", (unsigned long long)seed);
}

typedef struct qx__lw_user {
    qx_ek_layer_fn fn;
    void* user;
} qx__lw_user;

static void qx__lw_prog(void* user, int64_t done, int64_t total) {
    qx__lw_user* u = (qx__lw_user*)user;
    if (u->fn) u->fn(u->user, done, total);
}

static quarot_result qx__rotate_layerwise(const qx_store* src, quarot_rotate_desc* d, const char* who, const char* note, int r3,
                                          qx_store* dst, quarot_online_list* hooks, char* recipe, size_t recipe_cap,
                                          qx_ek_layer_fn progress, void* user, qx_err* e) {
    qx_rotate_file_stats st;
    qx__lw_user u;
    qx_err why;
    quarot_result r;
    u.fn = progress;
    u.user = user;
    why.msg[0] = '\0';
    r = qx_lw_rotate(src, d, dst, qx__lw_prog, &u, &st, &why);
    if (r != QUAROT_OK) {
        qx_err_set(e, "%s: %s (%s)", who, why.msg[0] ? why.msg : "rotation failed", quarot_result_string(r));
        quarot_online_list_free(hooks);
        return r;
    }
    {   /* the model's own hooks (qx_model_hooks_attach) stay with the copy: they run before the new ones */
        size_t hn = 0;
        const void* hb = qx_store_get_blob(src, QX_HOOKS_BLOB, &hn);
        if (hb && (r = qx_store_set_blob(dst, QX_HOOKS_BLOB, hb, hn)) != QUAROT_OK) {
            qx_err_set(e, "%s: out of memory", who);
            qx_store_free(dst);
            quarot_online_list_free(hooks);
            return r;
        }
    }
    qx__cat(recipe, recipe_cap, "R1  %s%s: folded into the embeddings and the residual-stream linears\n", st.r1, note);
    if (strcmp(st.r2, "none") != 0) qx__cat(recipe, recipe_cap, "R2  %s per head: folded into v_proj and o_proj\n", st.r2);
    qx__recipe_hooks(hooks, st.r4, st.heads, st.r3, r3, recipe, recipe_cap);
    return QUAROT_OK;
}

quarot_result qx_ek_quarot(const qx_store* src, uint64_t seed, int r3, qx_store* dst, quarot_online_list* hooks,
                           char* recipe, size_t recipe_cap, qx_ek_layer_fn progress, void* user, qx_err* e) {
    return qx_ek_rotate(src, seed, NULL, r3, dst, hooks, recipe, recipe_cap, progress, user, e);
}

quarot_result qx_ek_rotate(const qx_store* src, uint64_t seed, const quarot_adapt_context* context, int r3, qx_store* dst,
                           quarot_online_list* hooks, char* recipe, size_t recipe_cap, qx_ek_layer_fn progress, void* user,
                           qx_err* e) {
    return qx_ek_rotate_ex(src, seed, context, r3, 1, QUAROT_ROTATION_HADAMARD, dst, hooks, recipe, recipe_cap, progress, user, e);
}

quarot_result qx_ek_rotate_ex(const qx_store* src, uint64_t seed, const quarot_adapt_context* context, int r3, int online,
                              quarot_rotation_kind r1, qx_store* dst, quarot_online_list* hooks, char* recipe, size_t recipe_cap,
                              qx_ek_layer_fn progress, void* user, qx_err* e) {
    quarot_rotate_desc d;
    char note[256];
    seed = qx__rotate_desc(&d, seed, context, r3, online, r1, hooks);
    qx__recipe_note(note, sizeof note, seed, context);
    return qx_ek_rotate_with(src, &d, context ? "Adapt Rotation" : "QuaRot", note, dst, hooks, recipe, recipe_cap, progress, user, e);
}

quarot_result qx_ek_rotate_with(const qx_store* src, const quarot_rotate_desc* desc, const char* who, const char* r1_note,
                                qx_store* dst, quarot_online_list* hooks, char* recipe, size_t recipe_cap, qx_ek_layer_fn progress,
                                void* user, qx_err* e) {
    quarot_rotate_desc d = *desc;
    quarot_processor p;
    quarot_model m;
    qx_binding b;
    quarot_result r;
    int64_t i;
    int r3 = d.r3;
    char r4[160] = "", heads[160] = "", r3t[160] = "";
    if (recipe && recipe_cap) recipe[0] = '\0';
    if (!r1_note) r1_note = "";
    quarot_online_list_init(hooks, NULL);
    d.online_out = hooks;
    if (qx_lw_mapped(src)) return qx__rotate_layerwise(src, &d, who, r1_note, r3, dst, hooks, recipe, recipe_cap, progress, user, e);
    r = qx_store_clone(src, dst);
    if (r != QUAROT_OK) {
        qx_err_set(e, "copying the model: %s", quarot_result_string(r));
        return r;
    }
    qx_model_bind(&m, &b, dst);
    r = quarot_processor_init(&p, &m, &d);
    if (r != QUAROT_OK) {
        qx_err_set(e, "%s: %s (%s)", who, m.error[0] ? m.error : "cannot build the rotation", quarot_result_string(r));
        qx_store_free(dst);
        return r;
    }
    /* what was built, before the processor goes */
    qx__cat(recipe, recipe_cap, "R1  %s%s: folded into the embeddings and the residual-stream linears\n", p.rot[QUAROT_ROT_R1].text, r1_note);
    if (p.have_rot[QUAROT_ROT_R2])
        qx__cat(recipe, recipe_cap, "R2  %s per head: folded into v_proj and o_proj\n", p.rot[QUAROT_ROT_R2].text);
    if (p.have_rot[QUAROT_ROT_R4]) snprintf(r4, sizeof r4, "%s", p.rot[QUAROT_ROT_R4].text);
    if (p.have_rot[QUAROT_ROT_HEADS]) snprintf(heads, sizeof heads, "%s", p.rot[QUAROT_ROT_HEADS].text);
    if (r3) snprintf(r3t, sizeof r3t, "%s", p.r3.text);
    r = quarot_processor_pre_run(&p);
    for (i = 0; i < m.config.n_layers && r == QUAROT_OK; ++i) {
        r = quarot_processor_run_layer(&p, i);
        if (progress) progress(user, i + 1, m.config.n_layers);
    }
    if (r == QUAROT_OK) r = quarot_processor_post_run(&p);
    quarot_processor_free(&p);
    if (r != QUAROT_OK) {
        qx_err_set(e, "%s: %s (%s)", who, m.error[0] ? m.error : "rotation failed", quarot_result_string(r));
        qx_store_free(dst);
        quarot_online_list_free(hooks);
        return r;
    }
    qx_model_sync(&m, dst);
    qx__recipe_hooks(hooks, r4, heads, r3t, r3, recipe, recipe_cap);
    return QUAROT_OK;
}

/* ---- forward with hooks ------------------------------------------------------------------- */

quarot_result qx_ek_forward_init(qx_ek_forward* ef, const qx_store* s, const quarot_online_list* hooks,
                                 const qx_fake_quant_opts* q, qx_capture_fn capture, void* capture_user, qx_err* e) {
    return qx_ek_forward_init_env(ef, s, hooks, q, capture, capture_user, NULL, e);
}

quarot_result qx_ek_forward_init_env(qx_ek_forward* ef, const qx_store* s, const quarot_online_list* hooks,
                                     const qx_fake_quant_opts* q, qx_capture_fn capture, void* capture_user,
                                     const quarot_env* env, qx_err* e) {
    qx_forward_opts o;
    quarot_result r;
    memset(ef, 0, sizeof *ef);
    memset(&o, 0, sizeof o);
    if (q) o.quant = *q;
    qx_online_ctx_init(&ef->ctx, hooks);
    /* the model's own hooks (attached by qx_model_hooks_attach), run before `hooks` */
    r = qx_model_hooks_get(s, &ef->base, e);
    if (r != QUAROT_OK) { quarot_online_list_free(&ef->base); return r; }
    if (ef->base.count > 0) ef->ctx.base = &ef->base;
    if ((hooks && hooks->count > 0) || ef->base.count > 0) {
        o.online = qx_online_hooks;
        o.online_user = &ef->ctx;
        ef->has_hooks = 1;
    }
    o.capture = capture;
    o.capture_user = capture_user;
    o.env = env;
    if (qx_lw_mapped(s)) qx_lw_forward_opts(&o, s);   /* layer-wise: the store stays mapped, one layer in f32 */
    r = qx_forward_init(&ef->f, s, &o, e);
    if (r != QUAROT_OK) { qx_online_ctx_free(&ef->ctx); quarot_online_list_free(&ef->base); }
    return r;
}

quarot_result qx_ek_forward_status(const qx_ek_forward* ef) { return ef->ctx.status; }

void qx_ek_forward_free(qx_ek_forward* ef) {
    qx_forward_free(&ef->f);
    qx_online_ctx_free(&ef->ctx);
    quarot_online_list_free(&ef->base);
}

/* ---- settings ------------------------------------------------------------------------------ */

static int qx__quantized(int bits) { return bits > 0 && bits < 16; }

void qx_ek_setting_label(qx_ek_setting* s) {
    int w = qx__quantized(s->w_bits), a = qx__quantized(s->a_bits), kv = qx__quantized(s->kv_bits);
    s->label[0] = '\0';
    if (!w && !a && !kv) {
        snprintf(s->label, sizeof s->label, "FP32");
        return;
    }
    snprintf(s->label, sizeof s->label, "W%dA%d", w ? s->w_bits : 16, a ? s->a_bits : 16);
    if (kv) qx__cat(s->label, sizeof s->label, "KV%d", s->kv_bits);
}

void qx_ek_setting_quant(const qx_ek_setting* s, int64_t w_group, double a_clip, qx_fake_quant_opts* q) {
    memset(q, 0, sizeof *q);
    if (qx__quantized(s->w_bits)) {
        q->w_bits = s->w_bits;     /* RTN symmetric, per output channel or per group */
        q->w_group = w_group;
    }
    if (qx__quantized(s->a_bits)) {
        q->a_bits = s->a_bits;     /* per token symmetric */
        q->a_clip = a_clip > 0 ? (float)a_clip : 0.0f;
    }
    if (qx__quantized(s->kv_bits)) q->k_bits = q->v_bits = s->kv_bits;   /* per token per head asymmetric */
}

/* ---- table --------------------------------------------------------------------------------- */

void qx_ek_table_init(qx_ek_table* t, const char* corner) {
    int i, j;
    memset(t, 0, sizeof *t);
    t->corner = corner;
    for (i = 0; i < QX_EK_MAX_ROWS; ++i)
        for (j = 0; j < QX_EK_MAX_COLS; ++j) t->v[i][j] = NAN;
}

int qx_ek_table_add_col(qx_ek_table* t, const char* name) {
    if (t->n_cols >= QX_EK_MAX_COLS) return -1;
    snprintf(t->col[t->n_cols], sizeof t->col[0], "%s", name);
    return t->n_cols++;
}

int qx_ek_table_add_row(qx_ek_table* t, const char* name) {
    if (t->n_rows >= QX_EK_MAX_ROWS) return -1;
    snprintf(t->row[t->n_rows], sizeof t->row[0], "%s", name);
    return t->n_rows++;
}

/* Column j > 0 cells: "6.4408 (-20.1%)"; width is the widest cell or header. */
static void qx__cell(char* buf, size_t cap, const qx_ek_table* t, int i, int j) {
    double v = t->v[i][j], b = t->v[i][0];
    if (isnan(v)) snprintf(buf, cap, "-");
    else if (j > 0 && !isnan(b) && b > 0) {
        double pct = 100.0 * (v - b) / b;
        if (fabs(pct) < 0.05) pct = 0.0;   /* no "-0.0%" */
        snprintf(buf, cap, "%.4f (%+.1f%%)", v, pct);
    }
    else snprintf(buf, cap, "%.4f", v);
}

void qx_ek_table_print(FILE* f, const qx_ek_table* t) {
    int i, j, w0 = (int)strlen(t->corner ? t->corner : ""), w[QX_EK_MAX_COLS];
    char cell[64];
    for (i = 0; i < t->n_rows; ++i)
        if ((int)strlen(t->row[i]) > w0) w0 = (int)strlen(t->row[i]);
    for (j = 0; j < t->n_cols; ++j) {
        w[j] = (int)strlen(t->col[j]);
        for (i = 0; i < t->n_rows; ++i) {
            qx__cell(cell, sizeof cell, t, i, j);
            if ((int)strlen(cell) > w[j]) w[j] = (int)strlen(cell);
        }
    }
    fprintf(f, "%-*s", w0, t->corner ? t->corner : "");
    for (j = 0; j < t->n_cols; ++j) fprintf(f, "   %*s", w[j], t->col[j]);
    fputc('\n', f);
    for (i = 0; i < t->n_rows; ++i) {
        fprintf(f, "%-*s", w0, t->row[i]);
        for (j = 0; j < t->n_cols; ++j) {
            qx__cell(cell, sizeof cell, t, i, j);
            fprintf(f, "   %*s", w[j], cell);
        }
        fputc('\n', f);
    }
}
