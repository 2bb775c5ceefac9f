/* test_index_ops.c: indexing with index tensors (gather, take_along_dim,
 * index_select, take, index_tensors, embedding), the scatters, nonzero and
 * masked_select: each against the reference evaluator, fused and eager, on
 * every dtype, realized and computed, contiguous and not; hand-worked values
 * for the orders and rules the oracle shares with the op; kernel counts that
 * show a gather fuses into its consumer; and every error with its file:line. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

/* ---- inputs ---------------------------------------------------------------- */
/* An index tensor of values in [lo, hi): negatives and duplicates included
 * whenever the range has them. */
static kiln_tensor *idx(kiln_dtype dt, int ndim, const int64_t *shape, int64_t lo, int64_t hi, uint64_t seed) {
  int64_t n = 1, v[256];
  for (int d = 0; d < ndim; d++) n *= shape[d];
  ck_assert_int_le(n, 256);
  for (int64_t k = 0; k < n; k++) v[k] = lo + (int64_t)(tu_next(&seed) % (uint64_t)(hi - lo));
  kiln_tensor *t = kiln_from_data(v, KILN_I64, ndim, shape);
  return dt == KILN_I64 ? t : kiln_cast(t, dt);
}

typedef struct {
  kiln_dtype dt;        /* of the data */
  kiln_dtype it;        /* of the indices */
  bool computed;        /* the data computed (not a buffer) */
  bool strided;         /* the data a transposed view */
} mode;

/* A (rows, cols) data tensor in the mode (its values follow the shape):
 * computed, or transposed from a (cols, rows) buffer. */
static kiln_tensor *data2(const mode *m, int64_t rows, int64_t cols) {
  uint64_t seed = (uint64_t)(rows * 31 + cols);
  kiln_tensor *x = m->strided ? kiln_T(tu_data(m->dt, KILN_SHAPE(cols, rows), seed, TU_FULL))
                              : tu_data(m->dt, KILN_SHAPE(rows, cols), seed, TU_FULL);
  return m->computed ? kiln_maximum(x, x) : x;
}

/* ---- oracle cases ---------------------------------------------------------- */
typedef kiln_tensor *(*case_fn)(const mode *m);

