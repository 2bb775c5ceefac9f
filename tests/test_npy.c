/* test_npy.c: .npy files: round trips of every dtype and 0-d to 4-d shapes,
 * NumPy's exact header bytes, the mapped (borrowed) load and its lifetime,
 * copied loads of Fortran-order and big-endian files, header variants NumPy
 * writes, and hand-made corrupt files whose errors must name the file and
 * the problem. tests/python/numpy_npy.py checks the same against NumPy. */
#include "check_main.h"
#include "frontend/frontend.h"
#include "runtime/rt.h"
#include "util/testutil.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- files ---------------------------------------------------------------- */
/* A file of magic, version major.0, the header text (its length field
 * written for the version) and n data bytes. */
static void write_npy(const char *path, int major, const char *text, const void *data, size_t n) {
  unsigned char buf[1024];
  size_t tl = strlen(text), pre = major == 1 ? 10 : 12;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(tl >> (8 * i));
  memcpy(buf + pre, text, tl);
  ck_assert(pre + tl + n <= sizeof buf);
  if (n) memcpy(buf + pre + tl, data, n);
  tu_write_file(path, buf, pre + tl + n);
}

/* ---- round trips ---------------------------------------------------------- */
static const struct { int ndim; int64_t shape[4]; } shapes[] = {
    {0, {0}}, {1, {5}}, {2, {2, 3}}, {3, {2, 1, 3}}, {4, {2, 3, 1, 2}}, {1, {0}}, {3, {2, 0, 3}},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

/* Every dtype but bfloat16 in every shape, bit for bit (NaNs and -0 too). */
START_TEST(test_npy_round_trip) {
  kiln_dtype dt = (kiln_dtype)(_i / NSHAPES);
  if (dt == KILN_BF16) return;
  int s = _i % NSHAPES;
  size_t n = (size_t)ir_numel(shapes[s].ndim, shapes[s].shape), bytes = n * kiln_dtype_size(dt);
  unsigned char data[512];
  tu_fill(dt, (int64_t)n, (uint64_t)_i, TU_FULL, data);
  char *path = tu_tmp_path("rt.npy");
  kiln_scope_begin();
  kiln_tensor *t = kiln_from_data(data, dt, shapes[s].ndim, shapes[s].shape);
  ck_assert_int_eq(kiln_save_npy(t, path), KILN_OK);
  kiln_tensor *u = kiln_load_npy(path);
  ck_assert_int_eq(kiln_status_of(u), KILN_OK);
  ck_assert_int_eq(kiln_dtype_of(u), dt);
  ck_assert_int_eq(kiln_ndim(u), shapes[s].ndim);
  for (int d = 0; d < shapes[s].ndim; d++) ck_assert_int_eq(kiln_size(u, d), shapes[s].shape[d]);
  tu_assert_bytes(u, data, bytes);
  ck_assert_int_eq(u->buf->borrowed, n > 0);   /* mapped unless there is nothing to map */
  kiln_scope_end();
  unlink(path);
}
END_TEST

/* What np.save writes for np.arange(6, dtype='<f4').reshape(2, 3), byte for byte. */
START_TEST(test_npy_header_bytes) {
  static const char want[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  float v[6] = {0, 1, 2, 3, 4, 5};
  char *path = tu_tmp_path("hdr.npy");
  kiln_scope_begin();
  ck_assert_int_eq(kiln_save_npy(kiln_from_data(v, KILN_F32, KILN_SHAPE(2, 3)), path), KILN_OK);
  kiln_scope_end();
  unsigned char got[256];
  ck_assert_uint_eq(tu_read_file(path, got, sizeof got), 128 + sizeof v);
  ck_assert_int_eq(memcmp(got, want, sizeof want - 1), 0);
  for (size_t i = sizeof want - 1; i < 127; i++) ck_assert_int_eq(got[i], ' ');
  ck_assert_int_eq(got[127], '\n');
  ck_assert_int_eq(memcmp(got + 128, v, sizeof v), 0);
  unlink(path);
  /* one dim keeps Python's trailing comma, bool and uint8 the '|' order */
  char hdr[FE_NPY_HEADER_MAX];
  size_t n = fe_npy_header_write(hdr, KILN_BOOL, 1, (const int64_t[]){3});
  ck_assert_uint_eq(n, 128);
  ck_assert_int_eq(memcmp(hdr + 10, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", 57), 0);
  n = fe_npy_header_write(hdr, KILN_I64, 0, NULL);
  ck_assert_int_eq(memcmp(hdr + 10, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 55), 0);
}
END_TEST

/* A transposed, sliced view is saved in its own C order. */
START_TEST(test_npy_save_view) {
  char *path = tu_tmp_path("view.npy");
  kiln_scope_begin();
  kiln_tensor *a = kiln_reshape(kiln_arange(0, 12, 1), KILN_SHAPE(3, 4));
  kiln_tensor *v = kiln_slice(kiln_T(a), 0, 1, KILN_END, 2);   /* rows 1 and 3 of a^T: (2, 3) */
  ck_assert_int_eq(kiln_save_npy(v, path), KILN_OK);
  const int64_t want[6] = {1, 5, 9, 3, 7, 11};
  kiln_tensor *u = kiln_load_npy(path);
  ck_assert_int_eq(kiln_size(u, 0), 2);
  ck_assert_int_eq(kiln_size(u, 1), 3);
  tu_assert_bytes(u, want, sizeof want);
  kiln_scope_end();
  unlink(path);
}
END_TEST

/* The mapping stays while any tensor reads it (a view included) and goes
 * with the last; kernels read the mapped data like any buffer. */
START_TEST(test_npy_mapping_lifetime) {
  char *path = tu_tmp_path("map.npy");
  float v[4] = {1, 2, 3, 4};
  kiln_tensor *t = kiln_from_data(v, KILN_F32, KILN_SHAPE(4));
  ck_assert_int_eq(kiln_save_npy(t, path), KILN_OK);
  kiln_release(t);
  kiln_tensor *u = kiln_load_npy(path);
  ck_assert_int_eq(tu_mappings_of(path), 1);
  kiln_tensor *w = kiln_slice(u, 0, 2, KILN_END, 1);
  ck_assert_int_eq(kiln_realize(w), KILN_OK);
  kiln_release(u);
  ck_assert_int_eq(tu_mappings_of(path), 1);
  kiln_tensor *y = kiln_muls(w, 10), *s = kiln_sum(y);
  ck_assert_double_eq(kiln_item(s), 70);
  kiln_release(s);
  kiln_release(w);
  kiln_release(y);
  ck_assert_int_eq(tu_mappings_of(path), 0);
  unlink(path);
}
END_TEST

/* Saving over a file a tensor maps replaces the file: the old tensor keeps
 * its values (truncating the mapped file would crash it), a new load sees
 * the new ones, and no temporary file is left. */
START_TEST(test_npy_overwrite_mapped) {
  char *path = tu_tmp_path("over.npy");
  float a[3] = {1, 2, 3}, b[3] = {7, 8, 9};
  kiln_scope_begin();
  ck_assert_int_eq(kiln_save_npy(kiln_from_data(a, KILN_F32, KILN_SHAPE(3)), path), KILN_OK);
  kiln_tensor *old = kiln_load_npy(path);
  ck_assert(old->buf->borrowed);
  ck_assert_int_eq(kiln_save_npy(kiln_from_data(b, KILN_F32, KILN_SHAPE(3)), path), KILN_OK);
  tu_assert_bytes(old, a, sizeof a);
  tu_assert_bytes(kiln_load_npy(path), b, sizeof b);
  ck_assert_int_eq(kiln_save_npy(old, path), KILN_OK);   /* a mapped tensor saved over its own file */
  tu_assert_bytes(kiln_load_npy(path), a, sizeof a);
  kiln_scope_end();
  ck_assert_int_eq(tu_leftovers(path), 0);
  unlink(path);
}
END_TEST

/* ---- files kiln does not write but NumPy may ------------------------------ */
/* Fortran order and big-endian data are copied into C order, native bytes. */
START_TEST(test_npy_copied_layouts) {
  char *path = tu_tmp_path("layout.npy");
  const int64_t want[6] = {0, 1, 2, 3, 4, 5};   /* a (2, 3) array */
  const int64_t fortran[6] = {0, 3, 1, 4, 2, 5};
  kiln_scope_begin();
  write_npy(path, 1, "{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3), }\n", fortran, sizeof fortran);
  kiln_tensor *u = kiln_load_npy(path);
  ck_assert(!u->buf->borrowed);
  tu_assert_bytes(u, want, sizeof want);
  unsigned char big[12];
  for (int i = 0; i < 6; i++) big[2 * i] = 0, big[2 * i + 1] = (unsigned char)(i * 10);
  write_npy(path, 1, "{'descr': '>i2', 'fortran_order': False, 'shape': (6,), }\n", big, sizeof big);
  const int16_t want16[6] = {0, 10, 20, 30, 40, 50};
  tu_assert_bytes(kiln_load_npy(path), want16, sizeof want16);
  /* big-endian and Fortran order at once: (3, 2) of float32 */
  float fv[6] = {1, 3, 5, 2, 4, 6}, fw[6] = {1, 2, 3, 4, 5, 6};
  unsigned char fb[24];
  for (int i = 0; i < 6; i++)
    for (int b = 0; b < 4; b++) fb[4 * i + b] = ((unsigned char *)&fv[i])[3 - b];
  write_npy(path, 1, "{'descr': '>f4', 'fortran_order': True, 'shape': (3, 2), }\n", fb, sizeof fb);
  tu_assert_bytes(kiln_load_npy(path), fw, sizeof fw);
  kiln_scope_end();
  unlink(path);
}
END_TEST

/* Versions 2.0 and 3.0, double quotes, any key order, no trailing comma,
 * Python 2's long sizes, '>' on one-byte types, trailing bytes after the data. */
START_TEST(test_npy_header_variants) {
  static const struct { int major; const char *text; } rows[] = {
      {2, "{'descr': '<u1', 'fortran_order': False, 'shape': (2, 2), }\n"},
      {3, "{\"shape\": (2, 2), \"descr\": \"|u1\", \"fortran_order\": False}\n"},
      {1, "{'fortran_order':False,'shape':(2L,2L),'descr':'>u1'}   \n"},
  };
  const unsigned char data[5] = {1, 2, 3, 4, 99};
  char *path = tu_tmp_path("variant.npy");
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    kiln_scope_begin();
    write_npy(path, rows[i].major, rows[i].text, data, sizeof data);
    kiln_tensor *u = kiln_load_npy(path);
    ck_assert_msg(kiln_status_of(u) == KILN_OK, "row %zu: %s", i, kiln_last_error());
    ck_assert_int_eq(kiln_dtype_of(u), KILN_U8);
    ck_assert_int_eq(kiln_numel(u), 4);
    tu_assert_bytes(u, data, 4);
    kiln_scope_end();
  }
  unlink(path);
}
END_TEST

/* ---- errors --------------------------------------------------------------- */
typedef struct {
  int major;            /* 0: write raw bytes (text, nraw of them) */
  const char *text;
  size_t nraw, ndata;   /* data bytes after the header */
  const char *want;     /* what the message says after "load_npy: '<path>': " */
} bad_row;

static const bad_row bad[] = {
    {0, "hello, world", 12, 0, "not an npy file (it does not start with \\x93NUMPY)"},
    {0, "", 0, 0, "not an npy file"},
    {0, "\x93NUMPY\x04\x00\x10\x00", 10, 0, "unsupported npy format version 4.0"},
    {0, "\x93NUMPY\x01\x00\xc8\x00{'descr'", 18, 0, "truncated header (200 bytes announced, the file has 8"},
    {0, "\x93NUMPY\x02\x00\x20\x4e\x00\x00{}", 14, 0, "header too long (20000 bytes; at most 10000"},
    {0, "\x93NUMPY\x01", 7, 0, "not an npy file"},
    {1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 0, 16, "unsupported dtype '<c8'"},
    {1, "{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }", 0, 8, "unsupported dtype '<u4'"},
    {1, "{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }", 0, 8, "unsupported dtype '|f4'"},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0, 0,
     "shape overflow: a size does not fit in int64"},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0, 0,
     "shape overflow: the element count does not fit in int64"},
    {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,), }", 0, 0,
     "shape overflow: the data does not fit in memory"},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10,), }", 0, 8,
     "truncated data (40 bytes needed after the header, the file has 8)"},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 0, 4,
     "shape has more than KILN_MAX_DIMS (8) dims"},
    {1, "{'descr': '<f4', 'fortran_order': False, }", 0, 4, "header: key 'shape' is missing"},
    {1, "{'descr': '<f4', 'descr': '<f4', 'shape': (), }", 0, 4, "header: key 'descr' appears twice"},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}", 0, 4, "header: unexpected key 'extra'"},
    {1, "{'descr': '<f4' 'fortran_order': False, 'shape': (), }", 0, 4, "header: expected ',' or '}' after 'descr'"},
    {1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (), }", 0, 4, "header: fortran_order must be True or False"},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 0, 4,
     "header: shape must hold non-negative integers"},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 0, 24, "header: expected ',' or ')' in the shape"},
    {1, "{'descr': '<f4\\', 'fortran_order': False, 'shape': (), }", 0, 4, "header: unterminated or escaped string"},
    {1, "['descr']", 0, 4, "header: expected '{' at the start of the header"},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), } x", 0, 4, "header: unexpected text after the dict"},
};

