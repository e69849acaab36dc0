//! The bounded command of the seed: `timeout --signal=TERM --kill-after=30s <N>s` around
//! `bash -lc 'cd <checkout> && exec <program> <args>'`, so every utility command ends on its own,
//! changes into the checkout itself (Determined's work dir stays `/run/determined/workdir`) and
//! replaces the shell with the program so the TERM reaches it.

use crate::Error;

/// `timeout` with the signal and grace period the rules require.
pub const TIMEOUT_PREFIX: [&str; 3] = ["/usr/bin/timeout", "--signal=TERM", "--kill-after=30s"];

/// A command bounded in wall-clock time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundedCommand {
    /// Wall-clock limit before TERM.
    pub seconds: u64,
    /// Folder to `cd` into.
    pub checkout: String,
    /// Program to `exec`, relative to the checkout or absolute.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// A fresh folder (relative to the checkout) the command makes before the program starts and
    /// keeps the program's output in (`command.log`, while the task log still shows it): the
    /// evidence of a run whose program writes no run folder of its own.
    pub evidence: Option<String>,
}

/// The file in [`BoundedCommand::evidence`] that keeps the program's output.
pub const COMMAND_LOG: &str = "command.log";

/// Quotes a word for a POSIX shell; words made only of safe characters stay as they are.
pub fn shell_quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

impl BoundedCommand {
    /// Checks the inputs: a positive limit and an absolute checkout.
    pub fn validate(&self) -> Result<(), Error> {
        if self.seconds == 0 {
            return Err(Error::InvalidInput {
                field: "--timeout-seconds",
                message: "must be at least 1: every command needs a wall-clock bound".to_owned(),
            });
        }
        if !self.checkout.starts_with('/') {
            return Err(Error::InvalidInput {
                field: "checkout",
                message: format!("{:?} must be an absolute path", self.checkout),
            });
        }
        Ok(())
    }

    /// The script `bash -lc` runs.
    pub fn script(&self) -> String {
        let mut words = vec![shell_quote(&self.program)];
        words.extend(self.args.iter().map(|a| shell_quote(a)));
        // `mkdir` without `-p` on the folder itself: an existing one stops the command.
        let evidence = self.evidence.as_deref().map_or(String::new(), |dir| {
            let parent = std::path::Path::new(dir)
                .parent()
                .map(|p| p.to_string_lossy().into_owned())
                .filter(|p| !p.is_empty());
            let dir = shell_quote(dir);
            format!(
                "{}mkdir {dir} && exec > >(tee {dir}/{COMMAND_LOG}) 2>&1 && ",
                parent.map_or(String::new(), |p| format!(
                    "mkdir -p {} && ",
                    shell_quote(&p)
                ))
            )
        });
        format!(
            "cd {} && {evidence}exec {}",
            shell_quote(&self.checkout),
            words.join(" ")
        )
    }

    /// The full argv: timeout, bash, script.
    pub fn argv(&self) -> Vec<String> {
        let mut argv: Vec<String> = TIMEOUT_PREFIX.iter().map(|s| (*s).to_owned()).collect();
        argv.push(format!("{}s", self.seconds));
        argv.extend(["/bin/bash".to_owned(), "-lc".to_owned(), self.script()]);
        argv
    }

    /// The `det command run` line that submits this command in `workspace` with `config_file`
    /// and the `--config KEY=VALUE` `overrides`.
    pub fn det_command_line(
        &self,
        workspace: Option<&str>,
        config_file: &str,
        overrides: &[String],
    ) -> String {
        let mut words = vec!["det".to_owned(), "command".to_owned(), "run".to_owned()];
        if let Some(workspace) = workspace {
            words.extend(["--workspace-name".to_owned(), shell_quote(workspace)]);
        }
        words.extend(["--config-file".to_owned(), shell_quote(config_file)]);
        for o in overrides {
            words.extend(["--config".to_owned(), shell_quote(o)]);
        }
        words.push("--detach".to_owned());
        words.extend(self.argv().iter().map(|w| shell_quote(w)));
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(shell_quote("plain-word_1.0"), "plain-word_1.0");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn seed_line_is_reproduced() {
        let cmd = BoundedCommand {
            seconds: 900,
            checkout: "/pfss/mlde/workspaces/mlde_wsp_JAIF/hessian_recipes".to_owned(),
            program: "target/release/hessian-recipes".to_owned(),
            args: vec![
                "demo".to_owned(),
                "--output".to_owned(),
                "runs/x".to_owned(),
            ],
            evidence: None,
        };
        assert_eq!(
            cmd.det_command_line(
                Some("JAIF"),
                "cluster/determined/jaif-cpu-command.yaml",
                &[]
            ),
            "det command run --workspace-name JAIF --config-file \
             cluster/determined/jaif-cpu-command.yaml --detach /usr/bin/timeout --signal=TERM \
             --kill-after=30s 900s /bin/bash -lc 'cd /pfss/mlde/workspaces/mlde_wsp_JAIF/\
             hessian_recipes && exec target/release/hessian-recipes demo --output runs/x'"
        );
    }

    #[test]
    fn a_command_with_an_evidence_folder_makes_it_fresh_and_keeps_its_output() {
        let cmd = BoundedCommand {
            seconds: 60,
            checkout: "/c".to_owned(),
            program: ".venv/bin/python".to_owned(),
            args: vec![
                "trl.py".to_owned(),
                "--out".to_owned(),
                "runs/p/a b".to_owned(),
            ],
            evidence: Some("runs/p".to_owned()),
        };
        assert_eq!(
            cmd.script(),
            "cd /c && mkdir -p runs && mkdir runs/p && exec > >(tee runs/p/command.log) 2>&1 && \
             exec .venv/bin/python trl.py --out 'runs/p/a b'"
        );
        assert!(
            cmd.det_command_line(Some("JAIF"), "g.yaml", &["resources.slots=2".to_owned()])
                .starts_with("det command run --workspace-name JAIF --config-file g.yaml --config resources.slots=2 --detach ")
        );
    }
}
