/* math.c: transcendentals for the CPU back end as branch-free LLVM IR, each an
 * internal alwaysinline function of the kernel's module ("kiln.expf", ...),
 * so a loop that calls them still vectorizes. f32: polynomial approximations
 * (Cephes-style minimax coefficients, our own range reductions); f64: calls
 * to the process's libm (exact enough, but such loops stay scalar).
 * Measured accuracy is in tests/test_cpu_codegen.c and tests/test_math_ops.c. */
#include "codegen_cpu/cpu_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const cpu_libm_sym cpu_libm_syms[] = {
  {"exp", (void *)exp}, {"log", (void *)log}, {"sin", (void *)sin}, {"cos", (void *)cos},
  {"tanh", (void *)tanh}, {"erfc", (void *)erfc}, {"pow", (void *)pow},
  {"sincos", (void *)sincos},  /* LLVM merges sin(x) and cos(x) into it */
  {"fmod", (void *)fmod}, {"fmodf", (void *)fmodf},  /* frem: fmod, remainder, floor_divide */
  {"erf", (void *)erf}, {"expm1", (void *)expm1}, {"log1p", (void *)log1p}, {"log2", (void *)log2},
  {"log10", (void *)log10}, {"exp2", (void *)exp2}, {"tan", (void *)tan}, {"asin", (void *)asin},
  {"acos", (void *)acos}, {"atan", (void *)atan}, {"sinh", (void *)sinh}, {"cosh", (void *)cosh},
  {"asinh", (void *)asinh}, {"acosh", (void *)acosh}, {"atanh", (void *)atanh}, {"atan2", (void *)atan2},
  {CPU_SORT_SYMBOL, (void *)cpu_sort_row},   /* not libm: kiln's row sort (sort.c) */
  {CPU_ATTN_SYMBOL, (void *)cpu_attention},  /* nor this: the fused attention (attention.c) */
  {NULL, NULL},
};

typedef struct {
  cpu_cg *g;
  LLVMBuilderRef b;   /* where this function's code goes */
} mb;

typedef LLVMValueRef (*math_body)(mb *m, LLVMValueRef x, LLVMValueRef y);

/* ---- builders, typed by their operands ---------------------------------- */
static LLVMValueRef K(LLVMValueRef like, double v) { return LLVMConstReal(LLVMTypeOf(like), v); }
static LLVMValueRef I(LLVMValueRef like, long long v) {
  return LLVMConstInt(LLVMTypeOf(like), (unsigned long long)v, 1);
}
static LLVMValueRef add(mb *m, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFAdd(m->b, x, y, ""); }
static LLVMValueRef sub(mb *m, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFSub(m->b, x, y, ""); }
static LLVMValueRef mul(mb *m, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFMul(m->b, x, y, ""); }
static LLVMValueRef dvd(mb *m, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFDiv(m->b, x, y, ""); }
static LLVMValueRef sel(mb *m, LLVMValueRef c, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(m->b, c, x, y, "");
}
static LLVMValueRef cmp(mb *m, LLVMRealPredicate p, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildFCmp(m->b, p, x, y, "");
}
static LLVMValueRef isnan_(mb *m, LLVMValueRef x) { return cmp(m, LLVMRealUNO, x, x); }

/* An intrinsic overloaded on the type of its first argument. */
static LLVMValueRef call(mb *m, const char *name, unsigned n, LLVMValueRef x, LLVMValueRef y, LLVMValueRef z) {
  LLVMTypeRef t = LLVMTypeOf(x);
  return cpu_intrin(m->g, m->b, name, &t, 1, (LLVMValueRef[]){x, y, z}, n);
}
static LLVMValueRef fma_(mb *m, LLVMValueRef x, LLVMValueRef y, LLVMValueRef z) {
  return call(m, "llvm.fmuladd", 3, x, y, z);  /* fused where the CPU has FMA */
}
static LLVMValueRef fabs_(mb *m, LLVMValueRef x) { return call(m, "llvm.fabs", 1, x, NULL, NULL); }
static LLVMValueRef rint_(mb *m, LLVMValueRef x) { return call(m, "llvm.roundeven", 1, x, NULL, NULL); }
static LLVMValueRef clamp_(mb *m, LLVMValueRef x, double lo, double hi) {  /* nan -> lo */
  return call(m, "llvm.minnum", 2, call(m, "llvm.maxnum", 2, x, K(x, lo), NULL), K(x, hi), NULL);
}

/* Horner: c[0] x^(n-1) + ... + c[n-1] */
static LLVMValueRef poly(mb *m, LLVMValueRef x, const double *c, int n) {
  LLVMValueRef r = K(x, c[0]);
  for (int i = 1; i < n; i++) r = fma_(m, r, x, K(x, c[i]));
  return r;
}

static bool is_f32(LLVMValueRef x) { return LLVMGetTypeKind(LLVMTypeOf(x)) == LLVMFloatTypeKind; }

/* y * 2^n for integer n (i32 for f32, i64 for f64) in two steps so that
 * 2^n itself never overflows or goes subnormal. */
static LLVMValueRef scale2(mb *m, LLVMValueRef y, LLVMValueRef n) {
  bool f = is_f32(y);
  LLVMValueRef n1 = LLVMBuildAShr(m->b, n, I(n, 1), "");
  LLVMValueRef n2 = LLVMBuildSub(m->b, n, n1, "");
  LLVMValueRef parts[2] = {n1, n2};
  for (int i = 0; i < 2; i++) {
    LLVMValueRef e = LLVMBuildAdd(m->b, parts[i], I(n, f ? 127 : 1023), "");
    e = LLVMBuildShl(m->b, e, I(n, f ? 23 : 52), "");
    y = mul(m, y, LLVMBuildBitCast(m->b, e, LLVMTypeOf(y), ""));
  }
  return y;
}

