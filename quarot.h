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
    >>gemm_kernels (implementation only) GEMM micro-kernels: scalar, SSE2, AVX2(+FMA), AVX-512, NEON
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
// Cost about 4*m*n^2 flops with Q (n = 2048: ~1.3 s on one Zen 4 core); env's parallel hook splits
// the block updates. Workspace (m + n + 33)*32 doubles from env. NaN/Inf in A -> QUAROT_ERR_NONFINITE.
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
// (implementation: transform work)

// >>gemm
// C[m][n] = alpha * op(A)[m][k] * op(B)[k][n] + beta * C, as the BLIS loop nest (Goto, van de Geijn):
//   for jc in steps of NC:  for pc in steps of KC:   pack op(B)[pc:+KC][jc:+NC] as NR-wide slivers
//     for ic in steps of MC:  pack op(A)[ic:+MC][pc:+KC] as MR-tall slivers
//       for ir (MR rows): for jr (NR columns): micro-kernel  C_tile = alpha * (A_sliver * B_sliver) + beta' * C_tile
// beta' is beta for the first KC block and 1 afterwards. The A sliver (MR x KC) stays in L1 while the
// kernel sweeps the B panel, which streams from L2/L3. Every element of C is the same chain of
// operations whatever its tile or thread, so parallel runs equal serial runs bit for bit.

// One micro-kernel computes a full MR x NR tile: acc[i][j] = sum_p a[p*MR + i] * b[p*NR + j] (p ascending),
// then c[i*ldc + j] = alpha*acc (beta == 0: c is not read) or alpha*acc + beta*c (two products, one add).
typedef void (*quarot__skernel_fn)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                                   float alpha, float beta);
typedef void (*quarot__dkernel_fn)(int64_t kc, const double* a, const double* b, double* c, int64_t ldc,
                                   double alpha, double beta);

// Blocking of one ISA's kernel: mc % mr == 0, nc % nr == 0; mr * nr <= QUAROT__GEMM_TILE_MAX.
typedef struct quarot__sgemm_cfg {
    int mr, nr;
    int64_t kc, mc, nc;
    quarot__skernel_fn kernel;
} quarot__sgemm_cfg;
typedef struct quarot__dgemm_cfg {
    int mr, nr;
    int64_t kc, mc, nc;
    quarot__dkernel_fn kernel;
} quarot__dgemm_cfg;

#define QUAROT__GEMM_TILE_MAX 512
// Defined with the micro-kernels below: the blocking and kernel of an ISA (resolved, compiled in).
static void quarot__sgemm_select(quarot_isa isa, quarot__sgemm_cfg* cfg);
static void quarot__dgemm_select(quarot_isa isa, quarot__dgemm_cfg* cfg);

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

