/* cases.c: the CUDA test graphs (cases.h), as families of rows: each family
 * has a count and builds its j-th member. */
#include "cuda_emu/cases.h"
#include "ir/kernel.h"
#include "util/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N1 37   /* a prime: no vector width divides it */

typedef bool (*family_fn)(int j, cuda_case *c);
typedef struct { int count; family_fn build; } family;

static const kiln_dtype all_dt[] = {KILN_BOOL, KILN_U8, KILN_I8, KILN_I16, KILN_I32,
                                    KILN_I64, KILN_F16, KILN_BF16, KILN_F32, KILN_F64};
#define NDT ((int)(sizeof all_dt / sizeof *all_dt))

static kiln_tensor *data(kiln_dtype dt, int ndim, const int64_t *shape, uint64_t seed, tu_range r) {
  return tu_data(dt, ndim, shape, seed, r);
}

/* The j-th elementwise op of the given arity (CAST excluded), or -1. */
static int nth_op(int j, int arity) {
  for (int op = 0; op < IR_NUM_OPS; op++)
    if (ir_op_has((ir_op)op, IR_EW) && op != IR_CAST && ir_ops[op].arity == arity && j-- == 0) return op;
  return -1;
}

static int count_ops(int arity) {
  int n = 0;
  while (nth_op(n, arity) >= 0) n++;
  return n;
}

static bool usable(ir_op op, kiln_dtype dt) {
  return !(ir_op_has(op, IR_NOBOOL) && dt == KILN_BOOL) && !(ir_op_has(op, IR_NOFLOAT) && ir_is_float(dt));
}

/* An integer divisor without zeros (a zero fails the realize: ZeroDivisionError). */
static kiln_tensor *divisor(ir_op op, kiln_tensor *b) {
  bool division = op == IR_FLOOR_DIVIDE || op == IR_TRUNC_DIVIDE || op == IR_REMAINDER || op == IR_FMOD;
  if (!division || ir_is_float(kiln_dtype_of(b))) return b;
  kiln_tensor *z = kiln_eqs(b, 0), *one = kiln_ones_like(b), *nz = kiln_where(z, one, b);
  kiln_release(z);
  kiln_release(one);
  kiln_release(b);
  return nz;
}

static bool finish(cuda_case *c, kiln_tensor *t, ref_tol tol) {
  c->t = t;
  c->tol = tol;
  if (kiln_status_of(t) == KILN_OK) return true;
  kiln_release(t);
  return false;
}

static bool fam_unary(int j, cuda_case *c) {
  ir_op op = (ir_op)nth_op(j / NDT, 1);
  kiln_dtype dt = all_dt[j % NDT];
  if (!usable(op, dt)) return false;
  snprintf(c->name, sizeof c->name, "%s_%s", ir_ops[op].name, ir_dtypes[dt].short_name);
  kiln_tensor *x = data(dt, KILN_SHAPE(N1), (uint64_t)j, TU_MODERATE);
  kiln_tensor *y = tu_unary(op)(__FILE__, __LINE__, x);
  kiln_release(x);
  return finish(c, y, ref_tol_op(op, kiln_dtype_of(y)));
}

/* a (5,7) op b (7,): broadcasting along the rows. */
static bool fam_binary(int j, cuda_case *c) {
  ir_op op = (ir_op)nth_op(j / NDT, 2);
  kiln_dtype dt = all_dt[j % NDT];
  if (!usable(op, dt)) return false;
  snprintf(c->name, sizeof c->name, "%s_%s", ir_ops[op].name, ir_dtypes[dt].short_name);
  kiln_tensor *a = data(dt, KILN_SHAPE(5, 7), (uint64_t)j, TU_MODERATE);
  kiln_tensor *b = divisor(op, data(dt, KILN_SHAPE(7), (uint64_t)j + 1, TU_MODERATE));
  kiln_tensor *y = tu_binary(op)(__FILE__, __LINE__, a, b);
  kiln_release(a);
  kiln_release(b);
  return finish(c, y, ref_tol_op(op, kiln_dtype_of(y)));
}

static bool fam_cast(int j, cuda_case *c) {
  kiln_dtype from = all_dt[j / NDT], to = all_dt[j % NDT];
  snprintf(c->name, sizeof c->name, "cast_%s_%s", ir_dtypes[from].short_name, ir_dtypes[to].short_name);
  kiln_tensor *x = data(from, KILN_SHAPE(N1), (uint64_t)j, TU_FULL);
  kiln_tensor *y = kiln_cast(x, to);
  kiln_release(x);
  return finish(c, y, (ref_tol){0, 0});
}

static bool fam_ternary(int j, cuda_case *c) {
  kiln_dtype dt = all_dt[j / 2];
  kiln_tensor *y, *a = data(dt, KILN_SHAPE(3, N1), (uint64_t)j, TU_FULL);
  if (j % 2 == 0) {
    snprintf(c->name, sizeof c->name, "where_%s", ir_dtypes[dt].short_name);
    kiln_tensor *cond = data(KILN_BOOL, KILN_SHAPE(N1), (uint64_t)j, TU_FULL);
    kiln_tensor *b = data(dt, KILN_SHAPE(3, 1), (uint64_t)j + 7, TU_FULL);
    y = kiln_where(cond, a, b);
    kiln_release(cond);
    kiln_release(b);
  } else {
    if (dt == KILN_BOOL) {
      kiln_release(a);
      return false;
    }
    snprintf(c->name, sizeof c->name, "clamp_%s", ir_dtypes[dt].short_name);
    y = kiln_clamp(a, -3, 100);
  }
  kiln_release(a);
  return finish(c, y, (ref_tol){0, 0});
}

