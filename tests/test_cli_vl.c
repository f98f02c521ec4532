/* Vision-language checkpoints in the tool (Qwen2-VL / Qwen2.5-VL, arch "qwen2vl"): a synthetic Qwen2
   decoder with a vision tower (the merger's output projection visual.merger.mlp.2 [hidden][1.5 hidden]
   + bias, its first linear, and a rank-5 Conv3d patch embedding [8][3][2][4][4]) saved as a Hugging
   Face directory, in the older layout (model.layers.*, visual.*, Qwen2VLForConditionalGeneration,
   top-level keys) and the newer one (model.language_model.*, model.visual.*,
   Qwen2_5_VLForConditionalGeneration, keys in text_config), tied and untied:
   - `quarot rotate`: the rotated text logits equal the original's within 2e-5 of the largest logit
     (the bound the dense families meet in f32, test_cli_rotate / test_cli_phi3), with and without
     --online (and `rotate --check` reports the same merger relation within 1e-5); the merger
     output y' of random patch features equals y R1, checked without R1 as
     y' E'^T = y E^T against every embedding row (E' = E R1) and |y'| = |y|, within 1e-5; the
     rank-5 tensor and the other vision tensors come back byte-identical, the rank-5 one with its
     shape in the file's header; the output keeps its layout's names; stderr and the summary say
     what happened to the vision tower;
   - a llama.cpp qwen2vl text GGUF (qwen2vl.* keys, rope.dimension_sections) rotates with the same
     logit bound, with a warning that its mmproj is not rotated; given the mmproj (arch clip, F16
     mm.2) with --mmproj, its merger output is rotated by the same R1 (the same check, within 1e-3:
     F16 rounding of each weight), every other byte of it copied, and an mmproj of another width
     refused by name with nothing written;
   - without --text-only, `quarot quantize` refuses the rank-5 tensor by name (its outputs hold 4
     dimensions), and a Hugging Face VL directory is not converted to GGUF (llama.cpp splits it into
     two files), both naming --text-only;
   - `quantize --text-only` (packed and GGUF) and `rotate --text-only` (GGUF), both layouts: the
     text decoder alone, byte for byte the tensors of the same decoder saved as a plain Qwen2; the
     GGUF has llama.cpp's qwen2vl keys and rope.dimension_sections = mrope_section padded to 4;
     `quarot eval` on both outputs, --engine int within 1e-5 of --engine ref (W4A4); rotate's own
     merger fits the packed file's F16 embedding within 1e-3; stderr and the summary count what was
     left out;
   - `quarot eval` runs the text decoder: no rotation and QuaRot agree to 4 digits in FP32, and
     `--engine int` gives the reference's W4A4 perplexities within 1e-5;
   - bad input, one error line naming the key or tensor, exit 2, nothing written: mrope_section not
     summing to head_dim / 2 (config.json and GGUF), vision_config's output width != hidden, the
     merger's weight of another output width, the merger missing. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "fmt_util.h"
#include "model_util.h"
#include "vl_util.h"
#include "cli/qx_cli.h"
#include "formats/qx_gguf.h"
#include "formats/qx_safetensors.h"
#include "model/qx_synth.h"
#include "support/qx_file.h"
#include "support/qx_str.h"

#include <sys/stat.h>


static const int64_t PATCH[5] = {8, 3, 2, 4, 4};

/* A qwen2 synth decoder as arch qwen2vl plus the vision tower (older names); merger rows `out`. */
static int vl_store(qx_store* s, uint64_t seed, int tied, int64_t out, int64_t vocab) {
    qx_synth_desc d;
    qx_err e;
    quarot_rng rng;
    quarot_tensor* t;
    int64_t ne[4], i, h, dv;
    memset(&d, 0, sizeof d);
    d.arch = "qwen2";
    d.seed = seed;
    d.tied = tied;
    d.vocab = vocab;
    if (qx_synth_model(s, &d, &e) != QUAROT_OK) { printf("    synth: %s\n", e.msg); return 0; }
    snprintf(s->config.arch, sizeof s->config.arch, "qwen2vl");
    h = s->config.hidden;
    dv = h + h / 2;
    quarot_rng_seed(&rng, seed + 100);
    ne[0] = dv; ne[1] = out;
    if (qx_store_add(s, QX_VL_MERGER_WEIGHT, QUAROT_DTYPE_F32, 2, ne, NULL, &t) != QUAROT_OK) return 0;
    for (i = 0; i < dv * out; ++i) ((float*)t->data)[i] = (float)(quarot_rng_normal(&rng) / sqrt((double)dv));
    ne[0] = out;
    if (qx_store_add(s, QX_VL_MERGER_BIAS, QUAROT_DTYPE_F32, 1, ne, NULL, &t) != QUAROT_OK) return 0;
    for (i = 0; i < out; ++i) ((float*)t->data)[i] = (float)(0.1 * quarot_rng_normal(&rng));
    ne[0] = dv; ne[1] = dv;
    if (qx_store_add(s, "visual.merger.mlp.0.weight", QUAROT_DTYPE_F32, 2, ne, NULL, &t) != QUAROT_OK) return 0;
    for (i = 0; i < dv * dv; ++i) ((float*)t->data)[i] = (float)quarot_rng_normal(&rng);
    qx_shape_fold(5, PATCH, ne);
    if (qx_store_add(s, "visual.patch_embed.proj.weight", QUAROT_DTYPE_F32, 4, ne, NULL, &t) != QUAROT_OK ||
        qx_store_set_shape(s, "visual.patch_embed.proj.weight", 5, PATCH) != QUAROT_OK)
        return 0;
    for (i = 0; i < quarot_tensor_nelements(t); ++i) ((float*)t->data)[i] = (float)quarot_rng_normal(&rng);
    return 1;
}

/* config.json of s: older layout (top-level keys, Qwen2-VL) or newer (text_config, Qwen2.5-VL).
   mrope: the three sections; vis_out: vision_config's output width. */
