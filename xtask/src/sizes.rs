//! Tidy's size check: no `.rs` file over [`MAX_FILE_LINES`] lines and no function over
//! [`MAX_FN_LINES`], so each file holds one thing a reader takes in at once. Functions are found
//! in rustfmt's layout: a line `fn name` (with its qualifiers) at some indentation ends at the
//! first later line that is that indentation and `}`.

use regex::Regex;

/// Most lines a source file may hold.
pub(crate) const MAX_FILE_LINES: usize = 650;

/// Most lines a function may span, signature to closing brace.
pub(crate) const MAX_FN_LINES: usize = 150;

/// What is too long in `text` (a file shown as `name`): the file, and each function with its
/// first line and length.
pub(crate) fn problems(name: &str, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    if lines.len() > MAX_FILE_LINES {
        out.push(format!(
            "{name}: {} lines, over {MAX_FILE_LINES}: split it into files named for what they hold",
            lines.len()
        ));
    }
    let start = Regex::new(
        r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)",
    )
    .expect("a valid pattern");
    for (i, line) in lines.iter().enumerate() {
        let Some(c) = start.captures(line) else {
            continue;
        };
        let close = format!("{}}}", &c[1]);
        // The body opens where the signature ends; a declaration without one (a trait's) ends
        // in `;` first.
        let Some(open) = lines[i..]
            .iter()
            .position(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'))
            .map(|o| i + o)
        else {
            continue;
        };
        let body_open = lines[open].trim_end().ends_with('{');
        if !body_open {
            continue;
        }
        if let Some(end) = lines[open + 1..].iter().position(|l| *l == close) {
            let span = open + 1 + end - i + 1;
            if span > MAX_FN_LINES {
                out.push(format!(
                    "{name}:{}: fn {} spans {span} lines, over {MAX_FN_LINES}: give its parts names",
                    i + 1,
                    &c[2]
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(lines: usize) -> String {
        let body: String = (0..lines.saturating_sub(2))
            .map(|i| format!("    let _x{i} = {i};\n"))
            .collect();
        format!("/// A function.\npub(crate) fn long() {{\n{body}}}\n")
    }

    #[test]
    fn a_long_function_or_file_is_named_and_a_short_one_is_not() {
        assert!(problems("a.rs", &function(MAX_FN_LINES)).is_empty());
        let found = problems("a.rs", &function(MAX_FN_LINES + 1));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("a.rs:2: fn long spans 151 lines"),
            "{found:?}"
        );
        // A method, indented, counts the same; a trait's declaration has no body.
        let method = format!(
            "impl A {{\n{}}}\ntrait T {{\n    fn f(&self);\n}}\n",
            function(MAX_FN_LINES + 1)
                .lines()
                .map(|l| format!("    {l}\n"))
                .collect::<String>()
        );
        assert_eq!(problems("b.rs", &method).len(), 1);
        let file = "//! A file.\n".repeat(MAX_FILE_LINES + 1);
        let found = problems("c.rs", &file);
        assert!(
            found.len() == 1 && found[0].contains("651 lines"),
            "{found:?}"
        );
    }
}
