/* quarot.h v0.1.0 - rotate LLM weights so they quantize to 4 bits (QuaRot / SpinQuant / Adapt Rotation) in C99 - MIT licence at the end of this file

QUICK START
    #define QUAROT_IMPLEMENTATION          // in exactly one .c file
    #include "quarot.h"

    float x[4096] = {...};                 // one activation row
    quarot_rotation q; quarot_rotation_desc d = {0};
    d.n = 4096; d.seed = 42;               // random Hadamard D*H/sqrt(n), the QuaRot default
    quarot_rotation_init(&q, &d, NULL);
    quarot_rotation_apply_f32(&q, x, 1, 4096, 0, NULL);    // x <- x*Q
    quarot_rotation_apply_f32(&q, w, out, in, 0, NULL);    // reader W[out][in] <- W*Q
    quarot_rotation_free(&q);
    // a whole model: fill a quarot_model (config + tensor callbacks), then
    //   quarot_rotate_desc rd = {0}; quarot_rotate_model(&model, &rd);

TABLE OF CONTENTS (each marker opens a module in the declaration half and again in the implementation)
    >>config      version, linkage, configuration macros, includes
    >>result      quarot_result error codes and their strings
    >>env         allocator hooks and the optional parallel-for hook
    >>rng         seeded random numbers identical on every platform (xoshiro256**)
    >>tensor      ggml-style tensor view (ne[] counts, nb[] byte strides), f16/bf16 conversion
    >>simd        which instruction sets were compiled in; per-call ISA selection
    >>hadamard    Hadamard matrices: Sylvester, Paley I/II over GF(p^k), Kronecker, embedded tables
    >>hadtables   (implementation only) bit-packed tables for orders no construction reaches
    >>transform   fast Walsh-Hadamard and Kronecker (H_K (x) H_2^m) transforms, batched, in place
    >>transform_simd  SSE2 / AVX2 / AVX-512 / NEON kernels of the transforms, bit-identical to _ref
    >>gemm        blocked SGEMM / DGEMM (or CBLAS under QUAROT_USE_CBLAS)
    >>linalg      Householder QR, random orthogonal matrices, Newton-Schulz polar factor
    >>quant       fake quantization and integer quantization, error metrics
    >>rotation    an orthogonal matrix Q of size n (Hadamard, block-diagonal, random, given) applied to rows
    >>model       architecture config and tensor-access callbacks (layer-wise acquire / release)
    >>adapter     per-family description: fusion map, bake names, rotation pairs, head geometry
    >>command     rotate commands: plain data generated from the adapter, executed exactly once
    >>online      online-rotation hook IR, quarot_online_apply, versioned text serialization
    >>processor   pre_run / per decoder layer / post_run; quarot_rotate_model
    >>adapt       Adapt Rotation: activation capture, Newton-Schulz optimizer, stage-1 context

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

SIMD AND DETERMINISM
    The instruction set is chosen at compile time from the compiler's macros (__SSE2__, __AVX2__,
    __AVX512F__, __ARM_NEON). Every kernel has a scalar `_ref` version that is the specification;
    Hadamard transforms, sign flips, scaling and format conversions are bit-identical to `_ref` on every
    ISA (adds and subtracts only, FMA contraction switched off inside the implementation). Reductions
    (GEMM, polar factor, QR) state a tolerance instead. Random numbers come from xoshiro256** seeded by
    splitmix64, and normal deviates use a libm-free logarithm, so a seed gives the same rotation on
    every platform and compiler.

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
// Run fn(arg, i) for i in [0, n) through env's parallel hook, or serially when there is none.
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
// f16 subnormals are produced and read exactly.
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

// >>hadamard
// Hadamard matrices H (entries +-1, H*H^T = n*I) of order n. Orders available: 1, 2 and multiples of 4
// reachable as products (Kronecker) of
//   - Sylvester 2^k,
//   - Paley I, q+1 for a prime power q = 3 (mod 4), and Paley II, 2(q+1) for q = 1 (mod 4), using
//     GF(p^k) arithmetic for prime powers (28 = 27+1, 52 = 2*(25+1)),
//   - embedded tables (92, 116, 156, 172, 188, 236, 428 and other block-circulant orders).
// Every multiple of 4 up to 256 is available. A matrix of order n is built as H_K (x) H_{2^m} with
// n = K*2^m and K the smallest available order that leaves a power of two (K = 1 for n = 2^m), so the
// fast transform costs n*m + K*n adds.
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
    int64_t a, b;                           // KRONECKER: K = a*b
    char text[64];                          // e.g. "172 (table) x 2^6", "28 (paley1 q=27) x 2^9"
} quarot_hadamard_info;

// 1 if a Hadamard matrix of order n is available, else 0 (also for n <= 0). Never allocates.
QUAROT_API int quarot_hadamard_available(int64_t n);
// Describe the construction for order n; QUAROT_ERR_UNSUPPORTED_SIZE (info->construction = NONE,
// text says why) when none is available.
QUAROT_API quarot_result quarot_hadamard_info_get(int64_t n, quarot_hadamard_info* info);
// The largest available order b <= max_block that divides n (for block-diagonal fallbacks);
// 1 if none larger.
QUAROT_API int64_t quarot_hadamard_largest_block(int64_t n, int64_t max_block);
// Build H_n as [n][n] row-major +-1 (out has n*n entries). Temporary memory (GF(q) tables, at most
// O(n)) comes from env. QUAROT_ERR_UNSUPPORTED_SIZE if unavailable, QUAROT_ERR_OVERFLOW if n*n
// does not fit in size_t.
QUAROT_API quarot_result quarot_hadamard_build_i8(int64_t n, int8_t* out, const quarot_env* env);
// The same as float / double, divided by sqrt(n) when normalized != 0 (then orthogonal).
QUAROT_API quarot_result quarot_hadamard_build_f32(int64_t n, int normalized, float* out, const quarot_env* env);
QUAROT_API quarot_result quarot_hadamard_build_f64(int64_t n, int normalized, double* out, const quarot_env* env);

// >>hadtables
// (no declarations: the embedded tables are private to the implementation)

// >>transform
// Fast Hadamard transforms on rows of floats, in place. A row x (length n) is a row vector:
//     x <- x * H_n / sqrt(n)    (normalized, the default)
// with H_n = H_K (x) H_{2^m} (Kronecker, row index of H_n = i*2^m + j): view x as [K][2^m], run the
// Walsh-Hadamard butterflies along each 2^m row (stages h = 1, 2, 4, ... in that order), then mix the
// K rows with H_K^T (y[i] = sum_k H_K[k][i] * z[k], k ascending). The SIMD kernels follow exactly this
// operation order, so every ISA is bit-identical to _ref for every input without NaNs (a NaN input
// gives NaN outputs; which NaN payload survives is not specified).
//
// Exact operation order (the specification every kernel follows):
//   1. pre-signs   x[i] = x[i] * s[i]                 (forward with signs)
//   2. butterflies for h = 1, 2, 4, ..., 2^m/2 along each 2^m row: (a, b) <- (a + b, a - b)
//   3. mixing (K > 1): acc = c(0,i) * z[0][j]; acc = acc + c(k,i) * z[k][j] for k = 1 .. K-1, with
//      c(k,i) = H_K[k][i] (forward) or H_K[i][k] (transpose) as +-1.0; the first term is the signed
//      copy of z[0][j] (never 0 + ...), so signed zeros come out the same on every ISA
//   4. post-signs  x[i] = x[i] * s[i]                 (transpose with signs)
//   5. scaling     x[i] = x[i] * (float)(1/sqrt(n))   (1/sqrt(n) computed in double; f64: in double)

// Unnormalized Walsh-Hadamard transform of `rows` rows of length n (a power of two, n >= 1), rows
// `stride` elements apart (stride >= n). x <- x * H_n (Sylvester; H_n is symmetric). n not a power of
// two -> QUAROT_ERR_INVALID_ARGUMENT; an ISA not compiled in -> QUAROT_ERR_UNSUPPORTED. rows == 0 is
// a no-op. The f64 version is scalar.
QUAROT_API quarot_result quarot_fwht_f32(float* x, int64_t n, int64_t rows, int64_t stride, quarot_isa isa);
QUAROT_API quarot_result quarot_fwht_f64(double* x, int64_t n, int64_t rows, int64_t stride);

// A transform of length n = K*2^m: owns H_K (built once, K*K bytes) and, for the SIMD kernels, the
// mixing coefficients as floats in panels of 16 outputs: mix_f32[o][p][k][l] = c_o(k, 16p + l) for
// o = 0 (forward, H_K[k][i]) and o = 1 (transpose, H_K[i][k]), p < K16/16 with K16 = K rounded up to
// a multiple of 64, zero where 16p + l >= K (2 * K16 * K floats).
typedef struct quarot_hadamard_plan {
    int64_t n, K;
    int m;
    int8_t* had_k;                 // [K][K] +-1, NULL when K == 1
    float* mix_f32;                // [2][K16/16][K][16], NULL when K == 1
    quarot_hadamard_info info;
    quarot_env env;                // copy of the env used to allocate had_k and mix_f32
} quarot_hadamard_plan;

// Per-call options; zero-init (or d == NULL) = normalized, no signs, forward, best ISA.
typedef struct quarot_hadamard_apply_desc {
    const float* signs;            // [n] of +-1: random Hadamard Q = D*H/sqrt(n), D = diag(signs); NULL = none
    const double* signs_f64;       // the same for the f64 entry point (which falls back to `signs`);
                                   // the f32 entry point rejects signs_f64 without signs
    int unnormalized;              // 1: skip the 1/sqrt(n) scaling pass
    int transpose;                 // 1: x <- x * Q^T = (x * H^T) * D / sqrt(n) (the inverse of Q)
    quarot_isa isa;                // f32 only; the f64 path is scalar
} quarot_hadamard_apply_desc;

// Build the plan for order n: QUAROT_ERR_UNSUPPORTED_SIZE when no Hadamard matrix of order n is
// available (quarot_hadamard_available), QUAROT_ERR_OUT_OF_MEMORY, QUAROT_ERR_OVERFLOW. On failure
// *p is left zeroed (plan_free on it is harmless).
QUAROT_API quarot_result quarot_hadamard_plan_init(quarot_hadamard_plan* p, int64_t n, const quarot_env* env);
QUAROT_API void          quarot_hadamard_plan_free(quarot_hadamard_plan* p);
// Workspace bytes one apply call needs (0 for powers of two); independent of the row count, the same
// for f32 and f64 (n doubles plus 64 bytes of alignment slack when K > 1).
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

// >>transform_simd
// (no declarations: the SSE2 / AVX2 / AVX-512 / NEON kernels are private and chosen by quarot_isa)

// >>gemm
// C = alpha * op(A) * op(B) + beta * C, all row-major; op(A) is [m][k], op(B) is [k][n], C is [m][n];
// lda/ldb/ldc are row strides in elements. trans_a != 0: A is stored [k][m] (op(A) = A^T); likewise B.
// beta == 0 ignores C's old contents (NaN included). Cache-blocked with SIMD micro-kernels; under
// QUAROT_USE_CBLAS these call cblas_*gemm. Packing buffers come from env (QUAROT_ERR_OUT_OF_MEMORY);
// env's parallel hook splits the work over column/row panels. Results match a double-precision
// reference within k * 2^-23 * max|a|*max|b| (float), k * 2^-52 * ... (double).
QUAROT_API quarot_result quarot_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                      float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                                      float beta, float* c, int64_t ldc, const quarot_env* env);
QUAROT_API quarot_result quarot_dgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                      double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                                      double beta, double* c, int64_t ldc, const quarot_env* env);
// The built-in kernels even under QUAROT_USE_CBLAS (for tests and benchmarks).
QUAROT_API quarot_result quarot_sgemm_builtin(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                              float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                                              float beta, float* c, int64_t ldc, const quarot_env* env);
QUAROT_API quarot_result quarot_dgemm_builtin(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                              double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                                              double beta, double* c, int64_t ldc, const quarot_env* env);

// >>linalg
// Householder QR of A [m][n] (m >= n), row-major with row stride lda: on return A holds R in its
// upper triangle; q (if not NULL) receives the thin Q [m][n] (row stride ldq).
QUAROT_API quarot_result quarot_qr_f64(int64_t m, int64_t n, double* a, int64_t lda,
                                       double* q, int64_t ldq, const quarot_env* env);
// Haar-distributed random orthogonal Q [n][n] from a seed: G Gaussian, G = QR, Q <- Q*diag(sign(diag R)).
QUAROT_API quarot_result quarot_random_orthogonal_f64(int64_t n, uint64_t seed, double* q, int64_t ldq,
                                                      const quarot_env* env);

// Orthogonal polar factor U of a square C (C = U*P, U orthogonal, P symmetric positive semidefinite),
// by Newton-Schulz: X0 = C/s, X <- X*(3I - X^T X)/2 until the residual max|X^T X - I| <= tol.
// s = ||C||_F by default (so every singular value starts in (0, 1]). Singular values that are 0
// (rank-deficient C) cannot converge: the call then returns QUAROT_ERR_NOT_CONVERGED after max_iter
// iterations with U holding the last iterate; regularize (C + eps*I) first when C may be singular.
typedef struct quarot_polar_desc {   // zero-init = defaults
    int max_iter;                    // 0 = 100
    double tol;                      // 0 = 1e-6 (f64) or 2e-6 (f32); max-abs entry of X^T X - I
    double scale;                    // 0 = Frobenius norm of C; otherwise X0 = C / scale
} quarot_polar_desc;

typedef struct quarot_polar_info {
    int iterations;                  // iterations used
    double residual;                 // max|U^T U - I| at the end
    double scale;                    // the s actually used
} quarot_polar_info;

// C and U are [n][n] with row strides ldc, ldu (U may alias C). NaN/Inf in C -> QUAROT_ERR_NONFINITE;
// C == 0 -> QUAROT_ERR_INVALID_ARGUMENT. info may be NULL.
QUAROT_API quarot_result quarot_polar_newton_schulz_f64(int64_t n, const double* c, int64_t ldc,
                                                        double* u, int64_t ldu, const quarot_polar_desc* d,
                                                        quarot_polar_info* info, const quarot_env* env);
QUAROT_API quarot_result quarot_polar_newton_schulz_f32(int64_t n, const float* c, int64_t ldc,
                                                        float* u, int64_t ldu, const quarot_polar_desc* d,
                                                        quarot_polar_info* info, const quarot_env* env);

// >>quant
// Uniform quantizers (ALGORITHMS.md section 4). Rows are quantization units: per-token activations
// [tokens][features] and per-output-channel weights W[out][in] are both "per row"; group_size splits
// each row into groups along the row. Rounding is round-half-to-even.
//   symmetric, b bits:  m = clip*max|x|, s = m/(2^(b-1)-1) (s = 1 when m == 0),
//                       q = clamp(round(x/s), -2^(b-1), 2^(b-1)-1), x^ = q*s
//   asymmetric:         lo = clip*min(x,0), hi = clip*max(x,0), s = (hi-lo)/(2^b-1) (1 when 0),
//                       z = round(-lo/s), q = clamp(round(x/s)+z, 0, 2^b-1), x^ = (q-z)*s
typedef struct quarot_quant_desc {   // zero-init = 4-bit symmetric per row, clip 1.0
    int bits;                        // 2..8; 0 = 4
    int asymmetric;                  // 0 symmetric, 1 asymmetric (zero point)
    int64_t group_size;              // 0 = whole row; otherwise must divide cols
    float clip_ratio;                // (0, 1]; 0 = 1.0
    int clip_search;                 // 1: per group, try clip ratios 1.0, 0.99, ..., 0.5 and keep the
                                     //    one with the smallest squared error (weights, RTN)
} quarot_quant_desc;

// x[rows][stride], first cols of each row: x <- dequant(quant(x)) in place.
QUAROT_API quarot_result quarot_fake_quant_f32(float* x, int64_t rows, int64_t cols, int64_t stride,
                                               const quarot_quant_desc* d);
// Integer form for engines: q[rows][cols] codes, scales/zeros [rows][cols/group] (zeros may be NULL
// when symmetric). Asymmetric codes are stored zero-centred in int8 (q - 2^(b-1)), with the zero point
// likewise shifted, so x^ = (q - zero) * scale in both cases.
QUAROT_API quarot_result quarot_quantize_f32(const float* x, int64_t rows, int64_t cols, int64_t stride,
                                             const quarot_quant_desc* d, int8_t* q, float* scales, float* zeros);
QUAROT_API quarot_result quarot_dequantize_f32(const int8_t* q, const float* scales, const float* zeros,
                                               int64_t rows, int64_t cols, const quarot_quant_desc* d,
                                               float* x, int64_t stride);
// Error metrics over n elements (double accumulation).
QUAROT_API double quarot_mse_f32(const float* a, const float* b, int64_t n);
QUAROT_API double quarot_max_abs_diff_f32(const float* a, const float* b, int64_t n);

// >>rotation
// (declarations follow in the pipeline work)

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
} quarot_model_config;

// >>adapter
// >>command
// >>online
// >>processor
// >>adapt

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

// QUAROT__PRIVATE marks private helpers that some configurations (e.g. QUAROT_NO_SIMD) do not call.
#if defined(__GNUC__) || defined(__clang__)
  #define QUAROT__PRIVATE static __attribute__((unused))
#else
  #define QUAROT__PRIVATE static
#endif
#if defined(__GNUC__) || defined(__clang__)
  #define QUAROT__RESTRICT __restrict__
  #define QUAROT__LIKELY(x) __builtin_expect(!!(x), 1)
#elif defined(_MSC_VER)
  #define QUAROT__RESTRICT __restrict
  #define QUAROT__LIKELY(x) (x)
#else
  #define QUAROT__RESTRICT
  #define QUAROT__LIKELY(x) (x)
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
    if (n <= 0) return;
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
    uint64_t* s = rng->s;
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
    for (i = 0; i < n; ++i) out[i] = (quarot_rng_u64(rng) >> 63) ? -1.0f : 1.0f;
}

// >>tensor
// (implementation: tensor/quant work)

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

// >>hadamard
// (implementation: hadamard work)

// >>hadtables
// (implementation: hadamard work)

// >>transform
// H_n = H_K (x) H_{2^m}: for a row x viewed as z[K][M] (M = 2^m), x*H_n = mix_K(fwht_M(z)) where
//   fwht_M:  for h = 1, 2, ..., M/2: for each pair (j, j+h) with bit h of j clear: (a, b) <- (a+b, a-b)
//   mix_K:   y[i][j] = sum_k c(k, i) * z[k][j], k ascending, c = H_K (forward) or H_K^T (transpose)
// then post-signs and the 1/sqrt(n) scale as separate multiplies. The _ref functions below are the
// specification; >>transform_simd holds the SIMD kernels and the per-ISA selection.

// Kernel signatures shared by every ISA. A row kernel transforms one row of 2^L floats in place:
// x *= pre (if not NULL), butterflies, x *= post (if not NULL), x *= *scale (if not NULL).
typedef void (*quarot__wht_row_fn)(float* x, int L, const float* pre, const float* post, const float* scale);
// A mixing kernel: y[K][M] = mix of z[K][M] with the coefficient panels of one orientation
// (plan->mix_f32 + o * K16 * K), then post-signs and scale; z and y do not overlap.
typedef void (*quarot__mix_fn)(const float* z, float* y, int64_t K, int64_t M, const float* coef,
                               const float* post, const float* scale);
static quarot__wht_row_fn quarot__wht_row_select(quarot_isa isa);   // in >>transform_simd
static quarot__mix_fn quarot__mix_select(quarot_isa isa);            // NULL for QUAROT_ISA_REF

// The specification: one row of n = 2^L floats.
static void quarot__wht_row_f32_ref(float* x, int L, const float* pre, const float* post, const float* scale) {
    const int64_t n = (int64_t)1 << L;
    int64_t h, i, j;
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

// The mixing specification: y[i][j] = sum_k c(k,i) z[k][j] with c from the +-1 bytes of H_K.
static void quarot__mix_f32_ref(const float* z, float* y, int64_t K, int64_t M, const int8_t* had, int transpose,
                                const float* post, const float* scale) {
    int64_t i, j, k;
    for (i = 0; i < K; ++i) {
        for (j = 0; j < M; ++j) {
            float acc = (float)had[transpose ? i * K : i] * z[j];
            for (k = 1; k < K; ++k)
                acc = acc + (float)had[transpose ? i * K + k : k * K + i] * z[k * M + j];
            y[i * M + j] = acc;
        }
    }
    if (post) for (i = 0; i < K * M; ++i) y[i] = y[i] * post[i];
    if (scale) for (i = 0; i < K * M; ++i) y[i] = y[i] * *scale;
}

static void quarot__mix_f64_ref(const double* z, double* y, int64_t K, int64_t M, const int8_t* had, int transpose,
                                const double* post, const float* post_f32, const double* scale) {
    int64_t i, j, k;
    for (i = 0; i < K; ++i) {
        for (j = 0; j < M; ++j) {
            double acc = (double)had[transpose ? i * K : i] * z[j];
            for (k = 1; k < K; ++k)
                acc = acc + (double)had[transpose ? i * K + k : k * K + i] * z[k * M + j];
            y[i * M + j] = acc;
        }
    }
    if (post) for (i = 0; i < K * M; ++i) y[i] = y[i] * post[i];
    if (post_f32) for (i = 0; i < K * M; ++i) y[i] = y[i] * (double)post_f32[i];
    if (scale) for (i = 0; i < K * M; ++i) y[i] = y[i] * *scale;
}

// log2(n) for a power of two n >= 1, else -1.
static int quarot__log2_exact(int64_t n) {
    int L = 0;
    if (n <= 0 || (n & (n - 1)) != 0) return -1;
    while (((int64_t)1 << L) < n) ++L;
    return L;
}

// Shared checks of the batched entry points: x [rows][stride] with n used per row, elem bytes each.
static quarot_result quarot__rows_check(const void* x, int64_t n, int64_t rows, int64_t stride, size_t elem) {
    if (!x || n <= 0 || rows < 0 || stride < n) return QUAROT_ERR_INVALID_ARGUMENT;
    if (rows > 0 && (rows - 1) > (INT64_MAX / (int64_t)elem - n) / stride) return QUAROT_ERR_OVERFLOW;
    return QUAROT_OK;
}

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
    for (i = 0; i < rows; ++i) fn(x + i * stride, L, NULL, NULL, NULL);
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_fwht_f64(double* x, int64_t n, int64_t rows, int64_t stride) {
    quarot_result r = quarot__rows_check(x, n, rows, stride, sizeof(double));
    int L = quarot__log2_exact(n);
    int64_t i;
    if (r != QUAROT_OK) return r;
    if (L < 0) return QUAROT_ERR_INVALID_ARGUMENT;
    for (i = 0; i < rows; ++i) quarot__wht_row_f64_ref(x + i * stride, L, NULL, NULL, NULL, NULL, NULL);
    return QUAROT_OK;
}

QUAROT_API void quarot_hadamard_plan_free(quarot_hadamard_plan* p) {
    if (!p) return;
    quarot_env_free(&p->env, p->had_k);
    quarot_env_free(&p->env, p->mix_f32);
    memset(p, 0, sizeof *p);
}

QUAROT_API quarot_result quarot_hadamard_plan_init(quarot_hadamard_plan* p, int64_t n, const quarot_env* env) {
    quarot_result r;
    int64_t K, K16, i, k;
    size_t kk, nmix;
    if (!p) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    if (env) p->env = *env;
    if (n <= 0) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot_hadamard_info_get(n, &p->info);
    if (r != QUAROT_OK) { memset(p, 0, sizeof *p); return r; }
    K = p->info.K;
    if (K < 1 || p->info.m < 0 || p->info.m > 62 || ((int64_t)1 << p->info.m) > n / K ||
        K * ((int64_t)1 << p->info.m) != n) {
        memset(p, 0, sizeof *p);
        return QUAROT_ERR_INTERNAL;
    }
    p->n = n;
    p->K = K;
    p->m = p->info.m;
    if (K == 1) return QUAROT_OK;
    // H_K as bytes (the _ref and f64 kernels) and as float panels (the SIMD mixing kernels).
    K16 = (K + 63) / 64 * 64;
    if (!quarot__mul_size((size_t)K, (size_t)K, &kk) || !quarot__mul_size((size_t)K16, (size_t)K, &nmix) ||
        !quarot__mul_size(nmix, 2 * sizeof(float), &nmix)) {
        quarot_hadamard_plan_free(p);
        return QUAROT_ERR_OVERFLOW;
    }
    p->had_k = (int8_t*)quarot_env_alloc(&p->env, kk);
    p->mix_f32 = (float*)quarot_env_alloc(&p->env, nmix);
    if (!p->had_k || !p->mix_f32) { quarot_hadamard_plan_free(p); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = quarot_hadamard_build_i8(K, p->had_k, &p->env);
    if (r != QUAROT_OK) { quarot_hadamard_plan_free(p); return r; }
    memset(p->mix_f32, 0, nmix);
    for (k = 0; k < K; ++k) {
        for (i = 0; i < K; ++i) {
            const int64_t at = (i / 16) * 16 * K + k * 16 + (i % 16);   // panel i/16, row k, lane i%16
            p->mix_f32[at] = (float)p->had_k[k * K + i];                 // forward: c(k,i) = H[k][i]
            p->mix_f32[K16 * K + at] = (float)p->had_k[i * K + k];       // transpose: c(k,i) = H[i][k]
        }
    }
    return QUAROT_OK;
}

QUAROT_API size_t quarot_hadamard_workspace_size(const quarot_hadamard_plan* p) {
    if (!p || p->K <= 1 || p->n <= 0) return 0;
    return (size_t)p->n * sizeof(double) + 64;
}

// Validation shared by the f32 and f64 entry points; *work_out is the 64-byte aligned workspace.
static quarot_result quarot__apply_check(const quarot_hadamard_plan* p, const void* x, int64_t rows, int64_t stride,
                                         size_t elem, void* work, size_t work_size, void** work_out) {
    quarot_result r;
    size_t need;
    if (!p || p->n <= 0 || p->K < 1 || (p->K > 1 && (!p->had_k || !p->mix_f32)))
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
    // Forward: x*D*H/sqrt(n) (signs before the butterflies); transpose: x*H^T*D/sqrt(n) (after).
    pre = dd.transpose ? NULL : dd.signs;
    post = dd.transpose ? dd.signs : NULL;
    s = (float)(1.0 / sqrt((double)p->n));
    scale = dd.unnormalized ? NULL : &s;
    if (p->K == 1) {
        for (i = 0; i < rows; ++i) row_fn(x + i * stride, p->m, pre, post, scale);
        return QUAROT_OK;
    }
    // K > 1: z = fwht_M(x * pre) in the workspace, then x = mix_K(z) * post * scale.
    M = (int64_t)1 << p->m;
    for (i = 0; i < rows; ++i) {
        float* xr = x + i * stride;
        float* z = (float*)w;
        memcpy(z, xr, (size_t)p->n * sizeof(float));
        for (k = 0; k < p->K; ++k) row_fn(z + k * M, p->m, pre ? pre + k * M : NULL, NULL, NULL);
        if (mix_fn) {
            const int64_t K16 = (p->K + 63) / 64 * 64;
            mix_fn(z, xr, p->K, M, p->mix_f32 + (dd.transpose ? K16 * p->K : 0), post, scale);
        } else {
            quarot__mix_f32_ref(z, xr, p->K, M, p->had_k, dd.transpose, post, scale);
        }
    }
    return QUAROT_OK;
}

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
    memset(&dd, 0, sizeof dd);
    if (d) dd = *d;
    r = quarot__apply_check(p, x, rows, stride, sizeof(double), work, work_size, &w);
    if (r != QUAROT_OK) return r;
    r = quarot__isa_resolve(dd.isa, &dd.isa);   // the path is scalar, but a bad isa is still an error
    if (r != QUAROT_OK) return r;
    // signs_f64 wins; otherwise the float signs are read exactly as doubles.
    if (dd.transpose) { post = dd.signs_f64; post32 = dd.signs_f64 ? NULL : dd.signs; }
    else { pre = dd.signs_f64; pre32 = dd.signs_f64 ? NULL : dd.signs; }
    s = 1.0 / sqrt((double)p->n);
    scale = dd.unnormalized ? NULL : &s;
    if (p->K == 1) {
        for (i = 0; i < rows; ++i) quarot__wht_row_f64_ref(x + i * stride, p->m, pre, pre32, post, post32, scale);
        return QUAROT_OK;
    }
    M = (int64_t)1 << p->m;
    for (i = 0; i < rows; ++i) {
        double* xr = x + i * stride;
        double* z = (double*)w;
        memcpy(z, xr, (size_t)p->n * sizeof(double));
        for (k = 0; k < p->K; ++k)
            quarot__wht_row_f64_ref(z + k * M, p->m, pre ? pre + k * M : NULL, pre32 ? pre32 + k * M : NULL,
                                    NULL, NULL, NULL);
        quarot__mix_f64_ref(z, xr, p->K, M, p->had_k, dd.transpose, post, post32, scale);
    }
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
#define QUAROT__BF(a, b) { QUAROT__V t_ = (a); (a) = QUAROT__VADD(t_, (b)); (b) = QUAROT__VSUB(t_, (b)); }
#define QUAROT__NET2(a0, a1) QUAROT__BF(a0, a1)
#define QUAROT__NET4(a0, a1, a2, a3) QUAROT__NET2(a0, a1) QUAROT__NET2(a2, a3) QUAROT__BF(a0, a2) QUAROT__BF(a1, a3)
#define QUAROT__NET8(a0, a1, a2, a3, a4, a5, a6, a7)                                   \
    QUAROT__NET4(a0, a1, a2, a3) QUAROT__NET4(a4, a5, a6, a7)                          \
    QUAROT__BF(a0, a4) QUAROT__BF(a1, a5) QUAROT__BF(a2, a6) QUAROT__BF(a3, a7)
#define QUAROT__NET16(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
    QUAROT__NET8(a0, a1, a2, a3, a4, a5, a6, a7) QUAROT__NET8(a8, a9, a10, a11, a12, a13, a14, a15) \
    QUAROT__BF(a0, a8) QUAROT__BF(a1, a9) QUAROT__BF(a2, a10) QUAROT__BF(a3, a11)       \
    QUAROT__BF(a4, a12) QUAROT__BF(a5, a13) QUAROT__BF(a6, a14) QUAROT__BF(a7, a15)
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
#define QUAROT__LDQ(t) v##t = QUAROT__VLD(p + t * h); if (q) v##t = QUAROT__VMUL(v##t, QUAROT__VLD(q + t * h));
#define QUAROT__INL(t) v##t = QUAROT__VINLANE(v##t);
#define QUAROT__STQ(t) { QUAROT__V o_ = v##t;                                           \
    if (q) o_ = QUAROT__VMUL(o_, QUAROT__VLD(q + t * h));                                \
    if (scale) o_ = QUAROT__VMUL(o_, sv);                                                \
    QUAROT__VST(p + t * h, o_); }
// One block or pass of 2^r registers: load, [in-lane], network, store.
#define QUAROT__RADIX(N, INLANE) { QUAROT__V QUAROT__V##N;                              \
    q = pre; QUAROT__REP##N(QUAROT__LDQ) INLANE(QUAROT__REP##N(QUAROT__INL))              \
    QUAROT__EXPAND(QUAROT__NET##N, (QUAROT__V##N)) q = post; QUAROT__REP##N(QUAROT__STQ) }
#define QUAROT__WITH(x) x
#define QUAROT__WITHOUT(x)
#define QUAROT__NET1(a0)

// The FWHT kernels of one ISA: quarot__wht_blk_f32_<isa> (the W*2^lv floats at p, all in registers),
// quarot__wht_pass_f32_<isa> (stages h, 2h, .., h*2^(r-1) over a region of len floats) and the row
// driver quarot__wht_row_f32_<isa>. Rows shorter than W go to _ref.
#define QUAROT__WHT_DEFINE(isa)                                                                  \
static void quarot__wht_blk_f32_##isa(float* p, int lv, const float* pre, const float* post,     \
                                       const float* scale) {                                     \
    const int64_t h = QUAROT__W;                                                                 \
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);                                   \
    const float* q;                                                                              \
    switch (lv) {                                                                                \
        case 0: QUAROT__RADIX(1, QUAROT__WITH) break;                                            \
        case 1: QUAROT__RADIX(2, QUAROT__WITH) break;                                            \
        case 2: QUAROT__RADIX(4, QUAROT__WITH) break;                                            \
        case 3: QUAROT__RADIX(8, QUAROT__WITH) break;                                            \
        default: QUAROT__RADIX(16, QUAROT__WITH) break;                                          \
    }                                                                                            \
}                                                                                                \
static void quarot__wht_pass_f32_##isa(float* x, int64_t len, int64_t h, int r, const float* post_row, \
                                        const float* scale) {                                    \
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);                                   \
    const float* pre = NULL;                                                                     \
    const float *post, *q;                                                                       \
    int64_t base, c;                                                                             \
    for (base = 0; base < len; base += h << r) {                                                 \
        for (c = 0; c < h; c += QUAROT__W) {                                                     \
            float* p = x + base + c;                                                             \
            post = post_row ? post_row + base + c : NULL;                                        \
            switch (r) {                                                                         \
                case 1: QUAROT__RADIX(2, QUAROT__WITHOUT) break;                                 \
                case 2: QUAROT__RADIX(4, QUAROT__WITHOUT) break;                                 \
                case 3: QUAROT__RADIX(8, QUAROT__WITHOUT) break;                                 \
                default: QUAROT__RADIX(16, QUAROT__WITHOUT) break;                               \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
}                                                                                                \
/* Row driver. Bits LOGW .. lc-1 are done per L1-sized chunk of 2^lc floats (first group in       \
   registers with the in-lane stages, then passes over the chunk), bits lc .. L-1 in passes over   \
   the whole row. Groups are as even as can be (a radix-2 pass is bound by its loads and stores), \
   at most LOGR bits, and at most 3 bits in the whole-row passes, whose 2^r loads are 4 KiB or    \
   more apart and share one L1 set (8 ways). lc minimizes the number of passes. */               \
