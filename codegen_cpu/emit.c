/* emit.c: kernel IR -> LLVM IR. The loop nest becomes an internal function
 * with one noalias pointer per buffer, inlined into the exported wrapper
 * `void name(void *const *bufs, i64 lo, i64 hi)` so the noalias facts survive
 * as scoped alias metadata. Loops are rotated with an i64 induction variable
 * from 0 (or lo) by 1, the form the loop vectorizer wants. emit_op is the one
 * switch over graph ops; math.c supplies the transcendentals. */
#include "codegen_cpu/cpu_impl.h"
#include "ir/philox.h"

#include <llvm-c/DebugInfo.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- small helpers ------------------------------------------------------ */
LLVMTypeRef cpu_type(cpu_cg *g, kiln_dtype t) {
  switch (t) {
  case KILN_BOOL: return g->i1;
  case KILN_U8: case KILN_I8: return g->i8;
  case KILN_I16: return g->i16;
  case KILN_I32: return g->i32;
  case KILN_I64: return g->i64;
  case KILN_F16: case KILN_BF16: case KILN_F32: return g->f32;
  case KILN_F64: return g->f64;
  default: IR_ASSERT(!"bad dtype");
  }
}

/* Element type in memory: bool is a byte, f16 is LLVM half (F16C converts
 * it without a libcall), bf16 is raw i16 converted with integer ops. */
static LLVMTypeRef storage_type(cpu_cg *g, kiln_dtype t) {
  switch (t) {
  case KILN_BOOL: return g->i8;
  case KILN_F16: return g->f16;
  case KILN_BF16: return g->i16;
  default: return cpu_type(g, t);
  }
}

void cpu_param_attr(cpu_cg *g, LLVMValueRef fn, unsigned idx, const char *name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  IR_ASSERT(kind);
  LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(g->ctx, kind, 0));
}

static void add_str_attr(cpu_cg *g, LLVMValueRef fn, const char *k, const char *v) {
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                             LLVMCreateStringAttribute(g->ctx, k, (unsigned)strlen(k), v, (unsigned)strlen(v)));
}

/* Without "prefer-vector-width"="512" LLVM 19 uses 256-bit vectors on
 * AVX-512 CPUs (measured on Sapphire Rapids). */
void cpu_fn_attrs(cpu_cg *g, LLVMValueRef fn, bool always_inline) {
  add_str_attr(g, fn, "target-cpu", g->cpu);
  add_str_attr(g, fn, "target-features", g->features);
  add_str_attr(g, fn, "prefer-vector-width", "512");
  cpu_param_attr(g, fn, LLVMAttributeFunctionIndex, "nounwind");
  if (always_inline) cpu_param_attr(g, fn, LLVMAttributeFunctionIndex, "alwaysinline");
}

LLVMValueRef cpu_intrin(cpu_cg *g, LLVMBuilderRef b, const char *name, LLVMTypeRef *over,
                        unsigned nover, LLVMValueRef *args, unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  IR_ASSERT(id);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, over, nover);
  return LLVMBuildCall2(b, LLVMIntrinsicGetType(g->ctx, id, over, nover), fn, args, nargs, "");
}

/* An intrinsic overloaded on its first operand's type: llvm.smax(a, b). */
static LLVMValueRef intr(emitter *em, const char *name, LLVMValueRef a, LLVMValueRef b) {
  LLVMTypeRef t = LLVMTypeOf(a);
  return cpu_intrin(&em->g, em->g.b, name, &t, 1, (LLVMValueRef[]){a, b}, b ? 2 : 1);
}

static LLVMValueRef zero_of(LLVMValueRef v) { return LLVMConstNull(LLVMTypeOf(v)); }

static LLVMValueRef one_of(LLVMValueRef v) {
  LLVMTypeRef t = LLVMTypeOf(v);
  return LLVMGetTypeKind(t) == LLVMIntegerTypeKind ? LLVMConstInt(t, 1, 0) : LLVMConstReal(t, 1);
}

/* x != 0 as i1 (float: unordered, so nan is true). */
static LLVMValueRef nonzero(cpu_cg *g, LLVMValueRef v, kiln_dtype t) {
  if (t == KILN_BOOL) return v;
  if (ir_is_float(t)) return LLVMBuildFCmp(g->b, LLVMRealUNE, v, zero_of(v), "");
  return LLVMBuildICmp(g->b, LLVMIntNE, v, zero_of(v), "");
}

/* ---- casts and memory --------------------------------------------------- */
/* Storage element -> compute value (bool normalised to 0/1). */
static LLVMValueRef widen(cpu_cg *g, LLVMValueRef v, kiln_dtype st) {
  LLVMBuilderRef b = g->b;
  switch (st) {
  case KILN_BOOL: return LLVMBuildICmp(b, LLVMIntNE, v, zero_of(v), "");
  case KILN_F16: return LLVMBuildFPExt(b, v, g->f32, "");
  case KILN_BF16:
    v = LLVMBuildShl(b, LLVMBuildZExt(b, v, g->i32, ""), LLVMConstInt(g->i32, 16, 0), "");
    return LLVMBuildBitCast(b, v, g->f32, "");
  default: return v;
  }
}

/* f32 -> bf16 bits, round to nearest even with integer ops (no libcall);
 * a nan keeps its sign and top payload and is made quiet. */
static LLVMValueRef to_bf16(cpu_cg *g, LLVMValueRef v) {
  LLVMBuilderRef b = g->b;
  LLVMValueRef bits = LLVMBuildBitCast(b, v, g->i32, "");
  LLVMValueRef hi = LLVMBuildLShr(b, bits, LLVMConstInt(g->i32, 16, 0), "");
  LLVMValueRef lsb = LLVMBuildAnd(b, hi, LLVMConstInt(g->i32, 1, 0), "");
  LLVMValueRef r = LLVMBuildAdd(b, bits, LLVMBuildAdd(b, lsb, LLVMConstInt(g->i32, 0x7fff, 0), ""), "");
  r = LLVMBuildLShr(b, r, LLVMConstInt(g->i32, 16, 0), "");
  LLVMValueRef qnan = LLVMBuildOr(b, hi, LLVMConstInt(g->i32, 0x40, 0), "");
  r = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, v, v, ""), qnan, r, "");
  return LLVMBuildTrunc(b, r, g->i16, "");
}

static LLVMValueRef narrow(cpu_cg *g, LLVMValueRef v, kiln_dtype st) {
  switch (st) {
  case KILN_BOOL: return LLVMBuildZExt(g->b, v, g->i8, "");
  case KILN_F16: return LLVMBuildFPTrunc(g->b, v, g->f16, "");
  case KILN_BF16: return to_bf16(g, v);
  default: return v;
  }
}

/* IR_CAST's semantics between compute types: float->int saturates with
 * nan -> 0, anything->bool is != 0, bool->anything is 0/1, ints wrap. */
