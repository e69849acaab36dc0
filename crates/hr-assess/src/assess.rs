//! The assessment of a finished run (`hessian-recipes evaluate`) once its checkpoints are adopted
//! (`adopt.rs`): each is scored on the DEV tasks only and one is selected; the selected one and
//! the base model are then assessed on the HELD-OUT tasks (episodes through the same environment
//! as training) and on the MGSM retention suite. The three task sets must share no question.
//! Adapters trained elsewhere (PEFT LoRA folders, e.g. TRL's) can be assessed beside them on the
//! same HELD-OUT episodes and retention items; they never take part in the DEV selection.
//!
//! Selection rule: the highest mean DEV episode reward; on a tie, the earlier step (less drift
//! from the base for the same DEV result).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::tensor::backend::Backend;
use hr_env::{Split, Task};
use hr_files::IoResultExt;
use hr_grpo::{RewardState, rollouts};
use hr_plan::Plan;
use hr_policy::{Adapters, ChatTokenizer, Execution, Message, Policy, PolicyRng, SamplingConfig};
use serde::Serialize;

use hr_train::{
    EpisodeScore, NATIVE_DIR, TrainError, environment, episode_score, grpo_config, load_policy,
    task_set,
};

use crate::adopt::Adopted;
use crate::evaluation::evaluation;

/// [`Assessment::retention_set`] when the plan skips the retention check.
pub const RETENTION_SKIPPED: &str = "none (skipped: `evaluation.retention` is false)";

/// The rule [`assess`] selects by, for reports.
pub const SELECTION_RULE: &str = "highest mean DEV episode reward; on a tie, the earlier step";

/// The text a task is compared by in the leak check: its `question`, else its whole payload.
fn question(task: &Task) -> String {
    task.payload
        .get("question")
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| task.payload.to_string(), str::to_owned)
}

/// Fails when two of the task sets share a question.
pub fn check_disjoint(sets: &[(&str, &[Task])]) -> Result<(), TrainError> {
    for (i, (a, left)) in sets.iter().enumerate() {
        for (b, right) in &sets[i + 1..] {
            let seen: std::collections::BTreeSet<String> = left.iter().map(question).collect();
            if let Some(t) = right.iter().find(|t| seen.contains(&question(t))) {
                return Err(TrainError::Leak {
                    first: (*a).to_owned(),
                    second: (*b).to_owned(),
                    question: question(t),
                });
            }
        }
    }
    Ok(())
}

/// One adopted checkpoint's DEV result.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointScore {
    /// The checkpoint.
    #[serde(flatten)]
    pub checkpoint: Adopted,
    /// On the DEV tasks.
    pub dev: EpisodeScore,
}

/// A PEFT LoRA adapter folder trained elsewhere, assessed beside the run's selected checkpoint.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Its name in the report (not `base`, not `selected`).
    pub name: String,
    /// The folder (`adapter_config.json`, `adapter_model.safetensors`).
    pub dir: PathBuf,
}

/// The HELD-OUT result of a [`Comparison`].
#[derive(Debug, Clone, Serialize)]
pub struct ComparedScore {
    /// Its name.
    pub name: String,
    /// SHA-256 of its `adapter_model.safetensors` (which weights were assessed).
    pub adapter_sha256: String,
    /// On the HELD-OUT tasks, the same episodes' seeds as the base and the selected checkpoint.
    pub held_out: EpisodeScore,
}

/// MGSM accuracy of the base and the selected checkpoint in one language.
#[derive(Debug, Clone, Serialize)]
pub struct Retention {
    /// Language code.
    pub lang: String,
    /// Items.
    pub items: usize,
    /// Base accuracy.
    pub base: f64,
    /// Selected checkpoint's accuracy.
    pub selected: f64,
    /// `base - selected` (positive: the trained model forgot).
    pub drop: f64,
    /// Each compared adapter's accuracy, by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub compared: BTreeMap<String, f64>,
}

