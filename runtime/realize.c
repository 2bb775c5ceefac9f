/* realize.c: the one place that walks the whole flow, like chibicc's main():
 * collect the pending DAG -> graph passes (verify, fuse, schedule) -> for each
 * kernel group: lower -> compile or fetch from the cache -> allocate outputs
 * -> run on the thread pool -> the outputs become buffers. */
#include "rt.h"
#include "rt_internal.h"
#include "passes/pass.h"
#include "runtime/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Graph nodes are not thread safe; one realize runs at a time. */
static pthread_mutex_t realize_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
  cpu_kernel_fn fn;
  void *const *bufs;
} launch;

static void run_chunk(void *ctx, int64_t lo, int64_t hi) {
  launch *l = ctx;
  l->fn(l->bufs, lo, hi);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t kernel_bytes(const kernel *k) {
  uint64_t b = 0;
  for (int p = 0; p < k->nparams; p++) b += (uint64_t)k->params[p].numel * ir_dtypes[k->params[p].dtype].size;
  return b;
}

/* Splits the parallel range so each chunk holds at least ~16K innermost
 * iterations: tiny kernels run on the calling thread with no synchronisation
 * at all. */
void rt_execute(const kernel *k, cpu_kernel_fn fn, void *const *bufs) {
  launch l = {fn, bufs};
  int64_t cost, extent = k_parallel(k, &cost);
  if (extent == 0) {
    fn(bufs, 0, 1);
    return;
  }
  int64_t min_chunk = cost >= 16384 ? 1 : 16384 / (cost ? cost : 1);
  rt_parallel_for(extent, min_chunk, run_chunk, &l);
}

/* A buffer on dev (host memory for the CPU); NULL with the last error set. */
static rt_buffer *alloc_on(kiln_device dev, size_t bytes) {
  const rt_device *d = rt_device_of(dev);
  rt_buffer *b = d ? d->alloc(dev.index, bytes) : rt_buffer_alloc(bytes);
  if (!b && !d) ir_error_setf("out of memory allocating %zu bytes", bytes);
  return b;
}

static kiln_status alloc_outputs(const pass_group *pg, rt_buffer **out) {
  int64_t numel = ir_numel(pg->ndim, pg->shape);
  for (int o = 0; o < pg->nout; o++) {
    out[o] = alloc_on(pg->outs[o]->device, (size_t)numel * ir_dtypes[pg->outs[o]->dtype].size);
    if (out[o]) continue;
    while (o--) rt_buffer_release(out[o]);
    ir_node *n = pg->outs[0];
    ir_error_setf("%s:%d: %s: out of memory allocating %lld elements", n->file ? n->file : "?", n->line,
                  ir_ops[n->op].name, (long long)numel);
    return KILN_ERR_MEMORY;
  }
  return KILN_OK;
}

static const char *origin_name(rt_origin o) { return o == RT_MEMORY ? "cached" : o == RT_DISK ? "disk" : "compiled"; }

static void debug_line(const kernel *k, double ms, rt_origin origin) {
  double gb = (double)kernel_bytes(k) / 1e9;
  fprintf(stderr, "kiln: %s %lld elems %.3f ms %.1f GB/s (%s)\n", k->name, (long long)k->work, ms,
          ms > 0 ? gb / (ms / 1e3) : 0.0, origin_name(origin));
}

/* Buffer liveness during one realize: a materialized intermediate whose last
 * reader has run, and that nobody outside this realize holds, gives its
 * buffer back to the allocator, where the next kernel's output picks it up:
 * a chain's peak memory is its widest point, not its sum. */
typedef struct {
  int *src_refs;        /* per node: references from pending nodes of this realize */
  int *dead_start;      /* nodes dying after launch k: dead[dead_start[k] .. dead_start[k+1]) */
  int *dead;
} liveness;

static void liveness_init(liveness *lv, const pass_graph *g) {
  lv->src_refs = calloc((size_t)g->n + 1, sizeof(int));
  lv->dead_start = calloc((size_t)g->ngroups + 2, sizeof(int));
  lv->dead = calloc((size_t)g->n + 1, sizeof(int));
  IR_ASSERT(lv->src_refs && lv->dead_start && lv->dead);
  for (int i = 0; i < g->n; i++) {
    for (int s = 0; s < g->topo[i]->nsrc; s++) lv->src_refs[g->topo[i]->src[s]->scratch]++;
    if (g->last_use[i] >= 0) lv->dead_start[g->last_use[i] + 1]++;
  }
  for (int k = 0; k < g->ngroups; k++) lv->dead_start[k + 1] += lv->dead_start[k];
  int *fill = calloc((size_t)g->ngroups + 1, sizeof(int));
  IR_ASSERT(fill);
  for (int i = 0; i < g->n; i++)
    if (g->last_use[i] >= 0) lv->dead[lv->dead_start[g->last_use[i]] + fill[g->last_use[i]]++] = i;
  free(fill);
}

static void liveness_free(liveness *lv) {
  free(lv->src_refs);
  free(lv->dead_start);
  free(lv->dead);
}

/* refs beyond this realize's own hold and its pending nodes' sources belong
 * to the user (a handle): such a buffer must stay. */
static void free_dead(const pass_graph *g, const liveness *lv, int pos) {
  for (int e = lv->dead_start[pos]; e < lv->dead_start[pos + 1]; e++) {
    ir_node *n = g->topo[lv->dead[e]];
    if (n->buf && n->refs - 1 - lv->src_refs[lv->dead[e]] == 0) {
      rt_buffer_release(n->buf);
      n->buf = NULL;
    }
  }
}

/* A kernel's arguments: outputs, k->args, the inputs' buffers, in param order. */
static void bind_params(const kernel *k, rt_buffer **out, ir_node **inputs, void **bufs) {
  for (int p = 0, o = 0, i = 0; p < k->nparams; p++)
    bufs[p] = k->params[p].output ? out[o++]->data : k->params[p].args ? (void *)k->args : inputs[i++]->buf->data;
}

static void count_launch(const kernel *k, rt_origin origin) {
  kiln_stats_t *s = rt_stats_mut();
  s->kernels_launched++;
  s->bytes_moved += kernel_bytes(k);
  if (origin == RT_MEMORY) s->cache_hits++;
  else if (origin == RT_DISK) s->disk_hits++;
  else s->compiles++;
}

/* The group's outputs become buffers and drop their sources. */
static void set_outputs(const pass_group *pg, rt_buffer **out, liveness *lv) {
  for (int o = 0; o < pg->nout; o++) {
    for (int s = 0; s < pg->outs[o]->nsrc; s++) lv->src_refs[pg->outs[o]->src[s]->scratch]--;
    ir_node_set_buffer(pg->outs[o], out[o]);
  }
}

static kiln_status run_group(pass_graph *g, int gi, const pass_config *cfg, ir_node **inputs, liveness *lv) {
  pass_group *pg = &g->groups[gi];
  int ninputs = 0;
  kernel *k = pass_run_kernel(g, gi, inputs, &ninputs, cfg);
  ir_str key = {0};
  k_key(k, &key);
  rt_origin origin = RT_COMPILED;
  rt_kernel *code = rt_kernel_get(k, &key, cfg->debug, &origin);
  ir_str_free(&key);
  rt_buffer **out = malloc(sizeof *out * (size_t)pg->nout);
  void **bufs = malloc(sizeof *bufs * (size_t)k->nparams);
  IR_ASSERT(out && bufs);
  kiln_status st = code ? alloc_outputs(pg, out) : KILN_ERR_COMPILE;
  if (st != KILN_OK) {
    rt_kernel_release(code);
    free(out);
    free(bufs);
    k_free(k);
    return st;
  }
  bind_params(k, out, inputs, bufs);
  double t0 = now_ms();
  if (k->work > 0) rt_execute(k, rt_kernel_fn(code), bufs);
  rt_kernel_release(code);
  count_launch(k, origin);
  if (cfg->debug >= 1) debug_line(k, now_ms() - t0, origin);
  set_outputs(pg, out, lv);
  free(out);
  free(bufs);
  k_free(k);
  return KILN_OK;
}

/* ---- groups on a device, and transfers (runtime/device.h) ------------------ */
/* Prefixes the last error (a device's) with the op and where the user built n. */
static kiln_status locate_error(const ir_node *n, kiln_status st) {
  char *msg = strdup(ir_error_get());
  IR_ASSERT(msg);
  ir_error_setf("%s:%d: %s: %s", n->file ? n->file : "?", n->line, ir_ops[n->op].name, msg);
  free(msg);
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

/* A transfer (its group is the TO node alone; fuse stored its source) is a
 * copy, never a kernel. A source that is a strided view (fold_views) is
 * copied with its whole storage, and the copy keeps the view's strides. */
static kiln_status run_transfer(const pass_group *pg, liveness *lv) {
  ir_node *to = pg->outs[0], *s = to->src[0];
  size_t es = ir_dtypes[s->dtype].size;
  bool dense = ir_node_is_contiguous(s);
  size_t off = dense ? (size_t)s->offset * es : 0;
  size_t bytes = dense ? (size_t)ir_numel(s->ndim, s->shape) * es : s->buf->bytes;
  int64_t strides[KILN_MAX_DIMS], offset = s->offset;
  memcpy(strides, s->strides, sizeof strides);
  rt_buffer *out = alloc_on(to->device, bytes);
  kiln_status st = out ? copy_buffer(out, s->buf, off, bytes) : KILN_ERR_MEMORY;
  if (st != KILN_OK) {
    rt_buffer_release(out);
    return locate_error(to, st);
  }
  set_outputs(pg, &out, lv);
  if (!dense) {
    memcpy(to->strides, strides, sizeof strides);
    to->offset = offset;
  }
  return KILN_OK;
}

static bool has_matmul(const pass_graph *g, int gi) {
  for (int i = 0; i < g->n; i++)
    if (g->group_of[i] == gi && g->topo[i]->op == IR_MATMUL) return true;
  return false;
}

/* cuBLASLt calls count as launches that were never compiled. */
static void count_library_calls(const kernel *k, int64_t calls) {
  kiln_stats_t *s = rt_stats_mut();
  s->kernels_launched += (uint64_t)calls;
  s->bytes_moved += kernel_bytes(k);
}

/* cuBLASLt's product into the output or the temp, then the rest of the
 * epilogue reading it. The temp goes back to the allocator at once: its
 * next user is queued after the rest. */
static kiln_status queue_gemm(const rt_device *d, int index, const cuda_gemm *gm, rt_device_kernel *dk,
                              void *const *bufs, int debug) {
  rt_buffer *temp = gm->temp > 0 ? d->alloc(index, (size_t)gm->temp * ir_dtypes[gm->compute].size) : NULL;
  if (gm->temp > 0 && !temp) return KILN_ERR_MEMORY;
  void *t = temp ? temp->data : NULL;
  kiln_status st = rt_cublas_matmul(index, gm, bufs, t, debug);
  if (st == KILN_OK && gm->rest) {
    const kernel *r = gm->rest;
    void **rbufs = malloc(sizeof *rbufs * ((size_t)r->nparams + 1));
    IR_ASSERT(rbufs);
    for (int q = 0; q < r->nparams; q++)
      rbufs[q] = r->params[q].args ? (void *)r->args : gm->rest_src[q] < 0 ? t : bufs[gm->rest_src[q]];
    st = d->launch(index, dk, gm->rest, rbufs, debug);
    free(rbufs);
  }
  rt_buffer_release(temp);
  return st;
}

/* A group with a matmul (codegen_cuda/gemm.c): cuBLASLt computes the product
 * and the head of the epilogue it can apply; the rest of the epilogue, if
 * any, is compiled and launched like any other kernel. On success the
 * outputs in out hold the results. */
static kiln_status queue_matmul(const rt_device *d, kiln_device dev, const pass_group *pg, kernel *k, ir_node **inputs,
                                rt_buffer **out, void **bufs, const pass_config *cfg) {
  cuda_gemm gm;
  char *err = NULL;
  rt_device_kernel *dk = NULL;
  rt_origin origin = RT_COMPILED;
  kiln_status st = KILN_OK;
  if (!cuda_gemm_split(k, &gm, &err)) {
    ir_error_setf("not supported on %s:%d: %s", d->name, dev.index, err ? err : "matrix product");
    st = locate_error(pg->outs[0], KILN_ERR_DEVICE);
  } else if (gm.rest && (st = d->compile(dev.index, gm.rest, cfg->debug, &dk, &origin)) != KILN_OK) {
    locate_error(pg->outs[0], st);
  } else if ((st = alloc_outputs(pg, out)) == KILN_OK) {
    bind_params(k, out, inputs, bufs);
    if (k->work > 0 && (st = queue_gemm(d, dev.index, &gm, dk, bufs, cfg->debug)) != KILN_OK) {
      locate_error(pg->outs[0], st);
      for (int o = 0; o < pg->nout; o++) rt_buffer_release(out[o]);
    }
  }
  if (st == KILN_OK) {
    if (k->work > 0 && gm.call) count_library_calls(k, cuda_gemm_calls(&gm));
    if (k->work > 0 && gm.rest) count_launch(gm.rest, origin);
    if (cfg->debug >= 1)
      fprintf(stderr, "kiln: %s %lld elems queued on %s:%d (cuBLASLt%s%s)\n", k->name, (long long)k->work, d->name,
              dev.index, gm.rest ? " + " : "", gm.rest ? gm.rest->name : "");
  }
  cuda_gemm_free(&gm);
  free(err);
  return st;
}

/* Any other group: the kernel IR the CPU would run, compiled and queued by
 * the device (and checked on the CPU under KILN_VALIDATE). */
static kiln_status queue_kernel(const rt_device *d, kiln_device dev, const pass_group *pg, kernel *k, ir_node **inputs,
                                rt_buffer **out, void **bufs, const pass_config *cfg) {
  rt_device_kernel *dk = NULL;
  rt_origin origin = RT_COMPILED;
  kiln_status st = d->compile(dev.index, k, cfg->debug, &dk, &origin);
  if (st != KILN_OK) {
    locate_error(pg->outs[0], st);
  } else if ((st = alloc_outputs(pg, out)) == KILN_OK) {
    bind_params(k, out, inputs, bufs);
    if (k->work > 0 && (st = d->launch(dev.index, dk, k, bufs, cfg->debug)) == KILN_OK && rt_opts()->validate)
      st = rt_validate(k, out, inputs, cfg->debug);
    if (st != KILN_OK) {
      locate_error(pg->outs[0], st);
      for (int o = 0; o < pg->nout; o++) rt_buffer_release(out[o]);
    }
  }
  if (st == KILN_OK) {
    count_launch(k, origin);
    if (cfg->debug >= 1)
      fprintf(stderr, "kiln: %s %lld elems queued on %s:%d (%s)\n", k->name, (long long)k->work, d->name,
              dev.index, origin_name(origin));
  }
  return st;
}

/* A group on a device. It runs asynchronously; a copy to the host waits for it. */
static kiln_status run_device_group(pass_graph *g, int gi, const pass_config *cfg, ir_node **inputs, liveness *lv) {
  pass_group *pg = &g->groups[gi];
  kiln_device dev = pg->outs[0]->device;
  const rt_device *d = rt_device_of(dev);
  int ninputs = 0;
  kernel *k = pass_run_kernel(g, gi, inputs, &ninputs, cfg);
  rt_buffer **out = malloc(sizeof *out * (size_t)pg->nout);
  void **bufs = malloc(sizeof *bufs * ((size_t)k->nparams + 1));
  IR_ASSERT(out && bufs);
  kiln_status st = (has_matmul(g, gi) ? queue_matmul : queue_kernel)(d, dev, pg, k, inputs, out, bufs, cfg);
  if (st == KILN_OK) set_outputs(pg, out, lv);
  free(out);
  free(bufs);
  k_free(k);
  return st;
}

/* A group that is only a reshape of a stored, contiguous value (x.sum(0)
 * without keepdim: the column reduction is stored, the reshape is the
 * target) shares that value's buffer: the same elements in the same order,
 * no copy kernel. */
static bool reshape_alias(const pass_graph *g, int gi) {
  const ir_node *n = g->groups[gi].outs[0], *s = n->src[0];
  if (g->groups[gi].nout != 1 || n->op != IR_RESHAPE || s->op != IR_BUFFER || !s->buf) return false;
  for (int i = 0; i < g->n; i++)
    if (g->group_of[i] == gi && g->topo[i] != n) return false;
  return s->offset == 0 && ir_node_is_contiguous(s);
}

static void run_alias(const pass_group *pg, liveness *lv) {
  rt_buffer *b = pg->outs[0]->src[0]->buf;
  rt_buffer_retain(b);
  set_outputs(pg, &b, lv);
}

/* A transfer is a copy; every other group runs where its outputs live. */
static kiln_status run_any(pass_graph *g, int gi, const pass_config *cfg, ir_node **inputs, liveness *lv) {
  const ir_node *first = g->groups[gi].outs[0];
  if (ir_op_has(first->op, IR_XFER)) return run_transfer(&g->groups[gi], lv);
  if (reshape_alias(g, gi)) {
    run_alias(&g->groups[gi], lv);
    return KILN_OK;
  }
  if (rt_device_of(first->device)) return run_device_group(g, gi, cfg, inputs, lv);
  return run_group(g, gi, cfg, inputs, lv);
}

static kiln_status realize_locked(int n, ir_node *const *nodes) {
  /* Passes rewrite edges and running a kernel drops its outputs' sources;
   * hold every node until the whole realize is done so the pass arrays never
   * point at freed nodes. */
  ir_node **held;
  int nheld = ir_graph_collect(n, nodes, &held);
  for (int i = 0; i < nheld; i++) ir_node_retain(held[i]);
  pass_graph g = {.ntargets = n, .targets = nodes, .arena = ir_arena_new(), .n = nheld,
                  .topo = malloc(sizeof(ir_node *) * ((size_t)nheld + 1))};
  IR_ASSERT(g.topo);
  memcpy(g.topo, held, sizeof(ir_node *) * (size_t)nheld);
  pass_config cfg = {rt_opts()->passes, rt_opts()->debug, -1};
  kiln_status st = pass_run_graph(&g, &cfg);
  ir_node **inputs = malloc(sizeof(ir_node *) * ((size_t)g.n + 1));
  IR_ASSERT(inputs);
  liveness lv = {0};
  if (st == KILN_OK) liveness_init(&lv, &g);
  for (int i = 0; st == KILN_OK && i < g.ngroups; i++) {
    st = run_any(&g, g.order[i], &cfg, inputs, &lv);
    if (st == KILN_OK) free_dead(&g, &lv, i);
  }
  liveness_free(&lv);
  free(inputs);
  pass_graph_release(&g);
  for (int i = 0; i < nheld; i++) ir_node_release(held[i]);
  free(held);
  free(g.topo);
  ir_arena_free(g.arena);
  return st;
}

kiln_status rt_realize(int n, ir_node *const *nodes) {
  pthread_mutex_lock(&realize_mu);
  kiln_status st = realize_locked(n, nodes);
  pthread_mutex_unlock(&realize_mu);
  return st;
}

void rt_shutdown(void) {
  rt_cache_shutdown();
  rt_pool_shutdown();
  rt_buffer_cache_free();
  rt_cublas_shutdown();
  rt_cuda_device_shutdown();
  rt_cuda_shutdown();
}
