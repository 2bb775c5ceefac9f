/* device.c: moving a tensor to another device. A transfer is a lazy TO node
 * (ir/ops.def) whose device is the destination: nothing is copied until a
 * result is asked for, and then realize runs it as a copy, not a kernel.
 * Whether the destination can be used is checked here, when the user builds
 * the transfer, so the error names their line. */
#include "frontend/frontend.h"
#include "runtime/device.h"

ir_node *fe_check_device(const char *f, int l, const char *op, kiln_device dev) {
  char why[256];
  if ((dev.type != KILN_CPU && dev.type != KILN_CUDA) || (dev.type == KILN_CPU && dev.index != 0))
    return fe_error(KILN_ERR_ARG, f, l, "%s: invalid device (type %d, index %d)", op, (int)dev.type, dev.index);
  if (dev.type == KILN_CUDA && !rt_cuda_usable(dev.index, why, sizeof why))
    return fe_error(KILN_ERR_DEVICE, f, l, "%s: CUDA not available: %s", op, why);
  return NULL;
}

kiln_tensor *kiln_to_at(const char *f, int l, kiln_tensor *t, kiln_device dev) {
  ir_node *e = fe_check_arg(f, l, "to", t, 1);
  if (!e) e = fe_check_device(f, l, "to", dev);
  if (e) return e;
  if (t->device.type == dev.type && t->device.index == dev.index) return fe_same(t);
  ir_node *n = ir_node_new(IR_TO, t->dtype, t->ndim, t->shape, 1, &t, f, l);
  if (!n) return fe_nomem();
  n->device = dev;
  return fe_finish(n);
}

kiln_tensor *kiln_cpu_at(const char *f, int l, kiln_tensor *t) {
  return kiln_to_at(f, l, t, (kiln_device){KILN_CPU, 0});
}
