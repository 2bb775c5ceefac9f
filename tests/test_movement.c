/* test_movement.c: the movement ops (reshape, view, permute, expand, squeeze,
 * slice, select, flip, pad, cat, stack, the string indexer): each against
 * the reference evaluator, fused and eager, on realized and computed inputs,
 * as the result and inlined into a consumer; kernel counts that show views
 * launch no copy kernel; and every error path with its message and file:line. */
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

/* ---- oracle cases --------------------------------------------------------- */
typedef kiln_tensor *(*move_fn)(kiln_tensor *x);
typedef struct { int ndim; int64_t d[KILN_MAX_DIMS]; } shape_t;
#define SHAPE(...) ((shape_t){KILN_NARGS_(__VA_ARGS__), {__VA_ARGS__}})

/* A second operand for cat and stack: same dtype as x, another seed. */
static kiln_tensor *other(kiln_tensor *x, int ndim, const int64_t *shape, uint64_t seed) {
  return tu_data(kiln_dtype_of(x), ndim, shape, seed, TU_FULL);
}

static kiln_tensor *f_reshape(kiln_tensor *x) { return kiln_reshape(x, KILN_SHAPE(4, 6)); }
static kiln_tensor *f_reshape_infer(kiln_tensor *x) { return kiln_reshape(x, KILN_SHAPE(3, -1)); }
static kiln_tensor *f_reshape_split(kiln_tensor *x) { return kiln_reshape(x, KILN_SHAPE(2, 2, 3, 2)); }
static kiln_tensor *f_view(kiln_tensor *x) { return kiln_view(x, KILN_SHAPE(6, 4)); }
static kiln_tensor *f_squeeze(kiln_tensor *x) { return kiln_squeeze(x); }
static kiln_tensor *f_squeeze_dim(kiln_tensor *x) { return kiln_squeeze_dim(x, 2); }
static kiln_tensor *f_unsqueeze(kiln_tensor *x) { return kiln_unsqueeze(x, 1); }
static kiln_tensor *f_unsqueeze_end(kiln_tensor *x) { return kiln_unsqueeze(x, -1); }
static kiln_tensor *f_flatten(kiln_tensor *x) { return kiln_flatten(x); }
static kiln_tensor *f_flatten_dims(kiln_tensor *x) { return kiln_flatten_dims(x, 1, 2); }
static kiln_tensor *f_permute(kiln_tensor *x) { return kiln_permute(x, KILN_DIMS(2, 0, 1)); }
static kiln_tensor *f_transpose(kiln_tensor *x) { return kiln_transpose(x, 0, -1); }
static kiln_tensor *f_T(kiln_tensor *x) { return kiln_T(x); }
static kiln_tensor *f_expand(kiln_tensor *x) { return kiln_expand(x, KILN_SHAPE(2, 3, 4)); }
static kiln_tensor *f_expand_keep(kiln_tensor *x) { return kiln_expand(x, KILN_SHAPE(2, -1, 5)); }
static kiln_tensor *f_slice(kiln_tensor *x) { return kiln_slice(x, 0, 1, 6, 2); }
static kiln_tensor *f_slice_neg(kiln_tensor *x) { return kiln_slice(x, 1, -4, -1, 1); }
static kiln_tensor *f_slice_clamp(kiln_tensor *x) { return kiln_slice(x, -1, -100, 100, 3); }
static kiln_tensor *f_slice_empty(kiln_tensor *x) { return kiln_slice(x, 0, 5, 2, 1); }
static kiln_tensor *f_slice_huge_step(kiln_tensor *x) { return kiln_slice(x, 1, 1, KILN_END, INT64_MAX); }
static kiln_tensor *f_select(kiln_tensor *x) { return kiln_select(x, 1, -1); }
static kiln_tensor *f_select0(kiln_tensor *x) { return kiln_select(x, 0, 2); }
static kiln_tensor *f_flip(kiln_tensor *x) { return kiln_flip(x, KILN_DIMS(0, 2)); }
static kiln_tensor *f_flip_last(kiln_tensor *x) { return kiln_flip(x, KILN_DIMS(-1)); }
static kiln_tensor *f_pad(kiln_tensor *x) { return kiln_pad(x, KILN_SHAPE(1, 2), 0.0); }
static kiln_tensor *f_pad2(kiln_tensor *x) { return kiln_pad(x, KILN_SHAPE(1, 2, 2, 1), 7.0); }
static kiln_tensor *f_pad_crop(kiln_tensor *x) { return kiln_pad(x, KILN_SHAPE(-1, 2), 1.0); }
static kiln_tensor *f_index(kiln_tensor *x) { return kiln_index(x, "0, :, 1:3"); }
static kiln_tensor *f_index2(kiln_tensor *x) { return kiln_index(x, "..., ::2"); }
static kiln_tensor *f_index3(kiln_tensor *x) { return kiln_index(x, "None, -1, None, 1:, -2"); }

