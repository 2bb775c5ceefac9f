/* nn.c: the normalizations, attention and losses of torch.nn.functional,
 * as compositions of elementwise ops, reductions and products that the
 * fuser turns into row kernels (one per normalization, one per loss, GEMMs
 * and a softmax for attention where attention.c's fused kernel does not
 * apply); every error names the function called. */
#include "frontend/frontend.h"

#include <math.h>
#include <string.h>

/* NULL when every given tensor (NULL entries past `required` are optional)
 * is usable and floating; otherwise the error to return. */
static ir_node *check_floats(const char *f, int l, const char *op, int n, ir_node *const *t, int required) {
  for (int i = 0; i < n; i++) {
    if (i >= required && !t[i]) continue;
    ir_node *e = fe_check_arg(f, l, op, t[i], i + 1);
    if (e) return e;
    if (!ir_is_float(t[i]->dtype)) {
      ir_str s = {0};
      fe_describe(&s, t[i]);
      e = fe_error(KILN_ERR_DTYPE, f, l, "%s: argument %d must be a floating tensor, got %s", op, i + 1, s.s);
      ir_str_free(&s);
      return e;
    }
  }
  return NULL;
}

/* *out = v, a per-channel vector of x's dim 1, viewed as x's shape (kept
 * in s), or NULL for no v; the error to return
 * when v is not (C,), else NULL. */
static ir_node *per_channel(const char *f, int l, const char *op, const char *what, ir_node *x, ir_node *v,
                            ir_node **out, fe_temps *s) {
  *out = NULL;
  if (!v) return NULL;
  int64_t c = x->shape[1], shape[KILN_MAX_DIMS];
  if (v->ndim != 1 || v->shape[0] != c) {
    ir_str d = {0};
    ir_str_shape(&d, v->ndim, v->shape);
    ir_node *e = fe_error(KILN_ERR_SHAPE, f, l, "%s: %s of shape %s does not match the %lld channels of the input",
                          op, what, d.s, (long long)c);
    ir_str_free(&d);
    return e;
  }
  shape[0] = c;
  for (int d = 1; d < x->ndim - 1; d++) shape[d] = 1;
  /* expanded to x's shape: a view every element reads, so what is computed
   * from it stays in x's kernel (a small computed tensor broadcast over
   * leading dims would be stored by a kernel of its own) */
  *out = fe_keep(s, kiln_expand_at(f, l, fe_keep(s, kiln_reshape_at(f, l, v, x->ndim - 1, shape)), x->ndim, x->shape));
  return NULL;
}

/* ---- normalizations ------------------------------------------------------ */
/* x / sqrt(mean(x^2) + eps) over the last nlast dims, times weight. */
static ir_node *rms_norm(const char *f, int l, ir_node *x, int nlast, ir_node *weight, double eps) {
  ir_node *e = check_floats(f, l, "rms_norm", 2, (ir_node *[]){x, weight}, 1);
  if (e) return e;
  if (nlast < 1 || nlast > x->ndim)
    return fe_error(KILN_ERR_ARG, f, l, "rms_norm: cannot normalize the last %d dims of a %d-dim tensor", nlast, x->ndim);
  int64_t dims[KILN_MAX_DIMS];
  for (int i = 0; i < nlast; i++) dims[i] = x->ndim - nlast + i;
  fe_temps s = {0};
  ir_node *sq = fe_keep(&s, kiln_mul_at(f, l, x, x));
  ir_node *ms = fe_keep(&s, kiln_mean_dims_at(f, l, sq, nlast, dims, 1));
  ir_node *r = fe_keep(&s, kiln_rsqrt_at(f, l, fe_keep(&s, kiln_adds_at(f, l, ms, eps))));
  ir_node *y = kiln_mul_at(f, l, x, r);
  if (weight) y = kiln_mul_at(f, l, fe_keep(&s, y), weight);
  return fe_temps_done(&s, y);
}

/* Inference form: (x - running_mean) * (weight / sqrt(running_var + eps))
 * + bias, per channel (dim 1). */
