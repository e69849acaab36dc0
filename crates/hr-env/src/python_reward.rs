//! Reward functions written in Python, with TRL 1.16's `reward_funcs` contract: a child process
//! per function (`python -c DRIVER FILE FUNCTION`) that imports the file once, says it is ready,
//! and then answers one JSON line per request on stdin (one request per generation batch, its
//! episodes in order), calling `f(prompts=..., completions=..., completion_ids=...,
//! trainer_state=..., log_extra=..., log_metric=..., **columns)` as TRL does (awaiting it when it
//! is `async`) and answering one float or `None` ("not applicable") per completion, with what it
//! passed to `log_metric` (kept until the trainer takes it; `log_extra` is accepted and unused). A failed
//! import, a crash, an exception, an answer that is not one float or `None` per completion, or no
//! answer within the timeout is an error naming the function and carrying the tail of its log. The driver leads a process group of its own (a terminal's Ctrl-C reaches
//! `train`, which stops cleanly, not the reward mid-answer); the whole group, with whatever the
//! function started, is killed when its owner is dropped, and by its [`GroupWatchdog`] when
//! `train` ends without dropping it (a SIGKILL).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use hr_files::CappedLog;
use serde_json::{Value, json};

use crate::{EnvError, GroupWatchdog};

/// The driver the interpreter runs: import, then answer requests line by line.
const DRIVER: &str = r#"
import asyncio, importlib.util, inspect, json, math, sys, traceback, types
path, name = sys.argv[1], sys.argv[2]
try:
    spec = importlib.util.spec_from_file_location("hessian_recipes_rewards", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, name)
except Exception:
    print(json.dumps({"error": traceback.format_exc()}), flush=True)
    sys.exit(1)
def ignored(*args, **kwargs):
    pass
metrics = {}
def log_metric(name, value):
    # TRL's log_metric: averaged with the step's other values of the name and logged under it.
    value = float(value)
    if not isinstance(name, str) or not math.isfinite(value):
        raise ValueError(f"log_metric({name!r}, {value!r}): give a str name and a finite float")
    metrics.setdefault(name, []).append(value)
def number(r):
    # What TRL's torch.tensor(..., dtype=float32) takes: None, or anything float() reads
    # (bools, numpy and torch scalars); anything else is left for the caller to name.
    if r is None or isinstance(r, str):
        return r
    try:
        return float(r)
    except (TypeError, ValueError):
        return r
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    metrics.clear()
    try:
        result = function(
            prompts=request["prompts"],
            completions=request["completions"],
            completion_ids=request["completion_ids"],
            trainer_state=types.SimpleNamespace(**request["trainer_state"]),
            log_extra=ignored,
            log_metric=log_metric,
            **request["columns"],
        )
        if inspect.isawaitable(result):
            async def wait():
                return await result
            result = asyncio.run(wait())
        rewards = [number(r) for r in result]
        if any(isinstance(r, float) and not math.isfinite(r) for r in rewards):
            print(json.dumps({"nonfinite": repr(rewards)}), flush=True)
        else:
            print(json.dumps({"rewards": rewards, "metrics": metrics}), flush=True)
    except Exception:
        print(json.dumps({"error": traceback.format_exc()}), flush=True)
"#;

/// How long an exited reward's last output may take to reach the log (a process that left the
/// group and kept its stderr open is not waited for longer).
const LOG_FLUSH: Duration = Duration::from_secs(5);

/// How long one call (or the import) may take unless the plan says.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// One running Python reward function.
pub struct PythonReward {
    name: String,
    child: Child,
    /// Its stderr, copied into the log.
    stderr: CappedLog,
    /// Kills its group if this process ends without dropping it.
    _watchdog: GroupWatchdog,
    stdin: ChildStdin,
    lines: Receiver<String>,
    log: PathBuf,
    timeout: Duration,
    /// Why an earlier call left the answers out of step (no answer within the timeout, or a
    /// line that is not one): the process was then stopped, so that an answer still on its way
    /// can never be read as a later batch's.
    broken: Option<String>,
    /// Whether [`PythonReward::stop`] ran.
    stopped: bool,
    /// What its calls passed to `log_metric` since [`PythonReward::take_metrics`]: by name, the
    /// sum and the count of the values.
    metrics: BTreeMap<String, (f64, usize)>,
}

/// Names the call passes itself: a dataset column of one of these names is not passed (TRL
/// passes its own `completion_ids` and `trainer_state` too).
const RESERVED: [&str; 8] = [
    "prompt",
    "prompts",
    "completion",
    "completions",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
];

