//! The `environment` section's checks: each backend's settings, and a dataset's reward functions
//! and the settings their rules need.

use super::{at_most, limits};
use crate::{Environment, PlanError};

/// The backend's settings.
pub(super) fn environment(
    environment: &Environment,
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    match environment {
        Environment::Openenv {
            tasks,
            max_sessions,
            app,
            ..
        } => {
            check(
                app.split_once(':').is_some_and(|(module, attribute)| {
                    !module.is_empty()
                        && !attribute.is_empty()
                        && !app.contains(char::is_whitespace)
                }),
                "environment.app",
                format!("{app:?} is not MODULE:ATTRIBUTE, e.g. \"my_env.server.app:app\""),
            )?;
            check(
                !tasks.is_empty(),
                "environment.tasks",
                "list at least one reset payload".to_owned(),
            )?;
            check(
                *max_sessions >= 1,
                "environment.max_sessions",
                "must be at least 1".to_owned(),
            )?;
            at_most(
                *max_sessions,
                limits::MAX_SESSIONS,
                "environment.max_sessions",
                check,
            )?;
        }
        Environment::Nemo {
            tasks,
            server_config,
            ..
        } => {
            check(
                !tasks.is_empty(),
                "environment.tasks",
                "list at least one dataset row".to_owned(),
            )?;
            for key in ["entrypoint", "host", "port", "domain"] {
                check(
                    !server_config.contains_key(key),
                    "environment.server_config",
                    format!("`{key}` is set by the bridge (it runs the server); leave it out"),
                )?;
            }
        }
        Environment::Fixture { tasks } => {
            check(
                tasks.count >= 1,
                "environment.tasks.count",
                "must be at least 1".to_owned(),
            )?;
            at_most(
                tasks.count,
                limits::MAX_DRAWN_TASKS,
                "environment.tasks.count",
                check,
            )?;
        }
        Environment::Dataset { rewards, .. } => dataset_rewards(rewards, check)?,
    }
    Ok(())
}

/// A dataset's reward functions: at least one, each named once, with the settings its rule needs
/// and no others.
fn dataset_rewards(
    rewards: &[crate::Reward],
    check: &impl Fn(bool, &str, String) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    check(
        !rewards.is_empty(),
        "environment.rewards",
        "name at least one reward, e.g. {\"name\": \"correct\", \"rule\": \
         \"final_number\", \"column\": \"answer\"}"
            .to_owned(),
    )?;
    for (i, r) in rewards.iter().enumerate() {
        let at = |field: &str| format!("environment.rewards[{i}].{field}");
        check(
            !r.name.is_empty()
                && r.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            &at("name"),
            format!("{:?}: use letters, digits, `_` and `-`", r.name),
        )?;
        check(
            rewards.iter().filter(|o| o.name == r.name).count() == 1,
            &at("name"),
            format!("{:?} names two rewards", r.name),
        )?;
        check(
            r.weight.is_finite(),
            &at("weight"),
            format!("{} must be a finite number", r.weight),
        )?;
        let given = [
            ("column", r.column.is_some()),
            ("pattern", r.pattern.is_some()),
            ("tag", r.tag.is_some()),
            ("max_chars", r.max_chars.is_some()),
            ("file", r.file.is_some()),
            ("function", r.function.is_some()),
        ];
        for (setting, present) in given {
            let needed = r.rule.needs().contains(&setting);
            check(
                present == needed,
                &at(setting),
                if needed {
                    format!("the {:?} rule needs `{setting}`", r.rule)
                } else {
                    format!("the {:?} rule takes no `{setting}`", r.rule)
                },
            )?;
        }
        if let Some(pattern) = &r.pattern {
            check(
                regex::Regex::new(pattern).is_ok(),
                &at("pattern"),
                format!("{pattern:?} is not a regular expression"),
            )?;
        }
        for (setting, present) in [
            ("python", r.python.is_some()),
            ("timeout_s", r.timeout_s.is_some()),
        ] {
            check(
                !present || r.rule == crate::RewardRule::Python,
                &at(setting),
                format!("the {:?} rule takes no `{setting}`", r.rule),
            )?;
        }
        check(
            r.timeout_s != Some(0),
            &at("timeout_s"),
            "must be at least 1".to_owned(),
        )?;
        check(
            r.max_chars != Some(0),
            &at("max_chars"),
            "must be at least 1".to_owned(),
        )?;
    }
    Ok(())
}
