/* npy.c: tensors to and from NumPy's .npy files (npy_header.c parses and
 * writes the header). A C-ordered little-endian file is mapped and its data
 * borrowed in place, the mapping held as long as a buffer reads it; Fortran
 * order and big-endian data are copied into C-ordered native values. */
#include "frontend/frontend.h"
#include "ir/file.h"
#include "runtime/rt.h"

#include <stdlib.h>
#include <string.h>

/* ---- loading -------------------------------------------------------------- */
static void unmap(void *ctx) {
  ir_file_map_close(ctx);
  free(ctx);
}

static void swap_bytes(char *p, size_t n, size_t es) {
  for (size_t i = 0; i < n; i += es)
    for (size_t a = i, b = i + es - 1; a < b; a++, b--) {
      char t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

/* The data copied into a fresh buffer in C order and native byte order. */
static rt_buffer *copy_data(const fe_npy_header *h, const char *src) {
  rt_buffer *buf = rt_buffer_alloc(h->data_bytes ? h->data_bytes : 1);  /* every BUFFER owns memory */
  if (!buf || !h->data_bytes) return buf;
  if (h->fortran) {   /* the first index varies fastest; products stay below numel */
    int64_t strides[KILN_MAX_DIMS];
    for (int d = 0; d < h->ndim; d++) strides[d] = d ? strides[d - 1] * h->shape[d - 1] : 1;
    ir_copy_view(buf->data, NULL, src, strides, h->elem_size, h->ndim, h->shape);
  } else {
    memcpy(buf->data, src, h->data_bytes);
  }
  if (h->big_endian) swap_bytes(buf->data, h->data_bytes, h->elem_size);
  return buf;
}

/* The mapped data as it lies, when kiln can read it so: C order (one dim
 * is both orders), native byte order, elements aligned. */
static bool borrowable(const fe_npy_header *h) {
  return !h->big_endian && (!h->fortran || h->ndim <= 1) && h->data_bytes > 0 && h->data_offset % h->elem_size == 0;
}

kiln_tensor *kiln_load_npy_at(const char *f, int l, const char *path) {
  if (!path) return fe_error(KILN_ERR_ARG, f, l, "load_npy: path is NULL");
  char why[256];
  ir_file_map m;
  fe_npy_header h;
  if (!ir_file_map_open(path, &m, why, sizeof why) || !fe_npy_parse(m.base, m.len, &h, why, sizeof why)) {
    ir_file_map_close(&m);
    return fe_error(KILN_ERR_IO, f, l, "load_npy: '%s': %s", path, why);
  }
  const char *src = (const char *)m.base + h.data_offset;
  ir_file_map *keep = borrowable(&h) ? ir_malloc(sizeof *keep) : NULL;
  rt_buffer *buf = keep ? rt_buffer_lend((void *)src, h.data_bytes, kiln_cpu_device(), unmap, keep)
                        : copy_data(&h, src);
  if (keep && buf) *keep = m;
  else {
    free(keep);
    ir_file_map_close(&m);
  }
  if (!buf) return fe_error(KILN_ERR_MEMORY, f, l, "load_npy: '%s': out of memory allocating %zu bytes", path, h.data_bytes);
  return fe_buffer_node(f, l, "load_npy", buf, h.dtype, h.ndim, h.shape);
}

/* ---- saving --------------------------------------------------------------- */
kiln_status kiln_save_npy_at(const char *f, int l, kiln_tensor *t, const char *path) {
  if (!t || !path) {
    ir_error_setf("%s:%d: save_npy: %s is NULL", f, l, t ? "path" : "tensor");
    return KILN_ERR_ARG;
  }
  if (t->status != KILN_OK) return kiln_status_of(t);
  char hdr[FE_NPY_HEADER_MAX];
  size_t hlen = fe_npy_header_write(hdr, t->dtype, t->ndim, t->shape);
  if (!hlen) {
    ir_error_setf("%s:%d: save_npy: %s has no NumPy dtype; cast it to float32 first (kiln_cast)", f, l,
                  ir_dtypes[t->dtype].name);
    return KILN_ERR_DTYPE;
  }
  kiln_tensor *host = kiln_cpu_at(f, l, t);   /* t itself when it is on the CPU */
  const void *data;
  kiln_status st = fe_host_data(f, l, "save_npy", host, &data);
  size_t bytes = (size_t)ir_numel(t->ndim, t->shape) * ir_dtypes[t->dtype].size;
  if (st == KILN_OK)   /* replaced, not rewritten: a tensor mapping the old file keeps reading it */
    st = ir_file_replace(f, l, "save_npy", path, (const ir_file_chunk[]){{hdr, hlen}, {data, bytes}}, 2);
  fe_drop(host);
  return st;
}
