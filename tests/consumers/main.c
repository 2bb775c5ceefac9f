/* main.c: the program every consumer route of tests/consumers/run.sh builds
 * (pkg-config, find_package, add_subdirectory): the README's tour, realized
 * and printed. It fails when kiln.h and the linked library disagree. */
#include <kiln.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  if (strcmp(kiln_version(), KILN_VERSION_STRING) != 0) {
    fprintf(stderr, "kiln.h is %s, the library %s\n", KILN_VERSION_STRING, kiln_version());
    return 1;
  }
  kiln_scope_begin();
  float av[6] = {1, -2, 3, -4, 5, -6}, cv[3] = {0.5f, -1, 2};
  kiln_tensor *a = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *b = kiln_muls(kiln_ones(KILN_SHAPE(2, 3), KILN_F32), 0.5);
  kiln_tensor *c = kiln_from_data(cv, KILN_F32, KILN_SHAPE(3));
  kiln_tensor *y = kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(a));
  if (kiln_realize(y) != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_last_error());
    return 1;
  }
  kiln_print(y);
  kiln_stats_t s = kiln_stats();
  printf("%llu kernel(s), %llu compile(s)\n", (unsigned long long)s.kernels_launched,
         (unsigned long long)s.compiles);
  kiln_scope_end();
  kiln_shutdown();
  return 0;
}
