/* graph.c: the lazy DAG's nodes: creation, reference counting, realized
 * buffers, and the iterative walks (collect, find error, print) that every
 * later stage uses. No walk recurses: a million-node chain is an ordinary graph. */
#include "ir/graph.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Node ids come in blocks per thread: one atomic per ID_BLOCK nodes, not
 * one per node (a node's creation costs a few atomics in all). Ids are
 * unique and grow on each thread; they only name nodes in printouts. */
#define ID_BLOCK 1024
static _Atomic uint64_t next_block;
static _Thread_local uint64_t next_id, ids_end;

static uint64_t new_id(void) {
  if (next_id == ids_end) {
    next_id = atomic_fetch_add(&next_block, ID_BLOCK);
    ids_end = next_id + ID_BLOCK;
  }
  return next_id++;
}
static _Thread_local const char *api;   /* ir_api_push */

const char *ir_api_push(const char *name) {
  const char *prev = api;
  if (!api) api = name;
  return prev;
}

void ir_api_pop(const char *prev) { api = prev; }

int64_t ir_numel(int ndim, const int64_t *shape) {
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return 0;   /* (0, 2^62, 8) is empty, not an overflow */
  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    if (__builtin_mul_overflow(n, shape[i], &n)) return -1;
  return n;
}

/* Like PyTorch, a size-0 dim counts as 1 so strides stay distinct. Only an
 * empty tensor (the frontend refuses any other shape whose element count
 * overflows) can have strides past int64, as (0, 2^62, 8) has: they
 * saturate, and nothing reads them. */
void ir_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    if (__builtin_mul_overflow(s, shape[i] > 1 ? shape[i] : 1, &s)) s = INT64_MAX;
  }
}

