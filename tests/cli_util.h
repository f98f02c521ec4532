/* cli_util.h - helpers shared by the CLI tests (test_cli_*.c, test_engine_packed.c): running a
   program through $QT_RUNNER with its stdout and stderr captured, scratch paths and files, the
   byte-level llama2.c tokenizer and the model / text files of the synthetic models, reading numbers
   out of the tool's reports.
   Include after qt.h; the including test sets g_bin (the quarot binary) and g_tmp (its scratch
   directory). */
#ifndef CLI_UTIL_H
#define CLI_UTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/qx_file.h"
#include "formats/qx_llama2c.h"
#include "formats/qx_safetensors.h"
#include "model/qx_synth.h"

/* UNDER_ASAN: 1 in an AddressSanitizer build (peak-memory checks loosen or skip there: its shadow
   memory and quarantine inflate the peaks). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif
/* CLI_SANITIZED: 1 under AddressSanitizer, and under UBSan where the compiler can tell (clang):
   the heaviest runs shrink there. */
#if defined(__SANITIZE_ADDRESS__)
#define CLI_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define CLI_SANITIZED 1
#endif
#endif
#ifndef CLI_SANITIZED
#define CLI_SANITIZED 0
#endif

QT_UNUSED static char g_bin[4096], g_tmp[256];
QT_UNUSED static char g_out[1 << 16], g_err[1 << 16];   /* the last run's stdout and stderr */

/* The number written after `key` in text (e.g. a "peak RSS " field of the tool's report); -1 when
   key is not there. */
QT_UNUSED static double field_after(const char* text, const char* key) {
    const char* p = strstr(text, key);
    return p ? atof(p + strlen(key)) : -1.0;
}

