/* test_stress.c: kiln under a server's load, every result checked against
 * the oracle. Threads that at once build and realize private graphs of new
 * shapes, read tensors other threads realized, run shared static and
 * dynamic compiled functions at new sizes, compile new functions, push
 * kernels out of a kernel cache with room for a few, and print and save
 * .npy files; then two processes (KILN_KERNEL_CACHE_MB=0: every realize
 * reads the disk) writing and reading the same disk-cache entries, one
 * killed mid-write. test_threads.c holds one sharing pattern per case; this suite
 * runs them all at once. The bounded run is CI's; KILN_TEST_SOAK=seconds
 * runs each part that long. scripts/tsan.sh runs it under ThreadSanitizer. */
#include "check_main.h"
#include "runtime/rt.h"
#include "runtime/rt_internal.h"
#include "util/testutil.h"
#include "util/workers.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Rounds per worker (each worker changes task every round, so every task
 * runs beside every other); the functions' shapes and calls per burst; the
 * chains' count. */
enum { NWORKERS = 6, ROUNDS = 12, BOARD = 4, FK = 16, FN = 6, FROWS = 8, FMAX = 48, FCALLS = 12, NCHAINS = 48 };
/* Room for a few small kernels: every new one pushes an older one out. */
enum { TINY_CACHE = 16 << 10 };

/* KILN_TEST_SOAK's seconds, 0 for the bounded run. */
static double soak_seconds(void) {
  const char *s = getenv("KILN_TEST_SOAK");
  return s ? atof(s) : 0;
}

static char dir[64];   /* this test's files: the disk cache, .npy files, a log */

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/kiln-stress-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(const char *d) {
  DIR *h = opendir(d);
  char path[512];
  for (struct dirent *e; h && (e = readdir(h));)
    if (e->d_name[0] != '.' && snprintf(path, sizeof path, "%s/%s", d, e->d_name) < (int)sizeof path) {
      if (e->d_type == DT_DIR) remove_dir(path);
      else unlink(path);
    }
  if (h) closedir(h);
  rmdir(d);
}

/* Chain i (tu_chain: each i its own kernel) of n new values in [-1, 1]
 * (products stay small), checked. */
static bool check_chain(tu_worker *w, uint64_t *rng, int i, int64_t n) {
  kiln_tensor *x = kiln_muls(tu_data(KILN_F32, KILN_SHAPE(n), tu_next(rng), TU_SMALL), 0.25);
  return tu_worker_check(w, "chain", tu_chain(x, i));
}

/* ---- what the workers share -------------------------------------------------- */
typedef struct {
  pthread_mutex_t mu;           /* the board */
  kiln_tensor *board[BOARD];    /* realized by some worker, read by the others (each retained) */
  kiln_tensor *w, *b;           /* realized weights: the functions' constants, also captured by new ones */
  kiln_fn *fixed, *dyn;         /* over (FROWS, FK) and (-1, FK), run by every worker */
  float in[NWORKERS][FMAX * FK], out[NWORKERS][FMAX * FN];   /* a worker's buffers for the shared functions */
  double until_ms;              /* the soak's end; 0: ROUNDS rounds */
} stress;

static void publish(stress *s, int slot, kiln_tensor *t) {
  kiln_retain(t);
  pthread_mutex_lock(&s->mu);
  kiln_tensor *old = s->board[slot];
  s->board[slot] = t;
  pthread_mutex_unlock(&s->mu);
  kiln_release(old);
}

/* A board tensor, retained for the caller. */
static kiln_tensor *take(stress *s, int slot) {
  pthread_mutex_lock(&s->mu);
  kiln_tensor *t = s->board[slot];
  kiln_retain(t);
  pthread_mutex_unlock(&s->mu);
  return t;
}

/* The shared functions' graph: softmax(gelu(x W^T + b)) and each row's sum
 * of squares. */
static void model(const stress *s, kiln_tensor *x, kiln_tensor **out) {
  out[0] = kiln_softmax(kiln_gelu(kiln_linear(x, s->w, s->b)), -1);
  out[1] = kiln_sum_dims(kiln_mul(x, x), KILN_DIMS(1), 0);
}

