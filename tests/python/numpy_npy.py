"""numpy_npy.py: .npy files between kiln and NumPy: NumPy reads what kiln
writes and kiln reads what NumPy writes, bit for bit, every dtype, 0-d to
4-d and empty shapes, Fortran order, big-endian, format versions 1.0 to 3.0,
a non-contiguous view saved from kiln, and bfloat16 refused.
Usage: numpy_npy.py path/to/kiln_py.so (exit 77: skipped without NumPy)."""
import os
import sys
import tempfile

import kiln_ctypes as k
from kiln_ctypes import np

SHAPES = [(), (5,), (2, 3), (2, 1, 3), (2, 3, 1, 2), (0,), (2, 0, 3)]


def kiln_load(lib, path):
    f, l = k.where(1)
    return k.check(lib, lib.kiln_load_npy_at(f, l, path.encode()))


def kiln_save(lib, t, path):
    f, l = k.where(1)
    return lib.kiln_save_npy_at(f, l, t, path.encode())


def both_ways(lib, d, a, name):
    """NumPy's file read by kiln, kiln's file read by NumPy."""
    ours, theirs = os.path.join(d, "kiln.npy"), os.path.join(d, "numpy.npy")
    np.save(theirs, a)
    want = a.astype(a.dtype.newbyteorder("="), order="C")   # what kiln holds: C order, native bytes
    t = kiln_load(lib, theirs)
    assert k.same(k.to_numpy(lib, t), want), name + ": kiln read NumPy's file wrong"
    assert kiln_save(lib, t, ours) == k.OK, lib.kiln_last_error().decode()
    lib.kiln_release(t)
    b = np.load(ours)
    assert k.same(b, want), name + ": NumPy read kiln's file wrong"
    assert b.dtype.byteorder in "=|<", name


def main(lib_path):
    lib = k.load(lib_path)
    n = 0
    with tempfile.TemporaryDirectory() as d:
        for dt in k.DTYPES:
            if dt is None:
                continue
            for s, shape in enumerate(SHAPES):
                a = k.values(dt, shape, s)
                name = f"{np.dtype(dt).name}{shape}"
                both_ways(lib, d, a, name)
                if a.ndim > 1:
                    both_ways(lib, d, np.asfortranarray(a), name + " fortran")
                if a.dtype.itemsize > 1:
                    both_ways(lib, d, a.astype(a.dtype.newbyteorder(">")),
                              name + " big-endian")
                n += 1
        # versions 2.0 and 3.0, as numpy.lib.format writes them
        a = k.values(np.float32, (3, 4), 7)
        for version in [(1, 0), (2, 0), (3, 0)]:
            path = os.path.join(d, "v.npy")
            with open(path, "wb") as fp:
                np.lib.format.write_array(fp, a, version=version)
            t = kiln_load(lib, path)
            assert k.same(k.to_numpy(lib, t), a), f"version {version}"
            lib.kiln_release(t)
        # a non-contiguous view saved from kiln: permuted and strided
        base = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
        t = k.to_kiln(lib, base)
        f, l = k.where(1)
        p = k.check(lib, lib.kiln_permute_at(f, l, t, 3, k.ints([2, 0, 1])))
        v = k.check(lib, lib.kiln_slice_at(f, l, p, 0, 0, 4, 2))
        path = os.path.join(d, "view.npy")
        assert kiln_save(lib, v, path) == k.OK, lib.kiln_last_error().decode()
        assert k.same(np.load(path), np.ascontiguousarray(base.transpose(2, 0, 1)[::2])), "view"
        # bfloat16 has no NumPy dtype: refused, and no file is left
        bf = k.check(lib, lib.kiln_cast_at(f, l, t, k.BF16))
        path = os.path.join(d, "bf16.npy")
        assert kiln_save(lib, bf, path) == k.ERR_DTYPE
        assert b"bfloat16 has no NumPy dtype" in lib.kiln_last_error()
        assert not os.path.exists(path)
        for h in (t, p, v, bf):
            lib.kiln_release(h)
    lib.kiln_shutdown()
    print(f"numpy_npy: {n} dtype/shape pairs both ways (C, Fortran, big-endian), versions 1.0-3.0, "
          f"a saved view, bfloat16 refused; NumPy {np.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
