#!/usr/bin/env bash
# The one command that runs every test: unit, property, simulator scenario and (once the
# Kubernetes driver lands) end-to-end tests. Everything it needs is installed by the
# project's own files; a fresh machine only needs the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> cargo test (unit, property and simulator scenario tests)"
cargo test --all-targets --locked

echo "==> the bundled default scenario must run with both invariants at 0"
cargo run --quiet --locked -- simulate --output json > target/default-report.json
echo "default scenario: OK (report in target/default-report.json)"
