/* qx_direct.h - an output file written with O_DIRECT from reused, aligned block buffers.

   Why: a multi-gigabyte output written through the page cache costs, on the virtual machines this
   project is measured on, one fresh page per 4 KiB (fault, clear, copy: 0.1-0.4 GB/s) before the
   fsync even starts; the disk itself takes O_DIRECT writes at 0.8-1 GB/s. Here every byte goes into
   one of a few block buffers (QX_DIRECT_BLOCK bytes each, aligned, on 2 MiB pages, allocated once
   per output and reused), and a block is written with one O_DIRECT pwrite when it is full, by a
   writer thread, so the caller computes the next block meanwhile (double buffering).

   Layout and bytes do not change: writes may come in any order and at any offset (a block is full
   when as many bytes as it holds were written into it); blocks still partial at the end (a header
   whose tensor comes last, gaps, the file's tail) are written whole with zeros where nothing was
   written, and the caller's ftruncate (qx_out_sync) then sets the exact size. When more blocks are
   partial than the buffers hold, the oldest is written whole and read back (O_DIRECT pread) should
   a later write touch it again: correct for any write order, fast for the near-sequential one.

   Where the file system refuses O_DIRECT (EINVAL from fcntl or from the first write: tmpfs on older
   kernels, some FUSE / network file systems) the output falls back to plain buffered pwrites of the
   same blocks and says so through qx_direct_get_mode(). QX_NO_DIRECT=1 in the environment forces
   that fallback (tests compare both paths byte for byte); QX_DIRECT=1 makes qx_out_direct use the
   blocks for files under QX_DIRECT_MIN_BYTES too (which otherwise keep plain buffered pwrites). */
#ifndef QX_DIRECT_H
#define QX_DIRECT_H

#include "support/qx_store.h"

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QX_DIRECT_BLOCK ((size_t)8 << 20)   /* bytes per write (a multiple of 2 MiB) */
#define QX_DIRECT_MIN_BYTES ((uint64_t)256 << 20)   /* qx_out_direct: smaller files stay buffered */

typedef struct qx_direct qx_direct;

/* What an output ended up doing. */
typedef enum qx_direct_mode {
    QX_DIRECT_OFF = 0,       /* never asked for: plain buffered writes */
    QX_DIRECT_ON = 1,        /* O_DIRECT writes */
    QX_DIRECT_REFUSED = 2,   /* the file system refused O_DIRECT: buffered writes of the same blocks */
    QX_DIRECT_DISABLED = 3   /* QX_NO_DIRECT set: buffered writes of the same blocks */
} qx_direct_mode;

/* Starts block buffering on the open descriptor fd (`path` names it in messages). NULL when out of
   memory or the writer thread cannot start (the caller then writes as before). */
qx_direct* qx_direct_begin(int fd, const char* path);
/* Copies n bytes for file offset off into the blocks (writing the ones that fill up). */
quarot_result qx_direct_write(qx_direct* d, const void* data, size_t n, uint64_t off, qx_err* e);
/* Writing in place, without the copy: the block buffer's bytes for file offset off, *room of them
   (up to the end of off's block); the caller fills n <= *room of them, then calls qx_direct_commit
   with the same off and n, with no other write to d in between. `want` is how many bytes the caller
   means to write (when they cover the whole block, its old content is not read back). NULL (and e
   set) on a write error. */
char* qx_direct_span(qx_direct* d, uint64_t off, size_t want, size_t* room, qx_err* e);
quarot_result qx_direct_commit(qx_direct* d, uint64_t off, size_t n, qx_err* e);
/* Writes every block still held and waits for the writer: afterwards the file holds every byte
   written so far (its size rounded up to a block: the caller truncates). */
quarot_result qx_direct_flush(qx_direct* d, qx_err* e);
/* Stops the writer thread and frees the buffers (without flushing); NULL is fine. */
void qx_direct_free(qx_direct* d);
qx_direct_mode qx_direct_get_mode(const qx_direct* d);
/* A reusable scratch buffer of at least `bytes` (on 2 MiB pages; kept until qx_direct_free): the
   writers' conversion chunk, so converting a tensor touches no fresh memory. NULL: out of memory. */
void* qx_direct_scratch(qx_direct* d, size_t bytes);
/* Opens path read-only with O_DIRECT where the file system takes it, else plainly (*direct says
   which): a one-pass read of a large file that should not fill the page cache (reads then need a
   buffer, offset and length aligned to 4096; qx_direct_read). -1 with errno on failure. */
int qx_direct_open_read(const char* path, int* direct);
/* read() for such a descriptor: up to cap bytes (cap a multiple of 4096, buf 4096-aligned) at the
   file position; an O_DIRECT read the file system refuses (EINVAL) drops O_DIRECT from the
   descriptor and is retried plainly. Returns what read() returns. */
ssize_t qx_direct_read(int fd, void* buf, size_t cap, int* direct);
/* One-line description of a mode ("O_DIRECT", "buffered: the file system refused O_DIRECT", ...). */
const char* qx_direct_mode_text(qx_direct_mode m);

#ifdef __cplusplus
}
#endif
#endif
