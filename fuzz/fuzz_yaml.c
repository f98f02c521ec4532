/* libFuzzer harness of qx_yaml (the strict YAML subset of `quarot run`) and of qx_runcfg (the
   msModelSlim configuration read from it).

   Whatever the bytes: no crash, no out-of-bounds access, no leak, no unbounded time (aliases share
   nodes, so the walk below visits each node once per path but stops after a budget). For a parsed
   document: every mapping key is found again by qx_yaml_get (keys are unique), every scalar is
   NUL-terminated at its length, lines and columns are positive, and the typed readers agree with
   each other (a value is never both an integer and a boolean). Seeds: fuzz/seeds/yaml/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/qx_runcfg.h"
#include "formats/qx_yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void walk(const qx_yaml_node* n, int depth, long* budget) {
    size_t i;
    int64_t v;
    int b;
    char d[96];
    if (!n) __builtin_trap();
    if (--*budget < 0 || depth > 80) return;
    if (n->line < 1 || n->col < 1) __builtin_trap();
    (void)qx_yaml_describe(n, d, sizeof d);
    switch (n->kind) {
        case QX_YAML_NULL: break;
        case QX_YAML_SCALAR:
            if (!n->str || n->str[n->len] != '\0') __builtin_trap();
            if (qx_yaml_as_int(n, &v) && qx_yaml_as_bool(n, &b)) __builtin_trap();
            (void)qx_yaml_as_str(n);
            break;
        case QX_YAML_SEQ:
            for (i = 0; i < n->count; ++i) walk(n->items[i], depth + 1, budget);
            break;
        case QX_YAML_MAP:
            for (i = 0; i < n->count; ++i) {
                const qx_yaml_pair* p = NULL;
                if (n->pairs[i].line < 1 || n->pairs[i].key[n->pairs[i].key_len] != '\0') __builtin_trap();
                if (strlen(n->pairs[i].key) == n->pairs[i].key_len &&
                    (qx_yaml_get(n, n->pairs[i].key, &p) != n->pairs[i].value || p != &n->pairs[i]))
                    __builtin_trap();
                walk(n->pairs[i].value, depth + 1, budget);
            }
            break;
        default: __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    qx_yaml_doc doc;
    qx_runcfg cfg;
    qx_err e;
    if (qx_yaml_parse((const char*)data, size, "fuzz.yaml", &doc, &e) == QUAROT_OK) {
        long budget = 200000;
        walk(doc.root, 0, &budget);
        qx_yaml_doc_free(&doc);
    } else if (strncmp(e.msg, "fuzz.yaml: ", 11) != 0) {
        __builtin_trap();                           /* every error names the file */
    }
    if (qx_runcfg_parse((const char*)data, size, "dir/fuzz.yaml", (int)(size & 1), NULL, NULL, &cfg, &e) == QUAROT_OK) {
        int64_t i;
        if (!cfg.stage2.present) __builtin_trap();
        if (cfg.stage1.present && (!cfg.stage1.dataset || strncmp(cfg.stage1.dataset, "dir/", 4) != 0) && cfg.stage1.dataset[0] != '/')
            __builtin_trap();
        for (i = 1; i < cfg.stage2.n_layers; ++i)
            if (cfg.stage2.layers[i] <= cfg.stage2.layers[i - 1]) __builtin_trap();
        qx_runcfg_free(&cfg);
    }
    return 0;
}
