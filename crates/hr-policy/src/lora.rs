//! LoRA adapters: `y = x·W + (alpha/r)·(x·A)·B` (rsLoRA: `alpha/√r`) on chosen projections, with
//! only `A` and `B` trainable; with DoRA a trainable magnitude `m` per output row rescales the
//! adapted weight to `m · (W + ΔW) / ‖W + ΔW‖` (the norm held constant for gradients, as PEFT
//! does). Initialised as PEFT does (A Kaiming-uniform, B zero, `m = ‖W‖`) from an explicit RNG.
//! LoRA dropout (PEFT's `lora_dropout`) drops the adapters' input in training passes only, its
//! masks drawn from an explicit stream per pass ([`Adapters::for_training`]).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use burn::module::{Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use crate::{Family, ModelConfig, PolicyError, PolicyRng};

/// A projection LoRA can adapt, named as PEFT's `target_modules` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// `self_attn.q_proj`
    QProj,
    /// `self_attn.k_proj`
    KProj,
    /// `self_attn.v_proj`
    VProj,
    /// `self_attn.o_proj`
    OProj,
    /// `mlp.gate_proj`
    GateProj,
    /// `mlp.up_proj`
    UpProj,
    /// `mlp.down_proj`
    DownProj,
    /// `self_attn.qkv_proj`: Phi-3's q, k and v as one matrix.
    QkvProj,
    /// `mlp.gate_up_proj`: Phi-3's gate and up as one matrix.
    GateUpProj,
}

impl Target {
    /// Every target: the seven of most families in module order, then Phi-3's two fused ones.
    pub const ALL: [Target; 9] = [
        Target::QProj,
        Target::KProj,
        Target::VProj,
        Target::OProj,
        Target::GateProj,
        Target::UpProj,
        Target::DownProj,
        Target::QkvProj,
        Target::GateUpProj,
    ];

    /// The projections a model of `family` has (PEFT's `all-linear` there).
    pub fn of_family(family: Family) -> &'static [Target] {
        const FUSED: [Target; 4] = [
            Target::QkvProj,
            Target::OProj,
            Target::GateUpProj,
            Target::DownProj,
        ];
        if family.fused_projections() {
            &FUSED
        } else {
            &Self::ALL[..7]
        }
    }

    /// PEFT's name (`q_proj`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Target::QProj => "q_proj",
            Target::KProj => "k_proj",
            Target::VProj => "v_proj",
            Target::OProj => "o_proj",
            Target::GateProj => "gate_proj",
            Target::UpProj => "up_proj",
            Target::DownProj => "down_proj",
            Target::QkvProj => "qkv_proj",
            Target::GateUpProj => "gate_up_proj",
        }
    }

    /// Parses PEFT's name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The HF module path inside a decoder layer (`self_attn.q_proj`, `mlp.up_proj`).
    pub fn module_path(self) -> String {
        let parent = match self {
            Target::QProj | Target::KProj | Target::VProj | Target::OProj | Target::QkvProj => {
                "self_attn"
            }
            _ => "mlp",
        };
        format!("{parent}.{}", self.name())
    }

    /// `(in, out)` widths of the projection in `config`.
    pub fn dims(self, config: &ModelConfig) -> (usize, usize) {
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let (q, kv) = (
            config.num_heads * config.head_dim,
            config.num_kv_heads * config.head_dim,
        );
        match self {
            Target::QProj => (h, q),
            Target::KProj | Target::VProj => (h, kv),
            Target::OProj => (q, h),
            Target::GateProj | Target::UpProj => (h, i),
            Target::DownProj => (i, h),
            Target::QkvProj => (h, q + 2 * kv),
            Target::GateUpProj => (h, 2 * i),
        }
    }
}

