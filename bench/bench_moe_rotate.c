/* bench_moe_rotate - peak resident memory of `quarot rotate` on a Qwen3-MoE-shaped checkpoint.

   One decoder layer (BENCH_MOE_LAYERS) of Qwen3-30B-A3B's shapes: hidden 2048, 32 heads of 128 (4 KV
   heads, q/k norms), 128 experts (BENCH_MOE_EXPERTS) of 768 x 2048, top-8, vocab 2048 (small, so the
   embedding and lm_head do not hide the layer), random weights. It is written into a temporary
   folder (BENCH_TMPDIR, else $TMPDIR, else /tmp) twice: as a GGUF qwen3moe file in f16 (the experts
   as three 3-D tensors [128][768][2048], as llama.cpp stores them) and as a Hugging Face safetensors
   directory in bf16 (one tensor per expert and projection). Each is rotated with
   `quarot rotate IN OUT --threads 1` (the tool beside this program, or BENCH_MOE_QUAROT) in a child
   process, whose peak resident set (getrusage of the children: copies, work buffers and the pages
   of the input mapping it had resident at once) is printed beside one expert's three matrices in
   f32 and the whole layer's weights in f32 (the inputs are generated in a child of their own, so
   that their memory is not in those numbers). BENCH_MOE_KEEP=DIR generates the inputs into DIR once
   (reused by later runs, left there); the outputs are removed after each run. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE   /* wait4 */
#endif
#include "quarot.h"
#include "formats/qx_gguf.h"
#include "formats/qx_safetensors.h"
#include "support/qx_store.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"

#define H 2048
#define EI 768
#define NH 32
#define NKV 4
#define HD 128
#define V 2048

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

/* Roughly normal values of standard deviation s (a sum of 4 uniforms). */
static void fill_row(float* x, int64_t n, float s) {
    int64_t i;
    for (i = 0; i < n; ++i) {
        float a = 0.0f;
        int k;
        for (k = 0; k < 4; ++k) {
            g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
            a += (float)(g_rng >> 40) * (1.0f / 16777216.0f) - 0.5f;
        }
        x[i] = a * s * 1.7320508f;
    }
}

/* A tensor of ne[0] x rows (x slices) in dt, random (std s) or, s < 0, all ones. */
static int add(qx_store* st, const char* name, quarot_dtype dt, int nd, int64_t n0, int64_t n1, int64_t n2, float s) {
    int64_t ne[3], r, rows;
    quarot_tensor* t = NULL;
    float* row;
    ne[0] = n0; ne[1] = n1; ne[2] = n2;
    if (qx_store_add(st, name, dt, nd, ne, NULL, &t) != QUAROT_OK) return 0;
    rows = n1 * n2;
    row = (float*)malloc((size_t)n0 * sizeof(float));
    if (!row) return 0;
    for (r = 0; r < rows; ++r) {
        int64_t j;
        if (s < 0) for (j = 0; j < n0; ++j) row[j] = 1.0f + 0.01f * (float)(j % 7);
        else fill_row(row, n0, s);
        (void)quarot_convert((char*)t->data + (size_t)(r * n0) * quarot_dtype_size(dt), dt, row, QUAROT_DTYPE_F32, n0,
                             QUAROT_ISA_DEFAULT);
    }
    free(row);
    return 1;
}

