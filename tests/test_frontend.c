/* test_frontend.c: the public API without running kernels: type promotion,
 * broadcasting, error messages and their stickiness, scopes and reference
 * counts, info queries, host copies of BUFFERs, and graph walks on long chains. */
#include "check_main.h"
#include "frontend/frontend.h"
#include "runtime/rt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef kiln_tensor *(*binary_fn)(const char *, int, kiln_tensor *, kiln_tensor *);
typedef kiln_tensor *(*scalar_fn)(const char *, int, kiln_tensor *, double);

/* A tensor of dtype dt: 0-dim when zero_dim, else shape (3,). No kernel runs. */
static kiln_tensor *make(kiln_dtype dt, int zero_dim) {
  return zero_dim ? kiln_scalar(1, dt) : kiln_zeros(KILN_SHAPE(3), dt);
}

/* ---- promotion ---------------------------------------------------------- */
static const struct {
  binary_fn op;
  kiln_dtype a; int a0;   /* a0: a is 0-dim */
  kiln_dtype b; int b0;
  kiln_dtype want, compute;
} tensor_rows[] = {
  {kiln_add_at, KILN_I32, 0, KILN_F16, 0, KILN_F16, KILN_F16},
  {kiln_add_at, KILN_U8, 0, KILN_I8, 0, KILN_I16, KILN_I16},
  {kiln_add_at, KILN_BOOL, 0, KILN_BOOL, 0, KILN_BOOL, KILN_BOOL},
  {kiln_add_at, KILN_F16, 0, KILN_BF16, 0, KILN_F32, KILN_F32},
  {kiln_add_at, KILN_I32, 0, KILN_F64, 1, KILN_F64, KILN_F64},
  {kiln_add_at, KILN_F32, 0, KILN_F64, 1, KILN_F32, KILN_F32},
  {kiln_add_at, KILN_I32, 0, KILN_I64, 1, KILN_I32, KILN_I32},
  {kiln_add_at, KILN_BOOL, 0, KILN_I32, 1, KILN_I32, KILN_I32},
  {kiln_add_at, KILN_U8, 0, KILN_I64, 1, KILN_U8, KILN_U8},
  {kiln_add_at, KILN_F64, 1, KILN_F16, 0, KILN_F16, KILN_F16},
  {kiln_add_at, KILN_I32, 1, KILN_F16, 1, KILN_F16, KILN_F16},
  {kiln_add_at, KILN_I8, 1, KILN_I64, 1, KILN_I64, KILN_I64},
  {kiln_mul_at, KILN_I64, 0, KILN_I16, 0, KILN_I64, KILN_I64},
  {kiln_lt_at, KILN_I32, 0, KILN_F32, 0, KILN_BOOL, KILN_F32},
  {kiln_eq_at, KILN_BOOL, 0, KILN_U8, 0, KILN_BOOL, KILN_U8},
  {kiln_div_at, KILN_I32, 0, KILN_I32, 0, KILN_F32, KILN_F32},
  {kiln_div_at, KILN_F64, 0, KILN_I32, 0, KILN_F64, KILN_F64},
  {kiln_div_at, KILN_BF16, 0, KILN_BOOL, 0, KILN_BF16, KILN_BF16},
  {kiln_pow_at, KILN_I64, 0, KILN_F32, 1, KILN_F32, KILN_F32},
  {kiln_logical_and_at, KILN_F32, 0, KILN_I32, 0, KILN_BOOL, KILN_F32},
  {kiln_maximum_at, KILN_U8, 0, KILN_BOOL, 0, KILN_U8, KILN_U8},
};

START_TEST(promote_tensors) {
  kiln_tensor *a = make(tensor_rows[_i].a, tensor_rows[_i].a0);
  kiln_tensor *b = make(tensor_rows[_i].b, tensor_rows[_i].b0);
  kiln_tensor *y = tensor_rows[_i].op(__FILE__, __LINE__, a, b);
  ck_assert_int_eq(kiln_status_of(y), KILN_OK);
  ck_assert_str_eq(kiln_dtype_name(kiln_dtype_of(y)), kiln_dtype_name(tensor_rows[_i].want));
  ck_assert_str_eq(kiln_dtype_name(y->attr.compute), kiln_dtype_name(tensor_rows[_i].compute));
  ck_assert_int_eq(kiln_ndim(y), tensor_rows[_i].a0 && tensor_rows[_i].b0 ? 0 : 1);
  kiln_release(a);
  kiln_release(b);
  kiln_release(y);
}
END_TEST