/// Rank, scaling and targets of a LoRA.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    /// Rank `r`.
    pub rank: usize,
    /// `lora_alpha`; the update is scaled by `alpha / r` (`alpha / √r` with rsLoRA).
    pub alpha: f64,
    /// Projections that get adapters, sorted and unique ([`LoraConfig::fit`] keeps those the
    /// model has).
    pub targets: Vec<Target>,
    /// Rank-stabilised LoRA (PEFT's `use_rslora`): the update is scaled by `alpha / √r`.
    pub rslora: bool,
    /// PEFT's `layers_to_transform`: only these decoder layers, sorted and unique (all when
    /// `None`).
    pub layers: Option<Vec<usize>>,
    /// PEFT's `target_modules` as a regular expression, full-matched (Python's `re.fullmatch`)
    /// against each projection's module name, `model.layers.3.self_attn.q_proj`; `targets`
    /// are then every kind it may pick from and `layers` is unused, as in PEFT.
    pub pattern: Option<String>,
    /// Weight-decomposed LoRA (PEFT's `use_dora`): each adapted projection also trains a
    /// magnitude per output row.
    pub dora: bool,
    /// PEFT's `lora_dropout`: in a training pass each adapter's input is zeroed with this
    /// probability (the rest scaled by `1/(1 − p)`); in `[0, 1)`.
    pub dropout: f64,
}

impl LoraConfig {
    /// A config; targets are sorted and deduplicated. Rank must be at least 1 and alpha positive.
    pub fn new(rank: usize, alpha: f64, mut targets: Vec<Target>) -> Result<Self, PolicyError> {
        if rank == 0 {
            return Err(PolicyError::Request(
                "LoRA rank must be at least 1".to_owned(),
            ));
        }
        if !(alpha.is_finite() && alpha > 0.0) {
            return Err(PolicyError::Request(format!(
                "LoRA alpha must be positive, got {alpha}"
            )));
        }
        targets.sort();
        targets.dedup();
        if targets.is_empty() {
            return Err(PolicyError::Request(
                "LoRA needs at least one target module".to_owned(),
            ));
        }
        Ok(Self {
            rank,
            alpha,
            targets,
            rslora: false,
            layers: None,
            pattern: None,
            dora: false,
            dropout: 0.0,
        })
    }

    /// The same config on `layers` only (PEFT's `layers_to_transform`; `None`: all).
    #[must_use]
    pub fn with_layers(mut self, layers: Option<Vec<usize>>) -> Self {
        self.layers = layers.map(|mut l| {
            l.sort_unstable();
            l.dedup();
            l
        });
        self
    }

    /// The same config selecting projections by PEFT's regular-expression `target_modules`
    /// (see [`LoraConfig::pattern`]); refused when it is not a regular expression this crate
    /// reads (the `regex` crate's syntax: no look-around or back-references).
    pub fn with_pattern(mut self, pattern: &str) -> Result<Self, PolicyError> {
        full_match(pattern).map_err(|e| {
            PolicyError::Request(format!(
                "target_modules `{pattern}` is not a regular expression this reads: {e}"
            ))
        })?;
        self.pattern = Some(pattern.to_owned());
        self.targets = Target::ALL.to_vec();
        Ok(self)
    }

    /// The module name a regular-expression `target_modules` is matched against.
    pub fn module_name(layer: usize, target: Target) -> String {
        format!("model.layers.{layer}.{}", target.module_path())
    }

    /// Every (layer, projection) that gets an adapter in a model of `num_layers` layers, in
    /// layer and target order (layers past the model's are not there to adapt).
    pub fn adapted(&self, num_layers: usize) -> Vec<(usize, Target)> {
        let pattern = self.pattern.as_deref().and_then(|p| full_match(p).ok());
        // A pattern picks layers itself: PEFT ignores `layers_to_transform` beside one.
        let layers = self.layers.as_ref().filter(|_| pattern.is_none());
        (0..num_layers)
            .filter(|l| layers.is_none_or(|keep| keep.contains(l)))
            .flat_map(|l| self.targets.iter().map(move |t| (l, *t)))
            .filter(|(l, t)| {
                pattern
                    .as_ref()
                    .is_none_or(|re| re.is_match(&Self::module_name(*l, *t)))
            })
            .collect()
    }

