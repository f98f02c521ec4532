/* qx_wquant.c - see qx_wquant.h. */
#include "eval/qx_wquant.h"
#include "support/qx_file.h"

#include <stdlib.h>
#include <string.h>

/* ---- a quarot_model over a qx_forward's f32 weight copies ---- */

typedef struct qx__fwbind {
    qx_forward* f;
} qx__fwbind;

/* "model.layers.{i}.<suffix>" or "model.decoder.layers.{i}.<suffix>" -> the forward's array. */
static quarot_result qx__fw_get(void* user, const char* name, quarot_tensor* out) {
    qx_forward* f = ((qx__fwbind*)user)->f;
    const char* p = name;
    const char* pre = f->is_opt ? "model.decoder.layers." : "model.layers.";
    qx_forward_layer* L;
    int64_t l = 0, ne[2];
    float* w = NULL;
    const char* sfx;
    if (strncmp(p, pre, strlen(pre)) != 0) return QUAROT_ERR_NOT_FOUND;
    p += strlen(pre);
    if (*p < '0' || *p > '9') return QUAROT_ERR_NOT_FOUND;
    while (*p >= '0' && *p <= '9') l = l * 10 + (*p++ - '0');
    if (*p++ != '.' || l >= f->cfg.n_layers) return QUAROT_ERR_NOT_FOUND;
    L = &f->layers[l];
    sfx = p;
    ne[0] = f->cfg.hidden;
    if (strcmp(sfx, "input_layernorm.weight") == 0) return quarot_tensor_init(out, L->norm1_w, QUAROT_DTYPE_F32, 1, ne);
    if (strcmp(sfx, "post_attention_layernorm.weight") == 0) return quarot_tensor_init(out, L->norm2_w, QUAROT_DTYPE_F32, 1, ne);
    if (strcmp(sfx, "self_attn.q_proj.weight") == 0) { w = L->wq; ne[1] = f->q_dim; }
    else if (strcmp(sfx, "self_attn.k_proj.weight") == 0) { w = L->wk; ne[1] = f->kv_dim; }
    else if (strcmp(sfx, "self_attn.v_proj.weight") == 0) { w = L->wv; ne[1] = f->kv_dim; }
    else if (strcmp(sfx, "self_attn.o_proj.weight") == 0 || strcmp(sfx, "self_attn.out_proj.weight") == 0) {
        w = L->wo; ne[0] = f->q_dim; ne[1] = f->cfg.hidden;
    }
    else if (strcmp(sfx, "mlp.gate_proj.weight") == 0) { w = L->w_gate; ne[1] = f->cfg.intermediate; }
    else if (strcmp(sfx, "mlp.up_proj.weight") == 0 || strcmp(sfx, "fc1.weight") == 0) { w = L->w_up; ne[1] = f->cfg.intermediate; }
    else if (strcmp(sfx, "mlp.down_proj.weight") == 0 || strcmp(sfx, "fc2.weight") == 0) {
        w = L->w_down; ne[0] = f->cfg.intermediate; ne[1] = f->cfg.hidden;
    }
    if (!w) return QUAROT_ERR_NOT_FOUND;
    return quarot_tensor_init(out, w, QUAROT_DTYPE_F32, 2, ne);
}

/* ---- capture: every decoder linear's input goes to the stage (it keeps what it wants) ---- */

typedef struct qx__wqcap {
    quarot_quantizer* qz;
    quarot_result status;
} qx__wqcap;

static void qx__wq_capture(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    qx__wqcap* c = (qx__wqcap*)user;
    quarot_result r;
    (void)layer;
    if (c->status != QUAROT_OK || !quarot_quantizer_wants(c->qz, name)) return;
    r = quarot_quantizer_add(c->qz, name, x, rows, n);
    if (r != QUAROT_OK) c->status = r;
}

