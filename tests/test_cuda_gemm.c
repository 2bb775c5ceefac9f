/* test_cuda_gemm.c: matrix products for cuBLASLt, without a GPU
 * (codegen_cuda/gemm.c, runtime/cublas.c). Each graph of the table is
 * planned for CUDA (rt_plan_graph: nothing runs) and its KS_GEMM kernel split into a
 * cuBLASLt call and a rest kernel; the call's epilogue, transposes and
 * batching are checked against the row. Then the whole plan runs on the
 * host: ordinary kernels and the rest on the CPU back end, the call through
 * lt_matmul below, which is cublasLtMatmul's column-major semantics written
 * out (transposes, leading dimensions, offsets, strided batches, bias, relu,
 * tanh gelu), and the result is compared with the reference evaluator: that
 * is what proves the folding of kiln's strides into cuBLASLt's terms without
 * a GPU. Every rest kernel is compiled by NVRTC for sm_80 and sm_90. Also:
 * the operands that are refused, the error without a driver, and loading
 * cuBLASLt (present on these machines; a wrong library gives clean errors).
 * The host run of CUDA plans also checks how fuse splits reductions to few
 * values for the grid. */
#include "check_main.h"
#include "codegen_cpu/cpu.h"
#include "codegen_cuda/cuda.h"
#include "runtime/device.h"
#include "runtime/inspect.h"
#include "runtime/rt.h"
#include "util/hostplan.h"
#include "util/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the graphs ----------------------------------------------------------- */
static uint64_t seed;

static kiln_tensor *in(kiln_dtype dt, int ndim, const int64_t *shape) {
  return tu_data(dt, ndim, shape, ++seed, TU_SMALL);
}

static kiln_tensor *T(kiln_tensor *t) { return kiln_transpose(t, -2, -1); }

static kiln_tensor *linear(kiln_dtype dt) {
  return kiln_linear(in(dt, KILN_SHAPE(6, 8)), in(dt, KILN_SHAPE(5, 8)), in(dt, KILN_SHAPE(5)));
}

static kiln_tensor *mm(kiln_dtype dt) { return kiln_mm(in(dt, KILN_SHAPE(5, 7)), in(dt, KILN_SHAPE(7, 3))); }

