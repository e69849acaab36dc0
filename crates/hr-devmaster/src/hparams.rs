//! Hyperparameters as a trial receives them. Determined's specs (`const`, `int`, `double`, `log`,
//! `categorical`, nested mappings, and bare values, which are constants) become values, drawn as
//! the `single` searcher draws its one trial's: from the trial's seed, here with a SplitMix64
//! stream per hyperparameter keyed by its dotted name, so a value never depends on the order the
//! others are listed in. A trial reads `3`, never `{type: const, val: 3}`.

use serde_json::{Map, Value};

/// The values for `spec` (the config's `hyperparameters`, or null) and `seed`; an invalid spec
/// is an error naming `hyperparameters.<name>`.
pub(crate) fn sample(spec: &Value, seed: u32) -> Result<Value, String> {
    match spec {
        Value::Null => Ok(Value::Object(Map::new())),
        Value::Object(map) => sample_map(map, "hyperparameters", seed),
        other => Err(format!(
            "hyperparameters must be a mapping of names to specs, not {other}"
        )),
    }
}

fn sample_map(map: &Map<String, Value>, path: &str, seed: u32) -> Result<Value, String> {
    map.iter()
        .map(|(name, spec)| {
            let path = format!("{path}.{name}");
            let value = match spec {
                Value::Object(m) if m.contains_key("type") => one(m, &path, seed)?,
                Value::Object(m) => sample_map(m, &path, seed)?,
                constant => constant.clone(),
            };
            Ok((name.clone(), value))
        })
        .collect::<Result<Map<_, _>, String>>()
        .map(Value::Object)
}

fn one(spec: &Map<String, Value>, path: &str, seed: u32) -> Result<Value, String> {
    let num = |key: &str| {
        spec.get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("{path}.{key}: a number is required"))
    };
    let mut draw = Draws::new(seed, path);
    let kind = spec.get("type").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "const" => spec
            .get("val")
            .cloned()
            .ok_or_else(|| format!("{path}.val: a const hyperparameter needs its value")),
        "categorical" => {
            let vals = spec
                .get("vals")
                .and_then(Value::as_array)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("{path}.vals: a non-empty list is required"))?;
            let i = usize::try_from(draw.next() % vals.len() as u64).unwrap_or(0);
            Ok(vals[i].clone())
        }
        "int" => {
            let (lo, hi) = (num("minval")?, num("maxval")?);
            let (lo, hi) = (lo as i64, hi as i64);
            if lo > hi {
                return Err(format!("{path}: minval {lo} is above maxval {hi}"));
            }
            let span = hi.abs_diff(lo) + 1;
            Ok(Value::from(lo + (draw.next() % span) as i64))
        }
        "double" | "log" => {
            let (lo, hi) = (num("minval")?, num("maxval")?);
            if lo > hi {
                return Err(format!("{path}: minval {lo} is above maxval {hi}"));
            }
            let x = lo + (hi - lo) * draw.unit();
            if kind == "double" {
                Ok(Value::from(x))
            } else {
                Ok(Value::from(num("base")?.powf(x)))
            }
        }
        other => Err(format!(
            "{path}.type: {other:?} is not a hyperparameter type (const, int, double, log, \
             categorical)"
        )),
    }
}

/// A SplitMix64 stream seeded by the trial seed and the hyperparameter's name.
struct Draws(u64);

impl Draws {
    fn new(seed: u32, path: &str) -> Self {
        // FNV-1a of the name, mixed with the seed.
        let name = path.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Self(name ^ u64::from(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn specs_become_values_drawn_from_the_seed_whatever_their_order() {
        let spec = json!({
            "lr": {"type": "const", "val": 0.1},
            "bare": 7,
            "n": {"type": "int", "minval": 1, "maxval": 4},
            "d": {"type": "double", "minval": 0.5, "maxval": 1.5},
            "l": {"type": "log", "minval": -3, "maxval": -1, "base": 10},
            "c": {"type": "categorical", "vals": ["a", "b", "c"]},
            "nested": {"x": {"type": "const", "val": 2}, "y": {"type": "int", "minval": 0, "maxval": 0}},
        });
        let v = sample(&spec, 11).expect("valid");
        assert_eq!((v["lr"].clone(), v["bare"].clone()), (json!(0.1), json!(7)));
        assert_eq!(v["nested"], json!({"x": 2, "y": 0}));
        assert!((1..=4).contains(&v["n"].as_i64().expect("int")), "{v}");
        assert!(
            (0.5..1.5).contains(&v["d"].as_f64().expect("double")),
            "{v}"
        );
        assert!(
            (1e-3..=1e-1).contains(&v["l"].as_f64().expect("log")),
            "{v}"
        );
        assert!(
            ["a", "b", "c"].contains(&v["c"].as_str().expect("categorical")),
            "{v}"
        );
        // The same seed gives the same values, listed in any order; seeds vary them.
        let reordered: Map<String, Value> = spec
            .as_object()
            .expect("map")
            .iter()
            .rev()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(sample(&Value::Object(reordered), 11).expect("valid"), v);
        let draws: std::collections::BTreeSet<String> = (0..32)
            .map(|s| sample(&spec, s).expect("valid")["d"].to_string())
            .collect();
        assert!(draws.len() > 16, "{draws:?}");
    }

    #[test]
    fn an_invalid_spec_names_the_hyperparameter() {
        for (spec, says) in [
            (
                json!({"n": {"type": "int", "minval": 5, "maxval": 1}}),
                "hyperparameters.n: minval 5",
            ),
            (
                json!({"c": {"type": "categorical", "vals": []}}),
                "hyperparameters.c.vals",
            ),
            (
                json!({"o": {"x": {"type": "uniform"}}}),
                "hyperparameters.o.x.type",
            ),
            (json!([1]), "must be a mapping"),
        ] {
            let err = sample(&spec, 0).expect_err("invalid");
            assert!(err.contains(says), "{err}");
        }
    }
}
