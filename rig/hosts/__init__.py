"""GPU hosts without a package index, and hosts that may vanish between two steps.

- `spec`: what an offline bundle holds (an engine, what it leaves out and why) and what a host
  already provides;
- `lock`: the pinned, sha256-hashed set of wheels a bundle carries, resolved with uv;
- `wheels`: a wheel rewritten without the files a bundle leaves out (its RECORD kept true);
- `parts`: a file cut into parts of a chosen size and put back together, each part checked;
- `bundle`: `rig bundle build`, all of the above into parts plus the host-side installer;
- `hostside`: the installer that runs on the host with the standard library alone;
- `pack`: `rig pack` / `rig unpack`, a results directory carried from one host to the next.
"""
