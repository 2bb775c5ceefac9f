/* test_robust.c: kiln attacked the way SQLite's and PyTorch's suites attack
 * their libraries (issue 12's reproductions): graphs deeper than any C stack,
 * sizes that overflow int64, wrong answers that must become errors or
 * PyTorch's answer, messages that name what the user called, handles used
 * after they were freed. */
#include "check_main.h"
#include "util/testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* t is an error of status st whose message holds what, then the caller's
 * "test_robust.c:line". */
#define expect_error(t, st, what, line) expect_error_at(__LINE__, t, st, what, line)
static void expect_error_at(int at, kiln_tensor *t, kiln_status st, const char *what, int line) {
  ck_assert_msg(kiln_status_of(t) == st, "line %d: status %d, want %d (%s)", at, kiln_status_of(t), st,
                kiln_last_error());
  char where[64];
  snprintf(where, sizeof where, "test_robust.c:%d: ", line);
  const char *msg = kiln_last_error();
  ck_assert_msg(strstr(msg, where) && strstr(msg, what), "line %d: message \"%s\" lacks \"%s%s\"", at, msg, where,
                what);
}

/* x + 1 + 1 + ... (n times) on an int32 tensor of zeros: integer adds, so
 * LLVM folds the chain and the test stays fast; kiln's own walks see all n. */
static kiln_tensor *add_chain(int n) {
  int32_t zero[4] = {0};
  kiln_tensor *x = kiln_from_data(zero, KILN_I32, KILN_SHAPE(4));
  for (int i = 0; i < n; i++) {
    kiln_tensor *y = kiln_adds(x, 1);
    kiln_release(x);
    x = y;
  }
  return x;
}

static void expect_all(kiln_tensor *x, int32_t want) {
  int32_t got[4];
  ck_assert_int_eq(kiln_copy_to_host(x, got, sizeof got), KILN_OK);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(got[i], want);
}

/* ---- deep graphs ---------------------------------------------------------- */
/* 25,000 ops in one kernel: lowering walks the chain on its own stack. */
START_TEST(chain_of_25000_realizes) {
  kiln_tensor *x = add_chain(25000);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  expect_all(x, 25000);
  kiln_release(x);
}
END_TEST

/* 250,000 ops never asked for: the automatic realize at KILN_MAX_PENDING
 * (100,000) runs several times on the way, and the release of the rest is iterative. */
START_TEST(chain_of_250000_auto_realizes) {
  kiln_reset_stats();
  kiln_tensor *x = add_chain(250000);
  ck_assert_uint_ge(kiln_stats().auto_realizes, 2);
  expect_all(x, 250000);
  kiln_release(x);
}
END_TEST

/* 100,000 ops in one realize (KILN_MAX_PENDING raised past them): fusion
 * stores every 4096th node of the chain (LLVM's passes recurse along a
 * chain of instructions), so 25 kernels, each walked on kiln's own stacks. */
START_TEST(one_realize_of_100000_ops) {
  setenv("KILN_MAX_PENDING", "1000000", 1);   /* read when this forked test first asks */
  kiln_reset_stats();
  kiln_tensor *x = add_chain(100000);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  ck_assert_uint_eq(kiln_stats().auto_realizes, 0);
  ck_assert_uint_eq(kiln_stats().kernels_launched, 25);
  expect_all(x, 100000);
  kiln_release(x);
}
END_TEST

/* A 25,000-op chain never realized is dumped and freed without recursion. */
START_TEST(chain_dumped_and_freed) {
  kiln_tensor *x = add_chain(25000);
  FILE *out = tmpfile();
  ck_assert_int_eq(kiln_dump_graph(x, out, KILN_FMT_TEXT), KILN_OK);
  ck_assert_int_gt(ftell(out), 25000 * 10);
  fclose(out);
  kiln_release(x);
}
END_TEST


/* ---- sizes that overflow int64 ------------------------------------------- */
#define BIG ((int64_t)1 << 32)

START_TEST(broadcast_overflow_is_a_shape_error) {
  kiln_tensor *a = kiln_zeros(KILN_SHAPE(BIG, 1), KILN_F32), *b = kiln_zeros(KILN_SHAPE(1, BIG), KILN_F32);
  kiln_tensor *c = kiln_zeros(KILN_SHAPE(BIG, 1), KILN_BOOL);
  int line = __LINE__ + 1;
  kiln_tensor *y = kiln_add(a, b), *w = kiln_where(c, a, b);
  expect_error(y, KILN_ERR_SHAPE, "add: shape (4294967296,4294967296) has more elements than int64 can count", line);
  expect_error(w, KILN_ERR_SHAPE, "where: shape (4294967296,4294967296)", line);
  kiln_release(a), kiln_release(b), kiln_release(c), kiln_release(y), kiln_release(w);
}
END_TEST

