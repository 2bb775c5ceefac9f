/* cpu_impl.h: what the CPU back end's files share: the per-module emitter
 * state (emit.c builds it, math.c adds inline math functions to its module)
 * and a few LLVM-C helpers. */
#ifndef KILN_CPU_IMPL_H
#define KILN_CPU_IMPL_H

#include "ir/kernel.h"

#include <llvm-c/Core.h>

typedef struct {
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;        /* positioned where the kernel body is being emitted */
  const char *cpu;         /* host CPU name: "target-cpu" of every function */
  const char *features;    /* host features: "target-features" of every function */
  LLVMTypeRef i1, i8, i16, i32, i64, f16, f32, f64, ptr, vd;
} cpu_cg;

/* The state of emitting one kernel's loop-nest function. */
typedef struct {
  cpu_cg g;
  kernel *k;
  LLVMValueRef fn;                    /* the loop-nest function */
  LLVMValueRef *bufs;                 /* its noalias buffer pointers */
  LLVMValueRef lo, hi;                /* the parallel loop's range */
  LLVMValueRef *vars;                 /* induction variable of each loop var */
  LLVMValueRef *accs;                 /* alloca of each accumulator (entry block) */
  LLVMValueRef *memo;                 /* by kexpr id: its value where it dominates, else NULL */
  int *defined, ndefined;             /* memoised ids in order, so a loop forgets its own on exit */
  int math_calls;                     /* transcendentals emitted so far (math.c) */
  int wide_math_calls;                /* of which f32 functions computed in f64 */
} emitter;

/* ---- emit.c ---- */
/* Emits a statement list / an expression at the builder's position. Values
 * memoised inside a loop body must be dropped when it ends: take
 * cpu_emit_mark before the body and call cpu_emit_forget after. */
void cpu_emit_block(emitter *em, const kstmt *s);
LLVMValueRef cpu_emit_expr(emitter *em, const kexpr *e);
int cpu_emit_mark(emitter *em);
void cpu_emit_forget(emitter *em, int mark);
/* The accumulator's alloca (created in the entry block on first use). */
LLVMValueRef cpu_acc_slot(emitter *em, int acc, kiln_dtype t);
/* !llvm.loop !{self, !{hint[, i32 value]}} on a loop's latch branch (value
 * < 0: none); cpu_latency_hint interleaves a loop whose body emitted f32
 * functions computed in f64 since wide_mark (em->wide_math_calls before). */
void cpu_loop_hint(cpu_cg *g, LLVMValueRef latch_br, const char *hint, int value);
void cpu_latency_hint(emitter *em, LLVMValueRef latch_br, int wide_mark);
/* ---- gemm.c ---- */
/* KS_GEMM (ir/kernel.h): the blocked matrix product and its epilogue. When
 * the gemm is not inside a loop, rows lo..hi of 0..m are computed (the
 * runtime splits them across threads). */
void cpu_emit_gemm(emitter *em, const kstmt *s);

/* One module holding k as `void k->name(void *const *bufs, i64 lo, i64 hi)`. */
LLVMModuleRef cpu_emit_module(LLVMContextRef ctx, kernel *k, const char *triple,
                              const char *datalayout, const char *cpu, const char *features);
/* Target attributes and nounwind; alwaysinline for internal helpers. */
void cpu_fn_attrs(cpu_cg *g, LLVMValueRef fn, bool always_inline);
/* Calls the overloaded intrinsic `name` (e.g. "llvm.fma") instantiated at
 * the overload types `over`. */
LLVMValueRef cpu_intrin(cpu_cg *g, LLVMBuilderRef b, const char *name, LLVMTypeRef *over,
                        unsigned nover, LLVMValueRef *args, unsigned nargs);
LLVMTypeRef cpu_type(cpu_cg *g, kiln_dtype t);  /* compute type: bool is i1 */

/* ---- math.c ---- */
/* Float transcendentals of ops.def (EXP LOG SIN COS TANH SIGMOID GELU
 * GELU_TANH SILU): f32 inline polynomials, f64 the process's libm. */
LLVMValueRef cpu_math_unary(cpu_cg *g, ir_op op, LLVMValueRef x);
LLVMValueRef cpu_math_pow(cpu_cg *g, LLVMValueRef a, LLVMValueRef b);        /* float pow */
LLVMValueRef cpu_math_ipow(cpu_cg *g, LLVMValueRef a, LLVMValueRef b, bool is_signed);
/* Whether op on t is an f32 function math.c computes in f64 (long latency). */
bool cpu_math_in_f64(ir_op op, kiln_dtype t);
/* Names and addresses of the libm functions the f64 paths call, for the JIT
 * to define as absolute symbols (NULL-terminated). */
typedef struct { const char *name; void *addr; } cpu_libm_sym;
extern const cpu_libm_sym cpu_libm_syms[];

#endif
