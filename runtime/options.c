/* options.c: kiln's settings, read once from the environment (KILN_DEBUG,
 * KILN_EAGER, KILN_NUM_THREADS, KILN_PASSES, KILN_MAX_PENDING,
 * KILN_ALLOW_TF32, KILN_CUBLASLT, KILN_VALIDATE, KILN_DYNAMIC,
 * KILN_CHECK_HANDLES, KILN_KERNEL_CACHE_MB, KILN_CACHE, KILN_CACHE_MAX_MB,
 * KILN_GRAD_HISTORY_MB). All are
 * process-wide. What can change at run time (kiln_set_eager, kiln_set_dynamic:
 * atomic words; the print options: print.c's lock) may change while other
 * threads read it. */
#include "runtime/rt.h"

#include "ir/graph.h"

#include "passes/pass.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
/* A realized tensor's history (what kiln_grad differentiates through)
 * reaches back over at most this much realized data: a loop that feeds
 * each result into the next (x = f(x), realized each time) would otherwise
 * keep every earlier x alive through the histories. A training step's
 * activations in eager mode fit in it. */
#define RT_GRAD_HISTORY_MB 1024

static rt_options opts;
static pthread_once_t opts_once = PTHREAD_ONCE_INIT;

/* A value kiln does not understand is not silently ignored: one warning
 * per variable (options are read once) naming what it accepts. */
static void warn(const char *name, const char *value, const char *accepted) {
  fprintf(stderr, "kiln: warning: ignoring %s=%s (accepted: %s)\n", name, value, accepted);
}

/* An integer variable in [lo, hi], or dflt when unset or anything else. */
static int64_t env_int(const char *name, int64_t dflt, int64_t lo, int64_t hi, const char *accepted) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*end && !errno && v >= lo && v <= hi) return (int64_t)v;
  warn(name, s, accepted);
  return dflt;
}

static bool env_flag(const char *name) { return env_int(name, 0, 0, 1, "0 or 1") != 0; }

/* KILN_PASSES, NULL when unset or when it names a pass that does not exist. */
static const char *env_passes(void) {
  const char *p = getenv("KILN_PASSES");
  if (!p || !*p) return NULL;
  char bad[64];
  ir_str names = {0};
  bool ok = pass_list_valid(p, bad, sizeof bad, &names);
  if (!ok) {
    ir_str accepted = {0};
    ir_str_printf(&accepted, "a comma-separated list of -name; \"%s\" is not one; the passes: %s", bad, names.s);
    warn("KILN_PASSES", p, accepted.s);
    ir_str_free(&accepted);
  }
  ir_str_free(&names);
  return ok ? p : NULL;
}

/* KILN_DYNAMIC: 0 shape-specialised kernels only, 1 shape-generic only,
 * auto (the default): generic once a structure comes back with a new shape. */
static int env_dynamic(void) {
  const char *s = getenv("KILN_DYNAMIC");
  if (!s || !*s || !strcmp(s, "auto")) return KILN_DYNAMIC_AUTO;
  if (!strcmp(s, "0") || !strcmp(s, "1")) return *s == '0' ? KILN_DYNAMIC_OFF : KILN_DYNAMIC_ON;
  warn("KILN_DYNAMIC", s, "0, 1 or auto");
  return KILN_DYNAMIC_AUTO;
}

/* A size in MiB as bytes: negative values are 0, huge ones 2^50. */
static int64_t env_mb(const char *name, int64_t dflt) {
  return env_int(name, dflt, 0, (int64_t)1 << 30, "a size in MiB, 0 to 2^30") << 20;
}

/* A 0-or-1 variable that is on unless set to 0. */
static bool env_flag_on(const char *name) { return env_int(name, 1, 0, 1, "0 or 1") != 0; }

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static ir_host ir_side;   /* what the IR calls on the runtime's buffers */

static void opts_init(void) {
  opts.debug = (int)env_int("KILN_DEBUG", 0, 0, 4, "0 to 4");
  opts.eager = env_flag("KILN_EAGER");
  /* at most 1024: the pool's job word counts chunks in 16 bits, and more
   * threads than that would only add dispatch cost */
  opts.num_threads = (int)env_int("KILN_NUM_THREADS", online_cpus() < 1024 ? online_cpus() : 1024, 1, 1024, "1 to 1024");
  opts.passes = env_passes();
  opts.max_pending = env_int("KILN_MAX_PENDING", 100000, 1, INT64_MAX, "a positive integer");
  opts.allow_tf32 = env_flag("KILN_ALLOW_TF32");
  opts.validate = env_flag("KILN_VALIDATE");
#ifdef NDEBUG
  opts.check_handles = env_flag("KILN_CHECK_HANDLES");
#else
  opts.check_handles = env_int("KILN_CHECK_HANDLES", 1, 0, 1, "0 or 1") != 0;
#endif
  opts.dynamic = env_dynamic();
  opts.kernel_cache_bytes = env_mb("KILN_KERNEL_CACHE_MB", RT_KERNEL_CACHE_MB);
  opts.disk_cache = env_flag_on("KILN_CACHE");
  opts.disk_cache_bytes = env_mb("KILN_CACHE_MAX_MB", RT_DISK_CACHE_MB);
  opts.grad_history_bytes = env_mb("KILN_GRAD_HISTORY_MB", RT_GRAD_HISTORY_MB);
  const char *lt = getenv("KILN_CUBLASLT");
  opts.cublaslt = lt && *lt ? lt : NULL;
  opts.print = (kiln_printoptions){.precision = 4, .threshold = 1000, .edgeitems = 3, .linewidth = 80,
                                   .sci_mode = KILN_SCI_AUTO};
  ir_side = (ir_host){rt_buffer_retain, rt_buffer_release, rt_buffer_snapshot, opts.check_handles};
  ir_set_host(&ir_side);
}

rt_options *rt_opts(void) {
  pthread_once(&opts_once, opts_init);
  return &opts;
}

/* Any thread may flip the mode while others build ops: an atomic word. */
void kiln_set_eager(int on) { __atomic_store_n(&rt_opts()->eager, on != 0, __ATOMIC_RELAXED); }
int kiln_get_eager(void) { return __atomic_load_n(&rt_opts()->eager, __ATOMIC_RELAXED); }

void kiln_set_dynamic(int mode) {
  int m = mode == KILN_DYNAMIC_OFF || mode == KILN_DYNAMIC_ON ? mode : KILN_DYNAMIC_AUTO;
  __atomic_store_n(&rt_opts()->dynamic, m, __ATOMIC_RELAXED);
}
