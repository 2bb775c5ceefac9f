/* rt_internal.h: declarations shared between runtime files only. */
#ifndef KILN_RT_INTERNAL_H
#define KILN_RT_INTERNAL_H

#include "codegen_cpu/cpu.h"
#include "ir/kernel.h"

/* The compiled kernel for k (whose k_key is `key`), from the cache or freshly
 * compiled; NULL with the last error set when compiling fails. */
cpu_kernel_fn rt_kernel_get(kernel *k, const ir_str *key, int debug, bool *hit);
void rt_cache_shutdown(void);

#endif
