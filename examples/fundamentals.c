/* fundamentals.c: the PyTorch fundamentals tour written in C with kiln, one
 * section per topic, every tensor printed in PyTorch's format. Uses only the
 * public header. tests/test_fundamentals.c runs this program and compares
 * its output with tests/fundamentals.golden, so a change here that changes
 * the output needs the golden file regenerated (see that test). */
#include <kiln.h>

#include <stdio.h>
#include <string.h>

/* ---- printing helpers --------------------------------------------------- */
static void section(int n, const char *title) { printf("\n== %d. %s ==\n", n, title); }

/* Realizes and prints t under a label; a failure prints kiln's message. */
static void show(const char *label, kiln_tensor *t) {
  printf("%s:\n", label);
  if (kiln_print(t) != KILN_OK) printf("error: %s\n", kiln_last_error());
}

/* A shape the way Python prints a tuple: (), (3,), (2, 2). */
static const char *shape_text(kiln_tensor *t, char *buf, size_t len) {
  int nd = kiln_ndim(t);
  const int64_t *shape = kiln_shape(t);
  size_t used = (size_t)snprintf(buf, len, "(");
  for (int d = 0; d < nd && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (used < len) snprintf(buf + used, len - used, nd == 1 ? ",)" : ")");
  return buf;
}

static const char *device_text(kiln_device d, char *buf, size_t len) {
  if (d.type == KILN_CUDA) snprintf(buf, len, "cuda:%d", d.index);
  else snprintf(buf, len, "cpu");
  return buf;
}

static void show_shape(const char *label, kiln_tensor *t) {
  char buf[128];
  printf("%s.shape = %s\n", label, shape_text(t, buf, sizeof buf));
}

/* An op kiln refuses: the error node's status and message, which name the
 * op, the operands and the line of this file that built it. */
static void show_error(const char *label, kiln_tensor *t) {
  kiln_status s = kiln_status_of(t);
  if (s == KILN_OK) printf("%s: unexpectedly fine\n", label);
  else printf("%s -> error (status %d): %s\n", label, (int)s, kiln_last_error());
}

/* ---- 1. scalar, vector, matrix, tensor ---------------------------------- */
static void describe(const char *label, kiln_tensor *t) {
  show(label, t);
  char buf[128];
  printf("%s.ndim = %d, %s.shape = %s\n", label, kiln_ndim(t), label, shape_text(t, buf, sizeof buf));
}

static void introduction(void) {
  section(1, "scalar, vector, matrix, tensor");
  kiln_tensor *scalar = kiln_scalar(7, KILN_I64);
  describe("scalar", scalar);
  printf("scalar.item() = %g\n", kiln_item(scalar));
  int64_t vector[2] = {7, 7};
  describe("vector", kiln_from_data(vector, KILN_I64, KILN_SHAPE(2)));
  int64_t matrix[2][2] = {{7, 8}, {9, 10}};
  kiln_tensor *m = kiln_from_data(matrix, KILN_I64, KILN_SHAPE(2, 2));
  describe("MATRIX", m);
  show("MATRIX[0]", kiln_index(m, "0"));
  int64_t tensor[1][3][3] = {{{1, 2, 3}, {3, 6, 9}, {2, 4, 5}}};
  describe("TENSOR", kiln_from_data(tensor, KILN_I64, KILN_SHAPE(1, 3, 3)));
}

/* ---- 2. random tensors, zeros and ones, ranges, *_like ------------------ */
static void creation(void) {
  section(2, "random tensors, zeros and ones, ranges");
  kiln_manual_seed(42);  /* the tour's output is tested, so its numbers are fixed */
  kiln_tensor *r = kiln_rand(KILN_SHAPE(3, 4), KILN_F32);
  show("rand(3, 4)", r);
  printf("dtype = %s\n", kiln_dtype_name(kiln_dtype_of(r)));
  /* An image: height, width, colour channels. Too big to print whole. */
  kiln_tensor *image = kiln_rand(KILN_SHAPE(224, 224, 3), KILN_F32);
  show_shape("image", image);
  printf("image.ndim = %d\n", kiln_ndim(image));
  kiln_tensor *zeros = kiln_zeros(KILN_SHAPE(3, 4), KILN_F32);
  show("zeros(3, 4)", zeros);
  show("zeros * rand(3, 4)", kiln_mul(zeros, r));
  kiln_tensor *ones = kiln_ones(KILN_SHAPE(3, 4), KILN_F32);
  show("ones(3, 4)", ones);
  printf("ones.dtype = %s\n", kiln_dtype_name(kiln_dtype_of(ones)));
  show("arange(0, 10, 1)", kiln_arange(0, 10, 1));
  kiln_tensor *one_to_ten = kiln_arange(1, 11, 1);
  show("arange(1, 11)", one_to_ten);
  show("arange(0, 1000, 77)", kiln_arange(0, 1000, 77));
  show("zeros_like(one_to_ten)", kiln_zeros_like(one_to_ten));
  show("ones_like(one_to_ten)", kiln_ones_like(one_to_ten));
}

/* ---- 3. dtypes ----------------------------------------------------------- */
static void show_dtype(const char *label, kiln_tensor *t) {
  show(label, t);
  printf("  dtype: %s\n", kiln_dtype_name(kiln_dtype_of(t)));
}

static void dtypes(void) {
  section(3, "dtypes");
  float fv[3] = {3.0f, 6.0f, 9.0f};
  kiln_tensor *f32 = kiln_from_data(fv, KILN_F32, KILN_SHAPE(3));
  show_dtype("float_32_tensor (the default dtype)", f32);
  double dv[3] = {3.0, 6.0, 9.0};
  show_dtype("float_64_tensor", kiln_from_data(dv, KILN_F64, KILN_SHAPE(3)));
  kiln_tensor *f16 = kiln_cast(f32, KILN_F16);
  show_dtype("float_16_tensor = cast(float_32_tensor, float16)", f16);
  float wide[3] = {1.5f, -2.7f, 300.0f};
  kiln_tensor *w = kiln_from_data(wide, KILN_F32, KILN_SHAPE(3));
  /* Casts to an integer truncate toward zero and saturate, unlike C's
   * undefined behaviour: 300 does not fit an int8. */
  show_dtype("cast([1.5, -2.7, 300.], int8)", kiln_cast(w, KILN_I8));
  /* Mixed dtypes promote the way PyTorch does. */
  show_dtype("float_16_tensor * float_32_tensor", kiln_mul(f16, f32));
  int32_t iv[3] = {1, 2, 3};
  kiln_tensor *i32 = kiln_from_data(iv, KILN_I32, KILN_SHAPE(3));
  show_dtype("int_32_tensor + float_32_tensor", kiln_add(i32, f32));
  show_dtype("int_32_tensor * 2", kiln_muls(i32, 2));
  show_dtype("int_32_tensor * 0.5", kiln_muls(i32, 0.5));
  show_dtype("float_16_tensor + 1.5 (a Python-like scalar never widens)", kiln_adds(f16, 1.5));
  printf("what kiln refuses (PyTorch too): matmul of mixed float dtypes\n");
  show_error("matmul(float_16_tensor, float_32_tensor)", kiln_matmul(f16, f32));
}

/* ---- 4. information about a tensor --------------------------------------- */
static void information(void) {
  section(4, "information about a tensor");
  kiln_tensor *t = kiln_rand(KILN_SHAPE(3, 4), KILN_F32);
  show("some_tensor", t);
  char buf[128];
  printf("shape:  %s\n", shape_text(t, buf, sizeof buf));
  printf("dtype:  %s\n", kiln_dtype_name(kiln_dtype_of(t)));
  printf("device: %s\n", device_text(kiln_device_of(t), buf, sizeof buf));
  printf("numel:  %lld\n", (long long)kiln_numel(t));
}

/* ---- 5. arithmetic ------------------------------------------------------- */
static void arithmetic(void) {
  section(5, "arithmetic");
  int64_t v[3] = {1, 2, 3};
  kiln_tensor *t = kiln_from_data(v, KILN_I64, KILN_SHAPE(3));
  show("tensor + 10", kiln_adds(t, 10));
  show("tensor * 10", kiln_muls(t, 10));
  show("tensor - 10", kiln_subs(t, 10));
  show("tensor / 2 (true division gives float)", kiln_divs(t, 2));
  /* The function forms take a tensor on both sides. */
  kiln_tensor *ten = kiln_scalar(10, KILN_I64);
  show("kiln_add(tensor, scalar(10))", kiln_add(t, ten));
  show("kiln_mul(tensor, scalar(10))", kiln_mul(t, ten));
  /* Tensors are immutable values: an op makes a new tensor, and a name sees
   * the new value only when it is reassigned. */
  show("tensor (unchanged)", t);
  t = kiln_subs(t, 10);
  show("tensor after tensor = tensor - 10", t);
}

/* ---- 6. matrix multiplication -------------------------------------------- */
static void matrix_multiplication(void) {
  section(6, "matrix multiplication");
  int64_t v[3] = {1, 2, 3};
  kiln_tensor *t = kiln_from_data(v, KILN_I64, KILN_SHAPE(3));
  show("tensor * tensor (elementwise)", kiln_mul(t, t));
  show("matmul(tensor, tensor) (1*1 + 2*2 + 3*3)", kiln_matmul(t, t));
  show("dot(tensor, tensor)", kiln_dot(t, t));
  float av[3][2] = {{1, 2}, {3, 4}, {5, 6}}, bv[3][2] = {{7, 10}, {8, 11}, {9, 12}};
  kiln_tensor *a = kiln_from_data(av, KILN_F32, KILN_SHAPE(3, 2));
  kiln_tensor *b = kiln_from_data(bv, KILN_F32, KILN_SHAPE(3, 2));
  /* The inner dims must match: (3, 2) @ (3, 2) has 2 against 3. */
  show_error("mm(tensor_A, tensor_B)", kiln_mm(a, b));
  show_shape("tensor_B.T", kiln_T(b));
  kiln_tensor *c = kiln_mm(a, kiln_T(b));
  show("mm(tensor_A, tensor_B.T)", c);
  show_shape("mm(tensor_A, tensor_B.T)", c);
  show("matmul(tensor_A.T, tensor_B)", kiln_matmul(kiln_T(a), b));
}

/* ---- 7. a linear layer ---------------------------------------------------- */
static void linear_layer(void) {
  section(7, "a linear layer: y = x @ W^T + b");
  kiln_manual_seed(42);
  /* nn.Linear(in_features=2, out_features=6): W is (out, in), b is (out,). */
  kiln_tensor *w = kiln_rand(KILN_SHAPE(6, 2), KILN_F32);
  kiln_tensor *b = kiln_rand(KILN_SHAPE(6), KILN_F32);
  float xv[3][2] = {{1, 2}, {3, 4}, {5, 6}};
  kiln_tensor *x = kiln_from_data(xv, KILN_F32, KILN_SHAPE(3, 2));
  kiln_tensor *y = kiln_linear(x, w, b);
  show_shape("input", x);
  show("output", y);
  show_shape("output", y);
}

/* ---- 8. aggregation -------------------------------------------------------- */
static void aggregation(void) {
  section(8, "min, max, mean, sum, argmax, argmin");
  kiln_tensor *x = kiln_arange(0, 100, 10);
  show("x", x);
  printf("x.dtype = %s\n", kiln_dtype_name(kiln_dtype_of(x)));
  show("min(x)", kiln_min(x));
  show("max(x)", kiln_max(x));
  /* mean of an integer tensor is an error, as in PyTorch: cast first. */
  show_error("mean(x)", kiln_mean(x));
  show("mean(cast(x, float32))", kiln_mean(kiln_cast(x, KILN_F32)));
  show("sum(x)", kiln_sum(x));
  kiln_tensor *at = kiln_argmax(x);
  show("argmax(x)", at);
  show("argmin(x)", kiln_argmin(x));
  show("x[argmax(x)]", kiln_select(x, 0, (int64_t)kiln_item(at)));
}

/* ---- 9. reshape, view, stack, squeeze, unsqueeze, permute ---------------- */
static void reshaping(void) {
  section(9, "reshape, view, stack, squeeze, unsqueeze, permute");
  /* arange with integral bounds is int64 (C cannot say 1. apart from 1),
   * so cast to get PyTorch's arange(1., 10.). */
  kiln_tensor *x = kiln_cast(kiln_arange(1, 10, 1), KILN_F32);
  show("x", x);
  show_shape("x", x);
  kiln_tensor *reshaped = kiln_reshape(x, KILN_SHAPE(1, 9));
  show("reshape(x, (1, 9))", reshaped);
  /* A view never copies; kiln tensors are immutable, so there is no write
   * through a view to see, as PyTorch's z[:, 0] = 5 shows. */
  show("view(x, (1, 9))", kiln_view(x, KILN_SHAPE(1, 9)));
  kiln_tensor *four[4] = {x, x, x, x};
  show("stack([x, x, x, x], dim=0)", kiln_stack(4, four, 0));
  show("stack([x, x, x, x], dim=1)", kiln_stack(4, four, 1));
  kiln_tensor *squeezed = kiln_squeeze(reshaped);
  show("squeeze(reshaped)", squeezed);
  show_shape("squeeze(reshaped)", squeezed);
  kiln_tensor *unsqueezed = kiln_unsqueeze(squeezed, 0);
  show("unsqueeze(squeezed, 0)", unsqueezed);
  show_shape("unsqueeze(squeezed, 0)", unsqueezed);
  show_shape("unsqueeze(squeezed, 1)", kiln_unsqueeze(squeezed, 1));
  kiln_tensor *image = kiln_rand(KILN_SHAPE(224, 224, 3), KILN_F32);
  kiln_tensor *chw = kiln_permute(image, KILN_DIMS(2, 0, 1));  /* height, width, colour -> colour first */
  show_shape("image", image);
  show_shape("permute(image, (2, 0, 1))", chw);
  /* The permuted tensor reads the same elements: image[0, 0, 0] is chw[0, 0, 0]. */
  printf("image[0, 0, 0] = %.4f, chw[0, 0, 0] = %.4f\n", kiln_item(kiln_index(image, "0, 0, 0")),
         kiln_item(kiln_index(chw, "0, 0, 0")));
}

/* ---- 10. indexing ------------------------------------------------------- */
static void indexing(void) {
  section(10, "indexing with kiln_index");
  kiln_tensor *x = kiln_reshape(kiln_arange(1, 10, 1), KILN_SHAPE(1, 3, 3));
  show("x", x);
  static const char *const rows[][2] = {
    {"0", "x[0]"},
    {"0, 0", "x[0][0]"},
    {"0, 0, 0", "x[0][0][0]"},
    {":, 0", "all of dim 0, index 0 of dim 1"},
    {":, :, 1", "all of dims 0 and 1, index 1 of dim 2"},
    {":, 1, 1", "all of dim 0, index 1 of dims 1 and 2"},
    {"0, 0, :", "index 0 of dims 0 and 1, all of dim 2"},
    {"0, ::2, -1", "steps and negative indices work too"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char label[128];
    snprintf(label, sizeof label, "x[%s]  (%s)", rows[i][0], rows[i][1]);
    show(label, kiln_index(x, rows[i][0]));
  }
}

/* ---- 11. host memory ------------------------------------------------------ */
static void host_memory(void) {
  section(11, "C arrays: shared and copied");
  /* kiln_from_buffer is torch.from_numpy: the tensor reads the array in
   * place, so a write to the array shows in the tensor. f64 is what NumPy
   * gives by default. */
  double array[7] = {1, 2, 3, 4, 5, 6, 7};
  kiln_tensor *shared = kiln_from_buffer(array, KILN_F64, KILN_SHAPE(7));
  show("from_buffer(array)", shared);
  printf("kiln_data(shared) == array: %s\n", kiln_data(shared) == (const void *)array ? "yes" : "no");
  array[0] = 100;
  show("after array[0] = 100", shared);
  /* kiln_from_data copies: later writes to the array do not show. */
  kiln_tensor *copied = kiln_from_data(array, KILN_F64, KILN_SHAPE(7));
  array[0] = 1;
  show("from_data(array), then array[0] = 1", copied);
  show("cast(shared, float32) (a new tensor)", kiln_cast(shared, KILN_F32));
  /* Back to C: kiln_copy_to_host copies into memory the caller owns. */
  kiln_tensor *doubled = kiln_muls(shared, 2);
  double out[7];
  if (kiln_copy_to_host(doubled, out, sizeof out) != KILN_OK) {
    printf("error: %s\n", kiln_last_error());
    return;
  }
  printf("copy_to_host(shared * 2):");
  for (int i = 0; i < 7; i++) printf(" %g", out[i]);
  printf("\n");
  out[0] = -1;
  show("shared * 2 after out[0] = -1 (the copy is the caller's)", doubled);
}

/* ---- 12. reproducibility ----------------------------------------------------- */
static void reproducibility(void) {
  section(12, "reproducibility");
  kiln_tensor *a = kiln_rand(KILN_SHAPE(3, 4), KILN_F32);
  kiln_tensor *b = kiln_rand(KILN_SHAPE(3, 4), KILN_F32);
  show("random_tensor_A", a);
  show("random_tensor_B", b);
  show("random_tensor_A == random_tensor_B", kiln_eq(a, b));
  /* The generator is counter-based (Philox): the numbers depend only on the
   * seed and the element's index, so a seed gives the same numbers on the
   * CPU and on a GPU. */
  kiln_manual_seed(42);
  kiln_tensor *c = kiln_rand(KILN_SHAPE(3, 4), KILN_F32);
  kiln_manual_seed(42);
  kiln_tensor *d = kiln_rand(KILN_SHAPE(3, 4), KILN_F32);
  show("random_tensor_C (seed 42)", c);
  show("random_tensor_D (seed 42)", d);
  show("random_tensor_C == random_tensor_D", kiln_eq(c, d));
}

/* ---- 13. devices ------------------------------------------------------------ */
static void devices(void) {
  section(13, "devices");
  char buf[32];
  int available = kiln_cuda_is_available();
  printf("cuda available: %s, device count: %d\n", available ? "yes" : "no", kiln_cuda_device_count());
  if (!available)
    printf("(no usable NVIDIA driver or GPU here: every tensor stays on the CPU, and the tour goes on)\n");
  /* Device-agnostic code asks for the best device instead of naming one. */
  kiln_device dev = kiln_default_device();
  printf("default device: %s\n", device_text(dev, buf, sizeof buf));
  kiln_tensor *t = kiln_from_data(((float[]){1, 2, 3}), KILN_F32, KILN_SHAPE(3));
  show("tensor", t);
  printf("tensor.device = %s\n", device_text(kiln_device_of(t), buf, sizeof buf));
  /* Transfers are lazy nodes like any op. Without CUDA kiln_to is an error
   * node that says why; with a GPU the tensor goes there and back. */
  kiln_device gpu = {KILN_CUDA, 0};
  kiln_tensor *on_gpu = kiln_to(t, gpu);
  if (kiln_status_of(on_gpu) != KILN_OK) {
    show_error("kiln_to(tensor, cuda:0)", on_gpu);
  } else {
    show("tensor on the GPU", on_gpu);
    /* a CUDA tensor's memory is not host memory: copy it back first */
    if (!kiln_data(on_gpu)) printf("kiln_data(tensor on cuda:0) -> error: %s\n", kiln_last_error());
    show("back on the CPU", kiln_cpu(on_gpu));
  }
  kiln_memory_stats_t mem;
  if (kiln_memory_stats(gpu, &mem) == KILN_OK)
    printf("cuda:0 memory: %llu bytes allocated, %llu reserved\n", (unsigned long long)mem.allocated_bytes,
           (unsigned long long)mem.reserved_bytes);
  else
    printf("cuda:0 memory -> error: %s\n", kiln_last_error());
}

int main(void) {
  kiln_scope_begin();  /* every handle made below is released at scope end */
  introduction();
  creation();
  dtypes();
  information();
  arithmetic();
  matrix_multiplication();
  linear_layer();
  aggregation();
  reshaping();
  indexing();
  host_memory();
  reproducibility();
  devices();
  kiln_scope_end();
  kiln_shutdown();
  return 0;
}
