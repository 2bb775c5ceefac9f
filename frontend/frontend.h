/* frontend.h: internals shared by the frontend's files (scopes, node
 * builders with checks, PyTorch-style formatting). */
#ifndef KILN_FRONTEND_H
#define KILN_FRONTEND_H

#include "ir/graph.h"

/* Formats contiguous host data the way PyTorch prints a tensor:
 * "tensor([[1., 2.],\n        [3., 4.]])", "tensor(7)", "tensor([], size=(0, 3))",
 * dtype suffix ", dtype=kiln.int32" where PyTorch shows one, device suffix
 * ", device='cuda:0'" for non-CPU devices. Returns a malloc'd string, or
 * NULL when out of memory. */
char *fe_format(const void *data, kiln_dtype dt, int ndim, const int64_t *shape, kiln_device dev);

/* ---- create.c ------------------------------------------------------------ */
/* NULL when (ndim, shape) is a shape kiln can hold, else the error node. */
ir_node *fe_check_shape(const char *f, int l, const char *op, int ndim, const int64_t *shape);
/* A registered BUFFER node over buf (contiguous; the node takes buf's
 * reference), built at the caller's f:l by op (which out-of-memory names). */
ir_node *fe_buffer_node(const char *f, int l, const char *op, rt_buffer *buf, kiln_dtype dt, int ndim,
                        const int64_t *shape);

/* A registered CONST node of value v (converted as kiln_full converts it)
 * on device dev, reported as op. */
ir_node *fe_const_on(const char *f, int l, const char *op, int ndim, const int64_t *shape, double v, kiln_dtype dt,
                     kiln_device dev);

/* ---- results.c: host data ----------------------------------------------- */
/* Realizes t (a CPU tensor) and makes its buffer dense: *data is its first
 * element, valid while t lives. Errors name op and the caller's file:line. */
kiln_status fe_host_data(const char *f, int l, const char *op, kiln_tensor *t, const void **data);

/* ---- npy_header.c: NumPy's .npy header ----------------------------------- */
typedef struct {
  kiln_dtype dtype;
  size_t elem_size;     /* bytes per element */
  bool big_endian;      /* multi-byte elements stored most significant byte first */
  bool fortran;         /* column-major data */
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
  size_t data_offset;   /* from the start of the file to the first element */
  size_t data_bytes;    /* numel * elem_size; the file holds at least this */
} fe_npy_header;
/* Parses the header at the start of the len bytes of a file (format 1.0,
 * 2.0 or 3.0) and checks that the file holds the data it announces. False
 * with what is wrong in why ("truncated data (...)", "unsupported dtype
 * '<c8' ...") otherwise. Never reads outside bytes[0..len). */
bool fe_npy_parse(const unsigned char *bytes, size_t len, fe_npy_header *h, char *why, size_t why_len);
/* Writes a format 1.0 header for C-ordered little-endian data into out
 * (FE_NPY_HEADER_MAX bytes) and returns its length, a multiple of 64, or 0
 * when dt has no NumPy dtype (bfloat16). */
#define FE_NPY_HEADER_MAX 320
size_t fe_npy_header_write(char *out, kiln_dtype dt, int ndim, const int64_t *shape);

/* ---- attention.c ------------------------------------------------------- */
/* softmax(q k^T * scale + mask) v as one IR_ATTN node, for arguments that
 * nn.c checked; NULL where the fused kernel does not cover the case
 * (dtypes other than f32/f64 or mixed, a CUDA device, placeholders, empty
 * tensors, batch dims that broadcast), which the composition computes. */
ir_node *fe_attention_fused(const char *f, int l, ir_node *q, ir_node *k, ir_node *v, ir_node *mask, bool causal,
                            double scale, bool gqa);

/* ---- grad.c ------------------------------------------------------------ */
/* Whether ir/grad.def gives op what it needs: a rule, or a reason for none
 * (a source, a piecewise constant op, or results that are never floating);
 * *flows: a rule that passes gradients to the sources. */
