/* test_alloc_fail.c: allocation failure is a status (SQLite's faultsim). A
 * program runs with kiln's Nth allocation failing, for every N it makes,
 * then with every allocation from N on failing: each run ends with the right
 * values or KILN_ERR_MEMORY naming what failed, never another status or an
 * abort, and the same program then runs clean and right. The programs:
 * a realistic one (build, fuse, plan and lower anew, realize kernels of
 * every kind, print, a compiled function, a .npy round trip, and with the
 * CUDA back end its CUDA C, generated on the host); each of its kernels
 * compiled anew by the JIT (LLVM IR emission and the JIT's bookkeeping; a
 * run per kernel keeps the sweep at one compile per N); and one fresh
 * kernel's whole realize, whose every failure names the op the user called.
 * LeakSanitizer (the sanitizer build) checks that no failure leaks. */
#include "check_main.h"
#include "ir/alloc.h"
#include "runtime/inspect.h"
#include "runtime/rt.h"
#include "runtime/rt_internal.h"
#include "util/testutil.h"
#ifdef KILN_TEST_CUDA
#include "codegen_cuda/cuda.h"
#endif

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const float av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {0.5f, -1, 2, 1, 0.25f, -2}, biasv[2] = {1, 5};
static const int64_t iv[4] = {2, 0, 1, 1};
/* By hand: relu(a*b - 1) = [[0,0,5],[3,0.25,0]] and its row sums;
 * relu(a @ b^T + bias) = relu([[4.5,-4.5],[9,-6.75]] + [1,5]); cumsum(a, 1);
 * the top 2 of each row of b and where they are; a gathered at [[2,0],[1,1]]. */
static const float y_want[6] = {0, 0, 5, 3, 0.25f, 0}, s_want[2] = {5, 3.25f}, m_want[4] = {5.5f, 0.5f, 10, 0};
static const float c_want[6] = {1, 3, 6, 4, 9, 15}, top_want[4] = {2, 0.5f, 1, 0.25f}, g_want[4] = {3, 1, 5, 5};
static const int64_t at_want[4] = {2, 0, 0, 1};
static char npy_path[64];

/* What a run ended with, and where. */
typedef struct {
  kiln_status st;
  const char *step;
  char msg[512];
} outcome;

static bool failed(outcome *o, const char *step, kiln_status st) {
  if (st == KILN_OK) return false;
  o->st = st;
  o->step = step;
  snprintf(o->msg, sizeof o->msg, "%s", kiln_last_error());
  return true;
}

static void expect_values(kiln_tensor *t, const float *want, int n, const char *what) {
  const float *got = kiln_data(t);
  ck_assert_msg(got, "%s: %s", what, kiln_last_error());
  for (int i = 0; i < n; i++) ck_assert_msg(got[i] == want[i], "%s[%d] = %g, want %g", what, i, got[i], want[i]);
}

static void expect_i64(kiln_tensor *t, const int64_t *want, int n, const char *what) {
  const int64_t *got = kiln_data(t);
  ck_assert_msg(got, "%s: %s", what, kiln_last_error());
  for (int i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i], "%s[%d] = %lld, want %lld", what, i, (long long)got[i], (long long)want[i]);
}

/* relu(x*b - 1) and its row sums: the lazy graph and the compiled one. */
static kiln_tensor *fused(kiln_tensor *x, kiln_tensor *b) { return kiln_relu(kiln_subs(kiln_mul(x, b), 1)); }

/* a @ b^T + bias: a GEMM whose epilogue adds the bias. */
static kiln_tensor *affine(kiln_tensor *a, kiln_tensor *b, kiln_tensor *bias) {
  return kiln_add(kiln_matmul(a, kiln_transpose(b, 0, 1)), bias);
}

/* Kernels of each kind: elementwise, a row reduction, a GEMM with a bias
 * and relu epilogue, a scan, a top-k (a sort) and a gather (with its index
 * check). */
