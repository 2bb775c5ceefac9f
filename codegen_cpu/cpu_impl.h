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
  struct { const kexpr *e; int next; } *open;  /* emit_expr's explicit stack (nexprs deep at most) */
  int math_calls;                     /* transcendentals emitted so far (math.c) */
  int wide_math_calls;                /* of which f32 functions computed in f64 */
  int folds;                          /* accumulator updates emitted so far */
  /* Scratch made with the emitter, so that emitting allocates nothing:
   * room for a function's parameter types or a call's arguments (nparams +
   * nvars + 8), and for the vars live around a gemm (nvars). */
  LLVMTypeRef *types;
  LLVMValueRef *args;
  int *live;
  bool oom;                           /* an epilogue's emitter could not be made: the module is dropped */
  const kstmt *check_body;            /* body of the loop being emitted whose checks are deferred (check.c) */
  LLVMValueRef check_flag;            /* its i8 alloca: some check there failed */
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
/* An alloca of t at the start of em->fn's entry block, where LLVM expects static ones. */
LLVMValueRef cpu_entry_alloca(emitter *em, LLVMTypeRef t);
/* Pointer to element index (i64) of parameter buf, in its storage dtype. */
LLVMValueRef cpu_elem_ptr(emitter *em, int buf, LLVMValueRef index);
/* for iv = start; iv < end; iv += step in fn, guarded (it may run zero
 * times); cpu_loop_close returns the latch branch (for loop metadata). */
typedef struct {
  LLVMValueRef iv, end, step;
  LLVMBasicBlockRef body, exit;
} cpu_loop;
LLVMValueRef cpu_loop_open(cpu_cg *g, LLVMValueRef fn, cpu_loop *l, LLVMValueRef start, LLVMValueRef end,
                           LLVMValueRef step);
LLVMValueRef cpu_loop_close(cpu_cg *g, cpu_loop *l);
/* Neither vectorized, interleaved nor unrolled: a rarely run loop kept small. */
void cpu_loop_scalar(cpu_cg *g, LLVMValueRef latch_br);
/* One module holding k as `void k->name(void *const *bufs, i64 lo, i64 hi)`;
 * NULL when out of memory. */
LLVMModuleRef cpu_emit_module(LLVMContextRef ctx, kernel *k, const char *triple,
                              const char *datalayout, const char *cpu, const char *features);
/* An empty module `name` for the host target, its types and a builder (the
 * caller disposes of the builder). */
void cpu_cg_init(cpu_cg *g, LLVMContextRef ctx, const char *name, const char *triple, const char *datalayout,
                 const char *cpu, const char *features);
/* An emitter of k into g's module with empty tables and g's builder; the
 * caller sets fn, bufs and the vars it needs. cpu_emitter_free releases the
 * tables, also after init returned false (out of memory). */
bool cpu_emitter_init(emitter *em, const cpu_cg *g, kernel *k);
void cpu_emitter_free(emitter *em);
/* Target attributes and nounwind; alwaysinline for internal helpers. */
void cpu_fn_attrs(cpu_cg *g, LLVMValueRef fn, bool always_inline);
/* The enum attribute `name` on parameter idx (1-based) of fn. */
void cpu_param_attr(cpu_cg *g, LLVMValueRef fn, unsigned idx, const char *name);
/* Calls the overloaded intrinsic `name` (e.g. "llvm.fma") instantiated at
 * the overload types `over`. */
LLVMValueRef cpu_intrin(cpu_cg *g, LLVMBuilderRef b, const char *name, LLVMTypeRef *over,
                        unsigned nover, LLVMValueRef *args, unsigned nargs);
LLVMTypeRef cpu_type(cpu_cg *g, kiln_dtype t);  /* compute type: bool is i1 */

/* ---- check.c: KS_CHECK ---- */
/* The branching form: on failure, claim the status slot and record. */
void cpu_emit_check(emitter *em, const kstmt *s);
/* In loop (emit.c's emit_loop): cpu_check_enter, before the loop, decides
 * whether the checks directly in its body are deferred (em->check_body is
 * then that body, and each of them is emitted by cpu_emit_check_deferred:
 * a failure only sets em->check_flag); cpu_check_leave, after the loop
 * over start..end, re-scans that range for the first failure when the
 * flag is set, and restores the enclosing loop's scope. */
