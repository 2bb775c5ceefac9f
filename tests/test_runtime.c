/* test_runtime.c: the runtime's leaves: options, the caching allocator,
 * borrowed buffers, the thread pool (coverage of every index for many shapes
 * of work, nesting, concurrent callers, restart), the random state, stats and
 * CUDA detection (which must degrade to "cpu" with a reason). */
#include "check_main.h"
#include "runtime/rt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Options are read once per process; a forked test sees a fresh copy. */
static bool tests_fork(void) {
  const char *f = getenv("CK_FORK");
  return !f || strcmp(f, "no") != 0;
}

/* One version everywhere: kiln.h's numbers, its string, the library's
 * kiln_version() and the project version CMake read from kiln.h. */
START_TEST(test_version) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH);
  ck_assert_str_eq(KILN_VERSION_STRING, want);
  ck_assert_str_eq(kiln_version(), want);
  ck_assert_str_eq(KILN_CMAKE_VERSION, want);
}
END_TEST

START_TEST(test_options_env) {
  if (!tests_fork()) return;
  setenv("KILN_NUM_THREADS", "3", 1);
  setenv("KILN_MAX_PENDING", "77", 1);
  setenv("KILN_PASSES", "-fuse", 1);
  setenv("KILN_DEBUG", "junk", 1);  /* not a number: the default */
  rt_options *o = rt_opts();
  ck_assert_int_eq(o->num_threads, 3);
  ck_assert_int_eq(o->max_pending, 77);
  ck_assert_str_eq(o->passes, "-fuse");
  ck_assert_int_eq(o->debug, 0);
  ck_assert_ptr_eq(rt_opts(), o);
}
END_TEST

START_TEST(test_options_eager) {
  ck_assert_int_ge(rt_opts()->num_threads, 1);
  kiln_set_eager(1);
  ck_assert_int_eq(kiln_get_eager(), 1);
  ck_assert_int_eq(rt_opts()->eager, 1);
  kiln_set_eager(0);
  ck_assert_int_eq(kiln_get_eager(), 0);
}
END_TEST

/* ---- buffers ------------------------------------------------------------ */
START_TEST(test_buffer_alignment) {
  const size_t sizes[] = {0, 1, 63, 64, 65, 96, 127, 128, 129, 200, 1000, 4096, 12345, 1 << 20, (3 << 20) + 7};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    rt_buffer *b = rt_buffer_alloc(sizes[i]);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(b->data);
    ck_assert_uint_eq((uintptr_t)b->data % 64, 0);
    ck_assert_uint_eq(b->bytes, sizes[i]);
    ck_assert_int_eq(b->refs, 1);
    ck_assert_int_eq(b->device.type, KILN_CPU);
    ck_assert(!b->borrowed);
    memset(b->data, 0xab, sizes[i]);  /* the whole size is usable (ASan checks) */
    rt_buffer_release(b);
  }
}
END_TEST

/* Large blocks start on a huge-page boundary and are advised as huge pages;
 * where the kernel runs THP in "always" or "madvise" mode, touching one
 * shows up in AnonHugePages (a machine with THP off only checks alignment). */
static long anon_huge_kb(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  long kb = -1;
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

static bool thp_enabled(void) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char mode[128] = "";
  if (f) {
    if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
    fclose(f);
  }
  return strstr(mode, "[always]") || strstr(mode, "[madvise]");
}

START_TEST(test_buffer_huge_pages) {
  const size_t big = (size_t)8 << 20;
  long before = anon_huge_kb();
  rt_buffer *b = rt_buffer_alloc(big), *small = rt_buffer_alloc((2 << 20) - 64);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_nonnull(small);
  ck_assert_uint_eq((uintptr_t)b->data % (2 << 20), 0);
  ck_assert_uint_eq((uintptr_t)small->data % 64, 0);
  memset(b->data, 1, big);
  long after = anon_huge_kb();
  if (thp_enabled() && before >= 0) ck_assert_int_ge(after - before, 2048);
  rt_buffer_release(b);
  rt_buffer_release(small);
}
END_TEST

