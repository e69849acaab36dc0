//! Reading a plan: parse (unknown fields refused with their path), then the checks of
//! `validate.rs`; paths made absolute for copies of the plan.

use std::path::{Path, PathBuf};

use crate::{Environment, Plan, PlanError};

impl Plan {
    /// Reads, parses and checks a plan; `model.path` and a dataset's files are resolved against
    /// the plan's folder.
    pub fn from_file(path: &Path) -> Result<Self, PlanError> {
        let text = hr_files::read_to_string_bounded(path, hr_files::MAX_CONFIG_BYTES).map_err(
            |source| PlanError::Io {
                path: path.to_owned(),
                source,
            },
        )?;
        let mut plan = Self::parse(path, &text)?;
        if let Some(dir) = path.parent() {
            let resolve = |p: &mut PathBuf| {
                if p.is_relative() {
                    *p = dir.join(&*p);
                }
            };
            resolve(&mut plan.model.path);
            plan.environment
                .dataset_files_mut()
                .into_iter()
                .for_each(resolve);
            if let Some(file) = plan
                .evaluation
                .as_mut()
                .and_then(|e| e.retention_file.as_mut())
            {
                resolve(file);
            }
        }
        Ok(plan)
    }

    /// Checks the plan as reading it does (for a plan changed after it was read); `path` is
    /// the file it was read from, named in errors.
    pub fn check(&self, path: &Path) -> Result<(), PlanError> {
        crate::validate::validate(self, path)
    }

    /// Makes every path in the plan (the model folder, a service's Python and folder, a
    /// dataset's files) absolute
    /// against the current folder, so a copy of the plan reads the same files from anywhere.
    pub fn make_paths_absolute(&mut self) -> std::io::Result<()> {
        let absolute = |p: &mut PathBuf| -> std::io::Result<()> {
            *p = std::path::absolute(&*p)?;
            Ok(())
        };
        absolute(&mut self.model.path)?;
        for file in self.environment.dataset_files_mut() {
            absolute(file)?;
        }
        if let Some(file) = self
            .evaluation
            .as_mut()
            .and_then(|e| e.retention_file.as_mut())
        {
            absolute(file)?;
        }
        match &mut self.environment {
            Environment::Fixture { .. } | Environment::Dataset { .. } => {}
            Environment::Openenv {
                python, env_root, ..
            } => {
                absolute(python)?;
                absolute(env_root)?;
            }
            Environment::Nemo {
                python, server_dir, ..
            } => {
                absolute(python)?;
                absolute(server_dir)?;
            }
        }
        Ok(())
    }

    /// Every file or folder a run of the plan reads, with the field that names it: the model
    /// folder, a dataset's files and reward files, a service's Python and folder. What
    /// `cluster preflight` checks exists before a trial that needs it starts.
    pub fn input_paths(&self) -> Vec<(String, &Path)> {
        let mut inputs = vec![("model.path".to_owned(), self.model.path.as_path())];
        inputs.extend(
            self.evaluation
                .as_ref()
                .and_then(|e| e.retention_file.as_deref())
                .map(|f| ("evaluation.retention_file".to_owned(), f)),
        );
        match &self.environment {
            Environment::Fixture { .. } => {}
            Environment::Dataset {
                train,
                dev,
                held_out,
                rewards,
            } => {
                inputs.push(("environment.train".to_owned(), train.as_path()));
                inputs.extend(
                    dev.iter()
                        .map(|d| ("environment.dev".to_owned(), d.as_path())),
                );
                inputs.extend(
                    held_out
                        .iter()
                        .map(|h| ("environment.held_out".to_owned(), h.as_path())),
                );
                for (i, r) in rewards.iter().enumerate() {
                    inputs.extend(
                        r.file
                            .iter()
                            .map(|f| (format!("environment.rewards[{i}].file"), f.as_path())),
                    );
                }
            }
            Environment::Openenv {
                python, env_root, ..
            } => {
                inputs.push(("environment.python".to_owned(), python.as_path()));
                inputs.push(("environment.env_root".to_owned(), env_root.as_path()));
            }
            Environment::Nemo {
                python, server_dir, ..
            } => {
                inputs.push(("environment.python".to_owned(), python.as_path()));
                inputs.push(("environment.server_dir".to_owned(), server_dir.as_path()));
            }
        }
        inputs
    }

    /// Parses and checks plan text; `path` only names the file in errors. A model named only by
    /// `model.hub_id` is looked up in the local Hugging Face cache.
    pub fn parse(path: &Path, text: &str) -> Result<Self, PlanError> {
        let field_error = |(field, message): crate::trl_names::Refusal| PlanError::Field {
            path: path.to_owned(),
            field,
            message,
        };
        // TRL's spellings become the plan's own; a plan without them is parsed as written, so
        // the parser's line and column point into the file (and so they do for text that is
        // not JSON at all).
        let normalised = match serde_json::from_str::<serde_json::Value>(text) {
            Ok(value) => {
                let mut own = value.clone();
                crate::trl_names::normalise(&mut own).map_err(field_error)?;
                if own == value {
                    text.to_owned()
                } else {
                    own.to_string()
                }
            }
            Err(_) => text.to_owned(),
        };
        let de = &mut serde_json::Deserializer::from_str(&normalised);
        let mut plan: Plan = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            PlanError::Field {
                path: path.to_owned(),
                field: if field == "." {
                    "(plan)".to_owned()
                } else {
                    field
                },
                message: e.into_inner().to_string(),
            }
        })?;
        crate::validate::validate(&plan, path)?;
        if plan.model.path.as_os_str().is_empty()
            && let Some(id) = &plan.model.hub_id
        {
            plan.model.path =
                crate::hub_cache::find_cached(id).map_err(|message| PlanError::Field {
                    path: path.to_owned(),
                    field: "model.hub_id".to_owned(),
                    message,
                })?;
        }
        Ok(plan)
    }
}
