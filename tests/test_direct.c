/* O_DIRECT output (qx_direct.h through qx_out_direct): the file holds exactly the bytes written, in
   any write order, with the O_DIRECT path, the buffered fallback (QX_NO_DIRECT=1) and plain qx_out
   pwrites alike: a header written last into a block whose rest went out long before, more partial
   blocks than the writer has buffers (blocks written whole, then read back when touched again),
   overlapping rewrites, a hole never written, an unaligned tail and a final size past the last
   byte; every other write goes in place (qx_direct_span / qx_direct_commit) instead of through a
   copy. Then `quarot rotate` into safetensors gives the same bytes with O_DIRECT, with the
   fallback and with plain writes (a small output, under QX_DIRECT_MIN_BYTES, unless QX_DIRECT=1),
   and its summary says which one ran. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "cli/qx_cli.h"
#include "support/qx_direct.h"
#include "pipeline/qx_rotate_file.h"
#include "support/qx_file.h"
#include "formats/qx_gguf.h"
#include "formats/qx_safetensors.h"
#include "model/qx_synth.h"
#include "support/qx_threads.h"
#include "formats/qx_load.h"
#include "rotate_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLK QX_DIRECT_BLOCK

static unsigned char* g_piece;   /* scratch for one write */
static unsigned g_parity;        /* which writes go in place: those with (seed + g_parity) even */

/* Writes n pseudo-random bytes (from seed) at off into the file and into the expected image. */
static int put(qx_out* o, unsigned char* want, uint64_t off, size_t n, unsigned seed) {
    qx_err e;
    size_t i;
    unsigned x = seed * 2654435761u + 12345u;
    for (i = 0; i < n; ++i) {
        x = x * 1103515245u + 12345u;
        g_piece[i] = (unsigned char)(x >> 16);
    }
    memcpy(want + off, g_piece, n);
    if (o->dio && (seed + g_parity) % 2 == 0) {   /* every other write in place (qx_direct_span / commit), a block at a time */
        const unsigned char* p = g_piece;
        while (n > 0) {
            size_t room = 0, part;
            char* sp = qx_direct_span(o->dio, off, n, &room, &e);
            if (!sp || room == 0) return 0;
            part = room < n ? room : n;
            memcpy(sp, p, part);
            if (qx_direct_commit(o->dio, off, part, &e) != QUAROT_OK) return 0;
            p += part;
            off += part;
            n -= part;
        }
        return 1;
    }
    return qx_out_pwrite(o, g_piece, n, off, &e) == QUAROT_OK;
}

/* One output through the schedule above; mode: 0 plain qx_out, 1 qx_out_direct (O_DIRECT where the
   file system takes it), 2 qx_out_direct with QX_NO_DIRECT=1. Returns the file's mode. */
static int write_schedule(const char* path, int mode, unsigned char* want, uint64_t size, uint64_t final_size,
                          uint64_t hole, size_t hole_n) {
    qx_out o;
    qx_err e;
    uint64_t b, end;
    unsigned seed = 1;
    int ok = 1, got;
    const size_t step = ((size_t)1 << 20) + 3;   /* odd chunks: never block aligned */
    memset(want, 0, (size_t)final_size);
    setenv("QX_DIRECT", "1", 1);   /* below QX_DIRECT_MIN_BYTES: asked for explicitly */
    if (mode == 2) setenv("QX_NO_DIRECT", "1", 1);
    else unsetenv("QX_NO_DIRECT");
    if (qx_out_begin(&o, path, 1, &e) != QUAROT_OK) return -1;
    if (mode) qx_out_direct(&o, final_size);
    got = o.direct_mode;
    /* a) a few bytes into every block: more partial blocks than buffers */
    for (b = 0; b * BLK < size; ++b) ok &= put(&o, want, b * BLK + 10, 16, seed++);
    /* b) the rest from the end to the start, around the hole, [0, 10) left for last */
    end = size;
    while (end > 10 && ok) {
        uint64_t start = end >= 10 + step ? end - step : 10;
        if (start < hole + hole_n && end > hole) {   /* cut around the hole */
            if (end > hole + hole_n) ok &= put(&o, want, hole + hole_n, (size_t)(end - hole - hole_n), seed++);
            if (start < hole) ok &= put(&o, want, start, (size_t)(hole - start), seed++);
        } else {
            ok &= put(&o, want, start, (size_t)(end - start), seed++);
        }
        end = start;
    }
    /* c) a rewrite across a block boundary written long ago; d) the "header" */
    ok &= put(&o, want, 2 * BLK - 50, 100, seed++);
    ok &= put(&o, want, 0, 10, seed++);
    unsetenv("QX_DIRECT");   /* the CLI runs below inherit the environment */
    if (!ok || qx_out_sync(&o, final_size, &e) != QUAROT_OK || qx_out_publish(&o, &e) != QUAROT_OK) {
        qx_out_abort(&o);
        unsetenv("QX_NO_DIRECT");
        return -1;
    }
    if (o.direct_mode != got && !(got == QX_DIRECT_ON && o.direct_mode == QX_DIRECT_REFUSED)) ok = 0;
    got = o.direct_mode;
    qx_out_abort(&o);
    unsetenv("QX_NO_DIRECT");
    return ok ? got : -1;
}

