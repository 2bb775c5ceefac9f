/* prelude.cuh: the device functions every generated kiln kernel uses, put in
 * front of the kernels of each NVRTC translation unit (CMake embeds this file
 * as a string, codegen_cuda/prelude.c). The f32 transcendentals are ports of
 * codegen_cpu/math.c: same constants (double literals rounded to float, as
 * LLVMConstReal rounds them), same operation order, fmaf where the CPU uses
 * llvm.fmuladd (fused on FMA hardware); kernels are compiled with
 * --fmad=false so nothing else is contracted and CPU and GPU agree. f64 uses
 * CUDA's libdevice. The same text compiles as host C++ under
 * tests/cuda_emu/shim.h (the emulation harness). */
#include <cuda_fp16.h>

#define KD __device__ __forceinline__
#define KILN_INF_F __int_as_float(0x7f800000)
#define KILN_NAN_F __int_as_float(0x7fc00000)
#define KILN_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define KILN_NAN_D __longlong_as_double(0x7ff8000000000000LL)
#define KILN_LOG2E 0x1.71547652b82fep+0
#define KILN_SQRT1_2 0x1.6a09e667f3bcdp-1
#define KILN_SQRT2 0x1.6a09e667f3bcdp+0
#define KILN_LN2 0x1.62e42fefa39efp-1
#define KILN_PI_2 0x1.921fb54442d18p+0

/* ---- storage of the narrow floats: f16 by the hardware conversion (round
 * to nearest even), bf16 by the CPU back end's integer rounding (a nan
 * keeps its sign and top payload and is made quiet) ---------------------- */
KD float kiln_h2f(unsigned short h) { return __half2float(__ushort_as_half(h)); }
KD unsigned short kiln_f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
KD float kiln_bf2f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
KD unsigned short kiln_f2bf(float f) {
  unsigned bits = __float_as_uint(f), hi = bits >> 16;
  unsigned r = (bits + ((hi & 1u) + 0x7fffu)) >> 16;
  return (unsigned short)(f != f ? (hi | 0x40u) : r);
}

/* ---- casts and integer ops ---------------------------------------------- */
/* float -> integer saturates, nan -> 0 (llvm.fptosi.sat / fptoui.sat) */
template <class T> KD T kiln_sat(double x, T lo, T hi) {
  return x != x ? (T)0 : x <= (double)lo ? lo : x >= (double)hi ? hi : (T)x;
}
template <class T> KD T kiln_imax(T a, T b) { return a > b ? a : b; }
template <class T> KD T kiln_imin(T a, T b) { return a < b ? a : b; }
/* Square and multiply over every bit of b, wrapping in the unsigned W. */
template <class T, class W> KD T kiln_upow(T a, T b) {
  T r = 1, base = a;
  for (int i = 0; i < (int)sizeof(T) * 8; i++) {
    if (((W)b >> i) & 1u) r = (T)((W)r * (W)base);
    base = (T)((W)base * (W)base);
  }
  return r;
}
/* b < 0 gives 0 except a = 1 (1) and a = -1 (+-1). */
template <class T, class W> KD T kiln_spow(T a, T b) {
  if (b >= 0) return kiln_upow<T, W>(a, b);
  return a == 1 ? (T)1 : a == -1 ? ((b & 1) ? (T)-1 : (T)1) : (T)0;
}

/* Integer division that cannot trap (codegen_cpu's int_divmod): b == -1
 * negates, wrapping, and b == 0 is a kernel check's failure whose result
 * is only a stand-in. */
