/* math.c: the elementwise compositions of issue 13's math group: logaddexp
 * and the smooth activations (elu, celu, selu, softplus, mish, logsigmoid),
 * each a few elementwise ops the fuser merges into its neighbours' kernel. */
#include "frontend/frontend.h"

#include <math.h>

static ir_node *drop(ir_node *result, int n, ir_node **tmp) {
  for (int i = 0; i < n; i++) fe_drop(tmp[i]);
  return result;
}

/* t itself, or t as float32 when it is an integer or bool tensor (the
 * activations' result is always a float). */
static ir_node *as_float(const char *f, int l, ir_node *t) {
  return ir_is_float(t->dtype) ? fe_same(t) : kiln_cast_at(f, l, t, KILN_F32);
}

/* where(x > 0, x, alpha expm1(x / den)): elu (den 1), celu (den alpha). */
static ir_node *elu_like(const char *f, int l, const char *op, ir_node *t, double alpha, double den) {
  ir_node *e = fe_check_arg(f, l, op, t, 1);
  if (e) return e;
  ir_node *tmp[5];
  tmp[0] = as_float(f, l, t);
  tmp[1] = kiln_divs_at(f, l, tmp[0], den);
  tmp[2] = kiln_expm1_at(f, l, tmp[1]);
  tmp[3] = kiln_muls_at(f, l, tmp[2], alpha);
  tmp[4] = kiln_gts_at(f, l, tmp[0], 0);
  return drop(kiln_where_at(f, l, tmp[4], tmp[0], tmp[3]), 5, tmp);
}

/* where(beta x > threshold, x, log1p(e^(beta x)) / beta) */
static ir_node *softplus(const char *f, int l, ir_node *t, double beta, double threshold) {
  ir_node *e = fe_check_arg(f, l, "softplus", t, 1);
  if (e) return e;
  if (beta == 0) return fe_error(KILN_ERR_ARG, f, l, "softplus: beta must not be 0");
  ir_node *tmp[6];
  tmp[0] = as_float(f, l, t);
  tmp[1] = kiln_muls_at(f, l, tmp[0], beta);
  tmp[2] = kiln_exp_at(f, l, tmp[1]);
  tmp[3] = kiln_log1p_at(f, l, tmp[2]);
  tmp[4] = kiln_divs_at(f, l, tmp[3], beta);
  tmp[5] = kiln_gts_at(f, l, tmp[1], threshold);
  return drop(kiln_where_at(f, l, tmp[5], tmp[0], tmp[4]), 6, tmp);
}

static ir_node *mish(const char *f, int l, ir_node *t) {
  ir_node *tmp[3];
  tmp[0] = softplus(f, l, t, 1, 20);
  if (kiln_status_of(tmp[0]) != KILN_OK) return tmp[0];
  tmp[1] = kiln_tanh_at(f, l, tmp[0]);
  tmp[2] = as_float(f, l, t);
  return drop(kiln_mul_at(f, l, tmp[2], tmp[1]), 3, tmp);
}

/* min(x, 0) - log1p(e^-|x|): log(sigmoid x) with no overflow on either side. */
static ir_node *logsigmoid(const char *f, int l, ir_node *t) {
  ir_node *e = fe_check_arg(f, l, "logsigmoid", t, 1);
  if (e) return e;
  ir_node *tmp[6];
  tmp[0] = as_float(f, l, t);
  tmp[1] = kiln_abs_at(f, l, tmp[0]);
  tmp[2] = kiln_neg_at(f, l, tmp[1]);
  tmp[3] = kiln_exp_at(f, l, tmp[2]);
  tmp[4] = kiln_log1p_at(f, l, tmp[3]);
  tmp[5] = kiln_minimums_at(f, l, tmp[0], 0);
  return drop(kiln_sub_at(f, l, tmp[5], tmp[4]), 6, tmp);
}

/* max(a, b) + log1p(e^-|a - b|), and a + log 2 where a == b: the same value,
 * but also right for two equal infinities (where a - b is nan). b is a
 * tensor, or the number bv when NULL. Operands are first converted to the
 * result dtype (maximum's promotion, made float) so integers cannot wrap. */