static kiln_tensor *f_cat0(kiln_tensor *x) {
  kiln_tensor *y = other(x, KILN_SHAPE(4, 3), 7);
  return kiln_cat(2, ((kiln_tensor *[]){x, y}), 0);
}

static kiln_tensor *f_cat3(kiln_tensor *x) {
  kiln_tensor *y = other(x, KILN_SHAPE(2, 1), 7), *z = other(x, KILN_SHAPE(2, 4), 8);
  return kiln_cat(3, ((kiln_tensor *[]){y, x, z}), -1);
}

static kiln_tensor *f_cat_empty(kiln_tensor *x) {
  kiln_tensor *y = other(x, KILN_SHAPE(0, 3), 7), *e = other(x, KILN_SHAPE(0), 8);
  return kiln_cat(3, ((kiln_tensor *[]){y, x, e}), 0);
}

static kiln_tensor *f_stack(kiln_tensor *x) {
  kiln_tensor *y = other(x, KILN_SHAPE(2, 3), 7);
  return kiln_stack(3, ((kiln_tensor *[]){x, y, x}), 0);
}

static kiln_tensor *f_stack_last(kiln_tensor *x) {
  kiln_tensor *y = other(x, KILN_SHAPE(2, 3), 7);
  return kiln_stack(2, ((kiln_tensor *[]){x, y}), -1);
}

/* permute, then slice, then reshape: a stack of views over one input. */
static kiln_tensor *f_chain(kiln_tensor *x) {
  kiln_tensor *p = kiln_permute(x, KILN_DIMS(1, 2, 0));
  kiln_tensor *s = kiln_slice(p, 1, 0, KILN_END, 2);
  return kiln_reshape(kiln_flip(s, KILN_DIMS(0)), KILN_SHAPE(-1, 2));
}

static kiln_tensor *f_T_plus(kiln_tensor *x) { return kiln_adds(kiln_T(x), 1); }

typedef struct {
  const char *name;
  move_fn fn;
  shape_t in;
} move_case;