static void vl_config(const qx_store* s, int newer, const int64_t mrope[3], int64_t vis_out, char* buf, size_t n) {
    const quarot_model_config* c = &s->config;
    char text[1024];
    snprintf(text, sizeof text,
             "\"hidden_size\": %lld, \"intermediate_size\": %lld, \"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, "
             "\"num_key_value_heads\": %lld, \"vocab_size\": %lld, \"max_position_embeddings\": %lld, \"rms_norm_eps\": %g, "
             "\"rope_theta\": %g, \"hidden_act\": \"silu\", \"tie_word_embeddings\": %s, "
             "\"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [%lld, %lld, %lld]}",
             (long long)c->hidden, (long long)c->intermediate, (long long)c->n_layers, (long long)c->n_heads,
             (long long)c->n_kv_heads, (long long)c->vocab, (long long)(c->max_seq > 0 ? c->max_seq : 256),
             (double)c->norm_eps, (double)c->rope_theta, c->tied_embeddings ? "true" : "false", (long long)mrope[0],
             (long long)mrope[1], (long long)mrope[2]);
    if (newer)
        snprintf(buf, n, "{\"architectures\": [\"Qwen2_5_VLForConditionalGeneration\"], \"model_type\": \"qwen2_5_vl\", "
                         "\"text_config\": {\"model_type\": \"qwen2_5_vl_text\", %s}, \"vision_config\": {\"hidden_size\": %lld, "
                         "\"out_hidden_size\": %lld, \"depth\": 1}, \"tie_word_embeddings\": %s}",
                 text, (long long)(c->hidden + c->hidden / 2), (long long)vis_out, c->tied_embeddings ? "true" : "false");
    else
        snprintf(buf, n, "{\"architectures\": [\"Qwen2VLForConditionalGeneration\"], \"model_type\": \"qwen2_vl\", %s, "
                         "\"vision_config\": {\"hidden_size\": %lld, \"embed_dim\": 8, \"depth\": 1}}",
                 text, (long long)vis_out);
}

/* s saved as a Hugging Face directory `dir` with config text cfg (newer: the newer names). */
static int vl_save(qx_store* s, const char* dir, int newer, const char* cfg) {
    qx_st_save_opts o;
    qx_err e;
    memset(&o, 0, sizeof o);
    if (qx_store_set_blob(s, "hf.config.json", cfg, strlen(cfg)) != QUAROT_OK) return 0;
    if (newer && qx_store_set_blob(s, "hf.names", "qwen2vl-lm", 10) != QUAROT_OK) return 0;
    if (qx_st_save(s, dir, &o, &e) != QUAROT_OK) { printf("    save %s: %s\n", dir, e.msg); return 0; }
    return 1;
}

/* The safetensors header of dir/model.safetensors (NUL-terminated, malloc'ed) or NULL. */
static char* st_header(const char* dir) {
    char path[1024];
    size_t n = 0;
    unsigned char* b;
    char* h;
    uint64_t hl = 0;
    int k;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!(b = read_all(path, &n)) || n < 8) { free(b); return NULL; }
    for (k = 0; k < 8; ++k) hl |= (uint64_t)b[k] << (8 * k);
    if (hl > n - 8 || !(h = (char*)malloc((size_t)hl + 1))) { free(b); return NULL; }
    memcpy(h, b + 8, (size_t)hl);
    h[hl] = '\0';
    free(b);
    return h;
}

static void test_rotate_vl(void) {
    static const int64_t mrope[3] = {2, 3, 3};   /* head_dim 16: sums to 8 */
    int c, nc = qt_quick() ? 2 : 4;
    for (c = 0; c < nc; ++c) {
        const int newer = c % 2, tied = c < 2 ? 1 : -1, online = c == 1 || c == 2;
        qx_store s, a, b;
        quarot_online_list l;
        char dir[512], in[768], out[768], hooks[1024], cfg[4096], what[64];
        double rel = 1e30, mrel = 1e30, nrel = 1e30;
        char* hdr;
        int rank = 0;
        const int64_t* shape = NULL;
        const quarot_tensor* t;
        snprintf(what, sizeof what, "%s, %s%s", newer ? "newer layout" : "older layout", tied > 0 ? "tied" : "untied",
                 online ? ", --online" : "");
        if (!vl_store(&s, 30 + (uint64_t)c, tied, 64, 0)) { QT_CHECK(0); continue; }
        snprintf(dir, sizeof dir, "%s/vl%d", g_tmp, c);
        mkdir(dir, 0777);
        snprintf(in, sizeof in, "%s/in", dir);
        snprintf(out, sizeof out, "%s/out", dir);
        snprintf(hooks, sizeof hooks, "%s/quarot_online.txt", out);
        vl_config(&s, newer, mrope, s.config.hidden, cfg, sizeof cfg);
        if (!vl_save(&s, in, newer, cfg)) { QT_CHECK(0); qx_store_free(&s); continue; }
        qx_store_free(&s);
        QT_EQ_INT(CLI("rotate %s %s %s --check", in, out, online ? "--online" : ""), 0);
        {   /* rotate's own check: the text logits and the merger relation, computed by the tool */
            double cm = field_after(g_out, "over every embedding row ");
            QT_CHECKF(cm >= 0 && cm <= 1e-5, "%s: rotate --check merger %.3g: %s", what, cm, g_out);
        }
        QT_CHECKF(strstr(g_err, "vision tower: 2 tensors kept unrotated") && strstr(g_err, QX_VL_MERGER_WEIGHT),
                  "%s: stderr: %s", what, g_err);
        QT_CHECKF(strstr(g_out, "vision tower: 2 tensors kept unrotated; merger output projection rotated"), "%s: %s", what, g_out);
        hdr = st_header(out);
        QT_CHECKF(hdr && strstr(hdr, "\"shape\":[8,3,2,4,4]"), "%s: rank-5 shape not in the output header", what);
        QT_CHECKF(hdr && (strstr(hdr, "model.language_model.layers.0.") != NULL) == newer &&
                  (strstr(hdr, newer ? "\"model.visual.merger.mlp.2.weight\"" : "\"visual.merger.mlp.2.weight\"") != NULL),
                  "%s: the output's names are not its layout's", what);
        free(hdr);
        if (c == 0) {   /* GGUF would split the model into llama.cpp's two files: refused, nothing written */
            snprintf(hooks, sizeof hooks, "%s/out.gguf", dir);
            QT_EQ_INT(CLI("rotate %s %s", in, hooks), QX_EXIT_PROCESS);
            QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "mmproj") && !qx_path_exists(hooks), "to GGUF: %s", g_err);
            QT_CHECKF(CLI("inspect %s", out) == 0 && strstr(g_out, "[8, 3, 2, 4, 4]"), "inspect: %s", g_out);
            snprintf(hooks, sizeof hooks, "%s/q.safetensors", dir);   /* the packed format holds 4 dimensions */
            QT_EQ_INT(CLI("quantize %s %s --quiet", in, hooks), QX_EXIT_PROCESS);
            QT_CHECKF(strstr(g_err, "\"visual.patch_embed.proj.weight\" has 5 dimensions") && !qx_path_exists(hooks),
                      "quantize: %s", g_err);
            snprintf(hooks, sizeof hooks, "%s/quarot_online.txt", out);
        }
        if (!load_model(in, &a)) { QT_CHECK(0); continue; }
        if (!load_model(out, &b)) { QT_CHECK(0); qx_store_free(&a); continue; }
        QT_CHECK(strcmp(b.config.arch, "qwen2vl") == 0);
        if (online) {
            if (load_hooks(hooks, &l)) {
                rel = logit_rel_diff(&a, &b, &l, 16);
                quarot_online_list_free(&l);
            }
        } else {
            rel = logit_rel_diff(&a, &b, NULL, 16);
        }
        QT_CHECKF(rel <= 2e-5, "%s: text logits differ by %.3g of the largest", what, rel);
        mrel = vl_merger_check(&a, &b, QX_VL_MERGER_WEIGHT, QX_VL_MERGER_BIAS, QX_VL_MERGER_WEIGHT, QX_VL_MERGER_BIAS,
                               "model.embed_tokens.weight", "model.embed_tokens.weight", &nrel);
        QT_CHECKF(mrel <= 1e-5 && nrel <= 1e-5, "%s: merger output not rotated by R1 (%.3g, norms %.3g)", what, mrel, nrel);
        QT_CHECK(!vl_same_bytes(&a, QX_VL_MERGER_WEIGHT, &b, QX_VL_MERGER_WEIGHT));
        QT_CHECK(vl_same_bytes(&a, "visual.merger.mlp.0.weight", &b, "visual.merger.mlp.0.weight"));
        QT_CHECK(vl_same_bytes(&a, "visual.patch_embed.proj.weight", &b, "visual.patch_embed.proj.weight"));
        t = qx_store_find(&b, "visual.patch_embed.proj.weight");
        QT_CHECK(t && qx_store_get_shape(&b, "visual.patch_embed.proj.weight", t, &rank, &shape) && rank == 5 &&
                 memcmp(shape, PATCH, sizeof PATCH) == 0);
        printf("    qwen2vl %-30s text logits rel %.2e (tol 2e-5); merger y'E'^T vs yE^T %.2e, |y'| vs |y| %.2e (tol 1e-5)\n",
               what, rel, mrel, nrel);
        qx_store_free(&a);
        qx_store_free(&b);
    }
}

