/* qx_packed.h - "quarot-packed": a rotated model with integer weights for W4A4 engines, in one
   safetensors file (what `quarot quantize OUT.safetensors` writes; docs/formats.md).

   FORMAT, version 2. An ordinary safetensors file ([u64 little-endian N][N bytes of JSON header]
   [data]; the header maps names to {"dtype", "shape" (outermost first), "data_offsets"}, tensors
   tile the data section without holes) whose "__metadata__" holds "format": "quarot-packed" and
   "quarot.version": "1". Tensor names are Hugging Face's ("model.layers.0.self_attn.q_proj.weight").

   Quantized linears. A linear weight W[out][in] named "<base>.weight" is replaced by:
     "<base>.qweight"  U8, shape [out][in/2] when bits <= 4, [out][in] when bits is 5..8
     "<base>.scales"   F16 or F32 (metadata quarot.weight.scale_dtype), shape [out][G]
     "<base>.zeros"    U8, shape [out][G], only when quarot.weight.asymmetric is "1"
   with G = in / g groups of g consecutive input columns (g = quarot.weight.group_size; "0" means
   one group per output channel, g = in, G = 1). Every stored code u is an unsigned integer in
   [0, 2^b - 1] (b = quarot.weight.bits). Packing, bits <= 4: column c of row r sits in byte
   r*(in/2) + c/2, in its LOW nibble (bits 0-3) when c is even and its HIGH nibble (bits 4-7) when
   c is odd ("low_first"; in must be even); bits 5..8: one code per byte. The weight is
     W[r][c] = (float(u) - float(z)) * float(s),   s = scales[r][c/g],
     z = zeros[r][c/g] when asymmetric, else z = 2^(b-1) (8 for 4 bits: codes 0..15 mean -8..7),
   computed in float32 (an F16 scale converted exactly); u - z is an exact small integer, so this
   is one rounding. Scales are finite and >= 0; zeros lie in [0, 2^b - 1].

   Everything else (embeddings, norms, lm_head, biases, linears left unquantized) is a plain F32 /
   F16 / BF16 tensor under its own name. The weights are rotated (R1, R2 folded, norms fused); the
   online hooks still have to be applied by the engine at run time.

   Metadata (all values are strings, as safetensors requires; integers in decimal, floats as
   printed by %.9g):
     format                        "quarot-packed"
     quarot.version                "1"
     quarot.weight.bits            2..8
     quarot.weight.group_size      0 (per output channel) or g
     quarot.weight.asymmetric      "0" / "1"
     quarot.weight.scale_dtype     "F16" / "F32"
     quarot.weight.packing         "low_first" (nibble order above)
     quarot.weight.quantizer       "rtn", "rtn-clip" or "gptq" (how the codes were chosen; informative)
     quarot.act.bits               2..8, or 16 = activations not quantized
     quarot.act.group_size         0 = per token, else g along the features
     quarot.act.asymmetric         "0" / "1"
     quarot.act.clip_ratio         (0, 1]
     quarot.k.bits / quarot.v.bits, quarot.k.group_size / quarot.v.group_size, quarot.k.asymmetric /
     quarot.v.asymmetric, quarot.k.clip_ratio / quarot.v.clip_ratio: the KV cache (per token and
                                   head; group_size 0 = the whole head); bits 16 = not quantized
     quarot.rope_interleaved       "1": q/k rows in the interleaved RoPE layout (llama2.c, GGUF);
                                   "0": Hugging Face's half-split layout
     quarot.config                 the model's config.json text (architecture and sizes)
     quarot.online                 the online hook list in quarot.h's text format (quarot_online_read;
                                   docs/formats.md), "" when the model needs none
     quarot.online.required        "1": the weights carry the offline halves of online rotations, so
                                   quarot.online holds at least one hook and an engine must run them;
                                   "0": they carry none and quarot.online holds no hook
     quarot.online.digest          "qxh64:<16 hex>" (qx_digest_*) over the u64 little-endian byte length
                                   of quarot.online, its bytes, then the whole data section: binds
                                   the hook list to these weights
     quarot.rotation               what was folded in (informative)
   Activation quantization is symmetric or asymmetric per token exactly as quarot.h's >>quant
   describes (x^ = clamp(round(x/s))*s, s = clip*max|x| / (2^(b-1)-1)), applied at the input of
   every quantized linear after any online hook.

   Reading (hostile input): the safetensors header is parsed strictly (qx_json), offsets and sizes
   checked with overflow-safe arithmetic, tensors must tile the data section; the metadata must
   name this format and version and every key above must parse and lie in range; every .qweight
   needs its .scales (and .zeros exactly when asymmetric) with shapes agreeing with the metadata
   (group size dividing in, in even when packed two per byte), no .scales / .zeros without their
   .qweight; scales finite and >= 0, zeros and codes within [0, 2^b - 1]; quarot.online parses,
   holds hooks exactly when quarot.online.required is 1, and quarot.online.digest is its digest
   with the data section (a stripped or replaced hook list, or altered weights, are refused). */
