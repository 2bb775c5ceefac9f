/* test_matmul.c: matrix products. The GEMM code generator on hand-built
 * KS_GEMM kernels (edge tiles, depth blocks, row ranges as threads split
 * them, batches, strides, storage dtypes, epilogues, zmm FMAs); matmul, mm,
 * dot and linear against the reference evaluator, fused and eager, for every
 * PyTorch shape rule; the fused bias+activation epilogue; error paths. */
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "codegen_cpu/cpu.h"
#include "util/testutil.h"

/* ---- the code generator on hand-built kernels ---------------------------- */
typedef struct {
  int64_t batch, m, n, k;
  kiln_dtype dt;
  bool ta, tb;        /* A stored k-major (A^T contiguous), B stored n-major (W of linear) */
  bool epilogue;      /* relu(acc + bias[j]) instead of acc */
} gk_row;

static const gk_row gk_rows[] = {
  {1, 67, 131, 29, KILN_F32, false, false, false},
  {1, 1, 1, 1, KILN_F32, false, false, false},
  {1, 5, 7, 0, KILN_F32, false, false, true},       /* K = 0: bias only */
  {1, 100, 50, 2100, KILN_F32, false, false, false}, /* rows past one row block, two depth blocks */
  {1, 13, 1100, 17, KILN_F32, false, true, true},    /* two column blocks, W^T read in place */
  {1, 37, 45, 4500, KILN_F32, true, true, true},     /* three depth blocks, both transposed */
  {3, 9, 21, 11, KILN_F32, false, false, true},      /* a gemm inside a batch loop */
  {1, 67, 131, 29, KILN_F64, false, false, true},
  {2, 30, 19, 2070, KILN_F64, true, false, false}, /* three depth blocks (f64 ones are 1024 deep) */
  {1, 29, 53, 31, KILN_F16, false, true, true},
  {1, 29, 53, 31, KILN_BF16, true, false, true},
};

/* Multiples of 1/8 in [-1, 1]: exact in every float dtype, and every sum of
 * products is exact in f32, so kiln and the loop below agree bit for bit. */
static double gk_value(int64_t i, int64_t seed) { return (double)((i * 7919 + seed * 104729) % 17) / 8 - 1; }

static void *gk_buffer(kiln_dtype dt, int64_t n, int64_t seed) {
  void *p = calloc((size_t)(n > 0 ? n : 1), ir_dtypes[dt].size);
  ck_assert(p != NULL);
  for (int64_t i = 0; i < n; i++) ref_store_f(dt, p, i, gk_value(i, seed));
  return p;
}

/* for b (if batched): gemm i, j: out[(b*m + i)*n + j] = acc [relu(acc + bias[j])] */
static kernel *gk_kernel(const gk_row *r) {
  kernel *k = k_new();
  int64_t m = r->m, n = r->n, kd = r->k;
  int out = k_param(k, r->dt, true, r->batch * m * n);
  int a = k_param(k, r->dt, false, r->batch * m * kd), b = k_param(k, r->dt, false, r->batch * kd * n);
  int bias = k_param(k, r->dt, false, n);
  kiln_dtype ct = ir_compute_dtype(r->dt);
  kstmt *g = ks_gemm(k, k_acc(k), ct, m, n, kd);
  kexpr *bv = kx_int(k, KILN_I64, 0);
  if (r->batch > 1) {
    int v = k_var(k);
    k->body = ks_loop(k, v, r->batch, KL_SERIAL);
    k->body->body = g;
    bv = kx_var(k, v);
  } else {
    k->body = g;
  }
  g->gemm.a_buf = a, g->gemm.b_buf = b;
  g->gemm.a_off = kx_imul(k, bv, kx_int(k, KILN_I64, m * kd));
  g->gemm.b_off = kx_imul(k, bv, kx_int(k, KILN_I64, kd * n));
  g->gemm.a_si = r->ta ? 1 : kd, g->gemm.a_sk = r->ta ? m : 1;
  g->gemm.b_sk = r->tb ? 1 : n, g->gemm.b_sn = r->tb ? kd : 1;
  kexpr *row = kx_iadd(k, kx_imul(k, bv, kx_int(k, KILN_I64, m)), kx_var(k, g->var));
  kexpr *j = kx_var(k, g->gemm.var_j), *v = kx_acc(k, g->acc, ct);
  if (r->epilogue)
    v = kx_op(k, IR_RELU, ct, kx_op(k, IR_ADD, ct, v, kx_load(k, bias, j, ct), NULL), NULL, NULL);
  g->body = ks_store(k, out, kx_iadd(k, kx_imul(k, row, kx_int(k, KILN_I64, n)), j), v);
  return k;
}

