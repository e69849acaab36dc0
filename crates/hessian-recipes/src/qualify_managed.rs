//! `hessian-recipes qualify managed`: the plan natively and uninterrupted (or, with
//! `--native-proof`, the native qualification's uninterrupted run by this binary), then as a
//! Determined trial (`managed-training` on the devmaster or `--master`) paused after an optimizer
//! step and activated again, run by one immutable copy of this binary; the evidence of every step
//! must be equal field by field and the restore must be exactly the receipt's checkpoint.
//! Writes `managed-proof.json` (create-only).

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, bail};
use hr_plan::{Environment, Plan};
use hr_proof::{CoreIdentity, MANAGED_PROOF_SCHEMA, ManagedProof, first_divergence};
use hr_qualify::{ManagedOptions, managed_recovery, record_source};

use crate::Refused;
use crate::backend::DeviceKind;
use crate::cli::QualifyManagedArgs;
use crate::output::create_fresh;

fn evidence(path: &Path) -> anyhow::Result<Vec<hr_proof::EvidenceLine>> {
    Ok(hr_proof::read_evidence(path)?)
}

/// The environment server's package and version, read from the service's own Python.
fn service_package(plan: &Plan) -> anyhow::Result<Option<String>> {
    let (python, package) = match &plan.environment {
        Environment::Fixture { .. } | Environment::Dataset { .. } => return Ok(None),
        Environment::Openenv { python, .. } => (python, "openenv-core"),
        Environment::Nemo { python, .. } => (python, "nemo-gym"),
    };
    let out = Command::new(python)
        .args([
            "-c",
            &format!("import importlib.metadata as m; print(m.version({package:?}))"),
        ])
        .output()
        .with_context(|| format!("asking {} for the {package} version", python.display()))?;
    if !out.status.success() {
        bail!(
            "{} has no {package} package: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(Some(format!(
        "{package} {}",
        String::from_utf8_lossy(&out.stdout).trim()
    )))
}

/// The uninterrupted run of the native proof at `path`, once the proof holds and is of this
/// plan and of `binary`; refused (exit 2) otherwise.
fn native_reference(path: &Path, plan: &Plan, binary: &Path) -> anyhow::Result<std::path::PathBuf> {
    let native = hr_qualify::verify_native_proof(path)
        .map_err(|e| Refused(format!("--native-proof {}: {e}", path.display())))?;
    let refuse = |why: String| Refused(format!("--native-proof {}: {why}", path.display()));
    if native.plan_sha256 != plan.sha256() {
        return Err(refuse("it qualifies another plan (its plan_sha256 differs)".into()).into());
    }
    let (_, ours) = hr_seal::hash_file(binary)?;
    if native.source.binary_sha256.as_deref() != Some(ours.as_str()) {
        return Err(refuse(format!(
            "it was made by another binary (sha256 {}, this one {ours}): qualify both halves              with one build",
            native.source.binary_sha256.as_deref().unwrap_or("unrecorded")
        ))
        .into());
    }
    // The proof names it as seen from where it was verified: this folder.
    let reference = std::path::absolute(&native.reference)?;
    eprintln!(
        "qualify managed: the reference is the native proof's uninterrupted run {}",
        reference.display()
    );
    Ok(reference)
}