/* Crashed: the expand of the batch dims failed and matmul wrote shape[-1]. */
START_TEST(matmul_batch_overflow_is_a_shape_error) {
  kiln_tensor *a = kiln_zeros(KILN_SHAPE(BIG, 1, 1, 1), KILN_F32), *b = kiln_zeros(KILN_SHAPE(1, BIG, 1, 1), KILN_F32);
  int line = __LINE__ + 1;
  kiln_tensor *y = kiln_matmul(a, b);
  expect_error(y, KILN_ERR_SHAPE, "matmul: shape (4294967296,4294967296,1,1) has more elements", line);
  kiln_tensor *m = kiln_zeros(KILN_SHAPE(BIG, 1), KILN_F32), *n = kiln_zeros(KILN_SHAPE(1, BIG), KILN_F32);
  line = __LINE__ + 1;
  kiln_tensor *p = kiln_mm(m, n);
  expect_error(p, KILN_ERR_SHAPE, "mm: shape (4294967296,4294967296)", line);
  kiln_release(a), kiln_release(b), kiln_release(y), kiln_release(m), kiln_release(n), kiln_release(p);
}
END_TEST

START_TEST(cat_and_stack_overflow_are_shape_errors) {
  kiln_tensor *a = kiln_zeros(KILN_SHAPE((int64_t)1 << 31, (int64_t)1 << 31), KILN_U8);
  kiln_tensor *two[2] = {a, a};
  int line = __LINE__ + 1;
  kiln_tensor *c = kiln_cat(2, two, 0), *s = kiln_stack(2, two, 0);
  expect_error(c, KILN_ERR_SHAPE, "cat: shape (4294967296,2147483648) has more elements", line);
  expect_error(s, KILN_ERR_SHAPE, "stack: shape (2,2147483648,2147483648)", line);
  kiln_release(a), kiln_release(c), kiln_release(s);
}
END_TEST

/* (0, 2^62, 8) is empty and valid; its contiguous strides would overflow. */
START_TEST(empty_huge_shape_is_valid) {
  kiln_tensor *z = kiln_zeros(KILN_SHAPE(0, (int64_t)1 << 62, 8), KILN_F32);
  kiln_tensor *y = kiln_adds(z, 1);
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_int_eq(kiln_numel(y), 0);
  kiln_release(z), kiln_release(y);
}
END_TEST

/* Summing away its 0 dim leaves (2^62, 8), more elements than int64 can
 * count: a shape error that names it (the view's element count overflowed,
 * and the realize asked for a wrapped byte count). Every reduction, kept
 * dims or not. */
START_TEST(reduce_of_empty_to_huge_is_a_shape_error) {
  kiln_scope_begin();
  kiln_tensor *z = kiln_zeros(KILN_SHAPE(0, (int64_t)1 << 62, 8), KILN_F32);
  TU_EXPECT_ERROR(kiln_sum_dims(z, KILN_DIMS(0), 0), KILN_ERR_SHAPE,
                  "sum: shape (4611686018427387904,8) has more elements than int64 can count");
  TU_EXPECT_ERROR(kiln_prod_dims(z, KILN_DIMS(0), 1), KILN_ERR_SHAPE,
                  "prod: shape (1,4611686018427387904,8) has more elements than int64 can count");
  TU_EXPECT_ERROR(kiln_mean_dims(z, KILN_DIMS(0), 0), KILN_ERR_SHAPE,
                  "mean: shape (4611686018427387904,8) has more elements than int64 can count");
  TU_EXPECT_ERROR(kiln_var_dims(z, KILN_DIMS(0), 1, 0), KILN_ERR_SHAPE,
                  "var: shape (4611686018427387904,8) has more elements than int64 can count");
  TU_EXPECT_ERROR(kiln_any_dims(z, KILN_DIMS(0), 0), KILN_ERR_SHAPE,
                  "any: shape (4611686018427387904,8) has more elements than int64 can count");
  kiln_tensor *ok = kiln_sum_dims(z, KILN_DIMS(1), 0);   /* (0, 8): empty, fine */
  ck_assert_int_eq(kiln_realize(ok), KILN_OK);
  ck_assert_int_eq(kiln_numel(ok), 0);
  kiln_scope_end();
}
END_TEST

/* A step past the end of a dim of stride 5 once overflowed the view's stride. */
START_TEST(huge_slice_step_selects_the_first) {
  kiln_tensor *t = kiln_reshape(kiln_arange(0, 10, 1), KILN_SHAPE(2, 5));
  kiln_tensor *y = kiln_index(t, "::9223372036854775807");
  kiln_tensor *z = kiln_adds(y, 0);
  int64_t got[5];
  ck_assert_int_eq(kiln_copy_to_host(z, got, sizeof got), KILN_OK);
  ck_assert_int_eq(kiln_ndim(z), 2);
  for (int i = 0; i < 5; i++) ck_assert_int_eq(got[i], i);
  kiln_release(t), kiln_release(y), kiln_release(z);
}
END_TEST