static LLVMValueRef emit_cast(cpu_cg *g, LLVMValueRef v, kiln_dtype from, kiln_dtype to) {
  if ((to == KILN_F16 || to == KILN_BF16) && from != to)  /* an f32 rounded to that precision */
    return widen(g, narrow(g, emit_cast(g, v, from, KILN_F32), to), to);
  from = ir_compute_dtype(from);
  to = ir_compute_dtype(to);
  if (from == to) return v;
  LLVMBuilderRef b = g->b;
  LLVMTypeRef t = cpu_type(g, to);
  const ir_dtype_info *fi = &ir_dtypes[from], *ti = &ir_dtypes[to];
  if (to == KILN_BOOL) return nonzero(g, v, from);
  if (fi->kind == DK_BOOL)
    return ti->kind == DK_FLOAT ? LLVMBuildUIToFP(b, v, t, "") : LLVMBuildZExt(b, v, t, "");
  if (fi->kind == DK_INT && ti->kind == DK_INT) return LLVMBuildIntCast2(b, v, t, fi->is_signed, "");
  if (fi->kind == DK_INT)
    return fi->is_signed ? LLVMBuildSIToFP(b, v, t, "") : LLVMBuildUIToFP(b, v, t, "");
  if (ti->kind == DK_INT) {
    LLVMTypeRef over[2] = {t, LLVMTypeOf(v)};
    return cpu_intrin(g, b, ti->is_signed ? "llvm.fptosi.sat" : "llvm.fptoui.sat", over, 2, &v, 1);
  }
  return LLVMBuildFPCast(b, v, t, "");
}

LLVMValueRef cpu_elem_ptr(emitter *em, int buf, LLVMValueRef index) {
  LLVMTypeRef st = storage_type(&em->g, em->k->params[buf].dtype);
  return LLVMBuildInBoundsGEP2(em->g.b, st, em->bufs[buf], &index, 1, "");
}

/* ---- graph ops ---------------------------------------------------------- */
static LLVMValueRef emit_minmax(emitter *em, LLVMValueRef a, LLVMValueRef b, kiln_dtype t, bool max) {
  const ir_dtype_info *d = &ir_dtypes[t];
  if (d->kind == DK_BOOL) return max ? LLVMBuildOr(em->g.b, a, b, "") : LLVMBuildAnd(em->g.b, a, b, "");
  if (d->kind == DK_FLOAT) return intr(em, max ? "llvm.maximum" : "llvm.minimum", a, b);
  if (d->is_signed) return intr(em, max ? "llvm.smax" : "llvm.smin", a, b);
  return intr(em, max ? "llvm.umax" : "llvm.umin", a, b);
}

/* EQ NE LT LE GT GE, in ops.def order. Float NE is unordered (nan != nan). */
static LLVMValueRef emit_compare(emitter *em, ir_op op, LLVMValueRef a, LLVMValueRef b, kiln_dtype t) {
  static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                         LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
  static const LLVMIntPredicate sp[] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
  static const LLVMIntPredicate up[] = {LLVMIntEQ, LLVMIntNE, LLVMIntULT, LLVMIntULE, LLVMIntUGT, LLVMIntUGE};
  int i = (int)op - IR_EQ;
  if (ir_is_float(t)) return LLVMBuildFCmp(em->g.b, fp[i], a, b, "");
  bool sg = ir_dtypes[t].kind == DK_INT && ir_dtypes[t].is_signed;
  return LLVMBuildICmp(em->g.b, sg ? sp[i] : up[i], a, b, "");
}

/* (0 < x) - (x < 0); nan gives 0. */
static LLVMValueRef emit_sign(emitter *em, LLVMValueRef x, kiln_dtype t) {
  LLVMBuilderRef b = em->g.b;
  LLVMTypeRef ty = LLVMTypeOf(x);
  if (ir_is_float(t)) {
    LLVMValueRef pos = LLVMBuildUIToFP(b, LLVMBuildFCmp(b, LLVMRealOGT, x, zero_of(x), ""), ty, "");
    LLVMValueRef neg = LLVMBuildUIToFP(b, LLVMBuildFCmp(b, LLVMRealOLT, x, zero_of(x), ""), ty, "");
    return LLVMBuildFSub(b, pos, neg, "");
  }
  if (!ir_dtypes[t].is_signed) return LLVMBuildZExt(b, nonzero(&em->g, x, t), ty, "");
  LLVMValueRef pos = LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntSGT, x, zero_of(x), ""), ty, "");
  LLVMValueRef neg = LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntSLT, x, zero_of(x), ""), ty, "");
  return LLVMBuildSub(b, pos, neg, "");
}

/* ---- division and shifts ------------------------------------------------ */
static LLVMValueRef ieq(cpu_cg *g, LLVMValueRef v, long long c) {
  return LLVMBuildICmp(g->b, LLVMIntEQ, v, LLVMConstInt(LLVMTypeOf(v), (unsigned long long)c, 1), "");
}

/* a / d rounded toward zero, d != 0 and not INT_MIN / -1. Up to 32 bits it
 * is the f64 quotient truncated: exact, because |a| < 2^32 puts the f64
 * rounding error (< 2^-21 / |d|) below the quotient's distance from the
 * next integer (>= 1 / |d|), and vdivpd vectorizes where x86 has no vector
 * integer division (LLVM leaves a loop with idiv scalar). */
static LLVMValueRef narrow_quotient(cpu_cg *g, LLVMValueRef a, LLVMValueRef d, bool sg) {
  LLVMBuilderRef B = g->b;
  LLVMTypeRef t = LLVMTypeOf(a);
  if (LLVMGetIntTypeWidth(t) > 32) return sg ? LLVMBuildSDiv(B, a, d, "") : LLVMBuildUDiv(B, a, d, "");
  LLVMValueRef fa = sg ? LLVMBuildSIToFP(B, a, g->f64, "") : LLVMBuildUIToFP(B, a, g->f64, "");
  LLVMValueRef fd = sg ? LLVMBuildSIToFP(B, d, g->f64, "") : LLVMBuildUIToFP(B, d, g->f64, "");
  LLVMValueRef fq = LLVMBuildFDiv(B, fa, fd, "");
  return sg ? LLVMBuildFPToSI(B, fq, t, "") : LLVMBuildFPToUI(B, fq, t, "");
}

/* a / b and a % b rounded toward zero that cannot trap: x86 faults on a
 * zero divisor and on INT_MIN / -1, so both divide by 1 instead; b == -1
 * gives -a (wrapping) and 0, as PyTorch, and b == 0 is a kernel check's
 * failure (passes/lower.c) whose result is only a stand-in. */
static void int_divmod(cpu_cg *g, LLVMValueRef a, LLVMValueRef b, bool sg, LLVMValueRef *q, LLVMValueRef *r) {
  LLVMBuilderRef B = g->b;
  LLVMValueRef one = one_of(b);
  if (!sg) {
    LLVMValueRef d = LLVMBuildSelect(B, ieq(g, b, 0), one, b, "");
    *q = narrow_quotient(g, a, d, false);
    *r = LLVMBuildSub(B, a, LLVMBuildMul(B, *q, d, ""), "");
    return;
  }
  LLVMValueRef m1 = ieq(g, b, -1), d = LLVMBuildSelect(B, LLVMBuildOr(B, ieq(g, b, 0), m1, ""), one, b, "");
  LLVMValueRef qd = narrow_quotient(g, a, d, true);
  *q = LLVMBuildSelect(B, m1, LLVMBuildNeg(B, a, ""), qd, "");
  *r = LLVMBuildSelect(B, m1, zero_of(a), LLVMBuildSub(B, a, LLVMBuildMul(B, qd, d, ""), ""), "");
}

