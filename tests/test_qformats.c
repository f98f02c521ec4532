/* test_qformats.c - quantized weight formats: ggml's Q4_0 / Q8_0 blocks in GGUF (qx_gguf.h) and the
   quarot-packed W4A4 safetensors file (qx_packed.h: exact round trip, nibble order, hostile files).

   The reference decoder below is written from the published block layout alone (ggml's
   block_q4_0 / block_q8_0: an f16 scale d, then 16 bytes of nibbles or 32 int8; Q4_0 element i in
   the low nibble of byte i, element i+16 in the high nibble, value (nibble - 8) * d; Q8_0 value
   q * d), with its own binary16 decoding, so it shares no code with the writer or the reader. */
#include "qt.h"
#include "fmt_util.h"
#include "formats/qx_gguf.h"
#include "formats/qx_packed.h"

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
    img = qt_read_file(path, &len);
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


/* ---- quarot-packed ---- */

static qx_packed_settings pk_settings(int bits, int64_t group, int asym, quarot_dtype sd) {
    qx_packed_settings st;
    memset(&st, 0, sizeof st);
    st.w_bits = bits; st.w_group_size = group; st.w_asym = asym; st.scale_dtype = sd;
    strcpy(st.w_quantizer, "rtn");
    st.a_bits = 4; st.a_clip = 0.9; st.k_bits = 4; st.v_bits = 16; st.k_asym = 1; st.k_clip = 1.0; st.v_clip = 0.95;
    st.k_group_size = 8; st.rope_interleaved = 1;
    return st;
}

/* Writes two linears ([6][in]) and two plain tensors with codes from quarot_quantize_f32, reads the
   file back: codes, scales (f16-rounded when F16), zeros, plain tensors and settings are what went
   in, and every dequantized row equals quarot_dequantize_f32 of them bit for bit. */
