/* exec.c: an executable: what a realize launches, decided once. Building a plan walks the
 * kernel groups in launch order as realize always has (lower, kernel passes,
 * compile) but runs nothing: each group's outputs get stand-in buffers (no
 * memory) so the groups after it lower exactly as they would have. Every
 * buffer is a slot: the leaves' first, then each output's. Running a plan
 * binds the leaves' buffers, allocates each step's outputs, launches, and
 * gives a slot back to the allocator after its last reader unless it is
 * kept. Lazy realizes (realize.c) and compiled functions (fn.c) both run
 * plans; neither builds graphs or runs passes to replay one. */
#include "rt.h"
#include "rt_internal.h"
#include "passes/pass.h"
#include "runtime/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { STEP_KERNEL, STEP_DEVICE, STEP_GEMM, STEP_COPY } step_kind;

/* Launch argument arg of a step's kernel is field of the planned graph's
 * node (lowering's karg_src): each run takes it from the graph it runs for. */
typedef struct {
  int arg, node, field;
  kiln_dtype type;
} plan_bind;

/* A value the plan was made for: node's field had raw bits (pass_arg_raw). */
typedef struct {
  int node, field;
  int64_t raw;
} plan_pin;

typedef struct {
  step_kind kind;
  kernel *k;                /* KERNEL, DEVICE, GEMM */
  rt_kernel *code;          /* KERNEL: held for the plan's life (no eviction under it) */
  cpu_kernel_fn fn;         /* KERNEL: its entry point */
  rt_split split;           /* KERNEL: how its range is cut */
  int status_param;         /* the kernel's status slot parameter, -1 when it has none or no work */
  rt_device_kernel *dk;     /* DEVICE; GEMM: the rest of the epilogue */
  cuda_launch geom;         /* DEVICE, GEMM's rest: its range and grid at the planned sizes */
  cuda_gemm gm;             /* GEMM */
  rt_origin origin;         /* where planning found the code: compiled, memory, disk */
  double compile_ms;        /* what getting its code took while planning (KILN_DEBUG=1) */
  kiln_device dev;          /* where the outputs live */
  int nout, nin;
  int *slots;               /* nout output slots, then nin input slots (param order) */
  size_t *bytes;            /* per output */
  size_t copy_off;          /* COPY: byte offset in the source slot */
  int free_lo, free_hi;     /* plan->frees[free_lo..free_hi): slots dead after it */
  int nbind;                /* KERNEL: the arguments each run binds */
  plan_bind *binds;
  char file[96];            /* where the user built the group's first output, for messages */
  int line;
  const char *api;          /* the op the user called (a composite's name, or ir_ops') */
} plan_step;

struct rt_exec {
  int nleaves, nslots;
  int nsteps;
  plan_step *steps;
  int *frees;
  bool *keep;               /* per slot: survives the run (targets, held values) */
  rt_buffer **stubs;        /* per slot while planning: the stand-in, NULL for leaves */
  ir_ptrmap slot_of;        /* while planning: rt_buffer * (a leaf's or a stand-in) -> slot */
  int nviews;
  rt_exec_view *views;      /* per node of the planned graph: where its value is */
  int npins;
  plan_pin *pins;           /* values that are not arguments: the plan serves graphs with these only */
};

/* ---- execution helpers --------------------------------------------------- */
typedef struct {
  cpu_kernel_fn fn;
  void *const *bufs;
} launch;

static void run_chunk(void *ctx, int64_t lo, int64_t hi) {
  launch *l = ctx;
  l->fn(l->bufs, lo, hi);
}

double rt_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t kernel_bytes(const kernel *k) {
  uint64_t b = 0;
  for (int p = 0; p < k->nparams; p++) b += (uint64_t)k->params[p].numel * ir_dtypes[k->params[p].dtype].size;
  return b;
}

/* Chunks of the parallel range hold at least ~16K innermost iterations:
 * tiny kernels run on the calling thread with no synchronisation at all. */
rt_split rt_split_of(const kernel *k) {
  int64_t cost, extent = k_parallel(k, &cost);
  return (rt_split){extent, cost >= 16384 ? 1 : 16384 / (cost ? cost : 1)};
}

void rt_execute(rt_split sp, cpu_kernel_fn fn, void *const *bufs) {
  launch l = {fn, bufs};
  if (sp.extent == 0) {
    fn(bufs, 0, 1);
    return;
  }
  rt_parallel_for(sp.extent, sp.min_chunk, run_chunk, &l);
}

/* A buffer on dev (host memory for the CPU); NULL with the last error set. */
static rt_buffer *alloc_on(kiln_device dev, size_t bytes) {
  const rt_device *d = rt_device_of(dev);
  rt_buffer *b = d ? d->alloc(dev.index, bytes) : rt_buffer_alloc(bytes);
  if (!b && !d) ir_error_setf("out of memory allocating %zu bytes", bytes);
  return b;
}

/* Prefixes the last error (a device's or the allocator's) with the op and
 * where the user built the step's first output. */
static kiln_status locate_error(const plan_step *s, kiln_status st) {
  char msg[2048];   /* the size of the last error: copying it cannot fail */
  snprintf(msg, sizeof msg, "%s", ir_error_get());
  ir_error_setf("%s:%d: %s: %s", s->file, s->line, s->api, msg);
  return st;
}

