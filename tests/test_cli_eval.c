/* `quarot eval`, `quarot plot` and `quarot demo`, run as a user runs them: the test starts the
   quarot binary built beside it (<dir of this program>/../quarot, with $QT_RUNNER in front, e.g.
   qemu) and reads its stdout, stderr and exit code.

   Independent truth for perplexity: a straightforward llama2.c forward pass written here (its own
   reader of the legacy .bin layout, double precision throughout, run.c's order of operations, one
   token at a time with a KV cache; NOT qx_forward), its own windowing (stream: the whole text
   encoded once, [BOS] + 255-token chunks; docs: paragraphs split at blank lines, each from BOS,
   long ones continued), and a double log-softmax. The CLI's FP32 numbers (both columns: the
   rotated model must give the same perplexity) must agree with it to 4 significant digits, i.e.
   |cli - ref| <= half a unit of the 4th significant digit.

   Models: a synthetic LLaMA written here as a llama2.c checkpoint (untied classifier, GQA) with a
   hand-made byte-level tokenizer, so everything but the stories260K checks runs without ../shared;
   and stories260K (../shared; skipped when absent), where QuaRot must also lower W4A4 and W8A4
   perplexity by at least 10% on the first 30 stream windows.
   QT_QUICK: fewer windows, the demo without its stories260K part, and no 10-second check (which
   also only applies to optimized builds without sanitizers or an emulator). */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "formats/qx_llama2c.h"
#include "model/qx_synth.h"
#include "tokenizer/qx_tokenizer.h"

#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char BIN[4096];      /* the quarot binary */
static char TMP[4096];      /* scratch directory, removed at the end */
static char SYN_MODEL[4200], SYN_TEXT[4200], SYN_NOTOK[4200], SHORT_TEXT[4200];
static int SYN_OK;

/* ---- running the CLI ---------------------------------------------------------------------- */

typedef struct cli_run {
    int rc;
    double secs;
    char* out;
    char* err;
} cli_run;

/* Run `quarot ARGS` (ARGS already shell-quoted where needed). */
static void run_cli(cli_run* r, const char* args) {
    static char cmd[16384];
    const char* runner = getenv("QT_RUNNER");
    double t0;
    int st;
    snprintf(cmd, sizeof cmd, "%s '%s' %s >'%s/out.txt' 2>'%s/err.txt'", runner ? runner : "", BIN, args, TMP, TMP);
    t0 = qt_now();
    st = system(cmd);
    r->secs = qt_now() - t0;
    r->rc = st == -1 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 128);
    snprintf(cmd, sizeof cmd, "%s/out.txt", TMP);
    r->out = qt_read_file(cmd, NULL);
    snprintf(cmd, sizeof cmd, "%s/err.txt", TMP);
    r->err = qt_read_file(cmd, NULL);
    if (!r->out) r->out = (char*)calloc(1, 1);
    if (!r->err) r->err = (char*)calloc(1, 1);
}

static void run_free(cli_run* r) {
    free(r->out);
    free(r->err);
}

/* |a - b| within half a unit of the 4th significant digit of b */
static int same_4_digits(double a, double b) {
    double unit = pow(10.0, floor(log10(fabs(b))) - 3.0);
    return fabs(a - b) <= 0.5 * unit;
}

/* ---- the independent reference: llama2.c legacy checkpoint, double precision ---------------- */

typedef struct ref_model {
    int dim, hidden, L, H, KVH, V, seq, hs, kv_dim;
    float* blob;
    const float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
} ref_model;

static int ref_load(ref_model* m, const char* path) {
    FILE* f = fopen(path, "rb");
    int32_t h[7];
    long size;
    size_t nf;
    const float* p;
    int shared;
    memset(m, 0, sizeof *m);
    if (!f) return 0;
    if (fread(h, sizeof h, 1, f) != 1) { fclose(f); return 0; }
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 28, SEEK_SET);
    nf = (size_t)(size - 28) / 4;
    m->blob = (float*)malloc(nf * sizeof(float));
    if (!m->blob || fread(m->blob, sizeof(float), nf, f) != nf) { fclose(f); free(m->blob); return 0; }
    fclose(f);
    m->dim = h[0]; m->hidden = h[1]; m->L = h[2]; m->H = h[3]; m->KVH = h[4];
    shared = h[5] > 0;
    m->V = shared ? h[5] : -h[5];
    m->seq = h[6];
    m->hs = m->dim / m->H;
    m->kv_dim = m->KVH * m->hs;
    /* run.c's memory_map_weights order */
    p = m->blob;
    m->emb = p; p += (size_t)m->V * m->dim;
    m->rms_att = p; p += (size_t)m->L * m->dim;
    m->wq = p; p += (size_t)m->L * m->dim * m->dim;
    m->wk = p; p += (size_t)m->L * m->dim * m->kv_dim;
    m->wv = p; p += (size_t)m->L * m->dim * m->kv_dim;
    m->wo = p; p += (size_t)m->L * m->dim * m->dim;
    m->rms_ffn = p; p += (size_t)m->L * m->dim;
    m->w1 = p; p += (size_t)m->L * m->dim * m->hidden;
    m->w2 = p; p += (size_t)m->L * m->hidden * m->dim;
    m->w3 = p; p += (size_t)m->L * m->dim * m->hidden;
    m->rms_final = p; p += m->dim;
    p += (size_t)m->seq * m->hs;   /* freq_cis_real and _imag: [seq][hs/2] each */
    m->wcls = shared ? m->emb : p;
    if (!shared) p += (size_t)m->V * m->dim;
    if ((size_t)(p - m->blob) != nf) { free(m->blob); m->blob = NULL; return 0; }
    return 1;
}

