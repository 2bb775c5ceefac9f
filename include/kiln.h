/* kiln.h: the one public header of kiln, a lazy graph compiler for tensor
 * expressions. Every op only builds a node of a DAG; kiln_realize (or any call
 * that reads data) checks, fuses, compiles and runs what is pending.
 *
 * Conventions
 * - Every function that can fail is a macro that passes the caller's
 *   __FILE__/__LINE__ to a `*_at` function; call the `_at` form directly to
 *   report a location of your own (a wrapper library, say).
 * - Ops never return NULL. A bad op returns an error node; errors are sticky
 *   (an op on an error node returns an error node) and surface at realize as
 *   a kiln_status plus kiln_last_error().
 * - Handles are reference counted. A handle made inside kiln_scope_begin/end
 *   is released by kiln_scope_end unless kiln_keep moved it out.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_tensor kiln_tensor;

typedef enum {
  KILN_BOOL, KILN_U8, KILN_I8, KILN_I16, KILN_I32, KILN_I64,
  KILN_F16, KILN_BF16, KILN_F32, KILN_F64,
  KILN_NUM_DTYPES
} kiln_dtype;

typedef enum { KILN_CPU, KILN_CUDA } kiln_device_type;
typedef struct { kiln_device_type type; int index; } kiln_device;

typedef enum {
  KILN_OK = 0,
  KILN_ERR_ARG,       /* NULL handle, bad dtype, bad size, bad dim */
  KILN_ERR_SHAPE,     /* shapes that cannot broadcast, overflowing sizes */
  KILN_ERR_DTYPE,     /* an op that does not accept the operands' dtypes */
  KILN_ERR_DEVICE,    /* operands on different devices, CUDA not available */
  KILN_ERR_MEMORY,    /* allocation failed */
  KILN_ERR_COMPILE,   /* the JIT or NVRTC failed (an internal error) */
  KILN_NUM_STATUS
} kiln_status;

/* Shapes and dim lists in C: KILN_SHAPE(2, 3) expands to the two arguments
 * `2, (const int64_t[]){2, 3}` (a count and a compound-literal array). */
#define KILN_NARGS_(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define KILN_SHAPE(...) KILN_NARGS_(__VA_ARGS__), ((const int64_t[]){__VA_ARGS__})
#define KILN_DIMS(...) KILN_SHAPE(__VA_ARGS__)
#define KILN_MAX_DIMS 8

/* ---- runtime, devices, modes --------------------------------------------- */
kiln_device kiln_cpu_device(void);
kiln_device kiln_default_device(void);   /* cuda:0 when available, else cpu */
int kiln_cuda_is_available(void);
int kiln_cuda_device_count(void);
/* Why cuda:0 cannot be used ("libcuda.so.1 not found (no NVIDIA driver)"),
 * "" when it can. Valid until the thread's next call. */
const char *kiln_cuda_unavailable_reason(void);
void kiln_set_eager(int on);             /* also KILN_EAGER=1 */
int kiln_get_eager(void);
void kiln_shutdown(void);                /* frees all runtime state */
const char *kiln_dtype_name(kiln_dtype d);  /* "float32", "int64", ... */
size_t kiln_dtype_size(kiln_dtype d);

typedef struct {
  uint64_t kernels_launched;
  uint64_t compiles;         /* launches whose kernel was compiled for them */
  uint64_t cache_hits;       /* launches whose code was already in memory */
  uint64_t bytes_moved;      /* bytes read + written by launched kernels */
  uint64_t auto_realizes;    /* pending graphs realized for growing too big */
  uint64_t disk_hits;        /* launches whose code came from the disk cache (not compiled) */
  uint64_t evictions;        /* compiled CPU kernels dropped from memory for KILN_KERNEL_CACHE_MB */
  uint64_t code_bytes;       /* bytes of compiled CPU code held now (object file sizes); not reset */
} kiln_stats_t;
kiln_stats_t kiln_stats(void);
void kiln_reset_stats(void);

/* Memory kiln holds on a device: bytes in live tensors, plus freed blocks
 * kept for reuse (reserved), and the highest live figure since the last
 * kiln_reset_peak_memory, for the CPU or a CUDA device (zeros before its
 * first use). KILN_ERR_DEVICE (with a message) for a CUDA device that cannot
 * be used. */
