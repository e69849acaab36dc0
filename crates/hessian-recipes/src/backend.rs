//! Backend selection: the Flex CPU backend by default; CUDA (burn-cuda) when built with
//! `--features cuda` and asked for with `--device cuda`; Vulkan (burn-wgpu, SPIR-V) with
//! `--features vulkan` and `--device vulkan`. Whether a CUDA driver and GPU exist is checked
//! before any device is created, and so is NVRTC, which burn-cuda compiles its kernels with,
//! because cudarc panics on a device thread when `libcuda` or `libnvrtc` is missing; a Vulkan
//! device is set up once, with a refusal instead of wgpu's panic when there is none.

use burn::tensor::backend::Backend;
use hr_policy::{Execution, Sampler};
use hr_proof::Device;

use crate::Refused;

/// Where tensors live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DeviceKind {
    /// The pure-Rust Flex CPU backend (bit-deterministic across processes).
    Cpu,
    /// The first CUDA GPU (needs a binary built with `--features cuda`).
    Cuda,
    /// The first Vulkan device (needs a binary built with `--features vulkan`).
    Vulkan,
}

impl DeviceKind {
    /// The `--device` value.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Vulkan => "vulkan",
        }
    }
}

/// The CPU backend.
pub(crate) type Cpu = burn::backend::Flex;

/// How generation and training lay their work out on `kind` (`Policy::with_execution`). Lanes:
/// two on the CPU, where Flex runs element-wise work on one thread and a decode step's small
/// products leave a core idle (on 2 cores, a SmolLM2 rollout 4.6 -> 4.1 s and its loss forward
/// and backward 6.6-7.0 -> 5.3 s); one on a GPU, whose kernels fill it. Tokens are drawn on the
/// host on the CPU (in f64, where the logits already are) and on the device on a GPU, which then
/// reads back two numbers per row instead of the row's logits. Projections of few rows put the
/// weight on the left on the CPU (gemm streams it) and never on a GPU, where the transposed
/// result costs a copy kernel per product (4 fewer launches per layer and decode token on
/// lavapipe, whose own matrix product is then slower). The scoring pass takes its logits 8 Mi
/// at a time on the CPU and [`GPU_SCORE_CHUNK_ELEMENTS`] on a GPU. Constants, not the machine's
/// size: a row's last bits depend on them, and a run resumed on another machine must sample the
/// same.
pub(crate) fn execution(kind: DeviceKind) -> Execution {
    match kind {
        DeviceKind::Cpu => Execution {
            lanes: 2,
            ..Execution::default()
        },
        DeviceKind::Cuda | DeviceKind::Vulkan => Execution {
            lanes: 1,
            sampler: Sampler::Device,
            weight_left_rows: 0,
            score_chunk_elements: GPU_SCORE_CHUNK_ELEMENTS,
        },
    }
}

/// Logit elements a GPU's scoring pass materialises at once (64 Mi f32, 256 MiB, and about three
/// times that with the log-softmax and its gradient): the bench plan's 32 rows × 32 positions
/// of SmolLM2's 49,152 logits in one chunk instead of seven, so its head, log-softmax and
/// gather launch once. A device with less memory than this is not one we train on.
const GPU_SCORE_CHUNK_ELEMENTS: usize = 64 << 20;

/// A job that can run on any backend.
pub(crate) trait OnBackend {
    /// What the job returns.
    type Output;
    /// Runs the job on `device`; `name` is `cpu` or `cuda:N`, for messages.
    fn run<B: Backend>(self, device: B::Device, name: &str) -> anyhow::Result<Self::Output>;
}

/// The locked tensor libraries' versions, as device records name them.
const LIBRARIES: &str = env!("HR_TENSOR_LIBRARIES");

/// The device `kind` names on this machine, for allocation records and the gate: refused when
/// it cannot run here.
pub(crate) fn identify(kind: DeviceKind) -> anyhow::Result<Device> {
    match kind {
        DeviceKind::Cpu => Ok(device(kind, cpu_name(), None)),
        DeviceKind::Cuda => cuda::identify(),
        DeviceKind::Vulkan => vulkan::identify(),
    }
}