static bool lazy_part(outcome *o, kiln_tensor *a, kiln_tensor *b, kiln_tensor *bias, kiln_tensor *ix) {
  kiln_tensor *y = fused(a, b), *top, *at;
  kiln_topk(b, 2, 1, 1, 1, &top, &at);
  kiln_tensor *outs[] = {y, kiln_sum_dims(y, 1, (int64_t[]){1}, 0), kiln_relu(affine(a, b, bias)), kiln_cumsum(a, 1),
                         top, at, kiln_gather(a, 1, ix)};
  if (failed(o, "realize", kiln_realize_n(7, outs))) return false;
  expect_values(outs[0], y_want, 6, "relu");
  expect_values(outs[1], s_want, 2, "sum");
  expect_values(outs[2], m_want, 4, "matmul");
  expect_values(outs[3], c_want, 6, "cumsum");
  expect_values(outs[4], top_want, 4, "topk");
  expect_i64(outs[5], at_want, 4, "topk indices");
  expect_values(outs[6], g_want, 4, "gather");
  char *text = kiln_to_string(outs[1]);
  if (!text) return failed(o, "to_string", KILN_ERR_MEMORY);
  ck_assert_str_eq(text, "tensor([5.0000, 3.2500])");
  free(text);
  if (failed(o, "save_npy", kiln_save_npy(outs[1], npy_path))) return false;
  kiln_tensor *back = kiln_load_npy(npy_path);
  if (failed(o, "load_npy", kiln_status_of(back))) return false;
  expect_values(back, s_want, 2, "load_npy");
  return true;
}

static bool compiled_part(outcome *o, kiln_tensor *a, kiln_tensor *b) {
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *z = kiln_sum_dims(fused(x, b), 1, (int64_t[]){1}, 0);
  kiln_fn *fn = kiln_compile(1, &x, 1, &z);
  if (!fn) return !failed(o, "compile", KILN_ERR_MEMORY);
  kiln_tensor *out = NULL;
  kiln_status st = kiln_fn_run(fn, &a, &out);
  kiln_fn_free(fn);
  if (failed(o, "fn_run", st)) return false;
  expect_values(out, s_want, 2, "fn_run");
  kiln_release(out);
  return true;
}

#ifdef KILN_TEST_CUDA
/* ---- CUDA C, generated on the host (NVRTC's allocations are not kiln's) ---- */
static ir_str cuda_first;   /* what the first clean run generated: every clean run generates it again */

static bool oom_at(outcome *o, const char *step, const char *what) {
  o->st = KILN_ERR_MEMORY;
  o->step = step;
  snprintf(o->msg, sizeof o->msg, "%s: out of memory", what);
  return false;
}

static bool has_gemm(const kstmt *s) {
  for (; s; s = s->next)
    if (s->kind == KS_GEMM || (s->kind == KS_LOOP && has_gemm(s->body))) return true;
  return false;
}

/* A GEMM kernel as its cuBLASLt call (text) and the rest's CUDA C, another
 * kernel as its CUDA C. */
static bool cuda_kernel(outcome *o, kernel *k, ir_str *text) {
  cuda_launch l;
  char *err = NULL;
  cuda_gemm g = {0};
  bool gemm = has_gemm(k->body), ok = gemm ? cuda_gemm_split(k, &g, &err) : cuda_emit(k, text, &l, &err);
  ck_assert_msg(ok || (gemm && g.oom), "%s: %s", k->name, err ? err : "out of memory");
  if (ok && gemm) {
    ir_str_printf(text, "gemm %lld x %lld x %lld bias %d act %d\n", (long long)g.m, (long long)g.n, (long long)g.k,
                  g.bias, (int)g.act);
    if (g.rest) ck_assert_msg(cuda_emit(g.rest, text, &l, &err), "%s: %s", k->name, err);
  }
  cuda_gemm_free(&g);
  free(err);
  return ok && !text->failed ? true : oom_at(o, gemm ? "cuda_gemm_split" : "cuda_emit", k->name);
}

/* relu(a*b - 1) with its row sums and gelu(a @ b^T + bias), planned for
 * the CUDA back end and generated: a row reduction, an elementwise kernel,
 * and a cuBLASLt call with a bias epilogue whose exact gelu is a rest kernel. */
static bool cuda_part(outcome *o, kiln_tensor *a, kiln_tensor *b, kiln_tensor *bias) {
  kiln_tensor *y = fused(a, b);
  kiln_tensor *outs[] = {y, kiln_sum_dims(y, 1, (int64_t[]){1}, 0), kiln_gelu(affine(a, b, bias))};
  rt_graph_plan p;
  ir_str text = {0};
  bool ok = !failed(o, "plan_for", rt_plan_graph(KILN_CUDA, 3, outs, &p));
  for (int i = 0; ok && i < p.g.ngroups; i++) ok = cuda_kernel(o, p.kernels[i].k, &text);
  rt_graph_plan_free(&p);
  if (ok && !cuda_first.len) ir_str_append(&cuda_first, text.s, text.len);
  if (ok)
    ck_assert_msg(text.len == cuda_first.len && !memcmp(text.s, cuda_first.s, text.len), "CUDA C differs:\n%s", text.s);
  ir_str_free(&text);
  return ok;
}
#endif

