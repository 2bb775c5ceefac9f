/* options.c: kiln's settings, read once from the environment (KILN_DEBUG,
 * KILN_EAGER, KILN_NUM_THREADS, KILN_PASSES, KILN_MAX_PENDING,
 * KILN_ALLOW_TF32, KILN_CUBLASLT, KILN_VALIDATE, KILN_DYNAMIC). The struct
 * stays mutable so kiln_set_eager can flip the mode at run time. */
#include "runtime/rt.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

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
  /* 0: shape-specialised kernels only; 1: shape-generic only; anything
   * else ("auto"): generic once a structure comes back with a new shape */
  int64_t dy = env_int("KILN_DYNAMIC", KILN_DYNAMIC_AUTO);
  opts.dynamic = dy == 0 ? KILN_DYNAMIC_OFF : dy == 1 ? KILN_DYNAMIC_ON : KILN_DYNAMIC_AUTO;
  const char *lt = getenv("KILN_CUBLASLT");
  opts.cublaslt = lt && *lt ? lt : NULL;
  opts.print = (kiln_printoptions){.precision = 4, .threshold = 1000, .edgeitems = 3, .linewidth = 80,
                                   .sci_mode = KILN_SCI_AUTO};
}

rt_options *rt_opts(void) {
  pthread_once(&opts_once, opts_init);
  return &opts;
}

void kiln_set_eager(int on) { rt_opts()->eager = on != 0; }
int kiln_get_eager(void) { return rt_opts()->eager; }

void kiln_set_dynamic(int mode) {
  rt_opts()->dynamic = mode == KILN_DYNAMIC_OFF || mode == KILN_DYNAMIC_ON ? mode : KILN_DYNAMIC_AUTO;
}
