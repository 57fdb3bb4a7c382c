"""What runs inside rig's Locust processes (loadtests/locustfile.py is a shim over it): `process`
(ClientProcess: one object per process, wired to Locust's events), `users` (the user classes),
`stream` (one request on the wire), `schedule` (open-loop arrivals), `watchdog` (read timeouts),
`monitor` (lag, CPU, collections), `writer` (the records file), `shipping` (a remote worker's records
to its master) and `patches` (every change to Locust or urllib3, checked against their versions).
Nothing else in rig imports this package: it imports Locust, which patches the standard library."""
