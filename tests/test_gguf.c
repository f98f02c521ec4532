/* qx_gguf: a hand-made GGUF built byte by byte (every metadata type, nested arrays, F32/F16/BF16
   tensors) read into a store; then lies (truncation at every offset, lengths and counts beyond
   the file, quantized and integer tensors, bad alignment, overlaps, duplicates, other
   architectures) refused with useful messages; round trips (tied/untied, F32/F16/BF16) with the
   key/value pairs preserved verbatim plus requested changes; the HF <-> GGUF RoPE row permutation
   checked against its definition and as an exact HF -> GGUF -> HF round trip; the streaming
   writer out of order; no output on failure and no overwrite without force. */
#include "quarot.h"
#include "qt.h"
#include "fmt_util.h"
#include "formats/qx_gguf.h"

/* ---- byte builders ---- */

static void g_str(fu_buf* b, const char* s) { fu_u64(b, strlen(s)); fu_str(b, s); }
static void g_key(fu_buf* b, const char* k, uint32_t type) { g_str(b, k); fu_u32(b, type); }
static void kv_u32(fu_buf* b, const char* k, uint32_t v) { g_key(b, k, QX_GGUF_U32); fu_u32(b, v); }
static void kv_f32(fu_buf* b, const char* k, float v) { g_key(b, k, QX_GGUF_F32); fu_f32(b, v); }
static void kv_string(fu_buf* b, const char* k, const char* v) { g_key(b, k, QX_GGUF_STRING); g_str(b, v); }
static void g_tensor(fu_buf* b, const char* name, uint32_t n_dims, const uint64_t* ne, uint32_t type, uint64_t off) {
    uint32_t d;
    g_str(b, name);
    fu_u32(b, n_dims);
    for (d = 0; d < n_dims; ++d) fu_u64(b, ne[d]);
    fu_u32(b, type);
    fu_u64(b, off);
}
static void g_pad(fu_buf* b, size_t align) { while (b->len % align) fu_u8(b, 0); }

/* The tiny llama of the hand-made file: hidden 8, ffn 12, 1 layer, 2 heads, 1 KV head (head 4),
   vocab 5 (from the token list), tied (no output.weight). Tensor t's data: element k = t + (k mod 8)/8. */
#define H_HID 8
#define H_FF 12
#define H_VOCAB 5
typedef struct { const char* name; int n_dims; uint64_t ne0, ne1; uint32_t type; } htensor;
static const htensor htensors[] = {
    {"token_embd.weight", 2, H_HID, H_VOCAB, QX_GGML_F32},
    {"output_norm.weight", 1, H_HID, 1, QX_GGML_F32},
    {"blk.0.attn_norm.weight", 1, H_HID, 1, QX_GGML_F32},
    {"blk.0.attn_q.weight", 2, H_HID, H_HID, QX_GGML_F16},
    {"blk.0.attn_k.weight", 2, H_HID, 4, QX_GGML_BF16},
    {"blk.0.attn_v.weight", 2, H_HID, 4, QX_GGML_F32},
    {"blk.0.attn_output.weight", 2, H_HID, H_HID, QX_GGML_F32},
    {"blk.0.ffn_norm.weight", 1, H_HID, 1, QX_GGML_F32},
    {"blk.0.ffn_gate.weight", 2, H_HID, H_FF, QX_GGML_F16},
    {"blk.0.ffn_up.weight", 2, H_HID, H_FF, QX_GGML_F32},
    {"blk.0.ffn_down.weight", 2, H_FF, H_HID, QX_GGML_BF16},
};
#define N_HT ((int)(sizeof htensors / sizeof htensors[0]))

static float hval(int t, uint64_t k) { return (float)t + (float)(k % 8) / 8.0f; }   /* exact in f16 and bf16 */

static uint64_t hbytes(const htensor* t) {
    return t->ne0 * t->ne1 * (t->type == QX_GGML_F32 ? 4u : 2u);
}

/* Builds the file; `quant` replaces attn_q's type (e.g. 12 = Q4_K), `arch` the architecture. */
static fu_buf hand_gguf(uint32_t align, uint32_t quant, const char* arch) {
    fu_buf b;
    int t;
    uint64_t off = 0;
    uint32_t n_kv = 14 + (align != 32);
    memset(&b, 0, sizeof b);
    fu_str(&b, "GGUF");
    fu_u32(&b, 3);
    fu_u64(&b, N_HT);
    fu_u64(&b, n_kv);
    kv_string(&b, "general.architecture", arch);
    kv_string(&b, "general.name", "tiny \xe2\x9c\x93");
    if (align != 32) kv_u32(&b, "general.alignment", align);
    kv_u32(&b, "llama.embedding_length", H_HID);
    kv_u32(&b, "llama.feed_forward_length", H_FF);
    g_key(&b, "llama.block_count", QX_GGUF_U64); fu_u64(&b, 1);
    g_key(&b, "llama.attention.head_count", QX_GGUF_I32); fu_u32(&b, 2);
    kv_u32(&b, "llama.attention.head_count_kv", 1);
    kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    g_key(&b, "llama.rope.freq_base", QX_GGUF_F64); fu_u64(&b, 0x40c3880000000000ull);   /* 10000.0 */
    kv_u32(&b, "llama.context_length", 64);
    g_key(&b, "tokenizer.ggml.tokens", QX_GGUF_ARRAY); fu_u32(&b, QX_GGUF_STRING); fu_u64(&b, H_VOCAB);
    for (t = 0; t < H_VOCAB; ++t) { char tok[16]; snprintf(tok, sizeof tok, "t%d", t); g_str(&b, tok); }
    g_key(&b, "test.nested", QX_GGUF_ARRAY); fu_u32(&b, QX_GGUF_ARRAY); fu_u64(&b, 2);   /* [[1, 2], [3]] as i16 */
    fu_u32(&b, QX_GGUF_I16); fu_u64(&b, 2); fu_u8(&b, 1); fu_u8(&b, 0); fu_u8(&b, 2); fu_u8(&b, 0);
    fu_u32(&b, QX_GGUF_I16); fu_u64(&b, 1); fu_u8(&b, 3); fu_u8(&b, 0);
    g_key(&b, "test.flags", QX_GGUF_ARRAY); fu_u32(&b, QX_GGUF_BOOL); fu_u64(&b, 3); fu_u8(&b, 1); fu_u8(&b, 0); fu_u8(&b, 1);
    g_key(&b, "test.i8", QX_GGUF_I8); fu_u8(&b, 0xfe);                     /* -2 */
    for (t = 0; t < N_HT; ++t) {
        uint64_t ne[2] = {htensors[t].ne0, htensors[t].ne1};
        g_tensor(&b, htensors[t].name, (uint32_t)htensors[t].n_dims, ne, t == 3 && quant ? quant : htensors[t].type, off);
        off += hbytes(&htensors[t]);
        off = (off + align - 1) / align * align;
    }
    g_pad(&b, align);
    for (t = 0; t < N_HT; ++t) {
        uint64_t k, n = htensors[t].ne0 * htensors[t].ne1;
        for (k = 0; k < n; ++k) {
            float v = hval(t, k);
            uint16_t h;
            if (htensors[t].type == QX_GGML_F32) { fu_f32(&b, v); continue; }
            if (htensors[t].type == QX_GGML_F16) quarot_f32_to_f16(&v, &h, 1); else quarot_f32_to_bf16(&v, &h, 1);
            fu_u8(&b, h & 0xff); fu_u8(&b, h >> 8);
        }
        g_pad(&b, align);
    }
    return b;
}