/* The pairs of a llama.cpp qwen2vl text GGUF for s (sections sec[4]) as s's "gguf.kv" blob. */
static int qwen2vl_kv(qx_store* s, const int32_t sec[4]) {
    const quarot_model_config* c = &s->config;
    qx_sb b;
    int k, ok;
    memset(&b, 0, sizeof b);
    qx_sb_le(&b, 0, 8);
    qx_gguf_kv_str(&b, "general.architecture", "qwen2vl", 7);
    qx_gguf_kv_u32(&b, "qwen2vl.context_length", 256);
    qx_gguf_kv_u32(&b, "qwen2vl.embedding_length", (uint32_t)c->hidden);
    qx_gguf_kv_u32(&b, "qwen2vl.block_count", (uint32_t)c->n_layers);
    qx_gguf_kv_u32(&b, "qwen2vl.feed_forward_length", (uint32_t)c->intermediate);
    qx_gguf_kv_u32(&b, "qwen2vl.attention.head_count", (uint32_t)c->n_heads);
    qx_gguf_kv_u32(&b, "qwen2vl.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    qx_gguf_kv_key(&b, "qwen2vl.attention.layer_norm_rms_epsilon", QX_GGUF_F32);
    qx_gguf_put_f32(&b, c->norm_eps);
    qx_gguf_kv_key(&b, "qwen2vl.rope.freq_base", QX_GGUF_F32);
    qx_gguf_put_f32(&b, c->rope_theta);
    qx_gguf_kv_arr_begin(&b, "qwen2vl.rope.dimension_sections", QX_GGUF_I32, 4);
    for (k = 0; k < 4; ++k) qx_sb_le(&b, (uint32_t)sec[k], 4);
    ok = qx_gguf_kv_count_add(&b, 10) == 0 && qx_store_set_blob(s, "gguf.kv", b.p, b.len) == QUAROT_OK;
    qx_sb_free(&b);
    return ok;
}

/* A llama.cpp qwen2vl mmproj (arch "clip") for a text model of hidden h: the merger (mm.0, mm.2 with
   its bias, F16 as the converter writes them) and a 4-D patch embedding; seeded random values. */
static int write_mmproj(const char* path, int64_t h, uint64_t seed) {
    qx_tensor_plan plan[4];
    qx_gguf_writer* w = NULL;
    qx_sb kv;
    qx_err e;
    quarot_rng rng;
    float* data[4];
    int64_t dv = h + h / 2, i;
    int k, ok = 1;
    memset(plan, 0, sizeof plan);
    memset(&kv, 0, sizeof kv);
    plan[0].name = "mm.0.weight"; plan[0].n_dims = 2; plan[0].ne[0] = dv; plan[0].ne[1] = dv;
    plan[1].name = "mm.2.weight"; plan[1].n_dims = 2; plan[1].ne[0] = dv; plan[1].ne[1] = h;
    plan[2].name = "mm.2.bias"; plan[2].n_dims = 1; plan[2].ne[0] = h;
    plan[3].name = "v.patch_embd.weight"; plan[3].n_dims = 4; plan[3].ne[0] = 4; plan[3].ne[1] = 4; plan[3].ne[2] = 3;
    plan[3].ne[3] = 8;
    for (k = 0; k < 4; ++k) {
        plan[k].dtype = k == 2 ? QUAROT_DTYPE_F32 : QUAROT_DTYPE_F16;
        for (i = plan[k].n_dims; i < 4; ++i) plan[k].ne[i] = 1;
    }
    qx_sb_le(&kv, 0, 8);
    qx_gguf_kv_str(&kv, "general.architecture", "clip", 4);
    qx_gguf_kv_bool(&kv, "clip.has_vision_encoder", 1);
    qx_gguf_kv_str(&kv, "clip.projector_type", "qwen2vl_merger", 14);
    if (qx_gguf_kv_count_add(&kv, 3) != 0) return 0;
    quarot_rng_seed(&rng, seed);
    for (k = 0; k < 4; ++k) {
        int64_t n = plan[k].ne[0] * plan[k].ne[1] * plan[k].ne[2] * plan[k].ne[3];
        data[k] = (float*)malloc((size_t)n * sizeof(float));
        for (i = 0; i < n; ++i) data[k][i] = (float)(quarot_rng_normal(&rng) / sqrt((double)dv));
    }
    if (qx_gguf_writer_begin(&w, path, plan, 4, kv.p, kv.len, NULL, &e) != QUAROT_OK) { printf("    mmproj: %s\n", e.msg); ok = 0; }
    for (k = 0; k < 4 && ok; ++k) {
        quarot_tensor t;
        ok = quarot_tensor_init(&t, data[k], QUAROT_DTYPE_F32, plan[k].n_dims, plan[k].ne) == QUAROT_OK &&
             qx_gguf_writer_put(w, plan[k].name, &t, &e) == QUAROT_OK;
    }
    if (ok) ok = qx_gguf_writer_finish(w, &e) == QUAROT_OK;
    else if (w) qx_gguf_writer_abort(w);
    if (!ok) printf("    mmproj: %s\n", e.msg);
    for (k = 0; k < 4; ++k) free(data[k]);
    qx_sb_free(&kv);
    return ok;
}

/* The mmproj's merger output projection added to the text store s under the Hugging Face names (F32),
   so that vl_merger_check can compare it; 0 when it cannot be read. */
static int add_mmproj_merger(qx_store* s, const char* path) {
    size_t n = 0;
    unsigned char* img = read_all(path, &n);
    qx_gguf_file f;
    qx_err e;
    uint64_t k;
    int found = 0;
    if (!img || qx_gguf_parse(img, n, path, &f, &e) != QUAROT_OK) { free(img); return 0; }
    for (k = 0; k < f.n_tensors; ++k) {
        const qx_gguf_tinfo* t = &f.t[k];
        const char* hf = t->name_len == 11 && memcmp(t->name, "mm.2.weight", 11) == 0 ? QX_VL_MERGER_WEIGHT
                         : t->name_len == 9 && memcmp(t->name, "mm.2.bias", 9) == 0 ? QX_VL_MERGER_BIAS : NULL;
        quarot_tensor v;
        quarot_tensor* dst;
        if (!hf) continue;
        if (quarot_tensor_init(&v, (void*)(uintptr_t)(f.data + t->offset), t->type == QX_GGML_F16 ? QUAROT_DTYPE_F16 : QUAROT_DTYPE_F32,
                               (int)t->n_dims, t->ne) != QUAROT_OK ||
            qx_store_add(s, hf, QUAROT_DTYPE_F32, (int)t->n_dims, t->ne, NULL, &dst) != QUAROT_OK)
            break;
        {
            int64_t r, ok = 1;
            for (r = 0; r < quarot_tensor_nrows(&v) && ok; ++r)
                ok = quarot_tensor_get_row_f32(&v, r, (float*)dst->data + r * v.ne[0]) == QUAROT_OK;
            if (!ok) break;
        }
        ++found;
    }
    qx_gguf_file_free(&f);
    free(img);
    return found == 2;
}

static void test_rotate_gguf_text(void) {
    static const int32_t good[4] = {2, 3, 3, 0}, bad[4] = {2, 3, 4, 0};
    int v;
    for (v = 0; v < 2; ++v) {
        qx_synth_desc d;
        qx_store s, a, b;
        qx_gguf_save_opts o;
        qx_err e;
        char dir[512], in[768], out[768];
        double rel;
        memset(&d, 0, sizeof d);
        d.arch = "qwen2";
        d.seed = 50;
        if (qx_synth_model(&s, &d, &e) != QUAROT_OK || !qwen2vl_kv(&s, v ? bad : good)) { QT_CHECK(0); continue; }
        snprintf(dir, sizeof dir, "%s/gg%d", g_tmp, v);
        mkdir(dir, 0777);
        snprintf(in, sizeof in, "%s/text.gguf", dir);
        snprintf(out, sizeof out, "%s/rot.gguf", dir);
        memset(&o, 0, sizeof o);
        if (qx_gguf_save(&s, in, &o, &e) != QUAROT_OK) { QT_CHECKF(0, "gguf save: %s", e.msg); qx_store_free(&s); continue; }
        qx_store_free(&s);
        if (v) {
            QT_EQ_INT(CLI("rotate %s %s", in, out), QX_EXIT_INPUT);
            QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "qwen2vl.rope.dimension_sections sums to 9"), "stderr: %s", g_err);
            QT_CHECK(!qx_path_exists(out));
            printf("    %s", g_err);
            continue;
        }
        QT_EQ_INT(CLI("rotate %s %s", in, out), 0);
        QT_CHECKF(strstr(g_err, "mmproj") && strstr(g_err, "text-only"), "stderr: %s", g_err);
        QT_CHECKF(strstr(g_out, "WARNING vision: text decoder only"), "%s", g_out);
        QT_CHECK(CLI("rotate %s %s --strict --force", in, out) == QX_EXIT_PROCESS && strstr(g_err, "mmproj"));
        if (!load_model(in, &a)) { QT_CHECK(0); continue; }
        if (!load_model(out, &b)) { QT_CHECK(0); qx_store_free(&a); continue; }
        QT_CHECK(qx_store_get_blob(&b, "gguf.vl", NULL) != NULL);   /* still arch qwen2vl */
        rel = logit_rel_diff(&a, &b, NULL, 16);
        QT_CHECKF(rel <= 2e-5, "qwen2vl gguf: text logits differ by %.3g", rel);
        printf("    qwen2vl text GGUF: logits rel %.2e (tol 2e-5)\n", rel);
        qx_store_free(&b);
        {   /* with its mmproj: mm.2 rotated by the same R1 (F16, so within F16's rounding), the rest copied */
            char mp[768], mpo[768], rot2[768], bad_mp[768];
            double mrel = 1e30, nrel = 1e30;
            size_t na = 0, nb = 0;
            unsigned char *xa, *xb;
            snprintf(mp, sizeof mp, "%s/mmproj.gguf", dir);
            snprintf(mpo, sizeof mpo, "%s/mmproj-rot.gguf", dir);
            snprintf(rot2, sizeof rot2, "%s/rot2.gguf", dir);
            snprintf(bad_mp, sizeof bad_mp, "%s/mmproj-bad.gguf", dir);
            QT_CHECK(write_mmproj(mp, a.config.hidden, 9) && write_mmproj(bad_mp, a.config.hidden + 8, 9));
            QT_EQ_INT(CLI("rotate %s %s --mmproj %s --mmproj-out %s --online", in, rot2, mp, mpo), 0);
            QT_CHECKF(!strstr(g_err, "warning") && strstr(g_out, "mm.2 rotated by R1"), "%s%s", g_out, g_err);
            if (load_model(rot2, &b)) {
                quarot_online_list l;
                QT_CHECK(add_mmproj_merger(&a, mp) && add_mmproj_merger(&b, mpo));
                mrel = vl_merger_check(&a, &b, QX_VL_MERGER_WEIGHT, QX_VL_MERGER_BIAS, QX_VL_MERGER_WEIGHT, QX_VL_MERGER_BIAS,
                                       "model.embed_tokens.weight", "model.embed_tokens.weight", &nrel);
                char hp[800];
                snprintf(hp, sizeof hp, "%s.quarot-online", rot2);
                if (load_hooks(hp, &l)) {
                    rel = logit_rel_diff(&a, &b, &l, 16);
                    quarot_online_list_free(&l);
                }
                qx_store_free(&b);
            } else {
                QT_CHECK(0);
            }
            /* F16 weights: |y'| / |y| and y'E'^T within F16's 2^-11 relative rounding of each weight */
            QT_CHECKF(mrel <= 1e-3 && nrel <= 1e-3, "mmproj merger not rotated by R1 (%.3g, norms %.3g)", mrel, nrel);
            QT_CHECKF(rel <= 2e-5, "qwen2vl gguf --online: text logits differ by %.3g", rel);
            printf("    qwen2vl text GGUF + mmproj (F16 mm.2), --online: logits rel %.2e; merger y'E'^T vs yE^T %.2e, |y'| vs |y| "
                   "%.2e (tol 1e-3: F16)\n", rel, mrel, nrel);
            xa = read_all(mp, &na);
            xb = read_all(mpo, &nb);
            {   /* every byte outside mm.2 as in the input */
                qx_gguf_file f;
                qx_err ge;
                size_t diff = 0, i2, lo = na, hi = 0;
                if (xa && xb && na == nb && qx_gguf_parse(xa, na, mp, &f, &ge) == QUAROT_OK) {
                    uint64_t k2;
                    for (k2 = 0; k2 < f.n_tensors; ++k2)
                        if (f.t[k2].name_len >= 4 && memcmp(f.t[k2].name, "mm.2", 4) == 0) {
                            size_t b0 = (size_t)(f.data_offset + f.t[k2].offset), b1 = b0 + (size_t)f.t[k2].nbytes;
                            if (b0 < lo) lo = b0;
                            if (b1 > hi) hi = b1;
                        }
                    for (i2 = 0; i2 < na; ++i2) diff += (i2 < lo || i2 >= hi) && xa[i2] != xb[i2];
                    qx_gguf_file_free(&f);
                    QT_CHECKF(diff == 0 && hi > lo, "mmproj: %zu bytes outside mm.2 differ", diff);
                } else {
                    QT_CHECKF(0, "mmproj output unreadable or of another size");
                }
            }
            free(xa);
            free(xb);
            /* a merger of another width: refused naming it, nothing written (neither file) */
            snprintf(mpo, sizeof mpo, "%s/mmproj-rot-bad.gguf", dir);
            snprintf(rot2, sizeof rot2, "%s/rot3.gguf", dir);
            QT_EQ_INT(CLI("rotate %s %s --mmproj %s --mmproj-out %s", in, rot2, bad_mp, mpo), QX_EXIT_INPUT);
            QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "\"mm.2.weight\" has ne") && !qx_path_exists(rot2) &&
                      !qx_path_exists(mpo), "bad mmproj: %s", g_err);
            printf("    %s", g_err);
        }
        qx_store_free(&a);
    }
}