/// The CPU as the GEMM kernels see it: the architecture and, on x86-64, the widest vector
/// class they dispatch to at run time (AVX-512 or AVX2), whose sums round differently, so a proof
/// made with one class does not cover the other.
fn cpu_name() -> String {
    let arch = std::env::consts::ARCH;
    #[cfg(target_arch = "x86_64")]
    {
        let v4 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512cd")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl");
        let v3 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        if v4 {
            return format!("{arch} AVX-512");
        }
        if v3 {
            return format!("{arch} AVX2");
        }
    }
    arch.to_owned()
}

/// How the GPU backends are built, beyond the libraries' versions: what decides their kernels
/// and where tokens are drawn (the binary's digest binds it too; the record says it to readers).
const GPU_BUILD: &str =
    "fusion, no autotune, greedy and temperature-only sampling on the device (f32 inverse CDF)";

/// The record of a device of `kind` named `name`, built with this binary's tensor libraries.
fn device(kind: DeviceKind, name: String, detail: Option<String>) -> Device {
    let libraries = match kind {
        DeviceKind::Cpu => LIBRARIES.to_owned(),
        DeviceKind::Cuda | DeviceKind::Vulkan => format!("{LIBRARIES}; {GPU_BUILD}"),
    };
    Device::new(kind.flag(), name, libraries).with_detail(detail)
}

/// The refusal of `--device FLAG` by a binary built without that backend.
#[cfg(not(all(feature = "cuda", feature = "vulkan")))]
fn built_without(flag: &str, name: &str) -> anyhow::Error {
    Refused(format!(
        "--device {flag}: this binary was built without {name}; rebuild with `cargo build \
         --release -p hessian-recipes --features {flag}`, or use --device cpu"
    ))
    .into()
}

/// Runs `f`, turning a panic into `None` without printing it: cudarc panics when it cannot load
/// `libcuda` or `libnvrtc`, wgpu when it finds no device.
#[cfg(any(feature = "cuda", feature = "vulkan"))]
fn quietly<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Option<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let ran = std::panic::catch_unwind(f);
    std::panic::set_hook(hook);
    ran.ok()
}

