#!/usr/bin/env bash
# Pack what session.sh has produced so far into $OUT (the device tool brings $OUT back).
tar -C /tmp -czf $OUT/rig-results.tgz rig-results 2>/dev/null
cp /tmp/session.log $OUT/ 2>/dev/null
ls -la $OUT