static const struct {
  scalar_fn op;
  kiln_dtype a;
  double s;
  kiln_dtype want, compute;
} scalar_rows[] = {
  {kiln_adds_at, KILN_I64, 2.5, KILN_F32, KILN_F32},
  {kiln_adds_at, KILN_F16, 2.5, KILN_F16, KILN_F16},
  {kiln_adds_at, KILN_I32, 10, KILN_I32, KILN_I32},
  {kiln_adds_at, KILN_BOOL, 1, KILN_I64, KILN_I64},
  {kiln_adds_at, KILN_BOOL, 1.5, KILN_F32, KILN_F32},
  {kiln_adds_at, KILN_U8, 200, KILN_U8, KILN_U8},   /* 300 is out of bounds: test_robust.c */
  {kiln_adds_at, KILN_I32, INFINITY, KILN_F32, KILN_F32},
  {kiln_adds_at, KILN_I32, NAN, KILN_F32, KILN_F32},
  {kiln_adds_at, KILN_I16, 1e20, KILN_F32, KILN_F32},
  {kiln_adds_at, KILN_F64, 1, KILN_F64, KILN_F64},
  {kiln_muls_at, KILN_BF16, 3, KILN_BF16, KILN_BF16},
  {kiln_lts_at, KILN_I32, 2.5, KILN_BOOL, KILN_F32},
  {kiln_lts_at, KILN_I32, 2, KILN_BOOL, KILN_I32},
  {kiln_divs_at, KILN_I32, 2, KILN_F32, KILN_F32},
  {kiln_divs_at, KILN_F16, 2, KILN_F16, KILN_F16},
  {kiln_pows_at, KILN_BOOL, 2, KILN_I64, KILN_I64},
  {kiln_subs_at, KILN_U8, 1, KILN_U8, KILN_U8},
  {kiln_logical_ors_at, KILN_I8, 0.5, KILN_BOOL, KILN_F32},
};

START_TEST(promote_scalars) {
  kiln_tensor *a = make(scalar_rows[_i].a, 0);
  kiln_tensor *y = scalar_rows[_i].op(__FILE__, __LINE__, a, scalar_rows[_i].s);
  ck_assert_int_eq(kiln_status_of(y), KILN_OK);
  ck_assert_str_eq(kiln_dtype_name(kiln_dtype_of(y)), kiln_dtype_name(scalar_rows[_i].want));
  ck_assert_str_eq(kiln_dtype_name(y->attr.compute), kiln_dtype_name(scalar_rows[_i].compute));
  /* the wrapped number: a 0-dim CONST of the compute dtype, broadcast */
  ir_node *w = y->src[1];
  ck_assert_int_eq(w->op, IR_EXPAND);
  ck_assert_int_eq(w->src[0]->op, IR_CONST);
  ck_assert_int_eq(w->src[0]->ndim, 0);
  ck_assert_int_eq(w->src[0]->dtype, scalar_rows[_i].compute);
  kiln_release(a);
  kiln_release(y);
}
END_TEST

