#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and a release binary built elsewhere with
#   cargo build --release --locked --features cuda -p hessian-recipes
# it runs, within about 10 minutes, and writes everything under OUT (which must not exist):
#   1. nvidia-smi and the binary's --version                         -> OUT/gpu.txt, OUT/version.txt
#   2. `generate --device cuda` on the tiny model (and SmolLM2 when given)  -> OUT/generate-*.jsonl
#   3. a 4-step native qualification on --device cuda (plans/native-tiny.json, stopped after
#      step 2 and resumed in a new process)                          -> OUT/qualify/proof.json
#      and the managed one of the same plan: a trial on a devmaster this binary starts, paused
#      after step 1, activated, restored from its checkpoint on the GPU
#                                                          -> OUT/managed/managed-proof.json
#   4. GRPO throughput: `train --device cuda` with TRL's benchmark settings (4 prompts x G = 8,
#      32 new tokens, LoRA r8 a16 on q,k,v,o) and, when TRL_PYTHON names a Python with torch
#      (CUDA), trl, peft, transformers and datasets, TRL's GRPOTrainer on the same GPU and the
#      same model folder (`scripts/trl_grpo_cpu.py --model-dir`; TRL_WORKDIR, when set, holds
#      its scratch files).                                             -> OUT/train/, OUT/trl.jsonl
#   5. OUT/summary.txt: each stage's exit status and the throughput figures.
# Stages are independent: one failing does not stop the others; the script exits 1 if any failed.
#
# Usage: scripts/gpu-check.sh [--bin PATH] [--tiny DIR] [--smollm2 DIR] [--device cuda|vulkan|cpu]
#                             [--dtype f32|f16|bf16] OUT
#   --bin      the binary (default target/release/hessian-recipes)
#   --tiny     the tiny test model folder (default target/tiny-model, written by `cargo xtask ci`
#              or `cargo test -p hr-tests`)
#   --smollm2  an HF folder of SmolLM2-135M-Instruct (`hessian-recipes model fetch smollm2`
#              prints it; where it cannot travel, `scripts/random_model.py` writes one of its shape from its
#              config and tokenizer); without it the throughput stage uses the tiny model
#   --device   vulkan (a binary built with --features vulkan) or cpu rehearses the whole script
#              without an NVIDIA GPU (stage 1 is then skipped); `cargo xtask ci` runs it with
#              vulkan on lavapipe
#   --dtype    the base weights' dtype (the plans' model.dtype, generate's --dtype; default f32):
#              bf16 is what a GPU run of a real model uses; lavapipe holds f16 but not bf16
set -uo pipefail

bin=target/release/hessian-recipes
tiny=target/tiny-model
smollm2=""
device=cuda
dtype=f32
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --tiny) tiny="$2"; shift 2 ;;
    --smollm2) smollm2="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "gpu-check: one OUT folder only" >&2; exit 2; }; out="$1"; shift ;;
  esac
