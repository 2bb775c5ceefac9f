/* fuzz_safetensors.c: libFuzzer target for the safetensors header parser:
 * any bytes, as a whole file, must give a header or an error message, never
 * a crash, a leak or a read outside the input. A header it accepts must
 * describe tensors that tile the data after it exactly, and written back
 * (tr_st_header_write) in front of the same data it must parse to the same
 * entries and metadata. */
#include "train/train.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The entries cover [0, data_len) once: each inside it, holding its shape's
 * bytes, the sizes adding up, no two overlapping. */
static void check_tiling(const tr_st_header *h, size_t data_len) {
  uint64_t total = 0;
  for (size_t i = 0; i < h->n; i++) {
    const tr_st_entry *e = &h->tensors[i];
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) numel *= (uint64_t)e->shape[d];   /* accepted: it did not overflow */
    if (e->ndim < 0 || e->ndim > KILN_MAX_DIMS || e->end > data_len || e->end < e->begin ||
        e->end - e->begin != numel * kiln_dtype_size(e->dtype))
      __builtin_trap();
    total += e->end - e->begin;
    for (size_t k = 0; k < i && k < 64; k++)
      if (e->begin < h->tensors[k].end && h->tensors[k].begin < e->end) __builtin_trap();
  }
  if (total != data_len) __builtin_trap();
}

static bool same_entry(const tr_st_entry *a, const tr_st_entry *b) {
  return !strcmp(a->name, b->name) && a->dtype == b->dtype && a->ndim == b->ndim && a->begin == b->begin &&
         a->end == b->end && !memcmp(a->shape, b->shape, sizeof *a->shape * (size_t)a->ndim);
}

/* The header written back, then the data: the same header again. */
static void check_round_trip(const tr_st_header *h, const uint8_t *rest, size_t rest_len) {
  ir_str out = {0};
  tr_st_header_write(&out, h->tensors, h->n, h->meta, h->nmeta);
  if (out.failed) __builtin_trap();
  ir_str_append(&out, rest, rest_len);
  tr_st_header g;
  char why[512];
  if (tr_st_parse((const unsigned char *)out.s, out.len, &g, why, sizeof why) != KILN_OK || g.n != h->n ||
      g.nmeta != h->nmeta || g.data_offset % 8)
    __builtin_trap();
  for (size_t i = 0; i < h->n; i++)
    if (!same_entry(&g.tensors[i], &h->tensors[i])) __builtin_trap();
  for (size_t i = 0; i < 2 * h->nmeta; i++)
    if (strcmp(g.meta[i], h->meta[i])) __builtin_trap();
  tr_st_header_free(&g);
  ir_str_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tr_st_header h;
  char why[512];
  kiln_status st = tr_st_parse(data, size, &h, why, sizeof why);
  if (st == KILN_OK) {
    if (h.data_offset > size) __builtin_trap();
    check_tiling(&h, size - h.data_offset);
    check_round_trip(&h, data + h.data_offset, size - h.data_offset);
  } else if (st != KILN_ERR_IO || !memchr(why, '\0', sizeof why) || !why[0]) {
    __builtin_trap();   /* every rejection is a bad file, and says why */
  }
  tr_st_header_free(&h);
  return 0;
}
