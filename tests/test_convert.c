/* quarot_convert: every compiled ISA against the scalar specification (QUAROT_ISA_REF) bit for bit,
   and the specification against independent definitions:
     - f16 -> f32 and bf16 -> f32 on all 65536 halves (decoded by the formula / by bits << 16);
     - f32 -> f16 / bf16 on every half's value, its f32 neighbours (+-1, +-2 ulps), every midpoint
       between two adjacent halves and its neighbours (ties to even), f32 subnormals, the overflow
       thresholds, Inf and NaN payloads, plus random bit patterns;
     - f64 -> f16 / bf16 (rounded once) against a textbook single rounding by scaling (the library's
       former algorithm, kept here as the oracle) on doubles at and next to every midpoint, where
       rounding through f32 to nearest would round twice;
     - f32 <-> f64, f16 / bf16 -> f64, f16 <-> bf16, odd lengths and unaligned buffers. */
#include "quarot.h"
#include "qt.h"

#include <stdint.h>
#include <stdlib.h>

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Oracle: round a double once to a format with exp_bits / man_bits by scaling to the target's unit
   in the last place (exact), floor, and a round-half-even decision. NaN -> sign | quiet bit. */
static uint16_t oracle_round(double x, int exp_bits, int man_bits) {
    uint64_t b;
    uint32_t sign, exp_all = (1u << exp_bits) - 1u;
    int bias = (1 << (exp_bits - 1)) - 1, e, ulp_exp;
    double a, m, fl, diff;
    uint64_t F;
    memcpy(&b, &x, 8);
    sign = (uint32_t)(b >> 63) << (exp_bits + man_bits);
    a = fabs(x);
    if (a != a) return (uint16_t)(sign | (exp_all << man_bits) | (1u << (man_bits - 1)));
    if (a > 1.7976931348623157e308) return (uint16_t)(sign | (exp_all << man_bits));
    if (a == 0.0 || ((b >> 52) & 0x7ffu) == 0) return (uint16_t)sign;
    e = (int)((b >> 52) & 0x7ffu) - 1023;
    ulp_exp = (e >= 1 - bias ? e : 1 - bias) - man_bits;
    if (e > bias + 1) return (uint16_t)(sign | (exp_all << man_bits));
    m = ldexp(a, -ulp_exp);
    fl = floor(m);
    diff = m - fl;
    F = (uint64_t)fl;
    if (diff > 0.5 || (diff == 0.5 && (F & 1u))) ++F;
    if (F >= (2ull << man_bits)) { F >>= 1; ++ulp_exp; }
    if (F >= (1ull << man_bits)) {
        int biased = ulp_exp + man_bits + bias;
        if (biased >= (int)exp_all) return (uint16_t)(sign | (exp_all << man_bits));
        return (uint16_t)(sign | ((uint32_t)biased << man_bits) | (uint32_t)(F - (1ull << man_bits)));
    }
    return (uint16_t)(sign | (uint32_t)F);
}

static const quarot_isa k_isas[] = {QUAROT_ISA_REF, QUAROT_ISA_SSE2, QUAROT_ISA_AVX2, QUAROT_ISA_AVX512, QUAROT_ISA_NEON};
#define N_ISAS 5

