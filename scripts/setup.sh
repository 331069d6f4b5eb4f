#!/usr/bin/env bash
# Installs every Debian package fp8rl's build, tests, oracles and benchmarks need.
# Idempotent: packages already installed are skipped; nothing is downloaded at build time.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config      # build
  libgtest-dev libgmock-dev             # unit tests
  libfmt-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  python3-numpy python3-torch           # test oracles, run with /usr/bin/python3
  libdnnl-dev                           # oneDNN, optional: the peer of `fp8rl bench kernels` (skipped without it)
  ocl-icd-opencl-dev opencl-c-headers   # Debian's dnnl-config.cmake requires OpenCL to configure
  chromium                              # headless browser: the report test draws the page
  libopenmpi-dev openmpi-bin           # data parallelism (optional at build time) and its tests
  strace                                # the failure tests inject write errors (ENOSPC) with it
  bubblewrap                            # the sandbox of model-written code (task.reward.builtin: python_tests)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---- npm packages ---------------------------------------------------------------------------------
# Each set lives in its own directory: a committed package.json + package-lock.json, and a
# gitignored node_modules/ that `npm install --prefix DIR` fills (a no-op when it is up to date).
if ! command -v npm > /dev/null; then
  echo "setup: installing nodejs npm"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
# The independent implementations the tests compare with: a TensorBoard event-file reader
# (tools/oracles/tfevents_check.js) and the Llama 3 tokenizer (tools/oracles/tokenizer_check.js).
npm install --prefix "$root/tools/oracles" --no-audit --no-fund --loglevel=error
echo "setup: npm packages of tools/oracles present"
# uPlot, the chart library that `fp8rl report` compiles into its pages (src/report/report_assets.cmake).
npm install --prefix "$root/third_party/uplot" --no-audit --no-fund --loglevel=error
echo "setup: npm packages of third_party/uplot present"