static LLVMValueRef to_f64(mb *m, LLVMValueRef x) { return LLVMBuildFPExt(m->b, x, m->g->f64, ""); }
static LLVMValueRef to_f32(mb *m, LLVMValueRef x) { return LLVMBuildFPTrunc(m->b, x, m->g->f32, ""); }

/* Calls the module's internal function `name` (ret and params of x's type),
 * building it with `body` the first time. */
static LLVMValueRef mcall(mb *m, const char *name, math_body body, LLVMValueRef x, LLVMValueRef y) {
  cpu_cg *g = m->g;
  unsigned n = y ? 2 : 1;
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMTypeRef ft = LLVMFunctionType(t, (LLVMTypeRef[]){t, t}, n, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(g->mod, name);
  if (!fn) {
    fn = LLVMAddFunction(g->mod, name, ft);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    cpu_fn_attrs(g, fn, true);
    mb inner = {g, LLVMCreateBuilderInContext(g->ctx)};
    LLVMPositionBuilderAtEnd(inner.b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
    LLVMBuildRet(inner.b, body(&inner, LLVMGetParam(fn, 0), n > 1 ? LLVMGetParam(fn, 1) : NULL));
    LLVMDisposeBuilder(inner.b);
  }
  return LLVMBuildCall2(m->b, ft, fn, (LLVMValueRef[]){x, y}, n, "");
}

/* A libm function double(double[, double]), declared pure so that calls can
 * be hoisted and merged. */
static LLVMValueRef libm(mb *m, const char *name, LLVMValueRef x, LLVMValueRef y) {
  cpu_cg *g = m->g;
  unsigned n = y ? 2 : 1;
  LLVMTypeRef ft = LLVMFunctionType(g->f64, (LLVMTypeRef[]){g->f64, g->f64}, n, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(g->mod, name);
  if (!fn) {
    fn = LLVMAddFunction(g->mod, name, ft);
    const char *attrs[] = {"nounwind", "willreturn", "memory"};  /* memory(none) */
    for (int i = 0; i < 3; i++)
      LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                 LLVMCreateEnumAttribute(g->ctx, LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i])), 0));
  }
  return LLVMBuildCall2(m->b, ft, fn, (LLVMValueRef[]){x, y}, n, "");
}

/* ---- f32 exp: n = round(x log2 e), r = x - n ln2 (Cody-Waite, ln2 in two
 * parts), e^r = y by Cephes' degree-6 minimax polynomial; e^x = y 2^n.
 * Inputs are clamped to [-120, 89], beyond which e^x is 0 or inf (and
 * silu's x e^x is below 2^-150). */
static void exp_parts(mb *m, LLVMValueRef x, LLVMValueRef *y, LLVMValueRef *n) {
  static const double P[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                             4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  LLVMValueRef xc = clamp_(m, x, -120, 89);
  LLVMValueRef nf = rint_(m, mul(m, xc, K(x, M_LOG2E)));
  LLVMValueRef r = fma_(m, nf, K(x, -0.693359375), xc);
  r = fma_(m, nf, K(x, 2.12194440e-4), r);
  *y = add(m, fma_(m, poly(m, r, P, 6), mul(m, r, r), r), K(x, 1));
  *n = LLVMBuildFPToSI(m->b, nf, m->g->i32, "");
}

static LLVMValueRef expf_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  LLVMValueRef y, n;
  exp_parts(m, x, &y, &n);
  return sel(m, isnan_(m, x), x, scale2(m, y, n));
}

static LLVMValueRef expf_(mb *m, LLVMValueRef x) { return mcall(m, "kiln.expf", expf_body, x, NULL); }

/* ---- f32 log: x = 2^e m with m in [sqrt(1/2), sqrt 2), log(m) = f - f^2/2
 * + f^3 P(f) with f = m - 1 exact (Cephes' coefficients), ln2 in two parts.
 * Subnormals are scaled by 2^23 first. */
static LLVMValueRef logf_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  static const double P[] = {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1,
                             -1.2420140846E-1, 1.4249322787E-1, -1.6668057665E-1,
                             2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1};
  LLVMBuilderRef b = m->b;
  LLVMTypeRef i32 = m->g->i32;
  LLVMValueRef tiny = cmp(m, LLVMRealOLT, x, K(x, 0x1p-126));
  LLVMValueRef bits = LLVMBuildBitCast(b, sel(m, tiny, mul(m, x, K(x, 0x1p23)), x), i32, "");
  LLVMValueRef e = LLVMBuildLShr(b, bits, LLVMConstInt(i32, 23, 0), "");
  e = LLVMBuildSub(b, e, sel(m, tiny, LLVMConstInt(i32, 126 + 23, 0), LLVMConstInt(i32, 126, 0)), "");
  LLVMValueRef mant = LLVMBuildOr(b, LLVMBuildAnd(b, bits, LLVMConstInt(i32, 0x007fffff, 0), ""),
                                  LLVMConstInt(i32, 0x3f000000, 0), "");
  LLVMValueRef f = LLVMBuildBitCast(b, mant, m->g->f32, "");  /* [0.5, 1) */
  LLVMValueRef low = cmp(m, LLVMRealOLT, f, K(x, M_SQRT1_2));
  e = LLVMBuildSub(b, e, LLVMBuildZExt(b, low, i32, ""), "");
  f = sub(m, sel(m, low, add(m, f, f), f), K(x, 1));
  LLVMValueRef ef = LLVMBuildSIToFP(b, e, m->g->f32, "");
  LLVMValueRef z = mul(m, f, f);
  LLVMValueRef y = mul(m, mul(m, f, z), poly(m, f, P, 9));
  y = fma_(m, ef, K(x, -2.12194440e-4), y);
  y = fma_(m, z, K(x, -0.5), y);
  LLVMValueRef r = fma_(m, ef, K(x, 0.693359375), add(m, f, y));
  r = sel(m, cmp(m, LLVMRealOEQ, x, K(x, INFINITY)), x, r);
  r = sel(m, cmp(m, LLVMRealOEQ, x, K(x, 0)), K(x, -INFINITY), r);
  return sel(m, cmp(m, LLVMRealULT, x, K(x, 0)), K(x, NAN), r);  /* x < 0 or nan */
}

