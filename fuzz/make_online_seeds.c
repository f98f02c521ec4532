/* Writes small seeds of fuzz_online into the directory given as argv[1] (the stories260K hook files
   beside them hold H_172 and cost milliseconds a run; these run in microseconds): hooks of every
   site, power-of-two and K x 2^m sizes (K = 12, 20), with and without signs, two layers, a weights
   line. Build and run:
     cc -std=c99 -I. fuzz/make_online_seeds.c examples/support/quarot_impl.c -lm -o /tmp/seeds &&
     /tmp/seeds fuzz/seeds/online */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quarot.h"

static void save(const char* dir, const char* name, const quarot_online_list* l, const char* weights) {
    char path[1024];
    size_t need = 0;
    char* buf;
    FILE* f;
    if (quarot_online_write(l, NULL, 0, &need) != QUAROT_OK || !(buf = (char*)malloc(need))) return;
    if (quarot_online_write(l, buf, need, &need) != QUAROT_OK) { free(buf); return; }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f) {
        const char* second = strchr(buf, '\n');
        second = second ? strchr(second + 1, '\n') : NULL;   /* the weights line goes after "hooks N" */
        if (weights && second) {
            fwrite(buf, 1, (size_t)(second + 1 - buf), f);
            fprintf(f, "weights %s\n", weights);
            fputs(second + 1, f);
        } else {
            fputs(buf, f);
        }
        fclose(f);
    }
    free(buf);
}

int main(int argc, char** argv) {
    quarot_online_list l;
    float signs[48];
    int i, ok = 1;
    if (argc < 2) { fprintf(stderr, "usage: %s DIR\n", argv[0]); return 2; }
    for (i = 0; i < 48; ++i) signs[i] = (i * 7) % 5 < 2 ? -1.0f : 1.0f;

    quarot_online_list_init(&l, NULL);
    ok &= quarot_online_list_add(&l, 0, QUAROT_SITE_DOWN_INPUT, 12, 1, 12, 1, NULL) == QUAROT_OK;
    ok &= quarot_online_list_add(&l, 0, QUAROT_SITE_O_INPUT, 16, 1, 4, 4, NULL) == QUAROT_OK;
    save(argv[1], "small_k12.txt", &l, "qxh64:0123456789abcdef");
    quarot_online_list_free(&l);

    quarot_online_list_init(&l, NULL);
    ok &= quarot_online_list_add(&l, 1, QUAROT_SITE_Q_ROPE, 32, 4, 8, 1, signs) == QUAROT_OK;
    ok &= quarot_online_list_add(&l, 1, QUAROT_SITE_K_ROPE, 16, 2, 8, 1, signs) == QUAROT_OK;
    ok &= quarot_online_list_add(&l, 1, QUAROT_SITE_DOWN_INPUT, 40, 1, 40, 1, signs) == QUAROT_OK;
    ok &= quarot_online_list_add(&l, 2, QUAROT_SITE_DOWN_INPUT, 48, 2, 24, 1, NULL) == QUAROT_OK;
    save(argv[1], "signs_k20_k12x2.txt", &l, NULL);
    quarot_online_list_free(&l);

    quarot_online_list_init(&l, NULL);
    save(argv[1], "empty.txt", &l, NULL);
    quarot_online_list_free(&l);
    if (!ok) { fprintf(stderr, "a hook was refused\n"); return 1; }
    return 0;
}
