/* qx_safetensors: hand-made files read byte for byte, then every kind of lie in them refused with
   a message naming the file/tensor/reason; Hugging Face config.json for each architecture; round
   trips (single file, directory, shards with an index, tied and untied, F32/F16/BF16) comparing
   names, dtypes, shapes, bytes and config; the streaming writer out of order with conversions;
   no output left behind on failures, no overwrite without force; the RoPE layout conversion. */
#include "quarot.h"
#include "qt.h"
#include "fmt_util.h"
#include "formats/qx_gguf.h"
#include "formats/qx_safetensors.h"

/* A safetensors image: u64 header length, header, data. */
static fu_buf image(const char* header, const void* data, size_t data_len) {
    fu_buf b;
    memset(&b, 0, sizeof b);
    fu_u64(&b, strlen(header));
    fu_str(&b, header);
    fu_put(&b, data, data_len);
    return b;
}

static void set_u64(unsigned char* p, uint64_t v) {
    int k;
    for (k = 0; k < 8; ++k) p[k] = (unsigned char)(v >> (8 * k));
}

static quarot_result read_img(const fu_buf* b, qx_store* s, qx_err* e, int skip) {
    qx_st_read_opts o;
    memset(&o, 0, sizeof o);
    o.skip_unsupported = skip;
    qx_store_init(s);
    e->msg[0] = '\0';
    return qx_st_read_mem(b->p, b->len, "hand.safetensors", s, &o, e);
}

/* data: a [2][3] f32 (0..5), a [4] f16 (1, -2, 0.5, 65504), a [2][2] bf16 (1, 2, -3, 0.25) */
static unsigned char hand_data[24 + 8 + 8];
static const char* hand_header =
    "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"caf\\u00e9\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[32,40]}}";

static void fill_hand_data(void) {
    float f[6] = {0, 1, 2, 3, 4, 5};
    uint16_t h[4] = {0x3c00, 0xc000, 0x3800, 0x7bff};
    uint16_t bf[4] = {0x3f80, 0x4000, 0xc040, 0x3e80};
    memcpy(hand_data, f, 24);
    memcpy(hand_data + 24, h, 8);
    memcpy(hand_data + 32, bf, 8);
}

static void test_read_handmade(void) {
    fu_buf b;
    qx_store s;
    qx_err e;
    quarot_tensor* t;
    float row[4];
    size_t ml;
    const char* meta;
    fill_hand_data();
    b = image(hand_header, hand_data, sizeof hand_data);
    fu_seed("safetensors/valid.safetensors", b.p, b.len);
    QT_OK(read_img(&b, &s, &e, 0));
    QT_EQ_INT(s.count, 3);
    t = qx_store_find(&s, "w");
    QT_CHECK(t && t->dtype == QUAROT_DTYPE_F32 && t->ne[0] == 3 && t->ne[1] == 2 && t->ne[2] == 1);
    if (t) { QT_OK(quarot_tensor_get_row_f32(t, 1, row)); QT_CHECK(row[0] == 3 && row[2] == 5); }
    t = qx_store_find(&s, "h");
    QT_CHECK(t && t->dtype == QUAROT_DTYPE_F16 && t->ne[0] == 4 && t->ne[1] == 1);
    if (t) { QT_OK(quarot_tensor_get_row_f32(t, 0, row)); QT_CHECK(row[0] == 1 && row[1] == -2 && row[2] == 0.5f && row[3] == 65504); }
    t = qx_store_find(&s, "b");
    QT_CHECK(t && t->dtype == QUAROT_DTYPE_BF16 && t->ne[0] == 2 && t->ne[1] == 2);
    if (t) { QT_OK(quarot_tensor_get_row_f32(t, 1, row)); QT_CHECK(row[0] == -3 && row[1] == 0.25f); }
    meta = (const char*)qx_store_get_blob(&s, "safetensors.metadata", &ml);
    QT_CHECK(meta && strcmp(meta, "{\"format\":\"pt\",\"note\":\"caf\xc3\xa9\"}") == 0);
    qx_store_free(&s);
    /* a scalar (shape []) and an empty data section with no tensors are valid too */
    free(b.p);
    {
        float one = 1.0f;
        b = image("{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", &one, 4);
        fu_seed("safetensors/scalar.safetensors", b.p, b.len);
        QT_OK(read_img(&b, &s, &e, 0));
        QT_CHECK(qx_store_find(&s, "s") && qx_store_find(&s, "s")->ne[0] == 1);
        qx_store_free(&s);
        free(b.p);
        b = image("{}", NULL, 0);
        QT_OK(read_img(&b, &s, &e, 0));
        QT_EQ_INT(s.count, 0);
        qx_store_free(&s);
        free(b.p);
    }
}

/* A header with one tensor t: dtype, shape text, offsets text; data of n bytes. */
static fu_buf one(const char* dtype, const char* shape, const char* offs, size_t n) {
    char hdr[512];
    unsigned char data[256];
    memset(data, 0x3c, sizeof data);
    snprintf(hdr, sizeof hdr, "{\"t\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":%s}}", dtype, shape, offs);
    return image(hdr, data, n);
}

static void expect_refusal(fu_buf b, quarot_result code, const char* what, int line) {
    qx_store s;
    qx_err e;
    quarot_result r = read_img(&b, &s, &e, 0);
    if (strcmp(what, "overlap") == 0) fu_seed("safetensors/lie_overlap.safetensors", b.p, b.len);
    if (strcmp(what, "passes the end") == 0) fu_seed("safetensors/lie_header_length.safetensors", b.p, b.len);
    if (strstr(what, "has dtype I64")) fu_seed("safetensors/i64.safetensors", b.p, b.len);
    QT_CHECKF(r == code, "line %d: result %d (%s), expected %d; message: %s", line, (int)r, quarot_result_string(r), (int)code, e.msg);
    if (getenv("QX_SHOW")) printf("    %s\n", e.msg);
    QT_CHECKF(strstr(e.msg, "hand.safetensors") && strstr(e.msg, what), "line %d: message '%s' lacks '%s'", line, e.msg, what);
    QT_EQ_INT(s.count, 0);
    qx_store_free(&s);
    free(b.p);
}
#define REFUSE(b, code, what) expect_refusal(b, code, what, __LINE__)

