/* pipeline.c: the one list of passes, in order, each with a dump hook and a
 * name that KILN_PASSES can switch off (QBE's func(), Halide's lower_impl).
 * Graph: verify -> simplify -> cse -> split_reduce -> fold_views -> gemm_operands -> dce -> fuse
 * -> schedule.
 * Kernel: lower -> stash. */
#include "pass.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name;
  bool switchable;      /* schedule cannot be skipped: launch order needs it */
  kiln_status (*run)(pass_graph *g, bool on);
} graph_pass;

static kiln_status run_verify(pass_graph *g, bool on) { return on ? pass_verify(g) : KILN_OK; }
static kiln_status run_simplify(pass_graph *g, bool on) { if (on) pass_simplify(g); return KILN_OK; }
static kiln_status run_cse(pass_graph *g, bool on) { if (on) pass_cse(g); return KILN_OK; }
static kiln_status run_fold_views(pass_graph *g, bool on) { if (on) pass_fold_views(g); return KILN_OK; }
static kiln_status run_split_reduce(pass_graph *g, bool on) { if (on) pass_split_reduce(g); return KILN_OK; }
static kiln_status run_split_scan(pass_graph *g, bool on) { if (on) pass_split_scan(g); return KILN_OK; }
static kiln_status run_gemm_operands(pass_graph *g, bool on) { if (on) pass_gemm_operands(g); return KILN_OK; }
static kiln_status run_fuse(pass_graph *g, bool on) { pass_fuse(g, on ? FUSE_ALL : FUSE_OFF); return KILN_OK; }

/* dce: the nodes the rewrites above left unreachable from the targets are
 * dropped by collecting the graph again. */
static kiln_status run_dce(pass_graph *g, bool on) {
  if (!on) return KILN_OK;
  free(g->topo);
  g->n = ir_graph_collect(g->ntargets, g->targets, &g->topo);
  if (g->n < 0) g->n = 0, g->oom = true;
  return KILN_OK;
}
/* Merging two kernels that share a node can make each wait on the other
 * through a third; then the graph is partitioned again with producers still
 * in their consumers' kernels but no kernels merged side by side, which has
 * an order (a kernel reads only other kernels' roots); one kernel per
 * computing node stays the last resort. A transformer block's tied logits
 * made the whole block fall back to that last resort: 57 kernels instead of
 * about 20. */
static kiln_status run_schedule(pass_graph *g, bool on) {
  (void)on;
  if (pass_schedule(g) || g->oom) return KILN_OK;
  pass_fuse(g, FUSE_INLINE);
  if (pass_schedule(g) || g->oom) return KILN_OK;
  pass_fuse(g, FUSE_OFF);
  IR_ASSERT(pass_schedule(g) || g->oom);
  return KILN_OK;
}

static const graph_pass graph_passes[] = {
  {"verify", true, run_verify},
  {"simplify", true, run_simplify},
  {"cse", true, run_cse},
  {"split_reduce", true, run_split_reduce},
  {"split_scan", true, run_split_scan},
  {"fold_views", true, run_fold_views},
  {"gemm_operands", true, run_gemm_operands},
  {"dce", true, run_dce},
  {"fuse", true, run_fuse},
  {"schedule", false, run_schedule},
};

int pass_target(const pass_graph *g, const ir_node *n) {
  return g->target >= 0 ? g->target : (int)n->device.type;
}

void pass_rewrite_each(pass_graph *g, bool (*rewrite)(pass_graph *g, ir_node *n)) {
  bool changed = false;
  for (int i = 0; i < g->n && !g->oom; i++) changed |= rewrite(g, g->topo[i]);
  if (!changed) return;
  free(g->topo);  /* the new nodes take their place in topological order */
  g->n = ir_graph_collect(g->ntargets, g->targets, &g->topo);
  if (g->n < 0) g->n = 0, g->oom = true;
}

void pass_hold(pass_graph *g, ir_node *n) {
  ir_node **c = ir_realloc(g->created, sizeof *c * (size_t)(g->ncreated + 1));
  if (!c) {
    ir_node_release(n);
    g->oom = true;
    return;
  }
  g->created = c;
  g->created[g->ncreated++] = n;
}

