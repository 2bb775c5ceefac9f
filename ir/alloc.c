/* alloc.c: kiln's allocator entry points and the fault-injection hook that
 * fails the Nth allocation (SQLite's faultsim, Lua's Memcontrol). */
#include "ir/alloc.h"
#include "ir/ir.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Process-wide, since allocations happen on pool threads too. Nothing is
 * counted until a test first arms the hook: a count shared by all threads
 * was one contended atomic per allocation (5% of building a graph). */
static _Atomic uint64_t count, fail_from, failed;
static atomic_bool armed, fail_after;
static _Thread_local uint64_t thread_failures;

void ir_alloc_fail_at(uint64_t n, bool and_after) {
  atomic_store(&armed, true);
  atomic_store(&fail_from, 0);
  atomic_store(&count, 0);
  atomic_store(&failed, 0);
  atomic_store(&fail_after, and_after);
  atomic_store(&fail_from, n);
}

uint64_t ir_alloc_count(void) { return atomic_load(&count); }
uint64_t ir_alloc_failed(void) { return atomic_load(&failed); }

/* Counts one allocation; true when the hook fails it. */
static bool injected(void) {
  if (!atomic_load_explicit(&armed, memory_order_relaxed)) return false;
  uint64_t i = atomic_fetch_add(&count, 1) + 1, n = atomic_load(&fail_from);
  bool fail = n && (i == n || (i > n && atomic_load(&fail_after)));
  if (fail) atomic_fetch_add(&failed, 1);
  return fail;
}

uint64_t ir_alloc_thread_failures(void) { return thread_failures; }

static void *counted(void *p) {
  if (!p) thread_failures++;
  return p;
}

void *ir_malloc(size_t bytes) { return counted(injected() ? NULL : malloc(bytes ? bytes : 1)); }
void *ir_calloc(size_t n, size_t size) { return counted(injected() ? NULL : calloc(n ? n : 1, size ? size : 1)); }
void *ir_realloc(void *p, size_t bytes) { return counted(injected() ? NULL : realloc(p, bytes ? bytes : 1)); }

void *ir_aligned_alloc(size_t align, size_t bytes) { return counted(injected() ? NULL : aligned_alloc(align, bytes)); }

bool ir_grow_slow(void **v, size_t *cap, size_t n, size_t need, size_t elem, const void *fixed) {
  size_t want = *cap > SIZE_MAX / 2 ? need : 2 * *cap;
  if (want < need) want = need;
  if (want < 16) want = 16;
  if (want > SIZE_MAX / elem) return false;
  bool moved = *v == fixed && fixed;
  void *grown = moved ? ir_malloc(want * elem) : ir_realloc(*v, want * elem);
  if (!grown) return false;
  if (moved) memcpy(grown, *v, n * elem);
  *v = grown;
  *cap = want;
  return true;
}

char *ir_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = ir_malloc(n);
  return d ? memcpy(d, s, n) : NULL;
}
