/* qx_file.h - small POSIX file helpers shared by the checkpoint readers and writers (and the clock).

   Reading: a whole file mapped (mmap, copy-on-write so views may be modified in memory without
   touching the file) or read into a heap buffer with a size cap.

   Writing without partial outputs: qx_out_begin creates a hidden temporary file beside the final
   path (".name.tmp-XXXXXX", the name cut to fit the file system's 255 bytes; it holds an flock
   while its run lives); data go in with positional writes (any order); qx_out_sync flushes it to
   disk and qx_out_publish renames it into place; qx_out_abort removes it. An existing output is
   refused unless `force` is set (and then only a regular file is replaced: never a device, FIFO,
   socket, symbolic link or directory); without force the publish itself refuses to replace a file
   that appeared meanwhile (renameat2 RENAME_NOREPLACE, else link(), else a re-check and rename).
   Temporaries a killed run left beside the output (same name pattern, no lock held) are removed
   by the next qx_out_begin / qx_dir_out_begin for that output.

   Outputs of several files are published all-or-nothing: a directory output is built in a hidden
   temporary directory beside it (qx_dir_out_*) and published with one rename (an existing one is
   exchanged atomically, its foreign files carried over); a single file with a side file (the
   online hook file) binds the side file to the weights with qx_digest_files, keeps the previous
   pair's side file until the model's rename is done and publishes the side file first, the model
   last (qx_rotate_file.c; docs/formats.md, "Publishing a model with its hook file").

   Fault injection for tests: with QX_FAULT_PUBLISH=k in the environment the k-th publish step of
   the process (each rename, link or unlink that changes what a reader sees; numbered from 1) ends
   the process with _exit(86) just before it acts, leaving the disk as a kill at that moment would.

   Every function that can fail returns quarot_result and writes a one-line message to the qx_err
   naming the file and the reason. */
#ifndef QX_FILE_H
#define QX_FILE_H

#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens an input file for reading without ever blocking in open(): O_NONBLOCK (a FIFO with no
   writer, a device that would wait, returns at once), then a check that it is a regular file
   (anything else is refused: "PATH: is a FIFO, not a regular file ...", QUAROT_ERR_IO), then
   O_NONBLOCK is cleared. The descriptor (O_CLOEXEC) in *fd. Every reader of an input file opens it
   so; texts, which may also be streams, go through qx_read_stream. */
quarot_result qx_open_input(const char* path, int* fd, qx_err* e);
/* The whole of path into a new NUL-terminated heap buffer: a regular file, or a stream (a pipe, a
   FIFO, a character device such as /dev/stdin), read until its end. Never blocks in open(); a FIFO
   with no writer at that moment has nothing to give and is refused ("PATH: a FIFO with no writer:
   nothing to read", QUAROT_ERR_IO); a directory is refused; more than max_bytes is
   QUAROT_ERR_OVERFLOW ("longer than the limit of N MiB"); *len gets the length. */
quarot_result qx_read_stream(const char* path, size_t max_bytes, char** out, size_t* len, qx_err* e);

/* A mapped file. addr is NULL when len is 0 (an empty file maps to nothing). */
typedef struct qx_map {
    void* addr;
    size_t len;
    char* path;           /* the file's path (heap, freed by qx_unmap; NULL when out of memory): readers
                             of clean views may pread the same bytes instead of faulting the pages in */
} qx_map;

/* Maps `path` privately (reads see the file, writes stay in memory). */
quarot_result qx_map_file(const char* path, qx_map* m, qx_err* e);
void qx_unmap(qx_map* m);
/* Suitable for qx_store_on_free: unmaps and frees a heap-allocated qx_map. */
void qx_unmap_and_free(void* map);

/* Reads a whole file into a new NUL-terminated heap buffer (free with free()). Files larger than
   max_bytes are refused. */
quarot_result qx_read_file(const char* path, size_t max_bytes, char** out, size_t* len, qx_err* e);

/* 1 if path exists (any kind), 1 if it is a directory, 1 if it is a regular file (links followed). */
int qx_path_exists(const char* path);
int qx_is_dir(const char* path);
int qx_is_file(const char* path);
/* 1 if a and b both exist and are the same file (device and inode), else 0. */
int qx_same_file(const char* a, const char* b);
/* dir + "/" + name in a new heap string (NULL when out of memory). */
char* qx_path_join(const char* dir, const char* name);
/* The directory part of path in a new heap string: what stands before the last '/', "/" for a
   path directly under the root, "." when there is no '/' (NULL when out of memory). */
char* qx_path_dir(const char* path);
/* The directory of a model path into dir (cap bytes, truncated to fit): the path itself when it
   is a directory, else qx_path_dir's answer. */
void qx_model_dir(const char* model_path, char* dir, size_t cap);
/* 1 if name is a plain file name: not empty, no '/', no '\\', not "." or "..", no control bytes. */
int qx_is_plain_filename(const char* name);

