/* bench_util.h - what the benchmark programs share: their clocks and the textbook FWHT they check
   the library's transforms against. Include after the system headers. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

#if defined(__GNUC__) || defined(__clang__)
#define BENCH_UNUSED __attribute__((unused))
#else
#define BENCH_UNUSED
#endif

BENCH_UNUSED static double bench__clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Seconds on the monotonic wall clock; of this process's CPU time (all threads); of this thread's
   CPU time (close to what a quiet machine shows for one-thread work on a shared one). */
BENCH_UNUSED static double bench_now_s(void) { return bench__clock_s(CLOCK_MONOTONIC); }
BENCH_UNUSED static double bench_cpu_s(void) { return bench__clock_s(CLOCK_PROCESS_CPUTIME_ID); }
BENCH_UNUSED static double bench_thread_cpu_s(void) { return bench__clock_s(CLOCK_THREAD_CPUTIME_ID); }

/* The textbook FWHT of one row of length n (a power of two), unnormalized. */
BENCH_UNUSED static void bench_textbook_fwht(float* x, int64_t n) {
    int64_t h, i, j;
    for (h = 1; h < n; h *= 2)
        for (i = 0; i < n; i += 2 * h)
            for (j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

#endif
