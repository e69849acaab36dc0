#!/usr/bin/env python3
"""Write a randomly initialised Hugging Face causal LM with the shape of a model folder's config.json.

A stand-in with a real model's size and speed where its weights cannot be fetched, for throughput
checks only (scripts/gpu-check.sh --smollm2 on a machine with no network): the weights are
transformers' own initialisation under torch.manual_seed(SEED), so the same config and seed give the
same model, and it answers nothing sensibly. SRC's config.json and tokenizer files are copied
unchanged (transformers rewrites config.json in its own format; ours is the one the model was made
from).

Usage: python3 scripts/random_model.py SRC OUT [--seed N]
  SRC  a folder holding config.json and tokenizer.json (tokenizer_config.json too, when it has one)
  OUT  a new folder: config.json, model.safetensors (float32) and the tokenizer files
"""
import argparse
import os
import shutil
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.src, "config.json")):
        sys.exit(f"random_model: no config.json in {args.src}")
    if os.path.exists(args.out):
        sys.exit(f"random_model: {args.out} exists; name a new folder")

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(args.seed)
    config = AutoConfig.from_pretrained(args.src)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(args.out, safe_serialization=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if os.path.isfile(os.path.join(args.src, name)):
            shutil.copyfile(os.path.join(args.src, name), os.path.join(args.out, name))
    n = sum(p.numel() for p in model.parameters())
    print(f"random_model: {n / 1e6:.1f}M parameters (seed {args.seed}) -> {args.out}")


if __name__ == "__main__":
    main()