static void quarot__wht_row_f32_##isa(float* x, int L, const float* pre, const float* post,     \
                                       const float* scale) {                                     \
    int g[64], ng = 0, nc, i, lc, best = 1 << 30, lo, C, T;                                      \
    int64_t c0, b0;                                                                              \
    if (L < QUAROT__LOGW) { quarot__wht_row_f32_ref(x, L, pre, post, scale); return; }           \
    if (L - QUAROT__LOGW <= QUAROT__LOGR) {                                                      \
        quarot__wht_blk_f32_##isa(x, L - QUAROT__LOGW, pre, post, scale);                        \
        return;                                                                                  \
    }                                                                                            \
    for (i = L < QUAROT__WHT_LCHUNK ? L : QUAROT__WHT_LCHUNK, lc = i; i > QUAROT__LOGW; --i) {    \
        const int np = (i - QUAROT__LOGW + QUAROT__LOGR - 1) / QUAROT__LOGR + (L - i + 2) / 3;   \
        if (L - i != 1 && np < best) { best = np; lc = i; }                                      \
    }                                                                                            \
    C = lc - QUAROT__LOGW; T = L - lc;                                                           \
    nc = (C + QUAROT__LOGR - 1) / QUAROT__LOGR;                                                  \
    for (i = 0; i < nc; ++i) g[ng++] = C / nc + (i < C % nc ? 1 : 0);                            \
    for (i = 0; i < (T + 2) / 3; ++i) g[ng++] = T / ((T + 2) / 3) + (i < T % ((T + 2) / 3) ? 1 : 0); \
    for (c0 = 0; c0 < ((int64_t)1 << L); c0 += (int64_t)1 << lc) {                               \
        const int last = T == 0;                                                                 \
        for (b0 = 0; b0 < ((int64_t)1 << lc); b0 += (int64_t)1 << (QUAROT__LOGW + g[0]))         \
            quarot__wht_blk_f32_##isa(x + c0 + b0, g[0], pre ? pre + c0 + b0 : NULL, NULL, NULL); \
        for (i = 1, lo = QUAROT__LOGW + g[0]; i < nc; lo += g[i++])                              \
            quarot__wht_pass_f32_##isa(x + c0, (int64_t)1 << lc, (int64_t)1 << lo, g[i],         \
                                       last && i == nc - 1 ? post : NULL, last && i == nc - 1 ? scale : NULL); \
    }                                                                                            \
    for (i = nc, lo = lc; i < ng; lo += g[i++])                                                  \
        quarot__wht_pass_f32_##isa(x, (int64_t)1 << L, (int64_t)1 << lo, g[i],                   \
                                   i == ng - 1 ? post : NULL, i == ng - 1 ? scale : NULL);       \
}