/* ---- f64 helpers for f32 functions that need more than f32 inside ------- */
/* 2^y, relative error < 2^-36: y = n + f, |f| <= 1/2, 2^f by its Taylor
 * series to degree EXP2D_DEGREE (the next term is (ln2/2)^11/11! < 2^-36;
 * the f32 callers need ~2^-30). */
enum { EXP2D_DEGREE = 10 };
static LLVMValueRef exp2d_body(mb *m, LLVMValueRef y, LLVMValueRef unused) {
  (void)unused;
  double c[EXP2D_DEGREE + 1];
  double t = 1;
  for (int k = 0; k <= EXP2D_DEGREE; k++) {  /* c[DEGREE-k] = ln2^k / k! */
    c[EXP2D_DEGREE - k] = t;
    t *= M_LN2 / (k + 1);
  }
  LLVMValueRef yc = clamp_(m, y, -1100, 1100);
  LLVMValueRef n = rint_(m, yc);
  LLVMValueRef p = poly(m, sub(m, yc, n), c, EXP2D_DEGREE + 1);
  p = scale2(m, p, LLVMBuildFPToSI(m->b, n, m->g->i64, ""));
  return sel(m, isnan_(m, y), y, p);
}

static LLVMValueRef exp2d(mb *m, LLVMValueRef y) { return mcall(m, "kiln.exp2d", exp2d_body, y, NULL); }

/* log2 x for x >= 0 that is a widened f32 (so never subnormal as a double):
 * x = 2^e m, m in [sqrt(1/2), sqrt 2), ln m = 2 atanh(s), s = (m-1)/(m+1),
 * series to s^17 (relative error < 1e-15). */
static LLVMValueRef log2d_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  double c[9];
  for (int k = 0; k < 9; k++) c[8 - k] = 1.0 / (2 * k + 1);
  LLVMBuilderRef b = m->b;
  LLVMTypeRef i64 = m->g->i64;
  LLVMValueRef bits = LLVMBuildBitCast(b, x, i64, "");
  LLVMValueRef e = LLVMBuildSub(b, LLVMBuildLShr(b, bits, LLVMConstInt(i64, 52, 0), ""), LLVMConstInt(i64, 1023, 0), "");
  LLVMValueRef mant = LLVMBuildOr(b, LLVMBuildAnd(b, bits, LLVMConstInt(i64, 0x000fffffffffffffull, 0), ""),
                                  LLVMConstInt(i64, 0x3ff0000000000000ull, 0), "");
  LLVMValueRef f = LLVMBuildBitCast(b, mant, m->g->f64, "");  /* [1, 2) */
  LLVMValueRef big = cmp(m, LLVMRealOGT, f, K(x, M_SQRT2));
  f = sel(m, big, mul(m, f, K(x, 0.5)), f);
  e = LLVMBuildAdd(b, e, LLVMBuildZExt(b, big, i64, ""), "");
  LLVMValueRef s = dvd(m, sub(m, f, K(x, 1)), add(m, f, K(x, 1)));
  LLVMValueRef lnm = mul(m, mul(m, s, K(x, 2)), poly(m, mul(m, s, s), c, 9));
  LLVMValueRef r = fma_(m, lnm, K(x, M_LOG2E), LLVMBuildSIToFP(b, e, m->g->f64, ""));
  r = sel(m, cmp(m, LLVMRealOEQ, x, K(x, INFINITY)), x, r);
  r = sel(m, cmp(m, LLVMRealOEQ, x, K(x, 0)), K(x, -INFINITY), r);
  return sel(m, cmp(m, LLVMRealULT, x, K(x, 0)), K(x, NAN), r);
}

/* ---- f32 sin/cos: the argument reduction is exact for every float. x times
 * 2/pi is summed from 24-bit pieces of 2/pi: each product x * piece is exact
 * in f64, its multiples of 4 are dropped exactly, and the sum is compensated
 * (TwoSum), so x - q pi/2 keeps ~2^-100 absolute accuracy even for |x| near
 * 2^128 (Payne-Hanek in f64). The quadrant's polynomial (Cephes' sinf/cosf
 * coefficients on [-pi/4, pi/4]) is evaluated in f64, then rounded. */
static const uint32_t two_over_pi[9] = {0xA2F983, 0x6E4E44, 0x1529FC, 0x2757D1, 0xF534DD,
                                        0xC0DB62, 0x95993C, 0x439041, 0xFE5163};

static LLVMValueRef mod4(mb *m, LLVMValueRef t) {  /* t - 4 round(t/4), exact */
  return fma_(m, rint_(m, mul(m, t, K(t, 0.25))), K(t, -4), t);
}

/* x = (q + quarter) pi/2 + r with |r| <= pi/4 (r in f64): q + quarter in
 * *qi, sin r and cos r (Cephes' coefficients, in f64) in *sp and *cp. */