static ir_node *batch_norm(const char *f, int l, ir_node *x, ir_node *mean, ir_node *var, ir_node *weight,
                           ir_node *bias, double eps) {
  ir_node *e = check_floats(f, l, "batch_norm", 5, (ir_node *[]){x, mean, var, weight, bias}, 3);
  if (e) return e;
  if (x->ndim < 2)
    return fe_error(KILN_ERR_SHAPE, f, l, "batch_norm: expected an input of at least 2 dims (N, C, ...), got %d", x->ndim);
  fe_temps s = {0};
  ir_node *m, *v, *w, *b;
  if ((e = per_channel(f, l, "batch_norm", "running_mean", x, mean, &m, &s)) ||
      (e = per_channel(f, l, "batch_norm", "running_var", x, var, &v, &s)) ||
      (e = per_channel(f, l, "batch_norm", "weight", x, weight, &w, &s)) ||
      (e = per_channel(f, l, "batch_norm", "bias", x, bias, &b, &s)))
    return fe_temps_done(&s, e);
  ir_node *scale = fe_keep(&s, kiln_rsqrt_at(f, l, fe_keep(&s, kiln_adds_at(f, l, v, eps))));
  if (w) scale = fe_keep(&s, kiln_mul_at(f, l, scale, w));
  ir_node *y = kiln_mul_at(f, l, fe_keep(&s, kiln_sub_at(f, l, x, m)), scale);
  if (b) y = kiln_add_at(f, l, fe_keep(&s, y), b);
  return fe_temps_done(&s, y);
}

/* layer_norm over each group of channels and the dims after them (x viewed
 * as (N, G, rest)), then weight and bias per channel. */
static ir_node *group_norm(const char *f, int l, ir_node *x, int64_t groups, ir_node *weight, ir_node *bias,
                           double eps) {
  ir_node *e = check_floats(f, l, "group_norm", 3, (ir_node *[]){x, weight, bias}, 1);
  if (e) return e;
  if (x->ndim < 2)
    return fe_error(KILN_ERR_SHAPE, f, l, "group_norm: expected an input of at least 2 dims (N, C, ...), got %d", x->ndim);
  if (groups < 1 || x->shape[1] % groups) {
    ir_str d = {0};
    ir_str_shape(&d, x->ndim, x->shape);
    e = fe_error(KILN_ERR_SHAPE, f, l,
                 "group_norm: expected number of channels in input to be divisible by num_groups, but got input of "
                 "shape %s and num_groups=%lld", d.s, (long long)groups);
    ir_str_free(&d);
    return e;
  }
  fe_temps s = {0};
  ir_node *w, *b;
  if ((e = per_channel(f, l, "group_norm", "weight", x, weight, &w, &s)) ||
      (e = per_channel(f, l, "group_norm", "bias", x, bias, &b, &s)))
    return fe_temps_done(&s, e);
  int64_t rest = ir_numel(x->ndim - 1, x->shape + 1) / groups;
  ir_node *g = fe_keep(&s, kiln_reshape_at(f, l, x, 3, (int64_t[]){x->shape[0], groups, rest}));
  ir_node *n = fe_keep(&s, kiln_layer_norm_at(f, l, g, 1, NULL, NULL, eps));
  ir_node *y = kiln_reshape_at(f, l, n, x->ndim, x->shape);
  if (w) y = kiln_mul_at(f, l, fe_keep(&s, y), w);
  if (b) y = kiln_add_at(f, l, fe_keep(&s, y), b);
  return fe_temps_done(&s, y);
}

/* ---- losses -------------------------------------------------------------- */
/* NULL when reduction is torch's "none", "mean" or "sum" (NULL: "mean"),
 * else the error to return. */
static ir_node *check_reduction(const char *f, int l, const char *op, const char *reduction) {
  if (!reduction || !strcmp(reduction, "none") || !strcmp(reduction, "mean") || !strcmp(reduction, "sum")) return NULL;
  return fe_error(KILN_ERR_ARG, f, l, "%s: '%s' is not a valid value for reduction (valid: 'none', 'mean', 'sum')", op,
                  reduction);
}