static void test_block_writer(void) {
    /* 8 whole blocks and an unaligned tail (9 blocks: 3 more than the writer's buffers) */
    const uint64_t size = 8 * (uint64_t)BLK + 12345, final_size = size + 777, hole = 3 * (uint64_t)BLK + 100;
    const size_t hole_n = 5000;
    unsigned char* want = (unsigned char*)malloc((size_t)final_size);
    int mode;
    g_piece = (unsigned char*)malloc(((size_t)1 << 20) + 16);
    QT_CHECK(want && g_piece);
    if (!want || !g_piece) { free(want); free(g_piece); return; }
    for (mode = 0; mode < 5; ++mode) {   /* 3, 4: modes 1, 2 with the other writes in place */
        const char* path = tmp_path("direct.bin");
        size_t n = 0;
        unsigned char* back;
        int m;
        g_parity = mode >= 3;
        m = write_schedule(path, mode >= 3 ? mode - 2 : mode, want, size, final_size, hole, hole_n);
        QT_CHECKF(m >= 0, "mode %d: the writes failed", mode);
        if (mode == 0) QT_EQ_INT(m, QX_DIRECT_OFF);
        if (mode == 1 || mode == 3) QT_CHECKF(m == QX_DIRECT_ON || m == QX_DIRECT_REFUSED, "mode %d", m);
        if (mode == 2 || mode == 4) QT_EQ_INT(m, QX_DIRECT_DISABLED);
        back = read_all(path, &n);
        QT_CHECKF(back && n == final_size, "mode %d: %zu bytes, want %llu", mode, n, (unsigned long long)final_size);
        if (back && n == final_size) {
            size_t i, first = (size_t)-1;
            for (i = 0; i < n && first == (size_t)-1; ++i)
                if (back[i] != want[i]) first = i;
            QT_CHECKF(first == (size_t)-1, "mode %d: first difference at byte %zu", mode, first);
            for (i = 0; i < hole_n; ++i) QT_CHECK(back[hole + i] == 0);
        }
        free(back);
        remove(path);
    }
    free(want);
    free(g_piece);
    g_piece = NULL;
}

/* Bytes never written read back as zeros even where the block buffer held other data: blocks 0-5
   get random bytes but their last (all 6 buffers full of data, none complete), then block 6 gets
   100 bytes at +1000 and 50 at +5000 and block 8 one byte at its end: each takes the buffer of the
   least recently used block (which goes out first), so the gaps before, between and after those
   writes, and the last byte of blocks 0-5, must be zeros there. Block 7 is never written. Both
   writers (O_DIRECT and QX_NO_DIRECT), each with both sets of writes in place. */
