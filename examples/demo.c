/* demo.c: a first tour of kiln. Builds a few lazy tensor expressions, prints
 * them in PyTorch's format, shows what the compiler did (kiln_stats) and what
 * an error looks like. Uses only the public header. */
#include <kiln.h>

#include <stdio.h>

static void section(const char *title) { printf("\n== %s ==\n", title); }

/* Realizes and prints t under a label; a failure prints kiln's message. */
static void show(const char *label, kiln_tensor *t) {
  printf("%s =\n", label);
  if (kiln_print(t) != KILN_OK) printf("error: %s\n", kiln_last_error());
}

static void devices(void) {
  section("devices");
  kiln_device d = kiln_default_device();
  printf("cuda available: %s (%d device(s))\n",
         kiln_cuda_is_available() ? "yes" : "no", kiln_cuda_device_count());
  printf("default device: %s:%d\n", d.type == KILN_CUDA ? "cuda" : "cpu", d.index);
}

static void creation(void) {
  section("creation");
  float rows[2][3] = {{1, -2, 3}, {-4, 5, -6}};
  show("from_data", kiln_from_data(rows, KILN_F32, KILN_SHAPE(2, 3)));
  show("arange(0, 6, 1)", kiln_arange(0, 6, 1));
  show("ones(2, 3)", kiln_ones(KILN_SHAPE(2, 3), KILN_F32));
  kiln_manual_seed(42);  /* same seed, same numbers, on any device */
  show("rand(2, 3)", kiln_rand(KILN_SHAPE(2, 3), KILN_F32));
}

static kiln_tensor *w1(kiln_tensor *a, kiln_tensor *b, kiln_tensor *c) {
  return kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(a));
}

/* Realizes and prints t, then what it cost: kernels and JIT compiles. */
static void show_cost(const char *label, kiln_tensor *t) {
  kiln_stats_t before = kiln_stats();
  show(label, t);
  kiln_stats_t after = kiln_stats();
  printf("kernels launched: %llu, compiles: %llu, cache hits: %llu\n",
         (unsigned long long)(after.kernels_launched - before.kernels_launched),
         (unsigned long long)(after.compiles - before.compiles),
         (unsigned long long)(after.cache_hits - before.cache_hits));
}

/* relu(a*b + c) * sigmoid(a): a and b are (2, 3), c is (3,) and broadcasts
 * over the rows. Nothing runs until kiln_print asks for the result; then the
 * whole expression compiles into one kernel. The same expression on new data
 * reuses that kernel from the cache. */
static void fused(void) {
  section("fused expression: relu(a*b + c) * sigmoid(a)");
  float av[6] = {1, -2, 3, -4, 5, -6}, bv[6] = {0.5f, 0.5f, 0.5f, 2, 2, 2};
  float cv[3] = {0.25f, 1, -1};
  kiln_tensor *a = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *b = kiln_from_data(bv, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *c = kiln_from_data(cv, KILN_F32, KILN_SHAPE(3));
  show_cost("y", w1(a, b, c));
  kiln_manual_seed(7);
  kiln_tensor *a2 = kiln_rand(KILN_SHAPE(2, 3), KILN_F32);
  kiln_realize(a2);  /* a2 becomes a buffer, so y2 has y's kernel */
  show_cost("y2 (same expression, new a)", w1(a2, b, c));
}

static void scalars_and_promotion(void) {
  section("scalars and type promotion");
  kiln_tensor *i = kiln_arange(0, 4, 1);
  show("arange(0, 4, 1) + 10", kiln_adds(i, 10));
  show("arange(0, 4, 1) * 0.5", kiln_muls(i, 0.5));
  int32_t iv[3] = {1, 2, 3};
  float fv[3] = {0.5f, 0.25f, 0.125f};
  kiln_tensor *it = kiln_from_data(iv, KILN_I32, KILN_SHAPE(3));
  kiln_tensor *ft = kiln_from_data(fv, KILN_F32, KILN_SHAPE(3));
  kiln_tensor *sum = kiln_add(it, ft);
  printf("int32 + float32 -> %s\n", kiln_dtype_name(kiln_dtype_of(sum)));
  show("sum", sum);
}

/* Errors are values: the bad op returns an error node and the message names
 * the op, the shapes and the line of this file that built it. */
static void errors(void) {
  section("errors");
  kiln_tensor *bad = kiln_add(kiln_ones(KILN_SHAPE(2, 3), KILN_F32),
                              kiln_ones(KILN_SHAPE(4), KILN_F32));
  kiln_status s = kiln_status_of(bad);
  printf("status %d: %s\n", (int)s, kiln_last_error());
}

static void stats(void) {
  section("stats");
  kiln_stats_t s = kiln_stats();
  printf("kernels launched %llu, compiles %llu, cache hits %llu, bytes moved %llu\n",
         (unsigned long long)s.kernels_launched, (unsigned long long)s.compiles,
         (unsigned long long)s.cache_hits, (unsigned long long)s.bytes_moved);
}

int main(void) {
  kiln_scope_begin();  /* every handle made below is released at scope end */
  devices();
  creation();
  fused();
  scalars_and_promotion();
  errors();
  stats();
  kiln_scope_end();
  kiln_shutdown();
  return 0;
}