static kiln_tensor *c_gather0(const mode *m) { return kiln_gather(data2(m, 5, 4), 0, idx(m->it, KILN_SHAPE(3, 4), -5, 5, 1)); }
static kiln_tensor *c_gather1(const mode *m) { return kiln_gather(data2(m, 5, 4), -1, idx(m->it, KILN_SHAPE(5, 7), -4, 4, 2)); }
static kiln_tensor *c_gather_small(const mode *m) { return kiln_gather(data2(m, 5, 4), 1, idx(m->it, KILN_SHAPE(2, 3), 0, 4, 3)); }
static kiln_tensor *c_gather_tidx(const mode *m) { return kiln_gather(data2(m, 5, 4), 0, kiln_T(idx(m->it, KILN_SHAPE(4, 5), -5, 5, 4))); }
static kiln_tensor *c_gather_empty(const mode *m) { return kiln_gather(data2(m, 5, 4), 0, idx(m->it, KILN_SHAPE(0, 4), 0, 1, 5)); }
static kiln_tensor *c_gather_0dim(const mode *m) {
  return kiln_gather(kiln_select(kiln_select(data2(m, 2, 3), 0, 1), 0, 2), 0, kiln_select(idx(m->it, KILN_SHAPE(1), -1, 1, 6), 0, 0));
}
/* an index computed from another (fused into the gather's kernel) */
static kiln_tensor *c_gather_idx_expr(const mode *m) {
  return kiln_gather(data2(m, 5, 4), 1, kiln_subs(idx(m->it, KILN_SHAPE(5, 4), 0, 8, 7), 4));
}
/* and one from a reduction: the row's argmax */
static kiln_tensor *c_gather_argmax(const mode *m) {
  kiln_tensor *x = data2(m, 5, 4);
  return kiln_gather(x, 1, kiln_argmax_dim(x, 1, 1));
}
static kiln_tensor *c_gather_add(const mode *m) {
  return kiln_add(kiln_gather(data2(m, 5, 4), 0, idx(m->it, KILN_SHAPE(6, 4), -5, 5, 8)), data2(m, 6, 4));
}
static kiln_tensor *c_take_along(const mode *m) {
  return kiln_take_along_dim(data2(m, 5, 1), idx(m->it, KILN_SHAPE(3, 4), -5, 5, 9), 0);
}
static kiln_tensor *c_take_along_b(const mode *m) {
  return kiln_take_along_dim(data2(m, 1, 4), idx(m->it, KILN_SHAPE(3, 6), -4, 4, 10), 1);
}
static kiln_tensor *c_index_select0(const mode *m) { return kiln_index_select(data2(m, 5, 4), 0, idx(m->it, KILN_SHAPE(7), -5, 5, 11)); }
static kiln_tensor *c_index_select1(const mode *m) { return kiln_index_select(data2(m, 5, 4), -1, idx(m->it, KILN_SHAPE(3), -4, 4, 12)); }
static kiln_tensor *c_index_select_none(const mode *m) { return kiln_index_select(data2(m, 5, 4), 1, idx(m->it, KILN_SHAPE(0), 0, 1, 13)); }
static kiln_tensor *c_index_select_0dim(const mode *m) {
  return kiln_index_select(data2(m, 5, 4), 0, kiln_select(idx(m->it, KILN_SHAPE(1), -5, 5, 14), 0, 0));
}
static kiln_tensor *c_take(const mode *m) { return kiln_take(data2(m, 5, 4), idx(m->it, KILN_SHAPE(2, 3), -20, 20, 15)); }
static kiln_tensor *c_take_0dim(const mode *m) { return kiln_take(data2(m, 5, 4), kiln_select(idx(m->it, KILN_SHAPE(1), -20, 20, 16), 0, 0)); }
static kiln_tensor *c_embedding(const mode *m) { return kiln_embedding(idx(m->it, KILN_SHAPE(2, 3), 0, 9, 17), data2(m, 9, 5)); }
static kiln_tensor *c_embedding_1d(const mode *m) { return kiln_embedding(idx(m->it, KILN_SHAPE(4), -9, 9, 18), data2(m, 9, 5)); }
static kiln_tensor *c_embedding_0dim(const mode *m) {
  return kiln_embedding(kiln_select(idx(m->it, KILN_SHAPE(1), 0, 9, 19), 0, 0), data2(m, 9, 5));
}
static kiln_tensor *c_index_first(const mode *m) {
  return kiln_index_tensors(data2(m, 5, 4), 1, ((kiln_tensor *[]){idx(m->it, KILN_SHAPE(2, 3), -5, 5, 20)}));
}
static kiln_tensor *c_index_second(const mode *m) {
  return kiln_index_tensors(data2(m, 5, 4), 2, ((kiln_tensor *[]){NULL, idx(m->it, KILN_SHAPE(3), -4, 4, 21)}));
}
static kiln_tensor *c_index_both(const mode *m) {
  kiln_tensor *i0 = idx(m->it, KILN_SHAPE(3, 1), -5, 5, 22), *i1 = idx(m->it, KILN_SHAPE(2), -4, 4, 23);
  return kiln_index_tensors(data2(m, 5, 4), 2, ((kiln_tensor *[]){i0, i1}));
}
/* separated indexed dims: the broadcast dims go first */
static kiln_tensor *c_index_apart(const mode *m) {
  kiln_tensor *x = kiln_reshape(data2(m, 6, 4), KILN_SHAPE(3, 2, 4));
  kiln_tensor *i0 = idx(m->it, KILN_SHAPE(5), -3, 3, 24), *i2 = idx(m->it, KILN_SHAPE(1), -4, 4, 25);
  return kiln_index_tensors(x, 3, ((kiln_tensor *[]){i0, NULL, i2}));
}
static kiln_tensor *c_index_middle(const mode *m) {
  kiln_tensor *x = kiln_reshape(data2(m, 6, 4), KILN_SHAPE(3, 2, 4));
  return kiln_index_tensors(x, 2, ((kiln_tensor *[]){NULL, idx(m->it, KILN_SHAPE(2, 2), -2, 2, 26)}));
}
static kiln_tensor *c_scatter(const mode *m) {
  return kiln_scatter(data2(m, 5, 4), 0, idx(m->it, KILN_SHAPE(3, 4), -5, 5, 27), data2(m, 4, 4));
}
static kiln_tensor *c_scatter1(const mode *m) {
  return kiln_scatter(data2(m, 5, 4), 1, idx(m->it, KILN_SHAPE(5, 6), -4, 4, 28), data2(m, 5, 6));
}
static kiln_tensor *c_scatters(const mode *m) { return kiln_scatters(data2(m, 5, 4), 1, idx(m->it, KILN_SHAPE(2, 3), 0, 4, 29), 1.0); }
static kiln_tensor *c_scatter_add(const mode *m) {
  return kiln_scatter_add(data2(m, 5, 4), 0, idx(m->it, KILN_SHAPE(6, 4), -5, 5, 30), data2(m, 6, 4));
}
static kiln_tensor *c_scatter_empty(const mode *m) {
  return kiln_scatter_add(data2(m, 5, 4), 0, idx(m->it, KILN_SHAPE(0, 4), 0, 1, 31), data2(m, 6, 4));
}
static kiln_tensor *c_scatter_add_after(const mode *m) {
  kiln_tensor *s = kiln_scatter_add(data2(m, 5, 4), 1, idx(m->it, KILN_SHAPE(5, 3), -4, 4, 32), data2(m, 5, 3));
  return kiln_maximum(s, s);
}
static kiln_tensor *reduce_case(const mode *m, const char *reduce, int include_self) {
  return kiln_scatter_reduce(data2(m, 5, 4), 0, idx(m->it, KILN_SHAPE(6, 4), 0, 3, 33), data2(m, 6, 4), reduce, include_self);
}
static kiln_tensor *c_sum(const mode *m) { return reduce_case(m, "sum", 1); }
static kiln_tensor *c_sum_new(const mode *m) { return reduce_case(m, "sum", 0); }
static kiln_tensor *c_prod(const mode *m) { return reduce_case(m, "prod", 1); }
static kiln_tensor *c_prod_new(const mode *m) { return reduce_case(m, "prod", 0); }
static kiln_tensor *c_mean(const mode *m) { return reduce_case(m, "mean", 1); }
static kiln_tensor *c_mean_new(const mode *m) { return reduce_case(m, "mean", 0); }
static kiln_tensor *c_amax(const mode *m) { return reduce_case(m, "amax", 1); }
static kiln_tensor *c_amax_new(const mode *m) { return reduce_case(m, "amax", 0); }
static kiln_tensor *c_amin(const mode *m) { return reduce_case(m, "amin", 1); }
static kiln_tensor *c_amin_new(const mode *m) { return reduce_case(m, "amin", 0); }
static kiln_tensor *c_scatter_0dim(const mode *m) {
  kiln_tensor *x = kiln_select(kiln_select(data2(m, 2, 3), 0, 1), 0, 2);
  return kiln_scatter_add(x, 0, kiln_select(idx(m->it, KILN_SHAPE(1), -1, 1, 34), 0, 0), x);
}

