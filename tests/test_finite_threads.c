/* The processor's validation checks every tensor for NaN / Inf on the env's parallel hook (row
   blocks of 256); the refusal names the first bad element in row-major order for any thread count:
   two NaNs in different blocks of gate_proj (rows 300 and 700 of 1024) give the same message, with
   the first one's index, on 1 and on 3 threads, and a clean model passes on both. */
#include "quarot.h"
#include "qt.h"
#include "model/qx_model.h"
#include "model/qx_synth.h"
#include "support/qx_threads.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static quarot_result run(int threads, int poison, char* msg, size_t cap) {
    qx_synth_desc sd;
    qx_store s;
    qx_err e;
    quarot_model m;
    qx_binding b;
    quarot_rotate_desc d;
    qx_pool* pool = threads > 1 ? qx_pool_create(threads) : NULL;
    quarot_result r;
    memset(&sd, 0, sizeof sd);
    sd.hidden = 64; sd.intermediate = 1024; sd.n_layers = 2; sd.n_heads = 4; sd.n_kv_heads = 4; sd.head_dim = 16;
    sd.vocab = 300; sd.max_seq = 64; sd.seed = 3;
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) return QUAROT_ERR_STATE;
    if (poison) {
        quarot_tensor* t = qx_store_find(&s, "model.layers.1.mlp.gate_proj.weight");
        if (!t || t->ne[1] != 1024 || t->ne[0] != 64) { qx_store_free(&s); qx_pool_destroy(pool); return QUAROT_ERR_STATE; }
        ((float*)t->data)[700 * 64 + 9] = NAN;
        ((float*)t->data)[300 * 64 + 5] = INFINITY;
    }
    qx_model_bind(&m, &b, &s);
    qx_pool_env(pool, &m.env);
    memset(&d, 0, sizeof d);
    r = quarot_rotate_model(&m, &d);
    snprintf(msg, cap, "%s", m.error);
    qx_store_free(&s);
    qx_pool_destroy(pool);
    return r;
}

static void test_first_bad_any_threads(void) {
    char m1[512], m3[512];
    QT_EQ_INT(run(1, 1, m1, sizeof m1), QUAROT_ERR_NONFINITE);
    QT_EQ_INT(run(3, 1, m3, sizeof m3), QUAROT_ERR_NONFINITE);
    QT_CHECKF(strstr(m1, "gate_proj") && strstr(m1, "element 19205"), "1 thread: %s", m1);
    QT_CHECKF(strcmp(m1, m3) == 0, "1 thread: '%s', 3 threads: '%s'", m1, m3);
    QT_EQ_INT(run(1, 0, m1, sizeof m1), QUAROT_OK);
    QT_EQ_INT(run(3, 0, m3, sizeof m3), QUAROT_OK);
}

int main(void) {
    QT_RUN(test_first_bad_any_threads);
    return qt_finish("test_finite_threads");
}
