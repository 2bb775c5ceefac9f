/* realize.c: the one place that walks the whole flow, like chibicc's main():
 * collect the pending DAG -> graph passes (verify, fuse, schedule) -> for each
 * kernel group: lower -> compile or fetch from the cache -> allocate outputs
 * -> run on the thread pool -> the outputs become buffers. */
#include "rt.h"
#include "rt_internal.h"
#include "passes/pass.h"

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

/* Splits the outer loop so each chunk holds at least ~16K elements: tiny
 * kernels run on the calling thread with no synchronisation at all. */
static void execute(const pass_group *pg, cpu_kernel_fn fn, void *const *bufs) {
  launch l = {fn, bufs};
  if (pg->ndim == 0) {
    fn(bufs, 0, 1);
    return;
  }
  int64_t inner = ir_numel(pg->ndim - 1, pg->shape + 1);
  int64_t min_chunk = inner >= 16384 ? 1 : 16384 / (inner ? inner : 1);
  rt_parallel_for(pg->shape[0], min_chunk, run_chunk, &l);
}

static kiln_status alloc_outputs(const pass_group *pg, rt_buffer **out) {
  int64_t numel = ir_numel(pg->ndim, pg->shape);
  for (int o = 0; o < pg->nout; o++) {
    out[o] = rt_buffer_alloc((size_t)numel * ir_dtypes[pg->outs[o]->dtype].size);
    if (out[o]) continue;
    while (o--) rt_buffer_release(out[o]);
    ir_node *n = pg->outs[0];
    ir_error_setf("%s:%d: %s: out of memory allocating %lld elements", n->file ? n->file : "?", n->line,
                  ir_ops[n->op].name, (long long)numel);
    return KILN_ERR_MEMORY;
  }
  return KILN_OK;
}

static void debug_line(const kernel *k, double ms, bool hit) {
  double gb = (double)kernel_bytes(k) / 1e9;
  fprintf(stderr, "kiln: %s %lld elems %.3f ms %.1f GB/s (%s)\n", k->name, (long long)k->work, ms,
          ms > 0 ? gb / (ms / 1e3) : 0.0, hit ? "cached" : "compiled");
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

static kiln_status run_group(pass_graph *g, int gi, const pass_config *cfg, ir_node **inputs, liveness *lv) {
  pass_group *pg = &g->groups[gi];
  int ninputs = 0;
  kernel *k = pass_run_kernel(g, gi, inputs, &ninputs, cfg);
  ir_str key = {0};
  k_key(k, &key);
  bool hit = false;
  cpu_kernel_fn fn = rt_kernel_get(k, &key, cfg->debug, &hit);
  ir_str_free(&key);
  rt_buffer **out = malloc(sizeof *out * (size_t)pg->nout);
  void **bufs = malloc(sizeof *bufs * (size_t)k->nparams);
  IR_ASSERT(out && bufs);
  kiln_status st = fn ? alloc_outputs(pg, out) : KILN_ERR_COMPILE;
  if (st != KILN_OK) {
    free(out);
    free(bufs);
    k_free(k);
    return st;
  }
  for (int p = 0, o = 0, i = 0; p < k->nparams; p++)
    bufs[p] = k->params[p].output ? out[o++]->data : k->params[p].args ? (void *)k->args : inputs[i++]->buf->data;
  double t0 = now_ms();
  if (k->work > 0) execute(pg, fn, bufs);
  kiln_stats_t *s = rt_stats_mut();
  s->kernels_launched++;
  s->bytes_moved += kernel_bytes(k);
  if (hit) s->cache_hits++;
  else s->compiles++;
  if (cfg->debug >= 1) debug_line(k, now_ms() - t0, hit);
  for (int o = 0; o < pg->nout; o++) {
    for (int s = 0; s < pg->outs[o]->nsrc; s++) lv->src_refs[pg->outs[o]->src[s]->scratch]--;
    ir_node_set_buffer(pg->outs[o], out[o]);
  }
  free(out);
  free(bufs);
  k_free(k);
  return KILN_OK;
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
  pass_config cfg = {rt_opts()->passes, rt_opts()->debug};
  kiln_status st = pass_run_graph(&g, &cfg);
  ir_node **inputs = malloc(sizeof(ir_node *) * ((size_t)g.n + 1));
  IR_ASSERT(inputs);
  liveness lv = {0};
  if (st == KILN_OK) liveness_init(&lv, &g);
  for (int i = 0; st == KILN_OK && i < g.ngroups; i++) {
    st = run_group(&g, g.order[i], &cfg, inputs, &lv);
    if (st == KILN_OK) free_dead(&g, &lv, i);
  }
  liveness_free(&lv);
  free(inputs);
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
  rt_cuda_shutdown();
}
