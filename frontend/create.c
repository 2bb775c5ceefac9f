/* create.c: constructors. Data from the user becomes a BUFFER (copied, or
 * borrowed zero-copy); everything else is a source node (CONST, ARANGE, EYE,
 * RAND, ...) that costs nothing until a kernel reads it, fused. */
#include "frontend/frontend.h"
#include "runtime/rt.h"

#include <math.h>
#include <string.h>

/* ---- validation --------------------------------------------------------- */
static ir_node *check_dtype(const char *f, int l, const char *op, kiln_dtype dt) {
  if (ir_dtype_valid(dt)) return NULL;
  return fe_error(KILN_ERR_ARG, f, l, "%s: invalid dtype %d", op, (int)dt);
}

ir_node *fe_check_shape(const char *f, int l, const char *op, int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > KILN_MAX_DIMS)
    return fe_error(KILN_ERR_ARG, f, l, "%s: %d dims is outside 0..KILN_MAX_DIMS (%d)", op, ndim, KILN_MAX_DIMS);
  if (ndim && !shape) return fe_error(KILN_ERR_ARG, f, l, "%s: shape is NULL with %d dims", op, ndim);
  int bad = -1;
  for (int i = 0; i < ndim && bad < 0; i++)
    if (shape[i] < 0) bad = i;
  if (bad < 0) return fe_check_numel(f, l, op, ndim, shape);
  ir_str s = {0};   /* formatted only on failure: creating tensors is on a cached realize's hot path */
  ir_str_shape(&s, ndim, shape);
  ir_node *e = fe_error(KILN_ERR_ARG, f, l, "%s: negative size %lld in shape %s", op, (long long)shape[bad], s.s);
  ir_str_free(&s);
  return e;
}

static ir_node *check_shape_dtype(const char *f, int l, const char *op, int ndim, const int64_t *shape,
                                  kiln_dtype dt) {
  ir_node *e = fe_check_shape(f, l, op, ndim, shape);
  return e ? e : check_dtype(f, l, op, dt);
}

/* The value an element of dtype dt holds for v, as torch.full does it:
 * integers truncate toward zero (nan -> 0), bool is v != 0. */
static double value_in(double v, kiln_dtype dt) {
  switch (ir_dtypes[dt].kind) {
  case DK_BOOL: return v != 0;
  case DK_INT: return isnan(v) ? 0 : trunc(v);
  default: return v;
  }
}

/* ---- data from the user ------------------------------------------------- */
/* Byte size of a checked shape, or SIZE_MAX when it does not fit memory. */
static size_t shape_bytes(int ndim, const int64_t *shape, kiln_dtype dt) {
  size_t bytes;
  if (__builtin_mul_overflow((size_t)ir_numel(ndim, shape), ir_dtypes[dt].size, &bytes)) return SIZE_MAX;
  return bytes;
}

ir_node *fe_buffer_node(const char *f, int l, const char *op, rt_buffer *buf, kiln_dtype dt, int ndim,
                        const int64_t *shape) {
  ir_node *n = ir_node_new(IR_BUFFER, dt, ndim, shape, 0, NULL, f, l);
  if (!n) {
    rt_buffer_release(buf);
    ir_error_setf("%s:%d: %s: out of memory", f, l, op);
    return fe_nomem();
  }
  ir_node_set_buffer(n, buf);
  return fe_register(n);
}

/* Shared checks of from_data/from_buffer: NULL, or the error node. */
static ir_node *check_data(const char *f, int l, const char *op, const void *data, kiln_dtype dt, int ndim,
                           const int64_t *shape, size_t *bytes) {
  ir_node *e = check_shape_dtype(f, l, op, ndim, shape, dt);
  if (e) return e;
  *bytes = shape_bytes(ndim, shape, dt);
  if (*bytes == SIZE_MAX)
    return fe_error(KILN_ERR_MEMORY, f, l, "%s: %s tensor is larger than memory", op, ir_dtypes[dt].name);
  if (!data && *bytes) return fe_error(KILN_ERR_ARG, f, l, "%s: data is NULL", op);
  return NULL;
}