START_TEST(test_buffer_reuse) {
  rt_buffer *a = rt_buffer_alloc(1000);
  void *data = a->data;
  rt_buffer_release(a);
  ck_assert_uint_ge(rt_buffer_stats().cached_bytes, 1000);
  rt_buffer *b = rt_buffer_alloc(1000);
  ck_assert_ptr_eq(b->data, data);  /* same class: the cached block */
  ck_assert_uint_eq(b->bytes, 1000);
  rt_buffer_release(b);
  rt_buffer *c = rt_buffer_alloc(1010);  /* same class (1024), other size */
  ck_assert_ptr_eq(c->data, data);
  rt_buffer *d = rt_buffer_alloc(1000);  /* class empty now: a new block */
  ck_assert_ptr_ne(d->data, data);
  rt_buffer_release(c);
  rt_buffer_release(d);
}
END_TEST

START_TEST(test_buffer_stats_and_cache_free) {
  rt_buffer_cache_free();
  rt_alloc_stats s0 = rt_buffer_stats();
  ck_assert_uint_eq(s0.cached_bytes, 0);
  rt_buffer *a = rt_buffer_alloc(64 << 10);
  rt_alloc_stats s1 = rt_buffer_stats();
  ck_assert_uint_eq(s1.live_bytes, s0.live_bytes + (64 << 10));
  ck_assert_uint_ge(s1.peak_bytes, s1.live_bytes);
  rt_buffer_retain(a);
  ck_assert_int_eq(a->refs, 2);
  rt_buffer_release(a);
  ck_assert_uint_eq(rt_buffer_stats().cached_bytes, 0);  /* still held */
  rt_buffer_release(a);
  rt_alloc_stats s2 = rt_buffer_stats();
  ck_assert_uint_eq(s2.live_bytes, s0.live_bytes);
  ck_assert_uint_eq(s2.cached_bytes, 64 << 10);
  rt_buffer_cache_free();
  ck_assert_uint_eq(rt_buffer_stats().cached_bytes, 0);
  rt_buffer_release(NULL);
  rt_buffer_retain(NULL);
}
END_TEST

START_TEST(test_buffer_borrow) {
  float user[5] = {1, 2, 3, 4, 5};
  rt_buffer *b = rt_buffer_borrow(user, sizeof user);
  ck_assert_ptr_eq(b->data, user);
  ck_assert(b->borrowed);
  ck_assert_uint_eq(b->bytes, sizeof user);
  rt_buffer_retain(b);
  rt_buffer_release(b);
  rt_buffer_release(b);  /* frees the struct only: freeing user would crash or trip ASan */
  ck_assert(user[4] == 5);
  rt_buffer *a = rt_buffer_alloc(sizeof user);  /* a borrowed block never enters the cache */
  ck_assert_ptr_ne(a->data, user);
  rt_buffer_release(a);
}
END_TEST

/* A lent buffer tells its owner once, when the last reference goes. */
static void count_release(void *ctx) { (*(int *)ctx)++; }

START_TEST(test_buffer_lend) {
  int released = 0;
  char user[8];
  rt_buffer *b = rt_buffer_lend(user, sizeof user, kiln_cpu_device(), count_release, &released);
  ck_assert_ptr_eq(b->data, user);
  ck_assert(b->borrowed);
  rt_buffer_retain(b);
  rt_buffer_release(b);
  ck_assert_int_eq(released, 0);
  rt_buffer_release(b);
  ck_assert_int_eq(released, 1);
}
END_TEST

/* Allocations and releases from several threads at once. */
static void *alloc_worker(void *arg) {
  size_t seed = (size_t)(uintptr_t)arg;
  for (int i = 0; i < 2000; i++) {
    size_t bytes = (seed * 7919 + (size_t)i * 104729) % 20000;
    rt_buffer *b = rt_buffer_alloc(bytes);
    memset(b->data, (int)i, bytes);
    rt_buffer_release(b);
  }
  return NULL;
}

START_TEST(test_buffer_threads) {
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, alloc_worker, (void *)i);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  rt_alloc_stats s = rt_buffer_stats();
  ck_assert_uint_eq(s.live_bytes, 0);
  rt_buffer_cache_free();
}
END_TEST

/* ---- thread pool -------------------------------------------------------- */
typedef struct {
  atomic_int *hits;       /* per index */
  atomic_int chunks;
  int64_t min_chunk;
  atomic_int short_chunks; /* chunks below min_chunk */
} cover_ctx;