void ir_copy_view(char *dst, const int64_t *dst_strides, const char *src, const int64_t *src_strides, size_t es, int ndim,
                  const int64_t *shape) {
  int64_t numel = ir_numel(ndim, shape), dense[KILN_MAX_DIMS];
  if (numel <= 0) return;
  ir_contiguous_strides(ndim, shape, dense);
  const int64_t *ds = dst_strides ? dst_strides : dense, *ss = src_strides ? src_strides : dense;
  int inner = ndim - 1;
  int64_t row = ndim ? shape[inner] : 1, idx[KILN_MAX_DIMS] = {0};
  bool rows = !ndim || (ds[inner] == 1 && ss[inner] == 1);
  for (int64_t done = 0; done < numel; done += row) {
    int64_t d0 = 0, s0 = 0;
    for (int d = 0; d < ndim; d++) d0 += idx[d] * ds[d], s0 += idx[d] * ss[d];
    if (rows) memcpy(dst + d0 * (int64_t)es, src + s0 * (int64_t)es, (size_t)row * es);
    else
      for (int64_t j = 0; j < row; j++)
        memcpy(dst + (d0 + j * ds[inner]) * (int64_t)es, src + (s0 + j * ss[inner]) * (int64_t)es, es);
    for (int d = inner - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
  }
}

/* Strides of size-1 dims never matter; an empty tensor is trivially contiguous. */
bool ir_node_is_contiguous(const ir_node *n) {
  if (ir_numel(n->ndim, n->shape) == 0) return true;
  int64_t want[KILN_MAX_DIMS];
  ir_contiguous_strides(n->ndim, n->shape, want);
  for (int i = 0; i < n->ndim; i++)
    if (n->shape[i] != 1 && n->strides[i] != want[i]) return false;
  return true;
}

static int64_t add_saturating(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

/* n (all of it, zeroed first) as a new node with one reference, holding
 * the caller's references to its sources. */
static void node_init(ir_node *n, ir_op op, kiln_dtype dt, int ndim, const int64_t *shape, int nsrc,
                      ir_node *const *src, const char *file, int line) {
  memset(n, 0, sizeof *n);
  n->magic = IR_NODE_LIVE;
  n->refs = 1;
  n->op = op;
  n->dtype = dt;
  n->device = (kiln_device){KILN_CPU, 0};
  n->ndim = ndim;
  if (ndim) memcpy(n->shape, shape, (size_t)ndim * sizeof *shape);
  ir_contiguous_strides(ndim, n->shape, n->strides);
  n->nsrc = nsrc;
  n->pending = 1;
  for (int i = 0; i < nsrc; i++) {
    n->src[i] = src[i];
    if (src[i]->op != IR_BUFFER) n->pending = add_saturating(n->pending, src[i]->pending);
    n->symbolic |= src[i]->symbolic;
  }
  if (nsrc) n->device = src[0]->device;
  n->file = file;
  n->line = line;
  n->api = api;
  n->id = new_id();
}

/* One error node with a message buffer, kept so that the error for a failed
 * allocation can itself be made; refilled when memory allows. */
#define RESERVE_MSG 512
static ir_node *_Atomic reserve;

static void reserve_refill(void) {
  if (atomic_load_explicit(&reserve, memory_order_relaxed)) return;
  ir_node *n = ir_calloc(1, sizeof *n), *none = NULL;
  if (n && !(n->msg = ir_malloc(RESERVE_MSG))) n = (free(n), NULL);
  if (n && !atomic_compare_exchange_strong(&reserve, &none, n)) {
    free(n->msg);
    free(n);
  }
}

static ir_node *snapshot_alias(const ir_node *leaf);

ir_node *ir_node_new_taking(ir_op op, kiln_dtype dt, int ndim, const int64_t *shape,
                            int nsrc, ir_node *const *src, const char *file, int line) {
  IR_ASSERT(ndim >= 0 && ndim <= KILN_MAX_DIMS && nsrc >= 0 && nsrc <= IR_MAX_SRC);
  reserve_refill();
  ir_node *n = ir_malloc(sizeof *n), *in[IR_MAX_SRC];
  bool symbolic = false, ok = n;
  for (int i = 0; i < nsrc; i++) symbolic |= (in[i] = src[i])->symbolic;
  for (int i = 0; i < nsrc && ok; i++) {
    if (!in[i]->assignable || symbolic) continue;
    ir_node *a = snapshot_alias(in[i]);
    ok = a;
    if (a) ir_node_release(in[i]), in[i] = a;
  }
  if (!ok) {
    ir_error_setf("%s:%d: %s: out of memory", file ? file : "?", line, api ? api : ir_ops[op].name);
    for (int i = 0; i < nsrc; i++) ir_node_release(in[i]);
    free(n);
    return NULL;
  }
  node_init(n, op, dt, ndim, shape, nsrc, in, file, line);
  return n;
}

ir_node *ir_node_new(ir_op op, kiln_dtype dt, int ndim, const int64_t *shape,
                     int nsrc, ir_node *const *src, const char *file, int line) {
  for (int i = 0; i < nsrc; i++) ir_node_retain(src[i]);
  return ir_node_new_taking(op, dt, ndim, shape, nsrc, src, file, line);
}

/* Appends msg ("max: Dimension out of range") under the composite's name:
 * its leading op name replaced ("softmax: Dimension out of range"); a
 * message that already starts with the composite's name ("mean(): ...",
 * "index \"0\": ...") is kept. */
static void append_under_api(ir_str *b, const char *msg) {
  size_t n = strlen(api);
  const char *colon = strstr(msg, ": ");
  bool named = colon && !memchr(msg, ' ', (size_t)(colon - msg));
  if (!strncmp(msg, api, n) && !isalnum((unsigned char)msg[n]) && msg[n] != '_') ir_str_printf(b, "%s", msg);
  else ir_str_printf(b, "%s: %s", api, named ? colon + 2 : msg);
}

/* The error node when there is no memory for one and the reserve is spent:
 * shared, never freed, so that reporting an allocation failure cannot
 * itself fail. Its message is generic; the last error, set when it is
 * returned, names the op. */
static ir_node oom_node = {.magic = IR_NODE_LIVE, .refs = 1, .op = IR_CONST, .dtype = KILN_F32,
                           .status = KILN_ERR_MEMORY, .msg = "out of memory", .file = "?"};

ir_node *ir_node_oom(void) { return &oom_node; }

/* The shared node's message on each thread: the error that came with it. */
static _Thread_local char oom_msg[RESERVE_MSG];

ir_node *ir_node_oom_named(void) {
  snprintf(oom_msg, sizeof oom_msg, "%s", ir_error_get());
  return &oom_node;
}

const char *ir_node_msg(const ir_node *n) { return n == &oom_node && oom_msg[0] ? oom_msg : n->msg; }

/* Out of memory: the reserved node with the message "file:line: fmt" cut to
 * its buffer; the last error says the same. NULL when the reserve is spent. */
static ir_node *error_from_reserve(const char *file, int line, const char *fmt, va_list ap) {
  char m[RESERVE_MSG];
  int k = file ? snprintf(m, sizeof m, "%s:%d: ", file, line) : 0;
  vsnprintf(m + k, sizeof m - (size_t)k, fmt, ap);
  ir_error_set(m);
  ir_node *n = atomic_exchange(&reserve, NULL);
  if (!n) return NULL;
  char *msg = n->msg;
  node_init(n, IR_CONST, KILN_F32, 0, NULL, 0, NULL, file, line);
  n->msg = memcpy(msg, m, sizeof m);
  return n;
}

/* A NULL file gives no location prefix: the frontend uses it to copy an
 * already-located message onto a new (sticky) error node. */
ir_node *ir_node_error(kiln_status st, const char *file, int line, const char *fmt, ...) {
  ir_str m = {0}, b = {0};
  va_list ap;
  va_start(ap, fmt);
  ir_str_vprintf(&m, fmt, ap);
  va_end(ap);
  if (file) ir_str_printf(&b, "%s:%d: ", file, line);
  /* a NULL file marks a copied, already-located message: it keeps its name */
  if (file && api && !m.failed) append_under_api(&b, m.s);
  else if (!m.failed) ir_str_printf(&b, "%s", m.s);
  bool made = !m.failed && !b.failed;
  ir_str_free(&m);
  ir_node *n = made ? ir_node_new(IR_CONST, KILN_F32, 0, NULL, 0, NULL, file, line) : NULL;
  if (n) {
    n->msg = b.s;
  } else {
    ir_str_free(&b);
    va_start(ap, fmt);
    n = error_from_reserve(file, line, fmt, ap);
    va_end(ap);
    if (!n) return ir_node_oom_named();   /* error_from_reserve set the last error */
  }
  n->status = st;
  n->pending = 0;   /* an error never runs */
  return n;
}

kiln_status ir_error_oom(const ir_node *n) {
  ir_error_setf("%s:%d: %s: out of memory", n->file ? n->file : "?", n->line, n->api ? n->api : ir_ops[n->op].name);
  return KILN_ERR_MEMORY;
}

/* Atomic counts: handles may be shared between threads even though scopes are not. */
void ir_node_retain(ir_node *n) {
  if (n) __atomic_add_fetch(&n->refs, 1, __ATOMIC_RELAXED);
}

/* ---- a growable stack of nodes, for the iterative walks ------------------ */
typedef struct { ir_node **v; size_t n, cap; } node_stack;

static bool stack_push(node_stack *s, ir_node *n) {
  if (!ir_grow((void **)&s->v, &s->cap, s->n, s->n + 1, sizeof *s->v, NULL)) return false;
  s->v[s->n++] = n;
  return true;
}

/* ---- freed nodes: the quarantine that makes use after free detectable ---- */
#define QUARANTINE 4096   /* freed nodes held before the oldest is really freed */
static struct {
  pthread_mutex_t lock;
  ir_node *v[QUARANTINE];
  int next, n;
} quarantine = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Until the runtime installs itself no buffer exists, so only
 * check_handles is read: off. */
static _Atomic(const ir_host *) host;

void ir_set_host(const ir_host *h) { atomic_store(&host, h); }

static void buffer_retain(rt_buffer *b) {
  if (b) atomic_load_explicit(&host, memory_order_relaxed)->retain(b);
}

static void buffer_release(rt_buffer *b) {
  if (b) atomic_load_explicit(&host, memory_order_relaxed)->release(b);
}

static void node_free(ir_node *n) {
  n->magic = 0;
  const ir_host *h = atomic_load_explicit(&host, memory_order_relaxed);
  if (!h || !h->check_handles) {
    free(n);
    return;
  }
  pthread_mutex_lock(&quarantine.lock);
  ir_node *old = quarantine.n == QUARANTINE ? quarantine.v[quarantine.next] : NULL;
  quarantine.v[quarantine.next] = n;
  quarantine.next = (quarantine.next + 1) % QUARANTINE;
  if (quarantine.n < QUARANTINE) quarantine.n++;
  pthread_mutex_unlock(&quarantine.lock);
  free(old);
}

void ir_quarantine_flush(void) {
  ir_node *r = atomic_exchange(&reserve, NULL);
  if (r) free(r->msg);
  free(r);
  pthread_mutex_lock(&quarantine.lock);
  for (int i = 0; i < quarantine.n; i++) free(quarantine.v[i]);
  quarantine.n = quarantine.next = 0;
  pthread_mutex_unlock(&quarantine.lock);
}

/* Frees n and then each source it held the last reference to. The dead
 * nodes whose sources are still to release form a stack linked through
 * their own dead_next, so the depth of the graph never reaches the C stack
 * and releasing never allocates. */
void ir_node_release(ir_node *n) {
  ir_node *dead = NULL;
  for (;;) {
    if (n && n != &oom_node && __atomic_sub_fetch(&n->refs, 1, __ATOMIC_ACQ_REL) == 0) {
      buffer_release(n->buf);
      n->buf = NULL;
      if (n->hist) {   /* a BUFFER has no sources: its history goes as one */
        n->src[n->nsrc++] = n->hist;
        n->hist = NULL;
      }
      free(n->msg);
      n->msg = NULL;
      n->dead_next = dead;
      dead = n;
    }
    while (dead && !dead->nsrc) {
      ir_node *d = dead;
      dead = d->dead_next;
      node_free(d);
    }
    if (!dead) return;
    n = dead->src[--dead->nsrc];
  }
}

void ir_node_set_buffer(ir_node *n, rt_buffer *buf) {
  buffer_release(n->buf);
  n->op = IR_BUFFER;
  n->buf = buf;
  ir_contiguous_strides(n->ndim, n->shape, n->strides);
  n->offset = 0;
  n->pending = 0;
  int nsrc = n->nsrc;
  n->nsrc = 0;
  for (int i = 0; i < nsrc; i++) {
    ir_node_release(n->src[i]);
    n->src[i] = NULL;
  }
}

void ir_node_set_src(ir_node *n, int slot, ir_node *src) {
  ir_node_retain(src);
  ir_node_release(n->src[slot]);
  n->src[slot] = src;
}

void ir_node_set_const(ir_node *n, double value) {
  ir_node_set_buffer(n, NULL);   /* drops the sources */
  n->op = IR_CONST;
  n->attr.value = value;
}

void ir_node_set_storage(ir_node *n, rt_buffer *buf, const int64_t *strides, int64_t offset) {
  ir_node_set_buffer(n, buf);
  memcpy(n->strides, strides, sizeof(int64_t) * (size_t)n->ndim);
  n->offset = offset;
}

/* n's op, attributes and sources, moved into a new node (NULL when out of
 * memory): what a computed node was before it became a buffer. */
static ir_node *history_of(ir_node *n) {
  ir_node *h = ir_malloc(sizeof *h);
  if (!h) return NULL;
  node_init(h, n->op, n->dtype, n->ndim, n->shape, n->nsrc, n->src, n->file, n->line);
  n->nsrc = 0;   /* h holds the sources' references now */
  h->device = n->device;
  h->attr = n->attr;
  memcpy(h->strides, n->strides, sizeof h->strides);
  h->offset = n->offset;
  h->api = n->api;
  h->id = n->id;
  h->pending = 0;   /* never realized itself: only read by kiln_grad */
  return h;
}

void ir_node_set_computed(ir_node *n, rt_buffer *buf, const int64_t *strides, int64_t offset, bool keep,
                          uint64_t clock) {
  ir_node *h = keep && n->op != IR_BUFFER ? history_of(n) : NULL;
  ir_node_set_storage(n, buf, strides, offset);
  n->hist = h;
  n->hist_clock = clock;
  n->hist_cut = !h;
}

void ir_node_set_view(ir_node *n, const ir_node *of, const int64_t *strides, int64_t offset) {
  buffer_retain(of->buf);
  ir_node_set_storage(n, of->buf, strides, offset);
}

ir_node *ir_node_alias(const ir_node *leaf) {
  ir_node *a = ir_node_new(IR_BUFFER, leaf->dtype, leaf->ndim, leaf->shape, 0, NULL, leaf->file, leaf->line);
  if (!a) return NULL;
  a->device = leaf->device;
  a->id = leaf->id;
  a->api = leaf->api;
  a->symbolic = leaf->symbolic;
  a->pending = 0;
  ir_node_retain(a->hist = leaf->hist);
  a->hist_clock = leaf->hist_clock;
  a->hist_cut = leaf->hist_cut;
  buffer_retain(leaf->buf);
  a->buf = leaf->buf;
  memcpy(a->strides, leaf->strides, sizeof a->strides);
  a->offset = leaf->offset;
  return a;
}

/* leaf as it is now: its alias over a snapshot of its storage. */
static ir_node *snapshot_alias(const ir_node *leaf) {
  ir_node *a = ir_node_new(IR_BUFFER, leaf->dtype, leaf->ndim, leaf->shape, 0, NULL, leaf->file, leaf->line);
  rt_buffer *s = a ? atomic_load_explicit(&host, memory_order_relaxed)->snapshot(leaf->buf) : NULL;
  if (!s) {
    ir_node_release(a);
    return NULL;
  }
  a->device = leaf->device;
  a->id = leaf->id;   /* the same tensor to kiln_grad */
  a->api = leaf->api;
  a->pending = 0;
  a->buf = s;
  memcpy(a->strides, leaf->strides, sizeof a->strides);
  a->offset = leaf->offset;
  return a;
}

ir_node *ir_node_detached(const ir_node *leaf) {
  ir_node *a = ir_node_alias(leaf);
  if (!a) return NULL;
  ir_node_release(a->hist);
  a->hist = NULL;
  a->hist_cut = false;
  a->id = new_id();
  return a;
}

bool ir_graph_private_leaves(int n, ir_node **topo) {
  IR_PTRMAP_ON_STACK(alias_of);   /* original leaf -> its position in topo */
  ir_node **alias = ir_calloc((size_t)n + 1, sizeof *alias);
  bool ok = alias;
  for (int i = 0; ok && i < n; i++)
    if (topo[i]->op == IR_BUFFER) ok = (alias[i] = ir_node_alias(topo[i])) && ir_ptrmap_put(&alias_of, topo[i], i);
  for (int i = 0; alias && i < n; i++)
    if (alias[i] && ok) topo[i] = alias[i];
    else if (alias[i]) ir_node_release(alias[i]);   /* out of memory: topo as it was */
  free(alias);
  if (!ok) {
    ir_ptrmap_free(&alias_of);
    return false;
  }
  for (int i = 0; i < n; i++)
    for (int s = 0; topo[i]->op != IR_BUFFER && s < topo[i]->nsrc; s++) {
      int j = topo[i]->src[s]->op == IR_BUFFER ? ir_ptrmap_get(&alias_of, topo[i]->src[s]) : -1;
      if (j >= 0) ir_node_set_src(topo[i], s, topo[j]);
    }
  for (int i = 0; i < n; i++)
    if (topo[i]->op == IR_BUFFER) ir_node_release(topo[i]);   /* its readers hold it now */
  ir_ptrmap_free(&alias_of);
  return true;
}

/* A node on the walk's stack and the next of its sources to visit. */
typedef struct {
  ir_node *n;
  int next;
} open_node;

/* Pushes n on the walk's stack, which starts in the caller's frame (small,
 * cap) and moves to the heap when it outgrows it. */
static bool open_push(open_node **v, size_t *n, size_t *cap, open_node *small, ir_node *node) {
  if (!ir_grow((void **)v, cap, *n, *n + 1, sizeof **v, small)) return false;
  (*v)[(*n)++] = (open_node){node, 0};
  return true;
}

/* Post-order DFS with an explicit stack: a node is emitted after all its
 * sources, so the output is a topological order. The graph is a DAG, so a
 * node marked on entry can never be reached again while still open. Each
 * node's next source is kept on the stack: one map lookup per edge (a
 * cached realize collects its graph every time). */
int ir_graph_collect(int nroots, ir_node *const *roots, ir_node ***out) {
  IR_PTRMAP_ON_STACK(seen);
  open_node small[64], *open = small;
  size_t nopen = 0, cap = 64;
  node_stack order = {0};
  bool ok = true;
  for (int r = 0; ok && r < nroots; r++) {
    if (!roots[r] || ir_ptrmap_get(&seen, roots[r]) >= 0) continue;
    ok = ir_ptrmap_put(&seen, roots[r], 0) && open_push(&open, &nopen, &cap, small, roots[r]);
    while (ok && nopen) {
      open_node *o = &open[nopen - 1];
      if (o->next < o->n->nsrc) {
        ir_node *s = o->n->src[o->next++];
        if (ir_ptrmap_get(&seen, s) < 0) ok = ir_ptrmap_put(&seen, s, 0) && open_push(&open, &nopen, &cap, small, s);
        continue;
      }
      nopen--;
      ok = stack_push(&order, o->n);
    }
  }
  ir_ptrmap_free(&seen);
  if (open != small) free(open);
  if (!ok) free(order.v);
  *out = ok ? order.v : NULL;
  return ok ? (int)order.n : -1;
}

bool ir_graph_clone(int n, ir_node *const *topo, ir_node **clones) {
  for (int i = 0; i < n; i++) topo[i]->scratch = i;
  for (int i = 0; i < n; i++) {
    ir_node *o = topo[i];
    if (o->op == IR_BUFFER) {
      ir_node_retain(clones[i] = o);
      continue;
    }
    ir_node *src[IR_MAX_SRC];
    for (int s = 0; s < o->nsrc; s++) src[s] = clones[o->src[s]->scratch];
    ir_node *c = ir_node_new(o->op, o->dtype, o->ndim, o->shape, o->nsrc, src, o->file, o->line);
    if (c && o->msg && !(c->msg = ir_strdup(o->msg))) ir_node_release(c), c = NULL;
    if (!c) {
      while (i > 0) ir_node_release(clones[--i]);
      return false;
    }
    c->device = o->device;
    c->attr = o->attr;
    memcpy(c->strides, o->strides, sizeof c->strides);
    c->offset = o->offset;
    c->status = o->status;
    c->id = o->id;
    c->api = o->api;
    c->symbolic = o->symbolic;
    clones[i] = c;
  }
  return true;
}

ir_node *ir_graph_find_error(int nroots, ir_node *const *roots) {
  ir_node **topo;
  int n = ir_graph_collect(nroots, roots, &topo);
  ir_node *err = n < 0 ? &oom_node : NULL;
  for (int i = 0; i < n && !err; i++)
    if (topo[i]->status != KILN_OK) err = topo[i];
  free(topo);
  return err;
}

/* ---- assignments a compiled function performs ------------------------------ */
typedef struct { ir_node *dst, *value; } assignment;
static _Thread_local struct {
  assignment *v;
  size_t n, cap;
} assigns;

bool ir_assign_record(ir_node *dst, ir_node *value) {
  if (!ir_grow((void **)&assigns.v, &assigns.cap, assigns.n, assigns.n + 1, sizeof *assigns.v, NULL)) {
    ir_node_release(dst);
    ir_node_release(value);
    return false;
  }
  assigns.v[assigns.n++] = (assignment){dst, value};
  return true;
}

int ir_assign_take(ir_node ***dst, ir_node ***value) {
  int n = (int)assigns.n;
  *dst = ir_malloc(sizeof **dst * (assigns.n + 1));
  *value = ir_malloc(sizeof **value * (assigns.n + 1));
  if (!*dst || !*value) {
    free(*dst);
    free(*value);
    *dst = *value = NULL;
    return -1;   /* the list stays: a later take may succeed */
  }
  for (size_t i = 0; i < assigns.n; i++) (*dst)[i] = assigns.v[i].dst, (*value)[i] = assigns.v[i].value;
  free(assigns.v);
  assigns.v = NULL;
  assigns.n = assigns.cap = 0;
  return n;
}

/* ---- printing ----------------------------------------------------------- */
static void print_src_ref(ir_str *b, const ir_ptrmap *pos, const ir_node *s) {
  int i = ir_ptrmap_get(pos, s);
  if (i >= 0) ir_str_printf(b, "%%%d", i);
  else ir_str_printf(b, "#%llu", (unsigned long long)s->id);   /* outside the list */
}

static void print_ints(ir_str *b, int n, const int64_t *v) {
  ir_str_printf(b, "(");
  for (int i = 0; i < n; i++) ir_str_printf(b, i ? ",%lld" : "%lld", (long long)v[i]);
  ir_str_printf(b, ")");
}

static void print_perm(ir_str *b, int n, const int *perm) {
  int64_t v[KILN_MAX_DIMS];
  for (int i = 0; i < n; i++) v[i] = perm[i];
  print_ints(b, n, v);
}

static void print_flip(ir_str *b, unsigned mask) {
  ir_str_printf(b, " dims (");
  for (int d = 0, first = 1; d < KILN_MAX_DIMS; d++)
    if (mask >> d & 1) {
      ir_str_printf(b, first ? "%d" : ",%d", d);
      first = 0;
    }
  ir_str_printf(b, ")");
}

static void print_pad(ir_str *b, const ir_node *n) {
  ir_str_printf(b, " pad (");
  for (int d = 0; d < n->ndim; d++) {
    if (d) ir_str_printf(b, ",");
    print_ints(b, 2, n->attr.pad[d]);
  }
  ir_str_printf(b, ") value %g", n->attr.value);
}

static void print_window(ir_str *b, const ir_node *n) {
  const int64_t *v[] = {n->attr.win.k, n->attr.win.s, n->attr.win.p, n->attr.win.d, n->attr.win.u};
  static const char *const names[] = {"kernel", "stride", "padding", "dilation", "step"};
  for (int i = 0; i < 5; i++) {
    ir_str_printf(b, " %s ", names[i]);
    print_ints(b, 2, v[i]);
  }
}

/* The attributes that say what a source or movement node produces. */
static void print_attrs(ir_str *b, const ir_node *n) {
  const ir_attr *a = &n->attr;
  switch (n->op) {
  case IR_BUFFER:
    if (!ir_node_is_contiguous(n)) {
      ir_str_printf(b, " strides");
      print_ints(b, n->ndim, n->strides);
    }
    if (n->offset) ir_str_printf(b, " offset %lld", (long long)n->offset);
    break;
  case IR_CONST: ir_str_printf(b, " %g", a->value); break;
  case IR_ARANGE: ir_str_printf(b, " start %g step %g", a->start, a->step); break;
  case IR_LINSPACE: ir_str_printf(b, " %g to %g step %g", a->start, a->end, a->step); break;
  case IR_RAND:
  case IR_RANDN:
    ir_str_printf(b, " seed %llu offset %llu", (unsigned long long)a->seed, (unsigned long long)a->offset);
    break;
  case IR_RANDINT:
    ir_str_printf(b, " [%lld,%lld) seed %llu offset %llu", (long long)a->low, (long long)a->high,
                  (unsigned long long)a->seed, (unsigned long long)a->offset);
    break;
  case IR_PERMUTE: ir_str_printf(b, " perm "); print_perm(b, n->ndim, a->perm); break;
  case IR_SLICE:
    ir_str_printf(b, " dim %d start %lld step %lld", a->dim, (long long)a->index, (long long)a->stride);
    break;
  case IR_SELECT: ir_str_printf(b, " dim %d index %lld", a->dim, (long long)a->index); break;
  case IR_FLIP: print_flip(b, a->flip_mask); break;
  case IR_PAD: print_pad(b, n); break;
  case IR_CAT: ir_str_printf(b, " dim %d", a->dim); break;
  case IR_UNFOLD: print_window(b, n); break;
  case IR_GATHER: case IR_SCATTER: case IR_SCATTER_ADD: case IR_SCATTER_MUL: case IR_SCATTER_MAX: case IR_SCATTER_MIN:
    ir_str_printf(b, " dim %d", a->dim);
    break;
  default: break;
  }
}

static void print_node(ir_str *b, const ir_ptrmap *pos, int i, const ir_node *n) {
  ir_str_printf(b, "%%%d = %s", i, ir_ops[n->op].name);
  for (int s = 0; s < n->nsrc; s++) {
    ir_str_printf(b, s ? ", " : " ");
    print_src_ref(b, pos, n->src[s]);
  }
  print_attrs(b, n);
  ir_str_printf(b, "  %s", ir_dtypes[n->dtype].short_name);
  ir_str_shape(b, n->ndim, n->shape);
  if (n->file) ir_str_printf(b, "  %s:%d", n->file, n->line);
  if (n->status != KILN_OK) ir_str_printf(b, "  error: %s", ir_node_msg(n));
  ir_str_printf(b, "\n");
}

void ir_graph_print(ir_str *b, int n, ir_node *const *topo) {
  ir_ptrmap pos = {0};
  for (int i = 0; i < n; i++)
    if (!ir_ptrmap_put(&pos, topo[i], i)) b->failed = true;
  for (int i = 0; i < n && !b->failed; i++) print_node(b, &pos, i, topo[i]);
  ir_ptrmap_free(&pos);
}
