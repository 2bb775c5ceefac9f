/* lower.c: turns one kernel group into kernel IR. Each output becomes a store
 * inside a loop nest over the group's shape (outermost loop parallel,
 * innermost vectorizable); its value is built by propagating the output's
 * index vector down the graph: movement ops rewrite the index, elementwise ops
 * combine their sources' values at the same index, sources compute their
 * value from the index, and nodes stored by other kernels are loaded.
 * A reduction becomes an accumulator and a loop over its reduced dims, placed
 * in the innermost enclosing loop whose variable its index uses (a "frame"),
 * before that loop's inner content: so a row max feeding a row-wise softmax
 * runs once per row. A group holding a matmul becomes batch loops around one
 * KS_GEMM whose body is the epilogue.
 * Needs fuse's group_of/materialized; the kernel's params are the group's
 * outputs (in order) then the loaded nodes.
 * Every integer that comes from a shape (extent, stride, offset, size) is
 * built by kx_dim: a literal, or in a shape-generic kernel a launch argument;
 * lowering's choices that follow the shape (a size-1 dim broadcasts, how a
 * reshape splits its dims) stay in the IR and so in the key.
 * Out of memory sets k->oom (kernel.h): lowering goes on with stand-ins,
 * emit stops at once, and pass_lower drops the kernel. */
#include "pass.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMO_CAP 64

/* A place statements can be inserted: before *tail, inside the loop of var
 * (-1: the kernel's top level). */
typedef struct {
  int var;
  kstmt **tail;
} frame;

typedef struct {
  const ir_node *node;
  kexpr *idx[KILN_MAX_DIMS];
  kexpr *value;
} memo_entry;

typedef struct task task;

typedef struct {
  pass_graph *g;
  int gi;
  kernel *k;
  ir_node **inputs;     /* nodes bound to the input params, in param order */
  int *input_param;     /* their param numbers */
  int ninputs;
  memo_entry *memo;     /* (node, index) -> value: shared subgraphs lowered once */
  memo_entry spare;     /* out of memory: the slot memo_slot gives, holding nothing */
  kexpr **value_of;     /* by topo index: the launch argument holding a CONST's
                           value or a PAD's fill (one per node, whatever the index) */
  int memo_cap, memo_used;
  frame *frames;        /* enclosing loops, outermost first */
  int nframes;
  size_t frames_cap;
  task *tasks;          /* the explicit stack of emit, innermost last */
  int ntasks;
  size_t tasks_cap;
  int64_t lanes;        /* a scan's lane accumulators (scan_lane_nest), 0: none */
  frame lane_init;      /* where they start: the body of the loop over lanes before the scan loop */
  kexpr *lane;          /* the lane in the scan loop's body */
  kexpr *block;         /* a segmented scan's block (scan_nest) */
} lower_ctx;

static kiln_dtype ct(kiln_dtype d) { return ir_compute_dtype(d); }

/* ---- memo table --------------------------------------------------------- */
static uint64_t memo_hash(const ir_node *n, kexpr *const *idx) {
  uint64_t h = ir_hash_bytes(&n, sizeof n, 0);
  return ir_hash_bytes(idx, sizeof(kexpr *) * (size_t)n->ndim, h);
}

static memo_entry *memo_slot(lower_ctx *c, const ir_node *n, kexpr *const *idx);

static bool memo_grow(lower_ctx *c) {
  int oldcap = c->memo_cap, cap = oldcap ? oldcap * 2 : MEMO_CAP;
  memo_entry *old = c->memo, *grown = ir_calloc((size_t)cap, sizeof *old);
  if (!grown) return false;
  c->memo_cap = cap;
  c->memo = grown;
  c->memo_used = 0;
  for (int i = 0; i < oldcap; i++)
    if (old[i].node) {
      *memo_slot(c, old[i].node, old[i].idx) = old[i];
      c->memo_used++;
    }
  free(old);
  return true;
}

static memo_entry *memo_slot(lower_ctx *c, const ir_node *n, kexpr *const *idx) {
  if (c->k->oom || (2 * (c->memo_used + 1) > c->memo_cap && !memo_grow(c))) {
    c->k->oom = true;
    c->spare = (memo_entry){0};
    return &c->spare;
  }
  size_t mask = (size_t)c->memo_cap - 1, j = memo_hash(n, idx) & mask;
  for (; c->memo[j].node; j = (j + 1) & mask)
    if (c->memo[j].node == n && !memcmp(c->memo[j].idx, idx, sizeof(kexpr *) * (size_t)n->ndim)) break;
  return &c->memo[j];
}

static void memo_put(lower_ctx *c, const ir_node *n, kexpr *const *idx, kexpr *value) {
  memo_entry *m = memo_slot(c, n, idx);
  m->node = n;
  memcpy(m->idx, idx, sizeof(kexpr *) * (size_t)n->ndim);
  m->value = value;
  c->memo_used += m != &c->spare;
}

/* ---- index helpers ------------------------------------------------------ */
static kexpr *linear(kernel *k, int ndim, const int64_t *strides, int64_t offset, kexpr *const *idx) {
  kexpr *e = kx_dim(k, offset);
  for (int d = 0; d < ndim; d++) e = kx_iadd(k, e, kx_imul(k, idx[d], kx_dim(k, strides[d])));
  return e;
}

static kexpr *flat_index(kernel *k, const ir_node *n, kexpr *const *idx) {
  int64_t st[KILN_MAX_DIMS];
  ir_contiguous_strides(n->ndim, n->shape, st);
  return linear(k, n->ndim, st, 0, idx);
}

/* Elements a strided view can reach: offset + sum((size-1)*|stride|) + 1. */
static int64_t view_span(const ir_node *n) {
  int64_t span = n->offset + 1;
  for (int d = 0; d < n->ndim; d++) {
    if (n->shape[d] == 0) return 0;
    span += (n->shape[d] - 1) * (n->strides[d] < 0 ? -n->strides[d] : n->strides[d]);
  }
  return span;
}

static int input_param(lower_ctx *c, ir_node *n) {
  for (int i = 0; i < c->ninputs; i++)
    if (c->inputs[i] == n) return c->input_param[i];
  c->inputs[c->ninputs] = n;
  int p = k_param(c->k, n->dtype, false, n->op == IR_BUFFER ? view_span(n) : ir_numel(n->ndim, n->shape));
  c->input_param[c->ninputs++] = p;
  return p;
}

static kexpr *emit_load(lower_ctx *c, ir_node *n, kexpr *const *idx) {
  int p = input_param(c, n);
  int64_t st[KILN_MAX_DIMS];
  int64_t off = 0;
  if (n->op == IR_BUFFER) {
    memcpy(st, n->strides, sizeof st);
    off = n->offset;
  } else {
    ir_contiguous_strides(n->ndim, n->shape, st);  /* stored by an earlier kernel */
  }
  return kx_load(c->k, p, linear(c->k, n->ndim, st, off, idx), ct(n->dtype));
}

/* ---- sources ------------------------------------------------------------ */
static kexpr *fop(kernel *k, ir_op op, kiln_dtype t, kexpr *a, kexpr *b) { return kx_op(k, op, t, a, b, NULL); }

/* Field f of n as a launch argument of type t (passes/values.c says which
 * values are code instead), recorded as coming from n: a plan made from
 * this graph takes it from the next graph of the same structure. */
static kexpr *node_arg(kernel *k, const ir_node *n, pass_arg_field f, kiln_dtype t) {
  int i = k_arg_push(k, pass_arg_bits(n, f, t));
  k_arg_from(k, i, n, f, t);
  return kx_arg(k, t, i);
}

static kexpr *f64_arg(kernel *k, const ir_node *n, pass_arg_field f) { return node_arg(k, n, f, KILN_F64); }
static kexpr *i64_arg(kernel *k, const ir_node *n, pass_arg_field f) { return node_arg(k, n, f, KILN_I64); }

/* A CONST's value, or a PAD's fill: one argument per node. */
static kexpr *emit_const(lower_ctx *c, const ir_node *n) {
  kexpr **v = &c->value_of[n->scratch];
  if (!*v) *v = node_arg(c->k, n, PASS_ARG_VALUE, ct(n->dtype));
  return *v;
}

/* arange and linspace compute in f64 (or i64 for integer arange) and round
 * once to the result dtype, as the reference evaluator does. */
static kexpr *emit_arange(kernel *k, const ir_node *n, kexpr *flat) {
  if (!ir_is_float(n->dtype)) {
    kexpr *v = kx_iadd(k, i64_arg(k, n, PASS_ARG_START), kx_imul(k, flat, i64_arg(k, n, PASS_ARG_STEP)));
    return kx_cast(k, v, ct(n->dtype));
  }
  kexpr *v = fop(k, IR_ADD, KILN_F64, f64_arg(k, n, PASS_ARG_START),
                 fop(k, IR_MUL, KILN_F64, kx_cast(k, flat, KILN_F64), f64_arg(k, n, PASS_ARG_STEP)));
  return kx_cast(k, v, ct(n->dtype));
}

static kexpr *emit_linspace(kernel *k, const ir_node *n, kexpr *flat) {
  int64_t cnt = ir_numel(n->ndim, n->shape);
  kexpr *step = f64_arg(k, n, PASS_ARG_STEP);
  kexpr *lo = fop(k, IR_ADD, KILN_F64, f64_arg(k, n, PASS_ARG_START), fop(k, IR_MUL, KILN_F64, kx_cast(k, flat, KILN_F64), step));
  kexpr *back = kx_iadd(k, kx_dim(k, cnt - 1), kx_imul(k, flat, kx_int(k, KILN_I64, -1)));
  kexpr *hi = fop(k, IR_SUB, KILN_F64, f64_arg(k, n, PASS_ARG_END), fop(k, IR_MUL, KILN_F64, kx_cast(k, back, KILN_F64), step));
  kexpr *first_half = kx_op(k, IR_LT, KILN_BOOL, flat, kx_dim(k, cnt / 2), NULL);
  return kx_cast(k, kx_op(k, IR_WHERE, KILN_F64, first_half, lo, hi), ct(n->dtype));
}

