//! `hessian-recipes train`: a plan run natively. Each step's metrics go to `metrics.jsonl` (TRL
//! names) and its evidence (task ids, digests of tokens, rewards, advantages and the native
//! state) to `evidence.jsonl`; sealed snapshots land in `checkpoints/` on the plan's schedule,
//! after `--stop-after-step` and on SIGTERM/SIGINT (finish the step, snapshot, exit 0). A run
//! resumed with `--resume SNAPSHOT` verifies the seal and the plan digest first, restores
//! everything before any randomness is used, and writes into its own fresh output folder.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use hr_bridge::{
    Environment, FixtureEnvironment, FixtureKind, NemoGymClient, NemoGymEnvironment, OpenEnvClient,
    OpenEnvEnvironment, OwnedService, Task, fixture_tasks, presets,
};
use hr_grpo::{
    AdamWSettings, AdvantageConfig, DataCursor, EnvironmentFactory, GrpoConfig, GrpoError,
    LossConfig, LrSchedule, NativeState, RolloutConfig, StepReport, TaskSampler, Trainer,
};
use hr_plan::{Environment as PlanEnvironment, Plan};
use hr_policy::{Adapters, ChatTokenizer, LoraConfig, Policy, PolicyRng, Target};
use hr_seal::{Expectations, RunIdentity, Store, Trust, sha256_hex, verify};
use serde_json::json;

use crate::Refused;
use crate::backend::{OnBackend, dispatch};
use crate::cli::{ResumeControl, TrainArgs};
use crate::output::create_fresh;
use crate::report::write_report;

pub(crate) fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    let plan = Plan::from_file(&args.plan).map_err(|e| Refused(e.to_string()))?;
    if args.stop_after_step == Some(0) {
        return Err(Refused("--stop-after-step must be at least 1".to_owned()).into());
    }
    create_fresh(&args.output)?;
    dispatch(args.device, Job { plan, args })
}

struct Job {
    plan: Plan,
    args: TrainArgs,
}

/// The plan's canonical JSON digest: what a snapshot is bound to.
fn plan_sha256(plan: &Plan) -> anyhow::Result<String> {
    let mut canonical = plan.clone();
    // The model folder may be given relative to different places; its contents are what matter
    // and are checked by loading.
    canonical.model.path = Default::default();
    Ok(sha256_hex(&serde_json::to_vec(&canonical)?))
}

fn grpo_config(plan: &Plan) -> GrpoConfig {
    let g = &plan.grpo;
    let o = &plan.optimizer;
    GrpoConfig {
        rollout: RolloutConfig {
            num_generations: g.num_generations,
            temperature: g.temperature,
            top_p: g.top_p,
            max_completion_length: g.max_completion_length,
            max_turn_tokens: g.max_turn_tokens,
            max_turns: g.max_turns,
            system_prompt: g.system_prompt.clone(),
            max_concurrent_episodes: match &plan.environment {
                PlanEnvironment::Openenv { max_sessions, .. } => *max_sessions,
                _ => 0,
            },
        },
        advantage: AdvantageConfig {
            scale_rewards: match g.scale_rewards {
                hr_plan::ScaleRewards::Group => hr_grpo::ScaleRewards::Group,
                hr_plan::ScaleRewards::Batch => hr_grpo::ScaleRewards::Batch,
                hr_plan::ScaleRewards::None => hr_grpo::ScaleRewards::None,
            },
            leave_one_out: g.leave_one_out,
            epsilon: g.advantage_epsilon,
        },
        loss: LossConfig {
            epsilon_low: g.epsilon_low,
            epsilon_high: g.epsilon_high,
            beta: g.beta,
            loss_type: match g.loss_type {
                hr_plan::LossType::Grpo => hr_grpo::LossType::Grpo,
                hr_plan::LossType::Bnpo => hr_grpo::LossType::Bnpo,
                hr_plan::LossType::DrGrpo => hr_grpo::LossType::DrGrpo,
                hr_plan::LossType::Dapo => hr_grpo::LossType::Dapo,
            },
            max_completion_length: g.max_completion_length,
        },
        num_iterations: g.num_iterations,
        adamw: AdamWSettings {
            beta1: o.beta1,
            beta2: o.beta2,
            epsilon: o.adam_epsilon,
            weight_decay: o.weight_decay,
        },
        schedule: LrSchedule {
            learning_rate: o.learning_rate,
            warmup_steps: o.warmup_steps,
            decay: match o.decay {
                hr_plan::Decay::Constant => hr_grpo::Decay::Constant,
                hr_plan::Decay::Cosine => hr_grpo::Decay::Cosine,
            },
            total_steps: plan.steps,
        },
        max_grad_norm: o.max_grad_norm,
        gradient_accumulation_steps: g.gradient_accumulation_steps,
    }
}

