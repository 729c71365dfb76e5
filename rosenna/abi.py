"""The binary interface shared by generated code and its callers, each fact defined once.

- ``STATUS_CODES``: what ``<name>_init`` and ``<name>_infer_batch`` return, rendered into the C
  header, the Fortran module and the README.
- The ``.rwt`` weights file (docs/weights-format.md). All integers are unsigned 32-bit in the
  writer's byte order; the endianness mark tells a reader whether that is its own::

      magic      8 bytes   "RSNNAWT\\0"
      endian     u32       0x01020304
      version    u32       RWT_VERSION (2)
      dtype      u32       1 float32, 2 float64
      plan hash  32 bytes  ASCII hex, must equal the generated code's
      count      u32       number of tensors
      count times:
        name_len u32, name (name_len bytes, ASCII, no terminator)
        rank     u32, dims (rank x u32)
        data     prod(dims) elements of dtype
      checksum   u32       CRC-32C of every byte before it
      (end of file)

- ``RWT_CHECKS``: what a reader checks, in order, and the status of each failure. The C and the
  Fortran reader are both generated from this one table (``rosenna.emit.c_reader``,
  ``rosenna.emit.fortran_reader``), and docs/weights-format.md lists it.
"""

from dataclasses import dataclass

import functools
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
    (9, "READ", "a read failed: truncated or inconsistent file, or bytes after its end"),
    (10, "DEVICE", "device allocation or copy failed, or the model was never initialised"),
    (11, "LAUNCH", "kernel launch failed"),
    (12, "CHECKSUM", "weights-file checksum mismatch: the file is corrupted"),
    (13, "INDEX", "an index (Gather, Scatter, ...) was outside its axis at some point: the outputs it would "
                  "have written are NaN"),
)

STATUS = {key: code for code, key, _ in STATUS_CODES}

#: What ``<name>_infer_batch`` may return.
BATCH_STATUSES = (STATUS["OK"], STATUS["DEVICE"], STATUS["LAUNCH"], STATUS["INDEX"])

RWT_MAGIC = b"RSNNAWT\0"
RWT_ENDIAN = 0x01020304
#: Version 2 added the checksum and the end-of-file check; a version-1 file gets VERSION (3).
RWT_VERSION = 2
RWT_DTYPES = {"single": 1, "double": 2}
RWT_HASH_LEN = 32
#: Reader capacities: longest tensor name and highest rank a reader accepts.
RWT_MAX_NAME = 63
RWT_MAX_RANK = 8


#: The checksum: CRC-32C (Castagnoli; iSCSI, ext4, SSE4.2's crc32 instruction): reflected
#: polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF; "123456789" gives 0xE3069283.
#: The readers compute it table-driven, bytewise, building their 256-entry table from
#: RWT_CRC_POLY at init. The writer (``crc32c``) runs the same table over many lanes of the file at
#: once with numpy and joins the lanes by the CRC's linearity, so a 1 GB file takes seconds.
RWT_CRC_POLY = 0x82F63B78
RWT_CRC_INIT = 0xFFFFFFFF
#: Bytes a reader reads at a time when it computes the checksum.
RWT_CRC_BLOCK = 4096


def _crc_table():
    table = np.zeros(256, dtype=np.uint32)
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ RWT_CRC_POLY if value & 1 else value >> 1
        table[byte] = value
    return table


_CRC_TABLE = _crc_table()


def crc32c_reference(data, crc=0):
    """CRC-32C byte by byte, exactly as the generated readers compute it (slow: for tests)."""
    table = _CRC_TABLE.tolist()
    crc ^= RWT_CRC_INIT
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ RWT_CRC_INIT


class _Advance:
    """The linear map that runs a raw CRC register (no initial value or final XOR) over ``n``
    zero bytes, applied through four 256-entry tables (one per byte of the register)."""

    def __init__(self, columns):
        self.tables = []
        for b in range(4):
            table = [0] * 256
            for v in range(1, 256):
                low = (v & -v).bit_length() - 1
                table[v] = table[v & (v - 1)] ^ columns[8 * b + low]
            self.tables.append(np.array(table, dtype=np.uint32))

    def __call__(self, x):
        """Apply to an int or a numpy uint32 array."""
        t0, t1, t2, t3 = self.tables
        if isinstance(x, np.ndarray):
            return t0[x & 0xFF] ^ t1[(x >> 8) & 0xFF] ^ t2[(x >> 16) & 0xFF] ^ t3[x >> 24]
        return int(t0[x & 0xFF] ^ t1[(x >> 8) & 0xFF] ^ t2[(x >> 16) & 0xFF] ^ t3[x >> 24])

    def then(self, other):
        """The map ``other`` after ``self``."""
        return _Advance([other(self(1 << i)) for i in range(32)])


