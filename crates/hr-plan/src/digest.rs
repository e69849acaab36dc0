//! A plan's digests: the canonical one every snapshot and proof is bound to, and its family's,
//! which a short qualification plan and the long run it qualifies share.

use sha2::{Digest, Sha256};

use crate::{Environment, Plan};

/// Optimizer steps of the seed's qualification run: a plan longer than this is sustained
/// training, which runs only on proofs of its family (the same plan but for its name, length
/// and checkpoint schedule: [`Plan::family_sha256`]).
pub const QUALIFICATION_STEPS: u64 = 4;

impl Plan {
    /// The plan's canonical JSON digest (sha256, hex), which every snapshot is bound to. The
    /// evaluation section and `checkpoints.keep_last` (which do not change training) and where
    /// files live are left out
    /// (the model folder, a service's interpreter and a dataset's files may be reached by other
    /// paths from another machine); what they hold is checked by loading them.
    pub fn sha256(&self) -> String {
        let mut canonical = self.clone();
        canonical.model.path = Default::default();
        canonical.evaluation = None;
        canonical.checkpoints.keep_last = crate::Checkpoints::default().keep_last;
        match &mut canonical.environment {
            Environment::Fixture { .. } => {}
            Environment::Openenv { python, .. } | Environment::Nemo { python, .. } => {
                *python = Default::default()
            }
            // Where the files are, like the model folder; what they hold is read when the run
            // starts.
            Environment::Dataset {
                train,
                dev,
                held_out,
                rewards,
            } => {
                *train = Default::default();
                *dev = None;
                *held_out = None;
                for r in rewards {
                    r.file = r.file.as_ref().map(|_| Default::default());
                    r.python = None;
                }
            }
        }
        let bytes = serde_json::to_vec(&canonical).expect("a plan serialises");
        hex::encode(Sha256::digest(bytes))
    }

    /// The digest of the plan's family: the plan without its name, its length and its
    /// checkpoint schedule.
    pub fn family_sha256(&self) -> String {
        let mut family = self.clone();
        family.name = String::new();
        family.steps = 0;
        family.checkpoints = Default::default();
        family.sha256()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Plan;

    fn plan(extra: &str) -> Plan {
        let text = format!(
            r#"{{"schema_version": 1, "name": "p", "model": {{"path": "m"}},
            "environment": {{"backend": "fixture", "tasks": {{"kind": "digits", "count": 2, "seed": 1}}}},
            "steps": 4, "seeds": {{"sampling": 1, "adapter_init": 2, "task_order": 3}}{extra}}}"#
        );
        Plan::parse(Path::new("plan.json"), &text).expect("plan")
    }

    #[test]
    fn the_evaluation_section_and_the_model_path_leave_the_digest_alone_but_training_does_not() {
        let bare = plan("");
        let evaluated = plan(
            r#", "evaluation": {"checkpoints": [4], "dev": {"count": 1, "seed": 1},
                "held_out": {"count": 1, "seed": 2}}"#,
        );
        let mut moved = bare.clone();
        moved.model.path = "/elsewhere/m".into();
        assert_eq!(bare.sha256(), evaluated.sha256());
        assert_eq!(bare.sha256(), moved.sha256());
        let mut other = bare.clone();
        other.grpo.beta = 0.1;
        assert_ne!(bare.sha256(), other.sha256());
        // A longer run of the same settings is of the same family, not the same plan.
        let mut longer = bare.clone();
        longer.steps = 256;
        longer.name = "main".into();
        assert_ne!(bare.sha256(), longer.sha256());
        assert_eq!(bare.family_sha256(), longer.family_sha256());
        assert_ne!(bare.family_sha256(), other.family_sha256());
    }
}
