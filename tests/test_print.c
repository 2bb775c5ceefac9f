/* test_print.c: fe_format against PyTorch's repr, one row per case: the
 * values (listed, or start + i * step), dtype, shape, device, print options
 * and the exact string torch prints for the same tensor under the same
 * torch.set_printoptions (dtype names spelled kiln.*); then the options'
 * own API. */
#include "check_main.h"
#include "frontend/frontend.h"

#include <math.h>
#include <string.h>

typedef struct {
  kiln_dtype dt;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
  double vals[8];       /* the elements, when nvals > 0 */
  int nvals;
  double start, step;   /* otherwise element i is start + i * step */
  kiln_device dev;
  const kiln_printoptions *o;  /* NULL: PyTorch's defaults */
  const char *want;
} print_row;

/* kiln_printoptions in kiln_set_printoptions' order */
#define OPTS(precision, threshold, edgeitems, linewidth, sci) \
  .o = &(const kiln_printoptions){precision, threshold, edgeitems, linewidth, sci}
#define AUTO KILN_SCI_AUTO

static const print_row rows[] = {
    {KILN_I64, 0, {}, .vals = {7}, .nvals = 1,
     .want = "tensor(7)"},
    {KILN_F32, 0, {}, .vals = {7}, .nvals = 1,
     .want = "tensor(7.)"},
    {KILN_F32, 0, {}, .vals = {3.5}, .nvals = 1,
     .want = "tensor(3.5000)"},
    {KILN_I32, 0, {}, .vals = {7}, .nvals = 1,
     .want = "tensor(7, dtype=kiln.int32)"},
    {KILN_F32, 0, {}, .vals = {-0.25}, .nvals = 1,
     .want = "tensor(-0.2500)"},
    {KILN_I64, 1, {3}, .vals = {1, 2, 3}, .nvals = 3,
     .want = "tensor([1, 2, 3])"},
    {KILN_F32, 1, {3}, .vals = {1, 2, 3}, .nvals = 3,
     .want = "tensor([1., 2., 3.])"},
    {KILN_F32, 1, {2}, .vals = {0.1, 2.5}, .nvals = 2,
     .want = "tensor([0.1000, 2.5000])"},
    {KILN_F32, 1, {2}, .vals = {-1.5, 2.25}, .nvals = 2,
     .want = "tensor([-1.5000,  2.2500])"},
    {KILN_F32, 2, {2, 2}, .vals = {1, 2, 3, 4}, .nvals = 4,
     .want = "tensor([[1., 2.],\n"
     "        [3., 4.]])"},
    {KILN_F32, 3, {2, 2, 2}, .start = 0, .step = 1,
     .want = "tensor([[[0., 1.],\n"
     "         [2., 3.]],\n"
     "\n"
     "        [[4., 5.],\n"
     "         [6., 7.]]])"},
    {KILN_I64, 4, {2, 1, 2, 2}, .start = -4, .step = 1,
     .want = "tensor([[[[-4, -3],\n"
     "          [-2, -1]]],\n"
     "\n"
     "\n"
     "        [[[ 0,  1],\n"
     "          [ 2,  3]]]])"},
    {KILN_I32, 1, {2}, .vals = {1, 2}, .nvals = 2,
     .want = "tensor([1, 2], dtype=kiln.int32)"},
    {KILN_F32, 1, {2}, .vals = {10000000000.0, 1}, .nvals = 2,
     .want = "tensor([1.0000e+10, 1.0000e+00])"},
    {KILN_F32, 1, {2}, .vals = {1e-05, 1}, .nvals = 2,
     .want = "tensor([1.0000e-05, 1.0000e+00])"},
    {KILN_F32, 1, {3}, .vals = {0.5, 2000, 3}, .nvals = 3,
     .want = "tensor([5.0000e-01, 2.0000e+03, 3.0000e+00])"},
    {KILN_F32, 1, {2}, .vals = {200000000.0, 1}, .nvals = 2,
     .want = "tensor([2.0000e+08, 1.0000e+00])"},
    {KILN_F32, 1, {4}, .vals = {NAN, INFINITY, -INFINITY, 1}, .nvals = 4,
     .want = "tensor([nan, inf, -inf, 1.])"},
    {KILN_F32, 1, {3}, .vals = {NAN, 0.5, -INFINITY}, .nvals = 3,
     .want = "tensor([   nan, 0.5000,   -inf])"},
    {KILN_F32, 1, {2}, .vals = {0, 0}, .nvals = 2,
     .want = "tensor([0., 0.])"},
    {KILN_F32, 1, {2}, .vals = {-0.0, 1}, .nvals = 2,
     .want = "tensor([-0., 1.])"},
    {KILN_F32, 1, {1}, .vals = {NAN}, .nvals = 1,
     .want = "tensor([nan])"},
    {KILN_F64, 1, {2}, .vals = {1e-05, NAN}, .nvals = 2,
     .want = "tensor([1.0000e-05,        nan], dtype=kiln.float64)"},
    {KILN_BOOL, 1, {2}, .vals = {1, 0}, .nvals = 2,
     .want = "tensor([ True, False])"},
    {KILN_BOOL, 1, {2}, .vals = {1, 1}, .nvals = 2,
     .want = "tensor([True, True])"},
    {KILN_BOOL, 0, {}, .vals = {0}, .nvals = 1,
     .want = "tensor(False)"},
    {KILN_F32, 1, {0}, .nvals = 0,
     .want = "tensor([])"},
    {KILN_F32, 2, {0, 3}, .nvals = 0,
     .want = "tensor([], size=(0, 3))"},
    {KILN_I64, 1, {0}, .nvals = 0,
     .want = "tensor([], dtype=kiln.int64)"},
    {KILN_BOOL, 3, {2, 0, 3}, .nvals = 0,
     .want = "tensor([], size=(2, 0, 3), dtype=kiln.bool)"},
    {KILN_F64, 1, {1}, .vals = {1.5}, .nvals = 1,
     .want = "tensor([1.5000], dtype=kiln.float64)"},
    {KILN_F16, 1, {2}, .vals = {1.5, 0.5}, .nvals = 2,
     .want = "tensor([1.5000, 0.5000], dtype=kiln.float16)"},
    {KILN_F16, 1, {3}, .vals = {65504, -2, 0.099975586}, .nvals = 3,
     .want = "tensor([ 6.5504e+04, -2.0000e+00,  9.9976e-02], dtype=kiln.float16)"},
    {KILN_BF16, 1, {2}, .vals = {2, 4}, .nvals = 2,
     .want = "tensor([2., 4.], dtype=kiln.bfloat16)"},
    {KILN_U8, 1, {2}, .vals = {255, 0}, .nvals = 2,
     .want = "tensor([255,   0], dtype=kiln.uint8)"},
    {KILN_I8, 1, {2}, .vals = {-128, 5}, .nvals = 2,
     .want = "tensor([-128,    5], dtype=kiln.int8)"},
    {KILN_I16, 2, {2, 2}, .vals = {1, -300, 20, 4}, .nvals = 4,
     .want = "tensor([[   1, -300],\n"
     "        [  20,    4]], dtype=kiln.int16)"},
    {KILN_F32, 1, {2}, .vals = {1, 1}, .nvals = 2, .dev = {KILN_CUDA, 0},
     .want = "tensor([1., 1.], device='cuda:0')"},
    {KILN_I32, 1, {2}, .vals = {1, 2}, .nvals = 2, .dev = {KILN_CUDA, 1},
     .want = "tensor([1, 2], device='cuda:1', dtype=kiln.int32)"},
    {KILN_F32, 1, {0}, .nvals = 0, .dev = {KILN_CUDA, 0},
     .want = "tensor([], device='cuda:0')"},
    {KILN_I64, 1, {1001}, .start = 0, .step = 1,
     .want = "tensor([   0,    1,    2,  ...,  998,  999, 1000])"},
    {KILN_F32, 2, {40, 50}, .start = 0, .step = 1,
     .want = "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.7000e+01, 4.8000e+01,\n"
     "         4.9000e+01],\n"
     "        [5.0000e+01, 5.1000e+01, 5.2000e+01,  ..., 9.7000e+01, 9.8000e+01,\n"
     "         9.9000e+01],\n"
     "        [1.0000e+02, 1.0100e+02, 1.0200e+02,  ..., 1.4700e+02, 1.4800e+02,\n"
     "         1.4900e+02],\n"
     "        ...,\n"
     "        [1.8500e+03, 1.8510e+03, 1.8520e+03,  ..., 1.8970e+03, 1.8980e+03,\n"
     "         1.8990e+03],\n"
     "        [1.9000e+03, 1.9010e+03, 1.9020e+03,  ..., 1.9470e+03, 1.9480e+03,\n"
     "         1.9490e+03],\n"
     "        [1.9500e+03, 1.9510e+03, 1.9520e+03,  ..., 1.9970e+03, 1.9980e+03,\n"
     "         1.9990e+03]])"},
    {KILN_F32, 3, {10, 10, 11}, .start = 100, .step = 1,
     .want = "tensor([[[ 100.,  101.,  102.,  ...,  108.,  109.,  110.],\n"
     "         [ 111.,  112.,  113.,  ...,  119.,  120.,  121.],\n"
     "         [ 122.,  123.,  124.,  ...,  130.,  131.,  132.],\n"
     "         ...,\n"
     "         [ 177.,  178.,  179.,  ...,  185.,  186.,  187.],\n"
     "         [ 188.,  189.,  190.,  ...,  196.,  197.,  198.],\n"
     "         [ 199.,  200.,  201.,  ...,  207.,  208.,  209.]],\n"
     "\n"
     "        [[ 210.,  211.,  212.,  ...,  218.,  219.,  220.],\n"
     "         [ 221.,  222.,  223.,  ...,  229.,  230.,  231.],\n"
     "         [ 232.,  233.,  234.,  ...,  240.,  241.,  242.],\n"
     "         ...,\n"
     "         [ 287.,  288.,  289.,  ...,  295.,  296.,  297.],\n"
     "         [ 298.,  299.,  300.,  ...,  306.,  307.,  308.],\n"
     "         [ 309.,  310.,  311.,  ...,  317.,  318.,  319.]],\n"
     "\n"
     "        [[ 320.,  321.,  322.,  ...,  328.,  329.,  330.],\n"
     "         [ 331.,  332.,  333.,  ...,  339.,  340.,  341.],\n"
     "         [ 342.,  343.,  344.,  ...,  350.,  351.,  352.],\n"
     "         ...,\n"
     "         [ 397.,  398.,  399.,  ...,  405.,  406.,  407.],\n"
     "         [ 408.,  409.,  410.,  ...,  416.,  417.,  418.],\n"
     "         [ 419.,  420.,  421.,  ...,  427.,  428.,  429.]],\n"
     "\n"
     "        ...,\n"
     "\n"
     "        [[ 870.,  871.,  872.,  ...,  878.,  879.,  880.],\n"
     "         [ 881.,  882.,  883.,  ...,  889.,  890.,  891.],\n"
     "         [ 892.,  893.,  894.,  ...,  900.,  901.,  902.],\n"
     "         ...,\n"
     "         [ 947.,  948.,  949.,  ...,  955.,  956.,  957.],\n"
     "         [ 958.,  959.,  960.,  ...,  966.,  967.,  968.],\n"
     "         [ 969.,  970.,  971.,  ...,  977.,  978.,  979.]],\n"
     "\n"
     "        [[ 980.,  981.,  982.,  ...,  988.,  989.,  990.],\n"
     "         [ 991.,  992.,  993.,  ...,  999., 1000., 1001.],\n"
     "         [1002., 1003., 1004.,  ..., 1010., 1011., 1012.],\n"
     "         ...,\n"
     "         [1057., 1058., 1059.,  ..., 1065., 1066., 1067.],\n"
     "         [1068., 1069., 1070.,  ..., 1076., 1077., 1078.],\n"
     "         [1079., 1080., 1081.,  ..., 1087., 1088., 1089.]],\n"
     "\n"
     "        [[1090., 1091., 1092.,  ..., 1098., 1099., 1100.],\n"
     "         [1101., 1102., 1103.,  ..., 1109., 1110., 1111.],\n"
     "         [1112., 1113., 1114.,  ..., 1120., 1121., 1122.],\n"
     "         ...,\n"
     "         [1167., 1168., 1169.,  ..., 1175., 1176., 1177.],\n"
     "         [1178., 1179., 1180.,  ..., 1186., 1187., 1188.],\n"
     "         [1189., 1190., 1191.,  ..., 1197., 1198., 1199.]]])"},
    {KILN_I64, 1, {30}, .start = 0, .step = 1,
     .want = "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
     "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])"},
    {KILN_F32, 1, {25}, .start = 0, .step = 0.125,
     .want = "tensor([0.0000, 0.1250, 0.2500, 0.3750, 0.5000, 0.6250, 0.7500, 0.8750, 1.0000,\n"
     "        1.1250, 1.2500, 1.3750, 1.5000, 1.6250, 1.7500, 1.8750, 2.0000, 2.1250,\n"
     "        2.2500, 2.3750, 2.5000, 2.6250, 2.7500, 2.8750, 3.0000])"},
    {KILN_I32, 1, {18}, .start = 0, .step = 1,
     .want = "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17],\n"
     "       dtype=kiln.int32)"},
    {KILN_I32, 1, {17}, .start = 0, .step = 1,
     .want = "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16],\n"
     "       dtype=kiln.int32)"},
    {KILN_F32, 2, {3, 12}, .start = 0, .step = 0.001,
     .want = "tensor([[0.0000, 0.0010, 0.0020, 0.0030, 0.0040, 0.0050, 0.0060, 0.0070, 0.0080,\n"
     "         0.0090, 0.0100, 0.0110],\n"
     "        [0.0120, 0.0130, 0.0140, 0.0150, 0.0160, 0.0170, 0.0180, 0.0190, 0.0200,\n"
     "         0.0210, 0.0220, 0.0230],\n"
     "        [0.0240, 0.0250, 0.0260, 0.0270, 0.0280, 0.0290, 0.0300, 0.0310, 0.0320,\n"
     "         0.0330, 0.0340, 0.0350]])"},
    {KILN_F64, 2, {2, 30}, .start = -30, .step = 1.5,
     .want = "tensor([[-30.0000, -28.5000, -27.0000, -25.5000, -24.0000, -22.5000, -21.0000,\n"
     "         -19.5000, -18.0000, -16.5000, -15.0000, -13.5000, -12.0000, -10.5000,\n"
     "          -9.0000,  -7.5000,  -6.0000,  -4.5000,  -3.0000,  -1.5000,   0.0000,\n"
     "           1.5000,   3.0000,   4.5000,   6.0000,   7.5000,   9.0000,  10.5000,\n"
     "          12.0000,  13.5000],\n"
     "        [ 15.0000,  16.5000,  18.0000,  19.5000,  21.0000,  22.5000,  24.0000,\n"
     "          25.5000,  27.0000,  28.5000,  30.0000,  31.5000,  33.0000,  34.5000,\n"
     "          36.0000,  37.5000,  39.0000,  40.5000,  42.0000,  43.5000,  45.0000,\n"
     "          46.5000,  48.0000,  49.5000,  51.0000,  52.5000,  54.0000,  55.5000,\n"
     "          57.0000,  58.5000]], dtype=kiln.float64)"},
    {KILN_F32, 1, {7}, .start = 1, .step = 1,
     .want = "tensor([1., 2., 3., 4., 5., 6., 7.])"},
    {KILN_I64, 2, {2000, 1}, .start = 0, .step = 1,
     .want = "tensor([[   0],\n"
     "        [   1],\n"
     "        [   2],\n"
     "        ...,\n"
     "        [1997],\n"
     "        [1998],\n"
     "        [1999]])"},
    /* ---- torch.set_printoptions ---- */
    {KILN_F32, 1, {2}, .vals = {0.1, 2.5}, .nvals = 2, OPTS(2, 1000, 3, 80, AUTO),
     .want = "tensor([0.10, 2.50])"},
    {KILN_F32, 1, {2}, .vals = {1.23456, -2.5}, .nvals = 2, OPTS(2, 1000, 3, 80, AUTO),
     .want = "tensor([ 1.23, -2.50])"},
    /* precision 0: Python's '{:.0f}' rounds half to even */
    {KILN_F32, 1, {2}, .vals = {1.5, 2.25}, .nvals = 2, OPTS(0, 1000, 3, 80, AUTO),
     .want = "tensor([2, 2])"},
    {KILN_F32, 1, {2}, .vals = {1e-05, 1}, .nvals = 2, OPTS(6, 1000, 3, 80, AUTO),
     .want = "tensor([1.000000e-05, 1.000000e+00])"},
    /* a forced mode keeps the widths of the automatic one: no padding here... */
    {KILN_F32, 1, {2}, .vals = {1.5, -20.25}, .nvals = 2, OPTS(4, 1000, 3, 80, KILN_SCI_ON),
     .want = "tensor([1.5000e+00, -2.0250e+01])"},
    {KILN_F32, 1, {2}, .vals = {1.5, 300}, .nvals = 2, OPTS(2, 1000, 3, 80, KILN_SCI_ON),
     .want = "tensor([1.50e+00, 3.00e+02])"},
    {KILN_F32, 0, {}, .vals = {3.5}, .nvals = 1, OPTS(4, 1000, 3, 80, KILN_SCI_ON),
     .want = "tensor(3.5000e+00)"},
    /* ...and padding to the scientific width there */
    {KILN_F32, 1, {2}, .vals = {1e-05, 1}, .nvals = 2, OPTS(4, 1000, 3, 80, KILN_SCI_OFF),
     .want = "tensor([    0.0000,     1.0000])"},
    {KILN_F32, 1, {2}, .vals = {1e10, 1}, .nvals = 2, OPTS(4, 1000, 3, 80, KILN_SCI_OFF),
     .want = "tensor([10000000000.,         1.])"},
    /* no nonzero finite value: PyTorch's formatter returns before applying the mode */
    {KILN_F32, 1, {2}, .vals = {0, 0}, .nvals = 2, OPTS(4, 1000, 3, 80, KILN_SCI_ON),
     .want = "tensor([0., 0.])"},
    {KILN_I64, 1, {2}, .vals = {1, 2}, .nvals = 2, OPTS(4, 1000, 3, 80, KILN_SCI_ON),
     .want = "tensor([1, 2])"},
    {KILN_I64, 1, {10}, .start = 0, .step = 1, OPTS(4, 5, 3, 80, AUTO),
     .want = "tensor([0, 1, 2,  ..., 7, 8, 9])"},
    {KILN_I64, 1, {10}, .start = 0, .step = 1, OPTS(4, 5, 1, 80, AUTO),
     .want = "tensor([0,  ..., 9])"},
    {KILN_I64, 1, {10}, .start = 0, .step = 1, OPTS(4, 10, 1, 80, AUTO),
     .want = "tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])"},
    {KILN_I64, 1, {1001}, .start = 0, .step = 1, OPTS(4, 1000, 2, 80, AUTO),
     .want = "tensor([   0,    1,  ...,  999, 1000])"},
    {KILN_I64, 2, {4, 4}, .start = 0, .step = 1, OPTS(4, 10, 1, 80, AUTO),
     .want = "tensor([[ 0,  ...,  3],\n"
     "        ...,\n"
     "        [12,  ..., 15]])"},
    /* edgeitems 0: only the ellipsis */
    {KILN_I64, 1, {10}, .start = 0, .step = 1, OPTS(4, 5, 0, 80, AUTO),
     .want = "tensor([...])"},
    {KILN_I32, 2, {3, 3}, .start = 0, .step = 1, OPTS(4, 2, 0, 80, AUTO),
     .want = "tensor([...], dtype=kiln.int32)"},
    {KILN_I64, 1, {10}, .start = 0, .step = 1, OPTS(4, 1000, 3, 20, AUTO),
     .want = "tensor([0, 1, 2, 3,\n"
     "        4, 5, 6, 7,\n"
     "        8, 9])"},
    {KILN_I32, 1, {4}, .start = 0, .step = 1, OPTS(4, 1000, 3, 20, AUTO),
     .want = "tensor([0, 1, 2, 3],\n"
     "       dtype=kiln.int32)"},
    {KILN_F32, 2, {1, 6}, .vals = {1.5, 2, 3, 4, 5, 6}, .nvals = 6, OPTS(4, 1000, 3, 30, AUTO),
     .want = "tensor([[1.5000, 2.0000,\n"
     "         3.0000, 4.0000,\n"
     "         5.0000, 6.0000]])"},
    /* sci_mode off with huge values and a long precision still fits an element */
    {KILN_F64, 1, {2}, .vals = {1e300, 1.5}, .nvals = 2, OPTS(100, 1000, 3, 80, KILN_SCI_OFF)},
};