static void pk_roundtrip(int bits, int64_t group, int asym, quarot_dtype sd, int64_t in, int big_online) {
    enum { OUT = 6 };
    const char* dir = fu_tmpdir();
    char path[256];
    qx_packed_entry plan[4];
    qx_packed_settings st = pk_settings(bits, group, asym, sd);
    qx_packed_write_opts wo;
    qx_packed_writer* w = NULL;
    qx_packed_file f;
    qx_store s;
    qx_err e;
    int64_t groups = in / (group ? group : in), i, r, k;
    float* x = (float*)malloc((size_t)(OUT * in) * 4);
    int8_t* q = (int8_t*)malloc((size_t)(OUT * in));
    float sc[2][OUT * 64], zr[2][OUT * 64];
    int8_t* qb = (int8_t*)malloc((size_t)(OUT * in));
    float* row = (float*)malloc((size_t)in * 4);
    float* want = (float*)malloc((size_t)(OUT * in) * 4);
    int8_t* codes[2];
    char* online = NULL;
    size_t len = 0;
    char* img;
    quarot_quant_desc qd;
    memset(plan, 0, sizeof plan);
    plan[0].name = "a.weight"; plan[0].packed = 1; plan[0].n_dims = 2; plan[0].ne[0] = in; plan[0].ne[1] = OUT;
    plan[1].name = "b.q_proj.weight"; plan[1].packed = 1; plan[1].n_dims = 2; plan[1].ne[0] = in; plan[1].ne[1] = OUT;
    plan[2].name = "norm.weight"; plan[2].dtype = QUAROT_DTYPE_F32; plan[2].n_dims = 1; plan[2].ne[0] = 5;
    plan[3].name = "emb.weight"; plan[3].dtype = QUAROT_DTYPE_F16; plan[3].n_dims = 2; plan[3].ne[0] = 3; plan[3].ne[1] = 2;
    memset(&wo, 0, sizeof wo);
    wo.config_json = "{\"x\": 1}";
    wo.online = "quarot-online 1\nhooks 0\n";
    wo.rotation = "R1 test";
    wo.online_reserve = big_online || bits == 4 ? 0 : 1;   /* 1: the header outgrows its room, the data move */
    snprintf(path, sizeof path, "%s/p.safetensors", dir);
    QT_OK(qx_packed_writer_begin(&w, path, plan, 4, &st, &wo, &e));
    memset(&qd, 0, sizeof qd);
    qd.bits = bits; qd.asymmetric = asym; qd.group_size = group;
    codes[0] = q; codes[1] = qb;
    for (k = 0; k < 2; ++k) {
        for (i = 0; i < OUT * in; ++i) x[i] = (float)qt_normal();
        QT_OK(quarot_quantize_f32(x, OUT, in, in, &qd, codes[k], sc[k], asym ? zr[k] : NULL));
        QT_OK(qx_packed_writer_put_linear(w, plan[k].name, codes[k], sc[k], asym ? zr[k] : NULL, &e));
    }
    {
        float nv[5] = {1, 2, 3, 4, 5}, ev[6] = {0.5f, -1, 2, 3, 1e-3f, 7};
        int64_t ne1[1] = {5}, ne2[2] = {3, 2};
        quarot_tensor t1, t2;
        quarot_tensor_init(&t1, nv, QUAROT_DTYPE_F32, 1, ne1);
        quarot_tensor_init(&t2, ev, QUAROT_DTYPE_F32, 2, ne2);
        QT_OK(qx_packed_writer_put(w, "norm.weight", &t1, &e));
        QT_OK(qx_packed_writer_put(w, "emb.weight", &t2, &e));
    }
    if (big_online) {                           /* more than the header space reserved at begin: data moved */
        size_t n = 200000;
        online = (char*)malloc(n + 1);
        for (i = 0; i < (int64_t)n; ++i) online[i] = (char)('a' + i % 26);
        online[n] = '\0';
        QT_OK(qx_packed_writer_set_online(w, online));
    }
    QT_OK(qx_packed_writer_finish(w, &e));
    img = qt_read_file(path, &len);
    QT_CHECK(img != NULL);
    if (img && qx_packed_parse(img, len, "p", &f, &e) == QUAROT_OK) {
        QT_EQ_INT(f.n_lin, 2);
        QT_EQ_INT(f.n_plain, 2);
        QT_EQ_INT(f.settings.w_bits, bits);
        QT_EQ_INT(f.settings.w_group_size, group);
        QT_EQ_INT(f.settings.w_asym, asym);
        QT_CHECK(f.settings.scale_dtype == sd && f.settings.a_bits == 4 && f.settings.a_clip == 0.9 && f.settings.k_group_size == 8);
        QT_CHECK(f.settings.v_bits == 16 && f.settings.v_clip == 0.95 && f.settings.k_asym == 1 && f.settings.rope_interleaved == 1);
        QT_CHECK(strcmp(f.config_json, "{\"x\": 1}") == 0 && strcmp(f.rotation, "R1 test") == 0);
        QT_CHECK(strcmp(f.online, big_online ? online : "quarot-online 1\nhooks 0\n") == 0);
        for (k = 0; k < f.n_lin; ++k) {
            const qx_packed_linear* L = &f.lin[k];
            int j = strcmp(L->name, "a.weight") == 0 ? 0 : 1;
            int8_t* got = (int8_t*)malloc((size_t)(OUT * in));
            float gs[OUT * 64], gz[OUT * 64];
            QT_CHECK(strcmp(L->name, plan[j].name) == 0 && L->out == OUT && L->in == in && L->groups == groups);
            qx_packed_codes(&f, L, got, gs, gz);
            QT_CHECK(memcmp(got, codes[j], (size_t)(OUT * in)) == 0);
            for (i = 0; i < OUT * groups; ++i) {
                float want_s = sc[j][i];
                if (sd == QUAROT_DTYPE_F16) { uint16_t h; quarot_f32_to_f16(&want_s, &h, 1); quarot_f16_to_f32(&h, &want_s, 1); }
                QT_CHECK(memcmp(&gs[i], &want_s, 4) == 0);
                sc[j][i] = want_s;
                if (asym) QT_CHECK(gz[i] == zr[j][i]);
            }
            QT_OK(quarot_dequantize_f32(codes[j], sc[j], asym ? zr[j] : NULL, OUT, in, &qd, want, in));
            for (r = 0; r < OUT; ++r) {
                qx_packed_dequant_row(&f, L, r, row);
                QT_CHECKF(same_bits(row, want + r * in, in), "%s row %lld", L->name, (long long)r);
            }
            free(got);
        }
        for (k = 0; k < f.n_plain; ++k) {
            const qx_packed_plain* P = &f.plain[k];
            if (strcmp(P->name, "norm.weight") == 0) {
                QT_CHECK(P->dtype == QUAROT_DTYPE_F32 && P->n_dims == 1 && P->ne[0] == 5);
                QT_CHECK(memcmp(P->data + 8, "\0\0\x40\x40", 4) == 0);   /* 3.0f */
            } else {
                QT_CHECK(P->dtype == QUAROT_DTYPE_F16 && P->ne[0] == 3 && P->ne[1] == 2 && P->data[0] == 0 && P->data[1] == 0x38);   /* 0.5 */
            }
        }
        qx_packed_file_free(&f);
    } else {
        QT_CHECKF(0, "%s", e.msg);
    }
    /* as a store: parse again through qx_packed_read_mem needs a model config, which "{x: 1}" is not */
    qx_store_init(&s);
    QT_CHECK(img && qx_packed_read_mem(img, len, "p", &s, &e) != QUAROT_OK);
    qx_store_free(&s);
    if (img && !big_online && bits == 4 && !asym) fu_seed("packed/valid.safetensors", img, len);
    free(img); free(x); free(q); free(qb); free(row); free(want); free(online);
    fu_rm_rf(dir);
}

