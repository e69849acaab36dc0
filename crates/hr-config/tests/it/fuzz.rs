//! Mutated expconf YAML (every rendered template, bytes flipped, inserted, removed or cut) is
//! parsed and checked without a panic: a finding or a typed error, never a crash.

use hr_config::{ClusterProfile, ConfigKind, check_value, parse_yaml, templates};
use proptest::prelude::*;

fn mutate(text: &str, edits: &[(u8, prop::sample::Index, u8)]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for (op, at, byte) in edits {
        let i = at.index(bytes.len().max(1));
        match op {
            0 if !bytes.is_empty() => bytes[i] ^= (*byte).max(1),
            1 => bytes.insert(i, *byte),
            2 if !bytes.is_empty() => {
                bytes.remove(i);
            }
            _ => bytes.truncate(i),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn any_mutation_of_a_template_is_checked_without_a_panic(
        pick in any::<prop::sample::Index>(),
        edits in prop::collection::vec((0u8..4, any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let all = templates(&ClusterProfile::jaif());
        let template = &all[pick.index(all.len())];
        let text = mutate(&template.render().expect("render"), &edits);
        if let Ok(value) = parse_yaml(&text, "fuzzed.yaml") {
            let _ = check_value(&value, ConfigKind::detect(&value));
        }
    }
}