static void test_read_handmade(void) {
    fu_buf b = hand_gguf(32, 0, "llama");
    qx_store s;
    qx_err e;
    qx_gguf_file f;
    int t;
    const char* hf_names[N_HT] = {"model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight",
                                  "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                                  "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
                                  "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
                                  "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"};
    int64_t x;
    double d;
    /* the parsed file */
    fu_seed("gguf/valid.gguf", b.p, b.len);
    QT_OK(qx_gguf_parse(b.p, b.len, "hand.gguf", &f, &e));
    QT_EQ_INT(f.version, 3);
    QT_EQ_INT(f.n_kv, 14);
    QT_EQ_INT(f.n_tensors, N_HT);
    QT_EQ_INT(f.alignment, 32);
    QT_EQ_INT(f.data_offset % 32, 0);
    QT_OK(qx_gguf_kv_int(qx_gguf_find(&f, "test.i8"), &x)); QT_EQ_INT(x, -2);
    QT_OK(qx_gguf_kv_int(qx_gguf_find(&f, "llama.block_count"), &x)); QT_EQ_INT(x, 1);
    QT_OK(qx_gguf_kv_float(qx_gguf_find(&f, "llama.rope.freq_base"), &d)); QT_NEAR(d, 10000.0, 0);
    QT_CHECK(qx_gguf_find(&f, "test.nested")->arr_count == 2 && qx_gguf_find(&f, "test.nested")->arr_type == QX_GGUF_ARRAY);
    QT_CHECK(qx_gguf_find(&f, "tokenizer.ggml.tokens")->arr_count == H_VOCAB);
    QT_CHECK(qx_gguf_find(&f, "missing") == NULL);
    qx_gguf_file_free(&f);
    /* into a store */
    qx_store_init(&s);
    QT_OK(qx_gguf_read_mem(b.p, b.len, "hand.gguf", &s, &e));
    QT_CHECK(strcmp(s.config.arch, "llama") == 0 && s.config.hidden == H_HID && s.config.intermediate == H_FF);
    QT_CHECK(s.config.n_layers == 1 && s.config.n_heads == 2 && s.config.n_kv_heads == 1 && s.config.head_dim == 4);
    QT_CHECK(s.config.vocab == H_VOCAB && s.config.max_seq == 64 && s.config.norm_eps == 1e-6f && s.config.rope_theta == 10000.0f);
    QT_CHECK(s.config.rope_interleaved == 1 && s.config.tied_embeddings == 1 && s.config.norm == QUAROT_NORM_RMS);
    QT_EQ_INT(s.count, N_HT);
    for (t = 0; t < N_HT; ++t) {
        quarot_tensor* q = qx_store_find(&s, hf_names[t]);
        float row[16];
        QT_CHECKF(q != NULL, "%s missing", hf_names[t]);
        if (!q) continue;
        QT_CHECK(q->ne[0] == (int64_t)htensors[t].ne0 && q->ne[1] == (int64_t)htensors[t].ne1);
        QT_CHECK(q->dtype == (htensors[t].type == QX_GGML_F32 ? QUAROT_DTYPE_F32 : htensors[t].type == QX_GGML_F16 ? QUAROT_DTYPE_F16 : QUAROT_DTYPE_BF16));
        QT_OK(quarot_tensor_get_row_f32(q, q->ne[1] - 1, row));
        QT_CHECK(row[1] == hval(t, (uint64_t)((q->ne[1] - 1) * q->ne[0] + 1)));
    }
    {
        size_t bl;
        const unsigned char* kvb = (const unsigned char*)qx_store_get_blob(&s, "gguf.kv", &bl);
        QT_CHECK(kvb && kvb[0] == 14 && bl > 8 && memcmp(kvb + 8, b.p + 24, bl - 8) == 0);   /* verbatim */
    }
    qx_store_free(&s);
    /* version 2 has the same layout */
    b.p[4] = 2;
    fu_seed("gguf/valid_v2.gguf", b.p, b.len);
    qx_store_init(&s);
    QT_OK(qx_gguf_read_mem(b.p, b.len, "v2.gguf", &s, &e));
    QT_EQ_INT(s.count, N_HT);
    qx_store_free(&s);
    free(b.p);
}