/* The model into path (gguf: one file, 3-D experts, f16; else a safetensors directory, bf16). */
static int generate(const char* path, int gguf, int64_t n_layers, int64_t n_exp) {
    qx_store st;
    quarot_model_config* c = &st.config;
    quarot_dtype dt = gguf ? QUAROT_DTYPE_F16 : QUAROT_DTYPE_BF16;
    char n[200];
    int64_t l, e;
    int ok = 1;
    qx_err er;
    quarot_result r;
    qx_store_init(&st);
    snprintf(c->arch, sizeof c->arch, "qwen3_moe");
    c->hidden = H; c->intermediate = 6144; c->n_layers = n_layers; c->n_heads = NH; c->n_kv_heads = NKV;
    c->head_dim = HD; c->vocab = V; c->max_seq = 4096; c->norm_eps = 1e-6f; c->rope_theta = 1e6f;
    c->n_experts = n_exp; c->n_experts_used = 8; c->expert_intermediate = EI; c->norm_topk_prob = 1;
    c->qk_norm = 1; c->sparse_step = 1; c->experts_stacked = gguf;
    ok &= add(&st, "model.embed_tokens.weight", dt, 2, H, V, 1, 0.02f);
    ok &= add(&st, "lm_head.weight", dt, 2, H, V, 1, 0.02f);
    ok &= add(&st, "model.norm.weight", dt, 1, H, 1, 1, -1.0f);
    for (l = 0; l < n_layers && ok; ++l) {
#define NM(...) (snprintf(n, sizeof n, __VA_ARGS__), n)
        ok &= add(&st, NM("model.layers.%lld.input_layernorm.weight", (long long)l), dt, 1, H, 1, 1, -1.0f);
        ok &= add(&st, NM("model.layers.%lld.post_attention_layernorm.weight", (long long)l), dt, 1, H, 1, 1, -1.0f);
        ok &= add(&st, NM("model.layers.%lld.self_attn.q_proj.weight", (long long)l), dt, 2, H, NH * HD, 1, 0.02f);
        ok &= add(&st, NM("model.layers.%lld.self_attn.k_proj.weight", (long long)l), dt, 2, H, NKV * HD, 1, 0.02f);
        ok &= add(&st, NM("model.layers.%lld.self_attn.v_proj.weight", (long long)l), dt, 2, H, NKV * HD, 1, 0.02f);
        ok &= add(&st, NM("model.layers.%lld.self_attn.o_proj.weight", (long long)l), dt, 2, NH * HD, H, 1, 0.02f);
        ok &= add(&st, NM("model.layers.%lld.self_attn.q_norm.weight", (long long)l), dt, 1, HD, 1, 1, -1.0f);
        ok &= add(&st, NM("model.layers.%lld.self_attn.k_norm.weight", (long long)l), dt, 1, HD, 1, 1, -1.0f);
        ok &= add(&st, NM("model.layers.%lld.mlp.gate.weight", (long long)l), dt, 2, H, n_exp, 1, 0.02f);
        if (gguf) {
            ok &= add(&st, NM("model.layers.%lld.mlp.experts.gate_proj.weight", (long long)l), dt, 3, H, EI, n_exp, 0.02f);
            ok &= add(&st, NM("model.layers.%lld.mlp.experts.up_proj.weight", (long long)l), dt, 3, H, EI, n_exp, 0.02f);
            ok &= add(&st, NM("model.layers.%lld.mlp.experts.down_proj.weight", (long long)l), dt, 3, EI, H, n_exp, 0.02f);
        } else {
            for (e = 0; e < n_exp && ok; ++e) {
                ok &= add(&st, NM("model.layers.%lld.mlp.experts.%lld.gate_proj.weight", (long long)l, (long long)e), dt, 2,
                          H, EI, 1, 0.02f);
                ok &= add(&st, NM("model.layers.%lld.mlp.experts.%lld.up_proj.weight", (long long)l, (long long)e), dt, 2,
                          H, EI, 1, 0.02f);
                ok &= add(&st, NM("model.layers.%lld.mlp.experts.%lld.down_proj.weight", (long long)l, (long long)e), dt, 2,
                          EI, H, 1, 0.02f);
            }
        }
#undef NM
    }
    if (!ok) { fprintf(stderr, "bench_moe_rotate: out of memory generating %s\n", path); qx_store_free(&st); return 0; }
    if (gguf) {
        qx_gguf_save_opts o;
        memset(&o, 0, sizeof o);
        o.force = 1;
        r = qx_gguf_save(&st, path, &o, &er);
    } else {
        qx_st_save_opts o;
        memset(&o, 0, sizeof o);
        o.force = 1;
        r = qx_st_save(&st, path, &o, &er);
    }
    qx_store_free(&st);
    if (r != QUAROT_OK) fprintf(stderr, "bench_moe_rotate: %s: %s\n", path, er.msg);
    return r == QUAROT_OK;
}

/* generate() in a child process: the parent's heap stays small, and a forked child's peak resident
   set starts from its parent's (ru_maxrss counts the pages it had before exec), so the tool's runs
   measure the tool alone. */
static int generate_apart(const char* path, int gguf, int64_t n_layers, int64_t n_exp) {
    int status = 0;
    pid_t pid;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) return generate(path, gguf, n_layers, n_exp);
    if (pid == 0) _exit(generate(path, gguf, n_layers, n_exp) ? 0 : 1);
    if (waitpid(pid, &status, 0) != pid) return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* `quarot rotate in out --threads 1 --force` in a child: its exit code, peak resident set (KiB), wall s. */
