//! `hessian-recipes cluster ...`: render templates, check configs, preflight a submission, build
//! the bounded commands (`cpu-command` for this binary, `command` for any program on CPU or GPUs).

use std::{path::Path, process::ExitCode};

use anyhow::Context;
use hr_config::{BoundedCommand, ClusterProfile, ProfileName, check_file, templates};

use crate::{
    cli::ClusterCommand,
    output::{self, Refused},
};

pub(crate) fn run(command: ClusterCommand) -> anyhow::Result<ExitCode> {
    match command {
        ClusterCommand::Render {
            profile,
            output,
            root,
        } => render(profile, &output, root.as_deref()),
        ClusterCommand::Check { kind, files, json } => check(kind, &files, json),
        ClusterCommand::Preflight(args) => crate::preflight::run(&args),
        ClusterCommand::Command(args) => any_command(&args),
        ClusterCommand::CpuCommand {
            output,
            timeout_seconds,
            args,
        } => cpu_command(&output, timeout_seconds, args),
    }
}

fn render(name: ProfileName, out_dir: &Path, root: Option<&Path>) -> anyhow::Result<ExitCode> {
    let root = match root {
        Some(r) => r.to_owned(),
        None => std::env::current_dir().context("current folder")?,
    };
    let root = std::path::absolute(&root).context("resolving --root")?;
    let profile = ClusterProfile::by_name(name, &root);
    let rendered: Vec<(String, String)> = templates(&profile)
        .iter()
        .map(|t| Ok((t.file_name.clone(), t.render()?)))
        .collect::<Result<_, hr_config::Error>>()?;
    // Beside other files (the JAIF templates in cluster/determined), never over another text:
    // every clash is refused before anything is written.
    for (file, text) in &rendered {
        let path = out_dir.join(file);
        if path.symlink_metadata().is_ok()
            && hr_files::read_to_string_bounded(&path, hr_files::MAX_CONFIG_BYTES)
                .ok()
                .as_deref()
                != Some(text.as_str())
        {
            return Err(Refused(format!(
                "{} exists with other content; move it away or render into another --output",
                path.display()
            ))
            .into());
        }
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    for (file, text) in rendered {
        let path = out_dir.join(&file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn check(
    kind: Option<hr_config::ConfigKind>,
    files: &[std::path::PathBuf],
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut failed = 0;
    for file in files {
        let checked = check_file(file, kind).map(|(kind, findings)| {
            let (notes, problems): (Vec<_>, Vec<_>) = findings.into_iter().partition(|f| f.note);
            (kind, problems, notes)
        });
        if checked.as_ref().map_or(true, |(_, p, _)| !p.is_empty()) {
            failed += 1;
        }
        let lines =
            |f: &[hr_config::Finding]| f.iter().map(ToString::to_string).collect::<Vec<_>>();
        if json {
            let line = match &checked {
                Ok((kind, problems, notes)) => serde_json::json!({"file": file,
                    "kind": kind.to_string(), "ok": problems.is_empty(),
                    "problems": lines(problems), "notes": lines(notes)}),
                Err(e) => serde_json::json!({"file": file, "ok": false, "error": e.to_string()}),
            };
            println!("{line}");
            continue;
        }
        match checked {
            Ok((kind, problems, notes)) => {
                if problems.is_empty() {
                    println!("{}: ok ({kind})", file.display());
                } else {
                    println!("{}: {} problem(s) ({kind})", file.display(), problems.len());
                }
                for f in problems {
                    println!("  {f}");
                }
                if !notes.is_empty() {
                    println!(
                        "  {} note(s): house rules for this project's jobs, which this config \
                         is not (its entrypoint does not run hessian-recipes):",
                        notes.len()
                    );
                    for f in notes {
                        println!("    {f}");
                    }
                }
            }
            Err(e) => println!("{}: {e}", file.display()),
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn cpu_command(
    output: &Path,
    timeout_seconds: u64,
    mut args: Vec<String>,
) -> anyhow::Result<ExitCode> {
    if !output::plain_relative(output) {
        return Err(Refused(format!(
            "--output {}: give a folder relative to the checkout without `..`, e.g. runs/NAME",
            output.display()
        ))
        .into());
    }
    refuse_existing(output)?;
    let profile = ClusterProfile::jaif();
    args.extend(["--output".to_owned(), output.to_string_lossy().into_owned()]);
    let command = BoundedCommand {
        seconds: timeout_seconds,
        checkout: profile.checkout.clone(),
        program: "target/release/hessian-recipes".to_owned(),
        args,
        evidence: None,
    };
    print_det_line(&profile, &command, "cpu-command", &[])
}

/// Validates `command` and prints its `det command run` line with the profile's `kind` config.
fn print_det_line(
    profile: &ClusterProfile,
    command: &BoundedCommand,
    kind: &str,
    overrides: &[String],
) -> anyhow::Result<ExitCode> {
    command.validate().map_err(|e| Refused(e.to_string()))?;
    let config = format!("cluster/determined/{}-{kind}.yaml", profile.name);
    if !Path::new(&config).is_file() {
        eprintln!("note: {config} is not in the current folder; run the line from the checkout");
    }
    println!(
        "{}",
        command.det_command_line(profile.workspace.as_deref(), &config, overrides)
    );
    Ok(ExitCode::SUCCESS)
}

/// `cluster command`: any program as a bounded command on `slots` GPUs (0: the CPU auxiliary
/// capacity), its output kept in the fresh folder `output` under `runs/`.
fn any_command(args: &crate::cli::CommandArgs) -> anyhow::Result<ExitCode> {
    let output = &args.output;
    if !output::plain_relative(output) || !output.starts_with("runs") || output == Path::new("runs")
    {
        return Err(Refused(format!(
            "--output {}: give a folder under runs/ relative to the checkout, without `..`, \
             e.g. runs/trl-pilot-01",
            output.display()
        ))
        .into());
    }
    refuse_existing(output)?;
    let root = match &args.root {
        Some(r) => std::path::absolute(r)?,
        None => std::env::current_dir().context("current folder")?,
    };
    let profile = ClusterProfile::by_name(args.profile, &root);
    let folder = output.to_string_lossy().into_owned();
    let mut words = args.args.iter().map(|a| a.replace("{output}", &folder));
    let program = words.next().ok_or_else(|| {
        Refused("give the program to run after `--`, e.g. -- .venv/bin/python script.py".into())
    })?;
    let command = BoundedCommand {
        seconds: args.timeout_seconds,
        checkout: profile.checkout.clone(),
        program,
        args: words.collect(),
        evidence: Some(folder),
    };
    let (kind, overrides) = match args.slots {
        0 => ("cpu-command", Vec::new()),
        1 => ("gpu-command", Vec::new()),
        n => ("gpu-command", vec![format!("resources.slots={n}")]),
    };
    print_det_line(&profile, &command, kind, &overrides)
}

/// A bounded command's `--output` must not exist yet (the command creates it, so its evidence is
/// never mixed with an earlier run's).
fn refuse_existing(output: &Path) -> Result<(), Refused> {
    if output.exists() {
        return Err(Refused(format!(
            "--output {} already exists; use a fresh output folder for every command",
            output.display()
        )));
    }
    Ok(())
}