static kiln_tensor *g_plain(kiln_dtype dt) { return mm(dt); }
static kiln_tensor *g_xwt(kiln_dtype dt) { return kiln_matmul(in(dt, KILN_SHAPE(6, 8)), T(in(dt, KILN_SHAPE(5, 8)))); }
static kiln_tensor *g_atb(kiln_dtype dt) { return kiln_matmul(T(in(dt, KILN_SHAPE(7, 5))), in(dt, KILN_SHAPE(7, 3))); }
static kiln_tensor *g_atbt(kiln_dtype dt) {
  return kiln_matmul(T(in(dt, KILN_SHAPE(7, 5))), T(in(dt, KILN_SHAPE(3, 7))));
}
static kiln_tensor *g_batched(kiln_dtype dt) {
  return kiln_matmul(in(dt, KILN_SHAPE(4, 5, 7)), in(dt, KILN_SHAPE(4, 7, 3)));
}
static kiln_tensor *g_batched_t(kiln_dtype dt) {
  return kiln_matmul(in(dt, KILN_SHAPE(4, 5, 7)), T(in(dt, KILN_SHAPE(4, 3, 7))));
}
/* A 2-D operand times a batch: it is broadcast (batch stride 0). */
static kiln_tensor *g_bcast(kiln_dtype dt) {
  return kiln_matmul(in(dt, KILN_SHAPE(5, 7)), in(dt, KILN_SHAPE(4, 7, 3)));
}
/* b is broadcast over the first batch dim only: one call per index of it. */
static kiln_tensor *g_outer(kiln_dtype dt) {
  return kiln_matmul(in(dt, KILN_SHAPE(2, 3, 5, 7)), in(dt, KILN_SHAPE(3, 7, 4)));
}
/* A flipped batch: calls at offsets that run backwards. */
static kiln_tensor *g_flipped_batch(kiln_dtype dt) {
  return kiln_matmul(kiln_flip(in(dt, KILN_SHAPE(4, 5, 7)), KILN_DIMS(0)), in(dt, KILN_SHAPE(4, 7, 3)));
}
static kiln_tensor *g_batch4d(kiln_dtype dt) {
  return kiln_matmul(in(dt, KILN_SHAPE(2, 3, 5, 7)), in(dt, KILN_SHAPE(2, 3, 7, 4)));
}
/* [...,M,K] x [K,N] merges the rows: one 2-D product. */
static kiln_tensor *g_rows(kiln_dtype dt) {
  return kiln_matmul(in(dt, KILN_SHAPE(2, 3, 5, 7)), in(dt, KILN_SHAPE(7, 4)));
}
static kiln_tensor *g_vecmat(kiln_dtype dt) { return kiln_matmul(in(dt, KILN_SHAPE(7)), in(dt, KILN_SHAPE(7, 3))); }
static kiln_tensor *g_matvec(kiln_dtype dt) { return kiln_matmul(in(dt, KILN_SHAPE(5, 7)), in(dt, KILN_SHAPE(7))); }
static kiln_tensor *g_dot(kiln_dtype dt) { return kiln_dot(in(dt, KILN_SHAPE(7)), in(dt, KILN_SHAPE(7))); }
static kiln_tensor *g_linear(kiln_dtype dt) { return linear(dt); }
static kiln_tensor *g_linear_nobias(kiln_dtype dt) {
  return kiln_linear(in(dt, KILN_SHAPE(6, 8)), in(dt, KILN_SHAPE(5, 8)), NULL);
}
static kiln_tensor *g_linear_3d(kiln_dtype dt) {
  return kiln_relu(kiln_linear(in(dt, KILN_SHAPE(2, 3, 8)), in(dt, KILN_SHAPE(5, 8)), in(dt, KILN_SHAPE(5))));
}
static kiln_tensor *g_relu_linear(kiln_dtype dt) { return kiln_relu(linear(dt)); }
static kiln_tensor *g_gelu_tanh_linear(kiln_dtype dt) { return kiln_gelu_tanh(linear(dt)); }
static kiln_tensor *g_gelu_linear(kiln_dtype dt) { return kiln_gelu(linear(dt)); }
static kiln_tensor *g_affine_linear(kiln_dtype dt) { return kiln_adds(kiln_muls(linear(dt), 2), 1); }
static kiln_tensor *g_relu_mm(kiln_dtype dt) { return kiln_relu(mm(dt)); }
static kiln_tensor *g_gelu_tanh_mm(kiln_dtype dt) { return kiln_gelu_tanh(mm(dt)); }
/* The product is read outside relu too: relu cannot go to cuBLASLt. */
static kiln_tensor *g_relu_plus(kiln_dtype dt) {
  kiln_tensor *y = mm(dt);
  return kiln_add(kiln_relu(y), y);
}
/* A bias along the rows (kiln's i), not cuBLASLt's. */
static kiln_tensor *g_row_bias(kiln_dtype dt) { return kiln_add(mm(dt), in(dt, KILN_SHAPE(5, 1))); }
static kiln_tensor *g_batch_bias(kiln_dtype dt) {
  kiln_tensor *y = kiln_matmul(in(dt, KILN_SHAPE(3, 5, 7)), in(dt, KILN_SHAPE(3, 7, 4)));
  return kiln_relu(kiln_add(y, in(dt, KILN_SHAPE(4))));
}
/* A computed operand is stored by a kernel of its own first. */
static kiln_tensor *g_exp_operand(kiln_dtype dt) {
  return kiln_mm(kiln_exp(in(dt, KILN_SHAPE(5, 7))), in(dt, KILN_SHAPE(7, 3)));
}
/* Offsets and leading dimensions wider than the matrix. */
static kiln_tensor *g_sliced(kiln_dtype dt) {
  return kiln_mm(kiln_index(in(dt, KILN_SHAPE(8, 9)), "1:6, 2:9"), T(kiln_index(in(dt, KILN_SHAPE(4, 10)), "1:, :7")));
}
/* Operands cuBLASLt cannot read in place go through a contiguous copy
 * (passes/gemm_operands.c): a reversed row, a step, a broadcast row, and a
 * flipped view of a computed operand. */
