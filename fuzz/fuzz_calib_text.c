/* libFuzzer harness for the calibration dataset reader (qx_calib_text_load: the .jsonl / text files
   `quarot calibrate`, `eval --calib-text` and `run` take from users; tests/fuzz.sh builds it with
   ASan + UBSan). The reader takes a path, so each input is written to a temporary file, once named
   .jsonl and once .txt. A .txt load must give the input's bytes back. A .jsonl load that succeeds
   must describe its records consistently: at least one, offsets strictly increasing from 0 to len
   (empty texts are skipped, not kept), len no more than the input, the text NUL-terminated, and no
   more records kept or skipped than the input has lines. Seeds: fuzz/seeds/calib_text. */
#include "eval/qx_calib.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static char g_dir[64];

static int put(const char* path, const uint8_t* data, size_t size) {
    FILE* f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(data, 1, size, f) == size;
    return (fclose(f) == 0) && ok;
}

static void cleanup(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/in.jsonl", g_dir); unlink(p);
    snprintf(p, sizeof p, "%s/in.txt", g_dir); unlink(p);
    rmdir(g_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char jp[128], tp[128];
    qx_calib_text t;
    qx_err e;
    size_t lines = 1, i;
    int64_t k;
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/fuzz_calib_XXXXXX");
        if (!mkdtemp(g_dir)) abort();
        atexit(cleanup);
    }
    snprintf(jp, sizeof jp, "%s/in.jsonl", g_dir);
    snprintf(tp, sizeof tp, "%s/in.txt", g_dir);
    if (!put(jp, data, size) || !put(tp, data, size)) abort();

    if (qx_calib_text_load(tp, &t, &e) != QUAROT_OK || t.jsonl || t.len != size || (size && memcmp(t.text, data, size) != 0))
        abort();
    qx_calib_text_free(&t);

    for (i = 0; i < size; ++i) lines += data[i] == '\n';
    if (qx_calib_text_load(jp, &t, &e) == QUAROT_OK) {
        if (!t.jsonl || t.n_records < 1 || t.len > size || t.text[t.len] != '\0' || !t.rec_off) abort();
        if (t.rec_off[0] != 0 || t.rec_off[t.n_records] != t.len) abort();
        for (k = 0; k < t.n_records; ++k)
            if (t.rec_off[k + 1] <= t.rec_off[k]) abort();
        if ((size_t)(t.n_records + t.n_skipped) > lines) abort();
    }
    qx_calib_text_free(&t);
    return 0;
}
