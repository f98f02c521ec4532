/* qx_str.c - see qx_str.h. */
#include "support/qx_str.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qx_sb_free(qx_sb* b) {
    if (!b) return;
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Room for n more bytes plus the NUL; on failure the buffer is marked failed (and stays so). */
static int qx__sb_reserve(qx_sb* b, size_t n) {
    size_t need, cap;
    char* p;
    if (b->failed) return 0;
    if (n > SIZE_MAX - b->len - 1) { b->failed = 1; return 0; }
    need = b->len + n + 1;
    if (need <= b->cap) return 1;
    cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    p = (char*)realloc(b->p, cap);
    if (!p) { b->failed = 1; return 0; }
    b->p = p;
    b->cap = cap;
    return 1;
}

void qx_sb_put(qx_sb* b, const char* s, size_t n) {
    if (!qx__sb_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void qx_sb_puts(qx_sb* b, const char* s) { qx_sb_put(b, s, strlen(s)); }

void qx_sb_printf(qx_sb* b, const char* fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) { b->failed = 1; return; }
    if (!qx__sb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void qx_sb_le(qx_sb* b, uint64_t v, int bytes) {
    char c[8];
    int k;
    for (k = 0; k < bytes; ++k) c[k] = (char)((v >> (8 * k)) & 0xff);
    qx_sb_put(b, c, (size_t)bytes);
}

int qx_str_ends_with(const char* s, const char* suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

uint64_t qx_str_le(const unsigned char* p, unsigned n) {
    uint64_t v = 0;
    while (n--) v = (v << 8) | p[n];
    return v;
}

uint32_t qx_str_le32(const unsigned char* p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t qx_str_le64(const unsigned char* p) { return qx_str_le(p, 8); }
