#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan) in build-fuzz/ and runs each for
# SECONDS (default 600; a finding ends a target's run early), then prints one line per target:
# seconds run, executions, corpus size (files), and "ok" or "FOUND: <artifacts>". Exits 1 if any target found something. Not run by CI.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (TARGET: recipe, fuzz_recipe, ...; default all)
# Each target grows a working corpus in build-fuzz/corpus/TARGET, seeded from fuzz/corpus/TARGET
# (which stays as committed), and writes crash, leak, timeout and OOM inputs to
# build-fuzz/artifacts/TARGET/; reproduce one with `build-fuzz/fuzz_TARGET ARTIFACT`
# (fuzz/README.md). Logs: build-fuzz/logs/TARGET.log.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift $(( $# > 0 ? 1 : 0 ))
all_targets=(recipe safetensors hf_config tokenizer jsonl metrics)
targets=()
for t in "${@:-${all_targets[@]}}"; do
  t=${t#fuzz_}
  if [[ ! " ${all_targets[*]} " == *" $t "* ]]; then
    echo "fuzz: unknown target '$t' (known: ${all_targets[*]})" >&2
    exit 2
  fi
  targets+=("$t")
done
if [[ ! $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]   (SECONDS_PER_TARGET: a whole number >= 1)" >&2
  exit 2
fi
if ! command -v clang++ > /dev/null; then
  echo "fuzz: clang++ not found; the fuzz targets need clang with libFuzzer: apt-get install clang" >&2
  exit 2
fi

cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
ninja -C build-fuzz

mkdir -p build-fuzz/logs
summary=()
found_any=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t
  artifacts=build-fuzz/artifacts/$t
  log=build-fuzz/logs/$t.log
  tmp=build-fuzz/tmp/$t  # the target's input files; left behind by a crash, so kept out of /tmp
  mkdir -p "$corpus" "$artifacts"
  rm -rf "$tmp" && mkdir -p "$tmp"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2> /dev/null || true
  marker=$(mktemp)  # artifacts newer than this are this run's
  echo "== fuzz_$t: ${seconds} s"
  status=0
  start=$SECONDS
  TMPDIR=$PWD/$tmp ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    build-fuzz/fuzz_"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" > "$log" 2>&1 || status=$?
  rm -rf "$tmp"
  elapsed=$((SECONDS - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  size=$(find "$corpus" -type f | wc -l)
  mapfile -t new < <(find "$artifacts" -type f -newer "$marker" | sort)
  rm -f "$marker"
  if [ ${#new[@]} -gt 0 ]; then
    result="FOUND: ${new[*]}"
    found_any=1
  elif [ "$status" -ne 0 ]; then
    result="FOUND: fuzzer exited with status $status and no artifact (see $log)"
    found_any=1
  else
    result=ok
  fi
  summary+=("$(printf '%-17s %5s s  %10s execs  corpus %5s  %s' "fuzz_$t" "$elapsed" "${execs:-?}" "$size" "$result")")
  echo "${summary[-1]}"
done

echo "== summary"
printf '%s\n' "${summary[@]}"
exit "$found_any"
