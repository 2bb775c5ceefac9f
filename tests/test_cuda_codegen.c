/* test_cuda_codegen.c: the CUDA back end without a GPU. Every graph of
 * tests/cuda_emu/cases.c is lowered to kernel IR (rt_plan: nothing runs),
 * emitted as CUDA C and compiled by NVRTC for sm_80 and sm_90 as CUBIN (so
 * ptxas checks it) and as PTX; a failure prints NVRTC's log and the source
 * around the error. Then the disk cache: hit, corrupt and truncated entries
 * recompiled, an unusable directory only warns; the cases the emitter
 * refuses (KS_GEMM: a product is cuBLASLt's call, and only the rest of its
 * epilogue is emitted); how reductions map to blocks and threads, and which
 * elementwise kernels take the 128-bit vector path, with the grids asked for. */
#include "check_main.h"
#include "codegen_cuda/cuda.h"
#include "cuda_emu/cases.h"
#include "runtime/device.h"
#include "runtime/inspect.h"
#include "util/hostplan.h"
#include "util/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Emits the kernels of every case into one translation unit (one NVRTC run
 * instead of hundreds); equal kernels (equal names) appear once, and must
 * come out as the same CUDA C (the runtime keeps one module per key: a
 * shape-generic kernel serves every shape of its structure). */
static int emit_all(ir_str *src) {
  ir_str_printf(src, "%s", cuda_prelude());
  int nk = 0, ncases = 0;
  ir_str seen = {0};
  for (int i = 0; i < cuda_case_count(); i++) {
    cuda_case c;
    if (!cuda_case_build(i, &c)) continue;
    ncases++;
    rt_planned *plan;
    int n = cuda_case_plan(&c, &plan);
    ck_assert_msg(n >= 0, "%s: rt_plan: %s", c.name, kiln_last_error());  /* 0: a no-op */
    for (int j = 0; j < n; j++) {
      ir_str key = {0}, text = {0};
      kernel *k = plan[j].k;
      k_key(k, &key);  /* names the kernel */
      ir_str_free(&key);
      cuda_launch l;
      char *err = NULL;
      cuda_gemm g = {0};
      if (tu_has_gemm(k)) {   /* cuBLASLt's call, and the rest of its epilogue as CUDA C */
        ck_assert_msg(cuda_gemm_split(k, &g, &err), "%s: %s: %s", c.name, k->name, err);
        if (!g.rest) {
          cuda_gemm_free(&g);
          continue;
        }
        k = g.rest;
        k_key(k, &key);
        ir_str_free(&key);
      }
      ck_assert_msg(cuda_emit(k, &text, &l, &err), "%s: %s", c.name, err);
      ck_assert_int_ge(l.range, 1);
      bool again = seen.s && strstr(seen.s, k->name);
      ck_assert_msg(!again || strstr(src->s, text.s), "%s: kernel %s was emitted before as other CUDA C", c.name,
                    k->name);
      if (!again) {
        ir_str_append(src, text.s, text.len);
        ir_str_printf(&seen, "%s ", k->name);
        nk++;
      }
      ir_str_free(&text);
      cuda_gemm_free(&g);
    }
    rt_plan_free(plan, n);
    kiln_release(c.t);
  }
  ir_str_free(&seen);
  ck_assert_int_ge(ncases, 300);
  return nk;
}

/* The source lines before NVRTC's first "kiln.cu(N)". */
static void print_context(const char *src, const char *log) {
  const char *p = strstr(log, "kiln.cu(");
  int line = p ? atoi(p + 8) : 0, at = 1;
  for (const char *s = src; *s && line; at++) {
    const char *e = strchr(s, '\n');
    int len = e ? (int)(e - s) : (int)strlen(s);
    if (at > line - 40 && at <= line + 3) fprintf(stderr, "%6d  %.*s\n", at, len, s);
    s = e ? e + 1 : s + len;
  }
}

static void compile_or_fail(const char *src, const char *arch) {
  ir_str bin = {0};
  char *err = NULL, *log = NULL;
  bool ok = cuda_compile(src, arch, &bin, &log, &err);
  if (!ok) {
    print_context(src, log);
    fprintf(stderr, "%s\n", err);
  }
  ck_assert_msg(ok, "NVRTC failed for %s (source and log above)", arch);
  ck_assert_uint_gt(bin.len, 100);
  free(log);
  ir_str_free(&bin);
}

