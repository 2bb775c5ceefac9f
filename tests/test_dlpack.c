/* test_dlpack.c: DLPack both ways in C: kiln's export (fields, views,
 * memory shared and held until the deleter), import of hand-made managed
 * tensors (compact, strided, negative strides, byte offset; the deleter
 * called exactly once, after the last reference), round trips, every dtype,
 * errors (out of memory too) that leave the tensor to the caller, and CUDA where a GPU is
 * present. tests/python/numpy_dlpack.py does the same with NumPy. */
#include "check_main.h"
#include "frontend/frontend.h"
#include "ir/alloc.h"
#include "runtime/rt.h"

#include <dlpack/dlpack.h>
#include <string.h>

/* ---- a producer of our own ------------------------------------------------ */
typedef struct {
  DLManagedTensor m;
  int64_t shape[KILN_MAX_DIMS + 1], strides[KILN_MAX_DIMS + 1];
  int deleted;          /* deleter calls */
} producer;

static void producer_delete(DLManagedTensor *m) { ((producer *)m->manager_ctx)->deleted++; }

/* A managed f32 tensor over data (strides NULL when compact). */
static void produce(producer *p, float *data, int ndim, const int64_t *shape, const int64_t *strides,
                    uint64_t byte_offset) {
  *p = (producer){0};
  if (ndim) memcpy(p->shape, shape, sizeof *shape * (size_t)ndim);
  if (strides) memcpy(p->strides, strides, sizeof *strides * (size_t)ndim);
  p->m.dl_tensor = (DLTensor){.data = data, .device = {kDLCPU, 0}, .ndim = ndim, .dtype = {kDLFloat, 32, 1},
                              .shape = p->shape, .strides = strides ? p->strides : NULL, .byte_offset = byte_offset};
  p->m.manager_ctx = p;
  p->m.deleter = producer_delete;
}

static void assert_values(kiln_tensor *t, const float *want, size_t n) {
  float got[64];
  ck_assert_int_eq(kiln_copy_to_host(t, got, sizeof got), KILN_OK);
  for (size_t i = 0; i < n; i++) ck_assert_msg(got[i] == want[i], "element %zu: %g != %g", i, got[i], want[i]);
}

/* ---- export --------------------------------------------------------------- */
START_TEST(test_dlpack_export) {
  float v[6] = {1, 2, 3, 4, 5, 6};
  kiln_tensor *t = kiln_from_data(v, KILN_F32, KILN_SHAPE(2, 3));
  DLManagedTensor *m = kiln_to_dlpack(t);
  ck_assert_ptr_nonnull(m);
  const DLTensor *d = &m->dl_tensor;
  ck_assert_int_eq(d->ndim, 2);
  ck_assert_int_eq(d->shape[0], 2);
  ck_assert_int_eq(d->shape[1], 3);
  ck_assert_int_eq(d->strides[0], 3);
  ck_assert_int_eq(d->strides[1], 1);
  ck_assert_int_eq(d->dtype.code, kDLFloat);
  ck_assert_int_eq(d->dtype.bits, 32);
  ck_assert_int_eq(d->dtype.lanes, 1);
  ck_assert_int_eq(d->device.device_type, kDLCPU);
  float *p = (float *)((char *)d->data + d->byte_offset);
  ck_assert_ptr_eq(p, kiln_data(t));   /* the same memory, not a copy */
  p[5] = 60;                           /* and a write through DLPack shows in kiln */
  assert_values(t, (const float[]){1, 2, 3, 4, 5, 60}, 6);
  kiln_release(t);                     /* the memory outlives the handle... */
  ck_assert(p[0] == 1 && p[4] == 5);
  m->deleter(m);                       /* ...until the deleter (LSan: nothing left) */
}
END_TEST

