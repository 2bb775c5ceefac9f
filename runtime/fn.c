/* fn.c: compiled functions. kiln_compile plans a graph over placeholders once
 * (passes, fusion, lowering, compiling: exec.c); kiln_fn_run checks the
 * arguments, binds their buffers to the executable's slots and launches it:
 * no graph is built, hashed or passed over per call. Tensors the graph
 * captured (weights) are realized at compile time and become constants. */
#include "rt.h"
#include "rt_internal.h"
#include "frontend/frontend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  kiln_dtype dtype;
  kiln_device device;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
  bool in_place;            /* an output: a given tensor is written in place (writable), decided when planned */
} fn_value;

/* The function planned for one size of its dynamic dims (0: it has none). */
typedef struct {
  int64_t size;
  rt_exec *exec;
  fn_value *in, *out;       /* the shapes at this size */
  ir_node **leaves;         /* retained: placeholders of these shapes, then the constants */
} fn_variant;

struct kiln_fn {
  char where[128];          /* "main.c:12": where kiln_compile was called */
  int nin, nout;            /* nout: the caller's outputs, then nassign assigned values */
  int nassign;              /* kiln_assign of values over the inputs: performed by every run */
  ir_node **assign_to;      /* retained: where each assigned value goes */
  int ntmpl;
  ir_node **tmpl;           /* retained: the graph as built (sources first) */
  int (*src_pos)[IR_MAX_SRC];        /* per tmpl node: its sources' positions in tmpl */
  int *out_node;            /* per output: its position in tmpl */
  int *leaf_pos;            /* per leaf: its position in tmpl, -1 when no output reads it */
  int nleaves;              /* the placeholders (nin), then the constants */
  ir_node **leaves;         /* retained: of tmpl */
  bool dynamic;             /* a placeholder has a -1 dim: planned per size */
  pthread_mutex_t mu;       /* guards the variants array (each variant, once added, never moves or changes) */
  int nvariants;
  fn_variant **variants;
  atomic_uint_fast64_t runs;
};

static void value_of(fn_value *v, const ir_node *n) {
  *v = (fn_value){n->dtype, n->device, n->ndim, {0}, false};
  memcpy(v->shape, n->shape, sizeof n->shape);
}

static void release_all(int n, ir_node **v) {
  for (int i = 0; v && i < n; i++) ir_node_release(v[i]);
  free(v);
}

static void variant_free(const kiln_fn *fn, fn_variant *v) {
  if (!v) return;
  rt_exec_free(v->exec);
  release_all(v->leaves ? fn->nleaves : 0, v->leaves);
  free(v->in);
  free(v->out);
  free(v);
}

void kiln_fn_free(kiln_fn *fn) {
  if (!fn) return;
  for (int i = 0; i < fn->nvariants; i++) variant_free(fn, fn->variants[i]);
  free(fn->variants);
  release_all(fn->nassign, fn->assign_to);
  release_all(fn->nleaves, fn->leaves);
  release_all(fn->ntmpl, fn->tmpl);
  free(fn->src_pos);
  free(fn->out_node);
  free(fn->leaf_pos);
  pthread_mutex_destroy(&fn->mu);
  free(fn);
}

/* Planning a function ran out of memory: named by where it was compiled. */
static kiln_status compile_oom(const kiln_fn *fn) {
  ir_error_setf("%s: compile: out of memory", fn->where);
  return KILN_ERR_MEMORY;
}

/* NULL, with "file:line: compile: " + fmt (one int argument) as the last error. */
static kiln_fn *fail(const char *f, int l, const char *fmt, int a) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, a);
  ir_error_setf("%s:%d: compile: %s", f, l, msg);
  return NULL;
}

/* Inputs: distinct placeholders; outputs: tensors without errors. */
static kiln_fn *check_compile(const char *f, int l, int nin, kiln_tensor *const *in, int nout, kiln_tensor *const *out) {
  if (nin > 0 && !in) return fail(f, l, "the list of inputs is NULL with a count of %d", nin);
  if (nout > 0 && !out) return fail(f, l, "the list of outputs is NULL with a count of %d", nout);
  if (nin < 0) return fail(f, l, "invalid list of %d inputs", nin);
  if (nout <= 0) return fail(f, l, "invalid list of %d outputs (a function has at least one)", nout);
  for (int i = 0; i < nin; i++) {
    if (in[i] && in[i]->status != KILN_OK) {
      ir_error_set(ir_node_msg(in[i]));   /* errors are sticky: a placeholder that could not be made */
      return NULL;
    }
    if (!in[i] || in[i]->op != IR_BUFFER || !in[i]->symbolic)
      return fail(f, l, "input %d is not a placeholder (make inputs with kiln_placeholder)", i);
    for (int j = 0; j < i; j++)
      if (in[j] == in[i]) return fail(f, l, "input %d is given twice", i);
  }
  for (int o = 0; o < nout; o++) {
    if (!out[o]) return fail(f, l, "output %d is NULL", o);
    ir_node *e = ir_graph_find_error(1, &out[o]);
    if (e) {
      ir_error_set(ir_node_msg(e));   /* the op that failed, where the user built it */
      return NULL;
    }
  }
  kiln_fn *fn = ir_calloc(1, sizeof(kiln_fn));
  if (!fn) {
    ir_error_setf("%s:%d: compile: out of memory", f, l);
    return NULL;
  }
  pthread_mutex_init(&fn->mu, NULL);
  return fn;
}

