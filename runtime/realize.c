/* realize.c: the one place that walks the whole flow, like chibicc's main():
 * collect the pending DAG -> look its structure up among the plans already
 * made -> on a miss: graph passes (verify, fuse, schedule), then a plan
 * (plan.c: lower -> compile each kernel group) -> run the plan -> the
 * targets become buffers. A graph built again the same way (new data, same
 * ops, shapes and attributes) runs its plan without a pass. */
#include "rt.h"
#include "rt_internal.h"
#include "runtime/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Graph nodes are not thread safe; one realize runs at a time. */
static pthread_mutex_t realize_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- the plan cache: structure -> plan --------------------------------------
 * A plan holds its kernels' code (the kernel cache never evicts held code),
 * so the plans kept are bounded by the same budget, KILN_KERNEL_CACHE_MB:
 * past it the least recently used plans go, and their kernels become
 * evictable. */
#define PLAN_BUCKETS 1024

typedef struct plan_entry {
  struct plan_entry *next, *older, *newer;
  uint64_t hash;
  ir_str key;
  rt_exec *plan;
  size_t bytes;         /* the code it holds */
} plan_entry;

static struct {
  plan_entry *bucket[PLAN_BUCKETS];
  plan_entry *oldest, *newest;
  size_t bytes;
} plans;

static void use_list_unlink(plan_entry *e) {
  if (e->older) e->older->newer = e->newer;
  else plans.oldest = e->newer;
  if (e->newer) e->newer->older = e->older;
  else plans.newest = e->older;
}

static void use_list_push(plan_entry *e) {
  e->older = plans.newest;
  e->newer = NULL;
  if (plans.newest) plans.newest->newer = e;
  else plans.oldest = e;
  plans.newest = e;
}

static void plan_unlink(plan_entry *e) {
  plan_entry **p = &plans.bucket[e->hash % PLAN_BUCKETS];
  while (*p != e) p = &(*p)->next;
  *p = e->next;
  use_list_unlink(e);
  plans.bytes -= e->bytes;
  ir_str_free(&e->key);
  rt_exec_free(e->plan);
  free(e);
}

static rt_exec *plan_find(uint64_t h, const ir_str *key) {
  for (plan_entry *e = plans.bucket[h % PLAN_BUCKETS]; e; e = e->next)
    if (e->hash == h && e->key.len == key->len && !memcmp(e->key.s, key->s, key->len)) {
      use_list_unlink(e);
      use_list_push(e);
      return e->plan;
    }
  return NULL;
}

/* Keeps plan as the newest; evicts the oldest past the budget (plan itself
 * too when it alone is over it: KILN_KERNEL_CACHE_MB=0 keeps nothing). */
static void plan_insert(uint64_t h, const ir_str *key, rt_exec *plan) {
  plan_entry *e = calloc(1, sizeof *e);
  IR_ASSERT(e);
  *e = (plan_entry){.next = plans.bucket[h % PLAN_BUCKETS], .hash = h, .plan = plan, .bytes = rt_exec_code_bytes(plan)};
  ir_str_append(&e->key, key->s, key->len);
  plans.bucket[h % PLAN_BUCKETS] = e;
  use_list_push(e);
  plans.bytes += e->bytes;
  while (plans.bytes > (size_t)rt_opts()->kernel_cache_bytes && plans.oldest) plan_unlink(plans.oldest);
}

static ir_str key_buf;   /* the key of the graph being realized (under realize_mu) */

static void plans_free(void) {
  while (plans.oldest) plan_unlink(plans.oldest);
  ir_str_free(&key_buf);
}

/* ---- a graph's structure --------------------------------------------------- */
/* One node as words: built on the stack and appended once (keys are built on
 * every realize, so this is the hot path of a cached one). */
typedef struct {
  int64_t w[24 + 5 * KILN_MAX_DIMS];
  int n;
} node_words;

static void word(node_words *k, int64_t v) { k->w[k->n++] = v; }

static void word_f(node_words *k, double v) {
  int64_t bits;
  memcpy(&bits, &v, sizeof bits);
  word(k, bits);
}

