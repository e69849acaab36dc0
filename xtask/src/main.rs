//! See <https://github.com/matklad/cargo-xtask/>: the project's automation, run as
//! `cargo xtask <task>`. Plain std, anyhow, serde and regex, with the workspace's small synchronous
//! crates: the tiny-model writer of `hr-tests`, the plan and fixture
//! tasks of `hr-plan` and `hr-env`, `hr-files`, the proofs layout of `hr-proof` and the `hr-plot`
//! charts; so it builds in seconds
//! and never drags in burn, tokio or reqwest. It drives the binary and the Python references as
//! processes.
//!
//! Tasks: `ci` (the single gate CI runs), `tidy` (docs, layering and test-attribute rules),
//! `templates` (regenerate `cluster/determined/` from `hr-config`).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench_core;
mod bench_decode;
mod bench_generate;
mod bench_load;
mod bench_trl;
mod cache;
mod ci;
mod conformance;
mod conformance_families;
mod conformance_loss;
mod conformance_readme;
mod conformance_tensorboard;
mod conformance_tls;
mod cycles;
mod fetch_model;
mod python;
mod qualify_backend;
mod results;
mod review_list;
mod sizes;
mod tidy;
mod vulkan;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail, ensure};

/// A conformance suite: (passed, failed) of its checks.
type Suite = fn(&Path) -> Result<(u64, u64)>;

/// Every conformance suite, in the order CI runs them.
const SUITES: [(&str, Suite); 6] = [
    ("loss", conformance_loss::loss),
    ("det", conformance_tls::det),
    ("readme", conformance_readme::readme),
    ("envs", conformance::envs),
    ("families", conformance_families::families),
    ("tensorboard", conformance_tensorboard::tensorboard),
];

const HELP: &str = "\
cargo xtask <task>

