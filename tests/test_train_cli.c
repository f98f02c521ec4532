/* SpinQuant through the command line: `quarot calibrate --method spinquant` writes a rotation file,
   `quarot rotate | quantize | eval --rotation learned --rotations FILE` apply it, `quarot run` has it
   as a processor (`type: spinquant`, trained in spec.prior or read from a file). The quarot binary
   beside this program is run through system() ($QT_RUNNER in front) on a synthetic llama2.c model.
   Checked:
   - the file: safetensors with R1 [hidden][hidden] and model.layers.{i}.self_attn.R2, orthogonal,
     carrying the model's digest; the same bytes for 1 and 2 threads; not overwritten without --force;
   - applying it: `rotate --rotations` folds exactly the processor's MATRIX R1 + per-layer R2 (the same
     tensors as quarot_rotate_model in this process with the file's matrices); FP32 perplexity of the
     learned column equals no rotation's (eval's 9 digits, within 1e-6 relative); the YAML runner
     writes the same bytes as calibrate + rotate;
   - imported rotations (a file without a digest, R1 in float32, e.g. SpinQuant's R.bin converted)
     are accepted and re-orthogonalized; a non-orthogonal one is refused;
   - bad input, one stderr line and the documented exit code, no output left: a rotation file for
     another model (digest, shapes), --rotations without learned and the reverse, a calibration text
     too short for --nsamples x --seq-len. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "cli/qx_cli.h"
#include "support/qx_file.h"
#include "formats/qx_llama2c.h"
#include "formats/qx_safetensors.h"
#include "formats/qx_load.h"
#include "model/qx_model.h"
#include "model/qx_synth.h"
#include "eval/qx_spin.h"

#include <dirent.h>
#include <sys/stat.h>

static char MODEL[512], MODEL2[512], TOK[512], TEXT[512], SHORT[512];
static int SYN_OK;

static int temporaries(void) {
    DIR* d = opendir(g_tmp);
    struct dirent* de;
    int n = 0;
    if (!d) return -1;
    while ((de = readdir(d)) != NULL) n += strstr(de->d_name, ".tmp") != NULL;
    closedir(d);
    return n;
}

static int write_text(const char* path, int n_par) {
    static const char* const words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "ran", "into", "garden",
                                        "where", "there", "was", "big", "tree", "bird", "sang", "happy", "song", "under"};
    FILE* f = fopen(path, "wb");
    int p, w;
    if (!f) return 0;
    qt_seed(12);
    for (p = 0; p < n_par; ++p) {
        int n = 10 + (int)(qt_uniform() * 40);
        for (w = 0; w < n; ++w) {
            fputs(words[(int)(qt_uniform() * (double)(sizeof words / sizeof words[0]))], f);
            fputc(w + 1 < n ? ' ' : '.', f);
        }
        fputs("\n\n", f);
    }
    return fclose(f) == 0;
}

static int write_model(const char* dir, const char* path, uint64_t seed) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    qx_l2c_write_opts wo;
    cu_synth_desc(&d);
    d.seed = seed;
    if (qx_synth_model(&s, &d, &e) != QUAROT_OK) { printf("    synth: %s\n", e.msg); return 0; }
    mkdir(dir, 0755);
    memset(&wo, 0, sizeof wo);
    wo.format = QX_L2C_V0;
    if (qx_l2c_write_file(&s, path, &wo, &e) != QUAROT_OK) { printf("    write: %s\n", e.msg); qx_store_free(&s); return 0; }
    qx_store_free(&s);
    return 1;
}

static int setup(void) {
    char dir[600], dir2[600];
    snprintf(dir, sizeof dir, "%s/syn", g_tmp);
    snprintf(dir2, sizeof dir2, "%s/syn2", g_tmp);
    snprintf(MODEL, sizeof MODEL, "%s/syn/model.bin", g_tmp);
    snprintf(MODEL2, sizeof MODEL2, "%s/syn2/model.bin", g_tmp);
    snprintf(TOK, sizeof TOK, "%s/syn/tokenizer.bin", g_tmp);
    snprintf(TEXT, sizeof TEXT, "%s/calib.txt", g_tmp);
    snprintf(SHORT, sizeof SHORT, "%s/short.txt", g_tmp);
    if (!write_model(dir, MODEL, 3) || !write_model(dir2, MODEL2, 4)) return 0;
    if (!write_tokenizer(TOK)) return 0;
    snprintf(dir2, sizeof dir2, "%s/syn2/tokenizer.bin", g_tmp);
    return write_tokenizer(dir2) && write_text(TEXT, qt_quick() ? 40 : 60) && write_text(SHORT, 2);
}

/* R1 and every layer's R2 of a rotation file (malloc'ed); 0 when unreadable. */
static int read_rotations(const char* path, double** r1, double** r2, int64_t* h, int64_t* hd, int64_t* L, char* digest, size_t dcap) {
    qx_store s;
    qx_st_read_opts ro;
    qx_err e;
    const quarot_tensor* t;
    int64_t l, i;
    memset(&ro, 0, sizeof ro);
    ro.copy = 1;
    ro.no_config = 1;
    qx_store_init(&s);
    if (qx_st_load(path, &s, &ro, &e) != QUAROT_OK) { printf("    %s\n", e.msg); return 0; }
    t = qx_store_find(&s, "R1");
    if (!t || t->dtype != QUAROT_DTYPE_F64) { qx_store_free(&s); return 0; }
    *h = t->ne[0];
    *r1 = (double*)malloc((size_t)(*h * *h) * sizeof(double));
    for (i = 0; i < *h; ++i) quarot_tensor_get_row_f64(t, i, *r1 + i * *h);
    for (*L = 0;; ++*L) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%lld.self_attn.R2", (long long)*L);
        if (!qx_store_find(&s, name)) break;
    }
    t = qx_store_find(&s, "model.layers.0.self_attn.R2");
    *hd = t ? t->ne[0] : 0;
    *r2 = (double*)malloc((size_t)(*L * *hd * *hd + 1) * sizeof(double));
    for (l = 0; l < *L; ++l) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%lld.self_attn.R2", (long long)l);
        t = qx_store_find(&s, name);
        for (i = 0; i < *hd; ++i) quarot_tensor_get_row_f64(t, i, *r2 + l * *hd * *hd + i * *hd);
    }
    if (digest) {
        size_t n = 0;
        const char* meta = (const char*)qx_store_get_blob(&s, "safetensors.metadata", &n);
        const char* p = meta ? strstr(meta, "\"quarot.model_digest\":\"") : NULL;
        digest[0] = '\0';
        if (p) snprintf(digest, dcap, "%.22s", p + 23);
    }
    qx_store_free(&s);
    return 1;
}