/// One generation batch as a reward function is called with it, in episode order.
#[derive(Debug, Clone, Copy)]
pub struct RewardBatch<'a> {
    /// Each episode's dataset row: its `prompt` (a string or chat messages) and columns.
    pub rows: &'a [&'a Value],
    /// Each episode's completion text.
    pub completions: &'a [String],
    /// Each episode's completion tokens.
    pub completion_ids: &'a [Vec<u32>],
    /// What the function sees as `trainer_state` (attributes of TRL's `TrainerState`).
    pub trainer_state: &'a Value,
}

impl RewardBatch<'_> {
    /// The driver's request: the prompts, the completions (a chat row's as the assistant's
    /// message, as TRL passes conversational completions), the ids, the state, and each other
    /// column as a list over the batch (`null` where a row lacks it).
    fn request(&self) -> Value {
        let prompts: Vec<Value> = self
            .rows
            .iter()
            .map(|row| row.get("prompt").cloned().unwrap_or(Value::Null))
            .collect();
        let completions: Vec<Value> = prompts
            .iter()
            .zip(self.completions)
            .map(|(prompt, text)| {
                if prompt.is_array() {
                    json!([{"role": "assistant", "content": text}])
                } else {
                    json!(text)
                }
            })
            .collect();
        let names: std::collections::BTreeSet<&String> = self
            .rows
            .iter()
            .filter_map(|row| row.as_object())
            .flat_map(serde_json::Map::keys)
            .filter(|k| !RESERVED.contains(&k.as_str()))
            .collect();
        let columns: serde_json::Map<String, Value> = names
            .into_iter()
            .map(|name| {
                let values = self
                    .rows
                    .iter()
                    .map(|row| row.get(name).cloned().unwrap_or(Value::Null))
                    .collect();
                (name.clone(), Value::Array(values))
            })
            .collect();
        json!({
            "prompts": prompts,
            "completions": completions,
            "completion_ids": self.completion_ids,
            "trainer_state": self.trainer_state,
            "columns": columns,
        })
    }
}

