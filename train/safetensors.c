/* safetensors.c: checkpoints in the safetensors format, on kiln.h's API.
 * Saving realizes the tensors, brings them to the host and writes them
 * through one atomic replace; loading maps the file and lends each tensor
 * its bytes through kiln_from_dlpack, whose deleter keeps the mapping until
 * the last tensor reading it goes (safetensors_header.c parses the header). */
#include "ir/file.h"
#include "train/train.h"

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

/* ---- loading ------------------------------------------------------------- */
/* The file's mapping, shared by the tensors that read it in place. */
typedef struct {
  ir_file_map map;
  int refs;             /* the load's own and one per borrowing tensor; atomic, as tensors die on any thread */
} shared_map;

static void map_release(shared_map *s) {
  if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL)) return;
  ir_file_map_close(&s->map);
  free(s);
}

/* DLPack's types for kiln's dtypes, as kiln_from_dlpack reads them (bool is
 * DLPack 0.8's code 6, which 0.6's header lacks). */
static const DLDataType dl_types[KILN_NUM_DTYPES] = {
    [KILN_BOOL] = {6, 8, 1},         [KILN_U8] = {kDLUInt, 8, 1},     [KILN_I8] = {kDLInt, 8, 1},
    [KILN_I16] = {kDLInt, 16, 1},    [KILN_I32] = {kDLInt, 32, 1},    [KILN_I64] = {kDLInt, 64, 1},
    [KILN_F16] = {kDLFloat, 16, 1},  [KILN_BF16] = {kDLBfloat, 16, 1}, [KILN_F32] = {kDLFloat, 32, 1},
    [KILN_F64] = {kDLFloat, 64, 1},
};

/* One tensor's loan of the mapping. */
typedef struct {
  DLManagedTensor m;    /* first, so that the deleter's argument is the whole block */
  int64_t shape[KILN_MAX_DIMS];
  shared_map *map;
} loan;

static void loan_end(DLManagedTensor *m) {
  loan *b = (loan *)m;
  map_release(b->map);
  free(b);
}

/* The entry's tensor, reading the mapped bytes in place, or a copy of them
 * where they are not aligned to the element size (a writer that does not
 * pad); an empty one holds nothing. NULL out of memory. */
static kiln_tensor *tensor_of(const char *f, int l, const tr_st_entry *e, shared_map *s, size_t data_offset) {
  if (e->end == e->begin) return kiln_from_data_at(f, l, NULL, e->dtype, e->ndim, e->shape);
  const char *p = (const char *)s->map.base + data_offset + e->begin;
  if ((uintptr_t)p % kiln_dtype_size(e->dtype)) return kiln_from_data_at(f, l, p, e->dtype, e->ndim, e->shape);
  loan *b = ir_malloc(sizeof *b);
  if (!b) return NULL;
  memcpy(b->shape, e->shape, sizeof b->shape);
  b->m = (DLManagedTensor){
      .dl_tensor = {.data = (void *)p, .device = {kDLCPU, 0}, .ndim = e->ndim, .dtype = dl_types[e->dtype],
                    .shape = b->shape},
      .deleter = loan_end,
  };
  b->map = s;
  __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
  kiln_tensor *t = kiln_from_dlpack_at(f, l, &b->m);
  if (kiln_status_of(t) != KILN_OK) loan_end(&b->m);   /* a refused loan stays ours */
  return t;
}

/* Fills out from the parsed header: one block holds the tensor, name and
 * metadata lists, then a copy of the header's strings. */
