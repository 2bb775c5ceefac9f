/* npy.c: tensors to and from NumPy's .npy files (npy_header.c parses and
 * writes the header). A C-ordered little-endian file is mapped and its data
 * borrowed in place, the mapping held as long as a buffer reads it; Fortran
 * order and big-endian data are copied into C-ordered native values. */
#include "frontend/frontend.h"
#include "runtime/rt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- loading -------------------------------------------------------------- */
typedef struct {
  void *base;
  size_t len;
} mapping;

static void unmap(void *ctx) {
  mapping *m = ctx;
  munmap(m->base, m->len);
  free(m);
}

/* The whole file mapped read-only (base NULL for an empty file); false with
 * the system's reason in why. */
static bool map_file(const char *path, mapping *m, char *why, size_t why_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  const char *what = fd < 0 ? "cannot open" : fstat(fd, &st) ? "cannot stat" : NULL;
  if (!what && !S_ISREG(st.st_mode)) {
    snprintf(why, why_len, "not a regular file");
    close(fd);
    return false;
  }
  *m = (mapping){.len = what ? 0 : (size_t)st.st_size};
  if (!what && m->len && (m->base = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
    m->base = NULL;
    what = "cannot map";
  }
  if (what) snprintf(why, why_len, "%s: %s", what, strerror(errno));
  if (fd >= 0) close(fd);
  return !what;
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
    fe_copy_strided(buf->data, src, h->elem_size, h->ndim, h->shape, strides);
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
  mapping m;
  fe_npy_header h;
  if (!map_file(path, &m, why, sizeof why)) return fe_error(KILN_ERR_IO, f, l, "load_npy: '%s': %s", path, why);
  if (!fe_npy_parse(m.base, m.len, &h, why, sizeof why)) {
    if (m.base) munmap(m.base, m.len);
    return fe_error(KILN_ERR_IO, f, l, "load_npy: '%s': %s", path, why);
  }
  const char *src = (const char *)m.base + h.data_offset;
  mapping *keep = borrowable(&h) ? ir_malloc(sizeof *keep) : NULL;
  rt_buffer *buf = keep ? rt_buffer_lend((void *)src, h.data_bytes, kiln_cpu_device(), unmap, keep)
                        : copy_data(&h, src);
  if (keep && buf) *keep = m;
  else {
    free(keep);
    if (m.base) munmap(m.base, m.len);
  }
  if (!buf) return fe_error(KILN_ERR_MEMORY, f, l, "load_npy: '%s': out of memory allocating %zu bytes", path, h.data_bytes);
  return fe_buffer_node(f, l, "load_npy", buf, h.dtype, h.ndim, h.shape);
}

/* ---- saving --------------------------------------------------------------- */
/* The header, then the data, into a new file beside path that then replaces
 * it: a tensor still mapping the old file keeps reading it (truncating a
 * mapped file in place would crash its readers). A file that could not be
 * written whole is removed. */
static kiln_status write_file(const char *f, int l, const char *path, const char *hdr, size_t hlen,
                              const void *data, size_t bytes) {
  static unsigned counter;
  ir_str tmp = {0};
  ir_str_printf(&tmp, "%s.kiln-%d-%u.tmp", path, (int)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
  if (tmp.failed) {
    ir_error_setf("%s:%d: save_npy: out of memory", f, l);
    return KILN_ERR_MEMORY;
  }
  int fd = open(tmp.s, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
  bool ok = fp && fwrite(hdr, 1, hlen, fp) == hlen && fwrite(data, 1, bytes, fp) == bytes;
  int err = errno;
  if (!fp && fd >= 0) close(fd);
  if (fp && fclose(fp) && ok) ok = false, err = errno;
  if (ok && rename(tmp.s, path)) ok = false, err = errno;
  if (!ok && fd >= 0) unlink(tmp.s);
  ir_str_free(&tmp);
  if (ok) return KILN_OK;
  ir_error_setf("%s:%d: save_npy: '%s': cannot write: %s", f, l, path, strerror(err));
  return KILN_ERR_IO;
}

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
  if (st == KILN_OK)
    st = write_file(f, l, path, hdr, hlen, data, (size_t)ir_numel(t->ndim, t->shape) * ir_dtypes[t->dtype].size);
  fe_drop(host);
  return st;
}