/* bytes of src from byte off into dst: host <-> device by the device's copy,
 * device <-> device through host memory. */
static kiln_status copy_buffer(rt_buffer *dst, const rt_buffer *src, size_t off, size_t bytes) {
  const rt_device *from = rt_device_of(src->device), *to = rt_device_of(dst->device);
  if (bytes == 0) return KILN_OK;
  if (!from) return to->copy_in(dst, (const char *)src->data + off, bytes);
  if (!to) return from->copy_out(dst->data, src, off, bytes);
  rt_buffer *host = rt_buffer_alloc(bytes);
  if (!host) {
    ir_error_setf("out of host memory staging %zu bytes", bytes);
    return KILN_ERR_MEMORY;
  }
  kiln_status st = from->copy_out(host->data, src, off, bytes);
  if (st == KILN_OK) st = to->copy_in(dst, host->data, bytes);
  rt_buffer_release(host);
  return st;
}

/* cuBLASLt's product into the output or the temp, then the rest of the
 * epilogue reading it. The temp goes back to the allocator at once: its
 * next user is queued after the rest. */
static kiln_status queue_gemm(const rt_device *d, int index, const plan_step *s, void *const *bufs, int debug) {
  const cuda_gemm *gm = &s->gm;
  rt_buffer *temp = gm->temp > 0 ? d->alloc(index, (size_t)gm->temp * ir_dtypes[gm->compute].size) : NULL;
  if (gm->temp > 0 && !temp) return KILN_ERR_MEMORY;
  void *t = temp ? temp->data : NULL;
  kiln_status st = rt_cublas_matmul(index, gm, bufs, t, debug);
  if (st == KILN_OK && gm->rest) {
    const kernel *r = gm->rest;
    void **rbufs = ir_malloc(sizeof *rbufs * ((size_t)r->nparams + 1));
    for (int q = 0; rbufs && q < r->nparams; q++)   /* its args are the product's, by number (gemm.c) */
      rbufs[q] = gm->rest_src[q] < 0 ? t : bufs[gm->rest_src[q]];
    if (rbufs) st = d->launch(index, s->dk, gm->rest, rbufs, &s->geom, debug);
    else ir_error_set("out of memory"), st = KILN_ERR_MEMORY;
    free(rbufs);
  }
  rt_buffer_release(temp);
  return st;
}

/* ---- building ------------------------------------------------------------ */
typedef struct {
  rt_exec *p;
  pass_graph *g;
  const pass_config *cfg;
  ir_node **inputs;         /* scratch for pass_run_kernel */
  int cap_slots;
  ir_node *const *nodes;    /* the graph planned, and g's copies of its nodes (same positions) */
  ir_node *const *clones;
  ir_ptrmap index_of;       /* a copy -> its position */
  unsigned *bound;          /* per node: the argument fields (pass_arg_fields) some step binds */
  bool *pinned;             /* per node: a value a step cannot bind (or a pass decided on) */
} builder;

/* -1 when out of memory. */
static int new_slot(builder *b, rt_buffer *stub) {
  rt_exec *p = b->p;
  if (p->nslots == b->cap_slots) {
    int cap = b->cap_slots ? 2 * b->cap_slots : 16;
    rt_buffer **stubs = ir_realloc(p->stubs, sizeof *stubs * (size_t)cap);
    if (stubs) p->stubs = stubs;
    bool *keep = stubs ? ir_realloc(p->keep, sizeof *keep * (size_t)cap) : NULL;
    if (!keep) return -1;
    p->keep = keep;
    b->cap_slots = cap;
  }
  if (stub && !ir_ptrmap_put(&p->slot_of, stub, p->nslots)) return -1;
  p->stubs[p->nslots] = stub;
  p->keep[p->nslots] = false;
  return p->nslots++;
}

/* The slot holding a node's buffer; -1 for an empty tensor without one. */
static int slot_of(const builder *b, const ir_node *n) {
  int s = n->buf ? ir_ptrmap_get(&b->p->slot_of, n->buf) : -1;
  IR_ASSERT(!n->buf || s >= 0);   /* every buffer is a leaf's or a planned output's */
  return s;
}

static plan_step *new_step(builder *b, step_kind kind, const ir_node *first, int nout, int nin) {
  rt_exec *p = b->p;
  plan_step *s = &p->steps[p->nsteps++];
  *s = (plan_step){.kind = kind, .dev = first->device, .nout = nout, .nin = nin, .status_param = -1,
                   .line = first->line, .api = first->api ? first->api : ir_ops[first->op].name};
  snprintf(s->file, sizeof s->file, "%s", first->file ? first->file : "?");
  s->slots = ir_malloc(sizeof *s->slots * (size_t)(nout + nin + 1));
  s->bytes = ir_malloc(sizeof *s->bytes * (size_t)(nout + 1));
  if (s->slots && s->bytes) return s;
  free(s->slots);
  free(s->bytes);
  p->nsteps--;
  return NULL;
}

/* The outputs of a planned group become BUFFERs over stand-ins (no memory):
 * later groups load them exactly as if they had run. */
