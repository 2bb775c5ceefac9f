/* graph.h: the lazy DAG. A kiln_tensor handle is a graph node. Nodes are
 * reference counted: users hold handles, nodes hold their sources. A
 * realized node becomes a BUFFER and drops its sources. */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include "ir.h"

typedef struct rt_buffer rt_buffer;   /* the runtime's; opaque here */

/* The runtime owns buffers and the options: the IR holds references to
 * buffers and counts them through these, which the runtime installs before
 * it makes its first buffer. check_handles: freed nodes are quarantined so
 * that a use after free is reported, not undefined (KILN_CHECK_HANDLES). */
typedef struct {
  void (*retain)(rt_buffer *b);
  void (*release)(rt_buffer *b);
  rt_buffer *(*snapshot)(rt_buffer *b);   /* rt_buffer_snapshot */
  bool check_handles;
} ir_host;
void ir_set_host(const ir_host *host);

/* Sources a node may have (a masked attention reads q, k, v and the mask). */
#define IR_MAX_SRC 4

typedef struct {
  double value;         /* CONST */
  double start, step;   /* ARANGE, LINSPACE; LINSPACE also uses end */
  double end;
  uint64_t seed;        /* RAND*: Philox key */
  uint64_t offset;      /* RAND*: counter of element 0 */
  int64_t low, high;    /* RANDINT */
  kiln_dtype to;        /* CAST */
  /* Elementwise ops: operands are converted to this dtype before the op
   * (the frontend resolves PyTorch's promotion, wrapped numbers and 0-dim
   * tensors included, and records it here; bool condition of WHERE excepted). */
  kiln_dtype compute;
  /* movement ops (ir/ops.def says which reads what) */
  int perm[KILN_MAX_DIMS];            /* PERMUTE: output dim d is source dim perm[d] */
  int dim;                            /* SLICE, SELECT, CAT; GATHER, SCATTER*: the indexed dim */
  int64_t index;                      /* SLICE: first source index; SELECT: the index (>= 0) */
  int64_t stride;                     /* SLICE: source step per output step (> 0) */
  int64_t pad[KILN_MAX_DIMS][2];      /* PAD: elements before and after, per dim; PAD's fill is value */
  unsigned flip_mask;                 /* FLIP: bit d set reverses dim d */
  /* UNFOLD, per spatial dim (H, W): kernel, stride, padding (negative: it
   * crops), dilation, the input's step u (a transposed convolution reads its
   * input spread u apart, zeros between), output size */
  struct { int64_t k[2], s[2], p[2], d[2], u[2], out[2]; } win;
  unsigned axes;                      /* reductions: bit d set = dim d is reduced; scans, sorts: the one dim */
  int64_t segment;                    /* scans: the accumulator restarts every segment elements along the
                                         dim, from src[1] (0: never; only passes/split_scan.c makes them) */
  int64_t sort_k;                     /* IR_SORTING ops: elements kept per line */
  bool descending;                    /* IR_SORTING ops: largest first */
  bool causal;                        /* IR_ATTN ops: query i sees keys j <= i only */
  bool detached;                      /* RESHAPE: kiln_detach's, through which no gradient flows */
  int64_t group;                      /* IR_ATTN ops: query heads per key/value head (dim -3) */
} ir_attr;