static void quarot__gemm_plan_make(int64_t m, int64_t n, int64_t k, int mr, int nr, int64_t kc,
                                   int64_t mc, int64_t nc, const quarot_env* env, quarot__gemm_plan* pl) {
    int64_t tiles_m = quarot__gemm_cdiv(m, mr), tiles_n = quarot__gemm_cdiv(n, nr), tm = 1, tn = 1;
    int threads = (env && env->parallel.run) ? env->parallel.n_threads : 1;
    // Small products run serially; otherwise ~4 tasks per thread, rows first (each task packs its own
    // copy of the B panels, so splitting rows keeps that copy cheap relative to the work).
    if (threads > 1 && (double)m * (double)n * (double)k >= 262144.0) {
        int64_t target = quarot__gemm_min((int64_t)threads * 4, 256);
        tm = quarot__gemm_min(tiles_m, target);
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

// Type-generic part, instantiated for float (S = s) and double (S = d). Packing layouts:
//   packed A  ap[s][p][r] = op(A)[s*mr + r][p]   (rows past mc are 0)
//   packed B  bp[t][p][j] = op(B)[p][t*nr + j]   (columns past nc are 0)
#define QUAROT__GEMM_DEFINE(T, S)                                                                      \
static void quarot__gemm_pack_a_##S(int ta, const T* a, int64_t lda, int64_t mc, int64_t kc, int mr,   \
                                    T* QUAROT__RESTRICT ap) {                                           \
    int64_t s, p;                                                                                      \
    int r, rows;                                                                                       \
    for (s = 0; s < mc; s += mr) {                                                                     \
        rows = (int)quarot__gemm_min(mr, mc - s);                                                         \
        for (p = 0; p < kc; ++p) {                                                                     \
            if (ta) { const T* src = a + p * lda + s; for (r = 0; r < rows; ++r) ap[r] = src[r]; }     \
            else    { const T* src = a + s * lda + p; for (r = 0; r < rows; ++r) ap[r] = src[r * lda]; } \
            for (; r < mr; ++r) ap[r] = (T)0;                                                          \
            ap += mr;                                                                                  \
        }                                                                                              \
    }                                                                                                  \
}                                                                                                      \
static void quarot__gemm_pack_b_##S(int tb, const T* b, int64_t ldb, int64_t kc, int64_t nc, int nr,   \
                                    T* QUAROT__RESTRICT bp) {                                           \
    int64_t t, p;                                                                                      \
    int j, cols;                                                                                       \
    for (t = 0; t < nc; t += nr) {                                                                     \
        cols = (int)quarot__gemm_min(nr, nc - t);                                                         \
        for (p = 0; p < kc; ++p) {                                                                     \
            if (tb) { const T* src = b + t * ldb + p; for (j = 0; j < cols; ++j) bp[j] = src[j * ldb]; } \
            else    { const T* src = b + p * ldb + t; for (j = 0; j < cols; ++j) bp[j] = src[j]; }     \
            for (; j < nr; ++j) bp[j] = (T)0;                                                          \
            bp += nr;                                                                                  \
        }                                                                                              \
    }                                                                                                  \
}                                                                                                      \
/* The serial loop nest over one panel of C, with its own packing buffers ap, bp. */                   \
static void quarot__gemm_run_##S(const quarot__##S##gemm_cfg* cfg, int ta, int tb, int64_t m,         \
                                 int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,    \
                                 int64_t ldb, T beta, T* c, int64_t ldc, T* ap, T* bp) {                \
    const int mr = cfg->mr, nr = cfg->nr;                                                              \
    int64_t jc, pc, ic, ir, jr, nc, kc, mc, i, j;                                                      \
    T tmp[QUAROT__GEMM_TILE_MAX], bb;                                                                  \
    for (jc = 0; jc < n; jc += cfg->nc) {                                                              \
        nc = quarot__gemm_min(cfg->nc, n - jc);                                                           \
        for (pc = 0; pc < k; pc += cfg->kc) {                                                          \
            kc = quarot__gemm_min(cfg->kc, k - pc);                                                       \
            bb = pc == 0 ? beta : (T)1;                                                                \
            quarot__gemm_pack_b_##S(tb, b + (tb ? jc * ldb + pc : pc * ldb + jc), ldb, kc, nc, nr, bp); \
            for (ic = 0; ic < m; ic += cfg->mc) {                                                      \
                mc = quarot__gemm_min(cfg->mc, m - ic);                                                   \
                quarot__gemm_pack_a_##S(ta, a + (ta ? pc * lda + ic : ic * lda + pc), lda, mc, kc, mr, ap); \
                for (ir = 0; ir < mc; ir += mr) {                                                      \
                    const T* as = ap + ir * kc;                                                        \
                    T* crow = c + (ic + ir) * ldc + jc;                                                \
                    int64_t rows = quarot__gemm_min(mr, mc - ir);                                         \
                    for (jr = 0; jr < nc; jr += nr) {                                                  \
                        int64_t cols = quarot__gemm_min(nr, nc - jr);                                     \
                        if (rows == mr && cols == nr) {                                                \
                            cfg->kernel(kc, as, bp + jr * kc, crow + jr, ldc, alpha, bb);              \
                            continue;                                                                  \
                        }                                                                              \
                        /* edge tile: tmp = acc exactly (alpha 1, beta 0), then the kernel's epilogue */ \
                        cfg->kernel(kc, as, bp + jr * kc, tmp, nr, (T)1, (T)0);                        \
                        for (i = 0; i < rows; ++i) {                                                   \
                            T* cr = crow + i * ldc + jr;                                               \
                            for (j = 0; j < cols; ++j) {                                               \
                                T v = alpha * tmp[i * nr + j];                                         \
                                cr[j] = bb == (T)0 ? v : v + bb * cr[j];                               \
                            }                                                                          \
                        }                                                                              \
                    }                                                                                  \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }                                                                                                  \
}                                                                                                      \
/* C <- beta * C for k == 0 or alpha == 0 (beta == 0 writes zeros without reading). */                 \
static void quarot__gemm_scale_##S(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {                 \
    int64_t i, j;                                                                                      \
    for (i = 0; i < m; ++i)                                                                            \
        for (j = 0; j < n; ++j) c[i * ldc + j] = beta == (T)0 ? (T)0 : beta * c[i * ldc + j];          \
}                                                                                                      \
typedef struct quarot__gemm_job_##S {                                                                  \
    const quarot__##S##gemm_cfg* cfg;                                                                  \
    const quarot__gemm_plan* pl;                                                                       \
    int ta, tb;                                                                                        \
    int64_t m, n, k, lda, ldb, ldc;                                                                    \
    T alpha, beta;                                                                                     \
    const T* a;                                                                                        \
    const T* b;                                                                                        \
    T* c;                                                                                              \
    T* work;                                                                                           \
} quarot__gemm_job_##S;                                                                                \
/* Task t: panel (t / tn, t % tn) of C, workspace slice t. */                                          \
static void quarot__gemm_task_##S(void* arg, int64_t t) {                                              \
    const quarot__gemm_job_##S* jb = (const quarot__gemm_job_##S*)arg;                                 \
    const quarot__gemm_plan* pl = jb->pl;                                                              \
    int64_t i0 = (t / pl->tn) * pl->pm, j0 = (t % pl->tn) * pl->pn;                                    \
    T* ap = jb->work + t * pl->per_task;                                                               \
    quarot__gemm_run_##S(jb->cfg, jb->ta, jb->tb, quarot__gemm_min(pl->pm, jb->m - i0),                   \
                         quarot__gemm_min(pl->pn, jb->n - j0), jb->k, jb->alpha,                          \
                         jb->a + (jb->ta ? i0 : i0 * jb->lda), jb->lda,                                \
                         jb->b + (jb->tb ? j0 * jb->ldb : j0), jb->ldb, jb->beta,                      \
                         jb->c + i0 * jb->ldc + j0, jb->ldc, ap, ap + pl->a_elems);                    \
}                                                                                                      \
/* The whole built-in GEMM after argument checks, with a given blocking and kernel. */              \
static quarot_result quarot__gemm_cfg_##S(const quarot__##S##gemm_cfg* cfg, int ta, int tb, int64_t m, \
                                          int64_t n, int64_t k, T alpha, const T* a, int64_t lda,      \
                                          const T* b, int64_t ldb, T beta, T* c, int64_t ldc,          \
                                          const quarot_env* env) {                                      \
    quarot__gemm_plan pl;                                                                              \
    quarot__gemm_job_##S jb;                                                                           \
    size_t bytes;                                                                                      \
    void* mem;                                                                                         \
    if (m == 0 || n == 0) return QUAROT_OK;                                                            \
    if (k == 0 || alpha == (T)0) { quarot__gemm_scale_##S(m, n, beta, c, ldc); return QUAROT_OK; }     \
    quarot__gemm_plan_make(m, n, k, cfg->mr, cfg->nr, cfg->kc, cfg->mc, cfg->nc, env, &pl);            \
    if (!quarot__mul_size((size_t)pl.tasks, (size_t)pl.per_task, &bytes) ||                            \
        !quarot__mul_size(bytes, sizeof(T), &bytes) || bytes > SIZE_MAX - 64)                          \
        return QUAROT_ERR_OVERFLOW;                                                                    \
    mem = quarot_env_alloc(env, bytes + 64);                                                           \
    if (!mem) return QUAROT_ERR_OUT_OF_MEMORY;                                                         \
    jb.cfg = cfg; jb.pl = &pl; jb.ta = ta; jb.tb = tb; jb.m = m; jb.n = n; jb.k = k;                   \
    jb.lda = lda; jb.ldb = ldb; jb.ldc = ldc; jb.alpha = alpha; jb.beta = beta;                        \
    jb.a = a; jb.b = b; jb.c = c;                                                                      \
    jb.work = (T*)(void*)((char*)mem + ((64 - (size_t)((uintptr_t)mem & 63)) & 63));                   \
    quarot_env_parallel_for(env, quarot__gemm_task_##S, &jb, pl.tasks);                                \
    quarot_env_free(env, mem);                                                                         \
    return QUAROT_OK;                                                                                  \
}                                                                                                      \
/* The same with the blocking and kernel of an ISA (resolved); used by the entry points and linalg. */ \
static quarot_result quarot__gemm_##S(quarot_isa isa, int ta, int tb, int64_t m, int64_t n, int64_t k, \
                                      T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, \
                                      T* c, int64_t ldc, const quarot_env* env) {                       \
    quarot__##S##gemm_cfg cfg;                                                                         \
    quarot__##S##gemm_select(isa, &cfg);                                                               \
    return quarot__gemm_cfg_##S(&cfg, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env);      \
}

QUAROT__GEMM_DEFINE(float, s)
QUAROT__GEMM_DEFINE(double, d)

QUAROT_API quarot_result quarot_sgemm_builtin(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                              float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                                              float beta, float* c, int64_t ldc, const quarot_env* env,
                                              quarot_isa isa) {
    quarot_result r = quarot__gemm_check(trans_a, trans_b, m, n, k, alpha != 0.0f, a, lda, b, ldb, c, ldc, sizeof(float));
    if (r == QUAROT_OK) r = quarot__isa_resolve(isa, &isa);
    if (r != QUAROT_OK) return r;
    return quarot__gemm_s(isa, trans_a != 0, trans_b != 0, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env);
}

QUAROT_API quarot_result quarot_dgemm_builtin(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                              double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                                              double beta, double* c, int64_t ldc, const quarot_env* env,
                                              quarot_isa isa) {
    quarot_result r = quarot__gemm_check(trans_a, trans_b, m, n, k, alpha != 0.0, a, lda, b, ldb, c, ldc, sizeof(double));
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
    quarot_result r = quarot__gemm_check(trans_a, trans_b, m, n, k, alpha != 0.0f, a, lda, b, ldb, c, ldc, sizeof(float));
    if (r != QUAROT_OK) return r;
    if (m == 0 || n == 0) return QUAROT_OK;
    if (quarot__cblas_fits(m, n, k, lda, ldb, ldc)) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return QUAROT_OK;
    }
#endif
    return quarot_sgemm_builtin(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env, QUAROT_ISA_DEFAULT);
}

