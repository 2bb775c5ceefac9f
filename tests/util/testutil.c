/* testutil.c: deterministic data, PyTorch's result-type rule and the
 * fused/eager/oracle comparison that the value-level suites share. */
#include "testutil.h"

#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t tu_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int tu_below(uint64_t *s, int n) { return (int)(tu_next(s) % (uint64_t)n); }

/* ---- data ---------------------------------------------------------------- */
static const double float_specials[] = {
  0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.75, -0.3, 1e-3, 100.0, -77.25,
  NAN, INFINITY, -INFINITY, 1e4, -3e9, 3e9, 1e30, 65504.0, 1e-40,
};
enum { FLOAT_SMALL = 12, FLOAT_MODERATE = 17 };   /* specials before 100, before 1e4 */

static const int64_t int_specials[] = {
  0, 1, -1, 2, -2, 3, 7, -7, 100, -100, 127, -128, 255,
  INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, 32767, -32768,
};
enum { INT_SMALL = 6, INT_MODERATE = 10 };

static double float_value(int64_t k, uint64_t seed, tu_range range, uint64_t *st) {
  static const int nspecial[] = {sizeof float_specials / sizeof *float_specials, FLOAT_MODERATE, FLOAT_SMALL};
  int ns = nspecial[range];
  if (k < ns) return float_specials[(k + (int64_t)(seed % (uint64_t)ns)) % ns];
  double u = (double)(tu_next(st) >> 11) * 0x1p-53;   /* [0, 1) */
  if (range == TU_SMALL) return (u - 0.5) * 8;
  return range == TU_FULL && k % 5 == 0 ? (u - 0.5) * 2e3 : (u - 0.5) * 16;
}

static int64_t int_value(int64_t k, uint64_t seed, tu_range range, uint64_t *st) {
  static const int nspecial[] = {sizeof int_specials / sizeof *int_specials, INT_MODERATE, INT_SMALL};
  int ns = nspecial[range];
  if (k < ns) return int_specials[(k + (int64_t)(seed % (uint64_t)ns)) % ns];
  /* mostly small values (exact in every float type), some full-width bits */
  uint64_t r = tu_next(st);
  if (range == TU_SMALL) return (int64_t)(r % 9) - 4;
  return range == TU_FULL && k % 7 == 0 ? (int64_t)r : (int64_t)(r % 201) - 100;
}

void tu_fill(kiln_dtype dt, int64_t n, uint64_t seed, tu_range range, void *out) {
  uint64_t st = seed * 0x2545F4914F6CDD1Dull + 1;
  for (int64_t k = 0; k < n; k++) {
    if (dt == KILN_BOOL) ref_store_i(dt, out, k, (int64_t)(tu_next(&st) >> 63));
    else if (ir_is_float(dt)) ref_store_f(dt, out, k, float_value(k, seed, range, &st));
    else ref_store_i(dt, out, k, int_value(k, seed, range, &st));   /* wraps to the width */
  }
}

kiln_tensor *tu_data(kiln_dtype dt, int ndim, const int64_t *shape, uint64_t seed, tu_range range) {
  int64_t n = ir_numel(ndim, shape);
  void *buf = malloc(n > 0 ? (size_t)n * ir_dtypes[dt].size : 1);
  IR_ASSERT(buf);
  tu_fill(dt, n, seed, range, buf);
  kiln_tensor *t = kiln_from_data(buf, dt, ndim, shape);
  free(buf);
  return t;
}

/* ---- result types ------------------------------------------------------- */
/* PyTorch's promoteTypes table, rows and columns in kiln_dtype order. */
#define b_ KILN_BOOL
#define u1 KILN_U8
#define i1 KILN_I8
#define i2 KILN_I16
#define i4 KILN_I32
#define i8 KILN_I64
#define f2 KILN_F16
#define bf KILN_BF16
#define f4 KILN_F32
#define f8 KILN_F64
static const kiln_dtype promote_table[KILN_NUM_DTYPES][KILN_NUM_DTYPES] = {
  /*        b_  u1  i1  i2  i4  i8  f2  bf  f4  f8 */
  /* b_ */ {b_, u1, i1, i2, i4, i8, f2, bf, f4, f8},
  /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8},
  /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8},
  /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8},
  /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8},
  /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8},
  /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8},
  /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8},
  /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8},
  /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
};
#undef b_
#undef u1
#undef i1
#undef i2
#undef i4
#undef i8
#undef f2
#undef bf
#undef f4
#undef f8

#define UNDEF KILN_NUM_DTYPES

kiln_dtype tu_promote(kiln_dtype a, kiln_dtype b) {
  return a == UNDEF ? b : b == UNDEF ? a : promote_table[a][b];
}

kiln_dtype tu_number_dtype(double v) {
  return isfinite(v) && v == trunc(v) ? KILN_I64 : KILN_F32;
}

