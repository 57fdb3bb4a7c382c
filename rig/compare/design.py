"""The default design of a comparison, read by `rig compare` (its parser and its handler) and
`make compare` alike; standard library only, so the command line's parser stays cheap.

Boot pairs: from the calibration table (tests/test_compare_calibration.py), 4 pairs is the
smallest design whose wrong-signed verdicts stay well under 1% at boot sd 3% (2 pairs: 1.4%,
3: 0.8%, 4: 0.15%) while false verdicts stay at the stated 5%; with quiet boots (sd 1%) its
intervals reach a precision of about 2.3%. Use --target to plan for a precision.
"""

DEFAULT_BOOTS = 4  # boot pairs (boots per arm, ABBA)
DEFAULT_ROUNDS = 3  # measured rounds per boot
