/* test_dump.c: kiln_dump_graph: the kernels its DOT clusters and text lines
 * show for graphs whose fusion is known (W1 one kernel, softmax one, a
 * matmul and a reduction after it two; a transfer is a copy), that it runs
 * nothing, that Graphviz accepts the DOT, and its error paths with the
 * caller's file:line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "util/testutil.h"

/* The dump of t as a string (caller frees); fails the test on an error. */
static char *dump(kiln_tensor *t, kiln_graph_format fmt) {
  char *s = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&s, &len);
  ck_assert_ptr_nonnull(out);
  kiln_status st = kiln_dump_graph(t, out, fmt);
  fclose(out);
  ck_assert_msg(st == KILN_OK, "dump_graph: %s", kiln_last_error());
  return s;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* The DOT clusters: their number, and in nodes[k] how many nodes cluster k
 * holds (a node line carries "[label="; a cluster closes with "  }"). */
static int clusters(const char *dot, int *nodes, int max) {
  int k = 0;
  for (const char *p = dot; (p = strstr(p, "subgraph cluster_")); k++) {
    const char *end = strstr(p, "\n  }\n");
    ck_assert_ptr_nonnull(end);
    ck_assert_int_lt(k, max);
    nodes[k] = 0;
    for (const char *q = p; (q = strstr(q, "[label=")) && q < end; q++) nodes[k]++;
    p = end;
  }
  return k;
}

/* The text of cluster k of dot, up to its closing brace (caller frees). */
static char *cluster_text(const char *dot, int k) {
  char head[40];
  snprintf(head, sizeof head, "subgraph cluster_%d {", k);
  const char *p = strstr(dot, head);
  ck_assert_ptr_nonnull(p);
  return strndup(p, (size_t)(strstr(p, "\n  }\n") - p));
}

/* Graphviz, when installed, must accept the DOT. */
static void check_dot_parses(const char *dot) {
  if (access("/usr/bin/dot", X_OK) != 0) return;
  char path[] = "/tmp/kiln_dump_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  fputs(dot, f);
  fclose(f);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "/usr/bin/dot -Tsvg %s -o /dev/null", path);
  int rc = system(cmd);
  unlink(path);
  ck_assert_msg(rc == 0, "dot rejected:\n%s", dot);
}

/* The text form names each kernel, in launch order, by the name DOT gives. */
static void check_text_names_kernels(kiln_tensor *t, const char *dot, int nkernels) {
  char *text = dump(t, KILN_FMT_TEXT);
  ck_assert_int_eq(count(text, "\nkernel "), nkernels);
  for (int k = 0; k < nkernels; k++) {
    char *c = cluster_text(dot, k);
    char title[64];
    ck_assert_int_eq(sscanf(strstr(c, "label=\"") + 7, "%63[^\"]", title), 1);
    ck_assert_msg(strstr(text, title), "text lacks \"%s\":\n%s", title, text);
    free(c);
  }
  free(text);
}

static const float av[6] = {1, -2, 3, -4, 5, -6}, bv[6] = {0.5f, 0.5f, 0.5f, 2, 2, 2}, cv[3] = {0.5f, -1, 2};

START_TEST(w1_is_one_cluster_of_five) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *b = kiln_from_data(bv, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *c = kiln_from_data(cv, KILN_F32, KILN_SHAPE(3));
  int line = __LINE__ + 1;
  kiln_tensor *y = kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(a));
  kiln_stats_t before = kiln_stats();
  char *dot = dump(y, KILN_FMT_DOT);
  ck_assert_uint_eq(kiln_stats().kernels_launched, before.kernels_launched);  /* nothing ran */
  int nodes[4];
  ck_assert_int_eq(clusters(dot, nodes, 4), 1);
  ck_assert_int_eq(nodes[0], 5);   /* mul add relu sigmoid mul; a, b and c's broadcast outside */
  char *c0 = cluster_text(dot, 0);
  char where[64];
  snprintf(where, sizeof where, "test_dump.c:%d", line);
  ck_assert_int_eq(count(c0, where), 5);
  ck_assert(strstr(c0, "relu f32(2,3)") && strstr(c0, "sigmoid f32(2,3)"));
  ck_assert_int_eq(count(dot, "buffer f32"), 3);
  ck_assert_int_eq(count(dot, " -> "), 8);   /* a feeds the product and the sigmoid */
  check_dot_parses(dot);
  check_text_names_kernels(y, dot, 1);
  /* planning left y pending and its value intact */
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_uint_eq(kiln_stats().kernels_launched, before.kernels_launched + 1);
  const float *out = kiln_data(y);
  for (int i = 0; i < 6; i++) {
    double z = av[i] * bv[i] + cv[i % 3];
    double want = (z > 0 ? z : 0) / (1 + exp(-av[i]));
    ck_assert_double_eq_tol(out[i], want, 1e-5);
  }
  free(c0);
  free(dot);
  kiln_scope_end();
}
END_TEST

START_TEST(softmax_is_one_cluster) {
  kiln_scope_begin();
  kiln_tensor *y = kiln_softmax(kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3)), -1);
  char *dot = dump(y, KILN_FMT_DOT);
  int nodes[4];
  ck_assert_int_eq(clusters(dot, nodes, 4), 1);
  check_dot_parses(dot);
  check_text_names_kernels(y, dot, 1);
  free(dot);
  kiln_scope_end();
}
END_TEST