static void quadrant(mb *m, LLVMValueRef x, int quarter, LLVMValueRef *qi, LLVMValueRef *sp, LLVMValueRef *cp) {
  static const double S[] = {-1.9515295891E-4, 8.3321608736E-3, -1.6666654611E-1};
  static const double C[] = {2.443315711809948E-5, -1.388731625493765E-3, 4.166664568298827E-2};
  LLVMBuilderRef b = m->b;
  LLVMValueRef xd = to_f64(m, x), s = K(xd, 0), comp = K(xd, 0);
  for (int i = 8; i >= 0; i--) {  /* smallest pieces first */
    LLVMValueRef t = mod4(m, mul(m, xd, K(xd, ldexp(two_over_pi[i], -24 * (i + 1)))));
    LLVMValueRef sum = add(m, s, t), bb = sub(m, sum, s);  /* TwoSum(s, t) */
    LLVMValueRef err = add(m, sub(m, s, sub(m, sum, bb)), sub(m, t, bb));
    comp = add(m, comp, err);
    s = sum;
  }
  LLVMValueRef q = rint_(m, s);
  LLVMValueRef r = mul(m, add(m, sub(m, s, q), comp), K(xd, M_PI_2));
  LLVMTypeRef over[2] = {m->g->i32, m->g->f64};
  *qi = cpu_intrin(m->g, b, "llvm.fptosi.sat", over, 2, &q, 1);  /* nan -> 0 */
  *qi = LLVMBuildAdd(b, *qi, LLVMConstInt(m->g->i32, (unsigned)quarter, 0), "");
  LLVMValueRef z = mul(m, r, r);
  *sp = fma_(m, mul(m, r, z), poly(m, z, S, 3), r);
  *cp = add(m, fma_(m, mul(m, z, z), poly(m, z, C, 3), mul(m, z, K(z, -0.5))), K(z, 1));
}

static LLVMValueRef sincosf_core(mb *m, LLVMValueRef x, int quarter) {
  LLVMBuilderRef b = m->b;
  LLVMValueRef qi, sp, cp;
  quadrant(m, x, quarter, &qi, &sp, &cp);
  LLVMValueRef odd = LLVMBuildTrunc(b, qi, m->g->i1, "");
  LLVMValueRef neg = LLVMBuildTrunc(b, LLVMBuildLShr(b, qi, LLVMConstInt(m->g->i32, 1, 0), ""), m->g->i1, "");
  LLVMValueRef v = sel(m, odd, cp, sp);
  return to_f32(m, sel(m, neg, LLVMBuildFNeg(b, v, ""), v));
}

static LLVMValueRef sinf_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;  /* tiny |x|: sin x = x, which also keeps the sign of -0 */
  return sel(m, cmp(m, LLVMRealOLT, fabs_(m, x), K(x, 0x1p-12)), x, sincosf_core(m, x, 0));
}

static LLVMValueRef cosf_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  return sincosf_core(m, x, 1);  /* cos x = sin(x + pi/2): one quadrant on */
}

/* ---- f32 tanh: Cephes' odd polynomial below 0.625, else 1 - 2/(e^2|x| + 1)
 * with the sign of x (e^2|x| = inf gives exactly 1). */
static LLVMValueRef tanhf_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  static const double P[] = {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                             1.33314422036E-1, -3.33332819422E-1};
  LLVMValueRef ax = fabs_(m, x), z = mul(m, x, x);
  LLVMValueRef small = fma_(m, mul(m, x, z), poly(m, z, P, 5), x);
  LLVMValueRef big = sub(m, K(x, 1), dvd(m, K(x, 2), add(m, expf_(m, add(m, ax, ax)), K(x, 1))));
  big = call(m, "llvm.copysign", 2, big, x, NULL);
  return sel(m, cmp(m, LLVMRealOLT, ax, K(x, 0.625)), small, big);
}

/* ---- sigmoid 1/(1 + e^-x) and silu x sigmoid(x). f32: with e^-|x| = y 2^n
 * (exp_parts) nothing overflows: x >= 0: 1/(1 + e^-x); x < 0: the power of
 * two is applied last, (y/(1 + e^x)) 2^n, so tiny results round once.
 * silu(-inf) is nan like -inf * sigmoid(-inf). f64: libm's exp. */
static LLVMValueRef logistic(mb *m, LLVMValueRef x, bool times_x) {
  if (!is_f32(x)) {
    LLVMValueRef d = add(m, K(x, 1), libm(m, "exp", LLVMBuildFNeg(m->b, x, ""), NULL));
    return dvd(m, times_x ? x : K(x, 1), d);
  }
  LLVMValueRef y, n;
  exp_parts(m, LLVMBuildFNeg(m->b, fabs_(m, x), ""), &y, &n);
  LLVMValueRef neg = cmp(m, LLVMRealOLT, x, K(x, 0));
  LLVMValueRef num = sel(m, neg, y, K(x, 1));
  if (times_x) num = mul(m, x, num);
  LLVMValueRef r = dvd(m, num, add(m, K(x, 1), scale2(m, y, n)));
  r = sel(m, isnan_(m, x), x, sel(m, neg, scale2(m, r, n), r));
  if (!times_x) return r;
  r = sel(m, cmp(m, LLVMRealOLT, x, K(x, -120)), K(x, -0.0), r);  /* the clamp's range */
  return sel(m, cmp(m, LLVMRealOEQ, x, K(x, -INFINITY)), K(x, NAN), r);
}

static LLVMValueRef sigmoid_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  return logistic(m, x, false);
}

static LLVMValueRef silu_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  return logistic(m, x, true);
}

