//! Native training state: everything a [`Trainer`] needs to continue exactly, as files:
//! the adapters (PEFT files), AdamW's moments and step counts by adapter name
//! (`optimizer.safetensors`), and `trainer_state.json` (step, sampling RNG). Keyed by names, not
//! Burn's `ParamId`s, so a new process restores it onto freshly loaded adapters.

use std::collections::BTreeMap;
use std::path::Path;

use burn::optim::record::AdaptorRecord;
use burn::optim::{AdamWState, AdaptiveMomentumState, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use hr_policy::{
    ADAPTER_CONFIG, ADAPTER_WEIGHTS, AdapterFiles, ChatTokenizer, Policy, PolicyRng, RngState,
    adapter_files, adapters_from_files, f32_safetensors, read_f32_safetensors,
};
use serde::{Deserialize, Serialize};

use crate::trainer::named_params;
use crate::{EntropyControl, GrpoConfig, GrpoError, Trainer};

/// AdamW's state, by adapter tensor name.
pub const OPTIMIZER_STATE: &str = "optimizer.safetensors";
/// Step and RNG.
pub const TRAINER_STATE: &str = "trainer_state.json";

/// The files of a native state, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeState {
    /// File name → bytes (`adapter_model.safetensors`, `adapter_config.json`,
    /// `optimizer.safetensors`, `trainer_state.json`).
    pub files: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrainerStateFile {
    schema_version: u32,
    /// The next optimiser step.
    step: u64,
    /// The sampling RNG.
    rng: RngState,
    /// AdamW's step count per adapter tensor.
    adam_steps: BTreeMap<String, usize>,
    /// Tokens of every step so far (absent from states written before it was kept).
    #[serde(default)]
    tokens_seen: u64,
    /// The adaptive entropy controller, under adaptive control only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    entropy_control: Option<EntropyControl>,
}

fn host<B: burn::tensor::backend::Backend>(
    t: Tensor<B, 2>,
) -> Result<(Vec<usize>, Vec<u8>), GrpoError> {
    let shape = t.dims().to_vec();
    let values = t
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| GrpoError::Policy(format!("reading optimizer state: {e:?}")))?;
    Ok((shape, values.iter().flat_map(|v| v.to_le_bytes()).collect()))
}

fn corrupt(what: impl Into<String>) -> GrpoError {
    GrpoError::State(what.into())
}

impl<B: AutodiffBackend> Trainer<B> {
    /// Captures the state that continues this run exactly. Its PEFT files name `base_model`
    /// (a Hub id or a model folder) as their `base_model_name_or_path`, so PEFT loads a
    /// checkpoint's adapter as it loads any other; resuming reads only the tensors.
    pub fn capture(&self, base_model: &str) -> Result<NativeState, GrpoError> {
        let policy_err = |e: hr_policy::PolicyError| GrpoError::Policy(e.to_string());
        let adapters = adapter_files(&self.adapters, base_model).map_err(policy_err)?;
        let record = self.optimizer.to_record();
        let mut tensors = Vec::new();
        let mut adam_steps = BTreeMap::new();
        for (name, param) in named_params(&self.adapters) {
            // A tensor the optimiser has not stepped yet has no state.
            let Some(rec) = record.get(&param.id) else {
                continue;
            };
            let state: AdamWState<B::InnerBackend, 2> = rec.clone().into_state::<2>();
            let (shape, m1) = host(state.momentum.moment_1)?;
            let (_, m2) = host(state.momentum.moment_2)?;
            tensors.push((format!("{name}.exp_avg"), shape.clone(), m1));
            tensors.push((format!("{name}.exp_avg_sq"), shape, m2));
            adam_steps.insert(name, state.momentum.time);
        }
        let optimizer = f32_safetensors(&tensors).map_err(policy_err)?;
        let trainer = TrainerStateFile {
            schema_version: 1,
            step: self.step,
            rng: self.rng.state(),
            adam_steps,
            tokens_seen: self.tokens_seen,
            entropy_control: self.entropy_control,
        };
        let trainer = serde_json::to_vec_pretty(&trainer).map_err(|e| corrupt(e.to_string()))?;
        let files = BTreeMap::from([
            (ADAPTER_WEIGHTS.to_owned(), adapters.weights),
            (ADAPTER_CONFIG.to_owned(), adapters.config),
            (OPTIMIZER_STATE.to_owned(), optimizer),
            (TRAINER_STATE.to_owned(), trainer),
        ]);
        Ok(NativeState { files })
    }