/* `quarot eval` on a Qwen2-VL checkpoint (text only): its FP32 row's no-rotation and QuaRot columns
   (the rotation in memory through the qwen2vl adapter, merger included) agree to 4 digits, as for
   the dense families (test_cli_eval). */
static void test_eval_vl(void) {
    static const int64_t mrope[3] = {2, 3, 3};
    qx_store s;
    char dir[512], in[768], tok[768], text[768], cfg[4096];
    double a = 0, b = 0;
    if (!vl_store(&s, 70, 1, 64, SYN_VOCAB)) { QT_CHECK(0); return; }
    snprintf(dir, sizeof dir, "%s/eval", g_tmp);
    mkdir(dir, 0777);
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(tok, sizeof tok, "%s/tokenizer.bin", dir);
    snprintf(text, sizeof text, "%s/text.txt", dir);
    vl_config(&s, 1, mrope, s.config.hidden, cfg, sizeof cfg);
    if (!vl_save(&s, in, 1, cfg)) { QT_CHECK(0); qx_store_free(&s); return; }
    qx_store_free(&s);
    QT_CHECK(write_tokenizer(tok) && cu_write_sentences(text, qt_quick() ? 10 : 30));
    QT_EQ_INT(CLI("eval '%s' --tokenizer '%s' --text '%s' --seq-len 64 --windows 4 --w-bits 16 --a-bits 16 --quiet", in, tok,
                  text), 0);
    QT_CHECKF(table_row(g_out, "FP32", &a, &b) && a > 0 && fabs(a - b) <= 5e-4 * a, "eval: %s%s", g_out, g_err);
    printf("    qwen2vl eval (newer layout): FP32 perplexity %.5f, after QuaRot %.5f (rel %.1e)\n", a, b, fabs(a - b) / a);
    {   /* the inference engine on the text decoder: W4A4 as the reference's, both columns */
        double r1 = 0, r2 = 0, e1 = 0, e2 = 0;
        int ok;
        QT_EQ_INT(CLI("eval '%s' --tokenizer '%s' --text '%s' --seq-len 64 --windows 2 --w-bits 4 --a-bits 4 --quiet", in, tok,
                      text), 0);
        ok = table_row(g_out, "W4A4", &r1, &r2);
        QT_EQ_INT(CLI("eval '%s' --tokenizer '%s' --text '%s' --seq-len 64 --windows 2 --w-bits 4 --a-bits 4 --quiet --engine int",
                      in, tok, text), 0);
        ok = ok && table_row(g_out, "W4A4", &e1, &e2);
        QT_CHECKF(ok && fabs(e1 - r1) <= 1e-5 * r1 && fabs(e2 - r2) <= 1e-5 * r2, "engine %.5f / %.5f vs reference %.5f / %.5f: %s",
                  e1, e2, r1, r2, g_err);
        printf("    qwen2vl eval W4A4 no rotation / QuaRot: --engine ref %.5f / %.5f, --engine int %.5f / %.5f (bound 1e-5)\n", r1,
               r2, e1, e2);
    }
}