static kiln_status fill(const char *f, int l, const char *path, const tr_st_header *h, shared_map *s,
                        kiln_safetensors *out) {
  char *block = ir_malloc(h->n * (sizeof(kiln_tensor *) + sizeof(char *)) + 2 * h->nmeta * sizeof(char *) +
                          h->strings_len + 1);
  if (!block) {
    ir_error_setf("%s:%d: load_safetensors: '%s': out of memory", f, l, path);
    return KILN_ERR_MEMORY;
  }
  kiln_tensor **ts = (kiln_tensor **)block;
  const char **names = (const char **)(ts + h->n), **meta = names + h->n;
  char *strings = (char *)(meta + 2 * h->nmeta);
  memcpy(strings, h->strings, h->strings_len);
  for (size_t i = 0; i < 2 * h->nmeta; i++) meta[i] = strings + (h->meta[i] - h->strings);
  for (size_t i = 0; i < h->n; i++) {
    names[i] = strings + (h->tensors[i].name - h->strings);
    ts[i] = tensor_of(f, l, &h->tensors[i], s, h->data_offset);
    if (ts[i] && kiln_status_of(ts[i]) == KILN_OK) continue;
    kiln_status st = ts[i] ? kiln_status_of(ts[i]) : KILN_ERR_MEMORY;
    ir_error_setf("%s:%d: load_safetensors: '%s': out of memory making tensor '%.200s'", f, l, path, names[i]);
    for (size_t k = 0; k <= i; k++) kiln_release_at(f, l, ts[k]);
    free(block);
    return st;
  }
  /* a header is at most TR_ST_MAX_HEADER bytes and an entry takes more than
   * 40, so the counts fit an int */
  *out = (kiln_safetensors){.n = (int)h->n, .names = names, .tensors = ts, .nmeta = (int)h->nmeta, .meta = meta,
                            .storage_ = block};
  return KILN_OK;
}

kiln_status kiln_load_safetensors_at(const char *f, int l, const char *path, kiln_safetensors *out) {
  if (out) *out = (kiln_safetensors){0};
  if (!path || !out) {
    ir_error_setf("%s:%d: load_safetensors: %s is NULL", f, l, path ? "out" : "path");
    return KILN_ERR_ARG;
  }
  char why[512] = "out of memory";
  tr_st_header h = {0};
  shared_map *s = ir_malloc(sizeof *s);
  kiln_status st = KILN_ERR_MEMORY;
  if (s) {
    s->refs = 1;
    st = ir_file_map_open(path, &s->map, why, sizeof why) ? tr_st_parse(s->map.base, s->map.len, &h, why, sizeof why)
                                                           : KILN_ERR_IO;
  }
  if (st == KILN_OK) st = fill(f, l, path, &h, s, out);
  else ir_error_setf("%s:%d: load_safetensors: '%s': %s", f, l, path, why);
  tr_st_header_free(&h);
  if (s) map_release(s);
  return st;
}

kiln_tensor *kiln_safetensors_get_at(const char *f, int l, const kiln_safetensors *st, const char *name) {
  if (!st || !name) {
    ir_error_setf("%s:%d: safetensors_get: %s is NULL", f, l, st ? "name" : "the file");
    return NULL;
  }
  for (int i = 0; i < st->n; i++)
    if (!strcmp(st->names[i], name)) return st->tensors[i];
  ir_error_setf("%s:%d: safetensors_get: no tensor is named '%.200s' (the file has %d)", f, l, name, st->n);
  return NULL;
}

void kiln_safetensors_free(kiln_safetensors *st) {
  if (!st) return;
  free(st->storage_);
  *st = (kiln_safetensors){0};
}

