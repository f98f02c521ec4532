/* The f32 rotation path (quarot_command.f32; `quarot rotate` uses it for weights written as f16 /
   bf16) against the double path it replaces there.

   1. Library bound: quarot_command_apply on an F32 tensor, f32 = 1 against f32 = 0 (double, rounded
      once to f32), for Hadamard rotations of sizes 2^m and K * 2^m (4096 = 2^12, 11008 = 172 * 64,
      head_dim 128 per head, and the heads-axis rotation with inner > 1), on both axes (input side:
      rows; output side: columns). For every vector x of the rotated axis and every element,
      |y_f32 - y_f64| <= (log2(n) + 2) * 2^-24 * ||x||_2 (the documented bound; log2 rounded up for
      K * 2^m). The f32 result differs from the double one somewhere (the check can fail).
   2. Tool: a small llama (hidden 256, intermediate 320 = 20 * 16, f16 and bf16, with --online)
      rotated by qx_rotate_file with the default (f32 for f16/bf16 outputs) and with f64_arithmetic:
      every output value equal or one unit in the last place apart (under 5%, measured: printed),
      except a few (< 1e-4 of them) that cancellation left tiny, whose difference is then at most
      2^-20 of the tensor's largest value (the bound above is absolute, not relative: bf16 keeps 8
      bits of a 1e-7 value); the stats and the CLI summary say which arithmetic ran.
   3. Tool: the norms' scalings folded into the readers' first commands give the same bytes as
      separate fusion passes (test_fused_scaling_bits). */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "cli/qx_cli.h"
#include "pipeline/qx_rotate_file.h"
#include "formats/qx_load.h"
#include "rotate_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x1234567887654321ull;
static double rnd(void) {   /* roughly normal, heavy-ish tail */
    double s = 0.0;
    int k;
    for (k = 0; k < 4; ++k) {
        g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
        s += (double)(g_rng >> 11) * (1.0 / 9007199254740992.0) - 0.5;
    }
    return s;
}

/* One command (side, outer, inner) with rotation rot on a [rows][cols] f32 tensor. */
static void check_bound(const char* label, const quarot_rotation* rot, quarot_side side, int64_t rows, int64_t cols, int64_t outer,
                        int64_t inner) {
    quarot_command c;
    quarot_tensor t32, t64;
    int64_t ne[4] = {cols, rows, 1, 1}, n = rot->n, i, j, L = side == QUAROT_SIDE_INPUT ? cols : rows;
    int64_t nvec = side == QUAROT_SIDE_INPUT ? rows : cols, v, differ = 0;
    float *a = (float*)malloc((size_t)(rows * cols) * sizeof(float)), *b = (float*)malloc((size_t)(rows * cols) * sizeof(float));
    double worst = 0.0, bound_factor = (ceil(log2((double)n)) + 2.0) * ldexp(1.0, -24);
    if (!a || !b) { QT_CHECK(0); free(a); free(b); return; }
    for (i = 0; i < rows * cols; ++i) a[i] = (float)(rnd() * (i % 97 == 0 ? 40.0 : 1.0));
    memcpy(b, a, (size_t)(rows * cols) * sizeof(float));
    QT_OK(quarot_tensor_init(&t32, a, QUAROT_DTYPE_F32, 2, ne));
    QT_OK(quarot_tensor_init(&t64, b, QUAROT_DTYPE_F32, 2, ne));
    memset(&c, 0, sizeof c);
    c.layer = 0;
    c.side = side;
    c.outer = outer;
    c.inner = inner;
    QT_CHECK(L == outer * n * inner);
    /* the norms of the vectors the bound is stated on: each rotated sub-vector of length n (stride inner) */
    {
        double* norm2 = (double*)calloc((size_t)(nvec * outer * inner), sizeof(double));
        if (!norm2) { QT_CHECK(0); free(a); free(b); return; }
        for (v = 0; v < nvec; ++v)
            for (j = 0; j < L; ++j) {
                double x = side == QUAROT_SIDE_INPUT ? a[v * cols + j] : a[j * cols + v];
                int64_t o = j / (n * inner), in = j % inner;
                norm2[(v * outer + o) * inner + in] += x * x;
            }
        c.f32 = 1;
        QT_OK(quarot_command_apply(&c, rot, &t32, NULL, NULL));
        c.f32 = 0;
        QT_OK(quarot_command_apply(&c, rot, &t64, NULL, NULL));
        for (v = 0; v < nvec; ++v)
            for (j = 0; j < L; ++j) {
                int64_t at = side == QUAROT_SIDE_INPUT ? v * cols + j : j * cols + v, o = j / (n * inner), in = j % inner;
                double d = fabs((double)a[at] - (double)b[at]), nx = sqrt(norm2[(v * outer + o) * inner + in]);
                double rel = nx > 0 ? d / (bound_factor * nx) : 0.0;
                differ += a[at] != b[at];
                if (rel > worst) worst = rel;
            }
        free(norm2);
    }
    printf("    %-44s n %5lld: %5.1f%% of values differ; max |f32 - f64| = %.3f of the bound (log2 n + 2) 2^-24 ||x||\n", label,
           (long long)n, 100.0 * (double)differ / (double)(rows * cols), worst);
    QT_CHECKF(worst <= 1.0, "%s: |f32 - f64| reaches %.3f x the stated bound", label, worst);
    QT_CHECKF(differ > 0, "%s: the f32 path gave the double path's bits everywhere (not run?)", label);
    free(a);
    free(b);
}

