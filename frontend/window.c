/* window.c: the window ops with torch's rules: max_pool2d (with indices),
 * avg_pool2d, adaptive_avg_pool2d, interpolate, conv1d and conv2d. A pooling is a sum or
 * maximum over the kernel's taps, each tap a strided slice of the padded
 * input: movement ops the fuser folds into one elementwise kernel that
 * reads the input in place. Adaptive pooling and interpolation resample
 * one dim at a time by taps, each an index_select by host-computed
 * positions times host-computed weights (or a mean over a split dim), so
 * they fuse with their producers and consumers; a convolution multiplies
 * the weight by its window operand (an UNFOLD view of the input that the
 * CPU GEMM packs in place: an implicit GEMM). */
#include "frontend/frontend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The geometry of a 2-D window over the last two dims: kernel, stride,
 * padding, dilation, output size and the padding read past the end. */
typedef struct {
  int64_t k[2], s[2], p[2], d[2], out[2], hi[2];
} window;

/* torch's int-or-pair: n = 1 gives both dims v[0], n = 2 one each, n = 0
 * the default dflt (stride: the kernel) when there is one. */
static bool pair(int n, const int64_t *v, const int64_t *dflt, int64_t out[2]) {
  if (n == 0 && dflt) return memcpy(out, dflt, 2 * sizeof *out), true;
  if ((n != 1 && n != 2) || !v) return false;
  out[0] = v[0];
  out[1] = v[n - 1];
  return true;
}

static ir_node *input_error(const char *f, int l, const char *op, ir_node *x, const char *why) {
  ir_str d = {0};
  ir_str_shape(&d, x->ndim, x->shape);
  ir_node *e = fe_error(KILN_ERR_SHAPE, f, l, "%s: input of shape %s: %s", op, d.s, why);
  ir_str_free(&d);
  return e;
}

/* Fills w from torch's arguments (n = 0: padding 0, dilation 1, stride the
 * kernel for a pooling, 1 for a convolution) and checks them; a pooling's
 * padding is at most half its window. */
static ir_node *window_of(const char *f, int l, const char *op, bool pool, ir_node *x, int nk, const int64_t *k,
                          int ns, const int64_t *s, int np, const int64_t *p, int nd, const int64_t *d, int ceil_mode,
                          window *w) {
  ir_node *e = fe_check_arg(f, l, op, x, 1);
  if (e || (e = fe_check_list(f, l, op, "kernel_size", nk, k)) || (e = fe_check_list(f, l, op, "stride", ns, s)) ||
      (e = fe_check_list(f, l, op, "padding", np, p)) || (e = fe_check_list(f, l, op, "dilation", nd, d)))
    return e;
  if (x->ndim != 3 && x->ndim != 4) return input_error(f, l, op, x, "expected a 3-D (C, H, W) or 4-D (N, C, H, W) input");
  static const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
  if (!pair(nk, k, NULL, w->k) || !pair(ns, s, pool ? w->k : one, w->s) || !pair(np, p, zero, w->p) ||
      !pair(nd, d, one, w->d))
    return fe_error(KILN_ERR_ARG, f, l, "%s: kernel_size, stride, padding and dilation take 1 or 2 values", op);
  for (int i = 0; i < 2; i++) {
    int64_t span = w->d[i] * (w->k[i] - 1) + 1, in = x->shape[x->ndim - 2 + i];
    if (w->k[i] < 1 || w->s[i] < 1 || w->d[i] < 1 || w->p[i] < 0)
      return fe_error(KILN_ERR_ARG, f, l, "%s: kernel_size, stride and dilation must be positive and padding "
                      "non-negative, got kernel (%lld, %lld), stride (%lld, %lld), padding (%lld, %lld)", op,
                      (long long)w->k[0], (long long)w->k[1], (long long)w->s[0], (long long)w->s[1],
                      (long long)w->p[0], (long long)w->p[1]);
    if (pool && w->p[i] > span / 2)
      return fe_error(KILN_ERR_ARG, f, l, "%s: pad should be at most half of effective kernel size, but got "
                      "pad=%lld, kernel_size=%lld and dilation=%lld", op, (long long)w->p[i], (long long)w->k[i],
                      (long long)w->d[i]);
    int64_t room = in + 2 * w->p[i] - span;
    int64_t out = (room < 0 ? -1 : (room + (ceil_mode ? w->s[i] - 1 : 0)) / w->s[i]) + 1;
    if (ceil_mode && out > 1 && (out - 1) * w->s[i] >= in + w->p[i]) out--;   /* the last window starts inside */
    if (out < 1) return input_error(f, l, op, x, "the output size is too small (the window is larger than the padded input)");
    w->out[i] = out;
    int64_t reach = (out - 1) * w->s[i] + span - in - w->p[i];
    w->hi[i] = reach > 0 ? reach : 0;
  }
  return NULL;
}

/* x padded with value: p before each of the last two dims, w->hi after. */
static ir_node *padded(const char *f, int l, ir_node *x, const window *w, double value) {
  return kiln_pad_at(f, l, x, 4, (int64_t[]){w->p[1], w->hi[1], w->p[0], w->hi[0]}, value);
}

/* Tap (i, j) of every window: out[0] x out[1] elements of the padded xp. */
static ir_node *tap(const char *f, int l, ir_node *xp, const window *w, int64_t i, int64_t j, fe_temps *s) {
  int nd = xp->ndim;
  int64_t r0 = i * w->d[0], c0 = j * w->d[1];
  ir_node *rows = fe_keep(s, kiln_slice_at(f, l, xp, nd - 2, r0, r0 + (w->out[0] - 1) * w->s[0] + 1, w->s[0]));
  return fe_keep(s, kiln_slice_at(f, l, rows, nd - 1, c0, c0 + (w->out[1] - 1) * w->s[1] + 1, w->s[1]));
}

