//! Integration tests of hr-eval: the authored suites, the fixture policy's expected scores,
//! scoring with an oracle policy, and report writing.

use std::collections::HashSet;

use anyhow::Result;
use hr_eval::{
    Error, Expected, FixturePolicy, Policy, ReportMeta, Task, builtin_suites, evaluate,
    render_reports,
};

/// Answers every task correctly, in the form its suite expects.
struct Oracle;

impl Policy for Oracle {
    fn name(&self) -> &str {
        "oracle"
    }
    fn respond(&mut self, task: &Task) -> Result<String, Error> {
        Ok(match &task.expected {
            Expected::Number(n) => format!("The answer is {n}."),
            Expected::ToolCall { name, arguments } => format!(
                "<tool_call>{}</tool_call>",
                serde_json::json!({"name": name, "arguments": arguments})
            ),
        })
    }
}

#[test]
fn suites_are_authored_and_ids_are_unique() -> Result<()> {
    let suites = builtin_suites()?;
    let names: Vec<&str> = suites.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["arithmetic", "tool_call", "mgsm"]);
    let total: usize = suites.iter().map(|s| s.tasks.len()).sum();
    assert!((24..=60).contains(&total), "{total} tasks");
    let mut ids = HashSet::new();
    for task in suites.iter().flat_map(|s| &s.tasks) {
        assert!(ids.insert(task.id.clone()), "duplicate id {}", task.id);
    }
    let langs: HashSet<&str> = suites[2].tasks.iter().map(|t| t.lang.as_str()).collect();
    assert!(langs.len() >= 6, "MGSM set covers {langs:?}");
    Ok(())
}

#[test]
fn an_oracle_scores_everything_correct() -> Result<()> {
    let eval = evaluate(&builtin_suites()?, &mut Oracle, |_, _, _| {})?;
    assert!(
        eval.results.iter().all(|r| r.correct),
        "{:?}",
        eval.results.iter().find(|r| !r.correct)
    );
    Ok(())
}

#[test]
fn the_fixture_policy_gets_the_scripted_scores() -> Result<()> {
    let eval = evaluate(
        &builtin_suites()?,
        &mut FixturePolicy::builtin()?,
        |_, _, _| {},
    )?;
    let scores: Vec<(&str, usize, usize)> = eval
        .suites
        .iter()
        .map(|s| (s.suite.as_str(), s.correct, s.items))
        .collect();
    assert_eq!(
        scores,
        [
            ("arithmetic", 9, 12),
            ("tool_call", 6, 10),
            ("mgsm", 10, 12)
        ]
    );
    let wrong: Vec<&str> = eval
        .results
        .iter()
        .filter(|r| !r.correct)
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(
        wrong,
        [
            "arith-03",
            "arith-07",
            "arith-11",
            "tool-04",
            "tool-07",
            "tool-09",
            "tool-10",
            "mgsm-ja-01",
            "mgsm-sw-01"
        ]
    );
    Ok(())
}

#[test]
fn a_policy_without_an_answer_is_an_error_not_a_zero() -> Result<()> {
    let mut policy =
        FixturePolicy::from_jsonl("x.jsonl", "{\"id\": \"arith-01\", \"response\": \"7\"}\n")?;
    let err = evaluate(&builtin_suites()?, &mut policy, |_, _, _| {}).expect_err("incomplete");
    assert!(
        matches!(err, Error::NoResponse(ref id) if id == "arith-02"),
        "{err}"
    );
    let dup = "{\"id\": \"a\", \"response\": \"1\"}\n{\"id\": \"a\", \"response\": \"2\"}\n";
    let err = FixturePolicy::from_jsonl("x.jsonl", dup).expect_err("duplicate");
    assert_eq!(err.to_string(), "x.jsonl:2: duplicate response for task a");
    Ok(())
}

#[test]
fn reports_render_scores_results_and_versions() -> Result<()> {
    let eval = evaluate(
        &builtin_suites()?,
        &mut FixturePolicy::builtin()?,
        |_, _, _| {},
    )?;
    let meta = ReportMeta {
        tool_versions: vec![("hr-eval".into(), "0.0.0".into())],
        elapsed_ms: 1,
    };
    let files = render_reports(&eval, &meta);
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["results.jsonl", "report.json", "report.md"]);
    let report: serde_json::Value = serde_json::from_slice(&files[1].1)?;
    assert_eq!(report["total"]["correct"], 25);
    assert_eq!(report["total"]["items"], 34);
    assert_eq!(report["tool_versions"]["hr-eval"], "0.0.0");
    assert_eq!(String::from_utf8_lossy(&files[0].1).lines().count(), 34);
    let md = String::from_utf8_lossy(&files[2].1);
    assert!(
        md.contains("25 of 34 tasks correct") && md.contains("`arith-03`"),
        "{md}"
    );
    Ok(())
}