static kiln_tensor *g_flipped_cols(kiln_dtype dt) {
  return kiln_mm(kiln_flip(in(dt, KILN_SHAPE(5, 7)), KILN_DIMS(1)), in(dt, KILN_SHAPE(7, 3)));
}
static kiln_tensor *g_stepped(kiln_dtype dt) {
  return kiln_mm(kiln_index(in(dt, KILN_SHAPE(5, 14)), ":, ::2"), in(dt, KILN_SHAPE(7, 3)));
}
static kiln_tensor *g_row_bcast(kiln_dtype dt) {
  return kiln_mm(kiln_expand(in(dt, KILN_SHAPE(1, 7)), KILN_SHAPE(5, 7)), in(dt, KILN_SHAPE(7, 3)));
}
static kiln_tensor *g_flipped_exp(kiln_dtype dt) {
  return kiln_relu(kiln_mm(in(dt, KILN_SHAPE(5, 7)), kiln_flip(kiln_exp(in(dt, KILN_SHAPE(7, 3))), KILN_DIMS(1))));
}
static kiln_tensor *g_zero_k(kiln_dtype dt) {
  return kiln_relu(kiln_mm(in(dt, KILN_SHAPE(3, 0)), in(dt, KILN_SHAPE(0, 4))));
}

/* Convolutions: the window (UNFOLD) is stored for cuBLASLt, then a batched
 * product per image (and group). */
static kiln_tensor *g_conv(kiln_dtype dt) {
  return kiln_relu(kiln_conv2d(in(dt, KILN_SHAPE(2, 3, 6, 5)), in(dt, KILN_SHAPE(4, 3, 3, 3)), in(dt, KILN_SHAPE(4)), 0,
                               NULL, 1, (int64_t[]){1}, 0, NULL, 1));
}
static kiln_tensor *g_conv_groups(kiln_dtype dt) {
  return kiln_conv2d(in(dt, KILN_SHAPE(2, 4, 5, 5)), in(dt, KILN_SHAPE(6, 2, 2, 3)), NULL, 1, (int64_t[]){2}, 0, NULL, 0,
                     NULL, 2);
}

typedef kiln_tensor *(*graph_fn)(kiln_dtype dt);

enum { ANY = -1 };
typedef struct {
  const char *name;
  graph_fn build;
  kiln_dtype dt;
  int bias;             /* the bias goes to cuBLASLt (1) or not (0) */
  cuda_act act;
  int rest;             /* a rest kernel runs after the call */
  int trans_a, trans_b; /* cuBLASLt's (its A is kiln's B) */
  int64_t batch;
  int nouter;
  bool call;            /* false: nothing to multiply */
} gemm_row;