/* For tap (i, j): the input row (dim 0) or column (dim 1) each output reads,
 * o * stride - pad + tap * dilation, as int64 viewed as the output's shape
 * (so what is computed from it stays in the pooling kernel: a small computed
 * tensor broadcast over the channels would be stored by a kernel of its own). */
static ir_node *tap_coord(const char *f, int l, const window *w, int dim, int64_t t, const ir_node *out, fe_temps *s) {
  double start = (double)(t * w->d[dim] - w->p[dim]), step = (double)w->s[dim];
  ir_node *a = fe_keep(s, kiln_arange_at(f, l, start, start + step * (double)w->out[dim], step));
  if (!dim) a = fe_keep(s, kiln_reshape_at(f, l, a, 2, (int64_t[]){w->out[0], 1}));
  return fe_keep(s, kiln_expand_at(f, l, a, out->ndim, out->shape));
}

/* True where coordinate c lies in [lo, hi). */
static ir_node *within(const char *f, int l, ir_node *c, double lo, double hi, fe_temps *s) {
  return fe_keep(s, kiln_logical_and_at(f, l, fe_keep(s, kiln_ges_at(f, l, c, lo)), fe_keep(s, kiln_lts_at(f, l, c, hi))));
}

/* The smallest value of dt: what max pooling pads with. */
static double lowest(kiln_dtype dt) {
  if (ir_is_float(dt)) return -INFINITY;
  return ir_dtypes[dt].is_signed ? -ldexp(1, (int)(8 * ir_dtypes[dt].size) - 1) : 0;
}

/* ---- max pooling ------------------------------------------------------------- */
/* best and idx after one more tap v: torch's scan, where a tap inside the
 * input replaces the best so far when it is larger or NaN, or when none
 * was inside yet (idx -1); the index is row * W + column of the plane. */
static void scan_tap(const char *f, int l, const window *w, const ir_node *x, int64_t i, int64_t j, ir_node *v,
                     ir_node **best, ir_node **idx, fe_temps *t) {
  int64_t h = x->shape[x->ndim - 2], wd = x->shape[x->ndim - 1];
  ir_node *r = tap_coord(f, l, w, 0, i, v, t), *c = tap_coord(f, l, w, 1, j, v, t);
  ir_node *inside = fe_keep(t, kiln_logical_and_at(f, l, within(f, l, r, 0, (double)h, t), within(f, l, c, 0, (double)wd, t)));
  ir_node *at = fe_keep(t, kiln_add_at(f, l, fe_keep(t, kiln_muls_at(f, l, r, (double)wd)), c));
  if (!*best) {
    *best = fe_same(v);
    *idx = kiln_where_at(f, l, inside, at, fe_keep(t, kiln_full_at(f, l, 0, NULL, -1, KILN_I64)));
    return;
  }
  ir_node *unset = fe_keep(t, kiln_lts_at(f, l, *idx, 0));
  ir_node *better = fe_keep(t, kiln_logical_or_at(f, l, fe_keep(t, kiln_gt_at(f, l, v, *best)), fe_keep(t, kiln_ne_at(f, l, v, v))));
  ir_node *take = fe_keep(t, kiln_logical_and_at(f, l, inside, fe_keep(t, kiln_logical_or_at(f, l, better, unset))));
  ir_node *nb = kiln_where_at(f, l, take, v, *best), *ni = kiln_where_at(f, l, take, at, *idx);
  fe_drop(*best);
  fe_drop(*idx);
  *best = nb;
  *idx = ni;
}

/* The maximum over the taps (NaN wins, as in torch), and with indices
 * torch's argmax of each window. */
static void max_pool(const char *f, int l, ir_node *x, int nk, const int64_t *k, int ns, const int64_t *s, int np,
                     const int64_t *p, int nd, const int64_t *d, int ceil_mode, ir_node **values, ir_node **indices) {
  const char *op = indices ? "max_pool2d_with_indices" : "max_pool2d";
  window w;
  ir_node *e = window_of(f, l, op, true, x, nk, k, ns, s, np, p, nd, d, ceil_mode, &w);
  if (!e && x->dtype == KILN_BOOL) e = fe_error(KILN_ERR_DTYPE, f, l, "%s: bool tensors are not supported", op);
  if (e) {
    *values = e;
    if (indices) *indices = fe_same(e);
    return;
  }
  ir_node *xp = padded(f, l, x, &w, lowest(x->dtype)), *best = NULL, *idx = NULL;
  for (int64_t i = 0; i < w.k[0]; i++)
    for (int64_t j = 0; j < w.k[1]; j++) {
      fe_temps t = {0};
      ir_node *v = tap(f, l, xp, &w, i, j, &t);
      if (indices) {
        scan_tap(f, l, &w, x, i, j, v, &best, &idx, &t);
      } else {
        ir_node *nb = best ? kiln_maximum_at(f, l, best, v) : fe_same(v);
        fe_drop(best);
        best = nb;
      }
      fe_temps_done(&t, NULL);
    }
  fe_drop(xp);
  *values = best;
  if (indices) {   /* a 1x1 window's indices are still one plane: every channel's */
    *indices = kiln_expand_at(f, l, idx, best->ndim, best->shape);
    fe_drop(idx);
  }
}