static kiln_status stub_outputs(builder *b, plan_step *s, ir_node *const *outs) {
  for (int o = 0; o < s->nout; o++) {
    rt_buffer *stub = rt_buffer_borrow(NULL, s->bytes[o]);
    if (stub && (s->slots[o] = new_slot(b, stub)) < 0) rt_buffer_release(stub), stub = NULL;
    if (!stub) return ir_error_oom(outs[o]);
    rt_buffer_retain(stub);   /* the plan's reference, dropped when building ends */
    ir_node_set_buffer(outs[o], stub);
  }
  return KILN_OK;
}

/* The kernel for group gi under KILN_DYNAMIC: shape-specialised,
 * shape-generic, or (auto, dynamic.c) specialised until its structure comes
 * back with another shape, unless only sizes would differ (a CPU GEMM).
 * Both lowerings bind the same inputs in the same order. *key gets the kernel's cache key (made once: a new shape of a
 * known structure plans on every call). NULL when out of memory. */
static kernel *kernel_for(pass_graph *g, int gi, ir_node **inputs, int *ninputs, const pass_config *cfg, ir_str *key) {
  int mode = __atomic_load_n(&rt_opts()->dynamic, __ATOMIC_RELAXED);   /* kiln_set_dynamic may run meanwhile */
  pass_config c = *cfg;
  c.generic = mode != KILN_DYNAMIC_OFF;
  kernel *k = pass_run_kernel(g, gi, inputs, ninputs, &c);
  if (!k) return k;
  uint64_t structure = k_key(k, key);
  if (!k->generic || k->sizes_only || mode == KILN_DYNAMIC_ON || rt_dynamic_generic(structure, 0)) return k;
  c.generic = false;
  kernel *spec = pass_run_kernel(g, gi, inputs, ninputs, &c);
  ir_str spec_key = {0};
  if (!spec || rt_dynamic_generic(structure, k_key(spec, &spec_key))) {
    k_free(spec);
    ir_str_free(&spec_key);
    return k;
  }
  k_free(k);
  ir_str_free(key);
  *key = spec_key;
  return spec;
}

/* Which of k's arguments are values of the planned graph's nodes: every
 * run binds them (a CPU kernel's, a device kernel's, a cuBLASLt step's
 * rest, which reads the product's arguments by number). An argument from a
 * node a pass made, or one whose value a pass changed, is the kernel's own
 * (fold_const pinned what it came from). */
static kiln_status plan_binds(builder *b, plan_step *s, const kernel *k) {
  for (int a = 0; a < k->nargs; a++) {
    const karg_src *from = &k->arg_src[a];
    int i = from->node ? ir_ptrmap_get(&b->index_of, from->node) : -1;
    if (i < 0) continue;
    const ir_node *n = b->nodes[i];
    if (n->op != from->node->op || pass_arg_bits(n, from->field, from->type) != k->args[a]) {
      b->pinned[i] = true;
      continue;
    }
    if ((s->nbind & (s->nbind - 1)) == 0) {  /* grow at powers of two */
      plan_bind *grown = ir_realloc(s->binds, sizeof *grown * (size_t)(s->nbind ? 2 * s->nbind : 2));
      if (!grown) {
        ir_error_setf("out of memory planning %s's launch arguments", s->api);
        return KILN_ERR_MEMORY;
      }
      s->binds = grown;
    }
    s->binds[s->nbind++] = (plan_bind){a, i, from->field, from->type};
    b->bound[i] |= 1u << from->field;
  }
  return KILN_OK;
}

