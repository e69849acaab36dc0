//! What a cluster offers a user: workspaces, projects and resource pools (read by `cluster
//! preflight`; the devmaster serves its one workspace, project and pool).

use serde::{Deserialize, Serialize};

/// A workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workspace {
    /// Id.
    pub id: i32,
    /// Name.
    pub name: String,
    /// Archived workspaces take no new experiments.
    #[serde(default)]
    pub archived: bool,
}

/// `GET /api/v1/workspaces` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspacesResponse {
    /// The workspaces.
    #[serde(default)]
    pub workspaces: Vec<Workspace>,
}

/// A project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    /// Id.
    pub id: i32,
    /// Name.
    pub name: String,
    /// The workspace it belongs to.
    pub workspace_id: i32,
    /// Archived projects take no new experiments.
    #[serde(default)]
    pub archived: bool,
}

/// `GET /api/v1/projects/{id}` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectResponse {
    /// The project.
    pub project: Project,
}

/// A resource pool and what it offers now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePool {
    /// Name.
    pub name: String,
    /// `TYPE_CUDA`, `TYPE_CPU`, `TYPE_ROCM`, ...
    #[serde(default)]
    pub slot_type: String,
    /// Agents in the pool.
    #[serde(default)]
    pub num_agents: i32,
    /// Slots (GPUs, or CPUs in a CPU pool) in the pool.
    #[serde(default)]
    pub slots_available: i32,
    /// Slots in use.
    #[serde(default)]
    pub slots_used: i32,
    /// Zero-slot containers (commands, shells) the pool can run at once.
    #[serde(default)]
    pub aux_container_capacity: i32,
    /// Zero-slot containers running.
    #[serde(default)]
    pub aux_containers_running: i32,
}

/// `GET /api/v1/resource-pools` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePoolsResponse {
    /// The pools.
    #[serde(default)]
    pub resource_pools: Vec<ResourcePool>,
}
