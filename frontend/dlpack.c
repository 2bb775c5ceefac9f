/* dlpack.c: tensors exchanged with other frameworks (NumPy, PyTorch, JAX,
 * CuPy) through DLPack 0.6's DLManagedTensor, both ways without a copy.
 * Export hands out a realized tensor's buffer, held until the consumer calls
 * the deleter; import lends the producer's memory to a BUFFER node, and the
 * buffer calls the producer's deleter when kiln's last reference goes. */
#include "frontend/frontend.h"
#include "runtime/device.h"

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

/* DLPack 0.8's code for bool, one byte per element: 0.6 has none, and
 * PyTorch and NumPy >= 1.25 use this one. */
#define DL_BOOL 6

static const DLDataType dl_types[KILN_NUM_DTYPES] = {
    [KILN_BOOL] = {DL_BOOL, 8, 1},   [KILN_U8] = {kDLUInt, 8, 1},     [KILN_I8] = {kDLInt, 8, 1},
    [KILN_I16] = {kDLInt, 16, 1},    [KILN_I32] = {kDLInt, 32, 1},    [KILN_I64] = {kDLInt, 64, 1},
    [KILN_F16] = {kDLFloat, 16, 1},  [KILN_BF16] = {kDLBfloat, 16, 1}, [KILN_F32] = {kDLFloat, 32, 1},
    [KILN_F64] = {kDLFloat, 64, 1},
};

/* ---- export --------------------------------------------------------------- */
typedef struct {
  DLManagedTensor m;    /* first, so the deleter's argument is the whole block */
  int64_t shape[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
} exported;

static void export_delete(DLManagedTensor *m) {
  rt_buffer_release(m->manager_ctx);
  free(m);
}

static char no_data[1];   /* the data of an empty tensor, which may have no buffer */

struct DLManagedTensor *kiln_to_dlpack_at(const char *f, int l, kiln_tensor *t) {
  if (!t) {
    ir_error_setf("%s:%d: to_dlpack: argument is NULL", f, l);
    return NULL;
  }
  if (kiln_realize_at(f, l, t) != KILN_OK) return NULL;
  const rt_device *dev = rt_device_of(t->device);
  if (dev && dev->sync(t->device.index) != KILN_OK) return NULL;   /* the consumer reads on a stream of its own */
  exported *e = ir_malloc(sizeof *e);
  if (!e) {
    ir_error_setf("%s:%d: to_dlpack: out of memory", f, l);
    return NULL;
  }
  e->m.dl_tensor = (DLTensor){
      .data = t->buf ? t->buf->data : no_data,
      .device = {t->device.type == KILN_CUDA ? kDLCUDA : kDLCPU, t->device.index},
      .ndim = t->ndim,
      .dtype = dl_types[t->dtype],
      .shape = e->shape,
      .strides = e->strides,
      .byte_offset = (uint64_t)t->offset * ir_dtypes[t->dtype].size,
  };
  memcpy(e->shape, t->shape, sizeof e->shape);
  memcpy(e->strides, t->strides, sizeof e->strides);
  rt_buffer_retain(t->buf);   /* the buffer, not the node: kiln_data may give the node a new one */
  e->m.manager_ctx = t->buf;
  e->m.deleter = export_delete;
  return &e->m;
}

/* ---- import --------------------------------------------------------------- */
static void import_release(void *ctx) {
  DLManagedTensor *m = ctx;
  if (m->deleter) m->deleter(m);
}

static kiln_dtype dtype_of(DLDataType t) {
  for (int d = 0; d < KILN_NUM_DTYPES; d++)
    if (t.code == dl_types[d].code && t.bits == dl_types[d].bits && t.lanes == 1) return (kiln_dtype)d;
  return KILN_NUM_DTYPES;
}

/* NULL and the kiln device of d, or the error node. Pinned host memory
 * (kDLCUDAHost) is host memory to kiln. */
static ir_node *device_of(const char *f, int l, DLDevice d, kiln_device *out) {
  char why[256];
  if (d.device_type == kDLCPU || d.device_type == kDLCUDAHost) {
    *out = kiln_cpu_device();
    return NULL;
  }
  if (d.device_type != kDLCUDA)
    return fe_error(KILN_ERR_DEVICE, f, l, "from_dlpack: unsupported DLPack device type %d", (int)d.device_type);
  if (!rt_cuda_usable(d.device_id, why, sizeof why))
    return fe_error(KILN_ERR_DEVICE, f, l, "from_dlpack: CUDA not available: %s", why);
  *out = (kiln_device){KILN_CUDA, d.device_id};
  return NULL;
}

/* The elements a non-empty view reaches, lo <= 0 <= hi from its first; false
 * when a reach does not fit int64. */
static bool span_of(int ndim, const int64_t *shape, const int64_t *strides, int64_t *lo, int64_t *hi) {
  *lo = *hi = 0;
  for (int d = 0; d < ndim; d++) {
    int64_t reach;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) ||
        __builtin_add_overflow(reach < 0 ? *lo : *hi, reach, reach < 0 ? lo : hi))
      return false;
  }
  return true;
}

