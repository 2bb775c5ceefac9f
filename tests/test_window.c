/* test_window.c: max_pool2d (with indices), avg_pool2d,
 * adaptive_avg_pool2d, interpolate, conv1d and conv2d against direct loops written from
 * torch's definitions (output size, ceil mode, padding, dilation,
 * count_include_pad, groups, NaN), the kernels a window op fuses into, and
 * the error paths. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

typedef struct {
  int64_t n, c, h, w;              /* n = 0: a 3-D (C, H, W) input */
  int64_t k[2], s[2], p[2], d[2];  /* s = 0: the kernel */
  int ceil, include_pad;
} pool_case;

static const pool_case cases[] = {
  {2, 3, 7, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 0, 1},
  {1, 2, 7, 7, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, 1},
  {1, 2, 7, 7, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, 0},
  {1, 1, 8, 9, {2, 3}, {1, 2}, {1, 0}, {2, 1}, 0, 1},
  {0, 2, 5, 5, {2, 2}, {0, 0}, {0, 0}, {1, 1}, 0, 1},
  {1, 3, 4, 5, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 0, 1},
  {1, 1, 2, 2, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 0, 0},
  {2, 1, 6, 5, {2, 2}, {3, 3}, {1, 0}, {1, 1}, 1, 1},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

/* torch's pooling_output_shape. */
static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil) {
  int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil && (out - 1) * s >= in + p) out--;
  return out;
}

static const double *values(kiln_tensor *t) {
  const double *v = kiln_data(kiln_cast(t, KILN_F64));
  ck_assert_msg(v, "%s", kiln_last_error());
  return v;
}

static kiln_tensor *input(const pool_case *c, kiln_dtype dt, tu_range range) {
  return c->n ? tu_data(dt, KILN_SHAPE(c->n, c->c, c->h, c->w), 40, range)
              : tu_data(dt, KILN_SHAPE(c->c, c->h, c->w), 40, range);
}

/* Realizes the inputs, then counts the kernels of the results. */
static unsigned long long kernels(kiln_tensor *x, int n, kiln_tensor *const *ys) {
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize_n(n, ys), KILN_OK);
  return kiln_stats().kernels_launched;
}

/* torch's max_pool2d CPU loop: the first maximum, or the last NaN. */
START_TEST(max_pool_values) {
  const pool_case *c = &cases[_i];
  static const kiln_dtype dts[] = {KILN_F32, KILN_I32};
  for (int di = 0; di < 2; di++) {
    kiln_scope_begin();
    kiln_tensor *x = input(c, dts[di], TU_MODERATE), *v, *ix;
    kiln_max_pool2d_with_indices(x, 2, c->k, c->s[0] ? 2 : 0, c->s, 2, c->p, 2, c->d, c->ceil, &v, &ix);
    ck_assert_msg(kiln_status_of(v) == KILN_OK, "%s", kiln_last_error());
    kiln_tensor *plain = kiln_max_pool2d(x, 2, c->k, c->s[0] ? 2 : 0, c->s, 2, c->p, 2, c->d, c->ceil);
    ck_assert_uint_le(kernels(x, 1, &plain), 1);   /* 0 for a 1x1 window: a view */
    ck_assert_uint_le(kernels(x, 2, (kiln_tensor *[]){v, ix}), 2);
    const int64_t s0 = c->s[0] ? c->s[0] : c->k[0], s1 = c->s[1] ? c->s[1] : c->k[1];
    int64_t oh = out_size(c->h, c->k[0], s0, c->p[0], c->d[0], c->ceil);
    int64_t ow = out_size(c->w, c->k[1], s1, c->p[1], c->d[1], c->ceil);
    ck_assert_int_eq(kiln_size(v, -2), oh);
    ck_assert_int_eq(kiln_size(v, -1), ow);
    const double *xv = values(x), *got = values(v), *pg = values(plain);
    const int64_t *gi = kiln_data(ix);
    int64_t planes = (c->n ? c->n : 1) * c->c;
    for (int64_t pl = 0; pl < planes; pl++)
      for (int64_t r = 0; r < oh; r++)
        for (int64_t q = 0; q < ow; q++) {
          double best = -INFINITY;
          int64_t at = -1;
          bool any_nan = false;
          for (int64_t i = 0; i < c->k[0]; i++)
            for (int64_t j = 0; j < c->k[1]; j++) {
              int64_t y = r * s0 - c->p[0] + i * c->d[0], z = q * s1 - c->p[1] + j * c->d[1];
              if (y < 0 || y >= c->h || z < 0 || z >= c->w) continue;
              double val = xv[(pl * c->h + y) * c->w + z];
              if (at < 0 || val > best || isnan(val)) best = val, at = y * c->w + z;
              any_nan |= isnan(val);
            }
          int64_t o = (pl * oh + r) * ow + q;
          ck_assert_msg(gi[o] == at, "plane %lld (%lld, %lld): index %lld, want %lld", (long long)pl, (long long)r,
                        (long long)q, (long long)gi[o], (long long)at);
          if (isnan(best)) ck_assert(isnan(got[o]) && isnan(pg[o]));
          else ck_assert_msg(got[o] == best && pg[o] == best && !any_nan, "[%lld] %g %g want %g", (long long)o, got[o], pg[o], best);
        }
    kiln_scope_end();
  }
}
END_TEST