START_TEST(promote_unary_and_others) {
  kiln_scope_begin();
  kiln_tensor *i = make(KILN_I32, 0), *h = make(KILN_F16, 0), *b = make(KILN_BOOL, 0);
  ck_assert_int_eq(kiln_dtype_of(kiln_exp(i)), KILN_F32);
  ck_assert_int_eq(kiln_dtype_of(kiln_exp(h)), KILN_F16);
  ck_assert_int_eq(kiln_dtype_of(kiln_sigmoid(b)), KILN_F32);
  ck_assert_int_eq(kiln_dtype_of(kiln_relu(i)), KILN_I32);
  ck_assert_int_eq(kiln_dtype_of(kiln_logical_not(h)), KILN_BOOL);
  ck_assert_int_eq(kiln_dtype_of(kiln_where(b, i, h)), KILN_F16);
  ck_assert_int_eq(kiln_dtype_of(kiln_where(b, i, b)), KILN_I32);
  ck_assert_int_eq(kiln_dtype_of(kiln_clamp(i, 0, 10)), KILN_I32);
  ck_assert_int_eq(kiln_dtype_of(kiln_clamp(i, 0.5, 10)), KILN_F32);
  ck_assert_int_eq(kiln_dtype_of(kiln_clamp(b, 0, 1)), KILN_I64);
  kiln_tensor *c = kiln_cast(i, KILN_F64);
  ck_assert_int_eq(c->op, IR_CAST);
  ck_assert_int_eq(c->attr.to, KILN_F64);
  ck_assert_ptr_eq(kiln_cast(i, KILN_I32), i);   /* same dtype: the same value */
  ck_assert_int_eq(kiln_dtype_of(kiln_arange(0, 10, 1)), KILN_I64);
  ck_assert_int_eq(kiln_dtype_of(kiln_arange(0, 1, 0.25)), KILN_F32);
  ck_assert_int_eq(kiln_numel(kiln_arange(0, 1, 0.25)), 4);
  ck_assert_int_eq(kiln_numel(kiln_arange(10, 0, -3)), 4);
  ck_assert_int_eq(kiln_numel(kiln_linspace(0, 1, 5)), 5);
  ck_assert_double_eq(kiln_linspace(0, 1, 5)->attr.step, 0.25);
  ck_assert_int_eq(kiln_size(kiln_eye(3, -1, KILN_F32), 1), 3);
  ck_assert_int_eq(kiln_size(kiln_eye(3, 5, KILN_F32), 1), 5);
  ck_assert_int_eq(kiln_dtype_of(kiln_randint(0, 5, KILN_SHAPE(4), KILN_I32)), KILN_I32);
  ck_assert_double_eq(kiln_full(KILN_SHAPE(2), 2.7, KILN_I32)->attr.value, 2);
  ck_assert_double_eq(kiln_scalar(-0.5, KILN_BOOL)->attr.value, 1);
  kiln_scope_end();
}
END_TEST

/* Two random tensors take disjoint counters of the stream. */
START_TEST(random_counters) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_rand(KILN_SHAPE(2, 3), KILN_F32), *b = kiln_randn(KILN_SHAPE(5), KILN_F64);
  ck_assert_int_eq(a->op, IR_RAND);
  ck_assert_int_eq(b->op, IR_RANDN);
  ck_assert(b->attr.offset >= a->attr.offset + 6 || b->attr.seed != a->attr.seed);
  kiln_tensor *c = kiln_rand_like(b);
  ck_assert_int_eq(kiln_dtype_of(c), KILN_F64);
  ck_assert_int_eq(kiln_numel(c), 5);
  kiln_scope_end();
}
END_TEST

/* ---- broadcasting ------------------------------------------------------- */
static const struct {
  int na; int64_t a[3];
  int nb; int64_t b[3];
  int nr; int64_t r[3];   /* nr < 0: cannot broadcast */
} bc_rows[] = {
  {2, {2, 3}, 1, {3}, 2, {2, 3}},
  {2, {2, 1}, 2, {1, 3}, 2, {2, 3}},
  {3, {4, 1, 5}, 2, {3, 1}, 3, {4, 3, 5}},
  {0, {0}, 2, {2, 2}, 2, {2, 2}},
  {2, {0, 3}, 2, {1, 3}, 2, {0, 3}},
  {1, {0}, 1, {1}, 1, {0}},
  {1, {5}, 1, {5}, 1, {5}},
  {2, {2, 3}, 1, {4}, -1, {0}},
  {2, {2, 0}, 2, {2, 3}, -1, {0}},
};

START_TEST(broadcast_shapes) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_zeros(bc_rows[_i].na, bc_rows[_i].a, KILN_F32);
  kiln_tensor *b = kiln_ones(bc_rows[_i].nb, bc_rows[_i].b, KILN_F32);
  kiln_tensor *y = kiln_add(a, b);
  if (bc_rows[_i].nr < 0) {
    ck_assert_int_eq(kiln_status_of(y), KILN_ERR_SHAPE);
  } else {
    ck_assert_int_eq(kiln_status_of(y), KILN_OK);
    ck_assert_int_eq(kiln_ndim(y), bc_rows[_i].nr);
    for (int d = 0; d < bc_rows[_i].nr; d++) ck_assert_int_eq(kiln_shape(y)[d], bc_rows[_i].r[d]);
    for (int s = 0; s < 2; s++) {   /* operands of another shape are EXPANDed */
      ir_node *in = s ? b : a, *src = y->src[s];
      bool same = in->ndim == y->ndim && !memcmp(in->shape, y->shape, (size_t)y->ndim * sizeof(int64_t));
      ck_assert_ptr_eq(same ? in : src->src[0], in);
      if (!same) ck_assert_int_eq(src->op, IR_EXPAND);
    }
  }
  kiln_scope_end();
}
END_TEST

