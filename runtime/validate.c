/* validate.c: KILN_VALIDATE=1 (README.md). After each kernel a device ran,
 * the same kernel IR runs through the CPU back end on host copies of its
 * inputs, and the outputs are compared: the first kernel whose device code
 * disagrees is named, which is how a user bisects a miscompile. It waits
 * for the device and copies every buffer of every kernel: a debugging mode. */
#include "rt_internal.h"
#include "runtime/device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per float dtype: a few units of its precision, relative to the larger
 * magnitude, and a floor for results that cancel to near zero (kernels may
 * sum in another order than the CPU). */
static const struct { double rtol, atol; } float_tol[KILN_NUM_DTYPES] = {
  [KILN_F16] = {4e-3, 1e-4}, [KILN_BF16] = {3e-2, 1e-3}, [KILN_F32] = {1e-4, 1e-6}, [KILN_F64] = {1e-10, 1e-12}};

static bool float_close(double got, double want, kiln_dtype dt) {
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want);
  if (isinf(got) || isinf(want)) return got == want;
  double big = fabs(got) > fabs(want) ? fabs(got) : fabs(want);
  return fabs(got - want) <= float_tol[dt].atol + float_tol[dt].rtol * big;
}

int64_t rt_validate_diff(kiln_dtype dt, const void *got, const void *want, int64_t n) {
  size_t es = ir_dtypes[dt].size;
  for (int64_t i = 0; i < n; i++) {
    const char *g = (const char *)got + (size_t)i * es, *w = (const char *)want + (size_t)i * es;
    bool same = ir_is_float(dt) ? float_close(ir_load_f64(g, dt), ir_load_f64(w, dt), dt)
                                : ir_load_i64(g, dt) == ir_load_i64(w, dt);
    if (!same) return i;
  }
  return -1;
}

/* A host buffer holding b's bytes (a device's, copied out); NULL with the
 * last error set. */
static rt_buffer *host_copy(const rt_buffer *b, kiln_status *st) {
  rt_buffer *h = rt_buffer_alloc(b->bytes);
  const rt_device *d = rt_device_of(b->device);
  if (!h) {
    ir_error_setf("KILN_VALIDATE: out of host memory copying %zu bytes", b->bytes);
    *st = KILN_ERR_MEMORY;
  } else if (!d) {
    memcpy(h->data, b->data, b->bytes);
  } else if ((*st = d->copy_out(h->data, b, 0, b->bytes)) != KILN_OK) {
    rt_buffer_release(h);
    h = NULL;
  }
  return h;
}

static void print_value(char *buf, size_t n, kiln_dtype dt, const void *p) {
  if (ir_is_float(dt)) snprintf(buf, n, "%.9g", ir_load_f64(p, dt));
  else snprintf(buf, n, "%lld", (long long)ir_load_i64(p, dt));
}

/* Output o (parameter p) of the device (got) against the CPU's (want). */
static kiln_status compare(const kernel *k, int o, int p, const rt_buffer *got, const rt_buffer *want) {
  kiln_dtype dt = k->params[p].dtype;
  size_t es = ir_dtypes[dt].size;
  int64_t at = rt_validate_diff(dt, got->data, want->data, (int64_t)(got->bytes / es));
  if (at < 0) return KILN_OK;
  char g[48], w[48];
  print_value(g, sizeof g, dt, (const char *)got->data + (size_t)at * es);
  print_value(w, sizeof w, dt, (const char *)want->data + (size_t)at * es);
  ir_error_setf("KILN_VALIDATE: kernel %s, output %d (%s): element %lld is %s on the device, %s on the CPU", k->name,
                o, ir_dtypes[dt].short_name, (long long)at, g, w);
  return KILN_ERR_COMPILE;
}

kiln_status rt_validate(kernel *k, const int64_t *args, rt_buffer **out, rt_buffer **inputs, int debug) {
  rt_buffer **host = ir_calloc((size_t)k->nparams + 1, sizeof *host), **cpu = ir_calloc((size_t)k->nparams + 1, sizeof *cpu);
  void **bufs = ir_calloc((size_t)k->nparams + 1, sizeof *bufs);
  if (!host || !cpu || !bufs) {
    free(host);
    free(cpu);
    free(bufs);
    ir_error_set("KILN_VALIDATE: out of memory");
    return KILN_ERR_MEMORY;
  }
  kiln_status st = KILN_OK;
  int64_t slot[KC_SLOT_WORDS] = {0};  /* the device found no failure: neither will the CPU */
  /* the device's buffers as host copies; the CPU writes fresh outputs */
  for (int p = 0, o = 0, i = 0; p < k->nparams; p++) {
    const kparam *kp = &k->params[p];
    bufs[p] = kp->status ? (void *)slot : (void *)args;
    if (kp->args || kp->status) continue;
    const rt_buffer *b = kp->output ? out[o++] : inputs[i++];
    if (!(host[p] = host_copy(b, &st))) break;
    if (kp->output && !(cpu[p] = rt_buffer_alloc(b->bytes))) {
      ir_error_setf("KILN_VALIDATE: out of host memory for %zu bytes", b->bytes);
      st = KILN_ERR_MEMORY;
      break;
    }
    bufs[p] = (kp->output ? cpu[p] : host[p])->data;
  }
  ir_str key = {0};
  k_key(k, &key);
  rt_origin origin;
  rt_kernel *code = st == KILN_OK ? rt_kernel_get(k, &key, debug, &origin) : NULL;
  ir_str_free(&key);
  if (st == KILN_OK && !code) st = KILN_ERR_COMPILE;
  if (st == KILN_OK) rt_execute(rt_split_of(k), rt_kernel_fn(code), bufs);
  rt_kernel_release(code);
  for (int p = 0, o = 0; p < k->nparams && st == KILN_OK; p++)
    if (k->params[p].output) st = compare(k, o++, p, host[p], cpu[p]);
  for (int p = 0; p < k->nparams; p++) {
    rt_buffer_release(host[p]);
    rt_buffer_release(cpu[p]);
  }
  free(host);
  free(cpu);
  free(bufs);
  return st;
}