static void expect(const fu_buf* b, quarot_result code, const char* what, int line) {
    qx_store s;
    qx_err e;
    quarot_result r;
    qx_store_init(&s);
    e.msg[0] = '\0';
    r = qx_gguf_read_mem(b->p, b->len, "lie.gguf", &s, &e);
    if (getenv("QX_SHOW")) printf("    %s\n", e.msg);
    QT_CHECKF(r == code, "line %d: result %d (%s), expected %d: %s", line, (int)r, quarot_result_string(r), (int)code, e.msg);
    QT_CHECKF(strstr(e.msg, "lie.gguf") && strstr(e.msg, what), "line %d: message '%s' lacks '%s'", line, e.msg, what);
    qx_store_free(&s);
}
#define EXPECT(b, code, what) expect(&(b), code, what, __LINE__)

/* A header followed by raw bytes. */
static fu_buf head(uint32_t version, uint64_t n_t, uint64_t n_kv) {
    fu_buf b;
    memset(&b, 0, sizeof b);
    fu_str(&b, "GGUF");
    fu_u32(&b, version);
    fu_u64(&b, n_t);
    fu_u64(&b, n_kv);
    return b;
}

/* Position of the first tensor info's name in the hand-made file (found by searching). */
static size_t find(const fu_buf* b, const char* s) {
    size_t k, n = strlen(s);
    for (k = 0; k + n <= b->len; ++k) if (memcmp(b->p + k, s, n) == 0) return k;
    return 0;
}

static void put64(unsigned char* p, uint64_t v) { int k; for (k = 0; k < 8; ++k) p[k] = (unsigned char)(v >> (8 * k)); }
static void put32(unsigned char* p, uint32_t v) { int k; for (k = 0; k < 4; ++k) p[k] = (unsigned char)(v >> (8 * k)); }

