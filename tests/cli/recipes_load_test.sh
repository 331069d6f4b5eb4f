#!/usr/bin/env bash
# Every recipe in recipes/ loads: `fp8rl config` resolves its defaults chain, and every key and
# value passes the schema's checks (a renamed key or a bad value in a recipe fails here, naming
# the file, not in a user's first run). Usage: recipes_load_test.sh FP8RL_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
failures=0
count=0
for recipe in "$src"/recipes/*.yaml; do
  count=$((count + 1))
  if out=$("$bin" config "$recipe" 2>&1 > /dev/null); then
    echo "ok: $(basename "$recipe")"
  else
    echo "FAIL: $(basename "$recipe"): $out"
    failures=$((failures + 1))
  fi
done
if [ "$count" -eq 0 ]; then
  echo "FAIL: no recipes under $src/recipes"
  exit 1
fi
echo "$count recipes, $failures failed"
[ "$failures" -eq 0 ]