static void ref_rmsnorm(double* o, const double* x, const float* w, int n) {
    double ss = 0;
    int i;
    for (i = 0; i < n; ++i) ss += x[i] * x[i];
    ss = 1.0 / sqrt(ss / n + 1e-5);
    for (i = 0; i < n; ++i) o[i] = w[i] * (ss * x[i]);
}

/* y[d] = W[d][n] x[n] */
static void ref_matvec(double* y, const float* W, const double* x, int n, int d) {
    int i, j;
    for (i = 0; i < d; ++i) {
        double s = 0;
        for (j = 0; j < n; ++j) s += (double)W[(size_t)i * n + j] * x[j];
        y[i] = s;
    }
}

/* Sum of -log p(tok[t+1] | tok[0..t]) over t = 0 .. len-2, the window run from position 0. */
static double ref_window_nll(const ref_model* m, const int32_t* tok, int len) {
    int D = m->dim, KV = m->kv_dim, HS = m->hs, pos, l, i, h, t;
    double *x = (double*)calloc((size_t)D, sizeof(double)), *xb = (double*)calloc((size_t)D, sizeof(double));
    double *q = (double*)calloc((size_t)D, sizeof(double)), *att = (double*)calloc((size_t)len, sizeof(double));
    double *ao = (double*)calloc((size_t)D, sizeof(double)), *o = (double*)calloc((size_t)D, sizeof(double));
    double *h1 = (double*)calloc((size_t)m->hidden, sizeof(double)), *h3 = (double*)calloc((size_t)m->hidden, sizeof(double));
    double* logit = (double*)calloc((size_t)m->V, sizeof(double));
    double* kc = (double*)calloc((size_t)m->L * len * KV, sizeof(double));
    double* vc = (double*)calloc((size_t)m->L * len * KV, sizeof(double));
    double nll = 0;
    for (pos = 0; pos + 1 < len; ++pos) {
        for (i = 0; i < D; ++i) x[i] = m->emb[(size_t)tok[pos] * D + i];
        for (l = 0; l < m->L; ++l) {
            double* k = kc + ((size_t)l * len + pos) * KV;
            double* v = vc + ((size_t)l * len + pos) * KV;
            ref_rmsnorm(xb, x, m->rms_att + (size_t)l * D, D);
            ref_matvec(q, m->wq + (size_t)l * D * D, xb, D, D);
            ref_matvec(k, m->wk + (size_t)l * KV * D, xb, D, KV);
            ref_matvec(v, m->wv + (size_t)l * KV * D, xb, D, KV);
            /* RoPE on pairs (i, i+1), frequency from the position inside the head */
            for (i = 0; i < D; i += 2) {
                double fr = 1.0 / pow(10000.0, (double)(i % HS) / HS), c = cos(pos * fr), s = sin(pos * fr), a, b;
                a = q[i]; b = q[i + 1];
                q[i] = a * c - b * s; q[i + 1] = a * s + b * c;
                if (i < KV) { a = k[i]; b = k[i + 1]; k[i] = a * c - b * s; k[i + 1] = a * s + b * c; }
            }
            for (h = 0; h < m->H; ++h) {
                int kvh = h / (m->H / m->KVH);
                double mx = -1e300, sum = 0;
                for (t = 0; t <= pos; ++t) {
                    const double* kt = kc + ((size_t)l * len + t) * KV + kvh * HS;
                    double s = 0;
                    for (i = 0; i < HS; ++i) s += q[h * HS + i] * kt[i];
                    att[t] = s / sqrt((double)HS);
                    if (att[t] > mx) mx = att[t];
                }
                for (t = 0; t <= pos; ++t) sum += (att[t] = exp(att[t] - mx));
                for (i = 0; i < HS; ++i) ao[h * HS + i] = 0;
                for (t = 0; t <= pos; ++t) {
                    const double* vt = vc + ((size_t)l * len + t) * KV + kvh * HS;
                    for (i = 0; i < HS; ++i) ao[h * HS + i] += att[t] / sum * vt[i];
                }
            }
            ref_matvec(o, m->wo + (size_t)l * D * D, ao, D, D);
            for (i = 0; i < D; ++i) x[i] += o[i];
            ref_rmsnorm(xb, x, m->rms_ffn + (size_t)l * D, D);
            ref_matvec(h1, m->w1 + (size_t)l * m->hidden * D, xb, D, m->hidden);
            ref_matvec(h3, m->w3 + (size_t)l * m->hidden * D, xb, D, m->hidden);
            for (i = 0; i < m->hidden; ++i) h1[i] = h1[i] / (1.0 + exp(-h1[i])) * h3[i];
            ref_matvec(o, m->w2 + (size_t)l * D * m->hidden, h1, m->hidden, D);
            for (i = 0; i < D; ++i) x[i] += o[i];
        }
        ref_rmsnorm(xb, x, m->rms_final, D);
        ref_matvec(logit, m->wcls, xb, D, m->V);
        {
            double mx = logit[0], sum = 0;
            for (i = 1; i < m->V; ++i) if (logit[i] > mx) mx = logit[i];
            for (i = 0; i < m->V; ++i) sum += exp(logit[i] - mx);
            nll += mx + log(sum) - logit[tok[pos + 1]];
        }
    }
    free(x); free(xb); free(q); free(att); free(ao); free(o); free(h1); free(h3); free(logit); free(kc); free(vc);
    return nll;
}

