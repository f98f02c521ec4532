/* hadamard_sizes - which Hadamard rotation quarot.h uses for a given dimension.

   QuaRot rotates the residual stream (hidden size) and the down_proj input (intermediate size) with
   a random Hadamard matrix Q = D*H/sqrt(n). A Hadamard matrix of order n does not exist for every n:
   quarot.h builds H_n = H_K (x) H_{2^m} with n = K*2^m, where K is the smallest order it can make
   (Sylvester, Paley I/II over GF(q), an embedded table, or a Kronecker product of those) such that
   n/K is a power of two; the fast transform then costs n*m + K*n additions per row. When no full-size
   Hadamard matrix is available, a rotation can be block-diagonal (the largest available order that
   divides n, one Hadamard block per slice) or, for rotations that are only ever applied offline to
   the weights, a dense seeded random orthogonal matrix.

   This program prints that choice for every hidden / intermediate size of ALGORITHMS.md section 1,
   or for the dimensions given on the command line:
       hadamard_sizes                 # the model table
       hadamard_sizes 4096 668 5000   # any dimensions */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "quarot.h"

typedef struct model_dim {
    const char* model;
    const char* what;
    int64_t n;
} model_dim;

static const model_dim default_dims[] = {
    {"Llama-2-7B", "hidden", 4096},       {"Llama-2-7B", "intermediate", 11008},
    {"Llama-2-13B", "hidden", 5120},      {"Llama-2-13B", "intermediate", 13824},
    {"Llama-3-8B", "hidden", 4096},       {"Llama-3-8B", "intermediate", 14336},
    {"Qwen2.5-0.5B", "hidden", 896},      {"Qwen2.5-0.5B", "intermediate", 4864},
    {"Qwen2.5-1.5B", "hidden", 1536},     {"Qwen2.5-1.5B", "intermediate", 8960},
    {"Qwen2.5-7B", "hidden", 3584},       {"Qwen2.5-7B", "intermediate", 18944},
    {"Qwen2.5-72B", "hidden", 8192},      {"Qwen2.5-72B", "intermediate", 29568},
    {"Qwen3-32B", "hidden", 5120},        {"Qwen3-32B", "intermediate", 25600},
    {"Gemma-2-2B", "hidden", 2304},       {"Gemma-2-2B", "intermediate", 9216},
    {"GLM-4-9B", "hidden", 4096},         {"GLM-4-9B", "intermediate", 13696},
    {"DeepSeek-V3", "hidden", 7168},      {"DeepSeek-V3", "intermediate", 18432},
    {"stories260K", "hidden", 64},        {"stories260K", "intermediate", 172},
};

static const char* construction_name(quarot_hadamard_construction c) {
    switch (c) {
        case QUAROT_HADAMARD_SYLVESTER: return "Sylvester doubling";
        case QUAROT_HADAMARD_PALEY1: return "Paley I";
        case QUAROT_HADAMARD_PALEY2: return "Paley II";
        case QUAROT_HADAMARD_TABLE: return "embedded table";
        case QUAROT_HADAMARD_KRONECKER: return "Kronecker product";
        default: return "none";
    }
}

static void describe(const char* label, int64_t n) {
    quarot_hadamard_info info;
    quarot_result r = quarot_hadamard_info_get(n, &info);
    printf("%-28s %7lld  ", label, (long long)n);
    if (r == QUAROT_OK) {
        // FWHT along 2^m: n*m adds; mixing with H_K: K*n adds (a K x K sign matrix per column)
        double adds = (double)n * info.m + (info.K > 1 ? (double)info.K * (double)n : 0.0);
        printf("full Hadamard  K=%lld x 2^%d  [%s]  H_K: %s", (long long)info.K, info.m, info.text,
               construction_name(info.construction));
        if (info.construction == QUAROT_HADAMARD_PALEY1 || info.construction == QUAROT_HADAMARD_PALEY2)
            printf(" over GF(%lld)", (long long)info.q);
        if (info.construction == QUAROT_HADAMARD_KRONECKER)
            printf(" H_%lld (x) H_%lld", (long long)info.a, (long long)info.b);
        printf(";  %.4g adds/row\n", adds);
    } else {
        int64_t b = quarot_hadamard_largest_block(n, n);
        printf("no full Hadamard (%s)\n", info.text);
        printf("%-28s %7s  -> block-diagonal: %lld blocks of order %lld", "", "", (long long)(n / b), (long long)b);
        if (b > 1) {
            quarot_hadamard_info bi;
            if (quarot_hadamard_info_get(b, &bi) == QUAROT_OK) printf(" [%s]", bi.text);
        }
        printf(", or a seeded random orthogonal %lldx%lld (offline rotations only)\n", (long long)n, (long long)n);
    }
}

int main(int argc, char** argv) {
    int i;
    if (argc <= 1) {
        for (i = 0; i < (int)(sizeof default_dims / sizeof default_dims[0]); ++i) {
            char label[64];
            snprintf(label, sizeof label, "%s %s", default_dims[i].model, default_dims[i].what);
            describe(label, default_dims[i].n);
        }
        return 0;
    }
    for (i = 1; i < argc; ++i) {   // check every argument before printing anything
        char* end = NULL;
        long long v;
        errno = 0;
        v = strtoll(argv[i], &end, 10);
        if (errno || end == argv[i] || *end != '\0' || v < 1 || v > QUAROT_HADAMARD_MAX_ORDER) {
            fprintf(stderr, "hadamard_sizes: bad dimension '%s' (want an integer in 1..2^32)\n", argv[i]);
            return 2;
        }
    }
    for (i = 1; i < argc; ++i) describe("dimension", (int64_t)strtoll(argv[i], NULL, 10));
    return 0;
}
