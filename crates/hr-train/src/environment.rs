//! The plan's environment: its tasks, the owned service it needs (started here, logging to the
//! run folder) and a factory of one environment per episode.

use std::collections::BTreeMap;
use std::path::Path;

use hr_bridge::{
    NemoGymClient, NemoGymEnvironment, OpenEnvClient, OpenEnvEnvironment, OwnedService, presets,
};
use hr_env::{
    BatchScores, DatasetEnvironment, Environment, FixtureEnvironment, PythonRewards, RewardBatch,
    Split, Task, dataset_tasks, fixture_split_tasks, fixture_tasks, score_python_batch,
    start_python_rewards, take_python_metrics,
};
use hr_grpo::{EnvironmentFactory, GrpoError};
use hr_plan::{Environment as PlanEnvironment, Plan, Reward, TaskSet};

use crate::TrainError;

/// One environment per episode.
pub type Factory = Box<dyn EnvironmentFactory>;

/// The dataset backend's episodes: the built-in rules score each one, the running `python`
/// rewards each generation batch.
struct DatasetFactory {
    rewards: Vec<Reward>,
    python: PythonRewards,
}

impl EnvironmentFactory for DatasetFactory {
    fn create(&mut self) -> Result<Box<dyn Environment>, GrpoError> {
        Ok(Box::new(DatasetEnvironment::new(self.rewards.clone())))
    }

    fn score_batch(&mut self, batch: &RewardBatch<'_>) -> Result<Vec<BatchScores>, GrpoError> {
        score_python_batch(&self.rewards, &self.python, batch)
            .map_err(|e| GrpoError::Environment(e.to_string()))
    }

    fn reward_metrics(&mut self) -> Result<BTreeMap<String, f64>, GrpoError> {
        take_python_metrics(&self.python).map_err(|e| GrpoError::Environment(e.to_string()))
    }
}

pub(crate) fn numbered(payloads: &[serde_json::Value]) -> Vec<Task> {
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Task {
            id: format!("task-{i}"),
            payload: p.clone(),
        })
        .collect()
}

/// Whether the plan renders prompts with the chat template (so dataset rows may be messages).
fn chat(plan: &Plan) -> bool {
    plan.grpo.prompt_format.is_chat()
}

/// Reads a dataset plan's every file and row (none for the other backends), so a bad row is
/// refused, naming its file, line and field, before a run creates anything.
pub fn check_dataset(plan: &Plan) -> Result<(), TrainError> {
    if let PlanEnvironment::Dataset {
        train,
        dev,
        held_out,
        rewards,
    } = &plan.environment
    {
        for file in std::iter::once(train).chain(dev).chain(held_out) {
            dataset_tasks(file, rewards, chat(plan))
                .map_err(|e| TrainError::Refused(e.to_string()))?;
        }
        for (i, r) in rewards.iter().enumerate() {
            if let Some(file) = r.file.as_ref().filter(|f| !f.is_file()) {
                return Err(TrainError::Refused(format!(
                    "environment.rewards[{i}].file: {} is not a file",
                    file.display()
                )));
            }
        }
    }
    Ok(())
}

/// The tasks, the started service (if the backend has one) and the episode factory.
pub fn environment(
    plan: &Plan,
    log: &Path,
) -> Result<(Vec<Task>, Option<OwnedService>, Factory), TrainError> {
    Ok(match &plan.environment {
        PlanEnvironment::Fixture { tasks } => {
            let list = fixture_tasks(tasks.kind, tasks.count, tasks.seed);
            let factory = || -> Result<Box<dyn Environment>, GrpoError> {
                Ok(Box::new(FixtureEnvironment::new()))
            };
            (list, None, Box::new(factory))
        }
        PlanEnvironment::Openenv {
            python,
            env_root,
            app,
            action_field,
            tasks,
            ..
        } => {
            let service = OwnedService::start(&presets::openenv(python, env_root, app, log))?;
            let (url, field) = (service.base_url(), action_field.clone());
            let factory = move || -> Result<Box<dyn Environment>, GrpoError> {
                let client = OpenEnvClient::new("openenv", &url)
                    .map_err(|e| GrpoError::Environment(e.to_string()))?;
                Ok(Box::new(OpenEnvEnvironment::new(client, &field)))
            };
            (numbered(tasks), Some(service), Box::new(factory))
        }
        PlanEnvironment::Dataset { train, rewards, .. } => {
            let list = dataset_tasks(train, rewards, chat(plan))
                .map_err(|e| TrainError::Refused(e.to_string()))?;
            // A function that does not import (a typo in its file or its name) is the plan's
            // input, refused as such.
            let python = start_python_rewards(rewards, log).map_err(|e| {
                TrainError::Refused(format!(
                    "environment.rewards: {e}; fix the reward's file or function (`hessian-recipes \
                     check --plan PLAN` starts every reward without training)"
                ))
            })?;
            let factory = DatasetFactory {
                rewards: rewards.clone(),
                python,
            };
            (list, None, Box::new(factory))
        }
        PlanEnvironment::Nemo {
            python,
            server_dir,
            server_config,
            tasks,
        } => {
            let service = OwnedService::start(&presets::nemo_resources_server(
                python,
                server_dir,
                server_config,
                log,
            ))?;
            let client = NemoGymClient::new("nemo-gym", &service.base_url())?;
            let factory = move || -> Result<Box<dyn Environment>, GrpoError> {
                Ok(Box::new(NemoGymEnvironment::new(client.clone())))
            };
            (numbered(tasks), Some(service), Box::new(factory))
        }
    })
}

/// The tasks of an evaluation task set (`evaluation.dev` or `evaluation.held_out`) for `split`:
/// listed ones numbered, drawn ones from the fixture family or the dataset's split file.
pub fn task_set(plan: &Plan, set: &TaskSet, split: Split) -> Result<Vec<Task>, TrainError> {
    Ok(match (set, &plan.environment) {
        (TaskSet::Listed { tasks }, _) => numbered(tasks)
            .into_iter()
            .map(|t| Task {
                id: format!("{}-{}", split.name(), t.id),
                payload: t.payload,
            })
            .collect(),
        (TaskSet::Drawn { count, seed }, PlanEnvironment::Fixture { tasks }) => {
            fixture_split_tasks(tasks.kind, split, *count, *seed)
        }
        (
            TaskSet::Drawn { count, seed },
            PlanEnvironment::Dataset {
                dev,
                held_out,
                rewards,
                ..
            },
        ) => {
            let file = match split {
                Split::Dev => dev,
                _ => held_out,
            }
            .as_ref()
            .ok_or_else(|| {
                TrainError::Refused(format!("the dataset has no {} file", split.name()))
            })?;
            let rows = dataset_tasks(file, rewards, chat(plan))
                .map_err(|e| TrainError::Refused(e.to_string()))?;
            hr_env::draw_rows(rows, *count, *seed)
        }
        (TaskSet::Drawn { .. }, _) => {
            return Err(TrainError::Refused(
                "drawn evaluation tasks exist only for the fixture backend".to_owned(),
            ));
        }
    })
}
