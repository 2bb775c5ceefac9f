/* test_kernel_cache.c: the kernel caches (runtime/cache.c, diskcache.c):
 * compiled code within its memory budget (evicted least recently used
 * first, never while held, memory maps and RSS flat over a long run of new
 * kernels) and the disk cache of CPU objects (a second process compiles
 * nothing; damaged, truncated, unwritable, FIFO and huge entries are
 * recompiled with a warning; the directory stays within its budget). */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "runtime/inspect.h"
#include "runtime/rt.h"
#include "runtime/rt_internal.h"
#include "util/testutil.h"

/* ---- distinct kernel structures (tu_chain) ------------------------------------ */
enum { CHAIN = TU_CHAIN_STEPS, NX = 16 };

static float chain_input(int j) { return (float)(j - NX / 2) / (NX / 2); }

static double chain_value(double x, int i) {
  double y = x + 0.5;
  for (int d = 0; d < CHAIN; d++, i /= 4) {
    int op = i % 4;
    y = op == 0 ? y + x : op == 1 ? y - x : op == 2 ? y * x : y > x ? y : x;
  }
  return y;
}

/* Realizes structure i and checks every element against chain_value. */
static void run_chain(int i) {
  kiln_scope_begin();
  float xv[NX], out[NX];
  for (int j = 0; j < NX; j++) xv[j] = chain_input(j);
  kiln_tensor *y = tu_chain(kiln_from_data(xv, KILN_F32, KILN_SHAPE(NX)), i);
  ck_assert_msg(kiln_realize(y) == KILN_OK, "structure %d: %s", i, kiln_last_error());
  ck_assert_int_eq(kiln_copy_to_host(y, out, sizeof out), KILN_OK);
  for (int j = 0; j < NX; j++) {
    double want = chain_value(xv[j], i);
    ck_assert_msg(fabs(out[j] - want) <= 1e-5 * (1 + fabs(want)), "structure %d, x[%d]: %g, want %g", i, j, out[j],
                  want);
  }
  kiln_scope_end();
}

static long count_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  ck_assert_ptr_nonnull(f);
  long n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, pages = 0;
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fscanf(f, "%ld %ld", &size, &pages), 2);
  fclose(f);
  return pages * (sysconf(_SC_PAGESIZE) / 1024);
}

/* ---- memory budget ---------------------------------------------------------- */
/* KILN_TEST_LONG_RUN=n compiles n structures (100000 is the run);
 * CI compiles 600 (about 20 s on a loaded 2-core machine): the first 200
 * warm up (allocator arenas, LLVM's own caches), the rest must leave the
 * memory-map count and RSS where they were. Without eviction each kernel
 * keeps 2 maps and about 9 KB, so 400 more would add 800 maps and 3.6 MB. */
START_TEST(test_long_run_flat) {
  const char *env = getenv("KILN_TEST_LONG_RUN");
  int n = env && atoi(env) > 0 ? atoi(env) : 600, warm = n / 3;
  ck_assert_int_lt(n, 1 << (2 * CHAIN));
  rt_opts()->kernel_cache_bytes = 64 << 10;
  long maps0 = 0, rss0 = 0;
  for (int i = 0; i < n; i++) {
    if (i == warm) maps0 = count_maps(), rss0 = rss_kb();
    run_chain(i);
  }
  long maps = count_maps(), rss = rss_kb();
  kiln_stats_t s = kiln_stats();
  printf("long run: %d structures, maps %ld -> %ld, RSS %ld -> %ld KB, %llu evictions, %llu code bytes held\n", n,
         maps0, maps, rss0, rss, (unsigned long long)s.evictions, (unsigned long long)s.code_bytes);
  ck_assert_uint_eq(s.compiles, (uint64_t)n);
  ck_assert_uint_ge(s.evictions, (uint64_t)n - (64 << 10) / 512);
  ck_assert_uint_le(s.code_bytes, 64 << 10);
  ck_assert_msg(maps <= maps0 + 16, "memory maps grew from %ld to %ld", maps0, maps);
#ifndef __SANITIZE_ADDRESS__
  /* ASan keeps freed memory in its quarantine (256 MB by default), so RSS
   * grows there by design; LeakSanitizer checks the frees instead. */
  /* The map count above is the tight check; RSS catches a leak of 10 KB or
   * more per kernel (4 MB over 400) through allocator and LLVM noise, which
   * reached 2.2 MB on a loaded machine. */
  ck_assert_msg(rss <= rss0 + 4096, "RSS grew from %ld to %ld KB", rss0, rss);
#endif
}
END_TEST

