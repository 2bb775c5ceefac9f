/* fuzz_npy.c: libFuzzer target for the .npy header parser: any bytes, as a
 * whole file, must give a header or an error message, never a crash or a
 * read outside the input; a header it accepts must describe data inside it. */
#include "frontend/frontend.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fe_npy_header h;
  char why[256];
  if (fe_npy_parse(data, size, &h, why, sizeof why)) {
    if (h.data_offset > size || h.data_bytes > size - h.data_offset || h.ndim < 0 || h.ndim > KILN_MAX_DIMS)
      __builtin_trap();
  } else if (!memchr(why, '\0', sizeof why) || !why[0]) {
    __builtin_trap();   /* every rejection says why */
  }
  return 0;
}
