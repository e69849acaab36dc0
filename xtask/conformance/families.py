"""Reference parity of every model family the policy loads, with the real `transformers` and `peft`.

Run by `cargo xtask conformance families` in the Hugging Face venv, in two steps:

`write --out DIR --tokenizer tokenizer.json` has `transformers` build a tiny random model per family
from a config (varied shapes, grouped-query ratios, tied and untied heads, head_dim apart from
hidden/heads, RoPE scaling, sliding windows on every layer or on some, Gemma 2 and 3, Phi-3's fused
projections), stores it as f32, bf16 or f16 safetensors with
`save_pretrained`, and rewrites the config in the Hub's spelling (`rope_theta`, `rope_scaling`)
for some and keeps the `rope_parameters` that `transformers` 5 writes for others. One family is
stored as `huggingface_hub` lays out its cache (`DIR/hub/models--ORG--NAME/snapshots/COMMIT`)
and is named by its Hub id, as a plan names a cached model. It writes `DIR/families.jsonl`, one
line per family: name, model folder, Hub id (or null).

`check --models DIR --results DIR` (with `HF_HUB_CACHE=DIR/hub`) reads, per family, what xtask had `hessian-recipes` produce:
`base.jsonl` (greedy `generate --json` on the bare model), `adapter.jsonl` (the same with the
adapter a 2-step LoRA `train` left in `RUN/adapter`), the run's `adapter/` and one intermediate
checkpoint folder as it is (PEFT's files at its root, as `det checkpoint download` gives it). It then checks, against `transformers`' own forward pass in f32:
- the greedy tokens are transformers' argmax, and every completion token's log-probability
  is within 1e-4 relative error;
- both adapters name the base model (its Hub id, else its absolute folder), and
  `AutoPeftModelForCausalLM` loads our final adapter and an intermediate checkpoint's through
  that `base_model_name_or_path`, adapts exactly the projections our adapter holds (`all-linear`:
  every linear layer but the head, Phi-3's fused ones), and matches the adapter generations the
  same way;
- LoRA variants (`{"r": 16}` alone, `layers_to_transform`, a regular-expression `target_modules`,
  DoRA with dropout on Llama and DoRA on Phi-3's fused projections) load in PEFT, adapt exactly our projections (with a trained DoRA
  magnitude each) and match our log-probs;
- negative controls differ: Qwen3 and Gemma 3 without their q/k norms, Llama 3 without its RoPE
  scaling, Mistral, Qwen2, Gemma 2 and Phi-3 without their windows, Gemma 2 without soft-capping, Gemma 3
  with the global RoPE on its window layers, and the base model without the adapter.
Prints `families-conformance: N passed, M failed` last.
"""
import argparse
import json
import math
import pathlib
import shutil

RESULTS = []
TOLERANCE = 1e-4
COMMON = dict(vocab_size=264, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              rms_norm_eps=1e-5, max_position_embeddings=512, bos_token_id=1, eos_token_id=2)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
# name: (model_type, config fields, stored dtype, config spelling)
FAMILIES = {
    "llama": ("llama", dict(num_attention_heads=4, num_key_value_heads=2), "float32", "hub"),
    "llama3-rope-scaled": ("llama", dict(num_attention_heads=4, num_key_value_heads=1, rope_theta=500000.0,
                                         rope_scaling=LLAMA3, tie_word_embeddings=True), "bfloat16", "hub"),
    "llama-linear-rope": ("llama", dict(num_attention_heads=2, num_key_value_heads=2,
                                        rope_scaling={"rope_type": "linear", "factor": 4.0}), "float16", "v5"),
    "qwen2": ("qwen2", dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
              "bfloat16", "v5"),
    "qwen2-sliding": ("qwen2", dict(num_attention_heads=4, num_key_value_heads=4, use_sliding_window=True,
                                    sliding_window=4, max_window_layers=1), "float32", "hub"),
    "qwen3": ("qwen3", dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16), "float32", "v5"),
    "qwen3-tied": ("qwen3", dict(num_attention_heads=2, num_key_value_heads=2, head_dim=8,
                                 tie_word_embeddings=True), "float16", "hub"),
    "mistral": ("mistral", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=12, sliding_window=4),
                "bfloat16", "v5"),
    # Gemma: scaled embeddings, (1 + w) norms, four norms a block, GeGLU, query_pre_attn_scalar apart
    # from head_dim; Gemma 2 soft-caps scores and logits and windows every other layer.
    "gemma2": ("gemma2", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=12,
                              sliding_window=4, attn_logit_softcapping=3.0, final_logit_softcapping=10.0),
               "bfloat16", "hub"),
    # Gemma 3 (text): per-head q/k norms, windows on all but every third layer, which alone rotate
    # with the scaled global base; the window layers have their own base.
    "gemma3": ("gemma3_text", dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                                   query_pre_attn_scalar=16, sliding_window=4, sliding_window_pattern=3,
                                   rope_parameters={
                                       "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                                       "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}),
               "float32", "v5"),
    "gemma3-hub": ("gemma3_text", dict(num_attention_heads=2, num_key_value_heads=2, head_dim=8, sliding_window=3,
                                       sliding_window_pattern=2, tie_word_embeddings=False), "float16", "hub"),
    # Phi-3: q/k/v stored as one qkv_proj and gate/up as one gate_up_proj (LoRA adapts those);
    # a window on every layer.
    "phi3": ("phi3", dict(num_attention_heads=4, num_key_value_heads=2, sliding_window=4, pad_token_id=0),
             "float32", "v5"),
    "phi3-hub": ("phi3", dict(num_attention_heads=2, num_key_value_heads=1, pad_token_id=0), "bfloat16", "hub"),
}

