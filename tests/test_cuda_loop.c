/* test_cuda_loop.c: kiln in a loop on CUDA tensors. New scalar values are
 * launch arguments of the one compiled kernel (no new plan either), a
 * structure seen with a second shape gets one shape-generic kernel whose
 * CUDA C is the same at every shape, and a compiled function over
 * placeholders on cuda:0 replays its device kernels. Without a GPU the host
 * stands in for cuda:0 (rt_cuda_stand_in): the runtime plans, binds and
 * launches exactly as for the GPU, every kernel's CUDA C is emitted and
 * compiled by NVRTC, and the launch runs the kernel through the CPU back
 * end on host memory. With a GPU ("gpu" case) the same loops run on it,
 * and one through cuBLASLt. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "codegen_cuda/cuda.h"
#include "runtime/device.h"
#include "util/hostplan.h"
#include "util/testutil.h"

static const kiln_device cuda0 = {KILN_CUDA, 0};

/* ---- the host standing in for cuda:0 ----------------------------------------- */
#define HOST_MODULES 64

typedef struct {
  ir_str key;           /* the kernel's k_key */
  char *src;            /* its CUDA C, as emitted when it was compiled */
} host_module;

static struct {
  host_module mod[HOST_MODULES];
  int nmod;
  int differ;           /* kernels found by key whose CUDA C came out different */
  int launches;
  cuda_launch last;     /* the geometry of the last launch */
  int live;             /* device buffers not yet given back */
} host;

static void host_release(void *p) {
  free(p);
  host.live--;
}

static rt_buffer *host_alloc(int index, size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 64) / 64 * 64);
  rt_buffer *b = p ? rt_buffer_lend(p, bytes, (kiln_device){KILN_CUDA, index}, host_release, p) : NULL;
  ck_assert(b);
  host.live++;
  return b;
}

static void host_free(rt_buffer *b) { ck_abort_msg("%p: device buffers are lent and never freed here", (void *)b); }

static kiln_status host_copy_in(rt_buffer *dst, const void *src, size_t bytes) {
  memcpy(dst->data, src, bytes);
  return KILN_OK;
}

static kiln_status host_copy_out(void *dst, const rt_buffer *src, size_t off, size_t bytes) {
  memcpy(dst, (const char *)src->data + off, bytes);
  return KILN_OK;
}

/* The kernel's CUDA C is emitted every time (the runtime asks at each plan);
 * a key seen before must give the same text (a shape-generic kernel's does
 * at every shape), a new one is compiled by NVRTC. */
static kiln_status host_compile(int index, kernel *k, int debug, rt_device_kernel **out, cuda_launch *geom,
                                rt_origin *origin) {
  (void)index, (void)debug;
  ir_str key = {0}, src = {0};
  char *err = NULL;
  k_key(k, &key);
  ck_assert_msg(cuda_emit(k, &src, geom, &err) && !src.failed, "%s: %s", k->name, err);
  int i = 0;
  while (i < host.nmod && !(host.mod[i].key.len == key.len && !memcmp(host.mod[i].key.s, key.s, key.len))) i++;
  *origin = i < host.nmod ? RT_MEMORY : RT_COMPILED;
  if (i < host.nmod) {
    host.differ += strcmp(host.mod[i].src, src.s) != 0;
    ir_str_free(&key);
    ir_str_free(&src);
  } else {
    ck_assert(host.nmod < HOST_MODULES);
    ir_str unit = {0}, bin = {0};
    ir_str_printf(&unit, "%s%s", cuda_prelude(), src.s);
    ck_assert_msg(cuda_compile(unit.s, "sm_90", &bin, NULL, &err), "%s: %s", k->name, err);
    ir_str_free(&unit);
    ir_str_free(&bin);
    host.mod[host.nmod++] = (host_module){key, src.s};
  }
  *out = (rt_device_kernel *)&host.mod[i];
  return KILN_OK;
}

/* The plan's kernel with the launch's buffers and arguments, on the host. */
static kiln_status host_launch(int index, rt_device_kernel *dk, kernel *k, void *const *bufs, const cuda_launch *geom,
                               int debug) {
  (void)index, (void)dk, (void)debug;
  host.launches++;
  host.last = *geom;
  tu_run_cpu(k, bufs);
  return KILN_OK;
}

static kiln_status host_sync(int index) {
  (void)index;
  return KILN_OK;
}

