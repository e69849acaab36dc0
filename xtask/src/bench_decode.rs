//! `cargo xtask bench decode [--device cpu|vulkan|cuda]`: what one decode token costs the
//! policy, as counts that do not depend on the machine (kernel launches per decoder layer and
//! outside the layers, device-to-host reads and the values they carry) and the time it took.
//! `hessian-recipes generate` samples 4 prompts × 4 and × 12 new tokens (end-of-turn ignored,
//! temperature 1) on tiny random models of 2 and 4 layers, without adapters and through a LoRA
//! adapter on q, k, v and o (one `train` step makes it); its summary line counts the reads
//! (`hr_policy::host_reads`) and the launches (cubecl's launch spans); the differences are one
//! decode token's, prefill excluded. Writes `docs/bench/decode-DEVICE.md`. CI's vulkan phase
//! checks the counts against [`CEILINGS`], [`READS_PER_TOKEN_CEILING`] and
//! [`VALUES_PER_ROW_CEILING`].

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::bench_trl::{cpu_name, measured_commit, publish};
use crate::conformance::target_dir;

/// The most kernel launches one decoder layer may make per decode token on a GPU backend, for
/// the base model and through LoRA on q, k, v and o (CI fails above them). Measured on lavapipe
/// (tiny llama, f32), without adapters: about 68 before fusion (141 a token on 2 layers), 43
/// with it, 35 with RoPE's halves swapped by one flip and the KV cache written in place;
/// through LoRA, 47 (three more per adapted projection), then 35 with the adapters folded into
/// the weights for sampling; 31 with every product `x·Wᵀ` (no transposed result to copy). The
/// GPU decode path's goal is 15 through LoRA.
pub(crate) const CEILINGS: [(&str, bool, f64); 2] = [("base", false, 31.0), ("LoRA", true, 31.0)];
/// The most device-to-host reads per decode token: one, of what was drawn.
pub(crate) const READS_PER_TOKEN_CEILING: f64 = 1.0;
/// The most values a GPU backend reads back per row per decode token: the token drawn on the
/// device and its log-probability, never the row's logits (1,056 values a row before).
pub(crate) const VALUES_PER_ROW_CEILING: f64 = 2.0;

/// The two model depths and the two generation lengths whose differences isolate one layer's
/// and one decode token's cost.
const LAYERS: [usize; 2] = [2, 4];
const NEW_TOKENS: [usize; 2] = [4, 12];
pub(crate) const PROMPTS: [&str; 4] = [
    "What is 3 + 4?",
    "Hi there",
    "Write a short poem about the sea.",
    "What is 12 + 30?",
];

/// One `generate` call's summary: seconds, host reads, values read, kernel launches.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Summary {
    seconds: f64,
    reads: f64,
    values: f64,
    launches: f64,
}