static kiln_status plan_kernel_group(builder *b, int gi) {
  pass_group *pg = &b->g->groups[gi];
  int ninputs = 0;
  const rt_device *d = rt_device_of(pg->outs[0]->device);
  ir_str key = {0};   /* a CPU kernel's cache key */
  kernel *k = kernel_for(b->g, gi, b->inputs, &ninputs, b->cfg, &key);
  if (!k) {
    ir_str_free(&key);
    return ir_error_oom(pg->outs[0]);
  }
  bool matmul = false;
  for (int i = 0; d && i < b->g->n; i++) matmul |= b->g->group_of[i] == gi && b->g->topo[i]->op == IR_MATMUL;
  plan_step *s = new_step(b, !d ? STEP_KERNEL : matmul ? STEP_GEMM : STEP_DEVICE, pg->outs[0], pg->nout, ninputs);
  if (!s) {
    k_free(k);
    ir_str_free(&key);
    return ir_error_oom(pg->outs[0]);
  }
  s->k = k;
  s->split = rt_split_of(k);
  s->status_param = k->work > 0 ? k_status_param(k) : -1;
  int64_t numel = ir_numel(pg->ndim, pg->shape);
  for (int o = 0; o < pg->nout; o++) s->bytes[o] = (size_t)numel * ir_dtypes[pg->outs[o]->dtype].size;
  for (int i = 0; i < ninputs; i++) s->slots[pg->nout + i] = slot_of(b, b->inputs[i]);
  kiln_status st = KILN_OK;
  s->origin = RT_MEMORY;
  double t0 = rt_now_ms();
  if (s->kind == STEP_KERNEL) {
    uint64_t failures = ir_alloc_thread_failures();
    s->code = rt_kernel_get(k, &key, b->cfg->debug, &s->origin);   /* a failed key gets nothing */
    if (s->code) s->fn = rt_kernel_fn(s->code);
    else if (key.failed || ir_alloc_thread_failures() != failures) st = ir_error_oom(pg->outs[0]);
    else st = KILN_ERR_COMPILE;
  } else if (s->kind == STEP_DEVICE) {
    if ((st = d->compile(s->dev.index, k, b->cfg->debug, &s->dk, &s->geom, &s->origin)) != KILN_OK) locate_error(s, st);
  } else {
    char *err = NULL;
    bool split = cuda_gemm_split(k, &s->gm, &err);
    if (!split && s->gm.oom) {
      st = ir_error_oom(pg->outs[0]);
    } else if (!split) {
      ir_error_setf("not supported on %s:%d: %s", d->name, s->dev.index, err ? err : "matrix product");
      st = locate_error(s, KILN_ERR_DEVICE);
    } else if (s->gm.rest &&
               (st = d->compile(s->dev.index, s->gm.rest, b->cfg->debug, &s->dk, &s->geom, &s->origin)) != KILN_OK) {
      locate_error(s, st);
    }
    free(err);
  }
  s->compile_ms = rt_now_ms() - t0;
  ir_str_free(&key);
  if (st == KILN_OK) st = plan_binds(b, s, k);
  if (st == KILN_OK && s->origin != RT_MEMORY)
    rt_count(s->origin == RT_DISK ? &rt_stats_mut()->disk_hits : &rt_stats_mut()->compiles, 1);
  kiln_status stubbed = stub_outputs(b, s, pg->outs);
  return st == KILN_OK ? stubbed : st;
}

/* A transfer (its group is the TO node alone; fuse stored its source) is a
 * copy, never a kernel. A source that is a strided view (fold_views) is
 * copied with its whole storage, and the copy keeps the view's strides. */
static kiln_status plan_transfer(builder *b, const pass_group *pg) {
  ir_node *to = pg->outs[0], *src = to->src[0];
  size_t es = ir_dtypes[src->dtype].size;
  bool dense = ir_node_is_contiguous(src);
  plan_step *s = new_step(b, STEP_COPY, to, 1, 1);
  if (!s) return ir_error_oom(to);
  s->copy_off = dense ? (size_t)src->offset * es : 0;
  s->bytes[0] = dense ? (size_t)ir_numel(src->ndim, src->shape) * es : src->buf->bytes;
  s->slots[1] = slot_of(b, src);
  int64_t strides[KILN_MAX_DIMS], offset = src->offset;
  memcpy(strides, src->strides, sizeof strides);
  kiln_status st = stub_outputs(b, s, &to);
  if (st == KILN_OK && !dense) {
    memcpy(to->strides, strides, sizeof strides);
    to->offset = offset;
  }
  return st;
}

/* A group that is only a reshape of a stored, contiguous value (x.sum(0)
 * without keepdim: the column reduction is stored, the reshape is the
 * target) shares that value's buffer, so its slot: no step at all. */
static bool reshape_alias(const pass_graph *g, int gi) {
  const ir_node *n = g->groups[gi].outs[0], *s = n->src[0];
  if (g->groups[gi].nout != 1 || n->op != IR_RESHAPE || s->op != IR_BUFFER || !s->buf) return false;
  for (int i = 0; i < g->n; i++)
    if (g->group_of[i] == gi && g->topo[i] != n) return false;
  return s->offset == 0 && ir_node_is_contiguous(s);
}

/* Liveness: a slot that is not a leaf and not kept dies after the last step
 * that reads it (or the step that writes it, when nothing reads it). */
static bool plan_frees(rt_exec *p) {
  int *last = ir_malloc(sizeof *last * ((size_t)p->nslots + 1));
  int *count = ir_calloc((size_t)p->nsteps + 1, sizeof *count);
  p->frees = ir_malloc(sizeof *p->frees * ((size_t)p->nslots + 1));
  if (!last || !count || !p->frees) {
    free(last);
    free(count);
    return false;
  }
  for (int i = 0; i < p->nslots; i++) last[i] = -1;
  for (int i = 0; i < p->nsteps; i++)
    for (int j = 0; j < p->steps[i].nout + p->steps[i].nin; j++)
      if (p->steps[i].slots[j] >= 0) last[p->steps[i].slots[j]] = i;
  for (int i = p->nleaves; i < p->nslots; i++)
    if (!p->keep[i] && last[i] >= 0) count[last[i]]++;
  for (int i = 0, at = 0; i < p->nsteps; i++) {
    p->steps[i].free_lo = p->steps[i].free_hi = at;
    at += count[i];
  }
  for (int i = p->nleaves; i < p->nslots; i++)
    if (!p->keep[i] && last[i] >= 0) p->frees[p->steps[last[i]].free_hi++] = i;
  free(last);
  free(count);
  return true;
}

static void drop_stubs(rt_exec *p) {
  for (int i = 0; p->stubs && i < p->nslots; i++) rt_buffer_release(p->stubs[i]);
  free(p->stubs);
  p->stubs = NULL;
  ir_ptrmap_free(&p->slot_of);
}