/* Uniform in [0,1) with as many bits as the dtype's significand holds, so
 * rounding to the dtype can never give 1.0 (ir/ops.def, tests/util/ref.c). */
static kexpr *uniform(kernel *k, kiln_dtype dt, kexpr *w0, kexpr *w1) {
  if (dt == KILN_F64) {
    kexpr *bits = kx_iadd(k, kx_imul(k, w0, kx_int(k, KILN_I64, 1ll << 21)),
                          kx_idiv(k, w1, kx_int(k, KILN_I64, 1ll << 11)));
    return fop(k, IR_MUL, KILN_F64, kx_cast(k, bits, KILN_F64), kx_float(k, KILN_F64, 0x1p-53));
  }
  int nb = dt == KILN_F16 ? 11 : dt == KILN_BF16 ? 8 : 24;
  kexpr *bits = kx_idiv(k, w0, kx_int(k, KILN_I64, 1ll << (32 - nb)));
  return fop(k, IR_MUL, KILN_F32, kx_cast(k, bits, KILN_F32), kx_float(k, KILN_F32, 1.0 / (double)(1ll << nb)));
}

/* Box-Muller on one Philox block: u1 in (0,1], u2 in [0,1). */
static kexpr *normal(kernel *k, kiln_dtype dt, kexpr *const *w) {
  kiln_dtype t = dt == KILN_F64 ? KILN_F64 : KILN_F32;
  kexpr *u1, *u2;
  if (t == KILN_F64) {
    u1 = uniform(k, t, w[0], w[1]);
    u1 = fop(k, IR_ADD, t, u1, kx_float(k, t, 0x1p-53));
    u2 = uniform(k, t, w[2], w[3]);
  } else {
    u1 = uniform(k, KILN_F32, w[0], w[1]);
    u1 = fop(k, IR_ADD, t, u1, kx_float(k, t, 0x1p-24));
    u2 = uniform(k, KILN_F32, w[1], w[0]);
  }
  kexpr *r = kx_op(k, IR_SQRT, t, fop(k, IR_MUL, t, kx_float(k, t, -2.0), kx_op(k, IR_LOG, t, u1, NULL, NULL)), NULL, NULL);
  kexpr *th = kx_op(k, IR_COS, t, fop(k, IR_MUL, t, kx_float(k, t, 6.283185307179586), u2), NULL, NULL);
  return fop(k, IR_MUL, t, r, th);
}

static kexpr *emit_random(kernel *k, const ir_node *n, kexpr *flat) {
  /* seed and offset are launch arguments: drawing again reuses the kernel */
  kexpr *ctr = kx_iadd(k, i64_arg(k, n, PASS_ARG_OFFSET), flat);
  kexpr *key = i64_arg(k, n, PASS_ARG_SEED);
  kexpr *w[4];
  for (int i = 0; i < 4; i++) w[i] = kx_philox(k, key, ctr, i);
  kiln_dtype t = ct(n->dtype);
  if (n->op == IR_RAND) return kx_cast(k, uniform(k, n->dtype, w[0], w[1]), t);
  if (n->op == IR_RANDN) return kx_cast(k, normal(k, n->dtype, w), t);
  kexpr *hi = kx_imul(k, kx_imod(k, w[1], kx_int(k, KILN_I64, 1ll << 31)), kx_int(k, KILN_I64, 1ll << 32));
  kexpr *r = kx_imod(k, kx_iadd(k, hi, w[0]), i64_arg(k, n, PASS_ARG_RANGE));
  return kx_cast(k, kx_iadd(k, i64_arg(k, n, PASS_ARG_LOW), r), t);
}

static kexpr *emit_source(lower_ctx *c, const ir_node *n, kexpr *const *idx) {
  kernel *k = c->k;
  kexpr *flat = flat_index(k, n, idx);
  switch (n->op) {
  case IR_CONST: return emit_const(c, n);
  case IR_ARANGE: return emit_arange(k, n, flat);
  case IR_LINSPACE: return emit_linspace(k, n, flat);
  case IR_EYE: return kx_cast(k, kx_op(k, IR_EQ, KILN_BOOL, idx[0], idx[1], NULL), ct(n->dtype));
  case IR_RAND:
  case IR_RANDN:
  case IR_RANDINT: return emit_random(k, n, flat);
  default: IR_ASSERT(!"not a source");
  }
}

/* ---- the explicit stack ----------------------------------------------------
 * Lowering walks from each output down to its loads and sources, as deep as
 * the graph is: it runs on an explicit stack of tasks, so a chain of a
 * million ops costs memory, not C stack. A task lowers one node at one
 * index. Its op's step function runs on entry (step 0) and again after each
 * source it asked for has been lowered (step 1, 2, ...), with that source's
 * value in got: it either asks for a source (fills need_idx, returns
 * ask(t, slot)) or returns the node's value. */
struct task {
  const ir_node *n;
  kexpr *idx[KILN_MAX_DIMS];       /* the index n is lowered at */
  int step;                        /* sources delivered so far */
  kexpr *got;                      /* the value of the source asked for last */
  const ir_node *need;             /* the source asked for, at need_idx */
  kexpr *need_idx[KILN_MAX_DIMS];
  kexpr *keep[3];                  /* values an op keeps between its steps */
  kstmt *outer;                    /* reductions: the loops over the reduced dims */
  int home, base;                  /* reductions: their frame; the frames below their own */
};

static kexpr *ask(task *t, int slot) {
  t->need = t->n->src[slot];
  return NULL;
}

static void copy_index(kexpr **to, kexpr *const *from, int ndim) {
  memcpy(to, from, sizeof(kexpr *) * (size_t)ndim);
}

/* ---- movement (rewrites the index, then reads the source), elementwise --- */
static kexpr *i64(kernel *k, int64_t v) { return kx_int(k, KILN_I64, v); }

static void expand_index(kernel *k, const ir_node *n, kexpr *const *idx, kexpr **sidx) {
  const ir_node *s = n->src[0];
  int off = n->ndim - s->ndim;
  for (int d = 0; d < s->ndim; d++) sidx[d] = s->shape[d] == 1 ? i64(k, 0) : idx[d + off];
}

/* Converts v (a value of dtype `from`) to dtype `to`: an f16/bf16 target
 * rounds to that precision even when fused, then computes in f32. */
static kexpr *convert(kernel *k, kexpr *v, kiln_dtype from, kiln_dtype to) {
  if (from == to || (to != KILN_F16 && to != KILN_BF16)) return kx_cast(k, v, ct(to));
  return kx_cast(k, kx_cast(k, kx_cast(k, v, KILN_F32), to), KILN_F32);
}

static kexpr *step_cast(lower_ctx *c, task *t) {
  if (t->step) return convert(c->k, t->got, t->n->src[0]->dtype, t->n->attr.to);
  copy_index(t->need_idx, t->idx, t->n->ndim);
  return ask(t, 0);
}

static void permute_index(const ir_node *n, kexpr *const *idx, kexpr **sidx) {
  for (int d = 0; d < n->ndim; d++) sidx[n->attr.perm[d]] = idx[d];
}

/* SLICE reads start + i*step along its dim; SELECT reads one constant index
 * there and has one dim fewer than its source. */
static void slice_select_index(kernel *k, const ir_node *n, kexpr *const *idx, kexpr **sidx) {
  const ir_node *s = n->src[0];
  for (int d = 0, j = 0; d < s->ndim; d++) {
    if (d != n->attr.dim) sidx[d] = idx[j++];
    else if (n->op == IR_SELECT) sidx[d] = kx_dim(k, n->attr.index);
    else sidx[d] = kx_iadd(k, kx_dim(k, n->attr.index), kx_imul(k, idx[j++], kx_dim(k, n->attr.stride)));
  }
}

static void flip_index(kernel *k, const ir_node *n, kexpr *const *idx, kexpr **sidx) {
  for (int d = 0; d < n->ndim; d++)
    sidx[d] = n->attr.flip_mask >> d & 1 ? kx_iadd(k, kx_dim(k, n->shape[d] - 1), kx_imul(k, idx[d], i64(k, -1))) : idx[d];
}

/* The dims of n whose size is not 1 (size-1 dims always have index 0). */
static int nonunit_dims(const ir_node *n, int *dims) {
  int m = 0;
  for (int d = 0; d < n->ndim; d++)
    if (n->shape[d] != 1) dims[m++] = d;
  return m;
}

/* One reshape group: output dims od[0..no) hold the same elements as source
 * dims sd[0..ns). One dim on each side maps directly; otherwise the group's
 * flat index is split by division (both operands are non-negative). */
static void reshape_group(kernel *k, const ir_node *n, const int *od, int no, const int *sd, int ns,
                          kexpr *const *idx, kexpr **sidx) {
  const ir_node *s = n->src[0];
  if (no == 1 && ns == 1) {
    sidx[sd[0]] = idx[od[0]];
    return;
  }
  kexpr *flat = i64(k, 0);
  for (int i = 0; i < no; i++) flat = kx_iadd(k, kx_imul(k, flat, kx_dim(k, n->shape[od[i]])), idx[od[i]]);
  int64_t inner = 1;
  for (int j = ns - 1; j >= 0; j--) {
    kexpr *q = kx_idiv(k, flat, kx_dim(k, inner));
    sidx[sd[j]] = j ? kx_imod(k, q, kx_dim(k, s->shape[sd[j]])) : q;
    inner *= s->shape[sd[j]];
  }
}

/* Groups the non-1 dims of both shapes by equal products, so squeeze,
 * unsqueeze and reshapes that keep dims intact need no division. */
