/* qx_tokenizer.c - see qx_tokenizer.h.

   Fast BPE that reproduces run.c's merge order. run.c, per step: scan all adjacent pairs (i, i+1),
   take the one whose merged piece has the highest score (> -1e10), the first such i on ties; merge.
   Here: symbols form a doubly linked list (a merge keeps the left node, so node indices stay in
   text order and "leftmost" = "smallest left node index"); every adjacent pair with a mergeable
   result sits in a max-heap keyed by (score, -left). A popped entry is current iff its left node
   still holds the id it was pushed with, its right node is still the left's successor and holds its
   id: only then does (score, position) describe a pair that exists now, and every current pair has
   such an entry, so the heap top is exactly run.c's choice. */
#include "tokenizer/qx_tokenizer.h"
#include "tokenizer/qx_vocab.h"
#include "support/qx_file.h"
#include "support/qx_str.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QX_TOK_MAX_TOKEN_LENGTH 65536u

/* ---- loading ---------------------------------------------------------------------------------- */

static uint64_t qx__tok_hash(const char* s, size_t n) {   /* FNV-1a, 64 bit */
    uint64_t h = 1469598103934665603ull;
    size_t i;
    for (i = 0; i < n; ++i) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h;
}

int32_t qx_tokenizer_lookup(const qx_tokenizer* t, const char* s, size_t len) {
    uint64_t i;
    if (!t || !t->hash || (!s && len)) return -1;
    if (len > (size_t)t->max_len) return -1;
    for (i = qx__tok_hash(s, len) & t->hash_mask;; i = (i + 1) & t->hash_mask) {
        int32_t id = t->hash[i];
        if (id < 0) return -1;
        if ((size_t)t->lens[id] == len && memcmp(t->pieces[id], s, len) == 0) return id;
    }
}

void qx_tokenizer_free(qx_tokenizer* t) {
    if (!t) return;
    if (t->vocab) { qx_vocab_free(t->vocab); free(t->vocab); }
    free(t->scores);
    free(t->pieces);
    free(t->lens);
    free(t->hash);
    free(t->blob);
    memset(t, 0, sizeof *t);
}