static void cover_fn(void *p, int64_t lo, int64_t hi) {
  cover_ctx *c = p;
  atomic_fetch_add(&c->chunks, 1);
  if (hi - lo < c->min_chunk) atomic_fetch_add(&c->short_chunks, 1);
  for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&c->hits[i], 1);
}

/* Runs one parallel_for and checks that it hit every index exactly once in
 * at most num_threads chunks of at least min_chunk. */
static void check_cover(int64_t n, int64_t min_chunk) {
  cover_ctx c = {.hits = calloc((size_t)n + 1, sizeof(atomic_int)), .min_chunk = min_chunk};
  rt_parallel_for(n, min_chunk, cover_fn, &c);
  for (int64_t i = 0; i < n; i++) ck_assert_msg(c.hits[i] == 1, "n=%lld min=%lld: index %lld hit %d times",
                                                 (long long)n, (long long)min_chunk, (long long)i, (int)c.hits[i]);
  ck_assert_int_le(c.chunks, rt_opts()->num_threads);
  ck_assert_int_eq(c.chunks > 0, n > 0);
  if (n >= min_chunk) ck_assert_int_eq(c.short_chunks, 0);  /* else one short chunk */
  free(c.hits);
}

START_TEST(test_pool_cover) {
  const int threads[] = {1, 2, 3, 4, 7};
  const int64_t ns[] = {0, 1, 2, 3, 5, 7, 64, 100, 1000, 4099};
  const int64_t mins[] = {0, 1, 2, 3, 16, 1000, 5000};
  for (int t = 0; t < 5; t++) {
    rt_opts()->num_threads = threads[t];
    rt_pool_shutdown();  /* restart with threads[t] - 1 workers */
    for (int a = 0; a < 10; a++)
      for (int m = 0; m < 7; m++) check_cover(ns[a], mins[m]);
  }
}
END_TEST

/* The chunk count is min(num_threads, n / min_chunk), at least 1. */
static void check_chunks(int64_t n, int64_t min_chunk, int want_chunks) {
  cover_ctx c = {.hits = calloc((size_t)n + 1, sizeof(atomic_int)), .min_chunk = min_chunk};
  rt_parallel_for(n, min_chunk, cover_fn, &c);
  ck_assert_int_eq(c.chunks, want_chunks);
  ck_assert_int_eq(c.short_chunks, 0);
  free(c.hits);
}

START_TEST(test_pool_chunks) {
  rt_opts()->num_threads = 4;
  rt_pool_shutdown();
  check_chunks(100, 10, 4);
  check_chunks(100, 30, 3);
  check_chunks(100, 50, 2);
  check_chunks(100, 51, 1);
  check_chunks(3, 1, 3);
  check_chunks(1, 1, 1);
}
END_TEST

static void self_fn(void *p, int64_t lo, int64_t hi) {
  (void)lo, (void)hi;
  *(pthread_t *)p = pthread_self();
}

START_TEST(test_pool_tiny_on_caller) {
  pthread_t who;
  rt_parallel_for(10, 100, self_fn, &who);
  ck_assert(pthread_equal(who, pthread_self()));
}
END_TEST

/* Many jobs back to back: a worker that wakes late must never run a chunk
 * of the wrong job. */
START_TEST(test_pool_many_jobs) {
  rt_opts()->num_threads = 3;
  rt_pool_shutdown();
  for (int r = 0; r < 3000; r++) check_cover(2 + r % 13, 1);
}
END_TEST

/* A nested call (not supported in parallel) runs serially and still covers. */
static void nested_fn(void *p, int64_t lo, int64_t hi) {
  cover_ctx *outer = p;
  for (int64_t i = lo; i < hi; i++) {
    cover_ctx c = {.hits = calloc(8, sizeof(atomic_int))};
    rt_parallel_for(8, 1, cover_fn, &c);
    for (int j = 0; j < 8; j++) ck_assert_int_eq(c.hits[j], 1);
    free(c.hits);
    atomic_fetch_add(&outer->hits[i], 1);
  }
}