/* The bytes of the memory the view reads, after checking its layout. */
static ir_node *check_layout(const char *f, int l, const DLTensor *t, kiln_dtype dt, const int64_t *strides,
                             int64_t *lo, size_t *bytes) {
  size_t es = ir_dtypes[dt].size;
  int64_t hi;
  *lo = 0;
  *bytes = 0;
  if (ir_numel(t->ndim, t->shape) == 0) return NULL;
  if (!t->data) return fe_error(KILN_ERR_ARG, f, l, "from_dlpack: data is NULL");
  if (((uintptr_t)t->data + t->byte_offset) % es)
    return fe_error(KILN_ERR_ARG, f, l, "from_dlpack: data + byte_offset is not aligned to %s's %zu bytes",
                    ir_dtypes[dt].name, es);
  if (!span_of(t->ndim, t->shape, strides, lo, &hi) || __builtin_mul_overflow((size_t)(hi - *lo) + 1, es, bytes))
    return fe_error(KILN_ERR_SHAPE, f, l, "from_dlpack: the strides reach beyond what memory can hold");
  return NULL;
}

kiln_tensor *kiln_from_dlpack_at(const char *f, int l, struct DLManagedTensor *m) {
  if (!m) return fe_error(KILN_ERR_ARG, f, l, "from_dlpack: argument is NULL");
  const DLTensor *t = &m->dl_tensor;
  ir_node *e = fe_check_shape(f, l, "from_dlpack", t->ndim, t->shape);
  if (e) return e;
  kiln_dtype dt = dtype_of(t->dtype);
  if (dt == KILN_NUM_DTYPES)
    return fe_error(KILN_ERR_DTYPE, f, l, "from_dlpack: unsupported DLPack dtype (code %d, %d bits, %d lanes)",
                    t->dtype.code, t->dtype.bits, t->dtype.lanes);
  kiln_device dev;
  if ((e = device_of(f, l, t->device, &dev))) return e;
  int64_t strides[KILN_MAX_DIMS], lo;
  size_t bytes;
  if (t->strides) memcpy(strides, t->strides, sizeof *strides * (size_t)t->ndim);
  else ir_contiguous_strides(t->ndim, t->shape, strides);   /* NULL strides: compact row-major */
  if ((e = check_layout(f, l, t, dt, strides, &lo, &bytes))) return e;
  char *first = bytes ? (char *)t->data + t->byte_offset + lo * (int64_t)ir_dtypes[dt].size : no_data;
  /* the deleter goes on once the node holds the buffer: a node that cannot be
   * made frees the buffer, and m must then stay the caller's */
  rt_buffer *buf = rt_buffer_lend(first, bytes, dev, NULL, NULL);
  if (!buf) return fe_error(KILN_ERR_MEMORY, f, l, "from_dlpack: out of memory");
  ir_node *n = fe_buffer_node(f, l, "from_dlpack", buf, dt, t->ndim, t->shape);
  if (n->status != KILN_OK) return n;
  buf->on_release = import_release;
  buf->release_ctx = m;
  memcpy(n->strides, strides, sizeof *strides * (size_t)t->ndim);
  n->offset = -lo;
  n->device = dev;
  return n;
}