/* ---- the tasks ---------------------------------------------------------------- */
typedef bool (*task_fn)(tu_worker *w, stress *s, uint64_t *rng);

/* (a) A private graph of a new shape and new values: a softmax (published
 * on the board), a matmul with a broadcast row sum, an integer reduction. */
static bool private_graphs(tu_worker *w, stress *s, uint64_t *rng) {
  int64_t m = 1 + tu_below(rng, 20), n = 1 + tu_below(rng, 40);
  uint64_t seed = tu_next(rng);
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(m, n), seed, TU_SMALL);
  kiln_tensor *y = tu_data(KILN_F32, KILN_SHAPE(n, 5), seed + 1, TU_SMALL);
  kiln_tensor *i = tu_data(KILN_I32, KILN_SHAPE(m, n), seed + 2, TU_SMALL);
  kiln_tensor *soft = kiln_softmax(kiln_muls(kiln_relu(x), 0.5 + tu_below(rng, 4)), -1);
  bool ok = tu_worker_check(w, "softmax", soft) &&
            tu_worker_check(w, "matmul", kiln_add(kiln_matmul(x, y), kiln_sum_dims(x, KILN_DIMS(1), 1))) &&
            tu_worker_check(w, "integers", kiln_sum_dims(kiln_mul(i, kiln_adds(i, 3)), KILN_DIMS(0), 0));
  if (ok) publish(s, tu_below(rng, BOARD), soft);
  return ok;
}

/* (b) Graphs over a tensor another worker realized. */
static bool read_board(tu_worker *w, stress *s, uint64_t *rng) {
  kiln_tensor *t = take(s, tu_below(rng, BOARD)), *tt = kiln_transpose(t, 0, 1);
  bool ok = tu_worker_check(w, "board*2+1", kiln_adds(kiln_muls(t, 2), 1)) &&
            tu_worker_check(w, "board @ board^T", kiln_matmul(t, tt)) &&
            tu_worker_check(w, "max of board^T", kiln_max_dims(tt, KILN_DIMS(1), 0));
  kiln_release(t);
  return ok;
}

/* (c) The shared static or dynamic function at a new size, its first
 * output into a given buffer or a new tensor, against the oracle's value of
 * the same graph over the same input. */
static bool shared_fn_call(tu_worker *w, stress *s, uint64_t *rng) {
  bool dyn = tu_below(rng, 2), given = tu_below(rng, 2);
  int64_t rows = dyn ? 1 + tu_below(rng, FMAX) : FROWS;
  float *in = s->in[w->id];
  tu_fill(KILN_F32, rows * FK, tu_next(rng), TU_SMALL, in);
  kiln_tensor *x = kiln_from_buffer(in, KILN_F32, KILN_SHAPE(rows, FK));
  kiln_tensor *out[2] = {given ? kiln_from_buffer(s->out[w->id], KILN_F32, KILN_SHAPE(rows, FN)) : NULL, NULL};
  if (kiln_fn_run(dyn ? s->dyn : s->fixed, &x, out) != KILN_OK) {
    snprintf(w->why, sizeof w->why, "%s function, %lld rows: %s", dyn ? "dynamic" : "static", (long long)rows,
             kiln_last_error());
    return false;
  }
  kiln_tensor *want[2];
  model(s, kiln_from_data(in, KILN_F32, KILN_SHAPE(rows, FK)), want);
  return tu_worker_expect(w, "fn softmax", ref_eval(want[0]), out[0]) &&
         tu_worker_expect(w, "fn sum of squares", ref_eval(want[1]), out[1]);
}

/* A burst of calls, as a server's requests come: new sizes are planned
 * while the other worker on this task runs the variants it has; then the
 * dynamic function's variants are printed while others are added. */
static bool shared_fns(tu_worker *w, stress *s, uint64_t *rng) {
  bool ok = true;
  for (int k = 0; k < FCALLS && ok; k++) {
    kiln_scope_begin();
    ok = shared_fn_call(w, s, rng);
    kiln_scope_end();
  }
  FILE *sink = fopen("/dev/null", "w");
  if (ok && (!sink || kiln_fn_dump(s->dyn, sink, KILN_FMT_TEXT) != KILN_OK)) {
    snprintf(w->why, sizeof w->why, "fn_dump: %s", sink ? kiln_last_error() : "no /dev/null");
    ok = false;
  }
  if (sink) fclose(sink);
  return ok;
}