#define NONE CUDA_ACT_NONE
#define RELU CUDA_ACT_RELU
#define GELU CUDA_ACT_GELU_TANH
static const gemm_row rows[] = {
  {"plain", g_plain, KILN_F32, 0, NONE, 0, 0, 0, 1, 0, true},
  {"x@W^T", g_xwt, KILN_F32, 0, NONE, 0, 1, 0, 1, 0, true},
  {"A^T@B", g_atb, KILN_F32, 0, NONE, 0, 0, 1, 1, 0, true},
  {"A^T@B^T", g_atbt, KILN_F32, 0, NONE, 0, 1, 1, 1, 0, true},
  {"batched", g_batched, KILN_F32, 0, NONE, 0, 0, 0, 4, 0, true},
  {"batched x@W^T", g_batched_t, KILN_F32, 0, NONE, 0, 1, 0, 4, 0, true},
  {"broadcast batch", g_bcast, KILN_F32, 0, NONE, 0, 0, 0, 4, 0, true},
  {"outer batch", g_outer, KILN_F32, 0, NONE, 0, 0, 0, 3, 1, true},
  {"4-d batch", g_batch4d, KILN_F32, 0, NONE, 0, 0, 0, 6, 0, true},
  {"flipped batch", g_flipped_batch, KILN_F32, 0, NONE, 0, 0, 0, 1, 1, true},
  {"merged rows", g_rows, KILN_F32, 0, NONE, 0, 0, 0, 1, 0, true},
  {"vector @ matrix", g_vecmat, KILN_F32, 0, NONE, ANY, ANY, ANY, 1, 0, true},
  {"matrix @ vector", g_matvec, KILN_F32, 0, NONE, ANY, ANY, ANY, 1, 0, true},
  {"dot", g_dot, KILN_F32, 0, NONE, ANY, ANY, ANY, 1, 0, true},
  {"linear", g_linear, KILN_F32, 1, NONE, 0, 1, 0, 1, 0, true},
  {"linear, no bias", g_linear_nobias, KILN_F32, 0, NONE, 0, 1, 0, 1, 0, true},
  /* the rows merge into a 2-D product; the reshape back to 3-d keeps the
   * row-major order, so the bias and relu stay in its epilogue */
  {"relu(linear 3-d)", g_linear_3d, KILN_F32, 1, RELU, 0, 1, 0, 1, 0, true},
  /* a convolution on CUDA: its window stored by an im2col kernel, the bias
   * along kiln's rows (the output channels) in the rest */
  {"relu(conv2d + b)", g_conv, KILN_F32, 0, NONE, 1, 0, 0, 2, 0, true},
  {"conv2d, groups 2", g_conv_groups, KILN_F32, 0, NONE, 0, 0, 0, 2, 1, true},
  {"relu(linear)", g_relu_linear, KILN_F32, 1, RELU, 0, 1, 0, 1, 0, true},
  {"gelu_tanh(linear)", g_gelu_tanh_linear, KILN_F32, 1, GELU, 0, 1, 0, 1, 0, true},
  {"gelu(linear)", g_gelu_linear, KILN_F32, 1, NONE, 1, 1, 0, 1, 0, true},
  {"(x@W^T+b)*2+1", g_affine_linear, KILN_F32, 1, NONE, 1, 1, 0, 1, 0, true},
  {"relu(A@B)", g_relu_mm, KILN_F32, 0, RELU, 0, 0, 0, 1, 0, true},
  {"gelu_tanh(A@B)", g_gelu_tanh_mm, KILN_F32, 0, GELU, 0, 0, 0, 1, 0, true},
  {"relu(y)+y", g_relu_plus, KILN_F32, 0, NONE, 1, 0, 0, 1, 0, true},
  {"row bias", g_row_bias, KILN_F32, 0, NONE, 1, 0, 0, 1, 0, true},
  {"relu(batched + b)", g_batch_bias, KILN_F32, 1, RELU, 0, 0, 0, 3, 0, true},
  {"exp(A)@B", g_exp_operand, KILN_F32, 0, NONE, 0, 0, 0, 1, 0, true},
  {"sliced", g_sliced, KILN_F32, 0, NONE, 0, 1, 0, 1, 0, true},
  {"flipped columns", g_flipped_cols, KILN_F32, 0, NONE, 0, 0, 0, 1, 0, true},
  {"stepped columns", g_stepped, KILN_F32, 0, NONE, 0, 0, 0, 1, 0, true},
  {"broadcast rows", g_row_bcast, KILN_F32, 0, NONE, 0, 0, 0, 1, 0, true},
  {"relu(A@flip(exp(B)))", g_flipped_exp, KILN_F32, 0, RELU, 0, 0, 0, 1, 0, true},
  {"f64 stepped columns", g_stepped, KILN_F64, 0, NONE, 0, 0, 0, 1, 0, true},
  {"k = 0", g_zero_k, KILN_F32, 0, NONE, 1, ANY, ANY, ANY, ANY, false},
  {"f16 plain", g_plain, KILN_F16, 0, NONE, 0, 0, 0, 1, 0, true},
  {"f16 relu(linear)", g_relu_linear, KILN_F16, 1, RELU, 0, 1, 0, 1, 0, true},
  /* the temp is f32, the bias f16: the rest adds it */
  {"f16 (x@W^T+b)*2+1", g_affine_linear, KILN_F16, 0, NONE, 1, 1, 0, 1, 0, true},
  {"bf16 gelu_tanh(linear)", g_gelu_tanh_linear, KILN_BF16, 1, GELU, 0, 1, 0, 1, 0, true},
  {"bf16 batched", g_batched_t, KILN_BF16, 0, NONE, 0, 1, 0, 4, 0, true},
  {"f64 plain", g_plain, KILN_F64, 0, NONE, 0, 0, 0, 1, 0, true},
  /* f64 keeps its epilogue in the rest */
  {"f64 relu(linear)", g_relu_linear, KILN_F64, 0, NONE, 1, 1, 0, 1, 0, true},
};
enum { NROWS = sizeof rows / sizeof *rows };

/* ---- cublasLtMatmul on the host -------------------------------------------- */
/* Element (r, c) of op(X) for product p. */
static double elem(const cuda_gemm_matrix *x, const void *base, int64_t off, int64_t p, int64_t r, int64_t c) {
  int64_t row = x->trans ? c : r, col = x->trans ? r : c;
  return ref_load_f(x->dtype, base, x->off + off + p * x->batch_stride + row + col * x->ld);
}

