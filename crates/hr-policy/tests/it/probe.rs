//! The GEMM probe: a rate from real products, and a refused size.

use hr_policy::gemm_rate;

use crate::Cpu;

#[test]
fn the_gemm_probe_times_real_products_and_refuses_an_empty_size() -> anyhow::Result<()> {
    let rate = gemm_rate::<Cpu>(&Default::default(), 64, 2)?;
    assert_eq!(rate.size, 64);
    assert!(rate.seconds > 0.0 && rate.flops_per_second.is_finite());
    assert!(
        (rate.flops_per_second * rate.seconds - 2.0 * 64f64.powi(3)).abs() < 1.0,
        "{rate:?}"
    );
    let err = gemm_rate::<Cpu>(&Default::default(), 0, 1).expect_err("refused");
    assert!(err.to_string().contains("GEMM size"), "{err}");
    Ok(())
}
