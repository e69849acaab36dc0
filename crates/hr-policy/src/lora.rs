//! LoRA adapters: `y = x·W + (alpha/r)·(x·A)·B` (rsLoRA: `alpha/√r`) on chosen projections, with
//! only `A` and `B` trainable. Initialised as PEFT does (A Kaiming-uniform, B zero) from an explicit RNG.

use std::convert::Infallible;

use burn::module::{Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use crate::{ModelConfig, PolicyError, PolicyRng};

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
}

impl Target {
    /// Every target, in module order.
    pub const ALL: [Target; 7] = [
        Target::QProj,
        Target::KProj,
        Target::VProj,
        Target::OProj,
        Target::GateProj,
        Target::UpProj,
        Target::DownProj,
    ];

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
        }
    }

    /// Parses PEFT's name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The HF module path inside a decoder layer (`self_attn.q_proj`, `mlp.up_proj`).
    pub fn module_path(self) -> String {
        let parent = match self {
            Target::QProj | Target::KProj | Target::VProj | Target::OProj => "self_attn",
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
    /// Projections that get adapters, sorted and unique.
    pub targets: Vec<Target>,
    /// Rank-stabilised LoRA (PEFT's `use_rslora`): the update is scaled by `alpha / √r`.
    pub rslora: bool,
    /// PEFT's `layers_to_transform`: only these decoder layers, sorted and unique (all when
    /// `None`).
    pub layers: Option<Vec<usize>>,
    /// PEFT's `target_modules` as a regular expression, full-matched (Python's `re.fullmatch`)
    /// against each projection's module name, `model.layers.3.self_attn.q_proj`; `targets`
    /// are then all seven kinds it may pick from and `layers` is unused, as in PEFT.
    pub pattern: Option<String>,
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

    /// Checks the config against a model of `num_layers` layers: every layer it names exists
    /// and at least one projection is adapted; the message names PEFT's field.
    pub fn check_fits(&self, num_layers: usize) -> Result<(), PolicyError> {
        if let Some(bad) = self.layers.iter().flatten().find(|l| **l >= num_layers) {
            return Err(PolicyError::Request(format!(
                "layers_to_transform names layer {bad}, but the model has {num_layers} (0 to {})",
                num_layers.saturating_sub(1)
            )));
        }
        // PEFT full-matches every module name: a pattern that also names a module other than the
        // seven projections would adapt (or be refused on) something this cannot.
        if let Some(pattern) = self.pattern.as_deref().and_then(|p| full_match(p).ok())
            && let Some(other) = other_modules(num_layers).find(|m| pattern.is_match(m))
        {
            return Err(PolicyError::Request(format!(
                "target_modules `{}` also matches `{other}`, which PEFT would adapt too: only the \
                 projections `model.layers.N.self_attn.{{q,k,v,o}}_proj` and \
                 `model.layers.N.mlp.{{gate,up,down}}_proj` can be",
                self.pattern.as_deref().unwrap_or_default()
            )));
        }
        if self.adapted(num_layers).is_empty() {
            return Err(PolicyError::Request(format!(
                "target_modules `{}` matches no projection: names look like `{}`",
                self.pattern.as_deref().unwrap_or_default(),
                Self::module_name(0, Target::QProj)
            )));
        }
        Ok(())
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

/// `A` (`[in, r]`) and `B` (`[r, out]`) of one adapted projection.
#[derive(Module, Debug)]
pub struct LoraPair<B: Backend> {
    /// Down projection, stored `[in, r]` (PEFT's `lora_A.weight` is `[r, in]`).
    pub a: Param<Tensor<B, 2>>,
    /// Up projection, stored `[r, out]` (PEFT's `lora_B.weight` is `[out, r]`).
    pub b: Param<Tensor<B, 2>>,
}

/// The adapters of one decoder layer, one slot per [`Target`] in `Target::ALL` order.
#[derive(Module, Debug)]
pub struct LayerAdapters<B: Backend> {
    /// `None` where the projection is not a target.
    pub slots: Vec<Option<LoraPair<B>>>,
}

/// The names of a decoder's modules other than the seven projections, as `transformers` names
/// them (what a PEFT regular expression is also matched against).
fn other_modules(num_layers: usize) -> impl Iterator<Item = String> {
    let top = [
        "",
        "model",
        "model.embed_tokens",
        "model.layers",
        "model.norm",
        "model.rotary_emb",
        "lm_head",
    ];
    let inner = [
        "",
        ".self_attn",
        ".self_attn.q_norm",
        ".self_attn.k_norm",
        ".mlp",
        ".mlp.act_fn",
        ".input_layernorm",
        ".post_attention_layernorm",
    ];
    top.into_iter()
        .map(str::to_owned)
        .chain((0..num_layers).flat_map(move |l| {
            inner
                .into_iter()
                .map(move |m| format!("model.layers.{l}{m}"))
        }))
}

/// `pattern` anchored at both ends, as Python's `re.fullmatch` reads it.
fn full_match(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
}

/// All adapters of a model: the only trainable parameters.
#[derive(Module, Debug)]
pub struct Adapters<B: Backend> {
    /// Per decoder layer.
    pub layers: Vec<LayerAdapters<B>>,
    #[module(skip)]
    config: LoraConfig,
}

fn slot(target: Target) -> usize {
    Target::ALL
        .iter()
        .position(|t| *t == target)
        .unwrap_or_default()
}

impl<B: Backend> Adapters<B> {
    /// Fresh adapters as PEFT initialises them: `A ~ U(−1/√in, 1/√in)` drawn from `rng` in layer
    /// and target order, `B = 0`.
    pub fn init(
        model: &ModelConfig,
        config: LoraConfig,
        rng: &mut PolicyRng,
        device: &B::Device,
    ) -> Self {
        let built = Self::build(model, config, device, |_, _, d_in, d_out, r| {
            let bound = 1.0 / (d_in as f64).sqrt();
            let a: Vec<f32> = (0..d_in * r)
                .map(|_| ((rng.next_f64() * 2.0 - 1.0) * bound) as f32)
                .collect();
            Ok::<_, Infallible>((a, vec![0.0; r * d_out]))
        });
        match built {
            Ok(adapters) => adapters,
            Err(never) => match never {},
        }
    }

    /// Builds adapters from host data: `fill(layer, target, in, out, r)` returns `A` as `[in, r]` and
    /// `B` as `[r, out]`, row-major, for each layer in order.
    pub(crate) fn build<E>(
        model: &ModelConfig,
        config: LoraConfig,
        device: &B::Device,
        mut fill: impl FnMut(usize, Target, usize, usize, usize) -> Result<(Vec<f32>, Vec<f32>), E>,
    ) -> Result<Self, E> {
        let r = config.rank;
        let adapted = config.adapted(model.num_layers);
        let mut layers = Vec::with_capacity(model.num_layers);
        for layer in 0..model.num_layers {
            let mut slots: Vec<Option<LoraPair<B>>> =
                (0..Target::ALL.len()).map(|_| None).collect();
            for &(_, target) in adapted.iter().filter(|(l, _)| *l == layer) {
                let (d_in, d_out) = target.dims(model);
                let (a, b) = fill(layer, target, d_in, d_out, r)?;
                slots[slot(target)] = Some(LoraPair {
                    a: Param::from_tensor(Tensor::from_data(TensorData::new(a, [d_in, r]), device)),
                    b: Param::from_tensor(Tensor::from_data(
                        TensorData::new(b, [r, d_out]),
                        device,
                    )),
                });
            }
            layers.push(LayerAdapters { slots });
        }
        Ok(Self { layers, config })
    }

    /// The same adapters as new leaves of the autodiff graph, under the same parameter ids:
    /// gradients taken through the copy are gradients for these adapters
    /// (`GradientsParams::from_grads` with the copy), and back-propagating through it neither
    /// waits for nor joins another graph that uses these adapters (Burn's autodiff keeps graphs
    /// that share a leaf under one lock).
    #[must_use]
    pub fn fresh_leaves(&self) -> Self
    where
        B: burn::tensor::backend::AutodiffBackend,
    {
        let leaf =
            |p: &Param<Tensor<B, 2>>| Param::initialized(p.id, p.val().detach().require_grad());
        Self {
            layers: self
                .layers
                .iter()
                .map(|l| LayerAdapters {
                    slots: l
                        .slots
                        .iter()
                        .map(|pair| {
                            pair.as_ref().map(|p| LoraPair {
                                a: leaf(&p.a),
                                b: leaf(&p.b),
                            })
                        })
                        .collect(),
                })
                .collect(),
            config: self.config.clone(),
        }
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
