/* Reliability of the tool's outputs: what a kill, a concurrent writer, a special file or
   a long name does to `quarot rotate`'s outputs, through the built binary (system(), prefixed by
   $QT_RUNNER under qemu) and through qx_file directly.

   Truths used:
   - Atomic publish: QX_FAULT_PUBLISH=k ends the run with _exit(86) just before its k-th publish
     step, as a kill at that moment would. For every k up to the run's last step, the output must be
     exactly the previous one (every file byte-equal) or exactly the new one; for a single-file
     model with a hook file, any other pair must be refused by the weights digest in the hook file.
   - The hook file names the digest of its weights (qx_digest_files over the model's files).
   - --force replaces only regular files (a FIFO stays a FIFO); without --force a file that appears
     at OUT during the run is never replaced; 250-255-byte output names work; temporaries a killed
     run left (unlocked) are removed by the next run, a live run's (locked) are not. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE   /* realpath, mkfifo, symlink, flock */
#endif
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "publish_util.h"
#include "cli/qx_cli.h"
#include "eval/qx_eval.h"
#include "eval/qx_evalkit.h"
#include "model/qx_online.h"
#include "support/qx_file.h"
#include "formats/qx_gguf.h"
#include "formats/qx_llama2c.h"
#include "formats/qx_safetensors.h"
#include "model/qx_synth.h"
#include "formats/qx_load.h"

#include <dirent.h>
#include <math.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------------- */

/* The synthetic model of the CLI tests, saved as a safetensors directory with shards of at most
   shard_bytes (0: one file), or as a llama2.c file. */
static int make_input(const char* path, int st_dir, uint64_t shard_bytes) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    quarot_result r;
    cu_synth_desc(&d);
    qx_store_init(&s);
    r = qx_synth_model(&s, &d, &e);
    if (r == QUAROT_OK && st_dir) {
        qx_st_save_opts o;
        memset(&o, 0, sizeof o);
        o.shard_bytes = shard_bytes;
        r = qx_st_save(&s, path, &o, &e);
    } else if (r == QUAROT_OK) {
        qx_l2c_write_opts o;
        memset(&o, 0, sizeof o);
        r = qx_l2c_write_file(&s, path, &o, &e);
    }
    if (r != QUAROT_OK) printf("    make_input %s: %s\n", path, e.msg);
    qx_store_free(&s);
    return r == QUAROT_OK;
}

/* ---- 1. atomic publish -------------------------------------------------------------------------- */

/* A sharded safetensors output over a previous one with another shard count, killed before each
   publish step in turn: the output is always the old one or the new one, never a mix. */
