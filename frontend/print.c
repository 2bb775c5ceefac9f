/* print.c: PyTorch's tensor repr (torch/_tensor_str.py) for contiguous host
 * data: one formatter sizes every element to a common width and picks the
 * float style (integral "1.", fixed "0.1000" or scientific "1.0000e+10");
 * tensors over threshold elements show edgeitems per dim around "...".
 * The print options and their defaults are PyTorch's set_printoptions. */
#include "frontend/frontend.h"
#include "runtime/rt.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PRECISION 100  /* keeps one element within ELEM_MAX */
#define ELEM_MAX 512       /* "%.100f" of 1e308 (sci_mode off) and a sign fit */
#define PREFIX "tensor("
#define INDENT 7  /* strlen(PREFIX) */

typedef struct {
  const void *data;
  kiln_dtype dt;
  int ndim;
  const int64_t *shape;
  int64_t strides[KILN_MAX_DIMS];  /* contiguous, in elements */
  kiln_printoptions o;  /* as they were when printing began */
  bool summarize;       /* numel > o.threshold: only edge items are shown */
  /* _Formatter state */
  bool int_mode;        /* floats: every finite value is integral */
  bool sci_mode;
  double abs_min, abs_max;  /* over nonzero finite values; abs_max 0 if none */
  int width;            /* widest formatted element */
} printer;

/* ---- element access ----------------------------------------------------- */
static double elem_f64(const printer *p, int64_t i) {
  return ir_load_f64((const char *)p->data + (size_t)i * ir_dtypes[p->dt].size, p->dt);
}

static int64_t elem_i64(const printer *p, int64_t i) {
  return ir_load_i64((const char *)p->data + (size_t)i * ir_dtypes[p->dt].size, p->dt);
}

/* ---- one element, unpadded (Python's format of the item) ---------------- */
static void float_text(const printer *p, double v, char *buf, size_t len) {
  if (isnan(v))
    snprintf(buf, len, "nan");  /* Python never prints "-nan" */
  else if (isinf(v))
    snprintf(buf, len, v < 0 ? "-inf" : "inf");
  else if (p->sci_mode)
    snprintf(buf, len, "%.*e", p->o.precision, v);
  else if (p->int_mode)
    snprintf(buf, len, "%.0f.", v);
  else
    snprintf(buf, len, "%.*f", p->o.precision, v);
}

static void elem_text(const printer *p, int64_t i, char *buf, size_t len) {
  if (ir_is_float(p->dt))
    float_text(p, elem_f64(p, i), buf, len);
  else if (p->dt == KILN_BOOL)
    snprintf(buf, len, elem_i64(p, i) ? "True" : "False");
  else
    snprintf(buf, len, "%lld", (long long)elem_i64(p, i));
}

/* ---- the elements PyTorch shows (get_summarized_data) ------------------- */
typedef void (*elem_visit)(printer *p, int64_t i);

/* Indices shown along a dim of size n: all, or the first and last edgeitems. */
static bool dim_skips(const printer *p, int64_t n) { return p->summarize && n > 2 * (int64_t)p->o.edgeitems; }
static int64_t dim_next(const printer *p, int64_t n, int64_t j) {
  return dim_skips(p, n) && j == p->o.edgeitems - 1 ? n - p->o.edgeitems : j + 1;
}

static void visit_shown(printer *p, int d, int64_t base, elem_visit fn) {
  if (d == p->ndim) {
    fn(p, base);
    return;
  }
  for (int64_t j = 0; j < p->shape[d]; j = dim_next(p, p->shape[d], j))
    visit_shown(p, d + 1, base + j * p->strides[d], fn);
}

/* ---- _Formatter: style and width from the shown elements --------------- */
static void scan_float(printer *p, int64_t i) {
  double v = elem_f64(p, i), a = fabs(v);
  if (!isfinite(v) || v == 0) return;
  if (v != ceil(v)) p->int_mode = false;
  if (p->abs_max == 0 || a < p->abs_min) p->abs_min = a;
  if (a > p->abs_max) p->abs_max = a;
}

/* Widths come from nonzero finite values only for floats (as in PyTorch:
 * "nan" may stick out); integers and bools count every element. */