typedef struct {
  const char *name;
  case_fn fn;
  bool arith;           /* computes on values: not on bool (argmax, sums), tolerant on narrow floats */
} index_case;

static const index_case cases[] = {
  {"gather 0", c_gather0, false},          {"gather -1", c_gather1, false},
  {"gather smaller", c_gather_small, false}, {"gather T(index)", c_gather_tidx, false},
  {"gather empty", c_gather_empty, false}, {"gather 0-dim", c_gather_0dim, false},
  {"gather index expr", c_gather_idx_expr, false}, {"gather argmax", c_gather_argmax, true},
  {"gather + add", c_gather_add, true},    {"take_along_dim", c_take_along, false},
  {"take_along_dim bcast", c_take_along_b, false}, {"index_select 0", c_index_select0, false},
  {"index_select -1", c_index_select1, false}, {"index_select none", c_index_select_none, false},
  {"index_select 0-dim", c_index_select_0dim, false}, {"take", c_take, false},
  {"take 0-dim", c_take_0dim, false},      {"embedding", c_embedding, false},
  {"embedding 1-D", c_embedding_1d, false}, {"embedding 0-dim", c_embedding_0dim, false},
  {"x[i]", c_index_first, false},          {"x[:, i]", c_index_second, false},
  {"x[i, j]", c_index_both, false},        {"x[i, :, k]", c_index_apart, false},
  {"x[:, i]  3-D", c_index_middle, false}, {"scatter", c_scatter, false},
  {"scatter 1", c_scatter1, false},        {"scatters", c_scatters, false},
  {"scatter_add", c_scatter_add, true},    {"scatter_add empty", c_scatter_empty, true},
  {"scatter_add consumed", c_scatter_add_after, true}, {"reduce sum", c_sum, true},
  {"reduce sum new", c_sum_new, true},     {"reduce prod", c_prod, true},
  {"reduce prod new", c_prod_new, true},   {"reduce mean", c_mean, true},
  {"reduce mean new", c_mean_new, true},   {"reduce amax", c_amax, true},
  {"reduce amax new", c_amax_new, true},   {"reduce amin", c_amin, true},
  {"reduce amin new", c_amin_new, true},   {"scatter_add 0-dim", c_scatter_0dim, true},
};
enum { NCASES = sizeof cases / sizeof *cases };

typedef struct {
  const index_case *c;
  mode m;
} run_ctx;

static kiln_tensor *build(const void *p) {
  const run_ctx *r = p;
  return r->c->fn(&r->m);
}

