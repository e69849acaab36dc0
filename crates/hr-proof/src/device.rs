//! The device a run's tensors lived on, as each allocation records it and each training proof
//! names it: a proof holds for the device it was made on, and the gate admits a main run only on
//! the same kind and model.

use serde::{Deserialize, Serialize};

/// What ran the tensors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// The `--device` value: `cpu`, `cuda` or `vulkan`.
    pub kind: String,
    /// The processor's architecture and GEMM vector class for `cpu` (`x86_64 AVX-512`), the GPU's name for `cuda`
    /// (`NVIDIA H200`), the adapter's for `vulkan` (`llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// What else decides the kernels, when there is anything (`compute capability 9.0`, the
    /// Vulkan driver and its version).
    pub detail: Option<String>,
    /// The tensor library's versions (`burn 0.21.0, cubecl 0.10.0`).
    pub libraries: String,
}

impl Device {
    /// A device of `kind` named `name`, run through the tensor `libraries`, with no detail.
    pub fn new(
        kind: impl Into<String>,
        name: impl Into<String>,
        libraries: impl Into<String>,
    ) -> Self {
        Device {
            kind: kind.into(),
            name: name.into(),
            detail: None,
            libraries: libraries.into(),
        }
    }

    /// The same device with `detail` recorded.
    #[must_use]
    pub fn with_detail(self, detail: Option<String>) -> Self {
        Device { detail, ..self }
    }

    /// Why a run on `other` is not covered by a proof made on `self`, if it is not: another
    /// kind, or another model of that kind. Libraries and details are recorded, not compared:
    /// the proof's binary digest already binds the libraries.
    pub fn mismatch(&self, other: &Device) -> Option<String> {
        (self.kind != other.kind || self.name != other.name)
            .then(|| format!("made on {self}, not on {other}"))
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.name)?;
        if let Some(detail) = &self.detail {
            write!(f, ", {detail}")?;
        }
        write!(f, " ({})", self.libraries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(kind: &str, name: &str) -> Device {
        Device::new(kind, name, "burn 0.21.0")
    }

    #[test]
    fn kind_and_model_must_match_and_the_refusal_names_both() {
        let h200 = device("cuda", "NVIDIA H200");
        assert_eq!(h200.mismatch(&h200.clone()), None);
        let cpu = device("cpu", "x86_64");
        assert_eq!(
            cpu.mismatch(&h200).as_deref(),
            Some("made on cpu: x86_64 (burn 0.21.0), not on cuda: NVIDIA H200 (burn 0.21.0)")
        );
        assert!(
            h200.mismatch(&device("cuda", "NVIDIA A100-SXM4-80GB"))
                .is_some()
        );
        let mut detailed = h200.clone();
        detailed.detail = Some("compute capability 9.0".into());
        assert_eq!(h200.mismatch(&detailed), None);
        assert_eq!(
            detailed.to_string(),
            "cuda: NVIDIA H200, compute capability 9.0 (burn 0.21.0)"
        );
    }
}
