/* qx_tok_pre.c - see qx_tok_pre.h. Every matcher below is the regex it names, written out by hand:
   an optional leading character is tried first and dropped again when what must follow it does
   not (backtracking), greedy runs take all they can, and the alternatives are tried in the
   regex's order. The DeepSeek letter list is llama.cpp's, with its ranges written as codepoints. */
#include "tokenizer/qx_tok_pre.h"
#include "tokenizer/qx_unicode.h"

#include <string.h>

typedef struct qx__range { uint32_t a, b; } qx__range;

static const qx__range qx__ds_letters[] = {
    {0x41, 0x5A},
    {0x61, 0x7A},
    {0xB5, 0xB5},
    {0xC0, 0xD6},
    {0xD8, 0xF6},
    {0xF8, 0x1BA},
    {0x1BC, 0x1BF},
    {0x1C4, 0x293},
    {0x295, 0x2AF},
    {0x370, 0x373},
    {0x376, 0x376},
    {0x377, 0x377},
    {0x37B, 0x37D},
    {0x37F, 0x37F},
    {0x386, 0x386},
    {0x388, 0x38A},
    {0x38C, 0x38C},
    {0x38E, 0x3A1},
    {0x3A3, 0x3F5},
    {0x3F7, 0x481},
    {0x48A, 0x52F},
    {0x531, 0x556},
    {0x10A0, 0x10C5},
    {0x13A0, 0x13F5},
    {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},
    {0x1D00, 0x1D2B},
    {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},
    {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},
    {0x1F50, 0x1F57},
    {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D},
    {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4},
    {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},
    {0x1FF2, 0x1FF4},
    {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},
    {0x2107, 0x2107},
    {0x210A, 0x2113},
    {0x2115, 0x2115},
    {0x2119, 0x211D},
    {0x2124, 0x2124},
    {0x2126, 0x2126},
    {0x2128, 0x2128},
    {0x212A, 0x212D},
    {0x212F, 0x2134},
    {0x2139, 0x2139},
    {0x213C, 0x213F},
    {0x2145, 0x2149},
    {0x214E, 0x214E},
    {0x2183, 0x2183},
    {0x2184, 0x2184},
    {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF2},
    {0x2CF3, 0x2CF3},
    {0xA640, 0xA66D},
    {0xA680, 0xA69B},
    {0xA722, 0xA76F},
    {0xA771, 0xA787},
    {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},
    {0xFB00, 0xFB06},
    {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},
    {0x10400, 0x1044F},
    {0x104B0, 0x104D3},
    {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2},
    {0x118A0, 0x118DF},
    {0x1E900, 0x1E943}
};

static const char qx__ds_letters_text[] =
    "\134s\077[A-Za-z\302\265\303\200-\303\226\303\230-\303\266\303\270-\306\272\306\274-\306\277\307"
    "\204-\312\223\312\225-\312\257\315\260-\315\263\315\266\315\267\315\273-\315\275\315\277\316\206"
    "\316\210-\316\212\316\214\316\216-\316\241\316\243-\317\265\317\267-\322\201\322\212-\324\257\324"
    "\261-\325\226\341\202\240-\341\203\205\341\216\240-\341\217\265\341\217\270-\341\217\275\341\262"
    "\220-\341\262\272\341\262\275-\341\262\277\341\264\200-\341\264\253\341\265\253-\341\265\267\341"
    "\265\271-\341\266\232\341\270\200-\341\274\225\341\274\230-\341\274\235\341\274\240-\341\275\205"
    "\341\275\210-\341\275\215\341\275\220-\341\275\227\341\275\231\341\275\233\341\275\235\341\275\237"
    "-\341\275\275\341\276\200-\341\276\264\341\276\266-\341\276\274\341\276\276\341\277\202-\341\277"
    "\204\341\277\206-\341\277\214\341\277\220-\341\277\223\341\277\226-\341\277\233\341\277\240-\341"
    "\277\254\341\277\262-\341\277\264\341\277\266-\341\277\274\342\204\202\342\204\207\342\204\212-\342"
    "\204\223\342\204\225\342\204\231-\342\204\235\342\204\244\342\204\246\342\204\250\342\204\252-\342"
    "\204\255\342\204\257-\342\204\264\342\204\271\342\204\274-\342\204\277\342\205\205-\342\205\211\342"
    "\205\216\342\206\203\342\206\204\342\260\200-\342\261\273\342\261\276-\342\263\244\342\263\253-\342"
    "\263\256\342\263\262\342\263\263\352\231\200-\352\231\255\352\232\200-\352\232\233\352\234\242-\352"
    "\235\257\352\235\261-\352\236\207\352\236\213-\352\236\216\352\255\260-\352\256\277\357\254\200-"
    "\357\254\206\357\254\223-\357\254\227\357\274\241-\357\274\272\357\275\201-\357\275\232\360\220\220"
    "\200-\360\220\221\217\360\220\222\260-\360\220\223\223\360\220\223\230-\360\220\223\273\360\220\262"
    "\200-\360\220\262\262\360\220\263\200-\360\220\263\262\360\221\242\240-\360\221\243\237\360\236\244"
    "\200-\360\236\245\203]+";

