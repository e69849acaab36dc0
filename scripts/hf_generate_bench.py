#!/usr/bin/env python3
"""transformers' side of `cargo xtask bench generate`: batched sampling with `model.generate`.

Loads a Hugging Face model folder in float32, formats each prompt with the tokenizer's chat
template (a generation prompt added), left-pads the batch and samples exactly
--max-new-tokens per prompt (`min_new_tokens` = `max_new_tokens`, temperature 1, no top-k or
top-p), as `hessian-recipes generate --ignore-eos --temperature 1` does. Times the one
`generate` call (as ours times its one call) and prints one JSON object:
{"tokens", "seconds", "prompt_tokens", "versions"}.

Usage (the HF venv of `cargo xtask bench grpo --vs-trl`):
  python scripts/hf_generate_bench.py --model DIR --prompts prompts.json \
      --max-new-tokens 128 --threads 2
"""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="Hugging Face model folder")
    ap.add_argument("--prompts", required=True, help="JSON file: a list of user prompts")
    ap.add_argument("--max-new-tokens", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()
    with open(args.prompts, encoding="utf-8") as f:
        prompts = json.load(f)
    texts = [
        tok.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in prompts
    ]
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    settings = dict(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.max_new_tokens,
        pad_token_id=tok.pad_token_id,
    )
    with torch.inference_mode():
        started = time.perf_counter()
        out = model.generate(**batch, **settings)
        seconds = time.perf_counter() - started
    new = out.shape[1] - batch["input_ids"].shape[1]
    print(
        json.dumps(
            {
                "tokens": new * len(prompts),
                "seconds": seconds,
                "prompt_tokens": int(batch["attention_mask"].sum()),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            }
        )
    )


if __name__ == "__main__":
    main()
