/* qx_json: strict RFC 8259 parsing (values, escapes, surrogates, int64 exactness), refusals with
   line/column positions, limits (depth, size, arena), duplicate keys, and the writer (escaping,
   float formatting, patched objects) checked by parsing its output back. */
#include "quarot.h"
#include "formats/qx_json.h"
#include "qt.h"
#include "fmt_util.h"

static quarot_result parse(const char* s, qx_json_doc* d, qx_err* e) {
    return qx_json_parse(s, strlen(s), "t.json", NULL, d, e);
}

static void test_values(void) {
    const char* text =
        "{ \"a\": [1, -2, 3.5, -0, 1e3, 9223372036854775807, -9223372036854775808, 9223372036854775808],\n"
        "  \"s\": \"x\\\"y\\\\z\\/\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\\u0000end\",\n"
        "  \"t\": true, \"f\": false, \"n\": null, \"o\": {}, \"e\": [], \"u\": \"\xc3\xa9\xe2\x82\xac\" }";
    qx_json_doc d;
    qx_err e;
    const qx_json *a, *s;
    int64_t i;
    double x;
    int b;
    size_t len;
    const char* str;
    fu_seed("json/values.json", text, strlen(text));
    QT_OK(parse(text, &d, &e));
    if (!d.root) return;
    QT_EQ_INT(d.root->type, QX_JSON_OBJECT);
    QT_EQ_INT(d.root->count, 8);
    a = qx_json_get(d.root, "a");
    QT_CHECK(a && a->type == QX_JSON_ARRAY && a->count == 8);
    QT_OK(qx_json_as_int64(qx_json_at(a, 0), &i)); QT_EQ_INT(i, 1);
    QT_OK(qx_json_as_int64(qx_json_at(a, 1), &i)); QT_EQ_INT(i, -2);
    QT_ERR(qx_json_as_int64(qx_json_at(a, 2), &i), QUAROT_ERR_OVERFLOW);    /* 3.5 is not an integer */
    QT_OK(qx_json_as_double(qx_json_at(a, 2), &x)); QT_NEAR(x, 3.5, 0);
    QT_OK(qx_json_as_double(qx_json_at(a, 3), &x)); QT_CHECK(x == 0.0 && signbit(x));
    QT_OK(qx_json_as_int64(qx_json_at(a, 4), &i)); QT_EQ_INT(i, 1000);     /* 1e3: exact, accepted */
    QT_OK(qx_json_as_int64(qx_json_at(a, 5), &i)); QT_CHECK(i == INT64_MAX);
    QT_OK(qx_json_as_int64(qx_json_at(a, 6), &i)); QT_CHECK(i == INT64_MIN);
    QT_CHECK(!qx_json_at(a, 7)->is_int);                                     /* 2^63 does not fit */
    QT_ERR(qx_json_as_int64(qx_json_at(a, 7), &i), QUAROT_ERR_OVERFLOW);
    QT_CHECK(qx_json_at(a, 8) == NULL);
    QT_CHECK(strcmp(qx_json_at(a, 2)->str, "3.5") == 0);                      /* token text kept */
    s = qx_json_get(d.root, "s");
    str = qx_json_as_string(s, &len);
    QT_CHECK(str != NULL);
    if (str) {
        const char want[] = "x\"y\\z/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\0end";
        QT_EQ_INT(len, sizeof want - 1);
        QT_CHECK(memcmp(str, want, sizeof want) == 0);                       /* includes the final NUL */
    }
    QT_OK(qx_json_as_bool(qx_json_get(d.root, "t"), &b)); QT_EQ_INT(b, 1);
    QT_OK(qx_json_as_bool(qx_json_get(d.root, "f"), &b)); QT_EQ_INT(b, 0);
    QT_EQ_INT(qx_json_get(d.root, "n")->type, QX_JSON_NULL);
    QT_EQ_INT(qx_json_get(d.root, "o")->count, 0);
    QT_EQ_INT(qx_json_get(d.root, "e")->count, 0);
    QT_CHECK(strcmp(qx_json_as_string(qx_json_get(d.root, "u"), NULL), "\xc3\xa9\xe2\x82\xac") == 0);
    /* type checks */
    QT_ERR(qx_json_as_int64(s, &i), QUAROT_ERR_PARSE);
    QT_ERR(qx_json_as_bool(qx_json_get(d.root, "n"), &b), QUAROT_ERR_PARSE);
    QT_CHECK(qx_json_as_string(qx_json_get(d.root, "t"), NULL) == NULL);
    QT_CHECK(qx_json_get(a, "x") == NULL && qx_json_get(d.root, "missing") == NULL);
    QT_CHECK(qx_json_at(d.root, 0) == NULL);
    qx_json_doc_free(&d);
    /* scalars at top level */
    QT_OK(parse(" 42 ", &d, &e));
    QT_CHECK(d.root && d.root->is_int && d.root->i == 42);
    qx_json_doc_free(&d);
    QT_OK(parse("\"\"", &d, &e));
    QT_CHECK(d.root && d.root->type == QX_JSON_STRING && d.root->len == 0);
    qx_json_doc_free(&d);
}

