/* alloc.h: every allocation in kiln's own code goes through these, so that
 * a failure is a status (KILN_ERR_MEMORY) and a test can fail any one. */
#ifndef KILN_IR_ALLOC_H
#define KILN_IR_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Like the C library's (memory is released with free()), but NULL when the
 * test hook says so. Callers handle NULL: it becomes KILN_ERR_MEMORY. */
void *ir_malloc(size_t bytes);
void *ir_calloc(size_t n, size_t size);
void *ir_realloc(void *p, size_t bytes);   /* on failure p is untouched */
char *ir_strdup(const char *s);
/* ir_grow: room for `need` elements of elem bytes in the array *v of *cap, whose
 * first n are in use: when need > *cap, an array of max(2 * *cap, need, 16)
 * holding those n, the old one freed unless it is `fixed` (a small array
 * in the caller's frame; NULL when there is none). False out of memory,
 * with *v and *cap as they were. */
bool ir_grow_slow(void **v, size_t *cap, size_t n, size_t need, size_t elem, const void *fixed);
/* ir_grow_slow when need > *cap: the test inline, as the graph walks push
 * once per node and edge. */
static inline bool ir_grow(void **v, size_t *cap, size_t n, size_t need, size_t elem, const void *fixed) {
  return need <= *cap || ir_grow_slow(v, cap, n, need, elem, fixed);
}
void *ir_aligned_alloc(size_t align, size_t bytes);   /* bytes a multiple of align */

/* The test hook (tests only; not in kiln.h). Restarts the count; the nth
 * allocation from now fails (1 is the next), and with and_after every one
 * after it too; n = 0 fails none. Allocations are counted from the first
 * call on. */
void ir_alloc_fail_at(uint64_t n, bool and_after);
uint64_t ir_alloc_count(void);      /* allocations since the last ir_alloc_fail_at */
uint64_t ir_alloc_failed(void);     /* of those, how many the hook failed */
/* Allocations that returned NULL on this thread so far (the hook's or the
 * system's): a stage that reports only "failed" (a compile) compares it
 * before and after to tell out of memory from its other errors. */
uint64_t ir_alloc_thread_failures(void);

#endif
