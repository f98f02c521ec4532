/* quarot.h v0.1.0 - rotate LLM weights so they quantize to 4 bits (QuaRot, SpinQuant, Adapt Rotation); C99; MIT licence

QUICK START (examples/quickstart.c is this, as a whole program)
    #define QUAROT_IMPLEMENTATION          // in exactly one .c file
    #include "quarot.h"

    quarot_rotation q;
    quarot_rotation_desc d = {0};
    d.n = 4096;                                            // random Hadamard D*H/sqrt(n), seed 0
    quarot_rotation_init(&q, &d, NULL);
    quarot_rotation_apply_f32(&q, x, 1, 4096, 0, NULL, 0);    // activation row:     x <- x*Q
    quarot_rotation_apply_f32(&q, w, out, 4096, 0, NULL, 0);  // weights W[out][in]: W <- W*Q
    quarot_rotation_free(&q);                              // now (x*Q)(W*Q)^T == x*W^T
    // a whole model: fill a quarot_model (config + tensor callbacks), then
    //   quarot_rotate_desc rd = {0}; quarot_rotate_model(&model, &rd);

TABLE OF CONTENTS (each marker opens a module in the declaration half and again in the implementation)
    >>config           version, linkage, configuration macros, includes
    >>result           quarot_result error codes and their strings
    >>env              allocator hooks and the optional parallel-for hook
    >>rng              seeded random numbers identical on every platform (xoshiro256**)
    >>tensor           ggml-style tensor view (ne[] counts, nb[] byte strides), f16/bf16 conversion
    >>simd             which instruction sets were compiled in; per-call ISA selection
    >>convert          f32 / f64 <-> f16 / bf16 row conversions, SIMD bit-identical to _ref
    >>generated        (implementation only, written by tools/, make regen) Hadamard tables, mixing terms
    >>hadamard         Hadamard matrices: Sylvester, Paley I/II over GF(p^k), Kronecker, embedded tables
    >>transform        fast Walsh-Hadamard and Kronecker (H_K (x) H_2^m) transforms, batched, in place
    >>transform_plan   (implementation only) the plan (H_K, mixing patterns or panels) and the apply calls
    >>transform_simd   (implementation only) SIMD butterflies: in-lane stages, radix networks, column passes
    >>transform_mix    (implementation only) the mixing kernels' macros: float panels, blocked tables, register mixing
    >>transform_isa    (implementation only) per ISA: vector macros, the kernels compiled for it, selection; f64 kernels
    >>gemm             blocked SGEMM / DGEMM (or CBLAS under QUAROT_USE_CBLAS)
    >>gemm_kernels     (implementation only) GEMM micro-kernels: scalar, SSE2, AVX2(+FMA), AVX-512, NEON
    >>linalg           Householder QR, random orthogonal matrices, Newton-Schulz polar factor
    >>quant            fake quantization and integer quantization (RTN, clip search), error metrics
    >>gptq             GPTQ weight quantization from a calibration Hessian (act-order, groups)
    >>gptq_run         (implementation only) GPTQ's factor U of H^-1 (UL Cholesky, inverse) and its column loop
    >>qgemm            integer W4/W8 x A4/A8 matrix products (int32 accumulation), packed int4, SIMD = _ref
    >>qgemm_simd       (implementation only) the products' AVX-512 / AVX2 / NEON kernels (tiles, decode rows)
    >>qgemm_run        (implementation only) packing, the task split over output rows, quarot_qgemm itself
    >>qgemm_amx        the same products on AMX-INT8 tiles (Linux tile permission, fallback to VNNI)
    >>rotation         an orthogonal matrix Q of size n (Hadamard, block-diagonal, random, given) applied to rows
    >>model            architecture config and tensor-access callbacks (layer-wise acquire / release)
    >>adapter          per-family description: fusion map, bake names, rotation pairs, head geometry
    >>moe              mixture-of-experts layers: MLP blocks (experts, shared expert, router), built-in families
    >>command          rotate commands: plain data generated from the adapter, executed exactly once
    >>online           online-rotation hook IR, quarot_online_apply, versioned text serialization
    >>processor        plan, rotations and commands built and validated before any write; quarot_rotate_model
    >>processor_run    (implementation only) fusion, mean baking, commands, layers, exactly-once check
    >>processor_bytensor (implementation only) a layer one weight at a time (quarot_model.tensor_done)
    >>processor_moe    (implementation only) R4 per expert, hooks of MoE layers, 3-D expert tensors one at a time
    >>adapt            Adapt Rotation: activation capture, Newton-Schulz optimizer, stage-1 context
    >>adapt_solve      (implementation only) stage 1's polar factor: the methods, X^T X, sigma_max, deflation
    >>adapt_newton     (implementation only) the scaled Newton polar iteration: blocked float inverse, steps
    >>adapt_polar      (implementation only) Newton-Schulz steps, the polar solver of stage 1, its f64 finish
    >>adapt_stage1     (implementation only) the stage-1 loop: quantize, polar update of R, best R, context
    >>quantize         model-level weight quantization layer by layer: Hessians, GPTQ / RTN per linear, reports
    >>quantize_layers  (implementation only) the layer-wise quantizer: Hessians, per-linear method, scale migration
    >>train            SpinQuant: backward passes of the decoder ops, Cayley SGD on the Stiefel manifold
    >>train_model      learned R1 / R2 on a quarot_model: the trainer (its loss, gradients, steps, run)
    >>train_pass       (implementation only) the layer forward / backward and the chain rule into dL/dR
    >>train_setup      (implementation only) the trainer's checks, tensor names, start rotations, buffers, init
    >>train_run        (implementation only) the trainer's loss, step and run
    >>transform_body   (implementation only) the f32 transform kernels, compiled once per ISA
    >>gemm_body        (implementation only) the blocked GEMM driver, compiled for float and double
    >>polar_body       (implementation only) the Newton-Schulz polar factor, compiled for double and float
    >>gptq_body        (implementation only) GPTQ's register-blocked rank-k and Hessian updates, per ISA

CONFIGURATION MACROS (define before including the implementation)
    QUAROT_IMPLEMENTATION       compile the implementation in this translation unit
    QUAROT_STATIC               make every function static (private copy per translation unit)
    QUAROT_DLL                  dllexport when building / dllimport when using a shared library
    QUAROT_MALLOC(sz) / QUAROT_FREE(p)  default allocator (define both or neither); default malloc/free
    QUAROT_ASSERT(x)            internal invariant check; default assert(x)
    QUAROT_NO_SIMD              compile the scalar reference kernels only
    QUAROT_NO_SSE2 / QUAROT_NO_AVX2 / QUAROT_NO_AVX512 / QUAROT_NO_NEON   drop one instruction set
    QUAROT_USE_CBLAS            route SGEMM/DGEMM through cblas_sgemm/cblas_dgemm (link a BLAS);
                                the built-in blocked GEMM stays compiled and is what tests compare to
    QUAROT_HEADER_FILE          the name the implementation includes this file again by, to compile
                                its per-ISA / per-type kernel bodies; default "quarot.h", looked up
                                beside this file (define it when the file is renamed)

SIMD AND DETERMINISM
    The instruction set is chosen at compile time from the compiler's macros (__SSE2__, __AVX2__,
    __AVX512F__, __ARM_NEON). Every kernel has a scalar `_ref` version that is the specification;
    Hadamard transforms, sign flips, scaling and format conversions are bit-identical to `_ref` on every
    ISA (adds and subtracts only, FMA contraction switched off inside the implementation). Reductions
    (GEMM, polar factor, QR) state a tolerance instead. Random numbers come from xoshiro256** seeded by
    splitmix64, and normal deviates use a libm-free logarithm, so a seed gives the same rotation on
    every platform and compiler. These guarantees hold for standard IEEE compilation; clang's
    -ffp-contract=fast (which by definition ignores the FP_CONTRACT pragma) and -ffast-math void
    them (the latter is refused with #error unless QUAROT_ALLOW_FAST_MATH is defined).

MEMORY
    Hot paths (transforms, quarot_online_apply) never allocate: the caller passes workspace sized by a
    *_workspace_size() query. Set-up functions allocate through the quarot_allocator in a quarot_env
    (NULL = QUAROT_MALLOC/QUAROT_FREE). Layer-wise processing holds at most two decoder layers.

ERRORS
    Every fallible call returns quarot_result (QUAROT_OK == 0, errors negative); quarot_result_string()
    names it. Objects that run long jobs (quarot_model) carry a message buffer with the detail (which
    tensor, which shape). Library code never aborts, exits or prints. QUAROT_ASSERT guards internal
    invariants only; bad arguments are reported as errors.

THREADING
    No global mutable state: every function is reentrant, and objects may be used from one thread at
    a time. Heavy operations (GEMM, polar factor, model rotation) can split work through the optional
    quarot_parallel hook of a quarot_env; the library itself never creates threads.
*/
#ifndef QUAROT_H
#define QUAROT_H

/* ======================================================================================== */
/* ======================================  DECLARATIONS  ================================== */
/* ======================================================================================== */

// >>config
#define QUAROT_VERSION_MAJOR 0
#define QUAROT_VERSION_MINOR 1
#define QUAROT_VERSION_PATCH 0
#define QUAROT_VERSION_STRING "0.1.0"

#include <stddef.h>
#include <stdint.h>

#if defined(QUAROT_STATIC)
  #if defined(__GNUC__) || defined(__clang__)
    #define QUAROT_API static __attribute__((unused))
  #else
    #define QUAROT_API static
  #endif
#elif defined(QUAROT_DLL)
  #if defined(_WIN32)
    #if defined(QUAROT_IMPLEMENTATION)
      #define QUAROT_API __declspec(dllexport)
    #else
      #define QUAROT_API __declspec(dllimport)
    #endif
  #else
    #define QUAROT_API __attribute__((visibility("default")))
  #endif
#else
  #define QUAROT_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

// "0.1.0": the version the implementation was compiled from (compare with QUAROT_VERSION_STRING).
QUAROT_API const char* quarot_version_string(void);

// >>result
// Error codes: one X-macro list generates the enum and quarot_result_string(). Append only.
#define QUAROT_RESULT_LIST(X)                                                                   \
    X(QUAROT_OK,                      0, "ok")                                                  \
    X(QUAROT_ERR_INVALID_ARGUMENT,   -1, "invalid argument")                                   \
    X(QUAROT_ERR_OUT_OF_MEMORY,      -2, "out of memory")                                       \
    X(QUAROT_ERR_UNSUPPORTED_SIZE,   -3, "no Hadamard matrix or supported construction for this size") \
    X(QUAROT_ERR_SHAPE_MISMATCH,     -4, "tensor shapes or strides do not match")               \
    X(QUAROT_ERR_OVERFLOW,           -5, "size computation overflows")                          \
    X(QUAROT_ERR_NONFINITE,          -6, "NaN or Inf in input")                                 \
    X(QUAROT_ERR_NOT_CONVERGED,      -7, "iteration did not converge")                          \
    X(QUAROT_ERR_UNSUPPORTED_DTYPE,  -8, "unsupported data type")                               \
    X(QUAROT_ERR_NOT_FOUND,          -9, "tensor or item not found")                            \
    X(QUAROT_ERR_PARSE,             -10, "malformed input")                                     \
    X(QUAROT_ERR_IO,                -11, "input/output error")                                  \
    X(QUAROT_ERR_STATE,             -12, "operation called out of order")                       \
    X(QUAROT_ERR_WORKSPACE,         -13, "workspace too small")                                 \
    X(QUAROT_ERR_UNSUPPORTED,       -14, "unsupported feature or not compiled in")              \
    X(QUAROT_ERR_INTERNAL,          -15, "internal consistency check failed")

typedef enum quarot_result {
#define QUAROT__RESULT_ENUM(name, value, text) name = value,
    QUAROT_RESULT_LIST(QUAROT__RESULT_ENUM)
#undef QUAROT__RESULT_ENUM
    QUAROT_RESULT_FORCE_I32 = 0x7fffffff
} quarot_result;

// A static string for any code ("unknown error" for values not in the list).
QUAROT_API const char* quarot_result_string(quarot_result r);

// >>env
// Allocation hooks. alloc returns NULL on failure; memory must be aligned to at least 16 bytes
// (the library aligns SIMD buffers itself inside larger blocks). free(NULL) must be harmless.
typedef struct quarot_allocator {
    void* (*alloc)(size_t size, void* user_data);
    void  (*free)(void* ptr, void* user_data);
    void* user_data;
} quarot_allocator;

// Optional parallel-for: run(user_data, fn, arg, n_tasks) must call fn(arg, i) once for every i in
// [0, n_tasks), in any order and on any threads, and return when all calls have returned. n_threads
// is a hint for how finely to split work (<= 1: the library runs the loop itself, serially).
typedef void (*quarot_task_fn)(void* arg, int64_t task_index);
typedef struct quarot_parallel {
    void (*run)(void* user_data, quarot_task_fn fn, void* arg, int64_t n_tasks);
    void* user_data;
    int n_threads;
} quarot_parallel;

// Where set-up and heavy functions take a `const quarot_env*`, NULL or a zero-initialized struct
// means QUAROT_MALLOC/QUAROT_FREE and one thread.
typedef struct quarot_env {
    quarot_allocator allocator;
    quarot_parallel parallel;
} quarot_env;

// Allocate / free through an env (NULL or unset hooks = default). quarot_env_alloc returns NULL
// on failure or when size is 0. Exposed so that adapters and examples share the caller's hooks.
QUAROT_API void* quarot_env_alloc(const quarot_env* env, size_t size);
QUAROT_API void  quarot_env_free(const quarot_env* env, void* ptr);
// Run fn(arg, i) for i in [0, n) through env's parallel hook, or serially when there is none
// (fn NULL: nothing runs).
QUAROT_API void  quarot_env_parallel_for(const quarot_env* env, quarot_task_fn fn, void* arg, int64_t n);

// >>rng
// xoshiro256** (Blackman & Vigna 2018) seeded through splitmix64. Identical sequences on every
// platform: integer arithmetic only; uniforms take the top 53 bits; normals use the Marsaglia polar
// method with a libm-free logarithm and IEEE sqrt (correctly rounded everywhere).
typedef struct quarot_rng {
    uint64_t s[4];
    double spare;      // second normal deviate of the last polar-method pair
    int has_spare;
} quarot_rng;

QUAROT_API void     quarot_rng_seed(quarot_rng* rng, uint64_t seed);
QUAROT_API uint64_t quarot_rng_u64(quarot_rng* rng);
// Uniform in [0, 1), multiples of 2^-53.
QUAROT_API double   quarot_rng_uniform(quarot_rng* rng);
// Standard normal deviate.
QUAROT_API double   quarot_rng_normal(quarot_rng* rng);
// n random signs (+1.0f / -1.0f), one u64 draw each, sign = top bit (1 -> -1).
// NULL rng / out: nothing happens (u64 and the deviates return 0); a zero-init rng is seed 0.
QUAROT_API void     quarot_rng_signs_f32(quarot_rng* rng, float* out, int64_t n);

// >>tensor
// A view of an engine's tensor, ggml style: ne[0] is the innermost (contiguous) dimension,
// nb[i] is the byte stride of dimension i. A linear layer's weight W[out][in] has ne = {in, out, 1, 1}.
typedef enum quarot_dtype {
    QUAROT_DTYPE_DEFAULT = 0,    // treated as F32
    QUAROT_DTYPE_F32 = 1,
    QUAROT_DTYPE_F16 = 2,        // IEEE binary16
    QUAROT_DTYPE_BF16 = 3,       // bfloat16 (top half of an f32)
    QUAROT_DTYPE_F64 = 4,
    QUAROT_DTYPE_FORCE_I32 = 0x7fffffff
} quarot_dtype;

#define QUAROT_MAX_DIMS 4

typedef struct quarot_tensor {
    void* data;
    quarot_dtype dtype;
    int64_t ne[QUAROT_MAX_DIMS];   // element counts, unused dimensions 1
    size_t  nb[QUAROT_MAX_DIMS];   // byte strides
} quarot_tensor;

// Bytes per element (0 for unknown types) and a short lowercase name ("f32", "f16", "bf16", "f64").
QUAROT_API size_t      quarot_dtype_size(quarot_dtype dt);
QUAROT_API const char* quarot_dtype_name(quarot_dtype dt);

// Describe contiguous row-major memory with n_dims (1..4) sizes given innermost first:
// ne = {cols, rows} for a [rows][cols] matrix. Checks the sizes and that the byte count fits size_t.
// data may be NULL here (to size an allocation first); set t->data before using the view.
QUAROT_API quarot_result quarot_tensor_init(quarot_tensor* t, void* data, quarot_dtype dt,
                                            int n_dims, const int64_t* ne);
// Checks a view built by hand: known dtype, data != NULL, every ne >= 1, nb[0] == element size,
// strides non-overlapping (nb[i] >= nb[i-1] * ne[i-1]) and the byte extent fits in size_t.
QUAROT_API quarot_result quarot_tensor_validate(const quarot_tensor* t);
// Bytes spanned by the view (last element end); 0 on overflow or invalid view.
QUAROT_API size_t  quarot_tensor_nbytes(const quarot_tensor* t);   // data may be NULL
QUAROT_API int64_t quarot_tensor_nelements(const quarot_tensor* t);
// Number of rows: ne[1]*ne[2]*ne[3]; rows are addressed by one flat index.
QUAROT_API int64_t quarot_tensor_nrows(const quarot_tensor* t);
QUAROT_API int     quarot_tensor_is_contiguous(const quarot_tensor* t);
// Read / write row r (ne[0] elements) as f32 or f64, converting from / to the tensor's dtype with
// round-to-nearest-even.
QUAROT_API quarot_result quarot_tensor_get_row_f32(const quarot_tensor* t, int64_t r, float* out);
QUAROT_API quarot_result quarot_tensor_set_row_f32(quarot_tensor* t, int64_t r, const float* in);
QUAROT_API quarot_result quarot_tensor_get_row_f64(const quarot_tensor* t, int64_t r, double* out);
QUAROT_API quarot_result quarot_tensor_set_row_f64(quarot_tensor* t, int64_t r, const double* in);
// QUAROT_ERR_NONFINITE if any element is NaN or Inf; *first_bad (may be NULL) gets its flat index.
QUAROT_API quarot_result quarot_tensor_check_finite(const quarot_tensor* t, int64_t* first_bad);

// Row conversions, round to nearest even; NaN stays NaN (quiet), overflow becomes Inf,
// f16 subnormals are produced and read exactly. NULL in / out: nothing is converted.
QUAROT_API void quarot_f32_to_f16(const float* in, uint16_t* out, int64_t n);
QUAROT_API void quarot_f16_to_f32(const uint16_t* in, float* out, int64_t n);
QUAROT_API void quarot_f32_to_bf16(const float* in, uint16_t* out, int64_t n);
QUAROT_API void quarot_bf16_to_f32(const uint16_t* in, float* out, int64_t n);
QUAROT_API uint16_t quarot_f64_to_f16_1(double x);   // single values, rounded once from double
QUAROT_API uint16_t quarot_f64_to_bf16_1(double x);

// >>simd
// Kernels that have SIMD versions take a quarot_isa: DEFAULT picks the best one compiled in, REF
// forces the scalar specification, and naming an ISA that was not compiled in returns
// QUAROT_ERR_UNSUPPORTED. Tests use this to compare every path with _ref bit for bit.
typedef enum quarot_isa {
    QUAROT_ISA_DEFAULT = 0,
    QUAROT_ISA_REF = 1,
    QUAROT_ISA_SSE2 = 2,
    QUAROT_ISA_AVX2 = 3,
    QUAROT_ISA_AVX512 = 4,
    QUAROT_ISA_NEON = 5,
    QUAROT_ISA_COUNT_ = 6,
    QUAROT_ISA_FORCE_I32 = 0x7fffffff
} quarot_isa;

// 1 if kernels for isa were compiled in (REF always; DEFAULT always).
QUAROT_API int quarot_isa_compiled(quarot_isa isa);
// The ISA that DEFAULT resolves to.
QUAROT_API quarot_isa quarot_isa_best(void);
QUAROT_API const char* quarot_isa_name(quarot_isa isa);
// Everything compiled in, best first, e.g. "avx512 avx2 sse2 ref" or "ref".
QUAROT_API const char* quarot_simd_name(void);

// >>convert
// Conversion of n elements between F32, F64, F16 and BF16 (any pair; same dtype = copy) with a chosen
// ISA: DEFAULT = best compiled in, REF = the scalar specification (the quarot_f32_to_f16 family and the
// tensor row functions above are this with DEFAULT). Every ISA gives the same bits as REF for every
// input: round to nearest even, f16 subnormals produced and read exactly, overflow to Inf, NaN stays
// NaN (f32 -> f16/bf16 keeps the top payload bits and sets the quiet bit; f64 -> f16/bf16 gives the
// quiet NaN with an empty payload, sign kept), f16/bf16 -> f32/f64 exact. f64 -> f16/bf16 rounds once:
// the double is first rounded to odd in f32 (truncate, then set the last bit when inexact), which
// with 24 >= 11 + 2 bits makes the following round-to-nearest-even equal to the direct rounding.
// x86: F16C / AVX-512F vcvtph2ps / vcvtps2ph for f16 (the SSE2/AVX2 f16 paths need F16C, else they
// run the scalar code), integer SIMD for bf16; NEON: fcvtl / fcvtn / fcvtxn. in and out may be
// unaligned and must not overlap. Bad dtype -> QUAROT_ERR_UNSUPPORTED_DTYPE; n < 0 or a NULL pointer
// with n > 0 -> QUAROT_ERR_INVALID_ARGUMENT; an ISA not compiled in -> QUAROT_ERR_UNSUPPORTED.
QUAROT_API quarot_result quarot_convert(void* out, quarot_dtype out_dt, const void* in, quarot_dtype in_dt,
                                        int64_t n, quarot_isa isa);

// >>generated
// (no declarations: data the implementation embeds, written by the programs in tools/)

// >>hadamard
// Hadamard matrices H (entries +-1, H*H^T = n*I; docs/algorithms.md §1) of order n. Orders available:
// 1, 2 and multiples of 4 reachable as products (Kronecker) of
//   - Sylvester 2^k,
//   - Paley I, q+1 for a prime power q = 3 (mod 4), and Paley II, 2(q+1) for q = 1 (mod 4), using
//     GF(p^k) arithmetic for prime powers (28 = 27+1, 52 = 2*(25+1), 100 = 2*(49+1), 244 = 243+1),
//   - embedded tables: 92, 116, 156, 172, 188, 236, 428 and the other block-circulant orders
//     260, 268, 292, 356, 404, 412, 452, 476, 508, 604, 652, 764, 876, 956, 1004.
// Every multiple of 4 up to 256 is available; up to 1024 the only multiples of 4 missing are 324, 372,
// 436, 532, 596, 612, 668, 716, 732, 756, 772, 836, 852, 872, 892, 932, 940, 964, 980, 988, 996, 1012.
// A matrix of order n is built as H_K (x) H_{2^m} with n = K*2^m and K the smallest available order
// that leaves a power of two (K = 1 for n = 2^m), so the fast transform costs n*m + K*n adds:
//     H_n[i*2^m + j][k*2^m + l] = H_K[i][k] * H_{2^m}[j][l]     (i, k < K; j, l < 2^m)
// with Sylvester H_{2^m}[j][l] = (-1)^popcount(j & l). A KRONECKER core is H_K = H_a (x) H_b with the
// same index convention (row i*b + j), a >= b. Orders above QUAROT_HADAMARD_MAX_ORDER are rejected.
#define QUAROT_HADAMARD_MAX_ORDER ((int64_t)4294967296LL)   // 2^32

typedef enum quarot_hadamard_construction {
    QUAROT_HADAMARD_NONE = 0,        // not available
    QUAROT_HADAMARD_SYLVESTER = 1,   // K == 1: pure power of two
    QUAROT_HADAMARD_PALEY1 = 2,      // H_K by Paley I over GF(q), K = q+1
    QUAROT_HADAMARD_PALEY2 = 3,      // H_K by Paley II over GF(q), K = 2(q+1)
    QUAROT_HADAMARD_TABLE = 4,       // H_K from an embedded table
    QUAROT_HADAMARD_KRONECKER = 5,   // H_K = H_a (x) H_b of two available orders
    QUAROT_HADAMARD_CONSTRUCTION_FORCE_I32 = 0x7fffffff
} quarot_hadamard_construction;

typedef struct quarot_hadamard_info {
    int64_t n;                              // order asked for
    int64_t K;                              // core order, n = K * 2^m (1 when n is a power of two)
    int m;                                  // exponent of the power-of-two factor
    quarot_hadamard_construction construction;  // how H_K is made (NONE when unavailable)
    int64_t q;                              // PALEY1/PALEY2: the prime power
    int64_t a, b;                           // KRONECKER: K = a*b, H_K = H_a (x) H_b, a >= b
    char text[64];                          // e.g. "172 (table) x 2^6", "28 (paley1 q=27) x 2^9"
} quarot_hadamard_info;

// 1 if a Hadamard matrix of order n is available, else 0 (also for n <= 0 and n > 2^32). Never
// allocates; the work is a trial division of n's odd part.
QUAROT_API int quarot_hadamard_available(int64_t n);
// Describe the construction for order n; QUAROT_ERR_UNSUPPORTED_SIZE (info->construction = NONE,
// text says why) when none is available; QUAROT_ERR_INVALID_ARGUMENT when info is NULL.
// Priority when several constructions give the same K: Paley I, Paley II, table, Kronecker.
QUAROT_API quarot_result quarot_hadamard_info_get(int64_t n, quarot_hadamard_info* info);
// The largest available order b <= max_block that divides n (for block-diagonal fallbacks); 1 if
// none larger; 0 for n <= 0, max_block < 1 or n > QUAROT_HADAMARD_MAX_ORDER.
QUAROT_API int64_t quarot_hadamard_largest_block(int64_t n, int64_t max_block);
// Build H_n as [n][n] row-major +-1 (out has n*n entries), exactly the matrix described above.
// Temporary memory (GF(q) tables, row buffers, a Kronecker factor: O(n) bytes) comes from env.
// Checks in this order: QUAROT_ERR_UNSUPPORTED_SIZE if n is not available (n <= 0 included),
// QUAROT_ERR_OVERFLOW if n*n*sizeof(element) does not fit in size_t, QUAROT_ERR_INVALID_ARGUMENT if
// out is NULL, QUAROT_ERR_OUT_OF_MEMORY if a temporary allocation fails.
QUAROT_API quarot_result quarot_hadamard_build_i8(int64_t n, int8_t* out, const quarot_env* env);
// The same as float / double, divided by sqrt(n) (1/sqrt(n) computed in double, then rounded once to
// the element type) when normalized != 0 (then orthogonal). Built in place in out: no n*n temporary.
QUAROT_API quarot_result quarot_hadamard_build_f32(int64_t n, int normalized, float* out, const quarot_env* env);
QUAROT_API quarot_result quarot_hadamard_build_f64(int64_t n, int normalized, double* out, const quarot_env* env);

// >>transform
// Fast Hadamard transforms (docs/algorithms.md §1) on rows of floats, in place. A row x (length n) is a row vector:
//     x <- x * H_n / sqrt(n)    (normalized, the default)
// with H_n = H_K (x) H_{2^m} (Kronecker, row index of H_n = i*2^m + j): view x as z[K][2^m], run the
// Walsh-Hadamard butterflies along each 2^m row (stages h = 1, 2, 4, ... in that order), then mix the
// K rows with H_K^T (y[i] = sum_k H_K[k][i] * z[k]). The SIMD kernels follow exactly the operation
// order below, so every ISA is bit-identical to _ref for every input without NaNs (a NaN input gives
// NaN outputs; which NaN payload survives is not specified).
//
// Exact operation order (the specification every kernel follows):
//   1. pre-signs   x[i] = x[i] * s[i]                 (forward with signs)
//   2. butterflies for h = 1, 2, 4, ..., 2^m/2 along each 2^m row: (a, b) <- (a + b, a - b)
//   3. mixing (K > 1) with c(k,i) = H_K[k][i] (forward) or H_K[i][k] (transpose), in blocks of
//      b = plan->mix_block consecutive k (the last block may be shorter). For block k0 .. k0+L-1 and
//      output (i, j), with g = c(k0,i):
//          u = z[k0][j];  u = (c(k,i) == g) ? u + z[k][j] : u - z[k][j]   for k = k0+1 .. k0+L-1
//          P = (g > 0) ? u : -u                        (exact sign flip)
//      y[i][j] = P of the first block, then y = y + P block after block. With b = 1 this is the
//      plain sum acc = c(0,i)*z[0][j], acc = acc + c(k,i)*z[k][j] in k order. The first term is a
//      signed copy (never 0 + ...), so signed zeros come out the same on every ISA. b > 1 lets the
//      SIMD kernels share u between all outputs with the same sign pattern on a block (a table of
//      the 2^(L-1) patterns, the "four Russians" method): about K/b + 2^(b+1)/b adds per output
//      instead of K.
//   3'. Paley II cores K = 2(q+1) with 2^m >= 16 mix in halves instead: H_K = C (x) [[1,1],[1,-1]] +
//      I (x) [[1,-1],[-1,-1]] (C the symmetric conference matrix, zero diagonal) equals A (x) [[1,1],[1,-1]]
//      + I (x) [[0,-2],[-2,0]] with A = C + I = H_K[2r][2c] (+-1, symmetric, so transpose = forward).
//      So: one more butterfly stage h = 2^m (rows 2r, 2r+1 of z: s_r = z[2r] + z[2r+1], d_r =
//      z[2r] - z[2r+1]) into z2[K/2][2^(m+1)] = [s_r | d_r], step 3 on z2 with A (order K/2, blocks of
//      b = plan->mix_block, 2^(m+1) columns) giving Y, then y[2c][j] = Y[c][j] - (z[2c+1][j] +
//      z[2c+1][j]) and y[2c+1][j] = Y[c][2^m + j] - (z[2c][j] + z[2c][j]) with z before the extra
//      stage (the doubling is exact), before steps 4 and 5. About half the adds of step 3 on H_K. (An
//      output that is exactly zero may come out with the other sign than step 3 would give; every
//      ISA still gives the same bits.)
//   4. post-signs  x[i] = x[i] * s[i]                 (transpose with signs)
//   5. scaling     x[i] = x[i] * (float)(1/sqrt(n))   (1/sqrt(n) computed in double; f64: in double)

// Unnormalized Walsh-Hadamard transform of `rows` rows of length n (a power of two, n >= 1), rows
// `stride` elements apart (stride >= n). x <- x * H_n (Sylvester; H_n is symmetric). n not a power of
// two -> QUAROT_ERR_INVALID_ARGUMENT; an ISA not compiled in -> QUAROT_ERR_UNSUPPORTED. rows == 0 is
// a no-op. The f64 version runs SIMD kernels bit-identical to its scalar specification.
QUAROT_API quarot_result quarot_fwht_f32(float* x, int64_t n, int64_t rows, int64_t stride, quarot_isa isa);
QUAROT_API quarot_result quarot_fwht_f64(double* x, int64_t n, int64_t rows, int64_t stride);

// A transform of length n = K*2^m: owns H_K (built once, K*K bytes) and what the mixing kernels
// read. mix_block = b is 1 when 2^m < 16 (the SIMD kernels then vectorize across outputs i and read
// mix_f32) and otherwise the b in 2..5 that minimizes the adds, ceil(K/b) * (2^(b+1) + K).
//   mix_f32 (b == 1, 1 < K <= 2048): +-1.0f in panels of 16 outputs, mix_f32[o][p][k][l] =
//     c_o(k, 16p + l) for o = 0 (forward, H_K[k][i]) and o = 1 (transpose, H_K[i][k]), p < K16/16
//     with K16 = K rounded up to a multiple of 64, zero where 16p + l >= K: 2 * K16 * K floats.
//   mix_pat (b > 1): what output i adds for block blk < nb = ceil(K/b), packed E = floor(64/b) blocks
//     to a 64-bit word: mix_pat[o][i][w] for rows i < K8 + 8 (K8 = K rounded up to a multiple of 8;
//     rows from K on are zero) and words w < nw = ceil(nb/E); block blk sits in word blk/E at bit
//     (blk % E) * b: its low b-1 bits are the sign pattern p of c_o(k, i) over the block relative to
//     its first coefficient g (bit t-1 set when c_o(k0+t, i) != g), bit b-1 is set when g == -1.
//   mix_half (a Paley II core with 2^m >= 16, step 3'): A = H_K[2r][2c], [K/2][K/2]; mix_block and
//     mix_pat then describe the mixing of order K/2 on A over 2^(m+1) columns.
typedef struct quarot_hadamard_plan {
    int64_t n, K;
    int m;
    int mix_block;                 // b, see above (1 when K == 1)
    int8_t* had_k;                 // [K][K] +-1, NULL when K == 1
    float* mix_f32;                // [2][K16/16][K][16] or NULL
    uint64_t* mix_pat;             // [2][K8 + 8][nw] or NULL (K = K/2 when mix_half is set)
    int8_t* mix_half;              // [K/2][K/2] A = H_K[2r][2c], the split Paley II mixing (step 3'), or NULL
    int mix_fixed;                 // 1..3: the mixing is one the AVX-512 / AVX2 register kernels know (28, and
                                   // the split 76 and 148: >>transform_isa, quarot__mixr_*), checked term by term; 0
                                   // none
    quarot_hadamard_info info;
    quarot_env env;                // copy of the env used to allocate the arrays
} quarot_hadamard_plan;

// Per-call options; zero-init (or d == NULL) = normalized, no signs, forward, best ISA.
typedef struct quarot_hadamard_apply_desc {
    const float* signs;            // [n] of +-1: random Hadamard Q = D*H/sqrt(n), D = diag(signs); NULL = none
    const double* signs_f64;       // the same for the f64 entry point (which falls back to `signs`);
                                   // the f32 entry point rejects signs_f64 without signs
    int unnormalized;              // 1: skip the 1/sqrt(n) scaling pass
    int transpose;                 // 1: x <- x * Q^T = (x * H^T) * D / sqrt(n) (the inverse of Q)
    quarot_isa isa;                // f32: that ISA; f64: REF = the scalar spec, any other the f64 SIMD kernels (same
                                   // bits)
} quarot_hadamard_apply_desc;

// Build the plan for order n: QUAROT_ERR_UNSUPPORTED_SIZE when no Hadamard matrix of order n is
// available (quarot_hadamard_available) or its core K exceeds QUAROT_HADAMARD_PLAN_MAX_K (the mixing
// costs about K*n/b per row), QUAROT_ERR_OUT_OF_MEMORY, QUAROT_ERR_OVERFLOW. Without mix_f32 (b == 1
// and K > 2048) every ISA mixes with the scalar kernel. On failure *p is left zeroed (plan_free on
// it is harmless).
#define QUAROT_HADAMARD_PLAN_MAX_K 16384
QUAROT_API quarot_result quarot_hadamard_plan_init(quarot_hadamard_plan* p, int64_t n, const quarot_env* env);
QUAROT_API void          quarot_hadamard_plan_free(quarot_hadamard_plan* p);
// Workspace bytes one apply call needs (0 for powers of two); independent of the row count and of
// the ISA, the same for f32 and f64: n doubles (2n when mix_half is set), plus the pattern tables of
// the b > 1 mixing (2^(b-1) * 64 floats per block, for a group of blocks of at most 48 KiB, or one
// block where that is more), plus alignment slack.
QUAROT_API size_t        quarot_hadamard_workspace_size(const quarot_hadamard_plan* p);
// x is [rows][stride]; the first n elements of each row are transformed, the rest of each row is not
// touched. work may be NULL only when the workspace size is 0 (else QUAROT_ERR_WORKSPACE, as for
// work_size too small). Never allocates. rows == 0 is a no-op.
QUAROT_API quarot_result quarot_hadamard_apply_f32(const quarot_hadamard_plan* p, const quarot_hadamard_apply_desc* d,
                                                   float* x, int64_t rows, int64_t stride,
                                                   void* work, size_t work_size);
QUAROT_API quarot_result quarot_hadamard_apply_f64(const quarot_hadamard_plan* p, const quarot_hadamard_apply_desc* d,
                                                   double* x, int64_t rows, int64_t stride,
                                                   void* work, size_t work_size);

// Column form: x is [n][ld] (n = p->n rows, ld >= cols floats apart); each of the first `cols`
// columns, read top to bottom as a vector of length n, is transformed exactly as
// quarot_hadamard_apply_f32 transforms a row (the same bits, every ISA and desc option). The
// butterflies pair whole rows, so the SIMD kernels run W columns per vector with no shuffles and no
// transposes (writers' W <- Q^T W is this on W's columns). Powers of two only (plan K == 1; other
// plans: QUAROT_ERR_UNSUPPORTED_SIZE). work: quarot_hadamard_cols_workspace_size bytes, a dense
// copy of up to 32 columns between the first and the last pass; NULL runs every pass in x (the same
// bits; slower for large n, each pass then strides over x's rows). cols == 0 is a no-op.
QUAROT_API size_t        quarot_hadamard_cols_workspace_size(const quarot_hadamard_plan* p);
QUAROT_API quarot_result quarot_hadamard_apply_cols_f32(const quarot_hadamard_plan* p,
                                                        const quarot_hadamard_apply_desc* d, float* x, int64_t cols,
                                                        int64_t ld, void* work, size_t work_size);

// >>transform_plan
// (no declarations: the plan and the apply functions of >>transform are implemented here)

// >>transform_simd
// (no declarations: the SSE2 / AVX2 / AVX-512 / NEON kernels are private and chosen by quarot_isa)

// >>transform_mix
// (no declarations: macros the mixing kernels of >>transform_body and >>transform_isa are made of)

// >>transform_isa
// (no declarations: the transform kernels of each ISA and their selection by quarot_isa)

// >>gemm
// C = alpha * op(A) * op(B) + beta * C, all row-major; op(A) is [m][k], op(B) is [k][n], C is [m][n];
// lda/ldb/ldc are row strides in elements. trans_a != 0: A is stored [k][m] (op(A) = A^T, lda >= m),
// else A is [m][k] (lda >= k); likewise B ([n][k] with ldb >= k when transposed, else [k][n], ldb >= n);
// ldc >= n. Every leading dimension must be >= 1, also for empty matrices.
//   - m == 0 or n == 0: nothing to do. k == 0 or alpha == 0: C <- beta * C (A and B are not read).
//   - beta == 0 ignores C's old contents (NaN and Inf included); elements of C's rows past column n
//     (the ldc - n gap) are never touched.
// The built-in version is cache-blocked (packed A and B panels) with SIMD micro-kernels. Accuracy: each
// element is a plain sum of k products (FMA where the ISA has it), so it lies within
// ~k * eps * sum_p |op(A)[i][p] * op(B)[p][j]| of the exact value (eps = 2^-24 float, 2^-53 double);
// different ISAs round differently. With env's parallel hook (n_threads > 1) the work is split over
// panels of C; the result is bit-identical to the serial run of the same ISA. Packing buffers (up to
// ~6 MB float / ~8 MB double per task, less for small products) come from env:
// QUAROT_ERR_OUT_OF_MEMORY on failure.
// Under QUAROT_USE_CBLAS, quarot_sgemm/quarot_dgemm check their arguments the same way and then call
// cblas_sgemm/cblas_dgemm (CblasRowMajor; env's hooks are not used; sizes over INT_MAX use the
// built-in code). Errors: QUAROT_ERR_INVALID_ARGUMENT (negative sizes, small leading dimensions, NULL
// pointers that would be read), QUAROT_ERR_OVERFLOW (a matrix extent does not fit in memory sizes).
QUAROT_API quarot_result quarot_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                      float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                                      float beta, float* c, int64_t ldc, const quarot_env* env);
QUAROT_API quarot_result quarot_dgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                      double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                                      double beta, double* c, int64_t ldc, const quarot_env* env);
// The built-in kernels even under QUAROT_USE_CBLAS (for tests and benchmarks). isa picks the
// micro-kernel: QUAROT_ISA_DEFAULT the best compiled in, QUAROT_ISA_REF the scalar one, an ISA that
// was not compiled in gives QUAROT_ERR_UNSUPPORTED. (quarot_sgemm/quarot_dgemm use DEFAULT.)
QUAROT_API quarot_result quarot_sgemm_builtin(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                              float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                                              float beta, float* c, int64_t ldc, const quarot_env* env,
                                              quarot_isa isa);
QUAROT_API quarot_result quarot_dgemm_builtin(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                              double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                                              double beta, double* c, int64_t ldc, const quarot_env* env,
                                              quarot_isa isa);
// y[t][o] = sum_p x[t][p] * w[o][p] for t < rows and o < n: x [rows][k] (row stride ldx >= k), W
// [n][k] (ldw >= k), y [rows][ldy >= n]; quarot_sgemm(0, 1, rows, n, k, 1, x, ldx, w, ldw, 0, y, ldy)
// for the few rows of a decode step, without packing: one dot product per output, each row of W read
// once for all rows of x. Every dot product has one fixed order per ISA (scalar `_ref`: 8 partial
// sums; AVX2 with FMA: 32 fused; AVX-512: 64 fused; others run `_ref`), so any thread count gives the
// same bits; ISAs differ within the GEMM bound above. Outputs go in tasks of 64 over env's parallel
// hook. isa: DEFAULT the best compiled in, REF the scalar kernel, one not compiled in
// QUAROT_ERR_UNSUPPORTED. Errors: QUAROT_ERR_INVALID_ARGUMENT (negative sizes, small strides, NULL).
QUAROT_API quarot_result quarot_sgemv(int64_t rows, int64_t n, int64_t k, const float* x, int64_t ldx,
                                      const float* w, int64_t ldw, float* y, int64_t ldy, const quarot_env* env,
                                      quarot_isa isa);

// >>gemm_kernels
// (no declarations: the micro-kernels are private to the implementation)

// >>linalg
// Householder QR of A [m][n] (m >= n >= 1), row-major with row stride lda >= n: A = Q*R with Q [m][n]
// having orthonormal columns and R [n][n] upper triangular with a non-negative diagonal (each
// reflector's sign is folded into Q, so for a full-rank A this is the unique such factorization). On
// return A holds R in its first n rows (zeros below the diagonal, rows n..m-1 zero); q (if not NULL)
// receives the thin Q [m][n] (row stride ldq >= n). Blocked by 32 reflectors (compact WY); the block
// updates use a private DGEMM without FMA and with a fixed k-blocking, so every number is the same
// IEEE operation chain on every platform, ISA and thread split: the result is bit-identical everywhere.
// Cost about 4*m*n^2 flops with Q; env's parallel hook splits the block updates. Workspace
// (m + n + 33)*32 doubles from env. NaN/Inf in A -> QUAROT_ERR_NONFINITE.
QUAROT_API quarot_result quarot_qr_f64(int64_t m, int64_t n, double* a, int64_t lda,
                                       double* q, int64_t ldq, const quarot_env* env);
// Haar-distributed random orthogonal Q [n][n] from a seed: G[i][j] = quarot_rng_normal draws in
// row-major order from quarot_rng_seed(seed), G = Q*R by quarot_qr_f64 (diag(R) >= 0, which is
// Q <- Q*diag(sign(diag R)) of a plain Householder QR). The same seed gives the same bits everywhere.
// Temporary memory: n*n + O(n) doubles from env.
QUAROT_API quarot_result quarot_random_orthogonal_f64(int64_t n, uint64_t seed, double* q, int64_t ldq,
                                                      const quarot_env* env);

// Orthogonal polar factor U of a square C (C = U*P, U orthogonal, P symmetric positive semidefinite;
// U = argmin over orthogonal R of ||C - R||_F, the orthogonal Procrustes solution), by Newton-Schulz:
//     X0 = C/s;  repeat: G = X^T X;  residual = max|G - I|;  stop if <= tol;  X <- X*(3I - G)/2
// Each singular value x of X0 in (0, sqrt(3)) follows x <- x(3 - x^2)/2 to 1 (x1.5 per step while
// small, then quadratically). Refinements, all on by default:
//   - scale: s = ||C||_F, then after the first G, s *= sqrt(min(||G||_F, ||G||_1)) (both bound the
//     largest eigenvalue of G), so sigma_max(X0) <= 1 still holds with a tighter s; free.
//   - fast start: while the smallest singular value is below 1/2, steps X <- X*(2I - G) double the
//     small ones instead (x <- 2x - x^3 keeps [0, 1.09] inside itself); a few power-iteration steps on
//     G per step (O(n^2)) tell when to switch. About a third fewer steps; desc.plain = 1 turns it off.
//   - singular C: a singular value 0 never converges, and rounding noise in its direction would grow
//     into a spurious one. While sigma_min(X) < 1/2 is certain (power iteration can only overestimate
//     it), each step has grown sigma_min(X0) by >= 1.75 (fast) or 1.375; once that bounds
//     sigma_min(X0) below tau = 2^10 eps (f32, ~6e-5) or 2^20 eps (f64, ~1e-10), C counts as singular:
//     QUAROT_ERR_NOT_CONVERGED early (f32 ~17 steps, f64 ~40), U = last iterate. Regularize
//     (C + eps*I) first when C may be singular (e.g. C = A^T B from fewer rows than n). Default-scaled
//     C with cond(C) up to a few thousand (f32) / ~1e9 (f64) is handled; the polar factor of a worse
//     conditioned f32 C is not accurate anyway (error ~ cond * 2^-24).
// G is computed with the built-in GEMM (only its upper triangle, mirrored); the diagonal of G (column
// norms) is summed again in double, which keeps the f32 residual accurate to ~1e-7: the default 2e-6
// is reached for well-conditioned C up to n = 4096 and beyond (the off-diagonal f32 rounding is only
// ~sqrt(n)*2^-24/n per entry). The residual is an entry-wise maximum: an isolated slow singular value
// with a spread-out singular vector shows up n/10 or so times smaller in it than in the spectral norm
// (measured: max-entry 9e-8 when ||U^T U - I||_2 was 1.1e-6, n = 256). Convergence is quadratic at the
// end, so a 100x smaller tol costs at most one more step. Steps needed: ~log2(s/sigma_min) + 5; e.g.
// 10 for C = A^T A + noise (cond ~35), 12 for a Gaussian C (n = 256). Each step costs ~3 n^3 flops
// (G: n^3 as it is symmetric, X*Y: 2 n^3).
typedef struct quarot_polar_desc {   // zero-init = defaults
    int max_iter;                    // 0 = 75 (f64) or 36 (f32) (singular C stops earlier, see above)
    double tol;                      // 0 = 1e-6 (f64) or 2e-6 (f32); max-abs entry of X^T X - I
    double scale;                    // 0 = Frobenius norm of C, refined; otherwise X0 = C / scale exactly
                                     //   (fast start then only if sigma_max(X0) <= 1.08 is certain)
    int plain;                       // 1: only X <- X*(3I - G)/2 steps (no fast start, see above)
} quarot_polar_desc;

typedef struct quarot_polar_info {
    int iterations;                  // updates X <- X*Y performed
    double residual;                 // max|U^T U - I| of the returned U (as measured, see above)
    double scale;                    // the s actually used: X0 = C / s
} quarot_polar_info;

// C and U are [n][n] with row strides ldc, ldu >= n (U may alias C: C is read completely first).
// Workspace: 2 n^2 elements (+ GEMM packing) from env; env's parallel hook splits the GEMMs. Results
// depend on the ISA (GEMM rounding) but not on the parallel hook. Errors: NaN/Inf in C ->
// QUAROT_ERR_NONFINITE; C == 0 -> QUAROT_ERR_INVALID_ARGUMENT; n < 1, small strides, NULL pointers,
// negative max_iter/tol/scale -> QUAROT_ERR_INVALID_ARGUMENT; not converged within max_iter (or
// diverging because desc.scale was too small) -> QUAROT_ERR_NOT_CONVERGED, with U = last iterate and
// info filled. info may be NULL.
QUAROT_API quarot_result quarot_polar_newton_schulz_f64(int64_t n, const double* c, int64_t ldc,
                                                        double* u, int64_t ldu, const quarot_polar_desc* d,
                                                        quarot_polar_info* info, const quarot_env* env);
QUAROT_API quarot_result quarot_polar_newton_schulz_f32(int64_t n, const float* c, int64_t ldc,
                                                        float* u, int64_t ldu, const quarot_polar_desc* d,
                                                        quarot_polar_info* info, const quarot_env* env);

// >>quant
// Uniform quantizers (docs/algorithms.md §4). Rows are quantization units: per-token activations
// [tokens][features] and per-output-channel weights W[out][in] are both "per row"; group_size splits
// each row into groups of consecutive elements, each with its own scale (and zero point).
//   symmetric, b bits:  m = c*max|x|, s = m/(2^(b-1)-1),
//                       q = clamp(round(x/s), -2^(b-1), 2^(b-1)-1), x^ = q*s
//   asymmetric:         lo = c*min(x,0), hi = c*max(x,0), s = (hi-lo)/(2^b-1),
//                       z = clamp(round(-lo/s), 0, 2^b-1), q = clamp(round(x/s)+z, 0, 2^b-1), x^ = (q-z)*s
// with c the clip ratio. Exactly, so that every platform gives the same bits:
//   - Scales are computed in double from the float statistics and rounded once to float:
//     s = f32((c*m) / (2^(b-1)-1)) and s = f32((c*hi - c*lo) / (2^b-1)), every step in double
//     (c*m is exact). s = 1 when that float is 0 (all-zero group, or underflow), so zero groups stay
//     exactly 0 (-0.0 becomes +0.0). For |x| near FLT_MAX, s is lowered to the largest float for which
//     every code dequantizes to a finite value.
//   - round() is round-half-to-even of the exact quotient x/s. It is taken from (double)x/(double)s,
//     which for float x and s is never rounded across or onto a half-integer; the scalar kernel rounds
//     with truncating conversions and comparisons, the SIMD kernels with an explicit ties-to-even
//     instruction, so the result does not depend on the FP rounding mode.
//   - x^ = f32(q - z) * s is one float multiplication, the same expression quarot_dequantize_f32 uses,
//     so dequantize(quantize(x)) equals quarot_fake_quant_f32(x) bit for bit.
//   - Asymmetric ranges always contain 0, so 0 is represented exactly.
//   - clip_search: per group, candidates c_k = f64(c*(100-k)/100) for k = 0..50 (c down to c/2, steps
//     of 1%); each is scored by sum((x^ - x)^2) in double (element order) and the first smallest
//     wins, so the search never does worse than c itself (k = 0). Costs 51 quantizations per group.
//   - clip_search = QUAROT_CLIP_SEARCH_LP (QuaRot's --w_clip): candidates c_k = f64(c*(100-k)/100) for
//     k = 0..79 (c down to 0.21c), scored by sum |x^ - x|^2.4 in double (element order); the first
//     smallest wins, so again never worse than c itself under that objective. 80 quantizations.
// Cost: two passes over each row (statistics, quantization); groups add one statistics pass.
#define QUAROT_CLIP_SEARCH_MSE 1     // clip_search: 51 ratios, squared error
#define QUAROT_CLIP_SEARCH_LP 2      // clip_search: 80 ratios, sum |error|^2.4 (QuaRot's --w_clip)
typedef struct quarot_quant_desc {   // zero-init = 4-bit symmetric per row, clip 1.0
    int bits;                        // 2..8; 0 = 4
    int asymmetric;                  // 0 symmetric, 1 asymmetric (zero point)
    int64_t group_size;              // 0 = whole row; otherwise must divide cols
    float clip_ratio;                // (0, 1]; 0 = 1.0
    int clip_search;                 // 0 off; QUAROT_CLIP_SEARCH_MSE (1) or _LP (2), per group as above
    quarot_isa isa;                  // kernels: DEFAULT = best; SSE2, AVX2 (also used for AVX512)
                                     // and NEON exist besides REF; every one gives the same bits
} quarot_quant_desc;

// Errors shared by the quantizers: NULL data pointer, rows or cols < 0, stride < cols, bits outside
// 2..8, group_size < 0 or not dividing cols, clip_ratio outside (0, 1], asymmetric not 0/1,
// clip_search not 0/1/2 -> QUAROT_ERR_INVALID_ARGUMENT; isa not compiled in -> QUAROT_ERR_UNSUPPORTED; rows*stride not
// addressable -> QUAROT_ERR_OVERFLOW. d == NULL means all defaults. rows == 0 or cols == 0 is a
// no-op. NaN or Inf in a row -> QUAROT_ERR_NONFINITE: each row is checked before anything of it is
// written, so that row and the rows after it are left untouched (rows before it have been processed).

// x[rows][stride], first cols of each row: x <- dequant(quant(x)) in place. Never allocates.
QUAROT_API quarot_result quarot_fake_quant_f32(float* x, int64_t rows, int64_t cols, int64_t stride,
                                               const quarot_quant_desc* d);
// Integer form for engines: q[rows][cols] codes, scales and zeros [rows][cols/group] (contiguous;
// zeros may be NULL when symmetric, and receive 0 then). Asymmetric codes are stored zero-centred in
// int8 (q - 2^(b-1)), with the zero point likewise shifted (z - 2^(b-1), an integer held in a float),
// so x^ = (code - zero) * scale in both cases and every code lies in [-2^(b-1), 2^(b-1)-1].
QUAROT_API quarot_result quarot_quantize_f32(const float* x, int64_t rows, int64_t cols, int64_t stride,
                                             const quarot_quant_desc* d, int8_t* q, float* scales, float* zeros);
// x[r][j] = (f32(code) - zero) * scale (zero = 0 when zeros is NULL, allowed only when symmetric).
// Codes are not range-checked. x has row stride `stride` (>= cols).
QUAROT_API quarot_result quarot_dequantize_f32(const int8_t* q, const float* scales, const float* zeros,
                                               int64_t rows, int64_t cols, const quarot_quant_desc* d,
                                               float* x, int64_t stride);
// Error metrics over n elements (double accumulation in element order): mean of (a-b)^2 and
// max |a-b|. n <= 0 gives 0; a NULL pointer (n > 0) gives NaN; NaN in the inputs propagates.
QUAROT_API double quarot_mse_f32(const float* a, const float* b, int64_t n);
QUAROT_API double quarot_max_abs_diff_f32(const float* a, const float* b, int64_t n);

// >>gptq
// Calibration statistics for GPTQ (docs/algorithms.md §7): h[in][in] += 2 * x^T x over
// x[rows][stride] (first `in` of each row), in double. Sums are formed in chunks of 8 rows
// (h[i][j] += 2x0i*x0j + ... + 2x7i*x7j, row order), then the rows % 8 left one at a time, so the
// bits depend on how rows are split between calls (not on the SIMD kernel). Only the upper
// triangle is accumulated, then mirrored into the lower one: h must be symmetric on entry (zeros,
// or earlier calls). GPTQ does not care about the scale of H (the reference implementation keeps
// the mean 2/N X^T X; this keeps the sum). Cost rows*in^2/2 multiply-adds, cache-tiled (AVX2 /
// AVX-512: register-blocked, about 28 KiB of stack). NaN/Inf in x -> QUAROT_ERR_NONFINITE with h
// untouched; in or rows == 0: no-op; stride < in -> QUAROT_ERR_INVALID_ARGUMENT; in*in*8 >
// SIZE_MAX -> QUAROT_ERR_OVERFLOW.
QUAROT_API quarot_result quarot_hessian_accumulate_f64(double* h, int64_t in, const float* x,
                                                       int64_t rows, int64_t stride);

// GPTQ (Frantar et al., 2022): quantize W[out][in] column by column, each time moving the rounding
// error onto the columns not yet quantized so that ||X W^T - X W^^T||^2 stays small, given
// H = 2 X^T X [in][in] from calibration inputs X (after any online rotation). Per column i, in
// processing order, with U the upper Cholesky factor of H^-1 (H^-1 = U^T U, from the damped H):
//     w^_i = RTN(w_i);  e = (w_i - w^_i) / U_ii;  w_j -= e * U_ij  for the later columns j
// Steps, as the reference implementation: dead columns (H_ii == 0) get H_ii = 1 and W[:, i] = 0;
// act_order sorts columns by descending H_ii (ties: lower index first); H += damp*I with
// damp = damp_ratio * mean(diag H); U in double by an in-place Cholesky factorization H = V V^T
// (V upper) and triangular inverse U = V^-1, blocked by 64 with the O(in^3) parts split over env's
// parallel hook. Rows are independent and are processed in tiles of 32 rows, also in parallel; W rows
// are copied to double. Results do not depend on the thread count or the SIMD kernel (quant.isa picks
// it; all give the same bits), and are bit-identical for every block_size (each w_j receives its
// updates in processing order).
// Scales: per row (group_size 0) from the whole original row, as RTN (clip_ratio / clip_search
// included); with groups in natural order, from the group's current (error-updated) values rounded to
// float, when its first column comes up; with act_order and groups ("static groups"), from the
// original weights, so codes keep the natural [out][in/group] layout.
typedef struct quarot_gptq_desc {    // zero-init = GPTQ's defaults, 4-bit symmetric per row
    quarot_quant_desc quant;         // bits, asymmetric, group_size, clip_ratio, clip_search
    double damp_ratio;               // 0 = 0.01; < 0: no damping
    int64_t block_size;              // 0 = 128; lazy-update block (speed only), rounded up to a
                                     // multiple of group_size
    int act_order;                   // 0 natural column order, 1 descending diag(H)
} quarot_gptq_desc;

typedef struct quarot_gptq_info {
    double loss;                     // GPTQ's error estimate sum (w - w^)^2 / (2 U_ii^2) over all rows
                                     // and columns; equals ||X (W - W^)^T||^2 for the damped H
    double damp;                     // the value added to diag(H)
    int64_t dead_columns;            // columns with H_ii == 0
    int64_t bad_column;              // QUAROT_ERR_NOT_CONVERGED: original index of the column whose
                                     // Cholesky pivot failed; otherwise -1
} quarot_gptq_info;

// w[out][stride] (first `in` of each row) is overwritten by its fake-quantized values (always equal
// to dequantizing the codes). h[h_n][h_n] is read-only (upper triangle i <= j read; it must be
// symmetric). q [out][in], scales and zeros [out][in/group] are optional (NULL), laid out as in
// quarot_quantize_f32 (zeros required with q when asymmetric). info may be NULL.
// Errors: h_n != in -> QUAROT_ERR_SHAPE_MISMATCH; NaN/Inf in w or h -> QUAROT_ERR_NONFINITE; H not
// numerically positive definite after damping (a Cholesky pivot <= in*DBL_EPSILON*H_jj) ->
// QUAROT_ERR_NOT_CONVERGED; other bad arguments as for the quantizers, plus damp_ratio NaN,
// block_size < 0, act_order not 0/1 -> QUAROT_ERR_INVALID_ARGUMENT. On any error w is untouched.
// Memory (through env): in*(in + 130) + 4096 doubles and 25*in bytes, plus per parallel task
// 32*(in + block + in/group) doubles and 32*in/group + in floats (and about 13 KiB of stack per task
// in AVX2 / AVX-512 builds).
// Cost: in^3/3 multiply-adds (factor: in^3/6 each for Cholesky and inverse) + out*in^2/2 (updates),
// + 51 RTN per group with clip_search.
QUAROT_API quarot_result quarot_gptq_f32(float* w, int64_t out, int64_t in, int64_t stride,
                                         const double* h, int64_t h_n, const quarot_gptq_desc* d,
                                         int8_t* q, float* scales, float* zeros,
                                         quarot_gptq_info* info, const quarot_env* env);

// >>gptq_run
// (no declarations: quarot_gptq_f32 of >>gptq is implemented here)

// >>qgemm
// Integer matrix products for W4A4 / W4A8 / W8A8 inference (docs/algorithms.md §8):
// y[t][o] = sum_k W[o][k] x[t][k] with weights and per-token activations held as quantization codes
// (symmetric, quarot_quantize_f32's codes), accumulated exactly in int32 per weight group, then
// scaled in float:
//     acc[t][o][g] = sum_{k in group g} wq[o][k] * xq[t][k]                        (int32, exact)
//     y[t][o]      = (sum_g f32(acc[t][o][g]) * w_scale[o][g], in g order) * x_scale[t]
// Every ISA computes the same integers and applies the scales with the same float operations in
// the same order (no FMA contraction), so SIMD results are bit-identical to _ref.
// Weight storage (quarot_qmat_pack writes it; engines may write it themselves):
//   - 8 bits: one byte per code, offset binary u = q + 128, row-major [rows][cols].
//   - 4 bits: two codes per byte, offset binary u = q + 8 (q in [-8, 7], u in [0, 15], as ggml's
//     Q4_0). Each group of G codes is packed on its own into ceil(G/2) bytes, in blocks of 128
//     codes (64 bytes): in a block of L codes (L = 128, or G mod 128 for the group's last block)
//     with h = ceil(L/2), byte j (0 <= j < h) holds code j in its LOW nibble and code j + h in its
//     HIGH nibble (a missing code j + h = L, odd L, is stored as u = 8, i.e. 0). So a SIMD register
//     of packed bytes splits into two runs of consecutive codes, matching contiguous activations.
//   Row o starts at byte o * quarot_qmat_row_bytes(bits, cols, group); groups follow each other.
// Activations: int8 codes xq[t][cols] (row stride ldx >= cols) in [-128, 127] (4-bit activations
// are codes in [-8, 7] held in int8: the byte dot product costs the same), a scale per token, and
// the sum of each token's codes per weight group, xsum[t][cols/group] (quarot_qact_sums): the u8 x s8
// dot-product instructions (VNNI vpdpbusd, pmaddubsw) compute sum u*x, and
// acc = sum u*x - offset * xsum, which is exact. Results are specified for xsum equal to those sums.
// Limits keeping every int32 partial sum in range: group <= 2^20 (4 bits), <= 2^16 (8 bits).
// Kernels: REF (also what SSE2 runs), AVX2 (pmaddubsw; AVX-VNNI vpdpbusd when __AVXVNNI__),
// AVX512 (needs AVX512BW; vpdpbusd when __AVX512VNNI__), NEON (sdot when __ARM_FEATURE_DOTPROD).
typedef struct quarot_qmat {          // quantized weights W[rows][cols] (rows = outputs)
    int bits;                         // 4 or 8
    int64_t rows, cols;
    int64_t group;                    // codes per scale along a row; 0 = cols; must divide cols
    const uint8_t* data;              // rows * quarot_qmat_row_bytes(bits, cols, group) bytes
    const float* scales;              // [rows][cols/group]
} quarot_qmat;

// Bytes of one packed row (0 on bad arguments): 8 bits: cols; 4 bits: (cols/group) * ceil(group/2).
QUAROT_API size_t quarot_qmat_row_bytes(int bits, int64_t cols, int64_t group);
// Pack codes q[rows][cols] (each in [-2^(bits-1), 2^(bits-1)-1], else QUAROT_ERR_INVALID_ARGUMENT
// with nothing written) into out (rows * row_bytes).
QUAROT_API quarot_result quarot_qmat_pack(int bits, const int8_t* q, int64_t rows, int64_t cols, int64_t group,
                                          uint8_t* out);
// The inverse: codes q[rows][cols] from packed data.
QUAROT_API quarot_result quarot_qmat_unpack(int bits, const uint8_t* data, int64_t rows, int64_t cols, int64_t group,
                                            int8_t* q);
// xsum[t][g] = sum of xq[t][g*group .. (g+1)*group - 1] (group 0 = cols), for rows tokens.
QUAROT_API quarot_result quarot_qact_sums(const int8_t* xq, int64_t rows, int64_t cols, int64_t ldx, int64_t group,
                                          int32_t* xsum);
// y[t][o] (row stride ldy >= w->rows) for t < rows tokens, as above. Tiles of 4 output rows x 4
// tokens share each unpacked weight vector and each activation load (rows == 1 is the decode
// matrix-vector product). Output rows are split into blocks of 8, and the blocks into 8 runs per
// thread of env's parallel hook; each y element is computed by one task in the same order, so
// results do not depend on the thread count.
// Speed: 64-byte aligned weight rows and activation rows (data, xq and the strides) avoid loads that
// straddle two cache lines; results do not depend on alignment. Errors:
// NULL pointers, bits not 4/8, shapes, group not dividing cols or over the limit, ldx/ldy too small ->
// QUAROT_ERR_INVALID_ARGUMENT; isa not compiled in -> QUAROT_ERR_UNSUPPORTED. Never allocates.
QUAROT_API quarot_result quarot_qgemm(const quarot_qmat* w, const int8_t* xq, int64_t ldx, const float* x_scales,
                                      const int32_t* xsum, int64_t rows, float* y, int64_t ldy, quarot_isa isa,
                                      const quarot_env* env);

// >>qgemm_simd
// (no declarations: the integer kernels of each ISA are private and chosen by quarot_isa)

// >>qgemm_run
// (no declarations: quarot_qgemm's packing and its split into tasks are implemented here)

// >>qgemm_amx
// quarot_qgemm on Intel AMX-INT8 tiles, compiled where __AMX_INT8__ and __AMX_TILE__ are defined
// (x86-64 Linux, gcc or clang): TDPBUSD forms the same integer sums (u8 x s8 products into int32
// lanes, wrapping) and the float steps are quarot_qgemm's, so y is bit-identical to it.
// Linux gives a process tile state only on request: quarot_amx_request() makes that request once
// (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, the call an engine makes) and returns QUAROT_OK
// when the CPU has AMX-INT8 and the kernel granted it, else QUAROT_ERR_UNSUPPORTED: not compiled
// in, no AMX on this CPU, or refused (then run quarot_qgemm, VNNI). Calling it again is harmless.
QUAROT_API quarot_result quarot_amx_request(void);
// Workspace bytes of quarot_qgemm_amx for rows tokens of cols codes: the activations laid out for
// the tiles, 16 tokens at a time ([ceil(rows/16)][cols/64][16][64] bytes), plus 64 for alignment.
QUAROT_API size_t quarot_qgemm_amx_workspace_size(int64_t rows, int64_t cols);
// quarot_qgemm's arguments (no isa) plus workspace. Tiles cover groups of whole 128-code blocks
// (4 bits) or 64-code blocks (8 bits); other shapes run quarot_qgemm's best kernel (same results).
// Errors: as quarot_qgemm; work NULL or smaller than the size above -> QUAROT_ERR_INVALID_ARGUMENT;
// no tile state (not compiled in, or not granted to this process) -> QUAROT_ERR_UNSUPPORTED.
QUAROT_API quarot_result quarot_qgemm_amx(const quarot_qmat* w, const int8_t* xq, int64_t ldx, const float* x_scales,
                                          const int32_t* xsum, int64_t rows, float* y, int64_t ldy, void* work,
                                          size_t work_size, const quarot_env* env);

// >>rotation
// An orthogonal matrix Q of size n (docs/algorithms.md §3), applied to row vectors: x <- x*Q. Q is
// block-diagonal with n/block identical-shape blocks (block == n: one block):
//   HADAMARD            Q_j = D_j * H_block / sqrt(block), D_j = diag(seeded random signs) unless no_signs
//   RANDOM_ORTHOGONAL   Q_j = one seeded Haar-random orthogonal block (dense), the same for every j
//   MATRIX              Q_j = a given orthogonal block (dense, copied; checked to orth_tol)
//   IDENTITY            Q = I
//   ADAPT               Q_j = Had_j * R: the Adapt Rotation (>>adapt). Had_j is the HADAMARD rotation of
//                       the block with the same seed (signs spanning all n), built from Hadamard blocks of
//                       order hb = block when one exists, else the largest available order dividing block
//                       (fallback ERROR: QUAROT_ERR_UNSUPPORTED_SIZE instead); R = matrix [block][block]
//                       (orthogonal to orth_tol, copied) is applied after it: x_j <- (x_j*Had_j)*R.
//                       R exactly I skips the dense product, so ADAPT with R = I equals HADAMARD of block
//                       hb bit for bit. plan.n is hb; no_signs is honoured.
// When no Hadamard matrix of the block size exists, `fallback` decides: the largest available
// Hadamard block dividing n (block-diagonal), a random orthogonal matrix, or an error. quarot_rotation
// records what was built in `kind`, `block` and the readable `text`.
typedef enum quarot_rotation_kind {
    QUAROT_ROTATION_DEFAULT = 0,             // = HADAMARD
    QUAROT_ROTATION_HADAMARD = 1,
    QUAROT_ROTATION_RANDOM_ORTHOGONAL = 2,
    QUAROT_ROTATION_MATRIX = 3,
    QUAROT_ROTATION_IDENTITY = 4,
    QUAROT_ROTATION_ADAPT = 5,               // random Hadamard times a dense block R (Adapt Rotation; the
                                             // processor builds it from desc.context)
    QUAROT_ROTATION_FORCE_I32 = 0x7fffffff
} quarot_rotation_kind;

typedef enum quarot_fallback {
    QUAROT_FALLBACK_DEFAULT = 0,             // = BLOCK, and RANDOM_ORTHOGONAL when no block > 1 exists
    QUAROT_FALLBACK_BLOCK = 1,               // block-diagonal Hadamard, largest available block dividing n
    QUAROT_FALLBACK_RANDOM_ORTHOGONAL = 2,   // dense seeded random orthogonal of the whole size
    QUAROT_FALLBACK_ERROR = 3,               // QUAROT_ERR_UNSUPPORTED_SIZE
    QUAROT_FALLBACK_FORCE_I32 = 0x7fffffff
} quarot_fallback;

typedef struct quarot_rotation_desc {        // zero-init + n = random Hadamard of size n, seed 0
    quarot_rotation_kind kind;
    int64_t n;                               // size of the vectors it rotates
    int64_t block_size;                      // <= 0: n (one block); else block-diagonal, must divide n
    uint64_t seed;                           // signs / random matrix
    int no_signs;                            // HADAMARD: plain normalized H (what online rotations use)
    quarot_fallback fallback;
    const double* matrix;                    // MATRIX / ADAPT: [block][block] row-major orthogonal, copied
    double orth_tol;                         // MATRIX / ADAPT: max|M^T M - I| accepted; 0 = 1e-6
} quarot_rotation_desc;

typedef struct quarot_rotation {
    quarot_rotation_kind kind;               // as built (a fallback may change it)
    int64_t n, block;                        // n/block blocks
    quarot_hadamard_plan plan;               // HADAMARD: the transform of size `block` (ADAPT: of size hb)
    float* signs;                            // HADAMARD with signs: [n] +-1, NULL otherwise
    double* signs64;                         // the same in double
    double* dense;                           // RANDOM_ORTHOGONAL / MATRIX / ADAPT (NULL when R = I): [block][block]
    float* dense32;                          // the same in float
    quarot_env env;
    char text[160];                          // e.g. "hadamard 172 (table) x 2^0, random signs"
} quarot_rotation;

QUAROT_API quarot_result quarot_rotation_init(quarot_rotation* r, const quarot_rotation_desc* d, const quarot_env* env);
QUAROT_API void          quarot_rotation_free(quarot_rotation* r);
// Workspace bytes for one apply call on any number of rows (the dense path works in chunks of rows).
QUAROT_API size_t        quarot_rotation_workspace_size(const quarot_rotation* r);
// x[rows][stride], first n elements of each row: x <- x*Q (transpose = 0) or x*Q^T (transpose = 1).
// work == NULL: temporary memory comes from the rotation's env (set-up paths); engines pass work.
// A zeroed rotation, or one whose init failed, gives QUAROT_ERR_STATE.
QUAROT_API quarot_result quarot_rotation_apply_f32(const quarot_rotation* r, float* x, int64_t rows, int64_t stride,
                                                   int transpose, void* work, size_t work_size);
QUAROT_API quarot_result quarot_rotation_apply_f64(const quarot_rotation* r, double* x, int64_t rows, int64_t stride,
                                                   int transpose, void* work, size_t work_size);
// The whole matrix Q [n][n] (row-major).
QUAROT_API quarot_result quarot_rotation_to_dense_f64(const quarot_rotation* r, double* q);

// >>model
// What a model is to the library: its architecture config and callbacks that give access to its
// weights by Hugging Face-style names ("model.embed_tokens.weight",
// "model.layers.{i}.self_attn.q_proj.weight", "model.layers.{i}.mlp.down_proj.weight",
// "model.norm.weight", "lm_head.weight", ...). Linear weights are W[out][in] (ne = {in, out}),
// biases [out], norm gains/biases [hidden], embeddings [vocab][hidden].
typedef enum quarot_norm_kind {
    QUAROT_NORM_DEFAULT = 0,     // = RMS
    QUAROT_NORM_RMS = 1,         // y = x / rms(x) * g
    QUAROT_NORM_LAYER = 2,       // y = (x - mean) / std * g + b
    QUAROT_NORM_FORCE_I32 = 0x7fffffff
} quarot_norm_kind;

typedef enum quarot_mlp_kind {
    QUAROT_MLP_DEFAULT = 0,      // = GATED
    QUAROT_MLP_GATED = 1,        // down(act(gate(x)) * up(x))
    QUAROT_MLP_PLAIN = 2,        // down(act(up(x)))  (OPT: fc1 -> act -> fc2)
    QUAROT_MLP_FORCE_I32 = 0x7fffffff
} quarot_mlp_kind;

typedef enum quarot_act_kind {
    QUAROT_ACT_DEFAULT = 0,      // = SILU
    QUAROT_ACT_SILU = 1,
    QUAROT_ACT_RELU = 2,
    QUAROT_ACT_GELU = 3,         // tanh approximation
    QUAROT_ACT_FORCE_I32 = 0x7fffffff
} quarot_act_kind;

typedef struct quarot_model_config {
    char arch[32];               // adapter name: "llama", "qwen2", "qwen3", "opt", ...
    int64_t hidden;              // residual stream width
    int64_t intermediate;        // MLP inner width
    int64_t n_layers;
    int64_t n_heads;
    int64_t n_kv_heads;          // 0 = n_heads
    int64_t head_dim;            // 0 = hidden / n_heads
    int64_t vocab;
    int64_t max_seq;             // context length (informative)
    quarot_norm_kind norm;
    quarot_mlp_kind mlp;
    quarot_act_kind act;
    float norm_eps;              // 0 = 1e-5
    float rope_theta;            // 0 = 10000
    int rope_interleaved;        // 1: RoPE rotates pairs (2i, 2i+1) (llama2.c, GGUF); 0: halves (HF)
    int tied_embeddings;         // no lm_head tensor: the output projection is the embedding
    int attn_qkv_bias;           // q/k/v projections have biases (Qwen2)
    int attn_out_bias;           // o_proj has a bias (OPT)
    int mlp_bias;                // MLP linears have biases (OPT)
    int qk_norm;                 // per-head RMSNorm of q and k before RoPE (Qwen3)
    // Mixture of experts (n_experts 0: every layer is dense). Layer i is an MoE layer when
    // n_experts > 0, i is not in mlp_only_layers and (i + 1) % sparse_step == 0 (sparse_step 0 = 1):
    // quarot_config_layer_is_moe. Its MLP is a router [n_experts][hidden] (softmax, top
    // n_experts_used, renormalized when norm_topk_prob), the routed experts (gated MLPs of
    // expert_intermediate) and, when shared_intermediate > 0, one shared expert scaled by
    // sigmoid(shared_expert_gate . x) (Qwen2-MoE).
    int64_t n_experts;
    int64_t n_experts_used;      // top-k
    int64_t expert_intermediate; // 0 = intermediate
    int64_t shared_intermediate; // 0: no shared expert
    int norm_topk_prob;
    int experts_stacked;         // 1: one 3-D tensor [n_experts][out][in] per projection (GGUF); 0: one per expert
    int64_t sparse_step;         // decoder_sparse_step
    const int64_t* mlp_only_layers;   // dense layers by index (not owned; NULL = none)
    int64_t n_mlp_only_layers;
} quarot_model_config;

// 1 when layer `layer` of cfg has a mixture-of-experts MLP (see quarot_model_config).
QUAROT_API int quarot_config_layer_is_moe(const quarot_model_config* cfg, int64_t layer);

// Tensor access. Names are NUL-terminated, at most QUAROT_NAME_MAX-1 bytes.
#define QUAROT_NAME_MAX 128

// A model the processor can rotate: its config plus callbacks into the engine's own storage.
// get_tensor returns a view (quarot_tensor) that the processor reads and writes in place, in the
// tensor's own dtype (f32, f16, bf16 or f64). Global tensors (embeddings, final norm, lm_head) are
// accessible at any time; a decoder layer's tensors between acquire_layer(i) and release_layer(i)
// (both optional: NULL means everything is always in memory). The processor holds at most one
// decoder layer at a time, and visits layers in order, twice: a validation pass that reads
// (modified = 0 on release) and the rotation pass that writes (modified = 1).
typedef struct quarot_model {
    quarot_model_config config;   // the processor updates it: norm -> RMS after mean baking,
                                  // tied_embeddings -> 0 when it unties the output projection
    void* user_data;
    // QUAROT_ERR_NOT_FOUND when there is no such tensor.
    quarot_result (*get_tensor)(void* user_data, const char* name, quarot_tensor* out);
    // Create a zero-filled contiguous tensor (untying embeddings, a bias a LayerNorm bias is fused
    // into). May be NULL: then a rotation that needs it fails during validation, before any change.
    quarot_result (*create_tensor)(void* user_data, const char* name, quarot_dtype dtype, int n_dims,
                                   const int64_t* ne, quarot_tensor* out);
    quarot_result (*acquire_layer)(void* user_data, int64_t layer);
    quarot_result (*release_layer)(void* user_data, int64_t layer, int modified);
    quarot_env env;               // allocator and parallel hook for the processor
    char error[256];              // filled on failure: which tensor, which shape, why
    // Optional (NULL: not called). Set, a decoder layer runs tensor by tensor (where the layer has no
    // mean bakes and fusions are not separate): the norms are read and reset first, then each
    // weight gets its norm scaling and all its commands, and tensor_done(name) says the processor is
    // done with that weight (then with its bias) until release_layer: a binding that copies a
    // tensor on its first get_tensor can write and free it here, so a layer of many experts never
    // exists whole in working precision. The results are the same bits as without it.
    quarot_result (*tensor_done)(void* user_data, const char* name);
} quarot_model;

// >>adapter
// What a model family tells the processor, as plain data (a quarot_plan) built from the config:
//   fusions    norm -> the linears reading its output (W <- W*diag(g), b <- b + W_old*beta)
//   bakes      LayerNorm families only: embeddings and residual writers to centre (mean baking)
//   rotations  R1 readers (input side), writers (output side) and embeddings; R2 v_proj (output side,
//              per KV head) and o_proj (input side, per head)
//   layers     per decoder layer: the o_proj/v_proj pair and the up_proj/down_proj pair, for online
//              rotation; and the head geometry.
// Built-in adapters fill it from name templates; a new family either fills quarot_adapter_names or
// writes its own build function with the quarot_plan_add_* calls. The processor never looks at
// names itself, so any family works without changing it.
typedef enum quarot_side {
    QUAROT_SIDE_DEFAULT = 0,        // invalid in commands
    QUAROT_SIDE_INPUT = 1,          // a reader: W[out][in] <- W*Q (each row x <- x*Q)
    QUAROT_SIDE_OUTPUT = 2,         // a writer: W <- Q^T*W and b <- b*Q; for an embedding E[vocab][hidden],
                                    // whose output is its row: E <- E*Q. Same operation, either tensor.
    QUAROT_SIDE_FORCE_I32 = 0x7fffffff
} quarot_side;

typedef enum quarot_rotation_id {
    QUAROT_ROT_R1 = 0,              // residual stream, size hidden
    QUAROT_ROT_R2 = 1,              // per attention head, size head_dim (v_proj / o_proj)
    QUAROT_ROT_R4 = 2,              // down_proj input, size intermediate (online; offline half on down_proj)
    QUAROT_ROT_HEADS = 3,           // o_proj input across heads, H_heads (x) I (online; offline half on o_proj)
    QUAROT_ROT_R4_EXPERT = 4,       // each routed expert's down_proj input, size expert_intermediate (online)
    QUAROT_ROT_R4_SHARED = 5,       // the shared expert's down_proj input, size shared_intermediate (online)
    QUAROT_ROT_COUNT_ = 6,
    QUAROT_ROT_FORCE_I32 = 0x7fffffff
} quarot_rotation_id;

typedef struct quarot_plan_fusion {
    int64_t layer;                          // -1 for a global norm
    char norm_weight[QUAROT_NAME_MAX];
    char norm_bias[QUAROT_NAME_MAX];        // "" for RMSNorm
    int64_t first_linear, n_linears;        // into quarot_plan.linears
} quarot_plan_fusion;

typedef struct quarot_plan_linear {
    char weight[QUAROT_NAME_MAX];
    char bias[QUAROT_NAME_MAX];             // the name its bias has or would have ("" = cannot have one)
} quarot_plan_linear;

typedef struct quarot_plan_bake {
    int64_t layer;
    int embedding;                          // 1: centre each row (E[vocab][hidden]); 0: a writer linear
    char weight[QUAROT_NAME_MAX];
    char bias[QUAROT_NAME_MAX];
} quarot_plan_bake;

typedef struct quarot_plan_rotation {
    int64_t layer;                          // -1: global (embeddings, lm_head)
    quarot_rotation_id rotation;            // R1 or R2 (the processor adds R4 / HEADS itself)
    quarot_side side;
    int embedding;                          // the tensor is an embedding table [vocab][hidden]
    int per_head;                           // the rotation applies to every head_dim slice of the axis
    char weight[QUAROT_NAME_MAX];
    char bias[QUAROT_NAME_MAX];             // rotated with an OUTPUT-side weight when it exists
    // A fused reader (Phi-3's qkv_proj = q|k|v, gate_up_proj = gate|up): an OUTPUT-side rotation may
    // act on rows [row0, row0 + rows) of the weight (and the same range of its bias) only, e.g. R2 on
    // the v rows; rows_of is then the weight's row count the range was computed for (checked; 0 = any).
    // rows = 0: the whole tensor (every other entry).
    int64_t row0, rows, rows_of;
} quarot_plan_rotation;

typedef struct quarot_plan_block quarot_plan_block;   // >>moe

typedef struct quarot_plan_layer {
    char o_proj[QUAROT_NAME_MAX], v_proj[QUAROT_NAME_MAX];      // weight names
    char up_proj[QUAROT_NAME_MAX], down_proj[QUAROT_NAME_MAX];
    // Fused readers: v_proj / up_proj may name a tensor that holds more than those rows; these give
    // the rows that are v's (of q|k|v) and up's (of gate|up). rows = 0: the whole tensor.
    int64_t v_row0, v_rows, up_row0, up_rows;
} quarot_plan_layer;

typedef struct quarot_plan {
    quarot_plan_fusion* fusions;     int64_t n_fusions, cap_fusions;
    quarot_plan_linear* linears;     int64_t n_linears, cap_linears;
    quarot_plan_bake* bakes;         int64_t n_bakes, cap_bakes;
    quarot_plan_rotation* rotations; int64_t n_rotations, cap_rotations;
    quarot_plan_layer* layers;       int64_t n_layers;
    char embed[QUAROT_NAME_MAX];     // token embedding weight
    char lm_head[QUAROT_NAME_MAX];   // output projection weight (created when untying)
    char final_norm_weight[QUAROT_NAME_MAX];
    int64_t n_heads, n_kv_heads, head_dim;
    quarot_env env;
    quarot_plan_block* blocks;       int64_t n_blocks, cap_blocks;   // MLP blocks of MoE layers (>>moe)
} quarot_plan;

// Name templates of the built-in families; "{i}" stands for the layer index. NULL = absent.
typedef struct quarot_adapter_names {
    const char* embed;              // "model.embed_tokens.weight"
    const char* pos_embed;          // learned positions (OPT) or NULL
    const char* final_norm;         // prefix: "model.norm" (+ ".weight", ".bias")
    const char* lm_head;            // "lm_head.weight"
    const char* layer;              // "model.layers.{i}."  (prefix of every per-layer name below)
    const char* attn_norm;          // "input_layernorm"
    const char* mlp_norm;           // "post_attention_layernorm"
    const char* q_proj, *k_proj, *v_proj, *o_proj;   // prefixes ("self_attn.q_proj"); + ".weight"/".bias"
    const char* gate_proj;          // NULL for a plain MLP
    const char* up_proj, *down_proj;
    // Mixture of experts (NULL for dense families), prefixes under `layer` like the above; "{e}"
    // stands for the expert index. Stacked names are used with config.experts_stacked.
    const char* router;             // "mlp.gate"
    const char* expert_gate, *expert_up, *expert_down;      // "mlp.experts.{e}.gate_proj", ...
    const char* stacked_gate, *stacked_up, *stacked_down;   // "mlp.experts.gate_proj" (3-D), ...
    const char* shared_gate, *shared_up, *shared_down;      // "mlp.shared_expert.gate_proj" or NULL
    const char* shared_expert_gate;                         // "mlp.shared_expert_gate" or NULL
} quarot_adapter_names;

typedef struct quarot_adapter quarot_adapter;
struct quarot_adapter {
    const char* arch;                          // "llama", "mistral", "qwen2", "qwen3", "opt", ...
    const quarot_adapter_names* names;         // used by quarot_adapter_build_from_names
    // Fill plan (initialized and empty) for cfg. block_size is the R1 block size asked for (-1 full).
    quarot_result (*build)(const quarot_adapter* self, const quarot_model_config* cfg, int64_t block_size,
                           quarot_plan* plan);
    void* user_data;
};

// A vision-language model's text decoder (Qwen2-VL, Qwen2.5-VL): the decoder as
// quarot_adapter_build_from_names describes it, plus the one vision tensor that writes into the text
// residual stream, the merger's output projection (weight [hidden][in] and bias [hidden]), rotated on
// the output side by R1 so that image embeddings enter the rotated stream. The rest of the vision
// tower reads only its own activations and is left as it is.
typedef struct quarot_adapter_vision {
    const char* merger_weight;      // "visual.merger.mlp.2.weight"
    const char* merger_bias;        // "visual.merger.mlp.2.bias" (or "" / NULL: none)
} quarot_adapter_vision;

// The build function of such families: self->names as for quarot_adapter_build_from_names and
// self->user_data a quarot_adapter_vision. Built in: "qwen2vl" (Hugging Face's older layout,
// model.layers.* and visual.*) and "qwen2vl-lm" (the newer one, model.language_model.* and
// model.visual.*); Qwen2.5-VL's decoder and merger have the same names.
QUAROT_API quarot_result quarot_adapter_build_vision_names(const quarot_adapter* self,
                                                           const quarot_model_config* cfg, int64_t block_size,
                                                           quarot_plan* plan);

// Built-in adapters by architecture name (case-sensitive), NULL if unknown.
QUAROT_API const quarot_adapter* quarot_adapter_find(const char* arch);
// "llama, mistral, qwen2, qwen3, opt"
QUAROT_API const char* quarot_adapter_list(void);
// The generic build function of the built-ins, for adapters that only provide names.
QUAROT_API quarot_result quarot_adapter_build_from_names(const quarot_adapter* self, const quarot_model_config* cfg,
                                                         int64_t block_size, quarot_plan* plan);
// Fused readers: q|k|v in one weight ("self_attn.qkv_proj": n_heads*head_dim rows, then
// n_kv_heads*head_dim twice) and gate|up in one ("mlp.gate_up_proj": intermediate rows twice).
// NULL = that side is separate (quarot_adapter_names' q/k/v_proj or gate/up_proj).
typedef struct quarot_adapter_fused {
    const char* qkv_proj;
    const char* gate_up_proj;
} quarot_adapter_fused;

// The build function of families with fused readers: self->names as for quarot_adapter_build_from_names
// (the fused side's separate names unused, may be NULL) and self->user_data a quarot_adapter_fused.
// Each fused weight is one reader for the norm fusion and R1, R2 acts on its v rows only, and the
// plan's layers record the v and up row ranges.
QUAROT_API quarot_result quarot_adapter_build_fused_names(const quarot_adapter* self, const quarot_model_config* cfg,
                                                          int64_t block_size, quarot_plan* plan);

QUAROT_API void quarot_plan_init(quarot_plan* plan, const quarot_env* env);
QUAROT_API void quarot_plan_free(quarot_plan* plan);
// Builders for adapters (names are copied; QUAROT_ERR_INVALID_ARGUMENT when a name is too long).
QUAROT_API quarot_result quarot_plan_add_fusion(quarot_plan* p, int64_t layer, const char* norm_weight,
                                                const char* norm_bias);
// (to the last fusion)
QUAROT_API quarot_result quarot_plan_add_fused_linear(quarot_plan* p, const char* weight, const char* bias);
QUAROT_API quarot_result quarot_plan_add_bake(quarot_plan* p, int64_t layer, int embedding, const char* weight,
                                              const char* bias);
QUAROT_API quarot_result quarot_plan_add_rotation(quarot_plan* p, int64_t layer, quarot_rotation_id rotation,
                                                  quarot_side side, int embedding, int per_head, const char* weight,
                                                  const char* bias);
QUAROT_API quarot_result quarot_plan_set_layers(quarot_plan* p, int64_t n_layers);
// An OUTPUT-side rotation on rows [row0, row0 + rows) of a weight of rows_of rows (0 = any) and of
// its bias (see quarot_plan_rotation); rows = 0 is quarot_plan_add_rotation.
QUAROT_API quarot_result quarot_plan_add_rotation_rows(quarot_plan* p, int64_t layer, quarot_rotation_id rotation,
                                                       int embedding, int per_head, const char* weight,
                                                       const char* bias, int64_t row0, int64_t rows, int64_t rows_of);
// Expand a template: "{i}" -> layer index. QUAROT_ERR_INVALID_ARGUMENT when the result is too long.
QUAROT_API quarot_result quarot_name_format(char* out, const char* prefix, const char* tmpl, const char* suffix,
                                            int64_t layer);

// >>moe
// The MLP of a mixture-of-experts layer as a list of blocks. Every block's readers are also fused
// linears of the layer's MLP norm and R1 readers, its down_proj an R1 writer (the plan's other
// arrays); a block says what the processor does beyond that: online R4 per expert (EXPERTS, SHARED)
// and which readers stay unquantized (ROUTER, SHARED_GATE: they choose experts and scale the shared
// one, so the tool keeps them in the input's precision). A layer with blocks has no dense
// up_proj / down_proj in quarot_plan_layer. Expert weights are one tensor per expert or one 3-D tensor
// [n_experts][out][in] per projection; commands on a 3-D tensor run on one expert's 2-D view at a time,
// so no more than one expert's rows are in double at once. Built-in: "mixtral" (block_sparse_moe.gate,
// experts.{e}.w1/w3/w2), "qwen2_moe" (mlp.gate, mlp.experts.{e}.*_proj, mlp.shared_expert.*,
// mlp.shared_expert_gate) and "qwen3_moe" (no shared expert); dense layers of a MoE model keep
// the dense names (quarot_config_layer_is_moe).
typedef enum quarot_block_kind {
    QUAROT_BLOCK_NONE = 0,
    QUAROT_BLOCK_EXPERTS = 1,       // routed experts: expert >= 0 one of them (a tensor per expert), or
                                    //   expert = -1 all n_experts as 3-D tensors [n_experts][out][in]
    QUAROT_BLOCK_SHARED = 2,        // the shared expert (always on)
    QUAROT_BLOCK_ROUTER = 3,        // router [n_experts][hidden] (weight)
    QUAROT_BLOCK_SHARED_GATE = 4,   // shared-expert gate [1][hidden] (weight)
    QUAROT_BLOCK_FORCE_I32 = 0x7fffffff
} quarot_block_kind;

struct quarot_plan_block {
    int64_t layer;
    quarot_block_kind kind;
    int64_t expert;                         // EXPERTS: the index, -1 = all (stacked 3-D); else -1
    int64_t n_experts;                      // EXPERTS: the layer's routed experts; else 1
    int64_t intermediate;                   // EXPERTS / SHARED: inner width (the R4 size)
    char weight[QUAROT_NAME_MAX];           // ROUTER / SHARED_GATE
    char gate[QUAROT_NAME_MAX], up[QUAROT_NAME_MAX], down[QUAROT_NAME_MAX];   // EXPERTS / SHARED
};

// Append an MLP block; names of the kinds that do not use them may be NULL.
QUAROT_API quarot_result quarot_plan_add_block(quarot_plan* p, int64_t layer, quarot_block_kind kind, int64_t expert,
                                               int64_t n_experts, int64_t intermediate, const char* weight,
                                               const char* gate, const char* up, const char* down);

// >>command
// A rotate command: one tensor, one side, one rotation, applied exactly once. The rotation is applied
// along the chosen axis viewed as [outer][n][inner] (n = the rotation's size): outer > 1 slices the
// axis (per head, per tensor-parallel block), inner > 1 transforms across slices (the heads axis,
// H_heads (x) I). Commands are plain data; the processor generates, filters by layer and runs them.
typedef struct quarot_command {
    int64_t layer;                  // -1: global
    quarot_rotation_id rotation;
    quarot_side side;
    int embedding;
    int64_t outer, inner;           // axis length = outer * rotation size * inner
    char weight[QUAROT_NAME_MAX];
    char bias[QUAROT_NAME_MAX];     // "" = none
    int runs;                       // times executed (the processor checks it ends at exactly 1)
    // 0 (default): double arithmetic, rounded once on write. 1: a weight stored in F32 under a
    // HADAMARD rotation is rotated in place in single precision (quarot_rotation_apply_f32: the SIMD
    // transform, no f64 round trip); other dtypes / kinds, and the bias, keep double. For a vector x
    // of the rotated axis and each element, |y_f32 - y_f64| <= (log2(block) + 2) * 2^-24 * ||x||_2
    // (one rounding per butterfly stage of an orthogonal transform, plus the sign and the scale):
    // meant for weights rounded to f16 / bf16 afterwards (2^-11 / 2^-8 relative), where it moves a
    // small share of values by one unit in the last place. Set by the caller on the processor's
    // commands after quarot_processor_init (the tool does so when the output is f16 / bf16).
    int f32;
    // rows > 0: an OUTPUT-side command on rows [row0, row0 + rows) of the weight and of its bias only
    // (a fused reader's v rows, from quarot_plan_rotation); the weight must have rows_of rows when
    // rows_of > 0. quarot_command_apply takes the tensors as given (the caller passes the row view).
    int64_t row0, rows, rows_of;
} quarot_command;

// Apply one command's arithmetic to a tensor (and its bias, may be NULL) in double precision, writing
// back in the tensor's dtype. Validates shapes first (QUAROT_ERR_SHAPE_MISMATCH: nothing written).
QUAROT_API quarot_result quarot_command_apply(const quarot_command* c, const quarot_rotation* rot,
                                              quarot_tensor* weight, quarot_tensor* bias, const quarot_env* env);

// >>online
// Online rotations the inference engine must run, as plain data (STYLE.md: no callbacks). At a site
// the activation row of length `size` is viewed as [outer][n][inner] and every vector along the
// n axis becomes v <- v * D * H_n / sqrt(n) (D = diag(signs) when present, H_n = H_K (x) H_{2^m}).
//   DOWN_INPUT  input of down_proj [intermediate]: outer = tensor-parallel blocks, inner = 1
//   O_INPUT     input of o_proj [n_heads*head_dim]: across heads, n = heads per block, inner = head_dim
//   Q_ROPE      q after RoPE (and q_norm) [n_heads*head_dim]: per head, outer = n_heads, n = head_dim
//   K_ROPE      k after RoPE [n_kv_heads*head_dim]: per KV head (before the KV cache)
typedef enum quarot_online_site {
    QUAROT_SITE_NONE = 0,
    QUAROT_SITE_DOWN_INPUT = 1,
    QUAROT_SITE_O_INPUT = 2,
    QUAROT_SITE_Q_ROPE = 3,
    QUAROT_SITE_K_ROPE = 4,
    QUAROT_SITE_EXPERT_DOWN_INPUT = 5,  // input of each routed expert's down_proj [expert_intermediate], applied
                                        //   to whichever experts a token is routed to (hook.experts says how many)
    QUAROT_SITE_SHARED_DOWN_INPUT = 6,  // input of the shared expert's down_proj [shared_intermediate]
    QUAROT_SITE_COUNT_ = 7,
    QUAROT_SITE_FORCE_I32 = 0x7fffffff
} quarot_online_site;

typedef struct quarot_online_hook {
    int64_t layer;
    quarot_online_site site;
    int64_t size, outer, n, inner;          // size = outer * n * inner
    int64_t K;                              // n = K * 2^m (the construction, for engines)
    int m;
    float* signs;                           // [n] +-1 or NULL (owned by the list)
    const quarot_hadamard_plan* plan;       // owned by the list
    int64_t experts;                        // EXPERT_DOWN_INPUT: the routed experts it covers (0..experts-1); else 0
} quarot_online_hook;

typedef struct quarot_online_list {
    quarot_online_hook* hooks;
    int64_t count, cap;
    quarot_hadamard_plan** plans;           // one per distinct n
    int64_t n_plans;
    quarot_env env;
} quarot_online_list;

QUAROT_API void quarot_online_list_init(quarot_online_list* list, const quarot_env* env);
QUAROT_API void quarot_online_list_free(quarot_online_list* list);
// Append a hook (builds / shares the Hadamard plan of size n; copies signs when not NULL).
QUAROT_API quarot_result quarot_online_list_add(quarot_online_list* list, int64_t layer, quarot_online_site site,
                                                int64_t size, int64_t outer, int64_t n, int64_t inner,
                                                const float* signs);
// The hook for (layer, site), or NULL.
QUAROT_API const quarot_online_hook* quarot_online_find(const quarot_online_list* list, int64_t layer,
                                                        quarot_online_site site);
QUAROT_API const char* quarot_online_site_name(quarot_online_site site);   // "down_input", ...
// Workspace bytes quarot_online_apply needs for this hook (any row count).
QUAROT_API size_t quarot_online_workspace_size(const quarot_online_hook* hook);
// Run a hook on x[rows][stride] (first `size` elements of each row), in place, without allocating.
QUAROT_API quarot_result quarot_online_apply(const quarot_online_hook* hook, float* x, int64_t rows, int64_t stride,
                                             void* work, size_t work_size);

// Text serialization, version 1 (specified in docs/formats.md, "Online hook file"):
//   quarot-online 1
//   hooks <count>
//   weights <digest>        (optional, anywhere before 'end': names the weights the hooks belong to;
//                            quarot_online_read skips it, the tool compares it with the model's)
//   hook <layer> <site> size=<s> outer=<o> n=<n> inner=<i> K=<K> m=<m> signs=<hex or ->
//                           (site expert_down_input: "m=<m> experts=<count> signs=")
//   ...
//   hadamard <K>            (one block per distinct K > 1: K rows of '+'/'-', so engines without
//   <K rows>                 quarot.h can rebuild H_K)
//   end
// quarot_online_write writes into buf (cap bytes) and sets *needed to the full length + 1; call with
// buf = NULL to size it. quarot_online_read parses text of `len` bytes into an empty list, validating
// every field (QUAROT_ERR_PARSE with the line in err) and that embedded matrices equal quarot.h's.
QUAROT_API quarot_result quarot_online_write(const quarot_online_list* list, char* buf, size_t cap, size_t* needed);
QUAROT_API quarot_result quarot_online_read(quarot_online_list* list, const char* text, size_t len, char* err,
                                            size_t err_size);

// >>processor
typedef struct quarot_adapt_context quarot_adapt_context;   // see >>adapt

// QuaRot's processor (docs/algorithms.md §6): validate everything, then pre_run (global tensors:
// untie, final-norm fusion, embedding and lm_head rotation, online matrices), then each decoder layer
// in order (its fusions, bakes, rotate commands, online halves and hooks), then post_run (leftovers
// and the exactly-once check). Weights are rewritten in place in their own dtype.
typedef enum quarot_layer_select {
    QUAROT_LAYERS_DEFAULT = 0,      // = ALL
    QUAROT_LAYERS_ALL = 1,
    QUAROT_LAYERS_LIST = 2,         // the layers in the list only (msModelSlim's down_proj_online_layers)
    QUAROT_LAYERS_NONE = 3,
    QUAROT_LAYERS_FORCE_I32 = 0x7fffffff
} quarot_layer_select;

typedef struct quarot_rotate_desc {            // zero-init = R1 + R2 random Hadamard, offline only
    const quarot_adapter* adapter;             // NULL: quarot_adapter_find(model->config.arch)
    quarot_rotation_kind rotation;             // R1: HADAMARD (default), RANDOM_ORTHOGONAL, MATRIX,
                                               //     ADAPT (matrix from an Adapt Rotation context)
    const double* matrix;                      // MATRIX: [b][b], b = block size or hidden
    const quarot_adapt_context* context;       // ADAPT
    uint64_t seed;
    int64_t block_size;                        // <= 0 (or -1): full hidden; else block-diagonal R1
    quarot_fallback fallback;                  // R1 when hidden has no Hadamard
    int no_r2;                                 // 1: skip R2 (v_proj / o_proj per head)
    quarot_rotation_kind r2_rotation;          // HADAMARD (default), RANDOM_ORTHOGONAL, or MATRIX: one R2
                                               //     per layer from r2_matrices (below)
    int online;                                // 1: o_proj heads rotation + down_proj R4, online hooks
    int64_t max_tp_size;                       // online rotations never cross 1/max_tp_size of a dim; 0 = 1
    quarot_layer_select down_proj_online;      // which layers get the online down_proj rotation
    const int64_t* down_proj_online_layers;    // LIST
    int64_t n_down_proj_online_layers;
    int r3;                                    // 1: q/k online rotation after RoPE (for KV-cache quantization)
    quarot_online_list* online_out;            // receives the hooks (required with online or r3)
    // Optional observers. on_command may return 0 (run), 1 (skip) or 2 (run twice): a debugging and
    // testing aid; anything but 0 makes the final exactly-once check fail. It is called before the
    // command runs: a reader whose norm scaling rides on this command (separate_fusions below) is
    // not scaled yet (with 1 or 2 it is scaled first, then skipped or rotated twice).
    int (*on_command)(void* user, const quarot_command* c);
    void (*progress)(void* user, const char* stage, int64_t layer, int64_t n_layers);
    void* user_data;
    // 0 (default): init reads every value of every tensor it will touch and refuses NaN / Inf
    // (QUAROT_ERR_NONFINITE) before anything is modified. 1: the caller checks the values itself
    // (e.g. while it copies them in acquire_layer, refusing the layer there); init then checks
    // names, shapes and dtypes only and reads no values (for the final norm, only whether it is all
    // ones), so "a failure in init leaves the model untouched" covers those checks only.
    int values_checked_by_caller;
    // 0 (default): a fusion's scaling of a reader rides on the reader's first rotate command where
    // that gives the same bits (an F32 weight, a single-precision Hadamard command along its input:
    // one pass over the weight instead of two; see quarot_processor.fused_into_commands). 1: every
    // fusion scales its weights in a pass of its own (the reference the tests compare against).
    int separate_fusions;
    // r2_rotation MATRIX: [n_layers][head_dim][head_dim], layer i's R2 (e.g. learned, >>train_model),
    // each orthogonal to 1e-6 (copied), applied where the shared R2 would be (v_proj output per KV
    // head, o_proj input per head).
    const double* r2_matrices;
} quarot_rotate_desc;

// A tensor the processor will create (so that writers can plan an output file before the first
// layer is processed): the untied output projection, biases that LayerNorm biases are fused into.
typedef struct quarot_tensor_spec {
    char name[QUAROT_NAME_MAX];
    quarot_dtype dtype;
    int n_dims;
    int64_t ne[QUAROT_MAX_DIMS];
} quarot_tensor_spec;

typedef struct quarot_processor {
    quarot_model* model;
    quarot_rotate_desc desc;
    const quarot_adapter* adapter;
    quarot_plan plan;
    quarot_rotation rot[QUAROT_ROT_COUNT_];    // R1, R2, R4, HEADS (unused ones are IDENTITY)
    int have_rot[QUAROT_ROT_COUNT_];
    quarot_rotation r3;                        // head_dim, plain H (online q/k)
    quarot_command* commands;
    int64_t n_commands;
    int untie;                                 // pre_run creates lm_head from the embedding
    quarot_tensor_spec* creates;               // after init: every tensor create_tensor will be asked for
    int64_t n_creates, cap_creates;
    int stage;                                 // 0 new, 1 validated, 2 pre_run done, 3 post_run done
    int64_t next_layer;
    int64_t rows_total, rows_next;             // quarot_processor_pre_run_rows: the vocabulary rows, the next window's
                                               // first
    int64_t fused_into_commands;               // weights whose norm scaling rode on their first command
                                               // (desc.separate_fusions)
    quarot_rotation* r2_layers;                // [n_layers] with desc.r2_matrices (rot[R2] = layer 0's); else NULL
} quarot_processor;

// The steps one by one (quarot_rotate_model runs them all). init builds the plan, the rotations and
// the commands and validates every tensor (reading each layer once); nothing is modified before
// pre_run, and p->creates then lists the tensors later steps will create. Each call checks it
// comes in order (QUAROT_ERR_STATE).
QUAROT_API quarot_result quarot_processor_init(quarot_processor* p, quarot_model* model,
                                               const quarot_rotate_desc* desc);
QUAROT_API quarot_result quarot_processor_pre_run(quarot_processor* p);
QUAROT_API quarot_result quarot_processor_run_layer(quarot_processor* p, int64_t layer);
QUAROT_API quarot_result quarot_processor_post_run(quarot_processor* p);
QUAROT_API void          quarot_processor_free(quarot_processor* p);

// pre_run in row windows, for callers that hold only some rows of the vocabulary-sized tensors at a
// time (the embedding and lm_head of a 128K vocabulary are GBs in f32, a decoder layer far less).
// quarot_processor_rows_probe, after init, says whether the global scope is row-separable: QUAROT_OK
// and *rows = the vocabulary (the embedding's rows) when all of it is row by row on the embedding and
// lm_head (every global rotate command acts along rows on one of those two, without a bias; the
// global fusions have no norm bias and feed only lm_head; no mean baking, i.e. no LayerNorm family;
// the untie copies rows), else QUAROT_ERR_UNSUPPORTED with the reason in model->error (then use
// quarot_processor_pre_run). quarot_processor_pre_run_rows(p, row0, n) then does pre_run's work on
// rows [row0, row0 + n); windows come in order from row 0 and the one ending at *rows completes
// pre_run (the next step is run_layer(0)). During a window the binding's get_tensor for
// p->plan.embed and p->plan.lm_head (and create_tensor for an untied lm_head, asked once, in the
// window at row 0, with the whole shape) must give exactly those rows as a 2-D tensor {hidden, n};
// every other tensor as usual (checked: QUAROT_ERR_SHAPE_MISMATCH, nothing done). The final norm is
// read in every window and set to the identity in the last one. The result is the same as pre_run's,
// bit for bit, for any windows; on_command sees each window's commands, progress reports "pre_run"
// once. A failed window leaves the processor unusable.
QUAROT_API quarot_result quarot_processor_rows_probe(quarot_processor* p, int64_t* rows);
QUAROT_API quarot_result quarot_processor_pre_run_rows(quarot_processor* p, int64_t row0, int64_t n);

// Everything: init, pre_run, every layer, post_run. On failure model->error says why; a failure
// during init (validation) leaves the model untouched.
QUAROT_API quarot_result quarot_rotate_model(quarot_model* model, const quarot_rotate_desc* desc);

// >>processor_run
// (no declarations: the execution half of the processor, see >>processor)

// >>processor_bytensor
// (no declarations: a decoder layer run tensor by tensor, see quarot_model.tensor_done)

// >>processor_moe
// (no declarations: the processor's steps for MoE layers, see >>moe)

// >>adapt
// Adapt Rotation (msModelSlim; docs/algorithms.md §5): stage 1 learns an orthogonal R [b][b] that
// makes Hadamard-rotated calibration activations quantize better; stage 2 runs the normal processor
// with R1 = H*R (quarot_rotate_desc.rotation = QUAROT_ROTATION_ADAPT, .context = the stage-1 context).
//
// Stage 1 (quarot_adapt_stage1). X [N][hidden] are the captured inputs of the linears whose names match
// layer_type (taken after norm fusion), N = the rows of all matched linears stacked. With a block size
// b < hidden every row is cut into hidden/b rows of b: X is then [M][b], M = N*hidden/b, and ONE R is
// learned for all blocks. H is the Hadamard half of QUAROT_ROTATION_ADAPT (block-diagonal random
// Hadamard, blocks of order hb = b when available, signs from `seed` over the whole hidden).
//     XH = X*H;  R = I;  loss_0 = L(XH);  best = (I, loss_0)
//     for t = 1..steps:
//         A = XH*R [M][b];  B = Q(A) (per row, symmetric, 4 or 8 bits, clip 1.0);  C = A^T*B [b][b]
//         R_t = polar(C + lambda*I)            (orthogonal Procrustes: argmin_R ||A*R - B||_F)
//         R <- R*R_t;  loss_t = L(XH*R)        (= L(A*R_t), the loss of the new R)
//           (computed as R <- polar(XH^T*B + lambda*R), the same matrix since A^T B + lambda I =
//           R^T (XH^T B + lambda R): no b^3 product R*R_t, and R does not drift from orthogonal)
//         keep R if loss_t < best loss; stop after `patience` steps without improvement
//     L(A) = ||A - Q(A)||_F / (M*b)
// polar() (>>adapt_solve .. >>adapt_polar) is by default for b >= 512 (polar_method NEWTON) the scaled Newton iteration
// X <- (mu X + X^-T/mu)/2 with float inverses (blocked Gauss-Jordan, one b^3-FMA GEMM-equivalent each)
// and Byers-Xu scaling, after deflating the largest singular values of C where a clear gap exists
// (outlier channels create one; this leaves the polar factor unchanged; in levels, each relative to the
// top the last one left) and scaling by a power estimate of sigma_min from the first inverse: 4 steps
// per optimizer step on the bench's data at b = 2048 and 4096 (5 at the first, cold step), 4-5 at 512
// and 1024, then one X^T X (half a GEMM) that shows max|X^T X - I| <= tol, or a certified
// Newton-Schulz last step. polar_method NEWTON_SCHULZ is the quintic Newton-Schulz iteration whose
// coefficients are re-optimized every step for the current singular-value interval: about
// log(sigma'_max/lambda)/log(4.2) + 2 iterations (6-7 with deflation, 10-11 without), each costing
// two GEMM-equivalents (X^T X and G^2 are symmetric: half a GEMM each), the last one, a cubic, one.
// Newton does about half the flops per step. (For Newton, deflation saves one inverse for about as
// much in double products at b = 4096, more below; it is kept because the first, float, inverse is
// then of a better conditioned matrix: see the accuracy note in >>adapt_newton.)
// lambda = reg * sigma_max(C) makes it converge when C is singular (M < b rows, e.g. 2048 tokens at
// hidden 4096; then R_t is the identity on the directions neither A nor B reaches) and bounds the
// condition number. The default reg = 1e-5 sits near the float rounding level of C: a larger lambda
// also freezes real directions (C's singular values span sigma_outlier^2/sigma_typical^2, often
// 1e3..1e6; on the synthetic data of the tests reg = 1e-3 lost a third of the loss reduction), a
// smaller one costs iterations and only fits rounding noise. The best R is re-orthogonalized in
// double at the end (max|R^T R - I| <= 1e-9).
//
// Stage 2 needs only the context: hidden, block, the Hadamard order hb, the seed and R_best. It
// rebuilds H with the same seed, so a context whose R is the identity gives exactly the plain QuaRot
// model of that seed (desc.rotation = HADAMARD, desc.seed = stage 1's seed, same block_size) bit for
// bit: stage 1's seed must equal QuaRot's seed for that comparison.

// How each step's polar factor is computed (quarot_adapt_desc.polar_method; see >>adapt_solve).
typedef enum quarot_adapt_polar_method {
    QUAROT_ADAPT_POLAR_DEFAULT = 0,          // NEWTON for blocks b >= 512 (there its inverses cost less than
                                             //   the Newton-Schulz products), NEWTON_SCHULZ below
    QUAROT_ADAPT_POLAR_NEWTON = 1,           // scaled Newton (float inverses), a certified Newton-Schulz
                                             //   step to finish
    QUAROT_ADAPT_POLAR_NEWTON_SCHULZ = 2     // quintic Newton-Schulz only
} quarot_adapt_polar_method;

// "default", "newton", "newton-schulz"; NULL for an unknown value.
QUAROT_API const char* quarot_adapt_polar_method_name(int method);

// Per-step report for a CLI: step 0 is the start (R = I, polar_iterations 0), then steps 1..steps_run.
typedef void (*quarot_adapt_progress_fn)(void* user, int step, double loss, double best_loss, int polar_iterations);

typedef struct quarot_adapt_desc {   // zero-init = msModelSlim's defaults
    int steps;                       // optimizer steps; 0 = 20 (< 0 or > 2^20: QUAROT_ERR_INVALID_ARGUMENT)
    const char* quant_dtype;         // "int4" (NULL) or "int8"; anything else: QUAROT_ERR_INVALID_ARGUMENT
    const char* const* layer_type;   // patterns [n_layer_type]; NULL = {"up_proj"}. A pattern matches a
    int64_t n_layer_type;            //   linear whose weight name contains it as a substring
                                     //   ("up_proj" matches "model.layers.3.mlp.up_proj.weight")
    int64_t block_size;              // size b of R; <= 0 (or -1) = hidden; else must divide hidden
    int64_t max_samples;             // rows kept per matched linear, evenly spaced over its stream; 0 = 2048
    uint64_t seed;                   // signs of the starting random Hadamard (= QuaRot's desc.seed)
    int patience;                    // stop after this many steps without improvement; 0 = 5
    double reg;                      // lambda / sigma_max(C) of the polar step; 0 = 1e-5 (must be < 1)
    int no_deflation;                // 1: the polar iteration on C + lambda*I itself; 0: first deflate the
                                     //   largest singular values where a reliable gap exists (same polar
                                     //   factor to ~1e-8, fewer iterations, and for Newton a better
                                     //   conditioned first inverse; see >>adapt_newton)
    quarot_polar_desc polar;         // Newton-Schulz per step: max_iter (0 = 100), tol on max|X^T X - I|
                                     //   (0 = 1e-5; the float floor stops it earlier), scale (ignored:
                                     //   sigma_max is estimated by power iteration)
    int polar_method;                // a quarot_adapt_polar_method; 0 = QUAROT_ADAPT_POLAR_DEFAULT
    quarot_adapt_progress_fn progress;   // optional
    void* user_data;                 // passed to progress
} quarot_adapt_desc;

// Activation capture for stage 1. Feed it every linear input of a calibration forward pass (after norm
// fusion); it keeps those of matching linears. Per linear, rows are sampled EVENLY over the whole
// stream without knowing its length: row i (counted over all add calls for that linear) is kept when
// i is a multiple of `step` (1 at first); when the buffer holds max_samples rows and another would be
// kept, every other kept row is dropped and `step` doubles. The kept rows are always rows 0, step,
// 2*step, ... < seen, and there are at most max_samples of them (at least max_samples/2 once any were
// dropped). Memory: up to max_samples*hidden floats per matched linear.
typedef struct quarot_adapt_linear {
    char name[QUAROT_NAME_MAX];      // weight name
    float* rows;                     // [cap][hidden]; rows[i] = input row i*step of this linear
    int64_t count, cap;              // rows kept / allocated
    int64_t seen;                    // rows fed
    int64_t step;                    // sampling stride (a power of two)
} quarot_adapt_linear;

typedef struct quarot_adapt_capture {
    int64_t hidden, max_samples;
    char** patterns;                 // copies of the desc's patterns [n_patterns]
    int64_t n_patterns;
    quarot_adapt_linear* linears;    // matched linears, in order of first appearance
    int64_t n_linears, cap_linears;
    char (*names)[QUAROT_NAME_MAX];  // every distinct linear name fed (matched or not), in order
    int64_t n_names, cap_names;
    quarot_result status;            // first error of an add call (sticky; stage 1 returns it)
    quarot_env env;
    char error[256];                 // what that error was
} quarot_adapt_capture;

// hidden > 0; desc may be NULL (defaults); uses desc->layer_type and desc->max_samples only.
QUAROT_API quarot_result quarot_adapt_capture_init(quarot_adapt_capture* cap, int64_t hidden,
                                                   const quarot_adapt_desc* desc, const quarot_env* env);
QUAROT_API void          quarot_adapt_capture_free(quarot_adapt_capture* cap);
// 1 when linear_name matches a pattern (the caller may skip add otherwise), else 0.
QUAROT_API int           quarot_adapt_capture_matches(const quarot_adapt_capture* cap, const char* linear_name);
// Offer x[rows][stride] (first hidden elements of each row), the input of linear `linear_name`. The
// name is recorded; rows of non-matching linears are ignored. Matched linears must read the residual
// stream (q/k/v, gate/up, ...): their input rows are hidden wide (nothing else can be checked here,
// so a pattern such as "proj" that also matches down_proj is the caller's error). NaN/Inf in a matched linear's rows ->
// QUAROT_ERR_NONFINITE (also recorded in status, so stage 1 fails too); stride < hidden, rows < 0 or
// a name of QUAROT_NAME_MAX bytes or more -> QUAROT_ERR_INVALID_ARGUMENT.
QUAROT_API quarot_result quarot_adapt_capture_add(quarot_adapt_capture* cap, const char* linear_name,
                                                  const float* x, int64_t rows, int64_t stride);
// The names seen, digits runs folded to "{i}" and duplicates dropped, comma-separated, e.g.
// "model.layers.{i}.self_attn.q_proj.weight, model.layers.{i}.mlp.up_proj.weight" (truncated with
// "..." to fit). Returns buf.
QUAROT_API const char*   quarot_adapt_capture_list(const quarot_adapt_capture* cap, char* buf, size_t size);

// The stage-1 result: what stage 2 needs to rebuild H*R_best exactly, plus the loss history.
struct quarot_adapt_context {
    int64_t hidden;                  // residual width the matrix is for
    int64_t block;                   // b, size of R: hidden, or the block of a block-diagonal rotation
    double* matrix;                  // R_best [block][block], orthogonal; NULL before stage 1. R1 is
                                     //   H*R_best with H rebuilt from seed and hadamard_block
    quarot_env env;
    int64_t hadamard_block;          // hb: order of the Hadamard blocks of H (divides block)
    uint64_t seed;                   // signs of H (random Hadamard, signs over all hidden)
    int bits;                        // 4 or 8 (quant_dtype)
    int steps;                       // steps asked for
    int steps_run;                   // steps done (< steps after an early stop)
    int best_step;                   // step whose R is kept (0 = the starting R = I)
    int patience;
    int64_t rows;                    // M, rows of b the optimizer saw
    double reg;                      // lambda / sigma_max used
    double start_loss, best_loss;    // L at R = I, and L at R_best
    double* losses;                  // [steps_run] loss_t of each step (NULL when steps_run == 0)
    int* polar_iterations;           // [steps_run] polar iterations of each step (Newton steps plus
                                     //   Newton-Schulz updates)
    double flops;                    // float GEMM work of stage 1 (2mnk per product, 1.06 n^3 per
                                     //   symmetric X^T X, 2 n^3 per inverse; the deflation's DGEMMs
                                     //   not counted), for reports; not serialized (0 after read / set)
    char error[512];                 // detail of the last failure of stage 1 / read
};

// init: empty context (matrix NULL). free: releases the arrays, keeps env.
QUAROT_API void          quarot_adapt_context_init(quarot_adapt_context* ctx, const quarot_env* env);
QUAROT_API void          quarot_adapt_context_free(quarot_adapt_context* ctx);
// Run stage 1 on the captured rows (desc: steps, quant_dtype, block_size, seed, patience, reg, polar,
// progress; desc may be NULL). ctx must be initialized; its previous contents are replaced on success
// and kept on failure. env: temporary memory and the parallel hook for the GEMMs.
// Errors (message in ctx->error): no rows captured -> QUAROT_ERR_NOT_FOUND naming the pattern(s) and
// listing the linear names that exist; bad quant_dtype / steps / block_size / reg ->
// QUAROT_ERR_INVALID_ARGUMENT; NaN/Inf in the rows -> QUAROT_ERR_NONFINITE; no Hadamard order > 1
// divides the block -> QUAROT_ERR_UNSUPPORTED_SIZE.
// Work memory: M*b floats x 3 (X*H, A, B) and about 9 b*b floats (7 without deflation; Newton adds
// 800 b floats: the inverse's panels, their packings and the next panel's columns). Time: per step
// about 4*M*b^2 + (Newton steps + 0.53) * 2*b^3 flops with NEWTON, 4*M*b^2 + (2.06 * Newton-Schulz
// iterations - 1) * 2*b^3 with NEWTON_SCHULZ (ctx->flops), in SGEMM through env's parallel hook; the
// O(b^2) passes between them also go through the hook, the pivot search of the inverses
// (O(b^2 * 32)) runs beside the other threads' updates. Results do not depend on the number of
// threads (the GEMMs and the passes split the work, never a sum).
QUAROT_API quarot_result quarot_adapt_stage1(const quarot_adapt_capture* cap, const quarot_adapt_desc* desc,
                                             quarot_adapt_context* ctx, const quarot_env* env);
// Fill ctx with a given R (e.g. the identity, or R from another tool): checks hidden % block == 0, R
// finite and orthogonal to 1e-5, a Hadamard order dividing block; clears the loss history.
QUAROT_API quarot_result quarot_adapt_context_set(quarot_adapt_context* ctx, int64_t hidden, int64_t block,
                                                  uint64_t seed, const double* r);
// The R1 rotation of stage 2 (QUAROT_ROTATION_ADAPT, n = hidden): x <- x*H*R_best per block.
// QUAROT_ERR_STATE when ctx has no matrix.
QUAROT_API quarot_result quarot_adapt_context_rotation(const quarot_adapt_context* ctx, quarot_rotation* rot,
                                                       const quarot_env* env);

// Binary serialization, version 1, little-endian, every double as its IEEE-754 bits (exact):
//   "QRADAPT\0" u32 version=1  u32 flags=1 (bit 0: H has random signs)
//   i64 hidden  i64 block  i64 hadamard_block  u64 seed  i32 bits  i32 steps  i32 steps_run
//   i32 best_step  i32 patience  i32 0  i64 rows  f64 reg  f64 start_loss  f64 best_loss
//   f64 losses[steps_run]  i32 polar_iterations[steps_run]  f64 R[block*block]  u64 FNV-1a-64 of all before
// write: into buf (cap bytes), *needed = the size (buf = NULL to size it; QUAROT_ERR_WORKSPACE when cap
// is too small). read: validates everything as hostile input (magic, version, flags, sizes against
// len exactly, checksum, consistency of the loss history, NaN/Inf, R orthogonal to 1e-5, hadamard_block
// as stage 2 will rebuild it) -> QUAROT_ERR_PARSE (or NONFINITE / INVALID_ARGUMENT for R) with the
// reason in ctx->error; ctx is replaced only on success.
QUAROT_API quarot_result quarot_adapt_context_write(const quarot_adapt_context* ctx, void* buf, size_t cap,
                                                    size_t* needed);
QUAROT_API quarot_result quarot_adapt_context_read(quarot_adapt_context* ctx, const void* buf, size_t len);

// >>adapt_solve
// (no declarations: the regularized Newton-Schulz solver and the stage-1 loop are private)

// >>adapt_newton
// (no declarations: the default polar method of stage 1 for b >= 512)

// >>adapt_polar
// (no declarations: the polar factor quarot_adapt_stage1 takes each step)

// >>adapt_stage1
// (no declarations: quarot_adapt_stage1 of >>adapt is implemented here)

// >>quantize
// Model-level weight quantization, layer by layer, in QuaRot's order (fake_quant/main.py with
// gptq_utils.gptq_fwrd / rtn_fwrd). The library does not run the model: the caller (an engine, the
// quarot tool) runs its own forward pass and feeds each linear's input rows; the stage keeps the
// Hessians, quantizes the weights in place through the quarot_model callbacks and reports each linear.
// Memory stays near one layer: the Hessians of the inputs being collected plus one linear's copy.
//
//   quarot_quantizer qz;  quarot_quantize_desc d = {0};     // RTN 4-bit symmetric per channel
//   d.method = QUAROT_WQUANT_GPTQ;                          // GPTQ: calibration rows needed
//   quarot_quantizer_init(&qz, &model, &d);                 // checks bits, groups against every linear
//   for each layer l:                                       // in order: sequential mode (below)
//       quarot_quantizer_begin_layer(&qz, l);
//       while (quarot_quantizer_pending(&qz)) {
//           if (quarot_quantizer_wants_data(&qz))           // GPTQ: run layer l over the calibration
//               for each calibration window:                //   inputs with its online hooks applied;
//                   ... quarot_quantizer_add(&qz, name, x, rows, stride) for each linear input
//           quarot_quantizer_step(&qz);                     // quantizes the linears of this step
//       }
//       run layer l (now quantized) over the calibration inputs: they become layer l+1's inputs
//       quarot_quantizer_end_layer(&qz);
//   quarot_quantizer_free(&qz);
//
// Steps inside a layer follow QuaRot's sequential groups: {q, k, v} (the attention norm's readers),
// {o_proj}, {gate, up} (the MLP norm's readers), {down_proj}; each step's Hessian is taken with the
// earlier steps already quantized, and layer l+1 is calibrated on the outputs of the quantized
// layers 0..l (QuaRot's sequential mode). one_pass = 1 collects all four inputs in one pass instead
// (one forward per layer, GPTQ's non-"true-sequential" mode). Rows are the linear's actual input:
// after the online Hadamard where one precedes it (o_proj, down_proj), before any activation
// quantization (QuaRot calibrates with FP activations). Names are the adapter plan's weight names
// ("model.layers.3.mlp.down_proj.weight"), so a capture hook that sees every linear can offer every
// input: rows given under a linear whose input is not being collected are ignored, and an input
// shared by several linears (q, k, v) is accumulated once, under the first of them. Mixture of
// experts: each expert's Hessian comes from the rows routed to it, which a step-wide Hessian cannot
// hold, so the stage quantizes a MoE layer's attention and the caller its experts
// (desc.moe_mlp_by_caller; quarot_quantize_linear per expert).
typedef enum quarot_wquant_method {
    QUAROT_WQUANT_DEFAULT = 0,       // = RTN
    QUAROT_WQUANT_RTN = 1,           // round to nearest (optionally with the clip search)
    QUAROT_WQUANT_GPTQ = 2,          // GPTQ on the calibration Hessian
    QUAROT_WQUANT_FORCE_I32 = 0x7fffffff
} quarot_wquant_method;

// Activation and KV-cache settings (QuaRot's --a_* / --k_* / --v_* flags) as plain data, so that a
// forward pass and an engine (or a file's metadata) agree on them. The stage validates them against
// the model (quarot_act_quant_check) and records them; applying them is the forward pass's job, with
// quarot_fake_quant_f32 (activations per token: rows = tokens; K/V per token per head: group =
// head_dim unless a group size is given).
typedef struct quarot_act_quant_desc {   // zero-init = everything FP
    int a_bits;                      // decoder-linear inputs: 0 or 16 = FP, else 2..8 (--a_bits)
    int a_asym;                      // 1: asymmetric per token (--a_asym)
    int64_t a_group_size;            // 0 = whole row (--a_groupsize); must divide every linear input
    float a_clip;                    // (0, 1]; 0 = 1.0 (--a_clip_ratio)
    int k_bits, v_bits;              // KV cache: 0 or 16 = FP, else 2..8 (--k_bits, --v_bits)
    int64_t k_group_size, v_group_size;   // 0 = head_dim (--k_groupsize, --v_groupsize)
    int k_asym, v_asym;              // (--k_asym, --v_asym)
    float k_clip, v_clip;            // 0 = 1.0 (--k_clip_ratio, --v_clip_ratio)
    int int8_down_proj;              // down_proj input at 8 bits (and its weight, see below)
} quarot_act_quant_desc;

typedef struct quarot_qlinear_report quarot_qlinear_report;   // see below

typedef struct quarot_quantize_desc {    // zero-init = RTN, 4-bit symmetric per output channel
    quarot_wquant_method method;
    quarot_quant_desc weight;        // bits (0 = 4; --w_bits), asymmetric (--w_asym), group_size
                                     // (--w_groupsize), clip_ratio, clip_search (QUAROT_CLIP_SEARCH_LP
                                     // = QuaRot's --w_clip, also inside GPTQ; see >>quant)
    double percdamp;                 // GPTQ damping, fraction of mean diag(H): 0 = 0.01 (--percdamp)
    int64_t block_size;              // GPTQ lazy-update block: 0 = 128
    int act_order;                   // GPTQ: 1 = columns by descending diag(H) (--act_order); with
                                     // groups, "static groups" (scales from the original weights)
    int damp_retries;                // Cholesky failure: retry with percdamp x10 this many times;
                                     // 0 = 2, < 0 = none; then QUAROT_ERR_NOT_CONVERGED naming the linear
    int int8_down_proj;              // down_proj weights at 8 bits (--int8_down_proj; set act too)
    int one_pass;                    // 1: one calibration pass per layer for all its linears
    int migrate;                     // 1: per-channel scale migration at the two norms of each layer,
                                     // for weight-only targets (see below); needs calibration rows
    int64_t nsamples;                // calibration windows the driver runs: 0 = 128 (--nsamples)
    int64_t seq_len;                 // tokens per calibration window: 0 = the driver's default
    quarot_act_quant_desc act;       // recorded and validated (not applied by the stage)
    // Called after each linear is quantized (may be NULL); a non-OK return stops the stage with it.
    quarot_result (*on_linear)(void* user, const quarot_qlinear_report* report);
    void* user_data;
    int keep_indivisible;            // 1: a linear whose input width weight.group_size does not divide
                                     // is left as it is (not quantized, not reported, its step not
                                     // calibrated when it is alone there) instead of an error: what
                                     // llama.cpp does for Q4_0 / Q8_0 rows that are not whole blocks
    int dead_fallback;               // GPTQ: 1 = a linear with no calibration rows or an all-zero
                                     // Hessian (a dead input) is quantized by RTN instead, reported
                                     // with fallback = 1; 0 = QUAROT_ERR_INVALID_ARGUMENT naming it
    int moe_mlp_by_caller;           // mixture of experts (quarot_config_layer_is_moe): 1 = in a MoE
                                     // layer the stage quantizes the attention only (steps 0, 1; steps
                                     // 2, 3 are empty) and the caller quantizes the experts, each on its
                                     // own routed rows (quarot_quantize_linear with that expert's Hessian);
                                     // router and shared-expert gate stay unquantized. 0 = a MoE layer is
                                     // QUAROT_ERR_UNSUPPORTED from quarot_quantizer_begin_layer
} quarot_quantize_desc;

// What the stage reports per linear. Errors are per calibration row: err = sum over the rows fed of
// ||x (W - W^)^T||^2 / rows, computed exactly from the undamped Hessian as tr(D H D^T) / (2 rows)
// with D = W - W^ (the layer-output error GPTQ minimizes); NaN when no rows were fed.
struct quarot_qlinear_report {
    const char* name;                // weight name
    int64_t layer, step;             // step: 0 q/k/v, 1 o_proj, 2 gate/up, 3 down_proj
    int64_t out, in, group_size;     // W[out][in]; group_size = in when per channel
    int bits, asymmetric;
    quarot_wquant_method method;
    // Valid during the callback only: codes [out][in], scales and zeros [out][in/group] in
    // quarot_quantize_f32's layout (zeros NULL when symmetric); W^ = (code - zero) * scale, which is
    // also what was written back into the model's tensor (rounded to its dtype when not f32).
    const int8_t* q;
    const float* scales;
    const float* zeros;
    double err;                      // output error of the chosen method (see above)
    double err_rtn;                  // the same for RTN with the same quantizer (GPTQ only; else = err)
    double ref;                      // sum ||x W^T||^2 / rows: err / ref is the relative error
    double w_mse;                    // mean (w - w^)^2 over the weights
    double gptq_loss;                // GPTQ's own estimate (quarot_gptq_info.loss); 0 for RTN
    double damp;                     // damping added to diag(H) (the last try)
    int retries;                     // Cholesky retries with more damping
    int64_t dead_columns;            // input columns no calibration row reached (H_ii == 0)
    int64_t rows;                    // calibration rows in the Hessian
    double migrate_alpha;            // desc.migrate: the alpha chosen for this linear's norm (0 = none)
    int fallback;                    // 1: GPTQ was asked but the input is dead (desc.dead_fallback):
                                     // quantized by RTN (method = QUAROT_WQUANT_RTN)
};

#define QUAROT_QUANTIZE_MAX_LINEARS 8    // linears of one layer the stage handles

typedef struct quarot_quantizer {
    quarot_model* model;
    quarot_quantize_desc desc;
    quarot_plan plan;                // the adapter's plan (names of each layer's linears)
    quarot_model_config config;      // resolved (n_kv_heads, head_dim)
    // The current layer (private below this line; read-only for callers).
    int64_t layer;                   // -1 outside begin/end_layer
    int step;                        // next step 0..3; 4 = layer done
    int64_t n_linears;
    char names[QUAROT_QUANTIZE_MAX_LINEARS][QUAROT_NAME_MAX];
    int lin_step[QUAROT_QUANTIZE_MAX_LINEARS];   // step of each linear
    int lin_first[QUAROT_QUANTIZE_MAX_LINEARS];  // 1: the first linear of its step (rows counted)
    int64_t step_in[4];              // input width of each step (0: no linear)
    double* h[4];                    // Hessians of the steps being collected
    int64_t rows[4];
    int64_t linears_done, layers_done;
    double mig_alpha;                // desc.migrate: alpha of the step being quantized
    char error[256];                 // the last failure, naming the linear
} quarot_quantizer;

// Check act against the model config (bits 0/16/2..8, clips in (0, 1], group sizes dividing the
// widths they split: hidden, intermediate, n_heads*head_dim for a_group_size; head_dim for K/V).
// err (may be NULL) gets one line naming the option.
QUAROT_API quarot_result quarot_act_quant_check(const quarot_act_quant_desc* act, const quarot_model_config* cfg,
                                                char* err, size_t err_cap);
// Builds the plan from model->config (adapter by arch) and checks every option against every
// linear's shape without touching weights: bits outside 2..8, a group size that divides no row of a
// linear (named in qz->error), bad damping, act -> QUAROT_ERR_INVALID_ARGUMENT. d may be NULL (RTN).
QUAROT_API quarot_result quarot_quantizer_init(quarot_quantizer* qz, quarot_model* model,
                                               const quarot_quantize_desc* d);
QUAROT_API void          quarot_quantizer_free(quarot_quantizer* qz);
// Start layer l (layers in any order, but sequential mode needs 0, 1, ...): acquires it from the model.
QUAROT_API quarot_result quarot_quantizer_begin_layer(quarot_quantizer* qz, int64_t layer);
// 1 while the layer has linears left to quantize.
QUAROT_API int           quarot_quantizer_pending(const quarot_quantizer* qz);
// 1 when the next step needs calibration rows (GPTQ); RTN never does.
QUAROT_API int           quarot_quantizer_wants_data(const quarot_quantizer* qz);
// 1 when rows given under this linear's name are accumulated now (the caller may skip the others).
QUAROT_API int           quarot_quantizer_wants(const quarot_quantizer* qz, const char* weight_name);
// Feed x[rows][stride] (first `in` values of each row: the linear's input width) as input rows of
// the named linear: H += 2 x^T x when wanted, else ignored. NaN/Inf -> QUAROT_ERR_NONFINITE (named
// in qz->error, H untouched).
QUAROT_API quarot_result quarot_quantizer_add(quarot_quantizer* qz, const char* weight_name, const float* x,
                                              int64_t rows, int64_t stride);
// Quantize the linears of the current step (of all steps with one_pass) in place and report them;
// frees that step's Hessians. GPTQ errors, each naming the linear in qz->error: no rows fed or an
// all-zero Hessian (a dead input) -> QUAROT_ERR_INVALID_ARGUMENT; NaN in H -> QUAROT_ERR_NONFINITE;
// Cholesky failure after the damping retries -> QUAROT_ERR_NOT_CONVERGED.
QUAROT_API quarot_result quarot_quantizer_step(quarot_quantizer* qz);
// Finish the layer (every step must have run): releases it to the model (modified = 1).
QUAROT_API quarot_result quarot_quantizer_end_layer(quarot_quantizer* qz);

// Scale migration (desc.migrate, weight-only: it makes activations less uniform, so not for A4):
// before the readers of a norm (q/k/v; gate/up) are quantized, the norm gain g takes a per-channel
// s > 0 and every reader W <- W diag(1/s), which the FP32 model computes identically (up to
// rounding). s_j = rms(x_j)^alpha (x = the norm's output rows, rms from diag(H)), divided by the
// geometric mean of s; alpha is searched over 0, 0.1, .., 1 to minimize the summed layer-output
// error of RTN on the readers, tr(D diag(s) H diag(s) D^T) with D = W diag(1/s) - RTN(W diag(1/s));
// alpha = 0 is no migration, so the calibration error never grows. The readers are then quantized
// by the method with H <- diag(s) H diag(s). The norm gain is found by the adapter plan's name
// (get_tensor must serve it). The chosen alpha is in the reports (migrate_alpha) of those linears.
// QUAROT_API below: the same search for one group of readers outside a model.
QUAROT_API quarot_result quarot_scale_migration_search(const double* h, int64_t n, float* const* w, const int64_t* outs,
                                                       int n_w, const quarot_quant_desc* q, float* s, double* alpha,
                                                       double* err_before, double* err_after, const quarot_env* env);

// One linear, outside any model: quantize w[out][stride] (first `in` of each row) in place by d's
// method (GPTQ needs h = the [in][in] Hessian of quarot_hessian_accumulate_f64 over `rows` rows; RTN
// uses h, when given, for the report only). q/scales/zeros optional as in quarot_gptq_f32. rep (may
// be NULL) gets the report fields (name NULL). err (may be NULL) gets a one-line reason.
QUAROT_API quarot_result quarot_quantize_linear(float* w, int64_t out, int64_t in, int64_t stride, const double* h,
                                                int64_t rows, const quarot_quantize_desc* d, int8_t* q, float* scales,
                                                float* zeros, quarot_qlinear_report* rep, char* err, size_t err_cap,
                                                const quarot_env* env);


// >>quantize_layers
// (no declarations: the quarot_quantizer calls of >>quantize are implemented here)

// >>train
// SpinQuant (Liu et al., 2024): learn R1 [hidden][hidden] and one R2 [head_dim][head_dim] per layer by
// Cayley SGD on the Stiefel manifold, minimizing the model's own next-token cross-entropy with the
// weights frozen and activations (optionally weights, K and V) fake-quantized with straight-through
// gradients. This section holds the engine-independent pieces: the backward pass of each decoder op
// and the Stiefel optimizer; >>train_model runs them on a quarot_model.
//
// Shapes: row-major, one row per token; x[rows][n]. Every backward function writes (or, with
// accumulate = 1, adds to) the gradient of its inputs from the gradient of its outputs (dy).
// Straight-through estimators: the fake quantizers (quarot_fake_quant_f32) pass gradients through
// unchanged (d quant(x) / dx = I, SpinQuant's / QuaRot's STEQuantize: scales are constants), so they
// need no backward function: a quantized activation's gradient is the gradient of its dequantized
// value, and a linear's weight gradient is dy^T xq with the quantized input xq.
// Sums that decide a value run in a fixed order (norms in double, element by element; the softmax's in
// 16 float lanes, then double: quarot_train_exp_sum_f32); nothing depends on the number of threads.

// RMSNorm y = x * r * g with r = 1/sqrt(mean(x^2) + eps) (sum in double, r rounded once to float, as
// the tool's reference forward pass), g [n] optional (NULL = 1: a gain fused into the next linear).
// rstd [rows] (may be NULL) receives r. The backward: with y0 = x*r and e = dy*g,
//     dx = r * (e - y0 * sum_j(e_j y0_j) / n)
QUAROT_API void quarot_train_rmsnorm_f32(const float* x, int64_t rows, int64_t n, const float* g, float eps, float* y,
                                         float* rstd);
QUAROT_API void quarot_train_rmsnorm_backward_f32(const float* x, const float* rstd, int64_t rows, int64_t n,
                                                  const float* g, const float* dy, float* dx, int accumulate);

// Rotary embedding on x[T*heads][head_dim] (token t = row / heads), positions pos0 + t. cs [T][head_dim]:
// cos of position pos0 + t in the first head_dim/2 entries, sin in the rest, from
// quarot_train_rope_table (angle = p * theta^(-2i/head_dim) in double, rounded to float). Pairs are
// (2i, 2i+1) when interleaved (llama2.c, GGUF), else (i, i + head_dim/2) (Hugging Face). Each pair
// turns by +angle: (a, b) <- (a c - b s, a s + b c). inverse = 1 turns by -angle, which is also the
// backward (the map is orthogonal): dx = rope_inverse(dy).
QUAROT_API void quarot_train_rope_table(int64_t T, int64_t pos0, int64_t head_dim, float theta, float* cs);
QUAROT_API void quarot_train_rope_f32(float* x, int64_t T, int64_t heads, int64_t head_dim, const float* cs,
                                      int interleaved, int inverse);

// Gated MLP activation h = act(g) * u (SiLU: g * sigmoid(g); GELU: tanh approximation; ReLU), elementwise
// over n values; the backward gives dg = dh * u * act'(g) and du = dh * act(g).
QUAROT_API void quarot_train_glu_f32(const float* g, const float* u, int64_t n, quarot_act_kind act, float* h);
QUAROT_API void quarot_train_glu_backward_f32(const float* g, const float* u, const float* dh, int64_t n,
                                              quarot_act_kind act, float* dg, float* du);

// Causal self-attention of one window of T tokens with grouped-query heads: q [T][n_heads*head_dim],
// k, v [T][n_kv_heads*head_dim] (row strides ldq, ldk, ldv); query head h reads KV head
// h / (n_heads/n_kv_heads). Per head: S = q_h k_g^T * scale (scale = f32(1/sqrt(head_dim))), causal
// softmax by rows (max-shifted, quarot_train_exp_sum_f32; masked keys weigh 0), out_h = P v_g. out [T][n_heads*
// head_dim] (stride ldo). Queries go in blocks of 64 that see only keys up to their last one, so every
// product covers the causal half of T x T plus the blocks' diagonal squares. The backward recomputes
// P (the same bits) instead of keeping it, so neither pass holds more than two T x T buffers:
//     dP = dout_h v_g^T;  dS = P * (dP - rowsum(P * dP));  dq_h = dS k_g * scale;
//     dk_g += dS^T q_h * scale;  dv_g += P^T dout_h     (summed over the group's heads in head order)
// dq, dk, dv are overwritten (strides as their forward counterparts). work: quarot_train_attention_work
// floats (2 T^2); NULL = allocated from env. The GEMMs are quarot_sgemm through env.
QUAROT_API size_t quarot_train_attention_work(int64_t T);
// The softmax's exponential: x[i] <- exp(x[i] - shift) for i < n; returns the sum of the results, with
// element i in float partial sum i mod 16 and the 16 partial sums added in double in that order.
// exp: Cephes' expf in float (round-to-nearest reduction by ln 2 in two parts, degree-6 polynomial,
// no FMA), relative error below 3e-7; arguments below -87 give 0, above 88 are clamped to 88. The
// same bits for every isa (DEFAULT: the best compiled in; not compiled in: the scalar kernel).
QUAROT_API double quarot_train_exp_sum_f32(float* x, int64_t n, float shift, quarot_isa isa);
QUAROT_API quarot_result quarot_train_attention_f32(const float* q, int64_t ldq, const float* k, int64_t ldk,
                                                    const float* v, int64_t ldv, int64_t T, int64_t n_heads,
                                                    int64_t n_kv_heads, int64_t head_dim, float* out, int64_t ldo,
                                                    float* work, const quarot_env* env);
QUAROT_API quarot_result quarot_train_attention_backward_f32(const float* q, int64_t ldq, const float* k, int64_t ldk,
                                                             const float* v, int64_t ldv, const float* dout,
                                                             int64_t lddo, int64_t T, int64_t n_heads,
                                                             int64_t n_kv_heads, int64_t head_dim, float* dq, float* dk,
                                                             float* dv, float* work, const quarot_env* env);

// Cross-entropy of logits [rows][vocab] against targets [rows] (a target < 0 is ignored: weight 0):
// returns sum over the rows of (logsumexp(logits_r) - logits_r[target_r]) in double (log-sum-exp in
// double, max-shifted), and, when dlogits is not NULL, dlogits_r = scale * (softmax(logits_r) -
// onehot(target_r)) (zero rows for ignored targets). dlogits may alias logits.
QUAROT_API double quarot_train_cross_entropy_f32(const float* logits, int64_t rows, int64_t vocab,
                                                 const int32_t* targets, float scale, float* dlogits);
// KL divergence from a reference distribution p [rows][vocab] (probabilities; e.g. the FP32 model's)
// to softmax(logits): returns sum over the rows with mask[r] >= 0 (mask may be NULL: every row) of
// sum_j p_j (log p_j - log softmax(logits_r)_j) in double (terms with p_j = 0 are 0), and, when
// dlogits is not NULL, dlogits_r = scale * (softmax(logits_r) - p_r) (zero rows where masked).
QUAROT_API double quarot_train_kl_div_f32(const float* logits, int64_t rows, int64_t vocab, const float* p,
                                          const int32_t* mask, float scale, float* dlogits);

// Cayley SGD on the Stiefel manifold (Li, Fuxin & Todorovic 2020, "Efficient Riemannian optimization
// on the Stiefel manifold via the Cayley transform", algorithm 2; SpinQuant's SGDG with stiefel=True),
// one step on an orthogonal R [n][n] (the rotation, applied to rows as x <- x*R, SpinQuant's
// parameter p; the paper's point is X = R^T) with Euclidean gradient G = dL/dR, in double. With M the
// momentum buffer ([n][n], zero at the start; updated in place):
//     M <- momentum*M - G^T
//     Wh = M R - R^T (R M R) / 2;   W = Wh - Wh^T     (skew-symmetric; the paper's correction term
//                                                      R^T R M R / 2 = M R / 2 while R is orthogonal)
//     alpha = min(lr, 1 / (||W||_1 + 1e-8))           (||.||_1: the largest column sum of |W|)
//     Y = R^T + alpha M;   Y <- R^T + alpha W (R^T + Y) / 2, cayley_iters times
//     M <- W R^T;   R <- Y^T
// Y converges to the Cayley transform (I - alpha W/2)^-1 (I + alpha W/2) R^T, which is exactly
// orthogonal; alpha ||W||_2 <= alpha ||W||_1 <= 1 at least halves the fixed-point error each
// iteration. To first order R <- R - alpha R W, a descent direction: <G, R W> = (||G||^2 -
// <G, R G^T R>) / 2 >= 0. After the step max|R^T R - I| is measured (one DGEMM); above orth_tol, R
// is replaced by its orthogonal polar factor (quarot_polar_newton_schulz_f64 to 1e-13) and
// info->reorthogonalized = 1. SpinQuant's defaults: lr 1.5 (with a cosine decay outside this call),
// momentum 0, 5 iterations. Cost about (cayley_iters + 5) n^3 multiply-adds in DGEMM through env;
// temporary memory 5 n^2 doubles from env.
// Errors: n < 1, NULL pointers, lr <= 0 or NaN, momentum outside [0, 1), cayley_iters outside
// 0..1000 -> QUAROT_ERR_INVALID_ARGUMENT; NaN/Inf in G -> QUAROT_ERR_NONFINITE (R and M untouched).
typedef struct quarot_stiefel_desc {  // zero-init = SpinQuant's defaults (lr must be set)
    double lr;                       // the step's learning rate (> 0)
    double momentum;                 // in [0, 1); 0 = none (SpinQuant's default)
    int cayley_iters;                // 0 = 5
    double orth_tol;                 // max|X^T X - I| kept; 0 = 1e-6
} quarot_stiefel_desc;

typedef struct quarot_stiefel_info {
    double alpha;                    // step length used: min(lr, 1/(||W||_1 + 1e-8))
    double w_norm;                   // ||W||_1, the size of the Riemannian gradient
    double orth_error;               // max|X^T X - I| after the Cayley step, before any re-orthogonalization
    int reorthogonalized;            // 1: orth_error exceeded orth_tol and X was re-orthogonalized
} quarot_stiefel_info;

QUAROT_API quarot_result quarot_stiefel_step_f64(int64_t n, double* r, const double* grad, double* momentum,
                                                 const quarot_stiefel_desc* d, quarot_stiefel_info* info,
                                                 const quarot_env* env);

// >>train_model
// SpinQuant's optimize_rotation on a quarot_model. The trainer reads the model through its callbacks
// (get_tensor; acquire_layer / release_layer with modified = 0: nothing is written) and the adapter
// plan, as quarot_rotate_model does, and runs its own FP32 forward and backward pass over windows of
// tokens, with the rotations applied as extra matrices exactly where quarot_rotate_model folds them:
//     embedding rows x0 = E[tok];  stream x = x0 R1                     (E <- E R1)
//     readers q, k, v, gate, up:   W_eff = W diag(g_norm) R1            (norm gain fused, W <- W R1)
//     v_proj, per KV head g:       W_eff,g = R2^T (W diag(g) R1)_g, b_v,g <- b_v,g R2
//     o_proj:                      W_eff = R1^T W (I (x) R2) [(H_heads (x) I) when online]
//     down_proj:                   W_eff = R1^T W [H4 when online]
//     final norm + lm_head:        logits = ((norm(x) R1^T) * g_final) W_lm^T
// with the fixed online hooks of quarot_rotate_desc.online / .r3 run on the activations (plain Hadamard,
// no signs: H4 before down_proj, H_heads (x) I across the heads before o_proj, H on q and k after
// RoPE) and their offline halves in the frozen weights. With R1 = R2 = I and no hooks the forward is
// the tool's reference forward pass (examples/model/qx_forward.c) up to float rounding: same norms
// (sums in double), RoPE table, softmax and SiLU. Fake quantization (quarot_fake_quant_f32, STE):
// activations per token at every decoder-linear input (after its online hook), K after RoPE (and R3)
// and V per token per head, weights per output channel of W_eff. Per step:
//     forward, layer by layer over all the batch's rows (one GEMM per linear, attention per window
//     and KV head); W_eff of a layer is formed once per pass from the frozen weights and R1, R2
//     loss = mean over windows and positions t < T-1 of -log softmax(logits_t)[token_{t+1}]
//     backward, layers in reverse; dL/dW_eff -> dL/dR1, dL/dR2 by the chain rule through the
//     products above (dR1 += W^T dW_eff for a reader, W dW_eff^T for a writer, ...)
//     one quarot_stiefel_step_f64 on R1 and on each R2, learning rate lr * (1 + cos(pi s/steps))/2
// Memory. Activations: per layer the tape of its inputs and intermediates (per row of the batch:
// 4 hidden + 3 q_dim-ish + 2 kv_dim + 3 intermediate floats, plus q/k before the per-head norm for
// qk_norm models) is KEPT for every layer (recompute = 0), or only the layer inputs are kept and each
// layer is run forward again before its backward (recompute = 1: one tape; about a third more work).
// Attention never stores T x T (two T x T buffers per thread, recomputed). Weights: one layer's
// frozen copy, its W_eff and dL/dW_eff in f32, read through the callbacks in every pass (acquire,
// copy, release); lm_head in f32 (in place when the model's tensor is contiguous f32). A 7B-shaped
// layer (hidden 4096, intermediate 11008, 32 heads) with one 2048-token window: 0.54 GB of tape,
// 3 x 0.8 GB of weights, 0.5 GB of backward buffers, 34 MB of attention scratch per thread and the
// R1 step's 5 x 4096^2 doubles (0.67 GB): about 4.2 GB; all 32 layers kept: 21 GB, recomputed: 5 GB.
// Threads: model->env's parallel hook splits the GEMMs, the row-wise steps and attention (windows x
// KV heads); every result is bit-identical for any thread count.
// Supported: RMSNorm families with a gated MLP (llama, mistral, qwen2 with q/k/v biases, qwen3 with
// q/k norms); LayerNorm, plain MLPs and biases on o_proj / the MLP -> QUAROT_ERR_UNSUPPORTED. The
// adapter plan must list each layer's attention-norm readers as q, k, v and its MLP-norm readers as
// gate, up, in that order (the built-in adapters do).

// The objective. CE: the mean next-token cross-entropy against the windows' tokens (SpinQuant).
// KL: the mean KL divergence from the FP32 model's next-token distribution to the quantized one's,
// sum_j p_j (log p_j - log q_j) at every position t < T-1 (OstQuant's idea): p comes from an extra
// forward pass of the same batch with every quantizer off (rotation-invariant: the FP32 function is
// the same at any R), about a third more work per step and rows x vocab floats of memory. Without
// quantization KL is 0 at every rotation; CE is the model's own loss.
#define QUAROT_TRAIN_LOSS_CE 0
#define QUAROT_TRAIN_LOSS_KL 1

// Per-step report (the progress callback; also kept in quarot_trainer.history).
typedef struct quarot_train_step_info {
    int step;                        // 1..steps
    int steps;
    double loss;                     // the batch's mean loss at the rotations before this step
    double lr;                       // learning rate of this step (after the schedule)
    double alpha_r1;                 // R1's step length (quarot_stiefel_info.alpha), 0 when frozen
    double grad_norm_r1;             // ||dL/dR1||_F
    double grad_norm_r2;             // sqrt(sum over layers of ||dL/dR2||_F^2)
    double orth_error;               // the largest quarot_stiefel_info.orth_error of the step's matrices
    int reorthogonalized;            // matrices re-orthogonalized in this step
    int64_t windows;                 // windows in the batch
} quarot_train_step_info;

typedef void (*quarot_train_progress_fn)(void* user, const quarot_train_step_info* info);

typedef struct quarot_train_desc {   // zero-init = SpinQuant's defaults on QuaRot's start
    const quarot_adapter* adapter;   // NULL: quarot_adapter_find(model->config.arch)
    uint64_t seed;                   // start: R1 = QuaRot's random Hadamard of this seed, R2 = QuaRot's R2
                                     //   (quarot_rotate_desc.seed); also the window order of quarot_trainer_run
    int no_r2;                       // 1: no R2 at all (quarot_rotate_desc.no_r2)
    int freeze_r1, freeze_r2;        // 1: keep R1 / R2 at their start (only the other one learns)
    int online;                      // 1: the fixed hooks of quarot_rotate_desc.online (max_tp_size 1, every layer)
    int r3;                          // 1: the fixed q/k Hadamard after RoPE (quarot_rotate_desc.r3)
    quarot_act_quant_desc act;       // activation / K / V fake quantization during training (a_bits 0/16 = FP)
    int w_bits;                      // weights fake-quantized during training: 0 or 16 = FP (SpinQuant's
    quarot_quant_desc weight;        //   "w_bits 16"), else 2..8 per output channel of W_eff with
                                     //   weight's asymmetric / group_size / clip_ratio / clip_search
                                     //   (weight.bits is ignored)
    int steps;                       // optimizer steps of quarot_trainer_run; 0 = 100
    double lr;                       // 0 = 1.5
    int constant_lr;                 // 1: no cosine decay
    double momentum;                 // 0 = none (SpinQuant)
    int cayley_iters;                // 0 = 5
    double orth_tol;                 // 0 = 1e-6
    int64_t batch;                   // windows per step in quarot_trainer_run; 0 = 1
    int recompute;                   // 1: keep only layer inputs, run each layer again for its backward
    int loss;                        // QUAROT_TRAIN_LOSS_CE (0, SpinQuant's) or QUAROT_TRAIN_LOSS_KL
    quarot_train_progress_fn progress;   // optional, after every step of quarot_trainer_run
    void* user_data;
} quarot_train_desc;

typedef struct quarot_trainer {
    quarot_model* model;
    quarot_train_desc desc;          // as given, defaults resolved
    quarot_model_config config;      // resolved
    // The rotations (row-vector convention, x <- x R), in double: R1 [hidden][hidden] and R2
    // [n_layers][head_dim][head_dim] (NULL with no_r2). They start at QuaRot's; step and run update them.
    double* r1;
    double* r2;
    // dL/dR1, dL/dR2 of the last quarot_trainer_loss with grad = 1 (or of the last step).
    double* grad_r1;
    double* grad_r2;
    // quarot_trainer_run: the step reports [steps_run], the best step (lowest batch loss; 0 = the start)
    quarot_train_step_info* history;
    int steps_run;
    int best_step;                   // the step whose rotations had the lowest batch loss (0 = the start)
    int stop_step;                   // the step a NaN/Inf stopped (0 = none)
    char error[256];                 // the last failure
    void* priv;                      // private state (buffers, fixed transforms, plan)
} quarot_trainer;

// Validate the model (config, every tensor's shape through the plan, layer by layer) and the options,
// build the start rotations. Errors: unsupported families -> QUAROT_ERR_UNSUPPORTED; bad options ->
// QUAROT_ERR_INVALID_ARGUMENT; missing tensors -> QUAROT_ERR_NOT_FOUND; wrong shapes ->
// QUAROT_ERR_SHAPE_MISMATCH (t->error names the tensor). d may be NULL (defaults).
QUAROT_API quarot_result quarot_trainer_init(quarot_trainer* t, quarot_model* model, const quarot_train_desc* d);
QUAROT_API void          quarot_trainer_free(quarot_trainer* t);
// Replace the rotations: r1 [hidden][hidden], r2 [n_layers][head_dim][head_dim] (either may be NULL:
// kept), each orthogonal to 1e-5 (else QUAROT_ERR_INVALID_ARGUMENT naming it; nothing changed).
QUAROT_API quarot_result quarot_trainer_set_rotations(quarot_trainer* t, const double* r1, const double* r2);
// Mean next-token loss over windows tokens[n_windows][seq_len] (seq_len >= 2; all windows at once) at
// the current rotations; grad = 1 also fills t->grad_r1 / t->grad_r2 (zeros for frozen ones).
// Token ids outside the vocabulary -> QUAROT_ERR_INVALID_ARGUMENT; NaN/Inf in the loss or a gradient
// -> QUAROT_ERR_NONFINITE.
QUAROT_API quarot_result quarot_trainer_loss(quarot_trainer* t, const int32_t* tokens, int64_t n_windows,
                                             int64_t seq_len, int grad, double* loss);
// The logits [seq_len][vocab] of one window at the current rotations (a check against other forward passes).
QUAROT_API quarot_result quarot_trainer_logits(quarot_trainer* t, const int32_t* tokens, int64_t seq_len,
                                               float* logits);
// One optimizer step on the batch tokens[n_windows][seq_len], as step `step` (1-based) of `steps` for
// the learning-rate schedule; info may be NULL. On error (a NaN loss or gradient) nothing is changed.
QUAROT_API quarot_result quarot_trainer_step(quarot_trainer* t, const int32_t* tokens, int64_t n_windows,
                                             int64_t seq_len, int step, int steps, quarot_train_step_info* info);
// The whole optimization: desc.steps steps, each on desc.batch windows taken from windows[n_windows][seq_len]
// in an order shuffled per epoch by desc.seed (Fisher-Yates on quarot_rng). A NaN/Inf loss or
// gradient stops it: the rotations are set back to the ones with the lowest batch loss so far,
// t->stop_step and t->error say which step, and QUAROT_ERR_NONFINITE is returned.
QUAROT_API quarot_result quarot_trainer_run(quarot_trainer* t, const int32_t* windows, int64_t n_windows,
                                            int64_t seq_len);

// >>train_pass
// (no declarations: the layer forward / backward and the chain rule into dL/dR1, dL/dR2)

// >>train_setup
// (no declarations: the set-up of >>train_model)

// >>train_run
// (no declarations: the loss, steps and run of >>train_model)

// >>transform_body
// (no declarations: kernel bodies the implementation compiles once per ISA or element type)

// >>gemm_body
// (no declarations)

// >>polar_body
// (no declarations)

// >>gptq_body
// (no declarations)

#ifdef __cplusplus
}
#endif
#endif // QUAROT_H

/* ======================================================================================== */
/* =====================================  IMPLEMENTATION  ================================= */
/* ======================================================================================== */

#if defined(__INTELLISENSE__) || defined(__JETBRAINS_IDE__)
#define QUAROT_IMPLEMENTATION
#endif

#if defined(QUAROT_IMPLEMENTATION) && !defined(QUAROT_IMPLEMENTATION_INCLUDED)
#define QUAROT_IMPLEMENTATION_INCLUDED

// >>config
// Implementation-wide settings: includes, allocator defaults, ISA selection, no FMA contraction.
#include <string.h>
#include <math.h>
#include <stdio.h>     // snprintf only: the library never prints
#include <stdarg.h>
#include <stdlib.h>
#include <limits.h>

#if defined(QUAROT_MALLOC) && !defined(QUAROT_FREE)
#error "quarot.h: define both QUAROT_MALLOC and QUAROT_FREE, or neither"
#endif
#if !defined(QUAROT_MALLOC) && defined(QUAROT_FREE)
#error "quarot.h: define both QUAROT_MALLOC and QUAROT_FREE, or neither"
#endif
#ifndef QUAROT_MALLOC
#define QUAROT_MALLOC(sz) malloc(sz)
#define QUAROT_FREE(p) free(p)
#endif
#ifndef QUAROT_ASSERT
#include <assert.h>
#define QUAROT_ASSERT(x) assert(x)
#endif

// Instruction sets, from the compiler's own macros only.
#if !defined(QUAROT_NO_SIMD)
  #if (defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)) && !defined(QUAROT_NO_SSE2)
    #define QUAROT__HAVE_SSE2 1
  #endif
  #if defined(__AVX2__) && !defined(QUAROT_NO_AVX2)
    #define QUAROT__HAVE_AVX2 1
  #endif
  #if defined(__AVX512F__) && !defined(QUAROT_NO_AVX512)
    #define QUAROT__HAVE_AVX512 1
  #endif
  #if (defined(__ARM_NEON) || defined(__ARM_NEON__)) && defined(__aarch64__) && !defined(QUAROT_NO_NEON)
    #define QUAROT__HAVE_NEON 1
  #endif
#endif
#if defined(QUAROT__HAVE_SSE2) || defined(QUAROT__HAVE_AVX2) || defined(QUAROT__HAVE_AVX512)
  #include <immintrin.h>
#endif
#if defined(QUAROT__HAVE_NEON)
  #include <arm_neon.h>
#endif
#if defined(QUAROT_USE_CBLAS)
  #include <cblas.h>
#endif

#if defined(__FAST_MATH__) && !defined(QUAROT_ALLOW_FAST_MATH)
#error "quarot.h: -ffast-math breaks the bit-exact kernels and the platform-independent RNG; compile the \
implementation without it (or define QUAROT_ALLOW_FAST_MATH to accept that)"
#endif

// No FMA contraction anywhere in the implementation: kernels must be bit-identical to _ref.
#if defined(__clang__)
  #pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
  #pragma GCC push_options
  #pragma GCC optimize("fp-contract=off")
#endif

#ifdef __cplusplus
extern "C" {
#endif

// The implementation includes this file again to compile the kernel bodies of the sections marked
// _body once per ISA or element type (stb_image_resize2.h does the same): QUAROT_HEADER_FILE names it.
// The default "quarot.h" is found beside this file whatever the include path; define it when the file
// is renamed.
#ifndef QUAROT_HEADER_FILE
#define QUAROT_HEADER_FILE "quarot.h"
#endif
#define QUAROT__TEMPLATE_TRANSFORM 1   // >>transform_body, per ISA
#define QUAROT__TEMPLATE_GEMM 2        // >>gemm_body, per element type
#define QUAROT__TEMPLATE_POLAR 3       // >>polar_body, per element type
#define QUAROT__TEMPLATE_GPTQ 4        // >>gptq_body, per ISA
#define QUAROT__CAT2(a, b) a##b
#define QUAROT__CAT(a, b) QUAROT__CAT2(a, b)
#define QUAROT__K(name) QUAROT__CAT(name, QUAROT__ISA)   // name##<isa>: quarot__wht_row_f32_avx2

// QUAROT__PRIVATE marks private helpers that some configurations (e.g. QUAROT_NO_SIMD) do not call.
#if defined(__GNUC__) || defined(__clang__)
  #define QUAROT__PRIVATE static __attribute__((unused))
#else
  #define QUAROT__PRIVATE static
#endif
// QUAROT__INLINE: a kernel body written once for a compile-time parameter (a token count), inlined
// into each caller that passes a constant, so every instance compiles as if written out.
#if defined(__GNUC__) || defined(__clang__)
  #define QUAROT__INLINE static inline __attribute__((always_inline))
#elif defined(_MSC_VER)
  #define QUAROT__INLINE static __forceinline
#else
  #define QUAROT__INLINE static inline
#endif
#if defined(__GNUC__) || defined(__clang__)
  #define QUAROT__RESTRICT __restrict__
  #define QUAROT__LIKELY(x) __builtin_expect(!!(x), 1)
  #define QUAROT__PREFETCH(p) __builtin_prefetch(p)   // a hint: reads nothing, never faults
#elif defined(_MSC_VER)
  #define QUAROT__RESTRICT __restrict
  #define QUAROT__LIKELY(x) (x)
  #define QUAROT__PREFETCH(p) ((void)(p))
#else
  #define QUAROT__RESTRICT
  #define QUAROT__LIKELY(x) (x)
  #define QUAROT__PREFETCH(p) ((void)(p))
#endif

QUAROT_API const char* quarot_version_string(void) { return QUAROT_VERSION_STRING; }

// Checked size arithmetic: 0 on overflow (callers treat it as an error).
QUAROT__PRIVATE int quarot__mul_size(size_t a, size_t b, size_t* out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

// >>result
QUAROT_API const char* quarot_result_string(quarot_result r) {
    switch (r) {
#define QUAROT__RESULT_CASE(name, value, text) case name: return text;
        QUAROT_RESULT_LIST(QUAROT__RESULT_CASE)
#undef QUAROT__RESULT_CASE
        default: return "unknown error";
    }
}

// >>env
// Default hooks wrap QUAROT_MALLOC/QUAROT_FREE; a serial loop stands in for a missing parallel hook.
QUAROT_API void* quarot_env_alloc(const quarot_env* env, size_t size) {
    if (size == 0) return NULL;
    if (env && env->allocator.alloc) return env->allocator.alloc(size, env->allocator.user_data);
    return QUAROT_MALLOC(size);
}

QUAROT_API void quarot_env_free(const quarot_env* env, void* ptr) {
    if (!ptr) return;
    if (env && env->allocator.alloc) {
        if (env->allocator.free) env->allocator.free(ptr, env->allocator.user_data);
        return;
    }
    QUAROT_FREE(ptr);
}

QUAROT_API void quarot_env_parallel_for(const quarot_env* env, quarot_task_fn fn, void* arg, int64_t n) {
    int64_t i;
    if (n <= 0 || !fn) return;
    if (env && env->parallel.run && env->parallel.n_threads > 1 && n > 1) {
        env->parallel.run(env->parallel.user_data, fn, arg, n);
        return;
    }
    for (i = 0; i < n; ++i) fn(arg, i);
}

// >>rng
// splitmix64 expands the seed into xoshiro256** state. The logarithm for the polar method is
// computed here (frexp + atanh series), so normal deviates do not depend on the platform's libm.
static uint64_t quarot__splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t quarot__rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

QUAROT_API void quarot_rng_seed(quarot_rng* rng, uint64_t seed) {
    uint64_t x = seed;
    int i;
    if (!rng) return;
    for (i = 0; i < 4; ++i) rng->s[i] = quarot__splitmix64(&x);
    rng->spare = 0.0;
    rng->has_spare = 0;
}

QUAROT_API uint64_t quarot_rng_u64(quarot_rng* rng) {
    uint64_t* s;
    if (!rng) return 0;
    s = rng->s;
    if ((s[0] | s[1] | s[2] | s[3]) == 0) quarot_rng_seed(rng, 0);   // zero-init = seed 0 (xoshiro's all-zero state is
                                                                     // a fixed point)
    uint64_t result = quarot__rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = quarot__rotl64(s[3], 45);
    return result;
}

QUAROT_API double quarot_rng_uniform(quarot_rng* rng) {
    return (double)(quarot_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

// ln(x) for finite x > 0, to ~1 ulp, using only IEEE +,-,*,/ and frexp (exact): x = f*2^e with
// f in [sqrt(1/2), sqrt(2)), ln f = 2*atanh(s), s = (f-1)/(f+1), |s| < 0.172.
static double quarot__log(double x) {
    int e;
    double f = frexp(x, &e), s, s2, term, sum;
    int k;
    if (f < 0.70710678118654752440) { f *= 2.0; e -= 1; }
    s = (f - 1.0) / (f + 1.0);
    s2 = s * s;
    term = s;
    sum = 0.0;
    for (k = 1; k <= 41; k += 2) {   // s^41/41 < 1e-33: far below double precision
        sum += term / (double)k;
        term *= s2;
    }
    return 2.0 * sum + (double)e * 6.93147180369123816490e-01 + (double)e * 1.90821492927058770002e-10;
}

QUAROT_API double quarot_rng_normal(quarot_rng* rng) {
    double u, v, s, f;
    if (!rng) return 0.0;
    if (rng->has_spare) {
        rng->has_spare = 0;
        return rng->spare;
    }
    do {
        u = 2.0 * quarot_rng_uniform(rng) - 1.0;
        v = 2.0 * quarot_rng_uniform(rng) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    f = sqrt(-2.0 * quarot__log(s) / s);
    rng->spare = v * f;
    rng->has_spare = 1;
    return u * f;
}

QUAROT_API void quarot_rng_signs_f32(quarot_rng* rng, float* out, int64_t n) {
    int64_t i;
    if (!rng || !out) return;
    for (i = 0; i < n; ++i) out[i] = (quarot_rng_u64(rng) >> 63) ? -1.0f : 1.0f;
}

// >>tensor
// Views are validated with checked arithmetic: extent = esize + sum_i (ne[i]-1)*nb[i] must fit size_t.
// Conversions round to nearest even: f32->f16/bf16 by integer bit manipulation (fast, exact);
// f64->f16/bf16 by scaling to the target's unit in the last place and rounding once.
static int quarot__dtype_valid(quarot_dtype dt) {
    return dt == QUAROT_DTYPE_DEFAULT || dt == QUAROT_DTYPE_F32 || dt == QUAROT_DTYPE_F16 ||
           dt == QUAROT_DTYPE_BF16 || dt == QUAROT_DTYPE_F64;
}

QUAROT_API size_t quarot_dtype_size(quarot_dtype dt) {
    switch (dt) {
        case QUAROT_DTYPE_DEFAULT:
        case QUAROT_DTYPE_F32: return 4;
        case QUAROT_DTYPE_F16:
        case QUAROT_DTYPE_BF16: return 2;
        case QUAROT_DTYPE_F64: return 8;
        default: return 0;
    }
}

QUAROT_API const char* quarot_dtype_name(quarot_dtype dt) {
    switch (dt) {
        case QUAROT_DTYPE_DEFAULT:
        case QUAROT_DTYPE_F32: return "f32";
        case QUAROT_DTYPE_F16: return "f16";
        case QUAROT_DTYPE_BF16: return "bf16";
        case QUAROT_DTYPE_F64: return "f64";
        default: return "unknown";
    }
}

// Byte extent of a view, 0 when the shape is invalid or the extent overflows.
static size_t quarot__tensor_extent(const quarot_tensor* t) {
    size_t es, total, part;
    int i;
    if (!t || !quarot__dtype_valid(t->dtype)) return 0;
    es = quarot_dtype_size(t->dtype);
    total = es;
    for (i = 0; i < QUAROT_MAX_DIMS; ++i) {
        if (t->ne[i] < 1) return 0;
        if (!quarot__mul_size((size_t)(t->ne[i] - 1), t->nb[i], &part)) return 0;
        if (part > SIZE_MAX - total) return 0;
        total += part;
    }
    return total;
}

QUAROT_API quarot_result quarot_tensor_init(quarot_tensor* t, void* data, quarot_dtype dt,
                                            int n_dims, const int64_t* ne) {
    size_t stride;
    int i;
    if (!t || !ne || n_dims < 1 || n_dims > QUAROT_MAX_DIMS) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot__dtype_valid(dt)) return QUAROT_ERR_UNSUPPORTED_DTYPE;
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dt == QUAROT_DTYPE_DEFAULT ? QUAROT_DTYPE_F32 : dt;
    stride = quarot_dtype_size(t->dtype);
    for (i = 0; i < QUAROT_MAX_DIMS; ++i) {
        int64_t n = i < n_dims ? ne[i] : 1;
        if (n < 1) return QUAROT_ERR_INVALID_ARGUMENT;
        if ((uint64_t)n > (uint64_t)SIZE_MAX) return QUAROT_ERR_OVERFLOW;
        t->ne[i] = n;
        t->nb[i] = stride;
        if (!quarot__mul_size(stride, (size_t)n, &stride)) return QUAROT_ERR_OVERFLOW;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_tensor_validate(const quarot_tensor* t) {
    int i;
    if (!t || !t->data) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot__dtype_valid(t->dtype)) return QUAROT_ERR_UNSUPPORTED_DTYPE;
    for (i = 0; i < QUAROT_MAX_DIMS; ++i)
        if (t->ne[i] < 1) return QUAROT_ERR_INVALID_ARGUMENT;
    if (t->nb[0] != quarot_dtype_size(t->dtype)) return QUAROT_ERR_SHAPE_MISMATCH;
    for (i = 1; i < QUAROT_MAX_DIMS; ++i) {
        size_t span;
        if (!quarot__mul_size(t->nb[i - 1], (size_t)t->ne[i - 1], &span)) return QUAROT_ERR_OVERFLOW;
        if (t->ne[i] > 1 && t->nb[i] < span) return QUAROT_ERR_SHAPE_MISMATCH;   // rows would overlap
    }
    if (quarot__tensor_extent(t) == 0) return QUAROT_ERR_OVERFLOW;
    return QUAROT_OK;
}

QUAROT_API size_t quarot_tensor_nbytes(const quarot_tensor* t) { return quarot__tensor_extent(t); }

QUAROT_API int64_t quarot_tensor_nelements(const quarot_tensor* t) {
    int64_t n = 1;
    int i;
    if (!t) return 0;
    for (i = 0; i < QUAROT_MAX_DIMS; ++i) {
        if (t->ne[i] < 1 || n > INT64_MAX / t->ne[i]) return 0;
        n *= t->ne[i];
    }
    return n;
}

QUAROT_API int64_t quarot_tensor_nrows(const quarot_tensor* t) {
    if (!t || t->ne[0] < 1) return 0;
    return quarot_tensor_nelements(t) / t->ne[0];
}

QUAROT_API int quarot_tensor_is_contiguous(const quarot_tensor* t) {
    int i;
    if (!t || t->nb[0] != quarot_dtype_size(t->dtype) || t->nb[0] == 0) return 0;
    for (i = 1; i < QUAROT_MAX_DIMS; ++i)
        if (t->ne[i] > 1 && t->nb[i] != t->nb[i - 1] * (size_t)t->ne[i - 1]) return 0;
    return 1;
}

// Address of row r (flat over ne[1..3]) of a validated view, NULL when r is out of range.
static char* quarot__tensor_row(const quarot_tensor* t, int64_t r) {
    int64_t i1, i2, i3;
    if (quarot_tensor_validate(t) != QUAROT_OK) return NULL;
    if (r < 0 || r >= quarot_tensor_nrows(t)) return NULL;
    i1 = r % t->ne[1];
    i2 = (r / t->ne[1]) % t->ne[2];
    i3 = r / (t->ne[1] * t->ne[2]);
    return (char*)t->data + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
}

static float quarot__bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t quarot__f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

// f32 -> f16, round to nearest even. NaN keeps its top payload bits and becomes quiet.
static uint16_t quarot__f32_to_f16_1(float f) {
    uint32_t x = quarot__f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return (uint16_t)(sign | (x > 0x7f800000u ? (0x7e00u | ((x >> 13) & 0x3ffu)) : 0x7c00u));
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);          // >= 65520 rounds to Inf
    if (x < 0x38800000u) {                                             // below 2^-14: subnormal or 0
        uint32_t mant, shift, r, rem, half;
        if (x <= 0x33000000u) return (uint16_t)sign;                   // <= 2^-25 rounds to 0 (ties to even)
        mant = (x & 0x7fffffu) | 0x800000u;
        shift = 126u - (x >> 23);                                      // value = mant * 2^(e-150); unit 2^-24
        r = mant >> shift;
        rem = mant & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) ++r;
        return (uint16_t)(sign | r);
    }
    x = x - 0x38000000u;                                               // rebias exponent 127 -> 15
    x += 0xfffu + ((x >> 13) & 1u);
    return (uint16_t)(sign | (x >> 13));
}

static float quarot__f16_to_f32_1(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return quarot__bits_to_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));   // NaN: quiet
                                                                                                   // as F16C / NEON
    if (e == 0) {
        if (m == 0) return quarot__bits_to_f32(sign);
        e = 113;                                                       // normalize the subnormal
        while (!(m & 0x400u)) { m <<= 1; --e; }
        m &= 0x3ffu;
        return quarot__bits_to_f32(sign | (e << 23) | (m << 13));
    }
    return quarot__bits_to_f32(sign | ((e + 112u) << 23) | (m << 13));
}

static uint16_t quarot__f32_to_bf16_1(float f) {
    uint32_t x = quarot__f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float quarot__bf16_to_f32_1(uint16_t h) { return quarot__bits_to_f32((uint32_t)h << 16); }

// In >>convert: f64 -> f32 rounded to odd (so that rounding that on to f16/bf16 rounds x once), and
// the row conversion every function below goes through (SIMD, bit-identical to the scalar code here).
static float quarot__f64_to_f32_odd(double x);
static void quarot__convert_run(void* out, quarot_dtype odt, const void* in, quarot_dtype idt, int64_t n,
                                quarot_isa isa);

QUAROT_API uint16_t quarot_f64_to_f16_1(double x) { return quarot__f32_to_f16_1(quarot__f64_to_f32_odd(x)); }
QUAROT_API uint16_t quarot_f64_to_bf16_1(double x) { return quarot__f32_to_bf16_1(quarot__f64_to_f32_odd(x)); }

QUAROT_API void quarot_f32_to_f16(const float* in, uint16_t* out, int64_t n) {
    if (in && out) quarot__convert_run(out, QUAROT_DTYPE_F16, in, QUAROT_DTYPE_F32, n, quarot_isa_best());
}
QUAROT_API void quarot_f16_to_f32(const uint16_t* in, float* out, int64_t n) {
    if (in && out) quarot__convert_run(out, QUAROT_DTYPE_F32, in, QUAROT_DTYPE_F16, n, quarot_isa_best());
}
QUAROT_API void quarot_f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
    if (in && out) quarot__convert_run(out, QUAROT_DTYPE_BF16, in, QUAROT_DTYPE_F32, n, quarot_isa_best());
}
QUAROT_API void quarot_bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
    if (in && out) quarot__convert_run(out, QUAROT_DTYPE_F32, in, QUAROT_DTYPE_BF16, n, quarot_isa_best());
}

// Row access converts with the best ISA in one call (no per-element calls).
QUAROT_API quarot_result quarot_tensor_get_row_f32(const quarot_tensor* t, int64_t r, float* out) {
    const char* p = quarot__tensor_row(t, r);
    if (!p || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    quarot__convert_run(out, QUAROT_DTYPE_F32, p, t->dtype, t->ne[0], quarot_isa_best());
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_tensor_set_row_f32(quarot_tensor* t, int64_t r, const float* in) {
    char* p = quarot__tensor_row(t, r);
    if (!p || !in) return QUAROT_ERR_INVALID_ARGUMENT;
    quarot__convert_run(p, t->dtype, in, QUAROT_DTYPE_F32, t->ne[0], quarot_isa_best());
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_tensor_get_row_f64(const quarot_tensor* t, int64_t r, double* out) {
    const char* p = quarot__tensor_row(t, r);
    if (!p || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    quarot__convert_run(out, QUAROT_DTYPE_F64, p, t->dtype, t->ne[0], quarot_isa_best());
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_tensor_set_row_f64(quarot_tensor* t, int64_t r, const double* in) {
    char* p = quarot__tensor_row(t, r);
    if (!p || !in) return QUAROT_ERR_INVALID_ARGUMENT;
    quarot__convert_run(p, t->dtype, in, QUAROT_DTYPE_F64, t->ne[0], quarot_isa_best());
    return QUAROT_OK;
}

// Rows are scanned in blocks of 256 elements (no alignment assumed) with a branch-free OR of the
// "exponent all ones" test; only a block that has a bad element is searched again for its index.
// Each element is read with a memcpy of its own size (no aliasing question for any dtype), which
// compilers turn into plain loads and, with the constant count, vectorize at -O2 (a copy of each block
// into a local array first would cost a memmove call per 1 KiB).
// 1 when one of the 256 elements of size es at p (dtype dt) is NaN or Inf.
static unsigned quarot__nonfinite_any256(const char* p, size_t es, quarot_dtype dt) {
    unsigned bad = 0;
    int i;
    if (es == 8) {
        for (i = 0; i < 256; ++i) {
            uint64_t u;
            memcpy(&u, p + 8 * (size_t)i, 8);
            bad |= (unsigned)((u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull);
        }
    } else if (es == 4) {
        for (i = 0; i < 256; ++i) {
            uint32_t u;
            memcpy(&u, p + 4 * (size_t)i, 4);
            bad |= (unsigned)((u & 0x7f800000u) == 0x7f800000u);
        }
    } else {
        const unsigned em = dt == QUAROT_DTYPE_F16 ? 0x7c00u : 0x7f80u;
        for (i = 0; i < 256; ++i) {
            uint16_t u;
            memcpy(&u, p + 2 * (size_t)i, 2);
            bad |= (unsigned)((u & em) == em);
        }
    }
    return bad;
}

// Element i of a row of es-byte floats (dtype dt) is NaN or Inf.
static int quarot__nonfinite_at(const char* p, int64_t i, size_t es, quarot_dtype dt) {
    if (es == 8) {
        uint64_t u;
        memcpy(&u, p + 8 * (size_t)i, 8);
        return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
    }
    if (es == 4) {
        uint32_t u;
        memcpy(&u, p + 4 * (size_t)i, 4);
        return (u & 0x7f800000u) == 0x7f800000u;
    }
    {
        const unsigned em = dt == QUAROT_DTYPE_F16 ? 0x7c00u : 0x7f80u;
        uint16_t u;
        memcpy(&u, p + 2 * (size_t)i, 2);
        return (u & em) == em;
    }
}

// Rows [r0, r1) of a valid tensor; *first_bad = the first bad element's flat index.
static quarot_result quarot__check_finite_rows(const quarot_tensor* t, int64_t r0, int64_t r1, int64_t* first_bad) {
    int64_t r, i, i0, c, n = t->ne[0];
    size_t es = quarot_dtype_size(t->dtype);
    for (r = r0; r < r1; ++r) {
        const char* p = quarot__tensor_row(t, r);
        for (i0 = 0; i0 < n; i0 += c) {
            c = n - i0 < 256 ? n - i0 : 256;
            // whole blocks by the vectorized test; a short last block, or a block with a bad
            // element, element by element
            if (c == 256 && !quarot__nonfinite_any256(p + (size_t)i0 * es, es, t->dtype)) continue;
            for (i = 0; i < c; ++i)
                if (quarot__nonfinite_at(p, i0 + i, es, t->dtype)) {
                    if (first_bad) *first_bad = r * n + i0 + i;
                    return QUAROT_ERR_NONFINITE;
                }
        }
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_tensor_check_finite(const quarot_tensor* t, int64_t* first_bad) {
    quarot_result res = quarot_tensor_validate(t);
    if (first_bad) *first_bad = -1;
    if (res != QUAROT_OK) return res;
    return quarot__check_finite_rows(t, 0, quarot_tensor_nrows(t), first_bad);
}

// The same check split into row blocks on env's parallel hook; the reported element is the first
// bad one in row-major order whatever the split (the lowest block that found one).
#define QUAROT__FINITE_ROWS 256
typedef struct quarot__finite_job {
    const quarot_tensor* t;
    int64_t* first;           // per task: first bad index, -1 none
} quarot__finite_job;

static void quarot__finite_task(void* arg, int64_t task) {
    const quarot__finite_job* j = (const quarot__finite_job*)arg;
    int64_t rows = quarot_tensor_nrows(j->t), r0 = task * QUAROT__FINITE_ROWS;
    int64_t r1 = rows - r0 < QUAROT__FINITE_ROWS ? rows : r0 + QUAROT__FINITE_ROWS;
    j->first[task] = -1;
    (void)quarot__check_finite_rows(j->t, r0, r1, &j->first[task]);
}

static quarot_result quarot__check_finite_env(const quarot_tensor* t, int64_t* first_bad, const quarot_env* env) {
    quarot__finite_job job;
    int64_t n_tasks, k, rows;
    quarot_result res = quarot_tensor_validate(t);
    *first_bad = -1;
    if (res != QUAROT_OK) return res;
    rows = quarot_tensor_nrows(t);
    n_tasks = (rows + QUAROT__FINITE_ROWS - 1) / QUAROT__FINITE_ROWS;
    if (!env || !env->parallel.run || env->parallel.n_threads <= 1 || n_tasks < 2)
        return quarot__check_finite_rows(t, 0, rows, first_bad);
    job.t = t;
    job.first = (int64_t*)quarot_env_alloc(env, (size_t)n_tasks * sizeof(int64_t));
    if (!job.first) return quarot__check_finite_rows(t, 0, rows, first_bad);
    quarot_env_parallel_for(env, quarot__finite_task, &job, n_tasks);
    for (k = 0; k < n_tasks; ++k)
        if (job.first[k] >= 0) { *first_bad = job.first[k]; res = QUAROT_ERR_NONFINITE; break; }
    quarot_env_free(env, job.first);
    return res;
}

// >>simd
// The compiled-in ISA set is fixed by the macros above; DEFAULT resolves to the widest one.
QUAROT_API int quarot_isa_compiled(quarot_isa isa) {
    switch (isa) {
        case QUAROT_ISA_DEFAULT:
        case QUAROT_ISA_REF: return 1;
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2: return 1;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2: return 1;
#endif
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512: return 1;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON: return 1;
#endif
        default: return 0;
    }
}

QUAROT_API quarot_isa quarot_isa_best(void) {
#if defined(QUAROT__HAVE_AVX512)
    return QUAROT_ISA_AVX512;
#elif defined(QUAROT__HAVE_AVX2)
    return QUAROT_ISA_AVX2;
#elif defined(QUAROT__HAVE_NEON)
    return QUAROT_ISA_NEON;
#elif defined(QUAROT__HAVE_SSE2)
    return QUAROT_ISA_SSE2;
#else
    return QUAROT_ISA_REF;
#endif
}

QUAROT_API const char* quarot_isa_name(quarot_isa isa) {
    switch (isa) {
        case QUAROT_ISA_DEFAULT: return "default";
        case QUAROT_ISA_REF: return "ref";
        case QUAROT_ISA_SSE2: return "sse2";
        case QUAROT_ISA_AVX2: return "avx2";
        case QUAROT_ISA_AVX512: return "avx512";
        case QUAROT_ISA_NEON: return "neon";
        default: return "unknown";
    }
}

QUAROT_API const char* quarot_simd_name(void) {
    return ""
#if defined(QUAROT__HAVE_AVX512)
        "avx512 "
#endif
#if defined(QUAROT__HAVE_AVX2)
        "avx2 "
#endif
#if defined(QUAROT__HAVE_NEON)
        "neon "
#endif
#if defined(QUAROT__HAVE_SSE2)
        "sse2 "
#endif
        "ref";
}

// Resolve DEFAULT and reject ISAs that are not compiled in.
QUAROT__PRIVATE quarot_result quarot__isa_resolve(quarot_isa isa, quarot_isa* out) {
    if (isa == QUAROT_ISA_DEFAULT) { *out = quarot_isa_best(); return QUAROT_OK; }
    if ((int)isa < 0 || (int)isa >= (int)QUAROT_ISA_COUNT_) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot_isa_compiled(isa)) return QUAROT_ERR_UNSUPPORTED;
    *out = isa;
    return QUAROT_OK;
}

// >>convert
// One kernel per (conversion, ISA); the SIMD ones run whole vectors and hand the tail to _ref.
// quarot_convert takes untyped buffers that may be unaligned (rows of a file mapping), so every
// scalar access goes through memcpy and every vector access is an unaligned load / store.
// f64 -> f16/bf16: round to odd into f32 (quarot__f64_to_f32_odd), then the f32 conversion; NaNs
// become sign | quiet NaN with an empty payload first, which both f32 conversions keep as it is.
#if defined(QUAROT__HAVE_SSE2) && defined(__F16C__)
  #define QUAROT__HAVE_F16C 1
#endif

static void quarot__cvt_h2f_ref(const void* in, float* out, int64_t n) {
    const char* p = (const char*)in;
    int64_t i;
    for (i = 0; i < n; ++i) {
        uint16_t h;
        float f;
        memcpy(&h, p + 2 * i, 2);
        f = quarot__f16_to_f32_1(h);
        memcpy((char*)out + 4 * i, &f, 4);
    }
}
static void quarot__cvt_f2h_ref(const float* in, void* out, int64_t n) {
    char* p = (char*)out;
    int64_t i;
    for (i = 0; i < n; ++i) {
        float f;
        uint16_t h;
        memcpy(&f, (const char*)in + 4 * i, 4);
        h = quarot__f32_to_f16_1(f);
        memcpy(p + 2 * i, &h, 2);
    }
}
static void quarot__cvt_b2f_ref(const void* in, float* out, int64_t n) {
    const char* p = (const char*)in;
    int64_t i;
    for (i = 0; i < n; ++i) {
        uint16_t h;
        float f;
        memcpy(&h, p + 2 * i, 2);
        f = quarot__bf16_to_f32_1(h);
        memcpy((char*)out + 4 * i, &f, 4);
    }
}
static void quarot__cvt_f2b_ref(const float* in, void* out, int64_t n) {
    char* p = (char*)out;
    int64_t i;
    for (i = 0; i < n; ++i) {
        float f;
        uint16_t h;
        memcpy(&f, (const char*)in + 4 * i, 4);
        h = quarot__f32_to_bf16_1(f);
        memcpy(p + 2 * i, &h, 2);
    }
}
// f64 -> f32 rounded to odd: toward zero, then the last bit set when inexact. |x| > FLT_MAX gives
// +-FLT_MAX (odd), Inf stays Inf, NaN becomes sign | 0x7fc00000.
static float quarot__f64_to_f32_odd(double x) {
    uint64_t b;
    uint32_t sign, u;
    float f;
    double back;
    memcpy(&b, &x, 8);
    sign = (uint32_t)(b >> 63) << 31;
    if (x != x) return quarot__bits_to_f32(sign | 0x7fc00000u);
    if (x > 3.4028234663852886e38 || x < -3.4028234663852886e38)
        return quarot__bits_to_f32(sign | ((b & 0x7fffffffffffffffull) == 0x7ff0000000000000ull ? 0x7f800000u
                                                                                                 : 0x7f7fffffu));
    f = (float)x;
    back = (double)f;
    if (back == x) return f;
    u = quarot__f32_to_bits(f);
    if (fabs(back) > fabs(x)) u -= 1u;   // rounded away from zero: step back toward it (|f| > 0 here)
    return quarot__bits_to_f32(u | 1u);
}
static void quarot__cvt_d2o_ref(const double* in, float* out, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) {
        double d;
        float f;
        memcpy(&d, (const char*)in + 8 * i, 8);
        f = quarot__f64_to_f32_odd(d);
        memcpy((char*)out + 4 * i, &f, 4);
    }
}
static void quarot__cvt_d2f_ref(const double* in, float* out, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) {
        double d;
        float f;
        memcpy(&d, (const char*)in + 8 * i, 8);
        f = (float)d;
        memcpy((char*)out + 4 * i, &f, 4);
    }
}
static void quarot__cvt_f2d_ref(const float* in, double* out, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) {
        float f;
        double d;
        memcpy(&f, (const char*)in + 4 * i, 4);
        d = (double)f;
        memcpy((char*)out + 8 * i, &d, 8);
    }
}

// The kernels of one ISA. d2o: f64 -> f32 rounded to odd (above); d2f / f2d: plain casts (RNE).
typedef struct quarot__cvt_fns {
    void (*h2f)(const void*, float*, int64_t);
    void (*f2h)(const float*, void*, int64_t);
    void (*b2f)(const void*, float*, int64_t);
    void (*f2b)(const float*, void*, int64_t);
    void (*d2o)(const double*, float*, int64_t);
    void (*d2f)(const double*, float*, int64_t);
    void (*f2d)(const float*, double*, int64_t);
} quarot__cvt_fns;

// ---- SSE2 (bf16, f32<->f64; f16 with F16C) ----
#if defined(QUAROT__HAVE_SSE2)
#if defined(QUAROT__HAVE_F16C)
static void quarot__cvt_h2f_sse2(const void* in, float* out, int64_t n) {
    const char* p = (const char*)in;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm_storeu_ps(out + i, _mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)(const void*)(p + 2 * i))));
    quarot__cvt_h2f_ref(p + 2 * i, out + i, n - i);
}
static void quarot__cvt_f2h_sse2(const float* in, void* out, int64_t n) {
    char* p = (char*)out;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm_storel_epi64((__m128i*)(void*)(p + 2 * i), _mm_cvtps_ph(_mm_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    quarot__cvt_f2h_ref(in + i, p + 2 * i, n - i);
}
#else
#define quarot__cvt_h2f_sse2 quarot__cvt_h2f_ref
#define quarot__cvt_f2h_sse2 quarot__cvt_f2h_ref
#endif
static void quarot__cvt_b2f_sse2(const void* in, float* out, int64_t n) {
    const char* p = (const char*)in;
    const __m128i z = _mm_setzero_si128();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i*)(const void*)(p + 2 * i));
        _mm_storeu_ps(out + i, _mm_castsi128_ps(_mm_unpacklo_epi16(z, h)));
        _mm_storeu_ps(out + i + 4, _mm_castsi128_ps(_mm_unpackhi_epi16(z, h)));
    }
    quarot__cvt_b2f_ref(p + 2 * i, out + i, n - i);
}
// x + 0x7fff + ((x >> 16) & 1), NaN -> (x >> 16) | 0x40; the high halves, sign-extended so that the
// signed pack keeps them.
static inline __m128i quarot__f2b4_sse2(__m128 v) {
    const __m128i x = _mm_castps_si128(v);
    const __m128i one = _mm_set1_epi32(1), bias = _mm_set1_epi32(0x7fff), absm = _mm_set1_epi32(0x7fffffff);
    const __m128i inf = _mm_set1_epi32(0x7f800000), qb = _mm_set1_epi32(0x00400000);
    const __m128i r = _mm_add_epi32(_mm_add_epi32(x, bias), _mm_and_si128(_mm_srli_epi32(x, 16), one));
    const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(x, absm), inf);
    const __m128i y = _mm_or_si128(_mm_and_si128(nan, _mm_or_si128(x, qb)), _mm_andnot_si128(nan, r));
    return _mm_srai_epi32(y, 16);
}
static void quarot__cvt_f2b_sse2(const float* in, void* out, int64_t n) {
    char* p = (char*)out;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(void*)(p + 2 * i), _mm_packs_epi32(quarot__f2b4_sse2(_mm_loadu_ps(in + i)),
                                                                       quarot__f2b4_sse2(_mm_loadu_ps(in + i + 4))));
    quarot__cvt_f2b_ref(in + i, p + 2 * i, n - i);
}
static void quarot__cvt_d2f_sse2(const double* in, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm_storeu_ps(out + i,
                      _mm_movelh_ps(_mm_cvtpd_ps(_mm_loadu_pd(in + i)), _mm_cvtpd_ps(_mm_loadu_pd(in + i + 2))));
    quarot__cvt_d2f_ref(in + i, out + i, n - i);
}
static void quarot__cvt_f2d_sse2(const float* in, double* out, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m128 v = _mm_loadu_ps(in + i);
        _mm_storeu_pd(out + i, _mm_cvtps_pd(v));
        _mm_storeu_pd(out + i + 2, _mm_cvtps_pd(_mm_movehl_ps(v, v)));
    }
    quarot__cvt_f2d_ref(in + i, out + i, n - i);
}
#endif

// ---- AVX2 (bf16, f32<->f64, round-to-odd; f16 with F16C) ----
#if defined(QUAROT__HAVE_AVX2)
#if defined(QUAROT__HAVE_F16C)
static void quarot__cvt_h2f_avx2(const void* in, float* out, int64_t n) {
    const char* p = (const char*)in;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(const void*)(p + 2 * i))));
    quarot__cvt_h2f_ref(p + 2 * i, out + i, n - i);
}
static void quarot__cvt_f2h_avx2(const float* in, void* out, int64_t n) {
    char* p = (char*)out;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(void*)(p + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    quarot__cvt_f2h_ref(in + i, p + 2 * i, n - i);
}
#else
#define quarot__cvt_h2f_avx2 quarot__cvt_h2f_ref
#define quarot__cvt_f2h_avx2 quarot__cvt_f2h_ref
#endif
static void quarot__cvt_b2f_avx2(const void* in, float* out, int64_t n) {
    const char* p = (const char*)in;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(const void*)(p + 2 * i))), 16)));
    quarot__cvt_b2f_ref(p + 2 * i, out + i, n - i);
}
static void quarot__cvt_f2b_avx2(const float* in, void* out, int64_t n) {
    char* p = (char*)out;
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), absm = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000), qb = _mm256_set1_epi32(0x00400000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(in + i));
        const __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(_mm256_srli_epi32(x, 16), one));
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, absm), inf);
        const __m256i y = _mm256_srli_epi32(_mm256_blendv_epi8(r, _mm256_or_si256(x, qb), nan), 16);
        const __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(y, y), 0x08);   // lanes 0, 2
        _mm_storeu_si128((__m128i*)(void*)(p + 2 * i), _mm256_castsi256_si128(pk));
    }
    quarot__cvt_f2b_ref(in + i, p + 2 * i, n - i);
}
static void quarot__cvt_d2f_avx2(const double* in, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, _mm256_cvtpd_ps(_mm256_loadu_pd(in + i)));
    quarot__cvt_d2f_ref(in + i, out + i, n - i);
}
static void quarot__cvt_f2d_avx2(const float* in, double* out, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(out + i, _mm256_cvtps_pd(_mm_loadu_ps(in + i)));
    quarot__cvt_f2d_ref(in + i, out + i, n - i);
}
// Round to odd from the nearest-even conversion: one step toward zero where it rounded away, the
// last bit set where inexact; |x| > FLT_MAX first rounds to Inf, which the step turns into FLT_MAX.
static void quarot__cvt_d2o_avx2(const double* in, float* out, int64_t n) {
    const __m256d absm = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
    const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0);
    const __m128i one = _mm_set1_epi32(1), qnan = _mm_set1_epi32(0x7fc00000), sgn = _mm_set1_epi32(INT_MIN);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m256d x = _mm256_loadu_pd(in + i);
        const __m128 f = _mm256_cvtpd_ps(x);
        const __m256d back = _mm256_cvtps_pd(f);
        const __m256d away = _mm256_cmp_pd(_mm256_and_pd(back, absm), _mm256_and_pd(x, absm), _CMP_GT_OQ);
        const __m256d inex = _mm256_cmp_pd(back, x, _CMP_NEQ_OQ);
        const __m256d nanm = _mm256_cmp_pd(x, x, _CMP_UNORD_Q);
        const __m128i a32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), pick));
        const __m128i i32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(inex), pick));
        const __m128i n32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(nanm), pick));
        __m128i u = _mm_add_epi32(_mm_castps_si128(f), a32);          // a32 is -1 where rounded away
        u = _mm_or_si128(u, _mm_and_si128(i32, one));
        u = _mm_blendv_epi8(u, _mm_or_si128(_mm_and_si128(_mm_castps_si128(f), sgn), qnan), n32);
        _mm_storeu_ps(out + i, _mm_castsi128_ps(u));
    }
    quarot__cvt_d2o_ref(in + i, out + i, n - i);
}
#endif

// ---- AVX-512F ----
// The zero-masked forms with an all-ones mask are the plain instructions; the unmasked intrinsics read
// _mm512_undefined_*(), which g++ -O1 reports as maybe-uninitialized.
#if defined(QUAROT__HAVE_AVX512)
static void quarot__cvt_h2f_avx512(const void* in, float* out, int64_t n) {
    const char* p = (const char*)in;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_maskz_cvtph_ps((__mmask16)0xFFFF,
                                                        _mm256_loadu_si256((const __m256i*)(const void*)(p + 2 * i))));
    quarot__cvt_h2f_ref(p + 2 * i, out + i, n - i);
}
static void quarot__cvt_f2h_avx512(const float* in, void* out, int64_t n) {
    char* p = (char*)out;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i*)(void*)(p + 2 * i),
                            _mm512_maskz_cvtps_ph((__mmask16)0xFFFF, _mm512_loadu_ps(in + i),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    quarot__cvt_f2h_ref(in + i, p + 2 * i, n - i);
}
static void quarot__cvt_b2f_avx512(const void* in, float* out, int64_t n) {
    const char* p = (const char*)in;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
            (__mmask16)0xFFFF,
            _mm512_maskz_cvtepu16_epi32((__mmask16)0xFFFF,
                                        _mm256_loadu_si256((const __m256i*)(const void*)(p + 2 * i))),
            16)));
    quarot__cvt_b2f_ref(p + 2 * i, out + i, n - i);
}
static void quarot__cvt_f2b_avx512(const float* in, void* out, int64_t n) {
    char* p = (char*)out;
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), absm = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000), qb = _mm512_set1_epi32(0x00400000);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(in + i));
        const __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, bias),
                                           _mm512_and_si512(_mm512_maskz_srli_epi32((__mmask16)0xFFFF, x, 16), one));
        const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, absm), inf);
        const __m512i y = _mm512_maskz_srli_epi32((__mmask16)0xFFFF,
                                                  _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(x, qb)), 16);
        _mm256_storeu_si256((__m256i*)(void*)(p + 2 * i), _mm512_maskz_cvtepi32_epi16((__mmask16)0xFFFF, y));
    }
    quarot__cvt_f2b_ref(in + i, p + 2 * i, n - i);
}
static void quarot__cvt_d2f_avx512(const double* in, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm512_maskz_cvtpd_ps((__mmask8)0xFF, _mm512_loadu_pd(in + i)));
    quarot__cvt_d2f_ref(in + i, out + i, n - i);
}
static void quarot__cvt_f2d_avx512(const float* in, double* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm512_storeu_pd(out + i, _mm512_maskz_cvtps_pd((__mmask8)0xFF, _mm256_loadu_ps(in + i)));
    quarot__cvt_f2d_ref(in + i, out + i, n - i);
}
// Round to odd with the embedded round-toward-zero conversion (|x| > FLT_MAX -> FLT_MAX).
static void quarot__cvt_d2o_avx512(const double* in, float* out, int64_t n) {
    const __m512i one = _mm512_set1_epi32(1), qnan = _mm512_set1_epi32(0x7fc00000), sgn = _mm512_set1_epi32(INT_MIN);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512d x0 = _mm512_loadu_pd(in + i), x1 = _mm512_loadu_pd(in + i + 8);
        const __m256 f0 = _mm512_maskz_cvt_roundpd_ps((__mmask8)0xFF, x0, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m256 f1 = _mm512_maskz_cvt_roundpd_ps((__mmask8)0xFF, x1, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __mmask16 inex =
            (__mmask16)(_mm512_cmp_pd_mask(_mm512_maskz_cvtps_pd((__mmask8)0xFF, f0), x0, _CMP_NEQ_OQ) |
                        (_mm512_cmp_pd_mask(_mm512_maskz_cvtps_pd((__mmask8)0xFF, f1), x1, _CMP_NEQ_OQ) << 8));
        const __mmask16 nan = (__mmask16)(_mm512_cmp_pd_mask(x0, x0, _CMP_UNORD_Q) |
                                          (_mm512_cmp_pd_mask(x1, x1, _CMP_UNORD_Q) << 8));
        __m512i u = _mm512_castpd_si512(_mm512_maskz_insertf64x4((__mmask8)0xFF,
                                                                 _mm512_castpd256_pd512(_mm256_castps_pd(f0)),
                                                                 _mm256_castps_pd(f1), 1));
        u = _mm512_mask_or_epi32(u, inex, u, one);
        u = _mm512_mask_or_epi32(u, nan, _mm512_and_si512(u, sgn), qnan);
        _mm512_storeu_si512((void*)(out + i), u);
    }
    quarot__cvt_d2o_ref(in + i, out + i, n - i);
}
#endif

// ---- NEON (aarch64) ----
#if defined(QUAROT__HAVE_NEON)
static void quarot__cvt_h2f_neon(const void* in, float* out, int64_t n) {
    const uint8_t* p = (const uint8_t*)in;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p + 2 * i))));
    quarot__cvt_h2f_ref(p + 2 * i, out + i, n - i);
}
static void quarot__cvt_f2h_neon(const float* in, void* out, int64_t n) {
    uint8_t* p = (uint8_t*)out;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u8(p + 2 * i, vreinterpret_u8_f16(vcvt_f16_f32(vld1q_f32(in + i))));
    quarot__cvt_f2h_ref(in + i, p + 2 * i, n - i);
}
static void quarot__cvt_b2f_neon(const void* in, float* out, int64_t n) {
    const uint8_t* p = (const uint8_t*)in;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(out + i, vreinterpretq_f32_u32(vshll_n_u16(vreinterpret_u16_u8(vld1_u8(p + 2 * i)), 16)));
    quarot__cvt_b2f_ref(p + 2 * i, out + i, n - i);
}
static void quarot__cvt_f2b_neon(const float* in, void* out, int64_t n) {
    uint8_t* p = (uint8_t*)out;
    const uint32x4_t one = vdupq_n_u32(1), bias = vdupq_n_u32(0x7fff), absm = vdupq_n_u32(0x7fffffff);
    const uint32x4_t inf = vdupq_n_u32(0x7f800000), qb = vdupq_n_u32(0x00400000);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint32x4_t x = vreinterpretq_u32_f32(vld1q_f32(in + i));
        const uint32x4_t r = vaddq_u32(vaddq_u32(x, bias), vandq_u32(vshrq_n_u32(x, 16), one));
        const uint32x4_t nan = vcgtq_u32(vandq_u32(x, absm), inf);
        vst1_u8(p + 2 * i, vreinterpret_u8_u16(vshrn_n_u32(vbslq_u32(nan, vorrq_u32(x, qb), r), 16)));
    }
    quarot__cvt_f2b_ref(in + i, p + 2 * i, n - i);
}
static void quarot__cvt_d2f_neon(const double* in, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) vst1_f32(out + i, vcvt_f32_f64(vld1q_f64(in + i)));
    quarot__cvt_d2f_ref(in + i, out + i, n - i);
}
static void quarot__cvt_f2d_neon(const float* in, double* out, int64_t n) {
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) vst1q_f64(out + i, vcvt_f64_f32(vld1_f32(in + i)));
    quarot__cvt_f2d_ref(in + i, out + i, n - i);
}
// fcvtxn rounds to odd (and |x| > FLT_MAX to FLT_MAX); NaNs get the empty payload like _ref.
static void quarot__cvt_d2o_neon(const double* in, float* out, int64_t n) {
    const uint32x2_t qnan = vdup_n_u32(0x7fc00000), sgn = vdup_n_u32(0x80000000u);
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        const float64x2_t x = vld1q_f64(in + i);
        const uint32x2_t u = vreinterpret_u32_f32(vcvtx_f32_f64(x));
        const uint32x2_t nan = vmvn_u32(vmovn_u64(vceqq_f64(x, x)));
        vst1_f32(out + i, vreinterpret_f32_u32(vbsl_u32(nan, vorr_u32(vand_u32(u, sgn), qnan), u)));
    }
    quarot__cvt_d2o_ref(in + i, out + i, n - i);
}
#endif

static quarot__cvt_fns quarot__cvt_select(quarot_isa isa) {
    quarot__cvt_fns f;
    f.h2f = quarot__cvt_h2f_ref; f.f2h = quarot__cvt_f2h_ref; f.b2f = quarot__cvt_b2f_ref; f.f2b = quarot__cvt_f2b_ref;
    f.d2o = quarot__cvt_d2o_ref; f.d2f = quarot__cvt_d2f_ref; f.f2d = quarot__cvt_f2d_ref;
    switch (isa) {
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2:
            f.h2f = quarot__cvt_h2f_sse2; f.f2h = quarot__cvt_f2h_sse2; f.b2f = quarot__cvt_b2f_sse2;
            f.f2b = quarot__cvt_f2b_sse2; f.d2f = quarot__cvt_d2f_sse2; f.f2d = quarot__cvt_f2d_sse2;
            break;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2:
            f.h2f = quarot__cvt_h2f_avx2; f.f2h = quarot__cvt_f2h_avx2; f.b2f = quarot__cvt_b2f_avx2;
            f.f2b = quarot__cvt_f2b_avx2; f.d2o = quarot__cvt_d2o_avx2; f.d2f = quarot__cvt_d2f_avx2;
            f.f2d = quarot__cvt_f2d_avx2;
            break;
#endif
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512:
            f.h2f = quarot__cvt_h2f_avx512; f.f2h = quarot__cvt_f2h_avx512; f.b2f = quarot__cvt_b2f_avx512;
            f.f2b = quarot__cvt_f2b_avx512; f.d2o = quarot__cvt_d2o_avx512; f.d2f = quarot__cvt_d2f_avx512;
            f.f2d = quarot__cvt_f2d_avx512;
            break;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON:
            f.h2f = quarot__cvt_h2f_neon; f.f2h = quarot__cvt_f2h_neon; f.b2f = quarot__cvt_b2f_neon;
            f.f2b = quarot__cvt_f2b_neon; f.d2o = quarot__cvt_d2o_neon; f.d2f = quarot__cvt_d2f_neon;
            f.f2d = quarot__cvt_f2d_neon;
            break;
#endif
        default: break;
    }
    return f;
}

// The conversion behind quarot_convert and the tensor row functions: dtypes valid (DEFAULT = F32),
// isa resolved. Pairs without a direct kernel go through f32 in chunks on the stack.
#define QUAROT__CVT_CHUNK 512
static void quarot__convert_run(void* out, quarot_dtype odt, const void* in, quarot_dtype idt, int64_t n,
                                quarot_isa isa) {
    const quarot__cvt_fns f = quarot__cvt_select(isa);
    float buf[QUAROT__CVT_CHUNK];
    int64_t i, c;
    if (odt == QUAROT_DTYPE_DEFAULT) odt = QUAROT_DTYPE_F32;
    if (idt == QUAROT_DTYPE_DEFAULT) idt = QUAROT_DTYPE_F32;
    if (n <= 0) return;
    if (odt == idt) { memcpy(out, in, (size_t)n * quarot_dtype_size(idt)); return; }
    if (odt == QUAROT_DTYPE_F32) {
        switch (idt) {
            case QUAROT_DTYPE_F16: f.h2f(in, (float*)out, n); return;
            case QUAROT_DTYPE_BF16: f.b2f(in, (float*)out, n); return;
            default: f.d2f((const double*)in, (float*)out, n); return;
        }
    }
    if (idt == QUAROT_DTYPE_F32) {
        switch (odt) {
            case QUAROT_DTYPE_F16: f.f2h((const float*)in, out, n); return;
            case QUAROT_DTYPE_BF16: f.f2b((const float*)in, out, n); return;
            default: f.f2d((const float*)in, (double*)out, n); return;
        }
    }
    // Through f32: f64 -> f16/bf16 (rounded to odd first), f16/bf16 -> f64, f16 <-> bf16.
    for (i = 0; i < n; i += c) {
        c = n - i < QUAROT__CVT_CHUNK ? n - i : QUAROT__CVT_CHUNK;
        switch (idt) {
            case QUAROT_DTYPE_F64: f.d2o((const double*)in + i, buf, c); break;
            case QUAROT_DTYPE_F16: f.h2f((const char*)in + 2 * i, buf, c); break;
            default: f.b2f((const char*)in + 2 * i, buf, c); break;
        }
        switch (odt) {
            case QUAROT_DTYPE_F64: f.f2d(buf, (double*)out + i, c); break;
            case QUAROT_DTYPE_F16: f.f2h(buf, (char*)out + 2 * i, c); break;
            default: f.f2b(buf, (char*)out + 2 * i, c); break;
        }
    }
}

QUAROT_API quarot_result quarot_convert(void* out, quarot_dtype out_dt, const void* in, quarot_dtype in_dt,
                                        int64_t n, quarot_isa isa) {
    quarot_result r;
    if (!quarot__dtype_valid(out_dt) || !quarot__dtype_valid(in_dt)) return QUAROT_ERR_UNSUPPORTED_DTYPE;
    if (n < 0 || (n > 0 && (!out || !in))) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot__isa_resolve(isa, &isa);
    if (r != QUAROT_OK) return r;
    quarot__convert_run(out, out_dt, in, in_dt, n, isa);
    return QUAROT_OK;
}

// >>generated
// Data written by programs: do not edit it here. `make regen` (tools/regen.sh) rewrites each block
// between its "begin generated by GEN" and "end generated by GEN" lines with what GEN prints, and
// `make regen-check` (a CI step) fails when that would change anything.

// begin generated by tools/gen_hadtables.py
// Hadamard matrices no construction here reaches, as 4x4 arrays of circulant / back-circulant
// blocks of size m = N/4 (Williamson and Goethals-Seidel arrays):
//     H[bi*m + r][bj*m + j] = s(bi, bj, (j - r) mod m)   block circulant,
//                             s(bi, bj, (j + r) mod m)   block back-circulant (bit 4*bi+bj of mask),
// s(bi, bj, c) = bit (4*bi + bj)*m + c of the hex string (4 bits a digit, MSB first), 1 = -1.
// tools/gen_hadtables.py checks H*H^T = N*I and that this rebuild gives the source file back.
// 22 orders, 4836 bytes of signs; quarot__hadtable_get (>>hadamard) looks them up.
typedef struct quarot__hadtable {
    int32_t n;            // order, a multiple of 4
    uint32_t back_mask;   // bit 4*bi+bj set: block (bi, bj) is back-circulant
    const char* hex;      // 16 first rows, N hex digits
} quarot__hadtable;

static const quarot__hadtable quarot__hadtables[] = {
    {92, 0x0000,
     "117e88394a71260649dd2eee35ac622fd1311688a4c0c9b67e6c774bb845fa271ad63c45a236cfcd87294e08bf44"},
    {116, 0x0000,
     "368845b04b81d217340b3a39af59cf68fc5b9b4422db8ca14c6b9a059da32fd310e6bd670da2116ded1f8b7e328531d197e9"
     "8825c0e906d108b6"},
    {156, 0x0000,
     "1afb3cdf581d9eb5e6e065d6f6ba6395f123ea7f130a50c8e35f679beb235076e0ac0cbaded74ce68a425166e57c48fa9c6b"
     "ecf37d678985286478d41db82b1cd1484a2cc3b3d6bcdc0d7d9e6fac"},
    {172, 0x0000,
     "730a26450ce40f5926bc085350bd0aca1c2d9fe6d0edf8536ca1fae6144c8a19f1e9300c9788a6a17a1594eb2bd0bd4d670b"
     "67f9b439cc28991433efc29b650fdc7a4c0325e3d657a17a9ac81eb24d78139851322867"},
    {188, 0x7bde,
     "5ede70ebc0dcec0f5dc61215b47ddcd22b7368fbbe5ba9189f8511cf6f4bdbce1d781bbb512c11074976a259ddf16c92e088"
     "cb752225769f77c5b57b79c3af0375ede71143f2292e088348adc257698883a4d090c775e06eaf6f3875e06e"},
    {236, 0x7bde,
     "042cc2e85d3b0872e9d8425d0cd087086e5d145e65efb4589ef5743342168b13ded17997bc085985d0ba7610fde99e8a8437"
     "2e97bd33d145d3b0873de468bae86684010b30babde468b410b30ba174ec21fbd33d16f791a2c974ec21517997bc10b30bae"
     "8b13de0216617484372e9821661742e9d843"},
    {260, 0x7bde,
     "0ac66ca0051cb62ffd1b4e283eb2672bfe8da7143f593395e0b92c75efac99caf05c963af829b31a805633650028e5b17fa9"
     "cc9afbd71a4e822b19b281eb8d274005c963af029b31a80ac66ca0851cb62f82b19b2801472d8bfd4e64d7c1472d8bffa369"
     "c50829b31a87539935f851cb62fc56336507d71a4e80158cd9400a396c5f"},
    {268, 0x7bde,
     "2637871a520070dcc8be009565ca4754d99d870024d38f09cddd07fdaa57291d536ba0ffb54d1adc55924c6f0e34a400e1b9"
     "b655c4a752adff05d2637871a6dff8f232989e3ff6cb1c3d8c84d51dac56a9007d1498de1c694801c3736cab894e9aa401f4"
     "445f004ab51adc55936721e3964801c37349aa3b58b2adff05d931bc38d2900386e6"},
    {292, 0x7bde,
     "48a660f1f15f811071344b6a3102b694cc11d1c1103f520e1f335db2ed2573beada53304797692b9dfa92d667dc24533078f"
     "8afc08838b106652dabee7525ba7229983c7da81fbbe3ab8fbbf02b7c78332891df335a4a82315b48b1229983c7c57e0441c"
     "58833296d408c56d22d6896d4620a92d667dc37599f0e095f8110714ef99ad257ee7525ba4914cc1e3e2bf0220e2"},
    {356, 0x7bde,
     "746502b24d6009c68f8728d814b71ce401ac9cafd674629c3e2c8dff29b657eb3a29fad238b9006b272bf59d14fd691c637f"
     "ca6c6a053173a32815926b004e347c39445cd7ea726b004e8e25afcbd1940ac935802765c1e35c758f074dc8035926a05317"
     "746502b1b29ff62e3b4a069d1940ac93580271a3e1ca22e6bf53935802738ed281bb0296e3a37fca6c6a053170b9afd4db29"
     "ff6268f8728fa328158d94ffb18e25afc8e8ca05649ac0138d1f0e51"},
    {404, 0x7bde,
     "657095203d20c37263c6468afe7382d95593b0c12ffed5bc567ea2c4c7836279f687f6ade2b2631f49aae4ec304bffb56f15"
     "9318fa4d54d89e7da00254875332b84a901e9061b931e323457cd47b56ffe9061b93aac97c63395c25480f4830dc9f0e6e5d"
     "400574ece1f2761825e025487536570952002df3c8d8aa6d0739995c25480f4830dc98f191a2be6a3dab7ff4830dc9aa9b41"
     "ce7ce705b2a8d89e7da0025487531a8f6adfc2df3c8d83c6468aff2b84a90016f9e46caac97c630cae12a407a4186e4c78c8"
     "d15f"},
    {412, 0x7bde,
     "1d9fa5aadd710f7144aa5a0646165e328526e054e652faef9f131bf24bc0353cff6c70b5d374771ddd7483fb36edcec863e5"
     "a1ef4d0e6bd6c8fd58cd6828830763b3f4b55bae21ee28954b40c8fc2d3e309b9dbb66fe0975ddc70e89a2978e48061a9fe1"
     "6d813939036d0ff2b0c024e3d28b22e21e960e7b231224c80fb45111c4767e96ab75c43dc512a968191a3e7dd7d299ca81d9"
     "28531e9a01c44516f8099224626f3834bc3c5d975a1c6dfe795807a49fb1ae0c11416b31abf136bd670b2f8ecfd2d56eb887"
     "b8a2552d0323"},
    {428, 0x7bde,
     "41611316e17cd1a8843caf8487b384336b0484562cfa225cdde5f6f090fa9e2f753a60bc4b9bbcbeb1ef3253ea1158b3e889"
     "737797d63de64a7dbdd4e982eed1910d0482c2262dc2f9a35108795f090f60b0898b7741972bbd41ad984393e9eece91e832"
     "e577a3caf8487b43dbc1587422b167d0ed1910d04fa7bb3a445f346a215f2933de3505844c5b85f346a210f2be121ec16113"
     "16ee832e577b7ca4cf78c9c219b582bdd4e982eed1910d0505844c5b85f346a2170d41ede11f4f767488be68d44241ad9843"
     "9a0b0898b70be68d4421e57c243d"},
    {452, 0x7bde,
     "4036d44e180298f0ecc524772bcadd274a3d44cdc3c65009e37524ff6a7a9dc494991e1cd7fcf1ba927fa8b62d70aeb370f1"
     "940278dd493fd45b16b85766478735fec3915b601201b6a270c014c787662923b95e55fe495d8f2014c78766ba875a368b00"
     "db5138600a63c3b36b6e2350d4561588edad9b878ca00c3915b6014036d44e1bfd670f1328af14b92e900db5138600a63c3b"
     "31491dcaf2aff24aec7900a63c3b322bc52e4bbba4e947a8a6478735fec3915b6013fc92bb1e7fd670f132524772bcae01b6"
     "a270dfeb387899ba875a3688806da89c300531e1d98a48ee5795"},
    {476, 0x7bde,
     "5a4e33022e167a234094182abccbf34f78261fa4a40b1179a22efcce36967e99eaa0c2b7e9dd0cbc5df99c6d2ac21f67816a"
     "902c45e688bbf338da55843ecf02dadfa77432ee88198e4b4b49c66045c2cf446812830557997e52d8e67ee88b3d11a04ab4"
     "0f37c21ada4e33022e167a234095e7d543340c60598557cf520588bcd0e88198e4b56938cc08bba61772fdaa5f8641ef2969"
     "38cc08b859e88d025060aaf32fca5b1ccfdd1167a23409497e1907bcba7bc130fd2adfa77432ee88198e4b496c733f747a61"
     "772fda860aaf32fced2719811774c2ee5fb5b40f37c21a2d271981170b3d11a04a0c155e65f9"},
    {508, 0x7bde,
     "68d5f663be69680e8fe96982399054e9ef2fc77aac0acba7677841277927a65bff57c64754ad2cafc64439be41bc39b6ce5f"
     "876fb953e2cabced7621af84ca008681c42a9fa9a2c4c43df6c436c2cd2d1abecc77cd2d01d1fd2d3047320a9d02990fac23"
     "75b9ea9a3e54efb70fd39b131e13ec131eece0565a56a8ece0a801002a0e6e2ad4b4d40e6ef1906f90f193eb37829ee45230"
     "ab2e0d588247816325a357d98ef9a5a03a3fa5a608e64153a6997927b92087b9b974d40d57b8fd3de26340f1208d583a6a86"
     "2513bca0f66bfb387b04fb3844c7ea696a55c4c7d5ff8b3436c236fbc23234595f9542381610b46afb31df34b40747f4b4c1"
     "1cc82a74"},
    {604, 0x7bde,
     "4cb0750bdd8505348e698ed35f5e442f51f2cc81433d5d88f9d0adca494391b0f13dc20620537c059a6735d7449562cb79d9"
     "8a1b5a6ce81ff52ce18bc3479bd5fd7e77006b7b2b077503e48bf5e61513b8317a91adb5e372787611efcefd69960ea17bb0"
     "a0a691cd31da6bebc885ea3e59893e057706a6f6b00773f5fd5ecf161e8c39a5003f464d293d73230965cab6e8a298cd32fe"
     "0920fe9966328a2edaa74d21899d792964c5f803b60fd447cac84a7fc460501509874f0b9e32d532c1d42f761414d239a63b"
     "4d7d7910bd47cb32811810ef23c36270a494ed42e7c46eaf30a045a63ce87970c854050311ff2909a9f115f836fff02e6cb5"
     "b0a3373da68d5245d759ccb3407dabf73f7886e1e4ec7adb5895e8c1dc8a867afda6583a85eec2829a4734c769afaf2217a8"
     "f966"},
    {652, 0x7bde,
     "6dc7c0996794d5a01588cee57fa54d61966fc1c491034864e1ea2d4c4e24d33157b5e00d7d9674180b8d8b0d549e20b99943"
     "de74ff4f1d64a0b1fe202925e4f8bdfc449a87bab9aad1ff2cdd6b98f64b46077e5bcd8f0ae959d8ed966754250ff94134c5"
     "f3fadb8f8132cf29ab402b119dcaff4a9ac32cdf838903169378ceb5d9a7fc5aaceaef0ac911fde8f93d235fdc0397d6ca38"
     "68068c21eb3317dc36aa7972711c9d3caad877d199af0862c02c38a6d7d38077f5be74b64398a5132c01d2a98a887a9b7701"
     "0b83616db71f02659e53568056233b95fe95358659bf07124060b9a6fac01eb7aa332c91c8cad15e1c984b022b4360e84077"
     "6caf08a8caa5c01a64528ce136973f2808ff1a0a4d71e5fe5cf785333a08f25561a3639fcfa32c829ff0a42ae669b71b9a97"
     "50f1b3da7eeb6e3e04cb3ca6ad00ac46772bfd2a6b0cb37e0e24"},
    {764, 0x7bde,
     "01a4100dd2e2a0af8358b9c99a4a18ce19576bd3458497733b93bf8c95616d4f17b700ae74b04fdb3cc2182250382a21f869"
     "30a677e158168b575619df9070b384baec59812682570a4ee50672ad90eecf785f2682f8e5f53bdf971027568c862362039b"
     "54f495874247fa8c5a7d812619ef3eed7e3eaee0348201ba5c5415f06b173933494319c32aed7a68b092ee498b5720474fde"
     "e57d38fa0b27d0f79bb84daa73053b92872df4dbf32e4516f1978fb0233ca8a974bf2bc08cd79b4f0381e5b3d66207a9fa5d"
     "2a2a79881be3d31ed144e99fb65f6bb3a546fdc58108d416382fa6c17843223d92ac67d6236bc4069040374b8a82be0d62e7"
     "2669286338655daf4d16125dc9150702910610cf36fc834b9d403b7a3cada1aa4c7f727721eb6235f31aa4de22610f41b2fa"
     "0e34158840d1dfb152e6f482c903346eba439a1c13f730d5d5a2d0350fdcca192c3f3757c7eb77cf7986481be5a315fe242e"
     "1a92f2ad9c046c4680d20806e9715057c1ac5ce4cd250c670cabb5e9a2c24bb9"},
    {876, 0x7bde,
     "05320a5850cd72857350f0b33f4cd0332f0f5315eb14cf5e5afb35e01518805e474b1c4b24986dc85d0c8a9baffc931c43e6"
     "4ed071be92d2c58e01725e8a26beca204ed3091a080d85f59beb073c655af11936de28d1f85deae577a4b071ac2f623baaff"
     "c0105d1d8e58999797eff573bfd0dc5a71da6db3c91bd179bab22801b671de0cd897c720b60a6414b0a19ae50ae6a1e1667e"
     "99a0665e1ea62bd6299ebcb5f66bc0b0b3372c723a2fbfe005511dc85e538f96d08ac5422f03a75c249cc47ad531e706becd"
     "7d0d8082c4865b90229beb228bd274038d1a5a4b4e9c7fa3685d76504d77ec4b3db97dfc9e8299053e30e6a943b9bfa7a664"
     "69c6e2e8200ffd57711bd0d6383497ba9d5ee87e2c51edb014c829614335ca15cd43c2ccfd3340ccbc3d4c57ac533d796bec"
     "d7da09c7d23660f71cdb00289abb3d17b1279b6cb71cb47617fb9d5ff9243ae5c0f442a3510b69f1ca7a13b88aa007fdf45c"
     "4e34eccd0d02cee14ab3863e504ca0bc9fdf4ede691bf75905375d0b62ff1cb96952fb1c16e4cf8471927febb2a26174276c"
     "3249a471a5c4f402315000299052c2866b942b9a878599fa668199787a98af58a67af2d7d9af"},
    {956, 0x7bde,
     "93d2304a7444034e1e909c7854bb7b3d9daa8034059669c6e23cd8c2d029e09aa2291f6e0455036c1e4ba152e01efcf52767"
     "6c63a305e7390454947b654654edb767f314c826ee65f56ad4c4bab2038793bc2185f7c0a947241375e1e621112e17c86c90"
     "8eb42f3a7b468a8a9263d8471ff0c97eadf986c0fb2aeeb7048fdd57e49f0da2f568ff081856c4c49ce2e7d0c637dd5b5c32"
     "7a46094e888069c3d2138f0a976f67b3b5500680b2cd38dc479b185a0524f302540b678038ef21cdb57574e90d185e9477b6"
     "4f60bc5bbbdcc3c289c12714a81f7d0c21ee4f0e026ae9195ab57d33bb2099467f376db953153626ae6ac49226033acdf644"
     "6682a54aced1537f1e1b10f79e820fd5ae36fad867ed5fa4c3fe3886f192545458b7973d0b5c424d84fa1d222119e1ebb24f"
     "48c129d1100d387a4271e152edecf676aa00d01659a71b88f3630b40a075b577d8c617ce8e724646d43021fe2d5e8b61f24f"
     "d577e241daeea9be19143c33bddda3d06f26dee297a18b0972eaeadb384f71c01e6d02a40cf26fb63ad5f820bcf7846c3c7f"
     "6545b9a952a0b31137d9ae60322491ab3ab27c52544139cf418b8c6dcdc95e7ef00e950ba4f06d815440edf1288ab20f49e9"
     "18253a2201a70f484e3c2a5dbd9eced5401a02cb34e3711e6c616814"},
    {1004, 0x7bde,
     "2f7f12954791c6d70beb9a3a0cd10a9a6c9e4a6206078af405e72fcef45fb8048ad4d1cc1ab1b7269fcf720918a6fad4f5b0"
     "1c1ac8a9a1aea77c3116bc21105274063e21e190976fddd953369014add331c1392594cb040bf09a027b572b64a238ec30c7"
     "8363f28e2410c8add02a43d075c993a877fb32ab3c14a6981acdba959719f2a7246cb01846fb73ac82958527f1f29bab2f28"
     "ac41e774a1ef765efe252a8f238dae17d7347419a21534d93c94c40c0f15e80bce5f9de8bf70253f34d6be195599008f51b3"
     "628fa1ed5fa25767bedc7581c9f0e79e471dd6cea756f202c87e8106994d24e41c665da9404b6654dddfb7484c3c23e30172"
     "50eb62fe7077879bda240889ab325bfad48b338fb1b69acd3efd03d97f612a352d606594a0f355337fb857264eb82f09502e"
     "d44c2091c53f1b078c30dc711498bdfc4a551e471b5c2fae68e833442a69b2792988181e2bd0179cbf3bd17ee05def0a5dcf"
     "046a29e9abb29f1fc94352826b9dbec4301a6c49ca9f31d352bb736bb8e279e70f9381ae3b7de6ea45fab785f146cd8af100"
     "99aa987d6b2cfca6562a437f4de05fbe59acb6c6f8e66895afed266ac888122decf0f7073fa36bd1087ad1187dcaeb0b2a26"
     "b0701b5e56beca31209de7f2c9db1ab0671656a2417bf894aa3c8e36b85f5cd1d0668854d364f25310303c57a02f397e77a2"
     "fdc0"},
};
// end generated by tools/gen_hadtables.py

// The term lists of the fixed register mixing (quarot__mixr_match in >>transform, the kernels in the
// section >>transform_isa): per kernel (28F, 28T: the core 28 forward and transposed; 38, 74: the
// split Paley II cores 76 and 148) and block g, QUAROT__MIXR<kernel>_B<g>(X) lists X(i, S, p) for every
// output i (S = P or M the sign of the block's first coefficient, p the entry of its table), and
// QUAROT__MIXR<kernel>(B) the blocks B(kernel, g, L rows, F first / A / Z last).
// begin generated by tools/gen_mixr.c
#define QUAROT__MIXR28F_B0(X) X(0,P,7) X(1,P,4) X(2,P,1) X(3,P,2) X(4,P,0) X(5,P,0) X(6,P,0) X(7,P,7) X(8,P,7) \
    X(9,P,7) X(10,P,3) X(11,P,6) X(12,P,5) X(13,P,5) X(14,P,3) X(15,P,6) X(16,P,5) X(17,P,3) X(18,P,6) \
    X(19,P,2) X(20,P,4) X(21,P,1) X(22,P,4) X(23,P,1) X(24,P,2) X(25,P,4) X(26,P,1) X(27,P,2)
#define QUAROT__MIXR28F_B1(X) X(0,M,0) X(1,M,4) X(2,M,4) X(3,M,4) X(4,P,6) X(5,M,3) X(6,P,5) X(7,P,0) X(8,P,4) \
    X(9,P,0) X(10,M,1) X(11,M,2) X(12,P,3) X(13,M,2) X(14,P,7) X(15,M,5) X(16,M,1) X(17,M,6) X(18,P,7) \
    X(19,P,2) X(20,M,3) X(21,P,1) X(22,P,1) X(23,P,6) X(24,M,7) X(25,P,2) X(26,M,7) X(27,P,5)
#define QUAROT__MIXR28F_B2(X) X(0,M,0) X(1,P,4) X(2,P,0) X(3,P,2) X(4,M,6) X(5,M,4) X(6,M,2) X(7,P,1) X(8,P,2) \
    X(9,M,3) X(10,P,1) X(11,M,5) X(12,M,2) X(13,P,1) X(14,M,7) X(15,M,6) X(16,M,1) X(17,M,0) X(18,P,7) \
    X(19,P,7) X(20,P,4) X(21,M,5) X(22,P,3) X(23,P,6) X(24,M,3) X(25,M,5) X(26,P,7) X(27,P,4)
#define QUAROT__MIXR28F_B3(X) X(0,M,0) X(1,P,4) X(2,M,6) X(3,P,2) X(4,M,5) X(5,P,4) X(6,P,1) X(7,M,3) X(8,P,1) \
    X(9,P,2) X(10,M,0) X(11,P,7) X(12,P,7) X(13,P,4) X(14,P,1) X(15,P,2) X(16,M,7) X(17,M,7) X(18,M,7) \
    X(19,P,5) X(20,M,4) X(21,M,1) X(22,M,4) X(23,P,6) X(24,M,2) X(25,M,2) X(26,P,3) X(27,M,1)
#define QUAROT__MIXR28F_B4(X) X(0,M,0) X(1,P,6) X(2,M,7) X(3,P,5) X(4,P,6) X(5,M,3) X(6,P,1) X(7,P,5) X(8,P,6) \
    X(9,M,7) X(10,P,0) X(11,P,0) X(12,P,4) X(13,M,4) X(14,M,0) X(15,M,4) X(16,P,2) X(17,M,3) X(18,P,1) \
    X(19,M,5) X(20,M,2) X(21,P,3) X(22,M,5) X(23,M,6) X(24,P,3) X(25,M,2) X(26,P,7) X(27,M,1)
#define QUAROT__MIXR28F_B5(X) X(0,M,0) X(1,M,5) X(2,M,0) X(3,P,5) X(4,P,7) X(5,M,3) X(6,M,4) X(7,P,3) X(8,M,1) \
    X(9,M,2) X(10,M,7) X(11,P,3) X(12,P,4) X(13,P,5) X(14,P,0) X(15,M,5) X(16,P,1) X(17,P,2) X(18,M,3) \
    X(19,P,7) X(20,P,6) X(21,M,1) X(22,P,0) X(23,P,2) X(24,P,4) X(25,M,6) X(26,M,6) X(27,M,6)
#define QUAROT__MIXR28F_B6(X) X(0,M,0) X(1,M,2) X(2,P,3) X(3,M,1) X(4,P,5) X(5,M,4) X(6,M,1) X(7,M,4) X(8,P,6) \
    X(9,M,2) X(10,M,3) X(11,P,1) X(12,P,2) X(13,P,4) X(14,M,6) X(15,P,2) X(16,M,5) X(17,P,4) X(18,P,1) \
    X(19,M,7) X(20,M,7) X(21,M,7) X(22,M,0) X(23,P,7) X(24,P,7) X(25,P,4) X(26,P,1) X(27,P,2)
#define QUAROT__MIXR28F(B) B(28F,0,4,F) B(28F,1,4,A) B(28F,2,4,A) B(28F,3,4,A) B(28F,4,4,A) B(28F,5,4,A) B(28F,6,4,Z)
#define QUAROT__MIXR28T_B0(X) X(0,P,0) X(1,M,5) X(2,M,3) X(3,M,6) X(4,M,0) X(5,M,0) X(6,M,0) X(7,M,7) X(8,M,7) \
    X(9,M,7) X(10,M,3) X(11,M,6) X(12,M,5) X(13,M,5) X(14,M,3) X(15,M,6) X(16,M,5) X(17,M,3) X(18,M,6) \
    X(19,M,2) X(20,M,4) X(21,M,1) X(22,M,4) X(23,M,1) X(24,M,2) X(25,M,4) X(26,M,1) X(27,M,2)
#define QUAROT__MIXR28T_B1(X) X(0,P,0) X(1,P,4) X(2,P,4) X(3,P,4) X(4,P,1) X(5,P,2) X(6,M,7) X(7,M,4) X(8,M,4) \
    X(9,M,0) X(10,P,1) X(11,P,2) X(12,M,3) X(13,P,2) X(14,M,7) X(15,P,5) X(16,P,1) X(17,P,6) X(18,M,7) \
    X(19,M,2) X(20,P,3) X(21,M,1) X(22,M,1) X(23,M,6) X(24,P,7) X(25,M,2) X(26,P,7) X(27,M,5)
#define QUAROT__MIXR28T_B2(X) X(0,P,0) X(1,M,4) X(2,M,0) X(3,M,2) X(4,P,6) X(5,P,4) X(6,P,2) X(7,M,1) X(8,P,5) \
    X(9,P,2) X(10,M,3) X(11,P,1) X(12,P,2) X(13,M,1) X(14,P,7) X(15,P,6) X(16,P,1) X(17,P,0) X(18,M,7) \
    X(19,M,7) X(20,M,4) X(21,P,5) X(22,M,3) X(23,M,6) X(24,P,3) X(25,P,5) X(26,M,7) X(27,M,4)
#define QUAROT__MIXR28T_B3(X) X(0,P,0) X(1,M,4) X(2,P,6) X(3,M,2) X(4,P,5) X(5,M,4) X(6,M,1) X(7,P,3) X(8,M,1) \
    X(9,M,2) X(10,P,0) X(11,M,7) X(12,P,0) X(13,M,5) X(14,M,3) X(15,M,6) X(16,P,7) X(17,P,7) X(18,P,7) \
    X(19,M,5) X(20,P,4) X(21,P,1) X(22,P,4) X(23,M,6) X(24,P,2) X(25,P,2) X(26,M,3) X(27,P,1)
#define QUAROT__MIXR28T_B4(X) X(0,P,0) X(1,M,6) X(2,P,7) X(3,M,5) X(4,M,6) X(5,P,3) X(6,M,1) X(7,M,5) X(8,M,6) \
    X(9,P,7) X(10,M,0) X(11,M,0) X(12,M,4) X(13,P,4) X(14,P,0) X(15,P,4) X(16,P,5) X(17,P,2) X(18,M,3) \
    X(19,P,1) X(20,P,2) X(21,M,3) X(22,P,5) X(23,P,6) X(24,M,3) X(25,P,2) X(26,M,7) X(27,P,1)
#define QUAROT__MIXR28T_B5(X) X(0,P,0) X(1,P,5) X(2,P,0) X(3,M,5) X(4,M,7) X(5,P,3) X(6,P,4) X(7,M,3) X(8,P,1) \
    X(9,P,2) X(10,P,7) X(11,M,3) X(12,M,4) X(13,M,5) X(14,M,0) X(15,P,5) X(16,M,1) X(17,M,2) X(18,P,3) \
    X(19,M,7) X(20,P,1) X(21,P,0) X(22,M,2) X(23,M,6) X(24,M,4) X(25,P,6) X(26,P,6) X(27,P,6)
#define QUAROT__MIXR28T_B6(X) X(0,P,0) X(1,P,2) X(2,M,3) X(3,P,1) X(4,M,5) X(5,P,4) X(6,P,1) X(7,P,4) X(8,M,6) \
    X(9,P,2) X(10,P,3) X(11,M,1) X(12,M,2) X(13,M,4) X(14,P,6) X(15,M,2) X(16,P,5) X(17,M,4) X(18,M,1) \
    X(19,P,7) X(20,P,7) X(21,P,7) X(22,P,0) X(23,M,7) X(24,P,0) X(25,M,5) X(26,M,3) X(27,M,6)
#define QUAROT__MIXR28T(B) B(28T,0,4,F) B(28T,1,4,A) B(28T,2,4,A) B(28T,3,4,A) B(28T,4,4,A) B(28T,5,4,A) B(28T,6,4,Z)
#define QUAROT__MIXR38_B0(X) X(0,P,0) X(1,P,4) X(2,P,0) X(3,P,1) X(4,P,2) X(5,P,4) X(6,P,1) X(7,P,3) X(8,P,6) \
    X(9,P,5) X(10,P,2) X(11,P,4) X(12,P,0) X(13,P,0) X(14,P,1) X(15,P,3) X(16,P,7) X(17,P,6) X(18,P,5) \
    X(19,P,3) X(20,P,7) X(21,P,7) X(22,P,6) X(23,P,5) X(24,P,3) X(25,P,7) X(26,P,6) X(27,P,4) X(28,P,0) \
    X(29,P,0) X(30,P,1) X(31,P,2) X(32,P,5) X(33,P,3) X(34,P,6) X(35,P,4) X(36,P,1) X(37,P,2)
#define QUAROT__MIXR38_B1(X) X(0,P,0) X(1,P,6) X(2,M,3) X(3,P,1) X(4,P,2) X(5,P,4) X(6,M,7) X(7,P,1) X(8,P,2) \
    X(9,M,3) X(10,M,6) X(11,P,3) X(12,M,1) X(13,P,5) X(14,P,2) X(15,P,4) X(16,P,0) X(17,M,7) X(18,M,6) \
    X(19,M,4) X(20,P,7) X(21,M,1) X(22,M,2) X(23,M,4) X(24,M,0) X(25,P,7) X(26,M,1) X(27,M,2) X(28,M,4) \
    X(29,P,7) X(30,P,6) X(31,P,4) X(32,P,0) X(33,M,7) X(34,P,1) X(35,M,5) X(36,M,2) X(37,P,3)
#define QUAROT__MIXR38_B2(X) X(0,P,0) X(1,P,1) X(2,M,5) X(3,M,2) X(4,P,3) X(5,P,6) X(6,M,3) X(7,P,1) X(8,P,2) \
    X(9,P,4) X(10,M,7) X(11,P,1) X(12,P,2) X(13,M,3) X(14,M,6) X(15,P,3) X(16,M,1) X(17,P,5) X(18,P,2) \
    X(19,P,4) X(20,P,0) X(21,M,7) X(22,M,6) X(23,M,4) X(24,P,7) X(25,M,1) X(26,M,2) X(27,M,4) X(28,M,0) \
    X(29,P,7) X(30,M,1) X(31,M,2) X(32,M,4) X(33,P,7) X(34,P,6) X(35,P,4) X(36,P,0) X(37,M,7)
#define QUAROT__MIXR38_B3(X) X(0,P,0) X(1,P,6) X(2,P,4) X(3,P,0) X(4,M,7) X(5,P,1) X(6,M,5) X(7,M,2) X(8,P,3) \
    X(9,P,6) X(10,M,3) X(11,P,1) X(12,P,2) X(13,P,4) X(14,M,7) X(15,P,1) X(16,P,2) X(17,M,3) X(18,M,6) \
    X(19,P,3) X(20,M,1) X(21,P,5) X(22,P,2) X(23,P,4) X(24,P,0) X(25,M,7) X(26,M,6) X(27,M,4) X(28,P,7) \
    X(29,M,1) X(30,M,2) X(31,M,4) X(32,M,0) X(33,P,7) X(34,M,1) X(35,M,2) X(36,M,4) X(37,P,7)
#define QUAROT__MIXR38_B4(X) X(0,P,0) X(1,M,1) X(2,M,2) X(3,M,4) X(4,P,7) X(5,P,6) X(6,P,4) X(7,P,0) X(8,M,7) \
    X(9,P,1) X(10,M,5) X(11,M,2) X(12,P,3) X(13,P,6) X(14,M,3) X(15,P,1) X(16,P,2) X(17,P,4) X(18,M,7) \
    X(19,P,1) X(20,P,2) X(21,M,3) X(22,M,6) X(23,P,3) X(24,M,1) X(25,P,5) X(26,P,2) X(27,P,4) X(28,P,0) \
    X(29,M,7) X(30,M,6) X(31,M,4) X(32,P,7) X(33,M,1) X(34,M,2) X(35,M,4) X(36,M,0) X(37,P,7)
#define QUAROT__MIXR38_B5(X) X(0,P,0) X(1,M,2) X(2,M,4) X(3,M,0) X(4,P,7) X(5,M,1) X(6,M,2) X(7,M,4) X(8,P,7) \
    X(9,P,6) X(10,P,4) X(11,P,0) X(12,M,7) X(13,P,1) X(14,M,5) X(15,M,2) X(16,P,3) X(17,P,6) X(18,M,3) \
    X(19,P,1) X(20,P,2) X(21,P,4) X(22,M,7) X(23,P,1) X(24,P,2) X(25,M,3) X(26,M,6) X(27,P,3) X(28,M,1) \
    X(29,P,5) X(30,P,2) X(31,P,4) X(32,P,0) X(33,M,7) X(34,M,6) X(35,M,4) X(36,P,7) X(37,M,1)
#define QUAROT__MIXR38_B6(X) X(0,P,0) X(1,M,6) X(2,M,4) X(3,P,7) X(4,M,1) X(5,M,2) X(6,M,4) X(7,M,0) X(8,P,7) \
    X(9,M,1) X(10,M,2) X(11,M,4) X(12,P,7) X(13,P,6) X(14,P,4) X(15,P,0) X(16,M,7) X(17,P,1) X(18,M,5) \
    X(19,M,2) X(20,P,3) X(21,P,6) X(22,M,3) X(23,P,1) X(24,P,2) X(25,P,4) X(26,M,7) X(27,P,1) X(28,P,2) \
    X(29,M,3) X(30,M,6) X(31,P,3) X(32,M,1) X(33,P,5) X(34,P,2) X(35,P,4) X(36,P,0) X(37,M,7)
#define QUAROT__MIXR38_B7(X) X(0,P,0) X(1,P,2) X(2,P,4) X(3,P,0) X(4,M,7) X(5,M,6) X(6,M,4) X(7,P,7) X(8,M,1) \
    X(9,M,2) X(10,M,4) X(11,M,0) X(12,P,7) X(13,M,1) X(14,M,2) X(15,M,4) X(16,P,7) X(17,P,6) X(18,P,4) \
    X(19,P,0) X(20,M,7) X(21,P,1) X(22,M,5) X(23,M,2) X(24,P,3) X(25,P,6) X(26,M,3) X(27,P,1) X(28,P,2) \
    X(29,P,4) X(30,M,7) X(31,P,1) X(32,P,2) X(33,M,3) X(34,M,6) X(35,P,3) X(36,M,1) X(37,P,5)
#define QUAROT__MIXR38_B8(X) X(0,P,0) X(1,M,6) X(2,P,3) X(3,M,1) X(4,P,5) X(5,P,2) X(6,P,4) X(7,P,0) X(8,M,7) \
    X(9,M,6) X(10,M,4) X(11,P,7) X(12,M,1) X(13,M,2) X(14,M,4) X(15,M,0) X(16,P,7) X(17,M,1) X(18,M,2) \
    X(19,M,4) X(20,P,7) X(21,P,6) X(22,P,4) X(23,P,0) X(24,M,7) X(25,P,1) X(26,M,5) X(27,M,2) X(28,P,3) \
    X(29,P,6) X(30,M,3) X(31,P,1) X(32,P,2) X(33,P,4) X(34,M,7) X(35,P,1) X(36,P,2) X(37,M,3)
#define QUAROT__MIXR38_B9(X) X(0,P,0) X(1,M,1) X(2,P,1) X(3,P,0) X(4,M,1) X(5,M,0) X(6,P,1) X(7,M,1) X(8,P,1) \
    X(9,P,0) X(10,P,0) X(11,P,0) X(12,M,1) X(13,M,0) X(14,M,0) X(15,P,1) X(16,M,1) X(17,M,0) X(18,M,0) \
    X(19,M,0) X(20,P,1) X(21,M,1) X(22,M,0) X(23,M,0) X(24,P,1) X(25,P,0) X(26,P,0) X(27,P,0) X(28,M,1) \
    X(29,P,1) X(30,M,1) X(31,M,0) X(32,P,1) X(33,P,0) X(34,M,1) X(35,P,1) X(36,P,0) X(37,P,0)
#define QUAROT__MIXR38(B) B(38,0,4,F) B(38,1,4,A) B(38,2,4,A) B(38,3,4,A) B(38,4,4,A) B(38,5,4,A) B(38,6,4,A) \
    B(38,7,4,A) B(38,8,4,A) B(38,9,2,Z)
#define QUAROT__MIXR74_B0(X) X(0,P,0) X(1,P,0) X(2,P,0) X(3,P,0) X(4,P,0) X(5,P,0) X(6,P,1) X(7,P,2) X(8,P,5) \
    X(9,P,2) X(10,P,4) X(11,P,1) X(12,P,3) X(13,P,6) X(14,P,5) X(15,P,3) X(16,P,7) X(17,P,6) X(18,P,5) \
    X(19,P,2) X(20,P,4) X(21,P,1) X(22,P,3) X(23,P,7) X(24,P,6) X(25,P,4) X(26,P,0) X(27,P,1) X(28,P,2) \
    X(29,P,5) X(30,P,3) X(31,P,7) X(32,P,7) X(33,P,6) X(34,P,5) X(35,P,3) X(36,P,6) X(37,P,4) X(38,P,0) \
    X(39,P,0) X(40,P,1) X(41,P,3) X(42,P,6) X(43,P,5) X(44,P,3) X(45,P,7) X(46,P,7) X(47,P,6) X(48,P,5) \
    X(49,P,2) X(50,P,4) X(51,P,0) X(52,P,1) X(53,P,3) X(54,P,7) X(55,P,6) X(56,P,4) X(57,P,1) X(58,P,2) \
    X(59,P,5) X(60,P,3) X(61,P,7) X(62,P,6) X(63,P,5) X(64,P,3) X(65,P,6) X(66,P,4) X(67,P,1) X(68,P,2) \
    X(69,P,5) X(70,P,2) X(71,P,4) X(72,P,0) X(73,P,0)
#define QUAROT__MIXR74_B1(X) X(0,P,0) X(1,P,2) X(2,P,4) X(3,P,0) X(4,P,0) X(5,P,0) X(6,P,0) X(7,P,0) X(8,P,0) \
    X(9,M,7) X(10,P,1) X(11,M,5) X(12,P,5) X(13,P,2) X(14,M,3) X(15,M,6) X(16,P,3) X(17,M,1) X(18,M,2) \
    X(19,M,4) X(20,P,7) X(21,M,1) X(22,P,5) X(23,P,2) X(24,M,3) X(25,M,6) X(26,M,4) X(27,P,7) X(28,P,6) \
    X(29,P,4) X(30,M,7) X(31,P,1) X(32,M,5) X(33,M,2) X(34,M,4) X(35,M,0) X(36,P,7) X(37,M,1) X(38,M,2) \
    X(39,P,3) X(40,P,6) X(41,P,4) X(42,P,0) X(43,M,7) X(44,M,6) X(45,P,3) X(46,M,1) X(47,M,2) X(48,M,4) \
    X(49,M,0) X(50,P,7) X(51,M,1) X(52,P,5) X(53,P,2) X(54,P,4) X(55,M,7) X(56,M,6) X(57,M,4) X(58,P,7) \
    X(59,P,6) X(60,M,3) X(61,P,1) X(62,M,5) X(63,M,2) X(64,M,4) X(65,P,7) X(66,M,1) X(67,M,2) X(68,P,3) \
    X(69,P,6) X(70,M,3) X(71,P,1) X(72,M,5) X(73,P,5)
#define QUAROT__MIXR74_B2(X) X(0,P,0) X(1,M,3) X(2,P,1) X(3,M,5) X(4,P,5) X(5,P,2) X(6,P,4) X(7,P,0) X(8,P,0) \
    X(9,P,0) X(10,P,0) X(11,P,0) X(12,P,0) X(13,M,7) X(14,P,1) X(15,M,5) X(16,P,5) X(17,P,2) X(18,M,3) \
    X(19,M,6) X(20,P,3) X(21,M,1) X(22,M,2) X(23,M,4) X(24,P,7) X(25,M,1) X(26,P,5) X(27,P,2) X(28,M,3) \
    X(29,M,6) X(30,M,4) X(31,P,7) X(32,P,6) X(33,P,4) X(34,M,7) X(35,P,1) X(36,M,5) X(37,M,2) X(38,M,4) \
    X(39,M,0) X(40,P,7) X(41,M,1) X(42,M,2) X(43,P,3) X(44,P,6) X(45,P,4) X(46,P,0) X(47,M,7) X(48,M,6) \
    X(49,P,3) X(50,M,1) X(51,M,2) X(52,M,4) X(53,M,0) X(54,P,7) X(55,M,1) X(56,P,5) X(57,P,2) X(58,P,4) \
    X(59,M,7) X(60,M,6) X(61,M,4) X(62,P,7) X(63,P,6) X(64,M,3) X(65,P,1) X(66,M,5) X(67,M,2) X(68,M,4) \
    X(69,P,7) X(70,M,1) X(71,M,2) X(72,P,3) X(73,P,6)
#define QUAROT__MIXR74_B3(X) X(0,P,0) X(1,M,1) X(2,M,2) X(3,P,3) X(4,P,6) X(5,M,3) X(6,P,1) X(7,M,5) X(8,P,5) \
    X(9,P,2) X(10,P,4) X(11,P,0) X(12,P,0) X(13,P,0) X(14,P,0) X(15,P,0) X(16,P,0) X(17,M,7) X(18,P,1) \
    X(19,M,5) X(20,P,5) X(21,P,2) X(22,M,3) X(23,M,6) X(24,P,3) X(25,M,1) X(26,M,2) X(27,M,4) X(28,P,7) \
    X(29,M,1) X(30,P,5) X(31,P,2) X(32,M,3) X(33,M,6) X(34,M,4) X(35,P,7) X(36,P,6) X(37,P,4) X(38,M,7) \
    X(39,P,1) X(40,M,5) X(41,M,2) X(42,M,4) X(43,M,0) X(44,P,7) X(45,M,1) X(46,M,2) X(47,P,3) X(48,P,6) \
    X(49,P,4) X(50,P,0) X(51,M,7) X(52,M,6) X(53,P,3) X(54,M,1) X(55,M,2) X(56,M,4) X(57,M,0) X(58,P,7) \
    X(59,M,1) X(60,P,5) X(61,P,2) X(62,P,4) X(63,M,7) X(64,M,6) X(65,M,4) X(66,P,7) X(67,P,6) X(68,M,3) \
    X(69,P,1) X(70,M,5) X(71,M,2) X(72,M,4) X(73,P,7)
#define QUAROT__MIXR74_B4(X) X(0,P,0) X(1,M,5) X(2,M,2) X(3,M,4) X(4,P,7) X(5,M,1) X(6,M,2) X(7,P,3) X(8,P,6) \
    X(9,M,3) X(10,P,1) X(11,M,5) X(12,P,5) X(13,P,2) X(14,P,4) X(15,P,0) X(16,P,0) X(17,P,0) X(18,P,0) \
    X(19,P,0) X(20,P,0) X(21,M,7) X(22,P,1) X(23,M,5) X(24,P,5) X(25,P,2) X(26,M,3) X(27,M,6) X(28,P,3) \
    X(29,M,1) X(30,M,2) X(31,M,4) X(32,P,7) X(33,M,1) X(34,P,5) X(35,P,2) X(36,M,3) X(37,M,6) X(38,M,4) \
    X(39,P,7) X(40,P,6) X(41,P,4) X(42,M,7) X(43,P,1) X(44,M,5) X(45,M,2) X(46,M,4) X(47,M,0) X(48,P,7) \
    X(49,M,1) X(50,M,2) X(51,P,3) X(52,P,6) X(53,P,4) X(54,P,0) X(55,M,7) X(56,M,6) X(57,P,3) X(58,M,1) \
    X(59,M,2) X(60,M,4) X(61,M,0) X(62,P,7) X(63,M,1) X(64,P,5) X(65,P,2) X(66,P,4) X(67,M,7) X(68,M,6) \
    X(69,M,4) X(70,P,7) X(71,P,6) X(72,M,3) X(73,P,1)
#define QUAROT__MIXR74_B5(X) X(0,P,0) X(1,P,7) X(2,P,6) X(3,M,3) X(4,P,1) X(5,M,5) X(6,M,2) X(7,M,4) X(8,P,7) \
    X(9,M,1) X(10,M,2) X(11,P,3) X(12,P,6) X(13,M,3) X(14,P,1) X(15,M,5) X(16,P,5) X(17,P,2) X(18,P,4) \
    X(19,P,0) X(20,P,0) X(21,P,0) X(22,P,0) X(23,P,0) X(24,P,0) X(25,M,7) X(26,P,1) X(27,M,5) X(28,P,5) \
    X(29,P,2) X(30,M,3) X(31,M,6) X(32,P,3) X(33,M,1) X(34,M,2) X(35,M,4) X(36,P,7) X(37,M,1) X(38,P,5) \
    X(39,P,2) X(40,M,3) X(41,M,6) X(42,M,4) X(43,P,7) X(44,P,6) X(45,P,4) X(46,M,7) X(47,P,1) X(48,M,5) \
    X(49,M,2) X(50,M,4) X(51,M,0) X(52,P,7) X(53,M,1) X(54,M,2) X(55,P,3) X(56,P,6) X(57,P,4) X(58,P,0) \
    X(59,M,7) X(60,M,6) X(61,P,3) X(62,M,1) X(63,M,2) X(64,M,4) X(65,M,0) X(66,P,7) X(67,M,1) X(68,P,5) \
    X(69,P,2) X(70,P,4) X(71,M,7) X(72,M,6) X(73,M,4)
#define QUAROT__MIXR74_B6(X) X(0,P,0) X(1,P,4) X(2,M,7) X(3,M,6) X(4,M,4) X(5,P,7) X(6,P,6) X(7,M,3) X(8,P,1) \
    X(9,M,5) X(10,M,2) X(11,M,4) X(12,P,7) X(13,M,1) X(14,M,2) X(15,P,3) X(16,P,6) X(17,M,3) X(18,P,1) \
    X(19,M,5) X(20,P,5) X(21,P,2) X(22,P,4) X(23,P,0) X(24,P,0) X(25,P,0) X(26,P,0) X(27,P,0) X(28,P,0) \
    X(29,M,7) X(30,P,1) X(31,M,5) X(32,P,5) X(33,P,2) X(34,M,3) X(35,M,6) X(36,P,3) X(37,M,1) X(38,M,2) \
    X(39,M,4) X(40,P,7) X(41,M,1) X(42,P,5) X(43,P,2) X(44,M,3) X(45,M,6) X(46,M,4) X(47,P,7) X(48,P,6) \
    X(49,P,4) X(50,M,7) X(51,P,1) X(52,M,5) X(53,M,2) X(54,M,4) X(55,M,0) X(56,P,7) X(57,M,1) X(58,M,2) \
    X(59,P,3) X(60,P,6) X(61,P,4) X(62,P,0) X(63,M,7) X(64,M,6) X(65,P,3) X(66,M,1) X(67,M,2) X(68,M,4) \
    X(69,M,0) X(70,P,7) X(71,M,1) X(72,P,5) X(73,P,2)
#define QUAROT__MIXR74_B7(X) X(0,P,0) X(1,P,7) X(2,M,1) X(3,P,5) X(4,P,2) X(5,P,4) X(6,M,7) X(7,M,6) X(8,M,4) \
    X(9,P,7) X(10,P,6) X(11,M,3) X(12,P,1) X(13,M,5) X(14,M,2) X(15,M,4) X(16,P,7) X(17,M,1) X(18,M,2) \
    X(19,P,3) X(20,P,6) X(21,M,3) X(22,P,1) X(23,M,5) X(24,P,5) X(25,P,2) X(26,P,4) X(27,P,0) X(28,P,0) \
    X(29,P,0) X(30,P,0) X(31,P,0) X(32,P,0) X(33,M,7) X(34,P,1) X(35,M,5) X(36,P,5) X(37,P,2) X(38,M,3) \
    X(39,M,6) X(40,P,3) X(41,M,1) X(42,M,2) X(43,M,4) X(44,P,7) X(45,M,1) X(46,P,5) X(47,P,2) X(48,M,3) \
    X(49,M,6) X(50,M,4) X(51,P,7) X(52,P,6) X(53,P,4) X(54,M,7) X(55,P,1) X(56,M,5) X(57,M,2) X(58,M,4) \
    X(59,M,0) X(60,P,7) X(61,M,1) X(62,M,2) X(63,P,3) X(64,P,6) X(65,P,4) X(66,P,0) X(67,M,7) X(68,M,6) \
    X(69,P,3) X(70,M,1) X(71,M,2) X(72,M,4) X(73,M,0)
#define QUAROT__MIXR74_B8(X) X(0,P,0) X(1,M,1) X(2,M,2) X(3,M,4) X(4,M,0) X(5,P,7) X(6,M,1) X(7,P,5) X(8,P,2) \
    X(9,P,4) X(10,M,7) X(11,M,6) X(12,M,4) X(13,P,7) X(14,P,6) X(15,M,3) X(16,P,1) X(17,M,5) X(18,M,2) \
    X(19,M,4) X(20,P,7) X(21,M,1) X(22,M,2) X(23,P,3) X(24,P,6) X(25,M,3) X(26,P,1) X(27,M,5) X(28,P,5) \
    X(29,P,2) X(30,P,4) X(31,P,0) X(32,P,0) X(33,P,0) X(34,P,0) X(35,P,0) X(36,P,0) X(37,M,7) X(38,P,1) \
    X(39,M,5) X(40,P,5) X(41,P,2) X(42,M,3) X(43,M,6) X(44,P,3) X(45,M,1) X(46,M,2) X(47,M,4) X(48,P,7) \
    X(49,M,1) X(50,P,5) X(51,P,2) X(52,M,3) X(53,M,6) X(54,M,4) X(55,P,7) X(56,P,6) X(57,P,4) X(58,M,7) \
    X(59,P,1) X(60,M,5) X(61,M,2) X(62,M,4) X(63,M,0) X(64,P,7) X(65,M,1) X(66,M,2) X(67,P,3) X(68,P,6) \
    X(69,P,4) X(70,P,0) X(71,M,7) X(72,M,6) X(73,P,3)
#define QUAROT__MIXR74_B9(X) X(0,P,0) X(1,P,0) X(2,M,7) X(3,M,6) X(4,P,3) X(5,M,1) X(6,M,2) X(7,M,4) X(8,M,0) \
    X(9,P,7) X(10,M,1) X(11,P,5) X(12,P,2) X(13,P,4) X(14,M,7) X(15,M,6) X(16,M,4) X(17,P,7) X(18,P,6) \
    X(19,M,3) X(20,P,1) X(21,M,5) X(22,M,2) X(23,M,4) X(24,P,7) X(25,M,1) X(26,M,2) X(27,P,3) X(28,P,6) \
    X(29,M,3) X(30,P,1) X(31,M,5) X(32,P,5) X(33,P,2) X(34,P,4) X(35,P,0) X(36,P,0) X(37,P,0) X(38,P,0) \
    X(39,P,0) X(40,P,0) X(41,M,7) X(42,P,1) X(43,M,5) X(44,P,5) X(45,P,2) X(46,M,3) X(47,M,6) X(48,P,3) \
    X(49,M,1) X(50,M,2) X(51,M,4) X(52,P,7) X(53,M,1) X(54,P,5) X(55,P,2) X(56,M,3) X(57,M,6) X(58,M,4) \
    X(59,P,7) X(60,P,6) X(61,P,4) X(62,M,7) X(63,P,1) X(64,M,5) X(65,M,2) X(66,M,4) X(67,M,0) X(68,P,7) \
    X(69,M,1) X(70,M,2) X(71,P,3) X(72,P,6) X(73,P,4)
#define QUAROT__MIXR74_B10(X) X(0,P,0) X(1,M,2) X(2,P,3) X(3,P,6) X(4,P,4) X(5,P,0) X(6,M,7) X(7,M,6) X(8,P,3) \
    X(9,M,1) X(10,M,2) X(11,M,4) X(12,M,0) X(13,P,7) X(14,M,1) X(15,P,5) X(16,P,2) X(17,P,4) X(18,M,7) \
    X(19,M,6) X(20,M,4) X(21,P,7) X(22,P,6) X(23,M,3) X(24,P,1) X(25,M,5) X(26,M,2) X(27,M,4) X(28,P,7) \
    X(29,M,1) X(30,M,2) X(31,P,3) X(32,P,6) X(33,M,3) X(34,P,1) X(35,M,5) X(36,P,5) X(37,P,2) X(38,P,4) \
    X(39,P,0) X(40,P,0) X(41,P,0) X(42,P,0) X(43,P,0) X(44,P,0) X(45,M,7) X(46,P,1) X(47,M,5) X(48,P,5) \
    X(49,P,2) X(50,M,3) X(51,M,6) X(52,P,3) X(53,M,1) X(54,M,2) X(55,M,4) X(56,P,7) X(57,M,1) X(58,P,5) \
    X(59,P,2) X(60,M,3) X(61,M,6) X(62,M,4) X(63,P,7) X(64,P,6) X(65,P,4) X(66,M,7) X(67,P,1) X(68,M,5) \
    X(69,M,2) X(70,M,4) X(71,M,0) X(72,P,7) X(73,M,1)
#define QUAROT__MIXR74_B11(X) X(0,P,0) X(1,M,4) X(2,M,0) X(3,P,7) X(4,M,1) X(5,M,2) X(6,P,3) X(7,P,6) X(8,P,4) \
    X(9,P,0) X(10,M,7) X(11,M,6) X(12,P,3) X(13,M,1) X(14,M,2) X(15,M,4) X(16,M,0) X(17,P,7) X(18,M,1) \
    X(19,P,5) X(20,P,2) X(21,P,4) X(22,M,7) X(23,M,6) X(24,M,4) X(25,P,7) X(26,P,6) X(27,M,3) X(28,P,1) \
    X(29,M,5) X(30,M,2) X(31,M,4) X(32,P,7) X(33,M,1) X(34,M,2) X(35,P,3) X(36,P,6) X(37,M,3) X(38,P,1) \
    X(39,M,5) X(40,P,5) X(41,P,2) X(42,P,4) X(43,P,0) X(44,P,0) X(45,P,0) X(46,P,0) X(47,P,0) X(48,P,0) \
    X(49,M,7) X(50,P,1) X(51,M,5) X(52,P,5) X(53,P,2) X(54,M,3) X(55,M,6) X(56,P,3) X(57,M,1) X(58,M,2) \
    X(59,M,4) X(60,P,7) X(61,M,1) X(62,P,5) X(63,P,2) X(64,M,3) X(65,M,6) X(66,M,4) X(67,P,7) X(68,P,6) \
    X(69,P,4) X(70,M,7) X(71,P,1) X(72,M,5) X(73,M,2)
#define QUAROT__MIXR74_B12(X) X(0,P,0) X(1,M,7) X(2,P,1) X(3,M,5) X(4,M,2) X(5,M,4) X(6,M,0) X(7,P,7) X(8,M,1) \
    X(9,M,2) X(10,P,3) X(11,P,6) X(12,P,4) X(13,P,0) X(14,M,7) X(15,M,6) X(16,P,3) X(17,M,1) X(18,M,2) \
    X(19,M,4) X(20,M,0) X(21,P,7) X(22,M,1) X(23,P,5) X(24,P,2) X(25,P,4) X(26,M,7) X(27,M,6) X(28,M,4) \
    X(29,P,7) X(30,P,6) X(31,M,3) X(32,P,1) X(33,M,5) X(34,M,2) X(35,M,4) X(36,P,7) X(37,M,1) X(38,M,2) \
    X(39,P,3) X(40,P,6) X(41,M,3) X(42,P,1) X(43,M,5) X(44,P,5) X(45,P,2) X(46,P,4) X(47,P,0) X(48,P,0) \
    X(49,P,0) X(50,P,0) X(51,P,0) X(52,P,0) X(53,M,7) X(54,P,1) X(55,M,5) X(56,P,5) X(57,P,2) X(58,M,3) \
    X(59,M,6) X(60,P,3) X(61,M,1) X(62,M,2) X(63,M,4) X(64,P,7) X(65,M,1) X(66,P,5) X(67,P,2) X(68,M,3) \
    X(69,M,6) X(70,M,4) X(71,P,7) X(72,P,6) X(73,P,4)
#define QUAROT__MIXR74_B13(X) X(0,P,0) X(1,M,4) X(2,P,7) X(3,P,6) X(4,P,4) X(5,M,7) X(6,P,1) X(7,M,5) X(8,M,2) \
    X(9,M,4) X(10,M,0) X(11,P,7) X(12,M,1) X(13,M,2) X(14,P,3) X(15,P,6) X(16,P,4) X(17,P,0) X(18,M,7) \
    X(19,M,6) X(20,P,3) X(21,M,1) X(22,M,2) X(23,M,4) X(24,M,0) X(25,P,7) X(26,M,1) X(27,P,5) X(28,P,2) \
    X(29,P,4) X(30,M,7) X(31,M,6) X(32,M,4) X(33,P,7) X(34,P,6) X(35,M,3) X(36,P,1) X(37,M,5) X(38,M,2) \
    X(39,M,4) X(40,P,7) X(41,M,1) X(42,M,2) X(43,P,3) X(44,P,6) X(45,M,3) X(46,P,1) X(47,M,5) X(48,P,5) \
    X(49,P,2) X(50,P,4) X(51,P,0) X(52,P,0) X(53,P,0) X(54,P,0) X(55,P,0) X(56,P,0) X(57,M,7) X(58,P,1) \
    X(59,M,5) X(60,P,5) X(61,P,2) X(62,M,3) X(63,M,6) X(64,P,3) X(65,M,1) X(66,M,2) X(67,M,4) X(68,P,7) \
    X(69,M,1) X(70,P,5) X(71,P,2) X(72,M,3) X(73,M,6)
#define QUAROT__MIXR74_B14(X) X(0,P,0) X(1,P,5) X(2,P,2) X(3,M,3) X(4,M,6) X(5,M,4) X(6,P,7) X(7,P,6) X(8,P,4) \
    X(9,M,7) X(10,P,1) X(11,M,5) X(12,M,2) X(13,M,4) X(14,M,0) X(15,P,7) X(16,M,1) X(17,M,2) X(18,P,3) \
    X(19,P,6) X(20,P,4) X(21,P,0) X(22,M,7) X(23,M,6) X(24,P,3) X(25,M,1) X(26,M,2) X(27,M,4) X(28,M,0) \
    X(29,P,7) X(30,M,1) X(31,P,5) X(32,P,2) X(33,P,4) X(34,M,7) X(35,M,6) X(36,M,4) X(37,P,7) X(38,P,6) \
    X(39,M,3) X(40,P,1) X(41,M,5) X(42,M,2) X(43,M,4) X(44,P,7) X(45,M,1) X(46,M,2) X(47,P,3) X(48,P,6) \
    X(49,M,3) X(50,P,1) X(51,M,5) X(52,P,5) X(53,P,2) X(54,P,4) X(55,P,0) X(56,P,0) X(57,P,0) X(58,P,0) \
    X(59,P,0) X(60,P,0) X(61,M,7) X(62,P,1) X(63,M,5) X(64,P,5) X(65,P,2) X(66,M,3) X(67,M,6) X(68,P,3) \
    X(69,M,1) X(70,M,2) X(71,M,4) X(72,P,7) X(73,M,1)
#define QUAROT__MIXR74_B15(X) X(0,P,0) X(1,M,2) X(2,M,4) X(3,P,7) X(4,M,1) X(5,P,5) X(6,P,2) X(7,M,3) X(8,M,6) \
    X(9,M,4) X(10,P,7) X(11,P,6) X(12,P,4) X(13,M,7) X(14,P,1) X(15,M,5) X(16,M,2) X(17,M,4) X(18,M,0) \
    X(19,P,7) X(20,M,1) X(21,M,2) X(22,P,3) X(23,P,6) X(24,P,4) X(25,P,0) X(26,M,7) X(27,M,6) X(28,P,3) \
    X(29,M,1) X(30,M,2) X(31,M,4) X(32,M,0) X(33,P,7) X(34,M,1) X(35,P,5) X(36,P,2) X(37,P,4) X(38,M,7) \
    X(39,M,6) X(40,M,4) X(41,P,7) X(42,P,6) X(43,M,3) X(44,P,1) X(45,M,5) X(46,M,2) X(47,M,4) X(48,P,7) \
    X(49,M,1) X(50,M,2) X(51,P,3) X(52,P,6) X(53,M,3) X(54,P,1) X(55,M,5) X(56,P,5) X(57,P,2) X(58,P,4) \
    X(59,P,0) X(60,P,0) X(61,P,0) X(62,P,0) X(63,P,0) X(64,P,0) X(65,M,7) X(66,P,1) X(67,M,5) X(68,P,5) \
    X(69,P,2) X(70,M,3) X(71,M,6) X(72,P,3) X(73,M,1)
#define QUAROT__MIXR74_B16(X) X(0,P,0) X(1,M,3) X(2,M,6) X(3,P,3) X(4,M,1) X(5,M,2) X(6,M,4) X(7,P,7) X(8,M,1) \
    X(9,P,5) X(10,P,2) X(11,M,3) X(12,M,6) X(13,M,4) X(14,P,7) X(15,P,6) X(16,P,4) X(17,M,7) X(18,P,1) \
    X(19,M,5) X(20,M,2) X(21,M,4) X(22,M,0) X(23,P,7) X(24,M,1) X(25,M,2) X(26,P,3) X(27,P,6) X(28,P,4) \
    X(29,P,0) X(30,M,7) X(31,M,6) X(32,P,3) X(33,M,1) X(34,M,2) X(35,M,4) X(36,M,0) X(37,P,7) X(38,M,1) \
    X(39,P,5) X(40,P,2) X(41,P,4) X(42,M,7) X(43,M,6) X(44,M,4) X(45,P,7) X(46,P,6) X(47,M,3) X(48,P,1) \
    X(49,M,5) X(50,M,2) X(51,M,4) X(52,P,7) X(53,M,1) X(54,M,2) X(55,P,3) X(56,P,6) X(57,M,3) X(58,P,1) \
    X(59,M,5) X(60,P,5) X(61,P,2) X(62,P,4) X(63,P,0) X(64,P,0) X(65,P,0) X(66,P,0) X(67,P,0) X(68,P,0) \
    X(69,M,7) X(70,P,1) X(71,M,5) X(72,P,5) X(73,P,2)
#define QUAROT__MIXR74_B17(X) X(0,P,0) X(1,P,1) X(2,M,5) X(3,P,5) X(4,P,2) X(5,M,3) X(6,M,6) X(7,P,3) X(8,M,1) \
    X(9,M,2) X(10,M,4) X(11,P,7) X(12,M,1) X(13,P,5) X(14,P,2) X(15,M,3) X(16,M,6) X(17,M,4) X(18,P,7) \
    X(19,P,6) X(20,P,4) X(21,M,7) X(22,P,1) X(23,M,5) X(24,M,2) X(25,M,4) X(26,M,0) X(27,P,7) X(28,M,1) \
    X(29,M,2) X(30,P,3) X(31,P,6) X(32,P,4) X(33,P,0) X(34,M,7) X(35,M,6) X(36,P,3) X(37,M,1) X(38,M,2) \
    X(39,M,4) X(40,M,0) X(41,P,7) X(42,M,1) X(43,P,5) X(44,P,2) X(45,P,4) X(46,M,7) X(47,M,6) X(48,M,4) \
    X(49,P,7) X(50,P,6) X(51,M,3) X(52,P,1) X(53,M,5) X(54,M,2) X(55,M,4) X(56,P,7) X(57,M,1) X(58,M,2) \
    X(59,P,3) X(60,P,6) X(61,M,3) X(62,P,1) X(63,M,5) X(64,P,5) X(65,P,2) X(66,P,4) X(67,P,0) X(68,P,0) \
    X(69,P,0) X(70,P,0) X(71,P,0) X(72,P,0) X(73,M,7)
#define QUAROT__MIXR74_B18(X) X(0,P,0) X(1,P,0) X(2,P,0) X(3,P,0) X(4,M,1) X(5,P,1) X(6,M,1) X(7,P,1) X(8,P,0) \
    X(9,M,1) X(10,M,0) X(11,P,1) X(12,M,1) X(13,M,0) X(14,M,0) X(15,P,1) X(16,M,1) X(17,P,1) X(18,P,0) \
    X(19,M,1) X(20,M,0) X(21,M,0) X(22,P,1) X(23,P,0) X(24,P,0) X(25,M,1) X(26,P,1) X(27,M,1) X(28,M,0) \
    X(29,M,0) X(30,M,0) X(31,P,1) X(32,M,1) X(33,M,0) X(34,P,1) X(35,P,0) X(36,P,0) X(37,P,0) X(38,M,1) \
    X(39,M,0) X(40,P,1) X(41,M,1) X(42,M,0) X(43,M,0) X(44,M,0) X(45,P,1) X(46,M,1) X(47,P,1) X(48,P,0) \
    X(49,P,0) X(50,M,1) X(51,M,0) X(52,M,0) X(53,P,1) X(54,P,0) X(55,M,1) X(56,P,1) X(57,M,1) X(58,M,0) \
    X(59,M,0) X(60,P,1) X(61,M,1) X(62,M,0) X(63,P,1) X(64,P,0) X(65,M,1) X(66,P,1) X(67,M,1) X(68,P,1) \
    X(69,P,0) X(70,P,0) X(71,P,0) X(72,P,0) X(73,P,0)
#define QUAROT__MIXR74(B) B(74,0,4,F) B(74,1,4,A) B(74,2,4,A) B(74,3,4,A) B(74,4,4,A) B(74,5,4,A) B(74,6,4,A) \
    B(74,7,4,A) B(74,8,4,A) B(74,9,4,A) B(74,10,4,A) B(74,11,4,A) B(74,12,4,A) B(74,13,4,A) B(74,14,4,A) \
    B(74,15,4,A) B(74,16,4,A) B(74,17,4,A) B(74,18,2,Z)
// end generated by tools/gen_mixr.c

// >>hadamard
// n = 2^e * o (o odd) is available iff e >= emin(o), where for an odd d, emin(d) is the least f with
// 2^f*d reachable: a primitive order 2^f*d (Paley I: 2^f*d - 1 a prime power; Paley II: f = 2 and
// 2d - 1 a prime power; an embedded table), or emin(d1) + emin(d2) over d = d1*d2 (Kronecker). Doubling
// (x H_2) makes availability upward closed in e, so K = 2^emin(o) * o is the smallest core.
// Paley: chi(z) = quadratic character of GF(q), q = p^k: +1 on the even powers of a primitive element.

#define QUAROT__HAD_MAXDIV 768   // odd numbers below 2^32 have at most 640 divisors
#define QUAROT__HAD_MAXP 10      // ... and at most 9 distinct prime factors
#define QUAROT__HAD_INF 127      // emin of an odd part with no construction (within the exponent cap)

// 1 and the table's mask and hex string when order n is embedded, else 0.
static int quarot__hadtable_get(int64_t n, uint32_t* back_mask, const char** hex) {
    size_t i;
    for (i = 0; i < sizeof quarot__hadtables / sizeof quarot__hadtables[0]; ++i) {
        if ((int64_t)quarot__hadtables[i].n != n) continue;
        if (back_mask) *back_mask = quarot__hadtables[i].back_mask;
        if (hex) *hex = quarot__hadtables[i].hex;
        return 1;
    }
    return 0;
}

// What quarot__had_analyze learns about n: the odd divisors d of o (indexed in mixed radix over o's
// prime factorization, so d1 | d implies index(d1) <= index(d) digit by digit) and for each one
// emin (capped: > e means unreachable inside n), how 2^emin*d is made, and the Kronecker split.
typedef struct quarot__had_facts {
    int e;                                   // n = 2^e * o
    uint32_t o;
    int np;                                  // o = prod p[i]^pe[i]
    uint32_t p[QUAROT__HAD_MAXP];
    int pe[QUAROT__HAD_MAXP];
    int stride[QUAROT__HAD_MAXP];
    int nd;                                  // number of odd divisors, o is index nd-1
    uint32_t d[QUAROT__HAD_MAXDIV];
    int8_t emin[QUAROT__HAD_MAXDIV];
    int8_t how[QUAROT__HAD_MAXDIV];          // quarot_hadamard_construction of 2^emin*d
    uint16_t split[QUAROT__HAD_MAXDIV];      // KRONECKER: index of one factor's odd part
} quarot__had_facts;

// b^x mod m for m < 2^32 (every product of two residues fits in 64 bits).
static uint64_t quarot__powmod(uint64_t b, uint64_t x, uint64_t m) {
    uint64_t r = 1;
    b %= m;
    while (x) {
        if (x & 1) r = r * b % m;
        b = b * b % m;
        x >>= 1;
    }
    return r;
}

// Deterministic Miller-Rabin for n < 2^32: bases 2, 7, 61 suffice below 4,759,123,141.
static int quarot__is_prime(uint64_t n) {
    static const uint64_t bases[3] = {2, 7, 61};
    uint64_t dd, x;
    int s, i, r;
    if (n < 2) return 0;
    if (n < 4) return 1;
    if (n % 2 == 0) return 0;
    // n - 1 = dd * 2^s with dd odd; a base b witnesses compositeness unless b^dd = 1 or some
    // b^(dd*2^r) = -1 (r < s)
    dd = n - 1;
    s = 0;
    while ((dd & 1) == 0) { dd >>= 1; ++s; }
    for (i = 0; i < 3; ++i) {
        if (bases[i] % n == 0) continue;
        x = quarot__powmod(bases[i], dd, n);
        if (x == 1 || x == n - 1) continue;
        for (r = 1; r < s; ++r) {
            x = x * x % n;
            if (x == n - 1) break;
        }
        if (r == s) return 0;
    }
    return 1;
}

// floor(q^(1/r)) for q < 2^32, r >= 2 (binary search; roots are below 2^16).
static uint64_t quarot__iroot(uint64_t q, int r) {
    uint64_t lo = 1, hi = 65536, mid, t;
    int i;
    while (lo < hi) {   // invariant: lo^r <= q, hi^r > q or hi = lo
        mid = (lo + hi + 1) / 2;
        t = 1;
        for (i = 0; i < r && t <= q; ++i) t *= mid;
        if (t <= q) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// 1 if q = p^k (p prime, k >= 1), q < 2^32. A perfect power is one for a prime exponent r, and its
// r-th root is then a prime power itself.
static int quarot__prime_power(uint64_t q, uint64_t* p, int* k) {
    static const int exps[11] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31};
    uint64_t s, t;
    int i, j, kk;
    if (q < 2) return 0;
    if (quarot__is_prime(q)) { *p = q; *k = 1; return 1; }
    for (i = 0; i < 11; ++i) {
        s = quarot__iroot(q, exps[i]);
        if (s < 2) break;
        for (t = 1, j = 0; j < exps[i]; ++j) t *= s;
        if (t != q) continue;
        if (!quarot__prime_power(s, p, &kk)) return 0;
        *k = kk * exps[i];
        return 1;
    }
    return 0;
}

// How order K (a multiple of 4, K <= 2^32) is made without a Kronecker product; NONE if it is not.
static quarot_hadamard_construction quarot__had_primitive(int64_t K, int64_t* q) {
    uint64_t p;
    int k;
    if (K < 4 || K % 4 != 0) return QUAROT_HADAMARD_NONE;
    if (quarot__prime_power((uint64_t)(K - 1), &p, &k)) { *q = K - 1; return QUAROT_HADAMARD_PALEY1; }
    if ((K / 2 - 1) % 4 == 1 && quarot__prime_power((uint64_t)(K / 2 - 1), &p, &k)) {
        *q = K / 2 - 1;
        return QUAROT_HADAMARD_PALEY2;
    }
    if (quarot__hadtable_get(K, NULL, NULL)) { *q = 0; return QUAROT_HADAMARD_TABLE; }
    return QUAROT_HADAMARD_NONE;
}

// Fill f for 1 <= n <= 2^32; returns 1 when n is available (n = 1, 2 included).
static int quarot__had_analyze(int64_t n, quarot__had_facts* f) {
    uint64_t rem, pr;
    int i, idx, dg[QUAROT__HAD_MAXP], sd[QUAROT__HAD_MAXP];
    // n = 2^e * o
    f->e = 0;
    while ((n & 1) == 0) { n >>= 1; ++f->e; }
    f->o = (uint32_t)n;
    // o = prod p^pe by trial division (o < 2^32: primes below 2^16)
    f->np = 0;
    rem = f->o;
    for (pr = 3; pr * pr <= rem; pr += 2) {
        if (rem % pr) continue;
        f->p[f->np] = (uint32_t)pr;
        f->pe[f->np] = 0;
        while (rem % pr == 0) { rem /= pr; ++f->pe[f->np]; }
        ++f->np;
    }
    if (rem > 1) { f->p[f->np] = (uint32_t)rem; f->pe[f->np] = 1; ++f->np; }
    f->nd = 1;
    for (i = 0; i < f->np; ++i) { f->stride[i] = f->nd; f->nd *= f->pe[i] + 1; }
    QUAROT_ASSERT(f->nd <= QUAROT__HAD_MAXDIV);
    if (f->nd > QUAROT__HAD_MAXDIV) return 0;
    // Walk the divisors in index order, idx = sum dg[i]*stride[i] with d = prod p[i]^dg[i]. Every
    // proper divisor of d has a smaller index, so its emin is final when d is reached (a DP over the
    // divisor lattice: at most 640 divisors, sum over d of tau(d) sub-splits).
    for (i = 0; i < f->np; ++i) dg[i] = 0;
    for (idx = 0; idx < f->nd; ++idx) {
        uint32_t d = 1;
        int j, best, bhow, bsplit = 0;
        for (i = 0; i < f->np; ++i)
            for (j = 0; j < dg[i]; ++j) d *= f->p[i];
        f->d[idx] = d;
        best = QUAROT__HAD_INF;
        bhow = QUAROT_HADAMARD_NONE;
        if (d == 1) {
            best = 0;
            bhow = QUAROT_HADAMARD_SYLVESTER;
        } else {
            int fexp;
            int64_t q;
            for (fexp = 2; fexp <= f->e; ++fexp) {   // primitive orders 2^fexp * d inside n
                quarot_hadamard_construction c = quarot__had_primitive((int64_t)d << fexp, &q);
                if (c != QUAROT_HADAMARD_NONE) { best = fexp; bhow = (int)c; break; }
            }
            // Kronecker: every proper split d = d1 * (d/d1), sub-digits sd <= dg
            for (i = 0; i < f->np; ++i) sd[i] = 0;
            for (;;) {
                int s = 0, v;
                for (i = 0; i < f->np && sd[i] == dg[i]; ++i) sd[i] = 0;   // next sd (mixed radix)
                if (i == f->np) break;
                ++sd[i];
                for (i = 0; i < f->np; ++i) s += sd[i] * f->stride[i];
                if (s == idx) continue;   // d1 = d is not a proper split
                v = f->emin[s] + f->emin[idx - s];
                if (v < best) { best = v; bhow = QUAROT_HADAMARD_KRONECKER; bsplit = s; }
            }
        }
        f->emin[idx] = (int8_t)(best < QUAROT__HAD_INF ? best : QUAROT__HAD_INF);
        f->how[idx] = (int8_t)bhow;
        f->split[idx] = (uint16_t)bsplit;
        for (i = 0; i < f->np && dg[i] == f->pe[i]; ++i) dg[i] = 0;      // next divisor
        if (i < f->np) ++dg[i];
    }
    return f->emin[f->nd - 1] <= f->e;
}

// Fast paths first (powers of two, Paley and table orders need no factorization), then the DP.
QUAROT_API int quarot_hadamard_available(int64_t n) {
    quarot__had_facts f;
    int64_t q;
    if (n <= 0 || n > QUAROT_HADAMARD_MAX_ORDER) return 0;
    if (n <= 2) return 1;
    if (n % 4 != 0) return 0;
    if ((n & (n - 1)) == 0 || quarot__had_primitive(n, &q) != QUAROT_HADAMARD_NONE) return 1;
    return quarot__had_analyze(n, &f);
}

QUAROT_API quarot_result quarot_hadamard_info_get(int64_t n, quarot_hadamard_info* info) {
    quarot__had_facts f;
    char tail[16];
    int top;
    if (!info) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->n = n;
    if (n <= 0 || n > QUAROT_HADAMARD_MAX_ORDER) {
        snprintf(info->text, sizeof info->text, "%lld: outside 1..2^32", (long long)n);
        return QUAROT_ERR_UNSUPPORTED_SIZE;
    }
    if (n > 2 && n % 4 != 0) {
        snprintf(info->text, sizeof info->text, "%lld: not 1, 2 or a multiple of 4", (long long)n);
        return QUAROT_ERR_UNSUPPORTED_SIZE;
    }
    if (!quarot__had_analyze(n, &f)) {
        snprintf(info->text, sizeof info->text, "%lld = 2^%d*%lu: no construction known here",
                 (long long)n, f.e, (unsigned long)f.o);
        return QUAROT_ERR_UNSUPPORTED_SIZE;
    }
    // o itself is the last divisor; K = 2^emin(o) * o and the rest of n is Sylvester
    top = f.nd - 1;
    info->m = f.e - f.emin[top];
    info->K = (int64_t)f.o << f.emin[top];
    info->construction = (quarot_hadamard_construction)f.how[top];
    if (info->K == 1) {
        snprintf(info->text, sizeof info->text, "2^%d (sylvester)", info->m);
        return QUAROT_OK;
    }
    tail[0] = '\0';
    if (info->m > 0) snprintf(tail, sizeof tail, " x 2^%d", info->m);
    switch (info->construction) {
        case QUAROT_HADAMARD_PALEY1:
        case QUAROT_HADAMARD_PALEY2:
            info->q = info->construction == QUAROT_HADAMARD_PALEY1 ? info->K - 1 : info->K / 2 - 1;
            snprintf(info->text, sizeof info->text, "%lld (paley%d q=%lld)%s", (long long)info->K,
                     info->construction == QUAROT_HADAMARD_PALEY1 ? 1 : 2, (long long)info->q, tail);
            break;
        case QUAROT_HADAMARD_TABLE:
            snprintf(info->text, sizeof info->text, "%lld (table)%s", (long long)info->K, tail);
            break;
        default: {   // KRONECKER
            int s = f.split[top], t = top - f.split[top];
            int64_t a = (int64_t)f.d[s] << f.emin[s], b = (int64_t)f.d[t] << f.emin[t];
            QUAROT_ASSERT(info->construction == QUAROT_HADAMARD_KRONECKER && a * b == info->K);
            info->a = a >= b ? a : b;
            info->b = a >= b ? b : a;
            snprintf(info->text, sizeof info->text, "%lld (kronecker %lld*%lld)%s", (long long)info->K,
                     (long long)info->a, (long long)info->b, tail);
            break;
        }
    }
    return QUAROT_OK;
}

QUAROT_API int64_t quarot_hadamard_largest_block(int64_t n, int64_t max_block) {
    quarot__had_facts f;
    int64_t best = 1, c;
    int idx, j;
    if (n <= 0 || max_block < 1 || n > QUAROT_HADAMARD_MAX_ORDER) return 0;
    quarot__had_analyze(n, &f);
    // every odd divisor d with emin(d) <= e gives the blocks d*2^j, emin(d) <= j <= e (and d = 1: any j)
    for (idx = 0; idx < f.nd; ++idx) {
        int lo = f.d[idx] == 1 ? 0 : f.emin[idx];
        for (j = f.e; j >= lo; --j) {
            c = (int64_t)f.d[idx] << j;
            if (c <= max_block) { if (c > best) best = c; break; }
        }
    }
    return best;
}

// --- builders: every one writes a contiguous [K][K] matrix at out ---

// Element z of GF(p^k) is the integer with base-p digits z_0..z_{k-1} (polynomial sum z_i x^i).
static uint64_t quarot__gf_sub(uint64_t x, uint64_t y, uint64_t p, int k) {
    uint64_t r = 0, pw = 1;
    int i;
    if (k == 1) return (x + p - y) % p;
    for (i = 0; i < k; ++i) {
        r += ((x % p) + p - (y % p)) % p * pw;
        x /= p;
        y /= p;
        pw *= p;
    }
    return r;
}

// chi[z] for every z in GF(q), q = p^k odd: try monic f(x) = x^k + sum c_i x^i (c_0 != 0) until x
// has q-1 distinct powers modulo f (then GF(p)[x]/f is a field and x a primitive element), marking
// x^i with (-1)^i: the squares are exactly the even powers. chi[0] = 0.
static int quarot__gf_chi(uint64_t p, int k, uint64_t q, int8_t* chi) {
    uint64_t pk1 = q / p, code, cd[64], cur, low, top, x, nxt, pw, i;
    int t;
    for (code = 1; code < q; ++code) {
        if (code % p == 0) continue;                        // c_0 = 0: x divides f
        for (x = code, t = 0; t < k; ++t) { cd[t] = x % p; x /= p; }
        memset(chi, 0, (size_t)q);
        cur = 1;
        for (i = 0; i + 1 < q; ++i) {
            if (cur == 0 || chi[cur] != 0) break;           // repeated power: x not primitive
            chi[cur] = (int8_t)((i & 1) ? -1 : 1);
            top = cur / pk1;                                // cur * x = shifted digits - top * f
            low = cur % pk1;
            x = low * p;
            nxt = 0;
            pw = 1;
            for (t = 0; t < k; ++t) {
                nxt += ((x % p) + p - top * cd[t] % p) % p * pw;
                x /= p;
                pw *= p;
            }
            cur = nxt;
        }
        if (i + 1 == q && cur == 1) return 1;
    }
    return 0;
}

// Paley I (K = q+1): H = I + [[0, 1^T], [-1, Q]], Q[x][y] = chi(x - y).
// Paley II (K = 2(q+1)): C = [[0, 1^T], [1, Q]]; entry 0 -> [[1,-1],[-1,-1]], +-1 -> +-[[1,1],[1,-1]].
static quarot_result quarot__had_paley(int kind, int64_t q64, int8_t* out, const quarot_env* env) {
    uint64_t p, q = (uint64_t)q64, r, c;
    int k;
    int8_t* chi;
    if (!quarot__prime_power(q, &p, &k) || (q & 1) == 0) return QUAROT_ERR_INTERNAL;
    chi = (int8_t*)quarot_env_alloc(env, (size_t)q);
    if (!chi) return QUAROT_ERR_OUT_OF_MEMORY;
    if (!quarot__gf_chi(p, k, q, chi)) { quarot_env_free(env, chi); return QUAROT_ERR_INTERNAL; }
    // Row / column 0 is the added point "infinity"; row r >= 1 stands for the field element r - 1.
    if (kind == QUAROT_HADAMARD_PALEY1) {
        uint64_t K = q + 1;
        for (r = 0; r < K; ++r) {
            int8_t* row = out + r * K;
            for (c = 0; c < K; ++c) {
                if (r == 0 || r == c) row[c] = 1;
                else if (c == 0) row[c] = -1;
                else row[c] = chi[quarot__gf_sub(r - 1, c - 1, p, k)];
            }
        }
    } else {
        // each entry v of the symmetric conference matrix C becomes a 2x2 block at rows 2r, 2r+1
        uint64_t K = 2 * (q + 1);
        for (r = 0; r <= q; ++r) {
            int8_t* r0 = out + (2 * r) * K;
            int8_t* r1 = r0 + K;
            for (c = 0; c <= q; ++c) {
                int v = (r == 0 && c == 0) ? 0 : (r == 0 || c == 0) ? 1 : chi[quarot__gf_sub(r - 1, c - 1, p, k)];
                if (v == 0) {
                    r0[2 * c] = 1; r0[2 * c + 1] = -1; r1[2 * c] = -1; r1[2 * c + 1] = -1;
                } else {
                    r0[2 * c] = (int8_t)v; r0[2 * c + 1] = (int8_t)v; r1[2 * c] = (int8_t)v; r1[2 * c + 1] = (int8_t)-v;
                }
            }
        }
    }
    quarot_env_free(env, chi);
    return QUAROT_OK;
}

// Embedded table: 4x4 blocks of size m, block (bi, bj) circulant (row r = first row shifted right by r)
// or back-circulant (shifted left by r), first rows as packed bits (see >>generated).
static quarot_result quarot__had_table(int64_t K, int8_t* out) {
    uint32_t mask;
    const char* hex;
    int64_t m = K / 4, bi, bj, r, j, c, t;
    if (!quarot__hadtable_get(K, &mask, &hex)) return QUAROT_ERR_INTERNAL;
    for (bi = 0; bi < 4; ++bi)
        for (bj = 0; bj < 4; ++bj) {
            int64_t blk = 4 * bi + bj;
            int back = (int)((mask >> blk) & 1u);
            for (r = 0; r < m; ++r)
                for (j = 0; j < m; ++j) {
                    int h;
                    // sign = bit t of the packed first rows: hex digit t/4, bit 3 - t%4 of it
                    c = back ? (j + r) % m : (j - r + m) % m;
                    t = blk * m + c;
                    h = hex[t >> 2];
                    h = h <= '9' ? h - '0' : h - 'a' + 10;
                    out[(bi * m + r) * K + bj * m + j] = (int8_t)(((h >> (3 - (t & 3))) & 1) ? -1 : 1);
                }
        }
    return QUAROT_OK;
}

// Row j of Sylvester H_B (B a power of two): row[l] = (-1)^popcount(j & l), by doubling.
static void quarot__had_sylvester_row(int64_t j, int64_t B, int8_t* row) {
    int64_t h, l;
    row[0] = 1;
    for (h = 1; h < B; h <<= 1)
        for (l = h; l < 2 * h; ++l) row[l] = (int8_t)((j & h) ? -row[l - h] : row[l - h]);
}

// In place: buf holds S [s][s] contiguous; on return it holds S (x) P [s*B][s*B] (P [B][B], or Sylvester
// H_B when P is NULL): T[i*B + j][k*B + l] = S[i][k] * P[j][l]. Block rows i go from last to first:
// block i's output starts at byte i*s*B*B >= i*s, past the source rows 0..i-1 still to be read, and
// source row i is copied aside first.
static quarot_result quarot__had_expand(int8_t* buf, int64_t s, const int8_t* P, int64_t B, const quarot_env* env) {
    int64_t n = s * B, i, j, k, l;
    int8_t* srow = (int8_t*)quarot_env_alloc(env, (size_t)(s + B));
    int8_t* prow;
    if (!srow) return QUAROT_ERR_OUT_OF_MEMORY;
    prow = srow + s;
    for (i = s - 1; i >= 0; --i) {
        memcpy(srow, buf + i * s, (size_t)s);
        // output rows i*B .. i*B+B-1: row i*B+j is srow (x) P[j], i.e. B-long copies of +-P[j]
        for (j = 0; j < B; ++j) {
            int8_t* dst = buf + (i * B + j) * n;
            const int8_t* pj = P ? P + j * B : prow;
            if (!P) quarot__had_sylvester_row(j, B, prow);
            for (k = 0; k < s; ++k) {
                if (srow[k] > 0) memcpy(dst + k * B, pj, (size_t)B);
                else for (l = 0; l < B; ++l) dst[k * B + l] = (int8_t)-pj[l];
            }
        }
    }
    quarot_env_free(env, srow);
    return QUAROT_OK;
}

// H_n for an available n into contiguous out [n][n]: core H_K at the start, then (x) H_{2^m} in place.
static quarot_result quarot__had_build(int64_t n, int8_t* out, const quarot_env* env) {
    quarot_hadamard_info info;
    quarot_result r = quarot_hadamard_info_get(n, &info);
    int64_t j;
    if (r != QUAROT_OK) return r;
    if (info.K == 1) {   // pure Sylvester: each row straight from its index, no temporary
        for (j = 0; j < n; ++j) quarot__had_sylvester_row(j, n, out + j * n);
        return QUAROT_OK;
    }
    switch (info.construction) {
        case QUAROT_HADAMARD_PALEY1:
        case QUAROT_HADAMARD_PALEY2: r = quarot__had_paley((int)info.construction, info.q, out, env); break;
        case QUAROT_HADAMARD_TABLE: r = quarot__had_table(info.K, out); break;
        case QUAROT_HADAMARD_KRONECKER: {
            // H_a in place at out, H_b (b <= sqrt(K)) in a temporary: O(K) bytes
            int8_t* hb = (int8_t*)quarot_env_alloc(env, (size_t)(info.b * info.b));
            if (!hb) return QUAROT_ERR_OUT_OF_MEMORY;
            r = quarot__had_build(info.a, out, env);
            if (r == QUAROT_OK) r = quarot__had_build(info.b, hb, env);
            if (r == QUAROT_OK) r = quarot__had_expand(out, info.a, hb, info.b, env);
            quarot_env_free(env, hb);
            break;
        }
        default: r = QUAROT_ERR_INTERNAL; break;
    }
    if (r == QUAROT_OK && info.m > 0) r = quarot__had_expand(out, info.K, NULL, (int64_t)1 << info.m, env);
    return r;
}

// Common checks of the build_* entry points: available, n*n*elem fits size_t, out not NULL.
static quarot_result quarot__had_check(int64_t n, const void* out, size_t elem, size_t* count) {
    size_t sn = (size_t)n, bytes;
    if (!quarot_hadamard_available(n)) return QUAROT_ERR_UNSUPPORTED_SIZE;
    // (int64_t)(size_t)n != n catches a 32-bit size_t; then n*n and n*n*elem must not wrap
    if ((int64_t)sn != n || !quarot__mul_size(sn, sn, count) || !quarot__mul_size(*count, elem, &bytes))
        return QUAROT_ERR_OVERFLOW;
    if (!out) return QUAROT_ERR_INVALID_ARGUMENT;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_hadamard_build_i8(int64_t n, int8_t* out, const quarot_env* env) {
    size_t count;
    quarot_result r = quarot__had_check(n, out, 1, &count);
    if (r != QUAROT_OK) return r;
    return quarot__had_build(n, out, env);
}

// f32 / f64: the +-1 matrix is built in the last n*n bytes of out and widened front to back; element t
// (bytes [t*w, t*w + w)) never reaches source bytes (w-1)*n*n + t' for t' >= t, so no n*n temporary.
QUAROT_API quarot_result quarot_hadamard_build_f32(int64_t n, int normalized, float* out, const quarot_env* env) {
    size_t count, t;
    const int8_t* src;
    float s;
    quarot_result r = quarot__had_check(n, out, sizeof(float), &count);
    if (r != QUAROT_OK) return r;
    src = (const int8_t*)out + count * (sizeof(float) - 1);
    r = quarot__had_build(n, (int8_t*)out + count * (sizeof(float) - 1), env);
    if (r != QUAROT_OK) return r;
    s = normalized ? (float)(1.0 / sqrt((double)n)) : 1.0f;
    for (t = 0; t < count; ++t) out[t] = src[t] > 0 ? s : -s;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_hadamard_build_f64(int64_t n, int normalized, double* out, const quarot_env* env) {
    size_t count, t;
    const int8_t* src;
    double s;
    quarot_result r = quarot__had_check(n, out, sizeof(double), &count);
    if (r != QUAROT_OK) return r;
    src = (const int8_t*)out + count * (sizeof(double) - 1);
    r = quarot__had_build(n, (int8_t*)out + count * (sizeof(double) - 1), env);
    if (r != QUAROT_OK) return r;
    s = normalized ? 1.0 / sqrt((double)n) : 1.0;
    for (t = 0; t < count; ++t) out[t] = src[t] > 0 ? s : -s;
    return QUAROT_OK;
}

// >>transform
// H_n = H_K (x) H_{2^m}: for a row x viewed as z[K][M] (M = 2^m), x*H_n = mix_K(fwht_M(z)) where
//   fwht_M:  for h = 1, 2, ..., M/2: for each pair (j, j+h) with bit h of j clear: (a, b) <- (a+b, a-b)
//   mix_K:   y[i][j] = sum_k c(k, i) * z[k][j], c = H_K (forward) or H_K^T (transpose), summed in
//            blocks of b consecutive k (declaration notes, step 3)
// then post-signs and the 1/sqrt(n) scale as separate multiplies. The _ref functions below are the
// specification; >>transform_simd .. >>transform_isa hold the SIMD kernels and the per-ISA selection. Cost per row:
// n*m adds for the butterflies, about K*n/b for the mixing.

// Kernel signatures shared by every ISA. A row kernel transforms one row of 2^L floats in place:
// x *= pre (if not NULL), butterflies, x *= post (if not NULL), x *= *scale (if not NULL). With src
// not NULL the row is read from src instead (src and x do not overlap), x is only written: the copy
// into a workspace rides on the first loads.
typedef void (*quarot__wht_row_fn)(float* x, const float* src, int L, const float* pre, const float* post,
                                   const float* scale);
// A mixing kernel: y[K][M] = mix of z[K][M] with the coefficient panels of one orientation
// (plan->mix_f32 + o * K16 * K), then post-signs and scale; z and y do not overlap.
typedef void (*quarot__mix_fn)(const float* z, float* y, int64_t K, int64_t M, const float* coef,
                               const float* post, const float* scale);
// A blocked mixing kernel (mix_block b > 1, 2^m >= 16): pat = plan->mix_pat for one orientation
// ([K8 + 8][nw]), tab the pattern tables in the workspace. corr (the split Paley II mixing, NULL
// otherwise): [K][M] z before the extra stage; the kernel then reads z2 = pair(corr) on the fly (z is
// not read) and output (c, j) becomes y - (w + w), w = corr[c][j ^ M/2].
typedef void (*quarot__mixb_fn)(const float* z, float* y, int64_t K, int64_t M, int b, const uint64_t* pat,
                                int64_t nb, float* tab, const float* corr, const float* post, const float* scale);
// A fixed register mixing kernel (plan->mix_fixed): y [K][M] from z [K][M + QUAROT__MIXR_PAD]; for
// the split Paley II mixing z [K][M] is the z before the pairing, z2 [K][M + QUAROT__MIXR_PAD] (not
// NULL) first receives its pairs, which the kernel then mixes, and z is corr. The padding: rows of
// M = 1024 or 512 floats would put a column's 28 rows of z in one or two L1 sets of 8 ways, and the
// second pass would reload them from L2.
#define QUAROT__MIXR_PAD 16
typedef void (*quarot__mixr_fn)(const float* z, float* y, int64_t M, float* z2, const float* post,
                                const float* scale);
static quarot__mixr_fn quarot__mixr_select(quarot_isa isa, int fixed, int transpose, int64_t M);   // NULL: none
static quarot__wht_row_fn quarot__wht_row_select(quarot_isa isa);   // in >>transform_isa
// A column kernel: the w columns at x of [2^L][ld] (quarot_hadamard_apply_cols_f32; w a multiple of
// the lanes, at most QUAROT__WHTC_COLS), through buf ([2^L][w] floats, or NULL: in place) between
// the first and the last pass.
#define QUAROT__WHTC_COLS 32
// The column kernels' passes: pass k runs the r[k] stages from h = 2^s[k] (QUAROT__WHTC_DEFINE).
typedef struct quarot__whtc_plan {
    int np, s[64], r[64];
} quarot__whtc_plan;
QUAROT__PRIVATE void quarot__whtc_plan_make(quarot__whtc_plan* pl, int L, int logr) {
    int k, s = 0;
    pl->np = (L + logr - 1) / logr;
    for (k = 0; k < pl->np; ++k) {
        pl->r[k] = L / pl->np + (k < L % pl->np ? 1 : 0);
        pl->s[k] = s;
        s += pl->r[k];
    }
}
// Where row `row` starts in the kernels' buffer, in units of 16 floats beyond row * w: the sum of
// row >> s_k over the passes k >= 1. It never decreases (rows never overlap), and within a group of
// pass k (digit k of row 0, t < 2^r_k) it grows by t * sum_{j=1..k} 2^(s_k - s_j): see
// quarot__whtc_stride. At most (n-1)/4 + (n-1)/8 + ... < n/2 (s_1 >= 2 whenever there are two passes).
QUAROT__PRIVATE int64_t quarot__whtc_skew(int64_t row, const quarot__whtc_plan* pl) {
    int64_t f = 0;
    int k;
    for (k = 1; k < pl->np; ++k) f += row >> pl->s[k];
    return f;
}
// Floats between the rows t and t+1 of a group of pass k in the buffer: hs*w plus 16 times an odd
// number (the j = k term is 1), so with w a multiple of 16 no two of a group's rows share a cache
// set however large hs*w (a multiple of 4 KiB for the large strides) is.
QUAROT__PRIVATE int64_t quarot__whtc_stride(const quarot__whtc_plan* pl, int k, int64_t w) {
    int64_t f = 0;
    int j;
    for (j = 1; j <= k; ++j) f += (int64_t)1 << (pl->s[k] - pl->s[j]);
    return ((int64_t)1 << pl->s[k]) * w + 16 * f;
}
typedef void (*quarot__whtc_fn)(float* x, int64_t ld, int64_t w, int L, const float* pre, const float* post,
                                const float* scale, float* buf);
static quarot__whtc_fn quarot__whtc_select(quarot_isa isa, int* lanes);   // NULL (lanes 0) for QUAROT_ISA_REF
static quarot__mix_fn quarot__mix_select(quarot_isa isa);            // NULL for QUAROT_ISA_REF
static quarot__mixb_fn quarot__mixb_select(quarot_isa isa);          // NULL for QUAROT_ISA_REF
// The f64 row and mixing kernels (the _ref functions below for QUAROT_ISA_REF or without SIMD).
static void quarot__f64_select(quarot_isa isa,
                               void (**row)(double*, int, const double*, const float*, const double*, const float*,
                                            const double*),
                               void (**mix)(const double*, double*, int64_t, int64_t, const int8_t*, int, int,
                                            const double*, const float*, const double*));

// The specification: one row of n = 2^L floats, the textbook in-place butterfly in stage order.
// Every SIMD kernel computes exactly these a + b and a - b, only in another (dependency-respecting)
// order, so the results are the same bits.
static void quarot__wht_row_f32_ref(float* x, const float* src, int L, const float* pre, const float* post,
                                    const float* scale) {
    const int64_t n = (int64_t)1 << L;
    int64_t h, i, j;
    if (src) memcpy(x, src, (size_t)n * sizeof(float));
    if (pre) for (i = 0; i < n; ++i) x[i] = x[i] * pre[i];
    for (h = 1; h < n; h <<= 1) {
        for (i = 0; i < n; i += 2 * h) {
            for (j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
    if (post) for (i = 0; i < n; ++i) x[i] = x[i] * post[i];
    if (scale) for (i = 0; i < n; ++i) x[i] = x[i] * *scale;
}

// The column specification: quarot__wht_row_f32_ref on each of `cols` columns of x [2^L][ld].
static void quarot__whtc_f32_ref(float* x, int64_t ld, int64_t cols, int L, const float* pre, const float* post,
                                 const float* scale) {
    const int64_t n = (int64_t)1 << L;
    int64_t h, i, j, c;
    if (pre) for (i = 0; i < n; ++i) for (c = 0; c < cols; ++c) x[i * ld + c] = x[i * ld + c] * pre[i];
    for (h = 1; h < n; h <<= 1) {
        for (i = 0; i < n; i += 2 * h) {
            for (j = i; j < i + h; ++j) {
                float* xa = x + j * ld;
                float* xb = x + (j + h) * ld;
                for (c = 0; c < cols; ++c) {
                    const float a = xa[c], b = xb[c];
                    xa[c] = a + b;
                    xb[c] = a - b;
                }
            }
        }
    }
    if (post) for (i = 0; i < n; ++i) for (c = 0; c < cols; ++c) x[i * ld + c] = x[i * ld + c] * post[i];
    if (scale) for (i = 0; i < n; ++i) for (c = 0; c < cols; ++c) x[i * ld + c] = x[i * ld + c] * *scale;
}

// The same in double; signs may come as doubles or as floats (read exactly).
static void quarot__wht_row_f64_ref(double* x, int L, const double* pre, const float* pre_f32,
                                    const double* post, const float* post_f32, const double* scale) {
    const int64_t n = (int64_t)1 << L;
    int64_t h, i, j;
    if (pre) for (i = 0; i < n; ++i) x[i] = x[i] * pre[i];
    if (pre_f32) for (i = 0; i < n; ++i) x[i] = x[i] * (double)pre_f32[i];
    for (h = 1; h < n; h <<= 1) {
        for (i = 0; i < n; i += 2 * h) {
            for (j = i; j < i + h; ++j) {
                const double a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
    if (post) for (i = 0; i < n; ++i) x[i] = x[i] * post[i];
    if (post_f32) for (i = 0; i < n; ++i) x[i] = x[i] * (double)post_f32[i];
    if (scale) for (i = 0; i < n; ++i) x[i] = x[i] * *scale;
}

// The mixing specification (declaration notes, step 3): blocks of b consecutive k, each a chain
// u = z[k0] +- z[k0+1] +- ... with signs relative to the block's first coefficient g, P = g*u (sign
// flip), y = P_0 + P_1 + ... in block order. c(k,i) comes from the +-1 bytes of H_K.
#define QUAROT__MIX_REF_BODY(T)                                                                  \
    int64_t i, j, k, k0;                                                                         \
    for (i = 0; i < K; ++i) {                                                                    \
        const int8_t* c = transpose ? had + i * K : had + i;   /* c(k,i) = c[k * ck] */         \
        const int64_t ck = transpose ? 1 : K;                                                    \
        for (j = 0; j < M; ++j) {                                                                \
            T acc = 0;                                                                           \
            for (k0 = 0; k0 < K; k0 += b) {                                                      \
                const int8_t g = c[k0 * ck];                                                     \
                T u = z[k0 * M + j];                                                             \
                for (k = k0 + 1; k < K && k < k0 + b; ++k)                                       \
                    u = c[k * ck] == g ? u + z[k * M + j] : u - z[k * M + j];                    \
                if (g < 0) u = -u;                                                               \
                acc = k0 == 0 ? u : acc + u;                                                     \
            }                                                                                    \
            y[i * M + j] = acc;                                                                  \
        }                                                                                        \
    }

// z, y: [K][M]; had: H_K [K][K]; then post-signs and scale, each a separate pass like the FWHT's.
static void quarot__mix_f32_ref(const float* z, float* y, int64_t K, int64_t M, const int8_t* had, int transpose,
                                int b, const float* post, const float* scale) {
    QUAROT__MIX_REF_BODY(float)
    if (post) for (i = 0; i < K * M; ++i) y[i] = y[i] * post[i];
    if (scale) for (i = 0; i < K * M; ++i) y[i] = y[i] * *scale;
}

static void quarot__mix_f64_ref(const double* z, double* y, int64_t K, int64_t M, const int8_t* had, int transpose,
                                int b, const double* post, const float* post_f32, const double* scale) {
    QUAROT__MIX_REF_BODY(double)
    if (post) for (i = 0; i < K * M; ++i) y[i] = y[i] * post[i];
    if (post_f32) for (i = 0; i < K * M; ++i) y[i] = y[i] * (double)post_f32[i];
    if (scale) for (i = 0; i < K * M; ++i) y[i] = y[i] * *scale;
}

// The split Paley II mixing (declaration notes, step 3'): z2[r] = [z[2r] + z[2r+1] | z[2r] - z[2r+1]]
// for z [2*Kh][M] (the extra butterfly stage h = M, out of place so that z stays for the correction).
#define QUAROT__PAIR_BODY                                                                        \
    int64_t r, j;                                                                                \
    for (r = 0; r < Kh; ++r) {                                                                   \
        const int64_t at = 2 * r * M;                                                            \
        for (j = 0; j < M; ++j) {                                                                \
            z2[at + j] = z[at + j] + z[at + M + j];                                              \
            z2[at + M + j] = z[at + j] - z[at + M + j];                                          \
        }                                                                                        \
    }
static void quarot__mix_pair_f32(const float* z, float* z2, int64_t Kh, int64_t M) { QUAROT__PAIR_BODY }
static void quarot__mix_pair_f64(const double* z, double* z2, int64_t Kh, int64_t M) { QUAROT__PAIR_BODY }

// The split mixing's correction on y = Y [Kh][2M] (in place): y[t] = y[t] - (w + w), w = z[t ^ M]
// within each row (M a power of two, so t ^ M swaps the row's halves); then post-signs and scale.
#define QUAROT__CORR_BODY                                                                        \
    int64_t t;                                                                                   \
    for (t = 0; t < 2 * Kh * M; ++t) {                                                           \
        const int64_t u = t ^ M;                                                                 \
        y[t] = y[t] - (z[u] + z[u]);                                                             \
    }
static void quarot__mix_corr_f32(float* y, const float* z, int64_t Kh, int64_t M, const float* post,
                                 const float* scale) {
    QUAROT__CORR_BODY
    if (post) for (t = 0; t < 2 * Kh * M; ++t) y[t] = y[t] * post[t];
    if (scale) for (t = 0; t < 2 * Kh * M; ++t) y[t] = y[t] * *scale;
}
static void quarot__mix_corr_f64(double* y, const double* z, int64_t Kh, int64_t M, const double* post,
                                 const float* post_f32, const double* scale) {
    QUAROT__CORR_BODY
    if (post) for (t = 0; t < 2 * Kh * M; ++t) y[t] = y[t] * post[t];
    if (post_f32) for (t = 0; t < 2 * Kh * M; ++t) y[t] = y[t] * (double)post_f32[t];
    if (scale) for (t = 0; t < 2 * Kh * M; ++t) y[t] = y[t] * *scale;
}

// The mixing block b for core K and 2^m = M (declaration notes): 1 below 16 columns, else the b in
// 2..5 with the fewest adds plus table stores per column, ceil(K/b) * (2^(b+1) + K). The SIMD
// kernels build a block's 2^(b-1) chains in registers, which caps b at 5 (16 registers of entries);
// the cost would pick 6 or more only for K above about 300.
#define QUAROT__MIX_BMAX 5
static int quarot__mix_block(int64_t K, int64_t M) {
    int b, best = 1;
    int64_t cost, best_cost = K * (K + 4);
    if (K <= 1 || M < 16) return 1;
    for (b = 2; b <= QUAROT__MIX_BMAX; ++b) {
        cost = (K + b - 1) / b * (((int64_t)2 << b) + K);
        if (cost < best_cost) { best_cost = cost; best = b; }
    }
    return best;
}

// log2(n) for a power of two n >= 1, else -1.
static int quarot__log2_exact(int64_t n) {   // used to validate quarot_fwht_* sizes
    int L = 0;
    if (n <= 0 || (n & (n - 1)) != 0) return -1;
    while (((int64_t)1 << L) < n) ++L;
    return L;
}

// Shared checks of the batched entry points: x [rows][stride] with n used per row, elem bytes each.
static quarot_result quarot__rows_check(const void* x, int64_t n, int64_t rows, int64_t stride, size_t elem) {
    if (!x || n <= 0 || rows < 0 || stride < n) return QUAROT_ERR_INVALID_ARGUMENT;
    if (stride > INT64_MAX / (int64_t)elem) return QUAROT_ERR_OVERFLOW;   // also n (<= stride), whatever rows is
    if (rows > 0 && (rows - 1) > (INT64_MAX / (int64_t)elem - n) / stride) return QUAROT_ERR_OVERFLOW;
    return QUAROT_OK;
}

// The public FWHT: validate, pick the ISA's row kernel once, run it on every row (unnormalized).
QUAROT_API quarot_result quarot_fwht_f32(float* x, int64_t n, int64_t rows, int64_t stride, quarot_isa isa) {
    quarot_result r = quarot__rows_check(x, n, rows, stride, sizeof(float));
    quarot__wht_row_fn fn;
    int L = quarot__log2_exact(n);
    int64_t i;
    if (r != QUAROT_OK) return r;
    if (L < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot__isa_resolve(isa, &isa);
    if (r != QUAROT_OK) return r;
    fn = quarot__wht_row_select(isa);
    for (i = 0; i < rows; ++i) fn(x + i * stride, NULL, L, NULL, NULL, NULL);
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_fwht_f64(double* x, int64_t n, int64_t rows, int64_t stride) {
    quarot_result r = quarot__rows_check(x, n, rows, stride, sizeof(double));
    int L = quarot__log2_exact(n);
    int64_t i;
    void (*row)(double*, int, const double*, const float*, const double*, const float*, const double*);
    void (*mix)(const double*, double*, int64_t, int64_t, const int8_t*, int, int, const double*, const float*,
                const double*);
    if (r != QUAROT_OK) return r;
    if (L < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    quarot__f64_select(QUAROT_ISA_DEFAULT, &row, &mix);
    for (i = 0; i < rows; ++i) row(x + i * stride, L, NULL, NULL, NULL, NULL, NULL);
    return QUAROT_OK;
}

// >>transform_plan
// The plan of n = K * 2^m (H_K as bytes, the blocked mixing's pattern words or the b = 1 float panels,
// the fixed register kernel whose term lists match) and the batched entry points: per row, the
// butterflies of every 2^m block into the workspace, then the mixing back into the row.

QUAROT_API void quarot_hadamard_plan_free(quarot_hadamard_plan* p) {
    if (!p) return;
    quarot_env_free(&p->env, p->had_k);
    quarot_env_free(&p->env, p->mix_f32);
    quarot_env_free(&p->env, p->mix_pat);
    quarot_env_free(&p->env, p->mix_half);
    memset(p, 0, sizeof *p);
}

// The fixed register mixing (AVX-512 and AVX2, >>transform_mix): for the cores whose b = 4 mixing
// is common in LLMs (28: 14336 and 28672 = 28 * 2^9, 2^10; the split 76 and 148: 4864, 18944), what each output
// adds from each block is compiled in, so a block's 8 table entries stay in registers instead of
// going through memory. The lists (QUAROT__MIXR28F_B0 .., >>generated) are the plans' own patterns,
// printed by tools/gen_mixr.c; the plan takes a kernel only when every term equals its mix_pat (both
// orientations), so a stale list costs speed, never bits, and test_transform fails on it.

// The lists as bytes p | 8 * (g < 0), the mix_pat entry of b = 4, block by block: [nb][K].
#define QUAROT__MIXR_SB_P 0
#define QUAROT__MIXR_SB_M 8
#define QUAROT__MIXR_BYTE(i, S, p) (unsigned char)((p) | QUAROT__MIXR_SB_##S),
#define QUAROT__MIXR_BYTES(ID, g, L, kind) QUAROT__MIXR##ID##_B##g(QUAROT__MIXR_BYTE)
static const unsigned char quarot__mixr28f_terms[] = {QUAROT__MIXR28F(QUAROT__MIXR_BYTES)};
static const unsigned char quarot__mixr28t_terms[] = {QUAROT__MIXR28T(QUAROT__MIXR_BYTES)};
static const unsigned char quarot__mixr38_terms[] = {QUAROT__MIXR38(QUAROT__MIXR_BYTES)};
static const unsigned char quarot__mixr74_terms[] = {QUAROT__MIXR74(QUAROT__MIXR_BYTES)};
#undef QUAROT__MIXR_BYTES
#undef QUAROT__MIXR_BYTE
// mix_fixed 1..3: the order of the blocked mixing, split or not, the forward and transpose lists.
static const struct quarot__mixr_kind {
    int64_t K;
    int split;
    const unsigned char *fwd, *tr;
} quarot__mixr_kinds[4] = {{0, 0, NULL, NULL},
                           {28, 0, quarot__mixr28f_terms, quarot__mixr28t_terms},
                           {38, 1, quarot__mixr38_terms, quarot__mixr38_terms},   // A is symmetric
                           {74, 1, quarot__mixr74_terms, quarot__mixr74_terms}};
static const uint64_t* quarot__mix_pat_of(const quarot_hadamard_plan* p, int transpose);   // below
// The kernel whose lists equal the plan's mix_pat (b = 4) term by term, or 0.
static int quarot__mixr_match(const quarot_hadamard_plan* p) {
    const int64_t Km = p->mix_half ? p->K / 2 : p->K, E = 64 / 4, nb = (Km + 3) / 4, nw = (nb + E - 1) / E;
    int id, o;
    int64_t i, blk;
    if (p->mix_block != 4 || !p->mix_pat) return 0;
    for (id = 1; id < 4; ++id) {
        const struct quarot__mixr_kind* f = &quarot__mixr_kinds[id];
        int same = f->K == Km && f->split == (p->mix_half != NULL);
        for (o = 0; same && o < 2; ++o) {
            const unsigned char* t = o ? f->tr : f->fwd;
            const uint64_t* pat = quarot__mix_pat_of(p, o);
            for (i = 0; same && i < Km; ++i)
                for (blk = 0; same && blk < nb; ++blk)
                    same = ((pat[i * nw + blk / E] >> ((blk % E) * 4)) & 15) == t[blk * Km + i];
        }
        if (same) return id;
    }
    return 0;
}

// Plan: the core K and m from the hadamard module, H_K as bytes, and the mixing data for the SIMD
// kernels (mix_pat patterns when b > 1, float panels when b == 1). Everything else is per call.
QUAROT_API quarot_result quarot_hadamard_plan_init(quarot_hadamard_plan* p, int64_t n, const quarot_env* env) {
    quarot_result r;
    int64_t K, K16, K8, nb, nw, i, k, blk, t, Km;
    size_t kk, bytes;
    int o, b;
    const int8_t* hm;
    if (!p) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    if (env) p->env = *env;
    if (n <= 0) return QUAROT_ERR_INVALID_ARGUMENT;
    // n = K * 2^m as the hadamard module decomposes it (and builds H_n, which the tests compare with).
    r = quarot_hadamard_info_get(n, &p->info);
    if (r != QUAROT_OK) { memset(p, 0, sizeof *p); return r; }
    K = p->info.K;
    if (K < 1 || p->info.m < 0 || p->info.m > 62 || ((int64_t)1 << p->info.m) > n / K ||
        K * ((int64_t)1 << p->info.m) != n) {
        memset(p, 0, sizeof *p);
        return QUAROT_ERR_INTERNAL;
    }
    if (K > QUAROT_HADAMARD_PLAN_MAX_K) { memset(p, 0, sizeof *p); return QUAROT_ERR_UNSUPPORTED_SIZE; }
    p->n = n;
    p->K = K;
    p->m = p->info.m;
    p->mix_block = b = quarot__mix_block(K, (int64_t)1 << p->m);
    if (K == 1) return QUAROT_OK;
    // H_K as bytes (the _ref and f64 kernels), then what the SIMD mixing kernels read.
    if (!quarot__mul_size((size_t)K, (size_t)K, &kk)) { quarot_hadamard_plan_free(p); return QUAROT_ERR_OVERFLOW; }
    p->had_k = (int8_t*)quarot_env_alloc(&p->env, kk);
    if (!p->had_k) { quarot_hadamard_plan_free(p); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = quarot_hadamard_build_i8(K, p->had_k, &p->env);
    if (r != QUAROT_OK) { quarot_hadamard_plan_free(p); return r; }
    // A Paley II core with blocked mixing splits (declaration notes, step 3'): the blocked mixing
    // then runs on A = H_K[2r][2c] (order Km = K/2) over 2^(m+1) columns.
    hm = p->had_k;
    Km = K;
    if (b > 1 && p->info.construction == QUAROT_HADAMARD_PALEY2) {
        Km = K / 2;
        p->mix_half = (int8_t*)quarot_env_alloc(&p->env, (size_t)(Km * Km));
        if (!p->mix_half) { quarot_hadamard_plan_free(p); return QUAROT_ERR_OUT_OF_MEMORY; }
        for (i = 0; i < Km; ++i)
            for (k = 0; k < Km; ++k) p->mix_half[i * Km + k] = p->had_k[2 * i * K + 2 * k];
        hm = p->mix_half;
        p->mix_block = b = quarot__mix_block(Km, (int64_t)2 << p->m);
    }
    if (b > 1) {
        // mix_pat[o][i][blk / E] |= (pattern (bit t-1: c_o(k0+t, i) != g) | (g < 0) << (b-1)) <<
        // ((blk % E) * b), c_o from hm, of order Km (H_K, or A for the split mixing).
        const int64_t E = 64 / b;
        nb = (Km + b - 1) / b;
        K8 = (Km + 7) / 8 * 8;
        nw = (nb + E - 1) / E;
        bytes = (size_t)(2 * (K8 + 8) * nw) * sizeof(uint64_t);
        p->mix_pat = (uint64_t*)quarot_env_alloc(&p->env, bytes);
        if (!p->mix_pat) { quarot_hadamard_plan_free(p); return QUAROT_ERR_OUT_OF_MEMORY; }
        memset(p->mix_pat, 0, bytes);
        for (o = 0; o < 2; ++o) {
            for (i = 0; i < Km; ++i) {   // rows Km .. K8+7 (never stored) stay 0: entry 0, g = +1
                for (blk = 0; blk < nb; ++blk) {
                    const int64_t k0 = blk * b;
                    const int8_t g = o ? hm[i * Km + k0] : hm[k0 * Km + i];
                    uint64_t e = g < 0 ? (uint64_t)1 << (b - 1) : 0;
                    for (t = 1; t < b && k0 + t < Km; ++t)
                        if ((o ? hm[i * Km + k0 + t] : hm[(k0 + t) * Km + i]) != g) e |= (uint64_t)1 << (t - 1);
                    p->mix_pat[(o * (K8 + 8) + i) * nw + blk / E] |= e << ((blk % E) * b);
                }
            }
        }
        p->mix_fixed = quarot__mixr_match(p);
        return QUAROT_OK;
    }
    if (K > 2048) return QUAROT_OK;
    // b == 1: +-1.0f panels of 16 outputs (vectors across i).
    K16 = (K + 63) / 64 * 64;
    bytes = (size_t)(2 * K16 * K) * sizeof(float);
    p->mix_f32 = (float*)quarot_env_alloc(&p->env, bytes);
    if (!p->mix_f32) { quarot_hadamard_plan_free(p); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset(p->mix_f32, 0, bytes);
    for (k = 0; k < K; ++k) {
        for (i = 0; i < K; ++i) {
            const int64_t at = (i / 16) * 16 * K + k * 16 + (i % 16);   // panel i/16, row k, lane i%16
            p->mix_f32[at] = (float)p->had_k[k * K + i];                 // forward: c(k,i) = H[k][i]
            p->mix_f32[K16 * K + at] = (float)p->had_k[i * K + k];       // transpose: c(k,i) = H[i][k]
        }
    }
    return QUAROT_OK;
}

// Bytes of the b > 1 pattern tables: the kernels build 2^(b-1) entries (chains) of at most 64 floats
// per block, for a group of blocks of about QUAROT__MIXB_CACHE bytes at a time.
#define QUAROT__MIXB_CACHE 49152
static size_t quarot__mix_table_bytes(const quarot_hadamard_plan* p) {
    size_t per_block, all, group;
    const int64_t Km = p->mix_half ? p->K / 2 : p->K;   // the order the blocked mixing runs on
    if (p->mix_block <= 1) return 0;
    per_block = (size_t)64 * sizeof(float) << (p->mix_block - 1);
    all = (size_t)((Km + p->mix_block - 1) / p->mix_block) * per_block;
    group = per_block > QUAROT__MIXB_CACHE ? per_block : QUAROT__MIXB_CACHE;
    return all < group ? all : group;
}

QUAROT_API size_t quarot_hadamard_workspace_size(const quarot_hadamard_plan* p) {
    size_t tab;
    if (!p || p->K <= 1 || p->n <= 0) return 0;
    tab = quarot__mix_table_bytes(p);
    // z, and for the split mixing z2 beside it (f64: 2n doubles; f32 fits both in n doubles)
    return (size_t)p->n * sizeof(double) * (p->mix_half ? 2u : 1u) + 64 + (tab ? tab + 64 : 0);
}

// The pattern words of one orientation (declaration notes: [2][K8 + 8][nw] over the blocked mixing's
// order, K/2 for the split Paley II mixing).
static const uint64_t* quarot__mix_pat_of(const quarot_hadamard_plan* p, int transpose) {
    const int64_t Km = p->mix_half ? p->K / 2 : p->K, b = p->mix_block, nb = (Km + b - 1) / b;
    return p->mix_pat + (transpose ? ((Km + 7) / 8 * 8 + 8) * ((nb + 64 / b - 1) / (64 / b)) : 0);
}

// Validation shared by the f32 and f64 entry points; *work_out is the 64-byte aligned workspace.
// A plan that plan_init did not fill (zeroed, or freed) is an invalid argument.
static quarot_result quarot__apply_check(const quarot_hadamard_plan* p, const void* x, int64_t rows, int64_t stride,
                                         size_t elem, void* work, size_t work_size, void** work_out) {
    quarot_result r;
    size_t need;
    if (!p || p->n <= 0 || p->K < 1 || (p->K > 1 && !p->had_k) || p->mix_block < 1 ||
        p->mix_block > QUAROT__MIX_BMAX || (p->mix_block > 1 && !p->mix_pat))
        return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot__rows_check(x, p->n, rows, stride, elem);
    if (r != QUAROT_OK) return r;
    need = quarot_hadamard_workspace_size(p);
    *work_out = NULL;
    if (need > 0) {
        if (!work || work_size < need) return QUAROT_ERR_WORKSPACE;
        *work_out = (void*)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_hadamard_apply_f32(const quarot_hadamard_plan* p, const quarot_hadamard_apply_desc* d,
                                                   float* x, int64_t rows, int64_t stride,
                                                   void* work, size_t work_size) {
    quarot_hadamard_apply_desc dd;
    quarot__wht_row_fn row_fn;
    quarot__mix_fn mix_fn;
    quarot__mixb_fn mixb_fn;
    quarot__mixr_fn mixr_fn;
    quarot_result r;
    const float *pre, *post, *scale;
    float s;
    void* w;
    int64_t i, k, M;
    memset(&dd, 0, sizeof dd);
    if (d) dd = *d;
    r = quarot__apply_check(p, x, rows, stride, sizeof(float), work, work_size, &w);
    if (r != QUAROT_OK) return r;
    if (!dd.signs && dd.signs_f64) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot__isa_resolve(dd.isa, &dd.isa);
    if (r != QUAROT_OK) return r;
    row_fn = quarot__wht_row_select(dd.isa);
    mix_fn = quarot__mix_select(dd.isa);
    mixb_fn = quarot__mixb_select(dd.isa);
    mixr_fn = quarot__mixr_select(dd.isa, p->mix_fixed, dd.transpose, (p->mix_half ? 2 : 1) * ((int64_t)1 << p->m));
    // Forward: x*D*H/sqrt(n) (signs before the butterflies); transpose: x*H^T*D/sqrt(n) (after).
    // H_{2^m} is symmetric, so the transpose only changes the mixing coefficients c(k,i).
    pre = dd.transpose ? NULL : dd.signs;
    post = dd.transpose ? dd.signs : NULL;
    s = (float)(1.0 / sqrt((double)p->n));
    scale = dd.unnormalized ? NULL : &s;
    if (p->K == 1) {
        for (i = 0; i < rows; ++i) row_fn(x + i * stride, NULL, p->m, pre, post, scale);
        return QUAROT_OK;
    }
    // K > 1: z = fwht_M(x * pre) in the workspace (read straight from x), then x = mix_K(z) * post *
    // scale. Workspace layout: z at w (n floats, room for n doubles; n + 16K with the fixed register
    // kernels), the split mixing's pairs z2 from z + n, the blocked mixing tables after 2n floats.
    M = (int64_t)1 << p->m;
    for (i = 0; i < rows; ++i) {
        float* xr = x + i * stride;
        float* z = (float*)w;
        // (the fixed register kernels read rows of z, or of the split mixing's pairs, 16 floats apart
        // beyond their length: 2n floats of workspace hold them)
        const int64_t zs = mixr_fn && !p->mix_half ? M + QUAROT__MIXR_PAD : M;
        for (k = 0; k < p->K; ++k) row_fn(z + k * zs, xr + k * M, p->m, pre ? pre + k * M : NULL, NULL, NULL);
        // Mixing kernel by plan layout: split Paley II (z2 = z + n), blocked tables (b > 1), float
        // panels, or the scalar spec.
        if (mixr_fn) {   // the fixed register kernels (the split one pairs z into z2 first)
            mixr_fn(z, xr, p->mix_half ? 2 * M : M, p->mix_half ? z + p->n : NULL, post, scale);
        } else if (p->mix_half) {
            const int64_t Kh = p->K / 2, nb = (Kh + p->mix_block - 1) / p->mix_block;
            float* z2 = z + p->n;
            if (mixb_fn) {   // the kernel pairs z on the fly
                float* tab = (float*)(((uintptr_t)(z + p->n * 2) + 63) & ~(uintptr_t)63);   // after n doubles
                mixb_fn(NULL, xr, Kh, 2 * M, p->mix_block, quarot__mix_pat_of(p, dd.transpose), nb, tab, z, post,
                        scale);
            } else {
                quarot__mix_pair_f32(z, z2, Kh, M);
                quarot__mix_f32_ref(z2, xr, Kh, 2 * M, p->mix_half, dd.transpose, p->mix_block, NULL, NULL);
                quarot__mix_corr_f32(xr, z, Kh, M, post, scale);
            }
        } else if (mixb_fn && p->mix_block > 1) {
            const int64_t nb = (p->K + p->mix_block - 1) / p->mix_block;
            float* tab = (float*)(((uintptr_t)(z + p->n * 2) + 63) & ~(uintptr_t)63);   // after n doubles
            mixb_fn(z, xr, p->K, M, p->mix_block, quarot__mix_pat_of(p, dd.transpose), nb, tab, NULL, post,
                    scale);
        } else if (mix_fn && p->mix_f32) {
            const int64_t K16 = (p->K + 63) / 64 * 64;
            mix_fn(z, xr, p->K, M, p->mix_f32 + (dd.transpose ? K16 * p->K : 0), post, scale);
        } else {
            quarot__mix_f32_ref(z, xr, p->K, M, p->had_k, dd.transpose, p->mix_block, post, scale);
        }
    }
    return QUAROT_OK;
}

// The f64 path: the same specification in double; dd.isa REF runs the scalar _ref kernels, any other
// (compiled) ISA the f64 SIMD kernels of >>transform_isa, which give the same bits.
QUAROT_API quarot_result quarot_hadamard_apply_f64(const quarot_hadamard_plan* p, const quarot_hadamard_apply_desc* d,
                                                   double* x, int64_t rows, int64_t stride,
                                                   void* work, size_t work_size) {
    quarot_hadamard_apply_desc dd;
    quarot_result r;
    const double *pre = NULL, *post = NULL, *scale;
    const float *pre32 = NULL, *post32 = NULL;
    double s;
    void* w;
    int64_t i, k, M;
    void (*row)(double*, int, const double*, const float*, const double*, const float*, const double*);
    void (*mix)(const double*, double*, int64_t, int64_t, const int8_t*, int, int, const double*, const float*,
                const double*);
    memset(&dd, 0, sizeof dd);
    if (d) dd = *d;
    r = quarot__apply_check(p, x, rows, stride, sizeof(double), work, work_size, &w);
    if (r != QUAROT_OK) return r;
    r = quarot__isa_resolve(dd.isa, &dd.isa);
    if (r != QUAROT_OK) return r;
    quarot__f64_select(dd.isa, &row, &mix);
    // signs_f64 wins; otherwise the float signs are read exactly as doubles. The mixing uses the
    // same block size b as the f32 path, so f32 and f64 differ only by rounding.
    if (dd.transpose) { post = dd.signs_f64; post32 = dd.signs_f64 ? NULL : dd.signs; }
    else { pre = dd.signs_f64; pre32 = dd.signs_f64 ? NULL : dd.signs; }
    s = 1.0 / sqrt((double)p->n);
    scale = dd.unnormalized ? NULL : &s;
    if (p->K == 1) {
        for (i = 0; i < rows; ++i) row(x + i * stride, p->m, pre, pre32, post, post32, scale);
        return QUAROT_OK;
    }
    M = (int64_t)1 << p->m;
    for (i = 0; i < rows; ++i) {
        double* xr = x + i * stride;
        double* z = (double*)w;
        memcpy(z, xr, (size_t)p->n * sizeof(double));
        for (k = 0; k < p->K; ++k)
            row(z + k * M, p->m, pre ? pre + k * M : NULL, pre32 ? pre32 + k * M : NULL,
                                    NULL, NULL, NULL);
        if (p->mix_half) {   // split Paley II mixing (step 3'): z2 = z + n (the workspace holds 2n doubles)
            double* z2 = z + p->n;
            quarot__mix_pair_f64(z, z2, p->K / 2, M);
            mix(z2, xr, p->K / 2, 2 * M, p->mix_half, dd.transpose, p->mix_block, NULL, NULL, NULL);
            quarot__mix_corr_f64(xr, z, p->K / 2, M, post, post32, scale);
        } else {
            mix(z, xr, p->K, M, p->had_k, dd.transpose, p->mix_block, post, post32, scale);
        }
    }
    return QUAROT_OK;
}

QUAROT_API size_t quarot_hadamard_cols_workspace_size(const quarot_hadamard_plan* p) {
    // n rows of QUAROT__WHTC_COLS floats, the skew (quarot__whtc_skew: 16 floats times less than
    // n/2), the alignment
    if (!p || p->n <= 0 || p->K != 1 || p->n > (int64_t)(SIZE_MAX / (4 * (QUAROT__WHTC_COLS + 8)) - 64)) return 0;
    return ((size_t)p->n * (QUAROT__WHTC_COLS + 8) + 16) * sizeof(float) + 64;
}

QUAROT_API quarot_result quarot_hadamard_apply_cols_f32(const quarot_hadamard_plan* p,
                                                        const quarot_hadamard_apply_desc* d, float* x, int64_t cols,
                                                        int64_t ld, void* work, size_t work_size) {
    quarot_hadamard_apply_desc dd;
    quarot__whtc_fn fn;
    quarot_result r;
    const float *pre, *post, *scale;
    float s;
    float* buf = NULL;
    int64_t c0 = 0;
    int lanes = 0;
    memset(&dd, 0, sizeof dd);
    if (d) dd = *d;
    if (!p || p->n <= 0 || p->K < 1 || !x || cols < 0 || ld < cols || ld < 1) return QUAROT_ERR_INVALID_ARGUMENT;
    if (p->K != 1) return QUAROT_ERR_UNSUPPORTED_SIZE;
    if (ld > INT64_MAX / (int64_t)sizeof(float) / p->n) return QUAROT_ERR_OVERFLOW;   // n * ld floats addressable
    if (!dd.signs && dd.signs_f64) return QUAROT_ERR_INVALID_ARGUMENT;
    if (work) {
        if (work_size < quarot_hadamard_cols_workspace_size(p)) return QUAROT_ERR_WORKSPACE;
        buf = (float*)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    }
    r = quarot__isa_resolve(dd.isa, &dd.isa);
    if (r != QUAROT_OK) return r;
    if (cols == 0) return QUAROT_OK;
    pre = dd.transpose ? NULL : dd.signs;
    post = dd.transpose ? dd.signs : NULL;
    s = (float)(1.0 / sqrt((double)p->n));
    scale = dd.unnormalized ? NULL : &s;
    fn = quarot__whtc_select(dd.isa, &lanes);
    if (fn && p->m > 0)
        while (c0 + lanes <= cols) {   // blocks of QUAROT__WHTC_COLS columns, the last a multiple of the lanes
            const int64_t w = cols - c0 >= QUAROT__WHTC_COLS ? QUAROT__WHTC_COLS : (cols - c0) / lanes * lanes;
            fn(x + c0, ld, w, p->m, pre, post, scale, buf);
            c0 += w;
        }
    if (c0 < cols) quarot__whtc_f32_ref(x + c0, ld, cols - c0, p->m, pre, post, scale);
    return QUAROT_OK;
}

// >>transform_simd
// One generic kernel text, instantiated per ISA through a handful of vector macros (QUAROT__V, VLD, VST,
// VADD, VSUB, VMUL, VSET1, VINLANE, W = lanes). In-lane stages h = 1, 2, .., W/2 use one shuffle each:
//     partner p = swap(v, h);  r = (v with the lanes whose bit h is set negated) + p
// i.e. x[j] + x[j+h] in the low lane, (-x[j+h]) + x[j] == x[j] - x[j+h] in the high one (exact).
// Stages h >= W pair whole vectors; each radix-2^r pass does r stages on 2^r vectors held in registers.

// Butterfly and butterfly networks over named registers. A radix-2^r network on registers a0..a(2^r-1)
// (register index = the next r bits of the element index) is the recursive split of the stages:
// NET4 = two NET2 (stage 1) then the cross pairs (stage 2); the dataflow is exactly stage by stage.
// QUAROT__VSUB2 is the butterfly's subtraction; an ISA may define it as a fused multiply-add by -1:
// fnmadd(b, 1, a) = round(a - b*1) = round(a - b), one rounding of the same exact value, so it is
// bit-identical to the subtraction (signed zeros included) while using the FMA pipes, which on Zen 4
// run beside the FADD pipes. This is not FMA contraction: nothing is rounded in between.
#ifndef QUAROT__VSUB2
#define QUAROT__VSUB2(a, b) QUAROT__VSUB(a, b)
#endif
#define QUAROT__BF(a, b) { QUAROT__V t_ = (a); (a) = QUAROT__VADD(t_, (b)); (b) = QUAROT__VSUB2(t_, (b)); }
#define QUAROT__NET2(a0, a1) QUAROT__BF(a0, a1)
#define QUAROT__NET4(a0, a1, a2, a3) QUAROT__NET2(a0, a1) QUAROT__NET2(a2, a3) QUAROT__BF(a0, a2) QUAROT__BF(a1, a3)
#define QUAROT__NET8(a0, a1, a2, a3, a4, a5, a6, a7)                                   \
    QUAROT__NET4(a0, a1, a2, a3) QUAROT__NET4(a4, a5, a6, a7)                          \
    QUAROT__BF(a0, a4) QUAROT__BF(a1, a5) QUAROT__BF(a2, a6) QUAROT__BF(a3, a7)
#define QUAROT__NET16(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
    QUAROT__NET8(a0, a1, a2, a3, a4, a5, a6, a7) QUAROT__NET8(a8, a9, a10, a11, a12, a13, a14, a15) \
    QUAROT__BF(a0, a8) QUAROT__BF(a1, a9) QUAROT__BF(a2, a10) QUAROT__BF(a3, a11)       \
    QUAROT__BF(a4, a12) QUAROT__BF(a5, a13) QUAROT__BF(a6, a14) QUAROT__BF(a7, a15)
// Register name lists and repeaters: a block or pass of N vectors lives in v0 .. v(N-1), and
// QUAROT__REPN(X) applies a per-register step X(t) to each of them, so every access has a constant
// register name and the compiler keeps them all in registers.
#define QUAROT__V1 v0
#define QUAROT__V2 v0, v1
#define QUAROT__V4 v0, v1, v2, v3
#define QUAROT__V8 v0, v1, v2, v3, v4, v5, v6, v7
#define QUAROT__V16 v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15
#define QUAROT__REP1(X) X(0)
#define QUAROT__REP2(X) X(0) X(1)
#define QUAROT__REP4(X) X(0) X(1) X(2) X(3)
#define QUAROT__REP8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define QUAROT__REP16(X) QUAROT__REP8(X) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define QUAROT__EXPAND(m, args) m args
// Per register t of a block/pass at p (stride h floats): load (times pre-signs q), in-lane, store (post, scale).
#define QUAROT__LDQ(t) v##t = QUAROT__VLD(ps + t * h); if (q) v##t = QUAROT__VMUL(v##t, QUAROT__VLD(q + t * h));
#define QUAROT__INL(t) v##t = QUAROT__VINLANE(v##t);
#define QUAROT__STQ(t) { QUAROT__V o_ = v##t;                                           \
    if (q) o_ = QUAROT__VMUL(o_, QUAROT__VLD(q + t * h));                                \
    if (scale) o_ = QUAROT__VMUL(o_, sv);                                                \
    QUAROT__VST(p + t * h, o_); }
// One block or pass of 2^r registers: load, [in-lane], network, store.
#define QUAROT__RADIX(N, INLANE) { QUAROT__V QUAROT__V##N;                              \
    q = pre; QUAROT__REP##N(QUAROT__LDQ) INLANE(QUAROT__REP##N(QUAROT__INL))              \
    QUAROT__EXPAND(QUAROT__NET##N, (QUAROT__V##N)) q = post; QUAROT__REP##N(QUAROT__STQ) }
#define QUAROT__WITH(x) x      // blocks run the in-lane stages (they hold the lowest bits) ...
#define QUAROT__WITHOUT(x)     // ... passes over larger strides do not
#define QUAROT__NET1(a0)       // one register: no vector stage
// The two-block row (2 * 2^LOGR registers' worth, one bit more than a register block): block A
// (first half) is kept in variables a0.. (QUAROT__SV) while block B is loaded and transformed, and
// the two meet vector by vector in the last stage h = n/2 (QUAROT__FINR), so every element is loaded
// and stored once. With 32 registers (AVX-512) the compiler spills a few of A's vectors, which costs
// less than keeping A in memory (a store and a reload of the whole half).
#define QUAROT__SV(t) QUAROT__V a##t = v##t;
#define QUAROT__FINR(t) { QUAROT__V a_ = a##t; QUAROT__BF(a_, v##t)                           \
    if (post) { a_ = QUAROT__VMUL(a_, QUAROT__VLD(post + t * h));                              \
                v##t = QUAROT__VMUL(v##t, QUAROT__VLD(post + half + t * h)); }                  \
    if (scale) { a_ = QUAROT__VMUL(a_, sv); v##t = QUAROT__VMUL(v##t, sv); }                   \
    QUAROT__VST(x + t * h, a_); QUAROT__VST(x + half + t * h, v##t); }
#define QUAROT__TWOBLK(N) { QUAROT__V QUAROT__V##N;                                            \
    ps = src ? src : x; q = pre; QUAROT__REP##N(QUAROT__LDQ) QUAROT__REP##N(QUAROT__INL)         \
    QUAROT__EXPAND(QUAROT__NET##N, (QUAROT__V##N)) { QUAROT__REP##N(QUAROT__SV)                  \
    ps += half; q = pre ? pre + half : NULL;                                                     \
    QUAROT__REP##N(QUAROT__LDQ) QUAROT__REP##N(QUAROT__INL)                                      \
    QUAROT__EXPAND(QUAROT__NET##N, (QUAROT__V##N)) QUAROT__REP##N(QUAROT__FINR) } }

// The column kernels (quarot_hadamard_apply_cols_f32): one vector holds W columns of a row, so every
// stage pairs whole vectors. A pass runs stages h = 2^s .. 2^(s+r-1) on the 2^r rows row + t*2^s
// (t < 2^r) in registers: read from src (lds floats a row; times pre[row] on the first pass), written
// to dst (ldd a row; times post[row], then scale, on the last), the multiplies separate as in _ref.
#define QUAROT__CLD(t) v##t = QUAROT__VLD(ps + t * ss);                                        \
    if (pre) v##t = QUAROT__VMUL(v##t, QUAROT__VSET1(pq[t * hs]));
#define QUAROT__CST(t) { QUAROT__V o_ = v##t;                                                    \
    if (post) o_ = QUAROT__VMUL(o_, QUAROT__VSET1(pp[t * hs]));                                  \
    if (scale) o_ = QUAROT__VMUL(o_, sv);                                                         \
    QUAROT__VST(pd + t * sd, o_); }
#define QUAROT__CRADIX(N) { QUAROT__V QUAROT__V##N;                                             \
    QUAROT__REP##N(QUAROT__CLD) QUAROT__EXPAND(QUAROT__NET##N, (QUAROT__V##N)) QUAROT__REP##N(QUAROT__CST) }
// One pass at radix N: for each group (base, c), ask for the next group's lines of x (when ahead),
// then run the group on every vector of the w columns. src/dst rows start at so/do_ (below).
#define QUAROT__CPASS(N)                                                                         \
    for (base = 0; base < n; base += hs * N) {                                                   \
        for (c = 0; c < hs; ++c) {                                                               \
            const int64_t row = base + c;                                                        \
            const int64_t at = sbuf || dbuf ? row * w + 16 * quarot__whtc_skew(row, pl) : 0;    \
            const int64_t so = sbuf ? at : row * lds, do_ = dbuf ? at : row * ldd;               \
            const float* pq = pre ? pre + row : NULL;                                            \
            const float* pp = post ? post + row : NULL;                                          \
            if (ahead) {   /* the group after this one: c + 1, or the next base */               \
                const int64_t nxt = c + 1 < hs ? row + 1 : base + hs * N;                        \
                if (nxt < n)                                                                     \
                    for (t = 0; t < N; ++t) {                                                    \
                        const float* a_ = ahead + (nxt + t * hs) * lda;                          \
                        for (cv = 0; cv < w; cv += 16) QUAROT__PREFETCH(a_ + cv);                \
                    }                                                                            \
            }                                                                                    \
            for (cv = 0; cv < w; cv += QUAROT__W) {                                              \
                const float* ps = src + so + cv;                                                 \
                float* pd = dst + do_ + cv;                                                      \
                QUAROT__CRADIX(N)                                                                \
            }                                                                                    \
        }                                                                                        \
    }
// The driver splits the L stages into passes of at most LOGR stages, as even as can be (pass k:
// stages 2^s_k .. of r_k bits); the first pass reads x and writes buf, the last reads buf and writes
// x (one pass: x to x; buf NULL: every pass in x). A pass runs its row groups over all w columns
// (w/W vectors a row, w a multiple of W) before the next group, and asks for the next group's lines
// of x ahead (rows of x are far apart: no hardware prefetcher follows them). buf is skewed so that
// no pass's 2^r rows share a cache set (quarot__whtc_skew, quarot__whtc_stride).

// log2 of the chunk the row driver finishes in L1 before the passes over the whole row (16 KiB).
#define QUAROT__WHT_LCHUNK 12

// >>transform_mix
// The mixing kernels' building blocks, written over one ISA's vector macros: the b = 1 float-panel
// mixing (QUAROT__MA_*, QUAROT__MB_*), the blocked mixing's tables and output loops (QUAROT__MT_*,
// QUAROT__MR_*), and the fixed register mixing (QUAROT__MIXR_*: one function per kernel, expanded
// from its term lists in >>generated).

// Mixing kernels of one ISA. M >= W: vectors along j, RI outputs i at a time (RI = 4 or 8 through
// QUAROT__MIX_RI), two vectors of j (one when M == W); each k adds the broadcast coefficient times
// z[k][j..]. M < W: vectors along i (16 coefficients of a panel are contiguous), one j at a time,
// QUAROT__MIX_NB vectors (64 outputs, or 32 for 4 lanes) at a time, results scattered through a
// small buffer. Every output is one chain acc = c0*z0, acc = acc + ck*zk in k order, like _ref.
// Case M >= W, one output row r of the RI in flight: a##r##_v accumulates y[i0+r][j0 + v*W ..].
#define QUAROT__MA_INIT2(r) hv = QUAROT__VSET1(c[r]); a##r##_0 = QUAROT__VMUL(hv, z0); a##r##_1 = QUAROT__VMUL(hv, z1);
#define QUAROT__MA_STEP2(r) hv = QUAROT__VSET1(c[r]);                                           \
    a##r##_0 = QUAROT__VADD(a##r##_0, QUAROT__VMUL(hv, z0)); a##r##_1 = QUAROT__VADD(a##r##_1, QUAROT__VMUL(hv, z1));
#define QUAROT__MA_INIT1(r) a##r##_0 = QUAROT__VMUL(QUAROT__VSET1(c[r]), z0);
#define QUAROT__MA_STEP1(r) a##r##_0 = QUAROT__VADD(a##r##_0, QUAROT__VMUL(QUAROT__VSET1(c[r]), z0));
#define QUAROT__MA_DECL2(r) QUAROT__V a##r##_0, a##r##_1;
#define QUAROT__MA_DECL1(r) QUAROT__V a##r##_0;
// Final store of one vector at o (inside y): post-signs, then scale, as separate multiplies.
#define QUAROT__MA_OUT(o, acc) { QUAROT__V o_ = (acc);                                       \
    if (post) o_ = QUAROT__VMUL(o_, QUAROT__VLD(post + ((o) - y)));                             \
    if (scale) o_ = QUAROT__VMUL(o_, sv);                                                         \
    QUAROT__VST(o, o_); }
#define QUAROT__MA_STORE2(r) if (i0 + r < K) { float* o = y + (i0 + r) * M + j0;                 \
    QUAROT__MA_OUT(o, a##r##_0) QUAROT__MA_OUT(o + QUAROT__W, a##r##_1) }
#define QUAROT__MA_STORE1(r) if (i0 + r < K) { float* o = y + (i0 + r) * M + j0; QUAROT__MA_OUT(o, a##r##_0) }
// Case M < W: b##t accumulates outputs i0 + t*W .. +W-1 at column j; c##t points at their
// coefficients in the panel layout ([panel][k][16], 16 consecutive outputs per k).
#define QUAROT__MB_DECL(t) QUAROT__V b##t;                                                          \
    const float* c##t = c + ((t * QUAROT__W) >> 4) * 16 * K + ((t * QUAROT__W) & 15);
#define QUAROT__MB_INIT(t) b##t = QUAROT__VMUL(QUAROT__VLD(c##t), zb);
#define QUAROT__MB_STEP(t) b##t = QUAROT__VADD(b##t, QUAROT__VMUL(QUAROT__VLD(c##t + k * 16), zb));
#define QUAROT__MB_STORE(t) { int64_t l_; QUAROT__VST(buf, b##t);                               \
    for (l_ = 0; l_ < QUAROT__W && i0 + t * QUAROT__W + l_ < K; ++l_) {                            \
        const int64_t at = (i0 + t * QUAROT__W + l_) * M + j;                                     \
        float o_ = buf[l_];                                                                       \
        if (post) o_ = o_ * post[at];                                                             \
        if (scale) o_ = o_ * *scale;                                                              \
        y[at] = o_; } }


// Blocked mixing (mix_block 2 <= b <= 5, M >= 16 >= W), per chunk of NV = min(4, M/W) column vectors
// and per group of blocks whose tables fit in QUAROT__MIXB_CACHE bytes (an L1 share). First the
// tables, one vector column at a time in registers: for the L <= b rows of a block, T[p] = z[k0] +-
// z[k0+1] +- ... (bit t-1 of p set: minus z[k0+t]) for the 2^(L-1) patterns p, built level by level
// (level t adds and subtracts z[k0+t] on every entry so far), so each entry is the specification's
// chain; only patterns relative to the first coefficient are kept (no negated copies). An entry holds
// the chunk's NV*W columns. Then QUAROT__MIXB_RI outputs at a time accumulate g*T[p] for the (p, g)
// of mix_pat: acc = QUAROT__VSFIRST(g, T) = g*T exactly, then acc = QUAROT__VSACC(acc, g, T), either
// an FMA by g = +-1 or an add of T with its sign bit xor'ed: both round the exact acc + g*T once,
// i.e. the specification's acc + P with P = g*u, signed zeros included. The outputs' pattern words
// are loaded one output group ahead and the entry addresses come from shifts of them, so no table
// load waits for its address on a load just before it (such pairs run the lookups at a fraction of
// their rate). Running sums wait in y between groups: the same order as one long chain. With corr
// (split Paley II, W <= M/2) the tables read z2 = [z[2r] + z[2r+1] | z[2r] - z[2r+1]] straight from
// corr (each element once: every (chunk, block) once) and the last group's store first subtracts the
// doubled partner of z.
#define QUAROT__MIXB_LDZ(k, jj) QUAROT__VLD(z + (k) * M + (jj))
#define QUAROT__MIXB_LDC(k, jj) (((jj) & chalf)                                                   \
    ? QUAROT__VSUB(QUAROT__VLD(corr + (k) * M + (jj) - chalf), QUAROT__VLD(corr + (k) * M + (jj))) \
    : QUAROT__VADD(QUAROT__VLD(corr + (k) * M + (jj)), QUAROT__VLD(corr + (k) * M + (jj) + chalf)))
// Table levels in registers e0 .. e15 (level t: entries e .. e + 2^(t-1) - 1 get -z, the old ones +z).
#define QUAROT__MT_LV(d, s) e##d = QUAROT__VSUB(e##s, zt); e##s = QUAROT__VADD(e##s, zt);
#define QUAROT__MT_L1(LD) zt = LD(k0 + 1, jc); QUAROT__MT_LV(1, 0)
#define QUAROT__MT_L2(LD) zt = LD(k0 + 2, jc); QUAROT__MT_LV(2, 0) QUAROT__MT_LV(3, 1)
#define QUAROT__MT_L3(LD) zt = LD(k0 + 3, jc);                                                    \
    QUAROT__MT_LV(4, 0) QUAROT__MT_LV(5, 1) QUAROT__MT_LV(6, 2) QUAROT__MT_LV(7, 3)
#define QUAROT__MT_L4(LD) zt = LD(k0 + 4, jc);                                                    \
    QUAROT__MT_LV(8, 0) QUAROT__MT_LV(9, 1) QUAROT__MT_LV(10, 2) QUAROT__MT_LV(11, 3)                \
    QUAROT__MT_LV(12, 4) QUAROT__MT_LV(13, 5) QUAROT__MT_LV(14, 6) QUAROT__MT_LV(15, 7)
// The entries of one block for its L rows: one loop over the chunk's vectors per L (the switch on L
// stays outside the loop), only the registers that L needs.
#define QUAROT__MT_D1 QUAROT__V e0;
#define QUAROT__MT_D2 QUAROT__V e0, e1, zt;
#define QUAROT__MT_D4 QUAROT__V e0, e1, e2, e3, zt;
#define QUAROT__MT_D8 QUAROT__V e0, e1, e2, e3, e4, e5, e6, e7, zt;
#define QUAROT__MT_D16 QUAROT__V e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15, zt;
#define QUAROT__MT_CLOOP(D, LD, BODY)                                                            \
    for (c = 0; c < EW_; c += QUAROT__W) {                                                       \
        const int64_t jc = j0 + c;                                                               \
        D e0 = LD(k0, jc);                                                                       \
        BODY                                                                                     \
    }
#define QUAROT__MT_S(x) QUAROT__VST(T + x * EW_ + c, e##x);
#define QUAROT__MT_S1 QUAROT__MT_S(0)
#define QUAROT__MT_S2 QUAROT__MT_S1 QUAROT__MT_S(1)
#define QUAROT__MT_S4 QUAROT__MT_S2 QUAROT__MT_S(2) QUAROT__MT_S(3)
#define QUAROT__MT_S8 QUAROT__MT_S4 QUAROT__MT_S(4) QUAROT__MT_S(5) QUAROT__MT_S(6) QUAROT__MT_S(7)
#define QUAROT__MT_S16 QUAROT__MT_S8 QUAROT__MT_S(8) QUAROT__MT_S(9) QUAROT__MT_S(10) QUAROT__MT_S(11) \
    QUAROT__MT_S(12) QUAROT__MT_S(13) QUAROT__MT_S(14) QUAROT__MT_S(15)
#define QUAROT__NV1(X, r) X(r, 0)
#define QUAROT__NV2(X, r) X(r, 0) X(r, 1)
#define QUAROT__NV4(X, r) X(r, 0) X(r, 1) X(r, 2) X(r, 3)
#define QUAROT__MRV_DECL(r, v) QUAROT__V a##r##_##v;
#define QUAROT__MRV_LDT(r, v) a##r##_##v = QUAROT__VSFIRST(sg##r, QUAROT__VLD(t_ + v * QUAROT__W));
#define QUAROT__MRV_LDY(r, v) a##r##_##v = QUAROT__VLD(y_ + v * QUAROT__W);
#define QUAROT__MRV_ADD(r, v) a##r##_##v = QUAROT__VSACC(a##r##_##v, sg##r, QUAROT__VLD(t_ + v * QUAROT__W));
#define QUAROT__MRV_OUT(r, v) QUAROT__MA_OUT(o + v * QUAROT__W, a##r##_##v)
#define QUAROT__MRV_ST(r, v) QUAROT__VST(o + v * QUAROT__W, a##r##_##v);
#define QUAROT__MRV_CORR(r, v) { const QUAROT__V w_ = QUAROT__VLD(corr + (((o - y) + v * QUAROT__W) ^ chalf)); \
    a##r##_##v = QUAROT__VSUB(a##r##_##v, QUAROT__VADD(w_, w_)); }
// Per output r of a group: w##r the pattern word (the entry of the next block in its low b bits),
// nx##r the next group's word (rows up to K8 + 8 exist, zero past K).
#define QUAROT__MR_NX(r) uint64_t nx##r = pat[(int64_t)r * nwd + wi0] >> sh0;
#define QUAROT__MR_DECL(NV, r) NV(QUAROT__MRV_DECL, r)                                          \
    uint64_t w##r = nx##r; nx##r = pat[(i0 + QUAROT__MIXB_RI + r) * nwd + wi0] >> sh0;
#define QUAROT__MR_REFILL(r) w##r = pat[(i0 + r) * nwd + blk / E];
// Outputs past K (the last group when K is not a multiple of RI: the split Paley II mixing has K = q+1
// = 2 mod 4) are computed but never stored; their running sums start from row i0's, not past y.
#define QUAROT__MR_INIT(NV, r) if (g0 == 0) { const float* t_ = tab + (int64_t)(w##r & pm) * ewn; \
        const QUAROT__V sg##r = QUAROT__VSGNB((int)(w##r >> (b - 1)) & 1); w##r >>= b;           \
        NV(QUAROT__MRV_LDT, r) }                                                                 \
    else { const float* y_ = y + (i0 + r < K ? i0 + r : i0) * M + j0; NV(QUAROT__MRV_LDY, r) }
#define QUAROT__MR_STEP(NV, r) { const float* t_ = tb_ + (int64_t)(w##r & pm) * ewn;             \
    const QUAROT__V sg##r = QUAROT__VSGNB((int)(w##r >> (b - 1)) & 1); w##r >>= b;               \
    NV(QUAROT__MRV_ADD, r) }
#define QUAROT__MR_STORE(NV, r) if (i0 + r < K) { float* o = y + (i0 + r) * M + j0;                \
    if (g1 == nb) { if (corr) { NV(QUAROT__MRV_CORR, r) } NV(QUAROT__MRV_OUT, r) }               \
    else { NV(QUAROT__MRV_ST, r) } }
#define QUAROT__MR_DECL1(r) QUAROT__MR_DECL(QUAROT__NV1, r)
#define QUAROT__MR_DECL2(r) QUAROT__MR_DECL(QUAROT__NV2, r)
#define QUAROT__MR_DECL4(r) QUAROT__MR_DECL(QUAROT__NV4, r)
#define QUAROT__MR_INIT1(r) QUAROT__MR_INIT(QUAROT__NV1, r)
#define QUAROT__MR_INIT2(r) QUAROT__MR_INIT(QUAROT__NV2, r)
#define QUAROT__MR_INIT4(r) QUAROT__MR_INIT(QUAROT__NV4, r)
#define QUAROT__MR_STEP1(r) QUAROT__MR_STEP(QUAROT__NV1, r)
#define QUAROT__MR_STEP2(r) QUAROT__MR_STEP(QUAROT__NV2, r)
#define QUAROT__MR_STEP4(r) QUAROT__MR_STEP(QUAROT__NV4, r)
#define QUAROT__MR_STORE1(r) QUAROT__MR_STORE(QUAROT__NV1, r)
#define QUAROT__MR_STORE2(r) QUAROT__MR_STORE(QUAROT__NV2, r)
#define QUAROT__MR_STORE4(r) QUAROT__MR_STORE(QUAROT__NV4, r)
// The tables of blocks g0 .. g1-1 for N vectors per entry (a compile-time entry stride, so that the
// stores of one level use one base register): T = tab + (blk - g0) * 2^(b-1) entries of N*W floats.
#define QUAROT__MT_BUILD(N, LD)                                                                  \
    for (blk = g0, k0 = g0 * b; blk < g1; ++blk, k0 += b) {                                      \
        const int64_t EW_ = N * QUAROT__W, L = K - k0 < b ? K - k0 : b;                          \
        float* T = tab + ((blk - g0) << (b - 1)) * EW_;                                          \
        switch (L) {                                                                             \
            case 1: QUAROT__MT_CLOOP(QUAROT__MT_D1, LD, QUAROT__MT_S1) break;                    \
            case 2: QUAROT__MT_CLOOP(QUAROT__MT_D2, LD, QUAROT__MT_L1(LD) QUAROT__MT_S2) break;  \
            case 3: QUAROT__MT_CLOOP(QUAROT__MT_D4, LD, QUAROT__MT_L1(LD) QUAROT__MT_L2(LD) QUAROT__MT_S4) break; \
            case 4: QUAROT__MT_CLOOP(QUAROT__MT_D8, LD, QUAROT__MT_L1(LD) QUAROT__MT_L2(LD)      \
                                     QUAROT__MT_L3(LD) QUAROT__MT_S8) break;                     \
            default: QUAROT__MT_CLOOP(QUAROT__MT_D16, LD, QUAROT__MT_L1(LD) QUAROT__MT_L2(LD)    \
                                      QUAROT__MT_L3(LD) QUAROT__MT_L4(LD) QUAROT__MT_S16) break; \
        }                                                                                        \
    }
// The output loop over i for NV vectors per output (N = 1, 2, 4). tb_ walks the group's tables. When
// the group's blocks lie in one pattern word (always when there are at most E = 64 / b blocks) the
// loop over blocks has nothing else in it; otherwise lf counts the entries left in the words w##r
// (E per word) and a word is refilled when they run out. The compile-time entry stride ewn lets the
// table offsets be shifts.
#define QUAROT__MR_OUTPUTS(N) {                                                                  \
    const int64_t ewn = N * QUAROT__W, bstride = ewn << (b - 1);                                 \
    const int one_word = g0 % E + (g1 - g0) <= E;   /* the group's entries in one pattern word */ \
    QUAROT__MIXB_REP(QUAROT__MR_NX)                                                              \
    for (i0 = 0; i0 < K; i0 += QUAROT__MIXB_RI) {                                                \
        const float* tb_ = tab;                                                                  \
        QUAROT__MIXB_REP(QUAROT__MR_DECL##N)                                                     \
        QUAROT__MIXB_REP(QUAROT__MR_INIT##N)                                                     \
        blk = g0 == 0 ? 1 : g0;                                                                  \
        tb_ += (blk - g0) * bstride;                                                             \
        if (one_word) {                                                                          \
            for (; blk < g1; ++blk, tb_ += bstride) { QUAROT__MIXB_REP(QUAROT__MR_STEP##N) }     \
        } else {                                                                                 \
            int64_t lf = E - g0 % E - (g0 == 0);                                                 \
            for (; blk < g1; ++blk, tb_ += bstride) {                                            \
                if (lf == 0) { QUAROT__MIXB_REP(QUAROT__MR_REFILL) lf = E; }                     \
                --lf;                                                                            \
                QUAROT__MIXB_REP(QUAROT__MR_STEP##N)                                             \
            }                                                                                    \
        }                                                                                        \
        QUAROT__MIXB_REP(QUAROT__MR_STORE##N)                                                    \
    } }

// One group for N vectors per entry: its tables (from z, or from the pairs of corr), then the outputs.
#define QUAROT__MIXB_GROUP(N) {                                                                  \
    if (corr) { QUAROT__MT_BUILD(N, QUAROT__MIXB_LDC) }                                          \
    else { QUAROT__MT_BUILD(N, QUAROT__MIXB_LDZ) }                                               \
    QUAROT__MR_OUTPUTS(N) }

// The fixed register mixing (plan->mix_fixed, b = 4; the term lists before quarot_hadamard_plan_init),
// for AVX-512 and AVX2. Per vector column, each pass of a few outputs rebuilds every block's 8
// entries in registers (the chains of step 3, level by level as QUAROT__MT_L*) and adds g*T[p] into
// its outputs with the compiled-in (p, g): the tables never go through memory. The passes split the
// outputs so that the running sums, the entries and the constants fit the registers (AVX-512: 14-19
// sums of 32 registers, AVX2: 9-10 of 16); rebuilding the tables once a pass costs adds, while the
// sums run as FMAs by +-1 (QUAROT__MIXR_ACCP/M), so the add and the FMA pipes share the work. Bits:
// every entry is the specification's chain and every output its sum in block order (first term g*T,
// exact, then one rounding of acc + g*T a block), as in the table kernel. Compiler notes (GCC 12,
// clang 14): QUAROT__MIXR_FENCE makes block g+1's loads wait for block g's last sum, or GCC hoists
// the builds of all blocks (56 entries live for 28) and spills; QUAROT__MIXR_OPAQUE
// hides that `one` is 1.0, or clang turns the FMAs back into adds (all on the add pipes); and the
// output stores have no branches (the split correction is compile-time, the scale is a multiply by
// 1 when absent, exact, and the post-signs come from a vector of ones when absent), or clang spills
// across them (slower than the table kernel). Each ISA defines QUAROT__MIXR_REG
// (the asm constraint of its vectors), QUAROT__MIXR_NEG, QUAROT__MIXR_ACCP and QUAROT__MIXR_ACCM.
#if defined(__GNUC__)
#define QUAROT__MIXR_FENCE(ptr, v) __asm__("" : "+r"(ptr) : QUAROT__MIXR_REG(v))
#define QUAROT__MIXR_OPAQUE(v) __asm__("" : "+" QUAROT__MIXR_REG(v))
#else
#define QUAROT__MIXR_FENCE(ptr, v) (void)0
#define QUAROT__MIXR_OPAQUE(v) (void)0
#endif
// A block's entries for its L rows: the table kernel's levels QUAROT__MT_L*, row k0 + t read at zb
// (the column argument is j, already in zb).
#define QUAROT__MIXR_LDZ(k, jj) QUAROT__VLD(zb + ((k) - k0) * ldz)
#define QUAROT__MIXR_L1 e0 = QUAROT__VLD(zb);
#define QUAROT__MIXR_L2 QUAROT__MIXR_L1 QUAROT__MT_L1(QUAROT__MIXR_LDZ)
#define QUAROT__MIXR_L3 QUAROT__MIXR_L2 QUAROT__MT_L2(QUAROT__MIXR_LDZ)
#define QUAROT__MIXR_L4 QUAROT__MIXR_L3 QUAROT__MT_L3(QUAROT__MIXR_LDZ)
// First term g*T (exact), then round(acc + g*T).
#define QUAROT__MIXR_FP(a, e) a = e;
#define QUAROT__MIXR_FM(a, e) a = QUAROT__MIXR_NEG(e);
#define QUAROT__MIXR_AP(a, e) a = QUAROT__MIXR_ACCP(a, e);
#define QUAROT__MIXR_AM(a, e) a = QUAROT__MIXR_ACCM(a, e);
// Output i of the pass [lo_, hi_) at the first (F), a middle (A) and the last block (Z: then stored,
// after the split mixing's correction, post-signs and scale, as QUAROT__MR_STORE).
#define QUAROT__MIXR_XF(i, S, p) if (i >= lo_ && i < hi_) { QUAROT__MIXR_F##S(a##i, e##p) dep = a##i; }
#define QUAROT__MIXR_XA(i, S, p) if (i >= lo_ && i < hi_) { QUAROT__MIXR_A##S(a##i, e##p) dep = a##i; }
#define QUAROT__MIXR_XZ(i, S, p) if (i >= lo_ && i < hi_) { QUAROT__MIXR_A##S(a##i, e##p) QUAROT__MIXR_OUT(i) }
#define QUAROT__MIXR_OUT(i) { QUAROT__V o_ = a##i; const int64_t at_ = (int64_t)(i) * M + j;             \
    if (split_) { const QUAROT__V w_ = QUAROT__VLD(z + (at_ ^ chalf)); o_ = QUAROT__VSUB(o_, QUAROT__VADD(w_, w_)); } \
    o_ = QUAROT__VMUL(o_, QUAROT__VLD(pv + (at_ & pmask)));                                             \
    QUAROT__VST(y + at_, QUAROT__VMUL(o_, sv)); }
#define QUAROT__MIXR_BLK(ID, g, L, kind) { const int64_t k0 = 4 * (g); const float* zb = zz + k0 * ldz + j; \
    QUAROT__MIXR_FENCE(zb, dep); QUAROT__MIXR_L##L QUAROT__MIXR##ID##_B##g(QUAROT__MIXR_X##kind) }
#define QUAROT__MIXR_PASS(ID, lo, hi) { const int64_t lo_ = lo, hi_ = hi; QUAROT__MIXR##ID(QUAROT__MIXR_BLK) }
#define QUAROT__MIXR_DECL(i, S, p) QUAROT__V a##i;
// One kernel: y [K][M] from z [K][ldz], ldz = M + QUAROT__MIXR_PAD; SPLIT: z is the split mixing's
// z [K][M] before the pairing, z2 [K][ldz] receives the pairs first (QUAROT__PAIR_BODY) and the
// outputs take the correction from z.
#define QUAROT__MIXR_FN(ID, isa, KH, SPLIT, PASSES)                                                  \
static void quarot__mixr##ID##_##isa(const float* z, float* y, int64_t M, float* z2, const float* post, \
                                     const float* scale) {                                           \
    static const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};                   \
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);                                       \
    const float* pv = post ? post : ones;   /* no post-signs: every output times ones */             \
    const int64_t chalf = M / 2, pmask = post ? -1 : 0, ldz = M + QUAROT__MIXR_PAD;                  \
    const int split_ = SPLIT;                                                                        \
    const float* zz = split_ ? z2 : z;                                                               \
    QUAROT__V one = QUAROT__VSET1(1.0f);                                                             \
    int64_t j, r;                                                                                    \
    QUAROT__MIXR_OPAQUE(one);                                                                        \
    for (r = 0; split_ && r < KH; ++r)   /* z2[r] = [z[2r] + z[2r+1] | z[2r] - z[2r+1]] */          \
        for (j = 0; j < chalf; j += QUAROT__W) {                                                     \
            const QUAROT__V u = QUAROT__VLD(z + r * M + j), v = QUAROT__VLD(z + r * M + chalf + j);  \
            QUAROT__VST(z2 + r * ldz + j, QUAROT__VADD(u, v));                                       \
            QUAROT__VST(z2 + r * ldz + chalf + j, QUAROT__VSUB(u, v));                               \
        }                                                                                            \
    for (j = 0; j < M; j += QUAROT__W) {                                                             \
        QUAROT__V e0, e1, e2, e3, e4, e5, e6, e7, zt, dep = one;                                      \
        QUAROT__MIXR##ID##_B0(QUAROT__MIXR_DECL)                                                     \
        PASSES                                                                                       \
    }                                                                                                \
}

// >>transform_isa
// Each ISA's vector macros and in-lane stages, the kernels of >>transform_body and the register mixing
// compiled for it, and the per-call selection among the ISAs compiled in; then the f64 kernels (one
// vector width per build, bit-identical to the f64 _ref).

// ---- Instantiations. Each ISA defines the vector macros, its in-lane stages (one shuffle, one
// xor and one add per stage, see the section notes), the block size LOGR (register budget) and
// the mixing blocking (RI outputs x vectors in flight), compiles the kernels of >>transform_body
// for itself (QUAROT__ISA names it), undefines. ----

// ---- SSE2: 4 lanes, 8-register blocks (16 xmm registers) ----
#if defined(QUAROT__HAVE_SSE2)
static inline __m128 quarot__inlane_sse2(__m128 v) {
    const __m128 n1 = _mm_castsi128_ps(_mm_set_epi32(INT_MIN, 0, INT_MIN, 0));
    const __m128 n2 = _mm_castsi128_ps(_mm_set_epi32(INT_MIN, INT_MIN, 0, 0));
    v = _mm_add_ps(_mm_xor_ps(v, n1), _mm_shuffle_ps(v, v, 0xB1));   // h = 1: lanes [1,0,3,2]
    v = _mm_add_ps(_mm_xor_ps(v, n2), _mm_shuffle_ps(v, v, 0x4E));   // h = 2: lanes [2,3,0,1]
    return v;
}
#define QUAROT__V __m128
#define QUAROT__W 4
#define QUAROT__LOGW 2
#define QUAROT__LOGR 3
#define QUAROT__VLD(p) _mm_loadu_ps(p)
#define QUAROT__VST(p, v) _mm_storeu_ps(p, v)
#define QUAROT__VADD(a, b) _mm_add_ps(a, b)
#define QUAROT__VSUB(a, b) _mm_sub_ps(a, b)
#define QUAROT__VMUL(a, b) _mm_mul_ps(a, b)
#define QUAROT__VSET1(s) _mm_set1_ps(s)
#define QUAROT__VINLANE(v) quarot__inlane_sse2(v)
#define QUAROT__MIX_RI 4
#define QUAROT__MIX_REP QUAROT__REP4
#define QUAROT__MIX_NB 8
#define QUAROT__MIX_BREP QUAROT__REP8
#define QUAROT__MIXB_RI 2
#define QUAROT__MIXB_REP QUAROT__REP2
#define QUAROT__VSGNB(s) _mm_castsi128_ps(_mm_set1_epi32(-(s) & INT_MIN))   /* g = -1: the sign bit alone */
#define QUAROT__VSFIRST(g, t) _mm_xor_ps(t, g)
#define QUAROT__VSACC(a, g, t) QUAROT__VADD(a, _mm_xor_ps(t, g))
#define QUAROT__ISA sse2
#define QUAROT__TEMPLATE QUAROT__TEMPLATE_TRANSFORM
#include QUAROT_HEADER_FILE   // >>transform_body
#undef QUAROT__TEMPLATE
#undef QUAROT__ISA
#undef QUAROT__VSGNB
#undef QUAROT__VSFIRST
#undef QUAROT__VSACC
#undef QUAROT__MIXB_RI
#undef QUAROT__MIXB_REP
#undef QUAROT__V
#undef QUAROT__W
#undef QUAROT__LOGW
#undef QUAROT__LOGR
#undef QUAROT__VLD
#undef QUAROT__VST
#undef QUAROT__VADD
#undef QUAROT__VSUB
#undef QUAROT__VMUL
#undef QUAROT__VSET1
#undef QUAROT__VINLANE
#undef QUAROT__MIX_RI
#undef QUAROT__MIX_REP
#undef QUAROT__MIX_NB
#undef QUAROT__MIX_BREP
#endif

// ---- AVX2: 8 lanes, 8-register blocks (16 ymm registers) ----
#if defined(QUAROT__HAVE_AVX2)
static inline __m256 quarot__inlane_avx2(__m256 v) {
    const __m256 n1 = _mm256_castsi256_ps(_mm256_set_epi32(INT_MIN, 0, INT_MIN, 0, INT_MIN, 0, INT_MIN, 0));
    const __m256 n2 = _mm256_castsi256_ps(_mm256_set_epi32(INT_MIN, INT_MIN, 0, 0, INT_MIN, INT_MIN, 0, 0));
    const __m256 n4 = _mm256_castsi256_ps(_mm256_set_epi32(INT_MIN, INT_MIN, INT_MIN, INT_MIN, 0, 0, 0, 0));
    v = _mm256_add_ps(_mm256_xor_ps(v, n1), _mm256_permute_ps(v, 0xB1));            // h = 1
    v = _mm256_add_ps(_mm256_xor_ps(v, n2), _mm256_permute_ps(v, 0x4E));            // h = 2
    v = _mm256_add_ps(_mm256_xor_ps(v, n4), _mm256_permute2f128_ps(v, v, 0x01));    // h = 4
    return v;
}
#define QUAROT__V __m256
#define QUAROT__W 8
#define QUAROT__LOGW 3
#define QUAROT__LOGR 4
#define QUAROT__VLD(p) _mm256_loadu_ps(p)
#define QUAROT__VST(p, v) _mm256_storeu_ps(p, v)
#define QUAROT__VADD(a, b) _mm256_add_ps(a, b)
#define QUAROT__VSUB(a, b) _mm256_sub_ps(a, b)
#define QUAROT__VMUL(a, b) _mm256_mul_ps(a, b)
#define QUAROT__VSET1(s) _mm256_set1_ps(s)
#define QUAROT__VINLANE(v) quarot__inlane_avx2(v)
#define QUAROT__MIX_RI 4
#define QUAROT__MIX_REP QUAROT__REP4
#define QUAROT__MIX_NB 8
#define QUAROT__MIX_BREP QUAROT__REP8
#define QUAROT__MIXB_RI 2
#define QUAROT__MIXB_REP QUAROT__REP2
#define QUAROT__VSGNB(s) _mm256_castsi256_ps(_mm256_set1_epi32(-(s) & INT_MIN))   /* g = -1: the sign bit alone */
#define QUAROT__VSFIRST(g, t) _mm256_xor_ps(t, g)
#define QUAROT__VSACC(a, g, t) QUAROT__VADD(a, _mm256_xor_ps(t, g))
#define QUAROT__ISA avx2
#define QUAROT__TEMPLATE QUAROT__TEMPLATE_TRANSFORM
#include QUAROT_HEADER_FILE   // >>transform_body
#undef QUAROT__TEMPLATE
#undef QUAROT__ISA
#define QUAROT__MIXR_REG(v) "x"(v)
#define QUAROT__MIXR_NEG(e) _mm256_xor_ps(e, _mm256_set1_ps(-0.0f))    /* exact */
#if defined(__FMA__)
#define QUAROT__MIXR_ACCP(a, e) _mm256_fmadd_ps(e, one, a)
#define QUAROT__MIXR_ACCM(a, e) _mm256_fnmadd_ps(e, one, a)
#else
#define QUAROT__MIXR_ACCP(a, e) _mm256_add_ps(a, e)
#define QUAROT__MIXR_ACCM(a, e) _mm256_sub_ps(a, e)
#endif
QUAROT__MIXR_FN(28F, avx2, 28, 0, QUAROT__MIXR_PASS(28F, 0, 10) QUAROT__MIXR_PASS(28F, 10, 19)
                                  QUAROT__MIXR_PASS(28F, 19, 28))
QUAROT__MIXR_FN(28T, avx2, 28, 0, QUAROT__MIXR_PASS(28T, 0, 10) QUAROT__MIXR_PASS(28T, 10, 19)
                                  QUAROT__MIXR_PASS(28T, 19, 28))
QUAROT__MIXR_FN(38, avx2, 38, 1, QUAROT__MIXR_PASS(38, 0, 10) QUAROT__MIXR_PASS(38, 10, 20)
                                 QUAROT__MIXR_PASS(38, 20, 29) QUAROT__MIXR_PASS(38, 29, 38))
QUAROT__MIXR_FN(74, avx2, 74, 1, QUAROT__MIXR_PASS(74, 0, 10) QUAROT__MIXR_PASS(74, 10, 20)
                                 QUAROT__MIXR_PASS(74, 20, 30) QUAROT__MIXR_PASS(74, 30, 39)
                                 QUAROT__MIXR_PASS(74, 39, 48) QUAROT__MIXR_PASS(74, 48, 57)
                                 QUAROT__MIXR_PASS(74, 57, 66) QUAROT__MIXR_PASS(74, 66, 74))
#undef QUAROT__MIXR_REG
#undef QUAROT__MIXR_NEG
#undef QUAROT__MIXR_ACCP
#undef QUAROT__MIXR_ACCM
#undef QUAROT__VSGNB
#undef QUAROT__VSFIRST
#undef QUAROT__VSACC
#undef QUAROT__MIXB_RI
#undef QUAROT__MIXB_REP
#undef QUAROT__V
#undef QUAROT__W
#undef QUAROT__LOGW
#undef QUAROT__LOGR
#undef QUAROT__VLD
#undef QUAROT__VST
#undef QUAROT__VADD
#undef QUAROT__VSUB
#undef QUAROT__VMUL
#undef QUAROT__VSET1
#undef QUAROT__VINLANE
#undef QUAROT__MIX_RI
#undef QUAROT__MIX_REP
#undef QUAROT__MIX_NB
#undef QUAROT__MIX_BREP
#endif

// ---- AVX-512 (AVX512F only): 16 lanes, 16-register blocks (32 zmm registers) ----
#if defined(QUAROT__HAVE_AVX512)
static inline __m512 quarot__inlane_avx512(__m512 v) {
    const int s = INT_MIN;
    const __m512i n1 = _mm512_set_epi32(s, 0, s, 0, s, 0, s, 0, s, 0, s, 0, s, 0, s, 0);
    const __m512i n2 = _mm512_set_epi32(s, s, 0, 0, s, s, 0, 0, s, s, 0, 0, s, s, 0, 0);
    const __m512i n4 = _mm512_set_epi32(s, s, s, s, 0, 0, 0, 0, s, s, s, s, 0, 0, 0, 0);
    const __m512i n8 = _mm512_set_epi32(s, s, s, s, s, s, s, s, 0, 0, 0, 0, 0, 0, 0, 0);
    // The masked forms with an all-ones mask are the plain instructions; unlike _mm512_permute_ps
    // they do not read _mm512_undefined_ps(), which g++ -O1 reports as maybe-uninitialized.
    const __mmask16 all = (__mmask16)0xFFFF;
    // Each in-lane stage is v*s + p with s = +-1 per lane (the sign mask or'ed into 1.0): the product
    // is exact, so the FMA rounds p +- v once, exactly as the add of the negated lane did.
    const __m512 s1 = _mm512_castsi512_ps(_mm512_or_si512(n1, _mm512_castps_si512(_mm512_set1_ps(1.0f))));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_or_si512(n2, _mm512_castps_si512(_mm512_set1_ps(1.0f))));
    const __m512 s4 = _mm512_castsi512_ps(_mm512_or_si512(n4, _mm512_castps_si512(_mm512_set1_ps(1.0f))));
    const __m512 s8 = _mm512_castsi512_ps(_mm512_or_si512(n8, _mm512_castps_si512(_mm512_set1_ps(1.0f))));
    v = _mm512_fmadd_ps(v, s1, _mm512_mask_permute_ps(v, all, v, 0xB1));    // h = 1
    v = _mm512_fmadd_ps(v, s2, _mm512_mask_permute_ps(v, all, v, 0x4E));    // h = 2
    v = _mm512_fmadd_ps(v, s4, _mm512_mask_shuffle_f32x4(v, all, v, v, 0xB1));  // h = 4
    v = _mm512_fmadd_ps(v, s8, _mm512_mask_shuffle_f32x4(v, all, v, v, 0x4E));  // h = 8
    return v;
}
#define QUAROT__V __m512
#define QUAROT__W 16
#define QUAROT__LOGW 4
#define QUAROT__LOGR 4
#define QUAROT__VLD(p) _mm512_loadu_ps(p)
#define QUAROT__VST(p, v) _mm512_storeu_ps(p, v)
#define QUAROT__VADD(a, b) _mm512_add_ps(a, b)
#define QUAROT__VSUB(a, b) _mm512_sub_ps(a, b)
#define QUAROT__VMUL(a, b) _mm512_mul_ps(a, b)
#define QUAROT__VSET1(s) _mm512_set1_ps(s)
#define QUAROT__VINLANE(v) quarot__inlane_avx512(v)
#define QUAROT__MIX_RI 8
#define QUAROT__MIX_REP QUAROT__REP8
#define QUAROT__MIX_NB 4
#define QUAROT__MIX_BREP QUAROT__REP4
#define QUAROT__MIXB_RI 2
#define QUAROT__MIXB_REP QUAROT__REP2
#define QUAROT__VSGNB(s) _mm512_castsi512_ps(_mm512_set1_epi32(0x3f800000 | (-(s) & INT_MIN)))   /* g = +-1.0f */
#define QUAROT__VSFIRST(g, t) _mm512_mul_ps(g, t)                             /* exact */
#define QUAROT__VSACC(a, g, t) _mm512_fmadd_ps(g, t, a)                       /* round(a + g*t) */
#undef QUAROT__VSUB2
#define QUAROT__VSUB2(a, b) _mm512_fnmadd_ps(b, _mm512_set1_ps(1.0f), a)   // = a - b exactly (see QUAROT__BF)
#define QUAROT__ISA avx512
#define QUAROT__TEMPLATE QUAROT__TEMPLATE_TRANSFORM
#include QUAROT_HEADER_FILE   // >>transform_body
#undef QUAROT__TEMPLATE
#undef QUAROT__ISA
#undef QUAROT__VSUB2
#define QUAROT__VSUB2(a, b) QUAROT__VSUB(a, b)
#define QUAROT__MIXR_REG(v) "v"(v)
#define QUAROT__MIXR_NEG(e) _mm512_mul_ps(e, _mm512_set1_ps(-1.0f))   /* exact */
#define QUAROT__MIXR_ACCP(a, e) _mm512_fmadd_ps(e, one, a)
#define QUAROT__MIXR_ACCM(a, e) _mm512_fnmadd_ps(e, one, a)
QUAROT__MIXR_FN(28F, avx512, 28, 0, QUAROT__MIXR_PASS(28F, 0, 14) QUAROT__MIXR_PASS(28F, 14, 28))
QUAROT__MIXR_FN(28T, avx512, 28, 0, QUAROT__MIXR_PASS(28T, 0, 14) QUAROT__MIXR_PASS(28T, 14, 28))
QUAROT__MIXR_FN(38, avx512, 38, 1, QUAROT__MIXR_PASS(38, 0, 19) QUAROT__MIXR_PASS(38, 19, 38))
QUAROT__MIXR_FN(74, avx512, 74, 1, QUAROT__MIXR_PASS(74, 0, 19) QUAROT__MIXR_PASS(74, 19, 38)
                                   QUAROT__MIXR_PASS(74, 38, 56) QUAROT__MIXR_PASS(74, 56, 74))
#undef QUAROT__MIXR_REG
#undef QUAROT__MIXR_NEG
#undef QUAROT__MIXR_ACCP
#undef QUAROT__MIXR_ACCM
#undef QUAROT__VSGNB
#undef QUAROT__VSFIRST
#undef QUAROT__VSACC
#undef QUAROT__MIXB_RI
#undef QUAROT__MIXB_REP
#undef QUAROT__V
#undef QUAROT__W
#undef QUAROT__LOGW
#undef QUAROT__LOGR
#undef QUAROT__VLD
#undef QUAROT__VST
#undef QUAROT__VADD
#undef QUAROT__VSUB
#undef QUAROT__VMUL
#undef QUAROT__VSET1
#undef QUAROT__VINLANE
#undef QUAROT__MIX_RI
#undef QUAROT__MIX_REP
#undef QUAROT__MIX_NB
#undef QUAROT__MIX_BREP
#endif

// ---- NEON (aarch64): 4 lanes, 16-register blocks (32 q registers) ----
#if defined(QUAROT__HAVE_NEON)
static inline float32x4_t quarot__inlane_neon(float32x4_t v) {
    static const uint32_t n1[4] = {0u, 0x80000000u, 0u, 0x80000000u};
    static const uint32_t n2[4] = {0u, 0u, 0x80000000u, 0x80000000u};
    v = vaddq_f32(vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(v), vld1q_u32(n1))), vrev64q_f32(v));
    v = vaddq_f32(vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(v), vld1q_u32(n2))), vextq_f32(v, v, 2));
    return v;
}
#define QUAROT__V float32x4_t
#define QUAROT__W 4
#define QUAROT__LOGW 2
#define QUAROT__LOGR 4
#define QUAROT__VLD(p) vld1q_f32(p)
#define QUAROT__VST(p, v) vst1q_f32(p, v)
#define QUAROT__VADD(a, b) vaddq_f32(a, b)
#define QUAROT__VSUB(a, b) vsubq_f32(a, b)
#define QUAROT__VMUL(a, b) vmulq_f32(a, b)
#define QUAROT__VSET1(s) vdupq_n_f32(s)
#define QUAROT__VINLANE(v) quarot__inlane_neon(v)
#define QUAROT__MIX_RI 8
#define QUAROT__MIX_REP QUAROT__REP8
#define QUAROT__MIX_NB 8
#define QUAROT__MIX_BREP QUAROT__REP8
#define QUAROT__MIXB_RI 2
#define QUAROT__MIXB_REP QUAROT__REP2
#define QUAROT__VSGNB(s) vreinterpretq_f32_s32(vdupq_n_s32(-(s) & INT_MIN))      /* g = -1: the sign bit alone */
#define QUAROT__VSFIRST(g, t) vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(t), vreinterpretq_u32_f32(g)))
#define QUAROT__VSACC(a, g, t) vaddq_f32(a, QUAROT__VSFIRST(g, t))
#define QUAROT__ISA neon
#define QUAROT__TEMPLATE QUAROT__TEMPLATE_TRANSFORM
#include QUAROT_HEADER_FILE   // >>transform_body
#undef QUAROT__TEMPLATE
#undef QUAROT__ISA
#undef QUAROT__VSGNB
#undef QUAROT__VSFIRST
#undef QUAROT__VSACC
#undef QUAROT__MIXB_RI
#undef QUAROT__MIXB_REP
#undef QUAROT__V
#undef QUAROT__W
#undef QUAROT__LOGW
#undef QUAROT__LOGR
#undef QUAROT__VLD
#undef QUAROT__VST
#undef QUAROT__VADD
#undef QUAROT__VSUB
#undef QUAROT__VMUL
#undef QUAROT__VSET1
#undef QUAROT__VINLANE
#undef QUAROT__MIX_RI
#undef QUAROT__MIX_REP
#undef QUAROT__MIX_NB
#undef QUAROT__MIX_BREP
#endif

// Per-call selection (isa already resolved by quarot__isa_resolve): the kernels compiled in for it.
static quarot__wht_row_fn quarot__wht_row_select(quarot_isa isa) {
    switch (isa) {
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2: return quarot__wht_row_f32_sse2;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2: return quarot__wht_row_f32_avx2;
#endif
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512: return quarot__wht_row_f32_avx512;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON: return quarot__wht_row_f32_neon;
#endif
        default: return quarot__wht_row_f32_ref;
    }
}

static quarot__whtc_fn quarot__whtc_select(quarot_isa isa, int* lanes) {
    switch (isa) {
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2: *lanes = 4; return quarot__whtc_f32_sse2;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2: *lanes = 8; return quarot__whtc_f32_avx2;
#endif
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512: *lanes = 16; return quarot__whtc_f32_avx512;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON: *lanes = 4; return quarot__whtc_f32_neon;
#endif
        default: *lanes = 0; return NULL;
    }
}

// The fixed register mixing for plan->mix_fixed (0: none), orientation and M mixing columns, where the
// ISA has it. AVX2 only up to M = 512: its 32-byte stores fill an output's 64-byte line in two
// vector columns, and with rows of 1024 floats (4 KiB, one L1 set) a pass's 9-10 outputs evict
// each other's lines in between (the table kernel is faster there).
static quarot__mixr_fn quarot__mixr_select(quarot_isa isa, int fixed, int transpose, int64_t M) {
#if defined(QUAROT__HAVE_AVX512)
    if (isa == QUAROT_ISA_AVX512) {
        if (fixed == 1) return transpose ? quarot__mixr28T_avx512 : quarot__mixr28F_avx512;
        if (fixed == 2) return quarot__mixr38_avx512;
        if (fixed == 3) return quarot__mixr74_avx512;
    }
#endif
#if defined(QUAROT__HAVE_AVX2)
    if (isa == QUAROT_ISA_AVX2 && M <= 512) {
        if (fixed == 1) return transpose ? quarot__mixr28T_avx2 : quarot__mixr28F_avx2;
        if (fixed == 2) return quarot__mixr38_avx2;
        if (fixed == 3) return quarot__mixr74_avx2;
    }
#endif
    (void)isa;
    (void)fixed;
    (void)transpose;
    (void)M;
    return NULL;
}

static quarot__mixb_fn quarot__mixb_select(quarot_isa isa) {
    switch (isa) {
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2: return quarot__mixb_f32_sse2;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2: return quarot__mixb_f32_avx2;
#endif
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512: return quarot__mixb_f32_avx512;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON: return quarot__mixb_f32_neon;
#endif
        default: return NULL;
    }
}

static quarot__mix_fn quarot__mix_select(quarot_isa isa) {
    switch (isa) {
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2: return quarot__mix_f32_sse2;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2: return quarot__mix_f32_avx2;
#endif
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512: return quarot__mix_f32_avx512;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON: return quarot__mix_f32_neon;
#endif
        default: return NULL;
    }
}

// ---- f64 kernels (the weight-rotation path): the same butterflies and mixing chains as
// quarot__wht_row_f64_ref / quarot__mix_f64_ref, vectorized over independent elements only, so
// every element sees the same operations in the same order (bit-identical). One vector width per
// build: 4 doubles (AVX2; also under AVX-512, whose split 512-bit units gain nothing here), 2 (SSE2,
// NEON). Stages h = 1, 2 run as a scalar radix-4 step, stages h >= 4 as radix-4 / radix-2 passes
// over whole vectors; the mixing keeps 4 vectors of outputs j in registers per (i, k) step.
#if defined(QUAROT__HAVE_AVX2)
  #define QUAROT__HAVE_VD 1
  #define QUAROT__VD __m256d
  #define QUAROT__VD_W 4
  #define QUAROT__VD_LD(p) _mm256_loadu_pd(p)
  #define QUAROT__VD_ST(p, v) _mm256_storeu_pd((p), (v))
  #define QUAROT__VD_ADD(a, b) _mm256_add_pd((a), (b))
  #define QUAROT__VD_SUB(a, b) _mm256_sub_pd((a), (b))
  #define QUAROT__VD_NEG(a) _mm256_xor_pd((a), _mm256_set1_pd(-0.0))
#elif defined(QUAROT__HAVE_SSE2)
  #define QUAROT__HAVE_VD 1
  #define QUAROT__VD __m128d
  #define QUAROT__VD_W 2
  #define QUAROT__VD_LD(p) _mm_loadu_pd(p)
  #define QUAROT__VD_ST(p, v) _mm_storeu_pd((p), (v))
  #define QUAROT__VD_ADD(a, b) _mm_add_pd((a), (b))
  #define QUAROT__VD_SUB(a, b) _mm_sub_pd((a), (b))
  #define QUAROT__VD_NEG(a) _mm_xor_pd((a), _mm_set1_pd(-0.0))
#elif defined(QUAROT__HAVE_NEON)
  #define QUAROT__HAVE_VD 1
  #define QUAROT__VD float64x2_t
  #define QUAROT__VD_W 2
  #define QUAROT__VD_LD(p) vld1q_f64(p)
  #define QUAROT__VD_ST(p, v) vst1q_f64((p), (v))
  #define QUAROT__VD_ADD(a, b) vaddq_f64((a), (b))
  #define QUAROT__VD_SUB(a, b) vsubq_f64((a), (b))
  #define QUAROT__VD_NEG(a) vnegq_f64(a)
#endif

#if defined(QUAROT__HAVE_VD)
static void quarot__wht_row_f64_simd(double* x, int L, const double* pre, const float* pre_f32,
                                     const double* post, const float* post_f32, const double* scale) {
    const int64_t n = (int64_t)1 << L, W = QUAROT__VD_W;
    int64_t h, i, j, base;
    if (n < 4 * W) { quarot__wht_row_f64_ref(x, L, pre, pre_f32, post, post_f32, scale); return; }
    if (pre) for (i = 0; i < n; ++i) x[i] = x[i] * pre[i];
    if (pre_f32) for (i = 0; i < n; ++i) x[i] = x[i] * (double)pre_f32[i];
    for (i = 0; i < n; i += 4) {   // h = 1 then h = 2 on each group of 4
        const double a0 = x[i], a1 = x[i + 1], a2 = x[i + 2], a3 = x[i + 3];
        const double b0 = a0 + a1, b1 = a0 - a1, b2 = a2 + a3, b3 = a2 - a3;
        x[i] = b0 + b2; x[i + 2] = b0 - b2; x[i + 1] = b1 + b3; x[i + 3] = b1 - b3;
    }
    for (h = 4; h < n; ) {   // h >= 4 >= W: every butterfly pairs whole vectors
        if (4 * h <= n) {   // stages h and 2h on 4 vectors
            for (base = 0; base < n; base += 4 * h)
                for (j = base; j < base + h; j += W) {
                    QUAROT__VD v0 = QUAROT__VD_LD(x + j), v1 = QUAROT__VD_LD(x + j + h);
                    QUAROT__VD v2 = QUAROT__VD_LD(x + j + 2 * h), v3 = QUAROT__VD_LD(x + j + 3 * h);
                    QUAROT__VD t0 = QUAROT__VD_ADD(v0, v1), t1 = QUAROT__VD_SUB(v0, v1);
                    QUAROT__VD t2 = QUAROT__VD_ADD(v2, v3), t3 = QUAROT__VD_SUB(v2, v3);
                    QUAROT__VD_ST(x + j, QUAROT__VD_ADD(t0, t2));
                    QUAROT__VD_ST(x + j + 2 * h, QUAROT__VD_SUB(t0, t2));
                    QUAROT__VD_ST(x + j + h, QUAROT__VD_ADD(t1, t3));
                    QUAROT__VD_ST(x + j + 3 * h, QUAROT__VD_SUB(t1, t3));
                }
            h <<= 2;
        } else {   // the last stage alone
            for (base = 0; base < n; base += 2 * h)
                for (j = base; j < base + h; j += W) {
                    QUAROT__VD a = QUAROT__VD_LD(x + j), b = QUAROT__VD_LD(x + j + h);
                    QUAROT__VD_ST(x + j, QUAROT__VD_ADD(a, b));
                    QUAROT__VD_ST(x + j + h, QUAROT__VD_SUB(a, b));
                }
            h <<= 1;
        }
    }
    if (post) for (i = 0; i < n; ++i) x[i] = x[i] * post[i];
    if (post_f32) for (i = 0; i < n; ++i) x[i] = x[i] * (double)post_f32[i];
    if (scale) for (i = 0; i < n; ++i) x[i] = x[i] * *scale;
}

// One step of a mixing chain on R vectors of outputs: u = u +- z[k][j..] by the coefficient sign.
#define QUAROT__MIXD_STEP(t) u##t = same ? QUAROT__VD_ADD(u##t, QUAROT__VD_LD(zk + t * QUAROT__VD_W)) \
                                         : QUAROT__VD_SUB(u##t, QUAROT__VD_LD(zk + t * QUAROT__VD_W));
#define QUAROT__MIXD_INIT(t) u##t = QUAROT__VD_LD(zk + t * QUAROT__VD_W);
#define QUAROT__MIXD_NEG(t) u##t = QUAROT__VD_NEG(u##t);
#define QUAROT__MIXD_ACC(t) a##t = k0 == 0 ? u##t : QUAROT__VD_ADD(a##t, u##t);
#define QUAROT__MIXD_STORE(t) QUAROT__VD_ST(y + i * M + j + t * QUAROT__VD_W, a##t);
#define QUAROT__MIXD_BODY(REP)                                                                 \
    for (k0 = 0; k0 < K; k0 += b) {                                                          \
        const int8_t g = c[k0 * ck];                                                         \
        const double* zk = z + k0 * M + j;                                                   \
        REP(QUAROT__MIXD_INIT)                                                               \
        for (k = k0 + 1; k < K && k < k0 + b; ++k) {                                         \
            const int same = c[k * ck] == g;                                                 \
            zk = z + k * M + j;                                                              \
            REP(QUAROT__MIXD_STEP)                                                           \
        }                                                                                    \
        if (g < 0) { REP(QUAROT__MIXD_NEG) }                                                 \
        REP(QUAROT__MIXD_ACC)                                                                \
    }                                                                                        \
    REP(QUAROT__MIXD_STORE)

static void quarot__mix_f64_simd(const double* z, double* y, int64_t K, int64_t M, const int8_t* had, int transpose,
                                 int b, const double* post, const float* post_f32, const double* scale) {
    const int64_t W = QUAROT__VD_W;
    int64_t i, j, k, k0;
    if (M % W != 0) { quarot__mix_f64_ref(z, y, K, M, had, transpose, b, post, post_f32, scale); return; }
    for (i = 0; i < K; ++i) {
        const int8_t* c = transpose ? had + i * K : had + i;   // c(k,i) = c[k * ck]
        const int64_t ck = transpose ? 1 : K;
        for (j = 0; j + 4 * W <= M; j += 4 * W) {
            QUAROT__VD u0, u1, u2, u3, a0, a1, a2, a3;
            a0 = a1 = a2 = a3 = QUAROT__VD_LD(z);   // set by the first block (k0 == 0)
            QUAROT__MIXD_BODY(QUAROT__REP4)
        }
        for (; j < M; j += W) {
            QUAROT__VD u0, a0;
            a0 = QUAROT__VD_LD(z);
            QUAROT__MIXD_BODY(QUAROT__REP1)
        }
    }
    if (post) for (i = 0; i < K * M; ++i) y[i] = y[i] * post[i];
    if (post_f32) for (i = 0; i < K * M; ++i) y[i] = y[i] * (double)post_f32[i];
    if (scale) for (i = 0; i < K * M; ++i) y[i] = y[i] * *scale;
}
#endif

// The f64 kernels for an ISA: QUAROT_ISA_REF (and builds without SIMD) get the specification.
static void quarot__f64_select(quarot_isa isa,
                               void (**row)(double*, int, const double*, const float*, const double*, const float*,
                                            const double*),
                               void (**mix)(const double*, double*, int64_t, int64_t, const int8_t*, int, int,
                                            const double*, const float*, const double*)) {
    *row = quarot__wht_row_f64_ref;
    *mix = quarot__mix_f64_ref;
#if defined(QUAROT__HAVE_VD)
    if (isa != QUAROT_ISA_REF) { *row = quarot__wht_row_f64_simd; *mix = quarot__mix_f64_simd; }
#else
    (void)isa;
#endif
}

// >>gemm
// C[m][n] = alpha * op(A)[m][k] * op(B)[k][n] + beta * C, as the BLIS loop nest (Goto, van de Geijn):
//   for jc in steps of NC:  for pc in steps of KC:   pack op(B)[pc:+KC][jc:+NC] as NR-wide slivers
//     for ic in steps of MC:  pack op(A)[ic:+MC][pc:+KC] as MR-tall slivers
//       for ir (MR rows): for jr (NR columns): micro-kernel  C_tile = alpha * (A_sliver * B_sliver) + beta' * C_tile
// beta' is beta for the first KC block and 1 afterwards. The A sliver (MR x KC) stays in L1 while the
// kernel sweeps the B panel, which streams from L2/L3. Every element of C is the same chain of
// operations whatever its tile or thread, so parallel runs equal serial runs bit for bit. A narrow
// product (32, 64 or 96 columns with AVX-512 DGEMM) skips the packing with kernels that read A and B
// in place and do the same chains (quarot__gemm_ntask).

// One micro-kernel computes a full MR x NR tile: acc[i][j] = sum_p a[p*MR + i] * b[p*NR + j] (p ascending),
// then c[i*ldc + j] = alpha*acc (beta == 0: c is not read) or alpha*acc + beta*c (two products, one add).
typedef void (*quarot__skernel_fn)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                                   float alpha, float beta);
typedef void (*quarot__dkernel_fn)(int64_t kc, const double* a, const double* b, double* c, int64_t ldc,
                                   double alpha, double beta);
// A narrow kernel computes the same acc and epilogue for an nmr x nnr tile (nnr = 4 vectors) straight from
// A and row-major B: acc[i][j] = sum_p a[i*ars + p*aks] * b[p*ldb + j] (A row-major: ars = lda, aks = 1;
// A transposed: ars = 1, aks = lda). Same operations, same order per element as the packed kernel of
// its ISA, so the same bits; used where packing A cannot pay (below).
typedef void (*quarot__snarrow_fn)(int64_t kc, const float* a, int64_t ars, int64_t aks, const float* b, int64_t ldb,
                                   float* c, int64_t ldc, float alpha, float beta);
typedef void (*quarot__dnarrow_fn)(int64_t kc, const double* a, int64_t ars, int64_t aks, const double* b, int64_t ldb,
                                   double* c, int64_t ldc, double alpha, double beta);

// Blocking of one ISA's kernel: mc % mr == 0, nc % nr == 0; mr * nr <= QUAROT__GEMM_TILE_MAX.
typedef struct quarot__sgemm_cfg {
    int mr, nr;
    int64_t kc, mc, nc;
    quarot__skernel_fn kernel;
    int nmr, nnr;                        // the narrow kernel's tile; narrow NULL: none for this ISA
    quarot__snarrow_fn narrow;
} quarot__sgemm_cfg;
typedef struct quarot__dgemm_cfg {
    int mr, nr;
    int64_t kc, mc, nc;
    quarot__dkernel_fn kernel;
    int nmr, nnr;
    quarot__dnarrow_fn narrow;
} quarot__dgemm_cfg;

#define QUAROT__GEMM_TILE_MAX 512
#define QUAROT__GEMM_NARROW 4            // narrow path for n = 1..3 narrow tiles (see quarot__gemm_ntask)
// Defined with the micro-kernels below: the blocking and kernel of an ISA (resolved, compiled in).
static void quarot__sgemm_select(quarot_isa isa, quarot__sgemm_cfg* cfg);
static void quarot__dgemm_select(quarot_isa isa, quarot__dgemm_cfg* cfg);

// p rounded up to the next multiple of 64 bytes (the callers allocate 63 or more bytes beyond what they use).
static void* quarot__align64(void* p) {
    return (char*)p + ((64 - (size_t)((uintptr_t)p & 63)) & 63);
}

// Argument checks shared by every entry point. A matrix [rows][cols] with row stride ld needs
// ld >= max(1, cols) and (rows - 1) * ld + cols elements addressable without overflow.
static quarot_result quarot__gemm_check_mat(const void* p, int64_t rows, int64_t cols, int64_t ld,
                                            size_t elem, int used) {
    int64_t lim = (int64_t)((SIZE_MAX / 2) / elem);     // also below PTRDIFF_MAX
    if (ld < 1 || ld < cols) return QUAROT_ERR_INVALID_ARGUMENT;
    if (rows == 0 || cols == 0) return QUAROT_OK;
    if (used && !p) return QUAROT_ERR_INVALID_ARGUMENT;
    if (ld > lim || rows - 1 > (lim - cols) / ld) return QUAROT_ERR_OVERFLOW;
    return QUAROT_OK;
}

static quarot_result quarot__gemm_check(int ta, int tb, int64_t m, int64_t n, int64_t k, int ab_used,
                                        const void* a, int64_t lda, const void* b, int64_t ldb,
                                        const void* c, int64_t ldc, size_t elem) {
    quarot_result r;
    if (m < 0 || n < 0 || k < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    ab_used = ab_used && m > 0 && n > 0 && k > 0;
    r = quarot__gemm_check_mat(a, ta ? k : m, ta ? m : k, lda, elem, ab_used);
    if (r == QUAROT_OK) r = quarot__gemm_check_mat(b, tb ? n : k, tb ? k : n, ldb, elem, ab_used);
    if (r == QUAROT_OK) r = quarot__gemm_check_mat(c, m, n, ldc, elem, 1);
    return r;
}

// How a product is split into tasks: panels of pm x pn elements of C (multiples of the micro-tile, so
// the tile grid is the serial one), tn panels per row of panels; each task gets `per_task` elements of
// workspace: a_elems for its packed A block, the rest for its packed B panel.
typedef struct quarot__gemm_plan {
    int64_t pm, pn, tn, tasks;
    int64_t a_elems, per_task;
} quarot__gemm_plan;

static int64_t quarot__gemm_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t quarot__gemm_min(int64_t a, int64_t b) { return a < b ? a : b; }

// Threads a product is split over: env's, or 1 when it has no hook or the product is small.
static int quarot__gemm_threads(int64_t m, int64_t n, int64_t k, const quarot_env* env) {
    int threads = (env && env->parallel.run) ? env->parallel.n_threads : 1;
    return threads > 1 && (double)m * (double)n * (double)k >= 262144.0 ? threads : 1;
}

static void quarot__gemm_plan_make(int64_t m, int64_t n, int64_t k, int mr, int nr, int64_t kc,
                                   int64_t mc, int64_t nc, int tri, const quarot_env* env, quarot__gemm_plan* pl) {
    int64_t tiles_m = quarot__gemm_cdiv(m, mr), tiles_n = quarot__gemm_cdiv(n, nr), tm = 1, tn = 1;
    int threads = quarot__gemm_threads(m, n, k, env);
    // Small products run serially; otherwise ~4 tasks per thread (a triangle, tri: 8, as its panels
    // below the diagonal are empty). Each task packs its own copies of its A rows and B columns, so a
    // split into tm x tn panels packs B tm times and A tn times: tm/tn ~ m/n keeps that smallest
    // (tm a power of two: at n = 4096, 2 threads, 2 x 4 panels pack 6 n^2 elements where 8 row
    // panels packed 8 n^2 of B plus A once per NC block; a tall-skinny product keeps splitting rows).
    if (threads > 1) {
        int64_t target = quarot__gemm_min((int64_t)threads * (tri ? 8 : 4), 256);
        double want = sqrt((double)target * (double)m / (double)n);
        while (tm * 2 <= target && (double)tm * 1.41421356 < want) tm *= 2;
        tm = quarot__gemm_min(tiles_m, tm);
        tn = quarot__gemm_min(tiles_n, quarot__gemm_cdiv(target, tm));
    }
    pl->pm = quarot__gemm_cdiv(tiles_m, tm) * mr;
    pl->pn = quarot__gemm_cdiv(tiles_n, tn) * nr;
    pl->tn = quarot__gemm_cdiv(n, pl->pn);
    pl->tasks = quarot__gemm_cdiv(m, pl->pm) * pl->tn;
    // Packed A: up to mc rows (rounded to mr) x kc; packed B: kc x up to nc columns (rounded to nr).
    // Both rounded to 16 elements so every slice starts 64-byte aligned.
    kc = quarot__gemm_min(kc, k);
    pl->a_elems = (quarot__gemm_min(mc, quarot__gemm_cdiv(pl->pm, mr) * mr) * kc + 15) / 16 * 16;
    pl->per_task = pl->a_elems + (quarot__gemm_min(nc, quarot__gemm_cdiv(pl->pn, nr) * nr) * kc + 15) / 16 * 16;
}

// The driver itself is >>gemm_body, compiled for float (_s) and double (_d) below. Packing layouts:
//   packed A  ap[s][p][r] = op(A)[s*mr + r][p]   (rows past mc are 0)
//   packed B  bp[t][p][j] = op(B)[p][t*nr + j]   (columns past nc are 0)
// Full slivers whose source rows are contiguous (op(B) not transposed, op(A) transposed): ns slivers
// of width w side by side, d[t][p][j] = s[p*ld + t*w + j], copied source row by source row (one
// sequential read per row; sliver by sliver would touch a new page per row) with the width as a
// constant, so each piece is a few vector moves instead of a memcpy call: a struct of W elements
// is assigned (gcc's loop-idiom pass turns an element loop back into a memmove call per piece).
#define QUAROT__GEMM_STRIP_W(T, W)                                                                     \
    for (p = 0; p < kc; ++p)                                                                           \
        for (t = 0; t < ns; ++t) {                                                                     \
            typedef struct { T v[W]; } blk_;                                                          \
            *(blk_*)(void*)(d + (t * kc + p) * (W)) = *(const blk_*)(const void*)(s + p * ld + t * (W)); \
        }
#define QUAROT__GEMM_STRIP_ANY(T, W)                                                                   \
    for (p = 0; p < kc; ++p)                                                                           \
        for (t = 0; t < ns; ++t) {                                                                     \
            const T* sp = s + p * ld + t * (W);                                                        \
            T* dp = d + (t * kc + p) * (W);                                                            \
            for (j = 0; j < (W); ++j) dp[j] = sp[j];                                                   \
        }
// Columns [p0, pe) of `rows` = mr source rows a[r*lda + p] into a packed sliver: ap[p*mr + r]. Row
// by row (each source line read once, whole); with AVX-512, floats move as 16 x 16 blocks through an
// in-register transpose (a copy: the same bits as the scalar loop).
static void quarot__gemm_tr_d(const double* QUAROT__RESTRICT a, int64_t lda, int mr, int64_t p0, int64_t pe,
                              double* QUAROT__RESTRICT ap) {
    int64_t p;
    int r;
    for (r = 0; r < mr; ++r) {
        const double* src = a + r * lda;
        for (p = p0; p < pe; ++p) ap[p * mr + r] = src[p];
    }
}
#if defined(QUAROT__HAVE_AVX512)
// dst[p*ldd + r] = src[r*lda + p] for r, p < 16: 32-bit, then 64-bit interleaves within 128-bit
// lanes, then two rounds of lane shuffles.
static void quarot__gemm_tr16_avx512(const float* src, int64_t lda, float* dst, int64_t ldd) {
    const __mmask16 m16 = (__mmask16)0xFFFF;      // maskz forms: g++ 12 warns on the plain ones
    const __mmask8 m8 = (__mmask8)0xFF;
    __m512 x[16], y[16];
    int i, e;
    for (i = 0; i < 16; ++i) x[i] = _mm512_loadu_ps(src + i * lda);
    for (i = 0; i < 16; i += 2) {                  // y[i], y[i+1]: rows i, i+1 interleaved
        y[i] = _mm512_maskz_unpacklo_ps(m16, x[i], x[i + 1]);
        y[i + 1] = _mm512_maskz_unpackhi_ps(m16, x[i], x[i + 1]);
    }
    for (i = 0; i < 16; i += 4) {                  // x[i + e]: element e of each lane, rows i..i+3
        __m512d a = _mm512_castps_pd(y[i]), b = _mm512_castps_pd(y[i + 1]);
        __m512d c = _mm512_castps_pd(y[i + 2]), d = _mm512_castps_pd(y[i + 3]);
        x[i] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(m8, a, c));
        x[i + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(m8, a, c));
        x[i + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(m8, b, d));
        x[i + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(m8, b, d));
    }
    for (e = 0; e < 4; ++e) {                      // column 4L + e = lane L of x[e], x[4+e], x[8+e], x[12+e]
        __m512 c0 = _mm512_maskz_shuffle_f32x4(m16, x[e], x[4 + e], 0x88);
        __m512 c1 = _mm512_maskz_shuffle_f32x4(m16, x[e], x[4 + e], 0xdd);
        __m512 d0 = _mm512_maskz_shuffle_f32x4(m16, x[8 + e], x[12 + e], 0x88);
        __m512 d1 = _mm512_maskz_shuffle_f32x4(m16, x[8 + e], x[12 + e], 0xdd);
        _mm512_storeu_ps(dst + (0 + e) * ldd, _mm512_maskz_shuffle_f32x4(m16, c0, d0, 0x88));
        _mm512_storeu_ps(dst + (4 + e) * ldd, _mm512_maskz_shuffle_f32x4(m16, c1, d1, 0x88));
        _mm512_storeu_ps(dst + (8 + e) * ldd, _mm512_maskz_shuffle_f32x4(m16, c0, d0, 0xdd));
        _mm512_storeu_ps(dst + (12 + e) * ldd, _mm512_maskz_shuffle_f32x4(m16, c1, d1, 0xdd));
    }
}
#endif
static void quarot__gemm_tr_s(const float* QUAROT__RESTRICT a, int64_t lda, int mr, int64_t p0, int64_t pe,
                              float* QUAROT__RESTRICT ap) {
    int64_t p;
    int r;
#if defined(QUAROT__HAVE_AVX512)
    if (mr % 16 == 0) {
        for (; p0 + 16 <= pe; p0 += 16)
            for (r = 0; r < mr; r += 16) quarot__gemm_tr16_avx512(a + r * lda + p0, lda, ap + p0 * mr + r, mr);
    }
#endif
    for (r = 0; r < mr; ++r) {
        const float* src = a + r * lda;
        for (p = p0; p < pe; ++p) ap[p * mr + r] = src[p];
    }
}

#define QUAROT__G(name) QUAROT__CAT(name, QUAROT__S)   // name##<s|d>: quarot__gemm_run_s
#define QUAROT__TEMPLATE QUAROT__TEMPLATE_GEMM
#define QUAROT__T float
#define QUAROT__S s
#define QUAROT__GCFG quarot__sgemm_cfg
#define QUAROT__GSELECT quarot__sgemm_select
#include QUAROT_HEADER_FILE   // >>gemm_body
#undef QUAROT__GSELECT
#undef QUAROT__GCFG
#undef QUAROT__S
#undef QUAROT__T
#define QUAROT__T double
#define QUAROT__S d
#define QUAROT__GCFG quarot__dgemm_cfg
#define QUAROT__GSELECT quarot__dgemm_select
#include QUAROT_HEADER_FILE   // >>gemm_body
#undef QUAROT__GSELECT
#undef QUAROT__GCFG
#undef QUAROT__S
#undef QUAROT__T
#undef QUAROT__TEMPLATE
#undef QUAROT__G
#undef QUAROT__GEMM_STRIP_W

#if !defined(QUAROT_USE_CBLAS)
// G = X^T X for X [k][n] (row stride ldx) into G [n][n] (row stride ldg): the tiles holding an element
// on or above the diagonal only (about half the flops); those elements equal the full product's bits
// (same ISA, same blocking). Elements strictly below the diagonal are left alone or overwritten.
// quarot__ssyrk_upper (float), quarot__dsyrk_upper (double).
#define QUAROT__SYRK_DEFINE(T, S)                                                                      \
static quarot_result quarot__##S##syrk_upper(int64_t n, int64_t k, const T* x, int64_t ldx, T* g,      \
                                             int64_t ldg, const quarot_env* env) {                     \
    quarot__##S##gemm_cfg cfg;                                                                         \
    quarot_isa isa = QUAROT_ISA_DEFAULT;                                                               \
    quarot_result r = quarot__gemm_check(1, 0, n, n, k, 1, x, ldx, x, ldx, g, ldg, sizeof(T));         \
    if (r == QUAROT_OK) r = quarot__isa_resolve(isa, &isa);                                            \
    if (r != QUAROT_OK) return r;                                                                      \
    quarot__##S##gemm_select(isa, &cfg);                                                               \
    return quarot__gemm_cfgx_##S(&cfg, 1, 1, 0, n, n, k, (T)1, x, ldx, x, ldx, (T)0, g, ldg, env);     \
}
QUAROT__SYRK_DEFINE(float, s)
QUAROT__SYRK_DEFINE(double, d)
#undef QUAROT__SYRK_DEFINE
#endif

QUAROT_API quarot_result quarot_sgemm_builtin(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                              float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                                              float beta, float* c, int64_t ldc, const quarot_env* env,
                                              quarot_isa isa) {
    quarot_result r = quarot__gemm_check(trans_a, trans_b, m, n, k, alpha != 0.0f, a, lda, b, ldb, c, ldc,
                                         sizeof(float));
    if (r == QUAROT_OK) r = quarot__isa_resolve(isa, &isa);
    if (r != QUAROT_OK) return r;
    return quarot__gemm_s(isa, trans_a != 0, trans_b != 0, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env);
}

QUAROT_API quarot_result quarot_dgemm_builtin(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                              double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                                              double beta, double* c, int64_t ldc, const quarot_env* env,
                                              quarot_isa isa) {
    quarot_result r = quarot__gemm_check(trans_a, trans_b, m, n, k, alpha != 0.0, a, lda, b, ldb, c, ldc,
                                         sizeof(double));
    if (r == QUAROT_OK) r = quarot__isa_resolve(isa, &isa);
    if (r != QUAROT_OK) return r;
    return quarot__gemm_d(isa, trans_a != 0, trans_b != 0, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env);
}

#if defined(QUAROT_USE_CBLAS)
// CBLAS takes int sizes: larger problems stay on the built-in code.
static int quarot__cblas_fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
}
#endif

QUAROT_API quarot_result quarot_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                      float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                                      float beta, float* c, int64_t ldc, const quarot_env* env) {
#if defined(QUAROT_USE_CBLAS)
    quarot_result r = quarot__gemm_check(trans_a, trans_b, m, n, k, alpha != 0.0f, a, lda, b, ldb, c, ldc,
                                         sizeof(float));
    if (r != QUAROT_OK) return r;
    if (m == 0 || n == 0) return QUAROT_OK;
    if (quarot__cblas_fits(m, n, k, lda, ldb, ldc)) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return QUAROT_OK;
    }
#endif
    return quarot_sgemm_builtin(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env,
                                QUAROT_ISA_DEFAULT);
}

QUAROT_API quarot_result quarot_dgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                      double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                                      double beta, double* c, int64_t ldc, const quarot_env* env) {
#if defined(QUAROT_USE_CBLAS)
    quarot_result r = quarot__gemm_check(trans_a, trans_b, m, n, k, alpha != 0.0, a, lda, b, ldb, c, ldc,
                                         sizeof(double));
    if (r != QUAROT_OK) return r;
    if (m == 0 || n == 0) return QUAROT_OK;
    if (quarot__cblas_fits(m, n, k, lda, ldb, ldc)) {
        cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return QUAROT_OK;
    }
#endif
    return quarot_dgemm_builtin(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env,
                                QUAROT_ISA_DEFAULT);
}

// quarot_sgemv's dot products. _ref: 8 partial sums over blocks of 8, summed as a tree, then the tail
// in order. AVX2 (with FMA) and AVX-512: 4 vector accumulators of fused products over blocks of 4
// vectors, the accumulators summed pairwise and reduced across lanes, then the same scalar tail.
static float quarot__sdot_f32_ref(const float* a, const float* b, int64_t n) {
    float p[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s;
    int64_t k = 0;
    int j;
    for (; k + 8 <= n; k += 8)
        for (j = 0; j < 8; ++j) p[j] += a[k + j] * b[k + j];
    s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    for (; k < n; ++k) s += a[k] * b[k];
    return s;
}
#if defined(QUAROT__HAVE_AVX2) && defined(__FMA__)
static float quarot__sdot_f32_avx2(const float* a, const float* b, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m128 h;
    int64_t k = 0;
    float s;
    for (; k + 32 <= n; k += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 16), _mm256_loadu_ps(b + k + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 24), _mm256_loadu_ps(b + k + 24), a3);
    }
    a0 = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    h = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    s = _mm_cvtss_f32(h);
    for (; k < n; ++k) s += a[k] * b[k];
    return s;
}
#endif
#if defined(QUAROT__HAVE_AVX512)
static float quarot__sdot_f32_avx512(const float* a, const float* b, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 h8;
    __m128 h;
    int64_t k = 0;
    float s;
    for (; k + 64 <= n; k += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(b + k + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 32), _mm512_loadu_ps(b + k + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 48), _mm512_loadu_ps(b + k + 48), a3);
    }
    // The halves, then the quarters, then pairs: the order of gcc's _mm512_reduce_add_ps, written out
    // because its unmasked extract (an undefined pass-through) trips -Wuninitialized in g++ 12.
    a0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    h8 = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd((__mmask8)0xFF, _mm512_castps_pd(a0), 0)),
                       _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd((__mmask8)0xFF, _mm512_castps_pd(a0), 1)));
    h = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    s = _mm_cvtss_f32(h);
    for (; k < n; ++k) s += a[k] * b[k];
    return s;
}
#endif

typedef float (*quarot__sdot_fn)(const float* a, const float* b, int64_t n);
typedef struct quarot__sgemv_job {
    quarot__sdot_fn dot;
    const float *x, *w;
    float* y;
    int64_t rows, n, k, ldx, ldw, ldy;
} quarot__sgemv_job;

// Task t: outputs [64 t, 64 t + 64), every row of x.
static void quarot__sgemv_task(void* arg, int64_t t) {
    const quarot__sgemv_job* j = (const quarot__sgemv_job*)arg;
    int64_t o0 = t * 64, o1 = o0 + 64 > j->n ? j->n : o0 + 64, o, r;
    for (o = o0; o < o1; ++o)
        for (r = 0; r < j->rows; ++r) j->y[r * j->ldy + o] = j->dot(j->x + r * j->ldx, j->w + o * j->ldw, j->k);
}

QUAROT_API quarot_result quarot_sgemv(int64_t rows, int64_t n, int64_t k, const float* x, int64_t ldx,
                                      const float* w, int64_t ldw, float* y, int64_t ldy, const quarot_env* env,
                                      quarot_isa isa) {
    quarot__sgemv_job jb;
    quarot_result r;
    if (rows < 0 || n < 0 || k < 0 || ldx < k || ldw < k || ldy < n || ldx < 1 || ldw < 1 || ldy < 1)
        return QUAROT_ERR_INVALID_ARGUMENT;
    if (rows == 0 || n == 0) return QUAROT_OK;
    if (!y || (k > 0 && (!x || !w))) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot__isa_resolve(isa, &isa);
    if (r != QUAROT_OK) return r;
    jb.dot = quarot__sdot_f32_ref;
#if defined(QUAROT__HAVE_AVX2) && defined(__FMA__)
    if (isa == QUAROT_ISA_AVX2) jb.dot = quarot__sdot_f32_avx2;
#endif
#if defined(QUAROT__HAVE_AVX512)
    if (isa == QUAROT_ISA_AVX512) jb.dot = quarot__sdot_f32_avx512;
#endif
    jb.x = x; jb.w = w; jb.y = y;
    jb.rows = rows; jb.n = n; jb.k = k; jb.ldx = ldx; jb.ldw = ldw; jb.ldy = ldy;
    quarot_env_parallel_for(env, quarot__sgemv_task, &jb, (n + 63) / 64);
    return QUAROT_OK;
}

// >>gemm_kernels
// Micro-kernels: acc[MR][NR] = sum_p a[p*MR + i] * b[p*NR + j] over one packed A sliver and B sliver,
// then c = alpha*acc (beta == 0, c not read) or c = alpha*acc + beta*c. Vector kernels broadcast one
// element of A per row and multiply it into NR/W vectors of B (W = vector lanes); FMA where available.
// Each ISA's blocking keeps the A sliver (MR x KC) in the 32 KB L1 and streams B from L2/L3.

// Scalar reference kernels, 4 x 8 (float) and 4 x 4 (double).
#define QUAROT__REF_KERNEL(NAME, T, MR, NR)                                                            \
static void NAME(int64_t kc, const T* QUAROT__RESTRICT a, const T* QUAROT__RESTRICT b,                 \
                 T* QUAROT__RESTRICT c, int64_t ldc, T alpha, T beta) {                                 \
    T acc[MR][NR];                                                                                     \
    int64_t p;                                                                                         \
    int i, j;                                                                                          \
    for (i = 0; i < MR; ++i)                                                                           \
        for (j = 0; j < NR; ++j) acc[i][j] = (T)0;                                                     \
    for (p = 0; p < kc; ++p, a += MR, b += NR)                                                         \
        for (i = 0; i < MR; ++i)                                                                       \
            for (j = 0; j < NR; ++j) acc[i][j] += a[i] * b[j];                                         \
    for (i = 0; i < MR; ++i)                                                                           \
        for (j = 0; j < NR; ++j) {                                                                     \
            T v = alpha * acc[i][j];                                                                   \
            c[i * ldc + j] = beta == (T)0 ? v : v + beta * c[i * ldc + j];                             \
        }                                                                                              \
}
QUAROT__REF_KERNEL(quarot__sgemm_kernel_ref, float, 4, 8)
QUAROT__REF_KERNEL(quarot__dgemm_kernel_ref, double, 4, 4)

// x86 kernels: every row of the tile is two vectors (NR = 2 W). The QUAROT__KV / QUAROT__K* macros
// name the current ISA's vector type and operations; the row macros below are shared.
#define QUAROT__ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define QUAROT__ROWS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define QUAROT__KR_DECL(i) QUAROT__KV c##i##a = QUAROT__KZERO, c##i##b = QUAROT__KZERO;
#define QUAROT__KR_FMA(i)                                                                              \
    av = QUAROT__KSET1(a[i]); c##i##a = QUAROT__KFMA(av, b0, c##i##a); c##i##b = QUAROT__KFMA(av, b1, c##i##b);
#define QUAROT__KR_ST0(i)                                                                              \
    QUAROT__KSTORE(c + (i) * ldc, QUAROT__KMUL(va, c##i##a));                                          \
    QUAROT__KSTORE(c + (i) * ldc + QUAROT__KW, QUAROT__KMUL(va, c##i##b));
#define QUAROT__KR_ST1(i)                                                                              \
    QUAROT__KSTORE(c + (i) * ldc, QUAROT__KADD(QUAROT__KMUL(va, c##i##a),                              \
                                               QUAROT__KMUL(vb, QUAROT__KLOAD(c + (i) * ldc))));        \
    QUAROT__KSTORE(c + (i) * ldc + QUAROT__KW, QUAROT__KADD(QUAROT__KMUL(va, c##i##b),                 \
                                               QUAROT__KMUL(vb, QUAROT__KLOAD(c + (i) * ldc + QUAROT__KW))));
#define QUAROT__KERNEL_2V(NAME, T, ROWS, MR)                                                           \
static void NAME(int64_t kc, const T* QUAROT__RESTRICT a, const T* QUAROT__RESTRICT b,                 \
                 T* QUAROT__RESTRICT c, int64_t ldc, T alpha, T beta) {                                 \
    QUAROT__KV av, b0, b1, va, vb;                                                                     \
    int64_t p;                                                                                         \
    ROWS(QUAROT__KR_DECL)                                                                              \
    for (p = 0; p < kc; ++p) {                                                                         \
        b0 = QUAROT__KLOAD(b);                                                                         \
        b1 = QUAROT__KLOAD(b + QUAROT__KW);                                                            \
        ROWS(QUAROT__KR_FMA)                                                                           \
        a += MR;                                                                                       \
        b += 2 * QUAROT__KW;                                                                           \
    }                                                                                                  \
    va = QUAROT__KSET1(alpha);   /* set after the loop: all 32 registers are busy inside it */         \
    vb = QUAROT__KSET1(beta);                                                                          \
    if (beta == (T)0) { ROWS(QUAROT__KR_ST0) } else { ROWS(QUAROT__KR_ST1) }                           \
}

// Narrow kernel (see quarot__dnarrow_fn): ROWS x 4 vectors, A and B read in place. Per element the
// chain and the epilogue are QUAROT__KERNEL_2V's.
#define QUAROT__KN_DECL(i) QUAROT__KV c##i##a = QUAROT__KZERO, c##i##b = QUAROT__KZERO, c##i##c = QUAROT__KZERO, \
                                      c##i##d = QUAROT__KZERO;
#define QUAROT__KN_FMA(i)                                                                              \
    av = QUAROT__KSET1(a[(i) * ars]);                                                                  \
    c##i##a = QUAROT__KFMA(av, b0, c##i##a); c##i##b = QUAROT__KFMA(av, b1, c##i##b);                  \
    c##i##c = QUAROT__KFMA(av, b2, c##i##c); c##i##d = QUAROT__KFMA(av, b3, c##i##d);
#define QUAROT__KN_ST(i, j, v)                                                                         \
    QUAROT__KSTORE(c + (i) * ldc + (j) * QUAROT__KW,                                                   \
                   beta == 0 ? QUAROT__KMUL(va, v)                                                     \
                                : QUAROT__KADD(QUAROT__KMUL(va, v),                                    \
                                               QUAROT__KMUL(vb, QUAROT__KLOAD(c + (i) * ldc + (j) * QUAROT__KW))));
#define QUAROT__KN_STROW(i) QUAROT__KN_ST(i, 0, c##i##a) QUAROT__KN_ST(i, 1, c##i##b) QUAROT__KN_ST(i, 2, c##i##c) \
                            QUAROT__KN_ST(i, 3, c##i##d)
#define QUAROT__KERNEL_4VN(NAME, T, ROWS)                                                              \
static void NAME(int64_t kc, const T* QUAROT__RESTRICT a, int64_t ars, int64_t aks,                   \
                 const T* QUAROT__RESTRICT b, int64_t ldb, T* QUAROT__RESTRICT c, int64_t ldc, T alpha,   \
                 T beta) {                                                                              \
    QUAROT__KV av, b0, b1, b2, b3, va, vb;                                                             \
    int64_t p;                                                                                         \
    ROWS(QUAROT__KN_DECL)                                                                              \
    for (p = 0; p < kc; ++p) {                                                                         \
        b0 = QUAROT__KLOAD(b);                                                                         \
        b1 = QUAROT__KLOAD(b + QUAROT__KW);                                                            \
        b2 = QUAROT__KLOAD(b + 2 * QUAROT__KW);                                                        \
        b3 = QUAROT__KLOAD(b + 3 * QUAROT__KW);                                                        \
        ROWS(QUAROT__KN_FMA)                                                                           \
        a += aks;                                                                                      \
        b += ldb;                                                                                      \
    }                                                                                                  \
    va = QUAROT__KSET1(alpha);                                                                         \
    vb = QUAROT__KSET1(beta);                                                                          \
    ROWS(QUAROT__KN_STROW)                                                                             \
}

#if defined(QUAROT__HAVE_SSE2)
// SSE2 (no FMA): 6 x 8 float, 6 x 4 double; 12 accumulators of the 16 xmm registers.
#define QUAROT__KV __m128
#define QUAROT__KW 4
#define QUAROT__KZERO _mm_setzero_ps()
#define QUAROT__KSET1(x) _mm_set1_ps(x)
#define QUAROT__KLOAD(p) _mm_loadu_ps(p)
#define QUAROT__KSTORE(p, v) _mm_storeu_ps(p, v)
#define QUAROT__KMUL(x, y) _mm_mul_ps(x, y)
#define QUAROT__KADD(x, y) _mm_add_ps(x, y)
#define QUAROT__KFMA(x, y, z) _mm_add_ps(_mm_mul_ps(x, y), z)
QUAROT__KERNEL_2V(quarot__sgemm_kernel_sse2, float, QUAROT__ROWS6, 6)
#undef QUAROT__KV
#undef QUAROT__KW
#undef QUAROT__KZERO
#undef QUAROT__KSET1
#undef QUAROT__KLOAD
#undef QUAROT__KSTORE
#undef QUAROT__KMUL
#undef QUAROT__KADD
#undef QUAROT__KFMA
#define QUAROT__KV __m128d
#define QUAROT__KW 2
#define QUAROT__KZERO _mm_setzero_pd()
#define QUAROT__KSET1(x) _mm_set1_pd(x)
#define QUAROT__KLOAD(p) _mm_loadu_pd(p)
#define QUAROT__KSTORE(p, v) _mm_storeu_pd(p, v)
#define QUAROT__KMUL(x, y) _mm_mul_pd(x, y)
#define QUAROT__KADD(x, y) _mm_add_pd(x, y)
#define QUAROT__KFMA(x, y, z) _mm_add_pd(_mm_mul_pd(x, y), z)
QUAROT__KERNEL_2V(quarot__dgemm_kernel_sse2, double, QUAROT__ROWS6, 6)
#undef QUAROT__KV
#undef QUAROT__KW
#undef QUAROT__KZERO
#undef QUAROT__KSET1
#undef QUAROT__KLOAD
#undef QUAROT__KSTORE
#undef QUAROT__KMUL
#undef QUAROT__KADD
#undef QUAROT__KFMA
#endif

#if defined(QUAROT__HAVE_AVX2)
// AVX2: 6 x 16 float, 6 x 8 double (12 ymm accumulators); FMA only when the compiler targets it.
#if defined(__FMA__)
#define QUAROT__KFMA(x, y, z) _mm256_fmadd_ps(x, y, z)
#define QUAROT__KFMAD(x, y, z) _mm256_fmadd_pd(x, y, z)
#else
#define QUAROT__KFMA(x, y, z) _mm256_add_ps(_mm256_mul_ps(x, y), z)
#define QUAROT__KFMAD(x, y, z) _mm256_add_pd(_mm256_mul_pd(x, y), z)
#endif
#define QUAROT__KV __m256
#define QUAROT__KW 8
#define QUAROT__KZERO _mm256_setzero_ps()
#define QUAROT__KSET1(x) _mm256_set1_ps(x)
#define QUAROT__KLOAD(p) _mm256_loadu_ps(p)
#define QUAROT__KSTORE(p, v) _mm256_storeu_ps(p, v)
#define QUAROT__KMUL(x, y) _mm256_mul_ps(x, y)
#define QUAROT__KADD(x, y) _mm256_add_ps(x, y)
QUAROT__KERNEL_2V(quarot__sgemm_kernel_avx2, float, QUAROT__ROWS6, 6)
#undef QUAROT__KV
#undef QUAROT__KW
#undef QUAROT__KZERO
#undef QUAROT__KSET1
#undef QUAROT__KLOAD
#undef QUAROT__KSTORE
#undef QUAROT__KMUL
#undef QUAROT__KADD
#undef QUAROT__KFMA
#define QUAROT__KFMA(x, y, z) QUAROT__KFMAD(x, y, z)
#define QUAROT__KV __m256d
#define QUAROT__KW 4
#define QUAROT__KZERO _mm256_setzero_pd()
#define QUAROT__KSET1(x) _mm256_set1_pd(x)
#define QUAROT__KLOAD(p) _mm256_loadu_pd(p)
#define QUAROT__KSTORE(p, v) _mm256_storeu_pd(p, v)
#define QUAROT__KMUL(x, y) _mm256_mul_pd(x, y)
#define QUAROT__KADD(x, y) _mm256_add_pd(x, y)
QUAROT__KERNEL_2V(quarot__dgemm_kernel_avx2, double, QUAROT__ROWS6, 6)
#undef QUAROT__KFMA
#define QUAROT__KFMA(x, y, z) _mm256_add_pd(_mm256_mul_pd(x, y), z)
QUAROT__KERNEL_2V(quarot__dgemm_kernel_avx2_exact, double, QUAROT__ROWS6, 6)
#undef QUAROT__KV
#undef QUAROT__KW
#undef QUAROT__KZERO
#undef QUAROT__KSET1
#undef QUAROT__KLOAD
#undef QUAROT__KSTORE
#undef QUAROT__KMUL
#undef QUAROT__KADD
#undef QUAROT__KFMA
#undef QUAROT__KFMAD
#endif

#if defined(QUAROT__HAVE_AVX512)
// AVX-512: 12 x 32 float, 12 x 16 double: 24 zmm accumulators + 2 B vectors + 1 broadcast of the 32
// (14 rows' 28 accumulators would leave no slack).
#define QUAROT__KV __m512
#define QUAROT__KW 16
#define QUAROT__KZERO _mm512_setzero_ps()
#define QUAROT__KSET1(x) _mm512_set1_ps(x)
#define QUAROT__KLOAD(p) _mm512_loadu_ps(p)
#define QUAROT__KSTORE(p, v) _mm512_storeu_ps(p, v)
#define QUAROT__KMUL(x, y) _mm512_mul_ps(x, y)
#define QUAROT__KADD(x, y) _mm512_add_ps(x, y)
#define QUAROT__KFMA(x, y, z) _mm512_fmadd_ps(x, y, z)
QUAROT__KERNEL_2V(quarot__sgemm_kernel_avx512, float, QUAROT__ROWS12, 12)
#undef QUAROT__KV
#undef QUAROT__KW
#undef QUAROT__KZERO
#undef QUAROT__KSET1
#undef QUAROT__KLOAD
#undef QUAROT__KSTORE
#undef QUAROT__KMUL
#undef QUAROT__KADD
#undef QUAROT__KFMA
#define QUAROT__KV __m512d
#define QUAROT__KW 8
#define QUAROT__KZERO _mm512_setzero_pd()
#define QUAROT__KSET1(x) _mm512_set1_pd(x)
#define QUAROT__KLOAD(p) _mm512_loadu_pd(p)
#define QUAROT__KSTORE(p, v) _mm512_storeu_pd(p, v)
#define QUAROT__KMUL(x, y) _mm512_mul_pd(x, y)
#define QUAROT__KADD(x, y) _mm512_add_pd(x, y)
#define QUAROT__KFMA(x, y, z) _mm512_fmadd_pd(x, y, z)
QUAROT__KERNEL_2V(quarot__dgemm_kernel_avx512, double, QUAROT__ROWS12, 12)
QUAROT__KERNEL_4VN(quarot__dgemm_narrow_avx512, double, QUAROT__ROWS6)
#undef QUAROT__KFMA
#define QUAROT__KFMA(x, y, z) _mm512_add_pd(_mm512_mul_pd(x, y), z)
QUAROT__KERNEL_2V(quarot__dgemm_kernel_avx512_exact, double, QUAROT__ROWS12, 12)
#undef QUAROT__KV
#undef QUAROT__KW
#undef QUAROT__KZERO
#undef QUAROT__KSET1
#undef QUAROT__KLOAD
#undef QUAROT__KSTORE
#undef QUAROT__KMUL
#undef QUAROT__KADD
#undef QUAROT__KFMA
#endif

#if defined(QUAROT__HAVE_NEON)
// NEON (aarch64, 32 q registers): 8 x 12 float and 6 x 8 double, 24 accumulators each; the A sliver
// is loaded as vectors and each row takes its element by lane (vfmaq_laneq).
#define QUAROT__NS_ROW(i, av, l)                                                                       \
    c##i##a = vfmaq_laneq_f32(c##i##a, b0, av, l);                                                     \
    c##i##b = vfmaq_laneq_f32(c##i##b, b1, av, l);                                                     \
    c##i##c = vfmaq_laneq_f32(c##i##c, b2, av, l);
#define QUAROT__NS_DECL(i) float32x4_t c##i##a = vdupq_n_f32(0.0f), c##i##b = c##i##a, c##i##c = c##i##a;
#define QUAROT__NS_ST(i)                                                                               \
    { float* cr = c + (i) * ldc;                                                                       \
      float32x4_t x0 = vmulq_f32(va, c##i##a), x1 = vmulq_f32(va, c##i##b), x2 = vmulq_f32(va, c##i##c); \
      if (!bz) { x0 = vaddq_f32(x0, vmulq_f32(vb, vld1q_f32(cr)));                                     \
                 x1 = vaddq_f32(x1, vmulq_f32(vb, vld1q_f32(cr + 4)));                                 \
                 x2 = vaddq_f32(x2, vmulq_f32(vb, vld1q_f32(cr + 8))); }                               \
      vst1q_f32(cr, x0); vst1q_f32(cr + 4, x1); vst1q_f32(cr + 8, x2); }
#define QUAROT__ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
static void quarot__sgemm_kernel_neon(int64_t kc, const float* QUAROT__RESTRICT a, const float* QUAROT__RESTRICT b,
                                      float* QUAROT__RESTRICT c, int64_t ldc, float alpha, float beta) {
    float32x4_t a0, a1, b0, b1, b2, va = vdupq_n_f32(alpha), vb = vdupq_n_f32(beta);
    int bz = beta == 0.0f;
    int64_t p;
    QUAROT__ROWS8(QUAROT__NS_DECL)
    for (p = 0; p < kc; ++p) {
        a0 = vld1q_f32(a); a1 = vld1q_f32(a + 4);
        b0 = vld1q_f32(b); b1 = vld1q_f32(b + 4); b2 = vld1q_f32(b + 8);
        QUAROT__NS_ROW(0, a0, 0) QUAROT__NS_ROW(1, a0, 1) QUAROT__NS_ROW(2, a0, 2) QUAROT__NS_ROW(3, a0, 3)
        QUAROT__NS_ROW(4, a1, 0) QUAROT__NS_ROW(5, a1, 1) QUAROT__NS_ROW(6, a1, 2) QUAROT__NS_ROW(7, a1, 3)
        a += 8;
        b += 12;
    }
    QUAROT__ROWS8(QUAROT__NS_ST)
}
#define QUAROT__ND_ROW(i, av, l)                                                                       \
    c##i##a = QUAROT__NDMA(c##i##a, b0, av, l);                                                        \
    c##i##b = QUAROT__NDMA(c##i##b, b1, av, l);                                                        \
    c##i##c = QUAROT__NDMA(c##i##c, b2, av, l);                                                        \
    c##i##d = QUAROT__NDMA(c##i##d, b3, av, l);
#define QUAROT__ND_DECL(i)                                                                             \
    float64x2_t c##i##a = vdupq_n_f64(0.0), c##i##b = c##i##a, c##i##c = c##i##a, c##i##d = c##i##a;
#define QUAROT__ND_ST1(cr, x, o)                                                                       \
    x = vmulq_f64(va, x); if (!bz) x = vaddq_f64(x, vmulq_f64(vb, vld1q_f64(cr + o))); vst1q_f64(cr + o, x);
#define QUAROT__ND_ST(i)                                                                               \
    { double* cr = c + (i) * ldc;                                                                      \
      QUAROT__ND_ST1(cr, c##i##a, 0) QUAROT__ND_ST1(cr, c##i##b, 2)                                    \
      QUAROT__ND_ST1(cr, c##i##c, 4) QUAROT__ND_ST1(cr, c##i##d, 6) }
#define QUAROT__ND_KERNEL(NAME)                                                                        \
static void NAME(int64_t kc, const double* QUAROT__RESTRICT a, const double* QUAROT__RESTRICT b,       \
                 double* QUAROT__RESTRICT c, int64_t ldc, double alpha, double beta) {                 \
    float64x2_t a0, a1, a2, b0, b1, b2, b3, va = vdupq_n_f64(alpha), vb = vdupq_n_f64(beta);           \
    int bz = beta == 0.0;                                                                              \
    int64_t p;                                                                                         \
    QUAROT__ROWS6(QUAROT__ND_DECL)                                                                     \
    for (p = 0; p < kc; ++p) {                                                                         \
        a0 = vld1q_f64(a); a1 = vld1q_f64(a + 2); a2 = vld1q_f64(a + 4);                               \
        b0 = vld1q_f64(b); b1 = vld1q_f64(b + 2); b2 = vld1q_f64(b + 4); b3 = vld1q_f64(b + 6);        \
        QUAROT__ND_ROW(0, a0, 0) QUAROT__ND_ROW(1, a0, 1) QUAROT__ND_ROW(2, a1, 0)                     \
        QUAROT__ND_ROW(3, a1, 1) QUAROT__ND_ROW(4, a2, 0) QUAROT__ND_ROW(5, a2, 1)                     \
        a += 6;                                                                                        \
        b += 8;                                                                                        \
    }                                                                                                  \
    QUAROT__ROWS6(QUAROT__ND_ST)                                                                       \
}
#define QUAROT__NDMA(acc, x, av, l) vfmaq_laneq_f64(acc, x, av, l)
QUAROT__ND_KERNEL(quarot__dgemm_kernel_neon)
#undef QUAROT__NDMA
#define QUAROT__NDMA(acc, x, av, l) vaddq_f64(acc, vmulq_laneq_f64(x, av, l))
QUAROT__ND_KERNEL(quarot__dgemm_kernel_neon_exact)
#undef QUAROT__NDMA
#endif

// Blocking per ISA (for a 32 KB L1D / 1 MB L2: the A sliver MR x KC takes about half of L1, the B
// panel KC x NC streams; a wide NC means fewer repacks of A). On x86 NC is 1024: the packed B panel
// of a task is then 1-2 MB, so the workspace of 8 tasks stays below malloc's mmap threshold (at
// NC = 4096, 6-8 MB a panel, every call would fault in and zero ~50 MB of fresh pages). ISAs without
// a kernel of their own (none today) would fall back to the scalar one. NC and MC never change the
// results (only KC does).
static void quarot__gemm_set(int* mr, int* nr, int64_t* kc, int64_t* mc, int64_t* nc,
                             int mr_, int nr_, int64_t kc_, int64_t nc_) {
    *mr = mr_; *nr = nr_; *kc = kc_; *mc = (int64_t)mr_ * 8; *nc = nc_;
}

static void quarot__sgemm_select(quarot_isa isa, quarot__sgemm_cfg* g) {
    g->nmr = g->nnr = 0;
    g->narrow = NULL;
    switch (isa) {
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 12, 32, 384, 1024);
            g->kernel = quarot__sgemm_kernel_avx512; return;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 6, 16, 512, 1024);
            g->kernel = quarot__sgemm_kernel_avx2; return;
#endif
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 6, 8, 512, 1024);
            g->kernel = quarot__sgemm_kernel_sse2; return;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 8, 12, 256, 3072);
            g->kernel = quarot__sgemm_kernel_neon; return;
#endif
        default:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 4, 8, 256, 2048);
            g->kernel = quarot__sgemm_kernel_ref; return;
    }
}

static void quarot__dgemm_select(quarot_isa isa, quarot__dgemm_cfg* g) {
    g->nmr = g->nnr = 0;
    g->narrow = NULL;
    switch (isa) {
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 12, 16, 256, 1024);
            g->nmr = 6;
            g->nnr = 32;
            g->narrow = quarot__dgemm_narrow_avx512;
            g->kernel = quarot__dgemm_kernel_avx512; return;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 6, 8, 256, 1024);
            g->kernel = quarot__dgemm_kernel_avx2; return;
#endif
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 6, 4, 256, 1024);
            g->kernel = quarot__dgemm_kernel_sse2; return;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 6, 8, 256, 3072);
            g->kernel = quarot__dgemm_kernel_neon; return;
#endif
        default:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 4, 4, 256, 2048);
            g->kernel = quarot__dgemm_kernel_ref; return;
    }
}

// Platform-independent DGEMM for linalg's QR: kernels without FMA and a fixed KC, so every element of
// C is the same IEEE chain on every ISA (lane-wise SIMD = scalar):
//     acc = (((0 + a_0*b_0) + a_1*b_1) + ...) over each block of 256 k-indices;  c = alpha*acc (+ beta*c)
// The tiling (MR, NR, MC, NC) and the parallel split do not change that chain; only KC would.
#define QUAROT__DGEMM_EXACT_KC 256
static void quarot__dgemm_select_exact(quarot__dgemm_cfg* g) {
    quarot_isa best = quarot_isa_best();
    quarot__dgemm_select(best, g);
    g->kc = QUAROT__DGEMM_EXACT_KC;
    g->narrow = NULL;                  // the narrow kernels use FMA
    switch (best) {
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512: g->kernel = quarot__dgemm_kernel_avx512_exact; return;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2: g->kernel = quarot__dgemm_kernel_avx2_exact; return;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON: g->kernel = quarot__dgemm_kernel_neon_exact; return;
#endif
        default: return;   // the SSE2 and scalar kernels have no FMA
    }
}

// >>linalg
// Householder QR, row-major, blocked (LAPACK dgeqrf/dorgqr style) with fixed operation order:
//   column j of a panel:  x = A[j:m][j], beta = -sign(x0)*||x||, v = x/(x0 - beta) (v0 = 1),
//                         tau = (beta - x0)/beta, H_j = I - tau*v*v^T applied to the panel's columns;
//   panel of NB reflectors: H_j0...H_j0+b-1 = I - V*T*V^T (T upper triangular, dlarft), and the
//   trailing columns get A2 <- A2 - V*(T^T*(V^T*A2)) through the FMA-free fixed-KC DGEMM.
// Q = H_0...H_{n-1}*[I;0] is built backwards by panels the same way; then the signs are moved so that
// diag(R) >= 0. No step depends on the ISA or the thread split, so results are bit-identical everywhere.
#define QUAROT__QR_NB 32

// y[0:n] <- y + s*x, one product and one add per element (contraction is off in the implementation).
static void quarot__axpy_f64(int64_t n, double s, const double* QUAROT__RESTRICT x, double* QUAROT__RESTRICT y) {
    int64_t i;
    for (i = 0; i < n; ++i) y[i] = y[i] + s * x[i];
}

// Unblocked factorization of the panel A[j0:m][j0:j0+b]: R on and above the diagonal, v_j below it
// (v_j[0] = 1 implied), tau[j0:j0+b]. w is scratch of b doubles.
static void quarot__qr_panel(int64_t m, int64_t j0, int64_t b, double* a, int64_t lda, double* tau, double* w) {
    int64_t i, j, nt;
    for (j = j0; j < j0 + b; ++j) {
        double amax = 0.0, ss = 0.0, xnorm, x0 = a[j * lda + j], beta, den;
        // ||x|| with scaling against overflow / underflow: amax * sqrt(sum (x_i / amax)^2)
        for (i = j; i < m; ++i) { double t = fabs(a[i * lda + j]); if (t > amax) amax = t; }
        if (amax == 0.0) { tau[j] = 0.0; continue; }            // zero column: H = I, R_jj = 0
        for (i = j; i < m; ++i) { double t = a[i * lda + j] / amax; ss += t * t; }
        xnorm = amax * sqrt(ss);
        beta = x0 >= 0.0 ? -xnorm : xnorm;
        tau[j] = (beta - x0) / beta;
        den = x0 - beta;                                          // |den| = |x0| + ||x|| > 0
        for (i = j + 1; i < m; ++i) a[i * lda + j] /= den;
        a[j * lda + j] = beta;
        // the panel's columns c = j+1..j0+b-1:  w = A[j][c] + sum_{i>j} v_i A[i][c];  A[i][c] -= tau v_i w
        nt = j0 + b - j - 1;
        if (nt == 0) continue;
        memcpy(w, a + j * lda + j + 1, (size_t)nt * sizeof(double));
        for (i = j + 1; i < m; ++i) quarot__axpy_f64(nt, a[i * lda + j], a + i * lda + j + 1, w);
        quarot__axpy_f64(nt, -tau[j], w, a + j * lda + j + 1);
        for (i = j + 1; i < m; ++i) quarot__axpy_f64(nt, -(tau[j] * a[i * lda + j]), w, a + i * lda + j + 1);
    }
}

// The panel's V [m-j0][b] with explicit zeros above the unit diagonal, and T [b][b] (upper) with
// H_j0...H_j0+b-1 = I - V*T*V^T:  T[r][r] = tau_r, T[0:r][r] = -tau_r * T[0:r][0:r] * (V[:,0:r]^T v_r).
static void quarot__qr_vt(int64_t m, int64_t j0, int64_t b, const double* a, int64_t lda, const double* tau,
                          double* v, double* t, double* z) {
    int64_t i, r, q, qq, rows = m - j0;
    for (i = 0; i < rows; ++i)
        for (r = 0; r < b; ++r)
            v[i * b + r] = i < r ? 0.0 : i == r ? 1.0 : a[(j0 + i) * lda + j0 + r];
    for (r = 0; r < b; ++r) {
        for (q = 0; q < b; ++q) t[q * b + r] = 0.0;
        t[r * b + r] = tau[j0 + r];
        if (r == 0) continue;
        for (q = 0; q < r; ++q) z[q] = 0.0;
        for (i = r; i < rows; ++i)                                // z = V[:,0:r]^T v_r, i ascending
            for (q = 0; q < r; ++q) z[q] += v[i * b + q] * v[i * b + r];
        for (q = 0; q < r; ++q) z[q] = -tau[j0 + r] * z[q];
        for (q = 0; q < r; ++q) {                                 // T[q][r] = sum_{qq=q}^{r-1} T[q][qq] z[qq]
            double s = 0.0;
            for (qq = q; qq < r; ++qq) s += t[q * b + qq] * z[qq];
            t[q * b + r] = s;
        }
    }
}

// M [rows][cols] (row stride ldm) <- (I - V*T'*V^T) * M with T' = T^T (trans_t) or T, through the exact
// DGEMM: W^T = M^T V [cols][b];  W'^T[c][r] = sum_q T'[r][q] W^T[c][q] (q ascending);  M -= V W'.
static quarot_result quarot__qr_apply_block(const quarot__dgemm_cfg* cfg, int trans_t, int64_t rows, int64_t cols,
                                            int64_t b, const double* v, const double* t, double* m, int64_t ldm,
                                            double* wt, double* z, const quarot_env* env) {
    int64_t c, r, q;
    quarot_result res = quarot__gemm_cfg_d(cfg, 1, 0, cols, b, rows, 1.0, m, ldm, v, b, 0.0, wt, b, env);
    if (res != QUAROT_OK) return res;
    for (c = 0; c < cols; ++c) {
        double* w = wt + c * b;
        for (r = 0; r < b; ++r) {
            double s = 0.0;
            if (trans_t) { for (q = 0; q <= r; ++q) s += t[q * b + r] * w[q]; }   // (T^T)[r][q] = T[q][r]
            else         { for (q = r; q < b; ++q) s += t[r * b + q] * w[q]; }
            z[r] = s;
        }
        memcpy(w, z, (size_t)b * sizeof(double));
    }
    return quarot__gemm_cfg_d(cfg, 0, 1, rows, cols, b, -1.0, v, b, wt, b, 1.0, m, ldm, env);
}

// QR after the argument checks; a is overwritten by R, q (may be NULL) gets Q.
static quarot_result quarot__qr_run(int64_t m, int64_t n, double* a, int64_t lda, double* q, int64_t ldq,
                                    const quarot_env* env) {
    quarot__dgemm_cfg cfg;
    quarot_result res = QUAROT_OK;
    const int64_t nb = QUAROT__QR_NB;
    double *work, *tau, *z, *t, *v, *wt;
    int64_t i, j, j0, b;
    size_t elems, bytes;
    // tau [n], z [nb], T [nb][nb], V [m][nb], W^T [n][nb]
    if (!quarot__mul_size((size_t)(m + n), (size_t)nb, &elems) || elems > SIZE_MAX / 16 ||
        !quarot__mul_size(elems + (size_t)(n + nb + nb * nb), sizeof(double), &bytes))
        return QUAROT_ERR_OVERFLOW;
    work = (double*)quarot_env_alloc(env, bytes);
    if (!work) return QUAROT_ERR_OUT_OF_MEMORY;
    tau = work; z = tau + n; t = z + nb; v = t + nb * nb; wt = v + m * nb;
    quarot__dgemm_select_exact(&cfg);
    for (j0 = 0; j0 < n && res == QUAROT_OK; j0 += nb) {
        b = quarot__gemm_min(nb, n - j0);
        quarot__qr_panel(m, j0, b, a, lda, tau, z);
        if (j0 + b == n) break;
        quarot__qr_vt(m, j0, b, a, lda, tau, v, t, z);
        res = quarot__qr_apply_block(&cfg, 1, m - j0, n - j0 - b, b, v, t, a + j0 * lda + j0 + b, lda, wt, z, env);
    }
    if (q && res == QUAROT_OK) {
        for (i = 0; i < m; ++i) {
            memset(q + i * ldq, 0, (size_t)n * sizeof(double));
            if (i < n) q[i * ldq + i] = 1.0;
        }
        // backwards by panels: before panel j0 is applied, rows j0.. of Q are zero left of column j0
        for (j0 = (n - 1) / nb * nb; j0 >= 0 && res == QUAROT_OK; j0 -= nb) {
            b = quarot__gemm_min(nb, n - j0);
            quarot__qr_vt(m, j0, b, a, lda, tau, v, t, z);
            res = quarot__qr_apply_block(&cfg, 0, m - j0, n - j0, b, v, t, q + j0 * ldq + j0, ldq, wt, z, env);
        }
    }
    quarot_env_free(env, work);
    if (res != QUAROT_OK) return res;
    // diag(R) >= 0: R <- S*R, Q <- Q*S with S = diag(sign(R_jj)); then clear below the diagonal.
    for (j = 0; j < n; ++j) {
        if (a[j * lda + j] < 0.0) {
            for (i = j; i < n; ++i) a[j * lda + i] = -a[j * lda + i];
            if (q) for (i = 0; i < m; ++i) q[i * ldq + j] = -q[i * ldq + j];
        }
        for (i = j + 1; i < m; ++i) a[i * lda + j] = 0.0;
    }
    return QUAROT_OK;
}

static int quarot__all_finite_f64(int64_t rows, int64_t cols, const double* x, int64_t ld) {
    int64_t i, j;
    for (i = 0; i < rows; ++i)
        for (j = 0; j < cols; ++j) {
            double t = x[i * ld + j];
            if (t - t != 0.0) return 0;                           // NaN or Inf
        }
    return 1;
}

QUAROT_API quarot_result quarot_qr_f64(int64_t m, int64_t n, double* a, int64_t lda,
                                       double* q, int64_t ldq, const quarot_env* env) {
    quarot_result r;
    if (n < 1 || m < n || !a || lda < n || (q && ldq < n)) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot__gemm_check_mat(a, m, n, lda, sizeof(double), 1);
    if (r == QUAROT_OK && q) r = quarot__gemm_check_mat(q, m, n, ldq, sizeof(double), 1);
    if (r != QUAROT_OK) return r;
    if (!quarot__all_finite_f64(m, n, a, lda)) return QUAROT_ERR_NONFINITE;
    return quarot__qr_run(m, n, a, lda, q, ldq, env);
}

QUAROT_API quarot_result quarot_random_orthogonal_f64(int64_t n, uint64_t seed, double* q, int64_t ldq,
                                                      const quarot_env* env) {
    quarot_rng rng;
    quarot_result r;
    double* g;
    size_t bytes;
    int64_t i;
    if (n < 1 || !q || ldq < n) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot__gemm_check_mat(q, n, n, ldq, sizeof(double), 1);
    if (r != QUAROT_OK) return r;
    if (!quarot__mul_size((size_t)n, (size_t)n, &bytes) || !quarot__mul_size(bytes, sizeof(double), &bytes))
        return QUAROT_ERR_OVERFLOW;
    g = (double*)quarot_env_alloc(env, bytes);
    if (!g) return QUAROT_ERR_OUT_OF_MEMORY;
    quarot_rng_seed(&rng, seed);
    for (i = 0; i < n * n; ++i) g[i] = quarot_rng_normal(&rng);
    r = quarot__qr_run(n, n, g, n, q, ldq, env);
    quarot_env_free(env, g);
    return r;
}

// Newton-Schulz polar factor: X0 = C/s, then per step G = X^T X, residual max|G - I|, X <- X*Y with
// Y = 2I - G while sigma_min(X) < 1/2 (fast start, tracked by power iteration on G), else (3I - G)/2.
// G is symmetric: row panels I of bs rows compute G[I][I:n] only (panel I is paired with panel
// nb-1-I so every task has the same work), then the lower triangle is copied from the upper one. The
// diagonal of G (column norms of X) is summed again in double: it sets the accuracy of the residual
// and of Y's diagonal, which is what drives the f32 iteration to ~1e-7 instead of ~sqrt(n)*2^-24.
// The code is >>polar_body, compiled for double (quarot__polar_d) and float (quarot__polar_s).
#define QUAROT__G(name) QUAROT__CAT(name, QUAROT__S)   // name##<s|d>: quarot__gemm_run_s
#define QUAROT__TEMPLATE QUAROT__TEMPLATE_POLAR
#define QUAROT__T double
#define QUAROT__S d
#define QUAROT__GCFG quarot__dgemm_cfg
#define QUAROT__GSELECT quarot__dgemm_select
#include QUAROT_HEADER_FILE   // >>polar_body
#undef QUAROT__GSELECT
#undef QUAROT__GCFG
#undef QUAROT__S
#undef QUAROT__T
#define QUAROT__T float
#define QUAROT__S s
#define QUAROT__GCFG quarot__sgemm_cfg
#define QUAROT__GSELECT quarot__sgemm_select
#include QUAROT_HEADER_FILE   // >>polar_body
#undef QUAROT__GSELECT
#undef QUAROT__GCFG
#undef QUAROT__S
#undef QUAROT__T
#undef QUAROT__TEMPLATE
#undef QUAROT__G

QUAROT_API quarot_result quarot_polar_newton_schulz_f64(int64_t n, const double* c, int64_t ldc,
                                                        double* u, int64_t ldu, const quarot_polar_desc* d,
                                                        quarot_polar_info* info, const quarot_env* env) {
    return quarot__polar_d(n, c, ldc, u, ldu, d, info, env, 1e-6, 75, 1.16415321826934814e-10);   // 2^20 eps
}

QUAROT_API quarot_result quarot_polar_newton_schulz_f32(int64_t n, const float* c, int64_t ldc,
                                                        float* u, int64_t ldu, const quarot_polar_desc* d,
                                                        quarot_polar_info* info, const quarot_env* env) {
    return quarot__polar_s(n, c, ldc, u, ldu, d, info, env, 2e-6, 36, 6.103515625e-05);            // 2^10 eps
}

// >>quant
// RTN, per group: s from the (clipped) range, k = rne(clamp(x/s, klo, khi)), x^ = f32(k)*s, where the
// zero point is folded into the range: symmetric klo = -2^(b-1), khi = 2^(b-1)-1; asymmetric
// klo = -z, khi = 2^b-1-z, and the stored code is k (symmetric) or k + z - 2^(b-1) (asymmetric).
// Statistics are integer maxima over the |x| bit patterns (for finite floats their order is the
// float order), which also flags NaN/Inf in the same pass; SIMD versions of integer maxima are exact.
// Kernels (_ref, _sse2, _avx2, _neon) exist for the statistics and the in-place fake quantization,
// the two passes of the per-token hot path; GCC at -O2 does not vectorize the scalar loops.
#define QUAROT__QFLT_MAX 3.40282346638528859812e+38   // FLT_MAX, without <float.h>

typedef struct quarot__qspec {
    int asym, search;
    double clip;          // c in (0, 1]
    double kmin, kmax;    // code range before the shift: symmetric [-2^(b-1), 2^(b-1)-1], asymmetric [0, 2^b-1]
    double half;          // 2^(b-1): asymmetric codes are stored as q - half
    quarot_isa isa;       // resolved: the kernels of the quantizer and of GPTQ dispatch on it
} quarot__qspec;

// Quant kernels: the scalar reference, SSE2 (the x86-64 baseline), AVX2 and NEON. Each dispatch
// takes the call's resolved quarot_isa: AVX-512 runs the AVX2 kernels (GPTQ's blocked updates have
// 512-bit versions of their own), or the SSE2 ones where AVX2 is switched off.

// Validate a quant desc (NULL = defaults) for rows of length cols; *gs gets the group length.
static quarot_result quarot__qspec_init(const quarot_quant_desc* d, int64_t cols, quarot__qspec* sp, int64_t* gs) {
    quarot_quant_desc dd;
    quarot_isa isa;
    quarot_result res;
    int b;
    if (d) dd = *d; else memset(&dd, 0, sizeof dd);
    if ((res = quarot__isa_resolve(dd.isa, &isa)) != QUAROT_OK) return res;   // out of range / not compiled in
    sp->isa = isa;
    b = dd.bits == 0 ? 4 : dd.bits;
    if (b < 2 || b > 8) return QUAROT_ERR_INVALID_ARGUMENT;
    if (dd.asymmetric != 0 && dd.asymmetric != 1) return QUAROT_ERR_INVALID_ARGUMENT;
    if (dd.clip_search < 0 || dd.clip_search > 2) return QUAROT_ERR_INVALID_ARGUMENT;
    if (dd.clip_ratio == 0.0f) dd.clip_ratio = 1.0f;
    if (!(dd.clip_ratio > 0.0f && dd.clip_ratio <= 1.0f)) return QUAROT_ERR_INVALID_ARGUMENT;   // NaN too
    if (dd.group_size < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    if (dd.group_size > 0 && cols > 0 && cols % dd.group_size != 0) return QUAROT_ERR_INVALID_ARGUMENT;
    *gs = dd.group_size > 0 ? dd.group_size : cols;
    sp->asym = dd.asymmetric;
    sp->search = dd.clip_search;
    sp->clip = (double)dd.clip_ratio;
    sp->half = (double)(1 << (b - 1));
    sp->kmin = dd.asymmetric ? 0.0 : -sp->half;
    sp->kmax = dd.asymmetric ? (double)((1 << b) - 1) : sp->half - 1.0;
    return QUAROT_OK;
}

// Shared checks of a strided [rows][stride] float array.
static quarot_result quarot__qshape_check(int64_t rows, int64_t cols, int64_t stride) {
    if (rows < 0 || cols < 0 || stride < cols) return QUAROT_ERR_INVALID_ARGUMENT;
    if (rows > 1 && stride > (INT64_MAX - cols) / (rows - 1)) return QUAROT_ERR_OVERFLOW;
    return QUAROT_OK;
}

// Round half to even of r after clamping it to [lo, hi] (integers, |.| <= 2^9). Clamping first is
// the same as clamping after (rounding is monotone and fixes integers) and makes the truncating
// conversion safe. floor = trunc - (r < trunc); compare r with floor + 0.5 exactly.
static int32_t quarot__rne_clamp(double r, double lo, double hi) {
    int32_t t, f;
    double h;
    r = r < lo ? lo : r;
    r = r > hi ? hi : r;
    t = (int32_t)r;
    f = t - (int32_t)(r < (double)t);
    h = (double)f + 0.5;
    return f + (int32_t)((r > h) | ((r == h) & (f & 1)));
}

// pmax = max(x, 0), nmax = max(-x, 0) over n floats; returns 0 (maxima then meaningless) if any is
// NaN/Inf. p, m: running maxima of the bit patterns (the SIMD kernels pass their partial results).
static int quarot__qstats_f32_ref(const float* x, int64_t n, uint32_t p, uint32_t m, float* pmax, float* nmax) {
    int64_t j;
    for (j = 0; j < n; ++j) {
        uint32_t u, a, ap, an;
        memcpy(&u, x + j, 4);
        a = u & 0x7fffffffu;
        ap = (u >> 31) ? 0u : a;
        an = (u >> 31) ? a : 0u;
        p = ap > p ? ap : p;
        m = an > m ? an : m;
    }
    *pmax = quarot__bits_to_f32(p);
    *nmax = quarot__bits_to_f32(m);
    return p < 0x7f800000u && m < 0x7f800000u;
}

// Asymmetric zero point for scale s: z = clamp(rne(-lo/s), 0, 2^b-1).
static double quarot__qzero(const quarot__qspec* sp, double lo, float s) {
    return (double)quarot__rne_clamp(-lo / (double)s, 0.0, sp->kmax);
}

// Largest |k| a group can produce: 2^(b-1) symmetric, max(z, 2^b-1-z) asymmetric.
static float quarot__qlevel(const quarot__qspec* sp, double z) {
    if (!sp->asym) return (float)sp->half;
    return (float)(z > sp->kmax - z ? z : sp->kmax - z);
}

// Scale (returned) and zero point *z of a group with statistics pmax, nmax under clip ratio c.
static float quarot__qparams(const quarot__qspec* sp, double c, float pmax, float nmax, double* z) {
    double lo = 0.0;
    float s;
    int guard;
    if (!sp->asym) {
        float m = pmax > nmax ? pmax : nmax;
        s = (float)(c * (double)m / sp->kmax);
    } else {
        double hi = c * (double)pmax;
        lo = -(c * (double)nmax);
        s = (float)((hi - lo) / sp->kmax);
    }
    if (!(s > 0.0f)) s = 1.0f;
    *z = sp->asym ? quarot__qzero(sp, lo, s) : 0.0;
    // Only for |x| near FLT_MAX: lower s until every level k*s is finite.
    if ((double)(quarot__qlevel(sp, *z) * s) > QUAROT__QFLT_MAX) {
        s = (float)(QUAROT__QFLT_MAX / (double)quarot__qlevel(sp, *z));
        for (guard = 0; guard < 64; ++guard) {
            if (sp->asym) *z = quarot__qzero(sp, lo, s);
            if ((double)(quarot__qlevel(sp, *z) * s) <= QUAROT__QFLT_MAX) break;
            s = nextafterf(s, 0.0f);
        }
    }
    return s;
}

// Range of k = q - z for a group.
static void quarot__qrange(const quarot__qspec* sp, double z, double* klo, double* khi) {
    *klo = sp->asym ? -z : sp->kmin;
    *khi = sp->asym ? sp->kmax - z : sp->kmax;
}

// The clip-search objective of a group for one candidate scale: sum((x^ - x)^2) (search 1), or
// sum |x^ - x|^2.4 (search 2, QuaRot's norm; pow of exact doubles, so the same on every platform
// with a correctly rounded or faithful libm up to its last bit), summed in element order. x^ comes
// from the quantizer's own kernel (quarot__qapply, the same bits on every kernel) on a copy of up to
// 256 elements at a time; only the subtraction and the sum are scalar.
static void quarot__qapply(quarot_isa isa, float* x, int64_t n, float s, double klo, double khi);
// The sum stops once it reaches bound (its terms are >= 0, so a rounded partial sum never decreases:
// the caller's err < bound comes out the same as with the whole sum); bound = HUGE_VAL sums all.
static double quarot__qerr(const float* x, int64_t n, float s, double klo, double khi, int search, quarot_isa isa,
                           double bound) {
    float y[256];
    double e = 0.0;
    int64_t j0, j, c;
    for (j0 = 0; j0 < n; j0 += c) {
        c = n - j0 < 256 ? n - j0 : 256;
        memcpy(y, x + j0, (size_t)c * sizeof(float));
        quarot__qapply(isa, y, c, s, klo, khi);
        for (j = 0; j < c; ++j) {
            const double dif = (double)y[j] - (double)x[j0 + j];
            e += search == 2 ? (dif != 0.0 ? pow(fabs(dif), 2.4) : 0.0) : dif * dif;
            if (e >= bound) return e;
        }
    }
    return e;
}

// Scale and zero point of one group: clip ratio sp->clip, or the best of the clip-search grid.
static float quarot__qfit(const quarot__qspec* sp, const float* x, int64_t n, float pmax, float nmax, double* z) {
    double best_err = 0.0, klo, khi, zk, err;
    float best_s, s;
    int k;
    best_s = quarot__qparams(sp, sp->clip, pmax, nmax, z);
    if (!sp->search) return best_s;
    quarot__qrange(sp, *z, &klo, &khi);
    best_err = quarot__qerr(x, n, best_s, klo, khi, sp->search, sp->isa, HUGE_VAL);
    for (k = 1; k <= (sp->search == 2 ? 79 : 50); ++k) {
        s = quarot__qparams(sp, sp->clip * (double)(100 - k) / 100.0, pmax, nmax, &zk);
        quarot__qrange(sp, zk, &klo, &khi);
        err = quarot__qerr(x, n, s, klo, khi, sp->search, sp->isa, best_err);
        if (err < best_err) { best_err = err; best_s = s; *z = zk; }
    }
    return best_s;
}

// The hot loop: x <- f32(k)*s in place (one pointer, so the compiler needs no alias checks).
static void quarot__qapply_f32_ref(float* x, int64_t n, float s, double klo, double khi) {
    double sd = (double)s;
    int64_t j;
    for (j = 0; j < n; ++j) x[j] = (float)quarot__rne_clamp((double)x[j] / sd, klo, khi) * s;
}

#if defined(QUAROT__HAVE_SSE2)
// SSE2 has no rounding instruction with an explicit mode, so this follows the scalar steps: truncate
// (cvttpd2dq), floor = trunc - (r < trunc), then up when r > floor + 0.5, or == and floor is odd.
// The 64-bit compare masks are narrowed to 32-bit lanes to meet the int32 results.
static __m128i quarot__qrne2_sse2(__m128d r) {
    const __m128d half = _mm_set1_pd(0.5);
    __m128i t = _mm_cvttpd_epi32(r), f, gt, eq, odd;
    __m128d fd, h;
    f = _mm_add_epi32(t, _mm_shuffle_epi32(_mm_castpd_si128(_mm_cmplt_pd(r, _mm_cvtepi32_pd(t))),
                                           _MM_SHUFFLE(3, 3, 2, 0)));
    fd = _mm_cvtepi32_pd(f);
    h = _mm_add_pd(fd, half);
    gt = _mm_shuffle_epi32(_mm_castpd_si128(_mm_cmpgt_pd(r, h)), _MM_SHUFFLE(3, 3, 2, 0));
    eq = _mm_shuffle_epi32(_mm_castpd_si128(_mm_cmpeq_pd(r, h)), _MM_SHUFFLE(3, 3, 2, 0));
    odd = _mm_and_si128(f, _mm_set1_epi32(1));
    return _mm_add_epi32(f, _mm_or_si128(_mm_and_si128(gt, _mm_set1_epi32(1)), _mm_and_si128(eq, odd)));
}

static void quarot__qapply_f32_sse2(float* x, int64_t n, float s, double klo, double khi) {
    const __m128d sd = _mm_set1_pd((double)s), lo = _mm_set1_pd(klo), hi = _mm_set1_pd(khi);
    const __m128 sv = _mm_set1_ps(s);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m128 v = _mm_loadu_ps(x + j);
        __m128d a = _mm_div_pd(_mm_cvtps_pd(v), sd);
        __m128d b = _mm_div_pd(_mm_cvtps_pd(_mm_movehl_ps(v, v)), sd);
        a = _mm_min_pd(_mm_max_pd(a, lo), hi);
        b = _mm_min_pd(_mm_max_pd(b, lo), hi);
        v = _mm_cvtepi32_ps(_mm_unpacklo_epi64(quarot__qrne2_sse2(a), quarot__qrne2_sse2(b)));
        _mm_storeu_ps(x + j, _mm_mul_ps(v, sv));
    }
    quarot__qapply_f32_ref(x + j, n - j, s, klo, khi);
}

// The maxima stay below 2^31, so SSE2's signed compare serves as the unsigned one.
static int quarot__qstats_f32_sse2(const float* x, int64_t n, float* pmax, float* nmax) {
    const __m128i absmask = _mm_set1_epi32(0x7fffffff);
    __m128i p = _mm_setzero_si128(), m = _mm_setzero_si128();
    uint32_t pv[4], mv[4], pr = 0, mr = 0;
    int64_t j = 0;
    int l;
    for (; j + 4 <= n; j += 4) {
        __m128i u = _mm_loadu_si128((const __m128i*)(const void*)(x + j));
        __m128i a = _mm_and_si128(u, absmask), neg = _mm_srai_epi32(u, 31);
        __m128i ap = _mm_andnot_si128(neg, a), an = _mm_and_si128(neg, a), gp, gm;
        gp = _mm_cmpgt_epi32(ap, p);
        gm = _mm_cmpgt_epi32(an, m);
        p = _mm_or_si128(_mm_and_si128(gp, ap), _mm_andnot_si128(gp, p));
        m = _mm_or_si128(_mm_and_si128(gm, an), _mm_andnot_si128(gm, m));
    }
    _mm_storeu_si128((__m128i*)(void*)pv, p);
    _mm_storeu_si128((__m128i*)(void*)mv, m);
    for (l = 0; l < 4; ++l) {
        pr = pv[l] > pr ? pv[l] : pr;
        mr = mv[l] > mr ? mv[l] : mr;
    }
    return quarot__qstats_f32_ref(x + j, n - j, pr, mr, pmax, nmax);
}
#endif

#if defined(QUAROT__HAVE_AVX2)
// AVX2: 8 floats per step as two halves of 4 doubles. _mm256_round_pd with an explicit
// round-to-nearest-even mode equals the scalar rne; the integer-valued doubles go through int32 (exact)
// to float, as in the scalar code (so -0 becomes +0 there too).
static void quarot__qapply_f32_avx2(float* x, int64_t n, float s, double klo, double khi) {
    const __m256d sd = _mm256_set1_pd((double)s), lo = _mm256_set1_pd(klo), hi = _mm256_set1_pd(khi);
    const __m256 sv = _mm256_set1_ps(s);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        __m256d a = _mm256_div_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), sd);
        __m256d b = _mm256_div_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), sd);
        __m128i ia, ib;
        a = _mm256_min_pd(_mm256_max_pd(a, lo), hi);
        b = _mm256_min_pd(_mm256_max_pd(b, lo), hi);
        ia = _mm256_cvtpd_epi32(_mm256_round_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        ib = _mm256_cvtpd_epi32(_mm256_round_pd(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        v = _mm256_cvtepi32_ps(_mm256_insertf128_si256(_mm256_castsi128_si256(ia), ib, 1));
        _mm256_storeu_ps(x + j, _mm256_mul_ps(v, sv));
    }
    quarot__qapply_f32_ref(x + j, n - j, s, klo, khi);
}

// Per lane: |x| bits, split by the sign (srai gives all ones for negatives), unsigned maxima; the
// lanes are reduced at the end and the tail goes through the scalar kernel with those maxima.
static int quarot__qstats_f32_avx2(const float* x, int64_t n, float* pmax, float* nmax) {
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
    __m256i p = _mm256_setzero_si256(), m = _mm256_setzero_si256();
    uint32_t pv[8], mv[8], pr = 0, mr = 0;
    int64_t j = 0;
    int l;
    for (; j + 8 <= n; j += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i*)(const void*)(x + j));
        __m256i a = _mm256_and_si256(u, absmask), neg = _mm256_srai_epi32(u, 31);
        p = _mm256_max_epu32(p, _mm256_andnot_si256(neg, a));
        m = _mm256_max_epu32(m, _mm256_and_si256(neg, a));
    }
    _mm256_storeu_si256((__m256i*)(void*)pv, p);
    _mm256_storeu_si256((__m256i*)(void*)mv, m);
    for (l = 0; l < 8; ++l) {
        pr = pv[l] > pr ? pv[l] : pr;
        mr = mv[l] > mr ? mv[l] : mr;
    }
    return quarot__qstats_f32_ref(x + j, n - j, pr, mr, pmax, nmax);
}
#endif

#if defined(QUAROT__HAVE_NEON)
// NEON (AArch64): 4 floats per step as two halves of 2 doubles. FCVTNS (vcvtnq_s64_f64) converts
// with round to nearest, ties to even, whatever the FPCR mode; the integers go to float through int32
// as in the scalar code.
static void quarot__qapply_f32_neon(float* x, int64_t n, float s, double klo, double khi) {
    const float64x2_t sd = vdupq_n_f64((double)s), lo = vdupq_n_f64(klo), hi = vdupq_n_f64(khi);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        float32x4_t v = vld1q_f32(x + j);
        float64x2_t a = vdivq_f64(vcvt_f64_f32(vget_low_f32(v)), sd);
        float64x2_t b = vdivq_f64(vcvt_high_f64_f32(v), sd);
        int32x4_t k;
        a = vminq_f64(vmaxq_f64(a, lo), hi);
        b = vminq_f64(vmaxq_f64(b, lo), hi);
        k = vcombine_s32(vmovn_s64(vcvtnq_s64_f64(a)), vmovn_s64(vcvtnq_s64_f64(b)));
        vst1q_f32(x + j, vmulq_n_f32(vcvtq_f32_s32(k), s));
    }
    quarot__qapply_f32_ref(x + j, n - j, s, klo, khi);
}

static int quarot__qstats_f32_neon(const float* x, int64_t n, float* pmax, float* nmax) {
    const uint32x4_t absmask = vdupq_n_u32(0x7fffffffu);
    uint32x4_t p = vdupq_n_u32(0), m = vdupq_n_u32(0);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(x + j));
        uint32x4_t a = vandq_u32(u, absmask);
        uint32x4_t neg = vreinterpretq_u32_s32(vshrq_n_s32(vreinterpretq_s32_u32(u), 31));
        p = vmaxq_u32(p, vbicq_u32(a, neg));
        m = vmaxq_u32(m, vandq_u32(a, neg));
    }
    return quarot__qstats_f32_ref(x + j, n - j, vmaxvq_u32(p), vmaxvq_u32(m), pmax, nmax);
}
#endif

// Dispatch by the resolved isa (the section notes).
static int quarot__qstats(quarot_isa isa, const float* x, int64_t n, float* pmax, float* nmax) {
#if defined(QUAROT__HAVE_AVX2)
    if (isa == QUAROT_ISA_AVX2 || isa == QUAROT_ISA_AVX512) return quarot__qstats_f32_avx2(x, n, pmax, nmax);
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (isa != QUAROT_ISA_REF) return quarot__qstats_f32_sse2(x, n, pmax, nmax);
#endif
#if defined(QUAROT__HAVE_NEON)
    if (isa == QUAROT_ISA_NEON) return quarot__qstats_f32_neon(x, n, pmax, nmax);
#endif
    (void)isa;
    return quarot__qstats_f32_ref(x, n, 0u, 0u, pmax, nmax);
}

static void quarot__qapply(quarot_isa isa, float* x, int64_t n, float s, double klo, double khi) {
#if defined(QUAROT__HAVE_AVX2)
    if (isa == QUAROT_ISA_AVX2 || isa == QUAROT_ISA_AVX512) { quarot__qapply_f32_avx2(x, n, s, klo, khi); return; }
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (isa != QUAROT_ISA_REF) { quarot__qapply_f32_sse2(x, n, s, klo, khi); return; }
#endif
#if defined(QUAROT__HAVE_NEON)
    if (isa == QUAROT_ISA_NEON) { quarot__qapply_f32_neon(x, n, s, klo, khi); return; }
#endif
    (void)isa;
    quarot__qapply_f32_ref(x, n, s, klo, khi);
}

// Integer codes for quarot_quantize_f32 (scalar): the same k, plus the code offset.
static void quarot__qapply_codes(const float* QUAROT__RESTRICT x, int8_t* QUAROT__RESTRICT q, int64_t n,
                                 float s, double klo, double khi, int32_t off) {
    double sd = (double)s;
    int64_t j;
    for (j = 0; j < n; ++j) q[j] = (int8_t)(quarot__rne_clamp((double)x[j] / sd, klo, khi) + off);
}

QUAROT_API quarot_result quarot_fake_quant_f32(float* x, int64_t rows, int64_t cols, int64_t stride,
                                               const quarot_quant_desc* d) {
    quarot__qspec sp;
    int64_t gs, r, g0;
    quarot_result res;
    if (!x) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((res = quarot__qshape_check(rows, cols, stride)) != QUAROT_OK) return res;
    if ((res = quarot__qspec_init(d, cols, &sp, &gs)) != QUAROT_OK) return res;
    if (cols == 0) return QUAROT_OK;
    // Per row: one statistics pass over the whole row (it is the finiteness check, and with a single
    // group already the group's statistics), then per group: statistics, scale, quantize in place.
    for (r = 0; r < rows; ++r) {
        float* row = x + r * stride;
        float pmax, nmax, s;
        double z, klo, khi;
        if (!quarot__qstats(sp.isa, row, cols, &pmax, &nmax)) return QUAROT_ERR_NONFINITE;   // before any write
        for (g0 = 0; g0 < cols; g0 += gs) {
            if (gs != cols) quarot__qstats(sp.isa, row + g0, gs, &pmax, &nmax);
            s = quarot__qfit(&sp, row + g0, gs, pmax, nmax, &z);
            quarot__qrange(&sp, z, &klo, &khi);
            quarot__qapply(sp.isa, row + g0, gs, s, klo, khi);
        }
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_quantize_f32(const float* x, int64_t rows, int64_t cols, int64_t stride,
                                             const quarot_quant_desc* d, int8_t* q, float* scales, float* zeros) {
    quarot__qspec sp;
    int64_t gs, groups, r, g;
    quarot_result res;
    if (!x || !q || !scales) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((res = quarot__qshape_check(rows, cols, stride)) != QUAROT_OK) return res;
    if ((res = quarot__qspec_init(d, cols, &sp, &gs)) != QUAROT_OK) return res;
    if (sp.asym && !zeros) return QUAROT_ERR_INVALID_ARGUMENT;
    if (cols == 0) return QUAROT_OK;
    // The same steps as quarot_fake_quant_f32 (same statistics, scales and k), writing codes
    // q[r][cols] and parameters [r][groups] instead of x^.
    groups = cols / gs;
    for (r = 0; r < rows; ++r) {
        const float* row = x + r * stride;
        float pmax, nmax, s;
        double z, klo, khi;
        if (!quarot__qstats(sp.isa, row, cols, &pmax, &nmax)) return QUAROT_ERR_NONFINITE;
        for (g = 0; g < groups; ++g) {
            const float* v = row + g * gs;
            if (gs != cols) quarot__qstats(sp.isa, v, gs, &pmax, &nmax);
            s = quarot__qfit(&sp, v, gs, pmax, nmax, &z);
            quarot__qrange(&sp, z, &klo, &khi);
            quarot__qapply_codes(v, q + r * cols + g * gs, gs, s, klo, khi,
                                 sp.asym ? (int32_t)(z - sp.half) : 0);
            scales[r * groups + g] = s;
            if (zeros) zeros[r * groups + g] = sp.asym ? (float)(z - sp.half) : 0.0f;
        }
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_dequantize_f32(const int8_t* q, const float* scales, const float* zeros,
                                               int64_t rows, int64_t cols, const quarot_quant_desc* d,
                                               float* x, int64_t stride) {
    quarot__qspec sp;
    int64_t gs, groups, r, g, j;
    quarot_result res;
    if (!q || !scales || !x) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((res = quarot__qshape_check(rows, cols, stride)) != QUAROT_OK) return res;
    if ((res = quarot__qspec_init(d, cols, &sp, &gs)) != QUAROT_OK) return res;
    if (sp.asym && !zeros) return QUAROT_ERR_INVALID_ARGUMENT;
    if (cols == 0) return QUAROT_OK;
    // x^ = (f32(code) - zero) * scale: code - zero is the integer k exactly (both are small integers
    // in float), so this is the product f32(k)*s of the fake quantizer, bit for bit.
    groups = cols / gs;
    for (r = 0; r < rows; ++r) {
        for (g = 0; g < groups; ++g) {
            const int8_t* c = q + r * cols + g * gs;
            float* y = x + r * stride + g * gs;
            float s = scales[r * groups + g], zf = zeros ? zeros[r * groups + g] : 0.0f;
            for (j = 0; j < gs; ++j) y[j] = ((float)c[j] - zf) * s;
        }
    }
    return QUAROT_OK;
}

QUAROT_API double quarot_mse_f32(const float* a, const float* b, int64_t n) {
    double e = 0.0;
    int64_t i;
    if (n <= 0) return 0.0;
    if (!a || !b) return (double)NAN;
    for (i = 0; i < n; ++i) {
        double dif = (double)a[i] - (double)b[i];
        e += dif * dif;
    }
    return e / (double)n;
}

QUAROT_API double quarot_max_abs_diff_f32(const float* a, const float* b, int64_t n) {
    double m = 0.0;
    int64_t i;
    if (n <= 0) return 0.0;
    if (!a || !b) return (double)NAN;
    for (i = 0; i < n; ++i) {
        double dif = fabs((double)a[i] - (double)b[i]);
        if (dif != dif) return dif;   // NaN
        if (dif > m) m = dif;
    }
    return m;
}

// >>gptq
// GPTQ: with H^-1 = U^T U (U upper triangular, processing order), quantize column i of every row,
// e = (w_i - w^_i)/U_ii, and w_j -= e*U_ij for j > i; sum e^2/2 is the added loss. U comes from the
// "UL" Cholesky H = V V^T (V upper) and U = V^-1, both in place. Rows are independent: tiles of rows
// run as parallel tasks; within a tile, updates are applied lazily per block of columns.
#define QUAROT__GPTQ_TILE 32

// Element-wise double updates shared by the Hessian, the factorization and GPTQ, each with a scalar
// _ref and SSE2 / AVX2 / NEON versions. Every output element gets the same multiplications and additions
// in the same order in every version (no FMA contraction), so all give identical bits; the kernel
// follows the quant desc's isa (tests compare them). Subtractions pass -c: y + (-c)*p == y - c*p.
// AVX2 / AVX-512 builds run the O(n^3) and O(out*in^2) parts through register-blocked kernels of the
// same chains (quarot__gptq_rankk_f64, quarot__gptq_hessk_f64 below): a row of w or h stays in
// registers over many k while each loaded vector of the other operand serves 4 or 8 rows.
//   axpy:  y[j] += c*p[j]
//   axpy4: y[j] = y[j] + c0*p0[j] + c1*p1[j] + c2*p2[j] + c3*p3[j]   (left to right)
//   hess8: h[j] += a0*f64(x0[j]) + a1*f64(x1[j]) + ... + a7*f64(x7[j])  (the sum first, left to right)
static void quarot__gptq_axpy_f64_ref(double* y, const double* p, double c, int64_t n) {
    int64_t j;
    for (j = 0; j < n; ++j) y[j] += c * p[j];
}
static void quarot__gptq_axpy4_f64_ref(double* y, const double* const* p, const double* c, int64_t n) {
    const double *p0 = p[0], *p1 = p[1], *p2 = p[2], *p3 = p[3];
    const double c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    int64_t j;
    for (j = 0; j < n; ++j) y[j] = y[j] + c0 * p0[j] + c1 * p1[j] + c2 * p2[j] + c3 * p3[j];
}
static void quarot__gptq_hess8_f64_ref(double* h, const float* const* x, const double* a, int64_t n) {
    int64_t j;
    for (j = 0; j < n; ++j)
        h[j] += a[0] * (double)x[0][j] + a[1] * (double)x[1][j] + a[2] * (double)x[2][j] + a[3] * (double)x[3][j] +
                a[4] * (double)x[4][j] + a[5] * (double)x[5][j] + a[6] * (double)x[6][j] + a[7] * (double)x[7][j];
}

#if defined(QUAROT__HAVE_SSE2)
static void quarot__gptq_axpy_f64_sse2(double* y, const double* p, double c, int64_t n) {
    const __m128d cv = _mm_set1_pd(c);
    int64_t j = 0;
    for (; j + 2 <= n; j += 2)
        _mm_storeu_pd(y + j, _mm_add_pd(_mm_loadu_pd(y + j), _mm_mul_pd(cv, _mm_loadu_pd(p + j))));
    quarot__gptq_axpy_f64_ref(y + j, p + j, c, n - j);
}
static void quarot__gptq_axpy4_f64_sse2(double* y, const double* const* p, const double* c, int64_t n) {
    const __m128d c0 = _mm_set1_pd(c[0]), c1 = _mm_set1_pd(c[1]), c2 = _mm_set1_pd(c[2]), c3 = _mm_set1_pd(c[3]);
    const double* q[4];
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
        __m128d v = _mm_loadu_pd(y + j);
        v = _mm_add_pd(v, _mm_mul_pd(c0, _mm_loadu_pd(p[0] + j)));
        v = _mm_add_pd(v, _mm_mul_pd(c1, _mm_loadu_pd(p[1] + j)));
        v = _mm_add_pd(v, _mm_mul_pd(c2, _mm_loadu_pd(p[2] + j)));
        v = _mm_add_pd(v, _mm_mul_pd(c3, _mm_loadu_pd(p[3] + j)));
        _mm_storeu_pd(y + j, v);
    }
    q[0] = p[0] + j; q[1] = p[1] + j; q[2] = p[2] + j; q[3] = p[3] + j;
    quarot__gptq_axpy4_f64_ref(y + j, q, c, n - j);
}
static void quarot__gptq_hess8_f64_sse2(double* h, const float* const* x, const double* a, int64_t n) {
    const float* q[8];
    int64_t j = 0;
    int r;
    for (; j + 2 <= n; j += 2) {
        __m128d s = _mm_mul_pd(_mm_set1_pd(a[0]), _mm_cvtps_pd(_mm_castsi128_ps(
                                                      _mm_loadl_epi64((const __m128i*)(const void*)(x[0] + j)))));
        for (r = 1; r < 8; ++r)
            s = _mm_add_pd(s, _mm_mul_pd(_mm_set1_pd(a[r]), _mm_cvtps_pd(_mm_castsi128_ps(
                                  _mm_loadl_epi64((const __m128i*)(const void*)(x[r] + j))))));
        _mm_storeu_pd(h + j, _mm_add_pd(_mm_loadu_pd(h + j), s));
    }
    for (r = 0; r < 8; ++r) q[r] = x[r] + j;
    quarot__gptq_hess8_f64_ref(h + j, q, a, n - j);
}
#endif

#if defined(QUAROT__HAVE_AVX2)
static void quarot__gptq_axpy_f64_avx2(double* y, const double* p, double c, int64_t n) {
    const __m256d cv = _mm256_set1_pd(c);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
        _mm256_storeu_pd(y + j, _mm256_add_pd(_mm256_loadu_pd(y + j), _mm256_mul_pd(cv, _mm256_loadu_pd(p + j))));
    quarot__gptq_axpy_f64_ref(y + j, p + j, c, n - j);
}
static void quarot__gptq_axpy4_f64_avx2(double* y, const double* const* p, const double* c, int64_t n) {
    const __m256d c0 = _mm256_set1_pd(c[0]), c1 = _mm256_set1_pd(c[1]);
    const __m256d c2 = _mm256_set1_pd(c[2]), c3 = _mm256_set1_pd(c[3]);
    const double* q[4];
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m256d v = _mm256_loadu_pd(y + j);
        v = _mm256_add_pd(v, _mm256_mul_pd(c0, _mm256_loadu_pd(p[0] + j)));
        v = _mm256_add_pd(v, _mm256_mul_pd(c1, _mm256_loadu_pd(p[1] + j)));
        v = _mm256_add_pd(v, _mm256_mul_pd(c2, _mm256_loadu_pd(p[2] + j)));
        v = _mm256_add_pd(v, _mm256_mul_pd(c3, _mm256_loadu_pd(p[3] + j)));
        _mm256_storeu_pd(y + j, v);
    }
    q[0] = p[0] + j; q[1] = p[1] + j; q[2] = p[2] + j; q[3] = p[3] + j;
    quarot__gptq_axpy4_f64_ref(y + j, q, c, n - j);
}
static void quarot__gptq_hess8_f64_avx2(double* h, const float* const* x, const double* a, int64_t n) {
    __m256d av[8];
    const float* q[8];
    int64_t j = 0;
    int r;
    for (r = 0; r < 8; ++r) av[r] = _mm256_set1_pd(a[r]);
    for (; j + 4 <= n; j += 4) {
        __m256d s = _mm256_mul_pd(av[0], _mm256_cvtps_pd(_mm_loadu_ps(x[0] + j)));
        for (r = 1; r < 8; ++r) s = _mm256_add_pd(s, _mm256_mul_pd(av[r], _mm256_cvtps_pd(_mm_loadu_ps(x[r] + j))));
        _mm256_storeu_pd(h + j, _mm256_add_pd(_mm256_loadu_pd(h + j), s));
    }
    for (r = 0; r < 8; ++r) q[r] = x[r] + j;
    quarot__gptq_hess8_f64_ref(h + j, q, a, n - j);
}
#endif

#if defined(QUAROT__HAVE_NEON)
static void quarot__gptq_axpy_f64_neon(double* y, const double* p, double c, int64_t n) {
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) vst1q_f64(y + j, vaddq_f64(vld1q_f64(y + j), vmulq_n_f64(vld1q_f64(p + j), c)));
    quarot__gptq_axpy_f64_ref(y + j, p + j, c, n - j);
}
static void quarot__gptq_axpy4_f64_neon(double* y, const double* const* p, const double* c, int64_t n) {
    const double* q[4];
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
        float64x2_t v = vld1q_f64(y + j);
        v = vaddq_f64(v, vmulq_n_f64(vld1q_f64(p[0] + j), c[0]));
        v = vaddq_f64(v, vmulq_n_f64(vld1q_f64(p[1] + j), c[1]));
        v = vaddq_f64(v, vmulq_n_f64(vld1q_f64(p[2] + j), c[2]));
        v = vaddq_f64(v, vmulq_n_f64(vld1q_f64(p[3] + j), c[3]));
        vst1q_f64(y + j, v);
    }
    q[0] = p[0] + j; q[1] = p[1] + j; q[2] = p[2] + j; q[3] = p[3] + j;
    quarot__gptq_axpy4_f64_ref(y + j, q, c, n - j);
}
static void quarot__gptq_hess8_f64_neon(double* h, const float* const* x, const double* a, int64_t n) {
    const float* q[8];
    int64_t j = 0;
    int r;
    for (; j + 2 <= n; j += 2) {
        float64x2_t s = vmulq_n_f64(vcvt_f64_f32(vld1_f32(x[0] + j)), a[0]);
        for (r = 1; r < 8; ++r) s = vaddq_f64(s, vmulq_n_f64(vcvt_f64_f32(vld1_f32(x[r] + j)), a[r]));
        vst1q_f64(h + j, vaddq_f64(vld1q_f64(h + j), s));
    }
    for (r = 0; r < 8; ++r) q[r] = x[r] + j;
    quarot__gptq_hess8_f64_ref(h + j, q, a, n - j);
}
#endif

static void quarot__gptq_axpy_f64(quarot_isa isa, double* y, const double* p, double c, int64_t n) {
#if defined(QUAROT__HAVE_AVX2)
    if (isa == QUAROT_ISA_AVX2 || isa == QUAROT_ISA_AVX512) { quarot__gptq_axpy_f64_avx2(y, p, c, n); return; }
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (isa != QUAROT_ISA_REF) { quarot__gptq_axpy_f64_sse2(y, p, c, n); return; }
#endif
#if defined(QUAROT__HAVE_NEON)
    if (isa == QUAROT_ISA_NEON) { quarot__gptq_axpy_f64_neon(y, p, c, n); return; }
#endif
    (void)isa;
    quarot__gptq_axpy_f64_ref(y, p, c, n);
}
static void quarot__gptq_axpy4_f64(quarot_isa isa, double* y, const double* const* p, const double* c, int64_t n) {
#if defined(QUAROT__HAVE_AVX2)
    if (isa == QUAROT_ISA_AVX2 || isa == QUAROT_ISA_AVX512) { quarot__gptq_axpy4_f64_avx2(y, p, c, n); return; }
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (isa != QUAROT_ISA_REF) { quarot__gptq_axpy4_f64_sse2(y, p, c, n); return; }
#endif
#if defined(QUAROT__HAVE_NEON)
    if (isa == QUAROT_ISA_NEON) { quarot__gptq_axpy4_f64_neon(y, p, c, n); return; }
#endif
    (void)isa;
    quarot__gptq_axpy4_f64_ref(y, p, c, n);
}
static void quarot__gptq_hess8_f64(quarot_isa isa, double* h, const float* const* x, const double* a, int64_t n) {
#if defined(QUAROT__HAVE_AVX2)
    if (isa == QUAROT_ISA_AVX2 || isa == QUAROT_ISA_AVX512) { quarot__gptq_hess8_f64_avx2(h, x, a, n); return; }
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (isa != QUAROT_ISA_REF) { quarot__gptq_hess8_f64_sse2(h, x, a, n); return; }
#endif
#if defined(QUAROT__HAVE_NEON)
    if (isa == QUAROT_ISA_NEON) { quarot__gptq_hess8_f64_neon(h, x, a, n); return; }
#endif
    (void)isa;
    quarot__gptq_hess8_f64_ref(h, x, a, n);
}

// Blocked rank-k update in order (GPTQ's lazy column updates and the factorization's trailing
// updates):  w[t][j] = w[t][j] + c[t][k]*u[k][j]  for k = 0, 1, .., kn-1 in turn (t < nr, j < ncols),
// the product and the sum each rounded (no FMA): per element the bits of kn axpy calls, or of
// axpy4 calls (C evaluates y + c0*p0 + c1*p1 + .. left to right). Rows of u are ldu apart (negative:
// k walks u's rows backwards), rows of c ldc apart. The AVX2 / AVX-512 versions hold RR rows x 3
// vectors of w in registers over the whole k loop, so every vector of u they load serves RR rows
// (the per-row axpy4 passes streamed u once per row: GPTQ's tile of 32 rows read the block's rows of
// U 32 times from L3 or DRAM, and the factorization's rows read the packed panel once per row).
static void quarot__gptq_rankk_f64_ref(double* w, int64_t ldw, int64_t nr, const double* c, int64_t ldc,
                                       const double* u, int64_t ldu, int64_t kn, int64_t ncols) {
    int64_t t, j, k;
    for (t = 0; t < nr; ++t)
        for (j = 0; j < ncols; ++j) {
            double acc = w[t * ldw + j];
            for (k = 0; k < kn; ++k) acc = acc + c[t * ldc + k] * u[k * ldu + j];
            w[t * ldw + j] = acc;
        }
}

#define QUAROT__RK_ROWS4(X) X(0) X(1) X(2) X(3)
#define QUAROT__RK_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define QUAROT__RK_DECL(r) QUAROT__RV a##r##0, a##r##1, a##r##2;
#define QUAROT__RK_LD(r)                                                                               \
    a##r##0 = QUAROT__RLD(wt + (r) * ldw); a##r##1 = QUAROT__RLD(wt + (r) * ldw + QUAROT__RW);         \
    a##r##2 = QUAROT__RLD(wt + (r) * ldw + 2 * QUAROT__RW);
#define QUAROT__RK_UP(r)                                                                               \
    cv = QUAROT__RSET1(ct[(r) * ldc + k]);                                                             \
    a##r##0 = QUAROT__RADD(a##r##0, QUAROT__RMUL(cv, u0)); a##r##1 = QUAROT__RADD(a##r##1, QUAROT__RMUL(cv, u1)); \
    a##r##2 = QUAROT__RADD(a##r##2, QUAROT__RMUL(cv, u2));
#define QUAROT__RK_ST(r)                                                                               \
    QUAROT__RST(wt + (r) * ldw, a##r##0); QUAROT__RST(wt + (r) * ldw + QUAROT__RW, a##r##1);           \
    QUAROT__RST(wt + (r) * ldw + 2 * QUAROT__RW, a##r##2);
// Per segment of at most KS k (w is stored and reloaded between segments, exactly, as doubles) and
// group of 3 vectors of columns, the groups in turn (so each row of u is read front to back, a stream
// the hardware prefetchers follow): with more rows than one pass takes, the segment's rows of u are first
// copied into a dense buffer (u's rows are usually a whole matrix row apart: every k would touch new
// cache lines and pages); then RR rows at a time, and the rows left over one at a time. The columns left
// over run one vector at a time, then scalar, with the same chain per element.
#define QUAROT__RK_KS 64
// The next column group's three lines of a row of u, into L2 while this group computes (the next
// group packs the same rows; with rows a matrix row apart no hardware prefetcher sees that stream).
#define QUAROT__RK_PF(p)                                                                               \
    _mm_prefetch((const char*)(p), _MM_HINT_T1); _mm_prefetch((const char*)((p) + 8), _MM_HINT_T1);    \
    _mm_prefetch((const char*)((p) + 16), _MM_HINT_T1);
#define QUAROT__RK_PASS(NROWS, DECL, LD, UP, ST)                                                       \
    for (; t + NROWS <= nr; t += NROWS) {                                                              \
        double* wt = w + t * ldw + j;                                                                  \
        const double* ct = c + t * ldc + k0;                                                           \
        QUAROT__RV u0, u1, u2, cv;                                                                     \
        DECL                                                                                           \
        LD                                                                                             \
        for (k = 0; k < ks; ++k) {                                                                     \
            const double* uk = up + k * ldp;                                                           \
            u0 = QUAROT__RLD(uk); u1 = QUAROT__RLD(uk + W); u2 = QUAROT__RLD(uk + 2 * W);              \
            UP                                                                                         \
        }                                                                                              \
        ST                                                                                             \
    }

#if defined(QUAROT__HAVE_AVX2)
// Blocked Hessian update (AVX2 / AVX-512 builds): for nr rows t of h and ncols columns j, and the kn
// rows of x (kn a multiple of 8) in chunks of 8, h[t][j] = h[t][j] + (a[t][r]*x[r][j] + .. +
// a[t][r+7]*x[r+7][j]) (the chunk's sum first, left to right, each product and sum rounded): the
// order of hess8 chunk after chunk. a[t][r] = 2 x[r][i_t] is given ([nr][lda]); each call converts its
// group of 3 vectors of x's columns to double once into a dense buffer, then keeps RR rows x 3 vectors
// of h in registers over all kn rows (hess8 reloaded and stored every h element once per chunk of 8).
static void quarot__gptq_hessk_f64_ref(double* h, int64_t ldh, int64_t nr, const double* a, int64_t lda,
                                       const float* x, int64_t ldx, int64_t kn, int64_t ncols) {
    int64_t t, j, r, q;
    for (t = 0; t < nr; ++t)
        for (j = 0; j < ncols; ++j) {
            double acc = h[t * ldh + j];
            for (r = 0; r + 8 <= kn; r += 8) {
                double s = a[t * lda + r] * (double)x[r * ldx + j];
                for (q = 1; q < 8; ++q) s = s + a[t * lda + r + q] * (double)x[(r + q) * ldx + j];
                acc = acc + s;
            }
            h[t * ldh + j] = acc;
        }
}
#define QUAROT__HK_KS 64
#define QUAROT__HK_S(r)                                                                                \
    { const double* ar = a + (t + (r)) * lda + ka;                                                     \
      QUAROT__RV s0, s1, s2, cv = QUAROT__RSET1(ar[0]);                                                \
      s0 = QUAROT__RMUL(cv, QUAROT__RLD(xb)); s1 = QUAROT__RMUL(cv, QUAROT__RLD(xb + W));              \
      s2 = QUAROT__RMUL(cv, QUAROT__RLD(xb + 2 * W));                                                  \
      for (q = 1; q < 8; ++q) {                                                                        \
          cv = QUAROT__RSET1(ar[q]);                                                                   \
          s0 = QUAROT__RADD(s0, QUAROT__RMUL(cv, QUAROT__RLD(xb + q * 3 * W)));                        \
          s1 = QUAROT__RADD(s1, QUAROT__RMUL(cv, QUAROT__RLD(xb + q * 3 * W + W)));                    \
          s2 = QUAROT__RADD(s2, QUAROT__RMUL(cv, QUAROT__RLD(xb + q * 3 * W + 2 * W)));                \
      }                                                                                                \
      a##r##0 = QUAROT__RADD(a##r##0, s0); a##r##1 = QUAROT__RADD(a##r##1, s1);                        \
      a##r##2 = QUAROT__RADD(a##r##2, s2); }

#endif

// The vector operations of both instantiations, named from QUAROT__RPFX (_mm256_ or _mm512_).
#define QUAROT__RCAT2(a, b) a##b
#define QUAROT__RCAT(a, b) QUAROT__RCAT2(a, b)
#define QUAROT__ROP(op) QUAROT__RCAT(QUAROT__RPFX, op)
#define QUAROT__RLD(p) QUAROT__ROP(loadu_pd)(p)
#define QUAROT__RST(p, v) QUAROT__ROP(storeu_pd)(p, v)
#define QUAROT__RSET1(x) QUAROT__ROP(set1_pd)(x)
#define QUAROT__RADD(x, y) QUAROT__ROP(add_pd)(x, y)
#define QUAROT__RMUL(x, y) QUAROT__ROP(mul_pd)(x, y)
#if defined(QUAROT__HAVE_AVX2)
#define QUAROT__RPFX _mm256_
#define QUAROT__RV __m256d
#define QUAROT__RW 4
#define QUAROT__RCVT(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define QUAROT__ISA avx2
#define QUAROT__RROWS QUAROT__RK_ROWS4   // 12 + 3 + 1 of 16 ymm
#define QUAROT__RR 4
#define QUAROT__TEMPLATE QUAROT__TEMPLATE_GPTQ
#include QUAROT_HEADER_FILE   // >>gptq_body
#undef QUAROT__TEMPLATE
#undef QUAROT__RR
#undef QUAROT__RROWS
#undef QUAROT__ISA
#undef QUAROT__RPFX
#undef QUAROT__RV
#undef QUAROT__RW
#undef QUAROT__RCVT
#endif
#if defined(QUAROT__HAVE_AVX512) && defined(QUAROT__HAVE_AVX2)   // (the blocked kernels' helpers need AVX2)
#define QUAROT__RPFX _mm512_
#define QUAROT__RV __m512d
#define QUAROT__RW 8
// (the zero-masked form with every lane set is the plain conversion; g++ -O1 flags the plain
// intrinsic's _mm512_undefined_pd() as maybe-uninitialized)
#define QUAROT__RCVT(p) _mm512_maskz_cvtps_pd((__mmask8)0xFF, _mm256_loadu_ps(p))
#define QUAROT__ISA avx512
#define QUAROT__RROWS QUAROT__RK_ROWS8   // 24 + 3 + 1 of 32 zmm
#define QUAROT__RR 8
#define QUAROT__TEMPLATE QUAROT__TEMPLATE_GPTQ
#include QUAROT_HEADER_FILE   // >>gptq_body
#undef QUAROT__TEMPLATE
#undef QUAROT__RR
#undef QUAROT__RROWS
#undef QUAROT__ISA
#undef QUAROT__RPFX
#undef QUAROT__RV
#undef QUAROT__RW
#undef QUAROT__RCVT
#endif
#undef QUAROT__RCAT2
#undef QUAROT__RCAT
#undef QUAROT__ROP
#undef QUAROT__RLD
#undef QUAROT__RST
#undef QUAROT__RSET1
#undef QUAROT__RADD
#undef QUAROT__RMUL

// The rank-k update for a resolved isa: the blocked kernels on AVX-512 and AVX2, the _ref loop for
// REF; SSE2 and NEON run it row by row, four k per axpy4 pass (the same bits).
static void quarot__gptq_rankk_f64(quarot_isa isa, double* w, int64_t ldw, int64_t nr, const double* c,
                                   int64_t ldc, const double* u, int64_t ldu, int64_t kn, int64_t ncols) {
    int64_t t, k, l;
    if (nr <= 0 || kn <= 0 || ncols <= 0) return;
#if defined(QUAROT__HAVE_AVX512) && defined(QUAROT__HAVE_AVX2)   // (the blocked kernels' helpers need AVX2)
    if (isa == QUAROT_ISA_AVX512) {
        quarot__gptq_rankk_f64_avx512(w, ldw, nr, c, ldc, u, ldu, kn, ncols);
        return;
    }
#endif
#if defined(QUAROT__HAVE_AVX2)
    if (isa == QUAROT_ISA_AVX2) {
        quarot__gptq_rankk_f64_avx2(w, ldw, nr, c, ldc, u, ldu, kn, ncols);
        return;
    }
#endif
    if (isa == QUAROT_ISA_REF) {
        quarot__gptq_rankk_f64_ref(w, ldw, nr, c, ldc, u, ldu, kn, ncols);
        return;
    }
    for (t = 0; t < nr; ++t) {
        double* wr = w + t * ldw;
        const double* ct = c + t * ldc;
        for (k = 0; k + 4 <= kn; k += 4) {
            const double* p[4];
            for (l = 0; l < 4; ++l) p[l] = u + (k + l) * ldu;
            quarot__gptq_axpy4_f64(isa, wr, p, ct + k, ncols);
        }
        for (; k < kn; ++k) quarot__gptq_axpy_f64(isa, wr, u + k * ldu, ct[k], ncols);
    }
}

#if defined(QUAROT__HAVE_AVX2)
// The blocked Hessian update for isa AVX-512 or AVX2 (quarot_hessian_accumulate_f64 takes the best
// ISA); the same bits either way.
static void quarot__gptq_hessk_f64(quarot_isa isa, double* h, int64_t ldh, int64_t nr, const double* a, int64_t lda,
                                   const float* x, int64_t ldx, int64_t kn, int64_t ncols) {
    if (nr <= 0 || kn <= 0 || ncols <= 0) return;
#if defined(QUAROT__HAVE_AVX512)
    if (isa == QUAROT_ISA_AVX512) {
        quarot__gptq_hessk_f64_avx512(h, ldh, nr, a, lda, x, ldx, kn, ncols);
        return;
    }
#endif
    (void)isa;
    quarot__gptq_hessk_f64_avx2(h, ldh, nr, a, lda, x, ldx, kn, ncols);
}
#endif

QUAROT_API quarot_result quarot_hessian_accumulate_f64(double* h, int64_t in, const float* x,
                                                       int64_t rows, int64_t stride) {
    int64_t r, r0, i, j, k, i0;
    const quarot_isa isa = quarot_isa_best();
    const float *xr[8], *xi[8];
    double a[8];
    size_t nn;
    quarot_result res;
    float pm, nm;
    if (!h || !x) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((res = quarot__qshape_check(rows, in, stride)) != QUAROT_OK) return res;
    if (in == 0 || rows == 0) return QUAROT_OK;
    if (!quarot__mul_size((size_t)in, (size_t)in, &nn) || !quarot__mul_size(nn, sizeof(double), &nn))
        return QUAROT_ERR_OVERFLOW;
    for (r = 0; r < rows; ++r)
        if (!quarot__qstats(isa, x + r * stride, in, &pm, &nm)) return QUAROT_ERR_NONFINITE;
    // Blocks of 256 rows of x (in chunks of 8) against tiles of 16 rows of h, so both stay in cache;
    // then the rows % 8 left, one by one. Per element of h that is the documented order. AVX2 /
    // AVX-512: segments of QUAROT__HK_KS rows against tiles of 32 rows of h through the blocked
    // kernel (the same chunks in the same order): the columns right of the tile for all its rows at
    // once, then each row's part of the tile's own triangle.
#if defined(QUAROT__HAVE_AVX2)
    if (isa == QUAROT_ISA_AVX2 || isa == QUAROT_ISA_AVX512) {
        double ab[32 * QUAROT__HK_KS];
        const int64_t r8 = rows / 8 * 8;
        for (r0 = 0; r0 < r8; r0 += QUAROT__HK_KS) {
            const int64_t rs = r8 - r0 < QUAROT__HK_KS ? r8 - r0 : QUAROT__HK_KS;
            const float* xs = x + r0 * stride;
            for (i0 = 0; i0 < in; i0 += 32) {
                const int64_t nr = in - i0 < 32 ? in - i0 : 32;
                for (i = 0; i < nr; ++i)
                    for (r = 0; r < rs; ++r) ab[i * QUAROT__HK_KS + r] = 2.0 * (double)xs[r * stride + i0 + i];
                quarot__gptq_hessk_f64(isa, h + i0 * in + i0 + nr, in, nr, ab, QUAROT__HK_KS, xs + i0 + nr, stride, rs,
                                       in - i0 - nr);
                for (i = 0; i < nr; ++i)
                    quarot__gptq_hessk_f64(isa, h + (i0 + i) * in + i0 + i, in, 1, ab + i * QUAROT__HK_KS,
                                           QUAROT__HK_KS, xs + i0 + i, stride, rs, nr - i);
            }
        }
    } else
#endif
    for (r0 = 0; r0 + 8 <= rows; r0 += 256) {
        const int64_t r1 = r0 + 256 < rows / 8 * 8 ? r0 + 256 : rows / 8 * 8;
        for (i0 = 0; i0 < in; i0 += 16) {
            const int64_t i1 = i0 + 16 < in ? i0 + 16 : in;
            for (r = r0; r < r1; r += 8) {
                for (k = 0; k < 8; ++k) xr[k] = x + (r + k) * stride;
                for (i = i0; i < i1; ++i) {
                    for (k = 0; k < 8; ++k) { a[k] = 2.0 * (double)xr[k][i]; xi[k] = xr[k] + i; }
                    quarot__gptq_hess8_f64(isa, h + i * in + i, xi, a, in - i);
                }
            }
        }
    }
    for (r = rows / 8 * 8; r < rows; ++r) {
        const float* x1 = x + r * stride;
        for (i = 0; i < in; ++i) {
            double* hr = h + i * in;
            const double a1 = 2.0 * (double)x1[i];
            for (j = i; j < in; ++j) hr[j] += a1 * (double)x1[j];
        }
    }
    for (i = 0; i < in; ++i)
        for (j = i + 1; j < in; ++j) h[j * in + i] = h[i * in + j];
    return QUAROT_OK;
}

// >>gptq_run
// GPTQ proper: the factor U of H^-1 = U^T U (an "UL" Cholesky of the damped H and the triangular
// inverse, blocked, their O(n^3) updates as parallel tasks), then the column loop over tiles of rows
// (parallel tasks) with the updates applied lazily per block of columns.

// The factor GPTQ needs, in place on a [n][n] whose upper triangle (i <= j) holds a symmetric positive
// definite A (the lower triangle is neither read nor written):
//   1. "UL" Cholesky A = V V^T, V upper triangular, from the last column backwards (right-looking):
//      V_jj = sqrt(A_jj), V_ij = A_ij / V_jj, then A_il -= V_ij V_lj for i <= l < j.
//   2. U = V^-1 (upper), so that A^-1 = V^-T V^-1 = U^T U without forming A^-1.
// Both run in blocks of NB columns (rows) from the bottom right, with the O(n^3) updates split into
// column chunks of CW (L2-sized) that run as parallel tasks. Step 1 subtracts in the same order as the
// unblocked loop (k descending per element), so its bits do not depend on NB or threads; step 2 sums
// per element in a fixed order as well. Cost n^3/6 + n^3/6 multiply-adds.
#define QUAROT__GPTQ_NB 64
#define QUAROT__GPTQ_CW 512

typedef struct quarot__gptq_chol_job {
    double* a;             // [n][n]
    int64_t n, b0, b1;     // current block [b0, b1)
    double* pk;            // [NB][n]: Cholesky: pk[k][l] = V[l][b0+k]; inverse: copy of V[b0+k][l]
    double* s;             // [NB][n]: inverse: S = V[block][rest] * U[rest][rest]
    const double* d;       // [NB][NB]: Cholesky: d[j][l] = V[b0+l][b0+j] (l < j); inverse: U of the block
    int64_t n_tasks;
    quarot_isa isa;        // resolved: the element-wise and blocked update kernels
} quarot__gptq_chol_job;

// Cholesky, panel rows i < b0 (task t takes rows t, t+T, ...): the block's columns of row i, by the
// same steps as the unblocked loop (divide by V_jj, subtract from the columns left of j); then pack.
static void quarot__gptq_chol_panel_task(void* arg, int64_t t) {
    const quarot__gptq_chol_job* jb = (const quarot__gptq_chol_job*)arg;
    const int64_t n = jb->n, b0 = jb->b0, b = jb->b1 - jb->b0;
    int64_t i, j;
    for (i = t; i < b0; i += jb->n_tasks) {
        double* r = jb->a + i * n + b0;
        for (j = b - 1; j >= 0; --j) {
            const double* dj = jb->d + j * QUAROT__GPTQ_NB;
            double c;
            r[j] /= jb->a[(b0 + j) * n + b0 + j];
            c = r[j];
            quarot__gptq_axpy_f64(jb->isa, r, dj, -c, j);
        }
        for (j = 0; j < b; ++j) {
            jb->pk[j * n + i] = r[j];
            jb->s[i * QUAROT__GPTQ_NB + (b - 1 - j)] = -r[j];   // the update's coefficients, k descending
        }
    }
}

// Cholesky, trailing update of A[0:b0][0:b0] (upper) by the block's columns, chunk t of the columns:
// A_il = A_il + (-V_i,k) V_l,k for k descending (the packed rows of pk walked backwards, the
// coefficients -V_i,k reversed by the panel task into s). Rows 0..la share the chunk's columns and run
// as blocked updates of 32 rows (a block's rows of the chunk stay in L2 while its column groups
// pass; one call over all rows walked a column strip of every row, a miss per row and group); the
// rows after la start at their diagonal.
static void quarot__gptq_chol_syrk_task(void* arg, int64_t t) {
    const quarot__gptq_chol_job* jb = (const quarot__gptq_chol_job*)arg;
    const int64_t n = jb->n, b0 = jb->b0, b = jb->b1 - jb->b0;
    const int64_t la = t * QUAROT__GPTQ_CW, lb = la + QUAROT__GPTQ_CW < b0 ? la + QUAROT__GPTQ_CW : b0;
    const int64_t nrect = la + 1 < lb ? la + 1 : lb;
    const double* u = jb->pk + (b - 1) * n;        // row k = b-1-kk of the panel at u - kk*n
    int64_t i;
    for (i = 0; i < nrect; i += 32)
        quarot__gptq_rankk_f64(jb->isa, jb->a + i * n + la, n, nrect - i < 32 ? nrect - i : 32,
                               jb->s + i * QUAROT__GPTQ_NB, QUAROT__GPTQ_NB, u + la, -n, b, lb - la);
    for (i = nrect; i < lb; ++i)
        quarot__gptq_rankk_f64(jb->isa, jb->a + i * n + i, n, 1, jb->s + i * QUAROT__GPTQ_NB,
                               QUAROT__GPTQ_NB, u + i, -n, b, lb - i);
}

// Inverse, rows of the block times the rest, chunk t of the columns j >= b1:
//   S[k][j] = sum_{m=b1..j} V[b0+k][m] U[m][j]  (m ascending),  U[b0+i][j] = -sum_{k>=i} Ublk[i][k] S[k][j].
// S in groups of 24 columns [j0, j1): the m below j0 in one blocked update of all b rows, then the
// group's own triangle one m at a time (each element still sums m in ascending order).
static void quarot__gptq_inv_task(void* arg, int64_t t) {
    const quarot__gptq_chol_job* jb = (const quarot__gptq_chol_job*)arg;
    const int64_t n = jb->n, b0 = jb->b0, b1 = jb->b1, b = b1 - b0;
    const int64_t ja = b1 + t * QUAROT__GPTQ_CW, jz = ja + QUAROT__GPTQ_CW < n ? ja + QUAROT__GPTQ_CW : n;
    double cn[QUAROT__GPTQ_NB];
    int64_t i, j, k, m, j0, j1;
    for (k = 0; k < b; ++k)
        for (j = ja; j < jz; ++j) jb->s[k * n + j] = 0.0;
    for (j0 = ja; j0 < jz; j0 = j1) {
        j1 = j0 + 24 < jz ? j0 + 24 : jz;
        quarot__gptq_rankk_f64(jb->isa, jb->s + j0, n, b, jb->pk + b1, n, jb->a + b1 * n + j0, n, j0 - b1,
                               j1 - j0);
        for (m = j0; m < j1; ++m)
            quarot__gptq_rankk_f64(jb->isa, jb->s + m, n, b, jb->pk + m, n, jb->a + m * n + m, n, 1, j1 - m);
    }
    for (i = 0; i < b; ++i) {
        double* ui = jb->a + (b0 + i) * n;
        const double* di = jb->d + i * QUAROT__GPTQ_NB;
        for (j = ja; j < jz; ++j) ui[j] = 0.0;
        for (k = i; k < b; ++k) cn[k - i] = -di[k];
        quarot__gptq_rankk_f64(jb->isa, ui + ja, n, 1, cn, QUAROT__GPTQ_NB, jb->s + i * n + ja, n, b - i,
                               jz - ja);
    }
}

// Returns -1, or the first column (from the right) whose pivot is not > n*eps*diag[j] (or not finite).
// diag[n] is A's diagonal; work holds 2*NB*n + NB*NB doubles.
static int64_t quarot__gptq_factor(double* a, int64_t n, const double* diag, double* work, quarot_isa isa,
                                   const quarot_env* env) {
    const double tol = (double)n * 2.220446049250313e-16;
    quarot__gptq_chol_job jb;
    double* d = work + 2 * QUAROT__GPTQ_NB * n;
    int64_t b0, b1, i, j, k, threads;
    threads = env && env->parallel.run && env->parallel.n_threads > 1 ? env->parallel.n_threads : 1;
    jb.a = a; jb.n = n; jb.pk = work; jb.s = work + QUAROT__GPTQ_NB * n; jb.d = d; jb.isa = isa;
    for (b1 = n; b1 > 0; b1 = b0) {
        b0 = b1 > QUAROT__GPTQ_NB ? b1 - QUAROT__GPTQ_NB : 0;
        for (j = b1 - 1; j >= b0; --j) {               // the diagonal block, unblocked
            double p = a[j * n + j], v;
            if (!(p > 0.0 && p > tol * diag[j] && p < 1.79769313486231570815e+308)) return j;
            v = sqrt(p);
            a[j * n + j] = v;
            for (i = b0; i < j; ++i) {
                a[i * n + j] /= v;
                d[(j - b0) * QUAROT__GPTQ_NB + (i - b0)] = a[i * n + j];
            }
            for (i = b0; i < j; ++i)
                quarot__gptq_axpy_f64(isa, a + i * n + i, d + (j - b0) * QUAROT__GPTQ_NB + (i - b0), -a[i * n + j],
                                      j - i);
        }
        if (b0 == 0) break;
        jb.b0 = b0; jb.b1 = b1;
        jb.n_tasks = threads < b0 ? threads : b0;
        quarot_env_parallel_for(env, quarot__gptq_chol_panel_task, &jb, jb.n_tasks);
        jb.n_tasks = (b0 + QUAROT__GPTQ_CW - 1) / QUAROT__GPTQ_CW;
        quarot_env_parallel_for(env, quarot__gptq_chol_syrk_task, &jb, jb.n_tasks);
    }
    for (b1 = n; b1 > 0; b1 = b0) {                    // U = V^-1, blocks of rows from the bottom
        b0 = b1 > QUAROT__GPTQ_NB ? b1 - QUAROT__GPTQ_NB : 0;
        for (i = b1 - 1; i >= b0; --i) {               // the diagonal block: U_ij = -sum V_ik U_kj / V_ii
            double* ai = a + i * n;
            double* tmp = work + QUAROT__GPTQ_NB * n;  // (s is free here)
            const double vii = ai[i];
            for (j = i + 1; j < b1; ++j) tmp[j] = 0.0;
            for (k = i + 1; k < b1; ++k) quarot__gptq_axpy_f64(isa, tmp + k, a + k * n + k, ai[k], b1 - k);
            for (j = i + 1; j < b1; ++j) ai[j] = -tmp[j] / vii;
            ai[i] = 1.0 / vii;
        }
        if (b1 == n) continue;
        for (i = b0; i < b1; ++i) {                    // keep V[block][rest]; U of the block as d
            for (j = b1; j < n; ++j) work[(i - b0) * n + j] = a[i * n + j];
            for (j = i; j < b1; ++j) d[(i - b0) * QUAROT__GPTQ_NB + (j - b0)] = a[i * n + j];
        }
        jb.b0 = b0; jb.b1 = b1;
        jb.n_tasks = (n - b1 + QUAROT__GPTQ_CW - 1) / QUAROT__GPTQ_CW;
        quarot_env_parallel_for(env, quarot__gptq_inv_task, &jb, jb.n_tasks);
    }
    return -1;
}

typedef struct quarot__gptq_job {
    float* w;
    int64_t out, in, stride;
    const double* u;                 // [in][in] upper factor of H^-1, processing order
    const int64_t* perm;             // processing position -> original column
    const unsigned char* dead;       // [in], by original column
    quarot__qspec sp;
    int64_t gs, groups, block;
    int dynamic;                     // 1: group parameters from current values at the group's start
    int8_t* q;
    float *scales, *zeros;
    char* scratch;                   // n_tasks blocks of scratch_bytes
    size_t scratch_bytes;
    int64_t n_tasks, n_tiles;
    double* tile_loss;               // [n_tiles]
} quarot__gptq_job;

// Scratch of one task, in doubles: wt [T][in], err [T][block], zero points [T][groups]; then floats:
// scales [T][groups], one row or group [in].
static size_t quarot__gptq_scratch_bytes(int64_t in, int64_t block, int64_t groups) {
    size_t T = QUAROT__GPTQ_TILE;
    return (T * (size_t)in + T * (size_t)block + T * (size_t)groups) * sizeof(double) +
           (T * (size_t)groups + (size_t)in) * sizeof(float);
}

// Group statistics and parameters from doubles rounded to float (saturating, so always finite).
static float quarot__gptq_fit(const quarot__qspec* sp, const double* v, int64_t n, float* fb, double* z) {
    float pm, nm;
    int64_t l;
    for (l = 0; l < n; ++l) {
        double t = v[l];
        t = t > QUAROT__QFLT_MAX ? QUAROT__QFLT_MAX : (t < -QUAROT__QFLT_MAX ? -QUAROT__QFLT_MAX : t);
        fb[l] = (float)t;
    }
    quarot__qstats(sp->isa, fb, n, &pm, &nm);
    return quarot__qfit(sp, fb, n, pm, nm, z);
}

static void quarot__gptq_tile(const quarot__gptq_job* jb, int64_t tile, char* scratch) {
    const int64_t in = jb->in, B = jb->block, G = jb->groups, gs = jb->gs, T = QUAROT__GPTQ_TILE;
    const int64_t r0 = tile * T, nr = jb->out - r0 < T ? jb->out - r0 : T;
    const quarot__qspec* sp = &jb->sp;
    double* wt = (double*)(void*)scratch;          // [nr][in], processing order
    double* err = wt + T * in;                     // [nr][B]
    double* pz = err + T * B;                      // [nr][G]
    float* ps = (float*)(void*)(pz + T * G);       // [nr][G]
    float* fb = ps + T * G;                        // [in]
    double loss = 0.0;
    int64_t t, i, g, b1, b2;
    // Load the tile's rows in processing order (dead columns as 0) and, unless groups are dynamic,
    // fit every group's parameters now from the original weights in natural order.
    for (t = 0; t < nr; ++t) {
        const float* row = jb->w + (r0 + t) * jb->stride;
        for (i = 0; i < in; ++i) {
            int64_t c = jb->perm[i];
            wt[t * in + i] = jb->dead[c] ? 0.0 : (double)row[c];
        }
        if (!jb->dynamic) {                        // per row, or static groups: original weights
            for (i = 0; i < in; ++i) fb[i] = jb->dead[i] ? 0.0f : row[i];
            for (g = 0; g < G; ++g) {
                float pm, nm;
                quarot__qstats(sp->isa, fb + g * gs, gs, &pm, &nm);
                ps[t * G + g] = quarot__qfit(sp, fb + g * gs, gs, pm, nm, &pz[t * G + g]);
            }
        }
    }
    // Column blocks [b1, b2): inside a block every quantized column updates the block's later columns
    // at once; the columns after the block get the block's errors in one pass at its end.
    for (b1 = 0; b1 < in; b1 = b2) {
        b2 = b1 + B < in ? b1 + B : in;
        for (i = b1; i < b2; ++i) {
            const int64_t c = jb->perm[i];
            const double* ui = jb->u + i * in;
            const double uii = ui[i];
            g = c / gs;
            if (jb->dynamic && i % gs == 0)        // natural order: group g = columns i..i+gs-1
                for (t = 0; t < nr; ++t) ps[t * G + g] = quarot__gptq_fit(sp, wt + t * in + i, gs, fb, &pz[t * G + g]);
            for (t = 0; t < nr; ++t) {
                double* wr = wt + t * in;
                const float s = ps[t * G + g];
                const double z = pz[t * G + g];
                double klo, khi, e;
                int32_t kq;
                float fq;
                // RTN of the current value (a double), then its error in units of U_ii.
                quarot__qrange(sp, z, &klo, &khi);
                kq = quarot__rne_clamp(wr[i] / (double)s, klo, khi);
                fq = (float)kq * s;
                e = (wr[i] - (double)fq) / uii;
                loss += 0.5 * e * e;
                jb->w[(r0 + t) * jb->stride + c] = fq;
                if (jb->q) jb->q[(r0 + t) * in + c] = (int8_t)(kq + (sp->asym ? (int32_t)(z - sp->half) : 0));
                err[t * B + (i - b1)] = -e;
            }
            // w_j = w_j + (-e) U_ij for the block's later columns, all rows at once
            quarot__gptq_rankk_f64(sp->isa, wt + i + 1, in, nr, err + (i - b1), B, ui + i + 1, in, 1,
                                   b2 - i - 1);
        }
        if (b2 == in) break;
        // Lazy update of the later columns: w_j = w_j + (-e_k) U_kj, k ascending, for all the tile's
        // rows at once (the bits of one k at a time).
        quarot__gptq_rankk_f64(sp->isa, wt + b2, in, nr, err, B, jb->u + b1 * in + b2, in, b2 - b1,
                               in - b2);
    }
    // Parameters out in the integer layout of quarot_quantize_f32 (zero points shifted by 2^(b-1)).
    for (t = 0; t < nr; ++t)
        for (g = 0; g < G; ++g) {
            if (jb->scales) jb->scales[(r0 + t) * G + g] = ps[t * G + g];
            if (jb->zeros) jb->zeros[(r0 + t) * G + g] = sp->asym ? (float)(pz[t * G + g] - sp->half) : 0.0f;
        }
    jb->tile_loss[tile] = loss;
}

static void quarot__gptq_task(void* arg, int64_t task) {
    const quarot__gptq_job* jb = (const quarot__gptq_job*)arg;
    int64_t tile;
    for (tile = task; tile < jb->n_tiles; tile += jb->n_tasks)
        quarot__gptq_tile(jb, tile, jb->scratch + (size_t)task * jb->scratch_bytes);
}

typedef struct quarot__gptq_key { double d; int64_t i; } quarot__gptq_key;

// act_order: descending diag(H), ties by ascending column (a total order, so qsort's result is unique).
static int quarot__gptq_key_cmp(const void* pa, const void* pb) {
    const quarot__gptq_key* a = (const quarot__gptq_key*)pa;
    const quarot__gptq_key* b = (const quarot__gptq_key*)pb;
    if (a->d != b->d) return a->d > b->d ? -1 : 1;
    return a->i < b->i ? -1 : (a->i > b->i ? 1 : 0);
}

QUAROT_API quarot_result quarot_gptq_f32(float* w, int64_t out, int64_t in, int64_t stride,
                                         const double* h, int64_t h_n, const quarot_gptq_desc* d,
                                         int8_t* q, float* scales, float* zeros,
                                         quarot_gptq_info* info, const quarot_env* env) {
    quarot_gptq_desc dd;
    quarot__gptq_job jb;
    quarot_result res;
    double ratio, mean = 0.0, damp, *a, *dg, *dproc, *work;
    int64_t i, j, bad, *perm, n_threads;
    unsigned char* dead;
    quarot__gptq_key* keys;
    size_t nn, fixed_bytes, sb, all;
    char* mem;
    float pm, nm;
    if (info) { info->loss = 0.0; info->damp = 0.0; info->dead_columns = 0; info->bad_column = -1; }
    if (d) dd = *d; else memset(&dd, 0, sizeof dd);
    if (!w || !h) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((res = quarot__qshape_check(out, in, stride)) != QUAROT_OK) return res;
    if (h_n != in) return QUAROT_ERR_SHAPE_MISMATCH;
    memset(&jb, 0, sizeof jb);
    if ((res = quarot__qspec_init(&dd.quant, in, &jb.sp, &jb.gs)) != QUAROT_OK) return res;
    if (dd.damp_ratio != dd.damp_ratio || dd.block_size < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    if (dd.act_order != 0 && dd.act_order != 1) return QUAROT_ERR_INVALID_ARGUMENT;
    if (jb.sp.asym && q && !zeros) return QUAROT_ERR_INVALID_ARGUMENT;
    if (out == 0 || in == 0) return QUAROT_OK;
    // Options: damping ratio, lazy-update block (a multiple of the group so that a group's columns are
    // all up to date when its first column comes up), dynamic groups only in natural order.
    ratio = dd.damp_ratio == 0.0 ? 0.01 : (dd.damp_ratio < 0.0 ? 0.0 : dd.damp_ratio);
    jb.groups = in / jb.gs;
    jb.block = dd.block_size ? dd.block_size : 128;
    if (jb.gs < in) jb.block = (jb.block + jb.gs - 1) / jb.gs * jb.gs;   // groups never straddle blocks
    if (jb.block > in) jb.block = in;
    jb.dynamic = jb.gs < in && !dd.act_order;
    // Memory: a [in][in], dg, dproc [in], factor work [2*NB*in + NB*NB] doubles, perm [in], keys [in],
    // dead [in]; then the scratch of each task.
    if (!quarot__mul_size((size_t)in, (size_t)in + 2 + 2 * QUAROT__GPTQ_NB, &nn) ||
        !quarot__mul_size(nn + QUAROT__GPTQ_NB * QUAROT__GPTQ_NB, sizeof(double), &nn) ||
        (uint64_t)out > (uint64_t)SIZE_MAX / (size_t)in)
        return QUAROT_ERR_OVERFLOW;
    // Every input is checked before anything is allocated or written (w stays untouched on errors).
    for (i = 0; i < out; ++i)
        if (!quarot__qstats(jb.sp.isa, w + i * stride, in, &pm, &nm)) return QUAROT_ERR_NONFINITE;
    for (i = 0; i < in; ++i)
        for (j = i; j < in; ++j)
            if (h[i * in + j] - h[i * in + j] != 0.0) return QUAROT_ERR_NONFINITE;
    // Row tiles are the parallel tasks; task t takes tiles t, t+T, ... with its own scratch block.
    jb.n_tiles = (out + QUAROT__GPTQ_TILE - 1) / QUAROT__GPTQ_TILE;
    n_threads = env && env->parallel.run && env->parallel.n_threads > 1 ? env->parallel.n_threads : 1;
    jb.n_tasks = n_threads < jb.n_tiles ? n_threads : jb.n_tiles;
    jb.scratch_bytes = sb = (quarot__gptq_scratch_bytes(in, jb.block, jb.groups) + 63) / 64 * 64;
    fixed_bytes = nn + (size_t)in * (sizeof(int64_t) + sizeof(quarot__gptq_key) + 1) +
                  (size_t)jb.n_tiles * sizeof(double);
    fixed_bytes = (fixed_bytes + 63) / 64 * 64;
    if ((size_t)jb.n_tasks > (SIZE_MAX - fixed_bytes) / sb) return QUAROT_ERR_OVERFLOW;
    all = fixed_bytes + (size_t)jb.n_tasks * sb;
    mem = (char*)quarot_env_alloc(env, all);
    if (!mem) return QUAROT_ERR_OUT_OF_MEMORY;
    a = (double*)(void*)mem;
    dg = a + (size_t)in * (size_t)in;
    dproc = dg + in;
    work = dproc + in;
    jb.tile_loss = work + 2 * QUAROT__GPTQ_NB * in + QUAROT__GPTQ_NB * QUAROT__GPTQ_NB;
    perm = (int64_t*)(void*)(jb.tile_loss + jb.n_tiles);
    keys = (quarot__gptq_key*)(void*)(perm + in);
    dead = (unsigned char*)(keys + in);
    jb.scratch = mem + fixed_bytes;
    // Dead columns, mean diagonal, order.
    for (i = 0; i < in; ++i) {
        dead[i] = h[i * in + i] == 0.0;
        dg[i] = dead[i] ? 1.0 : h[i * in + i];
        mean += dg[i];
        if (info && dead[i]) ++info->dead_columns;
        keys[i].d = dg[i];
        keys[i].i = i;
    }
    damp = ratio * (mean / (double)in);
    if (dd.act_order) qsort(keys, (size_t)in, sizeof *keys, quarot__gptq_key_cmp);
    for (i = 0; i < in; ++i) perm[i] = keys[i].i;
    // Damped H in processing order, upper triangle, read from h's upper triangle.
    for (i = 0; i < in; ++i) {
        const int64_t pi = perm[i];
        double* ai = a + i * in;
        for (j = i + 1; j < in; ++j) {
            const int64_t pj = perm[j];
            ai[j] = pi <= pj ? h[pi * in + pj] : h[pj * in + pi];
        }
        ai[i] = dproc[i] = dg[pi] + damp;
    }
    if (info) info->damp = damp;
    // U (upper, processing order) in place of the damped H; a failed pivot leaves w untouched.
    bad = quarot__gptq_factor(a, in, dproc, work, jb.sp.isa, env);
    if (bad >= 0) {
        if (info) info->bad_column = perm[bad];
        quarot_env_free(env, mem);
        return QUAROT_ERR_NOT_CONVERGED;
    }
    jb.w = w; jb.out = out; jb.in = in; jb.stride = stride;
    jb.u = a; jb.perm = perm; jb.dead = dead;
    jb.q = q; jb.scales = scales; jb.zeros = zeros;
    quarot_env_parallel_for(env, quarot__gptq_task, &jb, jb.n_tasks);
    // The loss in tile order, so the sum does not depend on how tasks were scheduled.
    if (info)
        for (i = 0; i < jb.n_tiles; ++i) info->loss += jb.tile_loss[i];
    quarot_env_free(env, mem);
    return QUAROT_OK;
}

// >>qgemm
// Per (token t, output o, group g): acc = sum_k u[o][k] x[t][k] - offset * xsum[t][g], with u the
// offset-binary weight codes (q + 8 or q + 128), so acc = sum q x exactly. The ISA kernels form
// sum u*x over whole blocks (128 codes at 4 bits, 64 at 8) with wrapping int32 lanes; the group's
// tail, the offset and the float scales are shared scalar code, identical for every ISA.
#define QUAROT__QG_TILE 4      // tokens sharing one pass over a weight row
#define QUAROT__QG_ROWS 8      // output rows per block (8 rows of weights + a 4-token tile fit L1)
#define QUAROT__QG_SPLIT 8     // parallel tasks per thread (each a run of whole blocks)
// The finishing data of a whole-row tile (one scale per row, no tail), for kernels that write y
// themselves (the AVX-512 tile kernel).
typedef struct quarot__qg_ep {
    uint32_t offx[QUAROT__QG_TILE];   // offset * xsum per token
    float ws[4], xs[QUAROT__QG_TILE];  // scale per row (copies past the end), per token
    float* y[QUAROT__QG_TILE];         // &y[token][first row]
    int nr;                            // rows to store
} quarot__qg_ep;

// Raw sum u*x over one 4-bit block of L <= 128 codes (layout in the declaration), modulo 2^32.
QUAROT__PRIVATE uint32_t quarot__qg_block4_ref(const uint8_t* w, const int8_t* x, int64_t L) {
    int64_t h = (L + 1) / 2, j;
    uint32_t s = 0;
    for (j = 0; j < h; ++j) {
        s += (uint32_t)((int32_t)(w[j] & 15) * (int32_t)x[j]);
        if (j + h < L) s += (uint32_t)((int32_t)(w[j] >> 4) * (int32_t)x[j + h]);
    }
    return s;
}

QUAROT__PRIVATE uint32_t quarot__qg_bytes8_ref(const uint8_t* w, const int8_t* x, int64_t n) {
    int64_t j;
    uint32_t s = 0;
    for (j = 0; j < n; ++j) s += (uint32_t)((int32_t)w[j] * (int32_t)x[j]);
    return s;
}

// acc[t] += sum u*x over nblk whole blocks, for nt tokens whose group starts are x[t].
typedef void (*quarot__qg_fn)(int bits, const uint8_t* w, const int8_t* const* x, int nt, int64_t nblk, uint32_t* acc);

QUAROT__PRIVATE void quarot__qg_full_ref(int bits, const uint8_t* w, const int8_t* const* x, int nt, int64_t nblk,
                                         uint32_t* acc) {
    int64_t b;
    int t;
    for (t = 0; t < nt; ++t)
        for (b = 0; b < nblk; ++b)
            acc[t] += bits == 4 ? quarot__qg_block4_ref(w + b * 64, x[t] + b * 128, 128)
                                : quarot__qg_bytes8_ref(w + b * 64, x[t] + b * 64, 64);
}

// >>qgemm_simd
#if defined(QUAROT__HAVE_AVX512) && defined(__AVX512BW__)
#define QUAROT__QG_AVX512 1
#if defined(__AVX512VNNI__)
  #define QUAROT__DP512(a, u, s) _mm512_dpbusd_epi32((a), (u), (s))
#else
  #define QUAROT__DP512(a, u, s) \
    _mm512_add_epi32((a), _mm512_madd_epi16(_mm512_maddubs_epi16((u), (s)), _mm512_set1_epi16(1)))
#endif
// A loaded vector used several times stays in its register: without this, gcc folds the load into
// every use (one 64-byte load per dot product instead of one per four), and the loads, not the dot
// products, become the limit.
#if defined(__GNUC__)
  #define QUAROT__QG_REG(v) __asm__("" : "+v"(v))
#else
  #define QUAROT__QG_REG(v) ((void)0)
#endif
// Four output rows at once (prefill and decode): each unpacked weight register serves every token,
// each activation load serves four rows, and 4 x NT independent accumulator chains keep both
// dot-product pipes busy (a per-row kernel, as AVX2 and NEON run, has two chained products per
// accumulator and a horizontal sum per row and token). Rows past the
// matrix's end are passed as copies of a valid row.
#define QUAROT__QG4_W(r)                                                                           \
    { __m512i v_ = _mm512_loadu_si512((const void*)(w##r + ob));                                    \
      QUAROT__QG_REG(v_);                                                                          \
      l##r = _mm512_and_si512(v_, m); h##r = _mm512_and_si512(_mm512_srli_epi16(v_, 4), m); }
#define QUAROT__QG4_X(NT, t, xt)                                                                       \
    if (NT > t) {                                                                                  \
        __m512i xl_ = _mm512_loadu_si512((const void*)(xt + 2 * ob)), xh_;                          \
        QUAROT__QG_REG(xl_);                                                                       \
        a0##t = QUAROT__DP512(a0##t, l0, xl_); a1##t = QUAROT__DP512(a1##t, l1, xl_);              \
        a2##t = QUAROT__DP512(a2##t, l2, xl_); a3##t = QUAROT__DP512(a3##t, l3, xl_);              \
        xh_ = _mm512_loadu_si512((const void*)(xt + 2 * ob + 64));                                  \
        QUAROT__QG_REG(xh_);                                                                       \
        a0##t = QUAROT__DP512(a0##t, h0, xh_); a1##t = QUAROT__DP512(a1##t, h1, xh_);              \
        a2##t = QUAROT__DP512(a2##t, h2, xh_); a3##t = QUAROT__DP512(a3##t, h3, xh_);              \
    }
#define QUAROT__QG8_X(NT, t, xt)                                                                       \
    if (NT > t) {                                                                                  \
        __m512i x_ = _mm512_loadu_si512((const void*)(xt + ob));                                    \
        QUAROT__QG_REG(x_);                                                                        \
        a0##t = QUAROT__QG8DP(a0##t, l0, x_); a1##t = QUAROT__QG8DP(a1##t, l1, x_);                \
        a2##t = QUAROT__QG8DP(a2##t, l2, x_); a3##t = QUAROT__QG8DP(a3##t, l3, x_);                \
    }
#if defined(__AVX512VNNI__)
  #define QUAROT__QG8DP(a, u, s) _mm512_dpbusd_epi32((a), (u), (s))
#else
  #define QUAROT__QG8DP(a, u, s) quarot__qg_dp8w_avx512((a), (u), (s))
// 8-bit weights without VNNI, from registers: widen both to 16 bits (pmaddubsw would saturate).
QUAROT__PRIVATE __m512i quarot__qg_dp8w_avx512(__m512i a, __m512i u, __m512i s) {
    a = _mm512_add_epi32(a, _mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(u)),
                                              _mm512_cvtepi8_epi16(_mm512_castsi512_si256(s))));
    return _mm512_add_epi32(a, _mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(u, 1)),
                                                 _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(s, 1))));
}
#endif
// The 16 sums of a 4 x 4 tile in one vector, lane 4t + r: pairwise unpacks and 128-bit shuffles (45
// instructions instead of 16 horizontal sums; integer addition is exact, so the order is free).
// All-ones masks: the zero-masked forms are the plain instructions without _mm512_undefined_*(),
// which g++ 12 -O1 reports as uninitialized.
#define QUAROT__QG_ALL16 ((__mmask16)0xFFFF)
#define QUAROT__QG_ALL8 ((__mmask8)0xFF)
QUAROT__PRIVATE __m512i quarot__qg_rows4_avx512(__m512i r0, __m512i r1, __m512i r2, __m512i r3) {
    __m512i p = _mm512_add_epi32(_mm512_maskz_unpacklo_epi32(QUAROT__QG_ALL16, r0, r1),
                                 _mm512_maskz_unpackhi_epi32(QUAROT__QG_ALL16, r0, r1));
    __m512i q = _mm512_add_epi32(_mm512_maskz_unpacklo_epi32(QUAROT__QG_ALL16, r2, r3),
                                 _mm512_maskz_unpackhi_epi32(QUAROT__QG_ALL16, r2, r3));
    // [r0 r1 r2 r3] x 4 chunks
    return _mm512_add_epi32(_mm512_maskz_unpacklo_epi64(QUAROT__QG_ALL8, p, q),
                            _mm512_maskz_unpackhi_epi64(QUAROT__QG_ALL8, p, q));
}
// A whole-row group (one scale per row, no tail) can finish in registers: the same float operations
// per (t, o) as the task's scalar code (u = sum - offset * xsum as int32, f = 0 + float(u) * w_scale,
// y = f * x_scale), so the results are the same bits; ep == NULL adds the sums to acc instead.
QUAROT__PRIVATE void quarot__qg_store16_avx512(__m512i s0, __m512i s1, __m512i s2, __m512i s3, int nt,
                                               uint32_t (*acc)[QUAROT__QG_TILE], const quarot__qg_ep* ep) {
    __m512i w01 = _mm512_add_epi32(_mm512_maskz_shuffle_i32x4(QUAROT__QG_ALL16, s0, s1, 0x88),
                                   _mm512_maskz_shuffle_i32x4(QUAROT__QG_ALL16, s0, s1, 0xdd));
    __m512i w23 = _mm512_add_epi32(_mm512_maskz_shuffle_i32x4(QUAROT__QG_ALL16, s2, s3, 0x88),
                                   _mm512_maskz_shuffle_i32x4(QUAROT__QG_ALL16, s2, s3, 0xdd));
    __m512i v = _mm512_add_epi32(_mm512_maskz_shuffle_i32x4(QUAROT__QG_ALL16, w01, w23, 0x88),
                                 _mm512_maskz_shuffle_i32x4(QUAROT__QG_ALL16, w01, w23, 0xdd));
    int r, t;
    if (ep) {
        const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
        __m512i off = _mm512_maskz_permutexvar_epi32(
            QUAROT__QG_ALL16, spread, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(const void*)ep->offx)));
        __m512 xs = _mm512_maskz_permutexvar_ps(QUAROT__QG_ALL16, spread, _mm512_castps128_ps512(_mm_loadu_ps(ep->xs)));
        __m512 ws = _mm512_maskz_broadcast_f32x4(QUAROT__QG_ALL16, _mm_loadu_ps(ep->ws));
        __m512 f = _mm512_add_ps(_mm512_setzero_ps(),
                                 _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(QUAROT__QG_ALL16, _mm512_sub_epi32(v, off)),
                                               ws));
        __m512 y = _mm512_mul_ps(f, xs);
        if (ep->nr == 4) {
            _mm_storeu_ps(ep->y[0], _mm512_maskz_extractf32x4_ps((__mmask8)0xF, y, 0));
            if (nt > 1) _mm_storeu_ps(ep->y[1], _mm512_maskz_extractf32x4_ps((__mmask8)0xF, y, 1));
            if (nt > 2) _mm_storeu_ps(ep->y[2], _mm512_maskz_extractf32x4_ps((__mmask8)0xF, y, 2));
            if (nt > 3) _mm_storeu_ps(ep->y[3], _mm512_maskz_extractf32x4_ps((__mmask8)0xF, y, 3));
        } else {
            float l[16];
            _mm512_storeu_ps(l, y);
            for (t = 0; t < nt; ++t)
                for (r = 0; r < ep->nr; ++r) ep->y[t][r] = l[4 * t + r];
        }
    } else {
        uint32_t l[16];
        _mm512_storeu_si512((void*)l, v);
        for (r = 0; r < 4; ++r)
            for (t = 0; t < 4; ++t) acc[r][t] += l[4 * t + r];
    }
}
// The tile for nt = 1..4 tokens, inlined once per nt by quarot__qg_tile_avx512 so that the
// accumulators and branches of absent tokens fold away.
QUAROT__INLINE void quarot__qg_tile_nt_avx512(const int nt, int bits, const uint8_t* w0, const uint8_t* w1,
                                              const uint8_t* w2, const uint8_t* w3, const int8_t* const* x,
                                              int64_t nblk, uint32_t (*acc)[QUAROT__QG_TILE],
                                              const quarot__qg_ep* ep) {
    const __m512i m = _mm512_set1_epi8(15);
    __m512i z_ = _mm512_setzero_si512();
    __m512i a00 = z_, a01 = z_, a02 = z_, a03 = z_, a10 = z_, a11 = z_, a12 = z_, a13 = z_;
    __m512i a20 = z_, a21 = z_, a22 = z_, a23 = z_, a30 = z_, a31 = z_, a32 = z_, a33 = z_;
    __m512i l0, l1, l2, l3, h0, h1, h2, h3;
    const int8_t *x0 = x[0], *x1 = x[nt > 1 ? 1 : 0], *x2 = x[nt > 2 ? 2 : 0], *x3 = x[nt > 3 ? 3 : 0];
    int64_t o;
    if (bits == 4) {
        for (o = 0; o < nblk * 64; o += 128) {   // two blocks per trip
            { const int64_t ob = o;
              QUAROT__QG4_W(0) QUAROT__QG4_W(1) QUAROT__QG4_W(2) QUAROT__QG4_W(3)
              QUAROT__QG4_X(nt, 0, x0) QUAROT__QG4_X(nt, 1, x1) QUAROT__QG4_X(nt, 2, x2) QUAROT__QG4_X(nt, 3, x3) }
            if (o + 64 < nblk * 64) { const int64_t ob = o + 64;
              QUAROT__QG4_W(0) QUAROT__QG4_W(1) QUAROT__QG4_W(2) QUAROT__QG4_W(3)
              QUAROT__QG4_X(nt, 0, x0) QUAROT__QG4_X(nt, 1, x1) QUAROT__QG4_X(nt, 2, x2) QUAROT__QG4_X(nt, 3, x3) }
        }
    } else {
        for (o = 0; o < nblk * 64; o += 64) {
            const int64_t ob = o;
            l0 = _mm512_loadu_si512((const void*)(w0 + o)); l1 = _mm512_loadu_si512((const void*)(w1 + o));
            l2 = _mm512_loadu_si512((const void*)(w2 + o)); l3 = _mm512_loadu_si512((const void*)(w3 + o));
            QUAROT__QG8_X(nt, 0, x0) QUAROT__QG8_X(nt, 1, x1) QUAROT__QG8_X(nt, 2, x2) QUAROT__QG8_X(nt, 3, x3)
        }
        (void)h0; (void)h1; (void)h2; (void)h3;
    }
    quarot__qg_store16_avx512(quarot__qg_rows4_avx512(a00, a10, a20, a30), quarot__qg_rows4_avx512(a01, a11, a21, a31),
                              quarot__qg_rows4_avx512(a02, a12, a22, a32), quarot__qg_rows4_avx512(a03, a13, a23, a33),
                              nt, acc, ep);
}
// One weight row against one token (decode, a matrix-vector product): sum u*x over nblk whole
// blocks, the row's bytes read in address order with four independent accumulator chains. The 4-row
// tile reads four rows side by side, i.e. four streams 2 KiB apart for a 4096-wide row; from DRAM
// that streams at about half the rate of one row after the other (measured on Zen 4).
#define QUAROT__QG_LD(p) _mm512_loadu_si512((const void*)(p))
#define QUAROT__QG_LO(v) _mm512_and_si512((v), m)
#define QUAROT__QG_HI(v) _mm512_and_si512(_mm512_srli_epi16((v), 4), m)
QUAROT__PRIVATE uint32_t quarot__qg_row1_avx512(int bits, const uint8_t* w, const int8_t* x, int64_t nblk) {
    const __m512i m = _mm512_set1_epi8(15);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    int64_t b = 0;
    if (bits == 4) {
        for (; b + 2 <= nblk; b += 2) {
            __m512i v = QUAROT__QG_LD(w + b * 64), u = QUAROT__QG_LD(w + b * 64 + 64);
            a0 = QUAROT__DP512(a0, QUAROT__QG_LO(v), QUAROT__QG_LD(x + b * 128));
            a1 = QUAROT__DP512(a1, QUAROT__QG_HI(v), QUAROT__QG_LD(x + b * 128 + 64));
            a2 = QUAROT__DP512(a2, QUAROT__QG_LO(u), QUAROT__QG_LD(x + b * 128 + 128));
            a3 = QUAROT__DP512(a3, QUAROT__QG_HI(u), QUAROT__QG_LD(x + b * 128 + 192));
        }
        if (b < nblk) {
            __m512i v = QUAROT__QG_LD(w + b * 64);
            a0 = QUAROT__DP512(a0, QUAROT__QG_LO(v), QUAROT__QG_LD(x + b * 128));
            a1 = QUAROT__DP512(a1, QUAROT__QG_HI(v), QUAROT__QG_LD(x + b * 128 + 64));
        }
    } else {
        for (; b + 4 <= nblk; b += 4) {
            a0 = QUAROT__QG8DP(a0, QUAROT__QG_LD(w + b * 64), QUAROT__QG_LD(x + b * 64));
            a1 = QUAROT__QG8DP(a1, QUAROT__QG_LD(w + b * 64 + 64), QUAROT__QG_LD(x + b * 64 + 64));
            a2 = QUAROT__QG8DP(a2, QUAROT__QG_LD(w + b * 64 + 128), QUAROT__QG_LD(x + b * 64 + 128));
            a3 = QUAROT__QG8DP(a3, QUAROT__QG_LD(w + b * 64 + 192), QUAROT__QG_LD(x + b * 64 + 192));
        }
        for (; b < nblk; ++b) a0 = QUAROT__QG8DP(a0, QUAROT__QG_LD(w + b * 64), QUAROT__QG_LD(x + b * 64));
    }
    // lane-wise wrapping adds, then the 16 lanes: the sum modulo 2^32 in any order
    a0 = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
    {
        uint32_t l[16], sum = 0;
        int i;
        _mm512_storeu_si512((void*)l, a0);
        for (i = 0; i < 16; ++i) sum += l[i];
        return sum;
    }
}
#undef QUAROT__QG_LD
#undef QUAROT__QG_LO
#undef QUAROT__QG_HI
QUAROT__PRIVATE void quarot__qg_tile_avx512(int bits, const uint8_t* const* w, const int8_t* const* x, int nt,
                                            int64_t nblk, uint32_t (*acc)[QUAROT__QG_TILE], const quarot__qg_ep* ep) {
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    switch (nt) {
        case 1: quarot__qg_tile_nt_avx512(1, bits, w0, w1, w2, w3, x, nblk, acc, ep); break;
        case 2: quarot__qg_tile_nt_avx512(2, bits, w0, w1, w2, w3, x, nblk, acc, ep); break;
        case 3: quarot__qg_tile_nt_avx512(3, bits, w0, w1, w2, w3, x, nblk, acc, ep); break;
        default: quarot__qg_tile_nt_avx512(4, bits, w0, w1, w2, w3, x, nblk, acc, ep); break;
    }
}
#endif

#if defined(QUAROT__HAVE_AVX2)
#if defined(__AVXVNNI__)
  #define QUAROT__DP256(a, u, s) _mm256_dpbusd_avx_epi32((a), (u), (s))
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
  #define QUAROT__DP256(a, u, s) _mm256_dpbusd_epi32((a), (u), (s))
#else
  #define QUAROT__DP256(a, u, s) \
    _mm256_add_epi32((a), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#endif
QUAROT__PRIVATE __m256i quarot__qg_dp8_avx2(__m256i a, __m256i u, __m256i s) {
#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
    return QUAROT__DP256(a, u, s);
#else
    __m256i u0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(u));
    __m256i u1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(u, 1));
    __m256i s0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(s));
    __m256i s1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(s, 1));
    a = _mm256_add_epi32(a, _mm256_madd_epi16(u0, s0));
    return _mm256_add_epi32(a, _mm256_madd_epi16(u1, s1));
#endif
}
QUAROT__PRIVATE uint32_t quarot__qg_hsum_avx2(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return (uint32_t)_mm_cvtsi128_si32(s);
}
// One weight row for nt = 1..4 tokens, inlined once per nt by quarot__qg_full_avx2.
QUAROT__INLINE void quarot__qg_full_nt_avx2(const int nt, int bits, const uint8_t* w, const int8_t* const* x,
                                            int64_t nblk, uint32_t* acc) {
    const __m256i m = _mm256_set1_epi8(15);
    __m256i a[4];
    int64_t b;
    int t;
    for (t = 0; t < nt; ++t) a[t] = _mm256_setzero_si256();
    if (bits == 4) {
        for (b = 0; b < nblk; ++b) {
            __m256i v0 = _mm256_loadu_si256((const __m256i*)(const void*)(w + b * 64));
            __m256i v1 = _mm256_loadu_si256((const __m256i*)(const void*)(w + b * 64 + 32));
            __m256i l0 = _mm256_and_si256(v0, m), h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m);
            __m256i l1 = _mm256_and_si256(v1, m), h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m);
            for (t = 0; t < nt; ++t) {
                const int8_t* xb = x[t] + b * 128;
                a[t] = QUAROT__DP256(a[t], l0, _mm256_loadu_si256((const __m256i*)(const void*)xb));
                a[t] = QUAROT__DP256(a[t], l1, _mm256_loadu_si256((const __m256i*)(const void*)(xb + 32)));
                a[t] = QUAROT__DP256(a[t], h0, _mm256_loadu_si256((const __m256i*)(const void*)(xb + 64)));
                a[t] = QUAROT__DP256(a[t], h1, _mm256_loadu_si256((const __m256i*)(const void*)(xb + 96)));
            }
        }
    } else {
        for (b = 0; b < nblk; ++b) {
            __m256i v0 = _mm256_loadu_si256((const __m256i*)(const void*)(w + b * 64));
            __m256i v1 = _mm256_loadu_si256((const __m256i*)(const void*)(w + b * 64 + 32));
            for (t = 0; t < nt; ++t) {
                const int8_t* xb = x[t] + b * 64;
                a[t] = quarot__qg_dp8_avx2(a[t], v0, _mm256_loadu_si256((const __m256i*)(const void*)xb));
                a[t] = quarot__qg_dp8_avx2(a[t], v1, _mm256_loadu_si256((const __m256i*)(const void*)(xb + 32)));
            }
        }
    }
    for (t = 0; t < nt; ++t) acc[t] += quarot__qg_hsum_avx2(a[t]);
}
QUAROT__PRIVATE void quarot__qg_full_avx2(int bits, const uint8_t* w, const int8_t* const* x, int nt, int64_t nblk,
                                          uint32_t* acc) {
    switch (nt) {
        case 1: quarot__qg_full_nt_avx2(1, bits, w, x, nblk, acc); break;
        case 2: quarot__qg_full_nt_avx2(2, bits, w, x, nblk, acc); break;
        case 3: quarot__qg_full_nt_avx2(3, bits, w, x, nblk, acc); break;
        default: quarot__qg_full_nt_avx2(4, bits, w, x, nblk, acc); break;
    }
}
// One row against one token (decode): quarot__qg_row1_avx512's order, 32-byte vectors.
#define QUAROT__QG_LD2(p) _mm256_loadu_si256((const __m256i*)(const void*)(p))
QUAROT__PRIVATE uint32_t quarot__qg_row1_avx2(int bits, const uint8_t* w, const int8_t* x, int64_t nblk) {
    const __m256i m = _mm256_set1_epi8(15);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    int64_t b;
    for (b = 0; b < nblk; ++b) {
        __m256i v0 = QUAROT__QG_LD2(w + b * 64), v1 = QUAROT__QG_LD2(w + b * 64 + 32);
        if (bits == 4) {
            const int8_t* xb = x + b * 128;
            a0 = QUAROT__DP256(a0, _mm256_and_si256(v0, m), QUAROT__QG_LD2(xb));
            a1 = QUAROT__DP256(a1, _mm256_and_si256(v1, m), QUAROT__QG_LD2(xb + 32));
            a2 = QUAROT__DP256(a2, _mm256_and_si256(_mm256_srli_epi16(v0, 4), m), QUAROT__QG_LD2(xb + 64));
            a3 = QUAROT__DP256(a3, _mm256_and_si256(_mm256_srli_epi16(v1, 4), m), QUAROT__QG_LD2(xb + 96));
        } else {
            a0 = quarot__qg_dp8_avx2(a0, v0, QUAROT__QG_LD2(x + b * 64));
            a1 = quarot__qg_dp8_avx2(a1, v1, QUAROT__QG_LD2(x + b * 64 + 32));
        }
    }
    return quarot__qg_hsum_avx2(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)));
}
#undef QUAROT__QG_LD2
#endif

#if defined(QUAROT__HAVE_NEON)
// u in [0, 15] fits a signed byte, so sdot (or widening multiplies) gives sum u*x directly; 8-bit
// u in [0, 255] does not, and is widened to 16 bits.
QUAROT__PRIVATE int32x4_t quarot__qg_dp4_neon(int32x4_t a, uint8x16_t u, int8x16_t s) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(a, vreinterpretq_s8_u8(u), s);
#else
    int8x16_t us = vreinterpretq_s8_u8(u);
    a = vpadalq_s16(a, vmull_s8(vget_low_s8(us), vget_low_s8(s)));
    return vpadalq_s16(a, vmull_high_s8(us, s));
#endif
}
QUAROT__PRIVATE int32x4_t quarot__qg_dp8_neon(int32x4_t a, uint8x16_t u, int8x16_t s) {
    int16x8_t u0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(u))), u1 = vreinterpretq_s16_u16(vmovl_high_u8(u));
    int16x8_t s0 = vmovl_s8(vget_low_s8(s)), s1 = vmovl_high_s8(s);
    a = vmlal_s16(a, vget_low_s16(u0), vget_low_s16(s0));
    a = vmlal_high_s16(a, u0, s0);
    a = vmlal_s16(a, vget_low_s16(u1), vget_low_s16(s1));
    return vmlal_high_s16(a, u1, s1);
}
QUAROT__PRIVATE void quarot__qg_full_neon(int bits, const uint8_t* w, const int8_t* const* x, int nt, int64_t nblk,
                                          uint32_t* acc) {
    const uint8x16_t m = vdupq_n_u8(15);
    int64_t b;
    int t, i;
    for (t = 0; t < nt; ++t) {
        int32x4_t a = vdupq_n_s32(0);
        for (b = 0; b < nblk; ++b) {
            if (bits == 4) {
                for (i = 0; i < 4; ++i) {
                    uint8x16_t v = vld1q_u8(w + b * 64 + i * 16);
                    a = quarot__qg_dp4_neon(a, vandq_u8(v, m), vld1q_s8(x[t] + b * 128 + i * 16));
                    a = quarot__qg_dp4_neon(a, vshrq_n_u8(v, 4), vld1q_s8(x[t] + b * 128 + 64 + i * 16));
                }
            } else {
                for (i = 0; i < 4; ++i)
                    a = quarot__qg_dp8_neon(a, vld1q_u8(w + b * 64 + i * 16), vld1q_s8(x[t] + b * 64 + i * 16));
            }
        }
        acc[t] += (uint32_t)vaddvq_s32(a);
    }
}
// One row against one token (decode): four accumulators instead of one chain.
QUAROT__PRIVATE uint32_t quarot__qg_row1_neon(int bits, const uint8_t* w, const int8_t* x, int64_t nblk) {
    const uint8x16_t m = vdupq_n_u8(15);
    int32x4_t a[4];
    int64_t b;
    int i;
    for (i = 0; i < 4; ++i) a[i] = vdupq_n_s32(0);
    for (b = 0; b < nblk; ++b)
        for (i = 0; i < 4; ++i) {
            uint8x16_t v = vld1q_u8(w + b * 64 + i * 16);
            if (bits == 4) {
                a[i] = quarot__qg_dp4_neon(a[i], vandq_u8(v, m), vld1q_s8(x + b * 128 + i * 16));
                a[i] = quarot__qg_dp4_neon(a[i], vshrq_n_u8(v, 4), vld1q_s8(x + b * 128 + 64 + i * 16));
            } else {
                a[i] = quarot__qg_dp8_neon(a[i], v, vld1q_s8(x + b * 64 + i * 16));
            }
        }
    // lane-wise wrapping adds in uint32 (the sum modulo 2^32)
    {
        uint32x4_t u = vaddq_u32(vaddq_u32(vreinterpretq_u32_s32(a[0]), vreinterpretq_u32_s32(a[1])),
                                 vaddq_u32(vreinterpretq_u32_s32(a[2]), vreinterpretq_u32_s32(a[3])));
        return vaddvq_u32(u);
    }
}
#endif

// acc[r][t] += sum u*x over nblk whole blocks, for 4 weight rows (group starts w[r]) and nt tokens.
// With ep != NULL (one group per row, no tail) it writes y itself (see quarot__qg_ep).
typedef void (*quarot__qg_tile_fn)(int bits, const uint8_t* const* w, const int8_t* const* x, int nt, int64_t nblk,
                                   uint32_t (*acc)[QUAROT__QG_TILE], const quarot__qg_ep* ep);
QUAROT__PRIVATE quarot__qg_tile_fn quarot__qg_tile_kernel(quarot_isa isa) {
#if defined(QUAROT__QG_AVX512)
    if (isa == QUAROT_ISA_AVX512) return quarot__qg_tile_avx512;
#endif
    (void)isa;
    return NULL;
}

// Sum u*x over nblk whole blocks of one weight row and one token (decode), or NULL (REF, SSE2): the
// row kernel runs decode like any other token count.
typedef uint32_t (*quarot__qg_row1_fn)(int bits, const uint8_t* w, const int8_t* x, int64_t nblk);
QUAROT__PRIVATE quarot__qg_row1_fn quarot__qg_row1_kernel(quarot_isa isa) {
    switch (isa) {
#if defined(QUAROT__QG_AVX512)
        case QUAROT_ISA_AVX512: return quarot__qg_row1_avx512;
#elif defined(QUAROT__HAVE_AVX512) && defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX512: return quarot__qg_row1_avx2;   // AVX512F without BW, as quarot__qg_kernel
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2: return quarot__qg_row1_avx2;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON: return quarot__qg_row1_neon;
#endif
        default: return NULL;
    }
}

QUAROT__PRIVATE quarot__qg_fn quarot__qg_kernel(quarot_isa isa) {
    switch (isa) {
#if defined(QUAROT__QG_AVX512)
        case QUAROT_ISA_AVX512: return quarot__qg_full_ref;    // not called: the 4-row tile kernel runs every block
#elif defined(QUAROT__HAVE_AVX512) && defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX512: return quarot__qg_full_avx2;   // AVX512F without BW: byte ops need BW
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2: return quarot__qg_full_avx2;
#endif
#if defined(QUAROT__HAVE_NEON)
        case QUAROT_ISA_NEON: return quarot__qg_full_neon;
#endif
        default: return quarot__qg_full_ref;
    }
}

// >>qgemm_run
QUAROT_API size_t quarot_qmat_row_bytes(int bits, int64_t cols, int64_t group) {
    if (cols <= 0 || group < 0) return 0;
    if (group == 0) group = cols;
    if (cols % group != 0) return 0;
    if (bits == 8) return (size_t)cols;
    if (bits == 4) return (size_t)(cols / group) * (size_t)((group + 1) / 2);
    return 0;
}

// Byte and nibble of code k (0 <= k < G) within a packed 4-bit group.
QUAROT__PRIVATE void quarot__qg_pos4(int64_t G, int64_t k, int64_t* byte, int* high) {
    int64_t blk = k / 128, off = k - blk * 128, L = G - blk * 128, h;
    if (L > 128) L = 128;
    h = (L + 1) / 2;
    *byte = blk * 64 + (off < h ? off : off - h);
    *high = off >= h;
}

QUAROT_API quarot_result quarot_qmat_pack(int bits, const int8_t* q, int64_t rows, int64_t cols, int64_t group,
                                          uint8_t* out) {
    size_t rb = quarot_qmat_row_bytes(bits, cols, group);
    int64_t r, k, lo = bits == 4 ? -8 : -128, hi = bits == 4 ? 7 : 127, G;
    if (!q || !out || rows < 0 || rb == 0) return QUAROT_ERR_INVALID_ARGUMENT;
    for (k = 0; k < rows * cols; ++k)
        if (q[k] < lo || q[k] > hi) return QUAROT_ERR_INVALID_ARGUMENT;
    G = group ? group : cols;
    for (r = 0; r < rows; ++r) {
        uint8_t* o = out + (size_t)r * rb;
        const int8_t* qr = q + r * cols;
        if (bits == 8) {
            for (k = 0; k < cols; ++k) o[k] = (uint8_t)(qr[k] + 128);
            continue;
        }
        memset(o, 0x88, rb);   // u = 8 (code 0) in both nibbles: odd blocks' missing code
        for (k = 0; k < cols; ++k) {
            int64_t g = k / G, byte;
            int high;
            uint8_t* og = o + g * ((G + 1) / 2);
            quarot__qg_pos4(G, k - g * G, &byte, &high);
            og[byte] = (uint8_t)(high ? ((og[byte] & 0x0f) | ((qr[k] + 8) << 4)) : ((og[byte] & 0xf0) | (qr[k] + 8)));
        }
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_qmat_unpack(int bits, const uint8_t* data, int64_t rows, int64_t cols, int64_t group,
                                            int8_t* q) {
    size_t rb = quarot_qmat_row_bytes(bits, cols, group);
    int64_t r, k, G;
    if (!q || !data || rows < 0 || rb == 0) return QUAROT_ERR_INVALID_ARGUMENT;
    G = group ? group : cols;
    for (r = 0; r < rows; ++r) {
        const uint8_t* o = data + (size_t)r * rb;
        for (k = 0; k < cols; ++k) {
            int64_t g = k / G, byte;
            int high;
            if (bits == 8) { q[r * cols + k] = (int8_t)((int)o[k] - 128); continue; }
            quarot__qg_pos4(G, k - g * G, &byte, &high);
            byte += g * ((G + 1) / 2);
            q[r * cols + k] = (int8_t)((high ? o[byte] >> 4 : o[byte] & 15) - 8);
        }
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_qact_sums(const int8_t* xq, int64_t rows, int64_t cols, int64_t ldx, int64_t group,
                                          int32_t* xsum) {
    int64_t t, g, k, G, ng;
    if (!xq || !xsum || rows < 0 || cols <= 0 || ldx < cols || group < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    G = group ? group : cols;
    if (cols % G != 0) return QUAROT_ERR_INVALID_ARGUMENT;
    ng = cols / G;
    for (t = 0; t < rows; ++t)
        for (g = 0; g < ng; ++g) {
            int32_t s = 0;
            const int8_t* x = xq + t * ldx + g * G;
            for (k = 0; k < G; ++k) s += x[k];
            xsum[t * ng + g] = s;
        }
    return QUAROT_OK;
}

typedef struct quarot__qg_job {
    const quarot_qmat* w;
    const int8_t* xq;
    const float* xs;
    const int32_t* xsum;
    int64_t ldx, rows, ldy;
    float* y;
    quarot__qg_fn fn;
    quarot__qg_tile_fn tile;   // NULL: fn row by row
    quarot__qg_row1_fn row1;   // one token: row after row (NULL: as any token count)
    int64_t per;               // blocks of QUAROT__QG_ROWS rows per task
} quarot__qg_job;

// Output rows [o0, o1) of every token: tiles of QUAROT__QG_TILE tokens x 4 rows. The integer sums
// come from the ISA's 4-row kernel where there is one, else from its row kernel, row by row (the
// same integers either way); the float steps per (t, o) are the same scalar code for every ISA.
QUAROT__PRIVATE void quarot__qg_rows(const quarot__qg_job* jb, int64_t o0, int64_t o1) {
    const quarot_qmat* w = jb->w;
    int64_t G = w->group ? w->group : w->cols, ng = w->cols / G, o, t0, g;
    size_t rb = quarot_qmat_row_bytes(w->bits, w->cols,
                                      w->group), gb = w->bits == 4 ? (size_t)((G + 1) / 2) : (size_t)G;
    int64_t blk = w->bits == 4 ? 128 : 64, nblk = G / blk, tail = G - nblk * blk;
    uint32_t off = w->bits == 4 ? 8u : 128u;
    int whole = ng == 1 && tail == 0 && jb->tile != NULL;   // one scale per row, whole blocks: finished in the kernel
    if (jb->rows == 1 && jb->row1) {   // decode: one row after the other, the same float steps per (t, o)
        for (o = o0; o < o1; ++o) {
            const uint8_t* wr = w->data + (size_t)o * rb;
            float f = 0.0f;
            for (g = 0; g < ng; ++g) {
                const uint8_t* wg = wr + (size_t)g * gb;
                const int8_t* xg = jb->xq + g * G;
                uint32_t u, a_t = nblk ? jb->row1(w->bits, wg, xg, nblk) : 0u;
                int32_t a;
                if (tail)
                    a_t += w->bits == 4 ? quarot__qg_block4_ref(wg + nblk * 64, xg + nblk * 128, tail)
                                        : quarot__qg_bytes8_ref(wg + nblk * 64, xg + nblk * 64, tail);
                u = a_t - off * (uint32_t)jb->xsum[g];
                a = u <= 0x7fffffffu ? (int32_t)u : -(int32_t)(0xffffffffu - u) - 1;
                f += (float)a * w->scales[o * ng + g];
            }
            jb->y[o] = f * jb->xs[0];
        }
        return;
    }
    for (t0 = 0; t0 < jb->rows; t0 += QUAROT__QG_TILE) {
        int nt = (int)(jb->rows - t0 < QUAROT__QG_TILE ? jb->rows - t0 : QUAROT__QG_TILE), t, r;
        for (o = o0; o < o1; o += 4) {
            int nr = (int)(o1 - o < 4 ? o1 - o : 4);
            const uint8_t* wr[4];
            float f[4][QUAROT__QG_TILE];
            for (r = 0; r < 4; ++r)   // past the end: a copy of the last row
                wr[r] = w->data + (size_t)(o + (r < nr ? r : nr - 1)) * rb;
            if (whole) {
                const int8_t* xg[QUAROT__QG_TILE];
                quarot__qg_ep ep;
                for (t = 0; t < QUAROT__QG_TILE; ++t) {
                    int tt = t < nt ? t : 0;
                    xg[t] = jb->xq + (t0 + tt) * jb->ldx;
                    ep.offx[t] = off * (uint32_t)jb->xsum[t0 + tt];
                    ep.xs[t] = jb->xs[t0 + tt];
                    ep.y[t] = jb->y + (t0 + tt) * jb->ldy + o;
                }
                for (r = 0; r < 4; ++r) ep.ws[r] = w->scales[o + (r < nr ? r : nr - 1)];
                ep.nr = nr;
                jb->tile(w->bits, wr, xg, nt, nblk, NULL, &ep);
                continue;
            }
            for (r = 0; r < 4; ++r)
                for (t = 0; t < QUAROT__QG_TILE; ++t) f[r][t] = 0.0f;
            for (g = 0; g < ng; ++g) {
                const uint8_t* wg[4];
                const int8_t* xg[QUAROT__QG_TILE];
                uint32_t acc[4][QUAROT__QG_TILE];
                for (r = 0; r < 4; ++r) {
                    wg[r] = wr[r] + (size_t)g * gb;
                    for (t = 0; t < QUAROT__QG_TILE; ++t) acc[r][t] = 0u;
                }
                for (t = 0; t < nt; ++t) xg[t] = jb->xq + (t0 + t) * jb->ldx + g * G;
                if (nblk && jb->tile) jb->tile(w->bits, wg, xg, nt, nblk, acc, NULL);
                else if (nblk)
                    for (r = 0; r < nr; ++r) jb->fn(w->bits, wg[r], xg, nt, nblk, acc[r]);
                for (r = 0; r < nr; ++r) {
                    float ws = w->scales[(o + r) * ng + g];
                    for (t = 0; t < nt; ++t) {
                        uint32_t u, a_t = acc[r][t];
                        int32_t a;
                        if (tail)
                            a_t += w->bits == 4 ? quarot__qg_block4_ref(wg[r] + nblk * 64, xg[t] + nblk * 128, tail)
                                                      : quarot__qg_bytes8_ref(wg[r] + nblk * 64, xg[t] + nblk * 64,
                                                                              tail);
                        // two's complement wrap back to int32 (exact: the true value is in range)
                        u = a_t - off * (uint32_t)jb->xsum[(t0 + t) * ng + g];
                        a = u <= 0x7fffffffu ? (int32_t)u : -(int32_t)(0xffffffffu - u) - 1;
                        f[r][t] += (float)a * ws;
                    }
                }
            }
            for (r = 0; r < nr; ++r)
                for (t = 0; t < nt; ++t) jb->y[(t0 + t) * jb->ldy + o + r] = f[r][t] * jb->xs[t0 + t];
        }
    }
}

// Task i: the blocks of QUAROT__QG_ROWS output rows [i * per, (i + 1) * per), one block after the
// other (each block's rows stay in L1 across the token tiles). The block boundaries are the same for
// any task size, so the split changes no result.
QUAROT__PRIVATE void quarot__qg_task(void* arg, int64_t task) {
    const quarot__qg_job* jb = (const quarot__qg_job*)arg;
    int64_t b = task * jb->per, b1 = b + jb->per, nb = (jb->w->rows + QUAROT__QG_ROWS - 1) / QUAROT__QG_ROWS;
    if (b1 > nb) b1 = nb;
    for (; b < b1; ++b) {
        int64_t o1 = (b + 1) * QUAROT__QG_ROWS;
        quarot__qg_rows(jb, b * QUAROT__QG_ROWS, o1 < jb->w->rows ? o1 : jb->w->rows);
    }
}

QUAROT_API quarot_result quarot_qgemm(const quarot_qmat* w, const int8_t* xq, int64_t ldx, const float* x_scales,
                                      const int32_t* xsum, int64_t rows, float* y, int64_t ldy, quarot_isa isa,
                                      const quarot_env* env) {
    quarot__qg_job jb;
    quarot_isa use;
    quarot_result r;
    int64_t G, nb, nt;
    if (!w || !w->data || !w->scales || !xq || !x_scales || !xsum || !y || rows < 0 || w->rows < 0 ||
        quarot_qmat_row_bytes(w->bits, w->cols, w->group) == 0 || ldx < w->cols || ldy < w->rows)
        return QUAROT_ERR_INVALID_ARGUMENT;
    G = w->group ? w->group : w->cols;
    if (G > (w->bits == 4 ? (INT64_C(1) << 20) : (INT64_C(1) << 16))) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot__isa_resolve(isa, &use);
    if (r != QUAROT_OK) return r;
    if (rows == 0 || w->rows == 0) return QUAROT_OK;
    jb.w = w; jb.xq = xq; jb.xs = x_scales; jb.xsum = xsum;
    jb.ldx = ldx; jb.rows = rows; jb.ldy = ldy; jb.y = y;
    jb.fn = quarot__qg_kernel(use);
    jb.tile = quarot__qg_tile_kernel(use);
    jb.row1 = quarot__qg_row1_kernel(use);
    nb = (w->rows + QUAROT__QG_ROWS - 1) / QUAROT__QG_ROWS;
    // QUAROT__QG_SPLIT tasks per thread: few enough that taking a task costs nothing beside it, enough
    // that a thread slowed by another process does not leave the others waiting long
    nt = env && env->parallel.n_threads > 1 ? (int64_t)env->parallel.n_threads * QUAROT__QG_SPLIT : 1;
    jb.per = (nb + nt - 1) / nt;
    quarot_env_parallel_for(env, quarot__qg_task, &jb, (nb + jb.per - 1) / jb.per);
    return QUAROT_OK;
}

// >>qgemm_amx
// C[o][t] += sum_k A[o][k] B[k][t] on 16 x 16 int32 tiles: A = 16 weight rows x 64 offset-binary
// codes (4 bits: a block's low or high nibbles, unpacked with AVX-512; 8 bits: the bytes), B = 64
// codes of 16 tokens, re-laid once per call as TDPBUSD reads it (B[k/4][4t + k%4]). Four C tiles
// hold 32 rows x 32 tokens; per weight group they are stored, and quarot_qgemm's scalar finish runs
// on them.
#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__linux__) && defined(__x86_64__) && \
    defined(__GNUC__) && defined(QUAROT__HAVE_AVX512) && defined(__AVX512BW__)
#define QUAROT__QG_AMX 1
#define QUAROT__AMX_GET_PERM 0x1022   // arch_prctl codes and the XTILEDATA state component (Linux ABI)
#define QUAROT__AMX_REQ_PERM 0x1023
#define QUAROT__AMX_XTILEDATA 18
// arch_prctl(2) directly (syscall 158 on x86-64): libc declares no wrapper in strict C99 mode.
static long quarot__amx_prctl(long code, unsigned long arg) {
    long ret;
    __asm__ __volatile__("syscall" : "=a"(ret) : "0"(158L), "D"(code), "S"(arg) : "rcx", "r11", "memory");
    return ret;
}
static int quarot__amx_granted(void) {
    unsigned long mask = 0;
    return quarot__amx_prctl(QUAROT__AMX_GET_PERM, (unsigned long)(uintptr_t)&mask) == 0 &&
           (mask & (1ul << QUAROT__AMX_XTILEDATA)) != 0;
}
static int quarot__amx_cpu(void) {   // CPUID.(7,0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8
    unsigned a = 7, b = 0, c = 0, d = 0;
    __asm__ __volatile__("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    return (d >> 24 & 1u) && (d >> 25 & 1u);
}
typedef struct quarot__amx_cfg {   // LDTILECFG's 64-byte operand, palette 1
    uint8_t palette, start_row, reserved0[14];
    uint16_t colsb[16];
    uint8_t rows[16], reserved1[16];
} quarot__amx_cfg;
// Tiles 0-3: C (16 x 16 int32), 4-5: A, 6-7: B; all 16 rows of 64 bytes.
static void quarot__amx_config(void) {
    quarot__amx_cfg cfg;
    int i;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (i = 0; i < 8; ++i) { cfg.colsb[i] = 64; cfg.rows[i] = 16; }
    _tile_loadconfig(&cfg);
}

typedef struct quarot__amx_job {
    const quarot_qmat* w;
    const uint8_t* b;          // activations re-laid: [tile j][chunk c][16][64]
    const float* xs;
    const int32_t* xsum;
    int64_t rows, ldy, nc, per;   // tokens, y stride, 64-code chunks per row, 16-row blocks per task
    float* y;
} quarot__amx_job;

// 32 output rows from o0 (nr valid; the others copies of the last), tokens [t0, t0 + 16 * ntile),
// ntile <= 2: C tiles 0-3 = (rows 0-15, 16-31) x (token tiles 0, 1), A = 4, 5, B = 6, 7, so each
// loaded tile serves two products.
QUAROT__PRIVATE void quarot__qg_amx_block(const quarot__amx_job* jb, int64_t o0, int nr, int64_t t0, int ntile) {
    const quarot_qmat* w = jb->w;
    int64_t G = w->group ? w->group : w->cols, ng = w->cols / G, cpg = G / 64, g, c;
    size_t rb = quarot_qmat_row_bytes(w->bits, w->cols, w->group), gb = w->bits == 4 ? (size_t)(G / 2) : (size_t)G;
    uint32_t off = w->bits == 4 ? 8u : 128u;
    int nt = (int)(jb->rows - t0 < 16 * ntile ? jb->rows - t0 : 16 * ntile), r, t, two = nr > 16;
    int nu = two ? 32 : 16;   // rows unpacked
    const uint8_t* wr[32];
    uint8_t a[2][32 * 64] __attribute__((aligned(64)));
    int32_t cb[4][16 * 16] __attribute__((aligned(64)));
    float f[32][32] __attribute__((aligned(64)));
    uint32_t ox[32] __attribute__((aligned(64)));
    const __m512i m = _mm512_set1_epi8(15);
    for (r = 0; r < 32; ++r) wr[r] = w->data + (size_t)(o0 + (r < nr ? r : nr - 1)) * rb;
    for (r = 0; r < 32; ++r)
        for (t = 0; t < 32; ++t) f[r][t] = 0.0f;
    for (g = 0; g < ng; ++g) {
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (c = 0; c < cpg; ++c) {
            const uint8_t* bt = jb->b + ((size_t)(t0 / 16) * (size_t)jb->nc + (size_t)(g * cpg + c)) * 1024;
            const uint8_t* at;
            if (w->bits == 4) {
                if ((c & 1) == 0)   // a 128-code block: low nibbles are codes 0..63, high 64..127
                    for (r = 0; r < nu; ++r) {   // 32 rows are 32 streams: ask for the block 4 ahead
                        __m512i v = _mm512_loadu_si512((const void*)(wr[r] + (size_t)g * gb + (size_t)(c / 2) * 64));
                        _mm_prefetch((const char*)(wr[r] + (size_t)g * gb + (size_t)(c / 2 + 4) * 64), _MM_HINT_T0);
                        _mm512_store_si512((void*)(a[0] + r * 64), _mm512_and_si512(v, m));
                        _mm512_store_si512((void*)(a[1] + r * 64), _mm512_and_si512(_mm512_srli_epi16(v, 4), m));
                    }
                at = a[c & 1];
            } else {
                for (r = 0; r < nu; ++r)
                    _mm512_store_si512((void*)(a[0] + r * 64),
                                       _mm512_loadu_si512((const void*)(wr[r] + (size_t)g * gb + (size_t)c * 64)));
                at = a[0];
            }
            _tile_loadd(4, at, 64);
            _tile_loadd(6, bt, 64);
            _tile_dpbusd(0, 4, 6);
            if (ntile > 1) { _tile_loadd(7, bt + (size_t)jb->nc * 1024, 64); _tile_dpbusd(1, 4, 7); }
            if (two) {
                _tile_loadd(5, at + 16 * 64, 64);
                _tile_dpbusd(2, 5, 6);
                if (ntile > 1) _tile_dpbusd(3, 5, 7);
            }
        }
        _tile_stored(0, cb[0], 64); _tile_stored(1, cb[1], 64); _tile_stored(2, cb[2], 64); _tile_stored(3, cb[3], 64);
        // quarot__qg_rows' finish per (t, o), 16 tokens a vector: a = sum - offset * xsum (wrapping
        // int32), f += float(a) * w_scale (a multiply, then an add: no contraction)
        for (t = 0; t < 32; ++t) ox[t] = t < nt ? off * (uint32_t)jb->xsum[(t0 + t) * ng + g] : 0u;
        for (r = 0; r < nr; ++r) {
            __m512 ws = _mm512_set1_ps(w->scales[(o0 + r) * ng + g]);
            for (t = 0; t < ntile; ++t) {
                const int32_t* cr = (r < 16 ? cb[t] + r * 16 : cb[2 + t] + (r - 16) * 16);
                __m512i v = _mm512_sub_epi32(_mm512_load_si512((const void*)cr),
                                             _mm512_load_si512((const void*)(ox + 16 * t)));
                __m512 fv = _mm512_load_ps(&f[r][16 * t]);
                // the zero-masked conversion: the plain one reads _mm512_undefined_ps(), which g++ 12 -O1
                // reports as uninitialized (as in quarot__qg_store16_avx512)
                _mm512_store_ps(&f[r][16 * t],
                                _mm512_add_ps(fv, _mm512_mul_ps(_mm512_maskz_cvtepi32_ps((__mmask16)0xFFFF, v), ws)));
            }
        }
    }
    for (r = 0; r < nr; ++r)
        for (t = 0; t < nt; ++t) jb->y[(t0 + t) * jb->ldy + o0 + r] = f[r][t] * jb->xs[t0 + t];
}

QUAROT__PRIVATE void quarot__qg_amx_task(void* arg, int64_t task) {
    const quarot__amx_job* jb = (const quarot__amx_job*)arg;
    int64_t nb = (jb->w->rows + 31) / 32, b = task * jb->per, b1 = b + jb->per, t0;
    if (b1 > nb) b1 = nb;
    quarot__amx_config();   // tile configuration is per thread
    for (; b < b1; ++b) {
        int nr = (int)(jb->w->rows - b * 32 < 32 ? jb->w->rows - b * 32 : 32);
        for (t0 = 0; t0 < jb->rows; t0 += 32) {
            int64_t left = (jb->rows - t0 + 15) / 16;
            quarot__qg_amx_block(jb, b * 32, nr, t0, (int)(left < 2 ? left : 2));
        }
    }
    _tile_release();
}
#endif

QUAROT_API quarot_result quarot_amx_request(void) {
#if defined(QUAROT__QG_AMX)
    if (!quarot__amx_cpu()) return QUAROT_ERR_UNSUPPORTED;
    if (quarot__amx_granted()) return QUAROT_OK;
    if (quarot__amx_prctl(QUAROT__AMX_REQ_PERM, QUAROT__AMX_XTILEDATA) != 0) return QUAROT_ERR_UNSUPPORTED;
    return quarot__amx_granted() ? QUAROT_OK : QUAROT_ERR_UNSUPPORTED;
#else
    return QUAROT_ERR_UNSUPPORTED;
#endif
}

QUAROT_API size_t quarot_qgemm_amx_workspace_size(int64_t rows, int64_t cols) {
    if (rows < 0 || cols <= 0) return 0;
    return (size_t)((rows + 15) / 16) * (size_t)((cols + 63) / 64) * 1024u + 64u;
}

QUAROT_API quarot_result quarot_qgemm_amx(const quarot_qmat* w, const int8_t* xq, int64_t ldx, const float* x_scales,
                                          const int32_t* xsum, int64_t rows, float* y, int64_t ldy, void* work,
                                          size_t work_size, const quarot_env* env) {
#if defined(QUAROT__QG_AMX)
    quarot__amx_job jb;
    int64_t G, nb, ntask, j, n, c, kk;
    uint8_t* b;
    if (!w || !w->data || !w->scales || !xq || !x_scales || !xsum || !y || rows < 0 || w->rows < 0 || !work ||
        quarot_qmat_row_bytes(w->bits, w->cols, w->group) == 0 || ldx < w->cols || ldy < w->rows ||
        work_size < quarot_qgemm_amx_workspace_size(rows, w->cols))
        return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot__amx_granted()) return QUAROT_ERR_UNSUPPORTED;
    G = w->group ? w->group : w->cols;
    if (G % (w->bits == 4 ? 128 : 64) != 0 || G > (w->bits == 4 ? (INT64_C(1) << 20) : (INT64_C(1) << 16)))
        return quarot_qgemm(w, xq, ldx, x_scales, xsum, rows, y, ldy, QUAROT_ISA_DEFAULT, env);
    if (rows == 0 || w->rows == 0) return QUAROT_OK;
    b = (uint8_t*)work + ((64u - (uintptr_t)work % 64u) % 64u);
    jb.nc = w->cols / 64;
    for (j = 0; j < (rows + 15) / 16; ++j)   // b[j][c][kk][4n + i] = x[16j + n][64c + 4kk + i], 0 past the end
        for (n = 0; n < 16; ++n) {
            const int8_t* x = 16 * j + n < rows ? xq + (16 * j + n) * ldx : NULL;
            for (c = 0; c < jb.nc; ++c)
                for (kk = 0; kk < 16; ++kk) {
                    uint8_t* d = b + (size_t)((j * jb.nc + c) * 1024 + kk * 64 + 4 * n);
                    if (x) memcpy(d, x + c * 64 + kk * 4, 4);
                    else memset(d, 0, 4);
                }
        }
    jb.w = w; jb.b = b; jb.xs = x_scales; jb.xsum = xsum; jb.rows = rows; jb.ldy = ldy; jb.y = y;
    nb = (w->rows + 31) / 32;
    ntask = env && env->parallel.n_threads > 1 ? (int64_t)env->parallel.n_threads * QUAROT__QG_SPLIT : 1;
    jb.per = (nb + ntask - 1) / ntask;
    quarot_env_parallel_for(env, quarot__qg_amx_task, &jb, (nb + jb.per - 1) / jb.per);
    return QUAROT_OK;
#else
    (void)w; (void)xq; (void)ldx; (void)x_scales; (void)xsum; (void)rows; (void)y; (void)ldy; (void)work;
    (void)work_size; (void)env;
    return QUAROT_ERR_UNSUPPORTED;
#endif
}

// >>rotation
// Q = diag(Q_b, ..., Q_b). Hadamard blocks go through the fast transform (signs per block: the
// sign vector spans all n); dense blocks through GEMM in chunks of QUAROT__ROT_CHUNK rows, so the
// workspace does not depend on the number of rows.
#define QUAROT__ROT_CHUNK 64

static quarot_env quarot__env_copy(const quarot_env* env) {
    quarot_env e;
    if (env) return *env;
    memset(&e, 0, sizeof e);
    return e;
}

// max |M^T M - I| of a [n][n] matrix, double accumulation.
static double quarot__orth_error(const double* m, int64_t n) {
    double worst = 0.0;
    int64_t i, j, k;
    for (i = 0; i < n; ++i)
        for (j = i; j < n; ++j) {
            double s = 0.0;
            for (k = 0; k < n; ++k) s += m[k * n + i] * m[k * n + j];
            s -= i == j ? 1.0 : 0.0;
            if (fabs(s) > worst) worst = fabs(s);
        }
    return worst;
}

QUAROT_API void quarot_rotation_free(quarot_rotation* r) {
    if (!r) return;
    quarot_hadamard_plan_free(&r->plan);
    quarot_env_free(&r->env, r->signs);
    quarot_env_free(&r->env, r->signs64);
    quarot_env_free(&r->env, r->dense);
    quarot_env_free(&r->env, r->dense32);
    r->signs = NULL;
    r->signs64 = NULL;
    r->dense = NULL;
    r->dense32 = NULL;
}

// Dense block (random orthogonal or given) plus its float copy.
static quarot_result quarot__rotation_set_dense(quarot_rotation* r, const double* m, uint64_t seed) {
    size_t count, bytes;
    int64_t i;
    quarot_result res;
    if (!quarot__mul_size((size_t)r->block, (size_t)r->block,
                          &count) || !quarot__mul_size(count, sizeof(double), &bytes))
        return QUAROT_ERR_OVERFLOW;
    r->dense = (double*)quarot_env_alloc(&r->env, bytes);
    r->dense32 = (float*)quarot_env_alloc(&r->env, count * sizeof(float));
    if (!r->dense || !r->dense32) return QUAROT_ERR_OUT_OF_MEMORY;
    if (m) {
        memcpy(r->dense, m, bytes);
    } else {
        res = quarot_random_orthogonal_f64(r->block, seed, r->dense, r->block, &r->env);
        if (res != QUAROT_OK) return res;
    }
    for (i = 0; i < (int64_t)count; ++i) r->dense32[i] = (float)r->dense[i];
    return QUAROT_OK;
}

// ADAPT (Adapt Rotation): Q_j = Had_j * R. The Hadamard half is exactly the HADAMARD rotation with
// blocks of order hb (same seed, same sign vector over all n), so R == I reproduces it bit for bit.
// hb: `block` when a Hadamard matrix of that order exists, else the largest available order dividing
// it; 0 when there is none (or fallback is ERROR and block itself is not available).
static int64_t quarot__adapt_hadamard_order(int64_t block, quarot_fallback fb) {
    int64_t b;
    if (quarot_hadamard_available(block)) return block;
    if (fb == QUAROT_FALLBACK_ERROR) return 0;
    b = quarot_hadamard_largest_block(block, block);
    return b > 1 ? b : 0;
}

// max|M^T M - I| of M [n][n] with one DGEMM (the triple loop above is fine for small blocks only);
// -1 when the temporary n*n doubles cannot be allocated, NaN when M holds NaN/Inf.
static double quarot__orth_error_gemm(const double* m, int64_t n, const quarot_env* env) {
    size_t count;
    double* g;
    double worst = 0.0;
    int64_t i, j;
    if (!quarot__mul_size((size_t)n, (size_t)n, &count) || !quarot__mul_size(count, sizeof(double), &count))
        return -1.0;
    g = (double*)quarot_env_alloc(env, count);
    if (!g) return -1.0;
    if (quarot_dgemm(1, 0, n, n, n, 1.0, m, n, m, n, 0.0, g, n, env) != QUAROT_OK) {
        quarot_env_free(env, g);
        return -1.0;
    }
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double e = g[i * n + j] - (i == j ? 1.0 : 0.0);
            if (!(fabs(e) <= worst)) worst = fabs(e);   // NaN propagates
        }
    quarot_env_free(env, g);
    return worst;
}

static quarot_result quarot__rotation_init_adapt(quarot_rotation* r, const quarot_rotation_desc* d, int64_t block) {
    double tol = d->orth_tol > 0 ? d->orth_tol : 1e-6, err = 0.0;
    size_t count;
    int64_t hb, i, n = r->n;
    int identity = 1;
    quarot_result res;
    if (!d->matrix) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot__mul_size((size_t)block, (size_t)block, &count) || !quarot__mul_size(count, sizeof(double), &count))
        return QUAROT_ERR_OVERFLOW;
    for (i = 0; i < block * block; ++i) {
        double v = d->matrix[i];
        if (!(v == v) || fabs(v) > 1e300) return QUAROT_ERR_NONFINITE;
        if (v != ((i / block == i % block) ? 1.0 : 0.0)) identity = 0;
    }
    hb = quarot__adapt_hadamard_order(block, d->fallback);
    if (hb == 0) return QUAROT_ERR_UNSUPPORTED_SIZE;
    if (!identity) {
        err = quarot__orth_error_gemm(d->matrix, block, &r->env);
        if (err < 0) return QUAROT_ERR_OUT_OF_MEMORY;
        if (!(err <= tol)) return QUAROT_ERR_INVALID_ARGUMENT;   // not orthogonal
    }
    r->kind = QUAROT_ROTATION_ADAPT;
    r->block = block;
    res = quarot_hadamard_plan_init(&r->plan, hb, &r->env);
    if (res != QUAROT_OK) { quarot_rotation_free(r); return res; }
    if (!d->no_signs) {                  // the same draws as HADAMARD: one sign per element of n
        quarot_rng rng;
        r->signs = (float*)quarot_env_alloc(&r->env, (size_t)n * sizeof(float));
        r->signs64 = (double*)quarot_env_alloc(&r->env, (size_t)n * sizeof(double));
        if (!r->signs || !r->signs64) { quarot_rotation_free(r); return QUAROT_ERR_OUT_OF_MEMORY; }
        quarot_rng_seed(&rng, d->seed);
        quarot_rng_signs_f32(&rng, r->signs, n);
        for (i = 0; i < n; ++i) r->signs64[i] = (double)r->signs[i];
    }
    if (!identity) {
        res = quarot__rotation_set_dense(r, d->matrix, 0);
        if (res != QUAROT_OK) { quarot_rotation_free(r); return res; }
    }
    snprintf(r->text, sizeof r->text, "adapt: %shadamard %s%s, then %s", hb == n ? "" : "block-diagonal ",
             r->plan.info.text, r->signs ? ", random signs" : "", identity ? "R = identity" : "learned R");
    return QUAROT_OK;
}

// ADAPT: x <- (x*Had)*R, or x*R^T*Had^T when transposed. R is applied per block through SGEMM/DGEMM
// in chunks of rows (as the dense kinds); the Hadamard pass through the fast transform.
static quarot_result quarot__rotation_apply_adapt(const quarot_rotation* r, void* x, int is64, int64_t rows,
                                                  int64_t stride, int transpose, void* work, size_t work_size) {
    int64_t hb = r->plan.n, b = r->block, j, pass;
    size_t es = is64 ? sizeof(double) : sizeof(float);
    quarot_result res = QUAROT_OK;
    for (pass = 0; pass < 2 && res == QUAROT_OK; ++pass) {
        int dense_pass = transpose ? pass == 0 : pass == 1;
        if (!dense_pass) {
            for (j = 0; j < r->n / hb && res == QUAROT_OK; ++j) {
                quarot_hadamard_apply_desc hd;
                memset(&hd, 0, sizeof hd);
                hd.transpose = transpose;
                if (r->signs) { hd.signs = r->signs + j * hb; hd.signs_f64 = r->signs64 + j * hb; }
                if (is64)
                    res = quarot_hadamard_apply_f64(&r->plan, &hd, (double*)x + j * hb, rows, stride, work, work_size);
                else res = quarot_hadamard_apply_f32(&r->plan, &hd, (float*)x + j * hb, rows, stride, work, work_size);
            }
        } else if (r->dense) {
            for (j = 0; j < r->n / b && res == QUAROT_OK; ++j) {
                int64_t r0, i;
                for (r0 = 0; r0 < rows && res == QUAROT_OK; r0 += QUAROT__ROT_CHUNK) {
                    int64_t cr = rows - r0 < QUAROT__ROT_CHUNK ? rows - r0 : QUAROT__ROT_CHUNK;
                    if (is64) {
                        double* xs = (double*)x + r0 * stride + j * b;
                        res = quarot_dgemm(0, transpose, cr, b, b, 1.0, xs, stride, r->dense, b, 0.0, (double*)work, b,
                                           &r->env);
                        for (i = 0; i < cr && res == QUAROT_OK; ++i)
                            memcpy(xs + i * stride, (double*)work + i * b, (size_t)b * es);
                    } else {
                        float* xs = (float*)x + r0 * stride + j * b;
                        res = quarot_sgemm(0, transpose, cr, b, b, 1.0f, xs, stride, r->dense32, b, 0.0f, (float*)work,
                                           b, &r->env);
                        for (i = 0; i < cr && res == QUAROT_OK; ++i)
                            memcpy(xs + i * stride, (float*)work + i * b, (size_t)b * es);
                    }
                }
            }
        }
    }
    return res;
}

QUAROT_API quarot_result quarot_rotation_init(quarot_rotation* r, const quarot_rotation_desc* d,
                                              const quarot_env* env) {
    quarot_rotation_kind kind;
    int64_t n, block;
    quarot_result res;
    if (!r) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(r, 0, sizeof *r);
    r->env = quarot__env_copy(env);
    if (!d || d->n <= 0) return QUAROT_ERR_INVALID_ARGUMENT;
    kind = d->kind == QUAROT_ROTATION_DEFAULT ? QUAROT_ROTATION_HADAMARD : d->kind;
    n = d->n;
    block = d->block_size > 0 ? d->block_size : n;
    if (block > n || n % block != 0) return QUAROT_ERR_INVALID_ARGUMENT;
    r->n = n;
    if (kind == QUAROT_ROTATION_ADAPT) return quarot__rotation_init_adapt(r, d, block);
    if (kind == QUAROT_ROTATION_IDENTITY) {
        r->kind = kind;
        r->block = n;
        snprintf(r->text, sizeof r->text, "identity %lld", (long long)n);
        return QUAROT_OK;
    }
    if (kind == QUAROT_ROTATION_HADAMARD && !quarot_hadamard_available(block)) {
        int64_t b = quarot_hadamard_largest_block(n, block);
        quarot_fallback fb = d->fallback;
        if (fb == QUAROT_FALLBACK_ERROR) return QUAROT_ERR_UNSUPPORTED_SIZE;
        if (fb == QUAROT_FALLBACK_DEFAULT) fb = b > 1 ? QUAROT_FALLBACK_BLOCK : QUAROT_FALLBACK_RANDOM_ORTHOGONAL;
        if (fb == QUAROT_FALLBACK_BLOCK) {
            if (b <= 1) return QUAROT_ERR_UNSUPPORTED_SIZE;
            block = b;
        } else if (fb == QUAROT_FALLBACK_RANDOM_ORTHOGONAL) {
            kind = QUAROT_ROTATION_RANDOM_ORTHOGONAL;
            block = d->block_size > 0 ? d->block_size : n;
        } else {
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    r->kind = kind;
    r->block = block;
    if (kind == QUAROT_ROTATION_HADAMARD) {
        res = quarot_hadamard_plan_init(&r->plan, block, &r->env);
        if (res != QUAROT_OK) { quarot_rotation_free(r); return res; }
        if (!d->no_signs) {
            quarot_rng rng;
            int64_t i;
            r->signs = (float*)quarot_env_alloc(&r->env, (size_t)n * sizeof(float));
            r->signs64 = (double*)quarot_env_alloc(&r->env, (size_t)n * sizeof(double));
            if (!r->signs || !r->signs64) { quarot_rotation_free(r); return QUAROT_ERR_OUT_OF_MEMORY; }
            quarot_rng_seed(&rng, d->seed);
            quarot_rng_signs_f32(&rng, r->signs, n);
            for (i = 0; i < n; ++i) r->signs64[i] = (double)r->signs[i];
        }
        if (block == n)
            snprintf(r->text, sizeof r->text, "hadamard %s%s", r->plan.info.text, r->signs ? ", random signs" : "");
        else
            snprintf(r->text, sizeof r->text, "block-diagonal %lld x hadamard %s%s", (long long)(n / block),
                     r->plan.info.text, r->signs ? ", random signs" : "");
        return QUAROT_OK;
    }
    if (kind == QUAROT_ROTATION_RANDOM_ORTHOGONAL) {
        res = quarot__rotation_set_dense(r, NULL, d->seed);
        if (res != QUAROT_OK) { quarot_rotation_free(r); return res; }
        snprintf(r->text, sizeof r->text, "random orthogonal %lld%s", (long long)block,
                 block == n ? "" : " (block-diagonal)");
        return QUAROT_OK;
    }
    if (kind == QUAROT_ROTATION_MATRIX) {
        double tol = d->orth_tol > 0 ? d->orth_tol : 1e-6, err;
        int64_t i;
        if (!d->matrix) return QUAROT_ERR_INVALID_ARGUMENT;
        for (i = 0; i < block * block; ++i)
            if (!(d->matrix[i] == d->matrix[i]) || fabs(d->matrix[i]) > 1e300) return QUAROT_ERR_NONFINITE;
        err = quarot__orth_error(d->matrix, block);
        if (err > tol) return QUAROT_ERR_INVALID_ARGUMENT;   // not orthogonal
        res = quarot__rotation_set_dense(r, d->matrix, 0);
        if (res != QUAROT_OK) { quarot_rotation_free(r); return res; }
        snprintf(r->text, sizeof r->text, "given orthogonal %lld%s (max|M^T M - I| = %.1e)", (long long)block,
                 block == n ? "" : " (block-diagonal)", err);
        return QUAROT_OK;
    }
    return QUAROT_ERR_INVALID_ARGUMENT;
}

QUAROT_API size_t quarot_rotation_workspace_size(const quarot_rotation* r) {
    if (!r) return 0;
    if (r->kind == QUAROT_ROTATION_HADAMARD) return quarot_hadamard_workspace_size(&r->plan);
    if (r->kind == QUAROT_ROTATION_ADAPT) {
        size_t hw = quarot_hadamard_workspace_size(&r->plan);
        size_t dw = r->dense ? (size_t)QUAROT__ROT_CHUNK * (size_t)r->block * sizeof(double) : 0;
        return hw > dw ? hw : dw;
    }
    if (r->kind == QUAROT_ROTATION_RANDOM_ORTHOGONAL || r->kind == QUAROT_ROTATION_MATRIX)
        return (size_t)QUAROT__ROT_CHUNK * (size_t)r->block * sizeof(double);
    return 0;
}

// A rotation as quarot_rotation_init leaves it: a zeroed struct, one whose init failed (freed to
// zeros) or one filled in by hand without its parts is QUAROT_ERR_STATE, never a division by zero.
static int quarot__rotation_ready(const quarot_rotation* r, int is64) {
    if (r->n <= 0 || r->block <= 0 || r->block > r->n || r->n % r->block != 0) return 0;
    switch (r->kind) {
        case QUAROT_ROTATION_IDENTITY: return 1;
        case QUAROT_ROTATION_HADAMARD: return r->plan.n == r->block;
        case QUAROT_ROTATION_RANDOM_ORTHOGONAL:
        case QUAROT_ROTATION_MATRIX: return is64 ? r->dense != NULL : r->dense32 != NULL;
        case QUAROT_ROTATION_ADAPT: return r->plan.n > 0 && r->n % r->plan.n == 0 && (!r->dense || r->dense32);
        default: return 0;
    }
}

// One entry point for both precisions: is64 selects double.
static quarot_result quarot__rotation_apply(const quarot_rotation* r, void* x, int is64, int64_t rows, int64_t stride,
                                            int transpose, void* work, size_t work_size) {
    size_t need, es = is64 ? sizeof(double) : sizeof(float);
    void* owned = NULL;
    int64_t j, nb;
    quarot_result res = QUAROT_OK;
    if (!r || !x || rows < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot__rotation_ready(r, is64)) return QUAROT_ERR_STATE;
    if (stride < r->n) return QUAROT_ERR_INVALID_ARGUMENT;
    if (rows == 0 || r->kind == QUAROT_ROTATION_IDENTITY) return QUAROT_OK;
    need = quarot_rotation_workspace_size(r);
    if (need && !work) {
        owned = quarot_env_alloc(&r->env, need);
        if (!owned) return QUAROT_ERR_OUT_OF_MEMORY;
        work = owned;
        work_size = need;
    }
    if (work_size < need) return QUAROT_ERR_WORKSPACE;
    if (r->kind == QUAROT_ROTATION_ADAPT) {
        res = quarot__rotation_apply_adapt(r, x, is64, rows, stride, transpose, work, work_size);
        quarot_env_free(&r->env, owned);
        return res;
    }
    nb = r->n / r->block;
    for (j = 0; j < nb && res == QUAROT_OK; ++j) {
        if (r->kind == QUAROT_ROTATION_HADAMARD) {
            quarot_hadamard_apply_desc hd;
            memset(&hd, 0, sizeof hd);
            hd.transpose = transpose;
            if (r->signs) { hd.signs = r->signs + j * r->block; hd.signs_f64 = r->signs64 + j * r->block; }
            if (is64)
                res = quarot_hadamard_apply_f64(&r->plan, &hd, (double*)x + j * r->block, rows, stride, work,
                                                work_size);
            else res = quarot_hadamard_apply_f32(&r->plan, &hd, (float*)x + j * r->block, rows, stride, work,
                                                 work_size);
        } else {
            // Y = X_j * B (or B^T), chunked; the product lands in work and is copied back.
            int64_t r0, b = r->block;
            for (r0 = 0; r0 < rows && res == QUAROT_OK; r0 += QUAROT__ROT_CHUNK) {
                int64_t cr = rows - r0 < QUAROT__ROT_CHUNK ? rows - r0 : QUAROT__ROT_CHUNK, i;
                if (is64) {
                    double* xs = (double*)x + r0 * stride + j * b;
                    res = quarot_dgemm(0, transpose, cr, b, b, 1.0, xs, stride, r->dense, b, 0.0, (double*)work, b,
                                       &r->env);
                    for (i = 0; i < cr && res == QUAROT_OK; ++i)
                        memcpy(xs + i * stride, (double*)work + i * b, (size_t)b * es);
                } else {
                    float* xs = (float*)x + r0 * stride + j * b;
                    res = quarot_sgemm(0, transpose, cr, b, b, 1.0f, xs, stride, r->dense32, b, 0.0f, (float*)work, b,
                                       &r->env);
                    for (i = 0; i < cr && res == QUAROT_OK; ++i)
                        memcpy(xs + i * stride, (float*)work + i * b, (size_t)b * es);
                }
            }
        }
    }
    quarot_env_free(&r->env, owned);
    return res;
}

QUAROT_API quarot_result quarot_rotation_apply_f32(const quarot_rotation* r, float* x, int64_t rows, int64_t stride,
                                                   int transpose, void* work, size_t work_size) {
    return quarot__rotation_apply(r, x, 0, rows, stride, transpose, work, work_size);
}

QUAROT_API quarot_result quarot_rotation_apply_f64(const quarot_rotation* r, double* x, int64_t rows, int64_t stride,
                                                   int transpose, void* work, size_t work_size) {
    return quarot__rotation_apply(r, x, 1, rows, stride, transpose, work, work_size);
}

QUAROT_API quarot_result quarot_rotation_to_dense_f64(const quarot_rotation* r, double* q) {
    size_t count;
    int64_t i;
    if (!r || !q || r->n <= 0) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot__mul_size((size_t)r->n, (size_t)r->n, &count)) return QUAROT_ERR_OVERFLOW;
    memset(q, 0, count * sizeof(double));
    for (i = 0; i < r->n; ++i) q[i * r->n + i] = 1.0;     // rows of I times Q are the rows of Q
    return quarot_rotation_apply_f64(r, q, r->n, r->n, 0, NULL, 0);
}

// >>model
// (the model is the caller's struct of callbacks; see >>processor for how it is used)

// >>adapter
// The plan is a set of growable arrays of fixed-size records (names up to QUAROT_NAME_MAX).
// Built-in families differ only in their name templates; quarot_adapter_build_from_names turns a
// template table and a config into fusions, bakes, R1/R2 rotation entries and per-layer pairs.
QUAROT_API void quarot_plan_init(quarot_plan* plan, const quarot_env* env) {
    if (!plan) return;
    memset(plan, 0, sizeof *plan);
    plan->env = quarot__env_copy(env);
}

QUAROT_API void quarot_plan_free(quarot_plan* plan) {
    if (!plan) return;
    quarot_env_free(&plan->env, plan->fusions);
    quarot_env_free(&plan->env, plan->linears);
    quarot_env_free(&plan->env, plan->bakes);
    quarot_env_free(&plan->env, plan->rotations);
    quarot_env_free(&plan->env, plan->layers);
    quarot_env_free(&plan->env, plan->blocks);
    memset(plan, 0, sizeof *plan);
}

// Make room for one more element of size `es` in *items (count, cap); returns the new slot or NULL.
static void* quarot__grow(const quarot_env* env, void** items, int64_t* count, int64_t* cap, size_t es) {
    if (*count == *cap) {
        int64_t ncap = *cap ? *cap * 2 : 16;
        size_t bytes;
        void* fresh;
        if (!quarot__mul_size((size_t)ncap, es, &bytes)) return NULL;
        fresh = quarot_env_alloc(env, bytes);
        if (!fresh) return NULL;
        if (*items) memcpy(fresh, *items, (size_t)*count * es);
        quarot_env_free(env, *items);
        *items = fresh;
        *cap = ncap;
    }
    memset((char*)*items + (size_t)*count * es, 0, es);
    return (char*)*items + (size_t)(*count)++ * es;
}

static int quarot__copy_name(char* dst, const char* src) {
    size_t len = src ? strlen(src) : 0;
    if (len >= QUAROT_NAME_MAX) return 0;
    if (len) memcpy(dst, src, len);
    dst[len] = '\0';
    return 1;
}

QUAROT_API quarot_result quarot_plan_add_fusion(quarot_plan* p, int64_t layer, const char* norm_weight,
                                                const char* norm_bias) {
    quarot_plan_fusion* f;
    if (!p || !norm_weight) return QUAROT_ERR_INVALID_ARGUMENT;
    f = (quarot_plan_fusion*)quarot__grow(&p->env, (void**)&p->fusions, &p->n_fusions, &p->cap_fusions, sizeof *f);
    if (!f) return QUAROT_ERR_OUT_OF_MEMORY;
    f->layer = layer;
    f->first_linear = p->n_linears;
    if (!quarot__copy_name(f->norm_weight, norm_weight) || !quarot__copy_name(f->norm_bias, norm_bias)) {
        p->n_fusions--;
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_plan_add_fused_linear(quarot_plan* p, const char* weight, const char* bias) {
    quarot_plan_linear* l;
    if (!p || !weight || p->n_fusions == 0) return QUAROT_ERR_INVALID_ARGUMENT;
    l = (quarot_plan_linear*)quarot__grow(&p->env, (void**)&p->linears, &p->n_linears, &p->cap_linears, sizeof *l);
    if (!l) return QUAROT_ERR_OUT_OF_MEMORY;
    if (!quarot__copy_name(l->weight, weight) || !quarot__copy_name(l->bias, bias)) {
        p->n_linears--;
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    p->fusions[p->n_fusions - 1].n_linears++;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_plan_add_bake(quarot_plan* p, int64_t layer, int embedding, const char* weight,
                                              const char* bias) {
    quarot_plan_bake* b;
    if (!p || !weight) return QUAROT_ERR_INVALID_ARGUMENT;
    b = (quarot_plan_bake*)quarot__grow(&p->env, (void**)&p->bakes, &p->n_bakes, &p->cap_bakes, sizeof *b);
    if (!b) return QUAROT_ERR_OUT_OF_MEMORY;
    b->layer = layer;
    b->embedding = embedding;
    if (!quarot__copy_name(b->weight, weight) || !quarot__copy_name(b->bias, bias)) {
        p->n_bakes--;
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_plan_add_rotation(quarot_plan* p, int64_t layer, quarot_rotation_id rotation,
                                                  quarot_side side, int embedding, int per_head, const char* weight,
                                                  const char* bias) {
    quarot_plan_rotation* r;
    if (!p || !weight || (side != QUAROT_SIDE_INPUT && side != QUAROT_SIDE_OUTPUT) ||
        (rotation != QUAROT_ROT_R1 && rotation != QUAROT_ROT_R2))
        return QUAROT_ERR_INVALID_ARGUMENT;
    r = (quarot_plan_rotation*)quarot__grow(&p->env, (void**)&p->rotations, &p->n_rotations, &p->cap_rotations,
                                            sizeof *r);
    if (!r) return QUAROT_ERR_OUT_OF_MEMORY;
    r->layer = layer;
    r->rotation = rotation;
    r->side = side;
    r->embedding = embedding;
    r->per_head = per_head;
    if (!quarot__copy_name(r->weight, weight) || !quarot__copy_name(r->bias, bias)) {
        p->n_rotations--;
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_plan_set_layers(quarot_plan* p, int64_t n_layers) {
    size_t bytes;
    if (!p || n_layers < 0 || p->layers) return QUAROT_ERR_INVALID_ARGUMENT;
    if (n_layers == 0) return QUAROT_OK;
    if (!quarot__mul_size((size_t)n_layers, sizeof *p->layers, &bytes)) return QUAROT_ERR_OVERFLOW;
    p->layers = (quarot_plan_layer*)quarot_env_alloc(&p->env, bytes);
    if (!p->layers) return QUAROT_ERR_OUT_OF_MEMORY;
    memset(p->layers, 0, bytes);
    p->n_layers = n_layers;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_name_format(char* out, const char* prefix, const char* tmpl, const char* suffix,
                                            int64_t layer) {
    size_t n = 0;
    const char* parts[3];
    int k;
    if (!out) return QUAROT_ERR_INVALID_ARGUMENT;
    parts[0] = prefix; parts[1] = tmpl; parts[2] = suffix;
    for (k = 0; k < 3; ++k) {
        const char* s = parts[k];
        if (!s) continue;
        while (*s) {
            if (s[0] == '{' && s[1] == 'i' && s[2] == '}') {
                char num[24];
                int len = snprintf(num, sizeof num, "%lld", (long long)layer);
                if (len < 0 || n + (size_t)len >= QUAROT_NAME_MAX) return QUAROT_ERR_INVALID_ARGUMENT;
                memcpy(out + n, num, (size_t)len);
                n += (size_t)len;
                s += 3;
            } else {
                if (n + 1 >= QUAROT_NAME_MAX) return QUAROT_ERR_INVALID_ARGUMENT;
                out[n++] = *s++;
            }
        }
    }
    out[n] = '\0';
    return QUAROT_OK;
}

static const quarot_adapter_names quarot__names_llama = {
    "model.embed_tokens.weight", NULL, "model.norm", "lm_head.weight", "model.layers.{i}.",
    "input_layernorm", "post_attention_layernorm",
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};

static const quarot_adapter_names quarot__names_opt = {
    "model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight", "model.decoder.final_layer_norm",
    "lm_head.weight", "model.decoder.layers.{i}.",
    "self_attn_layer_norm", "final_layer_norm",
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
    NULL, "fc1", "fc2",
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};

static const quarot_adapter_names quarot__names_mixtral = {
    "model.embed_tokens.weight", NULL, "model.norm", "lm_head.weight", "model.layers.{i}.",
    "input_layernorm", "post_attention_layernorm",
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
    "block_sparse_moe.gate",
    "block_sparse_moe.experts.{e}.w1", "block_sparse_moe.experts.{e}.w3", "block_sparse_moe.experts.{e}.w2",
    "block_sparse_moe.experts.w1", "block_sparse_moe.experts.w3", "block_sparse_moe.experts.w2",
    NULL, NULL, NULL, NULL
};

static const quarot_adapter_names quarot__names_qwen_moe = {
    "model.embed_tokens.weight", NULL, "model.norm", "lm_head.weight", "model.layers.{i}.",
    "input_layernorm", "post_attention_layernorm",
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
    "mlp.gate",
    "mlp.experts.{e}.gate_proj", "mlp.experts.{e}.up_proj", "mlp.experts.{e}.down_proj",
    "mlp.experts.gate_proj", "mlp.experts.up_proj", "mlp.experts.down_proj",
    "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj",
    "mlp.shared_expert_gate"
};

static const quarot_adapter_names quarot__names_phi3 = {
    "model.embed_tokens.weight", NULL, "model.norm", "lm_head.weight", "model.layers.{i}.",
    "input_layernorm", "post_attention_layernorm",
    NULL, NULL, NULL, "self_attn.o_proj",
    NULL, NULL, "mlp.down_proj",
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};
static const quarot_adapter_fused quarot__fused_phi3 = {"self_attn.qkv_proj", "mlp.gate_up_proj"};

static const quarot_adapter_names quarot__names_qwen2vl_lm = {
    "model.language_model.embed_tokens.weight", NULL, "model.language_model.norm", "lm_head.weight",
    "model.language_model.layers.{i}.", "input_layernorm", "post_attention_layernorm",
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};
static const quarot_adapter_vision quarot__vision_qwen2vl = {"visual.merger.mlp.2.weight", "visual.merger.mlp.2.bias"};
static const quarot_adapter_vision quarot__vision_qwen2vl_lm = {"model.visual.merger.mlp.2.weight",
                                                                "model.visual.merger.mlp.2.bias"};

static const quarot_adapter quarot__adapters[] = {
    {"llama", &quarot__names_llama, quarot_adapter_build_from_names, NULL},
    {"mistral", &quarot__names_llama, quarot_adapter_build_from_names, NULL},
    {"qwen2", &quarot__names_llama, quarot_adapter_build_from_names, NULL},
    {"qwen3", &quarot__names_llama, quarot_adapter_build_from_names, NULL},
    {"opt", &quarot__names_opt, quarot_adapter_build_from_names, NULL},
    {"phi3", &quarot__names_phi3, quarot_adapter_build_fused_names, (void*)&quarot__fused_phi3},
    {"qwen2vl", &quarot__names_llama, quarot_adapter_build_vision_names, (void*)&quarot__vision_qwen2vl},
    {"qwen2vl-lm", &quarot__names_qwen2vl_lm, quarot_adapter_build_vision_names, (void*)&quarot__vision_qwen2vl_lm},
    {"mixtral", &quarot__names_mixtral, quarot_adapter_build_from_names, NULL},
    {"qwen2_moe", &quarot__names_qwen_moe, quarot_adapter_build_from_names, NULL},
    {"qwen3_moe", &quarot__names_qwen_moe, quarot_adapter_build_from_names, NULL},
};

QUAROT_API const quarot_adapter* quarot_adapter_find(const char* arch) {
    size_t i;
    if (!arch) return NULL;
    for (i = 0; i < sizeof quarot__adapters / sizeof quarot__adapters[0]; ++i)
        if (strcmp(quarot__adapters[i].arch, arch) == 0) return &quarot__adapters[i];
    return NULL;
}

QUAROT_API const char* quarot_adapter_list(void) {
    return "llama, mistral, qwen2, qwen3, opt, phi3, qwen2vl, qwen2vl-lm, mixtral, qwen2_moe, qwen3_moe";
}

// Builds the weight and bias names of one per-layer linear: "<layer prefix><tmpl>.weight" / ".bias".
static quarot_result quarot__linear_names(const quarot_adapter_names* nm, const char* tmpl, int64_t layer,
                                          char* weight, char* bias) {
    quarot_result r = quarot_name_format(weight, nm->layer, tmpl, ".weight", layer);
    if (r == QUAROT_OK) r = quarot_name_format(bias, nm->layer, tmpl, ".bias", layer);
    return r;
}

static quarot_result quarot__moe_mlp(quarot_plan* plan, const quarot_adapter_names* nm, const quarot_model_config* cfg,
                                     int64_t layer);   // >>moe

// The global part of a names-built plan (from names and fused names).
static quarot_result quarot__plan_globals(quarot_plan* plan, const quarot_adapter_names* nm, int layer_norm) {
    char nbias[QUAROT_NAME_MAX], b[QUAROT_NAME_MAX];
    quarot_result r;
    if ((r = quarot_name_format(nbias, nm->final_norm, ".bias", NULL, -1)) != QUAROT_OK) return r;
    if ((r = quarot_plan_add_fusion(plan, -1, plan->final_norm_weight, layer_norm ? nbias : "")) != QUAROT_OK) return r;
    if ((r = quarot_name_format(b, nm->lm_head, NULL, NULL, -1)) != QUAROT_OK) return r;
    {   // lm_head.weight -> lm_head.bias
        size_t len = strlen(b);
        if (len > 7 && strcmp(b + len - 7, ".weight") == 0) strcpy(b + len - 7, ".bias");
        else b[0] = '\0';
    }
    if ((r = quarot_plan_add_fused_linear(plan, nm->lm_head, b)) != QUAROT_OK) return r;
    if (layer_norm) {
        if ((r = quarot_plan_add_bake(plan, -1, 1, nm->embed, "")) != QUAROT_OK) return r;
        if (nm->pos_embed && (r = quarot_plan_add_bake(plan, -1, 1, nm->pos_embed, "")) != QUAROT_OK) return r;
    }
    if ((r = quarot_plan_add_rotation(plan, -1, QUAROT_ROT_R1, QUAROT_SIDE_OUTPUT, 1, 0, nm->embed, "")) != QUAROT_OK)
        return r;
    if (nm->pos_embed && (r = quarot_plan_add_rotation(plan, -1, QUAROT_ROT_R1, QUAROT_SIDE_OUTPUT, 1, 0, nm->pos_embed,
                                                       "")) != QUAROT_OK) return r;
    if ((r = quarot_plan_add_rotation(plan, -1, QUAROT_ROT_R1, QUAROT_SIDE_INPUT, 0, 0, nm->lm_head, "")) != QUAROT_OK)
        return r;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_adapter_build_from_names(const quarot_adapter* self, const quarot_model_config* cfg,
                                                         int64_t block_size, quarot_plan* plan) {
    const quarot_adapter_names* nm;
    char w[QUAROT_NAME_MAX], b[QUAROT_NAME_MAX], nw[QUAROT_NAME_MAX], nbias[QUAROT_NAME_MAX];
    int layer_norm;
    int64_t i;
    quarot_result r;
    (void)block_size;   // the R1 matrix is built by the processor; names do not depend on it
    if (!self || !self->names || !cfg || !plan) return QUAROT_ERR_INVALID_ARGUMENT;
    nm = self->names;
    if (!nm->embed || !nm->final_norm || !nm->lm_head || !nm->layer || !nm->attn_norm || !nm->mlp_norm ||
        !nm->q_proj || !nm->k_proj || !nm->v_proj || !nm->o_proj || !nm->up_proj || !nm->down_proj)
        return QUAROT_ERR_INVALID_ARGUMENT;
    layer_norm = cfg->norm == QUAROT_NORM_LAYER;
    if (!quarot__copy_name(plan->embed, nm->embed) || !quarot__copy_name(plan->lm_head, nm->lm_head))
        return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot_name_format(plan->final_norm_weight, nm->final_norm, ".weight", NULL, -1);
    if (r != QUAROT_OK) return r;
    plan->n_heads = cfg->n_heads;
    plan->n_kv_heads = cfg->n_kv_heads;
    plan->head_dim = cfg->head_dim;
    if ((r = quarot_plan_set_layers(plan, cfg->n_layers)) != QUAROT_OK) return r;

    // Global: final norm -> lm_head; embeddings centred (LayerNorm) and rotated; lm_head rotated.
    if ((r = quarot__plan_globals(plan, nm, layer_norm)) != QUAROT_OK) return r;

    for (i = 0; i < cfg->n_layers; ++i) {
        const char* readers_attn[3];
        const char* readers_mlp[2];
        int k, n_mlp = 0;
        const int moe = nm->router && quarot_config_layer_is_moe(cfg, i);   // the MLP part: quarot__moe_mlp
        readers_attn[0] = nm->q_proj; readers_attn[1] = nm->k_proj; readers_attn[2] = nm->v_proj;
        if (nm->gate_proj) readers_mlp[n_mlp++] = nm->gate_proj;
        readers_mlp[n_mlp++] = nm->up_proj;
        if (moe && (r = quarot__moe_mlp(plan, nm, cfg, i)) != QUAROT_OK) return r;
        // fusions: attention norm -> q, k, v; MLP norm -> gate, up
        if ((r = quarot_name_format(nw, nm->layer, nm->attn_norm, ".weight", i)) != QUAROT_OK) return r;
        if ((r = quarot_name_format(nbias, nm->layer, nm->attn_norm, ".bias", i)) != QUAROT_OK) return r;
        if ((r = quarot_plan_add_fusion(plan, i, nw, layer_norm ? nbias : "")) != QUAROT_OK) return r;
        for (k = 0; k < 3; ++k) {
            if ((r = quarot__linear_names(nm, readers_attn[k], i, w, b)) != QUAROT_OK) return r;
            if ((r = quarot_plan_add_fused_linear(plan, w, b)) != QUAROT_OK) return r;
        }
        if ((r = quarot_name_format(nw, nm->layer, nm->mlp_norm, ".weight", i)) != QUAROT_OK) return r;
        if ((r = quarot_name_format(nbias, nm->layer, nm->mlp_norm, ".bias", i)) != QUAROT_OK) return r;
        if (!moe && (r = quarot_plan_add_fusion(plan, i, nw, layer_norm ? nbias : "")) != QUAROT_OK) return r;
        for (k = 0; k < n_mlp && !moe; ++k) {
            if ((r = quarot__linear_names(nm, readers_mlp[k], i, w, b)) != QUAROT_OK) return r;
            if ((r = quarot_plan_add_fused_linear(plan, w, b)) != QUAROT_OK) return r;
        }
        // R1: readers on the input side, writers (o_proj, down_proj) on the output side
        for (k = 0; k < 3; ++k) {
            if ((r = quarot__linear_names(nm, readers_attn[k], i, w, b)) != QUAROT_OK) return r;
            if ((r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_INPUT, 0, 0, w, "")) != QUAROT_OK)
                return r;
        }
        if ((r = quarot__linear_names(nm, nm->o_proj, i, w, b)) != QUAROT_OK) return r;
        if ((r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_OUTPUT, 0, 0, w, b)) != QUAROT_OK)
            return r;
        if (layer_norm && (r = quarot_plan_add_bake(plan, i, 0, w, b)) != QUAROT_OK) return r;
        strcpy(plan->layers[i].o_proj, w);
        for (k = 0; k < n_mlp && !moe; ++k) {
            if ((r = quarot__linear_names(nm, readers_mlp[k], i, w, b)) != QUAROT_OK) return r;
            if ((r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_INPUT, 0, 0, w, "")) != QUAROT_OK)
                return r;
        }
        if (!moe) {
            strcpy(plan->layers[i].up_proj, w);
            if ((r = quarot__linear_names(nm, nm->down_proj, i, w, b)) != QUAROT_OK) return r;
            if ((r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_OUTPUT, 0, 0, w, b)) != QUAROT_OK)
                return r;
            if (layer_norm && (r = quarot_plan_add_bake(plan, i, 0, w, b)) != QUAROT_OK) return r;
            strcpy(plan->layers[i].down_proj, w);
        }
        // R2: v_proj output per KV head, o_proj input per head
        if ((r = quarot__linear_names(nm, nm->v_proj, i, w, b)) != QUAROT_OK) return r;
        if ((r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R2, QUAROT_SIDE_OUTPUT, 0, 1, w, b)) != QUAROT_OK)
            return r;
        strcpy(plan->layers[i].v_proj, w);
        if ((r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R2, QUAROT_SIDE_INPUT, 0, 1, plan->layers[i].o_proj,
                                          "")) != QUAROT_OK)
            return r;
    }
    return QUAROT_OK;
}

// Fused readers. A weight whose rows are several linears' (q|k|v, gate|up) reads the same normed
// input as each of them, so it is one reader for the norm fusion and R1 (input side: every row
// alike); only R2 (output side, per head) must see the v rows alone, as a row range.
QUAROT_API quarot_result quarot_plan_add_rotation_rows(quarot_plan* p, int64_t layer, quarot_rotation_id rotation,
                                                       int embedding, int per_head, const char* weight,
                                                       const char* bias, int64_t row0, int64_t rows, int64_t rows_of) {
    quarot_result r;
    if (!p || row0 < 0 || rows < 0 || rows_of < 0 || (rows > 0 && rows_of > 0 && row0 + rows > rows_of) ||
        (rows > 0 && embedding))
        return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot_plan_add_rotation(p, layer, rotation, QUAROT_SIDE_OUTPUT, embedding, per_head, weight, bias);
    if (r != QUAROT_OK) return r;
    p->rotations[p->n_rotations - 1].row0 = rows > 0 ? row0 : 0;
    p->rotations[p->n_rotations - 1].rows = rows;
    p->rotations[p->n_rotations - 1].rows_of = rows > 0 ? rows_of : 0;
    return QUAROT_OK;
}

// One reader list (attention or MLP) of a layer: the fused weight alone, or the separate ones.
static int quarot__fused_readers(const quarot_adapter_names* nm, const quarot_adapter_fused* fz, int attn,
                                 const char** out) {
    int n = 0;
    if (attn && fz->qkv_proj) { out[n++] = fz->qkv_proj; return n; }
    if (!attn && fz->gate_up_proj) { out[n++] = fz->gate_up_proj; return n; }
    if (attn) { out[n++] = nm->q_proj; out[n++] = nm->k_proj; out[n++] = nm->v_proj; return n; }
    if (nm->gate_proj) out[n++] = nm->gate_proj;
    out[n++] = nm->up_proj;
    return n;
}

QUAROT_API quarot_result quarot_adapter_build_fused_names(const quarot_adapter* self, const quarot_model_config* cfg,
                                                          int64_t block_size, quarot_plan* plan) {
    const quarot_adapter_names* nm;
    const quarot_adapter_fused* fz;
    char w[QUAROT_NAME_MAX], b[QUAROT_NAME_MAX], nw[QUAROT_NAME_MAX], nbias[QUAROT_NAME_MAX];
    const char* readers[2][3];
    int n_readers[2], layer_norm, part, k;
    int64_t i, nkv, hd;
    quarot_result r;
    (void)block_size;
    if (!self || !self->names || !self->user_data || !cfg || !plan) return QUAROT_ERR_INVALID_ARGUMENT;
    nm = self->names;
    fz = (const quarot_adapter_fused*)self->user_data;
    if (!nm->embed || !nm->final_norm || !nm->lm_head || !nm->layer || !nm->attn_norm || !nm->mlp_norm ||
        !nm->o_proj || !nm->down_proj || (!fz->qkv_proj && (!nm->q_proj || !nm->k_proj || !nm->v_proj)) ||
        (!fz->gate_up_proj && !nm->up_proj) || cfg->n_heads <= 0 || cfg->hidden <= 0)
        return QUAROT_ERR_INVALID_ARGUMENT;
    nkv = cfg->n_kv_heads > 0 ? cfg->n_kv_heads : cfg->n_heads;
    hd = cfg->head_dim > 0 ? cfg->head_dim : cfg->hidden / cfg->n_heads;
    n_readers[0] = quarot__fused_readers(nm, fz, 1, readers[0]);
    n_readers[1] = quarot__fused_readers(nm, fz, 0, readers[1]);
    layer_norm = cfg->norm == QUAROT_NORM_LAYER;
    if (!quarot__copy_name(plan->embed, nm->embed) || !quarot__copy_name(plan->lm_head, nm->lm_head))
        return QUAROT_ERR_INVALID_ARGUMENT;
    if ((r = quarot_name_format(plan->final_norm_weight, nm->final_norm, ".weight", NULL, -1)) != QUAROT_OK) return r;
    plan->n_heads = cfg->n_heads;
    plan->n_kv_heads = cfg->n_kv_heads;
    plan->head_dim = cfg->head_dim;
    if ((r = quarot_plan_set_layers(plan, cfg->n_layers)) != QUAROT_OK) return r;
    if ((r = quarot__plan_globals(plan, nm, layer_norm)) != QUAROT_OK) return r;
    for (i = 0; i < cfg->n_layers; ++i) {
        quarot_plan_layer* pl = &plan->layers[i];
        for (part = 0; part < 2; ++part) {   // the norm fusion and R1 of each reader, then its writer
            const char* norm = part == 0 ? nm->attn_norm : nm->mlp_norm;
            const char* writer = part == 0 ? nm->o_proj : nm->down_proj;
            if ((r = quarot_name_format(nw, nm->layer, norm, ".weight", i)) != QUAROT_OK) return r;
            if ((r = quarot_name_format(nbias, nm->layer, norm, ".bias", i)) != QUAROT_OK) return r;
            if ((r = quarot_plan_add_fusion(plan, i, nw, layer_norm ? nbias : "")) != QUAROT_OK) return r;
            for (k = 0; k < n_readers[part]; ++k) {
                if ((r = quarot__linear_names(nm, readers[part][k], i, w, b)) != QUAROT_OK) return r;
                if ((r = quarot_plan_add_fused_linear(plan, w, b)) != QUAROT_OK) return r;
            }
            for (k = 0; k < n_readers[part]; ++k) {
                if ((r = quarot__linear_names(nm, readers[part][k], i, w, b)) != QUAROT_OK) return r;
                if ((r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_INPUT, 0, 0, w, "")) != QUAROT_OK)
                    return r;
            }
            if (part == 1) {
                strcpy(pl->up_proj, w);   // the last MLP reader: up_proj or gate|up
                if (fz->gate_up_proj) { pl->up_row0 = cfg->intermediate; pl->up_rows = cfg->intermediate; }
            }
            if ((r = quarot__linear_names(nm, writer, i, w, b)) != QUAROT_OK) return r;
            if ((r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_OUTPUT, 0, 0, w, b)) != QUAROT_OK)
                return r;
            if (layer_norm && (r = quarot_plan_add_bake(plan, i, 0, w, b)) != QUAROT_OK) return r;
            strcpy(part == 0 ? pl->o_proj : pl->down_proj, w);
        }
        // R2: v's rows on the output side per KV head (of q|k|v: after the q and k rows), o_proj's input per head
        if ((r = quarot__linear_names(nm, fz->qkv_proj ? fz->qkv_proj : nm->v_proj, i, w, b)) != QUAROT_OK) return r;
        if (fz->qkv_proj) {
            pl->v_row0 = (cfg->n_heads + nkv) * hd;
            pl->v_rows = nkv * hd;
            r = quarot_plan_add_rotation_rows(plan, i, QUAROT_ROT_R2, 0, 1, w, b, pl->v_row0, pl->v_rows,
                                              (cfg->n_heads + 2 * nkv) * hd);
        } else {
            r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R2, QUAROT_SIDE_OUTPUT, 0, 1, w, b);
        }
        if (r != QUAROT_OK) return r;
        strcpy(pl->v_proj, w);
        r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R2, QUAROT_SIDE_INPUT, 0, 1, pl->o_proj, "");
        if (r != QUAROT_OK) return r;
    }
    return QUAROT_OK;
}

// Vision-language decoders: the text decoder's plan, then the merger's output projection as one more
// global writer of the residual stream (output side, with its bias).
QUAROT_API quarot_result quarot_adapter_build_vision_names(const quarot_adapter* self,
                                                           const quarot_model_config* cfg, int64_t block_size,
                                                           quarot_plan* plan) {
    const quarot_adapter_vision* v;
    quarot_result r;
    if (!self || !self->user_data || !cfg || !plan) return QUAROT_ERR_INVALID_ARGUMENT;
    v = (const quarot_adapter_vision*)self->user_data;
    if (!v->merger_weight || !v->merger_weight[0]) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((r = quarot_adapter_build_from_names(self, cfg, block_size, plan)) != QUAROT_OK) return r;
    return quarot_plan_add_rotation(plan, -1, QUAROT_ROT_R1, QUAROT_SIDE_OUTPUT, 0, 0, v->merger_weight,
                                    v->merger_bias ? v->merger_bias : "");
}

// >>moe
// MoE layers: the layer test, plan blocks, and the MLP part of the built-in MoE families' plans
// (their attention and global parts are the dense families'). The processor's MoE steps (R4 per
// expert, 3-D weights one expert at a time) read blocks and shapes, never names.
QUAROT_API int quarot_config_layer_is_moe(const quarot_model_config* cfg, int64_t layer) {
    int64_t k, step;
    if (!cfg || cfg->n_experts <= 0 || layer < 0) return 0;
    for (k = 0; cfg->mlp_only_layers && k < cfg->n_mlp_only_layers; ++k)
        if (cfg->mlp_only_layers[k] == layer) return 0;
    step = cfg->sparse_step > 0 ? cfg->sparse_step : 1;
    return (layer + 1) % step == 0;
}

QUAROT_API quarot_result quarot_plan_add_block(quarot_plan* p, int64_t layer, quarot_block_kind kind, int64_t expert,
                                               int64_t n_experts, int64_t intermediate, const char* weight,
                                               const char* gate, const char* up, const char* down) {
    quarot_plan_block* b;
    if (!p || layer < 0 || kind <= QUAROT_BLOCK_NONE || kind > QUAROT_BLOCK_SHARED_GATE || n_experts < 1 ||
        expert < -1 || expert >= n_experts)
        return QUAROT_ERR_INVALID_ARGUMENT;
    if ((kind == QUAROT_BLOCK_EXPERTS || kind == QUAROT_BLOCK_SHARED) && (!down || !down[0] || intermediate < 1))
        return QUAROT_ERR_INVALID_ARGUMENT;
    if ((kind == QUAROT_BLOCK_ROUTER || kind == QUAROT_BLOCK_SHARED_GATE) && (!weight || !weight[0]))
        return QUAROT_ERR_INVALID_ARGUMENT;
    b = (quarot_plan_block*)quarot__grow(&p->env, (void**)&p->blocks, &p->n_blocks, &p->cap_blocks, sizeof *b);
    if (!b) return QUAROT_ERR_OUT_OF_MEMORY;
    b->layer = layer;
    b->kind = kind;
    b->expert = expert;
    b->n_experts = n_experts;
    b->intermediate = intermediate;
    if (!quarot__copy_name(b->weight, weight) || !quarot__copy_name(b->gate, gate) || !quarot__copy_name(b->up, up) ||
        !quarot__copy_name(b->down, down)) {
        p->n_blocks--;
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

// "<layer prefix><tmpl><suffix>" with "{i}" -> layer and "{e}" -> expert.
static quarot_result quarot__expert_name(char* out, const char* layer_prefix, const char* tmpl, const char* suffix,
                                         int64_t layer, int64_t expert) {
    char t[QUAROT_NAME_MAX];
    const char* s;
    size_t n = 0;
    quarot_result r = quarot_name_format(t, layer_prefix, tmpl, suffix, layer);
    if (r != QUAROT_OK) return r;
    for (s = t; *s;) {
        if (s[0] == '{' && s[1] == 'e' && s[2] == '}') {
            char num[24];
            int len = snprintf(num, sizeof num, "%lld", (long long)expert);
            if (len < 0 || n + (size_t)len >= QUAROT_NAME_MAX) return QUAROT_ERR_INVALID_ARGUMENT;
            memcpy(out + n, num, (size_t)len);
            n += (size_t)len;
            s += 3;
        } else {
            if (n + 1 >= QUAROT_NAME_MAX) return QUAROT_ERR_INVALID_ARGUMENT;
            out[n++] = *s++;
        }
    }
    out[n] = '\0';
    return QUAROT_OK;
}

// One gated MLP (expert e, -1 for stacked or shared) of layer i: gate and up as fused readers of the
// MLP norm and R1 readers, down an R1 writer, and its block.
static quarot_result quarot__moe_expert(quarot_plan* plan, const quarot_adapter_names* nm, int64_t i,
                                        quarot_block_kind kind, int64_t e, int64_t n_experts, int64_t inter,
                                        const char* gate, const char* up, const char* down) {
    char g[QUAROT_NAME_MAX], u[QUAROT_NAME_MAX], d[QUAROT_NAME_MAX];
    quarot_result r;
    if (!gate || !up || !down) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((r = quarot__expert_name(g, nm->layer, gate, ".weight", i, e)) != QUAROT_OK ||
        (r = quarot__expert_name(u, nm->layer, up, ".weight", i, e)) != QUAROT_OK ||
        (r = quarot__expert_name(d, nm->layer, down, ".weight", i, e)) != QUAROT_OK)
        return r;
    if ((r = quarot_plan_add_fused_linear(plan, g, "")) != QUAROT_OK ||
        (r = quarot_plan_add_fused_linear(plan, u, "")) != QUAROT_OK)
        return r;
    if ((r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_INPUT, 0, 0, g, "")) != QUAROT_OK ||
        (r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_INPUT, 0, 0, u, "")) != QUAROT_OK ||
        (r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_OUTPUT, 0, 0, d, "")) != QUAROT_OK)
        return r;
    return quarot_plan_add_block(plan, i, kind, e, n_experts, inter, NULL, g, u, d);
}

// The MLP of MoE layer i: the MLP norm fused into the router, the shared-expert gate and every
// expert's gate / up (RMSNorm families only: the MoE families have no LayerNorm); router and gate
// rotated on the input side like any reader; each expert's down_proj (and the shared one's) on the
// output side.
static quarot_result quarot__moe_mlp(quarot_plan* plan, const quarot_adapter_names* nm, const quarot_model_config* cfg,
                                     int64_t i) {
    char w[QUAROT_NAME_MAX];
    const int64_t E = cfg->n_experts;
    const int64_t inter = cfg->expert_intermediate > 0 ? cfg->expert_intermediate : cfg->intermediate;
    int64_t e;
    quarot_result r;
    if (cfg->norm == QUAROT_NORM_LAYER) return QUAROT_ERR_UNSUPPORTED;
    if ((r = quarot_name_format(w, nm->layer, nm->mlp_norm, ".weight", i)) != QUAROT_OK) return r;
    if ((r = quarot_plan_add_fusion(plan, i, w, "")) != QUAROT_OK) return r;
    if ((r = quarot_name_format(w, nm->layer, nm->router, ".weight", i)) != QUAROT_OK) return r;
    if ((r = quarot_plan_add_fused_linear(plan, w, "")) != QUAROT_OK ||
        (r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_INPUT, 0, 0, w, "")) != QUAROT_OK ||
        (r = quarot_plan_add_block(plan, i, QUAROT_BLOCK_ROUTER, -1, 1, 0, w, NULL, NULL, NULL)) != QUAROT_OK)
        return r;
    if (cfg->shared_intermediate > 0) {
        if (!nm->shared_expert_gate || !nm->shared_gate) return QUAROT_ERR_UNSUPPORTED;
        if ((r = quarot_name_format(w, nm->layer, nm->shared_expert_gate, ".weight", i)) != QUAROT_OK) return r;
        if ((r = quarot_plan_add_fused_linear(plan, w, "")) != QUAROT_OK ||
            (r = quarot_plan_add_rotation(plan, i, QUAROT_ROT_R1, QUAROT_SIDE_INPUT, 0, 0, w, "")) != QUAROT_OK ||
            (r = quarot_plan_add_block(plan, i, QUAROT_BLOCK_SHARED_GATE, -1, 1, 0, w, NULL, NULL, NULL)) != QUAROT_OK)
            return r;
        if ((r = quarot__moe_expert(plan, nm, i, QUAROT_BLOCK_SHARED, -1, 1, cfg->shared_intermediate, nm->shared_gate,
                                    nm->shared_up, nm->shared_down)) != QUAROT_OK)
            return r;
    }
    if (cfg->experts_stacked)
        return quarot__moe_expert(plan, nm, i, QUAROT_BLOCK_EXPERTS, -1, E, inter, nm->stacked_gate, nm->stacked_up,
                                  nm->stacked_down);
    for (e = 0; e < E; ++e)
        if ((r = quarot__moe_expert(plan, nm, i, QUAROT_BLOCK_EXPERTS, e, E, inter, nm->expert_gate, nm->expert_up,
                                    nm->expert_down)) != QUAROT_OK)
            return r;
    return QUAROT_OK;
}

// >>command
// A command rotates one axis of a 2-D tensor in double precision: rows (axis 0: readers' input side,
// embeddings) are read a chunk at a time; columns (axis 1: writers' output side, W <- Q^T W, done as
// rows of W^T times Q) a block of columns at a time. Chunks are independent, so they can run on
// the env's parallel hook; the result does not depend on how they are split.
#define QUAROT__CMD_ROWS 64
#define QUAROT__CMD_TB 8   // rows per block of the column transpose (8 doubles: one cache line)

// Read / write cnt elements of one row (at byte address p) as double, rounding once on write.
static void quarot__span_get_f64(quarot_dtype dt, const char* p, int64_t cnt, double* out) {
    quarot__convert_run(out, QUAROT_DTYPE_F64, p, dt, cnt, quarot_isa_best());
}

static void quarot__span_set_f64(quarot_dtype dt, char* p, int64_t cnt, const double* in) {
    quarot__convert_run(p, dt, in, QUAROT_DTYPE_F64, cnt, quarot_isa_best());
}

// x <- x * (I_outer (x) Q (x) I_inner) for `rows` contiguous rows of length L = outer*n*inner, in
// double (quarot__rotate_rows_f64) or in single precision (quarot__rotate_rows_f32, the
// quarot_command.f32 path). tmp holds n*inner elements when inner > 1.
#define QUAROT__ROTATE_ROWS_DEF(S, T)                                                                     \
static quarot_result quarot__rotate_rows_##S(const quarot_rotation* rot, T* x, int64_t rows, int64_t L,  \
                                             int64_t outer, int64_t inner, T* tmp, void* work, size_t ws) { \
    int64_t n = rot->n, r, o, k, c;                                                                       \
    quarot_result res = QUAROT_OK;                                                                        \
    if (inner == 1) return quarot_rotation_apply_##S(rot, x, rows * outer, n, 0, work, ws);                \
    for (r = 0; r < rows && res == QUAROT_OK; ++r)                                                        \
        for (o = 0; o < outer && res == QUAROT_OK; ++o) {                                                 \
            T* base = x + r * L + o * n * inner;                                                          \
            for (k = 0; k < n; ++k)                                                                       \
                for (c = 0; c < inner; ++c) tmp[c * n + k] = base[k * inner + c];                         \
            res = quarot_rotation_apply_##S(rot, tmp, inner, n, 0, work, ws);                              \
            for (k = 0; k < n; ++k)                                                                       \
                for (c = 0; c < inner; ++c) base[k * inner + c] = tmp[c * n + k];                         \
        }                                                                                                 \
    return res;                                                                                           \
}
QUAROT__ROTATE_ROWS_DEF(f64, double)
QUAROT__ROTATE_ROWS_DEF(f32, float)
#undef QUAROT__ROTATE_ROWS_DEF

typedef struct quarot__cmd_job {
    const quarot_command* c;
    const quarot_rotation* rot;
    quarot_tensor* t;
    const quarot_env* env;
    int axis;                 // 0: rotate rows, 1: rotate columns
    int64_t L, chunk;         // axis length; rows (axis 0) or columns (axis 1) per task
    quarot_result* results;   // one per task
    int f32;                  // single precision in place (quarot_command.f32 on an F32 HADAMARD command)
} quarot__cmd_job;

// Row r of a 2-D tensor (commands only take those: quarot__command_axis), without
// quarot__tensor_row's validation and divisions (called once per row and block).
static char* quarot__row2d(const quarot_tensor* t, int64_t r) { return (char*)t->data + (size_t)r * t->nb[1]; }

// A command's task in single precision on an F32 tensor (quarot_command.f32): rows (axis 0) are
// rotated in place when contiguous, else through buf; columns (axis 1) of a power-of-two Hadamard go
// through the column kernels on the tensor itself (quarot_hadamard_apply_cols_f32, buf as their
// workspace); other columns are transposed into buf in blocks of QUAROT__CMD_TB rows (16 floats: one
// cache line per buf row and block), rotated, put back.
static quarot_result quarot__cmd_task_f32(const quarot__cmd_job* job, int64_t first, int64_t count, float* buf,
                                          float* tmp, float* span, void* work, size_t ws) {
    const quarot_tensor* t = job->t;
    int64_t L = job->L, i, c, i0, nb, k;
    quarot_result res;
    if (job->axis == 0) {
        if (t->nb[1] == (size_t)L * sizeof(float) && (count == 1 || quarot_tensor_nrows(t) == t->ne[1]))
            return quarot__rotate_rows_f32(job->rot, (float*)(void*)quarot__row2d(t, first), count, L, job->c->outer,
                                           job->c->inner, tmp, work, ws);
        for (i = 0; i < count; ++i) memcpy(buf + i * L, quarot__row2d(t, first + i), (size_t)L * sizeof(float));
        res = quarot__rotate_rows_f32(job->rot, buf, count, L, job->c->outer, job->c->inner, tmp, work, ws);
        if (res == QUAROT_OK)
            for (i = 0; i < count; ++i) memcpy(quarot__row2d(t, first + i), buf + i * L, (size_t)L * sizeof(float));
        return res;
    }
    if (job->rot->kind == QUAROT_ROTATION_HADAMARD && job->rot->plan.K == 1 && t->nb[1] % sizeof(float) == 0) {
        // A power-of-two Hadamard: the column kernels on the tensor itself, no transposes (the same
        // bits). Row (o*n + j*B + k)*inner + ci holds element k of block j for column group (o, ci).
        const quarot_rotation* rot = job->rot;
        const int64_t ld = (int64_t)(t->nb[1] / sizeof(float)), n = rot->n, B = rot->block, inner = job->c->inner;
        const size_t cws = quarot_hadamard_cols_workspace_size(&rot->plan);
        void* cw = (size_t)(count * L) * sizeof(double) >= cws ? (void*)buf : NULL;   // buf: count*L doubles
        int64_t o, j, ci;
        quarot_hadamard_apply_desc hd;
        memset(&hd, 0, sizeof hd);
        for (o = 0; o < job->c->outer; ++o)
            for (j = 0; j < n / B; ++j)
                for (ci = 0; ci < inner; ++ci) {
                    float* x0 = (float*)(void*)quarot__row2d(t, (o * n + j * B) * inner + ci) + first;
                    hd.signs = rot->signs ? rot->signs + j * B : NULL;
                    res = quarot_hadamard_apply_cols_f32(&rot->plan, &hd, x0, count, ld * inner, cw, cw ? cws : 0);
                    if (res != QUAROT_OK) return res;
                }
        return QUAROT_OK;
    }
    for (i0 = 0; i0 < L; i0 += nb) {
        nb = L - i0 < 2 * QUAROT__CMD_TB ? L - i0 : 2 * QUAROT__CMD_TB;
#if defined(QUAROT__HAVE_AVX512)
        if (nb == 16 && t->nb[1] % sizeof(float) == 0) {   // 16 x 16 in-register transposes straight from the rows
            const float* src = (const float*)(const void*)quarot__row2d(t, i0) + first;
            const int64_t ld = (int64_t)(t->nb[1] / sizeof(float));
            for (c = 0; c + 16 <= count; c += 16) quarot__gemm_tr16_avx512(src + c, ld, buf + c * L + i0, L);
            for (; c < count; ++c)
                for (k = 0; k < 16; ++k) buf[c * L + i0 + k] = src[k * ld + c];
            continue;
        }
#endif
        for (k = 0; k < nb; ++k)
            memcpy(span + k * count, quarot__row2d(t, i0 + k) + (size_t)first * sizeof(float),
                   (size_t)count * sizeof(float));
        for (c = 0; c < count; ++c)
            for (k = 0; k < nb; ++k) buf[c * L + i0 + k] = span[k * count + c];
    }
    res = quarot__rotate_rows_f32(job->rot, buf, count, L, job->c->outer, job->c->inner, tmp, work, ws);
    if (res == QUAROT_OK)
        for (i0 = 0; i0 < L; i0 += nb) {
            nb = L - i0 < 2 * QUAROT__CMD_TB ? L - i0 : 2 * QUAROT__CMD_TB;
#if defined(QUAROT__HAVE_AVX512)
            if (nb == 16 && t->nb[1] % sizeof(float) == 0) {
                float* dst = (float*)(void*)quarot__row2d(t, i0) + first;
                const int64_t ld = (int64_t)(t->nb[1] / sizeof(float));
                for (c = 0; c + 16 <= count; c += 16) quarot__gemm_tr16_avx512(buf + c * L + i0, L, dst + c, ld);
                for (; c < count; ++c)
                    for (k = 0; k < 16; ++k) dst[k * ld + c] = buf[c * L + i0 + k];
                continue;
            }
#endif
            for (c = 0; c < count; ++c)
                for (k = 0; k < nb; ++k) span[k * count + c] = buf[c * L + i0 + k];
            for (k = 0; k < nb; ++k)
                memcpy(quarot__row2d(t, i0 + k) + (size_t)first * sizeof(float), span + k * count,
                       (size_t)count * sizeof(float));
        }
    return res;
}

static void quarot__cmd_task(void* arg, int64_t task) {
    quarot__cmd_job* job = (quarot__cmd_job*)arg;
    const quarot_tensor* t = job->t;
    int64_t L = job->L, n_lines = job->axis == 0 ? quarot_tensor_nrows(t) : t->ne[0];
    int64_t first = task * job->chunk, count = n_lines - first < job->chunk ? n_lines - first : job->chunk, i, c;
    size_t ws = quarot_rotation_workspace_size(job->rot), es = quarot_dtype_size(t->dtype);
    double* buf = (double*)quarot_env_alloc(job->env, (size_t)(count * L) * sizeof(double));
    double* tmp = job->c->inner > 1
                      ? (double*)quarot_env_alloc(job->env, (size_t)(job->rot->n * job->c->inner) * sizeof(double))
                      : NULL;
    double* span = job->axis == 1 ? (double*)quarot_env_alloc(job->env,
                                                              (size_t)(count * QUAROT__CMD_TB) * sizeof(double)) : NULL;
    void* work = ws ? quarot_env_alloc(job->env, ws) : NULL;
    quarot_result res = QUAROT_OK;
    if (!buf || (job->c->inner > 1 && !tmp) || (job->axis == 1 && !span) || (ws && !work)) {
        res = QUAROT_ERR_OUT_OF_MEMORY;
    } else if (job->f32) {   // float views of the same buffers (each at least as large in floats)
        res = quarot__cmd_task_f32(job, first, count, (float*)(void*)buf, (float*)(void*)tmp, (float*)(void*)span, work,
                                   ws);
    } else if (job->axis == 0) {
        for (i = 0; i < count; ++i) quarot__span_get_f64(t->dtype, quarot__tensor_row(t, first + i), L, buf + i * L);
        res = quarot__rotate_rows_f64(job->rot, buf, count, L, job->c->outer, job->c->inner, tmp, work, ws);
        if (res == QUAROT_OK)
            for (i = 0; i < count; ++i)
                quarot__span_set_f64(t->dtype, quarot__tensor_row(t, first + i), L, buf + i * L);
    } else {
        // buf[c][r] = W[r][first + c]: the columns become rows of length L. The transpose goes
        // through span in blocks of QUAROT__CMD_TB rows, so each buf row gets whole cache lines
        // (one row at a time wrote `count` lines L*8 bytes apart per row).
        int64_t i0, nb, k;
        for (i0 = 0; i0 < L; i0 += nb) {
            nb = L - i0 < QUAROT__CMD_TB ? L - i0 : QUAROT__CMD_TB;
            for (k = 0; k < nb; ++k)
                quarot__span_get_f64(t->dtype, quarot__tensor_row(t, i0 + k) + (size_t)first * es, count,
                                     span + k * count);
            for (c = 0; c < count; ++c)
                for (k = 0; k < nb; ++k) buf[c * L + i0 + k] = span[k * count + c];
        }
        res = quarot__rotate_rows_f64(job->rot, buf, count, L, job->c->outer, job->c->inner, tmp, work, ws);
        if (res == QUAROT_OK)
            for (i0 = 0; i0 < L; i0 += nb) {
                nb = L - i0 < QUAROT__CMD_TB ? L - i0 : QUAROT__CMD_TB;
                for (c = 0; c < count; ++c)
                    for (k = 0; k < nb; ++k) span[k * count + c] = buf[c * L + i0 + k];
                for (k = 0; k < nb; ++k)
                    quarot__span_set_f64(t->dtype, quarot__tensor_row(t, i0 + k) + (size_t)first * es, count,
                                         span + k * count);
            }
    }
    quarot_env_free(job->env, buf);
    quarot_env_free(job->env, tmp);
    quarot_env_free(job->env, span);
    quarot_env_free(job->env, work);
    job->results[task] = res;
}

// Which axis a command rotates, and that axis's length; 0 when the tensor is not a 2-D weight.
static int64_t quarot__command_axis(const quarot_command* c, const quarot_tensor* t, int* axis) {
    if (t->ne[2] != 1 || t->ne[3] != 1) return 0;
    *axis = (c->side == QUAROT_SIDE_INPUT || c->embedding) ? 0 : 1;
    return *axis == 0 ? t->ne[0] : t->ne[1];
}

// Shape checks shared by validation and execution.
static quarot_result quarot__command_check(const quarot_command* c, const quarot_rotation* rot,
                                           const quarot_tensor* w, const quarot_tensor* b) {
    int axis;
    int64_t L;
    if (!c || !rot || !w) return QUAROT_ERR_INVALID_ARGUMENT;
    if (c->side != QUAROT_SIDE_INPUT && c->side != QUAROT_SIDE_OUTPUT) return QUAROT_ERR_INVALID_ARGUMENT;
    if (c->outer < 1 || c->inner < 1) return QUAROT_ERR_INVALID_ARGUMENT;
    if (quarot_tensor_validate(w) != QUAROT_OK) return quarot_tensor_validate(w);
    L = quarot__command_axis(c, w, &axis);
    if (L == 0 || L != c->outer * rot->n * c->inner) return QUAROT_ERR_SHAPE_MISMATCH;
    if (b) {
        if (quarot_tensor_validate(b) != QUAROT_OK) return quarot_tensor_validate(b);
        if (axis != 1 || quarot_tensor_nelements(b) != L || b->ne[0] != L) return QUAROT_ERR_SHAPE_MISMATCH;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_command_apply(const quarot_command* c, const quarot_rotation* rot,
                                              quarot_tensor* weight, quarot_tensor* bias, const quarot_env* env) {
    quarot__cmd_job job;
    quarot_rotation serial;
    int64_t n_lines, n_tasks, k;
    quarot_result res = quarot__command_check(c, rot, weight, bias);
    if (res != QUAROT_OK) return res;
    // The tasks run on env's parallel hook, so the rotation they apply must not use it again (a
    // GEMM inside a task would re-enter the pool): a shallow copy without the hook (same results).
    serial = *rot;
    memset(&serial.env.parallel, 0, sizeof serial.env.parallel);
    memset(&job, 0, sizeof job);
    job.c = c;
    job.rot = &serial;
    job.t = weight;
    job.env = env;
    job.L = quarot__command_axis(c, weight, &job.axis);
    job.f32 = c->f32 && weight->dtype == QUAROT_DTYPE_F32 &&
              (rot->kind == QUAROT_ROTATION_HADAMARD || rot->kind == QUAROT_ROTATION_IDENTITY);
    n_lines = job.axis == 0 ? quarot_tensor_nrows(weight) : weight->ne[0];
    job.chunk = QUAROT__CMD_ROWS;
    n_tasks = (n_lines + job.chunk - 1) / job.chunk;
    job.results = (quarot_result*)quarot_env_alloc(env, (size_t)n_tasks * sizeof(quarot_result));
    if (!job.results) return QUAROT_ERR_OUT_OF_MEMORY;
    quarot_env_parallel_for(env, quarot__cmd_task, &job, n_tasks);
    for (k = 0; k < n_tasks && res == QUAROT_OK; ++k) res = job.results[k];
    quarot_env_free(env, job.results);
    if (res == QUAROT_OK && bias) {   // b <- b * Q (a writer's bias is a row vector on the output axis)
        double* bb = (double*)quarot_env_alloc(env, (size_t)job.L * sizeof(double));
        double* tmp = c->inner > 1 ? (double*)quarot_env_alloc(env,
                                                               (size_t)(rot->n * c->inner) * sizeof(double)) : NULL;
        if (!bb || (c->inner > 1 && !tmp)) res = QUAROT_ERR_OUT_OF_MEMORY;
        else {
            quarot__span_get_f64(bias->dtype, (const char*)bias->data, job.L, bb);
            res = quarot__rotate_rows_f64(rot, bb, 1, job.L, c->outer, c->inner, tmp, NULL, 0);
            if (res == QUAROT_OK) quarot__span_set_f64(bias->dtype, (char*)bias->data, job.L, bb);
        }
        quarot_env_free(env, bb);
        quarot_env_free(env, tmp);
    }
    return res;
}

// >>online
// A hook views each activation row as [outer][n][inner] and applies v <- v*D*H_n/sqrt(n) along n.
// inner == 1 is a batched transform over rows*outer sub-rows; inner > 1 (the heads axis) gathers
// the n strided entries of each of the inner columns into the workspace first.
QUAROT_API void quarot_online_list_init(quarot_online_list* list, const quarot_env* env) {
    if (!list) return;
    memset(list, 0, sizeof *list);
    list->env = quarot__env_copy(env);
}

QUAROT_API void quarot_online_list_free(quarot_online_list* list) {
    int64_t i;
    if (!list) return;
    for (i = 0; i < list->count; ++i) quarot_env_free(&list->env, list->hooks[i].signs);
    for (i = 0; i < list->n_plans; ++i) {
        quarot_hadamard_plan_free(list->plans[i]);
        quarot_env_free(&list->env, list->plans[i]);
    }
    quarot_env_free(&list->env, list->plans);
    quarot_env_free(&list->env, list->hooks);
    memset(list, 0, sizeof *list);
}

static const char* const quarot__site_names[QUAROT_SITE_COUNT_] = {"none", "down_input", "o_input", "q_rope", "k_rope",
                                                                    "expert_down_input", "shared_down_input"};

QUAROT_API const char* quarot_online_site_name(quarot_online_site site) {
    if ((int)site < 0 || (int)site >= (int)QUAROT_SITE_COUNT_) return "unknown";
    return quarot__site_names[site];
}

// The list's plan of order n, created on first use (plans are allocated one by one so hooks can
// keep pointers to them while the plan array grows).
static quarot_result quarot__online_plan(quarot_online_list* list, int64_t n, const quarot_hadamard_plan** out) {
    quarot_hadamard_plan* p;
    quarot_hadamard_plan** grown;
    quarot_result res;
    int64_t i;
    for (i = 0; i < list->n_plans; ++i)
        if (list->plans[i]->n == n) { *out = list->plans[i]; return QUAROT_OK; }
    p = (quarot_hadamard_plan*)quarot_env_alloc(&list->env, sizeof *p);
    grown = (quarot_hadamard_plan**)quarot_env_alloc(&list->env, (size_t)(list->n_plans + 1) * sizeof *grown);
    if (!p || !grown) {
        quarot_env_free(&list->env, p);
        quarot_env_free(&list->env, grown);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    res = quarot_hadamard_plan_init(p, n, &list->env);
    if (res != QUAROT_OK) { quarot_env_free(&list->env, p); quarot_env_free(&list->env, grown); return res; }
    if (list->n_plans) memcpy(grown, list->plans, (size_t)list->n_plans * sizeof *grown);
    grown[list->n_plans] = p;
    quarot_env_free(&list->env, list->plans);
    list->plans = grown;
    list->n_plans++;
    *out = p;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_online_list_add(quarot_online_list* list, int64_t layer, quarot_online_site site,
                                                int64_t size, int64_t outer, int64_t n, int64_t inner,
                                                const float* signs) {
    quarot_online_hook* h;
    const quarot_hadamard_plan* plan;
    quarot_result res;
    int64_t i;
    if (!list || layer < 0 || site <= QUAROT_SITE_NONE || site >= QUAROT_SITE_COUNT_)
        return QUAROT_ERR_INVALID_ARGUMENT;
    if (outer < 1 || n < 1 || inner < 1 || size < 1) return QUAROT_ERR_INVALID_ARGUMENT;
    if (n > INT64_MAX / outer || n * outer > INT64_MAX / inner || outer * n * inner != size)
        return QUAROT_ERR_SHAPE_MISMATCH;
    if (signs)
        for (i = 0; i < n; ++i)
            if (signs[i] != 1.0f && signs[i] != -1.0f) return QUAROT_ERR_INVALID_ARGUMENT;
    res = quarot__online_plan(list, n, &plan);
    if (res != QUAROT_OK) return res;
    h = (quarot_online_hook*)quarot__grow(&list->env, (void**)&list->hooks, &list->count, &list->cap, sizeof *h);
    if (!h) return QUAROT_ERR_OUT_OF_MEMORY;
    h->layer = layer;
    h->site = site;
    h->size = size;
    h->outer = outer;
    h->n = n;
    h->inner = inner;
    h->K = plan->K;
    h->m = plan->m;
    h->plan = plan;
    if (signs) {
        h->signs = (float*)quarot_env_alloc(&list->env, (size_t)n * sizeof(float));
        if (!h->signs) { list->count--; return QUAROT_ERR_OUT_OF_MEMORY; }
        memcpy(h->signs, signs, (size_t)n * sizeof(float));
    }
    return QUAROT_OK;
}

QUAROT_API const quarot_online_hook* quarot_online_find(const quarot_online_list* list, int64_t layer,
                                                        quarot_online_site site) {
    int64_t i;
    if (!list) return NULL;
    for (i = 0; i < list->count; ++i)
        if (list->hooks[i].layer == layer && list->hooks[i].site == site) return &list->hooks[i];
    return NULL;
}

QUAROT_API size_t quarot_online_workspace_size(const quarot_online_hook* hook) {
    size_t ws;
    if (!hook || !hook->plan) return 0;
    ws = quarot_hadamard_workspace_size(hook->plan);
    ws = (ws + 63) & ~(size_t)63;
    if (hook->inner > 1) ws += (size_t)(hook->n * hook->inner) * sizeof(float);
    return ws;
}

QUAROT_API quarot_result quarot_online_apply(const quarot_online_hook* hook, float* x, int64_t rows, int64_t stride,
                                             void* work, size_t work_size) {
    quarot_hadamard_apply_desc d;
    size_t pws, need;
    int64_t r, o, k, c, n, inner;
    quarot_result res = QUAROT_OK;
    if (!hook || !hook->plan || !x || rows < 0 || stride < hook->size) return QUAROT_ERR_INVALID_ARGUMENT;
    need = quarot_online_workspace_size(hook);
    if (work_size < need || (need && !work)) return QUAROT_ERR_WORKSPACE;
    if (rows == 0) return QUAROT_OK;
    memset(&d, 0, sizeof d);
    d.signs = hook->signs;
    pws = (quarot_hadamard_workspace_size(hook->plan) + 63) & ~(size_t)63;
    n = hook->n;
    inner = hook->inner;
    if (inner == 1) {
        if (stride == hook->size)   // contiguous rows: one batched call over rows*outer vectors
            return quarot_hadamard_apply_f32(hook->plan, &d, x, rows * hook->outer, n, work, pws);
        for (r = 0; r < rows && res == QUAROT_OK; ++r)
            res = quarot_hadamard_apply_f32(hook->plan, &d, x + r * stride, hook->outer, n, work, pws);
        return res;
    }
    {
        float* tmp = (float*)((char*)work + pws);
        for (r = 0; r < rows && res == QUAROT_OK; ++r)
            for (o = 0; o < hook->outer && res == QUAROT_OK; ++o) {
                float* base = x + r * stride + o * n * inner;
                for (k = 0; k < n; ++k)
                    for (c = 0; c < inner; ++c) tmp[c * n + k] = base[k * inner + c];
                res = quarot_hadamard_apply_f32(hook->plan, &d, tmp, inner, n, work, pws);
                for (k = 0; k < n; ++k)
                    for (c = 0; c < inner; ++c) base[k * inner + c] = tmp[c * n + k];
            }
    }
    return res;
}

// ---- text format, version 1 ----
typedef struct quarot__textbuf {
    char* buf;
    size_t cap, len;
} quarot__textbuf;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void quarot__tb_printf(quarot__textbuf* tb, const char* fmt, ...) {
    va_list ap;
    int n;
    char* dst = tb->buf && tb->len < tb->cap ? tb->buf + tb->len : NULL;
    size_t room = dst ? tb->cap - tb->len : 0;
    va_start(ap, fmt);
    n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) tb->len += (size_t)n;
}

QUAROT_API quarot_result quarot_online_write(const quarot_online_list* list, char* buf, size_t cap, size_t* needed) {
    quarot__textbuf tb;
    int8_t* h = NULL;
    int64_t i, j, k;
    if (!list || !needed || (buf && cap == 0)) return QUAROT_ERR_INVALID_ARGUMENT;
    tb.buf = buf; tb.cap = cap; tb.len = 0;
    quarot__tb_printf(&tb, "quarot-online 1\nhooks %lld\n", (long long)list->count);
    for (i = 0; i < list->count; ++i) {
        const quarot_online_hook* hk = &list->hooks[i];
        quarot__tb_printf(&tb, "hook %lld %s size=%lld outer=%lld n=%lld inner=%lld K=%lld m=%d",
                          (long long)hk->layer, quarot_online_site_name(hk->site), (long long)hk->size,
                          (long long)hk->outer, (long long)hk->n, (long long)hk->inner, (long long)hk->K, hk->m);
        if (hk->site == QUAROT_SITE_EXPERT_DOWN_INPUT) quarot__tb_printf(&tb, " experts=%lld", (long long)hk->experts);
        quarot__tb_printf(&tb, " signs=");
        if (!hk->signs) quarot__tb_printf(&tb, "-");
        else
            for (j = 0; j < (hk->n + 3) / 4; ++j) {   // hex digit j: bit b set = sign 4j+b is -1
                int digit = 0, b;
                for (b = 0; b < 4 && 4 * j + b < hk->n; ++b) digit |= (hk->signs[4 * j + b] < 0) << b;
                quarot__tb_printf(&tb, "%x", digit);
            }
        quarot__tb_printf(&tb, "\n");
    }
    for (i = 0; i < list->n_plans; ++i) {   // the H_K of every plan with K > 1
        const quarot_hadamard_plan* p = list->plans[i];
        int dup = 0;
        if (p->K <= 1) continue;
        for (j = 0; j < i; ++j) dup |= list->plans[j]->K == p->K;
        if (dup) continue;
        quarot__tb_printf(&tb, "hadamard %lld\n", (long long)p->K);
        for (j = 0; j < p->K; ++j) {
            if (tb.buf && tb.len + (size_t)p->K + 1 < tb.cap) {
                for (k = 0; k < p->K; ++k) tb.buf[tb.len + (size_t)k] = p->had_k[j * p->K + k] > 0 ? '+' : '-';
                tb.buf[tb.len + (size_t)p->K] = '\n';
                tb.buf[tb.len + (size_t)p->K + 1] = '\0';
            }
            tb.len += (size_t)p->K + 1;
        }
    }
    quarot__tb_printf(&tb, "end\n");
    (void)h;
    *needed = tb.len + 1;
    if (buf && tb.len + 1 > cap) return QUAROT_ERR_WORKSPACE;
    return QUAROT_OK;
}

// A cursor over one line of the text being read.
typedef struct quarot__lineread {
    const char* p;
    const char* end;
} quarot__lineread;

static int quarot__lr_word(quarot__lineread* lr, const char* word) {
    size_t n = strlen(word);
    if ((size_t)(lr->end - lr->p) < n || memcmp(lr->p, word, n) != 0) return 0;
    lr->p += n;
    return 1;
}

// Non-negative decimal integer below 2^53, no sign, no leading '+'.
static int quarot__lr_int(quarot__lineread* lr, int64_t* out) {
    int64_t v = 0;
    int digits = 0;
    while (lr->p < lr->end && *lr->p >= '0' && *lr->p <= '9') {
        if (v > (((int64_t)1 << 53) - 10) / 10) return 0;
        v = v * 10 + (*lr->p - '0');
        lr->p++;
        digits++;
    }
    *out = v;
    return digits > 0 && digits < 17;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 4, 5)))
#endif
static quarot_result quarot__parse_error(char* err, size_t err_size, int64_t line, const char* fmt, ...) {
    va_list ap;
    int n;
    if (!err || err_size == 0) return QUAROT_ERR_PARSE;
    n = snprintf(err, err_size, "line %lld: ", (long long)line);
    if (n < 0 || (size_t)n >= err_size) return QUAROT_ERR_PARSE;
    va_start(ap, fmt);
    vsnprintf(err + n, err_size - (size_t)n, fmt, ap);
    va_end(ap);
    return QUAROT_ERR_PARSE;
}

// The signs= field of a hook line: (n + 3) / 4 hex digits (bit b of digit i set: sign 4i+b is -1) into
// signs [n]; the padding bits of the last digit must be 0.
static quarot_result quarot__online_read_signs(const quarot__lineread* lr, int64_t n, float* signs, char* err,
                                               size_t err_size, int64_t line) {
    int64_t i, digits = (n + 3) / 4;
    quarot_result res = QUAROT_OK;
    for (i = 0; i < digits && res == QUAROT_OK; ++i) {
        char ch = lr->p[i];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1, b;
        if (v < 0) { res = quarot__parse_error(err, err_size, line, "bad hex digit in signs"); break; }
        for (b = 0; b < 4; ++b) {
            if (4 * i + b < n) signs[4 * i + b] = (v >> b) & 1 ? -1.0f : 1.0f;
            else if ((v >> b) & 1)
                res = quarot__parse_error(err, err_size, line, "padding bits of signs must be 0");
        }
    }
    return res;
}

// The rest of a "hook " line: "<layer> <site> size= outer= n= inner= K= m= signs=", checked against
// quarot.h's construction and added to the list (declared: the header's hook count).
static quarot_result quarot__online_read_hook(quarot_online_list* list, quarot__lineread* lr, int64_t declared,
                                              char* err, size_t err_size, int64_t line) {
    int64_t layer, size, outer, n, inner, K, m, experts = 0;
    quarot_online_site site = QUAROT_SITE_NONE;
    int s;
    quarot_hadamard_info info;
    quarot_result res;
    if (list->count >= declared) return quarot__parse_error(err, err_size, line, "more hooks than declared");
    if (!quarot__lr_int(lr, &layer) || !quarot__lr_word(lr, " "))
        return quarot__parse_error(err, err_size, line, "bad layer");
    for (s = 1; s < (int)QUAROT_SITE_COUNT_; ++s) {
        quarot__lineread t = *lr;
        if (quarot__lr_word(&t, quarot__site_names[s]) && quarot__lr_word(&t, " ")) {
            site = (quarot_online_site)s;
            *lr = t;
            break;
        }
    }
    if (site == QUAROT_SITE_NONE) return quarot__parse_error(err, err_size, line, "unknown site");
    if (!quarot__lr_word(lr, "size=") || !quarot__lr_int(lr, &size) || !quarot__lr_word(lr, " outer=") ||
        !quarot__lr_int(lr, &outer) || !quarot__lr_word(lr, " n=") || !quarot__lr_int(lr, &n) ||
        !quarot__lr_word(lr, " inner=") || !quarot__lr_int(lr, &inner) || !quarot__lr_word(lr, " K=") ||
        !quarot__lr_int(lr, &K) || !quarot__lr_word(lr, " m=") || !quarot__lr_int(lr, &m))
        return quarot__parse_error(err, err_size, line, "expected size= outer= n= inner= K= m= signs=");
    if (site == QUAROT_SITE_EXPERT_DOWN_INPUT &&
        (!quarot__lr_word(lr, " experts=") || !quarot__lr_int(lr, &experts) || experts < 1 || experts > (1 << 20)))
        return quarot__parse_error(err, err_size, line, "expert_down_input needs experts=<count> after m=");
    if (!quarot__lr_word(lr, " signs="))
        return quarot__parse_error(err, err_size, line, "expected size= outer= n= inner= K= m= signs=");
    if (outer < 1 || n < 1 || inner < 1 || n > ((int64_t)1 << 30) || outer > ((int64_t)1 << 30) ||
        inner > ((int64_t)1 << 30) || outer * n > ((int64_t)1 << 40) / inner || outer * n * inner != size)
        return quarot__parse_error(err, err_size, line, "size must equal outer*n*inner (and be sane)");
    if (quarot_hadamard_info_get(n, &info) != QUAROT_OK || info.K != K || info.m != (int)m)
        return quarot__parse_error(err, err_size, line, "n=%lld K=%lld m=%lld is not quarot.h's construction",
                                   (long long)n, (long long)K, (long long)m);
    if (lr->p < lr->end && *lr->p == '-' && lr->p + 1 == lr->end) {
        res = quarot_online_list_add(list, layer, site, size, outer, n, inner, NULL);
    } else {
        float* signs;
        if (lr->end - lr->p != (n + 3) / 4)
            return quarot__parse_error(err, err_size, line, "signs must be %lld hex digits", (long long)((n + 3) / 4));
        signs = (float*)quarot_env_alloc(&list->env, (size_t)n * sizeof(float));
        if (!signs) return QUAROT_ERR_OUT_OF_MEMORY;
        res = quarot__online_read_signs(lr, n, signs, err, err_size, line);
        if (res == QUAROT_OK) res = quarot_online_list_add(list, layer, site, size, outer, n, inner, signs);
        quarot_env_free(&list->env, signs);
    }
    if (res == QUAROT_OK) list->hooks[list->count - 1].experts = experts;
    if (res != QUAROT_OK && (!err || !err[0]))
        quarot__parse_error(err, err_size, line, "%s", quarot_result_string(res));
    return res;
}

// The rest of a "hadamard " line, "<K>", and the K rows of '+' / '-' after it (*p, *line: past them),
// which must be quarot.h's H_K.
static quarot_result quarot__online_read_hadamard(quarot_online_list* list, quarot__lineread* lr, const char** p,
                                                  const char* end, int64_t* line, char* err, size_t err_size) {
    int64_t K, r, c;
    int8_t* ref;
    quarot_result res;
    if (!quarot__lr_int(lr, &K) || lr->p != lr->end || K < 2 || K > 4096 || !quarot_hadamard_available(K))
        return quarot__parse_error(err, err_size, *line, "bad 'hadamard <K>' header");
    ref = (int8_t*)quarot_env_alloc(&list->env, (size_t)(K * K));
    if (!ref) return QUAROT_ERR_OUT_OF_MEMORY;
    res = quarot_hadamard_build_i8(K, ref, &list->env);
    for (r = 0; r < K && res == QUAROT_OK; ++r) {
        const char* rl = *p;
        const char* rn = *p < end ? (const char*)memchr(*p, '\n', (size_t)(end - *p)) : NULL;
        ++*line;
        if (!rn || rn - rl != K) {
            res = quarot__parse_error(err, err_size, *line, "matrix row must have %lld signs", (long long)K);
            break;
        }
        for (c = 0; c < K; ++c)
            if ((rl[c] == '+' ? 1 : rl[c] == '-' ? -1 : 0) != ref[r * K + c]) {
                res = quarot__parse_error(err, err_size, *line, "H_%lld differs from quarot.h's construction",
                                          (long long)K);
                break;
            }
        *p = rn + 1;
    }
    quarot_env_free(&list->env, ref);
    return res;
}

// Line by line: the two header lines, then hook / hadamard / weights lines up to "end"; on any error
// the list is emptied again.
QUAROT_API quarot_result quarot_online_read(quarot_online_list* list, const char* text, size_t len, char* err,
                                            size_t err_size) {
    const char *p, *end;
    int64_t line = 0, declared = -1;
    int seen_end = 0;
    quarot_result res = QUAROT_OK;
    if (err && err_size) err[0] = '\0';
    if (!list || !text || list->count != 0) return QUAROT_ERR_INVALID_ARGUMENT;
    p = text;                                  // only now: NULL + len is undefined
    end = text + len;
    while (p < end && res == QUAROT_OK) {
        quarot__lineread lr;
        const char* nl = (const char*)memchr(p, '\n', (size_t)(end - p));
        lr.p = p;
        lr.end = nl ? nl : end;
        p = nl ? nl + 1 : end;
        ++line;
        if (seen_end) { res = quarot__parse_error(err, err_size, line, "text after 'end'"); break; }
        if (line == 1) {
            if (!quarot__lr_word(&lr, "quarot-online 1") || lr.p != lr.end)
                res = quarot__parse_error(err, err_size, line,
                                          "expected 'quarot-online 1' (unknown format or version)");
            continue;
        }
        if (line == 2) {
            if (!quarot__lr_word(&lr,
                                 "hooks ") || !quarot__lr_int(&lr, &declared) || lr.p != lr.end || declared > (1 << 24))
                res = quarot__parse_error(err, err_size, line, "expected 'hooks <count>'");
            continue;
        }
        if (quarot__lr_word(&lr, "end")) {
            if (lr.p != lr.end) res = quarot__parse_error(err, err_size, line, "junk after 'end'");
            seen_end = 1;
            continue;
        }
        if (quarot__lr_word(&lr, "weights ")) {   // a digest the tool checks; nothing to build
            if (lr.p == lr.end || lr.end - lr.p > 128)
                res = quarot__parse_error(err, err_size, line, "bad 'weights <digest>' line");
            continue;
        }
        if (quarot__lr_word(&lr, "hook ")) {
            res = quarot__online_read_hook(list, &lr, declared, err, err_size, line);
            continue;
        }
        if (quarot__lr_word(&lr, "hadamard ")) {
            res = quarot__online_read_hadamard(list, &lr, &p, end, &line, err, err_size);
            continue;
        }
        res = quarot__parse_error(err, err_size, line, "unknown line");
    }
    if (res == QUAROT_OK && line < 2) res = quarot__parse_error(err, err_size, line, "truncated header");
    if (res == QUAROT_OK && !seen_end) res = quarot__parse_error(err, err_size, line, "missing 'end' (truncated file)");
    if (res == QUAROT_OK && list->count != declared)
        res = quarot__parse_error(err, err_size, line, "%lld hooks declared, %lld found", (long long)declared,
                                  (long long)list->count);
    if (res != QUAROT_OK) {
        quarot_env free_env = list->env;
        quarot_online_list_free(list);
        quarot_online_list_init(list, &free_env);
    }
    return res;
}
// >>processor
// init: resolve the config, build the adapter's plan, the rotations (R1, R2, HEADS, R4, R3) and the
// command list, then validate every named tensor (globals, then each layer between acquire and
// release) before anything is written. The passes then run the plan's fusions, bakes and commands
// filtered by layer (-1 = global, in pre_run), and register each layer's online hooks.

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void quarot__model_error(quarot_model* m, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->error, sizeof m->error, fmt, ap);
    va_end(ap);
}

// Fill defaults (n_kv_heads, head_dim) and reject inconsistent geometry.
static quarot_result quarot__resolve_config(quarot_model* m, quarot_model_config* cfg) {
    *cfg = m->config;
    if (cfg->hidden <= 0 || cfg->n_layers <= 0 || cfg->n_heads <= 0 || cfg->intermediate <= 0 || cfg->vocab <= 0) {
        quarot__model_error(m, "config: hidden, intermediate, n_layers, n_heads and vocab must be positive");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (cfg->n_kv_heads == 0) cfg->n_kv_heads = cfg->n_heads;
    if (cfg->n_kv_heads < 0 || cfg->n_heads % cfg->n_kv_heads != 0) {
        quarot__model_error(m, "config: n_kv_heads %lld does not divide n_heads %lld", (long long)cfg->n_kv_heads,
                            (long long)cfg->n_heads);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (cfg->head_dim == 0) {
        if (cfg->hidden % cfg->n_heads != 0) {
            quarot__model_error(m, "config: head_dim not given and n_heads %lld does not divide hidden %lld",
                                (long long)cfg->n_heads, (long long)cfg->hidden);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        cfg->head_dim = cfg->hidden / cfg->n_heads;
    }
    if (cfg->head_dim <= 0) {
        quarot__model_error(m, "config: head_dim must be positive");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

// Look a tensor up and check it is a valid view of a supported floating-point type.
static quarot_result quarot__get(quarot_processor* p, const char* name, quarot_tensor* t) {
    quarot_result r;
    memset(t, 0, sizeof *t);
    if (!p->model->get_tensor) return QUAROT_ERR_INVALID_ARGUMENT;
    r = p->model->get_tensor(p->model->user_data, name, t);
    if (r == QUAROT_ERR_NOT_FOUND) { quarot__model_error(p->model, "tensor '%s' not found", name); return r; }
    if (r != QUAROT_OK) { quarot__model_error(p->model, "tensor '%s': %s", name, quarot_result_string(r)); return r; }
    r = quarot_tensor_validate(t);
    if (r != QUAROT_OK) {
        quarot__model_error(p->model, "tensor '%s': invalid view (%s)", name, quarot_result_string(r));
        return r;
    }
    return QUAROT_OK;
}

// 1 when the tensor exists (probe without recording an error).
static int quarot__exists(quarot_processor* p, const char* name) {
    quarot_tensor t;
    if (!name || !name[0]) return 0;
    return p->model->get_tensor(p->model->user_data, name, &t) == QUAROT_OK;
}

static quarot_result quarot__expect_1d(quarot_processor* p, const char* name, const quarot_tensor* t, int64_t len) {
    if (t->ne[0] != len || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
        quarot__model_error(p->model, "tensor '%s' has shape {%lld, %lld, %lld, %lld}, expected a vector of %lld", name,
                            (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                            (long long)len);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    return QUAROT_OK;
}

static quarot_result quarot__check_finite_named(quarot_processor* p, const char* name, const quarot_tensor* t) {
    int64_t bad;
    if (quarot__check_finite_env(t, &bad, &p->model->env) != QUAROT_OK) {
        quarot__model_error(p->model, "tensor '%s' has NaN or Inf at element %lld", name, (long long)bad);
        return QUAROT_ERR_NONFINITE;
    }
    return QUAROT_OK;
}

static int quarot__rotation_of(const quarot_processor* p, quarot_rotation_id id) { return p->have_rot[id]; }

// Record a tensor create_tensor will be asked for (once per name).
static quarot_result quarot__plan_create(quarot_processor* p, const char* name, quarot_dtype dt, int n_dims,
                                         int64_t ne0, int64_t ne1) {
    quarot_tensor_spec* t;
    int64_t i;
    for (i = 0; i < p->n_creates; ++i)
        if (strcmp(p->creates[i].name, name) == 0) return QUAROT_OK;
    t = (quarot_tensor_spec*)quarot__grow(&p->model->env, (void**)&p->creates, &p->n_creates, &p->cap_creates,
                                          sizeof *t);
    if (!t) return QUAROT_ERR_OUT_OF_MEMORY;
    if (!quarot__copy_name(t->name, name)) { p->n_creates--; return QUAROT_ERR_INVALID_ARGUMENT; }
    t->dtype = dt;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = t->ne[3] = 1;
    return QUAROT_OK;
}

// Append one command.
static quarot_result quarot__add_command(quarot_processor* p, int64_t cap, int64_t layer, quarot_rotation_id rot,
                                         quarot_side side, int embedding, int64_t outer, int64_t inner,
                                         const char* weight, const char* bias) {
    quarot_command* c;
    if (p->n_commands >= cap) return QUAROT_ERR_INTERNAL;
    c = &p->commands[p->n_commands++];
    memset(c, 0, sizeof *c);
    c->layer = layer;
    c->rotation = rot;
    c->side = side;
    c->embedding = embedding;
    c->outer = outer;        // 0: derived from the tensor (one slice per head)
    c->inner = inner;
    strcpy(c->weight, weight);
    strcpy(c->bias, bias ? bias : "");
    return QUAROT_OK;
}

static int quarot__down_online(const quarot_processor* p, int64_t layer) {
    int64_t i;
    if (!p->desc.online) return 0;
    switch (p->desc.down_proj_online) {
        case QUAROT_LAYERS_DEFAULT:
        case QUAROT_LAYERS_ALL: return 1;
        case QUAROT_LAYERS_LIST:
            for (i = 0; i < p->desc.n_down_proj_online_layers; ++i)
                if (p->desc.down_proj_online_layers[i] == layer) return 1;
            return 0;
        default: return 0;
    }
}

// A plain (sign-free) Hadamard rotation of size n for an online site, falling back to the largest
// available block; *block receives the order used.
static quarot_result quarot__online_rotation(quarot_processor* p, quarot_rotation* r, int64_t n, const char* what) {
    quarot_rotation_desc d;
    int64_t b = quarot_hadamard_available(n) ? n : quarot_hadamard_largest_block(n, n);
    quarot_result res;
    if (b <= 1) {
        quarot__model_error(p->model,
                            "online %s rotation: no Hadamard matrix of order %lld or of any block dividing it", what,
                            (long long)n);
        return QUAROT_ERR_UNSUPPORTED_SIZE;
    }
    memset(&d, 0, sizeof d);
    d.kind = QUAROT_ROTATION_HADAMARD;
    d.n = b;
    d.no_signs = 1;
    d.fallback = QUAROT_FALLBACK_ERROR;
    res = quarot_rotation_init(r, &d, &p->model->env);
    if (res != QUAROT_OK)
        quarot__model_error(p->model, "online %s rotation of order %lld: %s", what, (long long)b,
                            quarot_result_string(res));
    return res;
}

// desc.r2_matrices: one MATRIX rotation per layer (each checked orthogonal to 1e-6).
static quarot_result quarot__r2_layers(quarot_processor* p, const quarot_model_config* cfg) {
    quarot_rotation_desc d;
    quarot_result res;
    int64_t i;
    p->r2_layers = (quarot_rotation*)quarot_env_alloc(&p->model->env, (size_t)cfg->n_layers * sizeof(quarot_rotation));
    if (!p->r2_layers) return QUAROT_ERR_OUT_OF_MEMORY;
    memset(p->r2_layers, 0, (size_t)cfg->n_layers * sizeof(quarot_rotation));
    memset(&d, 0, sizeof d);
    d.kind = QUAROT_ROTATION_MATRIX;
    d.n = cfg->head_dim;
    for (i = 0; i < cfg->n_layers; ++i) {
        d.matrix = p->desc.r2_matrices + i * cfg->head_dim * cfg->head_dim;
        if ((res = quarot_rotation_init(&p->r2_layers[i], &d, &p->model->env)) != QUAROT_OK) {
            quarot__model_error(p->model, "R2 of layer %lld (head_dim %lld): %s%s", (long long)i,
                                (long long)cfg->head_dim, quarot_result_string(res),
                                res == QUAROT_ERR_INVALID_ARGUMENT ? " (not orthogonal?)" : "");
            return res;
        }
    }
    return QUAROT_OK;
}

// MoE steps (>>processor_moe).
static quarot_result quarot__moe_rotations(quarot_processor* p, const quarot_model_config* cfg, int64_t tp);
static quarot_result quarot__moe_commands(quarot_processor* p, int64_t cap, int64_t layer);
static quarot_result quarot__moe_hooks(quarot_processor* p, int64_t layer);
static int64_t quarot__n_slices(const quarot_tensor* t);
static void quarot__slice(const quarot_tensor* t, int64_t e, quarot_tensor* out);
static quarot_result quarot__moe_validate(quarot_processor* p, const quarot_model_config* cfg, int64_t layer);

static quarot_result quarot__build_rotations(quarot_processor* p, const quarot_model_config* cfg) {
    quarot_rotation_desc d;
    quarot_result res;
    int64_t tp = p->desc.max_tp_size > 0 ? p->desc.max_tp_size : 1;
    quarot_rotation_kind kind =
        p->desc.rotation == QUAROT_ROTATION_DEFAULT ? QUAROT_ROTATION_HADAMARD : p->desc.rotation;
    int k;
    for (k = 0; k < QUAROT_ROT_COUNT_; ++k) p->have_rot[k] = 0;
    memset(&d, 0, sizeof d);
    d.n = cfg->hidden;
    d.block_size = p->desc.block_size > 0 ? p->desc.block_size : 0;
    d.seed = p->desc.seed;
    d.fallback = p->desc.fallback;
    if (d.block_size && cfg->hidden % d.block_size != 0) {
        quarot__model_error(p->model, "block_size %lld does not divide hidden %lld", (long long)d.block_size,
                            (long long)cfg->hidden);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (kind == QUAROT_ROTATION_ADAPT) {
        const quarot_adapt_context* ctx = p->desc.context;
        if (!ctx || !ctx->matrix) {
            quarot__model_error(p->model, "Adapt Rotation stage 2 needs the adapted matrix from stage 1: run stage 1 "
                                          "(calibration) first and pass its context");
            return QUAROT_ERR_STATE;
        }
        if (ctx->hidden != cfg->hidden || cfg->hidden % ctx->block != 0) {
            quarot__model_error(p->model,
                                "Adapt Rotation context is for hidden size %lld (block %lld), the model has %lld",
                                (long long)ctx->hidden, (long long)ctx->block, (long long)cfg->hidden);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
        if (p->desc.block_size > 0 && p->desc.block_size != ctx->block) {
            quarot__model_error(p->model, "block_size %lld differs from the Adapt Rotation context's block %lld",
                                (long long)p->desc.block_size, (long long)ctx->block);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
        d.matrix = ctx->matrix;                 // R_best; H is rebuilt from the context's seed
        d.block_size = ctx->block;
        d.seed = ctx->seed;
        d.orth_tol = 1e-5;
        d.fallback = QUAROT_FALLBACK_BLOCK;
    } else if (kind == QUAROT_ROTATION_MATRIX) {
        if (!p->desc.matrix) {
            quarot__model_error(p->model, "rotation MATRIX needs desc.matrix");
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        d.matrix = p->desc.matrix;
    }
    d.kind = kind;
    res = quarot_rotation_init(&p->rot[QUAROT_ROT_R1], &d, &p->model->env);
    if (res != QUAROT_OK) {
        quarot__model_error(p->model, "R1 rotation of hidden size %lld: %s%s", (long long)cfg->hidden,
                            quarot_result_string(res),
                            res == QUAROT_ERR_INVALID_ARGUMENT &&
                                    (kind == QUAROT_ROTATION_MATRIX || kind == QUAROT_ROTATION_ADAPT)
                                ? " (matrix not orthogonal?)" : "");
        return res;
    }
    if (kind == QUAROT_ROTATION_ADAPT && p->rot[QUAROT_ROT_R1].plan.n != p->desc.context->hadamard_block) {
        quarot__model_error(p->model, "Adapt Rotation context: Hadamard block %lld, but stage 2 builds %lld",
                            (long long)p->desc.context->hadamard_block, (long long)p->rot[QUAROT_ROT_R1].plan.n);
        quarot_rotation_free(&p->rot[QUAROT_ROT_R1]);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    p->have_rot[QUAROT_ROT_R1] = 1;
    if (!p->desc.no_r2) {
        memset(&d, 0, sizeof d);
        d.kind = p->desc.r2_rotation == QUAROT_ROTATION_DEFAULT ? QUAROT_ROTATION_HADAMARD : p->desc.r2_rotation;
        if (d.kind != QUAROT_ROTATION_HADAMARD && d.kind != QUAROT_ROTATION_RANDOM_ORTHOGONAL &&
            d.kind != QUAROT_ROTATION_IDENTITY && !(d.kind == QUAROT_ROTATION_MATRIX && p->desc.r2_matrices)) {
            quarot__model_error(
                p->model, "r2_rotation must be HADAMARD, RANDOM_ORTHOGONAL, IDENTITY or MATRIX (with r2_matrices)");
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        d.n = cfg->head_dim;
        d.seed = p->desc.seed * 0x9e3779b97f4a7c15ULL + 2;
        if (d.kind == QUAROT_ROTATION_MATRIX && (res = quarot__r2_layers(p, cfg)) != QUAROT_OK) return res;
        if (d.kind == QUAROT_ROTATION_MATRIX) d.matrix = p->desc.r2_matrices;   // layer 0's: what the checks see
        res = quarot_rotation_init(&p->rot[QUAROT_ROT_R2], &d, &p->model->env);
        if (res != QUAROT_OK) {
            quarot__model_error(p->model, "R2 rotation of head_dim %lld: %s", (long long)cfg->head_dim,
                                quarot_result_string(res));
            return res;
        }
        p->have_rot[QUAROT_ROT_R2] = 1;
    }
    if (p->desc.online || p->desc.r3) {
        if (!p->desc.online_out) {
            quarot__model_error(p->model, "online rotation needs desc.online_out to receive the hooks");
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        if (tp < 1 || (tp & (tp - 1)) != 0) {
            quarot__model_error(p->model, "max_tp_size must be a power of two");
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    if (p->desc.online) {
        if (cfg->n_heads % tp != 0 || cfg->intermediate % tp != 0) {
            int both = cfg->n_heads % tp != 0 && cfg->intermediate % tp != 0;   // name only what fails
            quarot__model_error(p->model, "max_tp_size %lld does not divide %s %lld%s%.0lld", (long long)tp,
                                cfg->n_heads % tp != 0 ? "n_heads" : "intermediate",
                                (long long)(cfg->n_heads % tp != 0 ? cfg->n_heads : cfg->intermediate),
                                both ? " nor intermediate " : "", (long long)(both ? cfg->intermediate : 0));
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        if ((res = quarot__online_rotation(p, &p->rot[QUAROT_ROT_HEADS], cfg->n_heads / tp,
                                           "o_proj heads")) != QUAROT_OK) return res;
        p->have_rot[QUAROT_ROT_HEADS] = 1;
        if ((res = quarot__online_rotation(p, &p->rot[QUAROT_ROT_R4], cfg->intermediate / tp,
                                           "down_proj")) != QUAROT_OK) return res;
        p->have_rot[QUAROT_ROT_R4] = 1;
        if ((res = quarot__moe_rotations(p, cfg, tp)) != QUAROT_OK) return res;
    }
    if (p->desc.r3 && (res = quarot__online_rotation(p, &p->r3, cfg->head_dim, "q/k")) != QUAROT_OK) return res;
    return QUAROT_OK;
}

// Commands from the plan's rotation entries plus the offline halves of the online rotations.
static quarot_result quarot__build_commands(quarot_processor* p, const quarot_model_config* cfg) {
    int64_t cap = p->plan.n_rotations + 2 * cfg->n_layers + p->plan.n_blocks, i;
    quarot_result res = QUAROT_OK;
    p->commands = (quarot_command*)quarot_env_alloc(&p->model->env, (size_t)cap * sizeof(quarot_command));
    if (!p->commands) return QUAROT_ERR_OUT_OF_MEMORY;
    p->n_commands = 0;
    for (i = 0; i < p->plan.n_rotations && res == QUAROT_OK; ++i) {
        const quarot_plan_rotation* pr = &p->plan.rotations[i];
        if (!quarot__rotation_of(p, pr->rotation)) continue;
        if (cfg->tied_embeddings && !p->untie && strcmp(pr->weight, p->plan.lm_head) == 0)
            continue;   // shares the embedding
        res = quarot__add_command(p, cap, pr->layer, pr->rotation, pr->side, pr->embedding, pr->per_head ? 0 : 1, 1,
                                  pr->weight, pr->side == QUAROT_SIDE_OUTPUT && !pr->embedding ? pr->bias : "");
        if (res == QUAROT_OK && pr->rows > 0) {   // a fused reader's row range (output side)
            quarot_command* c = &p->commands[p->n_commands - 1];
            if (pr->side != QUAROT_SIDE_OUTPUT || pr->embedding) return QUAROT_ERR_INVALID_ARGUMENT;
            c->row0 = pr->row0;
            c->rows = pr->rows;
            c->rows_of = pr->rows_of;
        }
    }
    for (i = 0; i < cfg->n_layers && res == QUAROT_OK && p->desc.online; ++i) {
        const quarot_plan_layer* pl = &p->plan.layers[i];
        res = quarot__add_command(p, cap, i, QUAROT_ROT_HEADS, QUAROT_SIDE_INPUT, 0,
                                  cfg->n_heads / p->rot[QUAROT_ROT_HEADS].n, cfg->head_dim, pl->o_proj, "");
        if (res == QUAROT_OK && quarot__down_online(p, i) && pl->down_proj[0])
            res = quarot__add_command(p, cap, i, QUAROT_ROT_R4, QUAROT_SIDE_INPUT, 0,
                                      cfg->intermediate / p->rot[QUAROT_ROT_R4].n, 1, pl->down_proj, "");
        if (res == QUAROT_OK && quarot__down_online(p, i)) res = quarot__moe_commands(p, cap, i);
    }
    return res;
}

// All-ones gain and zero bias: fusing this norm changes nothing.
static int quarot__norm_is_identity(quarot_processor* p, const char* weight, const char* bias) {
    quarot_tensor t;
    double* row;
    int64_t j;
    int identity = 1;
    if (quarot__get(p, weight, &t) != QUAROT_OK) return 0;
    row = (double*)quarot_env_alloc(&p->model->env, (size_t)t.ne[0] * sizeof(double));
    if (!row) return 0;
    quarot_tensor_get_row_f64(&t, 0, row);
    for (j = 0; j < t.ne[0]; ++j) identity &= row[j] == 1.0;
    if (identity && bias && bias[0] && quarot__get(p, bias, &t) == QUAROT_OK) {
        quarot_tensor_get_row_f64(&t, 0, row);
        for (j = 0; j < t.ne[0]; ++j) identity &= row[j] == 0.0;
    }
    quarot_env_free(&p->model->env, row);
    p->model->error[0] = '\0';
    return identity;
}

static quarot_result quarot__command_rows(quarot_processor* p, const quarot_command* c, quarot_tensor* w,
                                          quarot_tensor* b);   // in >>processor_run

// Validate what one layer (or the globals, layer -1) needs: names, shapes, dtypes, finiteness (unless
// desc.values_checked_by_caller).
static quarot_result quarot__validate_layer(quarot_processor* p, const quarot_model_config* cfg, int64_t layer) {
    quarot_tensor w, b;
    int64_t i, k;
    quarot_result res;
    const int vc = p->desc.values_checked_by_caller;   // finiteness left to the caller (see the desc)
    if ((res = quarot__moe_validate(p, cfg, layer)) != QUAROT_OK) return res;
    for (i = 0; i < p->plan.n_fusions; ++i) {
        const quarot_plan_fusion* f = &p->plan.fusions[i];
        int64_t L;
        if (f->layer != layer) continue;
        if (layer < 0 && cfg->tied_embeddings && !p->untie && strcmp(f->norm_weight, p->plan.final_norm_weight) == 0)
            continue;
        if ((res = quarot__get(p, f->norm_weight, &w)) != QUAROT_OK) return res;
        L = w.ne[0];
        if ((res = quarot__expect_1d(p, f->norm_weight, &w, L)) != QUAROT_OK) return res;
        if (!vc && (res = quarot__check_finite_named(p, f->norm_weight, &w)) != QUAROT_OK) return res;
        if (f->norm_bias[0]) {
            if ((res = quarot__get(p, f->norm_bias, &b)) != QUAROT_OK) return res;
            if ((res = quarot__expect_1d(p, f->norm_bias, &b, L)) != QUAROT_OK) return res;
            if (!vc && (res = quarot__check_finite_named(p, f->norm_bias, &b)) != QUAROT_OK) return res;
        }
        for (k = f->first_linear; k < f->first_linear + f->n_linears; ++k) {
            const quarot_plan_linear* l = &p->plan.linears[k];
            if (layer < 0 && p->untie && strcmp(l->weight, p->plan.lm_head) == 0) {   // created in pre_run
                quarot_tensor e;
                if ((res = quarot__get(p, p->plan.embed, &e)) != QUAROT_OK) return res;
                if ((res = quarot__plan_create(p, l->weight, e.dtype, 2, e.ne[0], e.ne[1])) != QUAROT_OK) return res;
                if (f->norm_bias[0] && l->bias[0] && (res = quarot__plan_create(p, l->bias, e.dtype, 1, e.ne[1],
                                                                                1)) != QUAROT_OK) return res;
                continue;
            }
            if ((res = quarot__get(p, l->weight, &w)) != QUAROT_OK) return res;
            if (w.ne[0] != L || w.ne[3] != 1) {   // 2-D, or 3-D experts [n_experts][out][in]
                quarot__model_error(p->model, "tensor '%s' has %lld inputs, its norm '%s' has %lld", l->weight,
                                    (long long)w.ne[0], f->norm_weight, (long long)L);
                return QUAROT_ERR_SHAPE_MISMATCH;
            }
            if (!vc && (res = quarot__check_finite_named(p, l->weight, &w)) != QUAROT_OK) return res;
            if (quarot__exists(p, l->bias)) {
                if ((res = quarot__get(p, l->bias, &b)) != QUAROT_OK) return res;
                if ((res = quarot__expect_1d(p, l->bias, &b, w.ne[1])) != QUAROT_OK) return res;
                if (!vc && (res = quarot__check_finite_named(p, l->bias, &b)) != QUAROT_OK) return res;
            } else if (f->norm_bias[0] && (!l->bias[0] || !p->model->create_tensor)) {
                quarot__model_error(p->model, "fusing LayerNorm bias '%s' into '%s' needs a bias tensor%s",
                                    f->norm_bias, l->weight,
                                    l->bias[0] ? " and model.create_tensor to make it" : " name");
                return QUAROT_ERR_INVALID_ARGUMENT;
            } else if (f->norm_bias[0] && (res = quarot__plan_create(p, l->bias, w.dtype, 1, w.ne[1],
                                                                     1)) != QUAROT_OK) {
                return res;
            }
        }
    }
    for (i = 0; i < p->plan.n_bakes; ++i) {
        const quarot_plan_bake* bk = &p->plan.bakes[i];
        if (bk->layer != layer) continue;
        if ((res = quarot__get(p, bk->weight, &w)) != QUAROT_OK) return res;
        if ((bk->embedding ? w.ne[0] : w.ne[1]) != cfg->hidden) {
            quarot__model_error(p->model, "tensor '%s' does not write the residual stream of width %lld", bk->weight,
                                (long long)cfg->hidden);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    }
    for (i = 0; i < p->n_commands; ++i) {
        quarot_command* c = &p->commands[i];
        const quarot_rotation* rot = &p->rot[c->rotation];
        int has_bias;
        int axis;
        int64_t L;
        if (c->layer != layer) continue;
        if (layer < 0 && p->untie && strcmp(c->weight, p->plan.lm_head) == 0) continue;   // created in pre_run
        if ((res = quarot__get(p, c->weight, &w)) != QUAROT_OK) return res;
        if (!vc && (res = quarot__check_finite_named(p, c->weight, &w)) != QUAROT_OK) return res;
        if ((res = quarot__command_rows(p, c, &w, NULL)) != QUAROT_OK) return res;
        if (quarot__n_slices(&w) > 1) {   // 3-D experts: every expert's slice has expert 0's shape
            quarot_tensor s0;
            if (c->bias[0] && quarot__exists(p, c->bias)) {
                quarot__model_error(p->model, "tensor '%s': a 3-D expert tensor with a bias is not supported",
                                    c->weight);
                return QUAROT_ERR_UNSUPPORTED;
            }
            quarot__slice(&w, 0, &s0);
            w = s0;
        }
        L = quarot__command_axis(c, &w, &axis);
        if (c->outer == 0) {   // per head: one slice of the rotation's size per head
            if (L == 0 || L % rot->n != 0) {
                quarot__model_error(p->model, "tensor '%s': axis of %lld is not a multiple of head_dim %lld", c->weight,
                                    (long long)L, (long long)rot->n);
                return QUAROT_ERR_SHAPE_MISMATCH;
            }
            c->outer = L / rot->n;
        }
        has_bias = c->bias[0] && quarot__exists(p, c->bias);
        if (has_bias && (res = quarot__get(p, c->bias, &b)) != QUAROT_OK) return res;
        if (has_bias && !vc && (res = quarot__check_finite_named(p, c->bias, &b)) != QUAROT_OK) return res;
        if (has_bias && (res = quarot__command_rows(p, c, NULL, &b)) != QUAROT_OK) return res;
        res = quarot__command_check(c, rot, &w, has_bias ? &b : NULL);
        if (res != QUAROT_OK) {
            quarot__model_error(p->model,
                                "tensor '%s' {%lld, %lld}: does not fit %s rotation of size %lld (x %lld slices "
                                "x %lld)%s", c->weight, (long long)w.ne[0], (long long)w.ne[1],
                                c->side == QUAROT_SIDE_INPUT ? "an input-side" : "an output-side", (long long)rot->n,
                                (long long)c->outer, (long long)c->inner,
                                has_bias ? " or its bias does not match" : "");
            return res;
        }
    }
    return QUAROT_OK;
}

QUAROT_API void quarot_processor_free(quarot_processor* p) {
    int k;
    if (!p || !p->model) return;
    for (k = 0; k < QUAROT_ROT_COUNT_; ++k) quarot_rotation_free(&p->rot[k]);
    quarot_rotation_free(&p->r3);
    if (p->r2_layers) {
        int64_t i;
        for (i = 0; i < p->model->config.n_layers; ++i) quarot_rotation_free(&p->r2_layers[i]);
        quarot_env_free(&p->model->env, p->r2_layers);
        p->r2_layers = NULL;
    }
    quarot_plan_free(&p->plan);
    quarot_env_free(&p->model->env, p->commands);
    quarot_env_free(&p->model->env, p->creates);
    p->creates = NULL;
    p->n_creates = p->cap_creates = 0;
    p->commands = NULL;
    p->n_commands = 0;
    p->model = NULL;
}

QUAROT_API quarot_result quarot_processor_init(quarot_processor* p, quarot_model* model,
                                               const quarot_rotate_desc* desc) {
    quarot_model_config cfg;
    quarot_result res;
    int64_t i;
    if (!p) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    if (!model) return QUAROT_ERR_INVALID_ARGUMENT;
    model->error[0] = '\0';
    if (!model->get_tensor) {
        quarot__model_error(model, "model.get_tensor is NULL");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    p->model = model;
    if (desc) p->desc = *desc;
    if ((res = quarot__resolve_config(model, &cfg)) != QUAROT_OK) { p->model = NULL; return res; }
    p->adapter = p->desc.adapter ? p->desc.adapter : quarot_adapter_find(cfg.arch);
    if (!p->adapter || !p->adapter->build) {
        quarot__model_error(model, "no adapter for architecture '%s' (built-in: %s)", cfg.arch, quarot_adapter_list());
        p->model = NULL;
        return QUAROT_ERR_UNSUPPORTED;
    }
    quarot_plan_init(&p->plan, &model->env);
    res = p->adapter->build(p->adapter, &cfg, p->desc.block_size > 0 ? p->desc.block_size : -1, &p->plan);
    if (res == QUAROT_OK && p->plan.n_layers != cfg.n_layers) res = QUAROT_ERR_INTERNAL;
    if (res != QUAROT_OK) {
        if (!model->error[0])
            quarot__model_error(model, "adapter '%s' could not describe the model: %s", p->adapter->arch,
                                quarot_result_string(res));
        quarot_processor_free(p);
        return res;
    }
    // Untie when the shared table cannot serve both ends after fusion / baking.
    if (cfg.tied_embeddings) {
        const char* fb = NULL;
        for (i = 0; i < p->plan.n_fusions; ++i)
            if (strcmp(p->plan.fusions[i].norm_weight, p->plan.final_norm_weight) == 0)
                fb = p->plan.fusions[i].norm_bias;
        p->untie = cfg.norm == QUAROT_NORM_LAYER || p->plan.n_bakes > 0 ||
                   !quarot__norm_is_identity(p, p->plan.final_norm_weight, fb);
        if (p->untie && !model->create_tensor) {
            quarot__model_error(model, "tied embeddings must be untied (the final norm is not the identity) and "
                                       "model.create_tensor is NULL");
            quarot_processor_free(p);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    if ((res = quarot__build_rotations(p, &cfg)) != QUAROT_OK || (res = quarot__build_commands(p, &cfg)) != QUAROT_OK) {
        if (!model->error[0]) quarot__model_error(model, "building rotations: %s", quarot_result_string(res));
        quarot_processor_free(p);
        return res;
    }
    // Validation pass: globals, then every layer once (read only).
    {
        quarot_tensor e;
        if ((res = quarot__get(p, p->plan.embed, &e)) == QUAROT_OK && (e.ne[0] != cfg.hidden || e.ne[1] != cfg.vocab)) {
            quarot__model_error(model, "embedding '%s' is {%lld, %lld}, expected {hidden %lld, vocab %lld}",
                                p->plan.embed, (long long)e.ne[0], (long long)e.ne[1], (long long)cfg.hidden,
                                (long long)cfg.vocab);
            res = QUAROT_ERR_SHAPE_MISMATCH;
        }
        if (res == QUAROT_OK && !cfg.tied_embeddings && !quarot__exists(p, p->plan.lm_head)) {
            quarot__model_error(model, "tensor '%s' not found (config says the embeddings are not tied)",
                                p->plan.lm_head);
            res = QUAROT_ERR_NOT_FOUND;
        }
    }
    if (res == QUAROT_OK) res = quarot__validate_layer(p, &cfg, -1);
    for (i = 0; i < cfg.n_layers && res == QUAROT_OK; ++i) {
        if (model->acquire_layer && (res = model->acquire_layer(model->user_data, i)) != QUAROT_OK) {
            quarot__model_error(model, "acquire_layer(%lld) failed: %s", (long long)i, quarot_result_string(res));
            break;
        }
        res = quarot__validate_layer(p, &cfg, i);
        if (res != QUAROT_OK) {
            char detail[sizeof model->error];
            memcpy(detail, model->error, sizeof detail);
            quarot__model_error(model, "layer %lld: %s", (long long)i, detail);
        }
        if (model->release_layer) {
            quarot_result rr = model->release_layer(model->user_data, i, 0);
            if (res == QUAROT_OK && rr != QUAROT_OK) {
                quarot__model_error(model, "release_layer(%lld) failed: %s", (long long)i, quarot_result_string(rr));
                res = rr;
            }
        }
    }
    if (res != QUAROT_OK) { quarot_processor_free(p); return res; }
    p->stage = 1;
    return QUAROT_OK;
}

// >>processor_run
// Executing the plan: fusions (W <- W diag(g), b <- b + W beta), mean baking, rotate commands (in
// double, written back once in the tensor's dtype), each layer between acquire and release, hook
// registration, and the exactly-once check of post_run.

// A command on a fused reader's row range (c->rows > 0): w (a 2-D weight, checked to have c->rows_of
// rows) and b (its bias) become views of rows [row0, row0 + rows); either may be NULL.
static quarot_result quarot__command_rows(quarot_processor* p, const quarot_command* c, quarot_tensor* w,
                                          quarot_tensor* b) {
    quarot_tensor* t = w ? w : b;
    const int64_t n = w ? w->ne[1] : (b ? b->ne[0] : 0);
    if (c->rows <= 0 || !t) return QUAROT_OK;
    if ((w ? w->ne[2] : b->ne[1]) != 1 || t->ne[2] != 1 || t->ne[3] != 1 || (c->rows_of > 0 && n != c->rows_of) ||
        c->row0 + c->rows > n) {
        quarot__model_error(p->model, "tensor '%s' has %lld rows, a fused projection of %lld rows was expected from "
                            "the config (rows %lld-%lld are one part of it)", w ? c->weight : c->bias, (long long)n,
                            (long long)(c->rows_of > 0 ? c->rows_of : c->row0 + c->rows), (long long)c->row0,
                            (long long)(c->row0 + c->rows - 1));
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    t->data = (char*)t->data + (size_t)c->row0 * (w ? w->nb[1] : b->nb[0]);
    if (w) w->ne[1] = c->rows;
    else b->ne[0] = c->rows;
    return QUAROT_OK;
}

// W <- W*diag(g) on F32 rows without a bias to fuse, on the env's parallel hook (64 rows a task).
// The product of two floats is exact in double, so the float product (one rounding) gives the bits
// of the double path below (widen, multiply, round once to f32).
typedef struct quarot__fuse_job {
    quarot_tensor* w;
    const float* g;
    int64_t L, rows;
} quarot__fuse_job;

static void quarot__fuse_task(void* arg, int64_t task) {
    const quarot__fuse_job* j = (const quarot__fuse_job*)arg;
    int64_t r = task * 64, end = r + 64 < j->rows ? r + 64 : j->rows, i, k;
    float xb[16];
    for (; r < end; ++r) {   // a 2-D weight (validated): row r at data + r * nb[1]
        float* x = (float*)(void*)((char*)j->w->data + (size_t)r * j->w->nb[1]);
        for (i = 0; i + 16 <= j->L; i += 16) {   // fixed-count blocks through a local: vectorized at -O2
            memcpy(xb, x + i, sizeof xb);
            for (k = 0; k < 16; ++k) xb[k] *= j->g[i + k];
            memcpy(x + i, xb, sizeof xb);
        }
        for (; i < j->L; ++i) x[i] *= j->g[i];
    }
}

// W <- W*diag(g) for an F32 2-D weight of L columns, on env's parallel hook (64 rows a task).
static void quarot__fuse_f32(const quarot_env* env, quarot_tensor* w, const float* g, int64_t L) {
    quarot__fuse_job fj;
    fj.w = w;
    fj.g = g;
    fj.L = L;
    fj.rows = quarot_tensor_nrows(w);
    quarot_env_parallel_for(env, quarot__fuse_task, &fj, (fj.rows + 63) / 64);
}

// Folding a fusion into a rotation. A reader's first command in its layer is usually W <- W*Q along
// its input axis, in single precision (quarot_command.f32) with a Hadamard Q = D*H/sqrt(n): the
// kernels multiply each row by the signs D first, x_j*d_j rounded once. Scaling by g first (the f32
// fusion above: x_j*g_j rounded once) and then by d_j = +-1 gives round(x_j*g_j)*d_j; multiplying once
// by d_j*g_j (exact) gives round(x_j*(d_j*g_j)), the same bits (rounding to nearest is symmetric, and
// the signs of zeros agree). So such a weight is not scaled by the fusion: its command runs with
// the signs d_j*g_j, which saves a read and a write of the weight. Fusions with a bias (LayerNorm),
// double-precision weights or norms, commands in double, across heads (inner > 1) or per slice
// (outer > 1), other rotations, and any weight whose first command in the layer is not such a one
// keep the separate scaling. The scope's pending scalings: fold[i] = the f32 gains command i applies
// (NULL: none), freed at the end of the scope.

// The index of the first command of `layer` on `weight` when the fusion's f32 scaling of w (L
// columns) can ride on it (see above), else -1.
static int64_t quarot__fold_target(const quarot_processor* p, int64_t layer, const char* weight, const quarot_tensor* w,
                                   int64_t L) {
    int64_t i;
    for (i = 0; i < p->n_commands; ++i) {
        const quarot_command* c = &p->commands[i];
        const quarot_rotation* rot;
        if (c->layer != layer || strcmp(c->weight, weight) != 0) continue;
        rot = &p->rot[c->rotation];
        if (c->f32 && w->dtype == QUAROT_DTYPE_F32 && rot->kind == QUAROT_ROTATION_HADAMARD &&
            c->side == QUAROT_SIDE_INPUT && !c->embedding && c->outer == 1 && c->inner == 1 && rot->n == L &&
            w->ne[0] == L)
            return i;
        return -1;   // the first command on it is another kind
    }
    return -1;
}

// W <- W*diag(g), b <- b + W_old*beta for each linear of a fusion; then (finish) g <- 1, beta <- 0.
// fold (not NULL, [p->n_commands]): the f32 scalings that can ride on a command are left to it (fold[i]).
// One linear k of fusion f: W <- W*diag(g), b <- b + W_old*beta (g, beta: the norm's, read before it
// was reset; gdt: the norm's dtype). fold (not NULL): where the scaling can ride on the weight's first
// command (quarot__fold_target), fold[that command] gets the f32 gains instead.
static quarot_result quarot__fuse_linear(quarot_processor* p, const quarot_plan_fusion* f, int64_t k, const double* g,
                                         const double* beta, int64_t L, quarot_dtype gdt, float** fold) {
    const quarot_env* env = &p->model->env;
    const quarot_plan_linear* l = &p->plan.linears[k];
    quarot_tensor w, bias;
    double *row = NULL, *badd = NULL;
    int64_t out, r, j;
    quarot_result res;
    if ((res = quarot__get(p, l->weight, &w)) != QUAROT_OK) return res;
    out = quarot_tensor_nrows(&w);
    if (!beta && w.dtype == QUAROT_DTYPE_F32 && gdt != QUAROT_DTYPE_F64 && w.ne[0] == L && w.ne[2] == 1 &&
        w.ne[3] == 1 && w.nb[0] == sizeof(float)) {
        float* g32 = (float*)quarot_env_alloc(env, (size_t)L * sizeof(float));
        if (!g32) return QUAROT_ERR_OUT_OF_MEMORY;
        for (j = 0; j < L; ++j) g32[j] = (float)g[j];   // exact: g came from f32 / f16 / bf16
        if (fold) {
            const int64_t ci = quarot__fold_target(p, f->layer, l->weight, &w, L);
            if (ci >= 0) {   // the command scales it
                fold[ci] = g32;
                p->fused_into_commands++;
                return QUAROT_OK;
            }
        }
        quarot__fuse_f32(env, &w, g32, L);
        quarot_env_free(env, g32);
        return QUAROT_OK;
    }
    row = (double*)quarot_env_alloc(env, (size_t)L * sizeof(double));
    if (!row) return QUAROT_ERR_OUT_OF_MEMORY;
    if (beta) {
        badd = (double*)quarot_env_alloc(env, (size_t)out * sizeof(double));
        if (!badd) { res = QUAROT_ERR_OUT_OF_MEMORY; goto done; }
    }
    for (r = 0; r < out; ++r) {
        double acc = 0.0;
        quarot_tensor_get_row_f64(&w, r, row);
        if (beta) for (j = 0; j < L; ++j) acc += row[j] * beta[j];
        for (j = 0; j < L; ++j) row[j] *= g[j];
        quarot_tensor_set_row_f64(&w, r, row);
        if (badd) badd[r] = acc;
    }
    if (beta) {
        double* bv = (double*)quarot_env_alloc(env, (size_t)out * sizeof(double));
        if (!bv) { res = QUAROT_ERR_OUT_OF_MEMORY; goto done; }
        if (quarot__exists(p, l->bias)) {
            res = quarot__get(p, l->bias, &bias);
        } else {
            int64_t ne1[1];
            ne1[0] = out;
            res = p->model->create_tensor(p->model->user_data, l->bias, w.dtype, 1, ne1, &bias);
            if (res == QUAROT_OK) {   // created zero-filled; make sure of it
                for (r = 0; r < out; ++r) bv[r] = 0.0;
                quarot_tensor_set_row_f64(&bias, 0, bv);
            } else {
                quarot__model_error(p->model, "create_tensor('%s') failed: %s", l->bias, quarot_result_string(res));
            }
        }
        if (res == QUAROT_OK) {
            quarot_tensor_get_row_f64(&bias, 0, bv);
            for (r = 0; r < out; ++r) bv[r] += badd[r];
            quarot_tensor_set_row_f64(&bias, 0, bv);
        }
        quarot_env_free(env, bv);
    }
done:
    quarot_env_free(env, row);
    quarot_env_free(env, badd);
    return res;
}

// A fusion's norm read into g (and beta) in double, [L]; *gt / *bt its tensors (bt: with a bias).
static quarot_result quarot__fusion_gains(quarot_processor* p, const quarot_plan_fusion* f, quarot_tensor* gt,
                                          quarot_tensor* bt, double** g, double** beta, int64_t* L) {
    const quarot_env* env = &p->model->env;
    quarot_result res;
    *g = NULL;
    *beta = NULL;
    if ((res = quarot__get(p, f->norm_weight, gt)) != QUAROT_OK) return res;
    *L = gt->ne[0];
    *g = (double*)quarot_env_alloc(env, (size_t)*L * sizeof(double));
    if (!*g) return QUAROT_ERR_OUT_OF_MEMORY;
    quarot_tensor_get_row_f64(gt, 0, *g);
    if (f->norm_bias[0]) {
        if ((res = quarot__get(p, f->norm_bias, bt)) != QUAROT_OK) return res;
        *beta = (double*)quarot_env_alloc(env, (size_t)*L * sizeof(double));
        if (!*beta) return QUAROT_ERR_OUT_OF_MEMORY;
        quarot_tensor_get_row_f64(bt, 0, *beta);
    }
    return QUAROT_OK;
}

// The norm of a fusion reset to the identity: g <- 1, beta <- 0 (g, beta are overwritten).
static void quarot__fusion_reset(quarot_tensor* gt, quarot_tensor* bt, double* g, double* beta, int64_t L) {
    int64_t j;
    for (j = 0; j < L; ++j) g[j] = 1.0;
    quarot_tensor_set_row_f64(gt, 0, g);
    if (beta) {
        for (j = 0; j < L; ++j) beta[j] = 0.0;
        quarot_tensor_set_row_f64(bt, 0, beta);
    }
}

// W <- W*diag(g) and b <- b + W_old*beta for each linear of a fusion; then (finish) g <- 1, beta <- 0.
// fold (not NULL, [p->n_commands]): the f32 scalings that can ride on a command are left to it (fold[i]).
static quarot_result quarot__run_fusion(quarot_processor* p, const quarot_plan_fusion* f, int finish, float** fold) {
    const quarot_env* env = &p->model->env;
    quarot_tensor gt, bt;
    double *g = NULL, *beta = NULL;
    int64_t L = 0, k;
    quarot_result res = quarot__fusion_gains(p, f, &gt, &bt, &g, &beta, &L);
    for (k = f->first_linear; res == QUAROT_OK && k < f->first_linear + f->n_linears; ++k)
        res = quarot__fuse_linear(p, f, k, g, beta, L, gt.dtype, fold);
    if (res == QUAROT_OK && finish) quarot__fusion_reset(&gt, &bt, g, beta, L);   // else the next window reads g again
    quarot_env_free(env, g);
    quarot_env_free(env, beta);
    return res;
}

// Mean baking: embedding rows centred; a writer's columns centred over its outputs, bias centred.
static quarot_result quarot__run_bake(quarot_processor* p, const quarot_plan_bake* bk) {
    const quarot_env* env = &p->model->env;
    quarot_tensor w, b;
    int64_t rows, cols, r, j;
    double *row, *mean;
    quarot_result res;
    if ((res = quarot__get(p, bk->weight, &w)) != QUAROT_OK) return res;
    rows = quarot_tensor_nrows(&w);
    cols = w.ne[0];
    row = (double*)quarot_env_alloc(env, (size_t)cols * sizeof(double));
    mean = (double*)quarot_env_alloc(env, (size_t)(cols > rows ? cols : rows) * sizeof(double));
    if (!row || !mean) { quarot_env_free(env, row); quarot_env_free(env, mean); return QUAROT_ERR_OUT_OF_MEMORY; }
    if (bk->embedding) {
        for (r = 0; r < rows; ++r) {
            double m = 0.0;
            quarot_tensor_get_row_f64(&w, r, row);
            for (j = 0; j < cols; ++j) m += row[j];
            m /= (double)cols;
            for (j = 0; j < cols; ++j) row[j] -= m;
            quarot_tensor_set_row_f64(&w, r, row);
        }
    } else {
        for (j = 0; j < cols; ++j) mean[j] = 0.0;
        for (r = 0; r < rows; ++r) {
            quarot_tensor_get_row_f64(&w, r, row);
            for (j = 0; j < cols; ++j) mean[j] += row[j];
        }
        for (j = 0; j < cols; ++j) mean[j] /= (double)rows;
        for (r = 0; r < rows; ++r) {
            quarot_tensor_get_row_f64(&w, r, row);
            for (j = 0; j < cols; ++j) row[j] -= mean[j];
            quarot_tensor_set_row_f64(&w, r, row);
        }
        if (quarot__exists(p, bk->bias) && quarot__get(p, bk->bias, &b) == QUAROT_OK) {
            double m = 0.0;
            quarot_tensor_get_row_f64(&b, 0, mean);
            for (r = 0; r < rows; ++r) m += mean[r];
            m /= (double)rows;
            for (r = 0; r < rows; ++r) mean[r] -= m;
            quarot_tensor_set_row_f64(&b, 0, mean);
        }
    }
    quarot_env_free(env, row);
    quarot_env_free(env, mean);
    return QUAROT_OK;
}

// count: 0 in a row window that is not the last (the command counts as run once, in the last).
// g (not NULL): a fusion's f32 gains folded into this command (quarot__fold_target); when on_command asks
// for anything but one plain run, the weight is scaled first, as the fusion would have.
static quarot_result quarot__run_command(quarot_processor* p, quarot_command* c, int count, const float* g) {
    const quarot_env* env = &p->model->env;
    quarot_tensor w, b;
    quarot_rotation folded;
    float* sg = NULL;
    double* sg64 = NULL;
    int has_bias, times = 1, act = 0, k;
    quarot_result res;
    if (p->desc.on_command) act = p->desc.on_command(p->desc.user_data, c);
    if ((res = quarot__get(p, c->weight, &w)) != QUAROT_OK) return res;
    if ((res = quarot__command_rows(p, c, &w, NULL)) != QUAROT_OK) return res;
    folded =
        c->rotation == QUAROT_ROT_R2 && p->r2_layers && c->layer >= 0 ? p->r2_layers[c->layer] : p->rot[c->rotation];
    if (g && act == 0) {   // one run with the signs d_j * g_j (exact)
        const int64_t L = folded.n;
        int64_t j;
        sg = (float*)quarot_env_alloc(env, (size_t)L * sizeof(float));
        sg64 = (double*)quarot_env_alloc(env, (size_t)L * sizeof(double));
        if (!sg || !sg64) { quarot_env_free(env, sg); quarot_env_free(env, sg64); return QUAROT_ERR_OUT_OF_MEMORY; }
        for (j = 0; j < L; ++j) {
            sg[j] = folded.signs ? folded.signs[j] * g[j] : g[j];
            sg64[j] = (double)sg[j];
        }
        folded.signs = sg;
        folded.signs64 = sg64;
    } else if (g) {   // skipped or run twice: the scaling first, as without folding
        quarot__fuse_f32(env, &w, g, w.ne[0]);
    }
    if (act == 1) return QUAROT_OK;
    if (act == 2) times = 2;
    has_bias = c->bias[0] && quarot__exists(p, c->bias);
    if (has_bias && (res = quarot__get(p, c->bias, &b)) != QUAROT_OK) goto done;
    if (has_bias && (res = quarot__command_rows(p, c, NULL, &b)) != QUAROT_OK) goto done;
    for (k = 0; k < times; ++k) {
        const int64_t ns = quarot__n_slices(&w);
        int64_t e;
        for (e = 1; e < ns && res == QUAROT_OK; ++e) {   // 3-D experts: one expert at a time (expert 0 below)
            quarot_tensor se;
            quarot__slice(&w, e, &se);
            res = quarot_command_apply(c, k == 0 ? &folded : &p->rot[c->rotation], &se, NULL, env);
        }
        if (res == QUAROT_OK && ns > 1) {
            quarot_tensor s0;
            quarot__slice(&w, 0, &s0);
            res = quarot_command_apply(c, k == 0 ? &folded : &p->rot[c->rotation], &s0, NULL, env);
        } else if (res == QUAROT_OK) {
            res = quarot_command_apply(
                c, k == 0 || (c->rotation == QUAROT_ROT_R2 && p->r2_layers) ? &folded : &p->rot[c->rotation], &w,
                has_bias ? &b : NULL, env);
        }
        if (res != QUAROT_OK) {
            quarot__model_error(p->model, "rotating '%s': %s", c->weight, quarot_result_string(res));
            goto done;
        }
        c->runs += count;
    }
done:
    quarot_env_free(env, sg);
    quarot_env_free(env, sg64);
    return res;
}

// A decoder layer tensor by tensor (>>processor_bytensor).
static quarot_result quarot__run_scope_bytensor(quarot_processor* p, int64_t layer);


// Everything planned for one layer (or -1 = the globals). finish = 0: a row window of the globals
// that is not the last (norms kept, commands not counted).
// A decoder layer without bakes folds its readers' f32 scalings into their first commands
// (quarot__fold_target); the globals (row windows, the embedding) and layers with bakes do not.
static quarot_result quarot__run_scope(quarot_processor* p, int64_t layer, int finish) {
    const quarot_model_config* cfg = &p->model->config;
    const quarot_env* env = &p->model->env;
    float** fold = NULL;   // [n_commands] gains per command, see quarot__run_fusion
    int64_t i;
    int folding = layer >= 0 && p->n_commands > 0 && !p->desc.separate_fusions;
    quarot_result res = QUAROT_OK;
    for (i = 0; i < p->plan.n_bakes; ++i)
        if (p->plan.bakes[i].layer == layer) folding = 0;
    if (folding && p->model->tensor_done) return quarot__run_scope_bytensor(p, layer);
    if (folding) {
        fold = (float**)quarot_env_alloc(env, (size_t)p->n_commands * sizeof(float*));
        if (!fold) return QUAROT_ERR_OUT_OF_MEMORY;
        for (i = 0; i < p->n_commands; ++i) fold[i] = NULL;
    }
    for (i = 0; i < p->plan.n_fusions; ++i) {
        const quarot_plan_fusion* f = &p->plan.fusions[i];
        if (f->layer != layer) continue;
        if (layer < 0 && cfg->tied_embeddings && !p->untie && strcmp(f->norm_weight, p->plan.final_norm_weight) == 0)
            continue;
        if ((res = quarot__run_fusion(p, f, finish, fold)) != QUAROT_OK) goto done;
    }
    for (i = 0; i < p->plan.n_bakes; ++i)
        if (p->plan.bakes[i].layer == layer && (res = quarot__run_bake(p, &p->plan.bakes[i])) != QUAROT_OK) goto done;
    for (i = 0; i < p->n_commands; ++i)
        if (p->commands[i].layer == layer && (res = quarot__run_command(p, &p->commands[i], finish,
                                                                        fold ? fold[i] : NULL)) != QUAROT_OK)
            goto done;
done:
    for (i = 0; fold && i < p->n_commands; ++i) quarot_env_free(env, fold[i]);
    quarot_env_free(env, fold);
    return res;
}

// The global scope, whole (first = last = 1, rows = -1) or on one row window of the embedding and
// lm_head (the binding gives those rows; create_tensor is asked in the first window only).
static quarot_result quarot__pre_run_part(quarot_processor* p, int first, int last, int64_t rows) {
    quarot_model* m = p->model;
    quarot_result res;
    if (first && p->desc.progress) p->desc.progress(p->desc.user_data, "pre_run", -1, m->config.n_layers);
    if (p->untie) {   // lm_head <- a copy of the embedding, before anything changes it
        quarot_tensor e, h;
        int64_t ne[2], r;
        double* row;
        if ((res = quarot__get(p, p->plan.embed, &e)) != QUAROT_OK) return res;
        ne[0] = e.ne[0];
        ne[1] = rows < 0 ? e.ne[1] : p->rows_total;
        if (first) {
            res = m->create_tensor(m->user_data, p->plan.lm_head, e.dtype, 2, ne, &h);
            if (res != QUAROT_OK) {
                quarot__model_error(m, "create_tensor('%s') failed: %s", p->plan.lm_head, quarot_result_string(res));
                return res;
            }
        } else if ((res = quarot__get(p, p->plan.lm_head, &h)) != QUAROT_OK) {
            return res;
        }
        // (the others: pre_run_rows)
        if (rows >= 0 && first && (h.ne[0] != e.ne[0] || h.ne[1] != rows || h.ne[2] != 1 || h.ne[3] != 1)) {
            quarot__model_error(m, "row window of %lld rows: create_tensor gave '%s' {%lld, %lld}", (long long)rows,
                                p->plan.lm_head, (long long)h.ne[0], (long long)h.ne[1]);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
        row = (double*)quarot_env_alloc(&m->env, (size_t)ne[0] * sizeof(double));
        if (!row) return QUAROT_ERR_OUT_OF_MEMORY;
        for (r = 0; r < e.ne[1]; ++r) {
            quarot_tensor_get_row_f64(&e, r, row);
            quarot_tensor_set_row_f64(&h, r, row);
        }
        quarot_env_free(&m->env, row);
        if (last) m->config.tied_embeddings = 0;
    }
    res = quarot__run_scope(p, -1, last);
    if (res != QUAROT_OK) return res;
    if (last) {
        p->stage = 2;
        p->next_layer = 0;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_processor_pre_run(quarot_processor* p) {
    if (!p || !p->model) return QUAROT_ERR_INVALID_ARGUMENT;
    if (p->stage != 1 || p->rows_next != 0) return QUAROT_ERR_STATE;
    return quarot__pre_run_part(p, 1, 1, -1);
}

QUAROT_API quarot_result quarot_processor_rows_probe(quarot_processor* p, int64_t* rows) {
    quarot_model* m;
    quarot_tensor e;
    int64_t i, k;
    if (!p || !p->model || !rows) return QUAROT_ERR_INVALID_ARGUMENT;
    if (p->stage != 1 || p->rows_next != 0) return QUAROT_ERR_STATE;
    m = p->model;
    for (i = 0; i < p->plan.n_bakes; ++i)
        if (p->plan.bakes[i].layer < 0) {
            quarot__model_error(m, "row windows: the global scope bakes means into '%s' (a LayerNorm family)",
                                p->plan.bakes[i].weight);
            return QUAROT_ERR_UNSUPPORTED;
        }
    for (i = 0; i < p->plan.n_fusions; ++i) {
        const quarot_plan_fusion* f = &p->plan.fusions[i];
        if (f->layer >= 0) continue;
        if (f->norm_bias[0]) {
            quarot__model_error(m, "row windows: the global norm '%s' has a bias ('%s') to fuse", f->norm_weight,
                                f->norm_bias);
            return QUAROT_ERR_UNSUPPORTED;
        }
        for (k = f->first_linear; k < f->first_linear + f->n_linears; ++k)
            if (strcmp(p->plan.linears[k].weight, p->plan.lm_head) != 0) {
                quarot__model_error(m, "row windows: the global norm '%s' feeds '%s', not only lm_head", f->norm_weight,
                                    p->plan.linears[k].weight);
                return QUAROT_ERR_UNSUPPORTED;
            }
    }
    for (i = 0; i < p->n_commands; ++i) {
        const quarot_command* c = &p->commands[i];
        if (c->layer >= 0) continue;
        if ((strcmp(c->weight, p->plan.embed) != 0 && strcmp(c->weight, p->plan.lm_head) != 0) ||
            !(c->side == QUAROT_SIDE_INPUT || c->embedding) || (c->bias[0] && quarot__exists(p, c->bias))) {
            quarot__model_error(m, "row windows: the global command on '%s' is not along the rows of the embedding or "
                                   "lm_head", c->weight);
            return QUAROT_ERR_UNSUPPORTED;
        }
    }
    if (quarot__get(p, p->plan.embed, &e) != QUAROT_OK) return QUAROT_ERR_NOT_FOUND;
    p->rows_total = e.ne[1];   // {hidden, vocab}: checked by init
    *rows = p->rows_total;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_processor_pre_run_rows(quarot_processor* p, int64_t row0, int64_t n) {
    quarot_result res;
    int k;
    if (!p || !p->model) return QUAROT_ERR_INVALID_ARGUMENT;
    if (p->stage != 1 || p->rows_total <= 0 || row0 != p->rows_next) return QUAROT_ERR_STATE;
    if (n < 1 || n > p->rows_total - row0) return QUAROT_ERR_INVALID_ARGUMENT;
    for (k = 0; k < 2; ++k) {   // the binding's windows are {hidden, n} (lm_head: unless tied, or created now)
        const char* name = k == 0 ? p->plan.embed : p->plan.lm_head;
        quarot_tensor t;
        if (k == 1 && (p->untie ? row0 == 0 : !quarot__exists(p, name))) continue;
        if ((res = quarot__get(p, name, &t)) != QUAROT_OK) return res;
        if (t.ne[1] != n || t.ne[2] != 1 || t.ne[3] != 1) {
            quarot__model_error(p->model, "row window [%lld, %lld): the binding gave '%s' with %lld rows",
                                (long long)row0, (long long)(row0 + n), name, (long long)quarot_tensor_nrows(&t));
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    }
    p->rows_next = -1;   // unusable unless this window succeeds
    res = quarot__pre_run_part(p, row0 == 0, row0 + n == p->rows_total, n);
    if (res == QUAROT_OK) p->rows_next = row0 + n;
    return res;
}

// Register the online hooks of one layer (matching the offline halves its commands applied).
static quarot_result quarot__register_hooks(quarot_processor* p, int64_t layer) {
    const quarot_model_config* c = &p->model->config;
    int64_t hd = c->head_dim ? c->head_dim : c->hidden / c->n_heads, kv = c->n_kv_heads ? c->n_kv_heads : c->n_heads;
    quarot_online_list* out = p->desc.online_out;
    quarot_result res = QUAROT_OK;
    if (p->desc.online) {
        int64_t g = p->rot[QUAROT_ROT_HEADS].n, n4 = p->rot[QUAROT_ROT_R4].n;
        res = quarot_online_list_add(out, layer, QUAROT_SITE_O_INPUT, c->n_heads * hd, c->n_heads / g, g, hd, NULL);
        if (res == QUAROT_OK && quarot__down_online(p, layer) && p->plan.layers[layer].down_proj[0])
            res = quarot_online_list_add(out, layer, QUAROT_SITE_DOWN_INPUT, c->intermediate, c->intermediate / n4, n4,
                                         1, NULL);
        if (res == QUAROT_OK && quarot__down_online(p, layer)) res = quarot__moe_hooks(p, layer);
    }
    if (res == QUAROT_OK && p->desc.r3) {
        int64_t b = p->r3.n;
        res = quarot_online_list_add(out, layer, QUAROT_SITE_Q_ROPE, c->n_heads * hd, c->n_heads * hd / b, b, 1, NULL);
        if (res == QUAROT_OK)
            res = quarot_online_list_add(out, layer, QUAROT_SITE_K_ROPE, kv * hd, kv * hd / b, b, 1, NULL);
    }
    if (res != QUAROT_OK)
        quarot__model_error(p->model, "layer %lld: registering online hooks: %s", (long long)layer,
                            quarot_result_string(res));
    return res;
}

QUAROT_API quarot_result quarot_processor_run_layer(quarot_processor* p, int64_t layer) {
    quarot_model* m;
    quarot_result res, rr;
    if (!p || !p->model) return QUAROT_ERR_INVALID_ARGUMENT;
    if (p->stage != 2 || layer != p->next_layer || layer >= p->model->config.n_layers) return QUAROT_ERR_STATE;
    m = p->model;
    if (p->desc.progress) p->desc.progress(p->desc.user_data, "layer", layer, m->config.n_layers);
    if (m->acquire_layer && (res = m->acquire_layer(m->user_data, layer)) != QUAROT_OK) {
        quarot__model_error(m, "acquire_layer(%lld) failed: %s", (long long)layer, quarot_result_string(res));
        return res;
    }
    res = quarot__run_scope(p, layer, 1);
    if (res == QUAROT_OK) res = quarot__register_hooks(p, layer);
    if (m->release_layer) {
        rr = m->release_layer(m->user_data, layer, 1);
        if (res == QUAROT_OK && rr != QUAROT_OK) {
            quarot__model_error(m, "release_layer(%lld) failed: %s", (long long)layer, quarot_result_string(rr));
            res = rr;
        }
    }
    if (res == QUAROT_OK) p->next_layer++;
    return res;
}

QUAROT_API quarot_result quarot_processor_post_run(quarot_processor* p) {
    int64_t i;
    if (!p || !p->model) return QUAROT_ERR_INVALID_ARGUMENT;
    if (p->stage != 2 || p->next_layer != p->model->config.n_layers) return QUAROT_ERR_STATE;
    if (p->desc.progress) p->desc.progress(p->desc.user_data, "post_run", p->next_layer, p->model->config.n_layers);
    for (i = 0; i < p->n_commands; ++i)
        if (p->commands[i].runs != 1) {
            quarot__model_error(p->model, "command on '%s' (%s side, rotation %d) ran %d times, expected exactly once",
                                p->commands[i].weight, p->commands[i].side == QUAROT_SIDE_INPUT ? "input" : "output",
                                (int)p->commands[i].rotation, p->commands[i].runs);
            return QUAROT_ERR_INTERNAL;
        }
    if (p->plan.n_bakes > 0) p->model->config.norm = QUAROT_NORM_RMS;   // centred stream: LayerNorm == RMSNorm
    p->stage = 3;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_rotate_model(quarot_model* model, const quarot_rotate_desc* desc) {
    quarot_processor p;
    quarot_result res;
    int64_t i;
    res = quarot_processor_init(&p, model, desc);
    if (res != QUAROT_OK) return res;
    res = quarot_processor_pre_run(&p);
    for (i = 0; i < model->config.n_layers && res == QUAROT_OK; ++i) res = quarot_processor_run_layer(&p, i);
    if (res == QUAROT_OK) res = quarot_processor_post_run(&p);
    quarot_processor_free(&p);
    return res;
}

// >>processor_bytensor

// A decoder layer tensor by tensor (quarot_model.tensor_done set, a layer without bakes): the norms
// are read and reset first, each reader's scaling is applied (or folded) right before the first
// command on it, every command on one weight runs together in plan order, then tensor_done names
// the weight and its bias. The same arithmetic on every tensor as quarot__run_scope's order (a
// command changes only its own weight and bias), so the same bits; what differs is that the model
// needs no more than one weight of the layer in its working precision at a time.
static quarot_result quarot__run_scope_bytensor(quarot_processor* p, int64_t layer) {
    const quarot_env* env = &p->model->env;
    quarot_model* m = p->model;
    const int64_t n = p->n_commands;
    float** fold = (float**)quarot_env_alloc(env, (size_t)n * sizeof(float*));
    int64_t* first = (int64_t*)quarot_env_alloc(env, (size_t)(p->plan.n_linears + 1) * sizeof(int64_t));
    unsigned char* ran = (unsigned char*)quarot_env_alloc(env, (size_t)n + 1);
    double** gs = (double**)quarot_env_alloc(env, (size_t)(2 * p->plan.n_fusions + 1) * sizeof(double*));
    quarot_dtype* gdt = (quarot_dtype*)quarot_env_alloc(env, (size_t)(p->plan.n_fusions + 1) * sizeof(quarot_dtype));
    int64_t* gl = (int64_t*)quarot_env_alloc(env, (size_t)(p->plan.n_fusions + 1) * sizeof(int64_t));
    int64_t i, j, k, fi;
    quarot_result res = QUAROT_OK;
    if (!fold || !first || !ran || !gs || !gdt || !gl) { res = QUAROT_ERR_OUT_OF_MEMORY; goto done; }
    for (i = 0; i < n; ++i) { fold[i] = NULL; ran[i] = 0; }
    for (fi = 0; fi < 2 * p->plan.n_fusions; ++fi) gs[fi] = NULL;
    // each fusion's gains, then its norm reset; a reader no command of the layer touches is scaled now
    for (fi = 0; fi < p->plan.n_fusions; ++fi) {
        const quarot_plan_fusion* f = &p->plan.fusions[fi];
        quarot_tensor gt, bt;
        if (f->layer != layer) continue;
        if ((res = quarot__fusion_gains(p, f, &gt, &bt, &gs[2 * fi], &gs[2 * fi + 1], &gl[fi])) != QUAROT_OK) goto done;
        gdt[fi] = gt.dtype;
        for (k = f->first_linear; k < f->first_linear + f->n_linears; ++k) {
            first[k] = -1;
            for (i = 0; i < n && first[k] < 0; ++i)
                if (p->commands[i].layer == layer && strcmp(p->commands[i].weight, p->plan.linears[k].weight) == 0)
                    first[k] = i;
            if (first[k] < 0 &&
                (res = quarot__fuse_linear(p, f, k, gs[2 * fi], gs[2 * fi + 1], gl[fi], gdt[fi], fold)) != QUAROT_OK)
                goto done;
        }
        {   // the reset overwrites g and beta: keep the gains the deferred readers need
            double* keep_g = (double*)quarot_env_alloc(env, (size_t)gl[fi] * sizeof(double));
            double* keep_b = gs[2 * fi + 1] ? (double*)quarot_env_alloc(env, (size_t)gl[fi] * sizeof(double)) : NULL;
            if (!keep_g || (gs[2 * fi + 1] && !keep_b)) {
                quarot_env_free(env, keep_g);
                quarot_env_free(env, keep_b);
                res = QUAROT_ERR_OUT_OF_MEMORY;
                goto done;
            }
            memcpy(keep_g, gs[2 * fi], (size_t)gl[fi] * sizeof(double));
            if (keep_b) memcpy(keep_b, gs[2 * fi + 1], (size_t)gl[fi] * sizeof(double));
            quarot__fusion_reset(&gt, &bt, gs[2 * fi], gs[2 * fi + 1], gl[fi]);
            quarot_env_free(env, gs[2 * fi]);
            quarot_env_free(env, gs[2 * fi + 1]);
            gs[2 * fi] = keep_g;
            gs[2 * fi + 1] = keep_b;
        }
    }
    for (i = 0; i < n; ++i) {
        const char* wname;
        if (p->commands[i].layer != layer || ran[i]) continue;
        wname = p->commands[i].weight;
        for (fi = 0; fi < p->plan.n_fusions; ++fi) {   // the scaling of the reader whose first command this is
            const quarot_plan_fusion* f = &p->plan.fusions[fi];
            if (f->layer != layer) continue;
            for (k = f->first_linear; k < f->first_linear + f->n_linears; ++k) {
                if (first[k] != i) continue;
                res = quarot__fuse_linear(p, f, k, gs[2 * fi], gs[2 * fi + 1], gl[fi], gdt[fi], fold);
                if (res != QUAROT_OK) goto done;
            }
        }
        for (j = i; j < n; ++j) {
            if (p->commands[j].layer != layer || ran[j] || strcmp(p->commands[j].weight, wname) != 0) continue;
            if ((res = quarot__run_command(p, &p->commands[j], 1, fold[j])) != QUAROT_OK) goto done;
            ran[j] = 1;
        }
        for (j = i; j < n; ++j) {   // the biases of those commands, then the weight
            const quarot_command* c = &p->commands[j];
            if (c->layer != layer || !c->bias[0] || strcmp(c->weight, wname) != 0 || !quarot__exists(p, c->bias))
                continue;
            if ((res = m->tensor_done(m->user_data, c->bias)) != QUAROT_OK) break;
        }
        if (res == QUAROT_OK) res = m->tensor_done(m->user_data, wname);
        if (res != QUAROT_OK) {
            quarot__model_error(m, "tensor_done('%s') failed: %s", wname, quarot_result_string(res));
            goto done;
        }
    }
done:
    for (i = 0; fold && i < n; ++i) quarot_env_free(env, fold[i]);
    for (fi = 0; gs && fi < 2 * p->plan.n_fusions; ++fi) quarot_env_free(env, gs[fi]);
    quarot_env_free(env, fold);
    quarot_env_free(env, first);
    quarot_env_free(env, ran);
    quarot_env_free(env, gs);
    quarot_env_free(env, gdt);
    quarot_env_free(env, gl);
    return res;
}

// >>processor_moe
// The processor's steps for MoE layers, driven by the plan's blocks: the online R4 rotations of
// expert_intermediate and shared_intermediate, one offline R4 command per expert's down_proj (one
// for a 3-D tensor, run expert by expert), one hook per layer and kind, and the 3-D views.

// Experts of a 3-D weight [n_experts][out][in] (ne = {in, out, n_experts}); 1 for a 2-D one, 0 for higher ranks.
static int64_t quarot__n_slices(const quarot_tensor* t) { return t->ne[3] == 1 ? t->ne[2] : 0; }

// Expert e of a 3-D weight as a 2-D view (the same storage).
static void quarot__slice(const quarot_tensor* t, int64_t e, quarot_tensor* out) {
    *out = *t;
    out->data = (char*)t->data + (size_t)e * t->nb[2];
    out->ne[2] = 1;
}

static int64_t quarot__block_size_of(const quarot_processor* p, quarot_block_kind kind) {
    int64_t i;
    for (i = 0; i < p->plan.n_blocks; ++i)
        if (p->plan.blocks[i].kind == kind) return p->plan.blocks[i].intermediate;
    return 0;
}

// Shapes of an MoE layer's blocks (layer -1: the config): the router has n_experts rows, the
// shared-expert gate one; every expert's gate / up is [intermediate][hidden], its down
// [hidden][intermediate], a 3-D tensor holds n_experts of them.
static quarot_result quarot__moe_validate(quarot_processor* p, const quarot_model_config* cfg, int64_t layer) {
    quarot_tensor t;
    int64_t i, k;
    quarot_result res;
    if (layer < 0) {
        if (cfg->n_experts > 0 && (cfg->n_experts_used < 1 || cfg->n_experts_used > cfg->n_experts)) {
            quarot__model_error(p->model, "config: %lld experts used per token, the model has %lld experts",
                                (long long)cfg->n_experts_used, (long long)cfg->n_experts);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        return QUAROT_OK;
    }
    for (i = 0; i < p->plan.n_blocks; ++i) {
        const quarot_plan_block* b = &p->plan.blocks[i];
        if (b->layer != layer) continue;
        if (b->kind == QUAROT_BLOCK_ROUTER || b->kind == QUAROT_BLOCK_SHARED_GATE) {
            const int64_t rows = b->kind == QUAROT_BLOCK_ROUTER ? cfg->n_experts : 1;
            if ((res = quarot__get(p, b->weight, &t)) != QUAROT_OK) return res;
            if (t.ne[0] != cfg->hidden || t.ne[1] != rows || t.ne[2] != 1 || t.ne[3] != 1) {
                quarot__model_error(p->model, "tensor '%s' is {%lld, %lld, %lld}, expected {hidden %lld, %lld%s}",
                                    b->weight, (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2],
                                    (long long)cfg->hidden, (long long)rows,
                                    b->kind == QUAROT_BLOCK_ROUTER ? " experts" : "");
                return QUAROT_ERR_SHAPE_MISMATCH;
            }
            continue;
        }
        for (k = 0; k < 3; ++k) {
            const char* name = k == 0 ? b->gate : k == 1 ? b->up : b->down;
            const int64_t in = k == 2 ? b->intermediate : cfg->hidden, out = k == 2 ? cfg->hidden : b->intermediate;
            const int64_t slices = b->expert < 0 && b->kind == QUAROT_BLOCK_EXPERTS ? b->n_experts : 1;
            if ((res = quarot__get(p, name, &t)) != QUAROT_OK) return res;
            if (t.ne[0] != in || t.ne[1] != out || t.ne[2] != slices || t.ne[3] != 1) {
                quarot__model_error(p->model, "tensor '%s' is {%lld, %lld, %lld}, expected {%lld, %lld, %lld}%s", name,
                                    (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2], (long long)in,
                                    (long long)out, (long long)slices,
                                    slices > 1 ? " (one slice per expert)" : "");
                return QUAROT_ERR_SHAPE_MISMATCH;
            }
        }
    }
    return QUAROT_OK;
}

static quarot_result quarot__moe_rotations(quarot_processor* p, const quarot_model_config* cfg, int64_t tp) {
    static const quarot_block_kind kinds[2] = {QUAROT_BLOCK_EXPERTS, QUAROT_BLOCK_SHARED};
    static const quarot_rotation_id ids[2] = {QUAROT_ROT_R4_EXPERT, QUAROT_ROT_R4_SHARED};
    static const char* const what[2] = {"expert down_proj", "shared expert down_proj"};
    int k;
    quarot_result res;
    (void)cfg;
    for (k = 0; k < 2; ++k) {
        int64_t n = quarot__block_size_of(p, kinds[k]);
        if (n == 0) continue;
        if (n % tp != 0) {
            quarot__model_error(p->model, "max_tp_size %lld does not divide the %s input %lld", (long long)tp, what[k],
                                (long long)n);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        if ((res = quarot__online_rotation(p, &p->rot[ids[k]], n / tp, what[k])) != QUAROT_OK) return res;
        p->have_rot[ids[k]] = 1;
    }
    return QUAROT_OK;
}

static quarot_result quarot__moe_commands(quarot_processor* p, int64_t cap, int64_t layer) {
    int64_t i;
    quarot_result res = QUAROT_OK;
    for (i = 0; i < p->plan.n_blocks && res == QUAROT_OK; ++i) {
        const quarot_plan_block* b = &p->plan.blocks[i];
        quarot_rotation_id id = b->kind == QUAROT_BLOCK_EXPERTS ? QUAROT_ROT_R4_EXPERT : QUAROT_ROT_R4_SHARED;
        if (b->layer != layer || (b->kind != QUAROT_BLOCK_EXPERTS && b->kind != QUAROT_BLOCK_SHARED)) continue;
        if (p->rot[id].n < 1 || b->intermediate % p->rot[id].n != 0) {
            quarot__model_error(p->model, "layer %lld: '%s' has %lld inputs, the MoE layers' R4 is of order %lld",
                                (long long)layer, b->down, (long long)b->intermediate, (long long)p->rot[id].n);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
        res = quarot__add_command(p, cap, layer, id, QUAROT_SIDE_INPUT, 0, b->intermediate / p->rot[id].n, 1, b->down,
                                  "");
    }
    return res;
}

static quarot_result quarot__moe_hooks(quarot_processor* p, int64_t layer) {
    quarot_online_list* out = p->desc.online_out;
    int have[2] = {0, 0};
    int64_t i;
    quarot_result res = QUAROT_OK;
    for (i = 0; i < p->plan.n_blocks && res == QUAROT_OK; ++i) {
        const quarot_plan_block* b = &p->plan.blocks[i];
        int k = b->kind == QUAROT_BLOCK_EXPERTS ? 0 : b->kind == QUAROT_BLOCK_SHARED ? 1 : -1;
        int64_t n;
        if (b->layer != layer || k < 0 || have[k]) continue;
        have[k] = 1;
        n = p->rot[k == 0 ? QUAROT_ROT_R4_EXPERT : QUAROT_ROT_R4_SHARED].n;
        res = quarot_online_list_add(out, layer, k == 0 ? QUAROT_SITE_EXPERT_DOWN_INPUT : QUAROT_SITE_SHARED_DOWN_INPUT,
                                     b->intermediate, b->intermediate / n, n, 1, NULL);
        if (res == QUAROT_OK && k == 0) out->hooks[out->count - 1].experts = b->n_experts;
    }
    return res;
}

// >>adapt
// Capture: per matched linear a growing buffer of kept rows. Keeping stream row i iff i % step == 0,
// and halving the kept set (step *= 2) whenever it is full, keeps rows 0, step, 2*step, ... of the
// whole stream. Context: arrays owned through ctx->env; serialization is a fixed little-endian layout
// closed by an FNV-1a-64 checksum, read back with every field checked before anything is allocated.

#define QUAROT__ADAPT_SAMPLES 2048           // default max_samples
#define QUAROT__ADAPT_HEADER 104             // bytes of the fixed part of the serialized context
#define QUAROT__ADAPT_ORTH_TOL 1e-5          // R accepted by set / read / stage 2

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static void quarot__adapt_msg(char* buf, size_t size, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

// Length of s if it is shorter than max, else max (no read past max bytes).
static size_t quarot__adapt_strnlen(const char* s, size_t max) {
    const char* z = (const char*)memchr(s, 0, max);
    return z ? (size_t)(z - s) : max;
}

// Releases every buffer; the struct can be initialized again (env is kept).
QUAROT_API void quarot_adapt_capture_free(quarot_adapt_capture* cap) {
    int64_t i;
    if (!cap) return;
    for (i = 0; i < cap->n_linears; ++i) quarot_env_free(&cap->env, cap->linears[i].rows);
    for (i = 0; i < cap->n_patterns; ++i) quarot_env_free(&cap->env, cap->patterns ? cap->patterns[i] : NULL);
    quarot_env_free(&cap->env, cap->linears);
    quarot_env_free(&cap->env, cap->patterns);
    quarot_env_free(&cap->env, cap->names);
    cap->linears = NULL;
    cap->patterns = NULL;
    cap->names = NULL;
    cap->n_linears = cap->cap_linears = cap->n_patterns = cap->n_names = cap->cap_names = 0;
}

QUAROT_API quarot_result quarot_adapt_capture_init(quarot_adapt_capture* cap, int64_t hidden,
                                                   const quarot_adapt_desc* desc, const quarot_env* env) {
    static const char* const default_pattern[1] = {"up_proj"};
    const char* const* pats = default_pattern;
    int64_t n_pats = 1, max, i;
    size_t bytes;
    if (!cap) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(cap, 0, sizeof *cap);
    cap->env = quarot__env_copy(env);
    if (hidden <= 0) return QUAROT_ERR_INVALID_ARGUMENT;
    // one linear's full buffer (max_samples rows of hidden floats) must be addressable
    max = desc && desc->max_samples ? desc->max_samples : QUAROT__ADAPT_SAMPLES;
    if (max < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot__mul_size((size_t)max, (size_t)hidden, &bytes) || !quarot__mul_size(bytes, sizeof(float), &bytes))
        return QUAROT_ERR_OVERFLOW;
    if (desc && desc->layer_type) {
        pats = desc->layer_type;
        n_pats = desc->n_layer_type;
        if (n_pats <= 0 || n_pats > 4096) return QUAROT_ERR_INVALID_ARGUMENT;
    }
    // an empty pattern would match every linear (also those whose input is not hidden wide)
    for (i = 0; i < n_pats; ++i)
        if (!pats[i] || !pats[i][0] || quarot__adapt_strnlen(pats[i], QUAROT_NAME_MAX) >= QUAROT_NAME_MAX)
            return QUAROT_ERR_INVALID_ARGUMENT;
    // own copies: the desc's strings need not outlive this call
    cap->patterns = (char**)quarot_env_alloc(&cap->env, (size_t)n_pats * sizeof(char*));
    if (!cap->patterns) return QUAROT_ERR_OUT_OF_MEMORY;
    memset(cap->patterns, 0, (size_t)n_pats * sizeof(char*));
    cap->n_patterns = n_pats;
    for (i = 0; i < n_pats; ++i) {
        size_t len = strlen(pats[i]);
        cap->patterns[i] = (char*)quarot_env_alloc(&cap->env, len + 1);
        if (!cap->patterns[i]) { quarot_adapt_capture_free(cap); return QUAROT_ERR_OUT_OF_MEMORY; }
        memcpy(cap->patterns[i], pats[i], len + 1);
    }
    cap->hidden = hidden;
    cap->max_samples = max;
    cap->status = QUAROT_OK;
    return QUAROT_OK;
}

QUAROT_API int quarot_adapt_capture_matches(const quarot_adapt_capture* cap, const char* linear_name) {
    int64_t i;
    if (!cap || !linear_name) return 0;
    for (i = 0; i < cap->n_patterns; ++i)
        if (strstr(linear_name, cap->patterns[i])) return 1;
    return 0;
}

// Grow an array of `elem`-byte records to hold one more (doubling); 0 on allocation failure.
static int quarot__adapt_grow(const quarot_env* env, void** arr, int64_t n, int64_t* cap, size_t elem) {
    int64_t nc;
    void* p;
    if (n < *cap) return 1;
    nc = *cap ? 2 * *cap : 16;
    p = quarot_env_alloc(env, (size_t)nc * elem);
    if (!p) return 0;
    if (n) memcpy(p, *arr, (size_t)n * elem);
    quarot_env_free(env, *arr);
    *arr = p;
    *cap = nc;
    return 1;
}

// Record the first failure of an add call (capture hooks of a forward pass often return void, so
// stage 1 re-reports it) and return it.
static quarot_result quarot__adapt_capture_fail(quarot_adapt_capture* cap, quarot_result r) {
    if (cap->status == QUAROT_OK) cap->status = r;
    return r;
}

QUAROT_API quarot_result quarot_adapt_capture_add(quarot_adapt_capture* cap, const char* linear_name,
                                                  const float* x, int64_t rows, int64_t stride) {
    quarot_adapt_linear* L = NULL;
    int64_t i, j, h;
    size_t len;
    if (!cap || !linear_name || !cap->patterns) return QUAROT_ERR_INVALID_ARGUMENT;
    h = cap->hidden;
    len = quarot__adapt_strnlen(linear_name, QUAROT_NAME_MAX);
    if (len >= QUAROT_NAME_MAX || rows < 0 || (rows > 0 && !x) || stride < h) return QUAROT_ERR_INVALID_ARGUMENT;
    if (stride > INT64_MAX / (int64_t)sizeof(float) ||
        (rows > 0 && (rows - 1) > (INT64_MAX / (int64_t)sizeof(float) - h) / stride))
        return QUAROT_ERR_OVERFLOW;                // as the other batched calls: x[rows][stride] addressable
    for (i = 0; i < cap->n_names && strcmp(cap->names[i], linear_name) != 0; ++i) {}
    if (i == cap->n_names) {                       // a new name: remember it for error messages
        void* arr = cap->names;
        if (!quarot__adapt_grow(&cap->env, &arr, cap->n_names, &cap->cap_names, QUAROT_NAME_MAX))
            return quarot__adapt_capture_fail(cap, QUAROT_ERR_OUT_OF_MEMORY);
        cap->names = (char(*)[QUAROT_NAME_MAX])arr;
        memcpy(cap->names[cap->n_names++], linear_name, len + 1);
    }
    if (!quarot_adapt_capture_matches(cap, linear_name)) return QUAROT_OK;
    for (i = 0; i < rows; ++i)                     // all or nothing: scan before keeping any row
        for (j = 0; j < h; ++j)
            if (!(fabsf(x[i * stride + j]) <= 3.40282346638528859812e+38f)) {
                quarot__adapt_msg(cap->error, sizeof cap->error,
                                  "linear '%s': NaN or Inf in input row %lld, column %lld", linear_name, (long long)i,
                                  (long long)j);
                return quarot__adapt_capture_fail(cap, QUAROT_ERR_NONFINITE);
            }
    for (i = 0; i < cap->n_linears && strcmp(cap->linears[i].name, linear_name) != 0; ++i) {}
    if (i == cap->n_linears) {
        void* arr = cap->linears;
        if (!quarot__adapt_grow(&cap->env, &arr, cap->n_linears, &cap->cap_linears, sizeof(quarot_adapt_linear)))
            return quarot__adapt_capture_fail(cap, QUAROT_ERR_OUT_OF_MEMORY);
        cap->linears = (quarot_adapt_linear*)arr;
        L = &cap->linears[cap->n_linears++];
        memset(L, 0, sizeof *L);
        memcpy(L->name, linear_name, len + 1);
        L->step = 1;
    }
    L = &cap->linears[i];
    // Invariant: the kept rows are stream rows 0, step, 2*step, ... < seen, in order. A row whose
    // index is a multiple of step is kept; when the buffer is full the odd positions go (their
    // indices are odd multiples of step) and step doubles, so the invariant holds with 2*step.
    for (i = 0; i < rows; ++i) {
        int64_t idx = L->seen++;
        if (idx % L->step != 0) continue;
        if (L->count == cap->max_samples) {        // full: keep every other row, double the stride
            for (j = 1; 2 * j < L->count; ++j) memcpy(L->rows + j * h, L->rows + 2 * j * h, (size_t)h * sizeof(float));
            L->count = (L->count + 1) / 2;
            L->step *= 2;
            if (idx % L->step != 0) continue;
        }
        if (L->count == cap->max_samples) continue;   // max_samples == 0 never happens; 1 keeps row 0 only
        if (L->count == L->cap) {                  // grow geometrically up to max_samples rows
            int64_t nc = L->cap ? 2 * L->cap : 64;
            float* p;
            if (nc > cap->max_samples) nc = cap->max_samples;
            p = (float*)quarot_env_alloc(&cap->env, (size_t)nc * (size_t)h * sizeof(float));
            if (!p) return quarot__adapt_capture_fail(cap, QUAROT_ERR_OUT_OF_MEMORY);
            if (L->count) memcpy(p, L->rows, (size_t)L->count * (size_t)h * sizeof(float));
            quarot_env_free(&cap->env, L->rows);
            L->rows = p;
            L->cap = nc;
        }
        memcpy(L->rows + L->count * h, x + i * stride, (size_t)h * sizeof(float));
        L->count++;
    }
    return QUAROT_OK;
}

// name with every run of digits replaced by "{i}" (out holds 3*QUAROT_NAME_MAX bytes).
static void quarot__adapt_fold(const char* name, char* out) {
    size_t o = 0;
    while (*name) {
        if (*name >= '0' && *name <= '9') {
            while (*name >= '0' && *name <= '9') ++name;
            memcpy(out + o, "{i}", 3);
            o += 3;
        } else {
            out[o++] = *name++;
        }
    }
    out[o] = 0;
}

// Folded names in order of first appearance; O(names^2) comparisons, fine for error messages.
QUAROT_API const char* quarot_adapt_capture_list(const quarot_adapt_capture* cap, char* buf, size_t size) {
    char f[3 * QUAROT_NAME_MAX], g[3 * QUAROT_NAME_MAX];
    size_t used = 0;
    int64_t i, k;
    if (!buf || size == 0) return buf;
    buf[0] = 0;
    if (!cap) return buf;
    for (i = 0; i < cap->n_names; ++i) {
        size_t len;
        quarot__adapt_fold(cap->names[i], f);
        for (k = 0; k < i; ++k) {                  // already listed under the same folded name?
            quarot__adapt_fold(cap->names[k], g);
            if (strcmp(f, g) == 0) break;
        }
        if (k < i) continue;
        len = strlen(f) + (used ? 2 : 0);
        if (used + len + 4 >= size) {              // room for ", ..." is kept
            if (used + 5 < size) { memcpy(buf + used, used ? ", ..." : "...", used ? 6 : 4); }
            return buf;
        }
        if (used) { memcpy(buf + used, ", ", 2); used += 2; }
        memcpy(buf + used, f, strlen(f) + 1);
        used += strlen(f);
    }
    return buf;
}

QUAROT_API void quarot_adapt_context_init(quarot_adapt_context* ctx, const quarot_env* env) {
    if (!ctx) return;
    memset(ctx, 0, sizeof *ctx);
    ctx->env = quarot__env_copy(env);
}

// Frees the arrays and zeroes the fields, keeping env (so a context can be reused or re-read).
QUAROT_API void quarot_adapt_context_free(quarot_adapt_context* ctx) {
    quarot_env env;
    if (!ctx) return;
    env = ctx->env;
    quarot_env_free(&env, ctx->matrix);
    quarot_env_free(&env, ctx->losses);
    quarot_env_free(&env, ctx->polar_iterations);
    memset(ctx, 0, sizeof *ctx);
    ctx->env = env;
}

// Every value finite (|v| <= DBL_MAX)?
static int quarot__adapt_finite(const double* v, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i)
        if (!(fabs(v[i]) <= 1.7976931348623157e308)) return 0;
    return 1;
}

QUAROT_API quarot_result quarot_adapt_context_set(quarot_adapt_context* ctx, int64_t hidden, int64_t block,
                                                  uint64_t seed, const double* r) {
    size_t bytes;
    int64_t hb;
    double err;
    double* m;
    if (!ctx) return QUAROT_ERR_INVALID_ARGUMENT;
    ctx->error[0] = 0;
    if (block <= 0) block = hidden;
    if (!r || hidden <= 0 || block > hidden || hidden % block != 0) {
        quarot__adapt_msg(ctx->error, sizeof ctx->error, "adapt context: need a matrix and a block dividing hidden");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (!quarot__mul_size((size_t)block, (size_t)block, &bytes) || !quarot__mul_size(bytes, sizeof(double), &bytes))
        return QUAROT_ERR_OVERFLOW;
    // the same rule QUAROT_ROTATION_ADAPT applies, so stage 2 rebuilds this exact H
    hb = quarot__adapt_hadamard_order(block, QUAROT_FALLBACK_DEFAULT);
    if (hb == 0) {
        quarot__adapt_msg(ctx->error, sizeof ctx->error, "adapt context: no Hadamard order > 1 divides block %lld",
                          (long long)block);
        return QUAROT_ERR_UNSUPPORTED_SIZE;
    }
    if (!quarot__adapt_finite(r, block * block)) {
        quarot__adapt_msg(ctx->error, sizeof ctx->error, "adapt context: R has NaN or Inf");
        return QUAROT_ERR_NONFINITE;
    }
    err = quarot__orth_error_gemm(r, block, &ctx->env);
    if (err < 0) return QUAROT_ERR_OUT_OF_MEMORY;
    if (!(err <= QUAROT__ADAPT_ORTH_TOL)) {
        quarot__adapt_msg(ctx->error, sizeof ctx->error, "adapt context: R is not orthogonal (max|R^T R - I| = %.3g)",
                          err);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    m = (double*)quarot_env_alloc(&ctx->env, bytes);   // everything checked: now replace the contents
    if (!m) return QUAROT_ERR_OUT_OF_MEMORY;
    memcpy(m, r, bytes);
    quarot_adapt_context_free(ctx);
    ctx->hidden = hidden;
    ctx->block = block;
    ctx->hadamard_block = hb;
    ctx->seed = seed;
    ctx->matrix = m;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_adapt_context_rotation(const quarot_adapt_context* ctx, quarot_rotation* rot,
                                                       const quarot_env* env) {
    quarot_rotation_desc d;
    quarot_result res;
    if (!rot) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(rot, 0, sizeof *rot);
    if (!ctx) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!ctx->matrix) return QUAROT_ERR_STATE;
    memset(&d, 0, sizeof d);
    d.kind = QUAROT_ROTATION_ADAPT;
    d.n = ctx->hidden;
    d.block_size = ctx->block;
    d.seed = ctx->seed;
    d.matrix = ctx->matrix;
    d.orth_tol = QUAROT__ADAPT_ORTH_TOL;
    res = quarot_rotation_init(rot, &d, env);
    if (res == QUAROT_OK && rot->plan.n != ctx->hadamard_block) {   // a hand-made context disagrees
        quarot_rotation_free(rot);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return res;
}

// ---- serialization: little-endian fields, doubles as their IEEE-754 bit patterns ----
// Byte offsets of the fixed header (104 bytes): magic 0, version 8, flags 12, hidden 16, block 24,
// hadamard_block 32, seed 40, bits 48, steps 52, steps_run 56, best_step 60, patience 64, zero 68,
// rows 72, reg 80, start_loss 88, best_loss 96; then losses, iteration counts, R, checksum.
static void quarot__adapt_put(unsigned char* p, uint64_t v, int bytes) {
    int i;
    for (i = 0; i < bytes; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t quarot__adapt_get(const unsigned char* p, int bytes) {
    uint64_t v = 0;
    int i;
    for (i = 0; i < bytes; ++i) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static uint64_t quarot__adapt_dbits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
static double quarot__adapt_bitsd(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

static uint64_t quarot__adapt_fnv1a(const unsigned char* p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i;
    for (i = 0; i < n; ++i) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return h;
}

// Serialized size for steps_run steps and a block of b; 0 on overflow.
static size_t quarot__adapt_size(int64_t steps_run, int64_t b) {
    size_t rb, total;
    if (steps_run < 0 || b <= 0) return 0;
    if (!quarot__mul_size((size_t)b, (size_t)b, &rb) || !quarot__mul_size(rb, 8, &rb)) return 0;
    total = QUAROT__ADAPT_HEADER + (size_t)steps_run * 12 + 8;
    if (rb > SIZE_MAX - total) return 0;
    return total + rb;
}

QUAROT_API quarot_result quarot_adapt_context_write(const quarot_adapt_context* ctx, void* buf, size_t cap,
                                                    size_t* needed) {
    unsigned char* p = (unsigned char*)buf;
    size_t size, o;
    int64_t i, bb;
    if (needed) *needed = 0;
    if (!ctx || !needed) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!ctx->matrix) return QUAROT_ERR_STATE;
    if (ctx->steps_run < 0 || (ctx->steps_run > 0 && (!ctx->losses || !ctx->polar_iterations)))
        return QUAROT_ERR_INVALID_ARGUMENT;
    size = quarot__adapt_size(ctx->steps_run, ctx->block);
    if (size == 0) return QUAROT_ERR_OVERFLOW;
    *needed = size;
    if (!buf) return QUAROT_OK;
    if (cap < size) return QUAROT_ERR_WORKSPACE;
    memcpy(p, "QRADAPT\0", 8);
    quarot__adapt_put(p + 8, 1, 4);                                  // version
    quarot__adapt_put(p + 12, 1, 4);                                 // flags: random signs
    quarot__adapt_put(p + 16, (uint64_t)ctx->hidden, 8);
    quarot__adapt_put(p + 24, (uint64_t)ctx->block, 8);
    quarot__adapt_put(p + 32, (uint64_t)ctx->hadamard_block, 8);
    quarot__adapt_put(p + 40, ctx->seed, 8);
    quarot__adapt_put(p + 48, (uint64_t)(uint32_t)ctx->bits, 4);
    quarot__adapt_put(p + 52, (uint64_t)(uint32_t)ctx->steps, 4);
    quarot__adapt_put(p + 56, (uint64_t)(uint32_t)ctx->steps_run, 4);
    quarot__adapt_put(p + 60, (uint64_t)(uint32_t)ctx->best_step, 4);
    quarot__adapt_put(p + 64, (uint64_t)(uint32_t)ctx->patience, 4);
    quarot__adapt_put(p + 68, 0, 4);
    quarot__adapt_put(p + 72, (uint64_t)ctx->rows, 8);
    quarot__adapt_put(p + 80, quarot__adapt_dbits(ctx->reg), 8);
    quarot__adapt_put(p + 88, quarot__adapt_dbits(ctx->start_loss), 8);
    quarot__adapt_put(p + 96, quarot__adapt_dbits(ctx->best_loss), 8);
    o = QUAROT__ADAPT_HEADER;
    for (i = 0; i < ctx->steps_run; ++i, o += 8) quarot__adapt_put(p + o, quarot__adapt_dbits(ctx->losses[i]), 8);
    for (i = 0; i < ctx->steps_run; ++i, o += 4)
        quarot__adapt_put(p + o, (uint64_t)(uint32_t)ctx->polar_iterations[i], 4);
    bb = ctx->block * ctx->block;
    for (i = 0; i < bb; ++i, o += 8) quarot__adapt_put(p + o, quarot__adapt_dbits(ctx->matrix[i]), 8);
    quarot__adapt_put(p + o, quarot__adapt_fnv1a(p, o), 8);
    return QUAROT_OK;
}

static int32_t quarot__adapt_i32(const unsigned char* p) { return (int32_t)(uint32_t)quarot__adapt_get(p, 4); }

// Checks run cheapest first and before any allocation: the header fields, then that len is exactly
// the size they imply (so a short or padded buffer never reads out of bounds and a hostile header
// cannot ask for a large allocation), the checksum, the loss history, and last R (finite, then
// orthogonal with one DGEMM). Only then is ctx replaced.
QUAROT_API quarot_result quarot_adapt_context_read(quarot_adapt_context* ctx, const void* buf, size_t len) {
    const unsigned char* p = (const unsigned char*)buf;
    quarot_adapt_context t;
    size_t size, o;
    int64_t i, hb, bb, hidden, block;
    int32_t steps, steps_run, best_step;
    double err, expect_best;
    if (!ctx) return QUAROT_ERR_INVALID_ARGUMENT;
    ctx->error[0] = 0;
#define QUAROT__ADAPT_BAD(...)                                                                         \
    do { quarot__adapt_msg(ctx->error, sizeof ctx->error, __VA_ARGS__); return QUAROT_ERR_PARSE; } while (0)
    if (!p) QUAROT__ADAPT_BAD("adapt context: no data");
    if (len < QUAROT__ADAPT_HEADER + 8)
        QUAROT__ADAPT_BAD("adapt context: truncated (%lu bytes, the header alone is %d)", (unsigned long)len,
                          QUAROT__ADAPT_HEADER + 8);
    if (memcmp(p, "QRADAPT\0", 8) != 0)
        QUAROT__ADAPT_BAD("adapt context: bad magic (not a quarot.h Adapt Rotation context)");
    if (quarot__adapt_get(p + 8, 4) != 1)
        QUAROT__ADAPT_BAD("adapt context: unsupported version %lu (this reader knows 1)",
                          (unsigned long)quarot__adapt_get(p + 8, 4));
    if (quarot__adapt_get(p + 12, 4) != 1)
        QUAROT__ADAPT_BAD("adapt context: unknown flags 0x%lx", (unsigned long)quarot__adapt_get(p + 12, 4));
    hidden = (int64_t)quarot__adapt_get(p + 16, 8);
    block = (int64_t)quarot__adapt_get(p + 24, 8);
    hb = (int64_t)quarot__adapt_get(p + 32, 8);
    if (hidden <= 0 || hidden > ((int64_t)1 << 32) || block <= 0 || block > 65536 || block > hidden ||
        hidden % block != 0)
        QUAROT__ADAPT_BAD("adapt context: bad sizes (hidden %lld, block %lld)", (long long)hidden, (long long)block);
    steps = quarot__adapt_i32(p + 52);
    steps_run = quarot__adapt_i32(p + 56);
    best_step = quarot__adapt_i32(p + 60);
    if (steps < 0 || steps > (1 << 20) || steps_run < 0 || steps_run > steps || best_step < 0 || best_step > steps_run)
        QUAROT__ADAPT_BAD("adapt context: bad step counts (steps %d, run %d, best %d)", (int)steps, (int)steps_run,
                          (int)best_step);
    size = quarot__adapt_size(steps_run, block);
    if (size == 0 || size != len)
        QUAROT__ADAPT_BAD("adapt context: %lu bytes, the header says %lu", (unsigned long)len, (unsigned long)size);
    if (quarot__adapt_get(p + len - 8, 8) != quarot__adapt_fnv1a(p, len - 8))
        QUAROT__ADAPT_BAD("adapt context: checksum mismatch (corrupted)");
    if (hb != quarot__adapt_hadamard_order(block, QUAROT_FALLBACK_DEFAULT))
        QUAROT__ADAPT_BAD("adapt context: hadamard_block %lld is not the order stage 2 builds for block %lld",
                          (long long)hb, (long long)block);
    memset(&t, 0, sizeof t);                       // the new contents, moved into ctx at the end
    t.env = ctx->env;
    t.hidden = hidden;
    t.block = block;
    t.hadamard_block = hb;
    t.seed = quarot__adapt_get(p + 40, 8);
    t.bits = quarot__adapt_i32(p + 48);
    t.steps = steps;
    t.steps_run = steps_run;
    t.best_step = best_step;
    t.patience = quarot__adapt_i32(p + 64);
    t.rows = (int64_t)quarot__adapt_get(p + 72, 8);
    t.reg = quarot__adapt_bitsd(quarot__adapt_get(p + 80, 8));
    t.start_loss = quarot__adapt_bitsd(quarot__adapt_get(p + 88, 8));
    t.best_loss = quarot__adapt_bitsd(quarot__adapt_get(p + 96, 8));
    if ((t.bits != 0 && t.bits != 4 && t.bits != 8) || t.patience < 0 || quarot__adapt_get(p + 68,
                                                                                           4) != 0 || t.rows < 0)
        QUAROT__ADAPT_BAD("adapt context: bad settings (bits %d, patience %d, rows %lld)", t.bits, t.patience,
                          (long long)t.rows);
    if (!(t.reg >= 0.0 && t.reg < 1.0) || !(t.start_loss >= 0.0 && t.start_loss <= 1e300) ||
        !(t.best_loss >= 0.0 && t.best_loss <= t.start_loss))
        QUAROT__ADAPT_BAD("adapt context: bad loss summary (reg %g, start %g, best %g)", t.reg, t.start_loss,
                          t.best_loss);
    // the loss history must be the one stage 1 writes: finite, best_loss its minimum and the loss of best_step
    o = QUAROT__ADAPT_HEADER;
    expect_best = t.start_loss;
    for (i = 0; i < steps_run; ++i) {
        double l = quarot__adapt_bitsd(quarot__adapt_get(p + o + 8 * (size_t)i, 8));
        if (!(l >= 0.0 && l <= 1e300) || l < t.best_loss)
            QUAROT__ADAPT_BAD("adapt context: bad loss at step %lld", (long long)(i + 1));
        if (i + 1 == best_step) expect_best = l;
        if (quarot__adapt_i32(p + o + 8 * (size_t)steps_run + 4 * (size_t)i) < 0)
            QUAROT__ADAPT_BAD("adapt context: bad iteration count");
    }
    if (expect_best != t.best_loss)
        QUAROT__ADAPT_BAD("adapt context: best_loss is not the loss of best_step %d", (int)best_step);
    bb = block * block;
    t.matrix = (double*)quarot_env_alloc(&t.env, (size_t)bb * sizeof(double));
    if (steps_run > 0) {
        t.losses = (double*)quarot_env_alloc(&t.env, (size_t)steps_run * sizeof(double));
        t.polar_iterations = (int*)quarot_env_alloc(&t.env, (size_t)steps_run * sizeof(int));
    }
    if (!t.matrix || (steps_run > 0 && (!t.losses || !t.polar_iterations))) {
        quarot_adapt_context_free(&t);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    for (i = 0; i < steps_run; ++i) {
        t.losses[i] = quarot__adapt_bitsd(quarot__adapt_get(p + o + 8 * (size_t)i, 8));
        t.polar_iterations[i] = quarot__adapt_i32(p + o + 8 * (size_t)steps_run + 4 * (size_t)i);
    }
    o += 12 * (size_t)steps_run;
    for (i = 0; i < bb; ++i) t.matrix[i] = quarot__adapt_bitsd(quarot__adapt_get(p + o + 8 * (size_t)i, 8));
#undef QUAROT__ADAPT_BAD
    if (!quarot__adapt_finite(t.matrix, bb)) {
        quarot_adapt_context_free(&t);
        quarot__adapt_msg(ctx->error, sizeof ctx->error, "adapt context: R has NaN or Inf");
        return QUAROT_ERR_NONFINITE;
    }
    err = quarot__orth_error_gemm(t.matrix, block, &t.env);
    if (!(err >= 0.0 && err <= QUAROT__ADAPT_ORTH_TOL)) {
        quarot_adapt_context_free(&t);
        if (err < 0) return QUAROT_ERR_OUT_OF_MEMORY;
        quarot__adapt_msg(ctx->error, sizeof ctx->error,
                          "adapt context: R is not orthogonal (max|R^T R - I| = %.3g > %g)", err,
                          QUAROT__ADAPT_ORTH_TOL);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    quarot_adapt_context_free(ctx);
    memcpy(t.error, ctx->error, sizeof t.error);
    *ctx = t;
    return QUAROT_OK;
}

// >>adapt_solve
// polar(C + lambda*Q) (Q = I, or the current R: see >>adapt) in float, after the deflation below when
// it applies: with polar_method NEWTON (the default for b >= 512) scaled Newton steps (see "the
// scaled Newton iteration" below) and then the Newton-Schulz loop for the certified finish; with
// NEWTON_SCHULZ (the default below 512) by Newton-Schulz alone.
// While the singular values of X lie in [l, 1], one Newton-Schulz step
//     X <- X * (a I + b G + c G^2),  G = X^T X
// with the minimax odd quintic p(x) = a x + b x^3 + c x^5 for [l, 1] (Remez, below) maps them into
// [p(l), 1 + E], divided by 1 + E: small ones grow by up to 4.26x per step for 2 GEMM-equivalents
// (the scaled cubic of Chen & Chow: 2.6x for 1.5), and near 1 the error is cubed instead of squared:
// at b = 2048, M = 2048 (bench_adapt) 7.3 iterations per step instead of the cubic's 11.7, most of the
// time in the SGEMM kernel. (A warm start from the previous step's factor does not help here: every
// polynomial iteration acts on the singular values only, which an orthogonal factor leaves unchanged.)
// sigma_max is estimated (subspace or power iteration) and bounded for certain by ||G^2||_F^(1/4) of
// the first G (folded into the first step's coefficients); each step divides by 1 + 1e-3 for safety
// (a value above 1 would be amplified by the steep quintic). Near convergence (l >= 0.99) the fixed
// quintic (15x - 10x^3 + 3x^5)/8 follows. The last step is taken once ||G - I||_F is small enough
// that the cubic (3X - X G)/2 (error rf^2, one GEMM, no G^2) or that fixed quintic (error 0.7 rf^3)
// leaves every sigma^2 within tol/2 of 1: no X^T X is needed after it to show convergence (with the
// bound above, 6.5 instead of 7.7 iterations per step at b = 1024, 12.7% fewer flops). X^T X and G^2 = G^T G
// cost half a GEMM each (upper panels); the symmetric passes that mirror them and build T run over
// tile rows through the parallel hook.

#define QUAROT__ADAPT_MARGIN 1e-3            // headroom above the tracked sigma_max of X
#define QUAROT__ADAPT_POWER_ITERS 10         // power iterations for sigma_max(C)
#define QUAROT__ADAPT_PANEL 256              // column panel of the symmetric X^T X
#define QUAROT__ADAPT_FINISH 0.5             // a last step must bring max|X^T X - I| within this * tol

// G [n][n] = X^T X for X [n][n], upper triangle only (tiles on and above the diagonal): panels of
// columns [j0, j1) compute G[0:j1][j0:j1], about half the flops of one GEMM for large n.
static quarot_result quarot__adapt_gram(int64_t n, const float* x, float* g, const quarot_env* env) {
    int64_t j0;
    quarot_result res = QUAROT_OK;
#if !defined(QUAROT_USE_CBLAS)
    // one call over the upper tiles: the same bits as the column panels below, with one packing of
    // each operand per task instead of one per panel
    if (n >= 4 * QUAROT__ADAPT_PANEL) return quarot__ssyrk_upper(n, n, x, n, g, n, env);
#endif
    if (n < 4 * QUAROT__ADAPT_PANEL) return quarot_sgemm(1, 0, n, n, n, 1.0f, x, n, x, n, 0.0f, g, n, env);
    for (j0 = 0; j0 < n && res == QUAROT_OK; j0 += QUAROT__ADAPT_PANEL) {
        int64_t j1 = j0 + QUAROT__ADAPT_PANEL < n ? j0 + QUAROT__ADAPT_PANEL : n;
        res = quarot_sgemm(1, 0, j1, j1 - j0, n, 1.0f, x, n, x + j0, n, 0.0f, g + j0, n, env);
    }
    return res;
}

// sigma_max(C) estimate: power iteration on C^T C from a fixed pseudo-random start (a lower bound
// close enough to set lambda; the caller bounds sigma_max from above separately). v, w: [n] doubles.
// The products go through env's parallel hook: w = C v by rows (each w_i one task's sum, in the same
// order as serially), v = C^T w by blocks of 256 columns (each v_j summed over i in ascending order):
// the same bits for any thread count.
typedef struct quarot__adapt_pw_job {
    int64_t n;
    const float* c;
    const double* x;
    double* y;
} quarot__adapt_pw_job;

static void quarot__adapt_pw_rows(void* arg, int64_t t) {        // y = C x, rows [64 t, 64 t + 64)
    const quarot__adapt_pw_job* jb = (const quarot__adapt_pw_job*)arg;
    int64_t n = jb->n, i, j, i1 = (t + 1) * 64 < n ? (t + 1) * 64 : n;
    for (i = t * 64; i < i1; ++i) {
        const float* QUAROT__RESTRICT row = jb->c + i * n;
        const double* QUAROT__RESTRICT x = jb->x;
        double acc[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        int q;
        for (j = 0; j + 8 <= n; j += 8)            // 8 interleaved sums (vector code at -O2), fixed tree
            for (q = 0; q < 8; ++q) acc[q] += (double)row[j + q] * x[j + q];
        for (; j < n; ++j) acc[j & 7] += (double)row[j] * x[j];
        jb->y[i] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
}

static void quarot__adapt_pw_cols(void* arg, int64_t t) {        // y = C^T x, columns [256 t, 256 t + 256)
    const quarot__adapt_pw_job* jb = (const quarot__adapt_pw_job*)arg;
    int64_t n = jb->n, i, j, j0 = t * 256, j1 = j0 + 256 < n ? j0 + 256 : n;
    for (j = j0; j < j1; ++j) jb->y[j] = 0.0;
    for (i = 0; i < n; ++i) {
        const float* row = jb->c + i * n;
        double xi = jb->x[i];
        for (j = j0; j < j1; ++j) jb->y[j] += (double)row[j] * xi;
    }
}

static double quarot__adapt_sigma_max(int64_t n, const float* c, double* v, double* w, const quarot_env* env) {
    quarot_rng rng;
    quarot__adapt_pw_job jb;
    double nv, est = 0.0;
    int64_t i;
    int it;
    jb.n = n;
    jb.c = c;
    quarot_rng_seed(&rng, 0x5eed5eedULL);
    for (i = 0; i < n; ++i) v[i] = quarot_rng_uniform(&rng) - 0.5;
    for (it = 0; it < QUAROT__ADAPT_POWER_ITERS; ++it) {
        nv = 0.0;
        for (i = 0; i < n; ++i) nv += v[i] * v[i];
        if (!(nv > 0.0) || !(nv <= 1e300)) return nv > 0.0 ? nv : 0.0;   // 0 (C v = 0) or overflow (NaN/Inf)
        nv = 1.0 / sqrt(nv);
        for (i = 0; i < n; ++i) v[i] *= nv;
        jb.x = v;                                  // w = C v
        jb.y = w;
        quarot_env_parallel_for(env, quarot__adapt_pw_rows, &jb, (n + 63) / 64);
        jb.x = w;                                  // v = C^T w
        jb.y = v;
        quarot_env_parallel_for(env, quarot__adapt_pw_cols, &jb, (n + 255) / 256);
        nv = 0.0;
        for (i = 0; i < n; ++i) nv += v[i] * v[i];
        est = sqrt(sqrt(nv));                      // ||C^T C v|| -> sigma_max^2 for unit v
    }
    return est;
}

// ---- spectral deflation of C before Newton-Schulz ----
// polar(C*M) = polar(C) for every symmetric positive definite M that commutes with C^T C. With the
// top-k right singular vectors V_k of C (C^T C V_k = V_k S_k^2) and M = I + V_k (s/S_k - I) V_k^T,
//     C' = C*M = C + (C V_k) (s/S_k - I) V_k^T
// has the same singular vectors with sigma_1..sigma_k replaced by s = sigma_{k+1}: the condition
// number, hence the Newton-Schulz iteration count (log(sigma_max/lambda)/log(2.6)), drops by
// log(sigma_1/sigma_{k+1}). Outlier channels put a few singular values far above the rest, which
// is exactly what this removes. V_k comes from subspace iteration in double (p vectors, Rayleigh-Ritz;
// from the second optimizer step on it starts from the previous step's vectors, see quarot__adapt_deflate);
// an inexact V_k (angle delta to the invariant subspace) moves the polar factor by about
// 2*delta*sigma_1/s, so k is accepted only where the residuals bound that by 1e-8.
// In levels: the Ritz residuals cannot fall below the double rounding of sigma_1^2, so a second group
// of large values far below sigma_1 fails that test (on the bench's data at b = 2048: 8 values pass,
// the next 12, 0.55 .. 0.93 of sigma_9 above a bulk below 0.08, reach 1e-7). Once the first k are
// deflated, the top is sigma_{k+1}: a Rayleigh-Ritz step of the deflated C on the same vectors (its
// singular vectors are C's) and the same test, now relative to sigma_{k+1}, deflates the next group
// (polar(C M1 M2) = polar(C M1) = polar(C), each within the test's bound). There: k = 20, the
// condition number of the Newton start drops from ~480 to ~37 and the Newton steps from 5 to 4, for
// two products with p vectors and one rank-k update per level.

#define QUAROT__ADAPT_DEFL_P 32              // subspace size
#define QUAROT__ADAPT_DEFL_ITERS 8           // subspace iterations on C + lambda*I
#define QUAROT__ADAPT_DEFL_WARM 3            // ... from the previous step's Ritz vectors (then 5 more if
                                             //   fewer values than that step's pass the test)
#define QUAROT__ADAPT_DEFL_LEVELS 3          // deflations in turn, each at the gap the last one uncovered

// Cyclic Jacobi: S [p][p] symmetric -> eigenvalues th[] descending, eigenvectors as the columns of
// Y [p][p] (same order). S is destroyed.
static void quarot__adapt_jacobi(int p, double* s, double* y, double* th) {
    int i, j, k, sweep;
    for (i = 0; i < p * p; ++i) y[i] = (i / p == i % p) ? 1.0 : 0.0;
    for (sweep = 0; sweep < 50; ++sweep) {
        double off = 0.0, diag = 0.0;
        for (i = 0; i < p; ++i) {
            diag += s[i * p + i] * s[i * p + i];
            for (j = i + 1; j < p; ++j) off += s[i * p + j] * s[i * p + j];
        }
        if (!(off > 1e-32 * diag)) break;
        for (i = 0; i < p; ++i)
            for (j = i + 1; j < p; ++j) {
                double a = s[i * p + i], b = s[j * p + j], c = s[i * p + j], tau, t, cs, sn;
                if (c == 0.0) continue;
                tau = (b - a) / (2.0 * c);     // rotation zeroing s[i][j]
                t = (tau >= 0.0 ? 1.0 : -1.0) / (fabs(tau) + sqrt(1.0 + tau * tau));
                cs = 1.0 / sqrt(1.0 + t * t);
                sn = t * cs;
                for (k = 0; k < p; ++k) {      // S <- S*J (columns i, j), then J^T*S (rows i, j)
                    double ki = s[k * p + i], kj = s[k * p + j];
                    s[k * p + i] = cs * ki - sn * kj;
                    s[k * p + j] = sn * ki + cs * kj;
                }
                for (k = 0; k < p; ++k) {
                    double ik = s[i * p + k], jk = s[j * p + k];
                    s[i * p + k] = cs * ik - sn * jk;
                    s[j * p + k] = sn * ik + cs * jk;
                }
                for (k = 0; k < p; ++k) {
                    double ki = y[k * p + i], kj = y[k * p + j];
                    y[k * p + i] = cs * ki - sn * kj;
                    y[k * p + j] = sn * ki + cs * kj;
                }
            }
    }
    for (i = 0; i < p; ++i) th[i] = s[i * p + i];
    for (i = 0; i < p; ++i) {                  // selection sort, descending, columns of Y along
        int best = i;
        for (j = i + 1; j < p; ++j) if (th[j] > th[best]) best = j;
        if (best != i) {
            double tmp = th[i];
            th[i] = th[best];
            th[best] = tmp;
            for (k = 0; k < p; ++k) { tmp = y[k * p + i]; y[k * p + i] = y[k * p + best]; y[k * p + best] = tmp; }
        }
    }
}

// Orthonormal columns of V [n][p] (row stride p): classical Gram-Schmidt applied twice to each
// column ("twice is enough": orthogonal to rounding level like modified Gram-Schmidt twice), with
// both projections as passes along the rows (contiguous p-long pieces instead of column walks of
// stride p). A column that vanishes is replaced by a unit vector (it then carries no information,
// which is harmless here).
static void quarot__adapt_orth(int64_t n, int p, double* v) {
    double d[QUAROT__ADAPT_DEFL_P];
    int pass, j, k;
    int64_t i;
    for (j = 0; j < p; ++j) {
        double nrm = 0.0;
        for (pass = 0; pass < 2 && j > 0; ++pass) {
            for (k = 0; k < j; ++k) d[k] = 0.0;
            for (i = 0; i < n; ++i) {              // d = V_{<j}^T v_j
                const double* row = v + i * p;
                double vj = row[j];
                for (k = 0; k < j; ++k) d[k] += row[k] * vj;
            }
            for (i = 0; i < n; ++i) {              // v_j -= V_{<j} d
                double* row = v + i * p;
                double sp = 0.0;
                for (k = 0; k < j; ++k) sp += row[k] * d[k];
                row[j] -= sp;
            }
        }
        for (i = 0; i < n; ++i) nrm += v[i * p + j] * v[i * p + j];
        if (!(nrm > 1e-300)) {
            for (i = 0; i < n; ++i) v[i * p + j] = (i == (int64_t)j % n) ? 1.0 : 0.0;
            continue;
        }
        nrm = 1.0 / sqrt(nrm);
        for (i = 0; i < n; ++i) v[i * p + j] *= nrm;
    }
}

// `iters` steps of V <- orth(Cd^T (Cd V)), then Rayleigh-Ritz: V, W = Cd V rotated to the Ritz
// vectors, th[] = Ritz values of Cd^T Cd (descending). w: [n][p].
static quarot_result quarot__adapt_subspace(int64_t n, int p, const double* cd, double* v, double* w, int iters,
                                            double* th, double* sy, const quarot_env* env) {
    double* s = sy;
    double* y = sy + p * p;
    int it, i, j;
    int64_t r;
    quarot_result res = QUAROT_OK;
    for (it = 0; it < iters && res == QUAROT_OK; ++it) {
        quarot__adapt_orth(n, p, v);
        res = quarot_dgemm(0, 0, n, p, n, 1.0, cd, n, v, p, 0.0, w, p, env);
        if (res == QUAROT_OK) res = quarot_dgemm(1, 0, n, p, n, 1.0, cd, n, w, p, 0.0, v, p, env);
    }
    if (res != QUAROT_OK) return res;
    quarot__adapt_orth(n, p, v);
    res = quarot_dgemm(0, 0, n, p, n, 1.0, cd, n, v, p, 0.0, w, p, env);
    if (res != QUAROT_OK) return res;
    for (i = 0; i < p * p; ++i) s[i] = 0.0;   // S = W^T W = V^T Cd^T Cd V: upper half, row by row of W
    for (r = 0; r < n; ++r) {                  // (each S_ij still sums over r in ascending order)
        const double* wr = w + r * p;
        for (i = 0; i < p; ++i)
            for (j = i; j < p; ++j) s[i * p + j] += wr[i] * wr[j];
    }
    for (i = 0; i < p; ++i)
        for (j = 0; j < i; ++j) s[i * p + j] = s[j * p + i];
    quarot__adapt_jacobi(p, s, y, th);
    for (r = 0; r < n; ++r) {                  // V <- V Y, W <- W Y (row by row, p-long temporaries)
        double tv[QUAROT__ADAPT_DEFL_P], tw[QUAROT__ADAPT_DEFL_P];
        for (j = 0; j < p; ++j) {
            double a = 0.0, b = 0.0;
            for (i = 0; i < p; ++i) { a += v[r * p + i] * y[i * p + j]; b += w[r * p + i] * y[i * p + j]; }
            tv[j] = a;
            tw[j] = b;
        }
        for (j = 0; j < p; ++j) { v[r * p + j] = tv[j]; w[r * p + j] = tw[j]; }
    }
    return QUAROT_OK;
}

// Element-wise passes over [n][n] matrices, 64 rows per task through env's parallel hook (no sums:
// the same bits for any split). op 0: d = (double)f2;  1: d += alpha * (double)f2;  2: f = (float)d;
// 3: f = (float)((double)f2 / alpha).
typedef struct quarot__adapt_ew_job {
    int op;
    int64_t n;
    double* d;
    float* f;
    const float* f2;
    double alpha;
} quarot__adapt_ew_job;

static void quarot__adapt_ew_task(void* arg, int64_t t) {
    const quarot__adapt_ew_job* jb = (const quarot__adapt_ew_job*)arg;
    int64_t i, i0 = t * 64 * jb->n, i1 = (t + 1) * 64 * jb->n < jb->n * jb->n ? (t + 1) * 64 * jb->n : jb->n * jb->n;
    double al = jb->alpha;
    if (jb->op == 0) for (i = i0; i < i1; ++i) jb->d[i] = (double)jb->f2[i];
    else if (jb->op == 1) for (i = i0; i < i1; ++i) jb->d[i] += al * (double)jb->f2[i];
    else if (jb->op == 2) for (i = i0; i < i1; ++i) jb->f[i] = (float)jb->d[i];
    else for (i = i0; i < i1; ++i) jb->f[i] = (float)((double)jb->f2[i] / al);
}

static void quarot__adapt_ew(int op, int64_t n, double* d, float* f, const float* f2, double alpha,
                             const quarot_env* env) {
    quarot__adapt_ew_job jb;
    jb.op = op; jb.n = n; jb.d = d; jb.f = f; jb.f2 = f2; jb.alpha = alpha;
    quarot_env_parallel_for(env, quarot__adapt_ew_task, &jb, (n + 63) / 64);
}

// After quarot__adapt_subspace (V, W = Cd V, th): the largest k <= p-2 with a gap sigma_k >= 2 sigma_{k+1}
// whose Ritz vectors are accurate enough, delta_i ~ ||Cd^T Cd v_i - th_i v_i|| / (th_k - th_{k+1}) and
// 2 * max delta * sigma_1 / sigma_{k+1} <= 1e-8 (0: none). z: [n][p] doubles of work.
static quarot_result quarot__adapt_defl_pick(int64_t n, int p, const double* cd, const double* v, const double* w,
                                             double* z, const double* th, int* k_out, const quarot_env* env) {
    double rn[QUAROT__ADAPT_DEFL_P];
    int64_t r;
    int i, k;
    quarot_result res = quarot_dgemm(1, 0, n, p, n, 1.0, cd, n, w, p, 0.0, z, p, env);   // Z = Cd^T Cd V
    *k_out = 0;
    if (res != QUAROT_OK) return res;
    for (i = 0; i < p; ++i) rn[i] = 0.0;      // rn_i = ||Cd^T Cd v_i - th_i v_i||^2, row by row of Z and V
    for (r = 0; r < n; ++r)
        for (i = 0; i < p; ++i) {
            double d = z[r * p + i] - th[i] * v[r * p + i];
            rn[i] += d * d;
        }
    for (k = p - 2; k >= 1; --k) {
        double gap = th[k - 1] - th[k], dmax = 0.0;
        if (!(th[k] > 0.0) || th[k - 1] < 4.0 * th[k]) continue;
        for (i = 0; i < k; ++i) {
            double e = sqrt(rn[i]) / gap;
            if (!(e <= dmax)) dmax = e;
        }
        if (2.0 * dmax * sqrt(th[0] / th[k]) <= 1e-8) break;
    }
    *k_out = k;
    return QUAROT_OK;
}

// Cd += W_k (s/S_k - I) V_k^T with s = sigma_{k+1} (W = Cd V, scaled in place): sigma_1..sigma_k -> s.
static quarot_result quarot__adapt_defl_apply(int64_t n, int p, int k, const double* th, const double* v, double* w,
                                              double* cd, const quarot_env* env) {
    double s = sqrt(th[k]);
    int64_t r;
    int i;
    for (i = 0; i < k; ++i) {                  // W_k <- W_k * diag(s/sigma_i - 1)
        double f = s / sqrt(th[i]) - 1.0;
        for (r = 0; r < n; ++r) w[r * p + i] *= f;
    }
    return quarot_dgemm(0, 1, n, n, k, 1.0, w, p, v, p, 1.0, cd, n, env);
}

// C (float [n][n]) -> C + lambda*I, deflated when a reliable gap exists (rounded once to float).
// cd: [n][n] doubles, v, w, z: [n][p] doubles. Out: sigma_1 of C, lambda, the top singular value
// of the result (an estimate from below; the caller bounds it from above), k (0 = not deflated) and
// k0, the k of the first level (up to QUAROT__ADAPT_DEFL_LEVELS levels, see above).
// k_warm > 0: v holds the Ritz vectors of the previous optimizer step's call, whose first level
// deflated k_warm values. C changes little from step to step (its top singular vectors follow the
// outlier channels), so they start the iteration instead of random vectors: 1 iteration for sigma_1 and
// QUAROT__ADAPT_DEFL_WARM for the subspace, 5 more when fewer than k_warm values pass the accuracy
// test after them (11 products of C with p vectors instead of 25; the test is the same, so the
// deflation is as exact: on the bench's data at b = 4096 the same k0 = 8 at each step, and losses
// within 1e-7 relative of the cold start's over the first 4 steps, 1.5e-5 over 20 as the float-level
// differences of R move the int4 roundings).
static quarot_result quarot__adapt_deflate(int64_t n, float* c, const float* rdir, double* cd, double* v, double* w,
                                           double* z, double reg, int k_warm, double* sig_out, double* lam_out,
                                           double* top_out, int* k_out, int* k0_out, const quarot_env* env) {
    int p = n / 2 < QUAROT__ADAPT_DEFL_P ? (int)(n / 2) : QUAROT__ADAPT_DEFL_P, k = 0, pass, level;
    double th[QUAROT__ADAPT_DEFL_P], sy[2 * QUAROT__ADAPT_DEFL_P * QUAROT__ADAPT_DEFL_P], lam, sig;
    int64_t r;
    quarot_rng rng;
    quarot_result res;
    *k_out = 0;
    *k0_out = 0;
    quarot__adapt_ew(0, n, cd, NULL, c, 0.0, env);                      // Cd = C
    if (k_warm <= 0) {
        quarot_rng_seed(&rng, 0x5eed5eedULL);
        for (r = 0; r < n * p; ++r) v[r] = quarot_rng_uniform(&rng) - 0.5;
    }
    res = quarot__adapt_subspace(n, p, cd, v, w, k_warm > 0 ? 1 : 3, th, sy, env);   // sigma_1 of C, for lambda
    if (res != QUAROT_OK) return res;
    sig = sqrt(th[0] > 0.0 ? th[0] : 0.0);
    *sig_out = sig;
    if (!(sig > 0.0) || !(sig <= 1e150)) return QUAROT_OK;               // zero or non-finite: caller decides
    lam = reg * sig;
    *lam_out = lam;
    if (rdir) quarot__adapt_ew(1, n, cd, NULL, rdir, lam, env);        // Cd += lam * Q
    else for (r = 0; r < n; ++r) cd[r * n + r] += lam;
    for (pass = 0; pass < 2; ++pass) {
        res = quarot__adapt_subspace(n, p, cd, v, w,
                                     k_warm <= 0 ? QUAROT__ADAPT_DEFL_ITERS : pass == 0 ? QUAROT__ADAPT_DEFL_WARM : 5,
                                     th, sy, env);
        if (res == QUAROT_OK) res = quarot__adapt_defl_pick(n, p, cd, v, w, z, th, &k, env);
        if (res != QUAROT_OK) return res;
        if (k_warm <= 0 || k >= k_warm) break;   // cold: one pass; warm: again when fewer pass the test
    }
    *k0_out = k;
    *top_out = sqrt(th[k]);                    // th[0] when k = 0
    for (level = 0; k >= 1; ++level) {
        int k2;
        res = quarot__adapt_defl_apply(n, p, k, th, v, w, cd, env);
        if (res != QUAROT_OK) return res;
        *top_out = sqrt(th[k]);
        *k_out = k;
        if (level + 1 >= QUAROT__ADAPT_DEFL_LEVELS || k >= p - 2) break;
        // the next level: Rayleigh-Ritz of the deflated Cd on V (its singular vectors are Cd's)
        res = quarot__adapt_subspace(n, p, cd, v, w, 0, th, sy, env);
        if (res == QUAROT_OK) res = quarot__adapt_defl_pick(n, p, cd, v, w, z, th, &k2, env);
        if (res != QUAROT_OK) return res;
        if (k2 <= k) break;
        k = k2;
    }
    quarot__adapt_ew(2, n, cd, c, NULL, 0.0, env);                      // C = (float)Cd
    return QUAROT_OK;
}

typedef struct quarot__adapt_polar_out {
    int iterations;
    double residual;                     // max|U^T U - I| of the result (float), or its bound after a last step
    int deflated;                        // k singular values deflated (0: none)
    int deflated_first;                  // ... by the first level (the next call's k_warm)
    int grams, products;                 // symmetric X^T X / G^2 (half GEMMs) and full n^3 GEMMs done
    int inverses;                        // scaled Newton steps (one n^3-FMA inverse each)
} quarot__adapt_polar_out;

// Doubles of deflation workspace for size n: Cd [n][n] and V, W, Z [n][p].
static size_t quarot__adapt_defl_doubles(int64_t n) {
    int64_t p = n / 2 < QUAROT__ADAPT_DEFL_P ? n / 2 : QUAROT__ADAPT_DEFL_P;
    return (size_t)(n * n + 3 * n * p);
}

// >>adapt_newton
// The scaled Newton iteration, the default polar method from b = 512: the blocked Gauss-Jordan float
// inverse (quarot__sinv, its LU panels and look-ahead as parallel tasks) and the scaled steps.

// X <- (mu X + X^-T / mu) / 2 (Higham 1986) maps each singular value x of X to (mu x + 1/(mu x)) / 2 >= 1.
// mu follows Byers & Xu (2008): with estimates alpha ~ sigma_max(X0) and beta ~ sigma_min(X0),
//     mu_0 = 1/sqrt(alpha beta),  mu_1 = sqrt(2 sqrt(alpha beta) / (alpha + beta)),
//     mu_k = 1/sqrt((mu_{k-1} + 1/mu_{k-1}) / 2),
// the optimal scaling for the interval [1, c_k] that holds the singular values after step k when the
// estimates are bounds (c_1 = (sqrt(alpha/beta) + sqrt(beta/alpha))/2, then c_{k+1} = (sqrt(c_k) +
// 1/sqrt(c_k))/2): cond 1e5 -> ~158 -> ~6.3 -> ~1.45 -> ~1.02 -> 1 + 1e-4. Estimates that are not bounds
// only cost iterations (the last steps are plain Newton, mu -> 1, which converges quadratically from
// anywhere). Here X0 = C/s with s just above the estimated sigma_max, so alpha = 1, and beta comes
// from X0^-1 once the first inverse is done: QUAROT__NEWTON_BETA (0.9) times the power estimate of
// sigma_min(X0) = 1/||X0^-1||_2 (quarot__newton_smin, 3 iterations from the previous call's vector,
// 8 cold: two passes over b^2 floats each; within 0.1-3% of the converged value above it on the
// bench's data). The guess lambda/s (the lower end the Newton-Schulz path uses) was 10-28% above the
// true sigma_min at b = 2048, and a beta 10% too high leaves 15 times the error after 4 steps (a
// scalar simulation of the iteration on the measured spectrum), while 20% too low costs nothing.
// Frobenius scaling, mu = (||X^-1||_F / ||X||_F)^(1/2), took 7-8 steps instead of 5-6 on the bench's
// C (its many small singular values pull mu away from the interval's centre); it is the fallback
// when beta is not positive. One step costs one float inverse
// (quarot__sinv: 2 b^3 flops, one GEMM-equivalent, against two for a quintic Newton-Schulz step) plus
// O(b^2) passes. With S = ||mu X||_F^2 + ||X^-1/mu||_F^2 - 2b = sum (s - 1/s)^2 (s = mu x) and s = 1 + d
// near convergence, the step leaves s'^2 - 1 ~ d^2, so ||X'^T X' - I||_F <~ sum d^2 ~ S/4: the Newton
// steps stop once S/4 <= QUAROT__NEWTON_STOP, or once the interval bound c_k^2 - 1 is within tol
// (S/4 sums over all b values and stays above the largest one; at b = 4096 it was 0.012-0.015 after
// 4 steps while c_4^2 - 1 was 6.5e-6), and the Newton-Schulz loop takes over: its X^T X either
// shows max|X^T X - I| <= tol at once (at b = 1024..4096 the Newton result is there: 1.5e-6 after 5
// steps, 2e-6 to 5e-6 after 4) or allows the certified cubic / quintic last step (one GEMM, about
// what the inverse it replaces would have cost, when the estimates were not bounds). Accuracy: the
// float inverse of the first step (cond ~1/reg = 1e5) is accurate to ~kappa * 2^-24 in X's small
// singular directions, and so is the result there: against an f64 reference
// (tests/test_adapt_newton.c, n = 256) max|U - U_ref| is 2e-6 up to cond 1e2, 2.3e-4 at 1e4 and
// 4.1e-3 at 1e5, where Newton-Schulz gets 8e-5 and half an ulp of C moves the reference by 2e-5.
// Those directions carry the least activation energy: stage 1's losses agree with the Newton-Schulz
// path's within 5.4e-4 relative at b = 1024 and 4.1e-4 at 2048, best losses within 2.8e-4.
// After the first step cond(X) <= ~sqrt(kappa).

#define QUAROT__SINV_NB 128                  // panel width of the blocked Gauss-Jordan inverse
#define QUAROT__SINV_NB2 32                  // sub-panel width of its pivoting LU
#define QUAROT__SINV_TMAX 32                 // its look-ahead's threads used, up to 32 (2-4 update chunks each)
#define QUAROT__NEWTON_STOP 1e-2             // predicted ||X^T X - I||_F at which Newton hands over
#define QUAROT__NEWTON_MAX 30                // Newton steps at most (then Newton-Schulz continues)
#define QUAROT__NEWTON_BETA 0.9              // beta = this * the power estimate of sigma_min (from above)
#define QUAROT__NEWTON_POWER_COLD 8          // its power iterations from a fixed start
#define QUAROT__NEWTON_POWER_WARM 3          // ... from the previous call's vector

// Floats of work for quarot__sinv(n): the panel and the next one [2][n][nb], the pivot rows [nb][n],
// the pivot block's inverse [nb][nb], the next panel's columns in pivot order [n][nb], the packed
// panel and the next one [2][n + 16][nb] and 16 each for their alignment.
static size_t quarot__sinv_floats(int64_t n) {
    int64_t nb = n < QUAROT__SINV_NB ? n : QUAROT__SINV_NB;
    return (size_t)(6 * n * nb + nb * nb + 32 * nb + 32);
}

// In-place inverse of a float A [n][n] (row stride n) by blocked Gauss-Jordan elimination with partial
// (row) pivoting. On return a = inv(P A) for the row permutation P chosen, and perm[0..n) says how to
// read inv(A): column c of inv(A) is column perm[c] of a (the caller folds that into its next pass).
// perm: [2n] (the second half is scratch); work: quarot__sinv_floats(n) floats.
// Per panel of nb columns [k0, k1): (1) an LU factorization with partial pivoting of rows [k0, n) of
// the panel (a copy) chooses the pivot rows, swapping whole rows of a as it goes (the same rows plain
// Gauss-Jordan with partial pivoting would choose); (2) the pivot block P = a[k0:k1][k0:k1] is inverted
// by scalar Gauss-Jordan exchange (its pivots are the U diagonal of step 1, no further pivoting);
// (3) the block exchange on P, with R = the other rows' panel columns, Q = the pivot rows' other
// columns, S the rest:  P <- P^-1,  R <- R P^-1,  Q <- -P^-1 Q,  S <- S - (R P^-1) Q, as two SGEMMs
// through env's parallel hook (2 n^3 (1 + nb/n) flops in all; the LU of step 1 (~n^2 nb / 4 multiply-
// adds) and step 2 (n nb^2) are serial).
// After all panels every variable has been exchanged once: a = inv(P A). Step 2 runs on the calling
// thread, and so do step 1's small SGEMMs (each parallel call costs a synchronization). With threads,
// step 1 of the next panel looks ahead: once (3) has updated that panel's columns, its LU runs as one
// task beside the tasks that update the other columns (its row exchanges of a are applied after
// them, in the same order), so the serial LU (~n^2 nb / 4 per panel) does not idle the other
// threads; with the built-in SGEMM that task also does the next panel's steps (2) and (3a)
// (quarot__sinv_next_e), which leaves little of the inverse serial. It moves work, not arithmetic:
// nothing is a split sum, so the result is the same bits for any thread count, look-ahead or not. An
// exactly zero pivot (e.g. a zero column) -> QUAROT_ERR_NOT_CONVERGED; a matrix that is singular only up to
// rounding gives a large, inaccurate inverse, as any float inversion (the Newton driver rejects a
// certain cond(X) > 2^24 from the norms); NaN/Inf propagate (the caller checks norms).
// y += a x and the swap x <-> y over n floats: 16-float chunks of fixed length (which the compiler turns
// into vector code at -O2), the rest one by one; x and y must not overlap.
static void quarot__sinv_axpy(int64_t n, float a, const float* QUAROT__RESTRICT x, float* QUAROT__RESTRICT y) {
    int64_t c = 0;
    int q;
    for (; c + 16 <= n; c += 16)
        for (q = 0; q < 16; ++q) y[c + q] += a * x[c + q];
    for (; c < n; ++c) y[c] += a * x[c];
}

static void quarot__sinv_swap(int64_t n, float* QUAROT__RESTRICT x, float* QUAROT__RESTRICT y) {
    float t[16];
    int64_t c = 0;
    int q;
    for (; c + 16 <= n; c += 16) {
        for (q = 0; q < 16; ++q) t[q] = x[c + q];
        for (q = 0; q < 16; ++q) x[c + q] = y[c + q];
        for (q = 0; q < 16; ++q) y[c + q] = t[q];
    }
    for (; c < n; ++c) { float u = x[c]; x[c] = y[c]; y[c] = u; }
}

// Step (2): P^-1 in place by scalar Gauss-Jordan exchange, P [w][w] (row stride w) with the pivots of
// step (1) on its diagonal (no further pivoting). A zero pivot -> QUAROT_ERR_NOT_CONVERGED.
static quarot_result quarot__sinv_pinv(int64_t w, float* pi) {
    int64_t i, c, jj;
    for (jj = 0; jj < w; ++jj) {
        float* rj = pi + jj * w;
        float pv = rj[jj], inv;
        if (!(pv != 0.0f)) return QUAROT_ERR_NOT_CONVERGED;
        inv = 1.0f / pv;
        for (c = 0; c < jj; ++c) rj[c] = -rj[c] * inv;
        for (c = jj + 1; c < w; ++c) rj[c] = -rj[c] * inv;
        rj[jj] = inv;
        for (i = 0; i < w; ++i) {
            float* ri = pi + i * w;
            float f = ri[jj];
            if (i == jj) continue;
            quarot__sinv_axpy(jj, f, rj, ri);
            quarot__sinv_axpy(w - jj - 1, f, rj + jj + 1, ri + jj + 1);
            ri[jj] = f * inv;
        }
    }
    return QUAROT_OK;
}

// Step (1) for the panel of columns [k0, k0 + w): copies rows [k0, n) of them from a into pb (row i at
// pb + i * nb), then LU with partial pivoting by sub-panels of NB2 columns. Each chosen pivot row is
// exchanged in pb and recorded in piv[k0 ..]; with swap_a the whole rows of a are exchanged too (the
// look-ahead defers that: other tasks are updating a's other columns).
static quarot_result quarot__sinv_lu(int64_t n, float* a, int swap_a, int64_t k0, int64_t w, int64_t nb, float* pb,
                                     int64_t* piv, const quarot_env* serial) {
    int64_t s0, i, c, jj;
    quarot_result res;
    for (i = k0; i < n; ++i) memcpy(pb + i * nb, a + i * n + k0, (size_t)w * sizeof(float));
    for (s0 = 0; s0 < w; s0 += QUAROT__SINV_NB2) {          // by sub-panels of NB2 columns
        int64_t s1 = s0 + QUAROT__SINV_NB2 < w ? s0 + QUAROT__SINV_NB2 : w;
        for (jj = s0; jj < s1; ++jj) {
            int64_t jr = k0 + jj, p = jr;
            float best = fabsf(pb[jr * nb + jj]), pv;
            const float* rj;
            for (i = jr + 1; i < n; ++i) {
                float v = fabsf(pb[i * nb + jj]);
                if (v > best) { best = v; p = i; }
            }
            if (!(best > 0.0f)) return QUAROT_ERR_NOT_CONVERGED;
            if (p != jr) {
                if (swap_a) quarot__sinv_swap(n, a + jr * n, a + p * n);
                quarot__sinv_swap(w, pb + jr * nb, pb + p * nb);
            }
            piv[jr] = p;
            rj = pb + jr * nb;
            pv = rj[jj];
            for (i = jr + 1; i < n; ++i) {         // rank-1 update within the sub-panel
                float* ri = pb + i * nb;
                float l = ri[jj] / pv;
                ri[jj] = l;
                quarot__sinv_axpy(s1 - jj - 1, -l, rj + jj + 1, ri + jj + 1);
            }
        }
        if (s1 < w) {                              // the rest of the panel: U12 = L11^-1 A12, A22 -= L21 U12
            for (i = s0 + 1; i < s1; ++i)
                for (c = s0; c < i; ++c)
                    quarot__sinv_axpy(w - s1, -pb[(k0 + i) * nb + c], pb + (k0 + c) * nb + s1, pb + (k0 + i) * nb + s1);
            if (k0 + s1 < n) {
                res = quarot_sgemm(0, 0, n - k0 - s1, w - s1, s1 - s0, -1.0f, pb + (k0 + s1) * nb + s0, nb,
                                   pb + (k0 + s0) * nb + s1, nb, 1.0f, pb + (k0 + s1) * nb + s1, nb, serial);
                if (res != QUAROT_OK) return res;
            }
        }
    }
    return QUAROT_OK;
}

// The look-ahead step of a panel: task 0 runs the exchange's update on the next panel's columns
// [k1, k1 + w1) of a, then their step (1) with the row exchanges of a deferred; task 1 puts E into the
// panel's columns of a; task t >= 2 runs the exchange's update a += -E W on chunk t-2 of cw columns:
// nl chunks of [0, k0), then chunks of [k1 + w1, n). The tasks' columns are disjoint, E and W are only read, and
// every element's update is the same chain as in one call over all columns: the same bits.
// With the built-in SGEMM, E is packed once per panel (epk) and every update uses that packing (a call
// per chunk would pack all of E again, n x nb floats), and the chunks can be smaller (about 4 per
// thread) for the balance. Task 0 then also prepares the next
// panel's steps (2) and (3a): its columns in the order its row exchanges will give (g), P^-1
// of its pivot block, its E = g P^-1 (into pbn, whose LU factors are not needed once its pivots are
// chosen) and E's packing (epkn): the same operations on the same values as the serial steps after
// the exchanges, where the other threads would wait for them.
typedef struct quarot__sinv_job {
    int64_t n, k0, w, nb, cw, nl, k1, w1;
    float *a, *e, *wr, *pbn, *g, *pi, *epkn;
    const float* epk;                    // E packed for cfg (NULL: each update calls quarot_sgemm, and
                                         //   task 0 does not prepare the next panel)
    int64_t* idx;                        // [n] scratch: row i of a after the next exchanges is idx[i]
#if !defined(QUAROT_USE_CBLAS)
    quarot__sgemm_cfg cfg;
#endif
    int64_t* piv;
    const quarot_env* serial;
    quarot_result res[2 + 4 * QUAROT__SINV_TMAX + 2];   // per task (at most 4 T + 2 chunks)
} quarot__sinv_job;

// a[:, c:c+cols] += -E W[:, c:c+cols] on the calling thread.
static quarot_result quarot__sinv_update(const quarot__sinv_job* jb, int64_t c, int64_t cols) {
#if !defined(QUAROT_USE_CBLAS)
    if (jb->epk) {
        const quarot__sgemm_cfg* cfg = &jb->cfg;
        int64_t nce = cols < cfg->nc ? (cols + cfg->nr - 1) / cfg->nr * cfg->nr : cfg->nc;
        void* mem = quarot_env_alloc(jb->serial, (size_t)(nce * jb->w) * sizeof(float) + 64);
        float* bp;
        if (!mem) return QUAROT_ERR_OUT_OF_MEMORY;
        bp = (float*)quarot__align64(mem);
        quarot__gemm_run_s(cfg, 0, 0, jb->n, cols, jb->w, -1.0f, jb->e, jb->nb, jb->wr + c, jb->n, 1.0f, jb->a + c,
                           jb->n, NULL, bp, 0, 0, jb->epk);
        quarot_env_free(jb->serial, mem);
        return QUAROT_OK;
    }
#endif
    return quarot_sgemm(0, 0, jb->n, cols, jb->w, -1.0f, jb->e, jb->nb, jb->wr + c, jb->n, 1.0f, jb->a + c, jb->n,
                        jb->serial);
}

// The next panel's E and its packing (task 0, after that panel's LU chose its pivots; see above).
static quarot_result quarot__sinv_next_e(const quarot__sinv_job* jb) {
    const int64_t n = jb->n, k1 = jb->k1, w1 = jb->w1, nb = jb->nb;
    int64_t i, jj;
    quarot_result res;
    for (i = 0; i < n; ++i) jb->idx[i] = i;
    for (jj = k1; jj < k1 + w1; ++jj) {            // the exchanges, in their order, on row indices
        int64_t p = jb->piv[jj], u = jb->idx[jj];
        jb->idx[jj] = jb->idx[p];
        jb->idx[p] = u;
    }
    for (i = 0; i < n; ++i) memcpy(jb->g + i * nb, jb->a + jb->idx[i] * n + k1, (size_t)w1 * sizeof(float));
    for (i = 0; i < w1; ++i) memcpy(jb->pi + i * w1, jb->g + (k1 + i) * nb, (size_t)w1 * sizeof(float));
    res = quarot__sinv_pinv(w1, jb->pi);
    if (res == QUAROT_OK)
        res = quarot_sgemm(0, 0, n, w1, w1, 1.0f, jb->g, nb, jb->pi, w1, 0.0f, jb->pbn, nb, jb->serial);
    if (res != QUAROT_OK) return res;
    for (i = 0; i < w1; ++i) memcpy(jb->pbn + (k1 + i) * nb, jb->pi + i * w1, (size_t)w1 * sizeof(float));
#if !defined(QUAROT_USE_CBLAS)
    quarot__gemm_pack_a_s(0, jb->pbn, nb, n, w1, jb->cfg.mr, jb->epkn);
#endif
    return QUAROT_OK;
}

static void quarot__sinv_task(void* arg, int64_t t) {
    quarot__sinv_job* jb = (quarot__sinv_job*)arg;
    int64_t i;
    if (t == 0) {
        jb->res[t] = quarot__sinv_update(jb, jb->k1, jb->w1);
        if (jb->res[t] == QUAROT_OK)
            jb->res[t] = quarot__sinv_lu(jb->n, jb->a, 0, jb->k1, jb->w1, jb->nb, jb->pbn, jb->piv, jb->serial);
        if (jb->res[t] == QUAROT_OK && jb->epk) jb->res[t] = quarot__sinv_next_e(jb);
    } else if (t == 1) {
        for (i = 0; i < jb->n; ++i)
            memcpy(jb->a + i * jb->n + jb->k0, jb->e + i * jb->nb, (size_t)jb->w * sizeof(float));
    } else {
        const int64_t right = t - 2 >= jb->nl, c1 = right ? jb->n : jb->k0;
        const int64_t c = right ? jb->k1 + jb->w1 + (t - 2 - jb->nl) * jb->cw : (t - 2) * jb->cw;
        const int64_t ce = c + jb->cw < c1 ? c + jb->cw : c1;
        jb->res[t] = quarot__sinv_update(jb, c, ce - c);
    }
}

// After a look-ahead that prepared the next panel [k1, k1 + w1): its row exchanges of a, the copy of
// its pivot rows into wr (the panel's columns zeroed there) and the zeroing of those rows of a, by
// chunks of columns [t cw, t cw + cw), each chunk doing all the exchanges in their order (the same
// moves as whole-row exchanges).
typedef struct quarot__sinv_xjob {
    int64_t n, k1, w1, cw;
    float *a, *wr;
    const int64_t* piv;
} quarot__sinv_xjob;

static void quarot__sinv_xchg_task(void* arg, int64_t t) {
    const quarot__sinv_xjob* jb = (const quarot__sinv_xjob*)arg;
    const int64_t n = jb->n, c0 = t * jb->cw, c1 = c0 + jb->cw < n ? c0 + jb->cw : n;
    const int64_t z0 = jb->k1 > c0 ? jb->k1 : c0, z1 = jb->k1 + jb->w1 < c1 ? jb->k1 + jb->w1 : c1;
    int64_t jj, i;
    for (jj = jb->k1; jj < jb->k1 + jb->w1; ++jj)
        if (jb->piv[jj] != jj) quarot__sinv_swap(c1 - c0, jb->a + jj * n + c0, jb->a + jb->piv[jj] * n + c0);
    for (i = 0; i < jb->w1; ++i) {
        float* ar = jb->a + (jb->k1 + i) * n;
        float* wrow = jb->wr + i * n;
        memcpy(wrow + c0, ar + c0, (size_t)(c1 - c0) * sizeof(float));
        if (z0 < z1) memset(wrow + z0, 0, (size_t)(z1 - z0) * sizeof(float));
        memset(ar + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    }
}

static quarot_result quarot__sinv(int64_t n, float* a, int64_t* perm, float* work, const quarot_env* env) {
    int64_t nb = n < QUAROT__SINV_NB ? n : QUAROT__SINV_NB, k0, i, c, jj;
    float* pb = work;                              // [n][nb]  panel: LU, then R P^-1
    float* pbn = work + n * nb;                    // [n][nb]  the next panel (look-ahead)
    float* wr = pbn + n * nb;                      // [nb][n]  the pivot rows before the exchange
    float* pi = wr + nb * n;                       // [nb][nb] P^-1 (row stride w)
    float* g = pi + nb * nb;                       // [n][nb]  the next panel's columns in pivot order
    float* epk = g + n * nb;                       // [n + 16][nb] E packed (64-byte aligned)
    float* epkn = epk + (n + 16) * nb + 16;        // [n + 16][nb] the next panel's E packed
    int64_t* piv = perm + n;
    const int nt0 = env && env->parallel.run ? env->parallel.n_threads : 1;
    const int threads = nt0 < QUAROT__SINV_TMAX ? nt0 : QUAROT__SINV_TMAX;   // > 1: look ahead
    int have_e = 0, packed = 0;                    // pb holds E already (and epk its packing)
    quarot_env serial;                             // the panel's small products run on the calling thread
#if !defined(QUAROT_USE_CBLAS)
    quarot__sgemm_cfg cfg;
#endif
    quarot_result res = QUAROT_OK;
    if (env) serial = *env;
    else memset(&serial, 0, sizeof serial);
    serial.parallel.run = NULL;
    serial.parallel.n_threads = 1;
    epk = (float*)quarot__align64(epk);
    epkn = (float*)quarot__align64(epkn);
#if !defined(QUAROT_USE_CBLAS)
    {                                              // the built-in SGEMM's blocking: E packed once per panel
        quarot_isa isa = QUAROT_ISA_DEFAULT;
        if (threads > 1 && quarot__isa_resolve(isa, &isa) == QUAROT_OK) {
            quarot__sgemm_select(isa, &cfg);
            packed = nb <= cfg.kc && cfg.mr <= 16;  // one k block; n rounded up to mr fits [n + 16]
        }
    }
#endif
    res = quarot__sinv_lu(n, a, 1, 0, nb, nb, pb, piv, &serial);   // (1) of the first panel
    for (k0 = 0; k0 < n && res == QUAROT_OK; k0 += nb) {
        int64_t w = n - k0 < nb ? n - k0 : nb, k1 = k0 + w, w1 = n - k1 < nb ? n - k1 : nb;
        float* t;
        if (!have_e) {                             // (2) P^-1 by scalar exchange
            for (i = 0; i < w; ++i) memcpy(pi + i * w, a + (k0 + i) * n + k0, (size_t)w * sizeof(float));
            res = quarot__sinv_pinv(w, pi);
            if (res != QUAROT_OK) return res;
        }
        // (3) the block exchange as two SGEMMs. W = the pivot rows with the panel's columns zeroed; the
        // panel buffer becomes E = [R P^-1 above; P^-1; R P^-1 below] (the block rows of the first product,
        // P P^-1, are replaced); the pivot rows of a are zeroed; then a += -E W gives S - (R P^-1) Q in the
        // other rows and -P^-1 Q in the pivot rows (the panel's columns are overwritten with E last).
        // (With have_e the previous look-ahead and exchange pass did all of this but the last product.)
        if (!have_e) {
            for (i = 0; i < w; ++i) {
                memcpy(wr + i * n, a + (k0 + i) * n, (size_t)n * sizeof(float));
                memset(wr + i * n + k0, 0, (size_t)w * sizeof(float));
            }
            res = quarot_sgemm(0, 0, n, w, w, 1.0f, a + k0, n, pi, w, 0.0f, pb, nb, env);
            if (res != QUAROT_OK) return res;
            for (i = 0; i < w; ++i) {
                memcpy(pb + (k0 + i) * nb, pi + i * w, (size_t)w * sizeof(float));
                memset(a + (k0 + i) * n, 0, (size_t)n * sizeof(float));
            }
        }
        if (w1 > 0 && threads > 1) {
            // Look-ahead: the next panel's update and LU (one task) beside the update of the other
            // columns and E's copy (the other tasks); its row exchanges of a come last. The order of
            // the work changes, not its arithmetic: the same bits as the plain loop below.
            quarot__sinv_job jb;
            const int64_t left = k0, right = n - k1 - w1;
            int64_t nt;
            int per = packed ? 4 : 2;
            memset(&jb, 0, sizeof jb);
            jb.n = n; jb.k0 = k0; jb.w = w; jb.nb = nb; jb.k1 = k1; jb.w1 = w1;
            jb.a = a; jb.e = pb; jb.wr = wr; jb.pbn = pbn; jb.piv = piv; jb.serial = &serial;
#if !defined(QUAROT_USE_CBLAS)
            if (packed) {
                if (!have_e) quarot__gemm_pack_a_s(0, pb, nb, n, w, cfg.mr, epk);
                jb.cfg = cfg;
                jb.epk = epk;
                jb.g = g; jb.pi = pi; jb.epkn = epkn; jb.idx = perm;   // perm's first half is free until the end
            }
#endif
            // the other columns in chunks of a multiple of 64 columns, about `per` per thread
            jb.cw = (left + right + per * threads - 1) / (per * threads);
            jb.cw = jb.cw < 64 ? 64 : (jb.cw + 63) / 64 * 64;
            jb.nl = (left + jb.cw - 1) / jb.cw;
            nt = 2 + jb.nl + (right + jb.cw - 1) / jb.cw;
            quarot_env_parallel_for(env, quarot__sinv_task, &jb, nt);
            for (i = nt - 1; i >= 0; --i)          // the updates' errors first, then the LU's
                if (jb.res[i] != QUAROT_OK) return jb.res[i];
            if (packed) {                          // the next panel's exchanges, W and zeroed rows
                quarot__sinv_xjob xj;
                xj.n = n; xj.k1 = k1; xj.w1 = w1; xj.a = a; xj.wr = wr; xj.piv = piv;
                xj.cw = jb.cw;
                quarot_env_parallel_for(env, quarot__sinv_xchg_task, &xj, (n + xj.cw - 1) / xj.cw);
            } else {
                for (jj = k1; jj < k1 + w1; ++jj)  // the next panel's row exchanges, in their order
                    if (piv[jj] != jj) quarot__sinv_swap(n, a + jj * n, a + piv[jj] * n);
            }
            t = pb; pb = pbn; pbn = t;
            t = epk; epk = epkn; epkn = t;
            have_e = packed;
        } else {
            res = quarot_sgemm(0, 0, n, n, w, -1.0f, pb, nb, wr, n, 1.0f, a, n, env);
            if (res != QUAROT_OK) return res;
            for (i = 0; i < n; ++i) memcpy(a + i * n + k0, pb + i * nb, (size_t)w * sizeof(float));
            if (w1 > 0) res = quarot__sinv_lu(n, a, 1, k1, w1, nb, pb, piv, &serial);   // (1) of the next panel
            have_e = 0;
        }
    }
    if (res != QUAROT_OK) return res;
    for (c = 0; c < n; ++c) perm[c] = c;           // inv(A) = inv(P A) P: the swaps on columns, last first
    for (c = n - 1; c >= 0; --c) {
        int64_t t = perm[c];
        perm[c] = perm[piv[c]];
        perm[piv[c]] = t;
    }
    return QUAROT_OK;
}

// Passes of a Newton step over [n][n] floats, 64 rows per task through env's parallel hook, each task
// summing the squares of its rows in double (partials added in task order: the same bits for any split).
//   op 0: g = y^T (16 x 16 blocks), part = sum g^2 (the squares of X^-1: only the norm is read from it)
//   op 1: x = y = (mu x + X^-T / mu) / 2 row by row, part = sum x^2 (the new X). Row r of X^-T is row
//         perm[r] of g: X^-1 = y with its columns permuted (column c is y's column perm[c]), so
//         X^-T[r][c] = y[c][perm[r]] = g[perm[r]][c], a contiguous row
//   op 2: part = sum x^2
// (Through g every pass reads and writes whole rows, where a gather of X^-1 = y[r][perm[c]] element
// by element, or a transpose with scalar moves, would not; the arithmetic is the same either way.)
typedef struct quarot__newton_job {
    int op;
    int64_t n;
    float *x, *y, *g;
    const int64_t* perm;
    double mu;
    double* part;
} quarot__newton_job;

// sum of x[c]^2 in double over 8 interleaved partial sums (fixed-length chunks the compiler vectorizes),
// added in a fixed tree: the same bits wherever the row is.
static double quarot__sumsq_f32(const float* QUAROT__RESTRICT x, int64_t n) {
    double acc[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t c = 0;
    int q;
    for (; c + 8 <= n; c += 8)
        for (q = 0; q < 8; ++q) acc[q] += (double)x[c + q] * (double)x[c + q];
    for (; c < n; ++c) acc[c & 7] += (double)x[c] * (double)x[c];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// x = y = (float)(hm x + hi g) over n floats, in 16-float chunks of fixed length (vector code at -O2)
static void quarot__newton_combine(int64_t n, double hm, double hi, float* QUAROT__RESTRICT x,
                                   float* QUAROT__RESTRICT y, const float* QUAROT__RESTRICT g) {
    int64_t c = 0;
    int q;
    for (; c + 16 <= n; c += 16)
        for (q = 0; q < 16; ++q) {
            float v = (float)(hm * (double)x[c + q] + hi * (double)g[c + q]);
            x[c + q] = v;
            y[c + q] = v;
        }
    for (; c < n; ++c) {
        float v = (float)(hm * (double)x[c] + hi * (double)g[c]);
        x[c] = v;
        y[c] = v;
    }
}

static void quarot__newton_task(void* arg, int64_t t) {
    const quarot__newton_job* jb = (const quarot__newton_job*)arg;
    int64_t n = jb->n, r0 = t * 64, r1 = r0 + 64 < n ? r0 + 64 : n, r, c, c0, rr;
    double s = 0.0;
    if (jb->op == 0) {
        for (c0 = 0; c0 < n; c0 += 16) {           // g[r][c] = y[c][r] for r in [r0, r1), c in [c0, c0 + 16)
            int64_t c1 = c0 + 16 < n ? c0 + 16 : n;
            for (rr = r0; rr < r1; rr += 16) {
                int64_t re = rr + 16 < r1 ? rr + 16 : r1;
#if defined(QUAROT__HAVE_AVX512)
                if (c1 - c0 == 16 && re - rr == 16) {
                    quarot__gemm_tr16_avx512(jb->y + c0 * n + rr, n, jb->g + rr * n + c0, n);
                    continue;
                }
#endif
                for (r = rr; r < re; ++r)
                    for (c = c0; c < c1; ++c) jb->g[r * n + c] = jb->y[c * n + r];
            }
        }
        for (r = r0; r < r1; ++r) s += quarot__sumsq_f32(jb->g + r * n, n);
    } else if (jb->op == 1) {
        double hm = 0.5 * jb->mu, hi = 0.5 / jb->mu;
        for (r = r0; r < r1; ++r) {
            quarot__newton_combine(n, hm, hi, jb->x + r * n, jb->y + r * n, jb->g + jb->perm[r] * n);
            s += quarot__sumsq_f32(jb->x + r * n, n);
        }
    } else {
        for (r = r0; r < r1; ++r) s += quarot__sumsq_f32(jb->x + r * n, n);
    }
    jb->part[t] = s;
}

static double quarot__newton_pass(int op, int64_t n, float* x, float* y, float* g, const int64_t* perm, double mu,
                                  double* part, const quarot_env* env) {
    quarot__newton_job jb;
    int64_t t, nt = (n + 63) / 64;
    double s = 0.0;
    jb.op = op; jb.n = n; jb.x = x; jb.y = y; jb.g = g; jb.perm = perm; jb.mu = mu; jb.part = part;
    quarot_env_parallel_for(env, quarot__newton_task, &jb, nt);
    for (t = 0; t < nt; ++t) s += part[t];
    return s;
}

// sigma_min(X), estimated from above by power iteration on X^-1 X^-T = y y^T (y = X^-1 with its columns
// permuted, g = y^T; both are at hand after the first inverse): u <- y (g u) / ||.||, and for a unit u
// 1 / sqrt(||y y^T u||) >= 1 / ||X^-1||_2 = sigma_min(X), approaching it as u converges. u [n] is
// the left singular vector of X^-1 for sigma_min, which does not depend on the pivoting; warm: u
// holds the previous call's (C changes little between optimizer steps). w: [n] doubles of work.
// Returns 0 when X^-1 is zero or not finite (the caller keeps its estimate).
static double quarot__newton_smin(int64_t n, const float* y, const float* g, double* u, double* w, int warm,
                                  const quarot_env* env) {
    int64_t i;
    int it, iters = warm ? QUAROT__NEWTON_POWER_WARM : QUAROT__NEWTON_POWER_COLD;
    double nu = 0.0;
    quarot__adapt_pw_job jb;
    if (warm) for (i = 0; i < n; ++i) nu += u[i] * u[i];
    if (!(nu > 0.0) || !(nu <= 1e300)) {          // cold, or the previous call failed: a fixed start
        nu = 0.0;                                  //   with weight everywhere
        for (i = 0; i < n; ++i) {
            u[i] = 1.0 + 0.125 * (double)(i % 7);
            nu += u[i] * u[i];
        }
    }
    nu = 1.0 / sqrt(nu);
    for (i = 0; i < n; ++i) u[i] *= nu;
    jb.n = n;
    for (it = 0; it < iters; ++it) {
        jb.c = g; jb.x = u; jb.y = w;              // w = y^T u
        quarot_env_parallel_for(env, quarot__adapt_pw_rows, &jb, (n + 63) / 64);
        jb.c = y; jb.x = w; jb.y = u;              // u = y y^T u
        quarot_env_parallel_for(env, quarot__adapt_pw_rows, &jb, (n + 63) / 64);
        nu = 0.0;
        for (i = 0; i < n; ++i) nu += u[i] * u[i];
        if (!(nu > 0.0) || !(nu <= 1e300)) return 0.0;
        nu = sqrt(nu);                             // ||y y^T u|| <= ||X^-1||_2^2
        for (i = 0; i < n; ++i) u[i] /= nu;
    }
    return 1.0 / sqrt(nu);
}

// Scaled Newton steps on X [n][n] (in place) until the predicted ||X^T X - I||_F <= QUAROT__NEWTON_STOP
// or the interval bound c_k^2 - 1 <= tol (see above); alpha, beta: the estimated extreme singular
// values of X (beta <= 0: Frobenius scaling; beta > 0 is replaced by QUAROT__NEWTON_BETA times the
// power estimate of sigma_min once X^-1 is known; pv: [2n] doubles, pv[0, n) the power vector, the
// previous call's when warm). y, g: [n][n] floats of work; perm: [2n]; work:
// quarot__sinv_floats(n); part: [n/64 + 1]. *steps: the steps done (each one inverse).
static quarot_result quarot__newton_polar(int64_t n, float* x, float* y, float* g, int64_t* perm, float* work,
                                          double* part, double* pv, int warm, double alpha, double beta, double tol,
                                          int* steps, const quarot_env* env) {
    double nx2 = quarot__newton_pass(2, n, x, NULL, NULL, NULL, 1.0, part,
                                     env), ny2, nx, ny, mu, sdev, zeta = 0.0, ck = 0.0;
    quarot_result res;
    *steps = 0;
    memcpy(y, x, (size_t)(n * n) * sizeof(float));
    while (*steps < QUAROT__NEWTON_MAX) {
        res = quarot__sinv(n, y, perm, work, env);
        if (res != QUAROT_OK) return res;
        ny2 = quarot__newton_pass(0, n, NULL, y, g, NULL, 1.0, part, env);         // G = Y^T (||X^-1||_F^2)
        if (!(nx2 > 0.0) || !(nx2 <= 1e300) || !(ny2 > 0.0) || !(ny2 <= 1e300)) return QUAROT_ERR_NONFINITE;
        nx = sqrt(nx2);
        ny = sqrt(ny2);
        // cond_2(X) >= ||X||_F ||X^-1||_F / n: above 2^24 X is singular to float precision and the
        // inverse is noise (stage 1's lambda keeps cond(X) near 1/reg = 1e5)
        if (nx * ny > 16777216.0 * (double)n) return QUAROT_ERR_NOT_CONVERGED;
        mu = sqrt(ny / nx);
        if (beta > 0.0 && *steps == 0 && pv) {
            double se = quarot__newton_smin(n, y, g, pv, pv + n, warm, env);
            if (se > 0.0) beta = QUAROT__NEWTON_BETA * se;
        }
        if (beta > 0.0) {
            if (*steps == 0) zeta = 1.0 / sqrt(alpha * beta);
            else if (*steps == 1) zeta = sqrt(2.0 * sqrt(alpha * beta) / (alpha + beta));
            else zeta = 1.0 / sqrt(0.5 * (zeta + 1.0 / zeta));
            mu = zeta;
        }
        sdev = mu * mu * nx2 + ny2 / (mu * mu) - 2.0 * (double)n;                    // sum (s - 1/s)^2
        nx2 = quarot__newton_pass(1, n, x, y, g, perm, mu, part, env);              // X = Y = (mu X + X^-T/mu)/2
        ++*steps;
        if (beta > 0.0) {                          // [1, c_k] holds the singular values if [beta, alpha] held them
            if (*steps == 1) ck = 0.5 * (sqrt(alpha / beta) + sqrt(beta / alpha));
            else ck = 0.5 * (sqrt(ck) + 1.0 / sqrt(ck));
        }
        if (0.25 * sdev <= QUAROT__NEWTON_STOP || (beta > 0.0 && ck * ck - 1.0 <= tol)) break;
    }
    return QUAROT_OK;
}

// >>adapt_polar
// The Newton-Schulz side and the solver itself: the minimax quintic steps and their symmetric passes,
// quarot__adapt_polar (deflation, then Newton or Newton-Schulz steps to a certified residual), the
// quantization loss, and the f64 finish of the final R.

// One Newton-Schulz step of degree 5, X <- X*(a I + b G + c G^2), G = X^T X, maps each singular value
// x to p(x) = a x + b x^3 + c x^5. For singular values in [l, 1] the coefficients are those of the best
// uniform approximation of 1 on [l, 1] by such an odd quintic (Remez exchange on four alternation
// points: p = 1 -/+ E at l, x1, x2, 1 with x1, x2 the extrema of p), the image [p(l), 1 + E] is then
// divided by 1 + E. For small l the slope a tends to 8.51: p(l)/(1 + E) ~ 4.26 l per step for two
// symmetric half-GEMMs and one GEMM (2 GEMM-equivalents), against 2.6 l for the scaled cubic's
// 1.5 GEMM-equivalents; near 1 the error goes down with the cube instead of the square. Computed
// in double per step (a few 4 x 4 solves, nothing beside the step's products). Returns 0 when the
// exchange fails (never seen; the caller then takes the scaled cubic).
static int quarot__adapt_solve4(double m[4][5]) {
    int i, j, k;
    for (i = 0; i < 4; ++i) {
        int piv = i;
        for (j = i + 1; j < 4; ++j) if (fabs(m[j][i]) > fabs(m[piv][i])) piv = j;
        if (!(fabs(m[piv][i]) > 0.0)) return 0;
        for (k = 0; k < 5; ++k) { double t = m[i][k]; m[i][k] = m[piv][k]; m[piv][k] = t; }
        for (j = 0; j < 4; ++j)
            if (j != i) {
                double f = m[j][i] / m[i][i];
                for (k = i; k < 5; ++k) m[j][k] -= f * m[i][k];
            }
    }
    for (i = 0; i < 4; ++i) m[i][4] /= m[i][i];
    return 1;
}

static int quarot__adapt_quintic(double l, double* ca, double* cb, double* cc, double* err) {
    double x[4];
    int it, i;
    if (!(l > 0.0) || !(l < 1.0)) return 0;
    x[0] = l;
    x[1] = l + (1.0 - l) * 0.1464;                 // start: Chebyshev-like points of [l, 1]
    x[2] = l + (1.0 - l) * 0.8536;
    x[3] = 1.0;
    for (it = 0; it < 100; ++it) {
        double m[4][5], sg[4] = {1.0, -1.0, 1.0, -1.0}, a, b, c, disc, y1, y2, n1, n2;
        for (i = 0; i < 4; ++i) {                  // a x + b x^3 + c x^5 + s_i E = 1
            double x2 = x[i] * x[i];
            m[i][0] = x[i];
            m[i][1] = x[i] * x2;
            m[i][2] = x[i] * x2 * x2;
            m[i][3] = sg[i];
            m[i][4] = 1.0;
        }
        if (!quarot__adapt_solve4(m)) return 0;
        a = m[0][4]; b = m[1][4]; c = m[2][4];
        *ca = a; *cb = b; *cc = c; *err = m[3][4];
        disc = 9.0 * b * b - 20.0 * a * c;         // extrema: a + 3b y + 5c y^2 = 0, y = x^2
        if (!(disc >= 0.0) || !(c > 0.0)) return 0;
        y1 = (-3.0 * b - sqrt(disc)) / (10.0 * c);
        y2 = (-3.0 * b + sqrt(disc)) / (10.0 * c);
        if (!(y1 > l * l) || !(y2 < 1.0) || !(y1 < y2)) return 0;
        n1 = sqrt(y1);
        n2 = sqrt(y2);
        if (fabs(n1 - x[1]) <= 1e-15 && fabs(n2 - x[2]) <= 1e-15) return *err > 0.0 && *err < 1.0;
        x[1] = n1;
        x[2] = n2;
    }
    return *err > 0.0 && *err < 1.0;
}

// One tile row [bi, bi + 64) of a pass over the upper triangle of G (and of G2 when not NULL), 64 x 64
// tiles: writes the full symmetric c0*I + c1*G + c2*G2 into g (G2 ignored when NULL) and returns
// max|G - I| over the row (NaN when any entry is NaN). Reads only upper entries and writes row bi's
// upper tiles and their mirror images (lower entries, read by nobody), so tile rows can run in
// parallel on the same g. Each tile is computed into a local buffer by plain loops the compiler
// vectorizes (the off-diagonal max|G_ij| as the integer maximum of the IEEE bits of |G_ij|, which
// orders numbers as floats do and puts NaN above all), then stored row-wise and transposed.
#define QUAROT__ADAPT_TB 64
static double quarot__adapt_sym_row(int64_t n, int64_t bi, float* g, const float* g2, double c0, double c1, double c2,
                                    double* fro2) {
    float tile[QUAROT__ADAPT_TB * QUAROT__ADAPT_TB];
    int64_t bj, i, j, ie = bi + QUAROT__ADAPT_TB < n ? bi + QUAROT__ADAPT_TB : n;
    uint32_t amax = 0;
    float fmax;
    double r = 0.0, off2 = 0.0, diag2 = 0.0;
    for (bj = bi; bj < n; bj += QUAROT__ADAPT_TB) {
        int64_t je = bj + QUAROT__ADAPT_TB < n ? bj + QUAROT__ADAPT_TB : n, w = je - bj;
        for (i = bi; i < ie; ++i) {
            const float* gr = g + i * n + bj;
            const float* hr = g2 ? g2 + i * n + bj : NULL;
            float* tr = tile + (i - bi) * QUAROT__ADAPT_TB;
            int64_t j0 = bi == bj ? i - bj : 0;             // the upper part of the diagonal tile
            for (j = bi == bj ? j0 + 1 : 0; j < w; ++j) {   // off the diagonal: |G_ij - 0|
                uint32_t u;
                memcpy(&u, gr + j, sizeof u);
                u &= 0x7fffffffu;
                amax = u > amax ? u : amax;
            }
            if (fro2) {                                      // sum of G_ij^2 off the diagonal (j > i)
                double ss = 0.0;
                for (j = bi == bj ? j0 + 1 : 0; j < w; ++j) ss += (double)gr[j] * (double)gr[j];
                off2 += ss;
            }
            // (c1*G + 0) + c2*G2: the + 0.0 keeps the signed zeros of the element-wise formula
            if (hr) for (j = j0; j < w; ++j) tr[j] = (float)((c1 * (double)gr[j] + 0.0) + c2 * (double)hr[j]);
            else for (j = j0; j < w; ++j) tr[j] = (float)(c1 * (double)gr[j] + 0.0);
            if (bi == bj) {                                  // diagonal element: |G_ii - 1| and + c0
                double gv = (double)gr[j0], e = fabs(gv - 1.0), v = c1 * gv + c0;
                if (hr) v += c2 * (double)hr[j0];
                tr[j0] = (float)v;
                if (r == r && !(e <= r)) r = e;              // a NaN stays
                diag2 += e * e;
            }
        }
        for (i = bi; i < ie; ++i) {                          // upper tile, row by row
            int64_t j0 = bi == bj ? i - bj : 0;
            memcpy(g + i * n + bj + j0, tile + (i - bi) * QUAROT__ADAPT_TB + j0, (size_t)(w - j0) * sizeof(float));
        }
        for (j = 0; j < w; ++j) {                            // its mirror image, row by row
            int64_t iend = bi == bj ? bi + j + 1 : ie;
            float* dst = g + (bj + j) * n;
            for (i = bi; i < iend; ++i) dst[i] = tile[(i - bi) * QUAROT__ADAPT_TB + j];
        }
    }
    memcpy(&fmax, &amax, sizeof fmax);
    if (r == r && !((double)fmax <= r)) r = (double)fmax;
    if (fro2) *fro2 = diag2 + 2.0 * off2;
    return r;
}

typedef struct quarot__adapt_sym_job {
    int64_t n;
    float* g;
    const float* g2;
    double c0, c1, c2;
    double* res;                         // [tile rows] max|G - I| per tile row
    double* fro2;                        // [tile rows] sum of (G - I)_ij^2 over the tile row's i, all j; or NULL
} quarot__adapt_sym_job;

static void quarot__adapt_sym_task(void* arg, int64_t t) {
    quarot__adapt_sym_job* jb = (quarot__adapt_sym_job*)arg;
    jb->res[t] = quarot__adapt_sym_row(jb->n, t * QUAROT__ADAPT_TB, jb->g, jb->g2, jb->c0, jb->c1, jb->c2,
                                       jb->fro2 ? jb->fro2 + t : NULL);
}

// g <- c0*I + c1*G + c2*G2 (full, symmetric) from the upper triangles, tile rows through env's parallel
// hook; returns max|G - I| (the maximum is the same whatever the split). res: [2 * (n/64 + 1)] doubles.
// fro != NULL: *fro = ||G - I||_F, from per-tile-row sums added in tile-row order (the same bits for
// any thread count).
static double quarot__adapt_sym_combine(int64_t n, float* g, const float* g2, double c0, double c1, double c2,
                                        double* res, double* fro, const quarot_env* env) {
    quarot__adapt_sym_job jb;
    int64_t t, nt = (n + QUAROT__ADAPT_TB - 1) / QUAROT__ADAPT_TB;
    double r = 0.0, f2 = 0.0;
    jb.n = n; jb.g = g; jb.g2 = g2; jb.c0 = c0; jb.c1 = c1; jb.c2 = c2; jb.res = res; jb.fro2 = fro ? res + nt : NULL;
    quarot_env_parallel_for(env, quarot__adapt_sym_task, &jb, nt);
    for (t = 0; t < nt; ++t) if (r == r && !(res[t] <= r)) r = res[t];   // a NaN stays
    if (fro) {
        for (t = 0; t < nt; ++t) f2 += res[nt + t];
        *fro = sqrt(f2);
    }
    return r;
}

// ||S||_F^2 of the symmetric S whose upper triangle is s [n][n] (the lower one is not read), per tile
// row through env's parallel hook, added in tile-row order. res: [n/64 + 1] doubles.
typedef struct quarot__adapt_fro_job {
    int64_t n;
    const float* s;
    double* res;
} quarot__adapt_fro_job;

static void quarot__adapt_fro_task(void* arg, int64_t t) {
    quarot__adapt_fro_job* jb = (quarot__adapt_fro_job*)arg;
    int64_t n = jb->n, i, j, ie = (t + 1) * QUAROT__ADAPT_TB < n ? (t + 1) * QUAROT__ADAPT_TB : n;
    double d2 = 0.0, o2 = 0.0;
    for (i = t * QUAROT__ADAPT_TB; i < ie; ++i) {
        const float* sr = jb->s + i * n;
        double ss = 0.0;
        for (j = i + 1; j < n; ++j) ss += (double)sr[j] * (double)sr[j];
        o2 += ss;
        d2 += (double)sr[i] * (double)sr[i];
    }
    jb->res[t] = d2 + 2.0 * o2;
}

// max_i sum_j |G_ij| (the inf-norm) of a full G [n][n], per tile row through env's parallel hook
// (row sums in column order: the same bits for any split). res: [n/64 + 1] doubles.
static void quarot__adapt_inf_task(void* arg, int64_t t) {
    quarot__adapt_fro_job* jb = (quarot__adapt_fro_job*)arg;
    int64_t n = jb->n, i, j, ie = (t + 1) * QUAROT__ADAPT_TB < n ? (t + 1) * QUAROT__ADAPT_TB : n;
    double m = 0.0;
    for (i = t * QUAROT__ADAPT_TB; i < ie; ++i) {
        const float* sr = jb->s + i * n;
        double rs = 0.0;
        for (j = 0; j < n; ++j) rs += fabs((double)sr[j]);
        if (!(rs <= m)) m = rs;                    // NaN propagates
    }
    jb->res[t] = m;
}

static double quarot__adapt_inf(int64_t n, const float* s, double* res, const quarot_env* env) {
    quarot__adapt_fro_job jb;
    int64_t t, nt = (n + QUAROT__ADAPT_TB - 1) / QUAROT__ADAPT_TB;
    double m = 0.0;
    jb.n = n; jb.s = s; jb.res = res;
    quarot_env_parallel_for(env, quarot__adapt_inf_task, &jb, nt);
    for (t = 0; t < nt; ++t) if (!(res[t] <= m)) m = res[t];
    return m;
}

static double quarot__adapt_fro2_upper(int64_t n, const float* s, double* res, const quarot_env* env) {
    quarot__adapt_fro_job jb;
    int64_t t, nt = (n + QUAROT__ADAPT_TB - 1) / QUAROT__ADAPT_TB;
    double f2 = 0.0;
    jb.n = n; jb.s = s; jb.res = res;
    quarot_env_parallel_for(env, quarot__adapt_fro_task, &jb, nt);
    for (t = 0; t < nt; ++t) f2 += res[t];
    return f2;
}

// U = polar(C + lambda*Q), lambda = reg*sigma_max(C), Q = rdir (an orthogonal [n][n]) or I (rdir
// NULL). C [n][n] is overwritten; x, y, g, h: [n][n] floats of work; v: [4n] doubles (v[2n, 3n): the
// Newton path's power vector, the previous call's when warm); defl: quarot__adapt_defl_doubles(n)
// doubles, or NULL (no deflation); k_warm: the previous call's out->deflated_first when defl holds
// that call's state (the deflation starts from its vectors), else 0.
// The result is in *u_out (x or y).
// QUAROT_ERR_NOT_CONVERGED when max_iter iterations reach neither tol nor the float floor (below 1e-4).
static quarot_result quarot__adapt_polar(int64_t n, float* c, const float* rdir, float* x, float* y, float* g, float* h,
                                         double* v, double* defl, int64_t* perm, float* inv_work, double reg,
                                         int k_warm, int warm, double tol, int max_iter, float** u_out,
                                         quarot__adapt_polar_out* out, const quarot_env* env) {
    double sig = 0.0, lam = 0.0, top = 0.0, s, l, prev = 0.0;
    int64_t i, nn = n * n;
    int k, nts = 0;
    quarot_result res;
    out->iterations = 0;
    out->residual = 0.0;
    out->deflated = 0;
    out->deflated_first = 0;
    out->grams = 0;
    out->products = 0;
    out->inverses = 0;
    *u_out = x;
    if (defl && n >= 8) {                          // C <- (C + lambda Q) * M, see above
        int64_t p = n / 2 < QUAROT__ADAPT_DEFL_P ? n / 2 : QUAROT__ADAPT_DEFL_P;
        res = quarot__adapt_deflate(n, c, rdir, defl, defl + nn, defl + nn + n * p, defl + nn + 2 * n * p, reg, k_warm,
                                    &sig, &lam, &top, &out->deflated, &out->deflated_first, env);
        if (res != QUAROT_OK) return res;
    } else {
        sig = quarot__adapt_sigma_max(n, c, v, v + n, env);
        lam = reg * sig;
        top = sig + lam;                           // sigma_max(C + lam Q) <= sigma_max(C) + lam
        if (sig > 0.0 && sig <= 1e150) {
            if (rdir) for (i = 0; i < nn; ++i) c[i] = (float)((double)c[i] + lam * (double)rdir[i]);
            else for (i = 0; i < n; ++i) c[i * n + i] = (float)((double)c[i * n + i] + lam);
        }
    }
    if (!(sig > 0.0) || !(sig <= 1e150)) {         // C == 0 (all activations zero): nothing to learn
        if (rdir) memcpy(x, rdir, (size_t)nn * sizeof(float));
        else {
            memset(x, 0, (size_t)nn * sizeof(float));
            for (i = 0; i < n; ++i) x[i * n + i] = 1.0f;
        }
        return sig == 0.0 ? QUAROT_OK : QUAROT_ERR_NONFINITE;
    }
    s = top * 1.02;                                // estimates are from below; the inf-norm check corrects
    quarot__adapt_ew(3, n, NULL, x, c, s, env);   // X = C / s
    l = lam / s;                                   // lower end guess (exact for symmetric C >= 0)
    if (inv_work) {                                // scaled Newton first, Newton-Schulz only to finish
        res = quarot__newton_polar(n, x, y, g, perm, inv_work, v, v + 2 * n, warm, 1.0, l, tol, &nts, env);
        out->inverses = nts;
        out->iterations = nts;
        if (res != QUAROT_OK) return res;
    }
    for (k = 0;; ++k) {
        double r, rf, a, b, cq, e, rho, fs = 1.0;
        float* t;
        res = quarot__adapt_gram(n, x, g, env);
        if (res != QUAROT_OK) return res;
        ++out->grams;
        r = quarot__adapt_sym_combine(n, g, NULL, 0.0, 1.0, 0.0, v, &rf, env);   // residual of X; G made full
        out->iterations = k + nts;
        out->residual = r;
        if (!(r <= 1e30)) return QUAROT_ERR_NONFINITE;
        if (r <= tol) return QUAROT_OK;
        if (k > 0 && r < 1e-4 && r > 0.5 * prev) return QUAROT_OK;   // float floor reached
        if (k >= max_iter) return QUAROT_ERR_NOT_CONVERGED;
        prev = r;
        if ((k > 0 || nts > 0) && (rf * rf <= QUAROT__ADAPT_FINISH * tol ||
                                   (rf <= 0.1 && 0.7 * rf * rf * rf <= QUAROT__ADAPT_FINISH * tol))) {
            // The last step, with nothing to check after it. Every eigenvalue of G is 1 + d with
            // |d| <= ||G - I||_2 <= ||G - I||_F = rf. The cubic X (3I - G)/2 maps it to
            // 1 - 3d^2/4 - d^3/4, within rf^2 of 1, for one GEMM; when rf^2 is not small enough, the
            // quintic X (15I - 10G + 3G^2)/8 maps it to 1 + 5d^3/8 - 15d^4/64 + 9d^5/64, within 0.7 rf^3
            // of 1 (|d| <= 0.1), for G^2 and one GEMM. Either way within tol/2 in exact arithmetic; the
            // rounding of the last product adds its float floor (max|X^T X - I| measured 0.6e-6 to
            // 2.5e-6 after it at b = 256..4096), so the result stays within tol.
            int cubic = rf * rf <= QUAROT__ADAPT_FINISH * tol;
            if (!cubic) {
                res = quarot__adapt_gram(n, g, h, env);                // G^2 = G^T G (upper)
                if (res != QUAROT_OK) return res;
                ++out->grams;
            }
            quarot__adapt_sym_combine(n, g, cubic ? NULL : h, cubic ? 1.5 : 15.0 / 8.0, cubic ? -0.5 : -10.0 / 8.0,
                                      cubic ? 0.0 : 3.0 / 8.0, v, NULL, env);
            res = quarot_sgemm(0, 0, n, n, n, 1.0f, x, n, g, n, 0.0f, y, n, env);
            if (res != QUAROT_OK) return res;
            ++out->products;
            *u_out = y;
            out->iterations = k + 1 + nts;
            out->residual = cubic ? rf * rf : 0.7 * rf * rf * rf;   // the bound, not a measurement
            return QUAROT_OK;
        }
        if (k == 0 && nts > 0) {
            // after Newton: every eigenvalue of G is within ||G - I||_2 <= rf of 1, so sigma_max(X) <=
            // sqrt(1 + rf) and sigma_min(X) >= sqrt(1 - rf) (no G^2 needed)
            double ub = sqrt(1.0 + rf) * (1.0 + 1e-4);
            fs = 1.0 / ub;
            l = (rf < 1.0 ? sqrt(1.0 - rf) : 0.0) * fs;
        } else if (k == 0) {
            // certain bounds: sigma_max(X)^4 = ||G^2||_2 <= ||G^2||_F, sigma_max(X)^2 <= ||G||_inf, the smaller
            // (on the bench's data at b = 1024 1.25-1.35 and 1.9-2.1 times the estimate): X is scaled by
            // fs = 1/bound (up or down), folded into the coefficients below
            double ub, ui;
            res = quarot__adapt_gram(n, g, h, env);                    // G^2 = G^T G (upper)
            if (res != QUAROT_OK) return res;
            ++out->grams;
            ub = sqrt(sqrt(sqrt(quarot__adapt_fro2_upper(n, h, v, env))));
            ui = sqrt(quarot__adapt_inf(n, g, v, env));                // G is full here
            if (ui < ub) ub = ui;
            ub *= 1.0 + 1e-4;                                          // + rounding of G, G^2
            if (!(ub > 0.0) || !(ub <= 1e30)) return QUAROT_ERR_NONFINITE;
            fs = 1.0 / ub;
            l *= fs;
        }
        // singular values of X in [l, 1 + margin]: the best quintic for [l/rho, 1] on X/rho
        rho = 1.0 + QUAROT__ADAPT_MARGIN;
        if (l / rho < 1e-9) l = 1e-9 * rho;
        if (l / rho < 0.99 && quarot__adapt_quintic(l / rho, &a, &b, &cq, &e)) {
            double lm = l / rho, f = 1.0 / (1.0 + e), y2 = lm * lm;
            l = f * lm * (a + y2 * (b + y2 * cq));
            a *= f / rho;
            b *= f / (rho * rho * rho);
            cq *= f / (rho * rho * rho * rho * rho);
        } else if (l / rho < 0.99) {               // fallback: the scaled cubic (Chen & Chow)
            double lm = l / rho, al = sqrt(3.0 / (1.0 + lm + lm * lm)), sc = al / rho;
            a = 1.5 * sc;
            b = -0.5 * sc * sc * sc;
            cq = 0.0;
            l = 0.5 * al * lm * (3.0 - al * al * lm * lm);
        } else {                                   // plain quintic Newton-Schulz (fixed point 1, flat there)
            double y2 = l * l;
            a = 15.0 / 8.0;
            b = -10.0 / 8.0;
            cq = 3.0 / 8.0;
            l = l * (a + y2 * (b + y2 * cq));
        }
        if (fs != 1.0) {                           // T for X/ub from G and G^2 of X
            a *= fs;
            b *= fs * fs * fs;
            cq *= fs * fs * fs * fs * fs;
        }
        if (cq != 0.0 && (k > 0 || nts > 0)) {     // (k = 0 without Newton: computed above)
            res = quarot__adapt_gram(n, g, h, env);                    // G^2 = G^T G (upper)
            if (res != QUAROT_OK) return res;
            ++out->grams;
        }
        quarot__adapt_sym_combine(n, g, cq != 0.0 ? h : NULL, a, b, cq, v, NULL, env);   // T = a I + b G + c G^2
        res = quarot_sgemm(0, 0, n, n, n, 1.0f, x, n, g, n, 0.0f, y, n, env);    // X <- X*T
        if (res != QUAROT_OK) return res;
        ++out->products;
        t = x; x = y; y = t;
        *u_out = x;
    }
}

// B = Q(A) and L(A) = ||A - B||_F / (rows*cols) for A, B [rows][cols], 64 rows per task through env's
// parallel hook: each task quantizes its rows and sums their squared errors in double, the partial
// sums are added in task order (the same bits for any thread count). part: [rows/64 + 1] doubles,
// st: as many results (the first error in row order is returned).
typedef struct quarot__adapt_ql_job {
    const float* a;
    float* b;
    int64_t rows, cols;
    const quarot_quant_desc* qd;
    double* part;
    quarot_result* st;
} quarot__adapt_ql_job;

static void quarot__adapt_ql_task(void* arg, int64_t t) {
    const quarot__adapt_ql_job* jb = (const quarot__adapt_ql_job*)arg;
    int64_t r0 = t * 64, nr = jb->rows - r0 < 64 ? jb->rows - r0 : 64, i, cnt = nr * jb->cols;
    const float* a = jb->a + r0 * jb->cols;
    float* b = jb->b + r0 * jb->cols;
    double s = 0.0;
    memcpy(b, a, (size_t)cnt * sizeof(float));
    jb->st[t] = quarot_fake_quant_f32(b, nr, jb->cols, jb->cols, jb->qd);
    for (i = 0; i < cnt; ++i) {
        double d = (double)a[i] - (double)b[i];
        s += d * d;
    }
    jb->part[t] = s;
}

static quarot_result quarot__adapt_quant_loss(const float* a, float* b, int64_t rows, int64_t cols,
                                              const quarot_quant_desc* qd, double* part, quarot_result* st,
                                              double* loss, const quarot_env* env) {
    quarot__adapt_ql_job jb;
    int64_t t, nt = (rows + 63) / 64;
    double s = 0.0;
    quarot_result res = QUAROT_OK;
    jb.a = a; jb.b = b; jb.rows = rows; jb.cols = cols; jb.qd = qd; jb.part = part; jb.st = st;
    quarot_env_parallel_for(env, quarot__adapt_ql_task, &jb, nt);
    for (t = 0; t < nt; ++t) {
        s += part[t];
        if (res == QUAROT_OK) res = st[t];
    }
    *loss = sqrt(s) / ((double)rows * (double)cols);
    return res;
}

// E = R^T R for R [n][n] doubles: the upper tiles, then the lower triangle mirrored. Each E_ji (j > i)
// of the full product is the chain of E_ij with the two factors of every product swapped (the kernels
// multiply or fuse-multiply-add them, both commutative), so the mirror holds the full product's bits.
static quarot_result quarot__adapt_dgram(int64_t n, const double* r, double* e, const quarot_env* env) {
#if !defined(QUAROT_USE_CBLAS)
    quarot_result res = quarot__dsyrk_upper(n, n, r, n, e, n, env);
    if (res == QUAROT_OK) quarot__gram_mirror_d(n, e);
    return res;
#else
    return quarot_dgemm(1, 0, n, n, n, 1.0, r, n, r, n, 0.0, e, n, env);
#endif
}

// R [n][n] (float) -> out (double), then Newton-Schulz in double until max|R^T R - I| <= 1e-9.
// e, t: [n][n] doubles of work.
// One step R' = R (I - E/2), E = R^T R - I (symmetric) as computed, leaves
//     R'^T R' - I = -3/4 E^2 + 1/4 E^3 + rounding,
// and by Cauchy-Schwarz on E's rows, |(E^2)_ij| <= rho^2 and |(E^3)_ij| <= rho^2 ||E||_2 <= rho^2 ||E||_F
// with rho the largest row norm of E. The rounding (the double E against the exact R^T R, the update's
// product and sum) adds at most about 2 (n + 2) 2^-53 (1 + rho)^2 per element: 4 (n + 2) 2^-53 covers
// it while rho <= 1e-2. When that bound is within 1e-9 the step's result needs no X^T X to show it (the
// measured max|R'^T R' - I| equals the bound's E^2 term: 7.3e-11 after one step at b = 4096 on the
// bench's data, rho ~ 1e-5), so the check's DSYRK is skipped.
static quarot_result quarot__adapt_finish(int64_t n, const float* r, double* out, double* e, double* t,
                                          const quarot_env* env) {
    int64_t i, j, nn = n * n;
    int it;
    quarot_result res;
    for (i = 0; i < nn; ++i) out[i] = (double)r[i];
    for (it = 0; it < 4; ++it) {
        double worst = 0.0, rho2 = 0.0, f2 = 0.0, bound;
        res = quarot__adapt_dgram(n, out, e, env);                                     // E = R^T R - I
        if (res != QUAROT_OK) return res;
        for (i = 0; i < n; ++i) e[i * n + i] -= 1.0;
        for (i = 0; i < n; ++i) {
            double r2 = 0.0;
            for (j = 0; j < n; ++j) {
                double v = e[i * n + j];
                if (!(fabs(v) <= worst)) worst = fabs(v);
                r2 += v * v;
            }
            if (!(r2 <= rho2)) rho2 = r2;
            f2 += r2;
        }
        if (worst <= 1e-9) return QUAROT_OK;
        if (!(worst <= 0.1)) return QUAROT_ERR_NOT_CONVERGED;
        memcpy(t, out, (size_t)nn * sizeof(double));                                   // R <- R - R*E/2
        res = quarot_dgemm(0, 0, n, n, n, -0.5, t, n, e, n, 1.0, out, n, env);
        if (res != QUAROT_OK) return res;
        bound = 0.75 * rho2 * (1.0 + sqrt(f2) / 3.0) + 4.0 * (double)(n + 2) * 1.1102230246251565e-16;
        if (rho2 <= 1e-4 && bound <= 1e-9) return QUAROT_OK;                        // certified: see above
    }
    return QUAROT_ERR_NOT_CONVERGED;
}

// >>adapt_stage1
// Stage 1 (msModelSlim's Adapt Rotation, see >>adapt): X*H from the captured activations, then steps
// A = XH*R, B = Q(A), R <- polar((XH)^T B + lambda R) keeping the R of the lowest loss ||A - B||; the
// best R made orthogonal in double and the context filled.

QUAROT_API const char* quarot_adapt_polar_method_name(int method) {
    if (method == QUAROT_ADAPT_POLAR_DEFAULT) return "default";
    if (method == QUAROT_ADAPT_POLAR_NEWTON) return "newton";
    if (method == QUAROT_ADAPT_POLAR_NEWTON_SCHULZ) return "newton-schulz";
    return NULL;
}

// " 'a', 'b'" list of the capture's patterns into buf.
static void quarot__adapt_patterns(const quarot_adapt_capture* cap, char* buf, size_t size) {
    size_t used = 0;
    int64_t i;
    buf[0] = 0;
    for (i = 0; i < cap->n_patterns; ++i) {
        int w = snprintf(buf + used, size - used, "%s'%s'", i ? ", " : "", cap->patterns[i]);
        if (w < 0 || (size_t)w >= size - used) return;
        used += (size_t)w;
    }
}

// What one stage-1 run decided (the options with their defaults, the sizes) and its work: the steps'
// floats (freed by quarot__stage1_free_work), then the best R (Rb) and the double work that makes it
// orthogonal (freed by quarot__stage1_free_best).
typedef struct quarot__stage1 {
    quarot_adapt_desc dd;
    int64_t hidden, b, hb, N, M, mb;            // b: the block, hb: its Hadamard order, M = N*(hidden/b) rows
    size_t mbytes, bbytes;                      // [M][b] and [b][b] floats
    int bits, max_iter, newton;
    double tol, reg;
    quarot_rotation had;
    quarot_quant_desc qd;
    float *xh, *A, *B, *R, *Rn, *Rb, *C, *X, *Y, *G, *iw;
    double *vw, *defl, *qpart, *e, *tt;
    int64_t* perm;
    quarot_result* qst;
} quarot__stage1;

// desc with its defaults, checked against the capture; the sizes of the work. An error sets ctx->error
// (but for the size overflow).
static quarot_result quarot__stage1_check(const quarot_adapt_capture* cap, const quarot_adapt_desc* desc,
                                          quarot_adapt_context* ctx, quarot__stage1* s) {
    quarot_adapt_desc* dd = &s->dd;
    int64_t li;
#define QUAROT__ADAPT_FAIL(code, ...)                                                                  \
    do { quarot__adapt_msg(ctx->error, sizeof ctx->error, __VA_ARGS__); return code; } while (0)
    if (!cap || !cap->patterns)
        QUAROT__ADAPT_FAIL(QUAROT_ERR_INVALID_ARGUMENT, "adapt stage 1: no (initialized) capture");
    if (desc) *dd = *desc; else memset(dd, 0, sizeof *dd);
    s->bits = 4;
    if (dd->quant_dtype && strcmp(dd->quant_dtype, "int4") != 0) {
        if (strcmp(dd->quant_dtype, "int8") != 0)
            QUAROT__ADAPT_FAIL(QUAROT_ERR_INVALID_ARGUMENT,
                               "adapt stage 1: quant_dtype '%.32s' is not supported (use \"int4\" or \"int8\")",
                               dd->quant_dtype);
        s->bits = 8;
    }
    if (dd->steps < 0 || dd->steps > (1 << 20) || dd->patience < 0 || dd->polar.max_iter < 0 ||
        !(dd->reg >= 0.0 && dd->reg < 1.0) || !(dd->polar.tol >= 0.0 && dd->polar.tol < 1.0))
        QUAROT__ADAPT_FAIL(QUAROT_ERR_INVALID_ARGUMENT, "adapt stage 1: steps (<= 2^20), patience, polar.max_iter "
                                                        "must be >= 0, reg and polar.tol in [0, 1)");
    if (!quarot_adapt_polar_method_name(dd->polar_method))
        QUAROT__ADAPT_FAIL(QUAROT_ERR_INVALID_ARGUMENT,
                           "adapt stage 1: polar_method %d is not a quarot_adapt_polar_method", dd->polar_method);
    if (dd->steps == 0) dd->steps = 20;
    if (dd->patience == 0) dd->patience = 5;
    s->reg = dd->reg > 0.0 ? dd->reg : 1e-5;
    s->tol = dd->polar.tol > 0.0 ? dd->polar.tol : 1e-5;
    s->max_iter = dd->polar.max_iter > 0 ? dd->polar.max_iter : 100;
    s->hidden = cap->hidden;
    s->b = dd->block_size > 0 ? dd->block_size : s->hidden;
    s->newton = dd->polar_method == QUAROT_ADAPT_POLAR_NEWTON ||
                (dd->polar_method == QUAROT_ADAPT_POLAR_DEFAULT && s->b >= 512);
    if (s->b > s->hidden || s->hidden % s->b != 0)
        QUAROT__ADAPT_FAIL(QUAROT_ERR_INVALID_ARGUMENT, "adapt stage 1: block_size %lld does not divide hidden %lld",
                           (long long)s->b, (long long)s->hidden);
    if (cap->status != QUAROT_OK)
        QUAROT__ADAPT_FAIL(cap->status, "adapt stage 1: capture failed: %s",
                           cap->error[0] ? cap->error : quarot_result_string(cap->status));
    s->N = 0;
    for (li = 0; li < cap->n_linears; ++li) s->N += cap->linears[li].count;
    if (s->N == 0) {
        char pats[160], names[300];
        quarot__adapt_patterns(cap, pats, sizeof pats);
        quarot_adapt_capture_list(cap, names, sizeof names);
        QUAROT__ADAPT_FAIL(QUAROT_ERR_NOT_FOUND, "adapt stage 1: layer_type %s matched no linear layer, so no "
                                                 "activations were captured; linear layers seen: %s",
                           pats, cap->n_names ? names : "(none: no input was fed to the capture)");
    }
    s->hb = quarot__adapt_hadamard_order(s->b, QUAROT_FALLBACK_DEFAULT);
    if (s->hb == 0)
        QUAROT__ADAPT_FAIL(QUAROT_ERR_UNSUPPORTED_SIZE,
                           "adapt stage 1: no Hadamard matrix of order > 1 divides block %lld", (long long)s->b);
    s->M = s->N * (s->hidden / s->b);           // N <= n_linears*max_samples, checked at init
    if (!quarot__mul_size((size_t)s->M, (size_t)s->b, &s->mbytes) ||
        !quarot__mul_size(s->mbytes, sizeof(double), &s->mbytes) ||
        !quarot__mul_size((size_t)s->b, (size_t)s->b, &s->bbytes) ||
        !quarot__mul_size(s->bbytes, sizeof(double), &s->bbytes))
        return QUAROT_ERR_OVERFLOW;
    s->mbytes /= 2;                             // floats (the double-size check leaves headroom)
    s->bbytes /= 2;
    s->mb = s->M * s->b;
#undef QUAROT__ADAPT_FAIL
    return QUAROT_OK;
}

// The Hadamard half of QUAROT_ROTATION_ADAPT (same seed, same blocks), the float work and t (the new
// context, with its per-step arrays); t is initialized whatever the result.
static quarot_result quarot__stage1_alloc(quarot__stage1* s, const quarot_adapt_context* ctx, quarot_adapt_context* t,
                                          const quarot_env* env) {
    quarot_rotation_desc hd;
    int64_t b = s->b;
    quarot_result res;
    memset(&s->had, 0, sizeof s->had);
    memset(&hd, 0, sizeof hd);
    hd.kind = QUAROT_ROTATION_HADAMARD;
    hd.n = s->hidden;
    hd.block_size = s->hb;
    hd.seed = s->dd.seed;
    hd.fallback = QUAROT_FALLBACK_ERROR;
    res = quarot_rotation_init(&s->had, &hd, env);
    s->xh = (float*)quarot_env_alloc(env, s->mbytes);
    s->A = (float*)quarot_env_alloc(env, s->mbytes);
    s->B = (float*)quarot_env_alloc(env, s->mbytes);
    s->R = (float*)quarot_env_alloc(env, s->bbytes);
    s->Rn = (float*)quarot_env_alloc(env, s->bbytes);
    s->Rb = (float*)quarot_env_alloc(env, s->bbytes);
    s->C = (float*)quarot_env_alloc(env, s->bbytes);
    s->X = (float*)quarot_env_alloc(env, s->bbytes);
    s->Y = (float*)quarot_env_alloc(env, s->bbytes);
    s->G = (float*)quarot_env_alloc(env, s->bbytes);
    s->vw = (double*)quarot_env_alloc(env, 4 * (size_t)b * sizeof(double));
    s->qpart = (double*)quarot_env_alloc(env, (size_t)(s->M / 64 + 1) * sizeof(double));
    s->qst = (quarot_result*)quarot_env_alloc(env, (size_t)(s->M / 64 + 1) * sizeof(quarot_result));
    if (!s->dd.no_deflation) s->defl = (double*)quarot_env_alloc(env, quarot__adapt_defl_doubles(b) * sizeof(double));
    if (s->newton) {
        s->iw = (float*)quarot_env_alloc(env, quarot__sinv_floats(b) * sizeof(float));
        s->perm = (int64_t*)quarot_env_alloc(env, 2 * (size_t)b * sizeof(int64_t));
    }
    quarot_adapt_context_init(t, &ctx->env);
    t->losses = (double*)quarot_env_alloc(&t->env, (size_t)s->dd.steps * sizeof(double));
    t->polar_iterations = (int*)quarot_env_alloc(&t->env, (size_t)s->dd.steps * sizeof(int));
    if (res == QUAROT_OK && (!s->xh || !s->A || !s->B || !s->R || !s->Rn || !s->Rb || !s->C || !s->X || !s->Y ||
                             !s->G || !s->vw || !s->qpart || !s->qst || (!s->dd.no_deflation && !s->defl) ||
                             (s->newton && (!s->iw || !s->perm)) || !t->losses || !t->polar_iterations))
        res = QUAROT_ERR_OUT_OF_MEMORY;
    return res;
}

// xh = X*H: the captured rows stacked [N][hidden], rotated, checked finite.
static quarot_result quarot__stage1_rotate_rows(const quarot_adapt_capture* cap, quarot__stage1* s,
                                                quarot_adapt_context* ctx) {
    float* dst = s->xh;
    int64_t li, i;
    quarot_result res;
    for (li = 0; li < cap->n_linears; ++li) {
        memcpy(dst, cap->linears[li].rows, (size_t)(cap->linears[li].count * s->hidden) * sizeof(float));
        dst += cap->linears[li].count * s->hidden;
    }
    res = quarot_rotation_apply_f32(&s->had, s->xh, s->N, s->hidden, 0, NULL, 0);
    for (i = 0; i < s->mb && res == QUAROT_OK; ++i)
        if (!(fabsf(s->xh[i]) <= 3.40282346638528859812e+38f)) res = QUAROT_ERR_NONFINITE;
    if (res == QUAROT_ERR_NONFINITE)
        quarot__adapt_msg(ctx->error, sizeof ctx->error,
                          "adapt stage 1: activations overflow float after the Hadamard rotation");
    return res;
}

// R = I: A = X*H, the loss before any step (t->start_loss, the best so far), R_best = I.
static quarot_result quarot__stage1_start(quarot__stage1* s, quarot_adapt_context* t, quarot_adapt_context* ctx,
                                          const quarot_env* env) {
    int64_t i;
    quarot_result res;
    memcpy(s->A, s->xh, s->mbytes);
    res = quarot__adapt_quant_loss(s->A, s->B, s->M, s->b, &s->qd, s->qpart, s->qst, &t->start_loss, env);
    memset(s->R, 0, s->bbytes);
    for (i = 0; i < s->b; ++i) s->R[i * s->b + i] = 1.0f;
    memcpy(s->Rb, s->R, s->bbytes);
    t->best_loss = t->start_loss;
    if (!(t->start_loss <= 1e300)) {            // squares overflowed: values near FLT_MAX
        res = QUAROT_ERR_NONFINITE;
        quarot__adapt_msg(ctx->error, sizeof ctx->error, "adapt stage 1: activations too large (the loss overflows)");
    } else if (s->dd.progress) {
        s->dd.progress(s->dd.user_data, 0, t->start_loss, t->best_loss, 0);
    }
    return res;
}

// The steps: R <- polar((XH)^T B + lambda R), A = XH*R, B = Q(A) and its loss, the best R kept in Rb,
// until dd.steps or dd.patience steps without a better loss.
static quarot_result quarot__stage1_steps(quarot__stage1* s, quarot_adapt_context* t, quarot_adapt_context* ctx,
                                          const quarot_env* env) {
    int64_t b = s->b, M = s->M;
    int step, since = 0, k_warm = 0;
    quarot_result res = QUAROT_OK;
    for (step = 1; step <= s->dd.steps && res == QUAROT_OK; ++step) {
        quarot__adapt_polar_out po;
        float* U;
        double loss;
        memset(&po, 0, sizeof po);
        // R <- R*polar(A^T B + lambda I) computed as polar((XH)^T B + lambda R): the same matrix in exact
        // arithmetic (A = XH*R, R orthogonal), without the b^3 product R*R_step, and R stays orthogonal
        res = quarot_sgemm(1, 0, b, b, M, 1.0f, s->xh, b, s->B, b, 0.0f, s->C, b, env);    // (XH)^T B
        if (res == QUAROT_OK)
            res = quarot__adapt_polar(b, s->C, s->R, s->X, s->Y, s->G, s->Rn, s->vw, s->defl, s->perm, s->iw, s->reg,
                                      k_warm, step > 1, s->tol, s->max_iter, &U, &po, env);
        if (res == QUAROT_ERR_NOT_CONVERGED)
            quarot__adapt_msg(ctx->error, sizeof ctx->error,
                              "adapt stage 1: the polar factor (%s) did not converge at step %d (%d iterations, "
                              "max|X^T X - I| = %.3g; or a singular float inverse); raise reg (now %g) or "
                              "polar.max_iter",
                              quarot_adapt_polar_method_name(s->dd.polar_method), step, po.iterations, po.residual,
                              s->reg);
        if (res != QUAROT_OK) break;
        k_warm = po.deflated_first;                // the next step's deflation starts from this one's vectors
        memcpy(s->R, U, s->bbytes);
        res = quarot_sgemm(0, 0, M, b, b, 1.0f, s->xh, b, s->R, b, 0.0f, s->A, b, env);    // A = X*H*R
        if (res != QUAROT_OK) break;
        res = quarot__adapt_quant_loss(s->A, s->B, M, b, &s->qd, s->qpart, s->qst, &loss, env);
        t->losses[step - 1] = loss;
        t->polar_iterations[step - 1] = po.iterations;
        t->flops += 4.0 * (double)M * (double)b * (double)b +
                    (double)b * (double)b * (double)b * (1.06 * po.grams + 2.0 * po.products + 2.0 * po.inverses);
        t->steps_run = step;
        if (loss < t->best_loss) {
            t->best_loss = loss;
            t->best_step = step;
            memcpy(s->Rb, s->R, s->bbytes);
            since = 0;
        } else {
            ++since;
        }
        if (s->dd.progress) s->dd.progress(s->dd.user_data, step, loss, t->best_loss, po.iterations);
        if (since >= s->dd.patience) break;
    }
    return res;
}

// Frees the float work of the steps (all but Rb).
static void quarot__stage1_free_work(quarot__stage1* s, const quarot_env* env) {
    quarot_rotation_free(&s->had);
    quarot_env_free(env, s->xh); quarot_env_free(env, s->A); quarot_env_free(env, s->B);
    quarot_env_free(env, s->R); quarot_env_free(env, s->Rn); quarot_env_free(env, s->C);
    quarot_env_free(env, s->X); quarot_env_free(env, s->Y); quarot_env_free(env, s->G); quarot_env_free(env, s->vw);
    quarot_env_free(env, s->qpart); quarot_env_free(env, s->qst);
    quarot_env_free(env, s->defl);
    quarot_env_free(env, s->iw);
    quarot_env_free(env, s->perm);
}

// *out = R_best made orthogonal in double (allocated from t's env; freed by the caller on failure).
static quarot_result quarot__stage1_orthogonal(quarot__stage1* s, quarot_adapt_context* t, double** out,
                                               quarot_adapt_context* ctx, const quarot_env* env) {
    quarot_result res;
    *out = (double*)quarot_env_alloc(&t->env, 2 * s->bbytes);
    s->e = (double*)quarot_env_alloc(env, 2 * s->bbytes);
    s->tt = (double*)quarot_env_alloc(env, 2 * s->bbytes);
    if (!*out || !s->e || !s->tt) res = QUAROT_ERR_OUT_OF_MEMORY;
    else res = quarot__adapt_finish(s->b, s->Rb, *out, s->e, s->tt, env);
    if (res == QUAROT_ERR_NOT_CONVERGED)
        quarot__adapt_msg(ctx->error, sizeof ctx->error, "adapt stage 1: R_best could not be made orthogonal");
    return res;
}

static void quarot__stage1_free_best(quarot__stage1* s, const quarot_env* env) {
    quarot_env_free(env, s->Rb);
    quarot_env_free(env, s->e);
    quarot_env_free(env, s->tt);
}

// Check, rotate the captured rows, start from R = I, run the steps, free the float work, make the best
// R orthogonal and fill the context (ctx keeps its old contents on failure).
QUAROT_API quarot_result quarot_adapt_stage1(const quarot_adapt_capture* cap, const quarot_adapt_desc* desc,
                                             quarot_adapt_context* ctx, const quarot_env* env) {
    quarot__stage1 s;
    quarot_adapt_context t;
    double* out = NULL;
    quarot_result res;
    if (!ctx) return QUAROT_ERR_INVALID_ARGUMENT;
    ctx->error[0] = 0;
    memset(&s, 0, sizeof s);
    res = quarot__stage1_check(cap, desc, ctx, &s);
    if (res != QUAROT_OK) return res;
    res = quarot__stage1_alloc(&s, ctx, &t, env);
    if (res == QUAROT_OK) res = quarot__stage1_rotate_rows(cap, &s, ctx);
    memset(&s.qd, 0, sizeof s.qd);
    s.qd.bits = s.bits;
    s.qd.clip_ratio = 1.0f;
    if (res == QUAROT_OK) res = quarot__stage1_start(&s, &t, ctx, env);
    if (res == QUAROT_OK) res = quarot__stage1_steps(&s, &t, ctx, env);
    quarot__stage1_free_work(&s, env);
    if (res == QUAROT_OK) res = quarot__stage1_orthogonal(&s, &t, &out, ctx, env);
    quarot__stage1_free_best(&s, env);
    if (res != QUAROT_OK) {
        quarot_env_free(&t.env, out);
        quarot_adapt_context_free(&t);
        if (!ctx->error[0])
            quarot__adapt_msg(ctx->error, sizeof ctx->error, "adapt stage 1: %s", quarot_result_string(res));
        return res;
    }
    t.matrix = out;
    t.hidden = s.hidden;
    t.block = s.b;
    t.hadamard_block = s.hb;
    t.seed = s.dd.seed;
    t.bits = s.bits;
    t.steps = s.dd.steps;
    t.patience = s.dd.patience;
    t.rows = s.M;
    t.reg = s.reg;
    if (t.steps_run == 0) {                        // keep the arrays NULL when empty
        quarot_env_free(&t.env, t.losses); t.losses = NULL;
        quarot_env_free(&t.env, t.polar_iterations); t.polar_iterations = NULL;
    }
    quarot_adapt_context_free(ctx);
    *ctx = t;
    return QUAROT_OK;
}

// >>quantize
// Per linear: D = W - W^ and the output error tr(D H D^T) / (2 rows) = mean ||x D^T||^2 over the
// calibration rows, from tiles of rows E = D_tile * H (DGEMM). GPTQ retries the Cholesky factor with
// ten times the damping; RTN is quarot_quantize_f32 + quarot_dequantize_f32 (bit-identical to the
// fake quantizer). The layer's steps come from the adapter plan: its two in-layer fusions (attention
// norm readers, MLP norm readers) and the o_proj / down_proj names of quarot_plan_layer.

#define QUAROT__QZ_TILE 64

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static void quarot__qz_msg(char* buf, size_t cap, const char* fmt, ...) {
    va_list ap;
    if (!buf || !cap) return;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static int quarot__qz_bits_ok(int b) { return b == 0 || b == 16 || (b >= 2 && b <= 8); }

QUAROT_API quarot_result quarot_act_quant_check(const quarot_act_quant_desc* a, const quarot_model_config* cfg,
                                                char* err, size_t err_cap) {
    int64_t hd, qd;
    if (err && err_cap) err[0] = '\0';
    if (!a || !cfg) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot__qz_bits_ok(a->a_bits) || !quarot__qz_bits_ok(a->k_bits) || !quarot__qz_bits_ok(a->v_bits)) {
        quarot__qz_msg(err, err_cap, "activation / KV bits must be 2..8 (0 or 16 = not quantized): a %d, k %d, v %d",
                       a->a_bits, a->k_bits, a->v_bits);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (!(a->a_clip >= 0.0f && a->a_clip <= 1.0f) || !(a->k_clip >= 0.0f && a->k_clip <= 1.0f) ||
        !(a->v_clip >= 0.0f && a->v_clip <= 1.0f)) {
        quarot__qz_msg(err, err_cap, "clip ratios must lie in (0, 1] (0 = 1.0)");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if ((a->a_asym | a->k_asym | a->v_asym | a->int8_down_proj) & ~1) {
        quarot__qz_msg(err, err_cap, "a_asym, k_asym, v_asym and int8_down_proj are 0 or 1");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    hd = cfg->head_dim ? cfg->head_dim : (cfg->n_heads > 0 ? cfg->hidden / cfg->n_heads : 0);
    qd = cfg->n_heads * hd;
    if (a->a_group_size < 0 ||
        (a->a_group_size > 0 &&
         (cfg->hidden % a->a_group_size || cfg->intermediate % a->a_group_size || qd % a->a_group_size))) {
        quarot__qz_msg(err, err_cap,
                       "a_group_size %lld must divide hidden %lld, intermediate %lld and n_heads*head_dim %lld",
                       (long long)a->a_group_size, (long long)cfg->hidden, (long long)cfg->intermediate, (long long)qd);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (a->k_group_size < 0 || a->v_group_size < 0 || (a->k_group_size > 0 && hd % a->k_group_size) ||
        (a->v_group_size > 0 && hd % a->v_group_size)) {
        quarot__qz_msg(err, err_cap, "k/v group sizes %lld / %lld must divide head_dim %lld",
                       (long long)a->k_group_size, (long long)a->v_group_size, (long long)hd);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

// Options shared by quarot_quantize_linear and the stage.
static quarot_result quarot__qz_check_desc(const quarot_quantize_desc* d, char* err, size_t cap) {
    int b = d->weight.bits == 0 ? 4 : d->weight.bits;
    if (d->method != QUAROT_WQUANT_DEFAULT && d->method != QUAROT_WQUANT_RTN && d->method != QUAROT_WQUANT_GPTQ) {
        quarot__qz_msg(err, cap, "unknown weight quantization method %d", (int)d->method);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (b < 2 || b > 8) {
        quarot__qz_msg(err, cap, "weight bits %d outside 2..8", b);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (!(d->percdamp >= 0.0 && d->percdamp < 1e6) || d->block_size < 0 || (d->act_order & ~1) ||
        (d->one_pass & ~1) || (d->migrate & ~1) || (d->int8_down_proj & ~1) || d->nsamples < 0 || d->seq_len < 0) {
        quarot__qz_msg(err, cap, "bad GPTQ options (percdamp %g, block %lld, act_order %d)", d->percdamp,
                       (long long)d->block_size, d->act_order);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

// Sums over rows of D = a - b (float, [out][in]) and of a itself: tr(D H D^T), tr(D2 H D2^T) for a
// second estimate b2 (may be NULL), tr(A H A^T); H symmetric [in][in]. Tiles of rows through DGEMM.
static quarot_result quarot__qz_quadform(const float* a, const float* b, const float* b2, int64_t out, int64_t in,
                                         const double* h, double* e1, double* e2, double* ref, const quarot_env* env) {
    const int64_t T = QUAROT__QZ_TILE;
    int64_t r0, t, j, k, nr, blocks = b2 ? 3 : 2;
    double *d, *p;
    quarot_result res = QUAROT_OK;
    *e1 = *e2 = *ref = 0.0;
    d = (double*)quarot_env_alloc(env, (size_t)(2 * blocks * T) * (size_t)in * sizeof(double));
    if (!d) return QUAROT_ERR_OUT_OF_MEMORY;
    p = d + blocks * T * in;
    for (r0 = 0; r0 < out && res == QUAROT_OK; r0 += T) {
        nr = out - r0 < T ? out - r0 : T;
        for (t = 0; t < nr; ++t) {
            const float* ar = a + (r0 + t) * in;
            for (j = 0; j < in; ++j) {
                d[t * in + j] = (double)ar[j] - (double)b[(r0 + t) * in + j];
                d[(nr + t) * in + j] = (double)ar[j];
                if (b2) d[(2 * nr + t) * in + j] = (double)ar[j] - (double)b2[(r0 + t) * in + j];
            }
        }
        res = quarot_dgemm(0, 0, blocks * nr, in, in, 1.0, d, in, h, in, 0.0, p, in, env);
        for (k = 0; k < blocks && res == QUAROT_OK; ++k) {
            double s = 0.0;
            for (t = k * nr; t < (k + 1) * nr; ++t)
                for (j = 0; j < in; ++j) s += d[t * in + j] * p[t * in + j];
            if (k == 0) *e1 += s;
            else if (k == 1) *ref += s;
            else *e2 += s;
        }
    }
    quarot_env_free(env, d);
    return res;
}

QUAROT_API quarot_result quarot_quantize_linear(float* w, int64_t out, int64_t in, int64_t stride, const double* h,
                                                int64_t rows, const quarot_quantize_desc* d, int8_t* q, float* scales,
                                                float* zeros, quarot_qlinear_report* rep, char* err, size_t err_cap,
                                                const quarot_env* env) {
    quarot_quantize_desc dd;
    quarot_result res;
    quarot__qspec sp;
    int64_t gs, i, j, nonzero = 0;
    float *orig = NULL, *rtn = NULL;
    int gptq, tries, t;
    size_t wbytes;
    if (err && err_cap) err[0] = '\0';
    if (d) dd = *d; else memset(&dd, 0, sizeof dd);
    if (rep) {
        memset(rep, 0, sizeof *rep);
        rep->err = rep->err_rtn = rep->ref = (double)NAN;
    }
    if (!w) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((res = quarot__qz_check_desc(&dd, err, err_cap)) != QUAROT_OK) return res;
    if ((res = quarot__qshape_check(out, in, stride)) != QUAROT_OK) return res;
    if ((res = quarot__qspec_init(&dd.weight, in, &sp, &gs)) != QUAROT_OK) {
        if (dd.weight.group_size > 0 && in % dd.weight.group_size)
            quarot__qz_msg(err, err_cap, "group size %lld does not divide the %lld input columns",
                           (long long)dd.weight.group_size, (long long)in);
        else
            quarot__qz_msg(err, err_cap, "bad weight quantizer options");
        return res;
    }
    if (sp.asym && q && !zeros) return QUAROT_ERR_INVALID_ARGUMENT;
    gptq = dd.method == QUAROT_WQUANT_GPTQ;
    if (rep) {
        rep->out = out; rep->in = in; rep->group_size = gs;
        rep->bits = dd.weight.bits ? dd.weight.bits : 4;
        rep->asymmetric = sp.asym;
        rep->method = gptq ? QUAROT_WQUANT_GPTQ : QUAROT_WQUANT_RTN;
        rep->rows = rows;
        rep->q = q; rep->scales = scales; rep->zeros = sp.asym ? zeros : NULL;
    }
    if (out == 0 || in == 0) return QUAROT_OK;
    // Hessian checks: finite (upper triangle), not all zero on the diagonal.
    if (h) {
        for (i = 0; i < in; ++i) {
            for (j = i; j < in; ++j)
                if (h[i * in + j] - h[i * in + j] != 0.0) {
                    quarot__qz_msg(err, err_cap, "NaN or Inf in the Hessian (row %lld, column %lld)", (long long)i,
                                   (long long)j);
                    return QUAROT_ERR_NONFINITE;
                }
            nonzero += h[i * in + i] != 0.0;
        }
    }
    if (gptq && (!h || rows <= 0 || nonzero == 0)) {
        if (dd.dead_fallback) {   // nothing for GPTQ to weigh the error by: RTN, reported
            gptq = 0;
            if (rep) { rep->method = QUAROT_WQUANT_RTN; rep->fallback = 1; }
        } else {
            quarot__qz_msg(err, err_cap, "GPTQ: %s (a dead input: no calibration row reached this linear)",
                           !h || rows <= 0 ? "no calibration rows" : "the Hessian is all zero");
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    if ((uint64_t)out > (uint64_t)(SIZE_MAX / 8) / (uint64_t)in) return QUAROT_ERR_OVERFLOW;
    wbytes = (size_t)out * (size_t)in * sizeof(float);
    // Copies for the report: the original weights and, with GPTQ, RTN's result.
    if (rep) {
        orig = (float*)quarot_env_alloc(env, wbytes * (gptq ? 2 : 1));
        if (!orig) return QUAROT_ERR_OUT_OF_MEMORY;
        for (i = 0; i < out; ++i) memcpy(orig + i * in, w + i * stride, (size_t)in * sizeof(float));
        if (gptq) {
            rtn = orig + out * in;
            memcpy(rtn, orig, wbytes);
            res = quarot_fake_quant_f32(rtn, out, in, in, &dd.weight);
            if (res != QUAROT_OK) { quarot_env_free(env, orig); return res; }
        }
    }
    if (gptq) {
        quarot_gptq_desc gd;
        quarot_gptq_info gi;
        memset(&gd, 0, sizeof gd);
        gd.quant = dd.weight;
        gd.block_size = dd.block_size;
        gd.act_order = dd.act_order;
        gd.damp_ratio = dd.percdamp > 0.0 ? dd.percdamp : 0.01;
        tries = dd.damp_retries == 0 ? 2 : (dd.damp_retries < 0 ? 0 : dd.damp_retries);
        for (t = 0;; ++t) {
            res = quarot_gptq_f32(w, out, in, stride, h, in, &gd, q, scales, zeros, &gi, env);
            if (res != QUAROT_ERR_NOT_CONVERGED || t >= tries) break;
            gd.damp_ratio *= 10.0;
        }
        if (res == QUAROT_ERR_NOT_CONVERGED) {
            quarot__qz_msg(err, err_cap,
                           "GPTQ: Cholesky factorization failed at column %lld even with damping %g of the mean "
                           "diagonal (%d retries)", (long long)gi.bad_column, gd.damp_ratio, tries);
        } else if (res == QUAROT_ERR_NONFINITE) {
            quarot__qz_msg(err, err_cap, "GPTQ: NaN or Inf in the weights");
        } else if (res != QUAROT_OK) {
            quarot__qz_msg(err, err_cap, "GPTQ: %s", quarot_result_string(res));
        }
        if (res != QUAROT_OK) { quarot_env_free(env, orig); return res; }
        if (rep) {
            rep->gptq_loss = gi.loss;
            rep->damp = gi.damp;
            rep->retries = t;
            rep->dead_columns = gi.dead_columns;
        }
    } else {
        // RTN: codes when asked, then the fake-quantized values (the same bits as dequantizing them).
        if (q) res = quarot_quantize_f32(w, out, in, stride, &dd.weight, q, scales, zeros);
        if (res == QUAROT_OK) res = quarot_fake_quant_f32(w, out, in, stride, &dd.weight);
        if (res != QUAROT_OK) {
            quarot__qz_msg(err, err_cap, "RTN: %s",
                           res == QUAROT_ERR_NONFINITE ? "NaN or Inf in the weights" : quarot_result_string(res));
            quarot_env_free(env, orig);
            return res;
        }
        if (rep && h)
            for (i = 0; i < in; ++i) rep->dead_columns += h[i * in + i] == 0.0;
    }
    if (orig) {
        float* wq = (float*)quarot_env_alloc(env, wbytes);
        double e1, e2, ref, se = 0.0;
        if (!wq) { quarot_env_free(env, orig); return QUAROT_ERR_OUT_OF_MEMORY; }
        for (i = 0; i < out; ++i) memcpy(wq + i * in, w + i * stride, (size_t)in * sizeof(float));
        for (i = 0; i < out * in; ++i) {
            double dif = (double)orig[i] - (double)wq[i];
            se += dif * dif;
        }
        rep->w_mse = se / (double)(out * in);
        if (h && rows > 0) {
            res = quarot__qz_quadform(orig, wq, rtn, out, in, h, &e1, &e2, &ref, env);
            if (res == QUAROT_OK) {
                rep->err = e1 / (2.0 * (double)rows);
                rep->err_rtn = gptq ? e2 / (2.0 * (double)rows) : rep->err;
                rep->ref = ref / (2.0 * (double)rows);
            }
        }
        quarot_env_free(env, wq);
        quarot_env_free(env, orig);
        if (res != QUAROT_OK) return res;
    }
    return QUAROT_OK;
}

// >>quantize_layers
// The layer-wise stage (quarot_quantizer): per layer, four steps (q/k/v, o, gate/up, down), each
// collecting the Hessian of its input from the rows the engine feeds, then quantizing its linears by
// the method (after the scale migration search where asked) and reporting them.


QUAROT_API quarot_result quarot_quantizer_init(quarot_quantizer* qz, quarot_model* model,
                                               const quarot_quantize_desc* d) {
    const quarot_adapter* ad;
    quarot_model_config* c;
    quarot_result res;
    int64_t hd, widths[3];
    const char* wnames[3] = {"q/k/v/gate/up", "o_proj", "down_proj"};
    int k;
    if (!qz) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(qz, 0, sizeof *qz);
    qz->layer = -1;
    if (!model) return QUAROT_ERR_INVALID_ARGUMENT;
    if (d) qz->desc = *d;
    qz->model = model;
    if ((res = quarot__qz_check_desc(&qz->desc, qz->error, sizeof qz->error)) != QUAROT_OK) return res;
    c = &qz->config;
    if ((res = quarot__resolve_config(model, c)) != QUAROT_OK) {
        quarot__qz_msg(qz->error, sizeof qz->error, "%s", model->error[0] ? model->error : "bad model config");
        return res;
    }
    res = quarot_act_quant_check(&qz->desc.act, c, qz->error, sizeof qz->error);
    if (res != QUAROT_OK) return res;
    // Group size against every linear's input width, naming the first linear it does not divide.
    hd = c->head_dim;
    widths[0] = c->hidden; widths[1] = c->n_heads * hd; widths[2] = c->intermediate;
    ad = quarot_adapter_find(c->arch);
    if (!ad || !ad->build) {
        quarot__qz_msg(qz->error, sizeof qz->error, "no adapter for architecture '%s' (built-in: %s)", c->arch,
                       quarot_adapter_list());
        return QUAROT_ERR_UNSUPPORTED;
    }
    quarot_plan_init(&qz->plan, &model->env);
    res = ad->build(ad, c, -1, &qz->plan);
    if (res == QUAROT_OK && qz->plan.n_layers != c->n_layers) res = QUAROT_ERR_INTERNAL;
    if (res != QUAROT_OK) {
        quarot__qz_msg(qz->error, sizeof qz->error, "adapter '%s' could not describe the model: %s", ad->arch,
                       quarot_result_string(res));
        quarot_plan_free(&qz->plan);
        return res;
    }
    if (qz->desc.weight.group_size < 0 || (qz->desc.keep_indivisible & ~1) || (qz->desc.dead_fallback & ~1)) {
        quarot__qz_msg(qz->error, sizeof qz->error,
                       "weight group size %lld < 0, or keep_indivisible / dead_fallback not 0/1",
                       (long long)qz->desc.weight.group_size);
        quarot_plan_free(&qz->plan);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    for (k = 0; k < 3 && qz->desc.weight.group_size > 0 && !qz->desc.keep_indivisible; ++k) {
        int64_t g = qz->desc.weight.group_size;
        if (k == 2 && qz->desc.int8_down_proj) continue;   // 8-bit down_proj is per channel
        if (widths[k] % g) {
            char name[QUAROT_NAME_MAX];
            if (k == 0 && qz->plan.n_fusions > 1 && qz->plan.fusions[1].n_linears > 0)
                snprintf(name, sizeof name, "%s", qz->plan.linears[qz->plan.fusions[1].first_linear].weight);
            else if (k == 1) snprintf(name, sizeof name, "%s", qz->plan.layers[0].o_proj);
            else if (k == 2) snprintf(name, sizeof name, "%s", qz->plan.layers[0].down_proj);
            else snprintf(name, sizeof name, "%s", wnames[k]);
            quarot__qz_msg(qz->error, sizeof qz->error,
                           "%s: weight group size %lld does not divide its %lld input columns (nor those of every "
                           "layer's %s)", name, (long long)g, (long long)widths[k], wnames[k]);
            quarot_plan_free(&qz->plan);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    return QUAROT_OK;
}

QUAROT_API void quarot_quantizer_free(quarot_quantizer* qz) {
    int k;
    if (!qz) return;
    for (k = 0; k < 4; ++k)
        if (qz->h[k]) quarot_env_free(qz->model ? &qz->model->env : NULL, qz->h[k]);
    quarot_plan_free(&qz->plan);
    memset(qz, 0, sizeof *qz);
    qz->layer = -1;
}

static int quarot__qz_gptq(const quarot_quantizer* qz) { return qz->desc.method == QUAROT_WQUANT_GPTQ; }

// Steps collected by the next quarot_quantizer_step: [lo, hi).
static void quarot__qz_range(const quarot_quantizer* qz, int* lo, int* hi) {
    *lo = qz->step;
    *hi = qz->desc.one_pass ? 4 : qz->step + 1;
}

// Index of a linear of the current layer by name, or -1.
static int64_t quarot__qz_find(const quarot_quantizer* qz, const char* name) {
    int64_t i;
    if (!name) return -1;
    for (i = 0; i < qz->n_linears; ++i)
        if (strcmp(qz->names[i], name) == 0) return i;
    return -1;
}

QUAROT_API quarot_result quarot_quantizer_begin_layer(quarot_quantizer* qz, int64_t layer) {
    int64_t i, k, nf = 0;
    int moe;
    quarot_result res;
    const quarot_plan* p;
    if (!qz || !qz->model) return QUAROT_ERR_INVALID_ARGUMENT;
    if (qz->layer >= 0) {
        quarot__qz_msg(qz->error, sizeof qz->error, "layer %lld is still open (call quarot_quantizer_end_layer)",
                       (long long)qz->layer);
        return QUAROT_ERR_STATE;
    }
    if (layer < 0 || layer >= qz->config.n_layers) return QUAROT_ERR_INVALID_ARGUMENT;
    p = &qz->plan;
    moe = quarot_config_layer_is_moe(&qz->config, layer);
    if (moe && !qz->desc.moe_mlp_by_caller) {
        quarot__qz_msg(qz->error, sizeof qz->error, "layer %lld is a mixture-of-experts layer: the stage quantizes "
                       "its attention only, with desc.moe_mlp_by_caller (the caller quantizes the experts)",
                       (long long)layer);
        return QUAROT_ERR_UNSUPPORTED;
    }
    qz->n_linears = 0;
    for (k = 0; k < 4; ++k) { qz->step_in[k] = 0; qz->rows[k] = 0; }
    // Steps 0 and 2: the readers of the layer's first and second norm; 1 o_proj; 3 down_proj. A MoE
    // layer's MLP (the second norm's readers, the experts' down_proj) is the caller's.
    for (i = 0; i < p->n_fusions; ++i) {
        const quarot_plan_fusion* f = &p->fusions[i];
        if (f->layer != layer) continue;
        if (moe) {   // the attention norm's fusion only: the one with v_proj among its readers
            const char* v = p->layers[layer].v_proj;
            for (k = 0; k < f->n_linears && strcmp(p->linears[f->first_linear + k].weight, v) != 0; ++k) {}
            if (k == f->n_linears) continue;
        }
        for (k = 0; k < f->n_linears && nf < (moe ? 1 : 2); ++k) {
            if (qz->n_linears >= QUAROT_QUANTIZE_MAX_LINEARS) return QUAROT_ERR_INTERNAL;
            snprintf(qz->names[qz->n_linears], QUAROT_NAME_MAX, "%s", p->linears[f->first_linear + k].weight);
            qz->lin_step[qz->n_linears] = nf == 0 ? 0 : 2;
            qz->lin_first[qz->n_linears] = k == 0;
            qz->n_linears++;
        }
        nf++;
    }
    if (p->layers[layer].o_proj[0] && qz->n_linears < QUAROT_QUANTIZE_MAX_LINEARS) {
        snprintf(qz->names[qz->n_linears], QUAROT_NAME_MAX, "%s", p->layers[layer].o_proj);
        qz->lin_step[qz->n_linears] = 1;
        qz->lin_first[qz->n_linears++] = 1;
    }
    if (!moe && p->layers[layer].down_proj[0] && qz->n_linears < QUAROT_QUANTIZE_MAX_LINEARS) {
        snprintf(qz->names[qz->n_linears], QUAROT_NAME_MAX, "%s", p->layers[layer].down_proj);
        qz->lin_step[qz->n_linears] = 3;
        qz->lin_first[qz->n_linears++] = 1;
    }
    qz->step_in[0] = qz->step_in[2] = qz->config.hidden;
    qz->step_in[1] = qz->config.n_heads * qz->config.head_dim;
    qz->step_in[3] = qz->config.intermediate;
    if (qz->model->acquire_layer && (res = qz->model->acquire_layer(qz->model->user_data, layer)) != QUAROT_OK) {
        quarot__qz_msg(qz->error, sizeof qz->error, "layer %lld: cannot acquire it: %s", (long long)layer,
                       quarot_result_string(res));
        return res;
    }
    qz->layer = layer;
    qz->step = 0;
    return QUAROT_OK;
}

QUAROT_API int quarot_quantizer_pending(const quarot_quantizer* qz) { return qz && qz->layer >= 0 && qz->step < 4; }

// desc.keep_indivisible: 1 when linear i is left as it is (its input width is not whole groups).
static int quarot__qz_kept(const quarot_quantizer* qz, int64_t i) {
    int st = qz->lin_step[i];
    int64_t g = qz->desc.weight.group_size;
    if (!qz->desc.keep_indivisible || g <= 0 || (st == 3 && qz->desc.int8_down_proj)) return 0;
    return qz->step_in[st] % g != 0;
}

// 1 when every linear of steps [lo, hi) is kept (nothing there needs calibration rows).
static int quarot__qz_all_kept(const quarot_quantizer* qz, int lo, int hi) {
    int64_t i;
    for (i = 0; i < qz->n_linears; ++i)
        if (qz->lin_step[i] >= lo && qz->lin_step[i] < hi && !quarot__qz_kept(qz, i)) return 0;
    return 1;
}

QUAROT_API int quarot_quantizer_wants_data(const quarot_quantizer* qz) {
    int lo, hi;
    if (!quarot_quantizer_pending(qz)) return 0;
    quarot__qz_range(qz, &lo, &hi);
    if (quarot__qz_all_kept(qz, lo, hi)) return 0;
    if (quarot__qz_gptq(qz)) return 1;
    return qz->desc.migrate && (lo == 0 || lo == 2 || (lo < 2 && hi > 2));
}

QUAROT_API int quarot_quantizer_wants(const quarot_quantizer* qz, const char* weight_name) {
    int64_t i;
    int lo, hi;
    if (!quarot_quantizer_wants_data(qz)) return 0;
    i = quarot__qz_find(qz, weight_name);
    if (i < 0 || !qz->lin_first[i]) return 0;
    quarot__qz_range(qz, &lo, &hi);
    if (!quarot__qz_gptq(qz) && qz->lin_step[i] != 0 && qz->lin_step[i] != 2) return 0;   // RTN: the norms' inputs only
    return qz->lin_step[i] >= lo && qz->lin_step[i] < hi;
}

QUAROT_API quarot_result quarot_quantizer_add(quarot_quantizer* qz, const char* weight_name, const float* x,
                                              int64_t rows, int64_t stride) {
    int64_t i, n;
    int st;
    quarot_result res;
    size_t bytes;
    if (!qz || !x || rows < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot_quantizer_wants(qz, weight_name) || rows == 0) return QUAROT_OK;
    i = quarot__qz_find(qz, weight_name);
    st = qz->lin_step[i];
    n = qz->step_in[st];
    if (stride < n) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!qz->h[st]) {
        if (!quarot__mul_size((size_t)n, (size_t)n, &bytes) || !quarot__mul_size(bytes, sizeof(double), &bytes))
            return QUAROT_ERR_OVERFLOW;
        qz->h[st] = (double*)quarot_env_alloc(&qz->model->env, bytes);
        if (!qz->h[st]) {
            quarot__qz_msg(qz->error, sizeof qz->error, "%s: out of memory for its [%lld][%lld] Hessian", weight_name,
                           (long long)n, (long long)n);
            return QUAROT_ERR_OUT_OF_MEMORY;
        }
        memset(qz->h[st], 0, bytes);
    }
    res = quarot_hessian_accumulate_f64(qz->h[st], n, x, rows, stride);
    if (res == QUAROT_ERR_NONFINITE)
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: NaN or Inf in its calibration input rows", weight_name);
    else if (res != QUAROT_OK)
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: Hessian: %s", weight_name, quarot_result_string(res));
    else
        qz->rows[st] += rows;
    return res;
}

// Quantize one linear of the open layer from the model's tensor, write it back, report.
static quarot_result quarot__qz_linear(quarot_quantizer* qz, int64_t i) {
    quarot_model* m = qz->model;
    const quarot_env* env = &m->env;
    const char* name = qz->names[i];
    int st = qz->lin_step[i];
    quarot_tensor t;
    quarot_quantize_desc d = qz->desc;
    quarot_qlinear_report rep;
    quarot_result res;
    int64_t out, in, r, groups, gs;
    float *w = NULL, *sc, *zr;
    int8_t* q;
    size_t wb, qb, sb;
    char msg[200];
    res = m->get_tensor(m->user_data, name, &t);
    if (res != QUAROT_OK) {
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: %s", name,
                       res == QUAROT_ERR_NOT_FOUND ? "not in the model" : quarot_result_string(res));
        return res;
    }
    in = t.ne[0];
    out = quarot_tensor_nrows(&t);
    if (in != qz->step_in[st] || out <= 0) {
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: %lld input columns, expected %lld", name, (long long)in,
                       (long long)qz->step_in[st]);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    if (st == 3 && d.int8_down_proj) { d.weight.bits = 8; d.weight.group_size = 0; }
    gs = d.weight.group_size > 0 ? d.weight.group_size : in;
    if (in % gs) {
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: weight group size %lld does not divide its %lld input columns",
                       name, (long long)gs, (long long)in);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    groups = in / gs;
    wb = (size_t)out * (size_t)in * sizeof(float);
    qb = (size_t)out * (size_t)in;
    sb = (size_t)out * (size_t)groups * sizeof(float);
    w = (float*)quarot_env_alloc(env, wb + 2 * sb + qb);
    if (!w) {
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: out of memory", name);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    sc = (float*)(void*)((char*)w + wb);
    zr = (float*)(void*)((char*)sc + sb);
    q = (int8_t*)((char*)zr + sb);
    for (r = 0; r < out && res == QUAROT_OK; ++r) res = quarot_tensor_get_row_f32(&t, r, w + r * in);
    if (res == QUAROT_OK)
        res = quarot_quantize_linear(w, out, in, in, qz->h[st], qz->rows[st], &d, q, sc, zr, &rep, msg, sizeof msg,
                                     env);
    if (res != QUAROT_OK) {
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: %s", name, msg[0] ? msg : quarot_result_string(res));
        quarot_env_free(env, w);
        return res;
    }
    for (r = 0; r < out && res == QUAROT_OK; ++r) res = quarot_tensor_set_row_f32(&t, r, w + r * in);
    if (res == QUAROT_OK && qz->desc.on_linear) {
        rep.name = name;
        rep.layer = qz->layer;
        rep.step = st;
        rep.migrate_alpha = (st == 0 || st == 2) ? qz->mig_alpha : 0.0;
        res = qz->desc.on_linear(qz->desc.user_data, &rep);
        if (res != QUAROT_OK)
            quarot__qz_msg(qz->error, sizeof qz->error, "%s: stopped by the report callback: %s", name,
                           quarot_result_string(res));
    } else if (res != QUAROT_OK) {
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: writing back: %s", name, quarot_result_string(res));
    }
    quarot_env_free(env, w);
    if (res == QUAROT_OK) qz->linears_done++;
    return res;
}

// ---- scale migration ----

// Summed RTN output error tr(D diag(s) H diag(s) D^T) over the readers for scales s (in = n).
static quarot_result quarot__qz_mig_err(const double* h, int64_t n, float* const* w, const int64_t* outs, int n_w,
                                        const quarot_quant_desc* q, const float* s, double* hs, float* a, float* b,
                                        double* total, const quarot_env* env) {
    int64_t i, j, r;
    int k;
    quarot_result res = QUAROT_OK;
    *total = 0.0;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) hs[i * n + j] = h[i * n + j] * (double)s[i] * (double)s[j];
    for (k = 0; k < n_w && res == QUAROT_OK; ++k) {
        double e1, e2, ref;
        for (r = 0; r < outs[k]; ++r)
            for (j = 0; j < n; ++j) a[r * n + j] = w[k][r * n + j] / s[j];
        memcpy(b, a, (size_t)(outs[k] * n) * sizeof(float));
        res = quarot_fake_quant_f32(b, outs[k], n, n, q);
        if (res == QUAROT_OK) res = quarot__qz_quadform(a, b, NULL, outs[k], n, hs, &e1, &e2, &ref, env);
        if (res == QUAROT_OK) *total += e1;
    }
    return res;
}

QUAROT_API quarot_result quarot_scale_migration_search(const double* h, int64_t n, float* const* w, const int64_t* outs,
                                                       int n_w, const quarot_quant_desc* q, float* s, double* alpha,
                                                       double* err_before, double* err_after, const quarot_env* env) {
    double *hs, best = 0.0, lg, a;
    float *bufa, *bufb, *cand;
    int64_t j, maxout = 0;
    int k, step;
    quarot_result res = QUAROT_OK;
    if (!h || !w || !outs || !s || n <= 0 || n_w <= 0) return QUAROT_ERR_INVALID_ARGUMENT;
    for (k = 0; k < n_w; ++k) {
        if (!w[k] || outs[k] <= 0) return QUAROT_ERR_INVALID_ARGUMENT;
        if (outs[k] > maxout) maxout = outs[k];
    }
    hs = (double*)quarot_env_alloc(env, (size_t)(n * n) * sizeof(double));
    bufa = (float*)quarot_env_alloc(env, (size_t)(2 * maxout * n + n) * sizeof(float));
    if (!hs || !bufa) { quarot_env_free(env, hs); quarot_env_free(env, bufa); return QUAROT_ERR_OUT_OF_MEMORY; }
    bufb = bufa + maxout * n;
    cand = bufb + maxout * n;
    if (alpha) *alpha = 0.0;
    for (step = 0; step <= 10 && res == QUAROT_OK; ++step) {
        double e;
        a = 0.1 * step;
        // s_j = rms(x_j)^alpha / geometric mean; channels no row reached keep 1
        lg = 0.0;
        for (j = 0; j < n; ++j) {
            double v = h[j * n + j];
            cand[j] = v > 0.0 ? (float)pow(v, 0.5 * a) : 1.0f;
            lg += log((double)cand[j]);
        }
        lg = exp(lg / (double)n);
        for (j = 0; j < n; ++j) cand[j] = (float)((double)cand[j] / lg);
        res = quarot__qz_mig_err(h, n, w, outs, n_w, q, cand, hs, bufa, bufb, &e, env);
        if (res != QUAROT_OK) break;
        if (step == 0) { if (err_before) *err_before = e; }
        if (step == 0 || e < best) {
            best = e;
            memcpy(s, cand, (size_t)n * sizeof(float));
            if (alpha) *alpha = a;
        }
    }
    if (err_after) *err_after = best;
    quarot_env_free(env, hs);
    quarot_env_free(env, bufa);
    return res;
}

// desc.migrate at a norm step: search s on the step's Hessian, rescale the norm gain and the readers
// in the model, and the Hessian to the new input x*diag(s).
static quarot_result quarot__qz_migrate(quarot_quantizer* qz, int st) {
    quarot_model* m = qz->model;
    const quarot_env* env = &m->env;
    const int64_t n = qz->step_in[st];
    float* w[QUAROT_QUANTIZE_MAX_LINEARS];
    int64_t outs[QUAROT_QUANTIZE_MAX_LINEARS], r, j, fi, seen = 0;
    quarot_tensor t[QUAROT_QUANTIZE_MAX_LINEARS], g;
    const char* norm = NULL;
    float* s = NULL;
    float* gv = NULL;
    int nw = 0, k;
    int64_t i;
    quarot_result res = QUAROT_OK;
    double* h = qz->h[st];
    quarot_quant_desc qd = qz->desc.weight;
    if (!h || qz->rows[st] <= 0) return QUAROT_OK;   // the GPTQ path reports the dead input
    // the norm: the (st == 0 ? first : second) fusion of this layer in the plan
    for (fi = 0; fi < qz->plan.n_fusions; ++fi)
        if (qz->plan.fusions[fi].layer == qz->layer && seen++ == (st == 0 ? 0 : 1)) {
            norm = qz->plan.fusions[fi].norm_weight;
            break;
        }
    if (!norm) return QUAROT_OK;
    if (qz->plan.fusions[fi].norm_bias[0]) {
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: scale migration needs an RMSNorm (this norm has a bias)",
                       norm);
        return QUAROT_ERR_UNSUPPORTED;
    }
    res = m->get_tensor(m->user_data, norm, &g);
    if (res != QUAROT_OK || g.ne[0] != n) {
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: scale migration needs the norm gain [%lld]", norm,
                       (long long)n);
        return res != QUAROT_OK ? res : QUAROT_ERR_SHAPE_MISMATCH;
    }
    memset(w, 0, sizeof w);
    for (i = 0; i < qz->n_linears && res == QUAROT_OK; ++i) {
        if (qz->lin_step[i] != st) continue;
        res = m->get_tensor(m->user_data, qz->names[i], &t[nw]);
        if (res != QUAROT_OK) break;
        outs[nw] = quarot_tensor_nrows(&t[nw]);
        w[nw] = (float*)quarot_env_alloc(env, (size_t)(outs[nw] * n) * sizeof(float));
        if (!w[nw]) { res = QUAROT_ERR_OUT_OF_MEMORY; break; }
        for (r = 0; r < outs[nw] && res == QUAROT_OK; ++r) res = quarot_tensor_get_row_f32(&t[nw], r, w[nw] + r * n);
        nw++;
    }
    s = (float*)quarot_env_alloc(env, (size_t)(2 * n) * sizeof(float));
    if (res == QUAROT_OK && !s) res = QUAROT_ERR_OUT_OF_MEMORY;
    if (res == QUAROT_OK) {
        gv = s + n;
        res = quarot_scale_migration_search(h, n, w, outs, nw, &qd, s, &qz->mig_alpha, NULL, NULL, env);
    }
    if (res == QUAROT_OK && qz->mig_alpha > 0.0) {
        res = quarot_tensor_get_row_f32(&g, 0, gv);
        for (j = 0; j < n; ++j) gv[j] *= s[j];
        if (res == QUAROT_OK) res = quarot_tensor_set_row_f32(&g, 0, gv);
        for (k = 0; k < nw && res == QUAROT_OK; ++k) {
            for (r = 0; r < outs[k]; ++r)
                for (j = 0; j < n; ++j) w[k][r * n + j] /= s[j];
            for (r = 0; r < outs[k] && res == QUAROT_OK; ++r) res = quarot_tensor_set_row_f32(&t[k], r, w[k] + r * n);
        }
        for (i = 0; i < n; ++i)
            for (j = 0; j < n; ++j) h[i * n + j] *= (double)s[i] * (double)s[j];
    }
    if (res != QUAROT_OK && !qz->error[0])
        quarot__qz_msg(qz->error, sizeof qz->error, "%s: scale migration: %s", norm, quarot_result_string(res));
    for (k = 0; k < nw; ++k) quarot_env_free(env, w[k]);
    quarot_env_free(env, s);
    return res;
}

QUAROT_API quarot_result quarot_quantizer_step(quarot_quantizer* qz) {
    int lo, hi, st;
    int64_t i;
    quarot_result res = QUAROT_OK;
    if (!quarot_quantizer_pending(qz)) return QUAROT_ERR_STATE;
    quarot__qz_range(qz, &lo, &hi);
    for (st = lo; st < hi && res == QUAROT_OK; ++st) {
        qz->mig_alpha = 0.0;
        if (qz->desc.migrate && (st == 0 || st == 2)) res = quarot__qz_migrate(qz, st);
        for (i = 0; i < qz->n_linears && res == QUAROT_OK; ++i)
            if (qz->lin_step[i] == st && !quarot__qz_kept(qz, i)) res = quarot__qz_linear(qz, i);
    }
    for (st = lo; st < hi; ++st) {
        if (qz->h[st]) quarot_env_free(&qz->model->env, qz->h[st]);
        qz->h[st] = NULL;
        qz->rows[st] = 0;
    }
    if (res == QUAROT_OK) qz->step = hi;
    return res;
}

QUAROT_API quarot_result quarot_quantizer_end_layer(quarot_quantizer* qz) {
    quarot_result res = QUAROT_OK;
    if (!qz || !qz->model || qz->layer < 0) return QUAROT_ERR_STATE;
    if (qz->step < 4) {
        quarot__qz_msg(qz->error, sizeof qz->error, "layer %lld: %d of 4 steps quantized", (long long)qz->layer,
                       qz->step);
        return QUAROT_ERR_STATE;
    }
    if (qz->model->release_layer) res = qz->model->release_layer(qz->model->user_data, qz->layer, 1);
    qz->layer = -1;
    qz->layers_done++;
    return res;
}

// >>train
// Backward passes of the decoder ops and the Stiefel step. Norm sums in double, in element order, as
// the forward; attention recomputes P in its backward from q and k with the same
// code, so the forward's P and the backward's are the same bits.

QUAROT_API void quarot_train_rmsnorm_f32(const float* x, int64_t rows, int64_t n, const float* g, float eps, float* y,
                                         float* rstd) {
    int64_t r, i;
    if (!x || !y || rows <= 0 || n <= 0) return;
    for (r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        double ss = 0.0;
        float inv;
        for (i = 0; i < n; ++i) ss += (double)xr[i] * (double)xr[i];
        inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
        if (rstd) rstd[r] = inv;
        if (g) for (i = 0; i < n; ++i) yr[i] = xr[i] * inv * g[i];
        else for (i = 0; i < n; ++i) yr[i] = xr[i] * inv;
    }
}

QUAROT_API void quarot_train_rmsnorm_backward_f32(const float* x, const float* rstd, int64_t rows, int64_t n,
                                                  const float* g, const float* dy, float* dx, int accumulate) {
    int64_t r, i;
    if (!x || !rstd || !dy || !dx || rows <= 0 || n <= 0) return;
    for (r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        const float* dyr = dy + r * n;
        float* dxr = dx + r * n;
        double s = 0.0, rr = (double)rstd[r], c;
        // y0 = x r, e = dy g: dx = r e - r^3 x (sum_j e_j x_j) / n
        for (i = 0; i < n; ++i) s += (double)dyr[i] * (g ? (double)g[i] : 1.0) * (double)xr[i];
        c = rr * rr * rr * s / (double)n;
        for (i = 0; i < n; ++i) {
            double e = (double)dyr[i] * (g ? (double)g[i] : 1.0);
            float v = (float)(rr * e - c * (double)xr[i]);
            dxr[i] = accumulate ? dxr[i] + v : v;
        }
    }
}

QUAROT_API void quarot_train_rope_table(int64_t T, int64_t pos0, int64_t head_dim, float theta, float* cs) {
    int64_t half = head_dim / 2, t, i;
    if (!cs || T <= 0 || head_dim < 2) return;
    for (t = 0; t < T; ++t)
        for (i = 0; i < half; ++i) {
            double freq = pow((double)theta, -(double)(2 * i) / (double)head_dim);
            double ang = (double)(pos0 + t) * freq;
            cs[t * head_dim + i] = (float)cos(ang);
            cs[t * head_dim + half + i] = (float)sin(ang);
        }
}

QUAROT_API void quarot_train_rope_f32(float* x, int64_t T, int64_t heads, int64_t head_dim, const float* cs,
                                      int interleaved, int inverse) {
    int64_t half = head_dim / 2, t, h, i;
    if (!x || !cs || T <= 0 || heads <= 0 || head_dim < 2) return;
    for (t = 0; t < T; ++t) {
        const float* c = cs + t * head_dim;
        const float* sn = c + half;
        for (h = 0; h < heads; ++h) {
            float* v = x + (t * heads + h) * head_dim;
            for (i = 0; i < half; ++i) {
                int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
                float a = v[i0], b = v[i1], s = inverse ? -sn[i] : sn[i];
                v[i0] = a * c[i] - b * s;
                v[i1] = a * s + b * c[i];
            }
        }
    }
}

// act(x) and act'(x): SiLU x*sigmoid(x) (as x / (1 + exp(-x)) in float, the reference forward's
// expression), GELU's tanh form in double, ReLU.
static float quarot__tr_act(float x, quarot_act_kind k) {
    if (k == QUAROT_ACT_RELU) return x > 0.0f ? x : 0.0f;
    if (k == QUAROT_ACT_GELU) {
        double d = (double)x;
        return (float)(0.5 * d * (1.0 + tanh(0.7978845608028654 * (d + 0.044715 * d * d * d))));
    }
    return x / (1.0f + expf(-x));
}

static double quarot__tr_act_grad(float x, quarot_act_kind k) {
    double d = (double)x;
    if (k == QUAROT_ACT_RELU) return x > 0.0f ? 1.0 : 0.0;
    if (k == QUAROT_ACT_GELU) {
        double u = 0.7978845608028654 * (d + 0.044715 * d * d * d), th = tanh(u);
        return 0.5 * (1.0 + th) + 0.5 * d * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * d * d);
    } else {
        double s = 1.0 / (1.0 + exp(-d));
        return s * (1.0 + d * (1.0 - s));
    }
}

QUAROT_API void quarot_train_glu_f32(const float* g, const float* u, int64_t n, quarot_act_kind act, float* h) {
    int64_t i;
    if (!g || !u || !h) return;
    for (i = 0; i < n; ++i) h[i] = quarot__tr_act(g[i], act) * u[i];
}

QUAROT_API void quarot_train_glu_backward_f32(const float* g, const float* u, const float* dh, int64_t n,
                                              quarot_act_kind act, float* dg, float* du) {
    int64_t i;
    if (!g || !u || !dh || !dg || !du) return;
    for (i = 0; i < n; ++i) {
        float a = quarot__tr_act(g[i], act);
        dg[i] = (float)((double)dh[i] * (double)u[i] * quarot__tr_act_grad(g[i], act));
        du[i] = dh[i] * a;
    }
}

QUAROT_API size_t quarot_train_attention_work(int64_t T) { return T > 0 ? 2 * (size_t)T * (size_t)T : 0; }

// The one env a task's GEMMs run under: the caller's allocator, no parallel hook.
static quarot_env quarot__tr_serial_env(const quarot_env* env) {
    quarot_env e = quarot__env_copy(env);
    memset(&e.parallel, 0, sizeof e.parallel);
    return e;
}

// Causal blocks: queries [t0, t1) see keys [0, t1), so S, P and every product run over that
// trapezoid only (about half the square); P's row t beyond key t is 0.
#define QUAROT__TR_QBLOCK 64

// exp(v) as quarot_train_exp_sum_f32 states: the scalar specification of every kernel below.
static float quarot__tr_exp1(float v) {
    float fx, r, z, y, sc;
    uint32_t bits;
    if (v != v) return v;
    if (v < -87.0f) return 0.0f;
    if (v > 88.0f) v = 88.0f;
    fx = (v * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   // round(v / ln 2), ties to even
    r = v - fx * 0.693359375f;
    r = r - fx * -2.12194440e-4f;
    z = r * r;
    y = 1.9875691500e-4f * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    bits = (uint32_t)((int32_t)fx + 127) << 23;
    memcpy(&sc, &bits, sizeof sc);
    return y * sc;
}

static double quarot__tr_exp_sum_ref(float* x, int64_t n, float shift) {
    float part[16];
    double sum = 0.0;
    int64_t i;
    for (i = 0; i < 16; ++i) part[i] = 0.0f;
    for (i = 0; i < n; ++i) {
        x[i] = quarot__tr_exp1(x[i] - shift);
        part[i & 15] += x[i];
    }
    for (i = 0; i < 16; ++i) sum += (double)part[i];
    return sum;
}

#if defined(QUAROT__HAVE_AVX512)
static double quarot__tr_exp_sum_avx512(float* x, int64_t n, float shift) {
    const __m512 sh = _mm512_set1_ps(shift), lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.0f);
    const __m512 l2e = _mm512_set1_ps(1.44269504088896341f), mg = _mm512_set1_ps(12582912.0f);
    const __m512 c1 = _mm512_set1_ps(0.693359375f), c2 = _mm512_set1_ps(-2.12194440e-4f);
    const __m512 p0 = _mm512_set1_ps(1.9875691500e-4f), p1 = _mm512_set1_ps(1.3981999507e-3f);
    const __m512 p2 = _mm512_set1_ps(8.3334519073e-3f), p3 = _mm512_set1_ps(4.1665795894e-2f);
    const __m512 p4 = _mm512_set1_ps(1.6666665459e-1f), p5 = _mm512_set1_ps(5.0000001201e-1f);
    const __m512 one = _mm512_set1_ps(1.0f);
    const __mmask16 all = (__mmask16)0xFFFF;   // the masked forms: no _mm512_undefined_* (g++ -O1 warns)
    __m512 acc = _mm512_setzero_ps();
    float part[16];
    double sum = 0.0;
    int64_t i;
    for (i = 0; i < n; i += 16) {
        __mmask16 m = (__mmask16)(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1u);
        __m512 v = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), sh), fx, r, z, y;
        __mmask16 under = _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), over = _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ);
        __m512i e;
        v = _mm512_mask_mov_ps(v, over, hi);
        fx = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(v, l2e), mg), mg);
        r = _mm512_sub_ps(v, _mm512_mul_ps(fx, c1));
        r = _mm512_sub_ps(r, _mm512_mul_ps(fx, c2));
        z = _mm512_mul_ps(r, r);
        y = _mm512_add_ps(_mm512_mul_ps(p0, r), p1);
        y = _mm512_add_ps(_mm512_mul_ps(y, r), p2);
        y = _mm512_add_ps(_mm512_mul_ps(y, r), p3);
        y = _mm512_add_ps(_mm512_mul_ps(y, r), p4);
        y = _mm512_add_ps(_mm512_mul_ps(y, r), p5);
        y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(y, z), r), one);
        e = _mm512_add_epi32(_mm512_maskz_cvttps_epi32(all, fx), _mm512_set1_epi32(127));
        e = _mm512_maskz_slli_epi32(all, e, 23);
        y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
        y = _mm512_mask_mov_ps(y, (__mmask16)(under & m), _mm512_setzero_ps());
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
        _mm512_mask_storeu_ps(x + i, m, y);
        acc = _mm512_mask_add_ps(acc, m, acc, y);
    }
    _mm512_storeu_ps(part, acc);
    for (i = 0; i < 16; ++i) sum += (double)part[i];
    return sum;
}
#endif

QUAROT_API double quarot_train_exp_sum_f32(float* x, int64_t n, float shift, quarot_isa isa) {
    if (!x || n <= 0) return 0.0;
#if defined(QUAROT__HAVE_AVX512)
    if (isa == QUAROT_ISA_DEFAULT || isa == QUAROT_ISA_AVX512) return quarot__tr_exp_sum_avx512(x, n, shift);
#endif
    (void)isa;
    return quarot__tr_exp_sum_ref(x, n, shift);
}

// max of x[0..n) (n >= 1) and x[0..n) *= a: exact operations, so any order gives the same bits.
static float quarot__tr_max(const float* x, int64_t n) {
    float mx = x[0];
    int64_t i = 0;
#if defined(QUAROT__HAVE_AVX512)
    if (n >= 16) {
        float part[16];
        int k;
        __m512 v = _mm512_loadu_ps(x);
        for (i = 16; i + 16 <= n; i += 16) v = _mm512_maskz_max_ps((__mmask16)0xFFFF, v, _mm512_loadu_ps(x + i));
        _mm512_storeu_ps(part, v);
        for (k = 0; k < 16; ++k) mx = part[k] > mx ? part[k] : mx;
    }
#endif
    for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    return mx;
}
static void quarot__tr_scale(float* x, int64_t n, float a) {
    int64_t i = 0;
#if defined(QUAROT__HAVE_AVX512)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(a)));
#endif
    for (; i < n; ++i) x[i] *= a;
}

// Causal softmax of s[T][T] by rows, in place: row t sees keys 0..t; the masked keys of its block of
// queries are set to 0 (the products read no further).
static void quarot__tr_softmax_causal(float* s, int64_t T) {
    int64_t t, k;
    for (t = 0; t < T; ++t) {
        float* sr = s + t * T;
        int64_t end = (t / QUAROT__TR_QBLOCK + 1) * QUAROT__TR_QBLOCK;
        float mx = quarot__tr_max(sr, t + 1), inv;
        inv = (float)(1.0 / quarot_train_exp_sum_f32(sr, t + 1, mx, QUAROT_ISA_DEFAULT));
        quarot__tr_scale(sr, t + 1, inv);
        for (k = t + 1; k < (end < T ? end : T); ++k) sr[k] = 0.0f;
    }
}

static quarot_result quarot__tr_attn_check(const void* q, const void* k, const void* v, int64_t T, int64_t nh,
                                           int64_t nkv, int64_t hd, int64_t ldq, int64_t ldk, int64_t ldv) {
    if (!q || !k || !v || T < 1 || nh < 1 || nkv < 1 || hd < 1 || nh % nkv != 0 || ldq < nh * hd || ldk < nkv * hd ||
        ldv < nkv * hd || T > ((int64_t)1 << 24))
        return QUAROT_ERR_INVALID_ARGUMENT;
    return QUAROT_OK;
}


// P [T][T] (lower trapezoids of blocks; the rest of each row zero) = causal softmax(scale q_h k_g^T)
static quarot_result quarot__tr_scores(const float* qh, int64_t ldq, const float* kg, int64_t ldk, int64_t T,
                                       int64_t hd, float scale, float* p, const quarot_env* env) {
    int64_t t0;
    quarot_result r = QUAROT_OK;
    for (t0 = 0; t0 < T && r == QUAROT_OK; t0 += QUAROT__TR_QBLOCK) {
        int64_t t1 = t0 + QUAROT__TR_QBLOCK < T ? t0 + QUAROT__TR_QBLOCK : T;
        r = quarot_sgemm(0, 1, t1 - t0, t1, hd, scale, qh + t0 * ldq, ldq, kg, ldk, 0.0f, p + t0 * T, T, env);
    }
    if (r == QUAROT_OK) quarot__tr_softmax_causal(p, T);
    return r;
}

QUAROT_API quarot_result quarot_train_attention_f32(const float* q, int64_t ldq, const float* k, int64_t ldk,
                                                    const float* v, int64_t ldv, int64_t T, int64_t n_heads,
                                                    int64_t n_kv_heads, int64_t head_dim, float* out, int64_t ldo,
                                                    float* work, const quarot_env* env) {
    int64_t h, group, t0;
    float scale, *p, *own = NULL;
    quarot_result r = quarot__tr_attn_check(q, k, v, T, n_heads, n_kv_heads, head_dim, ldq, ldk, ldv);
    if (r != QUAROT_OK) return r;
    if (!out || ldo < n_heads * head_dim) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!work) {
        own = (float*)quarot_env_alloc(env, quarot_train_attention_work(T) * sizeof(float));
        if (!own) return QUAROT_ERR_OUT_OF_MEMORY;
        work = own;
    }
    p = work;
    group = n_heads / n_kv_heads;
    scale = (float)(1.0 / sqrt((double)head_dim));
    for (h = 0; h < n_heads && r == QUAROT_OK; ++h) {
        int64_t g = h / group;
        r = quarot__tr_scores(q + h * head_dim, ldq, k + g * head_dim, ldk, T, head_dim, scale, p, env);
        for (t0 = 0; t0 < T && r == QUAROT_OK; t0 += QUAROT__TR_QBLOCK) {   // out_h = P v_g over each block's keys
            int64_t t1 = t0 + QUAROT__TR_QBLOCK < T ? t0 + QUAROT__TR_QBLOCK : T;
            r = quarot_sgemm(0, 0, t1 - t0, head_dim, t1, 1.0f, p + t0 * T, T, v + g * head_dim, ldv, 0.0f,
                             out + t0 * ldo + h * head_dim, ldo, env);
        }
    }
    quarot_env_free(env, own);
    return r;
}

QUAROT_API quarot_result quarot_train_attention_backward_f32(const float* q, int64_t ldq, const float* k, int64_t ldk,
                                                             const float* v, int64_t ldv, const float* dout,
                                                             int64_t lddo, int64_t T, int64_t n_heads,
                                                             int64_t n_kv_heads, int64_t head_dim, float* dq, float* dk,
                                                             float* dv, float* work, const quarot_env* env) {
    int64_t h, group, t, s, j, t0;
    float scale, *p, *dp, *own = NULL;
    quarot_result r = quarot__tr_attn_check(q, k, v, T, n_heads, n_kv_heads, head_dim, ldq, ldk, ldv);
    if (r != QUAROT_OK) return r;
    if (!dout || !dq || !dk || !dv || lddo < n_heads * head_dim) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!work) {
        own = (float*)quarot_env_alloc(env, quarot_train_attention_work(T) * sizeof(float));
        if (!own) return QUAROT_ERR_OUT_OF_MEMORY;
        work = own;
    }
    p = work;
    dp = work + T * T;
    group = n_heads / n_kv_heads;
    scale = (float)(1.0 / sqrt((double)head_dim));
    for (t = 0; t < T; ++t)
        for (j = 0; j < n_kv_heads * head_dim; ++j) dk[t * ldk + j] = dv[t * ldv + j] = 0.0f;
    for (h = 0; h < n_heads && r == QUAROT_OK; ++h) {
        int64_t g = h / group;
        const float* qh = q + h * head_dim;
        const float* kg = k + g * head_dim;
        const float* vg = v + g * head_dim;
        const float* doh = dout + h * head_dim;
        r = quarot__tr_scores(qh, ldq, kg, ldk, T, head_dim, scale, p, env);
        for (t0 = 0; t0 < T && r == QUAROT_OK; t0 += QUAROT__TR_QBLOCK) {
            int64_t t1 = t0 + QUAROT__TR_QBLOCK < T ? t0 + QUAROT__TR_QBLOCK : T, nq = t1 - t0;
            float* pb = p + t0 * T;
            float* db = dp + t0 * T;
            // dv_g += P^T dout_h;  dP = dout_h v_g^T (this block's keys)
            r = quarot_sgemm(1, 0, t1, head_dim, nq, 1.0f, pb, T, doh + t0 * lddo, lddo, 1.0f, dv + g * head_dim, ldv,
                             env);
            if (r == QUAROT_OK)
                r = quarot_sgemm(0, 1, nq, t1, head_dim, 1.0f, doh + t0 * lddo, lddo, vg, ldv, 0.0f, db, T, env);
            if (r != QUAROT_OK) break;
            // dS = P * (dP - sum_s P dP), in place in dp (keys after t: P = 0)
            for (t = t0; t < t1; ++t) {
                float* pr = p + t * T;
                float* dr = dp + t * T;
                double d = 0.0;
                for (s = 0; s <= t; ++s) d += (double)pr[s] * (double)dr[s];
                for (s = 0; s <= t; ++s) dr[s] = pr[s] * (dr[s] - (float)d);
                for (s = t + 1; s < t1; ++s) dr[s] = 0.0f;
            }
            // dq_h = scale dS k_g;  dk_g += scale dS^T q_h
            r = quarot_sgemm(0, 0, nq, head_dim, t1, scale, db, T, kg, ldk, 0.0f, dq + t0 * ldq + h * head_dim, ldq,
                             env);
            if (r == QUAROT_OK)
                r = quarot_sgemm(1, 0, t1, head_dim, nq, scale, db, T, qh + t0 * ldq, ldq, 1.0f, dk + g * head_dim, ldk,
                                 env);
        }
    }
    quarot_env_free(env, own);
    return r;
}

QUAROT_API double quarot_train_cross_entropy_f32(const float* logits, int64_t rows, int64_t vocab,
                                                 const int32_t* targets, float scale, float* dlogits) {
    double total = 0.0;
    int64_t r, j;
    if (!logits || !targets || rows <= 0 || vocab <= 0) return 0.0;
    for (r = 0; r < rows; ++r) {
        const float* lr = logits + r * vocab;
        float* dr = dlogits ? dlogits + r * vocab : NULL;
        int32_t y = targets[r];
        double mx, sum = 0.0, lse;
        if (y < 0 || y >= vocab) {
            if (dr) for (j = 0; j < vocab; ++j) dr[j] = 0.0f;
            continue;
        }
        mx = (double)lr[0];
        for (j = 1; j < vocab; ++j) if ((double)lr[j] > mx) mx = (double)lr[j];
        for (j = 0; j < vocab; ++j) sum += exp((double)lr[j] - mx);
        lse = mx + log(sum);
        total += lse - (double)lr[y];
        if (dr) {
            for (j = 0; j < vocab; ++j) dr[j] = (float)((double)scale * exp((double)lr[j] - lse));
            dr[y] -= scale;
        }
    }
    return total;
}

QUAROT_API double quarot_train_kl_div_f32(const float* logits, int64_t rows, int64_t vocab, const float* p,
                                          const int32_t* mask, float scale, float* dlogits) {
    double total = 0.0;
    int64_t r, j;
    if (!logits || !p || rows <= 0 || vocab <= 0) return 0.0;
    for (r = 0; r < rows; ++r) {
        const float* zr = logits + r * vocab;
        const float* pr = p + r * vocab;
        float* dr = dlogits ? dlogits + r * vocab : NULL;
        double mx, sum = 0.0, lse, kl = 0.0;
        if (mask && mask[r] < 0) {
            if (dr) for (j = 0; j < vocab; ++j) dr[j] = 0.0f;
            continue;
        }
        mx = (double)zr[0];
        for (j = 1; j < vocab; ++j) if ((double)zr[j] > mx) mx = (double)zr[j];
        for (j = 0; j < vocab; ++j) sum += exp((double)zr[j] - mx);
        lse = mx + log(sum);
        for (j = 0; j < vocab; ++j)
            if (pr[j] > 0.0f) kl += (double)pr[j] * (log((double)pr[j]) - ((double)zr[j] - lse));
        total += kl;
        if (dr) for (j = 0; j < vocab; ++j) dr[j] = (float)((double)scale * (exp((double)zr[j] - lse) - (double)pr[j]));
    }
    return total;
}

// max column sum of |w| [n][n]
static double quarot__tr_norm1(const double* w, int64_t n, double* colsum) {
    int64_t i, j;
    double best = 0.0;
    for (j = 0; j < n; ++j) colsum[j] = 0.0;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) colsum[j] += fabs(w[i * n + j]);
    for (j = 0; j < n; ++j) if (colsum[j] > best) best = colsum[j];
    return best;
}

QUAROT_API quarot_result quarot_stiefel_step_f64(int64_t n, double* r, const double* grad, double* momentum,
                                                 const quarot_stiefel_desc* d, quarot_stiefel_info* info,
                                                 const quarot_env* env) {
    double lr, mom, tol, alpha, wn, err;
    int iters, it;
    size_t nn;
    double *buf, *m, *a, *b, *w, *xt, *y;
    int64_t i, j;
    quarot_result res = QUAROT_OK;
    if (info) memset(info, 0, sizeof *info);
    if (n < 1 || !r || !grad || !momentum || !d) return QUAROT_ERR_INVALID_ARGUMENT;
    lr = d->lr;
    mom = d->momentum;
    iters = d->cayley_iters == 0 ? 5 : d->cayley_iters;
    tol = d->orth_tol > 0.0 ? d->orth_tol : 1e-6;
    if (!(lr > 0.0) || lr > 1e30 || !(mom >= 0.0 && mom < 1.0) || iters < 0 || iters > 1000 || n > ((int64_t)1 << 20))
        return QUAROT_ERR_INVALID_ARGUMENT;
    if (!quarot__mul_size((size_t)n, (size_t)n, &nn) || nn > SIZE_MAX / (6 * sizeof(double)))
        return QUAROT_ERR_OVERFLOW;
    for (i = 0; i < (int64_t)nn; ++i)
        if (!(fabs(grad[i]) <= 1.7976931348623157e308)) return QUAROT_ERR_NONFINITE;
    buf = (double*)quarot_env_alloc(env, 5 * nn * sizeof(double) + (size_t)n * sizeof(double));
    if (!buf) return QUAROT_ERR_OUT_OF_MEMORY;
    m = buf; a = m + nn; b = a + nn; w = b + nn; xt = w + nn; y = a;   // y reuses a after W is built
    // M = momentum*M - G^T (into the local m; the caller's buffer is updated at the end)
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) m[i * n + j] = mom * momentum[i * n + j] - grad[j * n + i];
    // Wh = M R - R^T (R (M R)) / 2;  W = Wh - Wh^T
    res = quarot_dgemm(0, 0, n, n, n, 1.0, m, n, r, n, 0.0, a, n, env);                 // a = M R
    if (res == QUAROT_OK) res = quarot_dgemm(0, 0, n, n, n, 1.0, r, n, a, n, 0.0, b, n, env);   // b = R M R
    if (res == QUAROT_OK) res = quarot_dgemm(1, 0, n, n, n, -0.5, r, n, b, n, 1.0, a, n, env);  // a -= R^T b / 2
    if (res != QUAROT_OK) goto done;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) w[i * n + j] = a[i * n + j] - a[j * n + i];
    wn = quarot__tr_norm1(w, n, buf + 5 * nn);
    alpha = 1.0 / (wn + 1e-8);
    if (alpha > lr) alpha = lr;
    // Y = R^T + alpha M; Y <- R^T + alpha W (R^T + Y) / 2
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) xt[i * n + j] = r[j * n + i];
    for (i = 0; i < (int64_t)nn; ++i) y[i] = xt[i] + alpha * m[i];
    for (it = 0; it < iters && res == QUAROT_OK; ++it) {
        for (i = 0; i < (int64_t)nn; ++i) b[i] = 0.5 * (xt[i] + y[i]);
        for (i = 0; i < (int64_t)nn; ++i) y[i] = xt[i];
        res = quarot_dgemm(0, 0, n, n, n, alpha, w, n, b, n, 1.0, y, n, env);
    }
    if (res != QUAROT_OK) goto done;
    // M <- W R^T (the new momentum); R <- Y^T
    res = quarot_dgemm(0, 0, n, n, n, 1.0, w, n, xt, n, 0.0, b, n, env);
    if (res != QUAROT_OK) goto done;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) r[i * n + j] = y[j * n + i];
    memcpy(momentum, b, nn * sizeof(double));
    err = quarot__orth_error_gemm(r, n, env);
    if (err < 0.0) { res = QUAROT_ERR_OUT_OF_MEMORY; goto done; }
    if (info) {
        info->alpha = alpha;
        info->w_norm = wn;
        info->orth_error = err;
    }
    if (!(err <= tol)) {   // drifted (or a NaN crept in): back onto the manifold
        quarot_polar_desc pd;
        memset(&pd, 0, sizeof pd);
        pd.tol = 1e-13;
        res = quarot_polar_newton_schulz_f64(n, r, n, r, n, &pd, NULL, env);
        if (info) info->reorthogonalized = 1;
    }
done:
    quarot_env_free(env, buf);
    return res;
}

// >>train_model
// The trainer's state lives in quarot__tr (t->priv). A pass: embeddings -> x0 R1, then per layer:
// read the frozen weights (fused norm gains, the online hooks' offline halves), form W_eff from R1
// and the layer's R2, run the layer over every row of the batch; the final norm, lm_head and the
// cross-entropy; then the layers in reverse: W_eff again (and the forward again with recompute),
// the layer's backward into dL/dx and dL/dW_eff, and the chain rule into dL/dR1 and dL/dR2.

// One layer's weights, f32 [out][in] row-major (biases and q/k norm gains NULL when absent).
typedef struct quarot__tr_lw {
    float *wq, *wk, *wv, *wo, *wg, *wu, *wd;
    float *bq, *bk, *bv, *qn, *kn;
} quarot__tr_lw;

// One layer's activations over the batch's rows: its input x, the attention norm's rstd and
// (quantized) output aq, q/k before the per-head norms with their rstd (qk_norm), q/k/v as attention
// reads them (after RoPE, R3 and K/V quantization), o_proj's input attq (after the heads hook and
// quantization), the stream after attention xm, the MLP norm's rstd and output a2q, gate and up
// outputs g and u, and down_proj's input hq (after R4 and quantization).
typedef struct quarot__tr_tape {
    float *x, *rs1, *aq, *qraw, *kraw, *rsq, *rsk, *q, *k, *v, *attq, *xm, *rs2, *a2q, *g, *u, *hq;
} quarot__tr_tape;

// Per layer: the names of its tensors.
enum { QUAROT__TR_N1, QUAROT__TR_Q, QUAROT__TR_K, QUAROT__TR_V, QUAROT__TR_O, QUAROT__TR_N2, QUAROT__TR_G, QUAROT__TR_U,
       QUAROT__TR_D, QUAROT__TR_QN, QUAROT__TR_KN, QUAROT__TR_BQ, QUAROT__TR_BK, QUAROT__TR_BV, QUAROT__TR_NAMES };

typedef struct quarot__tr {
    quarot_plan plan;
    quarot_env env;                      // the model's: allocator, parallel hook
    int threads;
    int64_t h, im, nh, nkv, hd, qd, kvd, V, L;
    float eps;
    char (*names)[QUAROT__TR_NAMES][QUAROT_NAME_MAX];   // [L]
    int has_b[3], has_qkn;               // q/k/v biases, q/k norms
    quarot_quant_desc qa, qa_down, qk, qv, qw;   // bits 0: that quantizer is off
    // fixed online transforms: across heads (dense H_g / sqrt(g) per block of g heads), before
    // down_proj (the fast transform of order n4 per block), q/k after RoPE (dense H_n3 / sqrt(n3))
    int64_t g_heads, n4, n3;
    float *h_heads, *h3, *h4;            // h4: plan4 as a dense [n4][n4] matrix (small n4: a GEMM is faster)
    quarot_hadamard_plan plan4;
    size_t work4;
    // globals
    float *final_g, *gain;                // [h]: the final norm, a layer norm being read
    const float* lm;                     // [V][h]: lm_owned or the model's own f32 tensor
    float* lm_owned;
    // weights: frozen, effective, d/dW_eff; M = W_v R1 and N = W_o (I (x) R2) with their gradients
    quarot__tr_lw F, E, dE;
    float *mv, *no, *dmv, *dno, *dbv;
    float *r1f, *r2f, *g1f, *g2f;        // rotations and their gradients in float
    double *m1, *m2, *best1, *best2;     // momentum buffers, best rotations of quarot_trainer_run
    // activations for cap_rows rows (cap_grad: with the backward's buffers)
    int64_t cap_rows, cap_T, rope_T, n_tapes, task_floats, attn_tasks;
    int cap_grad;
    quarot__tr_tape* tapes;
    float *act, *ckpt, *rope, *xs, *tmp, *tmpq, *tmp4, *dx, *da, *dq, *dk, *dv, *datt, *dh, *dg, *du, *fin, *dfin, *rsf,
        *lg, *scr;
    int32_t* targets;
    float* teacher;                      // KL: the FP32 model's probabilities [cap_rows][V]
} quarot__tr;

#define QUAROT__TR_LOGIT_ROWS 64         // lm_head and the cross-entropy run on chunks of rows

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void quarot__tr_err(quarot_trainer* t, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
}

static void* quarot__tr_alloc(const quarot__tr* p, int64_t n, size_t es) {
    size_t bytes;
    if (n < 1) n = 1;
    if (!quarot__mul_size((size_t)n, es, &bytes)) return NULL;
    return quarot_env_alloc(&p->env, bytes);
}

static quarot_result quarot__tr_gemm(quarot__tr* p, int ta, int tb, int64_t m, int64_t n, int64_t k, const float* a,
                                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    return quarot_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc, &p->env);
}

// ---- row-wise steps: fn(ctx, r0, r1, scratch) over [0, rows) in chunks through the parallel hook, each
// chunk with its own scratch (task_floats floats). Rows are independent: any split gives the same bits.
typedef struct quarot__tr_rctx {
    quarot__tr* p;
    float *x, *y, *s;
    const float *a, *b;
    int64_t n, T;
    const quarot_quant_desc* q;
    int mode;
} quarot__tr_rctx;

typedef quarot_result (*quarot__tr_rows_fn)(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* scratch);

typedef struct quarot__tr_rows_job {
    quarot__tr_rows_fn fn;
    const quarot__tr_rctx* ctx;
    int64_t rows, per;
    quarot_result st[64];
} quarot__tr_rows_job;

static void quarot__tr_rows_task(void* arg, int64_t i) {
    quarot__tr_rows_job* j = (quarot__tr_rows_job*)arg;
    int64_t r0 = i * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows;
    j->st[i] = j->fn(j->ctx, r0, r1, j->ctx->p->scr + i * j->ctx->p->task_floats);
}

static quarot_result quarot__tr_rows(const quarot__tr_rctx* c, int64_t rows, quarot__tr_rows_fn fn) {
    quarot__tr* p = c->p;
    quarot__tr_rows_job j;
    int64_t tasks = p->threads, i;
    quarot_result r = QUAROT_OK;
    if (rows <= 0) return QUAROT_OK;
    if (tasks > 64) tasks = 64;
    if (tasks > rows) tasks = rows;
    if (tasks <= 1 || (double)rows * (double)c->n < 32768.0) return fn(c, 0, rows, p->scr);
    j.fn = fn;
    j.ctx = c;
    j.rows = rows;
    j.per = (rows + tasks - 1) / tasks;
    tasks = (rows + j.per - 1) / j.per;
    quarot_env_parallel_for(&p->env, quarot__tr_rows_task, &j, tasks);
    for (i = 0; i < tasks && r == QUAROT_OK; ++i) r = j.st[i];
    return r;
}

static quarot__tr_rctx quarot__tr_ctx(quarot__tr* p, float* x, int64_t n) {
    quarot__tr_rctx c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.x = x;
    c.n = n;
    return c;
}

// y = rmsnorm(x) * a (a = gain or NULL), s = rstd
static quarot_result quarot__tr_f_norm(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    (void)w;
    quarot_train_rmsnorm_f32(c->x + r0 * c->n, r1 - r0, c->n, c->a, c->p->eps, c->y + r0 * c->n, c->s + r0);
    return QUAROT_OK;
}
// y (+)= d rmsnorm: x, s = rstd, a = gain, b = dy; mode = accumulate
static quarot_result quarot__tr_f_norm_bwd(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    (void)w;
    quarot_train_rmsnorm_backward_f32(c->x + r0 * c->n, c->s + r0, r1 - r0, c->n, c->a, c->b + r0 * c->n,
                                      c->y + r0 * c->n, c->mode);
    return QUAROT_OK;
}
static quarot_result quarot__tr_f_quant(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    (void)w;
    return quarot_fake_quant_f32(c->x + r0 * c->n, r1 - r0, c->n, c->n, c->q);
}
// RoPE on token rows (n = heads * head_dim floats each; position = row % T); mode = inverse
static quarot_result quarot__tr_f_rope(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    const quarot__tr* p = c->p;
    int64_t r;
    (void)w;
    for (r = r0; r < r1; ++r)
        quarot_train_rope_f32(c->x + r * c->n, 1, c->n / p->hd, p->hd, p->rope + (r % c->T) * p->hd, 0, c->mode);
    return QUAROT_OK;
}
static quarot_result quarot__tr_f_rope_il(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    const quarot__tr* p = c->p;
    int64_t r;
    (void)w;
    for (r = r0; r < r1; ++r)
        quarot_train_rope_f32(c->x + r * c->n, 1, c->n / p->hd, p->hd, p->rope + (r % c->T) * p->hd, 1, c->mode);
    return QUAROT_OK;
}
// x = act(x) * a  (x holds the gate's output, a the up projection's: h = act(g) * u into y)
static quarot_result quarot__tr_f_glu(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    (void)w;
    quarot_train_glu_f32(c->x + r0 * c->n, c->a + r0 * c->n, (r1 - r0) * c->n, (quarot_act_kind)c->mode,
                         c->y + r0 * c->n);
    return QUAROT_OK;
}
// from dh (b), g (x), u (a): dg into y, du into s
static quarot_result quarot__tr_f_glu_bwd(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    (void)w;
    quarot_train_glu_backward_f32(c->x + r0 * c->n, c->a + r0 * c->n, c->b + r0 * c->n, (r1 - r0) * c->n,
                                  (quarot_act_kind)c->mode, c->y + r0 * c->n, c->s + r0 * c->n);
    return QUAROT_OK;
}
static quarot_result quarot__tr_f_add(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    int64_t i;
    (void)w;
    for (i = r0 * c->n; i < r1 * c->n; ++i) c->x[i] += c->a[i];
    return QUAROT_OK;
}
// The heads transform on rows of [n_heads][head_dim]: per block of g heads, v_i <- sum_k v_k H[k][i]
// (mode 0) or sum_k v_k H[i][k] (mode 1, the transpose), for every head_dim column.
static quarot_result quarot__tr_f_heads(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    const quarot__tr* p = c->p;
    int64_t g = p->g_heads, hd = p->hd, blocks = p->nh / g, r, o, i, k, d;
    const float* H = p->h_heads;
    for (r = r0; r < r1; ++r)
        for (o = 0; o < blocks; ++o) {
            float* x = c->x + r * c->n + o * g * hd;
            for (i = 0; i < g; ++i)
                for (d = 0; d < hd; ++d) {
                    float acc = 0.0f;
                    for (k = 0; k < g; ++k) acc += x[k * hd + d] * (c->mode ? H[i * g + k] : H[k * g + i]);
                    w[i * hd + d] = acc;
                }
            memcpy(x, w, (size_t)(g * hd) * sizeof(float));
        }
    return QUAROT_OK;
}
// The down_proj transform: each row's n4-blocks through the fast Hadamard transform (mode: transpose).
static quarot_result quarot__tr_f_had4(const quarot__tr_rctx* c, int64_t r0, int64_t r1, float* w) {
    const quarot__tr* p = c->p;
    quarot_hadamard_apply_desc d;
    memset(&d, 0, sizeof d);
    d.transpose = c->mode;
    return quarot_hadamard_apply_f32(&p->plan4, &d, c->x + r0 * c->n, (r1 - r0) * (c->n / p->n4), p->n4, w, p->work4);
}

static quarot_result quarot__tr_norm(quarot__tr* p, const float* x, int64_t rows, int64_t n, const float* g, float* y,
                                     float* rs) {
    quarot__tr_rctx c = quarot__tr_ctx(p, (float*)(uintptr_t)x, n);
    c.y = y; c.s = rs; c.a = g;
    return quarot__tr_rows(&c, rows, quarot__tr_f_norm);
}
static quarot_result quarot__tr_norm_bwd(quarot__tr* p, const float* x, const float* rs, int64_t rows, int64_t n,
                                         const float* g, const float* dy, float* dx, int acc) {
    quarot__tr_rctx c = quarot__tr_ctx(p, (float*)(uintptr_t)x, n);
    c.s = (float*)(uintptr_t)rs; c.a = g; c.b = dy; c.y = dx; c.mode = acc;
    return quarot__tr_rows(&c, rows, quarot__tr_f_norm_bwd);
}
static quarot_result quarot__tr_quant(quarot__tr* p, float* x, int64_t rows, int64_t n, const quarot_quant_desc* q) {
    quarot__tr_rctx c = quarot__tr_ctx(p, x, n);
    if (!q->bits) return QUAROT_OK;
    c.q = q;
    return quarot__tr_rows(&c, rows, quarot__tr_f_quant);
}
static quarot_result quarot__tr_rope(quarot__tr* p, float* x, int64_t rows, int64_t T, int64_t n, int inverse,
                                     int interleaved) {
    quarot__tr_rctx c = quarot__tr_ctx(p, x, n);
    c.T = T; c.mode = inverse;
    return quarot__tr_rows(&c, rows, interleaved ? quarot__tr_f_rope_il : quarot__tr_f_rope);
}
static quarot_result quarot__tr_add(quarot__tr* p, float* x, const float* a, int64_t rows, int64_t n) {
    quarot__tr_rctx c = quarot__tr_ctx(p, x, n);
    c.a = a;
    return quarot__tr_rows(&c, rows, quarot__tr_f_add);
}
static quarot_result quarot__tr_heads(quarot__tr* p, float* x, int64_t rows, int transpose) {
    quarot__tr_rctx c = quarot__tr_ctx(p, x, p->qd);
    if (!p->g_heads) return QUAROT_OK;
    c.mode = transpose;
    return quarot__tr_rows(&c, rows, quarot__tr_f_heads);
}
static quarot_result quarot__tr_had4(quarot__tr* p, float* x, int64_t rows, int transpose) {
    quarot__tr_rctx c = quarot__tr_ctx(p, x, p->im);
    if (!p->n4) return QUAROT_OK;
    c.mode = transpose;
    return quarot__tr_rows(&c, rows, quarot__tr_f_had4);
}
// The down_proj transform of activations: through the dense h4 (tmp [rows][im]) when there is one.
static quarot_result quarot__tr_had4x(quarot__tr* p, float* x, int64_t rows, int transpose, float* tmp) {
    quarot_result r;
    int64_t m;
    if (!p->n4 || !p->h4) return quarot__tr_had4(p, x, rows, transpose);
    m = rows * (p->im / p->n4);
    r = quarot__tr_gemm(p, 0, transpose, m, p->n4, p->n4, x, p->n4, p->h4, p->n4, 0.0f, tmp, p->n4);
    if (r == QUAROT_OK) memcpy(x, tmp, (size_t)(rows * p->im) * sizeof(float));
    return r;
}
// R3: x [rows][width] <- x H3 (transpose: x H3^T) per block of n3, through tmp [rows][width]
static quarot_result quarot__tr_had3(quarot__tr* p, float* x, int64_t rows, int64_t width, int transpose) {
    quarot_result r;
    int64_t m;
    if (!p->n3) return QUAROT_OK;
    m = rows * (width / p->n3);
    r = quarot__tr_gemm(p, 0, transpose, m, p->n3, p->n3, x, p->n3, p->h3, p->n3, 0.0f, p->tmpq, p->n3);
    if (r == QUAROT_OK) memcpy(x, p->tmpq, (size_t)(rows * width) * sizeof(float));
    return r;
}

// ---- attention over (window, KV head) units, split into tasks with their own T x T buffers
typedef struct quarot__tr_attn_job {
    quarot__tr* p;
    const float *q, *k, *v, *dout;
    float *out, *dq, *dk, *dv;
    int64_t T, units, per;
    int backward;
    quarot_result st[64];
} quarot__tr_attn_job;

static void quarot__tr_attn_task(void* arg, int64_t task) {
    quarot__tr_attn_job* j = (quarot__tr_attn_job*)arg;
    quarot__tr* p = j->p;
    int64_t u0 = task * j->per, u1 = u0 + j->per < j->units ? u0 + j->per : j->units, u;
    int64_t T = j->T, group = p->nh / p->nkv;
    float* work = p->scr + task * p->task_floats;
    quarot_env env = quarot__tr_serial_env(&p->env);
    quarot_result r = QUAROT_OK;
    for (u = u0; u < u1 && r == QUAROT_OK; ++u) {
        int64_t w = u / p->nkv, g = u % p->nkv, hq0 = g * group * p->hd, kv0 = g * p->hd, row = w * T;
        // one KV head and its query heads: the public functions on a view with n_kv_heads = 1
        if (!j->backward)
            r = quarot_train_attention_f32(j->q + row * p->qd + hq0, p->qd, j->k + row * p->kvd + kv0, p->kvd,
                                           j->v + row * p->kvd + kv0, p->kvd, T, group, 1, p->hd,
                                           j->out + row * p->qd + hq0, p->qd, work, &env);
        else
            r = quarot_train_attention_backward_f32(j->q + row * p->qd + hq0, p->qd, j->k + row * p->kvd + kv0, p->kvd,
                                                    j->v + row * p->kvd + kv0, p->kvd, j->dout + row * p->qd + hq0,
                                                    p->qd, T, group, 1, p->hd, j->dq + row * p->qd + hq0,
                                                    j->dk + row * p->kvd + kv0, j->dv + row * p->kvd + kv0, work, &env);
    }
    j->st[task] = r;
}

static quarot_result quarot__tr_attention(quarot__tr* p, quarot__tr_attn_job* j, int64_t B) {
    int64_t tasks = p->attn_tasks, i;
    quarot_result r = QUAROT_OK;
    j->p = p;
    j->units = B * p->nkv;
    if (tasks > j->units) tasks = j->units;
    j->per = (j->units + tasks - 1) / tasks;
    tasks = (j->units + j->per - 1) / j->per;
    quarot_env_parallel_for(tasks > 1 ? &p->env : NULL, quarot__tr_attn_task, j, tasks);
    for (i = 0; i < tasks && r == QUAROT_OK; ++i) r = j->st[i];
    return r;
}

// ---- weights

// Read `name` ([rows][cols], or a vector when rows == 1) into out as f32. Absent and optional: *present = 0.
static quarot_result quarot__tr_read(quarot_trainer* t, const char* name, int64_t rows, int64_t cols, float* out,
                                     int* present) {
    quarot_model* m = t->model;
    quarot_tensor w;
    quarot_result r;
    int64_t i;
    memset(&w, 0, sizeof w);
    r = m->get_tensor(m->user_data, name, &w);
    if (present) {
        *present = r == QUAROT_OK;
        if (r == QUAROT_ERR_NOT_FOUND) return QUAROT_OK;
    }
    if (r != QUAROT_OK) {
        quarot__tr_err(t, "tensor '%s': %s", name, r == QUAROT_ERR_NOT_FOUND ? "not found" : quarot_result_string(r));
        return r;
    }
    if ((r = quarot_tensor_validate(&w)) != QUAROT_OK) {
        quarot__tr_err(t, "tensor '%s': invalid view", name);
        return r;
    }
    if (w.ne[0] != cols || quarot_tensor_nrows(&w) != rows || (rows > 1 && w.ne[1] != rows)) {
        quarot__tr_err(t, "tensor '%s' is {%lld, %lld}, expected {%lld, %lld}", name, (long long)w.ne[0],
                       (long long)quarot_tensor_nrows(&w), (long long)cols, (long long)rows);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    for (i = 0; i < rows; ++i)
        if ((r = quarot_tensor_get_row_f32(&w, i, out + i * cols)) != QUAROT_OK) {
            quarot__tr_err(t, "tensor '%s': %s", name, quarot_result_string(r));
            return r;
        }
    for (i = 0; i < rows * cols; ++i)
        if (!(fabsf(out[i]) <= 3.4028234663852886e38f)) {
            quarot__tr_err(t, "tensor '%s' has NaN or Inf at element %lld", name, (long long)i);
            return QUAROT_ERR_NONFINITE;
        }
    return QUAROT_OK;
}

// W[out][in] <- W diag(g)
static void quarot__tr_scale_cols(float* w, int64_t out, int64_t in, const float* g) {
    int64_t r, j;
    for (r = 0; r < out; ++r)
        for (j = 0; j < in; ++j) w[r * in + j] *= g[j];
}

// Layer l's frozen weights into p->F: the norm gains fused into their readers, W_o <- W_o (H_heads (x) I)
// and W_down <- W_down H4 when online (the halves quarot_rotate_model folds offline).
static quarot_result quarot__tr_load(quarot_trainer* t, int64_t l) {
    quarot__tr* p = (quarot__tr*)t->priv;
    quarot_model* m = t->model;
    char (*nm)[QUAROT_NAME_MAX] = p->names[l];
    quarot__tr_lw* F = &p->F;
    quarot_result r, rr;
    int present;
    if (m->acquire_layer && (r = m->acquire_layer(m->user_data, l)) != QUAROT_OK) {
        quarot__tr_err(t, "acquire_layer(%lld) failed: %s", (long long)l, quarot_result_string(r));
        return r;
    }
    r = quarot__tr_read(t, nm[QUAROT__TR_Q], p->qd, p->h, F->wq, NULL);
    if (r == QUAROT_OK) r = quarot__tr_read(t, nm[QUAROT__TR_K], p->kvd, p->h, F->wk, NULL);
    if (r == QUAROT_OK) r = quarot__tr_read(t, nm[QUAROT__TR_V], p->kvd, p->h, F->wv, NULL);
    if (r == QUAROT_OK) r = quarot__tr_read(t, nm[QUAROT__TR_O], p->h, p->qd, F->wo, NULL);
    if (r == QUAROT_OK) r = quarot__tr_read(t, nm[QUAROT__TR_G], p->im, p->h, F->wg, NULL);
    if (r == QUAROT_OK) r = quarot__tr_read(t, nm[QUAROT__TR_U], p->im, p->h, F->wu, NULL);
    if (r == QUAROT_OK) r = quarot__tr_read(t, nm[QUAROT__TR_D], p->h, p->im, F->wd, NULL);
    if (r == QUAROT_OK && p->has_b[0]) r = quarot__tr_read(t, nm[QUAROT__TR_BQ], 1, p->qd, F->bq, NULL);
    if (r == QUAROT_OK && p->has_b[1]) r = quarot__tr_read(t, nm[QUAROT__TR_BK], 1, p->kvd, F->bk, NULL);
    if (r == QUAROT_OK && p->has_b[2]) r = quarot__tr_read(t, nm[QUAROT__TR_BV], 1, p->kvd, F->bv, NULL);
    if (r == QUAROT_OK && p->has_qkn) r = quarot__tr_read(t, nm[QUAROT__TR_QN], 1, p->hd, F->qn, NULL);
    if (r == QUAROT_OK && p->has_qkn) r = quarot__tr_read(t, nm[QUAROT__TR_KN], 1, p->hd, F->kn, NULL);
    // the norm gains
    if (r == QUAROT_OK) r = quarot__tr_read(t, nm[QUAROT__TR_N1], 1, p->h, p->gain, &present);
    if (r == QUAROT_OK && !present) {
        quarot__tr_err(t, "tensor '%s' not found", nm[QUAROT__TR_N1]);
        r = QUAROT_ERR_NOT_FOUND;
    }
    if (r == QUAROT_OK) {
        quarot__tr_scale_cols(F->wq, p->qd, p->h, p->gain);
        quarot__tr_scale_cols(F->wk, p->kvd, p->h, p->gain);
        quarot__tr_scale_cols(F->wv, p->kvd, p->h, p->gain);
        r = quarot__tr_read(t, nm[QUAROT__TR_N2], 1, p->h, p->gain, &present);
        if (r == QUAROT_OK && !present) {
            quarot__tr_err(t, "tensor '%s' not found", nm[QUAROT__TR_N2]);
            r = QUAROT_ERR_NOT_FOUND;
        }
    }
    if (r == QUAROT_OK) {
        quarot__tr_scale_cols(F->wg, p->im, p->h, p->gain);
        quarot__tr_scale_cols(F->wu, p->im, p->h, p->gain);
    }
    if (m->release_layer) {
        rr = m->release_layer(m->user_data, l, 0);
        if (r == QUAROT_OK && rr != QUAROT_OK) {
            quarot__tr_err(t, "release_layer(%lld) failed: %s", (long long)l, quarot_result_string(rr));
            r = rr;
        }
    }
    if (r != QUAROT_OK) {
        char detail[sizeof t->error];
        memcpy(detail, t->error, sizeof detail);
        quarot__tr_err(t, "layer %lld: %s", (long long)l, detail);
        return r;
    }
    if (p->g_heads) r = quarot__tr_heads(p, F->wo, p->h, 0);
    if (r == QUAROT_OK && p->n4) r = quarot__tr_had4(p, F->wd, p->h, 0);
    return r;
}

// Layer l's effective weights (p->E) from p->F and the float rotations, and M, N of the chain rule.
static quarot_result quarot__tr_form(quarot_trainer* t, int64_t l) {
    quarot__tr* p = (quarot__tr*)t->priv;
    quarot__tr_lw *F = &p->F, *E = &p->E;
    const float* R1 = p->r1f;
    const float* R2 = p->r2f ? p->r2f + l * p->hd * p->hd : NULL;
    int64_t h = p->h, hd = p->hd, i, j, g;
    quarot_result r;
    r = quarot__tr_gemm(p, 0, 0, p->qd, h, h, F->wq, h, R1, h, 0.0f, E->wq, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, p->kvd, h, h, F->wk, h, R1, h, 0.0f, E->wk, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, p->kvd, h, h, F->wv, h, R1, h, 0.0f, p->mv, h);
    for (g = 0; g < p->nkv && r == QUAROT_OK; ++g)   // W_v,g <- R2^T (W_v R1)_g
        r = R2 ? quarot__tr_gemm(p, 1, 0, hd, h, hd, R2, hd, p->mv + g * hd * h, h, 0.0f, E->wv + g * hd * h, h)
               : QUAROT_OK;
    if (r == QUAROT_OK && !R2) memcpy(E->wv, p->mv, (size_t)(p->kvd * h) * sizeof(float));
    for (g = 0; g < p->nh && r == QUAROT_OK && R2; ++g)   // N = W_o (I (x) R2)
        r = quarot__tr_gemm(p, 0, 0, h, hd, hd, F->wo + g * hd, p->qd, R2, hd, 0.0f, p->no + g * hd, p->qd);
    if (r == QUAROT_OK && !R2) memcpy(p->no, F->wo, (size_t)(h * p->qd) * sizeof(float));
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, h, p->qd, h, R1, h, p->no, p->qd, 0.0f, E->wo, p->qd);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, p->im, h, h, F->wg, h, R1, h, 0.0f, E->wg, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, p->im, h, h, F->wu, h, R1, h, 0.0f, E->wu, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, h, p->im, h, R1, h, F->wd, p->im, 0.0f, E->wd, p->im);
    if (r != QUAROT_OK) return r;
    if (p->has_b[0]) memcpy(E->bq, F->bq, (size_t)p->qd * sizeof(float));
    if (p->has_b[1]) memcpy(E->bk, F->bk, (size_t)p->kvd * sizeof(float));
    if (p->has_b[2])   // b_v,g <- b_v,g R2
        for (g = 0; g < p->nkv; ++g)
            for (j = 0; j < hd; ++j) {
                float acc = 0.0f;
                for (i = 0; i < hd; ++i) acc += F->bv[g * hd + i] * (R2 ? R2[i * hd + j] : (i == j ? 1.0f : 0.0f));
                E->bv[g * hd + j] = acc;
            }
    if (p->qw.bits) {   // weights fake-quantized per output channel (rows of W_eff)
        if (r == QUAROT_OK) r = quarot__tr_quant(p, E->wq, p->qd, h, &p->qw);
        if (r == QUAROT_OK) r = quarot__tr_quant(p, E->wk, p->kvd, h, &p->qw);
        if (r == QUAROT_OK) r = quarot__tr_quant(p, E->wv, p->kvd, h, &p->qw);
        if (r == QUAROT_OK) r = quarot__tr_quant(p, E->wo, h, p->qd, &p->qw);
        if (r == QUAROT_OK) r = quarot__tr_quant(p, E->wg, p->im, h, &p->qw);
        if (r == QUAROT_OK) r = quarot__tr_quant(p, E->wu, p->im, h, &p->qw);
        if (r == QUAROT_OK) r = quarot__tr_quant(p, E->wd, h, p->im, &p->qw);
    }
    return r;
}

// y[rows][out] = x W^T (+ b)
static quarot_result quarot__tr_linear(quarot__tr* p, const float* x, int64_t rows, int64_t in, const float* w,
                                       const float* b, int64_t out, float* y) {
    quarot_result r = quarot__tr_gemm(p, 0, 1, rows, out, in, x, in, w, in, 0.0f, y, out);
    int64_t i, j;
    if (r == QUAROT_OK && b)
        for (i = 0; i < rows; ++i)
            for (j = 0; j < out; ++j) y[i * out + j] += b[j];
    return r;
}

// >>train_pass
// One pass: the layer forward and backward, the chain rule into dL/dR, buffers, and the whole pass.

// ---- one layer over rows = B*T rows (B windows of T tokens); xout may alias nothing in the tape.
static quarot_result quarot__tr_layer_fwd(quarot_trainer* t, quarot__tr_tape* tp, int64_t B, int64_t T, float* xout) {
    quarot__tr* p = (quarot__tr*)t->priv;
    const quarot__tr_lw* E = &p->E;
    const quarot__tr_lw* F = &p->F;
    const quarot_model_config* c = &t->config;
    int64_t rows = B * T, h = p->h;
    quarot__tr_attn_job aj;
    quarot__tr_rctx gc;
    quarot_result r;
    // attention: aq = Q(norm(x)); q, k, v; per-head norms; RoPE; R3; K/V quantization
    r = quarot__tr_norm(p, tp->x, rows, h, NULL, tp->aq, tp->rs1);
    if (r == QUAROT_OK) r = quarot__tr_quant(p, tp->aq, rows, h, &p->qa);
    if (r == QUAROT_OK) r = quarot__tr_linear(p, tp->aq, rows, h, E->wq, E->bq, p->qd, p->has_qkn ? tp->qraw : tp->q);
    if (r == QUAROT_OK) r = quarot__tr_linear(p, tp->aq, rows, h, E->wk, E->bk, p->kvd, p->has_qkn ? tp->kraw : tp->k);
    if (r == QUAROT_OK) r = quarot__tr_linear(p, tp->aq, rows, h, E->wv, E->bv, p->kvd, tp->v);
    if (r == QUAROT_OK && p->has_qkn) {
        r = quarot__tr_norm(p, tp->qraw, rows * p->nh, p->hd, F->qn, tp->q, tp->rsq);
        if (r == QUAROT_OK) r = quarot__tr_norm(p, tp->kraw, rows * p->nkv, p->hd, F->kn, tp->k, tp->rsk);
    }
    if (r == QUAROT_OK) r = quarot__tr_rope(p, tp->q, rows, T, p->qd, 0, c->rope_interleaved);
    if (r == QUAROT_OK) r = quarot__tr_rope(p, tp->k, rows, T, p->kvd, 0, c->rope_interleaved);
    if (r == QUAROT_OK) r = quarot__tr_had3(p, tp->q, rows, p->qd, 0);
    if (r == QUAROT_OK) r = quarot__tr_had3(p, tp->k, rows, p->kvd, 0);
    if (r == QUAROT_OK) r = quarot__tr_quant(p, tp->k, rows * p->nkv, p->hd, &p->qk);
    if (r == QUAROT_OK) r = quarot__tr_quant(p, tp->v, rows * p->nkv, p->hd, &p->qv);
    if (r != QUAROT_OK) return r;
    memset(&aj, 0, sizeof aj);
    aj.q = tp->q; aj.k = tp->k; aj.v = tp->v; aj.out = tp->attq; aj.T = T;
    r = quarot__tr_attention(p, &aj, B);
    // o_proj: heads hook, quantization, x_mid = x + attq Wo^T
    if (r == QUAROT_OK) r = quarot__tr_heads(p, tp->attq, rows, 0);
    if (r == QUAROT_OK) r = quarot__tr_quant(p, tp->attq, rows, p->qd, &p->qa);
    if (r == QUAROT_OK) r = quarot__tr_linear(p, tp->attq, rows, p->qd, E->wo, NULL, h, tp->xm);
    if (r == QUAROT_OK) r = quarot__tr_add(p, tp->xm, tp->x, rows, h);
    // MLP: a2q = Q(norm(x_mid)); h = act(gate) * up; R4; quantization; x_out = x_mid + hq Wd^T
    if (r == QUAROT_OK) r = quarot__tr_norm(p, tp->xm, rows, h, NULL, tp->a2q, tp->rs2);
    if (r == QUAROT_OK) r = quarot__tr_quant(p, tp->a2q, rows, h, &p->qa);
    if (r == QUAROT_OK) r = quarot__tr_linear(p, tp->a2q, rows, h, E->wg, NULL, p->im, tp->g);
    if (r == QUAROT_OK) r = quarot__tr_linear(p, tp->a2q, rows, h, E->wu, NULL, p->im, tp->u);
    if (r != QUAROT_OK) return r;
    gc = quarot__tr_ctx(p, tp->g, p->im);
    gc.a = tp->u; gc.y = tp->hq; gc.mode = (int)c->act;
    r = quarot__tr_rows(&gc, rows, quarot__tr_f_glu);
    if (r == QUAROT_OK) r = quarot__tr_had4x(p, tp->hq, rows, 0, p->tmp4);
    if (r == QUAROT_OK) r = quarot__tr_quant(p, tp->hq, rows, p->im, &p->qa_down);
    if (r == QUAROT_OK) r = quarot__tr_linear(p, tp->hq, rows, p->im, E->wd, NULL, h, xout);
    if (r == QUAROT_OK) r = quarot__tr_add(p, xout, tp->xm, rows, h);
    return r;
}

// dx [rows][h]: in, dL/d(layer output); out, dL/d(layer input). dL/dW_eff into p->dE (overwritten),
// dL/db_v into p->dbv. Straight-through: quantized values' gradients pass unchanged.
static quarot_result quarot__tr_layer_bwd(quarot_trainer* t, const quarot__tr_tape* tp, int64_t B, int64_t T) {
    quarot__tr* p = (quarot__tr*)t->priv;
    const quarot__tr_lw* E = &p->E;
    const quarot__tr_lw* F = &p->F;
    quarot__tr_lw* dE = &p->dE;
    const quarot_model_config* c = &t->config;
    int64_t rows = B * T, h = p->h, i, j;
    quarot__tr_attn_job aj;
    quarot__tr_rctx gc;
    quarot_result r;
    float* dx = p->dx;
    // down_proj: dhq = dx Wd, dWd = dx^T hq; R4^T; the gated activation
    r = quarot__tr_gemm(p, 0, 0, rows, p->im, h, dx, h, E->wd, p->im, 0.0f, p->dh, p->im);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, h, p->im, rows, dx, h, tp->hq, p->im, 0.0f, dE->wd, p->im);
    if (r == QUAROT_OK) r = quarot__tr_had4x(p, p->dh, rows, 1, p->dg);
    if (r != QUAROT_OK) return r;
    gc = quarot__tr_ctx(p, tp->g, p->im);
    gc.a = tp->u; gc.b = p->dh; gc.y = p->dg; gc.s = p->du; gc.mode = (int)c->act;
    r = quarot__tr_rows(&gc, rows, quarot__tr_f_glu_bwd);
    // gate / up: da = dg Wg + du Wu; dWg = dg^T a2q, dWu = du^T a2q; dx += norm2'(da)
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, rows, h, p->im, p->dg, p->im, E->wg, h, 0.0f, p->da, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, rows, h, p->im, p->du, p->im, E->wu, h, 1.0f, p->da, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, p->im, h, rows, p->dg, p->im, tp->a2q, h, 0.0f, dE->wg, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, p->im, h, rows, p->du, p->im, tp->a2q, h, 0.0f, dE->wu, h);
    if (r == QUAROT_OK) r = quarot__tr_norm_bwd(p, tp->xm, tp->rs2, rows, h, NULL, p->da, dx, 1);
    // o_proj: datt = dx Wo, dWo = dx^T attq; heads hook transposed; attention
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, rows, p->qd, h, dx, h, E->wo, p->qd, 0.0f, p->datt, p->qd);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, h, p->qd, rows, dx, h, tp->attq, p->qd, 0.0f, dE->wo, p->qd);
    if (r == QUAROT_OK) r = quarot__tr_heads(p, p->datt, rows, 1);
    if (r != QUAROT_OK) return r;
    memset(&aj, 0, sizeof aj);
    aj.q = tp->q; aj.k = tp->k; aj.v = tp->v; aj.dout = p->datt; aj.dq = p->dq; aj.dk = p->dk; aj.dv = p->dv; aj.T = T;
    aj.backward = 1;
    r = quarot__tr_attention(p, &aj, B);
    // R3^T, RoPE^-1, per-head norms
    if (r == QUAROT_OK) r = quarot__tr_had3(p, p->dq, rows, p->qd, 1);
    if (r == QUAROT_OK) r = quarot__tr_had3(p, p->dk, rows, p->kvd, 1);
    if (r == QUAROT_OK) r = quarot__tr_rope(p, p->dq, rows, T, p->qd, 1, c->rope_interleaved);
    if (r == QUAROT_OK) r = quarot__tr_rope(p, p->dk, rows, T, p->kvd, 1, c->rope_interleaved);
    if (r == QUAROT_OK && p->has_qkn) {   // through datt / tmpq as the outputs (then copied back)
        r = quarot__tr_norm_bwd(p, tp->qraw, tp->rsq, rows * p->nh, p->hd, F->qn, p->dq, p->datt, 0);
        if (r == QUAROT_OK) memcpy(p->dq, p->datt, (size_t)(rows * p->qd) * sizeof(float));
        if (r == QUAROT_OK)
            r = quarot__tr_norm_bwd(p, tp->kraw, tp->rsk, rows * p->nkv, p->hd, F->kn, p->dk, p->datt, 0);
        if (r == QUAROT_OK) memcpy(p->dk, p->datt, (size_t)(rows * p->kvd) * sizeof(float));
    }
    // q / k / v: da = dq Wq + dk Wk + dv Wv; dW = d^T aq; db_v; dx += norm1'(da)
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, rows, h, p->qd, p->dq, p->qd, E->wq, h, 0.0f, p->da, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, rows, h, p->kvd, p->dk, p->kvd, E->wk, h, 1.0f, p->da, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, rows, h, p->kvd, p->dv, p->kvd, E->wv, h, 1.0f, p->da, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, p->qd, h, rows, p->dq, p->qd, tp->aq, h, 0.0f, dE->wq, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, p->kvd, h, rows, p->dk, p->kvd, tp->aq, h, 0.0f, dE->wk, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, p->kvd, h, rows, p->dv, p->kvd, tp->aq, h, 0.0f, dE->wv, h);
    if (r == QUAROT_OK && p->has_b[2]) {
        for (j = 0; j < p->kvd; ++j) p->dbv[j] = 0.0f;
        for (i = 0; i < rows; ++i)
            for (j = 0; j < p->kvd; ++j) p->dbv[j] += p->dv[i * p->kvd + j];
    }
    if (r == QUAROT_OK) r = quarot__tr_norm_bwd(p, tp->x, tp->rs1, rows, h, NULL, p->da, dx, 1);
    return r;
}

// dL/dW_eff -> dL/dR1 (p->g1f, accumulated) and dL/dR2 of layer l (p->g2f + l*hd*hd, overwritten):
//   readers W R1: dR1 += W^T dW;  writers R1^T W: dR1 += W dW^T;
//   v: W_eff,g = R2^T M_g (M = W_v R1): dM_g = R2 dW_g, dR1 += W_v^T dM, dR2 += sum_g M_g dW_g^T (+ b_v,g^T db_g)
//   o: W_eff = R1^T N (N = W_o (I (x) R2)): dR1 += N dW^T, dN = R1 dW, dR2 += sum_h W_o,h^T dN_h
static quarot_result quarot__tr_chain(quarot_trainer* t, int64_t l) {
    quarot__tr* p = (quarot__tr*)t->priv;
    const quarot__tr_lw *F = &p->F, *dE = &p->dE;
    int64_t h = p->h, hd = p->hd, g, i, j;
    int d1 = !t->desc.freeze_r1, d2 = p->r2f && !t->desc.freeze_r2;
    const float* R2 = p->r2f ? p->r2f + l * hd * hd : NULL;
    float* G1 = p->g1f;
    float* G2 = p->g2f ? p->g2f + l * hd * hd : NULL;
    quarot_result r = QUAROT_OK;
    if (G2) for (i = 0; i < hd * hd; ++i) G2[i] = 0.0f;
    if (d1) {
        r = quarot__tr_gemm(p, 1, 0, h, h, p->qd, F->wq, h, dE->wq, h, 1.0f, G1, h);
        if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, h, h, p->kvd, F->wk, h, dE->wk, h, 1.0f, G1, h);
        if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, h, h, p->im, F->wg, h, dE->wg, h, 1.0f, G1, h);
        if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, h, h, p->im, F->wu, h, dE->wu, h, 1.0f, G1, h);
        if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 1, h, h, p->im, F->wd, p->im, dE->wd, p->im, 1.0f, G1, h);
        if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 1, h, h, p->qd, p->no, p->qd, dE->wo, p->qd, 1.0f, G1, h);
        // v_proj: dM = (I (x) R2) dW_eff (or dW_eff itself without R2)
        for (g = 0; g < p->nkv && r == QUAROT_OK && R2; ++g)
            r = quarot__tr_gemm(p, 0, 0, hd, h, hd, R2, hd, dE->wv + g * hd * h, h, 0.0f, p->dmv + g * hd * h, h);
        if (r == QUAROT_OK) r = quarot__tr_gemm(p, 1, 0, h, h, p->kvd, F->wv, h, R2 ? p->dmv : dE->wv, h, 1.0f, G1, h);
    }
    if (d2 && r == QUAROT_OK) {
        for (g = 0; g < p->nkv && r == QUAROT_OK; ++g)
            r = quarot__tr_gemm(p, 0, 1, hd, hd, h, p->mv + g * hd * h, h, dE->wv + g * hd * h, h, 1.0f, G2, hd);
        if (p->has_b[2])
            for (g = 0; g < p->nkv; ++g)
                for (i = 0; i < hd; ++i)
                    for (j = 0; j < hd; ++j) G2[i * hd + j] += F->bv[g * hd + i] * p->dbv[g * hd + j];
        if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, h, p->qd, h, p->r1f, h, dE->wo, p->qd, 0.0f, p->dno, p->qd);
        for (g = 0; g < p->nh && r == QUAROT_OK; ++g)
            r = quarot__tr_gemm(p, 1, 0, hd, hd, h, F->wo + g * hd, p->qd, p->dno + g * hd, p->qd, 1.0f, G2, hd);
    }
    return r;
}

// ---- buffers for B windows of T tokens

static void quarot__tr_free_acts(quarot__tr* p) {
    float** bufs[21];
    int i, n = 0;
    bufs[n++] = &p->act; bufs[n++] = &p->ckpt; bufs[n++] = &p->rope; bufs[n++] = &p->xs; bufs[n++] = &p->tmp;
    bufs[n++] = &p->tmpq; bufs[n++] = &p->dx; bufs[n++] = &p->da; bufs[n++] = &p->dq; bufs[n++] = &p->dk;
    bufs[n++] = &p->dv; bufs[n++] = &p->datt; bufs[n++] = &p->dh; bufs[n++] = &p->dg; bufs[n++] = &p->du;
    bufs[n++] = &p->fin; bufs[n++] = &p->dfin; bufs[n++] = &p->rsf; bufs[n++] = &p->lg; bufs[n++] = &p->scr;
    bufs[n++] = &p->tmp4;
    for (i = 0; i < n; ++i) {
        quarot_env_free(&p->env, *bufs[i]);
        *bufs[i] = NULL;
    }
    quarot_env_free(&p->env, p->tapes);
    quarot_env_free(&p->env, p->targets);
    quarot_env_free(&p->env, p->teacher);
    p->teacher = NULL;
    p->tapes = NULL;
    p->targets = NULL;
    p->cap_rows = p->cap_T = p->rope_T = 0;
}

// Tape layout: per tape, the arrays of quarot__tr_tape back to back (x only in keep mode).
static int64_t quarot__tr_tape_floats(const quarot__tr* p, int64_t rows, int with_x) {
    int64_t per = 3 * p->h + 2 + 2 * p->qd + 2 * p->kvd + 3 * p->im;
    if (p->has_qkn) per += p->qd + p->kvd + p->nh + p->nkv;
    return rows * (per + (with_x ? p->h : 0));
}

static void quarot__tr_tape_set(const quarot__tr* p, quarot__tr_tape* tp, float* m, int64_t rows, int with_x) {
    memset(tp, 0, sizeof *tp);
    if (with_x) { tp->x = m; m += rows * p->h; }
    tp->rs1 = m; m += rows;
    tp->aq = m; m += rows * p->h;
    if (p->has_qkn) {
        tp->qraw = m; m += rows * p->qd;
        tp->kraw = m; m += rows * p->kvd;
        tp->rsq = m; m += rows * p->nh;
        tp->rsk = m; m += rows * p->nkv;
    }
    tp->q = m; m += rows * p->qd;
    tp->k = m; m += rows * p->kvd;
    tp->v = m; m += rows * p->kvd;
    tp->attq = m; m += rows * p->qd;
    tp->xm = m; m += rows * p->h;
    tp->rs2 = m; m += rows;
    tp->a2q = m; m += rows * p->h;
    tp->g = m; m += rows * p->im;
    tp->u = m; m += rows * p->im;
    tp->hq = m;
}

static quarot_result quarot__tr_reserve(quarot_trainer* t, int64_t B, int64_t T, int grad) {
    quarot__tr* p = (quarot__tr*)t->priv;
    int64_t rows = B * T, tf, i, keep;
    int ok = 1;
    if (rows <= p->cap_rows && T == p->cap_T && grad <= p->cap_grad) return QUAROT_OK;
    quarot__tr_free_acts(p);
    keep = grad && !t->desc.recompute;
    p->n_tapes = keep ? p->L : 1;
    tf = quarot__tr_tape_floats(p, rows, 1);
    p->act = (float*)quarot__tr_alloc(p, p->n_tapes * tf, sizeof(float));
    p->tapes = (quarot__tr_tape*)quarot__tr_alloc(p, p->n_tapes, sizeof(quarot__tr_tape));
    ok = p->act && p->tapes;
    for (i = 0; ok && i < p->n_tapes; ++i) quarot__tr_tape_set(p, &p->tapes[i], p->act + i * tf, rows, 1);
    if (grad && t->desc.recompute)
        ok = ok && (p->ckpt = (float*)quarot__tr_alloc(p, p->L * rows * p->h, sizeof(float))) != NULL;
    p->task_floats = 2 * T * T;
    if (p->g_heads && p->g_heads * p->hd > p->task_floats) p->task_floats = p->g_heads * p->hd;
    if (p->n4 && (int64_t)(p->work4 / sizeof(float)) + 16 > p->task_floats)
        p->task_floats = (int64_t)(p->work4 / sizeof(float)) + 16;
    p->task_floats = (p->task_floats + 15) & ~(int64_t)15;
    p->attn_tasks = p->threads;
    ok = ok && (p->scr = (float*)quarot__tr_alloc(p, (p->threads > 1 ? p->threads : 1) * p->task_floats,
                                                  sizeof(float))) != NULL;
    ok = ok && (p->rope = (float*)quarot__tr_alloc(p, T * p->hd, sizeof(float))) != NULL;
    ok = ok && (p->xs = (float*)quarot__tr_alloc(p, rows * p->h, sizeof(float))) != NULL;
    ok = ok && (p->tmp = (float*)quarot__tr_alloc(p, rows * p->h, sizeof(float))) != NULL;
    ok = ok && (p->tmpq = (float*)quarot__tr_alloc(p, rows * p->qd, sizeof(float))) != NULL;
    if (p->h4) ok = ok && (p->tmp4 = (float*)quarot__tr_alloc(p, rows * p->im, sizeof(float))) != NULL;
    ok = ok && (p->fin = (float*)quarot__tr_alloc(p, rows * p->h, sizeof(float))) != NULL;
    ok = ok && (p->dfin = (float*)quarot__tr_alloc(p, rows * p->h, sizeof(float))) != NULL;
    ok = ok && (p->rsf = (float*)quarot__tr_alloc(p, rows, sizeof(float))) != NULL;
    ok = ok && (p->lg = (float*)quarot__tr_alloc(p, QUAROT__TR_LOGIT_ROWS * p->V, sizeof(float))) != NULL;
    ok = ok && (p->targets = (int32_t*)quarot__tr_alloc(p, rows, sizeof(int32_t))) != NULL;
    if (t->desc.loss == QUAROT_TRAIN_LOSS_KL)
        ok = ok && (p->teacher = (float*)quarot__tr_alloc(p, rows * p->V, sizeof(float))) != NULL;
    if (grad) {
        ok = ok && (p->dx = (float*)quarot__tr_alloc(p, rows * p->h, sizeof(float))) != NULL;
        ok = ok && (p->da = (float*)quarot__tr_alloc(p, rows * p->h, sizeof(float))) != NULL;
        ok = ok && (p->dq = (float*)quarot__tr_alloc(p, rows * p->qd, sizeof(float))) != NULL;
        ok = ok && (p->datt = (float*)quarot__tr_alloc(p, rows * p->qd, sizeof(float))) != NULL;
        ok = ok && (p->dk = (float*)quarot__tr_alloc(p, rows * p->kvd, sizeof(float))) != NULL;
        ok = ok && (p->dv = (float*)quarot__tr_alloc(p, rows * p->kvd, sizeof(float))) != NULL;
        ok = ok && (p->dh = (float*)quarot__tr_alloc(p, rows * p->im, sizeof(float))) != NULL;
        ok = ok && (p->dg = (float*)quarot__tr_alloc(p, rows * p->im, sizeof(float))) != NULL;
        ok = ok && (p->du = (float*)quarot__tr_alloc(p, rows * p->im, sizeof(float))) != NULL;
    }
    if (!ok) {
        quarot__tr_free_acts(p);
        quarot__tr_err(t, "out of memory for %lld windows of %lld tokens", (long long)B, (long long)T);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    quarot_train_rope_table(T, 0, p->hd, t->config.rope_theta, p->rope);
    p->cap_rows = rows;
    p->cap_T = T;
    p->cap_grad = grad;
    return QUAROT_OK;
}

// The tape of layer l: its own (keep), or the one tape with x in the checkpoints (recompute).
static quarot__tr_tape* quarot__tr_tape_of(quarot_trainer* t, int64_t l, int64_t rows) {
    quarot__tr* p = (quarot__tr*)t->priv;
    if (p->n_tapes > 1) return &p->tapes[l];
    if (p->ckpt) p->tapes[0].x = p->ckpt + l * rows * p->h;
    return &p->tapes[0];
}

static void quarot__tr_to_float(float* out, const double* in, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) out[i] = (float)in[i];
}

// The teacher of the KL loss: the batch's FP32 next-token probabilities (every quantizer off).
static quarot_result quarot__tr_pass(quarot_trainer* t, const int32_t* tok, int64_t B, int64_t T, int grad,
                                     double* loss, float* logits);
static quarot_result quarot__tr_teacher(quarot_trainer* t, const int32_t* tok, int64_t B, int64_t T) {
    quarot__tr* p = (quarot__tr*)t->priv;
    quarot_quant_desc keep[5];
    quarot_result r;
    double unused;
    int64_t i, j, rows = B * T, V = p->V;
    keep[0] = p->qa; keep[1] = p->qa_down; keep[2] = p->qk; keep[3] = p->qv; keep[4] = p->qw;
    p->qa.bits = p->qa_down.bits = p->qk.bits = p->qv.bits = p->qw.bits = 0;
    r = quarot__tr_pass(t, tok, B, T, 0, &unused, p->teacher);
    p->qa = keep[0]; p->qa_down = keep[1]; p->qk = keep[2]; p->qv = keep[3]; p->qw = keep[4];
    if (r != QUAROT_OK) return r;
    for (i = 0; i < rows; ++i) {   // softmax in double per row
        float* z = p->teacher + i * V;
        double mx = (double)z[0], sum = 0.0;
        for (j = 1; j < V; ++j) if ((double)z[j] > mx) mx = (double)z[j];
        for (j = 0; j < V; ++j) sum += exp((double)z[j] - mx);
        for (j = 0; j < V; ++j) z[j] = (float)(exp((double)z[j] - mx) / sum);
    }
    return QUAROT_OK;
}

// A failure of a pass: the message of the step that failed, unless a deeper one said more already.
static quarot_result quarot__tr_fail(quarot_trainer* t, quarot_result r, int64_t layer, const char* what) {
    if (t->error[0]) return r;
    if (layer >= 0)
        quarot__tr_err(t, "layer %lld (%s): %s", (long long)layer, what,
                       r == QUAROT_ERR_NONFINITE ? "NaN or Inf in the activations" : quarot_result_string(r));
    else
        quarot__tr_err(t, "%s: %s", what,
                       r == QUAROT_ERR_NONFINITE ? "NaN or Inf in the activations" : quarot_result_string(r));
    return r;
}

// One pass over B windows tokens[B][T]: the mean loss, the logits of the rows when logits != NULL
// ([B*T][V]), and with grad the gradients into t->grad_r1 / t->grad_r2.
static quarot_result quarot__tr_pass(quarot_trainer* t, const int32_t* tok, int64_t B, int64_t T, int grad,
                                     double* loss, float* logits) {
    quarot__tr* p;
    quarot_model* m = t->model;
    quarot_tensor e;
    int64_t rows, l, r0, i, j, count, h;
    double total = 0.0;
    int d1 = !t->desc.freeze_r1, kl = 0;
    float scale;
    quarot_result r;
    if (!t->priv || !tok || B < 1 || T < 2 || B > ((int64_t)1 << 24) || T > ((int64_t)1 << 20) ||
        B * T > ((int64_t)1 << 26))
        return QUAROT_ERR_INVALID_ARGUMENT;
    p = (quarot__tr*)t->priv;
    h = p->h;
    rows = B * T;
    for (i = 0; i < rows; ++i)
        if (tok[i] < 0 || tok[i] >= p->V) {
            quarot__tr_err(t, "token %lld: id %ld outside the vocabulary [0, %lld)", (long long)i, (long)tok[i],
                           (long long)p->V);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    if ((r = quarot__tr_reserve(t, B, T, grad)) != QUAROT_OK) return r;
    t->error[0] = '\0';
    if (t->desc.loss == QUAROT_TRAIN_LOSS_KL && logits != p->teacher) {   // the FP32 teacher first (not for itself)
        if ((r = quarot__tr_teacher(t, tok, B, T)) != QUAROT_OK) return r;
        kl = 1;
    }
    quarot__tr_to_float(p->r1f, t->r1, h * h);
    if (t->r2) quarot__tr_to_float(p->r2f, t->r2, p->L * p->hd * p->hd);
    for (i = 0; i < B; ++i)
        for (j = 0; j < T; ++j) p->targets[i * T + j] = j + 1 < T ? tok[i * T + j + 1] : -1;
    count = B * (T - 1);
    scale = (float)(1.0 / (double)count);
    // x = E[tok] R1
    memset(&e, 0, sizeof e);
    if ((r = m->get_tensor(m->user_data, p->plan.embed, &e)) != QUAROT_OK) {
        quarot__tr_err(t, "tensor '%s' not found", p->plan.embed);
        return r;
    }
    for (i = 0; i < rows && r == QUAROT_OK; ++i) r = quarot_tensor_get_row_f32(&e, tok[i], p->tmp + i * h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, rows, h, h, p->tmp, h, p->r1f, h, 0.0f, p->xs, h);
    if (r != QUAROT_OK) return quarot__tr_fail(t, r, -1, "embedding");
    for (l = 0; l < p->L; ++l) {
        quarot__tr_tape* tp = quarot__tr_tape_of(t, grad ? l : 0, rows);
        r = quarot__tr_load(t, l);
        if (r == QUAROT_OK) r = quarot__tr_form(t, l);
        if (r != QUAROT_OK) break;
        memcpy(tp->x, p->xs, (size_t)(rows * h) * sizeof(float));
        if ((r = quarot__tr_layer_fwd(t, tp, B, T, p->xs)) != QUAROT_OK) break;
    }
    if (r != QUAROT_OK) return quarot__tr_fail(t, r, l, "forward");
    // final norm, R1^T, its gain, lm_head, cross-entropy (dlogits into p->lg, chunk by chunk)
    r = quarot__tr_norm(p, p->xs, rows, h, NULL, p->fin, p->rsf);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 1, rows, h, h, p->fin, h, p->r1f, h, 0.0f, p->dfin, h);
    if (r == QUAROT_OK) quarot__tr_scale_cols(p->dfin, rows, h, p->final_g);
    for (r0 = 0; r0 < rows && r == QUAROT_OK; r0 += QUAROT__TR_LOGIT_ROWS) {
        int64_t c = rows - r0 < QUAROT__TR_LOGIT_ROWS ? rows - r0 : QUAROT__TR_LOGIT_ROWS;
        float* lg = logits ? logits + r0 * p->V : p->lg;
        r = quarot__tr_gemm(p, 0, 1, c, p->V, h, p->dfin + r0 * h, h, p->lm, h, 0.0f, lg, p->V);
        if (r != QUAROT_OK) break;
        if (kl)
            total += quarot_train_kl_div_f32(lg, c, p->V, p->teacher + r0 * p->V, p->targets + r0, scale,
                                             grad ? p->lg : NULL);
        else total += quarot_train_cross_entropy_f32(lg, c, p->V, p->targets + r0, scale, grad ? p->lg : NULL);
        if (grad) r = quarot__tr_gemm(p, 0, 0, c, h, p->V, p->lg, p->V, p->lm, h, 0.0f, p->da + r0 * h, h);
    }
    if (r != QUAROT_OK) return quarot__tr_fail(t, r, -1, "lm_head");
    *loss = total / (double)count;
    if (!grad) return QUAROT_OK;
    // back through the gain, R1^T (dR1 += du^T fin) and the final norm
    quarot__tr_scale_cols(p->da, rows, h, p->final_g);
    for (i = 0; i < h * h; ++i) p->g1f[i] = 0.0f;
    if (d1) r = quarot__tr_gemm(p, 1, 0, h, h, rows, p->da, h, p->fin, h, 1.0f, p->g1f, h);
    if (r == QUAROT_OK) r = quarot__tr_gemm(p, 0, 0, rows, h, h, p->da, h, p->r1f, h, 0.0f, p->tmp, h);
    if (r == QUAROT_OK) r = quarot__tr_norm_bwd(p, p->xs, p->rsf, rows, h, NULL, p->tmp, p->dx, 0);
    if (r != QUAROT_OK) return quarot__tr_fail(t, r, -1, "final norm");
    for (l = p->L - 1; l >= 0; --l) {
        quarot__tr_tape* tp = quarot__tr_tape_of(t, l, rows);
        r = QUAROT_OK;
        if (l != p->L - 1) {   // the last layer's weights are still those of the forward pass
            r = quarot__tr_load(t, l);
            if (r == QUAROT_OK) r = quarot__tr_form(t, l);
        }
        if (r == QUAROT_OK && p->n_tapes == 1 && l != p->L - 1) r = quarot__tr_layer_fwd(t, tp, B, T, p->tmp);
        if (r == QUAROT_OK) r = quarot__tr_layer_bwd(t, tp, B, T);
        if (r == QUAROT_OK) r = quarot__tr_chain(t, l);
        if (r != QUAROT_OK) return quarot__tr_fail(t, r, l, "backward");
    }
    // the embedding: x0 = E[tok], dR1 += x0^T dx
    for (i = 0; i < rows && r == QUAROT_OK && d1; ++i) r = quarot_tensor_get_row_f32(&e, tok[i], p->tmp + i * h);
    if (r == QUAROT_OK && d1) r = quarot__tr_gemm(p, 1, 0, h, h, rows, p->tmp, h, p->dx, h, 1.0f, p->g1f, h);
    if (r != QUAROT_OK) return quarot__tr_fail(t, r, -1, "embedding");
    for (i = 0; i < h * h; ++i) t->grad_r1[i] = (double)p->g1f[i];
    if (t->grad_r2)
        for (i = 0; i < p->L * p->hd * p->hd; ++i) t->grad_r2[i] = t->desc.freeze_r2 ? 0.0 : (double)p->g2f[i];
    return QUAROT_OK;
}

// >>train_setup
// Set-up (names, shapes, start rotations, fixed transforms, globals) and the rotations' replacement.

static void quarot__tr_priv_free(quarot__tr* p) {
    quarot_env env = p->env;
    quarot__tr_lw* lws[3];
    int k;
    lws[0] = &p->F; lws[1] = &p->E; lws[2] = &p->dE;
    quarot__tr_free_acts(p);
    for (k = 0; k < 3; ++k) {
        quarot__tr_lw* w = lws[k];
        float* ptrs[12];
        int i;
        ptrs[0] = w->wq; ptrs[1] = w->wk; ptrs[2] = w->wv; ptrs[3] = w->wo; ptrs[4] = w->wg; ptrs[5] = w->wu;
        ptrs[6] = w->wd; ptrs[7] = w->bq; ptrs[8] = w->bk; ptrs[9] = w->bv; ptrs[10] = w->qn; ptrs[11] = w->kn;
        for (i = 0; i < 12; ++i) quarot_env_free(&env, ptrs[i]);
    }
    quarot_env_free(&env, p->mv);
    quarot_env_free(&env, p->no);
    quarot_env_free(&env, p->dmv);
    quarot_env_free(&env, p->dno);
    quarot_env_free(&env, p->dbv);
    quarot_env_free(&env, p->r1f);
    quarot_env_free(&env, p->r2f);
    quarot_env_free(&env, p->g1f);
    quarot_env_free(&env, p->g2f);
    quarot_env_free(&env, p->m1);
    quarot_env_free(&env, p->m2);
    quarot_env_free(&env, p->best1);
    quarot_env_free(&env, p->best2); quarot_env_free(&env, p->h_heads); quarot_env_free(&env, p->h3);
    quarot_env_free(&env, p->h4);
    quarot_env_free(&env, p->final_g); quarot_env_free(&env, p->gain); quarot_env_free(&env, p->lm_owned);
    quarot_env_free(&env, p->names);
    quarot_hadamard_plan_free(&p->plan4);
    quarot_plan_free(&p->plan);
    quarot_env_free(&env, p);
}

QUAROT_API void quarot_trainer_free(quarot_trainer* t) {
    quarot_env env;
    if (!t || !t->model) return;
    env = t->model->env;
    if (t->priv) quarot__tr_priv_free((quarot__tr*)t->priv);
    quarot_env_free(&env, t->r1);
    quarot_env_free(&env, t->r2);
    quarot_env_free(&env, t->grad_r1);
    quarot_env_free(&env, t->grad_r2);
    quarot_env_free(&env, t->history);
    t->priv = NULL;
    t->r1 = t->r2 = t->grad_r1 = t->grad_r2 = NULL;
    t->history = NULL;
    t->model = NULL;
}

// name with its first `from` replaced by `to` (same length); 0 when absent
static int quarot__tr_name_swap(char* out, const char* name, const char* from, const char* to) {
    const char* at = strstr(name, from);
    if (!at || strlen(name) >= QUAROT_NAME_MAX) return 0;
    strcpy(out, name);
    memcpy(out + (at - name), to, strlen(to));
    return 1;
}

// Each layer's names from the adapter plan: its two fusions (attention norm -> q, k, v; MLP norm ->
// gate, up) and its o_proj / down_proj.
static quarot_result quarot__tr_names(quarot_trainer* t) {
    quarot__tr* p = (quarot__tr*)t->priv;
    int64_t l, i;
    for (l = 0; l < p->L; ++l) {
        const quarot_plan_fusion* f[2] = {NULL, NULL};
        char (*nm)[QUAROT_NAME_MAX] = p->names[l];
        int nf = 0, k;
        for (i = 0; i < p->plan.n_fusions && nf < 2; ++i)
            if (p->plan.fusions[i].layer == l) f[nf++] = &p->plan.fusions[i];
        if (nf < 2 || f[0]->n_linears != 3 || f[1]->n_linears != 2 || f[0]->norm_bias[0] || f[1]->norm_bias[0]) {
            quarot__tr_err(t, "layer %lld: the adapter plan does not describe a norm -> q, k, v and a norm -> gate, up",
                           (long long)l);
            return QUAROT_ERR_UNSUPPORTED;
        }
        strcpy(nm[QUAROT__TR_N1], f[0]->norm_weight);
        strcpy(nm[QUAROT__TR_N2], f[1]->norm_weight);
        for (k = 0; k < 3; ++k) {
            strcpy(nm[QUAROT__TR_Q + k], p->plan.linears[f[0]->first_linear + k].weight);
            strcpy(nm[QUAROT__TR_BQ + k], p->plan.linears[f[0]->first_linear + k].bias);
        }
        strcpy(nm[QUAROT__TR_G], p->plan.linears[f[1]->first_linear].weight);
        strcpy(nm[QUAROT__TR_U], p->plan.linears[f[1]->first_linear + 1].weight);
        strcpy(nm[QUAROT__TR_O], p->plan.layers[l].o_proj);
        strcpy(nm[QUAROT__TR_D], p->plan.layers[l].down_proj);
        if (strcmp(nm[QUAROT__TR_V], p->plan.layers[l].v_proj) != 0 ||
            strcmp(nm[QUAROT__TR_U], p->plan.layers[l].up_proj) != 0) {
            quarot__tr_err(t, "layer %lld: the plan's readers are not in the order q, k, v and gate, up", (long long)l);
            return QUAROT_ERR_UNSUPPORTED;
        }
        if (p->has_qkn && (!quarot__tr_name_swap(nm[QUAROT__TR_QN], nm[QUAROT__TR_Q], "q_proj", "q_norm") ||
                           !quarot__tr_name_swap(nm[QUAROT__TR_KN], nm[QUAROT__TR_K], "k_proj", "k_norm"))) {
            quarot__tr_err(t, "layer %lld: cannot name the q/k norms after '%s'", (long long)l, nm[QUAROT__TR_Q]);
            return QUAROT_ERR_UNSUPPORTED;
        }
    }
    return QUAROT_OK;
}

static int quarot__tr_exists(quarot_model* m, const char* name) {
    quarot_tensor w;
    return name && name[0] && m->get_tensor(m->user_data, name, &w) == QUAROT_OK;
}

// Which biases layer 0 has: q/k/v ones are used; any on o_proj or the MLP is refused.
static quarot_result quarot__tr_probe_biases(quarot_trainer* t) {
    quarot__tr* p = (quarot__tr*)t->priv;
    quarot_model* m = t->model;
    char b[QUAROT_NAME_MAX];
    const int others[4] = {QUAROT__TR_O, QUAROT__TR_G, QUAROT__TR_U, QUAROT__TR_D};
    quarot_result r = QUAROT_OK, rr;
    int k;
    if (m->acquire_layer && (r = m->acquire_layer(m->user_data, 0)) != QUAROT_OK) {
        quarot__tr_err(t, "acquire_layer(0) failed: %s", quarot_result_string(r));
        return r;
    }
    for (k = 0; k < 3; ++k) p->has_b[k] = quarot__tr_exists(m, p->names[0][QUAROT__TR_BQ + k]);
    for (k = 0; k < 4 && r == QUAROT_OK; ++k) {
        const char* w = p->names[0][others[k]];
        size_t len = strlen(w);
        if (len < 7 || strcmp(w + len - 7, ".weight") != 0) continue;
        memcpy(b, w, len - 7);
        strcpy(b + len - 7, ".bias");
        if (quarot__tr_exists(m, b)) {
            quarot__tr_err(t, "tensor '%s': biases on o_proj and the MLP are not supported by the trainer", b);
            r = QUAROT_ERR_UNSUPPORTED;
        }
    }
    if (m->release_layer && (rr = m->release_layer(m->user_data, 0, 0)) != QUAROT_OK && r == QUAROT_OK) {
        quarot__tr_err(t, "release_layer(0) failed: %s", quarot_result_string(rr));
        r = rr;
    }
    return r;
}

// The dense normalized Hadamard matrix of the block an online site uses for a size n (n itself when
// available, else the largest available order dividing it, as the processor's online rotations).
// h4 = the rows e_i of the identity through plan4 (x h4 = the transform of x), for n4 <= QUAROT__TR_DENSE4.
#define QUAROT__TR_DENSE4 256
static quarot_result quarot__tr_dense4(quarot__tr* p) {
    quarot_hadamard_apply_desc d;
    float* w = (float*)quarot__tr_alloc(p, (int64_t)(p->work4 / sizeof(float)) + 16, sizeof(float));
    quarot_result r;
    int64_t i;
    p->h4 = (float*)quarot__tr_alloc(p, p->n4 * p->n4, sizeof(float));
    if (!w || !p->h4) {
        quarot_env_free(&p->env, w);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    memset(&d, 0, sizeof d);
    memset(p->h4, 0, (size_t)(p->n4 * p->n4) * sizeof(float));
    for (i = 0; i < p->n4; ++i) p->h4[i * p->n4 + i] = 1.0f;
    r = quarot_hadamard_apply_f32(&p->plan4, &d, p->h4, p->n4, p->n4, w, p->work4);
    quarot_env_free(&p->env, w);
    return r;
}

static quarot_result quarot__tr_online_block(quarot_trainer* t, int64_t n, const char* what, int64_t* b) {
    *b = quarot_hadamard_available(n) ? n : quarot_hadamard_largest_block(n, n);
    if (*b <= 1) {
        quarot__tr_err(t, "online %s rotation: no Hadamard matrix of order %lld or of any block dividing it", what,
                       (long long)n);
        return QUAROT_ERR_UNSUPPORTED_SIZE;
    }
    return QUAROT_OK;
}

// R1 and R2 as quarot_rotate_model builds them by default (random Hadamard of the seed; R2 with the
// processor's derived seed), as dense matrices.
static quarot_result quarot__tr_start(quarot_trainer* t) {
    quarot__tr* p = (quarot__tr*)t->priv;
    quarot_rotation rot;
    quarot_rotation_desc d;
    quarot_result r;
    int64_t l, hd2 = p->hd * p->hd;
    memset(&d, 0, sizeof d);
    d.kind = QUAROT_ROTATION_HADAMARD;
    d.n = p->h;
    d.seed = t->desc.seed;
    r = quarot_rotation_init(&rot, &d, &p->env);
    if (r == QUAROT_OK) r = quarot_rotation_to_dense_f64(&rot, t->r1);
    quarot_rotation_free(&rot);
    if (r != QUAROT_OK) {
        quarot__tr_err(t, "R1 of hidden size %lld: %s", (long long)p->h, quarot_result_string(r));
        return r;
    }
    if (!t->r2) return QUAROT_OK;
    memset(&d, 0, sizeof d);
    d.kind = QUAROT_ROTATION_HADAMARD;
    d.n = p->hd;
    d.seed = t->desc.seed * 0x9e3779b97f4a7c15ULL + 2;
    r = quarot_rotation_init(&rot, &d, &p->env);
    if (r == QUAROT_OK) r = quarot_rotation_to_dense_f64(&rot, t->r2);
    quarot_rotation_free(&rot);
    if (r != QUAROT_OK) {
        quarot__tr_err(t, "R2 of head_dim %lld: %s", (long long)p->hd, quarot_result_string(r));
        return r;
    }
    for (l = 1; l < p->L; ++l) memcpy(t->r2 + l * hd2, t->r2, (size_t)hd2 * sizeof(double));
    return QUAROT_OK;
}

static quarot_result quarot__tr_check_desc(quarot_trainer* t) {
    quarot_train_desc* d = &t->desc;
    char msg[200];
    if (d->steps == 0) d->steps = 100;
    if (d->lr == 0.0) d->lr = 1.5;
    if (d->cayley_iters == 0) d->cayley_iters = 5;
    if (d->orth_tol == 0.0) d->orth_tol = 1e-6;
    if (d->batch == 0) d->batch = 1;
    if (d->steps < 0 || d->steps > (1 << 24) || !(d->lr > 0.0 && d->lr < 1e6) ||
        !(d->momentum >= 0.0 && d->momentum < 1.0) || d->cayley_iters < 0 || d->cayley_iters > 1000 ||
        !(d->orth_tol > 0.0 && d->orth_tol < 1.0) || d->batch < 1 ||
        ((d->no_r2 | d->freeze_r1 | d->freeze_r2 | d->online | d->r3 | d->constant_lr | d->recompute | d->loss) & ~1)) {
        quarot__tr_err(t,
                       "bad training options (steps %d, lr %g, momentum %g, cayley_iters %d, orth_tol %g, batch %lld)",
                       d->steps, d->lr, d->momentum, d->cayley_iters, d->orth_tol, (long long)d->batch);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (!(d->w_bits == 0 || d->w_bits == 16 || (d->w_bits >= 2 && d->w_bits <= 8))) {
        quarot__tr_err(t, "w_bits %d: 2..8, or 0 / 16 for weights in full precision", d->w_bits);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (quarot_act_quant_check(&d->act, &t->config, msg, sizeof msg) != QUAROT_OK) {
        quarot__tr_err(t, "%s", msg);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

static void quarot__tr_quant_descs(quarot_trainer* t) {
    quarot__tr* p = (quarot__tr*)t->priv;
    const quarot_act_quant_desc* a = &t->desc.act;
    memset(&p->qa, 0, sizeof p->qa);
    if (a->a_bits && a->a_bits != 16) {
        p->qa.bits = a->a_bits;
        p->qa.asymmetric = a->a_asym;
        p->qa.group_size = a->a_group_size;
        p->qa.clip_ratio = a->a_clip > 0.0f ? a->a_clip : 1.0f;
    }
    p->qa_down = p->qa;
    if (p->qa.bits && a->int8_down_proj) p->qa_down.bits = 8;
    memset(&p->qk, 0, sizeof p->qk);
    memset(&p->qv, 0, sizeof p->qv);
    if (a->k_bits && a->k_bits != 16) {
        p->qk.bits = a->k_bits;
        p->qk.asymmetric = a->k_asym;
        p->qk.group_size = a->k_group_size > 0 ? a->k_group_size : p->hd;
        p->qk.clip_ratio = a->k_clip > 0.0f ? a->k_clip : 1.0f;
    }
    if (a->v_bits && a->v_bits != 16) {
        p->qv.bits = a->v_bits;
        p->qv.asymmetric = a->v_asym;
        p->qv.group_size = a->v_group_size > 0 ? a->v_group_size : p->hd;
        p->qv.clip_ratio = a->v_clip > 0.0f ? a->v_clip : 1.0f;
    }
    p->qw = t->desc.weight;
    p->qw.bits = t->desc.w_bits == 16 ? 0 : t->desc.w_bits;
    if (p->qw.clip_ratio == 0.0f) p->qw.clip_ratio = 1.0f;
}

static quarot_result quarot__tr_alloc_lw(quarot__tr* p, quarot__tr_lw* w, int biases) {
    w->wq = (float*)quarot__tr_alloc(p, p->qd * p->h, sizeof(float));
    w->wk = (float*)quarot__tr_alloc(p, p->kvd * p->h, sizeof(float));
    w->wv = (float*)quarot__tr_alloc(p, p->kvd * p->h, sizeof(float));
    w->wo = (float*)quarot__tr_alloc(p, p->h * p->qd, sizeof(float));
    w->wg = (float*)quarot__tr_alloc(p, p->im * p->h, sizeof(float));
    w->wu = (float*)quarot__tr_alloc(p, p->im * p->h, sizeof(float));
    w->wd = (float*)quarot__tr_alloc(p, p->h * p->im, sizeof(float));
    if (!w->wq || !w->wk || !w->wv || !w->wo || !w->wg || !w->wu || !w->wd) return QUAROT_ERR_OUT_OF_MEMORY;
    if (!biases) return QUAROT_OK;
    if (p->has_b[0] && !(w->bq = (float*)quarot__tr_alloc(p, p->qd, sizeof(float)))) return QUAROT_ERR_OUT_OF_MEMORY;
    if (p->has_b[1] && !(w->bk = (float*)quarot__tr_alloc(p, p->kvd, sizeof(float)))) return QUAROT_ERR_OUT_OF_MEMORY;
    if (p->has_b[2] && !(w->bv = (float*)quarot__tr_alloc(p, p->kvd, sizeof(float)))) return QUAROT_ERR_OUT_OF_MEMORY;
    if (biases == 2 && p->has_qkn) {
        w->qn = (float*)quarot__tr_alloc(p, p->hd, sizeof(float));
        w->kn = (float*)quarot__tr_alloc(p, p->hd, sizeof(float));
        if (!w->qn || !w->kn) return QUAROT_ERR_OUT_OF_MEMORY;
    }
    return QUAROT_OK;
}

// The globals: embedding shape, final norm gain, lm_head (the embedding when tied) in f32.
static quarot_result quarot__tr_globals(quarot_trainer* t) {
    quarot__tr* p = (quarot__tr*)t->priv;
    quarot_model* m = t->model;
    quarot_tensor e, w;
    const char* lm_name = t->config.tied_embeddings ? p->plan.embed : p->plan.lm_head;
    char bias[QUAROT_NAME_MAX];
    quarot_result r;
    int present;
    size_t len = strlen(p->plan.lm_head);
    memset(&e, 0, sizeof e);
    if ((r = m->get_tensor(m->user_data, p->plan.embed, &e)) != QUAROT_OK ||
        (r = quarot_tensor_validate(&e)) != QUAROT_OK) {
        quarot__tr_err(t, "embedding '%s': %s", p->plan.embed, quarot_result_string(r));
        return r;
    }
    if (e.ne[0] != p->h || e.ne[1] != p->V || e.ne[2] != 1 || e.ne[3] != 1) {
        quarot__tr_err(t, "embedding '%s' is {%lld, %lld}, expected {hidden %lld, vocab %lld}", p->plan.embed,
                       (long long)e.ne[0], (long long)e.ne[1], (long long)p->h, (long long)p->V);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    r = quarot__tr_read(t, p->plan.final_norm_weight, 1, p->h, p->final_g, &present);
    if (r == QUAROT_OK && !present) {
        quarot__tr_err(t, "tensor '%s' not found", p->plan.final_norm_weight);
        r = QUAROT_ERR_NOT_FOUND;
    }
    if (r != QUAROT_OK) return r;
    if (len > 7 && strcmp(p->plan.lm_head + len - 7, ".weight") == 0) {
        memcpy(bias, p->plan.lm_head, len - 7);
        strcpy(bias + len - 7, ".bias");
        if (quarot__tr_exists(m, bias)) {
            quarot__tr_err(t, "tensor '%s': an lm_head bias is not supported by the trainer", bias);
            return QUAROT_ERR_UNSUPPORTED;
        }
    }
    memset(&w, 0, sizeof w);
    if ((r = m->get_tensor(m->user_data, lm_name, &w)) != QUAROT_OK || (r = quarot_tensor_validate(&w)) != QUAROT_OK) {
        quarot__tr_err(t, "tensor '%s' %s", lm_name,
                       r == QUAROT_ERR_NOT_FOUND ? "not found (config says the embeddings are not tied)"
                                                 : "is not a valid view");
        return r;
    }
    if (w.dtype == QUAROT_DTYPE_F32 && w.ne[0] == p->h && w.ne[1] == p->V && w.ne[2] == 1 && w.ne[3] == 1 &&
        quarot_tensor_is_contiguous(&w)) {
        int64_t i, n = p->V * p->h;
        const float* d = (const float*)w.data;
        for (i = 0; i < n; ++i)
            if (!(fabsf(d[i]) <= 3.4028234663852886e38f)) {
                quarot__tr_err(t, "tensor '%s' has NaN or Inf at element %lld", lm_name, (long long)i);
                return QUAROT_ERR_NONFINITE;
            }
        p->lm = d;
        return QUAROT_OK;
    }
    p->lm_owned = (float*)quarot__tr_alloc(p, p->V * p->h, sizeof(float));
    if (!p->lm_owned) return QUAROT_ERR_OUT_OF_MEMORY;
    p->lm = p->lm_owned;
    return quarot__tr_read(t, lm_name, p->V, p->h, p->lm_owned, NULL);
}

QUAROT_API quarot_result quarot_trainer_init(quarot_trainer* t, quarot_model* model, const quarot_train_desc* d) {
    quarot__tr* p;
    quarot_model_config* c;
    const quarot_adapter* ad;
    quarot_result r;
    int64_t l, hd2;
    if (!t) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(t, 0, sizeof *t);
    if (!model || !model->get_tensor) return QUAROT_ERR_INVALID_ARGUMENT;
    t->model = model;
    if (d) t->desc = *d;
    c = &t->config;
    if ((r = quarot__resolve_config(model, c)) != QUAROT_OK) {
        quarot__tr_err(t, "%s", model->error);
        t->model = NULL;
        return r;
    }
    if (c->norm_eps == 0.0f) c->norm_eps = 1e-5f;
    if (c->rope_theta == 0.0f) c->rope_theta = 10000.0f;
    if (c->norm == QUAROT_NORM_DEFAULT) c->norm = QUAROT_NORM_RMS;
    if (c->mlp == QUAROT_MLP_DEFAULT) c->mlp = QUAROT_MLP_GATED;
    if (c->act == QUAROT_ACT_DEFAULT) c->act = QUAROT_ACT_SILU;
    if (c->norm != QUAROT_NORM_RMS || c->mlp != QUAROT_MLP_GATED || c->attn_out_bias || c->mlp_bias ||
        c->head_dim % 2 != 0 || (c->act != QUAROT_ACT_SILU && c->act != QUAROT_ACT_GELU && c->act != QUAROT_ACT_RELU)) {
        quarot__tr_err(
            t,
            "the trainer runs RMSNorm models with a gated MLP, no o_proj / MLP biases and an even head_dim (arch '%s')",
            c->arch);
        t->model = NULL;
        return QUAROT_ERR_UNSUPPORTED;
    }
    if ((r = quarot__tr_check_desc(t)) != QUAROT_OK) { t->model = NULL; return r; }
    p = (quarot__tr*)quarot_env_alloc(&model->env, sizeof *p);
    if (!p) { t->model = NULL; return QUAROT_ERR_OUT_OF_MEMORY; }
    memset(p, 0, sizeof *p);
    t->priv = p;
    p->env = model->env;
    p->threads = model->env.parallel.run && model->env.parallel.n_threads > 1 ? model->env.parallel.n_threads : 1;
    if (p->threads > 64) p->threads = 64;
    p->h = c->hidden; p->im = c->intermediate; p->nh = c->n_heads; p->nkv = c->n_kv_heads; p->hd = c->head_dim;
    p->qd = p->nh * p->hd; p->kvd = p->nkv * p->hd; p->V = c->vocab; p->L = c->n_layers; p->eps = c->norm_eps;
    p->has_qkn = c->qk_norm != 0;
    hd2 = p->hd * p->hd;
    quarot_plan_init(&p->plan, &model->env);
    ad = t->desc.adapter ? t->desc.adapter : quarot_adapter_find(c->arch);
    if (!ad || !ad->build) {
        quarot__tr_err(t, "no adapter for architecture '%s' (built-in: %s)", c->arch, quarot_adapter_list());
        r = QUAROT_ERR_UNSUPPORTED;
        goto fail;
    }
    r = ad->build(ad, c, -1, &p->plan);
    if (r == QUAROT_OK && p->plan.n_layers != p->L) r = QUAROT_ERR_INTERNAL;
    if (r != QUAROT_OK) {
        quarot__tr_err(t, "adapter '%s' could not describe the model: %s", ad->arch, quarot_result_string(r));
        goto fail;
    }
    p->names = (char (*)[QUAROT__TR_NAMES][QUAROT_NAME_MAX])quarot__tr_alloc(p, p->L, sizeof *p->names);
    if (!p->names) { r = QUAROT_ERR_OUT_OF_MEMORY; goto fail; }
    if ((r = quarot__tr_names(t)) != QUAROT_OK || (r = quarot__tr_probe_biases(t)) != QUAROT_OK) goto fail;
    quarot__tr_quant_descs(t);
    // weights and rotations
    r = quarot__tr_alloc_lw(p, &p->F, 2);
    if (r == QUAROT_OK) r = quarot__tr_alloc_lw(p, &p->E, 1);
    if (r == QUAROT_OK) r = quarot__tr_alloc_lw(p, &p->dE, 0);
    if (r != QUAROT_OK) goto fail;
    p->mv = (float*)quarot__tr_alloc(p, p->kvd * p->h, sizeof(float));
    p->dmv = (float*)quarot__tr_alloc(p, p->kvd * p->h, sizeof(float));
    p->no = (float*)quarot__tr_alloc(p, p->h * p->qd, sizeof(float));
    p->dno = (float*)quarot__tr_alloc(p, p->h * p->qd, sizeof(float));
    p->dbv = (float*)quarot__tr_alloc(p, p->kvd, sizeof(float));
    p->r1f = (float*)quarot__tr_alloc(p, p->h * p->h, sizeof(float));
    p->g1f = (float*)quarot__tr_alloc(p, p->h * p->h, sizeof(float));
    p->final_g = (float*)quarot__tr_alloc(p, p->h, sizeof(float));
    p->gain = (float*)quarot__tr_alloc(p, p->h, sizeof(float));
    p->m1 = (double*)quarot__tr_alloc(p, p->h * p->h, sizeof(double));
    p->best1 = (double*)quarot__tr_alloc(p, p->h * p->h, sizeof(double));
    t->r1 = (double*)quarot__tr_alloc(p, p->h * p->h, sizeof(double));
    t->grad_r1 = (double*)quarot__tr_alloc(p, p->h * p->h, sizeof(double));
    t->history = (quarot_train_step_info*)quarot__tr_alloc(p, t->desc.steps, sizeof(quarot_train_step_info));
    if (!p->mv || !p->dmv || !p->no || !p->dno || !p->dbv || !p->r1f || !p->g1f || !p->final_g || !p->gain || !p->m1 ||
        !p->best1 || !t->r1 || !t->grad_r1 || !t->history) { r = QUAROT_ERR_OUT_OF_MEMORY; goto fail; }
    memset(p->m1, 0, (size_t)(p->h * p->h) * sizeof(double));
    if (!t->desc.no_r2) {
        p->r2f = (float*)quarot__tr_alloc(p, p->L * hd2, sizeof(float));
        p->g2f = (float*)quarot__tr_alloc(p, p->L * hd2, sizeof(float));
        p->m2 = (double*)quarot__tr_alloc(p, p->L * hd2, sizeof(double));
        p->best2 = (double*)quarot__tr_alloc(p, p->L * hd2, sizeof(double));
        t->r2 = (double*)quarot__tr_alloc(p, p->L * hd2, sizeof(double));
        t->grad_r2 = (double*)quarot__tr_alloc(p, p->L * hd2, sizeof(double));
        if (!p->r2f || !p->g2f || !p->m2 || !p->best2 || !t->r2 || !t->grad_r2) {
            r = QUAROT_ERR_OUT_OF_MEMORY;
            goto fail;
        }
        memset(p->m2, 0, (size_t)(p->L * hd2) * sizeof(double));
    }
    if ((r = quarot__tr_start(t)) != QUAROT_OK) goto fail;
    // fixed online transforms
    if (t->desc.online) {
        if ((r = quarot__tr_online_block(t, p->nh, "o_proj heads", &p->g_heads)) != QUAROT_OK) goto fail;
        if ((r = quarot__tr_online_block(t, p->im, "down_proj", &p->n4)) != QUAROT_OK) goto fail;
        p->h_heads = (float*)quarot__tr_alloc(p, p->g_heads * p->g_heads, sizeof(float));
        if (!p->h_heads) { r = QUAROT_ERR_OUT_OF_MEMORY; goto fail; }
        if ((r = quarot_hadamard_build_f32(p->g_heads, 1, p->h_heads, &p->env)) != QUAROT_OK) goto fail;
        if ((r = quarot_hadamard_plan_init(&p->plan4, p->n4, &p->env)) != QUAROT_OK) goto fail;
        p->work4 = quarot_hadamard_workspace_size(&p->plan4);
        if (p->n4 <= QUAROT__TR_DENSE4 && (r = quarot__tr_dense4(p)) != QUAROT_OK) goto fail;
    }
    if (t->desc.r3) {
        if ((r = quarot__tr_online_block(t, p->hd, "q/k", &p->n3)) != QUAROT_OK) goto fail;
        p->h3 = (float*)quarot__tr_alloc(p, p->n3 * p->n3, sizeof(float));
        if (!p->h3) { r = QUAROT_ERR_OUT_OF_MEMORY; goto fail; }
        if ((r = quarot_hadamard_build_f32(p->n3, 1, p->h3, &p->env)) != QUAROT_OK) goto fail;
    }
    if ((r = quarot__tr_globals(t)) != QUAROT_OK) goto fail;
    // every layer once: names, shapes, values (what the passes will read); the row steps' scratch first
    if ((r = quarot__tr_reserve(t, 1, 2, 0)) != QUAROT_OK) goto fail;
    for (l = 0; l < p->L; ++l)
        if ((r = quarot__tr_load(t, l)) != QUAROT_OK) goto fail;
    return QUAROT_OK;
fail:
    if (r == QUAROT_ERR_OUT_OF_MEMORY && !t->error[0]) quarot__tr_err(t, "out of memory");
    {
        char keep[sizeof t->error];
        memcpy(keep, t->error, sizeof keep);
        quarot_trainer_free(t);
        memcpy(t->error, keep, sizeof keep);
    }
    return r;
}

QUAROT_API quarot_result quarot_trainer_set_rotations(quarot_trainer* t, const double* r1, const double* r2) {
    quarot__tr* p;
    int64_t l, hd2;
    double e;
    if (!t || !t->priv) return QUAROT_ERR_INVALID_ARGUMENT;
    p = (quarot__tr*)t->priv;
    hd2 = p->hd * p->hd;
    if (r2 && !t->r2) {
        quarot__tr_err(t, "R2 given, but the trainer was set up without R2 (no_r2)");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (r1) {
        e = quarot__orth_error_gemm(r1, p->h, &p->env);
        if (e < 0.0) return QUAROT_ERR_OUT_OF_MEMORY;
        if (!(e <= 1e-5)) {
            quarot__tr_err(t, "R1 is not orthogonal: max|R^T R - I| = %.3g > 1e-5", e);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    for (l = 0; r2 && l < p->L; ++l) {
        e = quarot__orth_error(r2 + l * hd2, p->hd);
        if (!(e <= 1e-5)) {
            quarot__tr_err(t, "R2 of layer %lld is not orthogonal: max|R^T R - I| = %.3g > 1e-5", (long long)l, e);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    if (r1) memcpy(t->r1, r1, (size_t)(p->h * p->h) * sizeof(double));
    if (r2) memcpy(t->r2, r2, (size_t)(p->L * hd2) * sizeof(double));
    return QUAROT_OK;
}

// >>train_run
// The loss and gradients of a batch, the optimizer step and the run.

static int quarot__tr_finite(const double* v, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i)
        if (!(fabs(v[i]) <= 1.7976931348623157e308)) return 0;
    return 1;
}

QUAROT_API quarot_result quarot_trainer_loss(quarot_trainer* t, const int32_t* tokens, int64_t n_windows,
                                             int64_t seq_len, int grad, double* loss) {
    quarot__tr* p;
    quarot_result r;
    double v = 0.0;
    if (!t || !t->priv || !loss) return QUAROT_ERR_INVALID_ARGUMENT;
    p = (quarot__tr*)t->priv;
    r = quarot__tr_pass(t, tokens, n_windows, seq_len, grad ? 1 : 0, &v, NULL);
    if (r != QUAROT_OK) return r;
    *loss = v;
    if (!(fabs(v) <= 1.7976931348623157e308)) {
        quarot__tr_err(t, "the loss is not finite (%g)", v);
        return QUAROT_ERR_NONFINITE;
    }
    if (grad && (!quarot__tr_finite(t->grad_r1, p->h * p->h) ||
                 (t->grad_r2 && !quarot__tr_finite(t->grad_r2, p->L * p->hd * p->hd)))) {
        quarot__tr_err(t, "a gradient is not finite");
        return QUAROT_ERR_NONFINITE;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_trainer_logits(quarot_trainer* t, const int32_t* tokens, int64_t seq_len,
                                               float* logits) {
    double v;
    if (!t || !t->priv || !logits) return QUAROT_ERR_INVALID_ARGUMENT;
    return quarot__tr_pass(t, tokens, 1, seq_len, 0, &v, logits);
}

static double quarot__tr_norm_f(const double* v, int64_t n) {
    double s = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) s += v[i] * v[i];
    return s;
}

// The Stiefel steps on R1 and every R2 from the gradients of the last pass (loss: that pass's).
static quarot_result quarot__tr_update(quarot_trainer* t, double loss, int64_t n_windows, int step, int steps,
                                       quarot_train_step_info* info) {
    quarot__tr* p = (quarot__tr*)t->priv;
    quarot_train_step_info in;
    quarot_stiefel_desc sd;
    quarot_stiefel_info si;
    quarot_result r;
    int64_t l, hd2 = p->hd * p->hd;
    memset(&in, 0, sizeof in);
    in.step = step;
    in.steps = steps;
    in.loss = loss;
    in.windows = n_windows;
    in.lr = t->desc.constant_lr
                ? t->desc.lr
                : t->desc.lr * 0.5 * (1.0 + cos(3.14159265358979323846 * (double)(step - 1) / (double)steps));
    in.grad_norm_r1 = sqrt(quarot__tr_norm_f(t->grad_r1, p->h * p->h));
    in.grad_norm_r2 = t->r2 ? sqrt(quarot__tr_norm_f(t->grad_r2, p->L * hd2)) : 0.0;
    memset(&sd, 0, sizeof sd);
    sd.lr = in.lr;
    sd.momentum = t->desc.momentum;
    sd.cayley_iters = t->desc.cayley_iters;
    sd.orth_tol = t->desc.orth_tol;
    if (!t->desc.freeze_r1) {
        r = quarot_stiefel_step_f64(p->h, t->r1, t->grad_r1, p->m1, &sd, &si, &p->env);
        if (r != QUAROT_OK) {
            quarot__tr_err(t, "step %d: the R1 update failed: %s", step, quarot_result_string(r));
            return r;
        }
        in.alpha_r1 = si.alpha;
        in.orth_error = si.orth_error;
        in.reorthogonalized += si.reorthogonalized;
    }
    for (l = 0; l < p->L && t->r2 && !t->desc.freeze_r2; ++l) {
        r = quarot_stiefel_step_f64(p->hd, t->r2 + l * hd2, t->grad_r2 + l * hd2, p->m2 + l * hd2, &sd, &si, &p->env);
        if (r != QUAROT_OK) {
            quarot__tr_err(t, "step %d: the R2 update of layer %lld failed: %s", step, (long long)l,
                           quarot_result_string(r));
            return r;
        }
        if (si.orth_error > in.orth_error) in.orth_error = si.orth_error;
        in.reorthogonalized += si.reorthogonalized;
    }
    if (info) *info = in;
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_trainer_step(quarot_trainer* t, const int32_t* tokens, int64_t n_windows,
                                             int64_t seq_len, int step, int steps, quarot_train_step_info* info) {
    quarot_result r;
    double loss = 0.0;
    if (!t || !t->priv || steps < 1 || step < 1 || step > steps) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot_trainer_loss(t, tokens, n_windows, seq_len, 1, &loss);
    if (r != QUAROT_OK) return r;
    return quarot__tr_update(t, loss, n_windows, step, steps, info);
}

QUAROT_API quarot_result quarot_trainer_run(quarot_trainer* t, const int32_t* windows, int64_t n_windows,
                                            int64_t seq_len) {
    quarot__tr* p;
    quarot_rng rng;
    int64_t* order = NULL;
    int32_t* batch = NULL;
    int64_t next, i, B, hd2;
    double best = 0.0, loss = 0.0;
    quarot_result r = QUAROT_OK;
    int s, steps;
    if (!t || !t->priv || !windows || n_windows < 1 || seq_len < 2) return QUAROT_ERR_INVALID_ARGUMENT;
    p = (quarot__tr*)t->priv;
    B = t->desc.batch;
    steps = t->desc.steps;
    hd2 = p->hd * p->hd;
    if (B > n_windows) {
        quarot__tr_err(t, "a batch of %lld windows needs at least as many windows (%lld given)", (long long)B,
                       (long long)n_windows);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    order = (int64_t*)quarot__tr_alloc(p, n_windows, sizeof(int64_t));
    batch = (int32_t*)quarot__tr_alloc(p, B * seq_len, sizeof(int32_t));
    if (!order || !batch) { r = QUAROT_ERR_OUT_OF_MEMORY; goto done; }
    quarot_rng_seed(&rng, t->desc.seed ^ 0x5350494e51554e54ULL);   // window order, apart from the Hadamard signs
    next = n_windows;
    t->steps_run = 0;
    t->best_step = 0;
    t->stop_step = 0;
    for (s = 1; s <= steps; ++s) {
        quarot_train_step_info in;
        for (i = 0; i < B; ++i) {
            if (next == n_windows) {   // a new epoch: a fresh permutation
                int64_t k;
                for (k = 0; k < n_windows; ++k) order[k] = k;
                for (k = n_windows - 1; k > 0; --k) {
                    int64_t j = (int64_t)(quarot_rng_u64(&rng) % (uint64_t)(k + 1)), tmp = order[k];
                    order[k] = order[j];
                    order[j] = tmp;
                }
                next = 0;
            }
            memcpy(batch + i * seq_len, windows + order[next++] * seq_len, (size_t)seq_len * sizeof(int32_t));
        }
        r = quarot_trainer_loss(t, batch, B, seq_len, 1, &loss);
        if (r == QUAROT_ERR_NONFINITE) {   // back to the best rotations so far (the start when none)
            char detail[sizeof t->error];
            memcpy(detail, t->error, sizeof detail);
            t->stop_step = s;
            if (s > 1) {
                memcpy(t->r1, p->best1, (size_t)(p->h * p->h) * sizeof(double));
                if (t->r2) memcpy(t->r2, p->best2, (size_t)(p->L * hd2) * sizeof(double));
            }
            quarot__tr_err(t, "step %d: %s; stopped, keeping the rotations of step %d (batch loss %.6g)", s, detail,
                           t->best_step, best);
            goto done;
        }
        if (r != QUAROT_OK) goto done;
        if (s == 1 || loss < best) {   // the rotations before this step's update scored lowest so far
            best = loss;
            t->best_step = s - 1;
            memcpy(p->best1, t->r1, (size_t)(p->h * p->h) * sizeof(double));
            if (t->r2) memcpy(p->best2, t->r2, (size_t)(p->L * hd2) * sizeof(double));
        }
        if ((r = quarot__tr_update(t, loss, B, s, steps, &in)) != QUAROT_OK) goto done;
        t->history[t->steps_run++] = in;
        if (t->desc.progress) t->desc.progress(t->desc.user_data, &in);
    }
done:
    quarot_env_free(&p->env, order);
    quarot_env_free(&p->env, batch);
    return r;
}

#ifdef __cplusplus
}
#endif

#if defined(__clang__)
  #pragma STDC FP_CONTRACT DEFAULT
#elif defined(__GNUC__)
  #pragma GCC pop_options
#endif

#endif // QUAROT_IMPLEMENTATION

#if defined(QUAROT__TEMPLATE) && defined(QUAROT_IMPLEMENTATION_INCLUDED)
// Kernel bodies that exist once per ISA or element type: the implementation includes this file again
// for each instance, with QUAROT__TEMPLATE saying which body and macros naming the ISA or type (see
// QUAROT_HEADER_FILE). Nothing else in the file is read then: the declarations sit behind QUAROT_H and
// the implementation behind QUAROT_IMPLEMENTATION_INCLUDED.

// >>transform_body
// (implementation only) The f32 transform kernels of one ISA, compiled once per ISA by the section
// that defines its vector macros (>>transform_isa): this file is included again with QUAROT__TEMPLATE
// == QUAROT__TEMPLATE_TRANSFORM and QUAROT__ISA naming the ISA (QUAROT__K(quarot__wht_row_f32_) is
// quarot__wht_row_f32_avx2 etc.); the kernels' macros are those of >>transform_simd and >>transform_mix.
#if QUAROT__TEMPLATE == QUAROT__TEMPLATE_TRANSFORM

// The FWHT kernels: quarot__wht_blk_f32_<isa> (the W*2^lv floats at p, all in registers),
// quarot__wht_pass_f32_<isa> (stages h, 2h, .., h*2^(r-1) over a region of len floats) and the row
// driver quarot__wht_row_f32_<isa>. Rows shorter than W go to _ref.

// [2^lv][W] floats at p: stages h = 1 .. W/2 in lanes, then h = W .. W*2^(lv-1) across registers.
static void QUAROT__K(quarot__wht_blk_f32_)(float* p, const float* src, int lv, const float* pre, const float* post,
                                            const float* scale) {
    const int64_t h = QUAROT__W;
    const float* ps = src ? src : p;
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);
    const float* q;
    switch (lv) {
        case 0: QUAROT__RADIX(1, QUAROT__WITH) break;
        case 1: QUAROT__RADIX(2, QUAROT__WITH) break;
        case 2: QUAROT__RADIX(4, QUAROT__WITH) break;
        case 3: QUAROT__RADIX(8, QUAROT__WITH) break;
        default: QUAROT__RADIX(16, QUAROT__WITH) break;
    }
}

// 2 * W * 2^LOGR floats at x: two register blocks, then the last stage fused into block B.
static void QUAROT__K(quarot__wht_two_f32_)(float* x, const float* src, const float* pre, const float* post,
                                            const float* scale) {
    const int64_t h = QUAROT__W, half = (int64_t)QUAROT__W << QUAROT__LOGR;
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);
    const float *q, *ps;
    if (QUAROT__LOGR == 3) QUAROT__TWOBLK(8) else QUAROT__TWOBLK(16)
}

// For every base (multiple of h*2^r) and column c < h: the 2^r vectors x[base + c + t*h] hold bits
// b .. b+r-1 (h = 2^b) in their register index t, so r stages run on registers. post_row and scale
// (last pass only) are indexed like x.
static void QUAROT__K(quarot__wht_pass_f32_)(float* x, int64_t len, int64_t h, int r, const float* post_row,
                                             const float* scale) {
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);
    const float* pre = NULL;
    const float *post, *q;
    int64_t base, c;
    for (base = 0; base < len; base += h << r) {
        for (c = 0; c < h; c += QUAROT__W) {
            float* p = x + base + c;
            const float* ps = p;
            post = post_row ? post_row + base + c : NULL;
            switch (r) {
                case 1: QUAROT__RADIX(2, QUAROT__WITHOUT) break;
                case 2: QUAROT__RADIX(4, QUAROT__WITHOUT) break;
                case 3: QUAROT__RADIX(8, QUAROT__WITHOUT) break;
                default: QUAROT__RADIX(16, QUAROT__WITHOUT) break;
            }
        }
    }
}

// Row driver. Bits LOGW .. lc-1 are done per L1-sized chunk of 2^lc floats (first group in registers
// with the in-lane stages, reading src when given, then passes over the chunk in x), bits lc .. L-1
// in passes over the whole row. Groups are as even as can be (a radix-2 pass is bound by its loads
// and stores), at most LOGR bits, and at most 3 bits in the whole-row passes, whose 2^r loads are
// 4 KiB or more apart and share one L1 set (8 ways). lc minimizes the number of passes.
static void QUAROT__K(quarot__wht_row_f32_)(float* x, const float* src, int L, const float* pre, const float* post,
                                            const float* scale) {
    int g[64], ng = 0, nc, i, lc, best = 1 << 30, lo, C, T;
    int64_t c0, b0;
    if (L < QUAROT__LOGW) { quarot__wht_row_f32_ref(x, src, L, pre, post, scale); return; }
    if (L - QUAROT__LOGW <= QUAROT__LOGR) {
        QUAROT__K(quarot__wht_blk_f32_)(x, src, L - QUAROT__LOGW, pre, post, scale);
        return;
    }
    if (L - QUAROT__LOGW == QUAROT__LOGR + 1) { QUAROT__K(quarot__wht_two_f32_)(x, src, pre, post, scale); return; }
    // choose lc: fewest passes, never a 1-bit pass over the whole row
    for (i = L < QUAROT__WHT_LCHUNK ? L : QUAROT__WHT_LCHUNK, lc = i; i > QUAROT__LOGW; --i) {
        const int np = (i - QUAROT__LOGW + QUAROT__LOGR - 1) / QUAROT__LOGR + (L - i + 2) / 3;
        if (L - i != 1 && np < best) { best = np; lc = i; }
    }
    // g[0] bits in the register block, g[1 .. nc-1] in chunk passes, the rest over the row
    C = lc - QUAROT__LOGW; T = L - lc;
    nc = (C + QUAROT__LOGR - 1) / QUAROT__LOGR;
    for (i = 0; i < nc; ++i) g[ng++] = C / nc + (i < C % nc ? 1 : 0);
    for (i = 0; i < (T + 2) / 3; ++i) g[ng++] = T / ((T + 2) / 3) + (i < T % ((T + 2) / 3) ? 1 : 0);
    for (c0 = 0; c0 < ((int64_t)1 << L); c0 += (int64_t)1 << lc) {
        const int last = T == 0;
        for (b0 = 0; b0 < ((int64_t)1 << lc); b0 += (int64_t)1 << (QUAROT__LOGW + g[0]))
            QUAROT__K(quarot__wht_blk_f32_)(x + c0 + b0, src ? src + c0 + b0 : NULL, g[0],
                                            pre ? pre + c0 + b0 : NULL, NULL, NULL);
        for (i = 1, lo = QUAROT__LOGW + g[0]; i < nc; lo += g[i++])
            QUAROT__K(quarot__wht_pass_f32_)(x + c0, (int64_t)1 << lc, (int64_t)1 << lo, g[i],
                                             last && i == nc - 1 ? post : NULL, last && i == nc - 1 ? scale : NULL);
    }
    for (i = nc, lo = lc; i < ng; lo += g[i++])
        QUAROT__K(quarot__wht_pass_f32_)(x, (int64_t)1 << L, (int64_t)1 << lo, g[i], i == ng - 1 ? post : NULL,
                                         i == ng - 1 ? scale : NULL);
}

// The column kernels (quarot_hadamard_apply_cols_f32; the passes of QUAROT__CPASS). Pass k of pl over
// the w columns: rows of src / dst lds / ldd floats apart, or in the skewed buffer (sbuf / dbuf).
static void QUAROT__K(quarot__whtc_pass_f32_)(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t w, int L,
                                              const quarot__whtc_plan* pl, int k, int sbuf, int dbuf,
                                              const float* pre, const float* post, const float* scale,
                                              const float* ahead, int64_t lda) {
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);
    const int64_t hs = (int64_t)1 << pl->s[k], n = (int64_t)1 << L;
    const int64_t ss = sbuf ? quarot__whtc_stride(pl, k, w) : hs * lds;
    const int64_t sd = dbuf ? quarot__whtc_stride(pl, k, w) : hs * ldd;
    int64_t base, c, cv, t;
    switch (pl->r[k]) {
        case 1: QUAROT__CPASS(2) break;
        case 2: QUAROT__CPASS(4) break;
        case 3: QUAROT__CPASS(8) break;
        default: QUAROT__CPASS(16) break;
    }
}

static void QUAROT__K(quarot__whtc_f32_)(float* x, int64_t ld, int64_t w, int L, const float* pre, const float* post,
                                         const float* scale, float* buf) {
    quarot__whtc_plan pl;
    int k;
    quarot__whtc_plan_make(&pl, L, QUAROT__LOGR);
    for (k = 0; k < pl.np; ++k) {
        const int first = k == 0, last = k == pl.np - 1;
        const int sbuf = !first && buf != NULL, dbuf = !last && buf != NULL;
        QUAROT__K(quarot__whtc_pass_f32_)(sbuf ? buf : x, ld, dbuf ? buf : x, ld, w, L, &pl, k, sbuf, dbuf,
                                          first ? pre : NULL, last ? post : NULL, last ? scale : NULL,
                                          first || last ? x : NULL, ld);
    }
}

// The float-panel mixing (b == 1). z, y: [K][M]; coef: the panels of one orientation. Three loops by
// M: 2W and more, W, below W.
static void QUAROT__K(quarot__mix_f32_)(const float* z, float* y, int64_t K, int64_t M, const float* coef,
                                        const float* post, const float* scale) {
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);
    int64_t i0, j0, j, k;
    if (M >= 2 * QUAROT__W) {
        for (j0 = 0; j0 < M; j0 += 2 * QUAROT__W) {
            for (i0 = 0; i0 < K; i0 += QUAROT__MIX_RI) {
                const float* c = coef + (i0 >> 4) * 16 * K + (i0 & 15);
                const float* zk = z + j0;
                QUAROT__V z0 = QUAROT__VLD(zk), z1 = QUAROT__VLD(zk + QUAROT__W), hv;
                QUAROT__MIX_REP(QUAROT__MA_DECL2)
                QUAROT__MIX_REP(QUAROT__MA_INIT2)
                for (k = 1; k < K; ++k) {
                    c += 16; zk += M;
                    z0 = QUAROT__VLD(zk); z1 = QUAROT__VLD(zk + QUAROT__W);
                    QUAROT__MIX_REP(QUAROT__MA_STEP2)
                }
                QUAROT__MIX_REP(QUAROT__MA_STORE2)
            }
        }
    } else if (M == QUAROT__W) {
        for (i0 = 0, j0 = 0; i0 < K; i0 += QUAROT__MIX_RI) {
            const float* c = coef + (i0 >> 4) * 16 * K + (i0 & 15);
            const float* zk = z;
            QUAROT__V z0 = QUAROT__VLD(zk);
            QUAROT__MIX_REP(QUAROT__MA_DECL1)
            QUAROT__MIX_REP(QUAROT__MA_INIT1)
            for (k = 1; k < K; ++k) {
                c += 16; zk += M;
                z0 = QUAROT__VLD(zk);
                QUAROT__MIX_REP(QUAROT__MA_STEP1)
            }
            QUAROT__MIX_REP(QUAROT__MA_STORE1)
        }
    } else {
        float buf[QUAROT__W];
        for (j = 0; j < M; ++j) {
            for (i0 = 0; i0 < K; i0 += QUAROT__MIX_NB * QUAROT__W) {
                const float* c = coef + (i0 >> 4) * 16 * K;
                QUAROT__V zb = QUAROT__VSET1(z[j]);
                QUAROT__MIX_BREP(QUAROT__MB_DECL)
                QUAROT__MIX_BREP(QUAROT__MB_INIT)
                for (k = 1; k < K; ++k) {
                    zb = QUAROT__VSET1(z[k * M + j]);
                    QUAROT__MIX_BREP(QUAROT__MB_STEP)
                }
                QUAROT__MIX_BREP(QUAROT__MB_STORE)
            }
        }
    }
}

// The blocked mixing (b > 1). z, y: [K][M]; pat: [K8 + 8][nwd] pattern words of one orientation; tab:
// one group's tables.
static void QUAROT__K(quarot__mixb_f32_)(const float* z, float* y, int64_t K, int64_t M, int b, const uint64_t* pat,
                                         int64_t nb, float* tab, const float* corr, const float* post,
                                         const float* scale) {
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);
    const int64_t nv = M >= 4 * QUAROT__W ? 4 : M / QUAROT__W, ew = nv * QUAROT__W;
    const int64_t chalf = M / 2, E = 64 / b, nwd = (nb + E - 1) / E;
    const uint64_t pm = ((uint64_t)1 << (b - 1)) - 1;
    const int64_t gfit = QUAROT__MIXB_CACHE / ((int64_t)sizeof(float) * ew) >> (b - 1);
    const int64_t gsz = gfit > 0 ? gfit : 1;
    int64_t j0, i0, blk, k0, c, g0, g1;
    for (j0 = 0; j0 < M; j0 += ew) {
        for (g0 = 0; g0 < nb; g0 = g1) {
            const int64_t wi0 = g0 / E, sh0 = (g0 % E) * b;
            g1 = g0 + gsz < nb ? g0 + gsz : nb;
            // the group's tables, then the outputs' running sums over its blocks
            if (nv == 4) QUAROT__MIXB_GROUP(4)
            else if (nv == 2) QUAROT__MIXB_GROUP(2)
            else QUAROT__MIXB_GROUP(1)
        }
    }
}

#endif // QUAROT__TEMPLATE_TRANSFORM

// >>gemm_body
// (implementation only) The blocked GEMM driver of >>gemm for one element type: QUAROT__T (float or
// double), QUAROT__G(name) its names (quarot__gemm_run_s / _d), QUAROT__GCFG and QUAROT__GSELECT its
// blocking type and selection (quarot__sgemm_cfg, quarot__sgemm_select).
#if QUAROT__TEMPLATE == QUAROT__TEMPLATE_GEMM

static void QUAROT__G(quarot__gemm_strip_)(const QUAROT__T* QUAROT__RESTRICT s, int64_t ld, int64_t kc, int64_t ns,
                                           int w, QUAROT__T* QUAROT__RESTRICT d) {
    int64_t p, t;
    int j;
    switch (w) {
        case 4: QUAROT__GEMM_STRIP_W(QUAROT__T, 4) break;
        case 6: QUAROT__GEMM_STRIP_W(QUAROT__T, 6) break;
        case 8: QUAROT__GEMM_STRIP_W(QUAROT__T, 8) break;
        case 12: QUAROT__GEMM_STRIP_W(QUAROT__T, 12) break;
        case 16: QUAROT__GEMM_STRIP_W(QUAROT__T, 16) break;
        case 32: QUAROT__GEMM_STRIP_W(QUAROT__T, 32) break;
        default: QUAROT__GEMM_STRIP_ANY(QUAROT__T, w) break;
    }
}

static void QUAROT__G(quarot__gemm_pack_a_)(int ta, const QUAROT__T* a, int64_t lda, int64_t mc, int64_t kc, int mr,
                                            QUAROT__T* QUAROT__RESTRICT ap) {
    int64_t s, p;
    int r, rows;
    if (ta && mc >= mr) {
        s = mc / mr * mr;
        QUAROT__G(quarot__gemm_strip_)(a, lda, kc, mc / mr, mr, ap);
        ap += s * kc;
        a += s;
        mc -= s;
    }
    if (!ta) {
        // full slivers of row-major A: each source row read contiguously, 64 columns at a time, into
        // the sliver's (L1-resident) 64 x mr tile. Column by column, the mr rows (a power-of-two
        // stride apart, e.g. 16 KiB) all fall into one L1 set and evict each other on every element.
        int64_t p0, pe;
        for (s = 0; s + mr <= mc; s += mr, ap += (int64_t)mr * kc)
            for (p0 = 0; p0 < kc; p0 = pe) {
                pe = p0 + 64 < kc ? p0 + 64 : kc;
                QUAROT__G(quarot__gemm_tr_)(a + s * lda, lda, mr, p0, pe, ap);
            }
        a += s * lda;
        mc -= s;
    }
    for (s = 0; s < mc; s += mr) {
        rows = (int)quarot__gemm_min(mr, mc - s);
        for (p = 0; p < kc; ++p) {
            if (ta) { const QUAROT__T* src = a + p * lda + s; for (r = 0; r < rows; ++r) ap[r] = src[r]; }
            else    { const QUAROT__T* src = a + s * lda + p; for (r = 0; r < rows; ++r) ap[r] = src[r * lda]; }
            for (; r < mr; ++r) ap[r] = (QUAROT__T)0;
            ap += mr;
        }
    }
}

// The serial loop nest over one panel of C, with its own packing buffers ap, bp. apk, when not NULL: A
// packed whole beforehand (pack_a of all m rows, k <= kc, so one k block): its slivers are used in
// place of ap's, which is not touched; the same values reach the kernel, so the same bits.
static void QUAROT__G(quarot__gemm_run_)(const QUAROT__GCFG* cfg, int ta, int tb, int64_t m, int64_t n, int64_t k,
                                         QUAROT__T alpha, const QUAROT__T* a, int64_t lda, const QUAROT__T* b,
                                         int64_t ldb, QUAROT__T beta, QUAROT__T* c, int64_t ldc, QUAROT__T* ap,
                                         QUAROT__T* bp, int tri, int64_t coff, const QUAROT__T* apk) {
    const int mr = cfg->mr, nr = cfg->nr;
    int64_t jc, pc, ic, ir, jr, nc, kc, mc, i, j;
    QUAROT__T tmp[QUAROT__GEMM_TILE_MAX], bb;
    for (jc = 0; jc < n; jc += cfg->nc) {
        nc = quarot__gemm_min(cfg->nc, n - jc);
        for (pc = 0; pc < k; pc += cfg->kc) {
            kc = quarot__gemm_min(cfg->kc, k - pc);
            bb = pc == 0 ? beta : (QUAROT__T)1;
            // B's panel is pack_a's of op(B)^T: nr-column slivers of op(B) are nr-row slivers of
            // op(B)^T, which is B stored transposed exactly when tb is 0
            QUAROT__G(quarot__gemm_pack_a_)(!tb, b + (tb ? jc * ldb + pc : pc * ldb + jc), ldb, nc, kc, nr, bp);
            for (ic = 0; ic < m; ic += cfg->mc) {
                mc = quarot__gemm_min(cfg->mc, m - ic);
                if (!apk)
                    QUAROT__G(quarot__gemm_pack_a_)(ta, a + (ta ? pc * lda + ic : ic * lda + pc), lda, mc, kc, mr,
                                                    ap);
                for (ir = 0; ir < mc; ir += mr) {
                    const QUAROT__T* as = apk ? apk + (ic + ir) * kc : ap + ir * kc;
                    QUAROT__T* crow = c + (ic + ir) * ldc + jc;
                    int64_t rows = quarot__gemm_min(mr, mc - ir);
                    for (jr = 0; jr < nc; jr += nr) {
                        int64_t cols = quarot__gemm_min(nr, nc - jr);
                        if (tri && coff + jc + jr + cols <= ic + ir) continue;   // strictly lower
                        if (rows == mr && cols == nr) {
                            cfg->kernel(kc, as, bp + jr * kc, crow + jr, ldc, alpha, bb);
                            continue;
                        }
                        // edge tile: tmp = acc exactly (alpha 1, beta 0), then the kernel's epilogue
                        cfg->kernel(kc, as, bp + jr * kc, tmp, nr, (QUAROT__T)1, (QUAROT__T)0);
                        for (i = 0; i < rows; ++i) {
                            QUAROT__T* cr = crow + i * ldc + jr;
                            for (j = 0; j < cols; ++j) {
                                QUAROT__T v = alpha * tmp[i * nr + j];
                                cr[j] = bb == (QUAROT__T)0 ? v : v + bb * cr[j];
                            }
                        }
                    }
                }
            }
        }
    }
}

// C <- beta * C for k == 0 or alpha == 0 (beta == 0 writes zeros without reading).
static void QUAROT__G(quarot__gemm_scale_)(int64_t m, int64_t n, QUAROT__T beta, QUAROT__T* c, int64_t ldc) {
    int64_t i, j;
    for (i = 0; i < m; ++i)
        for (j = 0; j < n; ++j) c[i * ldc + j] = beta == (QUAROT__T)0 ? (QUAROT__T)0 : beta * c[i * ldc + j];
}

typedef struct QUAROT__G(quarot__gemm_job_) {
    const QUAROT__GCFG* cfg;
    const quarot__gemm_plan* pl;
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    QUAROT__T alpha, beta;
    const QUAROT__T* a;
    const QUAROT__T* b;
    QUAROT__T* c;
    QUAROT__T* work;
    int tri;
} QUAROT__G(quarot__gemm_job_);

// Task t: panel (t / tn, t % tn) of C, workspace slice t.
static void QUAROT__G(quarot__gemm_task_)(void* arg, int64_t t) {
    const QUAROT__G(quarot__gemm_job_)* jb = (const QUAROT__G(quarot__gemm_job_)*)arg;
    const quarot__gemm_plan* pl = jb->pl;
    int64_t i0 = (t / pl->tn) * pl->pm, j0 = (t % pl->tn) * pl->pn;
    int64_t pn = quarot__gemm_min(pl->pn, jb->n - j0), js = 0;
    QUAROT__T* ap = jb->work + t * pl->per_task;
    // tri: columns left of the panel's first row are strictly lower for all its rows
    if (jb->tri && i0 > j0) js = quarot__gemm_min(pn, (i0 - j0) / jb->cfg->nr * jb->cfg->nr);
    if (js >= pn) return;
    j0 += js;
    QUAROT__G(quarot__gemm_run_)(jb->cfg, jb->ta, jb->tb, quarot__gemm_min(pl->pm, jb->m - i0), pn - js, jb->k,
                                 jb->alpha, jb->a + (jb->ta ? i0 : i0 * jb->lda), jb->lda,
                                 jb->b + (jb->tb ? j0 * jb->ldb : j0), jb->ldb, jb->beta,
                                 jb->c + i0 * jb->ldc + j0, jb->ldc, ap, ap + pl->a_elems, jb->tri, j0 - i0, NULL);
}

// Narrow products (!tb, n a multiple of nnr below QUAROT__GEMM_NARROW * nnr): A is read in place,
// once per column tile, not packed; a row-major A packed for only n / nr column tiles spent longer
// packing (a transpose, out of DRAM) than multiplying, and a transposed one (op(A) = A^T, e.g. the
// deflation's C^T W) was packed whole for every product, three passes over it instead of one. Task t:
// rows [t*rows, +rows) of op(A), all kc blocks (beta' as in the loop nest), full nmr x nnr tiles.
// (Other n would leave a few columns for the loop nest, which packs all of A again for them: slower
// than packing once.)
typedef struct QUAROT__G(quarot__gemm_njob_) {
    const QUAROT__GCFG* cfg;
    int ta;
    int64_t m, n, k, lda, ldb, ldc, rows;
    QUAROT__T alpha, beta;
    const QUAROT__T* a;
    const QUAROT__T* b;
    QUAROT__T* c;
} QUAROT__G(quarot__gemm_njob_);

static void QUAROT__G(quarot__gemm_ntask_)(void* arg, int64_t t) {
    const QUAROT__G(quarot__gemm_njob_)* jb = (const QUAROT__G(quarot__gemm_njob_)*)arg;
    const QUAROT__GCFG* cfg = jb->cfg;
    const int64_t ars = jb->ta ? 1 : jb->lda, aks = jb->ta ? jb->lda : 1;
    int64_t i0 = t * jb->rows, i1 = quarot__gemm_min(jb->m, i0 + jb->rows), pc, i, j, kc;
    for (pc = 0; pc < jb->k; pc += kc) {
        QUAROT__T bb = pc == 0 ? jb->beta : (QUAROT__T)1;
        kc = quarot__gemm_min(cfg->kc, jb->k - pc);
        for (i = i0; i < i1; i += cfg->nmr)
            for (j = 0; j < jb->n; j += cfg->nnr)
                cfg->narrow(kc, jb->a + i * ars + pc * aks, ars, aks, jb->b + pc * jb->ldb + j, jb->ldb,
                            jb->c + i * jb->ldc + j, jb->ldc, jb->alpha, bb);
    }
}

// The whole built-in GEMM after argument checks, with a given blocking and kernel. tri: only the
// tiles of C that hold an element on or above the diagonal are computed (m == n: the upper triangle
// of a symmetric product; the elements computed are the bits of the full product).
static quarot_result QUAROT__G(quarot__gemm_cfgx_)(const QUAROT__GCFG* cfg, int tri, int ta, int tb, int64_t m,
                                                   int64_t n, int64_t k, QUAROT__T alpha, const QUAROT__T* a,
                                                   int64_t lda, const QUAROT__T* b, int64_t ldb, QUAROT__T beta,
                                                   QUAROT__T* c, int64_t ldc, const quarot_env* env) {
    quarot__gemm_plan pl;
    QUAROT__G(quarot__gemm_job_) jb;
    size_t bytes;
    void* mem;
    if (m == 0 || n == 0) return QUAROT_OK;
    if (k == 0 || alpha == (QUAROT__T)0) { QUAROT__G(quarot__gemm_scale_)(m, n, beta, c, ldc); return QUAROT_OK; }
    if (cfg->narrow && !tri && !tb && m >= cfg->nmr && n % cfg->nnr == 0 &&
        n < QUAROT__GEMM_NARROW * cfg->nnr) {
        QUAROT__G(quarot__gemm_njob_) nj;
        int64_t m0 = m / cfg->nmr * cfg->nmr, t;
        quarot_result r = QUAROT_OK;
        nj.cfg = cfg; nj.ta = ta; nj.m = m0; nj.n = n; nj.k = k; nj.lda = lda; nj.ldb = ldb; nj.ldc = ldc;
        nj.alpha = alpha; nj.beta = beta; nj.a = a; nj.b = b; nj.c = c;
        nj.rows = 16 * (int64_t)cfg->nmr;   // up to 16 tiles a task, at least ~4 tasks a thread
        t = quarot__gemm_threads(m, n, k, env);
        if (t > 1) {
            t = quarot__gemm_cdiv(m0, 4 * t * cfg->nmr) * cfg->nmr;
            if (t < nj.rows) nj.rows = t;
            quarot_env_parallel_for(env, QUAROT__G(quarot__gemm_ntask_), &nj, quarot__gemm_cdiv(m0, nj.rows));
        } else {
            for (t = 0; t < quarot__gemm_cdiv(m0, nj.rows); ++t) QUAROT__G(quarot__gemm_ntask_)(&nj, t);
        }
        // the last m % nmr rows through the loop nest below: the same chains, so the same bits
        if (m0 < m)
            r = QUAROT__G(quarot__gemm_cfgx_)(cfg, 0, ta, 0, m - m0, n, k, alpha, a + (ta ? m0 : m0 * lda), lda, b, ldb,
                                              beta, c + m0 * ldc, ldc, env);
        return r;
    }
    quarot__gemm_plan_make(m, n, k, cfg->mr, cfg->nr, cfg->kc, cfg->mc, cfg->nc, tri, env, &pl);
    if (!quarot__mul_size((size_t)pl.tasks, (size_t)pl.per_task, &bytes) ||
        !quarot__mul_size(bytes, sizeof(QUAROT__T), &bytes) || bytes > SIZE_MAX - 64)
        return QUAROT_ERR_OVERFLOW;
    mem = quarot_env_alloc(env, bytes + 64);
    if (!mem) return QUAROT_ERR_OUT_OF_MEMORY;
    jb.cfg = cfg; jb.pl = &pl; jb.ta = ta; jb.tb = tb; jb.m = m; jb.n = n; jb.k = k;
    jb.lda = lda; jb.ldb = ldb; jb.ldc = ldc; jb.alpha = alpha; jb.beta = beta;
    jb.a = a; jb.b = b; jb.c = c; jb.tri = tri;
    jb.work = (QUAROT__T*)quarot__align64(mem);
    quarot_env_parallel_for(env, QUAROT__G(quarot__gemm_task_), &jb, pl.tasks);
    quarot_env_free(env, mem);
    return QUAROT_OK;
}

static quarot_result QUAROT__G(quarot__gemm_cfg_)(const QUAROT__GCFG* cfg, int ta, int tb, int64_t m, int64_t n,
                                                  int64_t k, QUAROT__T alpha, const QUAROT__T* a, int64_t lda,
                                                  const QUAROT__T* b, int64_t ldb, QUAROT__T beta, QUAROT__T* c,
                                                  int64_t ldc, const quarot_env* env) {
    return QUAROT__G(quarot__gemm_cfgx_)(cfg, 0, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env);
}

// The same with the blocking and kernel of an ISA (resolved); used by the entry points and linalg.
static quarot_result QUAROT__G(quarot__gemm_)(quarot_isa isa, int ta, int tb, int64_t m, int64_t n, int64_t k,
                                              QUAROT__T alpha, const QUAROT__T* a, int64_t lda, const QUAROT__T* b,
                                              int64_t ldb, QUAROT__T beta, QUAROT__T* c, int64_t ldc,
                                              const quarot_env* env) {
    QUAROT__GCFG cfg;
    QUAROT__GSELECT(isa, &cfg);
    return QUAROT__G(quarot__gemm_cfg_)(&cfg, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env);
}

#endif // QUAROT__TEMPLATE_GEMM

// >>polar_body
// (implementation only) The Newton-Schulz polar factor of >>linalg for one element type, named and
// typed as >>gemm_body: the scaled Frobenius norm, the Gram matrix X^T X by symmetric panels, the
// rescale and the sigma_min estimate, then the iteration itself.
#if QUAROT__TEMPLATE == QUAROT__TEMPLATE_POLAR

static double QUAROT__G(quarot__frob_)(int64_t n, const QUAROT__T* x, int64_t ld) {
    double amax = 0.0, ss = 0.0, t;
    int64_t i, j;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) { t = fabs((double)x[i * ld + j]); if (t > amax) amax = t; }
    if (amax == 0.0) return 0.0;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) { t = (double)x[i * ld + j] / amax; ss += t * t; }
    return amax * sqrt(ss);
}

typedef struct QUAROT__G(quarot__gram_job_) {
    const QUAROT__GCFG* cfg;
    int64_t n, ldx, bs, nb, n_tasks, per_task, a_elems;
    const QUAROT__T* x;
    QUAROT__T* g;
    QUAROT__T* work;
} QUAROT__G(quarot__gram_job_);

static void QUAROT__G(quarot__gram_panel_)(const QUAROT__G(quarot__gram_job_)* jb, int64_t p, QUAROT__T* ap) {
    int64_t i0 = p * jb->bs;
    QUAROT__G(quarot__gemm_run_)(jb->cfg, 1, 0, quarot__gemm_min(jb->bs, jb->n - i0), jb->n - i0, jb->n, (QUAROT__T)1,
                                 jb->x + i0, jb->ldx, jb->x + i0, jb->ldx, (QUAROT__T)0, jb->g + i0 * jb->n + i0, jb->n,
                                 ap, ap + jb->a_elems, 0, 0, NULL);
}

// Task t: panel pairs (q, nb-1-q) for q = t, t + n_tasks, ...
static void QUAROT__G(quarot__gram_task_)(void* arg, int64_t t) {
    const QUAROT__G(quarot__gram_job_)* jb = (const QUAROT__G(quarot__gram_job_)*)arg;
    QUAROT__T* ap = jb->work + t * jb->per_task;
    int64_t q;
    for (q = t; q < (jb->nb + 1) / 2; q += jb->n_tasks) {
        QUAROT__G(quarot__gram_panel_)(jb, q, ap);
        if (jb->nb - 1 - q != q) QUAROT__G(quarot__gram_panel_)(jb, jb->nb - 1 - q, ap);
    }
}

// G [n][n]: the strictly lower triangle <- the upper one, in 32 x 32 tiles for the cache.
static void QUAROT__G(quarot__gram_mirror_)(int64_t n, QUAROT__T* g) {
    int64_t i, j, i0, j0;
    for (i0 = 0; i0 < n; i0 += 32)
        for (j0 = 0; j0 <= i0; j0 += 32)
            for (i = i0; i < quarot__gemm_min(i0 + 32, n); ++i)
                for (j = j0; j < quarot__gemm_min(j0 + 32, i); ++j) g[i * n + j] = g[j * n + i];
}

// G[n][n] (row stride n) = X^T X for X [n][n] (row stride ldx); work sized by gram_setup.
static void QUAROT__G(quarot__gram_)(QUAROT__G(quarot__gram_job_)* jb, const QUAROT__T* x, int64_t ldx, QUAROT__T* g,
                                     const quarot_env* env) {
    jb->x = x; jb->ldx = ldx; jb->g = g;
    quarot_env_parallel_for(env, QUAROT__G(quarot__gram_task_), jb, jb->n_tasks);
    QUAROT__G(quarot__gram_mirror_)(jb->n, g);
}

// Panel size: a multiple of the micro-tile near 200; tasks: one, or ~2 per thread. Returns the
// workspace elements needed (0 on overflow).
static size_t QUAROT__G(quarot__gram_setup_)(QUAROT__G(quarot__gram_job_)* jb, const QUAROT__GCFG* cfg,
                                             int64_t n, const quarot_env* env) {
    int64_t l = cfg->mr, threads = (env && env->parallel.run) ? env->parallel.n_threads : 1;
    size_t total;
    while (l % cfg->nr) l += cfg->mr;   // lcm(mr, nr)
    jb->cfg = cfg;
    jb->n = n;
    jb->bs = quarot__gemm_cdiv(192, l) * l;   // waste (diagonal blocks) ~ bs/n, packing ~ 1/bs
    jb->nb = quarot__gemm_cdiv(n, jb->bs);
    jb->n_tasks = threads > 1 ? quarot__gemm_min((jb->nb + 1) / 2, 2 * threads) : 1;
    jb->a_elems = (quarot__gemm_min(cfg->mc, jb->bs) * quarot__gemm_min(cfg->kc, n) + 15) / 16 * 16;
    jb->per_task = jb->a_elems + (quarot__gemm_min(cfg->kc, n) *
                                  quarot__gemm_min(cfg->nc, quarot__gemm_cdiv(n, cfg->nr) * cfg->nr) + 15) / 16 * 16;
    if (!quarot__mul_size((size_t)jb->n_tasks, (size_t)jb->per_task, &total)) return 0;
    return total;
}

// G *= 1/lam and X *= 1/sqrt(lam) with lam = min(||G||_F, ||G||_1) >= lambda_max(G) = sigma_max(X)^2,
// when lam < 1; returns the bound on lambda_max(G) after that (1 if it rescaled, else lam).
static double QUAROT__G(quarot__polar_rescale_)(int64_t n, QUAROT__T* x, QUAROT__T* g, double* dg, double* s) {
    double fro = 0.0, one = 0.0, row, t, inv;
    int64_t i, j;
    for (i = 0; i < n; ++i) {
        row = fabs(dg[i]);
        fro += dg[i] * dg[i];
        for (j = 0; j < n; ++j)
            if (j != i) { t = (double)g[i * n + j]; row += fabs(t); fro += t * t; }
        if (row > one) one = row;
    }
    fro = sqrt(fro);
    t = fro < one ? fro : one;
    if (!(t > 0.0 && t < 1.0) || !s) return t;
    inv = 1.0 / sqrt(t);
    *s *= sqrt(t);
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            x[i * n + j] = (QUAROT__T)((double)x[i * n + j] * inv);
            g[i * n + j] = (QUAROT__T)((double)g[i * n + j] / t);
        }
    for (j = 0; j < n; ++j) dg[j] /= t;
    return 1.0;
}

// `steps` power steps on M = cm*I - G (cm >= lambda_max(G): M is positive semidefinite), v updated
// in place; returns cm - (Rayleigh quotient of M), an estimate of lambda_min(G) that can only be too
// high: too early a switch costs steps, never correctness. G v = sum_j v_j G[j][:] (G symmetric).
static double QUAROT__G(quarot__polar_lmin_)(int64_t n, const QUAROT__T* g, double cm, double* v, double* w,
                                             int steps) {
    double rq = 0.0, vv, nw;
    int64_t i, j;
    int k;
    for (k = 0; k < steps; ++k) {
        for (i = 0; i < n; ++i) w[i] = cm * v[i];
        for (j = 0; j < n; ++j) {
            const QUAROT__T* gr = g + j * n;
            double vj = v[j];
            for (i = 0; i < n; ++i) w[i] -= vj * (double)gr[i];
        }
        vv = 0.0; rq = 0.0; nw = 0.0;
        for (i = 0; i < n; ++i) { vv += v[i] * v[i]; rq += v[i] * w[i]; nw += w[i] * w[i]; }
        rq /= vv;
        if (!(nw > 0.0)) break;
        nw = 1.0 / sqrt(nw);
        for (i = 0; i < n; ++i) v[i] = w[i] * nw;
    }
    return cm - rq;
}

static quarot_result QUAROT__G(quarot__polar_)(int64_t n, const QUAROT__T* c, int64_t ldc, QUAROT__T* u, int64_t ldu,
                                               const quarot_polar_desc* d, quarot_polar_info* info,
                                               const quarot_env* env, double tol_default, int iter_default,
                                               double tau) {
    QUAROT__GCFG cfg;
    QUAROT__G(quarot__gram_job_) jb;
    quarot_result r;
    quarot_rng rng;
    double tol = d && d->tol > 0.0 ? d->tol : tol_default, s, res = 0.0, t, bound = 1.0, growth = 1.0;
    int max_iter = d && d->max_iter > 0 ? d->max_iter : iter_default, it, status = 1;
    int fast = !(d && d->plain);   // 1 while X <- X(2I - G) steps are in use
    int searching = 1;   // 1 until sigma_min(X) >= 1/2 is seen
    size_t nn, bytes, gram_elems;
    QUAROT__T *mem, *xa, *g, *cur, *oth, *sw;
    double *dg, *pv, *pw;
    int64_t i, j, ldcur, ldoth, ldsw;
    if (info) { info->iterations = 0; info->residual = 0.0; info->scale = 0.0; }
    if (n < 1 || !c || !u || ldc < n || ldu < n) return QUAROT_ERR_INVALID_ARGUMENT;
    if (d && (d->max_iter < 0 || !(d->tol >= 0.0) || !(d->scale >= 0.0) || d->scale - d->scale != 0.0))
        return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot__gemm_check_mat(c, n, n, ldc, sizeof(QUAROT__T), 1);
    if (r == QUAROT_OK) r = quarot__gemm_check_mat(u, n, n, ldu, sizeof(QUAROT__T), 1);
    if (r != QUAROT_OK) return r;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) { t = (double)c[i * ldc + j]; if (t - t != 0.0) return QUAROT_ERR_NONFINITE; }
    s = d && d->scale > 0.0 ? d->scale : QUAROT__G(quarot__frob_)(n, c, ldc);
    if (s == 0.0) return QUAROT_ERR_INVALID_ARGUMENT;   // C == 0: no polar factor
    QUAROT__GSELECT(quarot_isa_best(), &cfg);
    gram_elems = QUAROT__G(quarot__gram_setup_)(&jb, &cfg, n, env);
    // one block: gram packing, X [n][n], G [n][n], then 3 vectors [n] of doubles, alignment slack
    if (!gram_elems || !quarot__mul_size((size_t)n, (size_t)n, &nn) || nn > (SIZE_MAX / 4 - gram_elems) / 2 ||
        !quarot__mul_size(2 * nn + gram_elems, sizeof(QUAROT__T), &bytes) ||
        bytes > SIZE_MAX / 2 - 3 * (size_t)n * sizeof(double))
        return QUAROT_ERR_OVERFLOW;
    bytes += 3 * (size_t)n * sizeof(double) + 128;
    mem = (QUAROT__T*)quarot_env_alloc(env, bytes);
    if (!mem) return QUAROT_ERR_OUT_OF_MEMORY;
    jb.work = (QUAROT__T*)quarot__align64(mem);
    xa = jb.work + gram_elems;
    g = xa + nn;
    dg = (double*)(void*)(xa + (2 * nn + 7) / 8 * 8);   // 8-element (>= 32 B) aligned
    pv = dg + n;
    pw = pv + n;
    quarot_rng_seed(&rng, 0x706f6c6172ULL);   // power-iteration start
    for (i = 0; i < n; ++i) pv[i] = quarot_rng_normal(&rng);
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) xa[i * n + j] = (QUAROT__T)((double)c[i * ldc + j] / s);
    cur = xa; ldcur = n; oth = u; ldoth = ldu;
    for (it = 0;; ++it) {
        QUAROT__G(quarot__gram_)(&jb, cur, ldcur, g, env);
        for (j = 0; j < n; ++j) dg[j] = 0.0;
        for (i = 0; i < n; ++i)
            for (j = 0; j < n; ++j) { t = (double)cur[i * ldcur + j]; dg[j] += t * t; }
        // first step: refine the default scale; X(2I - G) steps only where sigma_max <= 1.09 is sure
        if (it == 0) {
            bound = QUAROT__G(quarot__polar_rescale_)(n, cur, g, dg, d && d->scale > 0.0 ? NULL : &s);
            if (bound > 1.18) fast = 0;
        }
        res = 0.0;
        for (i = 0; i < n; ++i) {
            t = fabs(dg[i] - 1.0);
            if (!(t <= res)) res = t;   // NaN propagates
            for (j = i + 1; j < n; ++j) { t = fabs((double)g[i * n + j]); if (!(t <= res)) res = t; }
        }
        if (res <= tol) { status = 0; break; }
        if (!(res <= 1e30) || it >= max_iter) break;   // diverged or out of steps
        // Until sigma_min(X) >= 1/2: each step multiplied the singular values below 1/2 by at least
        // 1.75 (fast) or 1.375, so sigma_min(X0) < 0.5/growth; below tau C counts as singular (its
        // rounding noise would otherwise grow into a singular value). Then the fast steps end.
        if (searching) {
            t = QUAROT__G(quarot__polar_lmin_)(n, g, it == 0 && bound > 1.0 ? 1.01 * bound + 0.19 : 1.19, pv, pw,
                                               it == 0 ? 12 : 4);
            if (t >= 0.25) searching = fast = 0;
            else if (0.5 / growth < tau) break;
            else growth *= fast ? 1.75 : 1.375;
        }
        // Y = 2I - G (fast) or (3I - G)/2 in place of G; the diagonal from the double column norms
        for (i = 0; i < n; ++i) {
            if (fast) for (j = 0; j < n; ++j) g[i * n + j] = -g[i * n + j];
            else      for (j = 0; j < n; ++j) g[i * n + j] = (QUAROT__T)-0.5 * g[i * n + j];
            g[i * n + i] = (QUAROT__T)(fast ? 2.0 - dg[i] : 1.5 - 0.5 * dg[i]);
        }
        r = QUAROT__G(quarot__gemm_)(quarot_isa_best(), 0, 0, n, n, n, (QUAROT__T)1, cur, ldcur, g, n, (QUAROT__T)0,
                                     oth, ldoth, env);
        if (r != QUAROT_OK) { quarot_env_free(env, mem); return r; }
        sw = cur; cur = oth; oth = sw;
        ldsw = ldcur; ldcur = ldoth; ldoth = ldsw;
    }
    if (cur != u)
        for (i = 0; i < n; ++i) memcpy(u + i * ldu, cur + i * ldcur, (size_t)n * sizeof(QUAROT__T));
    quarot_env_free(env, mem);
    if (info) { info->iterations = it; info->residual = res; info->scale = s; }
    return status ? QUAROT_ERR_NOT_CONVERGED : QUAROT_OK;
}

#endif // QUAROT__TEMPLATE_POLAR

// >>gptq_body
// (implementation only) GPTQ's register-blocked kernels of >>gptq for one ISA (AVX2, AVX-512):
// QUAROT__K(quarot__gptq_rankk_f64_) is quarot__gptq_rankk_f64_avx2 etc., the vector operations are
// QUAROT__RV, QUAROT__RLD, ... and QUAROT__RROWS(X) / QUAROT__RR the rows a pass holds in registers.
#if QUAROT__TEMPLATE == QUAROT__TEMPLATE_GPTQ

// The blocked rank-k update (quarot__gptq_rankk_f64).
static void QUAROT__K(quarot__gptq_rankk_f64_)(double* w, int64_t ldw, int64_t nr, const double* c, int64_t ldc,
                                               const double* u, int64_t ldu, int64_t kn, int64_t ncols) {
    const int64_t W = QUAROT__RW;
    double buf[QUAROT__RK_KS * 3 * QUAROT__RW];
    const int64_t nj = ncols / (3 * W) * (3 * W);
    int64_t j, t, k, k0, ks, ldp;
    for (k0 = 0; k0 < kn; k0 += ks) {
        ks = kn - k0 < QUAROT__RK_KS ? kn - k0 : QUAROT__RK_KS;
        for (j = 0; j < nj; j += 3 * W) {
            const double* up = u + k0 * ldu + j;
            ldp = ldu;
            if (nr > QUAROT__RR) {
                for (k = 0; k < ks; ++k) {
                    const double* uk = up + k * ldu;
                    QUAROT__RK_PF(uk + 3 * W)
                    QUAROT__RST(buf + k * 3 * W, QUAROT__RLD(uk));
                    QUAROT__RST(buf + k * 3 * W + W, QUAROT__RLD(uk + W));
                    QUAROT__RST(buf + k * 3 * W + 2 * W, QUAROT__RLD(uk + 2 * W));
                }
                up = buf;
                ldp = 3 * W;
            }
            t = 0;
            QUAROT__RK_PASS(QUAROT__RR, QUAROT__RROWS(QUAROT__RK_DECL), QUAROT__RROWS(QUAROT__RK_LD),
                            QUAROT__RROWS(QUAROT__RK_UP), QUAROT__RROWS(QUAROT__RK_ST))
            QUAROT__RK_PASS(1, QUAROT__RK_DECL(0), QUAROT__RK_LD(0), QUAROT__RK_UP(0), QUAROT__RK_ST(0))
        }
    }
    for (j = nj; j + W <= ncols; j += W)
        for (t = 0; t < nr; ++t) {
            QUAROT__RV acc = QUAROT__RLD(w + t * ldw + j);
            for (k = 0; k < kn; ++k)
                acc = QUAROT__RADD(acc, QUAROT__RMUL(QUAROT__RSET1(c[t * ldc + k]),
                                                     QUAROT__RLD(u + k * ldu + j)));
            QUAROT__RST(w + t * ldw + j, acc);
        }
    if (j < ncols) quarot__gptq_rankk_f64_ref(w + j, ldw, nr, c, ldc, u + j, ldu, kn, ncols - j);
}

// The blocked Hessian update (quarot__gptq_hessk_f64_ref).
static void QUAROT__K(quarot__gptq_hessk_f64_)(double* h, int64_t ldh, int64_t nr, const double* a, int64_t lda,
                                               const float* x, int64_t ldx, int64_t kn, int64_t ncols) {
    const int64_t W = QUAROT__RW;
    double buf[QUAROT__HK_KS * 3 * QUAROT__RW];
    const int64_t ldw = ldh;
    int64_t j = 0, t, k, k0, ks, q;
    for (; j + 3 * W <= ncols; j += 3 * W) {
        for (k0 = 0; k0 < kn; k0 += ks) {
            ks = kn - k0 < QUAROT__HK_KS ? kn - k0 : QUAROT__HK_KS;
            for (k = 0; k < ks; ++k) {
                const float* xk = x + (k0 + k) * ldx + j;
                QUAROT__RST(buf + k * 3 * W, QUAROT__RCVT(xk));
                QUAROT__RST(buf + k * 3 * W + W, QUAROT__RCVT(xk + W));
                QUAROT__RST(buf + k * 3 * W + 2 * W, QUAROT__RCVT(xk + 2 * W));
            }
            for (t = 0; t + QUAROT__RR <= nr; t += QUAROT__RR) {
                double* wt = h + t * ldh + j;
                QUAROT__RROWS(QUAROT__RK_DECL)
                QUAROT__RROWS(QUAROT__RK_LD)
                for (k = 0; k < ks; k += 8) {
                    const double* xb = buf + k * 3 * W;
                    const int64_t ka = k0 + k;
                    QUAROT__RROWS(QUAROT__HK_S)
                }
                QUAROT__RROWS(QUAROT__RK_ST)
            }
            for (; t < nr; ++t) {
                double* wt = h + t * ldh + j;
                QUAROT__RK_DECL(0)
                QUAROT__RK_LD(0)
                for (k = 0; k < ks; k += 8) {
                    const double* xb = buf + k * 3 * W;
                    const int64_t ka = k0 + k;
                    QUAROT__HK_S(0)
                }
                QUAROT__RK_ST(0)
            }
        }
    }
    for (; j + W <= ncols; j += W)
        for (t = 0; t < nr; ++t) {
            QUAROT__RV acc = QUAROT__RLD(h + t * ldh + j);
            for (k = 0; k < kn; k += 8) {
                const double* ar = a + t * lda + k;
                QUAROT__RV s0 = QUAROT__RMUL(QUAROT__RSET1(ar[0]), QUAROT__RCVT(x + k * ldx + j));
                for (q = 1; q < 8; ++q)
                    s0 = QUAROT__RADD(s0, QUAROT__RMUL(QUAROT__RSET1(ar[q]), QUAROT__RCVT(x + (k + q) * ldx + j)));
                acc = QUAROT__RADD(acc, s0);
            }
            QUAROT__RST(h + t * ldh + j, acc);
        }
    if (j < ncols) quarot__gptq_hessk_f64_ref(h + j, ldh, nr, a, lda, x + j, ldx, kn, ncols - j);
}

#endif // QUAROT__TEMPLATE_GPTQ

#endif // QUAROT__TEMPLATE

/*
------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the quarot.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
*/
