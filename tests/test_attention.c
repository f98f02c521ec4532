/* Attention kernels (>>attention): every compiled ISA against the scalar _ref kernels bit for bit
   (memcmp), and the _ref kernels against independent truth.
   - exp: REF against libm's expf on a dense sweep of [-104, 0] (every 127th float, every 1999th
     under QT_QUICK, plus every float within 3000 of -104, of ln 2^-150 and of 0): at most 1 ulp
     apart everywhere; the count of exact agreements is printed. Against x86-64 glibc's FMA expf
     (where the CPU has FMA and AVX2) every float but one agrees exactly: a scan of all floats of
     [-104, 0] finds the one, -0x1.f8cbb2p+5, one ulp off, and the test checks it. The special cases (NaN keeps its
     bits, below -104 -> +0, above ln FLT_MAX -> +Inf) exactly.
   - softmax: rows of length 1..40, 1000 and 4097 at odd offsets, with scores far below the row's
     maximum (under -104 after the shift, -FLT_MAX, -Inf): ISAs against REF by memcmp; REF against
     a softmax in double within p_j (4u + u |s_j - m| + sum_k p_k u |s_k - m|) + 2^-149 per element
     (u = 2^-24: the shift's rounding moves e_j and the sum; the exponential, the reciprocal and the
     product round by u each), and the row's sum within the sum of those of 1; NaN or +Inf anywhere
     makes the whole row NaN on every ISA.
   - KV dequantization: 4 and 8 bits, head_dim 2..48 (tails of the 4-, 8- and 16-wide vectors), plain and
     transposed, odd row strides, with and without zeros: ISAs against REF by memcmp over the whole
     output buffer (nothing outside the rows written), REF against the formula on codes the test
     packs itself from the documented layout.
   - direct attention: head_dim 1, 5, 8, 16, 32, 48, nq 1..4, n0 up to 100, odd strides: out and the
     score scratch against REF by memcmp; REF against attention in double within the first-order
     bound derived below (test_direct's comment); a NaN query makes that query's outputs NaN. */
#include "quarot.h"
#include "qt.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const quarot_isa all_isas[] = {QUAROT_ISA_REF, QUAROT_ISA_SSE2, QUAROT_ISA_AVX2, QUAROT_ISA_AVX512, QUAROT_ISA_NEON};
#define N_ISAS ((int)(sizeof all_isas / sizeof all_isas[0]))

static float f32_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bits_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Distance in units in the last place between two finite floats of the same sign (or zero). */
static int64_t ulp_dist(float a, float b) {
    int64_t ia = (int64_t)bits_f32(fabsf(a)), ib = (int64_t)bits_f32(fabsf(b));
    return ia > ib ? ia - ib : ib - ia;
}

static void fill_scores(float* s, int64_t n, double spread) {
    int64_t i;
    for (i = 0; i < n; ++i) s[i] = (float)(spread * qt_normal());
}

/* ---------------------------------------------------------------------------------------------- */

