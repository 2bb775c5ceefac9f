/* test_optim.c: the optimizers (train/optim.c) against torch.optim: the same
 * small model, weights and data (given by a formula here and in
 * tests/python/make_optim_reference.py) trained 100 steps with SGD (plain;
 * Nesterov momentum with weight decay), Adam (L2) and AdamW, every loss and
 * the final parameters compared with PyTorch 1.13's (tests/data); a
 * learning-rate schedule that compiles nothing; gradient clipping; the
 * errors. */
#include "check_main.h"
#include "util/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 100, NPARAMS = 4, MAXV = 128 };

/* scale * sin(0.37 i + phase), as the script computes it (in double, then rounded to float). */
static kiln_tensor *table(int n, double scale, double phase, int ndim, const int64_t *shape) {
  float v[MAXV];
  for (int i = 0; i < n; i++) v[i] = (float)(scale * sin(0.37 * i + phase));
  return kiln_from_data(v, KILN_F32, ndim, shape);
}

typedef struct {
  double loss[STEPS];
  int nparam[NPARAMS];
  double param[NPARAMS][MAXV];
} reference;

/* The reference run named name from tests/data/optim_reference.txt. */
static void read_reference(const char *name, reference *r) {
  FILE *fp = fopen(KILN_TEST_DATA "/optim_reference.txt", "r");
  ck_assert_msg(fp, "cannot open %s", KILN_TEST_DATA "/optim_reference.txt");
  static char line[1 << 16];
  int found = 0;
  while (fgets(line, sizeof line, fp)) {
    char run[64], what[64];
    int at;
    if (line[0] == '#' || sscanf(line, "%63s %63s %n", run, what, &at) != 2 || strcmp(run, name)) continue;
    double *dst = !strcmp(what, "loss") ? r->loss : r->param[what[5] - '0'];
    int n = 0, used;
    for (char *p = line + at; n < MAXV && sscanf(p, "%lf%n", &dst[n], &used) == 1; p += used) n++;
    if (strcmp(what, "loss")) r->nparam[what[5] - '0'] = n;
    found++;
  }
  fclose(fp);
  ck_assert_int_eq(found, 1 + NPARAMS);
}

typedef kiln_optim *(*make_fn)(int n, kiln_tensor *const *p);
static kiln_optim *make_sgd(int n, kiln_tensor *const *p) { return kiln_sgd(n, p, 0.1, 0, 0, 0, 0); }
static kiln_optim *make_nesterov(int n, kiln_tensor *const *p) { return kiln_sgd(n, p, 0.05, 0.9, 0, 1e-3, 1); }
static kiln_optim *make_adam(int n, kiln_tensor *const *p) { return kiln_adam(n, p, 1e-2, 0.9, 0.99, 1e-8, 1e-3); }
static kiln_optim *make_adamw(int n, kiln_tensor *const *p) { return kiln_adamw(n, p, 1e-2, 0.9, 0.999, 1e-8, 0.05); }

static const struct { const char *name; make_fn make; } runs[] = {
    {"sgd", make_sgd}, {"sgd_nesterov", make_nesterov}, {"adam", make_adam}, {"adamw", make_adamw}};