    /// This config for `model`, checked: targets the model's family lacks are dropped (PEFT
    /// ignores a name it finds no module for while another matches, so `all-linear` names both
    /// families' projections), every layer it names exists and at least one projection is
    /// adapted; the message names PEFT's field.
    pub fn fit(mut self, model: &ModelConfig) -> Result<Self, PolicyError> {
        let num_layers = model.num_layers;
        let has = Target::of_family(model.family);
        let named = std::mem::take(&mut self.targets);
        self.targets = named.iter().copied().filter(|t| has.contains(t)).collect();
        if self.targets.is_empty() {
            let names = |ts: &[Target]| ts.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ");
            return Err(PolicyError::Request(format!(
                "target_modules {} names no projection of this model: a `{}` model has {} \
                 (or use \"all-linear\")",
                names(&named),
                model.family.model_type(),
                names(has)
            )));
        }
        if let Some(bad) = self.layers.iter().flatten().find(|l| **l >= num_layers) {
            return Err(PolicyError::Request(format!(
                "layers_to_transform names layer {bad}, but the model has {num_layers} (0 to {})",
                num_layers.saturating_sub(1)
            )));
        }
        // PEFT full-matches every module name: a pattern that also names a module other than the
        // projections would adapt (or be refused on) something this cannot.
        if let Some(pattern) = self.pattern.as_deref().and_then(|p| full_match(p).ok())
            && let Some(other) =
                other_modules(model.family, num_layers).find(|m| pattern.is_match(m))
        {
            return Err(PolicyError::Request(format!(
                "target_modules `{}` also matches `{other}`, which PEFT would adapt too: only the \
                 projections `{}` can be",
                self.pattern.as_deref().unwrap_or_default(),
                has.iter()
                    .map(|t| Self::module_name(0, *t).replace(".0.", ".N."))
                    .collect::<Vec<_>>()
                    .join("`, `")
            )));
        }
        if self.adapted(num_layers).is_empty() {
            return Err(PolicyError::Request(format!(
                "target_modules `{}` matches no projection: names look like `{}`",
                self.pattern.as_deref().unwrap_or_default(),
                Self::module_name(0, has[0])
            )));
        }
        Ok(self)
    }

    /// The same config with DoRA (PEFT's `use_dora`) on or off.
    #[must_use]
    pub fn with_dora(mut self, dora: bool) -> Self {
        self.dora = dora;
        self
    }

    /// The same config with LoRA dropout `p` (PEFT's `lora_dropout`), which must be in `[0, 1)`.
    pub fn with_dropout(mut self, p: f64) -> Result<Self, PolicyError> {
        if !(0.0..1.0).contains(&p) {
            return Err(PolicyError::Request(format!(
                "lora_dropout must be at least 0 and below 1, got {p}"
            )));
        }
        self.dropout = p;
        Ok(self)
    }

    /// The same config with rank-stabilised scaling on or off.
    #[must_use]
    pub fn with_rslora(mut self, rslora: bool) -> Self {
        self.rslora = rslora;
        self
    }

    /// The factor the update `(x·A)·B` is multiplied by: `alpha / r`, or `alpha / √r` with
    /// rsLoRA (as PEFT scales it).
    pub fn scale(&self) -> f64 {
        if self.rslora {
            self.alpha / (self.rank as f64).sqrt()
        } else {
            self.alpha / self.rank as f64
        }
    }
}

/// `A` (`[in, r]`) and `B` (`[r, out]`) of one adapted projection, and DoRA's magnitude.
#[derive(Module, Debug)]
pub struct LoraPair<B: Backend> {
    /// Down projection, stored `[in, r]` (PEFT's `lora_A.weight` is `[r, in]`).
    pub a: Param<Tensor<B, 2>>,
    /// Up projection, stored `[r, out]` (PEFT's `lora_B.weight` is `[out, r]`).
    pub b: Param<Tensor<B, 2>>,
    /// DoRA's magnitude of each output row, stored `[1, out]` (PEFT's `lora_magnitude_vector` is
    /// `[out]`); `None` without DoRA.
    pub magnitude: Option<Param<Tensor<B, 2>>>,
}

/// The adapters of one decoder layer, one slot per [`Target`] in `Target::ALL` order.
#[derive(Module, Debug)]
pub struct LayerAdapters<B: Backend> {
    /// `None` where the projection is not a target.
    pub slots: Vec<Option<LoraPair<B>>>,
}