bool fe_grad_has_rule(ir_op op, bool *flows);

/* ---- assign.c ------------------------------------------------------------ */
/* t (a BUFFER) may be overwritten by kiln_assign: nodes built on it from
 * now on read a snapshot of it (ir/graph.h: assignable). Optimizers mark
 * their parameters when they are made. */
void fe_mark_assignable(ir_node *t);
/* kiln_assign; with take the caller releases value right after, so its
 * storage may become dst's instead of being copied (optimizers' updates);
 * with defer the assignment is part of the function kiln_compile makes next
 * even when value reads no placeholder (an optimizer's step count, in a
 * step over placeholders). */
kiln_status fe_assign(const char *f, int l, ir_node *dst, ir_node *value, bool take, bool defer);

/* ---- tensor.c: handles, scopes, errors ---------------------------------- */
/* Records a handle about to be returned to the user in the innermost scope
 * (if one is open) and returns it. */
ir_node *fe_register(ir_node *n);
/* What every public op does with the node it built: realize it in eager
 * mode or when its pending graph grew past KILN_MAX_PENDING, then register it. */
ir_node *fe_finish(ir_node *n);
/* A new, registered reference to t: what an op that changes nothing returns
 * (tensors are immutable). */
ir_node *fe_same(ir_node *t);
/* Drops a handle an op made for itself: its registration in the innermost
 * scope (fe_register's), never a reference kiln_retain counted. kiln_release
 * would take one of those first, and a temporary may be the op's own
 * argument (fe_same), retained by the user or another thread, which the
 * scope would then release a second time. */
void fe_drop(ir_node *t);
/* fe_finish for a view (movement.c): eager mode realizes it only when the
 * pending chain grows too long, as it does the built-in views. */
ir_node *fe_finish_view(ir_node *n);
/* The body of a public op made of other ops: evaluates expr (an ir_node *)
 * as the composite name (ir_api_push) and returns it. */
#define FE_AS(name, expr)                     \
  do {                                        \
    const char *prev_ = ir_api_push(name);    \
    ir_node *result_ = (expr);                \
    ir_api_pop(prev_);                        \
    return result_;                           \
  } while (0)
/* Releases the n intermediates a composition built and returns its result. */
ir_node *fe_done(ir_node *result, int n, ir_node **tmp);
/* The same for a composition that collects its intermediates as it goes:
 * fe_keep(&s, t) records t and returns it; fe_temps_done(&s, r) is fe_done
 * of them all. Sized for the longest composition (NN losses). */
typedef struct {
  ir_node *t[64];
  int n;
} fe_temps;
ir_node *fe_keep(fe_temps *s, ir_node *t);
ir_node *fe_temps_done(fe_temps *s, ir_node *result);
/* A registered error node; the message gets the caller's "file:line: ". */
#define fe_error(st, f, l, ...) fe_register(ir_node_error(st, f, l, __VA_ARGS__))
/* What an op returns when ir_node_new found no memory: a registered
 * KILN_ERR_MEMORY node with the message ir_node_new left, which names the op. */
ir_node *fe_nomem(void);
/* e (an error node) now says it was made at f:l; the OOM node stays as it is. */
ir_node *fe_locate(ir_node *e, const char *f, int l);
/* NULL when t can be used as argument argno (1-based) of op; otherwise the
 * registered error node to return: a copy of t's error (errors are sticky)
 * or "op: argument N is NULL". */
ir_node *fe_check_arg(const char *f, int l, const char *op, ir_node *t, int argno);
#define FE_FREED_MSG "is a handle that was already released (its last reference dropped)"
/* NULL and freed handles given to a function that returns a status: sets
 * the last error "file:line: op: ..." and returns true. */
