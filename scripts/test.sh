#!/usr/bin/env bash
# Sets up, builds and runs every test: the release build, then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh all
jobs=$(nproc)
echo "== tests (release) =="
ctest --test-dir build --output-on-failure -j "$jobs"
echo "== tests (address + undefined-behaviour sanitizers) =="
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"
