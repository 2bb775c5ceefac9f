/* gradcheck.c: the gradient checker of gradcheck.h. */
#include "gradcheck.h"

#include "ir/graph.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-6
#define ATOL 1e-5
#define RTOL 1e-3

static int64_t numel_of(const gc_input *in) { return ir_numel(in->ndim, in->shape); }

void gc_fill(const gc_input *in, uint64_t seed, double *out) {
  uint64_t st = seed * 0x9E3779B97F4A7C15ull + 7;
  int64_t n = numel_of(in);
  for (int64_t k = 0; k < n; k++) out[k] = in->lo + (in->hi - in->lo) * (double)(tu_next(&st) >> 11) * 0x1p-53;
  for (int z = 0; z < in->zeros && n; z++) out[(int64_t)(tu_next(&st) % (uint64_t)n)] = 0;
}

typedef struct {
  gc_fn fn;
  const void *ctx;
  int n;
  const gc_input *in;
  double **data;        /* each input's values */
  double *dy;           /* the cotangent */
  double **grad;        /* the f64 analytic gradients */
  unsigned *seen;
  char *why;
  size_t len;
} gc_run;

static void count_ops(gc_run *r, kiln_tensor *y) {
  ir_node **topo;
  int n = r->seen ? ir_graph_collect(1, &y, &topo) : 0;
  for (int i = 0; i < n; i++) r->seen[topo[i]->op]++;
  if (n > 0) free(topo);
}

static kiln_tensor *leaf(const gc_input *in, const double *data, kiln_dtype dt) {
  kiln_tensor *t = kiln_from_data(data, KILN_F64, in->ndim, in->shape);
  return dt == KILN_F64 ? t : kiln_cast(t, dt);
}

/* The gradients of f at x (dtype dt, every input as given by make) into
 * out (doubles); false with why. */
static bool analytic(gc_run *r, kiln_tensor *const *x, kiln_dtype dt, double **out, const char *mode) {
  bool ok = false;
  kiln_scope_begin();
  kiln_tensor *y = r->fn(x, r->ctx), *g[8];
  count_ops(r, y);
  kiln_tensor *dy = kiln_cast(kiln_from_data(r->dy, KILN_F64, kiln_ndim(y), kiln_shape(y)), kiln_dtype_of(y));
  kiln_status st = kiln_status_of(y);
  if (st == KILN_OK) st = kiln_grad(y, dy, r->n, x, g);
  if (st == KILN_OK) st = kiln_realize_n(r->n, g);
  if (st != KILN_OK) {
    snprintf(r->why, r->len, "%s: %s", mode, kiln_last_error());
  } else {
    ok = true;
    for (int i = 0; i < r->n && ok; i++) {
      bool shape_ok = kiln_ndim(g[i]) == r->in[i].ndim && kiln_dtype_of(g[i]) == dt &&
                      !memcmp(kiln_shape(g[i]), r->in[i].shape, sizeof(int64_t) * (size_t)r->in[i].ndim);
      if (!shape_ok) {
        snprintf(r->why, r->len, "%s: gradient %d has the wrong shape or dtype (%s)", mode, i, kiln_dtype_name(kiln_dtype_of(g[i])));
        ok = false;
        break;
      }
      kiln_tensor *g64 = kiln_cast(g[i], KILN_F64);
      ok = kiln_copy_to_host(g64, out[i], sizeof(double) * (size_t)numel_of(&r->in[i])) == KILN_OK;
      if (!ok) snprintf(r->why, r->len, "%s: %s", mode, kiln_last_error());
    }
  }
  kiln_scope_end();
  return ok;
}

/* sum(f(x) * dy) with input i's element j moved by delta. */
static double objective(gc_run *r, int i, int64_t j, double delta) {
  kiln_scope_begin();
  kiln_tensor *x[8];
  double saved = r->data[i][j];
  r->data[i][j] += delta;
  for (int k = 0; k < r->n; k++) x[k] = leaf(&r->in[k], r->data[k], KILN_F64);
  r->data[i][j] = saved;
  kiln_tensor *y = r->fn(x, r->ctx);
  kiln_tensor *dy = kiln_from_data(r->dy, KILN_F64, kiln_ndim(y), kiln_shape(y));
  double v = kiln_item(kiln_sum(kiln_mul(y, dy)));
  kiln_scope_end();
  return v;
}

static bool numeric(gc_run *r) {
  for (int i = 0; i < r->n; i++)
    for (int64_t j = 0; j < numel_of(&r->in[i]); j++) {
      double num = (objective(r, i, j, EPS) - objective(r, i, j, -EPS)) / (2 * EPS), a = r->grad[i][j];
      if (!isfinite(num) || !(fabs(a - num) <= ATOL + RTOL * fabs(num))) {
        snprintf(r->why, r->len, "input %d element %lld: analytic %.9g, central differences %.9g", i, (long long)j, a, num);
        return false;
      }
    }
  return true;
}

