/* `quarot rotate` and `quarot inspect` through the command line (the built binary run with
   system(), prefixed by $QT_RUNNER under qemu), plus the llama2.c streaming writer they use.

   Truths used:
   - stories260K (../shared, skipped when absent): the checkpoint rotated WITHOUT online hooks is
     run by tests/helper_plain_llama2c.c, an independent run.c-style engine that knows nothing of
     rotation (and does not use quarot.h or qx_*): its 200 greedy tokens from BOS must equal the
     original's in the same runner, and the runner's tokens on the original must equal qx_forward's
     (so the runner itself is checked). With --online the hook file must parse and the forward pass
     with those hooks on the rotated output must give the original's greedy text and perplexity
     (relative change < 1e-4; float32 rounding only).
   - Round trips per format on synthetic models (qx_synth: outlier channels, GQA, non-unit norms):
     llama2.c v0/v1, safetensors directories with shards and single files, GGUF; F32/F16/BF16;
     tied and untied embeddings; with and without online hooks. The rotated file is read back and
     its logits compared with the original file's over 24 tokens. Tolerance relative to the largest
     |logit|: 2e-5 for f32 storage (float rounding of a few GEMMs), 5e-3 for f16 and 3e-2 for
     bf16 (the rotated weights are rounded again to 11 / 8 significant bits: measured 7e-4 and
     2e-3..5e-3; a wrong rotation or a missing hook gives differences of the order of the logits).
   - Layer-wise memory: the CLI reports the most layers held at once (the binding refuses tensors of
     a layer that is not acquired) and its writable copies; copies must stay within the globals plus
     one layer, and the peak resident set (getrusage) within a bound stated in the test, far below
     the model size (not checked under sanitizers or qemu, whose allocators and emulators add their
     own memory).
   - Bad input: one stderr line, the documented exit code, no output and no temporary left. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "fmt_util.h"
#include "model_util.h"
#include "cli/qx_cli.h"
#include "eval/qx_eval.h"
#include "support/qx_file.h"
#include "formats/qx_gguf.h"
#include "formats/qx_llama2c.h"
#include "model/qx_online.h"
#include "formats/qx_safetensors.h"
#include "model/qx_synth.h"
#include "tokenizer/qx_tokenizer.h"

#include <dirent.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_plain[4096];

/* ---- running the CLI -------------------------------------------------------------------------- */

static int exists(const char* p) { return qx_path_exists(p); }

static void make_dir(const char* p) { mkdir(p, 0777); }

/* ---- models ----------------------------------------------------------------------------------- */

typedef enum fmt_kind { F_L2C_V0, F_L2C_V1, F_ST_DIR, F_ST_FILE, F_GGUF } fmt_kind;

/* A synthetic model saved in a format at path (a file; a directory for F_ST_DIR; for F_ST_FILE the
   file path, with config.json written beside it). */
static int save_model(const qx_store* s, fmt_kind k, const char* path, quarot_dtype dt, uint64_t shard_bytes) {
    qx_err e;
    quarot_result r;
    if (k == F_L2C_V0 || k == F_L2C_V1) {
        qx_l2c_write_opts o;
        memset(&o, 0, sizeof o);
        o.format = k == F_L2C_V1 ? QX_L2C_V1 : QX_L2C_V0;
        r = qx_l2c_write_file(s, path, &o, &e);
    } else if (k == F_GGUF) {
        qx_gguf_save_opts o;
        memset(&o, 0, sizeof o);
        o.dtype = dt;
        r = qx_gguf_save(s, path, &o, &e);
    } else {
        qx_st_save_opts o;
        memset(&o, 0, sizeof o);
        o.dtype = dt;
        o.shard_bytes = shard_bytes;
        r = qx_st_save(s, path, &o, &e);
        if (r == QUAROT_OK && k == F_ST_FILE) {
            qx_sb cfg;
            char* dir = (char*)malloc(strlen(path) + 1);
            char* slash;
            memset(&cfg, 0, sizeof cfg);
            strcpy(dir, path);
            slash = strrchr(dir, '/');
            if (slash) *slash = '\0';
            r = qx_hf_config_write(s, &cfg, &e);
            if (r == QUAROT_OK) {
                char* cp = qx_path_join(dir, "config.json");
                if (!qt_write_file(cp, cfg.p, cfg.len)) r = QUAROT_ERR_IO;
                free(cp);
            }
            qx_sb_free(&cfg);
            free(dir);
        }
    }
    if (r != QUAROT_OK) printf("    save %s: %s\n", path, e.msg);
    return r == QUAROT_OK;
}

/* ---- tests: help, the streaming writer --------------------------------------------------------- */

static void test_help(void) {
    const char* cmds[] = {"rotate", "inspect"};
    int k;
    for (k = 0; k < 2; ++k) {
        QT_EQ_INT(CLI("%s --help", cmds[k]), 0);
        QT_CHECKF(strstr(g_out, "usage: quarot") != NULL, "%s --help prints no usage", cmds[k]);
        QT_CHECK(g_err[0] == '\0');
    }
    QT_CHECK(strstr(g_out, "memory") != NULL || 1);
    QT_EQ_INT(CLI("rotate --help"), 0);
    QT_CHECKF(strstr(g_out, "one decoder layer") != NULL, "rotate --help does not state the memory bound");
    QT_CHECKF(strstr(g_out, "down_input") != NULL, "rotate --help does not say what an engine does with the hook file");
}

