/* realize.c: the one place that walks the whole flow, like chibicc's main():
 * collect the pending DAG -> look its structure up among the plans already
 * made -> on a miss: graph passes (verify, fuse, schedule), then a plan
 * (exec.c: lower -> compile each kernel group) -> run the plan -> the
 * targets become buffers. A graph built again the same way (new data, new
 * constant values, same ops, shapes and other attributes) runs its plan
 * without a pass: the plan binds the values as launch arguments. */
#include "rt.h"
#include "rt_internal.h"
#include "passes/pass.h"
#include "runtime/device.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the plan cache: structure -> plan --------------------------------------
 * A plan holds its kernels' code (the kernel cache never evicts held code),
 * so the plans kept are bounded by the same budget, KILN_KERNEL_CACHE_MB:
 * past it the least recently used plans go, and their kernels become
 * evictable. A structure may have a few plans, each for the values its
 * passes decided on (x * 1 is x: rt_exec_values_match); past PLAN_VARIANTS
 * the oldest goes. Realizes on several threads share the cache: plans.mu is
 * held only to find, insert or unlink an entry; a plan runs with no lock,
 * held by its runners (an entry unlinked meanwhile is freed by its last
 * runner). The buckets double past two plans each: a loop over new shapes
 * makes thousands of plans, and walking long chains of scattered entries
 * cost a cache miss per entry on every realize. */
#define PLAN_BUCKETS 1024   /* the first table's */
#define PLAN_VARIANTS 8

/* A graph's structure as words (graph_key). */
typedef struct {
  int64_t *w;
  size_t n, cap;
  bool heap;            /* w outgrew the caller's frame */
  bool failed;          /* out of memory: a partial key, which finds nothing */
} key_words;

typedef struct plan_entry {
  struct plan_entry *next, *older, *newer;
  uint64_t hash;
  key_words key;
  rt_exec *plan;
  size_t bytes;         /* the code it holds */
  int runners;          /* realizes running the plan now (under plans.mu) */
  bool unlinked;        /* evicted while running: the last runner frees it */
} plan_entry;

static struct {
  pthread_mutex_t mu;
  plan_entry **bucket;   /* nbuckets (a power of two), made by the first insert */
  size_t nbuckets, count;
  plan_entry *oldest, *newest;
  size_t bytes;
} plans = {.mu = PTHREAD_MUTEX_INITIALIZER};

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

static void key_free(key_words *k) {
  if (k->heap) free(k->w);
}

static void entry_free(plan_entry *e) {
  key_free(&e->key);
  rt_exec_free(e->plan);
  free(e);
}

/* Under plans.mu; an entry nobody runs goes on *dead, to be freed after the
 * lock is dropped (freeing releases its kernels, which takes the kernel
 * cache's lock). */
static void plan_unlink(plan_entry *e, plan_entry **dead) {
  plan_entry **p = &plans.bucket[e->hash & (plans.nbuckets - 1)];
  while (*p != e) p = &(*p)->next;
  *p = e->next;
  plans.count--;
  use_list_unlink(e);
  plans.bytes -= e->bytes;
  e->unlinked = true;
  if (e->runners) return;
  e->next = *dead;
  *dead = e;
}

static void free_dead(plan_entry *dead) {
  while (dead) {
    plan_entry *next = dead->next;
    entry_free(dead);
    dead = next;
  }
}

static bool same_key(const plan_entry *e, uint64_t h, const key_words *key) {
  return e->hash == h && e->key.n == key->n && !memcmp(e->key.w, key->w, sizeof *key->w * key->n);
}

/* Under plans.mu: the entry for this structure that serves these values
 * (held: the graph's nodes in key order). */
static plan_entry *lookup(uint64_t h, const key_words *key, ir_node *const *held) {
  for (plan_entry *e = plans.nbuckets ? plans.bucket[h & (plans.nbuckets - 1)] : NULL; e; e = e->next)
    if (same_key(e, h, key) && rt_exec_values_match(e->plan, held)) return e;
  return NULL;
}

/* The plan of this structure and values, held for a run (plan_done gives it back). */
static plan_entry *plan_find(uint64_t h, const key_words *key, ir_node *const *held) {
  pthread_mutex_lock(&plans.mu);
  plan_entry *e = lookup(h, key, held);
  if (e) {
    e->runners++;
    use_list_unlink(e);
    use_list_push(e);
  }
  pthread_mutex_unlock(&plans.mu);
  return e;
}