quarot_result qx_tokenizer_load_memory(qx_tokenizer* t, const void* data, size_t size, int32_t vocab_size,
                                       const char* name, qx_err* err) {
    const unsigned char* p = (const unsigned char*)data;
    size_t off, blob_bytes = 0, pos;
    uint32_t mtl;
    int64_t count = 0, i;
    uint64_t hsize = 1;
    if (!name) name = "<memory>";
    if (!t) { qx_err_set(err, "%s: no tokenizer", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    memset(t, 0, sizeof *t);
    if ((!data && size) || vocab_size < 0) { qx_err_set(err, "%s: invalid argument", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (size < 4) {
        qx_err_set(err, "%s: truncated: %zu bytes present, a 4-byte max_token_length expected", name, size);
        return QUAROT_ERR_PARSE;
    }
    mtl = qx_str_le32(p);
    if (mtl > QX_TOK_MAX_TOKEN_LENGTH) {
        qx_err_set(err, "%s: max_token_length %u is beyond the sanity bound %u", name, (unsigned)mtl, QX_TOK_MAX_TOKEN_LENGTH);
        return QUAROT_ERR_PARSE;
    }
    /* Pass 1: validate every record and size the blob. */
    for (off = 4; vocab_size > 0 ? count < vocab_size : off < size; ++count) {
        uint32_t len;
        if (size - off < 8) {
            qx_err_set(err, "%s: truncated at token %lld (offset %zu): 8 header bytes expected, %zu present", name,
                       (long long)count, off, size - off);
            return QUAROT_ERR_PARSE;
        }
        len = qx_str_le32(p + off + 4);
        if (len > mtl) {
            qx_err_set(err, "%s: token %lld has length %u > max_token_length %u", name, (long long)count,
                       (unsigned)len, (unsigned)mtl);
            return QUAROT_ERR_PARSE;
        }
        if (size - off - 8 < len) {
            qx_err_set(err, "%s: truncated at token %lld (offset %zu): %u piece bytes expected, %zu present", name,
                       (long long)count, off, (unsigned)len, size - off - 8);
            return QUAROT_ERR_PARSE;
        }
        if (count >= INT32_MAX - 1) { qx_err_set(err, "%s: too many tokens", name); return QUAROT_ERR_OVERFLOW; }
        off += 8 + (size_t)len;
        blob_bytes += (size_t)len + 1;
    }
    if (off != size) {
        qx_err_set(err, "%s: %zu trailing bytes after %lld tokens (%zu bytes expected)", name, size - off,
                   (long long)count, off);
        return QUAROT_ERR_PARSE;
    }
    if (count == 0) { qx_err_set(err, "%s: no tokens", name); return QUAROT_ERR_PARSE; }
    while (hsize < 2 * (uint64_t)count) hsize <<= 1;
    t->vocab_size = (int32_t)count;
    t->max_token_length = mtl;
    t->scores = (float*)malloc((size_t)count * sizeof(float));
    t->pieces = (char**)malloc((size_t)count * sizeof(char*));
    t->lens = (int32_t*)malloc((size_t)count * sizeof(int32_t));
    t->hash = (int32_t*)malloc((size_t)hsize * sizeof(int32_t));
    t->blob = (char*)malloc(blob_bytes);
    if (!t->scores || !t->pieces || !t->lens || !t->hash || !t->blob) {
        qx_tokenizer_free(t);
        qx_err_set(err, "%s: out of memory", name);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    t->hash_mask = hsize - 1;
    memset(t->hash, 0xff, (size_t)hsize * sizeof(int32_t));   /* all -1 */
    /* Pass 2: copy; a piece is a C string in run.c, so it ends at its first NUL. */
    for (i = 0, off = 4, pos = 0; i < count; ++i) {
        uint32_t bits = qx_str_le32(p + off), len = qx_str_le32(p + off + 4);
        const void* nul = memchr(p + off + 8, 0, len);
        size_t clen = nul ? (size_t)((const unsigned char*)nul - (p + off + 8)) : (size_t)len;
        memcpy(&t->scores[i], &bits, 4);
        t->pieces[i] = t->blob + pos;
        memcpy(t->pieces[i], p + off + 8, clen);
        t->pieces[i][clen] = '\0';
        t->lens[i] = (int32_t)clen;
        if (t->lens[i] > t->max_len) t->max_len = t->lens[i];
        pos += (size_t)len + 1;
        off += 8 + (size_t)len;
    }
    for (i = 0; i < count; ++i) {   /* ascending ids: an equal piece already present keeps the lower id */
        uint64_t h;
        for (h = qx__tok_hash(t->pieces[i], (size_t)t->lens[i]) & t->hash_mask;; h = (h + 1) & t->hash_mask) {
            int32_t id = t->hash[h];
            if (id < 0) { t->hash[h] = (int32_t)i; break; }
            if (t->lens[id] == t->lens[i] && memcmp(t->pieces[id], t->pieces[i], (size_t)t->lens[i]) == 0) break;
        }
    }
    for (i = 0; i < 256; ++i) { t->byte_pieces[2 * i] = (unsigned char)i; t->byte_pieces[2 * i + 1] = 0; }
    t->bos_id = QX_TOK_BOS;
    t->eos_id = QX_TOK_EOS;
    t->add_bos = 1;
    snprintf(t->kind, sizeof t->kind, "llama2.c");
    return QUAROT_OK;
}

/* Whole file into a malloc'ed buffer: a regular file (a directory or a device is refused, not
   sized with fseek/ftell) of at most QX_TOKENIZER_MAX_BYTES. */
#define QX_TOKENIZER_MAX_BYTES ((size_t)256 << 20)
static quarot_result qx__read_all(const char* path, unsigned char** data, size_t* size, qx_err* err) {
    char* buf = NULL;
    quarot_result r = qx_read_file(path, QX_TOKENIZER_MAX_BYTES, &buf, size, err);
    *data = (unsigned char*)buf;
    return r;
}

quarot_result qx_tokenizer_load(qx_tokenizer* t, const char* path, int32_t vocab_size, qx_err* err) {
    unsigned char* data;
    size_t size;
    quarot_result r;
    if (!t || !path) { qx_err_set(err, "tokenizer: invalid argument"); return QUAROT_ERR_INVALID_ARGUMENT; }
    memset(t, 0, sizeof *t);
    r = qx__read_all(path, &data, &size, err);
    if (r != QUAROT_OK) return r;
    r = qx_tokenizer_load_memory(t, data, size, vocab_size, path, err);
    free(data);
    return r;
}

/* ---- encoding --------------------------------------------------------------------------------- */

typedef struct qx__cand {
    float score;          /* score of the merged piece */
    int32_t left, right;  /* node indices */
    int32_t lid, rid;     /* their ids when pushed (the entry is stale if either changed) */
    int32_t mid;          /* merged id */
} qx__cand;

typedef struct qx__bpe {
    const qx_tokenizer* t;
    int32_t *id, *prev, *next;   /* per node; id -1 = absorbed */
    qx__cand* heap;
    int64_t n_heap, cap_heap;
    char* buf;                    /* 2 * max_len bytes for concatenations */
} qx__bpe;

static int qx__cand_better(const qx__cand* a, const qx__cand* b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

/* Push the pair (l, r) if its concatenation is a piece with score > -1e10 (run.c's threshold;
   NaN scores never win a comparison there, nor here). */
static int qx__bpe_push(qx__bpe* b, int32_t l, int32_t r) {
    const qx_tokenizer* t = b->t;
    int32_t a = b->id[l], c = b->id[r], m;
    size_t la = (size_t)t->lens[a], lc = (size_t)t->lens[c];
    qx__cand e;
    int64_t i;
    if (la + lc > (size_t)t->max_len) return 1;
    memcpy(b->buf, t->pieces[a], la);
    memcpy(b->buf + la, t->pieces[c], lc);
    m = qx_tokenizer_lookup(t, b->buf, la + lc);
    if (m < 0 || !(t->scores[m] > -1e10f)) return 1;
    if (b->n_heap == b->cap_heap) {
        int64_t nc = b->cap_heap * 2 + 16;
        qx__cand* nh = (qx__cand*)realloc(b->heap, (size_t)nc * sizeof *nh);
        if (!nh) return 0;
        b->heap = nh; b->cap_heap = nc;
    }
    e.score = t->scores[m]; e.left = l; e.right = r; e.lid = a; e.rid = c; e.mid = m;
    for (i = b->n_heap++; i > 0; ) {   /* sift up */
        int64_t p = (i - 1) / 2;
        if (!qx__cand_better(&e, &b->heap[p])) break;
        b->heap[i] = b->heap[p];
        i = p;
    }
    b->heap[i] = e;
    return 1;
}

static qx__cand qx__bpe_pop(qx__bpe* b) {
    qx__cand top = b->heap[0], last = b->heap[--b->n_heap];
    int64_t i = 0, n = b->n_heap;
    for (;;) {   /* sift the last element down from the root */
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && qx__cand_better(&b->heap[c + 1], &b->heap[c])) ++c;
        if (!qx__cand_better(&b->heap[c], &last)) break;
        b->heap[i] = b->heap[c];
        i = c;
    }
    if (n > 0) b->heap[i] = last;
    return top;
}

int32_t qx_tokenizer_window_bos(const qx_tokenizer* t) {
    if (!t) return -1;
    if (!t->vocab) return QX_TOK_BOS;
    return t->add_bos && t->bos_id >= 0 ? t->bos_id : -1;
}

int64_t qx_tokenizer_max_tokens(size_t len) { return 4 * (int64_t)len + 5; }

/* A vocabulary tokenizer's encode, into the caller's array. */
static quarot_result qx__encode_vocab(const qx_tokenizer* t, const char* text, size_t len, int bos, int eos,
                                      int32_t* tokens, int64_t cap, int64_t* n_tokens, qx_err* err) {
    int32_t* ids = NULL;
    int64_t n = 0;
    quarot_result r = qx_vocab_encode(t->vocab, text, len, bos, eos, 0, &ids, &n, err);
    if (r != QUAROT_OK) return r;
    *n_tokens = n;
    if (n > cap) {
        free(ids);
        qx_err_set(err, "encode: %lld tokens do not fit in %lld", (long long)n, (long long)cap);
        return QUAROT_ERR_WORKSPACE;
    }
    if (n) memcpy(tokens, ids, (size_t)n * sizeof *ids);
    free(ids);
    return QUAROT_OK;
}

quarot_result qx_tokenizer_encode(const qx_tokenizer* t, const char* text, size_t len, int bos, int eos,
                                  int32_t* tokens, int64_t cap, int64_t* n_tokens, qx_err* err) {
    qx__bpe b;
    int64_t n = 0, k, out;
    size_t i;
    quarot_result r = QUAROT_OK;
    if (n_tokens) *n_tokens = 0;
    if (t && t->vocab && n_tokens && (tokens || cap == 0) && cap >= 0 && (text || !len))
        return qx__encode_vocab(t, text, len, bos, eos, tokens, cap, n_tokens, err);
    if (!t || !t->pieces || (!text && len) || !n_tokens || (!tokens && cap > 0) || cap < 0) {
        qx_err_set(err, "encode: invalid argument");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (len > (size_t)INT32_MAX - 3 || len > SIZE_MAX / 16) { qx_err_set(err, "encode: text of %zu bytes is too long", len); return QUAROT_ERR_OVERFLOW; }
    if ((bos && t->vocab_size <= QX_TOK_BOS) || (eos && t->vocab_size <= QX_TOK_EOS)) {
        qx_err_set(err, "encode: vocabulary of %d tokens has no BOS/EOS", (int)t->vocab_size);
        return QUAROT_ERR_PARSE;
    }
    memset(&b, 0, sizeof b);
    b.t = t;
    b.id = (int32_t*)malloc((len + 2) * sizeof(int32_t));
    b.prev = (int32_t*)malloc((len + 2) * sizeof(int32_t));
    b.next = (int32_t*)malloc((len + 2) * sizeof(int32_t));
    b.buf = (char*)malloc(2 * (size_t)t->max_len + 1);
    if (!b.id || !b.prev || !b.next || !b.buf) { r = QUAROT_ERR_OUT_OF_MEMORY; goto done; }

    /* 1-2: BOS, dummy prefix, codepoints or byte fallback */
    if (bos) b.id[n++] = QX_TOK_BOS;
    if (len > 0) {
        int32_t sp = qx_tokenizer_lookup(t, " ", 1);
        if (sp < 0) sp = ' ' + 3;
        if (sp >= t->vocab_size) { r = QUAROT_ERR_PARSE; qx_err_set(err, "encode: no token for the dummy-prefix space"); goto done; }
        b.id[n++] = sp;
    }
    for (i = 0; i < len; ) {
        size_t g = 1;
        int32_t id;
        while (i + g < len && g < 4 && ((unsigned char)text[i + g] & 0xC0) == 0x80) ++g;
        id = qx_tokenizer_lookup(t, text + i, g);
        if (id >= 0) {
            b.id[n++] = id;
        } else {
            size_t j;
            for (j = 0; j < g; ++j) {
                int32_t bt = (int32_t)(unsigned char)text[i + j] + 3;
                if (bt >= t->vocab_size) {
                    r = QUAROT_ERR_PARSE;
                    qx_err_set(err, "encode: byte 0x%02X needs fallback token %d but the vocabulary has %d",
                               (unsigned)(unsigned char)text[i + j], (int)bt, (int)t->vocab_size);
                    goto done;
                }
                b.id[n++] = bt;
            }
        }
        i += g;
    }
    for (k = 0; k < n; ++k) { b.prev[k] = (int32_t)(k - 1); b.next[k] = k + 1 < n ? (int32_t)(k + 1) : -1; }

    /* 3: merges, best (score, leftmost) first */
    for (k = 0; k + 1 < n; ++k)
        if (!qx__bpe_push(&b, (int32_t)k, (int32_t)(k + 1))) { r = QUAROT_ERR_OUT_OF_MEMORY; goto done; }
    while (b.n_heap > 0) {
        qx__cand c = qx__bpe_pop(&b);
        int32_t l = c.left, rr = c.right, nx;
        if (b.id[l] != c.lid || b.next[l] != rr || b.id[rr] != c.rid) continue;   /* stale */
        b.id[l] = c.mid;
        b.id[rr] = -1;
        nx = b.next[rr];
        b.next[l] = nx;
        if (nx >= 0) b.prev[nx] = l;
        if ((b.prev[l] >= 0 && !qx__bpe_push(&b, b.prev[l], l)) || (nx >= 0 && !qx__bpe_push(&b, l, nx))) {
            r = QUAROT_ERR_OUT_OF_MEMORY;
            goto done;
        }
    }

    /* 4: walk the list (node 0 is never absorbed: it has no left neighbour), then EOS */
    out = 0;
    for (k = n > 0 ? 0 : -1; k >= 0; k = b.next[k]) {
        if (out < cap) tokens[out] = b.id[k];
        ++out;
    }
    if (eos) { if (out < cap) tokens[out] = QX_TOK_EOS; ++out; }
    *n_tokens = out;
    if (out > cap) { r = QUAROT_ERR_WORKSPACE; qx_err_set(err, "encode: %lld tokens need room, %lld given", (long long)out, (long long)cap); }
done:
    if (r == QUAROT_ERR_OUT_OF_MEMORY) qx_err_set(err, "encode: out of memory");
    free(b.id); free(b.prev); free(b.next); free(b.buf); free(b.heap);
    return r;
}

/* ---- decoding --------------------------------------------------------------------------------- */

static int qx__hex(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

const char* qx_tokenizer_decode(const qx_tokenizer* t, int32_t prev, int32_t token, size_t* len) {
    const char* piece;
    size_t n;
    if (len) *len = 0;
    if (t && t->vocab) {
        const qx_vocab* v = t->vocab;
        if (token < 0 || token >= v->n) return NULL;
        piece = v->dec[token];
        n = (size_t)v->dec_len[token];
        if (v->kind == QX_VOCAB_SPM && prev >= 0 && prev == v->bos && n > 0 && piece[0] == ' ') { ++piece; --n; }
        if (len) *len = n;
        return piece;
    }
    if (!t || !t->pieces || token < 0 || token >= t->vocab_size) return NULL;
    piece = t->pieces[token];
    n = (size_t)t->lens[token];
    if (prev == QX_TOK_BOS && n > 0 && piece[0] == ' ') { ++piece; --n; }   /* sentencepiece strips it */
    if (n == 6 && piece[0] == '<' && piece[1] == '0' && piece[2] == 'x' && piece[5] == '>' &&
        qx__hex(piece[3]) >= 0 && qx__hex(piece[4]) >= 0) {
        int v = qx__hex(piece[3]) * 16 + qx__hex(piece[4]);
        piece = (const char*)t->byte_pieces + 2 * v;
        n = 1;
    }
    if (len) *len = n;
    return piece;
}

int qx_tokenizer_safe_piece(const char* piece, size_t len) {
    if (!piece || len == 0) return 0;
    if (len == 1) {
        unsigned char c = (unsigned char)piece[0];
        return isprint(c) || isspace(c);
    }
    return 1;
}

quarot_result qx_tokenize_file(const qx_tokenizer* t, const char* path, int bos, int eos, int32_t** tokens_out,
                               int64_t* n_tokens, qx_err* err) {
    unsigned char* text;
    size_t size;
    int32_t* tok;
    int64_t cap;
    quarot_result r;
    if (tokens_out) *tokens_out = NULL;
    if (!t || !path || !n_tokens) { qx_err_set(err, "tokenize: invalid argument"); return QUAROT_ERR_INVALID_ARGUMENT; }
    *n_tokens = 0;
    r = qx__read_all(path, &text, &size, err);
    if (r != QUAROT_OK) return r;
    cap = qx_tokenizer_max_tokens(size);
    tok = (int32_t*)malloc((size_t)cap * sizeof(int32_t));
    if (!tok) { free(text); qx_err_set(err, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = qx_tokenizer_encode(t, (const char*)text, size, bos, eos, tok, cap, n_tokens, err);
    free(text);
    if (r != QUAROT_OK) {
        char why[sizeof err->msg];
        if (err) { memcpy(why, err->msg, sizeof why); qx_err_set(err, "%s: %s", path, why); }
        free(tok);
        return r;
    }
    if (tokens_out) *tokens_out = tok;
    else free(tok);
    return QUAROT_OK;
}