/* PyTorch's combine_categories: a lower tier (0-dim tensors, then numbers)
 * only matters when it is of a higher category than the tier above it. */
static kiln_dtype combine(kiln_dtype higher, kiln_dtype lower) {
  if (higher != UNDEF && ir_is_float(higher)) return higher;
  if (higher == KILN_BOOL || (lower != UNDEF && ir_is_float(lower))) return tu_promote(higher, lower);
  return higher != UNDEF ? higher : lower;
}

kiln_dtype tu_result_type(int n, const kiln_dtype *dt, const tu_rank *rank) {
  kiln_dtype tier[3] = {UNDEF, UNDEF, UNDEF};
  for (int i = 0; i < n; i++) tier[rank[i]] = tu_promote(tier[rank[i]], dt[i]);
  return combine(tier[TU_TENSOR], combine(tier[TU_ZERO_DIM], tier[TU_NUMBER]));
}

kiln_dtype tu_op_dtype(ir_op op, kiln_dtype promoted) {
  switch (ir_ops[op].typing) {
  case TR_FLOAT: return ir_is_float(promoted) ? promoted : KILN_F32;
  case TR_BOOL: return KILN_BOOL;
  default: return promoted;
  }
}

/* ---- public functions by op --------------------------------------------- */
static const tu_unary_fn unary_fns[IR_NUM_OPS] = {
  [IR_NEG] = kiln_neg_at, [IR_ABS] = kiln_abs_at, [IR_EXP] = kiln_exp_at, [IR_LOG] = kiln_log_at,
  [IR_SQRT] = kiln_sqrt_at, [IR_RSQRT] = kiln_rsqrt_at, [IR_SIN] = kiln_sin_at, [IR_COS] = kiln_cos_at,
  [IR_TANH] = kiln_tanh_at, [IR_SIGMOID] = kiln_sigmoid_at, [IR_RELU] = kiln_relu_at,
  [IR_GELU] = kiln_gelu_at, [IR_GELU_TANH] = kiln_gelu_tanh_at, [IR_SILU] = kiln_silu_at, [IR_FLOOR] = kiln_floor_at,
  [IR_CEIL] = kiln_ceil_at, [IR_ROUND] = kiln_round_at, [IR_SIGN] = kiln_sign_at,
  [IR_RECIPROCAL] = kiln_reciprocal_at, [IR_LOGICAL_NOT] = kiln_logical_not_at,
  [IR_TRUNC] = kiln_trunc_at, [IR_BITWISE_NOT] = kiln_bitwise_not_at,
  [IR_ERF] = kiln_erf_at, [IR_ERFC] = kiln_erfc_at, [IR_EXPM1] = kiln_expm1_at, [IR_LOG1P] = kiln_log1p_at,
  [IR_LOG2] = kiln_log2_at, [IR_LOG10] = kiln_log10_at, [IR_EXP2] = kiln_exp2_at, [IR_TAN] = kiln_tan_at,
  [IR_ASIN] = kiln_asin_at, [IR_ACOS] = kiln_acos_at, [IR_ATAN] = kiln_atan_at, [IR_SINH] = kiln_sinh_at,
  [IR_COSH] = kiln_cosh_at, [IR_ASINH] = kiln_asinh_at, [IR_ACOSH] = kiln_acosh_at, [IR_ATANH] = kiln_atanh_at,
};

static const struct { tu_binary_fn fn; tu_scalar_fn sfn; } binary_fns[IR_NUM_OPS] = {
  [IR_ADD] = {kiln_add_at, kiln_adds_at}, [IR_SUB] = {kiln_sub_at, kiln_subs_at},
  [IR_MUL] = {kiln_mul_at, kiln_muls_at}, [IR_DIV] = {kiln_div_at, kiln_divs_at},
  [IR_POW] = {kiln_pow_at, kiln_pows_at}, [IR_MAXIMUM] = {kiln_maximum_at, kiln_maximums_at},
  [IR_MINIMUM] = {kiln_minimum_at, kiln_minimums_at}, [IR_EQ] = {kiln_eq_at, kiln_eqs_at},
  [IR_NE] = {kiln_ne_at, kiln_nes_at}, [IR_LT] = {kiln_lt_at, kiln_lts_at},
  [IR_LE] = {kiln_le_at, kiln_les_at}, [IR_GT] = {kiln_gt_at, kiln_gts_at},
  [IR_GE] = {kiln_ge_at, kiln_ges_at}, [IR_LOGICAL_AND] = {kiln_logical_and_at, kiln_logical_ands_at},
  [IR_LOGICAL_OR] = {kiln_logical_or_at, kiln_logical_ors_at},
  [IR_FLOOR_DIVIDE] = {kiln_floor_divide_at, kiln_floor_divides_at},
  [IR_TRUNC_DIVIDE] = {kiln_trunc_divide_at, kiln_trunc_divides_at},
  [IR_REMAINDER] = {kiln_remainder_at, kiln_remainders_at}, [IR_FMOD] = {kiln_fmod_at, kiln_fmods_at},
  [IR_COPYSIGN] = {kiln_copysign_at, kiln_copysigns_at},
  [IR_BITWISE_AND] = {kiln_bitwise_and_at, kiln_bitwise_ands_at},
  [IR_BITWISE_OR] = {kiln_bitwise_or_at, kiln_bitwise_ors_at},
  [IR_BITWISE_XOR] = {kiln_bitwise_xor_at, kiln_bitwise_xors_at},
  [IR_LSHIFT] = {kiln_bitwise_left_shift_at, kiln_bitwise_left_shifts_at},
  [IR_RSHIFT] = {kiln_bitwise_right_shift_at, kiln_bitwise_right_shifts_at},
  [IR_ATAN2] = {kiln_atan2_at, kiln_atan2s_at},
};