/* The elementwise loss reduced as a checked reduction string asks. */
static ir_node *reduce_loss(const char *f, int l, fe_temps *s, ir_node *loss, const char *reduction) {
  fe_keep(s, loss);
  if (reduction && !strcmp(reduction, "none")) return fe_same(loss);
  if (reduction && !strcmp(reduction, "sum")) return kiln_sum_at(f, l, loss);
  return kiln_mean_at(f, l, loss);
}

/* The checks every loss makes: input and target (and the optional weights
 * from index 2 on) floating, a valid reduction, and for the binary cross
 * entropies a target of the input's shape (torch refuses any other). */
static ir_node *check_loss(const char *f, int l, const char *op, int n, ir_node *const *t, const char *reduction,
                           bool same_shape) {
  ir_node *e = check_floats(f, l, op, n, t, 2);
  if (e || (e = check_reduction(f, l, op, reduction))) return e;
  if (!same_shape || (t[0]->ndim == t[1]->ndim && !memcmp(t[0]->shape, t[1]->shape, (size_t)t[0]->ndim * sizeof(int64_t))))
    return NULL;
  ir_str d = {0};
  ir_str_shape(&d, t[1]->ndim, t[1]->shape);
  ir_str_printf(&d, " must be the same as input size ");
  ir_str_shape(&d, t[0]->ndim, t[0]->shape);
  e = fe_error(KILN_ERR_SHAPE, f, l, "%s: target size %s", op, d.s);
  ir_str_free(&d);
  return e;
}

/* (input - target)^2, input and target broadcast together. */
static ir_node *mse_loss(const char *f, int l, ir_node *input, ir_node *target, const char *reduction) {
  ir_node *e = check_loss(f, l, "mse_loss", 2, (ir_node *[]){input, target}, reduction, false);
  if (e) return e;
  fe_temps s = {0};
  ir_node *d = fe_keep(&s, kiln_sub_at(f, l, input, target));
  return fe_temps_done(&s, reduce_loss(f, l, &s, kiln_mul_at(f, l, d, d), reduction));
}

/* |input - target|, input and target broadcast together. */
static ir_node *l1_loss(const char *f, int l, ir_node *input, ir_node *target, const char *reduction) {
  ir_node *e = check_loss(f, l, "l1_loss", 2, (ir_node *[]){input, target}, reduction, false);
  if (e) return e;
  fe_temps s = {0};
  ir_node *d = fe_keep(&s, kiln_sub_at(f, l, input, target));
  return fe_temps_done(&s, reduce_loss(f, l, &s, kiln_abs_at(f, l, d), reduction));
}

/* 1 - t */
static ir_node *one_minus(const char *f, int l, fe_temps *s, ir_node *t) {
  return kiln_adds_at(f, l, fe_keep(s, kiln_neg_at(f, l, t)), 1.0);
}

/* -(y log x + (1 - y) log(1 - x)) * weight, each log clamped at -100 as
 * torch does (so x = 0 or 1 gives 100, not inf). */
static ir_node *binary_cross_entropy(const char *f, int l, ir_node *x, ir_node *y, ir_node *weight,
                                     const char *reduction) {
  ir_node *e = check_loss(f, l, "binary_cross_entropy", 3, (ir_node *[]){x, y, weight}, reduction, true);
  if (e) return e;
  fe_temps s = {0};
  ir_node *lx = fe_keep(&s, kiln_maximums_at(f, l, fe_keep(&s, kiln_log_at(f, l, x)), -100.0));
  ir_node *l1x = fe_keep(&s, kiln_maximums_at(f, l, fe_keep(&s, kiln_log_at(f, l, fe_keep(&s, one_minus(f, l, &s, x)))), -100.0));
  ir_node *pos = fe_keep(&s, kiln_mul_at(f, l, y, lx));
  ir_node *neg = fe_keep(&s, kiln_mul_at(f, l, fe_keep(&s, one_minus(f, l, &s, y)), l1x));
  ir_node *loss = kiln_neg_at(f, l, fe_keep(&s, kiln_add_at(f, l, pos, neg)));
  if (weight) loss = kiln_mul_at(f, l, fe_keep(&s, loss), weight);
  return fe_temps_done(&s, reduce_loss(f, l, &s, loss, reduction));
}

