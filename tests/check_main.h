/* check_main.h: every test program is one Check suite; KILN_TEST_MAIN(fn)
 * gives it a main that runs it with CK_ENV (CK_RUN_CASE, CK_VERBOSITY work)
 * and frees kiln's runtime at the end so LeakSanitizer sees a clean exit. */
#ifndef KILN_CHECK_MAIN_H
#define KILN_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>
#include "kiln.h"

#define KILN_TEST_MAIN(suite_fn)                          \
  int main(void) {                                        \
    SRunner *sr = srunner_create(suite_fn());             \
    srunner_run_all(sr, CK_ENV);                          \
    int failed = srunner_ntests_failed(sr);               \
    srunner_free(sr);                                     \
    kiln_shutdown();                                      \
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;          \
  }

#endif