template <class T, class W> KD T kiln_sdiv(T a, T b) {
  return b == 0 ? (T)0 : b == (T)-1 ? (T)(0 - (W)a) : (T)(a / b);
}
template <class T> KD T kiln_smod(T a, T b) { return b == 0 || b == (T)-1 ? (T)0 : (T)(a % b); }
template <class T> KD T kiln_udiv(T a, T b) { return b == 0 ? (T)0 : (T)(a / b); }
template <class T> KD T kiln_umod(T a, T b) { return b == 0 ? (T)0 : (T)(a % b); }
/* floor rounding: one less / plus b when the remainder's sign is not b's */
template <class T, class W> KD T kiln_sfloordiv(T a, T b) {
  T q = kiln_sdiv<T, W>(a, b), r = kiln_smod(a, b);
  return r != 0 && (r < 0) != (b < 0) ? (T)(q - 1) : q;
}
template <class T> KD T kiln_sremainder(T a, T b) {
  T r = kiln_smod(a, b);
  return r != 0 && (r < 0) != (b < 0) ? (T)(r + b) : r;
}
template <class T> KD T kiln_fremainder(T a, T b) {
  T m = fmod(a, b);
  return m != 0 && (b < 0) != (m < 0) ? m + b : m;
}
/* PyTorch's div_floor for floats (codegen_cpu's float_floordiv) */
template <class T> KD T kiln_floordiv(T a, T b) {
  if (b == 0) return a / b;
  T mod = fmod(a, b), div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return copysign((T)0, a / b);
  T fl = floor(div);
  return div - fl > (T)0.5 ? fl + 1 : fl;
}
/* PyTorch's shifts: an amount outside 0..bits-1 shifts everything out
 * (the sign fills a signed >>). */
template <class T> KD bool kiln_shift_out(T b) { return (unsigned long long)(long long)b >= sizeof(T) * 8; }
template <class T, class W> KD T kiln_shl(T a, T b) { return kiln_shift_out(b) ? (T)0 : (T)((W)a << b); }
template <class T> KD T kiln_sshr(T a, T b) { return (T)(a >> (kiln_shift_out(b) ? (T)(sizeof(T) * 8 - 1) : b)); }
template <class T> KD T kiln_ushr(T a, T b) { return kiln_shift_out(b) ? (T)0 : (T)(a >> b); }

/* llvm.maximum / llvm.minimum: nan if either is nan, -0 < +0. */
KD float kiln_maxf(float a, float b) {
  return a != a ? a : b != b ? b : a == b ? (__float_as_int(a) < 0 ? b : a) : a > b ? a : b;
}
KD float kiln_minf(float a, float b) {
  return a != a ? a : b != b ? b : a == b ? (__float_as_int(a) < 0 ? a : b) : a < b ? a : b;
}
KD double kiln_max(double a, double b) {
  return a != a ? a : b != b ? b : a == b ? (__double_as_longlong(a) < 0 ? b : a) : a > b ? a : b;
}
KD double kiln_min(double a, double b) {
  return a != a ? a : b != b ? b : a == b ? (__double_as_longlong(a) < 0 ? a : b) : a < b ? a : b;
}

/* ---- Philox4x32-10 (ir/philox.h), word w of the block at (key, ctr) ------ */
KD unsigned kiln_philox(unsigned long long ctr, unsigned long long key, int w) {
  unsigned c0 = (unsigned)ctr, c1 = (unsigned)(ctr >> 32), c2 = 0, c3 = 0;
  unsigned k0 = (unsigned)key, k1 = (unsigned)(key >> 32);
  for (int r = 0; r < 10; r++) {
    unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned)p1;
    c3 = (unsigned)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3;
}

/* ---- helpers of the ports ------------------------------------------------ */
KD float kiln_fma(float a, float b, float c) { return fmaf(a, b, c); }
KD double kiln_fma(double a, double b, double c) { return fma(a, b, c); }
/* Horner: c[0] x^(N-1) + ... + c[N-1], each coefficient rounded to T. */
template <class T, int N> KD T kiln_poly(T x, const double (&c)[N]) {
  T r = (T)c[0];
  for (int i = 1; i < N; i++) r = kiln_fma(r, x, (T)c[i]);
  return r;
}
KD float kiln_clampf(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }  /* nan -> lo */
/* y 2^n in two steps so that 2^n itself never overflows or goes subnormal. */
KD float kiln_scale2f(float y, int n) {
  int n1 = n >> 1, n2 = n - n1;
  y = y * __int_as_float((n1 + 127) << 23);
  return y * __int_as_float((n2 + 127) << 23);
}
KD double kiln_scale2(double y, long long n) {
  long long n1 = n >> 1, n2 = n - n1;
  y = y * __longlong_as_double((n1 + 1023) << 52);
  return y * __longlong_as_double((n2 + 1023) << 52);
}