static const char *const archs[] = {"sm_80", "sm_90", "compute_80", "compute_90"};

START_TEST(test_compile_all_cases) {
  ir_str src = {0};
  int nk = emit_all(&src);
  ck_assert_int_ge(nk, 300);
  compile_or_fail(src.s, archs[_i]);
  ir_str_free(&src);
}
END_TEST

/* ---- small kernels for the cache and the refusals ------------------------ */
/* exp(full((n,), 0.5)): a kernel per n (values are launch arguments). */
static void one_kernel_source(ir_str *src, int64_t n) {
  kiln_tensor *a = kiln_full(KILN_SHAPE(n), 0.5, KILN_F32);
  kiln_tensor *y = kiln_exp(a);
  rt_planned *plan;
  ck_assert_int_eq(rt_plan_for(KILN_CUDA, 1, &y, &plan), 1);
  cuda_launch l;
  ir_str_printf(src, "%s", cuda_prelude());
  ck_assert(cuda_emit(plan[0].k, src, &l, NULL));
  rt_plan_free(plan, 1);
  kiln_release(y);
  kiln_release(a);
}

static char cache_dir[64];

static void cache_setup(void) {
  snprintf(cache_dir, sizeof cache_dir, "/tmp/kiln-cuda-cache-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(cache_dir));
  setenv("KILN_CACHE_DIR", cache_dir, 1);
  setenv("KILN_CACHE", "1", 1);  /* ctest turns the disk cache off for the other suites */
}

static void cache_teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
  ck_assert_int_eq(system(cmd), 0);
}

static rt_disk_info cached(const char *src, ir_str *bin) {
  rt_disk_info info;
  char *err = NULL;
  bin->len = 0;
  ck_assert_msg(rt_cuda_compile_cached(src, "sm_90", bin, &info, NULL, &err), "%s", err);
  ck_assert_uint_gt(bin->len, 100);
  return info;
}

/* The one entry file in the cache directory. */
static void entry_path(char *path, size_t n) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "ls '%s'/cuda-*.bin", cache_dir);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(fgets(path, (int)n, p));
  path[strcspn(path, "\n")] = '\0';
  pclose(p);
}

START_TEST(test_cache_hit) {
  ir_str src = {0}, a = {0}, b = {0};
  one_kernel_source(&src, 5);
  rt_disk_info i1 = cached(src.s, &a), i2 = cached(src.s, &b);
  ck_assert(!i1.hit && i1.warnings == 0);
  ck_assert(i2.hit && !i2.dropped);
  ck_assert(a.len == b.len && !memcmp(a.s, b.s, a.len));
  ir_str src2 = {0};
  one_kernel_source(&src2, 4);  /* another shape: another kernel, another entry */
  ck_assert(!cached(src2.s, &b).hit);
  ir_str_free(&src);
  ir_str_free(&src2);
  ir_str_free(&a);
  ir_str_free(&b);
}
END_TEST

/* _i = 0: a flipped byte in the payload; 1: the file cut short; 2: empty. */
START_TEST(test_cache_damaged_entry) {
  ir_str src = {0}, a = {0}, b = {0};
  one_kernel_source(&src, 3);
  cached(src.s, &a);
  char path[512];
  entry_path(path, sizeof path);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  if (_i == 0) {
    FILE *f = fopen(path, "r+b");
    fseek(f, st.st_size / 2, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, st.st_size / 2, SEEK_SET);
    fputc(ch ^ 0x5a, f);
    fclose(f);
  } else {
    ck_assert_int_eq(truncate(path, _i == 1 ? st.st_size - 7 : 0), 0);
  }
  rt_disk_info i = cached(src.s, &b);
  ck_assert(!i.hit && i.dropped && i.warnings == 1);
  ck_assert(a.len == b.len && !memcmp(a.s, b.s, a.len));
  ck_assert(cached(src.s, &b).hit);  /* rewritten whole */
  ir_str_free(&src);
  ir_str_free(&a);
  ir_str_free(&b);
}
END_TEST

START_TEST(test_cache_unusable_dir) {
  ir_str src = {0}, a = {0};
  one_kernel_source(&src, 4);
  setenv("KILN_CACHE_DIR", "/proc/kiln-no-such-dir/cache", 1);
  rt_disk_info i = cached(src.s, &a);
  ck_assert(!i.hit && i.warnings == 1);
  ir_str_free(&src);
  ir_str_free(&a);
}
END_TEST

