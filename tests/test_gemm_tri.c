/* The triangular SGEMM behind Adapt Rotation's symmetric products (quarot__ssyrk_upper, private:
   this program compiles its own copy of the implementation, QUAROT_STATIC so it cannot clash with
   libqx's): G = X^T X on and above the diagonal must equal, bit for bit, the same elements of the
   full quarot_sgemm(1, 0, ...) product (same ISA and blocking, one chain per element), serially,
   with a reverse-order hook and with a 2-thread qx_pool; the diagonal-crossing tiles may write below
   the diagonal, nothing else may be touched (guard columns past n). Also the vectorized symmetric
   combine pass of >>adapt_solve against its element-wise definition, and its norms (||G - I||_F,
   ||G^2||_F^2 from an upper triangle, the inf-norm) against plain double sums. */
#define QUAROT_STATIC
#define QUAROT_IMPLEMENTATION
#include "quarot.h"
#include "qt.h"
#include "support/qx_threads.h"

static quarot_env pool_env;
static void run_pool(void* user, quarot_task_fn fn, void* arg, int64_t n) {
    (void)user;
    pool_env.parallel.run(pool_env.parallel.user_data, fn, arg, n);
}
static void run_reverse(void* user, quarot_task_fn fn, void* arg, int64_t n) {
    int64_t i;
    (void)user;
    for (i = n - 1; i >= 0; --i) fn(arg, i);
}

static void test_syrk_upper_bits(void) {
    const int64_t sizes[][2] = { {5, 3}, {77, 90}, {300, 257}, {1100, 400} };
    int s, h, ns = qt_quick() ? 3 : 4;
    qx_pool* pool = qx_pool_create(2);
    qx_pool_env(pool, &pool_env);
    QT_CHECKF(pool_env.parallel.run != NULL, "no 2-thread pool");
    for (s = 0; s < ns; ++s) {
        int64_t n = sizes[s][0], k = sizes[s][1], ld = n + 3, i, j;
        float* x = (float*)malloc((size_t)(k * n) * sizeof(float));
        float* full = (float*)malloc((size_t)(n * n) * sizeof(float));
        float* g = (float*)malloc((size_t)(n * ld) * sizeof(float));
        for (i = 0; i < k * n; ++i) x[i] = (float)qt_normal();
        QT_OK(quarot_sgemm(1, 0, n, n, k, 1.0f, x, n, x, n, 0.0f, full, n, NULL));
        for (h = 0; h < 3; ++h) {
            quarot_env env;
            int64_t bad = 0, guard = 0;
            memset(&env, 0, sizeof env);
            if (h == 1) { env.parallel.run = run_reverse; env.parallel.n_threads = 3; }
            if (h == 2) { if (!pool_env.parallel.run) continue; env.parallel.run = run_pool; env.parallel.n_threads = 2; }
            for (i = 0; i < n * ld; ++i) g[i] = 7.25f;
            QT_OK(quarot__ssyrk_upper(n, k, x, n, g, ld, h ? &env : NULL));
            for (i = 0; i < n; ++i) {
                for (j = i; j < n; ++j) bad += memcmp(&g[i * ld + j], &full[i * n + j], sizeof(float)) != 0;
                for (j = n; j < ld; ++j) guard += g[i * ld + j] != 7.25f;
            }
            QT_CHECKF(bad == 0, "n %lld k %lld hook %d: %lld upper elements differ from the full product", (long long)n, (long long)k, h, (long long)bad);
            QT_CHECKF(guard == 0, "n %lld hook %d: %lld guard elements overwritten", (long long)n, h, (long long)guard);
        }
        free(x); free(full); free(g);
    }
    qx_pool_destroy(pool);
}

/* sym_combine: g <- c0 I + c1 G + c2 G2 (full, from the upper triangles), returns max|G - I| and
   ||G - I||_F (sums in another order: relative 1e-12); fro2_upper and inf on the same G. */