/* The attributes n's kind of op reads (ops.def). */
static void attr_words(node_words *k, const ir_node *n) {
  const ir_attr *a = &n->attr;
  if (ir_op_has(n->op, IR_SRC)) {
    word_f(k, a->value), word_f(k, a->start), word_f(k, a->step), word_f(k, a->end);
    word(k, (int64_t)a->seed), word(k, (int64_t)a->offset), word(k, a->low), word(k, a->high);
  } else if (ir_op_has(n->op, IR_MOVE)) {
    word_f(k, a->value), word(k, a->dim), word(k, a->index), word(k, a->stride), word(k, a->flip_mask);
    for (int d = 0; d < n->ndim; d++) word(k, a->perm[d]), word(k, a->pad[d][0]), word(k, a->pad[d][1]);
  } else if (ir_op_has(n->op, IR_SORTING)) {
    word(k, a->sort_k), word(k, a->descending);
  }
  word(k, a->to | (int64_t)a->compute << 8 | (int64_t)a->axes << 16);
}

/* Everything the passes and lowering read of the pending graph, in topo
 * order: ops, dtypes, devices, shapes, attributes, edges, the leaves' views
 * and which leaves share storage; the targets' positions; the options the
 * passes obey. Equal keys plan alike. Sets each node's scratch to its position. */
static void graph_key(ir_str *b, int nheld, ir_node *const *held, int nt, ir_node *const *targets, const pass_config *cfg) {
  IR_PTRMAP_ON_STACK(storage);
  for (int i = 0; i < nheld; i++) held[i]->scratch = i;
  for (int i = 0; i < nheld; i++) {
    const ir_node *n = held[i];
    node_words k = {.n = 0};
    word(&k, n->op | (int64_t)n->dtype << 8 | (int64_t)n->device.type << 16 | (int64_t)n->ndim << 24 |
                 (int64_t)n->status << 32 | (int64_t)n->nsrc << 40);
    word(&k, n->device.index);
    for (int d = 0; d < n->ndim; d++) word(&k, n->shape[d]);
    for (int s = 0; s < n->nsrc; s++) word(&k, n->src[s]->scratch);
    if (n->op != IR_BUFFER) {
      attr_words(&k, n);
    } else {
      int first = n->buf ? ir_ptrmap_get(&storage, n->buf) : -2;
      if (first == -1) ir_ptrmap_put(&storage, n->buf, i);
      bool stand_in = n->buf && !n->buf->data && n->buf->bytes;
      for (int d = 0; d < n->ndim; d++) word(&k, n->strides[d]);
      word(&k, first), word(&k, n->offset), word(&k, stand_in);
      if (n->buf) word(&k, n->buf->device.type | (int64_t)n->buf->device.index << 8);
    }
    ir_str_append(b, k.w, sizeof k.w[0] * (size_t)k.n);
  }
  ir_ptrmap_free(&storage);
  node_words t = {.n = 0};
  for (int i = 0; i < nt; i++) {
    word(&t, targets[i]->scratch);
    if (t.n == (int)(sizeof t.w / sizeof t.w[0]) || i == nt - 1) ir_str_append(b, t.w, sizeof t.w[0] * (size_t)t.n), t.n = 0;
  }
  word(&t, cfg->target);
  ir_str_append(b, t.w, sizeof t.w[0]);
  if (cfg->off) ir_str_append(b, cfg->off, strlen(cfg->off));
}

/* ---- realize ---------------------------------------------------------------- */
static int collect_leaves(int nheld, ir_node *const *held, ir_node ***leaves) {
  *leaves = malloc(sizeof **leaves * ((size_t)nheld + 1));
  IR_ASSERT(*leaves);
  int n = 0;
  for (int i = 0; i < nheld; i++)
    if (held[i]->op == IR_BUFFER) (*leaves)[n++] = held[i];
  return n;
}

/* The nodes whose values outlive this realize: the targets, those a handle
 * holds, and the sources of one that outlives it and that no step stores
 * (it stays pending, so it still reads them). References beyond the
 * realize's own hold and its pending nodes' edges are the user's. */
static void outliving(const rt_exec *p, int n, ir_node *const *held, int nt, ir_node *const *targets, bool *lives) {
  int small[64], *edges = n <= 64 ? small : malloc(sizeof *edges * (size_t)n);
  IR_ASSERT(edges);
  memset(edges, 0, sizeof *edges * (size_t)n);
  memset(lives, 0, sizeof *lives * (size_t)n);
  for (int t = 0; t < nt; t++) lives[targets[t]->scratch] = true;
  for (int i = 0; i < n; i++)
    for (int s = 0; s < held[i]->nsrc; s++) edges[held[i]->src[s]->scratch]++;
  for (int i = n - 1; i >= 0; i--) {
    lives[i] = lives[i] || held[i]->refs - 1 - edges[i] > 0;
    bool pending = rt_exec_node(p, i)->slot < 0;
    for (int s = 0; lives[i] && pending && s < held[i]->nsrc; s++) lives[held[i]->src[s]->scratch] = true;
  }
  if (edges != small) free(edges);
}