/* ---- errors ------------------------------------------------------------- */
/* t is an error node with status st whose message is "FILE:line: " + text. */
static void expect_error(kiln_tensor *t, kiln_status st, int line, const char *text) {
  char want[1024];
  snprintf(want, sizeof want, "%s:%d: %s", __FILE__, line, text);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(kiln_status_of(t), st);
  ck_assert_str_eq(kiln_last_error(), want);
  ck_assert_int_eq(kiln_realize(t), st);   /* surfaces at realize too, without a kernel */
  ck_assert_str_eq(kiln_last_error(), want);
}

START_TEST(error_messages) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_zeros(KILN_SHAPE(2, 3), KILN_F32), *v = kiln_zeros(KILN_SHAPE(4), KILN_F32);
  kiln_tensor *b = kiln_ones(KILN_SHAPE(3), KILN_BOOL), *f = kiln_ones(KILN_SHAPE(3), KILN_F32);
  kiln_tensor *i = kiln_ones(KILN_SHAPE(3), KILN_I32), *e;
  int l;
  l = __LINE__; e = kiln_add(a, v);
  expect_error(e, KILN_ERR_SHAPE, l, "add: shapes (2,3) and (4,) cannot be broadcast (dim 1: 3 vs 4)");
  l = __LINE__; e = kiln_where(b, a, v);
  expect_error(e, KILN_ERR_SHAPE, l, "where: shapes (3,), (2,3) and (4,) cannot be broadcast (dim 1: 3 vs 4)");
  l = __LINE__; e = kiln_add(a, NULL);
  expect_error(e, KILN_ERR_ARG, l, "add: argument 2 is NULL");
  l = __LINE__; e = kiln_relu(NULL);
  expect_error(e, KILN_ERR_ARG, l, "relu: argument 1 is NULL");
  l = __LINE__; e = kiln_zeros(KILN_SHAPE(2, -3), KILN_F32);
  expect_error(e, KILN_ERR_ARG, l, "zeros: negative size -3 in shape (2,-3)");
  l = __LINE__; e = kiln_zeros(KILN_SHAPE(INT64_C(4611686018427387904), 4), KILN_F32);
  expect_error(e, KILN_ERR_SHAPE, l, "zeros: shape (4611686018427387904,4) has more elements than int64 can count");
  l = __LINE__; e = kiln_zeros(KILN_SHAPE(2), (kiln_dtype)42);
  expect_error(e, KILN_ERR_ARG, l, "zeros: invalid dtype 42");
  l = __LINE__; e = kiln_ones(KILN_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1), KILN_F32);
  expect_error(e, KILN_ERR_ARG, l, "ones: 9 dims is outside 0..KILN_MAX_DIMS (8)");
  l = __LINE__; e = kiln_sub(b, b);
  expect_error(e, KILN_ERR_DTYPE, l,
               "sub: subtraction of two bool tensors is not supported (bool (3,) and bool (3,)); use logical_xor or logical_not");
  l = __LINE__; e = kiln_sub(f, b);
  expect_error(e, KILN_ERR_DTYPE, l,
               "sub: subtraction with a bool tensor is not supported (float32 (3,) and bool (3,)); to invert a mask use logical_not");
  l = __LINE__; e = kiln_neg(b);
  expect_error(e, KILN_ERR_DTYPE, l,
               "neg: negation of a bool tensor is not supported (bool (3,)); to invert a mask use logical_not");
  l = __LINE__; e = kiln_abs(b);
  expect_error(e, KILN_ERR_DTYPE, l, "abs: not supported for bool tensors (bool (3,))");
  l = __LINE__; e = kiln_where(f, f, f);
  expect_error(e, KILN_ERR_DTYPE, l, "where: condition must be bool, got float32 (3,)");
  l = __LINE__; e = kiln_rand(KILN_SHAPE(3), KILN_I32);
  expect_error(e, KILN_ERR_DTYPE, l, "rand: dtype int32 is not a floating point type (use float16, bfloat16, float32 or float64)");
  l = __LINE__; e = kiln_rand_like(i);
  expect_error(e, KILN_ERR_DTYPE, l, "rand_like: dtype int32 is not a floating point type (use float16, bfloat16, float32 or float64)");
  l = __LINE__; e = kiln_randint(5, 5, KILN_SHAPE(3), KILN_I64);
  expect_error(e, KILN_ERR_ARG, l, "randint: low must be less than high, got low=5 >= high=5");
  l = __LINE__; e = kiln_arange(0, 10, 0);
  expect_error(e, KILN_ERR_ARG, l, "arange: step must be nonzero, got 0");
  l = __LINE__; e = kiln_arange(0, 10, -1);
  expect_error(e, KILN_ERR_ARG, l, "arange: upper bound 10 and lower bound 0 inconsistent with step sign (-1)");
  l = __LINE__; e = kiln_linspace(0, 1, -2);
  expect_error(e, KILN_ERR_ARG, l, "linspace: number of steps must be non-negative, got -2");
  l = __LINE__; e = kiln_eye(-2, 3, KILN_F32);
  expect_error(e, KILN_ERR_ARG, l, "eye: n must be non-negative, got -2");
  l = __LINE__; e = kiln_cast(a, (kiln_dtype)-1);
  expect_error(e, KILN_ERR_ARG, l, "cast: invalid dtype -1");
  l = __LINE__; e = kiln_from_data(NULL, KILN_F32, KILN_SHAPE(2));
  expect_error(e, KILN_ERR_ARG, l, "from_data: data is NULL");
  kiln_scope_end();
}
END_TEST

