//! The keyword implementations: the draft-07 subset Determined's schemas use, and Determined's
//! extensions (`optionalRef`, `union`, `checks`, `compareProperties`, `disallowProperties`,
//! `eventuallyRequired`, `eventually`) with the semantics of `master/pkg/schemas/extensions`.

use serde_json::{Map, Value};

use super::{Phase, SchemaError, SchemaSet};

/// One step of an instance path.
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

pub(super) struct Validator<'a> {
    pub(super) set: &'a SchemaSet,
    pub(super) phase: Phase,
}

fn render(path: &[Seg]) -> String {
    path.iter()
        .map(|s| match s {
            Seg::Key(k) => format!(".{k}"),
            Seg::Index(i) => format!("[{i}]"),
        })
        .collect()
}

fn leaf(path: &[Seg], message: impl Into<String>) -> Vec<SchemaError> {
    vec![SchemaError {
        path: render(path),
        message: message.into(),
    }]
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if is_integer(n) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(n: &serde_json::Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn has_type(v: &Value, ty: &str) -> bool {
    match ty {
        "number" => v.is_number(),
        "integer" => matches!(v, Value::Number(n) if is_integer(n)),
        other => type_name(v) == other,
    }
}

/// JSON equality where numbers compare by value (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Go's `filepath.Clean`, lexically.
fn clean_path(p: &str) -> String {
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

fn property_by_path<'v>(instance: &'v Value, dotted: &str) -> Option<&'v Value> {
    dotted
        .split('.')
        .try_fold(instance, |v, key| v.as_object()?.get(key))
}

impl Validator<'_> {
    fn valid(&self, schema: &Value, instance: &Value) -> bool {
        self.check(schema, instance, &mut Vec::new()).is_empty()
    }

    fn check_ref(&self, id: &str, instance: &Value, path: &mut Vec<Seg>) -> Vec<SchemaError> {
        match self.set.by_id.get(id) {
            Some(schema) => self.check(schema, instance, path),
            None => leaf(
                path,
                format!("schema reference {id} is not in the schema set"),
            ),
        }
    }

    /// Returns the leaf errors of `instance` against `schema`.
    pub(super) fn check(
        &self,
        schema: &Value,
        instance: &Value,
        path: &mut Vec<Seg>,
    ) -> Vec<SchemaError> {
        let s = match schema {
            Value::Bool(true) => return Vec::new(),
            Value::Bool(false) => return leaf(path, "not allowed"),
            Value::Object(s) => s,
            _ => return leaf(path, "invalid schema: not an object or boolean"),
        };
        // draft-07: `$ref` overrides its siblings.
        if let Some(id) = s.get("$ref").and_then(Value::as_str) {
            return self.check_ref(id, instance, path);
        }
        if let Some(types) = s.get("type") {
            let allowed: Vec<&str> = match types {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !allowed.iter().any(|t| has_type(instance, t)) {
                let msg = format!(
                    "expected {}, but got {}",
                    allowed.join(" or "),
                    type_name(instance)
                );
                return leaf(path, msg);
            }
        }
        let mut errors = Vec::new();
        self.generic(s, instance, path, &mut errors);
        self.combinators(s, instance, path, &mut errors);
        if let Value::Object(obj) = instance {
            self.object(s, obj, path, &mut errors);
        }
        if let Value::Array(items) = instance {
            self.array(s, items, path, &mut errors);
        }
        self.extensions(s, instance, path, &mut errors);
        errors
    }

    fn generic(
        &self,
        s: &Map<String, Value>,
        inst: &Value,
        path: &[Seg],
        out: &mut Vec<SchemaError>,
    ) {
        if let Some(c) = s.get("const")
            && !json_eq(c, inst)
        {
            out.extend(leaf(path, format!("value must be {c}")));
        }
        if let Some(Value::Array(options)) = s.get("enum")
            && !options.iter().any(|o| json_eq(o, inst))
        {
            let list: Vec<String> = options.iter().map(Value::to_string).collect();
            out.extend(leaf(
                path,
                format!("value must be one of {}", list.join(", ")),
            ));
        }
        if let Some(x) = inst.as_f64() {
            let bound = |k: &str| s.get(k).and_then(Value::as_f64);
            if let Some(m) = bound("minimum").filter(|m| x < *m) {
                out.extend(leaf(path, format!("must be >= {m} but found {inst}")));
            }
            if let Some(m) = bound("maximum").filter(|m| x > *m) {
                out.extend(leaf(path, format!("must be <= {m} but found {inst}")));
            }
            if let Some(m) = bound("exclusiveMinimum").filter(|m| x <= *m) {
                out.extend(leaf(path, format!("must be > {m} but found {inst}")));
            }
            if let Some(m) = bound("exclusiveMaximum").filter(|m| x >= *m) {
                out.extend(leaf(path, format!("must be < {m} but found {inst}")));
            }
        }
        if let Value::String(text) = inst {
            if let Some(min) = s.get("minLength").and_then(Value::as_u64)
                && (text.chars().count() as u64) < min
            {
                out.extend(leaf(path, format!("length must be >= {min}")));
            }
            if let Some(pattern) = s.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(pattern) {
                    Ok(re) if re.is_match(text) => {}
                    Ok(_) => out.extend(leaf(path, format!("does not match pattern {pattern:?}"))),
                    Err(e) => out.extend(leaf(path, format!("invalid pattern {pattern:?}: {e}"))),
                }
            }
        }
    }

    fn combinators(
        &self,
        s: &Map<String, Value>,
        inst: &Value,
        path: &mut Vec<Seg>,
        out: &mut Vec<SchemaError>,
    ) {
        if let Some(Value::Array(all)) = s.get("allOf") {
            for sub in all {
                out.extend(self.check(sub, inst, path));
            }
        }
        if let Some(Value::Array(any)) = s.get("anyOf") {
            let results: Vec<_> = any.iter().map(|sub| self.check(sub, inst, path)).collect();
            if results.iter().all(|r| !r.is_empty()) {
                out.extend(results.into_iter().flatten());
            }
        }
        if let Some(Value::Array(one)) = s.get("oneOf") {
            let results: Vec<_> = one.iter().map(|sub| self.check(sub, inst, path)).collect();
            let valid: Vec<usize> = (0..results.len())
                .filter(|i| results[*i].is_empty())
                .collect();
            match valid.len() {
                1 => {}
                0 => out.extend(results.into_iter().flatten()),
                _ => out.extend(leaf(
                    path,
                    format!("valid against schemas at indexes {valid:?}"),
                )),
            }
        }
        if let Some(not) = s.get("not")
            && self.valid(not, inst)
        {
            out.extend(leaf(path, "not failed"));
        }
        if let Some(cond) = s.get("if") {
            let branch = if self.valid(cond, inst) {
                s.get("then")
            } else {
                s.get("else")
            };
            if let Some(branch) = branch {
                out.extend(self.check(branch, inst, path));
            }
        }
    }

    fn object(
        &self,
        s: &Map<String, Value>,
        obj: &Map<String, Value>,
        path: &mut Vec<Seg>,
        out: &mut Vec<SchemaError>,
    ) {
        if let Some(Value::Array(required)) = s.get("required") {
            let missing: Vec<String> = required
                .iter()
                .filter_map(Value::as_str)
                .filter(|k| !obj.contains_key(*k))
                .map(|k| format!("{k:?}"))
                .collect();
            if !missing.is_empty() {
                out.extend(leaf(
                    path,
                    format!("missing properties: {}", missing.join(", ")),
                ));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (key, value) in obj {
            path.push(Seg::Key(key.clone()));
            match props.and_then(|p| p.get(key)) {
                Some(sub) => out.extend(self.check(sub, value, path)),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        path.pop();
                        out.extend(leaf(
                            path,
                            format!("additionalProperties {key:?} not allowed"),
                        ));
                        continue;
                    }
                    Some(sub @ Value::Object(_)) => out.extend(self.check(sub, value, path)),
                    _ => {}
                },
            }
            path.pop();
        }
    }

    fn array(
        &self,
        s: &Map<String, Value>,
        items: &[Value],
        path: &mut Vec<Seg>,
        out: &mut Vec<SchemaError>,
    ) {
        if let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            out.extend(leaf(
                path,
                format!("minimum {min} items allowed, but found {}", items.len()),
            ));
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            out.extend(leaf(
                path,
                format!("maximum {max} items allowed, but found {}", items.len()),
            ));
        }
        let schema_for = |i: usize| match s.get("items") {
            Some(Value::Array(tuple)) => tuple.get(i),
            other => other,
        };
        for (i, item) in items.iter().enumerate() {
            if let Some(sub) = schema_for(i) {
                path.push(Seg::Index(i));
                out.extend(self.check(sub, item, path));
                path.pop();
            }
        }
    }

    fn extensions(
        &self,
        s: &Map<String, Value>,
        inst: &Value,
        path: &mut Vec<Seg>,
        out: &mut Vec<SchemaError>,
    ) {
        if let Some(id) = s.get("optionalRef").and_then(Value::as_str)
            && !inst.is_null()
        {
            out.extend(self.check_ref(id, inst, path));
        }
        if let Some(union) = s.get("union") {
            out.extend(self.union(union, inst, path));
        }
        if let Some(Value::Object(checks)) = s.get("checks") {
            for (message, sub) in checks {
                if !self.valid(sub, inst) {
                    out.extend(leaf(path, message.clone()));
                }
            }
        }
        if let Some(cmp) = s.get("compareProperties")
            && let Some(message) = compare_properties(cmp, inst)
        {
            out.extend(leaf(path, message));
        }
        if let (Some(Value::Object(disallowed)), Value::Object(obj)) =
            (s.get("disallowProperties"), inst)
        {
            for (prop, message) in disallowed {
                if obj.contains_key(prop) {
                    out.extend(leaf(
                        path,
                        message.as_str().unwrap_or("property not allowed"),
                    ));
                }
            }
        }
        if self.phase == Phase::Completeness {
            if let (Some(Value::Array(required)), Value::Object(obj)) =
                (s.get("eventuallyRequired"), inst)
            {
                for prop in required.iter().filter_map(Value::as_str) {
                    if obj.get(prop).is_none_or(Value::is_null) {
                        out.extend(leaf(path, format!("{prop} is a required property")));
                    }
                }
            }
            if let Some(sub) = s.get("eventually") {
                out.extend(self.check(sub, inst, path));
            }
        }
    }

    /// Exactly one member must match; when none does, report the errors of the member whose
    /// `unionKey` selects this instance, or else the union's default message.
    fn union(&self, union: &Value, inst: &Value, path: &mut Vec<Seg>) -> Vec<SchemaError> {
        let message = union
            .get("defaultMessage")
            .and_then(Value::as_str)
            .unwrap_or("union failed to validate");
        let items = union
            .get("items")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let mut selected: Option<Vec<SchemaError>> = None;
        let mut valid = 0;
        for item in items {
            let errors = self.check(item, inst, path);
            if errors.is_empty() {
                valid += 1;
            } else if selected.is_none() && union_key_selects(item.get("unionKey"), inst) {
                selected = Some(errors);
            }
        }
        match valid {
            1 => Vec::new(),
            0 => selected.unwrap_or_else(|| leaf(path, message)),
            _ => leaf(path, "bug in validation! Multiple schemas matched"),
        }
    }
}