/* With room for about three kernels, using one again keeps it: the least
 * recently used goes instead. */
START_TEST(test_lru_order) {
  run_chain(1);
  uint64_t one = kiln_stats().code_bytes;
  rt_opts()->kernel_cache_bytes = 3 * one + one / 2;
  run_chain(2);
  run_chain(3);
  run_chain(1);   /* 1 is now the most recently used, 2 the least */
  run_chain(4);   /* over budget: 2 goes */
  kiln_stats_t s = kiln_stats();
  ck_assert_uint_eq(s.evictions, 1);
  ck_assert_uint_eq(s.compiles, 4);
  run_chain(1);
  run_chain(3);
  ck_assert_uint_eq(kiln_stats().compiles, 4);  /* both still there */
  run_chain(2);
  ck_assert_uint_eq(kiln_stats().compiles, 5);  /* compiled again */
}
END_TEST

/* The first kernel of structure i's plan, and its key. */
static kernel *planned_kernel(kiln_tensor *y, rt_planned **plan, ir_str *key) {
  ck_assert_int_eq(rt_plan(1, (ir_node *const *)&y, plan), 1);
  k_key((*plan)[0].k, key);
  return (*plan)[0].k;
}

/* Calls the code as realize would bind it (outputs, args, inputs). */
static void call_planned(const rt_planned *pk, cpu_kernel_fn fn, float *out) {
  void *bufs[8];
  ck_assert_int_le(pk->k->nparams, 8);
  for (int p = 0, i = 0; p < pk->k->nparams; p++)
    bufs[p] = pk->k->params[p].output ? (void *)out : pk->k->params[p].args ? (void *)pk->k->args : pk->inputs[i++]->buf->data;
  int64_t cost, extent = k_parallel(pk->k, &cost);
  fn(bufs, 0, extent ? extent : 1);
}

/* A held kernel (what a compiled function keeps across calls) survives a
 * zero budget and many new kernels, its code still runs, and it is
 * evicted once its last hold goes. */
START_TEST(test_held_kernel_stays) {
  setenv("KILN_KERNEL_CACHE_MB", "0", 1);   /* read when this forked test first asks */
  ck_assert_int_eq(rt_opts()->kernel_cache_bytes, 0);
  kiln_scope_begin();
  float xv[NX], out[NX];
  for (int j = 0; j < NX; j++) xv[j] = chain_input(j);
  kiln_tensor *x = kiln_from_data(xv, KILN_F32, KILN_SHAPE(NX)), *y = tu_chain(x, 77);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  rt_planned *plan;
  ir_str key = {0};
  kernel *k = planned_kernel(y, &plan, &key);
  rt_origin origin;
  rt_kernel *held = rt_kernel_get(k, &key, 0, &origin);
  ck_assert_ptr_nonnull(held);
  ck_assert_int_eq(origin, RT_COMPILED);
  rt_kernel_retain(held);
  rt_kernel_release(held);   /* one hold left */
  for (int i = 100; i < 110; i++) run_chain(i);
  ck_assert_uint_eq(kiln_stats().evictions, 10);
  ck_assert_uint_gt(kiln_stats().code_bytes, 0);
  call_planned(&plan[0], rt_kernel_fn(held), out);
  for (int j = 0; j < NX; j++) ck_assert_float_eq_tol(out[j], chain_value(xv[j], 77), 1e-5);
  rt_kernel *again = rt_kernel_get(k, &key, 0, &origin);
  ck_assert_ptr_eq(again, held);
  ck_assert_int_eq(origin, RT_MEMORY);
  rt_kernel_release(again);
  rt_kernel_release(held);   /* the last hold: evicted */
  ck_assert_uint_eq(kiln_stats().code_bytes, 0);
  ck_assert_uint_eq(kiln_stats().evictions, 11);
  ir_str_free(&key);
  rt_plan_free(plan, 1);
  kiln_scope_end();
}
END_TEST

/* A JIT failure (here: a kernel whose symbol another loaded kernel already
 * has) is an error naming the kernel with LLVM's message, not an abort, and
 * the next kernel compiles and runs. */