START_TEST(test_cache_dir_default) {
  char buf[4000];
  unsetenv("KILN_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/x/y", 1);
  rt_disk_dir(buf, sizeof buf);
  ck_assert_str_eq(buf, "/x/y/kiln");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/h", 1);
  rt_disk_dir(buf, sizeof buf);
  ck_assert_str_eq(buf, "/h/.cache/kiln");
}
END_TEST

START_TEST(test_arch_choice) {
  char buf[32];
  unsetenv("KILN_CUDA_ARCH");
  ck_assert_str_eq(cuda_arch(0, buf), "sm_90");
  ck_assert_str_eq(cuda_arch(86, buf), "sm_86");
  setenv("KILN_CUDA_ARCH", "sm_80", 1);
  ck_assert_str_eq(cuda_arch(90, buf), "sm_80");
  unsetenv("KILN_CUDA_ARCH");
}
END_TEST

/* A failed compile carries NVRTC's log in its error, also through the disk
 * cache (the runtime's path, whose message adds the kernel's name). */
START_TEST(test_compile_error_has_log) {
  ir_str bin = {0};
  char *err = NULL, *log = NULL;
  const char *bad = "extern \"C\" __global__ void f() { undeclared_thing(); }";
  ck_assert(!cuda_compile(bad, "sm_90", &bin, NULL, &err));
  ck_assert_ptr_nonnull(strstr(err, "undeclared_thing"));
  free(err);
  rt_disk_info info;
  ck_assert(!rt_cuda_compile_cached(bad, "sm_90", &bin, &info, &log, &err));
  ck_assert_ptr_nonnull(strstr(err, "undeclared_thing"));
  ck_assert_ptr_nonnull(strstr(log, "undeclared_thing"));
  free(err);
  free(log);
}
END_TEST

/* NVRTC is dlopened: without it a compile says so and names the library
 * (KILN_NVRTC stands in for a machine without the toolkit); a library that
 * is not NVRTC names the first function it lacks. kiln_shutdown forgets the
 * loaded NVRTC, so each setting is read anew. */
static void compile_with_nvrtc(const char *lib, const char *expected) {
  ir_str bin = {0};
  char *err = NULL, why[256];
  setenv("KILN_NVRTC", lib, 1);
  kiln_shutdown();
  ck_assert(!cuda_nvrtc_load(why, sizeof why));
  ck_assert(!cuda_compile("extern \"C\" __global__ void f() {}", "sm_90", &bin, NULL, &err));
  ck_assert_str_eq(err, expected);
  ck_assert_int_eq(bin.len, 0);
  free(err);
  unsetenv("KILN_NVRTC");
  kiln_shutdown();
}

START_TEST(test_nvrtc_missing_or_wrong) {
  compile_with_nvrtc("libnvrtc.so.99", "CUDA not available: libnvrtc.so.99 not found");
  compile_with_nvrtc("libm.so.6", "CUDA not available: libm.so.6 lacks nvrtcVersion");
  char why[256];
  ck_assert_msg(cuda_nvrtc_load(why, sizeof why), "%s", why);   /* the default loads again */
  ck_assert_str_ne(cuda_nvrtc_version(), "none");
}
END_TEST

/* NVRTC gets the toolkit's headers from the directory kiln was built with
 * or, where that has none (a GPU bundle on a machine whose toolkit lives
 * elsewhere), from the include directory beside the NVRTC library the loader
 * found; with neither, the build's, which NVRTC's error then names. Here
 * NVRTC is pretended to sit in the build's include directory, whose
 * ../include is that directory again. */
START_TEST(test_nvrtc_include_dir) {
  const char *built = cuda_include_dir();
  char lib[4200], got[4200], want[4300];
  size_t n = strlen(built);
  ck_assert_msg(n > 8 && !strcmp(built + n - 8, "/include"), "%s", built);
  snprintf(lib, sizeof lib, "%s/libnvrtc.so.13", built);
  cuda_include_dir_for(built, lib, got, sizeof got);
  ck_assert_str_eq(got, built);
  cuda_include_dir_for("/nonexistent/include", lib, got, sizeof got);
  snprintf(want, sizeof want, "%s/../include", built);
  ck_assert_str_eq(got, want);
  cuda_include_dir_for("/nonexistent/include", "/nonexistent/lib64/libnvrtc.so.13", got, sizeof got);
  ck_assert_str_eq(got, "/nonexistent/include");
  cuda_include_dir_for("/nonexistent/include", NULL, got, sizeof got);
  ck_assert_str_eq(got, "/nonexistent/include");
}
END_TEST

