/* gemm_call.c: KS_GEMM (ir/kernel.h) in a kernel: a call into the
 * shape-generic driver of its dtypes (gemm.c) with m, n, kdim, the strides
 * and the operands' offsets as values, and the KS_GEMM body (the epilogue)
 * as a function of the kernel's module that the driver calls back with each
 * finished block of sums. Only this part is compiled per kernel, and in a
 * shape-generic kernel it serves every shape. */
#include "codegen_cpu/cpu_impl.h"

#include <stdio.h>

/* The epilogue reads the kernel's buffers and the vars of the loops around
 * the gemm (those emit.c has set) through the driver's ctx pointer: an i64
 * array whose slot p is buffer p and slot nparams + v is var v. */
typedef struct {
  emitter *em;               /* the kernel's */
  const kstmt *s;
  int *live, nlive;          /* the vars set around the gemm */
  char name[64];             /* the epilogue's function */
} gemm_call;

static LLVMValueRef slot(cpu_cg *g, LLVMBuilderRef b, LLVMValueRef ctx, int i) {
  LLVMValueRef at = LLVMConstInt(g->i64, (unsigned long long)i, 0);
  return LLVMBuildInBoundsGEP2(b, g->i64, ctx, &at, 1, "");
}

/* The loops of the epilogue's body function:
 * for r < rows, q < cols: acc = sums[r*ld + q]; body at (i0 + r, j0 + q).
 * The column loop keeps LLVM's own interleaving: the 8-way interleave
 * emit.c's loops ask of wide math put 8 copies of gelu's erf in the
 * vector body (263 float ops against 60) and doubled the epilogue's compile
 * time for a new shape, with the product's run time unchanged (512^3 with
 * gelu: medians within the noise of a loaded machine). */
static void epilogue_loops(emitter *sub, const kstmt *s, LLVMValueRef sums, LLVMValueRef const *dims) {
  cpu_cg *g = &sub->g;
  LLVMValueRef zero = LLVMConstInt(g->i64, 0, 0), one = LLVMConstInt(g->i64, 1, 0);
  cpu_loop lr, lq;
  LLVMValueRef r = cpu_loop_open(g, sub->fn, &lr, zero, dims[3], one);
  LLVMValueRef q = cpu_loop_open(g, sub->fn, &lq, zero, dims[4], one);
  sub->vars[s->var] = LLVMBuildAdd(g->b, dims[1], r, "");
  sub->vars[s->gemm.var_j] = LLVMBuildAdd(g->b, dims[2], q, "");
  LLVMValueRef at = LLVMBuildAdd(g->b, LLVMBuildMul(g->b, r, dims[0], ""), q, "");
  LLVMTypeRef t = cpu_type(g, s->type);
  LLVMValueRef v = LLVMBuildLoad2(g->b, t, LLVMBuildInBoundsGEP2(g->b, t, sums, &at, 1, ""), "");
  LLVMBuildStore(g->b, v, cpu_acc_slot(sub, s->acc, s->type));
  cpu_emit_block(sub, s->body);
  cpu_loop_close(g, &lq);
  cpu_loop_close(g, &lr);
}

/* internal void name.body(ptr noalias b0.., ptr noalias sums, i64 ld, i0, j0, rows, cols, i64 live vars..),
 * inlined into the callback so the noalias facts survive, as the kernel's
 * own body function does. */
