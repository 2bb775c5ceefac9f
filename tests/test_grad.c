/* test_grad.c: kiln_grad (frontend/grad.c, ir/grad.def) checked by the
 * gradient checker (util/gradcheck.c: central differences in f64, then
 * eager mode, strided inputs and f32) over a table of expressions that
 * together reach every op with a derivative rule; PyTorch's conventions at
 * ties and kinks by hand-worked numbers; second order (Hessian-vector
 * products); histories of realized tensors; detach; and the errors. */
#include "check_main.h"
#include "frontend/frontend.h"
#include "util/gradcheck.h"
#include "util/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the expressions ------------------------------------------------------ */
#define F(name, expr) \
  static kiln_tensor *name(kiln_tensor *const *x, const void *ctx) { (void)ctx; return expr; }
#define I64(...) kiln_from_data(((const int64_t[]){__VA_ARGS__}), KILN_I64, KILN_SHAPE(KILN_NARGS_(__VA_ARGS__)))
#define BOOLS(shape, ...) kiln_from_data(((const uint8_t[]){__VA_ARGS__}), KILN_BOOL, shape)

/* elementwise */
F(f_neg, kiln_neg(x[0]))
F(f_abs, kiln_abs(x[0]))
F(f_exp, kiln_exp(x[0]))
F(f_log, kiln_log(x[0]))
F(f_sqrt, kiln_sqrt(x[0]))
F(f_rsqrt, kiln_rsqrt(x[0]))
F(f_sin, kiln_sin(x[0]))
F(f_cos, kiln_cos(x[0]))
F(f_tanh, kiln_tanh(x[0]))
F(f_sigmoid, kiln_sigmoid(x[0]))
F(f_relu, kiln_relu(x[0]))
F(f_gelu, kiln_gelu(x[0]))
F(f_gelu_tanh, kiln_gelu_tanh(x[0]))
F(f_silu, kiln_silu(x[0]))
F(f_rounding, kiln_add(kiln_add(kiln_floor(x[0]), kiln_ceil(x[0])), kiln_add(kiln_round(x[0]), kiln_mul(kiln_sign(x[0]), kiln_trunc(x[0])))))
F(f_frac, kiln_frac(x[0]))
F(f_reciprocal, kiln_reciprocal(x[0]))
F(f_erf, kiln_add(kiln_erf(x[0]), kiln_erfc(kiln_muls(x[0], 0.5))))
F(f_expm1, kiln_expm1(x[0]))
F(f_log1p, kiln_log1p(x[0]))
F(f_logs, kiln_add(kiln_log2(x[0]), kiln_log10(x[0])))
F(f_exp2, kiln_exp2(x[0]))
F(f_tan, kiln_tan(x[0]))
F(f_asin, kiln_add(kiln_asin(x[0]), kiln_acos(kiln_muls(x[0], 0.5))))
F(f_atan, kiln_atan(x[0]))
F(f_hyperbolic, kiln_add(kiln_sinh(x[0]), kiln_cosh(x[0])))
F(f_asinh, kiln_asinh(x[0]))
F(f_acosh, kiln_acosh(x[0]))
F(f_atanh, kiln_atanh(x[0]))
F(f_activations, kiln_add(kiln_add(kiln_elu(x[0], 1.5), kiln_softplus(x[0], 2, 20)),
                          kiln_add(kiln_mish(x[0]), kiln_add(kiln_logsigmoid(x[0]), kiln_leaky_relu(x[0], 0.1)))))
F(f_hard, kiln_add(kiln_add(kiln_hardtanh(x[0], -0.5, 0.5), kiln_hardswish(x[0])),
                   kiln_add(kiln_hardsigmoid(x[0]), kiln_add(kiln_softsign(x[0]), kiln_relu6(kiln_muls(x[0], 4))))))
F(f_selu, kiln_add(kiln_selu(x[0]), kiln_celu(x[0], 0.7)))
F(f_add, kiln_add(x[0], x[1]))
F(f_sub, kiln_sub(x[0], x[1]))
F(f_mul, kiln_mul(x[0], x[1]))
F(f_div, kiln_div(x[0], x[1]))
F(f_pow, kiln_pow(x[0], x[1]))
F(f_pows, kiln_add(kiln_pows(x[0], 3), kiln_pows(x[0], 0.5)))
F(f_maximum, kiln_add(kiln_maximum(x[0], x[1]), kiln_minimum(x[0], x[1])))
F(f_atan2, kiln_atan2(x[0], x[1]))
F(f_logaddexp, kiln_logaddexp(x[0], x[1]))
F(f_remainder, kiln_add(kiln_remainder(x[0], x[1]), kiln_fmod(x[0], x[1])))
F(f_rounding_div, kiln_add(kiln_floor_divide(x[0], x[1]), kiln_trunc_divide(x[0], x[1])))
F(f_copysign, kiln_copysign(x[0], x[1]))
F(f_where, kiln_where(kiln_gt(x[0], x[1]), kiln_mul(x[0], x[1]), kiln_exp(x[1])))
F(f_clamp, kiln_add(kiln_clamp(x[0], -0.5, 0.5), kiln_clamp_tensor(x[0], x[1], x[2])))
F(f_masked_fill, kiln_masked_fill(x[0], kiln_gts(x[0], 0.3), 2))
F(f_lerp, kiln_add(kiln_lerp(x[0], x[1], x[2]), kiln_lerps(x[0], x[1], 0.3)))
F(f_nan_to_num, kiln_nan_to_num(kiln_log(x[0]), 0, 1e30, -1e30))
/* reductions */
F(f_sum, kiln_add(kiln_sum_dims(x[0], KILN_DIMS(1), 0), kiln_sum(x[0])))
F(f_mean, kiln_add(kiln_mean_dims(x[0], KILN_DIMS(0, 2), 1), kiln_mean(x[0])))
F(f_prod, kiln_add(kiln_prod_dims(x[0], KILN_DIMS(1), 1), kiln_prod(x[0])))
F(f_max, kiln_add(kiln_max_dims(x[0], KILN_DIMS(1), 1), kiln_add(kiln_max(x[0]), kiln_min_dims(x[0], KILN_DIMS(0), 0))))
F(f_min, kiln_min(x[0]))
F(f_var, kiln_add(kiln_var_correction(x[0], KILN_DIMS(1), 0, 1), kiln_std_correction(x[0], KILN_DIMS(0), 2, 0)))
F(f_logsumexp, kiln_logsumexp(x[0], KILN_DIMS(-1), 0))
F(f_norms, kiln_add(kiln_add(kiln_vector_norm(x[0], 2, KILN_DIMS(1), 0), kiln_vector_norm(x[0], 3, KILN_DIMS(1), 0)),
                    kiln_add(kiln_vector_norm(x[0], 1, KILN_DIMS(1), 0), kiln_vector_norm(x[0], INFINITY, KILN_DIMS(1), 0))))
