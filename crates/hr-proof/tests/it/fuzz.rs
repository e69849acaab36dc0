//! Mutated evidence streams (a real stream's bytes flipped, inserted, removed or cut) parse to
//! evidence or to a typed error naming the line, never a panic; and the comparison of whatever
//! parses with the original never panics either.

use std::path::Path;

use hr_proof::{ProofError, first_divergence, parse_evidence};
use hr_tests::mutate::mutate_text;
use proptest::prelude::*;

fn stream() -> String {
    (1..=4)
        .map(|step| {
            format!(
                "{{\"step\":{step},\"task_ids\":[\"t{step}\"],\"tokens_sha256\":\"ab{step}\",\
                 \"rewards\":[0.5,1.0],\"advantages_sha256\":\"cd\",\"adapter_sha256\":\"ef\",\
                 \"optimizer_sha256\":\"01\",\"trainer_state_sha256\":\"23\",\
                 \"data_cursor\":{{\"epoch\":0,\"position\":{step}}}}}\n"
            )
        })
        .collect()
}

#[test]
fn the_real_shape_parses_and_bad_lines_are_named() {
    let path = Path::new("evidence.jsonl");
    let ok = parse_evidence(&stream(), path).expect("parses");
    assert_eq!(ok.len(), 4);
    assert_eq!(first_divergence(&ok, &ok), None);
    let first = stream().lines().next().expect("line").to_owned();
    let step = |n: u32| first.replacen("\"step\":1", &format!("\"step\":{n}"), 1);
    for (text, line) in [
        (format!("{first}\nnot json\n"), 2),
        (format!("{}\n", step(0)), 1),
        ("[1,2]\n".to_owned(), 1),
        (format!("{}\n{}\n", step(2), step(2)), 2),
        ("{\"step\":1}\n".to_owned(), 1),
        (format!("{}\n", first.replace("}}", "},\"extra\":1}")), 1),
    ] {
        match parse_evidence(&text, path) {
            Err(ProofError::Evidence { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
            other => panic!("{text:?}: expected a typed error at line {line}, got {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn any_mutation_of_an_evidence_stream_is_parsed_without_a_panic(
        edits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..8),
    ) {
        let original = parse_evidence(&stream(), Path::new("a")).expect("parses");
        let text = mutate_text(&stream(), &edits);
        match parse_evidence(&text, Path::new("b")) {
            Ok(lines) => {
                let _ = first_divergence(&original, &lines);
            }
            Err(e) => prop_assert!(matches!(e, ProofError::Evidence { .. }), "{e}"),
        }
    }
}
