/* qx_file.h - small POSIX file helpers shared by the checkpoint readers and writers.

   Reading: a whole file mapped (mmap, copy-on-write so views may be modified in memory without
   touching the file) or read into a heap buffer with a size cap.

   Writing without partial outputs: qx_out_begin creates a hidden temporary file beside the final
   path (".name.tmp-XXXXXX"); data go in with positional writes (any order); qx_out_sync flushes it
   to disk and qx_out_publish renames it into place; qx_out_abort removes it. An existing output is
   refused unless `force` is set. Writers with several output files sync all of them first, then
   publish them one after the other.

   Every function that can fail returns quarot_result and writes a one-line message to the qx_err
   naming the file and the reason. */
#ifndef QX_FILE_H
#define QX_FILE_H

#include "qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A mapped file. addr is NULL when len is 0 (an empty file maps to nothing). */
typedef struct qx_map {
    void* addr;
    size_t len;
} qx_map;

/* Maps `path` privately (reads see the file, writes stay in memory). */
quarot_result qx_map_file(const char* path, qx_map* m, qx_err* e);
void qx_unmap(qx_map* m);
/* Suitable for qx_store_on_free: unmaps and frees a heap-allocated qx_map. */
void qx_unmap_and_free(void* map);

/* Reads a whole file into a new NUL-terminated heap buffer (free with free()). Files larger than
   max_bytes are refused. */
quarot_result qx_read_file(const char* path, size_t max_bytes, char** out, size_t* len, qx_err* e);

/* 1 if path exists (any kind), 1 if it is a directory. */
int qx_path_exists(const char* path);
int qx_is_dir(const char* path);
/* dir + "/" + name in a new heap string (NULL when out of memory). */
char* qx_path_join(const char* dir, const char* name);
/* 1 if name is a plain file name: not empty, no '/', no '\\', not "." or "..", no control bytes. */
int qx_is_plain_filename(const char* name);

/* One output file written through a temporary. */
typedef struct qx_out {
    char* path;        /* final path */
    char* tmp;         /* temporary path, NULL once published or removed */
    int fd;            /* -1 when closed */
} qx_out;

quarot_result qx_out_begin(qx_out* o, const char* path, int force, qx_err* e);
/* Writes all n bytes at byte offset off (retries short writes). */
quarot_result qx_out_pwrite(qx_out* o, const void* data, size_t n, uint64_t off, qx_err* e);
/* Writes tensor t (any strides) at byte offset off as contiguous row-major data of dtype dt,
   converting row by row when t's dtype differs (round to nearest even). head_dim > 0 permutes
   rows between RoPE layouts in heads of head_dim rows (qx_rope_src_row; a tensor with a single
   row: its elements). `what` names the tensor in messages. */
quarot_result qx_out_tensor(qx_out* o, uint64_t off, quarot_dtype dt, const quarot_tensor* t,
                            int64_t head_dim, int to_interleaved, const char* what, qx_err* e);
/* Sets the final length (zero-filled up to it), flushes data to disk and closes the descriptor. */
quarot_result qx_out_sync(qx_out* o, uint64_t final_size, qx_err* e);
/* Renames the synced temporary onto the final path and syncs the directory. */
quarot_result qx_out_publish(qx_out* o, qx_err* e);
/* Closes and removes the temporary (if any) and frees the paths; safe after publish and twice. */
void qx_out_abort(qx_out* o);

#ifdef __cplusplus
}
#endif
#endif