@functools.lru_cache(maxsize=64)
def _advance(n):
    """The _Advance over ``n`` zero bytes (by squaring the one-byte map)."""
    table = _CRC_TABLE.tolist()
    one = _Advance([table[(1 << i) & 0xFF] ^ ((1 << i) >> 8) for i in range(32)])
    result, power = _Advance([1 << i for i in range(32)]), one
    while n:
        if n & 1:
            result = result.then(power)
        n >>= 1
        if n:
            power = power.then(power)
    return result


def _raw_lanes(segment, lanes):
    """Raw CRC register (from 0) of ``segment`` (numpy uint8, a multiple of ``lanes`` long), split
    into ``lanes`` consecutive equal parts computed side by side and joined."""
    width = len(segment) // lanes
    columns = np.ascontiguousarray(segment.reshape(lanes, width).T)
    state = np.zeros(lanes, dtype=np.uint32)
    for row in columns:
        state = _CRC_TABLE[(state ^ row) & 0xFF] ^ (state >> 8)
    while lanes > 1:  # join neighbours: raw(A || B) = advance_len(B)(raw(A)) ^ raw(B)
        state = _advance(width)(state[0::2]) ^ state[1::2]
        lanes //= 2
        width *= 2
    return int(state[0])


def crc32c(data):
    """CRC-32C of ``data`` (bytes): what the readers compute, at numpy speed (about 40 MB/s)."""
    view = np.frombuffer(data, dtype=np.uint8)
    crc, done = RWT_CRC_INIT, 0
    while len(view) - done >= 4096:
        rest = len(view) - done
        lanes = min(65536, 1 << ((rest // 64).bit_length() - 1))  # each lane at least 64 bytes
        size = min(16 << 20, rest // lanes * lanes)
        crc = _advance(size)(crc) ^ _raw_lanes(view[done:done + size], lanes)
        done += size
    return crc32c_reference(view[done:].tobytes(), crc ^ RWT_CRC_INIT)


@dataclass(frozen=True)
class Check:
    """One step of a .rwt reader: read ``field`` (``size`` bytes, or as ``kind`` says), compare by
    ``kind``, return ``status`` on a mismatch. Any read that comes up short returns READ, except
    that an error (not end of file) on the very first read means the path is no readable file
    (a directory, say): OPEN."""

    field: str
    kind: str  # "bytes" | "u32" | "u32_max" | "name" | "dims" | "data" | "checksum" | "end"
    expect: str  # the key of the expected value in rwt_expected(), or a capacity constant's name
    status: str
    per_tensor: bool = False
    size: int = 4
    doc: str = ""


RWT_CHECKS = (
    Check("magic", "bytes", "magic", "MAGIC", size=8, doc="equals `RSNNAWT\\0`"),
    Check("endian", "u32", "endian", "ENDIAN", doc="equals 0x01020304 read in this machine's byte order"),
    Check("version", "u32", "version", "VERSION", doc=f"equals {RWT_VERSION}; a version-1 file (no checksum) stops here"),
    Check("dtype", "u32", "dtype", "DTYPE", doc="equals the generated precision (1 float32, 2 float64)"),
    Check("hash", "bytes", "hash", "HASH", size=32, doc="equals the generated code's plan hash"),
    Check("count", "u32", "count", "READ", doc="equals the model's number of tensors"),
    Check("name_len", "u32_max", "RWT_MAX_NAME", "CAPACITY", True, doc=f"at most {RWT_MAX_NAME} (RWT_MAX_NAME)"),
    Check("name", "name", "", "UNKNOWN_TENSOR", True,
          doc="is, byte for byte and in length, one of this model's tensor names"),
    Check("rank", "u32_max", "RWT_MAX_RANK", "CAPACITY", True, doc=f"at most {RWT_MAX_RANK} (RWT_MAX_RANK)"),
    Check("dims", "dims", "", "READ", True,
          doc="multiply (without overflow) to the tensor's size, and the tensor was not given before"),
    Check("data", "data", "", "READ", True, doc="reads in full"),
    Check("checksum", "checksum", "", "CHECKSUM", doc="equals the CRC-32C of every byte before it (the file is read a second time, in blocks)"),
    Check("end", "end", "", "READ", doc="nothing follows the checksum"),
)


def rwt_expected(precision, plan_hash, count):
    """The values the header checks compare with, by ``Check.expect``."""
    return {"magic": RWT_MAGIC, "endian": RWT_ENDIAN, "version": RWT_VERSION, "dtype": RWT_DTYPES[precision],
            "hash": plan_hash.encode("ascii"), "count": count}


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
    body = b"".join(out)
    return body + struct.pack("=I", crc32c(body))


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