typedef struct {
  const kstmt *body;
  LLVMValueRef flag;
} cpu_check_scope;
cpu_check_scope cpu_check_enter(emitter *em, const kstmt *loop);
void cpu_emit_check_deferred(emitter *em, const kstmt *s);
void cpu_check_leave(emitter *em, const kstmt *loop, cpu_check_scope outer, LLVMValueRef start,
                     LLVMValueRef end);

/* ---- gemm.c: the shape-generic GEMM driver ---- */
/* One driver per compute type t (f32/f64), storage dtypes of A and B and
 * kind of B, named `kiln.gemm.<t>.<a>.<b>` (ir_dtypes short names), plus
 * `.win` when B is a convolution's window. Its C view:
 *   void driver(const A *a, int64_t a_si, int64_t a_sk, const B *b, int64_t b_sk,
 *               int64_t b_sn, int64_t i0, int64_t i1, int64_t n, int64_t k,
 *               cpu_gemm_epilogue epi, void *ctx, const int64_t *win);
 * computes rows i0..i1 of sum over p < k of a[i*a_si + p*a_sk] * b[p*b_sk +
 * j*b_sn] (or the window's element (p, j), with win the KW_N values of
 * ir/kernel.h) for j < n and hands each finished block of them to
 *   void epi(void *ctx, const T *sums, int64_t ld, int64_t i, int64_t j, int64_t rows, int64_t cols)
 * where sums[r*ld + q] is element (i + r, j + q), r < rows, q < cols. */
typedef struct {
  kiln_dtype t, a, b;   /* compute dtype; storage dtypes of A and B (attention: t, and the mask's) */
  bool win;             /* B is a convolution's window, read through win */
  bool attn;            /* not a GEMM: the attention block kernel of t (attn_block.c) */
  bool masked;          /* attn: with a mask of dtype b */
  char name[40];        /* its symbol */
} cpu_gemm_driver;

cpu_gemm_driver cpu_gemm_driver_for(kiln_dtype t, kiln_dtype a, kiln_dtype b, bool win);
/* The driver a KS_GEMM calls, or the block kernel a KS_ATTN's cpu_attention calls. */
cpu_gemm_driver cpu_gemm_driver_of(const kernel *k, const kstmt *gemm);
LLVMTypeRef cpu_gemm_driver_type(cpu_cg *g);
LLVMTypeRef cpu_gemm_epilogue_type(cpu_cg *g);
/* The module defining driver d (to be optimised and added to the JIT once;
 * an attention block kernel's is cpu_attn_block_module's). */
LLVMModuleRef cpu_gemm_driver_module(LLVMContextRef ctx, const cpu_gemm_driver *d, const char *triple,
                                     const char *datalayout, const char *cpu, const char *features);
/* Calls fn on the driver of each KS_GEMM and KS_ATTN of k (the JIT must hold them
 * before it links k); stops at the first call that fails (false), and
 * then returns false. */
typedef bool (*cpu_gemm_visit)(void *ctx, const cpu_gemm_driver *d);
bool cpu_gemm_each_driver(const kernel *k, cpu_gemm_visit fn, void *ctx);

/* ---- gemm_call.c ---- */
/* KS_GEMM (ir/kernel.h) in a kernel: a call into its driver and the body
 * (the epilogue) as a function the driver calls back. When the gemm is not
 * inside a loop, rows lo..hi of 0..m are computed (the runtime splits them
 * across threads). */
void cpu_emit_gemm(emitter *em, const kstmt *s);

/* ---- math.c ---- */
/* Float transcendentals of ops.def (EXP LOG SIN COS TANH SIGMOID GELU
 * GELU_TANH SILU): f32 inline polynomials, f64 the process's libm. */