F(f_matrix_norm, kiln_matrix_norm(x[0], "fro", 0, 1, 0))
F(f_normalize, kiln_normalize(x[0], 2, 1, 1e-12))
F(f_cosine, kiln_cosine_similarity(x[0], x[1], 1, 1e-8))
F(f_trace, kiln_trace(x[0]))
F(f_softmax, kiln_add(kiln_softmax(x[0], -1), kiln_log_softmax(x[0], 0)))
F(f_layer_norm, kiln_layer_norm(x[0], 1, x[1], x[2], 1e-5))
F(f_rms_norm, kiln_rms_norm(x[0], 1, x[1], 1e-6))
F(f_group_norm, kiln_group_norm(x[0], 2, x[1], x[2], 1e-5))
F(f_batch_norm, kiln_batch_norm(x[0], x[1], x[2], x[3], NULL, 1e-5))
/* scans and sorting */
F(f_cumsum, kiln_cumsum(x[0], 1))
F(f_cumprod, kiln_cumprod(x[0], 1))
F(f_logcumsumexp, kiln_logcumsumexp(x[0], 0))
static kiln_tensor *f_cummax(kiln_tensor *const *x, const void *ctx) {
  (void)ctx;
  kiln_tensor *a, *b;
  kiln_cummax(x[0], 1, &a, NULL);
  kiln_cummin(x[0], 0, &b, NULL);
  return kiln_add(a, b);
}
static kiln_tensor *f_sort(kiln_tensor *const *x, const void *ctx) {
  (void)ctx;
  kiln_tensor *a, *b;
  kiln_sort(x[0], 1, 1, 0, &a, NULL);
  kiln_topk(x[0], 2, 0, 1, 1, &b, NULL);
  return kiln_add(kiln_sum_dims(a, KILN_DIMS(0), 0), kiln_sum_dims(kiln_mul(b, b), KILN_DIMS(0), 0));
}
/* movement */
F(f_reshape, kiln_mul(kiln_reshape(x[0], KILN_SHAPE(2, 6)), kiln_reshape(kiln_exp(x[0]), KILN_SHAPE(2, 6))))
F(f_permute, kiln_mul(kiln_permute(x[0], KILN_DIMS(2, 0, 1)), kiln_arange(0, 4, 1)))
F(f_expand, kiln_mul(kiln_expand(x[0], KILN_SHAPE(3, 2, 4)), kiln_arange(0, 4, 1)))
F(f_slice, kiln_add(kiln_slice(x[0], 1, 1, 4, 1), kiln_mul(kiln_slice(x[0], 1, 0, 5, 2), kiln_slice(x[0], 1, 2, 5, 1))))
F(f_select, kiln_add(kiln_sum(kiln_mul(kiln_select(x[0], 0, 1), kiln_select(x[0], 0, 2))), kiln_sum(kiln_exp(kiln_select(x[0], 1, 3)))))
F(f_flip, kiln_mul(kiln_flip(x[0], KILN_DIMS(0, 1)), x[0]))
F(f_pad, kiln_add(kiln_sum(kiln_mul(kiln_pad(x[0], 4, ((const int64_t[]){1, 2, -1, 1}), 0.5), kiln_arange(0, 7, 1))),
                  kiln_sum(kiln_exp(kiln_pad(x[0], 2, ((const int64_t[]){-1, 1}), 0)))))
F(f_pad_modes, kiln_add(kiln_pad_reflect(x[0], 2, ((const int64_t[]){2, 1})),
                        kiln_mul(kiln_pad_replicate(x[0], 2, ((const int64_t[]){2, 1})), kiln_pad_circular(x[0], 2, ((const int64_t[]){2, 1})))))
F(f_cat, kiln_cat(3, ((kiln_tensor *[]){x[0], kiln_exp(x[1]), x[0]}), 1))
F(f_stack, kiln_stack(2, ((kiln_tensor *[]){x[0], kiln_sin(x[0])}), 1))
static kiln_tensor *f_split(kiln_tensor *const *x, const void *ctx) {
  (void)ctx;
  kiln_tensor *p[3], *q[2];
  kiln_split(x[0], 2, 1, 3, p);
  kiln_unbind(x[0], 0, 2, q);
  return kiln_add(kiln_sum(kiln_mul(p[0], p[1])), kiln_sum(kiln_mul(q[0], kiln_exp(q[1]))));
}
F(f_repeat, kiln_add(kiln_sum(kiln_mul(kiln_repeat(x[0], KILN_SHAPE(2, 1, 2)), kiln_arange(0, 8, 1))),
                     kiln_sum(kiln_mul(kiln_repeat_interleave(x[0], 2), kiln_arange(0, 16, 1)))))
F(f_tile, kiln_mul(kiln_tile(x[0], KILN_SHAPE(1, 2)), kiln_arange(0, 8, 1)))
F(f_roll, kiln_mul(kiln_roll(x[0], KILN_SHAPE(1, -2), KILN_DIMS(0, 1)), kiln_arange(0, 4, 1)))
F(f_diagonal, kiln_add(kiln_sum(kiln_diagonal(x[0], 1, 0, 1)), kiln_sum(kiln_mul(kiln_diag(kiln_diagonal(x[0], 0, 0, 1), 0), kiln_exp(x[1])))))
F(f_tri, kiln_add(kiln_tril(x[0], 0), kiln_mul(kiln_triu(x[0], 1), x[0])))
F(f_index, kiln_mul(kiln_index(x[0], "1:, ::2"), kiln_index(x[0], ":2, 1::2")))
/* indexing */
F(f_gather, kiln_gather(x[0], 1, kiln_reshape(I64(0, 2, 2, 1, 0, 0), KILN_SHAPE(2, 3))))
F(f_scatter, kiln_scatter(x[0], 1, kiln_reshape(I64(3, 0, 1, 2), KILN_SHAPE(2, 2)), x[1]))
F(f_scatter_add, kiln_scatter_add(x[0], 1, kiln_reshape(I64(3, 3, 1, 2), KILN_SHAPE(2, 2)), x[1]))
F(f_scatter_prod, kiln_scatter_reduce(x[0], 1, kiln_reshape(I64(3, 3, 1, 2), KILN_SHAPE(2, 2)), x[1], "prod", 1))
F(f_scatter_mean, kiln_add(kiln_scatter_reduce(x[0], 1, kiln_reshape(I64(3, 3, 1, 2), KILN_SHAPE(2, 2)), x[1], "mean", 0),
                           kiln_scatter_reduce(x[0], 1, kiln_reshape(I64(0, 3, 1, 1), KILN_SHAPE(2, 2)), x[1], "sum", 0)))
F(f_scatter_amax, kiln_add(kiln_scatter_reduce(x[0], 1, kiln_reshape(I64(3, 3, 1, 2), KILN_SHAPE(2, 2)), x[1], "amax", 1),
                           kiln_scatter_reduce(x[0], 1, kiln_reshape(I64(3, 0, 1, 1), KILN_SHAPE(2, 2)), x[1], "amin", 0)))
