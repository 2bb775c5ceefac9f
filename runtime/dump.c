/* dump.c: kiln_dump_graph: a tensor's pending DAG as the passes leave it for
 * kiln_realize, with the kernels realize would launch, as text or as a
 * Graphviz digraph with one cluster per kernel, so a user sees what fused.
 * It plans (runtime/inspect.c) and never compiles or executes anything. */
#include "runtime/inspect.h"

#include <errno.h>
#include <string.h>

/* "kernel 0 k_7ad49c10f7063e70 (64,256)": the name is the one KILN_DEBUG=1
 * prints when the kernel runs; "copy 1 to cuda:0 (64,256)" for a transfer.
 * The number is the launch position. */
static void kernel_title(ir_str *b, const rt_graph_plan *p, int pos) {
  const pass_group *pg = &p->g.groups[p->g.order[pos]];
  const kernel *k = p->kernels[pos].k;
  kiln_device dev = pg->outs[0]->device;
  if (k) ir_str_printf(b, "kernel %d %s ", pos, k->name);
  else if (dev.type == KILN_CPU) ir_str_printf(b, "copy %d to cpu ", pos);
  else ir_str_printf(b, "copy %d to cuda:%d ", pos, dev.index);
  ir_str_shape(b, pg->ndim, pg->shape);
}

/* ---- text ----------------------------------------------------------------- */
/* The nodes of group gi that it stores (stored) or inlines (!stored). */
static void list_nodes(ir_str *b, const pass_graph *g, int gi, bool stored) {
  int listed = 0;
  for (int i = 0; i < g->n; i++)
    if (g->group_of[i] == gi && g->materialized[i] == stored) {
      ir_str_printf(b, " %%%d", i);
      listed++;
    }
  if (!listed) ir_str_printf(b, " nothing");
}

/* One line per kernel after the graph: the nodes it stores, then the ones
 * inlined into it (computed in its loop, never written to memory). */
static void write_text(ir_str *b, const rt_graph_plan *p) {
  const pass_graph *g = &p->g;
  ir_graph_print(b, g->n, g->topo);
  for (int pos = 0; pos < g->ngroups; pos++) {
    kernel_title(b, p, pos);
    ir_str_printf(b, ": stores");
    list_nodes(b, g, g->order[pos], true);
    ir_str_printf(b, "; inlines");
    list_nodes(b, g, g->order[pos], false);
    ir_str_printf(b, "\n");
  }
}

/* ---- DOT ------------------------------------------------------------------ */
/* s as the inside of a DOT string: quotes and backslashes escaped (a file
 * name may hold either), newlines as DOT's centred line break. */
static void dot_escaped(ir_str *b, const char *s) {
  for (; *s; s++) {
    if (*s == '\n') ir_str_printf(b, "\\n");
    else if (*s == '"' || *s == '\\') ir_str_printf(b, "\\%c", *s);
    else ir_str_append(b, s, 1);
  }
}

/* "%5 add f32(64,256)" and the user's file:line below it. */
static void dot_node(ir_str *b, const char *indent, int i, const ir_node *n, bool stored) {
  ir_str label = {0};
  ir_str_printf(&label, "%%%d %s %s", i, ir_ops[n->op].name, ir_dtypes[n->dtype].short_name);
  ir_str_shape(&label, n->ndim, n->shape);
  if (n->file) ir_str_printf(&label, "\n%s:%d", n->file, n->line);
  ir_str_printf(b, "%sn%d [label=\"", indent, i);
  dot_escaped(b, label.s);
  /* leaves (buffers, sources) are ellipses; what a kernel stores is bold */
  bool leaf = ir_op_has(n->op, IR_SRC);
  ir_str_printf(b, "\"%s%s];\n", leaf ? ", shape=ellipse" : "", stored ? ", style=bold" : "");
  ir_str_free(&label);
}

static void write_dot(ir_str *b, const rt_graph_plan *p) {
  const pass_graph *g = &p->g;
  ir_str_printf(b, "digraph kiln {\n  node [shape=box, fontname=\"monospace\"];\n");
  for (int pos = 0; pos < g->ngroups; pos++) {
    ir_str title = {0};
    kernel_title(&title, p, pos);
    ir_str_printf(b, "  subgraph cluster_%d {\n    label=\"", pos);
    dot_escaped(b, title.s);
    ir_str_printf(b, "\";\n    style=rounded;\n");
    ir_str_free(&title);
    for (int i = 0; i < g->n; i++)
      if (g->group_of[i] == g->order[pos]) dot_node(b, "    ", i, g->topo[i], g->materialized[i]);
    ir_str_printf(b, "  }\n");
  }
  for (int i = 0; i < g->n; i++)
    if (g->group_of[i] < 0) dot_node(b, "  ", i, g->topo[i], false);
  /* topo holds every source of its nodes (it is a collection closed under
   * sources, and the rewrites only point at nodes already in it), so the
   * scratch index names each edge's ends */
  for (int i = 0; i < g->n; i++) g->topo[i]->scratch = i;
  for (int i = 0; i < g->n; i++)
    for (int s = 0; s < g->topo[i]->nsrc; s++) ir_str_printf(b, "  n%d -> n%d;\n", g->topo[i]->src[s]->scratch, i);
  ir_str_printf(b, "}\n");
}

/* ---- entry point ---------------------------------------------------------- */
static kiln_status check_args(const char *f, int l, kiln_tensor *t, FILE *out, kiln_graph_format fmt) {
  if (!t || !out) {
    ir_error_setf("%s:%d: dump_graph: %s is NULL", f, l, t ? "output FILE" : "tensor");
    return KILN_ERR_ARG;
  }
  if (fmt != KILN_FMT_TEXT && fmt != KILN_FMT_DOT) {
    ir_error_setf("%s:%d: dump_graph: unknown format %d (KILN_FMT_TEXT or KILN_FMT_DOT)", f, l, (int)fmt);
    return KILN_ERR_ARG;
  }
  if (!ir_node_live(t)) {
    ir_error_setf("%s:%d: dump_graph: the tensor is a handle that was already released", f, l);
    return KILN_ERR_ARG;
  }
  if (t->status != KILN_OK) {
    ir_error_setf("%s:%d: dump_graph: the tensor is an error: %s", f, l, ir_node_msg(t));
    return t->status;
  }
  return KILN_OK;
}

kiln_status kiln_dump_graph_at(const char *f, int l, kiln_tensor *t, FILE *out, kiln_graph_format fmt) {
  kiln_status st = check_args(f, l, t, out, fmt);
  if (st != KILN_OK) return st;
  rt_graph_plan p;
  st = rt_plan_graph(-1, 1, &t, &p);
  if (st == KILN_OK) {
    ir_str b = {0};
    (fmt == KILN_FMT_DOT ? write_dot : write_text)(&b, &p);
    if (fwrite(b.s, 1, b.len, out) != b.len || fflush(out) != 0) {
      ir_error_setf("%s:%d: dump_graph: writing the graph failed: %s", f, l, strerror(errno));
      st = KILN_ERR_ARG;
    }
    ir_str_free(&b);
  }
  rt_graph_plan_free(&p);
  return st;
}
