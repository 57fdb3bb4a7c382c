"""Why a run was fast or slow: the engine's metrics, GPU telemetry, host fingerprints, timelines."""