static bool is_output(const ir_node *n, int nout, kiln_tensor *const *out) {
  for (int o = 0; o < nout; o++)
    if (out[o] == n) return true;
  return false;
}

static bool is_dynamic(int64_t v) { return v && v % KILN_DYN == 0; }

/* Whether n's value changes from call to call: it reads a placeholder, or
 * its shape follows the dynamic size (a bias expanded to the batch). */
static bool per_call(const ir_node *n) {
  bool dyn = n->symbolic;
  for (int d = 0; d < n->ndim && !dyn; d++) dyn = is_dynamic(n->shape[d]);
  return dyn;
}

/* What does not change per call is a constant of the function: computed
 * once, now, so a call never recomputes a weight. What reads a tensor that
 * assignments overwrite (a parameter, an optimizer's state) changes from
 * call to call too. varies is per topo node (scratch: its position). */
static bool varies(const ir_node *t, const bool *v) {
  return t->op == IR_BUFFER ? t->assignable || per_call(t) : v[t->scratch];
}

static kiln_status realize_constants(int nout, kiln_tensor *const *out) {
  ir_node **topo, **c;
  int n = ir_graph_collect(nout, out, &topo), nc = 0;
  c = n >= 0 ? ir_malloc(sizeof *c * ((size_t)(IR_MAX_SRC * n) + 1)) : NULL;
  bool *v = c ? ir_calloc((size_t)n + 1, sizeof *v) : NULL;
  if (!v) {
    free(c);
    free(topo);
    return ir_error_oom(out[0]);
  }
  for (int i = 0; i < n; i++) {
    ir_node *t = topo[i];
    if (t->op == IR_BUFFER) continue;
    t->scratch = i;
    v[i] = per_call(t);
    for (int s = 0; s < t->nsrc; s++) v[i] |= varies(t->src[s], v);
  }
  for (int i = 0; i < n; i++) {
    const ir_node *t = topo[i];
    for (int s = 0; varies(t, v) && s < t->nsrc; s++)
      if (!varies(t->src[s], v) && t->src[s]->op != IR_BUFFER) c[nc++] = t->src[s];
    if (!varies(t, v) && t->op != IR_BUFFER && is_output(t, nout, out)) c[nc++] = topo[i];
  }
  kiln_status st = nc ? rt_realize(nc, c) : KILN_OK;
  free(v);
  free(c);
  free(topo);
  return st;
}

/* A pending tensor built on an assignable one reads it through a snapshot
 * (ir_node_new_taking), which the function's own assignments must not
 * leave behind: every leaf over a snapshot not yet preserved is replaced,
 * in the edges that read it, by a leaf over the tensor's storage itself. */
static kiln_status unsnap(int nout, kiln_tensor *const *out) {
  ir_node **topo;
  int n = ir_graph_collect(nout, out, &topo);
  if (n < 0) return ir_error_oom(out[0]);
  IR_PTRMAP_ON_STACK(repl);
  ir_node **made = ir_calloc((size_t)n + 1, sizeof *made);
  kiln_status st = made ? KILN_OK : ir_error_oom(out[0]);
  for (int i = 0; st == KILN_OK && i < n; i++) {
    ir_node *t = topo[i];
    if (t->op != IR_BUFFER || !t->buf) continue;
    rt_buffer *origin = rt_buffer_shared(t->buf);
    if (origin != t->buf && (made[i] = ir_node_alias(t))) {
      rt_buffer_release(made[i]->buf);
      made[i]->buf = origin;
      made[i]->assignable = true;
      if (!ir_ptrmap_put(&repl, t, i)) st = ir_error_oom(out[0]);
    } else {
      rt_buffer_release(origin);
      if (origin != t->buf) st = ir_error_oom(out[0]);
    }
  }
  for (int i = 0; st == KILN_OK && i < n; i++)
    for (int s = 0; topo[i]->op != IR_BUFFER && s < topo[i]->nsrc; s++) {
      int j = ir_ptrmap_get(&repl, topo[i]->src[s]);
      if (j >= 0) ir_node_set_src(topo[i], s, made[j]);
    }
  for (int i = 0; made && i < n; i++) ir_node_release(made[i]);
  ir_ptrmap_free(&repl);
  free(made);
  free(topo);
  return st;
}

