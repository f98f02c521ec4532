/* helper_plain_llama2c - a plain llama2.c-format runner that knows nothing of rotation.

   The independent engine of tests/test_cli_rotate.c: "a checkpoint rotated without online hooks
   runs unchanged in an ordinary engine". It reads the float32 llama2.c formats itself (legacy v0 as
   run.c reads it, and the version-1 export) and runs the textbook forward pass of Karpathy's run.c
   (RMSNorm, interleaved RoPE, grouped-query attention with a KV cache, SwiGLU, shared or separate
   classifier), then decodes greedily from BOS = 1. It uses neither quarot.h nor any qx_* code.

       helper_plain_llama2c MODEL.bin STEPS        prints STEPS greedy token ids, space separated
   Exit status 0, or 1 with a message on stderr. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cfg_t {
    int dim, hidden, layers, heads, kv_heads, vocab, seq;
    int shared;
} cfg_t;

typedef struct weights_t {
    float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
} weights_t;

static int32_t rd_i32(const unsigned char* p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Whole file into memory; the weights are read as float32 from offset hdr. */
static unsigned char* slurp(const char* path, long* size) {
    FILE* f = fopen(path, "rb");
    unsigned char* buf;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (*size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) { fclose(f); return NULL; }
    buf = (unsigned char*)malloc((size_t)*size + 1);
    if (buf && fread(buf, 1, (size_t)*size, f) != (size_t)*size) { free(buf); buf = NULL; }
    fclose(f);
    return buf;
}

static void rmsnorm(float* o, const float* x, const float* w, int n) {
    float ss = 0.0f;
    int j;
    for (j = 0; j < n; ++j) ss += x[j] * x[j];
    ss = ss / (float)n + 1e-5f;
    ss = 1.0f / sqrtf(ss);
    for (j = 0; j < n; ++j) o[j] = w[j] * (ss * x[j]);
}

/* out[d] = W[d][n] * x[n] */
static void matmul(float* out, const float* x, const float* w, int n, int d) {
    int i, j;
    for (i = 0; i < d; ++i) {
        float acc = 0.0f;
        const float* row = w + (size_t)i * (size_t)n;
        for (j = 0; j < n; ++j) acc += row[j] * x[j];
        out[i] = acc;
    }
}

static void softmax(float* x, int n) {
    float mx = x[0], sum = 0.0f;
    int i;
    for (i = 1; i < n; ++i) if (x[i] > mx) mx = x[i];
    for (i = 0; i < n; ++i) { x[i] = expf(x[i] - mx); sum += x[i]; }
    for (i = 0; i < n; ++i) x[i] /= sum;
}

