//! Cluster profiles: where a job runs and what it sees. `jaif` carries the seed's values for the
//! JAIF workspace; `local` points at the repository's `runs/` folder for the local master.

use std::{fmt, path::Path, str::FromStr};

use crate::{BindMount, CheckpointStorage};

/// The profile names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileName {
    /// The JAIF workspace on the shared Determined cluster.
    Jaif,
    /// This machine, with the local Determined-compatible master.
    Local,
}

impl fmt::Display for ProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Jaif => "jaif",
            Self::Local => "local",
        })
    }
}

impl FromStr for ProfileName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "jaif" => Ok(Self::Jaif),
            "local" => Ok(Self::Local),
            other => Err(format!("unknown profile {other:?}: use `jaif` or `local`")),
        }
    }
}

/// Everything a template needs to know about the place a job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterProfile {
    /// The profile's name, also the prefix of its template files.
    pub name: ProfileName,
    /// Determined workspace name.
    pub workspace: Option<String>,
    /// Determined project name inside the workspace.
    pub project: Option<String>,
    /// Determined project id (for `det experiment create --project_id`).
    pub project_id: Option<u64>,
    /// Resource pool.
    pub resource_pool: Option<String>,
    /// The shared filesystem, mounted at the same path inside containers.
    pub shared_mount: Option<BindMount>,
    /// The source checkout as the job sees it.
    pub checkout: String,
    /// Checkpoint storage; `None` uses the cluster's configured storage.
    pub checkpoint_storage: Option<CheckpointStorage>,
    /// The container image every job runs in; `None` uses the cluster's default.
    pub image: Option<String>,
}

/// Determined 0.35's default image for CPU and CUDA tasks, pinned so that the shell that builds
/// the binary and the trials and commands that run it share one userland (glibc, CUDA libraries)
/// whatever default the cluster's admin configures. By tag: the digest cannot be resolved from
/// a machine without registry access.
pub const JAIF_IMAGE: &str = "determinedai/pytorch-ngc:0.35.0";

/// JAIF's shared workspace mount (host path and container path are the same).
pub const JAIF_MOUNT: &str = "/pfss/mlde/workspaces/mlde_wsp_JAIF";

/// Determined's bootstrap working directory; auth files live there, outside the shared mount.
pub const BOOTSTRAP_WORK_DIR: &str = "/run/determined/workdir";

impl ClusterProfile {
    /// The JAIF workspace (project 363 `hessian-recipes`, pool `42_Compute`).
    pub fn jaif() -> Self {
        Self {
            name: ProfileName::Jaif,
            workspace: Some("JAIF".to_owned()),
            project: Some("hessian-recipes".to_owned()),
            project_id: Some(363),
            resource_pool: Some("42_Compute".to_owned()),
            shared_mount: Some(BindMount {
                host_path: JAIF_MOUNT.to_owned(),
                container_path: JAIF_MOUNT.to_owned(),
                read_only: false,
            }),
            checkout: format!("{JAIF_MOUNT}/hessian_recipes"),
            // Named, not the master's default: trials (at `/determined_shared_fs`), the retained
            // shell and the evaluation command (under the mount) all see this one folder.
            checkpoint_storage: Some(CheckpointStorage::shared_fs(
                JAIF_MOUNT,
                Some("hessian_recipes/runs/checkpoints".to_owned()),
            )),
            image: Some(JAIF_IMAGE.to_owned()),
        }
    }

    /// This machine: the checkout is `repo_root`, checkpoints go under its `runs/`.
    pub fn local(repo_root: &Path) -> Self {
        let root = repo_root.to_string_lossy().trim_end_matches('/').to_owned();
        Self {
            name: ProfileName::Local,
            workspace: None,
            project: None,
            project_id: None,
            resource_pool: None,
            shared_mount: None,
            checkpoint_storage: Some(CheckpointStorage::directory(format!(
                "{root}/runs/checkpoints"
            ))),
            checkout: root,
            // The devmaster runs processes, not containers.
            image: None,
        }
    }

    /// The profile by name; `repo_root` is used by `local` only.
    pub fn by_name(name: ProfileName, repo_root: &Path) -> Self {
        match name {
            ProfileName::Jaif => Self::jaif(),
            ProfileName::Local => Self::local(repo_root),
        }
    }

    /// The release binary inside the checkout.
    pub fn binary(&self) -> String {
        format!("{}/target/release/hessian-recipes", self.checkout)
    }

    /// A path inside the checkout.
    pub fn in_checkout(&self, relative: &str) -> String {
        format!("{}/{relative}", self.checkout)
    }
}
