"""The default design of a comparison, read by `rig compare` (its parser and its handler) and
`make compare` alike; standard library only, so the command line's parser stays cheap.

Derived from the noise measured on real engines and the calibration simulation through the
comparison's own statistics (rig/compare/calibration.py, benchmarks/design_at_real_noise.py,
docs/validation.md, vllm-c1-noise and vllm-loaded-noise):

- Boot pairs: on one H200 (vLLM 0.24.0, 8B widths, TP1, CUDA graphs, prose at c=1) eight
  warm boots gave boot sd 0.01% and round sd 0.02% (10 s rounds). At that noise 2 pairs already
  resolve a 0.5% change with 98% power; 4 pairs keep 98-99% up to the ~0.1% spread between warm
  boots that two other machines showed (0.1%/0.04%), and 76% even at ten times the measured noise
  (0.1%/0.2%), with false verdicts at the stated 5% throughout. 4 pairs is also the smallest design
  whose wrong-signed verdicts stay well under 1% at boot sd 3% (the calibration table), so one
  default serves noisier engines too. Use --target to plan for a precision instead.
- Rounds: boot noise dominates, so a third round buys almost nothing (precision 0.21% with 2
  rounds, 0.20% with 3 at 0.1%/0.04%): 2 rounds per boot.
- Round length: 10 s of steady-state window per round at full (GPU) sizes (round sd 0.02%); small
  (CPU) sizes keep each scenario's own duration.
- Boot state: a boot that compiled reads 1.1-1.4% low for its whole life (rig/compare/schedule.py keeps
  it as a burn-in and boots it again).
"""

DEFAULT_BOOTS = 4  # boot pairs (boots per arm, ABBA)
DEFAULT_ROUNDS = 2  # measured rounds per boot
DEFAULT_ROUND_S = 10.0  # measured window of each round at full sizes (--duration overrides it)
FIRST_LOOK = 3  # the fewest pairs a stopping rule's look is made at (rig.compare.sequential)
MAX_PAIRS = 64  # boot pairs (and rounds) a comparison may ask for: 128 boots of a 12-minute engine are a day
MAX_ARMS = 16
MAX_SCENARIOS = 16