/* Random sources: Philox must match the CPU bit for bit. */
static bool fam_random(int j, cuda_case *c) {
  static const kiln_dtype fdt[] = {KILN_F16, KILN_BF16, KILN_F32, KILN_F64};
  kiln_manual_seed(1234 + (uint64_t)j);
  kiln_tensor *y;
  ref_tol tol = {0, 0};  /* bits; randn goes through log, sin and cos: */
  if (j < 4) {
    snprintf(c->name, sizeof c->name, "rand_%s", ir_dtypes[fdt[j]].short_name);
    y = kiln_rand(KILN_SHAPE(3, 41), fdt[j]);
  } else if (j < 8) {
    snprintf(c->name, sizeof c->name, "randn_%s", ir_dtypes[fdt[j - 4]].short_name);
    y = kiln_randn(KILN_SHAPE(3, 41), fdt[j - 4]);
    tol = ref_tol_dtype(fdt[j - 4]);
  } else {
    kiln_dtype dt = j == 8 ? KILN_I64 : KILN_I32;
    snprintf(c->name, sizeof c->name, "randint_%s", ir_dtypes[dt].short_name);
    y = kiln_randint(-1000, 1 << 20, KILN_SHAPE(123), dt);
  }
  return finish(c, y, tol);
}

/* Movement views, sources and fused chains, each one row. */
static bool fam_misc(int j, cuda_case *c) {
  kiln_tensor *a = data(KILN_F32, KILN_SHAPE(4, 6, 5), 11, TU_SMALL);
  kiln_tensor *b = data(KILN_F32, KILN_SHAPE(6), 12, TU_SMALL);
  kiln_tensor *y = NULL;
  ref_tol tol = ref_tol_dtype(KILN_F32);
  static const char *names[] = {"permute_add", "slice_flip", "pad_cat", "select_index", "arange_linspace",
                                "eye_full", "w1", "expand_mixed", "f16_chain", "bf16_chain"};
  snprintf(c->name, sizeof c->name, "%s", names[j]);
  kiln_scope_begin();
  switch (j) {
  case 0: y = kiln_add(kiln_permute(a, KILN_DIMS(2, 0, 1)), kiln_ones(KILN_SHAPE(5, 4, 6), KILN_F32)); break;
  case 1: y = kiln_flip(kiln_slice(a, 1, 1, 6, 2), KILN_DIMS(0, 2)); break;
  case 2: {
    kiln_tensor *p = kiln_pad(a, KILN_SHAPE(1, 2, 0, 1), 7.5);
    kiln_tensor *parts[2] = {p, kiln_muls(p, 2)};
    y = kiln_cat(2, parts, 0);
    break;
  }
  case 3: y = kiln_mul(kiln_select(a, 1, 3), kiln_index(a, "1, 2:, :")); break;
  case 4: y = kiln_add(kiln_arange(0, 40, 0.5), kiln_linspace(-3, 3, 80)); break;
  case 5: y = kiln_add(kiln_eye(5, 7, KILN_I32), kiln_full(KILN_SHAPE(5, 7), 3, KILN_I32)); break;
  case 6: y = kiln_mul(kiln_relu(kiln_add(kiln_mul(a, a), b)), kiln_sigmoid(a)); break;
  case 7: {
    kiln_tensor *i = data(KILN_I16, KILN_SHAPE(4, 1, 5), 13, TU_SMALL);
    y = kiln_div(kiln_add(i, kiln_expand(b, KILN_SHAPE(5, 6))), kiln_cast(kiln_transpose(a, 1, 2), KILN_U8));
    break;
  }
  case 8:
  case 9: {
    kiln_dtype dt = j == 8 ? KILN_F16 : KILN_BF16;
    kiln_tensor *h = kiln_cast(a, dt);
    y = kiln_exp(kiln_sub(kiln_tanh(h), kiln_muls(h, 0.25)));
    tol = ref_tol_dtype(dt);
    break;
  }
  }
  kiln_keep(y);
  kiln_scope_end();
  kiln_release(a);
  kiln_release(b);
  return finish(c, y, tol);
}

/* Reductions: along the last dim, the first, all. */
static bool fam_reduce(int j, cuda_case *c) {
  typedef kiln_tensor *(*reduce_fn)(const char *, int, kiln_tensor *, int, const int64_t *, int);
  static const struct { const char *name; reduce_fn fn; } rows[] = {
    {"sum", kiln_sum_dims_at}, {"mean", kiln_mean_dims_at}, {"prod", kiln_prod_dims_at},
    {"max", kiln_max_dims_at}, {"min", kiln_min_dims_at},
  };
  static const int64_t dims[3][2] = {{1, -1}, {1, 0}, {2, 0}};  /* {ndims, dim} */
  int r = j / 3, d = j % 3;
  snprintf(c->name, sizeof c->name, "%s_dims%d", rows[r].name, d);
  kiln_tensor *a = data(KILN_F32, KILN_SHAPE(9, 33), (uint64_t)j, TU_SMALL);
  const int64_t all[2] = {0, 1};
  kiln_tensor *y = rows[r].fn(__FILE__, __LINE__, a, (int)dims[d][0], d == 2 ? all : &dims[d][1], 0);
  kiln_release(a);
  c->reduces = true;
  return finish(c, y, (ref_tol){1e-4, 1e-4});
}

/* ---- block-wide reductions (codegen_cuda/emit.c's rows) ------------------ */
#define NROWS 5   /* rows per case: more than the emulator's 3 blocks */
static const int64_t row_lens[] = {1, 31, 32, 33, 1000};  /* around a warp, and long */
#define NLENS ((int)(sizeof row_lens / sizeof *row_lens))

/* f32 rows full of ties (values -2..2), and per row: nans (row 1), all -inf
 * (row 2), all +inf (row 3), so arg-reductions meet every special case. */
