//! The task order: each epoch is a Fisher–Yates shuffle drawn from a ChaCha stream keyed by
//! (seed, epoch), so the whole order is a function of the seed and the cursor alone. The cursor
//! (epoch, position) is all a resumed run needs; a cursor at the end of an epoch rolls over to
//! the next one (the epoch-boundary resume that made verl's loader yield nothing).

use hr_env::Task;
use hr_policy::PolicyRng;
use serde::{Deserialize, Serialize};

use crate::GrpoError;

/// Where the sampler stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataCursor {
    /// Epochs completed.
    pub epoch: u64,
    /// Tasks taken in this epoch.
    pub position: usize,
}

/// Hands out batches of tasks in a seeded, resumable order.
#[derive(Debug, Clone)]
pub struct TaskSampler {
    tasks: Vec<Task>,
    seed: u64,
    cursor: DataCursor,
    order: Vec<usize>,
}

fn shuffled(len: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut rng =
        PolicyRng::from_seed(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17));
    let mut order: Vec<usize> = (0..len).collect();
    for i in (1..len).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

impl TaskSampler {
    /// A sampler at the start of epoch 0.
    pub fn new(tasks: Vec<Task>, seed: u64) -> Result<Self, GrpoError> {
        Self::at(
            tasks,
            seed,
            DataCursor {
                epoch: 0,
                position: 0,
            },
        )
    }

    /// A sampler at `cursor` (from a snapshot).
    pub fn at(tasks: Vec<Task>, seed: u64, cursor: DataCursor) -> Result<Self, GrpoError> {
        if tasks.is_empty() {
            return Err(GrpoError::Config {
                field: "tasks",
                message: "the task set is empty".to_owned(),
            });
        }
        if cursor.position > tasks.len() {
            return Err(GrpoError::State(format!(
                "data cursor position {} is past the {} tasks",
                cursor.position,
                tasks.len()
            )));
        }
        let order = shuffled(tasks.len(), seed, cursor.epoch);
        Ok(Self {
            tasks,
            seed,
            cursor,
            order,
        })
    }

    /// The current cursor.
    pub fn cursor(&self) -> DataCursor {
        self.cursor
    }

    /// Epochs of the task set consumed so far, fractional (TRL's logged `epoch`).
    pub fn epochs(&self) -> f64 {
        self.cursor.epoch as f64 + self.cursor.position as f64 / self.tasks.len() as f64
    }

    /// The next `n` tasks, continuing into the next epoch when this one runs out.
    pub fn next_batch(&mut self, n: usize) -> Vec<Task> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            if self.cursor.position >= self.tasks.len() {
                self.cursor = DataCursor {
                    epoch: self.cursor.epoch + 1,
                    position: 0,
                };
                self.order = shuffled(self.tasks.len(), self.seed, self.cursor.epoch);
            }
            out.push(self.tasks[self.order[self.cursor.position]].clone());
            self.cursor.position += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks(n: usize) -> Vec<Task> {
        (0..n)
            .map(|i| Task {
                id: format!("t{i}"),
                payload: serde_json::Value::Null,
            })
            .collect()
    }

    fn ids(batch: &[Task]) -> Vec<String> {
        batch.iter().map(|t| t.id.clone()).collect()
    }

    #[test]
    fn every_epoch_is_a_permutation_and_epochs_differ() -> Result<(), GrpoError> {
        let mut s = TaskSampler::new(tasks(6), 9)?;
        s.next_batch(3);
        assert_eq!(s.epochs(), 0.5);
        let mut s = TaskSampler::new(tasks(6), 9)?;
        let (a, b) = (ids(&s.next_batch(6)), ids(&s.next_batch(6)));
        assert_eq!(s.epochs(), 2.0);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, ids(&tasks(6)));
        assert_ne!(a, b);
        assert_eq!(
            s.cursor(),
            DataCursor {
                epoch: 1,
                position: 6
            }
        );
        Ok(())
    }

    #[test]
    fn resuming_at_any_cursor_continues_the_same_sequence_even_at_an_epoch_boundary()
    -> Result<(), GrpoError> {
        let mut whole = TaskSampler::new(tasks(5), 4)?;
        let all: Vec<String> = (0..6).flat_map(|_| ids(&whole.next_batch(3))).collect();
        for stop in 0..6 {
            let mut first = TaskSampler::new(tasks(5), 4)?;
            let mut seen: Vec<String> = (0..stop).flat_map(|_| ids(&first.next_batch(3))).collect();
            let mut second = TaskSampler::at(tasks(5), 4, first.cursor())?;
            seen.extend((stop..6).flat_map(|_| ids(&second.next_batch(3))));
            assert_eq!(
                seen,
                all,
                "stopped after batch {stop} at {:?}",
                first.cursor()
            );
        }
        // Off by one: the control must change the sequence.
        let mut first = TaskSampler::new(tasks(5), 4)?;
        first.next_batch(3);
        let off = DataCursor {
            position: first.cursor().position + 1,
            ..first.cursor()
        };
        assert_ne!(
            ids(&TaskSampler::at(tasks(5), 4, off)?.next_batch(3)),
            all[3..6]
        );
        assert!(
            TaskSampler::at(
                tasks(5),
                4,
                DataCursor {
                    epoch: 0,
                    position: 6
                }
            )
            .is_err()
        );
        Ok(())
    }
}