F(f_index_select, kiln_index_select(x[0], 0, I64(2, 0, 2)))
F(f_take, kiln_add(kiln_take(x[0], I64(5, 0, 5, -1)), kiln_sum(kiln_take_along_dim(x[0], kiln_reshape(I64(1, 1, 0, 2), KILN_SHAPE(1, 4)), 0))))
F(f_index_tensors, kiln_index_tensors(x[0], 2, ((kiln_tensor *[]){I64(0, 2, 0), I64(1, 3, 1)})))
F(f_masked_select, kiln_masked_select(x[0], BOOLS(KILN_SHAPE(2, 3), 1, 0, 1, 1, 0, 1)))
F(f_embedding, kiln_embedding(I64(2, 0, 2, 3), x[0]))
/* products */
F(f_matmul, kiln_matmul(x[0], x[1]))
F(f_matmul_vec, kiln_add(kiln_matmul(x[0], x[1]), kiln_dot(x[1], x[1])))
F(f_mm, kiln_mm(x[0], kiln_transpose(x[1], 0, 1)))
F(f_linear, kiln_gelu(kiln_linear(x[0], x[1], x[2])))
F(f_einsum, kiln_einsum("bij,bjk->bik", 2, ((kiln_tensor *[]){x[0], x[1]})))
F(f_outer, kiln_add(kiln_outer(x[0], x[1]), kiln_cross(kiln_reshape(x[0], KILN_SHAPE(1, 3)), kiln_reshape(x[1], KILN_SHAPE(1, 3)), -1)))
/* network blocks */
F(f_conv2d, kiln_conv2d(x[0], x[1], x[2], 1, ((const int64_t[]){2}), 1, ((const int64_t[]){1}), 1, ((const int64_t[]){1}), 1))
F(f_conv2d_groups, kiln_conv2d(x[0], x[1], NULL, 1, ((const int64_t[]){1}), 2, ((const int64_t[]){0, 1}), 1, ((const int64_t[]){2}), 2))
F(f_depthwise, kiln_conv2d(x[0], x[1], NULL, 1, ((const int64_t[]){1}), 1, ((const int64_t[]){1}), 1, ((const int64_t[]){1}), 2))
F(f_conv1d, kiln_conv1d(x[0], x[1], x[2], 1, ((const int64_t[]){2}), 1, ((const int64_t[]){1}), 1, ((const int64_t[]){1}), 1))
F(f_conv_transpose, kiln_conv_transpose2d(x[0], x[1], x[2], 1, ((const int64_t[]){2}), 1, ((const int64_t[]){1}), 1,
                                          ((const int64_t[]){1}), 1, 1, ((const int64_t[]){1})))
F(f_max_pool, kiln_max_pool2d(x[0], 1, ((const int64_t[]){2}), 1, ((const int64_t[]){1}), 1, ((const int64_t[]){1}), 0, NULL, 0))
F(f_avg_pool, kiln_add(kiln_sum(kiln_avg_pool2d(x[0], 1, ((const int64_t[]){3}), 1, ((const int64_t[]){2}), 1, ((const int64_t[]){1}), 0, 0)),
                       kiln_sum(kiln_mul(kiln_adaptive_avg_pool2d(x[0], 2, ((const int64_t[]){2, 3})), kiln_arange(0, 3, 1)))))
F(f_interpolate, kiln_add(kiln_sum(kiln_mul(kiln_interpolate(x[0], 2, ((const int64_t[]){5, 7}), "bilinear", 0), kiln_arange(0, 7, 1))),
                          kiln_sum(kiln_mul(kiln_interpolate(x[0], 2, ((const int64_t[]){6, 3}), "nearest", 0), kiln_arange(0, 3, 1)))))
F(f_attention, kiln_scaled_dot_product_attention(x[0], x[1], x[2], NULL, 0, 0, 0))
F(f_attention_causal, kiln_scaled_dot_product_attention(x[0], x[1], x[2], NULL, 1, 0.5, 0))
F(f_attention_mask, kiln_scaled_dot_product_attention(x[0], x[1], x[2], x[3], 0, 0, 0))
F(f_attention_bool, kiln_scaled_dot_product_attention(x[0], x[1], x[2], BOOLS(KILN_SHAPE(3, 4), 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0), 0, 0, 0))
F(f_attention_gqa, kiln_scaled_dot_product_attention(x[0], x[1], x[2], NULL, 1, 0, 1))
/* losses */
F(f_cross_entropy, kiln_cross_entropy(x[0], I64(2, 0, 3), NULL, "mean", -100, 0))
F(f_cross_entropy_full, kiln_cross_entropy(x[0], I64(2, -100, 3), x[1], "sum", -100, 0.1))
F(f_cross_entropy_probs, kiln_cross_entropy(x[0], kiln_softmax(x[1], 1), NULL, "mean", -100, 0))
F(f_nll, kiln_nll_loss(kiln_log_softmax(x[0], 1), I64(1, 0, 3), NULL, "none", -100))
F(f_mse, kiln_add(kiln_mse_loss(x[0], x[1], "mean"), kiln_l1_loss(x[0], x[1], "sum")))
F(f_bce, kiln_binary_cross_entropy(x[0], x[1], NULL, "mean"))
F(f_bce_logits, kiln_binary_cross_entropy_with_logits(x[0], x[1], NULL, x[2], "mean"))
/* casts: an f64 graph that goes through f32 (the f32 mode sees f16 too) */
F(f_cast, kiln_mul(kiln_cast(kiln_cast(x[0], KILN_F16), KILN_F32), x[0]))
/* empty and size-1 dims */
F(f_empty, kiln_add(kiln_sum_dims(kiln_exp(x[0]), KILN_DIMS(0), 0), kiln_mean(x[1])))

#define IN(lo, hi, ...) {KILN_NARGS_(__VA_ARGS__), {__VA_ARGS__}, lo, hi, 0}
#define INZ(zeros, lo, hi, ...) {KILN_NARGS_(__VA_ARGS__), {__VA_ARGS__}, lo, hi, zeros}
#define IN0(lo, hi) {0, {0}, lo, hi, 0}

typedef struct {
  const char *name;
  gc_fn fn;
  int n;
  gc_input in[4];
  unsigned modes;      /* 0: GC_ALL */
} gcase;