/// `… N tokens in S s (…); R host reads of V values, K kernel launches`.
fn parse_summary(stderr: &str) -> Option<Summary> {
    let line = stderr.lines().rev().find(|l| l.contains(" tokens in "))?;
    let number = |after: &str| -> Option<f64> {
        line.split(after)
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let before = |word: &str| -> Option<f64> {
        let at = line.find(word)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    Some(Summary {
        seconds: number(" tokens in ")?,
        reads: before(" host reads")?,
        values: number(" host reads of ")?,
        launches: before(" kernel launches")?,
    })
}

/// One decode token's cost on a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecodeCost {
    /// Kernel launches of one decoder layer.
    pub(crate) launches_per_layer: f64,
    /// Kernel launches outside the layers (embedding, final norm, head, sampling).
    pub(crate) launches_outside: f64,
    /// Device-to-host reads.
    pub(crate) reads: f64,
    /// Values those reads carry.
    pub(crate) values: f64,
    /// Milliseconds of one decode step of the deeper model.
    pub(crate) ms: f64,
}

/// Writes (once) the tiny random model of `layers` layers the bench decodes with.
fn model(root: &Path, layers: usize) -> PathBuf {
    let dir = target_dir(root).join(format!("bench-decode/tiny-{layers}-layers"));
    if !dir.join("config.json").is_file() {
        hr_tests::tiny_model::write_tiny_model(
            &dir,
            &hr_tests::tiny_model::TinySpec {
                layers,
                ..Default::default()
            },
        );
    }
    dir
}

/// The PEFT adapter (LoRA r2 on q, k, v and o, after one CPU training step on the fixture
/// tasks) `generate` samples through, as a GRPO rollout does; trained once beside `model`.
fn adapter(root: &Path, bin: &Path, model: &Path) -> Result<PathBuf> {
    let run = model.with_extension("lora");
    let adapter = run.join("adapter");
    if adapter.join("adapter_config.json").is_file() {
        return Ok(adapter);
    }
    // A run cut short before its adapter was written is made again.
    if run.exists() {
        std::fs::remove_dir_all(&run)?;
    }
    let environment = serde_json::json!({"backend": "fixture",
        "tasks": {"kind": "digits", "count": 4, "seed": 3}});
    let grpo = serde_json::json!({"tasks_per_step": 1, "num_generations": 2,
        "max_completion_length": 8, "max_turn_tokens": 8});
    let dir = model.parent().context("the model's folder")?;
    let name = format!(
        "{}-plan",
        run.file_stem().unwrap_or_default().to_string_lossy()
    );
    let plan = crate::conformance::training_plan(root, dir, &name, &environment, &grpo, 1)?;
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan)?)?;
    value["model"]["path"] = serde_json::json!(model);
    value["model"]["lora"]["targets"] = serde_json::json!(["q_proj", "k_proj", "v_proj", "o_proj"]);
    std::fs::write(&plan, serde_json::to_vec_pretty(&value)?)?;
    let out = Command::new(bin)
        .arg("train")
        .arg("--plan")
        .arg(&plan)
        .arg("--output")
        .arg(&run)
        .output()
        .context("training the bench's adapter")?;
    ensure!(
        out.status.success(),
        "training the bench's adapter failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(adapter)
}

/// Runs `generate` of `new` tokens per prompt with `bin` on `device` (through `adapter`, if
/// any); its summary.
fn generate(
    bin: &Path,
    model: &Path,
    adapter: Option<&Path>,
    device: &str,
    new: usize,
) -> Result<Summary> {
    let mut cmd = Command::new(bin);
    cmd.arg("generate").arg("--model").arg(model);
    if let Some(adapter) = adapter {
        cmd.arg("--adapter").arg(adapter);
    }
    for p in PROMPTS {
        cmd.args(["--prompt", p]);
    }
    cmd.args(["--max-new-tokens", &new.to_string(), "--ignore-eos"])
        .args(["--temperature", "1", "--seed", "3", "--device", device])
        .env_remove("RUST_LOG");
    let out = cmd.output().context("running generate")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "generate failed: {stderr}");
    parse_summary(&stderr).with_context(|| format!("no summary line in: {stderr}"))
}

/// Measures one decode token's cost with `bin` on `device`, through LoRA adapters on q, k, v
/// and o (as a GRPO rollout samples) when `lora`.
pub(crate) fn measure(root: &Path, bin: &Path, device: &str, lora: bool) -> Result<DecodeCost> {
    let mut per_token = Vec::new();
    for layers in LAYERS {
        let model = model(root, layers);
        let adapter = lora.then(|| adapter(root, bin, &model)).transpose()?;
        let [short, long] =
            NEW_TOKENS.map(|n| generate(bin, &model, adapter.as_deref(), device, n));
        let (short, long) = (short?, long?);
        let steps = (NEW_TOKENS[1] - NEW_TOKENS[0]) as f64;
        per_token.push(Summary {
            seconds: (long.seconds - short.seconds) / steps,
            reads: (long.reads - short.reads) / steps,
            values: (long.values - short.values) / steps,
            launches: (long.launches - short.launches) / steps,
        });
    }
    let (shallow, deep) = (per_token[0], per_token[1]);
    let launches_per_layer = (deep.launches - shallow.launches) / (LAYERS[1] - LAYERS[0]) as f64;
    Ok(DecodeCost {
        launches_per_layer,
        launches_outside: shallow.launches - launches_per_layer * LAYERS[0] as f64,
        reads: deep.reads,
        values: deep.values,
        ms: deep.seconds * 1e3,
    })
}

