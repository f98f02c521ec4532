/* Tokenizer: loading with validation, the fast encoder against a direct slow port of llama2.c's
   run.c `encode` (independent truth: its own parser of tokenizer.bin, bsearch lookups, the quadratic
   merge loop), decoding, and the whole-file helper on ../shared data. */
#include "tokenizer/qx_tokenizer.h"
#include "qt.h"

#include <ctype.h>
#include <time.h>

/* ---- the slow reference: run.c's algorithm, conventions as documented in qx_tokenizer.h ---------- */

typedef struct slow_tok {
    int vocab_size;
    char** vocab;           /* C strings (cut at NUL, as run.c's strcmp sees them) */
    float* scores;
    int* sorted;            /* ids sorted by (string, id) */
    int max_len;
} slow_tok;

static const slow_tok* slow_cmp_ctx;
static int slow_cmp(const void* a, const void* b) {
    int ia = *(const int*)a, ib = *(const int*)b;
    int c = strcmp(slow_cmp_ctx->vocab[ia], slow_cmp_ctx->vocab[ib]);
    return c ? c : (ia > ib) - (ia < ib);
}

/* Parses a well-formed tokenizer.bin (the tests only feed it good data). */
static int slow_load(slow_tok* s, const unsigned char* d, size_t n) {
    size_t off = 4;
    int cnt = 0, i;
    memset(s, 0, sizeof *s);
    while (off + 8 <= n) { unsigned len; memcpy(&len, d + off + 4, 4); off += 8 + len; ++cnt; }
    if (off != n) return 0;
    s->vocab_size = cnt;
    s->vocab = (char**)malloc((size_t)cnt * sizeof(char*));
    s->scores = (float*)malloc((size_t)cnt * sizeof(float));
    s->sorted = (int*)malloc((size_t)cnt * sizeof(int));
    for (i = 0, off = 4; i < cnt; ++i) {
        unsigned len;
        memcpy(&s->scores[i], d + off, 4);
        memcpy(&len, d + off + 4, 4);
        s->vocab[i] = (char*)malloc(len + 1);
        memcpy(s->vocab[i], d + off + 8, len);
        s->vocab[i][len] = 0;
        if ((int)strlen(s->vocab[i]) > s->max_len) s->max_len = (int)strlen(s->vocab[i]);
        s->sorted[i] = i;
        off += 8 + len;
    }
    slow_cmp_ctx = s;
    qsort(s->sorted, (size_t)cnt, sizeof(int), slow_cmp);
    return 1;
}

static void slow_free(slow_tok* s) {
    int i;
    for (i = 0; i < s->vocab_size; ++i) free(s->vocab[i]);
    free(s->vocab); free(s->scores); free(s->sorted);
}

/* bsearch over the sorted strings, then the lowest id among equal ones */
static int slow_lookup(const slow_tok* s, const char* str) {
    int lo = 0, hi = s->vocab_size - 1, found = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(str, s->vocab[s->sorted[mid]]);
        if (c == 0) { found = mid; hi = mid - 1; }   /* keep going left: first of the equal run */
        else if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return found < 0 ? -1 : s->sorted[found];
}

/* run.c's encode on a NUL-free text of len bytes. */
static int slow_encode(const slow_tok* t, const char* text, size_t len, int bos, int eos, int* tokens) {
    char* str_buffer = (char*)malloc((size_t)t->max_len * 2 + 3 + 4);
    size_t str_len = 0, c;
    int n = 0;
    if (bos) tokens[n++] = 1;
    if (len > 0) {
        int dummy = slow_lookup(t, " ");
        tokens[n++] = dummy >= 0 ? dummy : ' ' + 3;
    }
    for (c = 0; c < len; ++c) {
        int id;
        if ((text[c] & 0xC0) != 0x80) str_len = 0;
        str_buffer[str_len++] = text[c];
        str_buffer[str_len] = '\0';
        if (c + 1 < len && (text[c + 1] & 0xC0) == 0x80 && str_len < 4) continue;
        id = slow_lookup(t, str_buffer);
        if (id != -1) {
            tokens[n++] = id;
        } else {
            size_t i;
            for (i = 0; i < str_len; ++i) tokens[n++] = (unsigned char)str_buffer[i] + 3;
        }
        str_len = 0;
    }
    while (1) {
        float best_score = -1e10f;
        int best_id = -1, best_idx = -1, i;
        for (i = 0; i < n - 1; ++i) {
            int id;
            if (strlen(t->vocab[tokens[i]]) + strlen(t->vocab[tokens[i + 1]]) > (size_t)t->max_len) continue;
            sprintf(str_buffer, "%s%s", t->vocab[tokens[i]], t->vocab[tokens[i + 1]]);
            id = slow_lookup(t, str_buffer);
            if (id != -1 && t->scores[id] > best_score) {
                best_score = t->scores[id];
                best_id = id;
                best_idx = i;
            }
        }
        if (best_idx == -1) break;
        tokens[best_idx] = best_id;
        for (i = best_idx + 1; i < n - 1; ++i) tokens[i] = tokens[i + 1];
        n--;
    }
    if (eos) tokens[n++] = 2;
    free(str_buffer);
    return n;
}