struct kiln_tensor {
  uint32_t magic;       /* IR_NODE_LIVE until freed: a freed handle used again is reported (ir_node_live) */
  int refs;             /* user handles + consumer nodes; atomic */
  int retained;         /* of those, taken by kiln_retain (no scope owns them); atomic */
  ir_op op;
  kiln_dtype dtype;
  kiln_device device;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
  int nsrc;
  struct kiln_tensor *src[IR_MAX_SRC];
  ir_attr attr;
  /* BUFFER: a strided view of buf (element units). Movement nodes: the
   * strides PyTorch would give the same view (kiln_view checks them); other
   * nodes: contiguous. */
  rt_buffer *buf;
  int64_t strides[KILN_MAX_DIMS];
  int64_t offset;
  /* where the user built it, and the public op it came from when that is
   * not ir_ops' name (a composite such as softmax, or zeros): ir_api_push */
  const char *file;
  int line;
  const char *api;
  /* error node: status != KILN_OK and msg says why (sticky) */
  kiln_status status;
  char *msg;
  uint64_t id;          /* unique, growing on each thread (new_id): names the node in printouts */
  int64_t pending;      /* upper bound on unrealized nodes below (bounded laziness) */
  bool symbolic;        /* a placeholder (kiln_placeholder) or reads one: it has
                           no value of its own and runs only through kiln_fn */
  bool assignable;      /* a BUFFER that kiln_assign may overwrite: a node built
                           on it reads a snapshot alias (ir_node_new_taking) */
  /* A BUFFER that was computed keeps what it was computed from: hist is
   * the node it was (op, attributes, sources) before it became a buffer,
   * which kiln_grad differentiates through. NULL for data the user gave,
   * and when the history was not kept (hist_cut: the runtime bounds how
   * far back histories reach). hist_clock: the runtime's realized-bytes
   * clock at the oldest realize the history reaches back to. */
  struct kiln_tensor *hist;
  uint64_t hist_clock;
  bool hist_cut;
  struct kiln_tensor *dead_next;   /* ir_node_release's stack of freed nodes */
  int scratch;          /* per-pass temporary (kernel id, visit mark); no meaning between passes */
};
typedef struct kiln_tensor ir_node;

#define IR_NODE_LIVE 0x6b696c6eu   /* "kiln" */

int64_t ir_numel(int ndim, const int64_t *shape);
/* False for a node that was freed. Reliable while freed nodes are held in
 * quarantine (KILN_CHECK_HANDLES=1, the default in Debug builds): their
 * memory stays allocated with the magic word cleared. */
static inline bool ir_node_live(const ir_node *n) { return n->magic == IR_NODE_LIVE; }
/* Frees the quarantined nodes and the reserved error node (kiln_shutdown). */
void ir_quarantine_flush(void);
/* Allocates a node with one reference owned by the caller; takes a new
 * reference on each source; NULL when out of memory. (The frontend
 * registers user handles in scopes.) */
ir_node *ir_node_new(ir_op op, kiln_dtype dt, int ndim, const int64_t *shape,
                     int nsrc, ir_node *const *src, const char *file, int line);
/* The same, taking over one reference the caller holds to each source
 * (released when out of memory): a new node from intermediates costs no
 * retain and release pair per source. An assignable source (kiln_assign) is
 * read through an alias of its storage's snapshot (rt_buffer_snapshot), so
 * that the new node keeps the value it was built on; not when the node
 * reads a placeholder: a compiled function reads its captured tensors as
 * they are at each run. */
ir_node *ir_node_new_taking(ir_op op, kiln_dtype dt, int ndim, const int64_t *shape,
                            int nsrc, ir_node *const *src, const char *file, int line);
/* The public op being built on this thread when it is made of other ops
 * (softmax, layer_norm, index, zeros, ...): nodes built meanwhile record it
 * in api, and errors made meanwhile are reported under its name, so a
 * message names what the user called. Nested calls keep the outermost.
 * ir_api_push returns what ir_api_pop must restore. */
const char *ir_api_push(const char *name);
void ir_api_pop(const char *prev);

/* An error node; msg is formatted "file:line: " + fmt, with fmt's leading
 * op name ("max: ...") replaced by the composite being built, if any. Never
 * NULL: out of memory it is a node kept in reserve, or, that spent,
 * ir_node_oom(). */
