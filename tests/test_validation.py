"""Validation: every claimed figure recomputes from its evidence under validation/, docs/validation.md is
what the claim files render, and no document quotes a figure its claim does not print.

The quoting rule: a figure rig claims is quoted as a link to its claim, `[FIGURE](docs/validation.md#ID)`
(any relative path ending in `validation.md#ID`), in README.md, docs/*.md, recipes/*.yaml and every other
tracked text file. Such a link holds when ID is a claim under validation/ and FIGURE (whitespace runs read
as one space, a YAML comment's `#` at a wrapped line's start dropped) is character for character a value
that claim prints: the claim's own value, one of its measurements' figures, or its id. A figure's evidence
gives it when rig's own code, run on the evidence, prints those same characters (rig.validation.recompute).
"""

from __future__ import annotations

import ast
import io
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import REPO

from rig.errors import Damaged, Invalid, NotFound
from rig.validation.__main__ import main
from rig.validation.claims import VALIDATION_DIR, Claim, check_claim, read_claim, read_claims, summary_value
from rig.validation.docs import DOCS_PATH, render
from rig.validation.evidence import EvidenceStore, unpack
from rig.validation.kinds import KINDS
from rig.validation.quotes import check_quotes, quoted_figures
from rig.validation.recompute import recompute, verdict_line

CLAIMS = read_claims()
HEAVY = {"load run"}  # kinds whose recompute reads thousands of streams' records (~20-30 s each)


def _sharing(claims: list[Claim]) -> list[list[Claim]]:
    """The claims in groups that share no evidence with one another: claims that read one archive
    are recomputed in one test, so its store computes that archive's figures once (two tests could
    land on two xdist workers, each computing them)."""
    groups: list[list[Claim]] = []
    for claim in claims:
        archives = {m.evidence for m in claim.measurements}
        joined = [g for g in groups if archives & {m.evidence for c in g for m in c.measurements}]
        merged = [c for g in joined for c in g] + [claim]
        groups = [g for g in groups if g not in joined] + [merged]
    return groups


def _param(claims: list[Claim]) -> object:
    heavy = any(m.kind in HEAVY for claim in claims for m in claim.measurements)
    return pytest.param(claims, id="+".join(claim.id for claim in claims), marks=[pytest.mark.slow] if heavy else [])


def test_every_claim_states_what_a_reader_needs_and_its_evidence_is_there():
    assert len(CLAIMS) >= 8
    for claim in CLAIMS:
        assert claim.attention_backend.strip() and claim.hardware.strip() and claim.engine.strip(), claim.id
        for measurement in claim.measurements:
            assert measurement.kind in KINDS, (claim.id, measurement.kind)
            assert (VALIDATION_DIR / measurement.evidence).is_file(), (claim.id, measurement.evidence)
            # rig itself, or rig through the packed steps of a host that may vanish
            assert measurement.command.startswith(("rig ", "python ", "bash benchmarks/gpu-host/step.sh ")), (
                claim.id, measurement.command)


def test_every_vllm_claim_names_its_attention_backend():
    """Users run FlashAttention 3 on Hopper; most vLLM figures were measured on Triton attention (their
    offline install left FlashAttention out): each vLLM claim says which."""
    for claim in CLAIMS:
        if "vLLM" in claim.engine:
            assert "TRITON_ATTN" in claim.attention_backend or "FLASH_ATTN" in claim.attention_backend, claim.id


@pytest.fixture(scope="module")
def store():
    """One store for the module (per xdist worker): a test's claims that share evidence recompute it once."""
    with EvidenceStore(VALIDATION_DIR) as shared:
        yield shared


@pytest.mark.parametrize("claims", [_param(group) for group in _sharing(CLAIMS)])
def test_every_claimed_figure_recomputes_from_its_evidence(claims, store):
    for claim in claims:
        result = recompute(claim, store)
        assert result.error is None, (claim.id, str(result.error))
        assert [(c.name, c.claimed, c.recomputed) for c in result.mismatches] == [], claim.id
        assert result.recomputed_value() == claim.value, claim.id


def test_docs_validation_md_is_rendered_from_the_claim_files():
    assert DOCS_PATH.read_text() == render(CLAIMS), "stale: python -m rig.validation --write-docs"


def test_no_document_quotes_a_figure_its_claim_does_not_print():
    assert [str(problem) for problem in check_quotes(REPO, CLAIMS)] == []


