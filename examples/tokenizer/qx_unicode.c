/* qx_unicode.c - see qx_unicode.h. Category lookup: ASCII from a 128-entry table built once from the
   range table would need mutable state, so it is a binary search for every codepoint (the table's
   first entries are ASCII, so those are found in ~11 steps; the tokenizers call this once per
   codepoint of text). */
#include "tokenizer/qx_unicode.h"

int qx_ucat(uint32_t cp) {
    int32_t lo = 0, hi = qx_unicode_n_ranges - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        uint32_t first = qx_unicode_ranges[mid][0], last = qx_unicode_ranges[mid][1] & 0xFFFFFFu;
        if (cp < first) hi = mid - 1;
        else if (cp > last) lo = mid + 1;
        else return (int)(qx_unicode_ranges[mid][1] >> 24);
    }
    return QX_UCAT_OTHER;
}

int qx_uspace(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int qx_utf8_decode(const unsigned char* s, size_t n, uint32_t* cp) {
    uint32_t c;
    int len, i;
    if (n == 0) return 0;
    c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c < 0xC2) return 0;                       /* continuation byte or overlong 2-byte lead */
    if (c < 0xE0) { len = 2; c &= 0x1F; }
    else if (c < 0xF0) { len = 3; c &= 0x0F; }
    else if (c < 0xF5) { len = 4; c &= 0x07; }
    else return 0;
    if (n < (size_t)len) return 0;
    for (i = 1; i < len; ++i) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

int qx_utf8_encode(uint32_t cp, unsigned char out[4]) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { out[0] = (unsigned char)(0xC0 | (cp >> 6)); out[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t qx_utf8_check(const unsigned char* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k;
        if (s[i] < 0x80) { ++i; continue; }
        k = qx_utf8_decode(s + i, n - i, &cp);
        if (!k) return i;
        i += (size_t)k;
    }
    return n;
}
