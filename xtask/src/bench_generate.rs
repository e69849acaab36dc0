//! `cargo xtask bench generate`: our batched sampling (`hessian-recipes generate`) against
//! transformers' `model.generate` (`scripts/hf_generate_bench.py`, in the TRL bench's venv) on
//! the same model folder, prompts and lengths, one after the other in one invocation: every
//! prompt gets exactly `--new-tokens` tokens (end-of-turn ignored on both sides), temperature 1,
//! the chat template on both sides. Prints and writes `docs/bench/generate-MODEL.md`: new
//! tokens/s of the generation call and each process's peak RSS.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::bench_trl::{
    Model, TrlSetup, cpu_name, measured_commit, positive, publish, read_peak_rss, under_rss_probe,
};
use crate::{run, timestamped};

/// The questions of the batch (cycled to `--prompts`): the bench's arithmetic prompt shape.
const QUESTIONS: &[&str] = &[
    "What is 3 + 4?",
    "What is 12 + 30?",
    "Explain in one paragraph why the sky is blue.",
    "Write a short poem about the sea.",
];

struct Options {
    model: Model,
    prompts: usize,
    new_tokens: usize,
    threads: usize,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        model: Model::Smollm2,
        prompts: 32,
        new_tokens: 128,
        threads: 2,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--model" => o.model = Model::parse(it.next())?,
            "--prompts" => o.prompts = positive(flag, it.next())?,
            "--new-tokens" => o.new_tokens = positive(flag, it.next())?,
            "--threads" => o.threads = positive(flag, it.next())?,
            other => bail!(
                "bench generate: unknown argument {other:?}: use --model tiny|smollm2, \
                 --prompts N, --new-tokens N, --threads N"
            ),
        }
    }
    Ok(o)
}

/// One side's generation call.
struct Side {
    tokens: f64,
    seconds: f64,
    peak_rss_kib: u64,
}

/// `cargo xtask bench generate [...]`.
pub(crate) fn run_task(root: &Path, args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let commit = measured_commit();
    let setup = TrlSetup::prepare(root, o.model.name())?;
    let model = o.model.folder(&setup.models, &setup.binary)?;
    let work = root
        .join("target/bench-generate")
        .join(timestamped(o.model.name()));
    std::fs::create_dir_all(&work)?;
    let prompts: Vec<&str> = QUESTIONS.iter().copied().cycle().take(o.prompts).collect();
    let prompts_file = work.join("prompts.json");
    std::fs::write(&prompts_file, serde_json::to_string(&prompts)?)?;

    eprintln!("bench: hessian-recipes generate");
    let mut ours = Command::new(&setup.binary);
    ours.arg("generate")
        .arg("--model")
        .arg(&model)
        .args(["--max-new-tokens", &o.new_tokens.to_string()])
        .args(["--temperature", "1", "--ignore-eos", "--json"])
        .env("RAYON_NUM_THREADS", o.threads.to_string());
    for p in &prompts {
        ours.args(["--prompt", p]);
    }
    let (ours_out, ours_log) = (work.join("ours.jsonl"), work.join("ours.log"));
    let rss = measured(
        &setup.python,
        &ours,
        &work.join("ours"),
        &ours_out,
        Some(&ours_log),
    )?;
    let ours = our_side(&ours_out, &ours_log, rss, o.new_tokens * o.prompts)?;

    eprintln!("bench: transformers generate");
    let mut theirs = Command::new(&setup.python);
    theirs
        .arg(root.join("scripts/hf_generate_bench.py"))
        .arg("--model")
        .arg(&model)
        .arg("--prompts")
        .arg(&prompts_file)
        .args(["--max-new-tokens", &o.new_tokens.to_string()])
        .args(["--threads", &o.threads.to_string()]);
    let theirs_out = work.join("transformers.json");
    let rss = measured(
        &setup.python,
        &theirs,
        &work.join("transformers"),
        &theirs_out,
        None,
    )?;
    let line: Value = serde_json::from_str(std::fs::read_to_string(&theirs_out)?.trim())
        .with_context(|| format!("{} holds no result line", theirs_out.display()))?;
    let number = |k: &str| {
        line[k]
            .as_f64()
            .with_context(|| format!("no {k:?} in {line}"))
    };
    let theirs = Side {
        tokens: number("tokens")?,
        seconds: number("seconds")?,
        peak_rss_kib: rss,
    };
    let table = render(&o, &commit, &ours, &theirs, &line["versions"])?;
    publish(
        root,
        &format!("generate-{}.md", o.model.name()),
        &table,
        &work,
    )
}