static LLVMValueRef epilogue_body(gemm_call *c) {
  emitter *em = c->em;
  cpu_cg *g = &em->g;
  int np = em->k->nparams, n = np + 6 + c->nlive;
  LLVMTypeRef *params = em->types;
  for (int i = 0; i < n; i++) params[i] = i <= np ? g->ptr : g->i64;
  char name[80];
  snprintf(name, sizeof name, "%s.body", c->name);
  LLVMValueRef fn = LLVMAddFunction(g->mod, name, LLVMFunctionType(g->vd, params, (unsigned)n, 0));
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  cpu_fn_attrs(g, fn, true);
  emitter sub;
  if (!cpu_emitter_init(&sub, g, em->k)) {
    em->oom = true;   /* fn stays a declaration; the module is dropped */
    cpu_emitter_free(&sub);
    return fn;
  }
  sub.g.b = LLVMCreateBuilderInContext(g->ctx);
  sub.fn = fn;
  for (int i = 0; i <= np; i++) cpu_param_attr(g, fn, (unsigned)i + 1, "noalias");
  for (int i = 0; i < np; i++) sub.bufs[i] = LLVMGetParam(fn, (unsigned)i);
  for (int i = 0; i < c->nlive; i++) sub.vars[c->live[i]] = LLVMGetParam(fn, (unsigned)(np + 6 + i));
  LLVMValueRef dims[5];
  for (int i = 0; i < 5; i++) dims[i] = LLVMGetParam(fn, (unsigned)(np + 1 + i));
  LLVMPositionBuilderAtEnd(sub.g.b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
  epilogue_loops(&sub, c->s, LLVMGetParam(fn, (unsigned)np), dims);
  LLVMBuildRetVoid(sub.g.b);
  LLVMDisposeBuilder(sub.g.b);
  cpu_emitter_free(&sub);
  return fn;
}

/* internal void name(ptr ctx, ptr sums, i64 ld, i0, j0, rows, cols): the
 * driver's callback (cpu_gemm_epilogue_type) unpacks ctx for the body. */
static LLVMValueRef epilogue_callback(gemm_call *c) {
  emitter *em = c->em;
  cpu_cg *g = &em->g;
  LLVMValueRef body = epilogue_body(c);
  LLVMValueRef fn = LLVMAddFunction(g->mod, c->name, cpu_gemm_epilogue_type(g));
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  cpu_fn_attrs(g, fn, false);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(g->ctx);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
  int np = em->k->nparams, n = np + 6 + c->nlive;
  LLVMValueRef *args = em->args, ctx = LLVMGetParam(fn, 0);
  for (int i = 0; i < np; i++) args[i] = LLVMBuildLoad2(b, g->ptr, slot(g, b, ctx, i), "");
  for (int i = 0; i < 6; i++) args[np + i] = LLVMGetParam(fn, (unsigned)i + 1);
  for (int i = 0; i < c->nlive; i++) args[np + 6 + i] = LLVMBuildLoad2(b, g->i64, slot(g, b, ctx, np + c->live[i]), "");
  LLVMBuildCall2(b, LLVMGlobalGetValueType(body), body, args, (unsigned)n, "");
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
  return fn;
}

/* The ctx array, filled where the gemm runs. */
static LLVMValueRef context(gemm_call *c) {
  emitter *em = c->em;
  int np = em->k->nparams;
  LLVMValueRef ctx = cpu_entry_alloca(em, LLVMArrayType2(em->g.i64, (uint64_t)(np + em->k->nvars)));
  cpu_cg *g = &em->g;
  for (int i = 0; i < np; i++) LLVMBuildStore(g->b, em->bufs[i], slot(g, g->b, ctx, i));
  for (int i = 0; i < c->nlive; i++) LLVMBuildStore(g->b, em->vars[c->live[i]], slot(g, g->b, ctx, np + c->live[i]));
  return ctx;
}

static LLVMValueRef i64c(emitter *em, int64_t v) { return LLVMConstInt(em->g.i64, (unsigned long long)v, 1); }

/* A size or stride (KG_*): a launch argument in a shape-generic kernel. */
static LLVMValueRef dim(emitter *em, const kstmt *s, int which) {
  const kexpr *b = s->gemm.bound[which];
  return b ? cpu_emit_expr(em, b) : i64c(em, ks_gemm_value(s, which));
}

/* A window's geometry as a constant of the kernel's module, or null. */
static LLVMValueRef window(emitter *em, const kstmt *s) {
  if (!s->gemm.win) return LLVMConstNull(em->g.ptr);
  LLVMValueRef v[KW_N];
  for (int i = 0; i < KW_N; i++) v[i] = i64c(em, s->gemm.win[i]);
  char name[80];
  snprintf(name, sizeof name, "%s.window%d", em->k->name, s->var);
  LLVMValueRef g = LLVMAddGlobal(em->g.mod, LLVMArrayType2(em->g.i64, KW_N), name);
  LLVMSetInitializer(g, LLVMConstArray2(em->g.i64, v, KW_N));
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  return g;
}

/* The driver's arguments: the KS_GEMM's m (or the thread's rows), n, kdim
 * and strides are values here (launch arguments in a shape-generic kernel,
 * constants otherwise). */
static void call_driver(gemm_call *c, LLVMValueRef epi, LLVMValueRef ctx) {
  emitter *em = c->em;
  const kstmt *s = c->s;
  cpu_gemm_driver d = cpu_gemm_driver_of(em->k, s);
  LLVMTypeRef ft = cpu_gemm_driver_type(&em->g);
  LLVMValueRef fn = LLVMGetNamedFunction(em->g.mod, d.name);
  if (!fn) fn = LLVMAddFunction(em->g.mod, d.name, ft);
  bool top = em->k->body == s;
  LLVMValueRef args[] = {
      cpu_elem_ptr(em, s->gemm.a_buf, cpu_emit_expr(em, s->gemm.a_off)), dim(em, s, KG_A_SI), dim(em, s, KG_A_SK),
      cpu_elem_ptr(em, s->gemm.b_buf, cpu_emit_expr(em, s->gemm.b_off)), dim(em, s, KG_B_SK), dim(em, s, KG_B_SN),
      top ? em->lo : i64c(em, 0), top ? em->hi : dim(em, s, KG_ROWS), dim(em, s, KG_COLS), dim(em, s, KG_DEPTH),
      epi, ctx, window(em, s)};
  LLVMBuildCall2(em->g.b, ft, fn, args, sizeof args / sizeof *args, "");
}

void cpu_emit_gemm(emitter *em, const kstmt *s) {
  gemm_call c = {.em = em, .s = s, .live = em->live};
  for (int v = 0; v < em->k->nvars; v++)
    if (em->vars[v]) c.live[c.nlive++] = v;
  snprintf(c.name, sizeof c.name, "%s.epilogue%d", em->k->name, s->var);
  LLVMValueRef epi = epilogue_callback(&c);
  call_driver(&c, epi, context(&c));
}
