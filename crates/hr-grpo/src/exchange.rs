//! Data-parallel steps keyed by shard, not by rank. A step's tasks are cut into `S` contiguous
//! shards; each shard has its own sampling stream, generation batch and micro-batches, so what a
//! shard computes does not depend on which process computes it. `N` ranks (`N` divides `S`) each
//! own `S / N` contiguous shards and exchange bytes only by [`Exchange::all_gather`] (a copy);
//! every floating-point combination is a fixed pairwise tree over shard index ([`tree_fold`]),
//! so 1, 2, 4 or 8 ranks give the same bits.

use std::ops::Range;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::GrpoError;

/// How the ranks of a data-parallel step reach each other. The transport lives above the tensor
/// layer (`hr-collective`'s all-gather through the chief, wired in by `hr-train`); [`Alone`] is
/// the one rank of an ordinary run.
pub trait Exchange {
    /// This process's rank, `0..ranks()`.
    fn rank(&self) -> usize;
    /// How many ranks take part.
    fn ranks(&self) -> usize;
    /// Every rank's `bytes`, in rank order (this rank's own among them). All ranks call it the
    /// same number of times, in the same order.
    fn all_gather(&mut self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>, GrpoError>;
}

/// The single rank of a run on one device.
#[derive(Debug, Clone, Copy, Default)]
pub struct Alone;

impl Exchange for Alone {
    fn rank(&self) -> usize {
        0
    }

    fn ranks(&self) -> usize {
        1
    }

