/* models.c: the examples' transformer block and CNN (models.h). */
#include "models.h"

#include <stddef.h>

/* A realized parameter: normal * scale, or all ones (scale 0). */
static kiln_tensor *param(int ndim, const int64_t *shape, double scale) {
  kiln_tensor *t = scale ? kiln_muls(kiln_randn_at(__FILE__, __LINE__, ndim, shape, KILN_F32), scale)
                         : kiln_ones_at(__FILE__, __LINE__, ndim, shape, KILN_F32);
  kiln_realize(t);
  return t;
}

static void release_all(kiln_tensor **t, size_t n) {
  for (size_t i = 0; i < n; i++) kiln_release(t[i]);
}

void transformer_init(transformer *m, uint64_t seed) {
  kiln_manual_seed(seed);
  kiln_scope_begin();
  int64_t v = m->vocab, d = m->dim, h = m->mlp;
  kiln_tensor **keep[] = {&m->wte, &m->g1, &m->wq, &m->wk, &m->wv, &m->wo, &m->g2, &m->w1, &m->b1, &m->w2, &m->b2};
  m->wte = param(KILN_SHAPE(v, d), 0.02);
  m->g1 = param(KILN_SHAPE(d), 0);
  m->wq = param(KILN_SHAPE(d, d), 0.02);
  m->wk = param(KILN_SHAPE(d, d), 0.02);
  m->wv = param(KILN_SHAPE(d, d), 0.02);
  m->wo = param(KILN_SHAPE(d, d), 0.02);
  m->g2 = param(KILN_SHAPE(d), 0);
  m->w1 = param(KILN_SHAPE(h, d), 0.02);
  m->b1 = param(KILN_SHAPE(h), 0.02);
  m->w2 = param(KILN_SHAPE(d, h), 0.02);
  m->b2 = param(KILN_SHAPE(d), 0.02);
  for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) kiln_keep(*keep[i]);
  kiln_scope_end();
}

void transformer_free(transformer *m) {
  release_all((kiln_tensor *[]){m->wte, m->g1, m->wq, m->wk, m->wv, m->wo, m->g2, m->w1, m->b1, m->w2, m->b2}, 11);
}

/* x (B, T, D) projected by w and split into heads: (B, H, T, D / H). */
static kiln_tensor *heads(const transformer *m, kiln_tensor *x, kiln_tensor *w) {
  kiln_tensor *p = kiln_linear(x, w, NULL);
  return kiln_transpose(kiln_reshape(p, KILN_SHAPE(m->batch, m->seq, m->heads, m->dim / m->heads)), 1, 2);
}

kiln_tensor *transformer_block(const transformer *m, kiln_tensor *x) {
  kiln_tensor *h = kiln_rms_norm(x, 1, m->g1, 1e-5);
  kiln_tensor *a = kiln_scaled_dot_product_attention(heads(m, h, m->wq), heads(m, h, m->wk), heads(m, h, m->wv), NULL,
                                                     1, 0, 0);
  a = kiln_reshape(kiln_transpose(a, 1, 2), KILN_SHAPE(m->batch, m->seq, m->dim));
  x = kiln_add(x, kiln_linear(a, m->wo, NULL));
  h = kiln_rms_norm(x, 1, m->g2, 1e-5);
  return kiln_add(x, kiln_linear(kiln_gelu(kiln_linear(h, m->w1, m->b1)), m->w2, m->b2));
}

kiln_tensor *transformer_logits(const transformer *m, kiln_tensor *tokens) {
  kiln_tensor *x = transformer_block(m, kiln_embedding(tokens, m->wte));
  return kiln_linear(kiln_rms_norm(x, 1, NULL, 1e-5), m->wte, NULL);   /* tied to the embedding */
}

kiln_tensor *transformer_loss(const transformer *m, kiln_tensor *tokens, kiln_tensor **logits) {
  kiln_tensor *y = transformer_logits(m, tokens);
  if (logits) *logits = y;
  int64_t n = m->batch * (m->seq - 1);
  kiln_tensor *pred = kiln_reshape(kiln_slice(y, 1, 0, m->seq - 1, 1), KILN_SHAPE(n, m->vocab));
  kiln_tensor *next = kiln_reshape(kiln_slice(tokens, 1, 1, m->seq, 1), KILN_SHAPE(n));
  return kiln_cross_entropy(pred, next, NULL, "mean", -100, 0);
}

void convnet_init(convnet *m, uint64_t seed) {
  kiln_manual_seed(seed);
  kiln_scope_begin();
  int64_t c0 = m->in_channels, c1 = m->c1, c2 = m->c2;
  m->k1 = param(KILN_SHAPE(c1, c0, 3, 3), 0.3);
  m->b1 = param(KILN_SHAPE(c1), 0.1);
  m->m1 = param(KILN_SHAPE(c1), 0.1);
  m->v1 = kiln_adds(kiln_abs(param(KILN_SHAPE(c1), 0.5)), 0.5);
  m->k2 = param(KILN_SHAPE(c2, c1, 3, 3), 0.2);
  m->b2 = param(KILN_SHAPE(c2), 0.1);
  m->m2 = param(KILN_SHAPE(c2), 0.1);
  m->v2 = kiln_adds(kiln_abs(param(KILN_SHAPE(c2), 0.5)), 0.5);
  m->fc = param(KILN_SHAPE(m->classes, c2), 0.3);
  m->fcb = param(KILN_SHAPE(m->classes), 0.1);
  kiln_tensor *all[] = {m->k1, m->b1, m->m1, m->v1, m->k2, m->b2, m->m2, m->v2, m->fc, m->fcb};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kiln_realize(kiln_keep(all[i]));
  kiln_scope_end();
}

void convnet_free(convnet *m) {
  release_all((kiln_tensor *[]){m->k1, m->b1, m->m1, m->v1, m->k2, m->b2, m->m2, m->v2, m->fc, m->fcb}, 10);
}

/* conv 3x3 (padding 1) + bias, batch norm, relu, max pool 2. */
static kiln_tensor *stage(kiln_tensor *x, kiln_tensor *k, kiln_tensor *b, kiln_tensor *mean, kiln_tensor *var) {
  kiln_tensor *c = kiln_conv2d(x, k, b, 1, (int64_t[]){1}, 1, (int64_t[]){1}, 0, NULL, 1);
  kiln_tensor *r = kiln_relu(kiln_batch_norm(c, mean, var, NULL, NULL, 1e-5));
  return kiln_max_pool2d(r, 1, (int64_t[]){2}, 0, NULL, 0, NULL, 0, NULL, 0);
}

kiln_tensor *convnet_forward(const convnet *m, kiln_tensor *images) {
  kiln_tensor *x = stage(images, m->k1, m->b1, m->m1, m->v1);
  x = stage(x, m->k2, m->b2, m->m2, m->v2);
  x = kiln_flatten_dims(kiln_adaptive_avg_pool2d(x, 1, (int64_t[]){1}), 1, -1);
  return kiln_linear(x, m->fc, m->fcb);
}
