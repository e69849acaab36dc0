//! Which evaluation a run is assessed by: its plan's `evaluation` section, with whatever
//! `evaluate`'s flags give in its place (`--dev`, `--held-out`, `--retention`,
//! `--checkpoints`, `--solved`), so a run trained without the section can still be assessed. The section
//! is left out of the plan's digest, so the run's checkpoints are adopted all the same.

use std::path::{Path, PathBuf};

use hr_env::Split;
use hr_plan::{Environment, Evaluation, Plan, Solved, TaskSet};
use hr_train::TrainError;

/// The plan's evaluation section, or why there is none.
pub fn evaluation(plan: &Plan) -> Result<&Evaluation, TrainError> {
    plan.evaluation.as_ref().ok_or_else(|| {
        TrainError::Refused(format!(
            "plan `{}` has no `evaluation` section: give `evaluate` --dev FILE and --held-out \
             FILE, or add {{\"checkpoints\": [...], \"dev\": ..., \"held_out\": ...}} to the \
             plan (see plans/README.md)",
            plan.name
        ))
    })
}

/// The retention check `--retention` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetentionFlag {
    /// None (`--retention none`).
    Skip,
    /// This MGSM-format file.
    File(PathBuf),
}

impl std::str::FromStr for RetentionFlag {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(if s == "none" {
            Self::Skip
        } else {
            Self::File(s.into())
        })
    }
}

/// What `evaluate`'s flags put in place of the plan's evaluation fields.
#[derive(Debug, Clone, Default)]
pub struct EvaluationFlags {
    /// DEV tasks: a JSON-lines file in the environment's task format (a dataset's rows).
    pub dev: Option<PathBuf>,
    /// HELD-OUT tasks, as `dev`.
    pub held_out: Option<PathBuf>,
    /// The retention check.
    pub retention: Option<RetentionFlag>,
    /// The steps whose checkpoints are adopted.
    pub checkpoints: Option<Vec<u64>>,
    /// What counts as solved.
    pub solved: Option<Solved>,
}

/// `--solved`: `AT_LEAST` (the episode's reward) or `REWARD=AT_LEAST` (that reward function's
/// own score).
pub fn parse_solved(s: &str) -> Result<Solved, String> {
    let (reward, at_least) = match s.split_once('=') {
        Some((name, value)) => (Some(name.trim().to_owned()), value),
        None => (None, s),
    };
    let at_least: f64 = at_least.trim().parse().map_err(|_| {
        format!("`{s}`: give AT_LEAST (e.g. 0.8) or REWARD=AT_LEAST (e.g. correct=1)")
    })?;
    Ok(Solved { reward, at_least })
}

impl EvaluationFlags {
    fn is_empty(&self) -> bool {
        self.dev.is_none()
            && self.held_out.is_none()
            && self.retention.is_none()
            && self.checkpoints.is_none()
            && self.solved.is_none()
    }
}

/// `plan` with `flags` applied to its evaluation section (made when the plan has none, which
/// needs `--dev` and `--held-out`); `--checkpoints` left out of a new section means every
/// checkpoint the run in `run_dir` saved on the plan's schedule. The result is checked as a
/// plan's section is, each problem named by its flag.
pub fn with_flags(
    mut plan: Plan,
    run_dir: &Path,
    flags: &EvaluationFlags,
) -> Result<Plan, TrainError> {
    if flags.is_empty() {
        return Ok(plan);
    }
    let refused = |flag: &str, message: String| TrainError::Refused(format!("{flag}: {message}"));
    let mut eval = match plan.evaluation.take() {
        Some(e) => e,
        None => {
            let (Some(_), Some(_)) = (&flags.dev, &flags.held_out) else {
                return Err(refused(
                    "--dev / --held-out",
                    format!(
                        "plan `{}` has no `evaluation` section, so both are needed",
                        plan.name
                    ),
                ));
            };
            let none = || TaskSet::Listed { tasks: Vec::new() };
            Evaluation::with_defaults(Vec::new(), none(), none())
        }
    };
    for (flag, file, split) in [
        ("--dev", &flags.dev, Split::Dev),
        ("--held-out", &flags.held_out, Split::HeldOut),
    ] {
        if let Some(file) = file {
            let file = std::path::absolute(file)
                .map_err(|e| refused(flag, format!("{}: {e}", file.display())))?;
            let set = tasks_from(&mut plan, &file, split).map_err(|e| refused(flag, e))?;
            match split {
                Split::Dev => eval.dev = set,
                _ => eval.held_out = set,
            }
        }
    }
    match &flags.retention {
        Some(RetentionFlag::Skip) => eval.retention = false,
        Some(RetentionFlag::File(file)) => {
            let file = std::path::absolute(file)
                .map_err(|e| refused("--retention", format!("{}: {e}", file.display())))?;
            eval.retention = true;
            eval.retention_file = Some(file);
        }
        None => {}
    }
    if let Some(solved) = &flags.solved {
        eval.solved = solved.clone();
    }
    match &flags.checkpoints {
        Some(steps) => eval.checkpoints = steps.clone(),
        None if eval.checkpoints.is_empty() => {
            eval.checkpoints = crate::listing::saved_steps(run_dir, &plan)?
                .into_iter()
                .filter(|s| *s % plan.checkpoints.every == 0 || *s == plan.steps)
                .collect();
            if eval.checkpoints.is_empty() {
                return Err(refused(
                    "--checkpoints",
                    format!(
                        "{} holds no checkpoint saved on the plan's schedule; name the steps",
                        run_dir.display()
                    ),
                ));
            }
        }
        None => {}
    }
    plan.evaluation = Some(eval);
    plan.check(&hr_files::RunDir::new(run_dir).plan())
        .map_err(|e| {
            TrainError::Refused(format!(
                "the evaluation `evaluate`'s flags give (--dev, --held-out, --retention, \
             --checkpoints, --solved in place of the plan's evaluation fields): {e}"
            ))
        })?;
    Ok(plan)
}

/// The task set of `file` for `split`: a dataset plan reads it as its split's rows (all of
/// them), any other backend as a JSON-lines list of tasks in its own format.
fn tasks_from(plan: &mut Plan, file: &Path, split: Split) -> Result<TaskSet, String> {
    if let Environment::Dataset { dev, held_out, .. } = &mut plan.environment {
        *match split {
            Split::Dev => dev,
            _ => held_out,
        } = Some(file.to_owned());
        let all = TaskSet::Drawn {
            count: usize::MAX,
            seed: 0,
        };
        let rows = hr_train::task_set(plan, &all, split).map_err(|e| e.to_string())?;
        if rows.is_empty() {
            return Err(format!("{} holds no rows", file.display()));
        }
        return Ok(TaskSet::Drawn {
            count: rows.len(),
            seed: 0,
        });
    }
    let text = hr_files::read_to_string_bounded(file, hr_files::MAX_CONFIG_BYTES)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let tasks = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{} line {}: not JSON: {e}", file.display(), i + 1))
        })
        .collect::<Result<Vec<serde_json::Value>, _>>()?;
    if tasks.is_empty() {
        return Err(format!("{} lists no task", file.display()));
    }
    Ok(TaskSet::Listed { tasks })
}
