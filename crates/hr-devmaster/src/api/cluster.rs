//! What the devmaster offers as a cluster: its one workspace and project (`Uncategorized`, id 1,
//! as on a fresh Determined master) and its one resource pool (`default`: no slots; commands and
//! trials with zero slots run as local processes, as many at once as the machine has CPUs).

use axum::{
    Json,
    extract::{Path, Query},
};
use serde::Deserialize;
use serde_json::{Value, json};

use hr_det::wire::{Project, ResourcePool, Workspace};

use super::{Caller, M, pagination, with_cli_fields};
use crate::error::{ApiError, ApiResult};

/// The id of the devmaster's one workspace and its one project.
const UNCATEGORIZED: i32 = 1;

#[derive(Deserialize)]
pub(super) struct WorkspaceQuery {
    name: Option<String>,
}

/// The one workspace, as `det workspace list` and `cluster preflight` read it (`?name=` filters).
pub(super) async fn list_workspaces(
    axum::extract::State(m): M,
    _caller: Caller,
    Query(query): Query<WorkspaceQuery>,
) -> ApiResult<Json<Value>> {
    let experiments = m.state().experiments.len();
    let workspace = Workspace {
        id: UNCATEGORIZED,
        name: "Uncategorized".to_owned(),
        archived: false,
    };
    let ws = with_cli_fields(
        &workspace,
        json!({"errorMessage": "", "immutable": true, "numExperiments": experiments,
            "numProjects": 1, "pinned": false, "state": "WORKSPACE_STATE_UNSPECIFIED",
            "userId": 1, "username": "admin"}),
    );
    let listed: Vec<Value> = match query.name {
        Some(name) if name != workspace.name => Vec::new(),
        _ => vec![ws],
    };
    let count = listed.len();
    Ok(Json(
        json!({"workspaces": listed, "pagination": pagination(count)}),
    ))
}

/// `GET /api/v1/projects/{id}`: the one project.
pub(super) async fn get_project(
    axum::extract::State(m): M,
    _caller: Caller,
    Path(id): Path<i32>,
) -> ApiResult<Json<Value>> {
    if id != UNCATEGORIZED {
        return Err(ApiError::NotFound(format!("project not found: {id}")));
    }
    let experiments = m.state().experiments.len();
    let project = Project {
        id,
        name: "Uncategorized".to_owned(),
        workspace_id: UNCATEGORIZED,
        archived: false,
    };
    Ok(Json(json!({"project": with_cli_fields(
        &project,
        json!({"errorMessage": "", "immutable": true, "key": "UNC", "notes": [],
            "numActiveExperiments": 0, "numExperiments": experiments, "numRuns": experiments,
            "state": "WORKSPACE_STATE_UNSPECIFIED", "userId": 1, "username": "admin",
            "workspaceName": "Uncategorized"}),
    )})))
}

/// `GET /api/v1/resource-pools`: the one pool.
pub(super) async fn list_resource_pools(
    axum::extract::State(m): M,
    _caller: Caller,
) -> ApiResult<Json<Value>> {
    let running = m.allocs().len() + m.command_pids.lock().map_or(0, |c| c.len());
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let pool = ResourcePool {
        name: "default".to_owned(),
        slot_type: "TYPE_CPU".to_owned(),
        num_agents: 1,
        slots_available: 0,
        slots_used: 0,
        aux_container_capacity: i32::try_from(cpus).unwrap_or(i32::MAX),
        aux_containers_running: i32::try_from(running).unwrap_or(i32::MAX),
    };
    let pool = with_cli_fields(
        &pool,
        json!({"description": "the devmaster's local processes", "type": "RESOURCE_POOL_TYPE_STATIC",
            "defaultAuxPool": true, "defaultComputePool": true, "preemptible": false,
            "auxContainerCapacityPerAgent": cpus, "location": "local", "instanceType": "",
            "imageId": "", "masterUrl": m.url, "masterCertName": "", "schedulerType": "SCHEDULER_TYPE_FAIR_SHARE",
            "schedulerFittingPolicy": "FITTING_POLICY_BEST", "minAgents": 0, "maxAgents": 0,
            "maxIdleAgentPeriod": 0, "maxAgentStartingPeriod": 0, "clusterName": "devmaster",
            "agentDockerNetwork": "", "agentDockerRuntime": "", "agentDockerImage": "",
            "agentFluentImage": "", "containerStartupScript": "", "startupScript": "",
            "details": {}, "resourceManagerMetadata": {}}),
    );
    Ok(Json(
        json!({"resourcePools": [pool], "pagination": pagination(1)}),
    ))
}
