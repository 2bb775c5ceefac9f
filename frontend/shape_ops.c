/* shape_ops.c: PyTorch's shape ops made of views: tril/triu, the reflect,
 * replicate and circular pads, split/chunk/unbind, repeat/tile,
 * repeat_interleave, roll, diagonal/diag and one_hot. Each is slices,
 * flips, cats, expands and reshapes (index arithmetic in the kernel that
 * reads them) or a select on an index comparison, so none copies. */
#include "frontend/frontend.h"

#include <math.h>
#include <string.h>

/* ---- building blocks ------------------------------------------------------ */
/* 0, 1, ..., n-1 (int64) on dev: a source node, computed where it is read. */
static ir_node *positions(const char *f, int l, int64_t n, kiln_device dev) {
  ir_node *a = ir_node_new(IR_ARANGE, KILN_I64, 1, &n, 0, NULL, f, l);
  if (!a) return fe_nomem();
  a->attr.start = 0;
  a->attr.step = 1;
  a->device = dev;
  return fe_finish(a);
}

/* A 0-dim constant v of dtype dt on dev. */
static ir_node *constant(const char *f, int l, double v, kiln_dtype dt, kiln_device dev) {
  ir_node *c = ir_node_new(IR_CONST, dt, 0, NULL, 0, NULL, f, l);
  if (!c) return fe_nomem();
  c->attr.value = v;
  c->device = dev;
  return fe_finish(c);
}

/* where(keep, t, 0) in t's dtype (NaN outside keep becomes 0, as PyTorch's). */
static ir_node *keep_or_zero(const char *f, int l, ir_node *keep, ir_node *t) {
  ir_node *z = constant(f, l, 0, t->dtype, t->device);
  return fe_done(kiln_where_at(f, l, keep, t, z), 1, &z);
}

/* (rows, cols) int64 col - row: the diagonal number of each element. */
static ir_node *diagonal_number(const char *f, int l, int64_t rows, int64_t cols, kiln_device dev) {
  ir_node *tmp[3];
  tmp[0] = positions(f, l, rows, dev);
  tmp[1] = kiln_reshape_at(f, l, tmp[0], 2, (int64_t[]){rows, 1});
  tmp[2] = positions(f, l, cols, dev);
  return fe_done(kiln_sub_at(f, l, tmp[2], tmp[1]), 3, tmp);
}

/* ---- tril, triu ------------------------------------------------------------ */
static ir_node *triangle(const char *f, int l, const char *op, ir_node *t, int64_t diagonal, bool lower) {
  ir_node *e = fe_check_arg(f, l, op, t, 1);
  if (e) return e;
  if (t->ndim < 2) return fe_fail(f, l, KILN_ERR_ARG, t, "%s: input tensor must have at least 2 dimensions", op);
  ir_node *tmp[2];
  tmp[0] = diagonal_number(f, l, t->shape[t->ndim - 2], t->shape[t->ndim - 1], t->device);
  tmp[1] = lower ? kiln_les_at(f, l, tmp[0], (double)diagonal) : kiln_ges_at(f, l, tmp[0], (double)diagonal);
  return fe_done(keep_or_zero(f, l, tmp[1], t), 2, tmp);
}

kiln_tensor *kiln_tril_at(const char *f, int l, kiln_tensor *t, int64_t diagonal) {
  FE_AS("tril", triangle(f, l, "tril", t, diagonal, true));
}
kiln_tensor *kiln_triu_at(const char *f, int l, kiln_tensor *t, int64_t diagonal) {
  FE_AS("triu", triangle(f, l, "triu", t, diagonal, false));
}

/* ---- pads ------------------------------------------------------------------ */
typedef enum { PAD_REFLECT, PAD_REPLICATE, PAD_CIRCULAR } pad_mode;
static const char *const pad_names[] = {"pad_reflect", "pad_replicate", "pad_circular"};

