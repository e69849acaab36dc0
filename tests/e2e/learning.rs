//! Training learns: on the tiny random model, GRPO on the fixture's `digits` tasks (reward = the
//! share of digit characters in the answer, about 10 of the 264 tokens at random) raises the mean
//! reward well above the base policy's level within a few dozen steps. The same plan with a
//! vanishing learning rate (1e-9; a plan refuses 0) is the control: without effective updates the
//! reward stays at the base level, so the
//! assertion measures learning, not luck. `evaluate` then shows it carries to questions training
//! never saw: the selected checkpoint beats the base model on the HELD-OUT split.

use hr_tests::tiny_model::{TinySpec, write_tiny_model};
use hr_tests::{Scratch, text};
use serde_json::json;

const STEPS: usize = 60;

/// The mean training reward of every step of a run (`run/` in the returned scratch folder) of
/// the learnable plan at `learning_rate`.
fn rewards(learning_rate: f64) -> (Scratch, Vec<f64>) {
    let s = Scratch::new();
    write_tiny_model(&s.path().join("model"), &TinySpec::default());
    let plan = json!({
        "schema_version": 1,
        "name": "learn-digits",
        "model": {"path": "model", "lora": {"rank": 8, "alpha": 16.0, "targets": ["q_proj", "v_proj", "down_proj"]}},
        "environment": {"backend": "fixture", "tasks": {"kind": "digits", "count": 16, "seed": 3}},
        "grpo": {"tasks_per_step": 2, "num_generations": 8, "max_completion_length": 8,
                 "max_turn_tokens": 8, "beta": 0.0},
        "optimizer": {"learning_rate": learning_rate, "warmup_steps": 1, "decay": "constant",
                      "weight_decay": 0.0},
        "steps": STEPS,
        "checkpoints": {"every": 10},
        "seeds": {"sampling": 5, "adapter_init": 11, "task_order": 7},
        "evaluation": {"checkpoints": [30, 60], "dev": {"count": 8, "seed": 1},
                       "held_out": {"count": 8, "seed": 2}, "num_generations": 4,
                       "retention_max_new_tokens": 8}
    });
    s.write("plan.json", &plan.to_string());
    let out = s.run(&["train", "--plan", "plan.json", "--output", "run"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let metrics = std::fs::read_to_string(s.path().join("run/metrics.jsonl")).expect("metrics");
    let rewards: Vec<f64> = metrics
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("metrics line");
            v["reward"].as_f64().expect("reward")
        })
        .collect();
    assert_eq!(rewards.len(), STEPS, "one metrics line per step");
    (s, rewards)
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

#[test]
fn grpo_raises_the_mean_reward_of_a_learnable_task_and_a_vanishing_learning_rate_does_not() {
    let (run, trained) = rewards(0.05);
    let (_, frozen) = rewards(1e-9);
    // Step 1 samples from the base policy in both runs: same seeds, same model.
    assert_eq!(
        trained[0], frozen[0],
        "step 1 is the base policy in both runs"
    );
    let base = mean(&frozen);
    let (start, end) = (mean(&trained[..3]), mean(&trained[STEPS - 10..]));
    assert!(
        end >= base + 0.15 && end >= 2.0 * base,
        "no clear rise: base {base:.3}, first 3 steps {start:.3}, last 10 steps {end:.3} \
         ({trained:?})"
    );
    assert!(
        mean(&frozen[STEPS - 10..]) < base + 0.05,
        "the control drifted without updates: {frozen:?}"
    );
    let out = run.run(&["evaluate", "--resume", "run", "--output", "eval"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(run.path().join("eval/payload/report.json")).expect("report"),
    )
    .expect("report json");
    let held = |who: &str| {
        report[who]["mean_reward"]
            .as_f64()
            .expect("held-out reward")
    };
    let (base, selected) = (held("held_out_base"), held("held_out_selected"));
    assert!(
        selected >= base + 0.15,
        "no rise on HELD-OUT questions: base {base:.3}, selected {selected:.3}"
    );
}
