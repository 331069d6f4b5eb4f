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
# RealShape.* (a GRPO run at Qwen3-0.6B's width and vocabulary) runs in the release build only:
# under the sanitizers its 187 M parameters take minutes, and the same code runs there at small shapes.
# The data-parallel test over TCP runs there too (the sanitizers see the same code over shared memory).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -E '^RealShape\.|^data_parallel_same_bits_tcp$'

