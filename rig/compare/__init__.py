"""Before/after comparisons across boots: ABBA boots, warmup discarded, paired deltas with
confidence intervals, a measured noise floor, greedy identity with a control, boot-log diff."""