ir_node *ir_node_error(kiln_status st, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The one KILN_ERR_MEMORY node that needs no allocation: shared, immortal
 * (release ignores it), never to be modified. */
ir_node *ir_node_oom(void);
/* The same node handed out for an op: the last error (which names the op)
 * becomes its message on this thread, so that surfacing it later still
 * names the op rather than a generic "out of memory". */
ir_node *ir_node_oom_named(void);
/* An error node's message (the shared node's on this thread). */
const char *ir_node_msg(const ir_node *n);
/* Sets the last error "file:line: op: out of memory" for the op that built n
 * (what the user called) and returns KILN_ERR_MEMORY. */
kiln_status ir_error_oom(const ir_node *n);
void ir_node_retain(ir_node *n);
void ir_node_release(ir_node *n);   /* iterative: long chains never recurse */
/* Turns n into a BUFFER over buf (contiguous) and drops its sources. */
void ir_node_set_buffer(ir_node *n, rt_buffer *buf);
/* Rewrites: n's source slot now reads src; n becomes a constant. Both keep
 * n's value (the passes that call them prove it). */
void ir_node_set_src(ir_node *n, int slot, ir_node *src);
void ir_node_set_const(ir_node *n, double value);
/* Turns n into a BUFFER sharing of's storage through strides and offset
 * (elements): a zero-copy view. */
void ir_node_set_view(ir_node *n, const ir_node *of, const int64_t *strides, int64_t offset);
/* Turns n into a BUFFER over buf (the caller's reference) with strides and offset. */
void ir_node_set_storage(ir_node *n, rt_buffer *buf, const int64_t *strides, int64_t offset);
/* The same for a node just computed, keeping what it was (its op,
 * attributes and sources) as n->hist stamped with clock when keep, else
 * marking its history cut (also when there is no memory for it). */
void ir_node_set_computed(ir_node *n, rt_buffer *buf, const int64_t *strides, int64_t offset, bool keep,
                          uint64_t clock);
bool ir_node_is_contiguous(const ir_node *n);
void ir_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Copies the elements of a view of shape (ndim, shape) from src to dst,
 * each through its element strides (NULL: contiguous row-major), es bytes
 * an element: a strided view gathered into a dense array, a dense array
 * written into a strided view, or one view into another. */
void ir_copy_view(char *dst, const int64_t *dst_strides, const char *src, const int64_t *src_strides, size_t es, int ndim,
                  const int64_t *shape);

/* Nodes reachable from roots that are not BUFFERs, plus the BUFFER leaves,
 * in topological order (sources first). Iterative. Caller frees *out.
 * -1 (and *out NULL) when out of memory. */
int ir_graph_collect(int nroots, ir_node *const *roots, ir_node ***out);
/* Copies of topo (sources first) that passes may rewrite freely: BUFFER
 * leaves are shared (retained); every other node is new, with the same op,
 * attributes, shape, location and id, reading the copies of its sources.
 * clones[i] holds one reference. Sets topo[i]->scratch = i. False when
 * out of memory, with nothing left held. */
bool ir_graph_clone(int n, ir_node *const *topo, ir_node **clones);
/* A new BUFFER node over leaf's storage and view (same dtype, shape,
 * device, location, id and history), one reference for the caller; NULL
 * when out of memory. */
ir_node *ir_node_alias(const ir_node *leaf);
/* The same view with no history and an id of its own: kiln_detach of a
 * realized tensor, which holds nothing but the storage. */
ir_node *ir_node_detached(const ir_node *leaf);
/* Realized tensors may be read by other threads while this one walks a
 * graph over them, and walks write nodes' scratch: replaces every BUFFER
 * topo[i] (topo from ir_graph_collect over roots that are not BUFFERs) by
 * an alias of its own, in topo and in the edges of topo's other nodes. The
 * aliases are held by those edges; no value changes. False, with topo as
 * it was, when out of memory. */
bool ir_graph_private_leaves(int n, ir_node **topo);
/* First error node reachable from roots, or NULL (ir_node_oom() when the
 * walk itself runs out of memory). */
ir_node *ir_graph_find_error(int nroots, ir_node *const *roots);

/* Assignments of values over placeholders (kiln_assign of a step that
 * kiln_compile makes into a function): this thread's, in order.
 * ir_assign_record takes the caller's references (released when out of
 * memory: false); ir_assign_take hands the list over and empties it: the
 * caller owns the references and frees the two arrays (-1 when out of
 * memory, the list kept). */
bool ir_assign_record(ir_node *dst, ir_node *value);
int ir_assign_take(ir_node ***dst, ir_node ***value);

/* Text form, one node per line: "%3 = add %1, %2  f32(4,4)  main.c:14". */
void ir_graph_print(ir_str *b, int n, ir_node *const *topo);

#endif
