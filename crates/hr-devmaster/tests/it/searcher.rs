//! What a trial is handed and what is refused at create: hyperparameter specs arrive as values
//! drawn from the trial's seed (and `det trial describe` shows them); `random` and `grid` run
//! their trials, at most `max_concurrent_trials` at once; what it cannot run (ASHA's stopping
//! variant, more slots than the devmaster has) is refused naming the field.

use hr_det::{Client, DetError, wire::State};
use hr_devmaster::{Devmaster, DevmasterConfig};
use serde_json::{Value, json};

async fn start(dir: &std::path::Path, slots: u32) -> (Devmaster, Client) {
    crate::support::start_with(DevmasterConfig {
        slots,
        ..crate::support::default_config(&dir.join("state"))
    })
    .await
}

const HPARAMS: &str = "hyperparameters:\n  lr: {type: const, val: 0.1}\n  bare: 7\n  \
    n: {type: int, minval: 1, maxval: 4}\n  c: {type: categorical, vals: [a, b]}\n  \
    nested: {x: {type: const, val: 2}}\n";

/// A config whose trial prints what it was handed, with `extra` top-level YAML.
fn config(seed: u32, extra: &str) -> String {
    format!(
        "{}reproducibility: {{experiment_seed: {seed}}}\n{extra}",
        crate::support::config("echo \"hparams=$DET_HPARAMS\"", 0)
    )
}

#[tokio::test]
async fn a_trial_reads_values_drawn_from_its_seed_not_specs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), 0).await;
    let mut seen = Vec::new();
    for seed in [5, 5] {
        let trial = crate::support::create_trial(&client, &config(seed, HPARAMS)).await;
        crate::support::eventually("the trial ends", || async {
            client
                .list_trials(trial.experiment_id)
                .await
                .is_ok_and(|t| t.trials[0].state == State::Completed)
        })
        .await;
        let described = client
            .list_trials(trial.experiment_id)
            .await
            .expect("trials");
        let log: String = std::fs::read_dir(tmp.path().join("state/logs"))
            .expect("logs")
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{}.", trial.experiment_id))
            })
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect();
        let handed: Value = log
            .lines()
            .find_map(|l| l.strip_prefix("hparams="))
            .and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_else(|| panic!("no hparams line in {log}"));
        assert_eq!(handed["lr"], json!(0.1));
        assert_eq!(handed["bare"], json!(7));
        assert_eq!(handed["nested"], json!({"x": 2}));
        assert!(
            (1..=4).contains(&handed["n"].as_i64().expect("an int")),
            "{handed}"
        );
        assert!(
            ["a", "b"].contains(&handed["c"].as_str().expect("a string")),
            "{handed}"
        );
        assert_eq!(
            described.trials[0].hparams, handed,
            "describe shows what the trial read"
        );
        seen.push(handed);
    }
    assert_eq!(seen[0], seen[1], "the same seed draws the same values");
    master.shutdown();
}

#[tokio::test]
async fn what_it_would_run_differently_is_refused_at_create_naming_the_field() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), 0).await;
    let stopping = config(1, "").replace(
        "searcher: {name: single,",
        "searcher: {name: adaptive_asha, max_trials: 4, stop_once: true,",
    );
    let eight = config(1, "").replace("slots_per_trial: 0", "slots_per_trial: 8");
    let bad = config(
        1,
        "hyperparameters: {n: {type: int, minval: 4, maxval: 1}}\n",
    );
    for (yaml, field) in [
        (stopping, "searcher.stop_once"),
        (eight.clone(), "resources.slots_per_trial: 8 slot(s)"),
        (bad, "hyperparameters.n"),
    ] {
        let err = client
            .create_experiment(&yaml, None, true)
            .await
            .expect_err("refused");
        assert!(
            matches!(&err, DetError::InvalidRequest(m) if m.contains(field)),
            "{field}: {err:?}"
        );
    }
    master.shutdown();
    // A devmaster started with slots runs it.
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), 8).await;
    client
        .create_experiment(&eight, None, false)
        .await
        .expect("eight slots fit");
    master.shutdown();
}