/* ---- gelu = x/2 (1 + erf(x/sqrt 2)) = x/2 erfc(-x/sqrt 2), written with
 * erfc(|u|) so neither tail cancels: x >= 0: x/2 (2 - erfc(u)), x < 0:
 * x/2 erfc(u), u = |x|/sqrt 2. f32: erfc(u) = t exp(-u^2 + P(t)), t =
 * 1/(1 + u/2) (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7 for
 * all u >= 0), in f64 so -u^2 stays exact enough. f64: libm's erfc. */
static LLVMValueRef gelu_erfc(mb *m, LLVMValueRef u) {
  static const double P[] = {0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
                             -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223};
  LLVMValueRef t = dvd(m, K(u, 2), add(m, K(u, 2), u));
  LLVMValueRef arg = sub(m, poly(m, t, P, 10), mul(m, u, u));
  return mul(m, t, exp2d(m, mul(m, arg, K(arg, M_LOG2E))));
}

static LLVMValueRef gelu_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  bool f = is_f32(x);
  LLVMValueRef xd = f ? to_f64(m, x) : x;
  LLVMValueRef u = mul(m, fabs_(m, xd), K(xd, M_SQRT1_2));
  LLVMValueRef ec = f ? gelu_erfc(m, u) : libm(m, "erfc", u, NULL);
  LLVMValueRef pos = cmp(m, LLVMRealOGE, xd, K(xd, 0));
  LLVMValueRef r = mul(m, mul(m, xd, K(xd, 0.5)), sel(m, pos, sub(m, K(xd, 2), ec), ec));
  return f ? to_f32(m, r) : r;
}

/* ---- gelu_tanh = x/2 (1 + tanh z), z = sqrt(2/pi) (x + 0.044715 x^3), as
 * x / (1 + e^-2z): 1 + tanh z = 2 sigmoid(2z) has no cancellation for
 * x << 0, where 1 + tanh z would lose every bit. f32: in f64 (z is large
 * where the result is small) through exp2d; f64: libm's exp. */
static LLVMValueRef gelu_tanh_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  bool f = is_f32(x);
  LLVMValueRef xd = f ? to_f64(m, x) : x;
  LLVMValueRef cubic = add(m, K(xd, 1), mul(m, mul(m, xd, xd), K(xd, 0.044715)));  /* no fma: as on the GPU */
  LLVMValueRef m2z = mul(m, mul(m, xd, K(xd, -2 * sqrt(2 / M_PI))), cubic);  /* -2z */
  LLVMValueRef e = f ? exp2d(m, mul(m, m2z, K(m2z, M_LOG2E))) : libm(m, "exp", m2z, NULL);
  LLVMValueRef r = dvd(m, xd, add(m, K(xd, 1), e));
  return f ? to_f32(m, r) : r;
}

/* ---- issue 13's f32 functions: each evaluated in f64 on the widened
 * argument (whose range and precision make the textbook identities safe:
 * 1 - x is exact, x^2 cannot overflow) and rounded once. The f64 cores
 * below assume a widened f32 argument; f64 results call libm. ------------ */
static LLVMValueRef sqrt_(mb *m, LLVMValueRef x) { return call(m, "llvm.sqrt", 1, x, NULL, NULL); }
static LLVMValueRef copysign_(mb *m, LLVMValueRef x, LLVMValueRef s) { return call(m, "llvm.copysign", 2, x, s, NULL); }
static LLVMValueRef eq_(mb *m, LLVMValueRef x, double v) { return cmp(m, LLVMRealOEQ, x, K(x, v)); }
static LLVMValueRef log2d(mb *m, LLVMValueRef x) { return mcall(m, "kiln.log2d", log2d_body, x, NULL); }

/* Taylor coefficients c[0] (highest) .. c[n-1] of sum_k sign^k scale z^k /
 * den(k), den a product of small integers (exact), as the CUDA prelude. */
static double fact(int k) {
  double f = 1;
  for (int i = 2; i <= k; i++) f *= i;
  return f;
}
static double den_odd(int k) { return 2 * k + 1; }
static double den_erf(int k) { return fact(k) * (2 * k + 1); }
static double den_expm1(int k) { return fact(k + 1); }
static void series(double *c, int n, double sign, double scale, double (*den)(int k)) {
  double s = 1;
  for (int k = 0; k < n; k++, s *= sign) c[n - 1 - k] = s / den(k) * scale;
}

/* log1p x = x log(u) / (u - 1), u = 1 + x rounded (Kahan): the rounding
 * error of u cancels, and u == 1 means log1p x = x. */
static LLVMValueRef log1pd_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  LLVMValueRef u = add(m, x, K(x, 1));
  LLVMValueRef r = mul(m, mul(m, log2d(m, u), K(x, M_LN2)), dvd(m, x, sub(m, u, K(x, 1))));
  r = sel(m, eq_(m, u, 1), x, r);
  return sel(m, eq_(m, x, INFINITY), x, r);
}
static LLVMValueRef log1pd(mb *m, LLVMValueRef x) { return mcall(m, "kiln.log1pd", log1pd_body, x, NULL); }

/* expm1: |x| < 1/2: x times Taylor to degree 11 (next term < 2^-43);
 * else 2^(x log2 e) - 1, which cancels at most a factor 2.6 there. */
enum { EXPM1_TERMS = 12, ERF_TERMS = 14, ATAN_TERMS = 13 };
static LLVMValueRef expm1d_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  double c[EXPM1_TERMS];
  series(c, EXPM1_TERMS, 1, 1, den_expm1);
  LLVMValueRef small = mul(m, x, poly(m, x, c, EXPM1_TERMS));
  LLVMValueRef big = sub(m, exp2d(m, mul(m, x, K(x, M_LOG2E))), K(x, 1));
  return sel(m, cmp(m, LLVMRealOLT, fabs_(m, x), K(x, 0.5)), small, big);
}
static LLVMValueRef expm1d(mb *m, LLVMValueRef x) { return mcall(m, "kiln.expm1d", expm1d_body, x, NULL); }

