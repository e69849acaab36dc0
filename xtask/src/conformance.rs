//! `cargo xtask conformance det`: the devmaster against the real `determined==0.35.0` client.
//! Prepares (once, in a cache folder outside the repo) a venv with the client from PyPI, starts a
//! fresh devmaster, and runs `xtask/conformance/det_cli.py`, which drives `det` and two managed
//! trials (real Python Core API, and Rust on `hr-core`); `conformance_tls` adds the same
//! through TLS.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::{Context, Result, bail};

use crate::cache::{cache_dir, venv, venv_with};
use crate::{describe, run};

/// The pinned client.
pub(crate) const DETERMINED: &str = "determined==0.35.0";

/// `python script` with the arguments every det driver takes: the master, the real `det` and
/// Python of `venv`, our Rust Core trial from `bin`, and the devmaster's state folder.
pub(crate) fn det_driver(
    venv: &Path,
    script: &Path,
    url: &str,
    bin: &Path,
    state: &Path,
) -> Command {
    let mut driver = Command::new(venv.join("bin/python"));
    driver
        .arg(script)
        .args(["--master", url])
        .arg("--det")
        .arg(venv.join("bin/det"))
        .arg("--python")
        .arg(venv.join("bin/python"))
        .arg("--rust-trial")
        .arg(bin.join("hr-core-conformance-trial"))
        .arg("--state-dir")
        .arg(state);
    driver
}

/// A devmaster process, stopped (SIGTERM) when dropped.
pub(crate) struct Devmaster(Child);

/// The path the real Python Core API reads cluster info from; each devmaster trial sees its own
/// folder there, and the host's stays empty.
const INFO_DIR: &str = "/run/determined/info";

/// Starts `hessian-recipes devmaster`, as docs/cluster.md gives it, on a free port with `state` and
/// `extra` arguments; returns it and the URL it printed.
pub(crate) fn start_devmaster(
    binary: &Path,
    state: &Path,
    extra: &[&std::ffi::OsStr],
) -> Result<(Devmaster, String)> {
    let mut cmd = Command::new(binary);
    cmd.args([
        "devmaster",
        "--listen",
        "127.0.0.1:0",
        "--preemption-timeout-seconds",
        "120",
        "--state-dir",
    ])
    .arg(state)
    .args(extra);
    spawn_devmaster(cmd)
}

/// Starts the devmaster `cmd`; returns it and the URL it printed.
pub(crate) fn spawn_devmaster(mut cmd: Command) -> Result<(Devmaster, String)> {
    let mut child = cmd
        // `requests` lets these override the bundle a session is given, so a Python trial would
        // ignore the DET_MASTER_CERT_FILE a TLS devmaster hands it.
        .env_remove("REQUESTS_CA_BUNDLE")
        .env_remove("CURL_CA_BUNDLE")
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the devmaster")?;
    let stdout = child.stdout.take().context("devmaster stdout")?;
    let guard = Devmaster(child);
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first)?;
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://") || w.starts_with("https://"))
        .context("devmaster did not print its URL")?
        .to_owned();
    Ok((guard, url))
}