# Families named by a Hub id and found in the cache, as a plan's `model.hub_id` finds them.
HUB_IDS = {"qwen3": "hessian-recipes-test/tiny-qwen3"}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok)))
    print(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else f"\n     {detail}"), flush=True)
    return ok


def randomise(model, seed):
    """Weights large enough that the tiny model's choices are clear (not transformers' 0.02)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            u = torch.rand(p.shape, generator=g, dtype=torch.float64) * 2 - 1
            if name.endswith("norm.weight"):
                # Gemma's norms multiply by (1 + w).
                p.copy_((0 if model.config.model_type.startswith("gemma") else 1) + 0.2 * u)
            elif name.endswith(".bias"):
                p.copy_(0.1 * u)
            else:
                p.copy_(1.5 / math.sqrt(p.shape[-1]) * u)


def hub_spelling(path):
    """Rewrites transformers 5's `rope_parameters` as the Hub's `rope_theta` and `rope_scaling`
    (and Gemma 3's `rope_local_base_freq`); Gemma's `layer_types` go, as the Hub's configs lack
    them, so the window pattern is the family's own."""
    config = json.loads(path.read_text())
    params = dict(config.pop("rope_parameters"))
    if "full_attention" in params:
        config["rope_local_base_freq"] = params["sliding_attention"]["rope_theta"]
        params = dict(params["full_attention"])
    if config["model_type"].startswith("gemma"):
        config.pop("layer_types", None)
    config["rope_theta"] = params.pop("rope_theta")
    config["rope_scaling"] = None if params.get("rope_type") == "default" else params
    path.write_text(json.dumps(config, indent=2))


def write(args):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    manifest = []
    for seed, (name, (model_type, fields, dtype, spelling)) in enumerate(FAMILIES.items()):
        config = AutoConfig.for_model(model_type, **{**COMMON, **fields})
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        randomise(model, 100 + seed)
        hub_id = HUB_IDS.get(name)
        if hub_id:
            repo = args.out / "hub" / ("models--" + hub_id.replace("/", "--"))
            (repo / "refs").mkdir(parents=True)
            (repo / "refs" / "main").write_text(COMMIT)
            out = repo / "snapshots" / COMMIT
        else:
            out = args.out / name
        model.to(getattr(torch, dtype)).save_pretrained(out)
        if spelling == "hub":
            hub_spelling(out / "config.json")
        shutil.copy(args.tokenizer, out / "tokenizer.json")
        manifest.append({"name": name, "dir": str(out.resolve()), "hub_id": hub_id})
    (args.out / "families.jsonl").write_text("".join(json.dumps(m) + "\n" for m in manifest))


def reference(path, **config_changes):
    """transformers' model in f32 (eager attention), optionally with config fields changed."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(path)
    for key, value in config_changes.items():
        setattr(config, key, value)
    model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=torch.float32,
                                                 attn_implementation="eager")
    return model.eval()


def compare(model, generations):
    """(worst relative error of our log-probs against the model's, whether its argmax is ours)."""
    import torch
    worst, greedy = 0.0, True
    for g in generations:
        prompt, completion = g["prompt_tokens"], g["tokens"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        # The logits at position p predict token p + 1.
        for k, token in enumerate(completion):
            p = len(prompt) - 1 + k
            theirs = logp[p, token].item()
            worst = max(worst, abs(g["logprobs"][k] - theirs) / max(abs(theirs), 1e-6))
            greedy &= int(logits[p].argmax()) == token
    return worst, greedy


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def without_qk_norm(model):
    import torch
    for layer in model.model.layers:
        layer.self_attn.q_norm = torch.nn.Identity()
        layer.self_attn.k_norm = torch.nn.Identity()
    return model


def check_family(name, model_dir, hub_id, results):
    from peft import AutoPeftModelForCausalLM
    import torch
    base = read_lines(results / "base.jsonl")
    check(f"{name}: generate printed completions", base and all(g["tokens"] for g in base))
    model = reference(model_dir)
    worst, greedy = compare(model, base)
    check(f"{name}: greedy tokens are transformers' argmax", greedy)
    check(f"{name}: log-probs within {TOLERANCE:g} of transformers", worst <= TOLERANCE,
          f"worst relative error {worst:.3g}")
    print(f"{name}: worst relative error {worst:.3g} (base)", flush=True)

    controls = []
    if name.startswith("qwen3"):
        controls.append(("without q_norm/k_norm", without_qk_norm(reference(model_dir))))
    if name == "llama3-rope-scaled":
        theta = model.config.rope_parameters["rope_theta"]
        controls.append(("without RoPE scaling",
                         reference(model_dir, rope_parameters={"rope_type": "default", "rope_theta": theta})))
    if name in ("mistral", "phi3"):
        controls.append(("without the sliding window", reference(model_dir, sliding_window=None)))
    if name == "gemma2":
        controls.append(("without soft-capping",
                         reference(model_dir, attn_logit_softcapping=None, final_logit_softcapping=None)))
        controls.append(("without the sliding window",
                         reference(model_dir, layer_types=["full_attention"] * model.config.num_hidden_layers)))
    if name.startswith("gemma3"):
        controls.append(("without q_norm/k_norm", without_qk_norm(reference(model_dir))))
    if name == "gemma3":
        params = json.loads(json.dumps(model.config.rope_parameters))
        params["sliding_attention"] = dict(params["full_attention"])
        controls.append(("with the global RoPE on the window layers", reference(model_dir, rope_parameters=params)))
    if name == "qwen2-sliding":
        controls.append(("without the sliding window",
                         reference(model_dir, layer_types=["full_attention"] * model.config.num_hidden_layers)))
    for label, control in controls:
        off, _ = compare(control, base)
        check(f"{name}: negative control {label} differs", off > 100 * TOLERANCE, f"relative error {off:.3g}")

    adapted = read_lines(results / "adapter.jsonl")
    for label, folder in [("final adapter", results / "adapter"), ("intermediate checkpoint", results / "checkpoint")]:
        config = json.loads((folder / "adapter_config.json").read_text())
        named = config.get("base_model_name_or_path", "")
        names_it = named == hub_id if hub_id else pathlib.Path(named).resolve() == model_dir.resolve()
        check(f"{name}: {label} names the base model ({'Hub id' if hub_id else 'its folder'})", names_it,
              f"base_model_name_or_path = {named!r}")
        peft_model = AutoPeftModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                              attn_implementation="eager").eval()
        if label == "final adapter":
            ours = check_projections(name, folder, peft_model)
            check(f"{name}: all-linear adapts every projection of the family",
                  {k.rsplit(".", 1)[-1] for k in ours} == expected_projections(model.config.model_type),
                  f"ours {sorted({k.rsplit('.', 1)[-1] for k in ours})}")
            worst, off = check_adapted(name, peft_model, adapted)
            print(f"{name}: worst relative error {worst:.3g} (adapter), {off:.3g} without it", flush=True)
        else:
            lora = [k for k in peft_model.state_dict() if "lora_A" in k]
            check(f"{name}: PEFT loads an intermediate checkpoint folder at its root", lora,
                  "no LoRA weights loaded")


def check_adapted(name, peft_model, adapted):
    """PEFT's greedy tokens and log-probs with our adapter are ours, and the base alone's are not;
    returns (worst relative error, the base's)."""
    worst, greedy = compare(peft_model, adapted)
    check(f"{name}: PEFT's greedy tokens with our adapter are ours", greedy)
    check(f"{name}: PEFT log-probs with our adapter within {TOLERANCE:g}", worst <= TOLERANCE,
          f"worst relative error {worst:.3g}")
    with peft_model.disable_adapter():
        off, _ = compare(peft_model, adapted)
    check(f"{name}: negative control: the base alone does not match the adapter", off > 100 * TOLERANCE,
          f"relative error {off:.3g}")
    return worst, off


def expected_projections(model_type):
    """What PEFT's all-linear adapts: every linear layer but the LM head."""
    if model_type == "phi3":
        return {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def check_projections(name, folder, peft_model):
    """PEFT adapts exactly the projections our adapter holds; returns their module names."""
    from safetensors import safe_open
    with safe_open(str(folder / "adapter_model.safetensors"), "pt") as f:
        ours = sorted(k.removesuffix(".lora_A.weight") for k in f.keys() if k.endswith(".lora_A.weight"))
    theirs = sorted(k.removesuffix(".lora_A.default.weight") for k in peft_model.state_dict()
                    if k.endswith(".lora_A.default.weight"))
    check(f"{name}: PEFT adapts exactly the projections we trained", theirs == ours and ours,
          f"PEFT {theirs}, ours {ours}")
    return ours


def check_dora(name, peft_model, ours):
    """PEFT read a DoRA magnitude for every projection we adapted, and training moved them off
    the base weights' row norms (their initial value)."""
    import torch
    state = peft_model.state_dict()
    magnitudes = {k.removesuffix(".lora_magnitude_vector.default.weight"): v for k, v in state.items()
                  if k.endswith(".lora_magnitude_vector.default.weight")}
    check(f"{name}: PEFT loads a DoRA magnitude per adapted projection", sorted(magnitudes) == ours,
          f"PEFT {sorted(magnitudes)}, ours {ours}")
    moved = 0.0
    for module, m in magnitudes.items():
        base = state[module + ".base_layer.weight"].double()
        moved = max(moved, (m.double() - torch.linalg.norm(base, dim=1)).abs().max().item())
    check(f"{name}: the magnitudes trained away from the base's row norms", moved > 1e-4, f"moved {moved:.3g}")


def check_lora_variant(name, model_dir, results):
    """PEFT loads an adapter trained on fewer projections (layers_to_transform, a regular-expression
    target_modules), adapts exactly the projections it holds, and gives our log-probs."""
    from peft import AutoPeftModelForCausalLM
    import torch
    folder = results / "adapter"
    peft_model = AutoPeftModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                          attn_implementation="eager").eval()
    ours = check_projections(name, folder, peft_model)
    if json.loads((folder / "adapter_config.json").read_text()).get("use_dora"):
        check_dora(name, peft_model, ours)
    worst, off = check_adapted(name, peft_model, read_lines(results / "adapter.jsonl"))
    print(f"{name}: {len(ours)} projections, worst relative error {worst:.3g}, {off:.3g} without it", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write one tiny random model per family")
    w.add_argument("--out", type=pathlib.Path, required=True)
    w.add_argument("--tokenizer", type=pathlib.Path, required=True, help="the tiny model's tokenizer.json")
    c = sub.add_parser("check", help="compare what hessian-recipes produced with transformers and peft")
    c.add_argument("--models", type=pathlib.Path, required=True)
    c.add_argument("--results", type=pathlib.Path, required=True)
    args = ap.parse_args()
    if args.command == "write":
        write(args)
        return 0
    manifest = read_lines(args.models / "families.jsonl")
    check("every family was written", [m["name"] for m in manifest] == list(FAMILIES))
    for m in manifest:
        name = m["name"]
        try:
            check_family(name, pathlib.Path(m["dir"]), m["hub_id"], args.results / name)
        except Exception as e:  # a crash in one family is a failure, not the end of the others
            check(f"{name}: checked without an error", False, repr(e))
    variants = read_lines(args.results / "lora_variants.jsonl")
    check("every LoRA variant was trained", len(variants) == 5)
    for v in variants:
        try:
            check_lora_variant(v["name"], pathlib.Path(v["dir"]), args.results / v["name"])
        except Exception as e:
            check(f"{v['name']}: checked without an error", False, repr(e))
    passed = sum(ok for _, ok in RESULTS)
    failed = len(RESULTS) - passed
    print(f"families-conformance: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
