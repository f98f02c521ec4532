/* qx_yaml.c - see qx_yaml.h.

   The text is validated (UTF-8, no control characters) and cut into lines first. Parsing is
   recursive descent over lines with a cursor (line ln, byte pos): every block-level function starts
   at the content of a line (pos = the column where its content begins, which inside "- key: v" is
   a column to the right of the line's indentation) and returns with the cursor on the next line
   holding content (pos = its indentation) or at the end. A block collection at column n continues
   while the next content line is indented exactly n (and is a key line / a "- " entry), ends when it
   is indented less, and any deeper line that nothing consumed is an error. Inline values (scalars,
   aliases, flow collections) never leave their line. Every allocation is recorded in the document
   and freed with it. */
#include "formats/qx_yaml.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QX_YAML_MAX_SIZE ((size_t)16 << 20)
#define QX_YAML_MAX_DEPTH 64
#define QX_YAML_MAX_NODES 100000

typedef struct qx__yline {
    const char* p;
    size_t len;                 /* without the newline (and a final '\r') */
    int indent;                 /* leading spaces */
    int blank;                  /* only white space and/or a comment */
} qx__yline;

typedef struct qx__yanchor {
    const char* name;
    qx_yaml_node* node;
    int line;
} qx__yanchor;

typedef struct qx__yp {
    const char* name;
    qx_err* e;
    qx_yaml_doc* doc;
    qx__yline* lines;
    size_t n_lines;
    size_t ln;                  /* current line (n_lines = end) */
    size_t pos;                 /* byte offset in the current line */
    int depth;
    int failed;
    qx__yanchor* anchors;
    size_t n_anchors, cap_anchors;
} qx__yp;

/* ---- errors and memory -------------------------------------------------------------------- */

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static void* qx__yfail(qx__yp* P, size_t col, const char* fmt, ...) {
    char msg[400];
    va_list ap;
    if (P->failed) return NULL;
    P->failed = 1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (P->ln < P->n_lines) qx_err_set(P->e, "%s: line %d, column %d: %s", P->name, (int)P->ln + 1, (int)col + 1, msg);
    else qx_err_set(P->e, "%s: at the end: %s", P->name, msg);
    return NULL;
}

static void* qx__yalloc(qx__yp* P, size_t n) {
    void* p = qx_arena_calloc(&P->doc->arena, n);
    if (!p) return qx__yfail(P, P->pos, "out of memory");
    return p;
}

static qx_yaml_node* qx__ynode(qx__yp* P, qx_yaml_kind kind, size_t col) {
    qx_yaml_node* n;
    if (P->doc->n_nodes >= QX_YAML_MAX_NODES) return (qx_yaml_node*)qx__yfail(P, col, "more than %d values", QX_YAML_MAX_NODES);
    n = (qx_yaml_node*)qx__yalloc(P, sizeof *n);
    if (!n) return NULL;
    P->doc->n_nodes++;
    n->kind = kind;
    n->line = P->ln < P->n_lines ? (int)P->ln + 1 : (int)P->n_lines;
    n->col = (int)col + 1;
    return n;
}

/* A tracked NUL-terminated copy of s[0..n). */
static char* qx__ystrdup(qx__yp* P, const char* s, size_t n) {
    char* c = (char*)qx__yalloc(P, n + 1);
    if (c && n) memcpy(c, s, n);
    return c;
}

/* ---- the cursor --------------------------------------------------------------------------- */

static const qx__yline* qx__ycur(const qx__yp* P) { return &P->lines[P->ln]; }
static int qx__yws(char c) { return c == ' ' || c == '\t'; }
static char qx__yat(const qx__yp* P, size_t i) { return i < qx__ycur(P)->len ? qx__ycur(P)->p[i] : '\0'; }
static int qx__yend(const qx__yp* P, size_t i) { return i >= qx__ycur(P)->len; }

static void qx__yskip_ws(qx__yp* P) {
    while (!qx__yend(P, P->pos) && qx__yws(qx__yat(P, P->pos))) P->pos++;
}

/* Only white space and maybe a comment left on the line. A '#' starts a comment at the start of
   the line or after white space. */
static int qx__yat_eol(qx__yp* P) {
    qx__yskip_ws(P);
    if (qx__yend(P, P->pos)) return 1;
    return qx__yat(P, P->pos) == '#' && (P->pos == 0 || qx__yws(qx__yat(P, P->pos - 1)));
}

/* Next line with content (the cursor moves past the current one); 0 at the end. Document markers
   and directives at column 0 are refused here. */
static int qx__yadvance(qx__yp* P) {
    P->ln++;
    while (P->ln < P->n_lines && P->lines[P->ln].blank) P->ln++;
    P->pos = 0;
    if (P->ln >= P->n_lines) return 0;
    {
        const qx__yline* L = qx__ycur(P);
        if (L->indent == 0 && L->len >= 3 && (memcmp(L->p, "---", 3) == 0 || memcmp(L->p, "...", 3) == 0) &&
            (L->len == 3 || qx__yws(L->p[3]))) {
            qx__yfail(P, 0, "a second document ('%.3s'): one document per file is supported", L->p);
            return 0;
        }
        if (L->indent == 0 && L->p[0] == '%') {
            qx__yfail(P, 0, "directives ('%%...') are not supported");
            return 0;
        }
    }
    P->pos = (size_t)qx__ycur(P)->indent;
    return 1;
}

