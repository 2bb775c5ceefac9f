/* pass.h: the compiler's middle: graph passes over the pending DAG
 * (verify -> fuse -> schedule) and lowering of each kernel group to the
 * kernel IR, run in order by the pipeline (pipeline.c). */
#ifndef KILN_PASS_H
#define KILN_PASS_H

#include "ir/graph.h"
#include "ir/kernel.h"

/* A kernel group: nodes computed by one kernel. Its outputs all have the
 * group's shape; every other node it computes is inlined (recomputed at each
 * element, never stored). */
typedef struct {
  int nout;
  ir_node **outs;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
} pass_group;

/* What one realize() compiles: the pending nodes and, after fuse, their
 * partition into kernel groups, after schedule in launch order. */
typedef struct {
  int n;
  ir_node **topo;       /* reachable nodes, sources first (BUFFER leaves included) */
  int ntargets;
  ir_node *const *targets;
  /* fuse: node->scratch is the node's topo index; group_of[i] is the group
   * that computes node i (-1 for BUFFER leaves and for sources, which are
   * inlined wherever they are read); materialized[i] says it is stored */
  int *group_of;
  bool *materialized;
  int ngroups;
  pass_group *groups;
  int *order;           /* schedule: group indices in launch order */
  int *last_use;        /* schedule: per node, the launch position of the last
                           kernel that loads it (-1: none); after it, its
                           buffer is dead unless a target or held by the user */
  ir_arena *arena;      /* owns groups and order */
  int ncreated;
  ir_node **created;    /* nodes passes made (one reference each), released
                           with the graph: running a kernel drops its sources */
  int target;           /* pass_config.target, set by pass_run_graph */
  bool symbolic_ok;     /* pass_config.symbolic_ok, set by pass_run_graph */
  ir_ptrmap pinned;     /* nodes whose values passes decided on (pass_pin_value) */
  bool oom;             /* a pass ran out of memory: the graph is to be dropped
                           (SQLite's mallocFailed; the pipeline reports it) */
} pass_graph;

kiln_status pass_verify(pass_graph *g);
void pass_simplify(pass_graph *g);
void pass_cse(pass_graph *g);
void pass_fold_views(pass_graph *g);
void pass_split_reduce(pass_graph *g);
/* The partial count for r elements: the largest divisor of r in [16, 256]
 * that leaves at least 4096 elements per partial; 0 when there is none
 * (split_reduce's partials, split_scan's blocks). */
int64_t pass_partials(int64_t r);
/* Long scans on the CPU as a reduce and a scan over blocks (split_scan.c). */
void pass_split_scan(pass_graph *g);
/* Copies a matmul operand that cuBLASLt cannot read in place (CUDA only). */
void pass_gemm_operands(pass_graph *g);
/* The kiln_device_type n's kernel is for: g->target, or n's own device. */
int pass_target(const pass_graph *g, const ir_node *n);
/* Holds a node a pass made (its one reference) until pass_graph_release;
 * out of memory, releases it and sets g->oom. */
void pass_hold(pass_graph *g, ir_node *n);
/* rewrite(g, n) on every node in topological order (until out of memory);
 * when one returns true (it made nodes), g->topo is collected again. */
void pass_rewrite_each(pass_graph *g, bool (*rewrite)(pass_graph *g, ir_node *n));
/* Releases what passes created (g->created). */
void pass_graph_release(pass_graph *g);
/* view.c: the strided-view algebra of movement ops. pass_view_strides gives
 * n's strides and (in *off, updated) offset from its source's strides s;
 * false when n is not a strided view of its source. */
/* Whether matmul mm's B is a convolution's window (an UNFOLD) that the
 * CPU GEMM packs from the input in place (its input is then the operand
 * read through strides); on CUDA the window is stored, for cuBLASLt. */
bool pass_window_operand(const pass_graph *g, const ir_node *mm);
bool pass_view_affine(const ir_node *n);
/* A reduction whose reduced dims all come after the dims it keeps (a row
 * reduction): its loop runs innermost over contiguous data. Otherwise
 * (a column reduction) it is lowered with its loop outside the kept dims. */
bool pass_reduce_trailing(const ir_node *n);
/* Whether reductions a and b are column reductions (not trailing) over the
 * same dims of sources of one shape: one kernel can compute both while
 * reading their data once, in the same order. */