/* ---- f32 exp: Cody-Waite reduction, Cephes' degree-6 polynomial --------- */
KD float kiln_exp_parts(float x, int *n) {
  const double P[] = {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                      4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1};
  float xc = kiln_clampf(x, -120.0f, 89.0f);
  float nf = rintf(xc * (float)KILN_LOG2E);
  float r = fmaf(nf, (float)-0.693359375, xc);
  r = fmaf(nf, (float)2.12194440e-4, r);
  *n = (int)nf;
  return fmaf(kiln_poly(r, P), r * r, r) + 1.0f;
}
KD float kiln_expf(float x) {
  int n;
  float y = kiln_exp_parts(x, &n);
  return x != x ? x : kiln_scale2f(y, n);
}

/* ---- f32 log: Cephes' polynomial on m in [sqrt(1/2), sqrt 2) ------------ */
KD float kiln_logf(float x) {
  const double P[] = {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1,
                      -1.2420140846E-1, 1.4249322787E-1, -1.6668057665E-1,
                      2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1};
  bool tiny = x < 0x1p-126f;
  unsigned bits = __float_as_uint(tiny ? x * 0x1p23f : x);
  int e = (int)(bits >> 23) - (tiny ? 126 + 23 : 126);
  float f = __uint_as_float((bits & 0x007fffffu) | 0x3f000000u);  /* [0.5, 1) */
  bool low = f < (float)KILN_SQRT1_2;
  e -= low;
  f = (low ? f + f : f) - 1.0f;
  float ef = (float)e, z = f * f;
  float y = (f * z) * kiln_poly(f, P);
  y = fmaf(ef, (float)-2.12194440e-4, y);
  y = fmaf(z, -0.5f, y);
  float r = fmaf(ef, (float)0.693359375, f + y);
  r = x == KILN_INF_F ? x : r;
  r = x == 0.0f ? -KILN_INF_F : r;
  return (x < 0.0f || x != x) ? KILN_NAN_F : r;
}