/* torch's stable form: with m = max(-x, 0) and lse = log(e^-m + e^(-x-m)) + m
 * (= log(1 + e^-x)), loss = (1 - y) x + (1 + (pos_weight - 1) y) lse. */
static ir_node *bce_with_logits(const char *f, int l, ir_node *x, ir_node *y, ir_node *weight, ir_node *pos_weight,
                                const char *reduction) {
  ir_node *e = check_loss(f, l, "binary_cross_entropy_with_logits", 4, (ir_node *[]){x, y, weight, pos_weight},
                          reduction, true);
  if (e) return e;
  fe_temps s = {0};
  ir_node *nx = fe_keep(&s, kiln_neg_at(f, l, x));
  ir_node *m = fe_keep(&s, kiln_maximums_at(f, l, nx, 0.0));
  ir_node *a = fe_keep(&s, kiln_exp_at(f, l, fe_keep(&s, kiln_neg_at(f, l, m))));
  ir_node *b = fe_keep(&s, kiln_exp_at(f, l, fe_keep(&s, kiln_sub_at(f, l, nx, m))));
  ir_node *lse = fe_keep(&s, kiln_add_at(f, l, fe_keep(&s, kiln_log_at(f, l, fe_keep(&s, kiln_add_at(f, l, a, b)))), m));
  if (pos_weight) {
    ir_node *pw = fe_keep(&s, kiln_mul_at(f, l, fe_keep(&s, kiln_adds_at(f, l, pos_weight, -1.0)), y));
    lse = fe_keep(&s, kiln_mul_at(f, l, fe_keep(&s, kiln_adds_at(f, l, pw, 1.0)), lse));
  }
  ir_node *loss = kiln_add_at(f, l, fe_keep(&s, kiln_mul_at(f, l, fe_keep(&s, one_minus(f, l, &s, y)), x)), lse);
  if (weight) loss = kiln_mul_at(f, l, fe_keep(&s, loss), weight);
  return fe_temps_done(&s, reduce_loss(f, l, &s, loss, reduction));
}

/* ---- class losses ------------------------------------------------------------ */
/* The checks of nll_loss and cross_entropy with class indices: input (N, C,
 * d1, ...) or (C,), target int64 of input's shape without dim 1 (or 0-dim),
 * weight (C,) or NULL. NULL when they fit, else the error to return. */
static ir_node *check_classes(const char *f, int l, const char *op, ir_node *input, ir_node *target, ir_node *weight) {
  ir_node *e = check_floats(f, l, op, 3, (ir_node *[]){input, NULL, weight}, 1);
  if (e || (e = fe_check_arg(f, l, op, target, 2))) return e;
  int cd = input->ndim > 1, nd = input->ndim;
  bool fits = nd >= 1 && target->ndim == nd - 1 && (target->dtype == KILN_I64 || target->dtype == KILN_I32);
  for (int d = 0, t = 0; fits && d < nd; d++)
    if (d != cd) fits = target->shape[t++] == input->shape[d];
  if (fits && weight) fits = weight->ndim == 1 && weight->shape[0] == input->shape[cd];
  if (fits) return NULL;
  ir_str s = {0};
  ir_str_shape(&s, input->ndim, input->shape);
  ir_str_printf(&s, " and target ");
  fe_describe(&s, target);
  e = fe_error(KILN_ERR_SHAPE, f, l, "%s: input %s do not fit: the target holds an int64 class index per input row "
               "(the input without its class dim %d)%s", op, s.s, cd, weight ? ", the weight one value per class" : "");
  ir_str_free(&s);
  return e;
}

/* -w[t] logp[t] per row (0 where t is ignore_index), reduced; mean divides
 * by the weights of the rows counted, as torch. logp's class dim is cd. */
