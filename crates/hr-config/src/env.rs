//! The environment defaults every job gets: GPUs hidden, Hub downloads off, numerical thread
//! pools bounded. A job that needs otherwise says so explicitly, and the rendered environment
//! records the override in `HR_ENV_OVERRIDES` so a checker can tell a deliberate override from a
//! forgotten default.

use std::collections::BTreeMap;

/// The variable that lists deliberately overridden defaults, comma-separated.
pub const OVERRIDES_VAR: &str = "HR_ENV_OVERRIDES";

/// Thread-pool variables bounded by default.
pub(crate) const THREAD_VARS: [&str; 6] = [
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "RAYON_NUM_THREADS",
];

/// The default number of threads per pool.
pub(crate) const DEFAULT_THREADS: u32 = 4;

/// Which environment a job gets: the defaults, minus explicit overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Threads per numerical pool.
    pub threads: u32,
    /// Overridden defaults: `Some(value)` replaces the default value, `None` leaves the
    /// variable unset (e.g. `CUDA_VISIBLE_DEVICES` for a GPU job, which the agent sets).
    pub overrides: BTreeMap<String, Option<String>>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        Self {
            threads: DEFAULT_THREADS,
            overrides: BTreeMap::new(),
        }
    }
}

impl EnvPolicy {
    /// The policy of a job that uses the GPUs Determined assigns to it.
    pub fn gpu() -> Self {
        let mut policy = Self::default();
        policy
            .overrides
            .insert("CUDA_VISIBLE_DEVICES".to_owned(), None);
        policy
    }

    /// The defaults as `(name, value)` pairs, before overrides.
    pub fn defaults(threads: u32) -> Vec<(String, String)> {
        let mut vars = vec![
            ("CUDA_VISIBLE_DEVICES".to_owned(), String::new()),
            ("HF_HUB_OFFLINE".to_owned(), "1".to_owned()),
            ("HF_DATASETS_OFFLINE".to_owned(), "1".to_owned()),
            ("TRANSFORMERS_OFFLINE".to_owned(), "1".to_owned()),
            ("TOKENIZERS_PARALLELISM".to_owned(), "false".to_owned()),
        ];
        vars.extend(
            THREAD_VARS
                .iter()
                .map(|v| ((*v).to_owned(), threads.to_string())),
        );
        vars
    }

    /// The `K=V` list for `environment.environment_variables`.
    pub fn variables(&self) -> Vec<String> {
        let mut out: Vec<String> = Self::defaults(self.threads)
            .into_iter()
            .filter_map(|(name, default)| match self.overrides.get(&name) {
                None => Some(format!("{name}={default}")),
                Some(Some(value)) => Some(format!("{name}={value}")),
                Some(None) => None,
            })
            .collect();
        if !self.overrides.is_empty() {
            let names: Vec<&str> = self.overrides.keys().map(String::as_str).collect();
            out.push(format!("{OVERRIDES_VAR}={}", names.join(",")));
        }
        out
    }
}