/* Reference perplexity over the first n_win windows of seq tokens, both windowings written out
   plainly: stream = one encoding of the whole text; docs = paragraphs (runs of non-blank lines
   joined by "\n"), each encoded alone, chunks of seq-1 after a BOS. */
static double ref_ppl(const ref_model* m, const qx_tokenizer* tk, const char* text_path, int docs, int seq, int n_win,
                      int64_t* scored) {
    char* text = qt_read_file(text_path, NULL);
    size_t len = text ? strlen(text) : 0;
    int32_t* toks = (int32_t*)malloc((size_t)(len + 8) * sizeof(int32_t));
    int32_t* win = (int32_t*)malloc((size_t)seq * sizeof(int32_t));
    int64_t n = 0, pos, done = 0;
    double nll = 0;
    qx_err e;
    *scored = 0;
    if (!text || !toks || !win) { free(text); free(toks); free(win); return -1; }
    if (!docs) {
        if (qx_tokenizer_encode(tk, text, len, 0, 0, toks, (int64_t)len + 8, &n, &e) != QUAROT_OK) n = 0;
        for (pos = 0; pos + seq - 1 <= n && done < n_win; pos += seq - 1, ++done) {
            win[0] = 1;
            memcpy(win + 1, toks + pos, (size_t)(seq - 1) * sizeof(int32_t));
            nll += ref_window_nll(m, win, seq);
            *scored += seq - 1;
        }
    } else {
        char* para = (char*)malloc(len + 1);
        size_t plen = 0, i = 0;
        while (i <= len && done < n_win) {
            size_t j = i, k;
            int blank = 1;
            while (j < len && text[j] != '\n') ++j;
            for (k = i; k < j; ++k) if (text[k] != ' ' && text[k] != '\t' && text[k] != '\r') blank = 0;
            if (!blank) {
                if (plen) para[plen++] = '\n';
                memcpy(para + plen, text + i, j - i);
                plen += j - i;
            }
            if ((blank || j >= len) && plen) {
                if (qx_tokenizer_encode(tk, para, plen, 0, 0, toks, (int64_t)len + 8, &n, &e) != QUAROT_OK) n = 0;
                for (pos = 0; pos < n && done < n_win; pos += seq - 1, ++done) {
                    int c = (int)(n - pos < seq - 1 ? n - pos : seq - 1);
                    win[0] = 1;
                    memcpy(win + 1, toks + pos, (size_t)c * sizeof(int32_t));
                    nll += ref_window_nll(m, win, c + 1);
                    *scored += c;
                }
                plen = 0;
            }
            i = j + 1;
        }
        free(para);
    }
    free(text);
    free(toks);
    free(win);
    return *scored ? exp(nll / (double)*scored) : -1;
}

/* ---- the synthetic model, tokenizer and texts ---------------------------------------------- */

/* Paragraphs of words separated by blank lines; the first one long (several windows of 64). */
static int write_text(const char* path, int n_par) {
    static const char* const words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "ran", "into",
                                        "garden", "where", "there", "was", "big", "tree", "bird", "sang", "happy",
                                        "song", "under", "sun", "playing", "with", "friend", "ended"};
    FILE* f = fopen(path, "wb");
    int p, w;
    if (!f) return 0;
    qt_seed(11);
    for (p = 0; p < n_par; ++p) {
        int n = p == 0 ? 90 : 6 + (int)(qt_uniform() * 30);
        for (w = 0; w < n; ++w) {
            fputs(words[(int)(qt_uniform() * (double)(sizeof words / sizeof words[0]))], f);
            fputc(w + 1 < n ? (qt_uniform() < 0.1 ? '\n' : ' ') : '.', f);
        }
        fputs(p + 1 < n_par ? "\n\n" : "\n", f);
    }
    return fclose(f) == 0;
}

