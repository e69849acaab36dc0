"""Reads a run folder's TensorBoard event files with the real tensorboard package and checks
them against its metrics.jsonl: every number of every row is a `train/<name>` scalar at the
row's step (as a float32), exactly once, and the steps are 1..STEPS; and every step from FIRST
to STEPS has its completions (completions.jsonl.gz, read with Python's gzip) as a `completions`
text summary naming each of its tasks, which TensorBoard's text plugin reads.

Usage: read_tfevents.py RUN_DIR STEPS FIRST (not named tensorboard.py, which would shadow the
package). Prints a JSON verdict; exits 1 on any mismatch.
"""

import gzip
import json
import math
import pathlib
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util.tensor_util import make_ndarray


def main() -> int:
    run = pathlib.Path(sys.argv[1])
    steps = int(sys.argv[2])
    first = int(sys.argv[3])
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    errors = []
    if [r["step"] for r in rows] != list(range(1, steps + 1)):
        errors.append(f"metrics.jsonl steps {[r['step'] for r in rows]}")
    checked = 0
    for row in rows:
        for name, value in row.items():
            if name == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            tag = f"train/{name}"
            events = [e for e in acc.Scalars(tag) if e.step == row["step"]] if tag in tags else []
            if len(events) != 1:
                errors.append(f"{tag} at step {row['step']}: {len(events)} events")
                continue
            want = struct.unpack("<f", struct.pack("<f", value))[0]
            got = events[0].value
            if not (got == want or (math.isnan(got) and math.isnan(want))):
                errors.append(f"{tag} at step {row['step']}: {got} != {want}")
            checked += 1
    with gzip.open(run / "completions.jsonl.gz", "rt") as f:
        completions = [json.loads(line) for line in f]
    by_step = {}
    for c in completions:
        by_step.setdefault(c["step"], []).append(c)
    if sorted(by_step) != list(range(first, steps + 1)):
        errors.append(f"completions.jsonl.gz steps {sorted(by_step)}")
    texts = {}
    if "completions" in acc.Tags()["tensors"]:
        for e in acc.Tensors("completions"):
            texts[e.step] = make_ndarray(e.tensor_proto).item().decode()
    if sorted(texts) != sorted(by_step):
        errors.append(f"completions text at steps {sorted(texts)}")
    for step, records in by_step.items():
        for c in records:
            if f"| {c['task_id']} |" not in texts.get(step, ""):
                errors.append(f"step {step}: task {c['task_id']} not in the completions text")
    print(json.dumps({"scalars": checked, "tags": len(tags), "completions": len(completions),
                      "errors": errors[:10]}))
    return 1 if errors or checked == 0 or not completions else 0


if __name__ == "__main__":
    sys.exit(main())