START_TEST(test_jit_failure_is_an_error) {
  run_chain(90);
  kiln_scope_begin();
  float xv[NX];
  for (int j = 0; j < NX; j++) xv[j] = chain_input(j);
  kiln_tensor *x = kiln_from_data(xv, KILN_F32, KILN_SHAPE(NX));
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  rt_planned *p90, *p91;
  ir_str k90 = {0}, k91 = {0};
  kernel *a = planned_kernel(tu_chain(x, 90), &p90, &k90), *b = planned_kernel(tu_chain(x, 91), &p91, &k91);
  memcpy(b->name, a->name, sizeof b->name);   /* b's code would define a's symbol again */
  rt_origin origin;
  ck_assert_ptr_null(rt_kernel_get(b, &k91, 0, &origin));
  const char *msg = kiln_last_error();
  ck_assert_msg(strstr(msg, a->name) && strstr(msg, "compile failed") && strstr(msg, "Duplicate definition"), "%s",
                msg);
  ir_str_free(&k90);
  ir_str_free(&k91);
  rt_plan_free(p90, 1);
  rt_plan_free(p91, 1);
  kiln_scope_end();
  run_chain(91);
  run_chain(92);
}
END_TEST

/* ---- the disk cache ----------------------------------------------------------- */
static char cache_dir[64];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void disk_setup(void) {
  snprintf(cache_dir, sizeof cache_dir, "/tmp/kiln-kc-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(cache_dir));
  setenv("KILN_CACHE_DIR", cache_dir, 1);
  setenv("KILN_CACHE", "1", 1);
  setenv("KILN_DEBUG", "1", 1);   /* the cache's warnings, and each kernel's origin */
}

static void disk_teardown(void) { nftw(cache_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }

/* The program both "processes" run: three kernels, every value checked. */
static void program(void) {
  for (int i = 0; i < 3; i++) run_chain(500 + i);
}

/* The one CPU entry in the cache directory (fails unless there is one). */
static void only_entry(char *path, int n) {
  DIR *d = opendir(cache_dir);
  ck_assert_ptr_nonnull(d);
  int found = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (!strncmp(e->d_name, "cpu-", 4)) {
      snprintf(path, (size_t)n, "%.63s/%.255s", cache_dir, e->d_name);
      found++;
    }
  closedir(d);
  ck_assert_int_eq(found, 1);
}

static int count_entries(void) {
  DIR *d = opendir(cache_dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, "cpu-", 4);
  if (d) closedir(d);
  return n;
}

/* stderr into a file for the length of one realize; its text, malloc'd. */
static int saved_stderr = -1;
static char log_path[128];

static void capture_begin(void) {
  snprintf(log_path, sizeof log_path, "%s.log", cache_dir);
  fflush(stderr);
  saved_stderr = dup(2);
  int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  dup2(fd, 2);
  close(fd);
}

static char *capture_end(void) {
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  FILE *f = fopen(log_path, "r");
  ck_assert_ptr_nonnull(f);
  char *text = calloc(1, 1 << 16);
  ck_assert_ptr_nonnull(text);
  size_t got = fread(text, 1, (1 << 16) - 1, f);
  text[got] = '\0';
  fclose(f);
  unlink(log_path);
  return text;
}

/* A second process (forked after kiln_shutdown, so nothing is left in
 * memory) running the same program compiles nothing: every kernel comes
 * from the disk. */
START_TEST(test_second_process_compiles_nothing) {
  program();
  kiln_stats_t s = kiln_stats();
  ck_assert_uint_eq(s.compiles, 3);
  ck_assert_uint_eq(s.disk_hits, 0);
  ck_assert_int_eq(count_entries(), 3);
  kiln_shutdown();
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    kiln_reset_stats();
    program();
    s = kiln_stats();
    _exit(s.compiles == 0 && s.disk_hits == 3 ? 0 : 1);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the second process compiled (status %d)", status);
}
END_TEST

START_TEST(test_cache_off) {
  setenv("KILN_CACHE", "0", 1);
  program();
  ck_assert_int_eq(count_entries(), 0);
}
END_TEST

/* An entry is a 32-byte header (magic, key length, payload length,
 * checksum: diskcache.c), the key, then the payload: the kernel's name, a
 * NUL and the object file (cache.c). */
typedef struct {
  char bytes[1 << 20];
  ir_str key;
  char *payload;
  uint64_t len;
} entry_file;

static void read_entry(const char *path, entry_file *e) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(e->bytes, 1, sizeof e->bytes, f);
  fclose(f);
  uint64_t keylen;
  memcpy(&keylen, e->bytes + 8, 8);
  memcpy(&e->len, e->bytes + 16, 8);
  ck_assert_uint_eq(n, 32 + keylen + e->len);
  e->key = (ir_str){e->bytes + 32, keylen, keylen, false};
  e->payload = e->bytes + 32 + keylen;
}

/* Stores payload under key as kiln would: the entry's checksum is right. */
static void store_entry(const ir_str *key, const char *payload, size_t len) {
  rt_disk_info info = {0};
  rt_disk_store("cpu", key, payload, len, &info);
  ck_assert_int_eq(info.warnings, 0);
}

/* A valid entry whose object file is garbage: the JIT's refusal is a warning. */
static void garbage_object(const char *path) {
  static entry_file e;
  read_entry(path, &e);
  size_t name = strlen(e.payload) + 1;
  memset(e.payload + name, 0x5a, e.len - name);
  store_entry(&e.key, e.payload, e.len);
}

/* What damage case _i does to the entry, and the warning it must give. */
static const char *damage(int c, const char *path) {
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  if (c == 0) {  /* a flipped byte in the payload */
    int fd = open(path, O_RDWR);
    char ch;
    ck_assert_int_eq(pread(fd, &ch, 1, st.st_size - 5), 1);
    ch ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &ch, 1, st.st_size - 5), 1);
    close(fd);
    return "checksum mismatch";
  }
  if (c == 1 || c == 2) {
    ck_assert_int_eq(truncate(path, c == 1 ? st.st_size - 7 : 0), 0);
    return c == 1 ? "length mismatch" : "truncated header";
  }
  if (c == 3 || c == 4) {
    ck_assert_int_eq(unlink(path), 0);
    if (c == 3) {
      ck_assert_int_eq(mkfifo(path, 0600), 0);  /* an open that blocked would hang the test */
      return "not a regular file";
    }
    int fd = open(path, O_WRONLY | O_CREAT, 0600);  /* 2 GiB, sparse: nothing may read it whole */
    ck_assert_int_eq(ftruncate(fd, (off_t)2 << 30), 0);
    close(fd);
    return "larger than any entry";
  }
  garbage_object(path);
  return "adding a kernel to the JIT";
}