kiln_tensor *kiln_from_data_at(const char *f, int l, const void *data, kiln_dtype dt, int ndim,
                               const int64_t *shape) {
  size_t bytes;
  ir_node *e = check_data(f, l, "from_data", data, dt, ndim, shape, &bytes);
  if (e) return e;
  rt_buffer *buf = rt_buffer_alloc(bytes ? bytes : 1);   /* every BUFFER owns real memory */
  if (!buf) return fe_error(KILN_ERR_MEMORY, f, l, "from_data: out of memory allocating %zu bytes", bytes);
  if (bytes) memcpy(buf->data, data, bytes);
  return fe_buffer_node(f, l, "from_data", buf, dt, ndim, shape);
}

/* Zero-copy: the node reads the user's memory, so later writes show. */
kiln_tensor *kiln_from_buffer_at(const char *f, int l, void *data, kiln_dtype dt, int ndim, const int64_t *shape) {
  size_t bytes;
  ir_node *e = check_data(f, l, "from_buffer", data, dt, ndim, shape, &bytes);
  if (e) return e;
  if (!data) return kiln_from_data_at(f, l, NULL, dt, ndim, shape);   /* empty: nothing to borrow */
  rt_buffer *buf = rt_buffer_borrow(data, bytes);
  if (!buf) return fe_error(KILN_ERR_MEMORY, f, l, "from_buffer: out of memory");
  return fe_buffer_node(f, l, "from_buffer", buf, dt, ndim, shape);
}

/* A stand-in for an input of a compiled function: a BUFFER on dev whose
 * storage holds no memory. Ops on it build a graph that only kiln_compile
 * plans. */
kiln_tensor *kiln_placeholder_on_at(const char *f, int l, kiln_dtype dt, kiln_device dev, int ndim,
                                    const int64_t *given) {
  int64_t shape[KILN_MAX_DIMS];
  for (int d = 0; given && d < ndim && d < KILN_MAX_DIMS; d++) shape[d] = given[d] == -1 ? KILN_DYN : given[d];
  ir_node *e = check_shape_dtype(f, l, "placeholder", ndim, given ? shape : NULL, dt);
  if (!e) e = fe_check_device(f, l, "placeholder", dev);
  if (e) return e;
  size_t bytes = shape_bytes(ndim, shape, dt);
  if (bytes == SIZE_MAX) return fe_error(KILN_ERR_MEMORY, f, l, "placeholder: %s tensor is larger than memory", ir_dtypes[dt].name);
  rt_buffer *stand_in = rt_buffer_borrow(NULL, bytes);
  if (!stand_in) return fe_error(KILN_ERR_MEMORY, f, l, "placeholder: out of memory");
  ir_node *n = ir_node_new(IR_BUFFER, dt, ndim, shape, 0, NULL, f, l);
  if (!n) {
    rt_buffer_release(stand_in);
    return fe_error(KILN_ERR_MEMORY, f, l, "placeholder: out of memory");
  }
  n->buf = stand_in;
  n->pending = 0;
  n->symbolic = true;
  n->device = stand_in->device = dev;
  return fe_register(n);
}

kiln_tensor *kiln_placeholder_at(const char *f, int l, kiln_dtype dt, int ndim, const int64_t *shape) {
  return kiln_placeholder_on_at(f, l, dt, (kiln_device){KILN_CPU, 0}, ndim, shape);
}

/* ---- constants and ranges ----------------------------------------------- */
static const kiln_device cpu = {KILN_CPU, 0};

static ir_node *const_node_as(const char *f, int l, const char *op, int ndim, const int64_t *shape, double v,
                              kiln_dtype dt, kiln_device dev) {
  ir_node *e = check_shape_dtype(f, l, op, ndim, shape, dt);
  if (e) return e;
  ir_node *n = ir_node_new(IR_CONST, dt, ndim, shape, 0, NULL, f, l);
  if (!n) return fe_nomem();
  n->attr.value = value_in(v, dt);
  n->device = dev;
  return fe_finish(n);
}