/* f32 cannot follow the steep or cancelling ones (f32 mode left out). */
#define NO_F32 (GC_F64 | GC_EAGER | GC_VIEWS)
static const gcase cases[] = {
  {"neg", f_neg, 1, {IN(-2, 2, 3, 4)}, 0},
  {"abs", f_abs, 1, {IN(-2, 2, 3, 4)}, 0},
  {"exp", f_exp, 1, {IN(-2, 2, 3, 4)}, 0},
  {"log", f_log, 1, {IN(0.2, 3, 3, 4)}, 0},
  {"sqrt", f_sqrt, 1, {IN(0.2, 3, 3, 4)}, 0},
  {"rsqrt", f_rsqrt, 1, {IN(0.2, 3, 3, 4)}, 0},
  {"sin", f_sin, 1, {IN(-3, 3, 3, 4)}, 0},
  {"cos", f_cos, 1, {IN(-3, 3, 3, 4)}, 0},
  {"tanh", f_tanh, 1, {IN(-2, 2, 3, 4)}, 0},
  {"sigmoid", f_sigmoid, 1, {IN(-3, 3, 3, 4)}, 0},
  {"relu", f_relu, 1, {IN(-2, 2, 3, 4)}, 0},
  {"gelu", f_gelu, 1, {IN(-3, 3, 3, 4)}, 0},
  {"gelu_tanh", f_gelu_tanh, 1, {IN(-3, 3, 3, 4)}, 0},
  {"silu", f_silu, 1, {IN(-3, 3, 3, 4)}, 0},
  {"rounding", f_rounding, 1, {IN(-3, 3, 3, 4)}, 0},
  {"frac", f_frac, 1, {IN(-3, 3, 3, 4)}, 0},
  {"reciprocal", f_reciprocal, 1, {IN(0.5, 3, 3, 4)}, 0},
  {"erf", f_erf, 1, {IN(-2, 2, 3, 4)}, 0},
  {"expm1", f_expm1, 1, {IN(-2, 2, 3, 4)}, 0},
  {"log1p", f_log1p, 1, {IN(-0.5, 3, 3, 4)}, 0},
  {"log2_log10", f_logs, 1, {IN(0.2, 3, 3, 4)}, 0},
  {"exp2", f_exp2, 1, {IN(-2, 2, 3, 4)}, 0},
  {"tan", f_tan, 1, {IN(-1, 1, 3, 4)}, 0},
  {"asin_acos", f_asin, 1, {IN(-0.9, 0.9, 3, 4)}, 0},
  {"atan", f_atan, 1, {IN(-3, 3, 3, 4)}, 0},
  {"sinh_cosh", f_hyperbolic, 1, {IN(-2, 2, 3, 4)}, 0},
  {"asinh", f_asinh, 1, {IN(-3, 3, 3, 4)}, 0},
  {"acosh", f_acosh, 1, {IN(1.2, 3, 3, 4)}, 0},
  {"atanh", f_atanh, 1, {IN(-0.9, 0.9, 3, 4)}, 0},
  {"activations", f_activations, 1, {IN(-3, 3, 3, 4)}, 0},
  {"hard_activations", f_hard, 1, {IN(-4, 4, 4, 5)}, 0},
  {"selu_celu", f_selu, 1, {IN(-3, 3, 3, 4)}, 0},
  {"add_broadcast", f_add, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 4)}, 0},
  {"sub_broadcast", f_sub, 2, {IN(-2, 2, 3, 1), IN(-2, 2, 1, 4)}, 0},
  {"mul_broadcast", f_mul, 2, {IN(-2, 2, 2, 3, 4), IN(-2, 2, 3, 1)}, 0},
  {"mul_zero_dim", f_mul, 2, {IN(-2, 2, 3, 4), IN0(-2, 2)}, 0},
  {"div", f_div, 2, {IN(-2, 2, 3, 4), IN(0.5, 2, 3, 4)}, 0},
  {"pow", f_pow, 2, {IN(0.5, 2, 3, 4), IN(-2, 2, 3, 4)}, 0},
  {"pow_number", f_pows, 1, {IN(0.5, 2, 3, 4)}, 0},
  {"maximum_minimum", f_maximum, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 4)}, 0},
  {"atan2", f_atan2, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 3, 4)}, 0},
  {"logaddexp", f_logaddexp, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 3, 4)}, 0},
  {"remainder_fmod", f_remainder, 2, {IN(-5, 5, 3, 4), IN(0.7, 1.9, 3, 4)}, 0},
  {"rounding_divisions", f_rounding_div, 2, {IN(-5, 5, 3, 4), IN(0.7, 1.9, 3, 4)}, 0},
  {"copysign", f_copysign, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 3, 4)}, 0},
  {"where", f_where, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 3, 4)}, 0},
  {"clamp", f_clamp, 3, {IN(-2, 2, 3, 4), IN(-1, 0, 3, 4), IN(0, 1, 4)}, 0},
  {"masked_fill", f_masked_fill, 1, {IN(-2, 2, 3, 4)}, 0},
  {"lerp", f_lerp, 3, {IN(-2, 2, 3, 4), IN(-2, 2, 3, 4), IN(0, 1, 4)}, 0},
  {"nan_to_num", f_nan_to_num, 1, {IN(0.2, 2, 3, 4)}, 0},
  {"sum", f_sum, 1, {IN(-2, 2, 3, 4)}, 0},
  {"mean", f_mean, 1, {IN(-2, 2, 2, 3, 4)}, 0},
  {"prod", f_prod, 1, {IN(0.5, 1.5, 3, 4)}, 0},
  {"prod_one_zero", f_prod, 1, {INZ(1, 0.5, 1.5, 3, 4)}, NO_F32},
  {"prod_two_zeros", f_prod, 1, {INZ(3, 0.5, 1.5, 2, 3)}, NO_F32},
  {"max_min", f_max, 1, {IN(-2, 2, 3, 4)}, 0},
  {"min_all", f_min, 1, {IN(-2, 2, 3, 4)}, 0},
  {"var_std", f_var, 1, {IN(-2, 2, 3, 5)}, 0},
  {"logsumexp", f_logsumexp, 1, {IN(-2, 2, 3, 4)}, 0},
  {"norms", f_norms, 1, {IN(-2, 2, 3, 4)}, 0},
  {"matrix_norm", f_matrix_norm, 1, {IN(-2, 2, 3, 4)}, 0},
  {"normalize", f_normalize, 1, {IN(-2, 2, 3, 4)}, 0},
  {"cosine_similarity", f_cosine, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 3, 4)}, 0},
  {"trace", f_trace, 1, {IN(-2, 2, 3, 4)}, 0},
  {"softmax", f_softmax, 1, {IN(-2, 2, 3, 4)}, 0},
  {"layer_norm", f_layer_norm, 3, {IN(-2, 2, 3, 5), IN(0.5, 1.5, 5), IN(-1, 1, 5)}, 0},
  {"rms_norm", f_rms_norm, 2, {IN(-2, 2, 3, 5), IN(0.5, 1.5, 5)}, 0},
  {"group_norm", f_group_norm, 3, {IN(-2, 2, 2, 4, 3), IN(0.5, 1.5, 4), IN(-1, 1, 4)}, 0},
  {"batch_norm", f_batch_norm, 4, {IN(-2, 2, 2, 3, 2), IN(-1, 1, 3), IN(0.5, 2, 3), IN(0.5, 1.5, 3)}, 0},
  {"cumsum", f_cumsum, 1, {IN(-2, 2, 3, 5)}, 0},
  {"cumprod", f_cumprod, 1, {IN(0.5, 1.5, 3, 5)}, 0},
  {"cumprod_zeros", f_cumprod, 1, {INZ(3, 0.5, 1.5, 3, 5)}, NO_F32},
  {"logcumsumexp", f_logcumsumexp, 1, {IN(-2, 2, 4, 3)}, 0},
  {"cummax_cummin", f_cummax, 1, {IN(-2, 2, 3, 5)}, 0},
  {"sort_topk", f_sort, 1, {IN(-2, 2, 3, 5)}, 0},
  {"reshape", f_reshape, 1, {IN(-2, 2, 3, 4)}, 0},
  {"permute", f_permute, 1, {IN(-2, 2, 3, 4, 2)}, 0},
  {"expand", f_expand, 1, {IN(-2, 2, 2, 1)}, 0},
  {"slice", f_slice, 1, {IN(-2, 2, 3, 6)}, 0},
  {"select", f_select, 1, {IN(-2, 2, 3, 4)}, 0},
  {"flip", f_flip, 1, {IN(-2, 2, 3, 4)}, 0},
  {"pad", f_pad, 1, {IN(-2, 2, 3, 4)}, 0},
  {"pad_modes", f_pad_modes, 1, {IN(-2, 2, 2, 3, 4)}, 0},
  {"cat", f_cat, 2, {IN(-2, 2, 3, 2), IN(-2, 2, 3, 3)}, 0},
  {"stack", f_stack, 1, {IN(-2, 2, 3, 4)}, 0},
  {"split_unbind", f_split, 1, {IN(-2, 2, 2, 5)}, 0},
  {"repeat", f_repeat, 1, {IN(-2, 2, 2, 4)}, 0},
  {"tile", f_tile, 1, {IN(-2, 2, 3, 4)}, 0},
  {"roll", f_roll, 1, {IN(-2, 2, 3, 4)}, 0},
  {"diagonal", f_diagonal, 2, {IN(-2, 2, 3, 4), IN(-1, 1, 3, 3)}, 0},
  {"tril_triu", f_tri, 1, {IN(-2, 2, 3, 4)}, 0},
  {"index_string", f_index, 1, {IN(-2, 2, 3, 4)}, 0},
  {"gather", f_gather, 1, {IN(-2, 2, 2, 4)}, 0},
  {"scatter", f_scatter, 2, {IN(-2, 2, 2, 4), IN(-2, 2, 2, 2)}, 0},
  {"scatter_add", f_scatter_add, 2, {IN(-2, 2, 2, 4), IN(-2, 2, 2, 2)}, 0},
  {"scatter_prod", f_scatter_prod, 2, {IN(0.5, 1.5, 2, 4), IN(0.5, 1.5, 2, 2)}, 0},
  {"scatter_mean_sum", f_scatter_mean, 2, {IN(-2, 2, 2, 4), IN(-2, 2, 2, 2)}, 0},
  {"scatter_amax_amin", f_scatter_amax, 2, {IN(-2, 2, 2, 4), IN(-2, 2, 2, 2)}, 0},
  {"index_select", f_index_select, 1, {IN(-2, 2, 3, 4)}, 0},
  {"take", f_take, 1, {IN(-2, 2, 3, 4)}, 0},
  {"index_tensors", f_index_tensors, 1, {IN(-2, 2, 3, 4)}, 0},
  {"masked_select", f_masked_select, 1, {IN(-2, 2, 2, 3)}, 0},
  {"embedding", f_embedding, 1, {IN(-2, 2, 4, 3)}, 0},
  {"matmul", f_matmul, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 4, 5)}, 0},
  {"matmul_batched", f_matmul, 2, {IN(-2, 2, 2, 3, 4), IN(-2, 2, 4, 2)}, 0},
  {"matmul_vector", f_matmul_vec, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 4)}, 0},
  {"mm", f_mm, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 5, 4)}, 0},
  {"linear", f_linear, 3, {IN(-2, 2, 3, 4), IN(-1, 1, 5, 4), IN(-1, 1, 5)}, 0},
  {"einsum", f_einsum, 2, {IN(-2, 2, 2, 3, 4), IN(-2, 2, 2, 4, 2)}, 0},
  {"outer_cross", f_outer, 2, {IN(-2, 2, 3), IN(-2, 2, 3)}, 0},
  {"conv2d", f_conv2d, 3, {IN(-1, 1, 2, 3, 5, 6), IN(-1, 1, 4, 3, 3, 2), IN(-1, 1, 4)}, 0},
  {"conv2d_groups", f_conv2d_groups, 2, {IN(-1, 1, 1, 4, 5, 6), IN(-1, 1, 2, 2, 2, 3)}, 0},
  {"depthwise", f_depthwise, 2, {IN(-1, 1, 1, 2, 4, 5), IN(-1, 1, 2, 1, 3, 3)}, 0},
  {"conv1d", f_conv1d, 3, {IN(-1, 1, 2, 3, 7), IN(-1, 1, 2, 3, 3), IN(-1, 1, 2)}, 0},
  {"conv_transpose2d", f_conv_transpose, 3, {IN(-1, 1, 1, 2, 3, 3), IN(-1, 1, 2, 3, 3, 2), IN(-1, 1, 3)}, 0},
  {"max_pool2d", f_max_pool, 1, {IN(-2, 2, 1, 2, 5, 5)}, 0},
  {"avg_pool2d", f_avg_pool, 1, {IN(-2, 2, 1, 2, 5, 6)}, 0},
  {"interpolate", f_interpolate, 1, {IN(-2, 2, 1, 2, 3, 4)}, 0},
  {"attention", f_attention, 3, {IN(-1, 1, 2, 3, 4), IN(-1, 1, 2, 4, 4), IN(-1, 1, 2, 4, 3)}, 0},
  {"attention_causal", f_attention_causal, 3, {IN(-1, 1, 2, 4, 3), IN(-1, 1, 2, 4, 3), IN(-1, 1, 2, 4, 2)}, 0},
  {"attention_float_mask", f_attention_mask, 4, {IN(-1, 1, 2, 3, 4), IN(-1, 1, 2, 4, 4), IN(-1, 1, 2, 4, 3), IN(-1, 1, 3, 4)}, 0},
  {"attention_bool_mask", f_attention_bool, 3, {IN(-1, 1, 2, 3, 4), IN(-1, 1, 2, 4, 4), IN(-1, 1, 2, 4, 3)}, 0},
  {"attention_gqa", f_attention_gqa, 3, {IN(-1, 1, 4, 3, 2), IN(-1, 1, 2, 3, 2), IN(-1, 1, 2, 3, 2)}, 0},
  {"cross_entropy", f_cross_entropy, 1, {IN(-2, 2, 3, 5)}, 0},
  {"cross_entropy_weights", f_cross_entropy_full, 2, {IN(-2, 2, 3, 5), IN(0.5, 1.5, 5)}, 0},
  {"cross_entropy_probs", f_cross_entropy_probs, 2, {IN(-2, 2, 3, 5), IN(-2, 2, 3, 5)}, 0},
  {"nll_loss", f_nll, 1, {IN(-2, 2, 3, 5)}, 0},
  {"mse_l1", f_mse, 2, {IN(-2, 2, 3, 4), IN(-2, 2, 3, 4)}, 0},
  {"bce", f_bce, 2, {IN(0.1, 0.9, 3, 4), IN(0, 1, 3, 4)}, 0},
  {"bce_with_logits", f_bce_logits, 3, {IN(-2, 2, 3, 4), IN(0, 1, 3, 4), IN(0.5, 2, 4)}, 0},
  {"cast_f16", f_cast, 1, {IN(-2, 2, 3, 4)}, GC_F32},
  {"empty_and_size_one", f_empty, 2, {IN(-2, 2, 0, 3), IN(-2, 2, 1, 1, 3)}, 0},
};