static void test_lies(void) {
    fu_buf b;
    size_t cut;
    int n_bad = 0;
    fill_hand_data();
    /* truncated at every offset: always refused (the tensors must tile the data exactly) */
    b = image(hand_header, hand_data, sizeof hand_data);
    for (cut = 0; cut < b.len; ++cut) {
        qx_store s;
        qx_err e;
        qx_store_init(&s);
        if (qx_st_read_mem(b.p, cut, "cut", &s, NULL, &e) != QUAROT_OK && e.msg[0]) ++n_bad;
        qx_store_free(&s);
    }
    QT_EQ_INT(n_bad, (int)b.len);
    /* header length lies: huge (u64 -> size_t), beyond the cap, beyond the file */
    set_u64(b.p, UINT64_MAX);
    REFUSE(b, QUAROT_ERR_PARSE, "exceeds the");
    b = image(hand_header, hand_data, sizeof hand_data);
    set_u64(b.p, (uint64_t)1 << 63);
    REFUSE(b, QUAROT_ERR_PARSE, "exceeds the");
    b = image(hand_header, hand_data, sizeof hand_data);
    set_u64(b.p, QX_ST_MAX_HEADER + 1);
    REFUSE(b, QUAROT_ERR_PARSE, "exceeds the");
    b = image(hand_header, hand_data, sizeof hand_data);
    set_u64(b.p, strlen(hand_header) + 41);           /* 41 bytes more than the file holds */
    REFUSE(b, QUAROT_ERR_PARSE, "passes the end");
    b = image(hand_header, hand_data, sizeof hand_data);
    set_u64(b.p, strlen(hand_header) - 1);            /* a byte short: the JSON is cut */
    REFUSE(b, QUAROT_ERR_PARSE, "line 1");
    b = image("[1,2]", NULL, 0);
    REFUSE(b, QUAROT_ERR_PARSE, "'{'");
    b = image("{\"t\":[1]}", NULL, 0);
    REFUSE(b, QUAROT_ERR_PARSE, "\"t\"");
    /* offsets */
    REFUSE(one("F32", "[2]", "[0,16]", 8), QUAROT_ERR_PARSE, "pass the end");
    REFUSE(one("F32", "[2]", "[8,0]", 8), QUAROT_ERR_PARSE, "end before");
    REFUSE(one("F32", "[2]", "[0]", 8), QUAROT_ERR_PARSE, "two non-negative");
    REFUSE(one("F32", "[2]", "[-8,0]", 8), QUAROT_ERR_PARSE, "two non-negative");
    REFUSE(one("F32", "[2]", "[0,8.5]", 8), QUAROT_ERR_PARSE, "two non-negative");
    REFUSE(one("F32", "[2]", "[0,18446744073709551615]", 8), QUAROT_ERR_PARSE, "two non-negative");
    REFUSE(one("F32", "[2]", "[4,12]", 12), QUAROT_ERR_PARSE, "hole");
    REFUSE(one("F32", "[2]", "[0,8]", 12), QUAROT_ERR_PARSE, "cover 8 bytes");
    b = image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", hand_data, 12);
    REFUSE(b, QUAROT_ERR_PARSE, "overlap");
    /* shapes */
    REFUSE(one("F32", "[3]", "[0,8]", 8), QUAROT_ERR_PARSE, "needs 12 bytes");
    REFUSE(one("F16", "[2,3]", "[0,8]", 8), QUAROT_ERR_PARSE, "needs 12 bytes");
    REFUSE(one("F32", "[-2]", "[0,8]", 8), QUAROT_ERR_PARSE, "shape[0]");
    REFUSE(one("F4", "[3]", "[0,1]", 1), QUAROT_ERR_PARSE, "12 bits");
    REFUSE(one("F32", "[4294967296,4294967296,4294967296]", "[0,8]", 8), QUAROT_ERR_OVERFLOW, "overflows");
    REFUSE(one("F32", "[4611686018427387904]", "[0,8]", 8), QUAROT_ERR_OVERFLOW, "overflows");
    REFUSE(one("F32", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
               "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,2]", "[0,8]", 8), QUAROT_ERR_PARSE, "65 dimensions");
    REFUSE(one("F32", "[0,3]", "[0,0]", 0), QUAROT_ERR_UNSUPPORTED, "empty");
    /* dtypes */
    REFUSE(one("Q4", "[2]", "[0,8]", 8), QUAROT_ERR_PARSE, "unknown dtype \"Q4\"");
    REFUSE(one("I64", "[1]", "[0,8]", 8), QUAROT_ERR_UNSUPPORTED_DTYPE, "tensor \"t\" has dtype I64");
    REFUSE(one("F8_E4M3", "[8]", "[0,8]", 8), QUAROT_ERR_UNSUPPORTED_DTYPE, "F8_E4M3");
    /* names and metadata */
    b = image("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", hand_data, 4);
    REFUSE(b, QUAROT_ERR_PARSE, "NUL");
    b = image("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", hand_data, 8);
    REFUSE(b, QUAROT_ERR_PARSE, "duplicate key \"a\"");
    b = image("{\"__metadata__\":{\"n\":1}}", NULL, 0);
    REFUSE(b, QUAROT_ERR_PARSE, "not a string");
    b = image("{\"__metadata__\":[]}", NULL, 0);
    REFUSE(b, QUAROT_ERR_PARSE, "not an object");
    {   /* skipping: an I64 tensor by option, an inv_freq buffer always */
        qx_store s;
        qx_err e;
        b = image("{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                  "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", hand_data, 16);
        QT_ERR(read_img(&b, &s, &e, 0), QUAROT_ERR_UNSUPPORTED_DTYPE);
        qx_store_free(&s);
        QT_OK(read_img(&b, &s, &e, 1));
        QT_CHECK(s.count == 1 && qx_store_find(&s, "y") && !qx_store_find(&s, "x"));
        qx_store_free(&s);
        free(b.p);
        b = image("{\"model.layers.0.self_attn.rotary_emb.inv_freq\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
                  hand_data, 8);
        QT_OK(read_img(&b, &s, &e, 0));
        QT_EQ_INT(s.count, 0);
        qx_store_free(&s);
        free(b.p);
    }
}

/* ---- config.json ---- */

static quarot_result cfg(const char* text, quarot_model_config* c, qx_err* e) {
    memset(c, 0, sizeof *c);
    e->msg[0] = '\0';
    return qx_hf_config_parse(text, strlen(text), "config.json", c, e);
}

/* Qwen2-VL / Qwen2.5-VL config.json: the shape of Qwen2-VL-2B-Instruct's (top-level keys,
   rope_scaling.mrope_section), the newest transformers' (text_config with rope_parameters, tied by
   the text config), and the refusals naming the key. */
static void test_config_vl(void) {
    quarot_model_config c;
    qx_err e;
    QT_OK(cfg("{\"architectures\":[\"Qwen2VLForConditionalGeneration\"],\"model_type\":\"qwen2_vl\",\"hidden_size\":1536,"
              "\"intermediate_size\":8960,\"num_hidden_layers\":28,\"num_attention_heads\":12,\"num_key_value_heads\":2,"
              "\"vocab_size\":151936,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"tie_word_embeddings\":true,"
              "\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[16,24,24]},"
              "\"vision_config\":{\"depth\":32,\"embed_dim\":1280,\"hidden_size\":1536,\"in_chans\":3}}", &c, &e));
    QT_CHECK(strcmp(c.arch, "qwen2vl") == 0 && c.hidden == 1536 && c.head_dim == 128 && c.tied_embeddings && c.attn_qkv_bias &&
             !c.attn_out_bias && c.rope_theta == 1e6f);
    QT_OK(cfg("{\"architectures\":[\"Qwen2_5_VLForConditionalGeneration\"],\"tie_word_embeddings\":false,"
              "\"text_config\":{\"hidden_size\":2048,\"intermediate_size\":11008,\"num_hidden_layers\":36,"
              "\"num_attention_heads\":16,\"num_key_value_heads\":2,\"vocab_size\":151936,\"tie_word_embeddings\":true,"
              "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1000000.0,\"mrope_section\":[16,24,24]}},"
              "\"vision_config\":{\"hidden_size\":1280,\"out_hidden_size\":2048}}", &c, &e));
    QT_CHECK(strcmp(c.arch, "qwen2vl") == 0 && c.hidden == 2048 && c.n_layers == 36 && c.tied_embeddings && c.rope_theta == 1e6f);
    QT_ERR(cfg("{\"architectures\":[\"Qwen2VLForConditionalGeneration\"],\"hidden_size\":1536,\"intermediate_size\":8960,"
               "\"num_hidden_layers\":28,\"num_attention_heads\":12,\"vocab_size\":151936}", &c, &e), QUAROT_ERR_PARSE);
    QT_CHECKF(strstr(e.msg, "rope_scaling.mrope_section"), "%s", e.msg);
    QT_ERR(cfg("{\"architectures\":[\"Qwen2VLForConditionalGeneration\"],\"hidden_size\":1536,\"intermediate_size\":8960,"
               "\"num_hidden_layers\":28,\"num_attention_heads\":12,\"vocab_size\":151936,\"mrope_section\":[16,24,0]}", &c, &e),
           QUAROT_ERR_PARSE);
    QT_CHECKF(strstr(e.msg, "mrope_section[2] is not a positive integer"), "%s", e.msg);
}

static void test_config(void) {
    quarot_model_config c;
    qx_err e;
    QT_OK(cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":4096,\"intermediate_size\":14336,"
              "\"num_hidden_layers\":32,\"num_attention_heads\":32,\"num_key_value_heads\":8,\"vocab_size\":128256,"
              "\"max_position_embeddings\":131072,\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,"
              "\"tie_word_embeddings\":false,\"hidden_act\":\"silu\",\"attention_bias\":false,"
              "\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"llama3\"}}", &c, &e));
    QT_CHECK(strcmp(c.arch, "llama") == 0 && c.hidden == 4096 && c.intermediate == 14336 && c.n_layers == 32);
    QT_CHECK(c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 128 && c.vocab == 128256 && c.max_seq == 131072);
    QT_CHECK(c.norm_eps == 1e-5f && c.rope_theta == 500000.0f && !c.tied_embeddings && c.act == QUAROT_ACT_SILU);
    QT_CHECK(c.norm == QUAROT_NORM_RMS && c.mlp == QUAROT_MLP_GATED && !c.attn_qkv_bias && !c.rope_interleaved);
    /* defaults: kv heads, eps 1e-6, theta 10000, untied; Mistral maps to llama; explicit head_dim */
    QT_OK(cfg("{\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":5120,\"intermediate_size\":14336,"
              "\"num_hidden_layers\":40,\"num_attention_heads\":32,\"head_dim\":128,\"vocab_size\":131072,\"head_dim\":128}",
              &c, &e) == QUAROT_ERR_PARSE ? QUAROT_OK : QUAROT_ERR_INTERNAL);      /* duplicate key refused */
    QT_OK(cfg("{\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":5120,\"intermediate_size\":14336,"
              "\"num_hidden_layers\":40,\"num_attention_heads\":32,\"head_dim\":128,\"vocab_size\":131072}", &c, &e));
    QT_CHECK(strcmp(c.arch, "llama") == 0 && c.head_dim == 128 && c.n_kv_heads == 32 && c.norm_eps == 1e-6f && c.rope_theta == 10000.0f);
    /* Qwen2: q/k/v biases; Qwen3: q/k norms, rope_theta inside rope_parameters */
    QT_OK(cfg("{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":896,\"intermediate_size\":4864,"
              "\"num_hidden_layers\":24,\"num_attention_heads\":14,\"num_key_value_heads\":2,\"vocab_size\":151936,"
              "\"tie_word_embeddings\":true,\"rope_theta\":1000000.0}", &c, &e));
    QT_CHECK(strcmp(c.arch, "qwen2") == 0 && c.attn_qkv_bias && !c.attn_out_bias && c.tied_embeddings && c.head_dim == 64);
    QT_OK(cfg("{\"model_type\":\"qwen3\",\"hidden_size\":1024,\"intermediate_size\":3072,\"num_hidden_layers\":28,"
              "\"num_attention_heads\":16,\"num_key_value_heads\":8,\"head_dim\":128,\"vocab_size\":151936,"
              "\"rope_parameters\":{\"rope_theta\":1000000}}", &c, &e));
    QT_CHECK(strcmp(c.arch, "qwen3") == 0 && c.qk_norm && !c.attn_qkv_bias && c.head_dim == 128 && c.rope_theta == 1e6f);
    /* OPT: LayerNorm family */
    QT_OK(cfg("{\"architectures\":[\"OPTForCausalLM\"],\"hidden_size\":768,\"ffn_dim\":3072,\"num_hidden_layers\":12,"
              "\"num_attention_heads\":12,\"vocab_size\":50272,\"word_embed_proj_dim\":768,\"do_layer_norm_before\":true,"
              "\"activation_function\":\"relu\",\"max_position_embeddings\":2048}", &c, &e));
    QT_CHECK(strcmp(c.arch, "opt") == 0 && c.norm == QUAROT_NORM_LAYER && c.mlp == QUAROT_MLP_PLAIN && c.act == QUAROT_ACT_RELU);
    QT_CHECK(c.attn_qkv_bias && c.attn_out_bias && c.mlp_bias && c.tied_embeddings && c.intermediate == 3072 && c.head_dim == 64);
    /* refusals, each naming what is wrong */
    QT_ERR(cfg("{\"architectures\":[\"OPTForCausalLM\"],\"hidden_size\":1024,\"ffn_dim\":4096,\"num_hidden_layers\":24,"
               "\"num_attention_heads\":16,\"vocab_size\":50272,\"word_embed_proj_dim\":512}", &c, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "word_embed_proj_dim 512") != NULL);
    QT_ERR(cfg("{\"architectures\":[\"OPTForCausalLM\"],\"hidden_size\":1024,\"ffn_dim\":4096,\"num_hidden_layers\":24,"
               "\"num_attention_heads\":16,\"vocab_size\":50272,\"do_layer_norm_before\":false}", &c, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "do_layer_norm_before") != NULL);
    QT_ERR(cfg("{\"architectures\":[\"GPT2LMHeadModel\"],\"n_embd\":768}", &c, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "config.json: architecture \"GPT2LMHeadModel\" is not supported") != NULL);
    /* Gemma 2 / 3: refused with the reason, by class or by model_type */
    QT_ERR(cfg("{\"architectures\":[\"Gemma2ForCausalLM\"],\"hidden_size\":8}", &c, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "architecture \"Gemma2ForCausalLM\" is not supported: its post_attention_layernorm") != NULL);
    QT_CHECK(strstr(e.msg, "R1 would not be exact") && strstr(e.msg, "not offered"));
    QT_ERR(cfg("{\"model_type\":\"gemma3_text\",\"hidden_size\":8}", &c, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "R1 would not be exact") != NULL);
    /* Phi-3: fused projections, plain RoPE only */
#define QX_PHI3 "{\"architectures\":[\"Phi3ForCausalLM\"],\"hidden_size\":96,\"intermediate_size\":160,\"num_hidden_layers\":2," \
                "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":32,\"max_position_embeddings\":4096"
    QT_ERR(cfg(QX_PHI3 ",\"rope_scaling\":null,\"partial_rotary_factor\":1.0}", &c, &e), QUAROT_OK);
    QT_CHECK(strcmp(c.arch, "phi3") == 0 && c.head_dim == 24 && c.n_kv_heads == 2 && !c.attn_qkv_bias && !c.tied_embeddings);
    QT_ERR(cfg(QX_PHI3 ",\"partial_rotary_factor\":0.75}", &c, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "partial_rotary_factor 0.75") != NULL);
    QT_ERR(cfg(QX_PHI3 ",\"rope_scaling\":{\"type\":\"longrope\",\"long_factor\":[1]}}", &c, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "rope_scaling \"longrope\" is not supported") != NULL);
#undef QX_PHI3
    QT_ERR(cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"intermediate_size\":8,\"num_hidden_layers\":1,"
               "\"num_attention_heads\":1,\"vocab_size\":8}", &c, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "\"hidden_size\" is missing") != NULL);
    QT_ERR(cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8.5,\"intermediate_size\":8,\"num_hidden_layers\":1,"
               "\"num_attention_heads\":1,\"vocab_size\":8}", &c, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "\"hidden_size\" must be an integer") != NULL);
    QT_ERR(cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
               "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"vocab_size\":8}", &c, &e), QUAROT_ERR_PARSE);
    QT_ERR(cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
               "\"num_attention_heads\":2,\"vocab_size\":8,\"hidden_act\":\"mish\"}", &c, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "mish") != NULL);
    QT_ERR(cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
               "\"num_attention_heads\":2,\"vocab_size\":8,\"rms_norm_eps\":-1}", &c, &e), QUAROT_ERR_PARSE);
    QT_ERR(cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,", &c, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "config.json: line 1") != NULL);
}

