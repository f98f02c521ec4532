/* qx_rotate_file.h - rotate a loaded checkpoint into a new file of the same format, one decoder
   layer in memory at a time (what `quarot rotate` runs).

   The store comes from qx_load_model with views of read-only file mappings. The processor's
   steps run one by one (quarot_processor_init / pre_run / run_layer / post_run) on a binding that
   keeps memory near one decoder layer plus the global tensors:
     validation  (init) names, shapes and dtypes of every tensor, layer by layer, without reading
                 the values (quarot_rotate_desc.values_checked_by_caller): NaN / Inf are found
                 while the copies below are made, each row as it is widened. A validation error
                 returns before any output exists; a bad value in layer i stops the run at layer
                 i with the tensor, element and row named, and the staged output is removed.
     plan        the output's tensors: the input's names and shapes plus what the processor will
                 create (p->creates: an untied lm_head, fused biases), in the output dtype.
     globals     embeddings, final norm, lm_head become writable copies, pre_run rotates them. Or,
                 for large vocabularies (global_window_rows), the embedding and lm_head stream
                 through in row windows: each window copied (widened, checked), rotated by
                 quarot_processor_pre_run_rows and written at its rows' offset, after the writer
                 below is opened; the other globals (the final norm) are small copies.
     writer      the output is laid out (llama2.c segments, safetensors header/shards, GGUF tensor
                 infos) and opened as a temporary beside the final path.
     layers      acquire(i) turns layer i's tensors into writable copies (f16/bf16 widened to f32,
                 so each value is rounded once, when written; read from the file with pread into a
                 small reused buffer when drop_pages says the views are clean file mappings, else
                 through the mapping; QX_NO_PREAD=1 forces the mapping, for measurements), run_layer rotates them (in f32 arithmetic for weights
                 written as f16/bf16, quarot_command.f32, unless f64_arithmetic), release(i)
                 writes them at their planned offsets and frees them.
     finish      post_run, the globals are written, the online hook file (if asked) and the model
                 are synced and renamed into place; any failure removes every temporary.
   Peak memory: the global tensors' copies (in f32 for f16/bf16 inputs; with row windows two windows
   of about 4 MiB each instead) or one decoder layer's copies, whichever is larger, plus small
   buffers (a 4 MiB write chunk); the mapped input pages are dropped as they are consumed.

   The output format is o->out_format, or s->source_format when that is NULL (conversions: see
   qx_convert.h; q/k rows are permuted when the two formats store different RoPE layouts, and tensors
   named "llama2c.*" must be removed by the caller when the output is not llama2.c):
   "llama2c-v0"/"llama2c-v1" -> the llama2.c layout
   (float32; a separate classifier when lm_head exists), "safetensors" -> one .safetensors file or,
   for an out path not ending in .safetensors, a directory (shards when shard_bytes > 0, index,
   config.json with tie_word_embeddings patched and torch_dtype set to the matrices' dtype),
   "safetensors-dir" -> likewise, "gguf" -> GGUF with the store's "gguf.kv" pairs (a GGUF input's, or
   qx_convert_gguf_kv's set by the caller; general.file_type updated when the dtype changes;
   output.weight when untied). */
#ifndef QX_ROTATE_FILE_H
#define QX_ROTATE_FILE_H