/* (d) A new function (static or dynamic, a new constant, the shared
 * weights captured), run at one or two sizes, then freed. */
static kiln_tensor *new_graph(const stress *s, kiln_tensor *x, double scale) {
  return kiln_tanh(kiln_add(kiln_muls(kiln_matmul(x, kiln_transpose(s->w, 0, 1)), scale), s->b));
}

static bool new_fns(tu_worker *w, stress *s, uint64_t *rng) {
  double scale = 0.25 * (1 + tu_below(rng, 8));
  bool dyn = tu_below(rng, 2);
  int64_t rows = 1 + tu_below(rng, 12);
  kiln_tensor *p = kiln_placeholder(KILN_F32, KILN_SHAPE(dyn ? -1 : rows, FK)), *y = new_graph(s, p, scale);
  kiln_fn *f = kiln_compile(1, &p, 1, &y);
  bool ok = f != NULL;
  if (!ok) snprintf(w->why, sizeof w->why, "compile: %s", kiln_last_error());
  for (int call = 0; ok && call < 1 + dyn; call++) {
    int64_t r = dyn ? 1 + tu_below(rng, FMAX) : rows;
    kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(r, FK), tu_next(rng), TU_SMALL), *out = NULL;
    if (!(ok = kiln_fn_run(f, &x, &out) == KILN_OK))
      snprintf(w->why, sizeof w->why, "new function, %lld rows: %s", (long long)r, kiln_last_error());
    else ok = tu_worker_expect(w, "new function", ref_eval(new_graph(s, x, scale)), out);
  }
  kiln_fn_free(f);
  return ok;
}

/* (e) Chains from a pool larger than the tiny cache: every one compiled
 * (or loaded from the disk cache) pushes older ones out, whoever runs them. */
static bool evict_chains(tu_worker *w, stress *s, uint64_t *rng) {
  (void)s;
  bool ok = true;
  for (int k = 0; k < 3 && ok; k++) ok = check_chain(w, rng, tu_below(rng, NCHAINS), 1 + tu_below(rng, 64));
  return ok;
}

/* The numbers of a printed tensor against the oracle's values (printed
 * with 4 digits); false with w->why. */
static bool printed(tu_worker *w, const char *what, char *text, ref_tensor *want) {
  const char *p = text ? strchr(text, '[') : NULL, *end = text ? strrchr(text, ']') : NULL;
  int64_t k = 0;
  bool ok = p && want;
  while (ok && p < end) {
    char *q = (char *)p;
    double v = strchr("-0123456789", *p) ? strtod(p, &q) : 0;
    if (q == p) {   /* not a number here: brackets, commas, spaces */
      p++;
      continue;
    }
    ok = k < want->numel && fabs(v - ref_get(want, k)) <= 1e-4 * (1 + fabs(ref_get(want, k)));
    k++;
    p = q;
  }
  ok = ok && k == want->numel;
  if (!ok)
    snprintf(w->why, sizeof w->why, "%s: printed \"%.300s\" for %lld values (first bad: %lld)", what,
             text ? text : kiln_last_error(), want ? (long long)want->numel : -1LL, (long long)k - 1);
  ref_free(want);
  free(text);
  return ok;
}

/* (f) A pending tensor printed (printing realizes it), a board tensor
 * printed, saved as .npy and loaded back. */
static bool print_and_save(tu_worker *w, stress *s, uint64_t *rng) {
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(1 + tu_below(rng, 12)), tu_next(rng), TU_SMALL);
  kiln_tensor *e = kiln_tanh(kiln_muls(x, 0.5)), *t = take(s, tu_below(rng, BOARD));
  ref_tensor *want = ref_eval(e);
  bool ok = printed(w, "to_string of a pending tensor", kiln_to_string(e), want) &&
            printed(w, "to_string of a board tensor", kiln_to_string(t), ref_eval(t));
  char path[96];
  snprintf(path, sizeof path, "%s/worker%d.npy", dir, w->id);
  kiln_tensor *back = ok && kiln_save_npy(t, path) == KILN_OK ? kiln_load_npy(path) : NULL;
  if (ok && kiln_status_of(back) == KILN_OK) {
    ok = tu_worker_expect(w, "npy round trip", ref_eval(t), back);
  } else if (ok) {
    snprintf(w->why, sizeof w->why, "npy round trip: %s", kiln_last_error());
    ok = false;
  }
  kiln_release(t);
  return ok;
}