bool pass_column_sibling(const ir_node *a, const ir_node *b);
bool pass_view_strides(const ir_node *n, const int64_t *s, int64_t *strides, int64_t *off);
/* values.c: the constant n holds (seen through broadcasts), if it is one;
 * and the one rule for which values lowering writes into the code: true
 * (with the value) when source slot of user is such a value, false when it
 * is a launch argument. */
bool pass_const_of(const ir_node *n, double *v);
bool pass_value_is_code(const ir_node *user, int slot, double *value);
/* The attribute values lowering makes launch arguments (karg_src.field).
 * RANGE is randint's high - low. */
typedef enum {
  PASS_ARG_VALUE, PASS_ARG_START, PASS_ARG_STEP, PASS_ARG_END,
  PASS_ARG_SEED, PASS_ARG_OFFSET, PASS_ARG_LOW, PASS_ARG_RANGE, PASS_NARG_FIELDS
} pass_arg_field;
/* Bit f set: op's field f is a launch argument wherever lowering reads it. */
unsigned pass_arg_fields(ir_op op);
/* Field f of n as the bits of a launch argument of type t, as lowering
 * writes them (k_arg_int / k_float_bits); t I64 or F64 gives the attribute
 * exactly (real fields as F64, integer ones as I64: pass_arg_raw). */
int64_t pass_arg_bits(const ir_node *n, int f, kiln_dtype t);
int64_t pass_arg_raw(const ir_node *n, int f);
/* A pass that decided something from n's values (folded them, removed an
 * identity, merged equal ones) pins them: a plan made from this graph is
 * for those values only (runtime/exec.c). Looks through broadcasts. */
void pass_pin_value(pass_graph *g, const ir_node *n);
/* How far fusion goes: FUSE_OFF (KILN_PASSES=-fuse) is one kernel per
 * computing node; FUSE_INLINE puts producers in their consumers' kernel but
 * merges no kernels side by side (acyclic by construction: what schedule
 * falls back to); FUSE_ALL also merges sibling kernels, column reductions
 * and sorts that read the same data. */
typedef enum { FUSE_OFF, FUSE_INLINE, FUSE_ALL } pass_fuse_mode;
void pass_fuse(pass_graph *g, pass_fuse_mode mode);
bool pass_schedule(pass_graph *g);
/* Lowers group gi to a fresh kernel; *inputs receives the nodes bound to the
 * kernel's input parameters in param order (outputs come first: params
 * 0..nout-1; a param marked args is bound to k->args instead). generic asks
 * for a shape-generic kernel: k->generic says whether it is one (a group
 * with a matmul or a column reduction stays shape-specialised). */
kernel *pass_lower(pass_graph *g, int gi, ir_node **inputs, int *ninputs, bool generic);  /* NULL: out of memory */
/* Kernel pass (stash.c): a costly value computed by a row's reduction loop
 * and again by a later loop storing an output is stored once, then loaded. */
void pass_stash(kernel *k);

/* ---- pipeline ------------------------------------------------------------ */
typedef struct {
  const char *off;      /* KILN_PASSES: "-fuse,-verify" switches those passes off */
  int debug;            /* KILN_DEBUG: >= 4 dumps the IR after each pass to stderr */
  int target;           /* kiln_device_type the kernels are for; -1: each kernel's own device */
  bool symbolic_ok;     /* placeholders may appear (a kiln_fn is planned, not run) */
  bool generic;         /* lower shape-generic kernels where they can be (pass_lower) */
} pass_config;
/* Runs the graph passes in order with a dump after each. */
kiln_status pass_run_graph(pass_graph *g, const pass_config *cfg);
/* Lowers group gi and runs the kernel passes on it; NULL when out of memory. */
kernel *pass_run_kernel(pass_graph *g, int gi, ir_node **inputs, int *ninputs, const pass_config *cfg);
bool pass_enabled(const pass_config *cfg, const char *name);
/* Whether every item of a KILN_PASSES list is "-name" of a pass that can be
 * switched off; if not, the first bad item goes to bad (n bytes). names gets
 * the names of those passes, comma-separated. */
bool pass_list_valid(const char *list, char *bad, size_t n, ir_str *names);

#endif