static void reshape_index(kernel *k, const ir_node *n, kexpr *const *idx, kexpr **sidx) {
  const ir_node *s = n->src[0];
  for (int d = 0; d < s->ndim; d++) sidx[d] = i64(k, 0);
  if (ir_numel(n->ndim, n->shape) == 0) return;   /* never runs */
  int od[KILN_MAX_DIMS], sd[KILN_MAX_DIMS];
  int no = nonunit_dims(n, od);
  nonunit_dims(s, sd);
  for (int i = 0, j = 0; i < no;) {
    int i1 = i + 1, j1 = j + 1;
    int64_t po = n->shape[od[i]], ps = s->shape[sd[j]];
    while (po != ps) {
      if (po < ps) po *= n->shape[od[i1++]];
      else ps *= s->shape[sd[j1++]];
    }
    reshape_group(k, n, od + i, i1 - i, sd + j, j1 - j, idx, sidx);
    i = i1;
    j = j1;
  }
}

/* The views that only rewrite the index: the source at the new index. */
static kexpr *step_view(lower_ctx *c, task *t) {
  if (t->step) return t->got;
  const ir_node *n = t->n;
  switch (n->op) {
  case IR_EXPAND: expand_index(c->k, n, t->idx, t->need_idx); break;
  case IR_RESHAPE: reshape_index(c->k, n, t->idx, t->need_idx); break;
  case IR_PERMUTE: permute_index(n, t->idx, t->need_idx); break;
  case IR_SLICE:
  case IR_SELECT: slice_select_index(c->k, n, t->idx, t->need_idx); break;
  case IR_FLIP: flip_index(c->k, n, t->idx, t->need_idx); break;
  default: IR_ASSERT(!"not an index-only view");
  }
  return ask(t, 0);
}

static kexpr *and_cond(kernel *k, kexpr *acc, kexpr *cond) {
  return acc ? kx_op(k, IR_LOGICAL_AND, KILN_BOOL, acc, cond, NULL) : cond;
}

/* Pad reads the source at idx - before where that is in range and the fill
 * value elsewhere (keep: fill, the in-range condition). The source index is
 * clamped into range so the load stays in bounds even when a vectorized
 * select evaluates both sides. */
static kexpr *step_pad(lower_ctx *c, task *t) {
  const ir_node *n = t->n, *s = n->src[0];
  kernel *k = c->k;
  kexpr *fill = t->keep[0], *valid = t->keep[1];
  if (t->step) return valid ? kx_op(k, IR_WHERE, ct(n->dtype), valid, t->got, fill) : t->got;
  fill = t->keep[0] = emit_const(c, n);
  if (ir_numel(s->ndim, s->shape) == 0) return fill;
  kexpr **sidx = t->need_idx;
  for (int d = 0; d < n->ndim; d++) {
    kexpr *i = kx_iadd(k, t->idx[d], kx_dim(k, -n->attr.pad[d][0]));
    sidx[d] = i;
    if (n->attr.pad[d][0] > 0) {
      valid = and_cond(k, valid, kx_op(k, IR_GE, KILN_BOOL, i, i64(k, 0), NULL));
      sidx[d] = kx_op(k, IR_MAXIMUM, KILN_I64, sidx[d], i64(k, 0), NULL);
    }
    if (n->attr.pad[d][1] > 0) {
      valid = and_cond(k, valid, kx_op(k, IR_LT, KILN_BOOL, i, kx_dim(k, s->shape[d]), NULL));
      sidx[d] = kx_op(k, IR_MINIMUM, KILN_I64, sidx[d], kx_dim(k, s->shape[d] - 1), NULL);
    }
  }
  t->keep[1] = valid;
  return ask(t, 0);
}

/* UNFOLD (ops.def) reads the window's input element where one lies in
 * range (keep: the in-range condition), else 0; the position is clamped
 * into the input so the load stays in bounds, as a pad's is. Division and
 * remainder only see non-negative values. */
static kexpr *step_unfold(lower_ctx *c, task *t) {
  const ir_node *n = t->n, *s = n->src[0];
  const ir_attr *a = &n->attr;
  kernel *k = c->k;
  kiln_dtype vt = ct(n->dtype);
  if (t->step) return kx_op(k, IR_WHERE, vt, t->keep[1], t->got, kx_float(k, vt, 0));
  kexpr **sidx = t->need_idx, *valid = NULL;
  int64_t cg = s->shape[1] / n->shape[1], taps = a->win.k[0] * a->win.k[1];
  kexpr *tap = kx_imod(k, t->idx[2], kx_dim(k, taps));
  kexpr *tp[2] = {kx_idiv(k, tap, i64(k, a->win.k[1])), kx_imod(k, tap, i64(k, a->win.k[1]))};
  kexpr *o[2] = {kx_idiv(k, t->idx[3], i64(k, a->win.out[1])), kx_imod(k, t->idx[3], i64(k, a->win.out[1]))};
  sidx[0] = t->idx[0];
  sidx[1] = kx_iadd(k, kx_imul(k, t->idx[1], kx_dim(k, cg)), kx_idiv(k, t->idx[2], kx_dim(k, taps)));
  for (int d = 0; d < 2; d++) {
    kexpr *at = kx_iadd(k, kx_iadd(k, kx_imul(k, o[d], i64(k, a->win.s[d])), kx_imul(k, tp[d], i64(k, a->win.d[d]))),
                        i64(k, -a->win.p[d]));
    valid = and_cond(k, valid, kx_op(k, IR_GE, KILN_BOOL, at, i64(k, 0), NULL));
    kexpr *pos = kx_op(k, IR_MAXIMUM, KILN_I64, at, i64(k, 0), NULL), *u = i64(k, a->win.u[d]);
    if (a->win.u[d] > 1) {
      valid = and_cond(k, valid, kx_op(k, IR_EQ, KILN_BOOL, kx_imod(k, pos, u), i64(k, 0), NULL));
      pos = kx_idiv(k, pos, u);
    }
    kexpr *len = kx_dim(k, s->shape[2 + d]);
    valid = and_cond(k, valid, kx_op(k, IR_LT, KILN_BOOL, pos, len, NULL));
    sidx[2 + d] = kx_op(k, IR_MINIMUM, KILN_I64, pos, kx_dim(k, s->shape[2 + d] - 1), NULL);
  }
  t->keep[1] = valid;
  return ask(t, 0);
}

/* Cat reads the first source below its size along dim, the second above;
 * when both have elements both indices are clamped so neither load can
 * leave its buffer. An empty side is never read. Each side converts to the
 * promoted dtype as a cast would (keep: the converted sides). */
static kexpr *step_cat(lower_ctx *c, task *t) {
  const ir_node *n = t->n;
  kernel *k = c->k;
  int dim = n->attr.dim;
  int64_t na = n->src[0]->shape[dim];
  bool both = na != 0 && n->src[1]->shape[dim] != 0;
  int first_side = na == 0 ? 1 : 0;
  if (t->step) {
    int side = first_side + t->step - 1;
    t->keep[t->step - 1] = convert(k, t->got, n->src[side]->dtype, n->dtype);
  }
  if (t->step < (both ? 2 : 1)) {
    int side = first_side + t->step;
    kexpr **sidx = t->need_idx;
    copy_index(sidx, t->idx, n->ndim);
    if (side) sidx[dim] = kx_iadd(k, t->idx[dim], kx_dim(k, -na));
    if (both && side) sidx[dim] = kx_op(k, IR_MAXIMUM, KILN_I64, sidx[dim], i64(k, 0), NULL);
    if (both && !side) sidx[dim] = kx_op(k, IR_MINIMUM, KILN_I64, t->idx[dim], kx_dim(k, na - 1), NULL);
    return ask(t, side);
  }
  if (!both) return t->keep[0];
  kexpr *first = kx_op(k, IR_LT, KILN_BOOL, t->idx[dim], kx_dim(k, na), NULL);
  return kx_op(k, IR_WHERE, ct(n->dtype), first, t->keep[0], t->keep[1]);
}

/* Each source at the same index, converted to the compute dtype (keep). */
/* x ** e for an exponent the rule (passes/values.c) writes into the code:
 * square and multiply in f64 (pow computes f32 in f64 too), then 1/x^|e|
 * for a negative e; x ** 0 is 1 even for nan, as pow says. */
static kexpr *small_pow(kernel *k, kexpr *x, kiln_dtype t, double e) {
  kexpr *one = kx_float(k, KILN_F64, 1), *p = one, *sq = kx_cast(k, x, KILN_F64);
  for (int64_t m = (int64_t)fabs(e); m; m >>= 1, sq = m ? fop(k, IR_MUL, KILN_F64, sq, sq) : sq)
    if (m & 1) p = p == one ? sq : fop(k, IR_MUL, KILN_F64, p, sq);
  if (e < 0) p = fop(k, IR_DIV, KILN_F64, one, p);
  return kx_cast(k, p, t);
}

static int frame_for(lower_ctx *c, kexpr *const *idx, int ndim);
static void frame_insert(frame *f, kstmt *s);

/* A kernel check (ir/kernel.h) of node n at index idx: when fail (bool) is
 * true the launch fails with code at n's flat position there and what
 * (i64; NULL: 0), reported under n's op and file:line. It goes in the
 * innermost loop the index uses, after what that loop already holds (so
 * before the store of the value it guards). check_at reports the position
 * in node at (of n's op), whose shape idx indexes: an index tensor's. */
static void check_at(lower_ctx *c, const ir_node *n, const ir_node *at, kexpr *const *idx, kc_code code, kexpr *fail,
                     kexpr *what) {
  kc_site site = {.api = n->api ? n->api : ir_ops[n->op].name, .line = n->line, .dtype = at->dtype, .ndim = at->ndim};
  snprintf(site.file, sizeof site.file, "%s", n->file ? n->file : "?");
  memcpy(site.shape, at->shape, sizeof(int64_t) * (size_t)at->ndim);
  kstmt *s = ks_check(c->k, code, k_site(c->k, &site), fail, flat_index(c->k, at, idx), what);
  frame_insert(&c->frames[frame_for(c, idx, at->ndim)], s);
}

static void add_check(lower_ctx *c, const ir_node *n, kexpr *const *idx, kc_code code, kexpr *fail, kexpr *what) {
  check_at(c, n, n, idx, code, fail, what);
}

