"""Stand-in reproducing the upstream signatures rig_adapters targets (tests only)."""
