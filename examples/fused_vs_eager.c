/* fused_vs_eager.c: one realistic expression, a 2-layer MLP forward
 * softmax(gelu(x @ W1^T + b1) @ W2^T + b2), run fused (kiln's default) and
 * eager (every op its own kernel, as PyTorch runs it), with the kernels
 * launched, the bytes they moved, the time and the speed-up; then its DAG
 * as Graphviz DOT with each fused kernel a cluster. Uses only the public
 * header. Usage: fused_vs_eager [runs] [dot file] (default 5 and
 * fused_vs_eager.dot in the current directory). */
#include <kiln.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { BATCH = 512, IN = 512, HIDDEN = 2048, OUT = 256 };

typedef struct {
  kiln_tensor *x, *w1, *b1, *w2, *b2;
} mlp;

typedef struct {
  const char *mode;
  double median_ms;
  kiln_stats_t per_run;  /* kiln_stats delta of one timed run */
  float *out;            /* BATCH x OUT result of the warm-up run */
} measurement;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Weights scaled by 1/sqrt(fan_in), as PyTorch initialises nn.Linear, so
 * the activations stay in a range where gelu and softmax are not flat. */
static kiln_tensor *weight(int64_t out, int64_t in) {
  return kiln_muls(kiln_randn(KILN_SHAPE(out, in), KILN_F32), 1.0 / sqrt((double)in));
}

/* Seeded inputs, realized once: random tensors are fusible nodes, and the
 * comparison is about the MLP, not about generating its inputs. */
static int mlp_init(mlp *m) {
  kiln_manual_seed(0);
  m->x = kiln_randn(KILN_SHAPE(BATCH, IN), KILN_F32);
  m->w1 = weight(HIDDEN, IN);
  m->b1 = kiln_muls(kiln_rand(KILN_SHAPE(HIDDEN), KILN_F32), 0.1);
  m->w2 = weight(OUT, HIDDEN);
  m->b2 = kiln_muls(kiln_rand(KILN_SHAPE(OUT), KILN_F32), 0.1);
  kiln_tensor *all[] = {m->x, m->w1, m->b1, m->w2, m->b2};
  return kiln_realize_n(5, all) == KILN_OK ? 0 : -1;
}

static kiln_tensor *mlp_forward(const mlp *m) {
  kiln_tensor *h = kiln_gelu(kiln_linear(m->x, m->w1, m->b1));
  return kiln_softmax(kiln_linear(h, m->w2, m->b2), -1);
}

static kiln_stats_t stats_delta(kiln_stats_t a, kiln_stats_t b) {
  return (kiln_stats_t){b.kernels_launched - a.kernels_launched, b.compiles - a.compiles,
                        b.cache_hits - a.cache_hits, b.bytes_moved - a.bytes_moved,
                        b.auto_realizes - a.auto_realizes, b.disk_hits - a.disk_hits,
                        b.evictions - a.evictions, b.code_bytes, b.plans - a.plans};
}

/* One forward pass, timed from building the graph to the result: graph
 * building, passes, cache lookups and launches all count. The warm-up pass
 * (out != NULL) also compiles, so it is not timed; it keeps the result. */
static int run_once(const mlp *m, double *ms, kiln_stats_t *delta, float *out) {
  kiln_scope_begin();  /* releases this pass's intermediates */
  kiln_stats_t s0 = kiln_stats();
  double t0 = now_ms();
  kiln_tensor *y = mlp_forward(m);
  kiln_status st = kiln_realize(y);
  *ms = now_ms() - t0;
  *delta = stats_delta(s0, kiln_stats());
  if (st == KILN_OK && out) st = kiln_copy_to_host(y, out, sizeof(float) * BATCH * OUT);
  kiln_scope_end();
  return st == KILN_OK ? 0 : -1;
}