/* The n elements that go before (after: false) t along dim d. */
static ir_node *pad_side(const char *f, int l, ir_node *t, int d, int64_t n, bool after, pad_mode mode) {
  int64_t size = t->shape[d];
  ir_node *s;
  switch (mode) {
  case PAD_REFLECT:   /* the mirror image, edge element excluded */
    s = after ? kiln_slice_at(f, l, t, d, size - 1 - n, size - 1, 1) : kiln_slice_at(f, l, t, d, 1, n + 1, 1);
    return fe_done(kiln_flip_at(f, l, s, 1, (int64_t[]){d}), 1, &s);
  case PAD_REPLICATE: {   /* the edge element, repeated */
    s = after ? kiln_slice_at(f, l, t, d, size - 1, size, 1) : kiln_slice_at(f, l, t, d, 0, 1, 1);
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = n;
    return fe_done(kiln_expand_at(f, l, s, t->ndim, shape), 1, &s);
  }
  default:   /* the other end */
    return after ? kiln_slice_at(f, l, t, d, 0, n, 1) : kiln_slice_at(f, l, t, d, size - n, size, 1);
  }
}

/* PyTorch's bounds: reflect needs pad < size, circular pad <= size,
 * replicate a non-empty dim. */
static ir_node *check_pad_amount(const char *f, int l, ir_node *t, int d, int64_t pad, pad_mode mode) {
  int64_t size = t->shape[d];
  const char *op = pad_names[mode];
  if (pad <= 0) return NULL;
  if (mode == PAD_REFLECT && pad >= size)
    return fe_fail(f, l, KILN_ERR_ARG, t, "%s: padding size %lld should be less than the corresponding input dimension "
                   "%d of size %lld", op, (long long)pad, d, (long long)size);
  if (mode == PAD_CIRCULAR && pad > size)
    return fe_fail(f, l, KILN_ERR_ARG, t, "%s: padding size %lld should be at most the corresponding input dimension "
                   "%d of size %lld", op, (long long)pad, d, (long long)size);
  if (mode == PAD_REPLICATE && size == 0)
    return fe_fail(f, l, KILN_ERR_ARG, t, "%s: cannot replicate dimension %d of size 0", op, d);
  return NULL;
}

/* Pads (or, for a negative amount, crops) dim d of *t by before and after;
 * *t becomes the result. NULL, or the error node. */
static ir_node *pad_dim(const char *f, int l, ir_node **t, int d, int64_t before, int64_t after, pad_mode mode) {
  ir_node *x = *t, *e;
  int64_t size = x->shape[d], lo = before < 0 ? -before : 0, hi = size + (after < 0 ? after : 0);
  if (hi < lo)
    return fe_fail(f, l, KILN_ERR_SHAPE, x, "%s: the input size %lld, plus padding %lld and %lld resulted in an invalid "
                   "output size at dimension %d", pad_names[mode], (long long)size, (long long)before, (long long)after, d);
  if (lo || hi < size) {   /* crops first, as PyTorch does */
    *t = kiln_slice_at(f, l, x, d, lo, hi, 1);
    fe_drop(x);
    x = *t;
  }
  if ((e = check_pad_amount(f, l, x, d, before, mode)) || (e = check_pad_amount(f, l, x, d, after, mode))) return e;
  if (before <= 0 && after <= 0) return NULL;
  ir_node *parts[3];
  int n = 0;
  if (before > 0) parts[n++] = pad_side(f, l, x, d, before, false, mode);
  parts[n++] = fe_same(x);
  if (after > 0) parts[n++] = pad_side(f, l, x, d, after, true, mode);
  *t = kiln_cat_at(f, l, n, parts, d);
  fe_drop(x);
  fe_done(NULL, n, parts);
  return NULL;
}

static ir_node *pad_mode_of(const char *f, int l, ir_node *t, int npads, const int64_t *pads, pad_mode mode) {
  const char *op = pad_names[mode];
  ir_node *e = fe_check_arg(f, l, op, t, 1);
  if (e || (e = fe_check_list(f, l, op, "pads", npads, pads))) return e;
  if (npads < 0 || npads % 2)
    return fe_fail(f, l, KILN_ERR_ARG, t, "%s: padding length must be divisible by 2, got %d", op, npads);
  if (npads / 2 > t->ndim)
    return fe_fail(f, l, KILN_ERR_ARG, t, "%s: padding length too large (%d pairs for %d dims)", op, npads / 2, t->ndim);
  ir_node *x = fe_same(t);
  for (int p = 0; p < npads / 2; p++) {
    if ((e = pad_dim(f, l, &x, t->ndim - 1 - p, pads[2 * p], pads[2 * p + 1], mode))) return fe_done(e, 1, &x);
  }
  return x;
}