/* Each bad document must be refused with QUAROT_ERR_PARSE and a message naming the position. */
static void test_refusals(void) {
    static const struct { const char* text; const char* where; } bad[] = {
        {"", "line 1, column 1"},
        {"   ", "line 1, column 4"},
        {"{", "line 1, column 2"},
        {"[1,]", "line 1, column 4"},
        {"[1 2]", "line 1, column 4"},
        {"{\"a\" 1}", "line 1, column 6"},
        {"{\"a\":1,}", "line 1, column 8"},
        {"{a:1}", "line 1, column 2"},
        {"[01]", "line 1, column 2"},
        {"[1.]", "line 1, column 2"},
        {"[.5]", "line 1, column 2"},
        {"[-]", "line 1, column 2"},
        {"[1e]", "line 1, column 2"},
        {"[+1]", "line 1, column 2"},
        {"[1e999]", "line 1, column 2"},
        {"[NaN]", "line 1, column 2"},
        {"[tru]", "line 1, column 2"},
        {"[nul", "line 1, column 2"},
        {"\"abc", "line 1, column 1"},
        {"\"a\\x\"", "line 1, column 3"},
        {"\"\\u12g4\"", "line 1, column 2"},
        {"\"\\ud800\"", "line 1, column 2"},
        {"\"\\ud800\\u0041\"", "line 1, column 2"},
        {"\"\\udc00\"", "line 1, column 2"},
        {"\"a\tb\"", "line 1, column 3"},
        {"\"\xc0\x80\"", "line 1, column 2"},          /* overlong NUL */
        {"\"\xed\xa0\x80\"", "line 1, column 2"},      /* encoded surrogate */
        {"\"\xf5\x80\x80\x80\"", "line 1, column 2"},  /* beyond U+10FFFF */
        {"\"\xe2\x82\"", "line 1, column 2"},          /* truncated sequence */
        {"\"\x80\"", "line 1, column 2"},              /* stray continuation byte */
        {"{}\n  x", "line 2, column 3"},
        {"[1]\n[2]", "line 2, column 1"},
        {"{\"k\":1,\n \"k\":2}", "line 1, column 1"},  /* duplicate key */
        {"[\n\n  }", "line 3, column 3"},
    };
    size_t k;
    fu_seed("json/bad_surrogate.json", bad[22].text, strlen(bad[22].text));
    fu_seed("json/bad_duplicate.json", bad[32].text, strlen(bad[32].text));
    for (k = 0; k < sizeof bad / sizeof bad[0]; ++k) {
        qx_json_doc d;
        qx_err e;
        quarot_result r;
        e.msg[0] = '\0';
        r = parse(bad[k].text, &d, &e);
        QT_CHECKF(r == QUAROT_ERR_PARSE, "case %zu (%s): result %d", k, bad[k].text, (int)r);
        QT_CHECKF(strncmp(e.msg, "t.json: ", 8) == 0 && strstr(e.msg, bad[k].where) != NULL,
                  "case %zu: message '%s' lacks '%s'", k, e.msg, bad[k].where);
        QT_CHECK(d.root == NULL && d.arena == NULL);
    }
    {   /* a NUL byte inside the given length is not the end of the text */
        qx_json_doc d;
        qx_err e;
        QT_ERR(qx_json_parse("[1]\0", 4, "t.json", NULL, &d, &e), QUAROT_ERR_PARSE);
    }
}

