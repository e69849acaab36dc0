//! Property: rendering a config to YAML and parsing it back gives the same value.

use std::collections::BTreeMap;

use hr_config::{
    BindMount, CheckpointPolicy, CheckpointStorage, CommandConfig, Environment, ExperimentConfig,
    Reproducibility, Resources, Searcher, YamlConfig,
};
use proptest::{collection::vec, option, prelude::*};

/// Any string, including ones YAML would read as numbers, booleans or null.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,24}",
        Just("true".to_owned()),
        Just("null".to_owned()),
        Just("~".to_owned()),
        Just("0x1F".to_owned()),
        Just("1e3".to_owned()),
        Just("- item".to_owned()),
        Just("key: value".to_owned()),
        Just(String::new()),
    ]
}

fn resources() -> impl Strategy<Value = Resources> {
    (option::of(0u32..9), option::of(0u32..9), option::of(text())).prop_map(
        |(slots_per_trial, slots, resource_pool)| Resources {
            slots_per_trial,
            slots,
            resource_pool,
        },
    )
}

fn environment() -> impl Strategy<Value = Environment> {
    (option::of(text()), vec(text(), 0..5)).prop_map(|(image, environment_variables)| Environment {
        image,
        environment_variables,
    })
}

fn mounts() -> impl Strategy<Value = Vec<BindMount>> {
    vec(
        (text(), text(), any::<bool>()).prop_map(|(host_path, container_path, read_only)| {
            BindMount {
                host_path,
                container_path,
                read_only,
            }
        }),
        0..3,
    )
}

fn storage() -> impl Strategy<Value = Option<CheckpointStorage>> {
    option::of(prop_oneof![
        (text(), option::of(text())).prop_map(|(host_path, storage_path)| {
            CheckpointStorage::shared_fs(host_path, storage_path)
        }),
        text().prop_map(CheckpointStorage::directory),
        (0u32..300).prop_map(|n| CheckpointStorage::default().retaining_latest(n)),
    ])
}

fn searcher() -> impl Strategy<Value = Searcher> {
    (text(), any::<u64>(), any::<bool>(), any::<bool>()).prop_map(
        |(metric, batches, with_length, smaller_is_better)| {
            let mut searcher = Searcher::single(&metric, batches);
            searcher.smaller_is_better = smaller_is_better;
            if !with_length {
                searcher.max_length = None;
            }
            searcher
        },
    )
}

fn policy() -> impl Strategy<Value = Option<CheckpointPolicy>> {
    option::of(prop_oneof![
        Just(CheckpointPolicy::Best),
        Just(CheckpointPolicy::All),
        Just(CheckpointPolicy::None)
    ])
}

prop_compose! {
    fn identity()(
        name in text(), description in option::of(text()), labels in vec(text(), 0..3),
        workspace in option::of(text()), project in option::of(text()),
    ) -> (String, Option<String>, Vec<String>, Option<String>, Option<String>) {
        (name, description, labels, workspace, project)
    }
}

prop_compose! {
    fn experiment()(
        (name, description, labels, workspace, project) in identity(),
        (entrypoint, resources, searcher) in (vec(text(), 1..6), resources(), searcher()),
        (hyperparameters, max_restarts, checkpoint_policy) in
            (proptest::collection::btree_map(text(), text(), 0..3), any::<u32>(), policy()),
        (checkpoint_storage, seed) in (storage(), option::of(any::<u32>())),
        (bind_mounts, environment) in (mounts(), environment()),
    ) -> ExperimentConfig {
        ExperimentConfig {
            name, description, labels, workspace, project, entrypoint, resources, searcher,
            hyperparameters: hyperparameters
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect::<BTreeMap<_, _>>(),
            max_restarts, checkpoint_policy, checkpoint_storage,
            reproducibility: seed.map(|experiment_seed| Reproducibility { experiment_seed }),
            bind_mounts, environment,
        }
    }
}

prop_compose! {
    fn command()(
        description in option::of(text()), resources in resources(), bind_mounts in mounts(),
        environment in environment(), work_dir in option::of(text()),
        entrypoint in option::of(vec(text(), 1..6)),
    ) -> CommandConfig {
        CommandConfig { description, resources, bind_mounts, environment, work_dir, entrypoint }
    }
}

proptest! {
    #[test]
    fn experiment_render_then_parse_is_identity(config in experiment()) {
        let yaml = config.to_yaml().expect("render");
        prop_assert_eq!(ExperimentConfig::from_yaml(&yaml).expect("parse"), config);
    }

    #[test]
    fn command_render_then_parse_is_identity(config in command()) {
        let yaml = config.to_yaml().expect("render");
        prop_assert_eq!(CommandConfig::from_yaml(&yaml).expect("parse"), config);
    }
}