pub(crate) fn run(args: &QualifyManagedArgs) -> anyhow::Result<ExitCode> {
    let plan = Plan::from_file(&args.plan).map_err(|e| Refused(e.to_string()))?;
    if args
        .kill_during_save_at
        .is_some_and(|k| k < 2 || k >= plan.steps || plan.checkpoints.every != 1)
    {
        return Err(Refused(format!(
            "--kill-during-save-at needs a step between 2 and {} and a plan that saves every step",
            plan.steps - 1
        ))
        .into());
    }
    // The pause lands while the next step runs, and that step must not be the last.
    if args.pause_after_step == 0 || args.pause_after_step + 2 > plan.steps {
        return Err(Refused(format!(
            "--pause-after-step {} must be between 1 and the plan's steps - 2 ({}): the worker \
             stops at the step after it, which must not be the last",
            args.pause_after_step,
            plan.steps.saturating_sub(2)
        ))
        .into());
    }
    let backend = plan.environment.backend();
    let binary = std::env::current_exe().context("locating this binary")?;
    // Checked before anything is written.
    let native_reference = args
        .native_proof
        .as_deref()
        .map(|path| native_reference(path, &plan, &binary))
        .transpose()?;
    create_fresh(&args.output)?;
    let output = std::path::absolute(&args.output)?;
    let plan_path = std::path::absolute(&args.plan)?;
    let root = std::env::current_dir().context("current folder")?;
    let record = record_source(&binary, env!("HR_GIT_COMMIT"), &root, &output)?;
    let copy = output.join(&record.binary);

    let reference = match native_reference {
        // The native qualification's uninterrupted run, made on the device by this binary.
        Some(reference) => reference,
        None => {
            let reference = output.join("reference");
            eprintln!("qualify managed: native reference run");
            let status = Command::new(&copy)
                .args(["train", "--plan"])
                .arg(&plan_path)
                .arg("--output")
                .arg(&reference)
                .args(["--device", args.device.flag()])
                .status()
                .context("running train")?;
            if !status.success() {
                bail!("the native reference run failed ({status})");
            }
            reference
        }
    };

    eprintln!(
        "qualify managed: managed run, paused once step {}'s metric shows (stopping at step {})",
        args.pause_after_step,
        args.pause_after_step + 1
    );
    let opts = ManagedOptions {
        output: output.join("managed"),
        root,
        master: args.master.clone(),
        gpu: args.device == DeviceKind::Cuda,
        entrypoint: vec![
            copy.display().to_string(),
            "managed-training".to_owned(),
            "--plan".to_owned(),
            plan_path.display().to_string(),
            "--backend".to_owned(),
            backend.to_owned(),
            "--max-wall-seconds".to_owned(),
            args.timeout_seconds.to_string(),
            "--device".to_owned(),
            args.device.flag().to_owned(),
        ]
        .into_iter()
        // The qualification run is by nature not yet qualified.
        .chain((plan.steps > hr_proof::QUALIFICATION_STEPS).then(|| "--unqualified".to_owned()))
        .collect(),
        steps: plan.steps,
        pause_after_step: args.pause_after_step,
        timeout: Duration::from_secs(args.timeout_seconds),
        kill_during_save_at: args.kill_during_save_at,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let managed = runtime.block_on(managed_recovery(&opts))?;

    let (ours, theirs) = (
        evidence(&hr_files::RunDir::new(&reference).evidence())?,
        evidence(&hr_files::RunDir::new(&managed.run_dir).evidence())?,
    );
    // Empty or truncated evidence is never "equal".
    let complete = ours.len() as u64 == plan.steps && theirs.len() as u64 == plan.steps;
    let divergence = first_divergence(&ours, &theirs);
    let equal = complete && divergence.is_none();
    let device = hr_qualify::runs_device(&[&reference, &managed.run_dir])?;
    let proof = ManagedProof {
        schema: MANAGED_PROOF_SCHEMA.to_owned(),
        plan_sha256: plan.sha256(),
        backend: backend.to_owned(),
        steps: plan.steps,
        reference,
        run_dir: managed.run_dir.clone(),
        experiment_id: managed.experiment_id.into(),
        trial_id: managed.trial_id.into(),
        interruption: managed.interruption.clone(),
        checkpoints_listed: managed.checkpoints_listed,
        equal,
        first_divergence: divergence.clone(),
        source: record.binding.clone(),
        core: CoreIdentity {
            implementation: "hr-core".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            binary_sha256: record.binding.binary_sha256.clone().unwrap_or_default(),
        },
        master_version: managed.master_version.clone(),
        master_url: managed.master_url.clone(),
        device,
        service_package: service_package(&plan)?,
    };
    proof.write(&output.join(hr_proof::MANAGED_PROOF_FILE))?;
    let i = &managed.interruption;
    println!(
        "qualify managed ({backend}): {}",
        if equal { "EQUAL" } else { "DIFFERENT" }
    );
    println!(
        "  experiment {} trial {}: {}{} at step {} ({}), restored {} in {}; {} checkpoints listed",
        managed.experiment_id,
        managed.trial_id,
        i.kind,
        i.pause_sent_after_step
            .map(|k| format!(" sent after step {k}'s metric, stopped"))
            .unwrap_or_default(),
        i.step,
        i.paused_allocation,
        i.uuid_at_restore,
        i.restored_allocation,
        managed.checkpoints_listed
    );
    println!(
        "  master {}, {}; source {} (binary sha256 {})",
        proof.master_version,
        proof.service_package.as_deref().unwrap_or("no service"),
        proof.source.commit,
        proof.core.binary_sha256
    );
    if !complete {
        println!(
            "  evidence incomplete: {} native and {} managed steps of {}",
            ours.len(),
            theirs.len(),
            plan.steps
        );
    }
    if let Some(d) = divergence {
        println!("  first divergence at step {} in `{}`", d.step, d.field);
    }
    println!(
        "  proof {}",
        output.join(hr_proof::MANAGED_PROOF_FILE).display()
    );
    Ok(if equal {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