    /// A trainer continuing from `state` (captured by [`Trainer::capture`]); `origin` names the
    /// state in errors. Everything is restored before any randomness is consumed.
    pub fn resume(
        policy: Policy<B>,
        tokenizer: ChatTokenizer,
        config: GrpoConfig,
        state: &NativeState,
        origin: &Path,
    ) -> Result<Self, GrpoError> {
        let file = |name: &str| {
            state
                .files
                .get(name)
                .ok_or_else(|| corrupt(format!("{}: `{name}` is missing", origin.display())))
        };
        let policy_err = |e: hr_policy::PolicyError| GrpoError::Policy(e.to_string());
        let meta: TrainerStateFile = serde_json::from_slice(file(TRAINER_STATE)?)
            .map_err(|e| corrupt(format!("{}: {TRAINER_STATE}: {e}", origin.display())))?;
        if meta.schema_version != 1 {
            return Err(corrupt(format!(
                "{}: {TRAINER_STATE}: schema_version {} is not 1",
                origin.display(),
                meta.schema_version
            )));
        }
        let files = AdapterFiles {
            weights: file(ADAPTER_WEIGHTS)?.clone(),
            config: file(ADAPTER_CONFIG)?.clone(),
        };
        let device = policy.device().clone();
        let adapters = adapters_from_files::<B>(policy.config(), &files, origin, &device)
            .map_err(policy_err)?;
        let rng = PolicyRng::from_state(&meta.rng).map_err(policy_err)?;
        let moments = read_f32_safetensors(&origin.join(OPTIMIZER_STATE), file(OPTIMIZER_STATE)?)
            .map_err(policy_err)?;
        let mut trainer = Trainer::new(policy, tokenizer, adapters, rng, config)?;
        // A fresh optimiser's (empty) record: Burn keys it with its own map type.
        let mut record = trainer.optimizer.to_record();
        for (name, param) in named_params(&trainer.adapters) {
            // Every adapter tensor has been stepped after the first optimiser step: a tensor
            // without state would silently restart AdamW's moments, so it is refused.
            let Some(&time) = meta.adam_steps.get(&name) else {
                if meta.step == 0 {
                    continue;
                }
                return Err(corrupt(format!(
                    "{}: {TRAINER_STATE}: `{name}` has no optimizer state at step {} (AdamW \
                     would restart from zero moments)",
                    origin.display(),
                    meta.step
                )));
            };
            let moment = |suffix: &str| -> Result<Tensor<B::InnerBackend, 2>, GrpoError> {
                let key = format!("{name}.{suffix}");
                let (shape, values) = moments.get(&key).ok_or_else(|| {
                    corrupt(format!(
                        "{}: {OPTIMIZER_STATE}: `{key}` is missing",
                        origin.display()
                    ))
                })?;
                if shape.as_slice() != param.dims() {
                    return Err(corrupt(format!(
                        "{}: {OPTIMIZER_STATE}: `{key}` has shape {shape:?}, the adapter {:?}",
                        origin.display(),
                        param.dims()
                    )));
                }
                Ok(Tensor::from_data(
                    TensorData::new(values.clone(), [shape[0], shape[1]]),
                    &device,
                ))
            };
            let momentum = AdaptiveMomentumState {
                time,
                moment_1: moment("exp_avg")?,
                moment_2: moment("exp_avg_sq")?,
                max_moment_2: None,
            };
            record.insert(
                param.id,
                AdaptorRecord::from_state::<2>(AdamWState { momentum }),
            );
        }
        if record.len() != meta.adam_steps.len() || moments.len() != 2 * meta.adam_steps.len() {
            return Err(corrupt(format!(
                "{}: {TRAINER_STATE} names optimizer state for tensors the adapters lack",
                origin.display()
            )));
        }
        trainer.optimizer = trainer.optimizer.load_record(record);
        trainer.step = meta.step;
        trainer.tokens_seen = meta.tokens_seen;
        match (meta.entropy_control, trainer.entropy_control.is_some()) {
            (Some(control), true) => trainer.entropy_control = Some(control),
            (None, false) => {}
            (kept, _) => {
                return Err(corrupt(format!(
                    "{}: {TRAINER_STATE} {} adaptive entropy state, but the plan {} \
                     `grpo.use_adaptive_entropy`; resume with the plan that wrote it",
                    origin.display(),
                    if kept.is_some() { "holds" } else { "lacks" },
                    if kept.is_some() {
                        "does not set"
                    } else {
                        "sets"
                    },
                )));
            }
        }
        Ok(trainer)
    }
}

impl NativeState {
    /// Writes the files into an existing empty folder.
    pub fn write(&self, dir: &Path) -> Result<(), GrpoError> {
        for (name, bytes) in &self.files {
            std::fs::write(dir.join(name), bytes)
                .map_err(|e| corrupt(format!("writing {}: {e}", dir.join(name).display())))?;
        }
        Ok(())
    }

    /// Reads the four files from `dir`.
    pub fn read(dir: &Path) -> Result<Self, GrpoError> {
        Self::read_with(|name| {
            std::fs::read(dir.join(name))
                .map_err(|e| format!("reading {}: {e}", dir.join(name).display()))
        })
    }

    /// Reads the four files through `read` (given each file's name), e.g. from a verified
    /// snapshot.
    pub fn read_with(
        mut read: impl FnMut(&str) -> Result<Vec<u8>, String>,
    ) -> Result<Self, GrpoError> {
        let mut files = BTreeMap::new();
        for name in [
            ADAPTER_WEIGHTS,
            ADAPTER_CONFIG,
            OPTIMIZER_STATE,
            TRAINER_STATE,
        ] {
            files.insert(name.to_owned(), read(name).map_err(corrupt)?);
        }
        Ok(Self { files })
    }
}