START_TEST(test_gemm_refused) {
  kernel *k = k_new();
  int o = k_param(k, KILN_F32, true, 4);
  int a = k_param(k, KILN_F32, false, 4), b = k_param(k, KILN_F32, false, 4);
  int acc = k_acc(k);
  kstmt *g = ks_gemm(k, acc, KILN_F32, 2, 2, 2);
  g->gemm.a_buf = a;
  g->gemm.b_buf = b;
  g->gemm.a_off = g->gemm.b_off = kx_int(k, KILN_I64, 0);
  g->gemm.a_si = 2, g->gemm.a_sk = 1, g->gemm.b_sk = 2, g->gemm.b_sn = 1;
  kexpr *idx = kx_iadd(k, kx_imul(k, kx_var(k, g->var), kx_int(k, KILN_I64, 2)), kx_var(k, g->gemm.var_j));
  g->body = ks_store(k, o, idx, kx_acc(k, acc, KILN_F32));
  k->body = g;
  ir_str src = {0};
  cuda_launch l;
  char *err = NULL;
  ck_assert(!cuda_emit(k, &src, &l, &err));
  ck_assert_ptr_nonnull(strstr(err, "cuBLAS"));
  free(err);
  ir_str_free(&src);
  k_free(k);
}
END_TEST

/* The mapping of reductions to threads (emit.c): a row of a softmax is one
 * block with block-wide folds and a split store loop; a long whole-tensor
 * sum runs on the whole grid (grid-wide reduction with scratch), a short
 * one, or one with a second reduction after the first, on one block. */
static void emit_one(kiln_tensor *y, ir_str *src, cuda_launch *l) {
  rt_planned *plan;
  ck_assert_int_eq(rt_plan_for(KILN_CUDA, 1, &y, &plan), 1);
  ck_assert(cuda_emit(plan[0].k, src, l, NULL));
  rt_plan_free(plan, 1);
  kiln_release(y);
}

START_TEST(test_reduction_mapping) {
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(64, 1000), 1, TU_SMALL);
  ir_str src = {0};
  cuda_launch l;
  emit_one(kiln_softmax(x, -1), &src, &l);
  ck_assert_int_eq(l.range, 64);
  ck_assert_int_eq(l.block, 256);
  ck_assert_ptr_nonnull(strstr(src.s, "v0 += (long long)gridDim.x)"));  /* rows by block */
  ck_assert_ptr_nonnull(strstr(src.s, "kiln_block_fold"));
  ck_assert_ptr_nonnull(strstr(src.s, "< 1000LL; v1 += (long long)blockDim.x"));  /* the store loop split */
  ck_assert_int_eq(l.grid, 64);
  ck_assert_int_eq(l.scratch, 0);
  src.len = 0;
  emit_one(kiln_sum(x), &src, &l);
  ck_assert_int_eq(l.range, 1);
  ck_assert_int_eq(l.block, 256);
  ck_assert_int_eq(l.grid, 16);  /* 64000 elements, 16 a thread */
  ck_assert_int_eq(l.scratch, 16 + 8 * CUDA_MAX_GRID);
  ck_assert_ptr_nonnull(strstr(src.s, "< 64000LL; f0 += (long long)gridDim.x * blockDim.x"));  /* one split loop */
  ck_assert_ptr_nonnull(strstr(src.s, "kiln_grid_last(scratch)"));
  src.len = 0;
  emit_one(kiln_argmax(x), &src, &l);  /* value and index: two slots */
  ck_assert_int_eq(l.scratch, 16 + 16 * CUDA_MAX_GRID);
  ck_assert_ptr_nonnull(strstr(src.s, "kiln_argmerge"));
  src.len = 0;
  emit_one(kiln_var(x, 1), &src, &l);  /* mean, then the squares: one block */
  ck_assert_int_eq(l.grid, 1);
  ck_assert_int_eq(l.block, 1024);
  ck_assert_int_eq(l.scratch, 0);
  src.len = 0;
  kiln_tensor *x1 = tu_data(KILN_F32, KILN_SHAPE(1000), 3, TU_SMALL);
  emit_one(kiln_sum(x1), &src, &l);  /* too short for a second block */
  ck_assert_int_eq(l.grid, 1);
  ck_assert_int_eq(l.block, 1024);
  ck_assert_int_eq(l.scratch, 0);
  kiln_release(x1);
  src.len = 0;
  kiln_tensor *xs = tu_data(KILN_F32, KILN_SHAPE(64, 20), 2, TU_SMALL);
  emit_one(kiln_argmax_dim(xs, -1, 0), &src, &l);
  ck_assert_int_eq(l.block, 32);  /* a warp for a short row */
  ck_assert_int_eq(l.grid, 64);
  ck_assert_ptr_nonnull(strstr(src.s, "kiln_block_argfold"));
  kiln_release(xs);
  kiln_release(x);
  ir_str_free(&src);
}
END_TEST

