//! `hessian-recipes cluster preflight`: before a submission, whether the master and this machine
//! have what the run needs. The master: its version (0.35.x), sign-in (as `det`), the profile's
//! workspace, project and resource pool (and what the pool offers: the seed's pool inspection).
//! This machine: the shared mount and, for the config to submit, its binary (built with `cuda`
//! when the config runs `--device cuda`), plan, service venv and proofs. The binary prints the
//! [`Checklist`] as lines or JSON.

use std::path::{Path, PathBuf};

use hr_config::ClusterProfile;
use serde_json::Value;

use hr_files::IoResultExt;

use crate::QualifyError;

mod master;

use master::master_checks;

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It holds.
    Ok,
    /// It does not.
    Fail,
    /// Not checked: nothing names it, or a check it needs failed.
    Skip,
}

impl Status {
    /// `ok`, `fail` or `skip`.
    pub fn word(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Fail => "fail",
            Self::Skip => "skip",
        }
    }
}

/// One check.
#[derive(Debug)]
pub struct Check {
    /// What was checked (`master`, `workspace`, `binary`, ...).
    pub name: &'static str,
    /// How it came out.
    pub status: Status,
    /// What was found, or what to fix.
    pub detail: String,
}

/// The checks, in the order they ran.
#[derive(Debug, Default)]
pub struct Checklist(pub Vec<Check>);

/// What a preflight asks of the master beyond the profile.
#[derive(Debug, Clone)]
pub struct PreflightTarget {
    /// The master's URL.
    pub master: String,
    /// The workspace, if not the profile's.
    pub workspace: Option<String>,
    /// The project id, if not the profile's.
    pub project_id: Option<i32>,
    /// The resource pool, if not the profile's.
    pub pool: Option<String>,
}

impl Checklist {
    /// Adds a check; returns whether it passed.
    fn add(&mut self, name: &'static str, status: Status, detail: impl Into<String>) -> bool {
        self.0.push(Check {
            name,
            status,
            detail: detail.into(),
        });
        status == Status::Ok
    }

    /// Adds a check that passed (`Ok`) or failed; returns whether it passed.
    fn result(&mut self, name: &'static str, result: Result<String, String>) -> bool {
        match result {
            Ok(detail) => self.add(name, Status::Ok, detail),
            Err(detail) => self.add(name, Status::Fail, detail),
        }
    }
}

/// The master's checks (against `target`) and this machine's (for `profile` and the `config` to
/// submit, if any).
pub async fn preflight(
    target: &PreflightTarget,
    profile: &ClusterProfile,
    config: Option<&Value>,
) -> Checklist {
    let mut list = Checklist::default();
    master_checks(target, profile, config, &mut list).await;
    local_checks(profile, config, &mut list);
    list
}

