//! What the model wrote, kept where a researcher reads it: every step's completions, decoded,
//! with their prompt, each reward function's score, the advantage and the length (TRL's
//! `log_completions` table), appended to the run's `completions.jsonl.gz` as one gzip member
//! per step (`zcat`, `pandas.read_json(..., lines=True)` and Python's `gzip` read the whole
//! file). A start cuts the file back to the step it resumes from (and drops a member a crash
//! left torn), as it rewrites `metrics.jsonl`. Each text is kept up to [`MAX_TEXT_BYTES`], so a
//! step's member is bounded by its episode count.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;

use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use hr_files::IoResultExt;
use hr_grpo::StepReport;
use hr_policy::ChatTokenizer;
use serde::{Deserialize, Serialize};

use crate::TrainError;

/// The most bytes of a prompt or completion text a record keeps (cut on a character boundary;
/// the record's `cut` says so).
pub const MAX_TEXT_BYTES: usize = 16 * 1024;

/// The longest line a reader takes from the file (a record of two cut texts and its numbers is
/// far shorter); a longer one ends the reading there.
const MAX_LINE_BYTES: u64 = 4 * MAX_TEXT_BYTES as u64 + 64 * 1024;

/// One completion of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRecord {
    /// The 1-based step that sampled it.
    pub step: u64,
    /// Its task's id.
    pub task_id: String,
    /// The prompt as the model saw it, decoded with the chat template's special tokens.
    pub prompt: String,
    /// What the policy wrote (its turns' texts, one after the other).
    pub completion: String,
    /// Each reward function's score where the environment names them; a function that
    /// returned `None` for it is absent.
    pub rewards: BTreeMap<String, f64>,
    /// The reward the advantage was computed from (the weighted sum; 0 when nothing applied).
    pub reward: f64,
    /// False when no reward function applied (TRL's NaN row: advantage 0).
    pub scorable: bool,
    /// Its advantage.
    pub advantage: f64,
    /// Policy tokens in the completion.
    pub length: usize,
    /// Whether a token limit cut its last turn (TRL's clipped completion).
    pub clipped: bool,
    /// Whether the prompt or the completion was cut to [`MAX_TEXT_BYTES`] here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// The completions of a step's report, decoded (each task's prompt once, shared by its group).
pub(crate) fn records(
    report: &StepReport,
    tokenizer: &ChatTokenizer,
) -> Result<Vec<CompletionRecord>, TrainError> {
    let mut prompts: BTreeMap<&[u32], String> = BTreeMap::new();
    let mut out = Vec::with_capacity(report.episodes.len());
    for (e, advantage) in report.episodes.iter().zip(&report.advantages) {
        if !prompts.contains_key(e.prompt.as_slice()) {
            let text = tokenizer.decode_with_special(&e.prompt)?;
            prompts.insert(&e.prompt, text);
        }
        let (prompt, prompt_cut) = cut(&prompts[e.prompt.as_slice()]);
        let (completion, completion_cut) = cut(&e.text);
        out.push(CompletionRecord {
            step: report.step + 1,
            task_id: e.task_id.clone(),
            prompt: prompt.to_owned(),
            completion: completion.to_owned(),
            rewards: e.reward_parts.clone(),
            reward: e.reward,
            scorable: e.scorable,
            advantage: *advantage,
            length: e.policy_mask.iter().filter(|m| **m).count(),
            clipped: e.truncated,
            cut: prompt_cut || completion_cut,
        });
    }
    Ok(out)
}

/// `text` up to [`MAX_TEXT_BYTES`] on a character boundary, and whether it was cut.
fn cut(text: &str) -> (&str, bool) {
    if text.len() <= MAX_TEXT_BYTES {
        return (text, false);
    }
    let end = (0..=MAX_TEXT_BYTES)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    (&text[..end], true)
}

/// Appends one step's records to `path` as one gzip member, then syncs it.
pub(crate) fn append(path: &Path, records: &[CompletionRecord]) -> Result<(), TrainError> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    for r in records {
        serde_json::to_writer(&mut gz, r)
            .map_err(std::io::Error::from)
            .and_then(|()| gz.write_all(b"\n"))
            .at("compress", path)?;
    }
    let member = gz.finish().at("compress", path)?;
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .at("open", path)?;
    file.write_all(&member)
        .and_then(|()| file.sync_data())
        .at("write", path)?;
    Ok(())
}

