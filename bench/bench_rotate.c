/* bench_rotate - `quarot rotate` throughput on a 7B-shaped checkpoint generated in-process.

   The model has Llama-2-7B's layer shapes (hidden 4096, intermediate 11008, 32 heads of 128, vocab
   32000, untied lm_head) and BENCH_ROTATE_LAYERS decoder layers (default 2), random weights from
   qx_synth, saved as a Hugging Face safetensors directory in a temporary folder (BENCH_TMPDIR, else
   $TMPDIR, else /tmp) once per dtype. Each case then loads it the way the tool does (read-only
   file mappings) and runs qx_rotate_file (R1 + R2 Hadamard, and with --online the o_proj heads / down_proj
   online rotations) into another directory of that folder, for f16 and bf16, with and without
   --online, on 1 and on all threads (BENCH_ROTATE_THREADS overrides the list's last entry).
   BENCH_ROTATE_SHAPE=llama3 gives Llama-3-8B's shapes instead (intermediate 14336, 8 KV heads, vocab
   128256: embedding and lm_head 1 GiB each in f16, 2 GiB each in f32, which the rotation streams
   in row windows; the peak column shows it).
   Filters (for profiling): BENCH_ROTATE_DTYPE=f16 or bf16, BENCH_ROTATE_ONLINE=0 or 1, BENCH_ROTATE_SKIP1=1
   (no 1-thread runs), BENCH_ROTATE_DISK=0 (no runs into the bench folder), BENCH_ROTATE_KEEP=DIR (generate the inputs into DIR once, reuse them in later
   runs and leave them there).

   Reported per case: GB/s = input weight bytes / wall time of the whole qx_rotate_file call (which
   includes the validation pass over every tensor, and the output's fsync), the share of the time per
   phase (validate, read = copies widened to f32, fuse = norm fusion, rotate = the rotate commands,
   write = conversion to the output dtype and the writes), and the peak of the writable copies next
   to its bound, one decoder layer in f32 plus the global tensors (embeddings, lm_head, norms) in
   f32. The temporary folder is removed at the end.
   On a shared machine wall time swings with the other load: "cpu s" is the process's user + system
   CPU time over the same call (all threads), and "GB/cpu-s" the input bytes per CPU second, which the
   neighbours disturb much less. The first line measures what fresh memory costs here (first touch
   of a new 256 MiB block, page faults and the kernel's clearing included; then the same on 2 MiB
   pages), the cost the rotation pays for every copy buffer it cannot reuse (the globals and the
   first layer), and the disk's rate for a 256 MiB sequential write + fsync into the bench folder
   (the output's fsync waits for that), and the same for 1 GiB written with O_DIRECT in 8 MiB blocks
   (what the disk itself takes: rotate writes its weights that way, qx_direct.h); "/direct" is
   rotate's GB/s as a share of that rate. "1st layer" and "later" are the rotation pass's GB/s per
   decoder layer (input bytes / seconds from acquire to written): the first layer fills fresh copy
   buffers, later ones reuse them, so "later" is the rate a many-layer model approaches (set
   BENCH_ROTATE_LAYERS=4 or more to see it; the globals' fixed cost comes on top).
   The runs on all threads are repeated with the output in a RAM-backed folder (BENCH_ROTATE_RAMDIR,
   default /dev/shm; empty = off): the "out" column says "ram" there. That run is bounded by the
   code, not the disk (tmpfs: no device behind the writes; recent kernels accept O_DIRECT on tmpfs,
   older ones refuse it and the buffered fallback runs; the last column says which), so the table
   separates what the disk here allows ("disk" rows, "/direct") from what the tool does ("ram").
   On a machine where first touches of 4 KiB pages are slow (the "memory" line; tmpfs takes its
   pages one 4 KiB fault at a time) the "ram" rows measure that instead: the "null" rows
   (BENCH_ROTATE_NULL=0: off) convert every tensor as the writer does and write it to /dev/null. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE       /* O_DIRECT */
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE   /* MAP_ANONYMOUS, madvise */
#endif
#include "quarot.h"
#include "cli/qx_cli.h"
#include "support/qx_direct.h"
#include "support/qx_file.h"
#include "pipeline/qx_rotate_file.h"
#include "formats/qx_safetensors.h"
#include "model/qx_synth.h"
#include "support/qx_threads.h"
#include "formats/qx_load.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"