/* Integer division and remainder by zero: PyTorch's ZeroDivisionError. */
static bool divides_ints(const ir_node *n) {
  bool division = n->op == IR_FLOOR_DIVIDE || n->op == IR_TRUNC_DIVIDE || n->op == IR_REMAINDER || n->op == IR_FMOD;
  return division && !ir_is_float(n->attr.compute);
}

static kexpr *step_elementwise(lower_ctx *c, task *t) {
  const ir_node *n = t->n;
  double e;
  bool code_pow = pass_value_is_code(n, 1, &e);   /* only the base is read */
  if (t->step) {
    int s = t->step - 1;
    kiln_dtype to = n->op == IR_WHERE && s == 0 ? KILN_BOOL : n->attr.compute;
    t->keep[s] = convert(c->k, t->got, n->src[s]->dtype, to);
  }
  if (t->step < (code_pow ? 1 : n->nsrc)) {
    copy_index(t->need_idx, t->idx, n->ndim);
    return ask(t, t->step);
  }
  if (code_pow) return kx_cast(c->k, small_pow(c->k, t->keep[0], ct(n->attr.compute), e), ct(n->dtype));
  kiln_dtype rt = ir_ops[n->op].typing == TR_BOOL ? KILN_BOOL : ct(n->attr.compute);
  if (divides_ints(n))
    add_check(c, n, t->idx, KC_DIV_ZERO, fop(c->k, IR_EQ, KILN_BOOL, t->keep[1], kx_int(c->k, t->keep[1]->type, 0)),
              NULL);
  return kx_cast(c->k, kx_op(c->k, n->op, rt, t->keep[0], t->keep[1], t->keep[2]), ct(n->dtype));
}

/* ---- indexing ------------------------------------------------------------
 * An index tensor's value v (any integer dtype; ix's element at `at`) as a
 * position along a dim of `size`: negative counts from the end. One out of
 * range fails the launch (a kernel check of n's op, at ix's position, with
 * the value); the position is clamped into 0..size-1 all the same, so no
 * load or store leaves its buffer. */
static kexpr *table_index(lower_ctx *c, const ir_node *n, const ir_node *ix, kexpr *const *at, kexpr *v, int64_t size) {
  kernel *k = c->k;
  kexpr *v64 = kx_cast(k, v, KILN_I64), *len = kx_dim(k, size);
  kexpr *neg = kx_op(k, IR_LT, KILN_BOOL, v64, i64(k, 0), NULL);
  kexpr *i = kx_op(k, IR_WHERE, KILN_I64, neg, kx_iadd(k, v64, len), v64);
  kexpr *bad = kx_op(k, IR_LOGICAL_OR, KILN_BOOL, kx_op(k, IR_LT, KILN_BOOL, i, i64(k, 0), NULL),
                     kx_op(k, IR_GE, KILN_BOOL, i, len, NULL), NULL);
  check_at(c, n, ix, at, KC_INDEX, bad, v64);
  i = kx_op(k, IR_MAXIMUM, KILN_I64, i, i64(k, 0), NULL);
  return kx_op(k, IR_MINIMUM, KILN_I64, i, kx_dim(k, size - 1), NULL);
}

/* GATHER reads its index tensor at idx, then its table at idx with the
 * indexed dim replaced by that value. An empty table is never read (the
 * frontend refused any index into it). */
static kexpr *step_gather(lower_ctx *c, task *t) {
  const ir_node *n = t->n, *tab = n->src[0];
  int dim = n->attr.dim;
  if (t->step == 2) return t->got;
  if (ir_numel(tab->ndim, tab->shape) == 0) return kx_cast(c->k, i64(c->k, 0), ct(n->dtype));
  copy_index(t->need_idx, t->idx, n->ndim);
  if (t->step == 0) return ask(t, 1);
  t->need_idx[dim] = table_index(c, n, n->src[1], t->idx, t->got, tab->shape[dim]);
  return ask(t, 0);
}

/* ---- frames ------------------------------------------------------------- */
static void frame_insert(frame *f, kstmt *s) {
  s->next = *f->tail;
  *f->tail = s;
  f->tail = &s->next;
}

/* Links a frame's inner content (a nested loop or gemm): later inserts into
 * the frame go before it. */
static void frame_set_inner(frame *f, kstmt *s) {
  s->next = *f->tail;
  *f->tail = s;
}

/* Room for one more element in a doubling array (*v, *cap of them); out of
 * memory false, with k->oom set. */
static bool grow(kernel *k, void **v, int n, size_t *cap, size_t elem) {
  return ir_grow(v, cap, (size_t)n, (size_t)n + 1, elem, NULL) || !(k->oom = true);
}

/* Out of memory the frame is not pushed: pass_lower made room for the
 * first, so c->frames[c->nframes - 1] stays a frame. */
static void push_frame(lower_ctx *c, int var, kstmt **tail) {
  if (grow(c->k, (void **)&c->frames, c->nframes, &c->frames_cap, sizeof *c->frames))
    c->frames[c->nframes++] = (frame){var, tail};
}

static bool uses_var(const kexpr *e, int var) {
  if (e->kind == KX_VAR) return e->var == var;
  return (e->a && uses_var(e->a, var)) || (e->b && uses_var(e->b, var)) || (e->c && uses_var(e->c, var));
}

/* The innermost frame whose loop variable the index uses (0: top level). An
 * index, not a pointer: frames grow. */
static int frame_for(lower_ctx *c, kexpr *const *idx, int ndim) {
  for (int f = c->nframes - 1; f > 0; f--)
    for (int d = 0; d < ndim; d++)
      if (uses_var(idx[d], c->frames[f].var)) return f;
  return 0;
}

/* ---- reductions --------------------------------------------------------- */
/* The smallest (lowest) or largest value of t: the identity of max / min. */
static kexpr *extreme(kernel *k, kiln_dtype t, bool lowest) {
  if (ir_is_float(t)) return kx_float(k, t, lowest ? -INFINITY : INFINITY);
  if (t == KILN_BOOL || !ir_dtypes[t].is_signed)
    return kx_int(k, t, lowest ? 0 : t == KILN_BOOL ? 1 : (int64_t)((1ull << (8 * ir_dtypes[t].size)) - 1));
  int bits = 8 * (int)ir_dtypes[t].size;
  int64_t max = bits == 64 ? INT64_MAX : (int64_t)((1ull << (bits - 1)) - 1);
  return kx_int(k, t, lowest ? -max - 1 : max);
}

typedef struct {
  ir_op update;         /* KS_UPDATE op (arg-reductions: when a value wins) */
  bool arg;
  bool lowest_init;     /* starts from the lowest value (max-like) */
} reduce_rule;

static reduce_rule rule_of(ir_op op) {
  switch (op) {
  case IR_SUM: return (reduce_rule){IR_ADD, false, false};
  case IR_PROD: return (reduce_rule){IR_MUL, false, false};
  case IR_MAX: case IR_ANY: return (reduce_rule){IR_MAXIMUM, false, true};
  case IR_MIN: case IR_ALL: return (reduce_rule){IR_MINIMUM, false, false};
  case IR_ARGMAX: return (reduce_rule){IR_GT, true, true};
  case IR_ARGMIN: return (reduce_rule){IR_LT, true, false};
  default: IR_ASSERT(!"not a reduction");
  }
}

static kexpr *reduce_init(kernel *k, ir_op op, kiln_dtype t) {
  if (op == IR_SUM) return ir_is_float(t) ? kx_float(k, t, 0) : kx_int(k, t, 0);
  if (op == IR_PROD) return ir_is_float(t) ? kx_float(k, t, 1) : kx_int(k, t, 1);
  return extreme(k, t, rule_of(op).lowest_init);
}

static kiln_dtype acc_dtype(const ir_node *n) {
  return n->op == IR_ANY || n->op == IR_ALL ? KILN_BOOL : ct(n->attr.compute);
}

/* acc = init; for r...: acc = update(acc, src[idx with reduced dims = r]),
 * placed in the frame the output index needs; the value is the accumulator.
 * Step 0 opens the loops over the reduced dims (their frames stay open while
 * the source is lowered inside them); step 1 closes them. */
static kexpr *reduce_open(lower_ctx *c, task *t) {
  kernel *k = c->k;
  const ir_node *n = t->n, *s = n->src[0];
  t->home = frame_for(c, t->idx, n->ndim);
  t->base = c->nframes;
  kstmt **link = &t->outer;
  kexpr *flat = kx_int(k, KILN_I64, 0);
  for (int d = 0; d < s->ndim; d++) {
    if (!(n->attr.axes >> d & 1)) {
      t->need_idx[d] = t->idx[d];
      continue;
    }
    int v = k_var(k);
    kstmt *loop = ks_loop(k, v, s->shape[d], KL_SERIAL);
    *link = loop;
    link = &loop->body;
    push_frame(c, v, link);
    t->need_idx[d] = kx_var(k, v);
    flat = kx_iadd(k, kx_imul(k, flat, kx_dim(k, s->shape[d])), t->need_idx[d]);
  }
  t->keep[0] = flat;
  return ask(t, 0);
}

static kexpr *reduce_close(lower_ctx *c, task *t) {
  kernel *k = c->k;
  const ir_node *n = t->n;
  reduce_rule r = rule_of(n->op);
  kiln_dtype at = acc_dtype(n);
  kexpr *v = kx_cast(k, t->got, at);
  int acc = k_acc(k), acc2 = r.arg ? k_acc(k) : -1;
  kstmt *upd = r.arg ? ks_argupdate(k, acc, acc2, r.update, v, t->keep[0]) : ks_update(k, acc, r.update, v);
  if (c->nframes > t->base) frame_insert(&c->frames[c->nframes - 1], upd);
  else t->outer = upd;  /* nothing reduced: one update */
  c->nframes = t->base;
  frame *home = &c->frames[t->home];
  frame_insert(home, ks_acc(k, acc, at, reduce_init(k, n->op, at)));
  if (r.arg) frame_insert(home, ks_acc(k, acc2, KILN_I64, kx_int(k, KILN_I64, 0)));
  frame_insert(home, t->outer);
  kexpr *res = r.arg ? kx_acc(k, acc2, KILN_I64) : kx_acc(k, acc, at);
  return kx_cast(k, res, ct(n->dtype));
}

