"""Comparisons end to end on tiny-cpu: real boots through the native driver, real Locust runs."""

from __future__ import annotations

import json

import pytest

from rig.compare.command import compare

pytestmark = pytest.mark.e2e

DELAY_MS = 10.0


@pytest.fixture
def isolated(results_dir):
    return results_dir


def test_token_delay_is_found_and_greedy_identity_discriminates(isolated):
    out, analysis = compare("tiny-cpu", ["before:RIG_TOKEN_DELAY_MS=0", f"after:RIG_TOKEN_DELAY_MS={DELAY_MS:g}"], "bf16:@bf16",
                            boots=2, rounds=2, scenarios=["prose-c1"], small=True, workers=1, resume=None, progress=False,
                            duration_s=3.0)
    stats = analysis["scenarios"]["prose-c1"]["vs"]["after"]
    assert stats["verdict"] == "slower", stats
    # The injected size: what token_delay measured itself sleeping per model step (overshoot included).
    boots = [json.loads(p.read_text()) for p in sorted((out / "boots").glob("*-after.json"))]
    injected_ms = sum(b["adapter_stats"]["token_delay"]["injected_ms"]["mean"] for b in boots) / len(boots)
    assert DELAY_MS <= injected_ms < DELAY_MS * 1.05
    # Every token costs `injected` more, so tok/s goes from A to 1 / (1/A + injected). In time per
    # token, the CI is the range of added milliseconds the data allow. This server pays ~5% on top of
    # a longer step (measured 10.65 ms per token for 10.13 ms slept), so the CI must meet
    # [injected, 1.1 x injected]: the slowdown is the injection, not something else.
    baseline = stats["baseline_mean"]
    added = sorted(1000 * (1 / (baseline * (1 + c / 100)) - 1 / baseline) for c in stats["ci_pct"])
    assert added[0] <= injected_ms * 1.10 and added[1] >= injected_ms, (added, injected_ms, stats)
    greedy = analysis["greedy"]
    assert all(greedy["identical_across_arms"].values()), greedy
    assert greedy["control"]["discriminates"], greedy["control"]
    assert analysis["boots"]["used"] == 4 and not analysis["boots"]["voided"]
    assert any("token_delay ARMED" in line for line in analysis["boot_log_diff"]["after"])
    for name in ("compare.json", "compare.md", "compare.png", "boot-log-diff.txt", "plan.json"):
        assert (out / name).exists()
    assert "prose-c1" in (out / "compare.md").read_text() and "slower" in (out / "compare.md").read_text()


def test_identical_arms_are_within_noise_and_a_failed_boot_is_voided(isolated):
    # "broken" boots the delay variant with its gate malformed: the adapter refuses, its ARMED line
    # never appears, and the boot checks void the boot instead of measuring an unpatched server.
    out, analysis = compare("tiny-cpu", ["a:RIG_TOKEN_DELAY_MS=0", "b:RIG_TOKEN_DELAY_MS=0", "broken:@delay,RIG_TOKEN_DELAY_MS=abc"],
                            None, boots=2, rounds=2, scenarios=["prose-c1"], small=True, workers=1, resume=None, progress=False,
                            duration_s=3.0)
    assert analysis["scenarios"]["prose-c1"]["vs"]["b"]["verdict"] == "within noise", analysis["scenarios"]
    assert all(analysis["greedy"]["identical_across_arms"].values())
    saved = json.loads((out / "compare.json").read_text())
    assert saved["boots"]["planned"] == 6 and saved["boots"]["used"] == 4
    voided = saved["boots"]["voided"]
    assert [v["arm"] for v in voided] == ["broken", "broken"]
    assert any("token_delay ARMED" in p for p in voided[0]["problems"])
    assert any("refused" in p for p in voided[0]["problems"])
    assert saved["scenarios"]["prose-c1"]["vs"]["broken"]["verdict"] == "no data"
    assert "Voided boot" in (out / "compare.md").read_text()
