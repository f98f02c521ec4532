/* qx_tok_pre.h - the pre-tokenizer regexes of byte-level BPE tokenizers, as hand-written matchers.

   A pre-tokenizer is a list of regexes applied in turn, as llama.cpp and Hugging Face's Split
   (behavior "Isolated") do: each regex cuts every current fragment into its matches and the gaps
   between them (both kept, in order), searching leftmost-first and, at a position, taking the first
   alternative that matches (greedy, with backtracking), exactly as a backtracking regex engine
   would. A fragment is a world of its own: `$` and the look-ahead (?!\S) see its end, not the text
   after it. \s is Unicode White_Space, \p{L} / \p{N} / \p{P} the general categories L* / N* / P*
   (qx_unicode.h).

   The regexes (QX_RE_*), by the text a tokenizer.json or llama.cpp gives them:
     GPT2       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
     LLAMA3     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
     QWEN2      the same with \p{N} instead of \p{N}{1,3}
     PUNCT      [\p{P}\$\+<=>\^~\|]+          FALCON_PUNCT  [\p{P}\$\+<=>\^~\|`]+
     NUM1       \p{N}        NUMS  \p{N}+     DIGITS3  [0-9][0-9][0-9]
     NEWLINE    [\r\n]       S_LETTERS  \s?\p{L}+     S_PUNCTS  \s?\p{P}+
     CJK        [一-龥ࠀ-一가-퟿]+ (U+4E00-9FA5, U+0800-4E00, U+AC00-D7FF)
     DS_LETTERS \s?[A-Za-zµÀ-Ö...]+ (DeepSeek LLM's list of cased letters)
     DS_PUNCTS  \s?[!-/:-~！-／：-～‘-‟　-。]+     SPACE_END  \s+$

   Supported `tokenizer.ggml.pre` names (llama.cpp's) and their lists:
     default (and "")                 PUNCT, GPT2, NUMS, DIGITS3
     gpt-2, phi-2, mpt, gpt-neox, olmo, jina-*, roberta-bpe   GPT2
     llama3, llama-v3, llama-bpe, falcon3, dbrx, smaug-bpe     LLAMA3 (whole words that are tokens skip merging)
     qwen2, deepseek-r1-qwen, stablelm2                        QWEN2
     deepseek-llm                     NEWLINE, DS_LETTERS, DS_PUNCTS, SPACE_END, CJK, NUMS
     deepseek-coder                   NEWLINE, S_LETTERS, S_PUNCTS, CJK, NUM1
     falcon                           FALCON_PUNCT, GPT2, DIGITS3
     starcoder, refact, command-r, smollm, codeshell, exaone              NUM1, GPT2
   Any other name is refused by name. */
#ifndef QX_TOK_PRE_H
#define QX_TOK_PRE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    QX_RE_GPT2 = 0, QX_RE_LLAMA3, QX_RE_QWEN2, QX_RE_PUNCT, QX_RE_FALCON_PUNCT, QX_RE_NUM1, QX_RE_NUMS,
    QX_RE_DIGITS3, QX_RE_NEWLINE, QX_RE_S_LETTERS, QX_RE_S_PUNCTS, QX_RE_CJK, QX_RE_DS_LETTERS,
    QX_RE_DS_PUNCTS, QX_RE_SPACE_END, QX_RE_COUNT
};

#define QX_PRE_MAX 8

typedef struct qx_pre {
    int n;                      /* regexes, applied in order */
    int re[QX_PRE_MAX];         /* QX_RE_* */
    int ignore_merges;          /* llama3: a word that is a token is emitted whole */
    char name[32];              /* the `pre` name, or "tokenizer.json" */
} qx_pre;

/* Fills *p for a llama.cpp `pre` name; 0 when the name is not supported. */
int qx_pre_from_name(const char* name, size_t len, qx_pre* p);
/* The supported names, comma separated (for messages and --help). */
const char* qx_pre_names(void);
/* The QX_RE_* of a regex given by its text (as in tokenizer.json, with "\r"/"\n" either escaped or
   literal), or -1 when it is none of them. */
int qx_pre_regex_from_text(const char* text, size_t len);
/* A regex's canonical text (the one written into tokenizer.json files). */
const char* qx_pre_regex_text(int re);

/* Length (in codepoints) of the match of regex re starting exactly at cp[pos], in a fragment that
   ends at cp[end] (what $ and look-aheads see), or 0 for no match. */
size_t qx_pre_match(int re, const uint32_t* cp, size_t pos, size_t end);

/* Splits the codepoints cp[0..n) by the list p: writes fragment ends (codepoint offsets, increasing,
   the last = n) into ends[] (room: n entries always suffice) and returns their count; n = 0 gives 0. */
size_t qx_pre_split(const qx_pre* p, const uint32_t* cp, size_t n, size_t* ends, size_t* scratch);

#ifdef __cplusplus
}
#endif
#endif