static kiln_tensor *tie_data(int64_t rows, int64_t len) {
  float *v = malloc(sizeof *v * (size_t)(rows * len));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < len; i++) {
      float x = (float)((i * 7 + r * 3) % 5) - 2;
      if (r % 4 == 1 && (i == (r * 11) % len || i == ((r * 11) % len + len / 2) % len)) x = NAN;
      if (r % 4 == 2) x = -INFINITY;
      if (r % 4 == 3) x = INFINITY;
      v[r * len + i] = x;
    }
  kiln_tensor *t = kiln_from_data(v, KILN_F32, KILN_SHAPE(rows, len));
  free(v);
  return t;
}

/* bool rows: none true, only the last true, all true, all but the last
 * true, then a pattern: any and all each flip on one element. */
static kiln_tensor *bool_rows(int64_t rows, int64_t len) {
  unsigned char *v = malloc((size_t)(rows * len));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < len; i++) {
      bool last = i == len - 1;
      bool b = r % 5 == 0 ? false : r % 5 == 1 ? last : r % 5 == 2 ? true : r % 5 == 3 ? !last : (i * 5 + r) % 3 == 0;
      v[r * len + i] = b;
    }
  kiln_tensor *t = kiln_from_data(v, KILN_BOOL, KILN_SHAPE(rows, len));
  free(v);
  return t;
}

static const char *const row_ops[] = {"sum", "softmax", "log_softmax", "layer_norm", "argmax", "argmin",
                                      "any", "all", "sum_bool", "sum_i32", "max_i16"};
#define NROWOPS ((int)(sizeof row_ops / sizeof *row_ops))

/* One reduction over rows of each length: one block per row. */
static bool fam_rows(int j, cuda_case *c) {
  int64_t len = row_lens[j / NROWOPS];
  int op = j % NROWOPS;
  const int64_t last[1] = {-1};
  snprintf(c->name, sizeof c->name, "rows%lld_%s", (long long)len, row_ops[op]);
  ref_tol exact = {0, 0}, tol = {1e-4, 1e-5};
  kiln_tensor *x = NULL, *y = NULL, *w = NULL, *b = NULL;
  switch (op) {
  case 0:
  case 1:
  case 2:
  case 3: x = data(KILN_F32, KILN_SHAPE(NROWS, len), (uint64_t)j, TU_SMALL); break;
  case 4:
  case 5: x = tie_data(NROWS, len); break;
  case 6:
  case 7:
  case 8: x = bool_rows(NROWS, len); break;
  case 9: x = data(KILN_I32, KILN_SHAPE(NROWS, len), (uint64_t)j, TU_FULL); break;
  default: x = data(KILN_I16, KILN_SHAPE(NROWS, len), (uint64_t)j, TU_FULL); break;
  }
  switch (op) {
  case 0: y = kiln_sum_dims(x, 1, last, 0); break;
  case 1: y = kiln_softmax(x, -1); break;
  case 2: y = kiln_log_softmax(x, -1); break;
  case 3:
    w = data(KILN_F32, KILN_SHAPE(len), (uint64_t)j + 1, TU_SMALL);
    b = data(KILN_F32, KILN_SHAPE(len), (uint64_t)j + 2, TU_SMALL);
    y = kiln_layer_norm(x, 1, w, b, 1e-5);
    kiln_release(w);
    kiln_release(b);
    break;
  case 4: y = kiln_argmax_dim(x, -1, 0); tol = exact; break;
  case 5: y = kiln_argmin_dim(x, -1, 1); tol = exact; break;
  case 6: y = kiln_any_dims(x, 1, last, 0); tol = exact; break;
  case 7: y = kiln_all_dims(x, 1, last, 0); tol = exact; break;
  case 10: y = kiln_max_dims(x, 1, last, 0); tol = exact; break;
  default: y = kiln_sum_dims(x, 1, last, 0); tol = exact; break;
  }
  kiln_release(x);
  c->reduces = true;
  return finish(c, y, tol);
}

/* any of row 1 of bool_rows (only its last element true) or all of row 3
 * (only its last element false): the last element decides. */
static kiln_tensor *last_decides(kiln_tensor *x, bool any) {
  kiln_tensor *row = kiln_select(x, 0, any ? 1 : 3);
  kiln_tensor *y = any ? kiln_any(row) : kiln_all(row);
  kiln_release(row);
  return y;
}

/* Reductions of a whole tensor (one row on one block), and rows that are
 * several dims of a bigger tensor. */
static bool fam_whole(int j, cuda_case *c) {
  static const char *names[] = {"sum_all", "sum_keep", "mean_f64", "var_all", "argmax_all", "argmin_all",
                                "any_all", "all_all", "sum_i32_all", "max_i16_all", "layer_norm_2d",
                                "softmax_1d", "sum_mid", "sum_last3"};
  snprintf(c->name, sizeof c->name, "%s", names[j]);
  ref_tol exact = {0, 0}, tol = {1e-4, 1e-5};
  const int64_t all[3] = {0, 1, 2}, mid[1] = {1};
  kiln_tensor *x, *y;
  switch (j) {
  case 0:
  case 3: x = data(KILN_F32, KILN_SHAPE(37, 29), (uint64_t)j, TU_SMALL); break;
  case 1: x = data(KILN_F32, KILN_SHAPE(1000), (uint64_t)j, TU_SMALL); break;
  case 2: x = data(KILN_F64, KILN_SHAPE(1000), (uint64_t)j, TU_SMALL); break;
  case 4:
  case 5: x = tie_data(j == 4 ? 5 : 1, 333); break;  /* argmin: no nan, ties only */
  case 6:
  case 7: x = bool_rows(5, 77); break;
  case 8: x = data(KILN_I32, KILN_SHAPE(1000), (uint64_t)j, TU_FULL); break;
  case 9: x = data(KILN_I16, KILN_SHAPE(17, 19), (uint64_t)j, TU_FULL); break;
  case 10:
  case 13: x = data(KILN_F32, KILN_SHAPE(3, 4, 33), (uint64_t)j, TU_SMALL); break;
  case 11: x = data(KILN_F32, KILN_SHAPE(1000), (uint64_t)j, TU_SMALL); break;
  default: x = data(KILN_F32, KILN_SHAPE(3, 40, 5), (uint64_t)j, TU_SMALL); break;
  }
  switch (j) {
  case 0: y = kiln_sum(x); break;
  case 1: y = kiln_sum_dims(x, 1, all, 1); break;
  case 2: y = kiln_mean(x); break;
  case 3: y = kiln_var(x, 1); break;
  case 4: y = kiln_argmax(x); tol = exact; break;
  case 5: y = kiln_argmin(x); tol = exact; break;
  case 6: case 7: y = last_decides(x, j == 6); tol = exact; break;
  case 8: y = kiln_sum(x); tol = exact; break;
  case 9: y = kiln_max(x); tol = exact; break;
  case 10: y = kiln_layer_norm(x, 2, NULL, NULL, 1e-5); break;
  case 11: y = kiln_softmax(x, 0); break;
  case 12: y = kiln_sum_dims(x, 1, mid, 0); break;
  default: y = kiln_sum_dims(x, 1, &all[2], 0); break;
  }
  kiln_release(x);
  c->reduces = true;
  return finish(c, y, tol);
}