/// The GPU this process trains on: a data-parallel rank's `LOCAL_RANK`, else the first.
static GPU_INDEX: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Trains on GPU `index` (CUDA's numbering), set before the device is identified.
pub(crate) fn use_gpu(index: usize) {
    GPU_INDEX.store(index, std::sync::atomic::Ordering::Relaxed);
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn gpu_index() -> usize {
    GPU_INDEX.load(std::sync::atomic::Ordering::Relaxed)
}

/// Runs `job` on the chosen backend.
pub(crate) fn dispatch<J: OnBackend>(kind: DeviceKind, job: J) -> anyhow::Result<J::Output> {
    match kind {
        DeviceKind::Cpu => job.run::<Cpu>(Default::default(), "cpu"),
        DeviceKind::Cuda => cuda::run(job),
        DeviceKind::Vulkan => vulkan::run(job),
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::OnceLock;

    use cudarc::driver::{CudaContext, DriverError, sys::CUresult};
    use hr_proof::Device;

    use super::{DeviceKind, OnBackend, Refused, quietly};

    /// Counts CUDA devices.
    fn device_count() -> Result<i32, String> {
        match quietly(CudaContext::device_count) {
            Some(Ok(n)) => Ok(n),
            Some(Err(DriverError(CUresult::CUDA_ERROR_STUB_LIBRARY))) => Err(
                "the libcuda.so loaded is the CUDA toolkit's stub, not the driver's: take the \
                 toolkit's `lib64/stubs` folder off LD_LIBRARY_PATH"
                    .to_owned(),
            ),
            Some(Err(e)) => Err(format!("the CUDA driver failed to initialise ({e})")),
            None => Err(
                "libcuda could not be loaded: no NVIDIA driver is installed or it is not on the \
                 loader path"
                    .to_owned(),
            ),
        }
    }

    /// burn-cuda compiles its kernels at run time with NVRTC: check that it loads and compiles
    /// before a device thread needs it.
    fn nvrtc_compiles() -> Result<(), String> {
        match quietly(|| cudarc::nvrtc::compile_ptx("extern \"C\" __global__ void probe() {}")) {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(format!("NVRTC failed to compile a probe kernel ({e:?})")),
            None => Err(
                "libnvrtc could not be loaded: burn-cuda compiles its kernels at run time \
                 with NVRTC from the CUDA toolkit; put the folder holding libnvrtc.so.N (the \
                 toolkit's lib64) on LD_LIBRARY_PATH"
                    .to_owned(),
            ),
        }
    }

    /// This process's GPU ([`super::use_gpu`]), once the driver and NVRTC are known to work,
    /// or why it cannot run here.
    fn probe() -> Result<Device, String> {
        let index = super::gpu_index();
        match device_count()? {
            n if usize::try_from(n).is_ok_and(|n| n > index) => {}
            0 => return Err("the CUDA driver reports no GPU".to_owned()),
            n => {
                return Err(format!(
                    "this rank's LOCAL_RANK is {index} but the driver reports {n} GPU(s)"
                ));
            }
        }
        nvrtc_compiles()?;
        let gpu = CudaContext::new(index).map_err(|e| format!("GPU {index}: {e}"))?;
        let name = gpu.name().map_err(|e| format!("GPU {index}'s name: {e}"))?;
        let (major, minor) = gpu
            .compute_capability()
            .map_err(|e| format!("GPU {index}'s compute capability: {e}"))?;
        Ok(super::device(
            DeviceKind::Cuda,
            name,
            Some(format!("compute capability {major}.{minor}")),
        ))
    }

    /// [`probe`], once per process (`train` identifies the device before it dispatches).
    pub(super) fn identify() -> anyhow::Result<Device> {
        static PROBED: OnceLock<Result<Device, String>> = OnceLock::new();
        PROBED
            .get_or_init(probe)
            .clone()
            .map_err(|why| Refused(format!("--device cuda: {why}; use --device cpu")).into())
    }

    pub(super) fn run<J: OnBackend>(job: J) -> anyhow::Result<J::Output> {
        identify()?;
        let index = super::gpu_index();
        let device = burn::backend::cuda::CudaDevice { index };
        job.run::<burn::backend::Cuda>(device, &format!("cuda:{index}"))
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda {
    use hr_proof::Device;

    use super::{OnBackend, built_without};

    pub(super) fn identify() -> anyhow::Result<Device> {
        Err(built_without("cuda", "CUDA"))
    }

    pub(super) fn run<J: OnBackend>(_job: J) -> anyhow::Result<J::Output> {
        Err(built_without("cuda", "CUDA"))
    }
}

#[cfg(feature = "vulkan")]
mod vulkan {
    use std::sync::OnceLock;

    use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, graphics, init_setup};
    use hr_proof::Device;

    use super::{DeviceKind, OnBackend, Refused, quietly};

    /// The one Vulkan setup of this process (wgpu registers a device once), or why there is none.
    fn setup() -> &'static Result<Device, String> {
        static SETUP: OnceLock<Result<Device, String>> = OnceLock::new();
        SETUP.get_or_init(|| {
            let made = quietly(|| {
                init_setup::<graphics::Vulkan>(
                    &WgpuDevice::DefaultDevice,
                    RuntimeOptions::default(),
                )
            });
            let setup = made.ok_or_else(|| {
                "no Vulkan device could be set up: install a Vulkan driver (on a machine with no \
                 GPU, Mesa's lavapipe: the Debian package mesa-vulkan-drivers)"
                    .to_owned()
            })?;
            let info = setup.adapter.get_info();
            Ok(super::device(
                DeviceKind::Vulkan,
                info.name,
                Some(format!("{} {}", info.driver, info.driver_info)),
            ))
        })
    }

    pub(super) fn identify() -> anyhow::Result<Device> {
        setup()
            .clone()
            .map_err(|why| Refused(format!("--device vulkan: {why}; use --device cpu")).into())
    }

    pub(super) fn run<J: OnBackend>(job: J) -> anyhow::Result<J::Output> {
        identify()?;
        job.run::<burn::backend::Vulkan>(WgpuDevice::DefaultDevice, "vulkan")
    }
}

#[cfg(not(feature = "vulkan"))]
mod vulkan {
    use hr_proof::Device;

    use super::{OnBackend, built_without};

    pub(super) fn identify() -> anyhow::Result<Device> {
        Err(built_without("vulkan", "Vulkan"))
    }

    pub(super) fn run<J: OnBackend>(_job: J) -> anyhow::Result<J::Output> {
        Err(built_without("vulkan", "Vulkan"))
    }
}
