/* bench_util.h - what the benchmark programs share: their clocks and the textbook FWHT they check
   the library's transforms against, and the removal of the files a benchmark wrote. Include after
   the system headers. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

/* rm -r of a file, or of a directory of plain files and directories. */
BENCH_UNUSED static void bench_remove_tree(const char* path) {
    DIR* d = opendir(path);
    struct dirent* de;
    char buf[4096];
    if (!d) { (void)remove(path); return; }
    while ((de = readdir(d)) != NULL) {
        struct stat stt;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        snprintf(buf, sizeof buf, "%s/%s", path, de->d_name);
        if (stat(buf, &stt) == 0 && S_ISDIR(stt.st_mode)) bench_remove_tree(buf);
        else (void)remove(buf);
    }
    closedir(d);
    (void)rmdir(path);
}

#endif