static const rt_device host_device = {"cuda", host_alloc, host_free, host_copy_in, host_copy_out,
                                      host_compile, host_launch, host_sync};

static void host_setup(void) {
  memset(&host, 0, sizeof host);
  rt_cuda_stand_in(&host_device);
}

/* Every device buffer came back; the plans go, their kernels were the host's. */
static void host_teardown(void) {
  rt_plans_forget();
  ck_assert_int_eq(host.live, 0);
  rt_cuda_stand_in(NULL);
  for (int i = 0; i < host.nmod; i++) {
    ir_str_free(&host.mod[i].key);
    free(host.mod[i].src);
  }
}

/* ---- checks ------------------------------------------------------------------ */
static void assert_stats(uint64_t compiles, uint64_t plans, const char *what) {
  kiln_stats_t s = kiln_stats();
  ck_assert_msg(s.compiles == compiles && s.plans == plans, "%s: %llu compiles, %llu plans; want %llu and %llu", what,
                (unsigned long long)s.compiles, (unsigned long long)s.plans, (unsigned long long)compiles,
                (unsigned long long)plans);
}

/* The values of device tensor got (back on the host) against the oracle's of
 * want, the same expression built on the CPU. */
static void expect_ref(kiln_tensor *got, kiln_tensor *want, double rtol, const char *what, long i) {
  ck_assert_int_eq(kiln_device_of(got).type, KILN_CUDA);
  ref_tensor *r = ref_eval(want);
  kiln_tensor *back = kiln_cpu(got);
  ck_assert_msg(kiln_realize(back) == KILN_OK, "%s %ld: %s", what, i, kiln_last_error());
  char why[512];
  bool ok = ref_check(r, back, rtol, 1e-4, why, sizeof why);
  ref_free(r);
  ck_assert_msg(ok, "%s %ld: %s", what, i, why);
}

/* Realized device tensor t's f32 values on the host. */
static const float *host_f32(kiln_tensor *t) {
  kiln_tensor *back = kiln_cpu(t);
  ck_assert_msg(kiln_realize(back) == KILN_OK, "%s", kiln_last_error());
  return kiln_data(back);
}

/* ---- the loops (on the host's stand-in, or on the GPU) -------------------------- */
#define LOOP 10000

static const float xs[16] = {-3.5f, -2, -1.25f, -0.5f, -0.0f, 0, 0.25f, 0.5f,
                             1, 1.75f, 2, 2.5f, 3, 3.25f, 3.75f, 4};

/* 10,000 distinct s in x * s: one compile, one plan (the product and the
 * copy back), every value exact. Then relu(x * s + t) (two values in
 * one kernel) and clamp's bounds: one compile each. */
static void scalars_are_arguments(void) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_to(kiln_from_data(xs, KILN_F32, KILN_SHAPE(16)), cuda0);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  kiln_reset_stats();
  for (int i = 0; i < LOOP; i++) {
    kiln_scope_begin();
    double s = 1.5 + i * 1e-3;   /* never 1: x * 1 is x (simplify) */
    const float *d = host_f32(kiln_muls(x, s));
    for (int j = 0; j < 16; j++)
      ck_assert_msg(d[j] == xs[j] * (float)s, "x*%g [%d]: %g, want %g", s, j, d[j], xs[j] * (float)s);
    kiln_scope_end();
  }
  assert_stats(1, 1, "x * s on cuda:0");
  kiln_reset_stats();
  for (int i = 0; i < LOOP / 10; i++) {
    kiln_scope_begin();
    double s = 2 + i * 1e-2, t = -1 + i * 3e-3, lo = -1 - i * 2e-4, hi = 1 + i * 3e-4;
    const float *d = host_f32(kiln_relu(kiln_adds(kiln_muls(x, s), t)));
    const float *c = host_f32(kiln_clamp(x, lo, hi));
    for (int j = 0; j < 16; j++) {
      float want = fmaxf(xs[j] * (float)s + (float)t, 0), cw = fminf(fmaxf(xs[j], (float)lo), (float)hi);
      ck_assert_msg(d[j] == want, "relu(x*%g+%g) [%d]: %g, want %g", s, t, j, d[j], want);
      ck_assert_msg(c[j] == cw, "clamp(x, %g, %g) [%d]: %g, want %g", lo, hi, j, c[j], cw);
    }
    kiln_scope_end();
  }
  assert_stats(2, 2, "relu(x*s+t) and clamp on cuda:0");
  kiln_scope_end();
}