fn fixture_kind(name: &str) -> anyhow::Result<FixtureKind> {
    Ok(match name {
        "arithmetic" => FixtureKind::Arithmetic,
        "tool_call" => FixtureKind::ToolCall,
        "calculator" => FixtureKind::Calculator,
        "digits" => FixtureKind::Digits,
        other => bail!("unknown fixture task kind `{other}`"),
    })
}

type Factory = Box<dyn EnvironmentFactory>;

/// The plan's tasks, the service it needs (started here, logging to OUTPUT/service.log) and a
/// factory of one environment per episode.
fn environment(
    plan: &Plan,
    out: &Path,
) -> anyhow::Result<(Vec<Task>, Option<OwnedService>, Factory)> {
    let numbered = |payloads: &[serde_json::Value]| -> Vec<Task> {
        payloads
            .iter()
            .enumerate()
            .map(|(i, p)| Task {
                id: format!("task-{i}"),
                payload: p.clone(),
            })
            .collect()
    };
    let log = out.join("service.log");
    Ok(match &plan.environment {
        PlanEnvironment::Fixture { tasks } => {
            let list = fixture_tasks(fixture_kind(&tasks.kind)?, tasks.count, tasks.seed);
            let factory = || -> Result<Box<dyn Environment>, GrpoError> {
                Ok(Box::new(FixtureEnvironment::new()))
            };
            (list, None, Box::new(factory))
        }
        PlanEnvironment::Openenv {
            python,
            env_root,
            action_field,
            tasks,
            ..
        } => {
            let service = OwnedService::start(&presets::openenv_echo(python, env_root, &log))?;
            let (url, field) = (service.base_url(), action_field.clone());
            let factory = move || -> Result<Box<dyn Environment>, GrpoError> {
                let client = OpenEnvClient::new("openenv", &url)
                    .map_err(|e| GrpoError::Environment(e.to_string()))?;
                Ok(Box::new(OpenEnvEnvironment::new(client, &field)))
            };
            (numbered(tasks), Some(service), Box::new(factory))
        }
        PlanEnvironment::Nemo {
            python,
            server_dir,
            tasks,
        } => {
            let service =
                OwnedService::start(&presets::nemo_single_tool_call(python, server_dir, &log))?;
            let client = NemoGymClient::new("nemo-gym", &service.base_url())?;
            let factory = move || -> Result<Box<dyn Environment>, GrpoError> {
                Ok(Box::new(NemoGymEnvironment::new(client.clone())))
            };
            (numbered(tasks), Some(service), Box::new(factory))
        }
    })
}

/// SIGTERM or SIGINT sets the flag; the loop stops after the current step.
fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let flag = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mut term, mut int) = rt.block_on(async {
        Ok::<_, std::io::Error>((
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        ))
    })?;
    let set = flag.clone();
    std::thread::spawn(move || {
        rt.block_on(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            set.store(true, Ordering::SeqCst);
        });
    });
    Ok(flag)
}