START_TEST(device_errors) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_zeros(KILN_SHAPE(3), KILN_F32), *g = kiln_zeros(KILN_SHAPE(3), KILN_F32);
  g->device = (kiln_device){KILN_CUDA, 0};   /* as if it lived on a GPU */
  int l = __LINE__; kiln_tensor *e = kiln_mul(a, g);
  expect_error(e, KILN_ERR_DEVICE, l, "mul: expected all tensors on one device, found cpu and cuda:0");
  ck_assert_int_eq(kiln_device_of(kiln_zeros_like(g)).type, KILN_CUDA);
  ck_assert_int_eq(kiln_device_of(kiln_adds(g, 1)).type, KILN_CUDA);
  float x[2] = {1, 2};
  kiln_tensor *h = kiln_from_data(x, KILN_F32, KILN_SHAPE(2));
  h->device = (kiln_device){KILN_CUDA, 0};
  l = __LINE__; const void *p = kiln_data(h);
  ck_assert_ptr_null(p);
  char want[256];
  snprintf(want, sizeof want, "%s:%d: data: tensor is on cuda:0; copy it to the CPU with kiln_cpu first", __FILE__, l);
  ck_assert_str_eq(kiln_last_error(), want);
  h->device = (kiln_device){KILN_CPU, 0};
  kiln_scope_end();
}
END_TEST

/* An op on an error node returns a new error node with the first message. */
START_TEST(errors_are_sticky) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_zeros(KILN_SHAPE(3), KILN_F32);
  int l = __LINE__; kiln_tensor *e = kiln_add(a, NULL);
  kiln_tensor *y = kiln_relu(kiln_mul(kiln_adds(e, 1), a));
  ck_assert_ptr_ne(y, e);
  expect_error(y, KILN_ERR_ARG, l, "add: argument 2 is NULL");
  expect_error(kiln_where(kiln_gt(a, a), a, y), KILN_ERR_ARG, l, "add: argument 2 is NULL");
  expect_error(kiln_cast(y, KILN_I32), KILN_ERR_ARG, l, "add: argument 2 is NULL");
  expect_error(kiln_zeros_like(y), KILN_ERR_ARG, l, "add: argument 2 is NULL");
  ck_assert_int_eq(kiln_realize_n(2, ((kiln_tensor *[]){a, y})), KILN_ERR_ARG);
  ck_assert_int_eq(kiln_realize(NULL), KILN_ERR_ARG);
  ck_assert_int_eq(kiln_status_of(NULL), KILN_ERR_ARG);
  ck_assert(isnan(kiln_item(y)));
  ck_assert_ptr_null(kiln_data(y));
  ck_assert_ptr_null(kiln_to_string(y));
  ck_assert_int_eq(kiln_print(y), KILN_ERR_ARG);
  kiln_scope_end();
}
END_TEST