static void run(const index_case *c, mode m) {
  run_ctx r = {c, m};
  char why[1200];
  ref_tol tol = c->arith ? ref_tol_dtype(m.dt) : (ref_tol){0, 0};
  bool ok = tu_check_fused_eager(build, &r, m.dt, tol, why, sizeof why);
  ck_assert_msg(ok, "%s (%s, %s index, %s%s): %s", c->name, ir_dtypes[m.dt].name, ir_dtypes[m.it].name,
                m.computed ? "computed" : "realized", m.strided ? ", strided" : "", why);
}

/* int64 and int32 indices; realized, computed and strided data. */
START_TEST(each_case_f32_every_mode) {
  for (int k = 0; k < 4; k++) run(&cases[_i], (mode){KILN_F32, k & 1 ? KILN_I32 : KILN_I64, k == 1 || k == 2, k >= 2});
}
END_TEST

START_TEST(each_case_every_dtype) {
  for (kiln_dtype dt = 0; dt < KILN_NUM_DTYPES; dt++) {
    if (cases[_i].arith && dt == KILN_BOOL) continue;
    run(&cases[_i], (mode){dt, KILN_I64, dt & 1, dt & 2});
  }
}
END_TEST

/* ---- hand-worked values ------------------------------------------------------ */
/* t's values (any dtype) as doubles equal want[0..n). */
static void expect_values(kiln_tensor *t, int n, const double *want) {
  ck_assert_int_eq(kiln_realize(t), KILN_OK);
  ck_assert_int_eq(kiln_numel(t), n);
  kiln_tensor *d = kiln_cast(t, KILN_F64);
  const double *got = kiln_data(d);
  ck_assert_ptr_nonnull(got);
  for (int k = 0; k < n; k++) {
    if (isnan(want[k])) ck_assert_msg(isnan(got[k]), "element %d: got %g, expected nan", k, got[k]);
    else ck_assert_msg(got[k] == want[k], "element %d: got %.17g, expected %.17g", k, got[k], want[k]);
  }
}

static kiln_tensor *vec(kiln_dtype dt, int n, const double *v) {
  kiln_tensor *t = kiln_from_data(v, KILN_F64, KILN_SHAPE(n));
  return dt == KILN_F64 ? t : kiln_cast(t, dt);
}

static kiln_tensor *ivec(int n, const int64_t *v) { return kiln_from_data(v, KILN_I64, KILN_SHAPE(n)); }

START_TEST(gather_values) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_reshape(vec(KILN_F32, 6, (double[]){1, 2, 3, 4, 5, 6}), KILN_SHAPE(2, 3));
  kiln_tensor *i = kiln_reshape(ivec(4, (int64_t[]){2, -1, 0, -3}), KILN_SHAPE(2, 2));
  expect_values(kiln_gather(x, 1, i), 4, (double[]){3, 3, 4, 4});
  expect_values(kiln_index_select(x, 1, ivec(3, (int64_t[]){-1, 0, 0})), 6, (double[]){3, 1, 1, 6, 4, 4});
  expect_values(kiln_take(x, ivec(3, (int64_t[]){5, -6, 2})), 3, (double[]){6, 1, 3});
  kiln_tensor *w = kiln_reshape(vec(KILN_F32, 6, (double[]){10, 11, 20, 21, 30, 31}), KILN_SHAPE(3, 2));
  kiln_tensor *e = kiln_embedding(kiln_reshape(ivec(2, (int64_t[]){2, 0}), KILN_SHAPE(1, 2)), w);
  ck_assert_int_eq(kiln_ndim(e), 3);
  ck_assert_int_eq(kiln_size(e, 2), 2);
  expect_values(e, 4, (double[]){30, 31, 10, 11});
  kiln_tensor *ij[2] = {ivec(2, (int64_t[]){1, 0}), ivec(2, (int64_t[]){-1, 1})};
  expect_values(kiln_index_tensors(x, 2, ij), 2, (double[]){6, 2});
  /* bool masks: over both dims, over the second only, beside an index */
  kiln_tensor *m2 = kiln_gts(x, 3.5), *m1 = kiln_from_data((bool[]){true, false, true}, KILN_BOOL, KILN_SHAPE(3));
  expect_values(kiln_index_tensors(x, 1, &m2), 3, (double[]){4, 5, 6});
  expect_values(kiln_index_tensors(x, 2, ((kiln_tensor *[]){NULL, m1})), 4, (double[]){1, 3, 4, 6});
  expect_values(kiln_index_tensors(x, 2, ((kiln_tensor *[]){ivec(1, (int64_t[]){-1}), m1})), 2, (double[]){4, 6});
  kiln_scope_end();
}
END_TEST

/* Duplicate indices apply in increasing source position: the last value
 * wins, and sums follow that order (1e8 - 1e8 + 1 is 1 in f32; the reverse
 * order would give 0). */
