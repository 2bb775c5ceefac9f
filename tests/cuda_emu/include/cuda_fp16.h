/* cuda_fp16.h (emulation stand-in): the generated kernels include the real
 * header under NVRTC; on the host shim.h already provides what they use. */
#include "shim.h"