fn union_key_selects(key: Option<&Value>, inst: &Value) -> bool {
    let Some(key) = key.and_then(Value::as_str) else {
        return false;
    };
    evaluate_union_key(key, inst)
}

fn evaluate_union_key(key: &str, inst: &Value) -> bool {
    let obj = inst.as_object();
    if key == "always" {
        true
    } else if key == "never" {
        false
    } else if let Some(rest) = key.strip_prefix("not:") {
        !evaluate_union_key(rest, inst)
    } else if let Some(rest) = key.strip_prefix("const:") {
        let Some((name, value)) = rest.split_once('=') else {
            return false;
        };
        obj.and_then(|o| o.get(name)).and_then(Value::as_str) == Some(value)
    } else if let Some(name) = key.strip_prefix("singleproperty:") {
        obj.is_some_and(|o| o.len() == 1 && o.contains_key(name))
    } else if let Some(ty) = key.strip_prefix("type:") {
        matches!(
            (ty, inst),
            ("array", Value::Array(_)) | ("object", Value::Object(_))
        )
    } else if let Some(attr) = key.strip_prefix("hasattr:") {
        obj.is_some_and(|o| o.contains_key(attr))
    } else {
        false
    }
}

/// `compareProperties`: a wrongly shaped instance is not this keyword's business (the Go code
/// recovers from the panic), so anything missing or mistyped yields no error.
fn compare_properties(cmp: &Value, inst: &Value) -> Option<String> {
    let kind = cmp.get("type")?.as_str()?;
    let (a_name, b_name) = (cmp.get("a")?.as_str()?, cmp.get("b")?.as_str()?);
    let a = property_by_path(inst, a_name)?;
    let b = property_by_path(inst, b_name)?;
    let failed = match kind {
        "a<b" => a.as_f64()? >= b.as_f64()?,
        "a<=b" => a.as_f64()? > b.as_f64()?,
        "a_is_subdir_of_b" => {
            let (a, b) = (clean_path(a.as_str()?), clean_path(b.as_str()?));
            if a.starts_with('/') {
                !a.starts_with(&b)
            } else {
                a.starts_with("..")
            }
        }
        _ => false,
    };
    let relation = if kind == "a_is_subdir_of_b" {
        "a subdirectory of"
    } else {
        "less than"
    };
    failed.then(|| format!("{a_name} must be {relation} {b_name}"))
}

#[cfg(test)]
mod tests {
    use super::clean_path;

    #[test]
    fn clean_path_matches_go() {
        for (input, want) in [
            ("/a/b/../c", "/a/c"),
            ("a/./b/", "a/b"),
            ("../x", "../x"),
            ("/../x", "/x"),
            ("", "."),
            ("a/..", "."),
        ] {
            assert_eq!(clean_path(input), want, "{input}");
        }
    }
}