LLVMValueRef cpu_math_unary(cpu_cg *g, ir_op op, LLVMValueRef x);
LLVMValueRef cpu_math_pow(cpu_cg *g, LLVMValueRef a, LLVMValueRef b);        /* float pow */
LLVMValueRef cpu_math_atan2(cpu_cg *g, LLVMValueRef y, LLVMValueRef x);
LLVMValueRef cpu_math_ipow(cpu_cg *g, LLVMValueRef a, LLVMValueRef b, bool is_signed);
/* Whether op on t is an f32 function math.c computes in f64 (long latency). */
bool cpu_math_in_f64(ir_op op, kiln_dtype t);
/* Names and addresses of the libm functions the f64 paths call, for the JIT
 * to define as absolute symbols (NULL-terminated). */
typedef struct { const char *name; void *addr; } cpu_libm_sym;
extern const cpu_libm_sym cpu_libm_syms[];

/* sort.c: sorts one line for KS_SORT (kernel.h): n elements of dtype from
 * in, in_stride apart; the first k in order to vals and their positions to
 * idx (either may be NULL), out_stride apart. Kernels call it by the name
 * CPU_SORT_SYMBOL, which the JIT defines with the other symbols above. */
#define CPU_SORT_SYMBOL "kiln.sort_row"
void cpu_sort_row(const void *in, int64_t in_stride, int64_t n, int32_t dtype, int32_t descending, int64_t k,
                  void *vals, int64_t *idx, int64_t out_stride);

/* attention.c: rows row0 .. row0 + desc[CPU_ATTN_ROWS] (clipped to L) of one
 * KS_ATTN (kernel.h) statement, q, k, v, mask (NULL: none) and out pointing
 * at their (batch, head)'s row 0; desc holds the statement's sizes, dtypes
 * (mask: -1 when none) and its ten strides; block is the block kernel of its
 * dtypes (cpu_gemm_driver_of), which it runs on each cpu_attn_rows of them.
 * Kernels call it by the name CPU_ATTN_SYMBOL, which the JIT defines with
 * the other symbols above. */
#define CPU_ATTN_SYMBOL "kiln.attention"
enum { CPU_ATTN_DTYPE, CPU_ATTN_MASK_DTYPE, CPU_ATTN_CAUSAL, CPU_ATTN_ROWS, CPU_ATTN_L, CPU_ATTN_S, CPU_ATTN_E,
       CPU_ATTN_EV, CPU_ATTN_STRIDES, CPU_ATTN_WORDS = CPU_ATTN_STRIDES + 10 };
/* attn_block.c: the block kernel, named `kiln.attn.<t>[.mask.<mask dtype>]`:
 *   void block(const T *q, const T *k, const T *v, const M *mask, T *out, int64_t row0, int64_t nq,
 *              const int64_t *desc, double scale, T *scratch);
 * computes rows row0 .. row0 + nq (nq <= cpu_attn_rows(t)) of the KS_ATTN
 * that desc describes (as cpu_attention gets them), the scores a block of
 * CPU_ATTN_KEYS keys at a time, in scratch (cpu_attn_scratch elements of
 * T, 64-byte aligned). */
enum { CPU_ATTN_QVECS = 3,   /* vectors of queries per block */
       CPU_ATTN_KEYS = 64 }; /* keys per block of the online softmax */
typedef void cpu_attn_block_fn(const void *q, const void *k, const void *v, const void *mask, void *out, int64_t row0,
                               int64_t nq, const int64_t *desc, double scale, void *scratch);
int64_t cpu_attn_rows(kiln_dtype t);
int64_t cpu_attn_scratch(kiln_dtype t, int64_t e, int64_t ev);
cpu_gemm_driver cpu_attn_driver(kiln_dtype t, int mask_dt);   /* mask_dt -1: none */
LLVMTypeRef cpu_attn_block_type(cpu_cg *g);
LLVMModuleRef cpu_attn_block_module(LLVMContextRef ctx, const cpu_gemm_driver *d, const char *triple,
                                    const char *datalayout, const char *cpu, const char *features);
void cpu_attention(const void *q, const void *k, const void *v, const void *mask, void *out, int64_t row0,
                   const int64_t *desc, double scale, cpu_attn_block_fn *block);

#endif