static const move_case cases[] = {
  {"reshape", f_reshape, SHAPE(2, 3, 4)},          {"reshape -1", f_reshape_infer, SHAPE(2, 3, 4)},
  {"reshape split", f_reshape_split, SHAPE(4, 6)}, {"view", f_view, SHAPE(2, 3, 4)},
  {"squeeze", f_squeeze, SHAPE(1, 3, 1, 4)},       {"squeeze dim", f_squeeze_dim, SHAPE(1, 3, 1, 4)},
  {"unsqueeze", f_unsqueeze, SHAPE(3, 4)},         {"unsqueeze -1", f_unsqueeze_end, SHAPE(3, 4)},
  {"flatten", f_flatten, SHAPE(2, 3, 4)},          {"flatten 1..2", f_flatten_dims, SHAPE(2, 3, 4, 2)},
  {"flatten 0-dim", f_flatten, SHAPE()},           {"permute", f_permute, SHAPE(2, 3, 4)},
  {"permute size-1", f_permute, SHAPE(1, 4, 1)},   {"transpose", f_transpose, SHAPE(2, 3, 4)},
  {"T", f_T, SHAPE(3, 5)},                         {"expand", f_expand, SHAPE(3, 1)},
  {"expand -1", f_expand_keep, SHAPE(1, 3, 1)},    {"expand size-1", f_expand, SHAPE(1, 1)},
  {"slice", f_slice, SHAPE(7, 5)},                 {"slice negative", f_slice_neg, SHAPE(3, 6)},
  {"slice clamped", f_slice_clamp, SHAPE(3, 10)},  {"slice empty", f_slice_empty, SHAPE(7, 2)},
  {"slice of empty", f_slice, SHAPE(7, 0)},        {"slice huge step", f_slice_huge_step, SHAPE(3, 4)},
  {"select", f_select, SHAPE(4, 5)},               {"select dim 0", f_select0, SHAPE(4, 5)},
  {"flip", f_flip, SHAPE(3, 4, 5)},                {"flip last", f_flip_last, SHAPE(2, 7)},
  {"pad", f_pad, SHAPE(3, 4)},                     {"pad 2 dims", f_pad2, SHAPE(3, 4)},
  {"pad crop", f_pad_crop, SHAPE(3, 4)},           {"pad empty", f_pad, SHAPE(0)},
  {"cat", f_cat0, SHAPE(2, 3)},                    {"cat 3 last dim", f_cat3, SHAPE(2, 3)},
  {"cat empties", f_cat_empty, SHAPE(2, 3)},       {"stack", f_stack, SHAPE(2, 3)},
  {"stack -1", f_stack_last, SHAPE(2, 3)},         {"index", f_index, SHAPE(2, 3, 4)},
  {"index ellipsis", f_index2, SHAPE(2, 3, 5)},    {"index None", f_index3, SHAPE(2, 3, 4)},
  {"chain", f_chain, SHAPE(4, 5, 3)},              {"T + 1", f_T_plus, SHAPE(4, 6)},
  {"reshape 0-size", f_reshape_infer, SHAPE(0, 3)},
};
enum { NCASES = sizeof cases / sizeof *cases };

/* How the case is run: its input realized or computed (so the view is
 * lowered into the kernel that computes it), and the view as the result or
 * feeding an elementwise op (so it is inlined into that op's kernel). */
typedef struct {
  const move_case *c;
  kiln_dtype dt;
  bool computed, consumed;
} run_ctx;

static kiln_tensor *build(const void *p) {
  const run_ctx *r = p;
  kiln_tensor *x = tu_data(r->dt, r->c->in.ndim, r->c->in.d, 1, TU_FULL);
  if (r->computed) x = kiln_maximum(x, x);
  kiln_tensor *y = r->c->fn(x);
  return r->consumed ? kiln_maximum(y, y) : y;
}

static void run(const move_case *c, kiln_dtype dt, bool computed, bool consumed) {
  run_ctx r = {c, dt, computed, consumed};
  char why[1200];
  bool ok = tu_check_fused_eager(build, &r, KILN_NUM_DTYPES, (ref_tol){0, 0}, why, sizeof why);
  ck_assert_msg(ok, "%s (%s, %s input, %s): %s", c->name, ir_dtypes[dt].name, computed ? "computed" : "realized",
                consumed ? "consumed" : "result", why);
}

START_TEST(each_op_f32_every_mode) {
  for (int m = 0; m < 4; m++) run(&cases[_i], KILN_F32, m & 1, m & 2);
}
END_TEST

/* Views move bytes, so every dtype must come through unchanged. */
START_TEST(each_op_every_dtype) {
  for (kiln_dtype dt = 0; dt < KILN_NUM_DTYPES; dt++) run(&cases[_i], dt, dt & 1, dt & 2);
}
END_TEST

static kiln_tensor *build_cat_promote(const void *p) {
  (void)p;
  kiln_tensor *a = tu_data(KILN_I32, KILN_SHAPE(2, 3), 1, TU_FULL);
  kiln_tensor *b = tu_data(KILN_F16, KILN_SHAPE(1, 3), 2, TU_SMALL);
  kiln_tensor *c = tu_data(KILN_BOOL, KILN_SHAPE(2, 3), 3, TU_FULL);
  return kiln_cat(3, ((kiln_tensor *[]){c, b, a}), 0);
}

START_TEST(cat_promotes) {
  char why[1200];
  ck_assert_msg(tu_check_fused_eager(build_cat_promote, NULL, KILN_F16, (ref_tol){0, 0}, why, sizeof why), "%s", why);
}
END_TEST

