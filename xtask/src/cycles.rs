//! Tidy's import-cycle check: inside each crate, the top-level modules (the files and folders
//! directly under `src/`, declared in `lib.rs` or, for a binary such as xtask, `main.rs`) must
//! depend on each other one way. A module depends on another
//! when it names it (`crate::other::...`, `use crate::{other::...}`) or names an item the crate
//! root re-exports from it (`pub use other::{Item}` in `lib.rs`, then `crate::Item`). Submodules
//! count as their top-level module; the crate root itself, comments and `#[cfg(test)]` code are not
//! looked at (tests may reach anywhere).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use anyhow::Result;
use regex::Regex;

/// The cycles among `src`'s top-level modules, each as `a -> b -> ... -> a`.
pub(crate) fn module_cycles(src: &Path) -> Result<Vec<String>> {
    let lib = std::fs::read_to_string(src.join("lib.rs"))
        .or_else(|_| std::fs::read_to_string(src.join("main.rs")))
        .unwrap_or_default();
    let modules: BTreeSet<String> =
        Regex::new(r"(?m)^\s*(?:pub(?:\([a-z]+\))? )?mod ([a-z_0-9]+);")?
            .captures_iter(&lib)
            .map(|c| c[1].to_owned())
            .collect();
    // Item name -> module, from the root's re-exports.
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    let reexport = Regex::new(r"(?s)pub use ([a-z_0-9]+)::(\{[^}]*\}|[A-Za-z_0-9]+);")?;
    for c in reexport.captures_iter(&lib) {
        let module = c[1].to_owned();
        for item in c[2].trim_matches(|ch| ch == '{' || ch == '}').split(',') {
            let name = item.split_whitespace().last().unwrap_or("").trim();
            if !name.is_empty() && modules.contains(&module) {
                owner.insert(name.to_owned(), module.clone());
            }
        }
    }
    let path_ref = Regex::new(r"crate::([A-Za-z_0-9]+)")?;
    let group = Regex::new(r"(?s)use crate::\{(.*?)\};")?;
    let word = Regex::new(r"\b([A-Za-z_][A-Za-z_0-9]*)\b")?;
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &modules {
        let mut text = String::new();
        let file = src.join(format!("{module}.rs"));
        let dir = src.join(module);
        for path in std::iter::once(file).chain(rust_files_under(&dir)) {
            if let Ok(t) = std::fs::read_to_string(&path) {
                // Test code may reach anywhere; comments (doc links) are not dependencies.
                let code = t.split("#[cfg(test)]").next().unwrap_or("");
                for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
        let mut names: Vec<String> = path_ref
            .captures_iter(&text)
            .map(|c| c[1].to_owned())
            .collect();
        for g in group.captures_iter(&text) {
            // Only the first segment of each path in the group names a module or an item.
            for part in g[1].split(',') {
                if let Some(w) = word.captures(part.trim()) {
                    names.push(w[1].to_owned());
                }
            }
        }
        for name in names {
            let target = if modules.contains(&name) {
                Some(name)
            } else {
                owner.get(&name).cloned()
            };
            if let Some(t) = target.filter(|t| t != module) {
                edges.entry(module.clone()).or_default().insert(t);
            }
        }
    }
    Ok(cycles(&edges))
}

fn rust_files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out
}

/// One cycle per strongly connected group of two or more modules (a shortest one through its
/// first module), found by depth-first search.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut seen: BTreeSet<BTreeSet<String>> = BTreeSet::new();
    for start in edges.keys() {
        // Breadth-first from `start` back to itself gives a shortest cycle through it.
        let mut parent: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut closed = None;
        while let Some(m) = queue.pop_front() {
            for next in edges.get(&m).into_iter().flatten() {
                if next == start {
                    closed = Some(m.clone());
                    break;
                }
                if !parent.contains_key(next) {
                    parent.insert(next.clone(), m.clone());
                    queue.push_back(next.clone());
                }
            }
            if closed.is_some() {
                break;
            }
        }
        let Some(mut last) = closed else { continue };
        let mut path = vec![start.clone()];
        let mut back = vec![last.clone()];
        while let Some(p) = parent.get(&last) {
            if p == start {
                break;
            }
            back.push(p.clone());
            last = p.clone();
        }
        back.reverse();
        path.extend(back);
        let members: BTreeSet<String> = path.iter().cloned().collect();
        if seen.insert(members) {
            path.push(start.clone());
            found.push(path.join(" -> "));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_is_found_and_a_one_way_graph_is_not() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let src = dir.path();
        std::fs::write(
            src.join("lib.rs"),
            "//! x\nmod a;\nmod b;\nmod c;\npub use c::{Thing, Other};\n",
        )?;
        std::fs::write(src.join("a.rs"), "use crate::b::f;\n")?;
        std::fs::write(src.join("b.rs"), "use crate::{Thing, a};\n")?;
        std::fs::write(
            src.join("c.rs"),
            "//! [`x`]: crate::a::x\n#[cfg(test)]\nmod t { use crate::a; }\n",
        )?;
        assert_eq!(module_cycles(src)?, ["a -> b -> a"]);
        std::fs::write(src.join("b.rs"), "use crate::Thing;\n")?;
        assert!(module_cycles(src)?.is_empty());
        Ok(())
    }

    #[test]
    fn a_binary_crate_is_read_from_its_main_rs() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let src = dir.path();
        std::fs::write(src.join("main.rs"), "//! x\nmod a;\nmod b;\n")?;
        std::fs::write(src.join("a.rs"), "use crate::b::f;\n")?;
        std::fs::write(src.join("b.rs"), "fn g() { crate::a::h() }\n")?;
        assert_eq!(module_cycles(src)?, ["a -> b -> a"]);
        Ok(())
    }
}
