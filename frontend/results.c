/* results.c: where laziness ends. Realizing (error nodes surface here),
 * copying out by strides, item, data, and the PyTorch-style string form. */
#include "frontend/frontend.h"
#include "runtime/rt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The error of a NULL or error handle (and sets the last error), else KILN_OK. */
static kiln_status surface(const char *f, int l, const char *op, kiln_tensor *t) {
  if (fe_bad_handle(f, l, op, t)) return KILN_ERR_ARG;
  if (t->status != KILN_OK) ir_error_set(ir_node_msg(t));
  if (t->status == KILN_OK && t->symbolic) {
    ir_error_setf("%s:%d: %s: the tensor reads a placeholder and has no value: compile it with kiln_compile "
                  "and run it with kiln_fn_run", f, l, op);
    return KILN_ERR_ARG;
  }
  return t->status;
}

kiln_status kiln_realize_at(const char *f, int l, kiln_tensor *t) {
  kiln_status st = surface(f, l, "realize", t);
  if (st != KILN_OK || t->op == IR_BUFFER) return st;
  return rt_realize(1, &t);
}

kiln_status kiln_realize_n_at(const char *f, int l, int n, kiln_tensor *const *ts) {
  if (fe_bad_list(f, l, "realize_n", "the list of tensors", n, ts)) return KILN_ERR_ARG;
  if (n < 0) {
    ir_error_setf("%s:%d: realize_n: invalid list of %d tensors", f, l, n);
    return KILN_ERR_ARG;
  }
  for (int i = 0; i < n; i++) {
    if (!ts[i] || !ir_node_live(ts[i])) {
      ir_error_setf("%s:%d: realize_n: tensor %d %s", f, l, i, ts[i] ? FE_FREED_MSG : "is NULL");
      return KILN_ERR_ARG;
    }
    if (ts[i]->status != KILN_OK) return surface(f, l, "realize_n", ts[i]);
  }
  return n ? rt_realize(n, ts) : KILN_OK;
}

/* ---- host data ---------------------------------------------------------- */
/* A realized CPU tensor, or its error (a NULL t named by the reader op). */
static kiln_status realize_on_host(const char *f, int l, const char *op, kiln_tensor *t) {
  kiln_status st = surface(f, l, op, t);
  if (st == KILN_OK && t->op != IR_BUFFER) st = rt_realize(1, &t);
  if (st != KILN_OK) return st;
  IR_ASSERT(t->op == IR_BUFFER);   /* what realize promises */
  if (t->device.type == KILN_CPU) return KILN_OK;
  char d[24];
  ir_error_setf("%s:%d: %s: tensor is on %s; copy it to the CPU with kiln_cpu first", f, l, op,
                fe_device_name(t->device, d));
  return KILN_ERR_DEVICE;
}

/* An empty tensor may hold no buffer at all: its data is any valid pointer. */
static const char *buffer_base(const ir_node *t) {
  static const char no_data[1];
  if (!t->buf) return no_data;
  return (const char *)t->buf->data + t->offset * (int64_t)ir_dtypes[t->dtype].size;
}

kiln_status kiln_copy_to_host_at(const char *f, int l, kiln_tensor *t, void *dst, size_t dst_bytes) {
  kiln_status st = realize_on_host(f, l, "copy_to_host", t);
  if (st != KILN_OK) return st;
  size_t es = ir_dtypes[t->dtype].size, need = (size_t)ir_numel(t->ndim, t->shape) * es;
  if (!dst && need) {
    ir_error_setf("%s:%d: copy_to_host: the destination is NULL (%zu bytes given, %zu needed)", f, l, dst_bytes, need);
    return KILN_ERR_ARG;
  }
  if (dst_bytes < need) {
    ir_str b = {0};
    fe_describe(&b, t);
    ir_error_setf("%s:%d: copy_to_host: destination has %zu bytes, a %s tensor needs %zu", f, l, dst_bytes,
                  b.s ? b.s : "", need);
    ir_str_free(&b);
    return KILN_ERR_ARG;
  }
  ir_copy_view(dst, NULL, buffer_base(t), t->strides, es, t->ndim, t->shape);
  return KILN_OK;
}

/* ---- item --------------------------------------------------------------- */
double kiln_item_at(const char *f, int l, kiln_tensor *t) {
  if (surface(f, l, "item", t) != KILN_OK) return NAN;
  int64_t numel = ir_numel(t->ndim, t->shape);
  if (numel != 1) {
    ir_error_setf("%s:%d: item: a tensor with %lld elements cannot be converted to a scalar", f, l,
                  (long long)numel);
    return NAN;
  }
  if (realize_on_host(f, l, "item", t) != KILN_OK) return NAN;
  return ir_load_f64(buffer_base(t), t->dtype);   /* one element: strides do not matter */
}

/* ---- data --------------------------------------------------------------- */
/* Makes t's buffer dense so its data can be handed out. A tensor is a
 * value, so replacing its buffer by a compact copy changes nothing visible. */
static kiln_status make_contiguous(const char *f, int l, kiln_tensor *t) {
  if (ir_node_is_contiguous(t)) return KILN_OK;
  size_t es = ir_dtypes[t->dtype].size, bytes = (size_t)ir_numel(t->ndim, t->shape) * es;
  rt_buffer *buf = rt_buffer_alloc(bytes);
  if (!buf) {
    ir_error_setf("%s:%d: data: out of memory allocating %zu bytes for a contiguous copy", f, l, bytes);
    return KILN_ERR_MEMORY;
  }
  ir_copy_view(buf->data, NULL, buffer_base(t), t->strides, es, t->ndim, t->shape);
  ir_node_set_buffer(t, buf);
  return KILN_OK;
}

kiln_status fe_host_data(const char *f, int l, const char *op, kiln_tensor *t, const void **data) {
  kiln_status st = realize_on_host(f, l, op, t);
  if (st == KILN_OK) st = make_contiguous(f, l, t);
  *data = st == KILN_OK ? buffer_base(t) : NULL;
  return st;
}

const void *kiln_data_at(const char *f, int l, kiln_tensor *t) {
  const void *data;
  fe_host_data(f, l, "data", t, &data);
  return data;
}

/* ---- text --------------------------------------------------------------- */
static kiln_status format_tensor(const char *f, int l, const char *op, kiln_tensor *t, char **out) {
  const void *data;
  kiln_status st = fe_host_data(f, l, op, t, &data);
  *out = st == KILN_OK ? fe_format(data, t->dtype, t->ndim, t->shape, t->device) : NULL;
  if (st != KILN_OK || *out) return st;
  ir_error_setf("%s:%d: %s: out of memory", f, l, op);
  return KILN_ERR_MEMORY;
}

/* NULL (and the last error) when t cannot be computed. */
char *kiln_to_string_at(const char *f, int l, kiln_tensor *t) {
  char *s;
  format_tensor(f, l, "to_string", t, &s);
  return s;
}

/* What cannot be computed prints as its error, where the tensor would be. */
kiln_status kiln_print_at(const char *f, int l, kiln_tensor *t) {
  char *s;
  kiln_status st = format_tensor(f, l, "print", t, &s);
  if (st == KILN_OK) puts(s);
  else printf("error: %s\n", kiln_last_error());
  free(s);
  return st;
}
