/* hostplan.c: see hostplan.h. */
#include "util/hostplan.h"
#include "runtime/rt.h"
#include "runtime/rt_internal.h"

#include <check.h>
#include <stdlib.h>

/* Through the runtime's kernel cache, so a kernel planned twice compiles once. */
void tu_run_cpu(kernel *k, void *const *bufs) {
  ir_str key = {0};
  k_key(k, &key);
  rt_origin origin;
  rt_kernel *code = rt_kernel_get(k, &key, 0, &origin);
  ir_str_free(&key);
  ck_assert_msg(code != NULL, "rt_kernel_get: %s", kiln_last_error());
  int64_t cost, extent = k_parallel(k, &cost);
  if (k->work > 0) rt_kernel_fn(code)(bufs, 0, extent ? extent : 1);
  rt_kernel_release(code);
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
      else if (kp->status) bufs[q] = store(st, NULL, sizeof(int64_t) * KC_SLOT_WORDS);
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
