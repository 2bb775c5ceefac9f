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

#define BIT(f) (1u << PASS_ARG_##f)

unsigned pass_arg_fields(ir_op op) {
  switch (op) {
  case IR_CONST:
  case IR_PAD: return BIT(VALUE);
  case IR_ARANGE: return BIT(START) | BIT(STEP);
  case IR_LINSPACE: return BIT(START) | BIT(STEP) | BIT(END);
  case IR_RAND:
  case IR_RANDN: return BIT(SEED) | BIT(OFFSET);
  case IR_RANDINT: return BIT(SEED) | BIT(OFFSET) | BIT(LOW) | BIT(RANGE);
  default: return 0;
  }
}

static bool field_is_real(int f) { return f <= PASS_ARG_END; }

static int64_t int_field(const ir_attr *a, int f) {
  switch (f) {
  case PASS_ARG_SEED: return (int64_t)a->seed;
  case PASS_ARG_OFFSET: return (int64_t)a->offset;
  case PASS_ARG_LOW: return a->low;
  default: return a->high - a->low;
  }
}

int64_t pass_arg_bits(const ir_node *n, int f, kiln_dtype t) {
  const ir_attr *a = &n->attr;
  if (!field_is_real(f)) return t == KILN_BOOL ? int_field(a, f) != 0 : int_field(a, f);
  double v = f == PASS_ARG_VALUE ? a->value : f == PASS_ARG_START ? a->start : f == PASS_ARG_STEP ? a->step : a->end;
  if (ir_is_float(t)) return k_float_bits(t, v);
  if (t == KILN_BOOL) return v != 0;
  return v >= 0x1p63 ? INT64_MAX : (int64_t)v;   /* int64's highest as a double is 2^63 */
}

int64_t pass_arg_raw(const ir_node *n, int f) {
  return pass_arg_bits(n, f, field_is_real(f) ? KILN_F64 : KILN_I64);
}

void pass_pin_value(pass_graph *g, const ir_node *n) {
  while (n->op == IR_EXPAND) n = n->src[0];
  if (pass_arg_fields(n->op)) ir_ptrmap_put(&g->pinned, n, 1);
}