static ir_node *logaddexp(const char *f, int l, ir_node *a, ir_node *b, double bv) {
  ir_node *m = b ? kiln_maximum_at(f, l, a, b) : kiln_maximums_at(f, l, a, bv);
  if (kiln_status_of(m) != KILN_OK) return m;
  kiln_dtype dt = ir_is_float(m->dtype) ? m->dtype : KILN_F32;
  fe_drop(m);
  ir_node *tmp[10];
  tmp[0] = kiln_cast_at(f, l, a, dt);
  tmp[1] = b ? kiln_cast_at(f, l, b, dt) : NULL;
  tmp[2] = b ? kiln_sub_at(f, l, tmp[0], tmp[1]) : kiln_subs_at(f, l, tmp[0], bv);
  tmp[3] = kiln_abs_at(f, l, tmp[2]);
  tmp[4] = kiln_neg_at(f, l, tmp[3]);
  tmp[5] = kiln_exp_at(f, l, tmp[4]);
  tmp[6] = kiln_log1p_at(f, l, tmp[5]);
  tmp[7] = b ? kiln_maximum_at(f, l, tmp[0], tmp[1]) : kiln_maximums_at(f, l, tmp[0], bv);
  tmp[8] = kiln_add_at(f, l, tmp[7], tmp[6]);
  tmp[9] = kiln_adds_at(f, l, tmp[7], M_LN2);
  ir_node *same = b ? kiln_eq_at(f, l, tmp[0], tmp[1]) : kiln_eqs_at(f, l, tmp[0], bv);
  ir_node *r = kiln_where_at(f, l, same, tmp[9], tmp[8]);
  fe_drop(same);
  return drop(r, 10, tmp);  /* fe_drop(NULL), tmp[1] without b, does nothing */
}

/* ---- the public ops ----------------------------------------------------- */
kiln_tensor *kiln_logaddexp_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b) {
  ir_node *e = fe_check_args(f, l, "logaddexp", 2, (ir_node *[]){a, b});
  if (e) return e;
  FE_AS("logaddexp", logaddexp(f, l, a, b, 0));
}
kiln_tensor *kiln_logaddexps_at(const char *f, int l, kiln_tensor *a, double b) {
  ir_node *e = fe_check_arg(f, l, "logaddexp", a, 1);
  if (e) return e;
  FE_AS("logaddexp", logaddexp(f, l, a, NULL, b));
}
kiln_tensor *kiln_elu_at(const char *f, int l, kiln_tensor *t, double alpha) {
  FE_AS("elu", elu_like(f, l, "elu", t, alpha, 1));
}
kiln_tensor *kiln_celu_at(const char *f, int l, kiln_tensor *t, double alpha) {
  if (alpha == 0) return fe_error(KILN_ERR_ARG, f, l, "celu: alpha must not be 0 (it divides x)");
  FE_AS("celu", elu_like(f, l, "celu", t, alpha, alpha));
}
/* PyTorch's selu constants (torch.nn.SELU) */
#define SELU_ALPHA 1.6732632423543772848170429916717
#define SELU_SCALE 1.0507009873554804934193349852946
static ir_node *selu(const char *f, int l, ir_node *t) {
  ir_node *x = elu_like(f, l, "selu", t, SELU_ALPHA, 1);
  if (kiln_status_of(x) != KILN_OK) return x;
  return drop(kiln_muls_at(f, l, x, SELU_SCALE), 1, &x);
}
kiln_tensor *kiln_selu_at(const char *f, int l, kiln_tensor *t) { FE_AS("selu", selu(f, l, t)); }
kiln_tensor *kiln_softplus_at(const char *f, int l, kiln_tensor *t, double beta, double threshold) {
  FE_AS("softplus", softplus(f, l, t, beta, threshold));
}
kiln_tensor *kiln_mish_at(const char *f, int l, kiln_tensor *t) { FE_AS("mish", mish(f, l, t)); }
kiln_tensor *kiln_logsigmoid_at(const char *f, int l, kiln_tensor *t) { FE_AS("logsigmoid", logsigmoid(f, l, t)); }
