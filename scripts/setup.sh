#!/usr/bin/env bash
# Installs every Debian package fp8rl's build, tests, oracles and benchmarks need.
# Idempotent: packages already installed are skipped; nothing is downloaded at build time.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config      # build
  libgtest-dev libgmock-dev             # unit tests
  libfmt-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  python3-numpy python3-torch           # test oracles, run with /usr/bin/python3
  libdnnl-dev                           # oneDNN: the peer in kernel benchmarks
  ocl-icd-opencl-dev opencl-c-headers   # Debian's dnnl-config.cmake requires OpenCL to configure
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