int main(int argc, char** argv) {
    unsigned char* file;
    long size, need;
    cfg_t c;
    weights_t w;
    float *base, *p, *x, *xb, *xb2, *hb, *hb2, *q, *att, *logits, *kc, *vc;
    int hdr, steps, head, kv_dim, L, token = 1, pos, l, i, h, t;
    if (argc != 3) { fprintf(stderr, "usage: helper_plain_llama2c MODEL.bin STEPS\n"); return 1; }
    steps = atoi(argv[2]);
    if (!(file = slurp(argv[1], &size)) || size < 28) { fprintf(stderr, "%s: cannot read\n", argv[1]); free(file); return 1; }
    if (rd_i32(file) == 0x616b3432) {   /* "ak42" version 1 */
        if (rd_i32(file + 4) != 1 || size < 256) { fprintf(stderr, "%s: unsupported version\n", argv[1]); return 1; }
        hdr = 256;
        c.dim = rd_i32(file + 8); c.hidden = rd_i32(file + 12); c.layers = rd_i32(file + 16); c.heads = rd_i32(file + 20);
        c.kv_heads = rd_i32(file + 24); c.vocab = rd_i32(file + 28); c.seq = rd_i32(file + 32);
        c.shared = file[36];
    } else {
        hdr = 28;
        c.dim = rd_i32(file); c.hidden = rd_i32(file + 4); c.layers = rd_i32(file + 8); c.heads = rd_i32(file + 12);
        c.kv_heads = rd_i32(file + 16); c.vocab = rd_i32(file + 20); c.seq = rd_i32(file + 24);
        c.shared = c.vocab > 0;
        if (c.vocab < 0) c.vocab = -c.vocab;
    }
    if (c.dim <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.vocab <= 0 || c.seq <= 0 ||
        c.dim % c.heads || c.heads % c.kv_heads) {
        fprintf(stderr, "%s: bad header\n", argv[1]);
        return 1;
    }
    head = c.dim / c.heads;
    kv_dim = c.kv_heads * head;
    L = c.layers;
    need = hdr + 4L * ((long)c.vocab * c.dim * (c.shared ? 1 : 2) + (long)L * (2L * c.dim + 2L * c.dim * c.dim +
                       2L * kv_dim * c.dim + 3L * c.hidden * c.dim) + c.dim + (hdr == 28 ? (long)c.seq * head : 0));
    if (need != size) { fprintf(stderr, "%s: size %ld, header implies %ld\n", argv[1], size, need); return 1; }

    /* The segments, in each format's order (copied out of the byte buffer so floats are aligned). */
    base = p = (float*)malloc((size_t)(size - hdr));
    if (!p) { fprintf(stderr, "out of memory\n"); return 1; }
    memcpy(p, file + hdr, (size_t)(size - hdr));
    free(file);
    if (hdr == 28) {
        w.emb = p; p += (size_t)c.vocab * c.dim;
        w.rms_att = p; p += (size_t)L * c.dim;
        w.wq = p; p += (size_t)L * c.dim * c.dim;
        w.wk = p; p += (size_t)L * kv_dim * c.dim;
        w.wv = p; p += (size_t)L * kv_dim * c.dim;
        w.wo = p; p += (size_t)L * c.dim * c.dim;
        w.rms_ffn = p; p += (size_t)L * c.dim;
        w.w1 = p; p += (size_t)L * c.hidden * c.dim;
        w.w2 = p; p += (size_t)L * c.dim * c.hidden;
        w.w3 = p; p += (size_t)L * c.hidden * c.dim;
        w.rms_final = p; p += c.dim;
        p += (size_t)c.seq * head;   /* freq_cis_real and _imag (unused, as in run.c) */
    } else {
        w.rms_att = p; p += (size_t)L * c.dim;
        w.rms_ffn = p; p += (size_t)L * c.dim;
        w.rms_final = p; p += c.dim;
        w.emb = p; p += (size_t)c.vocab * c.dim;
        w.wq = p; p += (size_t)L * c.dim * c.dim;
        w.wk = p; p += (size_t)L * kv_dim * c.dim;
        w.wv = p; p += (size_t)L * kv_dim * c.dim;
        w.wo = p; p += (size_t)L * c.dim * c.dim;
        w.w1 = p; p += (size_t)L * c.hidden * c.dim;
        w.w2 = p; p += (size_t)L * c.dim * c.hidden;
        w.w3 = p; p += (size_t)L * c.hidden * c.dim;
    }
    w.wcls = c.shared ? w.emb : p;

    x = (float*)calloc((size_t)c.dim, sizeof(float));
    xb = (float*)calloc((size_t)c.dim, sizeof(float));
    xb2 = (float*)calloc((size_t)c.dim, sizeof(float));
    hb = (float*)calloc((size_t)c.hidden, sizeof(float));
    hb2 = (float*)calloc((size_t)c.hidden, sizeof(float));
    q = (float*)calloc((size_t)c.dim, sizeof(float));
    att = (float*)calloc((size_t)c.seq, sizeof(float));
    logits = (float*)calloc((size_t)c.vocab, sizeof(float));
    kc = (float*)calloc((size_t)L * c.seq * kv_dim, sizeof(float));
    vc = (float*)calloc((size_t)L * c.seq * kv_dim, sizeof(float));
    if (steps > c.seq) steps = c.seq;

    for (pos = 0; pos < steps; ++pos) {
        memcpy(x, w.emb + (size_t)token * c.dim, (size_t)c.dim * sizeof(float));
        for (l = 0; l < L; ++l) {
            float* kr = kc + ((size_t)l * c.seq + pos) * kv_dim;
            float* vr = vc + ((size_t)l * c.seq + pos) * kv_dim;
            rmsnorm(xb, x, w.rms_att + (size_t)l * c.dim, c.dim);
            matmul(q, xb, w.wq + (size_t)l * c.dim * c.dim, c.dim, c.dim);
            matmul(kr, xb, w.wk + (size_t)l * kv_dim * c.dim, c.dim, kv_dim);
            matmul(vr, xb, w.wv + (size_t)l * kv_dim * c.dim, c.dim, kv_dim);
            for (i = 0; i < c.dim; i += 2) {   /* RoPE on pairs (i, i+1) */
                float freq = 1.0f / powf(10000.0f, (float)(i % head) / (float)head);
                float ang = (float)pos * freq, fr = cosf(ang), fi = sinf(ang);
                float a = q[i], b = q[i + 1];
                q[i] = a * fr - b * fi;
                q[i + 1] = a * fi + b * fr;
                if (i < kv_dim) {
                    a = kr[i]; b = kr[i + 1];
                    kr[i] = a * fr - b * fi;
                    kr[i + 1] = a * fi + b * fr;
                }
            }
            for (h = 0; h < c.heads; ++h) {
                const float* qh = q + h * head;
                int kvh = h / (c.heads / c.kv_heads);
                float* o = xb + h * head;
                for (t = 0; t <= pos; ++t) {
                    const float* kt = kc + ((size_t)l * c.seq + t) * kv_dim + kvh * head;
                    float s = 0.0f;
                    for (i = 0; i < head; ++i) s += qh[i] * kt[i];
                    att[t] = s / sqrtf((float)head);
                }
                softmax(att, pos + 1);
                memset(o, 0, (size_t)head * sizeof(float));
                for (t = 0; t <= pos; ++t) {
                    const float* vt = vc + ((size_t)l * c.seq + t) * kv_dim + kvh * head;
                    for (i = 0; i < head; ++i) o[i] += att[t] * vt[i];
                }
            }
            matmul(xb2, xb, w.wo + (size_t)l * c.dim * c.dim, c.dim, c.dim);
            for (i = 0; i < c.dim; ++i) x[i] += xb2[i];
            rmsnorm(xb, x, w.rms_ffn + (size_t)l * c.dim, c.dim);
            matmul(hb, xb, w.w1 + (size_t)l * c.hidden * c.dim, c.dim, c.hidden);
            matmul(hb2, xb, w.w3 + (size_t)l * c.hidden * c.dim, c.dim, c.hidden);
            for (i = 0; i < c.hidden; ++i) hb[i] = hb[i] / (1.0f + expf(-hb[i])) * hb2[i];   /* SwiGLU */
            matmul(xb, hb, w.w2 + (size_t)l * c.dim * c.hidden, c.hidden, c.dim);
            for (i = 0; i < c.dim; ++i) x[i] += xb[i];
        }
        rmsnorm(x, x, w.rms_final, c.dim);
        matmul(logits, x, w.wcls, c.dim, c.vocab);
        token = 0;   /* greedy: the first index of the largest logit */
        for (i = 1; i < c.vocab; ++i)
            if (logits[i] > logits[token]) token = i;
        printf("%s%d", pos ? " " : "", token);
    }
    printf("\n");
    free(base); free(x); free(xb); free(xb2); free(hb); free(hb2); free(q); free(att); free(logits); free(kc); free(vc);
    return 0;
}