static const task_fn tasks[] = {private_graphs, read_board, shared_fns, new_fns, evict_chains, print_and_save};
enum { NTASKS = sizeof tasks / sizeof *tasks };

/* Workers 2j and 2j+1 run task (j + round) mod NTASKS: two workers on each
 * of three tasks at once, every task beside every other in turn. */
static void stress_worker(tu_worker *w) {
  stress *s = w->shared;
  uint64_t rng = 0x57e55 + (uint64_t)w->id;
  for (int r = 0; !w->why[0] && (s->until_ms ? rt_now_ms() < s->until_ms : r < ROUNDS); r++) {
    kiln_scope_begin();
    tasks[(w->id / 2 + r) % NTASKS](w, s, &rng);
    kiln_scope_end();
  }
}

static kiln_fn *compile_model(const stress *s, int64_t rows) {
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(rows, FK)), *out[2];
  model(s, x, out);
  kiln_fn *f = kiln_compile(1, &x, 2, out);
  ck_assert_msg(f, "%s", kiln_last_error());
  return f;
}

/* With the disk cache on (in a directory of its own) and room for a few
 * kernels: the kernel cache, the plan cache and the disk cache are missed,
 * hit and evicted from every thread, while compiled functions hold theirs. */
START_TEST(every_task_at_once) {
  make_dir();
  char cache[96];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  setenv("KILN_CACHE_DIR", cache, 1);
  setenv("KILN_CACHE", "1", 1);   /* read when this forked test first asks */
  rt_opts()->kernel_cache_bytes = TINY_CACHE;
  kiln_reset_stats();
  static stress s = {.mu = PTHREAD_MUTEX_INITIALIZER};
  s.w = tu_data(KILN_F32, KILN_SHAPE(FN, FK), 1, TU_SMALL);
  s.b = tu_data(KILN_F32, KILN_SHAPE(FN), 2, TU_SMALL);
  kiln_scope_begin();
  for (int i = 0; i < BOARD; i++) {
    s.board[i] = kiln_retain(kiln_softmax(tu_data(KILN_F32, KILN_SHAPE(3 + i, 5), 10 + (uint64_t)i, TU_SMALL), -1));
    ck_assert_int_eq(kiln_realize(s.board[i]), KILN_OK);
  }
  s.fixed = compile_model(&s, FROWS);
  s.dyn = compile_model(&s, -1);
  kiln_scope_end();
  double soak = soak_seconds();
  s.until_ms = soak > 0 ? rt_now_ms() + 1e3 * soak : 0;
  tu_run_workers(NWORKERS, stress_worker, &s);
  kiln_fn_free(s.fixed);
  kiln_fn_free(s.dyn);
  for (int i = 0; i < BOARD; i++) kiln_release(s.board[i]);
  kiln_release(s.w);
  kiln_release(s.b);
  kiln_stats_t st = kiln_stats();
  fprintf(stderr, "test_stress: %llu launches, %llu compiles, %llu disk hits, %llu memory hits, %llu evictions\n",
          (unsigned long long)st.kernels_launched, (unsigned long long)st.compiles, (unsigned long long)st.disk_hits,
          (unsigned long long)st.cache_hits, (unsigned long long)st.evictions);
  ck_assert_uint_gt(st.evictions, 0);
  ck_assert_uint_gt(st.cache_hits, 0);
  ck_assert_uint_gt(st.disk_hits, 0);
  ck_assert_uint_le(st.code_bytes, TINY_CACHE);   /* nothing holds code any more */
  remove_dir(dir);
}
END_TEST

