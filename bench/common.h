/* common.h: what kiln_bench.c and its CUDA side (gpu.c) share: the clock,
 * medians, and the JSON they write together. */
#ifndef KILN_BENCH_COMMON_H
#define KILN_BENCH_COMMON_H

#include <stddef.h>
#include <stdio.h>

double bench_now_ms(void);   /* CLOCK_MONOTONIC in ms */
/* Sorts ms[0..n) in place and returns its median. */
double bench_median(double *ms, int n);
/* A JSON string; only outside text (a CPU or GPU name, an error) is
 * written this way: what would need escaping is dropped, not escaped. */
void bench_json_string(FILE *f, const char *s);
void bench_json_number(FILE *f, double v);   /* null for NaN and infinities */
/* Host memory for every row's data, allocated as kiln allocates its own
 * buffers (64-byte aligned; huge pages from 2 MiB on), so kiln, the
 * hand-written C and the stream rows read the same kind of pages. */
void *bench_alloc(size_t bytes);

#endif