static void test_limits(void) {
    char* deep;
    int n;
    qx_json_doc d;
    qx_err e;
    qx_json_opts o;
    /* nesting: 64 levels pass by default, 65 do not; a megabyte of '[' is refused without a crash */
    deep = (char*)malloc(1 << 20);
    for (n = 64; n <= 65; ++n) {
        int k;
        for (k = 0; k < n; ++k) { deep[k] = '['; deep[2 * n - 1 - k] = ']'; }
        if (n == 64) fu_seed("json/deep.json", deep, (size_t)(2 * n));
        if (n == 64) QT_OK(qx_json_parse(deep, (size_t)(2 * n), "deep", NULL, &d, &e));
        else QT_ERR(qx_json_parse(deep, (size_t)(2 * n), "deep", NULL, &d, &e), QUAROT_ERR_PARSE);
        qx_json_doc_free(&d);
    }
    QT_CHECK(strstr(e.msg, "nesting deeper than 64") != NULL);
    memset(deep, '[', 1 << 20);
    memset(&o, 0, sizeof o);
    o.max_depth = 100000;   /* clamped to 1000 */
    QT_ERR(qx_json_parse(deep, 1 << 20, "deep", &o, &d, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "nesting deeper than 1000") != NULL);
    free(deep);
    /* input size and arena limits */
    memset(&o, 0, sizeof o);
    o.max_size = 5;
    QT_ERR(qx_json_parse("[1,2,3]", 7, "big", &o, &d, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "exceed the limit") != NULL);
    memset(&o, 0, sizeof o);
    o.max_arena = 3 * sizeof(qx_json);
    QT_ERR(qx_json_parse("[1,2,3]", 7, "big", &o, &d, &e), QUAROT_ERR_PARSE);  /* 4 nodes needed */
    QT_CHECK(strstr(e.msg, "too large") != NULL);
    o.max_arena = 4 * sizeof(qx_json) + 6;                                       /* nodes + "1\0" x3 */
    QT_OK(qx_json_parse("[1,2,3]", 7, "big", &o, &d, &e));
    qx_json_doc_free(&d);
    QT_ERR(qx_json_parse(NULL, 3, "x", NULL, &d, &e), QUAROT_ERR_INVALID_ARGUMENT);
}