static void test_lies(void) {
    fu_buf b = hand_gguf(32, 0, "llama"), c;
    size_t cut, at;
    int fails = 0;
    /* truncation anywhere is refused */
    for (cut = 0; cut < b.len; ++cut) {
        qx_store s;
        qx_err e;
        qx_store_init(&s);
        if (qx_gguf_read_mem(b.p, cut, "cut", &s, &e) != QUAROT_OK) ++fails;
        qx_store_free(&s);
    }
    QT_EQ_INT(fails, (int)b.len);
    /* header */
    c = head(1, 0, 0); EXPECT(c, QUAROT_ERR_UNSUPPORTED, "version 1"); free(c.p);
    c = head(0x03000000u, 0, 0); EXPECT(c, QUAROT_ERR_UNSUPPORTED, "big-endian"); free(c.p);
    c = head(3, 0, 0); c.p[0] = 'X'; EXPECT(c, QUAROT_ERR_PARSE, "magic"); free(c.p);
    c = head(3, (uint64_t)1 << 62, 0); EXPECT(c, QUAROT_ERR_PARSE, "tensors cannot fit"); free(c.p);
    c = head(3, UINT64_MAX, 0); EXPECT(c, QUAROT_ERR_PARSE, "tensors cannot fit"); free(c.p);
    c = head(3, 0, UINT64_MAX); EXPECT(c, QUAROT_ERR_PARSE, "pairs cannot fit"); free(c.p);
    /* strings and arrays beyond the file */
    c = head(3, 0, 1); fu_u64(&c, 1000); fu_str(&c, "abcdefghijklm"); EXPECT(c, QUAROT_ERR_PARSE, "passes the end"); free(c.p);
    c = head(3, 0, 1); g_key(&c, "k", QX_GGUF_STRING); fu_u64(&c, (uint64_t)1 << 63); fu_str(&c, "x");
    EXPECT(c, QUAROT_ERR_PARSE, "key \"k\": string length 9223372036854775808 passes the end"); free(c.p);
    c = head(3, 0, 1); g_key(&c, "a", QX_GGUF_ARRAY); fu_u32(&c, QX_GGUF_U32); fu_u64(&c, UINT64_MAX / 2); fu_u32(&c, 7);
    EXPECT(c, QUAROT_ERR_PARSE, "cannot fit"); free(c.p);
    c = head(3, 0, 1); g_key(&c, "a", QX_GGUF_ARRAY); fu_u32(&c, QX_GGUF_STRING); fu_u64(&c, 3); g_str(&c, "x"); fu_u64(&c, 5);
    fu_str(&c, "abcdefgh");
    EXPECT(c, QUAROT_ERR_PARSE, "passes the end"); free(c.p);
    c = head(3, 0, 1); g_key(&c, "deep", QX_GGUF_ARRAY);
    for (at = 0; at < 9; ++at) { fu_u32(&c, QX_GGUF_ARRAY); fu_u64(&c, 1); }
    fu_u32(&c, QX_GGUF_U8); fu_u64(&c, 0);
    EXPECT(c, QUAROT_ERR_PARSE, "nested deeper");
    fu_seed("gguf/nested_too_deep.gguf", c.p, c.len);
    free(c.p);
    c = head(3, 0, 1); g_key(&c, "t", 13); fu_u64(&c, 0); EXPECT(c, QUAROT_ERR_PARSE, "unknown value type 13"); free(c.p);
    c = head(3, 0, 1); g_key(&c, "t", QX_GGUF_ARRAY); fu_u32(&c, 99); fu_u64(&c, 0); EXPECT(c, QUAROT_ERR_PARSE, "element type 99"); free(c.p);
    c = head(3, 0, 2); kv_u32(&c, "k", 1); kv_u32(&c, "k", 2); EXPECT(c, QUAROT_ERR_PARSE, "\"k\" appears twice"); free(c.p);
    c = head(3, 0, 1); fu_u64(&c, 0); fu_u32(&c, QX_GGUF_U8); fu_u8(&c, 0); EXPECT(c, QUAROT_ERR_PARSE, "empty"); free(c.p);
    c = head(3, 0, 1); kv_u32(&c, "general.alignment", 48); EXPECT(c, QUAROT_ERR_PARSE, "power of two"); free(c.p);
    c = head(3, 0, 1); g_key(&c, "general.alignment", QX_GGUF_U64); fu_u64(&c, 64); EXPECT(c, QUAROT_ERR_PARSE, "power of two"); free(c.p);
    c = head(3, 0, 0); EXPECT(c, QUAROT_ERR_PARSE, "no general.architecture"); free(c.p);
    /* tensor infos */
    {
        uint64_t ne[5] = {4, 4, 1, 1, 1};
        c = head(3, 1, 0); g_tensor(&c, "w", 5, ne, 0, 0); EXPECT(c, QUAROT_ERR_PARSE, "5 dimensions"); free(c.p);
        c = head(3, 1, 0); g_tensor(&c, "w", 0, ne, 0, 0); fu_u64(&c, 0); EXPECT(c, QUAROT_ERR_PARSE, "0 dimensions"); free(c.p);
        ne[0] = (uint64_t)1 << 40; ne[1] = (uint64_t)1 << 40;
        c = head(3, 1, 0); g_tensor(&c, "w", 2, ne, 0, 0); EXPECT(c, QUAROT_ERR_OVERFLOW, "overflows"); free(c.p);
        ne[0] = (uint64_t)1 << 62; ne[1] = 1;
        c = head(3, 1, 0); g_tensor(&c, "w", 2, ne, 0, 0); EXPECT(c, QUAROT_ERR_OVERFLOW, "byte size overflows"); free(c.p);
        ne[0] = 4; ne[1] = 4;
        c = head(3, 1, 0); g_tensor(&c, "w", 2, ne, 0, 0); g_pad(&c, 32); EXPECT(c, QUAROT_ERR_PARSE, "passes the end of the 0-byte data"); free(c.p);
        c = head(3, 1, 0); fu_u64(&c, UINT64_MAX); fu_put(&c, b.p, 64); EXPECT(c, QUAROT_ERR_PARSE, "name length"); free(c.p);
        c = head(3, 2, 0); g_tensor(&c, "w", 1, ne, 0, 0); g_tensor(&c, "w", 1, ne, 0, 32); g_pad(&c, 32);
        fu_put(&c, b.p, 64);
        EXPECT(c, QUAROT_ERR_PARSE, "\"w\" appears twice"); free(c.p);
        c = head(3, 2, 0); g_tensor(&c, "a", 1, ne, 0, 0); ne[0] = 16; g_tensor(&c, "b", 1, ne, 0, 0); g_pad(&c, 32);
        fu_put(&c, b.p, 64);
        EXPECT(c, QUAROT_ERR_PARSE, "overlap"); free(c.p);
        c = head(3, 1, 0); g_tensor(&c, "a", 1, ne, 0, 4); g_pad(&c, 32); fu_put(&c, b.p, 128);
        EXPECT(c, QUAROT_ERR_PARSE, "unaligned"); free(c.p);
    }
    /* in the model: quantized and integer tensors, other architectures, missing keys, shapes */
    c = hand_gguf(32, 12, "llama");
    fu_seed("gguf/quantized_q4k.gguf", c.p, c.len);
    EXPECT(c, QUAROT_ERR_UNSUPPORTED_DTYPE, "tensor \"blk.0.attn_q.weight\" has type Q4_K: quantized GGUF tensors are not supported (of the quantized types, Q4_0 and Q8_0 load); convert from an F16/F32 GGUF or safetensors");
    free(c.p);
    c = hand_gguf(32, 8, "llama"); EXPECT(c, QUAROT_ERR_PARSE, "type Q8_0 needs rows of a multiple of 32 elements, not 8"); free(c.p);
    c = hand_gguf(32, 26, "llama"); EXPECT(c, QUAROT_ERR_PARSE, "overlap");               /* I32: bigger than F16 */
    free(c.p);
    c = hand_gguf(32, 25, "llama"); EXPECT(c, QUAROT_ERR_UNSUPPORTED_DTYPE, "\"blk.0.attn_q.weight\" has integer type I16");
    free(c.p);
    c = hand_gguf(32, 0, "gpt2"); EXPECT(c, QUAROT_ERR_UNSUPPORTED, "architecture \"gpt2\" is not supported (llama, qwen2, qwen3, phi3"); free(c.p);
    /* Gemma 2 / 3: refused with the reason (norms on the block outputs make R1 inexact) */
    c = hand_gguf(32, 0, "gemma2"); EXPECT(c, QUAROT_ERR_UNSUPPORTED, "architecture \"gemma2\" is not supported: its post_attention_layernorm"); free(c.p);
    c = hand_gguf(32, 0, "gemma3"); EXPECT(c, QUAROT_ERR_UNSUPPORTED, "R1 would not be exact"); free(c.p);
    c = hand_gguf(32, 0, "llama");
    at = find(&c, "llama.embedding_length");
    c.p[at] = 'X';
    EXPECT(c, QUAROT_ERR_PARSE, "required key llama.embedding_length is missing");
    c.p[at] = 'l';
    at = find(&c, "llama.feed_forward_length") + 25 + 4;                                  /* its value */
    put32(c.p + at, 13);
    EXPECT(c, QUAROT_ERR_SHAPE_MISMATCH, "model.layers.0.mlp.gate_proj.weight");
    put32(c.p + at, H_FF);
    at = find(&c, "blk.0.attn_v.weight") + 19;                                            /* n_dims */
    put32(c.p + at + 4 + 8, 5);                                                           /* ne[1] 4 -> 5 */
    EXPECT(c, QUAROT_ERR_PARSE, "");                                                       /* now overlaps / passes */
    put32(c.p + at + 4 + 8, 4);
    at = find(&c, "tokenizer.ggml.tokens") + 21 + 4 + 4;                                  /* array count */
    put64(c.p + at, (uint64_t)1 << 60);
    EXPECT(c, QUAROT_ERR_PARSE, "cannot fit");
    fu_seed("gguf/huge_array.gguf", c.p, c.len);
    put64(c.p + at, H_VOCAB);
    {
        qx_store s;
        qx_err e;
        qx_store_init(&s);
        QT_OK(qx_gguf_read_mem(c.p, c.len, "restored", &s, &e));   /* every lie undone: fine again */
        qx_store_free(&s);
    }
    free(c.p);
    free(b.p);
}