/* The graphs of the lazy part: planned afresh on each run (no plan is
 * kept), their kernels from the in-memory cache, which a first clean run
 * filled: lowering and planning are swept on every run, and the CUDA C is
 * generated anew. */
static outcome program(void) {
  outcome o = {KILN_OK, NULL, ""};
  rt_plans_forget();
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3)), *b = kiln_from_data(bv, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *bias = kiln_from_data(biasv, KILN_F32, KILN_SHAPE(2)), *ix = kiln_from_data(iv, KILN_I64, KILN_SHAPE(2, 2));
  bool ok = lazy_part(&o, a, b, bias, ix) && compiled_part(&o, a, b);
#ifdef KILN_TEST_CUDA
  ok = ok && cuda_part(&o, a, b, bias);
#endif
  (void)ok;
  kiln_scope_end();
  return o;
}

/* ---- the JIT: the program's kernels compiled anew ------------------------ */
static rt_planned *jit_plan;   /* the lazy part's kernels, lowered once */
static int jit_kernels, jit_at;   /* how many; the one each run compiles */

/* Kernel jit_at compiled (the in-memory cache keeps nothing while the
 * sweeps run, so each failing run compiles it): key, LLVM IR emission, JIT
 * bookkeeping. */
static outcome compile_one(void) {
  outcome o = {KILN_OK, "compile", ""};
  kernel *k = jit_plan[jit_at].k;
  ir_str key = {0};
  k_key(k, &key);
  rt_origin origin;
  bool no_key = key.failed;
  rt_kernel *e = no_key ? NULL : rt_kernel_get(k, &key, 0, &origin);
  ir_str_free(&key);
  if (!e) {
    snprintf(o.msg, sizeof o.msg, "%s", no_key ? "kernel key: out of memory" : kiln_last_error());
    o.st = strstr(o.msg, "out of memory") ? KILN_ERR_MEMORY : KILN_ERR_COMPILE;
    return o;
  }
  ck_assert_int_ne(origin, RT_MEMORY);
  ck_assert(rt_kernel_fn(e));
  rt_kernel_release(e);   /* dropped at once: nothing is kept */
  return o;
}

static void plan_jit_kernels(void) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3)), *b = kiln_from_data(bv, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *bias = kiln_from_data(biasv, KILN_F32, KILN_SHAPE(2)), *ix = kiln_from_data(iv, KILN_I64, KILN_SHAPE(2, 2));
  kiln_tensor *y = fused(a, b), *top, *at;
  kiln_topk(b, 2, 1, 1, 1, &top, &at);
  kiln_tensor *outs[] = {y, kiln_sum_dims(y, 1, (int64_t[]){1}, 0), kiln_relu(affine(a, b, bias)), kiln_cumsum(a, 1),
                         top, at, kiln_gather(a, 1, ix)};
  jit_kernels = rt_plan(7, outs, &jit_plan);
  ck_assert_msg(jit_kernels >= 5, "%d kernels: %s", jit_kernels, kiln_last_error());
  kiln_scope_end();   /* the kernels stay: compiling needs nothing else */
}

/* ---- a fresh kernel's realize ------------------------------------------------ */
static kiln_tensor *one_in;   /* realized once */
static int one_line;

/* exp of a realized tensor with no plan and no kernel kept: whatever runs
 * out of memory (the node, planning, lowering, the compile), the error
 * names exp where the user called it. (When not even an error node can be
 * made, the op gets the shared one, whose message is generic: the last
 * error, set as it returns, names the op.) */
static outcome one_kernel(void) {
  outcome o = {KILN_OK, NULL, ""};
  kiln_scope_begin();
  kiln_tensor *e = kiln_exp(one_in);
  one_line = __LINE__ - 1;
  bool ok = !failed(&o, "exp", kiln_status_of(e)) && !failed(&o, "realize", kiln_realize(e));
  const float *got = ok ? kiln_data(e) : NULL;
  for (int i = 0; got && i < 6; i++)
    ck_assert_msg(fabsf(got[i] - expf(av[i])) <= 1e-6f * expf(av[i]), "exp[%d] = %g", i, got[i]);
  kiln_scope_end();
  if (o.st == KILN_OK) return o;
  char want[96];
  snprintf(want, sizeof want, "test_alloc_fail.c:%d: exp: out of memory", one_line);
  ck_assert_msg(strstr(o.msg, want), "%s: %s", o.step, o.msg);
  return o;
}