/* torch's avg_pool2d: divisor (hend - hstart) * (wend - wstart) within the
 * padded input, or within the input without count_include_pad. */
START_TEST(avg_pool_values) {
  const pool_case *c = &cases[_i];
  if (c->d[0] != 1 || c->d[1] != 1) return;   /* avg_pool2d has no dilation */
  kiln_scope_begin();
  kiln_tensor *x = input(c, KILN_F32, TU_SMALL);
  kiln_tensor *y = kiln_avg_pool2d(x, 2, c->k, c->s[0] ? 2 : 0, c->s, 2, c->p, c->ceil, c->include_pad);
  ck_assert_msg(kiln_status_of(y) == KILN_OK, "%s", kiln_last_error());
  ck_assert_uint_eq(kernels(x, 1, &y), 1);
  const int64_t s0 = c->s[0] ? c->s[0] : c->k[0], s1 = c->s[1] ? c->s[1] : c->k[1];
  int64_t oh = out_size(c->h, c->k[0], s0, c->p[0], 1, c->ceil), ow = out_size(c->w, c->k[1], s1, c->p[1], 1, c->ceil);
  const double *xv = values(x), *got = values(y);
  int64_t planes = (c->n ? c->n : 1) * c->c;
  for (int64_t pl = 0; pl < planes; pl++)
    for (int64_t r = 0; r < oh; r++)
      for (int64_t q = 0; q < ow; q++) {
        int64_t hs = r * s0 - c->p[0], ws = q * s1 - c->p[1];
        int64_t he = hs + c->k[0] < c->h + c->p[0] ? hs + c->k[0] : c->h + c->p[0];
        int64_t we = ws + c->k[1] < c->w + c->p[1] ? ws + c->k[1] : c->w + c->p[1];
        int64_t size = (he - hs) * (we - ws);
        hs = hs > 0 ? hs : 0, ws = ws > 0 ? ws : 0, he = he < c->h ? he : c->h, we = we < c->w ? we : c->w;
        double sum = 0;
        for (int64_t a = hs; a < he; a++)
          for (int64_t b = ws; b < we; b++) sum += xv[(pl * c->h + a) * c->w + b];
        double want = sum / (double)(c->include_pad ? size : (he - hs) * (we - ws));
        int64_t o = (pl * oh + r) * ow + q;
        ck_assert_msg(fabs(got[o] - want) < 1e-5, "[%lld] got %g want %g", (long long)o, got[o], want);
      }
  kiln_scope_end();
}
END_TEST