kiln_tensor *kiln_pad_reflect_at(const char *f, int l, kiln_tensor *t, int npads, const int64_t *pads) {
  FE_AS("pad_reflect", pad_mode_of(f, l, t, npads, pads, PAD_REFLECT));
}
kiln_tensor *kiln_pad_replicate_at(const char *f, int l, kiln_tensor *t, int npads, const int64_t *pads) {
  FE_AS("pad_replicate", pad_mode_of(f, l, t, npads, pads, PAD_REPLICATE));
}
kiln_tensor *kiln_pad_circular_at(const char *f, int l, kiln_tensor *t, int npads, const int64_t *pads) {
  FE_AS("pad_circular", pad_mode_of(f, l, t, npads, pads, PAD_CIRCULAR));
}

/* ---- split, split_sizes, chunk, unbind ------------------------------------- */
/* The pieces' handles go to out[0..max_out); the count is returned (it may
 * exceed max_out, like snprintf's). On an error, -1, the error's message as
 * the last error (there may be no slot to hold it), and every out slot
 * holds a reference to the error node (sticky for whoever uses them). */
static int pieces_error(ir_node *e, int max_out, kiln_tensor **out) {
  ir_error_set(ir_node_msg(e));
  for (int i = 0; i < max_out && out; i++) out[i] = i ? fe_same(e) : e;
  if (max_out <= 0 || !out) fe_drop(e);
  return -1;
}

static ir_node *check_pieces(const char *f, int l, const char *op, ir_node *t, int max_out, kiln_tensor **out) {
  ir_node *e = fe_check_arg(f, l, op, t, 1);
  if (e || (e = fe_check_list(f, l, op, "out", max_out, out))) return e;
  if (max_out < 0) return fe_fail(f, l, KILN_ERR_ARG, t, "%s: bad output array (max_out %d)", op, max_out);
  if (t->ndim == 0) return fe_fail(f, l, KILN_ERR_ARG, t, "%s: cannot be applied to a 0-dim tensor", op);
  return NULL;
}

/* Slices of t along d of the given sizes (which sum to its size). */
static int slices(const char *f, int l, ir_node *t, int d, int n, const int64_t *sizes, int max_out, kiln_tensor **out) {
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (i < max_out) out[i] = kiln_slice_at(f, l, t, d, at, at + sizes[i], 1);
    at += sizes[i];
  }
  return n;
}

/* Pieces of size piece along d, the last one shorter; count pieces, at least 1. */
static int even_pieces(const char *f, int l, ir_node *t, int d, int64_t piece, int64_t count, int max_out,
                       kiln_tensor **out) {
  int64_t size = t->shape[d];
  for (int64_t i = 0; i < count && i < max_out; i++) {
    int64_t at = i * piece;
    out[i] = kiln_slice_at(f, l, t, d, at, i == count - 1 ? size : at + piece, 1);
  }
  return (int)count;
}

static int split(const char *f, int l, ir_node *t, int64_t split_size, int dim, int max_out, kiln_tensor **out) {
  int d = 0;
  ir_node *e = check_pieces(f, l, "split", t, max_out, out);
  if (e || (e = fe_wrap_dim(f, l, "split", t, t->ndim, dim, &d))) return pieces_error(e, max_out, out);
  int64_t size = t->shape[d];
  if (split_size < 0 || (split_size == 0 && size != 0))
    return pieces_error(fe_fail(f, l, KILN_ERR_ARG, t, "split: split_size can only be 0 if dimension size is 0, and "
                                "must be non-negative; got %lld", (long long)split_size), max_out, out);
  int64_t count = split_size ? (size + split_size - 1) / split_size : 1;
  if (count < 1) count = 1;
  if (count > INT32_MAX)
    return pieces_error(fe_fail(f, l, KILN_ERR_ARG, t, "split: %lld pieces are too many", (long long)count), max_out, out);
  return even_pieces(f, l, t, d, split_size, count, max_out, out);
}