/* The remainder has the divisor's sign: r != 0 and r, b of opposite signs. */
static LLVMValueRef sign_differs(cpu_cg *g, LLVMValueRef r, LLVMValueRef b, bool fl) {
  LLVMBuilderRef B = g->b;
  if (fl) {
    LLVMValueRef rn = LLVMBuildFCmp(B, LLVMRealOLT, r, zero_of(r), ""), bn = LLVMBuildFCmp(B, LLVMRealOLT, b, zero_of(b), "");
    return LLVMBuildAnd(B, LLVMBuildFCmp(B, LLVMRealONE, r, zero_of(r), ""), LLVMBuildXor(B, rn, bn, ""), "");
  }
  LLVMValueRef opp = LLVMBuildICmp(B, LLVMIntSLT, LLVMBuildXor(B, r, b, ""), zero_of(r), "");
  return LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntNE, r, zero_of(r), ""), opp, "");
}

/* PyTorch's div_floor for floats: (a - fmod(a, b)) / b, one less when the
 * remainder's sign differs from b's, rounded to the nearest integer; a zero
 * quotient keeps the sign of a / b, and b == 0 gives a / b. */
static LLVMValueRef float_floordiv(emitter *em, LLVMValueRef a, LLVMValueRef b) {
  LLVMBuilderRef B = em->g.b;
  LLVMValueRef mod = LLVMBuildFRem(B, a, b, ""), quo = LLVMBuildFDiv(B, a, b, "");
  LLVMValueRef div = LLVMBuildFDiv(B, LLVMBuildFSub(B, a, mod, ""), b, "");
  div = LLVMBuildSelect(B, sign_differs(&em->g, mod, b, true), LLVMBuildFSub(B, div, one_of(div), ""), div, "");
  LLVMValueRef fl = intr(em, "llvm.floor", div, NULL);
  LLVMValueRef up = LLVMBuildFCmp(B, LLVMRealOGT, LLVMBuildFSub(B, div, fl, ""), LLVMConstReal(LLVMTypeOf(a), 0.5), "");
  fl = LLVMBuildSelect(B, up, LLVMBuildFAdd(B, fl, one_of(fl), ""), fl, "");
  LLVMValueRef zero = intr(em, "llvm.copysign", zero_of(a), quo);
  fl = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, div, zero_of(div), ""), zero, fl, "");
  return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, b, zero_of(b), ""), quo, fl, "");
}

/* floor_divide, trunc_divide, remainder, fmod. */
static LLVMValueRef emit_division(emitter *em, ir_op op, LLVMValueRef a, LLVMValueRef b, kiln_dtype t) {
  cpu_cg *g = &em->g;
  LLVMBuilderRef B = g->b;
  if (ir_is_float(t)) {
    LLVMValueRef m = LLVMBuildFRem(B, a, b, "");
    switch (op) {
    case IR_FLOOR_DIVIDE: return float_floordiv(em, a, b);
    case IR_TRUNC_DIVIDE: return intr(em, "llvm.trunc", LLVMBuildFDiv(B, a, b, ""), NULL);
    case IR_REMAINDER: return LLVMBuildSelect(B, sign_differs(g, m, b, true), LLVMBuildFAdd(B, m, b, ""), m, "");
    default: return m;
    }
  }
  bool sg = ir_dtypes[t].is_signed;
  LLVMValueRef q, r;
  int_divmod(g, a, b, sg, &q, &r);
  LLVMValueRef adjust = sg ? sign_differs(g, r, b, false) : LLVMConstInt(g->i1, 0, 0);
  switch (op) {
  case IR_FLOOR_DIVIDE: return LLVMBuildSub(B, q, LLVMBuildZExt(B, adjust, LLVMTypeOf(q), ""), "");
  case IR_TRUNC_DIVIDE: return q;
  case IR_REMAINDER: return LLVMBuildSelect(B, adjust, LLVMBuildAdd(B, r, b, ""), r, "");
  default: return r;
  }
}

/* PyTorch's shifts: an amount outside 0..bits-1 shifts everything out (the
 * sign fills a signed >>). */
static LLVMValueRef emit_shift(emitter *em, ir_op op, LLVMValueRef a, LLVMValueRef b, kiln_dtype t) {
  LLVMBuilderRef B = em->g.b;
  bool sg = ir_dtypes[t].is_signed;
  LLVMValueRef bits = LLVMConstInt(LLVMTypeOf(b), 8 * ir_dtypes[t].size, 0);
  LLVMValueRef out = LLVMBuildICmp(B, LLVMIntUGE, b, bits, "");  /* negative amounts too */
  if (op == IR_LSHIFT) return LLVMBuildSelect(B, out, zero_of(a), LLVMBuildShl(B, a, b, ""), "");
  if (!sg) return LLVMBuildSelect(B, out, zero_of(a), LLVMBuildLShr(B, a, b, ""), "");
  LLVMValueRef amount = LLVMBuildSelect(B, out, LLVMBuildSub(B, bits, one_of(b), ""), b, "");
  return LLVMBuildAShr(B, a, amount, "");
}

/* The one switch over elementwise graph ops (semantics: ir/ops.def). a, b, c
 * are the operands' values; e->a->type is the operands' compute type. */