static void test_library_bound(void) {
    static const int64_t sizes[3] = {4096, 11008, 128};
    int k, quick = qt_quick();
    for (k = 0; k < 3; ++k) {
        quarot_rotation_desc d;
        quarot_rotation rot;
        int64_t n = sizes[k], rows = quick ? 8 : 96;
        memset(&d, 0, sizeof d);
        d.kind = QUAROT_ROTATION_HADAMARD;
        d.n = n;
        d.seed = 3;
        QT_OK(quarot_rotation_init(&rot, &d, NULL));
        if (k < 2) {
            check_bound("rows (input side)", &rot, QUAROT_SIDE_INPUT, rows, n, 1, 1);
            check_bound("columns (output side)", &rot, QUAROT_SIDE_OUTPUT, n, rows + 3, 1, 1);
        } else {
            check_bound("rows per head (outer 8)", &rot, QUAROT_SIDE_INPUT, rows, 8 * n, 8, 1);
            check_bound("columns per head (outer 4)", &rot, QUAROT_SIDE_OUTPUT, 4 * n, rows + 5, 4, 1);
        }
        quarot_rotation_free(&rot);
    }
    {   /* across heads: 8 heads of 16, the rotation over the heads axis (inner = head_dim) */
        quarot_rotation_desc d;
        quarot_rotation rot;
        memset(&d, 0, sizeof d);
        d.kind = QUAROT_ROTATION_HADAMARD;
        d.n = 8;
        d.no_signs = 1;
        QT_OK(quarot_rotation_init(&rot, &d, NULL));
        check_bound("rows across heads (inner 16)", &rot, QUAROT_SIDE_INPUT, 40, 128, 1, 16);
        quarot_rotation_free(&rot);
    }
}

static uint32_t half_at(const quarot_tensor* t, int64_t i) {
    uint16_t h;
    memcpy(&h, (const char*)t->data + 2 * i, 2);
    return h;
}

/* Ordered integer of a half (f16 or bf16: sign-magnitude) so that neighbours differ by 1. */
static int32_t half_ord(uint32_t h) { return (h & 0x8000u) ? -(int32_t)(h & 0x7fffu) : (int32_t)(h & 0x7fffu); }

/* The largest |value| of a f16 / bf16 tensor. */
static double tensor_max_abs(const quarot_tensor* t) {
    int64_t i, n = quarot_tensor_nelements(t);
    double m = 0.0;
    for (i = 0; i < n; ++i) {
        uint16_t h = (uint16_t)half_at(t, i);
        float v;
        quarot_convert(&v, QUAROT_DTYPE_F32, &h, t->dtype, 1, QUAROT_ISA_DEFAULT);
        if (fabs((double)v) > m) m = fabs((double)v);
    }
    return m > 0 ? m : 1.0;
}

/* The model at `in` rotated by qx_rotate_file into `out` (R1 + R2 Hadamard, 2 threads; online,
   f64_arithmetic, separate_fusions and on_command as given): its result, stats in *st, error in *e. */
static quarot_result rotate_file(const char* in, const char* out, int online, int f64, int separate,
                                 int (*on_command)(void*, const quarot_command*), qx_rotate_file_stats* st, qx_err* e) {
    quarot_rotate_desc desc;
    qx_rotate_file_opts ro = ru_file_opts(out, 2);
    memset(&desc, 0, sizeof desc);
    desc.rotation = QUAROT_ROTATION_HADAMARD;
    desc.online = online;
    desc.separate_fusions = separate;
    desc.on_command = on_command;
    ro.f64_arithmetic = f64;
    return ru_rotate_file(in, &desc, &ro, st, e);
}