static void test_block_gaps(void) {
    const uint64_t size = 9 * (uint64_t)BLK;
    unsigned char* want = (unsigned char*)malloc((size_t)size);
    int mode;
    g_piece = (unsigned char*)malloc(BLK);
    QT_CHECK(want && g_piece);
    if (!want || !g_piece) { free(want); free(g_piece); g_piece = NULL; return; }
    for (mode = 0; mode < 4; ++mode) {
        const char* path = tmp_path("gaps.bin");
        qx_out o;
        qx_err e;
        unsigned char* back;
        size_t n = 0, i, first = (size_t)-1;
        int ok = 1;
        uint64_t b;
        memset(want, 0, (size_t)size);
        setenv("QX_DIRECT", "1", 1);
        if (mode & 1) setenv("QX_NO_DIRECT", "1", 1);
        else unsetenv("QX_NO_DIRECT");
        g_parity = mode >= 2;   /* seeds 2, 4 (below) in place when 0; 3, 5 when 1 */
        if (qx_out_begin(&o, path, 1, &e) != QUAROT_OK) { QT_CHECK(0); break; }
        qx_out_direct(&o, size);
        QT_CHECK(o.dio != NULL);
        for (b = 0; b < 6 && ok; ++b) ok &= put(&o, want, b * BLK, BLK - 1, 100 + (unsigned)b);
        ok &= put(&o, want, 6 * BLK + 1000, 100, 2);
        ok &= put(&o, want, 6 * BLK + 5000, 50, 3);
        ok &= put(&o, want, 9 * BLK - 1, 1, 4 + (unsigned)g_parity);
        unsetenv("QX_DIRECT");
        QT_CHECKF(ok, "mode %d: a write failed", mode);
        QT_CHECK(qx_out_sync(&o, size, &e) == QUAROT_OK && qx_out_publish(&o, &e) == QUAROT_OK);
        qx_out_abort(&o);
        unsetenv("QX_NO_DIRECT");
        back = read_all(path, &n);
        QT_CHECKF(back && n == size, "mode %d: %zu bytes", mode, n);
        for (i = 0; back && n == size && i < n && first == (size_t)-1; ++i)
            if (back[i] != want[i]) first = i;
        QT_CHECKF(first == (size_t)-1, "mode %d: first difference at byte %zu (block %zu + %zu)", mode, first, first / BLK, first % BLK);
        free(back);
        remove(path);
    }
    g_parity = 0;
    free(want);
    free(g_piece);
    g_piece = NULL;
}

/* quarot rotate into safetensors: O_DIRECT and the fallback write the same file; the summary says
   which ran. The checkpoint's size is not a multiple of the block (the tail path). */
static void test_rotate_same_bytes(void) {
    char in[512], out[3][600], f0[700], f1[700];
    snprintf(in, sizeof in, "%s/in_f16", g_tmp);
    QT_CHECK(cu_save_llama_st(in, 9, 128, 320, 4, 32, 200, QUAROT_DTYPE_F16));
    snprintf(out[0], sizeof out[0], "%s/out_direct", g_tmp);
    snprintf(out[1], sizeof out[1], "%s/out_buffered", g_tmp);
    QT_EQ_INT(run_prog("QX_DIRECT=1", g_bin, "rotate %s %s --threads 2 --online", in, out[0]), 0);
    QT_CHECKF(strstr(g_out, "weights written: O_DIRECT") || strstr(g_out, "weights written: buffered (the file system refused"),
              "summary: %s", g_out);
    QT_EQ_INT(run_prog("QX_DIRECT=1 QX_NO_DIRECT=1", g_bin, "rotate %s %s --threads 2 --online", in, out[1]), 0);
    QT_CHECKF(strstr(g_out, "weights written: buffered (O_DIRECT switched off by QX_NO_DIRECT)") != NULL, "summary: %s", g_out);
    /* a small output (under QX_DIRECT_MIN_BYTES) keeps plain buffered writes and says nothing */
    snprintf(out[2], sizeof out[2], "%s/out_small", g_tmp);
    QT_EQ_INT(CLI("rotate %s %s --threads 2 --online", in, out[2]), 0);
    QT_CHECKF(strstr(g_out, "weights written:") == NULL, "summary: %s", g_out);
    snprintf(f0, sizeof f0, "%s/model.safetensors", out[0]);
    snprintf(f1, sizeof f1, "%s/model.safetensors", out[1]);
    QT_CHECK(same_file(f0, f1));
    snprintf(f1, sizeof f1, "%s/model.safetensors", out[2]);
    QT_CHECK(same_file(f0, f1));
    snprintf(f0, sizeof f0, "%s/quarot_online.txt", out[0]);
    snprintf(f1, sizeof f1, "%s/quarot_online.txt", out[1]);
    QT_CHECK(same_file(f0, f1));
}