/* ---- wrong answers ---------------------------------------------------------- */
START_TEST(retain_null_is_a_no_op) {
  ck_assert_ptr_null(kiln_retain(NULL));
  kiln_release(NULL);
}
END_TEST

START_TEST(index_integer_of_20_digits_is_an_error) {
  kiln_tensor *t = kiln_arange(0, 5, 1);
  int line = __LINE__ + 1;
  kiln_tensor *y = kiln_index(t, "18446744073709551617"), *z = kiln_index(t, "-99999999999999999999:");
  expect_error(y, KILN_ERR_ARG, "index \"18446744073709551617\": integer out of range at position 0", line);
  expect_error(z, KILN_ERR_ARG, "integer out of range at position 0", line);
  kiln_tensor *ok = kiln_index(t, "-9223372036854775808:9223372036854775807");
  ck_assert_int_eq(kiln_size(ok, 0), 5);
  kiln_release(t), kiln_release(y), kiln_release(z), kiln_release(ok);
}
END_TEST

START_TEST(index_space_before_colon) {
  kiln_tensor *t = kiln_reshape(kiln_arange(0, 12, 1), KILN_SHAPE(3, 4));
  kiln_tensor *y = kiln_index(t, ":2 :, 1 : 3 : 1");
  ck_assert_int_eq(kiln_status_of(y), KILN_OK);
  ck_assert_int_eq(kiln_size(y, 0), 2);
  ck_assert_int_eq(kiln_size(y, 1), 2);
  int64_t got[4], want[4] = {1, 2, 5, 6};
  ck_assert_int_eq(kiln_copy_to_host(y, got, sizeof got), KILN_OK);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(got[i], want[i]);
  kiln_release(t), kiln_release(y);
}
END_TEST


/* NumPy accepts it: the result has 7 dims; unsqueezing first made 9. */
START_TEST(index_new_dims_before_integers) {
  kiln_tensor *t = kiln_reshape(kiln_arange(0, 24, 1), KILN_SHAPE(2, 3, 4, 1));
  kiln_tensor *y = kiln_index(t, "None, None, None, None, None, 1, 2");
  ck_assert_int_eq(kiln_status_of(y), KILN_OK);
  ck_assert_int_eq(kiln_ndim(y), 7);
  int64_t got[4];
  ck_assert_int_eq(kiln_copy_to_host(y, got, sizeof got), KILN_OK);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(got[i], 20 + i);
  kiln_release(t), kiln_release(y);
}
END_TEST

typedef kiln_tensor *(*dims_fn)(const char *, int, kiln_tensor *, int, const int64_t *, int);
static const struct { dims_fn fn; const char *name; } dims_rows[] = {
  {kiln_sum_dims_at, "sum"}, {kiln_mean_dims_at, "mean"}, {kiln_prod_dims_at, "prod"},
  {kiln_max_dims_at, "max"}, {kiln_min_dims_at, "min"}, {kiln_any_dims_at, "any"}, {kiln_all_dims_at, "all"},
};

/* A NULL list was read as dim 0; a negative count reduced nothing. */
START_TEST(dims_list_null_or_negative_is_an_error) {
  kiln_tensor *t = kiln_ones(KILN_SHAPE(2, 3), KILN_F32);
  char want[96];
  kiln_tensor *a = dims_rows[_i].fn(__FILE__, 7, t, 1, NULL, 0);
  snprintf(want, sizeof want, "%s: the dims list is NULL with 1 dims", dims_rows[_i].name);
  expect_error(a, KILN_ERR_ARG, want, 7);
  kiln_tensor *b = dims_rows[_i].fn(__FILE__, 8, t, -1, (const int64_t[]){0}, 0);
  snprintf(want, sizeof want, "%s: the number of dims is negative (-1)", dims_rows[_i].name);
  expect_error(b, KILN_ERR_ARG, want, 8);
  kiln_release(t), kiln_release(a), kiln_release(b);
}
END_TEST

START_TEST(var_std_dims_null_is_an_error) {
  kiln_tensor *t = kiln_ones(KILN_SHAPE(2, 3), KILN_F32);
  int line = __LINE__ + 1;
  kiln_tensor *v = kiln_var_dims(t, 1, NULL, 1, 0), *s = kiln_std_dims(t, -2, NULL, 1, 0);
  expect_error(v, KILN_ERR_ARG, "var: the dims list is NULL with 1 dims", line);
  expect_error(s, KILN_ERR_ARG, "std: the number of dims is negative (-2)", line);
  kiln_release(t), kiln_release(v), kiln_release(s);
}
END_TEST

START_TEST(randint_bounds_outside_the_dtype) {
  int line = __LINE__ + 1;
  kiln_tensor *a = kiln_randint(-1000, 1000, KILN_SHAPE(4), KILN_I8), *b = kiln_randint(0, 257, KILN_SHAPE(4), KILN_U8);
  expect_error(a, KILN_ERR_ARG, "randint: low=-1000 is out of bounds for int8", line);
  expect_error(b, KILN_ERR_ARG, "randint: high - 1 = 256 is out of bounds for uint8", line);
  kiln_tensor *c = kiln_randint(-128, 128, KILN_SHAPE(64), KILN_I8);
  int8_t got[64];
  ck_assert_int_eq(kiln_copy_to_host(c, got, sizeof got), KILN_OK);
  kiln_release(a), kiln_release(b), kiln_release(c);
}
END_TEST

