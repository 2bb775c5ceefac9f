/* gradcheck.h: torch.autograd.gradcheck's method for kiln_grad: f64 inputs,
 * central differences (eps 1e-6) of sum(f(x) * dy) against the analytic
 * vector-Jacobian product, within atol 1e-5 / rtol 1e-3; then the same
 * gradients in eager mode, through strided views of the inputs, and in f32
 * against the f64 gradients within f32 tolerances. */
#ifndef KILN_GRADCHECK_H
#define KILN_GRADCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

/* Builds y from the inputs x[0..n) (whatever their dtype and layout); is
 * called many times. */
typedef kiln_tensor *(*gc_fn)(kiln_tensor *const *x, const void *ctx);

/* One input: its shape and the range its values are drawn from; zeros > 0
 * puts exact zeros at that many positions (a product's special case). */
typedef struct {
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
  double lo, hi;
  int zeros;
} gc_input;

typedef enum {
  GC_F64 = 1,       /* analytic against central differences */
  GC_EAGER = 2,     /* the same gradients with kiln_set_eager(1) */
  GC_VIEWS = 4,     /* the same through transposed (non-contiguous) realized inputs */
  GC_F32 = 8,       /* f32 inputs against the f64 gradients */
  GC_ALL = 15
} gc_modes;

/* Checks fn's gradients with respect to every input in the given modes;
 * false with the first difference in why. seed picks the data. Each op
 * of every graph it differentiates is counted in seen[op] (may be NULL). */
bool gc_check(gc_fn fn, const void *ctx, int n, const gc_input *in, unsigned modes, uint64_t seed,
              unsigned *seen, char *why, size_t len);

/* f64 data for in (deterministic from seed). */
void gc_fill(const gc_input *in, uint64_t seed, double *out);

#endif
