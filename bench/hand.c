/* hand.c: the hand-written C loops of the benchmark (see hand.h). Written the
 * way a careful C programmer would: one fused pass, restrict pointers, no
 * intermediate arrays; the compiler flags are set in bench/CMakeLists.txt. */
#include "hand.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct {
  void (*body)(void *ctx, int64_t lo, int64_t hi);
  void *ctx;
  int64_t lo, hi;
  pthread_t tid;
  int started;   /* tid is a running thread to join */
} chunk;

static void *chunk_run(void *p) {
  chunk *c = p;
  c->body(c->ctx, c->lo, c->hi);
  return NULL;
}

void hand_parallel_for(int threads, int64_t n, void (*body)(void *ctx, int64_t lo, int64_t hi),
                       void *ctx) {
  chunk *cs = threads > 1 ? malloc(sizeof *cs * (size_t)threads) : NULL;
  if (!cs) {  /* one thread, or no memory: still correct, only slower */
    body(ctx, 0, n);
    return;
  }
  for (int i = 0; i < threads; i++)
    cs[i] = (chunk){.body = body, .ctx = ctx, .lo = n * i / threads, .hi = n * (i + 1) / threads};
  for (int i = 1; i < threads; i++)
    cs[i].started = pthread_create(&cs[i].tid, NULL, chunk_run, &cs[i]) == 0;
  chunk_run(&cs[0]);
  /* A chunk whose thread failed to start runs here instead. */
  for (int i = 1; i < threads; i++) {
    if (cs[i].started) pthread_join(cs[i].tid, NULL);
    else chunk_run(&cs[i]);
  }
  free(cs);
}

typedef struct {
  float *out;
  const float *a, *b, *c;
} w1_args;

static void w1_body(void *ctx, int64_t lo, int64_t hi) {
  const w1_args *w = ctx;
  float *restrict out = w->out;
  const float *restrict a = w->a, *restrict b = w->b, *restrict c = w->c;
  for (int64_t i = lo; i < hi; i++) {
    float x = a[i], t = x * b[i] + c[i];
    out[i] = (t > 0.0f ? t : 0.0f) * (1.0f / (1.0f + expf(-x)));
  }
}

void hand_w1(float *out, const float *a, const float *b, const float *c, int64_t n, int threads) {
  w1_args w = {out, a, b, c};
  hand_parallel_for(threads, n, w1_body, &w);
}

typedef struct {
  float *c;
  const float *b;
  int64_t n;
} gelu_args;

static void gelu_body(void *ctx, int64_t lo, int64_t hi) {
  const gelu_args *w = ctx;
  const float *restrict b = w->b;
  for (int64_t i = lo; i < hi; i++) {
    float *restrict c = w->c + i * w->n;
    for (int64_t j = 0; j < w->n; j++) {
      float x = c[j] + b[j];
      c[j] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    }
  }
}

void hand_bias_gelu(float *c, const float *b, int64_t m, int64_t n, int threads) {
  gelu_args w = {c, b, n};
  hand_parallel_for(threads, m, gelu_body, &w);
}