/* atan t, t >= 0: reduced to |t'| <= tan(pi/8) by atan t = pi/2 + atan(-1/t)
 * (t > tan(3pi/8)) or pi/4 + atan((t-1)/(t+1)), then Taylor to t'^25
 * (next term < 2^-37). atan(inf) = pi/2 + atan(-0). */
static LLVMValueRef atanpos_body(mb *m, LLVMValueRef t, LLVMValueRef unused) {
  (void)unused;
  double c[ATAN_TERMS];
  series(c, ATAN_TERMS, -1, 1, den_odd);
  LLVMValueRef big = cmp(m, LLVMRealOGT, t, K(t, 1 + M_SQRT2));
  LLVMValueRef mid = cmp(m, LLVMRealOGT, t, K(t, M_SQRT2 - 1));
  LLVMValueRef r = sel(m, mid, dvd(m, sub(m, t, K(t, 1)), add(m, t, K(t, 1))), t);
  r = sel(m, big, dvd(m, K(t, -1), t), r);
  LLVMValueRef base = sel(m, big, K(t, M_PI_2), sel(m, mid, K(t, M_PI_4), K(t, 0)));
  return add(m, base, mul(m, r, poly(m, mul(m, r, r), c, ATAN_TERMS)));
}

/* atan2 by C's rules: atan of |y|/|x| (0 for y = 0, 1 for two equal
 * infinities), mirrored to pi - a for x with its sign bit set (-0 too),
 * then given y's sign; nan if either is. */
static LLVMValueRef atan2d_body(mb *m, LLVMValueRef y, LLVMValueRef x) {
  LLVMBuilderRef b = m->b;
  LLVMValueRef ay = fabs_(m, y), ax = fabs_(m, x);
  LLVMValueRef t = sel(m, cmp(m, LLVMRealOEQ, ay, ax), K(x, 1), dvd(m, ay, ax));
  t = sel(m, eq_(m, ay, 0), K(x, 0), t);
  LLVMValueRef a = mcall(m, "kiln.atanpos", atanpos_body, t, NULL);
  LLVMValueRef xneg = LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildBitCast(b, x, m->g->i64, ""), LLVMConstInt(m->g->i64, 0, 0), "");
  a = copysign_(m, sel(m, xneg, sub(m, K(x, M_PI), a), a), y);
  return sel(m, cmp(m, LLVMRealUNO, x, y), add(m, x, y), a);
}
static LLVMValueRef atan2d(mb *m, LLVMValueRef y, LLVMValueRef x) { return mcall(m, "kiln.atan2d", atan2d_body, y, x); }

/* erfc u for u >= 0 is gelu's; erf: |x| < 1: Taylor to x^27 (next term <
 * 2^-40), else 1 - erfc|x| (erfc|x| <= 0.16 there: no cancellation). */
static LLVMValueRef erfd_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  double c[ERF_TERMS];
  series(c, ERF_TERMS, -1, M_2_SQRTPI, den_erf);
  LLVMValueRef small = mul(m, x, poly(m, mul(m, x, x), c, ERF_TERMS));
  LLVMValueRef big = copysign_(m, sub(m, K(x, 1), gelu_erfc(m, fabs_(m, x))), x);
  return sel(m, cmp(m, LLVMRealOLT, fabs_(m, x), K(x, 1)), small, big);
}
static LLVMValueRef erfcd_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  LLVMValueRef e = gelu_erfc(m, fabs_(m, x));
  return sel(m, cmp(m, LLVMRealOGE, x, K(x, 0)), e, sub(m, K(x, 2), e));
}
static LLVMValueRef log10d_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  return mul(m, log2d(m, x), K(x, M_LN2 / M_LN10));
}
static LLVMValueRef asind_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {  /* atan2(x, sqrt(1 - x^2)) */
  (void)unused;
  return atan2d(m, x, sqrt_(m, mul(m, sub(m, K(x, 1), x), add(m, K(x, 1), x))));
}
static LLVMValueRef acosd_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {  /* atan2(sqrt(1 - x^2), x) */
  (void)unused;
  return atan2d(m, sqrt_(m, mul(m, sub(m, K(x, 1), x), add(m, K(x, 1), x))), x);
}
static LLVMValueRef atan_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  return copysign_(m, mcall(m, "kiln.atanpos", atanpos_body, fabs_(m, x), NULL), x);
}
/* sinh |x| = (E + E/(E+1))/2, E = expm1|x| (|x| capped at 100, past f32's
 * overflow, so E stays finite). */
static LLVMValueRef sinhd_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  LLVMValueRef e = expm1d(m, call(m, "llvm.minnum", 2, fabs_(m, x), K(x, 100), NULL));
  LLVMValueRef r = copysign_(m, mul(m, add(m, e, dvd(m, e, add(m, e, K(x, 1)))), K(x, 0.5)), x);
  return sel(m, isnan_(m, x), x, r);
}
static LLVMValueRef coshd_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {  /* (e^|x| + e^-|x|)/2 */
  (void)unused;
  LLVMValueRef e = exp2d(m, mul(m, fabs_(m, x), K(x, M_LOG2E)));
  return fma_(m, e, K(x, 0.5), dvd(m, K(x, 0.5), e));
}
/* asinh |x| = log1p(|x| + x^2/(1 + sqrt(1 + x^2))), with x's sign. */
static LLVMValueRef asinhd_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  LLVMValueRef a = fabs_(m, x), a2 = mul(m, a, a);
  LLVMValueRef r = log1pd(m, add(m, a, dvd(m, a2, add(m, K(x, 1), sqrt_(m, add(m, K(x, 1), a2))))));
  return sel(m, eq_(m, a, INFINITY), x, copysign_(m, r, x));
}
/* acosh x = log1p((x-1) + sqrt((x-1)(x+1))); nan below 1 (where that sum
 * can round to -1 for huge negative x). */