static void scan_width(printer *p, int64_t i) {
  if (ir_is_float(p->dt)) {
    double v = elem_f64(p, i);
    if (!isfinite(v) || v == 0) return;
  }
  char buf[ELEM_MAX];
  elem_text(p, i, buf, sizeof buf);
  int w = (int)strlen(buf);
  if (w > p->width) p->width = w;
}

static void formatter_init(printer *p) {
  p->int_mode = true;
  p->width = 1;
  if (ir_is_float(p->dt)) {
    visit_shown(p, 0, 0, scan_float);
    if (p->abs_max == 0) return;  /* nothing nonzero and finite */
    double ratio = p->abs_max / p->abs_min;
    p->sci_mode = ratio > 1000.0 || p->abs_max > 1.0e8 || (!p->int_mode && p->abs_min < 1.0e-4);
  }
  visit_shown(p, 0, 0, scan_width);
  /* As in PyTorch, a forced mode comes after the widths (measured in the
   * automatic style) and not at all when no value is nonzero and finite. */
  if (ir_is_float(p->dt) && p->o.sci_mode != KILN_SCI_AUTO) p->sci_mode = p->o.sci_mode == KILN_SCI_ON;
}

/* ---- layout (_tensor_str_with_formatter) -------------------------------- */
static void put_elem(const printer *p, ir_str *b, int64_t i) {
  char buf[ELEM_MAX];
  elem_text(p, i, buf, sizeof buf);
  ir_str_printf(b, "%*s", p->width, buf);
}

/* The separator before item k of a row: ", ", or a line break once
 * per_line items are on the line, indented under the bracket. */
static void put_row_sep(ir_str *b, int64_t k, int64_t per_line, int indent) {
  if (k > 0) ir_str_printf(b, k % per_line ? ", " : ",\n%*s", indent + 1, "");
}

/* A row; " ..." is one item of the row, as in PyTorch. */
static void put_vector(const printer *p, ir_str *b, int64_t base, int indent) {
  int64_t n = p->shape[p->ndim - 1], k = 0;
  int64_t per_line = (p->o.linewidth - indent) / (p->width + 2);
  if (per_line < 1) per_line = 1;
  ir_str_printf(b, "[");
  for (int64_t j = 0; j < n; j = dim_next(p, n, j)) {
    if (dim_skips(p, n) && j == n - p->o.edgeitems) {
      put_row_sep(b, k++, per_line, indent);
      ir_str_printf(b, " ...");
    }
    put_row_sep(b, k++, per_line, indent);
    put_elem(p, b, base + j);
  }
  ir_str_printf(b, "]");
}

/* Between slices: "," then one newline per inner dim (a blank line between
 * 3-D blocks), then the indent. */
static void put_slice_sep(ir_str *b, int inner_dims, int indent) {
  ir_str_printf(b, ",");
  for (int i = 0; i < inner_dims; i++) ir_str_printf(b, "\n");
  ir_str_printf(b, "%*s", indent + 1, "");
}

static void put_tensor(const printer *p, ir_str *b, int d, int64_t base, int indent) {
  if (d == p->ndim - 1) {
    put_vector(p, b, base, indent);
    return;
  }
  int64_t n = p->shape[d];
  int inner = p->ndim - d - 1;
  ir_str_printf(b, "[");
  for (int64_t j = 0; j < n; j = dim_next(p, n, j)) {
    if (dim_skips(p, n) && j == n - p->o.edgeitems) {
      put_slice_sep(b, inner, indent);
      ir_str_printf(b, "...");
    }
    if (j > 0) put_slice_sep(b, inner, indent);
    put_tensor(p, b, d + 1, base + j * p->strides[d], indent + 1);
  }
  ir_str_printf(b, "]");
}

/* ---- suffixes (_add_suffixes) ------------------------------------------- */
/* ", suffix" while the line stays within linewidth, else on a new line.
 * last_line follows PyTorch's count exactly (which starts 2 too high). */
static void put_suffix(ir_str *b, size_t *last_line, int linewidth, const ir_str *s) {
  if (s->failed) b->failed = true;
  if (b->failed) return;
  const char *suffix = s->s;
  size_t len = strlen(suffix);
  if ((int64_t)(*last_line + len + 2) > linewidth) {
    ir_str_printf(b, ",\n%*s%s", INDENT, "", suffix);
    *last_line = INDENT + len;
  } else {
    ir_str_printf(b, ", %s", suffix);
    *last_line += len + 2;
  }
}

