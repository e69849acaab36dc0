//! The cluster templates under `cluster/determined/`, built from a profile: the bounded CPU and
//! GPU commands, the retained zero-GPU shell, the managed CPU lifecycle experiment, and the managed training experiments
//! (four-step qualification, 256-step main run on one GPU and on eight, for NeMo Gym and
//! OpenEnv).

use std::{collections::BTreeMap, fmt};

use crate::{
    ClusterProfile, CommandConfig, ConfigKind, EnvPolicy, Environment, Error, ExperimentConfig,
    Resources, Searcher, YamlConfig, profile::BOOTSTRAP_WORK_DIR,
};

/// The searcher metric of a managed run whose plan has no evaluation section: the GRPO loss
/// every step reports (smaller is better).
pub(crate) const SEARCHER_METRIC: &str = "loss";

/// The environment-service backend of a training run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// NeMo Gym resources server.
    Nemo,
    /// OpenEnv environment server.
    OpenEnv,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Nemo => "nemo",
            Self::OpenEnv => "openenv",
        })
    }
}

impl Backend {
    /// Both backends.
    pub const ALL: [Backend; 2] = [Backend::Nemo, Backend::OpenEnv];

    /// The service interpreter's venv inside the checkout (`cargo xtask qualify --prepare` links
    /// it to the venv it installs).
    pub fn service_venv(self) -> &'static str {
        match self {
            Self::Nemo => ".venv-nemo-gym",
            Self::OpenEnv => ".venv-openenv",
        }
    }
}

/// The inputs of one training run: what a managed training config is rendered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingRun {
    /// Environment backend.
    pub backend: Backend,
    /// Optimizer steps.
    pub steps: u64,
    /// Wall-clock budget, persistent across allocations.
    pub max_wall_seconds: u64,
    /// Output folder relative to the checkout; the plan lives in it.
    pub output: String,
    /// GPUs of the trial, one rank each (`hessian-recipes launch` before `managed-training`
    /// when more than one; the plan's `parallel.shards` must be a multiple).
    pub gpus: u32,
}

impl TrainingRun {
    /// The native four-step qualification run.
    pub fn native_qualification(backend: Backend) -> Self {
        Self {
            backend,
            steps: hr_plan::QUALIFICATION_STEPS,
            max_wall_seconds: 2400,
            output: format!("runs/agent-gyms/native-{backend}-qual"),
            gpus: 1,
        }
    }

    /// The managed recovery qualification: the native four-step run with only its output
    /// folder changed.
    pub fn managed_qualification(backend: Backend) -> Self {
        Self {
            output: format!("runs/agent-gyms/jaif-managed-{backend}-qual"),
            ..Self::native_qualification(backend)
        }
    }

    /// The 256-step main run.
    pub fn main(backend: Backend) -> Self {
        Self {
            backend,
            steps: 256,
            max_wall_seconds: 28800,
            output: format!("runs/agent-gyms/jaif-managed-{backend}-main"),
            gpus: 1,
        }
    }

    /// The main run on `gpus` GPUs of one trial: the same plan, one rank per GPU. The plan's
    /// shards (`--shards` when the plans are prepared, and its qualification with it) must be a
    /// multiple of `gpus`; its bits are those of the one-GPU run.
    pub fn main_on_gpus(backend: Backend, gpus: u32) -> Self {
        Self {
            gpus,
            ..Self::main(backend)
        }
    }

    /// The plan file inside the output folder, relative to the checkout (`cargo xtask qualify
    /// --prepare` writes it).
    pub fn plan_file(&self) -> String {
        format!("{}/experiment-plan.json", self.output)
    }

    /// The plan file inside the output folder, in the profile's checkout.
    pub fn plan_path(&self, profile: &ClusterProfile) -> String {
        profile.in_checkout(&self.plan_file())
    }

    /// The `managed-training` entrypoint (on the trial's GPU; a rank per GPU through the
    /// binary's launcher when there are several).
    pub fn entrypoint(&self, profile: &ClusterProfile) -> Vec<String> {
        let binary = profile.binary();
        let mut words = Vec::new();
        if self.gpus > 1 {
            words.extend([binary.clone(), "launch".to_owned(), "--".to_owned()]);
        }
        words.extend([
            binary,
            "managed-training".to_owned(),
            "--plan".to_owned(),
            self.plan_path(profile),
            "--backend".to_owned(),
            self.backend.to_string(),
            "--service-python".to_owned(),
            profile.in_checkout(&format!("{}/bin/python", self.backend.service_venv())),
            "--max-wall-seconds".to_owned(),
            self.max_wall_seconds.to_string(),
            "--device".to_owned(),
            "cuda".to_owned(),
        ]);
        if self.gpus > 1 {
            // The budget counts every GPU's seconds: room for the wall-clock limit on each.
            words.extend([
                "--gpu-budget-seconds".to_owned(),
                (self.max_wall_seconds * u64::from(self.gpus)).to_string(),
            ]);
        }
        // Sustained training runs only on its backend's verified qualification proofs.
        if self.steps > hr_plan::QUALIFICATION_STEPS {
            words.extend([
                "--proofs".to_owned(),
                profile.in_checkout(&format!("runs/agent-gyms/qualify-{}", self.backend)),
            ]);
        }
        words
    }
}