START_TEST(scatter_order) {
  kiln_scope_begin();
  kiln_tensor *z = kiln_zeros(KILN_SHAPE(5), KILN_F32);
  kiln_tensor *i = ivec(4, (int64_t[]){1, 1, 3, -4});
  expect_values(kiln_scatter(z, 0, i, vec(KILN_F32, 4, (double[]){10, 20, 30, 40})), 5, (double[]){0, 40, 0, 30, 0});
  kiln_tensor *i3 = ivec(3, (int64_t[]){2, 2, 2});
  expect_values(kiln_scatter_add(z, 0, i3, vec(KILN_F32, 3, (double[]){1e8, -1e8, 1})), 5, (double[]){0, 0, 1, 0, 0});
  expect_values(kiln_scatters(z, 0, i3, 2.5), 5, (double[]){0, 0, 2.5, 0, 0});
  kiln_scope_end();
}
END_TEST

START_TEST(scatter_reduce_values) {
  kiln_scope_begin();
  kiln_tensor *t = vec(KILN_F32, 3, (double[]){1, 2, 3});
  kiln_tensor *i = ivec(4, (int64_t[]){0, 0, 2, 0});
  kiln_tensor *src = vec(KILN_F32, 4, (double[]){4, 5, 6, NAN});
  kiln_tensor *src2 = vec(KILN_F32, 4, (double[]){4, 5, 6, 7});
  expect_values(kiln_scatter_reduce(t, 0, i, src2, "sum", 1), 3, (double[]){17, 2, 9});
  expect_values(kiln_scatter_reduce(t, 0, i, src2, "sum", 0), 3, (double[]){16, 2, 6});
  expect_values(kiln_scatter_reduce(t, 0, i, src2, "prod", 0), 3, (double[]){140, 2, 6});
  expect_values(kiln_scatter_reduce(t, 0, i, src2, "mean", 1), 3, (double[]){4.25, 2, 4.5});
  expect_values(kiln_scatter_reduce(t, 0, i, src2, "mean", 0), 3, (double[]){(float)(16.0 / 3), 2, 6});
  expect_values(kiln_scatter_reduce(t, 0, i, src, "amax", 1), 3, (double[]){NAN, 2, 6});
  expect_values(kiln_scatter_reduce(t, 0, i, src2, "amin", 0), 3, (double[]){4, 2, 6});
  expect_values(kiln_scatter_reduce(t, 0, i, src2, "amin", 1), 3, (double[]){1, 2, 3});
  /* integer mean divides with floor: (-7 + 2) / 2 = -2.5 -> -3 */
  kiln_tensor *ti = vec(KILN_I32, 2, (double[]){-7, 1});
  expect_values(kiln_scatter_reduce(ti, 0, ivec(1, (int64_t[]){0}), vec(KILN_I32, 1, (double[]){2}), "mean", 1), 2,
                (double[]){-3, 1});
  kiln_scope_end();
}
END_TEST

START_TEST(nonzero_values) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_reshape(vec(KILN_F32, 6, (double[]){0, NAN, 0, -1, 0, 2}), KILN_SHAPE(2, 3));
  kiln_tensor *nz = kiln_nonzero(kiln_mul(x, x));
  ck_assert_int_eq(kiln_dtype_of(nz), KILN_I64);
  ck_assert_int_eq(kiln_ndim(nz), 2);
  ck_assert_int_eq(kiln_size(nz, 0), 3);
  expect_values(nz, 6, (double[]){0, 1, 1, 0, 1, 2});
  kiln_tensor *none = kiln_nonzero(kiln_zeros(KILN_SHAPE(4), KILN_I8));
  ck_assert_int_eq(kiln_size(none, 0), 0);
  ck_assert_int_eq(kiln_size(none, 1), 1);
  kiln_tensor *s = kiln_nonzero(kiln_scalar(3, KILN_I32));
  ck_assert_int_eq(kiln_size(s, 0), 1);
  ck_assert_int_eq(kiln_size(s, 1), 0);
  kiln_tensor *m = kiln_gts(x, 0);   /* NaN > 0 is false */
  kiln_tensor *sel = kiln_masked_select(x, m);
  expect_values(sel, 1, (double[]){2});
  kiln_tensor *row = kiln_from_data((bool[]){true, false, true}, KILN_BOOL, KILN_SHAPE(3));
  expect_values(kiln_adds(kiln_masked_select(x, row), 1), 4, (double[]){1, 1, 0, 3});  /* broadcast over rows */
  kiln_scope_end();
}
END_TEST

/* ---- kernels launched --------------------------------------------------------- */
static uint64_t kernels_for(kiln_tensor *t) {
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize(t), KILN_OK);
  return kiln_stats().kernels_launched;
}

