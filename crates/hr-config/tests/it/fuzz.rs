//! Mutated expconf YAML (every rendered template, bytes flipped, inserted, removed or cut) is
//! parsed and checked without a panic: a finding or a typed error, never a crash.

use hr_config::{ClusterProfile, ConfigKind, check_value, parse_yaml, templates};
use hr_tests::mutate::mutate_text;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn any_mutation_of_a_template_is_checked_without_a_panic(
        pick in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6),
    ) {
        let all = templates(&ClusterProfile::jaif());
        let template = &all[pick.index(all.len())];
        let text = mutate_text(&template.render().expect("render"), &edits);
        if let Ok(value) = parse_yaml(&text, "fuzzed.yaml") {
            let _ = check_value(&value, ConfigKind::detect(&value));
        }
    }
}
