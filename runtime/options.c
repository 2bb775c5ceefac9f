/* options.c: kiln's settings, read once from the environment (KILN_DEBUG,
 * KILN_EAGER, KILN_NUM_THREADS, KILN_PASSES, KILN_MAX_PENDING,
 * KILN_ALLOW_TF32, KILN_CUBLASLT, KILN_VALIDATE, KILN_KERNEL_CACHE_MB,
 * KILN_CACHE, KILN_CACHE_MAX_MB). The struct
 * stays mutable so kiln_set_eager can flip the mode at run time. */
#include "runtime/rt.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* Default budgets, in MiB of object files. Measured objects: 0.9-3 KB for
 * elementwise, row and reduction kernels, 20-25 KB for a GEMM with its
 * epilogue; every loaded kernel also takes 2 memory maps (the system's
 * limit is 65530) and about 9 KB of RSS. 16 MiB holds some 700 GEMMs or
 * thousands of other kernels, more than a model's working set, and even
 * 16 MiB of the smallest kernels stays near 36,000 maps and 160 MB. The
 * disk's 512 MiB is a tenth of ccache's default: entries are small. */
#define RT_KERNEL_CACHE_MB 16
#define RT_DISK_CACHE_MB 512

static rt_options opts;
static pthread_once_t opts_once = PTHREAD_ONCE_INIT;

/* An integer variable, or dflt when unset or not a number. */
static int64_t env_int(const char *name, int64_t dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  long long v = strtoll(s, &end, 10);
  return *end ? dflt : (int64_t)v;
}

/* A size in MiB as bytes: negative values are 0, huge ones 2^50. */
static int64_t env_mb(const char *name, int64_t dflt) {
  int64_t mb = env_int(name, dflt);
  return mb < 0 ? 0 : mb > ((int64_t)1 << 30) ? (int64_t)1 << 50 : mb << 20;
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static void opts_init(void) {
  opts.debug = (int)env_int("KILN_DEBUG", 0);
  opts.eager = env_int("KILN_EAGER", 0) != 0;
  int64_t nt = env_int("KILN_NUM_THREADS", online_cpus());
  /* at most 1024: the pool's job word counts chunks in 16 bits, and more
   * threads than that would only add dispatch cost */
  opts.num_threads = nt < 1 ? 1 : nt > 1024 ? 1024 : (int)nt;
  const char *p = getenv("KILN_PASSES");
  opts.passes = p && *p ? p : NULL;
  int64_t mp = env_int("KILN_MAX_PENDING", 100000);
  opts.max_pending = mp < 1 ? 1 : mp;
  opts.allow_tf32 = env_int("KILN_ALLOW_TF32", 0) != 0;
  opts.validate = env_int("KILN_VALIDATE", 0) != 0;
  opts.kernel_cache_bytes = env_mb("KILN_KERNEL_CACHE_MB", RT_KERNEL_CACHE_MB);
  opts.disk_cache = env_int("KILN_CACHE", 1) != 0;
  opts.disk_cache_bytes = env_mb("KILN_CACHE_MAX_MB", RT_DISK_CACHE_MB);
  const char *lt = getenv("KILN_CUBLASLT");
  opts.cublaslt = lt && *lt ? lt : NULL;
}

rt_options *rt_opts(void) {
  pthread_once(&opts_once, opts_init);
  return &opts;
}

void kiln_set_eager(int on) { rt_opts()->eager = on != 0; }
int kiln_get_eager(void) { return rt_opts()->eager; }