done
[ -n "$out" ] || { echo "gpu-check: name an OUT folder (see --help)" >&2; exit 2; }
case "$device" in cuda|vulkan|cpu) ;; *) echo "gpu-check: --device cuda|vulkan|cpu" >&2; exit 2 ;; esac
case "$dtype" in f32|f16|bf16) ;; *) echo "gpu-check: --dtype f32|f16|bf16" >&2; exit 2 ;; esac
[ -e "$out" ] && { echo "gpu-check: $out exists; name a new folder" >&2; exit 2; }
[ -x "$bin" ] || { echo "gpu-check: no binary at $bin (build it with --features cuda; --bin PATH)" >&2; exit 2; }
[ -f "$tiny/config.json" ] || { echo "gpu-check: no tiny model at $tiny (--tiny DIR)" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
failed=0
summary="$out/summary.txt"
: > "$summary"
echo "device $device, base weights $dtype" >> "$summary"

stage() { # stage NAME SECONDS COMMAND...: runs with a time limit, logs, records the status
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  echo "gpu-check: $name" >&2
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || failed=1
  printf '%-12s exit %3d  %4ds\n' "$name" "$rc" "$((SECONDS - t0))" >> "$summary"
  return $rc
}

if [ "$device" = cuda ]; then
  stage gpu 30 nvidia-smi
  cp "$out/gpu.log" "$out/gpu.txt" 2>/dev/null
fi
stage version 10 "$bin" --version && cp "$out/version.log" "$out/version.txt"

stage generate-tiny 60 "$bin" generate --device "$device" --dtype "$dtype" --model "$tiny" --json \
  --prompt "What is 2 + 3?" --prompt "Name a colour." --max-new-tokens 16
if [ -n "$smollm2" ]; then
  stage generate-smollm2 120 "$bin" generate --device "$device" --dtype "$dtype" --model "$smollm2" --json \
    --prompt "What is 2 + 3?" --max-new-tokens 32
fi

# The qualification plan names its model relative to itself: copy it naming the tiny model's
# folder absolutely, with the base dtype.
mkdir -p "$out/plans"
sed "s#\"path\": \"[^\"]*\"#\"path\": \"$(cd "$tiny" && pwd)\", \"dtype\": \"$dtype\"#" \
  "$here/plans/native-tiny.json" > "$out/plans/native-tiny.json"
stage qualify 180 "$bin" qualify native --device "$device" --plan "$out/plans/native-tiny.json" \
  --output "$out/qualify"
stage managed 240 "$bin" qualify managed --device "$device" --plan "$out/plans/native-tiny.json" \
  --output "$out/managed"

model=$(cd "$tiny" && pwd); format=plain; system=null; trl_model=tiny
if [ -n "$smollm2" ]; then
  model=$(cd "$smollm2" && pwd); format=chat; trl_model=smollm2
  system='"You are a helpful AI assistant named SmolLM, trained by Hugging Face"'
fi
cat > "$out/plans/bench.json" <<JSON
{"schema_version": 1, "name": "gpu-check-bench",
 "model": {"path": "$model", "dtype": "$dtype", "lora": {"rank": 8, "alpha": 16.0, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}},
 "environment": {"backend": "fixture", "tasks": {"kind": "arithmetic", "count": 64, "seed": 0}},
 "grpo": {"tasks_per_step": 4, "num_generations": 8, "max_completion_length": 32, "max_turn_tokens": 32,
          "num_iterations": 1, "beta": 0.0, "prompt_format": "$format", "system_prompt": $system},
 "optimizer": {"learning_rate": 1e-5, "warmup_steps": 0, "decay": "constant", "weight_decay": 0.0},
 "steps": 6, "checkpoints": {"every": 6}, "seeds": {"sampling": 0, "adapter_init": 0, "task_order": 0}}
JSON
stage train 240 "$bin" train --device "$device" --plan "$out/plans/bench.json" --output "$out/train"

if [ -n "${TRL_PYTHON:-}" ]; then
  stage trl 240 "$TRL_PYTHON" "$here/scripts/trl_grpo_cpu.py" --model "$trl_model" --lora \
    --model-dir "$model" --device "$device" --steps 6 --warmup 1 --question "What is {a} + {b}?" \
    --operands 0 9 --workdir "${TRL_WORKDIR:-$out/trl-work}" --out "$out/trl.jsonl"
else
  echo "trl          skipped: set TRL_PYTHON" >> "$summary"
fi

# Throughput: completion tokens / step seconds over the steps after the first.
{
  echo
  if [ -f "$out/train/metrics.jsonl" ]; then
    awk -F'[,:}]' '
      NR > 1 { for (i = 1; i < NF; i++) {
                 if ($i ~ /"completion_tokens"/) t += $(i+1)
                 if ($i ~ /"timing\/step_s"/) s += $(i+1) } }
      END { if (s > 0) printf "hessian-recipes train: %.0f completion tokens/s over %d timed steps\n", t / s, NR - 1 }
    ' "$out/train/metrics.jsonl"
  fi
  if [ -f "$out/trl.jsonl" ]; then
    grep -o '"tokens_per_s_total": [0-9.]*' "$out/trl.jsonl" | tail -1 |
      awk '{ printf "TRL GRPOTrainer + PEFT: %.0f completion tokens/s\n", $2 }'
  fi
} >> "$summary"
cat "$summary"
exit $failed
