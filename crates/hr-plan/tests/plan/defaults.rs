//! What a plan leaves out: the example parses with TRL's defaults, and a default (the prompt
//! format, the base dtype) is left out of the written plan.

use std::path::Path;

use hr_plan::Plan;
use serde_json::json;

use crate::{example, field_error};

#[test]
fn the_example_parses_with_trl_defaults_for_what_it_omits() -> anyhow::Result<()> {
    let plan = Plan::parse(Path::new("plan.json"), &example().to_string())?;
    assert_eq!(plan.grpo.num_generations, 4);
    assert_eq!(
        (
            plan.grpo.epsilon_low,
            plan.grpo.beta,
            plan.grpo.num_iterations
        ),
        (0.2, 0.0, 1)
    );
    assert_eq!(plan.optimizer.max_grad_norm, Some(1.0));
    assert_eq!(plan.checkpoints.every, 1);
    assert_eq!(plan.grpo.prompt_format, hr_plan::PromptFormat::Chat);
    // The default format is left out when the plan is written back, so a plan's digest does
    // not change with the field's introduction; `plain` is written.
    assert!(!serde_json::to_string(&plan)?.contains("prompt_format"));
    let mut plain = example();
    plain["grpo"]["prompt_format"] = json!("plain");
    let plan = Plan::parse(Path::new("plan.json"), &plain.to_string())?;
    assert!(serde_json::to_string(&plan)?.contains(r#""prompt_format":"plain""#));
    Ok(())
}

#[test]
fn the_base_dtype_defaults_to_f32_and_is_written_only_when_it_is_not() -> anyhow::Result<()> {
    let plan = Plan::parse(Path::new("plan.json"), &example().to_string())?;
    assert_eq!(plan.model.dtype, hr_plan::Dtype::F32);
    assert!(!serde_json::to_string(&plan)?.contains("dtype"));
    for (word, dtype) in [("f16", hr_plan::Dtype::F16), ("bf16", hr_plan::Dtype::Bf16)] {
        let mut half = example();
        half["model"]["dtype"] = json!(word);
        let plan = Plan::parse(Path::new("plan.json"), &half.to_string())?;
        assert_eq!(plan.model.dtype, dtype);
        assert_eq!(word.parse::<hr_plan::Dtype>(), Ok(dtype));
        assert!(serde_json::to_string(&plan)?.contains(&format!(r#""dtype":"{word}""#)));
    }
    let mut wrong = example();
    wrong["model"]["dtype"] = json!("float16");
    let (field, message) = field_error(&wrong);
    assert_eq!(field, "model.dtype");
    assert!(message.contains("`bf16`"), "{message}");
    assert_eq!(
        "fp8".parse::<hr_plan::Dtype>(),
        Err("unknown dtype `fp8`; use f32, f16 or bf16".to_owned())
    );
    Ok(())
}
