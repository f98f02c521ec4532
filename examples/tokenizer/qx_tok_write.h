/* qx_tok_write.h - a built vocabulary (qx_vocab.h) written out in another format's layout: GGUF
   `tokenizer.ggml.*` key/value pairs, or a Hugging Face tokenizer.json + tokenizer_config.json;
   and a llama2.c tokenizer.bin (qx_tokenizer.h) as GGUF pairs.
   What a conversion (`quarot rotate IN OUT` across formats, qx_convert.h) uses to carry a model's
   tokenizer along; the vocabulary comes from the readers (qx_tok_gguf.c, qx_tok_json.c), so there is
   one parser per format and these writers only serialize what it built.

   GGUF (llama.cpp's keys and types):
     tokenizer.ggml.model       string "llama" (SentencePiece BPE) / "gpt2" (byte-level BPE)
     tokenizer.ggml.pre         string, byte-level BPE: the llama.cpp `pre` name whose regex list (and
                                ignore_merges) equals the vocabulary's (qx_tok_pre.h); none: not convertible
     tokenizer.ggml.tokens      string array [n]
     tokenizer.ggml.scores      f32 array [n], SentencePiece. A vocabulary built from tokenizer.json has
                                merges and no scores: score = -(rank of the first merge that makes the
                                token), -(merges + id) for a longer token no merge makes, 0 otherwise, so
                                llama.cpp's score-ordered merging follows the merge order
     tokenizer.ggml.token_type  i32 array [n] (QX_TT_*, llama.cpp's numbering)
     tokenizer.ggml.merges      string array "left right": byte-level BPE, and SentencePiece built from
                                merges (this reader then merges by rank, exactly as tokenizer.json did)
     tokenizer.ggml.bos_token_id / eos_token_id / unknown_token_id   u32, when the vocabulary has one
     tokenizer.ggml.add_bos_token / add_eos_token   bool; add_space_prefix bool (SentencePiece)
   tokenizer.json (tokenizers' layout): added_tokens (control / user-defined / unknown tokens), the
   SentencePiece normalizer (Prepend "▁" when add_space_prefix, Replace " " -> "▁") or the byte-level
   pre-tokenizer (a Split per regex, ByteLevel last; ByteLevel's own regex when the list is GPT-2's
   alone), model BPE (vocab, merges, byte_fallback, unk_token, ignore_merges), a decoder, and a
   TemplateProcessing post-processor when BOS / EOS are added; merges in rank order, derived for a
   score-only SentencePiece vocabulary as transformers' converter does (every split of a normal token
   into two tokens, the tokens by score, highest first, then by id). tokenizer_config.json:
   add_bos_token, add_eos_token, bos/eos/unk token texts, tokenizer_class.
   Round trips: the written tokenizer, read back, encodes every shared test string to the original's
   ids (test_tok_convert). */
#ifndef QX_TOK_WRITE_H
#define QX_TOK_WRITE_H

#include "formats/qx_json.h"
#include "tokenizer/qx_tokenizer.h"
#include "tokenizer/qx_vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL when v can be written as GGUF tokenizer.ggml.* pairs, else why not (a constant string). */
const char* qx_vocab_gguf_unfit(const qx_vocab* v);

/* Appends v's tokenizer.ggml.* pairs to a "gguf.kv" blob (8-byte little-endian pair count, then the
   pairs as in a GGUF file; the count is increased). name labels errors. */
quarot_result qx_vocab_write_gguf_kv(const qx_vocab* v, qx_sb* kv, const char* name, qx_err* e);

/* Appends t's tokenizer.ggml.* pairs to a "gguf.kv" blob (the count increased): a vocabulary
   tokenizer (t->vocab) through qx_vocab_write_gguf_kv; a llama2.c tokenizer.bin as llama.cpp's
   SentencePiece ("llama") vocabulary: tokenizer.ggml.model "llama", tokenizer.ggml.pre `pre` when
   it is not NULL, the pieces with llama2.c's ' ' turned back into U+2581 and ids 0, 1, 2 named
   <unk>, <s>, </s> (llama2.c's export spells the last two "\n<s>\n" / "\n</s>\n"), the scores,
   token types 2 unknown (id 0), 3 control (1, 2), 6 byte (<0xXX>, two upper-case hex digits),
   1 normal; BOS 1, EOS 2, UNK 0, add_bos_token true, add_eos_token false. name labels errors. */
quarot_result qx_tokenizer_write_gguf_kv(const qx_tokenizer* t, const char* pre, qx_sb* kv, const char* name, qx_err* e);

/* tokenizer.json into json and tokenizer_config.json into config (either may be NULL). */
quarot_result qx_vocab_write_hf_json(const qx_vocab* v, qx_sb* json, qx_sb* config, const char* name, qx_err* e);

/* "SentencePiece BPE" / "byte-level BPE (pre NAME)" and the token count, for summaries. */
void qx_vocab_describe(const qx_vocab* v, char* buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