static double orth_err(const double* r, int64_t n) {
    double w = 0.0;
    int64_t i, j, k;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (k = 0; k < n; ++k) s += r[k * n + i] * r[k * n + j];
            s -= i == j ? 1.0 : 0.0;
            if (fabs(s) > w) w = fabs(s);
        }
    return w;
}

#define SPIN "--method spinquant --seq-len 64 --nsamples 8 --batch 4 --steps 4 --lr 2 --a-asym --clip 0.9"

static void test_calibrate_file(void) {
    const char* rot = tmp_path("rot.safetensors");
    const char* rot2 = tmp_path("rot2.safetensors");
    double *r1 = NULL, *r2 = NULL;
    int64_t h = 0, hd = 0, L = 0, l;
    char digest[64], dm[64];
    qx_err e;
    if (!SYN_OK) { QT_CHECK(0); return; }
    QT_EQ_INT(CLI("calibrate '%s' --text '%s' -o '%s' " SPIN, MODEL, TEXT, rot), 0);
    QT_CHECKF(strstr(g_err, "step   1/4") != NULL && strstr(g_err, "orthogonality") != NULL, "per-step lines: %s", g_err);
    QT_CHECK(strstr(g_out, "by SpinQuant") != NULL && strstr(g_out, "wrote") != NULL);
    QT_EQ_INT(temporaries(), 0);
    QT_CHECK(read_rotations(rot, &r1, &r2, &h, &hd, &L, digest, sizeof digest));
    QT_EQ_INT(h, 64);
    QT_EQ_INT(hd, 16);
    QT_EQ_INT(L, 2);
    QT_CHECK(r1 && orth_err(r1, h) <= 1e-6);
    for (l = 0; r2 && l < L; ++l) QT_CHECK(orth_err(r2 + l * hd * hd, hd) <= 1e-6);
    {
        const char* paths[1];
        paths[0] = MODEL;
        QT_OK(qx_digest_files(paths, 1, dm, &e));
        QT_CHECKF(strcmp(digest, dm) == 0, "digest '%s', model '%s'", digest, dm);
    }
    /* the same bytes with 2 threads; no overwrite without --force */
    QT_EQ_INT(CLI("calibrate '%s' --text '%s' -o '%s' " SPIN " --threads 2 --quiet", MODEL, TEXT, rot2), 0);
    QT_EQ_INT(count_lines(g_err), 0);
    QT_CHECK(same_file(rot, rot2));
    QT_EQ_INT(CLI("calibrate '%s' --text '%s' -o '%s' " SPIN " --quiet", MODEL, TEXT, rot), QX_EXIT_OUTPUT);
    QT_EQ_INT(count_lines(g_err), 1);
    free(r1);
    free(r2);
}

