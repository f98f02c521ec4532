/* test_qformats.c - quantized weight formats: ggml's Q4_0 / Q8_0 blocks in GGUF (qx_gguf.h).

   The reference decoder below is written from the published block layout alone (ggml's
   block_q4_0 / block_q8_0: an f16 scale d, then 16 bytes of nibbles or 32 int8; Q4_0 element i in
   the low nibble of byte i, element i+16 in the high nibble, value (nibble - 8) * d; Q8_0 value
   q * d), with its own binary16 decoding, so it shares no code with the writer or the reader. */
#include "qt.h"
#include "fmt_util.h"
#include "qx_gguf.h"

/* binary16 -> float from the bits: sign, 5-bit exponent (bias 15), 10-bit fraction. */
static float ref_half(uint16_t h) {
    int sign = h >> 15, ex = (h >> 10) & 31, fr = h & 1023;
    double v;
    if (ex == 31) v = fr ? NAN : INFINITY;
    else if (ex == 0) v = ldexp((double)fr, -24);                 /* subnormal: fr * 2^-24 */
    else v = ldexp((double)(fr + 1024), ex - 25);                 /* (1 + fr/1024) * 2^(ex-15) */
    return (float)(sign ? -v : v);
}

/* One row of n elements from its blocks, ggml's formula: the product in float. */
static void ref_decode(uint32_t type, const unsigned char* p, int64_t n, float* y) {
    int64_t b, i;
    for (b = 0; b < n / 32; ++b) {
        float d = ref_half((uint16_t)(p[0] | (p[1] << 8)));
        if (type == 2) {
            for (i = 0; i < 16; ++i) {
                int lo = p[2 + i] & 15, hi = p[2 + i] >> 4;
                y[b * 32 + i] = (float)(lo - 8) * d;
                y[b * 32 + i + 16] = (float)(hi - 8) * d;
            }
            p += 18;
        } else {
            for (i = 0; i < 32; ++i) y[b * 32 + i] = (float)(signed char)p[2 + i] * d;
            p += 34;
        }
    }
}