static double gk_expected(const gk_row *r, const void *a, const void *b, const void *bias, int64_t bt,
                          int64_t i, int64_t j) {
  double s = 0;
  for (int64_t p = 0; p < r->k; p++) {
    int64_t ai = bt * r->m * r->k + (r->ta ? p * r->m + i : i * r->k + p);
    int64_t bi = bt * r->k * r->n + (r->tb ? j * r->k + p : p * r->n + j);
    s += ref_load_f(r->dt, a, ai) * ref_load_f(r->dt, b, bi);
  }
  if (r->epilogue) s += ref_load_f(r->dt, bias, j), s = s < 0 ? 0 : s;
  return ref_round(r->dt, s);
}

/* Runs the kernel the way the runtime does: a top-level gemm in row ranges
 * (three uneven ones, as threads would take them), else once. */
static void gk_run(cpu_kernel_fn fn, void *const *bufs, const gk_row *r) {
  if (r->batch > 1) {
    fn(bufs, 0, 1);
    return;
  }
  int64_t cut[4] = {0, r->m / 3, r->m / 3 + r->m / 2, r->m};
  for (int t = 0; t < 3; t++) fn(bufs, cut[t], cut[t + 1]);
}

/* Runs fn, compiled from gk_kernel(r), on fresh data and checks every element. */
static void gk_check(cpu_kernel_fn fn, const gk_row *r, int row) {
  int64_t nout = r->batch * r->m * r->n;
  void *out = gk_buffer(r->dt, nout, 9), *a = gk_buffer(r->dt, r->batch * r->m * r->k, 1);
  void *b = gk_buffer(r->dt, r->batch * r->k * r->n, 2), *bias = gk_buffer(r->dt, r->n, 3);
  gk_run(fn, (void *[]){out, a, b, bias}, r);
  for (int64_t e = 0; e < nout; e++) {
    int64_t j = e % r->n, i = e / r->n % r->m, bt = e / r->n / r->m;
    double want = gk_expected(r, a, b, bias, bt, i, j), got = ref_load_f(r->dt, out, e);
    ck_assert_msg(got == want, "row %d: [%lld,%lld,%lld] = %g, expected %g", row, (long long)bt, (long long)i,
                  (long long)j, got, want);
  }
  free(out), free(a), free(b), free(bias);
}

START_TEST(gemm_codegen) {
  const gk_row *r = &gk_rows[_i];
  char *err = NULL;
  cpu_jit *jit = cpu_jit_new(&err);
  ck_assert_msg(jit != NULL, "cpu_jit_new: %s", err ? err : "");
  kernel *k = gk_kernel(r);
  ir_str ir = {0};
  cpu_code *code = cpu_jit_compile(jit, k, NULL, &ir, &err);
  ck_assert_msg(code != NULL, "compile: %s", err ? err : "");
  cpu_kernel_fn fn = cpu_code_fn(code);
  /* The micro-kernel, in the driver compiled with this first GEMM of the
   * JIT, is explicit zmm FMAs, not left to the auto-vectorizer. */
  const char *fma = ir_compute_dtype(r->dt) == KILN_F64 ? "llvm.fma.v8f64" : "llvm.fma.v16f32";
  ck_assert_msg(strstr(ir.s, fma), "row %d: no %s in the optimised IR", _i, fma);
  gk_check(fn, r, _i);
  ir_str_free(&ir);
  k_free(k);
  cpu_jit_free(jit);
}
END_TEST

/* One driver per dtype serves every shape: f32 kernels of other shapes,
 * strides, batches and epilogues in the same JIT only declare the driver
 * the first one defined, and are right; f16 operands get their own. */
