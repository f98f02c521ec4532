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
// operation order, so every ISA is bit-identical to _ref.

// Unnormalized Walsh-Hadamard transform of `rows` rows of length n (a power of two, n >= 1), rows
// `stride` elements apart (stride >= n). x <- x * H_n (Sylvester; H_n is symmetric).
QUAROT_API quarot_result quarot_fwht_f32(float* x, int64_t n, int64_t rows, int64_t stride, quarot_isa isa);
QUAROT_API quarot_result quarot_fwht_f64(double* x, int64_t n, int64_t rows, int64_t stride);

// A transform of length n = K*2^m: owns H_K (built once, K*K bytes).
typedef struct quarot_hadamard_plan {
    int64_t n, K;
    int m;
    int8_t* had_k;                 // [K][K] +-1, NULL when K == 1
    quarot_hadamard_info info;
    quarot_env env;                // copy of the env used to allocate had_k
} quarot_hadamard_plan;

// Per-call options; zero-init = normalized, no signs, forward, best ISA.
typedef struct quarot_hadamard_apply_desc {
    const float* signs;            // [n] of +-1: random Hadamard Q = D*H/sqrt(n), D = diag(signs); NULL = none
    const double* signs_f64;       // the same for the f64 entry point
    int unnormalized;              // 1: skip the 1/sqrt(n) scaling pass
    int transpose;                 // 1: x <- x * Q^T = (x * H^T) * D / sqrt(n) (the inverse of Q)
    quarot_isa isa;
} quarot_hadamard_apply_desc;

QUAROT_API quarot_result quarot_hadamard_plan_init(quarot_hadamard_plan* p, int64_t n, const quarot_env* env);
QUAROT_API void          quarot_hadamard_plan_free(quarot_hadamard_plan* p);
// Workspace bytes one apply call needs (0 for powers of two); independent of the row count.
QUAROT_API size_t        quarot_hadamard_workspace_size(const quarot_hadamard_plan* p);
// x is [rows][stride]; the first n elements of each row are transformed. work may be NULL only when
// the workspace size is 0. Never allocates.
QUAROT_API quarot_result quarot_hadamard_apply_f32(const quarot_hadamard_plan* p, const quarot_hadamard_apply_desc* d,
                                                   float* x, int64_t rows, int64_t stride,
                                                   void* work, size_t work_size);
QUAROT_API quarot_result quarot_hadamard_apply_f64(const quarot_hadamard_plan* p, const quarot_hadamard_apply_desc* d,
                                                   double* x, int64_t rows, int64_t stride,
                                                   void* work, size_t work_size);

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
// Cost: two passes over each row (statistics, quantization); groups add one statistics pass.
typedef struct quarot_quant_desc {   // zero-init = 4-bit symmetric per row, clip 1.0
    int bits;                        // 2..8; 0 = 4
    int asymmetric;                  // 0 symmetric, 1 asymmetric (zero point)
    int64_t group_size;              // 0 = whole row; otherwise must divide cols
    float clip_ratio;                // (0, 1]; 0 = 1.0
    int clip_search;                 // 0 off, 1: per group, search c_k as above (weights, RTN)
    quarot_isa isa;                  // kernels: DEFAULT = best; SSE2, AVX2 (also used for AVX512)
                                     // and NEON exist besides REF; every one gives the same bits
} quarot_quant_desc;

// Errors shared by the quantizers: NULL data pointer, rows or cols < 0, stride < cols, bits outside
// 2..8, group_size < 0 or not dividing cols, clip_ratio outside (0, 1], asymmetric or clip_search not
// 0/1 -> QUAROT_ERR_INVALID_ARGUMENT; isa not compiled in -> QUAROT_ERR_UNSUPPORTED; rows*stride not
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
// Calibration statistics for GPTQ: h[in][in] += 2 * x^T x over x[rows][stride] (first `in` of each
// row), in double. Sums are formed in chunks of 8 rows (h[i][j] += 2x0i*x0j + ... + 2x7i*x7j, row
// order), then the rows % 8 left one at a time, so the bits depend on how rows are split between
// calls (not on the SIMD kernel). Only the upper triangle is accumulated, then mirrored into the
// lower one: h must be symmetric on entry (zeros, or earlier calls). GPTQ does not care about the
// scale of H (the reference implementation keeps the mean 2/N X^T X; this keeps the sum).
// Cost rows*in^2/2 multiply-adds, cache-tiled. NaN/Inf in x -> QUAROT_ERR_NONFINITE with h untouched;
// in or rows == 0: no-op; stride < in -> QUAROT_ERR_INVALID_ARGUMENT; in*in*8 > SIZE_MAX ->
// QUAROT_ERR_OVERFLOW.
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
// 32*(in + block + in/group) doubles and 32*in/group + in floats.
// Cost: in^3/3 multiply-adds (factor: in^3/6 each for Cholesky and inverse) + out*in^2/2 (updates),
// + 51 RTN per group with clip_search.
QUAROT_API quarot_result quarot_gptq_f32(float* w, int64_t out, int64_t in, int64_t stride,
                                         const double* h, int64_t h_n, const quarot_gptq_desc* d,
                                         int8_t* q, float* scales, float* zeros,
                                         quarot_gptq_info* info, const quarot_env* env);

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
    if (e == 0x1fu) return quarot__bits_to_f32(sign | 0x7f800000u | (m << 13));
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

