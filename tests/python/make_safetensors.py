"""make_safetensors.py: writes the reference files of tests/data/ with the
safetensors package (PyPI), which test_safetensors.c reads with kiln:
st_dtypes.safetensors (one tensor of each dtype kiln has, a 0-dim and an
empty one, a name that JSON must escape, and metadata) and
st_empty.safetensors (no tensor at all). The values are the ones
test_safetensors.c spells out. Rerun it only to regenerate them:
  /usr/bin/python3 tests/python/make_safetensors.py tests/data
(written with safetensors 0.8.0, whose serialize_file takes TensorSpecs)."""
import os
import sys

import numpy as np
from safetensors import TensorSpec, serialize_file

TENSORS = {
    "bool": ("bool", np.array([True, False, True])),
    "u8": ("uint8", np.array([[0, 1], [254, 255]], np.uint8)),
    "i8": ("int8", np.array([-128, -1, 0, 127], np.int8)),
    "i16": ("int16", np.array([[-32768, -2, 0], [1, 2, 32767]], np.int16)),
    "i32": ("int32", np.array([-2147483648, 7, 2147483647], np.int32)),
    "i64": ("int64", np.array([-9223372036854775808, 9223372036854775807], np.int64)),
    "f16": ("float16", np.array([[1.0, -2.5], [65504.0, np.inf]], np.float16)),
    # bfloat16 is the top half of a float32: NumPy has no dtype for it
    "bf16": ("bfloat16", (np.array([1.0, -2.0, 3.140625], np.float32).view(np.uint32) >> 16).astype(np.uint16)),
    "f32": ("float32", np.array([[0.5, -1.0, 2.25], [-0.0, 3.5, 100.0]], np.float32)),
    "f64": ("float64", np.array(2.718281828459045, np.float64)),
    "empty": ("float32", np.zeros((0, 3), np.float32)),
    'we"ird/n\u00e4me \u2713': ("int32", np.array([42], np.int32)),
}
METADATA = {"format": "pt", "note": "\u00fcn\u00efcode \u2713 \"quoted\""}


def write(path, tensors, metadata):
    specs = {name: TensorSpec(dtype=dt, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, (dt, a) in tensors.items()}
    serialize_file(specs, path, metadata=metadata)   # the arrays stay alive in tensors meanwhile


def main(out):
    write(os.path.join(out, "st_dtypes.safetensors"), TENSORS, METADATA)
    write(os.path.join(out, "st_empty.safetensors"), {}, None)


if __name__ == "__main__":
    main(sys.argv[1])
