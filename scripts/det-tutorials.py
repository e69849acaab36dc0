"""Runs Determined 0.35.0's Core API tutorials, unchanged, against a devmaster with the real CLI.

    python scripts/det-tutorials.py --master URL --det DET --tutorials DIR --work DIR

DIR is `examples/tutorials/core_api` of determined-ai/determined at tag 0.35.0 (CI cannot
download it). The devmaster must run with `--slots 8` (for `4_distributed`) and with a `python3`
on its PATH that has `determined==0.35.0` and `torch` (the tutorials' TensorBoard writer needs
it), as a Determined task image has. Each tutorial's folder is its context directory; `2` is
paused once it has a checkpoint and activated again. Prints one line per tutorial and exits 1
unless all five completed.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--master", required=True)
p.add_argument("--det", required=True)
p.add_argument("--tutorials", type=pathlib.Path, required=True)
p.add_argument("--work", type=pathlib.Path, required=True)
args = p.parse_args()
env = dict(os.environ, HOME=str(args.work / "home"))
(args.work / "home").mkdir(parents=True, exist_ok=True)


def det(*argv, stdin=""):
    return subprocess.run([args.det, "-m", args.master, *map(str, argv)], input=stdin,
                          capture_output=True, text=True, env=env, timeout=300)


def describe(kind, ident):
    out = det(kind, "describe", ident, "--json")
    return json.loads(out.stdout) if out.returncode == 0 else None


def state(eid):
    d = describe("experiment", eid)
    return d[0]["experiment"]["state"] if d else "?"


def wait(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.5)
    return False


det("user", "login", "determined", stdin="\n")
ok = True
for name in ["0_start", "1_metrics", "2_checkpoints", "3_hpsearch", "4_distributed"]:
    ctx = args.work / name
    shutil.rmtree(ctx, ignore_errors=True)
    shutil.copytree(args.tutorials, ctx)
    out = det("experiment", "create", ctx / f"{name}.yaml", ctx)
    m = re.search(r"Created experiment (\d+)", out.stdout)
    if not m:
        print(f"{name}: not created: {(out.stdout + out.stderr).strip()[-300:]}")
        ok = False
        continue
    eid = m.group(1)
    note = ""
    if name == "2_checkpoints":
        wait(lambda: re.search(r"[0-9a-f]{8}-", det("experiment", "list-checkpoints", eid).stdout), 120)
        det("experiment", "pause", eid)
        wait(lambda: state(eid) == "STATE_PAUSED", 60)
        det("experiment", "activate", eid)
        note = " (paused and activated)"
    wait(lambda: state(eid) in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"), 900)
    trials = [describe("trial", t)["trial"] for t in describe("experiment", eid)[0]["experiment"]["trialIds"]]
    summary = [(t["id"], t["state"].removeprefix("STATE_"), t["hparams"], t["totalBatchesProcessed"],
                ((t.get("summaryMetrics") or {}).get("validation_metrics") or {}).get("x", {}).get("last"))
               for t in trials]
    print(f"{name}: {state(eid)}{note}; trials (id, state, hparams, batches, last validation x): {summary}")
    ok = ok and state(eid) == "STATE_COMPLETED"
sys.exit(0 if ok else 1)