// Round a double once to a binary format with exp_bits exponent and man_bits fraction bits.
static uint16_t quarot__f64_to_small(double x, int exp_bits, int man_bits) {
    uint64_t b;
    uint32_t sign, exp_all = (1u << exp_bits) - 1u;
    int bias = (1 << (exp_bits - 1)) - 1, e, ulp_exp;
    double a, m, fl, diff;
    uint64_t F;
    memcpy(&b, &x, 8);
    sign = (uint32_t)(b >> 63) << (exp_bits + man_bits);
    a = fabs(x);
    if (a != a) return (uint16_t)(sign | (exp_all << man_bits) | (1u << (man_bits - 1)));
    if (a > 1.7976931348623157e308) return (uint16_t)(sign | (exp_all << man_bits));
    if (a == 0.0 || ((b >> 52) & 0x7ffu) == 0) return (uint16_t)sign;   // zero or double subnormal
    e = (int)((b >> 52) & 0x7ffu) - 1023;
    ulp_exp = (e >= 1 - bias ? e : 1 - bias) - man_bits;
    if (e > bias + 1) return (uint16_t)(sign | (exp_all << man_bits));   // far beyond the max finite
    m = ldexp(a, -ulp_exp);                                              // exact: a power-of-two scaling
    fl = floor(m);
    diff = m - fl;
    F = (uint64_t)fl;
    if (diff > 0.5 || (diff == 0.5 && (F & 1u))) ++F;
    if (F >= (2ull << man_bits)) { F >>= 1; ++ulp_exp; }                // mantissa carried into a new binade
    if (F >= (1ull << man_bits)) {
        int biased = ulp_exp + man_bits + bias;
        if (biased >= (int)exp_all) return (uint16_t)(sign | (exp_all << man_bits));
        return (uint16_t)(sign | ((uint32_t)biased << man_bits) | (uint32_t)(F - (1ull << man_bits)));
    }
    return (uint16_t)(sign | (uint32_t)F);                               // subnormal (or 0)
}

QUAROT_API uint16_t quarot_f64_to_f16_1(double x) { return quarot__f64_to_small(x, 5, 10); }
QUAROT_API uint16_t quarot_f64_to_bf16_1(double x) { return quarot__f64_to_small(x, 8, 7); }

QUAROT_API void quarot_f32_to_f16(const float* in, uint16_t* out, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) out[i] = quarot__f32_to_f16_1(in[i]);
}
QUAROT_API void quarot_f16_to_f32(const uint16_t* in, float* out, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) out[i] = quarot__f16_to_f32_1(in[i]);
}
QUAROT_API void quarot_f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) out[i] = quarot__f32_to_bf16_1(in[i]);
}
QUAROT_API void quarot_bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) out[i] = quarot__bf16_to_f32_1(in[i]);
}