/// Breaks the restored state on purpose (a negative control of the qualification).
fn apply_control(
    control: ResumeControl,
    state: &mut NativeState,
    cursor: &mut DataCursor,
    plan: &Plan,
) -> anyhow::Result<()> {
    eprintln!("control: {control:?} applied at resume");
    let mut meta: serde_json::Value = serde_json::from_slice(&state.files[hr_grpo::TRAINER_STATE])?;
    match control {
        // The bug class of re-seeding after the restore (ms-swift PR #9935).
        ResumeControl::SkipRng => {
            meta["rng"] = serde_json::to_value(PolicyRng::from_seed(plan.seeds.sampling).state())?
        }
        ResumeControl::DropOptimizer => meta["adam_steps"] = json!({}),
        ResumeControl::CursorOffByOne => cursor.position += 1,
    }
    state.files.insert(
        hr_grpo::TRAINER_STATE.to_owned(),
        serde_json::to_vec(&meta)?,
    );
    Ok(())
}

/// One step's evidence line.
fn evidence(report: &StepReport, state: &NativeState, cursor: DataCursor) -> serde_json::Value {
    let tokens: Vec<&Vec<u32>> = report.episodes.iter().map(|e| &e.completion).collect();
    let digest = |name: &str| {
        state
            .files
            .get(name)
            .map(|b| sha256_hex(b))
            .unwrap_or_default()
    };
    json!({
        "step": report.step + 1,
        "task_ids": report.episodes.iter().map(|e| e.task_id.as_str()).collect::<Vec<_>>(),
        "rewards": report.episodes.iter().map(|e| e.reward).collect::<Vec<_>>(),
        "tokens_sha256": sha256_hex(&serde_json::to_vec(&tokens).unwrap_or_default()),
        "advantages_sha256": sha256_hex(&serde_json::to_vec(&report.advantages).unwrap_or_default()),
        "adapter_sha256": digest(hr_policy::ADAPTER_WEIGHTS),
        "optimizer_sha256": digest(hr_grpo::OPTIMIZER_STATE),
        "trainer_state_sha256": digest(hr_grpo::TRAINER_STATE),
        "data_cursor": cursor,
    })
}

fn append_line(path: &Path, value: &serde_json::Value) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(f, "{value}")?;
    Ok(())
}

impl OnBackend for Job {
    type Output = ExitCode;

