/* test_models.c: the examples' networks end to end (examples/models.c): a
 * causal transformer block's loss and logits, and a small CNN's logits,
 * fused and eager, against the reference evaluator. */
#include "check_main.h"
#include "models.h"
#include "util/testutil.h"

static transformer tm = {.vocab = 32, .dim = 16, .heads = 2, .mlp = 32, .batch = 2, .seq = 8};
static convnet cm = {.in_channels = 3, .c1 = 4, .c2 = 8, .classes = 5};

static kiln_tensor *tokens(void) {
  int64_t v[16];
  for (int i = 0; i < 16; i++) v[i] = (i * 7 + 3) % tm.vocab;
  return kiln_from_data(v, KILN_I64, KILN_SHAPE(tm.batch, tm.seq));
}

static kiln_tensor *build_loss(const void *ctx) {
  (void)ctx;
  return transformer_loss(&tm, tokens(), NULL);
}

static kiln_tensor *build_logits(const void *ctx) {
  (void)ctx;
  return transformer_logits(&tm, tokens());
}

static kiln_tensor *build_convnet(const void *ctx) {
  (void)ctx;
  return convnet_forward(&cm, tu_data(KILN_F32, KILN_SHAPE(2, 3, 9, 8), 70, TU_SMALL));
}

START_TEST(transformer_loss_and_logits) {
  transformer_init(&tm, 5);
  char why[512];
  ck_assert_msg(tu_check_fused_eager(build_loss, NULL, KILN_F32, (ref_tol){1e-4, 1e-5}, why, sizeof why), "loss: %s", why);
  ck_assert_msg(tu_check_fused_eager(build_logits, NULL, KILN_F32, (ref_tol){1e-4, 1e-5}, why, sizeof why), "logits: %s", why);
  kiln_scope_begin();
  kiln_tensor *loss = build_loss(NULL);
  ck_assert_int_eq(kiln_ndim(loss), 0);
  float v = *(const float *)kiln_data(loss);   /* near log(vocab) for small random weights */
  ck_assert_msg(v > 3.0f && v < 3.9f, "loss %g", v);
  kiln_scope_end();
  /* The block fuses (23 kernels; eager: 70-odd). Kernels that would wait on
   * each other through a third used to make the whole graph fall back to
   * one kernel per op (57 here); now only side-by-side merging is given up. */
  kiln_scope_begin();
  kiln_tensor *t = tokens();
  ck_assert_int_eq(kiln_realize(t), KILN_OK);
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize(transformer_loss(&tm, t, NULL)), KILN_OK);
  ck_assert_msg(kiln_stats().kernels_launched <= 24, "%llu kernels", (unsigned long long)kiln_stats().kernels_launched);
  kiln_scope_end();
  transformer_free(&tm);
}
END_TEST

START_TEST(convnet_logits) {
  convnet_init(&cm, 6);
  char why[512];
  ck_assert_msg(tu_check_fused_eager(build_convnet, NULL, KILN_F32, (ref_tol){1e-4, 1e-5}, why, sizeof why), "%s", why);
  convnet_free(&cm);
}
END_TEST

static Suite *models_suite(void) {
  Suite *s = suite_create("models");
  TCase *t = tu_tcase(s, "end_to_end");
  tcase_add_test(t, transformer_loss_and_logits);
  tcase_add_test(t, convnet_logits);
  return s;
}

KILN_TEST_MAIN(models_suite)
