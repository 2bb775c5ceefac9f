/* prelude.c: cuda_prelude(), the text of prelude.cuh. CMake turns that file
 * into a C string literal (cuda_prelude.inc in the build tree) so the device
 * code stays readable CUDA and the emulation harness can compile it too. */
#include "codegen_cuda/cuda.h"

const char *cuda_prelude(void) {
  static const char text[] =
#include "cuda_prelude.inc"
      ;
  return text;
}