/* rand with a new seed per call: one compile, one plan, the CPU's bits at
 * every seed. */
#define SEEDS 200
static void seeds_are_arguments(void) {
  kiln_scope_begin();
  static float cpu[SEEDS][64 * 3];
  for (int i = 0; i < SEEDS; i++) {
    kiln_manual_seed(1000 + (uint64_t)i);
    ck_assert_int_eq(kiln_copy_to_host(kiln_rand(KILN_SHAPE(64, 3), KILN_F32), cpu[i], sizeof cpu[i]), KILN_OK);
  }
  kiln_tensor *z = kiln_to(kiln_zeros(KILN_SHAPE(64, 3), KILN_F32), cuda0);
  ck_assert_int_eq(kiln_realize(z), KILN_OK);
  kiln_reset_stats();
  for (int i = 0; i < SEEDS; i++) {
    kiln_scope_begin();
    kiln_manual_seed(1000 + (uint64_t)i);
    const float *g = host_f32(kiln_rand_like(z));
    ck_assert_msg(!memcmp(g, cpu[i], sizeof cpu[i]), "seed %d: the device's bits differ from the CPU's", 1000 + i);
    kiln_scope_end();
  }
  assert_stats(1, 1, "rand on cuda:0");
  kiln_scope_end();
}

/* relu(a * b + c) with a broadcast row, a row softmax and a whole sum, at
 * shapes whose sizes all differ: the first compiles specialised kernels,
 * the second one shape-generic kernel per structure, the rest nothing. */
static kiln_tensor *rows_graph(kiln_tensor *a, kiln_tensor *b, kiln_tensor *c, int which) {
  if (which == 0) return kiln_relu(kiln_add(kiln_mul(a, b), c));
  if (which == 1) return kiln_softmax(kiln_muls(a, 2), -1);
  return kiln_sum(kiln_mul(a, b));
}

static void second_shape_compiles_generic(void) {
  static const int64_t shapes[][2] = {{64, 33}, {100, 17}, {7, 300}, {3, 5}, {100, 17}};
  kiln_reset_stats();
  for (int s = 0; s < 5; s++) {
    kiln_scope_begin();
    int64_t r = shapes[s][0], n = shapes[s][1];
    kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(r, n), 10 + (uint64_t)s, TU_SMALL);
    kiln_tensor *b = tu_data(KILN_F32, KILN_SHAPE(r, n), 20 + (uint64_t)s, TU_SMALL);
    kiln_tensor *c = tu_data(KILN_F32, KILN_SHAPE(n), 30 + (uint64_t)s, TU_SMALL);
    kiln_tensor *ga = kiln_to(a, cuda0), *gb = kiln_to(b, cuda0), *gc = kiln_to(c, cuda0);
    for (int w = 0; w < 3; w++) expect_ref(rows_graph(ga, gb, gc, w), rows_graph(a, b, c, w), 1e-5, "shape", s);
    uint64_t want = s == 0 ? 3 : 6;   /* three structures: specialised, then generic */
    ck_assert_msg(kiln_stats().compiles == want, "shape %d: %llu compiles, want %llu", s,
                  (unsigned long long)kiln_stats().compiles, (unsigned long long)want);
    kiln_scope_end();
  }
}

/* y = softmax(relu(x * w + b) * 0.5) over x on cuda:0 with a dynamic batch:
 * each call launches the device kernels, the outputs stay on cuda:0, a
 * second batch size compiles the generic variant and later ones nothing. */
static kiln_tensor *mlp_head(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b) {
  return kiln_softmax(kiln_muls(kiln_relu(kiln_add(kiln_mul(x, w), b)), 0.5), -1);
}

/* The kernel of the first step of the variant whose header holds `variant`, from kiln_fn_dump's text. */
static void step_kernel(const char *text, const char *variant, char *name) {
  const char *v = strstr(text, variant), *k = v ? strstr(v, "device kernel ") : NULL;
  ck_assert_msg(k && sscanf(k, "device kernel %63s", name) == 1, "no device kernel after \"%s\" in\n%s", variant, text);
}

