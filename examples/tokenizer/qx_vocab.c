/* qx_vocab.c - see qx_vocab.h.

   One merge loop serves both kinds: the symbols of a fragment form a doubly linked list over a work
   string (a merge keeps the left node and its start, so a symbol's text is always one contiguous
   span); every adjacent pair that may merge sits in a binary heap ordered by (priority desc, left
   node asc), priority = the merged token's score (SPM) or -rank (merges list). An entry is stale
   when either node was emptied or the pair's combined length changed (lengths only grow), which is
   llama.cpp's test; stale entries are dropped when popped. */
#include "tokenizer/qx_vocab.h"
#include "tokenizer/qx_unicode.h"

#include <stdlib.h>
#include <string.h>

static uint64_t qx__vhash(const char* s, size_t n) {   /* FNV-1a, 64 bit */
    uint64_t h = 1469598103934665603ull;
    size_t i;
    for (i = 0; i < n; ++i) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h;
}

static uint64_t qx__mix(uint64_t k) {   /* splitmix64 finalizer */
    k ^= k >> 30; k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27; k *= 0x94d049bb133111ebull;
    return k ^ (k >> 31);
}

void qx_vocab_free(qx_vocab* v) {
    int32_t i;
    if (!v) return;
    if (v->text) for (i = 0; i < v->n; ++i) free(v->text[i]);
    if (v->dec) for (i = 0; i < v->n; ++i) free(v->dec[i]);
    free(v->text); free(v->len); free(v->score); free(v->type); free(v->dec); free(v->dec_len);
    free(v->hash); free(v->mkey); free(v->mrank); free(v->mres); free(v->special); free(v->blob);
    memset(v, 0, sizeof *v);
}

