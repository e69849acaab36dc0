"""Conformance of the devmaster with the real `determined==0.35.0` client.

Run by `cargo xtask conformance det` against a fresh devmaster. Drives the real `det` CLI
(login, experiment create with and without --paused, describe --json, pause, activate, kill,
list-checkpoints, cmd run --detach and command state) and two managed trials, one on the real
Python Core API and one on our Rust `hr-core`, through pause -> preempt -> ack -> activate ->
restore -> completion; three Python trials at once, a context directory, and the CLI's read
paths (trial describe and logs, --best, checkpoint describe and download, experiment delete). Every check looks at what the command printed (states, ids, UUIDs), not
only at its exit code. Prints `det-conformance: N passed, M failed` last.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok)))
    print(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else f"\n     {detail}"), flush=True)
    return ok


class Det:
    def __init__(self, args):
        self.args = args
        self.env = dict(os.environ, HOME=str(args.work / "home"), DET_MASTER=args.master)
        (args.work / "home").mkdir(parents=True, exist_ok=True)

    def __call__(self, *argv, stdin=""):
        cmd = [self.args.det, "-m", self.args.master, *map(str, argv)]
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=self.env, timeout=120)

    def state(self, eid):
        out = self("experiment", "describe", eid, "--json")
        return json.loads(out.stdout)[0]["experiment"]["state"] if out.returncode == 0 else f"rc={out.returncode}"


def wait(pred, what, timeout=120.0):
    end = time.time() + timeout
    while time.time() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    check(f"waited for {what}", False, f"timed out after {timeout}s")
    return None


def trial_log(state_dir, eid):
    return "".join(p.read_text() for p in sorted((state_dir / "logs").glob(f"{eid}.*.log")))


def created_id(out):
    m = re.search(r"Created experiment (\d+)", out.stdout)
    return int(m.group(1)) if m else None


def lifecycle(det, args, kind, entrypoint, storage="shared_fs"):
    shared = args.work / f"shared-{kind}"
    shared.mkdir(parents=True, exist_ok=True)
    if storage == "shared_fs":
        storage_yaml = f"{{type: shared_fs, host_path: {json.dumps(str(shared))}, storage_path: ckpts}}"
    else:
        storage_yaml = f"{{type: directory, container_path: {json.dumps(str(shared / 'ckpts'))}}}"
    config = args.work / f"{kind}-trial.yaml"
    config.write_text(
        f"name: conformance-{kind}\n"
        f"entrypoint: {json.dumps(entrypoint)}\n"
        "searcher: {name: single, metric: loss, max_length: {batches: 6}}\n"
        "resources: {slots_per_trial: 0}\n"
        "max_restarts: 0\n"
        f"checkpoint_storage: {storage_yaml}\n"
        # The first run holds after step 2 until preempted: the pause lands there however slowly
        # `det` starts.
        "environment: {environment_variables: [STEP_SECONDS=0.5, HOLD_AT_STEP=2]}\n"
    )
    out = det("experiment", "create", config)
    eid = created_id(out)
    if not check(f"{kind}: create prints the experiment id", out.returncode == 0 and eid, out.stdout + out.stderr):
        return
    check(f"{kind}: describe --json says ACTIVE", det.state(eid) == "STATE_ACTIVE")
    if not wait(lambda: "step 2 checkpoint" in trial_log(args.state_dir, eid), f"{kind} trial step 2"):
        check(f"{kind}: trial log", False, trial_log(args.state_dir, eid))
        return
    paused_at = time.time()
    out = det("experiment", "pause", eid)
    check(f"{kind}: pause exits 0", out.returncode == 0, out.stderr)
    check(f"{kind}: PAUSED is visible at once", det.state(eid) == "STATE_PAUSED")
    line = wait(lambda: re.search(r"preempted at step (\d+)", trial_log(args.state_dir, eid)), f"{kind} preemption")
    if not line:
        return
    check(f"{kind}: the trial saw preempt within one poll", time.time() - paused_at < 10, f"{time.time() - paused_at:.1f}s")
    step = int(line.group(1))
    log = trial_log(args.state_dir, eid)
    uuid = re.search(rf"step {step} checkpoint (\S+)", log).group(1)
    time.sleep(1.0)
    check(f"{kind}: still PAUSED after ack and exit", det.state(eid) == "STATE_PAUSED")
    out = det("experiment", "activate", eid)
    check(f"{kind}: activate exits 0", out.returncode == 0, out.stderr)
    wait(lambda: det.state(eid) == "STATE_COMPLETED", f"{kind} completion")
    log = trial_log(args.state_dir, eid)
    check(f"{kind}: run 2 restored the latest checkpoint", f"restored {uuid} at step {step} run 2" in log, log)
    check(f"{kind}: finished at step 6", "completed at step 6" in log, log)
    uuids = re.findall(r"step \d+ checkpoint (\S+)", log)
    out = det("experiment", "list-checkpoints", eid)
    check(f"{kind}: list-checkpoints shows all {len(uuids)} checkpoints",
          out.returncode == 0 and len(uuids) == 6 and all(u in out.stdout for u in uuids), out.stdout)


def create_training(det, args, name, entrypoint, steps, shared, hold_after=()):
    """Submits a `managed-training` experiment (its checkpoints kept through GC in `shared`);
    returns its id, or None after recording the failure. With `hold_after` (steps, the n-th for
    the n-th allocation), each allocation waits after its step until a stop is requested
    (HR_FAULT_HOLD_AT), so a pause sent once that step is visible lands there however fast the
    steps are."""
    config = args.work / f"{name}.yaml"
    points = ",".join(f"{run}:{step}" for run, step in enumerate(hold_after, start=1))
    hold = (f"environment: {{environment_variables: [{json.dumps('HR_FAULT_HOLD_AT=' + points)}]}}\n"
            if points else "")
    config.write_text(
        f"name: {name}\n"
        f"entrypoint: {json.dumps(entrypoint)}\n"
        f"searcher: {{name: single, metric: loss, max_length: {{batches: {steps}}}}}\n"
        "resources: {slots_per_trial: 0}\n"
        "max_restarts: 0\n"
        f"checkpoint_storage: {{type: shared_fs, host_path: {json.dumps(str(shared))}, storage_path: ckpts,"
        f" save_experiment_best: 0, save_trial_best: 0, save_trial_latest: {steps}}}\n"
        + hold
    )
    out = det("experiment", "create", config)
    eid = created_id(out)
    check(f"{name}: create prints the experiment id", out.returncode == 0 and eid, out.stdout + out.stderr)
    return eid


def training_lifecycle(det, args, case):
    """`hessian-recipes managed-training` (tiny model, one backend) through the real CLI:
    pause mid-run, activate, and the resumed run equals the native uninterrupted one."""
    steps, backend = case["steps"], case["backend"]
    kind = f"managed-training {backend}"
    shared = args.work / f"shared-training-{backend}"
    shared.mkdir(parents=True, exist_ok=True)
    entrypoint = [args.hessian_recipes, "managed-training", "--plan", case["plan"],
                  "--backend", backend, "--max-wall-seconds", "600", "--unqualified"]
    eid = create_training(det, args, f"conformance-training-{backend}", entrypoint, steps, shared,
                          hold_after=(1,))
    if not eid:
        return
    # The worker holds after step 1 (its metrics reported) until the pause arrives.
    if not wait(lambda: "holding after step 1" in trial_log(args.state_dir, eid), f"{kind} step 1"):
        check(f"{kind}: trial log", False, trial_log(args.state_dir, eid))
        return
    out = det("experiment", "pause", eid)
    check(f"{kind}: pause exits 0 and PAUSED is visible", out.returncode == 0 and det.state(eid) == "STATE_PAUSED", out.stderr)
    line = wait(lambda: re.search(r"preempted at step (\d+), checkpoint (\S+)", trial_log(args.state_dir, eid)),
                f"{kind} preemption")
    if not check(f"{kind}: the worker saved, published and acknowledged", line, trial_log(args.state_dir, eid)):
        return
    step, uuid = int(line.group(1)), line.group(2)
    receipts = list(shared.glob(f"ckpts/hr-run-{eid}-*/preempted_at_checkpoint.json"))
    check(f"{kind}: the durable receipt names the published checkpoint",
          len(receipts) == 1 and json.loads(receipts[0].read_text())["uuid"] == uuid, receipts)
    time.sleep(1.0)
    check(f"{kind}: still PAUSED after ack and exit", det.state(eid) == "STATE_PAUSED")
    out = det("experiment", "activate", eid)
    check(f"{kind}: activate exits 0", out.returncode == 0, out.stderr)
    wait(lambda: det.state(eid) == "STATE_COMPLETED", f"{kind} completion", 600)
    log = trial_log(args.state_dir, eid)
    check(f"{kind}: run 2 restored the receipt's checkpoint", f"restored step {step} from checkpoint {uuid}" in log, log)
    check(f"{kind}: completed at step {steps}", f"completed at step {steps}" in log, log)
    out = det("experiment", "list-checkpoints", eid)
    listed = set(re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", out.stdout))
    check(f"{kind}: list-checkpoints shows one checkpoint per step", out.returncode == 0 and len(listed) == steps, out.stdout)
    kept = list(shared.glob("ckpts/*/MANIFEST.json"))
    check(f"{kind}: the retention kept every checkpoint through garbage collection", len(kept) == steps, kept)
    evidence = list(shared.glob(f"ckpts/hr-run-{eid}-*/evidence.jsonl"))
    reference = pathlib.Path(case["reference_evidence"]).read_text()
    check(f"{kind}: evidence equals the native uninterrupted run at every step",
          len(evidence) == 1 and evidence[0].read_text() == reference and reference.count("\n") == steps,
          evidence)


def torch_distributed(det, args, case):
    """Determined's own launcher, `python3 -m determined.launch.torch_distributed` (pid_server,
    torchrun, wrap_rank), starts a 2-slot `managed-training` trial as two ranks: they meet on
    INTER_TRAIN_PROCESS_COMM_PORT_1 (torchrun's store holds C10D_PORT), and the run completes
    equal to the one-rank native run of its plan."""
    kind = "torch_distributed"
    shared = args.work / "shared-torchrun"
    shared.mkdir(parents=True, exist_ok=True)
    steps = case["steps"]
    python = case["python"]
    bindir = str(pathlib.Path(python).parent)
    entrypoint = [python, "-m", "determined.launch.torch_distributed", "--",
                  args.hessian_recipes, "managed-training", "--plan", case["plan"], "--backend", "fixture",
                  "--max-wall-seconds", "600", "--unqualified"]
    config = args.work / "torchrun.yaml"
    config.write_text(
        "name: conformance-torchrun\n"
        f"entrypoint: {json.dumps(entrypoint)}\n"
        f"searcher: {{name: single, metric: loss, max_length: {{batches: {steps}}}}}\n"
        "resources: {slots_per_trial: 2}\n"
        "max_restarts: 0\n"
        # torch_distributed runs `python3`: the one with torch and determined.
        f"environment: {{environment_variables: [{json.dumps('PATH=' + bindir + ':/usr/bin:/bin')}]}}\n"
        f"checkpoint_storage: {{type: shared_fs, host_path: {json.dumps(str(shared))}, storage_path: ckpts,"
        f" save_experiment_best: 0, save_trial_best: 0, save_trial_latest: {steps}}}\n"
    )
    out = det("experiment", "create", config)
    eid = created_id(out)
    if not check(f"{kind}: create a 2-slot experiment", out.returncode == 0 and eid, out.stdout + out.stderr):
        return
    wait(lambda: det.state(eid) in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"), f"{kind} end", 600)
    log = trial_log(args.state_dir, eid)
    check(f"{kind}: completed", det.state(eid) == "STATE_COMPLETED", log)
    check(f"{kind}: wrap_rank prefixed both ranks' lines and rank 1 stepped the chief's plan",
          "[rank=0]" in log and "[rank=1]" in log and "rank 1 of 2" in log, log)
    allocations = list(shared.glob(f"ckpts/hr-run-{eid}-*/allocations.jsonl"))
    check(f"{kind}: the chief recorded two ranks",
          len(allocations) == 1 and '"ranks":2' in allocations[0].read_text(), allocations)
    evidence = list(shared.glob(f"ckpts/hr-run-{eid}-*/evidence.jsonl"))
    reference = pathlib.Path(case["reference_evidence"]).read_text()
    check(f"{kind}: evidence equals the one-rank native run at every step",
          len(evidence) == 1 and evidence[0].read_text() == reference and reference.count("\n") == steps,
          evidence)


def grpo_search(det, args, case, searcher, trials):
    """A search of a GRPO plan's learning rate with the real `det`: `managed-training` trials of
    the fixture plan, each handed its own sampled value (`adaptive_asha`: trained rung by rung,
    each rung's checkpoint published and its operation completed, promoted trials allocated again
    and resumed from it; every trial is also paused by `det experiment pause` after its first
    step and activated). Each trial's run folder records its value in its plan.json, and its
    evidence equals the first steps of a native run of that plan, bit for bit."""
    steps, kind = case["steps"], f"grpo search {searcher}"
    shared = args.work / f"shared-search-{searcher}"
    shared.mkdir(parents=True, exist_ok=True)
    config = args.work / f"grpo-search-{searcher}.yaml"
    entrypoint = [args.hessian_recipes, "managed-training", "--plan", case["plan"],
                  "--backend", "fixture", "--max-wall-seconds", "600", "--unqualified"]
    asha = searcher == "adaptive_asha"
    extra = ", divisor: 2, mode: aggressive" if asha else ""
    # Under ASHA each trial's first allocation holds after step 1 until it is paused.
    hold = ('environment: {environment_variables: ["HR_FAULT_HOLD_AT=1:1"]}\n' if asha else "")
    config.write_text(
        f"name: grpo-search-{searcher}\n"
        f"entrypoint: {json.dumps(entrypoint)}\n"
        f"searcher: {{name: {searcher}, metric: loss, max_length: {{batches: {steps}}},"
        f" max_trials: {trials}, max_concurrent_trials: 1{extra}}}\n"
        "hyperparameters: {optimizer: {learning_rate: {type: log, base: 10, minval: -3, maxval: -1}},"
        f" steps: {{type: const, val: {steps}}}}}\n"
        "resources: {slots_per_trial: 0}\nmax_restarts: 0\n"
        f"checkpoint_storage: {{type: shared_fs, host_path: {json.dumps(str(shared))}, storage_path: ckpts,"
        f" save_experiment_best: 0, save_trial_best: 0, save_trial_latest: {steps}}}\n" + hold)
    out = det("experiment", "create", config)
    eid = created_id(out)
    if not check(f"{kind}: create a search of managed-training trials", out.returncode == 0 and eid,
                 out.stdout + out.stderr):
        return
    pauses = 0
    while asha:
        ended = lambda: det.state(eid) in ("STATE_COMPLETED", "STATE_ERROR")
        held = lambda: trial_log(args.state_dir, eid).count("holding after step 1 ") > pauses
        if not wait(lambda: held() or ended(), f"{kind} hold {pauses + 1}", 600) or not held():
            break
        out = det("experiment", "pause", eid)
        acked = wait(lambda: len(re.findall(r"preempted at step 1, checkpoint",
                                            trial_log(args.state_dir, eid))) > pauses,
                     f"{kind} preemption {pauses + 1}", 300)
        paused = wait(lambda: det.state(eid) == "STATE_PAUSED", f"{kind} PAUSED {pauses + 1}", 60)
        out = det("experiment", "activate", eid) if paused else out
        if not check(f"{kind}: pause {pauses + 1} during the search saved, PAUSED, activated",
                     acked and paused and out.returncode == 0, out.stderr):
            return
        pauses += 1
    wait(lambda: det.state(eid) in ("STATE_COMPLETED", "STATE_ERROR"), f"{kind} end", 900)
    if asha:
        check(f"{kind}: every trial was paused once with `det experiment pause` and resumed",
              pauses == trials, pauses)
    described = json.loads(det("experiment", "describe", eid, "--json").stdout or "[{}]")[0]
    tids = described.get("experiment", {}).get("trialIds") or []
    described = [json.loads(det("trial", "describe", t, "--json").stdout or "{}").get("trial", {}) for t in tids]
    rates = [t.get("hparams", {}).get("optimizer", {}).get("learning_rate") for t in described]
    lengths = [t.get("totalBatchesProcessed") or 0 for t in described]
    log = trial_log(args.state_dir, eid)
    if not check(f"{kind}: {trials} trials completed, each with its own sampled learning rate",
                 det.state(eid) == "STATE_COMPLETED" and len(described) == trials
                 and all(t.get("state") == "STATE_COMPLETED" for t in described)
                 and all(isinstance(r, float) for r in rates) and len(set(rates)) == trials,
                 (det.state(eid), rates, log[-3000:])):
        return
    if searcher == "adaptive_asha":
        check(f"{kind}: trials stopped at rungs below the plan's length and the best reached it",
              min(lengths) < steps and max(lengths) == steps, lengths)
        check(f"{kind}: a promoted trial was allocated again and resumed from its rung's checkpoint",
              re.search(r"restored step \d+ from checkpoint", log) is not None, log[-3000:])
    for tid, rate, length in zip(tids, rates, lengths):
        run = shared / "ckpts" / f"hr-run-{eid}-{tid}"
        plan = json.loads((run / "plan.json").read_text())
        check(f"{kind}: trial {tid}'s plan.json trains with its own learning rate {rate:.3g}",
              plan["optimizer"]["learning_rate"] == rate, plan["optimizer"])
        native = args.work / f"search-{searcher}-native-{tid}"
        out = subprocess.run([args.hessian_recipes, "train", "--plan", str(run / "plan.json"),
                              "--output", str(native)], capture_output=True, text=True, timeout=600)
        trained = (run / "evidence.jsonl").read_text().splitlines()
        reference = (native / "evidence.jsonl").read_text().splitlines() if out.returncode == 0 else []
        check(f"{kind}: trial {tid}'s {len(trained)} steps equal a native run of its plan, bit for bit",
              out.returncode == 0 and len(trained) == length and trained == reference[:length],
              out.stderr[-2000:])


def main_run(det, args, case):
    """The main run end to end: a long plan under `managed-training`, admitted by the gate with
    its qualification proofs, paused and activated twice (the deadline fixed at the first start
    and the device budget carried across allocations), ending equal to the native uninterrupted
    run; then `hessian-recipes evaluate` of the run folder writes the sealed report."""
    steps, kind = case["steps"], "main run"
    shared = args.work / "shared-main"
    shared.mkdir(parents=True, exist_ok=True)
    entrypoint = [args.hessian_recipes, "managed-training", "--plan", case["plan"], "--backend", "fixture",
                  "--max-wall-seconds", "3600", "--proofs", case["proofs"]]
    # Each allocation holds after its pause step (256 tiny steps take seconds; `det` starts slower).
    eid = create_training(det, args, "conformance-main-run", entrypoint, steps, shared,
                          hold_after=case["pauses"])
    if not eid:
        return

    restored = []
    for n, at in enumerate(case["pauses"], start=1):
        holding = f"holding after step {at} "
        if not wait(lambda: holding in trial_log(args.state_dir, eid) or det.state(eid) != "STATE_ACTIVE",
                    f"{kind} step {at}", 600):
            check(f"{kind}: trial log", False, trial_log(args.state_dir, eid)[-3000:])
            return
        out = det("experiment", "pause", eid)
        check(f"{kind}: pause {n} (after step {at}) exits 0", out.returncode == 0, out.stderr)
        pattern = r"preempted at step (\d+), checkpoint (\S+)"
        line = wait(lambda: len(re.findall(pattern, trial_log(args.state_dir, eid))) >= n, f"{kind} preemption {n}", 300)
        if not check(f"{kind}: the worker saved and acknowledged pause {n}", line, trial_log(args.state_dir, eid)[-3000:]):
            return
        restored.append(re.findall(pattern, trial_log(args.state_dir, eid))[n - 1])
        wait(lambda: det.state(eid) == "STATE_PAUSED", f"{kind} PAUSED {n}", 60)
        out = det("experiment", "activate", eid)
        check(f"{kind}: activate {n} exits 0", out.returncode == 0, out.stderr)
    wait(lambda: det.state(eid) == "STATE_COMPLETED", f"{kind} completion", 900)
    log = trial_log(args.state_dir, eid)
    check(f"{kind}: completed at step {steps}", f"completed at step {steps}" in log, log[-3000:])
    for n, (step, uuid) in enumerate(restored, start=2):
        check(f"{kind}: run {n} restored the receipt's checkpoint at step {step}",
              f"restored step {step} from checkpoint {uuid}" in log, log[-3000:])
    run_dirs = list(shared.glob(f"ckpts/hr-run-{eid}-*"))
    if not check(f"{kind}: one run folder", len(run_dirs) == 1, run_dirs):
        return
    run_dir = run_dirs[0]
    starts = [json.loads(l) for l in (run_dir / "allocations.jsonl").read_text().splitlines()]
    starts = [r for r in starts if "deadline_unix_s" in r]
    check(f"{kind}: three allocations, one deadline fixed at the first start",
          len(starts) == 3 and len({r["deadline_unix_s"] for r in starts}) == 1, starts)
    used = [r["device_seconds_used"] for r in starts]
    check(f"{kind}: the device budget accumulates across allocations", used[0] == 0 and used == sorted(used) and used[2] > 0, used)
    check(f"{kind}: every allocation ran admitted by the proofs, none unqualified",
          all(r["unqualified"] is False for r in starts), starts)
    reference = pathlib.Path(case["reference_evidence"]).read_text()
    check(f"{kind}: evidence equals the native uninterrupted run at every step",
          (run_dir / "evidence.jsonl").read_text() == reference and reference.count("\n") == steps)
    report_dir = args.work / "main-evaluation"
    # By experiment id: the master's config names the storage, its one trial the run folder.
    out = subprocess.run([args.hessian_recipes, "evaluate", "--resume", str(eid), "--master", args.master,
                          "--output", str(report_dir)], capture_output=True, text=True, timeout=600)
    if check(f"{kind}: evaluate --resume <experiment id> finds the run folder and exits 0",
             out.returncode == 0 and f"hr-run-{eid}-" in out.stderr, out.stdout + out.stderr):
        report = json.loads((report_dir / "payload" / "report.json").read_text())
        adopted = [c["step"] for c in report["checkpoints"]]
        check(f"{kind}: evaluate adopted {case['evaluate']} and selected one of them on DEV",
              adopted == case["evaluate"] and report["selected_step"] in adopted, report)
        # While training, the trial reported at each adopted step the DEV reward `evaluate` found
        # for that checkpoint, as validation metrics.
        dev = {c["step"]: c["dev"]["mean_reward"] for c in report["checkpoints"]}
        out = det("trial", "describe", trial_of(det, eid), "--json")
        workloads = json.loads(out.stdout).get("workloads", []) if out.returncode == 0 else []
        reported = {w["validation"]["totalBatches"]: w["validation"]["metrics"]["avgMetrics"].get("dev_reward")
                    for w in workloads if w.get("validation")}
        check(f"{kind}: the trial reported the DEV reward evaluate found at each adopted step",
              reported == dev and len(dev) == len(case["evaluate"]), (reported, dev))


UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def trial_of(det, eid):
    described = json.loads(det("experiment", "describe", eid, "--json").stdout or "[{}]")[0]
    tids = described.get("experiment", {}).get("trialIds") or []
    return tids[0] if tids else None


def concurrent_trials_and_read_paths(det, args):
    """Three Python Core trials at once (each waits until all three have started), each reading
    its own identity and recording its own metrics and checkpoints; then what the CLI reads
    about them: trial describe (workloads, summary metrics), list-checkpoints --best 1,
    checkpoint describe and download, and experiment delete."""
    script = str(pathlib.Path(__file__).with_name("core_trial.py"))
    gate = args.work / "concurrent-gate"
    shared = args.work / "shared-concurrent"
    eids = []
    for n in range(3):
        config = args.work / f"concurrent-{n}.yaml"
        config.write_text(
            f"name: concurrent-{n}\n"
            f"entrypoint: {json.dumps([args.python, script])}\n"
            "searcher: {name: single, metric: val_loss, smaller_is_better: true, max_length: {batches: 6}}\n"
            "resources: {slots_per_trial: 0}\nmax_restarts: 0\n"
            f"checkpoint_storage: {{type: shared_fs, host_path: {json.dumps(str(shared))}, storage_path: ckpts}}\n"
            f"environment: {{environment_variables: [STEP_SECONDS=0, {json.dumps('GATE=' + str(gate))}]}}\n")
        out = det("experiment", "create", config)
        eid = created_id(out)
        if not check(f"concurrent: create experiment {n + 1} of 3", out.returncode == 0 and eid, out.stdout + out.stderr):
            return
        eids.append(eid)
    tids = {eid: trial_of(det, eid) for eid in eids}
    started = wait(lambda: all(pathlib.Path(f"{gate}.{t}").exists() for t in tids.values()), "three trials at once")
    check("concurrent: three Python Core trials run at the same time", started,
          "".join(trial_log(args.state_dir, e) for e in eids))
    gate.touch()
    for eid in eids:
        wait(lambda: det.state(eid) == "STATE_COMPLETED", f"experiment {eid} completion")
    for eid, tid in tids.items():
        log = trial_log(args.state_dir, eid)
        check(f"concurrent: trial {tid} read its own identity and completed",
              f"identity trial {tid} experiment {eid}" in log and "completed at step 6" in log, log)
        out = det("trial", "describe", tid, "--json")
        described = json.loads(out.stdout) if out.returncode == 0 else {}
        training = [w["training"]["totalBatches"] for w in described.get("workloads", []) if w.get("training")]
        summary = described.get("trial", {}).get("summaryMetrics") or {}
        check(f"concurrent: trial describe shows trial {tid}'s own six reports and their summary",
              training == [1, 2, 3, 4, 5, 6]
              and summary.get("avg_metrics", {}).get("loss", {}).get("count") == 6
              and summary.get("validation_metrics", {}).get("val_loss", {}).get("min") == 0.5,
              out.stdout[-2000:] + out.stderr)

    eid = eids[0]
    log = trial_log(args.state_dir, eid)
    best = re.search(r"step 3 checkpoint (\S+)", log)
    best = best.group(1) if best else "missing"
    out = det("experiment", "list-checkpoints", "--best", "1", eid)
    check("list-checkpoints --best 1 gives the checkpoint of the best searcher metric (step 3)",
          out.returncode == 0 and re.findall(UUID, out.stdout) == [best] and "0.5" in out.stdout,
          out.stdout + out.stderr)
    out = det("checkpoint", "describe", best)
    check("checkpoint describe shows the checkpoint and its validation metrics",
          out.returncode == 0 and best in out.stdout and "val_loss" in out.stdout, out.stdout + out.stderr)
    dest = args.work / "downloaded"
    out = det("checkpoint", "download", best, "--output-dir", dest)
    state_file = dest / "state.json"
    check("checkpoint download copies the checkpoint's files",
          out.returncode == 0 and state_file.exists() and json.loads(state_file.read_text())["step"] == 3,
          out.stdout + out.stderr)

    doomed = eids[2]
    uuids = re.findall(r"step \d+ checkpoint (\S+)", trial_log(args.state_dir, doomed))
    out = det("experiment", "delete", doomed, "--yes")
    gone = det("experiment", "describe", doomed, "--json")
    check("experiment delete removes the experiment and its checkpoint files",
          out.returncode == 0 and gone.returncode != 0 and uuids
          and not any((shared / "ckpts" / u).exists() for u in uuids),
          out.stdout + out.stderr + gone.stderr)


def adaptive_asha(det, args):
    """An adaptive_asha search of Python Core trials: trials train rung by rung (2, 4, 8
    batches), those not promoted exit and wait, promoted ones are allocated again and resume from
    their checkpoint, and the search completes with every trial closed. One trial process runs at
    a time (SERIAL_DIR) and earlier trials rank better (RANK_BY_TRIAL), so the order of reports,
    and so which trial is promoted after it exited, is fixed whatever the machine's speed."""
    script = str(pathlib.Path(__file__).with_name("core_trial.py"))
    config = args.work / "asha.yaml"
    config.write_text(
        "name: asha\n"
        f"entrypoint: {json.dumps([args.python, script])}\n"
        "searcher: {name: adaptive_asha, metric: loss, max_length: {batches: 8}, max_trials: 4,"
        " divisor: 2, mode: aggressive, max_concurrent_trials: 1}\n"
        "hyperparameters: {scale: {type: double, minval: 1, maxval: 10}}\n"
        "resources: {slots_per_trial: 0}\nmax_restarts: 0\n"
        "environment: {environment_variables: [STEP_SECONDS=0, RANK_BY_TRIAL=1, "
        f"{json.dumps('SERIAL_DIR=' + str(args.work / 'asha-serial'))}]}}\n")
    out = det("experiment", "create", config)
    eid = created_id(out)
    if not check("asha: create an adaptive_asha search", out.returncode == 0 and eid, out.stdout + out.stderr):
        return
    wait(lambda: det.state(eid) in ("STATE_COMPLETED", "STATE_ERROR"), "the asha search's end", 300)
    described = json.loads(det("experiment", "describe", eid, "--json").stdout or "[{}]")[0]
    tids = described.get("experiment", {}).get("trialIds") or []
    trials = [json.loads(det("trial", "describe", t, "--json").stdout or "{}").get("trial", {}) for t in tids]
    lengths = sorted(t.get("totalBatchesProcessed") or 0 for t in trials)
    log = trial_log(args.state_dir, eid)
    check("asha: four trials on rungs of 2, 4 and 8 batches, the best promoted to the top, all completed",
          det.state(eid) == "STATE_COMPLETED" and len(trials) == 4
          and all(t.get("state") == "STATE_COMPLETED" for t in trials)
          and lengths[0] == 2 and lengths[-1] == 8, (lengths, [t.get("state") for t in trials]))
    check("asha: a trial promoted after it exited was allocated again and restored its checkpoint",
          re.search(r"restored \S+ at step [24] run 2", log) is not None, log[-3000:])
    # A waiting trial is allocated only for a new operation: every restore trains further.
    check("asha: no allocation without work (each restored run trained on)",
          re.search(r"restored \S+ at step (\d+) run \d+\ncompleted at step \1\n", log) is None, log[-3000:])


def context_directory(det, args):
    """`det experiment create CONFIG DIR`: the folder's files are in the trial's work folder."""
    ctx = args.work / "context"
    (ctx / "pkg").mkdir(parents=True, exist_ok=True)
    (ctx / "pkg" / "__init__.py").write_text("GREETING = 'hello from the context directory'\n")
    (ctx / "ctx_trial.py").write_text(
        "import determined as det\nimport pkg\n"
        "print(pkg.GREETING, 'in trial', det.get_cluster_info().trial.trial_id, flush=True)\n")
    config = args.work / "context.yaml"
    config.write_text(
        "name: context\n"
        f"entrypoint: {json.dumps([args.python, 'ctx_trial.py'])}\n"
        "searcher: {name: single, metric: loss, max_length: 1}\n"
        "resources: {slots_per_trial: 0}\nmax_restarts: 0\n")
    out = det("experiment", "create", config, ctx)
    eid = created_id(out)
    if check("context: create with a context directory", out.returncode == 0 and eid, out.stdout + out.stderr):
        wait(lambda: det.state(eid) in ("STATE_COMPLETED", "STATE_ERROR"), "the context trial's end", 60)
        log = trial_log(args.state_dir, eid)
        check("context: the trial ran the uploaded script and imported the uploaded package",
              det.state(eid) == "STATE_COMPLETED"
              and f"hello from the context directory in trial {trial_of(det, eid)}" in log, log)


def finish(suite):
    """Prints `SUITE: N passed, M failed` (the line xtask reads) and exits 1 on a failure."""
    passed = sum(ok for _, ok in RESULTS)
    failed = len(RESULTS) - passed
    print(f"{suite}: {passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


def driver_parser():
    """The arguments `cargo xtask` gives every driver (`det_driver` in xtask/src/conformance.rs):
    the master, `det`, the Python with `determined`, the Rust Core trial, the devmaster's state."""
    p = argparse.ArgumentParser()
    for name in ("--master", "--det", "--python", "--rust-trial"):
        p.add_argument(name, required=True)
    p.add_argument("--state-dir", type=pathlib.Path, required=True)
    return p


def main():
    p = driver_parser()
    p.add_argument("--local-config", required=True)
    p.add_argument("--hessian-recipes", required=True)
    p.add_argument("--training-cases", type=pathlib.Path, required=True)
    p.add_argument("--main-run", type=pathlib.Path, required=True)
    p.add_argument("--torchrun-case", type=pathlib.Path, required=True)
    p.add_argument("--work", type=pathlib.Path, required=True)
    args = p.parse_args()
    det = Det(args)

    out = det("user", "login", "determined", stdin="\n")
    check("login exits 0", out.returncode == 0, out.stderr)
    out = det("user", "whoami")
    check("whoami names the user", "determined" in out.stdout, out.stdout + out.stderr)

    out = det("experiment", "create", args.local_config, "--paused")
    eid = created_id(out)
    if check("create --paused (rendered local-profile config)", out.returncode == 0 and eid, out.stdout + out.stderr):
        described = json.loads(det("experiment", "describe", eid, "--json").stdout)[0]
        check("describe --json: PAUSED with the rendered name and entrypoint",
              described["experiment"]["state"] == "STATE_PAUSED"
              and described["experiment"]["name"] == "hessian-recipes managed CPU lifecycle"
              and described["config"]["entrypoint"][-2:] == ["managed-trial", "cpu"], described["experiment"])
        out = det("experiment", "kill", eid)
        check("kill exits 0", out.returncode == 0, out.stderr)
        check("a killed experiment ends CANCELED", wait(lambda: det.state(eid) == "STATE_CANCELED", "CANCELED", 30))
        out = det("experiment", "activate", eid)
        check("activate of a terminal experiment fails", out.returncode != 0 and "incompatible" in out.stderr, out.stderr)

    script = str(pathlib.Path(__file__).with_name("core_trial.py"))
    lifecycle(det, args, "python", [args.python, script])
    lifecycle(det, args, "python-directory", [args.python, script], storage="directory")
    lifecycle(det, args, "rust", [args.rust_trial])
    concurrent_trials_and_read_paths(det, args)
    context_directory(det, args)
    for case in json.loads(args.training_cases.read_text()):
        training_lifecycle(det, args, case)
    main_run(det, args, json.loads(args.main_run.read_text()))
    torch_distributed(det, args, json.loads(args.torchrun_case.read_text()))
    fixture = next(c for c in json.loads(args.training_cases.read_text()) if c["backend"] == "fixture")
    grpo_search(det, args, fixture, "random", 2)
    grpo_search(det, args, fixture, "adaptive_asha", 4)

    out = det("command", "run", "--detach", "sh", "-c", "echo conformance-ok; echo second-line")
    cid = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    uuid_re = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    if check("cmd run --detach prints the command id", out.returncode == 0 and re.match(uuid_re, cid), out.stdout + out.stderr):
        def terminated():
            d = det("command", "describe", cid, "--json")
            return d.returncode == 0 and json.loads(d.stdout).get("state") == "TERMINATED" and json.loads(d.stdout)
        done = wait(terminated, "command termination", 60)
        check("command describe --json: TERMINATED with exit status 0", done and done.get("exitStatus") == "0", done)
        logs = det("command", "logs", cid)
        check("command logs carry its output, a line each",
              re.search(r"conformance-ok[ \t]*\n.*second-line", logs.stdout) is not None, logs.stdout + logs.stderr)

    out = det("experiment", "list")
    rows = [[cell.strip() for cell in line.split("|")] for line in out.stdout.splitlines()]
    check("experiment list shows the experiments created", out.returncode == 0 and str(eid) in [r[0] for r in rows],
          out.stdout + out.stderr)
    # Progress is reported in the searcher's units (Python's op.report_progress(batches), our
    # trainer's steps) and shown as their share of max_length: completed runs read 100%.
    completed = [r for r in rows if len(r) > 5 and r[4] == "COMPLETED"]
    check("experiment list shows completed runs at 100% progress",
          completed and all(r[5] == "100.0%" for r in completed), out.stdout)

    # Hyperparameter specs arrive as values; what the devmaster would run differently (another
    # searcher, more slots than it has) is refused at create, naming the field.
    def config(name, extra):
        path = args.work / f"{name}.yaml"
        path.write_text(f"name: {name}\nentrypoint: [/bin/sh, -c, 'echo \"hparams=$DET_HPARAMS\"']\n"
                        "searcher: {name: single, metric: loss, max_length: {batches: 1}}\n"
                        "max_restarts: 0\n" + extra)
        return path
    out = det("experiment", "create", config("hparams", "resources: {slots_per_trial: 0}\nhyperparameters: "
              "{lr: {type: const, val: 0.1}, n: {type: int, minval: 1, maxval: 4}, o: {x: 2}}\n"))
    hid = created_id(out)
    if check("create with hyperparameter specs", out.returncode == 0 and hid, out.stdout + out.stderr):
        wait(lambda: det.state(hid) == "STATE_COMPLETED", "the hparams trial's completion", 60)
        log = trial_log(args.state_dir, hid)
        m = re.search(r"hparams=(\{.*\})", log)
        handed = json.loads(m.group(1)) if m else {}
        check("a trial reads hyperparameter values, not specs",
              handed.get("lr") == 0.1 and handed.get("n") in (1, 2, 3, 4) and handed.get("o") == {"x": 2}, log)
        tid = trial_of(det, hid)
        out = det("trial", "logs", tid) if tid else None
        check("trial logs prints the trial's output, a line each",
              out is not None and out.returncode == 0 and re.search(r"hparams=\{.*\}\s*$", out.stdout, re.M),
              out and out.stdout + out.stderr)
        out = det("trial", "logs", tid, "--tail", "1") if tid else None
        check("trial logs --tail 1 prints the last line only",
              out is not None and out.returncode == 0 and out.stdout.count("hparams=") == 1, out and out.stdout + out.stderr)
    path = config("random", "resources: {slots_per_trial: 0}\nhyperparameters: {n: {type: int, minval: 1, maxval: 1000000}}\n")
    path.write_text(path.read_text().replace("{name: single,", "{name: random, max_trials: 3, max_concurrent_trials: 2,"))
    out = det("experiment", "create", path)
    rid = created_id(out)
    if check("create a random search", out.returncode == 0 and rid, out.stdout + out.stderr):
        wait(lambda: det.state(rid) == "STATE_COMPLETED", "the random search's completion", 120)
        described = json.loads(det("experiment", "describe", rid, "--json").stdout or "[{}]")[0]
        tids = described.get("experiment", {}).get("trialIds") or []
        values = [json.loads(det("trial", "describe", t, "--json").stdout or "{}").get("trial", {}).get("hparams", {}).get("n")
                  for t in tids]
        check("a random search ran max_trials trials, each with its own sampled value",
              len(tids) == 3 and all(isinstance(v, int) for v in values) and len(set(values)) > 1, (tids, values))
    adaptive_asha(det, args)
    for name, extra, field in [
        ("asha", "resources: {slots_per_trial: 0}\n", "searcher.stop_once"),
        ("slots", "resources: {slots_per_trial: 8}\n", "resources.slots_per_trial"),
    ]:
        path = config(name, extra)
        if name == "asha":
            path.write_text(path.read_text().replace("{name: single,", "{name: adaptive_asha, max_trials: 4, stop_once: true,"))
        out = det("experiment", "create", path)
        check(f"create refuses {name} naming {field}", out.returncode != 0 and field in out.stdout + out.stderr,
              out.stdout + out.stderr)

    out = det("workspace", "list")
    check("workspace list shows the devmaster's workspace",
          out.returncode == 0 and re.search(r"^\s*1 \| Uncategorized", out.stdout, re.M), out.stdout + out.stderr)

    out = det("task", "list")
    check("task list shows the task table", out.returncode == 0 and "Task ID" in out.stdout, out.stdout + out.stderr)

    # A route the devmaster does not serve fails with Determined's envelope naming it.
    out = det("model", "list")
    check("an unserved route (model list) is named in det's error",
          out.returncode != 0 and "is not served by the devmaster" in out.stdout + out.stderr, out.stdout + out.stderr)

    finish("det-conformance")


if __name__ == "__main__":
    main()
