//! `hessian-recipes probe gemm`: times f32 matrix products on the chosen backend
//! (`hr_policy::gemm_rate`) and prints the rate.

use std::process::ExitCode;

use burn::tensor::backend::Backend;

use crate::backend::{OnBackend, dispatch};
use crate::cli::GemmArgs;

pub(crate) fn gemm(args: &GemmArgs) -> anyhow::Result<ExitCode> {
    dispatch(args.device, Job(args))
}

struct Job<'a>(&'a GemmArgs);

impl OnBackend for Job<'_> {
    type Output = ExitCode;

    fn run<B: Backend>(self, device: B::Device, name: &str) -> anyhow::Result<ExitCode> {
        let args = self.0;
        let rate = hr_policy::gemm_rate::<B>(&device, args.size as usize, args.repeats as usize)?;
        if args.json {
            let line = serde_json::json!({
                "size": rate.size,
                "seconds": rate.seconds,
                "flops_per_second": rate.flops_per_second,
                "device": name,
            });
            println!("{line}");
        } else {
            println!(
                "{name}: [{n}, {n}] × [{n}, {n}] f32 in {:.4} s: {:.1} GFLOP/s (best of {})",
                rate.seconds,
                rate.flops_per_second / 1e9,
                args.repeats,
                n = rate.size
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}