/* ---- grid-wide reductions: whole tensors long enough for several blocks --
 * (emit.c gives a block 4096 elements): first indices and nans of arg-
 * reductions across blocks, any/all decided by the very last element, an
 * epilogue (mean), integer sums that must be exact, a reduction of 2
 * blocks that the emulator also runs on 3, and a sum kept as [1]. */
static bool fam_grid(int j, cuda_case *c) {
  static const char *names[] = {"grid_sum",    "grid_mean_f64", "grid_argmax", "grid_argmin",      "grid_any",
                                "grid_all",    "grid_sum_i32",  "grid_max_i16", "grid_sum_sq",      "grid_sum_2blocks",
                                "grid_sum_keep"};
  snprintf(c->name, sizeof c->name, "%s", names[j]);
  ref_tol exact = {0, 0}, tol = {1e-4, 1e-4};
  kiln_tensor *x, *y;
  switch (j) {
  case 0: case 8: x = data(KILN_F32, KILN_SHAPE(4, 5003), (uint64_t)j, TU_SMALL); break;
  case 1: x = data(KILN_F64, KILN_SHAPE(20000), (uint64_t)j, TU_SMALL); break;
  case 2: x = tie_data(5, 4001); break;   /* row 1 holds nans: the first wins */
  case 3: x = tie_data(1, 20011); break;  /* ties only: the first -2 wins */
  case 4: case 5: x = bool_rows(5, 20000); break;
  case 6: x = data(KILN_I32, KILN_SHAPE(30000), (uint64_t)j, TU_FULL); break;
  case 7: x = data(KILN_I16, KILN_SHAPE(5, 4001), (uint64_t)j, TU_FULL); break;
  default: x = data(KILN_F32, KILN_SHAPE(5000), (uint64_t)j, TU_SMALL); break;
  }
  switch (j) {
  case 0: case 9: y = kiln_sum(x); break;
  case 10: y = kiln_sum_dims(x, 1, (const int64_t[]){0}, 1); break;  /* [1]: a parallel loop of one */
  case 1: y = kiln_mean(x); break;
  case 2: y = kiln_argmax(x); tol = exact; break;
  case 3: y = kiln_argmin(x); tol = exact; break;
  case 4: case 5: y = last_decides(x, j == 4); tol = exact; break;
  case 6: y = kiln_sum(x); tol = exact; break;
  case 7: y = kiln_max(x); tol = exact; break;
  default: {
    kiln_tensor *sq = kiln_mul(x, x);
    y = kiln_sum(sq);
    kiln_release(sq);
    break;
  }
  }
  kiln_release(x);
  c->reduces = true;
  return finish(c, y, tol);
}

/* ---- the vector path of elementwise kernels (emit.c) -------------------- */
/* Lengths that leave a scalar tail; an offset view of 3 elements misaligns
 * its input (the scalar fallback even on aligned buffers), one of 4 keeps
 * it aligned; 2-byte dtypes take 8 lanes; a 2-d iteration is one flat run. */
static bool fam_vector(int j, cuda_case *c) {
  static const char *names[] = {"vec_add_f32", "vec_view_off3", "vec_view_off4", "vec_add_f16",
                                "vec_mul_i32", "vec_exp_bf16",  "vec_sub_2d",    "vec_scalar_f32"};
  snprintf(c->name, sizeof c->name, "%s", names[j]);
  kiln_dtype dt = j == 3 ? KILN_F16 : j == 4 ? KILN_I32 : j == 5 ? KILN_BF16 : KILN_F32;
  kiln_tensor *a = data(dt, KILN_SHAPE(4099), (uint64_t)j, j == 4 ? TU_FULL : TU_SMALL);
  kiln_tensor *b = data(dt, KILN_SHAPE(4099), (uint64_t)j + 1, j == 4 ? TU_FULL : TU_SMALL);
  kiln_tensor *y = NULL;
  kiln_scope_begin();
  switch (j) {
  case 1:
  case 2: y = kiln_adds(kiln_slice(a, 0, j + 2, 4099, 1), 1); break;
  case 5: y = kiln_exp(a); break;
  case 6: y = kiln_sub(kiln_reshape(kiln_slice(a, 0, 0, 37 * 41, 1), KILN_SHAPE(37, 41)),
                       kiln_reshape(kiln_slice(b, 0, 0, 37 * 41, 1), KILN_SHAPE(37, 41))); break;
  case 7: y = kiln_mul(a, kiln_scalar(0.5, KILN_F32)); break;
  default: y = j == 4 ? kiln_mul(a, b) : kiln_add(a, b); break;
  }
  kiln_keep(y);
  kiln_scope_end();
  kiln_release(a);
  kiln_release(b);
  return finish(c, y, ref_tol_dtype(dt));
}