/* ---- f64 helpers of the f32 functions ----------------------------------- */
KD double kiln_exp2d(double y) {  /* 2^y by Taylor to degree 10, as math.c */
  double c[11], t = 1;
  for (int k = 0; k < 11; k++) {
    c[10 - k] = t;
    t *= KILN_LN2 / (k + 1);
  }
  double yc = fmin(fmax(y, -1100.0), 1100.0);
  double n = rint(yc);
  double p = kiln_scale2(kiln_poly(yc - n, c), (long long)n);
  return y != y ? y : p;
}
KD double kiln_log2d(double x) {  /* x >= 0 a widened f32: 2 atanh series */
  double c[9];
  for (int k = 0; k < 9; k++) c[8 - k] = 1.0 / (2 * k + 1);
  unsigned long long bits = (unsigned long long)__double_as_longlong(x);
  long long e = (long long)(bits >> 52) - 1023;
  double f = __longlong_as_double((long long)((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull));
  bool big = f > KILN_SQRT2;
  f = big ? f * 0.5 : f;
  e += big;
  double s = (f - 1.0) / (f + 1.0);
  double lnm = (s * 2.0) * kiln_poly(s * s, c);
  double r = fma(lnm, KILN_LOG2E, (double)e);
  r = x == KILN_INF_D ? x : r;
  r = x == 0.0 ? -KILN_INF_D : r;
  return (x < 0.0 || x != x) ? KILN_NAN_D : r;
}

/* ---- f32 sin/cos: exact Payne-Hanek reduction in f64 -------------------- */
KD double kiln_mod4(double t) { return fma(rint(t * 0.25), -4.0, t); }
KD void kiln_quadrant(float x, int quarter, int *qi, double *sp, double *cp) {
  const double S[] = {-1.9515295891E-4, 8.3321608736E-3, -1.6666654611E-1};
  const double C[] = {2.443315711809948E-5, -1.388731625493765E-3, 4.166664568298827E-2};
  const double piece[9] = {0x1.45f306p-1, 0x1.b9391p-26, 0x1.529fcp-52, 0x1.3abe88p-75,
                           0x1.ea69bap-97, 0x1.81b6c4p-121, 0x1.2b3278p-145,
                           0x1.0e4104p-170, 0x1.fca2c6p-193};  /* 2/pi in 24-bit pieces */
  double xd = x, s = 0, comp = 0;
  for (int i = 8; i >= 0; i--) {
    double t = kiln_mod4(xd * piece[i]);
    double sum = s + t, bb = sum - s;
    comp = comp + ((s - (sum - bb)) + (t - bb));
    s = sum;
  }
  double q = rint(s);
  double r = ((s - q) + comp) * KILN_PI_2;
  *qi = kiln_sat<int>(q, -2147483647 - 1, 2147483647) + quarter;
  double z = r * r;
  *sp = fma(r * z, kiln_poly(z, S), r);
  *cp = fma(z * z, kiln_poly(z, C), z * -0.5) + 1.0;
}
KD float kiln_sincosf_core(float x, int quarter) {
  int qi;
  double sp, cp;
  kiln_quadrant(x, quarter, &qi, &sp, &cp);
  double v = (qi & 1) ? cp : sp;
  return (float)(((qi >> 1) & 1) ? -v : v);
}
KD float kiln_sinf(float x) { return fabsf(x) < 0x1p-12f ? x : kiln_sincosf_core(x, 0); }
KD float kiln_cosf(float x) { return kiln_sincosf_core(x, 1); }

/* ---- f32 tanh ------------------------------------------------------------ */
KD float kiln_tanhf(float x) {
  const double P[] = {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                      1.33314422036E-1, -3.33332819422E-1};
  float ax = fabsf(x), z = x * x;
  float small = fmaf(x * z, kiln_poly(z, P), x);
  float big = copysignf(1.0f - 2.0f / (kiln_expf(ax + ax) + 1.0f), x);
  return ax < 0.625f ? small : big;
}

/* ---- sigmoid and silu: e^-|x| = y 2^n, the power of two applied last ---- */
KD float kiln_logisticf(float x, bool times_x) {
  int n;
  float y = kiln_exp_parts(-fabsf(x), &n);
  bool neg = x < 0.0f;
  float num = neg ? y : 1.0f;
  if (times_x) num = x * num;
  float r = num / (1.0f + kiln_scale2f(y, n));
  r = x != x ? x : (neg ? kiln_scale2f(r, n) : r);
  if (!times_x) return r;
  r = x < -120.0f ? -0.0f : r;
  return x == -KILN_INF_F ? KILN_NAN_F : r;
}
KD float kiln_sigmoidf(float x) { return kiln_logisticf(x, false); }
KD float kiln_siluf(float x) { return kiln_logisticf(x, true); }
KD double kiln_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
KD double kiln_silu(double x) { return x / (1.0 + exp(-x)); }

/* ---- gelu = x/2 erfc(-x/sqrt 2), f32 through a Chebyshev erfc in f64 ----- */
KD double kiln_gelu_erfc(double u) {
  const double P[] = {0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
                      -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223};
  double t = 2.0 / (2.0 + u);
  double arg = kiln_poly(t, P) - u * u;
  return t * kiln_exp2d(arg * KILN_LOG2E);
}
KD double kiln_gelu_from(double xd, double ec) {
  return (xd * 0.5) * (xd >= 0.0 ? 2.0 - ec : ec);
}
KD float kiln_geluf(float x) {
  double xd = x;
  return (float)kiln_gelu_from(xd, kiln_gelu_erfc(fabs(xd) * KILN_SQRT1_2));
}
KD double kiln_gelu(double x) { return kiln_gelu_from(x, erfc(fabs(x) * KILN_SQRT1_2)); }

/* ---- gelu_tanh = x/2 (1 + tanh z) = x / (1 + e^-2z), z = sqrt(2/pi) (x +
 * 0.044715 x^3): no cancellation for x << 0; f32 in f64 as on the CPU ----- */
KD double kiln_gelu_tanh_m2z(double x) { return x * -1.5957691216057308 * (1.0 + x * x * 0.044715); }
KD float kiln_gelu_tanhf(float x) {
  double xd = x;
  return (float)(xd / (1.0 + kiln_exp2d(kiln_gelu_tanh_m2z(xd) * KILN_LOG2E)));
}
KD double kiln_gelu_tanh(double x) { return x / (1.0 + exp(kiln_gelu_tanh_m2z(x))); }

/* ---- f32 pow = 2^(b log2|a|) in f64, then C's special cases -------------- */
KD float kiln_powf(float a, float b) {
  float mag = (float)kiln_exp2d((double)b * kiln_log2d(fabs((double)a)));
  bool isint = rintf(b) == b;
  float hb = b * 0.5f;
  bool odd = isint && rintf(hb) != hb;
  float r = (__float_as_int(a) < 0 && odd) ? -mag : mag;
  r = (a < 0.0f && a != -KILN_INF_F && !isint) ? KILN_NAN_F : r;
  bool unit = (fabsf(a) == 1.0f && fabsf(b) == KILN_INF_F) || a == 1.0f || b == 0.0f;
  return unit ? 1.0f : r;
}

/* ---- issue 13's f32 functions: f64 cores on the widened argument, rounded
 * once (codegen_cpu/math.c, same order of operations) ---------------------- */
#define KILN_PI 0x1.921fb54442d18p+1
#define KILN_PI_4 0x1.921fb54442d18p-1
#define KILN_LN10 0x1.26bb1bbb55516p+1
#define KILN_2_SQRTPI 0x1.20dd750429b6dp+0
/* Taylor coefficients as math.c's series(): sign^k scale / den(k), highest first. */
KD double kiln_fact(int k) {
  double f = 1;
  for (int i = 2; i <= k; i++) f *= i;
  return f;
}
template <int N> KD void kiln_series(double (&c)[N], double sign, double scale, int kind) {
  double s = 1;
  for (int k = 0; k < N; k++, s *= sign) {
    double den = kind == 0 ? 2 * k + 1 : kind == 1 ? kiln_fact(k) * (2 * k + 1) : kiln_fact(k + 1);
    c[N - 1 - k] = s / den * scale;
  }
}
KD double kiln_log1pd(double x) {  /* x log(u) / (u - 1), u = 1 + x (Kahan) */
  double u = x + 1.0;
  double r = (kiln_log2d(u) * KILN_LN2) * (x / (u - 1.0));
  r = u == 1.0 ? x : r;
  return x == KILN_INF_D ? x : r;
}
KD double kiln_expm1d(double x) {
  double c[12];
  kiln_series(c, 1.0, 1.0, 2);
  double small = x * kiln_poly(x, c);
  double big = kiln_exp2d(x * KILN_LOG2E) - 1.0;
  return fabs(x) < 0.5 ? small : big;
}
KD double kiln_atanpos(double t) {  /* t >= 0, reduced to |t'| <= tan(pi/8) */
  double c[13];
  kiln_series(c, -1.0, 1.0, 0);
  bool big = t > 1 + KILN_SQRT2, mid = t > KILN_SQRT2 - 1;
  double r = mid ? (t - 1.0) / (t + 1.0) : t;
  r = big ? -1.0 / t : r;
  double base = big ? KILN_PI_2 : mid ? KILN_PI_4 : 0.0;
  return base + r * kiln_poly(r * r, c);
}
KD double kiln_atan2d(double y, double x) {
  double ay = fabs(y), ax = fabs(x);
  double t = ay == ax ? 1.0 : ay / ax;
  t = ay == 0.0 ? 0.0 : t;
  double a = kiln_atanpos(t);
  a = copysign(__double_as_longlong(x) < 0 ? KILN_PI - a : a, y);
  return (x != x || y != y) ? x + y : a;
}
KD double kiln_erfd(double x) {
  double c[14];
  kiln_series(c, -1.0, KILN_2_SQRTPI, 1);
  double small = x * kiln_poly(x * x, c);
  double big = copysign(1.0 - kiln_gelu_erfc(fabs(x)), x);
  return fabs(x) < 1.0 ? small : big;
}
KD double kiln_erfcd(double x) {
  double e = kiln_gelu_erfc(fabs(x));
  return x >= 0.0 ? e : 2.0 - e;
}
KD double kiln_log10d(double x) { return kiln_log2d(x) * (KILN_LN2 / KILN_LN10); }
KD double kiln_asind(double x) { return kiln_atan2d(x, sqrt((1.0 - x) * (1.0 + x))); }
KD double kiln_acosd(double x) { return kiln_atan2d(sqrt((1.0 - x) * (1.0 + x)), x); }
KD double kiln_atand(double x) { return copysign(kiln_atanpos(fabs(x)), x); }
KD double kiln_sinhd(double x) {
  double e = kiln_expm1d(fmin(fabs(x), 100.0));
  double r = copysign((e + e / (e + 1.0)) * 0.5, x);
  return x != x ? x : r;
}
KD double kiln_coshd(double x) {
  double e = kiln_exp2d(fabs(x) * KILN_LOG2E);
  return fma(e, 0.5, 0.5 / e);
}
KD double kiln_asinhd(double x) {
  double a = fabs(x), a2 = a * a;
  double r = kiln_log1pd(a + a2 / (1.0 + sqrt(1.0 + a2)));
  return a == KILN_INF_D ? x : copysign(r, x);
}
KD double kiln_acoshd(double x) {
  double xm = x - 1.0;
  double r = kiln_log1pd(xm + sqrt(xm * (x + 1.0)));
  return x < 1.0 ? KILN_NAN_D : r;
}
KD double kiln_atanhd(double x) { return kiln_log1pd((x + x) / (1.0 - x)) * 0.5; }
KD float kiln_tanf(float x) {
  int qi;
  double sp, cp;
  kiln_quadrant(x, 0, &qi, &sp, &cp);
  float t = (float)((qi & 1) ? -cp / sp : sp / cp);
  return fabsf(x) < 0x1p-12f ? x : t;
}
KD double kiln_tan(double x) { return tan(x); }
KD float kiln_atan2f(float y, float x) { return (float)kiln_atan2d(y, x); }
KD double kiln_atan2(double y, double x) { return atan2(y, x); }
/* f32: the core above; f64: libdevice */
#define KILN_WIDE(name) \
  KD float kiln_##name##f(float x) { return (float)kiln_##name##d(x); } \
  KD double kiln_##name(double x) { return name(x); }
KILN_WIDE(erf) KILN_WIDE(erfc) KILN_WIDE(expm1) KILN_WIDE(log1p) KILN_WIDE(log2) KILN_WIDE(log10)
KILN_WIDE(exp2) KILN_WIDE(asin) KILN_WIDE(acos) KILN_WIDE(atan) KILN_WIDE(sinh) KILN_WIDE(cosh)
KILN_WIDE(asinh) KILN_WIDE(acosh) KILN_WIDE(atanh)
#undef KILN_WIDE

/* ---- f64: libdevice ------------------------------------------------------ */
KD double kiln_exp(double x) { return exp(x); }
KD double kiln_log(double x) { return log(x); }
KD double kiln_sin(double x) { return sin(x); }
KD double kiln_cos(double x) { return cos(x); }
KD double kiln_tanh(double x) { return tanh(x); }
KD double kiln_pow(double a, double b) { return pow(a, b); }

/* ---- block-wide reductions ----------------------------------------------
 * A row reduction runs on all threads of a block: each thread folds a
 * strided share of the row into its own accumulator, then these combine,
 * first within each warp by shuffles, then the warps' results through
 * shared memory, and every thread gets the total (the epilogue that follows
 * needs it). Any block size up to 1024 works, a partial last warp included:
 * a shuffle's mask names only the lanes that exist. Every thread of the
 * block must call these (they hold barriers). */
template <class T> KD T kiln_shfl_down(unsigned mask, T v, int d) {  /* bool, 8 and 16 bits */
  return (T)__shfl_down_sync(mask, (int)v, d);
}
KD int kiln_shfl_down(unsigned mask, int v, int d) { return __shfl_down_sync(mask, v, d); }
KD unsigned kiln_shfl_down(unsigned mask, unsigned v, int d) { return __shfl_down_sync(mask, v, d); }
KD long long kiln_shfl_down(unsigned mask, long long v, int d) { return __shfl_down_sync(mask, v, d); }
KD float kiln_shfl_down(unsigned mask, float v, int d) { return __shfl_down_sync(mask, v, d); }
KD double kiln_shfl_down(unsigned mask, double v, int d) { return __shfl_down_sync(mask, v, d); }

/* An arg-reduction's partial result: the best value and its index. */
template <class V> struct kiln_arg { V v; long long i; };
template <class V> KD kiln_arg<V> kiln_shfl_down(unsigned mask, kiln_arg<V> a, int d) {
  kiln_arg<V> r = {kiln_shfl_down(mask, a.v, d), kiln_shfl_down(mask, a.i, d)};
  return r;
}

/* Lane 0 gets the fold of the values of lanes 0..n-1, which call this
 * together (n <= 32): lane l adds lane l+d's value while l+d < n. */
template <class T, class F> KD T kiln_warp_fold(T v, F f, unsigned n) {
  unsigned mask = n >= 32 ? 0xffffffffu : (1u << n) - 1u, lane = threadIdx.x & 31u;
  for (unsigned d = 16; d > 0; d >>= 1) {
    T o = kiln_shfl_down(mask, v, (int)d);
    if (lane + d < n) v = f(v, o);
  }
  return v;
}

/* One slot per warp and one for the result, per value type. The slots of a
 * fold are only rewritten after everyone passed the barrier that follows its
 * own reads, so consecutive folds need no barrier between them. */
template <class T> KD T *kiln_fold_slots() {
  __shared__ T slots[33];
  return slots;
}

template <class T, class F> KD T kiln_block_fold(T v, F f) {
  T *slots = kiln_fold_slots<T>();
  unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31u) >> 5;
  unsigned first = threadIdx.x - lane, lanes = blockDim.x - first < 32u ? blockDim.x - first : 32u;
  v = kiln_warp_fold(v, f, lanes);
  if (lane == 0) slots[warp] = v;
  __syncthreads();
  if (threadIdx.x < nwarps) {
    v = kiln_warp_fold(slots[threadIdx.x], f, nwarps);
    if (threadIdx.x == 0) slots[32] = v;
  }
  __syncthreads();
  return slots[32];
}