static int setup_synthetic(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    char dir[4200], tokp[4300];
    qx_l2c_write_opts wo;
    int ok = 1;
    cu_synth_desc(&d);
    if (qx_synth_model(&s, &d, &e) != QUAROT_OK) { printf("    synth: %s\n", e.msg); return 0; }
    memset(&wo, 0, sizeof wo);
    wo.format = QX_L2C_V0;
    snprintf(dir, sizeof dir, "%s/syn", TMP);
    mkdir(dir, 0755);
    snprintf(SYN_MODEL, sizeof SYN_MODEL, "%s/syn/model.bin", TMP);
    snprintf(tokp, sizeof tokp, "%s/syn/tokenizer.bin", TMP);
    if (qx_l2c_write_file(&s, SYN_MODEL, &wo, &e) != QUAROT_OK) { printf("    write: %s\n", e.msg); ok = 0; }
    snprintf(dir, sizeof dir, "%s/notok", TMP);
    mkdir(dir, 0755);
    snprintf(SYN_NOTOK, sizeof SYN_NOTOK, "%s/notok/model.bin", TMP);
    if (ok && qx_l2c_write_file(&s, SYN_NOTOK, &wo, &e) != QUAROT_OK) { printf("    write: %s\n", e.msg); ok = 0; }
    qx_store_free(&s);
    snprintf(SYN_TEXT, sizeof SYN_TEXT, "%s/text.txt", TMP);
    snprintf(SHORT_TEXT, sizeof SHORT_TEXT, "%s/short.txt", TMP);
    if (ok) ok = write_tokenizer(tokp) && write_text(SYN_TEXT, 40);
    if (ok) {
        FILE* f = fopen(SHORT_TEXT, "wb");
        ok = f && fputs("a cat.\n", f) >= 0 && fclose(f) == 0;
    }
    return ok;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_help(void) {
    static const char* const cmds[] = {"eval", "plot", "demo"};
    int i;
    for (i = 0; i < 3; ++i) {
        cli_run r;
        char args[64], want[64];
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        snprintf(want, sizeof want, "usage: quarot %s", cmds[i]);
        run_cli(&r, args);
        QT_EQ_INT(r.rc, 0);
        QT_CHECKF(strstr(r.out, want) != NULL, "quarot %s --help: no usage line on stdout", cmds[i]);
        QT_CHECK(r.err[0] == '\0');
        run_free(&r);
    }
    {
        /* the windowings are documented in eval --help */
        cli_run r;
        run_cli(&r, "eval --help");
        QT_CHECK(strstr(r.out, "stream") && strstr(r.out, "docs") && strstr(r.out, "blank lines"));
        run_free(&r);
    }
}

/* FP32 of both columns vs the reference, for one model / text / windowing. */
static void check_fp_vs_reference(const char* model, const char* tok_path, const char* text, int docs, int seq, int n_win) {
    ref_model m;
    qx_tokenizer tk;
    qx_err e;
    cli_run r;
    char args[16384];
    double ref, a = 0, b = 0;
    int64_t scored = 0;
    long long cli_scored = -1;
    const char* p;
    QT_CHECK(ref_load(&m, model));
    if (!m.blob) return;
    QT_OK(qx_tokenizer_load(&tk, tok_path, m.V, &e));
    ref = ref_ppl(&m, &tk, text, docs, seq, n_win, &scored);
    qx_tokenizer_free(&tk);
    free(m.blob);
    snprintf(args, sizeof args, "eval '%s' --text '%s' --windows %d --seq-len %d --windowing %s --w-bits 16 --a-bits 16 --quiet",
             model, text, n_win, seq, docs ? "docs" : "stream");
    run_cli(&r, args);
    QT_EQ_INT(r.rc, 0);
    QT_CHECKF(table_row(r.out, "FP32", &a, &b), "no FP32 row in:\n%s%s", r.out, r.err);
    p = strstr(r.out, "scored");
    if (p) sscanf(p, "scored %lld", &cli_scored);
    QT_EQ_INT(cli_scored, scored);
    QT_CHECKF(ref > 0 && same_4_digits(a, ref), "%s windowing: CLI FP32 %.6f vs reference %.6f", docs ? "docs" : "stream", a, ref);
    QT_CHECKF(ref > 0 && same_4_digits(b, ref), "%s windowing: CLI FP32 QuaRot %.6f vs reference %.6f", docs ? "docs" : "stream", b, ref);
    printf("    %s, %s windowing, %d windows (%lld tokens): reference %.5f, CLI %.5f / QuaRot %.5f\n", strrchr(model, '/') + 1,
           docs ? "docs" : "stream", n_win, (long long)scored, ref, a, b);
    run_free(&r);
}

static void test_synthetic_fp_matches_reference(void) {
    char tok[4300];
    int docs;
    if (!SYN_OK) { QT_CHECK(SYN_OK); return; }
    snprintf(tok, sizeof tok, "%s/syn/tokenizer.bin", TMP);
    for (docs = 0; docs < 2; ++docs) check_fp_vs_reference(SYN_MODEL, tok, SYN_TEXT, docs, 64, qt_quick() ? 3 : 6);
}

static void test_stories_fp_matches_reference(void) {
    char model[4096], tok[4096], text[4096];
    int docs;
    if (!qt_shared_path("models/stories260K/stories260K.bin") || !qt_shared_path("data/tinystories_eval.txt")) {
        QT_SKIP("../shared/models/stories260K not found");
        return;
    }
    snprintf(model, sizeof model, "%s", qt_shared_path("models/stories260K/stories260K.bin"));
    snprintf(tok, sizeof tok, "%s", qt_shared_path("models/stories260K/tok512.bin"));
    snprintf(text, sizeof text, "%s", qt_shared_path("data/tinystories_eval.txt"));
    for (docs = 0; docs < 2; ++docs) check_fp_vs_reference(model, tok, text, docs, 256, qt_quick() ? 2 : 6);
}

static void test_stories_quarot_lowers_quantized_ppl(void) {
    char args[8192];
    cli_run r;
    double n4 = 0, q4 = 0, n8 = 0, q8 = 0, f0 = 0, f1 = 0;
    int nw = qt_quick() ? 4 : 30;
    if (!qt_shared_path("models/stories260K/stories260K.bin") || !qt_shared_path("data/tinystories_eval.txt")) {
        QT_SKIP("../shared/models/stories260K not found");
        return;
    }
    snprintf(args, sizeof args, "eval '%s' --windows %d --quiet --text ", qt_shared_path("models/stories260K/stories260K.bin"), nw);
    snprintf(args + strlen(args), sizeof args - strlen(args), "'%s'", qt_shared_path("data/tinystories_eval.txt"));
    run_cli(&r, args);
    QT_EQ_INT(r.rc, 0);
    QT_CHECK(table_row(r.out, "FP32", &f0, &f1));
    QT_CHECK(table_row(r.out, "W4A4", &n4, &q4));
    QT_CHECK(table_row(r.out, "W8A4", &n8, &q8));
    QT_CHECK(strstr(r.out, "no rotation") && strstr(r.out, "QuaRot"));
    if (qt_quick()) {
        QT_CHECKF(q4 < n4 && q8 < n8, "QuaRot W4A4 %.4f vs %.4f, W8A4 %.4f vs %.4f", q4, n4, q8, n8);
    } else {
        QT_CHECKF(q4 <= 0.9 * n4, "W4A4: QuaRot %.4f is not 10%% below no rotation %.4f", q4, n4);
        QT_CHECKF(q8 <= 0.9 * n8, "W8A4: QuaRot %.4f is not 10%% below no rotation %.4f", q8, n8);
    }
    printf("    stories260K, %d stream windows: FP32 %.4f / %.4f; W4A4 %.4f -> %.4f (%.1f%%); W8A4 %.4f -> %.4f (%.1f%%)\n", nw, f0, f1, n4,
           q4, 100.0 * (q4 - n4) / n4, n8, q8, 100.0 * (q8 - n8) / n8);
    run_free(&r);
}

static void test_eval_options(void) {
    char args[16384];
    cli_run r;
    double a, b;
    if (!SYN_OK) { QT_CHECK(SYN_OK); return; }
    /* lists give every combination; KV adds R3 to the recipe; groups and clip are reported */
    snprintf(args, sizeof args, "eval '%s' --text '%s' --seq-len 64 --windows 2 --w-bits 4,8 --a-bits 8 --kv-bits 4 --group-size 4 --clip 0.9 --quiet",
             SYN_MODEL, SYN_TEXT);
    run_cli(&r, args);
    QT_CHECKF(r.rc == 0, "exit %d: %s", r.rc, r.err);
    QT_CHECK(table_row(r.out, "FP32", &a, &b));
    QT_CHECK(table_row(r.out, "W4A8KV4", &a, &b) && a > 0 && b > 0);
    QT_CHECK(table_row(r.out, "W8A8KV4", &a, &b) && a > 0 && b > 0);
    QT_CHECK(!table_row(r.out, "W4A4", &a, &b));
    QT_CHECK(strstr(r.out, "R3") != NULL);
    QT_CHECK(strstr(r.out, "groups of 4 ") != NULL);
    QT_CHECK(strstr(r.out, "clip 0.90") != NULL);
    QT_CHECK(r.err[0] == '\0');   /* --quiet */
    run_free(&r);
    /* progress on stderr without --quiet, the table alone on stdout */
    snprintf(args, sizeof args, "eval '%s' --text '%s' --seq-len 64 --windows 2", SYN_MODEL, SYN_TEXT);
    run_cli(&r, args);
    QT_EQ_INT(r.rc, 0);
    QT_CHECK(table_row(r.out, "W8A4", &a, &b));
    run_free(&r);
}

/* --threads: the same table (every digit) for 1 and 3 threads, quantized and FP32. */
static void test_eval_threads_same(void) {
    char args[16384];
    cli_run r1, r3;
    if (!SYN_OK) { QT_CHECK(SYN_OK); return; }
    snprintf(args, sizeof args, "eval '%s' --text '%s' --seq-len 64 --windows 3 --w-bits 4,16 --a-bits 4 --kv-bits 4 --quiet --threads 1",
             SYN_MODEL, SYN_TEXT);
    run_cli(&r1, args);
    QT_CHECKF(r1.rc == 0, "exit %d: %s", r1.rc, r1.err);
    args[strlen(args) - 1] = '3';
    run_cli(&r3, args);
    QT_CHECKF(r3.rc == 0, "exit %d: %s", r3.rc, r3.err);
    QT_CHECK(strstr(r1.out, "W4A4KV4") != NULL);
    QT_CHECKF(strcmp(r1.out, r3.out) == 0, "--threads 1 and 3 differ:\n%s\n---\n%s", r1.out, r3.out);
    run_free(&r1);
    run_free(&r3);
}

/* One error line on stderr, nothing on stdout, the documented exit code. */
static void expect_error(const char* args, int code, const char* needle) {
    cli_run r;
    run_cli(&r, args);
    QT_CHECKF(r.rc == code, "quarot %s: exit %d, expected %d (stderr: %s)", args, r.rc, code, r.err);
    QT_CHECKF(count_lines(r.err) == 1, "quarot %s: %d stderr lines:\n%s", args, count_lines(r.err), r.err);
    QT_CHECKF(strncmp(r.err, "quarot ", 7) == 0, "quarot %s: error line '%s'", args, r.err);
    QT_CHECKF(!needle || strstr(r.err, needle), "quarot %s: '%s' not in '%s'", args, needle, r.err);
    QT_CHECK(r.out[0] == '\0');
    run_free(&r);
}

static void test_eval_bad_input(void) {
    char a[16384];
    if (!SYN_OK) { QT_CHECK(SYN_OK); return; }
    snprintf(a, sizeof a, "eval '%s' --text '%s/missing.txt' --seq-len 64", SYN_MODEL, TMP);
    expect_error(a, 2, "missing.txt");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --seq-len 64", SYN_NOTOK, SYN_TEXT);
    expect_error(a, 2, "tokenizer");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --seq-len 64 --tokenizer '%s/none.bin'", SYN_MODEL, SYN_TEXT, TMP);
    expect_error(a, 2, "none.bin");
    snprintf(a, sizeof a, "eval '%s/missing.bin' --text '%s'", TMP, SYN_TEXT);
    expect_error(a, 2, "missing.bin");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --w-bits 9", SYN_MODEL, SYN_TEXT);
    expect_error(a, 1, "--w-bits");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --a-bits 4,x", SYN_MODEL, SYN_TEXT);
    expect_error(a, 1, "--a-bits");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --windows -3", SYN_MODEL, SYN_TEXT);
    expect_error(a, 1, "--windows");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --clip 0", SYN_MODEL, SYN_TEXT);
    expect_error(a, 1, "--clip");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --clip 1.5", SYN_MODEL, SYN_TEXT);
    expect_error(a, 1, "--clip");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --seq-len 12abc", SYN_MODEL, SYN_TEXT);
    expect_error(a, 1, "--seq-len");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --seq-len 4096", SYN_MODEL, SYN_TEXT);
    expect_error(a, 4, "context");   /* valid alone, impossible for this model: cannot do (docs/tool.md) */
    snprintf(a, sizeof a, "eval '%s' --text '%s' --windowing paragraphs", SYN_MODEL, SYN_TEXT);
    expect_error(a, 1, "--windowing");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --bogus", SYN_MODEL, SYN_TEXT);
    expect_error(a, 1, "--bogus");
    snprintf(a, sizeof a, "eval '%s' --text", SYN_MODEL);
    expect_error(a, 1, "--text");
    snprintf(a, sizeof a, "eval --text '%s'", SYN_TEXT);
    expect_error(a, 1, "MODEL");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --seq-len 64", SYN_MODEL, SHORT_TEXT);
    expect_error(a, 4, "short.txt");
    snprintf(a, sizeof a, "eval '%s' --text '%s' --seq-len 64 --group-size 7 --w-bits 4", SYN_MODEL, SYN_TEXT);
    expect_error(a, 4, NULL);
}

/* A small XML well-formedness check: tags nest and close, attributes are quoted, entities known,
   exactly one root element, a prolog allowed. Returns NULL or the problem. */
static const char* xml_check(const char* s) {
    static char why[128];
    char stack[64][48];
    int depth = 0, roots = 0;
    const char* p = s;
    while (*p) {
        if (*p == '<') {
            if (strncmp(p, "<?", 2) == 0) {
                const char* e = strstr(p, "?>");
                if (!e) return "unterminated <?";
                p = e + 2;
                continue;
            }
            if (strncmp(p, "<!--", 4) == 0) {
                const char* e = strstr(p, "-->");
                if (!e) return "unterminated comment";
                p = e + 3;
                continue;
            }
            if (p[1] == '/') {
                const char* q = p + 2;
                size_t n = 0;
                while (q[n] && q[n] != '>' && q[n] != ' ') ++n;
                if (depth == 0) return "close tag without an open one";
                if (strlen(stack[depth - 1]) != n || strncmp(stack[depth - 1], q, n) != 0) {
                    snprintf(why, sizeof why, "a close tag of another name ends <%.40s>", stack[depth - 1]);
                    return why;
                }
                --depth;
                p = strchr(q, '>');
                if (!p) return "unterminated close tag";
                ++p;
                continue;
            } else {
                const char* q = p + 1;
                size_t n = 0;
                int self = 0;
                while (q[n] && q[n] != '>' && q[n] != ' ' && q[n] != '/' && q[n] != '\n') ++n;
                if (n == 0 || n >= sizeof stack[0]) return "bad tag name";
                if (depth == 0 && roots++) return "more than one root element";
                q += n;
                /* attributes: name="value" */
                for (;;) {
                    while (*q == ' ' || *q == '\n' || *q == '\t') ++q;
                    if (*q == '>') { ++q; break; }
                    if (q[0] == '/' && q[1] == '>') { self = 1; q += 2; break; }
                    while (*q && *q != '=' && *q != '>' && *q != ' ') ++q;
                    if (*q != '=' || q[1] != '"') return "attribute without a quoted value";
                    q = strchr(q + 2, '"');
                    if (!q) return "unterminated attribute value";
                    ++q;
                }
                if (!self) {
                    if (depth >= 64) return "nested too deep";
                    memcpy(stack[depth], p + 1, n);
                    stack[depth][n] = '\0';
                    ++depth;
                }
                p = q;
                continue;
            }
        }
        if (*p == '&') {
            if (strncmp(p, "&amp;", 5) && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) && strncmp(p, "&quot;", 6) && strncmp(p, "&apos;", 6))
                return "unknown entity";
        }
        if (*p == '>' ) return "stray '>'";
        ++p;
    }
    if (depth) {
        snprintf(why, sizeof why, "<%.40s> never closed", stack[depth - 1]);
        return why;
    }
    return roots == 1 ? NULL : "no root element";
}