/* ---- two processes, one disk cache ----------------------------------------------- *
 * Both realize the same chains with KILN_KERNEL_CACHE_MB=0 (so every
 * realize reads the disk cache again, and a miss writes it) and store and
 * load the same large entries of their own through the disk cache's own
 * calls. The survivor runs throughout; victims are killed with SIGKILL
 * while they write, at least MIN_KILLS of them and until one left its
 * temporary file behind (killed mid-write). The survivor must never meet a
 * damaged entry (no warning), every large entry it loads is byte for byte
 * what was stored, and every value is the oracle's; afterwards every entry
 * loads whole. */
enum { PROC_CHAINS = 6, BIG_KEYS = 4, BIG_BYTES = 4 << 20, MIN_KILLS = 3, MAX_KILLS = 20 };

static unsigned char *big[BIG_KEYS];   /* the large entries' payloads */

static ir_str big_key(int j, char *buf, size_t n) {
  int len = snprintf(buf, n, "test_stress large entry %d", j);
  return (ir_str){buf, (size_t)len, n, false};
}

static void big_payloads(void) {
  for (int j = 0; j < BIG_KEYS; j++) {
    big[j] = malloc(BIG_BYTES);
    uint64_t st = (uint64_t)j + 1;
    for (int i = 0; i < BIG_BYTES; i += 8) {
      uint64_t v = tu_next(&st);
      memcpy(big[j] + i, &v, 8);
    }
  }
}

static void big_store(int j) {
  char buf[64];
  ir_str key = big_key(j, buf, sizeof buf);
  rt_disk_info info = {0};
  rt_disk_store("stress", &key, big[j], BIG_BYTES, &info);
}

/* 0 when large entry j is missing or whole; 1 when it loaded with other
 * bytes, 2 when the disk cache met a damaged entry. */
static int big_check(int j, int *hits) {
  char buf[64];
  ir_str key = big_key(j, buf, sizeof buf), got = {0};
  rt_disk_info info = {0};
  bool hit = rt_disk_load("stress", &key, &got, &info);
  int bad = info.warnings ? 2 : hit && (got.len != BIG_BYTES || memcmp(got.s, big[j], BIG_BYTES)) ? 1 : 0;
  *hits += hit;
  ir_str_free(&got);
  return bad;
}

static bool chains_right(tu_worker *w, uint64_t *rng) {
  bool ok = true;
  for (int i = 0; i < PROC_CHAINS && ok; i++) {
    kiln_scope_begin();
    ok = check_chain(w, rng, 300 + i, 16);   /* one shape: one kernel per chain for both processes */
    kiln_scope_end();
  }
  return ok;
}

/* The victim: the chains once, then it stores large entries until it is
 * killed. */
static void victim(void) {
  tu_worker w = {0};
  uint64_t rng = (uint64_t)getpid();
  if (!chains_right(&w, &rng)) {
    fprintf(stderr, "test_stress: victim: %s\n", w.why);
    _exit(1);
  }
  for (int j = 0;; j++) big_store(j % BIG_KEYS);
}

/* The survivor: rounds of the chains and the large entries, the first
 * told to the parent (ready), until the parent closes stop; 0, or what it
 * found. */
static int survivor(int ready, int stop) {
  tu_worker w = {0};
  uint64_t rng = 99;
  int hits = 0, bad = 0;
  for (int it = 0; !bad && (it == 0 || poll(&(struct pollfd){.fd = stop, .events = POLLIN}, 1, 0) == 0); it++) {
    if (!chains_right(&w, &rng)) {
      fprintf(stderr, "test_stress: survivor: %s\n", w.why);
      return 1;
    }
    big_store(it % BIG_KEYS);
    for (int j = 0; j < BIG_KEYS && !bad; j++) bad = big_check(j, &hits);
    if (it == 0 && write(ready, "r", 1) != 1) return 5;
  }
  if (bad)
    fprintf(stderr, "test_stress: survivor: %s\n", bad == 1 ? "a large entry loaded with other bytes" : "a damaged entry");
  return bad ? 1 + bad : hits ? 0 : 4;
}

/* Whether the victim pid has a temporary file in the cache (it is
 * writing an entry, or died doing so); with reap, the file is removed (a
 * soak kills thousands of victims). */
