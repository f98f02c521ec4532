/* qx_file.c - see qx_file.h. Plain POSIX: open/fstat/mmap for reading, mkstemp + pwrite + fsync +
   rename for writing, so an output either appears whole under its name or not at all. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE   /* flock, mkdtemp, syscall */
#endif
#include "support/qx_file.h"
#include "support/qx_direct.h"
#include "support/qx_str.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static const char* qx__kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" :
           S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "something else";
}

quarot_result qx_open_input(const char* path, int* fd, qx_err* e) {
    struct stat st;
    int f, fl;
    if (!path || !fd) return QUAROT_ERR_INVALID_ARGUMENT;
    *fd = -1;
    f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) { qx_err_set(e, "%s: cannot open: %s", path, strerror(errno)); return QUAROT_ERR_IO; }
    if (fstat(f, &st) != 0) {
        qx_err_set(e, "%s: cannot stat: %s", path, strerror(errno));
        close(f);
        return QUAROT_ERR_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        qx_err_set(e, "%s: is %s, not a regular file (inputs are read as files)", path, qx__kind(st.st_mode));
        close(f);
        return QUAROT_ERR_IO;
    }
    if ((fl = fcntl(f, F_GETFL)) != -1) (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return QUAROT_OK;
}

quarot_result qx_read_stream(const char* path, size_t max_bytes, char** out, size_t* len, qx_err* e) {
    struct stat st;
    char* buf = NULL;
    size_t cap = 0, n = 0;
    int fd, stream;
    if (!path || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (len) *len = 0;
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { qx_err_set(e, "%s: cannot open: %s", path, strerror(errno)); return QUAROT_ERR_IO; }
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        qx_err_set(e, "%s: %s", path, S_ISDIR(st.st_mode) ? "is a directory, not a text file" : "cannot stat");
        close(fd);
        return QUAROT_ERR_IO;
    }
    stream = !S_ISREG(st.st_mode);
    if (!stream) {   /* a regular file: blocking reads */
        int fl = fcntl(fd, F_GETFL);
        if (fl != -1) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    for (;;) {
        ssize_t got;
        if (n >= max_bytes + 1 || n + 1 >= cap) {
            size_t nc = cap ? 2 * cap : 65536;
            char* p;
            if (n > max_bytes) {   /* a stream with no end (/dev/zero, a FIFO fed forever) stops here */
                free(buf);
                close(fd);
                qx_err_set(e, "%s: longer than the limit of %llu MiB", path, (unsigned long long)(max_bytes >> 20));
                return QUAROT_ERR_OVERFLOW;
            }
            if (nc > max_bytes + 2) nc = max_bytes + 2;
            if (!(p = (char*)realloc(buf, nc))) {
                free(buf);
                close(fd);
                qx_err_set(e, "%s: out of memory", path);
                return QUAROT_ERR_OUT_OF_MEMORY;
            }
            buf = p;
            cap = nc;
        }
        got = read(fd, buf + n, cap - 1 - n);
        if (got > 0) { n += (size_t)got; continue; }
        if (got == 0) break;   /* the end; for a FIFO or pipe, no writer left */
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {   /* a writer with nothing written yet: wait for it */
            struct pollfd pf;
            pf.fd = fd;
            pf.events = POLLIN;
            pf.revents = 0;
            (void)poll(&pf, 1, -1);
            continue;
        }
        qx_err_set(e, "%s: read failed after %zu bytes: %s", path, n, strerror(errno));
        free(buf);
        close(fd);
        return QUAROT_ERR_IO;
    }
    close(fd);
    if (n == 0 && S_ISFIFO(st.st_mode)) {
        free(buf);
        qx_err_set(e, "%s: a FIFO with no writer: nothing to read (start the writer first, or pass a file)", path);
        return QUAROT_ERR_IO;
    }
    if (!buf && !(buf = (char*)malloc(1))) { qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return QUAROT_OK;
}

quarot_result qx_map_file(const char* path, qx_map* m, qx_err* e) {
    struct stat st;
    int fd;
    void* addr;
    quarot_result r;
    if (!path || !m) return QUAROT_ERR_INVALID_ARGUMENT;
    m->addr = NULL;
    m->len = 0;
    m->path = NULL;
    if ((r = qx_open_input(path, &fd, e)) != QUAROT_OK) return r;
    if (fstat(fd, &st) != 0) {
        qx_err_set(e, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return QUAROT_ERR_IO;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        qx_err_set(e, "%s: file too large for this platform", path);
        close(fd);
        return QUAROT_ERR_OVERFLOW;
    }
    if (st.st_size == 0) { close(fd); return QUAROT_OK; }
    /* Private and writable: views into the mapping can be rotated in place, pages are copied on
       first write and the file itself never changes. */
    addr = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (addr == MAP_FAILED) { qx_err_set(e, "%s: cannot map: %s", path, strerror(errno)); return QUAROT_ERR_IO; }
    m->addr = addr;
    m->len = (size_t)st.st_size;
    m->path = (char*)malloc(strlen(path) + 1);
    if (m->path) memcpy(m->path, path, strlen(path) + 1);
    qx_map_register(addr, m->len, path);
    return QUAROT_OK;
}

void qx_unmap(qx_map* m) {
    if (!m) return;
    if (m->addr) qx_map_unregister(m->addr);
    if (m->addr) munmap(m->addr, m->len);
    free(m->path);
    m->addr = NULL;
    m->len = 0;
    m->path = NULL;
}

void qx_unmap_and_free(void* map) {
    qx_unmap((qx_map*)map);
    free(map);
}

/* Whole file into memory with a size cap (config.json, index files: small by nature). */
quarot_result qx_read_file(const char* path, size_t max_bytes, char** out, size_t* len, qx_err* e) {
    struct stat st;
    char* buf;
    size_t got = 0, n;
    int fd;
    quarot_result res;
    if (!path || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (len) *len = 0;
    if ((res = qx_open_input(path, &fd, e)) != QUAROT_OK) return res;
    if (fstat(fd, &st) != 0) {
        qx_err_set(e, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return QUAROT_ERR_IO;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > (uint64_t)max_bytes) {
        qx_err_set(e, "%s: file of %lld bytes is larger than the limit of %llu", path,
                   (long long)st.st_size, (unsigned long long)max_bytes);
        close(fd);
        return QUAROT_ERR_PARSE;
    }
    n = (size_t)st.st_size;
    buf = (char*)malloc(n + 1);
    if (!buf) { close(fd); qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            qx_err_set(e, "%s: read failed after %zu of %zu bytes", path, got, n);
            free(buf);
            close(fd);
            return QUAROT_ERR_IO;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return QUAROT_OK;
}

int qx_path_exists(const char* path) {
    struct stat st;
    return path && lstat(path, &st) == 0;
}

int qx_is_dir(const char* path) {
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int qx_is_file(const char* path) {
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int qx_same_file(const char* a, const char* b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

char* qx_path_dir(const char* path) {
    const char* slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 1;
    char* d = (char*)malloc(n + 2);
    if (!d) return NULL;
    if (!slash) strcpy(d, ".");
    else if (slash == path) strcpy(d, "/");
    else { memcpy(d, path, n); d[n] = '\0'; }
    return d;
}

void qx_model_dir(const char* model_path, char* dir, size_t cap) {
    const char* slash;
    if (qx_is_dir(model_path)) { snprintf(dir, cap, "%s", model_path); return; }
    slash = strrchr(model_path, '/');
    if (!slash) { snprintf(dir, cap, "."); return; }
    if (slash == model_path) { snprintf(dir, cap, "/"); return; }
    snprintf(dir, cap, "%.*s", (int)(slash - model_path), model_path);
}

static double qx__clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double qx_now(void) { return qx__clock_s(CLOCK_MONOTONIC); }
double qx_thread_cpu_now(void) { return qx__clock_s(CLOCK_THREAD_CPUTIME_ID); }

char* qx_path_join(const char* dir, const char* name) {
    size_t a = strlen(dir), b = strlen(name);
    char* p = (char*)malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

int qx_is_plain_filename(const char* name) {
    const unsigned char* c;
    if (!name || !name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return 0;
    for (c = (const unsigned char*)name; *c; ++c)
        if (*c == '/' || *c == '\\' || *c < 0x20 || *c == 0x7f) return 0;
    return 1;
}

/* ---- output through a temporary ---- */

/* The temporary lives beside the output so the final rename stays within one file system. */
quarot_result qx_out_begin(qx_out* o, const char* path, int force, qx_err* e) {
    quarot_result r;
    if (!o || !path || !path[0]) return QUAROT_ERR_INVALID_ARGUMENT;
    o->path = NULL;
    o->tmp = NULL;
    o->fd = -1;
    o->lock_fd = -1;
    o->force = force;
    o->stale_removed = 0;
    o->dio = NULL;
    o->direct_mode = QX_DIRECT_OFF;
    o->env = NULL;
    if ((r = qx_check_out_name(path, e)) != QUAROT_OK) return r;
    if (qx_is_dir(path)) { qx_err_set(e, "%s: is a directory", path); return QUAROT_ERR_IO; }
    if (!force && qx_path_exists(path)) {
        qx_err_set(e, "%s: exists already (not overwritten without force)", path);
        return QUAROT_ERR_IO;
    }
    if (force && (r = qx_check_replaceable(path, 0, e)) != QUAROT_OK) return r;
    o->stale_removed = qx_remove_stale(path);
    o->path = (char*)malloc(strlen(path) + 1);
    o->tmp = qx_tmp_name(path, "tmp");
    if (!o->path || !o->tmp) {
        free(o->path); free(o->tmp);
        o->path = o->tmp = NULL;
        qx_err_set(e, "%s: out of memory", path);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    strcpy(o->path, path);
    o->fd = mkstemp(o->tmp);
    if (o->fd < 0) {
        qx_err_set(e, "%s: cannot create a temporary file: %s", path, strerror(errno));
        free(o->path); free(o->tmp);
        o->path = o->tmp = NULL;
        return QUAROT_ERR_IO;
    }
    /* a second descriptor holds the lock past qx_out_sync's close: a later run that finds the
       temporary unlocked knows its run is gone */
    o->lock_fd = open(o->tmp, O_RDONLY | O_CLOEXEC);
    if (o->lock_fd >= 0) (void)flock(o->lock_fd, LOCK_EX);
    qx_live_add(o->tmp, 0);
    {   /* mkstemp makes 0600; the published file gets what open(0666) would give (umask applied) */
        mode_t mask = umask(0);
        umask(mask);
        (void)fchmod(o->fd, (mode_t)(0666 & ~mask));
    }
    return QUAROT_OK;
}

void qx_out_direct(qx_out* o, uint64_t expected_size) {
    const char* force = getenv("QX_DIRECT");
    if (!o || o->fd < 0 || o->dio) return;
    if (expected_size < QX_DIRECT_MIN_BYTES && !(force && strcmp(force, "1") == 0)) return;
    /* the file's blocks reserved in one piece before the first write: the writes come in any order
       (the streamed embedding and lm_head first, two regions at once), and without this the file
       system allocated them in write order (68 extents against 11 for a 1.3 GB checkpoint, read
       back at 1.1 GB/s against 3.1 for the hook file's digest). Best effort: a file system
       without fallocate writes as before (the same bytes: qx_out_sync sets the final size). */
    if (expected_size > 0 && expected_size <= (uint64_t)INT64_MAX) (void)posix_fallocate(o->fd, 0, (off_t)expected_size);
    o->dio = qx_direct_begin(o->fd, o->path);
    o->direct_mode = (int)qx_direct_get_mode(o->dio);
}

/* Positional writes in chunks of at most 1 GiB, retried on EINTR and short writes. */
int qx_pread_all(int fd, void* buf, size_t n, int64_t off) {
    char* p = (char*)buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0 || (size_t)got > n) return 0;
        p += got;
        off += got;
        n -= (size_t)got;
    }
    return 1;
}

quarot_result qx_out_pwrite(qx_out* o, const void* data, size_t n, uint64_t off, qx_err* e) {
    const char* p = (const char*)data;
    if (!o || o->fd < 0 || (n && !data)) return QUAROT_ERR_STATE;
    if (o->dio) return qx_direct_write(o->dio, data, n, off, e);
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w;
        if (off > (uint64_t)INT64_MAX - chunk) { qx_err_set(e, "%s: offset overflows", o->path); return QUAROT_ERR_OVERFLOW; }
        w = pwrite(o->fd, p, chunk, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            qx_err_set(e, "%s: write failed: %s", o->path, w < 0 ? strerror(errno) : "no progress");
            return QUAROT_ERR_IO;
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return QUAROT_OK;
}

/* Address of row r (flat over ne[1..3]) of a valid view. */
static const char* qx__row_ptr(const quarot_tensor* t, int64_t r) {
    int64_t i1 = r % t->ne[1], i2 = (r / t->ne[1]) % t->ne[2], i3 = r / (t->ne[1] * t->ne[2]);
    return (const char*)t->data + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
}

/* 1 if every |x[i]| < limit (so no NaN, no Inf, nothing that rounds to Inf). Blocks of 64 with a
   fixed count, which the compiler vectorizes at -O2 (a loop of unknown count it left scalar: the
   check cost several times the conversion it guards). */
static int qx__fits_f32(const float* x, int64_t n, float limit) {
    int64_t i = 0, k;
    int out = 0;
    for (; i + 64 <= n; i += 64)
        for (k = 0; k < 64; ++k) out |= !(fabsf(x[i + k]) < limit);
    for (; i < n; ++i) out |= !(fabsf(x[i]) < limit);
    return !out;
}

/* 1 if no half of h[n] has its exponent all ones (em: 0x7c00 f16, 0x7f80 bf16): no Inf, no NaN.
   Blocks of 64 with a fixed count (vectorized at -O2). */
static int qx__halves_finite(const uint16_t* h, int64_t n, unsigned em) {
    int64_t i = 0, k;
    unsigned bad = 0;
    for (; i + 64 <= n; i += 64)
        for (k = 0; k < 64; ++k) bad |= (unsigned)((h[i + k] & em) == em);
    for (; i < n; ++i) bad |= (unsigned)((h[i] & em) == em);
    return !bad;
}

/* Row src of t (f32, contiguous rows) converted into dst when every value fits: 1, else 0 (dst
   then holds garbage the caller overwrites). The f32 value is exact in f64, so rounding it once
   gives the bits of the f64 path. A value fits when it is finite and below the point where round
   to nearest even gives Inf, i.e. exactly when its converted half is finite (NaN stays NaN, Inf
   stays Inf, overflow gives Inf): checked on the halves just written (in L1, 32 per vector), not
   on the floats before (qx__fits_f32, kept for other dtypes). */
static int qx__narrow_row(const quarot_tensor* t, int64_t src, char* dst, quarot_dtype dt, float limit) {
    const float* x = (const float*)qx__row_ptr(t, src);
    if (dt != QUAROT_DTYPE_F16 && dt != QUAROT_DTYPE_BF16) {
        if (!qx__fits_f32(x, t->ne[0], limit)) return 0;
        (void)quarot_convert(dst, dt, x, QUAROT_DTYPE_F32, t->ne[0], QUAROT_ISA_DEFAULT);
        return 1;
    }
    (void)quarot_convert(dst, dt, x, QUAROT_DTYPE_F32, t->ne[0], QUAROT_ISA_DEFAULT);
    return qx__halves_finite((const uint16_t*)(const void*)dst, t->ne[0], dt == QUAROT_DTYPE_F16 ? 0x7c00u : 0x7f80u);
}

/* One chunk's rows [r0, r0 + n) narrowed on the pool, 8 rows a task; done[i] says row r0 + i is. */
typedef struct qx__narrow_job {
    const quarot_tensor* t;
    quarot_dtype dt;
    float limit;
    int64_t head_dim, r0, n;
    int to_interleaved;
    char* chunk;
    size_t row_bytes;
    unsigned char* done;
} qx__narrow_job;

static void qx__narrow_task(void* arg, int64_t task) {
    const qx__narrow_job* j = (const qx__narrow_job*)arg;
    int64_t i, end = (task + 1) * 8 < j->n ? (task + 1) * 8 : j->n;
    for (i = task * 8; i < end; ++i) {
        int64_t r = j->r0 + i, src = j->head_dim > 0 ? qx_rope_src_row(r, j->head_dim, j->to_interleaved) : r;
        j->done[i] = (unsigned char)qx__narrow_row(j->t, src, j->chunk + (size_t)i * j->row_bytes, j->dt, j->limit);
    }
}

quarot_result qx_out_tensor(qx_out* o, uint64_t off, quarot_dtype dt, const quarot_tensor* t,
                            int64_t head_dim, int to_interleaved, const char* what, qx_err* e) {
    size_t es = quarot_dtype_size(dt), row_bytes, cap, used = 0;
    int64_t rows, r, ne0;
    int same, elem_perm, bad = 0, narrow, par = 0;
    float flimit;
    qx__narrow_job job;
    /* |x| from which round-to-nearest-even gives Inf: halfway above the largest finite value */
    double limit = dt == QUAROT_DTYPE_F16 ? 65520.0 : dt == QUAROT_DTYPE_BF16 ? 3.3961775292304e38 : 0.0, worst = 0.0;
    int64_t worst_row = -1;
    char* chunk = NULL;
    char* cur = NULL;            /* this chunk's rows: in the block buffers (in_place) or in chunk */
    size_t cur_cap = 0;
    int in_place = 0;
    double* drow = NULL;
    double* dperm = NULL;
    quarot_tensor rv;
    quarot_result res = QUAROT_OK;
    if (!o || !t || !what) return QUAROT_ERR_INVALID_ARGUMENT;
    if (es == 0 || quarot_tensor_validate(t) != QUAROT_OK) {
        qx_err_set(e, "%s: tensor \"%s\": invalid tensor view or dtype", o->path, what);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (dt == QUAROT_DTYPE_DEFAULT) dt = QUAROT_DTYPE_F32;
    ne0 = t->ne[0];
    rows = quarot_tensor_nrows(t);
    if ((uint64_t)ne0 > SIZE_MAX / es) return QUAROT_ERR_OVERFLOW;
    row_bytes = (size_t)ne0 * es;
    elem_perm = head_dim > 0 && rows == 1;
    if (head_dim > 0) {
        int64_t n = elem_perm ? ne0 : rows;
        if (head_dim % 2 != 0 || n % head_dim != 0 || (!elem_perm && (t->ne[2] != 1 || t->ne[3] != 1))) {
            qx_err_set(e, "%s: tensor \"%s\": %lld rows are not whole heads of %lld for the RoPE permutation",
                       o->path, what, (long long)n, (long long)head_dim);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    }
    same = t->dtype == dt || (t->dtype == QUAROT_DTYPE_DEFAULT && dt == QUAROT_DTYPE_F32);
    narrow = t->dtype == QUAROT_DTYPE_F32 && limit > 0 && !elem_perm && t->nb[0] == sizeof(float);
    flimit = (float)limit;   /* 65520 and (2 - 2^-8) * 2^127 are exact in f32 */
    if (same && head_dim <= 0 && quarot_tensor_is_contiguous(t))     /* fast path: one write */
        return qx_out_pwrite(o, t->data, quarot_tensor_nbytes(t), off, e);
    /* rows gathered into chunks of about 4 MiB (at least one row) */
    cap = row_bytes > ((size_t)4 << 20) ? row_bytes : ((size_t)4 << 20) / row_bytes * row_bytes;
    chunk = o->dio ? (char*)qx_direct_scratch(o->dio, cap) : (char*)malloc(cap);   /* reused: no fresh pages */
    if (!same || elem_perm) {
        drow = (double*)malloc((size_t)ne0 * sizeof *drow);
        dperm = elem_perm ? (double*)malloc((size_t)ne0 * sizeof *dperm) : NULL;
    }
    memset(&job, 0, sizeof job);
    if (narrow && o->env && o->env->parallel.run && o->env->parallel.n_threads > 1) {
        job.t = t;
        job.dt = dt;
        job.limit = flimit;
        job.head_dim = head_dim;
        job.to_interleaved = to_interleaved;
        job.chunk = chunk;
        job.row_bytes = row_bytes;
        job.done = (unsigned char*)malloc(cap / row_bytes);
        par = job.done != NULL;   /* else serially */
    }
    if (!chunk || ((!same || elem_perm) && !drow) || (elem_perm && !dperm)) {
        res = QUAROT_ERR_OUT_OF_MEMORY;
        qx_err_set(e, "%s: tensor \"%s\": out of memory", o->path, what);
        goto done;
    }
    for (r = 0; r < rows && res == QUAROT_OK; ++r) {
        int64_t src = (head_dim > 0 && !elem_perm) ? qx_rope_src_row(r, head_dim, to_interleaved) : r;
        char* dst;
        if (used == 0) {   /* a new chunk: in place in the block buffers when whole rows fit there */
            size_t room = 0;
            char* sp = o->dio ? qx_direct_span(o->dio, off, (size_t)(rows - r) * row_bytes, &room, e) : NULL;
            if (o->dio && !sp) { res = QUAROT_ERR_IO; break; }
            in_place = sp && room >= row_bytes;
            cur = in_place ? sp : chunk;
            cur_cap = in_place && room < cap ? room / row_bytes * row_bytes : cap;
            if (o->dio && !in_place) cur_cap = row_bytes;   /* the row across the block's end: copied */
        }
        dst = cur + used;
        if (par && used == 0) {   /* the chunk's rows that fit, converted on the pool */
            job.r0 = r;
            job.chunk = cur;
            job.n = rows - r < (int64_t)(cur_cap / row_bytes) ? rows - r : (int64_t)(cur_cap / row_bytes);
            quarot_env_parallel_for(o->env, qx__narrow_task, &job, (job.n + 7) / 8);
        }
        if (same && !elem_perm) {
            memcpy(dst, qx__row_ptr(t, src), row_bytes);
        } else if (narrow && (par ? job.done[r - job.r0] : qx__narrow_row(t, src, dst, dt, flimit))) {
            /* f32 -> f16/bf16 directly (qx__narrow_row) */
        } else {
            quarot_tensor_init(&rv, dst, dt, 1, &ne0);
            quarot_tensor_get_row_f64(t, src, drow);
            if (limit > 0) {   /* never a non-finite output: find what does not fit */
                int64_t k;
                for (k = 0; k < ne0; ++k) {
                    double a = fabs(drow[k]);
                    if (!(a < limit)) { bad = 1; if (!(a <= worst)) { worst = a; worst_row = r; } }
                }
            }
            if (elem_perm) {
                int64_t k;
                for (k = 0; k < ne0; ++k) dperm[k] = drow[qx_rope_src_row(k, head_dim, to_interleaved)];
                quarot_tensor_set_row_f64(&rv, 0, dperm);
            } else {
                quarot_tensor_set_row_f64(&rv, 0, drow);
            }
        }
        used += row_bytes;
        if (used + row_bytes > cur_cap || r == rows - 1) {
            res = in_place ? qx_direct_commit(o->dio, off, used, e) : qx_out_pwrite(o, cur, used, off, e);
            off += used;
            used = 0;
        }
    }
done:
    free(job.done);
    if (!o->dio) free(chunk);
    free(drow);
    free(dperm);
    if (res == QUAROT_OK && bad) {
        qx_err_set(e, "%s: tensor \"%s\": value %.7g (row %lld) is beyond the %s range (largest finite %s); write f32%s "
                      "(--dtype) or scale the model", o->path, what, worst, (long long)worst_row, quarot_dtype_name(dt),
                   dt == QUAROT_DTYPE_F16 ? "65504" : "3.39e38", dt == QUAROT_DTYPE_F16 ? " or bf16" : "");
        return QUAROT_ERR_OVERFLOW;
    }
    return res;
}

int64_t qx_out_rows(const int64_t* plan_ne) {
    /* the planned shapes were checked when the file was planned: no overflow here */
    return plan_ne[1] * plan_ne[2] * plan_ne[3];
}

quarot_result qx_out_tensor_rows(qx_out* o, uint64_t off, quarot_dtype dt, const int64_t* plan_ne, int64_t* done,
                                 int64_t row0, const quarot_tensor* t, const char* what, qx_err* e) {
    size_t es = quarot_dtype_size(dt == QUAROT_DTYPE_DEFAULT ? QUAROT_DTYPE_F32 : dt);
    quarot_result r;
    int64_t rows;
    if (!o || !plan_ne || !done || !t || !what) return QUAROT_ERR_INVALID_ARGUMENT;
    rows = qx_out_rows(plan_ne);
    if (rows < 1 || t->ne[0] != plan_ne[0] || t->ne[2] != 1 || t->ne[3] != 1 || t->ne[1] < 1 || row0 != *done ||
        t->ne[1] > rows - row0) {
        qx_err_set(e, "%s: tensor \"%s\": rows [%lld, %lld) of [%lld][%lld] do not continue the %lld rows written", o->path, what,
                   (long long)row0, (long long)(row0 + t->ne[1]), (long long)rows, (long long)plan_ne[0], (long long)*done);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    r = qx_out_tensor(o, off + (uint64_t)row0 * (uint64_t)plan_ne[0] * es, dt, t, 0, 0, what, e);
    if (r == QUAROT_OK) *done += t->ne[1];
    return r;
}

/* ftruncate to the planned size (padding after the last tensor reads as zeros), fsync, close. */
quarot_result qx_out_sync(qx_out* o, uint64_t final_size, qx_err* e) {
    if (!o || o->fd < 0) return QUAROT_ERR_STATE;
    if (o->dio) {   /* the blocks still held go out whole; the ftruncate below cuts the last one */
        quarot_result r = qx_direct_flush(o->dio, e);
        o->direct_mode = (int)qx_direct_get_mode(o->dio);
        qx_direct_free(o->dio);
        o->dio = NULL;
        if (r != QUAROT_OK) return r;
    }
    if (final_size > (uint64_t)INT64_MAX || ftruncate(o->fd, (off_t)final_size) != 0) {
        qx_err_set(e, "%s: cannot set the file size: %s", o->path, strerror(errno));
        return QUAROT_ERR_IO;
    }
    if (fsync(o->fd) != 0) { qx_err_set(e, "%s: fsync failed: %s", o->path, strerror(errno)); return QUAROT_ERR_IO; }
    if (close(o->fd) != 0) {
        o->fd = -1;
        qx_err_set(e, "%s: close failed: %s", o->path, strerror(errno));
        return QUAROT_ERR_IO;
    }
    o->fd = -1;
    return QUAROT_OK;
}

/* fsync of the directory holding path (best effort: makes a rename durable). */
void qx_sync_parent(const char* path) {
    char* dir = (char*)malloc(strlen(path) + 2);
    char* slash;
    int dfd;
    if (!dir) return;
    strcpy(dir, path);
    slash = strrchr(dir, '/');
    if (slash) slash[slash == dir ? 1 : 0] = '\0';
    else strcpy(dir, ".");
    dfd = open(dir, O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) { (void)fsync(dfd); close(dfd); }
    free(dir);
}

/* tmp -> path without ever replacing something at path: renameat2(RENAME_NOREPLACE) where the
   kernel has it, else link() + unlink() (files), else a re-check and rename(). */
static quarot_result qx__publish_noreplace(const char* tmp, const char* path, int is_dir, qx_err* e) {
    struct stat st;
    qx_fault_point("publish");
#ifdef SYS_renameat2
    if (syscall(SYS_renameat2, AT_FDCWD, tmp, AT_FDCWD, path, 1u /* RENAME_NOREPLACE */) == 0) return QUAROT_OK;
    if (errno == EEXIST || errno == ENOTEMPTY) {
        qx_err_set(e, "%s: appeared while the output was written; not replaced without force", path);
        return QUAROT_ERR_IO;
    }
    if (errno != ENOSYS && errno != EINVAL && errno != ENOTSUP && errno != EPERM) {
        qx_err_set(e, "%s: cannot rename the temporary into place: %s", path, strerror(errno));
        return QUAROT_ERR_IO;
    }
#endif
    if (!is_dir) {
        if (link(tmp, path) == 0) { (void)unlink(tmp); return QUAROT_OK; }
        if (errno == EEXIST) {
            qx_err_set(e, "%s: appeared while the output was written; not replaced without force", path);
            return QUAROT_ERR_IO;
        }
    }
    if (lstat(path, &st) == 0) {   /* no atomic primitive here: check, then rename */
        qx_err_set(e, "%s: appeared while the output was written; not replaced without force", path);
        return QUAROT_ERR_IO;
    }
    if (rename(tmp, path) != 0) {
        qx_err_set(e, "%s: cannot rename the temporary into place: %s", path, strerror(errno));
        return QUAROT_ERR_IO;
    }
    return QUAROT_OK;
}

quarot_result qx_publish_file(const char* tmp, const char* path, int force, qx_err* e) {
    quarot_result r;
    if (!tmp || !path) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!force) return qx__publish_noreplace(tmp, path, 0, e);
    if ((r = qx_check_replaceable(path, 0, e)) != QUAROT_OK) return r;
    qx_fault_point("publish");
    if (rename(tmp, path) != 0) {
        qx_err_set(e, "%s: cannot rename the temporary into place: %s", path, strerror(errno));
        return QUAROT_ERR_IO;
    }
    return QUAROT_OK;
}

/* After an output (file or directory) was renamed into place: its temporary name is gone, the
   lock it held is released, and the rename itself is made durable (a failure there leaves a
   complete output; it is not reported). */
static void qx__published(char** tmp, int* lock_fd, const char* path) {
    qx_live_remove(*tmp);
    free(*tmp);
    *tmp = NULL;
    if (*lock_fd >= 0) close(*lock_fd);
    *lock_fd = -1;
    qx_sync_parent(path);
}

quarot_result qx_out_publish(qx_out* o, qx_err* e) {
    quarot_result r;
    if (!o || !o->tmp || o->fd >= 0) return QUAROT_ERR_STATE;
    if ((r = qx_publish_file(o->tmp, o->path, o->force, e)) != QUAROT_OK) return r;
    qx__published(&o->tmp, &o->lock_fd, o->path);
    return QUAROT_OK;
}

void qx_out_abort(qx_out* o) {
    if (!o) return;
    qx_direct_free(o->dio);   /* stops its writer thread before the descriptor closes */
    o->dio = NULL;
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->tmp) unlink(o->tmp);
    qx_live_remove(o->tmp);
    if (o->lock_fd >= 0 && o->tmp) close(o->lock_fd);
    else if (o->lock_fd >= 0 && o->lock_fd != o->fd) close(o->lock_fd);
    o->lock_fd = -1;
    free(o->tmp);
    free(o->path);
    o->tmp = NULL;
    o->path = NULL;
}

/* ---- temporaries, stale ones, fault injection ---- */

/* Live temporaries, for the SIGBUS handler (async-signal-safe: it only reads these pointers). */
#define QX__LIVE_MAX 256
static const char* volatile qx__live_files[QX__LIVE_MAX];
static const char* volatile qx__live_dirs[8];
static const char* volatile qx__bus_what;

static void qx__live_set(const char* volatile* v, int n, const char* old, const char* now) {
    int k;
    for (k = 0; k < n; ++k)
        if (v[k] == old) { v[k] = now; return; }
}

void qx_live_add(const char* path, int is_dir) {
    if (path) qx__live_set(is_dir ? qx__live_dirs : qx__live_files, is_dir ? 8 : QX__LIVE_MAX, NULL, path);
}

void qx_live_remove(const char* path) {
    if (!path) return;
    qx__live_set(qx__live_files, QX__LIVE_MAX, path, NULL);
    qx__live_set(qx__live_dirs, 8, path, NULL);
}

/* Mapped inputs (address, length, path), for the handler to name the file a fault lies in. */
#define QX__MAPS_MAX 256
static const char* volatile qx__map_addr[QX__MAPS_MAX];
static volatile size_t qx__map_len[QX__MAPS_MAX];
static char* volatile qx__map_path[QX__MAPS_MAX];

void qx_map_register(const void* addr, size_t len, const char* path) {
    int k;
    char* p;
    if (!addr || !path || !(p = (char*)malloc(strlen(path) + 1))) return;
    strcpy(p, path);
    for (k = 0; k < QX__MAPS_MAX; ++k) {
        if (qx__map_addr[k]) continue;
        qx__map_path[k] = p;
        qx__map_len[k] = len;
        qx__map_addr[k] = (const char*)addr;   /* last: the handler reads an entry by its address */
        return;
    }
    free(p);
}

void qx_map_unregister(const void* addr) {
    int k;
    if (!addr) return;
    for (k = 0; k < QX__MAPS_MAX; ++k) {
        char* p;
        if (qx__map_addr[k] != (const char*)addr) continue;
        qx__map_addr[k] = NULL;
        p = qx__map_path[k];
        qx__map_path[k] = NULL;
        free(p);
        return;
    }
}

static void qx__put(const char* s) {
    size_t n = 0;
    while (s[n]) ++n;
    (void)!write(2, s, n);
}

static volatile int qx__bus_taken;   /* the first faulting thread reports; the others wait for its _exit */

static void qx__on_sigbus(int sig, siginfo_t* si, void* ctx) {
    int k;
    const char* w = qx__bus_what;
    const char* at = si ? (const char*)si->si_addr : NULL;
    const char* file = NULL;
    (void)sig;
    (void)ctx;
#if defined(__GNUC__) || defined(__clang__)
    if (__sync_lock_test_and_set(&qx__bus_taken, 1))
#else
    if (qx__bus_taken++)
#endif
        for (;;) pause();
    for (k = 0; k < QX__LIVE_MAX; ++k)
        if (qx__live_files[k]) (void)unlink(qx__live_files[k]);
    for (k = 0; k < 8; ++k)
        if (qx__live_dirs[k]) (void)rmdir(qx__live_dirs[k]);
    for (k = 0; k < QX__MAPS_MAX && at; ++k) {
        const char* a = qx__map_addr[k];
        if (a && at >= a && (size_t)(at - a) < qx__map_len[k]) { file = qx__map_path[k]; break; }
    }
    qx__put(w ? w : "quarot");
    qx__put(": ");
    qx__put(file ? file : "an input");
    qx__put(": the input changed (truncated?) while it was being read; nothing was written\n");
    _exit(2);
}

void qx_sigbus_cleanup(const char* what) {
    struct sigaction sa;
    qx__bus_what = what;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = qx__on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGBUS, &sa, NULL);
}

void qx_fault_truncate_inputs(const char* stage) {
    static int done;
    const char* env = getenv("QX_FAULT_TRUNCATE_INPUT");
    int k;
    if (done || !env || !stage || strcmp(env, stage) != 0) return;
    done = 1;
    for (k = 0; k < QX__MAPS_MAX; ++k)
        if (qx__map_addr[k] && qx__map_path[k] && qx__map_len[k] > 4096) (void)!truncate(qx__map_path[k], 4096);
}

#define QX__NAME_MAX 255

quarot_result qx_check_out_name(const char* path, qx_err* e) {
    const char* slash = path ? strrchr(path, '/') : NULL;
    const char* base = slash ? slash + 1 : path;
    size_t n = base ? strlen(base) : 0;
    if (n <= QX__NAME_MAX) return QUAROT_OK;
    qx_err_set(e, "%.120s...: an output file name of %zu bytes, longer than the %d bytes a file name may have", base, n, QX__NAME_MAX);
    return QUAROT_ERR_IO;
}

char* qx_tmp_name(const char* path, const char* kind) {
    const char* slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0, base_len = strlen(path) - dir_len;
    size_t kl = strlen(kind), extra = 1 + 1 + kl + 7;   /* "." base "." kind "-XXXXXX" */
    char* t;
    if (base_len + extra > QX__NAME_MAX) base_len = QX__NAME_MAX - extra;   /* long names: cut the base */
    t = (char*)malloc(dir_len + base_len + extra + 1);
    if (!t) return NULL;
    memcpy(t, path, dir_len);
    t[dir_len] = '.';
    memcpy(t + dir_len + 1, path + dir_len, base_len);
    sprintf(t + dir_len + 1 + base_len, ".%s-XXXXXX", kind);
    return t;
}

/* Removes a file, or a directory of files (our temporaries hold nothing deeper). */
static void qx__remove_tree(const char* path) {
    struct stat st;
    DIR* d;
    struct dirent* de;
    if (lstat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) { (void)unlink(path); return; }
    d = opendir(path);
    while (d && (de = readdir(d)) != NULL) {
        char* p;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        p = qx_path_join(path, de->d_name);
        if (p) (void)unlink(p);
        free(p);
    }
    if (d) closedir(d);
    (void)rmdir(path);
}

int qx_remove_stale(const char* path) {
    char* pat = qx_tmp_name(path, "tmp");
    char* slash;
    const char* prefix;
    size_t plen;
    DIR* d;
    struct dirent* de;
    int n = 0;
    if (!pat) return 0;
    slash = strrchr(pat, '/');
    prefix = slash ? slash + 1 : pat;
    plen = strlen(prefix) - 6;                 /* without "XXXXXX" */
    if (slash) *slash = '\0';
    d = opendir(slash ? (pat[0] ? pat : "/") : ".");
    while (d && (de = readdir(d)) != NULL) {
        char* full;
        int fd;
        if (strlen(de->d_name) != plen + 6 || strncmp(de->d_name, prefix, plen) != 0) continue;
        full = slash ? qx_path_join(pat[0] ? pat : "", de->d_name) : qx_path_join(".", de->d_name);
        if (!full) continue;
        fd = open(full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {   /* no run holds it: left by a killed one */
            qx__remove_tree(full);
            ++n;
        }
        if (fd >= 0) close(fd);
        free(full);
    }
    if (d) closedir(d);
    free(pat);
    return n;
}

void qx_fault_point(const char* what) {
    static long count;
    const char* env = getenv("QX_FAULT_PUBLISH");
    (void)what;
    if (!env || !env[0]) return;
    if (++count == strtol(env, NULL, 10)) _exit(86);
}

quarot_result qx_check_replaceable(const char* path, int want_dir, qx_err* e) {
    struct stat st;
    if (lstat(path, &st) != 0) return QUAROT_OK;
    if (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) return QUAROT_OK;
    qx_err_set(e, "%s: exists and is %s; only %s is replaced", path,
               S_ISDIR(st.st_mode) ? "a directory" : S_ISLNK(st.st_mode) ? "a symbolic link" :
               S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" :
               S_ISSOCK(st.st_mode) ? "a socket" : "not a regular file",
               want_dir ? "a directory" : "a regular file");
    return QUAROT_ERR_IO;
}

/* ---- directory outputs ---- */

quarot_result qx_dir_out_begin(qx_dir_out* d, const char* path, int force, qx_err* e) {
    mode_t mask;
    if (!d || !path || !path[0]) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(d, 0, sizeof *d);
    d->lock_fd = -1;
    d->force = force;
    if (qx_check_out_name(path, e) != QUAROT_OK) return QUAROT_ERR_IO;
    d->stale_removed = qx_remove_stale(path);
    d->path = (char*)malloc(strlen(path) + 1);
    d->tmp = qx_tmp_name(path, "tmp");
    if (!d->path || !d->tmp) { qx_dir_out_abort(d); qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    strcpy(d->path, path);
    if (!mkdtemp(d->tmp)) {
        qx_err_set(e, "%s: cannot create a temporary directory beside it: %s", path, strerror(errno));
        free(d->tmp);
        d->tmp = NULL;
        qx_dir_out_abort(d);
        return QUAROT_ERR_IO;
    }
    mask = umask(0);
    umask(mask);
    (void)chmod(d->tmp, (mode_t)(0777 & ~mask));
    d->lock_fd = open(d->tmp, O_RDONLY | O_CLOEXEC);
    if (d->lock_fd >= 0) (void)flock(d->lock_fd, LOCK_EX);
    qx_live_add(d->tmp, 1);
    return QUAROT_OK;
}

/* A file name the model output supersedes in an existing directory. */
static int qx__model_file(const char* n) {
    size_t i;
    if (strcmp(n, "model.safetensors") == 0 || strcmp(n, "model.safetensors.index.json") == 0 ||
        strcmp(n, "quarot_online.txt") == 0)
        return 1;
    if (strlen(n) != 32 || strncmp(n, "model-", 6) != 0 || strncmp(n + 11, "-of-", 4) != 0 || strcmp(n + 20, ".safetensors") != 0)
        return 0;
    for (i = 0; i < 5; ++i)
        if (n[6 + i] < '0' || n[6 + i] > '9' || n[15 + i] < '0' || n[15 + i] > '9') return 0;
    return 1;
}

/* Carries the files of the existing output that the new one does not supersede into d->tmp. */
static quarot_result qx__carry_over(qx_dir_out* d, const char* const* ours, qx_err* e) {
    DIR* dir = opendir(d->path);
    struct dirent* de;
    quarot_result r = QUAROT_OK;
    if (!dir) { qx_err_set(e, "%s: cannot read the directory: %s", d->path, strerror(errno)); return QUAROT_ERR_IO; }
    while (r == QUAROT_OK && (de = readdir(dir)) != NULL) {
        char *src, *dst;
        struct stat st;
        int k, skip = 0;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        for (k = 0; ours && ours[k]; ++k) skip |= strcmp(ours[k], de->d_name) == 0;
        if (skip || qx__model_file(de->d_name)) {
            if (!d->force) {
                qx_err_set(e, "%s: holds a model file (%s) now; not replaced without force", d->path, de->d_name);
                r = QUAROT_ERR_IO;
            }
            continue;
        }
        src = qx_path_join(d->path, de->d_name);
        dst = qx_path_join(d->tmp, de->d_name);
        if (!src || !dst) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "%s: out of memory", d->path); }
        else if (lstat(dst, &st) == 0) { /* the new output has its own */ }
        else if (lstat(src, &st) != 0) { /* gone meanwhile */ }
        else if (S_ISDIR(st.st_mode)) {
            qx_err_set(e, "%s: holds a subdirectory \"%s\"; a directory output is replaced as a whole, so move it "
                          "away first (or choose another output directory)", d->path, de->d_name);
            r = QUAROT_ERR_IO;
        } else if (link(src, dst) != 0) {
            qx_err_set(e, "%s: cannot keep \"%s\" in the new output (hard link): %s", d->path, de->d_name, strerror(errno));
            r = QUAROT_ERR_IO;
        }
        free(src);
        free(dst);
    }
    closedir(dir);
    return r;
}

quarot_result qx_dir_out_publish(qx_dir_out* d, const char* const* ours, qx_err* e) {
    struct stat st;
    quarot_result r;
    if (!d || !d->tmp) return QUAROT_ERR_STATE;
    if (lstat(d->path, &st) != 0) {
        r = qx__publish_noreplace(d->tmp, d->path, 1, e);
        if (r == QUAROT_OK) goto published;
        if (lstat(d->path, &st) != 0 || !S_ISDIR(st.st_mode)) return r;
        /* a directory appeared meanwhile: handled as an existing one */
    }
    if ((r = qx_check_replaceable(d->path, 1, e)) != QUAROT_OK) return r;
    /* an existing directory: its other files come along, then one exchange */
    if ((r = qx__carry_over(d, ours, e)) != QUAROT_OK) return r;
    qx_fault_point("exchange");
#ifdef SYS_renameat2
    if (syscall(SYS_renameat2, AT_FDCWD, d->tmp, AT_FDCWD, d->path, 2u /* RENAME_EXCHANGE */) == 0) {
        qx__remove_tree(d->tmp);   /* the previous output, now under the temporary name */
        goto published;
    }
#endif
    {   /* no exchange: old aside, new in, old removed (a kill in between leaves the old beside) */
        char* old = qx_tmp_name(d->path, "old");
        if (!old || !mkdtemp(old)) { free(old); qx_err_set(e, "%s: cannot make room for the exchange: %s", d->path, strerror(errno)); return QUAROT_ERR_IO; }
        if (rename(d->path, old) != 0) {
            qx_err_set(e, "%s: cannot move the previous output aside: %s", d->path, strerror(errno));
            (void)rmdir(old);
            free(old);
            return QUAROT_ERR_IO;
        }
        qx_fault_point("publish");
        if (rename(d->tmp, d->path) != 0) {
            qx_err_set(e, "%s: cannot rename the new output into place: %s", d->path, strerror(errno));
            (void)rename(old, d->path);
            free(old);
            return QUAROT_ERR_IO;
        }
        qx__remove_tree(old);
        free(old);
    }
published:
    qx__published(&d->tmp, &d->lock_fd, d->path);
    return QUAROT_OK;
}

void qx_dir_out_abort(qx_dir_out* d) {
    if (!d) return;
    if (d->tmp) qx__remove_tree(d->tmp);
    qx_live_remove(d->tmp);
    if (d->lock_fd >= 0) close(d->lock_fd);
    d->lock_fd = -1;
    free(d->tmp);
    free(d->path);
    d->tmp = d->path = NULL;
}

/* ---- weight digest ---- */

typedef qx_digest_state qx__dg;

static uint64_t qx__rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static void qx__dg_block(qx__dg* g, const unsigned char* p) {
    int i;
    for (i = 0; i < 4; ++i)
        g->h[i] = qx__rotl(g->h[i] ^ (qx_str_le64(p + 8 * i) * 0x9E3779B97F4A7C15ull), 29) * 0xBF58476D1CE4E5B9ull;
}

static void qx__dg_put(qx__dg* g, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    g->total += n;
    if (g->used) {
        size_t take = 32 - g->used < n ? 32 - g->used : n;
        memcpy(g->buf + g->used, p, take);
        g->used += take; p += take; n -= take;
        if (g->used < 32) return;
        qx__dg_block(g, g->buf);
        g->used = 0;
    }
    for (; n >= 32; p += 32, n -= 32) qx__dg_block(g, p);
    memcpy(g->buf, p, n);
    g->used = n;
}

static uint64_t qx__dg_end(qx__dg* g) {
    uint64_t x;
    int i;
    memset(g->buf + g->used, 0, 32 - g->used);
    qx__dg_block(g, g->buf);
    x = g->total;
    for (i = 0; i < 4; ++i) {
        x ^= g->h[i] + 0x94D049BB133111EBull + (x << 6) + (x >> 2);
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        x ^= x >> 31;
    }
    return x;
}

void qx_digest_begin(qx_digest_state* g) {
    memset(g, 0, sizeof *g);
    g->h[0] = 0x243F6A8885A308D3ull; g->h[1] = 0x13198A2E03707344ull; g->h[2] = 0xA4093822299F31D0ull; g->h[3] = 0x082EFA98EC4E6C89ull;
}

void qx_digest_put(qx_digest_state* g, const void* data, size_t n) { qx__dg_put(g, data, n); }

void qx_digest_end(qx_digest_state* g, char out[QX_DIGEST_LEN]) {
    snprintf(out, QX_DIGEST_LEN, "qxh64:%016llx", (unsigned long long)qx__dg_end(g));
}

/* uncached: read with O_DIRECT where the file system takes it (qx_direct_open_read). */
static quarot_result qx__digest(const char* const* paths, int n, int uncached, char out[QX_DIGEST_LEN], qx_err* e) {
    qx__dg g;
    int k, direct = 0;
    unsigned char* buf = NULL;
    const size_t cap = (size_t)1 << 20;   /* a multiple of 4096: O_DIRECT reads */
    if (!paths || n < 1 || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    qx_digest_begin(&g);
    if (posix_memalign((void**)&buf, 4096, cap) != 0) buf = NULL;
    if (!buf) { qx_err_set(e, "digest: out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (k = 0; k < n; ++k) {
        const char* base = strrchr(paths[k], '/');
        struct stat st;
        unsigned char sz[8];
        uint64_t left;
        int i, fd = uncached ? qx_direct_open_read(paths[k], &direct) : open(paths[k], O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        (void)base;   /* names are not hashed: a renamed model keeps its digest */
        if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            qx_err_set(e, "%s: cannot read for the weight digest: %s", paths[k], fd < 0 ? strerror(errno) : "not a regular file");
            if (fd >= 0) close(fd);
            free(buf);
            return QUAROT_ERR_IO;
        }
        for (i = 0; i < 8; ++i) sz[i] = (unsigned char)((uint64_t)st.st_size >> (8 * i));
        qx__dg_put(&g, sz, 8);
        left = (uint64_t)st.st_size;
        while (left > 0) {
            /* O_DIRECT: whole buffers (the last read comes back short); else what is left */
            ssize_t got = direct ? qx_direct_read(fd, buf, cap, &direct) : read(fd, buf, left < cap ? (size_t)left : cap);
            if (got < 0 && errno == EINTR) continue;
            if (got > 0 && (uint64_t)got > left) got = (ssize_t)left;   /* the file grew: hash what stat said */
            if (got <= 0) {
                qx_err_set(e, "%s: read failed for the weight digest", paths[k]);
                close(fd);
                free(buf);
                return QUAROT_ERR_IO;
            }
            qx__dg_put(&g, buf, (size_t)got);
            left -= (uint64_t)got;
        }
        close(fd);
    }
    free(buf);
    qx_digest_end(&g, out);
    return QUAROT_OK;
}

quarot_result qx_digest_files(const char* const* paths, int n, char out[QX_DIGEST_LEN], qx_err* e) {
    return qx__digest(paths, n, 0, out, e);
}

quarot_result qx_digest_files_uncached(const char* const* paths, int n, char out[QX_DIGEST_LEN], qx_err* e) {
    return qx__digest(paths, n, 1, out, e);
}

static int qx__cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

void qx_free_paths(char** paths, int n) {
    int k;
    for (k = 0; paths && k < n; ++k) free(paths[k]);
    free(paths);
}

quarot_result qx_weight_files(const char* model_path, char*** paths, int* n, qx_err* e) {
    DIR* d;
    struct dirent* de;
    char** v = NULL;
    int cnt = 0, cap = 0;
    if (!model_path || !paths || !n) return QUAROT_ERR_INVALID_ARGUMENT;
    *paths = NULL;
    *n = 0;
    if (!qx_is_dir(model_path)) {
        v = (char**)malloc(sizeof *v);
        if (!v || !(v[0] = (char*)malloc(strlen(model_path) + 1))) { free(v); qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
        strcpy(v[0], model_path);
        *paths = v;
        *n = 1;
        return QUAROT_OK;
    }
    d = opendir(model_path);
    if (!d) { qx_err_set(e, "%s: cannot read the directory: %s", model_path, strerror(errno)); return QUAROT_ERR_IO; }
    while ((de = readdir(d)) != NULL) {
        char* p;
        if (!qx__model_file(de->d_name) || strcmp(de->d_name, "model.safetensors.index.json") == 0 ||
            strcmp(de->d_name, "quarot_online.txt") == 0)
            continue;
        if (cnt == cap) {
            char** nv = (char**)realloc(v, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        p = qx_path_join(model_path, de->d_name);
        if (!p) break;
        v[cnt++] = p;
    }
    closedir(d);
    if (cnt == 0) { free(v); qx_err_set(e, "%s: no model.safetensors or model-*-of-*.safetensors files", model_path); return QUAROT_ERR_NOT_FOUND; }
    qsort(v, (size_t)cnt, sizeof *v, qx__cmp_str);
    *paths = v;
    *n = cnt;
    return QUAROT_OK;
}
