"""The `race` evidence kind: a `rig tune` race's directory, packed, recomputed by replaying the race
from its boot entries with rig.tune's own loop and rule; an edited or incomplete race says so."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import REPO

from rig.errors import Damaged
from rig.validation.claims import VALIDATION_DIR, read_claim
from rig.validation.evidence import EvidenceStore, unpack
from rig.validation.kinds import KINDS
from rig.validation.recompute import recompute

CLAIM = "tiny-cpu-token-delay-race"


@pytest.fixture
def race(tmp_path: Path) -> Path:
    """The claim's race directory, unpacked."""
    claim = read_claim(VALIDATION_DIR / CLAIM)
    out = tmp_path / "race"
    out.mkdir()
    unpack(VALIDATION_DIR / claim.measurements[0].evidence, out, "race")
    return out


def _pack(directory: Path, archive: Path) -> None:
    with tarfile.open(archive, "w:xz") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory)), recursive=False)


def test_a_race_recomputes_its_winner_stop_and_every_candidates_figures():
    claim = read_claim(VALIDATION_DIR / CLAIM)
    with EvidenceStore(VALIDATION_DIR) as store:
        result = recompute(claim, store)
    assert result.error is None and result.ok, [(c.name, c.claimed, c.recomputed) for c in result.mismatches]
    figures = {c.name for _, checks in result.checks for c in checks}
    assert {"winner", "stop", "boots spent", "tune.json as written", "looks.json as written"} <= figures
    assert any(name.startswith("vs best ") for name in figures) and any(name.startswith("left ") for name in figures)


def test_the_replay_agrees_with_what_the_race_wrote(race):
    figures = KINDS["race"].compute(race)
    written = json.loads((race / "tune.json").read_text())
    assert figures["winner"] == written["winner"] and figures["stop"] == written["stop_text"]
    assert figures["tune.json as written"] == figures["looks.json as written"] == "the replay's"
    assert figures["boots spent"].startswith(f"{written['boots']} measured")


def test_an_edited_result_file_is_told_apart_from_the_replay(race):
    written = json.loads((race / "tune.json").read_text())
    loser = next(row["candidate"] for row in written["rows"] if row["candidate"] != written["winner"])
    (race / "tune.json").write_text(json.dumps(written | {"winner": loser}))
    figures = KINDS["race"].compute(race)
    assert figures["winner"] == written["winner"] and figures["tune.json as written"] == "differs from the replay"


def test_a_race_missing_a_boot_is_damaged_evidence_named_in_one_line(race, tmp_path):
    boots = sorted((race / "boots").glob("*.json"))
    boots[len(boots) // 2].unlink()
    root = tmp_path / "validation"
    shutil.copytree(VALIDATION_DIR / CLAIM, root / CLAIM)
    claim = read_claim(root / CLAIM)
    _pack(race, root / claim.measurements[0].evidence)
    with EvidenceStore(root) as store:
        result = recompute(claim, store)
    assert isinstance(result.error, Damaged) and "boots/*.json" in result.error.fix
    assert result.error.where.startswith(f"validation/{claim.measurements[0].evidence}:") and "\n" not in str(result.error)


def test_the_kind_is_documented_with_its_method():
    assert "race" in KINDS and "replayed" in KINDS["race"].method
    assert (REPO / "validation" / CLAIM / "claim.yaml").is_file()


def test_floats_another_machine_fits_differently_in_the_last_digits_are_the_replays(race):
    """Another machine's BLAS gives the race's least-squares fit other last digits (1e-13 on a GPU
    host); a changed figure beyond 1e-9 relative is still told apart."""
    written = json.loads((race / "tune.json").read_text())
    row = next(r for r in written["rows"] if r.get("delta_pct") is not None)

    def nudged(by: float) -> dict:
        return written | {"rows": [r | {"delta_pct": r["delta_pct"] * (1 + by)} if r is row else r for r in written["rows"]]}

    (race / "tune.json").write_text(json.dumps(nudged(1e-13)))
    assert KINDS["race"].compute(race)["tune.json as written"] == "the replay's"
    (race / "tune.json").write_text(json.dumps(nudged(1e-6)))
    assert KINDS["race"].compute(race)["tune.json as written"] == "differs from the replay"
