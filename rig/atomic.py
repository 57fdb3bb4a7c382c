"""Atomic file writes: a reader sees the old file or the new one, never a truncated one.

Every file a later rig command reads (boot records, state, rendered files, summaries, compare
entries, a pinned recipe) goes through `write_text_atomic`: a temporary file in the same
directory (so the rename never crosses a filesystem), fsync, then `os.replace`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: str | os.PathLike[str], text: str, mode: int | None = None) -> Path:
    """Write `text` (UTF-8) to `path` atomically; `mode` sets the permission bits (default: the
    existing file's, else 0o644 less the umask, as a plain open() would give)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _fsync_directory(target.parent)
    return target


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (a crash right after must not bring back the old name)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the data itself is already synced
    finally:
        os.close(descriptor)