static int count_str(const char* s, const char* needle) {
    int n = 0;
    while ((s = strstr(s, needle)) != NULL) { ++n; s += strlen(needle); }
    return n;
}

static void check_plot(const char* model, const char* text, const char* extra, const char* svg_name) {
    char args[16384], svg[4300];
    cli_run r;
    char* doc;
    const char* why;
    double before = 0, after = 0;
    const char* p;
    snprintf(svg, sizeof svg, "%s/%s", TMP, svg_name);
    snprintf(args, sizeof args, "plot '%s' --text '%s' -o '%s' %s --quiet", model, text, svg, extra);
    run_cli(&r, args);
    QT_EQ_INT(r.rc, 0);
    p = strstr(r.out, "before rotation:");
    QT_CHECK(p && sscanf(strstr(p, "max/median"), "max/median %lf", &before) == 1);
    p = strstr(r.out, "after QuaRot:");
    QT_CHECK(p && sscanf(strstr(p, "max/median"), "max/median %lf", &after) == 1);
    run_free(&r);
    doc = qt_read_file(svg, NULL);
    QT_CHECKF(doc != NULL, "%s not written", svg);
    if (!doc) return;
    why = xml_check(doc);
    QT_CHECKF(why == NULL, "%s is not well-formed XML: %s", svg, why);
    QT_CHECK(strstr(doc, "<svg") && strstr(doc, "</svg>"));
    QT_CHECK(strstr(doc, "Before rotation") && strstr(doc, "After QuaRot rotation"));
    QT_EQ_INT(count_str(doc, "max/median = "), 2);
    {
        /* the panels carry the numbers stdout reports */
        char want[64];
        snprintf(want, sizeof want, "max/median = %.2f", before);
        QT_CHECKF(strstr(doc, want) != NULL, "'%s' not in the SVG", want);
        snprintf(want, sizeof want, "max/median = %.2f", after);
        QT_CHECKF(strstr(doc, want) != NULL, "'%s' not in the SVG", want);
    }
    QT_CHECKF(after < before, "max/median before %.2f, after %.2f", before, after);
    printf("    plot %s %s: max/median %.2f -> %.2f, %lu bytes of SVG\n", strrchr(model, '/') + 1, extra, before, after,
           (unsigned long)strlen(doc));
    free(doc);
}