/* 1 when every tensor of b is in a with the same dtype, shape and bytes and a holds no other. */
static int same_tensors(const qx_store* a, const qx_store* b) {
    int64_t i;
    if (a->count != b->count) return 0;
    for (i = 0; i < b->count; ++i)
        if (!vl_same_bytes(a, b->items[i].name, b, b->items[i].name)) return 0;
    return 1;
}

/* n bytes at p hold the string w. */
static int has_str(const unsigned char* p, size_t n, const char* w) {
    size_t k, wl = strlen(w);
    for (k = 0; k + wl <= n; ++k)
        if (memcmp(p + k, w, wl) == 0) return 1;
    return 0;
}

/* The GGUF qg is llama.cpp's qwen2vl text model (general.architecture, qwen2vl.* keys with
   embedding_length h, rope.dimension_sections 2 3 3 0, general.file_type), names nothing of the vision
   tower, and holds exactly pg's tensors (name, type, shape, bytes). */
static void check_vl_gguf(const char* qg, const char* pg, int64_t h, const char* what) {
    size_t na = 0, nb = 0;
    unsigned char* xa = read_all(qg, &na);
    unsigned char* xb = read_all(pg, &nb);
    qx_gguf_file fa, fb;
    qx_err ga, gb;
    if (xa && xb && qx_gguf_parse(xa, na, qg, &fa, &ga) == QUAROT_OK) {
        if (qx_gguf_parse(xb, nb, pg, &fb, &gb) == QUAROT_OK) {
            uint64_t al = 0;
            const char* arch = qx_gguf_kv_string(qx_gguf_find(&fa, "general.architecture"), &al);
            const qx_gguf_kv* ds = qx_gguf_find(&fa, "qwen2vl.rope.dimension_sections");
            const char* diff = gguf_same_tensors(&fa, &fb);
            int64_t emb = 0, sec[4] = {-1, -1, -1, -1};
            int k;
            if (ds && ds->type == QX_GGUF_ARRAY && ds->arr_type == QX_GGUF_I32 && ds->arr_count == 4)
                for (k = 0; k < 4; ++k) sec[k] = (int64_t)(int32_t)qx_str_le32(ds->val + 4 * k);
            (void)qx_gguf_kv_int(qx_gguf_find(&fa, "qwen2vl.embedding_length"), &emb);
            QT_CHECKF(arch && al == 7 && memcmp(arch, "qwen2vl", 7) == 0, "%s gguf: general.architecture", what);
            QT_CHECKF(sec[0] == 2 && sec[1] == 3 && sec[2] == 3 && sec[3] == 0, "%s gguf: dimension_sections %lld %lld %lld %lld",
                      what, (long long)sec[0], (long long)sec[1], (long long)sec[2], (long long)sec[3]);
            QT_CHECKF(emb == h && qx_gguf_find(&fa, "qwen2vl.attention.head_count") && qx_gguf_find(&fa, "qwen2vl.block_count") &&
                      !qx_gguf_find(&fa, "qwen2.block_count"), "%s gguf: the qwen2vl.* keys", what);
            QT_CHECKF(diff == NULL, "%s gguf: tensor %s differs from the plain Qwen2 GGUF's", what, diff ? diff : "");
            QT_CHECK(qx_gguf_find(&fa, "general.file_type") != NULL);
            qx_gguf_file_free(&fb);
        } else {
            QT_CHECKF(0, "%s", gb.msg);
        }
        qx_gguf_file_free(&fa);
    } else {
        QT_CHECKF(0, "%s gguf unreadable", what);
    }
    QT_CHECK(xa && !has_str(xa, na, "visual") && !has_str(xa, na, "merger"));
    free(xa);
    free(xb);
}