static int qx__yeof(const qx__yp* P) { return P->failed || P->ln >= P->n_lines; }

/* "- " or "-" at the end of the line, at pos. */
static int qx__yseq_entry(const qx__yp* P) {
    return qx__yat(P, P->pos) == '-' && (qx__yend(P, P->pos + 1) || qx__yws(qx__yat(P, P->pos + 1)));
}

/* End of a quoted scalar starting at i (the quote); returns the index after the closing quote, or
   0 when it is not closed on this line. */
static size_t qx__yquote_end(const qx__yp* P, size_t i) {
    char q = qx__yat(P, i);
    for (++i; !qx__yend(P, i); ++i) {
        char c = qx__yat(P, i);
        if (q == '"' && c == '\\') { ++i; continue; }
        if (c == q) {
            if (q == '\'' && qx__yat(P, i + 1) == '\'') { ++i; continue; }
            return i + 1;
        }
    }
    return 0;
}

/* Is the content at pos a `key:` (plain or quoted key, ':' followed by white space or the end)? */
static int qx__ykey_line(const qx__yp* P) {
    size_t i = P->pos;
    char c = qx__yat(P, i);
    if (c == '"' || c == '\'') {
        i = qx__yquote_end(P, i);
        if (!i) return 0;
        while (!qx__yend(P, i) && qx__yws(qx__yat(P, i))) ++i;
        return qx__yat(P, i) == ':' && (qx__yend(P, i + 1) || qx__yws(qx__yat(P, i + 1)));
    }
    if (strchr("[]{},#&*!|>%@`", c)) return 0;
    if ((c == '-' || c == '?' || c == ':') && (qx__yend(P, i + 1) || qx__yws(qx__yat(P, i + 1)))) return 0;
    for (; !qx__yend(P, i); ++i) {
        c = qx__yat(P, i);
        if (c == ':' && (qx__yend(P, i + 1) || qx__yws(qx__yat(P, i + 1)))) return 1;
        if (c == '#' && i > P->pos && qx__yws(qx__yat(P, i - 1))) return 0;
    }
    return 0;
}

/* ---- anchors ------------------------------------------------------------------------------ */

/* `&name` at pos (after white space): the name, or NULL when there is none (or on error). */
static const char* qx__yprops(qx__yp* P, size_t* col) {
    size_t s;
    const char* name;
    qx__yskip_ws(P);
    if (qx__yat(P, P->pos) == '!') return (const char*)qx__yfail(P, P->pos, "tags ('!...') are not supported");
    if (qx__yat(P, P->pos) != '&') return NULL;
    *col = P->pos;
    s = ++P->pos;
    while (!qx__yend(P, P->pos) && !qx__yws(qx__yat(P, P->pos)) && !strchr(",[]{}", qx__yat(P, P->pos))) P->pos++;
    if (P->pos == s) return (const char*)qx__yfail(P, *col, "'&' without an anchor name");
    name = qx__ystrdup(P, qx__ycur(P)->p + s, P->pos - s);
    qx__yskip_ws(P);
    if (qx__yat(P, P->pos) == '&') return (const char*)qx__yfail(P, P->pos, "two anchors on one value");
    if (qx__yat(P, P->pos) == '!') return (const char*)qx__yfail(P, P->pos, "tags ('!...') are not supported");
    return name;
}

/* Give node the anchor (once complete, so that an alias can never reach its own ancestor). */
static qx_yaml_node* qx__yanchor_set(qx__yp* P, qx_yaml_node* node, const char* name, size_t col) {
    size_t i;
    if (!node || !name) return node;
    for (i = 0; i < P->n_anchors; ++i)
        if (strcmp(P->anchors[i].name, name) == 0)
            return (qx_yaml_node*)qx__yfail(P, col, "anchor &%s defined again (first on line %d)", name, P->anchors[i].line);
    if (node->anchor) return (qx_yaml_node*)qx__yfail(P, col, "a second anchor &%s on the value of &%s", name, node->anchor);
    if (P->n_anchors == P->cap_anchors) {
        size_t nc = P->cap_anchors ? 2 * P->cap_anchors : 16;
        qx__yanchor* a = (qx__yanchor*)realloc(P->anchors, nc * sizeof *a);
        if (!a) return (qx_yaml_node*)qx__yfail(P, col, "out of memory");
        P->anchors = a;
        P->cap_anchors = nc;
    }
    P->anchors[P->n_anchors].name = name;
    P->anchors[P->n_anchors].node = node;
    P->anchors[P->n_anchors].line = node->line;
    P->n_anchors++;
    node->anchor = name;
    return node;
}

/* ---- scalars ------------------------------------------------------------------------------ */

static size_t qx__yutf8(char* out, uint32_t c) {
    if (c < 0x80) { out[0] = (char)c; return 1; }
    if (c < 0x800) { out[0] = (char)(0xC0 | (c >> 6)); out[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12)); out[1] = (char)(0x80 | ((c >> 6) & 0x3F)); out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18)); out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F)); out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static int qx__yhex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A quoted scalar at pos; the cursor moves past it. */