/// The names of a `family` decoder's modules other than its projections, as `transformers`
/// names them (what a PEFT regular expression is also matched against).
fn other_modules(family: Family, num_layers: usize) -> impl Iterator<Item = String> {
    let top = [
        "",
        "model",
        "model.embed_tokens",
        "model.layers",
        "model.norm",
        "model.rotary_emb",
        "lm_head",
    ];
    let inner: &[&str] = if family.fused_projections() {
        &[
            "",
            ".self_attn",
            ".mlp",
            ".mlp.activation_fn",
            ".input_layernorm",
            ".post_attention_layernorm",
            ".resid_attn_dropout",
            ".resid_mlp_dropout",
        ]
    } else {
        &[
            "",
            ".self_attn",
            ".self_attn.q_norm",
            ".self_attn.k_norm",
            ".mlp",
            ".mlp.act_fn",
            ".input_layernorm",
            ".post_attention_layernorm",
            ".pre_feedforward_layernorm",
            ".post_feedforward_layernorm",
        ]
    };
    top.into_iter().map(str::to_owned).chain(
        (0..num_layers)
            .flat_map(move |l| inner.iter().map(move |m| format!("model.layers.{l}{m}"))),
    )
}

/// `pattern` anchored at both ends, as Python's `re.fullmatch` reads it.
fn full_match(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
}

/// One adapted projection's values from the host, row-major: what [`Adapters::build`] is given.
pub(crate) struct Filled {
    /// `A`, `[in, r]`.
    pub(crate) a: Vec<f32>,
    /// `B`, `[r, out]`.
    pub(crate) b: Vec<f32>,
    /// DoRA's magnitude, `[out]` (kept only when the config says DoRA).
    pub(crate) magnitude: Option<Vec<f32>>,
}

/// All adapters of a model: the only trainable parameters.
#[derive(Module, Debug)]
pub struct Adapters<B: Backend> {
    /// Per decoder layer.
    pub layers: Vec<LayerAdapters<B>>,
    #[module(skip)]
    config: LoraConfig,
    /// LoRA dropout's masks for a training pass ([`Adapters::for_training`]); `None` otherwise.
    #[module(skip)]
    dropout: Option<Dropout>,
}

/// The random stream LoRA dropout's masks are drawn from in one training pass, in the order the
/// forward asks for them (block by block, projection by projection).
#[derive(Debug, Clone)]
pub(crate) struct Dropout {
    p: f64,
    rng: Arc<Mutex<PolicyRng>>,
}

impl Dropout {
    /// Inverted dropout's mask for `len` values: 0 with probability `p`, else `1/(1 − p)`, each
    /// decided by 32 bits of the stream.
    pub(crate) fn mask(&self, len: usize) -> Vec<f32> {
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let cut = (self.p * 4_294_967_296.0) as u64;
        let kept = (1.0 / (1.0 - self.p)) as f32;
        let mut mask = Vec::with_capacity(len);
        while mask.len() < len {
            let bits = rng.next_u64();
            for word in [bits >> 32, bits & 0xffff_ffff] {
                if mask.len() < len {
                    mask.push(if word < cut { 0.0 } else { kept });
                }
            }
        }
        mask
    }
}

fn slot(target: Target) -> usize {
    Target::ALL
        .iter()
        .position(|t| *t == target)
        .unwrap_or_default()
}

impl<B: Backend> Adapters<B> {
    /// Fresh adapters as PEFT initialises them (`Adapters::init`, which gives
    /// `row_norms(layer, target)` from the policy's base weights).
    pub(crate) fn init_with(
        model: &ModelConfig,
        config: LoraConfig,
        rng: &mut PolicyRng,
        device: &B::Device,
        row_norms: impl Fn(usize, Target) -> Vec<f32>,
    ) -> Self {
        let dora = config.dora;
        let built = Self::build(model, config, device, |layer, target, d_in, d_out, r| {
            let bound = 1.0 / (d_in as f64).sqrt();
            let a: Vec<f32> = (0..d_in * r)
                .map(|_| ((rng.next_f64() * 2.0 - 1.0) * bound) as f32)
                .collect();
            let magnitude = dora.then(|| row_norms(layer, target));
            Ok::<_, Infallible>(Filled {
                a,
                b: vec![0.0; r * d_out],
                magnitude,
            })
        });
        match built {
            Ok(adapters) => adapters,
            Err(never) => match never {},
        }
    }