/* Which elementwise kernels get the 128-bit vector path (emit.c), and the
 * grid they ask for: ceil(range / (block * lanes)), at most CUDA_MAX_GRID. */
static bool vectorized(kiln_tensor *y, cuda_launch *l) {
  ir_str src = {0};
  emit_one(y, &src, l);
  bool v = strstr(src.s, "kiln_aligned16") != NULL;
  ir_str_free(&src);
  return v;
}

START_TEST(test_vector_path) {
  cuda_launch l;
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(64, 1000), 1, TU_SMALL);
  kiln_tensor *b = tu_data(KILN_F32, KILN_SHAPE(64, 1000), 2, TU_SMALL);
  kiln_tensor *h = tu_data(KILN_F16, KILN_SHAPE(1 << 24), 3, TU_SMALL);
  kiln_tensor *row = tu_data(KILN_F32, KILN_SHAPE(1000), 4, TU_SMALL);
  kiln_tensor *two = kiln_scalar(2, KILN_F32);
  ck_assert(vectorized(kiln_add(a, b), &l));
  ck_assert_int_eq(l.grid, 63);  /* 64000 / (256 * 4) */
  ck_assert(vectorized(kiln_mul(a, two), &l));  /* a broadcast scalar stays scalar */
  kiln_scope_begin();
  kiln_tensor *tail = kiln_keep(kiln_neg(kiln_slice(row, 0, 3, 1000, 1)));
  kiln_scope_end();
  ck_assert(vectorized(tail, &l));  /* an offset view: the kernel checks alignment */
  ck_assert(vectorized(kiln_neg(h), &l));  /* 2-byte elements: 8 lanes */
  ck_assert_int_eq(l.grid, CUDA_MAX_GRID);
  ck_assert(vectorized(kiln_rand(KILN_SHAPE(4096), KILN_F32), &l));  /* args are no loads */
  ck_assert(!vectorized(kiln_add(a, row), &l));  /* a broadcast row moves with the iteration */
  ck_assert_int_eq(l.grid, 250);  /* one element a thread */
  kiln_scope_begin();
  kiln_tensor *t = kiln_keep(kiln_neg(kiln_transpose(a, 0, 1)));
  kiln_scope_end();
  ck_assert(!vectorized(t, &l));
  ck_assert(!vectorized(kiln_gt(a, b), &l));  /* 4-byte loads, 1-byte stores */
  ck_assert(!vectorized(kiln_cast(a, KILN_F64), &l));
  kiln_release(a);
  kiln_release(b);
  kiln_release(h);
  kiln_release(row);
  kiln_release(two);
}
END_TEST

/* The fused attention (KS_ATTN, codegen_cuda/attention.cuh): a block per
 * block of 64 query rows of one (batch, head), a thread per row, no
 * scratch; the head dims, sizes, strides, scale and causal flag are
 * constants of the call; GQA reads key/value head h / 2 for query head h. A
 * short sequence gets a warp. The plan run on the host (the CPU back end
 * runs the same kernel IR) agrees with the reference evaluator. */
static kiln_tensor *gqa_causal(void) {
  kiln_tensor *q = tu_data(KILN_F32, KILN_SHAPE(2, 4, 100, 16), 1, TU_SMALL);
  kiln_tensor *k = tu_data(KILN_F32, KILN_SHAPE(2, 2, 30, 16), 2, TU_SMALL);
  kiln_tensor *v = tu_data(KILN_F32, KILN_SHAPE(2, 2, 30, 8), 3, TU_SMALL);
  return kiln_scaled_dot_product_attention(q, k, v, NULL, true, 0, true);
}