quarot_result qx_vocab_begin(qx_vocab* v, int kind, int64_t n_tokens, const char* name, qx_err* e) {
    int i;
    memset(v, 0, sizeof *v);
    if (kind != QX_VOCAB_SPM && kind != QX_VOCAB_BPE) { qx_err_set(e, "%s: unknown tokenizer kind", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (n_tokens < 1 || n_tokens > QX_VOCAB_MAX_TOKENS) {
        qx_err_set(e, "%s: vocabulary of %lld tokens (expected 1 to %d)", name, (long long)n_tokens, QX_VOCAB_MAX_TOKENS);
        return QUAROT_ERR_PARSE;
    }
    v->kind = kind;
    v->n = (int32_t)n_tokens;
    v->text = (char**)calloc((size_t)n_tokens, sizeof *v->text);
    v->len = (int32_t*)calloc((size_t)n_tokens, sizeof *v->len);
    v->score = (float*)calloc((size_t)n_tokens, sizeof *v->score);
    v->type = (unsigned char*)calloc((size_t)n_tokens, 1);
    if (!v->text || !v->len || !v->score || !v->type) {
        qx_vocab_free(v);
        qx_err_set(e, "%s: out of memory for %lld tokens", name, (long long)n_tokens);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    v->bos = v->eos = v->unk = -1;
    v->byte_fallback = kind == QX_VOCAB_SPM;
    v->add_space_prefix = kind == QX_VOCAB_SPM;
    for (i = 0; i < 256; ++i) v->byte_tok[i] = -1;
    return QUAROT_OK;
}

quarot_result qx_vocab_set(qx_vocab* v, int32_t id, const char* text, size_t len, float score, int type,
                           const char* name, qx_err* e) {
    char* p;
    if (id < 0 || id >= v->n) { qx_err_set(e, "%s: token id %ld out of range", name, (long)id); return QUAROT_ERR_PARSE; }
    if (len > QX_VOCAB_MAX_PIECE) { qx_err_set(e, "%s: token %ld is %zu bytes long (at most %d)", name, (long)id, len, QX_VOCAB_MAX_PIECE); return QUAROT_ERR_PARSE; }
    if (v->text[id]) { qx_err_set(e, "%s: token id %ld given twice", name, (long)id); return QUAROT_ERR_PARSE; }
    if (score != score) { qx_err_set(e, "%s: token %ld has a NaN score", name, (long)id); return QUAROT_ERR_PARSE; }
    p = (char*)malloc(len + 1);
    if (!p) { qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
    if (len) memcpy(p, text, len);
    p[len] = '\0';
    v->text[id] = p;
    v->len[id] = (int32_t)len;
    v->score[id] = score;
    v->type[id] = (unsigned char)(type >= 0 && type <= 6 ? type : QX_TT_NORMAL);
    if ((int32_t)len > v->max_len) v->max_len = (int32_t)len;
    return QUAROT_OK;
}

/* piece -> id table (built once every token is set; the highest id wins among equal pieces) */
quarot_result qx_vocab_index(qx_vocab* v, const char* name, qx_err* e) {
    uint64_t cap = 16;
    int32_t id;
    if (v->hash) return QUAROT_OK;
    for (id = 0; id < v->n; ++id)
        if (!v->text[id]) { qx_err_set(e, "%s: token %ld has no text", name, (long)id); return QUAROT_ERR_PARSE; }
    while (cap < (uint64_t)v->n * 2) cap *= 2;
    v->hash = (int32_t*)malloc(cap * sizeof *v->hash);
    if (!v->hash) { qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset(v->hash, 0xff, cap * sizeof *v->hash);
    v->hash_mask = cap - 1;
    for (id = 0; id < v->n; ++id) {
        uint64_t i;
        for (i = qx__vhash(v->text[id], (size_t)v->len[id]) & v->hash_mask;; i = (i + 1) & v->hash_mask) {
            int32_t o = v->hash[i];
            if (o < 0 || (v->len[o] == v->len[id] && memcmp(v->text[o], v->text[id], (size_t)v->len[id]) == 0)) {
                v->hash[i] = id;
                break;
            }
        }
    }
    return QUAROT_OK;
}

int32_t qx_vocab_lookup(const qx_vocab* v, const char* s, size_t len) {
    uint64_t i;
    if (!v->hash || len > (size_t)v->max_len) return -1;
    for (i = qx__vhash(s, len) & v->hash_mask;; i = (i + 1) & v->hash_mask) {
        int32_t id = v->hash[i];
        if (id < 0) return -1;
        if ((size_t)v->len[id] == len && memcmp(v->text[id], s, len) == 0) return id;
    }
}

static quarot_result qx__merge_grow(qx_vocab* v, uint64_t cap, const char* name, qx_err* e) {
    uint64_t* k = (uint64_t*)calloc(cap, sizeof *k);
    int32_t* r = (int32_t*)malloc(cap * sizeof *r);
    int32_t* s = (int32_t*)malloc(cap * sizeof *s);
    uint64_t i;
    if (!k || !r || !s) {
        free(k); free(r); free(s);
        qx_err_set(e, "%s: out of memory for the merges", name);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    if (v->mkey) {
        for (i = 0; i <= v->mmask; ++i) {
            uint64_t j;
            if (!v->mkey[i]) continue;
            for (j = qx__mix(v->mkey[i]) & (cap - 1); k[j]; j = (j + 1) & (cap - 1)) {}
            k[j] = v->mkey[i]; r[j] = v->mrank[i]; s[j] = v->mres[i];
        }
    }
    free(v->mkey); free(v->mrank); free(v->mres);
    v->mkey = k; v->mrank = r; v->mres = s;
    v->mmask = cap - 1;
    return QUAROT_OK;
}

quarot_result qx_vocab_reserve_merges(qx_vocab* v, int64_t n, const char* name, qx_err* e) {
    uint64_t cap = 16;
    if (n < 0 || n > QX_VOCAB_MAX_MERGES) { qx_err_set(e, "%s: %lld merges (at most %d)", name, (long long)n, QX_VOCAB_MAX_MERGES); return QUAROT_ERR_PARSE; }
    while (cap < (uint64_t)n * 2) cap *= 2;
    if (v->mkey && v->mmask + 1 >= cap) return QUAROT_OK;
    return qx__merge_grow(v, cap, name, e);
}

static int qx__merge_find(const qx_vocab* v, int32_t l, int32_t r, int32_t* rank, int32_t* res) {
    uint64_t key = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1, i;
    if (!v->mkey) return 0;
    for (i = qx__mix(key) & v->mmask; v->mkey[i]; i = (i + 1) & v->mmask)
        if (v->mkey[i] == key) { *rank = v->mrank[i]; *res = v->mres[i]; return 1; }
    return 0;
}

quarot_result qx_vocab_add_merge(qx_vocab* v, const char* left, size_t left_len, const char* right, size_t right_len,
                                 const char* name, const char* field, qx_err* e) {
    int32_t l, r, res = -1, rank0, res0;
    uint64_t key, i;
    quarot_result q;
    char buf[512];
    if ((q = qx_vocab_index(v, name, e)) != QUAROT_OK) return q;
    if (v->n_merges >= QX_VOCAB_MAX_MERGES) { qx_err_set(e, "%s: %s: more than %d merges", name, field, QX_VOCAB_MAX_MERGES); return QUAROT_ERR_PARSE; }
    l = qx_vocab_lookup(v, left, left_len);
    r = qx_vocab_lookup(v, right, right_len);
    if (l < 0 || r < 0) {
        const char* bad = l < 0 ? left : right;
        size_t bl = l < 0 ? left_len : right_len;
        qx_err_set(e, "%s: %s[%lld] names '%.*s', which is not a token", name, field, (long long)v->n_merges,
                   (int)(bl > 64 ? 64 : bl), bad);
        return QUAROT_ERR_PARSE;
    }
    if (left_len + right_len <= sizeof buf) {
        memcpy(buf, left, left_len);
        memcpy(buf + left_len, right, right_len);
        res = qx_vocab_lookup(v, buf, left_len + right_len);
    }
    if (!v->mkey || (uint64_t)(v->n_merges + 1) * 2 > v->mmask + 1) {
        if ((q = qx__merge_grow(v, v->mkey ? (v->mmask + 1) * 2 : 1024, name, e)) != QUAROT_OK) return q;
    }
    if (!qx__merge_find(v, l, r, &rank0, &res0)) {   /* a repeated pair keeps its first rank */
        key = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
        for (i = qx__mix(key) & v->mmask; v->mkey[i]; i = (i + 1) & v->mmask) {}
        v->mkey[i] = key;
        v->mrank[i] = (int32_t)v->n_merges;
        v->mres[i] = res;
    }
    v->n_merges++;
    return QUAROT_OK;
}

/* GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes for
   U+0100.. in byte order. */
static uint32_t qx__byte_cp(int b) {
    int k, n = 0;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    for (k = 0; k < b; ++k)
        if (!((k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF))) ++n;
    return 0x100u + (uint32_t)n;
}
static int qx__cp_byte(uint32_t cp) {
    int b;
    if (cp > 0x143) return -1;
    for (b = 0; b < 256; ++b)
        if (qx__byte_cp(b) == cp) return b;
    return -1;
}

static int qx__hexv(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* specials sort: longest text first, then by id (keys (~len << 32) | id, ascending) */
static int qx__cmp_u64(const void* a, const void* b) {
    uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
    return (x > y) - (x < y);
}

quarot_result qx_vocab_finish(qx_vocab* v, const char* name, qx_err* e) {
    int32_t id, i;
    quarot_result q;
    if ((q = qx_vocab_index(v, name, e)) != QUAROT_OK) return q;
    if (v->bos >= v->n || v->eos >= v->n || v->unk >= v->n) {
        qx_err_set(e, "%s: special token id (bos %ld, eos %ld, unk %ld) outside the vocabulary of %ld", name, (long)v->bos,
                   (long)v->eos, (long)v->unk, (long)v->n);
        return QUAROT_ERR_PARSE;
    }
    if (v->kind == QX_VOCAB_BPE && v->n_merges == 0 && v->n > 256) {
        qx_err_set(e, "%s: byte-level BPE vocabulary without merges", name);
        return QUAROT_ERR_PARSE;
    }
    /* byte fallback tokens (SPM) */
    if (v->kind == QX_VOCAB_SPM) {
        for (i = 0; i < 256; ++i) {
            char buf[8];
            static const char hx[] = "0123456789ABCDEF";
            buf[0] = '<'; buf[1] = '0'; buf[2] = 'x'; buf[3] = hx[i >> 4]; buf[4] = hx[i & 15]; buf[5] = '>';
            v->byte_tok[i] = qx_vocab_lookup(v, buf, 6);
            if (v->byte_tok[i] < 0) { buf[0] = (char)i; v->byte_tok[i] = qx_vocab_lookup(v, buf, 1); }
        }
    }
    /* special tokens, longest first */
    v->special = (int32_t*)malloc((size_t)v->n * sizeof *v->special);
    v->dec = (char**)calloc((size_t)v->n, sizeof *v->dec);
    v->dec_len = (int32_t*)calloc((size_t)v->n, sizeof *v->dec_len);
    if (!v->special || !v->dec || !v->dec_len) { qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
    {
        uint64_t* keys = (uint64_t*)malloc((size_t)v->n * sizeof *keys);
        if (!keys) { qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
        for (id = 0; id < v->n; ++id) {
            int t = v->type[id];
            if ((t == QX_TT_CONTROL || t == QX_TT_USER_DEFINED || t == QX_TT_UNKNOWN) && v->len[id] > 0)
                keys[v->n_special++] = ((uint64_t)(0xFFFFFFFFu - (uint32_t)v->len[id]) << 32) | (uint32_t)id;
        }
        qsort(keys, (size_t)v->n_special, sizeof *keys, qx__cmp_u64);
        for (i = 0; i < v->n_special; ++i) v->special[i] = (int32_t)(keys[i] & 0xFFFFFFFFu);
        free(keys);
    }
    /* decoded texts */
    for (id = 0; id < v->n; ++id) {
        const char* s = v->text[id];
        int32_t n = v->len[id], k = 0, j = 0;
        char* d = (char*)malloc((size_t)n + 1);
        if (!d) { qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
        v->dec[id] = d;
        if (v->type[id] == QX_TT_CONTROL || v->type[id] == QX_TT_USER_DEFINED || v->type[id] == QX_TT_UNKNOWN) {
            memcpy(d, s, (size_t)n);
            k = n;
        } else if (v->kind == QX_VOCAB_SPM) {
            if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && qx__hexv(s[3]) >= 0 && qx__hexv(s[4]) >= 0 &&
                v->type[id] == QX_TT_BYTE) {
                d[k++] = (char)(qx__hexv(s[3]) * 16 + qx__hexv(s[4]));
            } else {
                while (j < n) {
                    if (j + 3 <= n && (unsigned char)s[j] == 0xE2 && (unsigned char)s[j + 1] == 0x96 && (unsigned char)s[j + 2] == 0x81) {
                        d[k++] = ' ';
                        j += 3;
                    } else {
                        d[k++] = s[j++];
                    }
                }
            }
        } else {
            while (j < n) {
                uint32_t cp;
                int m = qx_utf8_decode((const unsigned char*)s + j, (size_t)(n - j), &cp), b;
                if (m > 0 && (b = qx__cp_byte(cp)) >= 0) { d[k++] = (char)b; j += m; continue; }
                if (m <= 0) m = 1;
                memcpy(d + k, s + j, (size_t)m);
                k += m;
                j += m;
            }
        }
        d[k] = '\0';
        v->dec_len[id] = k;
    }
    return QUAROT_OK;
}

/* ---- encoding ----------------------------------------------------------------------------------- */

typedef struct qx__ivec { int32_t* p; int64_t n, cap; int failed; } qx__ivec;
static void qx__push(qx__ivec* a, int32_t x) {
    if (a->failed) return;
    if (a->n == a->cap) {
        int64_t nc = a->cap ? a->cap * 2 : 256;
        int32_t* p = (int32_t*)realloc(a->p, (size_t)nc * sizeof *p);
        if (!p) { a->failed = 1; return; }
        a->p = p;
        a->cap = nc;
    }
    a->p[a->n++] = x;
}

typedef struct qx__sym { int32_t start, n, prev, next, id; } qx__sym;
typedef struct qx__pair { double key; int32_t left, right, size, res; } qx__pair;

typedef struct qx__work {
    qx__sym* sym; int64_t sym_cap;
    qx__pair* heap; int64_t heap_n, heap_cap;
    char* str; size_t str_cap;
    uint32_t* cp; size_t* bo; size_t* ends; size_t* scratch; size_t cp_cap;
    int failed;
} qx__work;

static int qx__before(const qx__pair* a, const qx__pair* b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static void qx__heap_push(qx__work* w, const qx__pair* p) {
    int64_t i;
    if (w->heap_n == w->heap_cap) {
        int64_t nc = w->heap_cap ? w->heap_cap * 2 : 256;
        qx__pair* h = (qx__pair*)realloc(w->heap, (size_t)nc * sizeof *h);
        if (!h) { w->failed = 1; return; }
        w->heap = h;
        w->heap_cap = nc;
    }
    i = w->heap_n++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!qx__before(p, &w->heap[parent])) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = *p;
}

static qx__pair qx__heap_pop(qx__work* w) {
    qx__pair top = w->heap[0], last = w->heap[--w->heap_n];
    int64_t i = 0, n = w->heap_n;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && qx__before(&w->heap[c + 1], &w->heap[c])) ++c;
        if (!qx__before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

static void qx__try_pair(const qx_vocab* v, qx__work* w, int32_t l, int32_t r) {
    qx__pair p;
    if (l < 0 || r < 0) return;
    p.left = l;
    p.right = r;
    p.size = w->sym[l].n + w->sym[r].n;
    if (v->kind == QX_VOCAB_SPM && !v->use_merges) {
        int32_t id = qx_vocab_lookup(v, w->str + w->sym[l].start, (size_t)p.size);
        if (id < 0) return;
        p.key = (double)v->score[id];
        p.res = id;
    } else {
        int32_t rank;
        if (w->sym[l].id < 0 || w->sym[r].id < 0 || !qx__merge_find(v, w->sym[l].id, w->sym[r].id, &rank, &p.res)) return;
        p.key = -(double)rank;
    }
    qx__heap_push(w, &p);
}

/* Symbols = the UTF-8 characters of w->str[0..n); merges them; returns the symbol count (the list
   starts at 0). */
static int32_t qx__merge(const qx_vocab* v, qx__work* w, size_t n) {
    int32_t count = 0, i;
    size_t off = 0;
    if ((int64_t)n > w->sym_cap) {
        qx__sym* s = (qx__sym*)realloc(w->sym, n * sizeof *s);
        if (!s) { w->failed = 1; return 0; }
        w->sym = s;
        w->sym_cap = (int64_t)n;
    }
    while (off < n) {
        unsigned char c = (unsigned char)w->str[off];
        size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (k > n - off) k = n - off;
        w->sym[count].start = (int32_t)off;
        w->sym[count].n = (int32_t)k;
        w->sym[count].prev = count - 1;
        w->sym[count].next = off + k < n ? count + 1 : -1;
        w->sym[count].id = qx_vocab_lookup(v, w->str + off, k);
        off += k;
        ++count;
    }
    w->heap_n = 0;
    for (i = 1; i < count; ++i) qx__try_pair(v, w, i - 1, i);
    while (w->heap_n > 0 && !w->failed) {
        qx__pair p = qx__heap_pop(w);
        qx__sym* l = &w->sym[p.left];
        qx__sym* r = &w->sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue;
        l->n += r->n;
        l->id = p.res;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = p.left;
        qx__try_pair(v, w, l->prev, p.left);
        qx__try_pair(v, w, p.left, l->next);
    }
    return count;
}

static int qx__reserve_str(qx__work* w, size_t n) {
    if (n <= w->str_cap) return 1;
    {
        char* s = (char*)realloc(w->str, n);
        if (!s) { w->failed = 1; return 0; }
        w->str = s;
        w->str_cap = n;
    }
    return 1;
}

static quarot_result qx__encode_spm(const qx_vocab* v, qx__work* w, const char* text, size_t len, int prefix, qx__ivec* out,
                                    qx_err* e) {
    size_t i, n = 0;
    int32_t s;
    if (!qx__reserve_str(w, 3 * (len + 1))) return QUAROT_ERR_OUT_OF_MEMORY;
    if (prefix) { memcpy(w->str, "\xE2\x96\x81", 3); n = 3; }
    for (i = 0; i < len; ++i) {
        if (text[i] == ' ') { memcpy(w->str + n, "\xE2\x96\x81", 3); n += 3; }
        else w->str[n++] = text[i];
    }
    qx__merge(v, w, n);
    if (w->failed) return QUAROT_ERR_OUT_OF_MEMORY;
    for (s = 0; s >= 0 && n > 0; s = w->sym[s].next) {
        const qx__sym* y = &w->sym[s];
        int32_t k, ok = v->byte_fallback;
        if (y->id >= 0) { qx__push(out, y->id); continue; }
        for (k = 0; k < y->n && ok; ++k)
            if (v->byte_tok[(unsigned char)w->str[y->start + k]] < 0) ok = 0;
        if (ok) {
            for (k = 0; k < y->n; ++k) qx__push(out, v->byte_tok[(unsigned char)w->str[y->start + k]]);
        } else if (v->unk >= 0) {
            qx__push(out, v->unk);
        } else {
            qx_err_set(e, "no token for the text '%.*s' and no byte-fallback or unknown token", (int)y->n, w->str + y->start);
            return QUAROT_ERR_PARSE;
        }
    }
    return QUAROT_OK;
}

static quarot_result qx__encode_bpe(const qx_vocab* v, qx__work* w, const char* text, size_t len, qx__ivec* out) {
    size_t n_cp = 0, i, n_words, wd, begin = 0;
    if (len + 1 > w->cp_cap) {
        size_t c = len + 1;
        uint32_t* cp = (uint32_t*)realloc(w->cp, c * sizeof *cp);
        size_t* bo = cp ? (size_t*)realloc(w->bo, c * sizeof *bo) : NULL;
        size_t* en = bo ? (size_t*)realloc(w->ends, c * sizeof *en) : NULL;
        size_t* sc = en ? (size_t*)realloc(w->scratch, c * sizeof *sc) : NULL;
        if (cp) w->cp = cp;
        if (bo) w->bo = bo;
        if (en) w->ends = en;
        if (!sc) return QUAROT_ERR_OUT_OF_MEMORY;
        w->scratch = sc;
        w->cp_cap = c;
    }
    for (i = 0; i < len;) {
        int k = qx_utf8_decode((const unsigned char*)text + i, len - i, &w->cp[n_cp]);
        if (k <= 0) k = 1;   /* checked before; never here */
        w->bo[n_cp++] = i;
        i += (size_t)k;
    }
    w->bo[n_cp] = len;
    n_words = qx_pre_split(&v->pre, w->cp, n_cp, w->ends, w->scratch);
    if (!qx__reserve_str(w, 2 * len + 1)) return QUAROT_ERR_OUT_OF_MEMORY;
    for (wd = 0; wd < n_words; ++wd) {
        size_t b0 = w->bo[begin], b1 = w->bo[w->ends[wd]], n = 0, b;
        int32_t s;
        begin = w->ends[wd];
        for (b = b0; b < b1; ++b) n += (size_t)qx_utf8_encode(qx__byte_cp((unsigned char)text[b]), (unsigned char*)w->str + n);
        if (v->pre.ignore_merges) {
            int32_t id = qx_vocab_lookup(v, w->str, n);
            if (id >= 0) { qx__push(out, id); continue; }
        }
        qx__merge(v, w, n);
        if (w->failed) return QUAROT_ERR_OUT_OF_MEMORY;
        for (s = 0; s >= 0 && n > 0; s = w->sym[s].next) {
            const qx__sym* y = &w->sym[s];
            int32_t k;
            if (y->id >= 0) { qx__push(out, y->id); continue; }
            for (k = 0; k < y->n; ++k) {
                int32_t id = qx_vocab_lookup(v, w->str + y->start + k, 1);
                if (id >= 0) qx__push(out, id);
            }
        }
    }
    return QUAROT_OK;
}

/* The special token that starts at text[pos] (the longest), or -1; *mlen its length. */
static int32_t qx__special_at(const qx_vocab* v, const char* text, size_t len, size_t pos, int parse_special, size_t* mlen) {
    int32_t i;
    for (i = 0; i < v->n_special; ++i) {
        int32_t id = v->special[i];
        size_t n = (size_t)v->len[id];
        if (!parse_special && v->type[id] != QX_TT_USER_DEFINED) continue;
        if (n <= len - pos && v->text[id][0] == text[pos] && memcmp(v->text[id], text + pos, n) == 0) { *mlen = n; return id; }
    }
    return -1;
}

quarot_result qx_vocab_encode(const qx_vocab* v, const char* text, size_t len, int add_bos, int add_eos,
                              int parse_special, int32_t** out, int64_t* n_out, qx_err* e) {
    qx__ivec ids;
    qx__work w;
    size_t bad, pos = 0, raw = 0;
    int prev_special = 1;
    unsigned char first[256];
    int32_t i;
    quarot_result r = QUAROT_OK;
    *out = NULL;
    *n_out = 0;
    if (!v || !v->hash || (!text && len)) { qx_err_set(e, "tokenizer: bad arguments"); return QUAROT_ERR_INVALID_ARGUMENT; }
    bad = qx_utf8_check((const unsigned char*)text, len);
    if (bad < len) { qx_err_set(e, "byte offset %zu: invalid UTF-8 (byte 0x%02X)", bad, (unsigned char)text[bad]); return QUAROT_ERR_PARSE; }
    memset(&ids, 0, sizeof ids);
    memset(&w, 0, sizeof w);
    memset(first, 0, sizeof first);
    for (i = 0; i < v->n_special; ++i) first[(unsigned char)v->text[v->special[i]][0]] = 1;
    if (add_bos && v->bos >= 0) qx__push(&ids, v->bos);
    while (r == QUAROT_OK) {
        size_t mlen = 0;
        int32_t sp = -1;
        int at_end = pos >= len;
        if (!at_end && first[(unsigned char)text[pos]]) sp = qx__special_at(v, text, len, pos, parse_special, &mlen);
        if (at_end || sp >= 0) {
            if (pos > raw) {
                r = v->kind == QX_VOCAB_SPM ? qx__encode_spm(v, &w, text + raw, pos - raw, prev_special && v->add_space_prefix, &ids, e)
                                            : qx__encode_bpe(v, &w, text + raw, pos - raw, &ids);
                prev_special = 0;
            }
            if (at_end || r != QUAROT_OK) break;
            qx__push(&ids, sp);
            prev_special = 1;
            pos += mlen;
            raw = pos;
            continue;
        }
        {
            unsigned char c = (unsigned char)text[pos];
            pos += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        }
    }
    if (r == QUAROT_OK && add_eos && v->eos >= 0) qx__push(&ids, v->eos);
    if ((r == QUAROT_OK && (ids.failed || w.failed)) || r == QUAROT_ERR_OUT_OF_MEMORY) {
        qx_err_set(e, "tokenizer: out of memory");
        r = QUAROT_ERR_OUT_OF_MEMORY;
    }
    free(w.sym); free(w.heap); free(w.str); free(w.cp); free(w.bo); free(w.ends); free(w.scratch);
    if (r != QUAROT_OK) { free(ids.p); return r; }
    *out = ids.p;
    *n_out = ids.n;
    return QUAROT_OK;
}