START_TEST(gemm_driver_shared) {
  static const int order[] = {0, 3, 4, 6, 2, 9};
  char *err = NULL;
  cpu_jit *jit = cpu_jit_new(&err);
  ck_assert_msg(jit != NULL, "cpu_jit_new: %s", err ? err : "");
  for (int i = 0; i < 6; i++) {
    const gk_row *r = &gk_rows[order[i]];
    kernel *k = gk_kernel(r);
    ir_str ir = {0};
    cpu_code *code = cpu_jit_compile(jit, k, NULL, &ir, &err);
    ck_assert_msg(code != NULL, "compile: %s", err ? err : "");
    cpu_kernel_fn fn = cpu_code_fn(code);
    const char *driver = r->dt == KILN_F16 ? "kiln.gemm.f32.f16.f16" : "kiln.gemm.f32.f32.f32";
    char def[64], call[64];
    snprintf(def, sizeof def, "define void @%s(", driver);
    snprintf(call, sizeof call, "call void @%s(", driver);
    bool defines = strstr(ir.s, def) != NULL;
    ck_assert_msg(defines == (i == 0 || r->dt == KILN_F16), "row %d: %s %sdefined", order[i], driver,
                  defines ? "" : "not ");
    ck_assert_msg(strstr(ir.s, call), "row %d: %s not called", order[i], driver);
    gk_check(fn, r, order[i]);
    ir_str_free(&ir);
    k_free(k);
  }
  cpu_jit_free(jit);
}
END_TEST

/* ---- matmul, mm, dot, linear against the oracle ------------------------- */
typedef struct { int ndim; int64_t d[KILN_MAX_DIMS]; } shape_t;
#define SHAPE(...) ((shape_t){KILN_NARGS_(__VA_ARGS__), {__VA_ARGS__}})

typedef enum { V_PLAIN, V_TRANSPOSE_A, V_TRANSPOSE_B, V_SLICE_A } view_kind;

typedef struct {
  shape_t a, b;
  view_kind view;     /* how the operands are made non-contiguous */
} mm_row;

static const mm_row mm_rows[] = {
  {SHAPE(3), SHAPE(3), V_PLAIN},                 /* dot: a 0-dim result */
  {SHAPE(5), SHAPE(5, 7), V_PLAIN},              /* 1-D first operand */
  {SHAPE(6, 5), SHAPE(5), V_PLAIN},              /* 1-D second operand */
  {SHAPE(4, 5), SHAPE(5, 3), V_PLAIN},
  {SHAPE(2, 4, 5), SHAPE(5, 3), V_PLAIN},        /* batch x matrix: one folded product */
  {SHAPE(4, 5), SHAPE(2, 5, 3), V_PLAIN},        /* the matrix broadcasts */
  {SHAPE(2, 1, 4, 5), SHAPE(3, 5, 6), V_PLAIN},  /* batch dims broadcast both ways */
  {SHAPE(5), SHAPE(2, 5, 3), V_PLAIN},
  {SHAPE(2, 4, 5), SHAPE(5), V_PLAIN},
  {SHAPE(0, 5), SHAPE(5, 3), V_PLAIN},
  {SHAPE(4, 0), SHAPE(0, 3), V_PLAIN},           /* K = 0: zeros */
  {SHAPE(4, 5), SHAPE(5, 0), V_PLAIN},
  {SHAPE(1, 1), SHAPE(1, 1), V_PLAIN},
  {SHAPE(67, 29), SHAPE(29, 131), V_PLAIN},
  {SHAPE(67, 29), SHAPE(29, 131), V_TRANSPOSE_A},
  {SHAPE(67, 29), SHAPE(29, 131), V_TRANSPOSE_B},
  {SHAPE(67, 29), SHAPE(29, 131), V_SLICE_A},
  {SHAPE(3, 13, 2100), SHAPE(3, 2100, 17), V_TRANSPOSE_B},  /* batched, two depth blocks */
  {SHAPE(2, 4, 5), SHAPE(5, 3), V_TRANSPOSE_A},  /* a batch that cannot fold */
  /* the driver's small path (B row-major, n and K x N small): 32-row blocks
   * of 8-row tiles and single rows, a masked last vector, strided A */
  {SHAPE(70, 24), SHAPE(24, 50), V_PLAIN},
  {SHAPE(70, 24), SHAPE(24, 50), V_TRANSPOSE_A},
  {SHAPE(37, 40), SHAPE(40, 64), V_SLICE_A},
  {SHAPE(256, 256), SHAPE(256, 256), V_PLAIN},
};
#define NMM ((int)(sizeof mm_rows / sizeof *mm_rows))