impl std::fmt::Debug for PythonReward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonReward")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PythonReward {
    /// Starts `function` of `file` under `python` (its stderr appended to `log`) and waits until
    /// it is imported; each answer may take up to `timeout`.
    pub fn start(
        name: &str,
        python: &Path,
        (file, function): (&Path, &str),
        log: &Path,
        timeout: Duration,
    ) -> Result<Self, EnvError> {
        let service = format!("reward {name}");
        let mut child = Command::new(python)
            .arg("-c")
            .arg(DRIVER)
            .arg(file)
            .arg(function)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|source| EnvError::Spawn {
                service: service.clone(),
                program: python.to_owned(),
                source,
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err(EnvError::Malformed {
                service,
                message: "its pipes could not be opened".to_owned(),
            });
        };
        let watchdog = match GroupWatchdog::spawn(child.id()) {
            Ok(w) => w,
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(EnvError::Spawn {
                    service,
                    program: PathBuf::from("sh"),
                    source,
                });
            }
        };
        // Its stderr goes to the run's log, which stops growing at its bound.
        let stderr =
            CappedLog::spawn(stderr, log, hr_files::MAX_SERVICE_LOG_BYTES).map_err(|source| {
                EnvError::Spawn {
                    service: service.clone(),
                    program: log.to_owned(),
                    source,
                }
            })?;
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut reward = Self {
            name: name.to_owned(),
            child,
            stderr,
            _watchdog: watchdog,
            stdin,
            lines,
            log: log.to_owned(),
            timeout,
            broken: None,
            stopped: false,
            metrics: BTreeMap::new(),
        };
        let first = reward.answer()?;
        if first.get("ready") != Some(&Value::Bool(true)) {
            return Err(reward.failed(format!("did not start: {first}")));
        }
        Ok(reward)
    }

    /// The function's reward for each completion of a generation batch (`None`: not
    /// applicable), from one call.
    pub fn score_batch(&mut self, batch: &RewardBatch<'_>) -> Result<Vec<Option<f64>>, EnvError> {
        if let Some(why) = &self.broken {
            return Err(self.failed(format!("was stopped after an earlier batch: {why}")));
        }
        let n = batch.rows.len();
        let request = batch.request();
        writeln!(self.stdin, "{request}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| self.failed(format!("could not be sent a request: {e}")))?;
        let answer = self.answer()?;
        let Some(rewards) = answer.get("rewards").and_then(Value::as_array) else {
            return Err(self.failed(format!("answered {answer}")));
        };
        if let Some(Value::Object(logged)) = answer.get("metrics") {
            for (name, values) in logged {
                let entry = self.metrics.entry(name.clone()).or_default();
                for value in values.as_array().into_iter().flatten() {
                    entry.0 += value.as_f64().unwrap_or(f64::NAN);
                    entry.1 += 1;
                }
            }
        }
        if rewards.len() != n {
            return Err(self.failed(format!(
                "returned {} rewards for {n} completions: return one float (or None) per \
                 completion, in order",
                rewards.len()
            )));
        }
        rewards
            .iter()
            .enumerate()
            .map(|(i, r)| match r {
                Value::Null => Ok(None),
                Value::Number(x) => x.as_f64().map(Some).ok_or_else(|| {
                    self.failed(format!("returned {x} for completion {i}, not a float"))
                }),
                other => Err(self.failed(format!(
                    "returned {other} for completion {i}: each reward must be a float or None"
                ))),
            })
            .collect()
    }

    /// What the calls since the last take passed to TRL's `log_metric`: by name, the sum and
    /// the count of the values.
    pub fn take_metrics(&mut self) -> BTreeMap<String, (f64, usize)> {
        std::mem::take(&mut self.metrics)
    }

    /// The next answer line, or why there is none.
    fn answer(&mut self) -> Result<Value, EnvError> {
        let line = match self.lines.recv_timeout(self.timeout) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                let why = format!(
                    "it gave no answer within {} s (raise this reward's `timeout_s` in the \
                     plan's `environment.rewards`, or make it faster)",
                    self.timeout.as_secs()
                );
                return Err(self.out_of_step(why));
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self
                    .child
                    .wait()
                    .map_or_else(|e| e.to_string(), |s| s.to_string());
                // What it wrote last is in the log before its tail is quoted.
                self.stderr.finish(LOG_FLUSH);
                return Err(self.failed(format!("exited ({status})")));
            }
        };
        let value: Value = match serde_json::from_str(&line) {
            Ok(value) => value,
            Err(_) => {
                let why = format!("it printed {line:?} on stdout (use stderr for logs)");
                return Err(self.out_of_step(why));
            }
        };
        if let Some(rewards) = value.get("nonfinite").and_then(Value::as_str) {
            return Err(self.failed(format!(
                "returned {rewards}: each reward must be a finite float"
            )));
        }
        match value.get("error").and_then(Value::as_str) {
            Some(trace) => Err(self.failed(format!("raised:\n{}", trace.trim_end()))),
            None => Ok(value),
        }
    }

    /// Stops the function whose answers are out of step with its requests, so nothing it still
    /// sends is read as a later answer; the error says why.
    fn out_of_step(&mut self, why: String) -> EnvError {
        self.stop();
        let error = self.failed(why.clone());
        self.broken = Some(why);
        error
    }

    fn failed(&self, message: String) -> EnvError {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        EnvError::Service {
            service: format!("reward {}", self.name),
            code: "PYTHON_REWARD".to_owned(),
            message: if tail.is_empty() {
                message
            } else {
                format!("{message}\nlog tail:\n{}", tail.join("\n"))
            },
        }
    }
}

impl PythonReward {
    /// Kills the driver's process group and reaps the driver, once.
    fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        // The group is the driver's pid; it still exists until the driver is reaped below.
        if let Some(group) = i32::try_from(self.child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr.finish(LOG_FLUSH);
    }
}

impl Drop for PythonReward {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `pid` runs (a zombie waiting to be reaped does not).
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| !s[i + 2..].starts_with('Z')))
            .unwrap_or(false)
    }

    /// Functions written against TRL 1.16's contract.
    const TRL_REWARDS: &str = r#"
import asyncio
def batch(prompts, completions, completion_ids, trainer_state, answer, **kwargs):
    assert len(prompts) == len(completions) == len(completion_ids) == len(answer) == 3
    assert trainer_state.global_step == 7 and trainer_state.max_steps == 10
    kwargs["log_metric"]("seen", len(completions))
    return [None if a is None else float(len(ids)) + (c == a) for c, ids, a in zip(completions, completion_ids, answer)]
async def later(prompts, completions, **kwargs):
    await asyncio.sleep(0)
    return [0.5 for _ in completions]
def short(prompts, completions, **kwargs):
    return [1.0]
def words(prompts, completions, **kwargs):
    return ["one" for _ in completions]