static void test_exp_isas(void) {
    static const int64_t lens[] = {0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 40, 1000, 4097};
    float* x = (float*)malloc(4200 * sizeof(float));
    float* y0 = (float*)malloc(4200 * sizeof(float));
    float* y1 = (float*)malloc(4200 * sizeof(float));
    size_t li;
    int a, off, i;
    qt_seed(3);
    for (li = 0; li < sizeof lens / sizeof lens[0]; ++li)
        for (off = 0; off < 3; ++off) {
            int64_t n = lens[li];
            for (i = 0; i < n; ++i) {
                double u = qt_uniform();
                /* mostly softmax arguments, some beyond both limits, and the edge values */
                x[off + i] = u < 0.7 ? (float)(-110.0 * qt_uniform()) : u < 0.85 ? (float)(200.0 * qt_normal()) : 0.0f;
            }
            if (n >= 12) {
                x[off + 0] = f32_bits(0x7fc00001u);            /* quiet NaN with a payload */
                x[off + 1] = f32_bits(0xffa00000u);            /* negative NaN, signalling pattern */
                x[off + 2] = -INFINITY;
                x[off + 3] = INFINITY;
                x[off + 4] = -0.0f;
                x[off + 5] = -104.0f;
                x[off + 6] = nextafterf(-104.0f, 0.0f);
                x[off + 7] = nextafterf(-104.0f, -200.0f);
                x[off + 8] = 0x1.62e42ep6f;
                x[off + 9] = nextafterf(0x1.62e42ep6f, 100.0f);
                x[off + 10] = f32_bits(0x80000001u);           /* the smallest negative subnormal */
                x[off + 11] = -FLT_MAX;
            }
            QT_OK(quarot_attention_exp_f32(x + off, y0, n, QUAROT_ISA_REF));
            for (i = 0; i < n; ++i) {
                float e = quarot_attention_exp1(x[off + i]);
                QT_CHECKF(memcmp(&e, y0 + i, 4) == 0, "exp REF element %d differs from quarot_attention_exp1", i);
            }
            for (a = 0; a < N_ISAS; ++a) {
                if (!quarot_isa_compiled(all_isas[a])) continue;
                memset(y1, 0x55, 4200 * sizeof(float));
                QT_OK(quarot_attention_exp_f32(x + off, y1, n, all_isas[a]));
                QT_CHECKF(memcmp(y0, y1, (size_t)n * sizeof(float)) == 0 && bits_f32(y1[n]) == 0x55555555u,
                          "exp %s n %lld offset %d differs from REF", quarot_isa_name(all_isas[a]), (long long)n, off);
                /* in place */
                memcpy(y1, x + off, (size_t)n * sizeof(float));
                QT_OK(quarot_attention_exp_f32(y1, y1, n, all_isas[a]));
                QT_CHECKF(memcmp(y0, y1, (size_t)n * sizeof(float)) == 0, "exp %s in place n %lld differs",
                          quarot_isa_name(all_isas[a]), (long long)n);
            }
        }
    /* the special cases, exactly */
    {
        float nan1 = f32_bits(0x7fc12345u), e = quarot_attention_exp1(nan1);
        QT_CHECK(bits_f32(e) == 0x7fc12345u);
        QT_CHECK(bits_f32(quarot_attention_exp1(nextafterf(-104.0f, -200.0f))) == 0u);
        QT_CHECK(bits_f32(quarot_attention_exp1(-INFINITY)) == 0u);
        QT_CHECK(quarot_attention_exp1(INFINITY) == INFINITY);
        QT_CHECK(quarot_attention_exp1(nextafterf(0x1.62e42ep6f, 100.0f)) == INFINITY);
        QT_CHECK(quarot_attention_exp1(0x1.62e42ep6f) < INFINITY);
        QT_CHECK(quarot_attention_exp1(0.0f) == 1.0f && quarot_attention_exp1(-0.0f) == 1.0f);
    }
    free(x); free(y0); free(y1);
}

/* Whether libm's expf is x86-64 glibc's FMA build (glibc picks it where the CPU has FMA and AVX2), the
   one whose bits the exponential reproduces: all but one float of [-104, 0] (EXP_ODD, one ulp off). */
