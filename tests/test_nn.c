/* test_nn.c: the normalizations and losses of torch.nn.functional
 * (rms_norm, batch_norm, group_norm, scaled_dot_product_attention,
 * mse_loss, l1_loss, binary cross entropies): values against plain C loops of the textbook formulas,
 * fused and eager against the reference evaluator, the kernels they fuse
 * into, odd shapes, torch's clamps and stable forms, and the error paths. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

/* ---- helpers --------------------------------------------------------------- */
/* t's values as doubles (row-major), valid until the scope ends. */
static const double *values(kiln_tensor *t) {
  const double *v = kiln_data(kiln_cast(t, KILN_F64));
  ck_assert_msg(v, "%s", kiln_last_error());
  return v;
}

static void assert_close(const char *what, kiln_tensor *got, const double *want, int64_t n, double tol) {
  ck_assert_int_eq(kiln_numel(got), n);
  const double *g = values(got);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(fabs(g[i] - want[i]) <= tol * (1 + fabs(want[i])), "%s[%lld]: got %.9g, want %.9g", what,
                  (long long)i, g[i], want[i]);
}

/* Realizes every input, then counts the kernels the result takes. */
static unsigned long long kernels_for(kiln_tensor *y, int n, kiln_tensor *const *inputs) {
  for (int i = 0; i < n; i++)
    if (inputs[i]) ck_assert_int_eq(kiln_realize(inputs[i]), KILN_OK);
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  return kiln_stats().kernels_launched;
}

static kiln_tensor *positive(kiln_tensor *t) { return kiln_adds(kiln_abs(t), 0.5); }
static kiln_tensor *small(int ndim, const int64_t *shape, uint64_t seed) {
  return tu_data(KILN_F32, ndim, shape, seed, TU_SMALL);
}

/* ---- normalizations -------------------------------------------------------- */
START_TEST(rms_norm_values) {
  kiln_scope_begin();
  kiln_tensor *x = small(KILN_SHAPE(4, 6), 1), *w = small(KILN_SHAPE(6), 2);
  kiln_tensor *y = kiln_rms_norm(x, 1, w, 1e-6);
  ck_assert_uint_eq(kernels_for(y, 2, (kiln_tensor *[]){x, w}), 1);
  const double *xv = values(x), *wv = values(w);
  double want[24];
  for (int r = 0; r < 4; r++) {
    double ms = 0;
    for (int c = 0; c < 6; c++) ms += xv[r * 6 + c] * xv[r * 6 + c] / 6;
    for (int c = 0; c < 6; c++) want[r * 6 + c] = xv[r * 6 + c] / sqrt(ms + 1e-6) * wv[c];
  }
  assert_close("rms_norm", y, want, 24, 1e-5);
  /* over the last two dims of a transposed (non-contiguous) input, no weight */
  kiln_tensor *x3 = kiln_transpose(small(KILN_SHAPE(3, 2, 4), 3), 0, 1);
  kiln_tensor *y3 = kiln_rms_norm(x3, 2, NULL, 1e-5);
  const double *v3 = values(x3);
  double want3[24];
  for (int b = 0; b < 2; b++) {
    double ms = 0;
    for (int i = 0; i < 12; i++) ms += v3[b * 12 + i] * v3[b * 12 + i] / 12;
    for (int i = 0; i < 12; i++) want3[b * 12 + i] = v3[b * 12 + i] / sqrt(ms + 1e-5);
  }
  assert_close("rms_norm (2 dims)", y3, want3, 24, 1e-5);
  kiln_scope_end();
}
END_TEST