START_TEST(gathers_fuse_into_their_consumer) {
  kiln_scope_begin();
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(50, 16), 1, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(16), 2, TU_SMALL);
  kiln_tensor *i = idx(KILN_I64, KILN_SHAPE(4, 8), 0, 50, 3);
  ck_assert_int_eq(kiln_realize(w), KILN_OK);
  ck_assert_int_eq(kiln_realize(b), KILN_OK);
  ck_assert_int_eq(kiln_realize(i), KILN_OK);
  ck_assert_uint_eq(kernels_for(kiln_add(kiln_embedding(i, w), b)), 1);
  ck_assert_uint_eq(kernels_for(kiln_relu(kiln_index_select(w, 0, kiln_flatten(i)))), 1);
  kiln_tensor *j = idx(KILN_I64, KILN_SHAPE(4, 8), -16, 16, 4), *ij[2] = {i, j};
  ck_assert_uint_eq(kernels_for(kiln_muls(kiln_index_tensors(w, 2, ij), 2)), 1);
  ck_assert_uint_eq(kernels_for(kiln_sum(kiln_take(w, i))), 1);
  /* a computed table is stored once, then gathered by the consumer's kernel */
  ck_assert_uint_eq(kernels_for(kiln_add(kiln_embedding(i, kiln_exp(w)), b)), 2);
  /* a scatter is a kernel of its own */
  kiln_tensor *z = kiln_zeros(KILN_SHAPE(50, 16), KILN_F32);
  ck_assert_uint_eq(kernels_for(kiln_scatter_add(z, 0, kiln_expand(kiln_reshape(kiln_flatten(i), KILN_SHAPE(32, 1)), KILN_SHAPE(32, 16)),
                                                 kiln_slice(w, 0, 0, 32, 1))), 1);
  ck_assert_uint_eq(kernels_for(kiln_adds(kiln_scatter(w, 1, kiln_slice(j, 1, 0, 4, 1), kiln_ones(KILN_SHAPE(4, 4), KILN_F32)), 1)), 2);
  kiln_scope_end();
}
END_TEST

START_TEST(eager_gather_is_one_kernel) {
  kiln_scope_begin();
  kiln_set_eager(1);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(10, 4), 1, TU_SMALL);
  kiln_tensor *i = idx(KILN_I64, KILN_SHAPE(3), -10, 10, 2);
  kiln_reset_stats();
  kiln_tensor *e = kiln_embedding(i, w);
  ck_assert_uint_eq(kiln_stats().kernels_launched, 1);
  kiln_tensor *y = kiln_adds(e, 1);
  ck_assert_uint_eq(kiln_stats().kernels_launched, 2);
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  kiln_set_eager(0);
  kiln_scope_end();
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */
#define EXPECT TU_EXPECT_ERROR

