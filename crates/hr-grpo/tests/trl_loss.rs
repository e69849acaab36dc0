//! The loss against TRL 1.16's own `GRPOTrainer._compute_loss`: every case
//! `xtask/conformance/trl_loss.py` wrote (each loss type × importance level, with clipping,
//! KL, the off-policy and high-entropy masks, the entropy bonus and gradient accumulation) must
//! give TRL's loss, gradients and logged metrics within 1e-6 (f32).
//!
//! The cases are read from `HR_TRL_LOSS_CASES` when set (`cargo xtask conformance loss` writes
//! them there from the installed TRL), else from the copy in `tests/data`, written the same way.

use std::collections::BTreeMap;

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Tensor, TensorData};
use hr_grpo::{
    AdaptiveEntropy, EntropyControl, ImportanceSamplingLevel, LossConfig, LossInputs, LossType,
    Vespo, Whole, grpo_loss, high_entropy_mask,
};
use serde::Deserialize;

type B = Autodiff<Flex>;

/// What TRL computed.
#[derive(Deserialize)]
struct Trl {
    loss: f64,
    grad_logp: Vec<Vec<f64>>,
    grad_entropy: Option<Vec<Vec<f64>>>,
    metrics: BTreeMap<String, f64>,
    /// The adaptive entropy controller after the call.
    entropy_control: Option<EntropyControl>,
}

/// One case: TRL's config overrides, the inputs and TRL's results.
#[derive(Deserialize)]
struct Case {
    name: String,
    config: serde_json::Map<String, serde_json::Value>,
    on_policy: bool,
    gradient_accumulation_steps: usize,
    window_tokens: Option<f64>,
    max_completion_length: usize,
    logp: Vec<Vec<f32>>,
    old: Vec<Vec<f32>>,
    #[serde(rename = "ref")]
    reference: Vec<Vec<f32>>,
    advantages: Vec<f32>,
    entropy: Vec<Vec<f32>>,
    mask: Vec<Vec<bool>>,
    trl: Trl,
}

impl Case {
    /// Our config for TRL's overrides (TRL's defaults otherwise).
    fn loss_config(&self) -> anyhow::Result<LossConfig> {
        let get = |key: &str| self.config.get(key);
        let f = |key: &str, default: f64| {
            get(key)
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(default)
        };
        let epsilon = f("epsilon", 0.2);
        Ok(LossConfig {
            epsilon_low: epsilon,
            epsilon_high: f("epsilon_high", epsilon),
            beta: f("beta", 0.0),
            loss_type: serde_json::from_value::<LossType>(
                get("loss_type").cloned().unwrap_or("dapo".into()),
            )?,
            max_completion_length: self.max_completion_length,
            importance_sampling_level: serde_json::from_value::<ImportanceSamplingLevel>(
                get("importance_sampling_level")
                    .cloned()
                    .unwrap_or("token".into()),
            )?,
            delta: get("delta").and_then(serde_json::Value::as_f64),
            use_bias_correction_kl: get("use_bias_correction_kl")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true),
            sapo_temperature_pos: f("sapo_temperature_pos", 1.0),
            sapo_temperature_neg: f("sapo_temperature_neg", 1.05),
            vespo: Vespo::default(),
            off_policy_mask_threshold: get("off_policy_mask_threshold")
                .and_then(serde_json::Value::as_f64),
            top_entropy_quantile: f("top_entropy_quantile", 1.0),
            entropy_coef: f("entropy_coef", 0.0),
            adaptive_entropy: get("use_adaptive_entropy")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false)
                .then(|| AdaptiveEntropy {
                    coef_min: f("entropy_coef_min", 0.0),
                    coef_max: f("entropy_coef_max", 1.0),
                    coef_delta: f("entropy_coef_delta", 0.005),
                    target: f("entropy_target", 0.2),
                }),
        })
    }

    /// The controller before the call, under adaptive control.
    fn entropy_control(&self, config: &LossConfig) -> Option<EntropyControl> {
        config.adaptive_entropy.map(|_| EntropyControl {
            coef: config.entropy_coef,
            last_world_entropy: self
                .config
                .get("last_world_entropy")
                .and_then(serde_json::Value::as_f64),
        })
    }
}