typedef struct {
  uint64_t allocated_bytes;
  uint64_t reserved_bytes;
  uint64_t peak_bytes;
} kiln_memory_stats_t;
kiln_status kiln_memory_stats(kiln_device dev, kiln_memory_stats_t *out);
void kiln_reset_peak_memory(void);       /* on every device */
/* Gives the freed blocks every allocator keeps for reuse back to the system
 * (after a GPU's queued work is done). Memory of live tensors stays. */
void kiln_empty_cache(void);

/* ---- lifetimes ----------------------------------------------------------- */
void kiln_scope_begin(void);
void kiln_scope_end(void);
kiln_tensor *kiln_keep(kiln_tensor *t);  /* survives the current scope */
void kiln_release(kiln_tensor *t);       /* drops one reference; NULL is fine */
kiln_tensor *kiln_retain(kiln_tensor *t); /* adds one reference */

/* ---- errors -------------------------------------------------------------- */
const char *kiln_last_error(void);       /* message of the last failure, "" if none */
kiln_status kiln_status_of(kiln_tensor *t);

/* ---- creation ------------------------------------------------------------ */
kiln_tensor *kiln_from_data_at(const char *f, int l, const void *data, kiln_dtype dt, int ndim, const int64_t *shape);
kiln_tensor *kiln_from_buffer_at(const char *f, int l, void *data, kiln_dtype dt, int ndim, const int64_t *shape);
kiln_tensor *kiln_scalar_at(const char *f, int l, double v, kiln_dtype dt);
kiln_tensor *kiln_full_at(const char *f, int l, int ndim, const int64_t *shape, double v, kiln_dtype dt);
kiln_tensor *kiln_zeros_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt);
kiln_tensor *kiln_ones_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt);
kiln_tensor *kiln_arange_at(const char *f, int l, double start, double end, double step);
kiln_tensor *kiln_linspace_at(const char *f, int l, double start, double end, int64_t steps);
kiln_tensor *kiln_eye_at(const char *f, int l, int64_t n, int64_t m, kiln_dtype dt);
kiln_tensor *kiln_rand_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt);
kiln_tensor *kiln_randn_at(const char *f, int l, int ndim, const int64_t *shape, kiln_dtype dt);
kiln_tensor *kiln_randint_at(const char *f, int l, int64_t low, int64_t high, int ndim, const int64_t *shape, kiln_dtype dt);
kiln_tensor *kiln_zeros_like_at(const char *f, int l, kiln_tensor *t);
kiln_tensor *kiln_ones_like_at(const char *f, int l, kiln_tensor *t);
kiln_tensor *kiln_rand_like_at(const char *f, int l, kiln_tensor *t);
void kiln_manual_seed(uint64_t seed);

#define kiln_from_data(data, dt, ...) kiln_from_data_at(__FILE__, __LINE__, data, dt, __VA_ARGS__)
#define kiln_from_buffer(data, dt, ...) kiln_from_buffer_at(__FILE__, __LINE__, data, dt, __VA_ARGS__)
#define kiln_scalar(v, dt) kiln_scalar_at(__FILE__, __LINE__, v, dt)
#define kiln_full(...) kiln_full_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_zeros(...) kiln_zeros_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_ones(...) kiln_ones_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_arange(start, end, step) kiln_arange_at(__FILE__, __LINE__, start, end, step)
#define kiln_linspace(start, end, steps) kiln_linspace_at(__FILE__, __LINE__, start, end, steps)
#define kiln_eye(n, m, dt) kiln_eye_at(__FILE__, __LINE__, n, m, dt)
#define kiln_rand(...) kiln_rand_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_randn(...) kiln_randn_at(__FILE__, __LINE__, __VA_ARGS__)
#define kiln_randint(low, high, ...) kiln_randint_at(__FILE__, __LINE__, low, high, __VA_ARGS__)
#define kiln_zeros_like(t) kiln_zeros_like_at(__FILE__, __LINE__, t)
#define kiln_ones_like(t) kiln_ones_like_at(__FILE__, __LINE__, t)
#define kiln_rand_like(t) kiln_rand_like_at(__FILE__, __LINE__, t)

/* ---- elementwise ops (NumPy broadcasting, PyTorch type promotion) -------- */
#define KILN_UNARY_(name) \
  kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *a);