/* ---- saving -------------------------------------------------------------- */
static kiln_status arg_error(const char *f, int l, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static kiln_status arg_error(const char *f, int l, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *what = ir_vstrprintf(fmt, ap);
  va_end(ap);
  ir_error_setf("%s:%d: save_safetensors: %s", f, l, what ? what : "invalid arguments");
  free(what);
  return KILN_ERR_ARG;
}

static kiln_status out_of_memory(const char *f, int l, const char *path) {
  ir_error_setf("%s:%d: save_safetensors: '%s': out of memory", f, l, path);
  return KILN_ERR_MEMORY;
}

/* Strings the format can hold: UTF-8, which JSON is written in. */
static bool is_utf8(const char *s) { return tr_utf8_valid(s, strlen(s)); }

/* KILN_OK, or KILN_ERR_ARG naming what is wrong with the lists. */
static kiln_status check_lists(const char *f, int l, const char *path, int n, const char *const *names,
                               kiln_tensor *const *tensors, int nmeta, const char *const *meta) {
  if (!path) return arg_error(f, l, "path is NULL");
  if (n < 0 || nmeta < 0) return arg_error(f, l, "negative count (%d tensors, %d metadata entries)", n, nmeta);
  if ((n && (!names || !tensors)) || (nmeta && !meta))
    return arg_error(f, l, "the list of %s is NULL", !meta && nmeta ? "metadata" : names ? "tensors" : "names");
  for (int i = 0; i < n; i++) {
    if (!names[i] || !tensors[i]) return arg_error(f, l, "%s %d is NULL", names[i] ? "tensor" : "name", i);
    if (!strcmp(names[i], "__metadata__")) return arg_error(f, l, "the name '__metadata__' is the header's metadata");
    if (!is_utf8(names[i])) return arg_error(f, l, "name %d is not UTF-8", i);
  }
  for (int i = 0; i < 2 * nmeta; i++) {
    const char *what = i % 2 ? "value" : "key";
    if (!meta[i]) return arg_error(f, l, "metadata %s %d is NULL", what, i / 2);
    if (!is_utf8(meta[i])) return arg_error(f, l, "metadata %s %d is not UTF-8", what, i / 2);
  }
  const char *dup, *dup_key;
  if (!tr_find_duplicate(names, (size_t)n, 1, &dup) || !tr_find_duplicate(meta, (size_t)nmeta, 2, &dup_key))
    return out_of_memory(f, l, path);
  if (dup) return arg_error(f, l, "the name '%.200s' is given twice", dup);
  if (dup_key) return arg_error(f, l, "the metadata key '%.200s' is given twice", dup_key);
  return KILN_OK;
}

/* The entries and data chunks of the realized host tensors: the widest
 * elements first (in the given order within a width), so that with the
 * header padded to 8 bytes every tensor starts aligned to its element size. */
static kiln_status lay_out(const char *f, int l, const char *path, int n, const char *const *names,
                           kiln_tensor *const *host, tr_st_entry *e, ir_file_chunk *chunks) {
  uint64_t pos = 0;
  int k = 0;
  for (size_t width = 8; width >= 1; width /= 2)
    for (int i = 0; i < n; i++) {
      kiln_dtype dt = kiln_dtype_of(host[i]);
      if (kiln_dtype_size(dt) != width) continue;
      const void *data = kiln_data_at(f, l, host[i]);   /* dense: a strided view gets a compact copy */
      if (!data) return out_of_memory(f, l, path);
      uint64_t bytes = (uint64_t)kiln_numel(host[i]) * width;
      e[i] = (tr_st_entry){.name = names[i], .dtype = dt, .ndim = kiln_ndim(host[i]), .begin = pos, .end = pos + bytes};
      memcpy(e[i].shape, kiln_shape(host[i]), sizeof *e[i].shape * (size_t)e[i].ndim);
      chunks[k++] = (ir_file_chunk){data, bytes};
      pos += bytes;
    }
  return KILN_OK;
}

/* The file from the realized host tensors. */
static kiln_status write_file(const char *f, int l, const char *path, int n, const char *const *names,
                              kiln_tensor *const *host, int nmeta, const char *const *meta) {
  tr_st_entry *e = ir_calloc((size_t)n + 1, sizeof *e);
  ir_file_chunk *chunks = ir_calloc((size_t)n + 1, sizeof *chunks);
  ir_str hdr = {0};
  kiln_status st = e && chunks ? lay_out(f, l, path, n, names, host, e, chunks + 1) : out_of_memory(f, l, path);
  if (st == KILN_OK) {
    tr_st_header_write(&hdr, e, (size_t)n, meta, (size_t)nmeta);
    if (hdr.failed) st = out_of_memory(f, l, path);
  }
  if (st == KILN_OK) {
    chunks[0] = (ir_file_chunk){hdr.s, hdr.len};
    st = ir_file_replace(f, l, "save_safetensors", path, chunks, (size_t)n + 1);
  }
  ir_str_free(&hdr);
  free(chunks);
  free(e);
  return st;
}

kiln_status kiln_save_safetensors_at(const char *f, int l, const char *path, int n, const char *const *names,
                                     kiln_tensor *const *tensors, int nmeta, const char *const *meta) {
  kiln_status st = check_lists(f, l, path, n, names, tensors, nmeta, meta);
  if (st != KILN_OK) return st;
  kiln_tensor **host = ir_calloc((size_t)n + 1, sizeof *host);
  if (!host) return out_of_memory(f, l, path);
  for (int i = 0; i < n; i++) host[i] = kiln_cpu_at(f, l, tensors[i]);   /* the tensor itself on the CPU */
  st = kiln_realize_n_at(f, l, n, host);   /* together: what their graphs share is computed once */
  if (st == KILN_OK) st = write_file(f, l, path, n, names, host, nmeta, meta);
  for (int i = 0; i < n; i++) kiln_release_at(f, l, host[i]);
  free(host);
  return st;
}