def test_nothing_in_rig_imports_the_validation_package():
    """Validation reads what the rest of rig measured; nothing measures through it."""
    importers = []
    for path in sorted((REPO / "rig").rglob("*.py")):
        if path.is_relative_to(REPO / "rig" / "validation"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            importers += [str(path.relative_to(REPO)) for name in names if name.startswith("rig.validation")]
    assert importers == []


# ---- the quoting rule on small texts ------------------------------------------------------------

def _claim(**changes: object) -> Claim:
    data = {"schema": 1, "id": "gpu-delay", "title": "t", "claim": "c", "figure": "headline", "value": "-0.91% [-0.97%, -0.84%] slower",
            "hardware": "h", "engine": "e", "attention_backend": "a",
            "measurements": [{"date": "2026-12-02", "command": "rig compare x", "kind": "comparison", "evidence": "gpu-delay/c.tar.xz",
                              "figures": {"headline": "-0.91% [-0.97%, -0.84%] slower", "per token": "+40.2 us"}}]}
    return Claim.model_validate(data | changes)


def _problems(text: str) -> list[str]:
    return [p.problem for p in quoted_figures(text, "doc.md", {"gpu-delay": _claim()})]


def test_a_quoted_figure_its_claim_prints_holds_and_nested_brackets_are_read_whole():
    assert _problems("It reads [-0.91% [-0.97%, -0.84%] slower](docs/validation.md#gpu-delay) on vLLM.") == []
    assert _problems("per token [+40.2 us](../docs/validation.md#gpu-delay)") == []
    assert _problems("see [gpu-delay](validation.md#gpu-delay)") == []  # the id: a link that quotes no figure


def test_a_quoted_figure_the_claim_does_not_print_fails():
    assert len(_problems("rig resolves [1.3%](docs/validation.md#gpu-delay)")) == 1
    assert len(_problems("[-0.91%](docs/validation.md#gpu-delay)")) == 1  # part of a figure is not the figure
    assert len(_problems("[-0.9% [-0.97%, -0.84%] slower](docs/validation.md#gpu-delay)")) == 1


def test_a_link_to_no_claim_or_with_no_text_fails():
    assert "no claim 'gone'" in _problems("[+40.2 us](docs/validation.md#gone)")[0]
    assert len(_problems("[](docs/validation.md#gpu-delay)")) == 1


def test_a_quoted_figure_wrapped_over_lines_reads_as_one_line():
    assert _problems("the arm read [-0.91% [-0.97%,\n-0.84%] slower](docs/validation.md#gpu-delay).") == []
    assert _problems("# on vLLM [-0.91% [-0.97%,\n# -0.84%] slower](../docs/validation.md#gpu-delay)") == []


def test_quotes_report_file_and_line():
    (problem,) = quoted_figures("a\nb [2%](validation.md#gpu-delay)\n", "README.md", {"gpu-delay": _claim()})
    assert (problem.source, problem.line, problem.quoted) == ("README.md", 2, "2%")


# ---- claims as data ------------------------------------------------------------------------------

def test_a_claims_value_is_its_one_measurement_or_the_range_over_several():
    assert summary_value(["-1.29%"]) == "-1.29%"
    assert summary_value(["slower", "slower"]) == "slower"
    assert summary_value(["-1.29%", "-1.64%", "-1.19%"]) == "-1.64% to -1.19%"
    assert summary_value(["27,266", "21,076"]) == "21,076 to 27,266"
    assert summary_value(["slower", "faster"]) is None


def test_a_claim_whose_value_hides_a_measurement_is_refused_with_its_fix():
    two = _claim(measurements=[*_claim().measurements, _claim().measurements[0].model_copy(
        update={"figures": {"headline": "-0.75% [-0.93%, -0.56%] slower"}})], figure="per token", value="+40.2 us")
    check_claim(two, "gpu-delay")  # one measurement gives `per token`: its value
    with pytest.raises(Invalid) as refused:
        check_claim(two.model_copy(update={"figure": "headline", "value": "-0.91% [-0.97%, -0.84%] slower"}), "gpu-delay")
    assert refused.value.field == "value" and "-0.91% [-0.97%, -0.84%] slower to" in refused.value.fix
    with pytest.raises(Invalid):
        check_claim(_claim(), "another-folder")
    with pytest.raises(Invalid):
        check_claim(_claim(figure="nowhere"), "gpu-delay")


def test_a_claim_file_is_read_strictly(tmp_path):
    folder = tmp_path / "gpu-delay"
    folder.mkdir()
    source = (VALIDATION_DIR / "vllm-gpu-delay-40us" / "claim.yaml").read_text()
    (folder / "claim.yaml").write_text(source.replace("id: vllm-gpu-delay-40us", "id: gpu-delay"))
    assert read_claim(folder).id == "gpu-delay"
    (folder / "claim.yaml").write_text(source.replace("id: vllm-gpu-delay-40us", "id: gpu-delay").replace('date: "2026-12-02"', "date: 2026-12-02"))
    with pytest.raises(Damaged):  # YAML 1.1 reads a date, 1.2 a string: refused, not guessed
        read_claim(folder)
    (folder / "claim.yaml").write_text(source.replace("id: vllm-gpu-delay-40us", "id: gpu-delay").replace("hardware:", "hardwar:"))
    with pytest.raises(Invalid) as refused:
        read_claim(folder)
    assert refused.value.field == "hardwar" and "hardware" in refused.value.fix


# ---- recompute: what a wrong figure, missing evidence or a damaged archive gives --------------------

@pytest.fixture
def small_root(tmp_path: Path) -> Path:
    """A validation folder of one claim whose evidence is a real compare.json (fast to recompute)."""
    source = VALIDATION_DIR / "busy-box-token-delay"
    shutil.copytree(source, tmp_path / "busy-box-token-delay")
    return tmp_path


def _busy_box(root: Path) -> Claim:
    return read_claim(root / "busy-box-token-delay")


def test_a_figure_the_evidence_does_not_give_is_a_mismatch_named_in_one_line(small_root):
    claim = _busy_box(small_root)
    first = claim.measurements[0]
    wrong = first.model_copy(update={"figures": first.figures | {"headline prose-c1": "-55.70% [-69.38%, -35.98%] slower"}})
    with EvidenceStore(small_root) as store:
        result = recompute(claim.model_copy(update={"measurements": [wrong, *claim.measurements[1:]]}), store)
    assert not result.ok and [c.name for c in result.mismatches] == ["headline prose-c1"]
    assert verdict_line(result).startswith("MISMATCH  busy-box-token-delay: headline prose-c1: claimed -55.70%")


def test_missing_or_damaged_evidence_is_one_line_with_its_fix(small_root):
    claim = _busy_box(small_root)
    (small_root / "busy-box-token-delay" / "compare-2.tar.xz").unlink()
    (small_root / "busy-box-token-delay" / "compare-3.tar.xz").write_bytes(b"not an archive")
    with EvidenceStore(small_root) as store:
        missing = recompute(claim, store)
        assert isinstance(missing.error, NotFound) and verdict_line(missing).startswith("BAD       busy-box-token-delay: validation/")
        damaged = recompute(claim.model_copy(update={"measurements": claim.measurements[2:]}), store)
        assert isinstance(damaged.error, Damaged) and "xz" in damaged.error.fix
        unknown = recompute(claim.model_copy(update={"measurements": [claim.measurements[0].model_copy(update={"kind": "guess"})]}), store)
        assert isinstance(unknown.error, Invalid) and unknown.error.field == "kind"


def _archive(path: Path, name: str, data: bytes = b"{}", kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    with tarfile.open(path, "w:xz") as tar:
        tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize("name,kind,link", [("../outside.json", tarfile.REGTYPE, ""), ("/etc/passwd", tarfile.REGTYPE, ""),
                                             ("link", tarfile.SYMTYPE, "/etc/passwd"), ("fifo", tarfile.FIFOTYPE, "")])
def test_an_archive_that_would_write_outside_its_folder_or_not_a_plain_file_is_refused(tmp_path, name, kind, link):
    archive = tmp_path / "evidence.tar.xz"
    _archive(archive, name, kind=kind, link=link)
    (tmp_path / "out").mkdir()
    with pytest.raises(Damaged):
        unpack(archive, tmp_path / "out", "validation/x/evidence.tar.xz")
    assert not (tmp_path / "outside.json").exists()


def test_the_command_answers_first_and_exits_by_its_answer(capsys):
    assert main(["--claim", "busy-box-token-delay"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("OK: every figure of 1 claim(s)") and lines[1].startswith("OK        busy-box-token-delay: verdict")
    assert main(["--claim", "no-such-claim"]) == 2
    assert "no-such-claim" in capsys.readouterr().err


def test_a_file_rig_refuses_inside_an_archive_is_named_inside_it(small_root):
    folder = small_root / "busy-box-token-delay"
    _archive(folder / "compare-1.tar.xz", "compare.json", b'{"schema": 5}')
    claim = _busy_box(small_root)
    with EvidenceStore(small_root) as store:
        result = recompute(claim, store)
    assert isinstance(result.error, Damaged)
    assert result.error.where == "validation/busy-box-token-delay/compare-1.tar.xz:compare.json"