/* rotate --rotations = the processor with the file's R1 (MATRIX) and per-layer R2 in this process (read
   and made orthogonal as the tool does: qx_spin_load, qx_spin_check) */
static void test_rotate_matches_processor(void) {
    const char* rot = tmp_path("rot.safetensors");
    const char* out = tmp_path("learned.bin");
    qx_spin_rot sr;
    int64_t i;
    qx_store a, b;
    qx_err e;
    qx_load_opts lo;
    quarot_model m;
    qx_binding bd;
    quarot_rotate_desc d;
    double worst = 1.0;
    char dm[QX_DIGEST_LEN];
    if (!SYN_OK) { QT_CHECK(0); return; }
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotations '%s'", MODEL, out, rot), 0);
    QT_CHECKF(strstr(g_out, "learned rotations") != NULL, "%s", g_out);
    QT_OK(qx_spin_load(rot, &sr, &e));
    QT_OK(qx_spin_model_digest(MODEL, dm, &e));
    memset(&lo, 0, sizeof lo);
    lo.copy = 1;
    QT_OK(qx_load_model(out, &lo, &a, &e));
    QT_OK(qx_load_model(MODEL, &lo, &b, &e));
    QT_OK(qx_spin_check(&sr, &b.config, dm, &worst, &e));
    QT_CHECK(worst <= 1e-6);
    qx_model_bind(&m, &bd, &b);
    memset(&d, 0, sizeof d);
    qx_spin_desc(&sr, &d);
    QT_OK(quarot_rotate_model(&m, &d));
    for (i = 0; i < a.count; ++i) {
        const quarot_tensor* x = &a.items[i].t;
        const quarot_tensor* y = qx_store_find(&b, a.items[i].name);
        QT_CHECKF(y && quarot_tensor_nbytes(x) == quarot_tensor_nbytes(y) && memcmp(x->data, y->data, quarot_tensor_nbytes(x)) == 0,
                  "tensor %s differs", a.items[i].name);
    }
    QT_CHECK(sr.r2 != NULL && d.r2_rotation == QUAROT_ROTATION_MATRIX && d.rotation == QUAROT_ROTATION_MATRIX);
    qx_store_free(&a);
    qx_store_free(&b);
    qx_spin_rot_free(&sr);
}

/* eval's "FP32 to 9 digits:" line at p: the learned column equals no rotation's within 1e-6 relative */
static void fp32_learned_equals_none(const char* p) {
    double none = 0, learned = 0;
    if (p) {
        const char* a = strstr(p, "no rotation ");
        const char* c = strstr(p, "learned ");
        if (a) none = atof(a + 12);
        if (c) learned = atof(c + 8);
    }
    QT_CHECKF(none > 0 && fabs(learned - none) <= 1e-6 * none, "FP32 %.9g vs %.9g", learned, none);
}

