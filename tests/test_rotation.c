/* Rotation objects, rotate commands and the online hook IR against dense truth:
   - every rotation kind (random Hadamard full / Kronecker / block-diagonal / fallbacks, random
     orthogonal, given matrix, identity) is orthogonal, and apply equals the product with its dense
     matrix (double: 1e-12, float: 1e-5 relative), transpose included;
   - commands rotate the right axis of a weight (input side W*Q, output side Q^T*W and b*Q, per-head
     slices, the heads axis) in f32/f16/bf16, and refuse mismatched shapes without writing;
   - online hooks equal I (x) H/sqrt(n) (x) I, serialize to text and read back identically, and the
     reader rejects corrupted files line by line. */
#include "quarot.h"
#include "qt.h"

static void rand_fill(double* x, int64_t n) { int64_t i; for (i = 0; i < n; ++i) x[i] = qt_normal(); }

/* y[r][:] = x[r][:] * M (M [n][n]), or * M^T */
static void matmul_rows(const double* x, int64_t rows, int64_t n, const double* m, int trans, double* y) {
    int64_t r, i, j;
    for (r = 0; r < rows; ++r)
        for (j = 0; j < n; ++j) {
            double s = 0;
            for (i = 0; i < n; ++i) s += x[r * n + i] * (trans ? m[j * n + i] : m[i * n + j]);
            y[r * n + j] = s;
        }
}

static double max_abs(const double* a, const double* b, int64_t n) {
    double w = 0; int64_t i;
    for (i = 0; i < n; ++i) if (fabs(a[i] - b[i]) > w) w = fabs(a[i] - b[i]);
    return w;
}

/* Check one rotation: orthogonal dense form, f64 and f32 apply against it. */
static void check_rotation(const quarot_rotation* q, const char* what) {
    int64_t n = q->n, rows = 5, i, j, k;
    double* Q = (double*)malloc((size_t)(n * n) * sizeof(double));
    double* x = (double*)malloc((size_t)(rows * n) * sizeof(double));
    double* y = (double*)malloc((size_t)(rows * n) * sizeof(double));
    double* z = (double*)malloc((size_t)(rows * n) * sizeof(double));
    float* xf = (float*)malloc((size_t)(rows * n) * sizeof(float));
    double worst = 0;
    int t;
    QT_OK(quarot_rotation_to_dense_f64(q, Q));
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0;
            for (k = 0; k < n; ++k) s += Q[k * n + i] * Q[k * n + j];
            if (fabs(s - (i == j)) > worst) worst = fabs(s - (i == j));
        }
    QT_CHECKF(worst < 1e-12, "%s: max|Q^T Q - I| = %g", what, worst);
    for (t = 0; t < 2; ++t) {
        rand_fill(x, rows * n);
        memcpy(z, x, (size_t)(rows * n) * sizeof(double));
        for (i = 0; i < rows * n; ++i) xf[i] = (float)x[i];
        matmul_rows(x, rows, n, Q, t, y);
        QT_OK(quarot_rotation_apply_f64(q, z, rows, n, t, NULL, 0));
        QT_CHECKF(max_abs(y, z, rows * n) < 1e-12, "%s transpose=%d: f64 apply differs from x*Q by %g", what, t, max_abs(y, z, rows * n));
        QT_OK(quarot_rotation_apply_f32(q, xf, rows, n, t, NULL, 0));
        for (i = 0; i < rows * n; ++i) z[i] = (double)xf[i];
        QT_CHECKF(max_abs(y, z, rows * n) < 1e-5 * 8, "%s transpose=%d: f32 apply differs by %g", what, t, max_abs(y, z, rows * n));
    }
    free(Q); free(x); free(y); free(z); free(xf);
}