static double act(cuda_act a, double v) {
  if (a == CUDA_ACT_RELU) return v < 0 ? 0 : v;
  if (a == CUDA_ACT_GELU_TANH) return 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  return v;
}

/* D = act(op(A) op(B) + bias) per call and batch, column-major, summed in
 * f64 and rounded once to D's dtype. */
static void lt_matmul(const cuda_gemm *g, void *const *bufs, void *temp) {
  if (!g->call) return;
  void *d = g->d.param >= 0 ? bufs[g->d.param] : temp;
  for (int64_t c = 0; c < cuda_gemm_calls(g); c++) {
    int64_t off[3];
    cuda_gemm_offsets(g, c, off);
    for (int64_t p = 0; p < g->batch; p++)
      for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
          double s = 0;
          for (int64_t q = 0; q < g->k; q++)
            s += elem(&g->a, bufs[g->a.param], off[0], p, i, q) * elem(&g->b, bufs[g->b.param], off[1], p, q, j);
          if (g->bias >= 0) s += ref_load_f(g->d.dtype, bufs[g->bias], i);
          int64_t at = g->d.off + off[2] + p * g->d.batch_stride + i + j * g->d.ld;
          ref_store_f(g->d.dtype, d, at, ref_round(g->d.dtype, act(g->act, s)));
        }
  }
}

/* ---- running a plan on the host --------------------------------------------- */
static size_t bytes_of(kiln_dtype dt, int64_t numel) { return (size_t)(numel > 0 ? numel : 1) * ir_dtypes[dt].size; }

/* The split of the plan's KS_GEMM kernel, checked against the row. */
static void check_split(const gemm_row *r, const cuda_gemm *g, const kernel *k) {
  ir_str text = {0};
  k_print(&text, (kernel *)k);
  ck_assert_msg(g->call == r->call, "%s: call %d\n%s", r->name, g->call, text.s);
  ck_assert_msg((g->bias >= 0) == (r->bias == 1), "%s: bias param %d\n%s", r->name, g->bias, text.s);
  ck_assert_msg(g->act == r->act, "%s: act %d, want %d\n%s", r->name, g->act, r->act, text.s);
  if (r->rest != ANY) ck_assert_msg((g->rest != NULL) == r->rest, "%s: rest %p\n%s", r->name, (void *)g->rest, text.s);
  if (r->trans_a != ANY) ck_assert_msg(g->a.trans == r->trans_a, "%s: transa %d", r->name, g->a.trans);
  if (r->trans_b != ANY) ck_assert_msg(g->b.trans == r->trans_b, "%s: transb %d", r->name, g->b.trans);
  if (r->batch != ANY) ck_assert_msg(g->batch == r->batch, "%s: batch %lld", r->name, (long long)g->batch);
  if (r->nouter != ANY) ck_assert_msg(g->nouter == r->nouter, "%s: %d outer dims", r->name, g->nouter);
  ck_assert_msg((g->temp > 0) == (g->rest && g->call), "%s: temp %lld", r->name, (long long)g->temp);
  ck_assert_msg((g->d.param < 0) == (g->temp > 0) || !g->call, "%s: D param %d", r->name, g->d.param);
  ir_str_free(&text);
}

/* The split kernel: the call by lt_matmul, then the rest on the CPU. */
static void run_gemm(const gemm_row *r, kernel *k, void **bufs, ir_str *rest_src) {
  cuda_gemm g;
  char *err = NULL;
  ck_assert_msg(cuda_gemm_split(k, &g, &err), "%s: %s", r->name, err);
  check_split(r, &g, k);
  void *temp = calloc(1, bytes_of(g.compute, g.temp));
  lt_matmul(&g, bufs, temp);
  if (g.rest) {
    void **rb = calloc((size_t)g.rest->nparams + 1, sizeof *rb);
    for (int q = 0; q < g.rest->nparams; q++)
      rb[q] = g.rest->params[q].args ? (void *)g.rest->args : g.rest_src[q] < 0 ? temp : bufs[g.rest_src[q]];
    tu_run_cpu(g.rest, rb);
    free(rb);
    if (rest_src) {
      cuda_launch l;
      ck_assert_msg(cuda_emit(g.rest, rest_src, &l, &err), "%s: %s", r->name, err);
    }
  }
  free(temp);
  cuda_gemm_free(&g);
}