/* ---- the sweeps ---------------------------------------------------------------- */
typedef outcome (*program_fn)(void);

/* Out of memory is the only failure allowed, and it says so. */
static void check_outcome(const outcome *o, uint64_t n, bool after) {
  if (o->st == KILN_OK) return;
  ck_assert_msg(o->st == KILN_ERR_MEMORY, "N=%llu%s: %s gave status %d: %s", (unsigned long long)n, after ? "+" : "",
                o->step, (int)o->st, o->msg);
  ck_assert_msg(strstr(o->msg, "out of memory"), "N=%llu%s: %s: the message says %s", (unsigned long long)n,
                after ? "+" : "", o->step, o->msg);
}

/* The sweeps of fresh kernels keep the clean runs cheap: those load the
 * kernels from a disk cache of their own (the failing runs never read it,
 * so they compile). A process's first realize writes its entry in another
 * directory, emptied before each failing run. */
static char disk_dir[64], first_dir[80];

static void disk_cache_begin(void) {
  snprintf(disk_dir, sizeof disk_dir, "/tmp/kiln-alloc-fail-XXXXXX");
  ck_assert(mkdtemp(disk_dir));
  snprintf(first_dir, sizeof first_dir, "%s/first", disk_dir);
  setenv("KILN_CACHE_DIR", disk_dir, 1);
}

/* Removes the files of dir. */
static void clear_dir(const char *dir) {
  DIR *d = opendir(dir);
  char path[512];
  for (struct dirent *e; d && (e = readdir(d));)
    if (e->d_type != DT_DIR && snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) unlink(path);
  if (d) closedir(d);
}

static void disk_cache_end(void) {
  clear_dir(first_dir);
  rmdir(first_dir);
  clear_dir(disk_dir);
  rmdir(disk_dir);
  disk_dir[0] = 0;
  unsetenv("KILN_CACHE_DIR");
}

/* Every entry in dir is keyed whole: its key (after the 32-byte header:
 * diskcache.c) starts with kiln's and LLVM's versions (cache.c), so no
 * entry was keyed by a prefix that failed to be made. */
static void expect_entries_keyed_whole(const char *dir, uint64_t n, bool after) {
  DIR *d = opendir(dir);
  char path[512], head[32 + 5];
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_type == DT_DIR || snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    ck_assert_msg(got == sizeof head && !memcmp(head + 32, "kiln ", 5), "N=%llu%s: entry %s is keyed without kiln's version",
                  (unsigned long long)n, after ? "+" : "", e->d_name);
  }
  if (d) closedir(d);
}

static bool clean_run;   /* expect_clean's run: first_realize keeps the JIT and reads disk_dir */

static void expect_clean(program_fn run, uint64_t n, bool after) {
  rt_opts()->disk_cache = disk_dir[0] != 0;
  clean_run = true;
  outcome o = run();
  clean_run = false;
  rt_opts()->disk_cache = false;
  ck_assert_msg(o.st == KILN_OK, "after N=%llu%s: %s failed with %d: %s", (unsigned long long)n, after ? "+" : "",
                o.step ? o.step : "?", (int)o.st, o.msg);
}

/* The allocations of one clean run, after a first one warmed what stays
 * (the pool, the GEMM drivers a JIT compiles once, the kernel cache when
 * it keeps anything). */
static uint64_t count_allocations(program_fn run) {
  expect_clean(run, 0, false);
  ir_alloc_fail_at(0, false);
  outcome o = run();   /* as the failing runs will: not from the disk */
  ck_assert_msg(o.st == KILN_OK, "%s: %s", o.step ? o.step : "?", o.msg);
  return ir_alloc_count();
}

/* Fails the Nth allocation (after: and every one from it on) of run, for
 * every N up to the most any clean run made (that depends a little on what
 * the allocator and the caches keep from earlier runs), each time followed
 * by a clean run. Returns that count. */