/* The same, which must succeed, and the output loaded into *o. */
static void rotate_and_load(const char* in, const char* out, int online, int f64, int separate, qx_rotate_file_stats* st,
                            qx_store* o) {
    qx_load_opts lo;
    qx_err e;
    QT_OK(rotate_file(in, out, online, f64, separate, NULL, st, &e));
    memset(&lo, 0, sizeof lo);
    QT_OK(qx_load_model(out, &lo, o, &e));
}

static void test_tool_outputs(void) {
    static const quarot_dtype dts[2] = {QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    int d, k;
    for (d = 0; d < 2; ++d) {
        char in[512], out[2][600], f[700];
        qx_store o[2];
        int64_t total = 0, one = 0, more = 0, i, cmds[2] = {0, 0}, ncmd = 0;
        double worst_tiny = 0.0;
        snprintf(in, sizeof in, "%s/in_%s", g_tmp, quarot_dtype_name(dts[d]));
        QT_CHECK(cu_save_llama_st(in, 5, 256, 320, 4, 64, 200, dts[d]));
        for (k = 0; k < 2; ++k) {
            qx_rotate_file_stats st;
            snprintf(out[k], sizeof out[k], "%s/out_%s_%d", g_tmp, quarot_dtype_name(dts[d]), k);
            rotate_and_load(in, out[k], 1, k, 0, &st, &o[k]);
            cmds[k] = st.f32_commands;
            ncmd = st.n_commands;
        }
        QT_CHECKF(cmds[0] == ncmd && ncmd > 0 && cmds[1] == 0, "f32 commands %lld (default) / %lld (f64_arithmetic) of %lld",
                  (long long)cmds[0], (long long)cmds[1], (long long)ncmd);
        QT_EQ_INT((int)o[0].count, (int)o[1].count);
        for (k = 0; k < o[0].count && k < o[1].count; ++k) {
            const quarot_tensor* a = &o[0].items[k].t;
            const quarot_tensor* b = qx_store_find(&o[1], o[0].items[k].name);
            QT_CHECKF(b && a->dtype == dts[d] && b->dtype == dts[d] && quarot_tensor_nelements(a) == quarot_tensor_nelements(b),
                      "%s", o[0].items[k].name);
            if (!b || a->dtype != b->dtype || quarot_tensor_nelements(a) != quarot_tensor_nelements(b)) continue;
            for (i = 0; i < quarot_tensor_nelements(a); ++i) {
                int32_t diff = half_ord(half_at(a, i)) - half_ord(half_at(b, i));
                total++;
                one += diff == 1 || diff == -1;
                if (diff > 1 || diff < -1) {   /* only where cancellation left a value tiny against the tensor */
                    float va, vb;
                    uint16_t ha = (uint16_t)half_at(a, i), hb = (uint16_t)half_at(b, i);
                    quarot_convert(&va, QUAROT_DTYPE_F32, &ha, dts[d], 1, QUAROT_ISA_DEFAULT);
                    quarot_convert(&vb, QUAROT_DTYPE_F32, &hb, dts[d], 1, QUAROT_ISA_DEFAULT);
                    more++;
                    worst_tiny = fmax(worst_tiny, fabs((double)va - (double)vb) / tensor_max_abs(b));
                }
            }
        }
        printf("    %s output, --online: %lld of %lld values (%.3f%%) one unit in the last place apart; %lld more, all tiny "
               "(|difference| <= %.2e of the tensor's largest |value|)\n",
               quarot_dtype_name(dts[d]), (long long)one, (long long)total, 100.0 * (double)one / (double)(total ? total : 1),
               (long long)more, worst_tiny);
        QT_CHECKF(worst_tiny <= ldexp(1.0, -20), "%s: values more than one ulp apart differ by %.3e of the tensor's largest",
                  quarot_dtype_name(dts[d]), worst_tiny);
        QT_CHECKF((double)more < 1e-4 * (double)total, "%s: %lld values more than one ulp apart", quarot_dtype_name(dts[d]), (long long)more);
        QT_CHECKF(one > 0 && (double)one < 0.05 * (double)total, "%s: %lld of %lld values one ulp apart", quarot_dtype_name(dts[d]),
                  (long long)one, (long long)total);
        qx_store_free(&o[0]);
        qx_store_free(&o[1]);
        (void)f;
    }
    /* the CLI summary names the arithmetic */
    {
        char in[512], out[600];
        snprintf(in, sizeof in, "%s/in_f16", g_tmp);
        snprintf(out, sizeof out, "%s/out_cli", g_tmp);
        QT_EQ_INT(CLI("rotate %s %s --threads 2", in, out), 0);
        QT_CHECKF(strstr(g_out, "arithmetic: f32 for the") != NULL, "summary: %s", g_out);
        snprintf(out, sizeof out, "%s/out_cli32", g_tmp);
        QT_EQ_INT(CLI("rotate %s %s --threads 2 --dtype f32", in, out), 0);
        QT_CHECKF(strstr(g_out, "arithmetic: double") != NULL, "summary: %s", g_out);
        snprintf(out, sizeof out, "%s/out_cli64", g_tmp);
        QT_EQ_INT(CLI("rotate %s %s --threads 2 --f64", in, out), 0);
        QT_CHECKF(strstr(g_out, "arithmetic: double") != NULL, "summary: %s", g_out);
    }
}

/* 3. A norm's scaling folded into its readers' first rotate commands (the default) against a pass of
   its own (quarot_rotate_desc.separate_fusions): the same bytes in every output tensor, f16 and bf16
   outputs, with and without --online; the fold took every reader of the 2-layer model (q, k, v,
   gate, up: 10 weights) and none with separate_fusions. The model's norm gains are random in
   [0.5, 1.5), so a scaling that was lost or done twice would change the outputs. */
static void test_fused_scaling_bits(void) {
    static const quarot_dtype dts[2] = {QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    int d, on, k;
    for (d = 0; d < 2; ++d)
        for (on = 0; on < 2; ++on) {
            char in[512], out[2][600];
            qx_store o[2];
            int64_t fused[2] = {-1, -1}, same = 0, i;
            snprintf(in, sizeof in, "%s/fold_%s", g_tmp, quarot_dtype_name(dts[d]));
            if (on == 0) QT_CHECK(cu_save_llama_st(in, 7, 256, 320, 4, 64, 200, dts[d]));
            for (k = 0; k < 2; ++k) {
                qx_rotate_file_stats st;
                snprintf(out[k], sizeof out[k], "%s/fold_out_%s_%d_%d", g_tmp, quarot_dtype_name(dts[d]), on, k);
                rotate_and_load(in, out[k], on, 0, k, &st, &o[k]);
                fused[k] = st.fused_into_commands;
            }
            QT_CHECKF(fused[0] == 10 && fused[1] == 0, "%s%s: %lld weights folded (default), %lld (separate_fusions)",
                      quarot_dtype_name(dts[d]), on ? " --online" : "", (long long)fused[0], (long long)fused[1]);
            QT_EQ_INT((int)o[0].count, (int)o[1].count);
            for (i = 0; i < o[0].count; ++i) {
                const quarot_tensor* a = &o[0].items[i].t;
                const quarot_tensor* b = qx_store_find(&o[1], o[0].items[i].name);
                const size_t na = quarot_tensor_nbytes(a);
                QT_CHECKF(b && b->dtype == a->dtype && quarot_tensor_nbytes(b) == na && memcmp(a->data, b->data, na) == 0,
                          "%s%s: tensor %s differs", quarot_dtype_name(dts[d]), on ? " --online" : "", o[0].items[i].name);
                same += b && quarot_tensor_nbytes(b) == na && memcmp(a->data, b->data, na) == 0;
            }
            printf("    %s output%s: %lld weights scaled by their first command; %lld of %lld tensors byte-identical to "
                   "separate fusions\n", quarot_dtype_name(dts[d]), on ? ", --online" : "", (long long)fused[0], (long long)same,
                   (long long)o[0].count);
            qx_store_free(&o[0]);
            qx_store_free(&o[1]);
        }
}

/* on_command asking a folded reader's command to run twice: the scaling is done first, the command
   twice, and the run fails at the exactly-once check naming that command (the path where the fold
   is undone, run under the sanitizers by make test-san). */
static int twice_q0(void* user, const quarot_command* c) {
    (void)user;
    return strcmp(c->weight, "model.layers.0.self_attn.q_proj.weight") == 0 ? 2 : 0;
}

static void test_fused_scaling_observer(void) {
    char in[512], out[600];
    qx_rotate_file_stats st;
    qx_err e;
    snprintf(in, sizeof in, "%s/fold_f16", g_tmp);   /* test_fused_scaling_bits' input */
    snprintf(out, sizeof out, "%s/fold_twice", g_tmp);
    QT_CHECK(rotate_file(in, out, 0, 0, 0, twice_q0, &st, &e) != QUAROT_OK);
    QT_CHECKF(strstr(e.msg, "model.layers.0.self_attn.q_proj.weight") != NULL && strstr(e.msg, "ran 2 times") != NULL, "error: %s",
              e.msg);
    QT_EQ_INT((int)st.fused_into_commands, 10);
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_rotate_f32")) return 1;
    QT_RUN(test_library_bound);
    QT_RUN(test_tool_outputs);
    QT_RUN(test_fused_scaling_bits);
    QT_RUN(test_fused_scaling_observer);
    cu_finish();
    return qt_finish("test_rotate_f32");
}
