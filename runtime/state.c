/* state.c: process-wide statistics (kiln_stats) and the global random
 * generator's state. Like PyTorch's default generator, it is a (seed, offset)
 * pair: each random node reserves a range of Philox counters, so results
 * depend only on the seed and the order of calls. The default seed is fixed
 * (RT_DEFAULT_SEED), so a program prints the same numbers on every run until
 * it calls kiln_manual_seed. */
#include "runtime/rt.h"
#include "runtime/device.h"
#include "runtime/rt_internal.h"

#include <pthread.h>

#include "ir/ir.h"

#define RT_DEFAULT_SEED 0x6b696c6eull  /* "kiln" */

static kiln_stats_t stats;
static struct {
  pthread_mutex_t lock;
  uint64_t seed, offset;
} rng = {PTHREAD_MUTEX_INITIALIZER, RT_DEFAULT_SEED, 0};

kiln_stats_t *rt_stats_mut(void) { return &stats; }
/* Field by field, atomically: other threads may be counting. */
#define NUM_COUNTERS (sizeof(kiln_stats_t) / sizeof(uint64_t))
_Static_assert(sizeof(kiln_stats_t) == NUM_COUNTERS * sizeof(uint64_t), "kiln_stats_t holds only uint64_t counters");

/* code_bytes is a level, not a counter: read from the kernel cache. */
kiln_stats_t kiln_stats(void) {
  kiln_stats_t r;
  uint64_t *from = (uint64_t *)&stats, *to = (uint64_t *)&r;
  for (size_t i = 0; i < NUM_COUNTERS; i++) to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
  r.code_bytes = rt_kernel_cache_bytes();
  return r;
}

void kiln_reset_stats(void) {
  uint64_t *c = (uint64_t *)&stats;
  for (size_t i = 0; i < NUM_COUNTERS; i++) __atomic_store_n(&c[i], 0, __ATOMIC_RELAXED);
}

void rt_rng_take(uint64_t n, uint64_t *seed, uint64_t *offset) {
  pthread_mutex_lock(&rng.lock);
  *seed = rng.seed;
  *offset = rng.offset;
  rng.offset += n;
  pthread_mutex_unlock(&rng.lock);
}

void rt_rng_seed(uint64_t seed) {
  pthread_mutex_lock(&rng.lock);
  rng.seed = seed;
  rng.offset = 0;
  pthread_mutex_unlock(&rng.lock);
}

void kiln_manual_seed(uint64_t seed) { rt_rng_seed(seed); }

/* Each device's caching allocator keeps the figures: buffer.c for the CPU,
 * cuda_device.c for cuda:N (zeros until kiln first uses the device). */
kiln_status kiln_memory_stats(kiln_device dev, kiln_memory_stats_t *out) {
  char why[256];
  if (dev.type != KILN_CPU && dev.type != KILN_CUDA) {
    ir_error_setf("memory_stats: invalid device type %d", (int)dev.type);
    return KILN_ERR_ARG;
  }
  if (dev.type == KILN_CUDA && !rt_cuda_usable(dev.index, why, sizeof why)) {
    ir_error_setf("memory_stats: CUDA not available: %s", why);
    return KILN_ERR_DEVICE;
  }
  if (!out) {
    ir_error_setf("memory_stats: out is NULL");
    return KILN_ERR_ARG;
  }
  rt_alloc_stats s = dev.type == KILN_CPU ? rt_buffer_stats() : rt_cuda_memory(dev.index);
  *out = (kiln_memory_stats_t){s.live_bytes, s.live_bytes + s.cached_bytes, s.peak_bytes};
  return KILN_OK;
}

void kiln_reset_peak_memory(void) {
  rt_buffer_reset_peak();
  rt_cuda_reset_peak();
}