/// The whole assessment.
#[derive(Debug, Clone, Serialize)]
pub struct Assessment {
    /// The rule of selection.
    pub selection_rule: &'static str,
    /// What counts as solved (the plan's `evaluation.solved`).
    pub solved_rule: String,
    /// Every adopted checkpoint with its DEV score, in step order.
    pub checkpoints: Vec<CheckpointScore>,
    /// The selected step.
    pub selected_step: u64,
    /// HELD-OUT episodes of the base model.
    pub held_out_base: EpisodeScore,
    /// HELD-OUT episodes of the selected checkpoint.
    pub held_out_selected: EpisodeScore,
    /// HELD-OUT episodes of each compared adapter, in the order given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_out_compared: Vec<ComparedScore>,
    /// MGSM retention per language.
    pub retention: Vec<Retention>,
    /// Which retention set was used: `authored` (the twelve built-in items) or the plan's
    /// `evaluation.retention_file`, with the set's sha256; [`RETENTION_SKIPPED`] when none ran.
    pub retention_set: String,
    /// Tasks per set (`train`, `dev`, `held_out`).
    pub task_counts: BTreeMap<String, usize>,
}

/// The retention suite the plan names (`evaluation.retention_file`, MGSM's format) or the
/// authored one, and how the report names it.
fn retention_suite(eval: &hr_plan::Evaluation) -> Result<(hr_eval::Suite, String), TrainError> {
    let refused =
        |e: hr_eval::Error| TrainError::Refused(format!("evaluation.retention_file: {e}"));
    let suite = match &eval.retention_file {
        Some(file) => {
            let text = hr_files::read_to_string_bounded(file, hr_files::MAX_CONFIG_BYTES)
                .at("read", file)?;
            hr_eval::mgsm_suite(&file.display().to_string(), &text).map_err(refused)?
        }
        None => hr_eval::builtin_suites()
            .map_err(refused)?
            .into_iter()
            .find(|s| s.kind == hr_eval::SuiteKind::Mgsm)
            .ok_or_else(|| TrainError::Refused("no authored MGSM suite".to_owned()))?,
    };
    let name = match &eval.retention_file {
        Some(file) => format!(
            "{} ({} items, sha256 {})",
            file.display(),
            suite.tasks.len(),
            suite.sha256
        ),
        None => format!(
            "authored ({} items, sha256 {})",
            suite.tasks.len(),
            suite.sha256
        ),
    };
    Ok((suite, name))
}

/// The model answering evaluation prompts: greedy, batched, with or without adapters.
struct ModelPolicy<'a, B: Backend> {
    name: String,
    policy: &'a Policy<B>,
    adapters: Option<&'a Adapters<B>>,
    tokenizer: &'a ChatTokenizer,
    sampling: SamplingConfig,
}