static ir_node *nll(const char *f, int l, fe_temps *s, ir_node *logp, ir_node *target, ir_node *weight,
                    const char *reduction, int64_t ignore_index, int cd, ir_node **wsum) {
  ir_node *keep_row = fe_keep(s, kiln_nes_at(f, l, target, (double)ignore_index));
  ir_node *zero = fe_keep(s, kiln_zeros_like_at(f, l, target));
  ir_node *t = fe_keep(s, kiln_where_at(f, l, keep_row, target, zero));
  ir_node *picked = fe_keep(s, kiln_gather_at(f, l, logp, cd, fe_keep(s, kiln_unsqueeze_at(f, l, t, cd))));
  picked = fe_keep(s, kiln_squeeze_dim_at(f, l, picked, cd));
  ir_node *w = weight ? fe_keep(s, kiln_take_at(f, l, weight, t)) : fe_keep(s, kiln_ones_like_at(f, l, picked));
  w = fe_keep(s, kiln_where_at(f, l, keep_row, w, fe_keep(s, kiln_zeros_like_at(f, l, w))));
  ir_node *loss = fe_keep(s, kiln_neg_at(f, l, fe_keep(s, kiln_mul_at(f, l, picked, w))));
  *wsum = fe_keep(s, kiln_sum_at(f, l, w));
  if (reduction && !strcmp(reduction, "none")) return fe_same(loss);
  ir_node *sum = fe_keep(s, kiln_sum_at(f, l, loss));
  if (reduction && !strcmp(reduction, "sum")) return fe_same(sum);
  return kiln_div_at(f, l, sum, *wsum);
}

/* input and target as (N, C) and (N,) when input is one row (C,). */
static void as_batch(const char *f, int l, fe_temps *s, ir_node **input, ir_node **target) {
  if ((*input)->ndim != 1) return;
  *input = fe_keep(s, kiln_unsqueeze_at(f, l, *input, 0));
  *target = fe_keep(s, kiln_unsqueeze_at(f, l, *target, 0));
}

/* A loss over a row as torch returns it: a 1-D input's "none" loss is 0-dim. */
static ir_node *unbatched(const char *f, int l, fe_temps *s, ir_node *loss, bool one_row) {
  return one_row && loss->ndim == 1 ? kiln_squeeze_dim_at(f, l, fe_keep(s, loss), 0) : loss;
}

static ir_node *nll_loss(const char *f, int l, ir_node *input, ir_node *target, ir_node *weight, const char *reduction,
                         int64_t ignore_index) {
  ir_node *e = check_classes(f, l, "nll_loss", input, target, weight);
  if (e || (e = check_reduction(f, l, "nll_loss", reduction))) return e;
  fe_temps s = {0};
  bool one_row = input->ndim == 1;
  as_batch(f, l, &s, &input, &target);
  ir_node *wsum;
  return fe_temps_done(&s, unbatched(f, l, &s, nll(f, l, &s, input, target, weight, reduction, ignore_index, 1, &wsum),
                                     one_row));
}

/* Class probabilities (target of input's shape): -sum_c w_c y_c logp_c per
 * row, mean over the rows. */
static ir_node *soft_targets(const char *f, int l, fe_temps *s, ir_node *logp, ir_node *target, ir_node *weight,
                             const char *reduction, double smoothing) {
  int64_t classes = logp->shape[1];
  if (smoothing > 0)
    target = fe_keep(s, kiln_adds_at(f, l, fe_keep(s, kiln_muls_at(f, l, target, 1 - smoothing)), smoothing / (double)classes));
  ir_node *p = fe_keep(s, kiln_mul_at(f, l, logp, target));
  if (weight) {
    int64_t shape[KILN_MAX_DIMS] = {classes};
    for (int d = 1; d < logp->ndim - 1; d++) shape[d] = 1;
    p = fe_keep(s, kiln_mul_at(f, l, p, fe_keep(s, kiln_reshape_at(f, l, weight, logp->ndim - 1, shape))));
  }
  ir_node *loss = fe_keep(s, kiln_neg_at(f, l, fe_keep(s, kiln_sum_dims_at(f, l, p, 1, (int64_t[]){1}, 0))));
  return reduce_loss(f, l, s, fe_same(loss), reduction);
}