/* ---- average pooling ------------------------------------------------------------ */
/* The doubles v, of shape (nv dims of vshape), as dt expanded to shape.
 * The view comes before the cast, so the cast runs in the kernel that
 * reads it (a small computed tensor would be stored by its own kernel). */
static ir_node *host_weights(const char *f, int l, const double *v, int nv, const int64_t *vshape, kiln_dtype dt,
                             int ndim, const int64_t *shape) {
  ir_node *m = kiln_from_data_at(f, l, v, KILN_F64, nv, vshape);
  ir_node *wide = kiln_expand_at(f, l, m, ndim, shape);
  ir_node *c = kiln_cast_at(f, l, wide, dt);
  fe_drop(m);
  fe_drop(wide);
  return c;
}

/* How many taps of output position o along dim i torch divides by: those in
 * [-p, in + p) with count_include_pad, else those inside the input. */
static int64_t taps_counted(const window *w, int i, int64_t o, int64_t in, int include_pad) {
  int64_t lo = include_pad ? -w->p[i] : 0, hi = include_pad ? in + w->p[i] : in, n = 0;
  for (int64_t t = 0; t < w->k[i]; t++) {
    int64_t c = o * w->s[i] - w->p[i] + t * w->d[i];
    n += c >= lo && c < hi;
  }
  return n;
}

/* The sum over the taps of the zero-padded input times 1 / the count of
 * each window (computed here, on the host: it depends only on the position). */
static ir_node *avg_pool(const char *f, int l, ir_node *x, int nk, const int64_t *k, int ns, const int64_t *s, int np,
                         const int64_t *p, int ceil_mode, int include_pad) {
  window w;
  ir_node *e = window_of(f, l, "avg_pool2d", true, x, nk, k, ns, s, np, p, 0, NULL, ceil_mode, &w);
  if (e) return e;
  if (!ir_is_float(x->dtype))
    return fe_error(KILN_ERR_DTYPE, f, l, "avg_pool2d: expected a floating input, got %s", ir_dtypes[x->dtype].name);
  int64_t h = x->shape[x->ndim - 2], wd = x->shape[x->ndim - 1];
  double *inv = ir_malloc(sizeof *inv * (size_t)(w.out[0] * w.out[1]));
  if (!inv) return fe_error(KILN_ERR_MEMORY, f, l, "avg_pool2d: out of memory");
  for (int64_t r = 0; r < w.out[0]; r++)
    for (int64_t c = 0; c < w.out[1]; c++)
      inv[r * w.out[1] + c] = 1.0 / (double)(taps_counted(&w, 0, r, h, include_pad) * taps_counted(&w, 1, c, wd, include_pad));
  int64_t shape[KILN_MAX_DIMS];
  memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
  memcpy(shape + x->ndim - 2, w.out, sizeof w.out);
  ir_node *scale = host_weights(f, l, inv, 2, w.out, x->dtype, x->ndim, shape);
  free(inv);
  if (scale->status != KILN_OK) return scale;
  ir_node *xp = padded(f, l, x, &w, 0), *sum = NULL;
  for (int64_t i = 0; i < w.k[0]; i++)
    for (int64_t j = 0; j < w.k[1]; j++) {
      fe_temps t = {0};
      ir_node *v = tap(f, l, xp, &w, i, j, &t);
      ir_node *next = sum ? kiln_add_at(f, l, sum, v) : fe_same(v);
      fe_drop(sum);
      sum = next;
      fe_temps_done(&t, NULL);
    }
  ir_node *y = kiln_mul_at(f, l, sum, scale);
  fe_drop(xp);
  fe_drop(sum);
  fe_drop(scale);
  return y;
}

/* ---- resampling: adaptive pooling and interpolation ------------------------------ */
/* x resampled along dim d to out positions by T taps: output o is the sum
 * over t of w[t * out + o] * x[idx[t * out + o]] along d (no weights: all
 * 1). Each tap is an index_select by a host index (a load whose index
 * comes from a tensor) times its weights broadcast over the trailing dims,
 * so the fuser keeps the producers, every tap and the consumers in one
 * kernel. idx and w are freed. */
static ir_node *resample(const char *f, int l, const char *op, ir_node *x, int d, int64_t out, int64_t taps,
                         int64_t *idx, double *w, bool weighted) {
  if (!idx || (weighted && !w)) {
    free(idx), free(w);
    return fe_error(KILN_ERR_MEMORY, f, l, "%s: out of memory", op);
  }
  int64_t shape[KILN_MAX_DIMS], wshape[KILN_MAX_DIMS] = {out};
  memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
  shape[d] = out;
  for (int i = 1; i < x->ndim - d; i++) wshape[i] = 1;
  ir_node *sum = NULL;
  for (int64_t k = 0; k < taps; k++) {
    fe_temps t = {0};
    ir_node *v = kiln_index_select_at(f, l, x, d, fe_keep(&t, kiln_from_data_at(f, l, idx + k * out, KILN_I64, 1, &out)));
    if (weighted)
      v = kiln_mul_at(f, l, fe_keep(&t, v), fe_keep(&t, host_weights(f, l, w + k * out, x->ndim - d, wshape, x->dtype,
                                                                      x->ndim, shape)));
    ir_node *next = sum ? kiln_add_at(f, l, sum, v) : fe_same(v);
    fe_drop(sum);
    fe_drop(v);
    sum = next;
    fe_temps_done(&t, NULL);
  }
  free(idx), free(w);
  return sum;
}

/* Dim d averaged into out cells of unequal windows, cell o over
 * [floor(o * in / out), ceil((o + 1) * in / out)): taps masked by their
 * weights (1 / the window's length, 0 past its end). */