START_TEST(argument_errors) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(2, 3), 1, TU_SMALL);
  kiln_tensor *i2 = idx(KILN_I64, KILN_SHAPE(2, 2), 0, 2, 1), *i1 = idx(KILN_I64, KILN_SHAPE(2), 0, 2, 2);
  kiln_tensor *fi = kiln_cast(i1, KILN_F32), *e0 = kiln_zeros(KILN_SHAPE(0, 3), KILN_F32);
  EXPECT(kiln_gather(x, 0, fi), KILN_ERR_DTYPE,
         "gather: expected an int64 or int32 index, got float32 (input: float32 (2,3), index: float32 (2,))");
  EXPECT(kiln_gather(x, 2, i2), KILN_ERR_ARG,
         "gather: Dimension out of range (expected to be in range of [-2, 1], but got 2) (input: float32 (2,3))");
  EXPECT(kiln_gather(x, 0, i1), KILN_ERR_SHAPE,
         "gather: Index tensor must have the same number of dimensions as input tensor (input: float32 (2,3), index: int64 (2,))");
  EXPECT(kiln_gather(x, 1, idx(KILN_I64, KILN_SHAPE(3, 1), 0, 2, 3)), KILN_ERR_SHAPE,
         "gather: Size does not match at dimension 0: expected index no larger than the input apart from dimension 1 "
         "(input: float32 (2,3), index: int64 (3,1))");
  EXPECT(kiln_gather(e0, 0, idx(KILN_I64, KILN_SHAPE(1, 3), 0, 2, 4)), KILN_ERR_ARG,
         "gather: index out of range: dim 0 of the input has size 0 (input: float32 (0,3), index: int64 (1,3))");
  EXPECT(kiln_index_select(x, 0, i2), KILN_ERR_SHAPE,
         "index_select: Index is supposed to be a vector (input: float32 (2,3), index: int64 (2,2))");
  EXPECT(kiln_take_along_dim(x, i1, 0), KILN_ERR_SHAPE,
         "take_along_dim: input and indices should have the same number of dimensions (input: float32 (2,3), index: int64 (2,))");
  EXPECT(kiln_take_along_dim(x, idx(KILN_I64, KILN_SHAPE(2, 2), 0, 2, 5), 0), KILN_ERR_SHAPE,
         "take_along_dim: shapes cannot broadcast at dimension 1 (3 and 2) (input: float32 (2,3), index: int64 (2,2))");
  EXPECT(kiln_embedding(i1, i1), KILN_ERR_SHAPE, "embedding: 'weight' must be 2-D (input: int64 (2,), index: int64 (2,))");
  EXPECT(kiln_embedding(i1, e0), KILN_ERR_ARG,
         "embedding: index out of range in self (the input has no rows) (input: float32 (0,3), index: int64 (2,))");
  EXPECT(kiln_index_tensors(x, 3, ((kiln_tensor *[]){i1, i1, i1})), KILN_ERR_ARG,
         "index_tensors: 3 indices for a tensor of dimension 2 (input: float32 (2,3))");
  EXPECT(kiln_index_tensors(x, 2, ((kiln_tensor *[]){kiln_gts(x, 0), i1})), KILN_ERR_ARG,
         "index_tensors: too many indices for a tensor of dimension 2 (input: float32 (2,3))");
  EXPECT(kiln_index_tensors(x, 1, ((kiln_tensor *[]){kiln_gts(kiln_select(x, 0, 0), 0)})), KILN_ERR_SHAPE,
         "index_tensors: the shape of the mask does not match the indexed dims from 0 (input: float32 (2,3), "
         "index: bool (3,))");
  EXPECT(kiln_index_tensors(x, 2, ((kiln_tensor *[]){i1, idx(KILN_I64, KILN_SHAPE(3), 0, 2, 6)})), KILN_ERR_SHAPE,
         "index_tensors: shape mismatch: indexing tensors could not be broadcast together (input: float32 (2,3), index: int64 (2,))");
  EXPECT(kiln_scatter(x, 0, i2, kiln_cast(x, KILN_F64)), KILN_ERR_DTYPE,
         "scatter: Expected self.dtype to be equal to src.dtype (float32 and float64) (input: float32 (2,3), index: int64 (2,2))");
  EXPECT(kiln_scatter_add(x, 0, idx(KILN_I64, KILN_SHAPE(2, 4), 0, 2, 7), x), KILN_ERR_SHAPE,
         "scatter_add: Size does not match at dimension 1: expected index no larger than self apart from dimension 0 and "
         "no larger than src (input: float32 (2,3), index: int64 (2,4))");
  EXPECT(kiln_scatter_add(x, 0, i1, x), KILN_ERR_SHAPE,
         "scatter_add: Index tensor must have the same number of dimensions as self and src tensors (input: float32 (2,3), "
         "index: int64 (2,))");
  EXPECT(kiln_scatter_reduce(x, 0, i2, x, "max", 1), KILN_ERR_ARG,
         "scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got max");
  EXPECT(kiln_scatter(x, 0, i2, NULL), KILN_ERR_ARG, "scatter: argument 4 is NULL");
  EXPECT(kiln_masked_select(x, i1), KILN_ERR_DTYPE,
         "masked_select: expected BoolTensor for mask, got int64 (input: float32 (2,3), index: int64 (2,))");
  EXPECT(kiln_masked_select(x, kiln_gts(i1, 0)), KILN_ERR_SHAPE,
         "masked_select: the mask cannot broadcast to the input (input: float32 (2,3), index: bool (2,))");
  EXPECT(kiln_nonzero(NULL), KILN_ERR_ARG, "nonzero: argument 1 is NULL");
  kiln_scope_end();
}
END_TEST

/* An error in an operand comes back unchanged, also through nonzero and
 * masked_select, which realize theirs. */
START_TEST(errors_are_sticky) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(2, 3), 1, TU_SMALL);
  int line = __LINE__; kiln_tensor *e = kiln_gather(x, 5, x);
  char want[512];
  snprintf(want, sizeof want, "%s:%d: gather: expected an int64 or int32 index, got float32 (input: float32 (2,3), "
           "index: float32 (2,3))", __FILE__, line);
  kiln_tensor *outs[] = {kiln_nonzero(e), kiln_masked_select(e, kiln_gts(x, 0)), kiln_take(x, e), kiln_scatter_add(e, 0, kiln_cast(x, KILN_I64), e)};
  for (int k = 0; k < 4; k++) {
    ck_assert_int_eq(kiln_status_of(outs[k]), KILN_ERR_DTYPE);
    ck_assert_str_eq(kiln_last_error(), want);
  }
  kiln_scope_end();
}
END_TEST