static kiln_status take_leaves(kiln_fn *fn, int nin, kiln_tensor *const *in, int n, ir_node *const *topo) {
  fn->leaves = ir_malloc(sizeof *fn->leaves * ((size_t)(nin + n) + 1));
  if (!fn->leaves) return compile_oom(fn);
  for (int i = 0; i < nin; i++) ir_node_retain(fn->leaves[fn->nleaves++] = in[i]);
  for (int i = 0; i < n; i++) {
    if (topo[i]->op != IR_BUFFER) continue;
    bool param = false;
    for (int j = 0; j < nin; j++) param |= topo[i] == in[j];
    if (param) continue;
    if (topo[i]->symbolic) {
      ir_error_setf("%s:%d: compile: an output reads the placeholder made here, which is not an input",
                    topo[i]->file ? topo[i]->file : "?", topo[i]->line);
      return KILN_ERR_ARG;
    }
    ir_node_retain(fn->leaves[fn->nleaves++] = topo[i]);
  }
  return KILN_OK;
}

/* ---- dynamic sizes ------------------------------------------------------------ *
 * A dynamic dim reads as KILN_DYN while the graph is built, and so does every
 * size derived from it by a multiple (flattening (KILN_DYN, 4) gives
 * 4 * KILN_DYN). A variant copies the graph with the shapes recomputed from
 * its sources at the call's size: explicit sizes (expand, reshape, sources)
 * have their KILN_DYN factors replaced, every other op's shape follows from
 * its sources' by the op's own rule. */
static int64_t at_size(int64_t v, int64_t size) {
  int64_t mult = 1;
  while (size && v && v % KILN_DYN == 0) v /= KILN_DYN, mult *= size;
  return v * mult;
}

/* The shape of o's copy from its sources' copies; NULL, or why not. */
static const char *variant_shape(const ir_node *o, ir_node *const *src, int64_t size, int64_t *shape) {
  const ir_node *s0 = o->nsrc ? src[0] : NULL;
  for (int d = 0; d < o->ndim; d++) shape[d] = at_size(o->shape[d], size);
  switch (o->op) {
  case IR_EXPAND:
    for (int d = 0, lead = o->ndim - s0->ndim; d < s0->ndim; d++)
      if (s0->shape[d] != 1) shape[lead + d] = s0->shape[d];
    return NULL;
  case IR_RESHAPE:
    return ir_numel(o->ndim, shape) == ir_numel(s0->ndim, s0->shape) ? NULL : "a reshape that does not follow the size";
  case IR_PERMUTE:
    for (int d = 0; d < o->ndim; d++) shape[d] = s0->shape[o->attr.perm[d]];
    return NULL;
  case IR_SLICE: case IR_SELECT:
    if (is_dynamic(o->src[0]->shape[o->attr.dim])) return "indexing along a dynamic dim";
    for (int d = 0, j = 0; d < s0->ndim; d++)
      if (o->op == IR_SLICE || d != o->attr.dim) shape[j++] = o->op == IR_SLICE && d == o->attr.dim ? o->shape[d] : s0->shape[d];
    return NULL;
  case IR_PAD:
    for (int d = 0; d < o->ndim; d++) shape[d] = s0->shape[d] + o->attr.pad[d][0] + o->attr.pad[d][1];
    return NULL;
  case IR_CAT:
    memcpy(shape, s0->shape, sizeof(int64_t) * (size_t)o->ndim);
    shape[o->attr.dim] += src[1]->shape[o->attr.dim];
    return NULL;
  case IR_UNFOLD:   /* the window's geometry is fixed: so is the input it fits */
    for (int d = 0; d < s0->ndim; d++)
      if (is_dynamic(o->src[0]->shape[d])) return "a convolution over a dynamic shape";
    return NULL;
  case IR_GATHER:   /* the index's shape */
    memcpy(shape, src[1]->shape, sizeof(int64_t) * (size_t)o->ndim);
    return NULL;
  case IR_MATMUL:
    memcpy(shape, s0->shape, sizeof(int64_t) * (size_t)o->ndim);
    shape[o->ndim - 1] = src[1]->shape[o->ndim - 1];
    return NULL;
  case IR_ARANGE: case IR_LINSPACE: case IR_EYE:
    for (int d = 0; d < o->ndim; d++)
      if (is_dynamic(o->shape[d])) return "a range of a dynamic length";
    return NULL;
  default:
    if (ir_op_has(o->op, IR_SORTING)) {   /* keeps sort_k along its dim, which must be static */
      int d = 0;
      while (!(o->attr.axes >> d & 1)) d++;
      if (is_dynamic(o->src[0]->shape[d])) return "sorting along a dynamic dim";
      memcpy(shape, s0->shape, sizeof(int64_t) * (size_t)o->ndim);
      shape[d] = o->attr.sort_k;
    } else if (ir_op_has(o->op, IR_REDUCE))
      for (int d = 0; d < o->ndim; d++) shape[d] = o->attr.axes & (1u << d) ? 1 : s0->shape[d];
    else if (s0 && !ir_op_has(o->op, IR_SRC))
      memcpy(shape, s0->shape, sizeof(int64_t) * (size_t)o->ndim);   /* elementwise and transfers */
    return NULL;
  }
}