/* adaptive_avg_pool2d: cell (i, j) averages rows [floor(iH/OH), ceil((i+1)H/OH)). */
START_TEST(adaptive_values) {
  static const int64_t sizes[][4] = {{7, 6, 3, 2}, {5, 5, 5, 5}, {2, 3, 5, 4}, {8, 8, 1, 1}, {6, 9, 4, 3}};
  const int64_t *z = sizes[_i];
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F64, KILN_SHAPE(2, 3, z[0], z[1]), 41, TU_SMALL);
  kiln_tensor *y = kiln_adaptive_avg_pool2d(x, 2, (int64_t[]){z[2], z[3]});
  ck_assert_msg(kiln_status_of(y) == KILN_OK, "%s", kiln_last_error());
  const double *xv = values(x), *got = values(y);
  for (int64_t pl = 0; pl < 6; pl++)
    for (int64_t i = 0; i < z[2]; i++)
      for (int64_t j = 0; j < z[3]; j++) {
        int64_t h0 = i * z[0] / z[2], h1 = ((i + 1) * z[0] + z[2] - 1) / z[2];
        int64_t w0 = j * z[1] / z[3], w1 = ((j + 1) * z[1] + z[3] - 1) / z[3];
        double sum = 0;
        for (int64_t a = h0; a < h1; a++)
          for (int64_t b = w0; b < w1; b++) sum += xv[(pl * z[0] + a) * z[1] + b];
        double want = sum / (double)((h1 - h0) * (w1 - w0)), g = got[(pl * z[2] + i) * z[3] + j];
        ck_assert_msg(fabs(g - want) < 1e-12, "(%lld,%lld): got %.15g want %.15g", (long long)i, (long long)j, g, want);
      }
  kiln_scope_end();
}
END_TEST

/* Resampling between an elementwise producer and consumer: relu(op(x * 2 +
 * 1)) + 1 is one kernel (the taps are loads of the producer's expression)
 * and matches the reference evaluator, fused and eager. Cases: each
 * interpolation mode, adaptive pooling to unequal windows (7 -> 3), equal
 * ones (6 -> 2, 6 -> 1) and both at once. */
typedef struct {
  const char *mode;   /* NULL: adaptive_avg_pool2d */
  int64_t size[2];
} resample_case;

static kiln_tensor *resample_chain(const void *ctx) {
  const resample_case *c = ctx;
  kiln_tensor *x = kiln_adds(kiln_muls(tu_data(KILN_F32, KILN_SHAPE(2, 3, 7, 6), 61, TU_SMALL), 2), 1);
  kiln_tensor *y = c->mode ? kiln_interpolate(x, 2, c->size, c->mode, 0) : kiln_adaptive_avg_pool2d(x, 2, c->size);
  return kiln_adds(kiln_relu(y), 1);
}

START_TEST(resampling_fuses) {
  static const resample_case rc[] = {{"nearest", {9, 4}}, {"nearest-exact", {5, 11}}, {"bilinear", {9, 4}},
                                     {"bicubic", {5, 11}}, {NULL, {3, 2}}, {NULL, {3, 1}}, {NULL, {7, 6}},
                                     {NULL, {1, 1}}, {NULL, {2, 4}}};
  const resample_case *c = &rc[_i];
  char why[512] = "";
  kiln_scope_begin();
  ck_assert_msg(tu_check_fused_eager(resample_chain, c, KILN_F32, (ref_tol){1e-5, 1e-5}, why, sizeof why), "%s", why);
  kiln_tensor *y = resample_chain(c);
  uint64_t k = tu_kernels_of(y);
  ck_assert_msg(k == 1, "%s (%lld, %lld): %llu kernels", c->mode ? c->mode : "adaptive", (long long)c->size[0],
                (long long)c->size[1], (unsigned long long)k);
  kiln_scope_end();
}
END_TEST

/* ---- interpolation ------------------------------------------------------------------ */
/* 1-D values worked by hand from torch's rules on [1, 2, 3, 4]. */
START_TEST(interpolate_1d_by_hand) {
  static const struct {
    const char *mode;
    int align, size;
    double want[7];
  } rows[] = {
    {"linear", 0, 6, {1, 1.5, 2 + 1.0 / 6, 2 + 5.0 / 6, 3.5, 4}},
    {"linear", 1, 7, {1, 1.5, 2, 2.5, 3, 3.5, 4}},
    {"nearest", 0, 6, {1, 1, 2, 3, 3, 4}},
    {"nearest-exact", 0, 6, {1, 2, 2, 3, 4, 4}},
    {"nearest", 0, 2, {1, 3}},
    {"linear", 0, 1, {2.5}},
  };
  double v[4] = {1, 2, 3, 4};
  for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(v, KILN_F64, KILN_SHAPE(1, 1, 4));
    kiln_tensor *y = kiln_interpolate(x, 1, (int64_t[]){rows[r].size}, rows[r].mode, rows[r].align);
    ck_assert_msg(kiln_status_of(y) == KILN_OK, "%s", kiln_last_error());
    const double *g = values(y);
    for (int i = 0; i < rows[r].size; i++)
      ck_assert_msg(fabs(g[i] - rows[r].want[i]) < 1e-12, "%s size %d [%d]: got %.15g want %.15g", rows[r].mode,
                    rows[r].size, i, g[i], rows[r].want[i]);
    kiln_scope_end();
  }
}
END_TEST