#define KILN_BINARY_(name) \
  kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b); \
  kiln_tensor *kiln_##name##s_at(const char *f, int l, kiln_tensor *a, double b);
KILN_UNARY_(neg) KILN_UNARY_(abs) KILN_UNARY_(exp) KILN_UNARY_(log)
KILN_UNARY_(sqrt) KILN_UNARY_(rsqrt) KILN_UNARY_(sin) KILN_UNARY_(cos)
KILN_UNARY_(tanh) KILN_UNARY_(sigmoid) KILN_UNARY_(relu) KILN_UNARY_(gelu) KILN_UNARY_(gelu_tanh)
KILN_UNARY_(silu) KILN_UNARY_(floor) KILN_UNARY_(ceil) KILN_UNARY_(round)
KILN_UNARY_(sign) KILN_UNARY_(reciprocal) KILN_UNARY_(logical_not)
KILN_BINARY_(add) KILN_BINARY_(sub) KILN_BINARY_(mul) KILN_BINARY_(div)
KILN_BINARY_(pow) KILN_BINARY_(maximum) KILN_BINARY_(minimum)
KILN_BINARY_(eq) KILN_BINARY_(ne) KILN_BINARY_(lt) KILN_BINARY_(le)
KILN_BINARY_(gt) KILN_BINARY_(ge) KILN_BINARY_(logical_and) KILN_BINARY_(logical_or)
#undef KILN_UNARY_
#undef KILN_BINARY_
kiln_tensor *kiln_where_at(const char *f, int l, kiln_tensor *cond, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln_clamp_at(const char *f, int l, kiln_tensor *a, double lo, double hi);
kiln_tensor *kiln_cast_at(const char *f, int l, kiln_tensor *a, kiln_dtype dt);

#define kiln_neg(a) kiln_neg_at(__FILE__, __LINE__, a)
#define kiln_abs(a) kiln_abs_at(__FILE__, __LINE__, a)
#define kiln_exp(a) kiln_exp_at(__FILE__, __LINE__, a)
#define kiln_log(a) kiln_log_at(__FILE__, __LINE__, a)
#define kiln_sqrt(a) kiln_sqrt_at(__FILE__, __LINE__, a)
#define kiln_rsqrt(a) kiln_rsqrt_at(__FILE__, __LINE__, a)
#define kiln_sin(a) kiln_sin_at(__FILE__, __LINE__, a)
#define kiln_cos(a) kiln_cos_at(__FILE__, __LINE__, a)
#define kiln_tanh(a) kiln_tanh_at(__FILE__, __LINE__, a)
#define kiln_sigmoid(a) kiln_sigmoid_at(__FILE__, __LINE__, a)
#define kiln_relu(a) kiln_relu_at(__FILE__, __LINE__, a)
#define kiln_gelu(a) kiln_gelu_at(__FILE__, __LINE__, a)
/* PyTorch's gelu(x, approximate='tanh'): x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * kiln_gelu is the exact erf form; this one is what cuBLASLt's GELU epilogue
 * computes, so on a GPU it fuses into the matrix product. */
#define kiln_gelu_tanh(a) kiln_gelu_tanh_at(__FILE__, __LINE__, a)
#define kiln_silu(a) kiln_silu_at(__FILE__, __LINE__, a)
#define kiln_floor(a) kiln_floor_at(__FILE__, __LINE__, a)
#define kiln_ceil(a) kiln_ceil_at(__FILE__, __LINE__, a)
#define kiln_round(a) kiln_round_at(__FILE__, __LINE__, a)
#define kiln_sign(a) kiln_sign_at(__FILE__, __LINE__, a)
#define kiln_reciprocal(a) kiln_reciprocal_at(__FILE__, __LINE__, a)
#define kiln_logical_not(a) kiln_logical_not_at(__FILE__, __LINE__, a)
#define kiln_add(a, b) kiln_add_at(__FILE__, __LINE__, a, b)
#define kiln_sub(a, b) kiln_sub_at(__FILE__, __LINE__, a, b)
#define kiln_mul(a, b) kiln_mul_at(__FILE__, __LINE__, a, b)
#define kiln_div(a, b) kiln_div_at(__FILE__, __LINE__, a, b)
#define kiln_pow(a, b) kiln_pow_at(__FILE__, __LINE__, a, b)
#define kiln_maximum(a, b) kiln_maximum_at(__FILE__, __LINE__, a, b)
#define kiln_minimum(a, b) kiln_minimum_at(__FILE__, __LINE__, a, b)
#define kiln_eq(a, b) kiln_eq_at(__FILE__, __LINE__, a, b)
#define kiln_ne(a, b) kiln_ne_at(__FILE__, __LINE__, a, b)
#define kiln_lt(a, b) kiln_lt_at(__FILE__, __LINE__, a, b)
#define kiln_le(a, b) kiln_le_at(__FILE__, __LINE__, a, b)
#define kiln_gt(a, b) kiln_gt_at(__FILE__, __LINE__, a, b)
#define kiln_ge(a, b) kiln_ge_at(__FILE__, __LINE__, a, b)
#define kiln_logical_and(a, b) kiln_logical_and_at(__FILE__, __LINE__, a, b)
#define kiln_logical_or(a, b) kiln_logical_or_at(__FILE__, __LINE__, a, b)
/* Scalar forms: kiln_adds(t, 10.0) is t + 10. The scalar acts like a Python
 * number in PyTorch: it never widens a tensor of its own kind; an integral
 * value keeps an integer tensor integer, a fractional one makes it float32. */
#define kiln_adds(a, b) kiln_adds_at(__FILE__, __LINE__, a, b)
#define kiln_subs(a, b) kiln_subs_at(__FILE__, __LINE__, a, b)
#define kiln_muls(a, b) kiln_muls_at(__FILE__, __LINE__, a, b)
#define kiln_divs(a, b) kiln_divs_at(__FILE__, __LINE__, a, b)
#define kiln_pows(a, b) kiln_pows_at(__FILE__, __LINE__, a, b)
#define kiln_maximums(a, b) kiln_maximums_at(__FILE__, __LINE__, a, b)
#define kiln_minimums(a, b) kiln_minimums_at(__FILE__, __LINE__, a, b)
#define kiln_eqs(a, b) kiln_eqs_at(__FILE__, __LINE__, a, b)
#define kiln_nes(a, b) kiln_nes_at(__FILE__, __LINE__, a, b)
#define kiln_lts(a, b) kiln_lts_at(__FILE__, __LINE__, a, b)
#define kiln_les(a, b) kiln_les_at(__FILE__, __LINE__, a, b)
#define kiln_gts(a, b) kiln_gts_at(__FILE__, __LINE__, a, b)
#define kiln_ges(a, b) kiln_ges_at(__FILE__, __LINE__, a, b)
#define kiln_logical_ands(a, b) kiln_logical_ands_at(__FILE__, __LINE__, a, b)
#define kiln_logical_ors(a, b) kiln_logical_ors_at(__FILE__, __LINE__, a, b)
#define kiln_where(c, a, b) kiln_where_at(__FILE__, __LINE__, c, a, b)
#define kiln_clamp(a, lo, hi) kiln_clamp_at(__FILE__, __LINE__, a, lo, hi)
#define kiln_cast(a, dt) kiln_cast_at(__FILE__, __LINE__, a, dt)

/* ---- movement: views, never copies until realize (PyTorch semantics) ----- */
/* Dims may be negative (counting from the end). reshape allows one -1 (the
 * size that keeps numel); view is reshape that fails, as PyTorch's view does,
 * when the input's strides cannot express the new shape (after a transpose,
 * say): reshape copies then, view never does. expand's -1 keeps a size.
 * slice follows Python: start/stop clamp into range, negative ones count from
 * the end, KILN_END as stop means "to the end", step must be > 0. select
 * removes the dim. pad takes npads amounts in PyTorch F.pad's order, so
 * kiln_pad(t, KILN_SHAPE(1, 2), 0.0) pads the last dim: (left, right) pairs,
 * last dim first; negative amounts crop. cat concatenates along an existing
 * dim (promoting dtypes), stack along a new one. kiln_index is NumPy basic
 * indexing from a string: "0, :, 1:3, ::2, -1, None, ...". */
#define KILN_END INT64_MAX
kiln_tensor *kiln_reshape_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *shape);
kiln_tensor *kiln_view_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *shape);
kiln_tensor *kiln_permute_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *dims);
kiln_tensor *kiln_transpose_at(const char *f, int l, kiln_tensor *t, int d0, int d1);
kiln_tensor *kiln_T_at(const char *f, int l, kiln_tensor *t);   /* 2-D only */
kiln_tensor *kiln_expand_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *shape);
kiln_tensor *kiln_squeeze_at(const char *f, int l, kiln_tensor *t);   /* every size-1 dim */
kiln_tensor *kiln_squeeze_dim_at(const char *f, int l, kiln_tensor *t, int dim);  /* no-op unless size 1 */
kiln_tensor *kiln_unsqueeze_at(const char *f, int l, kiln_tensor *t, int dim);
kiln_tensor *kiln_flatten_at(const char *f, int l, kiln_tensor *t);   /* to 1-D */
kiln_tensor *kiln_flatten_dims_at(const char *f, int l, kiln_tensor *t, int start, int end);
kiln_tensor *kiln_slice_at(const char *f, int l, kiln_tensor *t, int dim, int64_t start, int64_t stop, int64_t step);
kiln_tensor *kiln_select_at(const char *f, int l, kiln_tensor *t, int dim, int64_t index);
kiln_tensor *kiln_flip_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims);
kiln_tensor *kiln_pad_at(const char *f, int l, kiln_tensor *t, int npads, const int64_t *pads, double value);
kiln_tensor *kiln_cat_at(const char *f, int l, int n, kiln_tensor *const *ts, int dim);
kiln_tensor *kiln_stack_at(const char *f, int l, int n, kiln_tensor *const *ts, int dim);
kiln_tensor *kiln_index_at(const char *f, int l, kiln_tensor *t, const char *index);