static int split_sizes(const char *f, int l, ir_node *t, int nsizes, const int64_t *sizes, int dim, int max_out,
                       kiln_tensor **out) {
  int d = 0;
  ir_node *e = check_pieces(f, l, "split_with_sizes", t, max_out, out);
  if (e || (e = fe_wrap_dim(f, l, "split_with_sizes", t, t->ndim, dim, &d))) return pieces_error(e, max_out, out);
  if ((e = fe_check_list(f, l, "split_with_sizes", "sizes", nsizes, sizes))) return pieces_error(e, max_out, out);
  if (nsizes < 1)
    return pieces_error(fe_fail(f, l, KILN_ERR_ARG, t, "split_with_sizes: expected a non-empty list of sizes, got %d",
                                nsizes), max_out, out);
  int64_t total = 0;
  bool bad = false;
  for (int i = 0; i < nsizes; i++) bad = bad || sizes[i] < 0 || __builtin_add_overflow(total, sizes[i], &total);
  if (bad || total != t->shape[d]) {
    ir_str b = {0};
    for (int i = 0; i < nsizes; i++) ir_str_printf(&b, "%s%lld", i ? ", " : "", (long long)sizes[i]);
    e = fe_fail(f, l, KILN_ERR_ARG, t, "split_with_sizes: expects split_sizes to be non-negative and to sum exactly to "
                "%lld (input tensor's size at dimension %d), but got split_sizes=[%s]", (long long)t->shape[d], d, b.s);
    ir_str_free(&b);
    return pieces_error(e, max_out, out);
  }
  return slices(f, l, t, d, nsizes, sizes, max_out, out);
}

/* PyTorch's chunk: pieces of ceil(size / chunks); an empty dim gives chunks
 * empty pieces. */
static int chunk(const char *f, int l, ir_node *t, int64_t chunks, int dim, int max_out, kiln_tensor **out) {
  int d = 0;
  ir_node *e = check_pieces(f, l, "chunk", t, max_out, out);
  if (e || (e = fe_wrap_dim(f, l, "chunk", t, t->ndim, dim, &d))) return pieces_error(e, max_out, out);
  if (chunks <= 0 || chunks > INT32_MAX)
    return pieces_error(fe_fail(f, l, KILN_ERR_ARG, t, "chunk: expects `chunks` to be greater than 0 (and to fit an "
                                "int), got: %lld", (long long)chunks), max_out, out);
  int64_t size = t->shape[d];
  if (size == 0) return even_pieces(f, l, t, d, 0, chunks, max_out, out);
  int64_t piece = (size + chunks - 1) / chunks;
  return even_pieces(f, l, t, d, piece, (size + piece - 1) / piece, max_out, out);
}

static int unbind(const char *f, int l, ir_node *t, int dim, int max_out, kiln_tensor **out) {
  int d = 0;
  ir_node *e = check_pieces(f, l, "unbind", t, max_out, out);
  if (e || (e = fe_wrap_dim(f, l, "unbind", t, t->ndim, dim, &d))) return pieces_error(e, max_out, out);
  if (t->shape[d] > INT32_MAX)
    return pieces_error(fe_fail(f, l, KILN_ERR_ARG, t, "unbind: %lld pieces are too many", (long long)t->shape[d]),
                        max_out, out);
  for (int64_t i = 0; i < t->shape[d] && i < max_out; i++) out[i] = kiln_select_at(f, l, t, d, i);
  return (int)t->shape[d];
}

/* FE_AS for the ops that return a count. */
#define FE_AS_COUNT(name, expr)             \
  do {                                      \
    const char *prev_ = ir_api_push(name);  \
    int result_ = (expr);                   \
    ir_api_pop(prev_);                      \
    return result_;                         \
  } while (0)

int kiln_split_at(const char *f, int l, kiln_tensor *t, int64_t split_size, int dim, int max_out, kiln_tensor **out) {
  FE_AS_COUNT("split", split(f, l, t, split_size, dim, max_out, out));
}
int kiln_split_sizes_at(const char *f, int l, kiln_tensor *t, int nsizes, const int64_t *sizes, int dim, int max_out,
                        kiln_tensor **out) {
  FE_AS_COUNT("split_with_sizes", split_sizes(f, l, t, nsizes, sizes, dim, max_out, out));
}
int kiln_chunk_at(const char *f, int l, kiln_tensor *t, int64_t chunks, int dim, int max_out, kiln_tensor **out) {
  FE_AS_COUNT("chunk", chunk(f, l, t, chunks, dim, max_out, out));
}
int kiln_unbind_at(const char *f, int l, kiln_tensor *t, int dim, int max_out, kiln_tensor **out) {
  FE_AS_COUNT("unbind", unbind(f, l, t, dim, max_out, out));
}