START_TEST(test_pool_nested) {
  rt_opts()->num_threads = 2;
  rt_pool_shutdown();
  cover_ctx c = {.hits = calloc(16, sizeof(atomic_int))};
  rt_parallel_for(16, 1, nested_fn, &c);
  for (int j = 0; j < 16; j++) ck_assert_int_eq(c.hits[j], 1);
  free(c.hits);
}
END_TEST

static void *pool_caller(void *arg) {
  (void)arg;
  for (int r = 0; r < 500; r++) check_cover(1 + r % 97, 1 + r % 5);
  return NULL;
}

/* Several user threads calling at once: one gets the pool, the rest run
 * serially; all results are complete. */
START_TEST(test_pool_concurrent_callers) {
  rt_opts()->num_threads = 4;
  rt_pool_shutdown();
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, pool_caller, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
}
END_TEST

/* Work heavier than the spin time makes workers and the caller sleep. */
static void slow_fn(void *p, int64_t lo, int64_t hi) {
  cover_fn(p, lo, hi);
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
}

START_TEST(test_pool_sleep_paths) {
  rt_opts()->num_threads = 3;
  rt_pool_shutdown();
  for (int r = 0; r < 5; r++) {
    cover_ctx c = {.hits = calloc(30, sizeof(atomic_int))};
    rt_parallel_for(30, 1, slow_fn, &c);
    for (int j = 0; j < 30; j++) ck_assert_int_eq(c.hits[j], 1);
    free(c.hits);
    struct timespec ts = {0, 5000000};  /* let the workers fall asleep */
    nanosleep(&ts, NULL);
  }
  rt_pool_shutdown();
  rt_pool_shutdown();  /* idempotent */
}
END_TEST

/* A child forked while the parent's workers sleep gets a working pool. */
static int child_cover(void) {
  alarm(10);  /* a hang fails instead of stalling the suite */
  for (int r = 0; r < 200; r++) {
    int64_t n = 2 + r % 50;
    cover_ctx c = {.hits = calloc((size_t)n, sizeof(atomic_int))};
    rt_parallel_for(n, 1, cover_fn, &c);
    for (int64_t i = 0; i < n; i++)
      if (c.hits[i] != 1) return 1;
    free(c.hits);
  }
  rt_pool_shutdown();
  return 0;
}

START_TEST(test_pool_fork) {
#ifdef __SANITIZE_THREAD__
  return;  /* TSan refuses to start threads after a multi-threaded fork */
#endif
  rt_opts()->num_threads = 3;
  rt_pool_shutdown();
  check_cover(100, 1);
  struct timespec ts = {0, 5000000};
  nanosleep(&ts, NULL);  /* workers asleep on the condition variable */
  pid_t pid = fork();
  if (pid == 0) _exit(child_cover());
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  check_cover(100, 1);  /* the parent's pool is unaffected */
}
END_TEST

/* ---- random state and stats --------------------------------------------- */
START_TEST(test_rng_default_seed) {
  if (!tests_fork()) return;
  uint64_t seed, off;
  rt_rng_take(4, &seed, &off);
  ck_assert_uint_eq(seed, 0x6b696c6e);
  ck_assert_uint_eq(off, 0);
}
END_TEST

START_TEST(test_rng_take) {
  uint64_t seed, off;
  rt_rng_seed(5);
  rt_rng_take(10, &seed, &off);
  ck_assert_uint_eq(seed, 5);
  ck_assert_uint_eq(off, 0);
  rt_rng_take(3, &seed, &off);
  ck_assert_uint_eq(off, 10);
  rt_rng_take(0, &seed, &off);
  ck_assert_uint_eq(off, 13);
  kiln_manual_seed(7);
  rt_rng_take(1, &seed, &off);
  ck_assert_uint_eq(seed, 7);
  ck_assert_uint_eq(off, 0);
}
END_TEST

static void *rng_worker(void *arg) {
  uint64_t *sum = arg, seed, off;
  for (int i = 0; i < 1000; i++) {
    rt_rng_take(3, &seed, &off);
    *sum += off;
  }
  return NULL;
}

/* Concurrent takes get disjoint ranges: offsets 0, 3, ..., 3 * 3999. */
START_TEST(test_rng_threads) {
  rt_rng_seed(1);
  pthread_t t[4];
  uint64_t sums[4] = {0};
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, rng_worker, &sums[i]);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  uint64_t seed, off;
  rt_rng_take(0, &seed, &off);
  ck_assert_uint_eq(off, 12000);
  ck_assert_uint_eq(sums[0] + sums[1] + sums[2] + sums[3], 3ull * 3999 * 4000 / 2);
}
END_TEST