static void test_packed_roundtrip(void) {
    pk_roundtrip(4, 0, 0, QUAROT_DTYPE_F16, 64, 0);
    pk_roundtrip(4, 16, 1, QUAROT_DTYPE_F32, 64, 0);
    pk_roundtrip(3, 8, 0, QUAROT_DTYPE_F16, 32, 1);
    pk_roundtrip(8, 0, 1, QUAROT_DTYPE_F16, 20, 0);
    pk_roundtrip(2, 4, 1, QUAROT_DTYPE_F16, 12, 0);
    pk_roundtrip(6, 0, 0, QUAROT_DTYPE_F32, 7, 0);
}

/* The nibble order, from bytes: codes -8, 7, 0, 1 -> stored 0, 15, 8, 9 -> bytes 0xF0, 0x98. */
static void test_packed_nibbles(void) {
    const char* dir = fu_tmpdir();
    char path[256];
    qx_packed_entry pe;
    qx_packed_settings st = pk_settings(4, 0, 0, QUAROT_DTYPE_F16);
    qx_packed_writer* w = NULL;
    qx_packed_file f;
    qx_err e;
    int8_t q[4] = {-8, 7, 0, 1};
    float s = 0.25f, row[4];
    char* img;
    size_t len = 0;
    memset(&pe, 0, sizeof pe);
    pe.name = "l.weight"; pe.packed = 1; pe.n_dims = 2; pe.ne[0] = 4; pe.ne[1] = 1;
    snprintf(path, sizeof path, "%s/n.safetensors", dir);
    QT_OK(qx_packed_writer_begin(&w, path, &pe, 1, &st, NULL, &e));
    QT_OK(qx_packed_writer_put_linear(w, "l.weight", q, &s, NULL, &e));
    QT_OK(qx_packed_writer_finish(w, &e));
    img = qt_read_file(path, &len);
    if (img && qx_packed_parse(img, len, "n", &f, &e) == QUAROT_OK) {
        QT_EQ_INT(f.lin[0].qweight[0], 0xF0);
        QT_EQ_INT(f.lin[0].qweight[1], 0x98);
        QT_EQ_INT(f.lin[0].scales[0] | f.lin[0].scales[1] << 8, 0x3400);   /* 0.25 in f16 */
        qx_packed_dequant_row(&f, &f.lin[0], 0, row);
        QT_CHECK(row[0] == -2.0f && row[1] == 1.75f && row[2] == 0.0f && row[3] == 0.25f);
        qx_packed_file_free(&f);
    } else {
        QT_CHECKF(0, "%s", e.msg);
    }
    free(img);
    fu_rm_rf(dir);
}

/* A hand-made packed file: one linear [2][4] (4-bit symmetric, per channel unless the metadata
   says otherwise) with the given header pieces. */