QUAROT_API quarot_result quarot_dgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                      double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                                      double beta, double* c, int64_t ldc, const quarot_env* env) {
#if defined(QUAROT_USE_CBLAS)
    quarot_result r = quarot__gemm_check(trans_a, trans_b, m, n, k, alpha != 0.0, a, lda, b, ldb, c, ldc, sizeof(double));
    if (r != QUAROT_OK) return r;
    if (m == 0 || n == 0) return QUAROT_OK;
    if (quarot__cblas_fits(m, n, k, lda, ldb, ldc)) {
        cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return QUAROT_OK;
    }
#endif
    return quarot_dgemm_builtin(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, env, QUAROT_ISA_DEFAULT);
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
// (measured on Zen 4 a few % faster than 14 rows, whose 28 accumulators leave no slack).
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
#define QUAROT__ND_DECL(i) float64x2_t c##i##a = vdupq_n_f64(0.0), c##i##b = c##i##a, c##i##c = c##i##a, c##i##d = c##i##a;
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

// Blocking per ISA (measured on AMD Zen 4, 32 KB L1D / 1 MB L2: the A sliver MR x KC takes about half
// of L1, the B panel KC x NC streams; a wide NC means fewer repacks of A). ISAs without a kernel of
// their own (none today) would fall back to the scalar one.
static void quarot__gemm_set(int* mr, int* nr, int64_t* kc, int64_t* mc, int64_t* nc,
                             int mr_, int nr_, int64_t kc_, int64_t nc_) {
    *mr = mr_; *nr = nr_; *kc = kc_; *mc = (int64_t)mr_ * 8; *nc = nc_;
}

static void quarot__sgemm_select(quarot_isa isa, quarot__sgemm_cfg* g) {
    switch (isa) {
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 12, 32, 384, 4096);
            g->kernel = quarot__sgemm_kernel_avx512; return;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 6, 16, 512, 4096);
            g->kernel = quarot__sgemm_kernel_avx2; return;
#endif
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 6, 8, 512, 4096);
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
    switch (isa) {
#if defined(QUAROT__HAVE_AVX512)
        case QUAROT_ISA_AVX512:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 12, 16, 256, 4096);
            g->kernel = quarot__dgemm_kernel_avx512; return;
