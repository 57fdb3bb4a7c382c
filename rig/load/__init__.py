"""Load measurement: scenarios, raw per-request records and the figures computed from them. It never
boots a server or reads a recipe; rig.loadrun runs a load test and drives this package."""
