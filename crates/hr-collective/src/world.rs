//! Who this process is among a trial's ranks, from the launcher's variables.

use crate::CollectiveError;

/// Most ranks of one trial (Determined's largest slot counts are far below).
pub const MAX_RANKS: usize = 1024;

/// This process's place among the ranks of a trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    /// `RANK`: 0 is the chief.
    pub rank: usize,
    /// `WORLD_SIZE`: the ranks over every container.
    pub size: usize,
    /// `LOCAL_RANK`: the device index on this node.
    pub local_rank: usize,
    /// `MASTER_ADDR`: where the chief listens.
    pub chief_addr: String,
    /// The chief's port: `INTER_TRAIN_PROCESS_COMM_PORT_1`, else `MASTER_PORT`.
    pub port: u16,
}

impl World {
    /// The world the launcher described, or `None` when this process runs alone (no
    /// `WORLD_SIZE`, or 1).
    pub fn from_env() -> Result<Option<World>, CollectiveError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// As [`World::from_env`], reading variables through `var`.
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<World>, CollectiveError> {
        let number = |name: &'static str| -> Result<Option<usize>, CollectiveError> {
            var(name)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| CollectiveError::Env {
                        var: name,
                        message: format!("{v:?} is not a whole number"),
                    })
                })
                .transpose()
        };
        let size = number("WORLD_SIZE")?.unwrap_or(1);
        if size <= 1 {
            return Ok(None);
        }
        let env = |var: &'static str, message: String| CollectiveError::Env { var, message };
        if size > MAX_RANKS {
            return Err(env(
                "WORLD_SIZE",
                format!("{size} is over {MAX_RANKS} ranks"),
            ));
        }
        let missing = |var: &'static str| {
            env(
                var,
                "not set; start each rank through a launcher (`hessian-recipes launch` or \
                 Determined's torch_distributed)"
                    .to_owned(),
            )
        };
        let rank = number("RANK")?.ok_or_else(|| missing("RANK"))?;
        if rank >= size {
            return Err(env(
                "RANK",
                format!("{rank} must be below WORLD_SIZE {size}"),
            ));
        }
        let local_rank = number("LOCAL_RANK")?.ok_or_else(|| missing("LOCAL_RANK"))?;
        let chief_addr = var("MASTER_ADDR")
            .filter(|a| !a.trim().is_empty())
            .ok_or_else(|| missing("MASTER_ADDR"))?;
        let port_var = if var("INTER_TRAIN_PROCESS_COMM_PORT_1").is_some() {
            "INTER_TRAIN_PROCESS_COMM_PORT_1"
        } else {
            "MASTER_PORT"
        };
        let port = number(port_var)?
            .ok_or_else(|| missing(port_var))
            .and_then(|p| {
                u16::try_from(p)
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| env(port_var, format!("{p} is not a port")))
            })?;
        Ok(Some(World {
            rank,
            size,
            local_rank,
            chief_addr: chief_addr.trim().to_owned(),
            port,
        }))
    }

    /// Whether this rank is the chief (rank 0): the only one that talks to the master, writes
    /// the run's files and publishes checkpoints.
    pub fn is_chief(&self) -> bool {
        self.rank == 0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn world(vars: &[(&str, &str)]) -> Result<Option<World>, CollectiveError> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        World::from_vars(|name| vars.get(name).cloned())
    }

    const TORCHRUN: &[(&str, &str)] = &[
        ("RANK", "3"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "10.0.0.5"),
        ("MASTER_PORT", "29400"),
        ("INTER_TRAIN_PROCESS_COMM_PORT_1", "12360"),
    ];

    #[test]
    fn torchruns_variables_name_the_rank_and_determineds_port_wins_over_the_stores() {
        let w = world(TORCHRUN).expect("valid").expect("a world");
        assert_eq!(
            w,
            World {
                rank: 3,
                size: 4,
                local_rank: 1,
                chief_addr: "10.0.0.5".to_owned(),
                port: 12360,
            }
        );
        assert!(!w.is_chief());
        let without: Vec<_> = TORCHRUN[..5].to_vec();
        assert_eq!(
            world(&without).expect("valid").expect("a world").port,
            29400
        );
    }

    #[test]
    fn one_rank_or_none_is_no_world() {
        assert_eq!(world(&[]).expect("valid"), None);
        assert_eq!(world(&[("WORLD_SIZE", "1")]).expect("valid"), None);
    }

    #[test]
    fn bad_variables_are_named() {
        let var = |vars: &[(&str, &str)]| match world(vars) {
            Err(CollectiveError::Env { var, .. }) => var,
            other => panic!("{other:?}"),
        };
        assert_eq!(var(&[("WORLD_SIZE", "two")]), "WORLD_SIZE");
        assert_eq!(var(&[("WORLD_SIZE", "100000")]), "WORLD_SIZE");
        assert_eq!(var(&[("WORLD_SIZE", "2")]), "RANK");
        let mut vars = TORCHRUN.to_vec();
        vars[0] = ("RANK", "4");
        assert_eq!(var(&vars), "RANK");
        vars[0] = ("RANK", "0");
        vars[5] = ("INTER_TRAIN_PROCESS_COMM_PORT_1", "70000");
        assert_eq!(var(&vars), "INTER_TRAIN_PROCESS_COMM_PORT_1");
    }
}
