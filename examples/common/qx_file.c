/* qx_file.c - see qx_file.h. */
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
    return QUAROT_OK;
}

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
