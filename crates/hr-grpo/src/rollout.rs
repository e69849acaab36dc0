//! Rollouts: for each task, G episodes sampled from the policy through [`Environment`]s. A turn
//! appends the policy's tokens (trained on) and, when the episode goes on, the environment's
//! reply formatted as a ChatML user turn (masked out of the loss).

use std::collections::BTreeMap;

use burn::tensor::backend::Backend;
use hr_env::{BatchScores, Environment, Observation, RewardBatch, Task};
use hr_policy::{Adapters, ChatTokenizer, Message, Policy, PolicyRng, SamplingConfig};

use crate::{GrpoError, PromptFormat};

/// Makes one environment per episode (episodes of a step run side by side), and scores what is
/// scored once per generation batch.
pub trait EnvironmentFactory {
    /// A fresh environment.
    fn create(&mut self) -> Result<Box<dyn Environment>, GrpoError>;

    /// The rewards scored once per generation batch, after all its episodes ended (TRL's reward
    /// functions: a dataset's `python` rewards): each one's name, weight and one score per
    /// episode, `None` where it does not apply. None by default.
    fn score_batch(&mut self, _batch: &RewardBatch<'_>) -> Result<Vec<BatchScores>, GrpoError> {
        Ok(Vec::new())
    }

    /// What those rewards logged since the last call (TRL's `log_metric`): each name's mean.
    /// None by default.
    fn reward_metrics(&mut self) -> Result<BTreeMap<String, f64>, GrpoError> {
        Ok(BTreeMap::new())
    }
}

impl<F: FnMut() -> Result<Box<dyn Environment>, GrpoError>> EnvironmentFactory for F {
    fn create(&mut self) -> Result<Box<dyn Environment>, GrpoError> {
        self()
    }
}

/// One sampled episode.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Episode {
    /// The task's id.
    pub task_id: String,
    /// Tokens of the first prompt (system + user turn, open assistant turn).
    pub prompt: Vec<u32>,
    /// Everything after the prompt: policy tokens and environment replies.
    pub completion: Vec<u32>,
    /// For each completion token, whether the policy produced it (only those are trained on).
    pub policy_mask: Vec<bool>,
    /// Sum of the step rewards.
    pub reward: f64,
    /// Each named reward function's score, summed over the steps, when the environment reports
    /// them (the dataset backend: `{"rewards": {name: score}}` in a step's raw observation), and
    /// each batch reward's where it applies.
    pub reward_parts: BTreeMap<String, f64>,
    /// False when every reward function returned `None` for it: TRL's unscorable completion,
    /// left out of its group's statistics with advantage 0 (its `reward` is 0).
    pub scorable: bool,
    /// What the policy wrote, decoded (its turns' texts, one after the other).
    pub text: String,
    /// Turns taken.
    pub turns: usize,
    /// Whether the environment ended the episode (false: cut by the turn or length limit).
    pub done: bool,
    /// Whether the policy's last turn was cut by a token limit (`max_completion_length` or
    /// `max_turn_tokens`) instead of ending on a stop token: TRL's clipped completion.
    pub truncated: bool,
}

/// How episodes are sampled and rendered: the rollout half of a plan's `grpo` section (whose
/// fields document each one, and which `hr-plan` validates), and a service's session limit.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutConfig {
    /// G: episodes per task.
    pub num_generations: usize,
    /// Sampling temperature.
    pub temperature: f64,
    /// Keep only the K likeliest tokens (0: off).
    pub top_k: usize,
    /// Nucleus mass (1: off).
    pub top_p: f64,
    /// Drop tokens less likely than this times the likeliest (0: off).
    pub min_p: f64,
    /// transformers' repetition penalty (1: off).
    pub repetition_penalty: f64,
    /// Policy tokens per episode, over all its turns.
    pub max_completion_length: usize,
    /// Policy tokens per turn.
    pub max_turn_tokens: usize,
    /// Turns per episode.
    pub max_turns: usize,
    /// A system message before each task (unless the task's conversation brings one).
    pub system_prompt: Option<String>,
    /// How a task's text becomes the prompt.
    pub prompt_format: PromptFormat,
    /// Most episodes open at once (a service's session limit); 0 means all of a step's.
    pub max_concurrent_episodes: usize,
}