START_TEST(test_npy_bad_files) {
  const bad_row *r = &bad[_i];
  char *path = tu_tmp_path("bad.npy");
  unsigned char zeros[64] = {0};
  if (r->major) write_npy(path, r->major, r->text, zeros, r->ndata);
  else tu_write_file(path, r->text, r->nraw);
  int line = __LINE__ + 1;
  kiln_tensor *u = kiln_load_npy(path);
  ck_assert_int_eq(kiln_status_of(u), KILN_ERR_IO);
  char want[512];
  snprintf(want, sizeof want, "test_npy.c:%d: load_npy: '%s': %s", line, path, r->want);
  ck_assert_msg(strstr(kiln_last_error(), want), "row %d: want\n  %s\ngot\n  %s", _i, want, kiln_last_error());
  kiln_release(u);
  unlink(path);
}
END_TEST

START_TEST(test_npy_io_errors) {
  kiln_scope_begin();
  kiln_tensor *u = kiln_load_npy("/nonexistent/kiln.npy");
  ck_assert_int_eq(kiln_status_of(u), KILN_ERR_IO);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "load_npy: '/nonexistent/kiln.npy': cannot open: No such file"));
  ck_assert_int_eq(kiln_status_of(kiln_load_npy("/tmp")), KILN_ERR_IO);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "load_npy: '/tmp': not a regular file"));
  ck_assert_int_eq(kiln_status_of(kiln_load_npy(NULL)), KILN_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "load_npy: path is NULL"));
  kiln_tensor *t = kiln_ones(KILN_SHAPE(2), KILN_F32);
  ck_assert_int_eq(kiln_save_npy(t, "/nonexistent/kiln.npy"), KILN_ERR_IO);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "save_npy: '/nonexistent/kiln.npy': cannot write: No such file"));
  ck_assert_int_eq(kiln_save_npy(t, NULL), KILN_ERR_ARG);
  ck_assert_int_eq(kiln_save_npy(NULL, "x.npy"), KILN_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "save_npy: tensor is NULL"));
  /* an error tensor gives its own error, and nothing is written */
  char *path = tu_tmp_path("never.npy");
  kiln_tensor *e = kiln_add(t, kiln_ones(KILN_SHAPE(3), KILN_F32));
  ck_assert_int_eq(kiln_save_npy(e, path), KILN_ERR_SHAPE);
  ck_assert_int_eq(access(path, F_OK), -1);
  kiln_scope_end();
}
END_TEST