typedef struct {
  const mm_row *row;
  kiln_dtype dt;
} mm_ctx;

/* A tensor of the given shape whose last two dims are a transposed (or
 * step-2 sliced) view of stored data. */
static kiln_tensor *operand(const shape_t *s, kiln_dtype dt, uint64_t seed, bool transpose, bool slice) {
  shape_t st = *s;
  int nd = s->ndim;
  if (transpose) st.d[nd - 1] = s->d[nd - 2], st.d[nd - 2] = s->d[nd - 1];
  if (slice) st.d[nd - 1] *= 2;
  kiln_tensor *t = tu_data(dt, st.ndim, st.d, seed, TU_SMALL);
  if (transpose) return kiln_transpose(t, -1, -2);
  return slice ? kiln_slice(t, -1, 0, KILN_END, 2) : t;
}

static kiln_tensor *build_matmul(const void *ctx) {
  const mm_ctx *c = ctx;
  const mm_row *r = c->row;
  bool mat_a = r->a.ndim >= 2, mat_b = r->b.ndim >= 2;
  kiln_tensor *a = operand(&r->a, c->dt, 1, mat_a && r->view == V_TRANSPOSE_A, mat_a && r->view == V_SLICE_A);
  kiln_tensor *b = operand(&r->b, c->dt, 2, mat_b && r->view == V_TRANSPOSE_B, false);
  return kiln_matmul(a, b);
}

/* Sums of K products of |x| <= 4 in the compute type, then the storage
 * dtype's rounding. */
static ref_tol product_tol(kiln_dtype dt, int64_t k) {
  ref_tol t = ref_tol_dtype(dt);
  double eps = dt == KILN_F64 ? 0x1p-52 : 0x1p-23;
  t.atol += (double)(k + 1) * 16 * eps * 4;
  t.rtol += 4 * eps;
  return t;
}

static int64_t row_k(const mm_row *r) { return r->a.d[r->a.ndim - 1]; }

static void check_matmul_row(const mm_row *r, kiln_dtype dt, int i) {
  mm_ctx c = {r, dt};
  char why[512];
  ck_assert_msg(tu_check_fused_eager(build_matmul, &c, dt, product_tol(dt, row_k(r)), why, sizeof why),
                "row %d %s: %s", i, ir_dtypes[dt].name, why);
}

START_TEST(matmul_rows_f32) { check_matmul_row(&mm_rows[_i], KILN_F32, _i); }
END_TEST

/* The other float dtypes on every row but the largest. */
START_TEST(matmul_rows_dtypes) {
  static const kiln_dtype dts[] = {KILN_F64, KILN_F16, KILN_BF16};
  for (int d = 0; d < 3; d++) check_matmul_row(&mm_rows[_i], dts[d], _i);
}
END_TEST

typedef struct {
  int which;          /* 0 mm, 1 dot, 2 linear with bias, 3 linear without, 4 linear 3-D x, 5 linear 1-D x */
  kiln_dtype dt;
} fn_ctx;

static kiln_tensor *build_fn(const void *ctx) {
  const fn_ctx *c = ctx;
  kiln_dtype dt = c->dt;
  switch (c->which) {
  case 0: return kiln_mm(tu_data(dt, KILN_SHAPE(7, 9), 1, TU_SMALL), tu_data(dt, KILN_SHAPE(9, 4), 2, TU_SMALL));
  case 1: return kiln_dot(tu_data(dt, KILN_SHAPE(33), 1, TU_SMALL), tu_data(dt, KILN_SHAPE(33), 2, TU_SMALL));
  case 2: case 3: case 4: case 5: {
    kiln_tensor *x = c->which == 4 ? tu_data(dt, KILN_SHAPE(2, 6, 10), 1, TU_SMALL)
                     : c->which == 5 ? tu_data(dt, KILN_SHAPE(10), 1, TU_SMALL)
                                     : tu_data(dt, KILN_SHAPE(6, 10), 1, TU_SMALL);
    kiln_tensor *b = c->which == 3 ? NULL : tu_data(dt, KILN_SHAPE(5), 3, TU_SMALL);
    return kiln_linear(x, tu_data(dt, KILN_SHAPE(5, 10), 2, TU_SMALL), b);
  }
  }
  return NULL;
}

