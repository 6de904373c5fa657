"""What the charm is released with: its resource tarballs, built from pinned
Go modules (scripts/build-resource). Not part of the charm, nor of the
test harness; the sandbox builds its resource through it."""
