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
// allocates; at most a few hundred microseconds (trial division of n's odd part) for any n.
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

// >>hadtables
// (no declarations: the embedded tables are private to the implementation)

// >>transform
// Fast Hadamard transforms on rows of floats, in place. A row x (length n) is a row vector:
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
//   4. post-signs  x[i] = x[i] * s[i]                 (transpose with signs)
//   5. scaling     x[i] = x[i] * (float)(1/sqrt(n))   (1/sqrt(n) computed in double; f64: in double)

// Unnormalized Walsh-Hadamard transform of `rows` rows of length n (a power of two, n >= 1), rows
// `stride` elements apart (stride >= n). x <- x * H_n (Sylvester; H_n is symmetric). n not a power of
// two -> QUAROT_ERR_INVALID_ARGUMENT; an ISA not compiled in -> QUAROT_ERR_UNSUPPORTED. rows == 0 is
// a no-op. The f64 version is scalar.
QUAROT_API quarot_result quarot_fwht_f32(float* x, int64_t n, int64_t rows, int64_t stride, quarot_isa isa);
QUAROT_API quarot_result quarot_fwht_f64(double* x, int64_t n, int64_t rows, int64_t stride);

// A transform of length n = K*2^m: owns H_K (built once, K*K bytes) and what the mixing kernels
// read. mix_block = b is 1 when 2^m < 16 (the SIMD kernels then vectorize across outputs i and read
// mix_f32) and otherwise the b in 2..8 that minimizes the adds, ceil(K/b) * (2^(b+1) + K).
//   mix_f32 (b == 1, 1 < K <= 2048): +-1.0f in panels of 16 outputs, mix_f32[o][p][k][l] =
//     c_o(k, 16p + l) for o = 0 (forward, H_K[k][i]) and o = 1 (transpose, H_K[i][k]), p < K16/16
//     with K16 = K rounded up to a multiple of 64, zero where 16p + l >= K: 2 * K16 * K floats.
//   mix_sel (b > 1): mix_sel[o][i][blk] for i < K8 (K rounded up to a multiple of 8; rows beyond K
//     name entry blk * 2^b) and blocks blk < nb = ceil(K/b): the entry of a table of nb * 2^b sums that output i adds for
//     the block, blk * 2^b + p + (g == -1 ? 2^(b-1) : 0), with p the sign pattern of c_o(k, i) over
//     the block relative to its first coefficient g (bit t-1 set when c_o(k0+t, i) != g).
typedef struct quarot_hadamard_plan {
    int64_t n, K;
    int m;
    int mix_block;                 // b, see above (1 when K == 1)
    int8_t* had_k;                 // [K][K] +-1, NULL when K == 1
    float* mix_f32;                // [2][K16/16][K][16] or NULL
    uint32_t* mix_sel;             // [2][K8][ceil(K/b)] or NULL
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
    quarot_isa isa;                // f32 only; the f64 path is scalar
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
// the ISA, the same for f32 and f64: n doubles, plus the pattern tables of the b > 1 mixing
// (at most 2^b * 64 floats per block, at most 128 KiB in all), plus alignment slack.
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
// n = 2^e * o (o odd) is available iff e >= emin(o), where for an odd d, emin(d) is the least f with
// 2^f*d reachable: a primitive order 2^f*d (Paley I: 2^f*d - 1 a prime power; Paley II: f = 2 and
// 2d - 1 a prime power; an embedded table), or emin(d1) + emin(d2) over d = d1*d2 (Kronecker). Doubling
// (x H_2) makes availability upward closed in e, so K = 2^emin(o) * o is the smallest core.
// Paley: chi(z) = quadratic character of GF(q), q = p^k: +1 on the even powers of a primitive element.

#define QUAROT__HAD_MAXDIV 768   // odd numbers below 2^32 have at most 640 divisors
#define QUAROT__HAD_MAXP 10      // ... and at most 9 distinct prime factors
#define QUAROT__HAD_INF 127      // emin of an odd part with no construction (within the exponent cap)

static int quarot__hadtable_get(int64_t n, uint32_t* back_mask, const char** hex);   // in the tables section below

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
// or back-circulant (shifted left by r), first rows as packed bits (see >>hadtables).
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

// >>hadtables
// Hadamard matrices no construction here reaches, as 4x4 arrays of circulant / back-circulant
// blocks of size m = N/4 (Williamson and Goethals-Seidel arrays):
//     H[bi*m + r][bj*m + j] = s(bi, bj, (j - r) mod m)   block circulant,
//                             s(bi, bj, (j + r) mod m)   block back-circulant (bit 4*bi+bj of mask),
// s(bi, bj, c) = bit (4*bi + bj)*m + c of the hex string (4 bits a digit, MSB first), 1 = -1.
// Generated by tools/gen_hadtables.py, which checks H*H^T = N*I and that this rebuild gives the
// source file back. 22 orders, 4836 bytes of signs.
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

// >>transform
// H_n = H_K (x) H_{2^m}: for a row x viewed as z[K][M] (M = 2^m), x*H_n = mix_K(fwht_M(z)) where
//   fwht_M:  for h = 1, 2, ..., M/2: for each pair (j, j+h) with bit h of j clear: (a, b) <- (a+b, a-b)
//   mix_K:   y[i][j] = sum_k c(k, i) * z[k][j], c = H_K (forward) or H_K^T (transpose), summed in
//            blocks of b consecutive k (declaration notes, step 3)
// then post-signs and the 1/sqrt(n) scale as separate multiplies. The _ref functions below are the
// specification; >>transform_simd holds the SIMD kernels and the per-ISA selection. Cost per row:
// n*m adds for the butterflies, about K*n/b for the mixing.

// Kernel signatures shared by every ISA. A row kernel transforms one row of 2^L floats in place:
// x *= pre (if not NULL), butterflies, x *= post (if not NULL), x *= *scale (if not NULL).
typedef void (*quarot__wht_row_fn)(float* x, int L, const float* pre, const float* post, const float* scale);
// A mixing kernel: y[K][M] = mix of z[K][M] with the coefficient panels of one orientation
// (plan->mix_f32 + o * K16 * K), then post-signs and scale; z and y do not overlap.
typedef void (*quarot__mix_fn)(const float* z, float* y, int64_t K, int64_t M, const float* coef,
                               const float* post, const float* scale);
// A blocked mixing kernel (mix_block b > 1, 2^m >= 16): sel = plan->mix_sel for one orientation
// ([K8][nb]), tab the pattern tables in the workspace.
typedef void (*quarot__mixb_fn)(const float* z, float* y, int64_t K, int64_t M, int b, const uint32_t* sel,
                                int64_t nb, float* tab, const float* post, const float* scale);
static quarot__wht_row_fn quarot__wht_row_select(quarot_isa isa);   // in >>transform_simd
static quarot__mix_fn quarot__mix_select(quarot_isa isa);            // NULL for QUAROT_ISA_REF
static quarot__mixb_fn quarot__mixb_select(quarot_isa isa);          // NULL for QUAROT_ISA_REF

// The specification: one row of n = 2^L floats, the textbook in-place butterfly in stage order.
// Every SIMD kernel computes exactly these a + b and a - b, only in another (dependency-respecting)
// order, so the results are the same bits.
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

// The mixing block b for core K and 2^m = M (declaration notes): 1 below 16 columns, else the b in
// 2..8 with the fewest adds plus table stores per column, ceil(K/b) * (2^(b+1) + K).
static int quarot__mix_block(int64_t K, int64_t M) {
    int b, best = 1;
    int64_t cost, best_cost = K * (K + 4);
    if (K <= 1 || M < 16) return 1;
    for (b = 2; b <= 8; ++b) {
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
    quarot_env_free(&p->env, p->mix_sel);
    memset(p, 0, sizeof *p);
}

// Plan: the core K and m from the hadamard module, H_K as bytes, and the mixing data for the SIMD
// kernels (mix_sel patterns when b > 1, float panels when b == 1). Everything else is per call.
QUAROT_API quarot_result quarot_hadamard_plan_init(quarot_hadamard_plan* p, int64_t n, const quarot_env* env) {
    quarot_result r;
    int64_t K, K16, K8, nb, i, k, blk, t;
    size_t kk, bytes;
    int o, b;
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
    if (b > 1) {
        // mix_sel[o][i][blk] = blk*2^b + pattern (bit t-1: c_o(k0+t, i) != g) + 2^(b-1) if g == -1.
        nb = (K + b - 1) / b;
        K8 = (K + 7) / 8 * 8;
        bytes = (size_t)(2 * nb * K8) * sizeof(uint32_t);
        p->mix_sel = (uint32_t*)quarot_env_alloc(&p->env, bytes);
        if (!p->mix_sel) { quarot_hadamard_plan_free(p); return QUAROT_ERR_OUT_OF_MEMORY; }
        memset(p->mix_sel, 0, bytes);
        for (o = 0; o < 2; ++o) {
            for (i = 0; i < K8; ++i) {   // rows K .. K8-1 (never stored) name entry 0 of each block
                for (blk = 0; blk < nb; ++blk) {
                    const int64_t k0 = blk * b;
                    const int8_t g = i >= K ? 1 : o ? p->had_k[i * K + k0] : p->had_k[k0 * K + i];
                    uint32_t sel = ((uint32_t)blk << b) | (g < 0 ? 1u << (b - 1) : 0u);
                    for (t = 1; i < K && t < b && k0 + t < K; ++t)
                        if ((o ? p->had_k[i * K + k0 + t] : p->had_k[(k0 + t) * K + i]) != g) sel |= 1u << (t - 1);
                    p->mix_sel[(o * K8 + i) * nb + blk] = sel;
                }
            }
        }
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

// Bytes of the b > 1 pattern tables: the kernels build 2^b entries (sums and their negations) of at
// most 64 floats per block, for a group of blocks of about QUAROT__MIXB_CACHE bytes at a time.
#define QUAROT__MIXB_CACHE 131072
static size_t quarot__mix_table_bytes(const quarot_hadamard_plan* p) {
    size_t per_block, all, group;
    if (p->mix_block <= 1) return 0;
    per_block = (size_t)64 * sizeof(float) << p->mix_block;
    all = (size_t)((p->K + p->mix_block - 1) / p->mix_block) * per_block;
    group = per_block > QUAROT__MIXB_CACHE ? per_block : QUAROT__MIXB_CACHE;
    return all < group ? all : group;
}

QUAROT_API size_t quarot_hadamard_workspace_size(const quarot_hadamard_plan* p) {
    size_t tab;
    if (!p || p->K <= 1 || p->n <= 0) return 0;
    tab = quarot__mix_table_bytes(p);
    return (size_t)p->n * sizeof(double) + 64 + (tab ? tab + 64 : 0);
}

// Validation shared by the f32 and f64 entry points; *work_out is the 64-byte aligned workspace.
// A plan that plan_init did not fill (zeroed, or freed) is an invalid argument.
static quarot_result quarot__apply_check(const quarot_hadamard_plan* p, const void* x, int64_t rows, int64_t stride,
                                         size_t elem, void* work, size_t work_size, void** work_out) {
    quarot_result r;
    size_t need;
    if (!p || p->n <= 0 || p->K < 1 || (p->K > 1 && !p->had_k) || p->mix_block < 1 || p->mix_block > 8 ||
        (p->mix_block > 1 && !p->mix_sel))
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
    // Forward: x*D*H/sqrt(n) (signs before the butterflies); transpose: x*H^T*D/sqrt(n) (after).
    // H_{2^m} is symmetric, so the transpose only changes the mixing coefficients c(k,i).
    pre = dd.transpose ? NULL : dd.signs;
    post = dd.transpose ? dd.signs : NULL;
    s = (float)(1.0 / sqrt((double)p->n));
    scale = dd.unnormalized ? NULL : &s;
    if (p->K == 1) {
        for (i = 0; i < rows; ++i) row_fn(x + i * stride, p->m, pre, post, scale);
        return QUAROT_OK;
    }
    // K > 1: z = fwht_M(x * pre) in the workspace, then x = mix_K(z) * post * scale. Workspace
    // layout: z at w (n floats, room for n doubles), the blocked mixing tables after it.
    M = (int64_t)1 << p->m;
    for (i = 0; i < rows; ++i) {
        float* xr = x + i * stride;
        float* z = (float*)w;
        memcpy(z, xr, (size_t)p->n * sizeof(float));
        for (k = 0; k < p->K; ++k) row_fn(z + k * M, p->m, pre ? pre + k * M : NULL, NULL, NULL);
        // Mixing kernel by plan layout: blocked tables (b > 1), float panels, or the scalar spec.
        if (mixb_fn && p->mix_block > 1) {
            const int64_t nb = (p->K + p->mix_block - 1) / p->mix_block, K8 = (p->K + 7) / 8 * 8;
            float* tab = (float*)(((uintptr_t)(z + p->n * 2) + 63) & ~(uintptr_t)63);   // after n doubles
            mixb_fn(z, xr, p->K, M, p->mix_block, p->mix_sel + (dd.transpose ? nb * K8 : 0), nb, tab, post, scale);
        } else if (mix_fn && p->mix_f32) {
            const int64_t K16 = (p->K + 63) / 64 * 64;
            mix_fn(z, xr, p->K, M, p->mix_f32 + (dd.transpose ? K16 * p->K : 0), post, scale);
        } else {
            quarot__mix_f32_ref(z, xr, p->K, M, p->had_k, dd.transpose, p->mix_block, post, scale);
        }
    }
    return QUAROT_OK;
}

// The f64 path: the same specification in double, scalar only (weights are rotated once, offline).
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
    // signs_f64 wins; otherwise the float signs are read exactly as doubles. The mixing uses the
    // same block size b as the f32 path, so f32 and f64 differ only by rounding.
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
        quarot__mix_f64_ref(z, xr, p->K, M, p->had_k, dd.transpose, p->mix_block, post, post32, scale);
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
#define QUAROT__WITH(x) x      // blocks run the in-lane stages (they hold the lowest bits) ...
#define QUAROT__WITHOUT(x)     // ... passes over larger strides do not
#define QUAROT__NET1(a0)       // one register: no vector stage

// The FWHT kernels of one ISA: quarot__wht_blk_f32_<isa> (the W*2^lv floats at p, all in registers),
// quarot__wht_pass_f32_<isa> (stages h, 2h, .., h*2^(r-1) over a region of len floats) and the row
// driver quarot__wht_row_f32_<isa>. Rows shorter than W go to _ref.
#define QUAROT__WHT_DEFINE(isa)                                                                  \
/* [2^lv][W] floats at p: stages h = 1 .. W/2 in lanes, then h = W .. W*2^(lv-1) across registers */ \
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
/* For every base (multiple of h*2^r) and column c < h: the 2^r vectors x[base + c + t*h] hold      \
   bits b .. b+r-1 (h = 2^b) in their register index t, so r stages run on registers. post_row   \
   and scale (last pass only) are indexed like x. */                                             \
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
    /* choose lc: fewest passes, never a 1-bit pass over the whole row */                     \
    for (i = L < QUAROT__WHT_LCHUNK ? L : QUAROT__WHT_LCHUNK, lc = i; i > QUAROT__LOGW; --i) {    \
        const int np = (i - QUAROT__LOGW + QUAROT__LOGR - 1) / QUAROT__LOGR + (L - i + 2) / 3;   \
        if (L - i != 1 && np < best) { best = np; lc = i; }                                      \
    }                                                                                            \
    /* g[0] bits in the register block, g[1 .. nc-1] in chunk passes, the rest over the row */  \
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
/* z, y: [K][M]; coef: the panels of one orientation. Three loops by M: 2W and more, W, below W. */ \
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

// Blocked mixing (mix_block b > 1, M >= 16 >= W), per chunk of NV = min(4, M/W) column vectors and
// per group of blocks whose tables fit in QUAROT__MIXB_CACHE bytes (an L2 share): first the tables, T[e] = z[k0] +-
// z[k0+1] +- ... (bit t-1 of e set: minus z[k0+t]) built level by level, so that every entry is the
// chain of the specification, and T[e + 2^(b-1)] = -T[e]; an entry holds the chunk's NV*W columns.
// Then QUAROT__MIXB_RI outputs at a time add the group's entries named by mix_sel to their running
// sums (NV vectors each), which wait in y between groups: the same order as one long chain.
#define QUAROT__NV1(X, r) X(r, 0)
#define QUAROT__NV2(X, r) X(r, 0) X(r, 1)
#define QUAROT__NV4(X, r) X(r, 0) X(r, 1) X(r, 2) X(r, 3)
#define QUAROT__MRV_DECL(r, v) QUAROT__V a##r##_##v;
#define QUAROT__MRV_LDT(r, v) a##r##_##v = QUAROT__VLD(t_ + v * QUAROT__W);
#define QUAROT__MRV_LDY(r, v) a##r##_##v = QUAROT__VLD(y_ + v * QUAROT__W);
#define QUAROT__MRV_ADD(r, v) a##r##_##v = QUAROT__VADD(a##r##_##v, QUAROT__VLD(t_ + v * QUAROT__W));
#define QUAROT__MRV_OUT(r, v) QUAROT__MA_OUT(o + v * QUAROT__W, a##r##_##v)
#define QUAROT__MRV_ST(r, v) QUAROT__VST(o + v * QUAROT__W, a##r##_##v);
#define QUAROT__MR_DECL(NV, r) NV(QUAROT__MRV_DECL, r) const uint32_t* s##r = sel + (i0 + r) * nb;
#define QUAROT__MR_INIT(NV, r) if (g0 == 0) { const float* t_ = tab + (int64_t)(s##r[0] - base) * ew; NV(QUAROT__MRV_LDT, r) } \
    else { const float* y_ = y + (i0 + r) * M + j0; NV(QUAROT__MRV_LDY, r) }
#define QUAROT__MR_STEP(NV, r) { const float* t_ = tab + (int64_t)(s##r[blk] - base) * ew; NV(QUAROT__MRV_ADD, r) }
#define QUAROT__MR_STORE(NV, r) if (i0 + r < K) { float* o = y + (i0 + r) * M + j0;                \
    if (g1 == nb) { NV(QUAROT__MRV_OUT, r) } else { NV(QUAROT__MRV_ST, r) } }
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
// The output loop over i for NV vectors per output (N = 1, 2, 4).
#define QUAROT__MR_OUTPUTS(N)                                                                    \
    for (i0 = 0; i0 < K; i0 += QUAROT__MIXB_RI) {                                                \
        QUAROT__MIXB_REP(QUAROT__MR_DECL##N)                                                     \
        QUAROT__MIXB_REP(QUAROT__MR_INIT##N)                                                     \
        for (blk = g0 == 0 ? 1 : g0; blk < g1; ++blk) {                                          \
            QUAROT__MIXB_REP(QUAROT__MR_STEP##N)                                                 \
        }                                                                                        \
        QUAROT__MIXB_REP(QUAROT__MR_STORE##N)                                                    \
    }

#define QUAROT__MIXB_DEFINE(isa)                                                                 \
/* z, y: [K][M]; sel: [K8][nb] entries of one orientation; tab: workspace for one group's tables */ \
static void quarot__mixb_f32_##isa(const float* z, float* y, int64_t K, int64_t M, int b,       \
                                    const uint32_t* sel, int64_t nb, float* tab,                 \
                                    const float* post, const float* scale) {                     \
    const QUAROT__V sv = QUAROT__VSET1(scale ? *scale : 1.0f);                                   \
    const int64_t nv = M >= 4 * QUAROT__W ? 4 : M / QUAROT__W, ew = nv * QUAROT__W;              \
    const int64_t half = (int64_t)1 << (b - 1);                                                  \
    const int64_t gfit = QUAROT__MIXB_CACHE / ((int64_t)sizeof(float) * ew) >> b;                   \
    const int64_t gsz = gfit > 0 ? gfit : 1;                                                     \
    int64_t j0, i0, blk, e, hh, k, g0, g1, c;                                                    \
    for (j0 = 0; j0 < M; j0 += ew) {                                                             \
        for (g0 = 0; g0 < nb; g0 = g1) {                                                         \
            const uint32_t base = (uint32_t)(g0 << b);                                           \
            g1 = g0 + gsz < nb ? g0 + gsz : nb;                                                  \
            /* tables of blocks g0 .. g1-1: T = tab + (blk - g0) * 2^b entries of ew floats */ \
            for (blk = g0; blk < g1; ++blk) {                                                    \
                float* T = tab + ((blk - g0) << b) * ew;                                         \
                const int64_t k0 = blk * b;                                                      \
                for (c = 0; c < ew; c += QUAROT__W)                                              \
                    QUAROT__VST(T + c, QUAROT__VLD(z + k0 * M + j0 + c));                        \
                for (k = k0 + 1, hh = 1; k < K && k < k0 + b; ++k, hh *= 2) {                    \
                    for (c = 0; c < ew; c += QUAROT__W) {                                        \
                        const QUAROT__V zk = QUAROT__VLD(z + k * M + j0 + c);                    \
                        for (e = 0; e < hh; ++e) {                                               \
                            const QUAROT__V u = QUAROT__VLD(T + e * ew + c);                     \
                            QUAROT__VST(T + (e + hh) * ew + c, QUAROT__VSUB(u, zk));             \
                            QUAROT__VST(T + e * ew + c, QUAROT__VADD(u, zk));                    \
                        }                                                                        \
                    }                                                                            \
                }                                                                                \
                for (e = 0; e < half * ew; e += QUAROT__W)                                       \
                    QUAROT__VST(T + half * ew + e, QUAROT__VNEG(QUAROT__VLD(T + e)));            \
            }                                                                                    \
            /* outputs: running sums over the group's blocks, NV vectors per output */           \
            if (nv == 4) { QUAROT__MR_OUTPUTS(4) }                                               \
            else if (nv == 2) { QUAROT__MR_OUTPUTS(2) }                                          \
            else { QUAROT__MR_OUTPUTS(1) }                                                       \
        }                                                                                        \
    }                                                                                            \
}

// ---- Instantiations. Each ISA defines the vector macros, its in-lane stages (one shuffle, one
// xor and one add per stage, see the section notes), the block size LOGR (register budget) and
// the mixing blocking (RI outputs x vectors in flight), expands the three templates, undefines. ----

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
#define QUAROT__VNEG(v) _mm_xor_ps(v, _mm_set1_ps(-0.0f))
#define QUAROT__MIX_RI 4
#define QUAROT__MIX_REP QUAROT__REP4
#define QUAROT__MIX_NB 8
#define QUAROT__MIX_BREP QUAROT__REP8
QUAROT__WHT_DEFINE(sse2)
QUAROT__MIX_DEFINE(sse2)
#define QUAROT__MIXB_RI 2
#define QUAROT__MIXB_REP QUAROT__REP2
QUAROT__MIXB_DEFINE(sse2)
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
#undef QUAROT__VNEG
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
#define QUAROT__VNEG(v) _mm256_xor_ps(v, _mm256_set1_ps(-0.0f))
#define QUAROT__MIX_RI 4
#define QUAROT__MIX_REP QUAROT__REP4
#define QUAROT__MIX_NB 8
#define QUAROT__MIX_BREP QUAROT__REP8
QUAROT__WHT_DEFINE(avx2)
QUAROT__MIX_DEFINE(avx2)
#define QUAROT__MIXB_RI 2
#define QUAROT__MIXB_REP QUAROT__REP2
QUAROT__MIXB_DEFINE(avx2)
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
#undef QUAROT__VNEG
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
#define QUAROT__NEG_(v, m) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), m))
    v = _mm512_add_ps(QUAROT__NEG_(v, n1), _mm512_mask_permute_ps(v, all, v, 0xB1));            // h = 1
    v = _mm512_add_ps(QUAROT__NEG_(v, n2), _mm512_mask_permute_ps(v, all, v, 0x4E));            // h = 2
    v = _mm512_add_ps(QUAROT__NEG_(v, n4), _mm512_mask_shuffle_f32x4(v, all, v, v, 0xB1));      // h = 4
    v = _mm512_add_ps(QUAROT__NEG_(v, n8), _mm512_mask_shuffle_f32x4(v, all, v, v, 0x4E));      // h = 8
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
#define QUAROT__VNEG(v) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT_MIN)))
#define QUAROT__MIX_RI 8
#define QUAROT__MIX_REP QUAROT__REP8
#define QUAROT__MIX_NB 4
#define QUAROT__MIX_BREP QUAROT__REP4
QUAROT__WHT_DEFINE(avx512)
QUAROT__MIX_DEFINE(avx512)
#define QUAROT__MIXB_RI 4
#define QUAROT__MIXB_REP QUAROT__REP4
QUAROT__MIXB_DEFINE(avx512)
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
#undef QUAROT__VNEG
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
#define QUAROT__VNEG(v) vnegq_f32(v)
#define QUAROT__MIX_RI 8
#define QUAROT__MIX_REP QUAROT__REP8
#define QUAROT__MIX_NB 8
#define QUAROT__MIX_BREP QUAROT__REP8
QUAROT__WHT_DEFINE(neon)
QUAROT__MIX_DEFINE(neon)
#define QUAROT__MIXB_RI 4
#define QUAROT__MIXB_REP QUAROT__REP4
QUAROT__MIXB_DEFINE(neon)
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
#undef QUAROT__VNEG
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
