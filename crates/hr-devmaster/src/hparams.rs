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

/// The seed of an experiment's trial number `index` (from 0): the experiment seed itself for the
/// first, then a SplitMix64 draw from it per index.
pub(crate) fn trial_seed(experiment_seed: u32, index: usize) -> u32 {
    if index == 0 {
        return experiment_seed;
    }
    let mut draws =
        Draws(u64::from(experiment_seed) ^ (index as u64).wrapping_mul(0xd1b5_4a32_d192_ed03));
    (draws.next() >> 32) as u32
}

/// The grid searcher's points for `spec`: the cartesian product of each hyperparameter's axis
/// (`const` and bare values one point, `categorical` its values, `int`, `double` and `log`
/// `count` evenly spaced points, the middle one when `count` is 1), in the order listed. A
/// number range without `count` is an error naming `hyperparameters.<name>.count`.
pub(crate) fn grid(spec: &Value) -> Result<Vec<Value>, String> {
    let mut points = vec![Value::Object(Map::new())];
    let Value::Object(map) = spec else {
        return if spec.is_null() {
            Ok(points)
        } else {
            Err(format!(
                "hyperparameters must be a mapping of names to specs, not {spec}"
            ))
        };
    };
    let mut axes = Vec::new();
    axes_of(map, &mut Vec::new(), &mut axes)?;
    for (route, values) in axes {
        points = points
            .iter()
            .flat_map(|point| {
                values.iter().map(|v| {
                    let mut p = point.clone();
                    set(&mut p, &route, v.clone());
                    p
                })
            })
            .collect();
    }
    Ok(points)
}

type Axis = (Vec<String>, Vec<Value>);

fn axes_of(
    map: &Map<String, Value>,
    route: &mut Vec<String>,
    axes: &mut Vec<Axis>,
) -> Result<(), String> {
    for (name, spec) in map {
        route.push(name.clone());
        let path = format!("hyperparameters.{}", route.join("."));
        match spec {
            Value::Object(m) if m.contains_key("type") => {
                axes.push((route.clone(), axis(m, &path)?))
            }
            Value::Object(m) => axes_of(m, route, axes)?,
            constant => axes.push((route.clone(), vec![constant.clone()])),
        }
        route.pop();
    }
    Ok(())
}

fn axis(spec: &Map<String, Value>, path: &str) -> Result<Vec<Value>, String> {
    let kind = spec.get("type").and_then(Value::as_str).unwrap_or_default();
    let num = |key: &str| {
        spec.get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("{path}.{key}: a number is required"))
    };
    let count = || {
        spec.get("count")
            .and_then(Value::as_u64)
            .filter(|c| *c >= 1)
            .ok_or_else(|| format!("{path}.count: the grid searcher needs a count (at least 1) for an {kind} hyperparameter"))
    };
    // Evenly spaced points of [lo, hi]; the middle for one.
    let spaced = |lo: f64, hi: f64, n: u64| -> Vec<f64> {
        if n == 1 {
            vec![(lo + hi) / 2.0]
        } else {
            (0..n)
                .map(|i| lo + i as f64 * (hi - lo) / (n - 1) as f64)
                .collect()
        }
    };
    match kind {
        "const" => Ok(vec![spec.get("val").cloned().ok_or_else(|| {
            format!("{path}.val: a const hyperparameter needs its value")
        })?]),
        "categorical" => spec
            .get("vals")
            .and_then(Value::as_array)
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| format!("{path}.vals: a non-empty list is required")),
        "int" => {
            let (lo, hi) = (num("minval")? as i64, num("maxval")? as i64);
            let n = count()?.min(hi.abs_diff(lo) + 1);
            Ok(spaced(lo as f64, hi as f64, n)
                .into_iter()
                .map(|x| Value::from(x.round() as i64))
                .collect())
        }
        "double" => Ok(spaced(num("minval")?, num("maxval")?, count()?)
            .into_iter()
            .map(Value::from)
            .collect()),
        "log" => {
            let base = num("base")?;
            Ok(spaced(num("minval")?, num("maxval")?, count()?)
                .into_iter()
                .map(|x| Value::from(base.powf(x)))
                .collect())
        }
        other => Err(format!(
            "{path}.type: {other:?} is not a hyperparameter type (const, int, double, log, \
             categorical)"
        )),
    }
}

/// Sets `value` at `route` inside the mapping `point`.
fn set(point: &mut Value, route: &[String], value: Value) {
    let mut at = point;
    for key in &route[..route.len() - 1] {
        at = at
            .as_object_mut()
            .expect("grid points are mappings")
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if let Some(m) = at.as_object_mut() {
        m.insert(route[route.len() - 1].clone(), value);
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
    fn the_grid_is_the_product_of_each_axis_as_determined_builds_it() {
        let spec = json!({
            "c": {"type": "categorical", "vals": ["a", "b"]},
            "n": {"type": "int", "minval": 1, "maxval": 8, "count": 3},
            "nested": {"d": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 1}},
            "k": 7,
        });
        let points = grid(&spec).expect("grid");
        assert_eq!(points.len(), 6);
        let ns: std::collections::BTreeSet<i64> = points
            .iter()
            .map(|p| p["n"].as_i64().expect("int"))
            .collect();
        // Determined's int axis: minval + i * (maxval - minval) / (count - 1), rounded.
        assert_eq!(ns, [1, 5, 8].into_iter().collect());
        assert!(
            points
                .iter()
                .all(|p| p["nested"]["d"] == json!(0.5) && p["k"] == json!(7))
        );
        let err = grid(&json!({"lr": {"type": "log", "minval": -3, "maxval": -1, "base": 10}}))
            .expect_err("no count");
        assert!(err.contains("hyperparameters.lr.count"), "{err}");
        // An int axis never has more points than integers in its range.
        let small = grid(&json!({"n": {"type": "int", "minval": 0, "maxval": 1, "count": 5}}))
            .expect("grid");
        assert_eq!(small, vec![json!({"n": 0}), json!({"n": 1})]);
    }

    #[test]
    fn trial_seeds_start_at_the_experiment_seed_and_differ() {
        assert_eq!(trial_seed(42, 0), 42);
        let seeds: std::collections::BTreeSet<u32> = (0..64).map(|i| trial_seed(42, i)).collect();
        assert_eq!(seeds.len(), 64);
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