/* f32 test set for half-precision targets: values, neighbours, midpoints (the tie cases). */
static float* f32_edge_set(int64_t* n_out) {
    int64_t cap = 65536 * 24 + 4096, n = 0, i;
    float* v = (float*)malloc((size_t)cap * sizeof *v);
    uint32_t h;
    static const uint32_t specials[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x7f7fffffu, 0xff7fffffu,
        0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xffc00001u, 0xff800001u,
        0x7f802000u, 0x7fa00000u, 0x7f801fffu, 0x33000000u, 0x33000001u, 0x32ffffffu, 0xb3000000u,
        0x33800000u, 0x33c00000u, 0x38800000u, 0x387fffffu, 0x477fe000u, 0x477fefffu, 0x477ff000u,
        0x477ff001u, 0x47800000u, 0xc77ff000u, 0x7f7f8000u, 0x7f7f7fffu, 0x7f7f8001u, 0x00008000u};
    QT_CHECK(v != NULL);
    if (!v) return NULL;
    for (i = 0; i < (int64_t)(sizeof specials / sizeof specials[0]); ++i) v[n++] = qt_bits_f32(specials[i]);
    for (h = 0; h < 65536; ++h) {
        double a = qt_f16_value((uint16_t)h), b;
        uint32_t u, d;
        if (a != a || isinf(a)) continue;
        u = f32_bits((float)a);
        for (d = 1; d <= 2; ++d) { v[n++] = qt_bits_f32(u + d); v[n++] = qt_bits_f32(u - d); }
        v[n++] = (float)a;
        /* midpoint to the next half of larger magnitude (exact in f32), and its neighbours */
        if ((h & 0x7fff) < 0x7bff) b = qt_f16_value((uint16_t)(h + 1));
        else b = (h & 0x8000) ? -65536.0 : 65536.0;   /* the overflow threshold 65520 is the midpoint to 2^16 */
        u = f32_bits((float)((a + b) / 2));
        v[n++] = qt_bits_f32(u); v[n++] = qt_bits_f32(u + 1); v[n++] = qt_bits_f32(u - 1);
        /* bf16 neighbours of the same bit pattern: the value, the midpoint up, +-1 */
        u = h << 16;
        v[n++] = qt_bits_f32(u | 0x8000u); v[n++] = qt_bits_f32(u | 0x8001u); v[n++] = qt_bits_f32(u | 0x7fffu);
        v[n++] = qt_bits_f32(u | 0x0001u); v[n++] = qt_bits_f32(u | 0xffffu);
    }
    qt_seed(17);
    for (i = 0; i < 4000; ++i) v[n++] = qt_bits_f32((uint32_t)(qt_uniform() * 4294967296.0));
    QT_CHECK(n <= cap);
    *n_out = n;
    return v;
}

static void test_half_to_f32_all(void) {
    uint16_t in[65536 + 3];
    float want[65536], got[65536 + 3];
    int i, k, bad_def = 0, bad_isa = 0, isas = 0;
    for (i = 0; i < 65536; ++i) in[i] = (uint16_t)i;
    /* f16 by definition */
    QT_OK(quarot_convert(want, QUAROT_DTYPE_F32, in, QUAROT_DTYPE_F16, 65536, QUAROT_ISA_REF));
    for (i = 0; i < 65536; ++i) {
        double d = qt_f16_value((uint16_t)i);
        if (d != d) bad_def += !(want[i] != want[i]) || ((f32_bits(want[i]) >> 13) & 0x3ffu) != ((uint32_t)(i & 0x3ff) | 0x200u);   /* quiet, payload kept */
        else bad_def += (double)want[i] != d || (f32_bits(want[i]) >> 31) != (uint32_t)(i >> 15);
    }
    for (k = 0; k < N_ISAS; ++k) {
        if (!quarot_isa_compiled(k_isas[k])) { QT_ERR(quarot_convert(got, QUAROT_DTYPE_F32, in, QUAROT_DTYPE_F16, 1, k_isas[k]), QUAROT_ERR_UNSUPPORTED); continue; }
        ++isas;
        QT_OK(quarot_convert(got, QUAROT_DTYPE_F32, in, QUAROT_DTYPE_F16, 65536, k_isas[k]));
        bad_isa += memcmp(got, want, sizeof want) != 0;
        /* unaligned source and destination (one byte off), every tail length */
        {
            char* src = (char*)malloc(2 * 65536 + 1);
            char* dst = (char*)malloc(4 * 65536 + 1);
            QT_CHECK(src && dst);
            if (src && dst) {
                memcpy(src + 1, in, 2 * 65536);
                QT_OK(quarot_convert(dst + 1, QUAROT_DTYPE_F32, src + 1, QUAROT_DTYPE_F16, 65536 - 7, k_isas[k]));
                bad_isa += memcmp(dst + 1, want, 4 * (65536 - 7)) != 0;
            }
            free(src);
            free(dst);
        }
    }
    QT_EQ_INT(bad_def, 0);
    QT_EQ_INT(bad_isa, 0);
    /* bf16: bits << 16, every ISA */
    bad_def = bad_isa = 0;
    QT_OK(quarot_convert(want, QUAROT_DTYPE_F32, in, QUAROT_DTYPE_BF16, 65536, QUAROT_ISA_REF));
    for (i = 0; i < 65536; ++i) bad_def += f32_bits(want[i]) != (uint32_t)i << 16;
    for (k = 0; k < N_ISAS; ++k) {
        if (!quarot_isa_compiled(k_isas[k])) continue;
        QT_OK(quarot_convert(got, QUAROT_DTYPE_F32, in, QUAROT_DTYPE_BF16, 65536, k_isas[k]));
        bad_isa += memcmp(got, want, sizeof want) != 0;
    }
    QT_EQ_INT(bad_def, 0);
    QT_EQ_INT(bad_isa, 0);
    QT_CHECK(isas >= 1);
}

