"""Load-test runs: boot or attach to a server, drive Locust against it, sweep scenarios, and the
`rig loadtest` command. rig/load/ measures; this package orchestrates, so only it imports the boot
drivers and the recipe layer."""