/// Cuts `path` back to the records of steps up to `last_step` (none for 0), rewriting it
/// atomically; what follows a torn member or a line that is not a record is dropped with it.
/// Nothing to do when the file is absent.
pub(crate) fn keep_through(path: &Path, last_step: u64) -> Result<(), TrainError> {
    let Some(lines) = complete_lines(path)? else {
        return Ok(());
    };
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    for line in lines {
        let Ok(StepOf { step }) = serde_json::from_slice(&line) else {
            break;
        };
        if step > last_step {
            break;
        }
        gz.write_all(&line)
            .and_then(|()| gz.write_all(b"\n"))
            .at("compress", path)?;
    }
    let bytes = gz.finish().at("compress", path)?;
    hr_files::write_atomic(path, &bytes)?;
    Ok(())
}

/// The records of the last step in `path` (none when it is absent or holds none readable).
pub fn last_step(path: &Path) -> Result<Vec<CompletionRecord>, hr_files::IoError> {
    let mut out: Vec<CompletionRecord> = Vec::new();
    for line in complete_lines(path)?.unwrap_or_default() {
        let Ok(record) = serde_json::from_slice::<CompletionRecord>(&line) else {
            continue;
        };
        if out.first().is_some_and(|r| r.step != record.step) {
            out.clear();
        }
        out.push(record);
    }
    Ok(out)
}

/// Rows of [`table`]: the first this many completions of a step.
const TABLE_ROWS: usize = 16;

/// Characters of a prompt (its end, where the question is) or a completion (its start) a
/// [`table`] cell shows.
const CELL_CHARS: usize = 400;

/// A step's completions as a markdown table for TensorBoard's text view, as TRL's
/// `log_completions` table: task, prompt, completion, each reward function, reward, advantage
/// (the first [`TABLE_ROWS`], each text cut to [`CELL_CHARS`]).
pub(crate) fn table(records: &[CompletionRecord]) -> String {
    let names: std::collections::BTreeSet<&str> = records
        .iter()
        .flat_map(|r| r.rewards.keys().map(String::as_str))
        .collect();
    let mut md = format!(
        "| task | prompt | completion |{} reward | advantage |\n|---|---|---|{}---|---|\n",
        names
            .iter()
            .map(|n| format!(" {} |", cell(n)))
            .collect::<String>(),
        "---|".repeat(names.len()),
    );
    for r in records.iter().take(TABLE_ROWS) {
        let chars = r.prompt.chars().count();
        let prompt: String = r
            .prompt
            .chars()
            .skip(chars.saturating_sub(CELL_CHARS))
            .collect();
        let completion: String = r.completion.chars().take(CELL_CHARS).collect();
        let rewards: String = names
            .iter()
            .map(|n| match r.rewards.get(*n) {
                Some(v) => format!(" {v:.3} |"),
                None => " - |".to_owned(),
            })
            .collect();
        md.push_str(&format!(
            "| {} | {}{} | {}{} |{rewards} {:.3} | {:.3} |\n",
            cell(&r.task_id),
            if chars > CELL_CHARS { "…" } else { "" },
            cell(&prompt),
            cell(&completion),
            if r.completion.chars().count() > CELL_CHARS {
                "…"
            } else {
                ""
            },
            r.reward,
            r.advantage,
        ));
    }
    if records.len() > TABLE_ROWS {
        md.push_str(&format!(
            "\n{} of {} completions; all are in completions.jsonl.gz.\n",
            TABLE_ROWS,
            records.len()
        ));
    }
    md
}

/// Text as one markdown table cell: shown literally (HTML and the cell separator escaped), its
/// line breaks kept.
fn cell(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
        .replace('\n', "<br>")
}

/// Only a record's step, for cutting the file without reading its numbers (a NaN is written
/// as `null`, which an `f64` field would refuse).
#[derive(Deserialize)]
struct StepOf {
    step: u64,
}

