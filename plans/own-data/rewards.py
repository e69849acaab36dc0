"""Reward functions for plans/smollm2-own-data.json, in TRL's `reward_funcs` signature.

The same file serves `hessian-recipes train` (plan rewards `{"rule": "python", "file":
"own-data/rewards.py", "function": "correct"}`) and TRL (`GRPOTrainer(reward_funcs=[correct,
concise], args=GRPOConfig(reward_weights=[1.0, 0.25]))`): each function takes the batch's
`prompts` and `completions` and the dataset's other columns as keyword arguments, and returns
one float per completion. A completion is a string, or, for chat-message prompts,
`[{"role": "assistant", "content": ...}]`.
"""

import re


def text(completion):
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion)
    return completion


def correct(prompts, completions, answer, **kwargs):
    """1 when the completion's last whole number is the row's answer, else 0."""
    out = []
    for completion, expected in zip(completions, answer):
        numbers = re.findall(r"\d+", text(completion))
        out.append(1.0 if numbers and int(numbers[-1]) == int(expected) else 0.0)
    return out


def concise(prompts, completions, **kwargs):
    """1 for an answer of at most 80 characters, else 0."""
    return [1.0 if len(text(c).strip()) <= 80 else 0.0 for c in completions]