START_TEST(mm_dot_linear) {
  static const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
  for (int d = 0; d < 4; d++) {
    fn_ctx c = {_i, dts[d]};
    char why[512];
    ck_assert_msg(tu_check_fused_eager(build_fn, &c, dts[d], product_tol(dts[d], 33), why, sizeof why),
                  "case %d %s: %s", _i, ir_dtypes[dts[d]].name, why);
  }
}
END_TEST

/* ---- integer products ------------------------------------------------------ */
/* PyTorch multiplies integer matrices too, wrapping in the operands' dtype:
 * a [b,m,k] x [k,n] (b = 0: 2-D) of small values, checked against an int64
 * loop; int8's 8 * 20 * 20 = 3200 wraps to -128 as in PyTorch. */
typedef struct {
  kiln_dtype dt;
  int64_t b, m, k, n;
  int64_t fill;  /* every element, or 0: a pattern in -3..7 (0..10 unsigned) */
} int_row;

static const int_row int_rows[] = {
  {KILN_I32, 0, 2, 3, 4, 0}, {KILN_I64, 2, 3, 4, 5, 0}, {KILN_I16, 3, 1, 7, 2, 0},
  {KILN_U8, 0, 4, 3, 1, 0},  {KILN_I8, 0, 2, 8, 2, 20},
};

static int64_t int_value(const int_row *r, int64_t i) {
  return r->fill ? r->fill : (i * 7) % 11 - (r->dt == KILN_U8 ? 0 : 3);
}

static kiln_tensor *int_tensor(const int_row *r, int ndim, const int64_t *shape, int64_t *v, int64_t n, int64_t salt) {
  for (int64_t i = 0; i < n; i++) v[i] = int_value(r, i + salt);
  kiln_tensor *t = kiln_from_data(v, KILN_I64, ndim, shape);
  return kiln_cast(t, r->dt);
}

/* The value v as the dtype stores it (two's-complement wrap). */
static int64_t wrap(kiln_dtype dt, int64_t v) {
  switch (dt) {
  case KILN_I8: return (int8_t)v;
  case KILN_U8: return (uint8_t)v;
  case KILN_I16: return (int16_t)v;
  case KILN_I32: return (int32_t)v;
  default: return v;
  }
}

START_TEST(integer_products) {
  const int_row *r = &int_rows[_i];
  int64_t nb = r->b ? r->b : 1, av[256], bv[256];
  kiln_scope_begin();
  kiln_tensor *a = r->b ? int_tensor(r, KILN_SHAPE(r->b, r->m, r->k), av, nb * r->m * r->k, 0)
                        : int_tensor(r, KILN_SHAPE(r->m, r->k), av, r->m * r->k, 0);
  kiln_tensor *b = int_tensor(r, KILN_SHAPE(r->k, r->n), bv, r->k * r->n, 5);
  ck_assert_int_eq(kiln_realize(a), KILN_OK);
  ck_assert_int_eq(kiln_realize(b), KILN_OK);
  kiln_tensor *c = kiln_matmul(a, b);
  ck_assert_int_eq(kiln_dtype_of(c), r->dt);
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize(c), KILN_OK);
  ck_assert_uint_eq(kiln_stats().kernels_launched, 1);  /* multiply, sum and cast fused */
  const int64_t *got = kiln_data(kiln_cast(c, KILN_I64));
  ck_assert_ptr_nonnull(got);
  for (int64_t p = 0; p < nb; p++)
    for (int64_t i = 0; i < r->m; i++)
      for (int64_t j = 0; j < r->n; j++) {
        int64_t want = 0;
        for (int64_t q = 0; q < r->k; q++)
          want += wrap(r->dt, av[(p * r->m + i) * r->k + q]) * wrap(r->dt, bv[q * r->n + j]);
        ck_assert_int_eq(got[(p * r->m + i) * r->n + j], wrap(r->dt, want));
      }
  kiln_scope_end();
}
END_TEST