/* Device first, then size (empty tensors that are not 1-D), then dtype.
 * PyTorch omits the dtype for its defaults float32, int64 and bool; an empty
 * tensor shows every dtype but float32. */
static void put_suffixes(ir_str *b, const printer *p, int64_t numel, kiln_device dev) {
  kiln_dtype dt = p->dt;
  int ndim = p->ndim;
  const int64_t *shape = p->shape;
  if (b->failed) return;
  const char *nl = memrchr(b->s, '\n', b->len);
  size_t last_line = nl ? (size_t)(b->s + b->len - nl) + 1 : b->len + 2;
  ir_str s = {0};
  if (dev.type == KILN_CUDA) {
    ir_str_printf(&s, "device='cuda:%d'", dev.index);
    put_suffix(b, &last_line, p->o.linewidth, &s);
    s.len = 0;
  }
  if (numel == 0 && ndim != 1) {
    ir_str_printf(&s, "size=(");
    for (int i = 0; i < ndim; i++) ir_str_printf(&s, "%s%lld", i ? ", " : "", (long long)shape[i]);
    ir_str_printf(&s, ")");
    put_suffix(b, &last_line, p->o.linewidth, &s);
    s.len = 0;
  }
  if (numel == 0 ? dt != KILN_F32 : dt != KILN_F32 && dt != KILN_I64 && dt != KILN_BOOL) {
    ir_str_printf(&s, "dtype=kiln.%s", ir_dtypes[dt].name);
    put_suffix(b, &last_line, p->o.linewidth, &s);
  }
  ir_str_free(&s);
}

char *fe_format(const void *data, kiln_dtype dt, int ndim, const int64_t *shape, kiln_device dev) {
  printer p = {.data = data, .dt = dt, .ndim = ndim, .shape = shape, .o = kiln_get_printoptions()};
  int64_t numel = ir_numel(ndim, shape);
  ir_contiguous_strides(ndim, shape, p.strides);
  p.summarize = numel > p.o.threshold;
  ir_str b = {0};
  ir_str_printf(&b, PREFIX);
  if (numel == 0) {
    ir_str_printf(&b, "[]");
  } else if (p.summarize && !p.o.edgeitems && ndim > 0) {
    ir_str_printf(&b, "[...]");   /* no edge items: PyTorch shows only the ellipsis */
  } else {
    formatter_init(&p);
    if (ndim == 0)
      put_elem(&p, &b, 0);
    else
      put_tensor(&p, &b, 0, 0, INDENT);
  }
  put_suffixes(&b, &p, numel, dev);
  ir_str_printf(&b, ")");
  if (b.failed) ir_str_free(&b);
  return b.s;
}

/* ---- options ---------------------------------------------------------------- */
/* The print options are process-wide; any thread may set them while others print. */
static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;

kiln_status kiln_set_printoptions_at(const char *f, int l, int precision, int64_t threshold, int edgeitems,
                                     int linewidth, kiln_sci_mode sci_mode) {
  if (precision > MAX_PRECISION) {
    ir_error_setf("%s:%d: set_printoptions: precision %d is more than %d", f, l, precision, MAX_PRECISION);
    return KILN_ERR_ARG;
  }
  if (sci_mode < KILN_SCI_AUTO || sci_mode > KILN_SCI_ON) {
    ir_error_setf("%s:%d: set_printoptions: sci_mode %d is not KILN_SCI_AUTO, KILN_SCI_OFF or KILN_SCI_ON", f, l,
                  (int)sci_mode);
    return KILN_ERR_ARG;
  }
  kiln_printoptions *o = &rt_opts()->print;
  pthread_mutex_lock(&print_mu);
  if (precision >= 0) o->precision = precision;
  if (threshold >= 0) o->threshold = threshold;
  if (edgeitems >= 0) o->edgeitems = edgeitems;
  if (linewidth >= 0) o->linewidth = linewidth;
  o->sci_mode = sci_mode;   /* PyTorch sets it always: None is automatic */
  pthread_mutex_unlock(&print_mu);
  return KILN_OK;
}

kiln_printoptions kiln_get_printoptions(void) {
  pthread_mutex_lock(&print_mu);
  kiln_printoptions o = rt_opts()->print;
  pthread_mutex_unlock(&print_mu);
  return o;
}