/* ---- repeat, tile, repeat_interleave ---------------------------------------- */
/* t with every dim d repeated reps[d] times as whole blocks (outer) or element
 * by element (!outer): a size-1 dim beside each repeated dim, expanded, then
 * merged. False when that needs more than KILN_MAX_DIMS dims. */
static bool repeat_direct(const char *f, int l, ir_node *t, const int64_t *reps, bool outer, ir_node **out) {
  int64_t split[KILN_MAX_DIMS], wide[KILN_MAX_DIMS], merged[KILN_MAX_DIMS];
  int m = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (m + 1 + (reps[d] != 1) > KILN_MAX_DIMS) return false;
    if (reps[d] != 1) {
      split[m + !outer] = 1, wide[m + !outer] = reps[d];
      m++;
    }
    int s = reps[d] != 1 && !outer ? m - 1 : m;
    split[s] = wide[s] = t->shape[d];
    m++;
    merged[d] = t->shape[d] * reps[d];
  }
  ir_node *tmp[2];
  tmp[0] = kiln_reshape_at(f, l, t, m, split);
  tmp[1] = kiln_expand_at(f, l, tmp[0], m, wide);
  *out = fe_done(kiln_reshape_at(f, l, tmp[1], t->ndim, merged), 2, tmp);
  return true;
}

/* repeat_direct, one dim at a time over a 3-dim view (before, dim, after)
 * when t has too many dims for all at once. */
static ir_node *repeat_dims(const char *f, int l, ir_node *t, const int64_t *reps, bool outer) {
  ir_node *x;
  if (repeat_direct(f, l, t, reps, outer, &x)) return x;
  x = fe_same(t);
  for (int d = 0; d < t->ndim; d++) {
    if (reps[d] == 1) continue;
    int64_t three[3] = {ir_numel(d, x->shape), x->shape[d], ir_numel(x->ndim - d - 1, x->shape + d + 1)};
    int64_t shape[KILN_MAX_DIMS], r = reps[d];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] *= r;
    ir_node *tmp[3];
    tmp[0] = x;
    tmp[1] = kiln_reshape_at(f, l, x, 3, three);
    IR_ASSERT(repeat_direct(f, l, tmp[1], (int64_t[]){1, r, 1}, outer, &tmp[2]));
    x = fe_done(kiln_reshape_at(f, l, tmp[2], t->ndim, shape), 3, tmp);
  }
  return x;
}

/* The repeat counts: none negative, the result countable. */
static ir_node *check_reps(const char *f, int l, const char *op, ir_node *t, int n, const int64_t *reps) {
  int64_t numel = ir_numel(t->ndim, t->shape);
  for (int i = 0; i < n; i++) {
    if (reps[i] < 0) return fe_fail(f, l, KILN_ERR_ARG, t, "%s: repeats can not be negative, got %lld", op, (long long)reps[i]);
    if (__builtin_mul_overflow(numel, reps[i], &numel))
      return fe_fail(f, l, KILN_ERR_SHAPE, t, "%s: the result has more elements than int64 can count", op);
  }
  return NULL;
}

/* Tensor.repeat: nreps >= ndim; t gains leading size-1 dims to match. */
static ir_node *repeat(const char *f, int l, const char *op, ir_node *t, int nreps, const int64_t *reps) {
  ir_node *e = fe_check_arg(f, l, op, t, 1);
  if (e || (e = fe_check_list(f, l, op, "repeats", nreps, reps))) return e;
  if (nreps < 0 || nreps > KILN_MAX_DIMS)
    return fe_fail(f, l, KILN_ERR_ARG, t, "%s: bad list of %d repeats (at most KILN_MAX_DIMS = %d)", op, nreps, KILN_MAX_DIMS);
  if (nreps < t->ndim)
    return fe_fail(f, l, KILN_ERR_ARG, t, "%s: Number of dimensions of repeat dims (%d) can not be smaller than number "
                   "of dimensions of tensor (%d)", op, nreps, t->ndim);
  if ((e = check_reps(f, l, op, t, nreps, reps))) return e;
  int64_t shape[KILN_MAX_DIMS];
  for (int d = 0; d < nreps; d++) shape[d] = d < nreps - t->ndim ? 1 : t->shape[d - (nreps - t->ndim)];
  ir_node *x = kiln_reshape_at(f, l, t, nreps, shape);
  return fe_done(repeat_dims(f, l, x, reps, true), 1, &x);
}

