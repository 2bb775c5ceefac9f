/* ewb.c: elementwise ops made of other ops (frac, isnan/isinf/isfinite,
 * nan_to_num, clamp_tensor, masked_fill, lerp, isclose and the simple
 * activations): compositions the fuser merges into one kernel, built under
 * the public op's name so that their errors name it. */
#include "frontend/frontend.h"

#include <math.h>

/* The ops PyTorch has no integer or bool kernels for. */
static ir_node *float_only(const char *f, int l, const char *op, ir_node *t) {
  ir_node *e = fe_check_arg(f, l, op, t, 1);
  if (e || ir_is_float(t->dtype)) return e;
  ir_str b = {0};
  fe_describe(&b, t);
  e = fe_error(KILN_ERR_DTYPE, f, l, "%s: only floating-point tensors are supported, got %s", op, b.s);
  ir_str_free(&b);
  return e;
}

/* t where mask (bool, t's shape) is false and value where it is true, in
 * t's dtype (masked_fill converts the value to it: a float value truncates
 * into an integer tensor, a nonzero one is true in a bool tensor). */
static ir_node *fill(const char *f, int l, ir_node *t, ir_node *mask, double value) {
  ir_node *tmp[3];
  if (t->dtype == KILN_BOOL) {
    if (value != 0) return kiln_logical_or_at(f, l, t, mask);
    tmp[0] = kiln_logical_not_at(f, l, mask);
    return fe_done(kiln_logical_and_at(f, l, t, tmp[0]), 1, tmp);
  }
  tmp[0] = kiln_zeros_like_at(f, l, t);
  tmp[1] = kiln_adds_at(f, l, tmp[0], ir_is_float(t->dtype) ? value : trunc(value));
  return fe_done(kiln_where_at(f, l, mask, tmp[1], t), 2, tmp);
}

/* ---- unary ------------------------------------------------------------------ */
static ir_node *frac(const char *f, int l, ir_node *t) {
  ir_node *e = float_only(f, l, "frac", t);
  if (e) return e;
  ir_node *tr = kiln_trunc_at(f, l, t);
  return fe_done(kiln_sub_at(f, l, t, tr), 1, &tr);
}

/* x != x; an integer is never nan (nor infinite). */
static ir_node *isnan_(const char *f, int l, ir_node *t) {
  ir_node *e = fe_check_arg(f, l, "isnan", t, 1);
  return e ? e : kiln_ne_at(f, l, t, t);
}

static ir_node *isinf_(const char *f, int l, ir_node *t, bool finite) {
  ir_node *e = fe_check_arg(f, l, finite ? "isfinite" : "isinf", t, 1);
  if (e) return e;
  if (!ir_is_float(t->dtype)) return finite ? kiln_eq_at(f, l, t, t) : kiln_ne_at(f, l, t, t);
  ir_node *a = kiln_abs_at(f, l, t);
  return fe_done(finite ? kiln_lts_at(f, l, a, INFINITY) : kiln_eqs_at(f, l, a, INFINITY), 1, &a);
}

kiln_tensor *kiln_frac_at(const char *f, int l, kiln_tensor *a) { FE_AS("frac", frac(f, l, a)); }
kiln_tensor *kiln_isnan_at(const char *f, int l, kiln_tensor *a) { FE_AS("isnan", isnan_(f, l, a)); }
kiln_tensor *kiln_isinf_at(const char *f, int l, kiln_tensor *a) { FE_AS("isinf", isinf_(f, l, a, false)); }
kiln_tensor *kiln_isfinite_at(const char *f, int l, kiln_tensor *a) { FE_AS("isfinite", isinf_(f, l, a, true)); }

/* ---- with parameters ----------------------------------------------------------- */
static ir_node *nan_to_num(const char *f, int l, ir_node *t, double nan, double posinf, double neginf) {
  ir_node *e = fe_check_arg(f, l, "nan_to_num", t, 1);
  if (e) return e;
  if (!ir_is_float(t->dtype)) return fe_same(t);
  ir_node *tmp[6];
  tmp[0] = kiln_ne_at(f, l, t, t);
  tmp[1] = fill(f, l, t, tmp[0], nan);
  tmp[2] = kiln_eqs_at(f, l, t, INFINITY);
  tmp[3] = fill(f, l, tmp[1], tmp[2], posinf);
  tmp[4] = kiln_eqs_at(f, l, t, -INFINITY);
  tmp[5] = fill(f, l, tmp[3], tmp[4], neginf);
  return fe_done(tmp[5], 5, tmp);
}

/* torch.clamp with tensor bounds: maximum then minimum, so min > max gives
 * max and a nan anywhere gives nan. */
