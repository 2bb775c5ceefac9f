/* fuzz_einsum.c: libFuzzer target for einsum's equation parser and the
 * graph kiln_einsum builds from it. The first byte picks 1-3 operands and
 * the next ones their dims (0-4, every size 2, so sizes always agree); the
 * rest is the equation. A parse must give well-formed subscripts (ids in
 * range, each output id once and in some operand) or a message that quotes
 * the equation; kiln_einsum must accept exactly what the parser accepts
 * (or refuse a pairwise product too wide for KILN_MAX_DIMS) and never
 * crash or leak. Nothing is realized: building is what is fuzzed. */
#include "frontend/frontend.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_parsed(const fe_einsum *p, int nops, const int *ndim) {
  bool used[FE_EINSUM_IDS] = {0}, seen[FE_EINSUM_IDS] = {0};
  if (p->nops != nops || p->nout < 0 || p->nout > KILN_MAX_DIMS) __builtin_trap();
  for (int i = 0; i < nops; i++) {
    if (p->ndim[i] != ndim[i]) __builtin_trap();
    for (int d = 0; d < ndim[i]; d++) {
      if (p->sub[i][d] < 0 || p->sub[i][d] >= FE_EINSUM_IDS) __builtin_trap();
      used[(int)p->sub[i][d]] = true;
    }
  }
  for (int j = 0; j < p->nout; j++) {
    int id = p->out[j];
    if (id < 0 || id >= FE_EINSUM_IDS || !used[id] || seen[id]) __builtin_trap();
    seen[id] = true;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4 || size > 256) return 0;
  int nops = 1 + data[0] % 3, ndim[3];
  int64_t twos[4] = {2, 2, 2, 2};
  for (int i = 0; i < 3; i++) ndim[i] = data[1 + i] % 5;
  char eq[256];
  memcpy(eq, data + 4, size - 4);
  eq[size - 4] = '\0';
  fe_einsum p;
  char why[512];
  bool ok = fe_einsum_parse(eq, nops, ndim, &p, why, sizeof why);
  if (ok) check_parsed(&p, nops, ndim);
  else if (strncmp(why, "einsum: ", 8) || !memchr(why, '\0', sizeof why)) __builtin_trap();
  kiln_scope_begin();
  kiln_tensor *ops[3];
  for (int i = 0; i < nops; i++) ops[i] = kiln_ones(ndim[i], twos, KILN_F32);
  kiln_status st = kiln_status_of(kiln_einsum(eq, nops, ops));
  if (ok ? st != KILN_OK && st != KILN_ERR_SHAPE : st != KILN_ERR_ARG) __builtin_trap();
  kiln_scope_end();
  return 0;
}
