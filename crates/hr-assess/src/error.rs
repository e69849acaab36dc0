//! Why a report could not be written.

/// A report that could not be drawn, written or sealed.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] hr_plot::PlotError),
    /// The report could not be sealed.
    #[error(transparent)]
    Seal(#[from] hr_seal::SealError),
    /// A file could not be written.
    #[error(transparent)]
    Io(#[from] hr_files::IoError),
}