static void test_sym_combine(void) {
    const int64_t sizes[] = { 1, 63, 64, 65, 200 };
    int s, with2;
    for (s = 0; s < 5; ++s)
        for (with2 = 0; with2 < 2; ++with2) {
            int64_t n = sizes[s], i, j, bad = 0;
            float* g = (float*)malloc((size_t)(n * n) * sizeof(float));
            float* g0 = (float*)malloc((size_t)(n * n) * sizeof(float));
            float* g2 = (float*)malloc((size_t)(n * n) * sizeof(float));
            double res[16], r, rf = -1.0, want = 0.0, want_f = 0.0, want_u = 0.0, want_inf = 0.0, c0 = 0.75, c1 = -1.25, c2 = 0.375;
            for (i = 0; i < n * n; ++i) { g0[i] = (float)(0.01 * qt_normal()); g2[i] = (float)qt_normal(); }
            for (i = 0; i < n; ++i) g0[i * n + i] += 1.0f;
            if (n > 3) { g0[1 * n + 2] = -0.0f; g0[2 * n + 1] = 5.0f; }   /* a signed zero; a lower value never read */
            memcpy(g, g0, (size_t)(n * n) * sizeof(float));
            for (i = 0; i < n; ++i) {            /* the symmetric G of the upper triangle: norms */
                double rs = 0.0;
                for (j = 0; j < n; ++j) {
                    double gv = (double)(j >= i ? g0[i * n + j] : g0[j * n + i]), d = gv - (i == j ? 1.0 : 0.0);
                    want_f += d * d;
                    want_u += gv * gv;
                    rs += fabs(gv);
                }
                if (rs > want_inf) want_inf = rs;
            }
            want_f = sqrt(want_f);
            r = quarot__adapt_fro2_upper(n, g0, res, NULL);
            QT_CHECKF(fabs(r - want_u) <= 1e-12 * want_u, "n %lld: ||G||_F^2 from the upper triangle %.15g, want %.15g", (long long)n, r, want_u);
            r = quarot__adapt_sym_combine(n, g, with2 ? g2 : NULL, c0, c1, c2, res, &rf, NULL);
            QT_CHECKF(fabs(rf - want_f) <= 1e-12 * want_f, "n %lld: ||G - I||_F %.15g, want %.15g", (long long)n, rf, want_f);
            if (!with2) {                        /* g holds c0 I + c1 G now: the inf-norm of G from g0 made full */
                float* gf = (float*)malloc((size_t)(n * n) * sizeof(float));
                double ri;
                for (i = 0; i < n; ++i)
                    for (j = 0; j < n; ++j) gf[i * n + j] = j >= i ? g0[i * n + j] : g0[j * n + i];
                ri = quarot__adapt_inf(n, gf, res, NULL);
                QT_CHECKF(fabs(ri - want_inf) <= 1e-12 * want_inf, "n %lld: ||G||_inf %.15g, want %.15g", (long long)n, ri, want_inf);
                free(gf);
            }
            for (i = 0; i < n; ++i)
                for (j = i; j < n; ++j) {
                    double gv = (double)g0[i * n + j], e = fabs(gv - (i == j ? 1.0 : 0.0));
                    double v = c1 * gv + (i == j ? c0 : 0.0);
                    float tv;
                    if (with2) v += c2 * (double)g2[i * n + j];
                    tv = (float)v;
                    if (e > want) want = e;
                    bad += memcmp(&g[i * n + j], &tv, sizeof tv) != 0 || memcmp(&g[j * n + i], &tv, sizeof tv) != 0;
                }
            QT_CHECKF(bad == 0, "n %lld G2 %d: %lld elements differ from c0 I + c1 G + c2 G2", (long long)n, with2, (long long)bad);
            QT_CHECKF(r == want, "n %lld: max|G - I| %.9g, want %.9g", (long long)n, r, want);
            g0[0] = NAN;
            memcpy(g, g0, (size_t)(n * n) * sizeof(float));
            r = quarot__adapt_sym_combine(n, g, NULL, c0, c1, c2, res, NULL, NULL);
            QT_CHECKF(r != r, "n %lld: a NaN in G must give a NaN residual, got %g", (long long)n, r);
            free(g); free(g0); free(g2);
        }
}

int main(void) {
    QT_RUN(test_syrk_upper_bits);
    QT_RUN(test_sym_combine);
    return qt_finish("test_gemm_tri");
}
