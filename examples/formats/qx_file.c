/* qx_file.c - see qx_file.h. Plain POSIX: open/fstat/mmap for reading, mkstemp + pwrite + fsync +
   rename for writing, so an output either appears whole under its name or not at all. */
#include "qx_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

quarot_result qx_map_file(const char* path, qx_map* m, qx_err* e) {
    struct stat st;
    int fd;
    void* addr;
    if (!path || !m) return QUAROT_ERR_INVALID_ARGUMENT;
    m->addr = NULL;
    m->len = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { qx_err_set(e, "%s: cannot open: %s", path, strerror(errno)); return QUAROT_ERR_IO; }
    if (fstat(fd, &st) != 0) {
        qx_err_set(e, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return QUAROT_ERR_IO;
    }
    if (!S_ISREG(st.st_mode)) { qx_err_set(e, "%s: not a regular file", path); close(fd); return QUAROT_ERR_IO; }
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
    return QUAROT_OK;
}

void qx_unmap(qx_map* m) {
    if (!m) return;
    if (m->addr) munmap(m->addr, m->len);
    m->addr = NULL;
    m->len = 0;
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
    if (!path || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (len) *len = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { qx_err_set(e, "%s: cannot open: %s", path, strerror(errno)); return QUAROT_ERR_IO; }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        qx_err_set(e, "%s: not a readable regular file", path);
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
    const char* slash;
    size_t dir_len, base_len;
    if (!o || !path || !path[0]) return QUAROT_ERR_INVALID_ARGUMENT;
    o->path = NULL;
    o->tmp = NULL;
    o->fd = -1;
    if (qx_is_dir(path)) { qx_err_set(e, "%s: is a directory", path); return QUAROT_ERR_IO; }
    if (!force && qx_path_exists(path)) {
        qx_err_set(e, "%s: exists already (not overwritten without force)", path);
        return QUAROT_ERR_IO;
    }
    slash = strrchr(path, '/');
    dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    base_len = strlen(path) - dir_len;
    o->path = (char*)malloc(strlen(path) + 1);
    o->tmp = (char*)malloc(dir_len + base_len + 16);
    if (!o->path || !o->tmp) {
        free(o->path); free(o->tmp);
        o->path = o->tmp = NULL;
        qx_err_set(e, "%s: out of memory", path);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    strcpy(o->path, path);
    /* ".<base>.tmp-XXXXXX" in the same directory, so rename() is atomic (same file system). */
    memcpy(o->tmp, path, dir_len);
    o->tmp[dir_len] = '.';
    memcpy(o->tmp + dir_len + 1, path + dir_len, base_len);
    strcpy(o->tmp + dir_len + 1 + base_len, ".tmp-XXXXXX");
    o->fd = mkstemp(o->tmp);
    if (o->fd < 0) {
        qx_err_set(e, "%s: cannot create a temporary file: %s", path, strerror(errno));
        free(o->path); free(o->tmp);
        o->path = o->tmp = NULL;
        return QUAROT_ERR_IO;
    }
    {   /* mkstemp makes 0600; the published file gets what open(0666) would give (umask applied) */
        mode_t mask = umask(0);
        umask(mask);
        (void)fchmod(o->fd, (mode_t)(0666 & ~mask));
    }
    return QUAROT_OK;
}

/* Positional writes in chunks of at most 1 GiB, retried on EINTR and short writes. */
quarot_result qx_out_pwrite(qx_out* o, const void* data, size_t n, uint64_t off, qx_err* e) {
    const char* p = (const char*)data;
    if (!o || o->fd < 0 || (n && !data)) return QUAROT_ERR_STATE;
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

quarot_result qx_out_tensor(qx_out* o, uint64_t off, quarot_dtype dt, const quarot_tensor* t,
                            int64_t head_dim, int to_interleaved, const char* what, qx_err* e) {
    size_t es = quarot_dtype_size(dt), row_bytes, cap, used = 0;
    int64_t rows, r, ne0;
    int same, elem_perm;
    char* chunk = NULL;
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
    if (same && head_dim <= 0 && quarot_tensor_is_contiguous(t))     /* fast path: one write */
        return qx_out_pwrite(o, t->data, quarot_tensor_nbytes(t), off, e);
    /* rows gathered into chunks of about 4 MiB (at least one row) */
    cap = row_bytes > ((size_t)4 << 20) ? row_bytes : ((size_t)4 << 20) / row_bytes * row_bytes;
    chunk = (char*)malloc(cap);
    if (!same || elem_perm) {
        drow = (double*)malloc((size_t)ne0 * sizeof *drow);
        dperm = elem_perm ? (double*)malloc((size_t)ne0 * sizeof *dperm) : NULL;
    }
    if (!chunk || ((!same || elem_perm) && !drow) || (elem_perm && !dperm)) {
        res = QUAROT_ERR_OUT_OF_MEMORY;
        qx_err_set(e, "%s: tensor \"%s\": out of memory", o->path, what);
        goto done;
    }
    for (r = 0; r < rows && res == QUAROT_OK; ++r) {
        int64_t src = (head_dim > 0 && !elem_perm) ? qx_rope_src_row(r, head_dim, to_interleaved) : r;
        char* dst = chunk + used;
        if (same && !elem_perm) {
            memcpy(dst, qx__row_ptr(t, src), row_bytes);
        } else {
            quarot_tensor_init(&rv, dst, dt, 1, &ne0);
            quarot_tensor_get_row_f64(t, src, drow);
            if (elem_perm) {
                int64_t k;
                for (k = 0; k < ne0; ++k) dperm[k] = drow[qx_rope_src_row(k, head_dim, to_interleaved)];
                quarot_tensor_set_row_f64(&rv, 0, dperm);
            } else {
                quarot_tensor_set_row_f64(&rv, 0, drow);
            }
        }
        used += row_bytes;
        if (used + row_bytes > cap || r == rows - 1) {
            res = qx_out_pwrite(o, chunk, used, off, e);
            off += used;
            used = 0;
        }
    }
done:
    free(chunk);
    free(drow);
    free(dperm);
    return res;
}

/* ftruncate to the planned size (padding after the last tensor reads as zeros), fsync, close. */
quarot_result qx_out_sync(qx_out* o, uint64_t final_size, qx_err* e) {
    if (!o || o->fd < 0) return QUAROT_ERR_STATE;
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

quarot_result qx_out_publish(qx_out* o, qx_err* e) {
    char* dir;
    char* slash;
    int dfd;
    if (!o || !o->tmp || o->fd >= 0) return QUAROT_ERR_STATE;
    if (rename(o->tmp, o->path) != 0) {
        qx_err_set(e, "%s: cannot rename the temporary into place: %s", o->path, strerror(errno));
        return QUAROT_ERR_IO;
    }
    free(o->tmp);
    o->tmp = NULL;
    /* Make the rename itself durable. Failure here leaves a complete file; it is not reported. */
    dir = (char*)malloc(strlen(o->path) + 2);
    if (!dir) return QUAROT_OK;
    strcpy(dir, o->path);
    slash = strrchr(dir, '/');
    if (slash) slash[slash == dir ? 1 : 0] = '\0';
    else strcpy(dir, ".");
    dfd = open(dir, O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) { (void)fsync(dfd); close(dfd); }
    free(dir);
    return QUAROT_OK;
}

void qx_out_abort(qx_out* o) {
    if (!o) return;
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    o->tmp = NULL;
    o->path = NULL;
}
