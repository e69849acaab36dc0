//! RoPE's base and scaling as `config.json` spells them: `rope_parameters` (as `transformers` 5
//! writes it, theta inside, keyed by layer type for Gemma 3) or the Hub's `rope_theta`,
//! `rope_scaling` and Gemma 3's `rope_local_base_freq`.

use serde_json::{Map, Value};

use super::Family;
use crate::PolicyError;

/// How RoPE's frequencies are scaled for contexts longer than the model was trained on
/// (`rope_scaling` on the Hub, `rope_parameters` in `transformers` 5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// `rope_type: default` (or no scaling at all).
    None,
    /// `rope_type: linear`: every frequency divided by `factor`.
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// `rope_type: llama3` (Llama 3.1/3.2): long wavelengths divided by `factor`, short ones
    /// kept, the band between interpolated.
    Llama3 {
        /// Divisor of the low frequencies.
        factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length of pre-training.
        original_max_position_embeddings: f64,
    },
}

impl RopeScaling {
    /// The `rope_type` values the loader accepts.
    pub const SUPPORTED: &'static str = "`default`, `linear` or `llama3`";
}

/// What [`read`] found.
pub(super) struct Rope {
    /// The base frequency (of the full-attention layers where the sliding ones have their own).
    pub(super) theta: f64,
    /// The frequency scaling (likewise).
    pub(super) scaling: RopeScaling,
    /// The sliding-window layers' own unscaled base (Gemma 3).
    pub(super) sliding_theta: Option<f64>,
}

/// The model's RoPE: one base and scaling for every layer, or (Gemma 3) a scaled one for the
/// full-attention layers and an unscaled local base for the sliding ones.
pub(super) fn read<F: Fn(&str, String) -> PolicyError>(
    family: Family,
    map: &Map<String, Value>,
    err: &F,
) -> Result<Rope, PolicyError> {
    let present = |key: &str| map.get(key).filter(|v| !v.is_null());
    // transformers' defaults: Gemma 3 rotates its global layers with base 10⁶, its local ones
    // with 10⁴ (`rope_local_base_freq`).
    let global = (
        "rope_theta",
        if family == Family::Gemma3 { 1e6 } else { 1e4 },
    );
    let local = ("rope_local_base_freq", 1e4);
    let by_layer_type = match present("rope_parameters") {
        Some(Value::Object(p))
            if p.contains_key("full_attention") || p.contains_key("sliding_attention") =>
        {
            Some(p)
        }
        _ => None,
    };
    if let Some(p) = by_layer_type {
        if family != Family::Gemma3 {
            return Err(err(
                "rope_parameters",
                "RoPE parameters per layer type are read for `gemma3_text` only; give one \
                 `{\"rope_type\": ..., \"rope_theta\": ...}` object"
                    .to_owned(),
            ));
        }
        let (theta, scaling) = section(
            "rope_parameters.full_attention",
            p.get("full_attention"),
            map,
            global,
            err,
        )?;
        let sliding = "rope_parameters.sliding_attention";
        let (sliding_theta, sliding_scaling) =
            section(sliding, p.get("sliding_attention"), map, local, err)?;
        if sliding_scaling != RopeScaling::None {
            return Err(err(
                &format!("{sliding}.rope_type"),
                "the sliding layers' RoPE must be unscaled (`default`)".to_owned(),
            ));
        }
        return Ok(Rope {
            theta,
            scaling,
            sliding_theta: Some(sliding_theta),
        });
    }
    let name = if present("rope_parameters").is_some() {
        "rope_parameters"
    } else {
        "rope_scaling"
    };
    let (theta, scaling) = section(name, present(name), map, global, err)?;
    let sliding_theta = match family {
        Family::Gemma3 => Some(positive(map, local.0, local.0, err)?.unwrap_or(local.1)),
        _ => None,
    };
    Ok(Rope {
        theta,
        scaling,
        sliding_theta,
    })
}

/// A positive number at `source[name]`, if there; `field` names it in errors.
fn positive<F: Fn(&str, String) -> PolicyError>(
    source: &Map<String, Value>,
    name: &str,
    field: &str,
    err: &F,
) -> Result<Option<f64>, PolicyError> {
    match source.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
            _ => Err(err(field, format!("must be a positive number, found {v}"))),
        },
    }
}

/// One set of RoPE parameters, `params` (an object or null) at `section`: the base (inside, else
/// the top-level `fallback` key, else its default) and the scaling.
fn section<F: Fn(&str, String) -> PolicyError>(
    section: &str,
    params: Option<&Value>,
    map: &Map<String, Value>,
    fallback: (&str, f64),
    err: &F,
) -> Result<(f64, RopeScaling), PolicyError> {
    let empty = Map::new();
    let params = match params {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err(err(
                section,
                "must be an object like {\"rope_type\": \"llama3\", \"factor\": 8.0, ...} or null"
                    .to_owned(),
            ));
        }
    };
    let field = |name: &str| format!("{section}.{name}");
    let positive =
        |source: &Map<String, Value>, name: &str, field: &str| positive(source, name, field, err);
    let (theta_key, default_theta) = fallback;
    let theta = match positive(params, "rope_theta", &field("rope_theta"))? {
        Some(t) => t,
        None => positive(map, theta_key, theta_key)?.unwrap_or(default_theta),
    };
    for (source, name) in [
        (params, field("partial_rotary_factor")),
        (map, "partial_rotary_factor".to_owned()),
    ] {
        if let Some(f) = positive(source, "partial_rotary_factor", &name)?
            && f != 1.0
        {
            return Err(err(
                &name,
                format!("{f} is not supported; RoPE must rotate every dimension (1.0)"),
            ));
        }
    }
    // Older configs spell the key `type`.
    let type_key = if params.contains_key("rope_type") {
        "rope_type"
    } else {
        "type"
    };
    let rope_type = match params.get(type_key) {
        None | Some(Value::Null) => "default",
        Some(Value::String(s)) => s.as_str(),
        Some(v) => {
            return Err(err(
                &field(type_key),
                format!("must be a string, found {v}"),
            ));
        }
    };
    let required = |name: &str| {
        positive(params, name, &field(name))?.ok_or_else(|| {
            err(
                &field(name),
                format!("is missing; `{rope_type}` RoPE needs it"),
            )
        })
    };
    let scaling = match rope_type {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: required("factor")?,
        },
        "llama3" => {
            let low_freq_factor = required("low_freq_factor")?;
            let high_freq_factor = required("high_freq_factor")?;
            if high_freq_factor <= low_freq_factor {
                return Err(err(
                    &field("high_freq_factor"),
                    format!("{high_freq_factor} must exceed low_freq_factor {low_freq_factor}"),
                ));
            }
            RopeScaling::Llama3 {
                factor: required("factor")?,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: required("original_max_position_embeddings")?,
            }
        }
        other => {
            return Err(err(
                &field(type_key),
                format!("`{other}` is not supported; use {}", RopeScaling::SUPPORTED),
            ));
        }
    };
    Ok((theta, scaling))
}