static fu_buf pk_hand(const char* meta_extra, const char* tensors, const unsigned char* data, size_t n) {
    fu_buf b;
    char hdr[4096];
    size_t hl;
    memset(&b, 0, sizeof b);
    snprintf(hdr, sizeof hdr,
             "{\"__metadata__\":{\"format\":\"quarot-packed\",%s\"quarot.weight.bits\":\"4\",\"quarot.weight.asymmetric\":\"0\","
             "\"quarot.weight.scale_dtype\":\"F16\",\"quarot.weight.packing\":\"low_first\",\"quarot.act.bits\":\"4\","
             "\"quarot.act.group_size\":\"0\",\"quarot.act.asymmetric\":\"0\",\"quarot.act.clip_ratio\":\"1\",\"quarot.k.bits\":\"16\","
             "\"quarot.k.group_size\":\"0\",\"quarot.k.asymmetric\":\"1\",\"quarot.k.clip_ratio\":\"1\",\"quarot.v.bits\":\"16\","
             "\"quarot.v.group_size\":\"0\",\"quarot.v.asymmetric\":\"1\",\"quarot.v.clip_ratio\":\"1\",\"quarot.rope_interleaved\":\"0\","
             "\"quarot.config\":\"{}\",\"quarot.online\":\"\"},%s}",
             meta_extra, tensors);
    hl = strlen(hdr);
    fu_u64(&b, hl);
    fu_put(&b, hdr, hl);
    fu_put(&b, data, n);
    return b;
}

static void pk_expect(fu_buf b, quarot_result code, const char* what, const char* seed) {
    qx_packed_file f;
    qx_err e;
    quarot_result r;
    e.msg[0] = '\0';
    r = qx_packed_parse(b.p, b.len, "bad.safetensors", &f, &e);
    if (getenv("QX_SHOW")) printf("    %s\n", e.msg);
    QT_CHECKF(r == code, "%s: result %d, expected %d: %s", what, (int)r, (int)code, e.msg);
    QT_CHECKF(strstr(e.msg, what) != NULL, "message '%s' lacks '%s'", e.msg, what);
    if (r == QUAROT_OK) qx_packed_file_free(&f);
    if (seed) fu_seed(seed, b.p, b.len);
    free(b.p);
}