/* f32 -> f16 / bf16: REF against the oracle, every ISA against REF (all lengths' tails). */
static void test_f32_to_half(void) {
    int64_t n = 0, i;
    float* v = f32_edge_set(&n);
    uint16_t* want = (uint16_t*)malloc((size_t)n * 2);
    uint16_t* got = (uint16_t*)malloc((size_t)n * 2 + 2);
    int d, k, bad_def[2] = {0, 0}, bad_isa[2] = {0, 0};
    QT_CHECK(v && want && got);
    if (!v || !want || !got) { free(v); free(want); free(got); return; }
    for (d = 0; d < 2; ++d) {
        const quarot_dtype dt = d ? QUAROT_DTYPE_BF16 : QUAROT_DTYPE_F16;
        QT_OK(quarot_convert(want, dt, v, QUAROT_DTYPE_F32, n, QUAROT_ISA_REF));
        for (i = 0; i < n; ++i) {
            uint32_t u = f32_bits(v[i]);
            if ((u & 0x7fffffffu) > 0x7f800000u) {   /* NaN: quiet, sign and top payload bits kept */
                uint16_t w = d ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
                bad_def[d] += want[i] != w;
            } else {
                bad_def[d] += want[i] != oracle_round((double)v[i], d ? 8 : 5, d ? 7 : 10);
            }
        }
        for (k = 0; k < N_ISAS; ++k) {
            if (!quarot_isa_compiled(k_isas[k])) continue;
            QT_OK(quarot_convert(got, dt, v, QUAROT_DTYPE_F32, n, k_isas[k]));
            bad_isa[d] += memcmp(got, want, (size_t)n * 2) != 0;
            /* unaligned output, short lengths (tails of every vector width) */
            for (i = 0; i < 40; ++i) {
                memset(got, 0xAB, (size_t)n * 2 + 2);
                QT_OK(quarot_convert((char*)got + 1, dt, v + 100, QUAROT_DTYPE_F32, i, k_isas[k]));
                bad_isa[d] += memcmp((char*)got + 1, want + 100, (size_t)i * 2) != 0;
                bad_isa[d] += ((unsigned char*)got)[1 + 2 * i] != 0xAB;   /* nothing written past n */
            }
        }
    }
    QT_EQ_INT(bad_def[0], 0);
    QT_EQ_INT(bad_def[1], 0);
    QT_EQ_INT(bad_isa[0], 0);
    QT_EQ_INT(bad_isa[1], 0);
    free(v);
    free(want);
    free(got);
}