impl RolloutConfig {
    /// The rollout settings of a plan's (validated) `grpo` section, with a service's session
    /// limit (0: none).
    pub fn of(grpo: &hr_plan::Grpo, max_concurrent_episodes: usize) -> Self {
        Self {
            num_generations: grpo.num_generations,
            temperature: grpo.temperature,
            top_k: grpo.top_k,
            top_p: grpo.top_p,
            min_p: grpo.min_p,
            repetition_penalty: grpo.repetition_penalty,
            max_completion_length: grpo.max_completion_length,
            max_turn_tokens: grpo.max_turn_tokens,
            max_turns: grpo.max_turns,
            system_prompt: grpo.system_prompt.clone(),
            prompt_format: grpo.prompt_format,
            max_concurrent_episodes,
        }
    }
}

impl Default for RolloutConfig {
    /// A plan's defaults.
    fn default() -> Self {
        Self::of(&hr_plan::Grpo::default(), 0)
    }
}

fn env_err(e: &hr_env::EnvError) -> GrpoError {
    GrpoError::Environment(e.to_string())
}

fn tok_err(e: &hr_policy::PolicyError) -> GrpoError {
    GrpoError::Policy(e.to_string())
}

/// Samples `num_generations` episodes per task, in task order, consuming `rng` only for sampling
/// (episode seeds are drawn from it first, in order), in waves of at most
/// `max_concurrent_episodes`, then scores the batch rewards on all of them at once with
/// `state` as their `trainer_state`. Every environment is closed, also on error.
#[allow(clippy::too_many_arguments)]
pub fn rollouts<B: Backend>(
    policy: &Policy<B>,
    adapters: Option<&Adapters<B>>,
    tokenizer: &ChatTokenizer,
    tasks: &[Task],
    envs: &mut dyn EnvironmentFactory,
    config: &RolloutConfig,
    rng: &mut PolicyRng,
    state: RewardState,
) -> Result<Vec<Episode>, GrpoError> {
    let seeds: Vec<u64> = (0..tasks.len() * config.num_generations)
        .map(|_| rng.next_u64())
        .collect();
    let jobs: Vec<(&Task, u64)> = seeds
        .iter()
        .enumerate()
        .map(|(i, seed)| (&tasks[i / config.num_generations], *seed))
        .collect();
    // Services with few sessions (OpenEnv's echo env allows one) run episodes in waves.
    let wave = if config.max_concurrent_episodes == 0 {
        jobs.len().max(1)
    } else {
        config.max_concurrent_episodes
    };
    let mut episodes = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(wave) {
        let mut live: Vec<Box<dyn Environment>> = Vec::with_capacity(chunk.len());
        let result = run_episodes(
            policy, adapters, tokenizer, chunk, envs, config, rng, &mut live,
        );
        let mut closing = Ok(());
        for env in &mut live {
            if let Err(e) = env.close() {
                closing = Err(env_err(&e));
            }
        }
        episodes.extend(result?);
        closing?;
    }
    let rows: Vec<&serde_json::Value> = jobs.iter().map(|(task, _)| &task.payload).collect();
    let completions: Vec<String> = episodes.iter().map(|e| e.text.clone()).collect();
    let completion_ids: Vec<Vec<u32>> = episodes.iter().map(|e| e.completion.clone()).collect();
    let batch = RewardBatch {
        rows: &rows,
        completions: &completions,
        completion_ids: &completion_ids,
        trainer_state: &serde_json::to_value(state).unwrap_or_default(),
    };
    add_batch_scores(&mut episodes, &envs.score_batch(&batch)?);
    Ok(episodes)
}

/// Where the run stands, as a batch reward sees it (`trainer_state`; the names of the
/// attributes of transformers' `TrainerState` it has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RewardState {
    /// Optimiser steps completed (the checkpoint's step when evaluating).
    pub global_step: u64,
    /// The run's planned steps.
    pub max_steps: u64,
}