static int measure(const mlp *m, int eager, int runs, measurement *r) {
  kiln_set_eager(eager);
  r->mode = eager ? "eager" : "fused";
  r->out = malloc(sizeof(float) * BATCH * OUT);
  double *ms = malloc(sizeof(double) * (size_t)runs);
  int rc = r->out && ms ? run_once(m, &ms[0], &r->per_run, r->out) : -1;
  for (int i = 0; rc == 0 && i < runs; i++) rc = run_once(m, &ms[i], &r->per_run, NULL);
  if (rc == 0) {
    qsort(ms, (size_t)runs, sizeof *ms, cmp_double);
    r->median_ms = ms[runs / 2];
  }
  free(ms);
  kiln_set_eager(0);
  return rc;
}

static void report(const measurement *r) {
  printf("%-6s %8llu %12.1f %10.3f\n", r->mode, (unsigned long long)r->per_run.kernels_launched,
         (double)r->per_run.bytes_moved / 1e6, r->median_ms);
}

/* Fused chains keep f32 intermediates and eager ones round after each op the
 * same way (all f32 here), so the two agree up to summation order. */
static double max_diff(const float *a, const float *b) {
  double d = 0;
  for (int i = 0; i < BATCH * OUT; i++) d = fmax(d, fabs((double)a[i] - b[i]));
  return d;
}

/* What the fuser made of one forward pass, drawn without running it: the
 * kernels are clusters, so the fused matmul epilogues and the row-wise
 * softmax are visible at a glance. */
static int write_dot(const mlp *m, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  kiln_scope_begin();
  kiln_status st = kiln_dump_graph(mlp_forward(m), f, KILN_FMT_DOT);
  kiln_scope_end();
  if (fclose(f) != 0 || st != KILN_OK) {
    fprintf(stderr, "fused_vs_eager: writing %s: %s\n", path, st != KILN_OK ? kiln_last_error() : "write failed");
    return -1;
  }
  printf("\nthe fused DAG, one cluster per kernel: %s\n", path);
  if (access("/usr/bin/dot", X_OK) != 0) {
    printf("install Graphviz (apt-get install graphviz) to render it: dot -Tsvg -O %s\n", path);
    return 0;
  }
  /* the library never runs programs; this example renders its own output */
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "/usr/bin/dot -Tsvg -O '%s'", path);
  if (strchr(path, '\'') || system(cmd) != 0) printf("could not render it: run dot -Tsvg -O %s\n", path);
  else printf("rendered as SVG: %s.svg\n", path);
  return 0;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 5;
  if (runs < 1) runs = 1;
  printf("MLP forward: softmax(gelu(x @ W1^T + b1) @ W2^T + b2)\n");
  printf("x (%d, %d), W1 (%d, %d), W2 (%d, %d), f32; median of %d runs after a warm-up\n\n", BATCH, IN,
         HIDDEN, IN, OUT, HIDDEN, runs);
  kiln_scope_begin();
  mlp m;
  measurement fused = {0}, eager = {0};
  int rc = mlp_init(&m);
  if (rc == 0) rc = measure(&m, 0, runs, &fused);
  if (rc == 0) rc = measure(&m, 1, runs, &eager);
  if (rc == 0) {
    printf("%-6s %8s %12s %10s\n", "mode", "kernels", "MB moved", "median ms");
    report(&fused);
    report(&eager);
    printf("\nspeed-up of fused over eager: %.2fx, %.1fx fewer bytes moved\n",
           eager.median_ms / fused.median_ms,
           (double)eager.per_run.bytes_moved / (double)fused.per_run.bytes_moved);
    printf("largest difference between the two results: %.3g\n", max_diff(fused.out, eager.out));
    rc = write_dot(&m, argc > 2 ? argv[2] : "fused_vs_eager.dot");
  } else {
    fprintf(stderr, "fused_vs_eager: %s\n", kiln_last_error());
  }
  free(fused.out);
  free(eager.out);
  kiln_scope_end();
  kiln_shutdown();
  return rc == 0 ? 0 : 1;
}
