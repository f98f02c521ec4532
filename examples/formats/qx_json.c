/* qx_json.c - see qx_json.h.

   Two passes over the text with the same recursive-descent code:
     pass 1 (build = 0): validate, count n_nodes, string bytes, and the children of each container
                         in preorder (counts[]);
     pass 2 (build = 1): one arena = [n_nodes nodes][string bytes]; a container takes the next
                         counts[] entry and reserves that many contiguous nodes for its children. */
#include "formats/qx_json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QX_JSON_DEFAULT_DEPTH 64
#define QX_JSON_MAX_DEPTH 1000
#define QX_JSON_DEFAULT_SIZE ((size_t)256 << 20)
#define QX_JSON_DEFAULT_ARENA ((size_t)1 << 30)

typedef struct qx__jp {
    const char* text;
    const char* p;
    const char* end;
    const char* name;
    qx_err* err;
    int depth, max_depth, build;
    size_t n_nodes, n_bytes;      /* pass 1 totals */
    size_t* counts;               /* children per container, preorder */
    size_t n_counts, cap_counts;
    size_t max_members;           /* largest object, for the duplicate-key scratch */
    size_t ci;                    /* pass 2: next counts[] entry */
    qx_json* nodes;               /* pass 2: node pool */
    size_t ni;
    char* bytes;                  /* pass 2: string pool */
    size_t bi;
    const qx_json** scratch;      /* pass 2: max_members pointers for duplicate detection */
    size_t max_arena;             /* pass 1 stops early once the tree could not fit */
} qx__jp;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static quarot_result qx__jfail(qx__jp* jp, const char* at, const char* fmt, ...) {
    char reason[256];
    const char* c;
    long line = 1, col = 1;
    va_list ap;
    if (at > jp->end) at = jp->end;
    for (c = jp->text; c < at; ++c) {
        if (*c == '\n') { ++line; col = 1; } else ++col;
    }
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    qx_err_set(jp->err, "%s: line %ld, column %ld: %s", jp->name, line, col, reason);
    return QUAROT_ERR_PARSE;
}

/* A byte for a message: the character itself when printable, else its hex code. */
static const char* qx__jchar(char c, char buf[8]) {
    unsigned char u = (unsigned char)c;
    if (u >= 0x21 && u < 0x7f) snprintf(buf, 8, "'%c'", c);
    else snprintf(buf, 8, "0x%02x", u);
    return buf;
}

/* RFC 8259 whitespace: space, tab, LF, CR. */
static void qx__jws(qx__jp* jp) {
    while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r')) ++jp->p;
}