static ir_node *adaptive_taps(const char *f, int l, ir_node *x, int d, int64_t out) {
  int64_t in = x->shape[d], taps = 0;
  for (int64_t o = 0; o < out; o++) {
    int64_t n = ((o + 1) * in + out - 1) / out - o * in / out;
    taps = n > taps ? n : taps;
  }
  int64_t *idx = ir_malloc(sizeof *idx * (size_t)(taps * out));
  double *w = ir_malloc(sizeof *w * (size_t)(taps * out));
  for (int64_t o = 0; idx && w && o < out; o++) {
    int64_t lo = o * in / out, hi = ((o + 1) * in + out - 1) / out;
    for (int64_t t = 0; t < taps; t++) {
      idx[t * out + o] = lo + t < hi ? lo + t : hi - 1;
      w[t * out + o] = lo + t < hi ? 1.0 / (double)(hi - lo) : 0;
    }
  }
  return resample(f, l, "adaptive_avg_pool2d", x, d, out, taps, idx, w, true);
}

/* Dims of unequal windows first, by taps (elementwise, so they fuse with
 * what follows); then the dims of equal windows (the output size divides
 * the input's) all at once: a mean over the window dims of a split view,
 * one reduction that reads the taps and x's producer in place. */
static ir_node *adaptive_avg_pool(const char *f, int l, ir_node *x, int n, const int64_t *size) {
  ir_node *e = fe_check_arg(f, l, "adaptive_avg_pool2d", x, 1);
  if (e || (e = fe_check_list(f, l, "adaptive_avg_pool2d", "output_size", n, size))) return e;
  int64_t out[2];
  if (x->ndim != 3 && x->ndim != 4)
    return input_error(f, l, "adaptive_avg_pool2d", x, "expected a 3-D (C, H, W) or 4-D (N, C, H, W) input");
  if (!pair(n, size, NULL, out) || out[0] < 1 || out[1] < 1)
    return fe_error(KILN_ERR_ARG, f, l, "adaptive_avg_pool2d: output_size takes 1 or 2 positive values");
  if (!ir_is_float(x->dtype))
    return fe_error(KILN_ERR_DTYPE, f, l, "adaptive_avg_pool2d: expected a floating input, got %s", ir_dtypes[x->dtype].name);
  int nd = x->ndim, nsplit = 0;
  int64_t shape[KILN_MAX_DIMS + 2], windows[2];
  ir_node *y = fe_same(x);
  for (int i = 0; i < 2; i++) {
    if (x->shape[nd - 2 + i] % out[i] == 0) continue;
    ir_node *r = adaptive_taps(f, l, y, nd - 2 + i, out[i]);
    fe_drop(y);
    y = r;
  }
  memcpy(shape, x->shape, (size_t)(nd - 2) * sizeof *shape);
  int ns = nd - 2;
  for (int i = 0; i < 2; i++) {
    int64_t in = x->shape[nd - 2 + i];
    shape[ns++] = out[i];
    if (in % out[i]) continue;
    windows[nsplit++] = ns;
    shape[ns++] = in / out[i];
  }
  if (!nsplit) return y;
  ir_node *split = kiln_reshape_at(f, l, y, ns, shape);
  ir_node *m = kiln_mean_dims_at(f, l, split, nsplit, windows, 0);
  fe_drop(split);
  fe_drop(y);
  return m;
}

/* ---- interpolation ---------------------------------------------------------------- */
/* torch's area_pixel_compute_source_index: where output o samples the input. */
static double source_index(int64_t o, int64_t in, int64_t out, int align_corners, bool cubic) {
  if (align_corners) return out > 1 ? (double)o * (double)(in - 1) / (double)(out - 1) : 0;
  double src = ((double)o + 0.5) * (double)in / (double)out - 0.5;
  return !cubic && src < 0 ? 0 : src;
}

/* torch's cubic convolution weights (A = -0.75) of the 4 taps around t. */
static void cubic_weights(double t, double c[4]) {
  const double a = -0.75;
#define CONV1(x) (((a + 2) * (x) - (a + 3)) * (x) * (x) + 1)
#define CONV2(x) ((((a * (x)) - 5 * a) * (x) + 8 * a) * (x) - 4 * a)
  c[0] = CONV2(t + 1);
  c[1] = CONV1(t);
  c[2] = CONV1(1 - t);
  c[3] = CONV2(2 - t);
#undef CONV1
#undef CONV2
}

/* The taps of a mode: 1 (nearest), 4 (bicubic) or 2 (linear). */
static int64_t mode_taps(const char *mode) {
  return !strncmp(mode, "nearest", 7) ? 1 : !strcmp(mode, "bicubic") ? 4 : 2;
}

/* Output o's taps of one dim, torch's index rules: tap t reads
 * idx[t * out + o] with weight w[t * out + o]. */
static void resample_taps(int64_t *idx, double *w, int64_t o, int64_t in, int64_t out, const char *mode,
                          int align_corners) {
  if (!strncmp(mode, "nearest", 7)) {   /* torch computes the scale in float */
    float scale = (float)in / (float)out;
    double at = mode[7] ? floorf(((float)o + 0.5f) * scale) : floorf((float)o * scale);
    idx[o] = at < (double)(in - 1) ? (int64_t)at : in - 1;
  } else if (!strcmp(mode, "bicubic")) {
    double src = source_index(o, in, out, align_corners, true), c[4];
    int64_t i0 = (int64_t)floor(src);
    cubic_weights(src - (double)i0, c);
    for (int k = 0; k < 4; k++) {
      int64_t i = i0 - 1 + k;
      idx[k * out + o] = i < 0 ? 0 : i >= in ? in - 1 : i;   /* edges repeat, as torch reads them */
      w[k * out + o] = c[k];
    }
  } else {
    double src = source_index(o, in, out, align_corners, false);
    int64_t i0 = (int64_t)src;
    idx[o] = i0, idx[out + o] = i0 + 1 < in ? i0 + 1 : in - 1;
    w[o] = 1 - (src - (double)i0), w[out + o] = src - (double)i0;
  }
}