quarot_result qx_wq_quantize(qx_store* s, const qx_wq_opts* o, qx_wq_stats* st, qx_err* e) {
    qx_ek_forward ef;
    qx__fwbind bind;
    qx__wqcap cap;
    quarot_model m;
    quarot_quantizer qz;
    quarot_result r;
    qx_wq_stats dummy;
    int64_t nwin = 0, tokens = 0, l, w, i, k, L, hidden;
    float *x = NULL, *tmp = NULL;
    int gptq, have_f = 0, have_qz = 0;
    double t0 = qx_now();
    if (!st) st = &dummy;
    memset(st, 0, sizeof *st);
    if (!s || !o) {
        qx_err_set(e, "qx_wq_quantize: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    gptq = o->desc.method == QUAROT_WQUANT_GPTQ || o->desc.migrate;   /* calibration rows needed */
    if (s->config.n_experts > 0) {   /* the stage's view of the weights (qx__fw_get) has no experts */
        qx_err_set(e, "%s has mixture-of-experts layers (%lld experts): the weight-quantization stage (GPTQ, weight "
                   "migration, the clip search, the group fallback) does not run them yet; plain RTN does",
                   s->config.arch, (long long)s->config.n_experts);
        return QUAROT_ERR_UNSUPPORTED;
    }
    memset(&cap, 0, sizeof cap);
    cap.qz = &qz;
    r = qx_ek_forward_init(&ef, s, o->hooks, NULL, gptq ? qx__wq_capture : NULL, &cap, e);
    if (r != QUAROT_OK) return r;
    have_f = 1;
    ef.f.opts.env = o->env;
    L = ef.f.cfg.n_layers;
    hidden = ef.f.cfg.hidden;
    /* the stage's view of the forward's weights */
    bind.f = &ef.f;
    memset(&m, 0, sizeof m);
    m.config = s->config;
    m.user_data = &bind;
    m.get_tensor = qx__fw_get;
    if (o->env) m.env = *o->env;
    r = quarot_quantizer_init(&qz, &m, &o->desc);
    if (r != QUAROT_OK) {
        qx_err_set(e, "%s", qz.error[0] ? qz.error : quarot_result_string(r));
        goto done;
    }
    have_qz = 1;
    /* calibration inputs: the embeddings of the first nsamples windows, back to back */
    if (gptq) {
        int64_t want = o->desc.nsamples ? o->desc.nsamples : 128;
        if (!o->calib || o->calib->n < want) {
            qx_err_set(e, "calibration text too short: %lld windows of up to %lld tokens, --nsamples asks for %lld",
                       (long long)(o->calib ? o->calib->n : 0), (long long)(o->calib ? o->calib->max_len : 0), (long long)want);
            r = QUAROT_ERR_INVALID_ARGUMENT;
            goto done;
        }
        nwin = want;
        tokens = o->calib->offset[nwin];
        x = (float*)malloc((size_t)(tokens * hidden) * sizeof(float));
        tmp = (float*)malloc((size_t)(o->calib->max_len * hidden) * sizeof(float));
        if (!x || !tmp) {
            qx_err_set(e, "calibration: out of memory (%lld tokens x %lld)", (long long)tokens, (long long)hidden);
            r = QUAROT_ERR_OUT_OF_MEMORY;
            goto done;
        }
        for (w = 0; w < nwin && r == QUAROT_OK; ++w) {
            int64_t a = o->calib->offset[w];
            r = qx_forward_embed(&ef.f, o->calib->tokens + a, o->calib->offset[w + 1] - a, x + a * hidden, e);
        }
        if (r != QUAROT_OK) goto done;
        st->windows = nwin;
        st->tokens = tokens;
    }
    for (l = 0; l < L; ++l) {
        r = quarot_quantizer_begin_layer(&qz, l);
        while (r == QUAROT_OK && quarot_quantizer_pending(&qz)) {
            if (quarot_quantizer_wants_data(&qz)) {
                /* this step's inputs: the layer over every window (the quantized steps before it included) */
                for (w = 0; w < nwin && r == QUAROT_OK; ++w) {
                    int64_t a = o->calib->offset[w], T = o->calib->offset[w + 1] - a;
                    memcpy(tmp, x + a * hidden, (size_t)(T * hidden) * sizeof(float));
                    r = qx_forward_layer_run(&ef.f, l, tmp, T, e);
                    if (r == QUAROT_OK && cap.status != QUAROT_OK) r = cap.status;
                    if (r == QUAROT_OK && qx_ek_forward_status(&ef) != QUAROT_OK) r = qx_ek_forward_status(&ef);
                }
                if (r != QUAROT_OK) {
                    if (cap.status != QUAROT_OK) qx_err_set(e, "%s", qz.error);
                    break;
                }
            }
            r = quarot_quantizer_step(&qz);
            if (r != QUAROT_OK) qx_err_set(e, "%s", qz.error[0] ? qz.error : quarot_result_string(r));
        }
        if (r == QUAROT_OK) r = quarot_quantizer_end_layer(&qz);
        if (r != QUAROT_OK) goto done;
        /* sequential: the quantized layer's outputs are the next layer's inputs */
        for (w = 0; gptq && l + 1 < L && w < nwin && r == QUAROT_OK; ++w) {
            int64_t a = o->calib->offset[w];
            r = qx_forward_layer_run(&ef.f, l, x + a * hidden, o->calib->offset[w + 1] - a, e);
        }
        if (r != QUAROT_OK) goto done;
        /* write the layer back into the store (with scale migration, the norm gains too) */
        for (i = 0; i < qz.n_linears + (o->desc.migrate ? 2 : 0) && r == QUAROT_OK; ++i) {
            char nn[QUAROT_NAME_MAX];
            quarot_tensor src, *dst;
            if (i < qz.n_linears) snprintf(nn, sizeof nn, "%s", qz.names[i]);
            else snprintf(nn, sizeof nn, "model.layers.%lld.%s", (long long)l,
                          i == qz.n_linears ? "input_layernorm.weight" : "post_attention_layernorm.weight");
            dst = qx_store_find(s, nn);
            if (!dst || qx__fw_get(&bind, nn, &src) != QUAROT_OK || quarot_tensor_nrows(dst) != quarot_tensor_nrows(&src)) {
                qx_err_set(e, "%s: cannot write the quantized weight back", nn);
                r = QUAROT_ERR_INTERNAL;
                break;
            }
            for (k = 0; k < quarot_tensor_nrows(&src) && r == QUAROT_OK; ++k)
                r = quarot_tensor_set_row_f32(dst, k, (const float*)src.data + k * src.ne[0]);
            if (r != QUAROT_OK) qx_err_set(e, "%s: %s", nn, quarot_result_string(r));
        }
        if (r != QUAROT_OK) goto done;
        if (o->on_layer) o->on_layer(o->user, l + 1, L);
    }
    st->linears = qz.linears_done;
done:
    free(x);
    free(tmp);
    if (have_qz) quarot_quantizer_free(&qz);
    if (have_f) qx_ek_forward_free(&ef);
    st->seconds = qx_now() - t0;
    return r;
}

int qx_wq_cell_staged(const qx_wq_cell* c) {
    return c->w_bits < 16 && !c->packed && (c->gptq || c->clip_search || c->migrate || c->int8_down_proj || c->group_fallback);
}