/* Four hex digits at p (bounded by end) -> *out; 0 when they are not there. */
static int qx__hex4(const char* p, const char* end, unsigned* out) {
    unsigned v = 0;
    int k;
    if (end - p < 4) return 0;
    for (k = 0; k < 4; ++k) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* Length of the UTF-8 sequence at p (1..4), or 0 when it is invalid (overlong, surrogate, beyond
   U+10FFFF, truncated, bad continuation). p[0] >= 0x80. */
static int qx__utf8_len(const unsigned char* p, const unsigned char* end) {
    unsigned char c = p[0];
    int n, k;
    unsigned char lo = 0x80, hi = 0xbf;       /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;              /* no overlongs */
        if (c == 0xed) hi = 0x9f;              /* no surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;              /* <= U+10FFFF */
    } else return 0;
    if (end - p < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (k = 2; k < n; ++k)
        if (p[k] < 0x80 || p[k] > 0xbf) return 0;
    return n;
}

/* Parses a string at jp->p (on the opening quote). Pass 2 writes the decoded bytes and a NUL at
   out; both passes return the decoded length in *len. */
static quarot_result qx__jstring(qx__jp* jp, char* out, size_t* len) {
    const char* start = jp->p;
    size_t n = 0;
    ++jp->p;
    for (;;) {
        unsigned char c;
        if (jp->p >= jp->end) return qx__jfail(jp, start, "unterminated string");
        c = (unsigned char)*jp->p;
        if (c == '"') { ++jp->p; break; }
        if (c == '\\') {
            char buf[4];
            int nb = 1;
            const char* esc = jp->p;
            if (jp->end - jp->p < 2) return qx__jfail(jp, start, "unterminated string");
            switch (jp->p[1]) {
                case '"': buf[0] = '"'; break;
                case '\\': buf[0] = '\\'; break;
                case '/': buf[0] = '/'; break;
                case 'b': buf[0] = '\b'; break;
                case 'f': buf[0] = '\f'; break;
                case 'n': buf[0] = '\n'; break;
                case 'r': buf[0] = '\r'; break;
                case 't': buf[0] = '\t'; break;
                case 'u': {
                    unsigned cp, lo;
                    if (!qx__hex4(jp->p + 2, jp->end, &cp)) return qx__jfail(jp, esc, "bad \\u escape (needs 4 hex digits)");
                    jp->p += 4;
                    if (cp >= 0xdc00 && cp <= 0xdfff) return qx__jfail(jp, esc, "lone low surrogate \\u%04x", cp);
                    if (cp >= 0xd800 && cp <= 0xdbff) {          /* high surrogate: a low one must follow */
                        if (jp->end - jp->p < 8 || jp->p[2] != '\\' || jp->p[3] != 'u' ||
                            !qx__hex4(jp->p + 4, jp->end, &lo) || lo < 0xdc00 || lo > 0xdfff)
                            return qx__jfail(jp, esc, "high surrogate \\u%04x without a low surrogate", cp);
                        jp->p += 6;
                        cp = 0x10000u + ((cp - 0xd800u) << 10) + (lo - 0xdc00u);
                    }
                    if (cp < 0x80) buf[0] = (char)cp;
                    else if (cp < 0x800) {
                        buf[0] = (char)(0xc0 | (cp >> 6)); buf[1] = (char)(0x80 | (cp & 0x3f)); nb = 2;
                    } else if (cp < 0x10000) {
                        buf[0] = (char)(0xe0 | (cp >> 12)); buf[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
                        buf[2] = (char)(0x80 | (cp & 0x3f)); nb = 3;
                    } else {
                        buf[0] = (char)(0xf0 | (cp >> 18)); buf[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
                        buf[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); buf[3] = (char)(0x80 | (cp & 0x3f)); nb = 4;
                    }
                    break;
                }
                default: {
                    char cb[8];
                    return qx__jfail(jp, esc, "invalid escape \\%s", qx__jchar(jp->p[1], cb));
                }
            }
            jp->p += 2;
            if (out) memcpy(out + n, buf, (size_t)nb);
            n += (size_t)nb;
            continue;
        }
        if (c < 0x20) return qx__jfail(jp, jp->p, "raw control character 0x%02x in string (must be escaped)", c);
        if (c < 0x80) {
            if (out) out[n] = (char)c;
            ++n;
            ++jp->p;
        } else {
            int k = qx__utf8_len((const unsigned char*)jp->p, (const unsigned char*)jp->end);
            if (!k) return qx__jfail(jp, jp->p, "invalid UTF-8 in string");
            if (out) memcpy(out + n, jp->p, (size_t)k);
            n += (size_t)k;
            jp->p += k;
        }
    }
    if (out) out[n] = '\0';
    *len = n;
    return QUAROT_OK;
}

/* strtod on a token that is not NUL-terminated (the C locale's '.' is assumed: the examples never
   call setlocale). Returns 0 when the value overflows a double. */
static int qx__jstrtod(const char* s, size_t n, double* out) {
    char small[64];
    char* buf = small;
    double v;
    if (n >= sizeof small) {
        buf = (char*)malloc(n + 1);
        if (!buf) return -1;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    v = strtod(buf, NULL);
    if (buf != small) free(buf);
    if (errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL)) return 0;
    *out = v;
    return 1;
}

/* A number token: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, kept as text; integral tokens are
   accumulated exactly when they fit int64, others go through strtod (overflow to Inf refused). */
static quarot_result qx__jnumber(qx__jp* jp, qx_json* v) {
    const char* s = jp->p;
    const char* e = jp->end;
    const char* q = s;
    int neg = 0, integral = 1, fits = 1, ok;
    int64_t acc = 0;
    size_t n;
    if (q < e && *q == '-') { neg = 1; ++q; }
    if (q >= e || *q < '0' || *q > '9') return qx__jfail(jp, s, "invalid number (a digit must follow '-')");
    if (*q == '0') {
        ++q;
        if (q < e && *q >= '0' && *q <= '9') return qx__jfail(jp, s, "invalid number (leading zero)");
    } else {
        while (q < e && *q >= '0' && *q <= '9') {
            int d = *q - '0';
            /* accumulate negatively so INT64_MIN is exact */
            if (!fits) { /* already beyond int64: just scan */ }
            else if (acc < (INT64_MIN + d) / 10) fits = 0;
            else acc = acc * 10 - d;
            ++q;
        }
    }
    if (q < e && *q == '.') {
        integral = 0;
        ++q;
        if (q >= e || *q < '0' || *q > '9') return qx__jfail(jp, s, "invalid number (digits must follow '.')");
        while (q < e && *q >= '0' && *q <= '9') ++q;
    }
    if (q < e && (*q == 'e' || *q == 'E')) {
        integral = 0;
        ++q;
        if (q < e && (*q == '+' || *q == '-')) ++q;
        if (q >= e || *q < '0' || *q > '9') return qx__jfail(jp, s, "invalid number (digits must follow the exponent)");
        while (q < e && *q >= '0' && *q <= '9') ++q;
    }
    n = (size_t)(q - s);
    if (integral && fits && !neg && acc == INT64_MIN) fits = 0;     /* 9223372036854775808 */
    v->type = QX_JSON_NUMBER;
    v->is_int = integral && fits;
    v->i = v->is_int ? (neg ? acc : -acc) : 0;
    if (v->is_int) v->d = (neg && acc == 0) ? -0.0 : (double)v->i;
    else {
        ok = qx__jstrtod(s, n, &v->d);
        if (ok < 0) return qx__jfail(jp, s, "out of memory");
        if (!ok) return qx__jfail(jp, s, "number out of the range of a double");
    }
    if (jp->build) {
        memcpy(jp->bytes + jp->bi, s, n);
        jp->bytes[jp->bi + n] = '\0';
        v->str = jp->bytes + jp->bi;
        v->len = n;
        jp->bi += n + 1;
    } else {
        jp->n_bytes += n + 1;
    }
    jp->p = q;
    return QUAROT_OK;
}

static quarot_result qx__jvalue(qx__jp* jp, qx_json* v);

/* Object members ordered by key bytes (for duplicate detection). */
static int qx__jkey_cmp(const void* a, const void* b) {
    const qx_json* x = *(const qx_json* const*)a;
    const qx_json* y = *(const qx_json* const*)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c) return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len ? 1 : 0;
}

/* Reserves the counts[] entry of a container in pass 1. */
static quarot_result qx__jpush_count(qx__jp* jp, size_t* slot) {
    /* every container is also a node: past max_arena / sizeof(node) the tree cannot fit anyway */
    if (jp->n_counts >= jp->max_arena / sizeof(qx_json)) return qx__jfail(jp, jp->p, "document too large (too many arrays and objects)");
    if (jp->n_counts == jp->cap_counts) {
        size_t cap = jp->cap_counts ? jp->cap_counts * 2 : 64;
        size_t* c = (size_t*)realloc(jp->counts, cap * sizeof *c);
        if (!c) return qx__jfail(jp, jp->p, "out of memory");
        jp->counts = c;
        jp->cap_counts = cap;
    }
    jp->counts[jp->n_counts] = 0;
    *slot = jp->n_counts++;
    return QUAROT_OK;
}

/* Array or object at jp->p ('[' or '{'). */
static quarot_result qx__jcontainer(qx__jp* jp, qx_json* v, int is_obj) {
    const char* start = jp->p;
    char close = is_obj ? '}' : ']';
    size_t slot = 0, count = 0, expect = 0;
    quarot_result r;
    qx_json dummy;
    if (++jp->depth > jp->max_depth) return qx__jfail(jp, start, "nesting deeper than %d levels", jp->max_depth);
    v->type = is_obj ? QX_JSON_OBJECT : QX_JSON_ARRAY;
    if (jp->build) {
        expect = jp->counts[jp->ci++];
        v->items = expect ? jp->nodes + jp->ni : NULL;
        v->count = expect;
        jp->ni += expect;
    } else if ((r = qx__jpush_count(jp, &slot)) != QUAROT_OK) {
        return r;
    }
    ++jp->p;
    qx__jws(jp);
    if (jp->p < jp->end && *jp->p == close) {
        ++jp->p;
    } else {
        for (;;) {
            qx_json* child = &dummy;
            if (jp->build) {
                if (count >= expect) return qx__jfail(jp, start, "internal error: passes disagree");
                child = &v->items[count];
            }
            memset(child, 0, sizeof *child);
            qx__jws(jp);
            if (is_obj) {
                size_t klen;
                char* kout = jp->build ? jp->bytes + jp->bi : NULL;
                if (jp->p >= jp->end || *jp->p != '"') {
                    char cb[8];
                    if (jp->p >= jp->end) return qx__jfail(jp, jp->p, "unexpected end of input (expected a member name)");
                    return qx__jfail(jp, jp->p, "expected a member name in quotes, found %s", qx__jchar(*jp->p, cb));
                }
                if ((r = qx__jstring(jp, kout, &klen)) != QUAROT_OK) return r;
                if (jp->build) { jp->bi += klen + 1; } else jp->n_bytes += klen + 1;
                qx__jws(jp);
                if (jp->p >= jp->end || *jp->p != ':') return qx__jfail(jp, jp->p, "expected ':' after the member name");
                ++jp->p;
                if ((r = qx__jvalue(jp, child)) != QUAROT_OK) return r;
                child->key = kout;
                child->key_len = klen;
            } else if ((r = qx__jvalue(jp, child)) != QUAROT_OK) {
                return r;
            }
            ++count;
            qx__jws(jp);
            if (jp->p >= jp->end) return qx__jfail(jp, jp->p, "unexpected end of input (unclosed %s)", is_obj ? "object" : "array");
            if (*jp->p == ',') { ++jp->p; continue; }
            if (*jp->p == close) { ++jp->p; break; }
            {
                char cb[8];
                return qx__jfail(jp, jp->p, "expected ',' or '%c', found %s", close, qx__jchar(*jp->p, cb));
            }
        }
    }
    --jp->depth;
    if (!jp->build) {
        jp->counts[slot] = count;
        if (count > SIZE_MAX - jp->n_nodes) return qx__jfail(jp, start, "too many values");
        jp->n_nodes += count;
        if (is_obj && count > jp->max_members) jp->max_members = count;
        return QUAROT_OK;
    }
    if (count != expect) return qx__jfail(jp, start, "internal error: passes disagree");
    if (is_obj && count > 1) {       /* duplicate keys: sort member pointers, compare neighbours */
        size_t k;
        for (k = 0; k < count; ++k) jp->scratch[k] = &v->items[k];
        qsort(jp->scratch, count, sizeof *jp->scratch, qx__jkey_cmp);
        for (k = 1; k < count; ++k)
            if (qx__jkey_cmp(&jp->scratch[k - 1], &jp->scratch[k]) == 0)
                return qx__jfail(jp, start, "duplicate key \"%.*s\" in object",
                                 (int)(jp->scratch[k]->key_len > 100 ? 100 : jp->scratch[k]->key_len), jp->scratch[k]->key);
    }
    return QUAROT_OK;
}

/* Any value at jp->p, dispatched on its first byte. */
static quarot_result qx__jvalue(qx__jp* jp, qx_json* v) {
    char cb[8];
    qx__jws(jp);
    if (jp->p >= jp->end) return qx__jfail(jp, jp->p, "unexpected end of input (expected a value)");
    switch (*jp->p) {
        case '{': return qx__jcontainer(jp, v, 1);
        case '[': return qx__jcontainer(jp, v, 0);
        case '"': {
            size_t len;
            char* out = jp->build ? jp->bytes + jp->bi : NULL;
            quarot_result r = qx__jstring(jp, out, &len);
            if (r != QUAROT_OK) return r;
            v->type = QX_JSON_STRING;
            v->str = out;
            v->len = len;
            if (jp->build) jp->bi += len + 1; else jp->n_bytes += len + 1;
            return QUAROT_OK;
        }
        case 't':
            if (jp->end - jp->p >= 4 && memcmp(jp->p, "true", 4) == 0) {
                v->type = QX_JSON_BOOL; v->boolean = 1; jp->p += 4; return QUAROT_OK;
            }
            break;
        case 'f':
            if (jp->end - jp->p >= 5 && memcmp(jp->p, "false", 5) == 0) {
                v->type = QX_JSON_BOOL; v->boolean = 0; jp->p += 5; return QUAROT_OK;
            }
            break;
        case 'n':
            if (jp->end - jp->p >= 4 && memcmp(jp->p, "null", 4) == 0) {
                v->type = QX_JSON_NULL; jp->p += 4; return QUAROT_OK;
            }
            break;
        default:
            if (*jp->p == '-' || (*jp->p >= '0' && *jp->p <= '9')) return qx__jnumber(jp, v);
            break;
    }
    return qx__jfail(jp, jp->p, "unexpected %s (expected a value)", qx__jchar(*jp->p, cb));
}

/* Runs one pass over the whole text: a value, then only whitespace. */
static quarot_result qx__jdocument(qx__jp* jp, qx_json* root) {
    quarot_result r;
    jp->p = jp->text;
    jp->depth = 0;
    if (jp->end - jp->p >= 3 && memcmp(jp->p, "\xef\xbb\xbf", 3) == 0) jp->p += 3;   /* RFC 8259 allows ignoring a BOM */
    memset(root, 0, sizeof *root);
    if ((r = qx__jvalue(jp, root)) != QUAROT_OK) return r;
    qx__jws(jp);
    if (jp->p != jp->end) {
        char cb[8];
        return qx__jfail(jp, jp->p, "unexpected %s after the end of the value", qx__jchar(*jp->p, cb));
    }
    return QUAROT_OK;
}

quarot_result qx_json_parse(const char* text, size_t len, const char* name, const qx_json_opts* opts,
                            qx_json_doc* doc, qx_err* e) {
    qx__jp jp;
    qx_json root;
    quarot_result r;
    size_t max_size = QX_JSON_DEFAULT_SIZE, max_arena = QX_JSON_DEFAULT_ARENA, node_bytes, total;
    if (!doc) return QUAROT_ERR_INVALID_ARGUMENT;
    doc->root = NULL;
    doc->arena = NULL;
    if (!text && len) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!name) name = "json";
    memset(&jp, 0, sizeof jp);
    jp.text = text ? text : "";
    jp.end = jp.text + len;
    jp.name = name;
    jp.err = e;
    jp.max_depth = QX_JSON_DEFAULT_DEPTH;
    if (opts) {
        if (opts->max_depth > 0) jp.max_depth = opts->max_depth < QX_JSON_MAX_DEPTH ? opts->max_depth : QX_JSON_MAX_DEPTH;
        if (opts->max_size) max_size = opts->max_size;
        if (opts->max_arena) max_arena = opts->max_arena;
    }
    if (len > max_size) {
        qx_err_set(e, "%s: %zu bytes of JSON exceed the limit of %zu", name, len, max_size);
        return QUAROT_ERR_PARSE;
    }
    jp.n_nodes = 1;   /* the root */
    jp.max_arena = max_arena;
    r = qx__jdocument(&jp, &root);
    if (r != QUAROT_OK) { free(jp.counts); return r; }
    /* arena: nodes first (aligned as qx_json), string bytes after */
    if (jp.n_nodes > SIZE_MAX / sizeof(qx_json) || jp.n_bytes > SIZE_MAX - jp.n_nodes * sizeof(qx_json) ||
        (total = jp.n_nodes * sizeof(qx_json) + jp.n_bytes) > max_arena) {
        qx_err_set(e, "%s: document too large (%zu values, %zu string bytes; limit %zu bytes of memory)",
                   name, jp.n_nodes, jp.n_bytes, max_arena);
        free(jp.counts);
        return QUAROT_ERR_PARSE;
    }
    node_bytes = jp.n_nodes * sizeof(qx_json);
    doc->arena = malloc(total ? total : 1);
    jp.scratch = (const qx_json**)malloc((jp.max_members ? jp.max_members : 1) * sizeof *jp.scratch);
    if (!doc->arena || !jp.scratch) {
        free(doc->arena); free(jp.scratch); free(jp.counts);
        doc->arena = NULL;
        qx_err_set(e, "%s: out of memory for the JSON tree", name);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    jp.build = 1;
    jp.nodes = (qx_json*)doc->arena;
    jp.ni = 1;
    jp.bytes = (char*)doc->arena + node_bytes;
    r = qx__jdocument(&jp, &jp.nodes[0]);
    free(jp.scratch);
    free(jp.counts);
    if (r != QUAROT_OK) { free(doc->arena); doc->arena = NULL; return r; }
    if (jp.ni != jp.n_nodes || jp.bi != jp.n_bytes) {
        free(doc->arena); doc->arena = NULL;
        qx_err_set(e, "%s: internal error: JSON passes disagree", name);
        return QUAROT_ERR_INTERNAL;
    }
    doc->root = jp.nodes;
    return QUAROT_OK;
}

void qx_json_doc_free(qx_json_doc* doc) {
    if (!doc) return;
    free(doc->arena);
    doc->arena = NULL;
    doc->root = NULL;
}

/* ---- lookups ---- */

const qx_json* qx_json_get(const qx_json* obj, const char* key) {
    size_t k, n;
    if (!obj || obj->type != QX_JSON_OBJECT || !key) return NULL;
    n = strlen(key);
    for (k = 0; k < obj->count; ++k)
        if (obj->items[k].key_len == n && memcmp(obj->items[k].key, key, n) == 0) return &obj->items[k];
    return NULL;
}

const qx_json* qx_json_at(const qx_json* arr, size_t i) {
    if (!arr || arr->type != QX_JSON_ARRAY || i >= arr->count) return NULL;
    return &arr->items[i];
}

quarot_result qx_json_as_int64(const qx_json* v, int64_t* out) {
    if (!v || v->type != QX_JSON_NUMBER || !out) return QUAROT_ERR_PARSE;
    if (v->is_int) { *out = v->i; return QUAROT_OK; }
    /* 1e3 or 4096.0: exact integers within +-2^53 are accepted */
    if (v->d != floor(v->d) || fabs(v->d) > 9007199254740992.0) return QUAROT_ERR_OVERFLOW;
    *out = (int64_t)v->d;
    return QUAROT_OK;
}

quarot_result qx_json_as_double(const qx_json* v, double* out) {
    if (!v || v->type != QX_JSON_NUMBER || !out) return QUAROT_ERR_PARSE;
    *out = v->d;
    return QUAROT_OK;
}

quarot_result qx_json_as_bool(const qx_json* v, int* out) {
    if (!v || v->type != QX_JSON_BOOL || !out) return QUAROT_ERR_PARSE;
    *out = v->boolean;
    return QUAROT_OK;
}

const char* qx_json_as_string(const qx_json* v, size_t* len) {
    if (!v || v->type != QX_JSON_STRING) return NULL;
    if (len) *len = v->len;
    return v->str;
}

const char* qx_json_type_name(qx_json_type t) {
    switch (t) {
        case QX_JSON_NULL: return "null";
        case QX_JSON_BOOL: return "boolean";
        case QX_JSON_NUMBER: return "number";
        case QX_JSON_STRING: return "string";
        case QX_JSON_ARRAY: return "array";
        case QX_JSON_OBJECT: return "object";
    }
    return "?";
}

/* ---- writer ---- */

void qx_sb_json_string(qx_sb* b, const char* s, size_t n) {
    size_t k, run = 0;
    qx_sb_put(b, "\"", 1);
    for (k = 0; k < n; ++k) {
        unsigned char c = (unsigned char)s[k];
        const char* esc = NULL;
        char ubuf[8];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) { snprintf(ubuf, sizeof ubuf, "\\u%04x", c); esc = ubuf; }
        if (!esc) { ++run; continue; }
        qx_sb_put(b, s + k - run, run);   /* the plain bytes before this one */
        run = 0;
        qx_sb_puts(b, esc);
    }
    qx_sb_put(b, s + n - run, run);
    qx_sb_put(b, "\"", 1);
}

void qx_sb_float(qx_sb* b, float x) {
    char buf[32];
    int prec;
    if (x != x || x - x != 0.0f) { qx_sb_puts(b, "null"); return; }   /* NaN / Inf have no JSON form */
    if (x > -1e15f && x < 1e15f && x == (float)(int64_t)x) {   /* integral: 10000.0, not 1e+04 */
        qx_sb_printf(b, "%.1f", (double)x);
        return;
    }
    for (prec = 1; prec <= 9; ++prec) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    /* keep it a JSON number that reads as floating point in Python too ("1" -> "1.0") */
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    qx_sb_puts(b, buf);
}

/* Newline and indentation for pretty output (nothing when compact). */
static void qx__sb_indent(qx_sb* b, int indent, int level) {
    int k;
    if (indent <= 0) return;
    qx_sb_put(b, "\n", 1);
    for (k = 0; k < indent * level; ++k) qx_sb_put(b, " ", 1);
}

/* Recursive writer; depth is that of a parsed document, so bounded by its max_depth. */
static void qx__jwrite(qx_sb* b, const qx_json* v, int indent, int level) {
    size_t k;
    switch (v->type) {
        case QX_JSON_NULL: qx_sb_puts(b, "null"); return;
        case QX_JSON_BOOL: qx_sb_puts(b, v->boolean ? "true" : "false"); return;
        case QX_JSON_NUMBER:
            if (v->str) qx_sb_put(b, v->str, v->len);
            else if (v->is_int) qx_sb_printf(b, "%lld", (long long)v->i);
            else qx_sb_printf(b, "%.17g", v->d);
            return;
        case QX_JSON_STRING: qx_sb_json_string(b, v->str, v->len); return;
        case QX_JSON_ARRAY:
        case QX_JSON_OBJECT: {
            int obj = v->type == QX_JSON_OBJECT;
            qx_sb_put(b, obj ? "{" : "[", 1);
            for (k = 0; k < v->count; ++k) {
                if (k) qx_sb_put(b, ",", 1);
                qx__sb_indent(b, indent, level + 1);
                if (obj) {
                    qx_sb_json_string(b, v->items[k].key, v->items[k].key_len);
                    qx_sb_puts(b, indent > 0 ? ": " : ":");
                }
                qx__jwrite(b, &v->items[k], indent, level + 1);
            }
            if (v->count) qx__sb_indent(b, indent, level);
            qx_sb_put(b, obj ? "}" : "]", 1);
            return;
        }
    }
}

void qx_json_write(qx_sb* b, const qx_json* v, int indent) {
    if (!b || !v) return;
    qx__jwrite(b, v, indent, 0);
}

static void qx__jmember(qx_sb* b, int* first, int indent, const char* key, size_t key_len) {
    if (!*first) qx_sb_put(b, ",", 1);
    *first = 0;
    qx__sb_indent(b, indent, 1);
    qx_sb_json_string(b, key, key_len);
    qx_sb_puts(b, indent > 0 ? ": " : ":");
}

void qx_json_write_patched(qx_sb* b, const qx_json* obj, int indent, const char* const* key,
                           const char* const* raw, int n) {
    size_t k;
    int j, first = 1;
    if (!b || !obj || obj->type != QX_JSON_OBJECT) return;
    qx_sb_put(b, "{", 1);
    for (k = 0; k < obj->count; ++k) {          /* existing members: verbatim, replaced or removed */
        const qx_json* m = &obj->items[k];
        for (j = 0; j < n; ++j)
            if (strlen(key[j]) == m->key_len && memcmp(key[j], m->key, m->key_len) == 0) break;
        if (j < n && !raw[j]) continue;
        qx__jmember(b, &first, indent, m->key, m->key_len);
        if (j < n) qx_sb_puts(b, raw[j]);
        else qx__jwrite(b, m, indent, 1);
    }
    for (j = 0; j < n; ++j) {                   /* members the object did not have */
        if (!raw[j] || qx_json_get(obj, key[j])) continue;
        qx__jmember(b, &first, indent, key[j], strlen(key[j]));
        qx_sb_puts(b, raw[j]);
    }
    if (!first) qx__sb_indent(b, indent, 0);
    qx_sb_put(b, "}", 1);
}