/* Where each node's copy ended: a view of a slot when a step stores it or
 * it is a view of a leaf, slot -1 when it stays pending. */
static bool record_views(rt_exec *p, int n, ir_node *const *clones) {
  p->nviews = n;
  p->views = ir_calloc((size_t)n + 1, sizeof *p->views);
  if (!p->views) return false;
  for (int i = 0; i < n; i++) {
    const ir_node *c = clones[i];
    p->views[i].slot = c->op == IR_BUFFER && c->buf ? ir_ptrmap_get(&p->slot_of, c->buf) : -1;
    memcpy(p->views[i].strides, c->strides, sizeof c->strides);
    p->views[i].offset = c->offset;
  }
  return true;
}

/* The values the plan is for: those of every node with argument fields
 * that no step binds, or that a step cannot bind, or that a pass decided
 * on. Other graphs of the structure run the plan only with these values. */
static kiln_status plan_pins(builder *b, int n) {
  rt_exec *p = b->p;
  size_t cap = 0;
  for (int i = 0; i < n; i++) {
    unsigned fields = pass_arg_fields(b->nodes[i]->op);
    if (!fields || (!b->pinned[i] && ir_ptrmap_get(&b->g->pinned, b->clones[i]) < 0 && (b->bound[i] & fields) == fields))
      continue;
    for (int f = 0; f < PASS_NARG_FIELDS; f++) {
      if (!(fields >> f & 1)) continue;
      if (!ir_grow((void **)&p->pins, &cap, (size_t)p->npins, (size_t)p->npins + 1, sizeof *p->pins, NULL)) {
        ir_error_setf("out of memory planning the values of a graph of %d nodes", n);
        return KILN_ERR_MEMORY;
      }
      p->pins[p->npins++] = (plan_pin){i, f, pass_arg_raw(b->nodes[i], f)};
    }
  }
  return KILN_OK;
}

static kiln_status build_steps(builder *b) {
  pass_graph *g = b->g;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->ngroups; i++) {
    int gi = g->order[i];
    ir_node *first = g->groups[gi].outs[0];
    if (ir_op_has(first->op, IR_XFER)) st = plan_transfer(b, &g->groups[gi]);
    else if (reshape_alias(g, gi)) {
      rt_buffer_retain(first->src[0]->buf);
      ir_node_set_buffer(first, first->src[0]->buf);
    } else st = plan_kernel_group(b, gi);
  }
  return st;
}

rt_exec *rt_exec_build(int n, ir_node *const *nodes, int nt, const int *tpos, int nleaves, ir_node *const *leaves,
                       const pass_config *cfg, kiln_status *status) {
  ir_node **clones = ir_malloc(sizeof *clones * ((size_t)n + 1)), **targets = ir_malloc(sizeof *targets * ((size_t)nt + 1));
  rt_exec *p = ir_calloc(1, sizeof *p);
  if (!clones || !targets || !p || !ir_graph_clone(n, nodes, clones)) {
    free(clones);
    free(targets);
    free(p);
    *status = ir_error_oom(nodes[tpos[0]]);
    return NULL;
  }
  for (int t = 0; t < nt; t++) targets[t] = clones[tpos[t]];
  pass_graph g = {.ntargets = nt, .targets = targets, .arena = ir_arena_new(), .n = n,
                  .topo = ir_malloc(sizeof(ir_node *) * ((size_t)n + 1))};
  builder b = {.p = p, .g = &g, .cfg = cfg,
               .nodes = nodes, .clones = clones, .bound = ir_calloc((size_t)n + 1, sizeof *b.bound),
               .pinned = ir_calloc((size_t)n + 1, sizeof *b.pinned)};
  kiln_status st = g.arena && g.topo && b.bound && b.pinned ? KILN_OK : ir_error_oom(nodes[tpos[0]]);
  for (int i = 0; st == KILN_OK && i < n; i++)
    if (!ir_ptrmap_put(&b.index_of, clones[i], i)) st = ir_error_oom(nodes[tpos[0]]);
  if (st == KILN_OK) memcpy(g.topo, clones, sizeof(ir_node *) * (size_t)n);
  p->nleaves = nleaves;
  for (int i = 0; st == KILN_OK && i < nleaves; i++) {
    bool shared = !leaves[i]->buf || ir_ptrmap_get(&p->slot_of, leaves[i]->buf) >= 0;
    if (new_slot(&b, NULL) < 0 || (!shared && !ir_ptrmap_put(&p->slot_of, leaves[i]->buf, i))) st = ir_error_oom(nodes[tpos[0]]);
  }
  if (st == KILN_OK) st = pass_run_graph(&g, cfg);
  /* a kernel reads at most every node, those the passes made too */
  if (st == KILN_OK && !(b.inputs = ir_malloc(sizeof(ir_node *) * ((size_t)g.n + 1)))) st = ir_error_oom(nodes[tpos[0]]);
  if (st == KILN_OK) {
    p->steps = ir_calloc((size_t)g.ngroups + 1, sizeof *p->steps);
    st = p->steps ? build_steps(&b) : ir_error_oom(nodes[tpos[0]]);
  }
  if (st == KILN_OK && !record_views(p, n, clones)) st = ir_error_oom(nodes[tpos[0]]);
  if (st == KILN_OK) {
    for (int t = 0; t < nt; t++)
      if (p->views[tpos[t]].slot >= 0) p->keep[p->views[tpos[t]].slot] = true;
    if (!plan_frees(p)) st = ir_error_oom(nodes[tpos[0]]);
    else st = plan_pins(&b, n);
  }
  drop_stubs(p);
  pass_graph_release(&g);
  for (int i = 0; i < n; i++) ir_node_release(clones[i]);
  free(g.topo);
  ir_arena_free(g.arena);
  free(b.inputs);
  free(b.bound);
  free(b.pinned);
  ir_ptrmap_free(&b.index_of);
  free(clones);
  free(targets);
  *status = st;
  if (st == KILN_OK) return p;
  rt_exec_free(p);
  return NULL;
}

