//! Where a trial's ranks run: its containers (addresses and slot counts, from the rendezvous
//! file) and this container's slots, as Determined's launchers read them to start one rank per
//! slot (`hessian-recipes launch`).

use hr_det::task_info::{CLUSTER_FILE, ClusterInfoFile, RENDEZVOUS_FILE, RendezvousInfoFile, env};

use crate::CoreError;
use crate::info::{info_dir, read_file};

/// A trial's containers and this one's place among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// This container's rank (0 holds the chief).
    pub container_rank: usize,
    /// Every container's address, by rank.
    pub container_addrs: Vec<String>,
    /// Every container's slots, by rank.
    pub container_slot_counts: Vec<usize>,
}

impl Placement {
    /// The trial's placement: the rendezvous file where there is one, else this container alone
    /// with the slots of `cluster.json` or `DET_SLOT_IDS`. `None` outside a trial (neither
    /// names slots).
    pub fn from_environment() -> Result<Option<Placement>, CoreError> {
        let dir = info_dir();
        let slots: Vec<i32> = match read_file::<ClusterInfoFile>(&dir.join(CLUSTER_FILE))? {
            Some(cluster) => cluster.slot_ids,
            None => match std::env::var(env::SLOT_IDS).ok().filter(|v| !v.is_empty()) {
                Some(text) => serde_json::from_str(&text).map_err(|e| {
                    CoreError::Environment(format!("{}={text:?}: {e}", env::SLOT_IDS))
                })?,
                None => return Ok(None),
            },
        };
        let rendezvous = read_file::<RendezvousInfoFile>(&dir.join(RENDEZVOUS_FILE))?;
        place(slots.len(), rendezvous).map(Some)
    }

    /// This container's slots.
    pub fn local_slots(&self) -> usize {
        self.container_slot_counts[self.container_rank]
    }

    /// The rank of this container's first slot: the slots of the containers before it.
    pub fn first_rank(&self) -> usize {
        self.container_slot_counts[..self.container_rank]
            .iter()
            .sum()
    }

    /// The slots of every container.
    pub fn world_size(&self) -> usize {
        self.container_slot_counts.iter().sum()
    }

    /// Where the chief listens: the first container, or this machine when it is the only one.
    pub fn chief_addr(&self) -> &str {
        if self.container_addrs.len() == 1 {
            "127.0.0.1"
        } else {
            &self.container_addrs[0]
        }
    }
}

/// The placement of a container with `slots` slots described by `rendezvous`.
fn place(slots: usize, rendezvous: Option<RendezvousInfoFile>) -> Result<Placement, CoreError> {
    let Some(r) = rendezvous else {
        return Ok(Placement {
            container_rank: 0,
            container_addrs: vec!["127.0.0.1".to_owned()],
            container_slot_counts: vec![slots],
        });
    };
    let bad = |m: String| CoreError::Environment(format!("{RENDEZVOUS_FILE}: {m}"));
    let counts = r
        .container_slot_counts
        .iter()
        .map(|n| usize::try_from(*n).map_err(|_| bad(format!("slot count {n}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let rank = usize::try_from(r.container_rank)
        .ok()
        .filter(|k| *k < counts.len() && counts.len() == r.container_addrs.len())
        .ok_or_else(|| {
            bad(format!(
                "container {} of {} addresses and {} slot counts",
                r.container_rank,
                r.container_addrs.len(),
                counts.len()
            ))
        })?;
    if counts[rank] != slots {
        return Err(bad(format!(
            "it gives this container {} slots, {} lists {slots}",
            counts[rank],
            env::SLOT_IDS
        )));
    }
    Ok(Placement {
        container_rank: rank,
        container_addrs: r.container_addrs,
        container_slot_counts: counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendezvous(rank: i32, counts: Vec<i32>) -> RendezvousInfoFile {
        RendezvousInfoFile {
            container_addrs: (0..counts.len()).map(|i| format!("10.0.0.{i}")).collect(),
            container_rank: rank,
            container_slot_counts: counts,
        }
    }

    #[test]
    fn ranks_count_the_slots_of_the_containers_before_this_one() {
        let second = place(8, Some(rendezvous(1, vec![8, 8]))).expect("valid");
        assert_eq!(
            (
                second.first_rank(),
                second.local_slots(),
                second.world_size()
            ),
            (8, 8, 16)
        );
        assert_eq!(second.chief_addr(), "10.0.0.0");
        let alone = place(2, None).expect("valid");
        assert_eq!((alone.first_rank(), alone.world_size()), (0, 2));
        assert_eq!(alone.chief_addr(), "127.0.0.1");
        let one = place(2, Some(rendezvous(0, vec![2]))).expect("valid");
        assert_eq!(one.chief_addr(), "127.0.0.1", "one container: this machine");
    }

    #[test]
    fn a_rendezvous_that_contradicts_itself_or_the_slots_is_refused() {
        assert!(place(8, Some(rendezvous(2, vec![8, 8]))).is_err());
        assert!(place(4, Some(rendezvous(0, vec![8, 8]))).is_err());
        assert!(place(8, Some(rendezvous(0, vec![8, -1]))).is_err());
    }
}