static ir_node *clamp_tensor(const char *f, int l, ir_node *a, ir_node *min, ir_node *max) {
  ir_node *e = fe_check_arg(f, l, "clamp_tensor", a, 1);
  if (e) return e;
  if (!min && !max) return fe_error(KILN_ERR_ARG, f, l, "clamp_tensor: at least one of min and max must not be NULL");
  ir_node *lo = min ? kiln_maximum_at(f, l, a, min) : fe_same(a);
  if (!max) return lo;
  return fe_done(kiln_minimum_at(f, l, lo, max), 1, &lo);
}

static ir_node *masked_fill(const char *f, int l, ir_node *t, ir_node *mask, double value) {
  ir_node *e = fe_check_args(f, l, "masked_fill", 2, (ir_node *[]){t, mask});
  if (e) return e;
  if (mask->dtype != KILN_BOOL) {
    ir_str b = {0};
    fe_describe(&b, mask);
    e = fe_error(KILN_ERR_DTYPE, f, l, "masked_fill: mask must be a bool tensor, got %s", b.s);
    ir_str_free(&b);
    return e;
  }
  ir_node *m = kiln_expand_at(f, l, mask, t->ndim, t->shape);
  return fe_done(fill(f, l, t, m, value), 1, &m);
}

/* PyTorch's lerp: a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w)
 * (written b + (b - a)(w - 1), the same value), exact at both ends. */
static ir_node *lerp(const char *f, int l, int nt, ir_node *a, ir_node *b, ir_node *w, double ws) {
  ir_node *e = fe_check_args(f, l, "lerp", nt, (ir_node *[]){a, b, w});
  if (e || (e = float_only(f, l, "lerp", a))) return e;
  ir_node *tmp[8];
  int n = 0;
  tmp[n++] = kiln_sub_at(f, l, b, a);
  if (!w) {
    tmp[n++] = kiln_muls_at(f, l, tmp[0], fabs(ws) < 0.5 ? ws : ws - 1);
    return fe_done(kiln_add_at(f, l, fabs(ws) < 0.5 ? a : b, tmp[1]), n, tmp);
  }
  tmp[n++] = kiln_abs_at(f, l, w);
  tmp[n++] = kiln_lts_at(f, l, tmp[1], 0.5);
  tmp[n++] = kiln_mul_at(f, l, w, tmp[0]);
  tmp[n++] = kiln_add_at(f, l, a, tmp[3]);
  tmp[n++] = kiln_subs_at(f, l, w, 1);
  tmp[n++] = kiln_mul_at(f, l, tmp[0], tmp[5]);
  tmp[n++] = kiln_add_at(f, l, b, tmp[6]);
  return fe_done(kiln_where_at(f, l, tmp[2], tmp[4], tmp[7]), n, tmp);
}

/* PyTorch's isclose: a == b, or (equal_nan) both nan, or |a - b| finite and
 * <= atol + |rtol b| (bool operands compare as float32). */
static ir_node *isclose(const char *f, int l, ir_node *a, ir_node *b, double rtol, double atol, int equal_nan) {
  ir_node *e = fe_check_args(f, l, "isclose", 2, (ir_node *[]){a, b});
  if (e) return e;
  if (a->dtype != b->dtype)
    return fe_error(KILN_ERR_DTYPE, f, l, "isclose: a and b must have one dtype, got %s and %s", ir_dtypes[a->dtype].name,
                    ir_dtypes[b->dtype].name);
  if (!(rtol >= 0) || !(atol >= 0))
    return fe_error(KILN_ERR_ARG, f, l, "isclose: rtol and atol must be >= 0, got %g and %g", rtol, atol);
  ir_node *tmp[14];
  int n = 0;
  ir_node *close = kiln_eq_at(f, l, a, b);
  if (equal_nan && ir_is_float(a->dtype)) {
    ir_node *na = tmp[n++] = kiln_ne_at(f, l, a, a);
    ir_node *nb = tmp[n++] = kiln_ne_at(f, l, b, b);
    ir_node *both = tmp[n++] = kiln_logical_and_at(f, l, na, nb);
    tmp[n++] = close;
    close = kiln_logical_or_at(f, l, close, both);
  }
  if (rtol == 0 && atol == 0) return fe_done(close, n, tmp);
  tmp[n++] = close;
  ir_node *x = a->dtype == KILN_BOOL ? (tmp[n++] = kiln_cast_at(f, l, a, KILN_F32)) : a;
  ir_node *y = a->dtype == KILN_BOOL ? (tmp[n++] = kiln_cast_at(f, l, b, KILN_F32)) : b;
  ir_node *err = tmp[n++] = kiln_sub_at(f, l, x, y);
  ir_node *actual = tmp[n++] = kiln_abs_at(f, l, err);
  ir_node *scaled = tmp[n++] = kiln_muls_at(f, l, y, rtol);
  ir_node *mag = tmp[n++] = kiln_abs_at(f, l, scaled);
  ir_node *allowed = tmp[n++] = kiln_adds_at(f, l, mag, atol);
  ir_node *within = tmp[n++] = kiln_le_at(f, l, actual, allowed);
  ir_node *finite = tmp[n++] = isinf_(f, l, actual, true);
  ir_node *near = tmp[n++] = kiln_logical_and_at(f, l, finite, within);
  return fe_done(kiln_logical_or_at(f, l, close, near), n, tmp);
}