/* A generated config.json parses back to the same config, for every architecture. */
static void test_config_generated(void) {
    const char* archs[4] = {"llama", "qwen2", "qwen3", "opt"};
    quarot_dtype dts[1] = {QUAROT_DTYPE_F32};
    int k, tied;
    for (k = 0; k < 4; ++k)
        for (tied = 0; tied <= 1; ++tied) {
            qx_store s;
            qx_sb b;
            qx_err e;
            quarot_model_config c;
            char msg[200];
            qx_store_init(&s);
            fu_make_model(&s, archs[k], tied, dts, 1);
            memset(&b, 0, sizeof b);
            QT_OK(qx_hf_config_write(&s, &b, &e));
            if (k == 0 && !tied) fu_seed("json/config_llama.json", b.p, b.len);
            if (k == 3 && tied) fu_seed("json/config_opt.json", b.p, b.len);
            QT_OK(qx_hf_check_tensors(&s, "made", &e));
            QT_OK(qx_hf_config_parse(b.p, b.len, "gen", &c, &e));
            QT_CHECKF(fu_same_config(&s.config, &c, msg, sizeof msg), "%s tied=%d: %s\n%s", archs[k], tied, msg, b.p);
            qx_sb_free(&b);
            qx_store_free(&s);
        }
}

