//! The fixture's state: a small deterministic computation advanced one step at a time by an
//! explicit, serialisable RNG (xorshift64*). Its digest covers the state and the RNG, so a resume
//! that skipped the RNG restore diverges at once.

use hr_seal::sha256_hex;
use serde::{Deserialize, Serialize};

/// The explicit RNG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixtureRng {
    /// The full state.
    pub state: u64,
}

impl FixtureRng {
    /// From a seed (0 is mapped to a fixed non-zero state).
    pub fn seeded(seed: u64) -> Self {
        Self {
            state: if seed == 0 {
                0x9E37_79B9_7F4A_7C15
            } else {
                seed
            },
        }
    }

    /// The next draw.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

impl hr_snapshot::RngState for FixtureRng {
    fn save_state(&self) -> Vec<u8> {
        self.state.to_le_bytes().to_vec()
    }

    fn restore_state(&mut self, state: &[u8]) {
        if let Ok(bytes) = <[u8; 8]>::try_from(state) {
            self.state = u64::from_le_bytes(bytes);
        }
    }
}

/// The computation's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureState {
    /// Steps done.
    pub step: u64,
    /// The running value.
    pub value: u64,
    /// The RNG.
    pub rng: FixtureRng,
}

impl FixtureState {
    /// The state before step 1.
    pub fn new(seed: u64) -> Self {
        Self {
            step: 0,
            value: seed,
            rng: FixtureRng::seeded(seed),
        }
    }

    /// One step: a draw from the RNG mixed into the value.
    pub fn advance(&mut self) {
        let draw = self.rng.next_u64();
        self.step += 1;
        let mut z = self.value ^ draw ^ self.step.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.value = z ^ (z >> 31);
    }

    /// The metric reported per step.
    pub fn loss(&self) -> f64 {
        (self.value % 10_000) as f64 / 10_000.0
    }

    /// The state's canonical bytes (what the snapshot stores).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("state serialises")
    }

    /// sha256 of [`FixtureState::to_bytes`].
    pub fn digest(&self) -> String {
        sha256_hex(&self.to_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_computation_is_deterministic_and_depends_on_the_rng() {
        let mut a = FixtureState::new(7);
        let mut b = FixtureState::new(7);
        for _ in 0..8 {
            a.advance();
            b.advance();
        }
        assert_eq!(a, b);
        let mut c = a.clone();
        c.rng = FixtureRng::seeded(7);
        a.advance();
        c.advance();
        assert_ne!(a.value, c.value, "a reset RNG changes the next step");
    }
}