/// The table of the costs measured on `device`: the base model, and through LoRA adapters.
pub(crate) fn table(device: &str, base: &DecodeCost, lora: &DecodeCost) -> String {
    let row = |what: &str, f: &dyn Fn(&DecodeCost) -> String| {
        format!("| {what} | {} | {} |\n", f(base), f(lora))
    };
    format!(
        "# One decode token on `{device}` ({})\n\n\
         `cargo xtask bench decode --device {device}` at {} on {}: tiny random llama models of \
         {} and {} layers (hidden 32, 4 heads, 2 KV heads, f32), {} prompts, the difference \
         between {} and {} new tokens per prompt; without adapters, and through a LoRA r2 \
         adapter on q, k, v and o as a GRPO rollout samples. Launches and reads are counts, the \
         same on every run; the time is this machine's.\n\n\
         | per decode token | base | LoRA q,k,v,o |\n|---|---|---|\n{}{}{}{}{}",
        if device == "cpu" {
            "the CPU backend launches no kernels"
        } else {
            "fusion on, autotune off"
        },
        measured_commit(),
        cpu_name(),
        LAYERS[0],
        LAYERS[1],
        PROMPTS.len(),
        NEW_TOKENS[0],
        NEW_TOKENS[1],
        row("kernel launches per decoder layer", &|c| format!(
            "{:.1}",
            c.launches_per_layer
        )),
        row("kernel launches outside the layers", &|c| format!(
            "{:.1}",
            c.launches_outside
        )),
        row("device-to-host reads", &|c| format!("{:.1}", c.reads)),
        row("values read", &|c| format!("{:.0}", c.values)),
        row(
            &format!("ms per decode step ({} layers)", LAYERS[1]),
            &|c| format!("{:.1}", c.ms)
        ),
    )
}

/// `bench decode [--device D] [--binary PATH]`: by default CI's debug binary (deps optimised;
/// its `cuda` and `vulkan` backends), or a release binary given.
pub(crate) fn run_task(root: &Path, args: &[String]) -> Result<()> {
    const USAGE: &str = "bench decode: use --device cpu|vulkan|cuda and --binary PATH";
    let (mut device, mut binary) = ("vulkan".to_owned(), None);
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().context(USAGE)?;
        match flag.as_str() {
            "--device" if ["cpu", "vulkan", "cuda"].contains(&value.as_str()) => {
                device = value.clone()
            }
            "--binary" => binary = Some(PathBuf::from(value)),
            _ => bail!("{USAGE}"),
        }
    }
    let bin = match binary {
        Some(b) => b,
        None => crate::debug_binaries(root)?.join("hessian-recipes"),
    };
    let base = measure(root, &bin, &device, false)?;
    let lora = measure(root, &bin, &device, true)?;
    publish(
        root,
        &format!("decode-{device}.md"),
        &table(&device, &base, &lora),
        &target_dir(root).join("bench-decode"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_reads_back() {
        let line = "vulkan: loaded in 0.0 s; 24 tokens in 3.98 s (6.0 tokens/s); 12 host reads \
                    of 6336 values, 1065 kernel launches";
        assert_eq!(
            parse_summary(&format!("warning\n{line}\n")),
            Some(Summary {
                seconds: 3.98,
                reads: 12.0,
                values: 6336.0,
                launches: 1065.0
            })
        );
        assert_eq!(parse_summary("no summary"), None);
    }
}
