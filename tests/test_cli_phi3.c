/* The phi3 family in the tool (fused self_attn.qkv_proj = q|k|v and mlp.gate_up_proj = gate|up):
   - the reference forward pass on the fused layout equals the same weights split into llama's
     separate projections (max |logit difference| / max |logit| <= 1e-6);
   - `quarot rotate` of a synthetic phi3 model, as safetensors and as GGUF, with and without
     --online: the rotated model's FP32 logits equal the original's within 2e-5 of the largest logit
     (the bound the dense families meet in f32 in test_cli_rotate's round trips), the output keeps
     the fused tensors (GGUF: attn_qkv, ffn_up = gate|up) and the Phi3ForCausalLM class;
   - `quarot quantize` to GGUF Q4_0 (fused attn_qkv, ffn_up quantized) read back by `quarot eval`
     equals `quarot eval`'s fake-quantized W4 (groups of 32) on the rotated model within 0.1%, the
     bound test_cli_quantize holds the dense families to;
   - a q|k|v projection whose rows do not split into the config's heads: `rotate` of such a
     checkpoint gives one error line naming the tensor, exit 2, nothing written; the GGUF writer
     refuses to write one;
   - a GGUF written from a config (directly or by `rotate` from safetensors) has
     phi3.attention.sliding_window = 0, which llama.cpp's phi3 loader needs (0: full attention). */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "fmt_util.h"
#include "model_util.h"
#include "cli/qx_cli.h"
#include "formats/qx_gguf.h"
#include "formats/qx_safetensors.h"
#include "model/qx_online.h"
#include "model/qx_synth.h"
#include "support/qx_file.h"

#include <sys/stat.h>

static int exists(const char* p) { return qx_path_exists(p); }
static void make_dir(const char* p) { mkdir(p, 0777); }