void pass_graph_release(pass_graph *g) {
  for (int i = 0; i < g->ncreated; i++) ir_node_release(g->created[i]);
  free(g->created);
  g->created = NULL;
  g->ncreated = 0;
  ir_ptrmap_free(&g->pinned);
}

bool pass_enabled(const pass_config *cfg, const char *name) {
  if (!cfg->off) return true;
  size_t n = strlen(name);
  for (const char *p = cfg->off; (p = strstr(p, name)); p += n) {
    bool starts = p > cfg->off && p[-1] == '-';
    bool ends = p[n] == '\0' || p[n] == ',';
    if (starts && ends) return false;
  }
  return true;
}

static const char *const kernel_passes[] = {"stash"};

bool pass_list_valid(const char *list, char *bad, size_t n, ir_str *names) {
  const char *known[sizeof graph_passes / sizeof *graph_passes + 1];
  int nk = 0;
  for (size_t i = 0; i < sizeof graph_passes / sizeof *graph_passes; i++)
    if (graph_passes[i].switchable) known[nk++] = graph_passes[i].name;
  known[nk++] = kernel_passes[0];
  for (int i = 0; i < nk; i++) ir_str_printf(names, i ? ",%s" : "%s", known[i]);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    bool ok = false;
    for (int i = 0; i < nk && !ok; i++) ok = p[0] == '-' && len == strlen(known[i]) + 1 && !strncmp(p + 1, known[i], len - 1);
    if (!ok) {
      snprintf(bad, n, "%.*s", (int)len, p);
      return false;
    }
    p += len + (p[len] == ',');
  }
  return true;
}

static void dump_graph(const pass_graph *g, const char *after) {
  ir_str b = {0};
  ir_graph_print(&b, g->n, g->topo);
  for (int gi = 0; g->order && gi < g->ngroups; gi++) {
    const pass_group *pg = &g->groups[g->order[gi]];
    ir_str_printf(&b, "kernel %d:", gi);
    for (int o = 0; o < pg->nout; o++) ir_str_printf(&b, " %%%d", pg->outs[o]->scratch);
    ir_str_printf(&b, "\n");
  }
  fprintf(stderr, "kiln: graph after %s\n%s", after, b.s ? b.s : "");
  ir_str_free(&b);
}

kiln_status pass_run_graph(pass_graph *g, const pass_config *cfg) {
  g->target = cfg->target;
  g->symbolic_ok = cfg->symbolic_ok;
  for (size_t i = 0; i < sizeof graph_passes / sizeof *graph_passes; i++) {
    const graph_pass *p = &graph_passes[i];
    bool on = !p->switchable || pass_enabled(cfg, p->name);
    kiln_status st = p->run(g, on);
    if (st == KILN_OK && g->oom) st = ir_error_oom(g->targets[0]);
    if (st != KILN_OK) return st;
    if (cfg->debug >= 4) dump_graph(g, on ? p->name : "(skipped)");
  }
  return KILN_OK;
}

static void dump_kernel(kernel *k, const char *after) {
  ir_str b = {0};
  k_print(&b, k);
  fprintf(stderr, "kiln: kernel after %s\n%s", after, b.s ? b.s : "");
  ir_str_free(&b);
}

/* stash: CPU kernels only (stash.c says why). */
kernel *pass_run_kernel(pass_graph *g, int gi, ir_node **inputs, int *ninputs, const pass_config *cfg) {
  kernel *k = pass_lower(g, gi, inputs, ninputs, cfg->generic);
  if (!k) return NULL;
  if (cfg->debug >= 4) dump_kernel(k, "lower");
  bool cpu = pass_target(g, g->groups[gi].outs[0]) == KILN_CPU;
  bool stash = cpu && pass_enabled(cfg, kernel_passes[0]);
  if (stash) pass_stash(k);
  if (k->oom) {
    k_free(k);
    return NULL;
  }
  if (cfg->debug >= 4) dump_kernel(k, stash ? "stash" : "(skipped)");
  return k;
}