static uint64_t sweep(program_fn run, bool after, const char *name) {
  uint64_t a = count_allocations(run), failing = 0, injected = 0;
  for (uint64_t n = 1; n <= a; n++) {
    ir_alloc_fail_at(n, after);
    outcome o = run();
    injected += ir_alloc_failed() > 0;
    ir_alloc_fail_at(0, false);
    check_outcome(&o, n, after);
    if (disk_dir[0]) expect_entries_keyed_whole(first_dir, n, after);
    failing += o.st != KILN_OK;
    expect_clean(run, n, after);
    if (ir_alloc_count() > a) a = ir_alloc_count();
  }
  fprintf(stderr, "test_alloc_fail: %s: N = 1..%llu%s: %llu runs had an allocation fail, %llu ended in KILN_ERR_MEMORY\n",
          name, (unsigned long long)a, after ? " (every allocation from N on failing)" : "", (unsigned long long)injected,
          (unsigned long long)failing);
  ck_assert_uint_gt(failing, 0);
  return a;
}

static void sweep_program(bool after) {
  snprintf(npy_path, sizeof npy_path, "/tmp/kiln-alloc-fail-%d.npy", (int)getpid());
  ck_assert_uint_gt(sweep(program, after, "program"), 500);   /* the program goes through kiln's allocator */
  unlink(npy_path);
}

/* Each kernel of the program on its own: a run compiles one kernel, so the
 * sweep costs a compile per N, not the program's every compile. */
static void sweep_jit(bool after) {
  int64_t kept = rt_opts()->kernel_cache_bytes;
  plan_jit_kernels();
  rt_opts()->kernel_cache_bytes = 0;
  disk_cache_begin();
  char name[32];
  for (jit_at = 0; jit_at < jit_kernels; jit_at++) {
    snprintf(name, sizeof name, "kernel %d", jit_at);
    sweep(compile_one, after, name);
  }
  rt_plan_free(jit_plan, jit_kernels);
  disk_cache_end();
  snprintf(npy_path, sizeof npy_path, "/tmp/kiln-alloc-fail-%d.npy", (int)getpid());
  expect_clean(program, 0, after);   /* the same kernels compiled again compute the right values */
  unlink(npy_path);
  rt_opts()->kernel_cache_bytes = kept;
}

/* exp as the first realize of a kernel in a process: no JIT yet (its
 * target string and the disk keys' prefix are made), nothing in memory, the
 * disk cache on and its directory empty, so the lookup misses, the kernel
 * is compiled and its entry written. A clean run after it keeps that JIT
 * and loads from the clean runs' directory. */
static outcome first_realize(void) {
  if (!clean_run) {
    rt_plans_forget();
    rt_cache_shutdown();
    clear_dir(first_dir);
  }
  setenv("KILN_CACHE_DIR", clean_run ? disk_dir : first_dir, 1);
  bool disk = rt_opts()->disk_cache;
  rt_opts()->disk_cache = true;
  outcome o = one_kernel();
  rt_opts()->disk_cache = disk;
  return o;
}

static void sweep_one_kernel(bool after) {
  int64_t kept = rt_opts()->kernel_cache_bytes;
  rt_opts()->kernel_cache_bytes = 0;
  disk_cache_begin();
  one_in = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3));
  sweep(first_realize, after, "exp, a process's first realize");
  kiln_release(one_in);
  disk_cache_end();
  rt_opts()->kernel_cache_bytes = kept;
}

START_TEST(each_allocation_fails_once) { sweep_program(false); }
END_TEST

START_TEST(every_allocation_from_n_fails) { sweep_program(true); }
END_TEST

START_TEST(each_compile_allocation_fails_once) { sweep_jit(false); }
END_TEST

START_TEST(every_compile_allocation_from_n_fails) { sweep_jit(true); }
END_TEST

START_TEST(fresh_kernel_names_the_op) { sweep_one_kernel(false); }
END_TEST

START_TEST(fresh_kernel_names_the_op_from_n) { sweep_one_kernel(true); }
END_TEST

/* The error a user sees names the op that could not be built, where. */
/* ir_grow: a caller's fixed array is copied, never freed (ASan would see
 * a free of the stack); a heap array keeps its contents; a failed growth
 * leaves the array and its capacity as they were. */