START_TEST(item_errors) {
  kiln_scope_begin();
  int l = __LINE__; double v = kiln_item(kiln_zeros(KILN_SHAPE(2, 3), KILN_F32));
  ck_assert(isnan(v));
  char want[256];
  snprintf(want, sizeof want, "%s:%d: item: a tensor with 6 elements cannot be converted to a scalar", __FILE__, l);
  ck_assert_str_eq(kiln_last_error(), want);
  kiln_scope_end();
}
END_TEST

/* ---- host data from BUFFERs (no kernel needed) -------------------------- */
START_TEST(buffers_and_copies) {
  kiln_scope_begin();
  float x[6] = {1, 2, 3, 4, 5, 6}, out[6];
  kiln_tensor *t = kiln_from_data(x, KILN_F32, KILN_SHAPE(2, 3));
  x[0] = 100;   /* from_data copied */
  ck_assert_int_eq(kiln_copy_to_host(t, out, sizeof out), KILN_OK);
  ck_assert_float_eq(out[0], 1);
  ck_assert_int_eq(kiln_copy_to_host(t, out, sizeof out - 1), KILN_ERR_ARG);
  kiln_tensor *u = kiln_from_buffer(x, KILN_F32, KILN_SHAPE(2, 3));
  x[1] = 42;    /* from_buffer borrows */
  ck_assert_double_eq(((const float *)kiln_data(u))[1], 42);
  /* a transposed view of t: shape (3,2), strides (1,3) */
  t->shape[0] = 3, t->shape[1] = 2, t->strides[0] = 1, t->strides[1] = 3;
  ck_assert(!ir_node_is_contiguous(t));
  ck_assert_int_eq(kiln_copy_to_host(t, out, sizeof out), KILN_OK);
  const float want[6] = {1, 4, 2, 5, 3, 6};
  for (int i = 0; i < 6; i++) ck_assert_float_eq(out[i], want[i]);
  const float *d = kiln_data(t);   /* compacts the view */
  ck_assert(ir_node_is_contiguous(t));
  for (int i = 0; i < 6; i++) ck_assert_float_eq(d[i], want[i]);
  uint16_t h = 0x3e00, bf = 0xc040;   /* 1.5 in f16, -3 in bf16 */
  ck_assert_double_eq(kiln_item(kiln_from_data(&h, KILN_F16, 0, NULL)), 1.5);
  ck_assert_double_eq(kiln_item(kiln_from_data(&bf, KILN_BF16, KILN_SHAPE(1, 1))), -3);
  int64_t big = INT64_C(1) << 40;
  ck_assert_double_eq(kiln_item(kiln_from_data(&big, KILN_I64, KILN_SHAPE(1))), 0x1p40);
  ck_assert_int_eq(kiln_numel(kiln_from_data(NULL, KILN_F32, KILN_SHAPE(0, 4))), 0);
  kiln_scope_end();
}
END_TEST

/* ---- scopes and reference counts ---------------------------------------- */
START_TEST(scopes_release_and_keep) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_zeros(KILN_SHAPE(3), KILN_F32), *b = kiln_ones(KILN_SHAPE(3), KILN_F32);
  kiln_tensor *y = kiln_keep(kiln_add(a, b));
  kiln_tensor *z = kiln_mul(a, b);
  kiln_release(z);                      /* released early: scope_end must not release it again */
  ck_assert_ptr_eq(kiln_cast(a, KILN_F32), a);   /* a second registered reference */
  ck_assert_int_eq(a->refs, 3);        /* scope twice + y */
  kiln_scope_end();
  ck_assert_int_eq(y->refs, 1);
  ck_assert_int_eq(y->src[0]->refs, 1);   /* y keeps its sources alive */
  kiln_release(y);
  kiln_release(NULL);
}
END_TEST

