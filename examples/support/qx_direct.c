/* qx_direct.c - see qx_direct.h.

   A handful of block slots, each free, filling (the caller copies into it), queued (full, waiting
   for the writer thread) or writing. The caller fills; the writer thread takes queued blocks in
   queue order and pwrites them whole. Slot states change under one mutex; a slot's buffer belongs
   to the caller while filling and to the writer while writing, so the copies themselves run
   unlocked. on_disk[b] remembers that block b went to the file once, so a later write into it
   reads it back first (never the case for the writers' near-sequential order, but any order stays
   correct). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* O_DIRECT */
#endif
#include "support/qx_direct.h"
#include "support/qx_blockcache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define QX__DSLOTS 6   /* 48 MiB of block buffers: two being written, the rest filling */

enum { QX__FREE, QX__FILLING, QX__QUEUED, QX__WRITING };

typedef struct qx__dslot {
    char* buf;
    int64_t block;               /* file offset / QX_DIRECT_BLOCK; -1 when free */
    int state;
    size_t filled;               /* bytes written into it since it was taken */
    size_t init;                 /* bytes [0, init) hold data (written, read back or zeroed); the
                                    rest is zeroed as late as possible: when a write starts past
                                    init (the gap), when the slot is queued (the tail) */
    uint64_t seq;                /* queue order (queued) or last use (filling) */
} qx__dslot;

struct qx_direct {
    int fd;
    char* path;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    qx__dslot slot[QX__DSLOTS];
    unsigned char* on_disk;      /* [n_on_disk] */
    int64_t n_on_disk;
    uint64_t seq;
    int err;                     /* errno of the first failed write / read, 0 none */
    qx_direct_mode mode;
    void* map;                   /* the block buffers' mapping */
    size_t map_bytes;
    void* scratch_map;
    size_t scratch_map_bytes;
    void* scratch;
    size_t scratch_bytes;
    qx__dslot* span;             /* the slot qx_direct_span handed out, until qx_direct_commit */
};

int qx_direct_open_read(const char* path, int* direct) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd;
}

ssize_t qx_direct_read(int fd, void* buf, size_t cap, int* direct) {
    ssize_t got;
    for (;;) {
        got = read(fd, buf, cap);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && errno == EINVAL && *direct) {   /* refused: the same read, buffered */
            int fl = fcntl(fd, F_GETFL);
            if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0) return -1;
            *direct = 0;
            continue;
        }
        return got;
    }
}

const char* qx_direct_mode_text(qx_direct_mode m) {
    switch (m) {
        case QX_DIRECT_ON: return "O_DIRECT";
        case QX_DIRECT_REFUSED: return "buffered (the file system refused O_DIRECT)";
        case QX_DIRECT_DISABLED: return "buffered (O_DIRECT switched off by QX_NO_DIRECT)";
        default: return "buffered";
    }
}

/* An anonymous mapping of `bytes` whose returned address is 2 MiB aligned, advised onto 2 MiB pages;
   *map / *map_bytes are what munmap needs. */
static void* qx__huge_alloc(size_t bytes, void** map, size_t* map_bytes) {
    const size_t huge = (size_t)2 << 20;
    size_t n = bytes + huge;
    char* p = (char*)mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char* a;
    if (p == MAP_FAILED) return NULL;
    a = (char*)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
    qx_thp_advise(a, bytes);
    *map = p;
    *map_bytes = n;
    return a;
}

/* Writes all n bytes at off; an O_DIRECT write refused with EINVAL switches the descriptor to
   buffered writes (mode REFUSED) and retries. Returns 0 or an errno. */