/* torch.tile: a shorter dims list gains leading ones. */
static ir_node *tile(const char *f, int l, ir_node *t, int ndims, const int64_t *dims) {
  ir_node *e = fe_check_arg(f, l, "tile", t, 1);
  if (e || (e = fe_check_list(f, l, "tile", "dims", ndims, dims))) return e;
  if (ndims < 0 || ndims > KILN_MAX_DIMS)
    return fe_fail(f, l, KILN_ERR_ARG, t, "tile: bad list of %d dims (at most KILN_MAX_DIMS = %d)", ndims, KILN_MAX_DIMS);
  int n = ndims > t->ndim ? ndims : t->ndim;
  int64_t reps[KILN_MAX_DIMS];
  for (int d = 0; d < n; d++) reps[d] = d < n - ndims ? 1 : dims[d - (n - ndims)];
  return repeat(f, l, "tile", t, n, reps);
}

static ir_node *repeat_interleave_dim(const char *f, int l, ir_node *t, int64_t repeats, int dim) {
  int d = 0;
  ir_node *e = fe_check_arg(f, l, "repeat_interleave", t, 1);
  if (e || (e = fe_wrap_dim(f, l, "repeat_interleave", t, t->ndim, dim, &d)) ||
      (e = check_reps(f, l, "repeat_interleave", t, 1, &repeats)))
    return e;
  if (t->ndim == 0) {   /* a scalar repeats into a vector */
    ir_node *x = kiln_reshape_at(f, l, t, 1, (int64_t[]){1});
    return fe_done(repeat_interleave_dim(f, l, x, repeats, 0), 1, &x);
  }
  int64_t reps[KILN_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) reps[i] = i == d ? repeats : 1;
  return repeat_dims(f, l, t, reps, false);
}

static ir_node *repeat_interleave(const char *f, int l, ir_node *t, int64_t repeats) {
  ir_node *e = fe_check_arg(f, l, "repeat_interleave", t, 1);
  if (e) return e;
  ir_node *x = kiln_flatten_at(f, l, t);
  return fe_done(repeat_interleave_dim(f, l, x, repeats, 0), 1, &x);
}

kiln_tensor *kiln_repeat_at(const char *f, int l, kiln_tensor *t, int nrepeats, const int64_t *repeats) {
  FE_AS("repeat", repeat(f, l, "repeat", t, nrepeats, repeats));
}
kiln_tensor *kiln_tile_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims) {
  FE_AS("tile", tile(f, l, t, ndims, dims));
}
kiln_tensor *kiln_repeat_interleave_at(const char *f, int l, kiln_tensor *t, int64_t repeats) {
  FE_AS("repeat_interleave", repeat_interleave(f, l, t, repeats));
}
kiln_tensor *kiln_repeat_interleave_dim_at(const char *f, int l, kiln_tensor *t, int64_t repeats, int dim) {
  FE_AS("repeat_interleave", repeat_interleave_dim(f, l, t, repeats, dim));
}

/* ---- roll ------------------------------------------------------------------ */
/* t rolled by shift along d: its last shift elements, then the rest. */
static ir_node *roll_dim(const char *f, int l, ir_node *t, int d, int64_t shift) {
  int64_t size = t->shape[d];
  if (size == 0 || shift % size == 0) return fe_same(t);
  int64_t s = ((shift % size) + size) % size;
  ir_node *parts[2] = {kiln_slice_at(f, l, t, d, size - s, size, 1), kiln_slice_at(f, l, t, d, 0, size - s, 1)};
  return fe_done(kiln_cat_at(f, l, 2, parts, d), 2, parts);
}