/// The complete lines of `path`'s members, in order, up to the first damage (a torn member, a
/// line longer than [`MAX_LINE_BYTES`] or without its newline); `None` when it is absent.
fn complete_lines(path: &Path) -> Result<Option<Vec<Vec<u8>>>, hr_files::IoError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(hr_files::IoError::new("open", path, e)),
    };
    let mut reader = BufReader::new(MultiGzDecoder::new(BufReader::new(file)));
    let mut lines = Vec::new();
    loop {
        let mut line = Vec::new();
        match (&mut reader)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => break,
            Ok(_) if line.last() != Some(&b'\n') => break,
            Ok(_) => {
                line.pop();
                lines.push(line);
            }
        }
    }
    Ok(Some(lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64, task: &str, reward: f64) -> CompletionRecord {
        CompletionRecord {
            step,
            task_id: task.to_owned(),
            prompt: "<|user|>2+2?".to_owned(),
            completion: "4".to_owned(),
            rewards: BTreeMap::from([("accuracy".to_owned(), reward)]),
            reward,
            scorable: true,
            advantage: reward - 0.5,
            length: 1,
            clipped: false,
            cut: false,
        }
    }

    fn steps(path: &Path) -> Vec<u64> {
        complete_lines(path)
            .expect("read")
            .unwrap_or_default()
            .iter()
            .map(|l| serde_json::from_slice::<StepOf>(l).expect("record").step)
            .collect()
    }

    #[test]
    fn steps_append_as_gzip_members_and_a_start_cuts_back_to_its_step() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("completions.jsonl.gz");
        keep_through(&path, 3).expect("absent is fine");
        assert!(!path.exists());
        for step in 1..=3 {
            append(&path, &[record(step, "a", 1.0), record(step, "b", 0.0)]).expect("append");
        }
        assert_eq!(steps(&path), [1, 1, 2, 2, 3, 3]);
        assert_eq!(
            last_step(&path).expect("read"),
            [record(3, "a", 1.0), record(3, "b", 0.0)]
        );
        keep_through(&path, 2).expect("cut");
        assert_eq!(steps(&path), [1, 1, 2, 2]);
        append(&path, &[record(3, "c", 0.5)]).expect("append");
        assert_eq!(last_step(&path).expect("read"), [record(3, "c", 0.5)]);
        keep_through(&path, 0).expect("cut");
        assert_eq!(steps(&path), Vec::<u64>::new());
    }

    #[test]
    fn a_member_torn_by_a_crash_is_dropped_at_the_next_start() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("completions.jsonl.gz");
        append(&path, &[record(1, "a", 1.0)]).expect("append");
        append(&path, &[record(2, "a", 1.0)]).expect("append");
        let whole = std::fs::metadata(&path).expect("stat").len();
        let file = OpenOptions::new().write(true).open(&path).expect("open");
        file.set_len(whole - 12).expect("tear the last member");
        assert_eq!(steps(&path), [1], "the torn member's line is incomplete");
        keep_through(&path, 5).expect("cut");
        append(&path, &[record(2, "b", 0.0)]).expect("append");
        assert_eq!(
            steps(&path),
            [1, 2],
            "nothing is lost behind the torn member"
        );
    }

    #[test]
    fn the_tensorboard_table_shows_each_reward_and_escapes_what_markdown_would_read() {
        let mut r = record(1, "t|1", 1.0);
        r.completion = "<b>4</b>\n| x".to_owned();
        let mut other = record(1, "t2", 0.0);
        other.rewards.insert("format".to_owned(), 0.5);
        let md = table(&[r, other]);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| task | prompt | completion | accuracy | format | reward | advantage |"
        );
        assert_eq!(lines.len(), 4, "{md}");
        assert!(
            lines[2].starts_with("| t\\|1 | &lt;\\|user\\|&gt;2+2? | &lt;b&gt;4&lt;/b&gt;<br>\\| x | 1.000 | - | 1.000 | 0.500 |"),
            "{md}"
        );
        assert!(
            lines[3].ends_with("| 0.000 | 0.500 | 0.000 | -0.500 |"),
            "{md}"
        );
        let many: Vec<_> = (0..20).map(|i| record(1, &format!("t{i}"), 0.0)).collect();
        let md = table(&many);
        assert_eq!(
            md.lines().skip(2).filter(|l| l.starts_with('|')).count(),
            TABLE_ROWS
        );
        assert!(md.ends_with("16 of 20 completions; all are in completions.jsonl.gz.\n"));
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary_and_say_so() {
        let long = "é".repeat(MAX_TEXT_BYTES);
        let (kept, was_cut) = cut(&long);
        assert!(was_cut);
        assert!(kept.len() <= MAX_TEXT_BYTES && kept.len() >= MAX_TEXT_BYTES - 1);
        assert_eq!(cut("short"), ("short", false));
    }
}