impl Drop for Devmaster {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Steps of the managed-training trial the det conformance pauses and activates.
const TRAINING_STEPS: u64 = 12;

/// Runs the det conformance, then `more(venv, binaries, work)` (further cases on their own
/// devmaster: `conformance_tls`), then checks that no devmaster wrote into the host's
/// `/run/determined/info`; returns (passed, failed).
pub(crate) fn det_with(
    root: &Path,
    more: impl FnOnce(&Path, &Path, &Path) -> Result<(u64, u64)>,
) -> Result<(u64, u64)> {
    let venv = venv("venv-determined-0.35.0", &[DETERMINED])?;
    let bin = crate::debug_binaries(root)?;
    let work = target_dir(root)
        .join("conformance")
        .join(format!("det-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let templates = work.join("templates");
    let mut render = Command::new(bin.join("hessian-recipes"));
    render
        .args(["cluster", "render", "--profile", "local", "--output"])
        .arg(&templates)
        .arg("--root")
        .arg(root);
    render.stdout(Stdio::null());
    run(render)?;

    // The managed-training cases: a tiny plan per backend (the fixture, and the real OpenEnv and
    // NeMo Gym servers), with steps long enough that `det experiment pause` lands mid-run, and
    // each plan's native uninterrupted run as its reference.
    let servers = RealServers::setup()?;
    let fixture = serde_json::json!({"backend": "fixture", "tasks": {"kind": "digits", "count": 5, "seed": 3}});
    let cases = [
        (
            "fixture",
            fixture,
            serde_json::json!({"tasks_per_step": 2, "num_generations": 8,
            "max_completion_length": 64, "max_turn_tokens": 64}),
        ),
        (
            "openenv",
            servers.openenv_environment(),
            serde_json::json!({"tasks_per_step": 1,
            "num_generations": 4, "max_completion_length": 32, "max_turn_tokens": 16, "max_turns": 2}),
        ),
        (
            "nemo",
            servers.nemo_environment(),
            serde_json::json!({"tasks_per_step": 1,
            "num_generations": 4, "max_completion_length": 32, "max_turn_tokens": 16, "max_turns": 2}),
        ),
    ];
    let mut training = Vec::new();
    for (backend, environment, grpo) in cases {
        let name = format!("managed-{backend}");
        let plan = training_plan(root, &work, &name, &environment, &grpo, TRAINING_STEPS)?;
        let reference = work.join(format!("{name}-reference"));
        native_run(&bin.join("hessian-recipes"), &plan, &reference)?;
        training.push(
            serde_json::json!({"backend": backend, "plan": plan, "steps": TRAINING_STEPS,
            "reference_evidence": reference.join("evidence.jsonl")}),
        );
    }
    let cases_file = work.join("training-cases.json");
    std::fs::write(&cases_file, serde_json::to_vec_pretty(&training)?)?;
    let main_file = main_run_case(root, &bin.join("hessian-recipes"), &work)?;
    let torchrun = torchrun_case(root, &bin.join("hessian-recipes"), &work, &venv)?;

    let state = work.join("state");
    // Two slots: Determined's torch_distributed launcher starts a rank per slot.
    let slots = [std::ffi::OsStr::new("--slots"), std::ffi::OsStr::new("2")];
    let (guard, url) = start_devmaster(&bin.join("hessian-recipes"), &state, &slots)?;
    eprintln!(
        "conformance: devmaster at {url}, work in {}",
        work.display()
    );

    let script = root.join("xtask/conformance/det_cli.py");
    let mut driver = det_driver(&venv, &script, &url, &bin, &state);
    driver
        .arg("--local-config")
        .arg(templates.join("local-managed-cpu.yaml"))
        .arg("--hessian-recipes")
        .arg(bin.join("hessian-recipes"))
        .arg("--training-cases")
        .arg(&cases_file)
        .arg("--main-run")
        .arg(&main_file)
        .arg("--torchrun-case")
        .arg(&torchrun)
        .arg("--work")
        .arg(&work);
    let result = run_driver(driver, "det-conformance");
    drop(guard);
    let (mut passed, mut failed) = result?;
    let (more_passed, more_failed) = more(&venv, &bin, &work)?;
    passed += more_passed;
    failed += more_failed;
    // Trials saw their own info folders: nothing was written to the host's, so no later Python
    // Core trial on this machine finds a session of a master that is gone.
    let left: Vec<String> = std::fs::read_dir(INFO_DIR)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    if left.is_empty() {
        println!("ok   the devmasters left nothing in {INFO_DIR}");
        passed += 1;
    } else {
        println!("FAIL the devmasters left {left:?} in {INFO_DIR}");
        failed += 1;
    }
    if failed == 0 {
        std::fs::remove_dir_all(&work)?;
    } else {
        eprintln!("conformance: kept {} for inspection", work.display());
    }
    Ok((passed, failed))
}

/// Steps of the main run the det conformance drives end to end, the steps it pauses after, and
/// the checkpoints its evaluation adopts.
const MAIN_STEPS: u64 = 256;
const MAIN_PAUSES: [u64; 2] = [60, 150];
const MAIN_EVALUATE: [u64; 3] = [64, 128, 256];

/// Prepares the main-run case: its four-step qualification plan, qualified natively and managed
/// (the proofs the gate requires), the 256-step plan of the same family with an evaluation
/// section, and the 256-step plan's native uninterrupted run as the reference. Writes and
/// returns `work/main-run.json` for the driver.
fn main_run_case(root: &Path, binary: &Path, work: &Path) -> Result<PathBuf> {
    let environment = serde_json::json!({"backend": "fixture", "tasks": {"kind": "digits", "count": 16, "seed": 3}});
    let grpo = serde_json::json!({"tasks_per_step": 2, "num_generations": 4,
        "max_completion_length": 8, "max_turn_tokens": 8});
    let qual = training_plan(root, work, "main-qual", &environment, &grpo, 4)?;
    let mut plan: serde_json::Value = serde_json::from_slice(&std::fs::read(&qual)?)?;
    plan["name"] = "main-tiny".into();
    plan["steps"] = MAIN_STEPS.into();
    plan["checkpoints"] = serde_json::json!({"every": 64});
    plan["evaluation"] = serde_json::json!({"checkpoints": MAIN_EVALUATE,
        "dev": {"count": 8, "seed": 1}, "held_out": {"count": 8, "seed": 2},
        "retention_max_new_tokens": 8});
    let main = work.join("main-tiny.json");
    std::fs::write(&main, serde_json::to_vec_pretty(&plan)?)?;
    let proofs = hr_proof::ProofsDir::new(work.join("main-proofs"));
    std::fs::create_dir_all(proofs.root())?;
    for (what, plan, out) in [
        ("qualify native", &qual, proofs.native()),
        ("qualify managed", &qual, proofs.managed()),
        ("train", &main, work.join("main-reference")),
    ] {
        let mut cmd = Command::new(binary);
        cmd.args(what.split(' '))
            .arg("--plan")
            .arg(plan)
            .arg("--output")
            .arg(&out);
        eprintln!("conformance: main run: {what} -> {}", out.display());
        // Quiet unless it fails: a 256-step run prints a line per step.
        let done = cmd.output().with_context(|| format!("running {what}"))?;
        if !done.status.success() {
            let stderr = String::from_utf8_lossy(&done.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
            bail!(
                "main run: {what} failed ({}):\n{}",
                done.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
    let case = serde_json::json!({"plan": main, "proofs": proofs.root(), "steps": MAIN_STEPS,
        "pauses": MAIN_PAUSES, "evaluate": MAIN_EVALUATE,
        "reference_evidence": work.join("main-reference").join("evidence.jsonl")});
    let path = work.join("main-run.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&case)?)?;
    Ok(path)
}

/// Runs a conformance driver, echoing its output, and returns the `(passed, failed)` of its
/// summary line `<prefix>: N passed, M failed`.
pub(crate) fn run_driver(mut driver: Command, prefix: &str) -> Result<(u64, u64)> {
    eprintln!("$ {}", describe(&driver));
    let mut child = driver
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", describe(&driver)))?;
    let out = child.stdout.take().context("driver stdout")?;
    let mut summary = None;
    for line in BufReader::new(out).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix(prefix).and_then(|r| r.strip_prefix(": ")) {
            summary = Some(rest.to_owned());
        }
    }
    let status = child.wait()?;
    let Some(summary) = summary else {
        bail!("{prefix}: the driver ended without a summary ({status})")
    };
    let number = |label: &str| {
        summary
            .split(',')
            .find_map(|p| p.trim().strip_suffix(label))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (passed, failed) = (number(" passed"), number(" failed"));
    if !status.success() && failed == 0 {
        bail!("{prefix}: the driver failed ({status}) but reported no failed check");
    }
    Ok((passed, failed))
}

/// The environment `openenv init NAME` generates, once into the cache: the folder holding
/// `NAME/`, whose app is `NAME.server.app:app`.
fn openenv_init(venv: &Path, name: &str) -> Result<PathBuf> {
    let dir = cache_dir()?.join(format!("openenv-{}", name.replace('_', "-")));
    if dir.join(name).join("server/app.py").is_file() {
        return Ok(dir);
    }
    let tmp = dir.with_extension("partial");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp)?;
    let mut init = Command::new(venv.join("bin/openenv"));
    init.args(["init", name, "-o", "."])
        .current_dir(&tmp)
        .stdout(Stdio::null());
    run(init)?;
    std::fs::rename(&tmp, &dir)?;
    Ok(dir)
}

/// The real environment servers, installed once into the cache: OpenEnv's echo env
/// (`openenv-core` and its `echo_env` template) and NeMo Gym's `example_single_tool_call`
/// (`nemo-gym==0.7.0` on CPython 3.13 built from source).
pub(crate) struct RealServers {
    /// The openenv-core venv's python.
    pub(crate) openenv_python: PathBuf,
    /// The folder holding `echo_env/`.
    pub(crate) openenv_root: PathBuf,
    /// The nemo-gym venv's python.
    pub(crate) nemo_python: PathBuf,
    /// `example_single_tool_call`'s folder.
    pub(crate) nemo_server: PathBuf,
}

impl RealServers {
    /// Builds (or reuses) the venvs and the server folders.
    pub(crate) fn setup() -> Result<Self> {
        let venv = venv("venv-openenv-core-0.3.0", &["openenv-core==0.3.0"])?;
        let openenv_root = openenv_init(&venv, "echo_env")?;
        // NeMo Gym needs Python >= 3.13.14: CPython is built once from Debian's source package.
        let python = crate::python::cpython313()?;
        let nemo = venv_with(
            "venv-nemo-gym-0.7.0",
            &python.join("bin/python3.13"),
            &["nemo-gym==0.7.0"],
        )?;
        let locate = Command::new(nemo.join("bin/python"))
            .args([
                "-c",
                "import resources_servers; print(list(resources_servers.__path__)[0])",
            ])
            .output()
            .context("locating resources_servers in the nemo-gym venv")?;
        let nemo_server = PathBuf::from(String::from_utf8_lossy(&locate.stdout).trim())
            .join("example_single_tool_call");
        Ok(Self {
            openenv_python: venv.join("bin/python"),
            openenv_root,
            nemo_python: nemo.join("bin/python"),
            nemo_server,
        })
    }

    /// A plan's `environment` for the OpenEnv echo env (two reset payloads).
    pub(crate) fn openenv_environment(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": "openenv", "python": self.openenv_python, "env_root": self.openenv_root,
            "tasks": [{}, {"message": "hi"}],
        })
    }

    /// A dataset row of NeMo Gym's `example_single_tool_call`: the user's `question` and the
    /// weather tool.
    pub(crate) fn nemo_row(&self, question: &str) -> serde_json::Value {
        serde_json::json!({"responses_create_params": {"input": [{"role": "user", "content": question}],
            "tools": [{"type": "function", "name": "get_weather", "strict": true,
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}]}})
    }

    /// A plan's `environment` for NeMo Gym's `example_single_tool_call` (one dataset row).
    pub(crate) fn nemo_environment(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": "nemo", "python": self.nemo_python, "server_dir": self.nemo_server,
            "tasks": [self.nemo_row("weather in sf?")],
        })
    }

    /// A plan's `environment` for another NeMo Gym resources server of the same install,
    /// `example_multi_step` (one short row in its dataset's shape), so the backend is shown to
    /// take any server's folder, not only the one the bridge conformance drives.
    pub(crate) fn nemo_multi_step_environment(&self) -> Result<serde_json::Value> {
        let server = self
            .nemo_server
            .parent()
            .context("resources_servers")?
            .join("example_multi_step");
        let row = serde_json::json!({"responses_create_params": {"input": [
                {"role": "system", "content": "Get and extract the value of the synonym 'Warm'."},
                {"role": "user", "content": "Why is it hot?"}],
            "tools": [
                {"type": "function", "name": "get_synonym_value", "strict": true,
                 "description": "Get the synonym value for a synonym.",
                 "parameters": {"type": "object", "required": ["synonym"], "additionalProperties": false,
                    "properties": {"synonym": {"type": "string"}}}},
                {"type": "function", "name": "extract_synonym_values", "strict": true,
                 "description": "Extract the synonym values.",
                 "parameters": {"type": "object", "required": ["synonym_values"], "additionalProperties": false,
                    "properties": {"synonym_values": {"type": "array", "items": {"type": "integer"}}}}}],
            "parallel_tool_calls": false},
            "id": 0, "expected_synonyms": ["Warm"], "expected_synonym_values": [407],
            "minefield_label": "Hot", "minefield_label_value": 299});
        Ok(serde_json::json!({
            "backend": "nemo", "python": self.nemo_python, "server_dir": server, "tasks": [row],
        }))
    }

    /// A plan's `environment` for an OpenEnv environment other than the echo env's name
    /// (`openenv init counter_env`, served through the plan's `app`).
    pub(crate) fn openenv_other_environment(&self) -> Result<serde_json::Value> {
        let venv = self
            .openenv_python
            .parent()
            .and_then(Path::parent)
            .context("the openenv venv")?;
        let root = openenv_init(venv, "counter_env")?;
        Ok(serde_json::json!({
            "backend": "openenv", "python": self.openenv_python, "env_root": root,
            "app": "counter_env.server.app:app", "tasks": [{}, {"message": "hi"}],
        }))
    }
}

/// `cargo xtask conformance envs`: the bridge against the real OpenEnv server and the real
/// NeMo Gym resources server ([`RealServers`]), then a short `train` against each. Returns
/// (passed, failed).
pub(crate) fn envs(root: &Path) -> Result<(u64, u64)> {
    let servers = RealServers::setup()?;
    crate::debug_binaries(root)?;
    let work = target_dir(root)
        .join("conformance")
        .join(format!("envs-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let bridge = target_dir(root).join("debug/hr-bridge-conformance");
    let mut driver = Command::new(&bridge);
    driver
        .arg("openenv")
        .arg("--python")
        .arg(&servers.openenv_python)
        .arg("--dir")
        .arg(&servers.openenv_root)
        .arg("--log-dir")
        .arg(&work);
    let (mut passed, mut failed) = run_driver(driver, "openenv-conformance")?;
    let (p, f) = train_against(root, &work, "openenv", &servers.openenv_environment())?;
    passed += p;
    failed += f;
    let other = servers.openenv_other_environment()?;
    let (p, f) = train_against(root, &work, "openenv-counter-env", &other)?;
    passed += p;
    failed += f;

    let mut driver = Command::new(&bridge);
    driver
        .arg("nemo")
        .arg("--python")
        .arg(&servers.nemo_python)
        .arg("--dir")
        .arg(&servers.nemo_server)
        .arg("--log-dir")
        .arg(&work);
    let (p, f) = run_driver(driver, "nemo-conformance")?;
    passed += p;
    failed += f;
    let (p, f) = train_against(root, &work, "nemo", &servers.nemo_environment())?;
    passed += p;
    failed += f;
    let other = servers.nemo_multi_step_environment()?;
    let (p, f) = train_against(root, &work, "nemo-multi-step", &other)?;
    passed += p;
    failed += f;
    if failed == 0 {
        std::fs::remove_dir_all(&work)?;
    } else {
        eprintln!("conformance: kept {} for inspection", work.display());
    }
    Ok((passed, failed))
}

/// The tiny test model in `target/tiny-model`, written when absent.
pub(crate) fn tiny_model(root: &Path) -> PathBuf {
    let tiny = target_dir(root).join("tiny-model");
    if !tiny.join("config.json").is_file() {
        hr_tests::tiny_model::write_tiny_model(&tiny, &hr_tests::tiny_model::TinySpec::default());
    }
    tiny
}

/// `hessian-recipes train` of `plan` into `output`: a native run whose evidence a managed one
/// must equal.
fn native_run(binary: &Path, plan: &Path, output: &Path) -> Result<()> {
    let mut native = Command::new(binary);
    native
        .arg("train")
        .arg("--plan")
        .arg(plan)
        .arg("--output")
        .arg(output);
    native.stdout(Stdio::null());
    run(native)
}

/// Steps of the data-parallel trial Determined's torch_distributed launcher starts.
const TORCHRUN_STEPS: u64 = 3;

/// The torch_distributed case: a plan of two shards, its one-rank native run as the reference,
/// and a Python that has both `determined` and `torch` (a venv of the Hugging Face venv's
/// interpreter whose `.pth` adds that venv's packages, then the client's: nothing downloaded
/// beyond those two venvs). Returns the case file.
fn torchrun_case(root: &Path, binary: &Path, work: &Path, det: &Path) -> Result<PathBuf> {
    use crate::bench_trl::{HF_PACKAGES, HF_VENV};
    let hf = venv(HF_VENV, HF_PACKAGES)?;
    let launcher = work.join("venv-torchrun");
    let mut make = Command::new(hf.join("bin/python"));
    make.args(["-m", "venv"]).arg(&launcher);
    run(make)?;
    let site = |venv: &Path| -> Result<PathBuf> {
        std::fs::read_dir(venv.join("lib"))?
            .filter_map(Result::ok)
            .map(|e| e.path().join("site-packages"))
            .find(|p| p.is_dir())
            .with_context(|| format!("{}: no site-packages", venv.display()))
    };
    let pth = format!("{}\n{}\n", site(&hf)?.display(), site(det)?.display());
    std::fs::write(site(&launcher)?.join("hr-torchrun.pth"), pth)?;
    let fixture = serde_json::json!({"backend": "fixture", "tasks": {"kind": "digits", "count": 5, "seed": 3}});
    let grpo = serde_json::json!({"tasks_per_step": 2, "num_generations": 4,
        "max_completion_length": 16, "max_turn_tokens": 16});
    let plan = training_plan(root, work, "torchrun", &fixture, &grpo, TORCHRUN_STEPS)?;
    let mut sharded: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan)?)?;
    sharded["parallel"] = serde_json::json!({"shards": 2});
    std::fs::write(&plan, serde_json::to_vec_pretty(&sharded)?)?;
    let reference = work.join("torchrun-reference");
    native_run(binary, &plan, &reference)?;
    let case = work.join("torchrun-case.json");
    std::fs::write(
        &case,
        serde_json::to_vec_pretty(&serde_json::json!({
            "python": launcher.join("bin/python"),
            "plan": plan,
            "steps": TORCHRUN_STEPS,
            "reference_evidence": reference.join("evidence.jsonl"),
        }))?,
    )?;
    Ok(case)
}

/// A plan `work/<name>.json` of `steps` steps on the tiny test model with `environment` and
/// `grpo`, one checkpoint per step.
pub(crate) fn training_plan(
    root: &Path,
    work: &Path,
    name: &str,
    environment: &serde_json::Value,
    grpo: &serde_json::Value,
    steps: u64,
) -> Result<PathBuf> {
    let tiny = tiny_model(root);
    let plan = serde_json::json!({
        "schema_version": 1,
        "name": name,
        "model": {"path": tiny, "lora": {"rank": 2, "alpha": 4.0, "targets": ["q_proj", "v_proj"]}},
        "environment": environment,
        "grpo": grpo,
        "optimizer": {"learning_rate": 0.01},
        "steps": steps,
        "checkpoints": {"every": 1},
        "seeds": {"sampling": 1, "adapter_init": 2, "task_order": 3}
    });
    let path = work.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&plan)?)?;
    Ok(path)
}

/// A short `hessian-recipes train` run (tiny model, 2 steps, max 2 turns) with the plan's
/// environment `environment` served by the real server; passes when it completes both steps.
fn train_against(
    root: &Path,
    work: &Path,
    name: &str,
    environment: &serde_json::Value,
) -> Result<(u64, u64)> {
    let grpo = serde_json::json!({"tasks_per_step": 1, "num_generations": 2,
        "max_completion_length": 16, "max_turn_tokens": 8, "max_turns": 2});
    let plan_path = training_plan(root, work, &format!("train-{name}"), environment, &grpo, 2)?;
    let out = work.join(format!("train-{name}"));
    let status = Command::new(target_dir(root).join("debug/hessian-recipes"))
        .arg("train")
        .arg("--plan")
        .arg(&plan_path)
        .arg("--output")
        .arg(&out)
        .status()
        .context("running hessian-recipes train")?;
    let steps = std::fs::read_to_string(out.join("metrics.jsonl")).map_or(0, |t| t.lines().count());
    let ok = status.success() && steps == 2;
    println!(
        "train against the real {name} server: {}",
        if ok {
            "1 passed, 0 failed"
        } else {
            "0 passed, 1 failed"
        }
    );
    Ok(if ok { (1, 0) } else { (0, 1) })
}