// log2 of the chunk the row driver finishes in L1 before the passes over the whole row (16 KiB).
#define QUAROT__WHT_LCHUNK 12

// Mixing kernels of one ISA. M >= W: vectors along j, RI outputs i at a time (RI = 4 or 8 through
// QUAROT__MIX_RI), two vectors of j (one when M == W); each k adds the broadcast coefficient times
// z[k][j..]. M < W: vectors along i (16 coefficients of a panel are contiguous), one j at a time,
// QUAROT__MIX_NB vectors (64 outputs, or 32 for 4 lanes) at a time, results scattered through a
// small buffer. Every output is one chain acc = c0*z0, acc = acc + ck*zk in k order, like _ref.
#define QUAROT__MA_INIT2(r) hv = QUAROT__VSET1(c[r]); a##r##_0 = QUAROT__VMUL(hv, z0); a##r##_1 = QUAROT__VMUL(hv, z1);
#define QUAROT__MA_STEP2(r) hv = QUAROT__VSET1(c[r]);                                           \
    a##r##_0 = QUAROT__VADD(a##r##_0, QUAROT__VMUL(hv, z0)); a##r##_1 = QUAROT__VADD(a##r##_1, QUAROT__VMUL(hv, z1));
#define QUAROT__MA_INIT1(r) a##r##_0 = QUAROT__VMUL(QUAROT__VSET1(c[r]), z0);
#define QUAROT__MA_STEP1(r) a##r##_0 = QUAROT__VADD(a##r##_0, QUAROT__VMUL(QUAROT__VSET1(c[r]), z0));
#define QUAROT__MA_DECL2(r) QUAROT__V a##r##_0, a##r##_1;
#define QUAROT__MA_DECL1(r) QUAROT__V a##r##_0;
#define QUAROT__MA_OUT(o, acc) { QUAROT__V o_ = (acc);                                       \
    if (post) o_ = QUAROT__VMUL(o_, QUAROT__VLD(post + ((o) - y)));                             \
    if (scale) o_ = QUAROT__VMUL(o_, sv);                                                         \
    QUAROT__VST(o, o_); }