static LLVMValueRef acoshd_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  LLVMValueRef xm = sub(m, x, K(x, 1));
  LLVMValueRef r = log1pd(m, add(m, xm, sqrt_(m, mul(m, xm, add(m, x, K(x, 1))))));
  return sel(m, cmp(m, LLVMRealOLT, x, K(x, 1)), K(x, NAN), r);
}
/* atanh x = log1p(2x / (1 - x)) / 2: +-1 give +-inf, |x| > 1 nan. */
static LLVMValueRef atanhd_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  return mul(m, log1pd(m, dvd(m, add(m, x, x), sub(m, K(x, 1), x))), K(x, 0.5));
}

/* tan in the quadrant of sin/cos: sin r/cos r, or -cos r/sin r for odd ones;
 * tiny |x|: x (keeps -0). */
static LLVMValueRef tanf_body(mb *m, LLVMValueRef x, LLVMValueRef unused) {
  (void)unused;
  LLVMValueRef qi, sp, cp;
  quadrant(m, x, 0, &qi, &sp, &cp);
  LLVMValueRef odd = LLVMBuildTrunc(m->b, qi, m->g->i1, "");
  LLVMValueRef t = to_f32(m, sel(m, odd, dvd(m, LLVMBuildFNeg(m->b, cp, ""), sp), dvd(m, sp, cp)));
  return sel(m, cmp(m, LLVMRealOLT, fabs_(m, x), K(x, 0x1p-12)), x, t);
}

typedef struct {
  ir_op op;
  const char *name, *libm;  /* kiln.<name>d, the f64 core; libm's name */
  math_body core;
} wide_fn;

static const wide_fn wide_fns[] = {
  {IR_ERF, "erf", "erf", erfd_body},         {IR_ERFC, "erfc", "erfc", erfcd_body},
  {IR_EXPM1, "expm1", "expm1", expm1d_body}, {IR_LOG1P, "log1p", "log1p", log1pd_body},
  {IR_LOG2, "log2", "log2", log2d_body},     {IR_LOG10, "log10", "log10", log10d_body},
  {IR_EXP2, "exp2", "exp2", exp2d_body},     {IR_TAN, "tan", "tan", NULL},
  {IR_ASIN, "asin", "asin", asind_body},     {IR_ACOS, "acos", "acos", acosd_body},
  {IR_ATAN, "atan", "atan", atan_body},      {IR_SINH, "sinh", "sinh", sinhd_body},
  {IR_COSH, "cosh", "cosh", coshd_body},     {IR_ASINH, "asinh", "asinh", asinhd_body},
  {IR_ACOSH, "acosh", "acosh", acoshd_body}, {IR_ATANH, "atanh", "atanh", atanhd_body},
  {IR_ATAN2, "atan2", "atan2", atan2d_body},
};

static const wide_fn *wide_fn_of(ir_op op) {
  for (size_t i = 0; i < sizeof wide_fns / sizeof *wide_fns; i++)
    if (wide_fns[i].op == op) return &wide_fns[i];
  return NULL;
}

/* f32: the f64 core on the widened operands, rounded; f64: libm. */
static LLVMValueRef wide_call(mb *m, const wide_fn *w, LLVMValueRef x, LLVMValueRef y) {
  if (!is_f32(x)) return libm(m, w->libm, x, y);
  if (w->op == IR_TAN) return mcall(m, "kiln.tanf", tanf_body, x, NULL);
  char name[32];
  snprintf(name, sizeof name, "kiln.%sd", w->name);
  return to_f32(m, mcall(m, name, w->core, to_f64(m, x), y ? to_f64(m, y) : NULL));
}

LLVMValueRef cpu_math_atan2(cpu_cg *g, LLVMValueRef y, LLVMValueRef x) {
  mb m = {g, g->b};
  return wide_call(&m, wide_fn_of(IR_ATAN2), y, x);
}

/* ---- f32 pow: |a|^b = 2^(b log2|a|) in f64 (error of the f64 steps ~2^-45,
 * so the f32 result is within an ulp or so), then C's special cases: sign
 * for negative a and odd integer b, nan for negative a and non-integer b,
 * pow(1, y) = pow(x, 0) = pow(-1, +-inf) = 1. */