static LLVMValueRef emit_op(emitter *em, const kexpr *e, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMBuilderRef B = em->g.b;
  kiln_dtype t = e->a->type;
  bool fl = ir_is_float(t), bo = t == KILN_BOOL, sg = ir_dtypes[t].is_signed && !bo;
  switch (e->op) {
  case IR_NEG: return fl ? LLVMBuildFNeg(B, a, "") : LLVMBuildNeg(B, a, "");
  case IR_ABS:
    if (fl) return intr(em, "llvm.fabs", a, NULL);
    return sg ? intr(em, "llvm.abs", a, LLVMConstInt(em->g.i1, 0, 0)) : a;
  case IR_EXP: case IR_LOG: case IR_SIN: case IR_COS:
  case IR_TANH: case IR_SIGMOID: case IR_GELU: case IR_GELU_TANH: case IR_SILU:
  case IR_ERF: case IR_ERFC: case IR_EXPM1: case IR_LOG1P: case IR_LOG2: case IR_LOG10: case IR_EXP2:
  case IR_TAN: case IR_ASIN: case IR_ACOS: case IR_ATAN: case IR_SINH: case IR_COSH: case IR_ASINH:
  case IR_ACOSH: case IR_ATANH:
    em->math_calls++;
    em->wide_math_calls += cpu_math_in_f64(e->op, t);
    return cpu_math_unary(&em->g, e->op, a);
  case IR_SQRT: return intr(em, "llvm.sqrt", a, NULL);
  case IR_RSQRT: return LLVMBuildFDiv(B, one_of(a), intr(em, "llvm.sqrt", a, NULL), "");
  case IR_RELU:
    if (fl) return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, a, zero_of(a), ""), zero_of(a), a, "");
    return sg ? intr(em, "llvm.smax", a, zero_of(a)) : a;
  case IR_FLOOR: return fl ? intr(em, "llvm.floor", a, NULL) : a;
  case IR_CEIL: return fl ? intr(em, "llvm.ceil", a, NULL) : a;
  case IR_ROUND: return fl ? intr(em, "llvm.roundeven", a, NULL) : a;
  case IR_SIGN: return emit_sign(em, a, t);
  case IR_RECIPROCAL: return LLVMBuildFDiv(B, one_of(a), a, "");
  case IR_LOGICAL_NOT: return LLVMBuildNot(B, nonzero(&em->g, a, t), "");
  case IR_CAST: return emit_cast(&em->g, a, t, e->type);
  case IR_ADD:
    if (bo) return LLVMBuildOr(B, a, b, "");
    return fl ? LLVMBuildFAdd(B, a, b, "") : LLVMBuildAdd(B, a, b, "");
  case IR_SUB: return fl ? LLVMBuildFSub(B, a, b, "") : LLVMBuildSub(B, a, b, "");
  case IR_MUL:
    if (bo) return LLVMBuildAnd(B, a, b, "");
    return fl ? LLVMBuildFMul(B, a, b, "") : LLVMBuildMul(B, a, b, "");
  case IR_DIV: IR_ASSERT(fl); return LLVMBuildFDiv(B, a, b, "");
  case IR_POW:
    em->math_calls++;
    em->wide_math_calls += cpu_math_in_f64(e->op, t);
    return fl ? cpu_math_pow(&em->g, a, b) : cpu_math_ipow(&em->g, a, b, sg);
  case IR_ATAN2:
    em->math_calls++;
    em->wide_math_calls += cpu_math_in_f64(e->op, t);
    return cpu_math_atan2(&em->g, a, b);
  case IR_MAXIMUM: return emit_minmax(em, a, b, t, true);
  case IR_MINIMUM: return emit_minmax(em, a, b, t, false);
  case IR_EQ: case IR_NE: case IR_LT: case IR_LE: case IR_GT: case IR_GE:
    return emit_compare(em, e->op, a, b, t);
  case IR_LOGICAL_AND:
    return LLVMBuildAnd(B, nonzero(&em->g, a, t), nonzero(&em->g, b, e->b->type), "");
  case IR_LOGICAL_OR:
    return LLVMBuildOr(B, nonzero(&em->g, a, t), nonzero(&em->g, b, e->b->type), "");
  case IR_WHERE: return LLVMBuildSelect(B, nonzero(&em->g, a, t), b, c, "");
  case IR_CLAMP: return emit_minmax(em, emit_minmax(em, a, b, t, true), c, t, false);
  case IR_FLOOR_DIVIDE: case IR_TRUNC_DIVIDE: case IR_REMAINDER: case IR_FMOD:
    return emit_division(em, e->op, a, b, t);
  case IR_COPYSIGN: return intr(em, "llvm.copysign", a, b);
  case IR_BITWISE_AND: return LLVMBuildAnd(B, a, b, "");
  case IR_BITWISE_OR: return LLVMBuildOr(B, a, b, "");
  case IR_BITWISE_XOR: return LLVMBuildXor(B, a, b, "");
  case IR_LSHIFT: case IR_RSHIFT: return emit_shift(em, e->op, a, b, t);
  case IR_TRUNC: return fl ? intr(em, "llvm.trunc", a, NULL) : a;
  case IR_BITWISE_NOT: return LLVMBuildNot(B, a, "");
  default: IR_ASSERT(!"not an elementwise op");
  }
}

/* ---- Philox4x32-10 (ir/philox.h), 32x32->64 products as i64 multiplies so
 * the loop vectorizer handles them ---------------------------------------- */
static LLVMValueRef emit_philox(emitter *em, LLVMValueRef ctr, LLVMValueRef key, int word) {
  cpu_cg *g = &em->g;
  LLVMBuilderRef b = g->b;
  LLVMValueRef s32 = LLVMConstInt(g->i64, 32, 0);
  LLVMValueRef c[4] = {LLVMBuildTrunc(b, ctr, g->i32, ""),
                       LLVMBuildTrunc(b, LLVMBuildLShr(b, ctr, s32, ""), g->i32, ""),
                       LLVMConstInt(g->i32, 0, 0), LLVMConstInt(g->i32, 0, 0)};
  LLVMValueRef k0 = LLVMBuildTrunc(b, key, g->i32, "");
  LLVMValueRef k1 = LLVMBuildTrunc(b, LLVMBuildLShr(b, key, s32, ""), g->i32, "");
  for (int r = 0; r < 10; r++) {
    LLVMValueRef p0 = LLVMBuildMul(b, LLVMBuildZExt(b, c[0], g->i64, ""), LLVMConstInt(g->i64, PHILOX_M0, 0), "");
    LLVMValueRef p1 = LLVMBuildMul(b, LLVMBuildZExt(b, c[2], g->i64, ""), LLVMConstInt(g->i64, PHILOX_M1, 0), "");
    LLVMValueRef h1 = LLVMBuildTrunc(b, LLVMBuildLShr(b, p1, s32, ""), g->i32, "");
    LLVMValueRef h0 = LLVMBuildTrunc(b, LLVMBuildLShr(b, p0, s32, ""), g->i32, "");
    LLVMValueRef n0 = LLVMBuildXor(b, LLVMBuildXor(b, h1, c[1], ""), k0, "");
    LLVMValueRef n2 = LLVMBuildXor(b, LLVMBuildXor(b, h0, c[3], ""), k1, "");
    c[1] = LLVMBuildTrunc(b, p1, g->i32, "");
    c[3] = LLVMBuildTrunc(b, p0, g->i32, "");
    c[0] = n0;
    c[2] = n2;
    k0 = LLVMBuildAdd(b, k0, LLVMConstInt(g->i32, PHILOX_W0, 0), "");
    k1 = LLVMBuildAdd(b, k1, LLVMConstInt(g->i32, PHILOX_W1, 0), "");
  }
  return LLVMBuildZExt(b, c[word], g->i64, "");
}

/* ---- expressions -------------------------------------------------------- */
static LLVMValueRef emit_expr(emitter *em, const kexpr *e);
static LLVMValueRef lane_ptr(emitter *em, int acc, kiln_dtype t, const kexpr *lane);

static LLVMValueRef emit_load(emitter *em, const kexpr *e) {
  kiln_dtype st = em->k->params[e->buf].dtype;
  LLVMValueRef v = LLVMBuildLoad2(em->g.b, storage_type(&em->g, st), cpu_elem_ptr(em, e->buf, emit_expr(em, e->a)), "");
  return emit_cast(&em->g, widen(&em->g, v, st), st, e->type);
}