#endif
#if defined(QUAROT__HAVE_AVX2)
        case QUAROT_ISA_AVX2:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 6, 8, 256, 4096);
            g->kernel = quarot__dgemm_kernel_avx2; return;
#endif
#if defined(QUAROT__HAVE_SSE2)
        case QUAROT_ISA_SSE2:
            quarot__gemm_set(&g->mr, &g->nr, &g->kc, &g->mc, &g->nc, 6, 4, 256, 4096);
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
// Instantiated for double (S = d) and float (S = s); first: the scaled Frobenius norm in double.
#define QUAROT__POLAR_DEFINE(T, S)                                                                     \
static double quarot__frob_##S(int64_t n, const T* x, int64_t ld) {                                    \
    double amax = 0.0, ss = 0.0, t;                                                                    \
    int64_t i, j;                                                                                      \
    for (i = 0; i < n; ++i)                                                                            \
        for (j = 0; j < n; ++j) { t = fabs((double)x[i * ld + j]); if (t > amax) amax = t; }           \
    if (amax == 0.0) return 0.0;                                                                       \
    for (i = 0; i < n; ++i)                                                                            \
        for (j = 0; j < n; ++j) { t = (double)x[i * ld + j] / amax; ss += t * t; }                     \
    return amax * sqrt(ss);                                                                            \
}                                                                                                      \
typedef struct quarot__gram_job_##S {                                                                  \
    const quarot__##S##gemm_cfg* cfg;                                                                  \
    int64_t n, ldx, bs, nb, n_tasks, per_task, a_elems;                                                \
    const T* x;                                                                                        \
    T* g;                                                                                              \
    T* work;                                                                                           \
} quarot__gram_job_##S;                                                                                \
static void quarot__gram_panel_##S(const quarot__gram_job_##S* jb, int64_t p, T* ap) {                 \
    int64_t i0 = p * jb->bs;                                                                           \
    quarot__gemm_run_##S(jb->cfg, 1, 0, quarot__gemm_min(jb->bs, jb->n - i0), jb->n - i0, jb->n, (T)1, \
                         jb->x + i0, jb->ldx, jb->x + i0, jb->ldx, (T)0, jb->g + i0 * jb->n + i0, jb->n, \
                         ap, ap + jb->a_elems);                                                        \
}                                                                                                      \
/* Task t: panel pairs (q, nb-1-q) for q = t, t + n_tasks, ... */                                      \
static void quarot__gram_task_##S(void* arg, int64_t t) {                                              \
    const quarot__gram_job_##S* jb = (const quarot__gram_job_##S*)arg;                                 \
    T* ap = jb->work + t * jb->per_task;                                                               \
    int64_t q;                                                                                         \
    for (q = t; q < (jb->nb + 1) / 2; q += jb->n_tasks) {                                              \
        quarot__gram_panel_##S(jb, q, ap);                                                             \
        if (jb->nb - 1 - q != q) quarot__gram_panel_##S(jb, jb->nb - 1 - q, ap);                       \
    }                                                                                                  \
}                                                                                                      \
/* G[n][n] (row stride n) = X^T X for X [n][n] (row stride ldx); work sized by gram_setup. */           \
static void quarot__gram_##S(quarot__gram_job_##S* jb, const T* x, int64_t ldx, T* g,                  \
                             const quarot_env* env) {                                                  \
    int64_t i, j, i0, j0, n = jb->n;                                                                   \
    jb->x = x; jb->ldx = ldx; jb->g = g;                                                               \
    quarot_env_parallel_for(env, quarot__gram_task_##S, jb, jb->n_tasks);                              \
    for (i0 = 0; i0 < n; i0 += 32)                   /* lower <- upper, in 32 x 32 tiles for the cache */ \
        for (j0 = 0; j0 <= i0; j0 += 32)                                                               \
            for (i = i0; i < quarot__gemm_min(i0 + 32, n); ++i)                                        \
                for (j = j0; j < quarot__gemm_min(j0 + 32, i); ++j) g[i * n + j] = g[j * n + i];       \
}                                                                                                      \
/* Panel size: a multiple of the micro-tile near 200; tasks: one, or ~2 per thread. Returns the        \
   workspace elements needed (0 on overflow). */                                                       \
static size_t quarot__gram_setup_##S(quarot__gram_job_##S* jb, const quarot__##S##gemm_cfg* cfg,       \
                                     int64_t n, const quarot_env* env) {                               \
    int64_t l = cfg->mr, threads = (env && env->parallel.run) ? env->parallel.n_threads : 1;           \
    size_t total;                                                                                      \
    while (l % cfg->nr) l += cfg->mr;                                  /* lcm(mr, nr) */              \
    jb->cfg = cfg;                                                                                     \
    jb->n = n;                                                                                         \
    jb->bs = quarot__gemm_cdiv(192, l) * l;     /* waste (diagonal blocks) ~ bs/n, packing ~ 1/bs */   \
    jb->nb = quarot__gemm_cdiv(n, jb->bs);                                                             \
    jb->n_tasks = threads > 1 ? quarot__gemm_min((jb->nb + 1) / 2, 2 * threads) : 1;                   \
    jb->a_elems = (quarot__gemm_min(cfg->mc, jb->bs) * quarot__gemm_min(cfg->kc, n) + 15) / 16 * 16;   \
    jb->per_task = jb->a_elems + (quarot__gemm_min(cfg->kc, n) *                                       \
                                  quarot__gemm_min(cfg->nc, quarot__gemm_cdiv(n, cfg->nr) * cfg->nr) + 15) / 16 * 16; \
    if (!quarot__mul_size((size_t)jb->n_tasks, (size_t)jb->per_task, &total)) return 0;               \
    return total;                                                                                      \
}                                                                                                      \
/* G *= 1/lam and X *= 1/sqrt(lam) with lam = min(||G||_F, ||G||_1) >= lambda_max(G) = sigma_max(X)^2,  \
   when lam < 1; returns the bound on lambda_max(G) after that (1 if it rescaled, else lam). */        \
