/* qx_spin.c - see qx_spin.h. */
#include "eval/qx_spin.h"
#include "formats/qx_safetensors.h"
#include "formats/qx_json.h"
#include "model/qx_model.h"
#include "support/qx_str.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void qx_spin_rot_free(qx_spin_rot* r) {
    if (!r) return;
    free(r->r1);
    free(r->r2);
    memset(r, 0, sizeof *r);
}

static double qx__spin_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- learning ----------------------------------------------------------------------------- */

quarot_result qx_spin_train(const qx_store* model, const qx_windows* w, int64_t seq_len, const qx_spin_opts* o,
                            qx_spin_rot* out, qx_spin_stats* st, qx_err* e) {
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    int32_t* toks;
    int64_t nsamples = o->nsamples > 0 ? o->nsamples : 128, n = 0, i, h, hd, L;
    double t0 = qx__spin_now();
    quarot_result r, rr;
    memset(out, 0, sizeof *out);
    memset(st, 0, sizeof *st);
    /* the training set: the first nsamples windows of exactly seq_len tokens */
    toks = (int32_t*)malloc((size_t)(nsamples * seq_len) * sizeof(int32_t));
    if (!toks) { qx_err_set(e, "out of memory for %lld windows of %lld tokens", (long long)nsamples, (long long)seq_len); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (i = 0; i < w->n && n < nsamples; ++i)
        if (w->offset[i + 1] - w->offset[i] == seq_len) {
            memcpy(toks + n * seq_len, w->tokens + w->offset[i], (size_t)seq_len * sizeof(int32_t));
            n++;
        }
    if (n < nsamples) {
        free(toks);
        qx_err_set(e, "calibration text too short: %lld windows of %lld tokens, --nsamples %lld needs %lld tokens", (long long)n,
                   (long long)seq_len, (long long)nsamples, (long long)(nsamples * (seq_len - 1)));
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    qx_model_bind(&m, &b, (qx_store*)model);   /* read only: the trainer never writes (release with modified = 0) */
    if (o->env) m.env = *o->env;
    r = quarot_trainer_init(&t, &m, &o->desc);
    if (r != QUAROT_OK) {
        free(toks);
        qx_err_set(e, "%s", t.error[0] ? t.error : quarot_result_string(r));
        return r;
    }
    r = quarot_trainer_run(&t, toks, n, seq_len);
    free(toks);
    if (r != QUAROT_OK) qx_err_set(e, "%s", t.error[0] ? t.error : quarot_result_string(r));
    /* the rotations (also after a NaN stop: the best ones so far) */
    h = t.config.hidden;
    hd = t.config.head_dim;
    L = t.config.n_layers;
    out->hidden = h;
    out->head_dim = hd;
    out->n_layers = L;
    out->r1 = (double*)malloc((size_t)(h * h) * sizeof(double));
    out->r2 = t.r2 ? (double*)malloc((size_t)(L * hd * hd) * sizeof(double)) : NULL;
    rr = out->r1 && (out->r2 || !t.r2) ? QUAROT_OK : QUAROT_ERR_OUT_OF_MEMORY;
    if (rr == QUAROT_OK) {
        memcpy(out->r1, t.r1, (size_t)(h * h) * sizeof(double));
        if (t.r2) memcpy(out->r2, t.r2, (size_t)(L * hd * hd) * sizeof(double));
    } else {
        qx_spin_rot_free(out);
        if (r == QUAROT_OK) { qx_err_set(e, "out of memory"); r = rr; }
    }
    st->windows = n;
    st->tokens = n * seq_len;
    st->steps_run = t.steps_run;
    for (i = 0; i < t.steps_run; ++i) {
        if (t.history[i].orth_error > st->max_orth) st->max_orth = t.history[i].orth_error;
        st->reorthogonalized += t.history[i].reorthogonalized;
    }
    if (t.steps_run > 0) {
        st->first_loss = t.history[0].loss;
        st->last_loss = t.history[t.steps_run - 1].loss;
    }
    snprintf(out->about, sizeof out->about, "spinquant, seed %llu, %d steps, batch loss %.4f -> %.4f", (unsigned long long)t.desc.seed,
             t.steps_run, st->first_loss, st->last_loss);
    quarot_trainer_free(&t);
    st->seconds = qx__spin_now() - t0;
    return r;
}

/* ---- the file ----------------------------------------------------------------------------- */

static void qx__spin_r2_name(char* buf, size_t cap, int64_t layer) {
    snprintf(buf, cap, "model.layers.%lld.self_attn.R2", (long long)layer);
}

quarot_result qx_spin_save(const qx_spin_rot* r, const char* path, const char* const* extra, int force, qx_err* e) {
    qx_tensor_plan* plan;
    char (*names)[64];
    qx_st_writer* w = NULL;
    qx_st_write_opts wo;
    qx_sb meta;
    quarot_result res;
    int64_t n = 1 + (r->r2 ? r->n_layers : 0), i;
    char num[32];
    if (!r->r1 || r->hidden < 1) { qx_err_set(e, "%s: no rotations to write", path); return QUAROT_ERR_INVALID_ARGUMENT; }
    plan = (qx_tensor_plan*)calloc((size_t)n, sizeof *plan);
    names = (char (*)[64])calloc((size_t)n, sizeof *names);
    memset(&meta, 0, sizeof meta);
    if (!plan || !names) { free(plan); free(names); qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    strcpy(names[0], "R1");
    for (i = 1; i < n; ++i) qx__spin_r2_name(names[i], sizeof names[i], i - 1);
    for (i = 0; i < n; ++i) {
        plan[i].name = names[i];
        plan[i].dtype = QUAROT_DTYPE_F64;
        plan[i].n_dims = 2;
        plan[i].ne[0] = plan[i].ne[1] = i == 0 ? r->hidden : r->head_dim;
        plan[i].ne[2] = plan[i].ne[3] = 1;
    }
    /* __metadata__ */
    qx_sb_puts(&meta, "{\"format\":\"quarot-rotations\",\"quarot.method\":\"spinquant\"");
    if (r->digest[0]) { qx_sb_puts(&meta, ",\"quarot.model_digest\":"); qx_sb_json_string(&meta, r->digest, strlen(r->digest)); }
    snprintf(num, sizeof num, "%lld", (long long)r->hidden);
    qx_sb_puts(&meta, ",\"quarot.hidden\":\""); qx_sb_puts(&meta, num);
    snprintf(num, sizeof num, "%lld", (long long)r->head_dim);
    qx_sb_puts(&meta, "\",\"quarot.head_dim\":\""); qx_sb_puts(&meta, num);
    snprintf(num, sizeof num, "%lld", (long long)r->n_layers);
    qx_sb_puts(&meta, "\",\"quarot.n_layers\":\""); qx_sb_puts(&meta, num);
    qx_sb_puts(&meta, "\",\"quarot.about\":");
    qx_sb_json_string(&meta, r->about, strlen(r->about));
    for (i = 0; extra && extra[i] && extra[i + 1]; i += 2) {
        qx_sb_puts(&meta, ",");
        qx_sb_json_string(&meta, extra[i], strlen(extra[i]));
        qx_sb_puts(&meta, ":");
        qx_sb_json_string(&meta, extra[i + 1], strlen(extra[i + 1]));
    }
    qx_sb_puts(&meta, "}");
    memset(&wo, 0, sizeof wo);
    wo.force = force;
    wo.metadata_json = meta.p;
    res = meta.failed ? QUAROT_ERR_OUT_OF_MEMORY : qx_st_writer_begin(&w, path, plan, n, &wo, e);
    for (i = 0; i < n && res == QUAROT_OK; ++i) {
        quarot_tensor t;
        int64_t ne[2];
        ne[0] = ne[1] = plan[i].ne[0];
        res = quarot_tensor_init(&t, i == 0 ? r->r1 : r->r2 + (i - 1) * r->head_dim * r->head_dim, QUAROT_DTYPE_F64, 2, ne);
        if (res == QUAROT_OK) res = qx_st_writer_put(w, names[i], &t, e);
    }
    if (res == QUAROT_OK) res = qx_st_writer_finish(w, e);
    else qx_st_writer_abort(w);
    if (res == QUAROT_ERR_OUT_OF_MEMORY && meta.failed) qx_err_set(e, "out of memory");
    qx_sb_free(&meta);
    free(plan);
    free(names);
    return res;
}

/* The square matrix `name` of s into out [n][n] in double; *n_out its size (0: absent). */
static quarot_result qx__spin_get(const qx_store* s, const char* path, const char* name, int64_t expect, double* out, qx_err* e) {
    const quarot_tensor* t = qx_store_find(s, name);
    int64_t i;
    if (!t) { qx_err_set(e, "%s: no tensor '%s'", path, name); return QUAROT_ERR_NOT_FOUND; }
    if (t->ne[0] != expect || quarot_tensor_nrows(t) != expect || t->ne[1] != expect) {
        qx_err_set(e, "%s: '%s' is [%lld][%lld], expected [%lld][%lld]", path, name, (long long)quarot_tensor_nrows(t), (long long)t->ne[0],
                   (long long)expect, (long long)expect);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    for (i = 0; i < expect; ++i) quarot_tensor_get_row_f64(t, i, out + i * expect);
    for (i = 0; i < expect * expect; ++i)
        if (!(fabs(out[i]) <= 1e300)) { qx_err_set(e, "%s: '%s' holds NaN or Inf", path, name); return QUAROT_ERR_NONFINITE; }
    return QUAROT_OK;
}

quarot_result qx_spin_load(const char* path, qx_spin_rot* r, qx_err* e) {
    qx_store s;
    qx_st_read_opts ro;
    const quarot_tensor* t;
    quarot_result res;
    int64_t L = 0, i, hd = 0;
    char name[64];
    memset(r, 0, sizeof *r);
    if (!qx_path_exists(path)) { qx_err_set(e, "%s: no such rotation file (write one with quarot calibrate --method spinquant)", path); return QUAROT_ERR_NOT_FOUND; }
    memset(&ro, 0, sizeof ro);
    ro.copy = 1;
    ro.no_config = 1;
    qx_store_init(&s);
    res = qx_st_load(path, &s, &ro, e);
    if (res != QUAROT_OK) return res == QUAROT_ERR_NOT_FOUND ? QUAROT_ERR_PARSE : res;
    t = qx_store_find(&s, "R1");
    if (!t) { qx_store_free(&s); qx_err_set(e, "%s: no tensor 'R1' (a rotation file holds R1 and model.layers.{i}.self_attn.R2)", path); return QUAROT_ERR_NOT_FOUND; }
    r->hidden = t->ne[0];
    for (;;) {   /* R2 of layers 0, 1, ... as long as they come */
        const quarot_tensor* t2;
        qx__spin_r2_name(name, sizeof name, L);
        t2 = qx_store_find(&s, name);
        if (!t2) break;
        if (L == 0) hd = t2->ne[0];
        L++;
    }
    r->n_layers = L;
    r->head_dim = hd;
    r->r1 = (double*)malloc((size_t)(r->hidden * r->hidden) * sizeof(double));
    r->r2 = L ? (double*)malloc((size_t)(L * hd * hd) * sizeof(double)) : NULL;
    if (!r->r1 || (L && !r->r2)) { qx_store_free(&s); qx_spin_rot_free(r); qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    res = qx__spin_get(&s, path, "R1", r->hidden, r->r1, e);
    for (i = 0; i < L && res == QUAROT_OK; ++i) {
        qx__spin_r2_name(name, sizeof name, i);
        res = qx__spin_get(&s, path, name, hd, r->r2 + i * hd * hd, e);
    }
    if (res == QUAROT_OK) {   /* other tensors would be silently ignored: refuse them */
        for (i = 0; i < s.count; ++i) {
            const char* nm = s.items[i].name;
            if (strcmp(nm, "R1") != 0 && !(strncmp(nm, "model.layers.", 13) == 0 && qx_str_ends_with(nm, ".self_attn.R2"))) {
                qx_err_set(e, "%s: unexpected tensor '%s' (a rotation file holds R1 and model.layers.{i}.self_attn.R2)", path, nm);
                res = QUAROT_ERR_PARSE;
                break;
            }
        }
        if (res == QUAROT_OK && s.count != 1 + L) {
            qx_err_set(e, "%s: R2 of layers 0..%lld, then a gap (every layer's R2, or none)", path, (long long)L - 1);
            res = QUAROT_ERR_PARSE;
        }
    }
    if (res == QUAROT_OK) {   /* the metadata: digest and what it is */
        size_t n = 0;
        const char* meta = (const char*)qx_store_get_blob(&s, "safetensors.metadata", &n);
        qx_json_doc doc;
        if (meta && qx_json_parse(meta, n, path, NULL, &doc, NULL) == QUAROT_OK) {
            const char* v = qx_json_as_string(qx_json_get(doc.root, "quarot.model_digest"), NULL);
            const char* a = qx_json_as_string(qx_json_get(doc.root, "quarot.about"), NULL);
            if (v && strlen(v) < sizeof r->digest) strcpy(r->digest, v);
            snprintf(r->about, sizeof r->about, "%s", a ? a : "imported");
            qx_json_doc_free(&doc);
        } else {
            snprintf(r->about, sizeof r->about, "imported");
        }
    }
    qx_store_free(&s);
    if (res != QUAROT_OK) qx_spin_rot_free(r);
    return res;
}

/* max|M^T M - I| of m [n][n] (one DGEMM) */
static double qx__spin_orth(const double* m, int64_t n) {
    double* g = (double*)malloc((size_t)(n * n) * sizeof(double));
    double worst = 0.0;
    int64_t i, j;
    if (!g) return -1.0;
    if (quarot_dgemm(1, 0, n, n, n, 1.0, m, n, m, n, 0.0, g, n, NULL) != QUAROT_OK) { free(g); return -1.0; }
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double d = fabs(g[i * n + j] - (i == j ? 1.0 : 0.0));
            if (!(d <= worst)) worst = d;
        }
    free(g);
    return worst;
}

static quarot_result qx__spin_fix(double* m, int64_t n, const char* what, double* worst, qx_err* e) {
    double err = qx__spin_orth(m, n);
    quarot_polar_desc pd;
    quarot_result r;
    if (err < 0.0) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    if (err > *worst) *worst = err;
    if (!(err <= QX_SPIN_ORTH_TOL)) {
        qx_err_set(e, "%s is not orthogonal: max|R^T R - I| = %.3g > %g", what, err, QX_SPIN_ORTH_TOL);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (err <= 1e-12) return QUAROT_OK;
    memset(&pd, 0, sizeof pd);
    pd.tol = 1e-13;
    r = quarot_polar_newton_schulz_f64(n, m, n, m, n, &pd, NULL, NULL);
    if (r != QUAROT_OK) qx_err_set(e, "%s: re-orthogonalization failed: %s", what, quarot_result_string(r));
    return r;
}

quarot_result qx_spin_check(qx_spin_rot* r, const quarot_model_config* c, const char* model_digest, double* worst, qx_err* e) {
    int64_t hd = c->head_dim ? c->head_dim : c->hidden / (c->n_heads ? c->n_heads : 1), l;
    double w = 0.0;
    quarot_result res;
    char what[64];
    if (worst) *worst = 0.0;
    if (model_digest && model_digest[0] && r->digest[0] && strcmp(model_digest, r->digest) != 0) {
        qx_err_set(e, "the rotations were learned on another model (digest %s, this model %s)", r->digest, model_digest);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (r->hidden != c->hidden) {
        qx_err_set(e, "R1 is [%lld][%lld], the model's hidden size is %lld", (long long)r->hidden, (long long)r->hidden, (long long)c->hidden);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    if (r->r2 && (r->head_dim != hd || r->n_layers != c->n_layers)) {
        qx_err_set(e, "R2 is %lld layers of [%lld][%lld], the model has %lld layers of head_dim %lld", (long long)r->n_layers,
                   (long long)r->head_dim, (long long)r->head_dim, (long long)c->n_layers, (long long)hd);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    if ((res = qx__spin_fix(r->r1, r->hidden, "R1", &w, e)) != QUAROT_OK) return res;
    for (l = 0; r->r2 && l < r->n_layers; ++l) {
        snprintf(what, sizeof what, "R2 of layer %lld", (long long)l);
        if ((res = qx__spin_fix(r->r2 + l * hd * hd, hd, what, &w, e)) != QUAROT_OK) return res;
    }
    if (worst) *worst = w;
    return QUAROT_OK;
}

quarot_result qx_spin_model_digest(const char* model_path, char out[QX_DIGEST_LEN], qx_err* e) {
    char** paths = NULL;
    int n = 0;
    quarot_result r = qx_weight_files(model_path, &paths, &n, e);
    if (r != QUAROT_OK) return r;
    r = qx_digest_files((const char* const*)paths, n, out, e);
    qx_free_paths(paths, n);
    return r;
}

void qx_spin_desc(const qx_spin_rot* r, quarot_rotate_desc* d) {
    d->rotation = QUAROT_ROTATION_MATRIX;
    d->matrix = r->r1;
    d->block_size = 0;
    if (r->r2) {
        d->r2_rotation = QUAROT_ROTATION_MATRIX;
        d->r2_matrices = r->r2;
    } else {
        d->no_r2 = 1;
    }
}

quarot_result qx_spin_rotate(const qx_store* src, const qx_spin_rot* r, int r3, int online, qx_store* dst,
                             quarot_online_list* hooks, char* recipe, size_t recipe_cap, qx_ek_layer_fn progress, void* user,
                             qx_err* e) {
    quarot_rotate_desc d;
    char note[300];
    memset(&d, 0, sizeof d);
    qx_spin_desc(r, &d);
    d.online = online;
    d.r3 = r3;
    snprintf(note, sizeof note, ", learned (%s)%s", r->about, r->r2 ? "" : "; no R2 in the file");
    return qx_ek_rotate_with(src, &d, "SpinQuant", note, dst, hooks, recipe, recipe_cap, progress, user, e);
}