void rt_exec_free(rt_exec *p) {
  if (!p) return;
  drop_stubs(p);
  for (int i = 0; p->steps && i < p->nsteps; i++) {
    plan_step *s = &p->steps[i];
    if (s->kind == STEP_GEMM) cuda_gemm_free(&s->gm);
    rt_kernel_release(s->code);
    k_free(s->k);
    free(s->slots);
    free(s->bytes);
    free(s->binds);
  }
  free(p->steps);
  free(p->frees);
  free(p->keep);
  free(p->views);
  free(p->pins);
  free(p);
}

bool rt_exec_values_match(const rt_exec *p, ir_node *const *nodes) {
  for (int i = 0; i < p->npins; i++)
    if (pass_arg_raw(nodes[p->pins[i].node], p->pins[i].field) != p->pins[i].raw) return false;
  return true;
}

/* ---- running ------------------------------------------------------------- */
/* Where a kernel came from: "memory" (the in-memory cache, or compiled by
 * an earlier realize) or "compiled in 6.2 ms" (lookup, emit, O3 and JIT,
 * while this realize planned it), after "generic, " for a shape-generic
 * variant. */
static void debug_line(const plan_step *s, double ms, bool hit) {
  const kernel *k = s->k;
  char from[48];
  snprintf(from, sizeof from, "%s", k->generic ? "generic, " : "");
  size_t n = strlen(from);
  if (s->kind == STEP_GEMM) snprintf(from + n, sizeof from - n, "cuBLASLt");
  else if (hit) snprintf(from + n, sizeof from - n, "memory");
  else if (s->origin == RT_DISK) snprintf(from + n, sizeof from - n, "disk, %.1f ms", s->compile_ms);
  else snprintf(from + n, sizeof from - n, "compiled in %.1f ms", s->compile_ms);
  if (s->kind != STEP_KERNEL) {
    fprintf(stderr, "kiln: %s %lld elems queued on cuda:%d (%s)\n", k->name, (long long)k->work, s->dev.index, from);
    return;
  }
  double gb = (double)kernel_bytes(k) / 1e9;
  fprintf(stderr, "kiln: %s %lld elems %.3f ms %.1f GB/s (%s)\n", k->name, (long long)k->work, ms,
          ms > 0 ? gb / (ms / 1e3) : 0.0, from);
}

static void count_launch(const plan_step *s, bool hit) {
  kiln_stats_t *st = rt_stats_mut();
  const kernel *k = s->kind == STEP_GEMM ? s->gm.rest : s->k;
  if (s->kind == STEP_GEMM && s->gm.call) {   /* cuBLASLt calls: launches never compiled */
    rt_count(&st->kernels_launched, (uint64_t)cuda_gemm_calls(&s->gm));
    rt_count(&st->bytes_moved, kernel_bytes(s->k));
  }
  if (!k) return;
  rt_count(&st->kernels_launched, 1);
  rt_count(&st->bytes_moved, kernel_bytes(k));
  if (hit) rt_count(&st->cache_hits, 1);
}

/* A kernel's arguments: outputs, its launch arguments, the inputs' buffers,
 * in param order (the status slot is bound by run_step). The launch arguments are k->args as planned, or with
 * values given, a copy in args (this run's, so runs of one plan on several
 * threads never share them) with the bound ones taken from values. */
static void bind_params(const plan_step *s, rt_buffer **slots, void **bufs, int64_t *args, ir_node *const *values) {
  const kernel *k = s->k;
  if (args) {
    memcpy(args, k->args, sizeof *args * (size_t)k->nargs);
    for (int i = 0; i < s->nbind; i++)
      args[s->binds[i].arg] = pass_arg_bits(values[s->binds[i].node], s->binds[i].field, s->binds[i].type);
  }
  for (int p = 0, o = 0, i = 0; p < k->nparams; p++) {
    if (k->params[p].args || k->params[p].status) {
      bufs[p] = args ? (void *)args : (void *)k->args;
      continue;
    }
    int slot = k->params[p].output ? s->slots[o++] : s->slots[s->nout + i++];
    bufs[p] = slot >= 0 && slots[slot] ? slots[slot]->data : NULL;
  }
}