bool fe_bad_handle(const char *f, int l, const char *op, const ir_node *t);
/* An error node when op cannot put a tensor on dev (an invalid device, or
 * CUDA that cannot be used: the reason); NULL when it can. */
ir_node *fe_check_device(const char *f, int l, const char *op, kiln_device dev);
/* fe_check_arg on each of t[0..nt), then all on one device; NULL when fine. */
ir_node *fe_check_args(const char *f, int l, const char *op, int nt, ir_node *const *t);
/* NULL unless the list argument `name` is NULL while its count n says it
 * holds values; then the registered KILN_ERR_ARG error "op: name is NULL
 * with a count of n" (checked before the count itself, whose message
 * would otherwise blame a count that is fine). */
ir_node *fe_check_list(const char *f, int l, const char *op, const char *name, int64_t n, const void *list);
/* The same as a message (the last error) for functions that return a status. */
bool fe_bad_list(const char *f, int l, const char *op, const char *name, int64_t n, const void *list);
/* NULL when a result of shape (ndim, shape) has an element count int64 can
 * hold; else the registered KILN_ERR_SHAPE error naming op and the shape. */
ir_node *fe_check_numel(const char *f, int l, const char *op, int ndim, const int64_t *shape);
/* Whether the integer v is a value of integer dtype dt. */
bool fe_int_fits(double v, kiln_dtype dt);
/* "float32 (2,3)": how messages name an operand. */
void fe_describe(ir_str *b, const ir_node *n);
/* "cpu", "cuda:0" (PyTorch's spelling); buf needs 24 bytes. */
const char *fe_device_name(kiln_device d, char *buf);

/* ---- einsum_parse.c: torch.einsum's equations ----------------------------- */
/* Subscripts are ids: 'A'-'Z' 0-25, 'a'-'z' 26-51 (torch's order, which the
 * implicit output follows), then FE_EINSUM_ELL + k for the k-th dim that the
 * ellipses cover, counted over the broadcast of every operand's "...". */
#define FE_EINSUM_LETTERS 52
#define FE_EINSUM_ELL FE_EINSUM_LETTERS
#define FE_EINSUM_IDS (FE_EINSUM_LETTERS + KILN_MAX_DIMS)
#define FE_EINSUM_MAX_OPS 64
typedef struct {
  int nops;
  int ndim[FE_EINSUM_MAX_OPS];                      /* dims of each operand */
  signed char sub[FE_EINSUM_MAX_OPS][KILN_MAX_DIMS];  /* the id of each of its dims */
  int nout;
  signed char out[KILN_MAX_DIMS];                   /* the ids of the output's dims */
} fe_einsum;
/* Parses equation for nops operands of ndim[i] dims (spaces anywhere, "->"
 * optional: without it the output is the ellipsis dims, then the subscripts
 * used once, sorted). False with the reason in why ("einsum: ... at position
 * 3 of \"ij,j1\" ..."); never reads past the equation's NUL. */
bool fe_einsum_parse(const char *equation, int nops, const int *ndim, fe_einsum *p, char *why, size_t why_len);

/* ---- movement.c: checks the shape ops share -------------------------------- */
/* A registered error "op: <why> (input: float32 (2,3))" naming input t. */
ir_node *fe_fail(const char *f, int l, kiln_status st, const ir_node *t, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The same from a va_list, also naming an index tensor ix when not NULL:
 * "op: <why> (input: float32 (2,3), index: int64 (4,))". */
ir_node *fe_vfail(const char *f, int l, kiln_status st, const ir_node *t, const ir_node *ix, const char *fmt,
                  va_list ap) __attribute__((format(printf, 6, 0)));
/* PyTorch's maybe_wrap_dim of dim for a tensor of ndim dims (a 0-dim tensor
 * takes -1 and 0) into *out. NULL, or the error node (naming op and t). */
ir_node *fe_wrap_dim(const char *f, int l, const char *op, const ir_node *t, int ndim, int64_t dim, int *out);

#endif