START_TEST(test_stats) {
  kiln_reset_stats();
  rt_stats_mut()->compiles += 2;
  rt_stats_mut()->bytes_moved += 100;
  kiln_stats_t s = kiln_stats();
  ck_assert_uint_eq(s.compiles, 2);
  ck_assert_uint_eq(s.bytes_moved, 100);
  kiln_reset_stats();
  ck_assert_uint_eq(kiln_stats().compiles, 0);
}
END_TEST

/* ---- CUDA detection ----------------------------------------------------- */
START_TEST(test_cuda_detection) {
  char why[200];
  int n = rt_cuda_count(why, sizeof why);
  ck_assert_int_ge(n, 0);
  ck_assert_int_eq(kiln_cuda_device_count(), n);
  ck_assert_int_eq(kiln_cuda_is_available(), n > 0);
  kiln_device d = kiln_default_device();
  ck_assert_int_eq(d.type, n > 0 ? KILN_CUDA : KILN_CPU);
  ck_assert_int_eq(d.index, 0);
  ck_assert_int_eq(kiln_cpu_device().type, KILN_CPU);
  if (n == 0) {
    ck_assert_msg(strlen(why) > 0, "no reason given for no CUDA");
    ck_assert_ptr_null(rt_cuda_sym("cuInit"));
  } else {
    ck_assert_str_eq(why, "");
    ck_assert_ptr_nonnull(rt_cuda_sym("cuLaunchKernel"));
  }
  rt_cuda_shutdown();
  ck_assert_int_eq(rt_cuda_count(NULL, 0), n);  /* probes again after shutdown */
}
END_TEST

/* Where the driver is missing (these build machines), the reason says so. */
START_TEST(test_cuda_no_driver_reason) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) {
    dlclose(lib);
    return;
  }
  char why[200];
  ck_assert_int_eq(rt_cuda_count(why, sizeof why), 0);
  ck_assert_str_eq(why, "libcuda.so.1 not found (no NVIDIA driver)");
  ck_assert_int_eq(kiln_default_device().type, KILN_CPU);
}
END_TEST

static Suite *runtime_suite(void) {
  Suite *s = suite_create("runtime");
  TCase *opts = tcase_create("options");
  tcase_add_test(opts, test_version);
  tcase_add_test(opts, test_options_env);
  tcase_add_test(opts, test_options_eager);
  suite_add_tcase(s, opts);
  TCase *buf = tcase_create("buffers");
  tcase_add_test(buf, test_buffer_alignment);
  tcase_add_test(buf, test_buffer_huge_pages);
  tcase_add_test(buf, test_buffer_reuse);
  tcase_add_test(buf, test_buffer_stats_and_cache_free);
  tcase_add_test(buf, test_buffer_borrow);
  tcase_add_test(buf, test_buffer_lend);
  tcase_add_test(buf, test_buffer_threads);
  suite_add_tcase(s, buf);
  TCase *pool = tcase_create("pool");
  tcase_add_test(pool, test_pool_cover);
  tcase_add_test(pool, test_pool_chunks);
  tcase_add_test(pool, test_pool_tiny_on_caller);
  tcase_add_test(pool, test_pool_many_jobs);
  tcase_add_test(pool, test_pool_nested);
  tcase_add_test(pool, test_pool_concurrent_callers);
  tcase_add_test(pool, test_pool_sleep_paths);
  tcase_add_test(pool, test_pool_fork);
  suite_add_tcase(s, pool);
  TCase *state = tcase_create("state");
  tcase_add_test(state, test_rng_default_seed);
  tcase_add_test(state, test_rng_take);
  tcase_add_test(state, test_rng_threads);
  tcase_add_test(state, test_stats);
  suite_add_tcase(s, state);
  TCase *cuda = tcase_create("cuda");
  tcase_add_test(cuda, test_cuda_detection);
  tcase_add_test(cuda, test_cuda_no_driver_reason);
  suite_add_tcase(s, cuda);
  return s;
}

KILN_TEST_MAIN(runtime_suite)
