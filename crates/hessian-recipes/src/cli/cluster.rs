//! The arguments of the commands that meet Determined: `cluster` (configs, bounded commands,
//! preflight), `managed` (prepare, and the trials' entrypoints `managed-trial` and
//! `managed-training`) and `devmaster`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub(crate) enum ManagedCommand {
    /// Prepare a fresh, source-bound managed training experiment in OUTPUT (a new folder inside
    /// the checkout): experiment-plan.json (the plan with absolute paths), source/ (an immutable
    /// copy of this binary and SOURCE.json with its commit, tree, Cargo.lock and binary digests)
    /// and experiment.yaml, whose entrypoint runs that copy with `managed-training`. Prints the
    /// `det experiment create` line. Run it where the cluster sees the checkout at the profile's
    /// path (for jaif: in the JAIF shell).
    Prepare(PrepareArgs),
}

#[derive(Debug, Args)]
pub(crate) struct PrepareArgs {
    /// The plan.
    #[arg(long)]
    pub(crate) plan: PathBuf,
    /// Fresh folder relative to the checkout, e.g. runs/agent-gyms/jaif-managed-nemo-03.
    #[arg(long)]
    pub(crate) output: PathBuf,
    /// `jaif` (the shared cluster) or `local` (this machine's devmaster); HR_PROFILE=local
    /// rehearses the JAIF recipe here.
    #[arg(long, env = "HR_PROFILE", default_value = "jaif")]
    pub(crate) profile: hr_config::ProfileName,
    /// Backend of the trial; `cuda` requests one GPU, `cpu` zero slots.
    #[arg(long, value_enum, default_value_t = crate::backend::DeviceKind::Cuda)]
    pub(crate) device: crate::backend::DeviceKind,
    /// Search this plan field with Determined's searcher: SECTION.FIELD=SPEC, SECTION one of
    /// grpo, optimizer, lora (fields as docs/plan.md names them), SPEC log:MIN..MAX,
    /// double:MIN..MAX or int:MIN..MAX (each with :COUNT for a grid) or cat:A,B,... Each trial
    /// trains the plan with its own values (its plan.json and digest record them), a plan
    /// outside any proofs' family: a search runs with --unqualified. Repeatable.
    #[arg(long = "hparam", value_name = "SECTION.FIELD=SPEC")]
    pub(crate) hparams: Vec<hr_config::SearchedField>,
    /// The searcher of the --hparam fields: random, grid or adaptive_asha (trials trained rung
    /// by rung, the best promoted and resumed from their checkpoints), ranked by the loss a
    /// trial reports when its operation completes.
    #[arg(long, value_name = "SEARCHER", requires = "hparams")]
    pub(crate) searcher: Option<hr_config::SearchKind>,
    /// Trials of a random or adaptive_asha search.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(crate) max_trials: u64,
    /// GPUs of each trial, one rank each (data-parallel, with --device cuda): the entrypoint
    /// starts `hessian-recipes launch --` before `managed-training`, and the plan's
    /// parallel.shards must be a multiple. The budget counts every GPU's seconds.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub(crate) slots: usize,
    #[command(flatten)]
    pub(crate) run: ManagedRunArgs,
}

/// The limits and admission of a managed run (`managed-training`, and `managed prepare`, which
/// verifies the proofs now and names them in the entrypoint, which verifies them again).
#[derive(Debug, Args)]
pub(crate) struct ManagedRunArgs {
    /// Wall-clock limit in seconds, counted from the run's first start; pause, preemption and
    /// restarts never renew it.
    #[arg(long)]
    pub(crate) max_wall_seconds: u64,
    /// Device-seconds the run may use over all its allocations, every GPU's seconds counted
    /// (default: eight hours on each of the trial's GPUs).
    #[arg(long)]
    pub(crate) gpu_budget_seconds: Option<u64>,
    /// The qualification of this run (`cargo xtask qualify BACKEND`'s output: native/proof.json
    /// and managed/managed-proof.json), required for plans longer than four steps: both proofs
    /// are re-verified and must be equal, of this backend, plan family and binary.
    #[arg(long, conflicts_with = "unqualified")]
    pub(crate) proofs: Option<PathBuf>,
    /// Run a plan longer than four steps without proofs; recorded in allocations.jsonl.
    #[arg(long)]
    pub(crate) unqualified: bool,
}

impl ManagedRunArgs {
    /// The device-seconds budget of a run on `gpus` GPUs: `--gpu-budget-seconds`, else eight
    /// hours on each.
    pub(crate) fn gpu_budget(&self, gpus: usize) -> u64 {
        self.gpu_budget_seconds
            .unwrap_or_else(|| 28_800 * u64::try_from(gpus.max(1)).unwrap_or(u64::MAX / 28_800))
    }

