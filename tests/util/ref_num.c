/* ref_num.c: the oracle's number formats: round-to-nearest-even conversion
 * of f16/bf16, raw storage loads and stores for every dtype, and the per-op
 * tolerances that compiled results are held to. */
#include "ref.h"

#include <math.h>
#include <string.h>

/* ---- narrow floats: one encoder for both formats (mbits mantissa bits,
 * ebits exponent bits), rounding the double directly so there is exactly one
 * rounding (f32 -> f16 through a double is the same value). */
static uint16_t small_float_bits(double x, int mbits, int ebits) {
  uint32_t sign = signbit(x) ? 1u << (mbits + ebits) : 0;
  uint32_t emax = (1u << ebits) - 1;
  int bias = (1 << (ebits - 1)) - 1;
  if (isnan(x)) return (uint16_t)(sign | emax << mbits | 1u << (mbits - 1));
  double a = fabs(x);
  if (isinf(a)) return (uint16_t)(sign | emax << mbits);
  int e;
  frexp(a, &e);
  int E = a == 0 || e - 1 < 1 - bias ? 1 - bias : e - 1;  /* a in [2^E, 2^(E+1)) unless subnormal */
  double q = nearbyint(ldexp(a, mbits - E));  /* default rounding mode: to nearest even */
  if (q >= ldexp(1, mbits + 1)) {             /* rounded up into the next binade */
    q /= 2;
    E++;
  }
  if (E > bias) return (uint16_t)(sign | emax << mbits);
  uint32_t qi = (uint32_t)q;
  if (qi < 1u << mbits) return (uint16_t)(sign | qi);   /* subnormal or zero */
  return (uint16_t)(sign | (uint32_t)(E + bias) << mbits | (qi - (1u << mbits)));
}

static double small_float_value(uint16_t bits, int mbits, int ebits) {
  uint32_t emax = (1u << ebits) - 1, e = (bits >> mbits) & emax, m = bits & ((1u << mbits) - 1);
  int bias = (1 << (ebits - 1)) - 1;
  double s = bits >> (mbits + ebits) ? -1.0 : 1.0;
  if (e == emax) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp(m, 1 - bias - mbits);
  return s * ldexp(m | 1u << mbits, (int)e - bias - mbits);
}

uint16_t ref_f16_bits(double x) { return small_float_bits(x, 10, 5); }
double ref_f16_value(uint16_t b) { return small_float_value(b, 10, 5); }
uint16_t ref_bf16_bits(double x) { return small_float_bits(x, 7, 8); }
double ref_bf16_value(uint16_t b) { return small_float_value(b, 7, 8); }

/* Narrow floats are reached through f32, as kiln computes them in f32 (and
 * as PyTorch converts a double to Half or BFloat16). */
double ref_round(kiln_dtype dt, double x) {
  switch (dt) {
  case KILN_F16: return ref_f16_value(ref_f16_bits((float)x));
  case KILN_BF16: return ref_bf16_value(ref_bf16_bits((float)x));
  case KILN_F32: return (float)x;
  default: return x;
  }
}

/* ---- raw storage -------------------------------------------------------- */
#define LOAD(T) do { T v; memcpy(&v, (const char *)p + k * sizeof v, sizeof v); return v; } while (0)
#define STORE(T, x) do { T v = (T)(x); memcpy((char *)p + k * sizeof v, &v, sizeof v); return; } while (0)

int64_t ref_load_i(kiln_dtype dt, const void *p, int64_t k) {
  switch (dt) {
  case KILN_BOOL: { uint8_t v; memcpy(&v, (const char *)p + k, 1); return v != 0; }
  case KILN_U8: LOAD(uint8_t);
  case KILN_I8: LOAD(int8_t);
  case KILN_I16: LOAD(int16_t);
  case KILN_I32: LOAD(int32_t);
  case KILN_I64: LOAD(int64_t);
  default: return (int64_t)ref_load_f(dt, p, k);
  }
}