START_TEST(batch_norm_values) {
  kiln_scope_begin();
  kiln_tensor *x = small(KILN_SHAPE(2, 3, 4, 5), 4), *m = small(KILN_SHAPE(3), 5);
  kiln_tensor *v = positive(small(KILN_SHAPE(3), 6)), *w = small(KILN_SHAPE(3), 7), *b = small(KILN_SHAPE(3), 8);
  kiln_tensor *y = kiln_batch_norm(x, m, v, w, b, 1e-5);
  ck_assert_uint_eq(kernels_for(y, 5, (kiln_tensor *[]){x, m, v, w, b}), 1);
  const double *xv = values(x), *mv = values(m), *vv = values(v), *wv = values(w), *bv = values(b);
  double want[120], bare[120];
  for (int i = 0; i < 120; i++) {
    int c = i / 20 % 3;
    bare[i] = (xv[i] - mv[c]) / sqrt(vv[c] + 1e-5);
    want[i] = bare[i] * wv[c] + bv[c];
  }
  assert_close("batch_norm", y, want, 120, 1e-5);
  assert_close("batch_norm (no affine)", kiln_batch_norm(x, m, v, NULL, NULL, 1e-5), bare, 120, 1e-5);
  kiln_scope_end();
}
END_TEST

START_TEST(group_norm_values) {
  kiln_scope_begin();
  kiln_tensor *x = small(KILN_SHAPE(2, 6, 5), 9), *w = small(KILN_SHAPE(6), 10), *b = small(KILN_SHAPE(6), 11);
  const double *xv = values(x), *wv = values(w), *bv = values(b);
  double want[60];
  for (int n = 0; n < 2; n++)
    for (int g = 0; g < 3; g++) {
      const double *p = xv + n * 30 + g * 10;   /* 2 channels x 5 */
      double mean = 0, var = 0;
      for (int i = 0; i < 10; i++) mean += p[i] / 10;
      for (int i = 0; i < 10; i++) var += (p[i] - mean) * (p[i] - mean) / 10;
      for (int i = 0; i < 10; i++) {
        int c = g * 2 + i / 5;
        want[n * 30 + g * 10 + i] = (p[i] - mean) / sqrt(var + 1e-5) * wv[c] + bv[c];
      }
    }
  kiln_tensor *y = kiln_group_norm(x, 3, w, b, 1e-5);
  ck_assert_uint_eq(kernels_for(y, 3, (kiln_tensor *[]){x, w, b}), 1);
  assert_close("group_norm", y, want, 60, 1e-5);
  /* one group per channel (instance norm) and one group for all */
  assert_close("group_norm (1 group)", kiln_group_norm(x, 1, NULL, NULL, 1e-5),
               values(kiln_reshape(kiln_layer_norm(kiln_reshape(x, KILN_SHAPE(2, 30)), 1, NULL, NULL, 1e-5),
                                   KILN_SHAPE(2, 6, 5))),
               60, 1e-5);
  ck_assert_int_eq(kiln_status_of(kiln_group_norm(x, 6, NULL, NULL, 1e-5)), KILN_OK);
  kiln_scope_end();
}
END_TEST

/* ---- attention --------------------------------------------------------------- */
/* softmax(q k^T * scale + mask) v in double, q (B, Hq, L, E), k (B, Hkv, S,
 * E), v (B, Hkv, S, Ev); mode 0 none, 1 causal, 2 the bool mask keep[L][S],
 * 3 the float mask add[L][S]. */
typedef struct {
  int b, hq, hkv, l, s, e, ev, mode;
  double scale;
} attn_case;

static double attn_ref(const attn_case *c, const double *q, const double *k, const double *v, const double *mask,
                       int bi, int h, int i, int j) {
  int kh = h / (c->hq / c->hkv);
  double sc = c->scale ? c->scale : 1 / sqrt(c->e), w[16], mx = -INFINITY, sum = 0, out = 0;
  for (int t = 0; t < c->s; t++) {
    double d = 0;
    for (int x = 0; x < c->e; x++)
      d += q[((bi * c->hq + h) * c->l + i) * c->e + x] * k[((bi * c->hkv + kh) * c->s + t) * c->e + x];
    d *= sc;
    if ((c->mode == 1 && t > i) || (c->mode == 2 && !mask[i * c->s + t])) d = -INFINITY;
    if (c->mode == 3) d += mask[i * c->s + t];
    w[t] = d;
    mx = fmax(mx, d);
  }
  for (int t = 0; t < c->s; t++) sum += exp(w[t] - mx);
  for (int t = 0; t < c->s; t++) out += exp(w[t] - mx) / sum * v[((bi * c->hkv + kh) * c->s + t) * c->ev + j];
  return out;
}