/* k->args[e->i] as e->type: the bits k_arg_int / k_float_bits wrote. */
static LLVMValueRef emit_arg(emitter *em, const kexpr *e) {
  cpu_cg *g = &em->g;
  LLVMValueRef idx = LLVMConstInt(g->i64, (unsigned long long)e->i, 0);
  LLVMValueRef p = LLVMBuildInBoundsGEP2(g->b, g->i64, em->bufs[k_args_param(em->k)], &idx, 1, "");
  LLVMValueRef bits = LLVMBuildLoad2(g->b, g->i64, p, "");
  if (e->type == KILN_F64) return LLVMBuildBitCast(g->b, bits, g->f64, "");
  if (e->type == KILN_F32) return LLVMBuildBitCast(g->b, LLVMBuildTrunc(g->b, bits, g->i32, ""), g->f32, "");
  return e->type == KILN_I64 ? bits : LLVMBuildTrunc(g->b, bits, cpu_type(g, e->type), "");
}

static LLVMValueRef emit_expr_new(emitter *em, const kexpr *e) {
  cpu_cg *g = &em->g;
  LLVMTypeRef t = cpu_type(g, e->type);
  switch (e->kind) {
  case KX_CONST:
    return ir_is_float(e->type) ? LLVMConstReal(t, e->f) : LLVMConstInt(t, (unsigned long long)e->i, 1);
  case KX_VAR: return em->vars[e->var];
  case KX_LOAD: return emit_load(em, e);
  case KX_OP: {
    LLVMValueRef a = emit_expr(em, e->a);
    LLVMValueRef b = e->b ? emit_expr(em, e->b) : NULL;
    LLVMValueRef c = e->c ? emit_expr(em, e->c) : NULL;
    return emit_op(em, e, a, b, c);
  }
  case KX_CAST: return emit_cast(g, emit_expr(em, e->a), e->a->type, e->type);
  case KX_IDIV: return LLVMBuildSDiv(g->b, emit_expr(em, e->a), emit_expr(em, e->b), "");
  case KX_IMOD: return LLVMBuildSRem(g->b, emit_expr(em, e->a), emit_expr(em, e->b), "");
  case KX_PHILOX: return emit_philox(em, emit_expr(em, e->a), emit_expr(em, e->b), (int)e->i);
  case KX_ACC: return LLVMBuildLoad2(g->b, t, e->a ? lane_ptr(em, e->var, e->type, e->a) : cpu_acc_slot(em, e->var, e->type), "");
  case KX_ARG: return emit_arg(em, e);
  }
  IR_ASSERT(!"bad expression kind");
}

/* An accumulator read is not memoised: the accumulator changes between
 * reads in different places. */
static bool memoised(const emitter *em, const kexpr *e) { return e->kind == KX_ACC || em->memo[e->id]; }

static void emit_memo(emitter *em, const kexpr *e) {
  em->memo[e->id] = emit_expr_new(em, e);
  em->defined[em->ndefined++] = e->id;
}

/* e and the operands below it not emitted yet, each after its own operands
 * (a, b, c: the order emit_expr_new takes them), with an explicit stack, so
 * that emit_expr_new's calls for operands find them memoised: a kernel's
 * expression may be as deep as the chain of ops fused into it. */
static LLVMValueRef emit_expr(emitter *em, const kexpr *e) {
  if (e->kind == KX_ACC) return emit_expr_new(em, e);
  if (em->memo[e->id]) return em->memo[e->id];
  int n = 0;
  em->open[n].e = e;
  em->open[n++].next = 0;
  while (n) {
    const kexpr *top = em->open[n - 1].e, *c = NULL;
    while (!c && em->open[n - 1].next < 3) {
      int i = em->open[n - 1].next++;
      c = i == 0 ? top->a : i == 1 ? top->b : top->c;
      if (c && memoised(em, c)) c = NULL;
    }
    if (c) {
      em->open[n].e = c;
      em->open[n++].next = 0;
    } else {
      emit_memo(em, top);
      n--;
    }
  }
  return em->memo[e->id];
}

/* ---- statements --------------------------------------------------------- */
static void emit_block(emitter *em, const kstmt *s);

LLVMValueRef cpu_entry_alloca(emitter *em, LLVMTypeRef t) {
  LLVMBuilderRef eb = LLVMCreateBuilderInContext(em->g.ctx);
  LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(em->fn);
  LLVMValueRef first = LLVMGetFirstInstruction(entry);
  if (first) LLVMPositionBuilderBefore(eb, first);
  else LLVMPositionBuilderAtEnd(eb, entry);
  LLVMValueRef a = LLVMBuildAlloca(eb, t, "");
  LLVMDisposeBuilder(eb);
  return a;
}

LLVMValueRef cpu_acc_slot(emitter *em, int acc, kiln_dtype t) {
  if (!em->accs[acc]) em->accs[acc] = cpu_entry_alloca(em, cpu_type(&em->g, t));
  return em->accs[acc];
}

/* A lane accumulator is an array on the stack (its first KS_ACC gives the
 * lanes), 64-byte aligned for the vector loop over its lanes. */
static LLVMValueRef lane_ptr(emitter *em, int acc, kiln_dtype t, const kexpr *lane) {
  IR_ASSERT(em->accs[acc]);
  LLVMValueRef i = emit_expr(em, lane);
  return LLVMBuildInBoundsGEP2(em->g.b, cpu_type(&em->g, t), em->accs[acc], &i, 1, "");
}

/* KS_ACC and KS_CARRY: acc = value. A carry's value reads the slot before
 * the store, and every read after it loads again (KX_ACC is not memoised). */
static void emit_acc(emitter *em, const kstmt *s) {
  LLVMValueRef v = emit_expr(em, s->value);
  if (s->index && !em->accs[s->acc]) {
    em->accs[s->acc] = cpu_entry_alloca(em, LLVMArrayType2(cpu_type(&em->g, s->type), (uint64_t)s->extent));
    LLVMSetAlignment(em->accs[s->acc], 64);
  }
  LLVMBuildStore(em->g.b, v, s->index ? lane_ptr(em, s->acc, s->type, s->index) : cpu_acc_slot(em, s->acc, s->type));
}

/* acc = op(acc, value); float sums and products may be reassociated so the
 * loop vectorizer can keep partial results per lane. A float max or min
 * ignores the sign of zero (nsz): which of -0 and +0 it keeps is left
 * open, as in PyTorch, and llvm.maximum's reduction is then a vmaxps tree
 * with a NaN fix-up, not one that also orders the zeros (half the
 * instructions; a 16x16 softmax replays in 0.39 us instead of 0.55). */
static void emit_fold(emitter *em, const kstmt *s) {
  cpu_cg *g = &em->g;
  LLVMValueRef slot = cpu_acc_slot(em, s->acc, s->type);
  LLVMValueRef cur = LLVMBuildLoad2(g->b, cpu_type(g, s->type), slot, "");
  kexpr opnd = {.type = s->type};  /* emit_op reads the operands' type from them */
  const kexpr op = {.kind = KX_OP, .op = s->op, .type = s->type, .a = &opnd, .b = &opnd};
  LLVMValueRef r = emit_op(em, &op, cur, emit_expr(em, s->value), NULL);
  bool sum = s->op == IR_ADD || s->op == IR_MUL, extreme = s->op == IR_MAXIMUM || s->op == IR_MINIMUM;
  if (ir_is_float(s->type) && (sum || extreme) && LLVMIsAInstruction(r))
    LLVMSetFastMathFlags(r, LLVMFastMathNoSignedZeros | (sum ? LLVMFastMathAllowReassoc : 0));
  LLVMBuildStore(g->b, r, slot);
}