/* An integer division whose divisor holds one 0 at a known element: the
 * kernel check reports it there (one failing element, so the order the
 * emulator runs blocks in cannot change which is reported). */
static bool fam_zero_division(int j, cuda_case *c) {
  static const struct { ir_op op; kiln_dtype dt; int64_t at; } rows[] = {
    {IR_FLOOR_DIVIDE, KILN_I32, 23}, {IR_REMAINDER, KILN_U8, 0}, {IR_FMOD, KILN_I64, 34}, {IR_TRUNC_DIVIDE, KILN_I16, 3},
  };
  snprintf(c->name, sizeof c->name, "zero_division_%s_%s", ir_ops[rows[j].op].name, ir_dtypes[rows[j].dt].short_name);
  kiln_tensor *t[7];
  t[0] = data(rows[j].dt, KILN_SHAPE(5, 7), (uint64_t)j, TU_MODERATE);
  t[1] = kiln_ones(KILN_SHAPE(5, 7), rows[j].dt);
  t[2] = kiln_arange(0, 35, 1);
  t[3] = kiln_reshape(t[2], KILN_SHAPE(5, 7));
  t[4] = kiln_eqs(t[3], (double)rows[j].at);
  t[5] = kiln_zeros_like(t[1]);
  t[6] = kiln_where(t[4], t[5], t[1]);
  kiln_tensor *y = tu_binary(rows[j].op)(__FILE__, __LINE__, t[0], t[6]);
  for (int k = 0; k < 7; k++) kiln_release(t[k]);
  c->fails = KC_DIV_ZERO;
  c->fail_at = rows[j].at;
  return finish(c, y, (ref_tol){0, 0});
}

/* ---- indexing: loads through an index tensor, scatters ---------------------- */
/* n indices in [lo, hi) (negatives and duplicates), int64 or int32. */
static kiln_tensor *index_data(int ndim, const int64_t *shape, int64_t lo, int64_t hi, uint64_t seed, kiln_dtype dt) {
  int64_t v[1024], n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  if (n > 1024) abort();   /* a row too big for this table */
  for (int64_t k = 0; k < n; k++) v[k] = lo + (int64_t)(tu_next(&seed) % (uint64_t)(hi - lo));
  kiln_tensor *i = kiln_from_data(v, KILN_I64, ndim, shape);
  if (dt == KILN_I64) return i;
  kiln_tensor *r = kiln_cast(i, dt);
  kiln_realize(r);   /* a buffer, as the kernel's plain input */
  return r;
}

static bool fam_index(int j, cuda_case *c) {
  static const char *names[] = {"gather_f32", "embedding_add", "index_tensors_i32", "take_f16",
                                "scatter_add_f32", "scatter_amax_i32", "scatter_f64", "index_select_u8"};
  snprintf(c->name, sizeof c->name, "%s", names[j]);
  kiln_scope_begin();
  kiln_tensor *a = data(KILN_F32, KILN_SHAPE(9, 33), 21, TU_FULL), *y = NULL;
  ref_tol tol = {0, 0};
  switch (j) {
  case 0: y = kiln_gather(a, 1, index_data(KILN_SHAPE(9, 40), -33, 33, 1, KILN_I64)); break;
  case 1:
    y = kiln_add(kiln_embedding(index_data(KILN_SHAPE(4, 5), -9, 9, 2, KILN_I64), a), data(KILN_F32, KILN_SHAPE(33), 22, TU_FULL));
    tol = ref_tol_dtype(KILN_F32);
    break;
  case 2: {
    kiln_tensor *ij[2] = {index_data(KILN_SHAPE(3, 1), -9, 9, 3, KILN_I32), index_data(KILN_SHAPE(7), 0, 33, 4, KILN_I32)};
    y = kiln_index_tensors(a, 2, ij);
    break;
  }
  case 3: y = kiln_take(data(KILN_F16, KILN_SHAPE(5, 7), 23, TU_FULL), index_data(KILN_SHAPE(6, 6), -35, 35, 5, KILN_I64)); break;
  case 4:
    y = kiln_scatter_add(a, 0, index_data(KILN_SHAPE(20, 33), -9, 9, 6, KILN_I64), data(KILN_F32, KILN_SHAPE(20, 33), 24, TU_SMALL));
    tol = ref_tol_dtype(KILN_F32);
    break;
  case 5:
    y = kiln_scatter_reduce(data(KILN_I32, KILN_SHAPE(6, 8), 25, TU_FULL), 1, index_data(KILN_SHAPE(6, 20), 0, 8, 7, KILN_I64),
                            data(KILN_I32, KILN_SHAPE(6, 20), 26, TU_FULL), "amax", 1);
    break;
  case 6:
    y = kiln_scatter(data(KILN_F64, KILN_SHAPE(4, 4), 27, TU_FULL), 0, index_data(KILN_SHAPE(3, 4), -4, 4, 8, KILN_I64),
                     data(KILN_F64, KILN_SHAPE(3, 4), 28, TU_FULL));
    break;
  case 7: y = kiln_index_select(data(KILN_U8, KILN_SHAPE(6, 5), 29, TU_FULL), 0, index_data(KILN_SHAPE(11), -6, 6, 9, KILN_I64)); break;
  }
  kiln_keep(y);
  kiln_scope_end();
  return finish(c, y, tol);
}

/* The views, statistics and products of issue 13: compositions whose index
 * arithmetic (cats of slices, flips, reshapes of expands, strided slices of
 * reshapes) and row reductions both back ends lower. */
