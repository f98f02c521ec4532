/* stories_util.h - the stories260K model of ../shared for the tests that run it (test_engine.c,
   test_stories.c, test_quantize.c): the model (copied into the store), its tok512.bin tokenizer and
   the eval text as tokens. Each returns 1 when done, 0 when ../shared lacks the file (the caller
   decides whether that skips or fails), -1 (why on stdout) when it cannot be read. Include after
   qt.h. */
#ifndef STORIES_UTIL_H
#define STORIES_UTIL_H

#include <stdio.h>
#include <string.h>

#include "formats/qx_llama2c.h"
#include "tokenizer/qx_tokenizer.h"

QT_UNUSED static int stories_model(qx_store* s) {
    const char* model = qt_shared_path("models/stories260K/stories260K.bin");
    qx_l2c_read_opts ro;
    qx_err e;
    if (!model) return 0;
    memset(&ro, 0, sizeof ro);
    ro.copy = 1;
    if (qx_l2c_read_file(model, &ro, s, &e) != QUAROT_OK) { printf("    %s\n", e.msg); return -1; }
    return 1;
}

QT_UNUSED static int stories_tokenizer(qx_tokenizer* t) {
    const char* p = qt_shared_path("models/stories260K/tok512.bin");
    qx_err e;
    if (!p) return 0;
    if (qx_tokenizer_load(t, p, 512, &e) != QUAROT_OK) { printf("    %s\n", e.msg); return -1; }
    return 1;
}

/* data/tinystories_eval.txt through t, no BOS / EOS (free *tokens with free()). */
QT_UNUSED static int stories_eval_tokens(const qx_tokenizer* t, int32_t** tokens, int64_t* n) {
    const char* p = qt_shared_path("data/tinystories_eval.txt");
    qx_err e;
    if (!p) return 0;
    if (qx_tokenize_file(t, p, 0, 0, tokens, n, &e) != QUAROT_OK) { printf("    %s\n", e.msg); return -1; }
    return 1;
}

#endif