static qx_yaml_node* qx__yquoted(qx__yp* P) {
    size_t start = P->pos, end = qx__yquote_end(P, P->pos), i, o = 0;
    char q = qx__yat(P, start);
    char* out;
    qx_yaml_node* n;
    if (!end)
        return (qx_yaml_node*)qx__yfail(P, start, "%s string not closed on this line (multi-line strings are not supported)",
                                        q == '"' ? "double-quoted" : "single-quoted");
    n = qx__ynode(P, QX_YAML_SCALAR, start);
    out = n ? (char*)qx__yalloc(P, end - start) : NULL;   /* decoded text is never longer */
    if (!out) return NULL;
    n->style = q == '"' ? QX_YAML_DOUBLE : QX_YAML_SINGLE;
    for (i = start + 1; i < end - 1; ++i) {
        char c = qx__yat(P, i);
        if (q == '\'') {
            out[o++] = c;
            if (c == '\'') ++i;             /* '' */
            continue;
        }
        if (c != '\\') { out[o++] = c; continue; }
        c = qx__yat(P, ++i);
        switch (c) {
            case '\\': out[o++] = '\\'; break;
            case '"': out[o++] = '"'; break;
            case '/': out[o++] = '/'; break;
            case 'b': out[o++] = '\b'; break;
            case 'f': out[o++] = '\f'; break;
            case 'n': out[o++] = '\n'; break;
            case 'r': out[o++] = '\r'; break;
            case 't': out[o++] = '\t'; break;
            case '0': out[o++] = '\0'; break;
            case ' ': out[o++] = ' '; break;
            case 'x': case 'u': case 'U': {
                int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8, k;
                uint32_t v = 0;
                for (k = 0; k < nd; ++k) {
                    int h = i + 1 + (size_t)k < end - 1 ? qx__yhex(qx__yat(P, i + 1 + (size_t)k)) : -1;
                    if (h < 0) return (qx_yaml_node*)qx__yfail(P, i - 1, "'\\%c' needs %d hex digits", c, nd);
                    v = v * 16 + (uint32_t)h;
                }
                i += (size_t)nd;
                if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                    return (qx_yaml_node*)qx__yfail(P, i, "escape \\%c%lX is not a Unicode scalar value", c, (unsigned long)v);
                /* the escape took nd + 2 bytes, its UTF-8 at most 4 (\x: 2 bytes for 4) */
                o += qx__yutf8(out + o, v);
                break;
            }
            default:
                return (qx_yaml_node*)qx__yfail(P, i - 1, "unsupported escape '\\%c' in a double-quoted string", c ? c : ' ');
        }
    }
    out[o] = '\0';
    n->str = out;
    n->len = o;
    P->pos = end;
    return n;
}

/* A plain scalar at pos (flow: inside [ ] / { }); the cursor moves past it. */
static qx_yaml_node* qx__yplain(qx__yp* P, int flow) {
    size_t s = P->pos, e = s, i;
    qx_yaml_node* n;
    const char* t;
    for (i = s; !qx__yend(P, i); ++i) {
        char c = qx__yat(P, i);
        if (c == '#' && i > s && qx__yws(qx__yat(P, i - 1))) break;
        if (flow && strchr(",[]{}", c)) break;
        if (c == ':' && (qx__yend(P, i + 1) || qx__yws(qx__yat(P, i + 1)) || (flow && strchr(",[]{}", qx__yat(P, i + 1))))) {
            if (flow) break;
            return (qx_yaml_node*)qx__yfail(P, i, "': ' inside a plain value (a mapping cannot start here; quote the text)");
        }
        if (!qx__yws(c)) e = i + 1;
    }
    P->pos = e;
    t = qx__ycur(P)->p + s;
    if ((e - s == 1 && t[0] == '~') || (e - s == 4 && (memcmp(t, "null", 4) == 0 || memcmp(t, "Null", 4) == 0 || memcmp(t, "NULL", 4) == 0))) {
        n = qx__ynode(P, QX_YAML_NULL, s);
        if (n) n->str = "";
        return n;
    }
    n = qx__ynode(P, QX_YAML_SCALAR, s);
    if (!n) return NULL;
    n->str = qx__ystrdup(P, t, e - s);
    n->len = e - s;
    return n->str ? n : NULL;
}

/* ---- values on one line ------------------------------------------------------------------- */

static qx_yaml_node* qx__yinline(qx__yp* P, int flow);

static int qx__ygrow(void** arr, size_t n, size_t* cap, size_t elem) {
    void* p;
    size_t nc;
    if (n < *cap) return 1;
    nc = *cap ? 2 * *cap : 8;
    p = realloc(*arr, nc * elem);
    if (!p) return 0;
    *arr = p;
    *cap = nc;
    return 1;
}

/* Copy a finished temporary array into the document. */
static void* qx__ykeep(qx__yp* P, void* tmp, size_t bytes) {
    void* p = qx__yalloc(P, bytes);
    if (p && bytes) memcpy(p, tmp, bytes);
    free(tmp);
    return p;
}