/* torch's cross_entropy: log_softmax over the classes (dim 1, or 0 for one
 * row), then nll_loss of class indices (label smoothing as torch: (1 - e)
 * nll + e/C * the mean over classes of -w logp) or the soft-target loss. */
static ir_node *cross_entropy(const char *f, int l, ir_node *input, ir_node *target, ir_node *weight,
                              const char *reduction, int64_t ignore_index, double smoothing) {
  const char *op = "cross_entropy";
  ir_node *e = fe_check_arg(f, l, op, target, 2);
  bool soft = !e && ir_is_float(target->dtype);
  if (!e && soft) e = check_loss(f, l, op, 3, (ir_node *[]){input, target, weight}, reduction, true);
  else if (!e) e = check_classes(f, l, op, input, target, weight);
  if (!e) e = check_reduction(f, l, op, reduction);
  if (!e && (smoothing < 0 || smoothing > 1))
    e = fe_error(KILN_ERR_ARG, f, l, "%s: label_smoothing must be between 0.0 and 1.0, got %g", op, smoothing);
  if (e) return e;
  fe_temps s = {0};
  bool one_row = input->ndim == 1;
  if (one_row && soft) {
    input = fe_keep(&s, kiln_unsqueeze_at(f, l, input, 0));
    target = fe_keep(&s, kiln_unsqueeze_at(f, l, target, 0));
  } else {
    as_batch(f, l, &s, &input, &target);
  }
  ir_node *logp = fe_keep(&s, kiln_log_softmax_at(f, l, input, 1));
  if (soft) return fe_temps_done(&s, unbatched(f, l, &s, soft_targets(f, l, &s, logp, target, weight, reduction, smoothing), one_row));
  ir_node *wsum, *loss = fe_keep(&s, nll(f, l, &s, logp, target, weight, reduction, ignore_index, 1, &wsum));
  if (smoothing > 0) {
    int64_t classes = logp->shape[1], shape[KILN_MAX_DIMS] = {classes};
    for (int d = 1; d < logp->ndim - 1; d++) shape[d] = 1;
    ir_node *wl = weight ? fe_keep(&s, kiln_mul_at(f, l, logp, fe_keep(&s, kiln_reshape_at(f, l, weight, logp->ndim - 1, shape))))
                         : logp;
    ir_node *smooth = fe_keep(&s, kiln_neg_at(f, l, fe_keep(&s, kiln_sum_dims_at(f, l, wl, 1, (int64_t[]){1}, 0))));
    ir_node *counted = fe_keep(&s, kiln_nes_at(f, l, target, (double)ignore_index));
    smooth = fe_keep(&s, kiln_where_at(f, l, counted, smooth, fe_keep(&s, kiln_zeros_like_at(f, l, smooth))));
    if (!reduction || !strcmp(reduction, "mean"))
      smooth = fe_keep(&s, kiln_div_at(f, l, fe_keep(&s, kiln_sum_at(f, l, smooth)),
                                        weight ? wsum : fe_keep(&s, kiln_sum_at(f, l, counted))));
    else if (!strcmp(reduction, "sum"))
      smooth = fe_keep(&s, kiln_sum_at(f, l, smooth));
    ir_node *a = fe_keep(&s, kiln_muls_at(f, l, loss, 1 - smoothing));
    loss = fe_keep(&s, kiln_add_at(f, l, a, fe_keep(&s, kiln_muls_at(f, l, smooth, smoothing / (double)classes))));
  }
  return fe_temps_done(&s, unbatched(f, l, &s, fe_same(loss), one_row));
}

/* ---- attention --------------------------------------------------------------- */
/* NULL when q [..., L, E], k [..., S, E], v [..., S, Ev] and the mask fit
 * together, else the error to return. */
