/* conv.h: W14, conv2d 3x3 64->64 on 8x64x56x56 + bias + relu (bench/conv.c),
 * for kiln_bench's workload table. */
#ifndef KILN_BENCH_CONV_H
#define KILN_BENCH_CONV_H

#include <kiln.h>
#include <stdint.h>

/* FLOPs of one run: 2 * N * O * OH * OW * C * kh * kw. */
#define W14_FLOPS (2.0 * 8 * 64 * 56 * 56 * 64 * 9)
/* The state, its kiln tensors made by place (kiln_bench's placed); the
 * expected result comes from the im2col + sgemm row. NULL out of memory. */
void *w14_setup_with(kiln_tensor *(*place)(kiln_tensor *));
kiln_tensor *w14_build(void *st);
const float *w14_expected(void *st, int64_t *n);
void w14_teardown(void *st);
/* im2col (a 7 MiB buffer per image, written then read) + OpenBLAS sgemm + a C bias-relu epilogue. */
void w14_im2col_sgemm(void *st, int threads);
/* The same sgemm and epilogue on an im2col buffer built once at setup: the
 * product without the im2col's traffic. */
void w14_sgemm_only(void *st, int threads);

#endif