#ifndef QX_PACKED_H
#define QX_PACKED_H

#include "formats/qx_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QX_PACKED_FORMAT "quarot-packed"
#define QX_PACKED_VERSION 2   /* 2: quarot.online.required and quarot.online.digest */

/* The quantization the file was made for. Bits 16 = that part is not quantized. */
typedef struct qx_packed_settings {
    int w_bits;                  /* 2..8 */
    int64_t w_group_size;        /* 0 = per output channel */
    int w_asym;
    quarot_dtype scale_dtype;    /* QUAROT_DTYPE_F16 or F32 */
    char w_quantizer[16];        /* "rtn", "rtn-clip", "gptq" */
    int a_bits;
    int64_t a_group_size;
    int a_asym;
    double a_clip;               /* (0, 1] */
    int k_bits, v_bits;
    int64_t k_group_size, v_group_size;
    int k_asym, v_asym;
    double k_clip, v_clip;
    int rope_interleaved;
} qx_packed_settings;

/* ---- writing ---- */

/* One tensor of the model: packed = 1 for a quantized linear [ne[1] = out][ne[0] = in] (stored as
   .qweight / .scales / .zeros), else a plain tensor stored in dtype (F32, F16, BF16). */
typedef struct qx_packed_entry {
    const char* name;            /* "<base>.weight" for packed entries */
    int packed;
    quarot_dtype dtype;
    int n_dims;
    int64_t ne[QUAROT_MAX_DIMS];
} qx_packed_entry;

typedef struct qx_packed_write_opts {
    int force;
    const char* config_json;     /* "quarot.config" (NULL: "") */
    const char* online;          /* "quarot.online" (NULL: "") */
    const char* rotation;        /* "quarot.rotation" (NULL: "") */
    uint64_t online_reserve;     /* header bytes kept free at begin for a longer "quarot.online" set later
                                    (0 = 4096); a longer text moves the data once at finish */
} qx_packed_write_opts;

typedef struct qx_packed_writer qx_packed_writer;

/* Lays out the file (through a temporary beside path) for the plan; settings are checked (bits,
   group size dividing every packed in, in even when bits <= 4). */
quarot_result qx_packed_writer_begin(qx_packed_writer** w, const char* path, const qx_packed_entry* plan, int64_t n,
                                     const qx_packed_settings* st, const qx_packed_write_opts* o, qx_err* e);
/* A plain tensor (converted to the planned dtype, round to nearest even). */
quarot_result qx_packed_writer_put(qx_packed_writer* w, const char* name, const quarot_tensor* t, qx_err* e);
/* Rows [row0, row0 + t->ne[1]) of a planned plain 2-D tensor (t: {ne[0], n}); windows in order from
   row 0, the tensor counts as written with its last row (the streamed embedding and lm_head). */