#define kiln_reshape(t, ...) kiln_reshape_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_view(t, ...) kiln_view_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_permute(t, ...) kiln_permute_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_transpose(t, d0, d1) kiln_transpose_at(__FILE__, __LINE__, t, d0, d1)
#define kiln_T(t) kiln_T_at(__FILE__, __LINE__, t)
#define kiln_expand(t, ...) kiln_expand_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_squeeze(t) kiln_squeeze_at(__FILE__, __LINE__, t)
#define kiln_squeeze_dim(t, dim) kiln_squeeze_dim_at(__FILE__, __LINE__, t, dim)
#define kiln_unsqueeze(t, dim) kiln_unsqueeze_at(__FILE__, __LINE__, t, dim)
#define kiln_flatten(t) kiln_flatten_at(__FILE__, __LINE__, t)
#define kiln_flatten_dims(t, start, end) kiln_flatten_dims_at(__FILE__, __LINE__, t, start, end)
#define kiln_slice(t, dim, start, stop, step) kiln_slice_at(__FILE__, __LINE__, t, dim, start, stop, step)
#define kiln_select(t, dim, index) kiln_select_at(__FILE__, __LINE__, t, dim, index)
#define kiln_flip(t, ...) kiln_flip_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_pad(t, ...) kiln_pad_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_cat(n, ts, dim) kiln_cat_at(__FILE__, __LINE__, n, ts, dim)
#define kiln_stack(n, ts, dim) kiln_stack_at(__FILE__, __LINE__, n, ts, dim)
#define kiln_index(t, index) kiln_index_at(__FILE__, __LINE__, t, index)