/* bfloat16 has no NumPy dtype: saving it is refused and names the way out. */
START_TEST(test_npy_bf16) {
  char *path = tu_tmp_path("bf16.npy");
  kiln_scope_begin();
  kiln_tensor *t = kiln_ones(KILN_SHAPE(2), KILN_BF16);
  int line = __LINE__ + 1;
  ck_assert_int_eq(kiln_save_npy(t, path), KILN_ERR_DTYPE);
  char want[256];
  snprintf(want, sizeof want, "test_npy.c:%d: save_npy: bfloat16 has no NumPy dtype; cast it to float32 first", line);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), want));
  ck_assert_int_eq(access(path, F_OK), -1);
  ck_assert_int_eq(kiln_save_npy(kiln_cast(t, KILN_F32), path), KILN_OK);
  const float want_v[2] = {1, 1};
  tu_assert_bytes(kiln_load_npy(path), want_v, sizeof want_v);
  kiln_scope_end();
  unlink(path);
}
END_TEST

static Suite *npy_suite(void) {
  Suite *s = suite_create("npy");
  TCase *tc = tu_tcase(s, "files");
  tcase_add_loop_test(tc, test_npy_round_trip, 0, KILN_NUM_DTYPES * NSHAPES);
  tcase_add_test(tc, test_npy_header_bytes);
  tcase_add_test(tc, test_npy_save_view);
  tcase_add_test(tc, test_npy_mapping_lifetime);
  tcase_add_test(tc, test_npy_overwrite_mapped);
  tcase_add_test(tc, test_npy_copied_layouts);
  tcase_add_test(tc, test_npy_header_variants);
  tcase_add_loop_test(tc, test_npy_bad_files, 0, (int)(sizeof bad / sizeof bad[0]));
  tcase_add_test(tc, test_npy_io_errors);
  tcase_add_test(tc, test_npy_bf16);
  return s;
}

KILN_TEST_MAIN(npy_suite)