/* The tutorial's own example: tensor([1, 2, 3]) @ itself is tensor(14). */
START_TEST(integer_dot) {
  kiln_scope_begin();
  kiln_tensor *t = kiln_arange(1, 4, 1);
  kiln_tensor *d = kiln_dot(t, t), *m = kiln_matmul(t, t);
  ck_assert_int_eq(kiln_ndim(d), 0);
  ck_assert_int_eq(*(const int64_t *)kiln_data(d), 14);
  ck_assert_int_eq(*(const int64_t *)kiln_data(m), 14);
  kiln_scope_end();
}
END_TEST

/* ---- fusion: the epilogue runs inside the matmul kernel ------------------ */
static kiln_tensor *build_relu_linear(const void *ctx) {
  (void)ctx;
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(33, 40), 1, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(24, 40), 2, TU_SMALL);
  return kiln_relu(kiln_linear(x, w, tu_data(KILN_F32, KILN_SHAPE(24), 3, TU_SMALL)));
}

START_TEST(relu_linear_is_one_kernel) {
  char why[512];
  ck_assert_msg(tu_check_fused_eager(build_relu_linear, NULL, KILN_F32, product_tol(KILN_F32, 40), why, sizeof why),
                "%s", why);
  kiln_scope_begin();
  kiln_tensor *y = build_relu_linear(NULL);
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_msg(kiln_stats().kernels_launched == 1, "relu(x @ W^T + b) took %llu kernels",
                (unsigned long long)kiln_stats().kernels_launched);
  kiln_scope_end();
}
END_TEST

/* A view of the epilogue that keeps the shape (a flip, a transpose of a
 * square) reads the product at other indices than the GEMM computes them:
 * the product is stored by a kernel of its own and the rest reads it (this
 * used to stop at an internal error in lowering). */
static kiln_tensor *build_viewed_epilogue(const void *ctx) {
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(24, 40), 1, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(24, 40), 2, TU_SMALL);
  kiln_tensor *y = kiln_relu(kiln_linear(x, w, tu_data(KILN_F32, KILN_SHAPE(24), 3, TU_SMALL)));
  return *(const int *)ctx ? kiln_T(y) : kiln_flip(kiln_clamp(y, -1.5, 2.5), KILN_DIMS(1));
}

START_TEST(viewed_epilogue_is_two_kernels) {
  char why[512];
  ck_assert_msg(tu_check_fused_eager(build_viewed_epilogue, &_i, KILN_F32, product_tol(KILN_F32, 40), why, sizeof why),
                "%s", why);
  kiln_scope_begin();
  kiln_tensor *y = build_viewed_epilogue(&_i);
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_uint_eq(kiln_stats().kernels_launched, 2);
  kiln_scope_end();
}
END_TEST

/* ---- errors -------------------------------------------------------------- */
typedef struct {
  int which;          /* the case of build_error */
  kiln_status status;
  const char *msg;    /* after "file:line: " */
} err_row;

static kiln_tensor *f32(int ndim, const int64_t *shape) { return kiln_zeros_at(__FILE__, __LINE__, ndim, shape, KILN_F32); }

/* Case i builds one failing op on line *line + i. */
static kiln_tensor *build_error(int i, int *line) {
  kiln_tensor *m32 = f32(KILN_SHAPE(3, 2)), *v3 = f32(KILN_SHAPE(3)), *v4 = f32(KILN_SHAPE(4));
  kiln_tensor *m23 = f32(KILN_SHAPE(2, 3)), *s = f32(0, NULL);
  kiln_tensor *b22 = kiln_zeros(KILN_SHAPE(2, 2), KILN_BOOL), *d32 = kiln_zeros(KILN_SHAPE(2, 2), KILN_F64);
  kiln_tensor *x45 = f32(KILN_SHAPE(4, 5)), *w34 = f32(KILN_SHAPE(3, 4)), *w35 = f32(KILN_SHAPE(3, 5));
  *line = __LINE__ + 2;
  switch (i) {
  case 0: return kiln_matmul(m32, m32);
  case 1: return kiln_mm(v3, m32);
  case 2: return kiln_dot(m23, v3);
  case 3: return kiln_dot(v3, v4);
  case 4: return kiln_matmul(s, v3);
  case 5: return kiln_matmul(f32(KILN_SHAPE(2, 3, 4)), f32(KILN_SHAPE(3, 4, 5)));
  case 6: return kiln_mm(f32(KILN_SHAPE(2, 2)), d32);
  case 7: return kiln_matmul(b22, b22);
  case 8: return kiln_matmul(m32, NULL);
  case 9: return kiln_linear(x45, w34, NULL);
  case 10: return kiln_linear(x45, w35, v4);
  case 11: return kiln_linear(x45, f32(KILN_SHAPE(2, 3, 5)), NULL);
  case 12: return kiln_matmul(kiln_matmul(m32, m32), m23);  /* sticky: the inner error */
  }
  return NULL;
}