/* Numbers are never nan; specialised for the float types below. */
template <class T> KD bool kiln_isnan(T) { return false; }
KD bool kiln_isnan(float x) { return x != x; }
KD bool kiln_isnan(double x) { return x != x; }

/* The arg-reduction over the indices of both partial results, as one
 * thread's sequential pass decides it (codegen_cpu/emit.c's argfold): nan
 * beats any number, better(x, y) says when x beats y, ties keep the first
 * index. A thread that saw nothing better than the start value still holds
 * (start, 0); it can only win when the whole range equals the start value,
 * and then index 0 is the answer anyway. */
template <class V, class B> KD kiln_arg<V> kiln_argpick(kiln_arg<V> a, kiln_arg<V> b, B better) {
  bool an = kiln_isnan(a.v), bn = kiln_isnan(b.v);
  bool b_wins = an != bn ? bn : better(b.v, a.v) || (!better(a.v, b.v) && b.i < a.i);
  return b_wins ? b : a;
}
template <class V, class B> KD void kiln_block_argfold(V &v, long long &i, B better) {
  kiln_arg<V> mine = {v, i};
  kiln_arg<V> r = kiln_block_fold(mine, [better](kiln_arg<V> a, kiln_arg<V> b) { return kiln_argpick(a, b, better); });
  v = r.v;
  i = r.i;
}

