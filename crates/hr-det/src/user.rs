//! User-side calls: what `det` does.

use reqwest::Method;
use serde_json::Value;

use crate::{
    Client, DetError,
    client::Body,
    hash_password,
    wire::{
        CheckpointResponse, CheckpointSortBy, CheckpointsResponse, CommandResponse,
        CreateCommandRequest, CreateExperimentRequest, ExperimentResponse, GetMetricsResponse,
        LoginRequest, LoginResponse, MasterInfo, MeResponse, MetricsReport, TaskLog,
        TrialsResponse, User,
    },
};

const NO_BODY: Body<'static, ()> = Body::None;

/// An experiment state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExperimentAction {
    /// Pause: experiment and trials PAUSED, allocation preempted.
    Pause,
    /// Activate: a new allocation restores the latest checkpoint.
    Activate,
    /// Kill.
    Kill,
    /// Cancel.
    Cancel,
}

impl ExperimentAction {
    fn path(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Activate => "activate",
            Self::Kill => "kill",
            Self::Cancel => "cancel",
        }
    }
}

impl Client {
    /// `GET /info` (unauthenticated).
    pub async fn info(&self) -> Result<MasterInfo, DetError> {
        self.call(Method::GET, "info", NO_BODY, false, None).await
    }

    /// Logs in and keeps the token; the password is hashed as the Python client does.
    pub async fn login(&mut self, username: &str, password: &str) -> Result<User, DetError> {
        let body = LoginRequest {
            username: username.to_owned(),
            password: hash_password(password),
            is_hashed: true,
        };
        let resp: LoginResponse = self
            .call(
                Method::POST,
                "api/v1/auth/login",
                Body::Json(&body),
                false,
                None,
            )
            .await?;
        self.set_token(resp.token);
        Ok(resp.user)
    }

