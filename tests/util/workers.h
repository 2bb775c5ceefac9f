/* workers.h: the concurrency suites' threads (test_threads, test_stress):
 * workers released together, each reporting its first problem as text
 * (Check's asserts belong to the main thread), and the oracle check of a
 * value a worker computed. */
#ifndef KILN_TEST_WORKERS_H
#define KILN_TEST_WORKERS_H

#include <stdbool.h>

#include "ref.h"

typedef struct tu_worker {
  int id;
  void *shared;
  char why[512];        /* the first problem it found; empty while all is well */
} tu_worker;

typedef void (*tu_work_fn)(tu_worker *w);

/* Runs fn on n threads (at most 16), released together, and fails the test
 * with the first problem any of them reports. */
void tu_run_workers(int n, tu_work_fn fn, void *shared);

/* Compares the realized t with want (then freed) within t's dtype tolerance
 * (at least 1e-4: f32 sums round in another order than the oracle's f64
 * ones); false with w->why on a mismatch or a NULL want. */
bool tu_worker_expect(tu_worker *w, const char *what, ref_tensor *want, kiln_tensor *t);
/* The oracle's value of t (computed first: a realized node has dropped its
 * sources), then t realized and compared with it. */
bool tu_worker_check(tu_worker *w, const char *what, kiln_tensor *t);

#endif