/* Loads `in` as the tool does and rotates it (R1 + R2 Hadamard, seed 9, 2 threads, mapped input)
   into out with window rows `win` (qx_rotate_file_opts.global_window_rows), globals_last and
   out_format fmt (NULL: the input's). */
static quarot_result rotate_to(const char* in, const char* out, const char* fmt, int64_t win, int last, qx_rotate_file_stats* st,
                               qx_err* e) {
    quarot_rotate_desc desc;
    qx_rotate_file_opts ro = ru_file_opts(out, 2);
    memset(&desc, 0, sizeof desc);
    desc.seed = 9;
    ro.out_format = fmt;
    ro.global_window_rows = win;
    ro.globals_last = last;
    return ru_rotate_file(in, &desc, &ro, st, e);
}

/* Globals of 64 MiB or more in f32: by default the embedding and lm_head stream through in row
   windows of about 4 MiB (qx_rotate_file step 4s; peak: one layer plus the windows); with whole
   copies (global_window_rows < 0) they are written right after pre_run and their copies reused for
   the layers' (step 4b: a peak of max(globals, one layer) instead of their sum); globals_last writes
   them after the layers. The same bytes all three ways, and the layers refuse nothing. */
static void test_globals_first(void) {
    qx_err e;
    char in[512], out[3][600], f0[700], f1[700];
    size_t peak[3] = {0, 0, 0}, glob[3] = {0, 0, 0};
    int64_t wrows = 0;
    int k;
    if (qt_quick()) { QT_SKIP("QT_QUICK: 100 MB of model (the globals must reach 64 MiB)"); return; }
    snprintf(in, sizeof in, "%s/in_big", g_tmp);
    /* vocab 16384: embeddings and lm_head 32 MiB each in f32 */
    QT_CHECK(cu_save_llama_st(in, 11, 512, 1024, 8, 64, 16384, QUAROT_DTYPE_F16));
    for (k = 0; k < 3; ++k) {
        qx_rotate_file_stats st;
        snprintf(out[k], sizeof out[k], "%s/out_big%d", g_tmp, k);
        QT_OK(rotate_to(in, out[k], NULL, k == 0 ? 0 : -1, k == 2, &st, &e));
        QT_EQ_INT((int)st.out_of_layer, 0);
        QT_EQ_INT((int)st.tensors_written, 2 + 9 * 2 + 1);
        peak[k] = st.peak_copy_bytes;
        glob[k] = st.global_copy_bytes;
        if (k == 0) wrows = st.global_window_rows;
    }
    for (k = 1; k < 3; ++k) {
        snprintf(f0, sizeof f0, "%s/model.safetensors", out[0]);
        snprintf(f1, sizeof f1, "%s/model.safetensors", out[k]);
        QT_CHECK(same_file(f0, f1));
    }
    /* windows: 4 MiB / (512 floats) = 2048 rows, the copies at most one layer (10 MiB) plus two
       windows and the norm; whole, first: the layer fits in the globals' 64 MiB; last: the sum */
    QT_EQ_INT(wrows, 2048);
    QT_CHECKF(peak[0] < ((size_t)24 << 20) && peak[1] == glob[1] && peak[2] > glob[2] && glob[1] >= ((size_t)64 << 20),
              "peak %zu / %zu / %zu, globals %zu / %zu / %zu", peak[0], peak[1], peak[2], glob[0], glob[1], glob[2]);
    printf("    copies at most: windows %.1f MiB, whole first %.1f MiB, whole last %.1f MiB\n", (double)peak[0] / 1048576.0,
           (double)peak[1] / 1048576.0, (double)peak[2] / 1048576.0);
}