double ref_load_f(kiln_dtype dt, const void *p, int64_t k) {
  switch (dt) {
  case KILN_F16: { uint16_t b; memcpy(&b, (const char *)p + 2 * k, 2); return ref_f16_value(b); }
  case KILN_BF16: { uint16_t b; memcpy(&b, (const char *)p + 2 * k, 2); return ref_bf16_value(b); }
  case KILN_F32: LOAD(float);
  case KILN_F64: LOAD(double);
  default: return (double)ref_load_i(dt, p, k);
  }
}

void ref_store_i(kiln_dtype dt, void *p, int64_t k, int64_t x) {
  switch (dt) {
  case KILN_BOOL: STORE(uint8_t, x != 0);
  case KILN_U8: STORE(uint8_t, x);
  case KILN_I8: STORE(int8_t, x);
  case KILN_I16: STORE(int16_t, x);
  case KILN_I32: STORE(int32_t, x);
  case KILN_I64: STORE(int64_t, x);
  default: ref_store_f(dt, p, k, (double)x); return;
  }
}

void ref_store_f(kiln_dtype dt, void *p, int64_t k, double x) {
  switch (dt) {
  case KILN_F16: STORE(uint16_t, ref_f16_bits(x));
  case KILN_BF16: STORE(uint16_t, ref_bf16_bits(x));
  case KILN_F32: STORE(float, x);
  case KILN_F64: STORE(double, x);
  default: ref_store_i(dt, p, k, (int64_t)x); return;
  }
}

/* ---- tolerances --------------------------------------------------------- */
/* Ops whose result is one correctly rounded operation in any implementation
 * (f16/bf16 computed in f32 and rounded again lose nothing: f32 has more than
 * twice their precision), or no arithmetic at all. */
static bool op_is_exact(ir_op op) {
  switch (op) {
  case IR_BUFFER: case IR_CONST: case IR_EYE: case IR_RAND: case IR_RANDINT:
  case IR_EXPAND: case IR_NEG: case IR_ABS: case IR_RELU: case IR_FLOOR:
  case IR_CEIL: case IR_ROUND: case IR_SIGN: case IR_LOGICAL_NOT: case IR_CAST:
  case IR_ADD: case IR_SUB: case IR_MUL: case IR_MAXIMUM: case IR_MINIMUM:
  case IR_EQ: case IR_NE: case IR_LT: case IR_LE: case IR_GT: case IR_GE:
  case IR_LOGICAL_AND: case IR_LOGICAL_OR: case IR_WHERE: case IR_CLAMP:
  case IR_FLOOR_DIVIDE: case IR_TRUNC_DIVIDE: case IR_REMAINDER: case IR_FMOD: case IR_COPYSIGN:
  case IR_BITWISE_AND: case IR_BITWISE_OR: case IR_BITWISE_XOR: case IR_LSHIFT: case IR_RSHIFT:
  case IR_TRUNC: case IR_BITWISE_NOT:
    return true;
  default:
    return false;
  }
}

/* Correctly rounded in IEEE arithmetic, but an implementation may reach them
 * through a reciprocal or a product: allow two ulps. */
static bool op_is_ulp(ir_op op) {
  return op == IR_DIV || op == IR_SQRT || op == IR_RSQRT || op == IR_RECIPROCAL ||
         op == IR_ARANGE || op == IR_LINSPACE;
}

static double dtype_eps(kiln_dtype dt) {
  switch (dt) {
  case KILN_F16: return 0x1p-10;
  case KILN_BF16: return 0x1p-7;
  case KILN_F32: return 0x1p-23;
  default: return 0x1p-52;
  }
}

ref_tol ref_tol_dtype(kiln_dtype dt) {
  switch (dt) {
  case KILN_F16: return (ref_tol){2e-3, 1e-5};
  case KILN_BF16: return (ref_tol){1.6e-2, 1e-4};
  case KILN_F32: return (ref_tol){1e-5, 1e-6};
  case KILN_F64: return (ref_tol){1e-12, 1e-13};
  default: return (ref_tol){0, 0};
  }
}

ref_tol ref_tol_op(ir_op op, kiln_dtype dt) {
  if (!ir_is_float(dt) || op_is_exact(op)) return (ref_tol){0, 0};
  if (op_is_ulp(op)) return (ref_tol){2 * dtype_eps(dt), 0};
  return ref_tol_dtype(dt);
}
