"""Load tests: Locust drives the server, rig keeps raw per-request records and computes from them."""