/* The W4A4 row of `quarot eval FILE ARGS` on the tokens, --engine ref and int: 1 when both ran. */
static int eval_pair(const char* file, const char* args, const char* toks, double* ref, double* eng) {
    *ref = *eng = -1;
    if (CLI("eval %s --tokens %s --seq-len 16 %s --quiet", file, toks, args) != 0) return 0;
    *ref = row_value("W4A4");
    if (CLI("eval %s --tokens %s --seq-len 16 %s --quiet --engine int", file, toks, args) != 0) return 0;
    *eng = row_value("W4A4");
    return *ref > 0 && *eng > 0;
}

/* `quarot quantize --text-only` of a Qwen2-VL checkpoint (both layouts), to the packed W4A4 file and
   to GGUF: the output holds the text decoder alone, the very tensors (bytes) that quantizing the same
   decoder saved as a plain Qwen2 gives; the GGUF is llama.cpp's qwen2vl (its keys, rope.dimension_
   sections = mrope_section padded to 4); `quarot eval` runs both files, --engine int within 1e-5 of
   --engine ref on the W4A4 row (the packed file: exactly the plain Qwen2 file's numbers); stderr and
   the summary count the vision tensors and bytes left out; the merger of `quarot rotate` with the
   same options fits the quantized text model (y'E'^T = yE^T within 1e-3: the embedding is F16).
   Without --text-only both outputs are refused naming it, and --text-only on a model without a
   vision tower is a usage error. */