static ir_node *roll(const char *f, int l, ir_node *t, int nshifts, const int64_t *shifts, int ndims, const int64_t *dims) {
  ir_node *e = fe_check_arg(f, l, "roll", t, 1);
  if (e || (e = fe_check_list(f, l, "roll", "shifts", nshifts, shifts)) ||
      (e = fe_check_list(f, l, "roll", "dims", ndims, dims)))
    return e;
  if (nshifts < 1 || ndims < 0)
    return fe_fail(f, l, KILN_ERR_ARG, t, "roll: `shifts` required (got %d shifts, %d dims)", nshifts, ndims);
  if (ndims == 0) {   /* torch's dims=None: the flattened tensor, shape restored */
    if (nshifts != 1) return fe_fail(f, l, KILN_ERR_ARG, t, "roll: %d shifts need as many dims", nshifts);
    ir_node *tmp[2];
    tmp[0] = kiln_flatten_at(f, l, t);
    tmp[1] = roll_dim(f, l, tmp[0], 0, shifts[0]);
    return fe_done(kiln_reshape_at(f, l, tmp[1], t->ndim, t->shape), 2, tmp);
  }
  if (nshifts != ndims)
    return fe_fail(f, l, KILN_ERR_ARG, t, "roll: shifts and dimensions must align. shifts: %d, dims: %d", nshifts, ndims);
  int ds[KILN_MAX_DIMS];
  for (int i = 0; i < ndims && i < KILN_MAX_DIMS; i++)
    if ((e = fe_wrap_dim(f, l, "roll", t, t->ndim, dims[i], &ds[i]))) return e;
  if (ndims > KILN_MAX_DIMS) return fe_fail(f, l, KILN_ERR_ARG, t, "roll: %d dims is more than KILN_MAX_DIMS", ndims);
  ir_node *x = fe_same(t);
  for (int i = 0; i < ndims; i++) {
    ir_node *y = roll_dim(f, l, x, ds[i], shifts[i]);
    fe_drop(x);
    x = y;
  }
  return x;
}

kiln_tensor *kiln_roll_at(const char *f, int l, kiln_tensor *t, int nshifts, const int64_t *shifts, int ndims,
                          const int64_t *dims) {
  FE_AS("roll", roll(f, l, t, nshifts, shifts, ndims, dims));
}

/* ---- diagonal, diag, one_hot ----------------------------------------------- */
/* torch.diagonal: dim1 and dim2 move last (the others keep their order), the
 * offset crops one of them, and the (n, m) matrix read flat with step m + 1
 * is its diagonal: a reshape and a strided slice. */
static ir_node *diagonal(const char *f, int l, ir_node *t, int64_t offset, int dim1, int dim2) {
  int a = 0, b = 0;
  ir_node *e = fe_check_arg(f, l, "diagonal", t, 1);
  if (e) return e;
  if (t->ndim < 2) return fe_fail(f, l, KILN_ERR_ARG, t, "diagonal: expected a tensor of at least 2 dims");
  if ((e = fe_wrap_dim(f, l, "diagonal", t, t->ndim, dim1, &a)) || (e = fe_wrap_dim(f, l, "diagonal", t, t->ndim, dim2, &b)))
    return e;
  if (a == b) return fe_fail(f, l, KILN_ERR_ARG, t, "diagonal: diagonal dimensions cannot be identical %d, %d", dim1, dim2);
  int64_t perm[KILN_MAX_DIMS], shape[KILN_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < t->ndim; d++)
    if (d != a && d != b) shape[n] = t->shape[d], perm[n++] = d;
  perm[n] = a, perm[n + 1] = b;
  ir_node *tmp[4];
  tmp[0] = kiln_permute_at(f, l, t, t->ndim, perm);
  int64_t rows = t->shape[a], cols = t->shape[b];
  bool right = offset >= 0;
  int64_t skip = right ? (offset < cols ? offset : cols) : (-offset < rows ? -offset : rows);
  tmp[1] = kiln_slice_at(f, l, tmp[0], right ? n + 1 : n, skip, KILN_END, 1);
  if (right) cols -= skip;
  else rows -= skip;
  int64_t len = rows < cols ? rows : cols;
  shape[n] = rows * cols;
  tmp[2] = kiln_reshape_at(f, l, tmp[1], n + 1, shape);
  tmp[3] = kiln_slice_at(f, l, tmp[2], n, 0, len ? (len - 1) * (cols + 1) + 1 : 0, cols + 1);
  return fe_done(tmp[3], 3, tmp);
}

kiln_tensor *kiln_diagonal_at(const char *f, int l, kiln_tensor *t, int64_t offset, int dim1, int dim2) {
  FE_AS("diagonal", diagonal(f, l, t, offset, dim1, dim2));
}