"#;

    fn start(dir: &Path, function: &str) -> PythonReward {
        let file = dir.join("rewards.py");
        std::fs::write(&file, TRL_REWARDS).expect("write");
        PythonReward::start(
            function,
            Path::new("python3"),
            (&file, function),
            &dir.join("log"),
            DEFAULT_TIMEOUT,
        )
        .expect("starts")
    }

    #[test]
    fn one_call_scores_a_batch_as_trl_calls_its_reward_functions() {
        let dir = tempfile::tempdir().expect("tmp");
        let rows = [
            json!({"prompt": "2 + 2 =", "answer": "4"}),
            json!({"prompt": "3 + 3 =", "answer": null}),
            json!({"prompt": "1 + 1 =", "answer": "2", "completion_ids": "not passed"}),
        ];
        let rows: Vec<&Value> = rows.iter().collect();
        let completions = ["4".to_owned(), "6".to_owned(), "3".to_owned()];
        let ids = [vec![1, 2], vec![3], vec![4, 5, 6]];
        let batch = RewardBatch {
            rows: &rows,
            completions: &completions,
            completion_ids: &ids,
            trainer_state: &json!({"global_step": 7, "max_steps": 10}),
        };
        let mut reward = start(dir.path(), "batch");
        let scores = reward.score_batch(&batch).expect("scores");
        assert_eq!(scores, [Some(3.0), None, Some(3.0)]);
        // What it passed to log_metric is kept until taken (the trainer logs each name's mean).
        reward.score_batch(&batch).expect("scores");
        assert_eq!(
            reward.take_metrics(),
            BTreeMap::from([("seen".to_owned(), (6.0, 2))])
        );
        assert!(reward.take_metrics().is_empty());
        let scores = start(dir.path(), "later")
            .score_batch(&batch)
            .expect("awaited");
        assert_eq!(scores, [Some(0.5); 3]);
        for (function, expected) in [
            ("short", "returned 1 rewards for 3 completions"),
            (
                "words",
                "returned \"one\" for completion 0: each reward must be a float or None",
            ),
        ] {
            let err = start(dir.path(), function)
                .score_batch(&batch)
                .expect_err(function)
                .to_string();
            assert!(err.contains(expected), "{function}: {err}");
        }
    }

    #[test]
    fn a_batch_that_timed_out_stops_the_function_so_its_late_answer_is_never_read() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("rewards.py");
        // The first call outlasts the timeout by far; a second would answer at once.
        std::fs::write(
            &file,
            "import time\ncalls = 0\n\
             def r(prompts, completions, **kw):\n    global calls\n    calls += 1\n\
             \x20   if calls == 1:\n        time.sleep(600)\n    return [float(calls) for _ in completions]\n",
        )
        .expect("write");
        let mut reward = PythonReward::start(
            "r",
            Path::new("python3"),
            (&file, "r"),
            &dir.path().join("log"),
            // Also the import's bound: generous for a loaded machine, and far below the sleep.
            Duration::from_secs(5),
        )
        .expect("starts");
        let rows = [json!({"prompt": "p"})];
        let rows: Vec<&Value> = rows.iter().collect();
        let batch = RewardBatch {
            rows: &rows,
            completions: &["c".to_owned()],
            completion_ids: &[vec![1]],
            trainer_state: &json!({"global_step": 0}),
        };
        let err = reward
            .score_batch(&batch)
            .expect_err("times out")
            .to_string();
        assert!(
            err.contains("gave no answer within 5 s") && err.contains("`timeout_s`"),
            "{err}"
        );
        let pid = reward.child.id();
        assert!(!running(pid), "the timed-out function is stopped");
        let err = reward.score_batch(&batch).expect_err("refused").to_string();
        assert!(
            err.contains("was stopped after an earlier batch: it gave no answer"),
            "{err}"
        );
    }

    #[test]
    fn what_a_reward_function_starts_ends_with_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("rewards.py");
        let pid_file = dir.path().join("helper.pid");
        std::fs::write(
            &file,
            format!(
                "import subprocess\n\
                 helper = subprocess.Popen(['sleep', '300'])\n\
                 open({:?}, 'w').write(str(helper.pid))\n\
                 def r(prompts, completions, **kw):\n    return [1.0 for _ in completions]\n",
                pid_file.display().to_string()
            ),
        )
        .expect("write");
        let reward = PythonReward::start(
            "r",
            Path::new("python3"),
            (&file, "r"),
            &dir.path().join("log"),
            DEFAULT_TIMEOUT,
        )
        .expect("starts");
        let helper: u32 = std::fs::read_to_string(&pid_file)
            .expect("pid")
            .trim()
            .parse()
            .expect("a pid");
        assert!(running(helper));
        drop(reward);
        // SIGKILL is delivered asynchronously: wait for the event, bounded.
        let gone = (0..3000).any(|_| {
            let dead = !running(helper);
            if !dead {
                std::thread::sleep(Duration::from_millis(20));
            }
            dead
        });
        assert!(gone, "the helper {helper} outlived its reward function");
    }
}