/* ---- reductions (PyTorch semantics) -------------------------------------
 * kiln_sum(t) reduces every element to a 0-dim tensor; kiln_sum_dims(t,
 * KILN_DIMS(0, -1), keepdim) reduces the listed dims. bool and integer sums
 * and products are int64; mean/var/std of an integer tensor is an error (as
 * in PyTorch). argmax/argmin give int64 indices of the first extreme (NaN
 * counts as the extreme); over all elements the index is into the flattened
 * tensor. var/std: unbiased divides by n - 1. */
#define KILN_REDUCE_(name) \
  kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *t); \
  kiln_tensor *kiln_##name##_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int keepdim);
KILN_REDUCE_(sum) KILN_REDUCE_(mean) KILN_REDUCE_(prod) KILN_REDUCE_(max) KILN_REDUCE_(min)
KILN_REDUCE_(any) KILN_REDUCE_(all)
#undef KILN_REDUCE_
kiln_tensor *kiln_argmax_at(const char *f, int l, kiln_tensor *t);
kiln_tensor *kiln_argmin_at(const char *f, int l, kiln_tensor *t);
kiln_tensor *kiln_argmax_dim_at(const char *f, int l, kiln_tensor *t, int64_t dim, int keepdim);
kiln_tensor *kiln_argmin_dim_at(const char *f, int l, kiln_tensor *t, int64_t dim, int keepdim);
kiln_tensor *kiln_var_at(const char *f, int l, kiln_tensor *t, int unbiased);
kiln_tensor *kiln_std_at(const char *f, int l, kiln_tensor *t, int unbiased);
kiln_tensor *kiln_var_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int unbiased, int keepdim);
kiln_tensor *kiln_std_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int unbiased, int keepdim);
/* Compositions the fuser turns into row-wise kernels. weight and bias of
 * layer_norm may be NULL; it normalizes the last nlast dims. */
