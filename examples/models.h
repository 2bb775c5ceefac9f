/* models.h: the two small networks of the examples, built from kiln's
 * public API only (examples/transformer.c and examples/convnet.c run them;
 * tests/test_models.c checks them against the reference evaluator). */
#ifndef KILN_EXAMPLE_MODELS_H
#define KILN_EXAMPLE_MODELS_H

#include <kiln.h>

/* A causal transformer block on token ids: embedding, RMS norm, multi-head
 * attention (q, k, v and output projections), residual, RMS norm, a GELU
 * MLP, residual, logits tied to the embedding. */
typedef struct {
  int64_t vocab, dim, heads, mlp, batch, seq;
  kiln_tensor *wte, *g1, *wq, *wk, *wv, *wo, *g2, *w1, *b1, *w2, *b2;
} transformer;

/* Seeded random weights (normal * 0.02, norms' gains 1) for the sizes set in m. */
void transformer_init(transformer *m, uint64_t seed);
void transformer_free(transformer *m);
/* The block alone on activations x (batch, seq, dim): RMS norm, causal
 * attention and residual, RMS norm, MLP and residual. */
kiln_tensor *transformer_block(const transformer *m, kiln_tensor *x);
/* Logits (batch, seq, vocab) of tokens (batch, seq) int64: the embedding,
 * the block, a last RMS norm and the tied projection. */
kiln_tensor *transformer_logits(const transformer *m, kiln_tensor *tokens);
/* The mean cross entropy of each position's logits against the next token
 * (the last position predicts nothing); *logits receives the logits when
 * not NULL. */
kiln_tensor *transformer_loss(const transformer *m, kiln_tensor *tokens, kiln_tensor **logits);

/* A small CNN: twice conv 3x3 (padding 1) + batch norm (inference) + relu +
 * max pool 2, then adaptive average pooling to 1x1 and a linear layer. */
typedef struct {
  int64_t in_channels, c1, c2, classes;
  kiln_tensor *k1, *b1, *m1, *v1, *k2, *b2, *m2, *v2, *fc, *fcb;
} convnet;

void convnet_init(convnet *m, uint64_t seed);
void convnet_free(convnet *m);
/* Class logits (batch, classes) of images (batch, in_channels, H, W). */
kiln_tensor *convnet_forward(const convnet *m, kiln_tensor *images);

#endif