static const qx_yaml_pair* qx__yfind(const qx_yaml_pair* pairs, size_t n, const char* key, size_t key_len) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (pairs[i].key_len == key_len && memcmp(pairs[i].key, key, key_len) == 0) return &pairs[i];
    return NULL;
}

/* [a, b] or {k: v} on one line. */
static qx_yaml_node* qx__yflow(qx__yp* P) {
    char open = qx__yat(P, P->pos), close = open == '[' ? ']' : '}';
    size_t start = P->pos, n = 0, cap = 0;
    void* tmp = NULL;
    qx_yaml_node* node = qx__ynode(P, open == '[' ? QX_YAML_SEQ : QX_YAML_MAP, start);
    if (!node) return NULL;
    node->flow = 1;
    if (++P->depth > QX_YAML_MAX_DEPTH) return (qx_yaml_node*)qx__yfail(P, start, "nested deeper than %d", QX_YAML_MAX_DEPTH);
    P->pos++;
    for (;;) {
        qx__yskip_ws(P);
        if (qx__yend(P, P->pos) || qx__yat(P, P->pos) == '#') {
            free(tmp);
            return (qx_yaml_node*)qx__yfail(P, start, "'%c' not closed on this line (multi-line flow collections are not supported)", open);
        }
        if (qx__yat(P, P->pos) == close) { P->pos++; break; }
        if (qx__yat(P, P->pos) == ',') { free(tmp); return (qx_yaml_node*)qx__yfail(P, P->pos, "empty entry in '%c ... %c'", open, close); }
        if (open == '[') {
            qx_yaml_node* item;
            size_t at = P->pos;
            item = qx__yinline(P, 1);
            if (!item) { free(tmp); return NULL; }
            qx__yskip_ws(P);
            if (qx__yat(P, P->pos) == ':') { free(tmp); return (qx_yaml_node*)qx__yfail(P, at, "'key: value' inside '[ ]' is not supported"); }
            if (!qx__ygrow(&tmp, n, &cap, sizeof(qx_yaml_node*))) { free(tmp); return (qx_yaml_node*)qx__yfail(P, at, "out of memory"); }
            ((qx_yaml_node**)tmp)[n++] = item;
        } else {
            qx_yaml_pair pr;
            qx_yaml_node* k;
            const qx_yaml_pair* dup;
            size_t at = P->pos;
            char c = qx__yat(P, P->pos);
            if (c == '?' || c == '&' || c == '*' || c == '[' || c == '{' || c == '!') {
                free(tmp);
                return (qx_yaml_node*)qx__yfail(P, at, "a mapping key must be a plain or quoted text");
            }
            k = c == '"' || c == '\'' ? qx__yquoted(P) : qx__yplain(P, 1);
            if (!k) { free(tmp); return NULL; }
            if (k->kind != QX_YAML_SCALAR || k->len == 0) { free(tmp); return (qx_yaml_node*)qx__yfail(P, at, "empty or null mapping key"); }
            qx__yskip_ws(P);
            if (qx__yat(P, P->pos) != ':') { free(tmp); return (qx_yaml_node*)qx__yfail(P, P->pos, "expected ':' after the key '%s'", k->str); }
            P->pos++;
            qx__yskip_ws(P);
            memset(&pr, 0, sizeof pr);
            pr.key = k->str;
            pr.key_len = k->len;
            pr.line = k->line;
            pr.col = k->col;
            dup = qx__yfind((const qx_yaml_pair*)tmp, n, k->str, k->len);
            if (dup) {
                int first = dup->col;    /* dup points into tmp */
                free(tmp);
                return (qx_yaml_node*)qx__yfail(P, at, "duplicate key '%s' (first in column %d)", k->str, first);
            }
            if (qx__yat(P, P->pos) == ',' || qx__yat(P, P->pos) == '}') {
                pr.value = qx__ynode(P, QX_YAML_NULL, P->pos);
                if (pr.value) pr.value->str = "";
            } else {
                pr.value = qx__yinline(P, 1);
            }
            if (!pr.value) { free(tmp); return NULL; }
            if (!qx__ygrow(&tmp, n, &cap, sizeof(qx_yaml_pair))) { free(tmp); return (qx_yaml_node*)qx__yfail(P, at, "out of memory"); }
            ((qx_yaml_pair*)tmp)[n++] = pr;
        }
        qx__yskip_ws(P);
        if (qx__yat(P, P->pos) == ',') { P->pos++; continue; }
        if (qx__yat(P, P->pos) == close) { P->pos++; break; }
        if (qx__yend(P, P->pos)) continue;   /* reported as not closed */
        {
            char c = qx__yat(P, P->pos);
            free(tmp);
            return (qx_yaml_node*)qx__yfail(P, P->pos, "expected ',' or '%c', found '%c'", close, c);
        }
    }
    P->depth--;
    node->count = n;
    if (open == '[') node->items = (qx_yaml_node**)qx__ykeep(P, tmp, n * sizeof(qx_yaml_node*));
    else node->pairs = (qx_yaml_pair*)qx__ykeep(P, tmp, n * sizeof(qx_yaml_pair));
    return P->failed ? NULL : node;
}

/* A value that stays on this line: [anchor] then an alias, a flow collection, a quoted or a plain
   scalar. */