/* A realized view goes out with kiln's strides and offset. */
START_TEST(test_dlpack_export_view) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_reshape(kiln_arange(0, 12, 1), KILN_SHAPE(3, 4));
  ck_assert_int_eq(kiln_realize(a), KILN_OK);
  kiln_tensor *v = kiln_flip(kiln_slice(kiln_T(a), 0, 1, 3, 1), KILN_DIMS(1));   /* (2, 3): a[::-1, 1:3].T */
  DLManagedTensor *m = kiln_to_dlpack(v);
  ck_assert_ptr_nonnull(m);
  const DLTensor *d = &m->dl_tensor;
  ck_assert_int_eq(d->dtype.code, kDLInt);
  ck_assert_int_eq(d->dtype.bits, 64);
  ck_assert_int_eq(d->strides[0], 1);
  ck_assert_int_eq(d->strides[1], -4);
  const int64_t want[2][3] = {{9, 5, 1}, {10, 6, 2}};
  const int64_t *base = (const int64_t *)((const char *)d->data + d->byte_offset);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) ck_assert_int_eq(base[i * d->strides[0] + j * d->strides[1]], want[i][j]);
  ck_assert_ptr_eq(d->data, a->buf->data);   /* the view shares a's buffer */
  kiln_scope_end();
  m->deleter(m);
}
END_TEST

START_TEST(test_dlpack_export_errors) {
  ck_assert_ptr_null(kiln_to_dlpack(NULL));
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "test_dlpack.c:"));
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "to_dlpack: argument is NULL"));
  kiln_scope_begin();
  kiln_tensor *e = kiln_add(kiln_ones(KILN_SHAPE(2), KILN_F32), kiln_ones(KILN_SHAPE(3), KILN_F32));
  ck_assert_ptr_null(kiln_to_dlpack(e));
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "add: shapes"));
  kiln_scope_end();
}
END_TEST

/* ---- import --------------------------------------------------------------- */
/* Compact, then strided with a negative stride and a byte offset; kiln reads
 * the producer's memory in place, and the deleter runs once, after the last
 * tensor reading it (a view included) goes. */