/* The spatial dims each mode resamples (torch ties linear modes to a rank);
 * 0 for an unknown mode. */
static int mode_dims(const char *mode) {
  static const char *const names[] = {"linear", "bilinear", "bicubic", "trilinear"};
  static const int dims[] = {1, 2, 2, 3};
  for (int i = 0; i < 4; i++)
    if (!strcmp(mode, names[i])) return dims[i];
  return strcmp(mode, "nearest") && strcmp(mode, "nearest-exact") ? 0 : -1;
}

/* Each spatial dim resampled in turn: moved last, multiplied by its matrix
 * (M^T, built here on the host), moved back. */
static ir_node *interpolate(const char *f, int l, ir_node *x, int n, const int64_t *size, const char *mode,
                            int align_corners) {
  const char *op = "interpolate";
  ir_node *e = fe_check_arg(f, l, op, x, 1);
  if (e) return e;
  int want = mode ? mode_dims(mode) : 0, spatial = x->ndim - 2;
  if (!want)
    return fe_error(KILN_ERR_ARG, f, l, "%s: mode '%s' is not one of 'nearest', 'nearest-exact', 'linear', "
                    "'bilinear', 'bicubic', 'trilinear'", op, mode ? mode : "(null)");
  if (spatial < 1 || spatial > 3 || (want > 0 && want != spatial))
    return input_error(f, l, op, x, want > 0 ? "the mode needs (N, C) plus 1 (linear), 2 (bilinear, bicubic) or 3 "
                                              "(trilinear) spatial dims" : "expected (N, C) plus 1 to 3 spatial dims");
  if (want < 0 && align_corners)
    return fe_error(KILN_ERR_ARG, f, l, "%s: align_corners option can only be set with the interpolating modes: "
                    "linear | bilinear | bicubic | trilinear", op);
  if ((e = fe_check_list(f, l, op, "size", n, size))) return e;
  if (n != 1 && n != spatial) return fe_error(KILN_ERR_ARG, f, l, "%s: size takes 1 or %d values", op, spatial);
  if (!ir_is_float(x->dtype))
    return fe_error(KILN_ERR_DTYPE, f, l, "%s: expected a floating input, got %s", op, ir_dtypes[x->dtype].name);
  ir_node *y = fe_same(x);
  for (int d = 0; d < spatial && y->status == KILN_OK; d++) {
    int64_t in = x->shape[2 + d], out = size[n == 1 ? 0 : d];
    if (out < 1) {
      fe_drop(y);
      return fe_error(KILN_ERR_ARG, f, l, "%s: output sizes must be positive, got %lld", op, (long long)out);
    }
    int64_t taps = mode_taps(mode);
    int64_t *idx = ir_malloc(sizeof *idx * (size_t)(taps * out));
    double *w = taps > 1 ? ir_malloc(sizeof *w * (size_t)(taps * out)) : NULL;
    for (int64_t o = 0; idx && (w || taps == 1) && o < out; o++) resample_taps(idx, w, o, in, out, mode, align_corners);
    ir_node *r = resample(f, l, op, y, 2 + d, out, taps, idx, w, taps > 1);
    fe_drop(y);
    y = r;
  }
  return y;
}

/* ---- convolution ------------------------------------------------------------------ */
/* NULL when x (N, C, H, W) or (C, H, W), w (O, C / groups, kh, kw) and
 * bias (O,) fit together (transposed: w (C, O / groups, kh, kw)), else
 * torch's message. */
static ir_node *check_conv(const char *f, int l, const char *op, ir_node *x, ir_node *w, ir_node *b, int64_t groups,
                           bool transposed) {
  ir_node *e = fe_check_args(f, l, op, b ? 3 : 2, (ir_node *[]){x, w, b});
  if (e) return e;
  if (!ir_is_float(x->dtype) || x->dtype != w->dtype || (b && b->dtype != x->dtype))
    return fe_error(KILN_ERR_DTYPE, f, l, "%s: expected input, weight and bias of one floating dtype, got %s and %s", op,
                    ir_dtypes[x->dtype].name, ir_dtypes[w->dtype].name);
  ir_str d = {0};
  const char *why = NULL;
  if (x->ndim != 3 && x->ndim != 4) why = "expected a 3-D (C, H, W) or 4-D (N, C, H, W) input";
  else if (w->ndim != 4) why = "expected a 4-D weight";
  else if (groups < 1 || w->shape[0] % groups)
    why = transposed ? "groups must be positive and divide the input channels"
                     : "groups must be positive and divide the output channels";
  else if (x->shape[x->ndim - 3] != (transposed ? w->shape[0] : w->shape[1] * groups))
    why = transposed ? "the input's channels must be the weight's dim 0" : "the input's channels must be the weight's dim 1 times groups";
  else if (b && (b->ndim != 1 || b->shape[0] != (transposed ? w->shape[1] * groups : w->shape[0])))
    why = "the bias must have one value per output channel";
  if (!why) return NULL;
  ir_str_printf(&d, "groups=%lld, weight of size ", (long long)groups);
  ir_str_shape(&d, w->ndim, w->shape);
  ir_str_printf(&d, ", input of size ");
  ir_str_shape(&d, x->ndim, x->shape);
  e = fe_error(KILN_ERR_SHAPE, f, l, "%s: %s: %s", op, d.s, why);
  ir_str_free(&d);
  return e;
}

