/* fn.c: compiled functions. kiln_compile plans a graph over placeholders once
 * (passes, fusion, lowering, compiling: exec.c); kiln_fn_run checks the
 * arguments, binds their buffers to the executable's slots and launches it:
 * no graph is built, hashed or passed over per call. Tensors the graph
 * captured (weights) are realized at compile time and become constants. */
#include "rt.h"
#include "rt_internal.h"
#include "frontend/frontend.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  kiln_dtype dtype;
  kiln_device device;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
} fn_value;

struct kiln_fn {
  rt_exec *exec;
  char where[128];          /* "main.c:12": where kiln_compile was called */
  int nin, nout;
  fn_value *in, *out;
  int *out_node;            /* per output: its node in the planned graph */
  int nleaves;
  ir_node **leaves;         /* retained: the placeholders (slots 0..nin), then constants */
  atomic_uint_fast64_t runs;
};

static void value_of(fn_value *v, const ir_node *n) {
  *v = (fn_value){n->dtype, n->device, n->ndim, {0}};
  memcpy(v->shape, n->shape, sizeof n->shape);
}

void kiln_fn_free(kiln_fn *fn) {
  if (!fn) return;
  rt_exec_free(fn->exec);
  for (int i = 0; i < fn->nleaves; i++) ir_node_release(fn->leaves[i]);
  free(fn->leaves);
  free(fn->in);
  free(fn->out);
  free(fn->out_node);
  free(fn);
}

static kiln_fn *fail(kiln_fn *fn, const char *f, int l, const char *fmt, int a) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, a);
  ir_error_setf("%s:%d: compile: %s", f, l, msg);
  kiln_fn_free(fn);
  return NULL;
}

/* Inputs: distinct placeholders; outputs: tensors without errors. */
static kiln_fn *check_compile(const char *f, int l, int nin, kiln_tensor *const *in, int nout, kiln_tensor *const *out) {
  if (nin < 0 || (nin && !in)) return fail(NULL, f, l, "invalid list of %d inputs", nin);
  if (nout <= 0 || !out) return fail(NULL, f, l, "invalid list of %d outputs (a function has at least one)", nout);
  for (int i = 0; i < nin; i++) {
    if (!in[i] || in[i]->op != IR_BUFFER || !in[i]->symbolic)
      return fail(NULL, f, l, "input %d is not a placeholder (make inputs with kiln_placeholder)", i);
    for (int j = 0; j < i; j++)
      if (in[j] == in[i]) return fail(NULL, f, l, "input %d is given twice", i);
  }
  for (int o = 0; o < nout; o++) {
    if (!out[o]) return fail(NULL, f, l, "output %d is NULL", o);
    ir_node *e = ir_graph_find_error(1, &out[o]);
    if (e) {
      ir_error_set(e->msg);   /* the op that failed, where the user built it */
      return NULL;
    }
  }
  return calloc(1, sizeof(kiln_fn));
}

static bool is_output(const ir_node *n, int nout, kiln_tensor *const *out) {
  for (int o = 0; o < nout; o++)
    if (out[o] == n) return true;
  return false;
}

/* What does not read a placeholder is a constant of the function: computed
 * once, now, so a call never recomputes a weight. */
static kiln_status realize_constants(int nout, kiln_tensor *const *out) {
  ir_node **topo, **c;
  int n = ir_graph_collect(nout, out, &topo), nc = 0;
  c = malloc(sizeof *c * ((size_t)(3 * n) + 1));
  IR_ASSERT(c);
  for (int i = 0; i < n; i++) {
    const ir_node *t = topo[i];
    for (int s = 0; t->symbolic && s < t->nsrc; s++)
      if (!t->src[s]->symbolic && t->src[s]->op != IR_BUFFER) c[nc++] = t->src[s];
    if (!t->symbolic && t->op != IR_BUFFER && is_output(t, nout, out)) c[nc++] = topo[i];
  }
  kiln_status st = nc ? rt_realize(nc, c) : KILN_OK;
  free(c);
  free(topo);
  return st;
}