/* arg-reduction: value beats acc when op says so, or when it is NaN and acc
 * is not (NaN is the largest and the smallest, as PyTorch); ties keep the
 * first index. */
static void emit_argfold(emitter *em, const kstmt *s) {
  cpu_cg *g = &em->g;
  LLVMValueRef slot = cpu_acc_slot(em, s->acc, s->type), islot = cpu_acc_slot(em, s->acc2, KILN_I64);
  LLVMValueRef cur = LLVMBuildLoad2(g->b, cpu_type(g, s->type), slot, "");
  LLVMValueRef idx = LLVMBuildLoad2(g->b, g->i64, islot, "");
  LLVMValueRef v = emit_expr(em, s->value);
  kexpr opnd = {.type = s->type};
  const kexpr cmp = {.kind = KX_OP, .op = s->op, .type = KILN_BOOL, .a = &opnd, .b = &opnd};
  LLVMValueRef better = emit_op(em, &cmp, v, cur, NULL);
  if (ir_is_float(s->type)) {
    LLVMValueRef vnan = LLVMBuildFCmp(g->b, LLVMRealUNO, v, v, "");
    LLVMValueRef cnan = LLVMBuildFCmp(g->b, LLVMRealUNO, cur, cur, "");
    better = LLVMBuildOr(g->b, better, LLVMBuildAnd(g->b, vnan, LLVMBuildNot(g->b, cnan, ""), ""), "");
  }
  LLVMBuildStore(g->b, LLVMBuildSelect(g->b, better, v, cur, ""), slot);
  LLVMBuildStore(g->b, LLVMBuildSelect(g->b, better, emit_expr(em, s->index), idx, ""), islot);
}

/* A line sorted by cpu_sort_row (sort.c), which the JIT resolves as
 * "kiln.sort_row": element pointers for the line and its outputs, NULL for
 * an output the kernel does not have. */
static void emit_sort(emitter *em, const kstmt *s) {
  cpu_cg *g = &em->g;
  LLVMTypeRef params[9] = {g->ptr, g->i64, g->i64, g->i32, g->i32, g->i64, g->ptr, g->ptr, g->i64};
  LLVMTypeRef ft = LLVMFunctionType(g->vd, params, 9, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(g->mod, CPU_SORT_SYMBOL);
  if (!fn) fn = LLVMAddFunction(g->mod, CPU_SORT_SYMBOL, ft);
  LLVMValueRef out = emit_expr(em, s->sort.out_off), null = LLVMConstNull(g->ptr);
  LLVMValueRef args[9] = {
      cpu_elem_ptr(em, s->sort.in, emit_expr(em, s->sort.in_off)),
      LLVMConstInt(g->i64, (unsigned long long)s->sort.in_stride, 1),
      LLVMConstInt(g->i64, (unsigned long long)s->sort.n, 1),
      LLVMConstInt(g->i32, (unsigned long long)em->k->params[s->sort.in].dtype, 0),
      LLVMConstInt(g->i32, s->sort.descending, 0),
      LLVMConstInt(g->i64, (unsigned long long)s->sort.k, 1),
      s->sort.vals >= 0 ? cpu_elem_ptr(em, s->sort.vals, out) : null,
      s->sort.idx >= 0 ? cpu_elem_ptr(em, s->sort.idx, out) : null,
      LLVMConstInt(g->i64, (unsigned long long)s->sort.out_stride, 1)};
  LLVMBuildCall2(g->b, ft, fn, args, 9, "");
}

/* A block of attention rows computed by cpu_attention (attention.c), which
 * the JIT resolves as "kiln.attention": element pointers of the (batch,
 * head), the first row, the statement's fields as a constant array and the
 * block kernel it runs (attn_block.c). */
static void emit_attn(emitter *em, const kstmt *s) {
  cpu_cg *g = &em->g;
  LLVMTypeRef params[9] = {g->ptr, g->ptr, g->ptr, g->ptr, g->ptr, g->i64, g->ptr, g->f64, g->ptr};
  LLVMTypeRef ft = LLVMFunctionType(g->vd, params, 9, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(g->mod, CPU_ATTN_SYMBOL);
  if (!fn) fn = LLVMAddFunction(g->mod, CPU_ATTN_SYMBOL, ft);
  int64_t d[CPU_ATTN_WORDS] = {em->k->params[s->attn.q].dtype, s->attn.mask >= 0 ? (int64_t)em->k->params[s->attn.mask].dtype : -1,
                               s->attn.causal, s->attn.rows, s->attn.l, s->attn.s, s->attn.e, s->attn.ev};
  memcpy(d + CPU_ATTN_STRIDES, s->attn.st, sizeof s->attn.st);
  LLVMValueRef words[CPU_ATTN_WORDS];
  for (int i = 0; i < CPU_ATTN_WORDS; i++) words[i] = LLVMConstInt(g->i64, (unsigned long long)d[i], 1);
  LLVMValueRef desc = LLVMAddGlobal(g->mod, LLVMArrayType(g->i64, CPU_ATTN_WORDS), "attn.desc");
  LLVMSetInitializer(desc, LLVMConstArray(g->i64, words, CPU_ATTN_WORDS));
  LLVMSetGlobalConstant(desc, 1);
  LLVMSetLinkage(desc, LLVMPrivateLinkage);
  cpu_gemm_driver driver = cpu_gemm_driver_of(em->k, s);
  LLVMValueRef block = LLVMGetNamedFunction(g->mod, driver.name);
  if (!block) block = LLVMAddFunction(g->mod, driver.name, cpu_attn_block_type(g));
  LLVMValueRef args[9] = {
      cpu_elem_ptr(em, s->attn.q, emit_expr(em, s->attn.q_off)),
      cpu_elem_ptr(em, s->attn.k, emit_expr(em, s->attn.k_off)),
      cpu_elem_ptr(em, s->attn.v, emit_expr(em, s->attn.v_off)),
      s->attn.mask >= 0 ? cpu_elem_ptr(em, s->attn.mask, emit_expr(em, s->attn.m_off)) : LLVMConstNull(g->ptr),
      cpu_elem_ptr(em, s->attn.out, emit_expr(em, s->attn.o_off)),
      emit_expr(em, s->attn.row0), desc, LLVMConstReal(g->f64, s->attn.scale), block};
  LLVMBuildCall2(g->b, ft, fn, args, 9, "");
}

static void emit_store(emitter *em, const kstmt *s) {
  kiln_dtype st = em->k->params[s->buf].dtype;
  LLVMValueRef v = emit_cast(&em->g, emit_expr(em, s->value), s->value->type, ir_compute_dtype(st));
  LLVMValueRef p = cpu_elem_ptr(em, s->buf, emit_expr(em, s->index));
  LLVMBuildStore(em->g.b, narrow(&em->g, v, st), p);
}

/* Values computed inside a loop body do not dominate what follows the loop. */
static void forget_since(emitter *em, int mark) {
  while (em->ndefined > mark) em->memo[em->defined[--em->ndefined]] = NULL;
}

/* A long loop of cheap arithmetic is not unrolled by LLVM: fully unrolled,
 * GVN keeps a row's loads live from one loop to the next over the same row
 * (layer_norm's mean and variance passes: 64 zmm values, spilled) and the
 * kernel ran at half the speed of the same loops in C; the vectorizer's
 * interleaving already gives such a loop its independent chains. A loop
 * calling transcendentals keeps unrolling: its long polynomial chains gain
 * from the overlap (softmax's exp is 20% slower without it). */
#define UNROLL_MAX_EXTENT 64

/* A loop calling an f32 function computed in f64 (gelu, gelu_tanh, pow:
 * ~40 dependent operations per element) is bound by their latency, and
 * LLVM's cost model interleaves it once. With 8 chains in flight f32 gelu
 * on 4M elements went from 7.8 to 5.7 ms on one thread, and as a matmul's
 * epilogue from 12 to 6 ms. (softmax's f32 exp got slower with 4.) */
#define WIDE_MATH_INTERLEAVE 8

/* A long reduction loop without transcendentals (layer_norm's sums, a row
 * sum) is bound by the latency of its one chain of vector adds when LLVM's
 * cost model interleaves it once, as it does with unrolling off: 4 chains. */
#define FOLD_INTERLEAVE 4

/* A loop whose body holds a vector loop LLVM unrolls fully (a row of at
 * least 4 lanes): the SLP vectorizer makes each row a few vector
 * operations, unless the loop vectorizer first takes the loop around it and
 * reads and writes the rows with gathers and scatters (a + b on f32[16,16]:
 * 16 of each; replayed, 0.34 us a call against 0.15). */
static bool holds_short_vector_loop(const kstmt *s) {
  for (const kstmt *b = s->body; b; b = b->next)
    if (b->kind == KS_LOOP && b->loop == KL_VECTOR && !b->bound && b->extent >= 4 && b->extent <= UNROLL_MAX_EXTENT)
      return true;
  return false;
}

/* !llvm.loop !{self, !{hint[0][, value[0]]}, ...} (value < 0: none) */
static void loop_hints(cpu_cg *g, LLVMValueRef latch_br, int n, const char *const *hint, const int *value) {
  LLVMMetadataRef ops[4];
  IR_ASSERT(n < 4);
  ops[0] = LLVMTemporaryMDNode(g->ctx, NULL, 0);
  for (int i = 0; i < n; i++) {
    LLVMMetadataRef kv[2] = {LLVMMDStringInContext2(g->ctx, hint[i], strlen(hint[i])),
                             value[i] >= 0 ? LLVMValueAsMetadata(LLVMConstInt(g->i32, (unsigned)value[i], 0)) : NULL};
    ops[i + 1] = LLVMMDNodeInContext2(g->ctx, kv, value[i] >= 0 ? 2 : 1);
  }
  LLVMMetadataRef loop = LLVMMDNodeInContext2(g->ctx, ops, (size_t)n + 1);
  LLVMMetadataReplaceAllUsesWith(ops[0], loop);
  LLVMSetMetadata(latch_br, LLVMGetMDKindIDInContext(g->ctx, "llvm.loop", 9), LLVMMetadataAsValue(g->ctx, loop));
}

void cpu_loop_scalar(cpu_cg *g, LLVMValueRef latch_br) {
  static const char *const hints[] = {"llvm.loop.vectorize.width", "llvm.loop.interleave.count",
                                      "llvm.loop.unroll.disable"};
  loop_hints(g, latch_br, 3, hints, (const int[]){1, 1, -1});
}

LLVMValueRef cpu_loop_open(cpu_cg *g, LLVMValueRef fn, cpu_loop *l, LLVMValueRef start, LLVMValueRef end,
                           LLVMValueRef step) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  l->end = end;
  l->step = step;
  l->body = LLVMAppendBasicBlockInContext(g->ctx, fn, "loop");
  l->exit = LLVMAppendBasicBlockInContext(g->ctx, fn, "endloop");
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, start, end, ""), l->body, l->exit);
  LLVMPositionBuilderAtEnd(g->b, l->body);
  l->iv = LLVMBuildPhi(g->b, g->i64, "");
  LLVMAddIncoming(l->iv, &start, &pre, 1);
  return l->iv;
}

