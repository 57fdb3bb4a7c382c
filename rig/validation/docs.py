"""docs/validation.md, rendered from the claim files: one section per claim, one source of truth.

`python -m rig.validation --write-docs` writes it; a test fails when the committed page is not what
the claim files render.
"""

from __future__ import annotations

from rig.paths import REPO_ROOT
from rig.validation.claims import Claim
from rig.validation.kinds import KINDS

DOCS_PATH = REPO_ROOT / "docs" / "validation.md"

INTRO = """\
# Validation: what rig claims, and how to check it yourself

Every figure rig claims about a real engine, a client or a benchmark is listed here with the evidence
it is recomputed from. Each claim is declared once, in `validation/<id>/claim.yaml`, beside its evidence:
the raw files rig wrote when it measured (boot entries of a comparison or of a race, the request records
and client statistics of a load test, a benchmark's samples), packed as `.tar.xz`. One command recomputes every
figure from them with rig's own code and says, claim by claim, whether the evidence still gives it:

```
python -m rig.validation                  # OK / MISMATCH per claim, answer first; exit 0 only when all match
python -m rig.validation --claim ID -v    # one claim, every figure beside its recomputation
```

This page is rendered from the claim files (`python -m rig.validation --write-docs`); a test fails when
it is stale. Elsewhere (README.md, docs/, recipes/) a figure is quoted as a link to its claim,
`[-0.91% [-0.97%, -0.84%] slower](validation.md#vllm-gpu-delay-40us)`, and a test fails when the
linked claim does not print that figure.

Where a claim was measured more than once, every measurement is shown, and a difference between them
that no one has explained is named under it. The vLLM and SGLang runs used Triton attention kernels
(`--attention-backend TRITON_ATTN`, SGLang's `triton`), because their offline install on an air-gapped
H200 host left FlashAttention out; each claim states its backend.
"""


def _anchor_table(claims: list[Claim]) -> list[str]:
    lines = ["| claim | figure | value |", "| --- | --- | --- |"]
    lines += [f"| [{c.id}](#{c.id}) | {c.figure} | {_cell(c.value)} |" for c in claims]
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def section(claim: Claim) -> list[str]:
    several = len(claim.measurements) > 1
    lines = [f"## {claim.id}", "", f"**{claim.title}**", "", claim.claim.strip(), "",
             f"- Figure: {claim.figure}: **{claim.value}**" + (" (over every measurement)" if several else ""),
             f"- Hardware: {claim.hardware}",
             f"- Engine: {claim.engine}",
             f"- Attention backend: {claim.attention_backend}",
             f"- Recompute: `python -m rig.validation --claim {claim.id}`", ""]
    for number, m in enumerate(claim.measurements, 1):
        title = f"Measurement {number} of {len(claim.measurements)}" if several else "Measurement"
        lines += [f"### {claim.id}: {title.lower()}, {m.date}", "",
                  f"- Command: `{m.command}`",
                  f"- Evidence: `validation/{m.evidence}`",
                  f"- Recomputed by: {KINDS[m.kind].method if m.kind in KINDS else m.kind}"]
        lines += [f"- Note: {m.note.strip()}"] if m.note else []
        lines += ["", "| figure | as printed |", "| --- | --- |"]
        lines += [f"| {_cell(name)} | {_cell(value)} |" for name, value in m.figures.items()]
        lines.append("")
    if claim.differences:
        lines += ["**Not explained:**", ""] + [f"- {difference.strip()}" for difference in claim.differences] + [""]
    return lines


def render(claims: list[Claim]) -> str:
    lines = [INTRO, *_anchor_table(claims), ""]
    for claim in claims:
        lines += section(claim)
    return "\n".join(lines).rstrip() + "\n"