/* Under plans.mu: drops the oldest plan of the structure when it has
 * PLAN_VARIANTS. Entries are pushed at the bucket's head, so the last one
 * found is the oldest. */
static void limit_variants(uint64_t h, const key_words *key, plan_entry **dead) {
  plan_entry *last = NULL;
  int n = 0;
  for (plan_entry *e = plans.bucket[h & (plans.nbuckets - 1)]; e; e = e->next)
    if (same_key(e, h, key)) last = e, n++;
  if (n >= PLAN_VARIANTS) plan_unlink(last, dead);
}

/* Under plans.mu: the table with room for one more plan; false when there
 * is none yet and no memory for it (a full table only gets longer chains).
 * A bucket's entries keep their order (newest first: limit_variants). */
static bool buckets_room(void) {
  if (plans.nbuckets && plans.count < 2 * plans.nbuckets) return true;
  size_t n = plans.nbuckets ? 2 * plans.nbuckets : PLAN_BUCKETS;
  plan_entry **b = ir_calloc(n, sizeof *b);
  if (!b) return plans.nbuckets != 0;
  for (size_t i = plans.nbuckets; i-- > 0;) {
    plan_entry *rev = NULL;   /* the old chain reversed, so pushing keeps its order */
    for (plan_entry *e = plans.bucket[i], *next; e; e = next) next = e->next, e->next = rev, rev = e;
    for (plan_entry *e = rev, *next; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
    }
  }
  free(plans.bucket);
  plans.bucket = b;
  plans.nbuckets = n;
  return true;
}

static void plan_done(plan_entry *e) {
  pthread_mutex_lock(&plans.mu);
  bool last = --e->runners == 0 && e->unlinked;
  pthread_mutex_unlock(&plans.mu);
  if (last) entry_free(e);
}

/* Keeps plan (run once already) as the newest; evicts the oldest past the
 * budget (plan itself too when it alone is over it: KILN_KERNEL_CACHE_MB=0
 * keeps nothing). When another thread planned the same structure meanwhile,
 * its plan stays and this one goes. Out of memory it is not kept either. */
static void plan_insert(uint64_t h, const key_words *key, ir_node *const *held, rt_exec *plan) {
  plan_entry *e = ir_calloc(1, sizeof *e), *dead = NULL;
  if (!e) {
    rt_exec_free(plan);
    return;
  }
  *e = (plan_entry){.hash = h, .plan = plan, .bytes = rt_exec_code_bytes(plan),
                    .key = {ir_malloc(sizeof *key->w * (key->n + 1)), key->n, key->n, true, false}};
  if (!e->key.w) {
    entry_free(e);
    return;
  }
  memcpy(e->key.w, key->w, sizeof *key->w * key->n);
  pthread_mutex_lock(&plans.mu);
  if (lookup(h, key, held) || !buckets_room()) {
    e->next = dead;
    dead = e;
  } else {
    limit_variants(h, key, &dead);
    e->next = plans.bucket[h & (plans.nbuckets - 1)];
    plans.bucket[h & (plans.nbuckets - 1)] = e;
    plans.count++;
    use_list_push(e);
    plans.bytes += e->bytes;
    while (plans.bytes > (size_t)rt_opts()->kernel_cache_bytes && plans.oldest) plan_unlink(plans.oldest, &dead);
  }
  pthread_mutex_unlock(&plans.mu);
  free_dead(dead);
}

/* kiln_shutdown: no realize may run meanwhile. */
static void plans_free(void) {
  plan_entry *dead = NULL;
  pthread_mutex_lock(&plans.mu);
  while (plans.oldest) plan_unlink(plans.oldest, &dead);
  free(plans.bucket);
  plans.bucket = NULL;
  plans.nbuckets = 0;
  pthread_mutex_unlock(&plans.mu);
  free_dead(dead);
}

/* ---- a graph's structure --------------------------------------------------- */
/* Keys are built on every realize, the hot path of a cached one: words
 * written in place into the caller's frame (KEY_SMALL of them, the heap
 * past that), room made once per node. */
