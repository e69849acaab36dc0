//! The docs name only what exists: every `hessian-recipes` command and flag written in a code
//! span or block of README.md, ARCHITECTURE.md and docs/ is one this CLI has, every path under
//! the checkout's folders (`crates/...`, `docs/...`, ...) is there, and every relative link
//! resolves. Run as a test; `docs_are_true` names each wrong word, file and line.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// Folders of the checkout whose paths the docs name.
const FOLDERS: [&str; 7] = [
    "crates/", "xtask/", "scripts/", "plans/", "cluster/", "docs/", "tests/",
];

/// Words that end a command: shell operators and comments.
const ENDS: [&str; 7] = ["|", "||", "&&", ";", ">", "2>&1", "#"];

/// The docs the check reads, relative to the checkout: README.md, ARCHITECTURE.md, every
/// Markdown file under docs/ but the measured records (docs/results, docs/bench), which quote
/// the commands as they were run, and each crate's `//!` docs (`src/lib.rs`).
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        out.extend(crates.flatten().map(|c| c.path().join("src/lib.rs")));
    }
    let mut stack = vec![root.join("docs")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            if rel.starts_with("docs/results") || rel.starts_with("docs/bench") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A document's Markdown: a Rust file's `//!` lines (other lines left blank, so line numbers
/// hold), else the text itself.
fn markdown(file: &Path, text: &str) -> String {
    if file.extension().is_none_or(|e| e != "rs") {
        return text.to_owned();
    }
    text.lines()
        .map(|l| {
            l.strip_prefix("//!")
                .map_or("", |d| d.strip_prefix(' ').unwrap_or(d))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The code of a Markdown text with its line numbers: each inline code span (a span may wrap
/// within its paragraph), and each line of a fenced block (`\`-continued lines joined).
fn code(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut pending: Option<(usize, String)> = None;
    // The paragraph being read: its first line and its lines.
    let mut paragraph: (usize, Vec<&str>) = (1, Vec::new());
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let fence = line.trim_start().starts_with("```");
        // A blank line, a fence, a heading, a list item or a table row starts a new block: no
        // span crosses one.
        let block = ["#", "- ", "* ", "|"]
            .iter()
            .any(|m| line.trim_start().starts_with(m));
        if fence || block || line.trim().is_empty() || fenced {
            out.extend(spans(paragraph.0, &paragraph.1));
            // A heading, list item or table row is the first line of its own block.
            paragraph = (if block { n } else { n + 1 }, Vec::new());
        }
        if fence {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let (part, continued) = match line.trim_end().strip_suffix('\\') {
                Some(part) => (part, true),
                None => (line, false),
            };
            let (start, mut joined) = pending.take().unwrap_or((n, String::new()));
            joined.push(' ');
            joined.push_str(part);
            if continued {
                pending = Some((start, joined));
            } else {
                out.push((start, joined));
            }
        } else if !line.trim().is_empty() {
            paragraph.1.push(line);
        }
    }
    out.extend(spans(paragraph.0, &paragraph.1));
    out
}

/// The inline code spans of a paragraph whose first line is `first`: text between pairs of
/// backticks, each with the line it starts on.
fn spans(first: usize, lines: &[&str]) -> Vec<(usize, String)> {
    let text = lines.join("\n");
    let mut out = Vec::new();
    let mut parts = text.split('`');
    let mut offset = parts.next().map_or(0, str::len) + 1;
    while let Some(span) = parts.next() {
        let line = first + text[..offset].matches('\n').count();
        out.push((line, span.replace('\n', " ")));
        offset += span.len() + 1;
        offset += parts.next().map_or(0, str::len) + 1;
    }
    out
}

/// A word as written, without the brackets and punctuation prose puts around it.
fn bare(word: &str) -> &str {
    word.trim_matches(|c: char| matches!(c, '[' | ']' | '(' | ')' | ',' | '.' | ':' | '"' | '\''))
}

/// Whether `word` stands for a value the reader fills in (NAME, <dir>, ...) or is a value.
fn placeholder(word: &str) -> bool {
    word.is_empty()
        || word.contains("...")
        || word.contains('…')
        || word.contains(['<', '$', '{', '=', '/', '*'])
        || word
            .chars()
            .any(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// The problems with the command that starts at `words[0]` (a subcommand's name) in `cmd`.
fn check_command(cmd: &clap::Command, words: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut at = vec![cmd];
    let mut path = vec![cmd.get_name().to_owned()];
    for word in words.iter().map(|w| bare(w)) {
        if ENDS.contains(&word) || word.starts_with('#') || word == "--" {
            break;
        }
        let here = *at.last().expect("a command");
        if let Some(flag) = word.strip_prefix("--") {
            let flag = flag.split('=').next().unwrap_or(flag);
            let known = matches!(flag, "help" | "version")
                || at.iter().rev().any(|c| {
                    c.get_arguments().any(|a| {
                        a.get_long() == Some(flag)
                            || a.get_all_aliases().is_some_and(|all| all.contains(&flag))
                    })
                });
            let stands_for_one = flag.is_empty()
                || flag.contains(['<', '{', '…'])
                || flag.contains("...")
                || flag.chars().any(|c| c.is_ascii_uppercase());
            if !known && !stands_for_one {
                problems.push(format!("`{} --{flag}`: no such flag", path.join(" ")));
            }
            continue;
        }
        if here.has_subcommands() {
            let alternatives: Vec<&str> = word.split('|').collect();
            let found: Vec<&clap::Command> = alternatives
                .iter()
                .filter_map(|w| here.find_subcommand(w))
                .collect();
            if found.len() == alternatives.len() {
                path.push(word.to_owned());
                at.push(found[0]);
            } else if !placeholder(word) && !word.starts_with('-') {
                problems.push(format!("`{} {word}`: no such command", path.join(" ")));
                break;
            }
        }
    }
    problems
}

/// Whether `word` names the binary (`hessian-recipes`, a path to it, `$(` before it, or `$B`
/// where a block set `B=` to one).
fn names_binary(word: &str, aliases: &[String]) -> bool {
    let word = bare(
        word.trim_start_matches(['$', '(', '"'])
            .trim_end_matches(['"', ')']),
    );
    word == "hessian-recipes"
        || word.ends_with("/hessian-recipes")
        || aliases.iter().any(|a| word == a.as_str())
}

/// Every problem in one document's `text`; `file` is where it lies, `root` the checkout.
fn check_text(cmd: &clap::Command, root: &Path, file: &Path, text: &str) -> Vec<String> {
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut problems = Vec::new();
    let mut aliases: Vec<String> = Vec::new();
    for (line, snippet) in code(text) {
        // A shell comment ends the code.
        let words: Vec<&str> = snippet
            .split_whitespace()
            .take_while(|w| !w.starts_with('#'))
            .collect();
        for (i, word) in words.iter().enumerate() {
            // `B=target/release/hessian-recipes` names the binary `$B` in what follows.
            if let Some((name, value)) = word.split_once('=')
                && value.ends_with("hessian-recipes")
                && !value.starts_with('$')
            {
                aliases.push(name.to_owned());
            }
            // A flag's value (`-p hessian-recipes`, `--bin hessian-recipes`) is not a command.
            let value = i > 0 && words[i - 1].starts_with('-') && words[i - 1] != "--";
            let rest = if names_binary(word, &aliases) && !value {
                &words[i + 1..]
            } else if i == 0 && bare_command(cmd, &words) {
                &words[..]
            } else {
                continue;
            };
            for p in check_command(cmd, rest) {
                problems.push(format!("{shown}:{line}: {p}"));
            }
        }
        for word in &words {
            let word = bare(word.trim_end_matches(['.', ',', ';', ')']));
            if FOLDERS.iter().any(|f| word.starts_with(f)) {
                for path in expand(word) {
                    if !exists(root, &path) && !placeholder_path(&path) {
                        problems.push(format!("{shown}:{line}: `{path}` does not exist"));
                    }
                }
            }
        }
    }
    problems.extend(
        links(root, file, text)
            .into_iter()
            .map(|p| format!("{shown}: {p}")),
    );
    problems
}

/// Whether code that does not name the binary is one of its commands: its first word is a
/// command and what follows reads as one (a flag next, a command of it next, or a flag after
/// the next word), as in `cluster preflight --config FILE` or `train --plan p.json`; not output
/// such as `proof holds: ...`.
fn bare_command(cmd: &clap::Command, words: &[&str]) -> bool {
    let Some(first) = words.first().and_then(|w| cmd.find_subcommand(bare(w))) else {
        return false;
    };
    let flag = |i: usize| words.get(i).is_some_and(|w| bare(w).starts_with("--"));
    let sub = words
        .get(1)
        .is_some_and(|w| first.find_subcommand(bare(w)).is_some());
    flag(1) || sub || (first.has_subcommands() && flag(2))
}

/// Whether a path the docs name is there: from the checkout, or inside a crate (a crate's
/// docs say `tests/it/servers.rs` of its own folder).
fn exists(root: &Path, path: &str) -> bool {
    root.join(path).exists()
        || std::fs::read_dir(root.join("crates"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|krate| krate.path().join(path).exists())
}

/// Whether a path stands for one the reader fills in (`docs/bench/decode-DEVICE.md`, a glob).
fn placeholder_path(path: &str) -> bool {
    path.contains(['*', '<', '$', '…', ' '])
        || path.contains("...")
        || path
            .split(['/', '-', '.', '_'])
            .any(|seg| seg.len() > 1 && seg.chars().all(|c| c.is_ascii_uppercase()))
}

/// `a/{b,c}/d` as `a/b/d` and `a/c/d`; `file.rs:12` as `file.rs`.
fn expand(path: &str) -> Vec<String> {
    let path = path.split(':').next().unwrap_or(path);
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .flat_map(|alt| expand(&format!("{}{alt}{}", &path[..open], &path[close + 1..])))
            .collect(),
        _ => vec![path.to_owned()],
    }
}

/// Relative Markdown links (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`) that do
/// not resolve from the document's folder: a missing file, or a heading the file lacks.
fn links(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let dir = file.parent().unwrap_or(root);
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices("](") {
            let target = line[at + 2..].split(')').next().unwrap_or("");
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() {
                file.to_path_buf()
            } else {
                dir.join(path)
            };
            let has_heading = |linked: &Path| {
                std::fs::read_to_string(linked)
                    .is_ok_and(|t| headings(&t).iter().any(|h| h == anchor))
            };
            if !linked.exists() {
                problems.push(format!(
                    "line {}: the link `{target}` does not resolve",
                    i + 1
                ));
            } else if !anchor.is_empty()
                && linked.extension().is_some_and(|e| e == "md")
                && !has_heading(&linked)
            {
                let name = linked
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                problems.push(format!(
                    "line {}: the link `{target}` names a heading {name} does not have",
                    i + 1
                ));
            }
        }
    }
    problems
}

/// A Markdown text's heading anchors as GitHub makes them: lower case, punctuation but `-` and
/// `_` dropped, spaces as `-`.
fn headings(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        let title = title.trim_start_matches('#').trim();
        out.push(
            title
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli() -> clap::Command {
        let mut cmd = super::super::Cli::command();
        cmd.build();
        cmd
    }

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn docs_are_true() {
        let (cmd, root) = (cli(), root());
        let mut problems = Vec::new();
        for file in documents(&root) {
            let text = std::fs::read_to_string(&file).expect("a document");
            problems.extend(check_text(&cmd, &root, &file, &markdown(&file, &text)));
        }
        assert!(
            problems.is_empty(),
            "the docs name what does not exist:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn a_planted_wrong_name_is_found() {
        let (cmd, root) = (cli(), root());
        let file = root.join("README.md");
        let check = |text: &str| check_text(&cmd, &root, &file, text);
        let good = "Run `hessian-recipes train --plan plans/native-tiny.json --output runs/NAME`, \
                    then `cluster preflight --config FILE`; see [the plan](docs/plan.md) and \
                    `crates/hr-plan/src/{plan,digest}.rs`.\n\
                    ```sh\nB=target/release/hessian-recipes\n$B qualify managed --plan P \\\n  \
                    --native-proof X\n$B launch --nproc 2 -- $B train --plan p.json\n```\n";
        assert_eq!(check(good), Vec::<String>::new());
        // Output, a package and a script's flag value are not commands.
        let not_commands = "`proof holds: native: 4 steps` `cargo build -p hessian-recipes \
                            --features cuda` `scripts/gpu-perf.sh --bin hessian-recipes --tiny d`";
        assert_eq!(check(not_commands), Vec::<String>::new());
        // A problem is named at its line, in a list item as in a paragraph.
        let listed = check("Intro.\n\n- one\n- `train --plann p`\n\nAfter,\n`train --plann q`.\n");
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(listed[0].starts_with("README.md:4: "), "{listed:?}");
        assert!(listed[1].starts_with("README.md:7: "), "{listed:?}");
        for (bad, says) in [
            (
                "`hessian-recipes trian --plan p`",
                "`hessian-recipes trian`: no such command",
            ),
            (
                "`train --plann p`",
                "`hessian-recipes train --plann`: no such flag",
            ),
            (
                "`cluster bogus --config f`",
                "`hessian-recipes cluster bogus`: no such command",
            ),
            (
                "```sh\nB=x/hessian-recipes\n$B managed prepare \\\n --slot 2\n```",
                "--slot`",
            ),
            (
                "`crates/hr-nothing/src/lib.rs`",
                "`crates/hr-nothing/src/lib.rs` does not exist",
            ),
            (
                "see [it](docs/nothing.md)",
                "the link `docs/nothing.md` does not resolve",
            ),
            (
                "see [it](docs/plan.md#no-such-part)",
                "names a heading plan.md does not have",
            ),
            (
                "a span that wraps, `hessian-recipes train\n--plann p`, is read whole",
                "--plann",
            ),
            (
                "`train --config-sha265 x`",
                "`hessian-recipes train --config-sha265`: no such flag",
            ),
        ] {
            let found = check(bad);
            assert!(
                found.len() == 1 && found[0].contains(says),
                "{bad}: {found:?}"
            );
        }
    }
}