/* Seconds on the monotonic clock (for durations), and this thread's CPU time in seconds. */
double qx_now(void);
double qx_thread_cpu_now(void);

/* Reads n bytes at byte offset off of fd, whole: EINTR and short reads are retried, a read that
   returns more than asked is refused. 1 on success, 0 on failure (a read error, or end of file). */
int qx_pread_all(int fd, void* buf, size_t n, int64_t off);

/* One output file written through a temporary. */
typedef struct qx_out {
    char* path;        /* final path */
    char* tmp;         /* temporary path, NULL once published or removed */
    int fd;            /* -1 when closed */
    int force;         /* replace an existing regular file on publish */
    int lock_fd;       /* holds the temporary's flock until publish / abort (-1: none) */
    int stale_removed; /* temporaries of killed runs removed by qx_out_begin */
    struct qx_direct* dio; /* qx_out_direct: writes go through O_DIRECT block buffers (qx_direct.h) */
    int direct_mode;   /* qx_direct_mode the output ended with (set by qx_out_direct, final after sync) */
    const quarot_env* env; /* not NULL: qx_out_tensor converts f32 rows to f16 / bf16 on its pool (same bytes) */
} qx_out;

quarot_result qx_out_begin(qx_out* o, const char* path, int force, qx_err* e);
/* After qx_out_begin: the data go through O_DIRECT block buffers written by a writer thread
   (qx_direct.h; the same bytes, no page cache), or, where the file system refuses O_DIRECT or
   QX_NO_DIRECT is set, through the same blocks with buffered writes; o->direct_mode says which.
   For large outputs (model weights): a file expected to be smaller than QX_DIRECT_MIN_BYTES keeps
   plain pwrites (its page cache costs little; the block buffers' 48 MiB would cost more), unless
   QX_DIRECT=1 is set (tests); so does out of memory (mode QX_DIRECT_OFF in both cases). */
void qx_out_direct(qx_out* o, uint64_t expected_size);
/* Writes all n bytes at byte offset off (retries short writes). */
quarot_result qx_out_pwrite(qx_out* o, const void* data, size_t n, uint64_t off, qx_err* e);
/* Writes tensor t (any strides) at byte offset off as contiguous row-major data of dtype dt,
   converting row by row when t's dtype differs (round to nearest even). head_dim > 0 permutes
   rows between RoPE layouts in heads of head_dim rows (qx_rope_src_row; a tensor with a single
   row: its elements). `what` names the tensor in messages. */
quarot_result qx_out_tensor(qx_out* o, uint64_t off, quarot_dtype dt, const quarot_tensor* t,
                            int64_t head_dim, int to_interleaved, const char* what, qx_err* e);
/* Rows [row0, row0 + t->ne[1]) of a planned tensor of shape plan_ne stored at off in dtype dt, its
   rows counted across the higher dimensions (qx_out_rows: expert e of a 3-D [n][out][in] is rows
   [e * out, (e + 1) * out)); t: {plan_ne[0], n}, any strides, converted like qx_out_tensor.
   Windows come in order: *done counts the rows written so far and must equal row0; it is advanced
   on success, and the tensor is whole when it reaches qx_out_rows(plan_ne). */
quarot_result qx_out_tensor_rows(qx_out* o, uint64_t off, quarot_dtype dt, const int64_t* plan_ne, int64_t* done,
                                 int64_t row0, const quarot_tensor* t, const char* what, qx_err* e);
/* The rows of a planned tensor: plan_ne[1] * plan_ne[2] * plan_ne[3]. */
int64_t qx_out_rows(const int64_t* plan_ne);
/* Sets the final length (zero-filled up to it), flushes data to disk and closes the descriptor. */
quarot_result qx_out_sync(qx_out* o, uint64_t final_size, qx_err* e);
/* Renames the synced temporary onto the final path and syncs the directory. */
quarot_result qx_out_publish(qx_out* o, qx_err* e);
/* Closes and removes the temporary (if any) and frees the paths; safe after publish and twice. */
void qx_out_abort(qx_out* o);

/* The temporary's name for `path` (".base.tmp-XXXXXX" beside it, base cut to fit NAME_MAX), in a
   new heap string; with `kind` "old" the name of a replaced directory kept until the exchange ends. */
char* qx_tmp_name(const char* path, const char* kind);
/* Removes the temporaries beside `path` that a killed run left (matching qx_tmp_name, no flock
   held); returns how many. */
int qx_remove_stale(const char* path);
/* The publish-step fault point (see above): returns normally unless QX_FAULT_PUBLISH says this step. */
void qx_fault_point(const char* what);
/* Renames a synced temporary file onto path: with force replacing a regular file (nothing else),
   without it never replacing anything (as qx_out_publish). The directory is not synced. */