/* torch.diag: a vector becomes the square matrix with it on diagonal k
 * (a select on col - row == k), a matrix gives its diagonal k. */
static ir_node *diag(const char *f, int l, ir_node *t, int64_t k) {
  ir_node *e = fe_check_arg(f, l, "diag", t, 1);
  if (e) return e;
  if (t->ndim == 2) return diagonal(f, l, t, k, 0, 1);
  if (t->ndim != 1) return fe_fail(f, l, KILN_ERR_ARG, t, "diag: Supports 1D or 2D tensors. Got %dD", t->ndim);
  int64_t ak = k < 0 ? -k : k, m;
  if (__builtin_add_overflow(t->shape[0], ak, &m) || (e = fe_check_numel(f, l, "diag", 2, (int64_t[]){m, m}))) return e;
  ir_node *tmp[5];
  tmp[0] = kiln_pad_at(f, l, t, 2, (int64_t[]){0, ak}, 0);   /* v[r] (k >= 0) or v[c], m long */
  tmp[1] = kiln_reshape_at(f, l, tmp[0], 2, k >= 0 ? (int64_t[]){m, 1} : (int64_t[]){1, m});
  tmp[2] = kiln_expand_at(f, l, tmp[1], 2, (int64_t[]){m, m});
  tmp[3] = diagonal_number(f, l, m, m, t->device);
  tmp[4] = kiln_eqs_at(f, l, tmp[3], (double)k);
  return fe_done(keep_or_zero(f, l, tmp[4], tmp[2]), 5, tmp);
}

kiln_tensor *kiln_diag_at(const char *f, int l, kiln_tensor *t, int64_t diagonal) {
  FE_AS("diag", diag(f, l, t, diagonal));
}

/* num_classes -1 is max(t) + 1: it realizes t's max (checked >= 0). */
static ir_node *inferred_classes(const char *f, int l, ir_node *t, int64_t *classes) {
  if (ir_numel(t->ndim, t->shape) == 0)
    return fe_fail(f, l, KILN_ERR_ARG, t, "one_hot: Can not infer total number of classes from empty tensor.");
  ir_node *lo = kiln_min_at(f, l, t), *hi = kiln_max_at(f, l, t);
  double min = kiln_item_at(f, l, lo), max = kiln_item_at(f, l, hi);
  ir_node *e = NULL;
  if (isnan(min) || isnan(max)) e = fe_error(KILN_ERR_ARG, f, l, "one_hot: %s", kiln_last_error());
  else if (min < 0) e = fe_fail(f, l, KILN_ERR_ARG, t, "one_hot: Class values must be non-negative.");
  *classes = (int64_t)max + 1;
  fe_drop(lo);
  fe_drop(hi);
  return e;
}

static ir_node *one_hot(const char *f, int l, ir_node *t, int64_t num_classes) {
  ir_node *e = fe_check_arg(f, l, "one_hot", t, 1);
  if (e) return e;
  if (t->dtype != KILN_I64)
    return fe_fail(f, l, KILN_ERR_DTYPE, t, "one_hot: is only applicable to index tensor of type int64");
  if (num_classes < -1) return fe_fail(f, l, KILN_ERR_ARG, t, "one_hot: num_classes should be -1 or non-negative, got %lld",
                                       (long long)num_classes);
  if (num_classes == -1 && (e = inferred_classes(f, l, t, &num_classes))) return e;
  int64_t shape[KILN_MAX_DIMS];
  if (t->ndim + 1 > KILN_MAX_DIMS) return fe_fail(f, l, KILN_ERR_ARG, t, "one_hot: the result has more than KILN_MAX_DIMS dims");
  memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
  shape[t->ndim] = 1;
  ir_node *tmp[4];
  tmp[0] = kiln_reshape_at(f, l, t, t->ndim + 1, shape);
  tmp[1] = positions(f, l, num_classes, t->device);
  tmp[2] = kiln_eq_at(f, l, tmp[0], tmp[1]);
  tmp[3] = kiln_cast_at(f, l, tmp[2], KILN_I64);
  return fe_done(tmp[3], 3, tmp);
}

kiln_tensor *kiln_one_hot_at(const char *f, int l, kiln_tensor *t, int64_t num_classes) {
  FE_AS("one_hot", one_hot(f, l, t, num_classes));
}
