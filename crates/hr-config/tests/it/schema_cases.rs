//! Runs Determined's shared schema test cases (`test_data/test_cases/v0/*.yaml`) through our
//! validator: `sane_as`, `complete_as`, `sanity_errors`, `completeness_errors`. The `default_as`
//! and `merge_as` cases test the master's defaulting and merging, not validation, and are counted
//! but not run.

use std::path::PathBuf;

use anyhow::{Context, Result};
use hr_config::{
    parse_yaml,
    schema::{Phase, SchemaSet},
};
use serde_json::Value;

fn case_files() -> Result<Vec<PathBuf>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("test_data/test_cases/v0");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    Ok(files)
}

fn urls(case: &Value, key: &str) -> Vec<String> {
    case.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Checks one case; returns (checks run, failures).
fn run_case(set: &SchemaSet, file: &str, case: &Value) -> Result<(usize, Vec<String>)> {
    let name = case.get("name").and_then(Value::as_str).unwrap_or("?");
    let instance = case.get("case").cloned().unwrap_or(Value::Null);
    let mut checks = 0;
    let mut failures = Vec::new();
    for (key, phase) in [
        ("sane_as", Phase::Sanity),
        ("complete_as", Phase::Completeness),
    ] {
        for url in urls(case, key) {
            checks += 1;
            let errors = set.validate(&url, &instance, phase)?;
            if !errors.is_empty() {
                let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
                failures.push(format!("{file}::{name}: {key} {url}: {rendered:?}"));
            }
        }
    }
    for (key, phase) in [
        ("sanity_errors", Phase::Sanity),
        ("completeness_errors", Phase::Completeness),
    ] {
        let Some(Value::Object(expected)) = case.get(key) else {
            continue;
        };
        for (url, patterns) in expected {
            checks += 1;
            let errors: Vec<String> = set
                .validate(url, &instance, phase)?
                .iter()
                .map(ToString::to_string)
                .collect();
            if errors.is_empty() {
                failures.push(format!(
                    "{file}::{name}: {key} {url}: expected errors, got none"
                ));
                continue;
            }
            for pattern in patterns
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let re = regex::Regex::new(pattern)?;
                if !errors.iter().any(|e| re.is_match(e)) {
                    failures.push(format!(
                        "{file}::{name}: {key} {url}: no error matches {pattern:?} in {errors:?}"
                    ));
                }
            }
        }
    }
    Ok((checks, failures))
}

#[test]
fn determined_schema_test_vectors_give_expected_verdicts() -> Result<()> {
    let set = SchemaSet::embedded();
    let (mut checks, mut failures) = (0, Vec::new());
    for path in case_files()? {
        let text = std::fs::read_to_string(&path)?;
        let file = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let cases = parse_yaml(&text, &file)?;
        for case in cases.as_array().context("a case file is a list")? {
            let (n, f) = run_case(set, &file, case)?;
            checks += n;
            failures.extend(f);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checks} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The shared files hold 84 sane_as, 31 sanity_errors, 8 complete_as and 4
    // completeness_errors entries; each names one or more schemas.
    assert!(checks >= 127, "only {checks} schema checks ran");
    Ok(())
}

#[test]
fn a_stock_validator_would_miss_optional_ref_so_ours_follows_it() -> Result<()> {
    let set = SchemaSet::embedded();
    let bad = serde_json::json!({"resources": {"slots_per_trial": "two"}});
    let errors = set.validate(hr_config::schema::EXPERIMENT_SCHEMA, &bad, Phase::Sanity)?;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].to_string(),
        "<config>.resources.slots_per_trial: expected integer or null, but got string"
    );
    Ok(())
}