quarot_result qx_publish_file(const char* tmp, const char* path, int force, qx_err* e);
/* fsync of the directory holding path (best effort, after renames). */
void qx_sync_parent(const char* path);
/* Live temporaries (qx_out / qx_dir_out register theirs; other staged files may be added), mapped
   inputs (qx_map_file registers its mappings, qx_unmap removes them; other mappings of input files
   register with qx_map_register), and a SIGBUS handler: a mapped input truncated while it is read
   raises SIGBUS on the first access past its new end; the handler unlinks the registered files,
   removes the registered (then empty) directories, prints
   "<what>: <file>: the input changed (truncated?) while it was being read; nothing was written"
   (<file> the mapping the faulting address lies in; "an input" when none does) and exits with
   status 2 (input). `what` (the command, "quarot quantize") must stay valid; the tool's main()
   installs it for every command. */
void qx_live_add(const char* path, int is_dir);
void qx_live_remove(const char* path);
void qx_map_register(const void* addr, size_t len, const char* path);
void qx_map_unregister(const void* addr);
void qx_sigbus_cleanup(const char* what);
/* Fault injection for tests: when QX_FAULT_TRUNCATE_INPUT names `stage` ("load": the end of
   qx_load_model; "engine": a packed file mapped for the engine), every registered input mapping's
   file is truncated to 4 KiB, once, as a concurrent writer would (the next access past that
   raises SIGBUS). */
void qx_fault_truncate_inputs(const char* stage);
/* Checks that an existing `path` may be replaced by an output: a regular file (want_dir 0) or a
   directory (want_dir 1); absent is fine. Devices, FIFOs, sockets and links are refused. */
quarot_result qx_check_replaceable(const char* path, int want_dir, qx_err* e);

/* A directory output built in a hidden temporary directory beside `path`. Files go into d->tmp
   (through qx_out with force, or any writer); qx_dir_out_publish makes it appear at `path` in one
   step (an existing `path` must be a directory). Also usable as a private staging directory for
   single-file outputs: files are renamed out of d->tmp, then qx_dir_out_abort removes it. `ours` (NULL-terminated, may be NULL) names files of an existing `path` that the new output
   supersedes besides the model files (model.safetensors, model-*-of-*.safetensors,
   model.safetensors.index.json, quarot_online.txt): every other file of an existing `path` is
   carried over (hard link); a subdirectory there is refused. */
typedef struct qx_dir_out {
    char* path;
    char* tmp;
    int lock_fd;
    int force;
    int stale_removed;
} qx_dir_out;
quarot_result qx_dir_out_begin(qx_dir_out* d, const char* path, int force, qx_err* e);
/* QUAROT_ERR_IO when path's last component is longer than a file name may be (255 bytes), with a
   message that gives the reason first and the name cut (qx_out_begin and qx_dir_out_begin check it). */
quarot_result qx_check_out_name(const char* path, qx_err* e);
quarot_result qx_dir_out_publish(qx_dir_out* d, const char* const* ours, qx_err* e);
void qx_dir_out_abort(qx_dir_out* d);

/* Digest binding a side file to its weights: "qxh64:<16 hex>" over each file's size and bytes, in
   the order given (names are not hashed, so a renamed model keeps its digest) (64-bit, non-cryptographic: it detects a hook
   file beside other weights, not an attack). out needs 24 bytes. */
#define QX_DIGEST_LEN 24
quarot_result qx_digest_files(const char* const* paths, int n, char out[QX_DIGEST_LEN], qx_err* e);
/* The same hash over bytes in memory, streamed: begin, put any number of pieces, end writes
   "qxh64:<16 hex>" (the packed file's quarot.online.digest). */
typedef struct qx_digest_state {
    uint64_t h[4];
    unsigned char buf[32];
    size_t used;
    uint64_t total;
} qx_digest_state;
void qx_digest_begin(qx_digest_state* g);
void qx_digest_put(qx_digest_state* g, const void* data, size_t n);
void qx_digest_end(qx_digest_state* g, char out[QX_DIGEST_LEN]);
/* The same digest, the files read with O_DIRECT where the file system takes it: for weights just
   written with O_DIRECT (rotate's hook file), which a buffered pass would pull whole into the page
   cache for one read. */
quarot_result qx_digest_files_uncached(const char* const* paths, int n, char out[QX_DIGEST_LEN], qx_err* e);
/* The weight files of a model path for qx_digest_files: the file itself, or for a directory its
   model.safetensors / model-*-of-*.safetensors in name order. *paths (malloc'ed array of malloc'ed
   strings, free with qx_free_paths) and *n; 0 files is an error. */
quarot_result qx_weight_files(const char* model_path, char*** paths, int* n, qx_err* e);
void qx_free_paths(char** paths, int n);

#ifdef __cplusplus
}
#endif
#endif