static int same_bits(const float* a, const float* b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

/* Random codes and scales -> encode -> the reference decoder, the library decoder, and the value
   q * f16(scale) agree bit for bit; the block sizes and the nibble order are ggml's. */
static void test_blocks(void) {
    enum { N = 256 };
    uint32_t types[2] = {QX_GGML_Q4_0, QX_GGML_Q8_0};
    int k;
    for (k = 0; k < 2; ++k) {
        uint32_t ty = types[k];
        int lo = ty == QX_GGML_Q4_0 ? -8 : -128, hi = ty == QX_GGML_Q4_0 ? 7 : 127;
        int8_t q[N];
        float sc[N / 32], want[N], ref[N], got[N];
        unsigned char buf[N / 32 * 34];
        qx_err e;
        int64_t i;
        QT_EQ_INT(qx_ggml_row_bytes(ty, N), (ty == QX_GGML_Q4_0 ? 18 : 34) * (N / 32));
        QT_EQ_INT(qx_ggml_row_bytes(ty, 48), 0);
        for (i = 0; i < N; ++i) q[i] = (int8_t)(lo + (int)(qt_uniform() * (hi - lo + 1)) % (hi - lo + 1));
        q[0] = (int8_t)lo; q[1] = (int8_t)hi;
        for (i = 0; i < N / 32; ++i) sc[i] = (float)(0.001 + 0.05 * qt_uniform());
        sc[1] = 0.0f;
        sc[2] = -0.03f;
        QT_OK(qx_ggml_encode_row(ty, q, sc, N, buf, "t", &e));
        for (i = 0; i < N; ++i) {
            uint16_t h;
            quarot_f32_to_f16(&sc[i / 32], &h, 1);
            want[i] = (float)q[i] * ref_half(h);
        }
        ref_decode(ty, buf, N, ref);
        QT_OK(qx_ggml_decode_row(ty, buf, N, got));
        QT_CHECK(same_bits(ref, want, N));
        QT_CHECK(same_bits(got, want, N));
        if (ty == QX_GGML_Q4_0) {
            /* element 0 in the low nibble of byte 0 (after the 2 scale bytes), element 16 in its high nibble */
            QT_EQ_INT(buf[2] & 15, q[0] + 8);
            QT_EQ_INT(buf[2] >> 4, q[16] + 8);
            QT_EQ_INT(buf[18 + 2 + 15] >> 4, q[32 + 31] + 8);
        } else {
            QT_EQ_INT((signed char)buf[34 + 2 + 5], q[32 + 5]);
        }
        /* codes out of the type's range and f16-overflowing scales are refused */
        q[7] = (int8_t)(hi + 1 > 127 ? -128 : hi + 1);
        if (ty == QX_GGML_Q4_0) QT_ERR(qx_ggml_encode_row(ty, q, sc, N, buf, "t", &e), QUAROT_ERR_INVALID_ARGUMENT);
        q[7] = 0;
        sc[3] = 65520.0f;
        QT_ERR(qx_ggml_encode_row(ty, q, sc, N, buf, "t", &e), QUAROT_ERR_NONFINITE);
        sc[3] = NAN;
        QT_ERR(qx_ggml_encode_row(ty, q, sc, N, buf, "t", &e), QUAROT_ERR_NONFINITE);
        sc[3] = 65504.0f;
        QT_OK(qx_ggml_encode_row(ty, q, sc, N, buf, "t", &e));
        QT_ERR(qx_ggml_encode_row(ty, q, sc, 40, buf, "t", &e), QUAROT_ERR_INVALID_ARGUMENT);
    }
}

/* The scale is rounded to the nearest binary16, ties to even, subnormals kept. */
static void test_scale_rounding(void) {
    struct { float s; uint16_t bits; } c[] = {
        {1.0f, 0x3c00}, {1.0f + 1.0f / 2048, 0x3c00},            /* tie between 1 and 1+2^-10: even (1) */
        {1.0f + 3.0f / 2048, 0x3c02},                            /* tie between 1+2^-10 and 1+2^-9: even */
        {1.0f + 1.0f / 2048 + 1.0f / 65536, 0x3c01},             /* just above the tie */
        {0.1f, 0x2e66}, {65504.0f, 0x7bff}, {-2.0f, 0xc000},
        {5.9604645e-08f, 0x0001},                                /* smallest subnormal */
        {6.1035156e-05f, 0x0400},                                /* smallest normal */
        {1e-9f, 0x0000},                                         /* underflows to +0 */
    };
    size_t k;
    for (k = 0; k < sizeof c / sizeof c[0]; ++k) {
        int8_t q[32];
        float sc = c[k].s;
        unsigned char buf[34];
        qx_err e;
        memset(q, 0, sizeof q);
        q[0] = 1;
        QT_OK(qx_ggml_encode_row(QX_GGML_Q8_0, q, &sc, 32, buf, "t", &e));
        QT_CHECKF((uint16_t)(buf[0] | buf[1] << 8) == c[k].bits, "scale %.9g -> 0x%04x, expected 0x%04x", (double)c[k].s,
                  (unsigned)(buf[0] | buf[1] << 8), (unsigned)c[k].bits);
    }
}

/* A small llama model (rows of 32 and 64) written with Q4_0 / Q8_0 linears, then read back: the
   file's blocks sit where the tensor infos say, the store holds F32 values equal to the reference
   decoding of those bytes, other tensors are untouched, general.file_type is what was set. */
static void test_gguf_roundtrip(void) {
    qx_store s, back;
    quarot_model_config* c = &s.config;
    qx_tensor_plan plan[32];
    uint32_t bt[32];
    qx_sb kv;
    qx_gguf_set set;
    qx_gguf_write_opts wo;
    qx_gguf_writer* w = NULL;
    qx_gguf_file f;
    qx_err e;
    char path[256];
    const char* dir = fu_tmpdir();
    int64_t i, n;
    int k;
    size_t len = 0;
    char* img;
    qx_store_init(&s);
    memset(c, 0, sizeof *c);
    strcpy(c->arch, "llama");
    c->hidden = 32; c->intermediate = 64; c->n_layers = 1; c->n_heads = 2; c->n_kv_heads = 2; c->head_dim = 16;
    c->vocab = 8; c->max_seq = 16; c->norm = QUAROT_NORM_RMS; c->mlp = QUAROT_MLP_GATED; c->act = QUAROT_ACT_SILU;
    c->norm_eps = 1e-5f; c->rope_theta = 10000.0f; c->tied_embeddings = 1; c->rope_interleaved = 1;
    fu_add(&s, "model.embed_tokens.weight", QUAROT_DTYPE_F32, 32, 8, 0);
    fu_add(&s, "model.norm.weight", QUAROT_DTYPE_F32, 32, 0, 1);
    fu_add(&s, "model.layers.0.input_layernorm.weight", QUAROT_DTYPE_F32, 32, 0, 1);
    fu_add(&s, "model.layers.0.post_attention_layernorm.weight", QUAROT_DTYPE_F32, 32, 0, 1);
    fu_add(&s, "model.layers.0.self_attn.q_proj.weight", QUAROT_DTYPE_F32, 32, 32, 0);
    fu_add(&s, "model.layers.0.self_attn.k_proj.weight", QUAROT_DTYPE_F32, 32, 32, 0);
    fu_add(&s, "model.layers.0.self_attn.v_proj.weight", QUAROT_DTYPE_F32, 32, 32, 0);
    fu_add(&s, "model.layers.0.self_attn.o_proj.weight", QUAROT_DTYPE_F32, 32, 32, 0);
    fu_add(&s, "model.layers.0.mlp.gate_proj.weight", QUAROT_DTYPE_F32, 32, 64, 0);
    fu_add(&s, "model.layers.0.mlp.up_proj.weight", QUAROT_DTYPE_F32, 32, 64, 0);
    fu_add(&s, "model.layers.0.mlp.down_proj.weight", QUAROT_DTYPE_F32, 64, 32, 0);
    n = s.count;
    memset(plan, 0, sizeof plan);
    for (i = 0; i < n; ++i) {
        const quarot_tensor* t = &s.items[i].t;
        plan[i].name = s.items[i].name;
        plan[i].dtype = t->ne[1] > 1 ? QUAROT_DTYPE_F16 : QUAROT_DTYPE_F32;
        plan[i].n_dims = t->ne[1] > 1 ? 2 : 1;
        plan[i].ne[0] = t->ne[0]; plan[i].ne[1] = t->ne[1]; plan[i].ne[2] = plan[i].ne[3] = 1;
        /* linears: q/k/gate/down Q4_0, v/o/up Q8_0; embeddings F16 */
        bt[i] = !strstr(plan[i].name, "_proj") ? 0 :
                (strstr(plan[i].name, "q_proj") || strstr(plan[i].name, "k_proj") || strstr(plan[i].name, "gate") ||
                 strstr(plan[i].name, "down")) ? QX_GGML_Q4_0 : QX_GGML_Q8_0;
    }
    memset(&kv, 0, sizeof kv);
    QT_OK(qx_gguf_kv_from_config(&s, &kv, &e));
    memset(&set, 0, sizeof set);
    set.key = "general.file_type"; set.type = QX_GGUF_U32; set.u = QX_LLAMA_FTYPE_Q4_0;
    memset(&wo, 0, sizeof wo);
    wo.set = &set; wo.n_set = 1; wo.block_types = bt;
    snprintf(path, sizeof path, "%s/q.gguf", dir);
    QT_OK(qx_gguf_writer_begin(&w, path, plan, n, kv.p, kv.len, &wo, &e));
    for (i = 0; i < n && w; ++i) {
        const quarot_tensor* t = &s.items[i].t;
        if (bt[i]) {
            /* codes and scales chosen here directly (any valid choice): RTN of the row by its max */
            int64_t rows = t->ne[1], cols = t->ne[0], r, j;
            uint64_t rb = qx_ggml_row_bytes(bt[i], cols);
            int8_t* q = (int8_t*)malloc((size_t)cols);
            float* row = (float*)malloc((size_t)cols * 4);
            float sc[2];
            unsigned char* enc = (unsigned char*)malloc((size_t)(rb * (uint64_t)rows));
            int qmax = bt[i] == QX_GGML_Q4_0 ? 7 : 127;
            for (r = 0; r < rows; ++r) {
                quarot_tensor_get_row_f32(t, r, row);
                for (j = 0; j < cols / 32; ++j) {
                    float m = 0.0f;
                    int64_t u;
                    for (u = 0; u < 32; ++u) m = fabsf(row[j * 32 + u]) > m ? fabsf(row[j * 32 + u]) : m;
                    sc[j] = m / (float)qmax;
                    for (u = 0; u < 32; ++u) q[j * 32 + u] = (int8_t)lrintf(row[j * 32 + u] / sc[j]);
                }
                QT_OK(qx_ggml_encode_row(bt[i], q, sc, cols, enc + (size_t)(r * (int64_t)rb), plan[i].name, &e));
            }
            QT_OK(qx_gguf_writer_put_raw(w, plan[i].name, enc, rb * (uint64_t)rows, &e));
            /* a plain put of a block-typed tensor, or a wrong byte count, is refused */
            QT_CHECK(qx_gguf_writer_put(w, plan[i].name, t, &e) != QUAROT_OK);
            free(q); free(row); free(enc);
        } else {
            QT_OK(qx_gguf_writer_put(w, plan[i].name, t, &e));
        }
    }
    QT_OK(qx_gguf_writer_finish(w, &e));
    qx_sb_free(&kv);
    /* the file's blocks vs the reference decoder, and the store read back */
    img = fu_read_file(path, &len);
    QT_CHECK(img != NULL);
    qx_store_init(&back);
    QT_OK(qx_gguf_load(path, &back, NULL, &e));
    if (img && qx_gguf_parse(img, len, "q.gguf", &f, &e) == QUAROT_OK) {
        const qx_gguf_kv* ft = qx_gguf_find(&f, "general.file_type");
        int64_t v = -1;
        QT_OK(qx_gguf_kv_int(ft, &v));
        QT_EQ_INT(v, 2);
        for (k = 0; k < (int)f.n_tensors; ++k) {
            const qx_gguf_tinfo* ti = &f.t[k];
            char gname[128], hname[160];
            quarot_tensor* got;
            memcpy(gname, ti->name, (size_t)ti->name_len);
            gname[ti->name_len] = '\0';
            qx_gguf_name_to_hf(gname, hname, sizeof hname);
            got = qx_store_find(&back, hname);
            QT_CHECKF(got != NULL, "%s", hname);
            if (!got) continue;
            if (ti->type == 2 || ti->type == 8) {
                int64_t r, rows = ti->ne[1];
                uint64_t rb = (uint64_t)ti->ne[0] / 32 * (ti->type == 2 ? 18 : 34);
                float* want = (float*)malloc((size_t)ti->ne[0] * 4);
                QT_EQ_INT(ti->nbytes, rb * (uint64_t)rows);
                QT_CHECK(got->dtype == QUAROT_DTYPE_F32);
                QT_CHECKF(strstr(hname, ti->type == 2 ? "q_proj" : "v_proj") || strstr(hname, "k_proj") ||
                          strstr(hname, "o_proj") || strstr(hname, "gate") || strstr(hname, "up") || strstr(hname, "down"),
                          "%s has type %u", hname, ti->type);
                for (r = 0; r < rows; ++r) {
                    ref_decode(ti->type, f.data + ti->offset + r * (int64_t)rb, ti->ne[0], want);
                    QT_CHECKF(same_bits((const float*)got->data + r * ti->ne[0], want, ti->ne[0]), "%s row %lld", hname, (long long)r);
                }
                free(want);
            } else {
                /* F16 / F32 as written */
                quarot_tensor* orig = qx_store_find(&s, hname);
                float a[64], b[64];
                uint16_t h[64];
                QT_CHECK(orig && ti->type == (orig->ne[1] > 1 ? 1u : 0u));
                if (orig) {
                    quarot_tensor_get_row_f32(orig, 0, a);
                    quarot_tensor_get_row_f32(got, 0, b);
                    if (ti->type == 1) { quarot_f32_to_f16(a, h, orig->ne[0]); quarot_f16_to_f32(h, a, orig->ne[0]); }
                    QT_CHECK(same_bits(a, b, orig->ne[0]));
                }
            }
        }
        qx_gguf_file_free(&f);
    } else {
        QT_CHECKF(0, "%s", e.msg);
    }
    /* a hostile size: a Q4_0 tensor whose row is not a multiple of 32 is refused by the parser */
    if (img) {
        qx_gguf_file f2;
        size_t off;
        QT_OK(qx_gguf_parse(img, len, "q.gguf", &f2, &e));
        /* the first tensor info's ne[0]: after the name (u64 length + bytes) and n_dims (u32) */
        off = (size_t)((const char*)f2.t[0].name - img) + f2.t[0].name_len + 4;
        for (k = 0; k < (int)f2.n_tensors && f2.t[k].type != 2; ++k) {}
        if (k < (int)f2.n_tensors) {
            off = (size_t)((const char*)f2.t[k].name - img) + f2.t[k].name_len + 4;
            img[off] = 33;
            qx_gguf_file_free(&f2);
            QT_ERR(qx_gguf_parse(img, len, "q.gguf", &f2, &e), QUAROT_ERR_PARSE);
            QT_CHECKF(strstr(e.msg, "multiple of 32") != NULL, "%s", e.msg);
            fu_seed("gguf/q4_0_bad_row.gguf", img, len);
        } else {
            qx_gguf_file_free(&f2);
        }
    }
    qx_store_free(&back);
    qx_store_free(&s);
    free(img);
    fu_rm_rf(dir);
}

int main(void) {
    QT_RUN(test_blocks);
    QT_RUN(test_scale_rounding);
    QT_RUN(test_gguf_roundtrip);
    return qt_finish("test_qformats");
}