/* The streaming llama2.c writer (tensors in any order) gives the same bytes as the whole-store one. */
static void test_l2c_stream_writer(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    int v;
    memset(&d, 0, sizeof d);
    d.rope_interleaved = 1;
    d.n_layers = 2;
    QT_OK(qx_synth_model(&s, &d, &e));
    for (v = 0; v < 4; ++v) {
        qx_l2c_write_opts o;
        qx_l2c_writer* w = NULL;
        void* mem = NULL;
        size_t n = 0, m = 0;
        unsigned char* file;
        int64_t i;
        const char* path = tmp_path("stream.bin");
        if (v & 2) (void)qx_store_remove(&s, "lm_head.weight");   /* shared classifier from v = 2 on */
        memset(&o, 0, sizeof o);
        o.format = (v & 1) ? QX_L2C_V1 : QX_L2C_V0;
        QT_OK(qx_l2c_write_memory(&s, &o, &mem, &n, &e));
        s.config.tied_embeddings = qx_store_find(&s, "lm_head.weight") == NULL;
        QT_OK(qx_l2c_writer_begin(&w, path, &s.config, qx_store_find(&s, "lm_head.weight") == NULL, &o, &e));
        for (i = s.count - 1; i >= 0 && w; --i) QT_OK(qx_l2c_writer_put(w, s.items[i].name, &s.items[i].t, &e));   /* reversed */
        QT_CHECK(!exists(path));                 /* nothing visible before finish */
        QT_OK(qx_l2c_writer_finish(w, &e));
        file = read_all(path, &m);
        QT_CHECK(file && m == n && memcmp(file, mem, n) == 0);
        free(file);
        free(mem);
        remove(path);
        /* a missing tensor fails at finish and leaves nothing */
        QT_OK(qx_l2c_writer_begin(&w, path, &s.config, qx_store_find(&s, "lm_head.weight") == NULL, &o, &e));
        QT_OK(qx_l2c_writer_put(w, s.items[0].name, &s.items[0].t, &e));
        QT_ERR(qx_l2c_writer_put(w, s.items[0].name, &s.items[0].t, &e), QUAROT_ERR_STATE);
        QT_ERR(qx_l2c_writer_finish(w, &e), QUAROT_ERR_STATE);
        QT_CHECK(!exists(path));
    }
    QT_EQ_INT(fu_count_entries(g_tmp), 0);
    qx_store_free(&s);
}

/* ---- stories260K ------------------------------------------------------------------------------ */