#include "formats/qx_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A caller's own output in place of the format's writer (quarot quantize): begin gets the output
   plan (the input's tensors and the processor's creations, in the plan's dtype, f32 copies being
   what put receives for layer tensors) once the global tensors are rotated; put takes every tensor
   once (a layer's on its release, the globals at the end); finish publishes; abort removes. A sink
   with put_rows may get the embedding and lm_head in row windows instead (global_window_rows; then
   begin comes before they are rotated, and put_rows receives rows [row0, row0 + t->ne[1]) of
   each, in order, the last one completing the tensor). A sink with put_expert gets a stacked expert
   weight [n_experts][out][in] (GGUF) one expert at a time instead of through put: expert ex's rows
   as t {in, out}, experts in order from 0, the last one completing the tensor (opts.whole_experts:
   whole through put). */
typedef struct qx_rotate_sink {
    quarot_result (*begin)(void* user, const qx_store* s, const qx_tensor_plan* plan, int64_t n, qx_err* e);
    quarot_result (*put)(void* user, const char* name, const quarot_tensor* t, qx_err* e);
    quarot_result (*put_rows)(void* user, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e);   /* NULL: whole tensors */
    quarot_result (*put_expert)(void* user, const char* name, int64_t ex, const quarot_tensor* t, qx_err* e);   /* NULL: whole */
    quarot_result (*finish)(void* user, qx_err* e);
    void (*abort)(void* user);
    void* user;
} qx_rotate_sink;

typedef struct qx_rotate_file_opts {
    const char* out_path;
    const char* out_format;      /* NULL: s->source_format; else "llama2c-v0", "llama2c-v1", "safetensors"
                                    (one file when out_path ends in .safetensors, else a directory), "gguf" */
    int force;                   /* replace existing outputs */
    quarot_dtype dtype;          /* DEFAULT: every tensor keeps its dtype; else F32 / F16 / BF16 (GGUF:
                                    vectors stay f32, as llama.cpp's converter writes them) */
    uint64_t shard_bytes;        /* safetensors directory output: > 0 splits into shards (see qx_st_write_opts) */
    const char* config_path;     /* safetensors single-file output: also write this config.json (NULL: none) */
    const char* hooks_path;      /* write desc->online_out here in quarot.h's text format (NULL: none) */
    const char* side_dir;        /* directory output: copy the Hugging Face side files (QX_CONVERT_HF_FILES)
                                    found in this directory into it, published with the weights */
    int drop_pages;              /* 1: the store's views are file mappings (qx_map cleanups, as the readers
                                    make them): madvise(DONTNEED) them tensor by tensor and after each layer */
    int threads;                 /* worker threads for the rotation (quarot_env parallel hook over each command's
                                    rows): 0 = every online CPU, 1 = serial; the output bytes do not depend on it */
    /* progress: stage "validate" or "rotate", layers done of total (also called with done = total) */
    void (*progress)(void* user, const char* stage, int64_t done, int64_t total);
    void* user;
    const qx_rotate_sink* sink;  /* NULL: the store's own format (above); else this output */
    const qx_store* drop_from;   /* drop_pages: the store whose file mappings to drop (NULL = s; a store
                                    of views of another store's mappings passes that store) */
    int f64_arithmetic;          /* 1: rotate in double for every output dtype (default: f32 arithmetic for
                                    weights written as f16 / bf16, quarot_command.f32; double for f32) */
    int globals_last;            /* 1: write the global tensors after the layers even when their copies are
                                    large (by default those are written right after pre_run and their memory
                                    reused for the layers' copies); the bytes are the same (tests compare) */
    int64_t global_window_rows;  /* the embedding and lm_head in row windows (quarot_processor_pre_run_rows:
                                    copied, rotated and written a window at a time, never whole in f32):
                                    0 = auto (windows of about 4 MiB of f32 when the copies would reach 64 MiB;
                                    QX_GLOBAL_WINDOW_ROWS=N in the environment: N rows, for tests),
                                    > 0 = windows of that many rows whatever the size, < 0 = never. Only for
                                    safetensors and GGUF outputs or a sink with put_rows, without globals_last, and where the processor's
                                    global scope is row-separable (not LayerNorm families); otherwise whole
                                    copies, and the stats say why. Same bytes either way (tests compare) */
    int whole_experts;           /* 1: a stacked expert weight [n_experts][out][in] (GGUF) is copied, rotated and
                                    written whole; by default one expert at a time (quarot_model.get_slice)
                                    into the safetensors and GGUF writers and a caller's sink with put_expert
                                    (one without gets it whole).
                                    The bytes are the same (tests compare) */
    /* not NULL: called once the processor is initialized (its rotations built, every tensor checked)
       and before any output is opened; a failure stops the run with nothing written (the tool rotates
       a qwen2vl mmproj file with the processor's R1 here) */
    quarot_result (*on_rotations)(void* user, const quarot_processor* p, qx_err* e);
    void* rotations_user;
    const char* leave_out;       /* not NULL: tensors whose names start with it are rotated as the plan says but
                                    not written (absent from the output's plan): "visual." writes a vision-language
                                    model's text decoder alone */
} qx_rotate_file_opts;

typedef struct qx_rotate_file_stats {
    int64_t max_live_layers;     /* most decoder layers held at once (1 when layer-wise) */
    int64_t acquires, releases;  /* over both passes */
    int64_t out_of_layer;        /* tensor requests for a layer not held (refused; 0 expected) */
    size_t peak_copy_bytes;      /* largest total of writable copies held at once */
    size_t global_copy_bytes;    /* of which the global tensors */
    int64_t tensors_written;
    int untied;                  /* the processor created lm_head from the embedding */
    int output_error;            /* the failure was writing the output (exit code "output") */
    char r1[160], r2[160];       /* the rotations built (quarot_rotation.text) */
    int threads;                 /* threads used */
    /* wall seconds per phase: validate (processor_init: reads and checks every tensor), read
       (copies of the input views, f16/bf16 widened to f32), fuse (norm fusion and everything before a
       layer's first rotate command), rotate (the commands), write (output conversion and writes),
       total (the whole call) */
    double validate_s, read_s, fuse_s, rotate_s, write_s, total_s;
    int64_t n_commands;
    int side_files;              /* Hugging Face side files copied (opts.side_dir) */
    char r4[160], heads[160], r3[160];   /* online rotations built ("" when none) */
    /* the rotation pass per decoder layer (acquire to the end of its release: copies, fusion,
       rotation, writes) and the layers' input bytes: the first layer (fresh copy buffers) apart
       from the later ones (buffers reused), i.e. the rate a many-layer model approaches */
    double first_layer_s, later_layers_s, first_layer_bytes, later_layers_bytes;
    /* how the weights were written (qx_direct_mode): 1 O_DIRECT, 2 buffered because the file system
       refused O_DIRECT, 3 buffered because QX_NO_DIRECT is set, 0 plain buffered writes (the
       formats and caller sinks that do not use qx_out_direct) */
    int direct_mode;
    int64_t f32_commands;        /* rotate commands run in f32 arithmetic (the others, n_commands - this, in double) */
    int64_t fused_into_commands; /* weights whose norm scaling rode on their first rotate command (no pass of its own:
                                    quarot_rotate_desc.separate_fusions) */
    int64_t global_window_rows;  /* > 0: the embedding and lm_head went through in windows of this many rows */
    int64_t global_windows;      /* how many windows */
    char global_whole_why[256];  /* with global_window_rows 0, when windows were considered: why not */
    int stale_hooks_removed;     /* a single-file output without hooks replaced a model that had a hook
                                    file: that file was removed with it (--force) */
    int64_t tensors_left_out;    /* opts.leave_out: tensors not written (not counted in tensors_written) */
    int64_t expert_slices;       /* experts of stacked weights copied and written one at a time */
} qx_rotate_file_stats;

/* Rotates s (views; its tensors are replaced by copies and freed as they are written, so s holds
   only what was not yet written afterwards: do not use its tensors after the call) with desc
   (desc->online_out receives the hooks when online / r3). On failure nothing is left at
   o->out_path, o->hooks_path or o->config_path, and e says why ("file: reason" or the processor's
   message). A single-file output and its hook file are published as one unit (qx_rotate_file.c,
   qx__stage_publish): a kill at any point leaves the old pair or the new one, as readers see them;
   with force, a hook file beside an output that needs none is removed with the old model. */
quarot_result qx_rotate_file(qx_store* s, const quarot_rotate_desc* desc, const qx_rotate_file_opts* o,
                             qx_rotate_file_stats* st, qx_err* e);

/* The summary line about the embedding and lm_head ("N row windows of R rows", or "whole copies
   (why)") into buf; 0 when there is nothing to say (small tables, whole copies as asked). */
int qx_rotate_file_globals_line(const qx_rotate_file_stats* st, char* buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