/* The window operand of the implicit GEMM: an UNFOLD (ops.def) of x (N, C,
 * H, W), (N, groups, C / groups * taps, OH * OW), reading x spread u apart
 * (u = 1 but for a transposed convolution). A view: the CPU GEMM's packing
 * reads x through it, and nothing stores the taps. */
static ir_node *unfold(const char *f, int l, ir_node *x, const window *w, const int64_t *u, int64_t groups) {
  int64_t shape[4] = {x->shape[0], groups, x->shape[1] / groups * w->k[0] * w->k[1], w->out[0] * w->out[1]};
  ir_node *n = ir_node_new(IR_UNFOLD, x->dtype, 4, shape, 1, &x, f, l);
  if (!n) return fe_nomem();
  n->device = x->device;
  n->attr.compute = x->dtype;
  for (int i = 0; i < 2; i++) {
    n->attr.win.k[i] = w->k[i];
    n->attr.win.s[i] = w->s[i];
    n->attr.win.p[i] = w->p[i];
    n->attr.win.d[i] = w->d[i];
    n->attr.win.u[i] = u[i];
    n->attr.win.out[i] = w->out[i];
  }
  return fe_finish_view(n);
}

/* wm (groups, O / groups, depth) times the window operand of x (N, C, H, W),
 * one batched GEMM per group, plus the bias, as (N, O, OH, OW); unbatched: x
 * was (C, H, W) and so is the result. The reshape after the product keeps
 * its row-major order, so fuse keeps the bias and what follows in the GEMM's
 * epilogue. */
static ir_node *window_product(const char *f, int l, ir_node *x, ir_node *wm, ir_node *b, const window *win,
                               const int64_t *u, bool unbatched) {
  fe_temps t = {0};
  int64_t groups = wm->shape[0], og = wm->shape[1];
  ir_node *im = fe_keep(&t, unfold(f, l, x, win, u, groups));
  ir_node *y = fe_keep(&t, kiln_matmul_at(f, l, wm, im));   /* (N, g, O/g, OH*OW) */
  if (b)   /* per (group, output channel) of the product */
    y = fe_keep(&t, kiln_add_at(f, l, y, fe_keep(&t, kiln_reshape_at(f, l, b, 3, (int64_t[]){groups, og, 1}))));
  y = fe_keep(&t, kiln_reshape_at(f, l, y, 4, (int64_t[]){x->shape[0], groups * og, win->out[0], win->out[1]}));
  return fe_temps_done(&t, unbatched ? kiln_squeeze_dim_at(f, l, y, 0) : fe_same(y));
}

/* One input channel per group (depthwise): the bias plus, per tap, the
 * tap's strided slice of the padded input times its weight (O, 1, 1): a
 * windowed reduction the fuser makes one elementwise kernel, as a pooling.
 * A GEMM per (image, group) has one row and depth kh * kw, which its tiles
 * cannot use: on a loaded 2-core machine a 3x3 depthwise conv of
 * 8x64x56x56 took 68 ms as the implicit GEMM and 11 ms this way (medians of
 * 7). Input channel o / (O / C) feeds output channel o. */
static ir_node *depthwise(const char *f, int l, ir_node *x, ir_node *w, ir_node *b, const window *win) {
  fe_temps t = {0};
  int64_t n = x->shape[0], c = x->shape[1], o = w->shape[0], h = x->shape[2], wd = x->shape[3];
  if (o != c) {
    ir_node *x5 = fe_keep(&t, kiln_reshape_at(f, l, x, 5, (int64_t[]){n, c, 1, h, wd}));
    x5 = fe_keep(&t, kiln_expand_at(f, l, x5, 5, (int64_t[]){n, c, o / c, h, wd}));
    x = fe_keep(&t, kiln_reshape_at(f, l, x5, 4, (int64_t[]){n, o, h, wd}));
  }
  ir_node *xp = fe_keep(&t, padded(f, l, x, win, 0));
  ir_node *acc = b ? kiln_reshape_at(f, l, b, 3, (int64_t[]){o, 1, 1}) : NULL;
  for (int64_t i = 0; i < win->k[0]; i++)
    for (int64_t j = 0; j < win->k[1]; j++) {
      fe_temps tt = {0};
      ir_node *wi = fe_keep(&tt, kiln_slice_at(f, l, w, 2, i, i + 1, 1));
      ir_node *wij = fe_keep(&tt, kiln_reshape_at(f, l, fe_keep(&tt, kiln_slice_at(f, l, wi, 3, j, j + 1, 1)), 3, (int64_t[]){o, 1, 1}));
      ir_node *term = fe_keep(&tt, kiln_mul_at(f, l, tap(f, l, xp, win, i, j, &tt), wij));
      ir_node *next = acc ? kiln_add_at(f, l, acc, term) : fe_same(term);
      fe_drop(acc);
      acc = next;
      fe_temps_done(&tt, NULL);
    }
  return fe_temps_done(&t, acc);
}

/* x (N, C, H, W) * w (O, C/g, kh, kw): the weight as (g, O/g, C/g * kh *
 * kw) times the window operand, or depthwise (above). */