/// Runs `cmd` with its stdout in `out` (and stderr in `log`), returning its peak RSS (KiB),
/// which the probe writes to `<stem>.rss`.
fn measured(
    python: &Path,
    cmd: &Command,
    stem: &Path,
    out: &Path,
    log: Option<&Path>,
) -> Result<u64> {
    let rss = stem.with_extension("rss");
    let mut wrapped = under_rss_probe(python, cmd, &rss);
    wrapped.stdout(Stdio::from(std::fs::File::create(out)?));
    if let Some(log) = log {
        wrapped.stderr(Stdio::from(std::fs::File::create(log)?));
    }
    run(wrapped)?;
    read_peak_rss(&rss)
}

/// Our side: the tokens in the JSON lines (each prompt's must be exactly `expected / prompts`)
/// and the seconds of the generation call from the summary line on stderr
/// (`cpu: loaded in … s; N tokens in S s (…)`).
fn our_side(out: &Path, log: &Path, peak_rss_kib: u64, expected: usize) -> Result<Side> {
    let mut tokens = 0;
    for line in std::fs::read_to_string(out)?.lines() {
        let row: Value = serde_json::from_str(line)?;
        tokens += row["tokens"].as_array().map_or(0, Vec::len);
    }
    if tokens != expected {
        bail!(
            "hessian-recipes generate sampled {tokens} tokens, not {expected}: see {}",
            out.display()
        );
    }
    let text = std::fs::read_to_string(log)?;
    let seconds = text
        .lines()
        .find_map(|l| {
            let rest = l.split(" tokens in ").nth(1)?;
            rest.split(" s ").next()?.parse::<f64>().ok()
        })
        .with_context(|| format!("no `N tokens in S s` summary in {}", log.display()))?;
    Ok(Side {
        tokens: tokens as f64,
        seconds,
        peak_rss_kib,
    })
}

fn render(
    o: &Options,
    commit: &str,
    ours: &Side,
    theirs: &Side,
    versions: &Value,
) -> Result<String> {
    use std::fmt::Write;
    let mut md = String::new();
    writeln!(
        md,
        "# Batched sampling: hessian-recipes and transformers, {} model\n",
        o.model.name()
    )?;
    writeln!(
        md,
        "Measured {} at commit {commit} with `cargo xtask bench generate --model {} --prompts {} \
         --new-tokens {} --threads {}` on {} ({} cores); torch {}, transformers {}.\n",
        crate::bench_trl::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        o.model.name(),
        o.prompts,
        o.new_tokens,
        o.threads,
        cpu_name(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        versions["torch"].as_str().unwrap_or("?"),
        versions["transformers"].as_str().unwrap_or("?"),
    )?;
    writeln!(
        md,
        "One batch of {} chat-formatted prompts, exactly {} new tokens each (end-of-turn ignored), \
         temperature 1, f32, KV cache, one `generate` call per side timed (model loading left \
         out); peak RSS is the whole process's.\n",
        o.prompts, o.new_tokens
    )?;
    writeln!(md, "| | new tokens | seconds | new tokens/s | peak RSS |")?;
    writeln!(md, "|---|---|---|---|---|")?;
    for (name, side) in [
        ("hessian-recipes generate", ours),
        ("transformers generate", theirs),
    ] {
        writeln!(
            md,
            "| {name} | {:.0} | {:.2} | **{:.1}** | {:.2} GiB |",
            side.tokens,
            side.seconds,
            side.tokens / side.seconds,
            crate::gib(side.peak_rss_kib)
        )?;
    }
    writeln!(
        md,
        "\n**Ratios (ours ÷ transformers): new tokens/s {:.2}×, peak RSS {:.2}×.**",
        (ours.tokens / ours.seconds) / (theirs.tokens / theirs.seconds),
        ours.peak_rss_kib as f64 / theirs.peak_rss_kib.max(1) as f64
    )?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_bad_ones_name_the_fix() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = parse(&args(&["--model", "tiny", "--new-tokens", "16"])).expect("parses");
        assert_eq!(
            (o.model.name(), o.prompts, o.new_tokens, o.threads),
            ("tiny", 32, 16, 2)
        );
        let e = parse(&args(&["--prompts", "0"])).err().expect("refused");
        assert!(e.to_string().contains("positive whole number"), "{e}");
        let e = parse(&args(&["--model", "gpt2"])).err().expect("refused");
        assert!(e.to_string().contains("use tiny or smollm2"), "{e}");
    }
}