START_TEST(test_attention_mapping) {
  kiln_scope_begin();
  ir_str src = {0};
  cuda_launch l;
  emit_one(kiln_retain(gqa_causal()), &src, &l);
  ck_assert_int_eq(l.range, 2 * 4 * 2);   /* (batch, head, 2 blocks of 64 of the 100 rows) */
  ck_assert_int_eq(l.grid, 16);
  ck_assert_int_eq(l.block, 64);
  ck_assert_int_eq(l.scratch, 0);
  ck_assert_ptr_nonnull(strstr(src.s, "v0 += (long long)gridDim.x)"));   /* blocks stride over them */
  ck_assert_ptr_nonnull(strstr(src.s, "const long long kst[10] = {16LL, 1LL, 16LL, 1LL, 8LL, 1LL, 0LL, 0LL, 8LL, 1LL};"));
  ck_assert_ptr_nonnull(strstr(src.s, "kiln_attention<float, float, 0, 16, 8>("));
  ck_assert_ptr_nonnull(strstr(src.s, "(const float *)0"));   /* no mask */
  ck_assert_ptr_nonnull(strstr(src.s, ", 64LL, 100LL, 30LL, kst, ((float)0x1p-2), true);"));
  src.len = 0;
  kiln_tensor *q = tu_data(KILN_F64, KILN_SHAPE(3, 5, 4), 4, TU_SMALL), *k = tu_data(KILN_F64, KILN_SHAPE(3, 7, 4), 5, TU_SMALL);
  kiln_tensor *m = kiln_gts(tu_data(KILN_F64, KILN_SHAPE(5, 7), 6, TU_SMALL), 0);
  ck_assert_int_eq(kiln_realize(m), KILN_OK);
  emit_one(kiln_retain(kiln_scaled_dot_product_attention(q, k, k, m, false, 0.5, false)), &src, &l);
  ck_assert_int_eq(l.range, 3);
  ck_assert_int_eq(l.block, 32);   /* 5 rows: a warp */
  ck_assert_ptr_nonnull(strstr(src.s, "kiln_attention<double, unsigned char, 1, 4, 4>("));
  ck_assert_ptr_nonnull(strstr(src.s, "((double)0x1p-1), false);"));
  ir_str_free(&src);
  kiln_tensor *y = gqa_causal();
  ref_tensor *want = ref_eval(y);
  rt_graph_plan plan;
  ck_assert_int_eq(rt_plan_graph(KILN_CUDA, 1, &y, &plan), KILN_OK);
  ck_assert_int_eq(plan.g.ngroups, 1);
  tu_stored st = {0};
  tu_run_plan(&plan, &st, NULL, NULL);
  char why[256];
  ck_assert_msg(ref_check_data(want, tu_stored_data(&st, y), 2e-5, 2e-5, why, sizeof why), "%s", why);
  tu_stored_free(&st);
  rt_graph_plan_free(&plan);
  ref_free(want);
  kiln_scope_end();
}
END_TEST

/* Shape-generic kernels (KILN_DYNAMIC=1): a structure at two shapes is one
 * kernel (one name) with one CUDA C, whose sizes are launch arguments; the
 * mapping follows the structure (rows on the widest block, the grid-wide
 * reduction's code even where one block does), the range and grid the shape. */
static void emit_generic(kiln_tensor *y, ir_str *src, cuda_launch *l, char *name) {
  rt_planned *plan;
  kiln_set_dynamic(KILN_DYNAMIC_ON);
  ck_assert_int_eq(rt_plan_for(KILN_CUDA, 1, &y, &plan), 1);
  kiln_set_dynamic(KILN_DYNAMIC_AUTO);
  ck_assert(plan[0].k->generic);
  src->len = 0;
  ck_assert(cuda_emit(plan[0].k, src, l, NULL));
  snprintf(name, 32, "%s", plan[0].k->name);
  rt_plan_free(plan, 1);
  kiln_release(y);
}