static void test_plot(void) {
    char args[16384], svg[4300], path[4400];
    cli_run r;
    char* before;
    char* after;
    if (!SYN_OK) { QT_CHECK(SYN_OK); return; }
    check_plot(SYN_MODEL, SYN_TEXT, "--tokens 64", "syn_q.svg");
    check_plot(SYN_MODEL, SYN_TEXT, "--site down --log --layer 0 --tokens 64", "syn_down.svg");
    if (qt_shared_path("models/stories260K/stories260K.bin") && qt_shared_path("data/tinystories_eval.txt")) {
        char model[4096], text[4096];
        snprintf(model, sizeof model, "%s", qt_shared_path("models/stories260K/stories260K.bin"));
        snprintf(text, sizeof text, "%s", qt_shared_path("data/tinystories_eval.txt"));
        check_plot(model, text, "", "stories_q.svg");
    }
    /* an existing output is kept without --force (exit 3), replaced with it; no temporaries left */
    snprintf(svg, sizeof svg, "%s/syn_q.svg", TMP);
    before = qt_read_file(svg, NULL);
    snprintf(args, sizeof args, "plot '%s' --text '%s' -o '%s' --tokens 32 --quiet", SYN_MODEL, SYN_TEXT, svg);
    expect_error(args, 3, "--force");
    after = qt_read_file(svg, NULL);
    QT_CHECK(before && after && strcmp(before, after) == 0);
    free(after);
    snprintf(args, sizeof args, "plot '%s' --text '%s' -o '%s' --tokens 32 --quiet --force", SYN_MODEL, SYN_TEXT, svg);
    run_cli(&r, args);
    QT_EQ_INT(r.rc, 0);
    run_free(&r);
    after = qt_read_file(svg, NULL);
    QT_CHECK(before && after && strcmp(before, after) != 0);   /* 32 tokens, not 64 */
    free(before);
    free(after);
    snprintf(args, sizeof args, "ls '%s' | grep -c tmp > '%s/count.txt'", TMP, TMP);
    if (system(args) != -1) {
        snprintf(path, sizeof path, "%s/count.txt", TMP);
        before = qt_read_file(path, NULL);
        QT_CHECKF(before && atoi(before) == 0, "temporary files left in %s", TMP);
        free(before);
    }
    /* bad input */
    snprintf(args, sizeof args, "plot '%s' --text '%s' -o '%s/x.svg' --layer 9", SYN_MODEL, SYN_TEXT, TMP);
    expect_error(args, 4, "--layer");
    snprintf(args, sizeof args, "plot '%s' --text '%s' -o '%s/x.svg' --site v", SYN_MODEL, SYN_TEXT, TMP);
    expect_error(args, 1, "--site");
    snprintf(args, sizeof args, "plot '%s' --text '%s'", SYN_MODEL, SYN_TEXT);
    expect_error(args, 1, "-o");
    snprintf(args, sizeof args, "plot '%s' --text '%s/missing.txt' -o '%s/x.svg'", SYN_MODEL, TMP, TMP);
    expect_error(args, 2, "missing.txt");
    snprintf(args, sizeof args, "%s/x.svg", TMP);
    QT_CHECK(access(args, F_OK) != 0);
}

