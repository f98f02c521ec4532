/* qt.h - the tiny test harness of quarot.h's test programs.

   Each tests/test_*.c is one program: it runs its test functions with QT_RUN, each function fails
   if any QT_* check inside it fails, and main ends with `return qt_finish("test_name");`, which
   prints "test_name: N passed, M failed, K skipped". tests/run.sh adds those lines up.

   Tests that need ../shared call qt_shared_path(); when the folder is absent they call QT_SKIP, which
   returns, so a clone without it still runs cleanly. QT_QUICK=1 in the environment asks tests to use
   smaller sizes (qemu and sanitizer runs); qt_quick() reads it. A test that takes a second or more
   shows its wall time on its "ok" / "FAIL" line, so a CI log tells where the minutes go. */
#ifndef QT_H
#define QT_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__) || defined(__clang__)
#define QT_UNUSED __attribute__((unused))
#else
#define QT_UNUSED
#endif

static int qt__passed, qt__failed, qt__skipped;
static int qt__cur_failures, qt__cur_skipped;
static const char* qt__cur_name = "";

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
QT_UNUSED static void qt__fail(const char* file, int line, const char* fmt, ...) {
    va_list ap;
    if (++qt__cur_failures > 8) return;   /* the first few failures of a test say enough */
    fprintf(stdout, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

#define QT_CHECK(cond) \
    do { if (!(cond)) qt__fail(__FILE__, __LINE__, "check failed: %s", #cond); } while (0)
#define QT_CHECKF(cond, ...) \
    do { if (!(cond)) qt__fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define QT_EQ_INT(a, b) \
    do { long long qt__a = (long long)(a), qt__b = (long long)(b); \
         if (qt__a != qt__b) qt__fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, qt__a, qt__b); } while (0)
/* |a - b| <= tol */
#define QT_NEAR(a, b, tol) \
    do { double qt__a = (double)(a), qt__b = (double)(b), qt__t = (double)(tol); \
         if (!(fabs(qt__a - qt__b) <= qt__t)) \
             qt__fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (|diff| %.3g > %.3g)", #a, #b, qt__a, qt__b, fabs(qt__a - qt__b), qt__t); } while (0)
/* expr returns QUAROT_OK */
#define QT_OK(expr) \
    do { int qt__r = (int)(expr); \
         if (qt__r != 0) qt__fail(__FILE__, __LINE__, "%s returned %d (%s)", #expr, qt__r, quarot_result_string((quarot_result)qt__r)); } while (0)
/* expr returns the given error code */
#define QT_ERR(expr, code) \
    do { int qt__r = (int)(expr); \
         if (qt__r != (int)(code)) qt__fail(__FILE__, __LINE__, "%s returned %d (%s), expected %s", #expr, qt__r, quarot_result_string((quarot_result)qt__r), #code); } while (0)
/* Marks the current test skipped and returns from it (test functions return void). */
#define QT_SKIP(reason) \
    do { qt__cur_skipped = 1; fprintf(stdout, "  skip %s: %s\n", qt__cur_name, reason); return; } while (0)

#define QT_RUN(fn) qt__run(#fn, fn)

QT_UNUSED static double qt_now(void) {   /* seconds, monotonic (tests that time a run use it too) */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

QT_UNUSED static void qt__run(const char* name, void (*fn)(void)) {
    char took[32] = "";
    double t0 = qt_now(), dt;
    qt__cur_name = name;
    qt__cur_failures = 0;
    qt__cur_skipped = 0;
    fn();
    dt = qt_now() - t0;
    if (dt >= 1.0) snprintf(took, sizeof took, " (%.1f s)", dt);
    if (qt__cur_failures) {
        ++qt__failed;
        fprintf(stdout, "  FAIL %s (%d failed checks)%s\n", name, qt__cur_failures, took);
    } else if (qt__cur_skipped) {
        ++qt__skipped;
    } else {
        ++qt__passed;
        fprintf(stdout, "  ok   %s%s\n", name, took);
    }
    fflush(stdout);
}

QT_UNUSED static int qt_finish(const char* program) {
    fprintf(stdout, "%s: %d passed, %d failed, %d skipped\n", program, qt__passed, qt__failed, qt__skipped);
    return qt__failed ? 1 : 0;
}

/* max |x - ref| / max |ref| over n floats, in double (max |x - ref| when ref is all zero). */
QT_UNUSED static double qt_rel_diff(const float* x, const float* ref, int64_t n) {
    double mx = 0.0, md = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) {
        if (fabs((double)ref[i]) > mx) mx = fabs((double)ref[i]);
        if (fabs((double)x[i] - (double)ref[i]) > md) md = fabs((double)x[i] - (double)ref[i]);
    }
    return mx > 0.0 ? md / mx : md;
}

/* The same over n doubles. */
QT_UNUSED static double qt_rel_diff_f64(const double* x, const double* ref, int64_t n) {
    double mx = 0.0, md = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) {
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
        if (fabs(x[i] - ref[i]) > md) md = fabs(x[i] - ref[i]);
    }
    return mx > 0.0 ? md / mx : md;
}

QT_UNUSED static int qt_quick(void) {
    const char* q = getenv("QT_QUICK");
    return q && q[0] && q[0] != '0';
}

/* Whether the programs run through an emulator ($QT_RUNNER non-empty, e.g. qemu-aarch64): resident
   memory is then the emulator's. make test always sets the variable, empty on the host. */
QT_UNUSED static int qt_emulated(void) {
    const char* r = getenv("QT_RUNNER");
    return r && r[0];
}

/* Path of a file under the shared data folder ($QUAROT_SHARED, default ../shared), or NULL when
   it does not exist. Returns a static buffer (tests are single-threaded). */
QT_UNUSED static const char* qt_shared_path(const char* rel) {
    static char buf[4096];
    const char* root = getenv("QUAROT_SHARED");
    FILE* f;
    if (!root || !root[0]) root = "../shared";
    if (strlen(root) + strlen(rel) + 2 > sizeof buf) return NULL;
    memcpy(buf, root, strlen(root));   /* not sprintf: gcc 12 -O2 flags "%s/%s" as overflowing */
    buf[strlen(root)] = '/';
    memcpy(buf + strlen(root) + 1, rel, strlen(rel) + 1);
    f = fopen(buf, "rb");
    if (!f) return NULL;
    fclose(f);
    return buf;
}

/* The float with bit pattern u, and the value of IEEE binary16 h by the definition
   (-1)^s 2^(e-15) (1 + m/1024), subnormals 2^-14 m/1024: oracles of the format conversion tests. */
QT_UNUSED static float qt_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
QT_UNUSED static double qt_f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) return m ? NAN : ((h & 0x8000) ? -INFINITY : INFINITY);
    v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
    return (h & 0x8000) ? -v : v;
}

/* The whole file at path, NUL-terminated, in a new malloc'ed buffer (*n, when n is not NULL: its
   length); NULL when it cannot be read. */
QT_UNUSED static char* qt_read_file(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    char* buf;
    long len;
    if (n) *n = 0;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) { fclose(f); return NULL; }
    buf = (char*)malloc((size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) { free(buf); buf = NULL; }
    fclose(f);
    if (!buf) return NULL;
    buf[len] = '\0';
    if (n) *n = (size_t)len;
    return buf;
}

/* Writes n bytes to path (created or truncated); 1 on success, 0 on failure. */
QT_UNUSED static int qt_write_file(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Deterministic test data: a small LCG, independent of the library's RNG under test. */
static unsigned long long qt__lcg_state = 0x853c49e6748fea9bULL;
QT_UNUSED static void qt_seed(unsigned long long s) { qt__lcg_state = s * 6364136223846793005ULL + 1442695040888963407ULL; }
QT_UNUSED static double qt_uniform(void) {   /* [0, 1) */
    qt__lcg_state = qt__lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(qt__lcg_state >> 11) * (1.0 / 9007199254740992.0);
}
QT_UNUSED static double qt_normal(void) {    /* Box-Muller; fine for test data */
    double u = qt_uniform(), v = qt_uniform();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