/* ---- scans ---------------------------------------------------------------
 * A group holding a scan along dim d runs the other dims outside (the first
 * parallel) and d innermost, in order (scan_nest). The scan's value at the
 * group's index is a carried accumulator: declared before the loop over d,
 * updated by a KS_CARRY in its body before the stores that read it.
 * On the CPU, when d is not the innermost dim, the innermost dim is a row of
 * lane accumulators instead (scan_lane_nest): the loop over d runs outside
 * a vector loop over the row, so the source is read in memory order and
 * each step of the scan is a vector operation, not a strided walk per line.
 * (A GPU runs each line on a thread of its own, the threads side by side
 * along the kept dims, which reads in memory order already.) */
#define SCAN_LANES_MAX 4096   /* a row of lane accumulators stays in L1 */

static int64_t row_block(int64_t n);
static int scan_dim(const ir_node *n) {
  int d = 0;
  while (!(n->attr.axes >> d & 1)) d++;
  return d;
}

static const ir_node *group_scan(const pass_graph *g, int gi) {
  for (int i = 0; i < g->n; i++)
    if (ir_op_has(g->topo[i]->op, IR_SCAN) && g->group_of[i] == gi) return g->topo[i];
  return NULL;
}

/* A loop to extent inside the innermost frame, and its frame; its variable. */
static kexpr *open_loop(lower_ctx *c, int64_t extent, kl_kind kind) {
  kernel *k = c->k;
  int v = k_var(k);
  kstmt *loop = ks_loop(k, v, extent, kind);
  frame_set_inner(&c->frames[c->nframes - 1], loop);
  push_frame(c, v, &loop->body);
  return kx_var(k, v);
}

/* The loops over the group's dims, the first parallel, scan dim d last;
 * idx[e] is dim e's index. A segmented scan (split_scan.c) runs its
 * segments outermost, in parallel, and d within each; its accumulator
 * starts at each segment from src[1] there. */
static void scan_nest(lower_ctx *c, const pass_group *pg, const ir_node *scan, kexpr **idx) {
  kernel *k = c->k;
  int d = scan_dim(scan);
  int64_t seg = scan->attr.segment, len = pg->shape[d];
  push_frame(c, -1, &k->body);
  c->block = seg ? open_loop(c, len / seg, KL_PARALLEL) : NULL;
  kexpr *start = seg ? kx_imul(k, c->block, kx_dim(k, seg)) : NULL;
  for (int e = 0; e < pg->ndim; e++)
    if (e != d) idx[e] = open_loop(c, pg->shape[e], c->nframes == 1 ? KL_PARALLEL : KL_SERIAL);
  idx[d] = open_loop(c, seg ? seg : len, KL_SERIAL);
  if (seg) idx[d] = kx_iadd(k, start, idx[d]);
}

/* The lanes of a CPU scan along d of group pg: the innermost dim, whole or
 * in blocks (the largest divisor in [16, 1024], which the threads split when
 * no other dim is outside); 0 when the scan runs as lines: d innermost, a
 * GPU kernel, nothing to scan, or a long row without such a divisor. */
static int64_t scan_lanes(const pass_graph *g, const pass_group *pg, int d) {
  int nd = pg->ndim;
  if (d == nd - 1 || pass_target(g, pg->outs[0]) != KILN_CPU || ir_numel(nd, pg->shape) == 0) return 0;
  int64_t w = pg->shape[nd - 1];
  int64_t bs = nd > 2 && w <= SCAN_LANES_MAX ? w : row_block(w);
  return w > 1 && bs <= SCAN_LANES_MAX ? bs : 0;
}

/* for the dims but d and the last (the first parallel) { for blocks of the
 * last dim (parallel when no dim is outside) { for lanes: acc = init;
 * for d { for lanes (vector) { carries, stores } } } }. */
static void scan_lane_nest(lower_ctx *c, const pass_group *pg, int d, int64_t bs, kexpr **idx) {
  kernel *k = c->k;
  int nd = pg->ndim;
  push_frame(c, -1, &k->body);
  for (int e = 0; e < nd - 1; e++)
    if (e != d) idx[e] = open_loop(c, pg->shape[e], c->nframes == 1 ? KL_PARALLEL : KL_SERIAL);
  kexpr *t = i64(k, 0);
  if (pg->shape[nd - 1] > bs)
    t = kx_imul(k, open_loop(c, pg->shape[nd - 1] / bs, c->nframes == 1 ? KL_PARALLEL : KL_SERIAL), i64(k, bs));
  int vi = k_var(k);
  kstmt *init = ks_loop(k, vi, bs, KL_VECTOR);
  frame_insert(&c->frames[c->nframes - 1], init);
  c->lane_init = (frame){vi, &init->body};
  idx[d] = open_loop(c, pg->shape[d], KL_SERIAL);
  c->lane = open_loop(c, bs, KL_VECTOR);
  c->lanes = bs;
  idx[nd - 1] = kx_iadd(k, t, c->lane);
}

/* A new accumulator of a scan (type t, starting at init) and its value
 * before the carry; in scan_lane_nest's lanes, lane accumulators. */
static kexpr *scan_acc(lower_ctx *c, int home, int acc, kiln_dtype t, kexpr *init) {
  kernel *k = c->k;
  kstmt *s = ks_acc(k, acc, t, init);
  if (!c->lanes) {
    frame_insert(&c->frames[home], s);
    return kx_acc(k, acc, t);
  }
  ks_lanes(s, c->lanes, kx_var(k, c->lane_init.var));
  frame_insert(&c->lane_init, s);
  return kx_acc_lane(k, acc, t, c->lane);
}

static kstmt *scan_carry(lower_ctx *c, int acc, ir_op op, kiln_dtype t, kexpr *value) {
  kstmt *s = ks_carry(c->k, acc, op, t, value);
  if (c->lanes) ks_lanes(s, c->lanes, c->lane);
  frame_insert(&c->frames[c->nframes - 1], s);
  return s;
}

static kexpr *scan_init(kernel *k, ir_op op, kiln_dtype t) {
  switch (op) {
  case IR_CUMSUM: return reduce_init(k, IR_SUM, t);
  case IR_CUMPROD: return reduce_init(k, IR_PROD, t);
  case IR_CUMMIN: case IR_CUMARGMIN: return extreme(k, t, false);
  default: return extreme(k, t, true);   /* max-like, and logcumsumexp's -inf */
  }
}

/* PyTorch's log-add-exp: max + log(1 + exp(min - max)); nan propagates
 * (maximum and minimum do), two equal infinities give acc. */
static kexpr *log_add_exp(kernel *k, kiln_dtype t, kexpr *acc, kexpr *x) {
  kexpr *mx = fop(k, IR_MAXIMUM, t, acc, x), *mn = fop(k, IR_MINIMUM, t, acc, x);
  kexpr *finite = kx_op(k, IR_LT, KILN_BOOL, kx_op(k, IR_ABS, t, mn, NULL, NULL), kx_float(k, t, INFINITY), NULL);
  kexpr *use = kx_op(k, IR_LOGICAL_OR, KILN_BOOL, kx_op(k, IR_NE, KILN_BOOL, mn, mx, NULL), finite, NULL);
  kexpr *e = kx_op(k, IR_EXP, t, fop(k, IR_SUB, t, mn, mx), NULL, NULL);
  kexpr *sum = fop(k, IR_ADD, t, mx, kx_op(k, IR_LOG, t, fop(k, IR_ADD, t, kx_float(k, t, 1), e), NULL, NULL));
  return kx_op(k, IR_WHERE, t, use, sum, acc);
}

/* cummax/cummin's position: x takes over when it is nan, or when acc is
 * not and x >= acc (<= for min): ties and nans move to the latest. */
static kexpr *scan_wins(kernel *k, ir_op op, kiln_dtype t, kexpr *acc, kexpr *x) {
  kexpr *cmp = kx_op(k, op == IR_CUMARGMAX ? IR_GE : IR_LE, KILN_BOOL, x, acc, NULL);
  if (!ir_is_float(t)) return cmp;
  kexpr *acc_ok = kx_op(k, IR_EQ, KILN_BOOL, acc, acc, NULL);
  return kx_op(k, IR_LOGICAL_OR, KILN_BOOL, kx_op(k, IR_NE, KILN_BOOL, x, x, NULL),
               kx_op(k, IR_LOGICAL_AND, KILN_BOOL, acc_ok, cmp, NULL), NULL);
}

/* Step 0 asks for the source; a segmented scan's later steps keep what came
 * and ask for the segment's start (src[1] at the kept dims and the segment;
 * a position's scan then src[2], the position of that start). */
