/* attention.h: W15, causal attention (batch 4, 8 heads, head dim 64) at a
 * sequence length of 1024 or 4096: kiln's fused SDPA, kiln's plain
 * composition (two matmuls and a softmax) and hand-written C. */
#ifndef KILN_BENCH_ATTENTION_H
#define KILN_BENCH_ATTENTION_H

#include <kiln.h>

#define W15_B 4
#define W15_H 8
#define W15_D 64
/* The FLOPs of one run: q k^T and p v, 2 * S * S * D each per head, causal
 * counted as half. */
#define W15_FLOPS(s) (4.0 * W15_B * W15_H * (double)(s) * (double)(s) * W15_D / 2)

void *w15_setup_1024(void);
void *w15_setup_4096(void);
kiln_tensor *w15_build(void *st);
const float *w15_expected(void *st, int64_t *n);
void w15_teardown(void *st);
void w15_plain(void *st, int threads);   /* the composition, realized */
void w15_hand(void *st, int threads);    /* the C loops, into the reference */

#endif