/// Adds each batch reward's weighted score to the episodes it applies to (`None`: not
/// applicable, as TRL's NaN-summed rewards); an episode no reward function applies to is
/// unscorable.
fn add_batch_scores(episodes: &mut [Episode], scores: &[BatchScores]) {
    if scores.is_empty() {
        return;
    }
    for (i, episode) in episodes.iter_mut().enumerate() {
        let mut applied = !episode.reward_parts.is_empty();
        for (name, weight, values) in scores {
            if let Some(Some(score)) = values.get(i) {
                episode.reward += weight * score;
                episode.reward_parts.insert(name.clone(), *score);
                applied = true;
            }
        }
        if !applied {
            episode.scorable = false;
            episode.reward = 0.0;
        }
    }
}

/// An episode's opening conversation and its prompt tokens: the conversation the environment
/// opens with (a dataset's chat row), else its text as the user's message, after the plan's
/// system prompt unless the conversation has one; rendered by the chat template, or the text
/// alone for `plain` prompts.
fn opening(
    tokenizer: &ChatTokenizer,
    config: &RolloutConfig,
    observation: &Observation,
) -> Result<(Vec<Message>, Vec<u32>), GrpoError> {
    let text = &observation.text;
    let opening: Vec<Message> = match observation.raw.get("messages") {
        Some(serde_json::Value::Array(list)) => list
            .iter()
            .map(|m| {
                let field = |k: &str| m.get(k).and_then(serde_json::Value::as_str);
                Message::new(
                    field("role").unwrap_or("user"),
                    field("content").unwrap_or(""),
                )
            })
            .collect(),
        _ => vec![Message::new("user", text)],
    };
    let mut messages = Vec::new();
    if let Some(system) = &config.system_prompt
        && opening.first().is_none_or(|m| m.role != "system")
    {
        messages.push(Message::new("system", system));
    }
    messages.extend(opening);
    let prompt = if config.prompt_format.is_chat() {
        tokenizer.encode_chat(&messages)
    } else {
        tokenizer.encode(text)
    };
    Ok((messages, prompt.map_err(|e| tok_err(&e))?))
}

/// An episode never passes the model's context: refused, not truncated (TRL's
/// `max_prompt_length` would cut the prompt's start; here the task is named instead).
fn fits_context(
    task: &str,
    prompt: usize,
    config: &RolloutConfig,
    model: &hr_policy::ModelConfig,
) -> Result<(), GrpoError> {
    let context = model.max_position_embeddings;
    if prompt.saturating_add(config.max_completion_length) > context {
        return Err(GrpoError::Config {
            field: "grpo.max_completion_length",
            message: format!(
                "task {task}: its prompt is {prompt} tokens, and with up to {} completion tokens \
                 an episode passes the model's context of {context} positions \
                 (max_position_embeddings); shorten the prompt or lower \
                 grpo.max_completion_length",
                config.max_completion_length
            ),
        });
    }
    Ok(())
}

/// Checks before any step that every task's episode fits the model's context (what a rollout
/// would refuse when it draws the task): each task opened in one environment from `envs`, as a
/// rollout opens it. For environments whose reset is cheap and local (a dataset's rows).
pub fn check_prompts(
    model: &hr_policy::ModelConfig,
    tokenizer: &ChatTokenizer,
    config: &RolloutConfig,
    tasks: &[Task],
    envs: &mut dyn EnvironmentFactory,
) -> Result<(), GrpoError> {
    let mut env = envs.create()?;
    for task in tasks {
        let observation = env.reset(task, 0).map_err(|e| env_err(&e))?;
        let (_, prompt) = opening(tokenizer, config, &observation)?;
        fits_context(&task.id, prompt.len(), config, model)?;
    }
    env.close().map_err(|e| env_err(&e))
}

