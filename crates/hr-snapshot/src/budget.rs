//! The persistent deadline and cumulative GPU-seconds budget: set once when the run starts,
//! carried in every sealed snapshot, charged as allocations run, never renewed by a pause or a
//! restart.

use serde::{Deserialize, Serialize};

/// The run's time budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Absolute deadline, seconds since the Unix epoch.
    pub deadline_unix_s: u64,
    /// Total GPU-seconds the run may use across all allocations.
    pub gpu_seconds_limit: u64,
    /// GPU-seconds used so far.
    pub gpu_seconds_used: u64,
}

impl Budget {
    /// A fresh budget: `max_wall_seconds` from `now`, `gpu_seconds_limit` in total.
    pub fn start(now_unix_s: u64, max_wall_seconds: u64, gpu_seconds_limit: u64) -> Self {
        Self {
            deadline_unix_s: now_unix_s.saturating_add(max_wall_seconds),
            gpu_seconds_limit,
            gpu_seconds_used: 0,
        }
    }

    /// Charges GPU time.
    pub fn charge(&mut self, gpu_seconds: u64) {
        self.gpu_seconds_used = self.gpu_seconds_used.saturating_add(gpu_seconds);
    }

    /// Whether the run must stop: past the deadline or out of GPU time.
    pub fn exhausted(&self, now_unix_s: u64) -> bool {
        now_unix_s >= self.deadline_unix_s || self.gpu_seconds_used >= self.gpu_seconds_limit
    }

    /// The budget's sealed payload bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("budget serialises")
    }

    /// Reads a sealed budget.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}