START_TEST(matches_torch_optim) {
  reference ref;
  read_reference(runs[_i].name, &ref);
  kiln_tensor *p[NPARAMS] = {table(32, 0.5, 0.1, KILN_SHAPE(8, 4)), table(8, 0.1, 0.2, KILN_SHAPE(8)),
                             table(24, 0.4, 0.3, KILN_SHAPE(3, 8)), table(3, 0.1, 0.4, KILN_SHAPE(3))};
  kiln_tensor *x = table(64, 1.0, 0.5, KILN_SHAPE(16, 4)), *y = table(48, 0.8, 0.6, KILN_SHAPE(16, 3));
  kiln_optim *opt = runs[_i].make(NPARAMS, p);
  ck_assert_msg(opt, "%s", kiln_last_error());
  for (int step = 0; step < STEPS; step++) {
    kiln_scope_begin();
    kiln_tensor *h = kiln_tanh(kiln_linear(x, p[0], p[1]));
    kiln_tensor *loss = kiln_mse_loss(kiln_linear(h, p[2], p[3]), y, "mean"), *g[NPARAMS];
    ck_assert_int_eq(kiln_grad(loss, NULL, NPARAMS, p, g), KILN_OK);
    ck_assert_int_eq(kiln_realize(loss), KILN_OK);   /* realized before the step: no copy of the weights kept */
    ck_assert_msg(kiln_optim_step(opt, g) == KILN_OK, "%s", kiln_last_error());
    double got = kiln_item(loss), want = ref.loss[step];
    ck_assert_msg(fabs(got - want) <= 1e-5 * fabs(want) + 1e-7, "%s step %d: loss %.9g, torch %.9g", runs[_i].name, step, got, want);
    kiln_scope_end();
  }
  for (int i = 0; i < NPARAMS; i++) {
    float v[MAXV];
    ck_assert_int_eq(kiln_copy_to_host(p[i], v, sizeof(float) * (size_t)ref.nparam[i]), KILN_OK);
    for (int k = 0; k < ref.nparam[i]; k++)
      ck_assert_msg(fabs(v[k] - ref.param[i][k]) <= 1e-4 * fabs(ref.param[i][k]) + 1e-6, "%s param %d[%d]: %.9g, torch %.9g",
                    runs[_i].name, i, k, v[k], ref.param[i][k]);
  }
  kiln_optim_free(opt);
  for (int i = 0; i < NPARAMS; i++) kiln_release(p[i]);
  kiln_release(x);
  kiln_release(y);
}
END_TEST

/* A new learning rate each step binds a new launch argument: after the
 * first two steps nothing compiles and no plan is made. */
START_TEST(schedule_compiles_nothing) {
  kiln_tensor *w = table(64, 0.5, 0.1, KILN_SHAPE(8, 8)), *x = table(64, 1, 0.2, KILN_SHAPE(8, 8));
  kiln_optim *opt = kiln_adamw(1, &w, 1e-3, 0.9, 0.999, 1e-8, 1e-2);
  uint64_t compiles = 0, plans = 0;
  for (int step = 0; step < 20; step++) {
    kiln_scope_begin();
    kiln_optim_set_lr(opt, 1e-3 * (1 + cos(step * 0.3)));
    kiln_tensor *g;
    ck_assert_int_eq(kiln_grad(kiln_sum(kiln_tanh(kiln_matmul(x, w))), NULL, 1, &w, &g), KILN_OK);
    ck_assert_int_eq(kiln_optim_step(opt, &g), KILN_OK);
    kiln_scope_end();
    if (step == 2) compiles = kiln_stats().compiles, plans = kiln_stats().plans;
  }
  ck_assert_uint_eq(kiln_stats().compiles, compiles);
  ck_assert_uint_eq(kiln_stats().plans, plans);
  kiln_optim_free(opt);
  kiln_release(w);
  kiln_release(x);
}
END_TEST

/* A whole step over placeholders (forward, loss, kiln_grad, the update)
 * compiled into one function: each run takes a batch, returns the loss and
 * updates the parameters and the optimizer's state in place, exactly as
 * the step built afresh each time does (the same data, a learning rate
 * changed between runs, two batch sizes), with no plan, compile or
 * allocation kept per run once each size has run. */
static void model_params(kiln_tensor **p) {
  p[0] = table(32, 0.5, 0.1, KILN_SHAPE(8, 4));
  p[1] = table(8, 0.1, 0.2, KILN_SHAPE(8));
  p[2] = table(24, 0.4, 0.3, KILN_SHAPE(3, 8));
  p[3] = table(3, 0.1, 0.4, KILN_SHAPE(3));
}

static kiln_tensor *model_loss(kiln_tensor *const *p, kiln_tensor *x, kiln_tensor *y) {
  kiln_tensor *h = kiln_tanh(kiln_linear(x, p[0], p[1]));
  return kiln_mse_loss(kiln_linear(h, p[2], p[3]), y, "mean");
}