static void test_sharded_kill_between_renames(void) {
    char in_a[1024], in_b[1024], out[1024], old_copy[1024], ref[1024];
    static char s_old[8192], s_new[8192], s_now[8192];
    int k, rc = -1, interrupted = 0, new_seen = 0;
    snprintf(in_a, sizeof in_a, "%s", tmp_path("sk_in6"));
    snprintf(in_b, sizeof in_b, "%s", tmp_path("sk_in2"));
    snprintf(out, sizeof out, "%s", tmp_path("sk_out"));
    snprintf(old_copy, sizeof old_copy, "%s", tmp_path("sk_old"));
    snprintf(ref, sizeof ref, "%s", tmp_path("sk_ref"));
    QT_CHECK(make_input(in_a, 1, 24000));   /* many shards */
    QT_CHECK(make_input(in_b, 1, 90000));   /* fewer */
    QT_EQ_INT(CLI("rotate '%s' '%s' --seed 1 --online", in_a, old_copy), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --seed 2", in_b, ref), 0);
    pu_snapshot(old_copy, s_old, sizeof s_old);
    pu_snapshot(ref, s_new, sizeof s_new);
    QT_CHECK(strstr(s_old, "model-00003-of-") != NULL);
    QT_CHECK(strstr(s_old, "quarot_online.txt") != NULL);
    QT_CHECK(strcmp(s_old, s_new) != 0);
    for (k = 1; k < 60; ++k) {
        pu_sh("rm -rf '%s' && cp -a '%s' '%s' && echo user > '%s/README.md'", out, old_copy, out, out);
        {
            char pre[64];
            snprintf(pre, sizeof pre, "QX_FAULT_PUBLISH=%d", k);
            rc = run_prog(pre, g_bin, "rotate '%s' '%s' --seed 2 --force", in_b, out);
        }
        pu_snapshot(out, s_now, sizeof s_now);
        {   /* the user's own file survives in either state */
            char* rm = qx_path_join(out, "README.md");
            QT_CHECKF(qx_path_exists(rm), "k=%d: README.md lost", k);
            free(rm);
            pu_sh("rm -f '%s/README.md'", out);
            pu_snapshot(out, s_now, sizeof s_now);
        }
        if (rc == 86) {
            ++interrupted;
            QT_CHECKF(strcmp(s_now, s_old) == 0 || strcmp(s_now, s_new) == 0, "killed before publish step %d: a mix of old and new:\n%s", k, s_now);
            new_seen |= strcmp(s_now, s_new) == 0;
        } else {
            QT_EQ_INT(rc, 0);
            QT_CHECKF(strcmp(s_now, s_new) == 0, "completed run: not the new output:\n%s", s_now);
            break;
        }
    }
    QT_CHECKF(interrupted >= 1, "the fault hook never interrupted the run (%d)", interrupted);
    QT_CHECK(rc == 0);
    /* a later run removes what the killed runs left beside the output */
    QT_EQ_INT(CLI("rotate '%s' '%s' --seed 2 --force", in_b, out), 0);
    QT_EQ_INT(pu_temporaries_beside(g_tmp, "sk_out"), 0);
    (void)new_seen;
}

/* What the readers (eval, generate, inspect: qx_model_hooks_attach) see at a single-file model: the
   model's bytes (snapshot) and the hook list they apply (its text, "" when none); 0 when they
   refuse the pair. */
static int reader_view(const char* model, char* msnap, size_t mcap, char* hooks, size_t hcap) {
    qx_store s;
    qx_load_opts lo;
    qx_err e;
    qx_hooks_status hs;
    size_t n = 0;
    const char* t;
    int ok;
    pu_snapshot(model, msnap, mcap);
    hooks[0] = '\0';
    memset(&lo, 0, sizeof lo);
    if (qx_load_model(model, &lo, &s, &e) != QUAROT_OK) return 0;
    ok = qx_model_hooks_attach(&s, model, NULL, &hs, NULL, 0, &e) == QUAROT_OK;
    t = ok ? (const char*)qx_store_get_blob(&s, QX_HOOKS_BLOB, &n) : NULL;
    if (t) snprintf(hooks, hcap, "%.*s", (int)n, t);
    qx_store_free(&s);
    return ok;
}

/* `rotate` of a single-file model over a previous pair (model, MODEL.quarot-online), killed before
   each publish step in turn (every rename, link and unlink, QX_FAULT_PUBLISH=k): what the readers see
   at OUT is the complete old pair or the complete new one, never the old model with the new hooks
   (or none) or the new model with the old ones; a later run finishes what the killed one left. The
   old and the new model with hooks, with hooks over none, and none over hooks. */
static void kill_pair_case(const char* ext, const char* old_flags, const char* new_flags) {
    char in[1024], out[1024], oldm[1024], newm[1024], cmd[4200];
    static char m_old[512], m_new[512], m_now[512], h_old[16384], h_new[16384], h_now[16384];
    int k, rc = -1, interrupted = 0, saw_old = 0, saw_new = 0;
    snprintf(in, sizeof in, "%s", tmp_path("kp_in.bin"));
    snprintf(out, sizeof out, "%s/kp_out%s", g_tmp, ext);
    snprintf(oldm, sizeof oldm, "%s/kp_old%s", g_tmp, ext);
    snprintf(newm, sizeof newm, "%s/kp_new%s", g_tmp, ext);
    if (!qx_path_exists(in)) QT_CHECK(make_input(in, 0, 0));
    pu_sh("rm -f '%s' '%s.quarot-online' '%s' '%s.quarot-online'", oldm, oldm, newm, newm);
    QT_EQ_INT(CLI("rotate '%s' '%s' --seed 1 %s", in, oldm, old_flags), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --seed 2 %s", in, newm, new_flags), 0);
    QT_CHECK(reader_view(oldm, m_old, sizeof m_old, h_old, sizeof h_old));
    QT_CHECK(reader_view(newm, m_new, sizeof m_new, h_new, sizeof h_new));
    QT_CHECK(strcmp(m_old, m_new) != 0);
    for (k = 1; k < 40; ++k) {
        char pre[64];
        int old_pair, new_pair;
        pu_sh("cd '%s' && rm -f kp_out* .kp_out*", g_tmp);
        pu_sh("cp '%s' '%s' && { [ ! -e '%s.quarot-online' ] || cp '%s.quarot-online' '%s.quarot-online'; }", oldm, out, oldm, oldm, out);
        snprintf(pre, sizeof pre, "QX_FAULT_PUBLISH=%d", k);
        rc = run_prog(pre, g_bin, "rotate '%s' '%s' --seed 2 %s --force", in, out, new_flags);
        QT_CHECKF(reader_view(out, m_now, sizeof m_now, h_now, sizeof h_now), "%s, %s over %s, killed before step %d: refused",
                  ext, new_flags, old_flags, k);
        old_pair = strcmp(m_now, m_old) == 0 && strcmp(h_now, h_old) == 0;
        new_pair = strcmp(m_now, m_new) == 0 && strcmp(h_now, h_new) == 0;
        if (rc != 86) {
            QT_EQ_INT(rc, 0);
            QT_CHECKF(new_pair, "%s: completed run: not the new pair", ext);
            break;
        }
        ++interrupted;
        saw_old |= old_pair;
        saw_new |= new_pair;
        QT_CHECKF(old_pair || new_pair, "%s, '%s' over '%s', killed before publish step %d: a mixed pair (model %s, %s hooks)", ext,
                  new_flags, old_flags, k, strcmp(m_now, m_old) == 0 ? "old" : strcmp(m_now, m_new) == 0 ? "new" : "other",
                  !h_now[0] ? "no" : strcmp(h_now, h_old) == 0 ? "the old" : strcmp(h_now, h_new) == 0 ? "the new" : "other");
        /* a later run settles what the kill left and publishes the new pair */
        QT_EQ_INT(CLI("rotate '%s' '%s' --seed 2 %s --force", in, out, new_flags), 0);
        QT_CHECK(reader_view(out, m_now, sizeof m_now, h_now, sizeof h_now));
        QT_CHECKF(strcmp(m_now, m_new) == 0 && strcmp(h_now, h_new) == 0, "%s: the run after a kill at step %d: not the new pair",
                  ext, k);
        snprintf(cmd, sizeof cmd, "kp_out%s", ext);
        QT_EQ_INT(pu_temporaries_beside(g_tmp, cmd), 0);
    }
    QT_CHECKF(interrupted >= 2 && saw_old, "%s: the fault hook interrupted %d steps", ext, interrupted);
    QT_EQ_INT(rc, 0);
    {   /* nothing of the protocol left beside the output */
        char* prev = NULL;
        snprintf(cmd, sizeof cmd, "%s.quarot-online", out);
        prev = qx_hooks_prev_path(cmd);
        QT_CHECK(prev && !qx_path_exists(prev));
        free(prev);
    }
    (void)saw_new;
}

static void test_single_file_hooks_kill(void) {
    kill_pair_case(".bin", "--online", "--online");
    kill_pair_case(".bin", "", "--online");
    kill_pair_case(".bin", "--online", "");
    if (qt_quick()) return;
    kill_pair_case(".gguf", "--online", "--online");   /* the same protocol for every single-file format */
}

/* `quantize` over a previous output, GGUF and packed, killed before each publish step: the old file
   or the new one, and no temporary left by the run after. */
static void test_quantize_kill(void) {
    static const char* outs[2] = {"kq_out.gguf", "kq_out.safetensors"};
    char in[1024], out[1024], oldf[1024], newf[1024], args[4200];
    int f;
    snprintf(in, sizeof in, "%s", tmp_path("kq_in.bin"));
    QT_CHECK(make_input(in, 0, 0));
    for (f = 0; f < 2; ++f) {
        snprintf(out, sizeof out, "%s/%s", g_tmp, outs[f]);
        snprintf(oldf, sizeof oldf, "%s/old_%s", g_tmp, outs[f]);
        snprintf(newf, sizeof newf, "%s/new_%s", g_tmp, outs[f]);
        QT_EQ_INT(CLI("quantize '%s' '%s' --bits 8", in, oldf), 0);
        QT_EQ_INT(CLI("quantize '%s' '%s'", in, newf), 0);
        snprintf(args, sizeof args, "quantize '%s' '%s'", in, out);
        pu_kill_loop(outs[f], outs[f], oldf, newf, args);
    }
}

/* ---- 5, 6, 7: special files, a file appearing during the run, long names ------------------------- */

static void test_force_refuses_special_files(void) {
    char in[1024], fifo[1024], lnk[1024], target[1024];
    struct stat st;
    snprintf(in, sizeof in, "%s", tmp_path("sp_in.bin"));
    snprintf(fifo, sizeof fifo, "%s", tmp_path("sp_fifo"));
    snprintf(lnk, sizeof lnk, "%s", tmp_path("sp_link.bin"));
    snprintf(target, sizeof target, "%s", tmp_path("sp_target.bin"));
    QT_CHECK(make_input(in, 0, 0));
    QT_CHECK(mkfifo(fifo, 0666) == 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --force", in, fifo), 3);
    QT_CHECKF(strstr(g_err, "FIFO") != NULL, "stderr: %s", g_err);
    QT_CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    QT_CHECK(write_str(target, "keep"));
    QT_CHECK(symlink(target, lnk) == 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --force", in, lnk), 3);
    QT_CHECK(lstat(lnk, &st) == 0 && S_ISLNK(st.st_mode));
    QT_EQ_INT(pu_temporaries_beside(g_tmp, "sp_fifo"), 0);
    QT_EQ_INT(pu_temporaries_beside(g_tmp, "sp_link.bin"), 0);
    /* a directory output (safetensors) onto the FIFO */
    QT_CHECK(make_input(tmp_path("sp_dir_in"), 1, 0));
    QT_EQ_INT(CLI("rotate '%s' '%s' --force", tmp_path("sp_dir_in"), fifo), 3);
    QT_CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    /* a character device (a copy of /dev/null); needs root, else skipped */
    if (mknod(tmp_path("sp_null"), S_IFCHR | 0666, makedev(1, 3)) == 0) {
        QT_EQ_INT(CLI("rotate '%s' '%s' --force", in, tmp_path("sp_null")), 3);
        QT_CHECKF(strstr(g_err, "device") != NULL, "stderr: %s", g_err);
        QT_CHECK(lstat(tmp_path("sp_null"), &st) == 0 && S_ISCHR(st.st_mode));
        QT_EQ_INT(CLI("rotate '%s' '%s' --force", tmp_path("sp_dir_in"), tmp_path("sp_null")), 3);
        QT_CHECK(lstat(tmp_path("sp_null"), &st) == 0 && S_ISCHR(st.st_mode));
        remove(tmp_path("sp_null"));
    }
}

/* A file created at the output path after the temporary was made is not replaced without force. */
static void test_no_replace_without_force(void) {
    const char* path = tmp_path("nr_out.bin");
    qx_out o;
    qx_err e;
    size_t n = 0;
    char* back;
    QT_OK(qx_out_begin(&o, path, 0, &e));
    QT_OK(qx_out_pwrite(&o, "new", 3, 0, &e));
    QT_OK(qx_out_sync(&o, 3, &e));
    QT_CHECK(write_str(path, "someone else's"));   /* appears between the check and the publish */
    QT_CHECK(qx_out_publish(&o, &e) != QUAROT_OK);
    qx_out_abort(&o);
    back = (char*)read_all(path, &n);
    QT_CHECK(back && strcmp(back, "someone else's") == 0);
    free(back);
    QT_EQ_INT(pu_temporaries_beside(g_tmp, "nr_out.bin"), 0);
}

static void test_long_output_names(void) {
    char in[1024], name[300], out[1400];
    int len;
    snprintf(in, sizeof in, "%s", tmp_path("ln_in.bin"));
    QT_CHECK(make_input(in, 0, 0));
    for (len = 243; len <= 255; len += 4) {   /* 243: the last that fitted before; 255: NAME_MAX */
        int L = len > 255 ? 255 : len;
        memset(name, 'n', (size_t)L);
        memcpy(name + L - 4, ".bin", 5);
        snprintf(out, sizeof out, "%s/%s", g_tmp, name);
        QT_EQ_INT(CLI("rotate '%s' '%s' --force", in, out), 0);
        QT_CHECKF(qx_path_exists(out), "%d-byte name: %s", L, g_err);
        remove(out);
    }
    memset(name, 'n', 240);   /* with --online: the hook file adds 14 bytes (254) */
    memcpy(name + 236, ".bin", 5);
    snprintf(out, sizeof out, "%s/%s", g_tmp, name);
    QT_EQ_INT(CLI("rotate '%s' '%s' --online", in, out), 0);
    QT_CHECKF(qx_path_exists(out), "%s", g_err);
}

/* ---- 2: half-precision overflow ------------------------------------------------------------------ */

/* Sets every element of tensor `name` (f32 or f16 view in s) to v. */
static int fill(qx_store* s, const char* name, double v) {
    quarot_tensor* t;
    int64_t r, rows, i;
    double* row;
    if (qx_store_make_owned(s, name) != QUAROT_OK || !(t = qx_store_find(s, name))) return 0;
    rows = quarot_tensor_nrows(t);
    row = (double*)malloc((size_t)t->ne[0] * sizeof *row);
    for (i = 0; i < t->ne[0]; ++i) row[i] = v;
    for (r = 0; r < rows; ++r) quarot_tensor_set_row_f64(t, r, row);
    free(row);
    return 1;
}

static void test_f16_overflow_refused(void) {
    char in[1024], out[1024], gin[1024], gout[1024];
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    quarot_tensor* t;
    snprintf(in, sizeof in, "%s", tmp_path("ov_in"));
    snprintf(out, sizeof out, "%s", tmp_path("ov_out"));
    snprintf(gin, sizeof gin, "%s", tmp_path("ov_in.gguf"));
    snprintf(gout, sizeof gout, "%s", tmp_path("ov_out.gguf"));
    /* an f32 weight of 1e6, written as f16 */
    cu_synth_desc(&d);
    qx_store_init(&s);
    QT_OK(qx_synth_model(&s, &d, &e));
    t = qx_store_find(&s, "model.layers.1.mlp.up_proj.weight");
    QT_CHECK(t != NULL && t->dtype == QUAROT_DTYPE_F32);
    if (t) ((float*)t->data)[5] = 1e6f;
    {
        qx_st_save_opts o;
        memset(&o, 0, sizeof o);
        QT_OK(qx_st_save(&s, in, &o, &e));
    }
    /* the same overflow is one class, "cannot do as asked" (4), with rotation or without, and the
       message names OUT, not its staging path */
    QT_EQ_INT(CLI("rotate '%s' '%s' --dtype f16", in, out), QX_EXIT_PROCESS);
    QT_CHECKF(strstr(g_err, "model.layers.1.mlp.up_proj.weight") && strstr(g_err, "f16 range"), "stderr: %s", g_err);
    QT_CHECKF(strstr(g_err, out) && !strstr(g_err, ".tmp-"), "stderr: %s", g_err);
    QT_CHECK(!qx_path_exists(out));
    QT_EQ_INT(CLI("rotate '%s' '%s' --dtype f16 --rotation none", in, out), QX_EXIT_PROCESS);
    QT_CHECKF(strstr(g_err, "f16 range") && strstr(g_err, out) && !strstr(g_err, ".tmp-"), "stderr: %s", g_err);
    QT_CHECK(!qx_path_exists(out));
    QT_EQ_INT(CLI("rotate '%s' '%s' --dtype bf16", in, out), 0);   /* bf16 holds it */
    qx_store_free(&s);
    /* a GGUF in f16: attn_norm 65504 fused into q_proj of ones gives values far beyond f16 */
    qx_store_init(&s);
    QT_OK(qx_synth_model(&s, &d, &e));
    QT_CHECK(fill(&s, "model.layers.0.input_layernorm.weight", 65504.0));
    QT_CHECK(fill(&s, "model.layers.0.self_attn.q_proj.weight", 1.0));
    {
        qx_gguf_save_opts o;
        memset(&o, 0, sizeof o);
        o.dtype = QUAROT_DTYPE_F16;
        QT_OK(qx_gguf_save(&s, gin, &o, &e));
    }
    QT_EQ_INT(CLI("rotate '%s' '%s'", gin, gout), QX_EXIT_PROCESS);
    QT_CHECKF(strstr(g_err, "q_proj") && strstr(g_err, "f16 range") && strstr(g_err, gout) && !strstr(g_err, ".tmp-"), "stderr: %s", g_err);
    QT_CHECK(!qx_path_exists(gout));
    qx_store_free(&s);
}

/* ---- 11.4: hooks travel with the model ----------------------------------------------------------- */

/* FP32 perplexity of s over the deterministic token stream (hooks: s's own, attached or not; extra
   may be NULL). */
static double ppl_of(const qx_store* s, const quarot_online_list* extra) {
    qx_ek_forward ef;
    qx_ppl_opts po;
    qx_ppl_result res;
    qx_err e;
    int32_t toks[400];
    int64_t i, n = qt_quick() ? 130 : 400;
    double out = -1;
    for (i = 0; i < n; ++i) toks[i] = (int32_t)(3 + (i * 7919 + i * i * 31) % (s->config.vocab - 3));
    memset(&po, 0, sizeof po);
    po.seq_len = 64;
    if (qx_ek_forward_init(&ef, s, extra, NULL, NULL, NULL, &e) != QUAROT_OK) { printf("    forward: %s\n", e.msg); return -1; }
    if (qx_eval_perplexity(&ef.f, toks, n, &po, &res, &e) == QUAROT_OK && qx_ek_forward_status(&ef) == QUAROT_OK) out = res.ppl;
    else printf("    perplexity: %s\n", e.msg);
    qx_ek_forward_free(&ef);
    return out;
}

/* The FP32 row's first number in eval's table. */
static double fp32_cell(const char* out) {
    const char* p = strstr(out, "\nFP32");
    return p ? atof(p + 5) : -1;
}

static void test_eval_applies_the_models_hooks(void) {
    char in[1024], out[1024], other[1024], text[1024], hooks[1200], ev[1300];
    qx_store a, b, c;
    qx_load_opts lo;
    qx_err e;
    qx_hooks_status st = QX_HOOKS_NONE;
    quarot_online_list again;
    double p_orig, p_rot, p_nohooks, p_again, cell_a, cell_b;
    FILE* f;
    int i;
    snprintf(in, sizeof in, "%s", tmp_path("hk_in.bin"));
    snprintf(out, sizeof out, "%s", tmp_path("hk_out.bin"));
    snprintf(other, sizeof other, "%s", tmp_path("hk_other.bin"));
    snprintf(text, sizeof text, "%s", tmp_path("hk_text.txt"));
    snprintf(hooks, sizeof hooks, "%s.quarot-online", out);
    QT_CHECK(make_input(in, 0, 0));
    QT_CHECK(write_tokenizer(tmp_path("tokenizer.bin")));
    f = fopen(text, "w");
    for (i = 0; f && i < 300; ++i) fprintf(f, "the %d cat sat on the mat and then %s ran. ", i, i % 3 ? "it" : "the dog");
    if (f) fclose(f);
    QT_EQ_INT(CLI("rotate '%s' '%s' --online --seed 5", in, out), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --online --seed 6", in, other), 0);

    /* in process, at full precision: the rotated model with its hooks computes the original's perplexity */
    memset(&lo, 0, sizeof lo);
    qx_store_init(&a); qx_store_init(&b); qx_store_init(&c);
    QT_OK(qx_load_model(in, &lo, &a, &e));
    QT_OK(qx_load_model(out, &lo, &b, &e));
    p_nohooks = ppl_of(&b, NULL);
    QT_OK(qx_model_hooks_attach(&b, out, NULL, &st, NULL, 0, &e));
    QT_EQ_INT((int)st, (int)QX_HOOKS_ATTACHED);
    p_orig = ppl_of(&a, NULL);
    p_rot = ppl_of(&b, NULL);
    QT_CHECKF(p_orig > 1 && fabs(p_rot - p_orig) <= 1e-6 * p_orig, "ppl original %.9g, rotated with its hooks %.9g (rel %.2e)",
              p_orig, p_rot, fabs(p_rot - p_orig) / p_orig);
    QT_CHECKF(fabs(p_nohooks - p_orig) > 1e-3 * p_orig, "without hooks %.9g vs %.9g: the hooks would not matter", p_nohooks, p_orig);
    /* rotated again in memory (eval's QuaRot column): the model's hooks run first, then the new ones */
    QT_OK(qx_ek_quarot(&b, 9, 0, &c, &again, NULL, 0, NULL, NULL, &e));
    p_again = ppl_of(&c, &again);
    QT_CHECKF(fabs(p_again - p_orig) <= 1e-5 * p_orig, "rotated twice: %.9g vs %.9g", p_again, p_orig);
    quarot_online_list_free(&again);
    /* a stale hook file (another rotation's) is refused */
    QT_CHECK(qx_model_hooks_attach(&c, out, tmp_path("hk_other.bin.quarot-online"), &st, NULL, 0, &e) == QUAROT_ERR_INVALID_ARGUMENT);
    qx_store_free(&a); qx_store_free(&b); qx_store_free(&c);

    /* through the tool: no flag needed (the FP32 cell of the unrotated column; its first 8 windows
       under QT_QUICK, where every eval runs under qemu) */
    snprintf(ev, sizeof ev, "--text '%s' --w-bits 16 --a-bits 16 --seq-len 64 --columns none%s", text, qt_quick() ? " --windows 8" : "");
    QT_EQ_INT(CLI("eval '%s' %s", in, ev), 0);
    cell_a = fp32_cell(g_out);
    QT_EQ_INT(CLI("eval '%s' %s", out, ev), 0);
    cell_b = fp32_cell(g_out);
    QT_CHECKF(cell_a > 1 && fabs(cell_a - cell_b) <= 1e-4 * cell_a, "eval FP32: original %.4f, rotated %.4f\n%s", cell_a, cell_b, g_err);
    QT_CHECKF(strstr(g_err, "online hooks:") != NULL, "stderr: %s", g_err);
    /* --hooks FILE, and the stale file refused by every command */
    QT_EQ_INT(CLI("eval '%s' %s --hooks '%s'", out, ev, hooks), 0);
    pu_sh("cp '%s.quarot-online' '%s'", other, hooks);
    QT_EQ_INT(CLI("eval '%s' %s", out, ev), 2);
    QT_CHECKF(strstr(g_err, "belongs to other weights") != NULL, "stderr: %s", g_err);
    QT_EQ_INT(CLI("inspect '%s'", out), 2);
    QT_EQ_INT(CLI("plot '%s' --text '%s' -o '%s' --force", out, text, tmp_path("hk.svg")), 2);
    QT_EQ_INT(CLI("calibrate '%s' --text '%s' -o '%s'", out, text, tmp_path("hk.ctx")), 2);
}

/* A GGUF / safetensors output written with --online is marked in its metadata: run without its hook
   file it gets a loud warning. */
static void test_missing_hooks_warned(void) {
    char in[1024], out[1024], text[1024];
    FILE* f;
    int i;
    snprintf(in, sizeof in, "%s", tmp_path("mw_in"));
    snprintf(out, sizeof out, "%s", tmp_path("mw_out"));
    snprintf(text, sizeof text, "%s", tmp_path("mw_text.txt"));
    QT_CHECK(make_input(in, 1, 0));
    QT_CHECK(write_tokenizer(tmp_path("mw_in/tokenizer.bin")));
    f = fopen(text, "w");
    for (i = 0; f && i < 200; ++i) fprintf(f, "a %d b c the end. ", i);
    if (f) fclose(f);
    QT_EQ_INT(CLI("rotate '%s' '%s' --online", in, out), 0);
    pu_sh("cp '%s/tokenizer.bin' '%s/' && rm '%s/quarot_online.txt'", in, out, out);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --w-bits 16 --a-bits 16 --seq-len 64 --quiet", out, text), 0);
    QT_CHECKF(strstr(g_err, "WARNING") && strstr(g_err, "needs its online hook file"), "stderr: %s", g_err);
}

/* ---- 4: readers: directories, devices, endless streams ------------------------------------------ */

static void test_readers_refuse_dirs_and_endless_streams(void) {
    char in[1024], text[1024], dir[1024];
    FILE* f;
    int i;
    snprintf(in, sizeof in, "%s", tmp_path("rd_in.bin"));
    snprintf(text, sizeof text, "%s", tmp_path("rd_text.txt"));
    snprintf(dir, sizeof dir, "%s", tmp_path("rd_dir"));
    QT_CHECK(make_input(in, 0, 0));
    QT_CHECK(write_tokenizer(tmp_path("tokenizer.bin")));
    QT_CHECK(mkdir(dir, 0777) == 0);
    f = fopen(text, "w");
    for (i = 0; f && i < 100; ++i) fprintf(f, "some text %d. ", i);
    if (f) fclose(f);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --tokenizer '%s' --seq-len 32", in, text, dir), 2);
    /* a directory as --tokenizer is read as a Hugging Face directory: it must hold tokenizer.json */
    QT_CHECKF(strstr(g_err, "without tokenizer.json") != NULL, "stderr: %s", g_err);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --tokenizer /dev/null --seq-len 32", in, text), 2);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 32", in, dir), 2);
    if (!qt_quick()) {   /* 256 MiB of zeros: a few seconds natively, too slow under qemu */
        QT_CHECK(CLI("eval '%s' --text /dev/zero --seq-len 32", in) != 0);
        QT_CHECKF(strstr(g_err, "limit of 256 MiB") != NULL, "stderr: %s", g_err);
    }
}

/* ---- 8: an input truncated while mapped -------------------------------------------------------- */

static void test_truncated_input_while_mapped(void) {
    char in[1024], out[1024];
    snprintf(in, sizeof in, "%s", tmp_path("tr_in.bin"));
    snprintf(out, sizeof out, "%s", tmp_path("tr_out.bin"));
    QT_CHECK(make_input(in, 0, 0));
    /* QX_FAULT_TRUNCATE_INPUT: rotate truncates its (mapped) input to 4 KiB after the first rotated layer,
       when the staged output files exist */
    QT_EQ_INT(run_prog("QX_FAULT_TRUNCATE_INPUT=1", g_bin, "rotate '%s' '%s' --online", in, out), 2);
    QT_CHECKF(strstr(g_err, "changed (truncated?) while it was being read") != NULL, "stderr: %s", g_err);
    QT_CHECK(!qx_path_exists(out));
    QT_EQ_INT(pu_temporaries_beside(g_tmp, "tr_out.bin"), 0);
}

/* Every command whose input is mapped, its input truncated once it is loaded (QX_FAULT_TRUNCATE_INPUT:
   "load" at the end of qx_load_model, "engine" when the engine maps a packed file): one line naming the
   file, exit 2, no output and no temporary left, for llama2.c and GGUF inputs and every output form. */
static void test_truncated_input_every_command(void) {
    static const char* ins[2] = {"tc_src.bin", "tc_src.gguf"};
    static const char* outs[3] = {"tc_q.gguf", "tc_q.safetensors", "tc_q.bin"};
    char src[1024], in[1024], text[1024], packed[1024], out[1024], cmd[4400];
    int i, k;
    snprintf(text, sizeof text, "%s", tmp_path("tc_text.txt"));
    snprintf(packed, sizeof packed, "%s", tmp_path("tc_packed.safetensors"));
    QT_CHECK(make_input(tmp_path("tc_src.bin"), 0, 0));
    QT_CHECK(write_tokenizer(tmp_path("tokenizer.bin")));
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotation none", tmp_path("tc_src.bin"), tmp_path("tc_src.gguf")), 0);
    QT_EQ_INT(CLI("quantize '%s' '%s'", tmp_path("tc_src.bin"), packed), 0);
    {
        FILE* f = fopen(text, "w");
        for (i = 0; f && i < 200; ++i) fprintf(f, "some text %d. ", i);
        if (f) fclose(f);
    }
    for (i = 0; i < 2; ++i) {
        const char* ext = strrchr(ins[i], '.');
        snprintf(src, sizeof src, "%s", tmp_path(ins[i]));
        snprintf(in, sizeof in, "%s/tc_in%s", g_tmp, ext);
        for (k = 0; k < 5; ++k) {
            const char* what;
            int rc;
            snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, in);
            QT_CHECK(system(cmd) == 0);
            snprintf(out, sizeof out, "%s", tmp_path(k < 3 ? outs[k] : "tc_none"));
            if (k < 3) {
                what = "quantize";
                if (k == 2) rc = run_prog("QX_FAULT_TRUNCATE_INPUT=load", g_bin, "rotate '%s' '%s'", in, out);
                else rc = run_prog("QX_FAULT_TRUNCATE_INPUT=load", g_bin, "quantize '%s' '%s'", in, out);
            } else {
                what = k == 3 ? "eval" : "eval --engine int";
                rc = run_prog("QX_FAULT_TRUNCATE_INPUT=load", g_bin, "eval '%s' --text '%s' --seq-len 32 --windows 2 %s", in, text,
                              k == 4 ? "--engine int" : "");
            }
            QT_CHECKF(rc == 2 && strstr(g_err, in) && strstr(g_err, "changed (truncated?) while it was being read") &&
                      count_lines(g_err) == 1, "%s of %s (-> %s): exit %d, stderr: %s", what, ins[i], out, rc, g_err);
            QT_CHECK(!qx_path_exists(out));
            QT_EQ_INT(pu_temporaries_beside(g_tmp, strrchr(out, '/') + 1), 0);
        }
    }
    /* the engine's own mapping of a packed file */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", packed, tmp_path("tc_in.safetensors"));
    QT_CHECK(system(cmd) == 0);
    QT_EQ_INT(run_prog("QX_FAULT_TRUNCATE_INPUT=engine", g_bin, "eval '%s' --text '%s' --seq-len 32 --windows 2 --engine int",
                       tmp_path("tc_in.safetensors"), text), 2);
    QT_CHECKF(strstr(g_err, "tc_in.safetensors: the input changed (truncated?)") != NULL, "stderr: %s", g_err);
}

/* A FIFO without a writer as any input: the command returns at once (well within a second natively)
   with exit 2 and a line naming it, never blocking in open(). */
static void test_fifo_inputs_return(void) {
    static const char* forms[] = {
        "eval '%s' --seq-len 32 --text '%s'", "eval '%s' --seq-len 32 --text '%T' --tokenizer '%s'",
        "eval '%s' --seq-len 32 --text '%T' --context '%s'", "eval '%s' --seq-len 32 --text '%T' --hooks '%s'",
        "eval '%s' --seq-len 32 --tokens '%s'", "plot '%s' --text '%s' -o '%O'",
        "tokenize '%s' --text '%s'", "generate '%s' --tokenizer '%s' -n 2", "generate '%s' --hooks '%s' -n 2",
        "quantize '%s' '%O' --w-quant gptq --calib-text '%s'", "calibrate '%s' --seq-len 32 --text '%s' -o '%O'",
        "rotate '%s' '%O' --rotation adapt --context '%s'", "inspect '%s' --hooks '%s'"};
    char in[1024], fifo[1024], text[1024], out[1024], args[8192];
    size_t f;
    snprintf(in, sizeof in, "%s", tmp_path("ff_in.bin"));
    snprintf(fifo, sizeof fifo, "%s", tmp_path("ff_fifo"));
    snprintf(text, sizeof text, "%s", tmp_path("ff_text.txt"));
    snprintf(out, sizeof out, "%s", tmp_path("ff_out.gguf"));
    QT_CHECK(make_input(in, 0, 0));
    QT_CHECK(write_tokenizer(tmp_path("tokenizer.bin")));
    QT_CHECK(write_str(text, "Some text to read. More text to read."));
    QT_CHECK(mkfifo(fifo, 0666) == 0);
    for (f = 0; f < sizeof forms / sizeof *forms; ++f) {
        const char* p;
        size_t n = 0;
        int first = 1, rc;
        double t0, dt;
        for (p = forms[f]; *p && n + 1100 < sizeof args; ++p) {   /* %s: the model, then the FIFO; %T the text, %O the output */
            if (p[0] == '%' && (p[1] == 's' || p[1] == 'T' || p[1] == 'O')) {
                const char* v = p[1] == 'T' ? text : p[1] == 'O' ? out : first ? in : fifo;
                if (p[1] == 's') first = 0;
                n += (size_t)snprintf(args + n, sizeof args - n, "%s", v);
                ++p;
            } else {
                args[n++] = *p;
            }
        }
        args[n] = '\0';
        t0 = qx_now();
        rc = run_prog("timeout 20", g_bin, "%s", args);
        dt = qx_now() - t0;
        QT_CHECKF(rc == 2 && strstr(g_err, "ff_fifo") != NULL && count_lines(g_err) == 1, "%s: exit %d, stderr: %s", args, rc, g_err);
        QT_CHECKF(dt < (getenv("QT_RUNNER") && getenv("QT_RUNNER")[0] ? 10.0 : 1.0), "%s: %.2f s", args, dt);
        QT_CHECK(!qx_path_exists(out));
    }
    remove(fifo);
}

/* ---- 8: the minor list ---------------------------------------------------------------------------- */

static unsigned char* find_bytes(unsigned char* hay, size_t n, const char* needle) {
    size_t m = strlen(needle), i;
    for (i = 0; i + m <= n; ++i)
        if (memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

static void test_minor_items(void) {
    char in[1024], gg[1024], bad[1024];
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    unsigned char* b;
    unsigned char* p;
    size_t n = 0;
    snprintf(in, sizeof in, "%s", tmp_path("-mi_in.bin"));
    snprintf(gg, sizeof gg, "%s", tmp_path("mi.gguf"));
    snprintf(bad, sizeof bad, "%s", tmp_path("mi_bad.gguf"));
    QT_CHECK(make_input(in, 0, 0));
    /* "--" ends the options: names starting with '-' are operands after it */
    QT_EQ_INT(CLI("rotate -- '%s' '%s'", in, tmp_path("-mi_out.bin")), 0);
    QT_CHECKF(qx_path_exists(tmp_path("-mi_out.bin")), "stderr: %s", g_err);
    {
        char pre[1200];
        snprintf(pre, sizeof pre, "cd '%s' &&", g_tmp);
        QT_EQ_INT(run_prog(pre, g_bin, "rotate --force -- -mi_in.bin -mi_out2.bin"), 0);
        QT_CHECKF(qx_path_exists(tmp_path("-mi_out2.bin")), "stderr: %s", g_err);
    }
    /* --clip's range in its message */
    QT_EQ_INT(CLI("eval '%s' --text '%s' --clip 1.5", in, in), 1);
    QT_CHECKF(strstr(g_err, "(0, 1]") != NULL, "stderr: %s", g_err);
    /* GGUF: trailing bytes, a key that is not UTF-8, a tensor type that is no GGML type */
    cu_synth_desc(&d);
    qx_store_init(&s);
    QT_OK(qx_synth_model(&s, &d, &e));
    {
        qx_gguf_save_opts o;
        memset(&o, 0, sizeof o);
        QT_OK(qx_gguf_save(&s, gg, &o, &e));
    }
    qx_store_free(&s);
    b = read_all(gg, &n);
    QT_CHECK(b != NULL);
    if (!b) return;
    {
        unsigned char* t = (unsigned char*)malloc(n + 100);
        memcpy(t, b, n);
        memset(t + n, 0x5a, 100);
        QT_CHECK(qt_write_file(bad, t, n + 100));
        free(t);
    }
    QT_EQ_INT(CLI("rotate '%s' '%s' --force", bad, tmp_path("mi_o.gguf")), 2);
    QT_CHECKF(strstr(g_err, "trailing bytes") != NULL, "stderr: %s", g_err);
    p = find_bytes(b, n, "general.architecture");
    QT_CHECK(p != NULL);
    if (p) {
        unsigned char keep = p[3];
        p[3] = 0xff;
        QT_CHECK(qt_write_file(bad, b, n));
        p[3] = keep;
        QT_EQ_INT(CLI("rotate '%s' '%s' --force", bad, tmp_path("mi_o.gguf")), 2);
        QT_CHECKF(strstr(g_err, "not valid UTF-8") != NULL, "stderr: %s", g_err);
    }
    p = find_bytes(b, n, "token_embd.weight");
    QT_CHECK(p != NULL);
    if (p) {   /* name, n_dims (4), ne (2 x 8), type (4) */
        unsigned char* ty = p + strlen("token_embd.weight") + 4 + 16;
        ty[0] = 0xe7; ty[1] = 0x03; ty[2] = 0; ty[3] = 0;   /* 999 */
        QT_CHECK(qt_write_file(bad, b, n));
        QT_EQ_INT(CLI("rotate '%s' '%s' --force", bad, tmp_path("mi_o.gguf")), 2);
        QT_CHECKF(strstr(g_err, "unknown GGML type 999") != NULL && !strstr(g_err, "type type"), "stderr: %s", g_err);
    }
    free(b);
    /* max_tp_size names only the size it does not divide (stories260K: n_heads 8, intermediate 172) */
    if (qt_shared_path("models/stories260K/stories260K.bin")) {
        QT_EQ_INT(CLI("rotate '%s' '%s' --online --max-tp-size 8", qt_shared_path("models/stories260K/stories260K.bin"), tmp_path("mi_tp.bin")), 4);
        QT_CHECKF(strstr(g_err, "does not divide intermediate 172") && !strstr(g_err, "n_heads"), "stderr: %s", g_err);
    }
}

/* ---- a GGUF (norms fused, no rotation) into one safetensors file with config.json ------------------- */

/* config.json's torch_dtype comes from the output plan, whose names are the store's: a decoder
   layer's names are freed once it is written, so the plan is read before (ASan saw the read after
   free under make test-san). */
static void test_gguf_to_safetensors_file(void) {
    char in[1024], gg[1024], sub[1024], out[1100], cfg[1100];
    size_t n = 0;
    char* text;
    snprintf(in, sizeof in, "%s", tmp_path("gs_in.bin"));
    snprintf(gg, sizeof gg, "%s", tmp_path("gs_n.gguf"));
    snprintf(sub, sizeof sub, "%s", tmp_path("gs_sub"));
    snprintf(out, sizeof out, "%s/r2.safetensors", sub);
    snprintf(cfg, sizeof cfg, "%s/config.json", sub);
    QT_CHECK(make_input(in, 0, 0));
    QT_CHECK(mkdir(sub, 0777) == 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotation none --quiet", in, gg), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotation random --quiet", gg, out), 0);
    text = (char*)read_all(cfg, &n);
    QT_CHECKF(text && strstr(text, "\"torch_dtype\""), "config.json: %s", text ? text : "(none)");
    free(text);
    if (qt_shared_path("models/stories260K/stories260K.bin")) {   /* the model the defect was seen on */
        char st[1024];
        snprintf(st, sizeof st, "%s", qt_shared_path("models/stories260K/stories260K.bin"));
        QT_EQ_INT(CLI("rotate '%s' '%s' --rotation none --quiet --force", st, gg), 0);
        QT_EQ_INT(CLI("rotate '%s' '%s' --rotation random --quiet --force", gg, out), 0);
    }
}

/* ---- 8: stale temporaries ------------------------------------------------------------------------ */

static void test_stale_temporaries_removed(void) {
    char in[1024], out[1024], stale[1100], live[1100], stale_dir[1100];
    int fd;
    snprintf(in, sizeof in, "%s", tmp_path("st_in.bin"));
    snprintf(out, sizeof out, "%s", tmp_path("st_out.bin"));
    snprintf(stale, sizeof stale, "%s/.st_out.bin.tmp-AbC123", g_tmp);
    snprintf(stale_dir, sizeof stale_dir, "%s/.st_out.bin.tmp-DeF456", g_tmp);
    snprintf(live, sizeof live, "%s/.st_out.bin.tmp-LiVe99", g_tmp);
    QT_CHECK(make_input(in, 0, 0));
    QT_CHECK(write_str(stale, "left by a killed run"));
    QT_CHECK(mkdir(stale_dir, 0777) == 0);
    QT_CHECK(write_str(tmp_path(".st_out.bin.tmp-DeF456/st_out.bin"), "partial"));
    QT_CHECK(write_str(live, "a run in progress"));
    fd = open(live, O_RDONLY);
    QT_CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
    QT_EQ_INT(CLI("rotate '%s' '%s'", in, out), 0);
    QT_CHECK(!qx_path_exists(stale));
    QT_CHECK(!qx_path_exists(stale_dir));
    QT_CHECK(qx_path_exists(live));
    if (fd >= 0) close(fd);
    remove(live);
}

int main(int argc, char** argv) {
    const char* slash = strrchr(argv[0], '/');
    size_t dl = slash ? (size_t)(slash - argv[0]) : 0;
    (void)argc;
    if (getenv("QX_TEST_BIN")) snprintf(g_bin, sizeof g_bin, "%s", getenv("QX_TEST_BIN"));   /* e.g. an older build */
    else snprintf(g_bin, sizeof g_bin, "%.*s%squarot", (int)dl, argv[0], dl ? "/../" : "../");
    {   /* absolute: some runs change directory */
        char* abs = realpath(g_bin, NULL);
        if (abs) { snprintf(g_bin, sizeof g_bin, "%s", abs); free(abs); }
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qx_rel_XXXXXX");
    if (!mkdtemp(g_tmp) || !qx_path_exists(g_bin)) {
        printf("  cannot set up (%s, %s)\n", g_tmp, g_bin);
        printf("test_reliability: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    QT_RUN(test_sharded_kill_between_renames);
    QT_RUN(test_single_file_hooks_kill);
    QT_RUN(test_quantize_kill);
    QT_RUN(test_f16_overflow_refused);
    QT_RUN(test_eval_applies_the_models_hooks);
    QT_RUN(test_missing_hooks_warned);
    QT_RUN(test_readers_refuse_dirs_and_endless_streams);
    QT_RUN(test_force_refuses_special_files);
    QT_RUN(test_no_replace_without_force);
    QT_RUN(test_long_output_names);
    QT_RUN(test_stale_temporaries_removed);
    QT_RUN(test_truncated_input_while_mapped);
    QT_RUN(test_truncated_input_every_command);
    QT_RUN(test_fifo_inputs_return);
    QT_RUN(test_minor_items);
    QT_RUN(test_gguf_to_safetensors_file);
    pu_sh("rm -rf '%s'", g_tmp);
    return qt_finish("test_reliability");
}