/* ---- round trips through files ---- */

static void roundtrip(const char* arch, int tied, const quarot_dtype* dts, int n_dts, uint64_t shard_bytes, int expect_files) {
    const char* dir = fu_tmpdir();
    char out[200], msg[300];
    qx_store s, r;
    qx_err e;
    qx_st_save_opts so;
    qx_st_read_opts ro;
    int k;
    if (!dir) { QT_CHECK(dir != NULL); return; }
    snprintf(out, sizeof out, "%s/model", dir);
    qx_store_init(&s);
    qx_store_init(&r);
    fu_make_model(&s, arch, tied, dts, n_dts);
    memset(&so, 0, sizeof so);
    so.shard_bytes = shard_bytes;
    QT_OK(qx_st_save(&s, out, &so, &e));
    if (expect_files < 0) {
        /* shards: at least total / shard_bytes of them, each holding at most shard_bytes of data
           (no tensor here is larger), all named by the index */
        uint64_t total = 0, hl;
        int64_t i, n_sh;
        char* ix;
        for (i = 0; i < s.count; ++i) total += quarot_tensor_nbytes(&s.items[i].t);
        n_sh = fu_count_entries(out) - 2;
        QT_CHECKF(n_sh >= (int64_t)((total + shard_bytes - 1) / shard_bytes), "%lld shards for %llu bytes", (long long)n_sh, (unsigned long long)total);
        snprintf(msg, sizeof msg, "%s/model.safetensors.index.json", out);
        ix = qt_read_file(msg, NULL);
        QT_CHECK(ix && strstr(ix, "\"weight_map\"") && strstr(ix, "\"total_size\""));
        for (i = 1; i <= n_sh; ++i) {
            char* f;
            size_t n;
            snprintf(msg, sizeof msg, "%s/model-%05lld-of-%05lld.safetensors", out, (long long)i, (long long)n_sh);
            f = qt_read_file(msg, &n);
            QT_CHECKF(f != NULL, "%s missing", msg);
            if (!f) continue;
            hl = (uint64_t)(unsigned char)f[0] | (uint64_t)(unsigned char)f[1] << 8 | (uint64_t)(unsigned char)f[2] << 16;
            QT_CHECK(hl % 8 == 0 && n - 8 - hl <= shard_bytes && n - 8 - hl > 0);
            snprintf(msg, sizeof msg, "model-%05lld-of-%05lld.safetensors", (long long)i, (long long)n_sh);
            QT_CHECK(ix && strstr(ix, msg));
            free(f);
        }
        free(ix);
        expect_files = (int)n_sh + 2;
    }
    QT_EQ_INT(fu_count_entries(out), expect_files);
    QT_CHECK(fu_exists(out, "config.json"));
    QT_CHECK(fu_exists(out, shard_bytes && expect_files > 2 ? "model.safetensors.index.json" : "model.safetensors"));
    for (k = 0; k < 2; ++k) {            /* zero-copy views, then copies */
        memset(&ro, 0, sizeof ro);
        ro.copy = k;
        QT_OK(qx_st_load(out, &r, &ro, &e));
        QT_CHECKF(fu_same_tensors(&s, &r, msg, sizeof msg), "%s tied=%d: %s", arch, tied, msg);
        QT_CHECKF(fu_same_config(&s.config, &r.config, msg, sizeof msg), "%s tied=%d: %s", arch, tied, msg);
        QT_CHECK(k == 1 || r.n_cleanups > 0);          /* views keep their mappings */
        qx_store_free(&r);
    }
    /* saving again without force is refused and changes nothing; with force it works */
    QT_ERR(qx_st_save(&s, out, &so, &e), QUAROT_ERR_IO);
    QT_CHECK(strstr(e.msg, "exists already") != NULL);
    QT_EQ_INT(fu_count_entries(out), expect_files);
    so.force = 1;
    QT_OK(qx_st_save(&s, out, &so, &e));
    QT_EQ_INT(fu_count_entries(out), expect_files);
    qx_store_free(&s);
    fu_rm_rf(dir);
}