    /// Both limits at least 1 and, for `plan` on `target`, proofs that admit it or an explicit
    /// `--unqualified` (`hr_qualify::gate::require`).
    pub(crate) fn admit(
        &self,
        plan: &hr_plan::Plan,
        source: &hr_seal::SourceBinding,
        target: &hr_qualify::gate::Target<'_>,
    ) -> anyhow::Result<()> {
        if self.max_wall_seconds == 0 || self.gpu_budget_seconds == Some(0) {
            return Err(crate::Refused(
                "--max-wall-seconds and --gpu-budget-seconds must be at least 1".to_owned(),
            )
            .into());
        }
        hr_qualify::gate::require(
            plan,
            self.proofs.as_deref(),
            self.unqualified,
            source,
            target,
        )?;
        Ok(())
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum ManagedTrialKind {
    /// The deterministic eight-step CPU fixture: one training metric and one sealed checkpoint
    /// per step, preemption honoured (publish, receipt, ack, exit 0), exact restore. No GPU.
    Cpu,
}

#[derive(Debug, Args)]
pub(crate) struct DevmasterArgs {
    /// Address to listen on, e.g. 127.0.0.1:8080 (port 0 picks a free port). Loopback unless a
    /// --password-file is given.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: std::net::SocketAddr,
    /// A file holding the password both users (`determined`, `admin`) then sign in with
    /// (trailing newline ignored). Without it they have a fresh Determined master's empty
    /// passwords and only a loopback --listen is allowed. Without --tls-cert requests travel as
    /// plain HTTP: use another address only on a network you trust.
    #[arg(long)]
    pub(crate) password_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM: the master's certificate, then the CA
    /// certificates that issued it). Trials get it as DET_MASTER_CERT_FILE, as on a TLS master;
    /// clients trust it with DET_MASTER_CERT_FILE=FILE (det and hessian-recipes alike).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert's first certificate.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// GPU slots a trial may ask for: an experiment whose `resources.slots_per_trial` is larger
    /// is refused at create, naming the field (trials run as processes here, sharing whatever
    /// this machine has). Leaving it unset, as Determined's default of one does, is not refused.
    #[arg(long, default_value_t = 0)]
    pub(crate) slots: u32,
    /// Folder for the master's state, trial work folders and default checkpoint storage.
    #[arg(long)]
    pub(crate) state_dir: PathBuf,
    /// Seconds a preempted allocation may take to exit before it is killed (upstream: 3600).
    #[arg(long, default_value_t = 3600)]
    pub(crate) preemption_timeout_seconds: u64,
    /// Append every request's method, path and body (never headers or tokens; passwords
    /// redacted) to this JSONL file (mode 0600), e.g. to capture what a real client sends.
    #[arg(long)]
    pub(crate) record_requests: Option<PathBuf>,
}

impl DevmasterArgs {
    /// The password of --password-file, if given.
    pub(crate) fn password(&self) -> anyhow::Result<Option<String>> {
        self.password_file
            .as_ref()
            .map(|path| {
                std::fs::read_to_string(path)
                    .map(|text| text.trim_end_matches(['\r', '\n']).to_owned())
                    .map_err(|e| {
                        crate::Refused(format!("--password-file {}: {e}", path.display())).into()
                    })
            })
            .transpose()
    }
}

#[derive(Debug, Args)]
pub(crate) struct ManagedTrainingArgs {
    /// The plan (experiment-plan.json), on a path the trial container sees.
    #[arg(long)]
    pub(crate) plan: PathBuf,
    /// The environment backend; must be the plan's `environment.backend`.
    #[arg(long, value_enum)]
    pub(crate) backend: PlanBackend,
    /// The Python of the environment service (openenv, nemo); replaces the plan's
    /// `environment.python`. Refused for the fixture backend, which starts no service.
    #[arg(long)]
    pub(crate) service_python: Option<PathBuf>,
    /// Backend.
    #[arg(long, value_enum, default_value_t = crate::backend::DeviceKind::Cpu)]
    pub(crate) device: crate::backend::DeviceKind,
    #[command(flatten)]
    pub(crate) run: ManagedRunArgs,
    #[command(flatten)]
    pub(crate) signing: crate::keys::SigningArgs,
    #[command(flatten)]
    pub(crate) trust: crate::keys::TrustArgs,
}

/// A plan's environment backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PlanBackend {
    /// The built-in fixture tasks (no service).
    Fixture,
    /// An OpenEnv server.
    Openenv,
    /// A NeMo Gym resources server.
    Nemo,
    /// JSON-lines prompts scored by built-in rewards (no service).
    Dataset,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Render every template of a profile into a folder (beside what is there, over nothing).
    Render {
        /// `jaif` (the shared cluster) or `local` (this machine, paths under <root>/runs).
        #[arg(long, env = "HR_PROFILE")]
        profile: hr_config::ProfileName,
        /// Output folder (`--out-dir` is the older name); other files in it stay, and a file of
        /// the profile's that is there with other content is refused, nothing written.
        #[arg(long, alias = "out-dir")]
        output: PathBuf,
        /// The checkout the `local` profile points at (default: the current folder).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Validate config files against Determined 0.35's schemas and our rules. Exits 0 when all
    /// are valid, 2 otherwise, printing each problem with its field and fix.
    Check {
        /// `experiment`, `command` or `shell`; by default a file with a `searcher` is an
        /// experiment, one named *shell.yaml a shell, any other a command.
        #[arg(long)]
        kind: Option<hr_config::ConfigKind>,
        /// The files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print one JSON object per file (`file`, `kind`, `ok`, `problems` or `error`), one
        /// per line, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Before a submission: check the master (version 0.35.x, sign-in, the profile's workspace,
    /// project and resource pool, and what the pool offers) and this machine (the shared mount;
    /// with --config, the binary it runs, built with cuda when it runs --device cuda, its plan,
    /// service venv and proofs). Prints a checklist; exit 0 when nothing failed, 1 otherwise.
    Preflight(PreflightArgs),
    /// Print the bounded `det command run` line for any program, e.g. the TRL comparison script
    /// or a native GPU qualification: `cluster command --slots 1 --output runs/trl-pilot-01 --
    /// python3 scripts/trl_grpo_cpu.py --model-dir MODEL --lora --device cuda` (a Python that
    /// has TRL and PEFT; `cargo xtask bench grpo --vs-trl` makes one).
    Command(CommandArgs),
    /// Print the bounded `det command run` line that runs this binary on the cluster's CPU
    /// auxiliary capacity, e.g. `cluster cpu-command --output runs/jaif-cpu-fixture-01 -- demo`.
    /// The output folder is appended as `--output`; an existing one is refused.
    CpuCommand {
        /// The run's output folder, relative to the checkout (e.g. `runs/NAME`).
        #[arg(long)]
        output: PathBuf,
        /// Wall-clock limit in seconds before TERM (KILL follows 30 s later).
        #[arg(long, default_value_t = 900)]
        timeout_seconds: u64,
        /// The subcommand and arguments to run, after `--`.
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct CommandArgs {
    /// GPUs for the command: 0 runs on the pool's CPU auxiliary capacity with GPUs hidden
    /// (<profile>-cpu-command.yaml); N runs on N GPUs (<profile>-gpu-command.yaml, and
    /// `--config resources.slots=N` beyond one).
    #[arg(long, default_value_t = 0)]
    pub(crate) slots: u32,
    /// The fresh folder under runs/ (relative to the checkout) the command makes first and keeps
    /// the program's output in (command.log); each `{output}` in the arguments becomes it.
    #[arg(long)]
    pub(crate) output: PathBuf,
    /// Wall-clock limit in seconds before TERM (KILL follows 30 s later).
    #[arg(long, default_value_t = 3600)]
    pub(crate) timeout_seconds: u64,
    /// `jaif` (the shared cluster's checkout and workspace) or `local` (--root, no workspace).
    #[arg(long, env = "HR_PROFILE", default_value = "jaif")]
    pub(crate) profile: hr_config::ProfileName,
    /// The checkout the `local` profile points at (default: the current folder).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// The program (relative to the checkout, or absolute) and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub(crate) args: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct PreflightArgs {
    /// The master: http(s)://HOST:PORT, or HOST:PORT for http, as `det` reads DET_MASTER.
    /// Sign-in and TLS as `det`: DET_USER_TOKEN, the token `det user login` cached, or
    /// DET_USER/DET_PASS; DET_MASTER_CERT_FILE and DET_MASTER_CERT_NAME.
    #[arg(long, env = "DET_MASTER")]
    pub(crate) master: String,
    /// `jaif` (workspace JAIF, project 363, pool 42_Compute, the shared mount) or `local`
    /// (names none of them: give --workspace, --project-id, --pool to check some).
    #[arg(long, env = "HR_PROFILE", default_value = "jaif")]
    pub(crate) profile: hr_config::ProfileName,
    /// The checkout the `local` profile points at (default: the current folder).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// The workspace to look for instead of the profile's.
    #[arg(long)]
    pub(crate) workspace: Option<String>,
    /// The project id to look for instead of the profile's.
    #[arg(long)]
    pub(crate) project_id: Option<i32>,
    /// The resource pool to look for instead of the profile's.
    #[arg(long)]
    pub(crate) pool: Option<String>,
    /// The experiment config you will submit (e.g. cluster/determined/jaif-managed-nemo-main.yaml):
    /// it must pass `cluster check`; its bind mounts, binary, plan and the files the plan reads,
    /// service venv and proofs (which must hold) must exist here, under one of its bind mounts;
    /// its slots_per_trial must fit the pool.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Print one JSON object (`master`, `ok`, `checks`: name, status ok|fail|skip, detail).
    #[arg(long)]
    pub(crate) json: bool,
}
