/* testutil.h: helpers shared by the value-level suites: deterministic input
 * data, PyTorch's result-type rule (written independently of the frontend),
 * and the fused-then-eager check of one expression against the oracle. */
#ifndef KILN_TESTUTIL_H
#define KILN_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <check.h>

#include "ref.h"

/* Input ranges: FULL has every special value (NaN, infinities, signed zeros,
 * halves, huge values, integer extremes); MODERATE keeps |x| <= 100 (plus
 * NaN, inf and zeros) for ops whose accuracy on huge inputs is out of scope
 * (sin(1e9) in f32 needs a Payne-Hanek reduction no kernel library does);
 * SMALL keeps finite |x| <= 4, for chains where rounding differences of
 * large intermediates would swamp the comparison. */
typedef enum { TU_FULL, TU_MODERATE, TU_SMALL } tu_range;

/* n values of dtype dt (raw storage) from seed: specials first, rotated by
 * seed so two inputs pair different specials, then pseudo-random values. */
void tu_fill(kiln_dtype dt, int64_t n, uint64_t seed, tu_range range, void *out);
/* A tensor of those values (kiln_from_data). */
kiln_tensor *tu_data(kiln_dtype dt, int ndim, const int64_t *shape, uint64_t seed, tu_range range);

/* splitmix64: a small seeded generator for data and random graphs. */
uint64_t tu_next(uint64_t *state);
int tu_below(uint64_t *state, int n);   /* uniform in [0, n) */

/* PyTorch's result type. Each operand is a dimensioned tensor, a 0-dim
 * tensor, or a wrapped number (a scalar argument: an integral double is an
 * int64 number, any other a float number of the default dtype, f32). */
typedef enum { TU_TENSOR, TU_ZERO_DIM, TU_NUMBER } tu_rank;
kiln_dtype tu_promote(kiln_dtype a, kiln_dtype b);
kiln_dtype tu_result_type(int n, const kiln_dtype *dt, const tu_rank *rank);
kiln_dtype tu_number_dtype(double v);
/* The op's result dtype from its promoted operand dtype (ops.def typing). */
kiln_dtype tu_op_dtype(ir_op op, kiln_dtype promoted);

/* The public function of an elementwise op (NULL for other ops): the
 * suites drive ops by their ir_op. Scalar forms are kiln_adds and friends. */
typedef kiln_tensor *(*tu_unary_fn)(const char *, int, kiln_tensor *);
typedef kiln_tensor *(*tu_binary_fn)(const char *, int, kiln_tensor *, kiln_tensor *);
typedef kiln_tensor *(*tu_scalar_fn)(const char *, int, kiln_tensor *, double);
tu_unary_fn tu_unary(ir_op op);
tu_binary_fn tu_binary(ir_op op);
tu_scalar_fn tu_scalar(ir_op op);

/* Builds one expression (its inputs too); called once per mode. */
typedef kiln_tensor *(*tu_build_fn)(const void *ctx);
/* Builds the expression lazily, computes its value with ref_eval, realizes
 * it (fused) and compares; then builds it again with kiln_set_eager(1),
 * realizes and compares with the same expected value. Random sources see
 * the same seed both times. want_dt (unless KILN_NUM_DTYPES) is the result
 * dtype the expression must have. False, with the reason in why, on the
 * first difference. */
bool tu_check_fused_eager(tu_build_fn build, const void *ctx, kiln_dtype want_dt, ref_tol tol,
                          char *why, size_t n);

/* Realizes t and checks its shape and values (as doubles, NaN equal to NaN,
 * |got - want| <= tol * (1 + |want|)) against the n values of want. */
void tu_expect_values(kiln_tensor *t, int ndim, const int64_t *shape, const double *want, double tol,
                      const char *file, int line);
#define TU_EXPECT(t, shape_macro, tol, ...) \
  tu_expect_values(t, shape_macro, (const double[]){__VA_ARGS__}, tol, __FILE__, __LINE__)
/* t is an error node of status st whose message starts "file:line: " (the
 * caller's line) and contains text (the whole rest of it, for an exact
 * check), and realizing it reports st again. The expression comes first,
 * so that its __LINE__ is the row's first line. */
void tu_expect_error(kiln_tensor *t, kiln_status st, const char *file, int line, const char *text);
#define TU_EXPECT_ERROR(expr, st, text) tu_expect_error(expr, st, __FILE__, __LINE__, text)
/* The same for an error made `back` lines above (an out-parameter's). */
#define TU_EXPECT_ERROR_ABOVE(t, back, st, text) tu_expect_error(t, st, __FILE__, __LINE__ - (back), text)
/* Structure i of many: (x + 0.5) then TU_CHAIN_STEPS steps y = op(y, x),
 * op the base-4 digits of i (add, sub, mul, maximum). No simplification
 * merges two of them, and they stay distinct when constants become launch
 * arguments or kernels become shape-generic, so every i is its own kernel. */
enum { TU_CHAIN_STEPS = 9 };
kiln_tensor *tu_chain(kiln_tensor *x, int i);
/* Kernels launched to realize t. */
uint64_t tu_kernels_of(kiln_tensor *t);

/* Whether cuda:0 can run this test. Without a GPU it prints "skipped: no
 * CUDA device (<reason>)" and returns false (Check has no skip), unless
 * KILN_REQUIRE_GPU=1 (scripts/gpu-check.sh on a GPU machine): then a missing
 * GPU fails the test, so a broken driver cannot pass as a skip. */
bool tu_have_gpu(void);

/* Inputs for the accuracy sweeps of f32 functions: special values (zeros,
 * infinities, nan, extremes, overflow edges, multiples of pi/2), then a
 * linear sweep of [lo, hi], then a quarter of n bit patterns spread over
 * every float. Returns how many it wrote (at most n). */
int tu_sweep_f32(float *x, int n, double lo, double hi);
/* ulps between got and want (subnormals in subnormal ulps); a nan only
 * matches a nan (INT64_MAX otherwise). */
int64_t tu_ulps_f32(float got, float want);

/* ---- files (the file-format suites) ---- */
/* $TMPDIR/kiln_test_<pid>_<name> (/tmp without TMPDIR), in a buffer that
 * the next call overwrites. */
char *tu_tmp_path(const char *name);
/* The n bytes at p as the whole file path; asserts on failure. */
void tu_write_file(const char *path, const void *p, size_t n);
/* Up to cap bytes of path into out; how many were read. */
size_t tu_read_file(const char *path, void *out, size_t cap);
/* Lines of /proc/self/maps that map path: 1 while a loaded tensor borrows it. */
int tu_mappings_of(const char *path);
/* t's values (copied to the host) are the n bytes at want. */
void tu_assert_bytes(kiln_tensor *t, const void *want, size_t n);
/* Files beside path whose names start with its own: a temporary file a
 * save left behind. */
int tu_leftovers(const char *path);

/* A test case added to s with a timeout that fits JIT compiles under
 * sanitizers (Check's default is 4 s). */
TCase *tu_tcase(Suite *s, const char *name);

#endif