/* NumPy 2: OverflowError for a Python integer out of bounds for the dtype. */
START_TEST(integer_scalar_out_of_bounds_is_an_error) {
  kiln_tensor *t = kiln_ones(KILN_SHAPE(3), KILN_I32), *u = kiln_ones(KILN_SHAPE(3), KILN_U8);
  int line = __LINE__ + 1;
  kiln_tensor *y = kiln_muls(t, 3e9), *z = kiln_adds(u, -1);
  expect_error(y, KILN_ERR_ARG, "mul: integer 3000000000 is out of bounds for int32", line);
  expect_error(z, KILN_ERR_ARG, "add: integer -1 is out of bounds for uint8", line);
  kiln_tensor *ok = kiln_muls(t, 2147483647), *f = kiln_muls(t, 3.5e9);   /* in range; a float number */
  ck_assert_int_eq(kiln_status_of(ok), KILN_OK);
  ck_assert_int_eq(kiln_dtype_of(f), KILN_F32);
  kiln_release(t), kiln_release(u), kiln_release(y), kiln_release(z), kiln_release(ok), kiln_release(f);
}
END_TEST

START_TEST(linspace_of_one_step_is_the_start) {
  kiln_tensor *t = kiln_linspace(-1, 1, 1);
  ck_assert_double_eq(kiln_item(t), -1.0);
  kiln_release(t);
}
END_TEST

/* ---- messages name what the user called ------------------------------------ */
START_TEST(composites_report_under_their_own_name) {
  kiln_tensor *t = kiln_ones(KILN_SHAPE(2, 3), KILN_F32), *w = kiln_ones(KILN_SHAPE(4), KILN_F32);
  kiln_tensor *x9 = kiln_ones(KILN_SHAPE(1, 1, 1, 1, 1, 1, 1, 1), KILN_F32);
  int line = __LINE__ + 1;
  kiln_tensor *s = kiln_softmax(t, 2), *ls = kiln_log_softmax(t, -3), *ln = kiln_layer_norm(t, 1, w, NULL, 1e-5);
  expect_error(s, KILN_ERR_ARG, "softmax: Dimension out of range (expected to be in range of [-2, 1], but got 2)", line);
  expect_error(ls, KILN_ERR_ARG, "log_softmax: Dimension out of range", line);
  expect_error(ln, KILN_ERR_SHAPE, "layer_norm: shapes (2,3) and (4,) cannot be broadcast", line);
  line = __LINE__ + 1;
  kiln_tensor *lin = kiln_linear(t, w, NULL), *ix = kiln_index(x9, "None, 0, None");
  expect_error(lin, KILN_ERR_SHAPE, "linear: shapes (2,3) and (4,) cannot be multiplied (3 != 4)", line);
  expect_error(ix, KILN_ERR_ARG, "index", line);
  ck_assert_ptr_null(strstr(kiln_last_error(), "unsqueeze"));
  line = __LINE__ + 1;
  kiln_tensor *m = kiln_mean_dims(t, KILN_DIMS(5), 0), *sd = kiln_std_dims(t, KILN_DIMS(5), 1, 0);
  expect_error(m, KILN_ERR_ARG, "mean: Dimension out of range", line);
  expect_error(sd, KILN_ERR_ARG, "std: Dimension out of range", line);
  kiln_release(t), kiln_release(w), kiln_release(x9), kiln_release(s), kiln_release(ls), kiln_release(ln);
  kiln_release(lin), kiln_release(ix), kiln_release(m), kiln_release(sd);
}
END_TEST