/* Each damaged entry: the kernel is recompiled (right values), a warning
 * names the cause, the entry is written again whole and then loads. */
START_TEST(test_damaged_entry) {
  run_chain(600);
  kiln_shutdown();
  char path[512];
  only_entry(path, sizeof path);
  const char *why = damage(_i, path);
  kiln_reset_stats();
  capture_begin();
  run_chain(600);
  char *log = capture_end();
  kiln_stats_t s = kiln_stats();
  ck_assert_msg(strstr(log, "kernel disk cache") && strstr(log, why), "no warning with \"%s\" in: %s", why, log);
  ck_assert_msg(strstr(log, "(compiled in "), "%s", log);
  free(log);
  ck_assert_uint_eq(s.compiles, 1);
  ck_assert_uint_eq(s.disk_hits, 0);
  kiln_shutdown();
  kiln_reset_stats();
  run_chain(600);
  ck_assert_uint_eq(kiln_stats().disk_hits, 1);
}
END_TEST

/* An entry with the right key and checksum whose payload is another
 * kernel's (chain 601's name and object under chain 600's key) is refused
 * by the name it holds: chain 600 is compiled and right. */
START_TEST(test_entry_of_another_kernel) {
  static entry_file other, mine;
  char path[512];
  run_chain(601);
  only_entry(path, sizeof path);
  read_entry(path, &other);
  ck_assert_int_eq(unlink(path), 0);
  run_chain(600);
  only_entry(path, sizeof path);
  read_entry(path, &mine);
  store_entry(&mine.key, other.payload, other.len);
  kiln_shutdown();
  kiln_reset_stats();
  capture_begin();
  run_chain(600);
  char *log = capture_end();
  ck_assert_msg(strstr(log, "entry holds another kernel"), "%s", log);
  free(log);
  ck_assert_uint_eq(kiln_stats().compiles, 1);
  ck_assert_uint_eq(kiln_stats().disk_hits, 0);
}
END_TEST

/* A directory longer than 3,999 bytes is refused, not cut (the cut name
 * is another directory, which kiln made and filled): a warning, no disk
 * cache, nothing created. */