/* ---- kernels launched ------------------------------------------------------ */
static uint64_t kernels_for(kiln_tensor *t) {
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize(t), KILN_OK);
  return kiln_stats().kernels_launched;
}

START_TEST(views_launch_no_copy_kernel) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(64, 34), 1, TU_SMALL);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  ck_assert_uint_eq(kernels_for(kiln_adds(kiln_T(x), 1)), 1);
  ck_assert_uint_eq(kernels_for(kiln_add(kiln_slice(x, 1, 0, KILN_END, 2), kiln_slice(x, 1, 1, KILN_END, 2))), 1);
  ck_assert_uint_eq(kernels_for(kiln_adds(kiln_reshape(kiln_relu(x), KILN_SHAPE(-1)), 1)), 1);
  ck_assert_uint_eq(kernels_for(kiln_adds(kiln_index(kiln_exp(x), "1:, ::3"), 1)), 1);
  kiln_tensor *cat = kiln_cat(2, ((kiln_tensor *[]){kiln_relu(x), kiln_pad(x, KILN_SHAPE(0, 0, 1, 1), 0)}), 0);
  ck_assert_uint_eq(kernels_for(kiln_neg(cat)), 1);
  kiln_scope_end();
}
END_TEST

START_TEST(eager_views_launch_nothing) {
  kiln_scope_begin();
  kiln_set_eager(1);
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(8, 5), 1, TU_SMALL);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  kiln_reset_stats();
  kiln_tensor *v = kiln_flip(kiln_slice(kiln_T(x), 0, 1, 4, 1), KILN_DIMS(1));
  ck_assert_uint_eq(kiln_stats().kernels_launched, 0);
  kiln_tensor *y = kiln_adds(v, 1);
  ck_assert_uint_eq(kiln_stats().kernels_launched, 1);
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_uint_eq(kiln_stats().kernels_launched, 1);
  kiln_set_eager(0);
  kiln_scope_end();
}
END_TEST

/* ---- the fundamentals tour's indexing ------------------------------------- */
static const struct {
  const char *first, *then;   /* x[first][then] (then may be NULL) */
  shape_t shape;
  double want[9];
} tour[] = {
  {"0", NULL, SHAPE(3, 3), {1, 2, 3, 4, 5, 6, 7, 8, 9}},
  {"0", "0", SHAPE(3), {1, 2, 3}},
  {":, 0", NULL, SHAPE(1, 3), {1, 2, 3}},
  {":, :, 1", NULL, SHAPE(1, 3), {2, 5, 8}},
  {":, 1, 1", NULL, SHAPE(1), {5}},
  {"0, 0, :", NULL, SHAPE(3), {1, 2, 3}},
};