static const attn_case attn_cases[] = {
  {2, 2, 2, 3, 5, 4, 3, 0, 0},   {2, 2, 2, 3, 5, 4, 3, 1, 0},   {1, 2, 2, 3, 5, 4, 3, 2, 0.7},
  {1, 2, 2, 3, 5, 4, 2, 3, 0},   {2, 4, 2, 4, 4, 3, 3, 1, 0},   {1, 3, 1, 1, 6, 5, 2, 0, 0},
};

START_TEST(attention_values) {
  const attn_case *c = &attn_cases[_i];
  kiln_scope_begin();
  kiln_tensor *q = tu_data(KILN_F64, KILN_SHAPE(c->b, c->hq, c->l, c->e), 30, TU_SMALL);
  kiln_tensor *k = tu_data(KILN_F64, KILN_SHAPE(c->b, c->hkv, c->s, c->e), 31, TU_SMALL);
  kiln_tensor *v = tu_data(KILN_F64, KILN_SHAPE(c->b, c->hkv, c->s, c->ev), 32, TU_SMALL);
  /* the bool mask keeps (i + t) % 3 != 0 and masks row 0 entirely (NaN, as torch) */
  double mv[64];
  for (int i = 0; i < c->l; i++)
    for (int t = 0; t < c->s; t++)
      mv[i * c->s + t] = c->mode == 2 ? (i > 0 && (i + t) % 3 != 0) : 0.25 * (i - t);
  kiln_tensor *mask = NULL;
  if (c->mode >= 2) {
    mask = kiln_from_data(mv, KILN_F64, KILN_SHAPE(c->l, c->s));
    if (c->mode == 2) mask = kiln_cast(mask, KILN_BOOL);
  }
  kiln_tensor *y = kiln_scaled_dot_product_attention(q, k, v, mask, c->mode == 1, c->scale, c->hq != c->hkv);
  ck_assert_msg(kiln_status_of(y) == KILN_OK, "%s", kiln_last_error());
  const double *qv = values(q), *kv = values(k), *vv = values(v), *got = values(y);
  int64_t n = 0;
  for (int bi = 0; bi < c->b; bi++)
    for (int h = 0; h < c->hq; h++)
      for (int i = 0; i < c->l; i++)
        for (int j = 0; j < c->ev; j++, n++) {
          double want = attn_ref(c, qv, kv, vv, mv, bi, h, i, j);
          if (isnan(want)) ck_assert_msg(isnan(got[n]), "[%lld] got %g, want NaN", (long long)n, got[n]);
          else ck_assert_msg(fabs(got[n] - want) < 1e-12, "[%lld] got %.15g, want %.15g", (long long)n, got[n], want);
        }
  ck_assert_int_eq(n, kiln_numel(y));
  kiln_scope_end();
}
END_TEST

/* ---- losses ---------------------------------------------------------------- */
/* Each reduction of a loss whose elementwise values are want[0..n). */
static void assert_reductions(const char *what, kiln_tensor *none, kiln_tensor *mean, kiln_tensor *sum,
                              const double *want, int64_t n) {
  double total = 0;
  for (int64_t i = 0; i < n; i++) total += want[i];
  double m = total / (double)n;
  assert_close(what, none, want, n, 1e-5);
  ck_assert_int_eq(kiln_ndim(mean), 0);
  assert_close(what, mean, &m, 1, 1e-5);
  assert_close(what, sum, &total, 1, 1e-5);
}