#define QUAROT__MA_STORE2(r) if (i0 + r < K) { float* o = y + (i0 + r) * M + j0;                 \
    QUAROT__MA_OUT(o, a##r##_0) QUAROT__MA_OUT(o + QUAROT__W, a##r##_1) }
#define QUAROT__MA_STORE1(r) if (i0 + r < K) { float* o = y + (i0 + r) * M + j0; QUAROT__MA_OUT(o, a##r##_0) }
#define QUAROT__MB_DECL(t) QUAROT__V b##t; const float* c##t = c + ((t * QUAROT__W) >> 4) * 16 * K + ((t * QUAROT__W) & 15);
#define QUAROT__MB_INIT(t) b##t = QUAROT__VMUL(QUAROT__VLD(c##t), zb);
#define QUAROT__MB_STEP(t) b##t = QUAROT__VADD(b##t, QUAROT__VMUL(QUAROT__VLD(c##t + k * 16), zb));
#define QUAROT__MB_STORE(t) { int64_t l_; QUAROT__VST(buf, b##t);                               \
    for (l_ = 0; l_ < QUAROT__W && i0 + t * QUAROT__W + l_ < K; ++l_) {                            \
        const int64_t at = (i0 + t * QUAROT__W + l_) * M + j;                                     \
        float o_ = buf[l_];                                                                       \
        if (post) o_ = o_ * post[at];                                                             \
        if (scale) o_ = o_ * *scale;                                                              \
        y[at] = o_; } }