/* A kernel check's failure (ir/kernel.h) as the error of the node it came
 * from: "file:line: op: integer division by zero ... at element 3 of
 * i32(4,)". */
static kiln_status check_failed(const kernel *k, const int64_t *slot) {
  IR_ASSERT(slot[KC_CODE] > KC_NONE && slot[KC_CODE] < KC_NUM && slot[KC_SITE] >= 0 && slot[KC_SITE] < k->nsites);
  const kc_info *c = &kc_infos[slot[KC_CODE]];
  const kc_site *site = &k->sites[slot[KC_SITE]];
  ir_str shape = {0};
  ir_str_shape(&shape, site->ndim, site->shape);
  char value[64] = "";
  if (c->value) snprintf(value, sizeof value, ", %s %lld", c->value, (long long)slot[KC_VALUE]);
  ir_error_setf("%s:%d: %s: %s at element %lld of %s %s%s", site->file, site->line, site->api, c->message,
                (long long)slot[KC_POS], ir_dtypes[site->dtype].name, shape.s, value);
  ir_str_free(&shape);
  return KILN_ERR_VALUE;
}

/* The launch's status slot, zeroed: host words for a CPU kernel, a buffer
 * of the step's device otherwise (*dev; NULL: the host words). */
static kiln_status status_slot(const plan_step *s, int64_t *host, rt_buffer **dev, void **bind) {
  *dev = NULL;
  memset(host, 0, sizeof(int64_t) * KC_SLOT_WORDS);
  *bind = host;
  if (s->kind == STEP_KERNEL) return KILN_OK;
  const rt_device *d = rt_device_of(s->dev);
  if (!(*dev = alloc_on(s->dev, sizeof(int64_t) * KC_SLOT_WORDS))) return KILN_ERR_MEMORY;
  *bind = (*dev)->data;
  return d->copy_in(*dev, host, sizeof(int64_t) * KC_SLOT_WORDS);
}

/* After the launch: the slot's failure, if any (a device's slot is copied
 * back, which waits for the kernel), and the slot released. */
static kiln_status status_read(const kernel *k, int64_t *host, rt_buffer *dev) {
  kiln_status st = KILN_OK;
  if (dev) st = rt_device_of(dev->device)->copy_out(host, dev, 0, sizeof(int64_t) * KC_SLOT_WORDS);
  rt_buffer_release(dev);
  return st == KILN_OK && host[KC_CODE] ? check_failed(k, host) : st;
}

static kiln_status run_step(const plan_step *s, rt_buffer **slots, bool hit, int debug, ir_node *const *values) {
  for (int o = 0; o < s->nout; o++) {
    if (slots[s->slots[o]]) continue;   /* bound by the caller (a function's given output) */
    if (!(slots[s->slots[o]] = alloc_on(s->dev, s->bytes[o]))) return locate_error(s, KILN_ERR_MEMORY);
  }
  if (s->kind == STEP_COPY) {
    kiln_status st = copy_buffer(slots[s->slots[0]], slots[s->slots[1]], s->copy_off, s->bytes[0]);
    return st == KILN_OK ? st : locate_error(s, st);
  }
  void *small[16], **bufs = s->k->nparams <= 16 ? small : ir_malloc(sizeof *bufs * (size_t)s->k->nparams);
  int64_t small_args[16], *args = NULL;
  if (bufs && values && s->nbind) {
    args = s->k->nargs <= 16 ? small_args : ir_malloc(sizeof *args * (size_t)s->k->nargs);
    if (!args && bufs != small) free(bufs);
  }
  if (!bufs || (values && s->nbind && !args)) {
    ir_error_setf("out of memory binding %d launch arguments", s->k->nargs);
    return locate_error(s, KILN_ERR_MEMORY);
  }
  bind_params(s, slots, bufs, args, values);
  kiln_status st = KILN_OK;
  double t0 = debug >= 1 ? rt_now_ms() : 0;
  int sp = s->status_param;
  int64_t host_slot[KC_SLOT_WORDS];
  rt_buffer *dev_slot = NULL;
  if (sp >= 0 && (st = status_slot(s, host_slot, &dev_slot, &bufs[sp])) != KILN_OK) sp = -1;
  if (s->k->work > 0 && st == KILN_OK) {
    const rt_device *d = rt_device_of(s->dev);
    if (s->kind == STEP_KERNEL) rt_execute(s->split, s->fn, bufs);
    else if (s->kind == STEP_GEMM) st = queue_gemm(d, s->dev.index, s, bufs, debug);
    else if ((st = d->launch(s->dev.index, s->dk, s->k, bufs, &s->geom, debug)) == KILN_OK && rt_opts()->validate) {
      rt_buffer *ins[s->nin + 1];
      for (int i = 0; i < s->nin; i++) ins[i] = s->slots[s->nout + i] >= 0 ? slots[s->slots[s->nout + i]] : NULL;
      rt_buffer *outs[s->nout + 1];
      for (int o = 0; o < s->nout; o++) outs[o] = slots[s->slots[o]];
      st = rt_validate(s->k, args ? args : s->k->args, outs, ins, debug);
    }
  }
  if (bufs != small) free(bufs);
  if (args != small_args) free(args);
  if (sp >= 0) {
    kiln_status cs = status_read(s->k, host_slot, dev_slot);
    if (st == KILN_OK && cs == KILN_ERR_VALUE) return cs;   /* already names the node */
    if (st == KILN_OK) st = cs;
  } else {
    rt_buffer_release(dev_slot);
  }
  if (st != KILN_OK) return locate_error(s, st);
  count_launch(s, hit);
  if (debug >= 1) debug_line(s, rt_now_ms() - t0, hit);
  return KILN_OK;
}

