"""safetensors_py.py: safetensors files between kiln and the safetensors
package (PyPI): the package reads what kiln writes (every dtype, bfloat16
included, 0-d and empty shapes, a non-contiguous view, metadata) with its
raw deserializer and its NumPy reader, and kiln reads what the package's
NumPy writer writes, bit for bit.
Usage: safetensors_py.py path/to/libkiln.so (exit 77: skipped without NumPy
or the safetensors package)."""
import ctypes
import os
import sys
import tempfile

import kiln_ctypes as k
from kiln_ctypes import np

try:
    import safetensors
    from safetensors import deserialize, safe_open
    from safetensors.numpy import save_file
except ImportError:
    print("skipped: the safetensors package is not installed (pip install safetensors)")
    sys.exit(77)

SHAPES = [(), (5,), (2, 3), (2, 1, 3), (0,), (2, 0, 3)]
NAMES = ["BOOL", "U8", "I8", "I16", "I32", "I64", "F16", "BF16", "F32", "F64"]   # kiln_dtype's order
STRS = ctypes.POINTER(ctypes.c_char_p)


class SafeTensors(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int), ("names", STRS), ("tensors", ctypes.POINTER(ctypes.c_void_p)),
                ("nmeta", ctypes.c_int), ("meta", STRS), ("storage_", ctypes.c_void_p)]


def declare(lib):
    lib.kiln_save_safetensors_at.restype = ctypes.c_int
    lib.kiln_save_safetensors_at.argtypes = [k.S, k.I, k.S, k.I, STRS, ctypes.POINTER(ctypes.c_void_p), k.I, STRS]
    lib.kiln_load_safetensors_at.restype = ctypes.c_int
    lib.kiln_load_safetensors_at.argtypes = [k.S, k.I, k.S, ctypes.POINTER(SafeTensors)]
    lib.kiln_safetensors_free.restype = None
    lib.kiln_safetensors_free.argtypes = [ctypes.POINTER(SafeTensors)]


def strings(values):
    return (ctypes.c_char_p * max(len(values), 1))(*[v.encode() for v in values])


def kiln_save(lib, path, named, metadata):
    """Saves the (name, handle) pairs with kiln."""
    names, handles = strings([n for n, _ in named]), (ctypes.c_void_p * max(len(named), 1))(*[t for _, t in named])
    meta = strings([s for kv in metadata.items() for s in kv])
    f, l = k.where(1)
    st = lib.kiln_save_safetensors_at(f, l, path.encode(), len(named), names, handles, len(metadata), meta)
    assert st == k.OK, lib.kiln_last_error().decode()


def kiln_tensor(lib, raw, dt, shape):
    """A kiln tensor of dtype index dt over a copy of the bytes of array raw."""
    raw = np.ascontiguousarray(raw)
    f, l = k.where(1)
    return k.check(lib, lib.kiln_from_data_at(f, l, raw.ctypes.data, dt, len(shape), k.ints(shape)))


def kiln_to_package(lib, d):
    """kiln's file, read by the package: raw bytes, dtype names and shapes,
    then through its NumPy reader; the metadata."""
    want, named = {}, []
    for dt, name in enumerate(NAMES):
        for s, shape in enumerate(SHAPES):
            if name == "BF16":   # NumPy has no bfloat16: its bits as uint16
                raw = k.values(np.uint16, shape, s)
            else:
                raw = k.values(k.DTYPES[dt], shape, s)
            tname = f"{name.lower()}.{s}"
            want[tname] = (name, list(shape), raw.tobytes(), raw)
            named.append((tname, kiln_tensor(lib, raw, dt, shape)))
    # a permuted, strided view: saved as its values read
    base = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    t = k.to_kiln(lib, base)
    f, l = k.where(1)
    v = k.check(lib, lib.kiln_slice_at(f, l, k.check(lib, lib.kiln_permute_at(f, l, t, 3, k.ints([2, 0, 1]))),
                                       0, 0, 4, 2))
    view = np.ascontiguousarray(base.transpose(2, 0, 1)[::2])
    want["view"] = ("I32", list(view.shape), view.tobytes(), view)
    named.append(("view", v))
    metadata = {"epoch": "3", "\u00fcn\u00ef": "\u2713 \"q\"\n"}
    path = os.path.join(d, "kiln.safetensors")
    kiln_save(lib, path, named, metadata)
    for _, h in named + [("base", t)]:
        lib.kiln_release(h)
    with open(path, "rb") as fp:
        got = dict(deserialize(fp.read()))
    assert sorted(got) == sorted(want), "names"
    for name, (dtype, shape, data, _) in want.items():
        g = got[name]
        assert (g["dtype"], list(g["shape"]), bytes(g["data"])) == (dtype, shape, data), name
    with safe_open(path, framework="np") as fp:
        assert fp.metadata() == metadata, fp.metadata()
        for name, (dtype, _, _, a) in want.items():
            if dtype != "BF16":
                assert k.same(fp.get_tensor(name), a), name + ": the NumPy reader"
    return len(want)


def package_to_kiln(lib, d):
    """The package's NumPy writer's file, read by kiln."""
    arrays = {f"{np.dtype(dt).name}.{s}": k.values(dt, shape, 100 + s)
              for dt in k.DTYPES if dt is not None for s, shape in enumerate(SHAPES)}
    path = os.path.join(d, "package.safetensors")
    save_file(arrays, path, metadata={"by": "safetensors " + safetensors.__version__})
    st = SafeTensors()
    f, l = k.where(1)
    assert lib.kiln_load_safetensors_at(f, l, path.encode(), ctypes.byref(st)) == k.OK, lib.kiln_last_error()
    got = {st.names[i].decode(): st.tensors[i] for i in range(st.n)}
    assert sorted(got) == sorted(arrays), "names"
    for name, a in arrays.items():
        assert k.same(k.to_numpy(lib, got[name]), a), name
        lib.kiln_release(got[name])
    assert [st.meta[i].decode() for i in range(2 * st.nmeta)] == ["by", "safetensors " + safetensors.__version__]
    lib.kiln_safetensors_free(ctypes.byref(st))
    return len(arrays)


def main(lib_path):
    lib = k.load(lib_path)
    declare(lib)
    with tempfile.TemporaryDirectory() as d:
        ours = kiln_to_package(lib, d)
        theirs = package_to_kiln(lib, d)
    lib.kiln_shutdown()
    print(f"safetensors_py: the package read {ours} tensors kiln wrote (every dtype, a view, metadata); "
          f"kiln read {theirs} the package wrote; safetensors {safetensors.__version__}, NumPy {np.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