static bool fam_shape_ops(int j, cuda_case *c) {
  static const char *names[] = {"pad_modes", "roll_tril", "repeat_tile", "diag_one_hot", "einsum_int",
                                "logsumexp_norm", "cross_cosine", "var_corr_trace"};
  kiln_tensor *a = data(KILN_F32, KILN_SHAPE(4, 6, 5), 21, TU_SMALL), *y = NULL;
  snprintf(c->name, sizeof c->name, "%s", names[j]);
  kiln_scope_begin();
  switch (j) {
  case 0: y = kiln_add(kiln_pad_reflect(a, KILN_SHAPE(2, 1, 1, 2)), kiln_pad_circular(kiln_pad_replicate(a, KILN_SHAPE(1, 2)), KILN_SHAPE(0, 0, 2, 1))); break;
  case 1: y = kiln_tril(kiln_roll(kiln_exp(a), KILN_SHAPE(2, -1), KILN_DIMS(1, 2)), -1); break;
  case 2: y = kiln_mul(kiln_repeat_interleave_dim(a, 2, 1), kiln_tile(kiln_slice(a, 1, 0, 6, 2), KILN_SHAPE(4, 1))); break;
  case 3: {
    kiln_tensor *i = kiln_randint(0, 6, KILN_SHAPE(5, 7), KILN_I64);   /* 5: a class past the end */
    kiln_tensor *d = kiln_diag(kiln_select(kiln_diagonal(a, 1, 1, 2), 0, 0), -1);   /* (5, 5) */
    y = kiln_add(kiln_cast(kiln_one_hot(i, 5), KILN_F32), kiln_reshape(d, KILN_SHAPE(5, 1, 5)));
    break;
  }
  case 4: {
    kiln_tensor *i = data(KILN_I32, KILN_SHAPE(4, 6, 5), 22, TU_SMALL);
    y = kiln_einsum("bij,bkj->bik", 2, (kiln_tensor *[]){i, i});
    break;
  }
  case 5: y = kiln_add(kiln_logsumexp(a, KILN_DIMS(-1), 0), kiln_vector_norm(a, 3, KILN_DIMS(2), 0)); break;
  case 6: {
    kiln_tensor *s = kiln_slice(a, 2, 1, 4, 1);
    y = kiln_mul(kiln_sum_dims(kiln_cross(s, kiln_flip(s, KILN_DIMS(0)), -1), KILN_DIMS(-1), 0), kiln_cosine_similarity(a, kiln_select(a, 0, 1), 2, 1e-8));
    break;
  }
  case 7: y = kiln_add(kiln_var_correction(a, KILN_DIMS(0, 2), 2, 0), kiln_trace(kiln_select(a, 2, 0))); break;
  }
  kiln_keep(y);
  kiln_scope_end();
  kiln_release(a);
  c->reduces = j >= 4;   /* sums may associate differently on the two back ends */
  return finish(c, y, (ref_tol){1e-4, 1e-4});
}

/* Scans: one thread per line, the carried accumulator in order, along the
 * last dim and along the first (threads then read consecutive columns),
 * fused with producers and consumers; ties and nans for cummax/cummin.
 * Then sorts and top-k, one thread per line. */
static const char *const scan_names[] = {"cumsum_f32_last", "cumsum_f32_first", "cumsum_fused", "cumprod_f64",
                                         "cumsum_i32", "cumsum_bool", "logcumsumexp_f32", "cummax_f32",
                                         "cummax_idx_f32", "cummin_idx_i16", "cummin_f16", "cumsum_bf16_mid",
                                         "sort_f32", "argsort_f32_desc", "sort_i16_first", "topk_f32",
                                         "topk_idx_u8", "sort_f16_T", "argsort_bool", "topk_small_bf16"};
#define NSCANS ((int)(sizeof scan_names / sizeof *scan_names))

static bool fam_scan(int j, cuda_case *c) {
  snprintf(c->name, sizeof c->name, "scan_%s", scan_names[j]);
  ref_tol tol = {1e-5, 1e-5}, exact = {0, 0};
  kiln_tensor *y = NULL;
  kiln_scope_begin();
  switch (j) {
  case 0: y = kiln_cumsum(data(KILN_F32, KILN_SHAPE(9, 300), 1, TU_SMALL), -1); break;
  case 1: y = kiln_cumsum(data(KILN_F32, KILN_SHAPE(300, N1), 2, TU_SMALL), 0); break;
  case 2: y = kiln_adds(kiln_cumsum(kiln_muls(data(KILN_F32, KILN_SHAPE(7, N1), 3, TU_SMALL), 2), 1), 1); break;
  case 3: y = kiln_cumprod(data(KILN_F64, KILN_SHAPE(5, 11), 4, TU_SMALL), 1); break;
  case 4: y = kiln_cumsum(data(KILN_I32, KILN_SHAPE(6, N1), 5, TU_FULL), 1); tol = exact; break;
  case 5: y = kiln_cumsum(bool_rows(6, N1), 1); tol = exact; break;
  case 6: y = kiln_logcumsumexp(data(KILN_F32, KILN_SHAPE(6, N1), 6, TU_SMALL), -1); break;
  case 7: kiln_cummax(tie_data(6, N1), 1, &y, NULL); tol = exact; break;
  case 8: kiln_cummax(data(KILN_F32, KILN_SHAPE(6, N1), 7, TU_FULL), 1, NULL, &y); tol = exact; break;
  case 9: kiln_cummin(data(KILN_I16, KILN_SHAPE(N1, 6), 8, TU_FULL), 0, NULL, &y); tol = exact; break;
  case 10: kiln_cummin(data(KILN_F16, KILN_SHAPE(6, N1), 9, TU_MODERATE), 1, &y, NULL); tol = exact; break;
  case 11: y = kiln_cumsum(data(KILN_BF16, KILN_SHAPE(3, 17, 5), 10, TU_SMALL), 1); tol = (ref_tol){1e-2, 1e-2}; break;
  /* sorts: one thread per line; TU_FULL brings nan, inf and -0, TU_SMALL ties */
  case 12: kiln_sort(data(KILN_F32, KILN_SHAPE(6, N1), 11, TU_FULL), 1, 0, 1, &y, NULL); tol = exact; break;
  case 13: y = kiln_argsort(data(KILN_F32, KILN_SHAPE(6, N1), 12, TU_SMALL), -1, 1, 1); tol = exact; break;
  case 14: kiln_sort(data(KILN_I16, KILN_SHAPE(N1, 5), 13, TU_FULL), 0, 0, 1, &y, NULL); tol = exact; break;
  case 15: kiln_topk(data(KILN_F32, KILN_SHAPE(5, 300), 14, TU_FULL), 8, 1, 1, 1, &y, NULL); tol = exact; break;
  case 16: kiln_topk(data(KILN_U8, KILN_SHAPE(5, N1), 15, TU_SMALL), 4, 1, 1, 1, NULL, &y); tol = exact; break;
  case 17:
    kiln_sort(kiln_transpose(data(KILN_F16, KILN_SHAPE(N1, 4), 16, TU_MODERATE), 0, 1), 1, 0, 1, &y, NULL);
    tol = exact;
    break;
  case 18: y = kiln_argsort(bool_rows(6, N1), 1, 0, 1); tol = exact; break;
  default: kiln_topk(data(KILN_BF16, KILN_SHAPE(4, N1), 17, TU_SMALL), 3, -1, 0, 1, &y, NULL); tol = exact; break;
  }
  kiln_keep(y);
  kiln_scope_end();
  c->reduces = j == 6;   /* exp and log differ between the back ends by an ulp */
  return finish(c, y, tol);
}

