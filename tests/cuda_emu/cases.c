/* cases.c: the CUDA test graphs (cases.h), as families of rows: each family
 * has a count and builds its j-th member. */
#include "cuda_emu/cases.h"
#include "util/testutil.h"

#include <stdio.h>
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

static bool usable(ir_op op, kiln_dtype dt) { return !(ir_op_has(op, IR_NOBOOL) && dt == KILN_BOOL); }

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
  kiln_tensor *b = data(dt, KILN_SHAPE(7), (uint64_t)j + 1, TU_MODERATE);
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

static const family *families(int *n) {
  static family f[7];
  if (!f[0].build) {
    f[0] = (family){count_ops(1) * NDT, fam_unary};
    f[1] = (family){count_ops(2) * NDT, fam_binary};
    f[2] = (family){NDT * NDT, fam_cast};
    f[3] = (family){2 * NDT, fam_ternary};
    f[4] = (family){10, fam_random};
    f[5] = (family){10, fam_misc};
    f[6] = (family){15, fam_reduce};
  }
  *n = 7;
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
