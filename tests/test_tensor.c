/* Tensor views and format conversions: shape/stride validation (overflow, overlap), row access
   through strided views in every dtype, f16/bf16 rounding checked against an independent
   double-precision rounding (quarot_f64_to_*_1 and a textbook definition), and NaN/Inf detection. */
#include "quarot.h"
#include "qt.h"

#include <stdint.h>

/* Round x to the nearest f16 by brute force over all finite f16 values of its sign (ties to even). */
static uint16_t f16_nearest(double x) {
    uint16_t best = 0, sign = x < 0 || (x == 0 && signbit(x)) ? 0x8000 : 0;
    double ax = fabs(x), bestd = INFINITY;
    int h;
    if (ax >= 65520.0) return (uint16_t)(sign | 0x7c00);
    for (h = 0; h < 0x7c00; ++h) {
        double d = fabs(qt_f16_value((uint16_t)h) - ax);
        if (d < bestd || (d == bestd && (h & 1) == 0)) { bestd = d; best = (uint16_t)h; }
    }
    return (uint16_t)(sign | best);
}

static void test_f16_roundtrip_all(void) {
    int h, bad = 0;
    for (h = 0; h < 65536; ++h) {
        float f;
        uint16_t back;
        quarot_f16_to_f32((const uint16_t*)&h, &f, 1);   /* little-endian low half */
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) { bad += !(f != f); continue; }   /* NaN stays NaN */
        bad += (double)f != qt_f16_value((uint16_t)h);
        quarot_f32_to_f16(&f, &back, 1);
        bad += back != (uint16_t)h;
    }
    QT_EQ_INT(bad, 0);
}

static void test_f16_rounding_against_brute_force(void) {
    /* values around every binade, halfway points, subnormals, overflow threshold */
    int i, bad = 0, n = qt_quick() ? 300 : 3000;
    qt_seed(11);
    for (i = 0; i < n; ++i) {
        double x;
        float f;
        uint16_t got, want;
        int kind = i % 4;
        if (kind == 0) x = ldexp(qt_uniform() * 2 - 1, (int)(qt_uniform() * 44) - 27);
        else if (kind == 1) { uint16_t h = (uint16_t)(qt_uniform() * 0x7bff); x = (qt_f16_value(h) + qt_f16_value((uint16_t)(h + 1))) / 2; }
        else if (kind == 2) x = ldexp(qt_uniform(), -24 - (int)(qt_uniform() * 3));
        else x = 65504.0 + qt_uniform() * 32.0;
        f = (float)x;
        want = f16_nearest((double)f);
        quarot_f32_to_f16(&f, &got, 1);
        bad += got != want;
        bad += quarot_f64_to_f16_1((double)f) != want;
    }
    QT_EQ_INT(bad, 0);
    { float nan = qt_bits_f32(0x7fc00001u); uint16_t h; quarot_f32_to_f16(&nan, &h, 1); QT_CHECK((h & 0x7c00) == 0x7c00 && (h & 0x3ff)); }
    { float snan = qt_bits_f32(0x7f800001u); uint16_t h; quarot_f32_to_f16(&snan, &h, 1); QT_CHECK((h & 0x7c00) == 0x7c00 && (h & 0x3ff)); }
    { float inf = qt_bits_f32(0xff800000u); uint16_t h; quarot_f32_to_f16(&inf, &h, 1); QT_EQ_INT(h, 0xfc00); }
    QT_EQ_INT(quarot_f64_to_f16_1(65519.99), 0x7bff);
    QT_EQ_INT(quarot_f64_to_f16_1(65520.0), 0x7c00);
    QT_EQ_INT(quarot_f64_to_f16_1(-0.0), 0x8000);
    QT_EQ_INT(quarot_f64_to_f16_1(ldexp(1.0, -25)), 0);        /* tie between 0 and the min subnormal -> even */
    QT_EQ_INT(quarot_f64_to_f16_1(ldexp(1.5, -25)), 1);
}

static void test_bf16(void) {
    int i, bad = 0;
    qt_seed(5);
    for (i = 0; i < 20000; ++i) {
        uint32_t u = (uint32_t)(qt_uniform() * 4294967296.0);
        float f = qt_bits_f32(u), back;
        uint16_t h, h64;
        double lo, hi, d;
        if ((u & 0x7f800000u) == 0x7f800000u) continue;
        quarot_f32_to_bf16(&f, &h, 1);
        quarot_bf16_to_f32(&h, &back, 1);
        h64 = quarot_f64_to_bf16_1((double)f);
        bad += h != h64;
        /* the result is one of the two neighbours, the nearer one, ties to an even last bit */
        lo = (double)qt_bits_f32(u & 0xffff0000u);
        hi = (double)qt_bits_f32((u & 0xffff0000u) + 0x10000u);
        d = (double)f;
        /* IEEE overflow: beyond the largest finite value, the next neighbour is 2^128 (then Inf) */
        if (isinf(hi)) { double virt = hi > 0 ? ldexp(1.0, 128) : -ldexp(1.0, 128);
            if (fabs(d - lo) >= fabs(virt - d)) { bad += !isinf((double)back); continue; } }
        if (fabs(d - lo) < fabs(hi - d)) bad += (double)back != lo;
        else if (fabs(d - lo) > fabs(hi - d)) bad += (double)back != hi;
        else bad += (h & 1) != 0;
    }
    QT_EQ_INT(bad, 0);
    { float nan = qt_bits_f32(0x7f800001u); uint16_t h; quarot_f32_to_bf16(&nan, &h, 1); QT_CHECK((h & 0x7f80) == 0x7f80 && (h & 0x7f)); }
    { float big = qt_bits_f32(0x7f7fffffu); uint16_t h; quarot_f32_to_bf16(&big, &h, 1); QT_EQ_INT(h, 0x7f80); }
}

