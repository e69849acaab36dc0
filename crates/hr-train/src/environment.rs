//! The plan's environment: its tasks, the owned service it needs (started here, logging to the
//! run folder) and a factory of one environment per episode.

use std::path::Path;

use hr_bridge::{
    NemoGymClient, NemoGymEnvironment, OpenEnvClient, OpenEnvEnvironment, OwnedService, presets,
};
use hr_env::{Environment, FixtureEnvironment, Task, fixture_tasks};
use hr_grpo::{EnvironmentFactory, GrpoError};
use hr_plan::{Environment as PlanEnvironment, Plan};

use crate::TrainError;

/// One environment per episode.
pub(crate) type Factory = Box<dyn EnvironmentFactory>;

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

/// The tasks, the started service (if the backend has one) and the episode factory.
pub(crate) fn environment(
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
            action_field,
            tasks,
            ..
        } => {
            let service = OwnedService::start(&presets::openenv_echo(python, env_root, log))?;
            let (url, field) = (service.base_url(), action_field.clone());
            let factory = move || -> Result<Box<dyn Environment>, GrpoError> {
                let client = OpenEnvClient::new("openenv", &url)
                    .map_err(|e| GrpoError::Environment(e.to_string()))?;
                Ok(Box::new(OpenEnvEnvironment::new(client, &field)))
            };
            (numbered(tasks), Some(service), Box::new(factory))
        }
        PlanEnvironment::Nemo {
            python,
            server_dir,
            tasks,
        } => {
            let service =
                OwnedService::start(&presets::nemo_single_tool_call(python, server_dir, log))?;
            let client = NemoGymClient::new("nemo-gym", &service.base_url())?;
            let factory = move || -> Result<Box<dyn Environment>, GrpoError> {
                Ok(Box::new(NemoGymEnvironment::new(client.clone())))
            };
            (numbered(tasks), Some(service), Box::new(factory))
        }
    })
}