static kiln_status take_leaves(kiln_fn *fn, int nin, kiln_tensor *const *in, int n, ir_node *const *topo) {
  fn->leaves = malloc(sizeof *fn->leaves * ((size_t)(nin + n) + 1));
  IR_ASSERT(fn->leaves);
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

kiln_fn *kiln_compile_at(const char *f, int l, int nin, kiln_tensor *const *in, int nout, kiln_tensor *const *out) {
  kiln_fn *fn = check_compile(f, l, nin, in, nout, out);
  if (!fn) return NULL;
  snprintf(fn->where, sizeof fn->where, "%s:%d", f ? f : "?", l);
  kiln_status st = realize_constants(nout, out);
  if (st != KILN_OK) {
    kiln_fn_free(fn);
    return NULL;
  }
  ir_node **topo;
  int n = ir_graph_collect(nout, out, &topo);
  st = take_leaves(fn, nin, in, n, topo);
  fn->nin = nin;
  fn->nout = nout;
  fn->in = malloc(sizeof *fn->in * ((size_t)nin + 1));
  fn->out = malloc(sizeof *fn->out * (size_t)nout);
  fn->out_node = malloc(sizeof *fn->out_node * (size_t)nout);
  IR_ASSERT(fn->in && fn->out && fn->out_node);
  for (int i = 0; i < nin; i++) value_of(&fn->in[i], in[i]);
  for (int i = 0; i < n; i++) topo[i]->scratch = i;
  for (int o = 0; o < nout; o++) {
    value_of(&fn->out[o], out[o]);
    fn->out_node[o] = out[o]->scratch;
  }
  pass_config cfg = {rt_opts()->passes, rt_opts()->debug, -1, true};
  if (st == KILN_OK) fn->exec = rt_exec_build(n, topo, nout, fn->out_node, fn->nleaves, fn->leaves, &cfg, &st);
  free(topo);
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
      ir_error_set(t->msg);
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

/* A given output the executable can write in place: its value is a whole
 * slot a step writes, and no other output shares that slot. */
static bool writable(const kiln_fn *fn, int o, int nleaves) {
  const rt_exec_view *v = rt_exec_node(fn->exec, fn->out_node[o]);
  int64_t dense[KILN_MAX_DIMS];
  ir_contiguous_strides(fn->out[o].ndim, fn->out[o].shape, dense);
  if (v->slot < nleaves || v->offset || memcmp(v->strides, dense, sizeof(int64_t) * (size_t)fn->out[o].ndim)) return false;
  for (int p = 0; p < fn->nout; p++)
    if (p != o && rt_exec_node(fn->exec, fn->out_node[p])->slot == v->slot) return false;
  return true;
}

static kiln_status bind(const char *f, int l, const kiln_fn *fn, kiln_tensor *const *in, kiln_tensor **out,
                        rt_buffer **slots, bool *borrowed) {
  int nleaves = rt_exec_nleaves(fn->exec);
  for (int i = 0; i < fn->nin; i++) {
    kiln_status st = check_given(f, l, fn, "input", i, in[i], &fn->in[i]);
    if (st != KILN_OK) return st;
    if (!(slots[i] = storage_of(in[i], &borrowed[i])) && in[i]->buf) return KILN_ERR_MEMORY;
  }
  for (int i = fn->nin; i < fn->nleaves; i++) slots[i] = fn->leaves[i]->buf;
  for (int o = 0; o < fn->nout; o++) {
    if (!out[o]) continue;
    kiln_status st = check_given(f, l, fn, "output", o, out[o], &fn->out[o]);
    if (st != KILN_OK) return st;
    int s = rt_exec_node(fn->exec, fn->out_node[o])->slot;
    if (!writable(fn, o, nleaves) || !out[o]->buf) continue;
    if (!(slots[s] = storage_of(out[o], &borrowed[s]))) return KILN_ERR_MEMORY;
    if (!borrowed[s]) rt_buffer_retain(slots[s]);
  }
  return KILN_OK;
}

/* After the run: a NULL output becomes a new handle over its value; a given
 * one the executable could not write in place gets a copy of it. */
static kiln_status deliver(const char *f, int l, const kiln_fn *fn, kiln_tensor **out, rt_buffer **slots) {
  for (int o = 0; o < fn->nout; o++) {
    const rt_exec_view *v = rt_exec_node(fn->exec, fn->out_node[o]);
    rt_buffer *b = v->slot >= 0 ? slots[v->slot] : NULL;
    if (out[o] && out[o]->buf && b && b->data == (char *)out[o]->buf->data + out[o]->offset * (int64_t)ir_dtypes[out[o]->dtype].size)
      continue;   /* written in place */
    const fn_value *w = &fn->out[o];
    ir_node *t = ir_node_new(IR_BUFFER, w->dtype, w->ndim, w->shape, 0, NULL, f, l);
    t->device = w->device;
    rt_buffer_retain(b);
    ir_node_set_storage(t, b, v->strides, v->offset);
    if (!out[o]) {
      out[o] = fe_register(t);
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

kiln_status kiln_fn_run_at(const char *f, int l, kiln_fn *fn, kiln_tensor *const *in, kiln_tensor **out) {
  if (!fn || (fn->nin && !in) || !out) {
    ir_error_setf("%s:%d: fn_run: %s is NULL", f, l, !fn ? "the function" : !out ? "the output list" : "the input list");
    return KILN_ERR_ARG;
  }
  int ns = rt_exec_nslots(fn->exec);
  rt_buffer *small[32], **slots = ns <= 32 ? small : calloc((size_t)ns, sizeof *slots);
  bool small_b[32], *borrowed = ns <= 32 ? small_b : calloc((size_t)ns, sizeof *borrowed);
  IR_ASSERT(slots && borrowed);
  memset(slots, 0, sizeof *slots * (size_t)ns);
  memset(borrowed, 0, sizeof *borrowed * (size_t)ns);
  kiln_status st = bind(f, l, fn, in, out, slots, borrowed);
  if (st == KILN_OK) st = rt_exec_run(fn->exec, slots, NULL, atomic_fetch_add(&fn->runs, 1) == 0, rt_opts()->debug);
  if (st == KILN_OK) st = deliver(f, l, fn, out, slots);
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
  rt_exec_print(&b, fn->exec, fmt == KILN_FMT_DOT, fn->where);
  fputs(b.s ? b.s : "", out);
  ir_str_free(&b);
  return KILN_OK;
}