static void test_init_and_validate(void) {
    quarot_tensor t;
    float buf[24];
    int64_t ne[2] = {6, 4}, bad[2] = {0, 4}, huge[3] = {INT64_MAX / 2, 4, 1};
    QT_OK(quarot_tensor_init(&t, buf, QUAROT_DTYPE_F32, 2, ne));
    QT_EQ_INT(t.nb[0], 4);
    QT_EQ_INT(t.nb[1], 24);
    QT_EQ_INT(quarot_tensor_nrows(&t), 4);
    QT_EQ_INT(quarot_tensor_nelements(&t), 24);
    QT_EQ_INT(quarot_tensor_nbytes(&t), 96);
    QT_CHECK(quarot_tensor_is_contiguous(&t));
    QT_OK(quarot_tensor_validate(&t));
    QT_ERR(quarot_tensor_init(&t, buf, QUAROT_DTYPE_F32, 2, bad), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_tensor_init(&t, buf, QUAROT_DTYPE_F32, 3, huge), QUAROT_ERR_OVERFLOW);
    QT_ERR(quarot_tensor_init(&t, buf, QUAROT_DTYPE_F32, 0, ne), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_tensor_init(&t, buf, (quarot_dtype)77, 2, ne), QUAROT_ERR_UNSUPPORTED_DTYPE);
    QT_ERR(quarot_tensor_init(NULL, buf, QUAROT_DTYPE_F32, 2, ne), QUAROT_ERR_INVALID_ARGUMENT);
    /* hand-built views */
    QT_OK(quarot_tensor_init(&t, buf, QUAROT_DTYPE_F32, 2, ne));
    t.nb[1] = 16;                                   /* rows overlap */
    QT_ERR(quarot_tensor_validate(&t), QUAROT_ERR_SHAPE_MISMATCH);
    t.nb[1] = 24; t.nb[0] = 8;                      /* not row-contiguous */
    QT_ERR(quarot_tensor_validate(&t), QUAROT_ERR_SHAPE_MISMATCH);
    t.nb[0] = 4; t.data = NULL;
    QT_ERR(quarot_tensor_validate(&t), QUAROT_ERR_INVALID_ARGUMENT);
    t.data = buf; t.ne[1] = (int64_t)1 << 62; t.nb[1] = 24;
    QT_ERR(quarot_tensor_validate(&t), QUAROT_ERR_OVERFLOW);
    QT_EQ_INT(quarot_tensor_nbytes(&t), 0);
}

static void test_rows_strided(void) {
    /* a [3][2][5] f16 tensor viewed with padded rows: rows are 8 halves apart */
    uint16_t mem[3 * 2 * 8];
    quarot_tensor t;
    float in[5], out[5];
    double din[5], dout[5];
    int64_t r, i;
    memset(mem, 0xff, sizeof mem);
    memset(&t, 0, sizeof t);
    t.data = mem; t.dtype = QUAROT_DTYPE_F16;
    t.ne[0] = 5; t.ne[1] = 2; t.ne[2] = 3; t.ne[3] = 1;
    t.nb[0] = 2; t.nb[1] = 16; t.nb[2] = 32; t.nb[3] = 96;
    QT_OK(quarot_tensor_validate(&t));
    QT_CHECK(!quarot_tensor_is_contiguous(&t));
    QT_EQ_INT(quarot_tensor_nrows(&t), 6);
    for (r = 0; r < 6; ++r) {
        for (i = 0; i < 5; ++i) in[i] = (float)(r * 10 + i) * 0.5f;
        QT_OK(quarot_tensor_set_row_f32(&t, r, in));
    }
    for (r = 0; r < 6; ++r) {
        QT_OK(quarot_tensor_get_row_f32(&t, r, out));
        for (i = 0; i < 5; ++i) QT_CHECK(out[i] == (float)(r * 10 + i) * 0.5f);
        QT_CHECK(mem[r * 8 + 5] == 0xffff && mem[r * 8 + 7] == 0xffff);   /* padding untouched */
    }
    QT_ERR(quarot_tensor_get_row_f32(&t, 6, out), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_tensor_get_row_f32(&t, -1, out), QUAROT_ERR_INVALID_ARGUMENT);
    /* f64 rows in every dtype round once */
    {
        quarot_dtype dts[4] = {QUAROT_DTYPE_F32, QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16, QUAROT_DTYPE_F64};
        double store[20];
        int k;
        for (i = 0; i < 5; ++i) din[i] = 1.0 / 3.0 + (double)i;
        for (k = 0; k < 4; ++k) {
            int64_t ne[1] = {5};
            QT_OK(quarot_tensor_init(&t, store, dts[k], 1, ne));
            QT_OK(quarot_tensor_set_row_f64(&t, 0, din));
            QT_OK(quarot_tensor_get_row_f64(&t, 0, dout));
            for (i = 0; i < 5; ++i) {
                double tol = dts[k] == QUAROT_DTYPE_F64 ? 0 : dts[k] == QUAROT_DTYPE_F32 ? 3e-7 : dts[k] == QUAROT_DTYPE_F16 ? 2e-3 : 1.6e-2;
                QT_NEAR(dout[i], din[i], tol * fabs(din[i]));
            }
        }
    }
}