#define QUAROT__MIX_DEFINE(isa)                                                                  \
static void quarot__mix_f32_##isa(const float* z, float* y, int64_t K, int64_t M, const float* coef, \
                                   const float* post, const float* scale) {                      \
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);                                   \
    int64_t i0, j0, j, k;                                                                        \
    if (M >= 2 * QUAROT__W) {                                                                    \
        for (j0 = 0; j0 < M; j0 += 2 * QUAROT__W) {                                              \
            for (i0 = 0; i0 < K; i0 += QUAROT__MIX_RI) {                                         \
                const float* c = coef + (i0 >> 4) * 16 * K + (i0 & 15);                          \
                const float* zk = z + j0;                                                        \
                QUAROT__V z0 = QUAROT__VLD(zk), z1 = QUAROT__VLD(zk + QUAROT__W), hv;            \
                QUAROT__MIX_REP(QUAROT__MA_DECL2)                                                \
                QUAROT__MIX_REP(QUAROT__MA_INIT2)                                                \
                for (k = 1; k < K; ++k) {                                                        \
                    c += 16; zk += M;                                                            \
                    z0 = QUAROT__VLD(zk); z1 = QUAROT__VLD(zk + QUAROT__W);                      \
                    QUAROT__MIX_REP(QUAROT__MA_STEP2)                                            \
                }                                                                                \
                QUAROT__MIX_REP(QUAROT__MA_STORE2)                                               \
            }                                                                                    \
        }                                                                                        \
    } else if (M == QUAROT__W) {                                                                 \
        for (i0 = 0, j0 = 0; i0 < K; i0 += QUAROT__MIX_RI) {                                     \
            const float* c = coef + (i0 >> 4) * 16 * K + (i0 & 15);                              \
            const float* zk = z;                                                                 \
            QUAROT__V z0 = QUAROT__VLD(zk);                                                      \
            QUAROT__MIX_REP(QUAROT__MA_DECL1)                                                    \
            QUAROT__MIX_REP(QUAROT__MA_INIT1)                                                    \
            for (k = 1; k < K; ++k) {                                                            \
                c += 16; zk += M;                                                                \
                z0 = QUAROT__VLD(zk);                                                            \
                QUAROT__MIX_REP(QUAROT__MA_STEP1)                                                \
            }                                                                                    \
            QUAROT__MIX_REP(QUAROT__MA_STORE1)                                                   \
        }                                                                                        \
    } else {                                                                                     \
        float buf[QUAROT__W];                                                                    \
        for (j = 0; j < M; ++j) {                                                                \
            for (i0 = 0; i0 < K; i0 += QUAROT__MIX_NB * QUAROT__W) {                             \
                const float* c = coef + (i0 >> 4) * 16 * K;                                      \
                QUAROT__V zb = QUAROT__VSET1(z[j]);                                              \
                QUAROT__MIX_BREP(QUAROT__MB_DECL)                                                \
                QUAROT__MIX_BREP(QUAROT__MB_INIT)                                                \
                for (k = 1; k < K; ++k) {                                                        \
                    zb = QUAROT__VSET1(z[k * M + j]);                                            \
                    QUAROT__MIX_BREP(QUAROT__MB_STEP)                                            \
                }                                                                                \
                QUAROT__MIX_BREP(QUAROT__MB_STORE)                                               \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
}

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
QUAROT__WHT_DEFINE(sse2)
QUAROT__MIX_DEFINE(sse2)
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
QUAROT__WHT_DEFINE(avx2)
QUAROT__MIX_DEFINE(avx2)
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
#define QUAROT__NEG_(v, m) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), m))
    v = _mm512_add_ps(QUAROT__NEG_(v, n1), _mm512_permute_ps(v, 0xB1));            // h = 1
    v = _mm512_add_ps(QUAROT__NEG_(v, n2), _mm512_permute_ps(v, 0x4E));            // h = 2
    v = _mm512_add_ps(QUAROT__NEG_(v, n4), _mm512_shuffle_f32x4(v, v, 0xB1));      // h = 4
    v = _mm512_add_ps(QUAROT__NEG_(v, n8), _mm512_shuffle_f32x4(v, v, 0x4E));      // h = 8
#undef QUAROT__NEG_
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
QUAROT__WHT_DEFINE(avx512)
QUAROT__MIX_DEFINE(avx512)
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
QUAROT__WHT_DEFINE(neon)
QUAROT__MIX_DEFINE(neon)
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

// >>gemm
// (implementation: gemm work)

// >>linalg
// (implementation: linalg work)

// >>quant
// (implementation: tensor/quant work)

// >>rotation
// >>model
// >>adapter
// >>command
// >>online
// >>processor
// >>adapt

#ifdef __cplusplus
}
#endif

#if defined(__clang__)
  #pragma STDC FP_CONTRACT DEFAULT
#elif defined(__GNUC__)
  #pragma GCC pop_options
#endif

#endif // QUAROT_IMPLEMENTATION

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