/* trilinear with align_corners reproduces a function linear in the
 * coordinates: x[d][h][w] = d + 2h + 3w sampled at the mapped positions. */
START_TEST(interpolate_trilinear_linear_field) {
  kiln_scope_begin();
  double v[3 * 4 * 5];
  for (int i = 0; i < 60; i++) v[i] = i / 20 + 2 * (i / 5 % 4) + 3 * (i % 5);
  kiln_tensor *x = kiln_from_data(v, KILN_F64, KILN_SHAPE(1, 1, 3, 4, 5));
  kiln_tensor *y = kiln_interpolate(x, 3, (int64_t[]){5, 7, 2}, "trilinear", 1);
  const double *g = values(y);
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 7; b++)
      for (int c = 0; c < 2; c++) {
        double want = a * 2.0 / 4 + 2 * (b * 3.0 / 6) + 3 * (c * 4.0 / 1);
        ck_assert_msg(fabs(g[(a * 7 + b) * 2 + c] - want) < 1e-12, "(%d,%d,%d): %g vs %g", a, b, c, g[(a * 7 + b) * 2 + c], want);
      }
  kiln_scope_end();
}
END_TEST

/* torch's upsample_bicubic2d coefficients, written out again for the loop below. */
static double cubic(double x, int far) {
  const double a = -0.75;
  return far ? ((a * x - 5 * a) * x + 8 * a) * x - 4 * a : ((a + 2) * x - (a + 3)) * x * x + 1;
}

/* torch's 2-D loops: bilinear reads 2x2 taps, bicubic 4x4 with clamped
 * indices, from source positions per align_corners. */
START_TEST(interpolate_2d_loops) {
  static const int64_t cases[][5] = {{5, 4, 8, 7, 0}, {5, 4, 8, 7, 1}, {6, 6, 3, 4, 0}, {3, 5, 3, 5, 1}, {4, 3, 9, 2, 0}};
  for (int bic = 0; bic < 2; bic++)
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
      const int64_t *c = cases[ci];
      int64_t ih = c[0], iw = c[1], oh = c[2], ow = c[3];
      int ac = (int)c[4];
      kiln_scope_begin();
      kiln_tensor *x = tu_data(KILN_F64, KILN_SHAPE(2, 3, ih, iw), 60, TU_SMALL);
      kiln_tensor *y = kiln_interpolate(x, 2, (int64_t[]){oh, ow}, bic ? "bicubic" : "bilinear", ac);
      ck_assert_msg(kiln_status_of(y) == KILN_OK, "%s", kiln_last_error());
      const double *xv = values(x), *g = values(y);
      for (int64_t pl = 0; pl < 6; pl++)
        for (int64_t r = 0; r < oh; r++)
          for (int64_t q = 0; q < ow; q++) {
            double sh = ac ? (oh > 1 ? (double)r * (ih - 1) / (oh - 1) : 0) : (r + 0.5) * ih / oh - 0.5;
            double sw = ac ? (ow > 1 ? (double)q * (iw - 1) / (ow - 1) : 0) : (q + 0.5) * iw / ow - 0.5;
            double want = 0;
            if (!bic) {
              sh = sh < 0 ? 0 : sh, sw = sw < 0 ? 0 : sw;
              int64_t h0 = (int64_t)sh, w0 = (int64_t)sw, h1 = h0 + (h0 < ih - 1), w1 = w0 + (w0 < iw - 1);
              double lh = sh - h0, lw = sw - w0;
              const double *p = xv + pl * ih * iw;
              want = (1 - lh) * ((1 - lw) * p[h0 * iw + w0] + lw * p[h0 * iw + w1]) +
                     lh * ((1 - lw) * p[h1 * iw + w0] + lw * p[h1 * iw + w1]);
            } else {
              int64_t h0 = (int64_t)floor(sh), w0 = (int64_t)floor(sw);
              double th = sh - h0, tw = sw - w0;
              for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                  int64_t hh = h0 - 1 + a, ww = w0 - 1 + b;
                  hh = hh < 0 ? 0 : hh > ih - 1 ? ih - 1 : hh;
                  ww = ww < 0 ? 0 : ww > iw - 1 ? iw - 1 : ww;
                  double ch = cubic(a == 0 ? th + 1 : a == 1 ? th : a == 2 ? 1 - th : 2 - th, a == 0 || a == 3);
                  double cw = cubic(b == 0 ? tw + 1 : b == 1 ? tw : b == 2 ? 1 - tw : 2 - tw, b == 0 || b == 3);
                  want += ch * cw * xv[(pl * ih + hh) * iw + ww];
                }
            }
            double got = g[(pl * oh + r) * ow + q];
            ck_assert_msg(fabs(got - want) < 1e-12, "%s case %zu (%lld,%lld): got %.15g want %.15g",
                          bic ? "bicubic" : "bilinear", ci, (long long)r, (long long)q, got, want);
          }
      kiln_scope_end();
    }
}
END_TEST

