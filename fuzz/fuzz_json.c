/* libFuzzer harness of qx_json (and the config.json mapping on top of it).

   Whatever the bytes: no crash, no out-of-bounds access, no leak; a document that parses must
   write back (qx_json_write) to text that parses again and writes to the same text (the writer
   is a fixed point). Seeds: fuzz/seeds/json/, written by the tests
   (mkdir -p fuzz/seeds/json fuzz/seeds/safetensors fuzz/seeds/gguf && QX_SEEDS_DIR=fuzz/seeds make test). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/qx_json.h"
#include "formats/qx_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* Touches every node through the typed accessors. */
static void walk(const qx_json* v, int depth) {
    size_t k, len;
    int64_t i;
    double d;
    int b;
    (void)qx_json_as_int64(v, &i);
    (void)qx_json_as_double(v, &d);
    (void)qx_json_as_bool(v, &b);
    (void)qx_json_as_string(v, &len);
    if (v->type == QX_JSON_OBJECT || v->type == QX_JSON_ARRAY) {
        for (k = 0; k < v->count; ++k) {
            if (v->type == QX_JSON_OBJECT && qx_json_get(v, v->items[k].key) == NULL && !memchr(v->items[k].key, 0, v->items[k].key_len))
                __builtin_trap();                      /* a member must be found by its own key */
            walk(&v->items[k], depth + 1);
        }
        if (v->type == QX_JSON_ARRAY && v->count && qx_json_at(v, v->count - 1) != &v->items[v->count - 1]) __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    qx_json_doc doc, doc2;
    qx_json_opts o;
    qx_err e;
    quarot_model_config c;
    memset(&o, 0, sizeof o);
    o.max_depth = 48;
    if (qx_json_parse((const char*)data, size, "fuzz", &o, &doc, &e) == QUAROT_OK) {
        qx_sb a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        walk(doc.root, 0);
        qx_json_write(&a, doc.root, size % 3);
        if (a.failed) __builtin_trap();
        if (qx_json_parse(a.p, a.len, "again", &o, &doc2, &e) != QUAROT_OK) __builtin_trap();
        qx_sb_free(&a);
        qx_json_write(&a, doc.root, 0);
        qx_json_write(&b, doc2.root, 0);
        if (a.len != b.len || memcmp(a.p, b.p, a.len) != 0) __builtin_trap();
        qx_sb_free(&a);
        qx_sb_free(&b);
        qx_json_doc_free(&doc2);
        qx_json_doc_free(&doc);
    }
    (void)qx_hf_config_parse((const char*)data, size, "config.json", &c, &e);
    return 0;
}