/* got against the f64 gradients: |got - want| <= atol + rtol |want|. */
static bool compare(gc_run *r, double **got, double rtol, double atol_scale, const char *mode) {
  for (int i = 0; i < r->n; i++) {
    int64_t n = numel_of(&r->in[i]);
    double big = 0;
    for (int64_t j = 0; j < n; j++) big = fmax(big, fabs(r->grad[i][j]));
    for (int64_t j = 0; j < n; j++) {
      double want = r->grad[i][j], tol = atol_scale * (1 + big) + rtol * fabs(want);
      if (!(fabs(got[i][j] - want) <= tol)) {
        snprintf(r->why, r->len, "%s: input %d element %lld: %.9g, the f64 gradient is %.9g", mode, i, (long long)j,
                 got[i][j], want);
        return false;
      }
    }
  }
  return true;
}

/* A realized transposed view holding in's values: a tensor of the last
 * two dims swapped, transposed back (non-contiguous strides). */
static kiln_tensor *strided(const gc_input *in, const double *data) {
  if (in->ndim < 2) return leaf(in, data, KILN_F64);
  int nd = in->ndim;
  int64_t rows = in->shape[nd - 2], cols = in->shape[nd - 1], n = numel_of(in), swapped[KILN_MAX_DIMS];
  double *t = malloc(sizeof *t * (size_t)(n + 1));
  for (int64_t k = 0; k < n; k++) {
    int64_t plane = k / (rows * cols), a = k / cols % rows, b = k % cols;
    t[plane * rows * cols + b * rows + a] = data[k];
  }
  memcpy(swapped, in->shape, sizeof swapped);
  swapped[nd - 2] = cols;
  swapped[nd - 1] = rows;
  kiln_tensor *v = kiln_transpose(kiln_from_data(t, KILN_F64, nd, swapped), -2, -1);
  free(t);
  kiln_realize(v);
  return v;
}

static double **alloc_grads(int n, const gc_input *in) {
  double **g = calloc((size_t)n, sizeof *g);
  for (int i = 0; i < n; i++) g[i] = calloc((size_t)numel_of(&in[i]) + 1, sizeof **g);
  return g;
}

static void free_grads(int n, double **g) {
  for (int i = 0; g && i < n; i++) free(g[i]);
  free(g);
}

/* The inputs as make gives them, then the gradients in dt against the f64 ones. */
static bool mode_check(gc_run *r, kiln_dtype dt, bool eager, bool views, double rtol, double atol, const char *mode) {
  double **got = alloc_grads(r->n, r->in);
  kiln_scope_begin();
  kiln_set_eager(eager);
  kiln_tensor *x[8];
  for (int i = 0; i < r->n; i++) x[i] = views ? strided(&r->in[i], r->data[i]) : leaf(&r->in[i], r->data[i], dt);
  bool ok = analytic(r, x, dt, got, mode) && compare(r, got, rtol, atol, mode);
  kiln_set_eager(0);
  kiln_scope_end();
  free_grads(r->n, got);
  return ok;
}

bool gc_check(gc_fn fn, const void *ctx, int n, const gc_input *in, unsigned modes, uint64_t seed, unsigned *seen,
              char *why, size_t len) {
  gc_run r = {.fn = fn, .ctx = ctx, .n = n, .in = in, .data = calloc((size_t)n, sizeof(double *)),
              .grad = alloc_grads(n, in), .seen = seen, .why = why, .len = len};
  for (int i = 0; i < n; i++) {
    r.data[i] = calloc((size_t)numel_of(&in[i]) + 1, sizeof(double));
    gc_fill(&in[i], seed + (uint64_t)i, r.data[i]);
  }
  kiln_scope_begin();
  kiln_tensor *x[8];
  for (int i = 0; i < n; i++) x[i] = leaf(&in[i], r.data[i], KILN_F64);
  kiln_tensor *y = fn(x, ctx);
  bool ok = kiln_status_of(y) == KILN_OK;
  if (!ok) snprintf(why, len, "building f: %s", kiln_last_error());
  int64_t ny = ok ? kiln_numel(y) : 0;
  r.dy = calloc((size_t)ny + 1, sizeof(double));
  gc_input dy_in = {.lo = -1, .hi = 1, .ndim = 1, .shape = {ny}};
  gc_fill(&dy_in, seed ^ 0xd1, r.dy);
  ok = ok && analytic(&r, x, KILN_F64, r.grad, "f64");
  kiln_scope_end();
  if (ok && (modes & GC_F64)) ok = numeric(&r);
  if (ok && (modes & GC_EAGER)) ok = mode_check(&r, KILN_F64, true, false, 1e-7, 1e-9, "eager");
  if (ok && (modes & GC_VIEWS)) ok = mode_check(&r, KILN_F64, false, true, 1e-7, 1e-9, "views");
  if (ok && (modes & GC_F32)) ok = mode_check(&r, KILN_F32, false, false, 2e-3, 2e-4, "f32");
  for (int i = 0; i < n; i++) free(r.data[i]);
  free(r.data);
  free(r.dy);
  free_grads(n, r.grad);
  return ok;
}