#[allow(clippy::too_many_arguments)]
fn run_episodes<B: Backend>(
    policy: &Policy<B>,
    adapters: Option<&Adapters<B>>,
    tokenizer: &ChatTokenizer,
    jobs: &[(&Task, u64)],
    envs: &mut dyn EnvironmentFactory,
    config: &RolloutConfig,
    rng: &mut PolicyRng,
    live: &mut Vec<Box<dyn Environment>>,
) -> Result<Vec<Episode>, GrpoError> {
    let mut episodes = Vec::with_capacity(jobs.len());
    // Each episode's opening messages: its later turns are rendered after them.
    let mut conversations: Vec<Vec<Message>> = Vec::with_capacity(jobs.len());
    for (task, seed) in jobs {
        let mut env = envs.create()?;
        let observation = env.reset(task, *seed).map_err(|e| env_err(&e));
        live.push(env);
        let observation = observation?;
        let (messages, prompt) = opening(tokenizer, config, &observation)?;
        fits_context(&task.id, prompt.len(), config, policy.config())?;
        conversations.push(messages);
        episodes.push(Episode {
            task_id: task.id.clone(),
            prompt,
            completion: Vec::new(),
            policy_mask: Vec::new(),
            reward: 0.0,
            reward_parts: BTreeMap::new(),
            scorable: true,
            text: String::new(),
            turns: 0,
            done: false,
            truncated: false,
        });
    }
    let mut stop_tokens = policy.config().eos_token_ids.clone();
    stop_tokens.extend(tokenizer.stop_token_ids());
    for _turn in 0..config.max_turns {
        let active: Vec<usize> = (0..episodes.len())
            .filter(|&i| {
                !episodes[i].done && episodes[i].completion.len() < config.max_completion_length
            })
            .collect();
        if active.is_empty() {
            break;
        }
        let budget = active
            .iter()
            .map(|&i| config.max_completion_length - episodes[i].completion.len())
            .min()
            .unwrap_or(1)
            .min(config.max_turn_tokens);
        let sampling = SamplingConfig {
            temperature: config.temperature,
            top_k: config.top_k,
            top_p: config.top_p,
            min_p: config.min_p,
            repetition_penalty: config.repetition_penalty,
            max_new_tokens: budget.max(1),
            stop_tokens: stop_tokens.clone(),
        };
        let prompts: Vec<Vec<u32>> = active
            .iter()
            .map(|&i| [episodes[i].prompt.as_slice(), &episodes[i].completion].concat())
            .collect();
        let generated = policy
            .generate(adapters, &prompts, &sampling, rng, true)
            .map_err(|e| tok_err(&e))?;
        for (k, &i) in active.iter().enumerate() {
            let tokens = &generated.tokens[k];
            let text = tokenizer.decode(tokens).map_err(|e| tok_err(&e))?;
            let episode = &mut episodes[i];
            episode.completion.extend(tokens);
            episode
                .policy_mask
                .extend(std::iter::repeat_n(true, tokens.len()));
            episode.turns += 1;
            episode.truncated = !generated.stopped[k];
            episode.text.push_str(&text);
            let outcome = live[i].step(&text).map_err(|e| env_err(&e))?;
            episode.reward += outcome.reward;
            if let Some(parts) = outcome
                .observation
                .raw
                .get("rewards")
                .and_then(serde_json::Value::as_object)
            {
                for (name, score) in parts {
                    *episode.reward_parts.entry(name.clone()).or_default() +=
                        score.as_f64().unwrap_or(0.0);
                }
            }
            episode.done = outcome.done;
            if !outcome.done {
                // The reply as a user turn, then the assistant's next turn opens (as the
                // model's chat template writes them).
                let stopped = generated.stopped[k]
                    .then(|| tokens.last().copied())
                    .flatten();
                let reply_tokens = tokenizer
                    .encode_continuation(
                        &conversations[i],
                        &Message::new("user", &outcome.observation.text),
                        stopped,
                    )
                    .map_err(|e| tok_err(&e))?;
                let room = config
                    .max_completion_length
                    .saturating_sub(episode.completion.len());
                let kept = reply_tokens.len().min(room);
                episode.completion.extend(&reply_tokens[..kept]);
                episode.policy_mask.extend(std::iter::repeat_n(false, kept));
            }
        }
    }
    Ok(episodes)
}