/// Waits until experiment `id` has ended; returns its trials.
async fn ended(client: &Client, id: i32) -> Vec<hr_det::wire::Trial> {
    crate::support::eventually("the experiment ends", || async {
        client
            .get_experiment(id)
            .await
            .is_ok_and(|e| e.experiment.state.is_terminal())
    })
    .await;
    client.list_trials(id).await.expect("trials").trials
}

#[tokio::test]
async fn random_and_grid_run_their_trials_at_most_max_concurrent_at_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), 0).await;
    // Each trial notes an overlap if more than two run at once (a lock folder per running trial).
    let running = tmp.path().join("running");
    std::fs::create_dir_all(&running).expect("dir");
    let script = format!(
        "touch {r}/$DET_TRIAL_ID; [ $(ls {r} | wc -l) -gt 2 ] && touch {o}; sleep 0.2; rm {r}/$DET_TRIAL_ID",
        r = running.display(),
        o = tmp.path().join("overlap").display(),
    );
    let random = crate::support::config(&script, 0).replace(
        "searcher: {name: single,",
        "searcher: {name: random, max_trials: 5, max_concurrent_trials: 2,",
    ) + "hyperparameters: {n: {type: int, minval: 1, maxval: 1000000}}\n";
    let exp = client
        .create_experiment(&random, None, true)
        .await
        .expect("random");
    let trials = ended(&client, exp.experiment.id).await;
    assert_eq!(trials.len(), 5);
    assert!(
        trials.iter().all(|t| t.state == State::Completed),
        "{trials:?}"
    );
    let values: std::collections::BTreeSet<String> =
        trials.iter().map(|t| t.hparams["n"].to_string()).collect();
    assert!(
        values.len() > 1,
        "each trial draws its own values: {values:?}"
    );
    assert!(
        !tmp.path().join("overlap").exists(),
        "more than 2 trials ran at once"
    );
    let described = client.get_experiment(exp.experiment.id).await.expect("get");
    assert_eq!(described.experiment.state, State::Completed);
    assert_eq!(described.experiment.num_trials, 5);

    let grid = crate::support::config("true", 0)
        .replace("searcher: {name: single,", "searcher: {name: grid,")
        + "hyperparameters: {c: {type: categorical, vals: [a, b, c]}, k: 2}\n";
    let exp = client
        .create_experiment(&grid, None, true)
        .await
        .expect("grid");
    let trials = ended(&client, exp.experiment.id).await;
    let mut points: Vec<String> = trials.iter().map(|t| t.hparams.to_string()).collect();
    points.sort();
    assert_eq!(
        points,
        [
            r#"{"c":"a","k":2}"#,
            r#"{"c":"b","k":2}"#,
            r#"{"c":"c","k":2}"#
        ]
    );
    master.shutdown();
}

#[tokio::test]
async fn killing_a_search_cancels_its_running_and_waiting_trials() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (master, client) = start(tmp.path(), 0).await;
    let yaml = crate::support::config("exec sleep 3600", 0).replace(
        "searcher: {name: single,",
        "searcher: {name: random, max_trials: 3, max_concurrent_trials: 1,",
    );
    let exp = client
        .create_experiment(&yaml, None, true)
        .await
        .expect("create");
    let id = exp.experiment.id;
    crate::support::eventually("the first trial runs", || async {
        client
            .list_trials(id)
            .await
            .is_ok_and(|t| t.trials.len() == 1)
    })
    .await;
    client
        .experiment_action(id, hr_det::ExperimentAction::Kill)
        .await
        .expect("kill");
    let trials = ended(&client, id).await;
    assert_eq!(
        trials.len(),
        1,
        "no trial is created once the search is stopping"
    );
    assert_eq!(trials[0].state, State::Canceled);
    let e = client.get_experiment(id).await.expect("get");
    assert_eq!(e.experiment.state, State::Canceled);
    master.shutdown();
}
