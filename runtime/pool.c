/* pool.c: the CPU thread pool behind rt_parallel_for. num_threads - 1
 * persistent workers, started on first use, spin briefly and then sleep on a
 * condition variable; the caller works too. Chunks are claimed from one atomic
 * word, so a worker that wakes late simply finds nothing left to do. */
#include "runtime/rt.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Pause instructions before sleeping: a worker spins for new work, the
 * caller for the last chunks. A pause takes 10-40 ns depending on the CPU,
 * so this covers back-to-back kernels (20-80 us) without stealing a small
 * machine from other processes for long. */
#define SPIN_WORK 2000
#define SPIN_DONE 2000

/* The job word: generation (bits 32..63), next unclaimed chunk (16..31),
 * chunk count (0..15). One word makes "claim chunk i of job g" a single CAS,
 * so no worker can take a chunk of a job that has already finished. */
#define WORD(gen, next, n) (((uint64_t)(gen) << 32) | ((uint64_t)(next) << 16) | (uint64_t)(n))
#define WORD_GEN(w) ((uint32_t)((w) >> 32))
#define WORD_NEXT(w) ((int)(((w) >> 16) & 0xffff))
#define WORD_N(w) ((int)((w) & 0xffff))

static struct {
  pthread_mutex_t lock;   /* guards sleeping workers, the sleeping caller, start/stop */
  pthread_cond_t wake;    /* workers: a new job or stop */
  pthread_cond_t done;    /* caller: the last chunk finished */
  pthread_t *threads;
  int nworkers;
  atomic_int started;
  atomic_bool stop;
  atomic_flag busy;       /* held by the running rt_parallel_for */
  _Atomic uint64_t word;
  atomic_int remaining;   /* chunks not yet finished */
  int sleepers;           /* workers in cond_wait, under lock */
  bool caller_waiting;    /* under lock */
  /* the current job, written before word is published */
  rt_task_fn fn;
  void *ctx;
  int64_t n;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER, .busy = ATOMIC_FLAG_INIT};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Claims the next chunk of job gen; -1 when none is left (or gen is over). */
static int chunk_claim(uint32_t gen) {
  uint64_t w = atomic_load_explicit(&pool.word, memory_order_acquire);
  while (WORD_GEN(w) == gen && WORD_NEXT(w) < WORD_N(w)) {
    uint64_t next = WORD(gen, WORD_NEXT(w) + 1, WORD_N(w));
    if (atomic_compare_exchange_weak_explicit(&pool.word, &w, next, memory_order_acq_rel,
                                              memory_order_acquire))
      return WORD_NEXT(w);
  }
  return -1;
}

/* Runs chunk i of k over [0, n): sizes differ by at most one element. */
static void chunk_run(int i, int k) {
  int64_t base = pool.n / k, rem = pool.n % k;
  int64_t lo = i * base + (i < rem ? i : rem);
  pool.fn(pool.ctx, lo, lo + base + (i < rem));
}

/* Runs chunks of job gen until none is left; returns how many it finished. */
static int chunks_drain(uint32_t gen, int k) {
  int done = 0, i;
  while ((i = chunk_claim(gen)) >= 0) {
    chunk_run(i, k);
    done++;
  }
  return done;
}

/* A worker's finished chunks; the one finishing the job wakes the caller. */
static void chunks_finish(int done) {
  if (done == 0 || atomic_fetch_sub_explicit(&pool.remaining, done, memory_order_acq_rel) != done) return;
  pthread_mutex_lock(&pool.lock);
  if (pool.caller_waiting) pthread_cond_signal(&pool.done);
  pthread_mutex_unlock(&pool.lock);
}

/* Waits for a generation other than seen (or stop); returns the new word. */
static uint64_t worker_wait(uint32_t seen) {
  for (int s = 0; s < SPIN_WORK; s++) {
    uint64_t w = atomic_load_explicit(&pool.word, memory_order_acquire);
    if (WORD_GEN(w) != seen || atomic_load(&pool.stop)) return w;
    cpu_relax();
  }
  pthread_mutex_lock(&pool.lock);
  pool.sleepers++;
  uint64_t w;
  while (WORD_GEN(w = atomic_load(&pool.word)) == seen && !atomic_load(&pool.stop))
    pthread_cond_wait(&pool.wake, &pool.lock);
  pool.sleepers--;
  pthread_mutex_unlock(&pool.lock);
  return w;
}

static void *worker_main(void *arg) {
  uint32_t seen = (uint32_t)(uintptr_t)arg;
  for (;;) {
    uint64_t w = worker_wait(seen);
    if (atomic_load(&pool.stop)) return NULL;
    seen = WORD_GEN(w);
    chunks_finish(chunks_drain(seen, WORD_N(w)));
  }
}

