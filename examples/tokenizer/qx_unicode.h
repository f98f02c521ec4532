/* qx_unicode.h - the little Unicode the tokenizers need: strict UTF-8 decoding and encoding, the
   general-category class of a codepoint (letter / number / punctuation / symbol / mark / other), and
   the White_Space property (what \s means in the pre-tokenizer regexes).

   The category ranges are a table GENERATED from Python's unicodedata by tools/gen_unicode_table.py
   (qx_unicode_table.c, about 1,500 ranges); White_Space is Unicode's PropList list of 25 codepoints,
   written out in qx_unicode.c. */
#ifndef QX_UNICODE_H
#define QX_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    QX_UCAT_OTHER = 0,   /* C*, Z*, unassigned */
    QX_UCAT_LETTER = 1,  /* L* */
    QX_UCAT_NUMBER = 2,  /* N* */
    QX_UCAT_PUNCT = 3,   /* P* */
    QX_UCAT_SYMBOL = 4,  /* S* */
    QX_UCAT_MARK = 5     /* M* */
};

extern const uint32_t qx_unicode_ranges[][2];
extern const int32_t qx_unicode_n_ranges;
extern const char qx_unicode_version[];

/* Class of codepoint cp (QX_UCAT_*). */
int qx_ucat(uint32_t cp);
/* 1 when cp has the White_Space property (\t \n \v \f \r, space, U+0085, U+00A0, U+1680,
   U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000). */
int qx_uspace(uint32_t cp);

/* Decodes one codepoint from s[0..n): returns its byte length (1-4) and sets *cp, or 0 when the
   bytes there are not well-formed UTF-8 (overlong forms, surrogates, > U+10FFFF, truncation). */
int qx_utf8_decode(const unsigned char* s, size_t n, uint32_t* cp);
/* Encodes cp (<= U+10FFFF) into out (4 bytes of room); returns the byte count. */
int qx_utf8_encode(uint32_t cp, unsigned char out[4]);
/* Offset of the first malformed byte of s[0..n), or n when all of it is well-formed UTF-8. */
size_t qx_utf8_check(const unsigned char* s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
