/* hand_block.c: W16's transformer block written as plain C loops (hand.h):
 * the reference kiln's fused and eager block are checked and timed against.
 * Products are dot products over contiguous rows (torch's weight layout),
 * which the compiler vectorizes; attention is causal, one query row at a
 * time (hand_causal_attention, W15's C reference too). */
#include "hand.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const float *x, *w, *bias;   /* linear: x (rows, in), w (out, in) */
  float *y;                    /* (rows, out) */
  int64_t in, out;
  int gelu;                    /* linear: gelu(y) */
} block_args;

static float dot(const float *restrict a, const float *restrict b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

static void linear_body(void *ctx, int64_t lo, int64_t hi) {
  const block_args *a = ctx;
  for (int64_t r = lo; r < hi; r++) {
    const float *xr = a->x + r * a->in;
    float *yr = a->y + r * a->out;
    for (int64_t o = 0; o < a->out; o++) {
      float t = dot(xr, a->w + o * a->in, a->in) + (a->bias ? a->bias[o] : 0.0f);
      yr[o] = a->gelu ? 0.5f * t * (1.0f + erff(t * (float)M_SQRT1_2)) : t;
    }
  }
}

void hand_linear(float *y, const float *x, const float *w, const float *bias, int64_t rows, int64_t in,
                 int64_t out, int gelu, int threads) {
  block_args a = {.x = x, .w = w, .bias = bias, .y = y, .in = in, .out = out, .gelu = gelu};
  hand_parallel_for(threads, rows, linear_body, &a);
}

/* y = x / sqrt(mean(x^2) + 1e-5) * g per row of dim. */
static void rms_norm(float *restrict y, const float *restrict x, const float *restrict g, int64_t rows,
                     int64_t dim) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * dim;
    float s = 1.0f / sqrtf(dot(xr, xr, dim) / (float)dim + 1e-5f);
    for (int64_t i = 0; i < dim; i++) y[r * dim + i] = xr[i] * s * g[i];
  }
}

static void attention_rows(void *ctx, int64_t lo, int64_t hi) {
  const hand_attention *a = ctx;
  int64_t T = a->seq, dh = a->dh;
  float scale = 1.0f / sqrtf((float)dh), *p = malloc(sizeof *p * (size_t)T);
  for (int64_t row = lo; p && row < hi; row++) {
    int64_t t = row % T, h = row / T % a->heads, b = row / T / a->heads;
    int64_t head = b * a->batch_stride + h * a->head_stride, at = head + t * a->row_stride;
    const float *q = a->q + at;
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j <= t; j++) {
      p[j] = dot(q, a->k + head + j * a->row_stride, dh) * scale;
      mx = fmaxf(mx, p[j]);
    }
    for (int64_t j = 0; j <= t; j++) sum += p[j] = expf(p[j] - mx);
    float *restrict o = a->out + at;
    memset(o, 0, sizeof *o * (size_t)dh);
    for (int64_t j = 0; j <= t; j++) {
      const float *restrict v = a->v + head + j * a->row_stride;
      for (int64_t d = 0; d < dh; d++) o[d] += p[j] * v[d];
    }
    for (int64_t d = 0; d < dh; d++) o[d] /= sum;
  }
  free(p);   /* a failed allocation leaves out as it was: the check of the result reports it */
}

void hand_causal_attention(const hand_attention *a, int threads) {
  hand_parallel_for(threads, a->batch * a->heads * a->seq, attention_rows, (void *)a);
}

static void add_rows(float *restrict y, const float *restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void hand_transformer_block(float *out, const float *x, const hand_block *b, int threads) {
  int64_t rows = b->batch * b->seq, D = b->dim, n = rows * D;
  float *h = malloc(sizeof *h * (size_t)n), *q = malloc(sizeof *q * (size_t)n);
  float *k = malloc(sizeof *k * (size_t)n), *v = malloc(sizeof *v * (size_t)n), *at = malloc(sizeof *at * (size_t)n);
  float *f = malloc(sizeof *f * (size_t)(rows * b->mlp));
  if (h && q && k && v && at && f) {
    rms_norm(h, x, b->g1, rows, D);
    hand_linear(q, h, b->wq, NULL, rows, D, D, 0, threads);
    hand_linear(k, h, b->wk, NULL, rows, D, D, 0, threads);
    hand_linear(v, h, b->wv, NULL, rows, D, D, 0, threads);
    int64_t T = b->seq, dh = D / b->heads;   /* (B*T, D) rows, head h at columns h*dh */
    hand_causal_attention(&(hand_attention){q, k, v, at, b->batch, b->heads, T, dh, T * D, dh, D}, threads);
    hand_linear(out, at, b->wo, NULL, rows, D, D, 0, threads);
    add_rows(out, x, n);                          /* x1 = x + attention */
    rms_norm(h, out, b->g2, rows, D);
    hand_linear(f, h, b->w1, b->b1, rows, D, b->mlp, 1, threads);
    hand_linear(h, f, b->w2, b->b2, rows, b->mlp, D, 0, threads);
    add_rows(out, h, n);                          /* x1 + mlp */
  }
  free(h), free(q), free(k), free(v), free(at), free(f);
}