/* Long scans (a line of 2^14, few lines): split_scan's two passes for the
 * GPU, block totals (a row per block), their scan, a thread per block
 * rescanning it from its offset; each kernel emulated on the values the
 * ones before it store. Ties, nans and infinities (tie_data's lines). */
#define LONG_SCAN (1 << 14)
static const char *const long_names[] = {"cumsum_fused_f32", "logcumsumexp_f32", "cummax_idx_f32", "cummin_i32",
                                         "cummin_idx_i64"};
#define NLONG ((int)(sizeof long_names / sizeof *long_names))

static bool fam_long_scan(int j, cuda_case *c) {
  snprintf(c->name, sizeof c->name, "long_scan_%s", long_names[j]);
  kiln_tensor *y = NULL;
  kiln_scope_begin();
  switch (j) {
  case 0: y = kiln_adds(kiln_cumsum(kiln_muls(data(KILN_F32, KILN_SHAPE(2, LONG_SCAN), 30, TU_SMALL), 2), -1), 1); break;
  case 1: y = kiln_logcumsumexp(tie_data(4, LONG_SCAN), 1); break;
  case 2: kiln_cummax(tie_data(4, LONG_SCAN), 1, NULL, &y); break;
  case 3: kiln_cummin(data(KILN_I32, KILN_SHAPE(1, LONG_SCAN), 31, TU_FULL), -1, &y, NULL); break;
  default: kiln_cummin(data(KILN_I64, KILN_SHAPE(1, LONG_SCAN), 32, TU_FULL), -1, NULL, &y); break;
  }
  kiln_keep(y);
  kiln_scope_end();
  c->per_kernel = true;
  c->reduces = j < 2;   /* sums, exp and log may round otherwise on the two back ends */
  return finish(c, y, j < 2 ? (ref_tol){1e-5, 1e-5} : (ref_tol){0, 0});
}

/* ---- shape-generic kernels (KILN_DYNAMIC=1): each structure at two shapes
 * whose sizes all differ. Both must give one kernel, with the same CUDA C;
 * only the launch's range and grid follow the shape. */
#define NGENERIC 8
static bool fam_generic(int j, cuda_case *c) {
  static const char *names[NGENERIC] = {"ew_bcast", "softmax", "grid_sum", "row_sum", "vec_1d", "transposed",
                                        "cumsum", "argmax_rows"};
  static const int64_t shapes[NGENERIC][2][2] = {
    {{37, 41}, {50, 29}}, {{33, 70}, {12, 257}}, {{300, 70}, {1000, 77}}, {{45, 300}, {20, 513}},
    {{1, 1000}, {1, 4099}}, {{41, 37}, {29, 50}}, {{20, 33}, {7, 100}}, {{9, 31}, {40, 65}}};
  int k = j / 2, at = j % 2;
  int64_t r = shapes[k][at][0], n = shapes[k][at][1];
  snprintf(c->name, sizeof c->name, "generic_%s_%lldx%lld", names[k], (long long)r, (long long)n);
  c->generic = true;
  kiln_tensor *a = data(KILN_F32, KILN_SHAPE(r, n), 3 + (uint64_t)j, TU_SMALL);
  kiln_tensor *b = data(KILN_F32, KILN_SHAPE(r, n), 4 + (uint64_t)j, TU_SMALL);
  kiln_tensor *y = NULL;
  ref_tol tol = {1e-5, 1e-5};
  kiln_scope_begin();
  switch (k) {
  case 0: y = kiln_relu(kiln_add(kiln_mul(a, b), kiln_select(b, 0, 0))); break;   /* a row of b, broadcast */
  case 1: y = kiln_softmax(kiln_muls(a, 2), -1); break;
  case 2: y = kiln_sum(kiln_mul(a, b)); tol = (ref_tol){1e-4, 1e-3}; break;
  case 3: y = kiln_sum_dims(a, 1, (const int64_t[]){1}, 0); tol = (ref_tol){1e-4, 1e-4}; break;
  case 4: y = kiln_muls(kiln_exp(kiln_reshape(a, KILN_SHAPE(n))), 0.5); break;
  case 5: y = kiln_add(kiln_T(a), kiln_reshape(b, KILN_SHAPE(n, r))); break;
  case 6: y = kiln_cumsum(a, 1); tol = (ref_tol){1e-4, 1e-4}; break;
  default: y = kiln_argmax_dim(a, 1, 0); tol = (ref_tol){0, 0}; break;
  }
  kiln_keep(y);
  kiln_scope_end();
  kiln_release(a);
  kiln_release(b);
  c->reduces = k != 0 && k != 5 && k != 7;   /* sums, and exp: an ulp apart between the back ends */
  return finish(c, y, tol);
}