static ir_node *check_attention(const char *f, int l, ir_node *q, ir_node *k, ir_node *v, ir_node *mask, int causal,
                                int gqa) {
  const char *op = "scaled_dot_product_attention";
  ir_node *e = check_floats(f, l, op, 3, (ir_node *[]){q, k, v}, 3);
  if (e || (mask && (e = fe_check_arg(f, l, op, mask, 4)))) return e;
  ir_str d = {0};
  const char *why = NULL;
  if (q->ndim < 2 || k->ndim != q->ndim || v->ndim != q->ndim) why = "need q, k and v of one rank, at least 2 dims";
  else if (k->shape[k->ndim - 1] != q->shape[q->ndim - 1]) why = "q and k must have the same last dim (E)";
  else if (v->shape[v->ndim - 2] != k->shape[k->ndim - 2]) why = "k and v must have the same sequence length (S)";
  else if (mask && causal) why = "an explicit attn_mask should not be set when is_causal is true";
  else if (mask && mask->dtype != KILN_BOOL && !ir_is_float(mask->dtype)) why = "attn_mask must be bool or floating";
  else if (gqa && (q->ndim < 3 || k->shape[k->ndim - 3] != v->shape[v->ndim - 3] ||
                   q->shape[q->ndim - 3] % k->shape[k->ndim - 3]))
    why = "with enable_gqa the query heads (dim -3) must be a multiple of the key/value heads";
  if (!why) return NULL;
  for (int i = 0; i < 3; i++) {
    const ir_node *t = i == 0 ? q : i == 1 ? k : v;
    ir_str_printf(&d, i ? ", " : "");
    ir_str_shape(&d, t->ndim, t->shape);
  }
  e = fe_error(KILN_ERR_SHAPE, f, l, "%s: q, k, v of shapes %s: %s", op, d.s, why);
  ir_str_free(&d);
  return e;
}

/* k [..., Hkv, S, E] with every head repeated for the Hq / Hkv query heads
 * that share it (head h of q reads head h / (Hq / Hkv)): a view. */
static ir_node *repeat_heads(const char *f, int l, ir_node *t, int64_t hq, fe_temps *s) {
  int nd = t->ndim;
  int64_t hkv = t->shape[nd - 3], split[KILN_MAX_DIMS + 1], wide[KILN_MAX_DIMS + 1];
  if (hkv == hq) return t;
  memcpy(split, t->shape, (size_t)(nd - 2) * sizeof *split);
  split[nd - 2] = 1;
  split[nd - 1] = t->shape[nd - 2];
  split[nd] = t->shape[nd - 1];
  memcpy(wide, split, sizeof wide);
  wide[nd - 2] = hq / hkv;
  ir_node *u = fe_keep(s, kiln_reshape_at(f, l, t, nd + 1, split));
  ir_node *x = fe_keep(s, kiln_expand_at(f, l, u, nd + 1, wide));
  int64_t shape[KILN_MAX_DIMS];
  memcpy(shape, t->shape, (size_t)nd * sizeof *shape);
  shape[nd - 3] = hq;
  return fe_keep(s, kiln_reshape_at(f, l, x, nd, shape));
}

/* Scores where the causal or boolean mask is false become -inf; a float
 * mask is added. */
static ir_node *masked(const char *f, int l, ir_node *scores, ir_node *mask, int causal, fe_temps *s) {
  if (causal) {
    int64_t ls = scores->shape[scores->ndim - 2], ss = scores->shape[scores->ndim - 1];
    ir_node *row = fe_keep(s, kiln_reshape_at(f, l, fe_keep(s, kiln_arange_at(f, l, 0, (double)ls, 1)), 2, (int64_t[]){ls, 1}));
    ir_node *col = fe_keep(s, kiln_arange_at(f, l, 0, (double)ss, 1));
    mask = fe_keep(s, kiln_le_at(f, l, col, row));   /* torch's ones(L, S).tril() */
  }
  if (!mask) return scores;
  if (mask->dtype != KILN_BOOL) return fe_keep(s, kiln_add_at(f, l, scores, mask));
  ir_node *ninf = fe_keep(s, kiln_full_at(f, l, 0, NULL, -INFINITY, scores->dtype));
  return fe_keep(s, kiln_where_at(f, l, mask, scores, ninf));
}

/* softmax(q k^T * scale + mask) v: one fused node where attention.c covers
 * the case, else the plain composition: a GEMM whose epilogue scales and
 * masks, a row softmax and a second GEMM. A fully masked row is NaN, as in
 * torch's math backend. */