kiln_tensor *kiln_softmax_at(const char *f, int l, kiln_tensor *t, int64_t dim);
kiln_tensor *kiln_log_softmax_at(const char *f, int l, kiln_tensor *t, int64_t dim);
kiln_tensor *kiln_layer_norm_at(const char *f, int l, kiln_tensor *x, int nlast, kiln_tensor *weight,
                                kiln_tensor *bias, double eps);

#define kiln_sum(t) kiln_sum_at(__FILE__, __LINE__, t)
#define kiln_mean(t) kiln_mean_at(__FILE__, __LINE__, t)
#define kiln_prod(t) kiln_prod_at(__FILE__, __LINE__, t)
#define kiln_max(t) kiln_max_at(__FILE__, __LINE__, t)
#define kiln_min(t) kiln_min_at(__FILE__, __LINE__, t)
#define kiln_any(t) kiln_any_at(__FILE__, __LINE__, t)
#define kiln_all(t) kiln_all_at(__FILE__, __LINE__, t)
#define kiln_sum_dims(t, ...) kiln_sum_dims_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_mean_dims(t, ...) kiln_mean_dims_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_prod_dims(t, ...) kiln_prod_dims_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_max_dims(t, ...) kiln_max_dims_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_min_dims(t, ...) kiln_min_dims_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_any_dims(t, ...) kiln_any_dims_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_all_dims(t, ...) kiln_all_dims_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_argmax(t) kiln_argmax_at(__FILE__, __LINE__, t)
#define kiln_argmin(t) kiln_argmin_at(__FILE__, __LINE__, t)
#define kiln_argmax_dim(t, dim, keepdim) kiln_argmax_dim_at(__FILE__, __LINE__, t, dim, keepdim)
#define kiln_argmin_dim(t, dim, keepdim) kiln_argmin_dim_at(__FILE__, __LINE__, t, dim, keepdim)
#define kiln_var(t, unbiased) kiln_var_at(__FILE__, __LINE__, t, unbiased)
#define kiln_std(t, unbiased) kiln_std_at(__FILE__, __LINE__, t, unbiased)
#define kiln_var_dims(t, ...) kiln_var_dims_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_std_dims(t, ...) kiln_std_dims_at(__FILE__, __LINE__, t, __VA_ARGS__)
#define kiln_softmax(t, dim) kiln_softmax_at(__FILE__, __LINE__, t, dim)
#define kiln_log_softmax(t, dim) kiln_log_softmax_at(__FILE__, __LINE__, t, dim)
#define kiln_layer_norm(x, nlast, w, b, eps) kiln_layer_norm_at(__FILE__, __LINE__, x, nlast, w, b, eps)

/* ---- matrix products (PyTorch's matmul rules) ----------------------------
 * matmul: 1-D x 1-D is a dot product, a 1-D operand is promoted to a matrix
 * and the added dim removed afterwards, batch dims broadcast. Both operands
 * must have the same floating dtype. mm: 2-D only; dot: 1-D only;
 * linear(x, W, b) = x @ W^T + b (b may be NULL). */
kiln_tensor *kiln_matmul_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln_mm_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln_dot_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln_linear_at(const char *f, int l, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b);
#define kiln_matmul(a, b) kiln_matmul_at(__FILE__, __LINE__, a, b)
#define kiln_mm(a, b) kiln_mm_at(__FILE__, __LINE__, a, b)
#define kiln_dot(a, b) kiln_dot_at(__FILE__, __LINE__, a, b)
#define kiln_linear(x, w, b) kiln_linear_at(__FILE__, __LINE__, x, w, b)