    fn all_gather(&mut self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>, GrpoError> {
        Ok(vec![bytes])
    }
}

/// Deliberate bugs of a data-parallel step: the negative controls its equality tests must see
/// diverge from one rank's run at the first step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParallelFault {
    /// Each rank gives its shards the streams of their place on the rank, not of the shard (the
    /// rank-seeded sampling of TRL, verl and OpenRLHF).
    RankKeyedRng,
    /// Shard gradients summed one after another, as they come, instead of the fixed tree (an
    /// all-reduce's order).
    SequentialSum,
}

impl ParallelFault {
    /// Every fault, by its name in `HR_FAULT_PARALLEL`.
    pub const ALL: [(&'static str, ParallelFault); 2] = [
        ("rank-keyed-rng", ParallelFault::RankKeyedRng),
        ("sequential-sum", ParallelFault::SequentialSum),
    ];

    /// The fault named `name`.
    pub fn parse(name: &str) -> Option<ParallelFault> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }
}

/// Sums `parts` one after another: the order [`ParallelFault::SequentialSum`] breaks the tree
/// with.
pub(crate) fn sequential_fold(parts: Vec<Option<Vec<f32>>>) -> Option<Vec<f32>> {
    parts.into_iter().flatten().reduce(|mut sum, part| {
        for (a, b) in sum.iter_mut().zip(part) {
            *a += b;
        }
        sum
    })
}

/// Most bytes one rank's part decodes from (the transport's frame bound).
const MAX_PART: usize = 4 << 30;

/// Every rank's `value`, in rank order, through [`Exchange::all_gather`] (bincode: floats travel
/// as their bits; a type whose serde attributes skip fields needs a self-describing format).
pub fn gather<T: DeserializeOwned>(
    exchange: &mut dyn Exchange,
    value: &impl Serialize,
) -> Result<Vec<T>, GrpoError> {
    // No length a peer claims is allocated past what a frame can carry.
    let config = bincode::config::standard().with_limit::<MAX_PART>();
    let bytes = bincode::serde::encode_to_vec(value, config)
        .map_err(|e| GrpoError::Exchange(format!("encoding this rank's part: {e}")))?;
    exchange
        .all_gather(bytes)?
        .iter()
        .enumerate()
        .map(|(rank, bytes)| {
            bincode::serde::decode_from_slice(bytes, config)
                .map(|(value, _)| value)
                .map_err(|e| GrpoError::Exchange(format!("decoding rank {rank}'s part: {e}")))
        })
        .collect()
}

/// The shards rank `rank` of `ranks` owns: `shards / ranks` contiguous ones.
pub(crate) fn owned(shards: usize, rank: usize, ranks: usize) -> Range<usize> {
    let per = shards / ranks.max(1);
    rank * per..(rank + 1) * per
}

/// Refuses a layout the shards cannot be spread over: `shards` a power of two that divides the
/// step's tasks, and the ranks a divisor of it.
pub(crate) fn check_layout(tasks: usize, shards: usize, ranks: usize) -> Result<(), GrpoError> {
    let config = |field, message| Err(GrpoError::Config { field, message });
    if !shards.is_power_of_two() || !tasks.is_multiple_of(shards) {
        return config(
            "parallel.shards",
            format!("{shards} must be a power of two that divides the step's {tasks} tasks"),
        );
    }
    if ranks == 0 || !shards.is_multiple_of(ranks) {
        return config(
            "resources.slots_per_trial",
            format!(
                "{ranks} ranks cannot share {shards} shards evenly; use a number of slots that \
                 divides parallel.shards"
            ),
        );
    }
    Ok(())
}

/// Sums `parts` (one vector per leaf, all of one length) as a fixed pairwise tree: neighbours
/// first, then neighbouring sums, level by level. For a power-of-two count every aligned run of
/// leaves is a whole subtree, so folding each rank's run first and then the ranks' roots gives the
/// same bits as folding every leaf in one process. `None` leaves (no gradient) add nothing.
pub fn tree_fold(mut parts: Vec<Option<Vec<f32>>>) -> Option<Vec<f32>> {
    while parts.len() > 1 {
        let mut next = Vec::with_capacity(parts.len().div_ceil(2));
        let mut iter = parts.into_iter();
        while let Some(left) = iter.next() {
            next.push(match (left, iter.next().flatten()) {
                (Some(mut l), Some(r)) => {
                    for (a, b) in l.iter_mut().zip(r) {
                        *a += b;
                    }
                    Some(l)
                }
                (l, r) => l.or(r),
            });
        }
        parts = next;
    }
    parts.into_iter().next().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values spread over many magnitudes, so that the order of the sums shows in the bits.
    fn leaves(count: usize, len: usize) -> Vec<Option<Vec<f32>>> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            unit * 10f32.powi((state % 7) as i32 - 3)
        };
        (0..count)
            .map(|_| Some((0..len).map(|_| next()).collect()))
            .collect()
    }

    #[test]
    fn folding_each_ranks_subtree_then_the_roots_equals_folding_all_leaves() {
        let all = leaves(8, 4096);
        let whole = tree_fold(all.clone());
        for ranks in [1, 2, 4, 8] {
            let roots = (0..ranks)
                .map(|r| tree_fold(all[owned(8, r, ranks)].to_vec()))
                .collect();
            assert_eq!(tree_fold(roots), whole, "{ranks} ranks");
        }
    }

    #[test]
    fn a_sequential_fold_gives_other_bits_than_the_tree() {
        let all = leaves(8, 4096);
        let tree = tree_fold(all.clone()).expect("sum");
        let sequential = sequential_fold(all).expect("sum");
        let differ = tree.iter().zip(&sequential).filter(|(a, b)| a != b).count();
        assert!(differ > 4096 / 10, "only {differ} of 4096 elements differ");
    }

    #[test]
    fn missing_leaves_add_nothing() {
        let sum = tree_fold(vec![
            None,
            Some(vec![1.0, 2.0]),
            None,
            Some(vec![0.5, 0.25]),
        ]);
        assert_eq!(sum, Some(vec![1.5, 2.25]));
        assert_eq!(tree_fold(vec![None, None]), None);
    }

    #[test]
    fn layouts_that_do_not_divide_are_refused_naming_the_field() {
        assert!(check_layout(8, 4, 2).is_ok());
        let field = |r: Result<(), GrpoError>| match r {
            Err(GrpoError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(check_layout(8, 3, 1)), "parallel.shards");
        assert_eq!(field(check_layout(6, 4, 1)), "parallel.shards");
        assert_eq!(field(check_layout(8, 4, 3)), "resources.slots_per_trial");
        assert_eq!(owned(8, 1, 4), 2..4);
    }
}