START_TEST(compiled_step_is_the_step) {
  kiln_tensor *a[NPARAMS], *b[NPARAMS];   /* trained eagerly / by the compiled step */
  model_params(a);
  model_params(b);
  kiln_optim *oa = kiln_adamw(NPARAMS, a, 1e-2, 0.9, 0.999, 1e-8, 0.05), *ob = kiln_adamw(NPARAMS, b, 1e-2, 0.9, 0.999, 1e-8, 0.05);
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(-1, 4)), *y = kiln_placeholder(KILN_F32, KILN_SHAPE(-1, 3));
  kiln_tensor *loss = model_loss(b, x, y), *g[NPARAMS];
  ck_assert_int_eq(kiln_grad(loss, NULL, NPARAMS, b, g), KILN_OK);
  ck_assert_msg(kiln_optim_step(ob, g) == KILN_OK, "%s", kiln_last_error());   /* recorded, not run */
  kiln_fn *step = kiln_compile(2, ((kiln_tensor *[]){x, y}), 1, &loss);
  ck_assert_msg(step, "%s", kiln_last_error());
  kiln_memory_stats_t m0 = {0}, m1;
  uint64_t compiles = 0, plans = 0;
  for (int run = 0; run < 12; run++) {
    int64_t batch = run % 2 ? 16 : 9;
    kiln_scope_begin();
    kiln_tensor *xb = table((int)(batch * 4), 1.0, 0.5 + run, KILN_SHAPE(batch, 4)), *yb = table((int)(batch * 3), 0.8, 0.6 + run, KILN_SHAPE(batch, 3));
    if (run == 6) kiln_optim_set_lr(oa, 3e-3), kiln_optim_set_lr(ob, 3e-3);
    kiln_tensor *got = NULL, *ga[NPARAMS];
    ck_assert_msg(kiln_fn_run(step, ((kiln_tensor *[]){xb, yb}), &got) == KILN_OK, "%s", kiln_last_error());
    kiln_tensor *want = model_loss(a, xb, yb);
    ck_assert_int_eq(kiln_grad(want, NULL, NPARAMS, a, ga), KILN_OK);
    ck_assert_int_eq(kiln_realize(want), KILN_OK);
    ck_assert_int_eq(kiln_optim_step(oa, ga), KILN_OK);
    ck_assert_msg(fabs(kiln_item(got) - kiln_item(want)) <= 1e-6 * fabs(kiln_item(want)), "run %d: loss %.9g, the step's %.9g",
                  run, kiln_item(got), kiln_item(want));
    kiln_scope_end();
    if (run == 3) kiln_memory_stats(kiln_cpu_device(), &m0), compiles = kiln_stats().compiles, plans = kiln_stats().plans;
  }
  kiln_memory_stats(kiln_cpu_device(), &m1);
  ck_assert_uint_eq(m1.allocated_bytes, m0.allocated_bytes);
  ck_assert_uint_eq(kiln_stats().plans, plans);   /* the eager step's plans, found, and none of the function's */
  ck_assert_uint_eq(kiln_stats().compiles, compiles);
  for (int i = 0; i < NPARAMS; i++) {
    float va[MAXV], vb[MAXV];
    size_t bytes = sizeof(float) * (size_t)kiln_numel(a[i]);
    ck_assert_int_eq(kiln_copy_to_host(a[i], va, bytes), KILN_OK);
    ck_assert_int_eq(kiln_copy_to_host(b[i], vb, bytes), KILN_OK);
    for (int64_t k = 0; k < kiln_numel(a[i]); k++)
      ck_assert_msg(fabs(va[k] - vb[k]) <= 1e-5 * fabs(va[k]) + 1e-7, "param %d[%lld]: %.9g, compiled %.9g", i, (long long)k, va[k], vb[k]);
  }
  kiln_fn_free(step);
  kiln_optim_free(oa);
  kiln_optim_free(ob);
  for (int i = 0; i < NPARAMS; i++) kiln_release(a[i]), kiln_release(b[i]), kiln_release(g[i]);
  kiln_release(loss);
  kiln_release(x);
  kiln_release(y);
}
END_TEST

