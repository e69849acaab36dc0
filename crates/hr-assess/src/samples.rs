//! Sample completions as the reports show them: a heading per completion (task, reward and its
//! parts, advantage where there is one, length) and its prompt's end and completion in fenced
//! blocks that no text inside can close.

use std::fmt::Write as _;

use hr_train::Sample;

/// The prompt's last characters a sample shows (where the question is).
const PROMPT_CHARS: usize = 600;

/// A report section `## {title}` with each of `samples`; empty when there are none.
pub(crate) fn section(title: &str, samples: &[Sample]) -> String {
    if samples.is_empty() {
        return String::new();
    }
    let mut md = format!("\n## {title}\n");
    for s in samples {
        let parts: Vec<String> = s
            .rewards
            .iter()
            .map(|(k, v)| format!("{k} {v:.3}"))
            .collect();
        let _ = write!(
            md,
            "\n### Task `{}`: reward {:.3}{}{}, {} tokens{}\n\n",
            s.task_id,
            s.reward,
            if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join(", "))
            },
            s.advantage
                .map_or(String::new(), |a| format!(", advantage {a:.3}")),
            s.length,
            if s.clipped { ", clipped" } else { "" },
        );
        if !s.prompt.is_empty() {
            let chars = s.prompt.chars().count();
            let prompt: String = s
                .prompt
                .chars()
                .skip(chars.saturating_sub(PROMPT_CHARS))
                .collect();
            let end = if chars > PROMPT_CHARS {
                " (its end)"
            } else {
                ""
            };
            let _ = write!(md, "Prompt{end}:\n\n{}\nCompletion", fenced(&prompt));
        } else {
            md.push_str("Completion");
        }
        let start = if s.cut { " (its start)" } else { "" };
        let _ = write!(md, "{start}:\n\n{}", fenced(&s.completion));
    }
    md
}

/// `text` in a fenced code block whose fence is longer than any run of backticks in it.
fn fenced(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}text\n{text}\n{fence}\n")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn sample(task: &str, prompt: &str, advantage: Option<f64>) -> Sample {
        let rewards = BTreeMap::from([("accuracy".to_owned(), 1.0)]);
        Sample::new(
            task,
            prompt,
            &format!("answer ```{task}```"),
            1.0,
            &rewards,
            advantage,
            4,
            task == "c",
        )
    }

    #[test]
    fn each_sample_is_headed_by_its_scores_and_fenced_safely() {
        assert_eq!(section("none", &[]), "");
        let md = section(
            "Samples",
            &[sample("a", "Q?", Some(0.5)), sample("c", "", None)],
        );
        let heads: Vec<&str> = md.lines().filter(|l| l.starts_with('#')).collect();
        assert_eq!(
            heads,
            [
                "## Samples",
                "### Task `a`: reward 1.000 (accuracy 1.000), advantage 0.500, 4 tokens",
                "### Task `c`: reward 1.000 (accuracy 1.000), 4 tokens, clipped",
            ]
        );
        assert!(
            md.contains(
                "Prompt:\n\n```text\nQ?\n```\n\nCompletion:\n\n````text\nanswer ```a```\n````\n"
            ),
            "{md}"
        );
        assert_eq!(
            md.matches("Prompt").count(),
            1,
            "no prompt, no prompt block: {md}"
        );
        let long = "x".repeat(hr_train::SAMPLE_CHARS + 5);
        let cut = Sample::new("l", "", &long, 0.0, &BTreeMap::new(), None, 1, false);
        assert!(section("t", &[cut]).contains("Completion (its start):"));
    }
}