impl<B: Backend> hr_eval::Policy for ModelPolicy<'_, B> {
    fn name(&self) -> &str {
        &self.name
    }

    fn respond(&mut self, task: &hr_eval::Task) -> Result<String, hr_eval::Error> {
        let mut answers = self.respond_all(std::slice::from_ref(task))?;
        Ok(answers.pop().unwrap_or_default())
    }

    fn respond_all(&mut self, tasks: &[hr_eval::Task]) -> Result<Vec<String>, hr_eval::Error> {
        let failed = |e: hr_policy::PolicyError| hr_eval::Error::Policy(e.to_string());
        let prompts = tasks
            .iter()
            .map(|t| {
                self.tokenizer
                    .encode_chat(&[Message::new("user", &t.prompt)])
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(failed)?;
        // Greedy decoding draws nothing from the RNG.
        let mut rng = PolicyRng::from_seed(0);
        let out = self
            .policy
            .generate(self.adapters, &prompts, &self.sampling, &mut rng, true)
            .map_err(failed)?;
        out.tokens
            .iter()
            .map(|t| self.tokenizer.decode(t).map_err(failed))
            .collect()
    }
}

fn per_language(eval: &hr_eval::Evaluation) -> BTreeMap<String, (usize, usize)> {
    let mut by_lang = BTreeMap::new();
    for r in &eval.results {
        let e: &mut (usize, usize) = by_lang.entry(r.lang.clone()).or_default();
        e.0 += 1;
        e.1 += usize::from(r.correct);
    }
    by_lang
}

/// Runs the assessment of `adopted` (from [`crate::adopt()`]) and of the `compared` adapters on
/// `device`, laid out as `execution` says (as training on that device kind is); the plan's
/// environment service, if any, is started for it and stopped after, its log in `log`.
pub fn assess<B: Backend>(
    plan: &Plan,
    adopted: Vec<Adopted>,
    compared: &[Comparison],
    device: &B::Device,
    execution: Execution,
    log: &Path,
) -> Result<Assessment, TrainError> {
    let eval = evaluation(plan)?;
    let (train, mut service, mut envs) = environment(plan, log)?;
    let dev = task_set(plan, &eval.dev, Split::Dev)?;
    let held_out = task_set(plan, &eval.held_out, Split::HeldOut)?;
    check_disjoint(&[("train", &train), ("dev", &dev), ("held_out", &held_out)])?;
    let model = &plan.model.path;
    let tokenizer = ChatTokenizer::from_file(&model.join("tokenizer.json"))?;
    let policy = load_policy::<B>(plan, device, execution)?;
    // Loaded before any episode runs: a folder that does not fit the model fails at once.
    let others = compared
        .iter()
        .map(|c| {
            // Read once: the digest in the report is of the very bytes that are loaded.
            let read = |name: &str| {
                let path = c.dir.join(name);
                // Refuses a FIFO at once; the size is whatever the adapter holds.
                hr_files::read_bounded(&path, u64::MAX).at("read", &path)
            };
            let files = hr_policy::AdapterFiles {
                weights: read(hr_policy::ADAPTER_WEIGHTS)?,
                config: read(hr_policy::ADAPTER_CONFIG)?,
            };
            let digest = hr_seal::sha256_hex(&files.weights);
            let adapters =
                hr_policy::adapters_from_files::<B>(policy.config(), &files, &c.dir, device)
                    .map_err(|e| {
                        TrainError::Refused(format!(
                            "compared adapter `{}` ({}) does not fit the plan's model {}: {e}",
                            c.name,
                            c.dir.display(),
                            model.display()
                        ))
                    })?;
            Ok((c.name.clone(), digest, adapters))
        })
        .collect::<Result<Vec<_>, TrainError>>()?;
    let mut rollout = grpo_config(plan).rollout;
    rollout.num_generations = eval.num_generations;
    // `step`: the checkpoint's, what batch rewards see as `trainer_state.global_step`.
    let mut episodes = |adapters: Option<&Adapters<B>>, tasks: &[Task], step: u64| {
        // The same seed for every policy: their episodes differ only by the policy.
        let mut rng = PolicyRng::from_seed(eval.seed);
        let state = RewardState {
            global_step: step,
            max_steps: plan.steps,
        };
        rollouts(
            &policy,
            adapters,
            &tokenizer,
            tasks,
            envs.as_mut(),
            &rollout,
            &mut rng,
            state,
        )
        .map(|e| episode_score(&e, &eval.solved))
    };
    let mut scores = Vec::new();
    let mut best: Option<(usize, f64, Adapters<B>)> = None;
    for (i, checkpoint) in adopted.into_iter().enumerate() {
        let native = |file: &str| {
            checkpoint
                .verified
                .read_file(&format!("{}/{file}", NATIVE_DIR))
                .map_err(|e| TrainError::Checkpoint {
                    step: checkpoint.step,
                    reason: e.to_string(),
                })
        };
        let files = hr_policy::AdapterFiles {
            weights: native(hr_policy::ADAPTER_WEIGHTS)?,
            config: native(hr_policy::ADAPTER_CONFIG)?,
        };
        let adapters =
            hr_policy::adapters_from_files::<B>(policy.config(), &files, &checkpoint.dir, device)?;
        let dev_score = episodes(Some(&adapters), &dev, checkpoint.step)?;
        tracing::info!(
            "dev: step {} mean reward {:.3}",
            checkpoint.step,
            dev_score.mean_reward
        );
        if best
            .as_ref()
            .is_none_or(|(_, reward, _)| dev_score.mean_reward > *reward)
        {
            best = Some((i, dev_score.mean_reward, adapters));
        }
        scores.push(CheckpointScore {
            checkpoint,
            dev: dev_score,
        });
    }
    let (selected, _, adapters) =
        best.ok_or_else(|| TrainError::Refused("no checkpoint to assess".to_owned()))?;
    let selected_step = scores[selected].checkpoint.step;
    let held_out_base = episodes(None, &held_out, 0)?;
    let held_out_selected = episodes(Some(&adapters), &held_out, selected_step)?;
    tracing::info!(
        "held-out: base {:.3}, step {selected_step} {:.3}",
        held_out_base.mean_reward,
        held_out_selected.mean_reward
    );
    let held_out_compared = others
        .iter()
        .map(|(name, adapter_sha256, adapters)| {
            let held_out = episodes(Some(adapters), &held_out, plan.steps)?;
            tracing::info!("held-out: {name} {:.3}", held_out.mean_reward);
            Ok(ComparedScore {
                name: name.clone(),
                adapter_sha256: adapter_sha256.clone(),
                held_out,
            })
        })
        .collect::<Result<Vec<_>, TrainError>>()?;
    if let Some(s) = service.take() {
        s.shutdown()?;
    }
    let (retention, retention_set) = if eval.retention {
        retention_check(eval, &policy, &tokenizer, &adapters, &others)?
    } else {
        (Vec::new(), RETENTION_SKIPPED.to_owned())
    };
    Ok(Assessment {
        selection_rule: SELECTION_RULE,
        solved_rule: eval.solved.to_string(),
        checkpoints: scores,
        selected_step,
        held_out_base,
        held_out_selected,
        held_out_compared,
        retention,
        retention_set,
        task_counts: [
            ("train".to_owned(), train.len()),
            ("dev".to_owned(), dev.len()),
            ("held_out".to_owned(), held_out.len()),
        ]
        .into(),
    })
}

/// The MGSM retention check (greedy answers) of the base model, the `selected` adapters and
/// the compared ones, by language, and how the report names the set.
fn retention_check<B: Backend>(
    eval: &hr_plan::Evaluation,
    policy: &Policy<B>,
    tokenizer: &ChatTokenizer,
    selected: &Adapters<B>,
    others: &[(String, String, Adapters<B>)],
) -> Result<(Vec<Retention>, String), TrainError> {
    let (suite, retention_set) = retention_suite(eval)?;
    let suites = vec![suite];
    let mut stop_tokens = policy.config().eos_token_ids.clone();
    stop_tokens.extend(tokenizer.stop_token_ids());
    let sampling = SamplingConfig {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repetition_penalty: 1.0,
        max_new_tokens: eval.retention_max_new_tokens,
        stop_tokens,
    };
    let answer = |name: &str, adapters: Option<&Adapters<B>>| {
        let mut p = ModelPolicy {
            name: name.to_owned(),
            policy,
            adapters,
            tokenizer,
            sampling: sampling.clone(),
        };
        hr_eval::evaluate(&suites, &mut p, |_, _, _| {})
            .map_err(|e| TrainError::Refused(e.to_string()))
    };
    let base = per_language(&answer("base", None)?);
    let trained = per_language(&answer("selected", Some(selected))?);
    let others = others
        .iter()
        .map(|(name, _, a)| Ok((name.clone(), per_language(&answer(name, Some(a))?))))
        .collect::<Result<Vec<_>, TrainError>>()?;
    let share = |(n, c): (usize, usize)| c as f64 / n.max(1) as f64;
    let retention: Vec<Retention> = base
        .iter()
        .map(|(lang, b)| {
            let t = trained.get(lang).copied().unwrap_or_default();
            Retention {
                lang: lang.clone(),
                items: b.0,
                base: share(*b),
                selected: share(t),
                drop: share(*b) - share(t),
                compared: others
                    .iter()
                    .map(|(name, by_lang)| {
                        let c = by_lang.get(lang).copied().unwrap_or_default();
                        (name.clone(), share(c))
                    })
                    .collect(),
            }
        })
        .collect();
    Ok((retention, retention_set))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn task(id: &str, question: &str) -> Task {
        Task {
            id: id.to_owned(),
            payload: json!({"kind": "digits", "question": question}),
        }
    }

    #[test]
    fn a_question_in_two_sets_is_a_leak_and_disjoint_sets_pass() {
        let train = [task("t", "a")];
        let dev = [task("d", "b")];
        let held_out = [task("h", "c"), task("h2", "b")];
        let err = check_disjoint(&[("train", &train), ("dev", &dev), ("held_out", &held_out)])
            .expect_err("b is in dev and held-out");
        assert!(
            matches!(&err, TrainError::Leak { first, second, question }
                if first == "dev" && second == "held_out" && question == "b"),
            "{err}"
        );
        check_disjoint(&[
            ("train", &train),
            ("dev", &dev),
            ("held_out", &held_out[..1]),
        ])
        .expect("disjoint");
    }
}
