//! Our own rules on top of Determined's schema: the mistakes the schema lets through but the
//! cluster punishes (a GPU reserved by a wrong field name, a searcher that 0.35 rejects later),
//! and the house rules (auth files in the shared workspace, unbounded commands, a shell holding a
//! GPU, jobs that silently use GPUs or the Hub), which are problems in a config of this project
//! ([`is_ours`]) and notes in any other.

use serde_json::Value;

use crate::{
    ConfigKind, EnvPolicy, Finding,
    bounded::TIMEOUT_PREFIX,
    env::{DEFAULT_THREADS, OVERRIDES_VAR, THREAD_VARS},
    profile::BOOTSTRAP_WORK_DIR,
};

fn finding(field: &str, message: String) -> Finding {
    Finding {
        field: field.to_owned(),
        message,
        note: false,
    }
}

/// Whether the config is this project's: its entrypoint runs `hessian-recipes` (named by any
/// path), or its description says so, as the templates' do.
fn is_ours(value: &Value) -> bool {
    let named =
        |word: &str| std::path::Path::new(word).file_name() == Some("hessian-recipes".as_ref());
    let runs_it = match value.get("entrypoint") {
        Some(Value::Array(words)) => words.iter().filter_map(Value::as_str).any(named),
        Some(Value::String(line)) => line.split_whitespace().any(named),
        _ => false,
    };
    runs_it
        || value
            .get("description")
            .and_then(Value::as_str)
            .is_some_and(|d| d.starts_with("hessian-recipes"))
}

fn present<'v>(value: &'v Value, pointer: &str) -> Option<&'v Value> {
    value.pointer(pointer).filter(|v| !v.is_null())
}

/// Applies every rule for `kind`: the house rules as notes on a config that is not ours.
pub(crate) fn check(value: &Value, kind: ConfigKind) -> Vec<Finding> {
    let note = !is_ours(value);
    let mut house = Vec::new();
    let mut out = Vec::new();
    match kind {
        ConfigKind::Experiment => {
            if present(value, "/resources/slots").is_some() {
                out.push(finding(
                    "resources.slots",
                    "experiments request slots with `resources.slots_per_trial`; `slots` is for \
                     commands and shells and does not limit a trial (it keeps the default of one \
                     GPU). Fix: rename it to `slots_per_trial`."
                        .to_owned(),
                ));
            }
            if let Some(slots) = value
                .pointer("/resources/slots_per_trial")
                .and_then(Value::as_u64)
                .filter(|s| *s > 1 && runs_our_trial(value) && !launches_ranks(value))
            {
                out.push(finding(
                    "resources.slots_per_trial",
                    format!(
                        "a hessian-recipes trial started without a launcher runs as one process \
                         on one device, so {slots} slots would hold {slots} GPUs and use one (the \
                         trial refuses to start). Fix: set `slots_per_trial: 1`, or start a rank \
                         per slot: put `hessian-recipes launch --` (or `python3 -m \
                         determined.launch.torch_distributed --`) before `hessian-recipes \
                         managed-training`, with a plan whose `parallel.shards` the slots divide."
                    ),
                ));
            }
            if value.pointer("/searcher/name").and_then(Value::as_str) == Some("single")
                && present(value, "/searcher/max_length").is_none()
            {
                out.push(finding(
                    "searcher.max_length",
                    "the `single` searcher still requires `max_length` in Determined 0.35 (it \
                     was deprecated only in 0.38). Fix: add `max_length: {batches: N}` with N the \
                     number of optimizer steps."
                        .to_owned(),
                ));
            }
        }
        ConfigKind::Command | ConfigKind::Shell => {
            if present(value, "/resources/slots_per_trial").is_some() {
                out.push(finding(
                    "resources.slots_per_trial",
                    "commands and shells request slots with `resources.slots`; \
                     `slots_per_trial` is for experiments. Fix: rename it to `slots` (0 for \
                     no GPU)."
                        .to_owned(),
                ));
            }
            house.extend(work_dir(value));
            if kind == ConfigKind::Command {
                house.extend(bounded_entrypoint(value));
            } else {
                house.extend(shell_holds_no_gpu(value));
            }
        }
    }
    house.extend(environment(value));
    out.extend(house.into_iter().map(|f| Finding { note, ..f }));
    out
}