START_TEST(mse_l1_values) {
  kiln_scope_begin();
  kiln_tensor *x = small(KILN_SHAPE(4, 3), 12), *t = small(KILN_SHAPE(4, 1), 13);   /* target broadcasts */
  const double *xv = values(x), *tv = values(t);
  double sq[12], ab[12];
  for (int i = 0; i < 12; i++) {
    double d = xv[i] - tv[i / 3];
    sq[i] = d * d;
    ab[i] = fabs(d);
  }
  ck_assert_uint_eq(kernels_for(kiln_mse_loss(x, t, "mean"), 2, (kiln_tensor *[]){x, t}), 1);
  assert_reductions("mse_loss", kiln_mse_loss(x, t, "none"), kiln_mse_loss(x, t, NULL), kiln_mse_loss(x, t, "sum"), sq, 12);
  assert_reductions("l1_loss", kiln_l1_loss(x, t, "none"), kiln_l1_loss(x, t, "mean"), kiln_l1_loss(x, t, "sum"), ab, 12);
  kiln_scope_end();
}
END_TEST

START_TEST(bce_values) {
  kiln_scope_begin();
  /* probabilities, with 0 and 1 exactly: torch clamps each log at -100 */
  double pv[8] = {0.1, 0.5, 0.9, 0.0, 1.0, 0.3, 0.7, 0.99}, yv[8] = {0, 1, 1, 1, 0, 0.25, 0.5, 1};
  double wv[4] = {1, 2, 0.5, 3};
  kiln_tensor *p = kiln_cast(kiln_from_data(pv, KILN_F64, KILN_SHAPE(2, 4)), KILN_F32);
  kiln_tensor *y = kiln_cast(kiln_from_data(yv, KILN_F64, KILN_SHAPE(2, 4)), KILN_F32);
  kiln_tensor *w = kiln_cast(kiln_from_data(wv, KILN_F64, KILN_SHAPE(4)), KILN_F32);
  double want[8];
  for (int i = 0; i < 8; i++) {
    double px = (float)pv[i];
    double lx = fmax(log(px), -100), l1x = fmax(log(1 - px), -100);
    want[i] = -(yv[i] * lx + (1 - yv[i]) * l1x) * wv[i % 4];
  }
  ck_assert(want[3] == 100 * wv[3] && want[4] == 100 * wv[0]);
  kiln_tensor *none = kiln_binary_cross_entropy(p, y, w, "none");
  ck_assert_uint_eq(kernels_for(none, 3, (kiln_tensor *[]){p, y, w}), 1);
  assert_reductions("binary_cross_entropy", none, kiln_binary_cross_entropy(p, y, w, "mean"),
                    kiln_binary_cross_entropy(p, y, w, "sum"), want, 8);
  kiln_scope_end();
}
END_TEST

START_TEST(bce_with_logits_values) {
  kiln_scope_begin();
  /* large logits: the stable form gives |x|, never inf or NaN */
  double xv[6] = {-2, 0.5, 3, 100, -100, 0}, yv[6] = {1, 0, 0.3, 0, 1, 1}, pwv[3] = {2, 0.5, 1}, wv[3] = {1, 3, 0.25};
  kiln_tensor *x = kiln_from_data(xv, KILN_F64, KILN_SHAPE(2, 3));
  kiln_tensor *y = kiln_from_data(yv, KILN_F64, KILN_SHAPE(2, 3));
  kiln_tensor *pw = kiln_from_data(pwv, KILN_F64, KILN_SHAPE(3)), *w = kiln_from_data(wv, KILN_F64, KILN_SHAPE(3));
  double plain[6], weighted[6];
  for (int i = 0; i < 6; i++) {
    double sp = xv[i] > 0 ? log1p(exp(-xv[i])) : -xv[i] + log1p(exp(xv[i]));   /* log(1 + e^-x) */
    plain[i] = (1 - yv[i]) * xv[i] + sp;
    weighted[i] = ((1 - yv[i]) * xv[i] + (1 + (pwv[i % 3] - 1) * yv[i]) * sp) * wv[i % 3];
  }
  ck_assert(fabs(plain[3] - 100) < 1e-9 && fabs(plain[4] - 100) < 1e-9);
  assert_reductions("bce_with_logits", kiln_binary_cross_entropy_with_logits(x, y, NULL, NULL, "none"),
                    kiln_binary_cross_entropy_with_logits(x, y, NULL, NULL, "mean"),
                    kiln_binary_cross_entropy_with_logits(x, y, NULL, NULL, "sum"), plain, 6);
  assert_close("bce_with_logits (weights)", kiln_binary_cross_entropy_with_logits(x, y, w, pw, "none"), weighted, 6, 1e-12);
  kiln_scope_end();
}
END_TEST