static void test_writer(void) {
    char raw[40];
    qx_sb b;
    qx_json_doc d, d2;
    qx_err e;
    int k;
    const char* text = "{\"b\":[1,2.50,{\"c\":null}],\"a\":\"q\\\"\",\"z\":true,\"e\":1E-5}";
    /* every control byte and the two specials escape and read back exactly */
    for (k = 0; k < 32; ++k) raw[k] = (char)k;
    raw[32] = '"'; raw[33] = '\\'; raw[34] = '/'; raw[35] = 'x'; raw[36] = (char)0xc3; raw[37] = (char)0xa9;
    memset(&b, 0, sizeof b);
    qx_sb_json_string(&b, raw, 38);
    QT_CHECK(!b.failed);
    QT_OK(qx_json_parse(b.p, b.len, "w", NULL, &d, &e));
    QT_CHECK(d.root && d.root->len == 38 && memcmp(d.root->str, raw, 38) == 0);
    qx_json_doc_free(&d);
    qx_sb_free(&b);
    /* write(parse(x)) is a fixed point, compact and indented, numbers verbatim */
    QT_OK(parse(text, &d, &e));
    qx_json_write(&b, d.root, 0);
    QT_CHECK(b.p && strcmp(b.p, text) == 0);
    qx_sb_free(&b);
    qx_json_write(&b, d.root, 2);
    QT_CHECK(b.p && strstr(b.p, "\n  \"a\": \"q\\\"\",\n") != NULL);
    QT_OK(qx_json_parse(b.p, b.len, "w", NULL, &d2, &e));
    qx_sb_free(&b);
    qx_json_write(&b, d2.root, 0);
    QT_CHECK(b.p && strcmp(b.p, text) == 0);
    qx_sb_free(&b);
    qx_json_doc_free(&d2);
    {   /* patched: replace a, remove z, add n; order of the others kept */
        const char* keys[3] = {"a", "z", "n"};
        const char* vals[3] = {"false", NULL, "[7]"};
        qx_json_write_patched(&b, d.root, 0, keys, vals, 3);
        QT_CHECK(b.p && strcmp(b.p, "{\"b\":[1,2.50,{\"c\":null}],\"a\":false,\"e\":1E-5,\"n\":[7]}") == 0);
        qx_sb_free(&b);
    }
    qx_json_doc_free(&d);
    /* floats: shortest form that reads back */
    qx_sb_float(&b, 1e-5f); qx_sb_puts(&b, " ");
    qx_sb_float(&b, 10000.0f); qx_sb_puts(&b, " ");
    qx_sb_float(&b, 0.1f); qx_sb_puts(&b, " ");
    qx_sb_float(&b, 1e-6f); qx_sb_puts(&b, " ");
    qx_sb_float(&b, 500000.0f);
    QT_CHECK(b.p && strcmp(b.p, "1e-05 10000.0 0.1 1e-06 500000.0") == 0);
    qx_sb_free(&b);
    qx_sb_printf(&b, "%d-%s", 12, "ab");
    QT_CHECK(b.p && strcmp(b.p, "12-ab") == 0 && b.len == 5);
    qx_sb_free(&b);
}

/* Mutated documents: whatever the bytes, the parser returns OK or PARSE and never crashes. */
static void test_mutations(void) {
    const char* base = "{\"x\": [1, 2.5e3, \"a\\u00e9\\ud83d\\ude00\", {\"y\": [true, false, null]}], \"z\": -0.5}";
    size_t n = strlen(base);
    char buf[128];
    int it, iters = qt_quick() ? 2000 : 20000, ok = 0;
    qt_seed(7);
    for (it = 0; it < iters; ++it) {
        qx_json_doc d;
        qx_err e;
        quarot_result r;
        size_t len = n, k;
        int m, muts = 1 + (int)(qt_uniform() * 3);
        memcpy(buf, base, n);
        for (m = 0; m < muts; ++m) {
            k = (size_t)(qt_uniform() * (double)len);
            switch ((int)(qt_uniform() * 3)) {
                case 0: buf[k] = (char)(unsigned char)(int)(qt_uniform() * 256); break;
                case 1: len = k; break;                                        /* truncate */
                default: buf[k] = "{}[],:\"\\0e-"[(int)(qt_uniform() * 11)]; break;
            }
        }
        r = qx_json_parse(buf, len, "m", NULL, &d, &e);
        QT_CHECK(r == QUAROT_OK || r == QUAROT_ERR_PARSE);
        if (r == QUAROT_OK) {
            qx_sb b;
            qx_json_doc d2;
            memset(&b, 0, sizeof b);
            ++ok;
            qx_json_write(&b, d.root, 0);     /* what parses also writes and reads back */
            QT_OK(qx_json_parse(b.p, b.len, "m2", NULL, &d2, &e));
            qx_json_doc_free(&d2);
            qx_sb_free(&b);
        }
        qx_json_doc_free(&d);
    }
    QT_CHECK(ok > 0);
}

int main(void) {
    QT_RUN(test_values);
    QT_RUN(test_refusals);
    QT_RUN(test_limits);
    QT_RUN(test_writer);
    QT_RUN(test_mutations);
    return qt_finish("test_json");
}