START_TEST(index_tour) {
  kiln_scope_begin();
  int64_t v[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  kiln_tensor *x = kiln_from_data(v, KILN_I64, KILN_SHAPE(1, 3, 3));
  kiln_tensor *y = kiln_index(x, tour[_i].first);
  if (tour[_i].then) y = kiln_index(y, tour[_i].then);
  ck_assert_int_eq(kiln_ndim(y), tour[_i].shape.ndim);
  ck_assert_mem_eq(kiln_shape(y), tour[_i].shape.d, sizeof(int64_t) * (size_t)tour[_i].shape.ndim);
  const int64_t *got = kiln_data(y);
  ck_assert_ptr_nonnull(got);
  for (int64_t k = 0; k < kiln_numel(y); k++) ck_assert_int_eq(got[k], (int64_t)tour[_i].want[k]);
  kiln_scope_end();
}
END_TEST

/* ---- view's stride rule ---------------------------------------------------- */
START_TEST(view_follows_strides) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(4, 6), 1, TU_SMALL);
  ck_assert_int_eq(kiln_status_of(kiln_view(kiln_slice(x, 0, 1, 3, 1), KILN_SHAPE(12))), KILN_OK);
  ck_assert_int_eq(kiln_status_of(kiln_view(kiln_slice(x, 1, 0, 6, 2), KILN_SHAPE(2, 2, 3))), KILN_OK);
  ck_assert_int_eq(kiln_status_of(kiln_view(kiln_slice(x, 1, 0, 6, 2), KILN_SHAPE(12))), KILN_OK);  /* stride 2 */
  ck_assert_int_eq(kiln_status_of(kiln_view(kiln_slice(x, 1, 0, 4, 1), KILN_SHAPE(16))), KILN_ERR_SHAPE);
  ck_assert_int_eq(kiln_status_of(kiln_view(kiln_T(x), KILN_SHAPE(3, 2, 4))), KILN_OK);
  ck_assert_int_eq(kiln_status_of(kiln_view(kiln_T(x), KILN_SHAPE(24))), KILN_ERR_SHAPE);
  ck_assert_int_eq(kiln_status_of(kiln_view(kiln_expand(kiln_reshape(x, KILN_SHAPE(24, 1)), KILN_SHAPE(24, 2)),
                                            KILN_SHAPE(48))), KILN_ERR_SHAPE);
  ck_assert_int_eq(kiln_status_of(kiln_view(kiln_flip(x, KILN_DIMS(0)), KILN_SHAPE(24))), KILN_OK);  /* flip copies */
  ck_assert_int_eq(kiln_status_of(kiln_view(kiln_reshape(kiln_T(x), KILN_SHAPE(24)), KILN_SHAPE(4, 6))), KILN_OK);
  kiln_scope_end();
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */
#define EXPECT TU_EXPECT_ERROR

