/* qx_logits.c - see qx_logits.h. */
#include "model/qx_logits.h"

#include <math.h>

double qx_logits_nll(const float* logits, int64_t vocab, int32_t target) {
    /* log softmax_t = l_t - (m + log sum_j exp(l_j - m)), m = max_j l_j */
    double m = logits[0], sum = 0.0;
    int64_t j;
    for (j = 1; j < vocab; ++j) if (logits[j] > m) m = logits[j];
    for (j = 0; j < vocab; ++j) sum += exp((double)logits[j] - m);
    return m + log(sum) - (double)logits[target];
}

int32_t qx_logits_argmax(const float* logits, int64_t vocab) {
    int64_t j, best = 0;
    /* strictly greater wins, so the lowest index keeps a tie; a NaN at `best` yields to any number */
    for (j = 1; j < vocab; ++j)
        if (logits[j] > logits[best] || (logits[best] != logits[best] && logits[j] == logits[j])) best = j;
    return (int32_t)best;
}
