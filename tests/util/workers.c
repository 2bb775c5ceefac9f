/* workers.c: threads for the concurrency suites (workers.h). */
#include "workers.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>

#include "kiln.h"

typedef struct {
  tu_worker *w;
  tu_work_fn fn;
  pthread_barrier_t *start;
} worker_start;

static void *worker_main(void *arg) {
  worker_start *s = arg;
  pthread_barrier_wait(s->start);
  s->fn(s->w);
  return NULL;
}

void tu_run_workers(int n, tu_work_fn fn, void *shared) {
  enum { MAX_WORKERS = 16 };
  ck_assert_int_le(n, MAX_WORKERS);
  pthread_t th[MAX_WORKERS];
  tu_worker w[MAX_WORKERS];
  worker_start st[MAX_WORKERS];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) {
    w[i] = (tu_worker){.id = i, .shared = shared};
    st[i] = (worker_start){&w[i], fn, &start};
    ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &st[i]), 0);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < n; i++) ck_assert_msg(!w[i].why[0], "thread %d: %s", i, w[i].why);
}

bool tu_worker_expect(tu_worker *w, const char *what, ref_tensor *want, kiln_tensor *t) {
  if (!want) {
    snprintf(w->why, sizeof w->why, "%s: the oracle cannot evaluate it", what);
    return false;
  }
  ref_tol tol = ref_tol_dtype(kiln_dtype_of(t));
  if (tol.rtol < 1e-4) tol = (ref_tol){1e-4, 1e-5};
  char why[400];
  bool ok = ref_check(want, t, tol.rtol, tol.atol, why, sizeof why);
  if (!ok) snprintf(w->why, sizeof w->why, "%s: %s", what, why);
  ref_free(want);
  return ok;
}

bool tu_worker_check(tu_worker *w, const char *what, kiln_tensor *t) {
  ref_tensor *want = ref_eval(t);
  if (want && kiln_realize(t) != KILN_OK) {
    snprintf(w->why, sizeof w->why, "%s: %s", what, kiln_last_error());
    ref_free(want);
    return false;
  }
  return tu_worker_expect(w, what, want, t);
}