/* The embedding and lm_head in row windows (qx_rotate_file_opts.global_window_rows: copied, rotated by
   quarot_processor_pre_run_rows and written a window at a time) give the bytes of whole copies:
   untied llama, tied qwen2 (untied in the windows, or kept tied under a final norm of ones), f16,
   bf16 and f32, into a safetensors directory (with config.json) and GGUF, windows of 7 rows (256 =
   36 * 7 + 4: a short last one) and of 1. An opt model (LayerNorm: mean baking, a final-norm bias)
   and a llama2.c output keep whole copies and say why. NaN in the embedding's row 200 is found in
   its window and named with its row, and nothing is left at the output. */
static void test_global_windows(void) {
    static const struct { const char* arch; quarot_dtype dt; int gguf, ones; int64_t win; const char* why; } cases[] = {
        {"llama", QUAROT_DTYPE_F16, 0, 0, 7, NULL},
        {"qwen2", QUAROT_DTYPE_F16, 0, 0, 1, NULL},
        {"qwen2", QUAROT_DTYPE_BF16, 0, 1, 7, NULL},
        {"qwen2", QUAROT_DTYPE_F32, 1, 0, 7, NULL},
        {"llama", QUAROT_DTYPE_BF16, 1, 0, 7, NULL},
        {"opt", QUAROT_DTYPE_F16, 0, 0, 7, "row windows"},
        {"llama", QUAROT_DTYPE_F32, 2, 0, 7, "llama2.c writer"},
    };
    int c, k, nan;
    for (c = 0; c < (int)(sizeof cases / sizeof cases[0]); ++c)
        for (nan = 0; nan < (c == 0 ? 2 : 1); ++nan) {
            qx_synth_desc d;
            qx_store s;
            qx_err e;
            char in[512], out[2][600], f0[700], f1[700];
            quarot_result r = QUAROT_OK;
            memset(&d, 0, sizeof d);
            d.arch = cases[c].arch;
            d.seed = 500 + (uint64_t)c;
            d.dtype = cases[c].dt;
            QT_OK(qx_synth_model(&s, &d, &e));
            if (cases[c].ones) {
                quarot_tensor* g = qx_store_find(&s, "model.norm.weight");
                float* one = g ? (float*)malloc((size_t)g->ne[0] * sizeof(float)) : NULL;
                int64_t j;
                QT_CHECK(one != NULL && s.config.tied_embeddings);
                for (j = 0; one && j < g->ne[0]; ++j) one[j] = 1.0f;
                if (one) QT_OK(quarot_tensor_set_row_f32(g, 0, one));
                free(one);
            }
            if (nan) {   /* f16 NaN at row 200, column 3 of the embedding */
                quarot_tensor* t = qx_store_find(&s, "model.embed_tokens.weight");
                const uint16_t bits = 0x7e00u;
                QT_CHECK(t && t->dtype == QUAROT_DTYPE_F16);
                if (t) memcpy((char*)t->data + 200 * t->nb[1] + 3 * 2, &bits, 2);
            }
            snprintf(in, sizeof in, "%s/win_in%d%s", g_tmp, c, cases[c].gguf == 1 ? ".gguf" : "");
            if (cases[c].gguf == 1) {
                qx_gguf_save_opts so;
                memset(&so, 0, sizeof so);
                so.dtype = cases[c].dt;
                QT_OK(qx_gguf_save(&s, in, &so, &e));
            } else {
                qx_st_save_opts so;
                memset(&so, 0, sizeof so);
                so.force = 1;
                QT_OK(qx_st_save(&s, in, &so, &e));
            }
            qx_store_free(&s);
            for (k = 0; k < 2; ++k) {
                qx_rotate_file_stats st;
                snprintf(out[k], sizeof out[k], "%s/win_out%d_%d_%d%s", g_tmp, c, nan, k, cases[c].gguf == 1 ? ".gguf" : cases[c].gguf == 2 ? ".bin" : "");
                r = rotate_to(in, out[k], cases[c].gguf == 2 ? "llama2c-v0" : NULL, k == 0 ? cases[c].win : -1, 0, &st, &e);
                if (nan) {
                    QT_ERR(r, QUAROT_ERR_NONFINITE);
                    QT_CHECKF(strstr(e.msg, "tensor 'model.embed_tokens.weight' has NaN or Inf at element") && strstr(e.msg, "(row 200, column 3)"),
                              "message: %s", e.msg);
                    QT_CHECKF(!qx_path_exists(out[k]), "%s left behind", out[k]);
                    continue;
                }
                QT_OK(r);
                if (r != QUAROT_OK) { printf("    %s\n", e.msg); break; }
                if (k == 0) {
                    QT_EQ_INT(st.global_window_rows, cases[c].why ? 0 : cases[c].win);
                    QT_EQ_INT(st.global_windows, cases[c].why ? 0 : (256 + cases[c].win - 1) / cases[c].win);
                    QT_CHECKF(cases[c].why ? strstr(st.global_whole_why, cases[c].why) != NULL : st.global_whole_why[0] == '\0',
                              "%s: why \"%s\"", cases[c].arch, st.global_whole_why);
                    printf("    %s %s -> %s: %s%s\n", cases[c].arch, quarot_dtype_name(cases[c].dt),
                           cases[c].gguf == 1 ? "gguf" : cases[c].gguf == 2 ? "llama2.c" : "safetensors",
                           cases[c].why ? "whole copies: " : "windows, ", cases[c].why ? st.global_whole_why : st.untied ? "untied" : "lm_head as in the input");
                } else {
                    QT_EQ_INT(st.global_window_rows, 0);
                }
            }
            if (nan || r != QUAROT_OK) continue;
            if (cases[c].gguf) {
                QT_CHECKF(same_file(out[0], out[1]), "%s %s: windows change the bytes", cases[c].arch, quarot_dtype_name(cases[c].dt));
            } else {
                snprintf(f0, sizeof f0, "%s/model.safetensors", out[0]);
                snprintf(f1, sizeof f1, "%s/model.safetensors", out[1]);
                QT_CHECKF(same_file(f0, f1), "%s %s: windows change the bytes", cases[c].arch, quarot_dtype_name(cases[c].dt));
                snprintf(f0, sizeof f0, "%s/config.json", out[0]);
                snprintf(f1, sizeof f1, "%s/config.json", out[1]);
                QT_CHECK(same_file(f0, f1));
            }
        }
}

