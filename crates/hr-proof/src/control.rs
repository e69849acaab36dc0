//! Deliberate resume bugs: the negative controls a native qualification must catch (the trainer
//! applies them at resume; a proof made with one names it and never admits a run).

/// A fault applied to the restored state before the trainer resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Re-seed the sampling RNG instead of restoring it (the ms-swift PR #9935 bug class).
    SkipRng,
    /// Start a fresh optimizer instead of restoring its moments.
    DropOptimizer,
    /// Resume the data cursor one task too far.
    CursorOffByOne,
}

impl Control {
    /// Every control, by its command-line name.
    pub const ALL: [(&'static str, Control); 3] = [
        ("skip-rng", Control::SkipRng),
        ("drop-optimizer", Control::DropOptimizer),
        ("cursor-off-by-one", Control::CursorOffByOne),
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, c)| *c == self)
            .map_or("", |(n, _)| n)
    }

    /// Parses a command-line name.
    pub fn parse(name: &str) -> Result<Control, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                format!("unknown control `{name}`; use one of {}", names.join(", "))
            })
    }
}