static void test_demo(void) {
    cli_run r;
    double a, b;
    run_cli(&r, qt_quick() ? "demo --synthetic-only --windows 2 --quiet" : "demo --quiet");
    QT_EQ_INT(r.rc, 0);
    QT_CHECK(strstr(r.out, "(b) equivalence") && strstr(r.out, "max |logit difference|"));
    QT_CHECK(strstr(r.out, "(same function") != NULL);
    QT_CHECK(strstr(r.out, "(c) quantization error") && strstr(r.out, "per-token 4-bit"));
    QT_CHECK(strstr(r.out, "(d) perplexity"));
    /* the synthetic model's table: QuaRot lowers W4A4 and W8A4 */
    {
        const char* t = strstr(r.out, "    W4A4 ");
        QT_CHECK(t && sscanf(t + 9, "%lf %lf", &a, &b) == 2 && b < a);
        t = strstr(r.out, "    W8A4 ");
        QT_CHECK(t && sscanf(t + 9, "%lf %lf", &a, &b) == 2 && b < a);
    }
    if (!qt_quick() && qt_shared_path("models/stories260K/stories260K.bin"))
        QT_CHECK(strstr(r.out, "== 2. stories260K") && strstr(r.out, "greedy text"));
    printf("    quarot demo%s: exit %d in %.1f s\n", qt_quick() ? " --synthetic-only --windows 2" : "", r.rc, r.secs);
    run_free(&r);
}