/* ---- the table through the checker ---------------------------------------- */
static unsigned seen[IR_NUM_OPS];

START_TEST(gradcheck_rows) {
  const gcase *c = &cases[_i];
  char why[512] = "";
  bool ok = gc_check(c->fn, NULL, c->n, c->in, c->modes ? c->modes : GC_ALL, 1000 + (uint64_t)_i, seen, why, sizeof why);
  ck_assert_msg(ok, "%s: %s", c->name, why);
}
END_TEST

/* Every op whose rule passes gradients on is reached by some row of the
 * table (the transfer's only on a GPU), and every op of ops.def has its
 * row in grad.def with a kind that fits it. */
START_TEST(every_rule_is_checked) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char why[512];
    gc_check(cases[i].fn, NULL, cases[i].n, cases[i].in, GC_F32, 1, seen, why, sizeof why);
    gc_check(cases[i].fn, NULL, cases[i].n, cases[i].in, 0, 1, seen, why, sizeof why);
  }
  for (int op = 0; op < IR_NUM_OPS; op++) {
    bool flows;
    ck_assert_msg(fe_grad_has_rule((ir_op)op, &flows), "%s has floating results but no derivative rule", ir_ops[op].name);
    ck_assert_msg(!flows || seen[op] || op == IR_TO, "no row of the table reaches %s's rule", ir_ops[op].name);
  }
}
END_TEST

