#!/usr/bin/env bash
# The GPU performance check, for the few minutes a GPU is lent: on a machine with an NVIDIA GPU,
# a release binary built elsewhere with
#   cargo build --release --locked --features cuda -p hessian-recipes
# and a Python with torch and transformers (trl, peft and datasets too for TRL's side), it
# measures, per model shape, and writes everything under OUT (which must not exist):
#   1. nvidia-smi and the binary's --version                          -> OUT/gpu.txt, OUT/version.txt
#   2. a random model of each shape, written by transformers from its config
#      (scripts/random_model.py; the tokenizer is SmolLM2's)         -> OUT/models/SHAPE/
#   3. one decode token: `generate` of 8 prompts with 8 and 40 new tokens (end of turn ignored,
#      temperature 1); the difference gives ms per decode step, kernel launches and host reads
#      per token (the binary counts them)                             -> OUT/SHAPE-decode-N.log
#   4. `train` completion tokens/s on the shape's plan (LoRA r8 a16 on q,k,v,o, the base in
#      --dtype), with the device's peak memory (nvidia-smi every 100 ms, the whole device) and
#      the process's peak RSS (/usr/bin/time -v, when present)       -> OUT/SHAPE-train/
#   5. the same plan with TRL's GRPOTrainer + PEFT (scripts/trl_grpo_cpu.py --model-dir, the
#      same model folder, the same dtype), when TRL=1                 -> OUT/SHAPE-trl.jsonl
#   6. the three-process native qualification of plans/native-tiny.json in --dtype on the
#      device: equal or not                                           -> OUT/qualify/
#   7. data-parallel on one GPU: plans/native-tiny.json with parallel.shards 2, trained by one
#      rank and by two (`launch --nproc 2`, both on GPU 0 through HR_RANK_GPU=0): the same
#      evidence, byte for byte, or not                                -> OUT/ranks/
#   8. OUT/summary.txt: each stage's status and the figures, one table.
# Stages are independent: one failing does not stop the others; the script exits 1 if any failed.
#
# Shapes (--shapes, comma-separated; default both):
#   smollm2        SmolLM2-135M's config (the --tokenizer folder's config.json): 4 prompts x 8
#                  generations x 32 new tokens, TRL's benchmark plan and docs/gpu's earlier runs
#   qwen2.5-0.5b   scripts/shapes/qwen2.5-0.5b.json: 8 prompts x 8 generations x 256 new tokens
#
# Usage: scripts/gpu-perf.sh [--bin PATH] [--tiny DIR] [--tokenizer DIR] [--device cuda|vulkan|cpu]
#                            [--dtype bf16|f16|f32] [--shapes LIST] [--steps N] OUT
#   --bin        the binary (default target/release/hessian-recipes)
#   --tiny       the tiny test model folder, for the qualification (default target/tiny-model)
#   --tokenizer  a folder with SmolLM2-135M-Instruct's config.json, tokenizer.json and
#                tokenizer_config.json (`hessian-recipes model fetch smollm2` prints one; only
#                those three files need to travel)
#   --device     cpu (or vulkan) rehearses the script without an NVIDIA GPU: nvidia-smi and the
#                device-memory sampling are skipped
#   --dtype      the base weights' dtype (default bf16, what a GPU run of a real model uses)
#   --steps      GRPO steps per train run (default 4; the first is not timed, so at least 2 for
#                a throughput figure; 1 only proves the run works and gives its memory)
# Environment: PYTHON (default python3) writes the models; TRL=1 also runs TRL with it.
set -uo pipefail

bin=target/release/hessian-recipes
tiny=target/tiny-model
tokenizer=""
device=cuda
dtype=bf16
shapes=smollm2,qwen2.5-0.5b
steps=4
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --tiny) tiny="$2"; shift 2 ;;
    --tokenizer) tokenizer="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    -*) echo "gpu-perf: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "gpu-perf: one OUT folder only" >&2; exit 2; }; out="$1"; shift ;;
  esac
done
python=${PYTHON:-python3}
[ -n "$out" ] || { echo "gpu-perf: name an OUT folder (see --help)" >&2; exit 2; }
case "$device" in cuda|vulkan|cpu) ;; *) echo "gpu-perf: --device cuda|vulkan|cpu" >&2; exit 2 ;; esac
case "$dtype" in f32|f16|bf16) ;; *) echo "gpu-perf: --dtype f32|f16|bf16" >&2; exit 2 ;; esac
case "$steps" in ''|*[!0-9]*|0) echo "gpu-perf: --steps takes a number of at least 1" >&2; exit 2 ;; esac
for s in ${shapes//,/ }; do
  case "$s" in smollm2|qwen2.5-0.5b) ;; *) echo "gpu-perf: --shapes: unknown shape $s (smollm2, qwen2.5-0.5b)" >&2; exit 2 ;; esac
