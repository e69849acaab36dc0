//! A hyperparameter search of a plan's fields with Determined's own searchers: a searched
//! field as a hyperparameter spec (`--hparam optimizer.learning_rate=log:1e-6..1e-4`), and the
//! searcher that samples or grids them (`random`, `grid`, `adaptive_asha`).

use std::str::FromStr;

use serde_json::{Value, json};

/// One searched plan field and its Determined hyperparameter spec.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchedField {
    /// Its hyperparameter section (`grpo`, `optimizer`, `lora`: `hr_plan::SEARCHABLE` says
    /// which a plan has).
    pub section: String,
    /// Its field in that section (`learning_rate`).
    pub field: String,
    /// The spec: `{type: log, base: 10, minval, maxval}`, `double`, `int` or `categorical`.
    pub spec: Value,
}

impl FromStr for SearchedField {
    type Err = String;

    /// `SECTION.FIELD=SPEC`, SPEC one of `log:MIN..MAX`, `double:MIN..MAX`, `int:MIN..MAX`
    /// (each with `:COUNT` for a grid) or `cat:A,B,...` (JSON values, else strings).
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = "give SECTION.FIELD=SPEC, e.g. optimizer.learning_rate=log:1e-6..1e-4 \
                     (SPEC: log|double|int:MIN..MAX[:COUNT] or cat:A,B,...)";
        let (path, spec) = s.split_once('=').ok_or_else(|| format!("`{s}`: {usage}"))?;
        let (section, field) = path
            .split_once('.')
            .ok_or_else(|| format!("`{path}`: {usage}"))?;
        if section.is_empty() || field.is_empty() {
            return Err(format!("`{path}`: {usage}"));
        }
        let (kind, range) = spec
            .split_once(':')
            .ok_or_else(|| format!("`{spec}`: {usage}"))?;
        let spec = match kind {
            "cat" => {
                let vals: Vec<Value> = range
                    .split(',')
                    .map(|v| serde_json::from_str(v.trim()).unwrap_or_else(|_| json!(v.trim())))
                    .collect();
                json!({"type": "categorical", "vals": vals})
            }
            "log" | "double" | "int" => {
                let mut parts = range.splitn(2, ':');
                let bounds = parts.next().unwrap_or_default();
                let count = parts
                    .next()
                    .map(|c| {
                        c.parse::<u64>()
                            .map_err(|_| format!("`{c}`: COUNT is a whole number"))
                    })
                    .transpose()?;
                let (lo, hi) = bounds
                    .split_once("..")
                    .ok_or_else(|| format!("`{bounds}`: {usage}"))?;
                let number = |v: &str| {
                    v.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .ok_or_else(|| format!("`{v}` is not a number"))
                };
                let (lo, hi) = (number(lo)?, number(hi)?);
                if lo >= hi {
                    return Err(format!("`{bounds}`: MIN must be below MAX"));
                }
                let mut spec = match kind {
                    "log" if lo <= 0.0 => {
                        return Err(format!("`{bounds}`: a log range needs MIN > 0"));
                    }
                    "log" => json!({"type": "log", "base": 10.0,
                        "minval": lo.log10(), "maxval": hi.log10()}),
                    "int" if lo.fract() != 0.0 || hi.fract() != 0.0 => {
                        return Err(format!("`{bounds}`: an int range has whole bounds"));
                    }
                    "int" => json!({"type": "int", "minval": lo as i64, "maxval": hi as i64}),
                    _ => json!({"type": "double", "minval": lo, "maxval": hi}),
                };
                if let Some(count) = count {
                    spec["count"] = json!(count);
                }
                spec
            }
            other => return Err(format!("`{other}`: {usage}")),
        };
        Ok(Self {
            section: section.to_owned(),
            field: field.to_owned(),
            spec,
        })
    }
}

/// Of a trial's hyperparameter `values`, those its experiment's `specs` (the config's
/// `hyperparameters`) search: constants are left out, so a plan file edited after its config was
/// written is not overwritten by stale constants; nested groups are searched field by field.
pub fn searched_values(specs: &Value, values: &Value) -> Value {
    let (Value::Object(specs), Value::Object(values)) = (specs, values) else {
        return json!({});
    };
    let mut out = serde_json::Map::new();
    for (name, value) in values {
        let Some(spec @ Value::Object(fields)) = specs.get(name) else {
            continue;
        };
        match fields.get("type") {
            Some(kind) if kind != "const" => {
                out.insert(name.clone(), value.clone());
            }
            Some(_) => {}
            None => {
                let inner = searched_values(spec, value);
                if inner.as_object().is_some_and(|m| !m.is_empty()) {
                    out.insert(name.clone(), inner);
                }
            }
        }
    }
    Value::Object(out)
}

/// A searcher of Determined's that varies hyperparameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchKind {
    /// `random`: `max_trials` trials, each with values sampled from the specs.
    Random,
    /// `grid`: one trial per point of the specs' grid (each range needs a `count`).
    Grid,
    /// `adaptive_asha`: `max_trials` sampled trials trained rung by rung, the best promoted.
    AdaptiveAsha,
}

impl SearchKind {
    /// Determined's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::Grid => "grid",
            Self::AdaptiveAsha => "adaptive_asha",
        }
    }
}

impl FromStr for SearchKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "random" => Ok(Self::Random),
            "grid" => Ok(Self::Grid),
            "adaptive_asha" => Ok(Self::AdaptiveAsha),
            other => Err(format!(
                "unknown searcher {other:?}: use random, grid or adaptive_asha"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_searched_values_are_handed_on() {
        let specs = json!({"optimizer": {"learning_rate": {"type": "log", "base": 10,
            "minval": -6, "maxval": -4}, "beta1": {"type": "const", "val": 0.9}},
            "lora": {"type": "const", "val": {"rank": 8}}, "steps": {"type": "const", "val": 4}});
        let values = json!({"optimizer": {"learning_rate": 3e-5, "beta1": 0.9},
            "lora": {"rank": 8}, "steps": 4, "unknown": 1});
        assert_eq!(
            searched_values(&specs, &values),
            json!({"optimizer": {"learning_rate": 3e-5}})
        );
        assert_eq!(searched_values(&Value::Null, &values), json!({}));
    }

    #[test]
    fn specs_are_determineds_and_bad_ones_name_the_fix() {
        let lr: SearchedField = "optimizer.learning_rate=log:1e-6..1e-4"
            .parse()
            .expect("log");
        assert_eq!(
            (lr.section.as_str(), lr.field.as_str()),
            ("optimizer", "learning_rate")
        );
        assert_eq!(lr.spec["type"], "log");
        assert!((lr.spec["minval"].as_f64().unwrap_or(0.0) + 6.0).abs() < 1e-12);
        let g: SearchedField = "grpo.num_generations=int:2..8:3".parse().expect("int");
        assert_eq!(
            g.spec,
            json!({"type": "int", "minval": 2, "maxval": 8, "count": 3})
        );
        let c: SearchedField = "grpo.loss_type=cat:dapo,grpo".parse().expect("cat");
        assert_eq!(
            c.spec,
            json!({"type": "categorical", "vals": ["dapo", "grpo"]})
        );
        for (bad, says) in [
            ("learning_rate=log:1..2", "SECTION.FIELD"),
            ("optimizer.learning_rate=log:0..1", "MIN > 0"),
            ("optimizer.learning_rate=double:2..1", "below MAX"),
            ("grpo.beta=uniform:0..1", "SPEC"),
        ] {
            let err = bad.parse::<SearchedField>().expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
