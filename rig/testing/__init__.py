"""Servers the tests and benchmarks run rig against: a timed server with known timing and the toy
language model behind it. Nothing in rig's product or in loadtests/ imports this package."""