/// A rendered config: experiment or command.
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateConfig {
    /// `det experiment create` config.
    Experiment(Box<ExperimentConfig>),
    /// `det command run --config-file` config.
    Command(CommandConfig),
    /// `det shell start --config-file` config.
    Shell(CommandConfig),
}

impl TemplateConfig {
    /// The config as `cluster check` reads it, and its kind.
    pub fn value_and_kind(&self) -> Result<(serde_json::Value, ConfigKind), Error> {
        Ok(match self {
            Self::Experiment(c) => (c.to_value()?, ConfigKind::Experiment),
            Self::Command(c) => (c.to_value()?, ConfigKind::Command),
            Self::Shell(c) => (c.to_value()?, ConfigKind::Shell),
        })
    }
}

/// One template file.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// File name, prefixed with the profile name.
    pub file_name: String,
    /// The config.
    pub config: TemplateConfig,
    /// How to submit it, shown in the file's header.
    pub submit: String,
}

impl Template {
    /// The file's text: a header saying where it comes from, then the YAML.
    pub fn render(&self) -> Result<String, Error> {
        let body = match &self.config {
            TemplateConfig::Experiment(c) => c.to_yaml()?,
            TemplateConfig::Command(c) | TemplateConfig::Shell(c) => c.to_yaml()?,
        };
        Ok(format!(
            "# Generated by `cargo xtask templates` from crates/hr-config; do not edit by hand.\n\
             # Check a changed copy with `hessian-recipes cluster check FILE`.\n\
             # Submit from the checkout: {}\n{body}",
            self.submit
        ))
    }
}

fn environment(profile: &ClusterProfile, policy: &EnvPolicy) -> Environment {
    Environment {
        image: profile.image.clone(),
        environment_variables: policy.variables(),
    }
}

fn experiment(
    profile: &ClusterProfile,
    name: String,
    entrypoint: Vec<String>,
    slots_per_trial: u32,
    batches: u64,
    policy: &EnvPolicy,
) -> ExperimentConfig {
    ExperimentConfig {
        name,
        description: None,
        labels: vec!["hessian-recipes".to_owned()],
        workspace: profile.workspace.clone(),
        project: profile.project.clone(),
        entrypoint,
        resources: Resources {
            slots_per_trial: Some(slots_per_trial),
            slots: None,
            resource_pool: profile.resource_pool.clone(),
        },
        searcher: Searcher::single(SEARCHER_METRIC, batches),
        hyperparameters: BTreeMap::new(),
        // A restart after a failure would be a second, unplanned allocation: fail loudly instead.
        max_restarts: 0,
        checkpoint_policy: Some(crate::CheckpointPolicy::All),
        // Every checkpoint (at most one per step) survives the garbage collection at the
        // experiment's end: evaluation adopts retained steps, proofs re-verify all of them.
        checkpoint_storage: Some(
            profile
                .checkpoint_storage
                .clone()
                .unwrap_or_default()
                .retaining_latest(u32::try_from(batches).unwrap_or(u32::MAX)),
        ),
        reproducibility: Some(crate::Reproducibility { experiment_seed: 0 }),
        bind_mounts: profile.shared_mount.iter().cloned().collect(),
        environment: environment(profile, policy),
    }
}

/// The experiment config of a prepared training run: `entrypoint` runs the prepared,
/// source-bound copy of the binary; one GPU (with the GPU environment policy) when `gpu`, else
/// zero slots; a single searcher operation of `steps` optimizer steps.
pub fn training_experiment(
    profile: &ClusterProfile,
    name: String,
    entrypoint: Vec<String>,
    gpu: bool,
    steps: u64,
) -> ExperimentConfig {
    let policy = if gpu {
        EnvPolicy::gpu()
    } else {
        EnvPolicy::default()
    };
    experiment(profile, name, entrypoint, u32::from(gpu), steps, &policy)
}

