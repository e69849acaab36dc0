"""A real Determined 0.35 Core API trial for the devmaster conformance check.

Prints the identity it read from /run/determined/info. With SERIAL_DIR=PATH it waits until
every process that started before it (with the same PATH) has exited. With GATE=PATH it creates
PATH.<trial id> and waits for PATH to exist (so trials provably run at the same time). Restores
`state.json` from `info.latest_checkpoint`, then per step: reports a training metric and a
validation metric (`val_loss`, best at step 3), stores a checkpoint whose metadata holds
steps_completed, reports progress, and exits 0 right after `should_preempt()` turns true (which
acknowledges the preemption); with HOLD_AT_STEP=N its first run waits after step N until then. Prints one line per event so the check can follow it. With BENCH_REPORTS=N it instead times N metric reports and N
checkpoints (`cargo xtask bench core`).
"""
import atexit
import json
import os
import pathlib
import sys
import time

import determined as det
from determined import core


def main() -> None:
    info = det.get_cluster_info()
    assert info is not None, "no cluster info: is /run/determined/info written?"
    latest = info.latest_checkpoint
    print(f"identity trial {info.trial.trial_id} experiment {info.trial.experiment_id}", flush=True)
    serial = os.environ.get("SERIAL_DIR")
    if serial:
        # One process at a time: wait until every process started before this one has exited.
        folder = pathlib.Path(serial)
        folder.mkdir(parents=True, exist_ok=True)
        me = f"{info.trial.trial_id}-{info.trial._trial_run_id}"
        while len(list(folder.glob("exited-*"))) < len(list(folder.glob("started-*"))):
            time.sleep(0.05)
        (folder / f"started-{me}").touch()
        atexit.register(lambda: (folder / f"exited-{me}").touch())
    gate = os.environ.get("GATE")
    if gate:
        pathlib.Path(f"{gate}.{info.trial.trial_id}").touch()
        while not os.path.exists(gate):
            time.sleep(0.05)
    step_seconds = float(os.environ.get("STEP_SECONDS", "0.5"))
    with core.init(tensorboard_mode=core.TensorboardMode.MANUAL) as ctx:
        if os.environ.get("BENCH_REPORTS"):
            return bench(ctx, int(os.environ["BENCH_REPORTS"]))
        step = 0
        if latest is not None:
            with ctx.checkpoint.restore_path(latest) as path:
                step = json.loads((path / "state.json").read_text())["step"]
            print(f"restored {latest} at step {step} run {info.trial._trial_run_id}", flush=True)
        for op in ctx.searcher.operations():
            while step < op.length:
                step += 1
                ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
                ctx.train.report_validation_metrics(steps_completed=step, metrics={"val_loss": abs(step - 3) + 0.5})
                with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
                    (path / "state.json").write_text(json.dumps({"step": step}))
                print(f"step {step} checkpoint {uuid}", flush=True)
                op.report_progress(step)
                if str(step) == os.environ.get("HOLD_AT_STEP") and info.trial._trial_run_id == 1:
                    # Held until a preemption comes (at most 10 minutes), so a pause sent on
                    # seeing this step's line lands here however slowly it is sent.
                    held = time.time()
                    while not ctx.preempt.should_preempt() and time.time() - held < 600:
                        time.sleep(0.02)
                if ctx.preempt.should_preempt():
                    print(f"preempted at step {step}", flush=True)
                    sys.exit(0)
                time.sleep(step_seconds)
            # RANK_BY_TRIAL: the earlier trial is better (a fixed order); else scaled by the
            # trial's `scale` hyperparameter (when it has one).
            if os.environ.get("RANK_BY_TRIAL"):
                op.report_completed(float(info.trial.trial_id))
            else:
                op.report_completed(info.trial.hparams.get("scale", 1.0) / step)
        print(f"completed at step {step}", flush=True)


def bench(ctx, n: int) -> None:
    """N training-metric reports, then N checkpoints of one small file, each timed as a whole."""
    t0 = time.perf_counter()
    for step in range(1, n + 1):
        ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
    # determined.core only queues a report; a background thread posts it. Time both.
    print(f"bench metrics-queued {n} {time.perf_counter() - t0:.6f}", flush=True)
    ctx.train._metrics.close()  # drains the queue: every report delivered
    print(f"bench metrics {n} {time.perf_counter() - t0:.6f}", flush=True)
    t0 = time.perf_counter()
    for step in range(1, n + 1):
        with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _uuid):
            (path / "state.json").write_text(json.dumps({"step": step}))
    print(f"bench checkpoints {n} {time.perf_counter() - t0:.6f}", flush=True)


if __name__ == "__main__":
    main()
