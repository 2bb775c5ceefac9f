"""numpy_dlpack.py: DLPack between kiln and NumPy, no copies either way.
kiln's DLManagedTensor, in a PyCapsule named "dltensor", goes to
numpy.from_dlpack; NumPy's __dlpack__ capsule goes to kiln_from_dlpack
(which then owns it: the capsule is renamed "used_dltensor", as the protocol
says). Every dtype both exchange, strided and negative-stride views, shared
memory seen from both sides, and NumPy's deleter run exactly once (the
array's reference count comes back).
Usage: numpy_dlpack.py path/to/kiln_py.so (exit 77: skipped without NumPy)."""
import ctypes
import sys

import kiln_ctypes as k
from kiln_ctypes import np

api = ctypes.pythonapi
api.PyCapsule_New.restype, api.PyCapsule_New.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                                             ctypes.c_void_p]
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.restype, api.PyCapsule_SetName.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]

# NumPy gained DLPack's bool in 1.25; bfloat16 it has not at all
EXCHANGED = [dt for dt in k.DTYPES if dt is not None and (dt is not np.bool_ or
                                                          tuple(map(int, np.__version__.split(".")[:2])) >= (1, 25))]


class Exported:
    """What numpy.from_dlpack wants: an object with __dlpack__ giving the capsule."""

    def __init__(self, managed):
        # no capsule destructor: NumPy consumes the capsule below and calls the deleter itself
        self.capsule = api.PyCapsule_New(managed, b"dltensor", None)

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)   # kDLCPU


def to_numpy_shared(lib, t):
    f, l = k.where()
    m = lib.kiln_to_dlpack_at(f, l, t)
    assert m, lib.kiln_last_error().decode()
    return np.from_dlpack(Exported(m))


def from_numpy_shared(lib, a):
    cap = a.__dlpack__()
    f, l = k.where()
    t = k.check(lib, lib.kiln_from_dlpack_at(f, l, api.PyCapsule_GetPointer(cap, b"dltensor")))
    api.PyCapsule_SetName(cap, b"used_dltensor")   # kiln owns it now
    return t


def data_of(lib, t):
    f, l = k.where()
    return lib.kiln_data_at(f, l, t)


def kiln_to_numpy(lib):
    for s, dt in enumerate(EXCHANGED):
        a = k.values(dt, (3, 4), s)
        t = k.to_kiln(lib, a)
        b = to_numpy_shared(lib, t)
        assert k.same(b, a), np.dtype(dt).name
        assert b.ctypes.data == data_of(lib, t), "kiln -> NumPy copied"
        lib.kiln_release(t)
        assert k.same(b, a), "the memory must outlive kiln's handle"
        del b   # NumPy calls kiln's deleter
    # a permuted, sliced view keeps kiln's strides
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = k.to_kiln(lib, base)
    f, l = k.where(1)
    v = k.check(lib, lib.kiln_slice_at(f, l, lib.kiln_permute_at(f, l, t, 3, k.ints([2, 0, 1])), 0, 1, 4, 2))
    b = to_numpy_shared(lib, v)
    assert np.array_equal(b, base.transpose(2, 0, 1)[1::2]), "view values"
    assert b.strides == (8, 48, 16), f"view strides {b.strides}"
    for h in (t, v):
        lib.kiln_release(h)
    return len(EXCHANGED)


def numpy_to_kiln(lib):
    for s, dt in enumerate(EXCHANGED):
        a = k.values(dt, (2, 3), s)
        refs = sys.getrefcount(a)
        t = from_numpy_shared(lib, a)
        assert sys.getrefcount(a) == refs + 1, "NumPy's managed tensor holds the array"
        assert data_of(lib, t) == a.ctypes.data, "NumPy -> kiln copied"
        assert k.same(k.to_numpy(lib, t), a), np.dtype(dt).name
        lib.kiln_release(t)
        assert sys.getrefcount(a) == refs, "kiln must call NumPy's deleter exactly once"
    # negative and non-unit strides; writes on NumPy's side show in kiln
    a = np.arange(20, dtype=np.float64).reshape(4, 5)
    v = a[::2, ::-1]
    t = from_numpy_shared(lib, v)
    assert np.array_equal(k.to_numpy(lib, t), v), "strided import"
    a[2, 4] = -1
    assert k.to_numpy(lib, t)[1, 0] == -1, "kiln must read NumPy's memory in place"
    lib.kiln_release(t)
    # 0-d and empty
    for a in (np.array(3.5), np.zeros((0, 4), np.int32)):
        t = from_numpy_shared(lib, a)
        assert k.same(k.to_numpy(lib, t), a), f"shape {a.shape}"
        lib.kiln_release(t)
    return len(EXCHANGED)


def main(lib_path):
    lib = k.load(lib_path)
    n_out = kiln_to_numpy(lib)
    n_in = numpy_to_kiln(lib)
    lib.kiln_shutdown()
    print(f"numpy_dlpack: {n_out} dtypes kiln -> NumPy and {n_in} NumPy -> kiln without copies, strided views "
          f"both ways, deleters once; NumPy {np.__version__}" +
          ("" if np.bool_ in EXCHANGED else " (no bool: NumPy < 1.25 has no DLPack bool)"))


if __name__ == "__main__":
    main(sys.argv[1])
