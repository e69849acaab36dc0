//! Commands.

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State as AxState},
};
use serde_json::{Value, json};

use hr_det::wire::Command;

use super::{Caller, M, pagination, parse, with_cli_fields};
use crate::{
    error::{ApiError, ApiResult},
    scheduler,
};

/// `{"command": ..., "config": ...}`: the command as the Rust client reads it
/// (`hr_det::wire::Command`) plus the `det` CLI's fields.
pub(super) fn command_json(c: &crate::state::CommandRec) -> Value {
    let command = Command {
        id: c.id.clone(),
        description: c.description.clone(),
        job_id: format!("job-{}", c.id),
        resource_pool: "default".to_owned(),
        start_time: c.start_time.clone(),
        state: c.state,
        username: "determined".to_owned(),
        workspace_id: c.workspace_id,
        exit_status: c.exit_status.clone(),
    };
    json!({
        "command": with_cli_fields(&command, json!({"container": null, "displayName": "", "userId": 2})),
        "config": c.config,
    })
}

pub(super) async fn create_command(
    AxState(m): M,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    caller.must_be_user()?;
    let req: hr_det::wire::CreateCommandRequest = parse(&body)?;
    if !req.config.is_object() {
        return Err(ApiError::InvalidArgument("config must be an object".into()));
    }
    let rec = scheduler::start_command(&m, req.config, req.workspace_id.unwrap_or(1))
        .map_err(ApiError::InvalidArgument)?;
    Ok(Json(command_json(&rec)))
}

pub(super) async fn list_commands(AxState(m): M, _caller: Caller) -> ApiResult<Json<Value>> {
    let state = m.state();
    let commands: Vec<Value> = state
        .commands
        .values()
        .map(|c| command_json(c)["command"].clone())
        .collect();
    Ok(Json(
        json!({"commands": commands, "pagination": pagination(commands.len())}),
    ))
}

pub(super) async fn get_command(
    AxState(m): M,
    _caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let state = m.state();
    let c = state
        .commands
        .get(&id)
        .ok_or_else(|| ApiError::NotFound(format!("command not found: {id}")))?;
    Ok(Json(command_json(c)))
}