static int run_rotate(const char* quarot, const char* in, const char* out, long* maxrss_kib, double* wall) {
    pid_t pid;
    int status = 0;
    struct rusage ru;
    double t0 = bench_now_s();
    fflush(stdout);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char* args[8];
        args[0] = (char*)"quarot"; args[1] = (char*)"rotate"; args[2] = (char*)in; args[3] = (char*)out;
        args[4] = (char*)"--threads"; args[5] = (char*)"1"; args[6] = (char*)"--quiet"; args[7] = NULL;
        if (!freopen("/dev/null", "w", stdout)) _exit(126);
        execv(quarot, args);
        _exit(127);
    }
    if (wait4(pid, &status, 0, &ru) != pid) return -1;
    *wall = bench_now_s() - t0;
    *maxrss_kib = ru.ru_maxrss;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(int argc, char** argv) {
    const char* tmp = getenv("BENCH_TMPDIR") ? getenv("BENCH_TMPDIR") : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    const char* keep = getenv("BENCH_MOE_KEEP");
    int64_t n_layers = getenv("BENCH_MOE_LAYERS") ? atoll(getenv("BENCH_MOE_LAYERS")) : 1;
    int64_t n_exp = getenv("BENCH_MOE_EXPERTS") ? atoll(getenv("BENCH_MOE_EXPERTS")) : 128;
    char quarot[4096], dir[4096];
    const double mib = 1048576.0;
    const double expert_f32 = 3.0 * EI * H * 4 / mib;
    const double layer_f32 = ((double)n_exp * 3 * EI * H + 2.0 * NH * HD * H + 2.0 * NKV * HD * H + (double)n_exp * H) * 4 / mib;
    int fmt, fails = 0;
    (void)argc;
    if (getenv("BENCH_MOE_QUAROT")) {
        snprintf(quarot, sizeof quarot, "%s", getenv("BENCH_MOE_QUAROT"));
    } else {
        const char* slash = strrchr(argv[0], '/');
        snprintf(quarot, sizeof quarot, "%.*s/../quarot", slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
    }
    if (access(quarot, X_OK) != 0) { fprintf(stderr, "bench_moe_rotate: no tool at %s (make)\n", quarot); return 1; }
    if (n_layers < 1 || n_exp < 8) { fprintf(stderr, "bench_moe_rotate: BENCH_MOE_LAYERS >= 1, BENCH_MOE_EXPERTS >= 8\n"); return 1; }
    if (keep) {
        snprintf(dir, sizeof dir, "%s", keep);
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) { perror(dir); return 1; }
    } else {
        snprintf(dir, sizeof dir, "%s/bench_moe_XXXXXX", tmp);
        if (!mkdtemp(dir)) { perror(dir); return 1; }
    }
    printf("bench_moe_rotate: quarot rotate IN OUT --threads 1 of a Qwen3-MoE-shaped checkpoint: %lld layer(s), "
           "hidden %d, %lld experts of %d x %d; peak = the child's max resident set\n",
           (long long)n_layers, H, (long long)n_exp, EI, H);
    printf("one expert (gate, up, down) in f32: %.1f MiB; one layer's weights in f32: %.0f MiB\n", expert_f32, layer_f32);
    printf("%-34s %10s %12s %8s\n", "input", "input MB", "peak MiB", "wall s");
    for (fmt = 0; fmt < 2; ++fmt) {
        char in[4200], out[4200];
        struct stat sb;
        long rss = 0;
        double wall = 0.0, in_mb = 0.0;
        int rc;
        snprintf(in, sizeof in, "%s/%s", dir, fmt == 0 ? "qwen3moe_f16.gguf" : "qwen3moe_bf16");
        snprintf(out, sizeof out, "%s/%s", dir, fmt == 0 ? "out.gguf" : "out_st");
        if (stat(in, &sb) != 0 && !generate_apart(in, fmt == 0, n_layers, n_exp)) { ++fails; continue; }
        if (fmt == 0 && stat(in, &sb) == 0) in_mb = (double)sb.st_size / 1e6;
        if (fmt == 1) {   /* the directory's shards */
            DIR* d = opendir(in);
            struct dirent* de;
            while (d && (de = readdir(d)) != NULL) {
                char f[8400];
                snprintf(f, sizeof f, "%s/%s", in, de->d_name);
                if (stat(f, &sb) == 0 && S_ISREG(sb.st_mode)) in_mb += (double)sb.st_size / 1e6;
            }
            if (d) closedir(d);
        }
        bench_remove_tree(out);
        rc = run_rotate(quarot, in, out, &rss, &wall);
        bench_remove_tree(out);
        if (rc != 0) { fprintf(stderr, "bench_moe_rotate: quarot rotate %s failed (exit %d)\n", in, rc); ++fails; continue; }
        printf("%-34s %10.0f %12.0f %8.2f\n", fmt == 0 ? "GGUF qwen3moe f16 (3-D experts)" : "safetensors bf16 (per expert)",
               in_mb, (double)rss / 1024.0, wall);
        fflush(stdout);
    }
    if (!keep) {
        char f[4200];
        snprintf(f, sizeof f, "%s/qwen3moe_f16.gguf", dir);
        (void)remove(f);
        snprintf(f, sizeof f, "%s/qwen3moe_bf16", dir);
        bench_remove_tree(f);
        (void)rmdir(dir);
    }
    return fails ? 1 : 0;
}