static int parse_tokens(const char* s, int32_t* out, int cap) {
    int n = 0;
    char* end;
    while (*s && n < cap) {
        long v = strtol(s, &end, 10);
        if (end == s) break;
        out[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

static void test_stories_plain_runner(void) {
    const char* model = qt_shared_path("models/stories260K/stories260K.bin");
    char mpath[4096];
    const char* rot = tmp_path("stories_rot.bin");
    int32_t a[200], b[200], ref[200];
    int na, nb, i, diff = -1, N = qt_quick() ? 48 : 200;   /* qemu: the runner is a naive O(T^2) loop */
    qx_store s;
    if (!model) { QT_SKIP("../shared/models/stories260K not found"); return; }
    snprintf(mpath, sizeof mpath, "%s", model);
    QT_EQ_INT(CLI("rotate %s %s --quiet", mpath, rot), 0);
    QT_CHECK(strstr(g_out, "online hooks: none") != NULL);
    QT_CHECK(g_err[0] == '\0');                 /* --quiet: nothing on stderr */
    QT_CHECK(!exists(tmp_path("stories_rot.bin.quarot-online")));
    QT_EQ_INT(run_prog("", g_plain, "%s %d", mpath, N), 0);
    na = parse_tokens(g_out, a, 200);
    QT_EQ_INT(run_prog("", g_plain, "%s %d", rot, N), 0);
    nb = parse_tokens(g_out, b, 200);
    QT_EQ_INT(na, N);
    QT_EQ_INT(nb, N);
    for (i = 0; i < N && i < na && i < nb; ++i) if (a[i] != b[i] && diff < 0) diff = i;
    QT_CHECKF(diff < 0, "plain runner: rotated checkpoint's greedy tokens differ from token %d", diff);
    /* the runner itself agrees with the reference forward pass on the original */
    if (load_model(mpath, &s)) {
        qx_forward f;
        qx_err e;
        QT_OK(qx_forward_init(&f, &s, NULL, &e));
        QT_OK(qx_eval_generate(&f, 1, N, ref, &e));
        for (i = 0, diff = -1; i < N && i < na; ++i) if (ref[i] != a[i] && diff < 0) diff = i;
        QT_CHECKF(diff < 0, "plain runner and qx_forward disagree on the original from token %d", diff);
        qx_forward_free(&f);
        qx_store_free(&s);
    }
    /* the rotated file really is different (lm_head separate: v0 negative vocab, same size + wcls) */
    {
        size_t n0 = 0, n1 = 0;
        unsigned char* f0 = read_all(mpath, &n0);
        unsigned char* f1 = read_all(rot, &n1);
        QT_CHECK(f0 && f1 && n1 == n0 + 512 * 64 * 4);
        QT_CHECK(f1 && f1[20] == 0x00 && f1[23] == 0xff);   /* vocab -512 */
        free(f0);
        free(f1);
    }
    if (diff < 0 && na == N && nb == N)
        printf("    plain run.c-style runner, %d greedy tokens from BOS: rotated == original (and == qx_forward)\n", N);
    remove(rot);
}

static void test_stories_online(void) {
    const char* model = qt_shared_path("models/stories260K/stories260K.bin");
    char mpath[4096], tok[4096], text[4096];
    snprintf(mpath, sizeof mpath, "%s", model ? model : "");
    const char* rot = tmp_path("stories_on.bin");
    const char* hooks = tmp_path("stories_on.bin.quarot-online");
    qx_store a, b;
    quarot_online_list l;
    qx_tokenizer tk;
    qx_err e;
    int32_t ga[200], gb[200], *tokens = NULL;
    int64_t n_tokens = 0, i;
    int diff = -1, N = qt_quick() ? 32 : 200;
    if (!model || !qt_shared_path("models/stories260K/tok512.bin") || !qt_shared_path("data/tinystories_eval.txt")) {
        QT_SKIP("../shared/models/stories260K not found");
        return;
    }
    snprintf(tok, sizeof tok, "%s", qt_shared_path("models/stories260K/tok512.bin"));
    snprintf(text, sizeof text, "%s", qt_shared_path("data/tinystories_eval.txt"));
    QT_EQ_INT(CLI("rotate %s %s --online", mpath, rot), 0);
    QT_CHECKF(strstr(g_err, "quarot-online") != NULL, "stderr does not mention the hook file: %s", g_err);
    QT_CHECK(exists(hooks));
    if (!load_model(mpath, &a) || !load_model(rot, &b) || !load_hooks(hooks, &l)) { QT_CHECK(0); return; }
    QT_EQ_INT(l.count, 10);   /* 5 layers x (o_proj heads, down_proj) */
    {
        qx_forward fa, fb;
        qx_forward_opts o;
        qx_online_ctx c;
        qx_ppl_opts po;
        qx_ppl_result ra, rb;
        memset(&o, 0, sizeof o);
        qx_online_ctx_init(&c, &l);
        QT_OK(qx_forward_init(&fa, &a, &o, &e));
        o.online = qx_online_hooks;
        o.online_user = &c;
        QT_OK(qx_forward_init(&fb, &b, &o, &e));
        QT_OK(qx_eval_generate(&fa, 1, N, ga, &e));
        QT_OK(qx_eval_generate(&fb, 1, N, gb, &e));
        for (i = 0; i < N; ++i) if (ga[i] != gb[i] && diff < 0) diff = (int)i;
        QT_CHECKF(diff < 0, "greedy text with the hook file differs from token %d", diff);
        QT_OK(qx_tokenizer_load(&tk, tok, 512, &e));
        QT_OK(qx_tokenize_file(&tk, text, 0, 0, &tokens, &n_tokens, &e));
        qx_tokenizer_free(&tk);
        memset(&po, 0, sizeof po);
        po.max_windows = qt_quick() ? 1 : 4;
        QT_OK(qx_eval_perplexity(&fa, tokens, n_tokens, &po, &ra, &e));
        QT_OK(qx_eval_perplexity(&fb, tokens, n_tokens, &po, &rb, &e));
        QT_CHECKF(fabs(rb.ppl - ra.ppl) / ra.ppl < 1e-4, "perplexity %.6f -> %.6f", ra.ppl, rb.ppl);
        QT_EQ_INT(c.status, QUAROT_OK);
        printf("    --online: hook file with %lld hooks; greedy %d tokens identical; perplexity %.5f -> %.5f (%lld windows)\n",
               (long long)l.count, N, ra.ppl, rb.ppl, (long long)ra.n_windows);
        qx_forward_free(&fa);
        qx_forward_free(&fb);
        qx_online_ctx_free(&c);
    }
    free(tokens);
    quarot_online_list_free(&l);
    qx_store_free(&a);
    qx_store_free(&b);
    remove(rot);
    remove(hooks);
}

/* ---- round trips per format ------------------------------------------------------------------- */

typedef struct rt_case {
    const char* label;
    fmt_kind fmt;
    const char* arch;
    int tied;                 /* synth: 1 tied, -1 untied */
    quarot_dtype dtype;       /* stored dtype */
    const char* opts;         /* extra CLI options */
    quarot_dtype out_dtype;   /* expected dtype of the output's matrices */
    double tol;
} rt_case;

static void test_roundtrip_formats(void) {
    static const rt_case cases[] = {
        {"llama2.c v0, untied", F_L2C_V0, "llama", -1, QUAROT_DTYPE_F32, "", QUAROT_DTYPE_F32, 2e-5},
        {"llama2.c v1, tied, --online", F_L2C_V1, "llama", 1, QUAROT_DTYPE_F32, "--online", QUAROT_DTYPE_F32, 2e-5},
        {"safetensors shards f32, untied", F_ST_DIR, "llama", -1, QUAROT_DTYPE_F32, "", QUAROT_DTYPE_F32, 2e-5},
        {"safetensors shards bf16, tied, --online --r3", F_ST_DIR, "llama", 1, QUAROT_DTYPE_BF16, "--online --r3", QUAROT_DTYPE_BF16, 3e-2},
        {"safetensors file f16 qwen2 (tied), --online", F_ST_FILE, "qwen2", 0, QUAROT_DTYPE_F16, "--online", QUAROT_DTYPE_F16, 5e-3},
        {"safetensors dir qwen3 f32 -> --dtype f16", F_ST_DIR, "qwen3", 0, QUAROT_DTYPE_F32, "--dtype f16 --rotation random", QUAROT_DTYPE_F16, 5e-3},
        {"gguf f32, tied", F_GGUF, "llama", 1, QUAROT_DTYPE_F32, "", QUAROT_DTYPE_F32, 2e-5},
        {"gguf f32 -> --dtype bf16 (vectors stay f32)", F_GGUF, "llama", -1, QUAROT_DTYPE_F32, "--dtype bf16", QUAROT_DTYPE_BF16, 3e-2},
        {"gguf f16, untied, --online, tp 2, layers 2-2,0", F_GGUF, "llama", -1, QUAROT_DTYPE_F16,
         "--online --max-tp-size 2 --down-proj-online-layers 2-2,0", QUAROT_DTYPE_F16, 5e-3},
    };
    int k;
    for (k = 0; k < (int)(sizeof cases / sizeof cases[0]); ++k) {
        const rt_case* c = &cases[k];
        qx_synth_desc d;
        qx_store s, a, b;
        quarot_online_list l;
        qx_err e;
        char in[768], out[768], hooks[1024], dir[512], odir[512];
        int online = strstr(c->opts, "--online") || strstr(c->opts, "--r3"), dir_in = c->fmt == F_ST_DIR;
        double rel;
        memset(&d, 0, sizeof d);
        d.arch = c->arch;
        d.seed = (uint64_t)(100 + k);
        d.tied = c->tied;
        d.n_layers = 3;
        d.rope_interleaved = c->fmt == F_L2C_V0 || c->fmt == F_L2C_V1;
        if (qx_synth_model(&s, &d, &e) != QUAROT_OK) { QT_CHECKF(0, "%s: synth: %s", c->label, e.msg); continue; }
        snprintf(dir, sizeof dir, "%s/rt%d", g_tmp, k);
        snprintf(odir, sizeof odir, "%s/rt%d_out", g_tmp, k);
        make_dir(dir);
        make_dir(odir);
        switch (c->fmt) {
            case F_ST_DIR: snprintf(in, sizeof in, "%s/model", dir); snprintf(out, sizeof out, "%s/rotated", odir); break;
            case F_ST_FILE: snprintf(in, sizeof in, "%s/model.safetensors", dir); snprintf(out, sizeof out, "%s/rot.safetensors", odir); break;
            case F_GGUF: snprintf(in, sizeof in, "%s/model.gguf", dir); snprintf(out, sizeof out, "%s/rot.gguf", odir); break;
            default: snprintf(in, sizeof in, "%s/model.bin", dir); snprintf(out, sizeof out, "%s/rot.bin", odir); break;
        }
        if (dir_in) snprintf(hooks, sizeof hooks, "%s/quarot_online.txt", out);
        else snprintf(hooks, sizeof hooks, "%s.quarot-online", out);
        if (!save_model(&s, c->fmt, in, c->dtype, dir_in ? 60000 : 0)) { QT_CHECK(0); qx_store_free(&s); continue; }
        qx_store_free(&s);
        QT_EQ_INT(CLI("rotate %s %s %s", in, out, c->opts), 0);
        if (g_err[0] && !online) printf("    stderr: %s", g_err);
        if (!load_model(in, &a)) { QT_CHECK(0); continue; }
        if (!load_model(out, &b)) { QT_CHECK(0); qx_store_free(&a); continue; }
        QT_CHECKF(exists(hooks) == online, "%s: hook file %s %s", c->label, hooks, online ? "missing" : "written without --online");
        QT_CHECKF(strcmp(a.source_format, b.source_format) == 0, "%s: format %s -> %s", c->label, a.source_format, b.source_format);
        {
            const quarot_tensor* q = qx_store_find(&b, "model.layers.0.self_attn.q_proj.weight");
            QT_CHECKF(q && q->dtype == c->out_dtype, "%s: output dtype %s", c->label, q ? quarot_dtype_name(q->dtype) : "?");
        }
        if (c->fmt == F_GGUF && strstr(c->opts, "--dtype")) {
            const quarot_tensor* nw = qx_store_find(&b, "model.layers.1.input_layernorm.weight");
            QT_CHECKF(nw && nw->dtype == QUAROT_DTYPE_F32, "%s: norm not kept in f32", c->label);
        }
        /* the final norm was fused: tied inputs come back untied (lm_head / output.weight / wcls) */
        QT_CHECKF(qx_store_find(&b, "lm_head.weight") != NULL && !b.config.tied_embeddings, "%s: lm_head missing in the output", c->label);
        if (c->fmt == F_ST_DIR || c->fmt == F_ST_FILE) {
            char cfg[1024];
            size_t n = 0;
            char* text;
            if (c->fmt == F_ST_DIR) snprintf(cfg, sizeof cfg, "%s/config.json", out);
            else snprintf(cfg, sizeof cfg, "%s/config.json", odir);
            text = (char*)read_all(cfg, &n);
            QT_CHECKF(text && strstr(text, "\"tie_word_embeddings\": false"), "%s: config.json does not untie", c->label);
            free(text);
        }
        if (c->fmt == F_ST_DIR) {   /* sharded in, sharded out */
            char idx[1100];
            snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", out);
            QT_CHECKF(exists(idx), "%s: output not sharded", c->label);
        }
        if (online) {
            if (load_hooks(hooks, &l)) {
                rel = logit_rel_diff(&a, &b, &l, qt_quick() ? 8 : 24);
                if (strstr(c->opts, "layers 2-2,0")) {   /* down_proj hooks only where asked */
                    QT_CHECK(quarot_online_find(&l, 0, QUAROT_SITE_DOWN_INPUT) && !quarot_online_find(&l, 1, QUAROT_SITE_DOWN_INPUT) &&
                             quarot_online_find(&l, 2, QUAROT_SITE_DOWN_INPUT) && quarot_online_find(&l, 1, QUAROT_SITE_O_INPUT));
                    QT_CHECK(quarot_online_find(&l, 0, QUAROT_SITE_DOWN_INPUT)->outer == 2);   /* max_tp_size 2 */
                }
                if (strstr(c->opts, "--r3")) QT_CHECK(quarot_online_find(&l, 1, QUAROT_SITE_K_ROPE) != NULL);
                quarot_online_list_free(&l);
            } else {
                rel = 1e30;
            }
        } else {
            rel = logit_rel_diff(&a, &b, NULL, qt_quick() ? 8 : 24);
        }
        QT_CHECKF(rel <= c->tol, "%s: logits differ by %.3g of the largest (tolerance %.1g)", c->label, rel, c->tol);
        printf("    %-48s logits max rel diff %.2e (tol %.0e)\n", c->label, rel, c->tol);
        qx_store_free(&a);
        qx_store_free(&b);
    }
}

/* ---- layer-wise memory ------------------------------------------------------------------------ */

static void test_layerwise_memory(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    int quick = qt_quick();
    const char* in = tmp_path("big.bin");
    const char* out = tmp_path("big_rot.bin");
    double layer_mib, global_mib, model_mib, peak, copies, copies_globals;
    memset(&d, 0, sizeof d);
    d.hidden = quick ? 256 : 512;
    d.intermediate = quick ? 512 : 1024;
    d.n_layers = quick ? 4 : 8;
    d.n_heads = 8;
    d.n_kv_heads = 8;
    d.head_dim = d.hidden / 8;
    d.vocab = 512;
    d.tied = 1;
    d.rope_interleaved = 1;
    QT_OK(qx_synth_model(&s, &d, &e));
    {   /* written without fsync (qx_l2c_write_file syncs; the test does not need it) */
        void* mem = NULL;
        size_t n = 0;
        qx_l2c_write_opts o;
        memset(&o, 0, sizeof o);
        QT_OK(qx_l2c_write_memory(&s, &o, &mem, &n, &e));
        QT_CHECK(mem && qt_write_file(in, mem, n));
        free(mem);
    }
    qx_store_free(&s);
    layer_mib = (double)(4 * d.hidden * d.hidden + 3 * d.hidden * d.intermediate + 2 * d.hidden) * 4.0 / 1048576.0;
    global_mib = 2.0 * (double)(d.vocab * d.hidden) * 4.0 / 1048576.0;   /* embedding + the untied lm_head */
    model_mib = layer_mib * (double)d.n_layers + global_mib / 2;
    QT_EQ_INT(CLI("rotate %s %s", in, out), 0);
    QT_CHECKF(strstr(g_out, "layers held at once: 1\n") != NULL, "more than one layer held: %s", g_out);
    peak = field_after(g_out, "peak resident ");
    copies = field_after(g_out, "writable copies at most ");
    copies_globals = field_after(g_out, "(globals ");
    /* writable copies: exactly the globals plus one layer at most (instrumented, allocator-independent) */
    QT_CHECKF(copies <= global_mib + layer_mib + 0.1, "copies %.1f MiB > globals %.1f + one layer %.1f", copies, global_mib, layer_mib);
    QT_CHECKF(copies_globals <= global_mib + 0.1, "global copies %.1f MiB > %.1f", copies_globals, global_mib);
    /* Peak resident set (VmHWM): the binary and libc (~4 MiB), the copies above, the mapped input
       pages of the tensor being read (rounded to page-cache folios), f64 scratch of one tensor,
       allocator slack: bound = 8 MiB + globals + 1.5 layers (25 MiB), while the model is 8 layers
       (81 MiB). Measured: 16-19 MiB. */
    if (!UNDER_ASAN && !qt_emulated() && !quick) {
        double bound = 8.0 + global_mib + 1.5 * layer_mib;
        QT_CHECKF(peak > 0 && peak <= bound, "peak resident %.1f MiB > bound %.1f MiB (model %.1f MiB)", peak, bound, model_mib);
        QT_CHECK(bound < 0.35 * model_mib);
    }
    printf("    model %.1f MiB (%d layers of %.1f MiB, globals %.1f MiB): peak resident %.1f MiB, writable copies %.1f MiB, "
           "1 layer held at once\n", model_mib, (int)d.n_layers, layer_mib, global_mib, peak, copies);
    remove(in);
    remove(out);
}

/* ---- bad input and output --------------------------------------------------------------------- */

/* Runs `quarot rotate IN OUT [extra]` in a directory holding only IN's files; expects exit `code`,
   one stderr line, nothing on stdout, and the directory unchanged (no output, no temporary). */
static void expect_failure(const char* label, const char* dir, const char* in, const char* extra, int code) {
    char out[1200];
    int before = fu_count_entries(dir), rc;
    snprintf(out, sizeof out, "%s/out_model.bin", dir);
    rc = CLI("rotate %s %s %s", in, out, extra ? extra : "");
    QT_CHECKF(rc == code, "%s: exit %d, expected %d (stderr: %s)", label, rc, code, g_err);
    QT_CHECKF(count_lines(g_err) == 1, "%s: stderr has %d lines: %s", label, count_lines(g_err), g_err);
    QT_CHECKF(strncmp(g_err, "quarot rotate: ", 15) == 0, "%s: error line: %s", label, g_err);
    QT_CHECKF(g_out[0] == '\0', "%s: stdout not empty", label);
    QT_CHECKF(fu_count_entries(dir) == before, "%s: %d entries left in %s (had %d)", label, fu_count_entries(dir), dir, before);
}

static void put_u64(unsigned char* p, uint64_t v) {
    int k;
    for (k = 0; k < 8; ++k) p[k] = (unsigned char)(v >> (8 * k));
}

/* A safetensors file from header JSON text plus data_len zero bytes of data. */
static int write_st(const char* path, const char* json, size_t data_len) {
    size_t jl = strlen(json), n = 8 + jl + data_len;
    unsigned char* buf = (unsigned char*)calloc(n, 1);
    int ok;
    put_u64(buf, (uint64_t)jl);
    memcpy(buf + 8, json, jl);
    ok = qt_write_file(path, buf, n);
    free(buf);
    return ok;
}

static void test_bad_input(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    unsigned char *l2c = NULL, *gg = NULL;
    size_t l2c_n = 0, gg_n = 0, cut;
    char dir[512], path[768], cfg_text[8192], label[256];
    static const size_t l2c_cuts[] = {0, 10, 27, 28, 1000};
    int k;
    qx_sb cfg;
    memset(&d, 0, sizeof d);
    d.rope_interleaved = 1;
    d.n_layers = 2;
    d.hidden = 64;
    d.intermediate = 96;
    d.n_heads = 4;
    d.n_kv_heads = 2;
    d.head_dim = 16;
    d.vocab = 64;
    QT_OK(qx_synth_model(&s, &d, &e));
    memset(&cfg, 0, sizeof cfg);
    s.config.rope_interleaved = 0;
    QT_OK(qx_hf_config_write(&s, &cfg, &e));
    s.config.rope_interleaved = 1;
    snprintf(cfg_text, sizeof cfg_text, "%s", cfg.p ? cfg.p : "{}");
    qx_sb_free(&cfg);
    {
        qx_l2c_write_opts o;
        void* mem = NULL;
        memset(&o, 0, sizeof o);
        QT_OK(qx_l2c_write_memory(&s, &o, &mem, &l2c_n, &e));
        l2c = (unsigned char*)mem;
    }
    snprintf(dir, sizeof dir, "%s/gg", g_tmp);
    make_dir(dir);
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    if (save_model(&s, F_GGUF, path, QUAROT_DTYPE_F32, 0)) gg = read_all(path, &gg_n);
    remove(path);
    rmdir(dir);
    qx_store_free(&s);
    if (!l2c || !gg) { QT_CHECK(0); free(l2c); free(gg); return; }

    /* llama2.c: truncated at several offsets, one float short, a header whose sizes overflow, NaN */
    snprintf(dir, sizeof dir, "%s/bad_l2c", g_tmp);
    make_dir(dir);
    snprintf(path, sizeof path, "%s/m.bin", dir);
    for (k = 0; k < 6; ++k) {
        cut = k < 5 ? l2c_cuts[k] : l2c_n - 4;
        qt_write_file(path, l2c, cut);
        snprintf(label, sizeof label, "llama2.c truncated to %zu of %zu bytes", cut, l2c_n);
        expect_failure(label, dir, path, NULL, QX_EXIT_INPUT);
    }
    {
        unsigned char h[28];
        memcpy(h, l2c, 28);
        h[0] = 0xff; h[1] = 0xff; h[2] = 0xff; h[3] = 0x7f;   /* dim 2^31-1 */
        h[4] = 0xff; h[5] = 0xff; h[6] = 0xff; h[7] = 0x7f;
        h[12] = 1; h[13] = 0; h[14] = 0; h[15] = 0;            /* n_heads 1 */
        h[16] = 1; h[17] = 0; h[18] = 0; h[19] = 0;            /* n_kv_heads 1 */
        qt_write_file(path, h, 28);
        expect_failure("llama2.c header sizes overflow", dir, path, NULL, QX_EXIT_INPUT);
        QT_CHECKF(strstr(g_err, "overflow") != NULL || strstr(g_err, "odd") != NULL, "%s", g_err);
    }
    {
        unsigned char* m = (unsigned char*)malloc(l2c_n);
        float nan = NAN;
        memcpy(m, l2c, l2c_n);
        memcpy(m + 28 + 4 * (64 * 64 + 2 * 64 + 5), &nan, 4);   /* inside layer 0's wq */
        qt_write_file(path, m, l2c_n);
        free(m);
        expect_failure("NaN in a weight (validation before any write)", dir, path, NULL, QX_EXIT_INPUT);
        QT_CHECKF(strstr(g_err, "NaN") != NULL, "%s", g_err);
    }
    remove(path);

    /* safetensors: header length past the end / overflowing, truncated data, lying JSON, bad dtype,
       unknown architecture (each with a valid config.json beside it) */
    snprintf(dir, sizeof dir, "%s/bad_st", g_tmp);
    make_dir(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    qt_write_file(path, cfg_text, strlen(cfg_text));
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    {
        unsigned char b[16];
        memset(b, ' ', sizeof b);
        put_u64(b, 1000);
        qt_write_file(path, b, sizeof b);
        expect_failure("safetensors header length past the end", dir, path, NULL, QX_EXIT_INPUT);
        put_u64(b, UINT64_MAX - 4);
        qt_write_file(path, b, sizeof b);
        expect_failure("safetensors header length overflows", dir, path, NULL, QX_EXIT_INPUT);
        qt_write_file(path, b, 5);
        expect_failure("safetensors truncated inside the length", dir, path, NULL, QX_EXIT_INPUT);
    }
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
    expect_failure("safetensors data_offsets past the data", dir, path, NULL, QX_EXIT_INPUT);
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16);
    expect_failure("safetensors shape does not match the offsets", dir, path, NULL, QX_EXIT_INPUT);
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]", 16);
    expect_failure("safetensors header JSON cut short", dir, path, NULL, QX_EXIT_INPUT);
    write_st(path, "{\"a\":{\"dtype\":\"Q7\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16);
    expect_failure("safetensors unknown dtype", dir, path, NULL, QX_EXIT_INPUT);
    write_st(path, "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[0,256]}}", 256);
    expect_failure("safetensors tensors missing for the config", dir, path, NULL, QX_EXIT_INPUT);
    {
        char* p = strstr(cfg_text, "LlamaForCausalLM");
        char cfg2[8192];
        QT_CHECK(p != NULL);
        if (p) {
            snprintf(cfg2, sizeof cfg2, "%.*sGPT2LMHeadModel%s", (int)(p - cfg_text), cfg_text, p + strlen("LlamaForCausalLM"));
            snprintf(path, sizeof path, "%s/config.json", dir);
            qt_write_file(path, cfg2, strlen(cfg2));
            snprintf(path, sizeof path, "%s/m.safetensors", dir);
            expect_failure("unknown architecture in config.json", dir, path, NULL, QX_EXIT_INPUT);
            QT_CHECKF(strstr(g_err, "GPT2LMHeadModel") != NULL, "%s", g_err);
            /* Gemma 2: the same exit code, and the reason (R1 inexact) in one line */
            snprintf(cfg2, sizeof cfg2, "%.*sGemma2ForCausalLM%s", (int)(p - cfg_text), cfg_text, p + strlen("LlamaForCausalLM"));
            snprintf(path, sizeof path, "%s/config.json", dir);
            qt_write_file(path, cfg2, strlen(cfg2));
            snprintf(path, sizeof path, "%s/m.safetensors", dir);
            expect_failure("Gemma 2 in config.json", dir, path, NULL, QX_EXIT_INPUT);
            QT_CHECKF(strstr(g_err, "Gemma2ForCausalLM") && strstr(g_err, "R1 would not be exact"), "%s", g_err);
        }
    }

    /* GGUF: truncated at several offsets, quantized tensors, another architecture */
    snprintf(dir, sizeof dir, "%s/bad_gguf", g_tmp);
    make_dir(dir);
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    for (k = 0; k < 4; ++k) {
        size_t cuts[4] = {3, 24, gg_n / 3, gg_n - 1};
        qt_write_file(path, gg, cuts[k]);
        snprintf(label, sizeof label, "GGUF truncated to %zu of %zu bytes", cuts[k], gg_n);
        expect_failure(label, dir, path, NULL, QX_EXIT_INPUT);
    }
    {
        /* the first tensor's ggml type -> Q4_K (12, a quantized type not read): found through the tensor-info layout */
        qx_gguf_file f;
        unsigned char* m = (unsigned char*)malloc(gg_n);
        memcpy(m, gg, gg_n);
        if (qx_gguf_parse(m, gg_n, "m", &f, &e) == QUAROT_OK) {
            /* type field: after name (u64 len + bytes), n_dims (u32), ne (n_dims u64) */
            const unsigned char* tp = (const unsigned char*)f.t[0].name + f.t[0].name_len + 4 + 8 * f.t[0].n_dims;
            size_t off = (size_t)(tp - m);
            qx_gguf_file_free(&f);
            m[off] = 12; m[off + 1] = 0; m[off + 2] = 0; m[off + 3] = 0;
            qt_write_file(path, m, gg_n);
            expect_failure("GGUF with a quantized (Q4_K) tensor", dir, path, NULL, QX_EXIT_INPUT);
            QT_CHECKF(strstr(g_err, "quantized GGUF tensors are not supported") != NULL, "%s", g_err);
        } else {
            QT_CHECK(0);
        }
        free(m);
    }
    {
        unsigned char* m = (unsigned char*)malloc(gg_n);
        size_t i;
        memcpy(m, gg, gg_n);
        for (i = 0; i + 5 <= gg_n; ++i)   /* the architecture string value "llama" -> "gpt2x" */
            if (memcmp(m + i, "llama", 5) == 0 && i >= 8 && m[i - 8] == 5) { memcpy(m + i, "gpt2x", 5); break; }
        qt_write_file(path, m, gg_n);
        free(m);
        expect_failure("GGUF of another architecture", dir, path, NULL, QX_EXIT_INPUT);
        QT_CHECKF(strstr(g_err, "gpt2x") != NULL, "%s", g_err);
    }
    remove(path);

    /* unknown format, missing file */
    snprintf(dir, sizeof dir, "%s/bad_misc", g_tmp);
    make_dir(dir);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    qt_write_file(path, "just some text, not a model\n", 28);
    expect_failure("unknown format", dir, path, NULL, QX_EXIT_INPUT);
    QT_CHECKF(strstr(g_err, "unknown format") != NULL, "%s", g_err);
    snprintf(path, sizeof path, "%s/missing.bin", dir);
    expect_failure("missing input", dir, path, NULL, QX_EXIT_INPUT);
    free(l2c);
    free(gg);
}

/* NaN / Inf found late: the values are checked while each layer is copied (not in a pass before
   the first write), so a bad value in the LAST layer stops a run that has already written the
   globals and the earlier layers into the staged output. The error names the tensor, element and
   row; the staged output is removed (the directory holds only the input afterwards). f16 NaN in the
   last layer's down_proj (directory output, the O_DIRECT path of a real checkpoint) and bf16 +Inf
   in the last layer's post_attention_layernorm. */
static void test_nonfinite_last_layer(void) {
    static const struct { quarot_dtype dt; const char* name; int64_t row, col; uint16_t bits; } cases[2] = {
        {QUAROT_DTYPE_F16, "model.layers.2.mlp.down_proj.weight", 5, 7, 0x7e00u},
        {QUAROT_DTYPE_BF16, "model.layers.2.post_attention_layernorm.weight", 0, 3, 0x7f80u},
    };
    int k;
    for (k = 0; k < 2; ++k) {
        qx_synth_desc d;
        qx_store s;
        qx_err e;
        quarot_tensor* t;
        char dir[512], in[768], want[256];
        memset(&d, 0, sizeof d);
        d.n_layers = 3;
        d.dtype = cases[k].dt;
        QT_OK(qx_synth_model(&s, &d, &e));
        t = qx_store_find(&s, cases[k].name);
        QT_CHECKF(t != NULL && t->dtype == cases[k].dt, "%s missing or not %s", cases[k].name, quarot_dtype_name(cases[k].dt));
        if (!t) { qx_store_free(&s); continue; }
        memcpy((char*)t->data + (size_t)cases[k].row * t->nb[1] + (size_t)cases[k].col * 2, &cases[k].bits, 2);
        snprintf(dir, sizeof dir, "%s/late_nan_%d", g_tmp, k);
        make_dir(dir);
        snprintf(in, sizeof in, "%s/m", dir);
        QT_CHECK(save_model(&s, F_ST_DIR, in, cases[k].dt, 0));
        expect_failure("NaN / Inf in the last layer (found while copying it)", dir, in, "--threads 2", QX_EXIT_INPUT);
        snprintf(want, sizeof want, "layer 2: tensor '%s' has NaN or Inf at element %lld (row %lld, column %lld)", cases[k].name,
                 (long long)(cases[k].row * t->ne[0] + cases[k].col), (long long)cases[k].row, (long long)cases[k].col);
        QT_CHECKF(strstr(g_err, want) != NULL, "expected \"%s\" in: %s", want, g_err);
        QT_EQ_INT(fu_count_entries(dir), 1);   /* the input only: no output, no staging directory */
        qx_store_free(&s);
    }
}

static void test_bad_output_and_usage(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    char dir[512], in[768], out[768], blocker[1024];
    size_t n0 = 0, n1 = 0;
    unsigned char *b0, *b1;
    memset(&d, 0, sizeof d);
    d.rope_interleaved = 1;
    d.n_layers = 2;
    QT_OK(qx_synth_model(&s, &d, &e));
    snprintf(dir, sizeof dir, "%s/outs", g_tmp);
    make_dir(dir);
    snprintf(in, sizeof in, "%s/m.bin", dir);
    if (!save_model(&s, F_L2C_V0, in, QUAROT_DTYPE_F32, 0)) { QT_CHECK(0); qx_store_free(&s); return; }
    qx_store_free(&s);
    snprintf(out, sizeof out, "%s/out_model.bin", dir);

    /* an existing output: refused without --force (and left as it was), replaced with it */
    qt_write_file(out, "keep me", 7);
    QT_EQ_INT(CLI("rotate %s %s", in, out), QX_EXIT_OUTPUT);
    QT_EQ_INT(count_lines(g_err), 1);
    b0 = read_all(out, &n0);
    QT_CHECK(b0 && n0 == 7 && memcmp(b0, "keep me", 7) == 0);
    free(b0);
    QT_EQ_INT(CLI("rotate %s %s --online --force --quiet", in, out), 0);
    b0 = read_all(out, &n0);
    b1 = read_all(in, &n1);
    QT_CHECK(b0 && b1 && n0 == n1);   /* untied synthetic llama: same layout, new values */
    QT_CHECK(b0 && b1 && n0 == n1 && memcmp(b0, b1, n0) != 0);
    free(b0);
    free(b1);
    /* the hook file counts as output too: a stale one is removed by a --force run without hooks,
       and an orphan one blocks a run without --force */
    snprintf(blocker, sizeof blocker, "%s.quarot-online", out);
    QT_CHECK(exists(blocker));
    QT_EQ_INT(CLI("rotate %s %s --force", in, out), 0);
    QT_CHECKF(!exists(blocker), "stale hook file left beside a model that needs none");
    remove(out);
    qt_write_file(blocker, "x", 1);
    QT_EQ_INT(CLI("rotate %s %s --online", in, out), QX_EXIT_OUTPUT);
    QT_CHECKF(strstr(g_err, "quarot-online") != NULL, "%s", g_err);
    QT_EQ_INT(CLI("rotate %s %s", in, out), QX_EXIT_OUTPUT);
    QT_CHECK(!exists(out));
    remove(blocker);
    /* the input itself as output, even with --force */
    b1 = read_all(in, &n1);
    QT_EQ_INT(CLI("rotate %s %s --force", in, in), QX_EXIT_OUTPUT);
    QT_EQ_INT(count_lines(g_err), 1);
    b0 = read_all(in, &n0);
    QT_CHECK(b0 && b1 && n0 == n1 && memcmp(b0, b1, n0) == 0);
    QT_EQ_INT(fu_count_entries(dir), 1);
    free(b0);
    free(b1);
    /* unwritable: the output's directory is a regular file; a write-protected directory */
    snprintf(blocker, sizeof blocker, "%s/afile", dir);
    qt_write_file(blocker, "x", 1);
    {
        char o2[1100];
        int rc;
        snprintf(o2, sizeof o2, "%s/sub/out.bin", blocker);
        rc = CLI("rotate %s %s", in, o2);
        QT_EQ_INT(rc, QX_EXIT_OUTPUT);
        QT_EQ_INT(count_lines(g_err), 1);
        QT_EQ_INT(fu_count_entries(dir), 2);
    }
    remove(blocker);
    if (geteuid() != 0) {
        char ro[768], o2[1024];
        snprintf(ro, sizeof ro, "%s/ro", dir);
        make_dir(ro);
        chmod(ro, 0555);
        snprintf(o2, sizeof o2, "%s/out.bin", ro);
        QT_EQ_INT(CLI("rotate %s %s", in, o2), QX_EXIT_OUTPUT);
        QT_EQ_INT(count_lines(g_err), 1);
        QT_EQ_INT(fu_count_entries(ro), 0);
        chmod(ro, 0755);
        rmdir(ro);
    }
    /* a write that fails half-way (file size limit): no output, no temporary */
    {
        int rc = run_prog("ulimit -f 40;", g_bin, "rotate %s %s", in, out);
        QT_EQ_INT(rc, QX_EXIT_OUTPUT);
        QT_EQ_INT(count_lines(g_err), 1);
        QT_CHECKF(fu_count_entries(dir) == 1, "%d entries after a failed write", fu_count_entries(dir));
    }
    /* usage errors: exit 1, one line */
    {
        static const char* bad[] = {"--bogus", "--rotation adapt", "--rotation random --context ctx.bin", "--rotation best",
                                    "--down-proj-online-layers 0,1", "--online --down-proj-online-layers 5",
                                    "--online --down-proj-online-layers 1-x", "--max-tp-size 3", "--dtype f16",
                                    "--dtype f8", "--seed", "--block-size 0"};
        int k;
        for (k = 0; k < (int)(sizeof bad / sizeof bad[0]); ++k) {
            int rc = CLI("rotate %s %s %s", in, out, bad[k]);
            QT_CHECKF(rc == QX_EXIT_USAGE, "'%s': exit %d (%s)", bad[k], rc, g_err);
            QT_CHECKF(count_lines(g_err) == 1, "'%s': %d stderr lines", bad[k], count_lines(g_err));
            QT_CHECK(!exists(out));
        }
        CLI("rotate %s %s --rotation adapt", in, out);
        QT_CHECKF(strstr(g_err, "quarot calibrate") != NULL, "%s", g_err);   /* stage 1 must run first */
        QT_EQ_INT(CLI("rotate %s", in), QX_EXIT_USAGE);
    }
    /* safetensors: a single-file output beside the input's own config.json (which would then lie
       about the rotated model) is refused; a LayerNorm model (OPT) cannot be written rotated */
    {
        char sdir[768], sin[800], sout[800];
        int k;
        for (k = 0; k < 2; ++k) {
            memset(&d, 0, sizeof d);
            d.arch = k ? "opt" : "llama";
            d.n_layers = 2;
            QT_OK(qx_synth_model(&s, &d, &e));
            snprintf(sdir, sizeof sdir, "%s/st%d", dir, k);
            make_dir(sdir);
            snprintf(sin, sizeof sin, "%s/model.safetensors", sdir);
            QT_CHECK(save_model(&s, F_ST_FILE, sin, QUAROT_DTYPE_DEFAULT, 0));
            qx_store_free(&s);
            snprintf(sout, sizeof sout, "%s/rot.safetensors", sdir);
            QT_EQ_INT(CLI("rotate %s %s", sin, sout), k ? QX_EXIT_PROCESS : QX_EXIT_OUTPUT);
            QT_EQ_INT(count_lines(g_err), 1);
            QT_CHECKF(strstr(g_err, k ? "LayerNorm" : "config.json") != NULL, "%s", g_err);
            QT_EQ_INT(fu_count_entries(sdir), 2);
            remove(sin);
            snprintf(sin, sizeof sin, "%s/config.json", sdir);
            remove(sin);
            rmdir(sdir);
        }
    }
    /* a processing error: a block size that does not divide hidden */
    QT_EQ_INT(CLI("rotate %s %s --block-size 48", in, out), QX_EXIT_PROCESS);
    QT_EQ_INT(count_lines(g_err), 1);
    QT_EQ_INT(fu_count_entries(dir), 1);
    remove(in);
    rmdir(dir);
}

/* ---- inspect ---------------------------------------------------------------------------------- */

static void test_inspect(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    char dir[1024];
    const char* model = qt_shared_path("models/stories260K/stories260K.bin");
    char mp[4096];
    snprintf(mp, sizeof mp, "%s", model ? model : "");
    memset(&d, 0, sizeof d);
    d.arch = "qwen2";
    d.n_layers = 4;
    QT_OK(qx_synth_model(&s, &d, &e));
    snprintf(dir, sizeof dir, "%s/insp", g_tmp);
    if (!save_model(&s, F_ST_DIR, dir, QUAROT_DTYPE_BF16, 0)) { QT_CHECK(0); qx_store_free(&s); return; }
    qx_store_free(&s);
    QT_EQ_INT(CLI("inspect %s --tokens 48 --quiet", dir), 0);   /* (fast: 4 small layers) */
    QT_CHECK(strstr(g_out, "arch            qwen2") != NULL);
    QT_CHECK(strstr(g_out, "model.layers.{0..3}.self_attn.q_proj.bias") != NULL);   /* layer patterns */
    QT_CHECK(strstr(g_out, "intermediate      172  H_172 by embedded table") != NULL);
    QT_CHECK(strstr(g_out, "activation outliers: 48 tokens") != NULL);
    QT_CHECK(strstr(g_out, "3     down input") != NULL);
    {
        /* the synthetic model has outlier channels: rotation must shrink max/median at layer 0's q/k/v input */
        const char* p = strstr(g_out, "\n  0     q/k/v input");
        double mx, r0, k0, rmx, r1, k1;
        QT_CHECK(p && sscanf(p, "\n  0 q/k/v input %lf %lf %lf %lf %lf %lf", &mx, &r0, &k0, &rmx, &r1, &k1) == 6 && r1 < r0 / 2);
    }
    QT_EQ_INT(CLI("inspect %s --no-stats --all-tensors", dir), 0);
    QT_CHECK(strstr(g_out, "model.layers.3.mlp.down_proj.weight") != NULL && strstr(g_out, "activation") == NULL);
    QT_EQ_INT(CLI("inspect %s --text %s/nope.txt", dir, g_tmp), QX_EXIT_USAGE);   /* no tokenizer beside a safetensors dir */
    QT_EQ_INT(count_lines(g_err), 1);
    if (model) {
        const char* text = qt_shared_path("data/tinystories_eval.txt");
        if (text) {
            char tp[4096];
            snprintf(tp, sizeof tp, "%s", text);
            QT_EQ_INT(CLI("inspect %s --text %s --tokens 32", mp, tp), 0);   /* tok512.bin found beside it */
            QT_CHECK(strstr(g_out, "activation outliers: 32 tokens") != NULL);
        }
    }
}

int main(int argc, char** argv) {
    const char* slash = strrchr(argv[0], '/');
    size_t dl = slash ? (size_t)(slash - argv[0]) : 0;
    (void)argc;
    /* build/tests/test_cli_rotate -> build/quarot and build/tests/helper_plain_llama2c */
    snprintf(g_bin, sizeof g_bin, "%.*s%squarot", (int)dl, argv[0], dl ? "/../" : "../");
    snprintf(g_plain, sizeof g_plain, "%.*s%shelper_plain_llama2c", (int)dl, argv[0], dl ? "/" : "");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qx_cli_rotate_XXXXXX");
    if (!mkdtemp(g_tmp) || !exists(g_bin) || !exists(g_plain)) {
        printf("  cannot set up (%s, %s, %s)\n", g_tmp, g_bin, g_plain);
        printf("test_cli_rotate: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    QT_RUN(test_layerwise_memory);
    QT_RUN(test_help);
    QT_RUN(test_l2c_stream_writer);
    QT_RUN(test_stories_plain_runner);
    QT_RUN(test_stories_online);
    QT_RUN(test_roundtrip_formats);
    QT_RUN(test_bad_input);
    QT_RUN(test_nonfinite_last_layer);
    QT_RUN(test_bad_output_and_usage);
    QT_RUN(test_inspect);
    {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
        if (system(cmd) != 0) printf("  could not remove %s\n", g_tmp);
    }
    return qt_finish("test_cli_rotate");
}
