"""Conformance of a finished run's `RUN/adapter/` with the real `peft` and `transformers`.

Run by `cargo xtask conformance peft` after a short `hessian-recipes train` and a greedy
`hessian-recipes generate --adapter RUN/adapter --raw --json`. Loads the adapter as users do,
`AutoPeftModelForCausalLM.from_pretrained(RUN/adapter)` (which finds the base model through the
adapter's own `base_model_name_or_path`), runs each prompt and our completion through it, and
compares the log-probability of every completion token (log_softmax of PEFT's logits) with ours
within a relative error of 1e-4; PEFT's greedy choice must be our token. A negative control runs
the base model alone (PEFT's `disable_adapter()`), which must differ from ours: the adapter is
not a no-op, so a loader that ignored it would fail. Prints `peft-conformance: N passed, M failed`
last.
"""
import argparse
import json
import pathlib

RESULTS = []
TOLERANCE = 1e-4


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok)))
    print(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else f"\n     {detail}"), flush=True)
    return ok


def relative_error(ours, theirs):
    return abs(ours - theirs) / max(abs(theirs), 1e-6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", type=pathlib.Path, required=True, help="RUN/adapter")
    ap.add_argument("--model", type=pathlib.Path, required=True, help="the plan's model folder")
    ap.add_argument("--generations", type=pathlib.Path, required=True,
                    help="the JSON lines of `hessian-recipes generate --json`")
    args = ap.parse_args()

    import torch
    from peft import AutoPeftModelForCausalLM

    config = json.loads((args.adapter / "adapter_config.json").read_text())
    check("adapter_config.json names the real base model",
          pathlib.Path(config.get("base_model_name_or_path", "")).resolve() == args.model.resolve(),
          f"base_model_name_or_path = {config.get('base_model_name_or_path')!r}")
    check("adapter_config.json is a LoRA config PEFT reads", config.get("peft_type") == "LORA", str(config))

    torch.manual_seed(0)
    model = AutoPeftModelForCausalLM.from_pretrained(str(args.adapter), dtype=torch.float32)
    model.eval()
    lines = [json.loads(line) for line in args.generations.read_text().splitlines() if line.strip()]
    check("generate printed completions to compare", lines and all(len(g["tokens"]) > 0 for g in lines),
          f"{len(lines)} line(s)")
    worst, worst_base, tokens = 0.0, 0.0, 0
    for n, g in enumerate(lines):
        prompt, completion = g["prompt_tokens"], g["tokens"]
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].double()
            with model.disable_adapter():
                base_logits = model(input_ids=ids).logits[0].double()
        # The logits at position p predict token p + 1.
        positions = range(len(prompt) - 1, len(prompt) + len(completion) - 1)
        logp = torch.log_softmax(logits, dim=-1)
        base_logp = torch.log_softmax(base_logits, dim=-1)
        greedy = True
        for k, p in enumerate(positions):
            token = completion[k]
            worst = max(worst, relative_error(g["logprobs"][k], logp[p, token].item()))
            worst_base = max(worst_base, relative_error(g["logprobs"][k], base_logp[p, token].item()))
            greedy &= int(logits[p].argmax()) == token
            tokens += 1
        check(f"prompt {n}: PEFT's greedy tokens are ours", greedy)
    check(f"log-probabilities of {tokens} tokens match within {TOLERANCE:g} relative error",
          tokens > 0 and worst <= TOLERANCE, f"worst relative error {worst:.3g}")
    check("negative control: the base model alone does not match (the adapter matters)",
          worst_base > 100 * TOLERANCE, f"worst relative error without the adapter {worst_base:.3g}")
    print(f"peft: worst relative error {worst:.3g} with the adapter, {worst_base:.3g} without", flush=True)

    passed = sum(ok for _, ok in RESULTS)
    failed = len(RESULTS) - passed
    print(f"peft-conformance: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