/* ---- grid-wide reductions -----------------------------------------------
 * A full reduction too long for one block runs on the whole grid in one
 * launch (CUDA's threadFenceReduction sample): each block folds its
 * grid-stride share as above, thread 0 puts the block's results in the
 * scratch, fences, and counts the block in; the last block to arrive reads
 * every block's results back, folds them in block order (the same sum
 * whichever block comes last) and runs the epilogue. atomicInc wraps the
 * counter back to 0, ready for the next launch. Layout (codegen_cuda/cuda.h):
 * the counter, then slot s of block b at byte 16 + 8 (s gridDim.x + b). */
KD void *kiln_grid_slot(void *scratch, int s, unsigned b) {
  return (char *)scratch + 16 + 8ull * ((unsigned long long)s * gridDim.x + b);
}
template <class T> KD void kiln_grid_put(void *scratch, int s, T v) {
  if (threadIdx.x == 0) *(T *)kiln_grid_slot(scratch, s, blockIdx.x) = v;
}
/* volatile: written by other blocks, so never from this SM's L1 */
template <class T> KD T kiln_grid_get(void *scratch, int s, unsigned b) {
  return *(volatile T *)kiln_grid_slot(scratch, s, b);
}
/* Whether this block is the last to finish its share (the whole block
 * learns it; every thread must call this, after kiln_grid_put). */