START_TEST(test_cache_dir_too_long) {
  char dir[4400], part[202] = "/";   /* components of 200 bytes: each within NAME_MAX */
  memset(part + 1, 'd', 200);
  int n = snprintf(dir, sizeof dir, "%s", cache_dir);
  while (n < 4100) n += snprintf(dir + n, sizeof dir - (size_t)n, "%s", part);
  setenv("KILN_CACHE_DIR", dir, 1);
  capture_begin();
  run_chain(602);
  char *log = capture_end();
  char want[160];
  snprintf(want, sizeof want, "kiln: warning: ignoring the kernel disk cache directory from KILN_CACHE_DIR: %d bytes long", n);
  ck_assert_msg(strstr(log, want), "%s", log);
  free(log);
  ck_assert_uint_eq(kiln_stats().compiles, 1);
  DIR *d = opendir(cache_dir);
  int made = 0;
  for (struct dirent *e; (e = readdir(d));) made += e->d_name[0] != '.';
  closedir(d);
  ck_assert_int_eq(made, 0);
}
END_TEST

/* When the temporary file cannot be made, the warning names it (not the
 * entry). The second store of this process writes <entry>.tmp.<pid>.1
 * (diskcache.c): a directory there makes it fail. */
START_TEST(test_temporary_file_named) {
  char path[512], tmp[600];
  run_chain(603);
  only_entry(path, sizeof path);
  ck_assert_int_eq(unlink(path), 0);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.1", path, (long)getpid());
  ck_assert_int_eq(mkdir(tmp, 0700), 0);
  kiln_shutdown();
  capture_begin();
  run_chain(603);
  char *log = capture_end();
  char want[700];
  snprintf(want, sizeof want, "kernel disk cache: %s: Is a directory", tmp);
  ck_assert_msg(strstr(log, want), "no \"%s\" in: %s", want, log);
  free(log);
  ck_assert_int_eq(rmdir(tmp), 0);
}
END_TEST

/* A directory that cannot be made only turns the cache off, with a warning. */
START_TEST(test_unwritable_dir) {
  setenv("KILN_CACHE_DIR", "/proc/kiln-no-such-dir/cache", 1);
  capture_begin();
  run_chain(601);
  char *log = capture_end();
  ck_assert_msg(strstr(log, "kernel disk cache: /proc/kiln-no-such-dir/cache"), "%s", log);
  free(log);
  kiln_shutdown();
  kiln_reset_stats();
  run_chain(601);
  ck_assert_uint_eq(kiln_stats().compiles, 1);
}
END_TEST

/* Past its budget the directory loses its least recently used entries. */
START_TEST(test_disk_budget) {
  run_chain(700);
  char path[512];
  only_entry(path, sizeof path);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  rt_opts()->disk_cache_bytes = 4 * st.st_size + st.st_size / 2;
  for (int i = 701; i < 710; i++) run_chain(i);
  int n = count_entries();
  ck_assert_msg(n >= 3 && n <= 4, "%d entries for a budget of 4.5", n);
  kiln_shutdown();
  kiln_reset_stats();
  run_chain(709);   /* the newest is kept */
  run_chain(700);   /* the oldest went */
  ck_assert_uint_eq(kiln_stats().disk_hits, 1);
  ck_assert_uint_eq(kiln_stats().compiles, 1);
}
END_TEST

static Suite *kernel_cache_suite(void) {
  Suite *s = suite_create("kernel_cache");
  TCase *tc = tcase_create("memory");
  tcase_add_test(tc, test_long_run_flat);
  tcase_add_test(tc, test_lru_order);
  tcase_add_test(tc, test_held_kernel_stays);
  tcase_add_test(tc, test_jit_failure_is_an_error);
  suite_add_tcase(s, tc);
  tc = tcase_create("disk");
  tcase_add_checked_fixture(tc, disk_setup, disk_teardown);
  tcase_add_test(tc, test_second_process_compiles_nothing);
  tcase_add_test(tc, test_cache_off);
  tcase_add_loop_test(tc, test_damaged_entry, 0, 6);
  tcase_add_test(tc, test_entry_of_another_kernel);
  tcase_add_test(tc, test_cache_dir_too_long);
  tcase_add_test(tc, test_temporary_file_named);
  tcase_add_test(tc, test_unwritable_dir);
  tcase_add_test(tc, test_disk_budget);
  suite_add_tcase(s, tc);
  return s;
}

KILN_TEST_MAIN(kernel_cache_suite)
