/* qx_str.h - small string and byte helpers every part of the tool shares: a growing string buffer
   (the JSON, GGUF and safetensors writers build their headers in it), a suffix test and the
   little-endian byte order of the file formats. */
#ifndef QX_STR_H
#define QX_STR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A growing string buffer (a zeroed qx_sb is an empty one). Appends never fail loudly: on
   out-of-memory `failed` is set and further appends are ignored; check it once at the end. */
typedef struct qx_sb {
    char* p;                  /* NUL-terminated once anything was appended */
    size_t len, cap;
    int failed;
} qx_sb;

void qx_sb_free(qx_sb* b);
void qx_sb_put(qx_sb* b, const char* s, size_t n);
void qx_sb_puts(qx_sb* b, const char* s);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
void qx_sb_printf(qx_sb* b, const char* fmt, ...);
/* The low `bytes` bytes of v (1..8), least significant first. */
void qx_sb_le(qx_sb* b, uint64_t v, int bytes);

/* 1 when s ends with suffix (any s ends with ""), else 0. */
int qx_str_ends_with(const char* s, const char* suffix);
/* The little-endian unsigned integer of the n bytes (0..8) at p (any alignment). */
uint64_t qx_str_le(const unsigned char* p, unsigned n);
/* The little-endian 32- / 64-bit integer at p[0..4) / p[0..8). */
uint32_t qx_str_le32(const unsigned char* p);
uint64_t qx_str_le64(const unsigned char* p);

#ifdef __cplusplus
}
#endif
#endif
