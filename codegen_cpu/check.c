/* check.c: kernel checks (KS_CHECK, ir/kernel.h) on the CPU. In a loop a
 * check is branch-free, so the loop still vectorizes: each iteration ORs its
 * failure into a flag, and only a set flag after the loop re-scans its range
 * with the branching form, which records the first failure as it always has. */
#include "codegen_cpu/cpu_impl.h"

/* if (fail) { if (cmpxchg(slot[KC_CODE], 0, code) succeeded) slot[site,
 * pos, value] = ...; }: the branch is marked unlikely and the failing path
 * stays out of the loop's way. The operands are emitted before the branch
 * so they dominate what follows. */
void cpu_emit_check(emitter *em, const kstmt *s) {
  cpu_cg *g = &em->g;
  LLVMBuilderRef b = g->b;
  LLVMValueRef fail = cpu_emit_expr(em, s->value), pos = cpu_emit_expr(em, s->index);
  LLVMValueRef what = cpu_emit_expr(em, s->check.what);
  fail = cpu_intrin(g, b, "llvm.expect", &g->i1, 1, (LLVMValueRef[]){fail, LLVMConstInt(g->i1, 0, 0)}, 2);
  LLVMBasicBlockRef bad = LLVMAppendBasicBlockInContext(g->ctx, em->fn, "check.fail");
  LLVMBasicBlockRef won = LLVMAppendBasicBlockInContext(g->ctx, em->fn, "check.first");
  LLVMBasicBlockRef cont = LLVMAppendBasicBlockInContext(g->ctx, em->fn, "check.ok");
  LLVMBuildCondBr(b, fail, bad, cont);
  LLVMPositionBuilderAtEnd(b, bad);
  LLVMValueRef slot = em->bufs[k_status_param(em->k)];
  LLVMValueRef x = LLVMBuildAtomicCmpXchg(b, slot, LLVMConstInt(g->i64, 0, 0),
                                          LLVMConstInt(g->i64, (unsigned long long)s->check.code, 0),
                                          LLVMAtomicOrderingMonotonic, LLVMAtomicOrderingMonotonic, 0);
  LLVMBuildCondBr(b, LLVMBuildExtractValue(b, x, 1, ""), won, cont);
  LLVMPositionBuilderAtEnd(b, won);
  LLVMValueRef words[] = {LLVMConstInt(g->i64, (unsigned long long)s->check.site, 0), pos, what};
  for (int w = KC_SITE; w <= KC_VALUE; w++) {
    LLVMValueRef i = LLVMConstInt(g->i64, (unsigned long long)w, 0);
    LLVMBuildStore(b, words[w - KC_SITE], LLVMBuildInBoundsGEP2(b, g->i64, slot, &i, 1, ""));
  }
  LLVMBuildBr(b, cont);
  LLVMPositionBuilderAtEnd(b, cont);
}

/* kx_rewrite as a visitor: clears *ok at an expression a re-scan after the
 * loop could not recompute (an accumulator, which the loop may change, or a
 * buffer the kernel writes); replaces nothing. */
typedef struct {
  const kernel *k;
  bool ok;
} rescan_probe;

static kexpr *probe_expr(void *ctx, kexpr *x) {
  rescan_probe *p = ctx;
  if (x->kind == KX_ACC || (x->kind == KX_LOAD && p->k->params[x->buf].output)) p->ok = false;
  return NULL;
}

/* The checks directly in loop's body can be deferred to a re-scan: there is
 * one, and each reads only what is the same after the loop. */
static bool deferrable(emitter *em, const kstmt *loop) {
  rescan_probe p = {em->k, true};
  bool any = false;
  for (const kstmt *s = loop->body; s && p.ok; s = s->next) {
    if (s->kind != KS_CHECK) continue;
    any = true;
    kx_rewrite(em->k, s->value, probe_expr, &p);
    kx_rewrite(em->k, s->index, probe_expr, &p);
    kx_rewrite(em->k, s->check.what, probe_expr, &p);
  }
  return any && p.ok;
}

cpu_check_scope cpu_check_enter(emitter *em, const kstmt *loop) {
  cpu_check_scope outer = {em->check_body, em->check_flag};
  em->check_body = NULL;
  if (!deferrable(em, loop)) return outer;
  em->check_body = loop->body;
  em->check_flag = cpu_entry_alloca(em, em->g.i8);
  LLVMBuildStore(em->g.b, LLVMConstInt(em->g.i8, 0, 0), em->check_flag);
  return outer;
}

/* flag |= fail, as i8 (an integer OR reduction the vectorizer knows). */
void cpu_emit_check_deferred(emitter *em, const kstmt *s) {
  cpu_cg *g = &em->g;
  LLVMValueRef fail = LLVMBuildZExt(g->b, cpu_emit_expr(em, s->value), g->i8, "");
  LLVMValueRef flag = LLVMBuildLoad2(g->b, g->i8, em->check_flag, "");
  LLVMBuildStore(g->b, LLVMBuildOr(g->b, flag, fail, ""), em->check_flag);
}

/* After the loop: if its flag is set, for v in start..end run the loop's
 * checks in order, branching (a scalar loop: it runs only on a failure). */
static void rescan(emitter *em, const kstmt *loop, LLVMValueRef start, LLVMValueRef end) {
  cpu_cg *g = &em->g;
  LLVMValueRef set = LLVMBuildICmp(g->b, LLVMIntNE, LLVMBuildLoad2(g->b, g->i8, em->check_flag, ""),
                                   LLVMConstInt(g->i8, 0, 0), "");
  set = cpu_intrin(g, g->b, "llvm.expect", &g->i1, 1, (LLVMValueRef[]){set, LLVMConstInt(g->i1, 0, 0)}, 2);
  LLVMBasicBlockRef scan = LLVMAppendBasicBlockInContext(g->ctx, em->fn, "check.rescan");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, em->fn, "check.done");
  LLVMBuildCondBr(g->b, set, scan, done);
  LLVMPositionBuilderAtEnd(g->b, scan);
  cpu_loop l;
  em->vars[loop->var] = cpu_loop_open(g, em->fn, &l, start, end, LLVMConstInt(g->i64, 1, 0));
  int mark = cpu_emit_mark(em);
  for (const kstmt *s = loop->body; s; s = s->next)
    if (s->kind == KS_CHECK) cpu_emit_check(em, s);
  cpu_emit_forget(em, mark);
  em->vars[loop->var] = NULL;
  cpu_loop_scalar(g, cpu_loop_close(g, &l));
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, done);
}

void cpu_check_leave(emitter *em, const kstmt *loop, cpu_check_scope outer, LLVMValueRef start,
                     LLVMValueRef end) {
  if (em->check_body == loop->body) rescan(em, loop, start, end);
  em->check_body = outer.body;
  em->check_flag = outer.flag;
}
