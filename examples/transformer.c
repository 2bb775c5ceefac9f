/* transformer.c: a causal transformer block end to end on seeded random
 * weights: token ids -> embedding -> RMS norm -> multi-head causal
 * attention -> residual -> RMS norm -> GELU MLP -> residual -> logits ->
 * cross entropy against the next tokens. Prints the loss, the kernels one
 * forward launches fused and eager, and the time of each. */
#include <stdio.h>
#include <time.h>

#include "models.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* One forward (a fresh graph), realized; its loss, kernels and time. */
static int forward(const transformer *m, kiln_tensor *tokens, const char *mode) {
  kiln_scope_begin();
  kiln_reset_stats();
  double t0 = now_ms();
  kiln_tensor *loss = transformer_loss(m, tokens, NULL);
  kiln_status st = kiln_realize(loss);
  double ms = now_ms() - t0;
  if (st != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_last_error());
    kiln_scope_end();
    return 1;
  }
  float v;
  kiln_copy_to_host(loss, &v, sizeof v);
  printf("%-6s loss %.6f  %3llu kernels  %8.2f ms (compiles included: %llu)\n", mode, v,
         (unsigned long long)kiln_stats().kernels_launched, ms, (unsigned long long)kiln_stats().compiles);
  kiln_scope_end();
  return 0;
}

int main(void) {
  transformer m = {.vocab = 512, .dim = 128, .heads = 4, .mlp = 512, .batch = 2, .seq = 64};
  transformer_init(&m, 1234);
  kiln_manual_seed(99);
  kiln_tensor *tokens = kiln_randint(0, m.vocab, KILN_SHAPE(m.batch, m.seq), KILN_I64);
  kiln_realize(tokens);
  printf("transformer block: vocab %lld, dim %lld, %lld heads, MLP %lld, batch %lld x %lld tokens\n",
         (long long)m.vocab, (long long)m.dim, (long long)m.heads, (long long)m.mlp, (long long)m.batch,
         (long long)m.seq);
  int bad = forward(&m, tokens, "fused") || forward(&m, tokens, "fused");   /* the second: all cached */
  kiln_set_eager(1);
  bad = bad || forward(&m, tokens, "eager");
  kiln_set_eager(0);
  kiln_release(tokens);
  transformer_free(&m);
  kiln_shutdown();
  return bad;
}