static const char* const qx__re_text[QX_RE_COUNT] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "\\p{N}",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
    "[\\r\\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[\344\270\200-\351\276\245\340\240\200-\344\270\200\352\260\200-\355\237\277]+",
    qx__ds_letters_text,
    "\\s?[!-/:-~\357\274\201-\357\274\217\357\274\232-\357\275\236\342\200\230-\342\200\237\343\200\200-\343\200\202]+",
    "\\s+$",
};

/* llama.cpp's rewrites of the Llama-3 / Qwen2 regexes (case classes instead of (?i:...)). */
static const char* const qx__re_alias[][2] = {
    {"1", "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"2", "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

const char* qx_pre_regex_text(int re) { return re >= 0 && re < QX_RE_COUNT ? qx__re_text[re] : ""; }

/* Compares text[0..len) (literal CR / LF spelled as \r / \n) with the canonical c. */
static int qx__re_eq(const char* text, size_t len, const char* c) {
    size_t i, j = 0, n = strlen(c);
    for (i = 0; i < len; ++i) {
        if (text[i] == '\r' || text[i] == '\n') {
            if (j + 2 > n || c[j] != '\\' || c[j + 1] != (text[i] == '\r' ? 'r' : 'n')) return 0;
            j += 2;
        } else {
            if (j >= n || c[j] != text[i]) return 0;
            ++j;
        }
    }
    return j == n;
}

int qx_pre_regex_from_text(const char* text, size_t len) {
    int i;
    if (!text) return -1;
    for (i = 0; i < QX_RE_COUNT; ++i)
        if (qx__re_eq(text, len, qx__re_text[i])) return i;
    for (i = 0; i < (int)(sizeof qx__re_alias / sizeof qx__re_alias[0]); ++i)
        if (qx__re_eq(text, len, qx__re_alias[i][1])) return qx__re_alias[i][0][0] - '0';
    return -1;
}

typedef struct qx__pre_name {
    const char* name;
    int ignore_merges;
    int n;
    int re[4];
} qx__pre_name;

static const qx__pre_name qx__pre_table[] = {
    {"default", 0, 4, {QX_RE_PUNCT, QX_RE_GPT2, QX_RE_NUMS, QX_RE_DIGITS3}},
    {"", 0, 4, {QX_RE_PUNCT, QX_RE_GPT2, QX_RE_NUMS, QX_RE_DIGITS3}},
    {"gpt-2", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"gpt2", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"phi-2", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"mpt", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"gpt-neox", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"olmo", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"jina-es", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"jina-de", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"jina-v1-en", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"jina-v2-es", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"jina-v2-de", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"jina-v2-code", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"roberta-bpe", 0, 1, {QX_RE_GPT2, 0, 0, 0}},
    {"llama3", 1, 1, {QX_RE_LLAMA3, 0, 0, 0}},
    {"llama-v3", 1, 1, {QX_RE_LLAMA3, 0, 0, 0}},
    {"llama-bpe", 1, 1, {QX_RE_LLAMA3, 0, 0, 0}},
    {"falcon3", 1, 1, {QX_RE_LLAMA3, 0, 0, 0}},
    {"dbrx", 0, 1, {QX_RE_LLAMA3, 0, 0, 0}},
    {"smaug-bpe", 0, 1, {QX_RE_LLAMA3, 0, 0, 0}},
    {"qwen2", 0, 1, {QX_RE_QWEN2, 0, 0, 0}},
    {"deepseek-r1-qwen", 0, 1, {QX_RE_QWEN2, 0, 0, 0}},
    {"stablelm2", 0, 1, {QX_RE_QWEN2, 0, 0, 0}},
    {"deepseek-coder", 0, 5, {QX_RE_NEWLINE, QX_RE_S_LETTERS, QX_RE_S_PUNCTS, QX_RE_CJK}},   /* + NUM1 below */
    {"deepseek-llm", 0, 6, {QX_RE_NEWLINE, QX_RE_DS_LETTERS, QX_RE_DS_PUNCTS, QX_RE_SPACE_END}},  /* + CJK, NUMS */
    {"falcon", 0, 3, {QX_RE_FALCON_PUNCT, QX_RE_GPT2, QX_RE_DIGITS3, 0}},
    {"starcoder", 0, 2, {QX_RE_NUM1, QX_RE_GPT2, 0, 0}},
    {"refact", 0, 2, {QX_RE_NUM1, QX_RE_GPT2, 0, 0}},
    {"command-r", 0, 2, {QX_RE_NUM1, QX_RE_GPT2, 0, 0}},
    {"smollm", 0, 2, {QX_RE_NUM1, QX_RE_GPT2, 0, 0}},
    {"codeshell", 0, 2, {QX_RE_NUM1, QX_RE_GPT2, 0, 0}},
    {"exaone", 0, 2, {QX_RE_NUM1, QX_RE_GPT2, 0, 0}},
};

const char* qx_pre_names(void) {
    return "default, gpt-2, phi-2, mpt, gpt-neox, olmo, jina-es, jina-de, jina-v1-en, jina-v2-es, jina-v2-de, "
           "jina-v2-code, roberta-bpe, llama3, llama-v3, llama-bpe, falcon3, dbrx, smaug-bpe, qwen2, "
           "deepseek-r1-qwen, stablelm2, deepseek-coder, deepseek-llm, falcon, starcoder, refact, command-r, "
           "smollm, codeshell, exaone";
}

int qx_pre_from_name(const char* name, size_t len, qx_pre* p) {
    size_t i;
    memset(p, 0, sizeof *p);
    for (i = 0; i < sizeof qx__pre_table / sizeof qx__pre_table[0]; ++i) {
        const qx__pre_name* t = &qx__pre_table[i];
        int k;
        if (strlen(t->name) != len || (len && memcmp(t->name, name, len) != 0)) continue;
        p->n = t->n;
        p->ignore_merges = t->ignore_merges;
        memcpy(p->name, t->name, strlen(t->name) + 1);
        for (k = 0; k < t->n && k < 4; ++k) p->re[k] = t->re[k];
        if (strcmp(t->name, "deepseek-coder") == 0) p->re[4] = QX_RE_NUM1;
        if (strcmp(t->name, "deepseek-llm") == 0) { p->re[4] = QX_RE_CJK; p->re[5] = QX_RE_NUMS; }
        return 1;
    }
    return 0;
}

/* ---- character classes ------------------------------------------------------------------------ */

static int qx__L(uint32_t c) { return qx_ucat(c) == QX_UCAT_LETTER; }
static int qx__N(uint32_t c) { return qx_ucat(c) == QX_UCAT_NUMBER; }
static int qx__P(uint32_t c) { return qx_ucat(c) == QX_UCAT_PUNCT; }
static int qx__S(uint32_t c) { return qx_uspace(c); }
/* [^\s\p{L}\p{N}] */
static int qx__O(uint32_t c) {
    int k;
    if (qx_uspace(c)) return 0;
    k = qx_ucat(c);
    return k != QX_UCAT_LETTER && k != QX_UCAT_NUMBER;
}
static int qx__NL(uint32_t c) { return c == '\r' || c == '\n'; }
static int qx__lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? (int)(c + 32) : (int)c; }
static int qx__in(const qx__range* r, size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid].a) hi = mid;
        else if (c > r[mid].b) lo = mid + 1;
        else return 1;
    }
    return 0;
}
static int qx__DSL(uint32_t c) { return qx__in(qx__ds_letters, sizeof qx__ds_letters / sizeof qx__ds_letters[0], c); }
static int qx__DSP(uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF5E) ||
           (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}