/* NULL when out of memory. */
static ir_node *stand_in(const ir_node *p, int ndim, const int64_t *shape) {
  rt_buffer *b = rt_buffer_borrow(NULL, (size_t)ir_numel(ndim, shape) * ir_dtypes[p->dtype].size);
  ir_node *n = b ? ir_node_new(IR_BUFFER, p->dtype, ndim, shape, 0, NULL, p->file, p->line) : NULL;
  if (!n) {
    rt_buffer_release(b);
    return NULL;
  }
  n->buf = b;
  n->pending = 0;
  n->symbolic = true;
  n->device = b->device = p->device;   /* a placeholder on a device stands for that device's memory */
  return n;
}

/* fn's graph at size: placeholders of the call's shapes, constants as
 * aliases of their own (other threads read them too: planning writes its
 * scratch), every other node copied with its shape recomputed. NULL with
 * *st and the last error naming the op that cannot follow the size or be
 * allocated. */
static ir_node **variant_graph(const kiln_fn *fn, int64_t size, kiln_status *st) {
  ir_node **g = ir_calloc((size_t)fn->ntmpl + 1, sizeof *g);
  *st = g ? KILN_OK : compile_oom(fn);
  for (int i = 0; g && i < fn->ntmpl; i++) {
    ir_node *o = fn->tmpl[i];
    int64_t shape[KILN_MAX_DIMS];
    ir_node *src[IR_MAX_SRC];
    for (int s = 0; s < o->nsrc; s++) src[s] = g[fn->src_pos[i][s]];
    const char *why = variant_shape(o, src, size, shape);
    if (why) {
      ir_error_setf("%s:%d: compile: %s: %s is not supported", o->file ? o->file : "?", o->line, ir_ops[o->op].name, why);
      release_all(i, g);
      *st = KILN_ERR_SHAPE;
      return NULL;
    }
    ir_node *c = o->op != IR_BUFFER ? ir_node_new(o->op, o->dtype, o->ndim, shape, o->nsrc, src, o->file, o->line)
                 : o->symbolic      ? stand_in(o, o->ndim, shape)
                                    : ir_node_alias(o);
    if (!c) {
      release_all(i, g);
      *st = compile_oom(fn);
      return NULL;
    }
    g[i] = c;
    if (o->op == IR_BUFFER) continue;
    c->device = o->device;
    c->attr = o->attr;
    c->id = o->id;
    c->api = o->api;
  }
  return g;
}

/* A given output the executable can write in place: its value is a whole
 * slot a step writes, and no other output shares that slot. */
static bool writable(const kiln_fn *fn, const fn_variant *var, int o) {
  const rt_exec_view *v = rt_exec_node(var->exec, fn->out_node[o]);
  int64_t dense[KILN_MAX_DIMS];
  ir_contiguous_strides(var->out[o].ndim, var->out[o].shape, dense);
  if (v->slot < fn->nleaves || v->offset || memcmp(v->strides, dense, sizeof(int64_t) * (size_t)var->out[o].ndim))
    return false;
  for (int p = 0; p < fn->nout; p++)
    if (p != o && rt_exec_node(var->exec, fn->out_node[p])->slot == v->slot) return false;
  return true;
}

/* fn's variant for size, planned now (no lock held: planning only reads
 * the template); NULL with *st. */