/* torch's cross_entropy on class indices, written out: logp by rows, the
 * weighted nll over the rows not ignored, label smoothing's (1 - e) nll +
 * e/C * (the weighted -sum of logp), each reduced as asked. */
static double ce_by_hand(const double *x, const int64_t *t, const double *w, int n, int c, const char *red, double eps,
                         double *none) {
  double nll = 0, smooth = 0, wsum = 0, counted = 0;
  for (int i = 0; i < n; i++) {
    double mx = -INFINITY, se = 0, sm = 0;
    for (int j = 0; j < c; j++) mx = fmax(mx, x[i * c + j]);
    for (int j = 0; j < c; j++) se += exp(x[i * c + j] - mx);
    bool ok = t[i] != -100;
    double wi = ok ? (w ? w[t[i]] : 1) : 0, li = ok ? -wi * (x[i * c + t[i]] - mx - log(se)) : 0;
    for (int j = 0; j < c; j++) sm -= ok ? (w ? w[j] : 1) * (x[i * c + j] - mx - log(se)) : 0;
    none[i] = (1 - eps) * li + eps / c * sm;
    nll += li, smooth += sm, wsum += wi, counted += ok;
  }
  if (!strcmp(red, "sum")) return (1 - eps) * nll + eps / c * smooth;
  return (1 - eps) * nll / wsum + eps / c * smooth / (w ? wsum : counted);
}

START_TEST(cross_entropy_classes) {
  static const struct { bool weighted; double eps; } rows[] = {{false, 0}, {true, 0}, {false, 0.1}, {true, 0.25}};
  double xv[20], wv[5] = {1, 0.5, 2, 1.5, 0.25}, none[4];
  int64_t tv[4] = {0, 4, -100, 1};
  for (int i = 0; i < 20; i++) xv[i] = sin(i * 1.7) * 3;
  for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(xv, KILN_F64, KILN_SHAPE(4, 5)), *t = kiln_from_data(tv, KILN_I64, KILN_SHAPE(4));
    kiln_tensor *w = rows[r].weighted ? kiln_from_data(wv, KILN_F64, KILN_SHAPE(5)) : NULL;
    const double *wp = rows[r].weighted ? wv : NULL;
    double sum = ce_by_hand(xv, tv, wp, 4, 5, "sum", rows[r].eps, none), mean = ce_by_hand(xv, tv, wp, 4, 5, "mean", rows[r].eps, none);
    assert_close("cross_entropy none", kiln_cross_entropy(x, t, w, "none", -100, rows[r].eps), none, 4, 1e-12);
    assert_close("cross_entropy sum", kiln_cross_entropy(x, t, w, "sum", -100, rows[r].eps), &sum, 1, 1e-12);
    assert_close("cross_entropy mean", kiln_cross_entropy(x, t, w, "mean", -100, rows[r].eps), &mean, 1, 1e-12);
    if (rows[r].eps == 0)   /* nll_loss of log_softmax is the same */
      assert_close("nll_loss", kiln_nll_loss(kiln_log_softmax(x, 1), t, w, NULL, -100), &mean, 1, 1e-12);
    kiln_scope_end();
  }
}
END_TEST