KD bool kiln_grid_last(void *scratch) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicInc((unsigned *)scratch, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();
  return last;
}
/* A failed kernel check (ir/kernel.h): the first to claim the status
 * slot's code word writes the site, position and value. */
KD void kiln_check_fail(long long *slot, long long code, long long site, long long pos, long long value) {
  if (atomicCAS((unsigned long long *)slot, 0ull, (unsigned long long)code) != 0ull) return;
  slot[1] = site;
  slot[2] = pos;
  slot[3] = value;
}
/* One block's arg-reduction result merged into a thread's (v, i). */
template <class V, class B> KD void kiln_argmerge(V &v, long long &i, V bv, long long bi, B better) {
  kiln_arg<V> a = {v, i}, b = {bv, bi};
  kiln_arg<V> r = kiln_argpick(a, b, better);
  v = r.v;
  i = r.i;
}

/* ---- vectors of elementwise kernels -------------------------------------
 * L elements of storage type T moved by one 128-bit load or store; a kernel
 * takes this path only where kiln_aligned16 says every address is. */
template <class T, int L> struct alignas(16) kiln_vec { T v[L]; };
KD bool kiln_aligned16(const void *p) { return ((unsigned long long)p & 15) == 0; }

/* ---- sorting (KS_SORT) ---------------------------------------------------
 * Order-preserving keys: nan the largest, -0 equal to +0 (PyTorch's order). */