QUAROT_API quarot_result quarot_tensor_get_row_f32(const quarot_tensor* t, int64_t r, float* out) {
    const char* p = quarot__tensor_row(t, r);
    int64_t i, n;
    if (!p || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    n = t->ne[0];
    switch (t->dtype) {
        case QUAROT_DTYPE_F32: memcpy(out, p, (size_t)n * 4); break;
        case QUAROT_DTYPE_F16: for (i = 0; i < n; ++i) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = quarot__f16_to_f32_1(h); } break;
        case QUAROT_DTYPE_BF16: for (i = 0; i < n; ++i) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = quarot__bf16_to_f32_1(h); } break;
        case QUAROT_DTYPE_F64: for (i = 0; i < n; ++i) { double d; memcpy(&d, p + 8 * i, 8); out[i] = (float)d; } break;
        default: return QUAROT_ERR_UNSUPPORTED_DTYPE;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_tensor_set_row_f32(quarot_tensor* t, int64_t r, const float* in) {
    char* p = quarot__tensor_row(t, r);
    int64_t i, n;
    if (!p || !in) return QUAROT_ERR_INVALID_ARGUMENT;
    n = t->ne[0];
    switch (t->dtype) {
        case QUAROT_DTYPE_F32: memcpy(p, in, (size_t)n * 4); break;
        case QUAROT_DTYPE_F16: for (i = 0; i < n; ++i) { uint16_t h = quarot__f32_to_f16_1(in[i]); memcpy(p + 2 * i, &h, 2); } break;
        case QUAROT_DTYPE_BF16: for (i = 0; i < n; ++i) { uint16_t h = quarot__f32_to_bf16_1(in[i]); memcpy(p + 2 * i, &h, 2); } break;
        case QUAROT_DTYPE_F64: for (i = 0; i < n; ++i) { double d = (double)in[i]; memcpy(p + 8 * i, &d, 8); } break;
        default: return QUAROT_ERR_UNSUPPORTED_DTYPE;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_tensor_get_row_f64(const quarot_tensor* t, int64_t r, double* out) {
    const char* p = quarot__tensor_row(t, r);
    int64_t i, n;
    if (!p || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    n = t->ne[0];
    switch (t->dtype) {
        case QUAROT_DTYPE_F32: for (i = 0; i < n; ++i) { float f; memcpy(&f, p + 4 * i, 4); out[i] = (double)f; } break;
        case QUAROT_DTYPE_F16: for (i = 0; i < n; ++i) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = (double)quarot__f16_to_f32_1(h); } break;
        case QUAROT_DTYPE_BF16: for (i = 0; i < n; ++i) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = (double)quarot__bf16_to_f32_1(h); } break;
        case QUAROT_DTYPE_F64: memcpy(out, p, (size_t)n * 8); break;
        default: return QUAROT_ERR_UNSUPPORTED_DTYPE;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_tensor_set_row_f64(quarot_tensor* t, int64_t r, const double* in) {
    char* p = quarot__tensor_row(t, r);
    int64_t i, n;
    if (!p || !in) return QUAROT_ERR_INVALID_ARGUMENT;
    n = t->ne[0];
    switch (t->dtype) {
        case QUAROT_DTYPE_F32: for (i = 0; i < n; ++i) { float f = (float)in[i]; memcpy(p + 4 * i, &f, 4); } break;
        case QUAROT_DTYPE_F16: for (i = 0; i < n; ++i) { uint16_t h = quarot_f64_to_f16_1(in[i]); memcpy(p + 2 * i, &h, 2); } break;
        case QUAROT_DTYPE_BF16: for (i = 0; i < n; ++i) { uint16_t h = quarot_f64_to_bf16_1(in[i]); memcpy(p + 2 * i, &h, 2); } break;
        case QUAROT_DTYPE_F64: memcpy(p, in, (size_t)n * 8); break;
        default: return QUAROT_ERR_UNSUPPORTED_DTYPE;
    }
    return QUAROT_OK;
}

QUAROT_API quarot_result quarot_tensor_check_finite(const quarot_tensor* t, int64_t* first_bad) {
    int64_t r, i, rows, n;
    quarot_result res = quarot_tensor_validate(t);
    if (first_bad) *first_bad = -1;
    if (res != QUAROT_OK) return res;
    rows = quarot_tensor_nrows(t);
    n = t->ne[0];
    for (r = 0; r < rows; ++r) {
        const char* p = quarot__tensor_row(t, r);
        for (i = 0; i < n; ++i) {
            int bad;
            if (t->dtype == QUAROT_DTYPE_F32) { uint32_t u; memcpy(&u, p + 4 * i, 4); bad = (u & 0x7f800000u) == 0x7f800000u; }
            else if (t->dtype == QUAROT_DTYPE_F64) { uint64_t u; memcpy(&u, p + 8 * i, 8); bad = (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull; }
            else { uint16_t h; memcpy(&h, p + 2 * i, 2);
                   bad = t->dtype == QUAROT_DTYPE_F16 ? (h & 0x7c00u) == 0x7c00u : (h & 0x7f80u) == 0x7f80u; }
            if (bad) { if (first_bad) *first_bad = r * n + i; return QUAROT_ERR_NONFINITE; }
        }
    }
    return QUAROT_OK;
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

// >>hadamard
// (implementation: hadamard work)

// >>hadtables
// (implementation: hadamard work)

// >>transform
// (implementation: transform work)

// >>gemm
// (implementation: gemm work)

// >>linalg
// (implementation: linalg work)

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
    int kern;             // QUAROT__QK_REF / _AVX2 / _NEON
} quarot__qspec;

// Quant kernels: the scalar reference, SSE2 (the x86-64 baseline), AVX2 (also serving AVX-512
// builds) and NEON.
#define QUAROT__QK_REF 0
#define QUAROT__QK_AVX2 1
#define QUAROT__QK_NEON 2
#define QUAROT__QK_SSE2 3

static int quarot__qkernel(quarot_isa isa) {   // isa already resolved
#if defined(QUAROT__HAVE_AVX2)
    if (isa == QUAROT_ISA_AVX2 || isa == QUAROT_ISA_AVX512) return QUAROT__QK_AVX2;
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (isa == QUAROT_ISA_SSE2 || isa == QUAROT_ISA_AVX2 || isa == QUAROT_ISA_AVX512) return QUAROT__QK_SSE2;
#endif
#if defined(QUAROT__HAVE_NEON)
    if (isa == QUAROT_ISA_NEON) return QUAROT__QK_NEON;
#endif
    (void)isa;
    return QUAROT__QK_REF;
}

// Validate a quant desc (NULL = defaults) for rows of length cols; *gs gets the group length.
static quarot_result quarot__qspec_init(const quarot_quant_desc* d, int64_t cols, quarot__qspec* sp, int64_t* gs) {
    quarot_quant_desc dd;
    quarot_isa isa;
    quarot_result res;
    int b;
    if (d) dd = *d; else memset(&dd, 0, sizeof dd);
    if ((res = quarot__isa_resolve(dd.isa, &isa)) != QUAROT_OK) return res;   // out of range / not compiled in
    sp->kern = quarot__qkernel(isa);
    b = dd.bits == 0 ? 4 : dd.bits;
    if (b < 2 || b > 8) return QUAROT_ERR_INVALID_ARGUMENT;
    if (dd.asymmetric != 0 && dd.asymmetric != 1) return QUAROT_ERR_INVALID_ARGUMENT;
    if (dd.clip_search != 0 && dd.clip_search != 1) return QUAROT_ERR_INVALID_ARGUMENT;
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

// sum((x^ - x)^2) of a group for one candidate scale (clip search).
static double quarot__qerr(const float* x, int64_t n, float s, double klo, double khi) {
    double sd = (double)s, e = 0.0;
    int64_t j;
    for (j = 0; j < n; ++j) {
        float y = (float)quarot__rne_clamp((double)x[j] / sd, klo, khi) * s;
        double dif = (double)y - (double)x[j];
        e += dif * dif;
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
    best_err = quarot__qerr(x, n, best_s, klo, khi);
    for (k = 1; k <= 50; ++k) {
        s = quarot__qparams(sp, sp->clip * (double)(100 - k) / 100.0, pmax, nmax, &zk);
        quarot__qrange(sp, zk, &klo, &khi);
        err = quarot__qerr(x, n, s, klo, khi);
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
    f = _mm_add_epi32(t, _mm_shuffle_epi32(_mm_castpd_si128(_mm_cmplt_pd(r, _mm_cvtepi32_pd(t))), _MM_SHUFFLE(3, 3, 2, 0)));
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

// Dispatch by kernel id.
static int quarot__qstats(int kern, const float* x, int64_t n, float* pmax, float* nmax) {
#if defined(QUAROT__HAVE_AVX2)
    if (kern == QUAROT__QK_AVX2) return quarot__qstats_f32_avx2(x, n, pmax, nmax);
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (kern == QUAROT__QK_SSE2) return quarot__qstats_f32_sse2(x, n, pmax, nmax);
#endif
#if defined(QUAROT__HAVE_NEON)
    if (kern == QUAROT__QK_NEON) return quarot__qstats_f32_neon(x, n, pmax, nmax);
#endif
    (void)kern;
    return quarot__qstats_f32_ref(x, n, 0u, 0u, pmax, nmax);
}

static void quarot__qapply(int kern, float* x, int64_t n, float s, double klo, double khi) {
#if defined(QUAROT__HAVE_AVX2)
    if (kern == QUAROT__QK_AVX2) { quarot__qapply_f32_avx2(x, n, s, klo, khi); return; }
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (kern == QUAROT__QK_SSE2) { quarot__qapply_f32_sse2(x, n, s, klo, khi); return; }
#endif
#if defined(QUAROT__HAVE_NEON)
    if (kern == QUAROT__QK_NEON) { quarot__qapply_f32_neon(x, n, s, klo, khi); return; }
#endif
    (void)kern;
    quarot__qapply_f32_ref(x, n, s, klo, khi);
}

// The best kernel compiled in (internal uses: finiteness scans of GPTQ inputs).
static int quarot__qkernel_best(void) { return quarot__qkernel(quarot_isa_best()); }

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
        if (!quarot__qstats(sp.kern, row, cols, &pmax, &nmax)) return QUAROT_ERR_NONFINITE;   // before any write
        for (g0 = 0; g0 < cols; g0 += gs) {
            if (gs != cols) quarot__qstats(sp.kern, row + g0, gs, &pmax, &nmax);
            s = quarot__qfit(&sp, row + g0, gs, pmax, nmax, &z);
            quarot__qrange(&sp, z, &klo, &khi);
            quarot__qapply(sp.kern, row + g0, gs, s, klo, khi);
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
        if (!quarot__qstats(sp.kern, row, cols, &pmax, &nmax)) return QUAROT_ERR_NONFINITE;
        for (g = 0; g < groups; ++g) {
            const float* v = row + g * gs;
            if (gs != cols) quarot__qstats(sp.kern, v, gs, &pmax, &nmax);
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
    for (; j + 2 <= n; j += 2) _mm_storeu_pd(y + j, _mm_add_pd(_mm_loadu_pd(y + j), _mm_mul_pd(cv, _mm_loadu_pd(p + j))));
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
        __m128d s = _mm_mul_pd(_mm_set1_pd(a[0]), _mm_cvtps_pd(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i*)(const void*)(x[0] + j)))));
        for (r = 1; r < 8; ++r)
            s = _mm_add_pd(s, _mm_mul_pd(_mm_set1_pd(a[r]), _mm_cvtps_pd(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i*)(const void*)(x[r] + j))))));
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
    const __m256d c0 = _mm256_set1_pd(c[0]), c1 = _mm256_set1_pd(c[1]), c2 = _mm256_set1_pd(c[2]), c3 = _mm256_set1_pd(c[3]);
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

static void quarot__gptq_axpy_f64(int kern, double* y, const double* p, double c, int64_t n) {
#if defined(QUAROT__HAVE_AVX2)
    if (kern == QUAROT__QK_AVX2) { quarot__gptq_axpy_f64_avx2(y, p, c, n); return; }
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (kern == QUAROT__QK_SSE2) { quarot__gptq_axpy_f64_sse2(y, p, c, n); return; }
#endif
#if defined(QUAROT__HAVE_NEON)
    if (kern == QUAROT__QK_NEON) { quarot__gptq_axpy_f64_neon(y, p, c, n); return; }
#endif
    (void)kern;
    quarot__gptq_axpy_f64_ref(y, p, c, n);
}
static void quarot__gptq_axpy4_f64(int kern, double* y, const double* const* p, const double* c, int64_t n) {
#if defined(QUAROT__HAVE_AVX2)
    if (kern == QUAROT__QK_AVX2) { quarot__gptq_axpy4_f64_avx2(y, p, c, n); return; }
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (kern == QUAROT__QK_SSE2) { quarot__gptq_axpy4_f64_sse2(y, p, c, n); return; }
#endif
#if defined(QUAROT__HAVE_NEON)
    if (kern == QUAROT__QK_NEON) { quarot__gptq_axpy4_f64_neon(y, p, c, n); return; }
#endif
    (void)kern;
    quarot__gptq_axpy4_f64_ref(y, p, c, n);
}
static void quarot__gptq_hess8_f64(int kern, double* h, const float* const* x, const double* a, int64_t n) {
#if defined(QUAROT__HAVE_AVX2)
    if (kern == QUAROT__QK_AVX2) { quarot__gptq_hess8_f64_avx2(h, x, a, n); return; }
#endif
#if defined(QUAROT__HAVE_SSE2)
    if (kern == QUAROT__QK_SSE2) { quarot__gptq_hess8_f64_sse2(h, x, a, n); return; }
#endif
#if defined(QUAROT__HAVE_NEON)
    if (kern == QUAROT__QK_NEON) { quarot__gptq_hess8_f64_neon(h, x, a, n); return; }
#endif
    (void)kern;
    quarot__gptq_hess8_f64_ref(h, x, a, n);
}

QUAROT_API quarot_result quarot_hessian_accumulate_f64(double* h, int64_t in, const float* x,
                                                       int64_t rows, int64_t stride) {
    int64_t r, r0, i, j, k, i0;
    const int kern = quarot__qkernel_best();
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
        if (!quarot__qstats(kern, x + r * stride, in, &pm, &nm)) return QUAROT_ERR_NONFINITE;
    // Blocks of 256 rows of x (in chunks of 8) against tiles of 16 rows of h, so both stay in cache;
    // then the rows % 8 left, one by one. Per element of h that is the documented order.
    for (r0 = 0; r0 + 8 <= rows; r0 += 256) {
        const int64_t r1 = r0 + 256 < rows / 8 * 8 ? r0 + 256 : rows / 8 * 8;
        for (i0 = 0; i0 < in; i0 += 16) {
            const int64_t i1 = i0 + 16 < in ? i0 + 16 : in;
            for (r = r0; r < r1; r += 8) {
                for (k = 0; k < 8; ++k) xr[k] = x + (r + k) * stride;
                for (i = i0; i < i1; ++i) {
                    for (k = 0; k < 8; ++k) { a[k] = 2.0 * (double)xr[k][i]; xi[k] = xr[k] + i; }
                    quarot__gptq_hess8_f64(kern, h + i * in + i, xi, a, in - i);
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
    int kern;              // element-wise helper kernel
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
            quarot__gptq_axpy_f64(jb->kern, r, dj, -c, j);
        }
        for (j = 0; j < b; ++j) jb->pk[j * n + i] = r[j];
    }
}

// Cholesky, trailing update of A[0:b0][0:b0] (upper) by the block's columns, chunk t of the columns:
// A_il -= V_i,k V_l,k for k descending, four k per pass (C's left-to-right evaluation keeps the order).
static void quarot__gptq_chol_syrk_task(void* arg, int64_t t) {
    const quarot__gptq_chol_job* jb = (const quarot__gptq_chol_job*)arg;
    const int64_t n = jb->n, b0 = jb->b0, b = jb->b1 - jb->b0;
    const int64_t la = t * QUAROT__GPTQ_CW, lb = la + QUAROT__GPTQ_CW < b0 ? la + QUAROT__GPTQ_CW : b0;
    int64_t i, k, l;
    for (i = 0; i < lb; ++i) {
        double* ai = jb->a + i * n;
        const double* ci = ai + b0;                    // V_i,b0+k
        const int64_t l0 = i > la ? i : la;
        if (l0 >= lb) continue;
        for (k = b - 1; k >= 3; k -= 4) {
            const double* p[4];
            double c[4];
            for (l = 0; l < 4; ++l) { p[l] = jb->pk + (k - l) * n + l0; c[l] = -ci[k - l]; }
            quarot__gptq_axpy4_f64(jb->kern, ai + l0, p, c, lb - l0);
        }
        for (; k >= 0; --k) quarot__gptq_axpy_f64(jb->kern, ai + l0, jb->pk + k * n + l0, -ci[k], lb - l0);
    }
}

// Inverse, rows of the block times the rest, chunk t of the columns j >= b1:
//   S[k][j] = sum_{m=b1..j} V[b0+k][m] U[m][j]  (m ascending),  U[b0+i][j] = -sum_{k>=i} Ublk[i][k] S[k][j].
static void quarot__gptq_inv_task(void* arg, int64_t t) {
    const quarot__gptq_chol_job* jb = (const quarot__gptq_chol_job*)arg;
    const int64_t n = jb->n, b0 = jb->b0, b1 = jb->b1, b = b1 - b0;
    const int64_t ja = b1 + t * QUAROT__GPTQ_CW, jz = ja + QUAROT__GPTQ_CW < n ? ja + QUAROT__GPTQ_CW : n;
    int64_t i, j, k, m;
    for (k = 0; k < b; ++k)
        for (j = ja; j < jz; ++j) jb->s[k * n + j] = 0.0;
    for (m = b1; m < jz; ++m) {
        const double* um = jb->a + m * n;
        const int64_t j0 = m > ja ? m : ja;
        for (k = 0; k < b; ++k) quarot__gptq_axpy_f64(jb->kern, jb->s + k * n + j0, um + j0, jb->pk[k * n + m], jz - j0);
    }
    for (i = 0; i < b; ++i) {
        double* ui = jb->a + (b0 + i) * n;
        const double* di = jb->d + i * QUAROT__GPTQ_NB;
        for (j = ja; j < jz; ++j) ui[j] = 0.0;
        for (k = i; k < b; ++k) quarot__gptq_axpy_f64(jb->kern, ui + ja, jb->s + k * n + ja, -di[k], jz - ja);
    }
}

// Returns -1, or the first column (from the right) whose pivot is not > n*eps*diag[j] (or not finite).
// diag[n] is A's diagonal; work holds 2*NB*n + NB*NB doubles.
static int64_t quarot__gptq_factor(double* a, int64_t n, const double* diag, double* work, int kern,
                                   const quarot_env* env) {
    const double tol = (double)n * 2.220446049250313e-16;
    quarot__gptq_chol_job jb;
    double* d = work + 2 * QUAROT__GPTQ_NB * n;
    int64_t b0, b1, i, j, k, threads;
    threads = env && env->parallel.run && env->parallel.n_threads > 1 ? env->parallel.n_threads : 1;
    jb.a = a; jb.n = n; jb.pk = work; jb.s = work + QUAROT__GPTQ_NB * n; jb.d = d; jb.kern = kern;
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
                quarot__gptq_axpy_f64(kern, a + i * n + i, d + (j - b0) * QUAROT__GPTQ_NB + (i - b0), -a[i * n + j], j - i);
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
            for (k = i + 1; k < b1; ++k) quarot__gptq_axpy_f64(kern, tmp + k, a + k * n + k, ai[k], b1 - k);
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
    quarot__qstats(sp->kern, fb, n, &pm, &nm);
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
    int64_t t, i, j, k, g, b1, b2;
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
                quarot__qstats(sp->kern, fb + g * gs, gs, &pm, &nm);
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
                err[t * B + (i - b1)] = e;
                quarot__gptq_axpy_f64(sp->kern, wr + i + 1, ui + i + 1, -e, b2 - i - 1);
            }
        }
        if (b2 == in) break;
        // Lazy update of the later columns: w_j -= sum_k e_k U_kj, k ascending. Four k per pass;
        // C evaluates w - a - b - c - d left to right, so the bits equal one k at a time.
        for (t = 0; t < nr; ++t) {
            double* wr = wt + t * in;
            const double* et = err + t * B;
            for (k = b1; k + 4 <= b2; k += 4) {
                const double* p[4];
                double c[4];
                for (j = 0; j < 4; ++j) { p[j] = jb->u + (k + j) * in + b2; c[j] = -et[k + j - b1]; }
                quarot__gptq_axpy4_f64(sp->kern, wr + b2, p, c, in - b2);
            }
            for (; k < b2; ++k) quarot__gptq_axpy_f64(sp->kern, wr + b2, jb->u + k * in + b2, -et[k - b1], in - b2);
        }
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
        if (!quarot__qstats(jb.sp.kern, w + i * stride, in, &pm, &nm)) return QUAROT_ERR_NONFINITE;
    for (i = 0; i < in; ++i)
        for (j = i; j < in; ++j)
            if (h[i * in + j] - h[i * in + j] != 0.0) return QUAROT_ERR_NONFINITE;
    // Row tiles are the parallel tasks; task t takes tiles t, t+T, ... with its own scratch block.
    jb.n_tiles = (out + QUAROT__GPTQ_TILE - 1) / QUAROT__GPTQ_TILE;
    n_threads = env && env->parallel.run && env->parallel.n_threads > 1 ? env->parallel.n_threads : 1;
    jb.n_tasks = n_threads < jb.n_tiles ? n_threads : jb.n_tiles;
    jb.scratch_bytes = sb = (quarot__gptq_scratch_bytes(in, jb.block, jb.groups) + 63) / 64 * 64;
    fixed_bytes = nn + (size_t)in * (sizeof(int64_t) + sizeof(quarot__gptq_key) + 1) + (size_t)jb.n_tiles * sizeof(double);
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
    bad = quarot__gptq_factor(a, in, dproc, work, jb.sp.kern, env);
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