static void test_rotation_kinds(void) {
    quarot_rotation q;
    quarot_rotation_desc d;
    int64_t sizes[] = {1, 2, 64, 96, 172, 344};
    size_t s;
    qt_seed(1);
    for (s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
        memset(&d, 0, sizeof d);
        d.n = sizes[s];
        d.seed = 7;
        QT_OK(quarot_rotation_init(&q, &d, NULL));
        QT_CHECK(q.kind == QUAROT_ROTATION_HADAMARD && q.block == sizes[s]);
        check_rotation(&q, q.text);
        quarot_rotation_free(&q);
        d.no_signs = 1;
        QT_OK(quarot_rotation_init(&q, &d, NULL));
        QT_CHECK(q.signs == NULL);
        check_rotation(&q, q.text);
        quarot_rotation_free(&q);
    }
    /* block-diagonal on request */
    memset(&d, 0, sizeof d);
    d.n = 128; d.block_size = 32; d.seed = 3;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    QT_EQ_INT(q.block, 32);
    check_rotation(&q, q.text);
    {   /* off-block entries are exactly zero */
        double* Q = (double*)malloc(128 * 128 * sizeof(double));
        int64_t i, j; int bad = 0;
        QT_OK(quarot_rotation_to_dense_f64(&q, Q));
        for (i = 0; i < 128; ++i) for (j = 0; j < 128; ++j) if (i / 32 != j / 32 && Q[i * 128 + j] != 0.0) bad++;
        QT_EQ_INT(bad, 0);
        free(Q);
    }
    quarot_rotation_free(&q);
    /* 86 = 2*43 has no Hadamard: default falls back to blocks of 2; ERROR refuses */
    memset(&d, 0, sizeof d);
    d.n = 86;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    QT_EQ_INT(q.block, 2);
    QT_CHECK(strstr(q.text, "block-diagonal") != NULL);
    check_rotation(&q, q.text);
    quarot_rotation_free(&q);
    d.fallback = QUAROT_FALLBACK_ERROR;
    QT_ERR(quarot_rotation_init(&q, &d, NULL), QUAROT_ERR_UNSUPPORTED_SIZE);
    d.fallback = QUAROT_FALLBACK_RANDOM_ORTHOGONAL;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    QT_CHECK(q.kind == QUAROT_ROTATION_RANDOM_ORTHOGONAL && q.block == 86);
    check_rotation(&q, q.text);
    quarot_rotation_free(&q);
    /* 43 (odd): no block at all, default gives a random orthogonal matrix */
    memset(&d, 0, sizeof d);
    d.n = 43;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    QT_CHECK(q.kind == QUAROT_ROTATION_RANDOM_ORTHOGONAL);
    check_rotation(&q, q.text);
    quarot_rotation_free(&q);
    /* random orthogonal (block-diagonal too), given matrix, identity */
    memset(&d, 0, sizeof d);
    d.kind = QUAROT_ROTATION_RANDOM_ORTHOGONAL; d.n = 48; d.seed = 11;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    check_rotation(&q, q.text);
    quarot_rotation_free(&q);
    d.block_size = 16;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    check_rotation(&q, q.text);
    {
        quarot_rotation g;
        quarot_rotation_desc gd;
        double* m = (double*)malloc(16 * 16 * sizeof(double));
        memcpy(m, q.dense, 16 * 16 * sizeof(double));
        memset(&gd, 0, sizeof gd);
        gd.kind = QUAROT_ROTATION_MATRIX; gd.n = 48; gd.block_size = 16; gd.matrix = m;
        QT_OK(quarot_rotation_init(&g, &gd, NULL));
        check_rotation(&g, g.text);
        quarot_rotation_free(&g);
        m[5] += 1e-3;                                       /* no longer orthogonal */
        QT_ERR(quarot_rotation_init(&g, &gd, NULL), QUAROT_ERR_INVALID_ARGUMENT);
        m[5] = NAN;
        QT_ERR(quarot_rotation_init(&g, &gd, NULL), QUAROT_ERR_NONFINITE);
        gd.matrix = NULL;
        QT_ERR(quarot_rotation_init(&g, &gd, NULL), QUAROT_ERR_INVALID_ARGUMENT);
        free(m);
    }
    quarot_rotation_free(&q);
    memset(&d, 0, sizeof d);
    d.kind = QUAROT_ROTATION_IDENTITY; d.n = 10;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    check_rotation(&q, q.text);
    quarot_rotation_free(&q);
    /* bad arguments */
    memset(&d, 0, sizeof d);
    QT_ERR(quarot_rotation_init(&q, &d, NULL), QUAROT_ERR_INVALID_ARGUMENT);         /* n = 0 */
    d.n = 64; d.block_size = 48;
    QT_ERR(quarot_rotation_init(&q, &d, NULL), QUAROT_ERR_INVALID_ARGUMENT);         /* block does not divide */
    QT_ERR(quarot_rotation_init(NULL, &d, NULL), QUAROT_ERR_INVALID_ARGUMENT);
}