/* ---- results and info ---------------------------------------------------- */
kiln_status kiln_realize_at(const char *f, int l, kiln_tensor *t);
kiln_status kiln_realize_n_at(const char *f, int l, int n, kiln_tensor *const *ts);
/* Copies the (realized) tensor into dst as contiguous row-major values of its
 * dtype; dst_bytes must be at least numel * dtype size. */
kiln_status kiln_copy_to_host_at(const char *f, int l, kiln_tensor *t, void *dst, size_t dst_bytes);
/* The value of a one-element tensor as a double (NaN and an error otherwise). */
double kiln_item_at(const char *f, int l, kiln_tensor *t);
/* Realizes t and returns its contiguous host data, valid while t lives (NULL
 * and an error on failure). CPU tensors only: copy a GPU tensor with kiln_cpu
 * first. */
const void *kiln_data_at(const char *f, int l, kiln_tensor *t);
/* PyTorch's format: tensor([[1., 2.],\n        [3., 4.]]). Caller frees. */
char *kiln_to_string_at(const char *f, int l, kiln_tensor *t);
kiln_status kiln_print_at(const char *f, int l, kiln_tensor *t);

#define kiln_realize(t) kiln_realize_at(__FILE__, __LINE__, t)
#define kiln_realize_n(n, ts) kiln_realize_n_at(__FILE__, __LINE__, n, ts)
#define kiln_copy_to_host(t, dst, bytes) kiln_copy_to_host_at(__FILE__, __LINE__, t, dst, bytes)
#define kiln_item(t) kiln_item_at(__FILE__, __LINE__, t)
#define kiln_data(t) kiln_data_at(__FILE__, __LINE__, t)
#define kiln_to_string(t) kiln_to_string_at(__FILE__, __LINE__, t)
#define kiln_print(t) kiln_print_at(__FILE__, __LINE__, t)

/* Draws t's pending graph as kiln_realize would compile it: after the graph
 * passes, partitioned into the kernels realize would launch (in launch
 * order, named as KILN_DEBUG=1 names them). Nothing is compiled or run and
 * t stays pending. KILN_FMT_TEXT: the graph as KILN_DEBUG=4 prints it, then
 * one line per kernel with the nodes it stores and those it inlines.
 * KILN_FMT_DOT: a Graphviz digraph (`dot -Tsvg`) with each kernel a cluster
 * of the nodes it computes, buffers and sources outside, edges from source
 * to consumer, nodes labelled "op dtype(shape)" and the file:line that built
 * them. A realized tensor is one buffer node. KILN_ERR_ARG for a NULL t or
 * out, an unknown format or a failed write; an error tensor gives its status. */
typedef enum { KILN_FMT_TEXT, KILN_FMT_DOT } kiln_graph_format;
kiln_status kiln_dump_graph_at(const char *f, int l, kiln_tensor *t, FILE *out, kiln_graph_format fmt);
#define kiln_dump_graph(t, out, fmt) kiln_dump_graph_at(__FILE__, __LINE__, t, out, fmt)

/* ---- devices ---------------------------------------------------------------
 * kiln_to(t, dev): t's value on dev, a lazy node like any op: realize copies
 * it (host <-> GPU) where the graph needs it, and ops on the result run on
 * dev. To t's own device it is t (a new handle). To a CUDA device that
 * cannot be used, an error node (KILN_ERR_DEVICE, "to: CUDA not available:
 * <reason>"). kiln_cpu(t) = kiln_to(t, cpu): the way back before kiln_data. */
kiln_tensor *kiln_to_at(const char *f, int l, kiln_tensor *t, kiln_device dev);
kiln_tensor *kiln_cpu_at(const char *f, int l, kiln_tensor *t);
#define kiln_to(t, dev) kiln_to_at(__FILE__, __LINE__, t, dev)
#define kiln_cpu(t) kiln_cpu_at(__FILE__, __LINE__, t)

/* Info: valid on any non-error handle without realizing it. */
int kiln_ndim(kiln_tensor *t);
const int64_t *kiln_shape(kiln_tensor *t);
int64_t kiln_size(kiln_tensor *t, int dim);   /* negative dims count from the end */
int64_t kiln_numel(kiln_tensor *t);
kiln_dtype kiln_dtype_of(kiln_tensor *t);
kiln_device kiln_device_of(kiln_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