quarot_result qx_packed_writer_put_rows(qx_packed_writer* w, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e);
/* A packed linear from quarot_quantize_f32's integer form: codes q[out][in] in [-2^(b-1), 2^(b-1)-1],
   scales and (asymmetric) zeros [out][G] (zeros zero-centred as quarot.h gives them: stored z =
   zero + 2^(b-1)); value (q - zero) * scale. Scales are stored in the planned scale dtype (F16:
   rounded to nearest even; an overflow or a negative / non-finite scale is refused). */
/* Replaces "quarot.online" (the hook list is complete only after the last layer). */
quarot_result qx_packed_writer_set_online(qx_packed_writer* w, const char* online);
quarot_result qx_packed_writer_put_linear(qx_packed_writer* w, const char* name, const int8_t* q, const float* scales,
                                          const float* zeros, qx_err* e);
/* Every tensor written -> sync, rename; frees w in every case. */
quarot_result qx_packed_writer_finish(qx_packed_writer* w, qx_err* e);
void qx_packed_writer_abort(qx_packed_writer* w);

/* ---- reading ---- */

typedef struct qx_packed_linear {
    char name[256];              /* "<base>.weight" */
    int64_t out, in, groups, group;
    const unsigned char* qweight;/* [out][row_bytes] */
    int64_t row_bytes;
    const unsigned char* scales; /* [out][groups] in settings.scale_dtype, little-endian */
    const unsigned char* zeros;  /* [out][groups], NULL when symmetric */
} qx_packed_linear;

typedef struct qx_packed_plain {
    char name[256];
    quarot_dtype dtype;
    int n_dims;
    int64_t ne[QUAROT_MAX_DIMS];
    const unsigned char* data;
} qx_packed_plain;

typedef struct qx_packed_file {
    qx_packed_settings settings;
    char* config_json;           /* NUL-terminated copies ("" when absent) */
    char* online;
    char* rotation;
    qx_packed_linear* lin;
    int64_t n_lin;
    qx_packed_plain* plain;
    int64_t n_plain;
} qx_packed_file;

/* Parses and validates an image (kept by the caller while f is used). */
quarot_result qx_packed_parse(const void* buf, size_t len, const char* name, qx_packed_file* f, qx_err* e);
void qx_packed_file_free(qx_packed_file* f);
/* 1 when buf (the first len bytes of a file, possibly only its start) holds a safetensors header
   whose visible part contains "quarot-packed" as a JSON string (the writer puts "format" first):
   a cheap check for format detection; parse validates. */
int qx_packed_sniff(const void* buf, size_t len);
/* Row r of a linear, dequantized as the format says, into out[in]. */
void qx_packed_dequant_row(const qx_packed_file* f, const qx_packed_linear* l, int64_t r, float* out);
/* The linear back in quarot_quantize_f32's integer form (q[out][in], scales / zeros [out][groups];
   zeros may be NULL when symmetric). */
void qx_packed_codes(const qx_packed_file* f, const qx_packed_linear* l, int8_t* q, float* scales, float* zeros);

/* A packed file into an EMPTY store: config from quarot.config (rope_interleaved from the
   metadata), plain tensors copied, linears dequantized into F32 "<base>.weight" tensors, the
   online hook text as blob "quarot.online", then qx_hf_check_tensors. A Qwen2-VL config with no
   "visual." tensor in the file (`quarot quantize --text-only`) is its text decoder alone, read as
   arch "qwen2" with the blob "vl.text" = "qwen2vl", as the GGUF reader reads llama.cpp's qwen2vl
   (M-RoPE on text positions is qwen2's RoPE; there is no merger to rotate). */
quarot_result qx_packed_read_mem(const void* buf, size_t len, const char* name, qx_store* s, qx_err* e);
quarot_result qx_packed_load(const char* path, qx_store* s, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