/* The learned column: FP32 unchanged; W4A4 reported beside QuaRot's. */
static void test_eval_column(void) {
    const char* rot = tmp_path("rot.safetensors");
    const char* p;
    if (!SYN_OK) { QT_CHECK(0); return; }
    QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 64 --windows 4 --rotations '%s' --rows W4A4 --quiet", MODEL, TEXT, rot), 0);
    QT_CHECKF(strstr(g_out, "learned") != NULL && strstr(g_out, "QuaRot") != NULL, "%s", g_out);
    p = strstr(g_out, "FP32 to 9 digits:");
    QT_CHECK(p != NULL);
    fp32_learned_equals_none(p);
    /* --rotation learned alone: the columns no rotation and learned */
    QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 64 --windows 2 --rotation learned --rotations '%s' --no-fp32 --rows W4A4 --quiet", MODEL,
                  TEXT, rot), 0);
    QT_CHECK(strstr(g_out, "QuaRot") == NULL && strstr(g_out, "learned") != NULL);
    /* quantize: a packed W4A4 file with the learned rotations and their online hooks */
    QT_EQ_INT(CLI("quantize '%s' '%s' --rotations '%s' --force", MODEL, tmp_path("p.safetensors"), rot), 0);
    QT_EQ_INT(CLI("eval '%s' --tokenizer '%s' --text '%s' --seq-len 64 --windows 2 --engine int --quiet", tmp_path("p.safetensors"), TOK, TEXT), 0);
}

/* A mixture-of-experts checkpoint (Qwen2-MoE: a dense layer, 4 experts top 2, a shared expert with
   its gate, one tensor per expert, a Hugging Face directory): calibrate --method spinquant learns R1
   and R2 with the online hooks (R4 per expert), rotate --rotations folds them (FP32 logits of the
   rotated directory equal the original's, no routing change: rotate --check), and eval's learned
   column keeps FP32. */
static void test_moe(void) {
    char dir[600], out[600], ids[4096];
    const char* rot = tmp_path("moe_rot.safetensors");
    const char* toks = tmp_path("moe_ids.txt");
    const char* p;
    qx_synth_desc sd;
    qx_st_save_opts so;
    qx_store s;
    qx_err e;
    double *r1 = NULL, *r2 = NULL;
    int64_t h = 0, hd = 0, L = 0;
    char digest[64];
    size_t n = 0;
    int i;
    snprintf(dir, sizeof dir, "%s/moe_dir", g_tmp);
    snprintf(out, sizeof out, "%s/moe_learned", g_tmp);
    memset(&sd, 0, sizeof sd);
    sd.arch = "qwen2_moe";
    sd.seed = 11;
    sd.hidden = 32; sd.intermediate = 48; sd.n_layers = 2; sd.n_heads = 4; sd.n_kv_heads = 2; sd.head_dim = 8; sd.vocab = 64;
    sd.n_experts = 4; sd.n_experts_used = 2; sd.expert_intermediate = 16; sd.shared_intermediate = 32; sd.sparse_step = 2;
    memset(&so, 0, sizeof so);
    so.force = 1;
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK || qx_st_save(&s, dir, &so, &e) != QUAROT_OK) {
        QT_CHECKF(0, "%s", e.msg);
        return;
    }
    qx_store_free(&s);
    for (i = 0; i < 700; ++i) n += (size_t)snprintf(ids + n, sizeof ids - n, "%d ", (i * 7 + 3) % 64);
    QT_CHECK(write_str(toks, ids));
    QT_EQ_INT(CLI("calibrate '%s' --tokens '%s' -o '%s' --method spinquant --seq-len 32 --nsamples 8 --batch 4 --steps 4 "
                  "--a-asym --clip 0.9", dir, toks, rot), 0);
    QT_CHECKF(strstr(g_out, "by SpinQuant") != NULL && strstr(g_out, "online Hadamards") != NULL, "%s", g_out);
    QT_CHECK(read_rotations(rot, &r1, &r2, &h, &hd, &L, digest, sizeof digest));
    QT_CHECK(h == 32 && hd == 8 && L == 2 && r1 && orth_err(r1, h) <= 1e-6);
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotations '%s' --check --force", dir, out, rot), 0);
    QT_CHECKF(strstr(g_out, "learned rotations") != NULL && strstr(g_out, "routing flips 0") != NULL, "%s", g_out);
    QT_EQ_INT(CLI("eval '%s' --tokens '%s' --seq-len 32 --windows 4 --rotations '%s' --rows W4A4 --quiet", dir, toks, rot), 0);
    p = strstr(g_out, "FP32 to 9 digits:");
    QT_CHECKF(p != NULL, "%s", g_out);
    fp32_learned_equals_none(p);
    free(r1);
    free(r2);
}

