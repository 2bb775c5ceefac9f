/* rt_internal.h: declarations shared between runtime files only. */
#ifndef KILN_RT_INTERNAL_H
#define KILN_RT_INTERNAL_H

#include "codegen_cpu/cpu.h"
#include "ir/kernel.h"

/* The compiled kernel for k (whose printed text is `text`), from the cache or
 * freshly compiled; NULL with the last error set when compiling fails. */
cpu_kernel_fn rt_kernel_get(kernel *k, const char *text, int debug, bool *hit);
void rt_cache_shutdown(void);

#endif