/* Too big for memory but not for int64: fails at realize, named as called. */
START_TEST(out_of_memory_names_the_users_op) {
  int line = __LINE__ + 1;
  kiln_tensor *z = kiln_zeros(KILN_SHAPE((int64_t)1 << 60), KILN_F32);
  ck_assert_int_eq(kiln_realize(z), KILN_ERR_MEMORY);
  char want[96];
  snprintf(want, sizeof want, "test_robust.c:%d: zeros: out of memory", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  kiln_release(z);
}
END_TEST

typedef kiln_status (*reader_fn)(const char *f, int l, kiln_tensor *t);
static kiln_status copy_reader(const char *f, int l, kiln_tensor *t) {
  float x;
  return kiln_copy_to_host_at(f, l, t, &x, sizeof x);
}
static kiln_status data_reader(const char *f, int l, kiln_tensor *t) {
  return kiln_data_at(f, l, t) ? KILN_OK : KILN_ERR_ARG;
}
static kiln_status string_reader(const char *f, int l, kiln_tensor *t) {
  char *s = kiln_to_string_at(f, l, t);
  free(s);
  return s ? KILN_OK : KILN_ERR_ARG;
}
static const struct { reader_fn fn; const char *name; } readers[] = {
  {copy_reader, "copy_to_host"}, {data_reader, "data"}, {string_reader, "to_string"}, {kiln_print_at, "print"},
};

START_TEST(null_to_a_reader_names_the_reader) {
  ck_assert_int_eq(readers[_i].fn("app.c", 3, NULL), KILN_ERR_ARG);
  char want[64];
  snprintf(want, sizeof want, "app.c:3: %s: argument is NULL", readers[_i].name);
  ck_assert_str_eq(kiln_last_error(), want);
}
END_TEST

/* ---- NULL lists ------------------------------------------------------------ */
/* The last error is "<this file>:line: " + text. */
static void expect_last_error(int line, const char *text) {
  char want[512];
  snprintf(want, sizeof want, "%s:%d: %s", __FILE__, line, text);
  ck_assert_msg(!strcmp(kiln_last_error(), want), "message \"%s\", want \"%s\"", kiln_last_error(), want);
}

/* A list argument that is NULL while its count says it holds values is
 * refused by its name, before the count is checked (whose message blamed
 * the count: "pad: padding length must be divisible by 2, got 2", or a
 * convolution's "take 1 or 2 values"); conv1d read the NULL list. */
START_TEST(null_list_is_named) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_ones(KILN_SHAPE(1, 2, 4, 4), KILN_F32), *w = kiln_ones(KILN_SHAPE(1, 2, 3, 3), KILN_F32);
  kiln_tensor *x1 = kiln_ones(KILN_SHAPE(1, 2, 4), KILN_F32), *w1 = kiln_ones(KILN_SHAPE(1, 2, 3), KILN_F32);
  kiln_tensor *wt = kiln_ones(KILN_SHAPE(2, 1, 3, 3), KILN_F32), *t = kiln_ones(KILN_SHAPE(2, 3), KILN_F32);
  const int64_t one[1] = {1};
  TU_EXPECT_ERROR(kiln_permute(t, 2, NULL), KILN_ERR_ARG, "permute: dims is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_flip(t, 1, NULL), KILN_ERR_ARG, "flip: dims is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_pad(t, 2, NULL, 0), KILN_ERR_ARG, "pad: pads is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_pad_reflect(t, 2, NULL), KILN_ERR_ARG, "pad_reflect: pads is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_pad_replicate(t, 2, NULL), KILN_ERR_ARG, "pad_replicate: pads is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_pad_circular(t, 2, NULL), KILN_ERR_ARG, "pad_circular: pads is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_cat(2, NULL, 0), KILN_ERR_ARG, "cat: the list of tensors is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_stack(2, NULL, 0), KILN_ERR_ARG, "stack: the list of tensors is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_index_tensors(t, 1, NULL), KILN_ERR_ARG, "index_tensors: indices is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_repeat(t, 2, NULL), KILN_ERR_ARG, "repeat: repeats is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_tile(t, 2, NULL), KILN_ERR_ARG, "tile: dims is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_roll(t, 1, NULL, 1, one), KILN_ERR_ARG, "roll: shifts is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_roll(t, 1, one, 1, NULL), KILN_ERR_ARG, "roll: dims is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_max_pool2d(x, 1, NULL, 0, NULL, 0, NULL, 0, NULL, 0), KILN_ERR_ARG,
                  "max_pool2d: kernel_size is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_max_pool2d(x, 1, one, 1, NULL, 0, NULL, 0, NULL, 0), KILN_ERR_ARG,
                  "max_pool2d: stride is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_max_pool2d(x, 1, one, 0, NULL, 1, NULL, 0, NULL, 0), KILN_ERR_ARG,
                  "max_pool2d: padding is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_max_pool2d(x, 1, one, 0, NULL, 0, NULL, 1, NULL, 0), KILN_ERR_ARG,
                  "max_pool2d: dilation is NULL with a count of 1");
  kiln_tensor *v, *at;
  kiln_max_pool2d_with_indices(x, 2, NULL, 0, NULL, 0, NULL, 0, NULL, 0, &v, &at);
  TU_EXPECT_ERROR_ABOVE(v, 1, KILN_ERR_ARG, "max_pool2d_with_indices: kernel_size is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_avg_pool2d(x, 1, NULL, 0, NULL, 0, NULL, 0, 1), KILN_ERR_ARG,
                  "avg_pool2d: kernel_size is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_avg_pool2d(x, 1, one, 2, NULL, 0, NULL, 0, 1), KILN_ERR_ARG,
                  "avg_pool2d: stride is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_avg_pool2d(x, 1, one, 0, NULL, 1, NULL, 0, 1), KILN_ERR_ARG,
                  "avg_pool2d: padding is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_adaptive_avg_pool2d(x, 2, NULL), KILN_ERR_ARG,
                  "adaptive_avg_pool2d: output_size is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_interpolate(x, 2, NULL, "nearest", 0), KILN_ERR_ARG,
                  "interpolate: size is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_conv2d(x, w, NULL, 1, NULL, 0, NULL, 0, NULL, 1), KILN_ERR_ARG,
                  "conv2d: stride is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_conv2d(x, w, NULL, 0, NULL, 2, NULL, 0, NULL, 1), KILN_ERR_ARG,
                  "conv2d: padding is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_conv2d(x, w, NULL, 0, NULL, 0, NULL, 1, NULL, 1), KILN_ERR_ARG,
                  "conv2d: dilation is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(x, wt, NULL, 1, NULL, 0, NULL, 0, NULL, 1, 0, NULL), KILN_ERR_ARG,
                  "conv_transpose2d: stride is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(x, wt, NULL, 0, NULL, 1, NULL, 0, NULL, 1, 0, NULL), KILN_ERR_ARG,
                  "conv_transpose2d: padding is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(x, wt, NULL, 0, NULL, 0, NULL, 1, NULL, 1, 0, NULL), KILN_ERR_ARG,
                  "conv_transpose2d: output_padding is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(x, wt, NULL, 0, NULL, 0, NULL, 0, NULL, 1, 2, NULL), KILN_ERR_ARG,
                  "conv_transpose2d: dilation is NULL with a count of 2");
  TU_EXPECT_ERROR(kiln_conv1d(x1, w1, NULL, 1, NULL, 0, NULL, 0, NULL, 1), KILN_ERR_ARG,
                  "conv1d: stride is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_conv1d(x1, w1, NULL, 0, NULL, 1, NULL, 0, NULL, 1), KILN_ERR_ARG,
                  "conv1d: padding is NULL with a count of 1");
  TU_EXPECT_ERROR(kiln_conv1d(x1, w1, NULL, 0, NULL, 0, NULL, 1, NULL, 1), KILN_ERR_ARG,
                  "conv1d: dilation is NULL with a count of 1");
  ck_assert_int_eq(kiln_realize_n(2, NULL), KILN_ERR_ARG);
  expect_last_error(__LINE__ - 1, "realize_n: the list of tensors is NULL with a count of 2");
  ck_assert_int_eq(kiln_copy_to_host(t, NULL, 256), KILN_ERR_ARG);
  expect_last_error(__LINE__ - 1, "copy_to_host: the destination is NULL (256 bytes given, 24 needed)");
  ck_assert_ptr_null(kiln_compile(1, NULL, 1, &t));
  expect_last_error(__LINE__ - 1, "compile: the list of inputs is NULL with a count of 1");
  ck_assert_ptr_null(kiln_compile(0, NULL, 1, NULL));
  expect_last_error(__LINE__ - 1, "compile: the list of outputs is NULL with a count of 1");
  kiln_scope_end();
}
END_TEST