static ir_node *conv(const char *f, int l, const char *op, ir_node *x, ir_node *w, ir_node *b, int ns,
                     const int64_t *s, int np, const int64_t *p, int nd, const int64_t *d, int64_t groups) {
  ir_node *e = check_conv(f, l, op, x, w, b, groups, false);
  window win;
  if (e || (e = window_of(f, l, op, false, x, 2, w->shape + 2, ns, s, np, p, nd, d, 0, &win))) return e;
  fe_temps t = {0};
  bool unbatched = x->ndim == 3;
  if (unbatched) x = fe_keep(&t, kiln_unsqueeze_at(f, l, x, 0));
  if (x->shape[1] == groups) {
    ir_node *y = fe_keep(&t, depthwise(f, l, x, w, b, &win));
    return fe_temps_done(&t, unbatched ? kiln_squeeze_dim_at(f, l, y, 0) : fe_same(y));
  }
  int64_t o = w->shape[0], depth = x->shape[1] / groups * win.k[0] * win.k[1];
  ir_node *wm = fe_keep(&t, kiln_reshape_at(f, l, w, 3, (int64_t[]){groups, o / groups, depth}));
  static const int64_t one[2] = {1, 1};
  return fe_temps_done(&t, window_product(f, l, x, wm, b, &win, one, unbatched));
}

/* The window of conv_transpose2d as a convolution (kiln.h): kernel and
 * dilation as given, stride 1, padding d * (k - 1) - p (negative: it crops),
 * the input spread stride apart (u), and torch's output size (H - 1) * s -
 * 2p + d * (k - 1) + output_padding + 1. */
static ir_node *transposed_window(const char *f, int l, ir_node *x, const ir_node *w, int ns, const int64_t *s, int np,
                                  const int64_t *p, int nop, const int64_t *op, int nd, const int64_t *d, window *win,
                                  int64_t u[2]) {
  static const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
  int64_t pad[2], extra[2];
  const char *name = "conv_transpose2d";
  ir_node *e;
  if ((e = fe_check_list(f, l, name, "stride", ns, s)) || (e = fe_check_list(f, l, name, "padding", np, p)) ||
      (e = fe_check_list(f, l, name, "output_padding", nop, op)) || (e = fe_check_list(f, l, name, "dilation", nd, d)))
    return e;
  if (!pair(ns, s, one, u) || !pair(np, p, zero, pad) || !pair(nop, op, zero, extra) || !pair(nd, d, one, win->d))
    return fe_error(KILN_ERR_ARG, f, l, "conv_transpose2d: stride, padding, output_padding and dilation take 1 or 2 values");
  for (int i = 0; i < 2; i++) {
    if (u[i] < 1 || win->d[i] < 1 || pad[i] < 0 || extra[i] < 0)
      return fe_error(KILN_ERR_ARG, f, l, "conv_transpose2d: stride and dilation must be positive and padding and "
                      "output_padding non-negative, got stride (%lld, %lld), padding (%lld, %lld), output_padding "
                      "(%lld, %lld), dilation (%lld, %lld)", (long long)u[0], (long long)u[1], (long long)pad[0],
                      (long long)pad[1], (long long)extra[0], (long long)extra[1], (long long)win->d[0], (long long)win->d[1]);
    if (extra[i] >= u[i] && extra[i] >= win->d[i])
      return fe_error(KILN_ERR_ARG, f, l, "conv_transpose2d: output padding must be smaller than either stride or "
                      "dilation, but got output_padding=%lld, stride=%lld and dilation=%lld", (long long)extra[i],
                      (long long)u[i], (long long)win->d[i]);
    win->k[i] = w->shape[2 + i];
    win->s[i] = 1;
    win->p[i] = win->d[i] * (win->k[i] - 1) - pad[i];
    win->out[i] = (x->shape[x->ndim - 2 + i] - 1) * u[i] - 2 * pad[i] + win->d[i] * (win->k[i] - 1) + extra[i] + 1;
    if (win->out[i] < 1) return input_error(f, l, "conv_transpose2d", x, "the output size is too small");
  }
  return NULL;
}

/* The gradient of a convolution, scatter-free (kiln.h): a convolution of
 * the spread input with the weight flipped and transposed to (groups, O /
 * groups, C / groups * kh * kw). */
static ir_node *conv_transpose2d(const char *f, int l, ir_node *x, ir_node *w, ir_node *b, int ns, const int64_t *s,
                                 int np, const int64_t *p, int nop, const int64_t *op, int64_t groups, int nd,
                                 const int64_t *d) {
  ir_node *e = check_conv(f, l, "conv_transpose2d", x, w, b, groups, true);
  window win;
  int64_t u[2];
  if (e || (e = transposed_window(f, l, x, w, ns, s, np, p, nop, op, nd, d, &win, u))) return e;
  fe_temps t = {0};
  bool unbatched = x->ndim == 3;
  if (unbatched) x = fe_keep(&t, kiln_unsqueeze_at(f, l, x, 0));
  int64_t cg = w->shape[0] / groups, og = w->shape[1], kh = win.k[0], kw = win.k[1];
  ir_node *wg = fe_keep(&t, kiln_reshape_at(f, l, w, 5, (int64_t[]){groups, cg, og, kh, kw}));
  ir_node *wf = fe_keep(&t, kiln_flip_at(f, l, wg, 2, (int64_t[]){3, 4}));
  ir_node *wp = fe_keep(&t, kiln_permute_at(f, l, wf, 5, (int64_t[]){0, 2, 1, 3, 4}));
  ir_node *wm = fe_keep(&t, kiln_reshape_at(f, l, wp, 3, (int64_t[]){groups, og, cg * kh * kw}));
  return fe_temps_done(&t, window_product(f, l, x, wm, b, &win, u, unbatched));
}