/* A row's run: its KS_GEMM kernel through run_gemm, counted. */
typedef struct {
  const gemm_row *r;
  ir_str *rest_src;
  int ngemm;
} row_run;

static bool gemm_hook(kernel *k, void **bufs, void *ctx) {
  row_run *rr = ctx;
  if (!tu_has_gemm(k)) return false;
  run_gemm(rr->r, k, bufs, rr->rest_src);
  rr->ngemm++;
  return true;
}

/* Runs the plan of r's graph on the host and compares with the oracle. */
static void run_row(const gemm_row *r, ir_str *rest_src) {
  kiln_scope_begin();
  kiln_tensor *t = r->build(r->dt);
  ck_assert_msg(kiln_status_of(t) == KILN_OK, "%s: %s", r->name, kiln_last_error());
  ref_tensor *want = ref_eval(t);
  rt_graph_plan p;
  ck_assert_msg(rt_plan_graph(KILN_CUDA, 1, &t, &p) == KILN_OK, "%s: %s", r->name, kiln_last_error());
  tu_stored st = {0};
  row_run rr = {r, rest_src, 0};
  tu_run_plan(&p, &st, gemm_hook, &rr);
  ck_assert_msg(rr.ngemm == 1, "%s: %d matrix product kernels", r->name, rr.ngemm);
  if (rest_src == NULL) {
    ref_tol tol = ref_tol_dtype(r->dt);
    double rtol = 4 * tol.rtol;  /* sums of 8 products, rounded in other orders */
    char why[512];
    ck_assert_msg(ref_check_data(want, tu_stored_data(&st, t), rtol, rtol, why, sizeof why), "%s: %s", r->name, why);
  }
  tu_stored_free(&st);
  ref_free(want);
  rt_graph_plan_free(&p);
  kiln_scope_end();
}

START_TEST(test_gemm_rows) { run_row(&rows[_i], NULL); }
END_TEST

/* Every rest kernel in one translation unit, compiled as CUBIN (ptxas
 * checks it) for each arch. */
START_TEST(test_rest_kernels_compile) {
  static const char *const archs[] = {"sm_80", "sm_90"};
  ir_str src = {0};
  ir_str_printf(&src, "%s", cuda_prelude());
  size_t prelude = src.len;
  for (int i = 0; i < NROWS; i++) run_row(&rows[i], &src);
  ck_assert_uint_gt(src.len, prelude + 1000);
  for (int a = 0; a < 2; a++) {
    ir_str bin = {0};
    char *err = NULL;
    ck_assert_msg(cuda_compile(src.s, archs[a], &bin, NULL, &err), "%s", err);
    ck_assert_uint_gt(bin.len, 100);
    ir_str_free(&bin);
  }
  ir_str_free(&src);
}
END_TEST

/* ---- reductions to few values that use the whole grid ------------------------------
 * fuse.c stores a big reduction to few values by a kernel of its own on
 * CUDA when more than its epilogue reads it, so that kernel spreads over the
 * grid (codegen_cuda/emit.c). Each graph is planned for CUDA, its kernels run
 * on the host (the CPU back end), and the result is checked against the
 * reference evaluator; the kernel counts and grids are the plan's. */
typedef struct {
  const char *name;
  int kernels;          /* in the CUDA plan */
  int min_grid;         /* blocks of the plan's first kernel, at least */
} grid_row;

static kiln_tensor *grid_graph(int i, kiln_tensor *x) {
  switch (i) {
  case 0: return kiln_softmax(x, 0);
  case 1: return kiln_sub(x, kiln_mean(x));
  case 2: return kiln_mean(x);
  case 3: return kiln_std(x, 1);
  case 4: return kiln_div(kiln_sub(x, kiln_mean(x)), kiln_std(x, 1));
  default: return kiln_softmax(kiln_slice(x, 0, 0, 1000, 1), 0);  /* small: one kernel on one block */
  }
}

static const grid_row grid_rows[] = {
  {"softmax 1-d", 4, 2}, {"x - mean(x)", 2, 2}, {"mean(x)", 1, 2}, {"std(x)", 3, 2},
  {"(x - mean(x)) / std(x)", 3, 2}, {"small softmax", 1, 1},
};