/* qx_out_tensor's f32 -> f16 / bf16 rows convert the floats directly (quarot_convert) where every
   value fits, else through f64 as before: the same bits for every f16 value, the midpoints between
   neighbours and one f32 ulp either side of them, and the same around every bf16 value (ties to
   even, subnormals, the largest finite values, values that round to Inf in f16), for both dtypes,
   serially and with the rows spread over a pool (qx_out.env); a value that rounds to Inf is still refused with its row. */
static void test_narrow_rows(void) {
    const int64_t ne0 = 1024;
    int64_t n = 0, n16, rows, k, ne[2];
    qx_pool* pool;
    quarot_env env;
    float* v = (float*)malloc(((size_t)0x7c00 + 0x7f7f) * 4 * sizeof(float) + 4096 * sizeof(float));
    double* d;
    int h, which;
    QT_CHECK(v != NULL);
    if (!v) return;
    for (h = 0; h < 0x7c00; ++h) {   /* every finite positive half and its neighbourhood, both signs */
        uint16_t hh[2];
        float ab[2], a, b, mid;
        hh[0] = (uint16_t)h;
        hh[1] = (uint16_t)(h + 1 < 0x7c00 ? h + 1 : h);
        quarot_f16_to_f32(hh, ab, 2);
        a = ab[0];
        b = ab[1];
        mid = (float)(((double)a + (double)b) / 2);
        v[n++] = a;
        v[n++] = -mid;
        v[n++] = nextafterf(mid, 0.0f);
        v[n++] = -nextafterf(mid, 1e30f);
    }
    while (n % ne0) v[n++] = 1.0f;
    n16 = n;   /* f16 writes those; bf16 writes all */
    for (h = 0; h < 0x7f7f; ++h) {   /* the same around every finite positive bf16 */
        uint32_t ua = (uint32_t)h << 16, ub = (uint32_t)(h + 1) << 16;
        float a, b, mid;
        memcpy(&a, &ua, 4);
        memcpy(&b, &ub, 4);
        mid = (float)(((double)a + (double)b) / 2);
        v[n++] = -a;
        v[n++] = mid;
        v[n++] = -nextafterf(mid, 0.0f);
        v[n++] = nextafterf(mid, 3e38f);
    }
    while (n % ne0) v[n++] = 1.0f;
    d = (double*)malloc((size_t)ne0 * sizeof *d);
    pool = qx_pool_create(3);
    qx_pool_env(pool, &env);
    for (which = 0; which < 4 && d; ++which) {   /* f16, bf16; serial, then on a pool of 3 */
        quarot_dtype dt = which & 1 ? QUAROT_DTYPE_BF16 : QUAROT_DTYPE_F16;
        int64_t nw = which & 1 ? n : n16;
        quarot_tensor t, want;
        qx_out o;
        qx_err e;
        size_t got_n = 0;
        unsigned char* got;
        unsigned char* ref = (unsigned char*)malloc((size_t)nw * 2);
        const char* path = tmp_path("narrow.bin");
        rows = nw / ne0;
        ne[0] = ne0;
        ne[1] = rows;
        QT_OK(quarot_tensor_init(&t, v, QUAROT_DTYPE_F32, 2, ne));
        QT_OK(quarot_tensor_init(&want, ref, dt, 2, ne));
        for (k = 0; k < rows; ++k) {   /* the f64 path's bits */
            int64_t i;
            for (i = 0; i < ne0; ++i) d[i] = (double)v[k * ne0 + i];
            QT_OK(quarot_tensor_set_row_f64(&want, k, d));
        }
        QT_OK(qx_out_begin(&o, path, 1, &e));
        if (which >= 2) o.env = &env;
        QT_OK(qx_out_tensor(&o, 0, dt, &t, 0, 0, "narrow", &e));
        QT_OK(qx_out_sync(&o, (uint64_t)nw * 2, &e));
        QT_OK(qx_out_publish(&o, &e));
        qx_out_abort(&o);
        got = read_all(path, &got_n);
        QT_CHECKF(got && got_n == (size_t)nw * 2 && memcmp(got, ref, got_n) == 0, "%s%s: the direct rows differ from the f64 path",
                  quarot_dtype_name(dt), which >= 2 ? " (pool)" : "");
        free(got);
        free(ref);
        remove(path);
    }
    for (which = 0; which < 2; ++which) {   /* 65520 rounds to Inf in f16: refused, row named (serial, pool) */
        quarot_tensor t;
        qx_out o;
        qx_err e;
        v[3 * ne0 + 5] = 65520.0f;
        ne[0] = ne0;
        ne[1] = 4;
        QT_OK(quarot_tensor_init(&t, v, QUAROT_DTYPE_F32, 2, ne));
        QT_OK(qx_out_begin(&o, tmp_path("narrow_bad.bin"), 1, &e));
        if (which) o.env = &env;
        QT_ERR(qx_out_tensor(&o, 0, QUAROT_DTYPE_F16, &t, 0, 0, "narrow", &e), QUAROT_ERR_OVERFLOW);
        QT_CHECKF(strstr(e.msg, "65520") && strstr(e.msg, "row 3"), "%s", e.msg);
        qx_out_abort(&o);
    }
    qx_pool_destroy(pool);
    free(d);
    free(v);
}

int main(int argc, char** argv) {
    const char* slash = strrchr(argv[0], '/');
    size_t dl = slash ? (size_t)(slash - argv[0]) : 0;
    (void)argc;
    snprintf(g_bin, sizeof g_bin, "%.*s%squarot", (int)dl, argv[0], dl ? "/../" : "../");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qx_direct_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        printf("test_direct: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    QT_RUN(test_block_writer);
    QT_RUN(test_block_gaps);
    QT_RUN(test_narrow_rows);
    QT_RUN(test_rotate_same_bytes);
    QT_RUN(test_globals_first);
    QT_RUN(test_global_windows);
    {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
        if (system(cmd) != 0) printf("  could not remove %s\n", g_tmp);
    }
    return qt_finish("test_direct");
}