/* A forked child has none of the parent's workers, and a condition
 * variable that counts them as waiters could block a broadcast forever:
 * start from scratch (tests fork per case, and users fork too). */
static void pool_after_fork(void) {
  pool.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  pool.wake = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
  pool.done = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
  free(pool.threads);
  pool.threads = NULL;
  pool.nworkers = pool.sleepers = 0;
  pool.caller_waiting = false;
  atomic_store(&pool.started, 0);
  atomic_flag_clear(&pool.busy);
}

static void pool_register_fork(void) { pthread_atfork(NULL, NULL, pool_after_fork); }

/* Starts the workers once; a failed pthread_create just means fewer
 * workers (the caller claims whatever nobody else takes). Without memory
 * for the thread list none start, and the next launch tries again. */
static void pool_start(void) {
  static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
  pthread_once(&fork_once, pool_register_fork);
  pthread_mutex_lock(&pool.lock);
  if (!atomic_load(&pool.started)) {
    int want = rt_opts()->num_threads - 1;
    pool.threads = ir_calloc((size_t)(want > 0 ? want : 1), sizeof *pool.threads);
    uint32_t gen = WORD_GEN(atomic_load(&pool.word));
    atomic_store(&pool.stop, false);
    pool.nworkers = 0;
    while (pool.threads && pool.nworkers < want &&
           pthread_create(&pool.threads[pool.nworkers], NULL, worker_main, (void *)(uintptr_t)gen) == 0)
      pool.nworkers++;
    if (pool.threads) atomic_store(&pool.started, 1);
  }
  pthread_mutex_unlock(&pool.lock);
}

/* Publishes a job of k chunks and wakes sleeping workers. */
static uint32_t job_publish(int64_t n, int k, rt_task_fn fn, void *ctx) {
  pool.fn = fn;
  pool.ctx = ctx;
  pool.n = n;
  atomic_store_explicit(&pool.remaining, k, memory_order_relaxed);
  uint32_t gen = WORD_GEN(atomic_load_explicit(&pool.word, memory_order_relaxed)) + 1;
  atomic_store_explicit(&pool.word, WORD(gen, 0, k), memory_order_release);
  pthread_mutex_lock(&pool.lock);
  if (pool.sleepers) pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  return gen;
}

/* Waits for chunks that workers claimed and are still running. */
static void job_wait(void) {
  for (int s = 0; s < SPIN_DONE; s++) {
    if (atomic_load_explicit(&pool.remaining, memory_order_acquire) == 0) return;
    cpu_relax();
  }
  pthread_mutex_lock(&pool.lock);
  pool.caller_waiting = true;
  while (atomic_load_explicit(&pool.remaining, memory_order_acquire) != 0)
    pthread_cond_wait(&pool.done, &pool.lock);
  pool.caller_waiting = false;
  pthread_mutex_unlock(&pool.lock);
}

/* Not reentrant: a nested call (fn calling rt_parallel_for) or a call from a
 * second thread while one runs finds the pool busy and runs serially. */
void rt_parallel_for(int64_t n, int64_t min_chunk, rt_task_fn fn, void *ctx) {
  if (n <= 0) return;
  if (min_chunk < 1) min_chunk = 1;
  int64_t k = n / min_chunk;
  int nt = rt_opts()->num_threads;
  if (k > nt) k = nt;
  if (k <= 1 || atomic_flag_test_and_set_explicit(&pool.busy, memory_order_acquire)) {
    fn(ctx, 0, n);  /* tiny work: no synchronisation at all */
    return;
  }
  if (!atomic_load_explicit(&pool.started, memory_order_acquire)) pool_start();
  uint32_t gen = job_publish(n, (int)k, fn, ctx);
  int done = chunks_drain(gen, (int)k);
  if (atomic_fetch_sub_explicit(&pool.remaining, done, memory_order_acq_rel) != done) job_wait();
  atomic_flag_clear_explicit(&pool.busy, memory_order_release);
}

void rt_pool_shutdown(void) {
  pthread_mutex_lock(&pool.lock);
  if (!atomic_load(&pool.started)) {
    pthread_mutex_unlock(&pool.lock);
    return;
  }
  atomic_store(&pool.stop, true);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  for (int i = 0; i < pool.nworkers; i++) pthread_join(pool.threads[i], NULL);
  free(pool.threads);
  pool.threads = NULL;
  pool.nworkers = 0;
  atomic_store(&pool.started, 0);
}