/// The config to submit, checked as `cluster check` does; refused when it is not valid.
pub fn read_config(path: &Path) -> Result<Value, QualifyError> {
    let (_, mut findings) = hr_config::check_file(path, None)
        .map_err(|e| QualifyError::Refused(format!("--config {}: {e}", path.display())))?;
    findings.retain(hr_config::Finding::is_problem);
    if let Some(first) = findings.first() {
        return Err(QualifyError::Refused(format!(
            "--config {}: {} problem(s), first: {first}; run `hessian-recipes cluster check {}`",
            path.display(),
            findings.len(),
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path).at("read", path)?;
    Ok(hr_config::parse_yaml(&text, &path.display().to_string())?)
}

/// The shared mount, and what the config to submit names on this machine.
fn local_checks(profile: &ClusterProfile, config: Option<&Value>, list: &mut Checklist) {
    let mounts: Vec<String> = match config {
        Some(c) => c
            .get("bind_mounts")
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .filter_map(|b| b.get("host_path").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        None => profile
            .shared_mount
            .iter()
            .map(|m| m.host_path.clone())
            .collect(),
    };
    if mounts.is_empty() {
        list.add("shared mount", Status::Skip, "none named");
    }
    for mount in mounts {
        let ok = Path::new(&mount).is_dir();
        list.result(
            "shared mount",
            if ok {
                Ok(mount)
            } else {
                Err(format!(
                    "{mount} is not a folder here: run from a node that mounts it"
                ))
            },
        );
    }
    let Some(config) = config else {
        let binary = PathBuf::from(profile.binary());
        list.result("binary", binary_check(&binary, false));
        for name in ["plan", "inputs", "storage", "service venv", "proofs"] {
            list.add(name, Status::Skip, "no --config to read it from");
        }
        return;
    };
    let entrypoint = entrypoint(config);
    let flag = |name: &str| {
        entrypoint
            .iter()
            .position(|a| a == name)
            .and_then(|i| entrypoint.get(i + 1))
            .cloned()
    };
    let cuda = flag("--device").as_deref() == Some("cuda");
    let view = TrialView::of(config);
    match entrypoint.first() {
        // A missing binary gets binary_check's build hint.
        Some(binary) => list.result(
            "binary",
            match std::path::absolute(binary)
                .ok()
                .and_then(|b| view.outside(&b))
            {
                Some(why) => Err(why),
                None => binary_check(Path::new(binary), cuda),
            },
        ),
        None => list.result("binary", Err("the config has no entrypoint".to_owned())),
    };
    match flag("--plan") {
        Some(plan) => match view.misses(Path::new(&plan)).map_or_else(
            || hr_plan::Plan::from_file(Path::new(&plan)).map_err(|e| e.to_string()),
            Err,
        ) {
            Ok(p) => {
                let slots = config
                    .pointer("/resources/slots_per_trial")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                list.result("plan", plan_spreads(&plan, &p, slots));
                list.result("inputs", plan_inputs(&p, &view));
            }
            Err(e) => {
                list.add("plan", Status::Fail, e);
                list.add(
                    "inputs",
                    Status::Skip,
                    "needs a plan the trial finds and parses",
                );
            }
        },
        None => {
            list.add("plan", Status::Skip, "the entrypoint names no --plan");
            list.add("inputs", Status::Skip, "no plan");
        }
    };
    list.result("storage", storage(config));
    match flag("--service-python") {
        Some(python) => match view.misses(Path::new(&python)) {
            None => list.add("service venv", Status::Ok, python),
            Some(why) => list.add(
                "service venv",
                Status::Fail,
                format!("{why}: create the service venv the config names"),
            ),
        },
        None => list.add("service venv", Status::Skip, "the entrypoint names none"),
    };
    match flag("--proofs") {
        Some(dir) => list.result("proofs", proofs_check(Path::new(&dir), &view)),
        None => list.add(
            "proofs",
            Status::Skip,
            "the entrypoint names none (a qualification run)",
        ),
    };
}

/// The proofs in `dir` hold (re-verified as the gate will) and the trial finds them and the runs
/// they name, resolved against the proofs themselves, not this shell's folder.
fn proofs_check(dir: &Path, view: &TrialView) -> Result<String, String> {
    let proofs = hr_proof::ProofsDir::new(dir);
    let (native, managed) = (proofs.native_proof(), proofs.managed_proof());
    let missing: Vec<String> = [&native, &managed]
        .into_iter()
        .filter_map(|p| view.misses(p))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{}: run the qualification first (`cargo xtask qualify`)",
            missing.join("; ")
        ));
    }
    let proof = crate::verify::verify_native_proof(&native)
        .map_err(|e| format!("{}: {e}", native.display()))?;
    crate::verify::verify_managed_proof(&managed)
        .map_err(|e| format!("{}: {e}", managed.display()))?;
    for run in [&proof.reference, &proof.interrupted, &proof.resumed] {
        if run.is_relative() {
            return Err(format!(
                "{} names its run {} from the folder qualify ran in, which a trial does not \
                 start in: qualify again with this binary (it records runs beside the proof)",
                native.display(),
                run.display()
            ));
        }
        if let Some(why) = view.misses(run) {
            return Err(format!("{}: {why}", native.display()));
        }
    }
    Ok(format!("{} (both hold)", dir.display()))
}

/// The config names its checkpoint storage (never the master's default, which this machine
/// cannot see), and the folder its trials write is one this machine, and so the evaluation
/// command with the same mounts, sees: for a config with bind mounts (containers), a
/// `directory` inside one (else it would vanish with the container); a folder reachable here.
fn storage(config: &Value) -> Result<String, String> {
    let Some(given) = config
        .get("checkpoint_storage")
        .filter(|s| s.get("type").is_some())
    else {
        return Err(
            "the config names no checkpoint_storage.type, so its trials would write to \
                    the master's default storage, which evaluate may not see: name shared_fs \
                    on the shared mount (`cluster render` does)"
                .to_owned(),
        );
    };
    let storage = hr_config::CheckpointStorage::from_expconf(given).map_err(|e| e.to_string())?;
    let here = storage
        .folder(hr_config::StorageView::Host)
        .map_err(|e| e.to_string())?;
    if storage.kind == Some(hr_config::StorageKind::Directory)
        && let Some(why) = TrialView::of(config).outside(&here)
    {
        return Err(format!(
            "directory storage: {why}; checkpoints would vanish with each container"
        ));
    }
    // The folder, or the nearest folder above it that exists (trials create the rest).
    let reachable = here.ancestors().find(|a| a.is_dir());
    match reachable {
        Some(found) if found != Path::new("/") || here == Path::new("/") => Ok(format!(
            "trials' checkpoints land in {}, which this machine (and the evaluation command, \
             with the same mounts) sees",
            here.display()
        )),
        _ => Err(format!(
            "{} is not reachable here: run from a node that mounts it",
            here.display()
        )),
    }
}

/// What a trial sees of this machine's files: with bind mounts (a container), only what lies
/// under one of their container paths (besides its image), as this shell, which has the same
/// mounts, sees them there; without (the devmaster's processes), every file here.
pub(crate) struct TrialView(Vec<PathBuf>);

impl TrialView {
    /// The view of a trial of `config` (its `bind_mounts`).
    pub(crate) fn of(config: &Value) -> Self {
        Self(
            config
                .get("bind_mounts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|m| m.get("container_path")?.as_str().map(PathBuf::from))
                .collect(),
        )
    }

    /// The view of a trial of `profile`'s templates (its shared mount).
    pub(crate) fn of_profile(profile: &ClusterProfile) -> Self {
        Self(
            profile
                .shared_mount
                .iter()
                .map(|m| PathBuf::from(&m.container_path))
                .collect(),
        )
    }

    /// Why the trial's container would not see `path` (absolute), if it would not: it lies
    /// under none of the mounts.
    fn outside(&self, path: &Path) -> Option<String> {
        (!self.0.is_empty() && !self.0.iter().any(|m| path.starts_with(m))).then(|| {
            format!(
                "{} lies under no bind mount, so the trial's container does not see it: move it \
                 under {}",
                path.display(),
                self.0
                    .iter()
                    .map(|m| m.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )
        })
    }

    /// Why the trial would not find `path` (absolute, or relative to this shell's folder), if
    /// it would not: missing here, or outside every mount.
    pub(crate) fn misses(&self, path: &Path) -> Option<String> {
        let Ok(path) = std::path::absolute(path) else {
            return Some(format!("{} cannot be resolved", path.display()));
        };
        if path.exists() {
            self.outside(&path)
        } else {
            Some(format!("{} is missing", path.display()))
        }
    }
}

/// The plan, when its shards spread over the trial's slots (one rank per slot).
fn plan_spreads(file: &str, plan: &hr_plan::Plan, slots: u64) -> Result<String, String> {
    let shards = plan.parallel.shards;
    let ranks = usize::try_from(slots).unwrap_or(usize::MAX);
    if slots > 1 && !plan.parallel.admits(ranks) {
        return Err(format!(
            "{file}: its parallel.shards ({shards}) cannot be shared by the trial's {slots} \
             ranks (resources.slots_per_trial): set parallel.shards to a multiple of {slots} (a \
             power of two that divides grpo.tasks_per_step; `cargo xtask qualify BACKEND \
             --prepare --shards N` writes such plans) and qualify that plan, or ask for a number \
             of slots that divides {shards}"
        ));
    }
    Ok(format!("{file} ({}, {} steps)", plan.name, plan.steps))
}

/// Every file and folder the plan reads is there for the trial (`view`; resolved as the trial
/// resolves them: against the plan's folder), the model folder with its `config.json`.
pub(crate) fn plan_inputs(plan: &hr_plan::Plan, view: &TrialView) -> Result<String, String> {
    let inputs = plan.input_paths();
    let missing: Vec<String> = inputs
        .iter()
        .filter_map(|(field, path)| {
            let path = if field == "model.path" {
                path.join("config.json")
            } else {
                path.to_path_buf()
            };
            view.misses(&path).map(|why| format!("{field}: {why}"))
        })
        .collect();
    if missing.is_empty() {
        Ok(format!("{} file(s) and folder(s) found", inputs.len()))
    } else {
        Err(format!(
            "the trial would fail on it: {}",
            missing.join("; ")
        ))
    }
}

fn entrypoint(config: &Value) -> Vec<String> {
    match config.get("entrypoint") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        Some(Value::String(s)) => shlex::split(s).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The binary exists, runs, and (when `cuda`) was built with the CUDA backend.
fn binary_check(binary: &Path, cuda: bool) -> Result<String, String> {
    if !binary.is_file() {
        return Err(format!(
            "{} is missing: build it with `cargo build --release --features cuda -p \
             hessian-recipes`",
            binary.display()
        ));
    }
    // Run here, in a shell of the job's image, a binary linked against a newer glibc would not
    // start in the job either.
    if let (Some(need), Some(have)) = (
        crate::glibc::required(binary)?,
        crate::glibc::this_machine(),
    ) && need > have
    {
        return Err(format!(
            "{} needs glibc {} but this machine has {}: build it in a shell of the job's image \
             (docs/cluster.md, \"Building on the cluster\")",
            binary.display(),
            crate::glibc::show(need),
            crate::glibc::show(have)
        ));
    }
    let out = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| format!("{}: cannot run it: {e}", binary.display()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} --version failed ({}): {}",
            binary.display(),
            out.status,
            said.lines().next().unwrap_or("no message")
        ));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if cuda && !version.contains("cuda") {
        return Err(format!(
            "{} has no CUDA backend ({version}) but the config runs --device cuda: rebuild with \
             --features cuda",
            binary.display()
        ));
    }
    Ok(format!("{} ({version})", binary.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_0_35_master_passes() {
        let info = |version: &str| hr_det::wire::MasterInfo {
            version: version.to_owned(),
            cluster_id: "c".to_owned(),
            master_id: "c".to_owned(),
            cluster_name: "jaif".to_owned(),
        };
        assert!(master::master_line(&info("0.35.0"), "https://m:8443").is_ok());
        for other in ["0.36.0", "0.34.9", "0.3.5"] {
            let err = master::master_line(&info(other), "https://m:8443").expect_err(other);
            assert!(
                err.contains(&format!("Determined {other} at https://m:8443")),
                "{err}"
            );
            assert!(err.ends_with("speaks Determined 0.35.x"), "{err}");
        }
    }

    #[test]
    fn directory_storage_outside_every_bind_mount_is_refused() {
        let config = |container_path: &str| {
            serde_json::json!({
                "checkpoint_storage": {"type": "directory", "container_path": container_path},
                "bind_mounts": [{"host_path": "/tmp", "container_path": "/tmp"}],
            })
        };
        let err = storage(&config("/elsewhere/ckpts")).expect_err("refused");
        assert!(
            err.contains("/elsewhere/ckpts lies under no bind mount") && err.contains("vanish"),
            "{err}"
        );
        assert!(storage(&config("/tmp/ckpts")).is_ok());
    }

    /// A binary linked against a newer glibc than this machine's is refused before it is run
    /// (run, it would fail in the loader): this test's own binary, its `GLIBC_2.x` version
    /// needs rewritten to `GLIBC_9.x`.
    #[test]
    fn a_binary_that_needs_a_newer_glibc_is_refused() {
        let exe = std::env::current_exe().expect("exe");
        let mut bytes = std::fs::read(&exe).expect("read");
        let (from, to) = (b"GLIBC_2.", b"GLIBC_9.");
        let mut at = 0;
        while let Some(i) = bytes[at..].windows(from.len()).position(|w| w == from) {
            bytes[at + i..at + i + to.len()].copy_from_slice(to);
            at += i + to.len();
        }
        let dir = tempfile::tempdir().expect("tmp");
        let newer = dir.path().join("hessian-recipes");
        std::fs::write(&newer, &bytes).expect("write");
        let err = binary_check(&newer, false).expect_err("refused");
        assert!(err.contains("needs glibc 9."), "{err}");
        assert!(err.contains("Building on the cluster"), "{err}");
        assert!(binary_check(&exe, false).is_err_and(|e| !e.contains("glibc")));
    }
}