static double quarot__polar_rescale_##S(int64_t n, T* x, T* g, double* dg, double* s) {               \
    double fro = 0.0, one = 0.0, row, t, inv;                                                          \
    int64_t i, j;                                                                                      \
    for (i = 0; i < n; ++i) {                                                                          \
        row = fabs(dg[i]);                                                                             \
        fro += dg[i] * dg[i];                                                                          \
        for (j = 0; j < n; ++j)                                                                        \
            if (j != i) { t = (double)g[i * n + j]; row += fabs(t); fro += t * t; }                    \
        if (row > one) one = row;                                                                      \
    }                                                                                                  \
    fro = sqrt(fro);                                                                                   \
    t = fro < one ? fro : one;                                                                         \
    if (!(t > 0.0 && t < 1.0) || !s) return t;                                                         \
    inv = 1.0 / sqrt(t);                                                                               \
    *s *= sqrt(t);                                                                                     \
    for (i = 0; i < n; ++i)                                                                            \
        for (j = 0; j < n; ++j) {                                                                      \
            x[i * n + j] = (T)((double)x[i * n + j] * inv);                                            \
            g[i * n + j] = (T)((double)g[i * n + j] / t);                                              \
        }                                                                                              \
    for (j = 0; j < n; ++j) dg[j] /= t;                                                                \
    return 1.0;                                                                                        \
}                                                                                                      \
/* `steps` power steps on M = cm*I - G (cm >= lambda_max(G): M is positive semidefinite), v updated   \
   in place; returns cm - (Rayleigh quotient of M), an estimate of lambda_min(G) that can only be too  \
   high: too early a switch costs steps, never correctness. G v = sum_j v_j G[j][:] (G symmetric). */  \