/* ---- conventions, by hand ------------------------------------------------- */
/* The gradient of sum(f(x)) at x, against want. */
static void expect_grad(kiln_tensor *x, kiln_tensor *y, int64_t n, const double *want, const char *what) {
  kiln_tensor *g;
  ck_assert_msg(kiln_grad(kiln_sum(y), NULL, 1, &x, &g) == KILN_OK, "%s: %s", what, kiln_last_error());
  double got[16];
  ck_assert_int_eq(kiln_copy_to_host(kiln_cast(g, KILN_F64), got, sizeof(double) * (size_t)n), KILN_OK);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])), "%s: element %lld is %g, want %g", what,
                  (long long)i, got[i], want[i]);
}
#define EXPECT_GRAD(x, y, what, ...) \
  expect_grad(x, y, KILN_NARGS_(__VA_ARGS__), (const double[]){__VA_ARGS__}, what)

START_TEST(pytorch_conventions) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(((const float[]){-1, 0, 2, 2}), KILN_F32, KILN_SHAPE(4));
  EXPECT_GRAD(x, kiln_relu(x), "relu at 0", 0, 0, 1, 1);
  EXPECT_GRAD(x, kiln_abs(x), "abs at 0", -1, 0, 1, 1);
  kiln_tensor *z = kiln_from_data(((const float[]){0, 1, 4, 4}), KILN_F32, KILN_SHAPE(4));
  EXPECT_GRAD(z, kiln_sqrt(z), "sqrt at 0", INFINITY, 0.5, 0.25, 0.25);
  EXPECT_GRAD(x, kiln_maximum(x, kiln_full(KILN_SHAPE(4), 2, KILN_F32)), "maximum's tie", 0, 0, 0.5, 0.5);
  EXPECT_GRAD(x, kiln_max(x), "max's ties", 0, 0, 0.5, 0.5);
  EXPECT_GRAD(x, kiln_max_dims(x, KILN_DIMS(0), 0), "amax's ties", 0, 0, 0.5, 0.5);
  EXPECT_GRAD(x, kiln_clamp(x, 0, 2), "clamp at its bounds", 0, 1, 1, 1);
  EXPECT_GRAD(x, kiln_where(kiln_gts(x, 0), x, kiln_muls(x, 3)), "where", 3, 3, 1, 1);
  EXPECT_GRAD(x, kiln_mul(kiln_floor(x), x), "floor", -1, 0, 2, 2);
  /* max pooling: the taps tied at a window's maximum share its gradient */
  kiln_tensor *p = kiln_from_data(((const float[]){1, 1, 0, 1}), KILN_F32, KILN_SHAPE(1, 1, 2, 2));
  kiln_tensor *mp = kiln_max_pool2d(p, 1, ((const int64_t[]){2}), 0, NULL, 1, ((const int64_t[]){0}), 1,
                                    ((const int64_t[]){1}), 0);
  kiln_tensor *g;
  ck_assert_int_eq(kiln_grad(kiln_sum(mp), NULL, 1, &p, &g), KILN_OK);
  double got[4], sum = 0;
  ck_assert_int_eq(kiln_copy_to_host(kiln_cast(g, KILN_F64), got, sizeof got), KILN_OK);
  for (int i = 0; i < 4; i++) sum += got[i];
  ck_assert_msg(fabs(sum - 1) < 1e-6 && got[2] == 0, "max pooling's gradient %g %g %g %g", got[0], got[1], got[2], got[3]);
  /* sort and cummax send it to where their values came from */
  kiln_tensor *s = kiln_from_data(((const double[]){3, 1, 2}), KILN_F64, KILN_SHAPE(3)), *v;
  kiln_topk(s, 1, 0, 1, 1, &v, NULL);
  EXPECT_GRAD(s, v, "topk", 1, 0, 0);
  kiln_cummax(s, 0, &v, NULL);
  EXPECT_GRAD(s, v, "cummax", 3, 0, 0);
  kiln_scope_end();
}
END_TEST

/* f16 values: the gradient is summed in f32 and rounded once. */
START_TEST(half_gradients_sum_in_f32) {
  kiln_scope_begin();
  uint16_t one = 0x3c00;   /* f16 1.0 */
  kiln_tensor *x = kiln_from_data(&one, KILN_F16, KILN_SHAPE(1)), *y = x, *g;
  for (int i = 0; i < 2048; i++) y = kiln_add(y, kiln_muls(x, 1.0 / 1024));   /* 2048 terms of 2^-10 each */
  ck_assert_int_eq(kiln_grad(kiln_sum(y), NULL, 1, &x, &g), KILN_OK);
  ck_assert_int_eq(kiln_dtype_of(g), KILN_F16);
  ck_assert_double_eq(kiln_item(g), 3.0);   /* summed in f16, 1 + 2048 * 2^-10 stops growing at 2 */
  kiln_scope_end();
}
END_TEST

/* ---- second order: Hessian-vector products against differences of the gradient ---- */
typedef struct {
  kiln_tensor *(*f)(kiln_tensor *x);
  int64_t n;
} hvp_case;

static kiln_tensor *mlp(kiln_tensor *x) {
  static const double w1[12] = {0.3, -0.2, 0.5, 0.1, -0.4, 0.2, 0.6, -0.1, 0.2, 0.3, -0.5, 0.4};
  kiln_tensor *w = kiln_from_data(w1, KILN_F64, KILN_SHAPE(4, 3));
  kiln_tensor *h = kiln_tanh(kiln_matmul(kiln_reshape(x, KILN_SHAPE(1, 4)), w));
  return kiln_sum(kiln_mul(kiln_softmax(h, -1), kiln_arange(1, 4, 1)));
}
static kiln_tensor *softmax_sq(kiln_tensor *x) {
  kiln_tensor *s = kiln_softmax(x, 0);
  return kiln_sum(kiln_mul(s, kiln_mul(s, kiln_arange(1, 5, 1))));
}

/* grad f at x as doubles. */
static void gradient_at(const hvp_case *c, const double *x, double *out) {
  kiln_scope_begin();
  kiln_tensor *t = kiln_from_data(x, KILN_F64, KILN_SHAPE(c->n)), *g;
  ck_assert_int_eq(kiln_grad(c->f(t), NULL, 1, &t, &g), KILN_OK);
  ck_assert_int_eq(kiln_copy_to_host(g, out, sizeof(double) * (size_t)c->n), KILN_OK);
  kiln_scope_end();
}