fn tensor(rows: &[Vec<f32>]) -> Tensor<B, 2> {
    let (n, t) = (rows.len(), rows[0].len());
    let values: Vec<f32> = rows.iter().flatten().copied().collect();
    Tensor::from_data(TensorData::new(values, [n, t]), &Default::default())
}

fn host(t: Tensor<B, 2>) -> anyhow::Result<Vec<f64>> {
    Ok(t.into_data().convert::<f64>().to_vec::<f64>()?)
}

/// Our loss, its gradients with respect to the log-probs and (when they reach it) the
/// entropies, and the metrics under TRL's names.
struct Ours {
    loss: f64,
    grad_logp: Vec<f64>,
    grad_entropy: Option<Vec<f64>>,
    metrics: BTreeMap<String, f64>,
    /// The adaptive entropy controller after the step.
    entropy_control: Option<EntropyControl>,
}

/// [`Ours`] for a case.
fn ours(case: &Case) -> anyhow::Result<Ours> {
    let mut config = case.loss_config()?;
    // As the trainer runs it: the coefficient the controller applies, then its update from the
    // mean entropy of the tokens the bonus acts on.
    let mut control = case.entropy_control(&config);
    if let (Some(settings), Some(control)) = (&config.adaptive_entropy, &control) {
        config.entropy_coef = control.applied(settings);
    }
    let logp = tensor(&case.logp).require_grad();
    let entropy = tensor(&case.entropy).require_grad();
    let kept = (config.top_entropy_quantile < 1.0)
        .then(|| high_entropy_mask(&case.entropy, &case.mask, config.top_entropy_quantile));
    let advantages: Vec<f64> = case.advantages.iter().map(|a| f64::from(*a)).collect();
    let out = grpo_loss(
        LossInputs {
            logp: logp.clone(),
            old_logp: (!case.on_policy).then(|| tensor(&case.old)),
            ref_logp: Some(tensor(&case.reference)),
            entropy: Some(entropy.clone()),
            advantages: &advantages,
            mask: &case.mask,
            entropy_mask: kept.as_deref(),
        },
        &config,
        Whole {
            batch_active_tokens: case.window_tokens,
            accumulation: case.gradient_accumulation_steps,
            ..Whole::default()
        },
    )?;
    let loss = f64::from(
        out.loss
            .clone()
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()?[0],
    );
    let grads = out.loss.backward();
    let grad_logp = host(
        logp.grad(&grads)
            .map(Tensor::from_inner)
            .ok_or_else(|| anyhow::anyhow!("no gradient"))?,
    )?;
    let grad_entropy = entropy
        .grad(&grads)
        .map(Tensor::from_inner)
        .map(host)
        .transpose()?;
    let mut metrics = BTreeMap::new();
    let active = hr_grpo::active_positions(&case.mask);
    metrics.insert(
        "entropy".to_owned(),
        active
            .iter()
            .map(|(i, j)| f64::from(case.entropy[*i][*j]))
            .sum::<f64>()
            / active.len() as f64,
    );
    if config.loss_type.clips() {
        metrics.insert("clip_ratio/low_mean".to_owned(), out.clip_ratio_low);
        metrics.insert("clip_ratio/high_mean".to_owned(), out.clip_ratio_high);
        metrics.insert("clip_ratio/region_mean".to_owned(), out.clip_ratio_region);
        let flat = |rows: &[Option<f64>]| rows.iter().flatten().copied().collect::<Vec<f64>>();
        let low = flat(&out.row_clip_low);
        let high = flat(&out.row_clip_high);
        metrics.insert(
            "clip_ratio/low_min".to_owned(),
            low.iter().copied().fold(f64::INFINITY, f64::min),
        );
        metrics.insert(
            "clip_ratio/high_max".to_owned(),
            high.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        );
    }
    for (key, value) in [
        ("cispo_clip_ratio", out.cispo_clip_ratio),
        ("vespo/phi_seq_mean", out.vespo_phi_mean),
        ("kl", out.kl),
    ] {
        if let Some(value) = value {
            metrics.insert(key.to_owned(), value);
        }
    }
    if let (Some(settings), Some(control)) = (&config.adaptive_entropy, &mut control) {
        let kept_tokens: Vec<f64> = active
            .iter()
            .filter(|(i, j)| kept.as_ref().is_none_or(|k| k[*i][*j]))
            .map(|(i, j)| f64::from(case.entropy[*i][*j]))
            .collect();
        let world = kept_tokens.iter().sum::<f64>() / (kept_tokens.len() as f64).max(1.0);
        control.update(settings, world);
    }
    if let Some(policy_loss) = out.policy_loss {
        metrics.insert("policy_loss".to_owned(), policy_loss);
        let coef = control.map_or(config.entropy_coef, |c| c.coef);
        metrics.insert("entropy_coef".to_owned(), coef);
    }
    Ok(Ours {
        loss,
        grad_logp,
        grad_entropy,
        metrics,
        entropy_control: control,
    })
}