/* Probabilities as targets, spatial nll_loss, a (C,) input, a class out of range. */
START_TEST(cross_entropy_other_forms) {
  kiln_scope_begin();
  double xv[6] = {0.5, -1, 2, 0, 1, -0.5}, yv[6] = {0.2, 0.3, 0.5, 1, 0, 0}, want = 0;
  for (int i = 0; i < 2; i++) {
    double mx = fmax(fmax(xv[3 * i], xv[3 * i + 1]), xv[3 * i + 2]), se = 0;
    for (int j = 0; j < 3; j++) se += exp(xv[3 * i + j] - mx);
    for (int j = 0; j < 3; j++) want -= (yv[3 * i + j] * 0.9 + 0.1 / 3) * (xv[3 * i + j] - mx - log(se)) / 2;
  }
  kiln_tensor *x = kiln_from_data(xv, KILN_F64, KILN_SHAPE(2, 3));
  assert_close("soft targets", kiln_cross_entropy(x, kiln_from_data(yv, KILN_F64, KILN_SHAPE(2, 3)), NULL, "mean", -100, 0.1),
               &want, 1, 1e-12);
  /* (N, C, d): input[n, t[n, d], d], negated, weighted mean */
  double lv[12], got_want = 0, wsum = 0, cw[3] = {1, 2, 3};
  int64_t tv[4] = {2, 0, 1, 2};
  for (int i = 0; i < 12; i++) lv[i] = -0.1 * i;
  for (int n = 0; n < 2; n++)
    for (int d = 0; d < 2; d++) {
      int64_t c = tv[n * 2 + d];
      got_want -= cw[c] * lv[(n * 3 + c) * 2 + d], wsum += cw[c];
    }
  got_want /= wsum;
  assert_close("spatial nll_loss", kiln_nll_loss(kiln_from_data(lv, KILN_F64, KILN_SHAPE(2, 3, 2)),
                                                 kiln_from_data(tv, KILN_I64, KILN_SHAPE(2, 2)),
                                                 kiln_from_data(cw, KILN_F64, KILN_SHAPE(3)), "mean", -100),
               &got_want, 1, 1e-12);
  /* one row of logits and a 0-dim class */
  int64_t one = 2;
  kiln_tensor *row = kiln_cross_entropy(kiln_from_data(xv, KILN_F64, KILN_SHAPE(3)), kiln_from_data(&one, KILN_I64, 0, NULL),
                                        NULL, "none", -100, 0);
  double lse = log(exp(0.5) + exp(-1) + exp(2)), want_row = lse - 2;
  ck_assert_int_eq(kiln_ndim(row), 0);
  assert_close("one row", row, &want_row, 1, 1e-12);
  /* a class out of range: an error at realize, never a read outside */
  int64_t bad[2] = {1, 3};
  kiln_tensor *oob = kiln_cross_entropy(x, kiln_from_data(bad, KILN_I64, KILN_SHAPE(2)), NULL, "mean", -100, 0);
  ck_assert_int_eq(kiln_realize(oob), KILN_ERR_VALUE);
  ck_assert_msg(strstr(kiln_last_error(), "index out of range"), "%s", kiln_last_error());
  kiln_scope_end();
}
END_TEST