static int qx__write_all(qx_direct* d, const char* p, size_t n, uint64_t off) {
    while (n > 0) {
        ssize_t w = pwrite(d->fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EINVAL && d->mode == QX_DIRECT_ON) {
            int fl = fcntl(d->fd, F_GETFL);
            if (fl < 0 || fcntl(d->fd, F_SETFL, fl & ~O_DIRECT) != 0) return EINVAL;
            d->mode = QX_DIRECT_REFUSED;   /* read by the caller only after the writer went idle */
            continue;
        }
        if (w <= 0) return w < 0 ? errno : EIO;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static void* qx__writer(void* arg) {
    qx_direct* d = (qx_direct*)arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        qx__dslot* s = NULL;
        int i, err;
        for (i = 0; i < QX__DSLOTS; ++i)
            if (d->slot[i].state == QX__QUEUED && (!s || d->slot[i].seq < s->seq)) s = &d->slot[i];
        if (!s) {
            if (d->stop) break;
            pthread_cond_wait(&d->cv, &d->mu);
            continue;
        }
        s->state = QX__WRITING;
        pthread_mutex_unlock(&d->mu);
        err = qx__write_all(d, s->buf, QX_DIRECT_BLOCK, (uint64_t)s->block * QX_DIRECT_BLOCK);
        pthread_mutex_lock(&d->mu);
        if (err && !d->err) d->err = err;
        s->state = QX__FREE;
        s->block = -1;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

qx_direct* qx_direct_begin(int fd, const char* path) {
    qx_direct* d = (qx_direct*)calloc(1, sizeof *d);
    const char* off = getenv("QX_NO_DIRECT");
    char* base;
    int i;
    if (!d) return NULL;
    d->fd = fd;
    d->path = (char*)malloc(strlen(path) + 1);
    base = (char*)qx__huge_alloc(QX__DSLOTS * QX_DIRECT_BLOCK, &d->map, &d->map_bytes);
    if (!d->path || !base) { free(d->path); if (base) munmap(d->map, d->map_bytes); free(d); return NULL; }
    strcpy(d->path, path);
    for (i = 0; i < QX__DSLOTS; ++i) {
        d->slot[i].buf = base + (size_t)i * QX_DIRECT_BLOCK;
        d->slot[i].block = -1;
    }
    if (off && off[0] && strcmp(off, "0") != 0) {
        d->mode = QX_DIRECT_DISABLED;
    } else {
        int fl = fcntl(fd, F_GETFL);
        d->mode = fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0 ? QX_DIRECT_ON : QX_DIRECT_REFUSED;
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, qx__writer, d) != 0) {
        if (d->mode == QX_DIRECT_ON) {
            int fl = fcntl(fd, F_GETFL);
            if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_DIRECT);
        }
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
        munmap(d->map, d->map_bytes);
        free(d->path);
        free(d);
        return NULL;
    }
    return d;
}

/* Marks block b as sent to the file (grows the map). Called with the lock held; 0 when out of memory. */
static int qx__mark(qx_direct* d, int64_t b) {
    if (b >= d->n_on_disk) {
        int64_t n = d->n_on_disk ? d->n_on_disk : 256;
        unsigned char* m;
        while (n <= b) n *= 2;
        m = (unsigned char*)realloc(d->on_disk, (size_t)n);
        if (!m) return 0;
        memset(m + d->n_on_disk, 0, (size_t)(n - d->n_on_disk));
        d->on_disk = m;
        d->n_on_disk = n;
    }
    d->on_disk[b] = 1;
    return 1;
}

/* Queues slot s for the writer (lock held); the bytes never written in it go out as zeros. */
static void qx__enqueue(qx_direct* d, qx__dslot* s) {
    if (s->init < QX_DIRECT_BLOCK) memset(s->buf + s->init, 0, QX_DIRECT_BLOCK - s->init);
    s->init = QX_DIRECT_BLOCK;
    if (!qx__mark(d, s->block) && !d->err) d->err = ENOMEM;
    s->state = QX__QUEUED;
    s->seq = ++d->seq;
    pthread_cond_broadcast(&d->cv);
}

/* The filling slot of block b for a write starting at byte `at` of it, taking a free one when b has
   none (reading the block back when it went to the file before and the write does not cover it;
   else its bytes are zeroed only where no write lands, see init: here the gap before `at`);
   `whole`: the caller's write covers the block. The writes to one qx_direct come from one thread at
   a time (as `filled` and `init` assume). */
static qx__dslot* qx__slot_for(qx_direct* d, int64_t b, size_t at, int whole) {
    qx__dslot* s;
    int i, busy, reread;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        qx__dslot* lru = NULL;
        s = NULL;
        busy = 0;
        for (i = 0; i < QX__DSLOTS; ++i) {
            qx__dslot* c = &d->slot[i];
            if (c->block == b && c->state == QX__FILLING) { c->seq = ++d->seq; pthread_mutex_unlock(&d->mu); s = c; goto gap; }
            if (c->block == b) busy = 1;   /* queued or being written: wait, then read it back */
            if (c->state == QX__FREE && !s) s = c;
            if (c->state == QX__FILLING && (!lru || c->seq < lru->seq)) lru = c;
        }
        if (d->err) { pthread_mutex_unlock(&d->mu); return NULL; }
        if (!busy && s) break;
        if (!busy) {   /* no free slot: the writer frees one, else the least recently used partial block goes out */
            int pending = 0;
            for (i = 0; i < QX__DSLOTS; ++i) pending |= d->slot[i].state == QX__QUEUED || d->slot[i].state == QX__WRITING;
            if (!pending && lru) qx__enqueue(d, lru);
        }
        pthread_cond_wait(&d->cv, &d->mu);
    }
    s->state = QX__FILLING;
    s->block = b;
    s->filled = 0;
    s->init = 0;
    s->seq = ++d->seq;
    reread = b < d->n_on_disk && d->on_disk[b];
    pthread_mutex_unlock(&d->mu);
    if (reread && !whole) {
        size_t got = 0;
        while (got < QX_DIRECT_BLOCK) {
            ssize_t r = pread(d->fd, s->buf + got, QX_DIRECT_BLOCK - got, (off_t)((uint64_t)b * QX_DIRECT_BLOCK + got));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                pthread_mutex_lock(&d->mu);
                if (!d->err) d->err = errno;
                s->state = QX__FREE;
                s->block = -1;
                pthread_mutex_unlock(&d->mu);
                return NULL;
            }
            if (r == 0) break;   /* past the end: zeros */
            got += (size_t)r;
        }
        if (got < QX_DIRECT_BLOCK) memset(s->buf + got, 0, QX_DIRECT_BLOCK - got);
        s->init = QX_DIRECT_BLOCK;
    }