/* quarot run: spinquant trained in spec.prior, and read from a file in spec.process */
static void test_run_yaml(void) {
    const char* yaml = tmp_path("spin.yaml");
    const char* yaml2 = tmp_path("spin2.yaml");
    char text[2048];
    if (!SYN_OK) { QT_CHECK(0); return; }
    snprintf(text, sizeof text,
             "apiversion: modelslim_v1\nspec:\n  prior:\n    - process:\n        - type: spinquant\n          steps: 4\n          nsamples: 8\n"
             "          batch: 4\n          lr: 2\n          a_asym: True\n          a_clip: 0.9\n      dataset: %s\n  process:\n"
             "    - type: spinquant\n      online: True\n", TEXT);
    QT_CHECK(write_str(yaml, text));
    QT_EQ_INT(CLI("run '%s' --model '%s' --save '%s' --seq-len 64", yaml, MODEL, tmp_path("run.bin")), 0);
    QT_CHECKF(strstr(g_out, "spinquant training, then spinquant") != NULL, "%s", g_out);
    /* the same as calibrate + rotate --online */
    QT_EQ_INT(CLI("calibrate '%s' --text '%s' -o '%s' " SPIN " --quiet --force", MODEL, TEXT, tmp_path("r3.safetensors")), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotations '%s' --online", MODEL, tmp_path("cr.bin"), tmp_path("r3.safetensors")), 0);
    QT_CHECK(same_file(tmp_path("run.bin"), tmp_path("cr.bin")));
    snprintf(text, sizeof text, "apiversion: modelslim_v1\nspec:\n  process:\n    - type: spinquant\n      online: True\n      rotations: r3.safetensors\n");
    QT_CHECK(write_str(yaml2, text));
    QT_EQ_INT(CLI("run '%s' --model '%s' --save '%s'", yaml2, MODEL, tmp_path("run2.bin")), 0);
    QT_CHECK(same_file(tmp_path("run2.bin"), tmp_path("cr.bin")));
    /* spinquant in spec.process without rotations or training */
    snprintf(text, sizeof text, "apiversion: modelslim_v1\nspec:\n  process:\n    - type: spinquant\n");
    QT_CHECK(write_str(yaml2, text));
    QT_EQ_INT(CLI("run '%s' --model '%s' --save '%s'", yaml2, MODEL, tmp_path("run3.bin")), QX_EXIT_INPUT);
    QT_CHECKF(strstr(g_err, "rotations") != NULL && count_lines(g_err) == 1, "%s", g_err);
}

/* A file without a digest, R1 in float32 (SpinQuant's R.bin converted): accepted; a non-orthogonal one refused. */
static void test_imported(void) {
    const char* rot = tmp_path("rot.safetensors");
    const char* imp = tmp_path("imported.safetensors");
    const char* bad = tmp_path("bad.safetensors");
    double *r1 = NULL, *r2 = NULL;
    int64_t h, hd, L, l, i;
    qx_store s;
    qx_err e;
    qx_st_save_opts so;
    char name[64];
    if (!SYN_OK || !read_rotations(rot, &r1, &r2, &h, &hd, &L, NULL, 0)) { QT_CHECK(0); return; }
    for (i = 0; i < 2; ++i) {
        int64_t ne[2];
        quarot_tensor* t;
        int64_t k;
        qx_store_init(&s);
        ne[0] = ne[1] = h;
        QT_OK(qx_store_add(&s, "R1", QUAROT_DTYPE_F32, 2, ne, NULL, &t));
        for (k = 0; k < h * h; ++k) ((float*)t->data)[k] = (float)r1[k];
        if (i == 1) ((float*)t->data)[3] += 0.01f;
        for (l = 0; l < L; ++l) {
            ne[0] = ne[1] = hd;
            snprintf(name, sizeof name, "model.layers.%lld.self_attn.R2", (long long)l);
            QT_OK(qx_store_add(&s, name, QUAROT_DTYPE_F32, 2, ne, NULL, &t));
            for (k = 0; k < hd * hd; ++k) ((float*)t->data)[k] = (float)r2[l * hd * hd + k];
        }
        memset(&so, 0, sizeof so);
        so.force = 1;
        QT_OK(qx_st_save(&s, i ? bad : imp, &so, &e));
        qx_store_free(&s);
    }
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotations '%s'", MODEL, tmp_path("imp.bin"), imp), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotations '%s'", MODEL, tmp_path("bad.bin"), bad), QX_EXIT_PROCESS);
    QT_CHECKF(strstr(g_err, "not orthogonal") != NULL && count_lines(g_err) == 1, "%s", g_err);
    QT_CHECK(!qx_path_exists(tmp_path("bad.bin")));
    free(r1);
    free(r2);
}

