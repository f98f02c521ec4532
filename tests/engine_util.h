/* engine_util.h - the engine tests' shared measurement: the perplexity of the fake-quantized
   reference forward pass (qx_ek_forward) and of the engine on the same windows and settings.
   Include after qt.h, engine/qx_engine.h and eval/qx_evalkit.h. */
#ifndef ENGINE_UTIL_H
#define ENGINE_UTIL_H

#include <string.h>

/* W w A a KV kv, weight group `group` (0: per channel), the online hooks (NULL: none);
   float_linears 1: both sides with FP32 products on fake-quantized values (the reference's
   float_linears, the engine's fp_linears). QUAROT_OK, or the first error with its message in e. */
QT_UNUSED static quarot_result eng_ppl_pair(const qx_store* s, const quarot_online_list* hooks, const qx_windows* win, int w,
                                            int a, int kv, int64_t group, int float_linears, double* ppl_ref, double* ppl_eng,
                                            qx_err* e) {
    qx_ek_setting st;
    qx_fake_quant_opts q;
    qx_ek_forward ef;
    qx_engine en;
    qx_engine_opts o;
    qx_ppl_result r0, r1;
    quarot_result r;
    st.w_bits = w; st.a_bits = a; st.kv_bits = kv;
    qx_ek_setting_quant(&st, group, 1.0, &q);
    q.float_linears = float_linears;
    if ((r = qx_ek_forward_init(&ef, s, hooks, &q, NULL, NULL, e)) != QUAROT_OK) return r;
    r = qx_eval_windows(&ef.f, win, NULL, NULL, &r0, e);
    if (r == QUAROT_OK) r = qx_ek_forward_status(&ef);
    qx_ek_forward_free(&ef);
    if (r != QUAROT_OK) return r;
    memset(&o, 0, sizeof o);
    o.w_bits = w; o.a_bits = a; o.kv_bits = kv; o.hooks = hooks; o.w_group = group;
    o.max_tokens = win->max_len;
    o.fp_linears = float_linears;
    if ((r = qx_engine_init(&en, s, &o, e)) != QUAROT_OK) return r;
    r = qx_engine_eval(&en, win, &r1, e);
    qx_engine_free(&en);
    if (r != QUAROT_OK) return r;
    *ppl_ref = r0.ppl;
    *ppl_eng = r1.ppl;
    return QUAROT_OK;
}

#endif