/// Absolute difference for values up to 1, relative above (TRL's f32 against ours).
fn near(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn every_configuration_gives_trls_loss_gradients_and_metrics() -> anyhow::Result<()> {
    let path = std::env::var_os("HR_TRL_LOSS_CASES").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/trl_loss.jsonl"),
        std::path::PathBuf::from,
    );
    let text = std::fs::read_to_string(&path)?;
    let mut failures = Vec::new();
    let (mut cases, mut differing) = (0, 0);
    for line in text.lines() {
        let case: Case = serde_json::from_str(line)?;
        cases += 1;
        let Ours {
            loss,
            grad_logp,
            grad_entropy,
            metrics,
            entropy_control,
        } = ours(&case)?;
        let name = &case.name;
        let before = failures.len();
        if !near(loss, case.trl.loss) {
            failures.push(format!("{name}: loss {loss} vs TRL's {}", case.trl.loss));
        }
        let want: Vec<f64> = case.trl.grad_logp.iter().flatten().copied().collect();
        if let Some(k) = (0..want.len()).find(|k| !near(grad_logp[*k], want[*k])) {
            failures.push(format!(
                "{name}: d loss / d logp[{k}] {} vs TRL's {}",
                grad_logp[k], want[k]
            ));
        }
        let want_entropy: Vec<f64> = case
            .trl
            .grad_entropy
            .iter()
            .flatten()
            .flatten()
            .copied()
            .collect();
        let got_entropy = grad_entropy.unwrap_or_default();
        // TRL's bonus with a coefficient of 0 (adaptive control above target) leaves zeros.
        let zero = |g: &[f64]| g.iter().all(|v| *v == 0.0);
        if zero(&want_entropy) != zero(&got_entropy)
            || (!zero(&want_entropy)
                && (0..want_entropy.len()).any(|k| !near(got_entropy[k], want_entropy[k])))
        {
            failures.push(format!(
                "{name}: d loss / d entropy {got_entropy:?} vs TRL's {want_entropy:?}"
            ));
        }
        for (key, want) in &case.trl.metrics {
            match metrics.get(key) {
                Some(got) if near(*got, *want) => {}
                got => failures.push(format!("{name}: metric {key} {got:?} vs TRL's {want}")),
            }
        }
        for key in metrics
            .keys()
            .filter(|k| !case.trl.metrics.contains_key(*k))
        {
            failures.push(format!("{name}: metric {key} that TRL does not log"));
        }
        let same_control = match (&entropy_control, &case.trl.entropy_control) {
            (Some(ours), Some(trl)) => {
                near(ours.coef, trl.coef)
                    && match (ours.last_world_entropy, trl.last_world_entropy) {
                        (Some(a), Some(b)) => near(a, b),
                        (a, b) => a == b,
                    }
            }
            (ours, trl) => ours.is_none() && trl.is_none(),
        };
        if !same_control {
            failures.push(format!(
                "{name}: entropy control after the step {entropy_control:?} vs TRL's {:?}",
                case.trl.entropy_control
            ));
        }
        differing += usize::from(failures.len() > before);
    }
    assert!(cases >= 100, "only {cases} cases in {}", path.display());
    assert!(
        failures.is_empty(),
        "{differing} of {cases} cases differ from TRL:\n{}",
        failures.join("\n")
    );
    Ok(())
}