static void test_packed_hostile(void) {
    /* data: qweight 2x2 bytes, then scales 2x1 f16 */
    unsigned char d[8] = {0x98, 0x98, 0x98, 0x98, 0x00, 0x3c, 0x00, 0x3c};
    const char* V = "\"quarot.version\":\"1\",\"quarot.weight.group_size\":\"0\",";
    const char* T = "\"l.qweight\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                    "\"l.scales\":{\"dtype\":\"F16\",\"shape\":[2,1],\"data_offsets\":[4,8]}";
    unsigned char dn[8];
    fu_buf ok = pk_hand(V, T, d, 8);
    qx_packed_file f;
    qx_err e;
    QT_OK(qx_packed_parse(ok.p, ok.len, "ok", &f, &e));
    QT_CHECK(f.n_lin == 1 && f.lin[0].in == 4 && f.lin[0].out == 2);
    qx_packed_file_free(&f);
    fu_seed("packed/hand.safetensors", ok.p, ok.len);
    free(ok.p);
    /* metadata that disagrees with the tensors: group size 2 needs scales [2][2] */
    pk_expect(pk_hand("\"quarot.version\":\"1\",\"quarot.weight.group_size\":\"2\",", T, d, 8), QUAROT_ERR_PARSE,
              "disagree with the metadata", "packed/group_mismatch.safetensors");
    /* group size 3 does not divide 4 */
    pk_expect(pk_hand("\"quarot.version\":\"1\",\"quarot.weight.group_size\":\"3\",", T, d, 8), QUAROT_ERR_PARSE,
              "disagree with the metadata", NULL);
    /* missing scales */
    pk_expect(pk_hand(V, "\"l.qweight\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]}", d, 4), QUAROT_ERR_PARSE,
              "no .scales beside it", "packed/no_scales.safetensors");
    /* scales without their qweight */
    pk_expect(pk_hand(V, "\"l.scales\":{\"dtype\":\"F16\",\"shape\":[2,1],\"data_offsets\":[0,4]}", d, 4), QUAROT_ERR_PARSE,
              "without its .qweight", NULL);
    /* NaN and negative scales */
    memcpy(dn, d, 8); dn[5] = 0x7e;
    pk_expect(pk_hand(V, T, dn, 8), QUAROT_ERR_NONFINITE, "scales must be finite and >= 0", "packed/nan_scale.safetensors");
    memcpy(dn, d, 8); dn[7] = 0xbc;
    pk_expect(pk_hand(V, T, dn, 8), QUAROT_ERR_NONFINITE, "scales must be finite and >= 0", NULL);
    memcpy(dn, d, 8); dn[5] = 0x7c;
    pk_expect(pk_hand(V, T, dn, 8), QUAROT_ERR_NONFINITE, "scales must be finite", NULL);
    /* zeros in a symmetric file */
    pk_expect(pk_hand(V, "\"l.qweight\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                         "\"l.scales\":{\"dtype\":\"F16\",\"shape\":[2,1],\"data_offsets\":[4,8]},"
                         "\"l.zeros\":{\"dtype\":\"U8\",\"shape\":[2,1],\"data_offsets\":[8,10]}", d, 8), QUAROT_ERR_PARSE,
              "data offsets do not match", NULL);
    {
        unsigned char dz[10];
        memcpy(dz, d, 8); dz[8] = 1; dz[9] = 2;
        pk_expect(pk_hand(V, "\"l.qweight\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                             "\"l.scales\":{\"dtype\":\"F16\",\"shape\":[2,1],\"data_offsets\":[4,8]},"
                             "\"l.zeros\":{\"dtype\":\"U8\",\"shape\":[2,1],\"data_offsets\":[8,10]}", dz, 10), QUAROT_ERR_PARSE,
                  ".zeros in a symmetric file", NULL);
    }
    /* version, format, bits, holes, dtype */
    pk_expect(pk_hand("\"quarot.version\":\"2\",\"quarot.weight.group_size\":\"0\",", T, d, 8), QUAROT_ERR_UNSUPPORTED,
              "version 2 is not supported", NULL);
    pk_expect(pk_hand("\"quarot.weight.group_size\":\"0\",", T, d, 8), QUAROT_ERR_PARSE, "quarot.version is missing", NULL);
    pk_expect(pk_hand("\"quarot.version\":\"1\",\"quarot.weight.group_size\":\"-1\",", T, d, 8), QUAROT_ERR_PARSE,
              "quarot.weight.group_size is missing or outside", NULL);
    pk_expect(pk_hand(V, T, d, 7), QUAROT_ERR_PARSE, "data offsets do not match", NULL);
    pk_expect(pk_hand(V, "\"l.qweight\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[4,8]},"
                         "\"l.scales\":{\"dtype\":\"F16\",\"shape\":[2,1],\"data_offsets\":[4,8]}", d, 8), QUAROT_ERR_PARSE,
              "tensors must tile the data section", NULL);
    pk_expect(pk_hand(V, "\"l.qweight\":{\"dtype\":\"I8\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                         "\"l.scales\":{\"dtype\":\"F16\",\"shape\":[2,1],\"data_offsets\":[4,8]}", d, 8), QUAROT_ERR_UNSUPPORTED_DTYPE,
              "dtype I8", NULL);
    {
        fu_buf b;
        memset(&b, 0, sizeof b);
        fu_u64(&b, 1000);
        fu_str(&b, "{}");
        pk_expect(b, QUAROT_ERR_PARSE, "passes the end of the file", NULL);
    }
}

/* A whole small model (fu_make_model's llama) with its linears packed, loaded into a store through
   qx_packed_read_mem: the config comes back, plain tensors are as written, linears equal the
   dequantized codes, the hook text is blob "quarot.online". */