/* The fused model f split into llama's separate projections (arch "llama", HF layout). */
static int split_to_llama(const qx_store* f, qx_store* s) {
    int64_t l;
    if (qx_store_clone(f, s) != QUAROT_OK) return 0;
    snprintf(s->config.arch, sizeof s->config.arch, "llama");
    for (l = 0; l < f->config.n_layers; ++l) {
        static const char* const qkv[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"};
        static const char* const gu[2] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
        const int64_t hd = f->config.head_dim, H = f->config.hidden;
        const int64_t qkv_rows[3] = {f->config.n_heads * hd, f->config.n_kv_heads * hd, f->config.n_kv_heads * hd};
        const int64_t gu_rows[2] = {f->config.intermediate, f->config.intermediate};
        char name[160];
        const quarot_tensor* t;
        int64_t off = 0, ne[2];
        int k;
        snprintf(name, sizeof name, "model.layers.%lld.self_attn.qkv_proj.weight", (long long)l);
        if (!(t = qx_store_find(f, name))) return 0;
        for (k = 0; k < 3; ++k) {
            char pn[160];
            snprintf(pn, sizeof pn, "model.layers.%lld.%s", (long long)l, qkv[k]);
            ne[0] = H; ne[1] = qkv_rows[k];
            if (qx_store_add(s, pn, QUAROT_DTYPE_F32, 2, ne, (const float*)t->data + off * H, NULL) != QUAROT_OK) return 0;
            off += qkv_rows[k];
        }
        qx_store_remove(s, name);
        snprintf(name, sizeof name, "model.layers.%lld.mlp.gate_up_proj.weight", (long long)l);
        if (!(t = qx_store_find(f, name))) return 0;
        for (k = 0, off = 0; k < 2; ++k) {
            char pn[160];
            snprintf(pn, sizeof pn, "model.layers.%lld.%s", (long long)l, gu[k]);
            ne[0] = H; ne[1] = gu_rows[k];
            if (qx_store_add(s, pn, QUAROT_DTYPE_F32, 2, ne, (const float*)t->data + off * H, NULL) != QUAROT_OK) return 0;
            off += gu_rows[k];
        }
        qx_store_remove(s, name);
    }
    return 1;
}

static int synth_phi3(qx_store* s, uint64_t seed, int tied) {
    qx_synth_desc d;
    qx_err e;
    memset(&d, 0, sizeof d);
    d.arch = "phi3";
    d.seed = seed;
    d.tied = tied;
    if (qx_synth_model(s, &d, &e) != QUAROT_OK) { printf("    synth: %s\n", e.msg); return 0; }
    return 1;
}

static void test_forward_fused_equals_split(void) {
    qx_store f, s;
    double rel;
    if (!synth_phi3(&f, 1, 0)) { QT_CHECK(0); return; }
    QT_CHECK(qx_store_find(&f, "model.layers.1.self_attn.qkv_proj.weight") != NULL);
    QT_CHECK(qx_store_find(&f, "model.layers.1.self_attn.q_proj.weight") == NULL);
    if (!split_to_llama(&f, &s)) { QT_CHECK(0); qx_store_free(&f); return; }
    rel = logit_rel_diff(&s, &f, NULL, 16);
    QT_CHECKF(rel <= 1e-6, "fused forward differs from the split one by %.3g", rel);
    printf("    phi3 forward (fused) vs llama forward (split): max rel diff %.2e\n", rel);
    qx_store_free(&s);
    qx_store_free(&f);
}

/* Saves s as safetensors (directory with config.json) or GGUF under dir; the input path into in. */
static int save_as(const qx_store* s, int gguf, const char* dir, char* in, size_t n) {
    qx_err e;
    quarot_result r;
    make_dir(dir);
    if (gguf) {
        qx_gguf_save_opts o;
        memset(&o, 0, sizeof o);
        snprintf(in, n, "%s/model.gguf", dir);
        r = qx_gguf_save(s, in, &o, &e);
    } else {
        qx_st_save_opts o;
        memset(&o, 0, sizeof o);
        snprintf(in, n, "%s/model", dir);
        r = qx_st_save(s, in, &o, &e);
    }
    if (r != QUAROT_OK) printf("    save %s: %s\n", in, e.msg);
    return r == QUAROT_OK;
}

/* llama.cpp's phi3 loader refuses a file without phi3.attention.sliding_window (its converter always
   writes it, 0 for none): the generated keys carry 0, full attention as the forward here runs it,
   whether the GGUF is written directly or by `quarot rotate` from safetensors. */
static int64_t gguf_key_int(const char* path, const char* key) {
    size_t n = 0;
    void* img = read_all(path, &n);
    qx_gguf_file f;
    qx_err e;
    int64_t v = -1;
    if (img && qx_gguf_parse(img, n, path, &f, &e) == QUAROT_OK) {
        const qx_gguf_kv* kv = qx_gguf_find(&f, key);
        if (!kv || qx_gguf_kv_int(kv, &v) != QUAROT_OK) v = -1;
        qx_gguf_file_free(&f);
    }
    free(img);
    return v;
}

static void test_gguf_sliding_window_key(void) {
    qx_store s;
    char dir[512], in[768], st[768], out[768];
    if (!synth_phi3(&s, 5, -1)) { QT_CHECK(0); return; }
    snprintf(dir, sizeof dir, "%s/swa", g_tmp);
    if (!save_as(&s, 1, dir, in, sizeof in)) { QT_CHECK(0); qx_store_free(&s); return; }
    QT_EQ_INT((int)gguf_key_int(in, "phi3.attention.sliding_window"), 0);
    if (!save_as(&s, 0, dir, st, sizeof st)) { QT_CHECK(0); qx_store_free(&s); return; }
    qx_store_free(&s);
    snprintf(out, sizeof out, "%s/rot.gguf", dir);
    QT_EQ_INT(CLI("rotate %s %s --quiet", st, out), 0);
    QT_EQ_INT((int)gguf_key_int(out, "phi3.attention.sliding_window"), 0);
}

static void test_rotate_phi3(void) {
    int c;
    for (c = 0; c < 4; ++c) {
        const int gguf = c >= 2, online = c % 2;
        qx_store s, a, b;
        quarot_online_list l;
        char dir[512], in[768], out[768], hooks[1024];
        double rel = 1e30;
        if (!synth_phi3(&s, 10 + (uint64_t)c, c == 1 ? 1 : -1)) { QT_CHECK(0); continue; }
        snprintf(dir, sizeof dir, "%s/rot%d", g_tmp, c);
        if (!save_as(&s, gguf, dir, in, sizeof in)) { QT_CHECK(0); qx_store_free(&s); continue; }
        qx_store_free(&s);
        if (gguf) snprintf(out, sizeof out, "%s/rot.gguf", dir);
        else snprintf(out, sizeof out, "%s/rotated", dir);
        if (gguf) snprintf(hooks, sizeof hooks, "%s.quarot-online", out);
        else snprintf(hooks, sizeof hooks, "%s/quarot_online.txt", out);
        QT_EQ_INT(CLI("rotate %s %s %s", in, out, online ? "--online" : ""), 0);
        if (!load_model(in, &a)) { QT_CHECK(0); continue; }
        if (!load_model(out, &b)) { QT_CHECK(0); qx_store_free(&a); continue; }
        QT_CHECK(strcmp(b.config.arch, "phi3") == 0);
        QT_CHECK(qx_store_find(&b, "model.layers.0.self_attn.qkv_proj.weight") != NULL);
        QT_CHECK(qx_store_find(&b, "model.layers.1.mlp.gate_up_proj.weight") != NULL);
        QT_CHECK(qx_store_find(&b, "model.layers.0.self_attn.q_proj.weight") == NULL);
        if (!gguf) {
            char cfg[1024];
            size_t n = 0;
            char* text;
            snprintf(cfg, sizeof cfg, "%s/config.json", out);
            text = (char*)read_all(cfg, &n);
            QT_CHECKF(text && strstr(text, "Phi3ForCausalLM"), "config.json of the output: %s", text ? text : "(none)");
            free(text);
        }
        QT_CHECK(exists(hooks) == online);
        if (online) {
            if (load_hooks(hooks, &l)) {
                QT_CHECK(quarot_online_find(&l, 1, QUAROT_SITE_DOWN_INPUT) != NULL);
                rel = logit_rel_diff(&a, &b, &l, 16);
                quarot_online_list_free(&l);
            }
        } else {
            rel = logit_rel_diff(&a, &b, NULL, 16);
        }
        QT_CHECKF(rel <= 2e-5, "phi3 %s%s: logits differ by %.3g of the largest", gguf ? "gguf" : "safetensors",
                  online ? " --online" : "", rel);
        printf("    phi3 %-11s %-8s logits max rel diff %.2e (tol 2e-5)\n", gguf ? "gguf" : "safetensors",
               online ? "--online" : "", rel);
        qx_store_free(&a);
        qx_store_free(&b);
    }
}

static double eval_row(const char* model, const char* tok, const char* text, const char* opts, const char* row) {
    int rc = CLI("eval '%s' --tokenizer '%s' --text '%s' --seq-len 64 --quiet %s", model, tok, text, opts);
    QT_CHECKF(rc == 0, "eval %s: rc %d: %s", model, rc, g_err);
    return row_value(row);
}

static void test_quantize_matches_fake_quant(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    char dir[512], in[768], tok[768], text[768], q[768], rot[768];
    double a, b;
    memset(&d, 0, sizeof d);
    d.arch = "phi3";
    d.seed = 4;
    d.vocab = SYN_VOCAB;
    d.tied = -1;
    if (qx_synth_model(&s, &d, &e) != QUAROT_OK) { QT_CHECKF(0, "synth: %s", e.msg); return; }
    snprintf(dir, sizeof dir, "%s/quant", g_tmp);
    if (!save_as(&s, 1, dir, in, sizeof in)) { QT_CHECK(0); qx_store_free(&s); return; }
    qx_store_free(&s);
    snprintf(tok, sizeof tok, "%s/tokenizer.bin", dir);
    snprintf(text, sizeof text, "%s/text.txt", dir);
    snprintf(q, sizeof q, "%s/q.gguf", dir);
    snprintf(rot, sizeof rot, "%s/rot.gguf", dir);
    QT_CHECK(write_tokenizer(tok) && cu_write_sentences(text, qt_quick() ? 20 : 60));
    QT_EQ_INT(CLI("quantize '%s' '%s' --quiet", in, q), 0);
    QT_CHECKF(g_err[0] == '\0', "quantize: %s", g_err);
    QT_CHECKF(strstr(g_out, "self_attn.qkv_proj.weight") && strstr(g_out, "mlp.gate_up_proj.weight") &&
              strstr(g_out, "8 tensors quantized"), "%s", g_out);
    QT_EQ_INT(CLI("rotate '%s' '%s' --quiet", in, rot), 0);
    a = eval_row(q, tok, text, "--w-bits 16", "FP32");
    b = eval_row(rot, tok, text, "--w-bits 4 --a-bits 16 --group-size 32", "W4A16");
    QT_CHECKF(a > 0 && b > 0 && fabs(a - b) <= 1e-3 * b, "phi3 Q4_0 file %.4f vs fake-quant %.4f (> 0.1%%)", a, b);
    printf("    phi3 Q4_0 GGUF read back: perplexity %.4f, fake-quant W4 on the rotated model %.4f\n", a, b);
}

static void test_bad_split(void) {
    int gguf;
    for (gguf = 0; gguf < 2; ++gguf) {
        qx_store s;
        char dir[512], in[768], out[768];
        const char* name = "model.layers.1.self_attn.qkv_proj.weight";
        const quarot_tensor* t;
        int64_t ne[2];
        float* keep;
        int before;
        if (!synth_phi3(&s, 3, -1)) { QT_CHECK(0); continue; }
        t = qx_store_find(&s, name);
        ne[0] = t->ne[0];
        ne[1] = t->ne[1] - s.config.head_dim;   /* one head's rows short */
        keep = (float*)malloc((size_t)(ne[0] * ne[1]) * sizeof(float));
        memcpy(keep, t->data, (size_t)(ne[0] * ne[1]) * sizeof(float));
        qx_store_remove(&s, name);
        QT_CHECK(qx_store_add(&s, name, QUAROT_DTYPE_F32, 2, ne, keep, NULL) == QUAROT_OK);
        free(keep);
        snprintf(dir, sizeof dir, "%s/bad%d", g_tmp, gguf);
        make_dir(dir);
        /* written by hand: the savers check the shapes themselves */
        if (gguf) {
            qx_gguf_save_opts o;
            qx_err e;
            memset(&o, 0, sizeof o);
            snprintf(in, sizeof in, "%s/model.gguf", dir);
            QT_ERR(qx_gguf_save(&s, in, &o, &e), QUAROT_ERR_SHAPE_MISMATCH);
            QT_CHECKF(strstr(e.msg, name) || strstr(e.msg, "blk.1.attn_qkv"), "gguf save: %s", e.msg);
            qx_store_free(&s);
            continue;
        }
        {
            qx_st_save_opts o;
            qx_err e;
            qx_sb cfg;
            memset(&o, 0, sizeof o);
            memset(&cfg, 0, sizeof cfg);
            snprintf(in, sizeof in, "%s/model.safetensors", dir);
            QT_CHECK(qx_st_save(&s, in, &o, &e) == QUAROT_OK);
            QT_CHECK(qx_hf_config_write(&s, &cfg, &e) == QUAROT_OK);
            snprintf(out, sizeof out, "%s/config.json", dir);
            QT_CHECK(qt_write_file(out, cfg.p, cfg.len));
            qx_sb_free(&cfg);
        }
        qx_store_free(&s);
        before = fu_count_entries(dir);
        snprintf(out, sizeof out, "%s/out", dir);
        QT_EQ_INT(CLI("rotate %s %s", in, out), QX_EXIT_INPUT);
        QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, name) && strstr(g_err, "do not split into the config's q|k|v"),
                  "stderr: %s", g_err);
        printf("    %s", g_err);
        QT_EQ_INT(fu_count_entries(dir), before);
    }
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_cli_phi3")) return 1;
    QT_RUN(test_forward_fused_equals_split);
    QT_RUN(test_rotate_phi3);
    QT_RUN(test_gguf_sliding_window_key);
    QT_RUN(test_quantize_matches_fake_quant);
    QT_RUN(test_bad_split);
    cu_finish();
    return qt_finish("test_cli_phi3");
}