done
[ -e "$out" ] && { echo "gpu-perf: $out exists; name a new folder" >&2; exit 2; }
[ -x "$bin" ] || { echo "gpu-perf: no binary at $bin (build it with --features cuda; --bin PATH)" >&2; exit 2; }
[ -f "$tiny/config.json" ] || { echo "gpu-perf: no tiny model at $tiny (--tiny DIR)" >&2; exit 2; }
[ -n "$tokenizer" ] && [ -f "$tokenizer/tokenizer.json" ] && [ -f "$tokenizer/config.json" ] ||
  { echo "gpu-perf: --tokenizer DIR: a folder with SmolLM2's config.json and tokenizer.json" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
tokenizer=$(cd "$tokenizer" && pwd)
mkdir -p "$out/plans" "$out/models"
out=$(cd "$out" && pwd)
failed=0
summary="$out/summary.txt"
: > "$summary"
echo "device $device, base weights $dtype, $steps steps per train run" >> "$summary"

stage() { # stage NAME SECONDS COMMAND...: runs with a time limit, logs, records the status
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  echo "gpu-perf: $name" >&2
  # bash -c, so that a stage may be one of the functions below (exported).
  timeout "$limit" bash -c '"$@"' bash "$@" > "$out/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || failed=1
  printf '%-24s exit %3d  %4ds\n' "$name" "$rc" "$((SECONDS - t0))" >> "$summary"
  return $rc
}

# The device's peak memory while a command runs (MiB, the whole device as nvidia-smi sees it).
peak_gpu() { # peak_gpu FILE COMMAND...
  local file="$1"; shift
  if [ "$device" != cuda ]; then "$@"; return $?; fi
  ( while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.1; done ) \
    > "$file.samples" 2>/dev/null &
  local sampler=$!
  "$@"; local rc=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  sort -n "$file.samples" | tail -1 > "$file"
  return $rc
}

# Peak RSS of a command, when GNU time is there.
timed() { # timed FILE COMMAND...
  local file="$1"; shift
  if [ -x /usr/bin/time ]; then /usr/bin/time -v -o "$file" "$@"; else "$@"; fi
}

export device
export -f peak_gpu timed

if [ "$device" = cuda ]; then
  stage gpu 30 nvidia-smi
  cp "$out/gpu.log" "$out/gpu.txt" 2>/dev/null
fi
stage version 10 "$bin" --version && cp "$out/version.log" "$out/version.txt"

prompts=("What is 3 + 4?" "Hi there" "Write a short poem about the sea." "What is 12 + 30?"
         "Name three colours." "What is 7 * 6?" "Say hello in French." "Count from one to five.")

for shape in ${shapes//,/ }; do
  case "$shape" in
    smollm2) config="$tokenizer/config.json"; tasks=4; new=32 ;;
    qwen2.5-0.5b) config="$here/scripts/shapes/qwen2.5-0.5b.json"; tasks=8; new=256 ;;
  esac
  model="$out/models/$shape"
  stage "$shape-model" 300 "$python" "$here/scripts/random_model.py" "$config" "$model" \
    --tokenizer "$tokenizer" || continue

  for n in 8 40; do
    args=(generate --device "$device" --dtype "$dtype" --model "$model" --max-new-tokens "$n"
          --ignore-eos --temperature 1 --seed 3)
    for p in "${prompts[@]}"; do args+=(--prompt "$p"); done
    stage "$shape-decode-$n" 300 "$bin" "${args[@]}"
  done

  cat > "$out/plans/$shape.json" <<JSON
{"schema_version": 1, "name": "gpu-perf-$shape",
 "model": {"path": "$model", "dtype": "$dtype", "lora": {"rank": 8, "alpha": 16.0, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}},
 "environment": {"backend": "fixture", "tasks": {"kind": "arithmetic", "count": 64, "seed": 0}},
 "grpo": {"tasks_per_step": $tasks, "num_generations": 8, "max_completion_length": $new, "max_turn_tokens": $new,
          "num_iterations": 1, "beta": 0.0, "prompt_format": "chat",
          "system_prompt": "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
 "optimizer": {"learning_rate": 1e-5, "warmup_steps": 0, "decay": "constant", "weight_decay": 0.0},
 "steps": $steps, "checkpoints": {"every": $steps}, "seeds": {"sampling": 0, "adapter_init": 0, "task_order": 0}}
JSON
  stage "$shape-train" 3600 peak_gpu "$out/$shape-train.gpu-mib" timed "$out/$shape-train.time" \
    "$bin" train --device "$device" --plan "$out/plans/$shape.json" --output "$out/$shape-train"

  if [ "${TRL:-}" = 1 ]; then
    [ "$dtype" = bf16 ] && trl_dtype=bfloat16 || trl_dtype=float32
    stage "$shape-trl" 3600 peak_gpu "$out/$shape-trl.gpu-mib" "$python" "$here/scripts/trl_grpo_cpu.py" \
      --model smollm2 --lora --model-dir "$model" --dtype "$trl_dtype" --device "$device" \
      --steps "$steps" --warmup 1 --num-generations 8 --batch $((tasks * 8)) \
      --max-completion-length "$new" --question "What is {a} + {b}?" --operands 0 9 \
      --workdir "$out/$shape-trl-work" --out "$out/$shape-trl.jsonl"
  fi
done

# The qualification: reference, stopped and resumed processes on the device, in --dtype.
sed "s#\"path\": \"[^\"]*\"#\"path\": \"$(cd "$tiny" && pwd)\", \"dtype\": \"$dtype\"#" \
  "$here/plans/native-tiny.json" > "$out/plans/native-tiny.json"
stage qualify 300 "$bin" qualify native --device "$device" --plan "$out/plans/native-tiny.json" \
  --output "$out/qualify"

# Data-parallel on one GPU: the same plan in two shards, one rank against two.
"$python" - "$out/plans/native-tiny.json" "$out/plans/native-tiny-shards2.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
plan["parallel"] = {"shards": 2}
json.dump(plan, open(sys.argv[2], "w"))
PY
ranks_compare() {
  "$bin" train --device "$device" --plan "$out/plans/native-tiny-shards2.json" --output "$out/ranks/one" &&
  HR_RANK_GPU=0 "$bin" launch --nproc 2 -- "$bin" train --device "$device" \
    --plan "$out/plans/native-tiny-shards2.json" --output "$out/ranks/two" || return
  if cmp "$out/ranks/one/evidence.jsonl" "$out/ranks/two/evidence.jsonl"; then
    echo "one rank and two ranks: the same evidence ($(wc -l < "$out/ranks/one/evidence.jsonl") steps)"
  else
    echo "one rank and two ranks: the evidence differs"; return 1
  fi
}
export bin out
export -f ranks_compare
mkdir -p "$out/ranks"
stage ranks 300 ranks_compare

# The table: per shape, one decode token (40 - 8 new tokens apart), train, TRL, memory.
{
  echo
  printf '%-14s %10s %12s %10s %12s %12s %10s %10s %10s\n' shape "ms/token" "launches/tok" "reads/tok" \
    "ours tok/s" "TRL tok/s" "ours MiB" "TRL MiB" "RSS MiB"
  for shape in ${shapes//,/ }; do
    line() { grep -h ' tokens in ' "$out/$shape-decode-$1.log" 2>/dev/null | tail -1; }
    decode=$(printf '%s\n%s\n' "$(line 8)" "$(line 40)" | awk '
      { for (i = 1; i <= NF; i++) {
          if ($(i+1) == "s" && $(i-1) == "in") s[NR] = $i
          if ($(i+1) == "host") r[NR] = $i
          if ($(i+1) == "kernel") k[NR] = $i } }
      END { if (NR == 2) printf "%10.1f %12.0f %10.1f", (s[2] - s[1]) * 1000 / 32, (k[2] - k[1]) / 32, (r[2] - r[1]) / 32
            else printf "%10s %12s %10s", "-", "-", "-" }')
    ours=$(awk -F'[,:}]' '
      NR > 1 { for (i = 1; i < NF; i++) {
                 if ($i ~ /"completion_tokens"/) t += $(i+1)
                 if ($i ~ /"timing\/step_s"/) s += $(i+1) } }
      END { if (s > 0) printf "%.0f", t / s; else printf "-" }' "$out/$shape-train/metrics.jsonl" 2>/dev/null)
    trl=$(grep -o '"tokens_per_s_total": [0-9.]*' "$out/$shape-trl.jsonl" 2>/dev/null | tail -1 | awk '{ printf "%.0f", $2 }')
    rss=$(awk -F': ' '/Maximum resident set size/ { printf "%.0f", $2 / 1024 }' "$out/$shape-train.time" 2>/dev/null)
    printf '%-14s %s %12s %12s %10s %10s %10s\n' "$shape" "$decode" "${ours:--}" "${trl:--}" \
      "$(cat "$out/$shape-train.gpu-mib" 2>/dev/null || echo -)" \
      "$(cat "$out/$shape-trl.gpu-mib" 2>/dev/null || echo -)" "${rss:--}"
  done
  proof=$(find "$out/qualify" -name proof.json 2>/dev/null | head -1)
  if [ -n "$proof" ]; then
    echo "qualification ($dtype, $device): $(grep -o '"equal": *[a-z]*' "$proof" | head -1)"
  fi
  if grep -q 'the same evidence' "$out/ranks.log" 2>/dev/null; then ranks=equal
  elif grep -q 'the evidence differs' "$out/ranks.log" 2>/dev/null; then ranks='NOT equal'
  else ranks='failed (see ranks.log)'; fi
  echo "data-parallel, 2 ranks on one $device device against 1: $ranks"
} >> "$summary"
cat "$summary"
exit $failed