/* f64 -> f16 / bf16, rounded once: doubles at, just above and just below every midpoint (a
   round-to-nearest f32 step would land on the midpoint and tie the wrong way), plus specials. */
static void test_f64_to_half(void) {
    int64_t cap = 65536 * 12 + 64, n = 0, i;
    double* v = (double*)malloc((size_t)cap * sizeof *v);
    uint16_t* want = (uint16_t*)malloc((size_t)cap * 2);
    uint16_t* got = (uint16_t*)malloc((size_t)cap * 2);
    int d, k, h, bad_def[2] = {0, 0}, bad_isa[2] = {0, 0}, bad_one = 0;
    static const double specials[] = {0.0, -0.0, 1e-320, -4.9e-324, 1e-300, 3.4028234663852886e38, 3.5e38, -1e300,
                                      1.7976931348623157e308, 65504.0, 65519.999999, 65520.0, 65520.000001, 2.9802322387695312e-08,
                                      2.98023223876953125e-08 * (1 + 1e-15), 5.960464477539063e-08, 1.0 + 1.0 / 4096};
    uint64_t nanbits[] = {0x7ff8000000000000ull, 0x7ff0000000000001ull, 0xfff8000000000123ull, 0x7fffffffffffffffull,
                          0x7ff0000020000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull};
    QT_CHECK(v && want && got);
    if (!v || !want || !got) { free(v); free(want); free(got); return; }
    for (i = 0; i < (int64_t)(sizeof specials / sizeof specials[0]); ++i) { v[n++] = specials[i]; v[n++] = -specials[i]; }
    for (i = 0; i < (int64_t)(sizeof nanbits / sizeof nanbits[0]); ++i) memcpy(&v[n++], &nanbits[i], 8);
    for (h = 0; h < 65536; ++h) {
        double a = qt_f16_value((uint16_t)h), b, mid, bfa, bfb;
        uint32_t u = (uint32_t)h << 16;
        if (a != a || isinf(a)) continue;
        b = (h & 0x7fff) < 0x7bff ? qt_f16_value((uint16_t)(h + 1)) : ((h & 0x8000) ? -65536.0 : 65536.0);
        mid = (a + b) / 2;
        v[n++] = mid; v[n++] = nextafter(mid, 2 * b); v[n++] = nextafter(mid, a - (b - a));
        v[n++] = mid * (1 + 1e-9); v[n++] = a;
        /* bf16: the midpoint between bit patterns u and u + 0x10000 and its double neighbours */
        bfa = (double)qt_bits_f32(u);
        if ((u & 0x7f800000u) == 0x7f800000u) continue;
        bfb = (double)qt_bits_f32(u + 0x8000u);   /* exactly the midpoint (f32 has the bits) */
        v[n++] = bfb; v[n++] = nextafter(bfb, 4 * bfb); v[n++] = nextafter(bfb, 0.0); v[n++] = bfa;
        v[n++] = bfa + (bfb - bfa) * 0.999999;
    }
    QT_CHECK(n <= cap);
    for (d = 0; d < 2; ++d) {
        const quarot_dtype dt = d ? QUAROT_DTYPE_BF16 : QUAROT_DTYPE_F16;
        QT_OK(quarot_convert(want, dt, v, QUAROT_DTYPE_F64, n, QUAROT_ISA_REF));
        for (i = 0; i < n; ++i) {
            uint16_t o = oracle_round(v[i], d ? 8 : 5, d ? 7 : 10);
            bad_def[d] += want[i] != o;
            bad_one += (d ? quarot_f64_to_bf16_1(v[i]) : quarot_f64_to_f16_1(v[i])) != o;
        }
        for (k = 0; k < N_ISAS; ++k) {
            if (!quarot_isa_compiled(k_isas[k])) continue;
            QT_OK(quarot_convert(got, dt, v, QUAROT_DTYPE_F64, n, k_isas[k]));
            bad_isa[d] += memcmp(got, want, (size_t)n * 2) != 0;
            for (i = 0; i < 33; ++i) {   /* tails */
                QT_OK(quarot_convert(got, dt, v + 1000 + i, QUAROT_DTYPE_F64, i, k_isas[k]));
                bad_isa[d] += memcmp(got, want + 1000 + i, (size_t)i * 2) != 0;
            }
        }
    }
    QT_EQ_INT(bad_def[0], 0);
    QT_EQ_INT(bad_def[1], 0);
    QT_EQ_INT(bad_isa[0], 0);
    QT_EQ_INT(bad_isa[1], 0);
    QT_EQ_INT(bad_one, 0);
    free(v);
    free(want);
    free(got);
}