LLVMValueRef cpu_loop_close(cpu_cg *g, cpu_loop *l) {
  LLVMValueRef next = LLVMBuildNSWAdd(g->b, l->iv, l->step, "");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMValueRef br = LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, next, l->end, ""), l->body, l->exit);
  LLVMAddIncoming(l->iv, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(g->b, l->exit);
  return br;
}

/* for v in start..end, rotated: guard (parallel loops and loops to a
 * launch argument: the range may be empty), body with the phi, latch
 * `v+1 < end`. */
static void emit_loop(emitter *em, const kstmt *s) {
  cpu_cg *g = &em->g;
  bool par = s->loop == KL_PARALLEL, guard = par || s->bound;
  if (!guard && s->extent <= 0) return;
  LLVMValueRef start = par ? em->lo : LLVMConstInt(g->i64, 0, 0);
  LLVMValueRef end = par ? em->hi : s->bound ? emit_expr(em, s->bound)
                   : LLVMConstInt(g->i64, (unsigned long long)s->extent, 0);
  cpu_check_scope checks = cpu_check_enter(em, s);
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, em->fn, "loop");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, em->fn, "endloop");
  if (guard) LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, start, end, ""), body, exit);
  else LLVMBuildBr(g->b, body);
  LLVMPositionBuilderAtEnd(g->b, body);
  LLVMValueRef iv = LLVMBuildPhi(g->b, g->i64, "v");
  em->vars[s->var] = iv;
  int mark = em->ndefined, math = em->math_calls, wide = em->wide_math_calls, folds = em->folds;
  emit_block(em, s->body);
  forget_since(em, mark);
  em->vars[s->var] = NULL;  /* out of scope: a KS_GEMM passes the vars that are set to its epilogue */
  LLVMValueRef next = LLVMBuildNSWAdd(g->b, iv, LLVMConstInt(g->i64, 1, 0), "");
  LLVMSetNUW(next, 1);
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMValueRef br = LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, next, end, ""), body, exit);
  const char *hint[3];
  int value[3], nh = 0;
  bool cheap_long = !par && (s->bound || s->extent > UNROLL_MAX_EXTENT) && em->math_calls == math;
  if (cheap_long) hint[nh] = "llvm.loop.unroll.disable", value[nh++] = -1;
  if (cheap_long && em->folds != folds) hint[nh] = "llvm.loop.interleave.count", value[nh++] = FOLD_INTERLEAVE;
  else if (!cheap_long && em->wide_math_calls != wide)
    hint[nh] = "llvm.loop.interleave.count", value[nh++] = WIDE_MATH_INTERLEAVE;
  if (holds_short_vector_loop(s)) hint[nh] = "llvm.loop.vectorize.width", value[nh++] = 1;
  if (nh) loop_hints(g, br, nh, hint, value);
  LLVMAddIncoming(iv, (LLVMValueRef[]){start, next}, (LLVMBasicBlockRef[]){pre, latch}, 2);
  LLVMPositionBuilderAtEnd(g->b, exit);
  cpu_check_leave(em, s, checks, start, end);
}