#define EXP_ODD (-0x1.f8cbb2p+5f)
static int libm_is_glibc_fma(void) {
#if defined(__GLIBC__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* One float: its exp against libm's; returns the ulp distance (finite results of equal sign). */
static int64_t exp_vs_libm(float x, int64_t* exact, int64_t* total) {
    float a = quarot_attention_exp1(x), b = expf(x);
    ++*total;
    if (bits_f32(a) == bits_f32(b)) { ++*exact; return 0; }
    if (!(a >= 0.0f) || !(b >= 0.0f)) return INT64_MAX;
    return ulp_dist(a, b);
}

static void test_exp_libm(void) {
    const uint32_t lo = bits_f32(-104.0f), stride = qt_quick() ? 1999u : 127u;
    const float centers[3] = {-104.0f, -0x1.9fe368p6f, -0.0f};   /* -104, ln 2^-150, 0 */
    int64_t exact = 0, total = 0, worst = 0, d;
    float worst_x = 0.0f, odd = EXP_ODD;
    uint32_t u;
    int c, k;
    /* negative floats have bits 0x80000000 (-0) up to lo (-104) */
    for (u = 0x80000000u; u <= lo; u += stride) {
        d = exp_vs_libm(f32_bits(u), &exact, &total);
        if (d > worst) { worst = d; worst_x = f32_bits(u); }
    }
    for (c = 0; c < 3; ++c)
        for (k = -3000; k <= 3000; ++k) {
            uint32_t b = bits_f32(centers[c]);
            if ((int64_t)b + k < (int64_t)0x80000000u || (int64_t)b + k > (int64_t)lo) continue;
            d = exp_vs_libm(f32_bits((uint32_t)((int64_t)b + k)), &exact, &total);
            if (d > worst) { worst = d; worst_x = f32_bits((uint32_t)((int64_t)b + k)); }
        }
    d = exp_vs_libm(odd, &exact, &total);
    if (d > worst) { worst = d; worst_x = odd; }
    printf("    exp vs libm expf on [-104, 0]: %lld of %lld floats equal, at most %lld ulp apart (at %a)\n",
           (long long)exact, (long long)total, (long long)worst, (double)worst_x);
    QT_CHECKF(worst <= 1, "exp: %lld ulp from expf at %a", (long long)worst, (double)worst_x);
    if (libm_is_glibc_fma()) {
        QT_CHECKF(exact == total - 1 && d == 1, "exp: %lld of %lld floats differ from glibc's FMA expf (1 expected, at %a)",
                  (long long)(total - exact), (long long)total, (double)odd);
    }
}

/* ---------------------------------------------------------------------------------------------- */

/* softmax in double of s[0..n-1] (finite) into p, and the float kernel's error bound per element
   into tol: the shift s_j - m rounds by u |s_j - m| (u = 2^-24), which moves e_j by that relative
   amount and the sum by the p-weighted mean of it; the exponential, the reciprocal and the product
   round by u each, the double sum by far less (4u covers them); subnormal results add 2^-149. */
static void softmax_f64(const float* s, int64_t n, double* p, double* tol) {
    const double u = 0x1p-24;
    double mx = s[0], sum = 0.0, mean = 0.0;
    int64_t j;
    for (j = 1; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
    for (j = 0; j < n; ++j) sum += (p[j] = exp((double)s[j] - mx));
    for (j = 0; j < n; ++j) p[j] /= sum;
    for (j = 0; j < n; ++j)
        if (p[j] > 0.0) mean += p[j] * u * fabs((double)s[j] - mx);
    for (j = 0; j < n; ++j) tol[j] = (p[j] > 0.0 ? p[j] * (4.0 * u + u * fabs((double)s[j] - mx) + mean) : 0.0) + 0x1p-149;
}

static void test_softmax(void) {
    int64_t lens[48];
    int nl = 0, li, off, a, kind;
    float* s0 = (float*)malloc(4200 * sizeof(float));
    float* s1 = (float*)malloc(4200 * sizeof(float));
    float* in = (float*)malloc(4200 * sizeof(float));
    double* p = (double*)malloc(4200 * sizeof(double));
    double* tol = (double*)malloc(4200 * sizeof(double));
    for (li = 1; li <= 40; ++li) lens[nl++] = li;
    lens[nl++] = 1000;
    lens[nl++] = 4097;
    qt_seed(7);
    for (li = 0; li < nl; ++li)
        for (kind = 0; kind < 3; ++kind)
            for (off = 0; off < 3; off += 2) {
                int64_t n = lens[li], j;
                double sum = 0.0, sum_tol = 0.0, worst = 0.0;
                /* 0: N(0, 3) scores; 1: N(0, 60) (many below -104 after the shift); 2: with -FLT_MAX and -Inf */
                fill_scores(in + off, n, kind == 1 ? 60.0 : 3.0);
                if (kind == 2) {
                    for (j = 0; j < n; j += 3) in[off + j] = j % 2 ? -FLT_MAX : -INFINITY;
                    if (n > 1) in[off + n - 1] = 1.5f;   /* one finite score at least */
                }
                memcpy(s0 + off, in + off, (size_t)n * sizeof(float));
                QT_OK(quarot_attention_softmax_f32(s0 + off, n, QUAROT_ISA_REF));
                for (a = 0; a < N_ISAS; ++a) {
                    if (!quarot_isa_compiled(all_isas[a]) || all_isas[a] == QUAROT_ISA_REF) continue;
                    memcpy(s1 + off, in + off, (size_t)n * sizeof(float));
                    QT_OK(quarot_attention_softmax_f32(s1 + off, n, all_isas[a]));
                    QT_CHECKF(memcmp(s0 + off, s1 + off, (size_t)n * sizeof(float)) == 0,
                              "softmax %s n %lld kind %d offset %d differs from REF", quarot_isa_name(all_isas[a]),
                              (long long)n, kind, off);
                }
                if (kind == 2 && n == 1) continue;   /* a lone -Inf: NaN, checked below */
                softmax_f64(in + off, n, p, tol);
                for (j = 0; j < n; ++j) {
                    double e = fabs((double)s0[off + j] - p[j]);
                    sum += (double)s0[off + j];
                    sum_tol += tol[j];
                    if (e > tol[j] && e > worst) worst = e;
                }
                QT_CHECKF(worst == 0.0, "softmax n %lld kind %d: element off the double softmax by %.3g", (long long)n,
                          kind, worst);
                QT_CHECKF(fabs(sum - 1.0) <= sum_tol, "softmax n %lld kind %d: sum %.17g (bound %.3g)", (long long)n,
                          kind, sum, sum_tol);
            }
    /* n = 1 is 1; equal scores give f32(1/n) each */
    s0[0] = -123.0f;
    QT_OK(quarot_attention_softmax_f32(s0, 1, QUAROT_ISA_DEFAULT));
    QT_CHECK(s0[0] == 1.0f);
    for (a = 0; a < 37; ++a) s0[a] = 2.5f;
    QT_OK(quarot_attention_softmax_f32(s0, 37, QUAROT_ISA_DEFAULT));
    for (a = 0; a < 37; ++a) QT_CHECK(s0[a] == (float)(1.0 / 37.0));
    /* NaN (first, in a 16-block, in the tail) or +Inf anywhere: the whole row NaN, every ISA */
    {
        static const int64_t nl2[] = {1, 5, 16, 37, 1000};
        size_t q;
        int w;
        for (q = 0; q < sizeof nl2 / sizeof nl2[0]; ++q)
            for (w = 0; w < 4; ++w) {
                int64_t n = nl2[q], pos = w == 0 ? 0 : w == 1 ? n / 2 : n - 1, j;
                for (a = 0; a < N_ISAS; ++a) {
                    int nan_all = 1;
                    if (!quarot_isa_compiled(all_isas[a])) continue;
                    fill_scores(s1, n, 3.0);
                    s1[pos] = w == 3 ? INFINITY : f32_bits(0x7fc00007u);
                    QT_OK(quarot_attention_softmax_f32(s1, n, all_isas[a]));
                    for (j = 0; j < n; ++j) nan_all &= s1[j] != s1[j];
                    QT_CHECKF(nan_all, "softmax %s n %lld: %s at %lld did not make the row NaN", quarot_isa_name(all_isas[a]),
                              (long long)n, w == 3 ? "+Inf" : "NaN", (long long)pos);
                }
            }
        /* a row of -Inf only: -Inf - -Inf is NaN */
        for (a = 0; a < 20; ++a) s1[a] = -INFINITY;
        QT_OK(quarot_attention_softmax_f32(s1, 20, QUAROT_ISA_DEFAULT));
        QT_CHECK(s1[0] != s1[0] && s1[19] != s1[19]);
    }
    free(s0); free(s1); free(in); free(p); free(tol);
}

/* ---------------------------------------------------------------------------------------------- */

static void test_kv_dequant(void) {
    static const int64_t hds[] = {1, 2, 3, 6, 8, 16, 17, 18, 32, 48};
    static const int64_t ns[] = {1, 2, 5, 16, 40, 300};
    const int64_t ldz = 3;
    size_t hi, ni;
    int bits, a, tr, withz;
    qt_seed(9);
    for (bits = 4; bits <= 8; bits += 4)
        for (hi = 0; hi < sizeof hds / sizeof hds[0]; ++hi)
            for (ni = 0; ni < sizeof ns / sizeof ns[0]; ++ni) {
                int64_t hd = hds[hi], n = ns[ni], rb = bits == 8 ? hd : hd / 2, ldc = rb + 3, p, j;
                int64_t cap = n * (hd + 3) > hd * (n + 5) ? n * (hd + 3) : hd * (n + 5);
                uint8_t* codes;
                int8_t* c;
                float *sc, *zp, *o0, *o1;
                if (bits == 4 && hd % 2) continue;
                codes = (uint8_t*)malloc((size_t)(n * ldc));
                c = (int8_t*)malloc((size_t)(n * hd));
                sc = (float*)malloc((size_t)(n * ldz) * sizeof(float));
                zp = (float*)malloc((size_t)(n * ldz) * sizeof(float));
                for (p = 0; p < n * ldc; ++p) codes[p] = (uint8_t)(qt_uniform() * 256.0);   /* padding too */
                for (p = 0; p < n; ++p) {
                    for (j = 0; j < hd; ++j) {
                        int lim = bits == 8 ? 128 : 8;
                        int v = (int)(qt_uniform() * 2 * lim) - lim;
                        if (p == 0) v = j % 2 ? lim - 1 : -lim;   /* the extreme codes */
                        c[p * hd + j] = (int8_t)v;
                        if (bits == 8) {
                            codes[p * ldc + j] = (uint8_t)(v + 128);
                        } else {
                            uint8_t* b = codes + p * ldc + j / 2;
                            if (j % 2) *b = (uint8_t)((*b & 15) | ((v + 8) << 4));
                            else *b = (uint8_t)((*b & 0xf0) | (v + 8));
                        }
                    }
                    sc[p * ldz] = (float)(0.01 + qt_uniform());
                    zp[p * ldz] = (float)(bits == 8 ? 20.0 * qt_normal() : 2.0 * qt_normal());
                }
                o0 = (float*)malloc((size_t)cap * sizeof(float));
                o1 = (float*)malloc((size_t)cap * sizeof(float));
                for (tr = 0; tr < 2; ++tr)
                    for (withz = 0; withz < 2; ++withz) {
                        int64_t ldo = tr ? n + 5 : hd + 3, sz = (tr ? hd : n) * ldo;
                        const float* z = withz ? zp : NULL;
                        memset(o0, 0x7f, (size_t)sz * sizeof(float));
                        QT_OK(quarot_attention_kv_dequant_f32(bits, codes, ldc, sc, z, ldz, n, hd, tr, o0, ldo,
                                                              QUAROT_ISA_REF));
                        for (p = 0; p < n; ++p)
                            for (j = 0; j < hd; ++j) {
                                float want = ((float)c[p * hd + j] - (withz ? zp[p * ldz] : 0.0f)) * sc[p * ldz];
                                float got = tr ? o0[j * ldo + p] : o0[p * ldo + j];
                                QT_CHECKF(memcmp(&want, &got, 4) == 0, "kv REF bits %d hd %lld row %lld code %lld: %a vs %a",
                                          bits, (long long)hd, (long long)p, (long long)j, (double)got, (double)want);
                            }
                        for (a = 0; a < N_ISAS; ++a) {
                            if (!quarot_isa_compiled(all_isas[a]) || all_isas[a] == QUAROT_ISA_REF) continue;
                            memset(o1, 0x7f, (size_t)sz * sizeof(float));
                            QT_OK(quarot_attention_kv_dequant_f32(bits, codes, ldc, sc, z, ldz, n, hd, tr, o1, ldo,
                                                                  all_isas[a]));
                            QT_CHECKF(memcmp(o0, o1, (size_t)sz * sizeof(float)) == 0,
                                      "kv %s bits %d hd %lld n %lld transposed %d zeros %d differs from REF",
                                      quarot_isa_name(all_isas[a]), bits, (long long)hd, (long long)n, tr, withz);
                        }
                    }
                free(codes); free(c); free(sc); free(zp); free(o0); free(o1);
            }
}

/* ---------------------------------------------------------------------------------------------- */

/* Attention of query u in double: p = softmax(scale q k^T) over keys < m, out = p v; also the
   first-order error bound of the float kernel for out (see test_direct). */
static void direct_f64(const float* q, const float* kt, int64_t ldk, const float* v, int64_t ldv, int64_t hd, int64_t m,
                       float scale, double* out, double* bound) {
    const double u = 0x1p-24;
    double* s = (double*)malloc((size_t)m * sizeof(double));
    double* e = (double*)malloc((size_t)m * sizeof(double));
    double mx = -HUGE_VAL, sum = 0.0, es = 0.0;
    int64_t j, d;
    for (j = 0; j < m; ++j) {
        double a = 0.0, aa = 0.0;
        for (d = 0; d < hd; ++d) {
            a += (double)q[d] * (double)kt[d * ldk + j];
            aa += fabs((double)q[d] * (double)kt[d * ldk + j]);
        }
        s[j] = (double)scale * a;
        /* the float score: hd fused steps (gamma_hd) and the scale's product */
        e[j] = fabs((double)scale) * aa * (double)hd * u / (1.0 - (double)hd * u) + fabs(s[j]) * u;
        if (s[j] > mx) mx = s[j];
    }
    for (j = 0; j < m; ++j) {   /* and the shift's rounding, u |s_j - m| (the float m is within es of mx) */
        double ej = e[j] + u * (fabs(s[j] - mx) + e[j]);
        if (ej > es) es = ej;
    }
    for (j = 0; j < m; ++j) sum += (s[j] = exp(s[j] - mx));
    for (d = 0; d < hd; ++d) {
        double a = 0.0, av = 0.0;
        for (j = 0; j < m; ++j) {
            a += s[j] / sum * (double)v[j * ldv + d];
            av += s[j] / sum * fabs((double)v[j * ldv + d]);
        }
        out[d] = a;
        /* p_j moves by at most p_j (2 es + 4u) to first order; the sum over m keys adds gamma_m */
        bound[d] = av * (2.0 * es + 4.0 * u + (double)m * u / (1.0 - (double)m * u)) + 0x1p-140;
    }
    free(s); free(e);
}

/* Random q, K^T, V; every ISA against REF (out and s by memcmp), REF against direct_f64 within twice
   its first-order bound: argument error es <= |scale| gamma_hd sum_d |q_d k_d| + u |s| (fused steps,
   then the product) + u |s - max| (the shift), which moves p_j by at most p_j (2 es + 4u) (4u for the
   exponential's, the reciprocal's and the product's rounding), and out adds gamma_m sum_j p_j |v_j|. */
static void test_direct(void) {
    static const int64_t hds[] = {1, 5, 8, 16, 32, 48};
    static const int64_t n0s[] = {1, 2, 3, 15, 16, 17, 33, 100};
    size_t hi, ni;
    int nq, a, big, u;
    qt_seed(13);
    for (hi = 0; hi < sizeof hds / sizeof hds[0]; ++hi)
        for (ni = 0; ni < sizeof n0s / sizeof n0s[0]; ++ni)
            for (nq = 1; nq <= QUAROT_ATTENTION_DIRECT_Q; ++nq)
                for (big = 0; big < 2; ++big) {
                    int64_t hd = hds[hi], n0 = n0s[ni], n = n0 + nq - 1, j, d;
                    int64_t ldq = hd + 3, ldk = n + 5, ldv = hd + 1, lds = n + 7, ldo = hd + 2;
                    float scale = (float)(1.0 / sqrt((double)hd)) * (big ? 40.0f : 1.0f);   /* big: scores far apart */
                    float* q = (float*)malloc((size_t)(nq * ldq) * sizeof(float));
                    float* kt = (float*)malloc((size_t)(hd * ldk) * sizeof(float));
                    float* v = (float*)malloc((size_t)(n * ldv) * sizeof(float));
                    float* s0 = (float*)malloc((size_t)(nq * lds) * sizeof(float));
                    float* s1 = (float*)malloc((size_t)(nq * lds) * sizeof(float));
                    float* o0 = (float*)malloc((size_t)(nq * ldo) * sizeof(float));
                    float* o1 = (float*)malloc((size_t)(nq * ldo) * sizeof(float));
                    double* od = (double*)malloc((size_t)hd * sizeof(double));
                    double* bd = (double*)malloc((size_t)hd * sizeof(double));
                    for (j = 0; j < nq * ldq; ++j) q[j] = (float)qt_normal();
                    for (j = 0; j < hd * ldk; ++j) kt[j] = (float)qt_normal();
                    for (j = 0; j < n * ldv; ++j) v[j] = (float)qt_normal();
                    memset(s0, 0x7f, (size_t)(nq * lds) * sizeof(float));
                    memset(o0, 0x7f, (size_t)(nq * ldo) * sizeof(float));
                    QT_OK(quarot_attention_direct_f32(q, ldq, nq, kt, ldk, v, ldv, hd, n0, scale, s0, lds, o0, ldo,
                                                      QUAROT_ISA_REF));
                    for (a = 0; a < N_ISAS; ++a) {
                        if (!quarot_isa_compiled(all_isas[a]) || all_isas[a] == QUAROT_ISA_REF) continue;
                        memset(s1, 0x7f, (size_t)(nq * lds) * sizeof(float));
                        memset(o1, 0x7f, (size_t)(nq * ldo) * sizeof(float));
                        QT_OK(quarot_attention_direct_f32(q, ldq, nq, kt, ldk, v, ldv, hd, n0, scale, s1, lds, o1, ldo,
                                                          all_isas[a]));
                        QT_CHECKF(memcmp(o0, o1, (size_t)(nq * ldo) * sizeof(float)) == 0 &&
                                      memcmp(s0, s1, (size_t)(nq * lds) * sizeof(float)) == 0,
                                  "direct %s hd %lld n0 %lld nq %d differs from REF", quarot_isa_name(all_isas[a]),
                                  (long long)hd, (long long)n0, nq);
                    }
                    for (u = 0; u < nq; ++u) {
                        direct_f64(q + u * ldq, kt, ldk, v, ldv, hd, n0 + u, scale, od, bd);
                        for (d = 0; d < hd; ++d)
                            QT_CHECKF(fabs((double)o0[u * ldo + d] - od[d]) <= 2.0 * bd[d],
                                      "direct hd %lld n0 %lld nq %d big %d: out[%d][%lld] %.9g vs %.9g (bound %.3g)",
                                      (long long)hd, (long long)n0, nq, big, u, (long long)d, (double)o0[u * ldo + d],
                                      od[d], 2.0 * bd[d]);
                        /* past the query's keys: the scaled scores, as stated */
                        for (j = n0 + u; j < n; ++j) {
                            float acc = 0.0f;
                            for (d = 0; d < hd; ++d) acc = fmaf(q[u * ldq + d], kt[d * ldk + j], acc);
                            acc = scale * acc;
                            QT_CHECK(memcmp(&acc, s0 + u * lds + j, 4) == 0);
                        }
                    }
                    /* a NaN in query 0: its outputs NaN, the other queries' unchanged */
                    if (nq > 1 && !big) {
                        q[hd / 2] = f32_bits(0x7fc00003u);
                        for (a = 0; a < N_ISAS; ++a) {
                            int nan_all = 1;
                            if (!quarot_isa_compiled(all_isas[a])) continue;
                            QT_OK(quarot_attention_direct_f32(q, ldq, nq, kt, ldk, v, ldv, hd, n0, scale, s1, lds, o1, ldo,
                                                              all_isas[a]));
                            for (d = 0; d < hd; ++d) nan_all &= o1[d] != o1[d];
                            QT_CHECKF(nan_all && memcmp(o0 + ldo, o1 + ldo, (size_t)((nq - 1) * ldo) * sizeof(float)) == 0,
                                      "direct %s: a NaN query hd %lld n0 %lld", quarot_isa_name(all_isas[a]), (long long)hd,
                                      (long long)n0);
                        }
                    }
                    free(q); free(kt); free(v); free(s0); free(s1); free(o0); free(o1); free(od); free(bd);
                }
}

/* ---------------------------------------------------------------------------------------------- */

static void test_errors(void) {
    float x[64], y[64], s[64], o[64];
    uint8_t c[64];
    quarot_isa missing = QUAROT_ISA_DEFAULT;
    int a;
    memset(x, 0, sizeof x);
    memset(c, 0, sizeof c);
    for (a = 0; a < N_ISAS; ++a)
        if (!quarot_isa_compiled(all_isas[a])) missing = all_isas[a];
    QT_OK(quarot_attention_exp_f32(NULL, NULL, 0, QUAROT_ISA_DEFAULT));
    QT_ERR(quarot_attention_exp_f32(x, y, -1, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_exp_f32(NULL, y, 4, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_exp_f32(x, y, 4, (quarot_isa)99), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_softmax_f32(s, 0, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_softmax_f32(NULL, 3, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    /* kv: bits, odd head_dim at 4 bits, short code rows, ldz, ldo, NULLs */
    QT_ERR(quarot_attention_kv_dequant_f32(5, c, 8, x, NULL, 1, 2, 8, 0, o, 8, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_kv_dequant_f32(4, c, 8, x, NULL, 1, 2, 7, 0, o, 8, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_kv_dequant_f32(4, c, 3, x, NULL, 1, 2, 8, 0, o, 8, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_kv_dequant_f32(8, c, 7, x, NULL, 1, 2, 8, 0, o, 8, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_kv_dequant_f32(8, c, 8, x, NULL, 0, 2, 8, 0, o, 8, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_kv_dequant_f32(8, c, 8, x, NULL, 1, 2, 8, 0, o, 7, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_kv_dequant_f32(8, c, 8, x, NULL, 1, 3, 8, 1, o, 2, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_kv_dequant_f32(8, c, 8, NULL, NULL, 1, 2, 8, 0, o, 8, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(quarot_attention_kv_dequant_f32(8, NULL, 8, NULL, NULL, 1, 0, 8, 0, NULL, 8, QUAROT_ISA_DEFAULT));
    /* direct: nq, n0, head_dim, strides, NULLs */
    QT_ERR(quarot_attention_direct_f32(x, 4, 0, x, 4, x, 4, 4, 1, 1.0f, s, 4, o, 4, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_direct_f32(x, 4, QUAROT_ATTENTION_DIRECT_Q + 1, x, 8, x, 4, 4, 1, 1.0f, s, 8, o, 4,
                                       QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_direct_f32(x, 4, 1, x, 4, x, 4, 4, 0, 1.0f, s, 4, o, 4, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_direct_f32(x, 4, 1, x, 4, x, 4, 0, 1, 1.0f, s, 4, o, 4, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_direct_f32(x, 3, 1, x, 4, x, 4, 4, 1, 1.0f, s, 4, o, 4, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_direct_f32(x, 4, 2, x, 2, x, 4, 4, 2, 1.0f, s, 4, o, 4, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);   /* ldk < n0 + nq - 1 */
    QT_ERR(quarot_attention_direct_f32(x, 4, 2, x, 4, x, 4, 4, 2, 1.0f, s, 2, o, 4, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);   /* lds */
    QT_ERR(quarot_attention_direct_f32(x, 4, 1, x, 4, x, 3, 4, 1, 1.0f, s, 4, o, 4, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_direct_f32(x, 4, 1, x, 4, x, 4, 4, 1, 1.0f, s, 4, o, 3, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_attention_direct_f32(x, 4, 1, x, 4, NULL, 4, 4, 1, 1.0f, s, 4, o, 4, QUAROT_ISA_DEFAULT),
           QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(quarot_attention_direct_f32(x, 4, 1, x, 4, x, 4, 4, 1, 1.0f, s, 4, o, 4, QUAROT_ISA_DEFAULT));
    QT_CHECK(s[0] == 1.0f && o[0] == 0.0f);
    if (missing != QUAROT_ISA_DEFAULT) {
        QT_ERR(quarot_attention_exp_f32(x, y, 4, missing), QUAROT_ERR_UNSUPPORTED);
        QT_ERR(quarot_attention_softmax_f32(s, 3, missing), QUAROT_ERR_UNSUPPORTED);
        QT_ERR(quarot_attention_kv_dequant_f32(8, c, 8, x, NULL, 1, 2, 8, 0, o, 8, missing), QUAROT_ERR_UNSUPPORTED);
        QT_ERR(quarot_attention_direct_f32(x, 4, 1, x, 4, x, 4, 4, 1, 1.0f, s, 4, o, 4, missing), QUAROT_ERR_UNSUPPORTED);
    }
}

int main(void) {
    printf("  attention kernels compiled: %s\n", quarot_simd_name());
    QT_RUN(test_exp_isas);
    QT_RUN(test_exp_libm);
    QT_RUN(test_softmax);
    QT_RUN(test_kv_dequant);
    QT_RUN(test_direct);
    QT_RUN(test_errors);
    return qt_finish("test_attention");
}
