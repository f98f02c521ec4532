/* qx_logits.h - what the evaluation and the inference engine read off a row of logits: the loss of a
   target token and the greedy choice. One implementation, so that eval/ and engine/ score and pick
   alike. */
#ifndef QX_LOGITS_H
#define QX_LOGITS_H

#include "quarot.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -log softmax(logits)[target], stably in double. */
double qx_logits_nll(const float* logits, int64_t vocab, int32_t target);
/* Index of the largest logit (the lowest index among ties; NaN never wins). */
int32_t qx_logits_argmax(const float* logits, int64_t vocab);

#ifdef __cplusplus
}
#endif
#endif