/* ---- fused and eager against the reference evaluator ----------------------- */
static kiln_tensor *build_nn(const void *ctx) {
  int which = *(const int *)ctx;
  kiln_tensor *x = small(KILN_SHAPE(3, 4, 5), 20), *v = small(KILN_SHAPE(4), 21);
  switch (which) {
  case 0: return kiln_rms_norm(kiln_relu(x), 2, small(KILN_SHAPE(4, 5), 22), 1e-5);
  case 1: return kiln_batch_norm(x, v, positive(v), v, v, 1e-3);
  case 2: return kiln_group_norm(kiln_transpose(small(KILN_SHAPE(4, 3, 5), 23), 0, 1), 2, v, NULL, 1e-5);
  case 3: return kiln_mse_loss(x, small(KILN_SHAPE(5), 24), "mean");
  case 4: return kiln_l1_loss(kiln_sigmoid(x), x, "sum");
  case 5: return kiln_binary_cross_entropy(kiln_sigmoid(x), kiln_sigmoid(small(KILN_SHAPE(3, 4, 5), 25)), NULL, "mean");
  case 6: return kiln_binary_cross_entropy_with_logits(x, kiln_sigmoid(x), NULL, small(KILN_SHAPE(5), 26), "none");
  default: return kiln_scaled_dot_product_attention(x, small(KILN_SHAPE(3, 6, 5), 27), small(KILN_SHAPE(3, 6, 2), 28), NULL, 1, 0, 0);
  }
}

START_TEST(fused_eager) {
  int which = _i;
  char why[512];
  ck_assert_msg(tu_check_fused_eager(build_nn, &which, KILN_F32, (ref_tol){2e-5, 2e-5}, why, sizeof why), "case %d: %s",
                which, why);
}
END_TEST

/* ---- errors ------------------------------------------------------------------ */
typedef struct {
  kiln_status status;
  const char *msg;   /* after "file:line: " */
} err_row;

static kiln_tensor *build_error(int i, int *line) {
  kiln_tensor *x = kiln_zeros(KILN_SHAPE(2, 6, 5), KILN_F32), *c6 = kiln_zeros(KILN_SHAPE(6), KILN_F32);
  kiln_tensor *c5 = kiln_zeros(KILN_SHAPE(5), KILN_F32), *ix = kiln_zeros(KILN_SHAPE(2, 6), KILN_I64);
  *line = __LINE__ + 2;
  switch (i) {
  case 0: return kiln_group_norm(x, 4, NULL, NULL, 1e-5);
  case 1: return kiln_batch_norm(x, c5, c6, NULL, NULL, 1e-5);
  case 2: return kiln_batch_norm(x, c6, NULL, NULL, NULL, 1e-5);
  case 3: return kiln_rms_norm(x, 4, NULL, 1e-5);
  case 4: return kiln_mse_loss(x, x, "avg");
  case 5: return kiln_binary_cross_entropy(x, c5, NULL, "mean");
  case 6: return kiln_l1_loss(ix, ix, "mean");
  case 7: return kiln_batch_norm(c6, c6, c6, NULL, NULL, 1e-5);
  case 8: return kiln_group_norm(x, 3, c5, NULL, 1e-5);
  case 9: return kiln_scaled_dot_product_attention(x, kiln_zeros(KILN_SHAPE(2, 4, 4), KILN_F32), x, NULL, 0, 0, 0);
  case 10: return kiln_scaled_dot_product_attention(x, x, x, kiln_zeros(KILN_SHAPE(6, 6), KILN_BOOL), 1, 0, 0);
  case 11: return kiln_scaled_dot_product_attention(x, kiln_zeros(KILN_SHAPE(2, 4, 5), KILN_F32), x, NULL, 0, 0, 1);
  case 12: return kiln_cross_entropy(x, kiln_zeros(KILN_SHAPE(2, 6), KILN_I64), NULL, "mean", -100, 0);
  case 13: return kiln_nll_loss(x, kiln_zeros(KILN_SHAPE(2, 5), KILN_I64), c5, "mean", -100);
  case 14: return kiln_cross_entropy(x, kiln_zeros(KILN_SHAPE(2, 5), KILN_I64), NULL, "mean", -100, 1.5);
  }
  return NULL;
}