static int qx__CJK(uint32_t c) { return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x800 && c <= 0x4E00) || (c >= 0xAC00 && c <= 0xD7FF); }
static int qx__punct_ex(uint32_t c, int backtick) {
    return qx__P(c) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' || c == '|' ||
           (backtick && c == '`');
}

typedef int (*qx__cls)(uint32_t);

/* run of class f from i: the end */
static size_t qx__run(qx__cls f, const uint32_t* cp, size_t i, size_t end) {
    while (i < end && f(cp[i])) ++i;
    return i;
}

/* "X?Y+" where X is a one-character class: returns the match length at pos or 0 */
static size_t qx__opt_run(qx__cls x, qx__cls y, const uint32_t* cp, size_t pos, size_t end) {
    if (x(cp[pos]) && pos + 1 < end && y(cp[pos + 1])) return qx__run(y, cp, pos + 1, end) - pos;
    if (y(cp[pos])) return qx__run(y, cp, pos, end) - pos;
    return 0;
}

static int qx__is_sp(uint32_t c) { return c == ' '; }
static int qx__not_rnln(uint32_t c) {   /* [^\r\n\p{L}\p{N}] */
    int k;
    if (qx__NL(c)) return 0;
    k = qx_ucat(c);
    return k != QX_UCAT_LETTER && k != QX_UCAT_NUMBER;
}