/* y0 and y1, one structure at two shapes: one kernel, one source; the launches in l[2]. */
static void same_kernel(kiln_tensor *y0, kiln_tensor *y1, cuda_launch *l, const char *must_have) {
  ir_str src[2] = {{0}, {0}};
  char name[2][32];
  emit_generic(y0, &src[0], &l[0], name[0]);
  emit_generic(y1, &src[1], &l[1], name[1]);
  ck_assert_str_eq(name[0], name[1]);
  ck_assert_str_eq(src[0].s, src[1].s);
  ck_assert_msg(strstr(src[0].s, must_have), "no \"%s\" in\n%s", must_have, src[0].s);
  ck_assert_int_eq(l[0].block, l[1].block);
  ck_assert_int_eq(l[0].scratch, l[1].scratch);
  ir_str_free(&src[0]);
  ir_str_free(&src[1]);
}

/* t, kept past the scope it was built in (its inputs go with the scope). */
static kiln_tensor *kept(kiln_tensor *t) {
  kiln_keep(t);
  kiln_scope_end();
  return t;
}

static kiln_tensor *ew(int64_t r, int64_t n) {
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(r, n), 1, TU_SMALL), *c = tu_data(KILN_F32, KILN_SHAPE(n), 2, TU_SMALL);
  return kept(kiln_relu(kiln_add(kiln_muls(a, 3), c)));
}

static kiln_tensor *rows(int64_t r, int64_t n, int which) {
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(r, n), 3, TU_SMALL);
  return kept(which ? kiln_sum(a) : kiln_softmax(a, -1));
}

START_TEST(test_generic_mapping) {
  cuda_launch l[2];
  same_kernel(ew(37, 41), ew(50, 29), l, " % p1.v[");   /* the column from the flat index, by an argument */
  ck_assert_int_eq(l[0].range, 37 * 41);
  ck_assert_int_eq(l[1].range, 50 * 29);
  ck_assert_int_eq(l[0].grid, 6);   /* ceil(range / 256): a broadcast row, no vectors */
  ck_assert_int_eq(l[1].grid, 6);
  same_kernel(rows(64, 1000, 0), rows(12, 20, 0), l, "kiln_block_fold");
  ck_assert_int_eq(l[0].block, 256);   /* the widest: the row's length is an argument */
  ck_assert_int_eq(l[0].grid, 64);
  ck_assert_int_eq(l[1].grid, 12);
  same_kernel(rows(64, 1000, 1), rows(10, 100, 1), l, "kiln_grid_last(scratch)");
  ck_assert_int_eq(l[0].grid, 16);   /* 64000 elements, 16 a thread */
  ck_assert_int_eq(l[1].grid, 1);    /* 1000: one block runs the grid's code */
  ck_assert_int_eq(l[0].scratch, 16 + 8 * CUDA_MAX_GRID);
  kiln_tensor *v[2];
  for (int i = 0; i < 2; i++) {
    kiln_scope_begin();
    v[i] = kept(kiln_neg(tu_data(KILN_F32, KILN_SHAPE(i ? 1000 : 4099), 4, TU_SMALL)));
  }
  same_kernel(v[0], v[1], l, "kiln_aligned16");   /* one dim at the flat index: vectors */
  ck_assert_int_eq(l[0].grid, 5);   /* ceil(4099 / (256 * 4)) */
  ck_assert_int_eq(l[1].grid, 1);
}
END_TEST

static Suite *cuda_codegen_suite(void) {
  Suite *s = suite_create("cuda_codegen");
  TCase *tc = tu_tcase(s, "nvrtc");
  tcase_set_timeout(tc, 1200);  /* hundreds of NVRTC compiles; slow under sanitizers and load */
  tcase_add_loop_test(tc, test_compile_all_cases, 0, (int)(sizeof archs / sizeof *archs));
  tcase_add_test(tc, test_arch_choice);
  tcase_add_test(tc, test_compile_error_has_log);
  tcase_add_test(tc, test_nvrtc_missing_or_wrong);
  tcase_add_test(tc, test_nvrtc_include_dir);
  tcase_add_test(tc, test_gemm_refused);
  tcase_add_test(tc, test_reduction_mapping);
  tcase_add_test(tc, test_vector_path);
  tcase_add_test(tc, test_attention_mapping);
  tcase_add_test(tc, test_generic_mapping);
  tc = tu_tcase(s, "cache");
  tcase_add_checked_fixture(tc, cache_setup, cache_teardown);
  tcase_add_test(tc, test_cache_hit);
  tcase_add_loop_test(tc, test_cache_damaged_entry, 0, 3);
  tcase_add_test(tc, test_cache_unusable_dir);
  tcase_add_test(tc, test_cache_dir_default);
  return s;
}

KILN_TEST_MAIN(cuda_codegen_suite)