static qx_yaml_node* qx__yinline(qx__yp* P, int flow) {
    size_t acol = 0, at;
    const char* anchor = qx__yprops(P, &acol);
    qx_yaml_node* n;
    char c;
    if (P->failed) return NULL;
    at = P->pos;
    c = qx__yat(P, at);
    if (qx__yend(P, at) || (c == '#' && at > 0 && qx__yws(qx__yat(P, at - 1))) || (flow && (c == ',' || c == ']' || c == '}'))) {
        n = qx__ynode(P, QX_YAML_NULL, at);   /* "&a" alone, or an anchored empty value */
        if (n) n->str = "";
        return qx__yanchor_set(P, n, anchor, acol);
    }
    if (c == '*') {
        size_t s = ++P->pos, i;
        if (anchor) return (qx_yaml_node*)qx__yfail(P, acol, "an alias cannot have an anchor");
        while (!qx__yend(P, P->pos) && !qx__yws(qx__yat(P, P->pos)) && !strchr(",[]{}", qx__yat(P, P->pos))) P->pos++;
        if (P->pos == s) return (qx_yaml_node*)qx__yfail(P, at, "'*' without an anchor name");
        for (i = 0; i < P->n_anchors; ++i)
            if (strlen(P->anchors[i].name) == P->pos - s && memcmp(P->anchors[i].name, qx__ycur(P)->p + s, P->pos - s) == 0)
                return P->anchors[i].node;
        return (qx_yaml_node*)qx__yfail(P, at, "alias *%.*s names no earlier anchor (&%.*s must come first and be complete)",
                                        (int)(P->pos - s), qx__ycur(P)->p + s, (int)(P->pos - s), qx__ycur(P)->p + s);
    }
    if (c == '[' || c == '{') n = qx__yflow(P);
    else if (c == '"' || c == '\'') n = qx__yquoted(P);
    else if (c == '|' || c == '>') return (qx_yaml_node*)qx__yfail(P, at, "block scalars ('%c') are not supported; write the text on one line", c);
    else if (c == '%' || c == '@' || c == '`') return (qx_yaml_node*)qx__yfail(P, at, "a plain value cannot start with '%c' (quote it)", c);
    else if ((c == '-' || c == '?' || c == ':') && (qx__yend(P, at + 1) || qx__yws(qx__yat(P, at + 1))))
        return (qx_yaml_node*)qx__yfail(P, at, "%s", c == '-' ? "a '- ' sequence cannot start here (put it on the next line, indented)"
                                                    : c == '?' ? "complex keys ('? ') are not supported"
                                                               : "a value cannot start with ': '");
    else if (c == ',' || c == ']' || c == '}') return (qx_yaml_node*)qx__yfail(P, at, "unexpected '%c'", c);
    else n = qx__yplain(P, flow);
    return qx__yanchor_set(P, n, anchor, acol);
}

/* ---- block collections -------------------------------------------------------------------- */

static qx_yaml_node* qx__yblock_map(qx__yp* P, size_t n);
static qx_yaml_node* qx__yblock_seq(qx__yp* P, size_t n);

/* The node whose content starts at pos (column n) on the current line. same_line: the content
   follows "- " or properties on the same line. */
static qx_yaml_node* qx__yblock(qx__yp* P, size_t n, const char* anchor, size_t acol, int same_line) {
    qx_yaml_node* node;
    if (++P->depth > QX_YAML_MAX_DEPTH) return (qx_yaml_node*)qx__yfail(P, n, "nested deeper than %d", QX_YAML_MAX_DEPTH);
    if (qx__yseq_entry(P)) {
        if (anchor && same_line) return (qx_yaml_node*)qx__yfail(P, n, "a '- ' sequence cannot start on the line of its anchor");
        node = qx__yblock_seq(P, n);
    } else if (qx__ykey_line(P)) {
        if (anchor && same_line)
            return (qx_yaml_node*)qx__yfail(P, acol, "an anchor before a mapping key on the same line is not supported (put &name on the line before)");
        node = qx__yblock_map(P, n);
    } else {
        node = qx__yinline(P, 0);
        if (node && !qx__yat_eol(P)) return (qx_yaml_node*)qx__yfail(P, P->pos, "unexpected text after the value");
        if (node) qx__yadvance(P);
    }
    P->depth--;
    if (!node || P->failed) return NULL;
    return anchor ? qx__yanchor_set(P, node, anchor, acol) : node;
}

/* After a value: where the collection at column n goes on. 1: next entry at n; 0: the collection ends. */
static int qx__ynext_entry(qx__yp* P, size_t n) {
    size_t m;
    if (qx__yeof(P)) return 0;
    m = (size_t)qx__ycur(P)->indent;
    if (m < n) return 0;
    if (m > n) { qx__yfail(P, m, "unexpected indentation (%d spaces where %d were expected)", (int)m, (int)n); return 0; }
    return 1;
}

