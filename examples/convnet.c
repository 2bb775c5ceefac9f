/* convnet.c: a small CNN on a seeded random image batch (conv, batch norm,
 * relu, max pool, twice, then adaptive average pooling and a linear layer):
 * prints the class logits of the first image, the predicted classes, the
 * kernels one forward launches fused and eager, and the time of each. */
#include <stdio.h>
#include <time.h>

#include "models.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int forward(const convnet *m, kiln_tensor *images, const char *mode, int show) {
  kiln_scope_begin();
  kiln_reset_stats();
  double t0 = now_ms();
  kiln_tensor *logits = convnet_forward(m, images), *pred = kiln_argmax_dim(logits, 1, 0);
  kiln_tensor *both[] = {logits, pred};
  kiln_status st = kiln_realize_n(2, both);
  double ms = now_ms() - t0;
  if (st != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_last_error());
    kiln_scope_end();
    return 1;
  }
  if (show) {
    kiln_print(kiln_select(logits, 0, 0));
    kiln_print(pred);
  }
  printf("%-6s %3llu kernels  %8.2f ms (compiles included: %llu)\n", mode,
         (unsigned long long)kiln_stats().kernels_launched, ms, (unsigned long long)kiln_stats().compiles);
  kiln_scope_end();
  return 0;
}

int main(void) {
  convnet m = {.in_channels = 3, .c1 = 16, .c2 = 32, .classes = 10};
  convnet_init(&m, 7);
  kiln_manual_seed(8);
  kiln_tensor *images = kiln_randn(KILN_SHAPE(4, 3, 32, 32), KILN_F32);
  kiln_realize(images);
  printf("convnet: 4 images 3x32x32 -> conv 16 -> pool -> conv 32 -> pool -> avg -> 10 classes\n");
  int bad = forward(&m, images, "fused", 1) || forward(&m, images, "fused", 0);
  kiln_set_eager(1);
  bad = bad || forward(&m, images, "eager", 0);
  kiln_set_eager(0);
  kiln_release(images);
  convnet_free(&m);
  kiln_shutdown();
  return bad;
}