static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* GB/s of writing a block of fresh memory (first touch), and of writing it again (reused). */
static void fresh_memory_rate(double* fresh, double* reused) {
    const size_t n = (size_t)256 << 20;
    void* (*volatile fill)(void*, int, size_t) = memset;   /* not elided with the malloc */
    char* p = (char*)malloc(n);
    double t0;
    *fresh = *reused = 0.0;
    if (!p) return;
    t0 = bench_now_s();
    fill(p, 1, n);
    *fresh = (double)n / 1e9 / (bench_now_s() - t0);
    t0 = bench_now_s();
    fill(p, 2, n);
    *reused = (double)n / 1e9 / (bench_now_s() - t0);
    if (p[n / 2] != 2) *reused = 0.0;
    free(p);
}

/* GB/s of the first touch of a fresh 256 MiB block advised onto 2 MiB pages (what the rotation's
   copy buffers get); 0 where the advice does not exist. */
static double fresh_huge_rate(void) {
#ifdef MADV_HUGEPAGE
    const size_t n = (size_t)256 << 20, huge = (size_t)2 << 20;
    void* (*volatile fill)(void*, int, size_t) = memset;
    char* p = (char*)mmap(NULL, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char* a;
    double t0, r;
    if (p == MAP_FAILED) return 0.0;
    a = (char*)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
    (void)madvise(a, n, MADV_HUGEPAGE);
    t0 = bench_now_s();
    fill(a, 1, n);
    r = (double)n / 1e9 / (bench_now_s() - t0);
    munmap(p, n + huge);
    return r;
#else
    return 0.0;
#endif
}

/* GB/s of writing n bytes sequentially from buf in chunk-byte pwrites into fd, fsync included; 0
   when a write or the fsync fails. */
static double timed_write(int fd, const char* buf, size_t chunk, size_t n) {
    double t0 = bench_now_s();
    size_t off;
    for (off = 0; off < n; off += chunk)
        if (pwrite(fd, buf, chunk, (off_t)off) != (ssize_t)chunk) return 0.0;
    return fsync(fd) == 0 ? (double)n / 1e9 / (bench_now_s() - t0) : 0.0;
}

/* GB/s of writing 256 MiB sequentially (4 MiB pwrites from one buffer) into a new file in dir,
   fsync included. */
static double disk_write_rate(const char* dir) {
    const size_t n = (size_t)256 << 20, chunk = (size_t)4 << 20;
    char path[4200];
    char* buf = (char*)malloc(chunk);
    double r;
    int fd;
    snprintf(path, sizeof path, "%s/disk_probe", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || !buf) { free(buf); if (fd >= 0) close(fd); return 0.0; }
    memset(buf, 3, chunk);
    r = timed_write(fd, buf, chunk, n);
    close(fd);
    (void)remove(path);
    free(buf);
    return r;
}

/* GB/s of writing 1 GiB sequentially with O_DIRECT (8 MiB pwrites from one 2 MiB-aligned buffer,
   no page cache) into a new file in dir, fsync included: what the disk itself takes, the ceiling
   for rotate's O_DIRECT output. 0 where the file system refuses O_DIRECT. */
static double disk_direct_rate(const char* dir) {
#ifdef O_DIRECT
    const size_t n = (size_t)1 << 30, chunk = (size_t)8 << 20, huge = (size_t)2 << 20;
    char path[4200];
    char* raw = (char*)mmap(NULL, chunk + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char* buf;
    double r = 0.0;
    int fd;
    if (raw == MAP_FAILED) return 0.0;
    buf = (char*)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    memset(buf, 5, chunk);
    snprintf(path, sizeof path, "%s/disk_probe_direct", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd >= 0) {
        r = timed_write(fd, buf, chunk, n);
        close(fd);
        (void)remove(path);
    }
    munmap(raw, chunk + huge);
    return r;
#else
    (void)dir;
    return 0.0;
#endif
}

static int env_int(const char* name, int dflt) {
    const char* v = getenv(name);
    return v && v[0] ? atoi(v) : dflt;
}

/* Bytes of the store's tensors (the input's weights) and of the f32 bound on the copies. */
static void store_bytes(const qx_store* s, int64_t n_layers, double* weights, double* bound) {
    int64_t i;
    double layer = 0.0, glob = 0.0;
    *weights = 0.0;
    for (i = 0; i < s->count; ++i) {
        const quarot_tensor* t = &s->items[i].t;
        double f32 = 4.0 * (double)quarot_tensor_nelements(t);
        *weights += (double)quarot_tensor_nbytes(t);
        if (strstr(s->items[i].name, "layers.0.")) layer += f32;
        else if (!strstr(s->items[i].name, "layers.")) glob += f32;
    }
    (void)n_layers;
    *bound = layer + glob;
}

/* The "null" output: a caller sink (qx_rotate_file_opts.sink) that converts every tensor to its
   planned dtype as the safetensors writer does (qx_out_tensor, rows on a pool of the same size) and
   writes the bytes to /dev/null: the tool's arithmetic with no file system behind it. (A caller's
   sink gets the globals at the end, so the first layer's copies are fresh memory here, on 2 MiB
   pages; "later" is the rate to read.) */
typedef struct null_sink {
    const qx_tensor_plan* plan;
    int64_t n;
    qx_out out;
    qx_pool* pool;
    quarot_env env;
} null_sink;

static quarot_result null_begin(void* user, const qx_store* s, const qx_tensor_plan* plan, int64_t n, qx_err* e) {
    null_sink* k = (null_sink*)user;
    (void)s;
    k->plan = plan;
    k->n = n;
    memset(&k->out, 0, sizeof k->out);
    k->out.path = (char*)"/dev/null";
    k->out.lock_fd = -1;
    k->out.fd = open("/dev/null", O_WRONLY);
    k->out.env = &k->env;
    if (k->out.fd < 0) { qx_err_set(e, "/dev/null: cannot open"); return QUAROT_ERR_IO; }
    return QUAROT_OK;
}

static quarot_result null_put(void* user, const char* name, const quarot_tensor* t, qx_err* e) {
    null_sink* k = (null_sink*)user;
    quarot_dtype dt = t->dtype;
    int64_t i;
    for (i = 0; i < k->n; ++i)
        if (strcmp(k->plan[i].name, name) == 0) { dt = k->plan[i].dtype; break; }
    return qx_out_tensor(&k->out, 0, dt, t, 0, 0, name, e);
}

/* The streamed embedding and lm_head: each window converted like the rest (the offset is moot) */
static quarot_result null_put_rows(void* user, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e) {
    (void)row0;
    return null_put(user, name, t, e);
}

static quarot_result null_finish(void* user, qx_err* e) {
    null_sink* k = (null_sink*)user;
    (void)e;
    if (k->out.fd >= 0) close(k->out.fd);
    k->out.fd = -1;
    return QUAROT_OK;
}

static void null_abort(void* user) { (void)null_finish(user, NULL); }

int main(void) {
    const int n_layers = env_int("BENCH_ROTATE_LAYERS", 2);
    const int llama3 = getenv("BENCH_ROTATE_SHAPE") && strcmp(getenv("BENCH_ROTATE_SHAPE"), "llama3") == 0;
    const int all = env_int("BENCH_ROTATE_THREADS", qx_cpu_count());
    const char* tmp_root = getenv("BENCH_TMPDIR");
    char dir[4096], in_path[4200], out_path[4200];
    const char* only_dtype = getenv("BENCH_ROTATE_DTYPE");      /* "f16" / "bf16": that one only */
    const int only_online = env_int("BENCH_ROTATE_ONLINE", -1);  /* 0 / 1: without / with --online only */
    char f16_path[4200];
    int thread_list[2];
    int d, online, ti, n_threads = 0, have_f16 = 0;
    double disk_direct = 0.0;
    struct rusage ru;
    char ram_dir[4096] = "";
    {   /* the RAM-backed output folder (a fresh one per run, removed at the end) */
        const char* rd = getenv("BENCH_ROTATE_RAMDIR");
        struct stat rst;
        if (!rd) rd = stat("/dev/shm", &rst) == 0 && S_ISDIR(rst.st_mode) ? "/dev/shm" : "";
        if (rd[0]) {
            snprintf(ram_dir, sizeof ram_dir, "%s/bench_rotate_XXXXXX", rd);
            if (!mkdtemp(ram_dir)) ram_dir[0] = '\0';
        }
    }
    if (!tmp_root || !tmp_root[0]) tmp_root = getenv("TMPDIR");
    const char* keep = getenv("BENCH_ROTATE_KEEP");
    if (!tmp_root || !tmp_root[0]) tmp_root = "/tmp";
    if (keep && keep[0]) {
        snprintf(dir, sizeof dir, "%s", keep);
        (void)mkdir(dir, 0700);
    } else {
        keep = NULL;
        snprintf(dir, sizeof dir, "%s/bench_rotate_XXXXXX", tmp_root);
        if (!mkdtemp(dir)) { fprintf(stderr, "bench_rotate: cannot create a folder under %s\n", tmp_root); return 1; }
    }
    if (env_int("BENCH_ROTATE_SKIP1", 0) == 0 || all <= 1) thread_list[n_threads++] = 1;
    if (all > 1) thread_list[n_threads++] = all;
    printf("bench_rotate: %s (hidden 4096, intermediate %s, 32 heads, %s), %d layers, in %s\n", llama3 ? "Llama-3-8B-shaped" : "7B-shaped",
           llama3 ? "14336" : "11008", llama3 ? "8 KV heads, vocab 128256" : "vocab 32000", n_layers, dir);
    printf("SIMD: %s; GB/s = input weight bytes / wall seconds of the whole rotation (validation, copies, fusion,\n"
           "rotation, conversion, writes, fsync); phases as %% of that time; peak = largest set of writable copies\n",
           quarot_simd_name());
    {
        double fresh, reused;
        fresh_memory_rate(&fresh, &reused);
        disk_direct = disk_direct_rate(dir);
        printf("memory: first touch of fresh pages %.2f GB/s (on 2 MiB pages %.2f GB/s), rewriting them %.2f GB/s; "
               "disk: sequential write + fsync %.2f GB/s buffered, %.2f GB/s O_DIRECT (1 GiB, 8 MiB writes)\n", fresh,
               fresh_huge_rate(), reused, disk_write_rate(dir), disk_direct);
    }
    printf("%-5s %-7s %3s %4s %7s %7s %6s %7s %8s %9s %6s %6s %6s %6s %6s %10s %10s %9s %6s %7s %s\n", "dtype", "online", "thr", "out", "GB", "sec", "GB/s",
           "cpu s", "GB/cpu-s", "validate", "read", "fuse", "rotate", "write", "other", "peak MiB", "bound MiB", "1st layer", "later",
           "/direct", "weights written");
    for (d = 0; d < 2; ++d) {
        const quarot_dtype dt = d ? QUAROT_DTYPE_BF16 : QUAROT_DTYPE_F16;
        qx_synth_desc sd;
        qx_store s;
        qx_err e;
        qx_st_save_opts so;
        double t0 = bench_now_s();
        struct stat kst;
        if (only_dtype && strcmp(only_dtype, quarot_dtype_name(dt)) != 0) continue;
        snprintf(in_path, sizeof in_path, "%s/in_%s", dir, quarot_dtype_name(dt));
        if (keep && stat(in_path, &kst) == 0) {   /* generated by an earlier run */
            if (dt == QUAROT_DTYPE_F16) { snprintf(f16_path, sizeof f16_path, "%s", in_path); have_f16 = 1; }
            goto run;
        }
        /* the random model is drawn once, in f16; the bf16 input is the same weights converted */
        memset(&sd, 0, sizeof sd);
        sd.hidden = 4096; sd.intermediate = llama3 ? 14336 : 11008; sd.n_heads = 32; sd.n_kv_heads = llama3 ? 8 : 32; sd.head_dim = 128;
        sd.vocab = llama3 ? 128256 : 32000; sd.n_layers = n_layers; sd.max_seq = 4096; sd.tied = -1; sd.dtype = QUAROT_DTYPE_F16; sd.seed = 7;
        if (have_f16) {
            qx_load_opts lo;
            memset(&lo, 0, sizeof lo);
            lo.copy = 1;
            if (qx_load_model(f16_path, &lo, &s, &e) != QUAROT_OK || qx_store_convert(&s, dt) != QUAROT_OK) {
                fprintf(stderr, "convert: %s\n", e.msg); if (!keep) bench_remove_tree(dir); return 1;
            }
        } else if (qx_synth_model(&s, &sd, &e) != QUAROT_OK || (dt != QUAROT_DTYPE_F16 && qx_store_convert(&s, dt) != QUAROT_OK)) {
            fprintf(stderr, "synth: %s\n", e.msg); if (!keep) bench_remove_tree(dir); return 1;
        }
        snprintf(in_path, sizeof in_path, "%s/in_%s", dir, quarot_dtype_name(dt));
        memset(&so, 0, sizeof so);
        so.force = 1;
        if (qx_st_save(&s, in_path, &so, &e) != QUAROT_OK) { fprintf(stderr, "save: %s\n", e.msg); qx_store_free(&s); if (!keep) bench_remove_tree(dir); return 1; }
        qx_store_free(&s);
        if (dt == QUAROT_DTYPE_F16) { snprintf(f16_path, sizeof f16_path, "%s", in_path); have_f16 = 1; }
        fprintf(stderr, "  (generated and saved the %s model in %.1f s)\n", quarot_dtype_name(dt), bench_now_s() - t0);
    run:
        for (online = 0; online < 2; ++online) {
            if (only_online >= 0 && online != only_online) continue;
            for (ti = 0; ti < 3 * n_threads; ++ti) {
                const int ram = ti >= n_threads && ti < 2 * n_threads;   /* second pass: the output in RAM (all threads only) */
                const int null_out = ti >= 2 * n_threads;               /* third: converted, written to /dev/null */
                null_sink ns;
                qx_rotate_sink sink;
                quarot_rotate_desc desc;
                quarot_online_list list;
                qx_rotate_file_opts ro;
                qx_rotate_file_stats st;
                qx_load_opts lo;
                double wbytes, bound, other, c0;
                quarot_result r;
                if (!ram && !null_out && !env_int("BENCH_ROTATE_DISK", 1)) continue;
                if (ram && (!ram_dir[0] || thread_list[ti - n_threads] != all || all <= 1)) continue;
                if (null_out && (!env_int("BENCH_ROTATE_NULL", 1) || thread_list[ti - 2 * n_threads] != all || all <= 1)) continue;
                memset(&lo, 0, sizeof lo);
                if (qx_load_model(in_path, &lo, &s, &e) != QUAROT_OK) { fprintf(stderr, "load: %s\n", e.msg); if (!keep) bench_remove_tree(dir); return 1; }
                store_bytes(&s, n_layers, &wbytes, &bound);
                quarot_online_list_init(&list, NULL);
                memset(&desc, 0, sizeof desc);
                desc.rotation = QUAROT_ROTATION_HADAMARD;
                desc.online = online;
                if (online) desc.online_out = &list;
                if (ram) snprintf(out_path, sizeof out_path, "%s/out", ram_dir);
                else snprintf(out_path, sizeof out_path, "%s/out", dir);
                memset(&ro, 0, sizeof ro);
                ro.out_path = out_path;
                ro.force = 1;
                ro.drop_pages = 1;
                ro.threads = thread_list[ti % n_threads];
                if (null_out) {
                    memset(&ns, 0, sizeof ns);
                    ns.pool = qx_pool_create(ro.threads);
                    qx_pool_env(ns.pool, &ns.env);
                    memset(&sink, 0, sizeof sink);
                    sink.begin = null_begin;
                    sink.put = null_put;
                    sink.put_rows = null_put_rows;
                    sink.finish = null_finish;
                    sink.abort = null_abort;
                    sink.user = &ns;
                    ro.sink = &sink;
                }
                c0 = cpu_s();
                r = qx_rotate_file(&s, &desc, &ro, &st, &e);
                c0 = cpu_s() - c0;
                if (null_out) qx_pool_destroy(ns.pool);
                qx_store_free(&s);
                quarot_online_list_free(&list);
                bench_remove_tree(out_path);
                if (r != QUAROT_OK) { fprintf(stderr, "rotate: %s\n", e.msg); if (!keep) bench_remove_tree(dir); return 1; }
                other = st.total_s - st.validate_s - st.read_s - st.fuse_s - st.rotate_s - st.write_s;
                printf("%-5s %-7s %3d %4s %7.2f %7.2f %6.2f %7.2f %8.2f %8.0f%% %5.0f%% %5.0f%% %5.0f%% %5.0f%% %5.0f%% %10.0f %10.0f %9.2f %6.2f %6.0f%% %s\n",
                       quarot_dtype_name(dt), online ? "online" : "-", st.threads, null_out ? "null" : ram ? "ram" : "disk", wbytes / 1e9, st.total_s,
                       wbytes / 1e9 / st.total_s, c0, wbytes / 1e9 / c0, 100 * st.validate_s / st.total_s, 100 * st.read_s / st.total_s,
                       100 * st.fuse_s / st.total_s, 100 * st.rotate_s / st.total_s, 100 * st.write_s / st.total_s,
                       100 * other / st.total_s, (double)st.peak_copy_bytes / 1048576.0, bound / 1048576.0,
                       st.first_layer_s > 0 ? st.first_layer_bytes / 1e9 / st.first_layer_s : 0.0,
                       st.later_layers_s > 0 ? st.later_layers_bytes / 1e9 / st.later_layers_s : 0.0,
                       disk_direct > 0 && !ram && !null_out ? 100.0 * wbytes / 1e9 / st.total_s / disk_direct : 0.0,
                       qx_direct_mode_text((qx_direct_mode)st.direct_mode));
                fflush(stdout);
            }
        }
    }
    getrusage(RUSAGE_SELF, &ru);
    printf("max resident set of the whole bench (generation included): %.0f MiB\n", (double)ru.ru_maxrss / 1024.0);
    if (!keep) bench_remove_tree(dir);
    if (ram_dir[0]) bench_remove_tree(ram_dir);
    return 0;
}
