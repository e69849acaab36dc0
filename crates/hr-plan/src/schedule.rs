//! What a plan's checkpoint schedule comes to: how many checkpoints a run saves and how many a
//! local run keeps at its end (`checkpoints.keep_last` and the steps its evaluation adopts).

use crate::Plan;

impl Plan {
    /// The checkpoints a run of the plan saves (every `checkpoints.every` steps and the last)
    /// and those a local run keeps when it ends; computed, not listed, so a long run costs
    /// nothing to count.
    pub fn checkpoint_counts(&self) -> (u64, u64) {
        let every = self.checkpoints.every.max(1);
        let multiples = self.steps / every;
        let extra = !self.steps.is_multiple_of(every);
        let saved = multiples + u64::from(extra);
        let keep = self.checkpoints.keep_last as u64;
        if keep == 0 || keep >= saved {
            return (saved, saved);
        }
        // The oldest step of the latest `keep` saves: the last step, then the multiples down.
        let oldest_latest = match (extra, keep) {
            (true, 1) => self.steps,
            (true, _) => (multiples + 2 - keep) * every,
            (false, _) => (multiples + 1 - keep) * every,
        };
        let adopted_older = self.evaluation.as_ref().map_or(0, |e| {
            e.checkpoints.iter().filter(|s| **s < oldest_latest).count() as u64
        });
        (saved, keep + adopted_older)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts by listing every save, as a run makes them.
    fn listed(plan: &Plan) -> (u64, u64) {
        let every = plan.checkpoints.every;
        let saved: Vec<u64> = (1..=plan.steps)
            .filter(|s| s % every == 0 || *s == plan.steps)
            .collect();
        let keep = plan.checkpoints.keep_last;
        let latest = if keep == 0 {
            0
        } else {
            saved.len().saturating_sub(keep)
        };
        let adopted = plan
            .evaluation
            .as_ref()
            .map_or(&[][..], |e| &e.checkpoints[..]);
        let kept = saved
            .iter()
            .enumerate()
            .filter(|(i, s)| *i >= latest || adopted.contains(s))
            .count();
        (saved.len() as u64, kept as u64)
    }

    #[test]
    fn the_counts_are_those_of_the_saves_listed_one_by_one() {
        let text = r#"{"schema_version": 1, "name": "n", "model": {"path": "m"},
            "environment": {"backend": "fixture", "tasks": {"kind": "digits", "count": 5, "seed": 3}},
            "steps": 1, "seeds": {"sampling": 1, "adapter_init": 1, "task_order": 1}}"#;
        let mut plan = Plan::parse(std::path::Path::new("p.json"), text).expect("plan");
        for steps in 1..=23 {
            for every in 1..=7 {
                for keep in 0..=5 {
                    for adopted in [vec![], vec![every.min(steps)], vec![steps]] {
                        plan.steps = steps;
                        plan.checkpoints.every = every;
                        plan.checkpoints.keep_last = keep;
                        plan.evaluation = Some(crate::Evaluation::with_defaults(
                            adopted,
                            crate::TaskSet::Listed { tasks: vec![] },
                            crate::TaskSet::Listed { tasks: vec![] },
                        ));
                        assert_eq!(
                            plan.checkpoint_counts(),
                            listed(&plan),
                            "steps {steps}, every {every}, keep {keep}"
                        );
                    }
                }
            }
        }
    }
}
