/* qx_yaml.h - a strict subset of YAML 1.2 for msModelSlim-style configuration files.

   What is read (everything msModelSlim's documented examples use):
     - block mappings (`key: value`, keys plain or quoted) and block sequences (`- item`), nested by
       indentation with spaces; a sequence may sit at its key's indentation (`key:` then `- a`);
       `- key: v` starts a mapping inside a sequence item;
     - flow sequences `[a, "b", 3]` and flow mappings `{a: 1}` written on one line (nested allowed);
     - scalars: plain (to the end of the line or a ` #` comment), 'single-quoted' ('' = '),
       "double-quoted" (escapes \\ \" \/ \b \f \n \r \t \0 \xXX \uXXXX \UXXXXXXXX);
     - comments (`#` at the start of a line or after white space), blank lines, one leading `---`;
     - anchors `&name` on a value and aliases `*name` to an earlier, complete anchored value (the
       alias shares the node: no expansion, so no "billion laughs");
     - a UTF-8 byte-order mark at the start.
   What is refused, with the line and column: tabs in indentation, block scalars (| >), tags (!),
   merge keys (<<), complex keys (?), multi-line plain or quoted scalars, flow collections spanning
   lines, directives (%), more than one document, duplicate keys, unknown aliases, anchors redefined,
   invalid UTF-8 and control characters, nesting deeper than 64, more than 100000 nodes.
   Scalars keep their text and style; typing is the reader's: qx_yaml_as_int / _as_bool accept plain
   scalars only (so "20" in quotes is a string, as in YAML), booleans True/False/true/false/TRUE/FALSE.
   Errors: "NAME: line L, column C: reason". */
#ifndef QX_YAML_H
#define QX_YAML_H

#include "support/qx_arena.h"
#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qx_yaml_kind {
    QX_YAML_NULL = 0,          /* an empty value, `~`, `null`, `Null`, `NULL` (plain) */
    QX_YAML_SCALAR,
    QX_YAML_SEQ,
    QX_YAML_MAP
} qx_yaml_kind;

typedef enum qx_yaml_style { QX_YAML_PLAIN = 0, QX_YAML_SINGLE, QX_YAML_DOUBLE } qx_yaml_style;

typedef struct qx_yaml_node qx_yaml_node;

typedef struct qx_yaml_pair {
    const char* key;           /* decoded, NUL-terminated */
    size_t key_len;
    int line, col;             /* of the key */
    qx_yaml_node* value;
} qx_yaml_pair;

struct qx_yaml_node {
    qx_yaml_kind kind;
    qx_yaml_style style;       /* SCALAR */
    int line, col;             /* where the value is written (for an alias: the anchored value) */
    const char* str;           /* SCALAR: decoded text, NUL-terminated (may contain \0: use len) */
    size_t len;
    const char* anchor;        /* `&name` given to this node, or NULL */
    qx_yaml_node** items;      /* SEQ: count items */
    qx_yaml_pair* pairs;       /* MAP: count pairs, in file order */
    size_t count;
    int flow;                  /* SEQ / MAP written as [...] / {...} */
};

typedef struct qx_yaml_doc {
    qx_yaml_node* root;        /* never NULL after a successful parse (a NULL node for an empty file) */
    qx_arena arena;            /* every allocation (zeroed), freed together */
    size_t n_nodes;
} qx_yaml_doc;

/* Parse text[0..len) (need not be NUL-terminated; at most 16 MiB). name starts error messages. */
quarot_result qx_yaml_parse(const char* text, size_t len, const char* name, qx_yaml_doc* doc, qx_err* e);
void qx_yaml_doc_free(qx_yaml_doc* doc);

/* The value of `key` in a mapping (NULL when absent or map is not a mapping); *pair (may be NULL)
   receives the pair (for its line). */
const qx_yaml_node* qx_yaml_get(const qx_yaml_node* map, const char* key, const qx_yaml_pair** pair);
/* Plain scalar that is a decimal integer ([-+]?[0-9]+, no leading zeros beyond "0", fits int64): 1. */
int qx_yaml_as_int(const qx_yaml_node* v, int64_t* out);
/* Plain scalar true/True/TRUE/false/False/FALSE: 1. */
int qx_yaml_as_bool(const qx_yaml_node* v, int* out);
/* A scalar of any style: its text, else NULL. */
const char* qx_yaml_as_str(const qx_yaml_node* v);
/* Short description for messages: "the string 'abc'", "the number 3", "a mapping", "a sequence",
   "null" (text shortened to fit). Returns buf. */
const char* qx_yaml_describe(const qx_yaml_node* v, char* buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
