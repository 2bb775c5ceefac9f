/* test_fundamentals.c: runs examples/fundamentals (the PyTorch fundamentals
 * tour) and compares what it prints with tests/fundamentals.golden, line by
 * line. Both paths come from tests/CMakeLists.txt, and from the environment
 * when KILN_TOUR_EXE and KILN_TOUR_GOLDEN are set there (ctest sets them, so
 * that scripts/gpu-bundle.sh can point a bundle at its copies). After a deliberate
 * change to the tour's output, regenerate the golden file from the build:
 *   ./build/examples/fundamentals > tests/fundamentals.golden
 * and read the diff before committing it. */
#include "check_main.h"
#include "util/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(KILN_TOUR_EXE) || !defined(KILN_TOUR_GOLDEN)
#error "tests/CMakeLists.txt defines KILN_TOUR_EXE and KILN_TOUR_GOLDEN for this test"
#endif

/* The environment's path for var when it gives one, else the build's. */
static const char *tour_path(const char *var, const char *built) {
  const char *s = getenv(var);
  return s && *s ? s : built;
}

/* Section 13 prints what this machine has: the golden file was made on one
 * without a GPU, so on one with a GPU the comparison stops before it. */
#define DEVICE_SECTION "\n== 13. devices =="

/* Reads all of f into a NUL-terminated string; NULL on failure. */
static char *slurp(FILE *f) {
  size_t cap = 1 << 16, len = 0, got;
  char *s = malloc(cap);
  while (s && (got = fread(s + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (cap - len > 1) continue;
    char *bigger = realloc(s, cap *= 2);
    if (!bigger) free(s);
    s = bigger;
  }
  if (s) s[len] = '\0';
  return s;
}

static char *run_tour(int *status) {
  char cmd[4096];
  const char *exe = tour_path("KILN_TOUR_EXE", KILN_TOUR_EXE);
  ck_assert_msg(!strchr(exe, '\'') && snprintf(cmd, sizeof cmd, "'%s'", exe) < (int)sizeof cmd,
                "cannot quote %s for the shell", exe);
  FILE *p = popen(cmd, "r");
  ck_assert_msg(p != NULL, "cannot run %s", exe);
  char *out = slurp(p);
  *status = pclose(p);
  return out;
}

static char *read_golden(void) {
  const char *path = tour_path("KILN_TOUR_GOLDEN", KILN_TOUR_GOLDEN);
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char *s = slurp(f);
  fclose(f);
  return s;
}

static void cut_device_section(char *s) {
  char *d = strstr(s, DEVICE_SECTION);
  if (d) *d = '\0';
}

/* Fails at the first line that differs, quoting both. */
static void assert_same_lines(const char *got, const char *want) {
  int line = 1;
  while (*got || *want) {
    size_t g = strcspn(got, "\n"), w = strcspn(want, "\n");
    ck_assert_msg(g == w && !memcmp(got, want, g), "line %d differs:\n  got:  %.*s\n  want: %.*s", line, (int)g,
                  got, (int)w, want);
    got += g + (got[g] == '\n');
    want += w + (want[w] == '\n');
    line++;
  }
}

/* The tour shows errors on purpose: each must be the error it shows, never
 * an op that unexpectedly worked or a print that failed. Then every line
 * must be the golden one. */
START_TEST(tour_matches_golden) {
  int status;
  char *got = run_tour(&status);
  char *want = read_golden();
  ck_assert_ptr_nonnull(got);
  ck_assert_ptr_nonnull(want);
  ck_assert_msg(status == 0, "%s exited with status %d", tour_path("KILN_TOUR_EXE", KILN_TOUR_EXE), status);
  ck_assert_ptr_null(strstr(got, "unexpectedly fine"));
  ck_assert_ptr_null(strstr(got, "\nerror: "));
  if (kiln_cuda_is_available()) {
    cut_device_section(got);
    cut_device_section(want);
  }
  assert_same_lines(got, want);
  free(got);
  free(want);
}
END_TEST

static Suite *fundamentals_suite(void) {
  Suite *s = suite_create("fundamentals");
  tcase_add_test(tu_tcase(s, "tour"), tour_matches_golden);
  return s;
}

KILN_TEST_MAIN(fundamentals_suite)
