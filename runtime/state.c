/* state.c: process-wide statistics (kiln_stats) and the global random
 * generator's state. Like PyTorch's default generator, it is a (seed, offset)
 * pair: each random node reserves a range of Philox counters, so results
 * depend only on the seed and the order of calls. The default seed is fixed
 * (RT_DEFAULT_SEED), so a program prints the same numbers on every run until
 * it calls kiln_manual_seed. */
#include "runtime/rt.h"

#include <pthread.h>

#define RT_DEFAULT_SEED 0x6b696c6eull  /* "kiln" */

static kiln_stats_t stats;
static struct {
  pthread_mutex_t lock;
  uint64_t seed, offset;
} rng = {PTHREAD_MUTEX_INITIALIZER, RT_DEFAULT_SEED, 0};

kiln_stats_t *rt_stats_mut(void) { return &stats; }
kiln_stats_t kiln_stats(void) { return stats; }
void kiln_reset_stats(void) { stats = (kiln_stats_t){0}; }

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