/* A CONST node that says it came from op (zeros, full, ...). */
static ir_node *const_node(const char *f, int l, const char *op, int ndim, const int64_t *shape, double v,
                           kiln_dtype dt, kiln_device dev) {
  FE_AS(op, const_node_as(f, l, op, ndim, shape, v, dt, dev));
}

ir_node *fe_const_on(const char *f, int l, const char *op, int ndim, const int64_t *shape, double v, kiln_dtype dt,
                     kiln_device dev) {
  return const_node(f, l, op, ndim, shape, v, dt, dev);
}

kiln_tensor *kiln_scalar_at(const char *f, int l, double v, kiln_dtype dt) {
  return const_node(f, l, "scalar", 0, NULL, v, dt, cpu);
}
kiln_tensor *kiln_full_at(const char *f, int l, int ndim, const int64_t *shape, double v, kiln_dtype dt) {
  return const_node(f, l, "full", ndim, shape, v, dt, cpu);
}
kiln_tensor *kiln_zeros_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt) {
  return const_node(f, l, "zeros", ndim, shape, 0, dt, cpu);
}
kiln_tensor *kiln_ones_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt) {
  return const_node(f, l, "ones", ndim, shape, 1, dt, cpu);
}

static bool integral(double v) { return isfinite(v) && v == trunc(v); }

/* int64 when start, end and step are all integral, else float32: C cannot
 * tell arange(0, 10, 1) from arange(0.0, 10.0, 1.0), so integral values
 * give PyTorch's integer result. Length ceil((end - start) / step). */
kiln_tensor *kiln_arange_at(const char *f, int l, double start, double end, double step) {
  if (!isfinite(start) || !isfinite(end))
    return fe_error(KILN_ERR_ARG, f, l, "arange: unsupported range %g to %g", start, end);
  if (step == 0 || isnan(step)) return fe_error(KILN_ERR_ARG, f, l, "arange: step must be nonzero, got %g", step);
  if ((step > 0 && end < start) || (step < 0 && end > start))
    return fe_error(KILN_ERR_ARG, f, l, "arange: upper bound %g and lower bound %g inconsistent with step sign (%g)",
                    end, start, step);
  double len = ceil((end - start) / step);
  if (!(len < 9.2e18)) return fe_error(KILN_ERR_SHAPE, f, l, "arange: %g to %g by %g has too many elements", start, end, step);
  kiln_dtype dt = integral(start) && integral(end) && integral(step) ? KILN_I64 : KILN_F32;
  ir_node *n = ir_node_new(IR_ARANGE, dt, 1, (int64_t[]){(int64_t)len}, 0, NULL, f, l);
  if (!n) return fe_nomem();
  n->attr.start = start;
  n->attr.step = step;
  return fe_finish(n);
}

kiln_tensor *kiln_linspace_at(const char *f, int l, double start, double end, int64_t steps) {
  if (steps < 0) return fe_error(KILN_ERR_ARG, f, l, "linspace: number of steps must be non-negative, got %lld",
                                 (long long)steps);
  ir_node *n = ir_node_new(IR_LINSPACE, KILN_F32, 1, &steps, 0, NULL, f, l);
  if (!n) return fe_nomem();
  n->attr.start = start;
  n->attr.end = steps == 1 ? start : end;   /* one step is the start, as in PyTorch */
  n->attr.step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
  return fe_finish(n);
}

/* An n x m identity; m < 0 means square. */
kiln_tensor *kiln_eye_at(const char *f, int l, int64_t n, int64_t m, kiln_dtype dt) {
  if (n < 0) return fe_error(KILN_ERR_ARG, f, l, "eye: n must be non-negative, got %lld", (long long)n);
  int64_t shape[2] = {n, m < 0 ? n : m};
  ir_node *e = check_shape_dtype(f, l, "eye", 2, shape, dt);
  return e ? e : fe_finish(ir_node_new(IR_EYE, dt, 2, shape, 0, NULL, f, l));
}

