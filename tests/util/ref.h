/* ref.h: the test oracle. ref_eval computes any graph node node by node in
 * plain C (f64 for floats, exact int64 for integers, rounding to each node's
 * dtype after every node) so compiled results can be compared with it. */
#ifndef KILN_TEST_REF_H
#define KILN_TEST_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/graph.h"

/* A contiguous row-major value of one node. Exactly one of f, i is set:
 * f for float dtypes (values already rounded to the dtype), i for integer
 * and bool dtypes (exact, wrapped to the dtype's width; bool is 0/1). */
typedef struct {
  kiln_dtype dtype;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
  int64_t numel;
  double *f;
  int64_t *i;
} ref_tensor;

/* The value of t, computed from its graph. Call it BEFORE kiln_realize(t): a
 * realized node has dropped its sources (it is then read as a BUFFER). NULL
 * when t is an error node or holds an op the oracle does not know. */
ref_tensor *ref_eval(kiln_tensor *t);
void ref_free(ref_tensor *r);
double ref_get(const ref_tensor *r, int64_t k);   /* element k as a double */

/* Compares the realized t with expect elementwise: NaN matches NaN, infinities
 * match by sign, integers exactly, floats within atol + rtol*|expected|. On
 * mismatch writes the first bad index, both values, dtype and shape to why. */
bool ref_check(ref_tensor *expect, kiln_tensor *t, double rtol, double atol, char *why, size_t n);
/* The same comparison of contiguous raw storage of expect's dtype (a result
 * a test computed outside kiln_realize). */
bool ref_check_data(const ref_tensor *expect, const void *data, double rtol, double atol, char *why, size_t n);

/* Per-op tolerance of one op on one result dtype: zero for exact ops
 * (arithmetic that rounds once, comparisons, selects, casts, rounding) and
 * for integers; a few ulps of the dtype for transcendentals. */
typedef struct { double rtol, atol; } ref_tol;
ref_tol ref_tol_op(ir_op op, kiln_dtype dt);
/* The tolerance of the loosest op for dt: for checks of whole expressions. */
ref_tol ref_tol_dtype(kiln_dtype dt);

/* Storage conversions of the narrow floats, round to nearest even. */
uint16_t ref_f16_bits(double x);
double ref_f16_value(uint16_t bits);
uint16_t ref_bf16_bits(double x);
double ref_bf16_value(uint16_t bits);
/* x rounded to float dtype dt (f16, bf16, f32 or f64); f16 and bf16
 * through f32. */
double ref_round(kiln_dtype dt, double x);
/* Element k of raw storage of dtype dt, as a double (exact for ints < 2^53)
 * or as an int64 (integers and bool). */
double ref_load_f(kiln_dtype dt, const void *p, int64_t k);
int64_t ref_load_i(kiln_dtype dt, const void *p, int64_t k);
/* Stores v (already representable) as element k of raw storage of dtype dt. */
void ref_store_f(kiln_dtype dt, void *p, int64_t k, double v);
void ref_store_i(kiln_dtype dt, void *p, int64_t k, int64_t v);

/* ---- ref_conv.c: convolutions as direct loops ---- */
/* Batch n (>= 1), channels c in and o out, input h x w, kernel kh x kw,
 * stride, padding, output padding (transposed only), dilation, groups. */
typedef struct {
  int64_t n, c, h, w, o, kh, kw, s[2], p[2], op[2], d[2], g;
} ref_conv;
/* The output's (H, W). */
void ref_conv_out(const ref_conv *q, bool transposed, int64_t out[2]);
/* F.conv2d (w: (o, c/g, kh, kw)) and F.conv_transpose2d (w: (c, o/g, kh,
 * kw)) of contiguous x into contiguous y; b (o,) or NULL. */
void ref_conv2d(const ref_conv *q, const double *x, const double *w, const double *b, double *y);
void ref_conv_transpose2d(const ref_conv *q, const double *x, const double *w, const double *b, double *y);

#endif
