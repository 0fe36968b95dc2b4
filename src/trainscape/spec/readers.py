"""Reading input files without blocking or exhausting memory.

Every file trainscape reads from a user (scenario TOML/JSON, DLRM tables CSV) goes through
:func:`read_text`: it opens the path without blocking (``O_NONBLOCK``, so a FIFO or a device
cannot stall the open), accepts regular files only (no FIFOs, sockets, devices such as
``/dev/zero``, directories), refuses files above a size cap before reading them, reads at most
cap + 1 bytes (a file that grows while read is still refused) and decodes UTF-8 strictly.
Problems become a one-line :class:`~trainscape.spec.errors.ScenarioError` naming the path.
Parsers that recurse (``json``, ``tomllib``) are guarded by :func:`parse_guarded`: nesting too
deep for Python's parser is a message, not a ``RecursionError``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .errors import ScenarioError

#: Largest scenario file read: 16 MiB (the biggest example is ~3 KB).
MAX_SCENARIO_BYTES = 16 * 2**20
#: Largest tables CSV read: 256 MiB (10^6 tables at ~40 bytes a row is ~40 MB).
MAX_CSV_BYTES = 256 * 2**20

T = TypeVar("T")


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def read_text(path: str | Path, what: str, max_bytes: int = MAX_SCENARIO_BYTES,
              field: str | None = None) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``max_bytes``).

    ``what`` names the file in messages ("scenario file", "tables CSV"); ``field`` is the
    field path that named the file (e.g. ``model.tables_csv``), else the path itself leads the
    message."""
    where = field or str(path)
    shown = f" {path}" if field else ""
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ScenarioError.at(where, f"{what}{shown} not found" if field else "file not found",
                               None, show_got=False) from None
    except IsADirectoryError:
        raise ScenarioError.at(where, f"{what}{shown} is a directory", None,
                               "a regular file", show_got=False) from None
    except OSError as exc:
        raise ScenarioError.at(where, f"cannot open {what}{shown}: {exc.strerror}", None,
                               show_got=False) from None
    except ValueError:  # a NUL byte in the path
        raise ScenarioError.at(where, f"{what} path contains a NUL byte", str(path),
                               "a file path") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ScenarioError.at(where, f"{what}{shown} is a directory", None,
                                   "a regular file", show_got=False)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket"
                    if stat.S_ISSOCK(st.st_mode) else "a device")
            raise ScenarioError.at(where, f"{what}{shown} is {kind}, not a regular file", None,
                                   "a regular file", show_got=False)
        if st.st_size > max_bytes:
            raise ScenarioError.at(where, f"{what}{shown} is too large ({_mib(st.st_size)})",
                                   None, f"at most {_mib(max_bytes)}", show_got=False)
        os.set_blocking(fd, True)
        chunks = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise ScenarioError.at(where, f"cannot read {what}{shown}: {exc.strerror}", None,
                               show_got=False) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ScenarioError.at(where, f"{what}{shown} is too large (grew while read)", None,
                               f"at most {_mib(max_bytes)}", show_got=False)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ScenarioError.at(where, f"{what}{shown} is not UTF-8 text (byte "
                               f"0x{data[exc.start]:02x} on line {line})", None, "UTF-8 text",
                               show_got=False) from None


def parse_guarded(parse: Callable[[str], T], text: str, where: str, what: str) -> T:
    """``parse(text)``, with nesting too deep for the parser reported as a ScenarioError."""
    try:
        return parse(text)
    except RecursionError:
        raise ScenarioError.at(where, f"{what} nests tables or lists too deeply", None,
                               "at most a few hundred levels", show_got=False) from None


def finite_depth(value: Any, limit: int = 64) -> bool:
    """Whether ``value`` (dicts and lists) nests at most ``limit`` levels (iterative)."""
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            items = v.values()
        elif isinstance(v, list):
            items = v
        else:
            continue
        if d >= limit:
            return False
        stack.extend((x, d + 1) for x in items)
    return True