static kexpr *scan_step(lower_ctx *c, task *t) {
  kernel *k = c->k;
  const ir_node *n = t->n;
  int d = scan_dim(n), home = c->nframes - 2;
  if (t->step < n->nsrc) {
    copy_index(t->need_idx, t->idx, n->ndim);
    if (t->step) {
      t->keep[t->step - 1] = t->got;
      t->need_idx[d] = c->block;
    }
    return ask(t, t->step);
  }
  IR_ASSERT(home >= 0 && uses_var(t->idx[d], c->frames[home + !c->lanes].var));
  kiln_dtype at = ct(n->attr.compute);
  kexpr *x = kx_cast(k, n->nsrc > 1 ? t->keep[0] : t->got, at);
  kexpr *init = n->nsrc > 1 ? kx_cast(k, n->nsrc > 2 ? t->keep[1] : t->got, at) : scan_init(k, n->op, at);
  int acc = k_acc(k);
  kexpr *cur = scan_acc(c, home, acc, at, init), *next;
  kstmt *pos = NULL;
  switch (n->op) {
  case IR_CUMSUM: next = fop(k, IR_ADD, at, cur, x); break;
  case IR_CUMPROD: next = fop(k, IR_MUL, at, cur, x); break;
  case IR_CUMMAX: next = fop(k, IR_MAXIMUM, at, cur, x); break;
  case IR_CUMMIN: next = fop(k, IR_MINIMUM, at, cur, x); break;
  case IR_LOGCUMSUMEXP: next = log_add_exp(k, at, cur, x); break;
  default: {  /* CUMARGMAX, CUMARGMIN: the position first, from the old acc */
    kexpr *wins = scan_wins(k, n->op, at, cur, x);
    int ia = k_acc(k);
    kexpr *where = scan_acc(c, home, ia, KILN_I64, n->nsrc > 2 ? t->got : i64(k, 0));
    pos = scan_carry(c, ia, n->op, KILN_I64, kx_op(k, IR_WHERE, KILN_I64, wins, t->idx[d], where));
    next = kx_op(k, IR_WHERE, at, wins, x, cur);
  }
  }
  kstmt *carry = scan_carry(c, acc, n->op, at, next);
  return kx_cast(k, kx_acc_after(k, pos ? pos : carry), ct(n->dtype));
}

/* One step of t: a node stored elsewhere is loaded, a source computed;
 * the other ops ask for their sources first. */
static kexpr *step(lower_ctx *c, task *t) {
  const ir_node *n = t->n;
  int i = n->scratch;
  bool loaded = n->op == IR_BUFFER || (c->g->materialized[i] && c->g->group_of[i] != c->gi);
  if (loaded) return emit_load(c, (ir_node *)n, t->idx);
  if (ir_op_has(n->op, IR_SRC)) return emit_source(c, n, t->idx);
  if (n->op == IR_PAD) return step_pad(c, t);
  if (n->op == IR_CAT) return step_cat(c, t);
  if (n->op == IR_UNFOLD) return step_unfold(c, t);
  if (n->op == IR_GATHER) return step_gather(c, t);
  if (ir_op_has(n->op, IR_MOVE)) return step_view(c, t);
  if (n->op == IR_CAST) return step_cast(c, t);
  if (ir_op_has(n->op, IR_REDUCE)) return t->step ? reduce_close(c, t) : reduce_open(c, t);
  if (ir_op_has(n->op, IR_SCAN)) return scan_step(c, t);
  IR_ASSERT(ir_op_has(n->op, IR_EW));
  return step_elementwise(c, t);
}

static void push_task(lower_ctx *c, const ir_node *n, kexpr *const *idx) {
  if (!grow(c->k, (void **)&c->tasks, c->ntasks, &c->tasks_cap, sizeof *c->tasks)) return;
  task *t = &c->tasks[c->ntasks++];
  *t = (task){.n = n};
  copy_index(t->idx, idx, n->ndim);
}

/* n's value at idx: each (node, index) is lowered once (the memo table), on
 * the explicit stack above what is already there. Out of memory it stops
 * and gives the stand-in (the builders' answer once k->oom is set). */
static kexpr *emit(lower_ctx *c, const ir_node *n, kexpr *const *idx) {
  int bottom = c->ntasks;
  kexpr *v = NULL;
  push_task(c, n, idx);
  while (c->ntasks > bottom && !c->k->oom) {
    task *t = &c->tasks[c->ntasks - 1];
    memo_entry *m = t->step ? NULL : memo_slot(c, t->n, t->idx);
    if (m && m->node) {
      v = m->value;
    } else {
      t->got = v;
      if (!(v = step(c, t))) {
        kexpr *sidx[KILN_MAX_DIMS];   /* copied out: pushing may move t */
        const ir_node *s = t->need;
        copy_index(sidx, t->need_idx, s->ndim);
        t->step++;
        push_task(c, s, sidx);
        continue;
      }
      memo_put(c, t->n, t->idx, v);
    }
    c->ntasks--;
  }
  if (!c->k->oom) return v;
  c->ntasks = bottom;
  return kx_int(c->k, KILN_I64, 0);
}

/* ---- the loop nest ------------------------------------------------------ */
/* for v0 (parallel) { for v1 { ... for v[n-1] (vector) { ... } } } over the
 * first n dims of the group, one frame per loop; idx[d] = v[d]. */
static void nest(lower_ctx *c, int n, const int64_t *shape, kl_kind outer, kl_kind inner, kexpr **idx) {
  kernel *k = c->k;
  for (int d = 0; d < n; d++) {
    int v = k_var(k);
    kl_kind kind = d == 0 ? outer : d == n - 1 ? inner : KL_SERIAL;
    kstmt *loop = ks_loop(k, v, shape[d], kind);
    frame_set_inner(&c->frames[c->nframes - 1], loop);
    push_frame(c, v, &loop->body);
    idx[d] = kx_var(k, v);
  }
}

static void loop_nest(lower_ctx *c, const pass_group *pg, int n, kexpr **idx) {
  push_frame(c, -1, &c->k->body);
  nest(c, n, pg->shape, KL_PARALLEL, n == pg->ndim ? KL_VECTOR : KL_SERIAL, idx);
}

/* The strided view a GEMM reads for operand n (fuse.c materialized every
 * operand that is not one): strides and offset in elements of the loaded
 * node it returns. */
static ir_node *gemm_view(lower_ctx *c, ir_node *n, int64_t *st, int64_t *off) {
  int i = n->scratch;
  if (n->op == IR_BUFFER) {
    memcpy(st, n->strides, sizeof(int64_t) * (size_t)n->ndim);
    *off = n->offset;
    return n;
  }
  if (c->g->materialized[i] && c->g->group_of[i] != c->gi) {
    ir_contiguous_strides(n->ndim, n->shape, st);
    *off = 0;
    return n;
  }
  int64_t s[KILN_MAX_DIMS];
  ir_node *leaf = gemm_view(c, n->src[0], s, off);
  IR_ASSERT(pass_view_strides(n, s, st, off));
  return leaf;
}

static void gemm_operand(lower_ctx *c, ir_node *n, kexpr *const *idx, int *buf, kexpr **off, int64_t *s0,
                         int64_t *s1) {
  int64_t st[KILN_MAX_DIMS], o = 0;
  ir_node *leaf = gemm_view(c, n, st, &o);
  *buf = input_param(c, leaf);
  *off = linear(c->k, n->ndim - 2, st, o, idx);
  *s0 = st[n->ndim - 2];
  *s1 = st[n->ndim - 1];
}

/* B as a convolution's window (ir/kernel.h's win): the UNFOLD's input read
 * through its strides, the batch and group in b_off. */
static void gemm_window(lower_ctx *c, const ir_node *n, kexpr *const *idx, kstmt *gs) {
  const ir_attr *a = &n->attr;
  const ir_node *x = n->src[0];
  int64_t st[KILN_MAX_DIMS], o = 0, cg = x->shape[1] / n->shape[1];
  ir_node *leaf = gemm_view(c, (ir_node *)x, st, &o);
  gs->gemm.b_buf = input_param(c, leaf);
  gs->gemm.b_off = linear(c->k, 2, (int64_t[]){st[0], cg * st[1]}, o, idx);
  int64_t *w = ir_arena_alloc(c->k->arena, sizeof(int64_t) * KW_N);
  int64_t v[KW_N] = {[KW_TAPS] = a->win.k[0] * a->win.k[1], [KW_KW] = a->win.k[1], [KW_OW] = a->win.out[1],
                     [KW_SH] = a->win.s[0], [KW_SW] = a->win.s[1], [KW_DH] = a->win.d[0], [KW_DW] = a->win.d[1],
                     [KW_PH] = a->win.p[0], [KW_PW] = a->win.p[1], [KW_UH] = a->win.u[0], [KW_UW] = a->win.u[1],
                     [KW_IN_H] = x->shape[2], [KW_IN_W] = x->shape[3], [KW_SC] = st[1], [KW_SY] = st[2], [KW_SX] = st[3]};
  memcpy(w, v, sizeof v);
  gs->gemm.win = w;
}

/* Whether the product's B is a convolution's window, read in place. */
static bool gemm_windowed(const lower_ctx *c, const ir_node *mm) {
  const ir_node *b = mm->src[1];
  return b->op == IR_UNFOLD && !c->g->materialized[b->scratch];
}

/* Batch loops around one KS_GEMM; the epilogue stores go in its body, where
 * the matmul's value at (i, j) is the GEMM's accumulator. */
static void gemm_nest(lower_ctx *c, ir_node *mm, kexpr **idx) {
  kernel *k = c->k;
  int nd = mm->ndim;
  push_frame(c, -1, &k->body);
  nest(c, nd - 2, mm->shape, KL_PARALLEL, KL_SERIAL, idx);
  kiln_dtype at = ct(mm->dtype);
  int acc = k_acc(k);
  kstmt *gs = ks_gemm(k, acc, at, mm->shape[nd - 2], mm->shape[nd - 1], mm->src[0]->shape[nd - 1]);
  frame_set_inner(&c->frames[c->nframes - 1], gs);
  idx[nd - 2] = kx_var(k, gs->var);
  idx[nd - 1] = kx_var(k, gs->gemm.var_j);
  gemm_operand(c, mm->src[0], idx, &gs->gemm.a_buf, &gs->gemm.a_off, &gs->gemm.a_si, &gs->gemm.a_sk);
  if (gemm_windowed(c, mm)) gemm_window(c, mm->src[1], idx, gs);
  else gemm_operand(c, mm->src[1], idx, &gs->gemm.b_buf, &gs->gemm.b_off, &gs->gemm.b_sk, &gs->gemm.b_sn);
  ks_gemm_bind(k, gs);
  memo_put(c, mm, idx, kx_acc(k, acc, at));
  push_frame(c, gs->gemm.var_j, &gs->body);
}

/* ---- column reductions ----------------------------------------------------
 * out[o, t] = init; for r (reduced dims): for t (kept dims after them,
 * vectorized): out[o, t] = op(out[o, t], src[o, r, t]): the output row is
 * the vector of accumulators, so the source is read in memory order. The
 * parallel loop runs over the outer kept dims, or over blocks of t when there
 * are none (W6's column mean is one row of 2048 accumulators). */