START_TEST(test_grid_reductions) {
  const grid_row *r = &grid_rows[_i];
  kiln_scope_begin();
  kiln_tensor *x = in(KILN_F32, KILN_SHAPE(1 << 17));
  kiln_tensor *t = grid_graph(_i, x);
  ref_tensor *want = ref_eval(t);
  rt_graph_plan p;
  ck_assert_msg(rt_plan_graph(KILN_CUDA, 1, &t, &p) == KILN_OK, "%s: %s", r->name, kiln_last_error());
  ck_assert_msg(p.g.ngroups == r->kernels, "%s: %d kernels", r->name, p.g.ngroups);
  for (int i = 0; i < p.g.ngroups; i++) {
    ir_str src = {0};
    cuda_launch l;
    char *err = NULL;
    ck_assert_msg(cuda_emit(p.kernels[i].k, &src, &l, &err), "%s: %s", r->name, err);
    if (i == 0) ck_assert_msg(l.grid >= r->min_grid, "%s: the first kernel on %d blocks", r->name, l.grid);
    ir_str_free(&src);
  }
  tu_stored st = {0};
  tu_run_plan(&p, &st, NULL, NULL);
  char why[512];
  ck_assert_msg(ref_check_data(want, tu_stored_data(&st, t), 1e-4, 1e-6, why, sizeof why), "%s: %s", r->name, why);
  tu_stored_free(&st);
  ref_free(want);
  rt_graph_plan_free(&p);
  kiln_scope_end();
}
END_TEST

/* ---- what cuBLASLt cannot read in place ---------------------------------------- */
/* With gemm_operands off, the split names the operand it cannot read; with
 * it on (the rows above), the operand is copied first. */
static void expect_refused(kiln_tensor *t, const char *want) {
  rt_planned *plan;
  const char *passes = rt_opts()->passes;
  rt_opts()->passes = "-gemm_operands";
  int n = rt_plan_for(KILN_CUDA, 1, &t, &plan);
  rt_opts()->passes = passes;
  ck_assert_int_ge(n, 1);
  bool seen = false;
  for (int i = 0; i < n; i++) {
    if (!tu_has_gemm(plan[i].k)) continue;
    cuda_gemm g;
    char *err = NULL;
    ck_assert(!cuda_gemm_split(plan[i].k, &g, &err));
    ck_assert_msg(err && strstr(err, want), "%s", err ? err : "(no message)");
    free(err);
    seen = true;
  }
  ck_assert(seen);
  rt_plan_free(plan, n);
}

START_TEST(test_refused_operands) {
  kiln_scope_begin();
  kiln_tensor *b = in(KILN_F32, KILN_SHAPE(7, 3));
  expect_refused(kiln_mm(kiln_flip(in(KILN_F32, KILN_SHAPE(5, 7)), KILN_DIMS(1)), b),
                 "a (5, 7) matrix operand with strides (7, -1) is not a transpose");
  expect_refused(kiln_mm(kiln_index(in(KILN_F32, KILN_SHAPE(5, 14)), ":, ::2"), b), "strides (14, 2)");
  expect_refused(kiln_mm(kiln_expand(in(KILN_F32, KILN_SHAPE(1, 7)), KILN_SHAPE(5, 7)), b), "strides (0, 1)");
  kiln_scope_end();
}
END_TEST

/* When cuBLASLt takes the whole epilogue it writes the output itself: D is
 * parameter 0, row-major (m x n) read as cuBLASLt's column-major (n x m). */
START_TEST(test_direct_output_layout) {
  kiln_scope_begin();
  kiln_tensor *t = g_relu_linear(KILN_F32);
  rt_planned *plan;
  ck_assert_int_eq(rt_plan_for(KILN_CUDA, 1, &t, &plan), 1);
  cuda_gemm g;
  char *err = NULL;
  ck_assert_msg(cuda_gemm_split(plan[0].k, &g, &err), "%s", err);
  ck_assert_int_eq(g.d.param, 0);
  ck_assert_int_eq(g.d.dtype, KILN_F32);
  ck_assert_int_eq(g.m, 5);   /* cuBLASLt's m: kiln's columns (out features) */
  ck_assert_int_eq(g.n, 6);
  ck_assert_int_eq(g.k, 8);
  ck_assert_int_eq(g.d.ld, 5);
  ck_assert_int_eq(g.a.ld, 8);  /* W (5, 8) row-major: W^T is W read transposed, ld 8 */
  ck_assert_int_eq(g.b.ld, 8);  /* x (6, 8) row-major: x^T column-major, ld 8 */
  ck_assert_int_eq(plan[0].k->params[g.bias].numel, 5);
  cuda_gemm_free(&g);
  rt_plan_free(plan, 1);
  kiln_scope_end();
}
END_TEST

