/* assign.c: in-place updates with value semantics (kiln_assign). A tensor
 * that may be assigned is marked, and every pending node built on it from
 * then on reads it through a snapshot of its storage (ir_node_new_taking);
 * an assignment computes the new value, hands the snapshot a copy of the
 * old contents when something still reads it (rt_buffer_preserve), then
 * writes the value into the storage itself, where views of the tensor and
 * the memory a kiln_from_buffer tensor borrows see it. */
#include "frontend/frontend.h"
#include "runtime/rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fe_mark_assignable(ir_node *t) {
  if (t->op == IR_BUFFER) t->assignable = true;
}

/* "float32 (2,3)" of t into a message. */
static kiln_status assign_fail(const char *f, int l, kiln_status st, const char *why, const ir_node *dst,
                               const ir_node *value) {
  ir_str a = {0}, b = {0};
  fe_describe(&a, dst);
  if (value) fe_describe(&b, value);
  ir_error_setf("%s:%d: assign: %s (dst: %s%s%s)", f, l, why, a.s ? a.s : "?", value ? ", value: " : "",
                value && b.s ? b.s : "");
  ir_str_free(&a);
  ir_str_free(&b);
  return st;
}

/* Whether b holds exactly n's elements, contiguously, and nothing else
 * reads it: its storage can be handed over instead of copied. */
static bool sole_owner(const ir_node *n, size_t bytes) {
  const rt_buffer *b = n->buf;
  return b && !b->borrowed && __atomic_load_n(&b->refs, __ATOMIC_ACQUIRE) == 1 && !n->offset && b->bytes == bytes &&
         ir_node_is_contiguous(n);
}

/* v (realized, dst's shape and dtype) into dst's storage: when both own
 * their storage alone (no view or snapshot reads dst's, no borrowed
 * memory) and nothing will read v after (take), v's storage becomes dst's,
 * with no copy. */
static kiln_status write_into(const char *f, int l, ir_node *dst, ir_node *v, bool take) {
  size_t bytes_of = (size_t)ir_numel(dst->ndim, dst->shape) * ir_dtypes[dst->dtype].size;
  if (v->buf == dst->buf && v->offset == dst->offset && !memcmp(v->strides, dst->strides, sizeof(int64_t) * (size_t)dst->ndim))
    return KILN_OK;   /* its own value */
  if (take && sole_owner(dst, bytes_of) && sole_owner(v, bytes_of)) {
    rt_buffer *old = dst->buf;
    rt_buffer_retain(dst->buf = v->buf);
    rt_buffer_release(old);
    return KILN_OK;
  }
  kiln_status st = rt_copy_view(dst->buf, dst->strides, dst->offset, v->buf, v->strides, v->offset, ir_dtypes[dst->dtype].size,
                                dst->ndim, dst->shape);
  if (st != KILN_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    assign_fail(f, l, st, why, dst, v);
  }
  return st;
}

kiln_status fe_assign(const char *f, int l, kiln_tensor *dst, kiln_tensor *value, bool take, bool defer) {
  if (fe_bad_handle(f, l, "assign", dst) || fe_bad_handle(f, l, "assign", value)) return KILN_ERR_ARG;
  if (dst->status != KILN_OK || value->status != KILN_OK) {
    ir_node *e = dst->status != KILN_OK ? dst : value;
    ir_error_set(ir_node_msg(e));   /* errors are sticky */
    return e->status;
  }
  if (dst->symbolic)
    return assign_fail(f, l, KILN_ERR_ARG, "a placeholder has no storage to write", dst, value);
  if (dst->device.type != value->device.type || dst->device.index != value->device.index)
    return assign_fail(f, l, KILN_ERR_DEVICE, "dst and value are on different devices", dst, value);
  kiln_status st = dst->op == IR_BUFFER ? KILN_OK : kiln_realize_at(f, l, dst);   /* storage to write into */
  if (st != KILN_OK) return st;
  fe_mark_assignable(dst);
  const char *prev = ir_api_push("assign");
  ir_node *e = kiln_expand_at(f, l, value, dst->ndim, dst->shape), *v = kiln_cast_at(f, l, e, dst->dtype);
  fe_drop(e);
  ir_api_pop(prev);
  if (v->status == KILN_OK && (v->symbolic || defer)) {   /* part of the function kiln_compile makes next */
    ir_node_retain(dst);
    ir_node_retain(v);   /* the list's; the handle's goes below */
    st = ir_assign_record(dst, v) ? KILN_OK : assign_fail(f, l, KILN_ERR_MEMORY, "out of memory", dst, value);
    fe_drop(v);
    return st;
  }
  st = kiln_realize_at(f, l, v);   /* the new value, read from the old (dst's snapshot) */
  if (st == KILN_OK) st = rt_buffer_preserve(dst->buf);
  if (st == KILN_OK) st = write_into(f, l, dst, v, take || v != value);   /* a cast or broadcast of value is ours */
  fe_drop(v);
  if (st == KILN_OK) {   /* data now: what it was computed from no longer describes it */
    ir_node_release(dst->hist);
    dst->hist = NULL;
    dst->hist_cut = false;
  }
  return st;
}

kiln_status kiln_assign_at(const char *f, int l, kiln_tensor *dst, kiln_tensor *value) {
  return fe_assign(f, l, dst, value, false, false);
}