static void test_check_finite(void) {
    float f[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    uint16_t h[4] = {0x3c00, 0x7c00, 0, 0};
    quarot_tensor t;
    int64_t ne2[2] = {4, 2}, ne1[1] = {4}, bad;
    QT_OK(quarot_tensor_init(&t, f, QUAROT_DTYPE_F32, 2, ne2));
    QT_OK(quarot_tensor_check_finite(&t, &bad));
    QT_EQ_INT(bad, -1);
    f[6] = qt_bits_f32(0x7fc00000u);
    QT_ERR(quarot_tensor_check_finite(&t, &bad), QUAROT_ERR_NONFINITE);
    QT_EQ_INT(bad, 6);
    QT_OK(quarot_tensor_init(&t, h, QUAROT_DTYPE_F16, 1, ne1));
    QT_ERR(quarot_tensor_check_finite(&t, &bad), QUAROT_ERR_NONFINITE);
    QT_EQ_INT(bad, 1);
    h[1] = 0x7f80;   /* finite in f16, Inf as bf16 */
    t.dtype = QUAROT_DTYPE_BF16;
    QT_ERR(quarot_tensor_check_finite(&t, &bad), QUAROT_ERR_NONFINITE);
    QT_CHECK(strcmp(quarot_dtype_name(QUAROT_DTYPE_BF16), "bf16") == 0);
    QT_EQ_INT(quarot_dtype_size(QUAROT_DTYPE_F64), 8);
    QT_EQ_INT(quarot_dtype_size((quarot_dtype)42), 0);
}

/* Rows longer than the check's 256-element blocks (full blocks take a separate constant-count loop):
   two rows of 600 = 256 + 256 + 88, every dtype; a NaN / Inf planted at the start, middle and end
   of each block, the tail and the second row is the first one reported; the largest finite values
   (all-ones mantissa below an all-ones exponent) are not flagged. */
static void test_check_finite_long_rows(void) {
    static const quarot_dtype dts[4] = {QUAROT_DTYPE_F32, QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16, QUAROT_DTYPE_F64};
    static const int64_t at[9] = {0, 131, 255, 256, 400, 511, 512, 599, 600 + 300};
    const int64_t n = 600;
    unsigned char* buf = (unsigned char*)malloc(2 * 600 * 8);
    int d, k;
    QT_CHECK(buf != NULL);
    if (!buf) return;
    for (d = 0; d < 4; ++d) {
        const size_t es = quarot_dtype_size(dts[d]);
        int64_t ne[2], i, bad;
        quarot_tensor t;
        ne[0] = n;
        ne[1] = 2;
        QT_OK(quarot_tensor_init(&t, buf, dts[d], 2, ne));
        for (k = -1; k < 9; ++k) {
            for (i = 0; i < 2 * n; ++i) {   /* the largest finite value of the dtype everywhere ... */
                uint64_t v = es == 8 ? 0x7fefffffffffffffull : es == 4 ? 0xff7fffffu : dts[d] == QUAROT_DTYPE_F16 ? 0xfbffu : 0x7f7fu;
                if (i == (k >= 0 ? at[k] : -1))   /* ... but one NaN or -Inf */
                    v = es == 8 ? 0x7ff8000000000000ull : es == 4 ? (k % 2 ? 0xff800000u : 0x7fc00001u)
                                : dts[d] == QUAROT_DTYPE_F16 ? (k % 2 ? 0xfc00u : 0x7e00u) : (k % 2 ? 0xff80u : 0x7fc1u);
                memcpy(buf + (size_t)i * es, &v, es);   /* little-endian: the low es bytes */
            }
            if (k < 0) {
                QT_OK(quarot_tensor_check_finite(&t, &bad));
                QT_EQ_INT(bad, -1);
            } else {
                QT_ERR(quarot_tensor_check_finite(&t, &bad), QUAROT_ERR_NONFINITE);
                QT_EQ_INT(bad, at[k]);
            }
        }
    }
    free(buf);
}

int main(void) {
    QT_RUN(test_f16_roundtrip_all);
    QT_RUN(test_f16_rounding_against_brute_force);
    QT_RUN(test_bf16);
    QT_RUN(test_init_and_validate);
    QT_RUN(test_rows_strided);
    QT_RUN(test_check_finite);
    QT_RUN(test_check_finite_long_rows);
    return qt_finish("test_tensor");
}
