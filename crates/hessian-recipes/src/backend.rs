//! Backend selection: the Flex CPU backend by default; CUDA (burn-cuda) when built with
//! `--features cuda` and asked for with `--device cuda`. Whether a CUDA driver and GPU exist is
//! checked before any device is created, because cudarc panics on a device thread when `libcuda`
//! is missing.

use burn::tensor::backend::Backend;

use crate::Refused;

/// Where tensors live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DeviceKind {
    /// The pure-Rust Flex CPU backend (bit-deterministic across processes).
    Cpu,
    /// The first CUDA GPU (needs a binary built with `--features cuda`).
    Cuda,
}

impl DeviceKind {
    /// The `--device` value.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
        }
    }
}

/// The CPU backend.
pub(crate) type Cpu = burn::backend::Flex;

/// A job that can run on any backend.
pub(crate) trait OnBackend {
    /// What the job returns.
    type Output;
    /// Runs the job on `device`; `name` is `cpu` or `cuda:N`, for messages.
    fn run<B: Backend>(self, device: B::Device, name: &str) -> anyhow::Result<Self::Output>;
}

/// Runs `job` on the chosen backend.
pub(crate) fn dispatch<J: OnBackend>(kind: DeviceKind, job: J) -> anyhow::Result<J::Output> {
    match kind {
        DeviceKind::Cpu => job.run::<Cpu>(Default::default(), "cpu"),
        DeviceKind::Cuda => cuda::run(job),
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::{OnBackend, Refused};

    /// Counts CUDA devices without letting cudarc's "cannot load libcuda" panic escape.
    fn device_count() -> Result<i32, String> {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let counted = std::panic::catch_unwind(cudarc::driver::CudaContext::device_count);
        std::panic::set_hook(hook);
        match counted {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(format!("the CUDA driver failed to initialise ({e})")),
            Err(_) => Err(
                "libcuda could not be loaded: no NVIDIA driver is installed or it is not on the \
                           loader path"
                    .to_owned(),
            ),
        }
    }

    pub(super) fn run<J: OnBackend>(job: J) -> anyhow::Result<J::Output> {
        match device_count() {
            Ok(n) if n > 0 => job.run::<burn::backend::Cuda>(Default::default(), "cuda:0"),
            Ok(_) => Err(Refused(
                "--device cuda: the CUDA driver reports no GPU; use --device cpu".to_owned(),
            )
            .into()),
            Err(why) => Err(Refused(format!("--device cuda: {why}; use --device cpu")).into()),
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda {
    use super::{OnBackend, Refused};

    pub(super) fn run<J: OnBackend>(_job: J) -> anyhow::Result<J::Output> {
        Err(Refused(
            "--device cuda: this binary was built without CUDA; rebuild with \
             `cargo build --release -p hessian-recipes --features cuda`, or use --device cpu"
                .to_owned(),
        )
        .into())
    }
}
