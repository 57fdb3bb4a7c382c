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
    temporary = _stage(target, text, mode)
    try:
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


def write_files_atomic(files: dict[Path, str]) -> None:
    """Write several files all-or-nothing: every file is staged (written and synced beside its
    target) before any is renamed into place; if staging or a rename fails, the renamed targets are
    put back (from hard-link backups), new ones removed, and directories this call created
    removed, so the tree is byte-identical to before. Only a crash of the machine between two
    renames can leave a mix, and then every file is still whole."""
    created: list[Path] = []
    staged: dict[Path, str] = {}
    backups: dict[Path, str | None] = {}
    renamed: list[Path] = []
    try:
        for target in files:
            missing = [parent for parent in reversed(target.parents) if not parent.exists()]
            for directory in missing:
                directory.mkdir()
                created.append(directory)
        for target, text in files.items():
            staged[target] = _stage(target, text)
        for target in files:
            backups[target] = _backup(target)
        for target in files:
            os.replace(staged[target], target)
            del staged[target]
            renamed.append(target)
    except BaseException:
        for target in reversed(renamed):
            backup = backups.get(target)
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, target)
                    backups[target] = None
                else:
                    os.unlink(target)
        for leftover in [*staged.values(), *(b for b in backups.values() if b)]:
            with contextlib.suppress(OSError):
                os.unlink(leftover)
        for directory in reversed(created):
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise
    for backup in backups.values():
        if backup:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(backup)
    for directory in {target.parent for target in files}:
        _fsync_directory(directory)


def _stage(target: Path, text: str, mode: int | None = None) -> str:
    """A synced temporary copy of `text` beside `target`; `mode` as in write_text_atomic."""
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:200]}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return temporary


def _backup(target: Path) -> str | None:
    """A hard link to the current `target` (None if there is none), to put it back on failure."""
    if not target.exists():
        return None
    fd, backup = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:200]}.", suffix=".bak")
    os.close(fd)
    os.unlink(backup)
    os.link(target, backup)
    return backup