/* A plain block key at pos, up to the ':' that qx__ykey_line found (trailing blanks dropped). */
static qx_yaml_node* qx__ykey(qx__yp* P) {
    size_t s = P->pos, i = s, e = s;
    qx_yaml_node* k;
    while (!(qx__yat(P, i) == ':' && (qx__yend(P, i + 1) || qx__yws(qx__yat(P, i + 1))))) {
        if (!qx__yws(qx__yat(P, i))) e = i + 1;
        ++i;
    }
    k = qx__ynode(P, QX_YAML_SCALAR, s);
    if (!k) return NULL;
    k->str = qx__ystrdup(P, qx__ycur(P)->p + s, e - s);
    k->len = e - s;
    P->pos = i;
    return k->str ? k : NULL;
}

static qx_yaml_node* qx__yblock_map(qx__yp* P, size_t n) {
    qx_yaml_node* node = qx__ynode(P, QX_YAML_MAP, n);
    qx_yaml_pair* tmp = NULL;
    size_t cnt = 0, cap = 0;
    if (!node) return NULL;
    for (;;) {
        qx_yaml_pair pr;
        qx_yaml_node* k;
        const qx_yaml_pair* dup;
        size_t kpos = P->pos, acol = 0;
        const char* anchor;
        memset(&pr, 0, sizeof pr);
        if (qx__yseq_entry(P)) { free(tmp); return (qx_yaml_node*)qx__yfail(P, kpos, "a '- ' sequence entry where a 'key:' was expected"); }
        if (!qx__ykey_line(P)) { free(tmp); return (qx_yaml_node*)qx__yfail(P, kpos, "expected 'key: value'"); }
        k = qx__yat(P, kpos) == '"' || qx__yat(P, kpos) == '\'' ? qx__yquoted(P) : qx__ykey(P);
        if (!k) { free(tmp); return NULL; }
        if (k->len == 0) { free(tmp); return (qx_yaml_node*)qx__yfail(P, kpos, "empty mapping key"); }
        if (k->style == QX_YAML_PLAIN && strcmp(k->str, "<<") == 0) {
            free(tmp);
            return (qx_yaml_node*)qx__yfail(P, kpos, "merge keys ('<<') are not supported");
        }
        pr.key = k->str;
        pr.key_len = k->len;
        pr.line = (int)P->ln + 1;
        pr.col = (int)kpos + 1;
        dup = qx__yfind(tmp, cnt, k->str, k->len);
        if (dup) {
            int first = dup->line;       /* dup points into tmp */
            free(tmp);
            return (qx_yaml_node*)qx__yfail(P, kpos, "duplicate key '%s' (first on line %d)", k->str, first);
        }
        qx__yskip_ws(P);
        if (qx__yat(P, P->pos) != ':') { free(tmp); return (qx_yaml_node*)qx__yfail(P, P->pos, "expected ':' after the key '%s'", k->str); }
        P->pos++;
        anchor = qx__yprops(P, &acol);
        if (P->failed) { free(tmp); return NULL; }
        if (qx__yat_eol(P)) {
            /* the value is on the following lines: deeper, or a "- " sequence at the key's column */
            if (!qx__yadvance(P) || (size_t)qx__ycur(P)->indent < n ||
                ((size_t)qx__ycur(P)->indent == n && !qx__yseq_entry(P))) {
                if (P->failed) { free(tmp); return NULL; }
                pr.value = qx__ynode(P, QX_YAML_NULL, kpos);
                if (pr.value) { pr.value->str = ""; pr.value->line = pr.line; }
                pr.value = qx__yanchor_set(P, pr.value, anchor, acol);
            } else {
                pr.value = qx__yblock(P, (size_t)qx__ycur(P)->indent, anchor, acol, 0);
            }
        } else {
            if (qx__yseq_entry(P)) { free(tmp); return (qx_yaml_node*)qx__yfail(P, P->pos, "a '- ' sequence cannot start on the line of its key"); }
            if (qx__ykey_line(P)) { free(tmp); return (qx_yaml_node*)qx__yfail(P, P->pos, "a mapping cannot start on the line of its key"); }
            pr.value = qx__yinline(P, 0);
            if (pr.value && anchor) pr.value = qx__yanchor_set(P, pr.value, anchor, acol);
            if (pr.value && !qx__yat_eol(P)) { free(tmp); return (qx_yaml_node*)qx__yfail(P, P->pos, "unexpected text after the value of '%s'", pr.key); }
            if (pr.value) qx__yadvance(P);
        }
        if (!pr.value || P->failed) { free(tmp); return NULL; }
        if (!qx__ygrow((void**)&tmp, cnt, &cap, sizeof *tmp)) { free(tmp); return (qx_yaml_node*)qx__yfail(P, kpos, "out of memory"); }
        tmp[cnt++] = pr;
        if (!qx__ynext_entry(P, n)) break;
    }
    if (P->failed) { free(tmp); return NULL; }
    node->count = cnt;
    node->pairs = (qx_yaml_pair*)qx__ykeep(P, tmp, cnt * sizeof *tmp);
    return P->failed ? NULL : node;
}