/* Backward graphs (kiln_grad): what the forward's kernels read, the
 * gradients' kernels read again, fused with their own work; each case one
 * gradient (others are the same kernels). */
static bool fam_backward(int j, cuda_case *c) {
  static const char *names[] = {"grad_w1", "grad_softmax", "grad_cross_entropy", "grad_layer_norm", "grad_linear_w",
                                "grad_conv2d_x", "grad_max_pool", "grad_cumprod"};
  snprintf(c->name, sizeof c->name, "%s", names[j]);
  kiln_scope_begin();
  kiln_tensor *a = data(KILN_F32, KILN_SHAPE(6, 33), 41, TU_SMALL), *b = data(KILN_F32, KILN_SHAPE(6, 33), 42, TU_SMALL);
  kiln_tensor *y = NULL, *wrt = a, *g = NULL;
  switch (j) {
  case 0: y = kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), data(KILN_F32, KILN_SHAPE(33), 43, TU_SMALL))), kiln_sigmoid(a)); break;
  case 1: y = kiln_mul(kiln_softmax(a, -1), b); break;
  case 2: y = kiln_cross_entropy(a, kiln_from_data(((const int64_t[]){0, 5, 32, 7, 7, 1}), KILN_I64, KILN_SHAPE(6)), NULL, "mean", -100, 0.1); break;
  case 3: wrt = data(KILN_F32, KILN_SHAPE(33), 44, TU_SMALL), y = kiln_mul(kiln_layer_norm(a, 1, wrt, NULL, 1e-5), b); break;
  case 4: wrt = data(KILN_F32, KILN_SHAPE(5, 33), 45, TU_SMALL), y = kiln_tanh(kiln_linear(a, wrt, NULL)); break;
  case 5: {
    wrt = data(KILN_F32, KILN_SHAPE(2, 3, 7, 6), 46, TU_SMALL);
    kiln_tensor *w = data(KILN_F32, KILN_SHAPE(4, 3, 3, 3), 47, TU_SMALL);
    y = kiln_conv2d(wrt, w, NULL, 1, (int64_t[]){2}, 1, (int64_t[]){1}, 0, NULL, 1);
    break;
  }
  case 6: wrt = data(KILN_F32, KILN_SHAPE(2, 3, 8, 8), 48, TU_SMALL), y = kiln_max_pool2d(wrt, 1, (int64_t[]){3}, 1, (int64_t[]){2}, 1, (int64_t[]){1}, 0, NULL, 0); break;
  case 7: y = kiln_cumprod(kiln_adds(kiln_sigmoid(a), 0.5), 1); break;
  }
  kiln_tensor *dy = kiln_ndim(y) ? kiln_cos(kiln_reshape(kiln_arange(0, (double)kiln_numel(y), 1), kiln_ndim(y), kiln_shape(y))) : NULL;
  if (dy) dy = kiln_cast(dy, kiln_dtype_of(y));
  if (kiln_grad(y, dy, 1, &wrt, &g) != KILN_OK) g = kiln_add(a, kiln_zeros(KILN_SHAPE(7), KILN_F32));   /* an error the harness reports */
  kiln_keep(g);
  kiln_scope_end();
  c->reduces = true;
  c->per_kernel = j == 3 || j == 7;   /* several kernels, none a GEMM (those cuBLASLt runs: test_cuda_codegen only) */
  return finish(c, g, (ref_tol){2e-4, 2e-4});
}

static const family *families(int *n) {
  static family f[19];
  if (!f[0].build) {
    f[0] = (family){count_ops(1) * NDT, fam_unary};
    f[1] = (family){count_ops(2) * NDT, fam_binary};
    f[2] = (family){NDT * NDT, fam_cast};
    f[3] = (family){2 * NDT, fam_ternary};
    f[4] = (family){10, fam_random};
    f[5] = (family){10, fam_misc};
    f[6] = (family){15, fam_reduce};
    f[7] = (family){NLENS * NROWOPS, fam_rows};
    f[8] = (family){14, fam_whole};
    f[9] = (family){11, fam_grid};
    f[10] = (family){8, fam_vector};
    f[11] = (family){4, fam_zero_division};
    f[12] = (family){8, fam_index};
    f[13] = (family){8, fam_shape_ops};
    f[14] = (family){NSCANS, fam_scan};
    f[15] = (family){NLONG, fam_long_scan};
    f[16] = (family){cuda_attn_case_count(), cuda_attn_case_build};
    f[17] = (family){2 * NGENERIC, fam_generic};
    f[18] = (family){8, fam_backward};
  }
  *n = 19;
  return f;
}

int cuda_case_count(void) {
  int n, total = 0;
  const family *f = families(&n);
  for (int i = 0; i < n; i++) total += f[i].count;
  return total;
}

bool cuda_case_build(int i, cuda_case *c) {
  int n;
  const family *f = families(&n);
  *c = (cuda_case){0};
  for (int k = 0; k < n; i -= f[k++].count)
    if (i < f[k].count) return f[k].build(i, c);
  return false;
}

int cuda_case_plan(const cuda_case *c, rt_planned **plan) {
  if (c->generic) kiln_set_dynamic(KILN_DYNAMIC_ON);
  int n = rt_plan_for(KILN_CUDA, 1, (kiln_tensor *const *)&c->t, plan);
  if (c->generic) kiln_set_dynamic(KILN_DYNAMIC_AUTO);
  return n;
}