static fn_variant *variant_plan(kiln_fn *fn, int64_t size, kiln_status *st) {
  ir_node **g = variant_graph(fn, size, st);
  if (!g) return NULL;
  fn_variant *nv = ir_calloc(1, sizeof *nv);
  if (nv) {
    nv->size = size;
    nv->in = ir_malloc(sizeof *nv->in * ((size_t)fn->nin + 1));
    nv->out = ir_malloc(sizeof *nv->out * (size_t)fn->nout);
    nv->leaves = ir_calloc((size_t)fn->nleaves + 1, sizeof *nv->leaves);
  }
  bool ok = nv && nv->in && nv->out && nv->leaves;
  for (int i = 0; ok && i < fn->nleaves; i++) {
    int at = fn->leaf_pos[i];
    if (at >= 0) ir_node_retain(g[at]);
    nv->leaves[i] = at >= 0 ? g[at] : ir_node_alias(fn->leaves[i]);
    ok = nv->leaves[i] != NULL;
  }
  if (ok) {
    for (int i = 0; i < fn->nin; i++) value_of(&nv->in[i], nv->leaves[i]);
    for (int o = 0; o < fn->nout; o++) value_of(&nv->out[o], g[fn->out_node[o]]);
    pass_config cfg = {.off = rt_opts()->passes, .debug = rt_opts()->debug, .target = -1, .symbolic_ok = true};
    double t0 = rt_now_ms();
    nv->exec = rt_exec_build(fn->ntmpl, g, fn->nout, fn->out_node, fn->nleaves, nv->leaves, &cfg, st);
    if (nv->exec && cfg.debug >= 2) {
      char where[300];
      snprintf(where, sizeof where, fn->dynamic ? "the function compiled at %s, dynamic size %lld"
                                                : "the function compiled at %s", fn->where, (long long)size);
      rt_exec_debug(nv->exec, where, rt_now_ms() - t0);
    }
    for (int o = 0; nv->exec && o < fn->nout; o++) nv->out[o].in_place = writable(fn, nv, o);
    ok = nv->exec != NULL;
  } else {
    *st = compile_oom(fn);
  }
  release_all(fn->ntmpl, g);
  if (ok) return nv;
  variant_free(fn, nv);
  return NULL;
}

/* Under fn->mu. */
static fn_variant *variant_find(const kiln_fn *fn, int64_t size) {
  for (int i = 0; i < fn->nvariants; i++)
    if (fn->variants[i]->size == size) return fn->variants[i];
  return NULL;
}

/* The variant for size, planned on first use. A variant never moves once
 * added (runs on other threads hold it), and the lock is held only to find
 * or add one: two threads that plan the same size at once keep the first. */
static fn_variant *variant(kiln_fn *fn, int64_t size, kiln_status *st) {
  *st = KILN_OK;
  pthread_mutex_lock(&fn->mu);
  fn_variant *v = variant_find(fn, size);
  pthread_mutex_unlock(&fn->mu);
  if (v) return v;
  fn_variant *nv = variant_plan(fn, size, st);
  if (!nv) return NULL;
  pthread_mutex_lock(&fn->mu);
  v = variant_find(fn, size);
  fn_variant **grown = v ? NULL : ir_realloc(fn->variants, sizeof *grown * (size_t)(fn->nvariants + 1));
  if (grown) {
    fn->variants = grown;
    v = fn->variants[fn->nvariants++] = nv;
    nv = NULL;
  }
  pthread_mutex_unlock(&fn->mu);
  if (!v) *st = compile_oom(fn);
  variant_free(fn, nv);
  return v;
}

/* Where each template node's sources, each output and each leaf are in the
 * template, kept so that planning a variant writes nothing in the template
 * (its constants may be in other threads' graphs, whose walks write nodes'
 * scratch). */
static kiln_status positions(kiln_fn *fn, int nout, kiln_tensor *const *out) {
  IR_PTRMAP_ON_STACK(pos);
  bool ok = true;
  for (int i = 0; ok && i < fn->ntmpl; i++) ok = ir_ptrmap_put(&pos, fn->tmpl[i], i);
  fn->src_pos = ir_malloc(sizeof *fn->src_pos * ((size_t)fn->ntmpl + 1));
  fn->out_node = ir_malloc(sizeof *fn->out_node * (size_t)(nout + 1));
  fn->leaf_pos = ir_malloc(sizeof *fn->leaf_pos * ((size_t)fn->nleaves + 1));
  if (!ok || !fn->src_pos || !fn->out_node || !fn->leaf_pos) {
    ir_ptrmap_free(&pos);
    return compile_oom(fn);
  }
  for (int i = 0; i < fn->ntmpl; i++)
    for (int s = 0; s < fn->tmpl[i]->nsrc; s++) fn->src_pos[i][s] = ir_ptrmap_get(&pos, fn->tmpl[i]->src[s]);
  for (int o = 0; o < nout; o++) fn->out_node[o] = ir_ptrmap_get(&pos, out[o]);
  for (int i = 0; i < fn->nleaves; i++) fn->leaf_pos[i] = ir_ptrmap_get(&pos, fn->leaves[i]);
  ir_ptrmap_free(&pos);
  return KILN_OK;
}

/* The caller's outputs, then the values of this thread's assignments over
 * placeholders (kiln_assign), whose destinations go to *to; NULL when out
 * of memory. */