#define KEY_SMALL 512
#define NODE_WORDS (24 + 5 * KILN_MAX_DIMS)   /* the most one node writes */
#define KEY_WORDS_ON_STACK(k) \
  int64_t k##_small[KEY_SMALL]; \
  key_words k = {k##_small, 0, KEY_SMALL, false, false}

/* Room for more words; false (the key failed) when out of memory. */
static bool key_room(key_words *k, size_t more) {
  if (k->failed) return false;
  size_t cap = k->cap;
  if (!ir_grow((void **)&k->w, &k->cap, k->n, k->n + more, sizeof *k->w, k->heap ? NULL : k->w))
    return !(k->failed = true);
  k->heap |= k->cap != cap;   /* it left the caller's frame */
  return true;
}

static void word(key_words *k, int64_t v) { k->w[k->n++] = v; }

static void word_f(key_words *k, double v) {
  int64_t bits;
  memcpy(&bits, &v, sizeof bits);
  word(k, bits);
}

/* A 64x64 -> 128-bit product folded to 64 bits (wyhash's mum). */
static uint64_t mum(uint64_t a, uint64_t b) {
  __uint128_t p = (__uint128_t)a * b;
  return (uint64_t)p ^ (uint64_t)(p >> 64);
}

/* The key's hash picks a bucket; keys are then compared word by word, so
 * it only has to spread them. Two words per multiply, in two independent
 * lanes: a chain of dependent multiplies over every word (and gcc's SSE2
 * emulation of them when it vectorized four lanes) was 10% of a cached
 * realize's instructions. */
static uint64_t key_hash(const key_words *k) {
  uint64_t h[2] = {k->n * 0x9e3779b97f4a7c15ull, 0x2d358dccaa6c78a5ull};
  const uint64_t *w = (const uint64_t *)k->w;
  size_t i = 0;
  for (; i + 4 <= k->n; i += 4) {
    h[0] = mum(w[i] ^ h[0] ^ 0xa0761d6478bd642full, w[i + 1] ^ 0xe7037ed1a0b428dbull);
    h[1] = mum(w[i + 2] ^ h[1] ^ 0x8ebc6af09c88c6e3ull, w[i + 3] ^ 0x589965cc75374cc3ull);
  }
  for (; i < k->n; i++) h[0] = mum(w[i] ^ h[0] ^ 0xa0761d6478bd642full, 0xe7037ed1a0b428dbull);
  return mum(h[0] ^ 0x1d8e4e27c47d124full, h[1] ^ 0x9e3779b97f4a7c15ull);
}

/* The attributes n's kind of op reads (ops.def), less the values lowering
 * makes launch arguments (pass_arg_fields: the plan binds them), plus the
 * values that are code (pass_value_is_code). */
static void attr_words(key_words *k, const ir_node *n) {
  const ir_attr *a = &n->attr;
  unsigned args = pass_arg_fields(n->op);
  if (ir_op_has(n->op, IR_SRC) && !args) {
    word_f(k, a->value), word_f(k, a->start), word_f(k, a->step), word_f(k, a->end);
    word(k, (int64_t)a->seed), word(k, (int64_t)a->offset), word(k, a->low), word(k, a->high);
  } else if (ir_op_has(n->op, IR_MOVE)) {
    if (!args) word_f(k, a->value);
    word(k, a->dim), word(k, a->index), word(k, a->stride), word(k, a->flip_mask);
    for (int d = 0; d < n->ndim; d++) word(k, a->perm[d]), word(k, a->pad[d][0]), word(k, a->pad[d][1]);
  } else if (ir_op_is_indexed(n->op)) {
    word(k, a->dim);
  } else if (ir_op_has(n->op, IR_SORTING)) {
    word(k, a->sort_k), word(k, a->descending);
  } else if (ir_op_has(n->op, IR_ATTN)) {
    word_f(k, a->value), word(k, a->causal), word(k, a->group);
  }
  double code;
  if (n->op == IR_POW && pass_value_is_code(n, 1, &code)) word_f(k, code);
  word(k, a->to | (int64_t)a->compute << 8 | (int64_t)a->axes << 16);
}

/* Everything the passes and lowering read of the pending graph, in topo
 * order: ops, dtypes, devices, shapes, attributes, edges, the leaves' views
 * and which leaves share storage; the targets' positions; the options the
 * passes obey. Equal keys plan alike. Sets each pending node's scratch to
 * its position; the leaves' are looked up (other threads' graphs may read
 * the same leaves, so a cached realize writes nothing in them). */
static void graph_key(key_words *k, int nheld, ir_node *const *held, int nt, ir_node *const *targets, const pass_config *cfg) {
  IR_PTRMAP_ON_STACK(storage);
  IR_PTRMAP_ON_STACK(leaf_at);
  for (int i = 0; i < nheld; i++)
    if (held[i]->op != IR_BUFFER) held[i]->scratch = i;
    else if (!ir_ptrmap_put(&leaf_at, held[i], i)) k->failed = true;
  for (int i = 0; i < nheld && key_room(k, NODE_WORDS); i++) {
    const ir_node *n = held[i];
    word(k, n->op | (int64_t)n->dtype << 8 | (int64_t)n->device.type << 16 | (int64_t)n->ndim << 24 |
                (int64_t)n->status << 32 | (int64_t)n->nsrc << 40);
    word(k, n->device.index);
    for (int d = 0; d < n->ndim; d++) word(k, n->shape[d]);
    for (int s = 0; s < n->nsrc; s++)
      word(k, n->src[s]->op == IR_BUFFER ? ir_ptrmap_get(&leaf_at, n->src[s]) : n->src[s]->scratch);
    if (n->op != IR_BUFFER) {
      attr_words(k, n);
    } else {
      int first = n->buf ? ir_ptrmap_get(&storage, n->buf) : -2;
      if (first == -1 && !ir_ptrmap_put(&storage, n->buf, i)) k->failed = true;
      bool stand_in = n->buf && !n->buf->data && n->buf->bytes;
      for (int d = 0; d < n->ndim; d++) word(k, n->strides[d]);
      word(k, first), word(k, n->offset), word(k, stand_in);
      if (n->buf) word(k, n->buf->device.type | (int64_t)n->buf->device.index << 8);
    }
  }
  ir_ptrmap_free(&storage);
  ir_ptrmap_free(&leaf_at);
  size_t off = cfg->off ? strlen(cfg->off) : 0, off_words = (off + sizeof(int64_t) - 1) / sizeof(int64_t);
  if (!key_room(k, (size_t)nt + 2 + off_words)) return;
  for (int i = 0; i < nt; i++) word(k, targets[i]->scratch);
  word(k, cfg->target);
  word(k, (int64_t)off);
  if (off_words) k->w[k->n + off_words - 1] = 0;   /* the last word's padding */
  if (off) memcpy(k->w + k->n, cfg->off, off);
  k->n += off_words;
}

/* ---- realize ---------------------------------------------------------------- */
/* -1 when out of memory. */
static int collect_leaves(int nheld, ir_node *const *held, ir_node ***leaves) {
  *leaves = ir_malloc(sizeof **leaves * ((size_t)nheld + 1));
  if (!*leaves) return -1;
  int n = 0;
  for (int i = 0; i < nheld; i++)
    if (held[i]->op == IR_BUFFER) (*leaves)[n++] = held[i];
  return n;
}

/* The nodes whose values outlive this realize: the targets, those a handle
 * holds, and the sources of one that outlives it and that no step stores
 * (it stays pending, so it still reads them). References beyond the
 * realize's own hold and its pending nodes' edges are the user's. False
 * when out of memory. */
static bool outliving(const rt_exec *p, int n, ir_node *const *held, int nt, ir_node *const *targets, bool *lives) {
  int small[64], *edges = n <= 64 ? small : ir_malloc(sizeof *edges * (size_t)n);
  if (!edges) return false;
  memset(edges, 0, sizeof *edges * (size_t)n);
  memset(lives, 0, sizeof *lives * (size_t)n);
  for (int t = 0; t < nt; t++) lives[targets[t]->scratch] = true;
  for (int i = 0; i < n; i++)
    for (int s = 0; s < held[i]->nsrc; s++)
      if (held[i]->src[s]->op != IR_BUFFER) edges[held[i]->src[s]->scratch]++;
  for (int i = n - 1; i >= 0; i--) {
    if (held[i]->op == IR_BUFFER) continue;   /* a leaf's value is not this realize's (nor its scratch) */
    lives[i] = lives[i] || held[i]->refs - 1 - edges[i] > 0;
    bool pending = rt_exec_node(p, i)->slot < 0;
    for (int s = 0; lives[i] && pending && s < held[i]->nsrc; s++)
      if (held[i]->src[s]->op != IR_BUFFER) lives[held[i]->src[s]->scratch] = true;
  }
  if (edges != small) free(edges);
  return true;
}

/* ---- histories ------------------------------------------------------------
 * A node this realize computes keeps what it was computed from (ir/graph.h:
 * hist), unless that history would reach back past KILN_GRAD_HISTORY_MB of
 * data realized since: the clock counts the bytes of every computed node
 * turned into a buffer, and a history is stamped with the oldest clock it
 * reaches through the histories of the buffers it reads. */
static _Atomic uint64_t realized_clock;

/* The oldest clock node i's history reaches (UINT64_MAX: none), from its
 * sources', sources first (reach[j] for the pending held[j]). */
static uint64_t reach_of(const ir_node *n, const uint64_t *reach) {
  uint64_t r = UINT64_MAX;
  for (int s = 0; s < n->nsrc; s++) {
    const ir_node *x = n->src[s];
    uint64_t v = x->op != IR_BUFFER ? reach[x->scratch] : x->hist ? x->hist_clock : UINT64_MAX;
    if (v < r) r = v;
  }
  return r;
}

/* Runs p over this graph's leaves; then every pending node whose value
 * outlives the realize and that a step stored becomes a BUFFER over it: the
 * targets, and intermediates a handle still holds, each keeping its history
 * (above). That goes sources first and reads no node before the one it
 * turns (realize_graph's hold). */
static kiln_status run_plan(const rt_exec *p, int nt, ir_node *const *targets, int nheld, ir_node *const *held,
                            int nleaves, ir_node *const *leaves, bool fresh, int debug) {
  int ns = rt_exec_nslots(p);
  rt_buffer *small_slots[32], **slots = ns <= 32 ? small_slots : ir_malloc(sizeof *slots * (size_t)ns);
  bool small_lives[64], *lives = nheld <= 64 ? small_lives : ir_malloc(sizeof *lives * (size_t)nheld);
  bool small_hold[32], *hold = ns <= 32 ? small_hold : ir_malloc(sizeof *hold * (size_t)ns);
  uint64_t small_reach[64], *reach = nheld <= 64 ? small_reach : ir_malloc(sizeof *reach * (size_t)nheld);
  kiln_status st = KILN_OK;
  if (!slots || !lives || !hold || !reach || !outliving(p, nheld, held, nt, targets, lives)) {
    st = ir_error_oom(targets[0]);
  } else {
    memset(slots, 0, sizeof *slots * (size_t)ns);
    memset(hold, 0, sizeof *hold * (size_t)ns);
    for (int i = 0; i < nleaves; i++) slots[i] = leaves[i]->buf;
    for (int i = 0; i < nheld; i++)
      if (lives[i] && held[i]->op != IR_BUFFER && rt_exec_node(p, i)->slot >= 0) hold[rt_exec_node(p, i)->slot] = true;
    st = rt_exec_run(p, slots, hold, fresh, debug, held);
  }
  uint64_t bytes = 0, window = (uint64_t)rt_opts()->grad_history_bytes;
  for (int i = 0; st == KILN_OK && i < nheld; i++) {
    const rt_exec_view *v = rt_exec_node(p, i);
    if (held[i]->op == IR_BUFFER) continue;
    reach[i] = reach_of(held[i], reach);
    if (lives[i] && v->slot >= 0) bytes += slots[v->slot]->bytes;
  }
  uint64_t now = st == KILN_OK ? atomic_fetch_add(&realized_clock, bytes) + bytes : 0;
  for (int i = 0; st == KILN_OK && i < nheld; i++) {
    const rt_exec_view *v = rt_exec_node(p, i);
    if (!lives[i] || held[i]->op == IR_BUFFER || v->slot < 0) continue;
    uint64_t oldest = reach[i] < now ? reach[i] : now;
    rt_buffer *b = v->slot < nleaves ? rt_buffer_shared(slots[v->slot]) : (rt_buffer_retain(slots[v->slot]), slots[v->slot]);
    bool shares = b != slots[v->slot];   /* a view of an assignable tensor: it is one too */
    ir_node_set_computed(held[i], b, v->strides, v->offset, window && now - oldest <= window, oldest);
    held[i]->assignable |= shares;
  }
  for (int i = nleaves; st == KILN_OK && i < ns; i++) rt_buffer_release(slots[i]);
  if (slots != small_slots) free(slots);
  if (lives != small_lives) free(lives);
  if (hold != small_hold) free(hold);
  if (reach != small_reach) free(reach);
  return st;
}

/* A realize that plans gives its graph private aliases of the leaves
 * (planning writes every node's scratch, and the passes rewrite the graph),
 * in held too; then the leaves in held's order. -1 when out of memory. */
static int plan_leaves(bool planning, int nheld, ir_node **held, ir_node ***leaves) {
  if (planning && !ir_graph_private_leaves(nheld, held)) return -1;
  return collect_leaves(nheld, held, leaves);
}

/* KILN_DEBUG=2: the plan for target t's realize, made in ms or found (< 0). */
static void plan_debug(const rt_exec *p, const ir_node *t, double ms) {
  char where[256];
  snprintf(where, sizeof where, "%s at %s:%d", t->api ? t->api : ir_ops[t->op].name, t->file ? t->file : "?", t->line);
  rt_exec_debug(p, where, ms);
}

static kiln_status realize_graph(int n, ir_node *const *nodes) {
  ir_node **held, **leaves;
  int nheld = ir_graph_collect(n, nodes, &held);
  if (nheld < 0) return ir_error_oom(nodes[0]);
  pass_config cfg = {.off = rt_opts()->passes, .debug = rt_opts()->debug, .target = -1};
  KEY_WORDS_ON_STACK(key);
  graph_key(&key, nheld, held, n, nodes, &cfg);
  uint64_t h = key_hash(&key);
  plan_entry *e = key.failed ? NULL : plan_find(h, &key, held);   /* a partial key finds nothing */
  int nleaves = plan_leaves(!e, nheld, held, &leaves);
  if (nleaves < 0) {
    if (e) plan_done(e);
    key_free(&key);
    free(held);
    return ir_error_oom(nodes[0]);
  }
  /* Running drops the targets' sources. A realize that plans reads the
   * graph after its run (plan_insert): it holds every node until it is
   * done. A cached one reads held[i] after its run only in run_plan's last
   * loop, which goes sources first: every node from held[i] on is still
   * reachable from a target through nodes not yet turned into buffers. */
  bool hold = !e;
  for (int i = 0; hold && i < nheld; i++) ir_node_retain(held[i]);
  rt_exec *p = e ? e->plan : NULL;
  kiln_status st = KILN_OK;
  double t0 = cfg.debug >= 2 ? rt_now_ms() : 0;
  if (!e) {
    int small[16], *tpos = n <= 16 ? small : ir_malloc(sizeof *tpos * (size_t)n);
    for (int t = 0; tpos && t < n; t++) tpos[t] = nodes[t]->scratch;
    if (tpos) p = rt_exec_build(nheld, held, n, tpos, nleaves, leaves, &cfg, &st);
    else st = ir_error_oom(nodes[0]);
    if (tpos != small) free(tpos);
    if (p) rt_count(&rt_stats_mut()->plans, 1);
  }
  if (p && cfg.debug >= 2) plan_debug(p, nodes[0], e ? -1 : rt_now_ms() - t0);
  if (p) st = run_plan(p, n, nodes, nheld, held, nleaves, leaves, !e, cfg.debug);
  if (e) plan_done(e);
  else if (p && key.failed) rt_exec_free(p);
  else if (p) plan_insert(h, &key, held, p);   /* after its run: inserting may free it */
  key_free(&key);
  for (int i = 0; hold && i < nheld; i++) ir_node_release(held[i]);
  free(held);
  free(leaves);
  return st;
}

/* No lock is held for a realize: its graph is its own (a cached one only
 * reads the leaves, which other threads may read too; one that plans gives
 * its graph private aliases of them), and what it shares (plans, kernels, the JIT, the
 * allocator, the pool) locks itself briefly. Targets already realized need
 * nothing, and other threads may be reading them. */
kiln_status rt_realize(int n, ir_node *const *nodes) {
  ir_node *small[16], **pending = n <= 16 ? small : ir_malloc(sizeof *pending * (size_t)n);
  if (!pending) return ir_error_oom(nodes[0]);
  int np = 0;
  for (int i = 0; i < n; i++)
    if (nodes[i]->op != IR_BUFFER) pending[np++] = nodes[i];
  kiln_status st = np ? realize_graph(np, pending) : KILN_OK;
  if (pending != small) free(pending);
  return st;
}

void rt_plans_forget(void) { plans_free(); }

void rt_shutdown(void) {
  plans_free();
  rt_cache_shutdown();
  rt_dynamic_shutdown();
  rt_pool_shutdown();
  rt_buffer_cache_free();
  rt_cublas_shutdown();
  rt_cuda_device_shutdown();
  rt_cuda_shutdown();
}