/* split and its kin with no array for their pieces: -1 and a message
 * (there is no slot for the error node to say it in). */
START_TEST(pieces_without_an_array_say_why) {
  kiln_scope_begin();
  kiln_tensor *t = kiln_ones(KILN_SHAPE(4, 2), KILN_F32);
  const int64_t sizes[2] = {1, 3};
  ck_assert_int_eq(kiln_split(t, 2, 0, 2, NULL), -1);
  expect_last_error(__LINE__ - 1, "split: out is NULL with a count of 2");
  ck_assert_int_eq(kiln_split_sizes(t, 2, sizes, 0, 2, NULL), -1);
  expect_last_error(__LINE__ - 1, "split_with_sizes: out is NULL with a count of 2");
  kiln_tensor *out[2];
  ck_assert_int_eq(kiln_split_sizes(t, 2, NULL, 0, 2, out), -1);
  expect_last_error(__LINE__ - 1, "split_with_sizes: sizes is NULL with a count of 2");
  ck_assert_int_eq(kiln_status_of(out[1]), KILN_ERR_ARG);
  ck_assert_int_eq(kiln_chunk(t, 2, 0, 2, NULL), -1);
  expect_last_error(__LINE__ - 1, "chunk: out is NULL with a count of 2");
  ck_assert_int_eq(kiln_unbind(t, 0, 2, NULL), -1);
  expect_last_error(__LINE__ - 1, "unbind: out is NULL with a count of 2");
  ck_assert_int_eq(kiln_unbind(t, 5, 2, out), -1);   /* any error, not only a NULL array */
  ck_assert_msg(strstr(kiln_last_error(), "unbind: "), "%s", kiln_last_error());
  kiln_scope_end();
}
END_TEST

