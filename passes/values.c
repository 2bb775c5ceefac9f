/* values.c: the one rule that says which constant values are code. Every
 * other value a kernel reads (kiln_full, the scalar forms, clamp bounds, pad
 * fills, arange/linspace starts and steps, random seeds, offsets and bounds)
 * is a launch argument (KX_ARG, ir/kernel.h): the kernel cache keys the
 * program's structure, so a loop over new values compiles once. */
#include "pass.h"

#include <math.h>

bool pass_const_of(const ir_node *n, double *v) {
  while (n->op == IR_EXPAND) n = n->src[0];
  if (n->op != IR_CONST) return false;
  *v = n->attr.value;
  return true;
}

/* Exponents up to this size are multiplies: x**4 = (x*x)*(x*x). */
#define POW_MAX_MULTIPLY 4

/* A value is code when it changes the code, not only a number in it:
 * - the simplifier's identities (x*1, x/1, x-0, x**1, integer x+0, -(-x):
 *   passes/simplify.c) have already removed theirs from the graph before
 *   lowering; they change the graph itself.
 * - a float pow's exponent that is a small integer: lowering turns it into
 *   multiplies (a divide for negative exponents), 2-3 operations instead of
 *   pow's ~40 dependent ones in f64 (codegen_cpu/math.c).
 * Looked at and left as arguments: x / c (LLVM would multiply by 1/c for a
 * power of two; streaming kernels are bound by memory either way) and
 * randint's range (i64 remainders have no vector instruction, by a constant
 * or not). */
bool pass_value_is_code(const ir_node *user, int slot, double *value) {
  if (user->op != IR_POW || slot != 1 || !ir_is_float(user->attr.compute)) return false;
  double v;
  if (!pass_const_of(user->src[1], &v) || v != floor(v) || fabs(v) > POW_MAX_MULTIPLY) return false;
  *value = v;
  return true;
}