static bool inlined_reduce_below(lower_ctx *c, const ir_node *n) {
  if (n->op == IR_BUFFER || (c->g->materialized[n->scratch] && c->g->group_of[n->scratch] != c->gi)) return false;
  for (int s = 0; s < n->nsrc; s++)
    if (ir_op_has(n->src[s]->op, IR_REDUCE) || inlined_reduce_below(c, n->src[s])) return true;
  return false;
}

/* Every output is a column reduction over the same dims [*p, *q], which
 * must be one block; each output holds its accumulator exactly (its storage
 * dtype is the accumulation dtype). Several outputs: fuse put reductions of
 * the same data in one kernel, which reads it once. */
static bool column_reduction(lower_ctx *c, const pass_group *pg, int *p, int *q) {
  for (int o = 0; o < pg->nout; o++) {
    const ir_node *n = pg->outs[o];
    if (!ir_op_has(n->op, IR_REDUCE) || !pass_column_sibling(pg->outs[0], n)) return false;
    if (rule_of(n->op).arg || ir_compute_dtype(n->dtype) != n->dtype || n->dtype != n->attr.compute) return false;
    if (n->op == IR_ANY || n->op == IR_ALL || inlined_reduce_below(c, n)) return false;
  }
  const ir_node *n = pg->outs[0];
  *p = *q = -1;
  for (int d = 0; d < n->ndim; d++)
    if (n->attr.axes >> d & 1) {
      if (*p >= 0 && *q != d - 1) return false;
      if (*p < 0) *p = d;
      *q = d;
    }
  return true;
}

/* The largest divisor of n in [16, 1024], or n: blocks of the kept row the
 * threads split when nothing else is parallel. */
static int64_t row_block(int64_t n) {
  for (int64_t b = 1024; b >= 16; b--)
    if (n % b == 0) return b;
  return n;
}

static void column_nest(lower_ctx *c, const pass_group *pg, int p, int q) {
  kernel *k = c->k;
  const ir_node *n = pg->outs[0], *s = n->src[0];
  int nd = n->ndim;
  int64_t inner = ir_numel(nd - q - 1, n->shape + q + 1);
  kexpr *idx[KILN_MAX_DIMS], *sidx[KILN_MAX_DIMS];
  loop_nest(c, pg, p, idx);  /* outer kept dims; the first is parallel */
  int64_t bs = p == 0 ? row_block(inner) : inner;
  kexpr *t = kx_int(k, KILN_I64, 0);
  if (p == 0) {
    int vb = k_var(k);
    kstmt *blocks = ks_loop(k, vb, inner / bs, KL_PARALLEL);
    frame_set_inner(&c->frames[c->nframes - 1], blocks);
    push_frame(c, vb, &blocks->body);
    t = kx_imul(k, kx_var(k, vb), kx_int(k, KILN_I64, bs));
  }
  int home = c->nframes - 1;   /* an index: emit below may grow the frames */
  int64_t ost[KILN_MAX_DIMS];
  ir_contiguous_strides(nd, n->shape, ost);
  kexpr *o = linear(k, p, ost, 0, idx);  /* the output row: outer dims lead, reduced dims are 1 */
  int vi = k_var(k);
  kstmt *init = ks_loop(k, vi, bs, KL_VECTOR), **last = &init->body;
  for (int i = 0; i < pg->nout; i++, last = &(*last)->next) {
    const ir_node *r = pg->outs[i];
    *last = ks_store(k, i, kx_iadd(k, o, kx_iadd(k, t, kx_var(k, vi))), reduce_init(k, r->op, r->dtype));
  }
  frame_insert(&c->frames[home], init);
  /* The innermost reduced dim runs `jam` source rows per step: each
   * accumulator is loaded and stored once per step, not once per row (the
   * stores bound the kernel otherwise); the fold order is unchanged. */
  int64_t rows = s->shape[q], jam = rows % 4 == 0 ? 4 : rows % 2 == 0 ? 2 : 1;
  kstmt *outer = NULL, **link = &outer;
  for (int d = p; d <= q; d++) {
    int v = k_var(k);
    kstmt *loop = ks_loop(k, v, d == q ? rows / jam : s->shape[d], KL_SERIAL);
    *link = loop;
    link = &loop->body;
    sidx[d] = d == q ? kx_imul(k, kx_var(k, v), kx_int(k, KILN_I64, jam)) : kx_var(k, v);
  }
  kexpr *row0 = sidx[q];
  int vj = k_var(k);
  kstmt *row = ks_loop(k, vj, bs, KL_VECTOR);
  *link = row;
  kexpr *tj = kx_iadd(k, t, kx_var(k, vj));
  for (int d = 0; d < p; d++) sidx[d] = idx[d];
  kexpr *rem = tj;  /* the kept dims after the reduced ones, from t + j */
  for (int d = nd - 1; d > q + 1; d--) {
    sidx[d] = kx_imod(k, rem, kx_int(k, KILN_I64, s->shape[d]));
    rem = kx_idiv(k, rem, kx_int(k, KILN_I64, s->shape[d]));
  }
  if (q + 1 < nd) sidx[q + 1] = rem;
  kexpr *out = kx_iadd(k, o, tj);
  last = &row->body;
  for (int i = 0; i < pg->nout; i++, last = &(*last)->next) {
    const ir_node *r = pg->outs[i];
    kexpr *acc = kx_load(k, i, out, r->dtype);
    for (int64_t j = 0; j < jam; j++) {
      sidx[q] = kx_iadd(k, row0, kx_int(k, KILN_I64, j));
      acc = kx_op(k, rule_of(r->op).update, r->dtype, acc, kx_cast(k, emit(c, r->src[0], sidx), r->dtype), NULL);
    }
    *last = ks_store(k, i, out, acc);
  }
  frame_insert(&c->frames[home], outer);
}

/* ---- scatters ---------------------------------------------------------------
 * out = src0 (one pass, vectorized), then one pass over the values src2 in
 * increasing position: out[the index with dim replaced by src1's value]
 * = src2's value, or that combined with what out holds. The whole kernel is
 * serial (no parallel loop: the runtime runs it once), so duplicate indices
 * apply in that order on every run and any thread count, and the pass's
 * read-modify-write is never vectorized. */
static ir_op scatter_combine(ir_op op) {
  switch (op) {
  case IR_SCATTER_ADD: return IR_ADD;
  case IR_SCATTER_MUL: return IR_MUL;
  case IR_SCATTER_MAX: return IR_MAXIMUM;
  case IR_SCATTER_MIN: return IR_MINIMUM;
  default: return IR_SCATTER;
  }
}

static void scatter_nest(lower_ctx *c, const ir_node *n) {
  kernel *k = c->k;
  const ir_node *ix = n->src[1];
  kiln_dtype t = ct(n->dtype);
  kexpr *idx[KILN_MAX_DIMS], *jdx[KILN_MAX_DIMS];
  push_frame(c, -1, &k->body);
  nest(c, n->ndim, n->shape, n->ndim == 1 ? KL_VECTOR : KL_SERIAL, KL_VECTOR, idx);
  frame_insert(&c->frames[c->nframes - 1], ks_store(k, 0, flat_index(k, n, idx), emit(c, n->src[0], idx)));
  c->nframes = 1;
  while (!k->oom && *c->frames[0].tail) c->frames[0].tail = &(*c->frames[0].tail)->next;   /* after the copy */
  if (ir_numel(ix->ndim, ix->shape) == 0) return;
  nest(c, ix->ndim, ix->shape, KL_SERIAL, KL_SERIAL, jdx);
  copy_index(idx, jdx, n->ndim);
  idx[n->attr.dim] = table_index(c, n, ix, jdx, emit(c, ix, jdx), n->shape[n->attr.dim]);
  kexpr *at = flat_index(k, n, idx), *v = emit(c, n->src[2], jdx);
  ir_op op = scatter_combine(n->op);
  if (op != IR_SCATTER) v = kx_op(k, op, t, kx_load(k, 0, at, t), v, NULL);
  frame_insert(&c->frames[c->nframes - 1], ks_store(k, 0, at, v));
}

/* ---- sorts ----------------------------------------------------------------
 * A sort group (fuse.c: a sort or top-k, with its positions' sibling) is a
 * loop over its lines (every dim but the sorted one, the first parallel)
 * around one KS_SORT reading its source in place through its strides. */
static const ir_node *group_with(const pass_graph *g, int gi, unsigned flag) {
  for (int i = 0; i < g->n; i++)
    if (ir_op_has(g->topo[i]->op, flag) && g->group_of[i] == gi) return g->topo[i];
  return NULL;
}

static void sort_nest(lower_ctx *c, const pass_group *pg, const ir_node *n) {
  kernel *k = c->k;
  int d = scan_dim(n);
  kexpr *idx[KILN_MAX_DIMS];
  push_frame(c, -1, &k->body);
  for (int e = 0; e < pg->ndim; e++) {
    idx[e] = i64(k, 0);
    if (e == d) continue;
    int v = k_var(k);
    kstmt *loop = ks_loop(k, v, pg->shape[e], c->nframes == 1 ? KL_PARALLEL : KL_SERIAL);
    frame_set_inner(&c->frames[c->nframes - 1], loop);
    push_frame(c, v, &loop->body);
    idx[e] = kx_var(k, v);
  }
  ir_node *s = n->src[0];
  int64_t sst[KILN_MAX_DIMS], ost[KILN_MAX_DIMS], off = s->op == IR_BUFFER ? s->offset : 0;
  if (s->op == IR_BUFFER) memcpy(sst, s->strides, sizeof sst);
  else ir_contiguous_strides(s->ndim, s->shape, sst);
  ir_contiguous_strides(pg->ndim, pg->shape, ost);
  kstmt *st = ks_sort(k, s->shape[d], n->attr.sort_k, n->attr.descending);
  st->sort.in = input_param(c, s);
  st->sort.in_off = linear(k, s->ndim, sst, off, idx);
  st->sort.in_stride = sst[d];
  st->sort.out_off = linear(k, pg->ndim, ost, 0, idx);
  st->sort.out_stride = ost[d];
  for (int o = 0; o < pg->nout; o++) {
    ir_op op = pg->outs[o]->op;
    if (op == IR_SORT || op == IR_TOPK) st->sort.vals = o;
    else st->sort.idx = o;
  }
  frame_insert(&c->frames[c->nframes - 1], st);
}