START_TEST(clip_grad_norm) {
  kiln_scope_begin();
  kiln_tensor *g[2] = {kiln_from_data(((const float[]){3, 0}), KILN_F32, KILN_SHAPE(2)),
                       kiln_from_data(((const float[]){0, 4}), KILN_F32, KILN_SHAPE(2))};
  kiln_tensor *total = kiln_clip_grad_norm(2, g, 1.0, 2.0);
  TU_EXPECT(total, KILN_SHAPE(), 1e-6, 5);
  TU_EXPECT(g[0], KILN_SHAPE(2), 1e-6, 3 / (5 + 1e-6), 0);
  TU_EXPECT(g[1], KILN_SHAPE(2), 1e-6, 0, 4 / (5 + 1e-6));
  kiln_tensor *h[1] = {kiln_from_data(((const float[]){-2, 1}), KILN_F32, KILN_SHAPE(2))};
  TU_EXPECT(kiln_clip_grad_norm(1, h, 10, INFINITY), KILN_SHAPE(), 0, 2);   /* under the bound: unchanged */
  TU_EXPECT(h[0], KILN_SHAPE(2), 0, -2, 1);
  kiln_scope_end();
}
END_TEST

START_TEST(errors) {
  kiln_scope_begin();
  kiln_tensor *w = kiln_zeros(KILN_SHAPE(3), KILN_F32), *i = kiln_zeros(KILN_SHAPE(3), KILN_I64);
  ck_assert_ptr_null(kiln_sgd(1, &w, -1, 0, 0, 0, 0));
  ck_assert_msg(strstr(kiln_last_error(), "test_optim.c:") && strstr(kiln_last_error(), "sgd: invalid learning rate"), "%s", kiln_last_error());
  ck_assert_ptr_null(kiln_adam(1, &i, 1e-3, 0.9, 0.999, 1e-8, 0));
  ck_assert_msg(strstr(kiln_last_error(), "adam: parameter 0 is not a floating tensor"), "%s", kiln_last_error());
  ck_assert_ptr_null(kiln_adamw(2, (kiln_tensor *[]){w, w}, 1e-3, 0.9, 0.999, 1e-8, 0));
  ck_assert_ptr_null(kiln_adam(1, &w, 1e-3, 1.0, 0.999, 1e-8, 0));
  ck_assert_ptr_null(kiln_sgd(1, &w, 0.1, 0, 0, 0, 1));   /* nesterov without momentum */
  kiln_optim *o = kiln_sgd(1, &w, 0.1, 0, 0, 0, 0);
  kiln_tensor *bad = kiln_zeros(KILN_SHAPE(4), KILN_F32);
  ck_assert_int_eq(kiln_optim_step(o, &bad), KILN_ERR_SHAPE);
  ck_assert_msg(strstr(kiln_last_error(), "optim_step: gradient 0 is float32 (4,), its parameter float32 (3,)"), "%s", kiln_last_error());
  ck_assert_int_eq(kiln_optim_step(o, NULL), KILN_ERR_ARG);
  kiln_tensor *none = NULL;
  ck_assert_int_eq(kiln_optim_step(o, &none), KILN_OK);   /* no gradient: left as it is */
  TU_EXPECT(w, KILN_SHAPE(3), 0, 0, 0, 0);
  kiln_optim_free(o);
  kiln_scope_end();
}
END_TEST

static Suite *optim_suite(void) {
  Suite *s = suite_create("optim");
  tcase_add_loop_test(tu_tcase(s, "matches_torch_optim"), matches_torch_optim, 0, sizeof runs / sizeof *runs);
  tcase_add_test(tu_tcase(s, "schedule_compiles_nothing"), schedule_compiles_nothing);
  tcase_add_test(tu_tcase(s, "compiled_step_is_the_step"), compiled_step_is_the_step);
  tcase_add_test(tu_tcase(s, "clip_grad_norm"), clip_grad_norm);
  tcase_add_test(tu_tcase(s, "errors"), errors);
  return s;
}

KILN_TEST_MAIN(optim_suite)