START_TEST(hessian_vector_products) {
  static const hvp_case hc[] = {{mlp, 4}, {softmax_sq, 4}};
  const hvp_case *c = &hc[_i];
  double x[4] = {0.3, -0.7, 1.1, 0.2}, v[4] = {0.5, -1, 0.25, 2}, hv[4], gp[4], gm[4], xp[4], xm[4];
  kiln_scope_begin();
  kiln_tensor *t = kiln_from_data(x, KILN_F64, KILN_SHAPE(4)), *tv = kiln_from_data(v, KILN_F64, KILN_SHAPE(4)), *g, *h;
  ck_assert_int_eq(kiln_grad(c->f(t), NULL, 1, &t, &g), KILN_OK);
  ck_assert_msg(kiln_grad(kiln_sum(kiln_mul(g, tv)), NULL, 1, &t, &h) == KILN_OK, "%s", kiln_last_error());
  ck_assert_int_eq(kiln_copy_to_host(h, hv, sizeof hv), KILN_OK);
  kiln_scope_end();
  for (int i = 0; i < 4; i++) xp[i] = x[i] + 1e-6 * v[i], xm[i] = x[i] - 1e-6 * v[i];
  gradient_at(c, xp, gp);
  gradient_at(c, xm, gm);
  for (int i = 0; i < 4; i++) {
    double num = (gp[i] - gm[i]) / 2e-6;
    ck_assert_msg(fabs(hv[i] - num) <= 1e-5 + 1e-3 * fabs(num), "case %d: (Hv)[%d] = %.9g, differences give %.9g", _i, i, hv[i], num);
  }
}
END_TEST

/* ---- histories, wrt kinds, detach ------------------------------------------ */
START_TEST(realized_tensors_keep_their_history) {
  kiln_scope_begin();
  kiln_tensor *w = kiln_from_data(((const double[]){1, 2, 3}), KILN_F64, KILN_SHAPE(3));
  kiln_tensor *h = kiln_exp(w), *y = kiln_sum(kiln_mul(h, h)), *g[2];
  ck_assert_int_eq(kiln_realize(h), KILN_OK);   /* realized: a buffer that remembers exp(w) */
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_int_eq(kiln_grad(y, NULL, 2, (kiln_tensor *[]){w, h}, g), KILN_OK);
  double gw[3], gh[3];
  ck_assert_int_eq(kiln_copy_to_host(g[0], gw, sizeof gw), KILN_OK);
  ck_assert_int_eq(kiln_copy_to_host(g[1], gh, sizeof gh), KILN_OK);
  for (int i = 0; i < 3; i++) {
    ck_assert_double_eq_tol(gw[i], 2 * exp(2.0 * (i + 1)), 1e-9 * exp(2.0 * (i + 1)));   /* d/dw e^2w */
    ck_assert_double_eq_tol(gh[i], 2 * exp(i + 1.0), 1e-12 * exp(i + 1.0));
  }
  kiln_scope_end();
}
END_TEST

START_TEST(independent_inputs_get_zeros) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(((const float[]){1, 2}), KILN_F32, KILN_SHAPE(2));
  kiln_tensor *b = kiln_from_data(((const float[]){3, 4, 5}), KILN_F32, KILN_SHAPE(3)), *g[2];
  ck_assert_int_eq(kiln_grad(kiln_sum(kiln_exp(a)), NULL, 2, (kiln_tensor *[]){b, a}, g), KILN_OK);
  TU_EXPECT(g[0], KILN_SHAPE(3), 0, 0, 0, 0);
  TU_EXPECT(g[1], KILN_SHAPE(2), 1e-6, exp(1.0), exp(2.0));
  /* y itself, and a detached path that stops the gradient */
  kiln_tensor *y = kiln_mul(a, kiln_detach(kiln_exp(a)));
  ck_assert_int_eq(kiln_grad(kiln_sum(y), NULL, 2, (kiln_tensor *[]){a, a}, g), KILN_OK);
  TU_EXPECT(g[0], KILN_SHAPE(2), 1e-6, exp(1.0), exp(2.0));
  TU_EXPECT(g[1], KILN_SHAPE(2), 1e-6, exp(1.0), exp(2.0));
  ck_assert_int_eq(kiln_grad(y, kiln_ones_like(y), 1, &y, g), KILN_OK);
  TU_EXPECT(g[0], KILN_SHAPE(2), 0, 1, 1);
  kiln_tensor *e = kiln_exp(a);   /* a realized tensor detached: its value alone */
  ck_assert_int_eq(kiln_realize(e), KILN_OK);
  ck_assert_int_eq(kiln_grad(kiln_sum(kiln_mul(e, kiln_detach(e))), NULL, 1, &a, g), KILN_OK);
  TU_EXPECT(g[0], KILN_SHAPE(2), 1e-5, exp(2.0), exp(4.0));
  kiln_scope_end();
}
END_TEST

/* KILN_GRAD_HISTORY_MB=0 keeps no history: a realized y is then a constant,
 * and kiln_grad says why instead of returning zeros. */
START_TEST(dropped_history_is_an_error) {
  setenv("KILN_GRAD_HISTORY_MB", "0", 1);   /* read at this forked test's first op */
  kiln_scope_begin();
  kiln_tensor *w = kiln_from_data(((const float[]){1, 2}), KILN_F32, KILN_SHAPE(2)), *g;
  kiln_tensor *y = kiln_sum(kiln_exp(w));
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_int_eq(kiln_grad(y, NULL, 1, &w, &g), KILN_ERR_ARG);
  ck_assert_ptr_null(g);
  ck_assert_msg(strstr(kiln_last_error(), "whose history was not kept") && strstr(kiln_last_error(), "test_grad.c:"),
                "%s", kiln_last_error());
  kiln_scope_end();
}
END_TEST

/* A loop x = f(x) realized each time keeps only a bounded window of x's
 * alive through the histories. */
START_TEST(history_window_is_bounded) {
  setenv("KILN_GRAD_HISTORY_MB", "1", 1);
  kiln_memory_stats_t before, after;
  kiln_tensor *x = kiln_zeros(KILN_SHAPE(65536), KILN_F32);   /* 256 KiB */
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  kiln_memory_stats(kiln_default_device(), &before);
  for (int i = 0; i < 64; i++) {   /* outside any scope: each x is released as the next is made */
    kiln_tensor *n = kiln_adds(x, 1);
    ck_assert_int_eq(kiln_realize(n), KILN_OK);
    kiln_release(x);
    x = n;
  }
  kiln_memory_stats(kiln_default_device(), &after);
  kiln_tensor *first = kiln_select(x, 0, 0);
  ck_assert_double_eq(kiln_item(first), 64);
  ck_assert_msg(after.allocated_bytes - before.allocated_bytes <= ((uint64_t)3 << 20), "64 steps of 256 KiB hold %llu bytes",
                (unsigned long long)(after.allocated_bytes - before.allocated_bytes));
  kiln_release(first);
  kiln_release(x);
}
END_TEST