int main(int argc, char** argv) {
    const char* slash;
    char rm[4200];
    (void)argc;
    /* the binary sits in the build directory, one level above this test program */
    slash = strrchr(argv[0], '/');
    if (slash) snprintf(BIN, sizeof BIN, "%.*s/../quarot", (int)(slash - argv[0]), argv[0]);
    else snprintf(BIN, sizeof BIN, "../quarot");
    if (access(BIN, X_OK) != 0) {
        printf("  FAIL: %s not found (build it with make)\n", BIN);
        printf("test_cli_eval: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    snprintf(TMP, sizeof TMP, "/tmp/qx_cli_eval_XXXXXX");
    if (!mkdtemp(TMP)) {
        printf("  FAIL: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    SYN_OK = setup_synthetic();
    QT_RUN(test_help);
    QT_RUN(test_synthetic_fp_matches_reference);
    QT_RUN(test_stories_fp_matches_reference);
    QT_RUN(test_stories_quarot_lowers_quantized_ppl);
    QT_RUN(test_eval_options);
    QT_RUN(test_eval_threads_same);
    QT_RUN(test_eval_bad_input);
    QT_RUN(test_plot);
    QT_RUN(test_demo);
    snprintf(rm, sizeof rm, "rm -rf '%s'", TMP);
    if (system(rm) != 0) printf("    (could not remove %s)\n", TMP);
    return qt_finish("test_cli_eval");
}
