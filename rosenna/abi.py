"""The binary interface shared by generated code and its callers, each fact defined once.

- ``STATUS_CODES``: what ``<name>_init`` and ``<name>_infer_batch`` return, rendered into the C
  header, the Fortran module and the README.
- The ``.rwt`` weights file (docs/weights-format.md). All integers are 32-bit in the writer's byte
  order; the endianness mark tells a reader whether that is its own::

      magic      8 bytes   "RSNNAWT\\0"
      endian     u32       0x01020304
      version    u32       RWT_VERSION
      dtype      u32       1 float32, 2 float64
      plan hash  32 bytes  ASCII hex, must equal the generated code's
      count      u32       number of tensors
      count times:
        name_len u32, name (name_len bytes, ASCII, no terminator)
        rank     u32, dims (rank x u32)
        data     prod(dims) elements of dtype

  A reader checks, in this order: magic (2), endianness (5), version (3), dtype (4), hash (6);
  then per tensor: name length and rank against its capacity (8), the name against the model's
  tensors (7), dims against the expected shape and every read's length (9). A tensor missing or
  given twice is inconsistent (9).
"""

import struct

import numpy as np

STATUS_CODES = (
    (0, "OK", "success"),
    (1, "OPEN", "cannot open the weights file"),
    (2, "MAGIC", "not a rosenna weights file (bad magic)"),
    (3, "VERSION", "weights-file version not supported"),
    (4, "DTYPE", "weights dtype does not match this generated code"),
    (5, "ENDIAN", "weights-file endianness does not match this machine"),
    (6, "HASH", "plan hash does not match this generated code"),
    (7, "UNKNOWN_TENSOR", "the file holds a tensor this model does not declare"),
    (8, "CAPACITY", "a name or rank exceeds this model's capacity"),
    (9, "READ", "a read failed: truncated or inconsistent file"),
    (10, "DEVICE", "device allocation or copy failed, or the model was never initialised"),
    (11, "LAUNCH", "kernel launch failed"),
)

STATUS = {key: code for code, key, _ in STATUS_CODES}

#: What ``<name>_infer_batch`` may return.
BATCH_STATUSES = (STATUS["OK"], STATUS["DEVICE"], STATUS["LAUNCH"])

RWT_MAGIC = b"RSNNAWT\0"
RWT_ENDIAN = 0x01020304
RWT_VERSION = 1
RWT_DTYPES = {"single": 1, "double": 2}
RWT_HASH_LEN = 32
#: Reader capacities: longest tensor name and highest rank a reader accepts.
RWT_MAX_NAME = 63
RWT_MAX_RANK = 8


def status_name(key):
    return f"ROSENNA_STATUS_{key}"


def rwt_bytes(plan):
    """``plan``'s weights in the .rwt format (native byte order)."""
    out = [RWT_MAGIC, struct.pack("=III", RWT_ENDIAN, RWT_VERSION, RWT_DTYPES[plan.precision]),
           plan.hash.encode("ascii"), struct.pack("=I", len(plan.weights))]
    dtype = np.float64 if plan.precision == "double" else np.float32
    for w in plan.weights:
        name = w.ident.encode("ascii")
        out.append(struct.pack("=I", len(name)) + name)
        out.append(struct.pack("=I", 1) + struct.pack("=I", w.size))
        out.append(np.ascontiguousarray(w.array, dtype=dtype).tobytes())
    return b"".join(out)


def write_rwt(path, plan):
    """Write ``plan``'s weights to ``path`` in the .rwt format."""
    with open(path, "wb") as out:
        out.write(rwt_bytes(plan))


def read_rwt_header(data):
    """Parse the fixed header of .rwt bytes (for tests and tools): a dict of its fields."""
    magic = data[:8]
    endian, version, dtype = struct.unpack("=III", data[8:20])
    return {"magic": magic, "endian": endian, "version": version, "dtype": dtype,
            "hash": data[20:20 + RWT_HASH_LEN].decode("ascii", "replace"),
            "count": struct.unpack("=I", data[52:56])[0]}
