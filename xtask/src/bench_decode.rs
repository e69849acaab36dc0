//! `cargo xtask bench decode [--device cpu|vulkan|cuda]`: what one decode token costs the
//! policy, as counts that do not depend on the machine (kernel launches per decoder layer and
//! outside the layers, device-to-host reads and the values they carry) and the time it took.
//! `hessian-recipes generate` samples 4 prompts × 4 and × 12 new tokens (end-of-turn ignored,
//! temperature 1) on tiny random models of 2 and 4 layers; its summary line counts the reads
//! (`hr_policy::host_reads`) and the launches (cubecl's launch spans); the differences are one
//! decode token's, prefill excluded. Writes `docs/bench/decode-DEVICE.md`. CI's vulkan phase
//! checks the counts against [`LAUNCHES_PER_LAYER_CEILING`] and [`READS_PER_TOKEN_CEILING`].

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::bench_trl::{cpu_name, measured_commit, publish};
use crate::conformance::target_dir;

/// The most kernel launches one decoder layer may make per decode token on a GPU backend (CI
/// fails above it). Measured on lavapipe (tiny llama, no adapters, f32): about 68 before
/// fusion (141 a token on 2 layers), 43 with it, 35 with RoPE's halves swapped by one flip and
/// the KV cache written in place; the GPU decode path's goal is 15.
pub(crate) const LAUNCHES_PER_LAYER_CEILING: f64 = 35.0;
/// The most device-to-host reads per decode token: the logits, sampled on the host (goal: 0,
/// only the drawn token ids).
pub(crate) const READS_PER_TOKEN_CEILING: f64 = 1.0;

/// The two model depths and the two generation lengths whose differences isolate one layer's
/// and one decode token's cost.
const LAYERS: [usize; 2] = [2, 4];
const NEW_TOKENS: [usize; 2] = [4, 12];
const PROMPTS: [&str; 4] = [
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

/// Runs `generate` of `new` tokens per prompt with `bin` on `device`; its summary.
fn generate(bin: &Path, model: &Path, device: &str, new: usize) -> Result<Summary> {
    let mut cmd = Command::new(bin);
    cmd.arg("generate").arg("--model").arg(model);
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

/// Measures one decode token's cost with `bin` on `device`.
pub(crate) fn measure(root: &Path, bin: &Path, device: &str) -> Result<DecodeCost> {
    let mut per_token = Vec::new();
    for layers in LAYERS {
        let model = model(root, layers);
        let [short, long] = NEW_TOKENS.map(|n| generate(bin, &model, device, n));
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

/// The table of `cost` measured on `device`.
pub(crate) fn table(device: &str, cost: &DecodeCost) -> String {
    format!(
        "# One decode token on `{device}` ({})\n\n\
         `cargo xtask bench decode --device {device}` at {} on {}: tiny random llama models of \
         {} and {} layers (hidden 32, 4 heads, 2 KV heads, f32, no adapters), {} prompts, the \
         difference between {} and {} new tokens per prompt. Launches and reads are counts, \
         the same on every run; the time is this machine's.\n\n\
         | per decode token | value |\n|---|---|\n\
         | kernel launches per decoder layer | {:.1} |\n\
         | kernel launches outside the layers | {:.1} |\n\
         | device-to-host reads | {:.1} |\n\
         | values read | {:.0} |\n\
         | ms per decode step ({} layers) | {:.1} |\n",
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
        cost.launches_per_layer,
        cost.launches_outside,
        cost.reads,
        cost.values,
        LAYERS[1],
        cost.ms,
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
    let cost = measure(root, &bin, &device)?;
    publish(
        root,
        &format!("decode-{device}.md"),
        &table(&device, &cost),
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