/* conv1d as conv2d over a height of 1: x (N, C, L) or (C, L), w (O, C/g, k). */
static ir_node *conv1d(const char *f, int l, ir_node *x, ir_node *w, ir_node *b, int ns, const int64_t *s, int np,
                       const int64_t *p, int nd, const int64_t *d, int64_t groups) {
  ir_node *e = fe_check_args(f, l, "conv1d", 2, (ir_node *[]){x, w});
  if (e || (e = fe_check_list(f, l, "conv1d", "stride", ns, s)) ||
      (e = fe_check_list(f, l, "conv1d", "padding", np, p)) || (e = fe_check_list(f, l, "conv1d", "dilation", nd, d)))
    return e;
  if ((x->ndim != 2 && x->ndim != 3) || w->ndim != 3 || ns > 1 || np > 1 || nd > 1)
    return fe_error(KILN_ERR_SHAPE, f, l, "conv1d: expected a 2-D (C, L) or 3-D (N, C, L) input, a 3-D weight and "
                    "one value for stride, padding and dilation");
  int64_t s2[2] = {1, ns ? s[0] : 1}, p2[2] = {0, np ? p[0] : 0}, d2[2] = {1, nd ? d[0] : 1};
  fe_temps t = {0};
  ir_node *x2 = fe_keep(&t, kiln_unsqueeze_at(f, l, x, -2)), *w2 = fe_keep(&t, kiln_unsqueeze_at(f, l, w, -2));
  ir_node *y = fe_keep(&t, conv(f, l, "conv1d", x2, w2, b, 2, s2, 2, p2, 2, d2, groups));
  return fe_temps_done(&t, y->status == KILN_OK ? kiln_squeeze_dim_at(f, l, y, -2) : fe_same(y));
}

/* ---- the public functions --------------------------------------------------------- */
kiln_tensor *kiln_interpolate_at(const char *f, int l, kiln_tensor *x, int nsize, const int64_t *size, const char *mode,
                                 int align_corners) {
  FE_AS("interpolate", interpolate(f, l, x, nsize, size, mode, align_corners));
}

kiln_tensor *kiln_conv1d_at(const char *f, int l, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int nstride,
                            const int64_t *stride, int npadding, const int64_t *padding, int ndilation,
                            const int64_t *dilation, int64_t groups) {
  FE_AS("conv1d", conv1d(f, l, x, w, b, nstride, stride, npadding, padding, ndilation, dilation, groups));
}

kiln_tensor *kiln_conv2d_at(const char *f, int l, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int nstride,
                            const int64_t *stride, int npadding, const int64_t *padding, int ndilation,
                            const int64_t *dilation, int64_t groups) {
  FE_AS("conv2d", conv(f, l, "conv2d", x, w, b, nstride, stride, npadding, padding, ndilation, dilation, groups));
}

kiln_tensor *kiln_conv_transpose2d_at(const char *f, int l, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                                      int nstride, const int64_t *stride, int npadding, const int64_t *padding,
                                      int noutput_padding, const int64_t *output_padding, int64_t groups, int ndilation,
                                      const int64_t *dilation) {
  FE_AS("conv_transpose2d", conv_transpose2d(f, l, x, w, b, nstride, stride, npadding, padding, noutput_padding,
                                             output_padding, groups, ndilation, dilation));
}

kiln_tensor *kiln_max_pool2d_at(const char *f, int l, kiln_tensor *x, int nkernel, const int64_t *kernel_size,
                                int nstride, const int64_t *stride, int npadding, const int64_t *padding,
                                int ndilation, const int64_t *dilation, int ceil_mode) {
  const char *prev = ir_api_push("max_pool2d");
  ir_node *v;
  max_pool(f, l, x, nkernel, kernel_size, nstride, stride, npadding, padding, ndilation, dilation, ceil_mode, &v, NULL);
  ir_api_pop(prev);
  return v;
}

void kiln_max_pool2d_with_indices_at(const char *f, int l, kiln_tensor *x, int nkernel, const int64_t *kernel_size,
                                     int nstride, const int64_t *stride, int npadding, const int64_t *padding,
                                     int ndilation, const int64_t *dilation, int ceil_mode, kiln_tensor **values,
                                     kiln_tensor **indices) {
  const char *prev = ir_api_push("max_pool2d_with_indices");
  ir_node *v, *i;
  max_pool(f, l, x, nkernel, kernel_size, nstride, stride, npadding, padding, ndilation, dilation, ceil_mode, &v, &i);
  ir_api_pop(prev);
  if (values) *values = v;
  else fe_drop(v);
  if (indices) *indices = i;
  else fe_drop(i);
}

kiln_tensor *kiln_avg_pool2d_at(const char *f, int l, kiln_tensor *x, int nkernel, const int64_t *kernel_size,
                                int nstride, const int64_t *stride, int npadding, const int64_t *padding, int ceil_mode,
                                int count_include_pad) {
  FE_AS("avg_pool2d",
        avg_pool(f, l, x, nkernel, kernel_size, nstride, stride, npadding, padding, ceil_mode, count_include_pad));
}

kiln_tensor *kiln_adaptive_avg_pool2d_at(const char *f, int l, kiln_tensor *x, int noutput_size,
                                         const int64_t *output_size) {
  FE_AS("adaptive_avg_pool2d", adaptive_avg_pool(f, l, x, noutput_size, output_size));
}