static const err_row err_rows[] = {
  {0, KILN_ERR_SHAPE, "matmul: shapes (3,2) and (3,2) cannot be multiplied (2 != 3)"},
  {1, KILN_ERR_SHAPE, "mm: shapes (3,) and (3,2) cannot be multiplied (mm needs 2-D tensors)"},
  {2, KILN_ERR_SHAPE, "dot: shapes (2,3) and (3,) cannot be multiplied (dot needs 1-D tensors)"},
  {3, KILN_ERR_SHAPE, "dot: shapes (3,) and (4,) cannot be multiplied (3 != 4)"},
  {4, KILN_ERR_SHAPE, "matmul: shapes () and (3,) cannot be multiplied (both arguments need at least 1 dim)"},
  {5, KILN_ERR_SHAPE, "matmul: shapes (2,3,4) and (3,4,5) cannot be multiplied (batch dims do not broadcast)"},
  {6, KILN_ERR_DTYPE, "mm: expected m1 and m2 to have the same dtype, but got: float32 != float64"},
  {7, KILN_ERR_DTYPE, "matmul: bool tensors cannot be multiplied, got bool (2,2) and bool (2,2)"},
  {8, KILN_ERR_ARG, "matmul: argument 2 is NULL"},
  {9, KILN_ERR_SHAPE, "linear: shapes (4,5) and (4,3) cannot be multiplied (5 != 4)"},
  {10, KILN_ERR_SHAPE, "linear: bias of shape (4,) does not match 3 output features"},
  {11, KILN_ERR_SHAPE, "linear: shapes (4,5) and (2,3,5) cannot be multiplied (the weight must be 1-D or 2-D)"},
  {12, KILN_ERR_SHAPE, "matmul: shapes (3,2) and (3,2) cannot be multiplied (2 != 3)"},
};
#define NERR ((int)(sizeof err_rows / sizeof *err_rows))

START_TEST(error_paths) {
  const err_row *r = &err_rows[_i];
  kiln_scope_begin();
  int line0;
  kiln_tensor *t = build_error(r->which, &line0);
  char want[512];
  snprintf(want, sizeof want, "%s:%d: %s", __FILE__, line0 + r->which, r->msg);
  ck_assert_int_eq(kiln_status_of(t), r->status);
  ck_assert_str_eq(kiln_last_error(), want);
  ck_assert_int_eq(kiln_realize(t), r->status);
  ck_assert_str_eq(kiln_last_error(), want);
  kiln_scope_end();
}
END_TEST

static Suite *matmul_suite(void) {
  Suite *s = suite_create("matmul");
  tcase_add_loop_test(tu_tcase(s, "codegen"), gemm_codegen, 0, (int)(sizeof gk_rows / sizeof *gk_rows));
  tcase_add_test(tu_tcase(s, "driver"), gemm_driver_shared);
  tcase_add_loop_test(tu_tcase(s, "rows_f32"), matmul_rows_f32, 0, NMM);
  tcase_add_loop_test(tu_tcase(s, "rows_dtypes"), matmul_rows_dtypes, 0, NMM - 1);
  tcase_add_loop_test(tu_tcase(s, "mm_dot_linear"), mm_dot_linear, 0, 6);
  TCase *ints = tu_tcase(s, "integers");
  tcase_add_loop_test(ints, integer_products, 0, (int)(sizeof int_rows / sizeof *int_rows));
  tcase_add_test(ints, integer_dot);
  TCase *fusion = tu_tcase(s, "fusion");
  tcase_add_test(fusion, relu_linear_is_one_kernel);
  tcase_add_loop_test(fusion, viewed_epilogue_is_two_kernels, 0, 2);
  tcase_add_loop_test(tu_tcase(s, "errors"), error_paths, 0, NERR);
  return s;
}

KILN_TEST_MAIN(matmul_suite)