/* ---- attention --------------------------------------------------------------
 * An attention group (fuse.c: the node alone) is one parallel loop over
 * (batch dims, block of ATTN_ROWS query rows; ATTN_ROWS_CUDA for CUDA),
 * flattened so that the rows of a single head split across threads (or
 * blocks) too, around one KS_ATTN that reads q, k, v and the mask in place
 * through their strides, as a GEMM reads its operands; key/value head h /
 * group serves query head h (GQA). */
enum { ATTN_ROWS = 48,        /* the GEMM driver's row block (gemm.c's MC) */
       ATTN_ROWS_CUDA = 64 };  /* a CUDA block's rows: a thread each (codegen_cuda/attention.cuh) */

static void attention_nest(lower_ctx *c, const ir_node *n) {
  kernel *k = c->k;
  int nd = n->ndim;
  int64_t rows = pass_target(c->g, n) == KILN_CPU ? ATTN_ROWS : ATTN_ROWS_CUDA;
  int64_t lq = n->shape[nd - 2], blocks = (lq + rows - 1) / rows, ost[KILN_MAX_DIMS];
  push_frame(c, -1, &k->body);
  int u = k_var(k);
  kstmt *loop = ks_loop(k, u, ir_numel(nd - 2, n->shape) * blocks, KL_PARALLEL);
  frame_set_inner(&c->frames[c->nframes - 1], loop);
  push_frame(c, u, &loop->body);
  kexpr *idx[KILN_MAX_DIMS], *kidx[KILN_MAX_DIMS], *rest = kx_var(k, u);
  kstmt *st = ks_attn(k, rows);
  st->attn.row0 = kx_imul(k, kx_imod(k, rest, i64(k, blocks)), i64(k, rows));
  rest = kx_idiv(k, rest, i64(k, blocks));
  for (int d = nd - 3; d >= 0; d--) {
    kidx[d] = idx[d] = kx_imod(k, rest, i64(k, n->shape[d]));
    rest = kx_idiv(k, rest, i64(k, n->shape[d]));
  }
  if (n->attr.group > 1) kidx[nd - 3] = kx_idiv(k, idx[nd - 3], i64(k, n->attr.group));
  gemm_operand(c, n->src[0], idx, &st->attn.q, &st->attn.q_off, &st->attn.st[0], &st->attn.st[1]);
  gemm_operand(c, n->src[1], kidx, &st->attn.k, &st->attn.k_off, &st->attn.st[2], &st->attn.st[3]);
  gemm_operand(c, n->src[2], kidx, &st->attn.v, &st->attn.v_off, &st->attn.st[4], &st->attn.st[5]);
  st->attn.m_off = i64(k, 0);
  if (n->nsrc > 3)
    gemm_operand(c, n->src[3], idx, &st->attn.mask, &st->attn.m_off, &st->attn.st[6], &st->attn.st[7]);
  ir_contiguous_strides(nd, n->shape, ost);
  st->attn.out = 0;
  st->attn.o_off = linear(k, nd - 2, ost, 0, idx);
  st->attn.st[8] = ost[nd - 2];
  st->attn.st[9] = ost[nd - 1];
  st->attn.l = lq;
  st->attn.s = n->src[1]->shape[nd - 2];
  st->attn.e = n->src[0]->shape[nd - 1];
  st->attn.ev = n->shape[nd - 1];
  st->attn.scale = n->attr.value;
  st->attn.causal = n->attr.causal;
  frame_insert(&c->frames[c->nframes - 1], st);
}

static ir_node *group_matmul(const pass_graph *g, int gi) {
  for (int i = 0; i < g->n; i++)
    if (g->topo[i]->op == IR_MATMUL && g->group_of[i] == gi) return g->topo[i];
  return NULL;
}

static bool same_shape(int ndim, const int64_t *shape, const ir_node *n) {
  return ndim == n->ndim && !memcmp(shape, n->shape, sizeof(int64_t) * (size_t)ndim);
}

/* A GEMM group whose outputs are a reshape of its product (fuse.c's
 * reshaped_epilogue): the outputs' index oidx from the GEMM's idx, and each
 * reshape of a node of the product's shape to the outputs' is that node's
 * value at idx (put in the memo table), so the epilogue reads the GEMM's
 * accumulator. */
static void reshaped_outputs(lower_ctx *c, const pass_group *pg, const ir_node *mm, kexpr *const *idx, kexpr **oidx) {
  ir_node out = {.ndim = pg->ndim}, view = {.op = IR_RESHAPE, .ndim = mm->ndim, .nsrc = 1, .src = {&out}};
  memcpy(out.shape, pg->shape, sizeof out.shape);
  memcpy(view.shape, mm->shape, sizeof view.shape);
  reshape_index(c->k, &view, idx, oidx);
  for (int i = 0; i < c->g->n; i++) {
    const ir_node *r = c->g->topo[i], *s = r->src[0];
    bool seeded = r->op == IR_RESHAPE && c->g->group_of[i] == c->gi && c->g->group_of[s->scratch] == c->gi;
    /* other reshapes in the group read their source at oidx's reshape */
    if (seeded && same_shape(s->ndim, s->shape, mm) && same_shape(r->ndim, r->shape, &out))
      memo_put(c, r, oidx, emit(c, s, idx));
  }
}

/* The group's kernel: every output stored at the group's index (a GEMM
 * group's: the product's, at the same flat position). */
static void store_outputs(lower_ctx *c, const pass_group *pg) {
  kernel *k = c->k;
  kexpr *idx[KILN_MAX_DIMS], *oidx[KILN_MAX_DIMS];
  ir_node *mm = group_matmul(c->g, c->gi);
  const ir_node *scan = group_scan(c->g, c->gi);
  int nd = mm ? mm->ndim : pg->ndim;
  const int64_t *shape = mm ? mm->shape : pg->shape;
  if (mm) gemm_nest(c, mm, idx);
  else if (c->lanes) scan_lane_nest(c, pg, scan_dim(scan), c->lanes, idx);
  else if (scan) scan_nest(c, pg, scan, idx);
  else loop_nest(c, pg, pg->ndim, idx);
  bool reshaped = mm && !same_shape(pg->ndim, pg->shape, mm);
  if (reshaped) reshaped_outputs(c, pg, mm, idx, oidx);
  int64_t st[KILN_MAX_DIMS];
  ir_contiguous_strides(nd, shape, st);
  kexpr *at = linear(k, nd, st, 0, idx);
  for (int o = 0; o < pg->nout; o++) {
    kexpr *v = emit(c, pg->outs[o], reshaped ? oidx : idx);
    frame_insert(&c->frames[c->nframes - 1], ks_store(k, o, at, v));
  }
}

static void lower_group(lower_ctx *c, const pass_group *pg, bool generic) {
  kernel *k = c->k;
  int64_t numel = ir_numel(pg->ndim, pg->shape);
  for (int o = 0; o < pg->nout; o++) k_param(k, pg->outs[o]->dtype, true, numel);
  int p = -1, q = -1;
  bool column = column_reduction(c, pg, &p, &q);
  const ir_node *sort = group_with(c->g, c->gi, IR_SORTING), *attn = group_with(c->g, c->gi, IR_ATTN);
  const ir_node *scan = group_scan(c->g, c->gi);
  c->lanes = scan ? scan_lanes(c->g, pg, scan_dim(scan)) : 0;
  /* a column reduction's and a lane scan's blocking follow their shape, a
   * sort's line sizes and an attention's are its statement's: specialised;
   * so is a segmented scan, whose block index (i / segment) is then a shift
   * or a multiply, not a division per element, a convolution's window
   * geometry, and a CUDA GEMM (its split into cuBLASLt calls reads the
   * shape). A CPU GEMM's driver takes every size at run time: generic,
   * whatever its first shape (kernel.h's sizes_only). */
  const ir_node *mm = group_matmul(c->g, c->gi);
  k->generic = generic && !(mm && (gemm_windowed(c, mm) || mm->device.type != KILN_CPU)) && !column && !sort && !attn &&
               !c->lanes && !(scan && scan->attr.segment);
  k->sizes_only = k->generic && mm;
  if (ir_op_is_scatter(pg->outs[0]->op)) scatter_nest(c, pg->outs[0]);
  else if (sort) sort_nest(c, pg, sort);
  else if (attn) attention_nest(c, attn);
  else if (column) column_nest(c, pg, p, q);
  else store_outputs(c, pg);
  k->work = numel;
}

/* The group's kernel, or NULL when out of memory. */
kernel *pass_lower(pass_graph *g, int gi, ir_node **inputs, int *ninputs, bool generic) {
  kernel *k = k_new();
  if (!k) return NULL;
  lower_ctx c = {.g = g, .gi = gi, .k = k, .inputs = inputs,
                 .input_param = ir_malloc(sizeof(int) * ((size_t)g->n + 1)),
                 .value_of = ir_calloc((size_t)g->n + 1, sizeof(kexpr *))};
  if (c.input_param && c.value_of && grow(k, (void **)&c.frames, 0, &c.frames_cap, sizeof *c.frames))
    lower_group(&c, &g->groups[gi], generic);
  else
    k->oom = true;
  free(c.memo);
  free(c.frames);
  free(c.tasks);
  free(c.input_param);
  free(c.value_of);
  if (!k->oom) {
    *ninputs = c.ninputs;
    return k;
  }
  k_free(k);   /* *ninputs is left alone: the caller may keep another lowering of the group */
  return NULL;
}
