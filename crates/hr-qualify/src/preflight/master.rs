//! The master's half of `cluster preflight`: its version, the sign-in, and the profile's
//! workspace, project and resource pool (what the pool offers, and whether it has the config's
//! slots).

use hr_config::ClusterProfile;
use serde_json::Value;

use super::{Checklist, PreflightTarget, Status};

/// The master: reached at a 0.35 version, signed in, then the workspace, project and pool the
/// arguments or the profile name.
pub(super) async fn master_checks(
    args: &PreflightTarget,
    profile: &ClusterProfile,
    config: Option<&Value>,
    list: &mut Checklist,
) {
    let mut client = match hr_det::Client::new(&args.master) {
        Ok(c) => c,
        Err(e) => {
            list.add("master", Status::Fail, e.to_string());
            return;
        }
    };
    let reached = list.result(
        "master",
        client
            .info()
            .await
            .map_err(|e| e.to_string())
            .and_then(|info| master_line(&info, client.master())),
    );
    let signed_in = reached
        && list.result(
            "sign-in",
            match client.sign_in_from_env().await {
                Ok(()) => client
                    .me()
                    .await
                    .map(|u| format!("as {}", u.username))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!(
                    "{e}; set DET_USER_TOKEN, run `det user login`, or set DET_USER and DET_PASS"
                )),
            },
        );
    let names = [
        (
            "workspace",
            args.workspace.is_some() || profile.workspace.is_some(),
        ),
        (
            "project",
            args.project_id.is_some() || profile.project_id.is_some(),
        ),
        (
            "pool",
            args.pool.is_some() || profile.resource_pool.is_some(),
        ),
    ];
    if !signed_in {
        for (name, _) in names {
            list.add(name, Status::Skip, "needs the master and a sign-in");
        }
        return;
    }
    let workspace_name = args.workspace.clone().or_else(|| profile.workspace.clone());
    let workspace = match &workspace_name {
        None => {
            list.add(
                "workspace",
                Status::Skip,
                "the profile names none (--workspace NAME)",
            );
            None
        }
        Some(name) => {
            let (id, line) = workspace_check(&client, name).await;
            list.result("workspace", line);
            id.map(|id| (name.as_str(), id))
        }
    };
    match args
        .project_id
        .or(profile.project_id.and_then(|p| i32::try_from(p).ok()))
    {
        None => {
            list.add(
                "project",
                Status::Skip,
                "the profile names none (--project-id ID)",
            );
        }
        Some(id) => {
            let expected_name = args
                .project_id
                .is_none()
                .then_some(profile.project.as_deref())
                .flatten();
            list.result(
                "project",
                project_check(&client, id, expected_name, workspace).await,
            );
        }
    }
    match args.pool.clone().or_else(|| profile.resource_pool.clone()) {
        None => {
            list.add("pool", Status::Skip, "the profile names none (--pool NAME)");
        }
        Some(name) => {
            let slots_wanted = config
                .and_then(|c| c.pointer("/resources/slots_per_trial"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            list.result("pool", pool_check(&client, &name, slots_wanted).await);
        }
    }
}

/// The workspace `name`: its id when the master has one of that name, and the check's line.
async fn workspace_check(
    client: &hr_det::Client,
    name: &str,
) -> (Option<i32>, Result<String, String>) {
    let found = client.workspaces_named(name).await;
    let id = found.as_ref().ok().and_then(|w| w.first()).map(|w| w.id);
    let line = match found {
        Ok(w) if w.first().is_some_and(|w| !w.archived) => Ok(format!("{name} (id {})", w[0].id)),
        Ok(w) if !w.is_empty() => Err(format!("{name} is archived")),
        Ok(_) => Err(format!(
            "no workspace named {name} on this master (or not visible to you): ask its admin, \
             or give --workspace NAME"
        )),
        Err(e) => Err(e.to_string()),
    };
    (id, line)
}

/// Project `id`: there, not archived, named `expected_name` when the profile names it, and in
/// the workspace found (its name and id).
async fn project_check(
    client: &hr_det::Client,
    id: i32,
    expected_name: Option<&str>,
    workspace: Option<(&str, i32)>,
) -> Result<String, String> {
    match client.project(id).await {
        Ok(p) if p.archived => Err(format!("project {id} ({}) is archived", p.name)),
        Ok(p) if expected_name.is_some_and(|n| n != p.name) => Err(format!(
            "project {id} is {:?}, not {:?}: check the project id",
            p.name,
            expected_name.unwrap_or_default()
        )),
        Ok(p) if workspace.is_some_and(|(_, w)| w != p.workspace_id) => {
            let (name, w) = workspace.unwrap_or_default();
            Err(format!(
                "project {id} ({}) is in workspace {}, not {name} (id {w})",
                p.name, p.workspace_id
            ))
        }
        Ok(p) => Ok(format!("{id} {} (workspace {})", p.name, p.workspace_id)),
        Err(hr_det::DetError::NotFound(_)) => Err(format!(
            "no project {id} on this master (or not visible to you): check the project id, or \
             give --project-id ID"
        )),
        Err(e) => Err(format!("project {id}: {e}")),
    }
}

/// The resource pool `name`: what it offers, and whether it has `slots_wanted` slots.
async fn pool_check(
    client: &hr_det::Client,
    name: &str,
    slots_wanted: i64,
) -> Result<String, String> {
    let pools = client.resource_pools().await.map_err(|e| e.to_string())?;
    let Some(p) = pools.iter().find(|p| p.name == name) else {
        return Err(format!(
            "no resource pool {name}; the master has: {}",
            pools
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let offer = format!(
        "{name}: {} {} slot(s) on {} agent(s), {} in use; zero-slot capacity {} ({} running)",
        p.slots_available,
        p.slot_type.trim_start_matches("TYPE_"),
        p.num_agents,
        p.slots_used,
        p.aux_container_capacity,
        p.aux_containers_running
    );
    if i64::from(p.slots_available) < slots_wanted {
        Err(format!(
            "{offer}; the config asks for {slots_wanted} slot(s) per trial"
        ))
    } else {
        Ok(offer)
    }
}

/// The master check's line: its version must be 0.35.x, the API this client speaks.
pub(super) fn master_line(info: &hr_det::wire::MasterInfo, url: &str) -> Result<String, String> {
    let line = format!(
        "Determined {} at {url} (cluster {:?})",
        info.version, info.cluster_name
    );
    if info.version.starts_with("0.35.") {
        Ok(line)
    } else {
        Err(format!("{line}: hessian-recipes speaks Determined 0.35.x"))
    }
}