gap:
    if (at > s->init) memset(s->buf + s->init, 0, at - s->init);
    return s;
}

static quarot_result qx__err(qx_direct* d, qx_err* e) {
    qx_err_set(e, "%s: write failed: %s", d->path, strerror(d->err ? d->err : ENOMEM));
    return QUAROT_ERR_IO;
}

/* The bytes [at, at + n) of slot s were written: account them, queue the slot when it is full. */
static void qx__written(qx_direct* d, qx__dslot* s, size_t at, size_t n) {
    if (at + n > s->init) s->init = at + n;
    s->filled += n;
    if (s->filled >= QX_DIRECT_BLOCK) {
        pthread_mutex_lock(&d->mu);
        qx__enqueue(d, s);
        pthread_mutex_unlock(&d->mu);
    }
}

char* qx_direct_span(qx_direct* d, uint64_t off, size_t want, size_t* room, qx_err* e) {
    int64_t b;
    size_t at;
    qx__dslot* s;
    *room = 0;
    if (!d || off > (uint64_t)INT64_MAX - QX_DIRECT_BLOCK) { qx_err_set(e, "qx_direct_span: bad offset"); return NULL; }
    b = (int64_t)(off / QX_DIRECT_BLOCK);
    at = (size_t)(off % QX_DIRECT_BLOCK);
    s = qx__slot_for(d, b, at, at == 0 && want >= QX_DIRECT_BLOCK);
    if (!s) { (void)qx__err(d, e); return NULL; }
    d->span = s;
    *room = QX_DIRECT_BLOCK - at;
    return s->buf + at;
}