/* 's|'t|'re|'ve|'m|'ll|'d, case-insensitive or not */
static size_t qx__contraction(const uint32_t* cp, size_t pos, size_t end, int icase) {
    int a, b;
    if (cp[pos] != '\'' || pos + 1 >= end) return 0;
    a = icase ? qx__lower(cp[pos + 1]) : (int)cp[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= end) return 0;
    b = icase ? qx__lower(cp[pos + 2]) : (int)cp[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S): the whitespace run, less its last character when a non-space follows */
static size_t qx__space_not_before_nonspace(const uint32_t* cp, size_t pos, size_t end) {
    size_t q;
    if (!qx_uspace(cp[pos])) return 0;
    q = qx__run(qx__S, cp, pos, end);
    if (q == end) return q - pos;
    return q - pos >= 2 ? q - pos - 1 : 0;
}

static size_t qx__match_gpt2(const uint32_t* cp, size_t pos, size_t end) {
    size_t m;
    if ((m = qx__contraction(cp, pos, end, 0)) != 0) return m;
    if ((m = qx__opt_run(qx__is_sp, qx__L, cp, pos, end)) != 0) return m;
    if ((m = qx__opt_run(qx__is_sp, qx__N, cp, pos, end)) != 0) return m;
    if ((m = qx__opt_run(qx__is_sp, qx__O, cp, pos, end)) != 0) return m;
    return qx__space_not_before_nonspace(cp, pos, end);
}

static size_t qx__match_llama3(const uint32_t* cp, size_t pos, size_t end, size_t max_digits) {
    size_t m, q;
    if ((m = qx__contraction(cp, pos, end, 1)) != 0) return m;
    if ((m = qx__opt_run(qx__not_rnln, qx__L, cp, pos, end)) != 0) return m;
    if (qx__N(cp[pos])) {
        for (m = 1; m < max_digits && pos + m < end && qx__N(cp[pos + m]); ++m) {}
        return m;
    }
    if ((m = qx__opt_run(qx__is_sp, qx__O, cp, pos, end)) != 0) return qx__run(qx__NL, cp, pos + m, end) - pos;
    if (!qx_uspace(cp[pos])) return 0;
    /* \s*[\r\n]+ : up to and including the last newline of the whitespace run */
    q = qx__run(qx__S, cp, pos, end);
    for (m = q; m > pos; --m)
        if (qx__NL(cp[m - 1])) return m - pos;
    if ((m = qx__space_not_before_nonspace(cp, pos, end)) != 0) return m;
    return q - pos;   /* \s+ */
}

size_t qx_pre_match(int re, const uint32_t* cp, size_t pos, size_t end) {
    if (pos >= end) return 0;
    switch (re) {
    case QX_RE_GPT2: return qx__match_gpt2(cp, pos, end);
    case QX_RE_LLAMA3: return qx__match_llama3(cp, pos, end, 3);
    case QX_RE_QWEN2: return qx__match_llama3(cp, pos, end, 1);
    case QX_RE_PUNCT:
    case QX_RE_FALCON_PUNCT: {
        size_t i = pos;
        while (i < end && qx__punct_ex(cp[i], re == QX_RE_FALCON_PUNCT)) ++i;
        return i - pos;
    }
    case QX_RE_NUM1: return qx__N(cp[pos]) ? 1 : 0;
    case QX_RE_NUMS: return qx__run(qx__N, cp, pos, end) - pos;
    case QX_RE_DIGITS3:
        return pos + 3 <= end && cp[pos] >= '0' && cp[pos] <= '9' && cp[pos + 1] >= '0' && cp[pos + 1] <= '9' &&
                       cp[pos + 2] >= '0' && cp[pos + 2] <= '9'
                   ? 3
                   : 0;
    case QX_RE_NEWLINE: return qx__NL(cp[pos]) ? 1 : 0;
    case QX_RE_S_LETTERS: return qx__opt_run(qx__S, qx__L, cp, pos, end);
    case QX_RE_S_PUNCTS: return qx__opt_run(qx__S, qx__P, cp, pos, end);
    case QX_RE_CJK: return qx__run(qx__CJK, cp, pos, end) - pos;
    case QX_RE_DS_LETTERS: return qx__opt_run(qx__S, qx__DSL, cp, pos, end);
    case QX_RE_DS_PUNCTS: return qx__opt_run(qx__S, qx__DSP, cp, pos, end);
    case QX_RE_SPACE_END: return qx__run(qx__S, cp, pos, end) == end ? end - pos : 0;
    default: return 0;
    }
}

size_t qx_pre_split(const qx_pre* p, const uint32_t* cp, size_t n, size_t* ends, size_t* scratch) {
    size_t n_ends, k;
    int r;
    if (n == 0) return 0;
    ends[0] = n;
    n_ends = 1;
    for (r = 0; r < p->n; ++r) {
        size_t n_new = 0, begin = 0;
        for (k = 0; k < n_ends; ++k) {
            size_t end = ends[k], pos = begin, gap = begin;
            while (pos < end) {
                size_t m = qx_pre_match(p->re[r], cp, pos, end);
                if (m == 0) { ++pos; continue; }
                if (pos > gap) scratch[n_new++] = pos;
                pos += m;
                scratch[n_new++] = pos;
                gap = pos;
            }
            if (gap < end) scratch[n_new++] = end;
            begin = end;
        }
        memcpy(ends, scratch, n_new * sizeof *ends);
        n_ends = n_new;
    }
    return n_ends;
}
