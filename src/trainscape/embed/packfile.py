"""Pack files: a validated scenario's packed blocks (and optionally its candidate set) for the
C library's ``ts_blocks_load`` (``csrc/blocks_file.c``).

Format (version 1), every number little-endian::

    offset  size  field
    0       8     magic b"TSBLOCKS"
    8       4     u32 format version (1)
    12      4     u32 ABI version (TS_ABI_VERSION of csrc/trainscape.h)
    16      4     u32 layout hash (layout.layout_hash(), TS_LAYOUT_HASH)
    20      4     u32 n_sys  (layout.N_SYS)
    24      4     u32 n_mdl  (layout.N_MODEL)
    28      4     u32 n_job  (layout.N_JOB)
    32      4     u32 n_space (int32 entries of the space vector; 0: no candidate list)
    36      4     u32 reserved (0)
    40            f64 sys[n_sys], f64 mdl[n_mdl], f64 job[n_job], i32 space[n_space]

A reader refuses another format version or sizes (``TS_ERR_FORMAT``), another ABI version
(``TS_ERR_ABI``) and another layout hash (``TS_ERR_LAYOUT``).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import layout as L

MAGIC = b"TSBLOCKS"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8s8I")
assert HEADER.size == 40


def abi_version() -> int:
    """``TS_ABI_VERSION`` as written in ``csrc/trainscape.h`` (read from the compiled extension
    when it is built, else from the header text shipped with the sources)."""
    try:
        from ..native.llm import lib

        if lib is not None:
            return int(lib.TS_ABI_VERSION)
    except ImportError:  # pragma: no cover
        pass
    header = Path(__file__).resolve().parents[3] / "csrc" / "trainscape.h"
    m = re.search(r"#define\s+TS_ABI_VERSION\s+(\d+)", header.read_text())
    if m is None:  # pragma: no cover - the header always defines it
        raise RuntimeError("cannot find TS_ABI_VERSION")
    return int(m.group(1))


@dataclass(frozen=True)
class PackFile:
    """The contents of a pack file."""

    sys: np.ndarray
    mdl: np.ndarray
    job: np.ndarray
    space: np.ndarray | None  # int32 space vector, or None without a candidate list
    abi_version: int
    layout_hash: int


def encode_pack(sys: np.ndarray, mdl: np.ndarray, job: np.ndarray,
                space: np.ndarray | None = None) -> bytes:
    """The bytes of a pack file for these blocks (and space vector)."""
    sp = np.zeros(0, dtype="<i4") if space is None else np.asarray(space, dtype="<i4")
    head = HEADER.pack(MAGIC, FORMAT_VERSION, abi_version(), L.layout_hash(), L.N_SYS,
                       L.N_MODEL, L.N_JOB, int(sp.size), 0)
    body = b"".join(np.asarray(b, dtype="<f8").tobytes() for b in (sys, mdl, job))
    return head + body + sp.tobytes()


def write_pack(scenario, path: str | Path, candidates: bool = False,
               constraints=None) -> int:
    """Write ``scenario``'s packed blocks (and, with ``candidates``, its space vector) to
    ``path`` atomically; returns the number of bytes written."""
    from ..spec.pack import pack
    from .space_vector import constrained_axes, space_vector

    sys, mdl, job = pack(scenario)
    space = space_vector(constrained_axes(scenario, constraints)) if candidates else None
    data = encode_pack(sys, mdl, job, space)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return len(data)


class PackFormatError(ValueError):
    """Not a pack file this version reads (one-line message)."""


def read_pack(path: str | Path) -> PackFile:
    """Read a pack file (the Python twin of ``ts_blocks_load``, for tests and tools)."""
    data = Path(path).read_bytes()
    if len(data) < HEADER.size:
        raise PackFormatError(f"{path}: not a trainscape pack file (too short)")
    magic, fmt, abi, lhash, n_sys, n_mdl, n_job, n_space, _ = HEADER.unpack_from(data)
    if magic != MAGIC or fmt != FORMAT_VERSION:
        raise PackFormatError(f"{path}: not a trainscape pack file of format {FORMAT_VERSION}")
    if abi != abi_version():
        raise PackFormatError(f"{path}: written for ABI version {abi}, this is {abi_version()}")
    if lhash != L.layout_hash():
        raise PackFormatError(f"{path}: layout hash {lhash:#010x} differs from this build's "
                              f"{L.layout_hash():#010x}: re-run trainscape pack")
    if (n_sys, n_mdl, n_job) != (L.N_SYS, L.N_MODEL, L.N_JOB) or \
            len(data) != HEADER.size + 8 * (n_sys + n_mdl + n_job) + 4 * n_space:
        raise PackFormatError(f"{path}: block sizes do not match the file length")
    off = HEADER.size
    blocks = []
    for n in (n_sys, n_mdl, n_job):
        blocks.append(np.frombuffer(data, dtype="<f8", count=n, offset=off).astype(np.float64))
        off += 8 * n
    space = (np.frombuffer(data, dtype="<i4", count=n_space, offset=off).astype(np.int32)
             if n_space else None)
    return PackFile(*blocks, space=space, abi_version=abi, layout_hash=lhash)