static void test_packed_store(void) {
    qx_store s, back;
    quarot_dtype f32 = QUAROT_DTYPE_F32;
    qx_packed_entry plan[64];
    qx_packed_settings st = pk_settings(4, 0, 0, QUAROT_DTYPE_F32);
    qx_packed_write_opts wo;
    qx_packed_writer* w = NULL;
    qx_sb cfg;
    qx_err e;
    const char* dir = fu_tmpdir();
    char path[256];
    int64_t i, r;
    char* img;
    size_t len = 0;
    qx_store_init(&s);
    fu_make_model(&s, "llama", 1, &f32, 1);
    s.config.rope_interleaved = 1;
    memset(&cfg, 0, sizeof cfg);
    QT_OK(qx_hf_config_write(&s, &cfg, &e));
    memset(plan, 0, sizeof plan);
    for (i = 0; i < s.count && i < 64; ++i) {
        const quarot_tensor* t = &s.items[i].t;
        plan[i].name = s.items[i].name;
        plan[i].packed = strstr(plan[i].name, "_proj.weight") != NULL;
        plan[i].dtype = QUAROT_DTYPE_F32;
        plan[i].n_dims = t->ne[1] > 1 ? 2 : 1;
        plan[i].ne[0] = t->ne[0]; plan[i].ne[1] = t->ne[1];
    }
    memset(&wo, 0, sizeof wo);
    wo.config_json = cfg.p;
    wo.online = "quarot-online 1\nhooks 0\n";
    wo.online_reserve = 1;
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    QT_OK(qx_packed_writer_begin(&w, path, plan, s.count, &st, &wo, &e));
    for (i = 0; i < s.count; ++i) {
        const quarot_tensor* t = &s.items[i].t;
        if (plan[i].packed) {
            int64_t rows = t->ne[1], cols = t->ne[0];
            int8_t* q = (int8_t*)malloc((size_t)(rows * cols));
            float* sc = (float*)malloc((size_t)rows * 4);
            QT_OK(quarot_quantize_f32((const float*)t->data, rows, cols, cols, NULL, q, sc, NULL));
            QT_OK(qx_packed_writer_put_linear(w, plan[i].name, q, sc, NULL, &e));
            /* the expected weights, in place (the store's copy is not used again) */
            QT_OK(quarot_dequantize_f32(q, sc, NULL, rows, cols, NULL, (float*)t->data, cols));
            free(q); free(sc);
        } else {
            QT_OK(qx_packed_writer_put(w, plan[i].name, t, &e));
        }
    }
    QT_OK(qx_packed_writer_finish(w, &e));
    img = qt_read_file(path, &len);
    qx_store_init(&back);
    if (img && qx_packed_read_mem(img, len, "m.safetensors", &back, &e) == QUAROT_OK) {
        char msg[256];
        size_t bl = 0;
        QT_CHECKF(fu_same_tensors(&s, &back, msg, sizeof msg), "%s", msg);
        QT_CHECK(back.config.hidden == s.config.hidden && back.config.n_layers == s.config.n_layers && back.config.rope_interleaved == 1);
        QT_CHECK(qx_store_get_blob(&back, "quarot.online", &bl) && bl == strlen("quarot-online 1\nhooks 0\n"));
        (void)r;
        if (getenv("QX_SEEDS_DIR") && getenv("QX_SEEDS_DIR")[0]) {   /* bigger than fu_seed's 4 KiB: written here */
            char sp[1024];
            snprintf(sp, sizeof sp, "%s/packed/model.safetensors", getenv("QX_SEEDS_DIR"));
            qt_write_file(sp, img, len);
        }
    } else {
        QT_CHECKF(0, "%s", e.msg);
    }
    qx_store_free(&back);
    /* the loader finds the format by its metadata */
    qx_store_init(&back);
    QT_OK(qx_packed_load(path, &back, &e));
    QT_CHECK(strcmp(back.source_format, "quarot-packed") == 0);
    qx_store_free(&back);
    qx_sb_free(&cfg);
    qx_store_free(&s);
    free(img);
    fu_rm_rf(dir);
}

int main(void) {
    QT_RUN(test_blocks);
    QT_RUN(test_scale_rounding);
    QT_RUN(test_gguf_roundtrip);
    QT_RUN(test_packed_roundtrip);
    QT_RUN(test_packed_nibbles);
    QT_RUN(test_packed_hostile);
    QT_RUN(test_packed_store);
    return qt_finish("test_qformats");
}
