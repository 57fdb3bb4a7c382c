"""Evidence archives: each measurement's files, as rig wrote them, in one .tar.xz under validation/.

An archive is unpacked once per process into a temporary directory, where rig's own readers read it
as they read a results directory (every guard they keep: regular files, size caps, schema versions).
It is input like any other: a member that is not a plain file or folder, or a path that is absolute
or climbs out (`..`), is refused before anything is written (and tarfile's "data" filter guards the
extraction itself), and so is an archive that would unpack past a cap.
The figures each (kind, archive) gives are computed once too: claims that share evidence share them.
"""

from __future__ import annotations

import lzma
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from rig.errors import Damaged, NotFound, RigError

UNPACKED_MAX_BYTES = 1 << 30  # the largest evidence here unpacks to ~60 MB


class EvidenceStore:
    """Unpacked archives and the figures computed from them, for one recompute; use as a context."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self._unpacked: dict[str, Path] = {}
        self._figures: dict[tuple[str, str], dict[str, str]] = {}

    def __enter__(self) -> EvidenceStore:
        self._scratch = tempfile.TemporaryDirectory(prefix="rig-validation-")
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    def unpacked(self, evidence: str) -> Path:
        """The directory `evidence` (relative to the validation folder) unpacks to."""
        if evidence not in self._unpacked:
            if self._scratch is None:
                raise RuntimeError("EvidenceStore is used as a context manager")
            target = Path(tempfile.mkdtemp(dir=self._scratch.name))
            unpack(self.root / evidence, target, f"validation/{evidence}")
            self._unpacked[evidence] = target
        return self._unpacked[evidence]

    def figures(self, kind: str, evidence: str, compute: Callable[[Path], dict[str, str]]) -> dict[str, str]:
        key = (kind, evidence)
        if key not in self._figures:
            directory = self.unpacked(evidence)
            try:
                self._figures[key] = compute(directory)
            except RigError as error:  # name the file inside its archive, not the scratch directory
                inside = error.where.removeprefix(f"{directory}/")
                where = f"validation/{evidence}:{inside}" if inside != error.where else error.where
                raise type(error)(where, error.field, error.problem, error.fix) from None
        return self._figures[key]


def unpack(archive: Path, target: Path, where: str) -> None:
    if not archive.is_file():
        raise NotFound(where, "(file)", "no such evidence archive", "name an archive under validation/ (claim.yaml: evidence)")
    try:
        with tarfile.open(archive, mode="r:xz") as tar:
            members = tar.getmembers()
            for member in members:  # plain files and folders inside the archive's own folder, nothing else
                if not (member.isfile() or member.isdir()) or member.name.startswith("/") or ".." in Path(member.name).parts:
                    raise Damaged(where, member.name, "not a plain file or folder inside the archive",
                                  "pack only the files rig wrote, by relative paths")
            size = sum(member.size for member in members)
            if size > UNPACKED_MAX_BYTES:
                raise Damaged(where, "(file)", f"unpacks to {size:,} bytes, over {UNPACKED_MAX_BYTES:,}",
                              "keep only what recomputing the claim needs")
            tar.extractall(target, members=members, filter="data")
    except (tarfile.TarError, lzma.LZMAError, EOFError) as error:
        raise Damaged(where, "(file)", f"not a .tar.xz archive rig can unpack ({type(error).__name__}: {error})",
                      "pack it again: tar -cf - FILES | xz > ARCHIVE") from None