    /// Builds adapters from host data: `fill(layer, target, in, out, r)` returns `A` as `[in, r]`,
    /// `B` as `[r, out]`, row-major, and DoRA's magnitude (`[out]`), which it must give when and
    /// only when the config says DoRA, for each layer in order.
    /// Targets the model's family lacks are dropped, as [`LoraConfig::fit`] drops them.
    pub(crate) fn build<E>(
        model: &ModelConfig,
        mut config: LoraConfig,
        device: &B::Device,
        mut fill: impl FnMut(usize, Target, usize, usize, usize) -> Result<Filled, E>,
    ) -> Result<Self, E> {
        config
            .targets
            .retain(|t| Target::of_family(model.family).contains(t));
        let r = config.rank;
        let adapted = config.adapted(model.num_layers);
        let mut layers = Vec::with_capacity(model.num_layers);
        for layer in 0..model.num_layers {
            let mut slots: Vec<Option<LoraPair<B>>> =
                (0..Target::ALL.len()).map(|_| None).collect();
            for &(_, target) in adapted.iter().filter(|(l, _)| *l == layer) {
                let (d_in, d_out) = target.dims(model);
                let Filled { a, b, magnitude } = fill(layer, target, d_in, d_out, r)?;
                let param = |data: Vec<f32>, shape: [usize; 2]| {
                    Param::from_tensor(Tensor::from_data(TensorData::new(data, shape), device))
                };
                slots[slot(target)] = Some(LoraPair {
                    a: param(a, [d_in, r]),
                    b: param(b, [r, d_out]),
                    magnitude: magnitude.map(|m| param(m, [1, d_out])),
                });
            }
            layers.push(LayerAdapters { slots });
        }
        Ok(Self {
            layers,
            config,
            dropout: None,
        })
    }

    /// These adapters (the same parameters) for one training pass: with the config's LoRA dropout
    /// above 0, every adapted projection's input is dropped with masks drawn, in the forward's
    /// order, from a stream seeded by `seed`; so a pass's masks depend on its seed alone (not on
    /// which thread runs it or what ran before), and a resumed run draws them again. Sampling
    /// and the reference and old-policy passes use the adapters as they are, without dropout.
    #[must_use]
    pub fn for_training(&self, seed: u64) -> Self {
        let mut out = self.clone();
        out.dropout = (self.config.dropout > 0.0).then(|| Dropout {
            p: self.config.dropout,
            rng: Arc::new(Mutex::new(PolicyRng::from_seed(seed))),
        });
        out
    }

    /// LoRA dropout's stream, in a training pass.
    pub(crate) fn dropout(&self) -> Option<&Dropout> {
        self.dropout.as_ref()
    }

    /// The LoRA config these adapters were built with.
    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    /// The update's scale ([`LoraConfig::scale`]).
    pub fn scale(&self) -> f64 {
        self.config.scale()
    }

    /// The adapter of `target` in `layer`, if it is adapted.
    pub fn pair(&self, layer: usize, target: Target) -> Option<&LoraPair<B>> {
        self.layers
            .get(layer)
            .and_then(|l| l.slots[slot(target)].as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mask zeroes about `p` of the values, scales the rest by `1/(1 − p)`, and is the
    /// stream's alone: the same seed draws the same mask.
    #[test]
    fn a_dropout_mask_drops_p_and_scales_the_rest() {
        let dropout = |seed| Dropout {
            p: 0.25,
            rng: Arc::new(Mutex::new(PolicyRng::from_seed(seed))),
        };
        let mask = dropout(1).mask(100_001);
        assert_eq!(mask.len(), 100_001);
        let zeroed = mask.iter().filter(|m| **m == 0.0).count() as f64 / mask.len() as f64;
        assert!((zeroed - 0.25).abs() < 0.01, "{zeroed}");
        assert!(
            mask.iter()
                .all(|m| *m == 0.0 || *m == (1.0f64 / 0.75) as f32)
        );
        assert_eq!(mask, dropout(1).mask(100_001));
        assert_ne!(mask, dropout(2).mask(100_001));
    }
}