/* ---- without a driver -------------------------------------------------------- */
START_TEST(test_matmul_on_cuda_without_driver) {
  if (kiln_cuda_is_available()) return;
  kiln_scope_begin();
  kiln_device cuda0 = {KILN_CUDA, 0};
  kiln_tensor *a = kiln_to(in(KILN_F32, KILN_SHAPE(4, 3)), cuda0), *b = kiln_to(in(KILN_F32, KILN_SHAPE(3, 2)), cuda0);
  kiln_tensor *y = kiln_relu(kiln_matmul(a, b));
  ck_assert_int_eq(kiln_realize(y), KILN_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "CUDA not available"));
  kiln_scope_end();
}
END_TEST

/* ---- loading cuBLASLt ----------------------------------------------------------- */
/* cublas.c loads once per process: each check starts from a closed library. */
static kiln_status load_as(const char *lib) {
  rt_cublas_shutdown();
  rt_opts()->cublaslt = lib;
  kiln_status st = rt_cublas_load();
  rt_opts()->cublaslt = NULL;
  rt_cublas_shutdown();
  return st;
}

START_TEST(test_cublaslt_loads) {
  ck_assert_msg(load_as(NULL) == KILN_OK, "%s", kiln_last_error());   /* every function resolved */
}
END_TEST

START_TEST(test_cublaslt_missing_or_wrong) {
  ck_assert_int_eq(load_as("/nonexistent/libcublasLt.so.13"), KILN_ERR_DEVICE);
  ck_assert_str_eq(kiln_last_error(), "CUDA not available: /nonexistent/libcublasLt.so.13 not found");
  ck_assert_int_eq(load_as("libm.so.6"), KILN_ERR_DEVICE);
  ck_assert_str_eq(kiln_last_error(), "CUDA not available: libm.so.6 lacks cublasLtCreate");
  ck_assert_int_eq(rt_cublas_matmul(0, &(cuda_gemm){.call = false}, NULL, NULL, 0), KILN_OK);  /* nothing to call */
}
END_TEST

/* rt_cublas_sym, what bench/gpu.c calls cuBLASLt through: the library's
 * functions, NULL for a name it lacks or when it cannot be loaded. */
START_TEST(test_cublaslt_symbols) {
  size_t (*version)(void) = (size_t (*)(void))rt_cublas_sym("cublasLtGetVersion");
  ck_assert_msg(version != NULL, "%s", kiln_last_error());
  ck_assert_uint_ge(version(), 130000);   /* cuBLASLt 13: major * 10000 + minor * 100 + patch */
  ck_assert_ptr_null(rt_cublas_sym("cublasLtNoSuchFunction"));
  rt_cublas_shutdown();
  rt_opts()->cublaslt = "/nonexistent/libcublasLt.so.13";
  ck_assert_ptr_null(rt_cublas_sym("cublasLtGetVersion"));
  ck_assert_str_eq(kiln_last_error(), "CUDA not available: /nonexistent/libcublasLt.so.13 not found");
  rt_opts()->cublaslt = NULL;
  rt_cublas_shutdown();
}
END_TEST

static Suite *cuda_gemm_suite(void) {
  Suite *s = suite_create("cuda_gemm");
  TCase *tc = tu_tcase(s, "split");
  tcase_add_loop_test(tc, test_gemm_rows, 0, NROWS);
  tcase_add_test(tc, test_refused_operands);
  tcase_add_loop_test(tc, test_grid_reductions, 0, (int)(sizeof grid_rows / sizeof *grid_rows));
  tcase_add_test(tc, test_direct_output_layout);
  tc = tu_tcase(s, "nvrtc");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_rest_kernels_compile);
  tc = tu_tcase(s, "runtime");
  tcase_add_test(tc, test_matmul_on_cuda_without_driver);
  tcase_add_test(tc, test_cublaslt_loads);
  tcase_add_test(tc, test_cublaslt_missing_or_wrong);
  tcase_add_test(tc, test_cublaslt_symbols);
  return s;
}

KILN_TEST_MAIN(cuda_gemm_suite)