QT_UNUSED static void cu_read_text(const char* path, char* buf, size_t cap) {
    FILE* f = fopen(path, "rb");
    size_t n = 0;
    buf[0] = '\0';
    if (!f) return;
    n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs `prog args` (through $QT_RUNNER, e.g. qemu), stdout / stderr into g_out / g_err; returns the
   exit status (-1 when it did not exit normally). `pre` is a shell prefix such as "ulimit -f 64;"
   or "". prog and the capture files are quoted; args go to the shell as they are. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
QT_UNUSED static int run_prog(const char* pre, const char* prog, const char* fmt, ...) {
    char args[8192], cmd[16384], po[512], pe[512];
    const char* runner = getenv("QT_RUNNER");
    va_list ap;
    int st;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(po, sizeof po, "%s/stdout.txt", g_tmp);
    snprintf(pe, sizeof pe, "%s/stderr.txt", g_tmp);
    snprintf(cmd, sizeof cmd, "%s %s '%s' %s >'%s' 2>'%s'", pre, runner ? runner : "", prog, args, po, pe);
    st = system(cmd);
    cu_read_text(po, g_out, sizeof g_out);
    cu_read_text(pe, g_err, sizeof g_err);
    remove(po);
    remove(pe);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

#define CLI(...) run_prog("", g_bin, __VA_ARGS__)

QT_UNUSED static int count_lines(const char* s) {
    int n = 0;
    for (; *s; ++s) n += *s == '\n';
    return n;
}

/* g_tmp/name, in one of 8 rotating buffers (so a few can be used in one call). */
QT_UNUSED static const char* tmp_path(const char* name) {
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, name);
    return buf[k];
}

QT_UNUSED static int write_str(const char* path, const char* s) { return qt_write_file(path, s, strlen(s)); }

/* The whole file as bytes (qt_read_file). */
QT_UNUSED static unsigned char* read_all(const char* path, size_t* n) { return (unsigned char*)qt_read_file(path, n); }

/* 1 when both files exist and hold the same bytes. */
QT_UNUSED static int same_file(const char* a, const char* b) {
    size_t na = 0, nb = 0;
    unsigned char* x = read_all(a, &na);
    unsigned char* y = read_all(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* Byte-level llama2.c tokenizer: <unk>, <s>, </s>, the 256 <0xXX> byte pieces, the 95 printable
   ASCII characters, and a few merges (so BPE has work). SYN_VOCAB pieces. */
QT_UNUSED static const char* const CU_MERGES[] = {"th", "he", "the", "in", "er", "an", " t", " a", " the", "ed", "nd", "ing"};
#define CU_N_MERGES ((int)(sizeof CU_MERGES / sizeof CU_MERGES[0]))
#define SYN_VOCAB (259 + 95 + CU_N_MERGES)

QT_UNUSED static int write_tokenizer(const char* path) {
    FILE* f = fopen(path, "wb");
    uint32_t maxlen = 8, l;
    float score;
    int i;
    char piece[16];
    if (!f) return 0;
    fwrite(&maxlen, 4, 1, f);
    for (i = 0; i < SYN_VOCAB; ++i) {
        if (i == 0) snprintf(piece, sizeof piece, "<unk>");
        else if (i == 1) snprintf(piece, sizeof piece, "\n<s>\n");
        else if (i == 2) snprintf(piece, sizeof piece, "\n</s>\n");
        else if (i < 259) snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
        else if (i < 259 + 95) { piece[0] = (char)(32 + i - 259); piece[1] = '\0'; }
        else snprintf(piece, sizeof piece, "%s", CU_MERGES[i - 259 - 95]);
        score = i < 259 + 95 ? 0.0f : (float)(i - 259 - 95 + 1);
        l = (uint32_t)strlen(piece);
        fwrite(&score, 4, 1, f);
        fwrite(&l, 4, 1, f);
        fwrite(piece, 1, l, f);
    }
    return fclose(f) == 0;
}

/* The small synthetic LLaMA of the CLI tests (seed 3): hidden 64, intermediate 172 (the embedded
   order-172 table online), 2 layers, 4 heads / 2 KV heads of 16, vocab SYN_VOCAB, context 128. */
QT_UNUSED static void cu_synth_desc(qx_synth_desc* d) {
    memset(d, 0, sizeof *d);
    d->arch = "llama";
    d->seed = 3;
    d->vocab = SYN_VOCAB;
    d->rope_interleaved = 1;
    d->hidden = 64;
    d->intermediate = 172;
    d->n_layers = 2;
    d->n_heads = 4;
    d->n_kv_heads = 2;
    d->head_dim = 16;
    d->max_seq = 128;
}

/* An untied synthetic LLaMA (2 layers, as many KV heads as heads, context 64) stored as dt, saved as
   safetensors into dir; 1 on success (why on stdout otherwise). */
QT_UNUSED static int cu_save_llama_st(const char* dir, uint64_t seed, int64_t hidden, int64_t intermediate,
                                      int64_t heads, int64_t head_dim, int64_t vocab, quarot_dtype dt) {
    qx_synth_desc sd;
    qx_store s;
    qx_err e;
    qx_st_save_opts so;
    quarot_result r;
    memset(&sd, 0, sizeof sd);
    sd.arch = "llama";
    sd.seed = seed;
    sd.hidden = hidden;
    sd.intermediate = intermediate;
    sd.n_layers = 2;
    sd.n_heads = heads;
    sd.n_kv_heads = heads;
    sd.head_dim = head_dim;
    sd.vocab = vocab;
    sd.max_seq = 64;
    sd.tied = -1;
    sd.dtype = dt;
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { printf("    synth: %s\n", e.msg); return 0; }
    memset(&so, 0, sizeof so);
    so.force = 1;
    r = qx_st_save(&s, dir, &so, &e);
    qx_store_free(&s);
    if (r != QUAROT_OK) printf("    save %s: %s\n", dir, e.msg);
    return r == QUAROT_OK;
}

/* Writes the synthetic model of d as a llama2.c (v0) file at path; 0 (and why on stdout) when it
   cannot. */
QT_UNUSED static int cu_write_synth_l2c(const qx_synth_desc* d, const char* path) {
    qx_store s;
    qx_err e;
    qx_l2c_write_opts wo;
    if (qx_synth_model(&s, d, &e) != QUAROT_OK) { printf("    synth: %s\n", e.msg); return 0; }
    memset(&wo, 0, sizeof wo);
    wo.format = QX_L2C_V0;
    if (qx_l2c_write_file(&s, path, &wo, &e) != QUAROT_OK) { printf("    write: %s\n", e.msg); qx_store_free(&s); return 0; }
    qx_store_free(&s);
    return 1;
}

/* A text file of `reps` copies of one plain sentence (every byte in the synthetic tokenizer). */
QT_UNUSED static int cu_write_sentences(const char* path, int reps) {
    FILE* f = fopen(path, "wb");
    int i;
    if (!f) return 0;
    for (i = 0; i < reps; ++i) fputs("the cat sat on the mat and then it ran into the garden where a bird sang. ", f);
    return fclose(f) == 0;
}

/* The first number of the table row `row` ("FP32", "W4A16") in g_out (a row starts a line and the
   name is followed by a space); -1 when absent. */
QT_UNUSED static double row_value(const char* row) {
    const char* p = g_out;
    size_t n = strlen(row);
    while ((p = strstr(p, row)) != NULL) {
        if ((p == g_out || p[-1] == '\n') && p[n] == ' ') return atof(p + n);
        p += n;
    }
    return -1.0;
}

/* The first two numbers of the table row `label` in out (eval's "FP32 <no rotation> <QuaRot> ..."):
   1 when found. */
QT_UNUSED static int table_row(const char* out, const char* label, double* a, double* b) {
    const char* p = out;
    size_t n = strlen(label);
    while (p && *p) {
        if (strncmp(p, label, n) == 0 && p[n] == ' ') return sscanf(p + n, "%lf %lf", a, b) == 2;
        p = strchr(p, '\n');
        if (p) ++p;
    }
    return 0;
}

/* The start of a CLI test's main: g_bin = the quarot binary one level above the test program
   (build/tests/test_x -> build/quarot), g_tmp = a new scratch directory /tmp/qx_NAME_XXXXXX. When
   either cannot be had: 0, after a line saying why and the summary line of a failed run of NAME. */
QT_UNUSED static int cu_start(const char* argv0, const char* name) {
    const char* slash = strrchr(argv0, '/');
    size_t dl = slash ? (size_t)(slash - argv0) : 0;
    int ok;
    snprintf(g_bin, sizeof g_bin, "%.*s%squarot", (int)dl, argv0, dl ? "/../" : "../");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qx_%s_XXXXXX", name);
    ok = access(g_bin, X_OK) == 0 && mkdtemp(g_tmp) != NULL;
    if (!ok) {
        printf("  cannot set up (%s, %s; build the binary with make)\n", g_tmp, g_bin);
        printf("%s: 0 passed, 1 failed, 0 skipped\n", name);
    }
    return ok;
}

/* The end of a CLI test's main: removes g_tmp and what it holds (kept when QT_KEEP is set). */
QT_UNUSED static void cu_finish(void) {
    char cmd[512];
    if (getenv("QT_KEEP")) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) printf("  could not remove %s\n", g_tmp);
}

#endif
