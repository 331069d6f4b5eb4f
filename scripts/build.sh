#!/usr/bin/env bash
# Builds fp8rl. Usage: scripts/build.sh [release|sanitize|all]   (default: release)
#   release  -> build/        (binary build/fp8rl, tests build/fp8rl_tests)
#   sanitize -> build-asan/   (AddressSanitizer + UndefinedBehaviorSanitizer)
set -euo pipefail
cd "$(dirname "$0")/.."

build_one() {  # dir, cmake args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" > /dev/null
  ninja -C "$dir"
}

case "${1:-release}" in
  release) build_one build -DCMAKE_BUILD_TYPE=Release ;;
  sanitize) build_one build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8RL_SANITIZE=ON ;;
  all)
    build_one build -DCMAKE_BUILD_TYPE=Release
    build_one build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8RL_SANITIZE=ON
    ;;
  *) echo "usage: $0 [release|sanitize|all]" >&2; exit 2 ;;
esac