static qx_yaml_node* qx__yblock_seq(qx__yp* P, size_t n) {
    qx_yaml_node* node = qx__ynode(P, QX_YAML_SEQ, n);
    qx_yaml_node** tmp = NULL;
    size_t cnt = 0, cap = 0;
    if (!node) return NULL;
    for (;;) {
        qx_yaml_node* item;
        size_t at = P->pos, acol = 0;
        const char* anchor;
        P->pos++;                                   /* the '-' */
        anchor = qx__yprops(P, &acol);
        if (P->failed) { free(tmp); return NULL; }
        if (qx__yat_eol(P)) {
            if (!qx__yadvance(P) || (size_t)qx__ycur(P)->indent <= n) {
                if (P->failed) { free(tmp); return NULL; }
                item = qx__ynode(P, QX_YAML_NULL, at);
                if (item) item->str = "";
                item = qx__yanchor_set(P, item, anchor, acol);
            } else {
                item = qx__yblock(P, (size_t)qx__ycur(P)->indent, anchor, acol, 0);
            }
        } else {
            item = qx__yblock(P, P->pos, anchor, acol, 1);   /* "- key: v", "- - x", "- value" */
        }
        if (!item || P->failed) { free(tmp); return NULL; }
        if (!qx__ygrow((void**)&tmp, cnt, &cap, sizeof *tmp)) { free(tmp); return (qx_yaml_node*)qx__yfail(P, at, "out of memory"); }
        tmp[cnt++] = item;
        if (!qx__ynext_entry(P, n) || !qx__yseq_entry(P)) break;
    }
    if (P->failed) { free(tmp); return NULL; }
    node->count = cnt;
    node->items = (qx_yaml_node**)qx__ykeep(P, tmp, cnt * sizeof *tmp);
    return P->failed ? NULL : node;
}

/* ---- the document ------------------------------------------------------------------------- */

/* UTF-8 without overlongs, surrogates or values above U+10FFFF; no control characters but tab,
   newline and carriage return; no DEL. Returns the offset of the first bad byte, or len. */
static size_t qx__ycheck_text(const unsigned char* s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) return i;
            ++i;
            continue;
        }
        {
            int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : -1, k;
            uint32_t v;
            if (n < 0 || c > 0xF4 || i + (size_t)n >= len) return i;   /* bytes i+1 .. i+n must exist */
            v = (uint32_t)(c & (n == 1 ? 0x1F : n == 2 ? 0x0F : 0x07));
            for (k = 1; k <= n; ++k) {
                if ((s[i + (size_t)k] & 0xC0) != 0x80) return i;
                v = (v << 6) | (uint32_t)(s[i + (size_t)k] & 0x3F);
            }
            if ((n == 2 && v < 0x800) || (n == 3 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v <= 0xDFFF)) return i;
            i += (size_t)n + 1;
        }
    }
    return len;
}

