"""TRL 1.16's own GRPO loss on fixed inputs: the reference the `hr-grpo` loss is checked against.

For each configuration (every loss type x importance-sampling level, each with the clipping,
KL, off-policy mask, entropy mask, entropy bonus, adaptive entropy control and
gradient-accumulation variants) this draws
small f32 inputs from a seeded generator (policy, old and reference log-probs, advantages, a
completion mask with a fully masked row and a masked tool token, per-token entropies), calls the
installed `GRPOTrainer._compute_loss` on an object that carries exactly the attributes it reads,
and writes one JSON line per case: the inputs, the loss, its gradient with respect to the
log-probs (and to the entropies when the bonus is on), every metric TRL logs from the loss, and
under adaptive entropy control the controller's state after the call (one optimiser step: the
case's `last_world_entropy`, null for TRL's initial infinity, is its state before).

usage: trl_loss.py OUT.jsonl
"""

import functools
import json
import math
import sys
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import torch
from trl import GRPOConfig
from trl.trainer.grpo_trainer import GRPOTrainer

ROWS, WIDTH = 4, 5
# Active completion tokens per row (row 2 is a masked-out episode); row 0's token 2 is an
# environment (tool) token inside the completion.
LENGTHS = [5, 3, 0, 2]
TOOL_TOKEN = (0, 2)


def inputs(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    u = lambda *shape: torch.rand(*shape, generator=g, dtype=torch.float32)
    n = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float32)
    logp = torch.log(0.05 + 0.9 * u(ROWS, WIDTH))
    old = logp + 0.3 * n(ROWS, WIDTH)
    ref = logp + 0.2 * n(ROWS, WIDTH)
    adv = n(ROWS)
    adv[1] = 0.0
    entropy = 3.0 * u(ROWS, WIDTH)
    mask = torch.zeros(ROWS, WIDTH)
    for i, length in enumerate(LENGTHS):
        mask[i, :length] = 1.0
    mask[TOOL_TOKEN] = 0.0
    return dict(logp=logp, old=old, ref=ref, adv=adv, entropy=entropy, mask=mask)


def configs():
    """(name, config overrides, on-policy, gradient accumulation steps, tokens in the window)."""
    losses = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
    for loss in losses:
        for level in ["token", "sequence"]:
            base = dict(loss_type=loss, importance_sampling_level=level)
            if loss == "cispo":
                base["epsilon_high"] = 5.0
            yield f"{loss}-{level}", base, False, 1, None
            yield f"{loss}-{level}-on-policy", base, True, 1, None
            yield f"{loss}-{level}-asymmetric", {**base, "epsilon": 0.1, "epsilon_high": 0.28}, False, 1, None
            yield f"{loss}-{level}-delta", {**base, "delta": 1.2}, False, 1, None
            yield f"{loss}-{level}-kl", {**base, "beta": 0.04}, False, 1, None
            yield f"{loss}-{level}-kl-uncorrected", {**base, "beta": 0.04, "use_bias_correction_kl": False}, False, 1, None
            yield f"{loss}-{level}-opsm", {**base, "off_policy_mask_threshold": 0.02}, False, 1, None
            yield f"{loss}-{level}-top-entropy", {**base, "top_entropy_quantile": 0.3}, False, 1, None
            yield f"{loss}-{level}-entropy-bonus", {**base, "entropy_coef": 0.01}, False, 1, None
            # Adaptive entropy control: applied (the last step's entropy under target), capped at
            # entropy_coef_max; on the high-entropy tokens; and at the first step (nothing
            # applied yet, the coefficient lowered).
            adaptive = dict(use_adaptive_entropy=True, entropy_coef=0.03, entropy_coef_delta=0.01,
                            entropy_coef_max=0.035, entropy_target=2.0, last_world_entropy=1.0)
            yield f"{loss}-{level}-adaptive", {**base, **adaptive}, False, 1, None
            yield (f"{loss}-{level}-adaptive-top-entropy",
                   {**base, **adaptive, "top_entropy_quantile": 0.5, "entropy_target": 2.5}, False, 1, None)
            yield (f"{loss}-{level}-adaptive-first-step",
                   {**base, "use_adaptive_entropy": True, "entropy_coef": 0.01}, False, 1, None)
            yield f"{loss}-{level}-accumulated", base, False, 2, 23.0
            yield (
                f"{loss}-{level}-everything",
                {**base, "beta": 0.04, "delta": 1.5, "top_entropy_quantile": 0.5, "entropy_coef": 0.02,
                 "off_policy_mask_threshold": 0.05},
                False,
                3,
                31.0,
            )