/* f16 bits of a normal or zero value, rounded to nearest (enough for the
 * table's values). */
static uint16_t f32_to_f16(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (f == 0) return sign;
  int e;
  float m = frexpf(fabsf(f), &e);  /* f = m * 2^e, m in [0.5, 1) */
  uint32_t man = (uint32_t)lrintf(ldexpf(m, 11));  /* 11 significant bits */
  return (uint16_t)(sign | ((uint32_t)(e + 14) << 10 | (man & 0x3ff)));
}

static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

/* Stores v as element i of a buffer of dtype dt. */
static void store(void *data, kiln_dtype dt, int64_t i, double v) {
  switch (dt) {
  case KILN_BOOL: ((uint8_t *)data)[i] = v != 0; break;
  case KILN_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
  case KILN_I8: ((int8_t *)data)[i] = (int8_t)v; break;
  case KILN_I16: ((int16_t *)data)[i] = (int16_t)v; break;
  case KILN_I32: ((int32_t *)data)[i] = (int32_t)v; break;
  case KILN_I64: ((int64_t *)data)[i] = (int64_t)v; break;
  case KILN_F16: ((uint16_t *)data)[i] = f32_to_f16((float)v); break;
  case KILN_BF16: ((uint16_t *)data)[i] = f32_to_bf16((float)v); break;
  case KILN_F32: ((float *)data)[i] = (float)v; break;
  default: ((double *)data)[i] = v; break;
  }
}