/* ---- convolution --------------------------------------------------------------- */
typedef struct {
  int64_t n, c, h, w, o, kh, kw, s, p, d, g;   /* n = 0: unbatched; h = 0: conv1d over w */
} conv_case;

static const conv_case convs[] = {
  {2, 3, 6, 5, 4, 3, 3, 1, 1, 1, 1}, {1, 4, 7, 7, 6, 3, 2, 2, 0, 1, 2}, {1, 4, 5, 5, 4, 3, 3, 1, 1, 1, 4},
  {1, 2, 5, 6, 3, 1, 1, 1, 0, 1, 1}, {1, 2, 6, 6, 2, 3, 3, 2, 2, 2, 1}, {1, 1, 2, 2, 1, 3, 3, 1, 1, 1, 1},
  {0, 3, 4, 5, 2, 2, 2, 1, 0, 1, 1}, {2, 4, 0, 9, 6, 1, 3, 2, 1, 1, 2},
};

START_TEST(conv_values) {
  const conv_case *c = &convs[_i];
  bool one_d = c->h == 0;
  int64_t h = one_d ? 1 : c->h, kh = one_d ? 1 : c->kh, nb = c->n ? c->n : 1, cg = c->c / c->g;
  int64_t oh = one_d ? 1 : (h + 2 * c->p - c->d * (kh - 1) - 1) / c->s + 1;
  int64_t ow = (c->w + 2 * c->p - c->d * (c->kw - 1) - 1) / c->s + 1;
  kiln_scope_begin();
  kiln_tensor *x = one_d ? tu_data(KILN_F64, KILN_SHAPE(nb, c->c, c->w), 50, TU_SMALL)
                 : c->n  ? tu_data(KILN_F64, KILN_SHAPE(c->n, c->c, h, c->w), 50, TU_SMALL)
                         : tu_data(KILN_F64, KILN_SHAPE(c->c, h, c->w), 50, TU_SMALL);
  kiln_tensor *w = one_d ? tu_data(KILN_F64, KILN_SHAPE(c->o, cg, c->kw), 51, TU_SMALL)
                         : tu_data(KILN_F64, KILN_SHAPE(c->o, cg, kh, c->kw), 51, TU_SMALL);
  kiln_tensor *b = tu_data(KILN_F64, KILN_SHAPE(c->o), 52, TU_SMALL);
  kiln_tensor *y = one_d ? kiln_conv1d(x, w, b, 1, &c->s, 1, &c->p, 1, &c->d, c->g)
                         : kiln_conv2d(x, w, b, 1, &c->s, 1, &c->p, 1, &c->d, c->g);
  ck_assert_msg(kiln_status_of(y) == KILN_OK, "%s", kiln_last_error());
  ck_assert_int_eq(kiln_ndim(y), one_d ? 3 : c->n ? 4 : 3);
  const double *xv = values(x), *wv = values(w), *bv = values(b), *got = values(y);
  for (int64_t n = 0; n < nb; n++)
    for (int64_t o = 0; o < c->o; o++)
      for (int64_t r = 0; r < oh; r++)
        for (int64_t q = 0; q < ow; q++) {
          int64_t g = o / (c->o / c->g);
          double want = bv[o];
          for (int64_t ci = 0; ci < cg; ci++)
            for (int64_t i = 0; i < kh; i++)
              for (int64_t j = 0; j < c->kw; j++) {
                int64_t y0 = one_d ? 0 : r * c->s - c->p + i * c->d, z = q * c->s - c->p + j * c->d;
                if (y0 < 0 || y0 >= h || z < 0 || z >= c->w) continue;
                want += xv[((n * c->c + g * cg + ci) * h + y0) * c->w + z] * wv[((o * cg + ci) * kh + i) * c->kw + j];
              }
          double gv = got[((n * c->o + o) * oh + r) * ow + q];
          ck_assert_msg(fabs(gv - want) < 1e-12, "(%lld,%lld,%lld,%lld): got %.15g want %.15g", (long long)n,
                        (long long)o, (long long)r, (long long)q, gv, want);
        }
  kiln_scope_end();
}
END_TEST