quarot_result qx_direct_commit(qx_direct* d, uint64_t off, size_t n, qx_err* e) {
    qx__dslot* s = d ? d->span : NULL;
    size_t at = (size_t)(off % QX_DIRECT_BLOCK);
    if (!s || s->state != QX__FILLING || s->block != (int64_t)(off / QX_DIRECT_BLOCK) || n > QX_DIRECT_BLOCK - at) {
        qx_err_set(e, "qx_direct_commit: no span at offset %llu", (unsigned long long)off);
        return QUAROT_ERR_STATE;
    }
    d->span = NULL;
    qx__written(d, s, at, n);
    return QUAROT_OK;
}

quarot_result qx_direct_write(qx_direct* d, const void* data, size_t n, uint64_t off, qx_err* e) {
    const char* p = (const char*)data;
    if (!d || (n && !data)) return QUAROT_ERR_STATE;
    if (off > (uint64_t)INT64_MAX - n) { qx_err_set(e, "%s: offset overflows", d->path); return QUAROT_ERR_OVERFLOW; }
    while (n > 0) {
        int64_t b = (int64_t)(off / QX_DIRECT_BLOCK);
        size_t at = (size_t)(off % QX_DIRECT_BLOCK), part = QX_DIRECT_BLOCK - at < n ? QX_DIRECT_BLOCK - at : n;
        qx__dslot* s = qx__slot_for(d, b, at, at == 0 && part == QX_DIRECT_BLOCK);
        if (!s) return qx__err(d, e);
        memcpy(s->buf + at, p, part);
        qx__written(d, s, at, part);
        p += part;
        n -= part;
        off += part;
    }
    return QUAROT_OK;
}

quarot_result qx_direct_flush(qx_direct* d, qx_err* e) {
    int i, idle = 0, err;
    if (!d) return QUAROT_ERR_STATE;
    pthread_mutex_lock(&d->mu);
    for (i = 0; i < QX__DSLOTS; ++i)
        if (d->slot[i].state == QX__FILLING) qx__enqueue(d, &d->slot[i]);
    while (!idle) {
        idle = 1;
        for (i = 0; i < QX__DSLOTS; ++i) idle &= d->slot[i].state == QX__FREE;
        if (!idle) pthread_cond_wait(&d->cv, &d->mu);
    }
    err = d->err;
    pthread_mutex_unlock(&d->mu);
    return err ? qx__err(d, e) : QUAROT_OK;
}

void qx_direct_free(qx_direct* d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    for (;;) {   /* queued blocks are dropped: an abort removes the file anyway */
        int i, writing = 0;
        for (i = 0; i < QX__DSLOTS; ++i) {
            if (d->slot[i].state == QX__QUEUED) { d->slot[i].state = QX__FREE; d->slot[i].block = -1; }
            writing |= d->slot[i].state == QX__WRITING;
        }
        if (!writing) break;
        pthread_cond_wait(&d->cv, &d->mu);
    }
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    munmap(d->map, d->map_bytes);
    if (d->scratch_map) munmap(d->scratch_map, d->scratch_map_bytes);
    free(d->on_disk);
    free(d->path);
    free(d);
}

qx_direct_mode qx_direct_get_mode(const qx_direct* d) { return d ? d->mode : QX_DIRECT_OFF; }

void* qx_direct_scratch(qx_direct* d, size_t bytes) {
    if (!d) return NULL;
    if (d->scratch_bytes < bytes) {
        if (d->scratch_map) munmap(d->scratch_map, d->scratch_map_bytes);
        d->scratch_map = NULL;
        d->scratch_bytes = 0;
        d->scratch = qx__huge_alloc(bytes, &d->scratch_map, &d->scratch_map_bytes);
        if (!d->scratch) return NULL;
        d->scratch_bytes = bytes;
    }
    return d->scratch;
}
