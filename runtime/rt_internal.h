/* rt_internal.h: declarations shared between runtime files only. */
#ifndef KILN_RT_INTERNAL_H
#define KILN_RT_INTERNAL_H

#include "codegen_cpu/cpu.h"
#include "ir/kernel.h"
#include "runtime/rt.h"

/* The compiled kernel for k (whose k_key is `key`), from the cache or freshly
 * compiled; NULL with the last error set when compiling fails. */
cpu_kernel_fn rt_kernel_get(kernel *k, const ir_str *key, int debug, bool *hit);
/* Runs compiled kernel k over its whole range on the thread pool (realize.c). */
void rt_execute(const kernel *k, cpu_kernel_fn fn, void *const *bufs);

/* ---- KILN_VALIDATE (validate.c) ---- */
/* After device kernel k ran: k run again by the CPU back end on host copies
 * of its inputs, and each output compared with the device's. KILN_OK when
 * they agree; KILN_ERR_COMPILE (a miscompile) with the kernel, the output,
 * the first differing element and both values in the last error. out and
 * inputs as realize binds them (outputs, then the inputs' nodes in order). */
kiln_status rt_validate(kernel *k, rt_buffer **out, ir_node **inputs, int debug);
/* The first of n elements of dtype dt where got and want differ beyond
 * validation's tolerance, -1 when none: integers and bool exactly; floats
 * within a few units of their precision (relative, with an absolute floor
 * near zero), infinities exactly, nan matching nan. */
int64_t rt_validate_diff(kiln_dtype dt, const void *got, const void *want, int64_t n);
void rt_cache_shutdown(void);

/* ---- automatic dynamic shapes (dynamic.c) ---- */
/* Whether the structure whose shape-generic key hash is `structure` runs its
 * generic variant, given the key hash of its shape-specialised kernel this
 * time (`shape`; 0 when the caller has not lowered one). The first shape a
 * structure is seen with runs specialised; from the second on, generic. */
bool rt_dynamic_generic(uint64_t structure, uint64_t shape);
void rt_dynamic_shutdown(void);

#endif