/* The other pairs: f32 <-> f64 (plain casts), f16/bf16 -> f64 (exact), f16 <-> bf16, copies. */
static void test_other_pairs(void) {
    static const quarot_dtype dts[] = {QUAROT_DTYPE_F32, QUAROT_DTYPE_F64, QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    enum { N = 1031 };
    double src[N];
    unsigned char in[8 * N], want[8 * N + 8], got[8 * N + 8];
    int a, b, k, i, bad = 0;
    qt_seed(3);
    for (i = 0; i < N; ++i) src[i] = ldexp(qt_uniform() * 2 - 1, (int)(qt_uniform() * 60) - 30);
    src[0] = NAN; src[1] = INFINITY; src[2] = -0.0; src[3] = 1e300;
    for (a = 0; a < 4; ++a) {
        QT_OK(quarot_convert(in, dts[a], src, QUAROT_DTYPE_F64, N, QUAROT_ISA_REF));
        for (b = 0; b < 4; ++b) {
            QT_OK(quarot_convert(want, dts[b], in, dts[a], N, QUAROT_ISA_REF));
            for (k = 0; k < N_ISAS; ++k) {
                if (!quarot_isa_compiled(k_isas[k])) continue;
                QT_OK(quarot_convert(got, dts[b], in, dts[a], N, k_isas[k]));
                bad += memcmp(got, want, N * quarot_dtype_size(dts[b])) != 0;
            }
        }
    }
    QT_EQ_INT(bad, 0);
    /* f32 -> f64 -> f32 is the identity; f16 -> f64 equals f16 -> f32 widened */
    {
        float f[N], f2[N];
        double dd[N];
        for (i = 0; i < N; ++i) f[i] = (float)src[i];
        QT_OK(quarot_convert(dd, QUAROT_DTYPE_F64, f, QUAROT_DTYPE_F32, N, QUAROT_ISA_DEFAULT));
        QT_OK(quarot_convert(f2, QUAROT_DTYPE_F32, dd, QUAROT_DTYPE_F64, N, QUAROT_ISA_DEFAULT));
        QT_CHECK(memcmp(f, f2, sizeof f) == 0);
    }
    QT_ERR(quarot_convert(got, (quarot_dtype)9, in, QUAROT_DTYPE_F32, 1, QUAROT_ISA_DEFAULT), QUAROT_ERR_UNSUPPORTED_DTYPE);
    QT_ERR(quarot_convert(NULL, QUAROT_DTYPE_F32, in, QUAROT_DTYPE_F16, 1, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_convert(got, QUAROT_DTYPE_F32, in, QUAROT_DTYPE_F16, -1, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(quarot_convert(NULL, QUAROT_DTYPE_F32, NULL, QUAROT_DTYPE_F16, 0, QUAROT_ISA_DEFAULT));
}

int main(void) {
    printf("ISAs compiled: %s\n", quarot_simd_name());
    QT_RUN(test_half_to_f32_all);
    QT_RUN(test_f32_to_half);
    QT_RUN(test_f64_to_half);
    QT_RUN(test_other_pairs);
    return qt_finish("test_convert");
}