START_TEST(nested_scopes) {
  kiln_scope_begin();
  kiln_tensor *outer = kiln_zeros(KILN_SHAPE(2), KILN_F32);
  kiln_scope_begin();
  kiln_tensor *x = kiln_keep(kiln_neg(outer));   /* moves to the outer scope */
  kiln_tensor *own = kiln_retain(kiln_relu(outer));   /* retain: the caller's own reference */
  kiln_scope_end();
  ck_assert_int_eq(x->refs, 1);
  ck_assert_int_eq(own->refs, 1);
  kiln_retain(x);
  kiln_scope_end();
  ck_assert_int_eq(x->refs, 1);         /* the outer scope released its reference */
  kiln_release(x);
  kiln_release(own);
  kiln_scope_end();                     /* no scope open: nothing happens */
}
END_TEST

/* kiln_shutdown releases what open scopes still hold (LeakSanitizer checks). */
START_TEST(shutdown_with_open_scope) {
  kiln_scope_begin();
  kiln_scope_begin();
  kiln_tensor *a = kiln_zeros(KILN_SHAPE(2), KILN_F32);
  kiln_add(a, a);
  kiln_shutdown();
}
END_TEST

/* ---- info --------------------------------------------------------------- */
START_TEST(info_functions) {
  kiln_tensor *t = kiln_zeros(KILN_SHAPE(2, 3, 4), KILN_I16);
  ck_assert_int_eq(kiln_ndim(t), 3);
  ck_assert_int_eq(kiln_shape(t)[2], 4);
  ck_assert_int_eq(kiln_size(t, -1), 4);
  ck_assert_int_eq(kiln_size(t, -3), 2);
  ck_assert_int_eq(kiln_size(t, 1), 3);
  ck_assert_int_eq(kiln_size(t, 3), -1);
  ck_assert_str_eq(kiln_last_error(), "size: dim 3 is out of range for a tensor of 3 dims (expected [-3, 2])");
  ck_assert_int_eq(kiln_size(t, -4), -1);
  ck_assert_int_eq(kiln_numel(t), 24);
  ck_assert_int_eq(kiln_dtype_of(t), KILN_I16);
  ck_assert_int_eq(kiln_device_of(t).type, KILN_CPU);
  ck_assert_int_eq(t->op, IR_CONST);    /* nothing was realized */
  kiln_release(t);
  ck_assert_int_eq(kiln_ndim(NULL), 0);
  ck_assert_str_eq(kiln_last_error(), "ndim: argument is NULL");
  ck_assert_ptr_null(kiln_shape(NULL));
  ck_assert_int_eq(kiln_numel(NULL), 0);
  ck_assert_int_eq(kiln_size(NULL, 0), -1);
  ck_assert_int_eq(kiln_dtype_of(NULL), KILN_F32);
  ck_assert_int_eq(kiln_device_of(NULL).type, KILN_CPU);
  ck_assert_str_eq(kiln_dtype_name(KILN_BF16), "bfloat16");
  ck_assert_str_eq(kiln_dtype_name((kiln_dtype)99), "invalid");
  ck_assert_uint_eq(kiln_dtype_size(KILN_F64), 8);
  ck_assert_uint_eq(kiln_dtype_size((kiln_dtype)99), 0);
  int eager = kiln_get_eager();
  kiln_set_eager(!eager);
  ck_assert_int_eq(kiln_get_eager(), !eager);
  kiln_set_eager(eager);
}
END_TEST

/* ---- graph: node basics, walks and long chains --------------------------- */
START_TEST(graph_numel_and_strides) {
  ck_assert_int_eq(ir_numel(0, NULL), 1);
  ck_assert_int_eq(ir_numel(2, (int64_t[]){3, 4}), 12);
  ck_assert_int_eq(ir_numel(2, (int64_t[]){INT64_C(1) << 62, 4}), -1);
  ck_assert_int_eq(ir_numel(3, (int64_t[]){INT64_C(1) << 62, 4, 0}), 0);
  int64_t s[3];
  ir_contiguous_strides(3, (int64_t[]){2, 3, 4}, s);
  ck_assert(s[0] == 12 && s[1] == 4 && s[2] == 1);
}
END_TEST