quarot_result qx_yaml_parse(const char* text, size_t len, const char* name, qx_yaml_doc* doc, qx_err* e) {
    qx__yp P;
    size_t i, start, bad, cap_lines = 0;
    if (!doc) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(doc, 0, sizeof *doc);
    if (!name) name = "yaml";
    if (!text && len) { qx_err_set(e, "%s: no text", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (len > QX_YAML_MAX_SIZE) { qx_err_set(e, "%s: %lu bytes, more than the %lu a configuration may have", name, (unsigned long)len, (unsigned long)QX_YAML_MAX_SIZE); return QUAROT_ERR_PARSE; }
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) { text += 3; len -= 3; }
    bad = qx__ycheck_text((const unsigned char*)text, len);
    if (bad < len) {
        size_t line = 1, col = 1;
        for (i = 0; i < bad; ++i) { if (text[i] == '\n') { ++line; col = 1; } else ++col; }
        qx_err_set(e, "%s: line %lu, column %lu: byte 0x%02X is not allowed (invalid UTF-8 or a control character)", name,
                   (unsigned long)line, (unsigned long)col, (unsigned)(unsigned char)text[bad]);
        return QUAROT_ERR_PARSE;
    }
    memset(&P, 0, sizeof P);
    P.name = name;
    P.e = e;
    P.doc = doc;
    /* lines */
    for (i = 0, start = 0; i <= len; ++i) {
        if (i == len || text[i] == '\n') {
            qx__yline L;
            size_t k;
            if (i == len && start == len && len > 0) break;   /* no empty line after a final newline */
            L.p = text + start;
            L.len = i - start;
            if (L.len && L.p[L.len - 1] == '\r') L.len--;
            for (k = 0; k < L.len && L.p[k] == ' '; ++k) {}
            L.indent = (int)k;
            while (k < L.len && qx__yws(L.p[k])) ++k;
            L.blank = k == L.len || L.p[k] == '#';
            if (!qx__ygrow((void**)&P.lines, P.n_lines, &cap_lines, sizeof *P.lines)) {
                free(P.lines);
                qx_err_set(e, "%s: out of memory", name);
                return QUAROT_ERR_OUT_OF_MEMORY;
            }
            P.lines[P.n_lines++] = L;
            if (!L.blank && k > (size_t)L.indent) {      /* a tab inside the indentation */
                free(P.lines);
                qx_err_set(e, "%s: line %lu, column %d: tab in the indentation (indent with spaces)", name, (unsigned long)P.n_lines, L.indent + 1);
                return QUAROT_ERR_PARSE;
            }
            start = i + 1;
        }
    }
    /* the first line with content; one leading "---" is allowed */
    P.ln = 0;
    while (P.ln < P.n_lines && P.lines[P.ln].blank) P.ln++;
    if (P.ln < P.n_lines) {
        const qx__yline* L = &P.lines[P.ln];
        if (L->indent == 0 && L->p[0] == '%') qx__yfail(&P, 0, "directives ('%%...') are not supported");
        else if (L->indent == 0 && L->len >= 3 && memcmp(L->p, "---", 3) == 0 && (L->len == 3 || qx__yws(L->p[3]))) {
            P.pos = 3;
            if (!qx__yat_eol(&P)) qx__yfail(&P, P.pos, "content after '---' is not supported (start it on the next line)");
            else qx__yadvance(&P);
        } else {
            P.pos = (size_t)L->indent;
        }
    }
    if (!P.failed && P.ln < P.n_lines) {
        size_t n = (size_t)qx__ycur(&P)->indent;
        doc->root = qx__yblock(&P, n, NULL, 0, 0);
        if (!P.failed && !qx__yeof(&P))
            qx__yfail(&P, (size_t)qx__ycur(&P)->indent, "unexpected text (indented less than the document's first line)");
    } else if (!P.failed) {
        P.ln = P.n_lines;
        doc->root = qx__ynode(&P, QX_YAML_NULL, 0);
        if (doc->root) doc->root->str = "";
    }
    free(P.lines);
    free(P.anchors);
    if (P.failed || !doc->root) {
        qx_yaml_doc_free(doc);
        if (!P.failed) qx_err_set(e, "%s: out of memory", name);
        return P.failed && strstr(e ? e->msg : "", "out of memory") ? QUAROT_ERR_OUT_OF_MEMORY : QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

void qx_yaml_doc_free(qx_yaml_doc* doc) {
    if (!doc) return;
    qx_arena_free(&doc->arena);
    memset(doc, 0, sizeof *doc);
}

/* ---- reading ------------------------------------------------------------------------------ */

const qx_yaml_node* qx_yaml_get(const qx_yaml_node* map, const char* key, const qx_yaml_pair** pair) {
    size_t i, n = strlen(key);
    if (pair) *pair = NULL;
    if (!map || map->kind != QX_YAML_MAP) return NULL;
    for (i = 0; i < map->count; ++i)
        if (map->pairs[i].key_len == n && memcmp(map->pairs[i].key, key, n) == 0) {
            if (pair) *pair = &map->pairs[i];
            return map->pairs[i].value;
        }
    return NULL;
}

int qx_yaml_as_int(const qx_yaml_node* v, int64_t* out) {
    const char* s;
    char* end;
    long long x;
    size_t i = 0;
    if (!v || v->kind != QX_YAML_SCALAR || v->style != QX_YAML_PLAIN || v->len == 0 || v->len > 24) return 0;
    s = v->str;
    if (s[0] == '-' || s[0] == '+') ++i;
    if (i == v->len) return 0;
    if (s[i] == '0' && i + 1 < v->len) return 0;          /* 012 (octal in YAML 1.1): refused */
    for (; i < v->len; ++i)
        if (s[i] < '0' || s[i] > '9') return 0;
    errno = 0;
    x = strtoll(s, &end, 10);
    if (errno || *end) return 0;
    *out = (int64_t)x;
    return 1;
}

int qx_yaml_as_bool(const qx_yaml_node* v, int* out) {
    if (!v || v->kind != QX_YAML_SCALAR || v->style != QX_YAML_PLAIN) return 0;
    if (strcmp(v->str, "true") == 0 || strcmp(v->str, "True") == 0 || strcmp(v->str, "TRUE") == 0) { *out = 1; return 1; }
    if (strcmp(v->str, "false") == 0 || strcmp(v->str, "False") == 0 || strcmp(v->str, "FALSE") == 0) { *out = 0; return 1; }
    return 0;
}

const char* qx_yaml_as_str(const qx_yaml_node* v) { return v && v->kind == QX_YAML_SCALAR ? v->str : NULL; }

const char* qx_yaml_describe(const qx_yaml_node* v, char* buf, size_t size) {
    int64_t i;
    int b;
    if (!buf || !size) return buf;
    if (!v || v->kind == QX_YAML_NULL) snprintf(buf, size, "an empty value (null)");
    else if (v->kind == QX_YAML_SEQ) snprintf(buf, size, "a sequence (%lu items)", (unsigned long)v->count);
    else if (v->kind == QX_YAML_MAP) snprintf(buf, size, "a mapping (%lu keys)", (unsigned long)v->count);
    else if (qx_yaml_as_int(v, &i)) snprintf(buf, size, "the number %lld", (long long)i);
    else if (qx_yaml_as_bool(v, &b)) snprintf(buf, size, "the boolean %s", v->str);
    else {
        char t[48];
        size_t k, n = v->len < 40 ? v->len : 40;
        for (k = 0; k < n; ++k) t[k] = (unsigned char)v->str[k] < 0x20 ? '?' : v->str[k];
        t[n] = '\0';
        snprintf(buf, size, "%s'%s%s'", v->style == QX_YAML_PLAIN ? "" : "the quoted text ", t, v->len > 40 ? "..." : "");
    }
    return buf;
}