/* Runs p over this graph's leaves; then every pending node whose value
 * outlives the realize and that a step stored becomes a BUFFER over it: the
 * targets, and intermediates a handle still holds. */
static kiln_status run_plan(const rt_exec *p, int nt, ir_node *const *targets, int nheld, ir_node *const *held,
                            int nleaves, ir_node *const *leaves, bool fresh, int debug) {
  int ns = rt_exec_nslots(p);
  rt_buffer *small_slots[32], **slots = ns <= 32 ? small_slots : malloc(sizeof *slots * (size_t)ns);
  bool small_lives[64], *lives = nheld <= 64 ? small_lives : malloc(sizeof *lives * (size_t)nheld);
  bool small_hold[32], *hold = ns <= 32 ? small_hold : malloc(sizeof *hold * (size_t)ns);
  IR_ASSERT(slots && lives && hold);
  memset(slots, 0, sizeof *slots * (size_t)ns);
  memset(hold, 0, sizeof *hold * (size_t)ns);
  for (int i = 0; i < nleaves; i++) slots[i] = leaves[i]->buf;
  outliving(p, nheld, held, nt, targets, lives);
  for (int i = 0; i < nheld; i++)
    if (lives[i] && held[i]->op != IR_BUFFER && rt_exec_node(p, i)->slot >= 0) hold[rt_exec_node(p, i)->slot] = true;
  kiln_status st = rt_exec_run(p, slots, hold, fresh, debug);
  for (int i = 0; st == KILN_OK && i < nheld; i++) {
    const rt_exec_view *v = rt_exec_node(p, i);
    if (!lives[i] || held[i]->op == IR_BUFFER || v->slot < 0) continue;
    rt_buffer_retain(slots[v->slot]);
    ir_node_set_storage(held[i], slots[v->slot], v->strides, v->offset);
  }
  for (int i = nleaves; st == KILN_OK && i < ns; i++) rt_buffer_release(slots[i]);
  if (slots != small_slots) free(slots);
  if (lives != small_lives) free(lives);
  if (hold != small_hold) free(hold);
  return st;
}

static kiln_status realize_locked(int n, ir_node *const *nodes) {
  /* Running drops the targets' sources: hold every node until the whole
   * realize is done. */
  ir_node **held, **leaves;
  int nheld = ir_graph_collect(n, nodes, &held);
  for (int i = 0; i < nheld; i++) ir_node_retain(held[i]);
  int nleaves = collect_leaves(nheld, held, &leaves);
  pass_config cfg = {.off = rt_opts()->passes, .debug = rt_opts()->debug, .target = -1};
  key_buf.len = 0;
  graph_key(&key_buf, nheld, held, n, nodes, &cfg);
  uint64_t h = ir_hash_bytes(key_buf.s, key_buf.len, 0);
  rt_exec *p = plan_find(h, &key_buf);
  bool fresh = !p;
  kiln_status st = KILN_OK;
  if (fresh) {
    int small[16], *tpos = n <= 16 ? small : malloc(sizeof *tpos * (size_t)n);
    IR_ASSERT(tpos);
    for (int t = 0; t < n; t++) tpos[t] = nodes[t]->scratch;
    p = rt_exec_build(nheld, held, n, tpos, nleaves, leaves, &cfg, &st);
    if (tpos != small) free(tpos);
  }
  if (p) st = run_plan(p, n, nodes, nheld, held, nleaves, leaves, fresh, cfg.debug);
  if (p && fresh) plan_insert(h, &key_buf, p);   /* after its run: inserting may free it */
  for (int i = 0; i < nheld; i++) ir_node_release(held[i]);
  free(held);
  free(leaves);
  return st;
}

kiln_status rt_realize(int n, ir_node *const *nodes) {
  pthread_mutex_lock(&realize_mu);
  kiln_status st = realize_locked(n, nodes);
  pthread_mutex_unlock(&realize_mu);
  return st;
}

void rt_shutdown(void) {
  pthread_mutex_lock(&realize_mu);
  plans_free();
  pthread_mutex_unlock(&realize_mu);
  rt_cache_shutdown();
  rt_dynamic_shutdown();
  rt_pool_shutdown();
  rt_buffer_cache_free();
  rt_cublas_shutdown();
  rt_cuda_device_shutdown();
  rt_cuda_shutdown();
}