/* conv + bias + relu: one kernel, the implicit GEMM (its packing reads the
 * input's windows, its epilogue adds the bias and applies relu). */
START_TEST(conv_kernels) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(2, 8, 10, 10), 53, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(16, 8, 3, 3), 54, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(16), 55, TU_SMALL);
  ck_assert_int_eq(kiln_realize(w), KILN_OK);
  ck_assert_int_eq(kiln_realize(b), KILN_OK);
  kiln_tensor *y = kiln_relu(kiln_conv2d(x, w, b, 1, (int64_t[]){1}, 1, (int64_t[]){1}, 0, NULL, 1));
  ck_assert_uint_eq(kernels(x, 1, &y), 1);
  kiln_scope_end();
}
END_TEST

/* ---- errors ------------------------------------------------------------------ */
static kiln_tensor *build_error(int i, int *line) {
  kiln_tensor *x = kiln_zeros(KILN_SHAPE(1, 2, 5, 5), KILN_F32), *m = kiln_zeros(KILN_SHAPE(5, 5), KILN_F32);
  kiln_tensor *ix = kiln_zeros(KILN_SHAPE(1, 2, 5, 5), KILN_I64);
  const int64_t k3[] = {3}, k7[] = {7}, p2[] = {2}, bad[] = {2, 2, 2};
  *line = __LINE__ + 2;
  switch (i) {
  case 0: return kiln_max_pool2d(m, 1, k3, 0, NULL, 0, NULL, 0, NULL, 0);
  case 1: return kiln_max_pool2d(x, 1, k3, 0, NULL, 1, p2, 0, NULL, 0);
  case 2: return kiln_avg_pool2d(x, 1, k7, 0, NULL, 0, NULL, 0, 1);
  case 3: return kiln_max_pool2d(x, 3, bad, 0, NULL, 0, NULL, 0, NULL, 0);
  case 4: return kiln_avg_pool2d(ix, 1, k3, 0, NULL, 0, NULL, 0, 1);
  case 5: return kiln_adaptive_avg_pool2d(x, 2, (int64_t[]){0, 2});
  case 6: return kiln_max_pool2d(kiln_zeros(KILN_SHAPE(1, 5, 5), KILN_BOOL), 1, k3, 0, NULL, 0, NULL, 0, NULL, 0);
  case 7: return kiln_conv2d(x, kiln_zeros(KILN_SHAPE(4, 3, 3, 3), KILN_F32), NULL, 0, NULL, 0, NULL, 0, NULL, 1);
  case 8: return kiln_conv2d(x, kiln_zeros(KILN_SHAPE(3, 1, 3, 3), KILN_F32), NULL, 0, NULL, 0, NULL, 0, NULL, 2);
  case 9: return kiln_conv2d(x, kiln_zeros(KILN_SHAPE(4, 2, 7, 7), KILN_F32), NULL, 0, NULL, 0, NULL, 0, NULL, 1);
  case 10: return kiln_interpolate(x, 1, (int64_t[]){3}, "area", 0);
  case 11: return kiln_interpolate(x, 1, (int64_t[]){3}, "linear", 0);
  case 12: return kiln_interpolate(x, 1, (int64_t[]){3}, "nearest", 1);
  }
  return NULL;
}