START_TEST(shape_and_dim_errors) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(2, 3), 1, TU_SMALL);
  kiln_tensor *y = tu_data(KILN_F32, KILN_SHAPE(2, 4), 2, TU_SMALL);
  kiln_tensor *x3 = tu_data(KILN_F32, KILN_SHAPE(2, 3, 4), 3, TU_SMALL);
  kiln_tensor *s = kiln_scalar(1, KILN_F32);
  EXPECT(kiln_transpose(x, 0, 2), KILN_ERR_ARG,
         "transpose: Dimension out of range (expected to be in range of [-2, 1], but got 2) (input: float32 (2,3))");
  EXPECT(kiln_unsqueeze(x, 3), KILN_ERR_ARG,
         "unsqueeze: Dimension out of range (expected to be in range of [-3, 2], but got 3) (input: float32 (2,3))");
  EXPECT(kiln_permute(x, KILN_DIMS(0, -2)), KILN_ERR_ARG,
         "permute: duplicate dims are not allowed (dim 0) (input: float32 (2,3))");
  EXPECT(kiln_permute(x, KILN_DIMS(0)), KILN_ERR_ARG,
         "permute: number of dims don't match (the input has 2, 1 were given) (input: float32 (2,3))");
  EXPECT(kiln_T(x3), KILN_ERR_ARG,
         "T: expected a 2-D tensor; use permute or transpose for other ranks (input: float32 (2,3,4))");
  EXPECT(kiln_view(kiln_T(x), KILN_SHAPE(6)), KILN_ERR_SHAPE,
         "view: view size (6,) is not compatible with input tensor's size and stride (at least one "
         "dimension spans across two contiguous subspaces). Use reshape(...) instead. (input: float32 (3,2))");
  EXPECT(kiln_reshape(x, KILN_SHAPE(4, -1)), KILN_ERR_SHAPE,
         "reshape: shape (4,-1) is invalid for input of size 6 (input: float32 (2,3))");
  EXPECT(kiln_reshape(x, KILN_SHAPE(7)), KILN_ERR_SHAPE,
         "reshape: shape (7,) is invalid for input of size 6 (input: float32 (2,3))");
  EXPECT(kiln_reshape(x, KILN_SHAPE(-1, -1)), KILN_ERR_ARG,
         "reshape: only one dimension can be inferred (input: float32 (2,3))");
  EXPECT(kiln_view(x, KILN_SHAPE(-2, 3)), KILN_ERR_ARG,
         "view: invalid shape dimension -2 (input: float32 (2,3))");
  EXPECT(kiln_expand(x, KILN_SHAPE(2, 4)), KILN_ERR_SHAPE,
         "expand: the expanded size of the tensor (4) must match the existing size (3) at "
         "non-singleton dimension 1; target sizes (2,4) (input: float32 (2,3))");
  EXPECT(kiln_expand(x, KILN_SHAPE(3)), KILN_ERR_ARG,
         "expand: the number of sizes provided (1) must be greater or equal to the number of "
         "dimensions in the tensor (2) (input: float32 (2,3))");
  EXPECT(kiln_expand(x, KILN_SHAPE(-1, 2, 3)), KILN_ERR_ARG,
         "expand: the expanded size of the tensor (-1) isn't allowed in a leading, non-existing "
         "dimension 0 (input: float32 (2,3))");
  EXPECT(kiln_slice(x, 1, 0, 2, 0), KILN_ERR_ARG,
         "slice: step must be positive, got 0 (input: float32 (2,3))");
  EXPECT(kiln_slice(s, 0, 0, 1, 1), KILN_ERR_ARG,
         "slice: cannot be applied to a 0-dim tensor (input: float32 ())");
  EXPECT(kiln_select(x, 1, 3), KILN_ERR_ARG,
         "select: index 3 out of range for dimension 1 of size 3 (input: float32 (2,3))");
  EXPECT(kiln_select(x, 0, -3), KILN_ERR_ARG,
         "select: index -3 out of range for dimension 0 of size 2 (input: float32 (2,3))");
  EXPECT(kiln_select(s, 0, 0), KILN_ERR_ARG,
         "select: cannot be applied to a 0-dim tensor (input: float32 ())");
  EXPECT(kiln_flip(x, KILN_DIMS(0, -2)), KILN_ERR_ARG,
         "flip: dim 0 appears multiple times in the list of dims (input: float32 (2,3))");
  EXPECT(kiln_flatten_dims(x, 1, 0), KILN_ERR_ARG,
         "flatten: start_dim (1) cannot come after end_dim (0) (input: float32 (2,3))");
  EXPECT(kiln_pad(x, KILN_SHAPE(1, 1, 1), 0), KILN_ERR_ARG,
         "pad: padding length must be divisible by 2, got 3 (input: float32 (2,3))");
  EXPECT(kiln_pad(x, KILN_SHAPE(1, 1, 1, 1, 1, 1), 0), KILN_ERR_ARG,
         "pad: padding length too large (3 pairs for 2 dims) (input: float32 (2,3))");
  EXPECT(kiln_pad(x, KILN_SHAPE(-2, -2), 0), KILN_ERR_SHAPE,
         "pad: the input size 3, plus padding -2 and -2 resulted in an invalid output size at "
         "dimension 1 (input: float32 (2,3))");
  EXPECT(kiln_cat(2, ((kiln_tensor *[]){x, y}), 0), KILN_ERR_SHAPE,
         "cat: sizes of tensors must match except in dimension 0; expected (2,3) but got (2,4) "
         "for tensor number 1 in the list");
  EXPECT(kiln_cat(2, ((kiln_tensor *[]){s, s}), 0), KILN_ERR_ARG,
         "cat: zero-dimensional tensor (at position 0) cannot be concatenated (input: float32 ())");
  EXPECT(kiln_cat(0, NULL, 0), KILN_ERR_ARG,
         "cat: expected a non-empty list of tensors");
  EXPECT(kiln_cat(2, ((kiln_tensor *[]){x, NULL}), 0), KILN_ERR_ARG,
         "cat: argument 2 is NULL");
  EXPECT(kiln_stack(2, ((kiln_tensor *[]){x, y}), 0), KILN_ERR_SHAPE,
         "stack: expects each tensor to be equal size, but got (2,3) at entry 0 and (2,4) at entry 1");
  EXPECT(kiln_stack(2, ((kiln_tensor *[]){x, x}), 3), KILN_ERR_ARG,
         "stack: Dimension out of range (expected to be in range of [-3, 2], but got 3) (input: float32 (2,3))");
  EXPECT(kiln_T(NULL), KILN_ERR_ARG,
         "T: argument 1 is NULL");
  kiln_scope_end();
}
END_TEST