static bool temporary_of(const char *cache, pid_t pid, bool reap) {
  char mark[32], path[512];
  snprintf(mark, sizeof mark, ".tmp.%ld.", (long)pid);
  DIR *d = opendir(cache);
  bool found = false;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strstr(e->d_name, mark)) continue;
    found = true;
    if (reap && snprintf(path, sizeof path, "%s/%s", cache, e->d_name) < (int)sizeof path) unlink(path);
  }
  if (d) closedir(d);
  return found;
}

/* A victim started and killed as soon as it is seen writing an entry (its
 * temporary file there: a large entry takes milliseconds to write); whether
 * it died mid-write (the file is left). */
static bool kill_a_victim(const char *cache) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) victim();
  int status, polls = 0;
  bool alive = true;
  while (alive && !temporary_of(cache, pid, false) && polls++ < 200000) {
    alive = waitpid(pid, &status, WNOHANG) == 0;
    usleep(50);
  }
  ck_assert_msg(alive, "the victim failed before its writes (status %d)", status);
  kill(pid, SIGKILL);
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  return temporary_of(cache, pid, true);
}

/* The log's first warning (KILN_DEBUG=1 prints the disk cache's), or NULL. */
static char *warnings_in(const char *log) {
  FILE *f = fopen(log, "r");
  static char line[1024];
  char *found = NULL;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, "warning") ? line : NULL;
  if (f) fclose(f);
  return found;
}

START_TEST(two_processes_one_disk_cache) {
  make_dir();   /* nothing of kiln runs in this process before the forks (no threads) */
  char cache[96], log[96];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  snprintf(log, sizeof log, "%s/survivor.log", dir);
  setenv("KILN_CACHE_DIR", cache, 1);
  setenv("KILN_CACHE", "1", 1);
  setenv("KILN_KERNEL_CACHE_MB", "0", 1);
  big_payloads();
  int stop[2], ready[2];
  ck_assert_int_eq(pipe(stop), 0);
  ck_assert_int_eq(pipe(ready), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(stop[1]);
    close(ready[0]);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    setenv("KILN_DEBUG", "1", 1);   /* the disk cache's warnings */
    _exit(survivor(ready[1], stop[0]));
  }
  close(stop[0]);
  close(ready[1]);
  char c;
  ck_assert_msg(read(ready[0], &c, 1) == 1, "the survivor failed in its first round (its log: %s)", log);
  close(ready[0]);
  double soak = soak_seconds(), until = rt_now_ms() + 1e3 * soak;
  int kills = 0, torn = 0;
  while (kills < MIN_KILLS || (!torn && kills < MAX_KILLS) || rt_now_ms() < until)
    torn += kill_a_victim(cache), kills++;
  close(stop[1]);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  char *warning = warnings_in(log);
  ck_assert_msg(!warning, "the survivor met a damaged entry: %s", warning);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the survivor failed (status %d; its log: %s)", status,
                log);
  fprintf(stderr, "test_stress: %d victims killed, %d of them mid-write\n", kills, torn);
  ck_assert_msg(torn > 0, "no victim of %d was killed mid-write", kills);
  /* what is left loads whole: the large entries there, every chain from the disk */
  int hits = 0;
  for (int j = 0; j < BIG_KEYS; j++) ck_assert_int_eq(big_check(j, &hits), 0);
  ck_assert_int_gt(hits, 0);
  kiln_reset_stats();
  tu_worker w = {0};
  uint64_t rng = 7;
  ck_assert_msg(chains_right(&w, &rng), "%s", w.why);
  ck_assert_uint_eq(kiln_stats().disk_hits, PROC_CHAINS);
  ck_assert_uint_eq(kiln_stats().compiles, 0);
  for (int j = 0; j < BIG_KEYS; j++) free(big[j]);
  remove_dir(dir);
}
END_TEST

static Suite *stress_suite(void) {
  Suite *s = suite_create("stress");
  /* a soak of many minutes must not meet the timeout */
  int timeout = 120 + 2 * (int)soak_seconds();
  TCase *tc = tu_tcase(s, "threads");
  tcase_set_timeout(tc, timeout);
  tcase_add_test(tc, every_task_at_once);
  tc = tu_tcase(s, "processes");
  tcase_set_timeout(tc, timeout);
  tcase_add_test(tc, two_processes_one_disk_cache);
  return s;
}

KILN_TEST_MAIN(stress_suite)