START_TEST(grow_keeps_what_it_holds) {
  int small[4] = {1, 2, 3, 4}, *v = small;
  size_t cap = 4;
  ck_assert(ir_grow((void **)&v, &cap, 4, 3, sizeof *v, small));
  ck_assert(v == small && cap == 4);   /* room enough: nothing moves */
  ck_assert(ir_grow((void **)&v, &cap, 4, 5, sizeof *v, small));
  ck_assert(v != small && cap == 16);
  ck_assert_int_eq(v[0] + v[1] + v[2] + v[3], 10);
  for (int i = 4; i < 16; i++) v[i] = i + 1;
  ck_assert(ir_grow((void **)&v, &cap, 16, 40, sizeof *v, small));
  ck_assert_uint_eq(cap, 40);
  for (int i = 0; i < 16; i++) ck_assert_int_eq(v[i], i + 1);
  int *before = v;
  ir_alloc_fail_at(1, false);
  ck_assert(!ir_grow((void **)&v, &cap, 40, 41, sizeof *v, small));
  ir_alloc_fail_at(0, false);
  ck_assert(v == before && cap == 40 && v[15] == 16);
  ck_assert(!ir_grow((void **)&v, &cap, 40, SIZE_MAX / 2, sizeof *v, small));   /* its bytes overflow */
  ck_assert(v == before && cap == 40);
  free(v);
}
END_TEST

/* A disk entry that cannot be read for want of memory (its buffer, or the
 * copy of its payload) is a miss, never a hit with an empty payload (which
 * the CPU back end then warned about as an entry without a kernel name). */
START_TEST(disk_load_out_of_memory_is_a_miss) {
  disk_cache_begin();
  rt_opts()->disk_cache = true;
  char payload[1000];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (char)(i * 7);
  ir_str key = {"a key", 5, 6, false};
  rt_disk_info info = {0};
  rt_disk_store("test", &key, payload, sizeof payload, &info);
  ck_assert_int_eq(info.warnings, 0);
  uint64_t n = 1;
  for (bool injected = true; injected; n++) {
    ir_str got = {0};
    info = (rt_disk_info){0};
    ir_alloc_fail_at(n, false);
    bool hit = rt_disk_load("test", &key, &got, &info);
    injected = ir_alloc_failed() > 0;
    ir_alloc_fail_at(0, false);
    ck_assert_msg(hit ? got.len == sizeof payload && !memcmp(got.s, payload, sizeof payload) : !got.len && !got.failed,
                  "N=%llu: hit %d with %zu bytes", (unsigned long long)n, hit, got.len);
    ck_assert(hit || info.warnings == 1);
    ir_str_free(&got);
  }
  ck_assert_uint_ge(n, 3);   /* the read buffer and the payload's copy both failed once */
  rt_opts()->disk_cache = false;
  disk_cache_end();
}
END_TEST

START_TEST(failed_op_names_itself) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3));
  ir_alloc_fail_at(1, true);
  kiln_tensor *e = kiln_exp(a);
  int line = __LINE__ - 1;
  ir_alloc_fail_at(0, false);
  ck_assert_int_eq(kiln_status_of(e), KILN_ERR_MEMORY);
  char want[128];
  snprintf(want, sizeof want, "test_alloc_fail.c:%d: exp: out of memory", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  /* failing one allocation at a time: the first that fails the op is its node's */
  kiln_status st = KILN_OK;
  for (uint64_t n = 1; n < 8 && st == KILN_OK; n++) {
    ir_alloc_fail_at(n, false);
    e = kiln_zeros(KILN_SHAPE(2), KILN_F32);
    line = __LINE__ - 1;
    ir_alloc_fail_at(0, false);
    st = kiln_status_of(e);
  }
  ck_assert_int_eq(st, KILN_ERR_MEMORY);
  snprintf(want, sizeof want, "test_alloc_fail.c:%d: zeros: out of memory", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  kiln_scope_end();
}
END_TEST

static Suite *alloc_fail_suite(void) {
  Suite *s = suite_create("alloc_fail");
  TCase *tc = tu_tcase(s, "faultsim");
  tcase_add_test(tc, grow_keeps_what_it_holds);
  tcase_add_test(tc, failed_op_names_itself);
  tcase_add_test(tc, disk_load_out_of_memory_is_a_miss);
  tcase_add_test(tc, each_allocation_fails_once);
  tcase_add_test(tc, every_allocation_from_n_fails);
  tcase_add_test(tc, each_compile_allocation_fails_once);
  tcase_add_test(tc, every_compile_allocation_from_n_fails);
  tcase_add_test(tc, fresh_kernel_names_the_op);
  tcase_add_test(tc, fresh_kernel_names_the_op_from_n);
  return s;
}

KILN_TEST_MAIN(alloc_fail_suite)