START_TEST(index_errors) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(2, 3), 1, TU_SMALL);
  EXPECT(kiln_index(x, "0, x"), KILN_ERR_ARG,
         "index \"0, x\": expected an integer, a slice, None or ... at position 3");
  EXPECT(kiln_index(x, "::0"), KILN_ERR_ARG,
         "index \"::0\": slice step must be greater than zero at position 2");
  EXPECT(kiln_index(x, "::-1"), KILN_ERR_ARG,
         "index \"::-1\": slice step must be greater than zero at position 2");
  EXPECT(kiln_index(x, "0 1"), KILN_ERR_ARG,
         "index \"0 1\": expected ',' between items at position 2");
  EXPECT(kiln_index(x, "1:a"), KILN_ERR_ARG,
         "index \"1:a\": expected an integer slice bound at position 2");
  EXPECT(kiln_index(x, "0,"), KILN_ERR_ARG,
         "index \"0,\": expected an integer, a slice, None or ... at position 2");
  EXPECT(kiln_index(x, "99999999999999999999"), KILN_ERR_ARG,
         "index \"99999999999999999999\": integer out of range at position 0");
  EXPECT(kiln_index(x, "0, 0, 0"), KILN_ERR_ARG,
         "index \"0, 0, 0\": too many indices for tensor of dimension 2 (3 given) (input: float32 (2,3))");
  EXPECT(kiln_index(x, "5"), KILN_ERR_ARG,
         "index \"5\": index 5 is out of bounds for dimension 0 with size 2 (input: float32 (2,3))");
  EXPECT(kiln_index(x, "..., -4"), KILN_ERR_ARG,
         "index \"..., -4\": index -4 is out of bounds for dimension 1 with size 3 (input: float32 (2,3))");
  EXPECT(kiln_index(x, "..., ..."), KILN_ERR_ARG,
         "index \"..., ...\": an index can only have a single ellipsis ('...') (input: float32 (2,3))");
  EXPECT(kiln_index(x, NULL), KILN_ERR_ARG,
         "index: the index string is NULL");
  kiln_scope_end();
}
END_TEST

/* An op on an error node returns that error (sticky), at the new call site. */
START_TEST(errors_are_sticky) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(2, 3), 1, TU_SMALL);
  int line = __LINE__; kiln_tensor *e = kiln_select(x, 0, 9);
  char want[512];
  snprintf(want, sizeof want, "%s:%d: select: index 9 out of range for dimension 0 of size 2 (input: float32 (2,3))",
           __FILE__, line);
  kiln_tensor *chain = kiln_index(kiln_flip(kiln_reshape(kiln_T(e), KILN_SHAPE(-1)), KILN_DIMS(0)), "1:");
  ck_assert_int_eq(kiln_status_of(chain), KILN_ERR_ARG);
  ck_assert_str_eq(kiln_last_error(), want);
  kiln_tensor *c = kiln_cat(2, ((kiln_tensor *[]){x, e}), 0);
  ck_assert_int_eq(kiln_status_of(c), KILN_ERR_ARG);
  ck_assert_str_eq(kiln_last_error(), want);
  kiln_scope_end();
}
END_TEST

static Suite *movement_suite(void) {
  Suite *s = suite_create("movement");
  TCase *tc = tcase_create("oracle");
  tcase_add_loop_test(tc, each_op_f32_every_mode, 0, NCASES);
  tcase_add_loop_test(tc, each_op_every_dtype, 0, NCASES);
  tcase_add_test(tc, cat_promotes);
  suite_add_tcase(s, tc);
  tc = tcase_create("kernels");
  tcase_add_test(tc, views_launch_no_copy_kernel);
  tcase_add_test(tc, eager_views_launch_nothing);
  suite_add_tcase(s, tc);
  tc = tcase_create("semantics");
  tcase_add_loop_test(tc, index_tour, 0, sizeof tour / sizeof *tour);
  tcase_add_test(tc, view_follows_strides);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_test(tc, shape_and_dim_errors);
  tcase_add_test(tc, index_errors);
  tcase_add_test(tc, errors_are_sticky);
  suite_add_tcase(s, tc);
  return s;
}

KILN_TEST_MAIN(movement_suite)
