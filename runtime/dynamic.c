/* dynamic.c: automatic dynamic shapes. A kernel structure (the key of its
 * shape-generic lowering) is compiled for its exact shape the first time it
 * is seen; when it comes back with another shape, its generic variant (sizes
 * and strides as launch arguments) serves that and every later shape, so a
 * loop over batch sizes compiles each structure at most twice. Realizes on
 * several threads plan at once: a lock guards the table. Only hashes are kept: a false match picks the other
 * variant, which computes the same values. The table is bounded: past
 * DYN_MAX / 2 structures it starts over (a structure forgotten that comes back
 * with a new shape compiles its specialised kernel once more). */
#include "rt_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint64_t structure;   /* 0: empty slot */
  uint64_t shape;       /* the specialised kernel's key hash, first shape */
  bool generic;         /* a second shape was seen */
} dyn_entry;

#define DYN_FIRST 256          /* slots of the first table */
#define DYN_MAX (1 << 16)      /* slots at most (half of them used): 1.5 MiB */

static struct {
  pthread_mutex_t mu;
  dyn_entry *slot;
  size_t cap, used;
} dyn = {.mu = PTHREAD_MUTEX_INITIALIZER};

static dyn_entry *dyn_find(uint64_t h) {
  size_t mask = dyn.cap - 1, i = h & mask;
  while (dyn.slot[i].structure && dyn.slot[i].structure != h) i = (i + 1) & mask;
  return &dyn.slot[i];
}

/* False, with the table as it was, when out of memory. */
static bool dyn_grow(void) {
  dyn_entry *old = dyn.slot, *slot = ir_calloc(dyn.cap ? 2 * dyn.cap : DYN_FIRST, sizeof *dyn.slot);
  if (!slot) return false;
  size_t oldcap = dyn.cap;
  dyn.cap = oldcap ? 2 * oldcap : DYN_FIRST;
  dyn.slot = slot;
  for (size_t i = 0; i < oldcap; i++)
    if (old[i].structure) *dyn_find(old[i].structure) = old[i];
  free(old);
  return true;
}

/* Under dyn.mu. Out of memory the structure is not remembered: the generic
 * kernel serves. */
static bool generic_locked(uint64_t structure, uint64_t shape) {
  bool full = 2 * (dyn.used + 1) > dyn.cap;
  if (full && dyn.cap < DYN_MAX && !dyn_grow()) return true;
  dyn_entry *e = dyn_find(structure);
  if (!e->structure) {
    if (!shape) return false;  /* not seen yet: the caller lowers the specialised one */
    if (full && dyn.cap >= DYN_MAX) {   /* the bound: start over */
      memset(dyn.slot, 0, sizeof *dyn.slot * dyn.cap);
      dyn.used = 0;
      e = dyn_find(structure);
    }
    *e = (dyn_entry){structure, shape, false};
    dyn.used++;
  } else if (shape && shape != e->shape) {
    e->generic = true;
  }
  return e->generic;
}

bool rt_dynamic_generic(uint64_t structure, uint64_t shape) {
  structure |= structure == 0;  /* 0 marks an empty slot */
  pthread_mutex_lock(&dyn.mu);
  bool g = generic_locked(structure, shape);
  pthread_mutex_unlock(&dyn.mu);
  return g;
}

void rt_dynamic_shutdown(void) {
  pthread_mutex_lock(&dyn.mu);
  free(dyn.slot);
  dyn.slot = NULL;
  dyn.cap = dyn.used = 0;
  pthread_mutex_unlock(&dyn.mu);
}