/* ---- helpers ---------------------------------------------------------------------------------- */


/* A growing byte buffer for hand-made tokenizer files. */
typedef struct tbuf { unsigned char* d; size_t n, cap; } tbuf;
static void tb_put(tbuf* b, const void* p, size_t n) {
    if (b->n + n > b->cap) { b->cap = (b->n + n) * 2 + 64; b->d = (unsigned char*)realloc(b->d, b->cap); }
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void tb_u32(tbuf* b, unsigned v) { unsigned char x[4]; x[0] = (unsigned char)v; x[1] = (unsigned char)(v >> 8); x[2] = (unsigned char)(v >> 16); x[3] = (unsigned char)(v >> 24); tb_put(b, x, 4); }
static void tb_tok(tbuf* b, float score, const char* s, size_t len) {
    unsigned u;
    memcpy(&u, &score, 4);
    tb_u32(b, u);
    tb_u32(b, (unsigned)len);
    tb_put(b, s, len);
}

/* A vocabulary shaped like sentencepiece's (<unk>, <s>, </s>, 256 byte tokens) plus pieces over
   {a, b, c, ' '} with many equal scores, a duplicate, and scores at run.c's -1e10 threshold, NaN. */
static tbuf make_tie_vocab(void) {
    static const char* extra[] = { " ", "a", "b", "c", "ab", "ba", "aa", "bb", " a", " b", "a ", "abc", "aab", "bab",
                                   "ab", "ca", "bc", "cb", "aaa", " ab", "b a", "cc", "ac" };
    static const float sc[] = { 0, 0, 0, 0, -1, -1, -1, -2, -1, -2, -1, -1, -1, -2,
                                -0.5f, -1e10f, -9e9f, 0, -1, -1, -2, -3, -3 };
    tbuf b;
    int i;
    char s[8];
    memset(&b, 0, sizeof b);
    tb_u32(&b, 6);
    tb_tok(&b, 0, "<unk>", 5); tb_tok(&b, 0, "<s>", 3); tb_tok(&b, 0, "</s>", 4);
    for (i = 0; i < 256; ++i) { snprintf(s, sizeof s, "<0x%02X>", i); tb_tok(&b, 0, s, 6); }
    for (i = 0; i < (int)(sizeof extra / sizeof extra[0]); ++i) {
        float score = sc[i];
        if (strcmp(extra[i], "cb") == 0) score = (float)NAN;
        tb_tok(&b, score, extra[i], strlen(extra[i]));
    }
    return b;
}

static int compare_fast_slow(const qx_tokenizer* t, const slow_tok* s, const char* text, size_t len, int bos, int eos) {
    int64_t cap = qx_tokenizer_max_tokens(len), n = 0, i;
    int32_t* fast = (int32_t*)malloc((size_t)cap * sizeof(int32_t));
    int* slow = (int*)malloc((size_t)cap * sizeof(int));
    int ns, same;
    qx_err e;
    quarot_result r = qx_tokenizer_encode(t, text, len, bos, eos, fast, cap, &n, &e);
    ns = slow_encode(s, text, len, bos, eos, slow);
    same = r == QUAROT_OK && n == ns;
    for (i = 0; same && i < n; ++i) same = fast[i] == slow[i];
    if (!same) {
        printf("    mismatch on %zu-byte text (fast %lld tokens, slow %d, r %d)\n", len, (long long)n, ns, (int)r);
    }
    free(fast);
    free(slow);
    return same;
}

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_load_shared(void) {
    const char* p = qt_shared_path("models/stories260K/tok512.bin");
    qx_tokenizer t;
    qx_err e;
    if (!p) { QT_SKIP("../shared/models/stories260K/tok512.bin not found"); return; }
    QT_OK(qx_tokenizer_load(&t, p, 512, &e));
    QT_EQ_INT(t.vocab_size, 512);
    QT_EQ_INT(t.max_token_length, 7);
    QT_CHECK(strcmp(t.pieces[0], "<unk>") == 0);
    QT_CHECK(strcmp(t.pieces[3], "<0x00>") == 0);
    QT_CHECK(strcmp(t.pieces[259], " t") == 0);
    QT_NEAR(t.scores[260], -1.0, 0);
    QT_EQ_INT(qx_tokenizer_lookup(&t, " t", 2), 259);
    QT_EQ_INT(qx_tokenizer_lookup(&t, "zzzz", 4), -1);
    qx_tokenizer_free(&t);
    QT_OK(qx_tokenizer_load(&t, p, 0, &e));   /* count inferred */
    QT_EQ_INT(t.vocab_size, 512);
    qx_tokenizer_free(&t);
    /* asking for fewer tokens than the file holds: trailing bytes */
    QT_ERR(qx_tokenizer_load(&t, p, 500, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "trailing") != NULL && strstr(e.msg, "tok512.bin") != NULL);
    QT_ERR(qx_tokenizer_load(&t, p, 600, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "truncated at token 512") != NULL);
    QT_ERR(qx_tokenizer_load(&t, "/nonexistent/tok.bin", 0, &e), QUAROT_ERR_IO);
    QT_CHECK(strstr(e.msg, "/nonexistent/tok.bin") != NULL);
}

static void test_hostile(void) {
    tbuf b = make_tie_vocab(), h;
    qx_tokenizer t;
    qx_err e;
    size_t cut;
    int bad = 0;
    /* every truncation of a good file fails cleanly with vocab given; with vocab 0 a cut exactly at a
       record boundary is a valid shorter vocabulary */
    for (cut = 0; cut < b.n; ++cut) {
        quarot_result r = qx_tokenizer_load_memory(&t, b.d, cut, 282, "cut", &e);
        if (r != QUAROT_ERR_PARSE || !strstr(e.msg, "truncated")) ++bad;
        qx_tokenizer_free(&t);
        r = qx_tokenizer_load_memory(&t, b.d, cut, 0, "cut", &e);
        if (r == QUAROT_OK) { if (t.vocab_size < 1) ++bad; }
        else if (r != QUAROT_ERR_PARSE) ++bad;
        qx_tokenizer_free(&t);
    }
    QT_EQ_INT(bad, 0);
    QT_OK(qx_tokenizer_load_memory(&t, b.d, b.n, 282, "full", &e));
    QT_EQ_INT(t.vocab_size, 282);
    qx_tokenizer_free(&t);
    /* a negative (huge) length, a length beyond max_token_length, a huge max_token_length */
    memset(&h, 0, sizeof h);
    tb_u32(&h, 8); tb_u32(&h, 0); tb_u32(&h, 0xffffffffu); tb_put(&h, "abcdefgh", 8);
    QT_ERR(qx_tokenizer_load_memory(&t, h.d, h.n, 0, "neg", &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "neg: token 0 has length 4294967295") != NULL);
    h.n = 0;
    tb_u32(&h, 2); tb_tok(&h, 0, "abc", 3);
    QT_ERR(qx_tokenizer_load_memory(&t, h.d, h.n, 0, "long", &e), QUAROT_ERR_PARSE);
    h.n = 0;
    tb_u32(&h, 0x7fffffffu); tb_tok(&h, 0, "abc", 3);
    QT_ERR(qx_tokenizer_load_memory(&t, h.d, h.n, 0, "mtl", &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "max_token_length") != NULL);
    h.n = 0;
    tb_u32(&h, 4);
    QT_ERR(qx_tokenizer_load_memory(&t, h.d, h.n, 0, "empty", &e), QUAROT_ERR_PARSE);   /* no tokens */
    QT_ERR(qx_tokenizer_load_memory(&t, h.d, h.n, -3, "neg vocab", &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(qx_tokenizer_load_memory(&t, NULL, 5, 0, "null", &e), QUAROT_ERR_INVALID_ARGUMENT);
    qx_tokenizer_free(&t);
    /* a tiny vocabulary: encoding needs byte fallback ids it does not have -> error, not a wild index */
    h.n = 0;
    tb_u32(&h, 4); tb_tok(&h, 0, "<unk>", 4); tb_tok(&h, 0, "<s>", 3); tb_tok(&h, 0, "</s>", 4); tb_tok(&h, 0, "a", 1);
    QT_OK(qx_tokenizer_load_memory(&t, h.d, h.n, 0, "tiny", &e));
    {
        int32_t tok[16];
        int64_t n;
        QT_ERR(qx_tokenizer_encode(&t, "ab", 2, 1, 1, tok, 16, &n, &e), QUAROT_ERR_PARSE);
        QT_ERR(qx_tokenizer_encode(&t, "", 0, 1, 1, tok, 16, &n, &e), QUAROT_OK);
        QT_EQ_INT(n, 2);
    }
    qx_tokenizer_free(&t);
    free(b.d);
    free(h.d);
}

static void test_encode_edge_cases(void) {
    const char* p = qt_shared_path("models/stories260K/tok512.bin");
    static const char* texts[] = {
        "", " ", "   ", "\n", "\n\n\n", "a", "Hello world", "Once upon a time, there was a little girl.",
        "  leading and trailing  ", "tab\there", "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80",
        "\xff\xfe", "\x80\x80\x80\x80\x80\x80", "a\xc3", "\xe2\x82", "\xf0\x9f\x98\x80\x80\x80\x80\x80",
        "\xc3\xa9\xc3\xa9\xc3", "\x7f\x01\x02 \x1b[0m", "Lily's mom said, \"No!\"", "\xe2\x84\xa2\xe2\x80\x8a[]~"
    };
    unsigned char* d;
    size_t n;
    slow_tok s;
    qx_tokenizer t;
    qx_err e;
    int i, bad = 0;
    if (!p) { QT_SKIP("../shared/models/stories260K/tok512.bin not found"); return; }
    d = (unsigned char*)qt_read_file(p, &n);
    QT_CHECK(d && slow_load(&s, d, n));
    QT_OK(qx_tokenizer_load_memory(&t, d, n, 512, p, &e));
    for (i = 0; i < (int)(sizeof texts / sizeof texts[0]); ++i) {
        int f;
        for (f = 0; f < 4; ++f) bad += !compare_fast_slow(&t, &s, texts[i], strlen(texts[i]), f & 1, f >> 1);
    }
    QT_EQ_INT(bad, 0);
    {   /* fixed facts: "" -> [BOS]; " " alone is the dummy prefix + one space, merged */
        int32_t tok[64];
        int64_t k;
        QT_OK(qx_tokenizer_encode(&t, "", 0, 1, 0, tok, 64, &k, &e));
        QT_EQ_INT(k, 1);
        QT_EQ_INT(tok[0], 1);
        QT_OK(qx_tokenizer_encode(&t, "", 0, 0, 1, tok, 64, &k, &e));
        QT_EQ_INT(k, 1);
        QT_EQ_INT(tok[0], 2);
        QT_OK(qx_tokenizer_encode(&t, "\xff", 1, 0, 0, tok, 64, &k, &e));   /* prefix + byte fallback */
        QT_EQ_INT(k, 2);
        QT_EQ_INT(tok[1], 0xff + 3);
        QT_OK(qx_tokenizer_encode(&t, "a\0b", 3, 0, 0, tok, 64, &k, &e));    /* NUL -> <0x00> = 3 */
        QT_CHECK(k >= 3 && tok[k - 2] == 3);
        /* too little room: WORKSPACE and the count needed */
        QT_ERR(qx_tokenizer_encode(&t, "Hello world", 11, 1, 1, tok, 2, &k, &e), QUAROT_ERR_WORKSPACE);
        QT_CHECK(k > 2);
        QT_ERR(qx_tokenizer_encode(&t, NULL, 3, 0, 0, tok, 64, &k, &e), QUAROT_ERR_INVALID_ARGUMENT);
    }
    qx_tokenizer_free(&t);
    slow_free(&s);
    free(d);
}

static void test_encode_random_substrings(void) {
    const char* files[2] = { "data/tinystories_eval.txt", "data/tinystories_calib.txt" };
    const char* models[2] = { "models/stories260K/tok512.bin", "models/aidreams260K/tok512.bin" };
    int m, bad = 0, total = 0, iters = qt_quick() ? 12 : 60, maxlen = qt_quick() ? 200 : 700;
    qt_seed(7);
    for (m = 0; m < 2; ++m) {
        const char* tp = qt_shared_path(models[m]);
        unsigned char* td;
        size_t tn;
        slow_tok s;
        qx_tokenizer t;
        qx_err e;
        int f;
        if (!tp) { QT_SKIP("../shared tokenizers not found"); return; }
        td = (unsigned char*)qt_read_file(tp, &tn);
        QT_CHECK(td && slow_load(&s, td, tn));
        QT_OK(qx_tokenizer_load_memory(&t, td, tn, 512, tp, &e));
        for (f = 0; f < 2; ++f) {
            const char* xp = qt_shared_path(files[f]);
            unsigned char* xd;
            size_t xn;
            int it;
            if (!xp) continue;
            xd = (unsigned char*)qt_read_file(xp, &xn);
            for (it = 0; it < iters; ++it) {   /* random byte offsets: cuts through UTF-8 sequences too */
                size_t len = (size_t)(qt_uniform() * maxlen), start = (size_t)(qt_uniform() * (double)(xn - len));
                bad += !compare_fast_slow(&t, &s, (const char*)xd + start, len, it & 1, (it >> 1) & 1);
                ++total;
            }
            free(xd);
        }
        /* random bytes 1..255 (mostly invalid UTF-8) */
        for (f = 0; f < iters; ++f) {
            char buf[256];
            int len = (int)(qt_uniform() * 255), k;
            for (k = 0; k < len; ++k) buf[k] = (char)(1 + (int)(qt_uniform() * 255));
            bad += !compare_fast_slow(&t, &s, buf, (size_t)len, f & 1, 0);
            ++total;
        }
        qx_tokenizer_free(&t);
        slow_free(&s);
        free(td);
    }
    printf("    %d texts compared with the slow port\n", total);
    QT_EQ_INT(bad, 0);
}

static void test_encode_ties(void) {
    /* Equal scores everywhere: the merge order is decided by "leftmost first" alone. */
    tbuf b = make_tie_vocab();
    slow_tok s;
    qx_tokenizer t;
    qx_err e;
    int it, bad = 0, n = qt_quick() ? 200 : 1500;
    static const char alpha[] = "aabbc ";
    QT_CHECK(slow_load(&s, b.d, b.n));
    QT_OK(qx_tokenizer_load_memory(&t, b.d, b.n, 0, "ties", &e));
    QT_EQ_INT(qx_tokenizer_lookup(&t, "ab", 2), 263);   /* the duplicate "ab" resolves to the lower id */
    qt_seed(11);
    for (it = 0; it < n; ++it) {
        char buf[80];
        int len = (int)(qt_uniform() * 70), k;
        for (k = 0; k < len; ++k) buf[k] = alpha[(int)(qt_uniform() * 6)];
        bad += !compare_fast_slow(&t, &s, buf, (size_t)len, it & 1, (it >> 1) & 1);
    }
    QT_EQ_INT(bad, 0);
    {   /* the -1e10 threshold: "bc" (-9e9) merges, "ca" (exactly -1e10) never does, "cb" (NaN) never */
        int32_t tok[16];
        int64_t k;
        QT_OK(qx_tokenizer_encode(&t, "cbc", 3, 0, 0, tok, 16, &k, &e));   /* " " "c" "bc" */
        QT_EQ_INT(k, 3);
        QT_EQ_INT(tok[2], qx_tokenizer_lookup(&t, "bc", 2));
        QT_OK(qx_tokenizer_encode(&t, "ca", 2, 0, 0, tok, 16, &k, &e));
        QT_EQ_INT(k, 3);
        QT_OK(qx_tokenizer_encode(&t, "cb", 2, 0, 0, tok, 16, &k, &e));
        QT_EQ_INT(k, 3);
    }
    qx_tokenizer_free(&t);
    slow_free(&s);
    free(b.d);
}

static void test_decode(void) {
    tbuf b = make_tie_vocab();
    qx_tokenizer t;
    qx_err e;
    size_t n;
    const char* p;
    QT_OK(qx_tokenizer_load_memory(&t, b.d, b.n, 0, "dec", &e));
    p = qx_tokenizer_decode(&t, 1, qx_tokenizer_lookup(&t, " a", 2), &n);   /* after BOS: space stripped */
    QT_CHECK(n == 1 && p[0] == 'a');
    p = qx_tokenizer_decode(&t, 5, qx_tokenizer_lookup(&t, " a", 2), &n);
    QT_CHECK(n == 2 && memcmp(p, " a", 2) == 0);
    p = qx_tokenizer_decode(&t, 5, 3 + 0x0A, &n);                           /* <0x0A> -> "\n" */
    QT_CHECK(n == 1 && p[0] == '\n');
    p = qx_tokenizer_decode(&t, 5, 3 + 0xC3, &n);
    QT_CHECK(n == 1 && (unsigned char)p[0] == 0xC3);
    QT_CHECK(!qx_tokenizer_safe_piece(p, n) || isprint(0xC3));
    QT_CHECK(qx_tokenizer_safe_piece("\n", 1));
    QT_CHECK(!qx_tokenizer_safe_piece("\x07", 1));
    QT_CHECK(qx_tokenizer_decode(&t, 0, -1, &n) == NULL);
    QT_CHECK(qx_tokenizer_decode(&t, 0, t.vocab_size, &n) == NULL);
    qx_tokenizer_free(&t);
    free(b.d);
}

/* The whole eval text: count, time, the fast encoder vs the slow port's cost on a slice, and the
   decoded tokens reproducing the text exactly (prefix space + text). */
static void test_tokenize_eval_file(void) {
    const char* tp0 = qt_shared_path("models/stories260K/tok512.bin");
    char xpath[4096], tp[4096];   /* qt_shared_path returns one static buffer: keep copies */
    const char* xp;
    qx_tokenizer t;
    qx_err e;
    int32_t* tok = NULL;
    int64_t n = 0, i;
    unsigned char* text;
    size_t tn, pos;
    clock_t c0;
    double secs;
    int same = 1;
    if (!tp0) { QT_SKIP("../shared/models/stories260K/tok512.bin not found"); return; }
    snprintf(tp, sizeof tp, "%s", tp0);
    QT_OK(qx_tokenizer_load(&t, tp, 512, &e));
    xp = qt_shared_path("data/tinystories_eval.txt");
    if (!xp) { qx_tokenizer_free(&t); QT_SKIP("../shared/data/tinystories_eval.txt not found"); return; }
    snprintf(xpath, sizeof xpath, "%s", xp);
    c0 = clock();
    QT_OK(qx_tokenize_file(&t, xpath, 1, 0, &tok, &n, &e));
    secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    text = (unsigned char*)qt_read_file(xpath, &tn);
    printf("    tinystories_eval.txt: %zu bytes -> %lld tokens (with BOS) in %.3f s (stories260K tok512)\n", tn,
           (long long)n, secs);
    QT_CHECK(n > 1000 && n < (int64_t)tn);
    QT_CHECK(tok && tok[0] == 1);
    /* decode: " " + text, exactly */
    pos = 0;
    for (i = 1; tok && i < n && same; ++i) {
        size_t pl;
        const char* pc = qx_tokenizer_decode(&t, 0, tok[i], &pl);   /* prev 0: keep the dummy-prefix space */
        if (i == 1) { same = pl >= 1 && pc[0] == ' '; ++pc; --pl; }
        same = same && pos + pl <= tn && memcmp(text + pos, pc, pl) == 0;
        pos += pl;
    }
    QT_CHECK(same && pos == tn);
    {   /* speed against run.c's quadratic loop on a 3000-byte slice (same tokens, of course) */
        unsigned char* td;
        size_t tdn;
        slow_tok s;
        size_t len = qt_quick() ? 600 : 3000;
        int32_t* f = (int32_t*)malloc((len + 3) * sizeof(int32_t));
        int* sl = (int*)malloc((len + 3) * sizeof(int));
        int64_t nf;
        int ns;
        double tf, ts;
        td = (unsigned char*)qt_read_file(tp, &tdn);
        QT_CHECK(td && slow_load(&s, td, tdn));
        c0 = clock();
        for (i = 0; i < 10; ++i) qx_tokenizer_encode(&t, (const char*)text, len, 0, 0, f, (int64_t)len + 3, &nf, &e);
        tf = (double)(clock() - c0) / CLOCKS_PER_SEC / 10;
        c0 = clock();
        ns = slow_encode(&s, (const char*)text, len, 0, 0, sl);
        ts = (double)(clock() - c0) / CLOCKS_PER_SEC;
        QT_EQ_INT(nf, ns);
        printf("    %zu-byte slice: fast %.2f ms, run.c's loop %.2f ms (%.0fx)\n", len, tf * 1e3, ts * 1e3,
               tf > 0 ? ts / tf : 0.0);
        slow_free(&s);
        free(td); free(f); free(sl);
    }
    free(text);
    free(tok);
    qx_tokenizer_free(&t);
}

int main(void) {
    QT_RUN(test_load_shared);
    QT_RUN(test_hostile);
    QT_RUN(test_encode_edge_cases);
    QT_RUN(test_encode_random_substrings);
    QT_RUN(test_encode_ties);
    QT_RUN(test_decode);
    QT_RUN(test_tokenize_eval_file);
    return qt_finish("test_tokenizer");
}