static void set_options(const kiln_printoptions *o) {
  static const kiln_printoptions pytorch = {4, 1000, 3, 80, KILN_SCI_AUTO};
  if (!o) o = &pytorch;
  ck_assert_int_eq(kiln_set_printoptions(o->precision, o->threshold, o->edgeitems, o->linewidth, o->sci_mode),
                   KILN_OK);
}

START_TEST(test_print_row) {
  const print_row *r = &rows[_i];
  set_options(r->o);
  int64_t n = ir_numel(r->ndim, r->shape);
  void *data = calloc((size_t)(n ? n : 1), 8);
  for (int64_t i = 0; i < n; i++) store(data, r->dt, i, r->nvals ? r->vals[i] : r->start + (double)i * r->step);
  char *got = fe_format(data, r->dt, r->ndim, r->shape, r->dev);
  if (r->want) ck_assert_msg(strcmp(got, r->want) == 0, "row %d:\nwant:\n%s\ngot:\n%s", _i, r->want, got);
  else  /* "tensor([" 1e300 as 301 digits "." 100 digits ",\n" 8 spaces, 1.5 padded to the
         * width of "%.100e" (107) "],\n" 7 spaces "dtype=kiln.float64)": one per line */
    ck_assert_uint_eq(strlen(got), 8 + 402 + 2 + 8 + 107 + 3 + 7 + 19);
  set_options(NULL);
  free(got);
  free(data);
}
END_TEST