tu_unary_fn tu_unary(ir_op op) { return unary_fns[op]; }
tu_binary_fn tu_binary(ir_op op) { return binary_fns[op].fn; }
tu_scalar_fn tu_scalar(ir_op op) { return binary_fns[op].sfn; }

/* ---- fused, eager, oracle ------------------------------------------------ */
enum { TU_SEED = 20240611 };

/* Realizes t and compares it with expect (and its dtype with want_dt). */
static bool check_one(kiln_tensor *t, ref_tensor *expect, kiln_dtype want_dt, ref_tol tol,
                      const char *mode, char *why, size_t n) {
  char inner[1024];
  bool ok = true;
  if (kiln_realize(t) != KILN_OK) {
    snprintf(inner, sizeof inner, "realize failed: %s", kiln_last_error());
    ok = false;
  } else if (want_dt != UNDEF && kiln_dtype_of(t) != want_dt) {
    snprintf(inner, sizeof inner, "result dtype %s, expected %s", kiln_dtype_name(kiln_dtype_of(t)),
             kiln_dtype_name(want_dt));
    ok = false;
  } else {
    ok = ref_check(expect, t, tol.rtol, tol.atol, inner, sizeof inner);
  }
  if (!ok) snprintf(why, n, "%s: %s", mode, inner);
  return ok;
}

bool tu_check_fused_eager(tu_build_fn build, const void *ctx, kiln_dtype want_dt, ref_tol tol,
                          char *why, size_t n) {
  int was_eager = kiln_get_eager();
  kiln_set_eager(0);
  kiln_scope_begin();
  kiln_manual_seed(TU_SEED);
  kiln_tensor *t = build(ctx);
  ref_tensor *expect = ref_eval(t);
  bool ok = check_one(t, expect, want_dt, tol, "fused", why, n);
  kiln_scope_end();
  if (ok) {
    kiln_set_eager(1);
    kiln_scope_begin();
    kiln_manual_seed(TU_SEED);
    ok = check_one(build(ctx), expect, want_dt, tol, "eager", why, n);
    kiln_scope_end();
  }
  kiln_set_eager(was_eager);
  ref_free(expect);
  return ok;
}

bool tu_have_gpu(void) {
  if (kiln_cuda_is_available()) return true;
  const char *req = getenv("KILN_REQUIRE_GPU");
  ck_assert_msg(!req || strcmp(req, "1"), "KILN_REQUIRE_GPU=1 but no CUDA device: %s",
                kiln_cuda_unavailable_reason());
  printf("skipped: no CUDA device (%s)\n", kiln_cuda_unavailable_reason());
  fflush(stdout);
  return false;
}

/* ---- accuracy sweeps ---------------------------------------------------- */
static float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

int tu_sweep_f32(float *x, int n, double lo, double hi) {
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1, -1, 2, -2, 0.5f, -0.5f,
                                  FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, -1e-45f, 1e-30f, -1e-30f,
                                  88.72283f, 88.72284f, 89.41599f, -87.33655f, -103.972f, -104.5f,
                                  3.14159274f, 1.57079637f, 0.99999994f, -0.99999994f, 1.00000012f,
                                  0.41421357f, 2.41421366f, 16367173.0f * 0x1p72f, 1e30f, -1e30f, 0.625f};
  int m = 0;
  for (size_t i = 0; i < sizeof special / sizeof *special && m < n; i++) x[m++] = special[i];
  int nbits = n / 4, nlin = n - m - nbits;
  for (int i = 0; i < nlin; i++) x[m++] = (float)(lo + (hi - lo) * i / (nlin - 1));
  for (int i = 0; i < nbits; i++) x[m++] = f32_of_bits((uint32_t)((uint64_t)i * 0xffffffffull / nbits));
  return m;
}