kiln_tensor *kiln_nan_to_num_at(const char *f, int l, kiln_tensor *t, double nan, double posinf, double neginf) {
  FE_AS("nan_to_num", nan_to_num(f, l, t, nan, posinf, neginf));
}
kiln_tensor *kiln_clamp_tensor_at(const char *f, int l, kiln_tensor *a, kiln_tensor *min, kiln_tensor *max) {
  FE_AS("clamp_tensor", clamp_tensor(f, l, a, min, max));
}
kiln_tensor *kiln_masked_fill_at(const char *f, int l, kiln_tensor *t, kiln_tensor *mask, double value) {
  FE_AS("masked_fill", masked_fill(f, l, t, mask, value));
}
kiln_tensor *kiln_lerp_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, kiln_tensor *weight) {
  FE_AS("lerp", lerp(f, l, 3, a, b, weight, 0));
}
kiln_tensor *kiln_lerps_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, double weight) {
  FE_AS("lerp", lerp(f, l, 2, a, b, NULL, weight));
}
kiln_tensor *kiln_isclose_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, double rtol, double atol,
                             int equal_nan) {
  FE_AS("isclose", isclose(f, l, a, b, rtol, atol, equal_nan));
}

/* ---- activations ------------------------------------------------------------------ */
static ir_node *hardtanh(const char *f, int l, const char *op, ir_node *t, double lo, double hi) {
  ir_node *e = fe_check_arg(f, l, op, t, 1);
  if (e) return e;
  if (!(lo <= hi)) return fe_error(KILN_ERR_ARG, f, l, "%s: min_val %g is greater than max_val %g", op, lo, hi);
  return kiln_clamp_at(f, l, t, lo, hi);
}

/* x > 0 ? x : x * slope (nan stays nan). */
static ir_node *leaky_relu(const char *f, int l, ir_node *t, double slope) {
  ir_node *e = float_only(f, l, "leaky_relu", t);
  if (e) return e;
  ir_node *tmp[2] = {kiln_gts_at(f, l, t, 0), kiln_muls_at(f, l, t, slope)};
  return fe_done(kiln_where_at(f, l, tmp[0], t, tmp[1]), 2, tmp);
}

/* relu6(x + 3) / 6, times x for hardswish (PyTorch's order of operations). */
static ir_node *hard(const char *f, int l, const char *op, ir_node *t, bool swish) {
  ir_node *e = float_only(f, l, op, t);
  if (e) return e;
  ir_node *tmp[3];
  tmp[0] = kiln_adds_at(f, l, t, 3);
  tmp[1] = kiln_clamp_at(f, l, tmp[0], 0, 6);
  if (!swish) return fe_done(kiln_divs_at(f, l, tmp[1], 6), 2, tmp);
  tmp[2] = kiln_mul_at(f, l, t, tmp[1]);
  return fe_done(kiln_divs_at(f, l, tmp[2], 6), 3, tmp);
}

/* x / (1 + |x|) */
static ir_node *softsign(const char *f, int l, ir_node *t) {
  ir_node *e = fe_check_arg(f, l, "softsign", t, 1);
  if (e) return e;
  ir_node *tmp[2];
  tmp[0] = kiln_abs_at(f, l, t);
  tmp[1] = kiln_adds_at(f, l, tmp[0], 1);
  return fe_done(kiln_div_at(f, l, t, tmp[1]), 2, tmp);
}

kiln_tensor *kiln_hardtanh_at(const char *f, int l, kiln_tensor *t, double min_val, double max_val) {
  FE_AS("hardtanh", hardtanh(f, l, "hardtanh", t, min_val, max_val));
}
kiln_tensor *kiln_relu6_at(const char *f, int l, kiln_tensor *t) { FE_AS("relu6", hardtanh(f, l, "relu6", t, 0, 6)); }
kiln_tensor *kiln_leaky_relu_at(const char *f, int l, kiln_tensor *t, double negative_slope) {
  FE_AS("leaky_relu", leaky_relu(f, l, t, negative_slope));
}
kiln_tensor *kiln_hardswish_at(const char *f, int l, kiln_tensor *t) { FE_AS("hardswish", hard(f, l, "hardswish", t, true)); }
kiln_tensor *kiln_hardsigmoid_at(const char *f, int l, kiln_tensor *t) {
  FE_AS("hardsigmoid", hard(f, l, "hardsigmoid", t, false));
}
kiln_tensor *kiln_softsign_at(const char *f, int l, kiln_tensor *t) { FE_AS("softsign", softsign(f, l, t)); }