START_TEST(print_of_an_error_prints_the_error) {
  kiln_tensor *a = kiln_ones(KILN_SHAPE(2), KILN_F32), *b = kiln_ones(KILN_SHAPE(3), KILN_F32);
  kiln_tensor *y = kiln_add(a, b);
  fflush(stdout);
  FILE *saved = stdout, *out = tmpfile();
  stdout = out;
  kiln_status st = kiln_print(y);
  fflush(out);
  stdout = saved;
  ck_assert_int_eq(st, KILN_ERR_SHAPE);
  char buf[256] = {0};
  rewind(out);
  ck_assert_ptr_nonnull(fgets(buf, sizeof buf, out));
  fclose(out);
  ck_assert_msg(strstr(buf, "error: ") == buf && strstr(buf, "add: shapes (2,) and (3,) cannot be broadcast"), "%s", buf);
  kiln_release(a), kiln_release(b), kiln_release(y);
}
END_TEST


/* Options are read once per process, at the first call that needs them:
 * this runs in its own forked process (Check's default mode). */
START_TEST(unknown_settings_warn_once) {
  setenv("KILN_NUM_THREADS", "abc", 1);
  setenv("KILN_PASSES", "-fuse,-bogus", 1);
  setenv("KILN_DEBUG", "7", 1);
  setenv("KILN_EAGER", "yes", 1);
  FILE *err = tmpfile();
  int saved = dup(2);
  dup2(fileno(err), 2);
  int eager = kiln_get_eager();
  kiln_scope_begin();
  kiln_tensor *t = kiln_adds(kiln_ones(KILN_SHAPE(2), KILN_F32), 1);
  ck_assert_double_eq(kiln_item(kiln_sum(t)), 4.0);   /* the settings left are the defaults */
  kiln_scope_end();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char text[2048] = {0};
  rewind(err);
  size_t n = fread(text, 1, sizeof text - 1, err);
  fclose(err);
  ck_assert_int_gt(n, 0);
  ck_assert_int_eq(eager, 0);
  ck_assert_msg(strstr(text, "kiln: warning: ignoring KILN_NUM_THREADS=abc (accepted: 1 to 1024)"), "%s", text);
  ck_assert_msg(strstr(text, "ignoring KILN_DEBUG=7 (accepted: 0 to 4)"), "%s", text);
  ck_assert_msg(strstr(text, "ignoring KILN_EAGER=yes (accepted: 0 or 1)"), "%s", text);
  ck_assert_msg(strstr(text, "ignoring KILN_PASSES=-fuse,-bogus (accepted: a comma-separated list of -name; "
                             "\"-bogus\" is not one; the passes: verify,simplify,cse,split_reduce,split_scan,fold_views,"
                             "gemm_operands,dce,fuse,stash)"), "%s", text);
  ck_assert_ptr_null(strstr(strstr(text, "KILN_DEBUG") + 1, "KILN_DEBUG"));   /* once */
}
END_TEST

/* ---- handles used after release -------------------------------------------- */
/* The suite's CMake test sets KILN_CHECK_HANDLES=1 (also Debug's default). */
START_TEST(released_handle_used_again_is_an_error) {
  kiln_tensor *a = kiln_ones(KILN_SHAPE(3), KILN_F32);
  kiln_release(a);
  int line = __LINE__ + 1;
  kiln_tensor *y = kiln_exp(a);
  expect_error(y, KILN_ERR_ARG, "exp: argument 1 is a handle that was already released", line);
  line = __LINE__ + 1;
  ck_assert_int_eq(kiln_realize(a), KILN_ERR_ARG);
  char want[96];
  snprintf(want, sizeof want, "test_robust.c:%d: realize: argument is a handle that was already released", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  line = __LINE__ + 1;
  kiln_release(a);   /* twice */
  snprintf(want, sizeof want, "test_robust.c:%d: release: argument is a handle", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  kiln_release(y);
}
END_TEST

START_TEST(scope_released_handle_used_again_is_an_error) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_ones(KILN_SHAPE(3), KILN_F32);
  kiln_scope_end();
  kiln_tensor *b = kiln_ones(KILN_SHAPE(3), KILN_F32);
  int line = __LINE__ + 1;
  kiln_tensor *y = kiln_add(b, a);
  expect_error(y, KILN_ERR_ARG, "add: argument 2 is a handle that was already released", line);
  kiln_release(b), kiln_release(y);
}
END_TEST

/* A composite's temporary may be its argument itself (a matmul of two 2-D
 * operands uses them as they are): dropping it takes its own registration
 * in the scope, never the reference the user's kiln_retain counted (the
 * scope released the argument then, and the user's second release freed
 * it: test_stress found it through tensors shared between threads). */
START_TEST(composite_leaves_retained_arguments_alone) {
  float v[4] = {1, 2, 3, 4};
  kiln_tensor *a = kiln_from_data(v, KILN_F32, KILN_SHAPE(2, 2));
  kiln_retain(a);
  kiln_scope_begin();
  ck_assert_double_eq(kiln_item(kiln_sum(kiln_matmul(a, a))), 54);   /* [[7, 10], [15, 22]] */
  kiln_scope_end();
  kiln_release(a);   /* the retained reference */
  ck_assert_msg(kiln_status_of(a) == KILN_OK, "%s", kiln_last_error());
  kiln_scope_begin();
  ck_assert_double_eq(kiln_item(kiln_sum(a)), 10);
  kiln_scope_end();
  kiln_release(a);
}
END_TEST

/* ---- threads ------------------------------------------------------------------- */
#define NTHREADS 4
#define ROUNDS 20000

static void *retain_release(void *arg) {
  kiln_tensor *t = arg;
  for (int i = 0; i < ROUNDS; i++) {
    kiln_retain(t);
    kiln_release(t);
  }
  for (int i = 0; i < ROUNDS / 100; i++) kiln_retain(t);
  return NULL;
}

/* The handle's counts are atomic: no lost update, so exactly the references
 * the threads kept remain (a plain int corrupted the heap here). */
START_TEST(retain_release_from_threads) {
  kiln_tensor *t = kiln_ones(KILN_SHAPE(3), KILN_F32);
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, retain_release, t), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  ck_assert_int_eq(t->refs, 1 + NTHREADS * (ROUNDS / 100));
  ck_assert_int_eq(t->retained, NTHREADS * (ROUNDS / 100));
  for (int i = 0; i < NTHREADS * (ROUNDS / 100); i++) kiln_release(t);
  ck_assert_int_eq(t->refs, 1);
  kiln_release(t);
}
END_TEST