static void emit_block(emitter *em, const kstmt *s) {
  bool deferred = s && s == em->check_body;   /* the body of a loop whose checks are re-scanned after it */
  for (; s; s = s->next) {
    switch (s->kind) {
    case KS_LOOP: emit_loop(em, s); break;
    case KS_STORE: emit_store(em, s); break;
    case KS_ACC:
    case KS_CARRY: emit_acc(em, s); break;
    case KS_UPDATE:
      (s->acc2 < 0 ? emit_fold : emit_argfold)(em, s);
      em->folds++;
      break;
    case KS_GEMM: cpu_emit_gemm(em, s); break;
    case KS_CHECK: (deferred ? cpu_emit_check_deferred : cpu_emit_check)(em, s); break;
    case KS_SORT: emit_sort(em, s); break;
    case KS_ATTN: emit_attn(em, s); break;
    }
  }
}

void cpu_emit_block(emitter *em, const kstmt *s) { emit_block(em, s); }
LLVMValueRef cpu_emit_expr(emitter *em, const kexpr *e) { return emit_expr(em, e); }
int cpu_emit_mark(emitter *em) { return em->ndefined; }
void cpu_emit_forget(emitter *em, int mark) { forget_since(em, mark); }

/* ---- functions ---------------------------------------------------------- */
/* internal void name.body(ptr noalias b0, ..., i64 lo, i64 hi) */
static void emit_body_fn(emitter *em) {
  cpu_cg *g = &em->g;
  int n = em->k->nparams;
  LLVMTypeRef *params = em->types;
  for (int i = 0; i < n; i++) params[i] = g->ptr;
  params[n] = params[n + 1] = g->i64;
  char name[48];
  snprintf(name, sizeof name, "%s.body", em->k->name);
  em->fn = LLVMAddFunction(g->mod, name, LLVMFunctionType(g->vd, params, (unsigned)n + 2, 0));
  LLVMSetLinkage(em->fn, LLVMInternalLinkage);
  cpu_fn_attrs(g, em->fn, true);
  for (int i = 0; i < n; i++) {
    cpu_param_attr(g, em->fn, (unsigned)i + 1, "noalias");
    em->bufs[i] = LLVMGetParam(em->fn, (unsigned)i);
  }
  em->lo = LLVMGetParam(em->fn, (unsigned)n);
  em->hi = LLVMGetParam(em->fn, (unsigned)n + 1);
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, em->fn, "entry"));
  emit_block(em, em->k->body);
  LLVMBuildRetVoid(g->b);
}

/* The exported ABI: void name(void *const *bufs, i64 lo, i64 hi). */
static void emit_wrapper(emitter *em) {
  cpu_cg *g = &em->g;
  int n = em->k->nparams;
  LLVMTypeRef params[3] = {g->ptr, g->i64, g->i64};
  LLVMValueRef fn = LLVMAddFunction(g->mod, em->k->name, LLVMFunctionType(g->vd, params, 3, 0));
  cpu_fn_attrs(g, fn, false);
  cpu_param_attr(g, fn, 1, "noalias");
  cpu_param_attr(g, fn, 1, "nocapture");
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
  LLVMValueRef *args = em->args;
  for (int i = 0; i < n; i++) {
    LLVMValueRef idx = LLVMConstInt(g->i64, (unsigned long long)i, 0);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(g->b, g->ptr, LLVMGetParam(fn, 0), &idx, 1, "");
    args[i] = LLVMBuildLoad2(g->b, g->ptr, p, "");
  }
  args[n] = LLVMGetParam(fn, 1);
  args[n + 1] = LLVMGetParam(fn, 2);
  LLVMBuildCall2(g->b, LLVMGlobalGetValueType(em->fn), em->fn, args, (unsigned)n + 2, "");
  LLVMBuildRetVoid(g->b);
}

static void init_types(cpu_cg *g, LLVMContextRef ctx) {
  g->ctx = ctx;
  g->i1 = LLVMInt1TypeInContext(ctx);
  g->i8 = LLVMInt8TypeInContext(ctx);
  g->i16 = LLVMInt16TypeInContext(ctx);
  g->i32 = LLVMInt32TypeInContext(ctx);
  g->i64 = LLVMInt64TypeInContext(ctx);
  g->f16 = LLVMHalfTypeInContext(ctx);
  g->f32 = LLVMFloatTypeInContext(ctx);
  g->f64 = LLVMDoubleTypeInContext(ctx);
  g->ptr = LLVMPointerTypeInContext(ctx, 0);
  g->vd = LLVMVoidTypeInContext(ctx);
}

void cpu_cg_init(cpu_cg *g, LLVMContextRef ctx, const char *name, const char *triple, const char *datalayout,
                 const char *cpu, const char *features) {
  init_types(g, ctx);
  g->cpu = cpu;
  g->features = features;
  g->mod = LLVMModuleCreateWithNameInContext(name, ctx);
  LLVMSetTarget(g->mod, triple);
  LLVMSetDataLayout(g->mod, datalayout);  /* before building: loads take ABI alignment from it */
  g->b = LLVMCreateBuilderInContext(ctx);
}

bool cpu_emitter_init(emitter *em, const cpu_cg *g, kernel *k) {
  size_t scratch = (size_t)k->nparams + (size_t)k->nvars + 8;
  *em = (emitter){.g = *g, .k = k};
  em->vars = ir_calloc((size_t)k->nvars + 1, sizeof *em->vars);
  em->memo = ir_calloc((size_t)k->nexprs + 1, sizeof *em->memo);
  em->defined = ir_calloc((size_t)k->nexprs + 1, sizeof *em->defined);
  em->open = ir_calloc((size_t)k->nexprs + 1, sizeof *em->open);
  em->bufs = ir_calloc((size_t)k->nparams + 1, sizeof *em->bufs);
  em->accs = ir_calloc((size_t)k->naccs + 1, sizeof *em->accs);
  em->types = ir_calloc(scratch, sizeof *em->types);
  em->args = ir_calloc(scratch, sizeof *em->args);
  em->live = ir_calloc((size_t)k->nvars + 1, sizeof *em->live);
  return em->vars && em->memo && em->defined && em->open && em->bufs && em->accs && em->types && em->args && em->live;
}

void cpu_emitter_free(emitter *em) {
  free(em->vars);
  free(em->memo);
  free(em->defined);
  free(em->open);
  free(em->bufs);
  free(em->accs);
  free(em->types);
  free(em->args);
  free(em->live);
}

LLVMModuleRef cpu_emit_module(LLVMContextRef ctx, kernel *k, const char *triple,
                              const char *datalayout, const char *cpu, const char *features) {
  IR_ASSERT(k->name[0]);
  cpu_cg g;
  cpu_cg_init(&g, ctx, k->name, triple, datalayout, cpu, features);
  emitter em;
  bool ok = cpu_emitter_init(&em, &g, k);
  if (ok) {
    emit_body_fn(&em);
    emit_wrapper(&em);
    ok = !em.oom;
  }
  cpu_emitter_free(&em);
  LLVMDisposeBuilder(g.b);
  if (ok) return g.mod;
  LLVMDisposeModule(g.mod);
  return NULL;
}