static void test_rotation_seeds(void) {
    quarot_rotation a, b;
    quarot_rotation_desc d;
    memset(&d, 0, sizeof d);
    d.n = 64; d.seed = 5;
    QT_OK(quarot_rotation_init(&a, &d, NULL));
    QT_OK(quarot_rotation_init(&b, &d, NULL));
    QT_CHECK(memcmp(a.signs, b.signs, 64 * sizeof(float)) == 0);
    quarot_rotation_free(&b);
    d.seed = 6;
    QT_OK(quarot_rotation_init(&b, &d, NULL));
    QT_CHECK(memcmp(a.signs, b.signs, 64 * sizeof(float)) != 0);
    quarot_rotation_free(&a);
    quarot_rotation_free(&b);
}

/* ---- commands ---- */

static void tensor_from(quarot_tensor* t, void* mem, quarot_dtype dt, int64_t rows, int64_t cols, const double* v) {
    int64_t ne[2], r;
    ne[0] = cols; ne[1] = rows;
    quarot_tensor_init(t, mem, dt, 2, ne);
    for (r = 0; r < rows; ++r) quarot_tensor_set_row_f64(t, r, v + r * cols);
}

static void tensor_to(const quarot_tensor* t, double* v) {
    int64_t r;
    for (r = 0; r < quarot_tensor_nrows(t); ++r) quarot_tensor_get_row_f64(t, r, v + r * t->ne[0]);
}

static void test_command_sides(void) {
    const int64_t out = 12, in = 64;
    quarot_rotation q, h;
    quarot_rotation_desc d;
    quarot_command c;
    double W[12 * 64], Q[64 * 64], H[16 * 16], ref[12 * 64], got[12 * 64], bias[64], bref[64];
    float mem[12 * 64], bmem[64];
    quarot_tensor t, bt;
    int64_t r, i, j, k;
    qt_seed(2);
    memset(&d, 0, sizeof d);
    d.n = 64; d.seed = 9;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    QT_OK(quarot_rotation_to_dense_f64(&q, Q));
    /* input side: W <- W*Q */
    rand_fill(W, out * in);
    tensor_from(&t, mem, QUAROT_DTYPE_F32, out, in, W);
    memset(&c, 0, sizeof c);
    c.side = QUAROT_SIDE_INPUT; c.outer = 1; c.inner = 1;
    tensor_to(&t, W);
    QT_OK(quarot_command_apply(&c, &q, &t, NULL, NULL));
    matmul_rows(W, out, in, Q, 0, ref);
    tensor_to(&t, got);
    QT_CHECKF(max_abs(ref, got, out * in) < 1e-5, "input side off by %g", max_abs(ref, got, out * in));
    /* output side of a writer W[64][12] with bias: W <- Q^T W, b <- b Q */
    rand_fill(W, in * out);
    rand_fill(bias, in);
    tensor_from(&t, mem, QUAROT_DTYPE_F32, in, out, W);
    tensor_from(&bt, bmem, QUAROT_DTYPE_F32, 1, in, bias);
    tensor_to(&t, W); tensor_to(&bt, bias);
    c.side = QUAROT_SIDE_OUTPUT;
    QT_OK(quarot_command_apply(&c, &q, &t, &bt, NULL));
    for (i = 0; i < in; ++i)
        for (j = 0; j < out; ++j) {
            double s = 0;
            for (k = 0; k < in; ++k) s += Q[k * in + i] * W[k * out + j];
            ref[i * out + j] = s;
        }
    matmul_rows(bias, 1, in, Q, 0, bref);
    tensor_to(&t, got);
    QT_CHECKF(max_abs(ref, got, out * in) < 1e-5, "output side off by %g", max_abs(ref, got, out * in));
    tensor_to(&bt, got);
    QT_CHECKF(max_abs(bref, got, in) < 1e-5, "bias off by %g", max_abs(bref, got, in));
    /* embedding: output side means rows, E <- E*Q */
    rand_fill(W, out * in);
    tensor_from(&t, mem, QUAROT_DTYPE_F32, out, in, W);
    tensor_to(&t, W);
    c.embedding = 1;
    QT_OK(quarot_command_apply(&c, &q, &t, NULL, NULL));
    matmul_rows(W, out, in, Q, 0, ref);
    tensor_to(&t, got);
    QT_CHECKF(max_abs(ref, got, out * in) < 1e-5, "embedding off by %g", max_abs(ref, got, out * in));
    /* per-head slices (4 heads of 16) and the heads axis (H_4 (x) I_16) on the input side */
    memset(&d, 0, sizeof d);
    d.n = 16; d.seed = 4;
    QT_OK(quarot_rotation_init(&h, &d, NULL));
    QT_OK(quarot_rotation_to_dense_f64(&h, H));
    rand_fill(W, out * in);
    tensor_from(&t, mem, QUAROT_DTYPE_F32, out, in, W);
    tensor_to(&t, W);
    memset(&c, 0, sizeof c);
    c.side = QUAROT_SIDE_INPUT; c.outer = 4; c.inner = 1;
    QT_OK(quarot_command_apply(&c, &h, &t, NULL, NULL));
    for (r = 0; r < out; ++r) matmul_rows(W + r * in, 4, 16, H, 0, ref + r * in);
    tensor_to(&t, got);
    QT_CHECKF(max_abs(ref, got, out * in) < 1e-5, "per-head slices off by %g", max_abs(ref, got, out * in));
    {
        quarot_rotation h4;
        double H4[16];
        memset(&d, 0, sizeof d);
        d.n = 4; d.no_signs = 1;
        QT_OK(quarot_rotation_init(&h4, &d, NULL));
        QT_OK(quarot_rotation_to_dense_f64(&h4, H4));
        rand_fill(W, out * in);
        tensor_from(&t, mem, QUAROT_DTYPE_F32, out, in, W);
        tensor_to(&t, W);
        c.outer = 1; c.inner = 16;
        QT_OK(quarot_command_apply(&c, &h4, &t, NULL, NULL));
        for (r = 0; r < out; ++r)
            for (i = 0; i < 4; ++i)
                for (j = 0; j < 16; ++j) {   /* y[i][j] = sum_k x[k][j] H4[k][i] */
                    double s = 0;
                    for (k = 0; k < 4; ++k) s += W[r * in + k * 16 + j] * H4[k * 4 + i];
                    ref[r * in + i * 16 + j] = s;
                }
        tensor_to(&t, got);
        QT_CHECKF(max_abs(ref, got, out * in) < 1e-5, "heads axis off by %g", max_abs(ref, got, out * in));
        quarot_rotation_free(&h4);
    }
    /* mismatched shapes: error, nothing written */
    {
        float before[12 * 64];
        rand_fill(W, out * in);
        tensor_from(&t, mem, QUAROT_DTYPE_F32, out, in, W);
        memcpy(before, mem, sizeof before);
        c.outer = 3; c.inner = 1;                                 /* 3*16 != 64 */
        QT_ERR(quarot_command_apply(&c, &h, &t, NULL, NULL), QUAROT_ERR_SHAPE_MISMATCH);
        c.outer = 1; c.side = QUAROT_SIDE_OUTPUT;
        QT_ERR(quarot_command_apply(&c, &q, &t, NULL, NULL), QUAROT_ERR_SHAPE_MISMATCH);   /* out axis is 12 */
        QT_CHECK(memcmp(before, mem, sizeof before) == 0);
    }
    quarot_rotation_free(&q);
    quarot_rotation_free(&h);
}