static void test_names(void) {
    static const char* const pairs[][2] = {
        {"token_embd.weight", "model.embed_tokens.weight"}, {"output_norm.weight", "model.norm.weight"},
        {"output.weight", "lm_head.weight"}, {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
        {"blk.12.attn_q.weight", "model.layers.12.self_attn.q_proj.weight"},
        {"blk.7.attn_k.weight", "model.layers.7.self_attn.k_proj.weight"},
        {"blk.7.attn_v.bias", "model.layers.7.self_attn.v_proj.bias"},
        {"blk.31.attn_output.weight", "model.layers.31.self_attn.o_proj.weight"},
        {"blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"},
        {"blk.3.ffn_gate.weight", "model.layers.3.mlp.gate_proj.weight"},
        {"blk.3.ffn_up.weight", "model.layers.3.mlp.up_proj.weight"},
        {"blk.100.ffn_down.weight", "model.layers.100.mlp.down_proj.weight"},
    };
    static const char* const unmapped[] = {"rope_freqs.weight", "blk.01.attn_q.weight", "blk.x.attn_q.weight",
                                           "blk.1.attn_q.weightX", "blk..attn_q.weight", "model.layers.1.foo"};
    char out[128];
    size_t k;
    for (k = 0; k < sizeof pairs / sizeof pairs[0]; ++k) {
        QT_EQ_INT(qx_gguf_name_to_hf(pairs[k][0], out, sizeof out), 1);
        QT_CHECKF(strcmp(out, pairs[k][1]) == 0, "%s -> %s", pairs[k][0], out);
        QT_EQ_INT(qx_gguf_name_from_hf(pairs[k][1], out, sizeof out), 1);
        QT_CHECKF(strcmp(out, pairs[k][0]) == 0, "%s -> %s", pairs[k][1], out);
    }
    for (k = 0; k < sizeof unmapped / sizeof unmapped[0]; ++k) {
        QT_EQ_INT(qx_gguf_name_to_hf(unmapped[k], out, sizeof out), 0);
        QT_CHECK(strcmp(out, unmapped[k]) == 0);
        QT_EQ_INT(qx_gguf_name_from_hf(unmapped[k], out, sizeof out), 0);
    }
    QT_EQ_INT(qx_gguf_name_to_hf("blk.0.attn_q.weight", out, 10), -1);
}

/* GGUF -> store -> GGUF: tensors, config and pairs survive, changes applied, alignment kept. */
static void test_roundtrip_kv(void) {
    const char* dir = fu_tmpdir();
    char p1[200], p2[200], msg[256];
    fu_buf b = hand_gguf(64, 0, "llama");
    qx_store s, r;
    qx_err e;
    qx_gguf_save_opts so;
    qx_gguf_set set[5];
    char* img;
    size_t n;
    qx_gguf_file f, g;
    uint64_t k;
    if (!dir) return;
    snprintf(p1, sizeof p1, "%s/a.gguf", dir);
    snprintf(p2, sizeof p2, "%s/b.gguf", dir);
    QT_CHECK(qt_write_file(p1, b.p, b.len));
    qx_store_init(&s);
    qx_store_init(&r);
    QT_OK(qx_gguf_load(p1, &s, NULL, &e));
    QT_CHECK(s.n_cleanups == 1 && s.count == N_HT && !s.items[0].owned);   /* views of the mapping */
    memset(set, 0, sizeof set);
    set[0].key = "general.name"; set[0].type = QX_GGUF_STRING; set[0].str = "tiny (rotated)";
    set[1].key = "llama.context_length"; set[1].type = QX_GGUF_U32; set[1].u = 128;
    set[2].key = "test.flags"; set[2].type = -1;
    set[3].key = "quarot.rotated"; set[3].type = QX_GGUF_BOOL; set[3].u = 1;
    set[4].key = "quarot.seed"; set[4].type = QX_GGUF_I64; set[4].i = -42;
    memset(&so, 0, sizeof so);
    so.set = set;
    so.n_set = 5;
    QT_OK(qx_gguf_save(&s, p2, &so, &e));
    QT_OK(qx_gguf_load(p2, &r, NULL, &e));
    QT_CHECKF(fu_same_tensors(&s, &r, msg, sizeof msg), "%s", msg);
    s.config.max_seq = 128;
    QT_CHECKF(fu_same_config(&s.config, &r.config, msg, sizeof msg), "%s", msg);
    qx_store_free(&r);
    /* the pairs: verbatim except the changes, in the original order, new ones at the end */
    img = qt_read_file(p2, &n);
    QT_OK(qx_gguf_parse(b.p, b.len, "a", &f, &e));
    QT_OK(qx_gguf_parse(img, n, "b", &g, &e));
    QT_EQ_INT(g.n_kv, f.n_kv - 1 + 2);
    QT_EQ_INT(g.alignment, 64);
    QT_EQ_INT(g.data_offset % 64, 0);
    for (k = 0; k < g.n_tensors; ++k) QT_EQ_INT(g.t[k].offset % 64, 0);
    for (k = 0; k + 2 < g.n_kv; ++k) {
        const qx_gguf_kv* x = &g.kv[k];
        const qx_gguf_kv* y = &f.kv[k < 13 ? k : k + 1];            /* test.flags (index 13) removed */
        int changed = x->key_len == 12 && memcmp(x->key, "general.name", 12) == 0;
        changed |= x->key_len == 20 && memcmp(x->key, "llama.context_length", 20) == 0;
        QT_CHECK(x->key_len == y->key_len && memcmp(x->key, y->key, (size_t)x->key_len) == 0);
        QT_CHECKF(changed || (x->raw_len == y->raw_len && memcmp(x->raw, y->raw, (size_t)x->raw_len) == 0), "pair %d changed", (int)k);
    }
    {
        uint64_t sl;
        const char* nm = qx_gguf_kv_string(qx_gguf_find(&g, "general.name"), &sl);
        int64_t v;
        QT_CHECK(nm && sl == 14 && memcmp(nm, "tiny (rotated)", 14) == 0);
        QT_OK(qx_gguf_kv_int(qx_gguf_find(&g, "llama.context_length"), &v)); QT_EQ_INT(v, 128);
        QT_OK(qx_gguf_kv_int(qx_gguf_find(&g, "quarot.seed"), &v)); QT_EQ_INT(v, -42);
        QT_CHECK(qx_gguf_find(&g, "quarot.rotated") && qx_gguf_find(&g, "quarot.rotated")->type == QX_GGUF_BOOL);
        QT_CHECK(qx_gguf_find(&g, "test.flags") == NULL && qx_gguf_find(&g, "test.nested") != NULL);
    }
    qx_gguf_file_free(&f);
    qx_gguf_file_free(&g);
    free(img);
    /* bad changes are refused before anything is written */
    set[0].type = QX_GGUF_U8; set[0].u = 300;
    QT_ERR(qx_gguf_save(&s, p2, &so, &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECK(strstr(e.msg, "out of range") != NULL);
    set[0].type = QX_GGUF_U32; set[0].key = "general.alignment"; set[0].u = 24;
    so.force = 1;
    QT_ERR(qx_gguf_save(&s, p2, &so, &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECK(strstr(e.msg, "power of two") != NULL);
    QT_EQ_INT(fu_count_entries(dir), 2);
    /* a larger alignment by request */
    set[0].u = 256;
    QT_OK(qx_gguf_save(&s, p2, &so, &e));
    img = qt_read_file(p2, &n);
    QT_OK(qx_gguf_parse(img, n, "b", &g, &e));
    QT_CHECK(g.alignment == 256 && g.data_offset % 256 == 0);
    qx_gguf_file_free(&g);
    free(img);
    /* no overwrite without force */
    so.force = 0;
    QT_ERR(qx_gguf_save(&s, p2, &so, &e), QUAROT_ERR_IO);
    QT_CHECK(strstr(e.msg, "exists already") != NULL);
    qx_store_free(&s);
    free(b.p);
    fu_rm_rf(dir);
}

/* HF store -> GGUF (q/k rows interleaved) -> store -> safetensors -> store == the original. */
static void test_roundtrip_models(void) {
    const char* dir = fu_tmpdir();
    char p[200], st[200], msg[256];
    quarot_dtype mix[3] = {QUAROT_DTYPE_F32, QUAROT_DTYPE_BF16, QUAROT_DTYPE_F16};
    int tied;
    if (!dir) return;
    snprintf(p, sizeof p, "%s/m.gguf", dir);
    snprintf(st, sizeof st, "%s/hf", dir);
    for (tied = 0; tied <= 1; ++tied) {
        qx_store s, g, h;
        qx_err e;
        qx_gguf_save_opts go;
        qx_st_save_opts so;
        quarot_tensor *q0, *q1;
        int64_t row, rows, hd;
        int ok = 1;
        qx_store_init(&s);
        qx_store_init(&g);
        qx_store_init(&h);
        fu_make_model(&s, "llama", tied, mix, 3);
        memset(&go, 0, sizeof go);
        go.force = 1;
        memset(&so, 0, sizeof so);
        so.force = 1;
        QT_OK(qx_gguf_save(&s, p, &go, &e));
        QT_OK(qx_gguf_load(p, &g, NULL, &e));
        QT_CHECK(g.config.rope_interleaved == 1 && g.config.tied_embeddings == tied);
        QT_CHECK((qx_store_find(&g, "lm_head.weight") != NULL) == !tied);
        /* q rows: GGUF row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i (llama.cpp's permute) */
        q0 = qx_store_find(&s, "model.layers.1.self_attn.q_proj.weight");
        q1 = qx_store_find(&g, "model.layers.1.self_attn.q_proj.weight");
        hd = s.config.head_dim;
        rows = q0 ? q0->ne[1] : 0;
        for (row = 0; q0 && q1 && row < rows; ++row) {
            int64_t hh = row / hd, i = (row % hd) / 2, j = row % 2;
            size_t rb = (size_t)q0->ne[0] * quarot_dtype_size(q0->dtype);
            if (memcmp((char*)q1->data + (size_t)row * rb, (char*)q0->data + (size_t)(hh * hd + j * hd / 2 + i) * rb, rb) != 0) ok = 0;
        }
        QT_CHECK(q0 && q1 && ok && q0->dtype == q1->dtype);
        /* back to Hugging Face: identical to the start, tensors and config */
        QT_OK(qx_st_save(&g, st, &so, &e));
        QT_OK(qx_st_load(st, &h, NULL, &e));
        QT_CHECKF(fu_same_tensors(&s, &h, msg, sizeof msg), "tied=%d: %s", tied, msg);
        QT_CHECKF(fu_same_config(&s.config, &h.config, msg, sizeof msg), "tied=%d: %s", tied, msg);
        /* and GGUF -> GGUF of the interleaved store changes nothing */
        qx_store_free(&h);
        {
            char p2[220];
            snprintf(p2, sizeof p2, "%s/m2.gguf", dir);
            QT_OK(qx_gguf_save(&g, p2, &go, &e));
            QT_OK(qx_gguf_load(p2, &h, NULL, &e));
            QT_CHECKF(fu_same_tensors(&g, &h, msg, sizeof msg), "%s", msg);
            QT_CHECKF(fu_same_config(&g.config, &h.config, msg, sizeof msg), "%s", msg);
        }
        qx_store_free(&h);
        qx_store_free(&g);
        qx_store_free(&s);
    }
    {   /* other architectures are refused for GGUF output, and nothing is written */
        qx_store s;
        qx_err e;
        quarot_dtype f32[1] = {QUAROT_DTYPE_F32};
        char p3[220];
        qx_store_init(&s);
        fu_make_model(&s, "opt", 0, f32, 1);
        snprintf(p3, sizeof p3, "%s/q.gguf", dir);
        QT_ERR(qx_gguf_save(&s, p3, NULL, &e), QUAROT_ERR_UNSUPPORTED);
        QT_CHECK(strstr(e.msg, "\"opt\"") != NULL && !fu_exists(p3, NULL));
        qx_store_free(&s);
    }
    fu_rm_rf(dir);
}

/* qwen2 / qwen3 GGUF (llama.cpp's names and keys; NEOX RoPE, so q/k rows keep Hugging Face's
   half-split order): the file holds qwen2.* / qwen3.* keys and blk.N.attn_q.bias /
   blk.N.attn_q_norm.weight, and reads back to the same tensors (bit for bit) and config. */
static int has_tensor(const qx_gguf_file* f, const char* name) {
    uint64_t k;
    for (k = 0; k < f->n_tensors; ++k)
        if (f->t[k].name_len == strlen(name) && memcmp(f->t[k].name, name, strlen(name)) == 0) return 1;
    return 0;
}

static void test_qwen_models(void) {
    const char* dir = fu_tmpdir();
    const char* archs[2] = {"qwen2", "qwen3"};
    quarot_dtype mix[3] = {QUAROT_DTYPE_F32, QUAROT_DTYPE_BF16, QUAROT_DTYPE_F16};
    int a, tied;
    if (!dir) return;
    for (a = 0; a < 2; ++a)
        for (tied = 0; tied <= 1; ++tied) {
            qx_store s, g, h;
            qx_err e;
            qx_gguf_file f;
            char p[200], st[200], msg[256], key[64];
            size_t n = 0;
            char* img;
            int64_t x = 0;
            int interleaved = -1;
            qx_store_init(&s);
            qx_store_init(&g);
            qx_store_init(&h);
            fu_make_model(&s, archs[a], tied, mix, 3);
            snprintf(p, sizeof p, "%s/%s_%d.gguf", dir, archs[a], tied);
            snprintf(st, sizeof st, "%s/%s_%d_hf", dir, archs[a], tied);
            QT_CHECK(qx_gguf_arch_supported(archs[a], &interleaved) && interleaved == 0);
            QT_OK(qx_gguf_save(&s, p, NULL, &e));
            img = qt_read_file(p, &n);
            QT_CHECK(img != NULL);
            if (img && qx_gguf_parse(img, n, p, &f, &e) == QUAROT_OK) {
                uint64_t al = 0;
                const char* arch = qx_gguf_kv_string(qx_gguf_find(&f, "general.architecture"), &al);
                QT_CHECK(arch && al == 5 && memcmp(arch, archs[a], 5) == 0);
                snprintf(key, sizeof key, "%s.embedding_length", archs[a]);
                QT_CHECK(qx_gguf_kv_int(qx_gguf_find(&f, key), &x) == QUAROT_OK && x == s.config.hidden);
                snprintf(key, sizeof key, "%s.rope.freq_base", archs[a]);
                QT_CHECK(qx_gguf_find(&f, key) != NULL && qx_gguf_find(&f, "llama.embedding_length") == NULL);
                QT_CHECKF(has_tensor(&f, "blk.1.attn_v.bias") == (a == 0) && has_tensor(&f, "blk.1.attn_q_norm.weight") == (a == 1) &&
                          has_tensor(&f, "blk.0.attn_k_norm.weight") == (a == 1) && has_tensor(&f, "output.weight") == !tied,
                          "%s tied=%d: tensor names", archs[a], tied);
                qx_gguf_file_free(&f);
            } else {
                QT_CHECKF(0, "%s: %s", p, e.msg);
            }
            free(img);
            QT_OK(qx_gguf_load(p, &g, NULL, &e));
            QT_CHECK(strcmp(g.config.arch, archs[a]) == 0 && g.config.rope_interleaved == 0 && g.config.tied_embeddings == tied);
            QT_CHECKF(fu_same_tensors(&s, &g, msg, sizeof msg), "%s tied=%d: %s", archs[a], tied, msg);
            QT_CHECKF(fu_same_config(&s.config, &g.config, msg, sizeof msg), "%s tied=%d: %s", archs[a], tied, msg);
            /* and on to Hugging Face: still the same */
            QT_OK(qx_st_save(&g, st, NULL, &e));
            QT_OK(qx_st_load(st, &h, NULL, &e));
            QT_CHECKF(fu_same_tensors(&s, &h, msg, sizeof msg), "%s tied=%d -> hf: %s", archs[a], tied, msg);
            qx_store_free(&h);
            qx_store_free(&g);
            qx_store_free(&s);
        }
    fu_rm_rf(dir);
}

/* The streaming writer: out of order, conversion, failures leave nothing. */
static void test_stream_writer(void) {
    const char* dir = fu_tmpdir();
    char p[200];
    qx_tensor_plan plan[3];
    qx_gguf_writer* w = NULL;
    qx_err e;
    float a[12], v[5];
    quarot_tensor ta, tv;
    int64_t ne_a[2] = {4, 3}, ne_v[1] = {5};
    int k;
    qx_sb kv;
    qx_gguf_set set[1];
    qx_gguf_write_opts wo;
    char* img;
    size_t n;
    qx_gguf_file f;
    if (!dir) return;
    snprintf(p, sizeof p, "%s/s.gguf", dir);
    for (k = 0; k < 12; ++k) a[k] = (float)k - 5.5f;
    for (k = 0; k < 5; ++k) v[k] = 0.1f * (float)k;
    quarot_tensor_init(&ta, a, QUAROT_DTYPE_F32, 2, ne_a);
    quarot_tensor_init(&tv, v, QUAROT_DTYPE_F32, 1, ne_v);
    memset(plan, 0, sizeof plan);
    plan[0].name = "model.layers.0.mlp.up_proj.weight"; plan[0].dtype = QUAROT_DTYPE_F16; plan[0].n_dims = 2; plan[0].ne[0] = 4; plan[0].ne[1] = 3;
    plan[1].name = "model.norm.weight"; plan[1].dtype = QUAROT_DTYPE_BF16; plan[1].n_dims = 1; plan[1].ne[0] = 5;
    plan[2].name = "custom.thing"; plan[2].dtype = QUAROT_DTYPE_F32; plan[2].n_dims = 2; plan[2].ne[0] = 4; plan[2].ne[1] = 3;
    memset(&kv, 0, sizeof kv);
    memset(set, 0, sizeof set);
    set[0].key = "general.architecture"; set[0].type = QX_GGUF_STRING; set[0].str = "llama";
    memset(&wo, 0, sizeof wo);
    wo.set = set;
    wo.n_set = 1;
    QT_OK(qx_gguf_writer_begin(&w, p, plan, 3, NULL, 0, &wo, &e));
    QT_OK(qx_gguf_writer_put(w, "custom.thing", &ta, &e));
    QT_OK(qx_gguf_writer_put(w, "model.norm.weight", &tv, &e));
    QT_ERR(qx_gguf_writer_put(w, "model.norm.weight", &tv, &e), QUAROT_ERR_STATE);
    QT_ERR(qx_gguf_writer_put(w, "model.layers.0.mlp.up_proj.weight", &tv, &e), QUAROT_ERR_SHAPE_MISMATCH);
    QT_OK(qx_gguf_writer_put(w, "model.layers.0.mlp.up_proj.weight", &ta, &e));
    QT_OK(qx_gguf_writer_finish(w, &e));
    img = qt_read_file(p, &n);
    QT_OK(qx_gguf_parse(img, n, "s", &f, &e));
    QT_EQ_INT(f.n_kv, 1);
    QT_EQ_INT(f.n_tensors, 3);
    for (k = 0; k < 3; ++k) {
        const qx_gguf_tinfo* t = &f.t[k];
        if (t->name_len == 19 && memcmp(t->name, "blk.0.ffn_up.weight", 19) == 0) {
            uint16_t h[12];
            quarot_f32_to_f16(a, h, 12);
            QT_CHECK(t->type == QX_GGML_F16 && memcmp(f.data + t->offset, h, 24) == 0);
        } else if (t->name_len == 18 && memcmp(t->name, "output_norm.weight", 18) == 0) {
            uint16_t h[5];
            quarot_f32_to_bf16(v, h, 5);
            QT_CHECK(t->type == QX_GGML_BF16 && t->n_dims == 1 && memcmp(f.data + t->offset, h, 10) == 0);
        } else {
            QT_CHECK(t->name_len == 12 && memcmp(t->name, "custom.thing", 12) == 0 && memcmp(f.data + t->offset, a, 48) == 0);
        }
    }
    qx_gguf_file_free(&f);
    free(img);
    /* failures: missing tensor, abort, duplicate GGUF names, existing file */
    snprintf(p, sizeof p, "%s/t.gguf", dir);
    QT_OK(qx_gguf_writer_begin(&w, p, plan, 3, NULL, 0, &wo, &e));
    QT_OK(qx_gguf_writer_put(w, "custom.thing", &ta, &e));
    QT_ERR(qx_gguf_writer_finish(w, &e), QUAROT_ERR_STATE);
    QT_CHECK(strstr(e.msg, "never written") != NULL);
    QT_OK(qx_gguf_writer_begin(&w, p, plan, 3, NULL, 0, &wo, &e));
    qx_gguf_writer_abort(w);
    QT_EQ_INT(fu_count_entries(dir), 1);
    plan[2].name = "output_norm.weight";          /* passes through to the name model.norm.weight maps to */
    QT_ERR(qx_gguf_writer_begin(&w, p, plan, 3, NULL, 0, &wo, &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECK(strstr(e.msg, "output_norm.weight") != NULL);
    plan[2].name = "custom.thing";
    snprintf(p, sizeof p, "%s/s.gguf", dir);
    QT_ERR(qx_gguf_writer_begin(&w, p, plan, 3, NULL, 0, &wo, &e), QUAROT_ERR_IO);
    QT_EQ_INT(fu_count_entries(dir), 1);
    {   /* a broken blob is refused */
        unsigned char junk[16] = {5, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3};
        snprintf(p, sizeof p, "%s/u.gguf", dir);
        QT_ERR(qx_gguf_writer_begin(&w, p, plan, 3, junk, sizeof junk, &wo, &e), QUAROT_ERR_PARSE);
        QT_EQ_INT(fu_count_entries(dir), 1);
    }
    {   /* an empty file and a missing one */
        qx_store s;
        qx_store_init(&s);
        snprintf(p, sizeof p, "%s/empty.gguf", dir);
        QT_CHECK(qt_write_file(p, "", 0));
        QT_ERR(qx_gguf_load(p, &s, NULL, &e), QUAROT_ERR_PARSE);
        QT_CHECK(strstr(e.msg, "empty.gguf: 0 bytes is too short") != NULL);
        snprintf(p, sizeof p, "%s/missing.gguf", dir);
        QT_ERR(qx_gguf_load(p, &s, NULL, &e), QUAROT_ERR_IO);
        QT_CHECK(strstr(e.msg, "missing.gguf: cannot open") != NULL);
        QT_EQ_INT(s.count, 0);
    }
    qx_sb_free(&kv);
    fu_rm_rf(dir);
}

int main(void) {
    QT_RUN(test_read_handmade);
    QT_RUN(test_lies);
    QT_RUN(test_names);
    QT_RUN(test_roundtrip_kv);
    QT_RUN(test_roundtrip_models);
    QT_RUN(test_qwen_models);
    QT_RUN(test_stream_writer);
    return qt_finish("test_gguf");
}
