"""kiln_ctypes.py: the part of kiln's C API the NumPy interop scripts use,
loaded with ctypes from libkiln.so, plus
conversions between kiln tensors and NumPy arrays through copies."""
import ctypes
import inspect
import sys

try:
    import numpy as np
except ImportError:
    print("skipped: NumPy is not installed (Debian's python3-numpy; scripts/install-deps.sh)")
    sys.exit(77)

OK, ERR_DTYPE = 0, 3
# kiln_dtype in kiln.h's order; bfloat16 has no NumPy dtype
DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, None, np.float32, np.float64]
BF16 = 7
I64P = ctypes.POINTER(ctypes.c_int64)
P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p

SIGNATURES = {
    "kiln_from_data_at": (P, [S, I, P, I, I, I64P]),
    "kiln_copy_to_host_at": (I, [S, I, P, P, ctypes.c_size_t]),
    "kiln_data_at": (P, [S, I, P]),
    "kiln_save_npy_at": (I, [S, I, P, S]),
    "kiln_load_npy_at": (P, [S, I, S]),
    "kiln_to_dlpack_at": (P, [S, I, P]),
    "kiln_from_dlpack_at": (P, [S, I, P]),
    "kiln_permute_at": (P, [S, I, P, I, I64P]),
    "kiln_slice_at": (P, [S, I, P, I, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
    "kiln_cast_at": (P, [S, I, P, I]),
    "kiln_status_of": (I, [P]),
    "kiln_last_error": (S, []),
    "kiln_release_at": (None, [S, I, P]),
    "kiln_ndim": (I, [P]),
    "kiln_shape": (I64P, [P]),
    "kiln_dtype_of": (I, [P]),
    "kiln_shutdown": (None, []),
}


def load(path):
    # PyDLL keeps the GIL across calls: a deleter kiln calls may be NumPy's,
    # which touches Python objects.
    lib = ctypes.PyDLL(path)
    for name, (res, args) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    lib.kiln_release = lambda t: lib.kiln_release_at(*where(), t)   # the C macro's form
    return lib


def where(depth=2):
    """The caller's file and line, as the C macros pass them."""
    frame = inspect.stack()[depth]
    return frame.filename.encode(), frame.lineno


def ints(values):
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def check(lib, t):
    if lib.kiln_status_of(t) != OK:
        raise AssertionError(lib.kiln_last_error().decode())
    return t


def to_kiln(lib, a):
    """A kiln tensor holding a copy of array a."""
    a = a.astype(a.dtype.newbyteorder("="), order="C")
    f, l = where()
    return check(lib, lib.kiln_from_data_at(f, l, a.ctypes.data, DTYPES.index(a.dtype.type), a.ndim,
                                            ints(a.shape)))


def to_numpy(lib, t):
    """A NumPy copy of kiln tensor t."""
    shape = tuple(lib.kiln_shape(t)[i] for i in range(lib.kiln_ndim(t)))
    out = np.empty(shape, DTYPES[lib.kiln_dtype_of(t)])
    f, l = where()
    if lib.kiln_copy_to_host_at(f, l, t, out.ctypes.data, out.nbytes) != OK:
        raise AssertionError(lib.kiln_last_error().decode())
    return out


def same(a, b):
    """Equal dtype, shape and bytes (NaN payloads and -0 included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def values(dtype, shape, seed):
    """Test data of every kind the dtype holds: extremes, and for floats NaN,
    infinities and -0."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_).reshape(shape)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        v[:2] = [info.min, info.max][:n]
        return v.reshape(shape)
    v = (rng.standard_normal(n) * 100).astype(dtype)
    v[:4] = np.array([np.nan, np.inf, -np.inf, -0.0], dtype)[:n]
    return v.reshape(shape)