static void test_quantize_text_only(void) {
    static const int64_t mrope[3] = {2, 3, 3};
    char toks[1024];
    int i, n = 0, newer;
    for (i = 0; i < 64; ++i) n += snprintf(toks + n, sizeof toks - (size_t)n, "%d ", 1 + (i * 13 + 7) % 47);
    QT_CHECK(write_str(tmp_path("toks.txt"), toks));
    for (newer = 0; newer < 2; ++newer) {
        qx_store s, plain, a, b, r;
        qx_synth_desc d;
        qx_st_save_opts so;
        qx_err e;
        char dir[512], in[768], pl[768], q[768], p[768], qg[768], pg[768], rd[768], cfg[4096], what[32];
        int64_t h, dv;
        uint64_t vis_bytes;
        double r1, e1, r2, e2, mrel = 1e30, nrel = 1e30;
        size_t nq = 0;
        unsigned char* img;
        snprintf(what, sizeof what, "%s layout", newer ? "newer" : "older");
        if (!vl_store(&s, 90 + (uint64_t)newer, newer ? -1 : 1, 64, 0)) { QT_CHECK(0); continue; }
        snprintf(dir, sizeof dir, "%s/txt%d", g_tmp, newer);
        mkdir(dir, 0777);
        snprintf(in, sizeof in, "%s/in", dir);
        snprintf(pl, sizeof pl, "%s/plain", dir);
        snprintf(q, sizeof q, "%s/q.safetensors", dir);
        snprintf(p, sizeof p, "%s/p.safetensors", dir);
        snprintf(qg, sizeof qg, "%s/q.gguf", dir);
        snprintf(pg, sizeof pg, "%s/p.gguf", dir);
        snprintf(rd, sizeof rd, "%s/rot", dir);
        h = s.config.hidden;
        dv = h + h / 2;
        vis_bytes = 4u * (uint64_t)(dv * h + h + dv * dv + 8 * 3 * 2 * 4 * 4);
        vl_config(&s, newer, mrope, h, cfg, sizeof cfg);
        if (!vl_save(&s, in, newer, cfg)) { QT_CHECK(0); qx_store_free(&s); continue; }
        qx_store_free(&s);
        memset(&d, 0, sizeof d);   /* the same decoder as a plain Qwen2 (vl_store's synth call) */
        d.arch = "qwen2";
        d.seed = 90 + (uint64_t)newer;
        d.tied = newer ? -1 : 1;
        memset(&so, 0, sizeof so);
        if (qx_synth_model(&plain, &d, &e) != QUAROT_OK || qx_st_save(&plain, pl, &so, &e) != QUAROT_OK) {
            QT_CHECKF(0, "plain qwen2: %s", e.msg);
            continue;
        }
        qx_store_free(&plain);

        /* refused without --text-only (naming it), nothing written; --text-only on a model with no vision tower */
        QT_EQ_INT(CLI("quantize %s %s --quiet", in, q), QX_EXIT_PROCESS);
        QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "has 5 dimensions") && strstr(g_err, "--text-only") && !qx_path_exists(q),
                  "%s packed: %s", what, g_err);
        QT_EQ_INT(CLI("quantize %s %s --quiet", in, qg), QX_EXIT_PROCESS);
        QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "mmproj") && strstr(g_err, "--text-only") && !qx_path_exists(qg),
                  "%s gguf: %s", what, g_err);
        if (!newer) {
            printf("    %s", g_err);
            QT_EQ_INT(CLI("quantize %s %s --text-only --quiet", pl, p), QX_EXIT_USAGE);
            QT_CHECKF(strstr(g_err, "no vision tower") && !qx_path_exists(p), "%s", g_err);
        }

        /* packed W4A4 */
        QT_EQ_INT(CLI("quantize %s %s --text-only", in, q), 0);
        {
            char want[128];
            snprintf(want, sizeof want, "vision tower (4 tensors, %llu bytes) is not written", (unsigned long long)vis_bytes);
            QT_CHECKF(strstr(g_err, want) && strstr(g_err, "quarot rotate"), "%s: stderr: %s", what, g_err);
            snprintf(want, sizeof want, "vision tower: not written (--text-only): 4 tensors, %llu bytes", (unsigned long long)vis_bytes);
            QT_CHECKF(strstr(g_out, want), "%s: summary: %s", what, g_out);
        }
        QT_EQ_INT(CLI("quantize %s %s --quiet", pl, p), 0);
        img = read_all(q, &nq);
        QT_CHECKF(img && nq > 0 && !has_str(img, nq, "visual."), "%s: the packed file names a vision tensor", what);
        free(img);
        if (load_model(q, &a)) {
            if (load_model(p, &b)) {
                QT_CHECKF(strcmp(a.config.arch, "qwen2") == 0 && qx_store_get_blob(&a, "vl.text", NULL) && qx_vl_tensor_count(&a) == 0 &&
                          same_tensors(&a, &b),
                          "%s: packed text decoder (arch %s, %lld vision tensors) is not the plain Qwen2's", what, a.config.arch,
                          (long long)qx_vl_tensor_count(&a));
                qx_store_free(&b);
            } else {
                QT_CHECK(0);
            }
            /* the merger `quarot rotate` writes with the same rotation, against this file's embedding */
            QT_EQ_INT(CLI("rotate %s %s --quiet", in, rd), 0);
            if (load_model(rd, &r) && load_model(in, &b)) {
                quarot_tensor* t;
                const quarot_tensor* w = qx_store_find(&r, QX_VL_MERGER_WEIGHT);
                const quarot_tensor* bb = qx_store_find(&r, QX_VL_MERGER_BIAS);
                int ok = w && bb && qx_store_add(&a, QX_VL_MERGER_WEIGHT, QUAROT_DTYPE_F32, 2, w->ne, w->data, &t) == QUAROT_OK &&
                         qx_store_add(&a, QX_VL_MERGER_BIAS, QUAROT_DTYPE_F32, 1, bb->ne, bb->data, &t) == QUAROT_OK &&
                         qx_store_convert(&a, QUAROT_DTYPE_F32) == QUAROT_OK;
                if (ok)
                    mrel = vl_merger_check(&b, &a, QX_VL_MERGER_WEIGHT, QX_VL_MERGER_BIAS, QX_VL_MERGER_WEIGHT, QX_VL_MERGER_BIAS,
                                           "model.embed_tokens.weight", "model.embed_tokens.weight", &nrel);
                QT_CHECKF(ok && mrel <= 1e-3 && nrel <= 1e-5, "%s: rotate's merger vs the packed embedding %.3g (norms %.3g)", what, mrel,
                          nrel);
                qx_store_free(&r);
                qx_store_free(&b);
            } else {
                QT_CHECK(0);
            }
            qx_store_free(&a);
        } else {
            QT_CHECK(0);
        }
        QT_CHECK(eval_pair(q, "", tmp_path("toks.txt"), &r1, &e1));
        QT_CHECK(eval_pair(p, "", tmp_path("toks.txt"), &r2, &e2));
        QT_CHECKF(fabs(e1 - r1) <= 1e-5 * r1 && r1 == r2 && e1 == e2, "%s packed: engine %.6f vs reference %.6f (plain qwen2 %.6f / %.6f)",
                  what, e1, r1, r2, e2);
        printf("    qwen2vl %s --text-only packed W4A4: eval --engine ref %.6f, --engine int %.6f (bound 1e-5; plain Qwen2 file "
               "%.6f / %.6f); tensors as the plain Qwen2's; rotate's merger vs its F16 embedding %.2e (tol 1e-3)\n",
               what, r1, e1, r2, e2, mrel);

        /* GGUF: llama.cpp's qwen2vl text model */
        QT_EQ_INT(CLI("quantize %s %s --text-only --quiet", in, qg), 0);
        QT_CHECKF(strstr(g_err, "--text-only") && strstr(g_err, "4 tensors"), "%s gguf: stderr %s", what, g_err);
        QT_EQ_INT(CLI("quantize %s %s --quiet", pl, pg), 0);
        check_vl_gguf(qg, pg, h, what);
        {   /* quarot rotate to GGUF (F32: no quantization), --check: the same keys and tensors */
            char rg[800], prg[800];
            const char* m;
            double dmax = -1, drel = 1e30;
            snprintf(rg, sizeof rg, "%s/r.gguf", dir);
            snprintf(prg, sizeof prg, "%s/pr.gguf", dir);
            QT_EQ_INT(CLI("rotate %s %s --text-only --quiet", in, rd), QX_EXIT_USAGE);   /* a safetensors OUT keeps the tower */
            QT_CHECKF(strstr(g_err, "--text-only: for a GGUF OUT"), "%s", g_err);
            QT_EQ_INT(CLI("rotate %s %s", in, rg), QX_EXIT_PROCESS);
            QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "--text-only") && !qx_path_exists(rg), "%s", g_err);
            QT_EQ_INT(CLI("rotate %s %s --text-only --check", in, rg), 0);
            QT_CHECKF(strstr(g_err, "--text-only") && strstr(g_err, "4 tensors"), "%s rotate: stderr %s", what, g_err);
            QT_CHECKF(strstr(g_out, "vision tower: not written (--text-only): 4 tensors"), "%s rotate: %s", what, g_out);
            m = strstr(g_out, "max |difference| ");
            QT_CHECKF(m && sscanf(m + 17, "%lf, %lf", &dmax, &drel) == 2 && drel <= 2e-5, "%s rotate --check: %s", what, g_out);
            QT_EQ_INT(CLI("rotate %s %s --quiet", pl, prg), 0);
            check_vl_gguf(rg, prg, h, what);
            if (!newer) {
                QT_EQ_INT(CLI("rotate %s %s --text-only", pl, prg), QX_EXIT_USAGE);
                QT_CHECKF(strstr(g_err, "no vision tower"), "%s", g_err);
            }
            printf("    qwen2vl %s rotate --text-only to GGUF F32: tensors as the plain Qwen2 GGUF's; --check logits %.2e of the "
                   "largest (tol 2e-5)\n", what, drel);
        }
        if (load_model(qg, &a)) {   /* read back as llama.cpp's qwen2vl text model */
            QT_CHECK(qx_store_get_blob(&a, "gguf.vl", NULL) != NULL && qx_vl_tensor_count(&a) == 0);
            qx_store_free(&a);
        } else {
            QT_CHECK(0);
        }
        QT_CHECK(eval_pair(qg, "--w-bits 4 --a-bits 4", tmp_path("toks.txt"), &r1, &e1));
        QT_CHECKF(fabs(e1 - r1) <= 1e-5 * r1, "%s gguf: engine %.6f vs reference %.6f", what, e1, r1);
        printf("    qwen2vl %s --text-only GGUF Q4_0 (arch qwen2vl, sections 2 3 3 0): tensors as the plain Qwen2 GGUF's; "
               "eval W4A4 --engine ref %.6f, --engine int %.6f (bound 1e-5)\n", what, r1, e1);
    }
}