/* f16 edge encodings: subnormal, infinity, NaN, negative zero. */
START_TEST(test_print_f16_specials) {
  const uint16_t h[] = {0x0001, 0x7c00, 0xfc00, 0x7e00, 0x8000};
  char *got = fe_format(h, KILN_F16, 1, (const int64_t[]){5}, kiln_cpu_device());
  ck_assert_str_eq(got, "tensor([5.9605e-08,        inf,       -inf,        nan, -0.0000e+00],\n"
                        "       dtype=kiln.float16)");
  free(got);
}
END_TEST

/* The options' API: defaults, None-like negatives, refusals, and the
 * public printers following them. */
START_TEST(test_printoptions) {
  kiln_printoptions o = kiln_get_printoptions();
  ck_assert_int_eq(o.precision, 4);
  ck_assert_int_eq(o.threshold, 1000);
  ck_assert_int_eq(o.edgeitems, 3);
  ck_assert_int_eq(o.linewidth, 80);
  ck_assert_int_eq(o.sci_mode, KILN_SCI_AUTO);
  ck_assert_int_eq(kiln_set_printoptions(2, -1, -1, 40, KILN_SCI_ON), KILN_OK);
  o = kiln_get_printoptions();
  ck_assert(o.precision == 2 && o.threshold == 1000 && o.edgeitems == 3 && o.linewidth == 40 &&
            o.sci_mode == KILN_SCI_ON);
  int line = __LINE__ + 1;
  ck_assert_int_eq(kiln_set_printoptions(101, 5, 5, 5, KILN_SCI_OFF), KILN_ERR_ARG);
  char want[128];
  snprintf(want, sizeof want, "test_print.c:%d: set_printoptions: precision 101 is more than 100", line);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), want));
  ck_assert_int_eq(kiln_set_printoptions(-1, -1, -1, -1, (kiln_sci_mode)7), KILN_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "set_printoptions: sci_mode 7 is not KILN_SCI_AUTO"));
  ck_assert_int_eq(kiln_get_printoptions().linewidth, 40);   /* refusals change nothing */
  kiln_scope_begin();
  char *s = kiln_to_string(kiln_from_data((const float[]){1.5f, 300}, KILN_F32, KILN_SHAPE(2)));
  ck_assert_str_eq(s, "tensor([1.50e+00, 3.00e+02])");
  free(s);
  ck_assert_int_eq(kiln_set_printoptions(-1, -1, -1, -1, KILN_SCI_AUTO), KILN_OK);
  s = kiln_to_string(kiln_from_data((const float[]){1.5f, 300}, KILN_F32, KILN_SHAPE(2)));
  ck_assert_str_eq(s, "tensor([  1.50, 300.00])");
  free(s);
  kiln_scope_end();
  set_options(NULL);
}
END_TEST

static Suite *print_suite(void) {
  Suite *s = suite_create("print");
  TCase *tc = tcase_create("pytorch");
  tcase_add_loop_test(tc, test_print_row, 0, (int)(sizeof rows / sizeof rows[0]));
  tcase_add_test(tc, test_print_f16_specials);
  tcase_add_test(tc, test_printoptions);
  suite_add_tcase(s, tc);
  return s;
}

KILN_TEST_MAIN(print_suite)
