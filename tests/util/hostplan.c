/* hostplan.c: see hostplan.h. */
#include "util/hostplan.h"
#include "runtime/rt.h"

#include <check.h>
#include <stdlib.h>

static cpu_jit *jit;  /* one per test process, reachable until exit */

void tu_run_cpu(kernel *k, void *const *bufs) {
  char *err = NULL;
  if (!jit) jit = cpu_jit_new(&err);
  ck_assert_msg(jit != NULL, "cpu_jit_new: %s", err ? err : "");
  cpu_kernel_fn fn = cpu_jit_compile(jit, k, NULL, &err);
  ck_assert_msg(fn != NULL, "cpu_jit_compile: %s", err ? err : "");
  int64_t cost, extent = k_parallel(k, &cost);
  if (k->work > 0) fn(bufs, 0, extent ? extent : 1);
}

bool tu_has_gemm(const kernel *k) {
  const kstmt *s = k->body;
  while (s && s->kind == KS_LOOP) s = s->body;
  return s && s->kind == KS_GEMM;
}

void *tu_stored_data(const tu_stored *st, ir_node *n) {
  if (n->op == IR_BUFFER) return n->buf->data;
  for (int i = 0; i < st->n; i++)
    if (st->node[i] == n) return st->data[i];
  ck_abort_msg("node %%%d is read before it is stored", n->scratch);
  return NULL;
}

static void *store(tu_stored *st, ir_node *n, size_t bytes) {
  if (st->n == st->cap) {
    st->cap = st->cap ? 2 * st->cap : 16;
    st->node = realloc(st->node, sizeof *st->node * (size_t)st->cap);
    st->data = realloc(st->data, sizeof *st->data * (size_t)st->cap);
    ck_assert(st->node && st->data);
  }
  st->node[st->n] = n;
  return st->data[st->n++] = calloc(1, bytes ? bytes : 1);
}

void tu_run_plan(rt_graph_plan *p, tu_stored *st, tu_kernel_hook hook, void *ctx) {
  for (int i = 0; i < p->g.ngroups; i++) {
    rt_planned *pl = &p->kernels[i];
    const pass_group *pg = &p->g.groups[p->g.order[i]];
    kernel *k = pl->k;
    ck_assert_msg(k != NULL, "kernel %d: a transfer, which the host cannot run", i);
    void **bufs = calloc((size_t)k->nparams + 1, sizeof *bufs);
    ck_assert(bufs);
    for (int q = 0, o = 0, ii = 0; q < k->nparams; q++) {
      const kparam *kp = &k->params[q];
      if (kp->args) bufs[q] = k->args;
      else if (kp->output) bufs[q] = store(st, pg->outs[o++], (size_t)kp->numel * ir_dtypes[kp->dtype].size);
      else bufs[q] = tu_stored_data(st, pl->inputs[ii++]);
    }
    if (!hook || !hook(k, bufs, ctx)) tu_run_cpu(k, bufs);
    free(bufs);
  }
}

void tu_stored_free(tu_stored *st) {
  for (int i = 0; i < st->n; i++) free(st->data[i]);
  free(st->node);
  free(st->data);
  *st = (tu_stored){0};
}