static void test_command_half_precision(void) {
    /* f16 / bf16 weights are rotated in double and rounded once */
    quarot_dtype dts[2] = {QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    double tol[2] = {2e-3, 1.6e-2};
    quarot_rotation q;
    quarot_rotation_desc d;
    quarot_command c;
    double W[8 * 172], Q[172 * 172], ref[8 * 172], got[8 * 172];
    uint16_t mem[8 * 172];
    quarot_tensor t;
    int k;
    memset(&d, 0, sizeof d);
    d.n = 172; d.seed = 1;
    QT_OK(quarot_rotation_init(&q, &d, NULL));
    QT_OK(quarot_rotation_to_dense_f64(&q, Q));
    memset(&c, 0, sizeof c);
    c.side = QUAROT_SIDE_INPUT; c.outer = 1; c.inner = 1;
    for (k = 0; k < 2; ++k) {
        int64_t i;
        double worst = 0;
        rand_fill(W, 8 * 172);
        tensor_from(&t, mem, dts[k], 8, 172, W);
        tensor_to(&t, W);
        QT_OK(quarot_command_apply(&c, &q, &t, NULL, NULL));
        matmul_rows(W, 8, 172, Q, 0, ref);
        tensor_to(&t, got);
        for (i = 0; i < 8 * 172; ++i) {
            double e = fabs(ref[i] - got[i]) / (fabs(ref[i]) + 1e-3);
            if (e > worst) worst = e;
        }
        QT_CHECKF(worst < tol[k], "%s: relative error %g", quarot_dtype_name(dts[k]), worst);
    }
    quarot_rotation_free(&q);
}

/* ---- online hooks ---- */

static void test_online_apply(void) {
    quarot_online_list list;
    const quarot_online_hook* h;
    float x[3 * 96], y[3 * 96], signs[8];
    double H8[64];
    void* work;
    int64_t r, o, i, j, k;
    int s;
    quarot_online_list_init(&list, NULL);
    for (s = 0; s < 8; ++s) signs[s] = (s % 3 == 0) ? -1.0f : 1.0f;
    /* [outer 2][n 8][inner 6] = 96 with signs */
    QT_OK(quarot_online_list_add(&list, 0, QUAROT_SITE_O_INPUT, 96, 2, 8, 6, signs));
    QT_ERR(quarot_online_list_add(&list, 0, QUAROT_SITE_O_INPUT, 95, 2, 8, 6, NULL), QUAROT_ERR_SHAPE_MISMATCH);
    QT_ERR(quarot_online_list_add(&list, 0, QUAROT_SITE_NONE, 96, 2, 8, 6, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    h = quarot_online_find(&list, 0, QUAROT_SITE_O_INPUT);
    QT_CHECK(h != NULL);
    QT_CHECK(quarot_online_find(&list, 1, QUAROT_SITE_O_INPUT) == NULL);
    QT_OK(quarot_hadamard_build_f64(8, 1, H8, NULL));
    qt_seed(3);
    for (i = 0; i < 3 * 96; ++i) x[i] = (float)qt_normal();
    memcpy(y, x, sizeof x);
    work = malloc(quarot_online_workspace_size(h) + 1);
    QT_ERR(quarot_online_apply(h, y, 3, 96, work, 0), QUAROT_ERR_WORKSPACE);
    QT_OK(quarot_online_apply(h, y, 3, 96, work, quarot_online_workspace_size(h)));
    {
        double worst = 0;
        for (r = 0; r < 3; ++r)
            for (o = 0; o < 2; ++o)
                for (i = 0; i < 8; ++i)
                    for (j = 0; j < 6; ++j) {
                        double sum = 0;
                        for (k = 0; k < 8; ++k) sum += (double)x[r * 96 + o * 48 + k * 6 + j] * signs[k] * H8[k * 8 + i];
                        if (fabs(sum - y[r * 96 + o * 48 + i * 6 + j]) > worst) worst = fabs(sum - y[r * 96 + o * 48 + i * 6 + j]);
                    }
        QT_CHECKF(worst < 1e-5, "heads-axis hook off by %g", worst);
    }
    free(work);
    /* Kronecker-size hook with a strided batch: 172 = K 172 (table) */
    QT_OK(quarot_online_list_add(&list, 2, QUAROT_SITE_DOWN_INPUT, 172, 1, 172, 1, NULL));
    h = quarot_online_find(&list, 2, QUAROT_SITE_DOWN_INPUT);
    QT_EQ_INT(h->K, 172);
    {
        float xs[2 * 180], ys[2 * 180];
        double* H = (double*)malloc(172 * 172 * sizeof(double));
        double worst = 0;
        QT_OK(quarot_hadamard_build_f64(172, 1, H, NULL));
        for (i = 0; i < 2 * 180; ++i) xs[i] = (float)qt_normal();
        memcpy(ys, xs, sizeof xs);
        work = malloc(quarot_online_workspace_size(h) + 1);
        QT_OK(quarot_online_apply(h, ys, 2, 180, work, quarot_online_workspace_size(h)));
        for (r = 0; r < 2; ++r) {
            for (i = 0; i < 172; ++i) {
                double sum = 0;
                for (k = 0; k < 172; ++k) sum += (double)xs[r * 180 + k] * H[k * 172 + i];
                if (fabs(sum - ys[r * 180 + i]) > worst) worst = fabs(sum - ys[r * 180 + i]);
            }
            for (i = 172; i < 180; ++i) QT_CHECK(xs[r * 180 + i] == ys[r * 180 + i]);   /* padding untouched */
        }
        QT_CHECKF(worst < 1e-5, "down hook off by %g", worst);
        free(work);
        free(H);
    }
    quarot_online_list_free(&list);
}

static void test_online_text(void) {
    quarot_online_list a, b;
    char *text, *text2, err[200];
    size_t need, need2;
    float signs[20];
    int i;
    quarot_online_list_init(&a, NULL);
    for (i = 0; i < 20; ++i) signs[i] = i % 5 == 1 ? -1.0f : 1.0f;
    QT_OK(quarot_online_list_add(&a, 0, QUAROT_SITE_O_INPUT, 64, 1, 8, 8, NULL));
    QT_OK(quarot_online_list_add(&a, 0, QUAROT_SITE_DOWN_INPUT, 172, 1, 172, 1, NULL));
    QT_OK(quarot_online_list_add(&a, 3, QUAROT_SITE_Q_ROPE, 40, 2, 20, 1, signs));
    QT_OK(quarot_online_list_add(&a, 3, QUAROT_SITE_K_ROPE, 20, 1, 20, 1, NULL));
    QT_OK(quarot_online_write(&a, NULL, 0, &need));
    text = (char*)malloc(need);
    QT_ERR(quarot_online_write(&a, text, need - 1, &need2), QUAROT_ERR_WORKSPACE);
    QT_OK(quarot_online_write(&a, text, need, &need2));
    QT_EQ_INT(need, need2);
    QT_EQ_INT(strlen(text) + 1, need);
    QT_CHECK(strncmp(text, "quarot-online 1\nhooks 4\n", 24) == 0);
    quarot_online_list_init(&b, NULL);
    QT_OK(quarot_online_read(&b, text, strlen(text), err, sizeof err));
    QT_EQ_INT(b.count, 4);
    QT_OK(quarot_online_write(&b, NULL, 0, &need2));
    text2 = (char*)malloc(need2);
    QT_OK(quarot_online_write(&b, text2, need2, &need2));
    QT_CHECK(strcmp(text, text2) == 0);
    QT_CHECK(b.hooks[2].signs && memcmp(b.hooks[2].signs, signs, sizeof signs) == 0);
    quarot_online_list_free(&b);
    free(text2);
    {   /* corruptions, each rejected with a line number; the list is left empty */
        struct { const char* from; const char* to; } cases[] = {
            {"quarot-online 1", "quarot-online 2"},
            {"hooks 4", "hooks 5"},
            {"hooks 4", "hooks x"},
            {"size=172", "size=171"},
            {"K=172", "K=43"},
            {"o_input", "x_input"},
            {"end\n", "\n"},
            {"signs=-\nhook 3 q_rope", "signs=zz\nhook 3 q_rope"},
            {"hadamard 172\n+", "hadamard 172\n-"},
            {"n=20", "n=21"},
        };
        size_t c;
        for (c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
            const char* at = strstr(text, cases[c].from);
            char* bad;
            size_t pre;
            quarot_result res;
            QT_CHECKF(at != NULL, "case %d: pattern '%s' not in text", (int)c, cases[c].from);
            if (!at) continue;
            pre = (size_t)(at - text);
            bad = (char*)malloc(strlen(text) + 64);
            memcpy(bad, text, pre);
            strcpy(bad + pre, cases[c].to);
            strcat(bad, at + strlen(cases[c].from));
            quarot_online_list_init(&b, NULL);
            err[0] = 0;
            res = quarot_online_read(&b, bad, strlen(bad), err, sizeof err);
            QT_CHECKF(res == QUAROT_ERR_PARSE, "case %d ('%s' -> '%s') returned %d", (int)c, cases[c].from, cases[c].to, (int)res);
            QT_CHECKF(strncmp(err, "line ", 5) == 0, "case %d: message '%s'", (int)c, err);
            QT_EQ_INT(b.count, 0);
            quarot_online_list_free(&b);
            free(bad);
        }
        /* every truncation is rejected */
        for (c = 0; c + 1 < strlen(text); c += 7) {
            quarot_online_list_init(&b, NULL);
            QT_CHECKF(quarot_online_read(&b, text, c, err, sizeof err) != QUAROT_OK, "truncation at %d accepted", (int)c);
            quarot_online_list_free(&b);
        }
    }
    free(text);
    quarot_online_list_free(&a);
}

int main(void) {
    QT_RUN(test_rotation_kinds);
    QT_RUN(test_rotation_seeds);
    QT_RUN(test_command_sides);
    QT_RUN(test_command_half_precision);
    QT_RUN(test_online_apply);
    QT_RUN(test_online_text);
    return qt_finish("test_rotation");
}
