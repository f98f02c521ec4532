/* quickstart.c - the README's quick start as a whole program: rotate an activation row and a weight
   matrix with the same random Hadamard Q, and check that the layer's output does not change
   (x*Q)(W*Q)^T = x*W^T, while the largest |activation| shrinks toward the average.

   A linear layer computes y = x*W^T with W[out][in]. Rotating its input side by an orthogonal Q
   (W <- W*Q) and its input (x <- x*Q) leaves y unchanged; a random Hadamard Q spreads an outlier
   channel over all channels, which is what makes 4-bit per-token quantization of x work. */
#define QUAROT_IMPLEMENTATION
#include "quarot.h"

#include <math.h>
#include <stdio.h>

enum { N = 4096, OUT = 8 };

int main(void) {
    static float x[N], w[OUT * N];
    float y0[OUT], y1[OUT], maxabs0 = 0, maxabs1 = 0, worst = 0;
    int i, o;
    for (i = 0; i < N; ++i) x[i] = (float)sin(0.1 * i);
    x[7] = 80.0f;                                        /* an outlier channel */
    for (i = 0; i < OUT * N; ++i) w[i] = (float)cos(0.37 * i) / 64.0f;
    for (o = 0; o < OUT; ++o) { double s = 0; for (i = 0; i < N; ++i) s += (double)x[i] * w[o * N + i]; y0[o] = (float)s; }
    for (i = 0; i < N; ++i) if (fabsf(x[i]) > maxabs0) maxabs0 = fabsf(x[i]);

    /* --- the quick start --- */
    quarot_rotation q;
    quarot_rotation_desc d = {0};
    d.n = N;                                             /* random Hadamard D*H/sqrt(n), seed 0 */
    if (quarot_rotation_init(&q, &d, NULL) != QUAROT_OK) return 1;
    quarot_rotation_apply_f32(&q, x, 1, N, 0, NULL, 0);    /* activation row: x <- x*Q */
    quarot_rotation_apply_f32(&q, w, OUT, N, 0, NULL, 0);  /* weight rows:    W <- W*Q */
    printf("Q: %s\n", q.text);
    quarot_rotation_free(&q);
    /* --- */

    for (o = 0; o < OUT; ++o) { double s = 0; for (i = 0; i < N; ++i) s += (double)x[i] * w[o * N + i]; y1[o] = (float)s; }
    for (i = 0; i < N; ++i) if (fabsf(x[i]) > maxabs1) maxabs1 = fabsf(x[i]);
    for (o = 0; o < OUT; ++o) if (fabsf(y1[o] - y0[o]) > worst) worst = fabsf(y1[o] - y0[o]);
    printf("layer output unchanged: max |y_rotated - y| = %.2e (|y| ~ %.2f)\n", (double)worst, (double)fabsf(y0[0]));
    printf("max |x| before %.1f, after %.2f (the outlier is spread over all %d channels)\n", (double)maxabs0, (double)maxabs1, N);
    return worst < 1e-3f ? 0 : 1;
}
