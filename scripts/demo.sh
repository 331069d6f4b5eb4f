#!/usr/bin/env bash
# Sets up, builds and runs fp8rl's default job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
build/fp8rl demo