Tasks:
  ci          the full gate, cheapest checks first: fmt, tidy, clippy, tests (what .ci/run runs)
  tidy        every .rs under crates/ opens with //!, only tensor crates depend on burn,
              tensor libraries never reach tokio/reqwest/axum, no module import cycles,
              no ignored tests or stubs, folder name = package name
  templates   regenerate cluster/determined/*.yaml from crates/hr-config (jaif profile)
  vulkan      ci's vulkan phase alone: the GPU path on Mesa's lavapipe (parity with the CPU,
              the native and managed qualifications, the gate)
  conformance loss
              the GRPO loss against TRL 1.16's own GRPOTrainer._compute_loss (every loss type
              x importance level with each variant): loss, gradients and metrics within 1e-6
  conformance det
              the devmaster against the real determined==0.35.0 client (det CLI, Python and
              Rust Core API trials); the client venv is cached outside the repo
  conformance readme
              docs/cluster.md's JAIF recipe as written, from a scratch checkout with HR_PROFILE=local,
              on a devmaster started as that guide starts it (--device cpu, the tiny model):
              qualification, the gated 256-step main run to COMPLETED, evaluate
  conformance envs
              the environment bridge against the real OpenEnv server (openenv-core and its
              echo_env template) and the real NeMo Gym example_single_tool_call server
              (nemo-gym 0.7.0 on CPython 3.13 built from Debian source); all cached outside
              the repo
  conformance families
              for each model family (llama, llama3 RoPE scaling, linear RoPE, qwen2 with and
              without windows, qwen3 tied and untied, mistral, gemma2, gemma3 in both
              spellings, phi3 with its fused projections) a tiny random model written by
              transformers in f32/bf16/f16 and both config spellings: greedy tokens equal and
              log-probs within 1e-4 of transformers; a 2-step LoRA run's RUN/adapter and an
              intermediate checkpoint's load with the real peft and match, and so do a
              layer-subset, a regex and two DoRA adapters; negative controls differ (the
              TRL bench's venv, cached outside the repo)
  conformance tensorboard
              the TensorBoard event files of a stopped and a resumed `train` run, read back
              by the real tensorboard 2.21.0 package: every metrics number as a
              `train/<name>` scalar at its step (its venv cached outside the repo)
  qualify cpu [--master URL] [--output runs/NAME]
              build the release binary and run the managed CPU lifecycle qualification
              (a local devmaster unless --master); writes runs/NAME/proof.json
  qualify native [--plan FILE] [--output runs/NAME] [--control skip-rng|drop-optimizer|cursor-off-by-one]
              the plan (default plans/native-tiny.json on the tiny test model) uninterrupted, then
              stopped after step 2 and resumed in a new process; writes runs/NAME/proof.json
  qualify openenv|nemo [--output runs/NAME] [--model DIR] [--master URL] [--device cpu|cuda]
                       [--dtype f32|f16|bf16] [--shards S] [--server DIR] [--app MODULE:APP]
                       [--tasks FILE --dev-tasks FILE --held-out-tasks FILE] [--prepare]
              the backend's four-step plan (tiny test model unless --model; its base in bf16
              with --device cuda unless --dtype says otherwise, else f32; --shards S: S
              shards of one prompt group each, for a main run on S GPUs or a divisor) against its real
              server (installed as for conformance envs), with the release binary's
              `qualify openenv|nemo`: qualify native (stopped after step 2, resumed in a new
              process) into runs/NAME/native/proof.json, then qualify managed (a trial on a
              devmaster unless --master, paused once step 1's metric shows, stopped at step 2,
              activated, restored from the receipt's checkpoint, compared with the native proof's
              uninterrupted run) into runs/NAME/managed/managed-proof.json; exit 0 only when both
              are equal. The server
              is the shipped example (echo_env; example_single_tool_call) unless --server names
              another folder (a NeMo Gym resources server; the folder holding an OpenEnv
              environment, whose app --app names) with --tasks rows (JSON lines: reset payloads
              or dataset rows). --prepare writes the plan, installs the servers, builds the
              binary, makes what the cluster templates name (the .venv-nemo-gym or .venv-openenv
              link to the service venv, runs/agent-gyms/jaif-managed-BACKEND-qual/ and -main/
              experiment-plan.json: the main plan is the same family, 256 steps, evaluated on
              the DEV and HELD-OUT rows; nothing existing is overwritten) and prints the two
              halves to run from a shell without a GPU (native as a bounded one-GPU command)
  qualify soak [--kills N] [--seed S] [--steps N] [--output runs/NAME]
              the kill soak on the tiny model with the release binary (defaults 20 kills,
              seed 1, 300 steps): a managed-training trial on a devmaster process whose worker
              is SIGKILLed at seeded random moments and whose master is SIGKILLed and restarted
              once; must complete with evidence equal to the native run (runs/NAME/soak/soak.json)
  bench seal [--size-mib N]
              seal and verify throughput of an N MiB snapshot (default 1024) next to sha256sum
  bench policy [--backend flex|ndarray] [--tiny-only]
              generation tokens/s and LoRA train-step time on the CPU for the tiny test model
              and SmolLM2-135M (as `hessian-recipes model fetch smollm2` fetches it); run
              twice: equal digests = bitwise determinism across processes
  bench grpo [--tiny-only]
              GRPO step time and tokens/s on the CPU for the tiny model and SmolLM2-135M
  bench grpo --vs-trl [--model tiny|smollm2] [--steps N] [--warmup N] [--rounds N] [--threads N]
              our `train` and TRL's GRPOTrainer + PEFT (pinned, in a cached venv) on the same
              weights and prompts, alternating: median s/step, completion tokens/s, the step's
              split, peak RSS and the ratios, and each phase's counted GFLOP/s against this
              machine's f32 GEMM rate; writes docs/bench/grpo-vs-trl-MODEL.md
  bench generate [--model tiny|smollm2] [--prompts N] [--new-tokens N] [--threads N]
              our batched sampling (`generate --ignore-eos`) against transformers'
              model.generate on the same model folder and chat prompts (defaults 32 prompts,
              128 new tokens each, 2 threads): new tokens/s and peak RSS; writes
              docs/bench/generate-MODEL.md
  bench decode [--device cpu|vulkan|cuda] [--binary PATH]
              one decode token's cost: kernel launches per decoder layer and outside them,
              device-to-host reads and their values (counts), ms per step; tiny random models
              of 2 and 4 layers, 4 and 12 new tokens, without adapters and through LoRA on
              q, k, v, o; writes docs/bench/decode-DEVICE.md
  results smollm2|smollm2-own-data [--steps N] [--learning-rate X] [--threads N] | --render WORK
              does GRPO learn on a real model? SmolLM2-135M-Instruct with LoRA (defaults 48
              steps, lr 2e-4, 2 threads), our `train` and TRL's GRPOTrainer + PEFT one after the
              other on the same rows, rewards and hyper-parameters, then `evaluate` (DEV
              selection, HELD-OUT base vs ours vs TRL's adapter, MGSM retention). smollm2: the
              arithmetic TRAIN split, TRL scoring with our final-number rule; smollm2-own-data:
              plans/smollm2-own-data.json (a JSON-lines dataset of chat messages), both sides
              scoring with plans/own-data/rewards.py. Writes docs/results/smollm2-arithmetic/ or
              docs/results/smollm2-own-data/ (--render rewrites it from a finished
              target/results/ folder without training again)
  bench core [--reports N] [--rounds N] [--pauses N]
              Core API metric reports/s and checkpoints/s of hr-core and Python determined.core
              0.35 against one devmaster, and `det experiment pause` -> acked and PAUSED
              latency; writes docs/bench/core.md
  bench load
              peak RSS while the release binary loads a random 0.5B model of Qwen2-0.5B's shape
              (bf16, written by transformers into the cache; one file and 300 MB shards) against
              the loaded f32 weights; writes docs/bench/load.md
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    std::env::set_current_dir(&root).with_context(|| format!("cd {}", root.display()))?;
    match args.first().map(String::as_str) {
        Some("ci") => ci::run(&root),
        Some("tidy") => tidy::run(&root),
        Some("templates") => templates(&root),
        Some("bench") => bench(&root, &args[1..]),
        Some("vulkan") => {
            let bin = debug_binaries(&root)?.join("hessian-recipes");
            let (passed, failed) = vulkan::phase(&root, &bin)?;
            println!("vulkan: {passed} passed, {failed} failed");
            ensure!(failed == 0 && passed > 0, "the vulkan phase failed");
            Ok(())
        }
        Some("results") => results::run_task(&root, &args[1..]),
        Some("python313") => {
            println!("{}", python::cpython313()?.display());
            Ok(())
        }
        Some("qualify") => match args.get(1).map(String::as_str) {
            Some("cpu") => qualify_cpu(&root, &args[2..]),
            Some("native") => qualify_native(&root, &args[2..], Binary::Release(&[])).map(|_| ()),
            Some(backend @ ("openenv" | "nemo")) => {
                qualify_backend::qualify_backend(&root, backend, &args[2..], Binary::Release(&[]))
                    .map(|_| ())
            }
            Some("soak") => qualify_soak(&root, &args[2..], Binary::Release(&[])),
            other => bail!(
                "unknown qualification {other:?}: available: cpu, native, openenv, nemo, soak\n\n{HELP}"
            ),
        },
        Some("conformance") => {
            let name = args.get(1).map(String::as_str);
            let Some((name, suite)) = SUITES.iter().find(|(n, _)| Some(*n) == name) else {
                bail!(
                    "unknown conformance suite {name:?}: available: loss, det, readme, envs, families, tensorboard\n\n{HELP}"
                )
            };
            let (passed, failed) = suite(&root)?;
            println!("conformance {name}: {passed} passed, {failed} failed");
            if failed > 0 || passed == 0 {
                bail!("{name} conformance failed");
            }
            Ok(())
        }
        Some("-h" | "--help" | "help") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => bail!("unknown task {other:?}\n\n{HELP}"),
    }
}

/// The workspace root: the parent of this crate's folder.
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// `cargo` as the one that runs us.
fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs a command, failing with its line when it fails.
fn run(mut cmd: Command) -> Result<()> {
    eprintln!("$ {}", describe(&cmd));
    let status = cmd
        .status()
        .with_context(|| format!("spawning {}", describe(&cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", describe(&cmd));
    }
    Ok(())
}

fn describe(cmd: &Command) -> String {
    let mut words = vec![cmd.get_program().to_string_lossy().into_owned()];
    words.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}

/// The features of CI's one build: both GPU-class backends compiled and linked, CUDA offline
/// (it runs on the CPU where there is no GPU), Vulkan to run on lavapipe in the `vulkan` phase.
pub(crate) const CI_FEATURES: &str = "hessian-recipes/cuda,hessian-recipes/vulkan";

/// Builds every debug binary and test of the workspace in one invocation, `hessian-recipes`
/// with [`CI_FEATURES`], and returns the folder of the binaries (`target/debug`). CI's build, its tests,
/// the conformance drivers and its qualifications all use this same selection, so Cargo
/// resolves features once (dev-dependencies included) and nothing is compiled twice: a narrower
/// `cargo build -p ...` resolves other features (e.g. `fastrand`'s, through `tempfile`) and
/// rebuilds the whole Burn stack.
pub(crate) fn debug_binaries(root: &Path) -> Result<PathBuf> {
    let mut build = cargo();
    build.args([
        "build",
        "--locked",
        "--workspace",
        "--bins",
        "--tests",
        "--features",
        CI_FEATURES,
    ]);
    run(build)?;
    Ok(conformance::target_dir(root).join("debug"))
}

/// Builds the release binary (with `features`) and returns its path.
fn release_binary(root: &Path, features: &[&str]) -> Result<PathBuf> {
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "--locked",
        "--package",
        "hessian-recipes",
    ]);
    if !features.is_empty() {
        build.args(["--features", &features.join(",")]);
    }
    run(build)?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    Ok(target.join("release/hessian-recipes"))
}

/// Which `hessian-recipes` binary a qualification runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Binary<'a> {
    /// The release build with these features (what users qualify).
    Release(&'a [&'a str]),
    /// CI's one debug build ([`debug_binaries`], with `cuda` and `vulkan`): the binary its tests drove.
    Ci,
    /// A binary already in place (the README rehearsal's `target/release/hessian-recipes`).
    At(&'a Path),
}

impl Binary<'_> {
    /// Builds it (if needed) and returns its path; `cuda` adds that feature to a release build.
    pub(crate) fn path(self, root: &Path, cuda: bool) -> Result<PathBuf> {
        match self {
            Binary::Release(features) => {
                let mut features = features.to_vec();
                if cuda && !features.contains(&"cuda") {
                    features.push("cuda");
                }
                release_binary(root, &features)
            }
            Binary::Ci => Ok(debug_binaries(root)?.join("hessian-recipes")),
            Binary::At(path) => Ok(path.to_owned()),
        }
    }
}

/// KiB (what `getrusage` and `df -k` report) in GiB.
fn gib(kib: u64) -> f64 {
    kib as f64 / f64::from(1u32 << 20)
}

/// `PREFIX-<unix seconds>`, a default output folder name.
fn timestamped(prefix: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{prefix}-{secs}")
}

/// `cargo xtask qualify cpu [--master URL] [--output runs/NAME]`: release build, then the
/// binary's own `qualify cpu` (which copies itself into the output folder and runs from there).
pub(crate) fn qualify_cpu(root: &Path, args: &[String]) -> Result<()> {
    qualify_cpu_with(root, args, Binary::Release(&[]))
}

/// [`qualify_cpu`] with `binary` (CI qualifies the one debug build, with `cuda` and `vulkan`, on the CPU).
pub(crate) fn qualify_cpu_with(root: &Path, args: &[String], binary: Binary<'_>) -> Result<()> {
    let mut output = None;
    let mut master = None;
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--output" => output = rest.next().cloned(),
            "--master" => master = rest.next().cloned(),
            other => bail!(
                "qualify cpu: unknown argument {other:?}: use --output runs/NAME and/or --master URL"
            ),
        }
    }
    let output = output.unwrap_or_else(|| timestamped("runs/qualify-cpu"));
    let mut cmd = Command::new(binary.path(root, false)?);
    cmd.args(["qualify", "cpu", "--output", &output]);
    if let Some(m) = master {
        cmd.args(["--master", &m]);
    }
    run(cmd)
}

/// `cargo xtask qualify soak [--kills N] [--seed S] [--steps N] [--output runs/NAME]`: the kill
/// soak of a fixture plan (one checkpoint per step) on the tiny test model with `binary` (the
/// release build; CI's debug build in `ci`) (defaults: 20 kills, seed 1, 300 steps; a kill
/// lands at most 3 steps after each restore, so the plan outlasts the kills).
pub(crate) fn qualify_soak(root: &Path, args: &[String], binary: Binary<'_>) -> Result<()> {
    let (mut kills, mut seed, mut steps, mut output) =
        ("20".to_owned(), "1".to_owned(), 300u64, None);
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        let mut value = || {
            rest.next()
                .cloned()
                .with_context(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--kills" => kills = value()?,
            "--seed" => seed = value()?,
            "--steps" => steps = value()?.parse().context("--steps takes a number")?,
            "--output" => output = Some(value()?),
            other => bail!(
                "qualify soak: unknown argument {other:?}: use --kills N, --seed S, --steps N, --output runs/NAME"
            ),
        }
    }
    let output = root.join(output.unwrap_or_else(|| timestamped("runs/qualify-soak")));
    if output.exists() {
        bail!(
            "qualify soak: {} exists; give a fresh --output",
            output.display()
        );
    }
    std::fs::create_dir_all(&output)?;
    let environment = serde_json::json!({"backend": "fixture", "tasks": {"kind": "digits", "count": 8, "seed": 3}});
    let grpo = serde_json::json!({"tasks_per_step": 2, "num_generations": 4,
        "max_completion_length": 8, "max_turn_tokens": 8});
    let plan = conformance::training_plan(root, &output, "soak", &environment, &grpo, steps)?;
    let mut cmd = Command::new(binary.path(root, false)?);
    cmd.current_dir(root)
        .args(["qualify", "soak", "--plan"])
        .arg(&plan)
        .arg("--output")
        .arg(output.join("soak"))
        .args(["--kills", &kills, "--seed", &seed]);
    run(cmd)
}

/// `cargo xtask qualify native --plan FILE [--output runs/NAME] [--control C]`: writes the tiny
/// test model the example plan uses (when absent), builds `binary` and runs its `qualify
/// native`. Returns the proof's path and whether it said equal.
pub(crate) fn qualify_native(
    root: &Path,
    args: &[String],
    binary: Binary<'_>,
) -> Result<(PathBuf, bool)> {
    let mut plan = None;
    let mut output = None;
    let mut control = None;
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--plan" => plan = rest.next().cloned(),
            "--output" => output = rest.next().cloned(),
            "--control" => control = rest.next().cloned(),
            other => bail!(
                "qualify native: unknown argument {other:?}: use --plan FILE, --output runs/NAME, --control C"
            ),
        }
    }
    let plan = plan.unwrap_or_else(|| "plans/native-tiny.json".to_owned());
    let output = output.unwrap_or_else(|| timestamped("runs/qualify-native"));
    let tiny = root.join("target/tiny-model");
    if !tiny.join("config.json").is_file() {
        hr_tests::tiny_model::write_tiny_model(&tiny, &hr_tests::tiny_model::TinySpec::default());
    }
    let mut cmd = Command::new(binary.path(root, false)?);
    cmd.current_dir(root)
        .args(["qualify", "native", "--plan", &plan, "--output", &output]);
    if let Some(c) = &control {
        cmd.args(["--control", c]);
    }
    eprintln!("$ {}", describe(&cmd));
    let status = cmd.status().context("running qualify native")?;
    let proof = root.join(&output).join("proof.json");
    match status.code() {
        Some(0) => Ok((proof, true)),
        Some(1) if proof.is_file() => {
            if control.is_none() {
                bail!(
                    "qualify native: the resumed run differs; see {}",
                    proof.display()
                );
            }
            Ok((proof, false))
        }
        _ => bail!("qualify native failed ({status})"),
    }
}

/// `cargo xtask bench seal [--size-mib N]` and `bench policy [--backend flex|ndarray]
/// [--tiny-only]`: the benchmarks, in release mode.
fn bench(root: &Path, args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("seal") => {
            let mut cmd = cargo();
            cmd.args(["bench", "--package", "hr-seal", "--bench", "seal", "--"])
                .args(&args[1..]);
            run(cmd)
        }
        Some("policy") => {
            let mut features = None;
            let mut smollm2 = true;
            let mut rest = args[1..].iter();
            while let Some(a) = rest.next() {
                match (a.as_str(), rest.clone().next().map(String::as_str)) {
                    ("--backend", Some("flex")) => _ = rest.next(),
                    ("--backend", Some("ndarray")) => {
                        rest.next();
                        features = Some("bench-ndarray");
                    }
                    ("--tiny-only", _) => smollm2 = false,
                    _ => bail!(
                        "bench policy: unknown argument {a:?}: use --backend flex|ndarray and/or --tiny-only"
                    ),
                }
            }
            let mut cmd = cargo();
            cmd.args(["bench", "--package", "hr-policy", "--bench", "policy"]);
            if let Some(f) = features {
                cmd.args(["--features", f]);
            }
            if smollm2 {
                cmd.env(
                    "HR_SMOLLM2_DIR",
                    fetch_model::smollm2(&release_binary(root, &[])?)?,
                );
            }
            run(cmd)
        }
        Some("core") => bench_core::run_task(root, &args[1..]),
        Some("generate") => bench_generate::run_task(root, &args[1..]),
        Some("decode") => bench_decode::run_task(root, &args[1..]),
        Some("load") => bench_load::run_task(root, &args[1..]),
        Some("grpo") if args[1..].iter().any(|a| a == "--vs-trl") => {
            let rest: Vec<String> = args[1..]
                .iter()
                .filter(|a| *a != "--vs-trl")
                .cloned()
                .collect();
            bench_trl::run_task(root, &rest)
        }
        Some("grpo") => {
            let mut cmd = cargo();
            cmd.args(["bench", "--package", "hr-grpo", "--bench", "grpo"]);
            if args.get(1).map(String::as_str) != Some("--tiny-only") {
                cmd.env(
                    "HR_SMOLLM2_DIR",
                    fetch_model::smollm2(&release_binary(root, &[])?)?,
                );
            }
            run(cmd)
        }
        other => {
            bail!(
                "unknown benchmark {other:?}: available: seal, policy, grpo, generate, core, load\n\n{HELP}"
            )
        }
    }
}

/// Renders the jaif templates into a fresh folder with the real binary, then replaces the
/// committed set with it.
fn templates(root: &Path) -> Result<()> {
    let staging = root
        .join("target")
        .join(format!("xtask-templates-{}", std::process::id()));
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--quiet",
        "--package",
        "hessian-recipes",
        "--",
        "cluster",
        "render",
    ]);
    cmd.args(["--profile", "jaif", "--output"]).arg(&staging);
    run(cmd)?;
    let dest = root.join("cluster/determined");
    std::fs::create_dir_all(&dest)?;
    for entry in std::fs::read_dir(&dest)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml")
            && !staging.join(path.file_name().unwrap_or_default()).exists()
        {
            std::fs::remove_file(&path)?;
            println!("removed stale {}", path.display());
        }
    }
    for entry in std::fs::read_dir(&staging)? {
        let path = entry?.path();
        let target = dest.join(path.file_name().unwrap_or_default());
        std::fs::copy(&path, &target)?;
        println!("wrote {}", target.display());
    }
    std::fs::remove_dir_all(&staging)?;
    Ok(())
}