static void *count_realizes(void *arg) {
  (void)arg;
  float v[16] = {0};
  for (int i = 0; i < 50; i++) {
    kiln_tensor *x = kiln_from_data(v, KILN_F32, KILN_SHAPE(16)), *t = kiln_adds(x, i);
    kiln_realize(t);
    kiln_release(x);
    kiln_release(t);
  }
  return NULL;
}

/* Statistics are atomic: every launch from every thread is counted. */
START_TEST(stats_count_every_thread) {
  kiln_reset_stats();
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, count_realizes, NULL), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  kiln_stats_t s = kiln_stats();
  ck_assert_uint_eq(s.kernels_launched, NTHREADS * 50);
  ck_assert_uint_eq(s.compiles + s.cache_hits, NTHREADS * 50);
}
END_TEST

static Suite *robust_suite(void) {
  Suite *s = suite_create("robust");
  TCase *deep = tu_tcase(s, "deep");
  tcase_add_test(deep, chain_of_25000_realizes);
  tcase_add_test(deep, chain_of_250000_auto_realizes);
  tcase_add_test(deep, chain_dumped_and_freed);
  tcase_add_test(deep, one_realize_of_100000_ops);
  TCase *size = tu_tcase(s, "overflow");
  tcase_add_test(size, broadcast_overflow_is_a_shape_error);
  tcase_add_test(size, matmul_batch_overflow_is_a_shape_error);
  tcase_add_test(size, cat_and_stack_overflow_are_shape_errors);
  tcase_add_test(size, empty_huge_shape_is_valid);
  tcase_add_test(size, reduce_of_empty_to_huge_is_a_shape_error);
  tcase_add_test(size, huge_slice_step_selects_the_first);
  TCase *wrong = tu_tcase(s, "wrong_answers");
  tcase_add_test(wrong, retain_null_is_a_no_op);
  tcase_add_test(wrong, index_integer_of_20_digits_is_an_error);
  tcase_add_test(wrong, index_space_before_colon);
  tcase_add_test(wrong, index_new_dims_before_integers);
  tcase_add_loop_test(wrong, dims_list_null_or_negative_is_an_error, 0, sizeof dims_rows / sizeof *dims_rows);
  tcase_add_test(wrong, var_std_dims_null_is_an_error);
  tcase_add_test(wrong, randint_bounds_outside_the_dtype);
  tcase_add_test(wrong, integer_scalar_out_of_bounds_is_an_error);
  tcase_add_test(wrong, linspace_of_one_step_is_the_start);
  TCase *msg = tu_tcase(s, "messages");
  tcase_add_test(msg, composites_report_under_their_own_name);
  tcase_add_test(msg, out_of_memory_names_the_users_op);
  tcase_add_loop_test(msg, null_to_a_reader_names_the_reader, 0, sizeof readers / sizeof *readers);
  tcase_add_test(msg, null_list_is_named);
  tcase_add_test(msg, pieces_without_an_array_say_why);
  tcase_add_test(msg, print_of_an_error_prints_the_error);
  tcase_add_test(msg, unknown_settings_warn_once);
  TCase *handles = tu_tcase(s, "handles");
  tcase_add_test(handles, released_handle_used_again_is_an_error);
  tcase_add_test(handles, scope_released_handle_used_again_is_an_error);
  tcase_add_test(handles, composite_leaves_retained_arguments_alone);
  TCase *threads = tu_tcase(s, "threads");
  tcase_add_test(threads, retain_release_from_threads);
  tcase_add_test(threads, stats_count_every_thread);
  return s;
}

KILN_TEST_MAIN(robust_suite)