/* ---- indices out of range ------------------------------------------------------ */
/* Realizing t fails with KILN_ERR_VALUE and "FILE:line: " + text. */
static void expect_bad_index(kiln_tensor *t, int line, const char *text) {
  char want[512];
  snprintf(want, sizeof want, "%s:%d: %s", __FILE__, line, text);
  kiln_status st = kiln_realize(t);
  ck_assert_msg(st == KILN_ERR_VALUE, "line %d: status %d (%s)", line, st, st ? kiln_last_error() : "");
  ck_assert_str_eq(kiln_last_error(), want);
}

#define EXPECT_BAD(expr, text) expect_bad_index(expr, __LINE__, text)

/* The first bad index and its position in the index tensor, for each op and
 * both ends of the range, fused into a consumer and eager, on a table the
 * test made just big enough (ASan sees any read past it). */
static void bad_indices(void) {
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(3, 4), 1, TU_SMALL);
  kiln_tensor *hi = ivec(4, (int64_t[]){0, 2, 3, 5}), *lo = ivec(3, (int64_t[]){-1, -4, -5});
  kiln_tensor *h2 = kiln_reshape(hi, KILN_SHAPE(2, 2));
  EXPECT_BAD(kiln_adds(kiln_index_select(x, 0, hi), 1),
             "index_select: index out of range (IndexError) at element 8 of int64 (4,4), index 3");
  EXPECT_BAD(kiln_gather(x, 1, kiln_reshape(ivec(6, (int64_t[]){0, 1, 2, 3, 4, -5}), KILN_SHAPE(2, 3))),
             "gather: index out of range (IndexError) at element 4 of int64 (2,3), index 4");
  EXPECT_BAD(kiln_take(x, ivec(2, (int64_t[]){11, -13})), "take: index out of range (IndexError) at element 1 of int64 (2,), index -13");
  EXPECT_BAD(kiln_embedding(h2, x), "embedding: index out of range (IndexError) at element 8 of int64 (2,2,4), index 3");
  EXPECT_BAD(kiln_index_tensors(x, 2, ((kiln_tensor *[]){NULL, lo})),
             "index_tensors: index out of range (IndexError) at element 2 of int64 (3,3,1), index -5");
  EXPECT_BAD(kiln_scatter_add(x, 1, kiln_reshape(ivec(2, (int64_t[]){1, -9}), KILN_SHAPE(1, 2)), x),
             "scatter_add: index out of range (IndexError) at element 1 of int64 (1,2), index -9");
  EXPECT_BAD(kiln_scatters(x, 0, kiln_reshape(ivec(2, (int64_t[]){3, 0}), KILN_SHAPE(1, 2)), 1),
             "scatter: index out of range (IndexError) at element 0 of int64 (1,2), index 3");
  /* a good graph after a bad one: the failed realize left nothing behind */
  expect_values(kiln_take(x, ivec(1, (int64_t[]){-12})), 1, (double[]){kiln_item(kiln_select(kiln_select(x, 0, 0), 0, 0))});
}

START_TEST(out_of_range_fused) {
  kiln_scope_begin();
  bad_indices();
  kiln_scope_end();
}
END_TEST

START_TEST(out_of_range_eager) {
  kiln_scope_begin();
  kiln_set_eager(1);
  bad_indices();
  kiln_set_eager(0);
  kiln_scope_end();
}
END_TEST

static Suite *index_suite(void) {
  Suite *s = suite_create("index_ops");
  TCase *tc = tu_tcase(s, "oracle");
  tcase_add_loop_test(tc, each_case_f32_every_mode, 0, NCASES);
  tcase_add_loop_test(tc, each_case_every_dtype, 0, NCASES);
  tc = tu_tcase(s, "values");
  tcase_add_test(tc, gather_values);
  tcase_add_test(tc, scatter_order);
  tcase_add_test(tc, scatter_reduce_values);
  tcase_add_test(tc, nonzero_values);
  tc = tu_tcase(s, "kernels");
  tcase_add_test(tc, gathers_fuse_into_their_consumer);
  tcase_add_test(tc, eager_gather_is_one_kernel);
  tc = tu_tcase(s, "out_of_range");
  tcase_add_test(tc, out_of_range_fused);
  tcase_add_test(tc, out_of_range_eager);
  tc = tu_tcase(s, "errors");
  tcase_add_test(tc, argument_errors);
  tcase_add_test(tc, errors_are_sticky);
  return s;
}

KILN_TEST_MAIN(index_suite)
