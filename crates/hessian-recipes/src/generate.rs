//! `hessian-recipes generate`: load an HF model folder, or a model of the local Hugging Face cache
//! by its Hub id (and optionally PEFT adapters), format the prompts with the model's chat
//! template and sample completions on the chosen backend.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use burn::tensor::backend::Backend;
use hr_policy::{
    ChatTokenizer, Message, Policy, PolicyError, PolicyRng, SamplingConfig, load_adapters,
};

use crate::Refused;
use crate::backend::{OnBackend, dispatch};
use crate::cli::GenerateArgs;
use crate::model_folder;

pub(crate) fn run(mut args: GenerateArgs) -> anyhow::Result<ExitCode> {
    args.model = model_folder::resolve(&args.model, "--model")?;
    model_folder::check(&args.model, "--model")?;
    dispatch(args.device, Job(args))
}

struct Job(GenerateArgs);

impl OnBackend for Job {
    type Output = ExitCode;

    fn run<B: Backend>(self, device: B::Device, name: &str) -> anyhow::Result<ExitCode> {
        let args = self.0;
        let mut sampling = SamplingConfig {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            repetition_penalty: args.repetition_penalty,
            max_new_tokens: args.max_new_tokens,
            stop_tokens: Vec::new(),
        };
        sampling.validate().map_err(|e| Refused(e.to_string()))?;
        let tokenizer = ChatTokenizer::from_file(&args.model.join("tokenizer.json"))?;
        let loading = Instant::now();
        let policy = Policy::<B>::load_as(&args.model, hr_train::float_dtype(args.dtype), &device)
            .map_err(|e| match e {
                PolicyError::Dtype { .. } => Refused(format!("--dtype {}: {e}", args.dtype)).into(),
                e => anyhow::Error::from(e),
            })
            .with_context(|| format!("loading the model in {}", args.model.display()))?
            .with_execution(crate::backend::execution(args.device));
        let adapters = args
            .adapter
            .as_ref()
            .map(|dir| load_adapters::<B>(policy.config(), dir, &device))
            .transpose()?;
        let loaded = loading.elapsed();
        let prompts = args
            .prompt
            .iter()
            .map(|p| {
                if args.raw {
                    tokenizer.encode(p)
                } else {
                    let mut messages = Vec::new();
                    if let Some(system) = &args.system {
                        messages.push(Message::new("system", system));
                    }
                    messages.push(Message::new("user", p));
                    tokenizer.encode_chat(&messages)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !args.ignore_eos {
            sampling.stop_tokens = policy.config().eos_token_ids.clone();
            sampling.stop_tokens.extend(tokenizer.stop_token_ids());
        }
        let mut rng = PolicyRng::from_seed(args.seed);
        let started = Instant::now();
        let reads_before = hr_policy::host_reads();
        let launches_before = crate::logging::kernel_launches();
        let out = policy.generate(adapters.as_ref(), &prompts, &sampling, &mut rng, true)?;
        let elapsed = started.elapsed().as_secs_f64();
        let reads = hr_policy::host_reads();
        let (reads, values) = (reads.0 - reads_before.0, reads.1 - reads_before.1);
        let launches = crate::logging::kernel_launches() - launches_before;
        let generated: usize = out.tokens.iter().map(Vec::len).sum();
        for (i, prompt) in args.prompt.iter().enumerate() {
            let text = tokenizer.decode(&out.tokens[i])?;
            if args.json {
                let line = serde_json::json!({
                    "prompt": prompt,
                    "prompt_tokens": prompts[i],
                    "completion": text,
                    "tokens": out.tokens[i],
                    "logprobs": out.logprobs[i],
                    "stopped": out.stopped[i],
                });
                println!("{line}");
            } else {
                println!("{text}");
            }
        }
        eprintln!(
            "{name}: loaded in {:.1} s; {generated} tokens in {elapsed:.2} s ({:.1} tokens/s); \
             {reads} host reads of {values} values, {launches} kernel launches",
            loaded.as_secs_f64(),
            generated as f64 / elapsed.max(1e-9)
        );
        Ok(ExitCode::SUCCESS)
    }
}
