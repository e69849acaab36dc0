"""`cargo xtask bench core`: Core API throughput and pause latency, Python `determined.core` 0.35
against our Rust `hr-core`, on one devmaster in one run.

Throughput: a trial of each kind (`core_trial.py` / `hr-core-conformance-trial` with
BENCH_REPORTS=N) times N training-metric reports (until all are delivered: Python's client
queues them for a background thread, so the time its calls return is recorded too) and N
checkpoints of one small file; the kinds alternate for --rounds rounds. Pause latency: a trial stepping every 0.2 s (a checkpoint per
step, `should_preempt` after each) is paused with the real `det experiment pause`; the latency is
from the command's start until the trial has saved, acknowledged the preemption and printed so,
and `det experiment describe` says PAUSED; then it is activated and paused again, --pauses times.
Prints one `bench-core: {json}` line last.
"""
import json
import pathlib
import re
import statistics
import sys
import time

from det_cli import Det, created_id, driver_parser, trial_log


def create(det, args, name, entrypoint, env, batches):
    shared = args.work / f"shared-{name}"
    shared.mkdir(parents=True, exist_ok=True)
    config = args.work / f"{name}.yaml"
    config.write_text(
        f"name: bench-{name}\n"
        f"entrypoint: {json.dumps(entrypoint)}\n"
        f"searcher: {{name: single, metric: loss, max_length: {{batches: {batches}}}}}\n"
        "resources: {slots_per_trial: 0}\n"
        "max_restarts: 0\n"
        f"checkpoint_storage: {{type: shared_fs, host_path: {json.dumps(str(shared))}, storage_path: ckpts}}\n"
        f"environment: {{environment_variables: {json.dumps(env)}}}\n"
    )
    out = det("experiment", "create", config)
    eid = created_id(out)
    if not eid:
        sys.exit(f"bench-core: creating {name} failed: {out.stdout}{out.stderr}")
    return eid


def poll(pred, what, timeout=600.0, every=0.005):
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        value = pred()
        if value:
            return value
        time.sleep(every)
    sys.exit(f"bench-core: timed out waiting for {what}")


def throughput(det, args, kind, entrypoint, n, round_):
    eid = create(det, args, f"{kind}-reports-{round_}", entrypoint, [f"BENCH_REPORTS={n}"], 1)
    log = poll(lambda: (lambda t: "bench checkpoints" in t and t)(trial_log(args.state_dir, eid)),
               f"{kind} bench trial", every=0.1)
    metrics = float(re.search(r"bench metrics \d+ ([\d.]+)", log).group(1))
    checkpoints = float(re.search(r"bench checkpoints \d+ ([\d.]+)", log).group(1))
    queued = re.search(r"bench metrics-queued \d+ ([\d.]+)", log)
    sync = re.search(r"bench metrics-sync \d+ ([\d.]+)", log)
    det("experiment", "kill", eid)
    return (n / metrics, n / checkpoints, n / float(queued.group(1)),
            n / float(sync.group(1)) if sync else None)


def pause_latencies(det, args, kind, entrypoint, pauses):
    eid = create(det, args, f"{kind}-pause", entrypoint, ["STEP_SECONDS=0.2"], 100000)
    latencies = []
    for run in range(1, pauses + 1):
        # Wait until this run has stepped at least twice (after its restore, from run 2 on).
        poll(lambda: len(re.findall(r"step \d+ checkpoint", trial_log(args.state_dir, eid).split(
            f"run {run}")[-1] if run > 1 else trial_log(args.state_dir, eid))) >= 2,
             f"{kind} run {run} stepping")
        seen = trial_log(args.state_dir, eid).count("preempted at step")
        t0 = time.perf_counter()
        out = det("experiment", "pause", eid)
        if out.returncode != 0:
            sys.exit(f"bench-core: pause failed: {out.stderr}")
        poll(lambda: trial_log(args.state_dir, eid).count("preempted at step") > seen, f"{kind} ack")
        poll(lambda: det.state(eid) == "STATE_PAUSED", f"{kind} PAUSED")
        latencies.append(time.perf_counter() - t0)
        # The trial process exits after its ack; then it can be activated again.
        time.sleep(0.5)
        det("experiment", "activate", eid)
        poll(lambda: f"run {run + 1}" in trial_log(args.state_dir, eid), f"{kind} restore", every=0.05)
    det("experiment", "kill", eid)
    return latencies


def main():
    p = driver_parser()
    p.add_argument("--work", type=pathlib.Path, required=True)
    p.add_argument("--reports", type=int, default=500)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--pauses", type=int, default=3)
    args = p.parse_args()
    det = Det(args)
    out = det("user", "login", "determined", stdin="\n")
    if out.returncode != 0:
        sys.exit(f"bench-core: login failed: {out.stderr}")
    script = str(pathlib.Path(__file__).with_name("core_trial.py"))
    kinds = {"python": [args.python, script], "rust": [args.rust_trial]}
    result = {k: {"metrics_per_s": [], "metrics_queued_per_s": [], "checkpoints_per_s": [], "pause_s": []}
              for k in kinds}
    result["rust"]["metrics_sync_per_s"] = []
    for round_ in range(args.rounds):
        for kind, entrypoint in kinds.items():
            m, c, q, sync = throughput(det, args, kind, entrypoint, args.reports, round_)
            print(f"bench-core: {kind} round {round_ + 1}: {m:.0f} metric reports/s delivered "
                  f"({q:.0f}/s returned to the caller; synchronous: {sync}), {c:.0f} checkpoints/s",
                  flush=True)
            if sync is not None:
                result[kind]["metrics_sync_per_s"].append(sync)
            result[kind]["metrics_per_s"].append(m)
            result[kind]["metrics_queued_per_s"].append(q)
            result[kind]["checkpoints_per_s"].append(c)
    for kind, entrypoint in kinds.items():
        result[kind]["pause_s"] = pause_latencies(det, args, kind, entrypoint, args.pauses)
        print(f"bench-core: {kind} pause latencies {result[kind]['pause_s']}", flush=True)
    summary = {k: {key: statistics.median(v) for key, v in r.items()} for k, r in result.items()}
    summary["reports"] = args.reports
    summary["rounds"] = args.rounds
    summary["pauses"] = args.pauses
    print("bench-core: " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