static kiln_tensor **with_assignments(const char *f, int l, int nout, kiln_tensor *const *out, int *nassign,
                                      ir_node ***to) {
  ir_node **values = NULL;
  *nassign = ir_assign_take(to, &values);
  kiln_tensor **all = *nassign >= 0 ? ir_malloc(sizeof *all * ((size_t)(nout + *nassign) + 1)) : NULL;
  if (!all) {
    if (*nassign > 0) release_all(*nassign, values), release_all(*nassign, *to);
    else free(values), free(*to);
    *to = NULL;
    ir_error_setf("%s:%d: compile: out of memory", f, l);
    return NULL;
  }
  memcpy(all, out, sizeof *all * (size_t)(nout > 0 ? nout : 0));
  memcpy(all + (nout > 0 ? nout : 0), values, sizeof *all * (size_t)*nassign);
  free(values);   /* the references move to the caller, with all */
  return all;
}

kiln_fn *kiln_compile_at(const char *f, int l, int nin, kiln_tensor *const *in, int nout, kiln_tensor *const *out) {
  if ((nout > 0 && !out) || nout <= 0) return check_compile(f, l, nin, in, nout, out);   /* the list's error; assignments stay */
  int nassign;
  ir_node **to;
  kiln_tensor **all = with_assignments(f, l, nout, out, &nassign, &to);
  if (!all) return NULL;
  kiln_fn *fn = check_compile(f, l, nin, in, nout + nassign, all);
  if (!fn) {
    release_all(nassign, to);
    for (int a = 0; a < nassign; a++) ir_node_release(all[nout + a]);
    free(all);
    return NULL;
  }
  fn->nassign = nassign;
  fn->assign_to = to;
  out = all;
  nout += nassign;
  snprintf(fn->where, sizeof fn->where, "%s:%d", f ? f : "?", l);
  fn->nin = nin;
  fn->nout = nout;
  kiln_status st = unsnap(nout, out);
  if (st == KILN_OK) st = realize_constants(nout, out);
  if (st == KILN_OK) {
    fn->ntmpl = ir_graph_collect(nout, out, &fn->tmpl);
    for (int i = 0; i < fn->ntmpl; i++) ir_node_retain(fn->tmpl[i]);
    st = fn->ntmpl < 0 ? compile_oom(fn) : take_leaves(fn, nin, in, fn->ntmpl, fn->tmpl);
  }
  if (st == KILN_OK) st = positions(fn, nout, out);
  for (int i = 0; i < nin; i++)
    for (int d = 0; d < in[i]->ndim; d++) fn->dynamic |= is_dynamic(in[i]->shape[d]);
  /* A static function is planned now; a dynamic one is checked at a small
   * size now and planned at each new size on its first call. */
  ir_node **probe = st == KILN_OK && fn->dynamic ? variant_graph(fn, 2, &st) : NULL;
  release_all(probe ? fn->ntmpl : 0, probe);
  if (st == KILN_OK && !fn->dynamic) variant(fn, 0, &st);
  for (int a = 0; a < nassign; a++) ir_node_release(out[nout - nassign + a]);   /* tmpl holds what the function reads */
  free(all);
  if (st != KILN_OK) {
    kiln_fn_free(fn);
    return NULL;
  }
  return fn;
}

/* ---- running ------------------------------------------------------------- */
static kiln_status bad_arg(const char *f, int l, const kiln_fn *fn, const char *what, int i, const ir_node *t,
                           const fn_value *want) {
  ir_str b = {0};
  if (t) fe_describe(&b, t);
  char dev[24];
  ir_str shape = {0};
  ir_str_shape(&shape, want->ndim, want->shape);
  ir_error_setf("%s:%d: fn_run: function compiled at %s: %s %d is %s; it takes %s %s on %s", f, l, fn->where, what, i,
                t ? b.s : "NULL", ir_dtypes[want->dtype].name, shape.s, fe_device_name(want->device, dev));
  ir_str_free(&b);
  ir_str_free(&shape);
  return KILN_ERR_ARG;
}