static ir_node *attention(const char *f, int l, ir_node *q, ir_node *k, ir_node *v, ir_node *mask, int causal,
                          double scale, int gqa) {
  ir_node *e = check_attention(f, l, q, k, v, mask, causal, gqa);
  if (e) return e;
  double sc = scale != 0 ? scale : 1 / sqrt((double)q->shape[q->ndim - 1]);
  ir_node *fused = fe_attention_fused(f, l, q, k, v, mask, causal, sc, gqa);
  if (fused) return fused;
  fe_temps s = {0};
  if (gqa) {
    k = repeat_heads(f, l, k, q->shape[q->ndim - 3], &s);
    v = repeat_heads(f, l, v, q->shape[q->ndim - 3], &s);
  }
  ir_node *kt = fe_keep(&s, kiln_transpose_at(f, l, k, -2, -1));
  ir_node *scores = fe_keep(&s, kiln_muls_at(f, l, fe_keep(&s, kiln_matmul_at(f, l, q, kt)), sc));
  ir_node *p = fe_keep(&s, kiln_softmax_at(f, l, masked(f, l, scores, mask, causal, &s), -1));
  return fe_temps_done(&s, kiln_matmul_at(f, l, p, v));
}

/* ---- the public functions ------------------------------------------------- */
kiln_tensor *kiln_rms_norm_at(const char *f, int l, kiln_tensor *x, int nlast, kiln_tensor *weight, double eps) {
  FE_AS("rms_norm", rms_norm(f, l, x, nlast, weight, eps));
}
kiln_tensor *kiln_batch_norm_at(const char *f, int l, kiln_tensor *x, kiln_tensor *running_mean,
                                kiln_tensor *running_var, kiln_tensor *weight, kiln_tensor *bias, double eps) {
  FE_AS("batch_norm", batch_norm(f, l, x, running_mean, running_var, weight, bias, eps));
}
kiln_tensor *kiln_group_norm_at(const char *f, int l, kiln_tensor *x, int64_t num_groups, kiln_tensor *weight,
                                kiln_tensor *bias, double eps) {
  FE_AS("group_norm", group_norm(f, l, x, num_groups, weight, bias, eps));
}
kiln_tensor *kiln_scaled_dot_product_attention_at(const char *f, int l, kiln_tensor *q, kiln_tensor *k,
                                                  kiln_tensor *v, kiln_tensor *attn_mask, int is_causal, double scale,
                                                  int enable_gqa) {
  FE_AS("scaled_dot_product_attention", attention(f, l, q, k, v, attn_mask, is_causal, scale, enable_gqa));
}
kiln_tensor *kiln_nll_loss_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target, kiln_tensor *weight,
                              const char *reduction, int64_t ignore_index) {
  FE_AS("nll_loss", nll_loss(f, l, input, target, weight, reduction, ignore_index));
}
kiln_tensor *kiln_cross_entropy_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target, kiln_tensor *weight,
                                   const char *reduction, int64_t ignore_index, double label_smoothing) {
  FE_AS("cross_entropy", cross_entropy(f, l, input, target, weight, reduction, ignore_index, label_smoothing));
}
kiln_tensor *kiln_mse_loss_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target, const char *reduction) {
  FE_AS("mse_loss", mse_loss(f, l, input, target, reduction));
}
kiln_tensor *kiln_l1_loss_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target, const char *reduction) {
  FE_AS("l1_loss", l1_loss(f, l, input, target, reduction));
}
kiln_tensor *kiln_binary_cross_entropy_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target,
                                          kiln_tensor *weight, const char *reduction) {
  FE_AS("binary_cross_entropy", binary_cross_entropy(f, l, input, target, weight, reduction));
}
kiln_tensor *kiln_binary_cross_entropy_with_logits_at(const char *f, int l, kiln_tensor *input, kiln_tensor *target,
                                                      kiln_tensor *weight, kiln_tensor *pos_weight,
                                                      const char *reduction) {
  FE_AS("binary_cross_entropy_with_logits", bce_with_logits(f, l, input, target, weight, pos_weight, reduction));
}