    fn run<B: Backend>(self, device: B::Device, name: &str) -> anyhow::Result<ExitCode> {
        let Job { plan, args } = self;
        let out = &args.output;
        let config_sha256 = plan_sha256(&plan)?;
        std::fs::write(out.join("plan.json"), serde_json::to_vec_pretty(&plan)?)?;
        let stop = stop_flag()?;
        let model = &plan.model.path;
        let tokenizer = ChatTokenizer::from_file(&model.join("tokenizer.json"))?;
        let policy = Policy::<Autodiff<B>>::load(model, &device)
            .with_context(|| format!("loading the model in {}", model.display()))?;
        let (task_list, service, mut env) = environment(&plan, out)?;
        let config = grpo_config(&plan);
        let (mut trainer, mut sampler, mut evidence_lines, mut recent) = match &args.resume {
            Some(dir) => {
                let expect = Expectations {
                    trust: Trust::DigestOnly,
                    run_id: Some(plan.name.clone()),
                    config_sha256: Some(config_sha256.clone()),
                    // Bit-exact continuation is only promised by the binary that wrote it.
                    source: (!args.allow_source_change).then(crate::source_binding),
                    step: None,
                };
                let verified = verify(dir, &expect)
                    .map_err(|e| Refused(format!("--resume {}: {e}", dir.display())))?;
                let payload = dir.join("payload");
                let mut state = NativeState::read(&payload.join("native"))?;
                let mut cursor: DataCursor =
                    serde_json::from_slice(&std::fs::read(payload.join("data_cursor.json"))?)?;
                if let Some(control) = args.control {
                    apply_control(control, &mut state, &mut cursor, &plan)?;
                }
                let lines = std::fs::read_to_string(payload.join("evidence.jsonl"))?;
                let recent: VecDeque<serde_json::Value> =
                    serde_json::from_slice(&std::fs::read(payload.join("rollouts.json"))?)?;
                let trainer =
                    Trainer::resume(policy, tokenizer, config, &state, &payload.join("native"))?;
                eprintln!(
                    "{name}: resumed at step {} from {}",
                    verified.manifest.step,
                    dir.display()
                );
                (
                    trainer,
                    TaskSampler::at(task_list, plan.seeds.task_order, cursor)?,
                    lines,
                    recent,
                )
            }
            None => {
                let targets = plan
                    .model
                    .lora
                    .targets
                    .iter()
                    .filter_map(|t| Target::from_name(t))
                    .collect();
                let lora = LoraConfig::new(plan.model.lora.rank, plan.model.lora.alpha, targets)?;
                let adapters = Adapters::init(
                    policy.config(),
                    lora,
                    &mut PolicyRng::from_seed(plan.seeds.adapter_init),
                    &device,
                );
                let trainer = Trainer::new(
                    policy,
                    tokenizer,
                    adapters,
                    PolicyRng::from_seed(plan.seeds.sampling),
                    config,
                )?;
                (
                    trainer,
                    TaskSampler::new(task_list, plan.seeds.task_order)?,
                    String::new(),
                    VecDeque::new(),
                )
            }
        };
        std::fs::write(out.join("evidence.jsonl"), &evidence_lines)?;
        let store = Store::open(&out.join("checkpoints"))?;
        let run = RunIdentity {
            run_id: plan.name.clone(),
            writer: "local".to_owned(),
        };
        let last = args
            .stop_after_step
            .map_or(plan.steps, |k| k.min(plan.steps));
        let mut metrics_rows = Vec::new();
        while trainer.step_index() < last {
            let started = Instant::now();
            let batch = sampler.next_batch(plan.grpo.tasks_per_step);
            let report = trainer.step(&batch, env.as_mut())?;
            let step = report.step + 1;
            let mut metrics = json!({"step": step});
            for (k, v) in &report.metrics {
                metrics[k] = json!(v);
            }
            append_line(&out.join("metrics.jsonl"), &metrics)?;
            metrics_rows.push(metrics);
            let state = trainer.capture()?;
            let line = evidence(&report, &state, sampler.cursor());
            append_line(&out.join("evidence.jsonl"), &line)?;
            evidence_lines.push_str(&format!("{line}\n"));
            let episodes: Vec<_> = report
                .episodes
                .iter()
                .map(|e| {
                    json!({"task_id": e.task_id, "prompt": e.prompt, "completion": e.completion,
                           "policy_mask": e.policy_mask, "reward": e.reward})
                })
                .collect();
            recent.push_back(json!({"step": step, "episodes": episodes}));
            while recent.len() > plan.checkpoints.raw_rollout_steps {
                recent.pop_front();
            }
            let stopping = stop.load(Ordering::SeqCst);
            eprintln!(
                "[{:<20}] {step}/{}: reward {:.3}, loss {:.4}, grad_norm {:.3}, {:.1} s{}",
                "#".repeat((step * 20 / plan.steps) as usize),
                plan.steps,
                report.metrics["reward"],
                report.metrics["loss"],
                report.metrics["grad_norm"],
                started.elapsed().as_secs_f64(),
                if stopping { " (stop requested)" } else { "" },
            );
            if step % plan.checkpoints.every == 0 || step == last || stopping {
                let mut writer = store.writer(
                    run.clone(),
                    step,
                    crate::source_binding(),
                    config_sha256.clone(),
                )?;
                for (file, bytes) in &state.files {
                    writer.add_bytes(&format!("payload/native/{file}"), "native-state", bytes)?;
                }
                writer.add_bytes(
                    "payload/data_cursor.json",
                    "data-cursor",
                    &serde_json::to_vec(&sampler.cursor())?,
                )?;
                writer.add_bytes(
                    "payload/evidence.jsonl",
                    "evidence",
                    evidence_lines.as_bytes(),
                )?;
                writer.add_bytes(
                    "payload/rollouts.json",
                    "rollouts",
                    &serde_json::to_vec(&recent)?,
                )?;
                let (_, head) = store.publish(writer.seal(None)?)?;
                eprintln!(
                    "{name}: snapshot step {step} -> {}",
                    store.snapshot_dir(head.step).display()
                );
            }
            if stopping {
                break;
            }
        }
        if let Some(service) = service {
            service.shutdown()?;
        }
        write_report(out, &plan.name, &metrics_rows)?;
        Ok(ExitCode::SUCCESS)
    }
}