KD unsigned long long kiln_fkey(double x) {
  if (x != x) return ~0ull;
  if (x == 0) x = 0;
  unsigned long long k = (unsigned long long)__double_as_longlong(x);
  return k >> 63 ? ~k : k | 1ull << 63;
}
KD unsigned long long kiln_ikey(long long x) { return (unsigned long long)x ^ 1ull << 63; }
/* One line on one thread, in no memory of its own: result j is the first
 * (key, position) after result j-1, found by a scan of the line. Exact and
 * stable; O(n k), so long lines are slow (the CPU sorts by radix). */
template <class T, class K>
KD void kiln_sort_row(const T *in, long long is, long long n, bool desc, long long k, T *vals, long long *idx,
                      long long os, K key) {
  unsigned long long pk = 0;
  long long pa = -1;
  for (long long j = 0; j < k; j++) {
    unsigned long long bk = 0;
    long long ba = -1;
    for (long long i = 0; i < n; i++) {
      unsigned long long x = key(in[i * is]);
      if (desc) x = ~x;
      bool after = pa < 0 || x > pk || (x == pk && i > pa);
      if (after && (ba < 0 || x < bk)) bk = x, ba = i;
    }
    if (vals) vals[j * os] = in[ba * is];
    if (idx) idx[j * os] = ba;
    pk = bk, pa = ba;
  }
}