static const err_row err_rows[] = {
  {KILN_ERR_SHAPE, "group_norm: expected number of channels in input to be divisible by num_groups, but got input of "
                   "shape (2,6,5) and num_groups=4"},
  {KILN_ERR_SHAPE, "batch_norm: running_mean of shape (5,) does not match the 6 channels of the input"},
  {KILN_ERR_ARG, "batch_norm: argument 3 is NULL"},
  {KILN_ERR_ARG, "rms_norm: cannot normalize the last 4 dims of a 3-dim tensor"},
  {KILN_ERR_ARG, "mse_loss: 'avg' is not a valid value for reduction (valid: 'none', 'mean', 'sum')"},
  {KILN_ERR_SHAPE, "binary_cross_entropy: target size (5,) must be the same as input size (2,6,5)"},
  {KILN_ERR_DTYPE, "l1_loss: argument 1 must be a floating tensor, got int64 (2,6)"},
  {KILN_ERR_SHAPE, "batch_norm: expected an input of at least 2 dims (N, C, ...), got 1"},
  {KILN_ERR_SHAPE, "group_norm: weight of shape (5,) does not match the 6 channels of the input"},
  {KILN_ERR_SHAPE, "scaled_dot_product_attention: q, k, v of shapes (2,6,5), (2,4,4), (2,6,5): q and k must have the "
                   "same last dim (E)"},
  {KILN_ERR_SHAPE, "scaled_dot_product_attention: q, k, v of shapes (2,6,5), (2,6,5), (2,6,5): an explicit attn_mask "
                   "should not be set when is_causal is true"},
  {KILN_ERR_SHAPE, "scaled_dot_product_attention: q, k, v of shapes (2,6,5), (2,4,5), (2,6,5): k and v must have the "
                   "same sequence length (S)"},
  {KILN_ERR_SHAPE, "cross_entropy: input (2,6,5) and target int64 (2,6) do not fit: the target holds an int64 class "
                   "index per input row (the input without its class dim 1)"},
  {KILN_ERR_SHAPE, "nll_loss: input (2,6,5) and target int64 (2,5) do not fit: the target holds an int64 class index "
                   "per input row (the input without its class dim 1), the weight one value per class"},
  {KILN_ERR_ARG, "cross_entropy: label_smoothing must be between 0.0 and 1.0, got 1.5"},
};
#define NERR ((int)(sizeof err_rows / sizeof *err_rows))

START_TEST(error_paths) {
  kiln_scope_begin();
  int line0;
  kiln_tensor *t = build_error(_i, &line0);
  char want[512];
  snprintf(want, sizeof want, "%s:%d: %s", __FILE__, line0 + _i, err_rows[_i].msg);
  ck_assert_int_eq(kiln_status_of(t), err_rows[_i].status);
  ck_assert_str_eq(kiln_last_error(), want);
  ck_assert_int_eq(kiln_realize(t), err_rows[_i].status);
  kiln_scope_end();
}
END_TEST

static Suite *nn_suite(void) {
  Suite *s = suite_create("nn");
  TCase *norms = tu_tcase(s, "norms");
  tcase_add_test(norms, rms_norm_values);
  tcase_add_test(norms, batch_norm_values);
  tcase_add_test(norms, group_norm_values);
  TCase *losses = tu_tcase(s, "losses");
  tcase_add_test(losses, mse_l1_values);
  tcase_add_test(losses, bce_values);
  tcase_add_test(losses, bce_with_logits_values);
  tcase_add_test(losses, cross_entropy_classes);
  tcase_add_test(losses, cross_entropy_other_forms);
  tcase_add_loop_test(tu_tcase(s, "attention"), attention_values, 0, (int)(sizeof attn_cases / sizeof *attn_cases));
  tcase_add_loop_test(tu_tcase(s, "fused_eager"), fused_eager, 0, 8);
  tcase_add_loop_test(tu_tcase(s, "errors"), error_paths, 0, NERR);
  return s;
}

KILN_TEST_MAIN(nn_suite)