/* Each bad input: rotate exits 2 with one line naming `needle`, and writes nothing. */
static void test_bad_inputs(void) {
    static const int64_t good[3] = {2, 3, 3}, bad[3] = {2, 3, 2};
    enum { BAD_MROPE, BAD_VIS_OUT, BAD_MERGER_ROWS, NO_MERGER, NO_BIAS, N_BAD };
    static const char* const needle[N_BAD] = {"rope_scaling.mrope_section sums to 7, but head_dim / 2 is 8",
                                              "vision_config.out_hidden_size is 48", "visual.merger.mlp.2.weight\" has shape [72,",
                                              "visual.merger.mlp.2.weight\" is missing", "visual.merger.mlp.2.bias\" is missing"};
    int k;
    for (k = 0; k < N_BAD; ++k) {
        qx_store s;
        char dir[512], in[768], out[768], cfg[4096];
        int before;
        if (!vl_store(&s, 60, 1, k == BAD_MERGER_ROWS ? 72 : 64, 0)) { QT_CHECK(0); continue; }
        if (k == NO_MERGER) qx_store_remove(&s, QX_VL_MERGER_WEIGHT);
        if (k == NO_BIAS) qx_store_remove(&s, QX_VL_MERGER_BIAS);
        snprintf(dir, sizeof dir, "%s/bad%d", g_tmp, k);
        mkdir(dir, 0777);
        snprintf(in, sizeof in, "%s/in", dir);
        snprintf(out, sizeof out, "%s/out", dir);
        vl_config(&s, k == BAD_VIS_OUT, k == BAD_MROPE ? bad : good, k == BAD_VIS_OUT ? 48 : s.config.hidden, cfg, sizeof cfg);
        if (!vl_save(&s, in, k == BAD_VIS_OUT, cfg)) { QT_CHECK(0); qx_store_free(&s); continue; }
        qx_store_free(&s);
        before = fu_count_entries(dir);
        QT_EQ_INT(CLI("rotate %s %s", in, out), QX_EXIT_INPUT);
        QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, needle[k]), "case %d: stderr: %s", k, g_err);
        QT_EQ_INT(fu_count_entries(dir), before);
        printf("    %s", g_err);
    }
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_cli_vl")) return 1;
    QT_RUN(test_rotate_vl);
    QT_RUN(test_rotate_gguf_text);
    QT_RUN(test_eval_vl);
    QT_RUN(test_quantize_text_only);
    QT_RUN(test_bad_inputs);
    cu_finish();
    return qt_finish("test_cli_vl");
}
