/* attention.c: W15's setup, kiln expressions and hand-written C (hand.h's
 * hand_causal_attention, whose loops gcc vectorizes; -ffast-math: libmvec's
 * expf).
 * Setup prints the peak memory each kiln form allocates above its inputs. */
#include "attention.h"

#include "common.h"
#include "hand.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  int64_t s;
  float *q, *k, *v, *out;                /* [B, H, S, D]; out: the C result, the reference */
  kiln_tensor *tq, *tk, *tv;             /* zero-copy views of q, k, v */
  double plain_peak;                     /* MiB above the inputs, the composition's last run */
} w15_state;

/* A fixed xorshift sequence in [-1, 1). */
static void fill(float *p, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    p[i] = (float)((double)(seed >> 11) * 0x1p-52 - 1.0);
  }
}

void w15_teardown(void *p) {
  w15_state *s = p;
  if (s->plain_peak > 0) printf("W15-%lld kiln-plain peak memory above the inputs: %.1f MiB\n", (long long)s->s, s->plain_peak);
  kiln_release(s->tq);
  kiln_release(s->tk);
  kiln_release(s->tv);
  free(s->q);
  free(s->k);
  free(s->v);
  free(s->out);
  free(s);
}

void w15_hand(void *st, int threads) {
  const w15_state *s = st;
  int64_t n = s->s * W15_D;   /* [B, H, S, D] */
  hand_causal_attention(&(hand_attention){s->q, s->k, s->v, s->out, W15_B, W15_H, s->s, W15_D, W15_H * n, n, W15_D},
                        threads);
}

kiln_tensor *w15_build(void *p) {
  w15_state *s = p;
  return kiln_scaled_dot_product_attention(s->tq, s->tk, s->tv, NULL, 1, 0, 0);
}

/* softmax(q k^T / 8 masked to j <= i) v from public ops, as a user would
 * write it without SDPA: kiln stores the B*H*S*S scores. */
static kiln_tensor *plain(const w15_state *s) {
  kiln_tensor *scores = kiln_muls(kiln_matmul(s->tq, kiln_transpose(s->tk, -2, -1)), 1.0 / sqrt(W15_D));
  kiln_tensor *keep = kiln_tril(kiln_ones(KILN_SHAPE(s->s, s->s), KILN_BOOL), 0);
  kiln_tensor *ninf = kiln_full(KILN_SHAPE(1), -INFINITY, KILN_F32);
  return kiln_matmul(kiln_softmax(kiln_where(keep, scores, ninf), -1), s->tv);
}

/* MiB kiln allocated above what it held before realizing t. */
static double peak_mib(kiln_tensor *t) {
  kiln_memory_stats_t before, after;
  kiln_memory_stats(kiln_cpu_device(), &before);
  kiln_reset_peak_memory();
  if (kiln_realize(t) != KILN_OK) printf("ERROR W15: %s\n", kiln_last_error());
  kiln_memory_stats(kiln_cpu_device(), &after);
  return (double)(after.peak_bytes - before.allocated_bytes) / (1 << 20);
}

void w15_plain(void *p, int threads) {
  (void)threads;   /* kiln's pool has the bench's thread count */
  w15_state *s = p;
  kiln_scope_begin();
  s->plain_peak = peak_mib(plain(s));
  kiln_scope_end();
}

static void *setup(int64_t s) {
  w15_state *st = calloc(1, sizeof *st);
  int64_t n = W15_B * W15_H * s * W15_D;
  if (!st) return NULL;
  st->s = s;
  st->q = bench_alloc(sizeof(float) * (size_t)n), st->k = bench_alloc(sizeof(float) * (size_t)n);
  st->v = bench_alloc(sizeof(float) * (size_t)n), st->out = bench_alloc(sizeof(float) * (size_t)n);
  if (!st->q || !st->k || !st->v || !st->out) {
    w15_teardown(st);
    return NULL;
  }
  fill(st->q, n, 1501), fill(st->k, n, 1502), fill(st->v, n, 1503), fill(st->out, n, 1504);
  st->tq = kiln_from_buffer(st->q, KILN_F32, KILN_SHAPE(W15_B, W15_H, s, W15_D));
  st->tk = kiln_from_buffer(st->k, KILN_F32, KILN_SHAPE(W15_B, W15_H, s, W15_D));
  st->tv = kiln_from_buffer(st->v, KILN_F32, KILN_SHAPE(W15_B, W15_H, s, W15_D));
  kiln_scope_begin();
  printf("W15-%lld kiln-fused peak memory above the inputs: %.1f MiB (the output: %.1f MiB; the scores would be "
         "%.1f MiB)\n", (long long)s, peak_mib(w15_build(st)), (double)n * 4 / (1 << 20),
         (double)(W15_B * W15_H) * (double)(s * s) * 4 / (1 << 20));
  kiln_scope_end();
  w15_hand(st, 1);
  return st;
}

void *w15_setup_1024(void) { return setup(1024); }
void *w15_setup_4096(void) { return setup(4096); }

const float *w15_expected(void *p, int64_t *n) {
  w15_state *s = p;
  *n = W15_B * W15_H * s->s * W15_D;
  return s->out;
}
