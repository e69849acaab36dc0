//! Keeping the policy RNG out of Core calls: its full state is taken before a call and put back
//! after, so reporting or storage (or anything they call back into) can never shift the random
//! stream of training.

/// A random generator whose full state can be saved and restored.
pub trait RngState {
    /// The full state.
    fn save_state(&self) -> Vec<u8>;
    /// Restores a state produced by [`RngState::save_state`].
    fn restore_state(&mut self, state: &[u8]);
}

/// Runs `f` with the RNG and restores the RNG's state afterwards, whatever `f` drew from it.
pub fn with_rng_preserved<R: RngState + ?Sized, T>(rng: &mut R, f: impl FnOnce(&mut R) -> T) -> T {
    let state = rng.save_state();
    let out = f(rng);
    rng.restore_state(&state);
    out
}