kiln_status rt_exec_run(const rt_exec *p, rt_buffer **slots, const bool *hold, bool fresh, int debug,
                        ir_node *const *values) {
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < p->nsteps; i++) {
    const plan_step *s = &p->steps[i];
    st = run_step(s, slots, !(fresh && s->origin != RT_MEMORY), debug, values);
    for (int f = s->free_lo; st == KILN_OK && f < s->free_hi; f++) {
      if (hold && hold[p->frees[f]]) continue;
      rt_buffer_release(slots[p->frees[f]]);
      slots[p->frees[f]] = NULL;
    }
  }
  if (st != KILN_OK)
    for (int i = p->nleaves; i < p->nslots; i++) {
      rt_buffer_release(slots[i]);
      slots[i] = NULL;
    }
  return st;
}

int rt_exec_nslots(const rt_exec *p) { return p->nslots; }

void rt_exec_debug(const rt_exec *p, const char *where, double made_ms) {
  const char *steps = p->nsteps == 1 ? "" : "s";
  if (made_ms >= 0)
    fprintf(stderr, "kiln: plan for %s: made in %.3f ms (%d step%s)\n", where, made_ms, p->nsteps, steps);
  else
    fprintf(stderr, "kiln: plan for %s: found (%d step%s), its values bound as launch arguments\n", where, p->nsteps,
            steps);
}

size_t rt_exec_code_bytes(const rt_exec *p) {
  size_t b = 0;
  for (int i = 0; i < p->nsteps; i++) b += p->steps[i].code ? rt_kernel_bytes(p->steps[i].code) : 0;
  return b;
}
const rt_exec_view *rt_exec_node(const rt_exec *p, int i) { return &p->views[i]; }

/* ---- printing (kiln_fn_dump) ------------------------------------------------ */
static const char *step_name(const plan_step *s) {
  static const char *kinds[] = {"kernel", "device kernel", "cuBLASLt matmul", "copy"};
  return kinds[s->kind];
}

static void print_slots(ir_str *b, const plan_step *s, int from, int n) {
  for (int i = 0; i < n; i++) ir_str_printf(b, i ? ", %%%d" : "%%%d", s->slots[from + i]);
}

static void print_text(ir_str *b, const rt_exec *p, const char *where) {
  ir_str_printf(b, "function compiled at %s: %d steps, %d slots (%%0..%%%d bound to its leaves: inputs, then constants)\n",
                where, p->nsteps, p->nslots, p->nleaves - 1);
  for (int i = 0; i < p->nsteps; i++) {
    const plan_step *s = &p->steps[i];
    ir_str_printf(b, "  step %d: %s %s  ", i, step_name(s), s->k ? s->k->name : "");
    print_slots(b, s, 0, s->nout);
    ir_str_printf(b, " = f(");
    print_slots(b, s, s->nout, s->nin);
    ir_str_printf(b, ")  %s:%d %s", s->file, s->line, s->api);
    for (int f = s->free_lo; f < s->free_hi; f++) ir_str_printf(b, f == s->free_lo ? "  frees %%%d" : ", %%%d", p->frees[f]);
    if (s->kind == STEP_DEVICE)   /* at the planned sizes: a shape-generic kernel's grid follows them */
      ir_str_printf(b, "  grid=%d block=%d range=%lld", s->geom.grid, s->geom.block, (long long)s->geom.range);
    ir_str_printf(b, "\n");
  }
}

static void print_dot(ir_str *b, const rt_exec *p, const char *where) {
  ir_str_printf(b, "digraph kiln_fn {\n  label=\"function compiled at %s\";\n  node [fontname=monospace];\n", where);
  for (int i = 0; i < p->nslots; i++)
    ir_str_printf(b, "  s%d [label=\"%%%d\", shape=%s];\n", i, i, i < p->nleaves ? "invhouse" : "ellipse");
  for (int i = 0; i < p->nsteps; i++) {
    const plan_step *s = &p->steps[i];
    ir_str_printf(b, "  k%d [label=\"%d: %s\\n%s\", shape=box];\n", i, i, step_name(s), s->k ? s->k->name : "");
    for (int j = 0; j < s->nin; j++)
      if (s->slots[s->nout + j] >= 0) ir_str_printf(b, "  s%d -> k%d;\n", s->slots[s->nout + j], i);
    for (int o = 0; o < s->nout; o++) ir_str_printf(b, "  k%d -> s%d;\n", i, s->slots[o]);
  }
  ir_str_printf(b, "}\n");
}

void rt_exec_print(ir_str *b, const rt_exec *p, bool dot, const char *where) {
  (dot ? print_dot : print_text)(b, p, where);
}
