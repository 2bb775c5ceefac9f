/* hand_block.c: W16's transformer block written as plain C loops (hand.h):
 * the reference kiln's fused and eager block are checked and timed against.
 * Products are dot products over contiguous rows (torch's weight layout),
 * which the compiler vectorizes; attention is causal, one query row at a
 * time, with its softmax over the row's scores held in a small buffer. */
#include "hand.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const hand_block *b;
  const float *x, *w, *bias;   /* linear: x (rows, in), w (out, in) */
  float *y;                    /* (rows, out) */
  int64_t in, out;
  int gelu;                    /* linear: gelu(y) */
  const float *q, *k, *v;      /* attention: (B*T, D) rows, head h at columns h*dh */
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

static void linear(const hand_block *b, float *y, const float *x, const float *w, const float *bias, int64_t in,
                   int64_t out, int gelu, int threads) {
  block_args a = {.b = b, .x = x, .w = w, .bias = bias, .y = y, .in = in, .out = out, .gelu = gelu};
  hand_parallel_for(threads, b->batch * b->seq, linear_body, &a);
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

/* Rows (b, h, t) of causal attention: out row t of head h attends to keys 0..t. */
static void attention_body(void *ctx, int64_t lo, int64_t hi) {
  const block_args *a = ctx;
  const hand_block *b = a->b;
  int64_t T = b->seq, D = b->dim, dh = D / b->heads;
  float scale = 1.0f / sqrtf((float)dh), *p = malloc(sizeof *p * (size_t)T);
  if (!p) return;   /* the check of the result reports it */
  for (int64_t row = lo; row < hi; row++) {
    int64_t t = row % T, h = row / T % b->heads, bt = row / T / b->heads * T;
    const float *q = a->q + (bt + t) * D + h * dh;
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j <= t; j++) {
      p[j] = dot(q, a->k + (bt + j) * D + h * dh, dh) * scale;
      mx = fmaxf(mx, p[j]);
    }
    for (int64_t j = 0; j <= t; j++) sum += p[j] = expf(p[j] - mx);
    float *restrict o = a->y + (bt + t) * D + h * dh;
    memset(o, 0, sizeof *o * (size_t)dh);
    for (int64_t j = 0; j <= t; j++) {
      const float *restrict v = a->v + (bt + j) * D + h * dh;
      for (int64_t d = 0; d < dh; d++) o[d] += p[j] / sum * v[d];
    }
  }
  free(p);
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
    linear(b, q, h, b->wq, NULL, D, D, 0, threads);
    linear(b, k, h, b->wk, NULL, D, D, 0, threads);
    linear(b, v, h, b->wv, NULL, D, D, 0, threads);
    block_args a = {.b = b, .q = q, .k = k, .v = v, .y = at};
    hand_parallel_for(threads, b->batch * b->heads * b->seq, attention_body, &a);
    linear(b, out, at, b->wo, NULL, D, D, 0, threads);
    add_rows(out, x, n);                          /* x1 = x + attention */
    rms_norm(h, out, b->g2, rows, D);
    linear(b, f, h, b->w1, b->b1, D, b->mlp, 1, threads);
    linear(b, h, f, b->w2, b->b2, b->mlp, D, 0, threads);
    add_rows(out, h, n);                          /* x1 + mlp */
  }
  free(h), free(q), free(k), free(v), free(at), free(f);
}