START_TEST(graph_collect_and_print) {
  int64_t shape[2] = {4, 4};
  ir_node *a = ir_node_new(IR_CONST, KILN_F32, 2, shape, 0, NULL, "main.c", 3);
  ir_node *b = ir_node_new(IR_NEG, KILN_F32, 2, shape, 1, &a, "main.c", 4);
  ir_node *c = ir_node_new(IR_ADD, KILN_F32, 2, shape, 2, (ir_node *[]){a, b}, "main.c", 5);
  ck_assert_int_eq(c->pending, 4);   /* an upper bound: a counted twice */
  ir_node **topo;
  int n = ir_graph_collect(3, (ir_node *[]){c, b, c}, &topo);
  ck_assert_int_eq(n, 3);
  ck_assert(topo[0] == a && topo[1] == b && topo[2] == c);
  ir_str s = {0};
  ir_graph_print(&s, n, topo);
  ck_assert_str_eq(s.s, "%0 = const 0  f32(4,4)  main.c:3\n"
                        "%1 = neg %0  f32(4,4)  main.c:4\n"
                        "%2 = add %0, %1  f32(4,4)  main.c:5\n");
  ir_str_free(&s);
  free(topo);
  ck_assert_ptr_null(ir_graph_find_error(1, &c));
  ir_node *e = ir_node_error(KILN_ERR_SHAPE, "x.c", 9, "bad %d", 7);
  ck_assert_str_eq(e->msg, "x.c:9: bad 7");
  ck_assert_ptr_eq(ir_graph_find_error(2, (ir_node *[]){c, e}), e);
  ir_node_release(e);
  ir_node_release(a);
  ir_node_release(b);
  ir_node_release(c);
}
END_TEST

/* A million-node chain is walked and freed without recursion. */
START_TEST(graph_long_chain) {
  enum { N = 1000000 };
  int64_t shape[1] = {2};
  ir_node *n = ir_node_new(IR_CONST, KILN_F32, 1, shape, 0, NULL, __FILE__, __LINE__);
  for (int i = 0; i < N; i++) {
    ir_node *m = ir_node_new(IR_NEG, KILN_F32, 1, shape, 1, &n, __FILE__, __LINE__);
    ir_node_release(n);
    n = m;
  }
  ck_assert_int_eq(n->pending, N + 1);
  ir_node **topo;
  ck_assert_int_eq(ir_graph_collect(1, &n, &topo), N + 1);
  ck_assert_int_eq(topo[0]->op, IR_CONST);
  ck_assert_ptr_eq(topo[N], n);
  free(topo);
  ir_node_release(n);
}
END_TEST

/* The same through the public API: pending stays below the realize limit. */
START_TEST(public_long_chain) {
  rt_opts()->max_pending = INT64_MAX;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_SHAPE(2), KILN_F32);
  for (int i = 0; i < 300000; i++) {
    kiln_tensor *y = kiln_neg(x);
    kiln_release(x);
    x = y;
  }
  ck_assert_int_eq(kiln_stats().auto_realizes, 0);
  kiln_scope_end();
}
END_TEST

static Suite *frontend_suite(void) {
  Suite *s = suite_create("frontend");
  TCase *t = tcase_create("types");
  tcase_add_loop_test(t, promote_tensors, 0, sizeof tensor_rows / sizeof tensor_rows[0]);
  tcase_add_loop_test(t, promote_scalars, 0, sizeof scalar_rows / sizeof scalar_rows[0]);
  tcase_add_test(t, promote_unary_and_others);
  tcase_add_test(t, random_counters);
  tcase_add_loop_test(t, broadcast_shapes, 0, sizeof bc_rows / sizeof bc_rows[0]);
  suite_add_tcase(s, t);
  t = tcase_create("errors");
  tcase_add_test(t, error_messages);
  tcase_add_test(t, device_errors);
  tcase_add_test(t, errors_are_sticky);
  tcase_add_test(t, item_errors);
  suite_add_tcase(s, t);
  t = tcase_create("lifetimes");
  tcase_add_test(t, buffers_and_copies);
  tcase_add_test(t, scopes_release_and_keep);
  tcase_add_test(t, nested_scopes);
  tcase_add_test(t, shutdown_with_open_scope);
  tcase_add_test(t, info_functions);
  suite_add_tcase(s, t);
  t = tcase_create("graph");
  tcase_add_test(t, graph_numel_and_strides);
  tcase_add_test(t, graph_collect_and_print);
  tcase_add_test(t, graph_long_chain);
  tcase_add_test(t, public_long_chain);
  suite_add_tcase(s, t);
  return s;
}

KILN_TEST_MAIN(frontend_suite)