/* ---- random ------------------------------------------------------------- */
/* A RAND/RANDN/RANDINT node that owns the next numel counters of the stream. */
static ir_node *random_node(const char *f, int l, ir_op op, int ndim, const int64_t *shape, kiln_dtype dt) {
  ir_node *n = ir_node_new(op, dt, ndim, shape, 0, NULL, f, l);
  if (n) rt_rng_take((uint64_t)ir_numel(ndim, shape), &n->attr.seed, &n->attr.offset);
  return n;
}

static ir_node *rand_float(const char *f, int l, const char *name, ir_op op, int ndim, const int64_t *shape,
                           kiln_dtype dt, kiln_device dev) {
  ir_node *e = check_shape_dtype(f, l, name, ndim, shape, dt);
  if (e) return e;
  if (!ir_is_float(dt))
    return fe_error(KILN_ERR_DTYPE, f, l, "%s: dtype %s is not a floating point type (use float16, bfloat16, float32 or float64)",
                    name, ir_dtypes[dt].name);
  ir_node *n = random_node(f, l, op, ndim, shape, dt);
  if (!n) return fe_nomem();
  n->device = dev;
  return fe_finish(n);
}

kiln_tensor *kiln_rand_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt) {
  return rand_float(f, l, "rand", IR_RAND, ndim, shape, dt, cpu);
}
kiln_tensor *kiln_randn_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt) {
  return rand_float(f, l, "randn", IR_RANDN, ndim, shape, dt, cpu);
}

kiln_tensor *kiln_randint_at(const char *f, int l, int64_t low, int64_t high, int ndim, const int64_t *shape,
                             kiln_dtype dt) {
  ir_node *e = check_shape_dtype(f, l, "randint", ndim, shape, dt);
  if (e) return e;
  if (dt == KILN_BOOL) return fe_error(KILN_ERR_DTYPE, f, l, "randint: dtype bool is not supported");
  if (low >= high)
    return fe_error(KILN_ERR_ARG, f, l, "randint: low must be less than high, got low=%lld >= high=%lld",
                    (long long)low, (long long)high);
  /* PyTorch's check_from_to_in_range: every value drawn must fit dt */
  if (!ir_is_float(dt) && !fe_int_fits((double)low, dt))
    return fe_error(KILN_ERR_ARG, f, l, "randint: low=%lld is out of bounds for %s", (long long)low, ir_dtypes[dt].name);
  if (!ir_is_float(dt) && !fe_int_fits((double)(high - 1), dt))
    return fe_error(KILN_ERR_ARG, f, l, "randint: high - 1 = %lld is out of bounds for %s", (long long)(high - 1),
                    ir_dtypes[dt].name);
  ir_node *n = random_node(f, l, IR_RANDINT, ndim, shape, dt);
  if (!n) return fe_nomem();
  n->attr.low = low;
  n->attr.high = high;
  return fe_finish(n);
}

/* ---- *_like: shape, dtype and device of t -------------------------------- */
kiln_tensor *kiln_zeros_like_at(const char *f, int l, kiln_tensor *t) {
  ir_node *e = fe_check_arg(f, l, "zeros_like", t, 1);
  return e ? e : const_node(f, l, "zeros_like", t->ndim, t->shape, 0, t->dtype, t->device);
}
kiln_tensor *kiln_ones_like_at(const char *f, int l, kiln_tensor *t) {
  ir_node *e = fe_check_arg(f, l, "ones_like", t, 1);
  return e ? e : const_node(f, l, "ones_like", t->ndim, t->shape, 1, t->dtype, t->device);
}
kiln_tensor *kiln_rand_like_at(const char *f, int l, kiln_tensor *t) {
  ir_node *e = fe_check_arg(f, l, "rand_like", t, 1);
  return e ? e : rand_float(f, l, "rand_like", IR_RAND, t->ndim, t->shape, t->dtype, t->device);
}