static void test_errors(void) {
    const char* rot = tmp_path("rot.safetensors");
    if (!SYN_OK) { QT_CHECK(0); return; }
    /* another model's rotations: the digest */
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotations '%s'", MODEL2, tmp_path("x.bin"), rot), QX_EXIT_PROCESS);
    QT_CHECKF(strstr(g_err, "another model") != NULL && count_lines(g_err) == 1, "%s", g_err);
    QT_CHECK(!qx_path_exists(tmp_path("x.bin")));
    QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 64 --windows 2 --rotations '%s' --quiet", MODEL2, TEXT, rot), QX_EXIT_PROCESS);
    QT_CHECK(strstr(g_err, "another model") != NULL);
    /* usage */
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotation learned", MODEL, tmp_path("x.bin")), QX_EXIT_USAGE);
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotation hadamard --rotations '%s'", MODEL, tmp_path("x.bin"), rot), QX_EXIT_USAGE);
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotations '%s'", MODEL, tmp_path("x.bin"), tmp_path("missing.safetensors")), QX_EXIT_INPUT);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --columns learned", MODEL, TEXT), QX_EXIT_USAGE);
    /* text too short for --nsamples x --seq-len: one line, nothing written */
    QT_EQ_INT(CLI("calibrate '%s' --text '%s' -o '%s' --method spinquant --seq-len 64 --nsamples 50", MODEL, SHORT, tmp_path("s.safetensors")),
              QX_EXIT_PROCESS);
    QT_CHECKF(strstr(g_err, "too short") != NULL && count_lines(g_err) == 1, "%s", g_err);
    QT_CHECK(!qx_path_exists(tmp_path("s.safetensors")));
    QT_EQ_INT(CLI("calibrate '%s' --text '%s' -o '%s' --method adapt --no-online", MODEL, TEXT, tmp_path("s.bin")), QX_EXIT_USAGE);
    QT_EQ_INT(temporaries(), 0);
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_train_cli")) return 1;
    SYN_OK = setup();
    QT_RUN(test_calibrate_file);
    QT_RUN(test_rotate_matches_processor);
    QT_RUN(test_eval_column);
    QT_RUN(test_run_yaml);
    QT_RUN(test_imported);
    QT_RUN(test_moe);
    QT_RUN(test_errors);
    cu_finish();
    return qt_finish("test_train_cli");
}