static LLVMValueRef powf_body(mb *m, LLVMValueRef a, LLVMValueRef b) {
  LLVMBuilderRef B = m->b;
  LLVMValueRef ad = to_f64(m, a), bd = to_f64(m, b);
  LLVMValueRef l = mcall(m, "kiln.log2d", log2d_body, fabs_(m, ad), NULL);
  LLVMValueRef mag = to_f32(m, exp2d(m, mul(m, bd, l)));
  LLVMValueRef isint = cmp(m, LLVMRealOEQ, rint_(m, b), b);
  LLVMValueRef hb = mul(m, b, K(b, 0.5));
  LLVMValueRef odd = LLVMBuildAnd(B, isint, cmp(m, LLVMRealONE, rint_(m, hb), hb), "");
  LLVMValueRef signbit = LLVMBuildICmp(B, LLVMIntSLT, LLVMBuildBitCast(B, a, m->g->i32, ""),
                                       LLVMConstInt(m->g->i32, 0, 0), "");
  LLVMValueRef r = sel(m, LLVMBuildAnd(B, signbit, odd, ""), LLVMBuildFNeg(B, mag, ""), mag);
  LLVMValueRef negfinite = LLVMBuildAnd(B, cmp(m, LLVMRealOLT, a, K(a, 0)), cmp(m, LLVMRealONE, a, K(a, -INFINITY)), "");
  r = sel(m, LLVMBuildAnd(B, negfinite, LLVMBuildNot(B, isint, ""), ""), K(a, NAN), r);
  LLVMValueRef unit = LLVMBuildAnd(B, cmp(m, LLVMRealOEQ, fabs_(m, a), K(a, 1)),
                                   cmp(m, LLVMRealOEQ, fabs_(m, b), K(b, INFINITY)), "");
  unit = LLVMBuildOr(B, unit, cmp(m, LLVMRealOEQ, a, K(a, 1)), "");
  unit = LLVMBuildOr(B, unit, cmp(m, LLVMRealOEQ, b, K(b, 0)), "");
  return sel(m, unit, K(a, 1), r);
}

LLVMValueRef cpu_math_pow(cpu_cg *g, LLVMValueRef a, LLVMValueRef b) {
  mb m = {g, g->b};
  return is_f32(a) ? mcall(&m, "kiln.powf", powf_body, a, b) : libm(&m, "pow", a, b);
}

/* ---- integer pow: square and multiply over every bit of b (branch-free, so
 * it vectorizes), wrapping; b < 0 gives 0 except a = 1 (1) and a = -1 (+-1). */
static LLVMValueRef ipow_body(mb *m, LLVMValueRef a, LLVMValueRef b, bool is_signed) {
  LLVMBuilderRef B = m->b;
  unsigned w = LLVMGetIntTypeWidth(LLVMTypeOf(a));
  LLVMValueRef r = I(a, 1), base = a;
  for (unsigned i = 0; i < w; i++) {
    LLVMValueRef bit = LLVMBuildTrunc(B, LLVMBuildLShr(B, b, I(b, i), ""), m->g->i1, "");
    r = sel(m, bit, LLVMBuildMul(B, r, base, ""), r);
    base = LLVMBuildMul(B, base, base, "");
  }
  if (!is_signed) return r;
  LLVMValueRef odd = LLVMBuildTrunc(B, b, m->g->i1, "");
  LLVMValueRef neg = sel(m, LLVMBuildICmp(B, LLVMIntEQ, a, I(a, -1), ""), sel(m, odd, I(a, -1), I(a, 1)), I(a, 0));
  neg = sel(m, LLVMBuildICmp(B, LLVMIntEQ, a, I(a, 1), ""), I(a, 1), neg);
  return sel(m, LLVMBuildICmp(B, LLVMIntSLT, b, I(b, 0), ""), neg, r);
}

static LLVMValueRef ipow_signed(mb *m, LLVMValueRef a, LLVMValueRef b) { return ipow_body(m, a, b, true); }
static LLVMValueRef ipow_unsigned(mb *m, LLVMValueRef a, LLVMValueRef b) { return ipow_body(m, a, b, false); }

LLVMValueRef cpu_math_ipow(cpu_cg *g, LLVMValueRef a, LLVMValueRef b, bool is_signed) {
  mb m = {g, g->b};
  char name[32];
  snprintf(name, sizeof name, "kiln.%s.i%u", is_signed ? "ipow" : "upow", LLVMGetIntTypeWidth(LLVMTypeOf(a)));
  return mcall(&m, name, is_signed ? ipow_signed : ipow_unsigned, a, b);
}

/* ---- dispatch ----------------------------------------------------------- */
bool cpu_math_in_f64(ir_op op, kiln_dtype t) {
  return t == KILN_F32 && (op == IR_GELU || op == IR_GELU_TANH || op == IR_POW || wide_fn_of(op));
}

LLVMValueRef cpu_math_unary(cpu_cg *g, ir_op op, LLVMValueRef x) {
  mb m = {g, g->b};
  bool f = is_f32(x);
  switch (op) {
  case IR_EXP: return f ? expf_(&m, x) : libm(&m, "exp", x, NULL);
  case IR_LOG: return f ? mcall(&m, "kiln.logf", logf_body, x, NULL) : libm(&m, "log", x, NULL);
  case IR_SIN: return f ? mcall(&m, "kiln.sinf", sinf_body, x, NULL) : libm(&m, "sin", x, NULL);
  case IR_COS: return f ? mcall(&m, "kiln.cosf", cosf_body, x, NULL) : libm(&m, "cos", x, NULL);
  case IR_TANH: return f ? mcall(&m, "kiln.tanhf", tanhf_body, x, NULL) : libm(&m, "tanh", x, NULL);
  case IR_SIGMOID: return mcall(&m, f ? "kiln.sigmoidf" : "kiln.sigmoid", sigmoid_body, x, NULL);
  case IR_SILU: return mcall(&m, f ? "kiln.siluf" : "kiln.silu", silu_body, x, NULL);
  case IR_GELU: return mcall(&m, f ? "kiln.geluf" : "kiln.gelu", gelu_body, x, NULL);
  case IR_GELU_TANH: return mcall(&m, f ? "kiln.gelu_tanhf" : "kiln.gelu_tanh", gelu_tanh_body, x, NULL);
  default:
    IR_ASSERT(wide_fn_of(op));
    return wide_call(&m, wide_fn_of(op), x, NULL);
  }
}
