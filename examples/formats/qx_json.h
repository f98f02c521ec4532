/* qx_json.h - a small strict JSON (RFC 8259) parser and writer for config.json, safetensors headers
   and index files.

   Parsing reads the text twice: a first pass validates it and counts values, string bytes and the
   children of every container; the second builds the tree in ONE allocation (the arena) with the
   children of each array/object stored contiguously (so qx_json_at is O(1)). Input is hostile:
   nesting depth, input size and arena size are bounded, strings must be valid UTF-8 without raw
   control characters, \uXXXX escapes (surrogate pairs combined, lone surrogates refused) become
   UTF-8, duplicate object keys are refused, and nothing after the value but whitespace is allowed.
   Errors carry "name: line L, column C: reason" (columns count bytes from 1).

   Numbers keep their token text (written back verbatim) plus a double; integral tokens (no '.'
   and no exponent) that fit int64 are also exact in `i` with is_int set. */
#ifndef QX_JSON_H
#define QX_JSON_H

#include "support/qx_store.h"
#include "support/qx_str.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qx_json_type {
    QX_JSON_NULL = 0,
    QX_JSON_BOOL,
    QX_JSON_NUMBER,
    QX_JSON_STRING,
    QX_JSON_ARRAY,
    QX_JSON_OBJECT
} qx_json_type;

typedef struct qx_json {
    qx_json_type type;
    int boolean;              /* BOOL */
    int is_int;               /* NUMBER: integral token that fits int64 (then i is exact) */
    int64_t i;                /* NUMBER when is_int */
    double d;                 /* NUMBER (always set, finite) */
    const char* str;          /* STRING: decoded UTF-8, NUL-terminated (may hold \u0000: use len);
                                 NUMBER: the token text */
    size_t len;
    const char* key;          /* member name when the value sits in an object, else NULL */
    size_t key_len;
    struct qx_json* items;    /* ARRAY / OBJECT: count children, contiguous */
    size_t count;
} qx_json;

/* Zero fields mean the defaults. */
typedef struct qx_json_opts {
    int max_depth;            /* nesting limit, default 64 (at most 1000) */
    size_t max_size;          /* input size limit, default 256 MiB */
    size_t max_arena;         /* limit of the tree's memory, default 1 GiB */
} qx_json_opts;

typedef struct qx_json_doc {
    qx_json* root;
    void* arena;
} qx_json_doc;

/* Parses text[0..len) (need not be NUL-terminated). `name` (file name) starts error messages. */
quarot_result qx_json_parse(const char* text, size_t len, const char* name, const qx_json_opts* opts,
                            qx_json_doc* doc, qx_err* e);
void qx_json_doc_free(qx_json_doc* doc);

/* Lookups: NULL when v is NULL, of another type, or the key / index is absent. */
const qx_json* qx_json_get(const qx_json* obj, const char* key);
const qx_json* qx_json_at(const qx_json* arr, size_t i);
/* Typed reads: QUAROT_OK, QUAROT_ERR_PARSE for a wrong type (or v NULL), QUAROT_ERR_OVERFLOW for
   a number that is not an exact int64 (fractions, or beyond 2^53 unless the token was integral). */
quarot_result qx_json_as_int64(const qx_json* v, int64_t* out);
quarot_result qx_json_as_double(const qx_json* v, double* out);
quarot_result qx_json_as_bool(const qx_json* v, int* out);
/* The string (NUL-terminated) and its length, or NULL when v is not a string. */
const char* qx_json_as_string(const qx_json* v, size_t* len);
/* "null", "boolean", "number", "string", "array", "object". */
const char* qx_json_type_name(qx_json_type t);

/* The writers append to a qx_sb (support/qx_str.h).
   s[0..n) as a quoted JSON string: '"', '\\' and control characters escaped, other bytes as-is. */
void qx_sb_json_string(qx_sb* b, const char* s, size_t n);
/* Shortest decimal that reads back as the same float (for config values like 1e-05). */
void qx_sb_float(qx_sb* b, float x);
/* Writes v as JSON; indent 0 = compact, else that many spaces per level (numbers verbatim). */
void qx_json_write(qx_sb* b, const qx_json* v, int indent);
/* Writes the object obj with some members replaced or added: for each k < n, key[k] gets the
   raw JSON text raw[k] (replacing the member's value in place, or appended at the end when the
   member is absent); a NULL raw[k] removes the member. */
void qx_json_write_patched(qx_sb* b, const qx_json* obj, int indent, const char* const* key,
                           const char* const* raw, int n);

#ifdef __cplusplus
}
#endif
#endif