static void function_on_cuda_placeholders(void) {
  kiln_scope_begin();
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(16), 1, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(16), 2, TU_SMALL);
  kiln_tensor *x = kiln_placeholder_on(KILN_F32, cuda0, KILN_SHAPE(-1, 16));
  ck_assert_msg(kiln_status_of(x) == KILN_OK, "%s", kiln_last_error());
  ck_assert_int_eq(kiln_device_of(x).type, KILN_CUDA);
  kiln_tensor *y = mlp_head(x, kiln_to(w, cuda0), kiln_to(b, cuda0));
  kiln_fn *f = kiln_compile(1, &x, 1, &y);
  ck_assert_msg(f, "%s", kiln_last_error());
  kiln_reset_stats();
  static const int64_t batches[] = {3, 5, 9, 5, 40};
  uint64_t compiles[5];
  for (int i = 0; i < 5; i++) {
    kiln_scope_begin();
    kiln_tensor *in = tu_data(KILN_F32, KILN_SHAPE(batches[i], 16), 40 + (uint64_t)i, TU_SMALL);
    kiln_tensor *gin = kiln_to(in, cuda0), *out = NULL;
    ck_assert_int_eq(kiln_realize(gin), KILN_OK);
    ck_assert_msg(kiln_fn_run(f, &gin, &out) == KILN_OK, "batch %lld: %s", (long long)batches[i], kiln_last_error());
    expect_ref(out, mlp_head(in, w, b), 1e-5, "batch", (long)batches[i]);
    compiles[i] = kiln_stats().compiles;
    kiln_scope_end();
  }
  /* the first size compiles each kernel, the second its generic variant, then nothing */
  ck_assert_uint_ge(compiles[0], 1);
  ck_assert_uint_eq(compiles[1], 2 * compiles[0]);
  ck_assert_uint_eq(compiles[4], compiles[1]);
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  ck_assert_int_eq(kiln_fn_dump(f, mem, KILN_FMT_TEXT), KILN_OK);
  fclose(mem);
  /* one device kernel a size; from the second size on the same generic one, launched at each size's rows */
  ck_assert_msg(!strstr(text, ": kernel ") && strstr(text, "grid=40 block=256 range=40\n"), "%s", text);
  char k5[64], k40[64];
  step_kernel(text, "dynamic size 5:", k5);
  step_kernel(text, "dynamic size 40:", k40);
  ck_assert_str_eq(k5, k40);
  free(text);
  /* a CPU tensor for a cuda:0 placeholder names the function, the input and the device */
  kiln_tensor *cpu_in = tu_data(KILN_F32, KILN_SHAPE(3, 16), 7, TU_SMALL), *out = NULL;
  int l = __LINE__; kiln_status st = kiln_fn_run(f, &cpu_in, &out);
  ck_assert_int_eq(st, KILN_ERR_ARG);
  char want[256];
  snprintf(want, sizeof want, "%s:%d: fn_run: function compiled at ", __FILE__, l);
  ck_assert_msg(strstr(kiln_last_error(), want) && strstr(kiln_last_error(), "it takes float32 (3,16) on cuda:0"), "%s",
                kiln_last_error());
  kiln_fn_free(f);
  kiln_scope_end();
}

/* (x @ w^T) * s with a new s each call: cuBLASLt's product, then the rest
 * of the epilogue (the scale) as a kernel whose argument the plan binds.
 * GPU only: the host does not stand in for cuBLASLt. */
static void matmul_scale_is_an_argument(void) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(64, 32), 1, TU_SMALL), *w = tu_data(KILN_F32, KILN_SHAPE(48, 32), 2, TU_SMALL);
  kiln_tensor *gx = kiln_to(x, cuda0), *gw = kiln_to(w, cuda0);
  ck_assert_int_eq(kiln_realize(gx), KILN_OK);
  ck_assert_int_eq(kiln_realize(gw), KILN_OK);
  kiln_reset_stats();
  for (int i = 0; i < 300; i++) {
    kiln_scope_begin();
    double s = 1.5 + i * 0.01;
    expect_ref(kiln_muls(kiln_matmul(gx, kiln_T(gw)), s), kiln_muls(kiln_matmul(x, kiln_T(w)), s), 1e-5, "scale", i);
    kiln_scope_end();
  }
  assert_stats(1, 1, "(x @ w^T) * s on cuda:0");   /* the scale's kernel, in one plan */
  kiln_scope_end();
}