    /// Signs in as the `det` CLI does from its environment: `DET_USER_TOKEN` when set; else the
    /// token `det user login` cached for this master (`DET_USER`'s, or the cache's active
    /// user's), if the master still accepts it; else a login as `DET_USER` (default
    /// `determined`) with `DET_PASS` (default empty, the devmaster's and a fresh cluster's
    /// default). Keeps a token the client already has.
    pub async fn sign_in_from_env(&mut self) -> Result<(), DetError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let cache = crate::sign_in::det_config_dir(var).map(|d| d.join("auth.json"));
        self.sign_in_with(var, cache.as_deref()).await
    }

    /// [`Client::sign_in_from_env`] with the environment `var` and the token cache `cache`.
    pub(crate) async fn sign_in_with(
        &mut self,
        var: impl Fn(&str) -> Option<String>,
        cache: Option<&std::path::Path>,
    ) -> Result<(), DetError> {
        if self.has_token() {
            return Ok(());
        }
        if let Some(token) = var(crate::task_info::env::USER_TOKEN) {
            self.set_token(token);
            return Ok(());
        }
        let named = var(crate::task_info::env::USER);
        if let Some((user, token)) =
            cache.and_then(|c| crate::sign_in::cached_token(c, self.master(), named.as_deref()))
        {
            self.set_token(token);
            match self.me().await {
                Ok(_) => {
                    tracing::debug!(user, "signed in with det's cached token");
                    return Ok(());
                }
                // Expired or revoked: sign in with the password instead, as det does.
                Err(DetError::Unauthenticated(_)) => self.clear_token(),
                Err(e) => return Err(e),
            }
        }
        let user = named.unwrap_or_else(|| "determined".to_owned());
        let password = var(crate::task_info::env::PASS).unwrap_or_default();
        self.login(&user, &password).await.map(|_| ())
    }

    /// Logs out: the master revokes the token, which the client then forgets.
    pub async fn logout(&mut self) -> Result<(), DetError> {
        let _: Value = self
            .call(Method::POST, "api/v1/auth/logout", NO_BODY, true, None)
            .await?;
        self.clear_token();
        Ok(())
    }

    /// `GET /api/v1/me`.
    pub async fn me(&self) -> Result<User, DetError> {
        let resp: MeResponse = self
            .call(Method::GET, "api/v1/me", NO_BODY, true, None)
            .await?;
        Ok(resp.user)
    }

    /// Creates an experiment from raw YAML config text.
    pub async fn create_experiment(
        &self,
        config_yaml: &str,
        project_id: Option<i32>,
        activate: bool,
    ) -> Result<ExperimentResponse, DetError> {
        let body = CreateExperimentRequest {
            activate,
            config: config_yaml.to_owned(),
            model_definition: None,
            parent_id: None,
            project_id,
            template: None,
            validate_only: false,
        };
        self.call(
            Method::POST,
            "api/v1/experiments",
            Body::Json(&body),
            true,
            None,
        )
        .await
    }

    /// Pause, activate, kill or cancel.
    pub async fn experiment_action(
        &self,
        id: i32,
        action: ExperimentAction,
    ) -> Result<(), DetError> {
        let path = format!("api/v1/experiments/{id}/{}", action.path());
        let _: Value = self.call(Method::POST, &path, NO_BODY, true, None).await?;
        Ok(())
    }

    /// `GET /api/v1/experiments/{id}`.
    pub async fn get_experiment(&self, id: i32) -> Result<ExperimentResponse, DetError> {
        self.call(
            Method::GET,
            &format!("api/v1/experiments/{id}"),
            NO_BODY,
            true,
            None,
        )
        .await
    }

    /// The experiment's trials.
    pub async fn list_trials(&self, experiment: i32) -> Result<TrialsResponse, DetError> {
        self.call(
            Method::GET,
            &format!("api/v1/experiments/{experiment}/trials?offset=0"),
            NO_BODY,
            true,
            None,
        )
        .await
    }

    /// The experiment's checkpoints in the given order.
    pub async fn list_checkpoints(
        &self,
        experiment: i32,
        sort_by: CheckpointSortBy,
        descending: bool,
    ) -> Result<CheckpointsResponse, DetError> {
        let order = if descending {
            "ORDER_BY_DESC"
        } else {
            "ORDER_BY_ASC"
        };
        let path = format!(
            "api/v1/experiments/{experiment}/checkpoints?sortByAttr={}&orderBy={order}",
            sort_by.as_str()
        );
        self.call(Method::GET, &path, NO_BODY, true, None).await
    }

    /// One checkpoint by UUID.
    pub async fn get_checkpoint(&self, uuid: &str) -> Result<CheckpointResponse, DetError> {
        self.call(
            Method::GET,
            &format!("api/v1/checkpoints/{uuid}"),
            NO_BODY,
            true,
            None,
        )
        .await
    }

    /// Starts a command (config includes the entrypoint).
    pub async fn create_command(
        &self,
        config: Value,
        workspace_id: Option<i32>,
    ) -> Result<CommandResponse, DetError> {
        let body = CreateCommandRequest {
            config,
            files: None,
            template_name: None,
            workspace_id,
        };
        self.call(
            Method::POST,
            "api/v1/commands",
            Body::Json(&body),
            true,
            None,
        )
        .await
    }

    /// `GET /api/v1/commands/{id}`.
    pub async fn get_command(&self, id: &str) -> Result<CommandResponse, DetError> {
        self.call(
            Method::GET,
            &format!("api/v1/commands/{id}"),
            NO_BODY,
            true,
            None,
        )
        .await
    }

    /// The task's logs so far (NDJSON, not followed); a `{"error":..}` line aborts.
    pub async fn task_logs(&self, task_id: &str) -> Result<Vec<TaskLog>, DetError> {
        let path = format!("api/v1/tasks/{task_id}/logs?follow=false");
        self.ndjson(&path)
            .await?
            .into_iter()
            .map(|v| {
                serde_json::from_value(v).map_err(|e| DetError::Decode {
                    path: path.clone(),
                    message: e.to_string(),
                })
            })
            .collect()
    }

    /// A trial's reported metrics of one group (`training`, `validation`):
    /// `GET /api/v1/trials/metrics/trial_metrics?group=..&trialIds=..`, an NDJSON stream.
    pub async fn trial_metrics(
        &self,
        trial: i32,
        group: &str,
    ) -> Result<Vec<MetricsReport>, DetError> {
        let path = format!("api/v1/trials/metrics/trial_metrics?group={group}&trialIds={trial}");
        let mut out = Vec::new();
        for value in self.ndjson(&path).await? {
            let line: GetMetricsResponse =
                serde_json::from_value(value).map_err(|e| DetError::Decode {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            out.extend(line.metrics);
        }
        Ok(out)
    }

    /// A finished NDJSON stream: the `result` of every line; a line `{"error":..}` aborts.
    async fn ndjson(&self, path: &str) -> Result<Vec<Value>, DetError> {
        let bytes = self.send(Method::GET, path, NO_BODY, true, None).await?;
        let mut out = Vec::new();
        for line in String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| !l.trim().is_empty())
        {
            let value: Value = serde_json::from_str(line).map_err(|e| DetError::Decode {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
            if let Some(err) = value.get("error") {
                return Err(DetError::Api {
                    status: 200,
                    message: err.to_string(),
                });
            }
            out.push(value.get("result").cloned().unwrap_or_default());
        }
        Ok(out)
    }
}