static const struct {
  kiln_status status;
  const char *msg;
} errs[] = {
  {KILN_ERR_SHAPE, "max_pool2d: input of shape (5,5): expected a 3-D (C, H, W) or 4-D (N, C, H, W) input"},
  {KILN_ERR_ARG, "max_pool2d: pad should be at most half of effective kernel size, but got pad=2, kernel_size=3 and dilation=1"},
  {KILN_ERR_SHAPE, "avg_pool2d: input of shape (1,2,5,5): the output size is too small (the window is larger than the padded input)"},
  {KILN_ERR_ARG, "max_pool2d: kernel_size, stride, padding and dilation take 1 or 2 values"},
  {KILN_ERR_DTYPE, "avg_pool2d: expected a floating input, got int64"},
  {KILN_ERR_ARG, "adaptive_avg_pool2d: output_size takes 1 or 2 positive values"},
  {KILN_ERR_DTYPE, "max_pool2d: bool tensors are not supported"},
  {KILN_ERR_SHAPE, "conv2d: groups=1, weight of size (4,3,3,3), input of size (1,2,5,5): the input's channels must be "
                   "the weight's dim 1 times groups"},
  {KILN_ERR_SHAPE, "conv2d: groups=2, weight of size (3,1,3,3), input of size (1,2,5,5): groups must be positive and "
                   "divide the output channels"},
  {KILN_ERR_SHAPE, "conv2d: input of shape (1,2,5,5): the output size is too small (the window is larger than the "
                   "padded input)"},
  {KILN_ERR_ARG, "interpolate: mode 'area' is not one of 'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', "
                 "'trilinear'"},
  {KILN_ERR_SHAPE, "interpolate: input of shape (1,2,5,5): the mode needs (N, C) plus 1 (linear), 2 (bilinear, "
                   "bicubic) or 3 (trilinear) spatial dims"},
  {KILN_ERR_ARG, "interpolate: align_corners option can only be set with the interpolating modes: linear | bilinear | "
                 "bicubic | trilinear"},
};

START_TEST(error_paths) {
  kiln_scope_begin();
  int line0;
  kiln_tensor *t = build_error(_i, &line0);
  char want[512];
  snprintf(want, sizeof want, "%s:%d: %s", __FILE__, line0 + _i, errs[_i].msg);
  ck_assert_int_eq(kiln_status_of(t), errs[_i].status);
  ck_assert_str_eq(kiln_last_error(), want);
  kiln_scope_end();
}
END_TEST

static Suite *window_suite(void) {
  Suite *s = suite_create("window");
  tcase_add_loop_test(tu_tcase(s, "max"), max_pool_values, 0, NCASES);
  tcase_add_loop_test(tu_tcase(s, "avg"), avg_pool_values, 0, NCASES);
  tcase_add_loop_test(tu_tcase(s, "adaptive"), adaptive_values, 0, 5);
  TCase *ip = tu_tcase(s, "interpolate");
  tcase_add_test(ip, interpolate_1d_by_hand);
  tcase_add_test(ip, interpolate_2d_loops);
  tcase_add_test(ip, interpolate_trilinear_linear_field);
  tcase_add_loop_test(ip, resampling_fuses, 0, 9);
  TCase *cv = tu_tcase(s, "conv");
  tcase_add_loop_test(cv, conv_values, 0, (int)(sizeof convs / sizeof *convs));
  tcase_add_test(cv, conv_kernels);
  tcase_add_loop_test(tu_tcase(s, "errors"), error_paths, 0, (int)(sizeof errs / sizeof *errs));
  return s;
}

KILN_TEST_MAIN(window_suite)