START_TEST(matmul_then_reduction_is_two_clusters) {
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(8, 16), 1, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(16, 4), 2, TU_SMALL);
  kiln_tensor *y = kiln_sum_dims(kiln_relu(kiln_matmul(a, w)), KILN_DIMS(1), 0);
  char *dot = dump(y, KILN_FMT_DOT);
  int nodes[8];
  int n = clusters(dot, nodes, 8);
  ck_assert_int_ge(n, 2);
  char *first = cluster_text(dot, 0);
  ck_assert_msg(strstr(first, "matmul"), "the matmul runs first:\n%s", dot);
  free(first);
  check_dot_parses(dot);
  check_text_names_kernels(y, dot, n);
  free(dot);
  kiln_scope_end();
}
END_TEST

START_TEST(realized_tensor_is_one_buffer) {
  kiln_scope_begin();
  kiln_tensor *y = kiln_add(kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3)), kiln_ones(KILN_SHAPE(3), KILN_F32));
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  char *dot = dump(y, KILN_FMT_DOT), *text = dump(y, KILN_FMT_TEXT);
  int nodes[1];
  ck_assert_int_eq(clusters(dot, nodes, 1), 0);
  ck_assert_int_eq(count(dot, "[label="), 1);
  ck_assert_int_eq(count(dot, " -> "), 0);
  check_dot_parses(dot);
  ck_assert_int_eq(count(text, "\n"), 1);
  ck_assert_ptr_nonnull(strstr(text, "%0 = buffer  f32(2,3)"));
  free(dot);
  free(text);
  kiln_scope_end();
}
END_TEST

/* A transfer is a copy that realize runs without a kernel: it shows as one. */
START_TEST(transfers_are_copies) {
  if (!tu_have_gpu()) return;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *y = kiln_cpu(kiln_relu(kiln_to(x, ((kiln_device){KILN_CUDA, 0}))));
  char *dot = dump(y, KILN_FMT_DOT), *text = dump(y, KILN_FMT_TEXT);
  ck_assert_msg(strstr(dot, "copy 0 to cuda:0 (2,3)") && strstr(dot, "to cpu (2,3)"), "%s", dot);
  ck_assert_int_eq(count(text, "\ncopy "), 2);
  check_dot_parses(dot);
  free(dot);
  free(text);
  kiln_scope_end();
}
END_TEST

/* ---- error paths: rows of bad calls, the status and message expected ---- */
typedef enum { ARG_OK, ARG_NULL, ARG_ERROR_NODE } arg_kind;
typedef struct {
  arg_kind t;
  bool null_out;
  int fmt;
  kiln_status want;
  const char *msg;    /* after the caller's "file:line: " */
} bad_row;

static const bad_row bad_rows[] = {
  {ARG_NULL, false, KILN_FMT_DOT, KILN_ERR_ARG, "dump_graph: tensor is NULL"},
  {ARG_OK, true, KILN_FMT_TEXT, KILN_ERR_ARG, "dump_graph: output FILE is NULL"},
  {ARG_OK, false, 7, KILN_ERR_ARG, "dump_graph: unknown format 7 (KILN_FMT_TEXT or KILN_FMT_DOT)"},
  {ARG_OK, false, -1, KILN_ERR_ARG, "dump_graph: unknown format -1"},
  {ARG_ERROR_NODE, false, KILN_FMT_DOT, KILN_ERR_SHAPE, "dump_graph: the tensor is an error: "},
};

START_TEST(bad_calls) {
  const bad_row *r = &bad_rows[_i];
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *t = r->t == ARG_NULL ? NULL : r->t == ARG_OK ? kiln_neg(x) : kiln_add(x, kiln_ones(KILN_SHAPE(4), KILN_F32));
  int line = __LINE__ + 1;
  kiln_status st = kiln_dump_graph_at(__FILE__, line, t, r->null_out ? NULL : stdout, (kiln_graph_format)r->fmt);
  ck_assert_int_eq(st, r->want);
  char want[256];
  snprintf(want, sizeof want, "%s:%d: %s", __FILE__, line, r->msg);
  ck_assert_msg(strncmp(kiln_last_error(), want, strlen(want)) == 0, "got \"%s\", want \"%s...\"",
                kiln_last_error(), want);
  if (r->t == ARG_ERROR_NODE)   /* the error node's own message, with the line that built it */
    ck_assert_ptr_nonnull(strstr(kiln_last_error(), "add: "));
  kiln_scope_end();
}
END_TEST

static Suite *dump_suite(void) {
  Suite *s = suite_create("dump");
  tcase_add_test(tu_tcase(s, "w1"), w1_is_one_cluster_of_five);
  tcase_add_test(tu_tcase(s, "softmax"), softmax_is_one_cluster);
  tcase_add_test(tu_tcase(s, "matmul_reduce"), matmul_then_reduction_is_two_clusters);
  tcase_add_test(tu_tcase(s, "realized"), realized_tensor_is_one_buffer);
  tcase_add_test(tu_tcase(s, "transfers"), transfers_are_copies);
  tcase_add_loop_test(tu_tcase(s, "errors"), bad_calls, 0, (int)(sizeof bad_rows / sizeof *bad_rows));
  return s;
}

KILN_TEST_MAIN(dump_suite)