static int64_t ord32(float f) {  /* floats -> consecutive integers */
  int32_t i;
  memcpy(&i, &f, 4);
  return i < 0 ? (int64_t)INT32_MIN - i : i;
}

int64_t tu_ulps_f32(float got, float want) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got) ? 0 : INT64_MAX;
  return llabs(ord32(got) - ord32(want));
}

/* ---- files ---------------------------------------------------------------- */
char *tu_tmp_path(const char *name) {
  static char buf[256];
  const char *dir = getenv("TMPDIR");
  snprintf(buf, sizeof buf, "%s/kiln_test_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
  return buf;
}

void tu_write_file(const char *path, const void *p, size_t n) {
  FILE *fp = fopen(path, "wb");
  ck_assert_ptr_nonnull(fp);
  ck_assert_uint_eq(fwrite(p, 1, n, fp), n);
  ck_assert_int_eq(fclose(fp), 0);
}

size_t tu_read_file(const char *path, void *out, size_t cap) {
  FILE *fp = fopen(path, "rb");
  ck_assert_ptr_nonnull(fp);
  size_t n = fread(out, 1, cap, fp);
  fclose(fp);
  return n;
}

int tu_mappings_of(const char *path) {
  FILE *fp = fopen("/proc/self/maps", "r");
  char line[1024];
  int n = 0;
  while (fp && fgets(line, sizeof line, fp))
    if (strstr(line, path)) n++;
  if (fp) fclose(fp);
  return n;
}

void tu_assert_bytes(kiln_tensor *t, const void *want, size_t n) {
  unsigned char got[4096];
  ck_assert_uint_le(n, sizeof got);
  ck_assert_int_eq(kiln_copy_to_host(t, got, sizeof got), KILN_OK);
  ck_assert(!n || !memcmp(got, want, n));   /* want may be NULL when empty */
}

int tu_leftovers(const char *path) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  *slash = '\0';
  const char *base = slash + 1;
  int n = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    if (!strncmp(e->d_name, base, strlen(base)) && strcmp(e->d_name, base)) n++;
  if (d) closedir(d);
  return n;
}

TCase *tu_tcase(Suite *s, const char *name) {
  TCase *tc = tcase_create(name);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  return tc;
}

/* ---- values and errors of one result ------------------------------------- */
void tu_expect_values(kiln_tensor *t, int ndim, const int64_t *shape, const double *want, double tol,
                      const char *file, int line) {
  ck_assert_msg(kiln_realize(t) == KILN_OK, "%s:%d: realize failed: %s", file, line, kiln_last_error());
  ck_assert_msg(kiln_ndim(t) == ndim, "%s:%d: %d dims, expected %d", file, line, kiln_ndim(t), ndim);
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    ck_assert_msg(kiln_shape(t)[d] == shape[d], "%s:%d: dim %d is %lld, expected %lld", file, line, d,
                  (long long)kiln_shape(t)[d], (long long)shape[d]);
    n *= shape[d];
  }
  kiln_tensor *c = kiln_cast(t, KILN_F64);
  const double *got = kiln_data(c);
  ck_assert_msg(got || n == 0, "%s:%d: %s", file, line, kiln_last_error());
  for (int64_t i = 0; i < n; i++) {
    bool same = isnan(want[i]) ? isnan(got[i]) : (got[i] == want[i] || fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])));
    ck_assert_msg(same, "%s:%d: element %lld is %.17g, expected %.17g", file, line, (long long)i, got[i], want[i]);
  }
  kiln_release(c);
}

void tu_expect_error(kiln_tensor *t, kiln_status st, const char *file, int line, const char *text) {
  ck_assert_msg(kiln_status_of(t) == st, "%s:%d: status %d, expected %d (%s)", file, line, kiln_status_of(t), st,
                kiln_last_error());
  const char *msg = kiln_last_error();
  char where[512];
  snprintf(where, sizeof where, "%s:%d: ", file, line);
  ck_assert_msg(strncmp(msg, where, strlen(where)) == 0, "message %s lacks %s", msg, where);
  ck_assert_msg(strstr(msg, text), "message %s lacks %s", msg, text);
  ck_assert_int_eq(kiln_realize(t), st);
}

kiln_tensor *tu_chain(kiln_tensor *x, int i) {
  kiln_tensor *y = kiln_adds(x, 0.5);
  for (int d = 0; d < TU_CHAIN_STEPS; d++, i /= 4) {
    int op = i % 4;
    y = op == 0 ? kiln_add(y, x) : op == 1 ? kiln_sub(y, x) : op == 2 ? kiln_mul(y, x) : kiln_maximum(y, x);
  }
  return y;
}

uint64_t tu_kernels_of(kiln_tensor *t) {
  kiln_reset_stats();
  ck_assert_msg(kiln_realize(t) == KILN_OK, "%s", kiln_last_error());
  return kiln_stats().kernels_launched;
}
