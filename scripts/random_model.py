#!/usr/bin/env python3
"""Write a randomly initialised Hugging Face causal LM with the shape of a model folder's config.json.

A stand-in with a real model's size and speed where its weights cannot be fetched, for throughput
checks only (scripts/gpu-check.sh --smollm2 on a machine with no network): the weights are
transformers' own initialisation under torch.manual_seed(SEED), so the same config and seed give the
same model, and it answers nothing sensibly. SRC's config.json and tokenizer files are copied
unchanged (transformers rewrites config.json in its own format; ours is the one the model was made
from).

Usage: python3 scripts/random_model.py SRC OUT [--seed N] [--tokenizer DIR]
  SRC          a folder holding config.json and tokenizer.json (tokenizer_config.json too, when it
               has one), or a config.json file (then --tokenizer names the tokenizer's folder)
  OUT          a new folder: config.json, model.safetensors (float32) and the tokenizer files
  --tokenizer  take tokenizer.json and tokenizer_config.json from DIR instead of SRC: a shape
               such as scripts/shapes/qwen2.5-0.5b.json with SmolLM2's tokenizer, whose ids all
               fit the larger vocabulary
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
    ap.add_argument("--tokenizer", metavar="DIR")
    args = ap.parse_args()
    config_file = args.src if os.path.isfile(args.src) else os.path.join(args.src, "config.json")
    if not os.path.isfile(config_file):
        sys.exit(f"random_model: no config.json in {args.src}")
    tokenizer = args.tokenizer or (args.src if os.path.isdir(args.src) else None)
    if tokenizer is None or not os.path.isfile(os.path.join(tokenizer, "tokenizer.json")):
        sys.exit(f"random_model: no tokenizer.json in {tokenizer or args.src}; name its folder with --tokenizer")
    if os.path.exists(args.out):
        sys.exit(f"random_model: {args.out} exists; name a new folder")

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(args.seed)
    config = AutoConfig.from_pretrained(config_file)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(args.out, safe_serialization=True)
    shutil.copyfile(config_file, os.path.join(args.out, "config.json"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.isfile(os.path.join(tokenizer, name)):
            shutil.copyfile(os.path.join(tokenizer, name), os.path.join(args.out, name))
    n = sum(p.numel() for p in model.parameters())
    print(f"random_model: {n / 1e6:.1f}M parameters (seed {args.seed}) -> {args.out}")


if __name__ == "__main__":
    main()
