//! The policy's random source: ChaCha8 whose whole state (seed, stream, word position) is
//! serialisable, so a resumed run continues the exact stream. Burn's device RNG is never used.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::PolicyError;

/// A ChaCha8 stream with a serialisable position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRng {
    inner: ChaCha8Rng,
}

/// The full state of a [`PolicyRng`], as JSON-friendly text fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RngState {
    /// The 32-byte key, hex.
    pub seed: String,
    /// The ChaCha stream number.
    pub stream: u64,
    /// Position in 32-bit words, decimal (a u128 does not fit JSON numbers).
    pub word_pos: String,
}

impl PolicyRng {
    /// A stream from a 64-bit seed (ChaCha8's `seed_from_u64`).
    pub fn from_seed(seed: u64) -> Self {
        Self {
            inner: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// An independent stream from this one's key and position, on ChaCha stream `stream` (one
    /// this stream never uses: it is stream 0): drawing from it leaves this one where it is.
    #[must_use]
    pub fn fork(&self, stream: u64) -> Self {
        let mut inner = self.inner.clone();
        inner.set_stream(stream);
        Self { inner }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// A uniform draw in `[0, 1)` with 53 random bits (independent of any `rand` version).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// The current state.
    pub fn state(&self) -> RngState {
        RngState {
            seed: hex::encode(self.inner.get_seed()),
            stream: self.inner.get_stream(),
            word_pos: self.inner.get_word_pos().to_string(),
        }
    }

    /// Restores a state written by [`PolicyRng::state`].
    pub fn from_state(state: &RngState) -> Result<Self, PolicyError> {
        let bad = |what: &str| PolicyError::Request(format!("RNG state: {what}"));
        let mut seed = [0u8; 32];
        hex::decode_to_slice(&state.seed, &mut seed)
            .map_err(|_| bad("`seed` must be 64 hex digits"))?;
        let word_pos: u128 = state
            .word_pos
            .parse()
            .map_err(|_| bad("`word_pos` must be a decimal integer"))?;
        let mut inner = ChaCha8Rng::from_seed(seed);
        inner.set_stream(state.stream);
        inner.set_word_pos(word_pos);
        Ok(Self { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(rng: &mut PolicyRng) -> Vec<u64> {
        (0..4).map(|_| rng.next_u64()).collect()
    }

    /// A fork draws numbers of its own, the same each time from the same position, follows its
    /// parent's position, and leaves the parent where it was.
    #[test]
    fn a_fork_is_its_own_stream_and_leaves_the_parent_in_place() {
        let mut parent = PolicyRng::from_seed(5);
        parent.next_u64();
        let before = parent.state();
        let forked = draws(&mut parent.fork(9));
        assert_eq!(parent.state(), before);
        assert_eq!(forked, draws(&mut parent.fork(9)));
        assert_ne!(forked, draws(&mut parent.clone()));
        parent.next_u64();
        assert_ne!(
            forked,
            draws(&mut parent.fork(9)),
            "the fork follows the position"
        );
    }
}