/* ---- on the host's stand-in --------------------------------------------------- */
static const struct {
  void (*run)(void);
  int modules;          /* the host's modules it makes: kernels compiled for cuda:0 (-1: not counted) */
} loops[] = {{scalars_are_arguments, 3},   /* x*s, relu(x*s+t), clamp */
             {seeds_are_arguments, 1},
             {second_shape_compiles_generic, 6},
             {function_on_cuda_placeholders, -1}};

/* Every kernel found again by its key came out as the same CUDA C: a
 * shape-generic kernel's at every shape. */
START_TEST(host_loops) {
  loops[_i].run();
  ck_assert_int_eq(host.differ, 0);
  if (loops[_i].modules >= 0) ck_assert_int_eq(host.nmod, loops[_i].modules);
}
END_TEST

/* The generic elementwise kernel's launch covers each shape's own range:
 * the grid follows the sizes, the code does not. */
START_TEST(host_generic_launch_follows_the_shape) {
  kiln_scope_begin();
  static const int64_t sizes[] = {300, 5000, 70000};
  for (int i = 0; i < 3; i++) {
    kiln_tensor *a = kiln_to(tu_data(KILN_F32, KILN_SHAPE(sizes[i], 3), 5, TU_SMALL), cuda0);
    ck_assert_int_eq(kiln_realize(a), KILN_OK);
    kiln_tensor *y = kiln_exp(kiln_neg(a));
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    int64_t n = sizes[i] * 3, most = (n + 255) / 256, least = (n + 1023) / 1024;   /* 256 threads, 1 or 4 lanes */
    ck_assert_int_eq(host.last.range, n);
    ck_assert_int_ge(host.last.grid, least < 2048 ? least : 2048);
    ck_assert_int_le(host.last.grid, most < 2048 ? most : 2048);
  }
  ck_assert_int_eq(host.nmod, 2);
  ck_assert_int_eq(host.differ, 0);
  kiln_scope_end();
}
END_TEST

/* ---- without a GPU and without the stand-in -------------------------------------- */
START_TEST(placeholder_on_cuda_without_a_gpu) {
  if (kiln_cuda_is_available()) return;
  kiln_scope_begin();
  char msg[512];
  snprintf(msg, sizeof msg, "placeholder: CUDA not available: %s", kiln_cuda_unavailable_reason());
  TU_EXPECT_ERROR(kiln_placeholder_on(KILN_F32, cuda0, KILN_SHAPE(2, 3)), KILN_ERR_DEVICE, msg);
  TU_EXPECT_ERROR(kiln_placeholder_on(KILN_F32, ((kiln_device){KILN_CPU, 2}), KILN_SHAPE(2)), KILN_ERR_ARG,
                  "placeholder: invalid device (type 0, index 2)");
  kiln_tensor *p = kiln_placeholder_on(KILN_F32, kiln_cpu_device(), KILN_SHAPE(-1, 4));
  ck_assert_int_eq(kiln_status_of(p), KILN_OK);
  ck_assert_int_eq(kiln_device_of(p).type, KILN_CPU);
  kiln_scope_end();
}
END_TEST

/* ---- on a GPU (tu_have_gpu: skipped without one unless KILN_REQUIRE_GPU=1) -------- */
START_TEST(gpu_loops) {
  if (tu_have_gpu()) loops[_i].run();
}
END_TEST

START_TEST(gpu_matmul_scale_is_an_argument) {
  if (tu_have_gpu()) matmul_scale_is_an_argument();
}
END_TEST

static Suite *cuda_loop_suite(void) {
  Suite *s = suite_create("cuda_loop");
  TCase *tc = tu_tcase(s, "host");
  tcase_add_checked_fixture(tc, host_setup, host_teardown);
  int nloops = (int)(sizeof loops / sizeof *loops);
  tcase_add_loop_test(tc, host_loops, 0, nloops);
  tcase_add_test(tc, host_generic_launch_follows_the_shape);
  tc = tu_tcase(s, "no_gpu");
  tcase_add_test(tc, placeholder_on_cuda_without_a_gpu);
  tc = tu_tcase(s, "gpu");
  tcase_add_loop_test(tc, gpu_loops, 0, nloops);
  tcase_add_test(tc, gpu_matmul_scale_is_an_argument);
  return s;
}

KILN_TEST_MAIN(cuda_loop_suite)