START_TEST(test_dlpack_import) {
  float data[12];
  for (int i = 0; i < 12; i++) data[i] = (float)i;
  producer p;
  produce(&p, data, 2, (const int64_t[]){3, 4}, NULL, 0);
  kiln_tensor *t = kiln_from_dlpack(&p.m);
  ck_assert_int_eq(kiln_status_of(t), KILN_OK);
  ck_assert_ptr_eq(kiln_data(t), data);
  data[0] = 100;   /* the memory is shared: the write shows */
  assert_values(t, (const float[]){100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12);
  kiln_tensor *col = kiln_select(t, 1, 2);
  ck_assert_int_eq(kiln_realize(col), KILN_OK);
  kiln_release(t);
  ck_assert_int_eq(p.deleted, 0);
  assert_values(col, (const float[]){2, 6, 10}, 3);
  kiln_release(col);
  ck_assert_int_eq(p.deleted, 1);

  /* backwards from data[11] (a base pointer plus a byte offset): strides (-4, -2) */
  data[0] = 0;
  produce(&p, data + 8, 2, (const int64_t[]){3, 2}, (const int64_t[]){-4, -2}, 3 * sizeof(float));
  kiln_scope_begin();
  t = kiln_from_dlpack(&p.m);
  ck_assert_int_eq(kiln_status_of(t), KILN_OK);
  assert_values(t, (const float[]){11, 9, 7, 5, 3, 1}, 6);
  assert_values(kiln_adds(t, 1), (const float[]){12, 10, 8, 6, 4, 2}, 6);   /* kernels read it too */
  kiln_scope_end();
  ck_assert_int_eq(p.deleted, 1);
}
END_TEST

/* Out through DLPack and back: the same memory, and one deleter chain that
 * frees it all when the last kiln tensor goes. */
START_TEST(test_dlpack_round_trip) {
  for (int dt = 0; dt < KILN_NUM_DTYPES; dt++) {
    kiln_scope_begin();
    kiln_tensor *t = kiln_cast(kiln_arange(0, 6, 1), (kiln_dtype)dt);
    kiln_tensor *w = kiln_reshape(t, KILN_SHAPE(2, 3));
    DLManagedTensor *m = kiln_to_dlpack(w);
    ck_assert_ptr_nonnull(m);
    kiln_tensor *u = kiln_from_dlpack(m);
    ck_assert_int_eq(kiln_status_of(u), KILN_OK);
    ck_assert_int_eq(kiln_dtype_of(u), dt);
    ck_assert_int_eq(kiln_size(u, 1), 3);
    ck_assert_ptr_eq(kiln_data(u), kiln_data(w));
    ck_assert_double_eq(kiln_item(kiln_sum(kiln_cast(u, KILN_F64))), dt == KILN_BOOL ? 5 : 15);
    kiln_scope_end();
  }
}
END_TEST

/* The DLPack type of each kiln dtype, and back. */
START_TEST(test_dlpack_dtypes) {
  static const struct { kiln_dtype dt; uint8_t code, bits; } rows[] = {
      {KILN_BOOL, 6, 8}, {KILN_U8, kDLUInt, 8}, {KILN_I8, kDLInt, 8}, {KILN_I16, kDLInt, 16},
      {KILN_I32, kDLInt, 32}, {KILN_I64, kDLInt, 64}, {KILN_F16, kDLFloat, 16}, {KILN_BF16, kDLBfloat, 16},
      {KILN_F32, kDLFloat, 32}, {KILN_F64, kDLFloat, 64},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    kiln_scope_begin();
    DLManagedTensor *m = kiln_to_dlpack(kiln_zeros(KILN_SHAPE(2), rows[i].dt));
    ck_assert_int_eq(m->dl_tensor.dtype.code, rows[i].code);
    ck_assert_int_eq(m->dl_tensor.dtype.bits, rows[i].bits);
    ck_assert_int_eq(kiln_dtype_of(kiln_from_dlpack(m)), rows[i].dt);
    kiln_scope_end();
  }
}
END_TEST

/* Empty and 0-d tensors cross too. */
START_TEST(test_dlpack_shapes) {
  kiln_scope_begin();
  DLManagedTensor *m = kiln_to_dlpack(kiln_zeros(KILN_SHAPE(0, 3), KILN_F32));
  ck_assert_ptr_nonnull(m->dl_tensor.data);
  kiln_tensor *u = kiln_from_dlpack(m);
  ck_assert_int_eq(kiln_numel(u), 0);
  ck_assert_int_eq(kiln_ndim(u), 2);
  ck_assert_int_eq(kiln_realize(kiln_adds(u, 1)), KILN_OK);
  float one = 7;
  producer p, q;
  produce(&p, &one, 0, NULL, NULL, 0);
  ck_assert_double_eq(kiln_item(kiln_from_dlpack(&p.m)), 7);
  produce(&q, NULL, 1, (const int64_t[]){0}, NULL, 0);   /* no data at all */
  ck_assert_int_eq(kiln_numel(kiln_from_dlpack(&q.m)), 0);
  kiln_scope_end();
  ck_assert_int_eq(p.deleted, 1);
  ck_assert_int_eq(q.deleted, 1);
}
END_TEST

/* Refused tensors stay the caller's: the deleter is not called. */
START_TEST(test_dlpack_import_errors) {
  float data[4] = {0};
  producer p;
  kiln_scope_begin();
  ck_assert_int_eq(kiln_status_of(kiln_from_dlpack(NULL)), KILN_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "from_dlpack: argument is NULL"));

  static const struct { int what; kiln_status st; const char *want; } rows[] = {
      {0, KILN_ERR_ARG, "from_dlpack: 9 dims is outside 0..KILN_MAX_DIMS (8)"},
      {1, KILN_ERR_DTYPE, "from_dlpack: unsupported DLPack dtype (code 5, 64 bits, 1 lanes)"},
      {2, KILN_ERR_DTYPE, "from_dlpack: unsupported DLPack dtype (code 2, 32 bits, 4 lanes)"},
      {3, KILN_ERR_DEVICE, "from_dlpack: unsupported DLPack device type 4"},
      {4, KILN_ERR_ARG, "from_dlpack: data + byte_offset is not aligned to float32's 4 bytes"},
      {5, KILN_ERR_ARG, "from_dlpack: data is NULL"},
      {6, KILN_ERR_ARG, "from_dlpack: negative size -2 in shape (-2,)"},
      {7, KILN_ERR_SHAPE, "from_dlpack: the strides reach beyond what memory can hold"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    produce(&p, data, 1, (const int64_t[]){4}, NULL, 0);
    DLTensor *d = &p.m.dl_tensor;
    switch (rows[i].what) {
    case 0: d->ndim = 9; break;
    case 1: d->dtype = (DLDataType){kDLComplex, 64, 1}; break;
    case 2: d->dtype.lanes = 4; break;
    case 3: d->device.device_type = kDLOpenCL; break;
    case 4: d->byte_offset = 2; break;
    case 5: d->data = NULL; break;
    case 6: p.shape[0] = -2; break;
    default: d->strides = p.strides, p.strides[0] = INT64_MAX / 2; break;
    }
    int line = __LINE__ + 1;
    kiln_tensor *e = kiln_from_dlpack(&p.m);
    ck_assert_int_eq(kiln_status_of(e), rows[i].st);
    char want[256];
    snprintf(want, sizeof want, "test_dlpack.c:%d: %s", line, rows[i].want);
    ck_assert_msg(strstr(kiln_last_error(), want), "row %zu: want %s, got %s", i, want, kiln_last_error());
    ck_assert_int_eq(p.deleted, 0);
  }
  kiln_scope_end();
  ck_assert_int_eq(p.deleted, 0);
}
END_TEST

/* Out of memory at each of the import's allocations in turn (the buffer,
 * the node, the scope's slot): the error leaves m to the caller, its
 * deleter not called; a success calls it once, at the release. */
START_TEST(test_dlpack_import_out_of_memory) {
  float data[4] = {1, 2, 3, 4};
  producer p;
  kiln_status st = KILN_ERR_MEMORY;
  int failures = 0;
  for (uint64_t n = 1; st != KILN_OK; n++) {
    produce(&p, data, 1, (const int64_t[]){4}, NULL, 0);
    kiln_scope_begin();
    ir_alloc_fail_at(n, false);
    kiln_tensor *t = kiln_from_dlpack(&p.m);
    ir_alloc_fail_at(0, false);
    st = kiln_status_of(t);
    ck_assert_msg(st == KILN_OK || st == KILN_ERR_MEMORY, "N = %llu: %s", (unsigned long long)n, kiln_last_error());
    failures += st != KILN_OK;
    kiln_scope_end();
    ck_assert_int_eq(p.deleted, st == KILN_OK);
  }
  ck_assert_int_ge(failures, 2);
}
END_TEST

/* A CUDA tensor goes out as kDLCUDA and comes back on its device; without
 * a GPU a kDLCUDA tensor is refused with the reason. */
START_TEST(test_dlpack_cuda) {
  float data[4] = {1, 2, 3, 4};
  kiln_scope_begin();
  if (!kiln_cuda_is_available()) {
    producer p;
    produce(&p, data, 1, (const int64_t[]){4}, NULL, 0);
    p.m.dl_tensor.device = (DLDevice){kDLCUDA, 0};
    ck_assert_int_eq(kiln_status_of(kiln_from_dlpack(&p.m)), KILN_ERR_DEVICE);
    ck_assert_ptr_nonnull(strstr(kiln_last_error(), "from_dlpack: CUDA not available: "));
    ck_assert_int_eq(p.deleted, 0);
    fprintf(stderr, "test_dlpack_cuda: no CUDA device (%s): checked the refusal only\n",
            kiln_cuda_unavailable_reason());
  } else {
    kiln_tensor *g = kiln_to(kiln_from_data(data, KILN_F32, KILN_SHAPE(4)), kiln_default_device());
    DLManagedTensor *m = kiln_to_dlpack(kiln_flip(g, KILN_DIMS(0)));
    ck_assert_int_eq(m->dl_tensor.device.device_type, kDLCUDA);
    ck_assert_int_eq(m->dl_tensor.strides[0], -1);
    kiln_tensor *u = kiln_from_dlpack(m);
    ck_assert_int_eq(kiln_device_of(u).type, KILN_CUDA);
    assert_values(kiln_cpu(kiln_muls(u, 2)), (const float[]){8, 6, 4, 2}, 4);
  }
  kiln_scope_end();
}
END_TEST

static Suite *dlpack_suite(void) {
  Suite *s = suite_create("dlpack");
  TCase *tc = tcase_create("dlpack");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_dlpack_export);
  tcase_add_test(tc, test_dlpack_export_view);
  tcase_add_test(tc, test_dlpack_export_errors);
  tcase_add_test(tc, test_dlpack_import);
  tcase_add_test(tc, test_dlpack_round_trip);
  tcase_add_test(tc, test_dlpack_dtypes);
  tcase_add_test(tc, test_dlpack_shapes);
  tcase_add_test(tc, test_dlpack_import_errors);
  tcase_add_test(tc, test_dlpack_import_out_of_memory);
  tcase_add_test(tc, test_dlpack_cuda);
  suite_add_tcase(s, tc);
  return s;
}

KILN_TEST_MAIN(dlpack_suite)