/// The bounded CPU utility command config (`resources.slots: 0`).
pub fn cpu_command(profile: &ClusterProfile) -> CommandConfig {
    CommandConfig {
        description: Some("hessian-recipes bounded CPU command".to_owned()),
        resources: Resources {
            slots_per_trial: None,
            slots: Some(0),
            resource_pool: profile.resource_pool.clone(),
        },
        bind_mounts: profile.shared_mount.iter().cloned().collect(),
        environment: environment(profile, &EnvPolicy::default()),
        work_dir: Some(BOOTSTRAP_WORK_DIR.to_owned()),
        entrypoint: None,
    }
}

/// The bounded GPU command config (`resources.slots: 1`, the GPUs Determined assigns visible):
/// what `cluster command --slots N` submits with (N > 1 adds `--config resources.slots=N`).
pub fn gpu_command(profile: &ClusterProfile) -> CommandConfig {
    CommandConfig {
        description: Some("hessian-recipes bounded GPU command".to_owned()),
        resources: Resources {
            slots_per_trial: None,
            slots: Some(1),
            resource_pool: profile.resource_pool.clone(),
        },
        environment: environment(profile, &EnvPolicy::gpu()),
        ..cpu_command(profile)
    }
}

/// The retained interactive shell (`resources.slots: 0`, GPUs hidden): development and
/// submissions; GPU work runs as experiments or bounded GPU commands, which find the GPU free.
pub fn shell(profile: &ClusterProfile) -> CommandConfig {
    CommandConfig {
        description: Some("hessian-recipes retained shell (no GPU)".to_owned()),
        ..cpu_command(profile)
    }
}

/// `det experiment create` for a template file (no model-definition folder: the entrypoint reads
/// the checkout through the shared mount).
fn experiment_submit(profile: &ClusterProfile, file_name: &str) -> String {
    let project = profile
        .project_id
        .map(|id| format!(" --project_id {id}"))
        .unwrap_or_default();
    format!("det experiment create{project} cluster/determined/{file_name}")
}

/// Every template of a profile.
pub fn templates(profile: &ClusterProfile) -> Vec<Template> {
    let prefix = profile.name;
    let cpu_file = format!("{prefix}-managed-cpu.yaml");
    let mut out = vec![
        Template {
            file_name: format!("{prefix}-cpu-command.yaml"),
            config: TemplateConfig::Command(cpu_command(profile)),
            submit: "hessian-recipes cluster cpu-command --output runs/NAME -- ARGS... \
                     (prints the bounded `det command run` line)"
                .to_owned(),
        },
        Template {
            file_name: format!("{prefix}-gpu-command.yaml"),
            config: TemplateConfig::Command(gpu_command(profile)),
            submit: "hessian-recipes cluster command --slots 1 --output runs/NAME -- PROGRAM \
                     ARGS... (prints the bounded `det command run` line)"
                .to_owned(),
        },
        Template {
            file_name: format!("{prefix}-shell.yaml"),
            config: TemplateConfig::Shell(shell(profile)),
            submit: format!(
                "det shell start{} --config-file cluster/determined/{prefix}-shell.yaml",
                profile
                    .workspace
                    .as_deref()
                    .map(|w| format!(" --workspace-name {w}"))
                    .unwrap_or_default()
            ),
        },
        Template {
            submit: experiment_submit(profile, &cpu_file),
            file_name: cpu_file,
            config: TemplateConfig::Experiment(Box::new(experiment(
                profile,
                "hessian-recipes managed CPU lifecycle".to_owned(),
                vec![
                    profile.binary(),
                    "managed-trial".to_owned(),
                    "cpu".to_owned(),
                ],
                0,
                8,
                &EnvPolicy::default(),
            ))),
        },
    ];
    for backend in Backend::ALL {
        for (kind, run) in [
            ("qual", TrainingRun::managed_qualification(backend)),
            ("main", TrainingRun::main(backend)),
            ("main-8gpu", TrainingRun::main_on_gpus(backend, 8)),
        ] {
            let file_name = format!("{prefix}-managed-{backend}-{kind}.yaml");
            let gpus = match run.gpus {
                1 => String::new(),
                n => format!(", {n} GPUs"),
            };
            let mut config = experiment(
                profile,
                format!(
                    "hessian-recipes managed {backend} {} ({} steps{gpus})",
                    if kind == "qual" { "qual" } else { "main" },
                    run.steps
                ),
                run.entrypoint(profile),
                run.gpus,
                run.steps,
                &EnvPolicy::gpu(),
            );
            if kind != "qual" {
                // A main plan has an evaluation section: its DEV reward ranks the checkpoints.
                config.searcher = Searcher::dev_reward(run.steps);
            }
            out.push(Template {
                submit: experiment_submit(profile, &file_name),
                file_name,
                config: TemplateConfig::Experiment(Box::new(config)),
            });
        }
    }
    out
}