fn mount_paths(value: &Value) -> Vec<String> {
    let Some(Value::Array(mounts)) = value.get("bind_mounts") else {
        return Vec::new();
    };
    mounts
        .iter()
        .filter_map(|m| m.get("container_path").and_then(Value::as_str))
        .map(|p| p.trim_end_matches('/').to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

fn work_dir(value: &Value) -> Option<Finding> {
    let dir = value.get("work_dir").and_then(Value::as_str)?;
    let mount = mount_paths(value)
        .into_iter()
        .find(|m| dir == m || dir.starts_with(&format!("{m}/")))?;
    Some(finding(
        "work_dir",
        format!(
            "{dir:?} is inside the shared mount {mount:?}, so Determined's bootstrap auth files \
             would be written into the shared workspace. Fix: set `work_dir: \
             {BOOTSTRAP_WORK_DIR}` (or remove it) and `cd` into the project inside the command."
        ),
    ))
}

/// The retained interactive shell requests zero GPU slots: GPU work runs as trials or bounded
/// commands, which then find the GPU free.
fn shell_holds_no_gpu(value: &Value) -> Option<Finding> {
    let slots = value.pointer("/resources/slots").and_then(Value::as_i64);
    // Determined's default for a shell is one slot.
    (slots != Some(0)).then(|| {
        finding(
            "resources.slots",
            format!(
                "{}: the retained shell holds no GPU (a trial or command it starts would wait \
                 for a second one). Fix: set `resources.slots: 0`; run GPU work with \
                 `hessian-recipes cluster command --slots 1` or as an experiment.",
                slots.map_or(
                    "not set (Determined's default is 1)".to_owned(),
                    |s| format!("{s} slot(s)")
                )
            ),
        )
    })
}

/// Whether the entrypoint runs this project's binary as a trial (`hessian-recipes
/// managed-training ...` or `managed-trial ...`, the binary named by any path).
fn runs_our_trial(value: &Value) -> bool {
    let words: Vec<&str> = match value.get("entrypoint") {
        Some(Value::Array(words)) => words.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(line)) => line.split_whitespace().collect(),
        _ => return false,
    };
    words.windows(2).any(|w| {
        std::path::Path::new(w[0]).file_name() == Some("hessian-recipes".as_ref())
            && matches!(w[1], "managed-training" | "managed-trial")
    })
}

/// Whether the entrypoint starts `managed-training` through a launcher that starts one rank per
/// slot (ours or Determined's torch_distributed).
fn launches_ranks(value: &Value) -> bool {
    let words: Vec<&str> = match value.get("entrypoint") {
        Some(Value::Array(words)) => words.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(line)) => line.split_whitespace().collect(),
        _ => return false,
    };
    let ours = words.windows(2).any(|w| {
        std::path::Path::new(w[0]).file_name() == Some("hessian-recipes".as_ref())
            && w[1] == "launch"
    });
    (ours || words.contains(&"determined.launch.torch_distributed"))
        && words.contains(&"managed-training")
}

fn bounded_entrypoint(value: &Value) -> Option<Finding> {
    let Value::Array(words) = value.get("entrypoint")? else {
        return None;
    };
    let words: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
    let bounded = words.len() > TIMEOUT_PREFIX.len()
        && words[..TIMEOUT_PREFIX.len()] == TIMEOUT_PREFIX
        && words[TIMEOUT_PREFIX.len()]
            .trim_end_matches('s')
            .parse::<u64>()
            .is_ok_and(|s| s > 0);
    (!bounded).then(|| {
        finding(
            "entrypoint",
            format!(
                "the command is not bounded. Fix: start it with `{} <seconds>s` (use \
                 `hessian-recipes cluster cpu-command` to build the line).",
                TIMEOUT_PREFIX.join(" ")
            ),
        )
    })
}

fn environment(value: &Value) -> Vec<Finding> {
    const FIELD: &str = "environment.environment_variables";
    let vars: Vec<(String, String)> = match value.pointer("/environment/environment_variables") {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        Some(Value::Object(_)) => {
            return vec![finding(
                FIELD,
                "per-device variable lists ({cpu, cuda, rocm}) hide the defaults from this \
                 check. Fix: use one list of `K=V` strings."
                    .to_owned(),
            )];
        }
        _ => Vec::new(),
    };
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let overridden: Vec<&str> = lookup(OVERRIDES_VAR)
        .map(|v| v.split(',').map(str::trim).collect())
        .unwrap_or_default();
    let threads = THREAD_VARS
        .iter()
        .find_map(|v| lookup(v))
        .and_then(|v| v.parse().ok());
    let mut out = Vec::new();
    for (name, default) in EnvPolicy::defaults(threads.unwrap_or(DEFAULT_THREADS)) {
        if overridden.contains(&name.as_str()) {
            continue;
        }
        let ok = match lookup(&name) {
            Some(v) if THREAD_VARS.contains(&name.as_str()) => {
                v.parse::<u32>().is_ok_and(|n| n > 0)
            }
            Some(v) => v == default,
            None => false,
        };
        if !ok {
            out.push(finding(
                FIELD,
                format!(
                    "`{name}={default}` is missing or changed; the defaults keep GPUs hidden, the \
                     Hub offline and thread pools bounded. Fix: add `{name}={default}`, or list \
                     `{name}` in `{OVERRIDES_VAR}` to override it deliberately."
                ),
            ));
        }
    }
    out
}