static bool matches(const ir_node *t, const fn_value *v) {
  return t->dtype == v->dtype && t->ndim == v->ndim && t->device.type == v->device.type &&
         t->device.index == v->device.index && !memcmp(t->shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
}

/* t's storage from its first element: its own buffer, or a borrowed view
 * of it when t starts at an offset (the kernels read slots from element 0). */
static rt_buffer *storage_of(const ir_node *t, bool *borrowed) {
  size_t off = (size_t)t->offset * ir_dtypes[t->dtype].size;
  *borrowed = t->buf && off;
  if (!*borrowed) return t->buf;
  rt_buffer *b = rt_buffer_borrow((char *)t->buf->data + off, t->buf->bytes - off);
  if (b) b->device = t->buf->device;
  return b;
}

/* A given tensor as input i or output i: the function's dtype, shape and
 * device, realized, dense. */
static kiln_status check_given(const char *f, int l, const kiln_fn *fn, const char *what, int i, kiln_tensor *t,
                               const fn_value *want) {
  if (!t || t->status != KILN_OK || t->symbolic || !matches(t, want)) {
    if (t && t->status != KILN_OK) {
      ir_error_set(ir_node_msg(t));
      return t->status;
    }
    return bad_arg(f, l, fn, what, i, t, want);
  }
  kiln_status st = t->op == IR_BUFFER ? KILN_OK : kiln_realize_at(f, l, t);
  if (st == KILN_OK && !ir_node_is_contiguous(t)) {
    ir_error_setf("%s:%d: fn_run: function compiled at %s: %s %d is a strided view; give a contiguous tensor", f, l, fn->where, what, i);
    st = KILN_ERR_ARG;
  }
  return st;
}

static kiln_status bind(const char *f, int l, const kiln_fn *fn, const fn_variant *var, kiln_tensor *const *in,
                        kiln_tensor **out, rt_buffer **slots, bool *borrowed) {
  for (int i = 0; i < fn->nin; i++) {
    kiln_status st = check_given(f, l, fn, "input", i, in[i], &var->in[i]);
    if (st != KILN_OK) return st;
    if (!(slots[i] = storage_of(in[i], &borrowed[i])) && in[i]->buf) return KILN_ERR_MEMORY;
  }
  for (int i = fn->nin; i < fn->nleaves; i++) slots[i] = var->leaves[i]->buf;
  for (int o = 0; o < fn->nout - fn->nassign; o++) {
    if (!out[o]) continue;
    kiln_status st = check_given(f, l, fn, "output", o, out[o], &var->out[o]);
    if (st != KILN_OK) return st;
    int s = rt_exec_node(var->exec, fn->out_node[o])->slot;
    if (!var->out[o].in_place || !out[o]->buf) continue;
    if (!(slots[s] = storage_of(out[o], &borrowed[s]))) return KILN_ERR_MEMORY;
    if (!borrowed[s]) rt_buffer_retain(slots[s]);
  }
  return KILN_OK;
}

static kiln_status run_oom(const char *f, int l) {
  ir_error_setf("%s:%d: fn_run: out of memory", f, l);
  return KILN_ERR_MEMORY;
}

/* After the run: a NULL output becomes a new handle over its value; a given
 * one the executable could not write in place gets a copy of it. */
static kiln_status deliver(const char *f, int l, const kiln_fn *fn, const fn_variant *var, kiln_tensor **out,
                           rt_buffer **slots) {
  for (int o = 0; o < fn->nout - fn->nassign; o++) {
    const rt_exec_view *v = rt_exec_node(var->exec, fn->out_node[o]);
    rt_buffer *b = v->slot >= 0 ? slots[v->slot] : NULL;
    if (out[o] && out[o]->buf && b && b->data == (char *)out[o]->buf->data + out[o]->offset * (int64_t)ir_dtypes[out[o]->dtype].size)
      continue;   /* written in place */
    const fn_value *w = &var->out[o];
    ir_node *t = ir_node_new(IR_BUFFER, w->dtype, w->ndim, w->shape, 0, NULL, f, l);
    if (!t) return run_oom(f, l);
    t->device = w->device;
    rt_buffer_retain(b);
    ir_node_set_storage(t, b, v->strides, v->offset);
    if (!out[o]) {
      out[o] = fe_register(t);
      if (out[o] == ir_node_oom()) return run_oom(f, l);
      continue;
    }
    size_t bytes = (size_t)ir_numel(w->ndim, w->shape) * ir_dtypes[w->dtype].size;
    char *dst = (char *)out[o]->buf->data + out[o]->offset * (int64_t)ir_dtypes[w->dtype].size;
    kiln_status st = w->device.type == KILN_CPU ? kiln_copy_to_host_at(f, l, t, dst, bytes) : KILN_ERR_DEVICE;
    if (st == KILN_ERR_DEVICE && w->device.type != KILN_CPU)
      ir_error_setf("%s:%d: fn_run: output %d: a given device tensor must be the value's own storage; pass NULL", f, l, o);
    ir_node_release(t);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* The run's assignments, after every kernel: each value (a slot's view)
 * written into its tensor's storage, in order, once what still reads the
 * old contents has a copy of them (kiln_assign). */
static kiln_status assign(const char *f, int l, const kiln_fn *fn, const fn_variant *var, rt_buffer **slots) {
  for (int a = 0; a < fn->nassign; a++) {
    const rt_exec_view *v = rt_exec_node(var->exec, fn->out_node[fn->nout - fn->nassign + a]);
    ir_node *dst = fn->assign_to[a];
    kiln_status st = v->slot < 0 ? KILN_OK : rt_buffer_preserve(dst->buf);
    if (st == KILN_OK && v->slot >= 0)
      st = rt_copy_view(dst->buf, dst->strides, dst->offset, slots[v->slot], v->strides, v->offset,
                        ir_dtypes[dst->dtype].size, dst->ndim, dst->shape);
    if (st != KILN_OK) {
      char why[256];
      snprintf(why, sizeof why, "%s", kiln_last_error());
      ir_error_setf("%s:%d: fn_run: function compiled at %s: assignment %d: %s", f, l, fn->where, a, why);
      return st;
    }
  }
  return KILN_OK;
}

/* The call's size of the dynamic dims (0 for a static function): every
 * dynamic dim of every input must have it. */
static kiln_status call_size(const char *f, int l, const kiln_fn *fn, kiln_tensor *const *in, int64_t *size) {
  *size = 0;
  for (int i = 0; fn->dynamic && i < fn->nin; i++) {
    const ir_node *p = fn->leaves[i];
    if (!in[i] || in[i]->ndim != p->ndim) continue;   /* check_given reports it */
    for (int d = 0; d < p->ndim; d++) {
      if (!is_dynamic(p->shape[d])) continue;
      if (*size && in[i]->shape[d] != *size) {
        ir_error_setf("%s:%d: fn_run: function compiled at %s: input %d dim %d is %lld, but another dynamic dim of "
                      "this call is %lld (the dynamic dims of one call have one size)", f, l, fn->where, i, d,
                      (long long)in[i]->shape[d], (long long)*size);
        return KILN_ERR_SHAPE;
      }
      *size = in[i]->shape[d];
    }
  }
  if (fn->dynamic && *size == 0) *size = 1;   /* a mismatch is reported by the shape check */
  return KILN_OK;
}

kiln_status kiln_fn_run_at(const char *f, int l, kiln_fn *fn, kiln_tensor *const *in, kiln_tensor **out) {
  if (!fn || (fn->nin && !in) || !out) {
    ir_error_setf("%s:%d: fn_run: %s is NULL", f, l, !fn ? "the function" : !out ? "the output list" : "the input list");
    return KILN_ERR_ARG;
  }
  int64_t size;
  kiln_status st = call_size(f, l, fn, in, &size);
  /* a static function's one variant was planned at compile time and never moves */
  fn_variant *var = st != KILN_OK ? NULL : fn->dynamic ? variant(fn, size, &st) : fn->variants[0];
  if (!var) return st;
  int ns = rt_exec_nslots(var->exec);
  rt_buffer *small[32], **slots = ns <= 32 ? small : ir_calloc((size_t)ns, sizeof *slots);
  bool small_b[32], *borrowed = ns <= 32 ? small_b : ir_calloc((size_t)ns, sizeof *borrowed);
  if (!slots || !borrowed) {
    if (slots != small) free(slots);
    if (borrowed != small_b) free(borrowed);
    return run_oom(f, l);
  }
  memset(slots, 0, sizeof *slots * (size_t)ns);
  memset(borrowed, 0, sizeof *borrowed * (size_t)ns);
  st = bind(f, l, fn, var, in, out, slots, borrowed);
  if (st == KILN_OK) st = rt_exec_run(var->exec, slots, NULL, atomic_fetch_add(&fn->runs, 1) == 0, rt_opts()->debug, NULL);
  if (st == KILN_OK) st = deliver(f, l, fn, var, out, slots);
  if (st == KILN_OK) st = assign(f, l, fn, var, slots);
  for (int i = 0; i < ns; i++)
    if (i >= fn->nleaves || borrowed[i]) rt_buffer_release(slots[i]);
  if (slots != small) free(slots);
  if (borrowed != small_b) free(borrowed);
  return st;
}

kiln_status kiln_fn_dump(kiln_fn *fn, FILE *out, kiln_graph_format fmt) {
  if (!fn || !out) {
    ir_error_setf("fn_dump: %s is NULL", !fn ? "the function" : "the stream");
    return KILN_ERR_ARG;
  }
  ir_str b = {0};
  pthread_mutex_lock(&fn->mu);
  if (!fn->nvariants) ir_str_printf(&b, "function compiled at %s: dynamic, not planned yet (no call so far)\n", fn->where);
  for (int i = 0; i < fn->nvariants; i++) {
    char where[200];
    snprintf(where, sizeof where, fn->dynamic ? "%s, dynamic size %lld" : "%s", fn->where, (long long)fn->variants[i]->size);
    rt_exec_print(&b, fn->variants[i]->exec, fmt == KILN_FMT_DOT, where);
  }
  pthread_mutex_unlock(&fn->mu);
  kiln_status st = b.failed ? KILN_ERR_MEMORY : KILN_OK;
  if (b.failed) ir_error_set("fn_dump: out of memory");
  else fputs(b.s ? b.s : "", out);
  ir_str_free(&b);
  return st;
}