/* ---- what the backward compiles to ------------------------------------------------ */
/* Kernels launched to realize grads[0..n) of y with respect to wrt. */
static uint64_t backward_kernels(kiln_tensor *y, kiln_tensor *dy, int n, kiln_tensor *const *wrt) {
  kiln_tensor *g[4];
  ck_assert_msg(kiln_grad(y, dy, n, wrt, g) == KILN_OK, "%s", kiln_last_error());
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize_n(n, g), KILN_OK);
  return kiln_stats().kernels_launched;
}

START_TEST(backward_fuses) {
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(64, 33), 1, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(64, 33), 2, TU_SMALL);
  kiln_tensor *c = tu_data(KILN_F32, KILN_SHAPE(64, 33), 3, TU_SMALL), *dy = tu_data(KILN_F32, KILN_SHAPE(64, 33), 4, TU_SMALL);
  /* W1's expression: its three gradients in one kernel (one of them reads another) */
  kiln_tensor *w1 = kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(a));
  ck_assert_uint_eq(backward_kernels(w1, dy, 3, (kiln_tensor *[]){a, b, c}), 1);
  /* softmax and cross_entropy: one row kernel (no gradient through the shift, a one-hot, no scatter) */
  ck_assert_uint_eq(backward_kernels(kiln_softmax(a, -1), dy, 1, &a), 1);
  kiln_tensor *target = kiln_from_data(((const int64_t[]){3, 0, 32, 7}), KILN_I64, KILN_SHAPE(4));
  kiln_tensor *logits = kiln_slice(a, 0, 0, 4, 1);
  ck_assert_uint_eq(backward_kernels(kiln_cross_entropy(logits, target, NULL, "mean", -100, 0), NULL, 1, &a), 1);
  /* linear's weight: one GEMM in the weight's layout, no transposing copy */
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(17, 33), 5, TU_SMALL);
  ck_assert_uint_eq(backward_kernels(kiln_sum(kiln_exp(kiln_linear(a, w, NULL))), NULL, 1, &w), 2);   /* + the exp's stored product */
  kiln_scope_end();
}
END_TEST

/* A convolution's input gradient is a convolution of the output's
 * gradient read through a window in place: no (N, C * kh * kw, OH * OW)
 * matrix (4.7 MB here, 9 times the input) is ever stored. */
START_TEST(conv_input_gradient_stores_no_window) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(8, 16, 32, 32), 1, TU_SMALL), *w = tu_data(KILN_F32, KILN_SHAPE(32, 16, 3, 3), 2, TU_SMALL);
  kiln_tensor *gy = tu_data(KILN_F32, KILN_SHAPE(8, 32, 32, 32), 3, TU_SMALL), *g;
  kiln_tensor *y = kiln_conv2d(x, w, NULL, 1, ((const int64_t[]){1}), 1, ((const int64_t[]){1}), 1, ((const int64_t[]){1}), 1);
  ck_assert_int_eq(kiln_grad(y, gy, 1, &x, &g), KILN_OK);
  ck_assert_int_eq(kiln_realize_n(3, (kiln_tensor *[]){x, w, gy}), KILN_OK);
  kiln_memory_stats_t before, after;
  kiln_memory_stats(kiln_default_device(), &before);
  kiln_reset_peak_memory();
  ck_assert_int_eq(kiln_realize(g), KILN_OK);
  kiln_memory_stats(kiln_default_device(), &after);
  uint64_t input = 8 * 16 * 32 * 32 * 4;
  ck_assert_msg(after.peak_bytes - before.allocated_bytes < input + input / 2, "the input gradient took %llu bytes",
                (unsigned long long)(after.peak_bytes - before.allocated_bytes));
  kiln_scope_end();
}
END_TEST

/* ---- errors ----------------------------------------------------------------------- */
START_TEST(bad_arguments) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(((const float[]){1, 2}), KILN_F32, KILN_SHAPE(2)), *g[2] = {x, x};
  kiln_tensor *i = kiln_from_data(((const int64_t[]){1, 2}), KILN_I64, KILN_SHAPE(2));
  static const struct { kiln_status st; const char *text; } want[] = {
    {KILN_ERR_ARG, "grad: y is NULL"},
    {KILN_ERR_DTYPE, "grad: y is int64 (2,) built at"},
    {KILN_ERR_DTYPE, "grad: wrt[1] is int64 (2,) built at"},
    {KILN_ERR_ARG, "grad: dy is NULL, but y has 2 elements"},
    {KILN_ERR_SHAPE, "grad: dy is float64 (2,), but y is float32 (2,)"},
    {KILN_ERR_ARG, "grad: wrt is NULL with 1 inputs"},
    {KILN_ERR_SHAPE, "broadcast"},
  };
  kiln_status got[7];
  got[0] = kiln_grad(NULL, NULL, 1, &x, g);
  got[1] = kiln_grad(i, NULL, 1, &x, g);
  got[2] = kiln_grad(kiln_sum(x), NULL, 2, (kiln_tensor *[]){x, i}, g);
  got[3] = kiln_grad(x, NULL, 1, &x, g);
  got[4] = kiln_grad(x, kiln_cast(x, KILN_F64), 1, &x, g);
  got[5] = kiln_grad(kiln_sum(x), NULL, 1, NULL, g);
  got[6] = kiln_grad(kiln_add(x, kiln_zeros(KILN_SHAPE(3), KILN_F32)), NULL, 1, &x, g);   /* sticky */
  for (int k = 0; k < 7; k++) {
    ck_assert_msg(got[k] == want[k].st, "case %d: status %d, want %d (%s)", k, got[k], want[k].st, kiln_last_error());
    ck_assert_ptr_null(g[0]);
  }
  ck_assert_msg(strstr(kiln_last_error(), "test_grad.c:"), "%s", kiln_last_error());
  kiln_scope_end();
}
END_TEST

static Suite *grad_suite(void) {
  Suite *s = suite_create("grad");
  tcase_add_loop_test(tu_tcase(s, "gradcheck_rows"), gradcheck_rows, 0, sizeof cases / sizeof *cases);
  tcase_add_test(tu_tcase(s, "every_rule_is_checked"), every_rule_is_checked);
  tcase_add_test(tu_tcase(s, "pytorch_conventions"), pytorch_conventions);
  tcase_add_test(tu_tcase(s, "half_gradients_sum_in_f32"), half_gradients_sum_in_f32);
  tcase_add_loop_test(tu_tcase(s, "hessian_vector_products"), hessian_vector_products, 0, 2);
  tcase_add_test(tu_tcase(s, "realized_tensors_keep_their_history"), realized_tensors_keep_their_history);
  tcase_add_test(tu_tcase(s, "independent_inputs_get_zeros"), independent_inputs_get_zeros);
  tcase_add_test(tu_tcase(s, "dropped_history_is_an_error"), dropped_history_is_an_error);
  tcase_add_test(tu_tcase(s, "history_window_is_bounded"), history_window_is_bounded);
  tcase_add_test(tu_tcase(s, "backward_fuses"), backward_fuses);
  tcase_add_test(tu_tcase(s, "conv_input_gradient_stores_no_window"), conv_input_gradient_stores_no_window);
  tcase_add_test(tu_tcase(s, "bad_arguments"), bad_arguments);
  return s;
}

KILN_TEST_MAIN(grad_suite)