def trl_loss(overrides: dict, x: dict, on_policy: bool, accumulation: int, window_tokens) -> dict:
    overrides = dict(overrides)
    last_world_entropy = overrides.pop("last_world_entropy", None)
    args = GRPOConfig(
        output_dir="/nonexistent",
        report_to=[],
        max_completion_length=WIDTH * 2,
        gradient_accumulation_steps=accumulation,
        per_device_train_batch_size=ROWS,
        num_generations=2,
        use_cpu=True,
        **overrides,
    )
    metrics = defaultdict(lambda: defaultdict(list))
    logp = x["logp"].clone().requires_grad_(True)
    entropy = x["entropy"].clone().requires_grad_(True)
    identity = SimpleNamespace(
        gather=lambda t: t,
        gather_for_metrics=lambda t: t,
        reduce=lambda t, reduction="sum": t,
        pad_across_processes=lambda t, dim=0, pad_index=0: t,
        num_processes=1,
        sync_gradients=True,
    )
    this = SimpleNamespace(
        args=args,
        model=SimpleNamespace(training=True),
        accelerator=identity,
        aux_loss_enabled=False,
        top_entropy_quantile=args.top_entropy_quantile,
        off_policy_mask_threshold=args.off_policy_mask_threshold,
        importance_sampling_level=args.importance_sampling_level,
        beta=args.beta,
        loss_type=args.loss_type,
        epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        current_gradient_accumulation_steps=accumulation,
        max_completion_length=args.max_completion_length,
        entropy_coef=args.entropy_coef,
        use_adaptive_entropy=args.use_adaptive_entropy,
        _entropy_bonus_enabled=args.entropy_coef != 0.0 or args.use_adaptive_entropy,
        _entropy_window_stats=None,
        _last_world_entropy=float("inf") if last_world_entropy is None else last_world_entropy,
        _metrics=metrics,
        get_off_policy_mask=GRPOTrainer.get_off_policy_mask,
        get_gamma_weights=GRPOTrainer.get_gamma_weights,
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, entropy, None),
    )
    this.get_high_entropy_mask = functools.partial(GRPOTrainer.get_high_entropy_mask, this)
    active = float(x["mask"].sum())
    batch = {
        "prompt_ids": torch.zeros(ROWS, 1, dtype=torch.long),
        "prompt_mask": torch.ones(ROWS, 1, dtype=torch.long),
        "completion_ids": torch.zeros(ROWS, WIDTH, dtype=torch.long),
        "completion_mask": x["mask"].long(),
        "advantages": x["adv"],
        "ref_per_token_logps": x["ref"],
        "num_items_in_batch": torch.tensor(window_tokens if window_tokens is not None else active),
    }
    if not on_policy:
        batch["old_per_token_logps"] = x["old"]
    loss = GRPOTrainer._compute_loss(this, None, batch)
    loss.backward()
    train = metrics["train"]
    out = {
        "loss": loss.item(),
        "grad_logp": logp.grad.tolist(),
        "grad_entropy": entropy.grad.tolist() if entropy.grad is not None else None,
        "metrics": {k: v[-1] for k, v in train.items() if not math.isnan(v[-1])},
    }
    if args.use_adaptive_entropy:
        out["entropy_control"] = {"coef": this.entropy_coef, "last_world_entropy": this._last_world_entropy}
    return out


def short(value):
    """Every float as the shortest decimal that reads back as the same f32 (all of them are f32)."""
    if isinstance(value, float):
        return float(np.format_float_positional(np.float32(value), unique=True, trim="-"))
    if isinstance(value, list):
        return [short(v) for v in value]
    if isinstance(value, dict):
        return {k: short(v) for k, v in value.items()}
    return value


def main() -> None:
    out = open(sys.argv[1], "w")
    for seed, (name, overrides, on_policy, accumulation, window) in enumerate(configs()):
        x = inputs(seed)
        case = {
            "name": name,
            "config": overrides,
            "on_policy": on_policy,
            "gradient_accumulation_steps": accumulation,
            "window_tokens": window,
            "max_completion_length": WIDTH * 2,
            "logp": x["logp"].tolist(),
            "old": x["old"].tolist(),
            "ref": x["ref"].tolist(),
            "advantages": x["adv"].tolist(),
            "entropy": x["entropy"].tolist(),
            "mask": [[bool(v) for v in row] for row in x["mask"].tolist()],
            "trl": trl_loss(overrides, x, on_policy, accumulation, window),
        }
        out.write(json.dumps(short(case)) + "\n")
    out.close()


if __name__ == "__main__":
    main()