static double quarot__polar_lmin_##S(int64_t n, const T* g, double cm, double* v, double* w, int steps) { \
    double rq = 0.0, vv, nw;                                                                           \
    int64_t i, j;                                                                                      \
    int k;                                                                                             \
    for (k = 0; k < steps; ++k) {                                                                      \
        for (i = 0; i < n; ++i) w[i] = cm * v[i];                                                      \
        for (j = 0; j < n; ++j) {                                                                      \
            const T* gr = g + j * n;                                                                   \
            double vj = v[j];                                                                          \
            for (i = 0; i < n; ++i) w[i] -= vj * (double)gr[i];                                        \
        }                                                                                              \
        vv = 0.0; rq = 0.0; nw = 0.0;                                                                  \
        for (i = 0; i < n; ++i) { vv += v[i] * v[i]; rq += v[i] * w[i]; nw += w[i] * w[i]; }           \
        rq /= vv;                                                                                      \
        if (!(nw > 0.0)) break;                                                                        \
        nw = 1.0 / sqrt(nw);                                                                           \
        for (i = 0; i < n; ++i) v[i] = w[i] * nw;                                                      \
    }                                                                                                  \
    return cm - rq;                                                                                    \
}                                                                                                      \
static quarot_result quarot__polar_##S(int64_t n, const T* c, int64_t ldc, T* u, int64_t ldu,          \
                                       const quarot_polar_desc* d, quarot_polar_info* info,            \
                                       const quarot_env* env, double tol_default, int iter_default,    \
                                       double tau) {                                                   \
    quarot__##S##gemm_cfg cfg;                                                                         \
    quarot__gram_job_##S jb;                                                                           \
    quarot_result r;                                                                                   \
    quarot_rng rng;                                                                                    \
    double tol = d && d->tol > 0.0 ? d->tol : tol_default, s, res = 0.0, t, bound = 1.0, growth = 1.0; \
    int max_iter = d && d->max_iter > 0 ? d->max_iter : iter_default, it, status = 1;                  \
    int fast = !(d && d->plain);             /* 1 while X <- X(2I - G) steps are in use */             \
    int searching = 1;                       /* 1 until sigma_min(X) >= 1/2 is seen */                 \
    size_t nn, bytes, gram_elems;                                                                      \
    T *mem, *xa, *g, *cur, *oth, *sw;                                                                  \
    double *dg, *pv, *pw;                                                                              \
    int64_t i, j, ldcur, ldoth, ldsw;                                                                  \
    if (info) { info->iterations = 0; info->residual = 0.0; info->scale = 0.0; }                       \
    if (n < 1 || !c || !u || ldc < n || ldu < n) return QUAROT_ERR_INVALID_ARGUMENT;                   \
    if (d && (d->max_iter < 0 || !(d->tol >= 0.0) || !(d->scale >= 0.0) || d->scale - d->scale != 0.0)) \
        return QUAROT_ERR_INVALID_ARGUMENT;                                                            \
    r = quarot__gemm_check_mat(c, n, n, ldc, sizeof(T), 1);                                            \
    if (r == QUAROT_OK) r = quarot__gemm_check_mat(u, n, n, ldu, sizeof(T), 1);                        \
    if (r != QUAROT_OK) return r;                                                                      \
    for (i = 0; i < n; ++i)                                                                            \
        for (j = 0; j < n; ++j) { t = (double)c[i * ldc + j]; if (t - t != 0.0) return QUAROT_ERR_NONFINITE; } \
    s = d && d->scale > 0.0 ? d->scale : quarot__frob_##S(n, c, ldc);                                  \
    if (s == 0.0) return QUAROT_ERR_INVALID_ARGUMENT;                  /* C == 0: no polar factor */   \
    quarot__##S##gemm_select(quarot_isa_best(), &cfg);                                                 \
    gram_elems = quarot__gram_setup_##S(&jb, &cfg, n, env);                                            \
    /* one block: gram packing, X [n][n], G [n][n], then 3 vectors [n] of doubles, alignment slack */ \
    if (!gram_elems || !quarot__mul_size((size_t)n, (size_t)n, &nn) || nn > (SIZE_MAX / 4 - gram_elems) / 2 || \
        !quarot__mul_size(2 * nn + gram_elems, sizeof(T), &bytes) || bytes > SIZE_MAX / 2 - 3 * (size_t)n * sizeof(double)) \
        return QUAROT_ERR_OVERFLOW;                                                                    \
    bytes += 3 * (size_t)n * sizeof(double) + 128;                                                     \
    mem = (T*)quarot_env_alloc(env, bytes);                                                            \
    if (!mem) return QUAROT_ERR_OUT_OF_MEMORY;                                                         \
    jb.work = (T*)(void*)((char*)mem + ((64 - (size_t)((uintptr_t)mem & 63)) & 63));                   \
    xa = jb.work + gram_elems;                                                                         \
    g = xa + nn;                                                                                       \
    dg = (double*)(void*)(xa + (2 * nn + 7) / 8 * 8);                 /* 8-element (>= 32 B) aligned */ \
    pv = dg + n;                                                                                       \
    pw = pv + n;                                                                                       \
    quarot_rng_seed(&rng, 0x706f6c6172ULL);                            /* power-iteration start */     \
    for (i = 0; i < n; ++i) pv[i] = quarot_rng_normal(&rng);                                           \
    for (i = 0; i < n; ++i)                                                                            \
        for (j = 0; j < n; ++j) xa[i * n + j] = (T)((double)c[i * ldc + j] / s);                       \
    cur = xa; ldcur = n; oth = u; ldoth = ldu;                                                         \
    for (it = 0;; ++it) {                                                                              \
        quarot__gram_##S(&jb, cur, ldcur, g, env);                                                     \
        for (j = 0; j < n; ++j) dg[j] = 0.0;                                                           \
        for (i = 0; i < n; ++i)                                                                        \
            for (j = 0; j < n; ++j) { t = (double)cur[i * ldcur + j]; dg[j] += t * t; }                \
        /* first step: refine the default scale; X(2I - G) steps only where sigma_max <= 1.09 is sure */ \
        if (it == 0) {                                                                                 \
            bound = quarot__polar_rescale_##S(n, cur, g, dg, d && d->scale > 0.0 ? NULL : &s);         \
            if (bound > 1.18) fast = 0;                                                                \
        }                                                                                              \
        res = 0.0;                                                                                     \
        for (i = 0; i < n; ++i) {                                                                      \
            t = fabs(dg[i] - 1.0);                                                                     \
            if (!(t <= res)) res = t;                                  /* NaN propagates */            \
            for (j = i + 1; j < n; ++j) { t = fabs((double)g[i * n + j]); if (!(t <= res)) res = t; }  \
        }                                                                                              \
        if (res <= tol) { status = 0; break; }                                                         \
        if (!(res <= 1e30) || it >= max_iter) break;                   /* diverged or out of steps */ \
        /* Until sigma_min(X) >= 1/2: each step multiplied the singular values below 1/2 by at least   \
           1.75 (fast) or 1.375, so sigma_min(X0) < 0.5/growth; below tau C counts as singular (its     \
           rounding noise would otherwise grow into a singular value). Then the fast steps end. */     \
        if (searching) {                                                                               \
            t = quarot__polar_lmin_##S(n, g, it == 0 && bound > 1.0 ? 1.01 * bound + 0.19 : 1.19, pv, pw, \
                                       it == 0 ? 12 : 4);                                              \
            if (t >= 0.25) searching = fast = 0;                                                       \
            else if (0.5 / growth < tau) break;                                                        \
            else growth *= fast ? 1.75 : 1.375;                                                        \
        }                                                                                              \
        /* Y = 2I - G (fast) or (3I - G)/2 in place of G; the diagonal from the double column norms */ \
        for (i = 0; i < n; ++i) {                                                                      \
            if (fast) for (j = 0; j < n; ++j) g[i * n + j] = -g[i * n + j];                            \
            else      for (j = 0; j < n; ++j) g[i * n + j] = (T)-0.5 * g[i * n + j];                   \
            g[i * n + i] = (T)(fast ? 2.0 - dg[i] : 1.5 - 0.5 * dg[i]);                                \
        }                                                                                              \
        r = quarot__gemm_##S(quarot_isa_best(), 0, 0, n, n, n, (T)1, cur, ldcur, g, n, (T)0, oth, ldoth, env); \
        if (r != QUAROT_OK) { quarot_env_free(env, mem); return r; }                                   \
        sw = cur; cur = oth; oth = sw;                                                                 \
        ldsw = ldcur; ldcur = ldoth; ldoth = ldsw;                                                     \
    }                                                                                                  \
    if (cur != u)                                                                                      \
        for (i = 0; i < n; ++i) memcpy(u + i * ldu, cur + i * ldcur, (size_t)n * sizeof(T));           \
    quarot_env_free(env, mem);                                                                         \
    if (info) { info->iterations = it; info->residual = res; info->scale = s; }                        \
    return status ? QUAROT_ERR_NOT_CONVERGED : QUAROT_OK;                                              \
}

QUAROT__POLAR_DEFINE(double, d)
QUAROT__POLAR_DEFINE(float, s)

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