static void test_roundtrip(void) {
    quarot_dtype f32[1] = {QUAROT_DTYPE_F32}, mix[3] = {QUAROT_DTYPE_F32, QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    quarot_dtype bf16[1] = {QUAROT_DTYPE_BF16};
    roundtrip("llama", 0, mix, 3, 0, 2);
    roundtrip("llama", 1, f32, 1, 0, 2);
    roundtrip("qwen2", 1, bf16, 1, 0, 2);
    roundtrip("qwen3", 0, mix, 3, 0, 2);
    roundtrip("opt", 1, mix, 3, 0, 2);
    roundtrip("opt", 0, f32, 1, 0, 2);
    /* shards: ~10 KB of f32 tensors in 2 KB shards -> several shards + index + config */
    roundtrip("llama", 0, f32, 1, 2048, -1);
    roundtrip("qwen2", 1, mix, 3, 1600, -1);
    roundtrip("llama", 0, f32, 1, 1 << 20, 2);       /* everything fits one shard: model.safetensors */
}

/* Shapes ne[4] does not say by itself (rank 5 and 6, a scalar, outer sizes of 1) read into the store
   with their bytes unchanged and written back with the same shape; GGUF refuses rank 5 by name. */
static void test_any_rank(void) {
    static const char* const shapes[5] = {"[3,2,1,2,2]", "[2,1,1,3,2,2]", "[]", "[1,6]", "[6,1]"};
    static const int ranks[5] = {5, 6, 0, 2, 2};
    const char* dir = fu_tmpdir();
    int k;
    if (!dir) return;
    for (k = 0; k < 5; ++k) {
        qx_store s, r;
        qx_err e;
        char path[256], want[64];
        const quarot_tensor* t;
        int rank = -1;
        const int64_t* shape = NULL;
        size_t n = 0, bytes = k == 2 ? 4 : k < 2 ? 24 * 4 : 6 * 4;
        unsigned char* file;
        fu_buf b = one("F32", shapes[k], k == 2 ? "[0,4]" : k < 2 ? "[0,96]" : "[0,24]", bytes);
        QT_OK(read_img(&b, &s, &e, 0));
        free(b.p);
        t = qx_store_find(&s, "t");
        QT_CHECK(t != NULL && quarot_tensor_nbytes(t) == bytes);
        /* recorded where ne[] does not say it ([6,1] is ne {1, 6}: rank 2 as it stands) */
        QT_CHECKF(t && qx_store_get_shape(&s, "t", t, &rank, &shape) == (k < 4) && (k == 4 || rank == ranks[k]),
                  "%s: rank %d", shapes[k], rank);
        snprintf(path, sizeof path, "%s/rank%d.safetensors", dir, k);
        QT_OK(qx_st_save(&s, path, NULL, &e));
        file = (unsigned char*)qt_read_file(path, &n);
        snprintf(want, sizeof want, "\"shape\":%s", shapes[k]);
        QT_CHECKF(file && n > 8 && strstr((const char*)file + 8, want) != NULL, "%s: written without %s", shapes[k], want);
        free(file);
        qx_store_init(&r);
        QT_OK(qx_st_load(path, &r, NULL, &e));
        QT_CHECK(qx_store_find(&r, "t") && memcmp(qx_store_find(&r, "t")->data, t->data, bytes) == 0);
        if (k == 0) {   /* GGUF holds 4 dimensions at most: refused by name */
            qx_tensor_plan* pl = qx_store_plan(&s, QUAROT_DTYPE_DEFAULT, 0);
            qx_gguf_writer* w = NULL;
            snprintf(path, sizeof path, "%s/rank5.gguf", dir);
            QT_ERR(qx_gguf_writer_begin(&w, path, pl, 1, NULL, 0, NULL, &e), QUAROT_ERR_UNSUPPORTED);
            QT_CHECKF(strstr(e.msg, "\"t\" has 5 dimensions; GGUF holds at most 4"), "gguf: %s", e.msg);
            free(pl);
        }
        qx_store_free(&r);
        qx_store_free(&s);
    }
}

static void test_single_file(void) {
    const char* dir = fu_tmpdir();
    char path[256], cfgp[256], msg[256];
    quarot_dtype mix[3] = {QUAROT_DTYPE_BF16, QUAROT_DTYPE_F32, QUAROT_DTYPE_F16};
    qx_store s, r;
    qx_err e;
    qx_sb b;
    int64_t i;
    if (!dir) return;
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
    qx_store_init(&s);
    qx_store_init(&r);
    fu_make_model(&s, "llama", 0, mix, 3);
    QT_OK(qx_store_set_blob(&s, "safetensors.metadata", "{\"format\":\"pt\",\"k\":\"v\\n\"}", 26));
    QT_OK(qx_st_save(&s, path, NULL, &e));
    QT_EQ_INT(fu_count_entries(dir), 1);                    /* the file only, no config */
    QT_OK(qx_st_load(path, &r, NULL, &e));                  /* tensors only: no config beside it */
    QT_CHECK(fu_same_tensors(&s, &r, msg, sizeof msg));
    QT_CHECK(r.config.arch[0] == '\0');
    QT_CHECK(strcmp((const char*)qx_store_get_blob(&r, "safetensors.metadata", NULL), "{\"format\":\"pt\",\"k\":\"v\\n\"}") == 0);
    {   /* every tensor aligned to its element size (larger elements first) and views used */
        for (i = 0; i < r.count; ++i) QT_CHECK((uintptr_t)r.items[i].t.data % quarot_dtype_size(r.items[i].t.dtype) == 0 && !r.items[i].owned);
    }
    qx_store_free(&r);
    /* a config.json beside the file is used; names without "model." get it */
    memset(&b, 0, sizeof b);
    QT_OK(qx_hf_config_write(&s, &b, &e));
    QT_CHECK(qt_write_file(cfgp, b.p, b.len));
    qx_sb_free(&b);
    QT_OK(qx_st_load(path, &r, NULL, &e));
    QT_CHECK(fu_same_config(&s.config, &r.config, msg, sizeof msg));
    qx_store_free(&r);
    {
        qx_store u;
        qx_store_init(&u);
        for (i = 0; i < s.count; ++i) {
            const char* n = s.items[i].name;
            if (strncmp(n, "model.", 6) == 0) n += 6;
            qx_store_add(&u, n, s.items[i].t.dtype, QUAROT_MAX_DIMS, s.items[i].t.ne, s.items[i].t.data, NULL);
        }
        QT_OK(qx_st_save(&u, path, NULL, &e) == QUAROT_ERR_IO ? QUAROT_OK : QUAROT_ERR_INTERNAL);   /* exists */
        {
            qx_st_save_opts so;
            memset(&so, 0, sizeof so);
            so.force = 1;
            QT_OK(qx_st_save(&u, path, &so, &e));
        }
        QT_CHECK(qx_store_find(&u, "layers.0.mlp.up_proj.weight") != NULL);
        QT_OK(qx_st_load(path, &r, NULL, &e));
        QT_CHECK(qx_store_find(&r, "model.layers.0.mlp.up_proj.weight") && qx_store_find(&r, "model.embed_tokens.weight"));
        QT_CHECK(fu_same_tensors(&s, &r, msg, sizeof msg));
        qx_store_free(&r);
        qx_store_free(&u);
    }
    qx_store_free(&s);
    fu_rm_rf(dir);
}

/* Tied / untied consistency between config.json and the tensors. */
static void test_tied(void) {
    const char* dir = fu_tmpdir();
    char out[200], msg[256];
    quarot_dtype f32[1] = {QUAROT_DTYPE_F32};
    qx_store s, r;
    qx_err e;
    qx_st_save_opts so;
    char* text;
    if (!dir) return;
    snprintf(out, sizeof out, "%s/m", dir);
    memset(&so, 0, sizeof so);
    so.force = 1;
    qx_store_init(&s);
    qx_store_init(&r);
    fu_make_model(&s, "llama", 1, f32, 1);
    QT_OK(qx_st_save(&s, out, &so, &e));
    snprintf(msg, sizeof msg, "%s/config.json", out);
    text = qt_read_file(msg, NULL);
    QT_CHECK(text && strstr(text, "\"tie_word_embeddings\": true"));
    free(text);
    /* the store gains an lm_head (untying, as rotation does): config.json says false, read back untied */
    fu_add(&s, "lm_head.weight", QUAROT_DTYPE_F32, s.config.hidden, s.config.vocab, 0);
    QT_OK(qx_st_save(&s, out, &so, &e));
    text = qt_read_file(msg, NULL);
    QT_CHECK(text && strstr(text, "\"tie_word_embeddings\": false"));
    QT_OK(qx_st_load(out, &r, NULL, &e));
    QT_CHECK(!r.config.tied_embeddings && qx_store_find(&r, "lm_head.weight"));
    /* a read config (blob) is copied verbatim except for that key */
    qx_store_remove(&r, "lm_head.weight");
    r.config.tied_embeddings = 1;
    QT_OK(qx_st_save(&r, out, &so, &e));
    free(text);
    text = qt_read_file(msg, NULL);
    QT_CHECK(text && strstr(text, "\"tie_word_embeddings\": true") && strstr(text, "\"torch_dtype\": \"float32\""));
    qx_store_free(&r);
    QT_OK(qx_st_load(out, &r, NULL, &e));
    QT_CHECK(r.config.tied_embeddings && !qx_store_find(&r, "lm_head.weight"));
    qx_store_free(&r);
    /* config says untied but there is no lm_head: refused, naming the tensor */
    {
        char* fixed = text ? (char*)malloc(strlen(text) + 8) : NULL;
        char* at = text ? strstr(text, "\"tie_word_embeddings\": true") : NULL;
        if (fixed && at) {
            memcpy(fixed, text, (size_t)(at - text));
            strcpy(fixed + (at - text), "\"tie_word_embeddings\": false");
            strcat(fixed, at + strlen("\"tie_word_embeddings\": true"));
            QT_CHECK(qt_write_file(msg, fixed, strlen(fixed)));
            QT_ERR(qx_st_load(out, &r, NULL, &e), QUAROT_ERR_NOT_FOUND);
            QT_CHECK(strstr(e.msg, "\"lm_head.weight\" is missing") != NULL);
            QT_EQ_INT(r.count, 0);
        }
        free(fixed);
    }
    qx_store_free(&s);
    free(text);
    fu_rm_rf(dir);
}

/* config.json lies in a directory: unknown architecture, missing file, no_config. */
static void test_dir_config(void) {
    const char* dir = fu_tmpdir();
    char out[200], cp[260];
    quarot_dtype f32[1] = {QUAROT_DTYPE_F32};
    qx_store s, r;
    qx_err e;
    qx_st_read_opts ro;
    const char* gpt2 = "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 16}";
    if (!dir) return;
    snprintf(out, sizeof out, "%s/m", dir);
    snprintf(cp, sizeof cp, "%s/config.json", out);
    qx_store_init(&s);
    qx_store_init(&r);
    fu_make_model(&s, "qwen3", 0, f32, 1);
    QT_OK(qx_st_save(&s, out, NULL, &e));
    QT_CHECK(qt_write_file(cp, gpt2, strlen(gpt2)));
    QT_ERR(qx_st_load(out, &r, NULL, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "m/config.json: architecture \"GPT2LMHeadModel\" is not supported") != NULL);
    QT_CHECK(r.count == 0 && r.n_blobs == 0 && r.n_cleanups == 0);
    QT_CHECK(remove(cp) == 0);
    QT_ERR(qx_st_load(out, &r, NULL, &e), QUAROT_ERR_IO);
    QT_CHECK(strstr(e.msg, "no config.json") != NULL);
    memset(&ro, 0, sizeof ro);
    ro.no_config = 1;
    QT_OK(qx_st_load(out, &r, &ro, &e));
    QT_CHECK(r.count == s.count && r.config.arch[0] == '\0');
    /* loading into a store that is not empty is refused */
    QT_ERR(qx_st_load(out, &r, &ro, &e), QUAROT_ERR_INVALID_ARGUMENT);
    qx_store_free(&r);
    qx_store_free(&s);
    fu_rm_rf(dir);
}

/* Index lies: wrong shard, unlisted tensor, missing tensor, path tricks. */
static void test_index_lies(void) {
    const char* dir = fu_tmpdir();
    char out[200], ip[300];
    quarot_dtype f32[1] = {QUAROT_DTYPE_F32};
    qx_store s, r;
    qx_err e;
    qx_st_save_opts so;
    char* good;
    size_t n;
    static struct { const char* from; const char* to; const char* what; } lies[] = {
        {NULL, NULL, "the index lists it in"},      /* filled in: model.norm.weight in another shard */
        {"\"model.norm.weight\": \"model-000", "\"model.norm.weightX\": \"model-000", "not listed"},
        {"\"weight_map\": {", NULL, "does not hold it"},   /* filled in: an extra entry */
        {"\"model.norm.weight\": \"model-000", "\"model.norm.weight\": \"../model-000", "plain file"},
        {"\"weight_map\"", "\"weight_mop\"", "weight_map"},
    };
    char from0[80], to0[80], to2[120];
    size_t k;
    if (!dir) return;
    snprintf(out, sizeof out, "%s/m", dir);
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", out);
    memset(&so, 0, sizeof so);
    so.shard_bytes = 2048;
    qx_store_init(&s);
    qx_store_init(&r);
    fu_make_model(&s, "llama", 0, f32, 1);
    QT_OK(qx_st_save(&s, out, &so, &e));
    good = qt_read_file(ip, &n);
    QT_CHECK(good && strstr(good, "\"model.norm.weight\": \"model-000") && strstr(good, "model-00001-of-"));
    if (good && strstr(good, "\"model.norm.weight\": \"model-000")) {
        const char* at = strstr(good, "\"model.norm.weight\": \"model-000") + 28;   /* the shard number */
        int sh = atoi(at);
        snprintf(from0, sizeof from0, "\"model.norm.weight\": \"model-%05d", sh);
        snprintf(to0, sizeof to0, "\"model.norm.weight\": \"model-%05d", sh == 1 ? 2 : 1);
        lies[0].from = from0;
        lies[0].to = to0;
        snprintf(to2, sizeof to2, "\"weight_map\": {\"extra\": \"%.32s\",", strstr(good, "model-00001-of-"));
        lies[2].to = to2;
    }
    for (k = 0; good && lies[0].from && k < sizeof lies / sizeof lies[0]; ++k) {
        char* bad = (char*)malloc(n + 200);
        char* at = strstr(good, lies[k].from);
        QT_CHECKF(at != NULL, "lie %zu: pattern not found", k);
        if (!at) { free(bad); continue; }
        memcpy(bad, good, (size_t)(at - good));
        strcpy(bad + (at - good), lies[k].to);
        strcat(bad, at + strlen(lies[k].from));
        qt_write_file(ip, bad, strlen(bad));
        QT_CHECK(qx_st_load(out, &r, NULL, &e) != QUAROT_OK);
        QT_CHECKF(strstr(e.msg, lies[k].what) != NULL, "lie %zu: '%s' lacks '%s'", k, e.msg, lies[k].what);
        QT_EQ_INT(r.count, 0);
        free(bad);
    }
    /* a shard that disagrees with the config: k_proj of the wrong shape */
    if (good) qt_write_file(ip, good, n);
    QT_OK(qx_st_load(out, &r, NULL, &e));
    qx_store_free(&r);
    free(good);
    qx_store_remove(&s, "model.layers.1.self_attn.k_proj.weight");
    fu_add(&s, "model.layers.1.self_attn.k_proj.weight", QUAROT_DTYPE_F32, 16, 12, 0);
    so.force = 1;
    so.shard_bytes = 0;
    QT_OK(qx_st_save(&s, out, &so, &e));
    QT_CHECK(!fu_exists(out, "model.safetensors.index.json"));   /* the stale index went away */
    QT_ERR(qx_st_load(out, &r, NULL, &e), QUAROT_ERR_SHAPE_MISMATCH);
    QT_CHECK(strstr(e.msg, "\"model.layers.1.self_attn.k_proj.weight\" has shape [1, 1, 12, 16]") && strstr(e.msg, "implies [8, 16]"));
    /* a layer beyond the config */
    qx_store_remove(&s, "model.layers.1.self_attn.k_proj.weight");
    fu_add(&s, "model.layers.1.self_attn.k_proj.weight", QUAROT_DTYPE_F32, 16, 8, 0);
    fu_add(&s, "model.layers.2.mlp.up_proj.weight", QUAROT_DTYPE_F32, 16, 24, 0);
    QT_OK(qx_st_save(&s, out, &so, &e));
    QT_ERR(qx_st_load(out, &r, NULL, &e), QUAROT_ERR_SHAPE_MISMATCH);
    QT_CHECK(strstr(e.msg, "outside the config's 2 layers") != NULL);
    qx_store_free(&s);
    fu_rm_rf(dir);
}

/* The plan/stream/finish writer: out of order, conversions, strided input, failures. */
static void test_stream_writer(void) {
    const char* dir = fu_tmpdir();
    char out[256], msg[256];
    qx_tensor_plan plan[4];
    qx_st_writer* w = NULL;
    qx_st_write_opts wo;
    qx_store r;
    qx_err e;
    float a[6 * 5], bvec[7], big[2 * 3 * 4];
    quarot_tensor ta, tb, tc, tstr;
    int64_t ne_a[2] = {5, 6}, ne_b[1] = {7}, ne_c[3] = {4, 3, 2}, ne_s[2] = {5, 3};
    int k;
    if (!dir) return;
    snprintf(out, sizeof out, "%s/s.safetensors", dir);
    for (k = 0; k < 30; ++k) a[k] = (float)(k * 0.37 - 4.1);
    for (k = 0; k < 7; ++k) bvec[k] = (float)(1.0 / (k + 1));
    for (k = 0; k < 24; ++k) big[k] = (float)k;
    quarot_tensor_init(&ta, a, QUAROT_DTYPE_F32, 2, ne_a);
    quarot_tensor_init(&tb, bvec, QUAROT_DTYPE_F32, 1, ne_b);
    quarot_tensor_init(&tc, big, QUAROT_DTYPE_F32, 3, ne_c);
    /* rows 0, 2, 4 of a: a strided view */
    tstr = ta;
    tstr.ne[1] = 3;
    tstr.nb[1] = 2 * ta.nb[1];
    (void)ne_s;
    memset(plan, 0, sizeof plan);
    plan[0].name = "a"; plan[0].dtype = QUAROT_DTYPE_F32; plan[0].n_dims = 2; plan[0].ne[0] = 5; plan[0].ne[1] = 6;
    plan[1].name = "b16"; plan[1].dtype = QUAROT_DTYPE_F16; plan[1].n_dims = 1; plan[1].ne[0] = 7;
    plan[2].name = "c"; plan[2].dtype = QUAROT_DTYPE_BF16; plan[2].n_dims = 3; plan[2].ne[0] = 4; plan[2].ne[1] = 3; plan[2].ne[2] = 2;
    plan[3].name = "even_rows"; plan[3].dtype = QUAROT_DTYPE_F64; plan[3].n_dims = 2; plan[3].ne[0] = 5; plan[3].ne[1] = 3;
    memset(&wo, 0, sizeof wo);
    QT_OK(qx_st_writer_begin(&w, out, plan, 4, &wo, &e));
    QT_EQ_INT(fu_count_entries(dir), 1);                        /* only the hidden temporary */
    QT_CHECK(!fu_exists(out, NULL));
    QT_OK(qx_st_writer_put(w, "even_rows", &tstr, &e));
    QT_OK(qx_st_writer_put(w, "c", &tc, &e));
    QT_ERR(qx_st_writer_put(w, "c", &tc, &e), QUAROT_ERR_STATE);
    QT_ERR(qx_st_writer_put(w, "a", &tb, &e), QUAROT_ERR_SHAPE_MISMATCH);
    QT_ERR(qx_st_writer_put(w, "zz", &tb, &e), QUAROT_ERR_NOT_FOUND);
    QT_OK(qx_st_writer_put(w, "b16", &tb, &e));
    QT_OK(qx_st_writer_put(w, "a", &ta, &e));
    QT_OK(qx_st_writer_finish(w, &e));
    QT_EQ_INT(fu_count_entries(dir), 1);
    qx_store_init(&r);
    QT_OK(qx_st_load(out, &r, NULL, &e));
    {
        quarot_tensor* t = qx_store_find(&r, "a");
        float row[8];
        double drow[8];
        uint16_t h[7];
        QT_CHECK(t && t->dtype == QUAROT_DTYPE_F32 && memcmp(t->data, a, sizeof a) == 0);
        t = qx_store_find(&r, "b16");
        quarot_f32_to_f16(bvec, h, 7);                          /* independent rounding */
        QT_CHECK(t && t->dtype == QUAROT_DTYPE_F16 && memcmp(t->data, h, sizeof h) == 0);
        t = qx_store_find(&r, "c");
        QT_CHECK(t && t->dtype == QUAROT_DTYPE_BF16 && t->ne[0] == 4 && t->ne[1] == 3 && t->ne[2] == 2);
        if (t) { QT_OK(quarot_tensor_get_row_f32(t, 5, row)); QT_CHECK(row[0] == 20 && row[3] == 23); }
        t = qx_store_find(&r, "even_rows");
        QT_CHECK(t && t->dtype == QUAROT_DTYPE_F64 && t->ne[1] == 3);
        if (t) { QT_OK(quarot_tensor_get_row_f64(t, 2, drow)); QT_CHECK(drow[0] == (double)a[20] && drow[4] == (double)a[24]); }
    }
    qx_store_free(&r);
    /* failures leave nothing behind: a missing tensor at finish, an abort, a duplicate plan */
    snprintf(out, sizeof out, "%s/t.safetensors", dir);
    QT_OK(qx_st_writer_begin(&w, out, plan, 4, &wo, &e));
    QT_OK(qx_st_writer_put(w, "a", &ta, &e));
    QT_ERR(qx_st_writer_finish(w, &e), QUAROT_ERR_STATE);
    QT_CHECK(strstr(e.msg, "planned but never written") != NULL);
    QT_EQ_INT(fu_count_entries(dir), 1);
    QT_OK(qx_st_writer_begin(&w, out, plan, 4, &wo, &e));
    qx_st_writer_abort(w);
    QT_EQ_INT(fu_count_entries(dir), 1);
    plan[1].name = "a";
    QT_ERR(qx_st_writer_begin(&w, out, plan, 4, &wo, &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECK(strstr(e.msg, "planned twice") != NULL);
    plan[1].name = "b16";
    plan[2].ne[1] = 0;
    QT_ERR(qx_st_writer_begin(&w, out, plan, 4, &wo, &e), QUAROT_ERR_INVALID_ARGUMENT);
    plan[2].ne[1] = 3;
    plan[0].name = "bad\xff";                               /* not UTF-8: the header would be invalid */
    QT_ERR(qx_st_writer_begin(&w, out, plan, 4, &wo, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "invalid UTF-8") != NULL);
    QT_EQ_INT(fu_count_entries(dir), 1);
    plan[0].name = "a";
    /* a directory output that fails at begin removes the directory it made */
    snprintf(out, sizeof out, "%s/newdir", dir);
    wo.metadata_json = "{\"format\": 3}";
    QT_ERR(qx_st_writer_begin(&w, out, plan, 4, &wo, &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECK(!fu_exists(out, NULL));
    wo.metadata_json = NULL;
    /* existing output: refused without force and left untouched */
    snprintf(out, sizeof out, "%s/s.safetensors", dir);
    QT_ERR(qx_st_writer_begin(&w, out, plan, 4, &wo, &e), QUAROT_ERR_IO);
    QT_CHECK(strstr(e.msg, "exists already") != NULL);
    QT_EQ_INT(fu_count_entries(dir), 1);
    {   /* an empty file */
        qx_store_init(&r);
        snprintf(out, sizeof out, "%s/empty.safetensors", dir);
        QT_CHECK(qt_write_file(out, "", 0));
        QT_ERR(qx_st_load(out, &r, NULL, &e), QUAROT_ERR_PARSE);
        QT_CHECK(strstr(e.msg, "empty.safetensors: 0 bytes is too short") != NULL);
    }
    (void)msg;
    fu_rm_rf(dir);
}

/* Interleaved-RoPE stores (llama2.c, GGUF) are written in the half-split layout. */
static void test_rope_layout(void) {
    const char* dir = fu_tmpdir();
    char out[256];
    quarot_dtype f32[1] = {QUAROT_DTYPE_F32};
    qx_store s, r;
    qx_err e;
    quarot_tensor* q;
    int64_t row, hd = 4, rows;
    float buf[16];
    int ok = 1, same_other = 1;
    if (!dir) return;
    snprintf(out, sizeof out, "%s/m", dir);
    qx_store_init(&s);
    qx_store_init(&r);
    fu_make_model(&s, "llama", 1, f32, 1);
    s.config.rope_interleaved = 1;
    /* q_proj row r holds the value r everywhere */
    q = qx_store_find(&s, "model.layers.0.self_attn.k_proj.weight");
    rows = q ? q->ne[1] : 0;
    for (row = 0; row < rows; ++row) {
        int k;
        for (k = 0; k < 16; ++k) buf[k] = (float)row;
        quarot_tensor_set_row_f32(q, row, buf);
    }
    QT_OK(qx_st_save(&s, out, NULL, &e));
    QT_OK(qx_st_load(out, &r, NULL, &e));
    QT_EQ_INT(r.config.rope_interleaved, 0);
    q = qx_store_find(&r, "model.layers.0.self_attn.k_proj.weight");
    for (row = 0; q && row < rows; ++row) {
        /* HF row R = h*hd + j*hd/2 + i is interleaved row h*hd + 2i + j */
        int64_t h = row / hd, rem = row % hd, j = rem / (hd / 2), i = rem % (hd / 2);
        quarot_tensor_get_row_f32(q, row, buf);
        if (buf[0] != (float)(h * hd + 2 * i + j)) ok = 0;
    }
    QT_CHECK(q && ok);
    /* other tensors untouched */
    {
        quarot_tensor* a = qx_store_find(&s, "model.layers.1.mlp.down_proj.weight");
        quarot_tensor* b = qx_store_find(&r, "model.layers.1.mlp.down_proj.weight");
        same_other = a && b && memcmp(a->data, b->data, quarot_tensor_nbytes(a)) == 0;
    }
    QT_CHECK(same_other);
    qx_store_free(&r);
    qx_store_free(&s);
    fu_rm_rf(dir);
}

/* Store helpers used by the readers and writers: blobs, natural order, RoPE row permutation. */
static void test_store_helpers(void) {
    static const char* const sorted[] = {"a", "a.1", "a.2", "a.10", "a.10.b", "a.011", "b", "layers.9.x", "layers.10.x", "z"};
    qx_store s, c;
    size_t n, k, j;
    int64_t r, hd = 8;
    const char* v;
    qx_store_init(&s);
    QT_OK(qx_store_set_blob(&s, "k", "abc", 3));
    QT_OK(qx_store_set_blob(&s, "k", "hello", 5));                /* replaced */
    QT_OK(qx_store_set_blob(&s, "e", NULL, 0));
    v = (const char*)qx_store_get_blob(&s, "k", &n);
    QT_CHECK(v && n == 5 && strcmp(v, "hello") == 0);
    QT_CHECK(qx_store_get_blob(&s, "e", &n) && n == 0 && qx_store_get_blob(&s, "x", &n) == NULL && n == 0);
    QT_OK(qx_store_clone(&s, &c));
    v = (const char*)qx_store_get_blob(&c, "k", &n);
    QT_CHECK(v && n == 5 && v != qx_store_get_blob(&s, "k", NULL));
    qx_store_free(&c);
    qx_store_free(&s);
    for (k = 0; k < sizeof sorted / sizeof sorted[0]; ++k)
        for (j = 0; j < sizeof sorted / sizeof sorted[0]; ++j) {
            int cmp = qx_name_cmp(sorted[k], sorted[j]);
            QT_CHECKF((k < j && cmp < 0) || (k == j && cmp == 0) || (k > j && cmp > 0), "%s vs %s: %d", sorted[k], sorted[j], cmp);
        }
    /* the two permutations are inverses, and match their definitions */
    for (r = 0; r < 3 * hd; ++r) {
        int64_t h = r / hd, i = (r % hd) / 2, jj = r % 2;
        QT_EQ_INT(qx_rope_src_row(qx_rope_src_row(r, hd, 1), hd, 0), r);
        QT_EQ_INT(qx_rope_src_row(r, hd, 1), h * hd + jj * hd / 2 + i);
    }
}

int main(void) {
    QT_RUN(test_store_helpers);
    QT_RUN(test_read_handmade);
    QT_RUN(test_lies);
    QT_RUN(test_any_rank);
    QT_RUN(test_config);
    QT_RUN(test_config_vl);
    QT_RUN(test_config_generated);
    QT_RUN(test_roundtrip);
    QT_RUN(test_single_file);
    QT_RUN(test_tied);
    QT_RUN(test_dir_config);
    QT_RUN(test_index_lies);
    QT_RUN(test_stream_writer);
    QT_RUN(test_rope_layout);
    return qt_finish("test_safetensors");
}
