//! Chat templates: the model's own Jinja template from its `tokenizer_config.json` (`chat_template`,
//! rendered with minijinja and Python's string methods, as `transformers`' `apply_chat_template`
//! renders it), or ChatML when the model ships none (the tiny test models, Qwen2-style models).

use std::path::Path;

use minijinja::{Environment, ErrorKind, context};
use serde_json::Value;

use crate::PolicyError;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.to_owned(),
            content: content.to_owned(),
        }
    }
}

/// ChatML's turn markers.
pub const IM_START: &str = "<|im_start|>";
/// ChatML's end-of-turn marker, which also ends a completion.
pub const IM_END: &str = "<|im_end|>";

/// ChatML as a template (what a model without `chat_template` gets).
const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
                      {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Stands for the assistant's text while the continuation after it is rendered.
const PLACEHOLDER: &str = "\u{1}hr-assistant-turn\u{1}";

/// A model's chat template, compiled once.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    origin: String,
}

/// The compiled template's name in its environment.
const TEMPLATE: &str = "chat_template";

/// Instructions one render may run (minijinja's fuel): a real template spends a few dozen per
/// message, so this allows conversations of many thousand turns and stops a loop without end.
const FUEL: u64 = 10_000_000;

/// Most bytes one render may write: far above any context a model reads.
const MAX_RENDERED: usize = 64 << 20;

/// The rendered text, refused once it would pass [`MAX_RENDERED`] bytes.
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.0.len().saturating_add(bytes.len()) > MAX_RENDERED {
            return Err(std::io::Error::other("output limit"));
        }
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn template_error(origin: &str, e: &minijinja::Error) -> PolicyError {
    PolicyError::Tokenizer {
        path: origin.into(),
        message: format!("chat template: {e}"),
    }
}

/// A special token in `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// ChatML.
    pub fn chatml() -> Result<Self, PolicyError> {
        Self::compile(
            CHATML.to_owned(),
            String::new(),
            IM_END.to_owned(),
            "ChatML (built in)".to_owned(),
        )
    }

    /// Compiles `source` in an environment with Python's string methods and
    /// `raise_exception`, as `transformers` renders chat templates.
    fn compile(
        source: String,
        bos_token: String,
        eos_token: String,
        origin: String,
    ) -> Result<Self, PolicyError> {
        let mut env = Environment::new();
        env.set_fuel(Some(FUEL));
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_template_owned(TEMPLATE, source)
            .map_err(|e| template_error(&origin, &e))?;
        Ok(Self {
            env,
            bos_token,
            eos_token,
            origin,
        })
    }

    /// The template of the model folder `dir`: `tokenizer_config.json`'s `chat_template` (a
    /// string, or a list of `{name, template}` of which `default` is used), else ChatML.
    pub fn from_model_dir(dir: &Path) -> Result<Self, PolicyError> {
        let path = dir.join("tokenizer_config.json");
        let text = match hr_files::read_to_string_bounded(&path, hr_files::MAX_CONFIG_BYTES) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Self::chatml(),
            Err(e) => return Err(PolicyError::io(&path, e)),
        };
        let bad = |message: String| PolicyError::Config {
            path: path.clone(),
            field: "chat_template".to_owned(),
            message,
        };
        let config: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let source = match config.get("chat_template") {
            None | Some(Value::Null) => return Self::chatml(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(named)) => named
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template").and_then(Value::as_str))
                .ok_or_else(|| bad("a list of templates needs one named `default`".to_owned()))?
                .to_owned(),
            Some(_) => return Err(bad("must be a string or a list of templates".to_owned())),
        };
        let template = Self::compile(
            source,
            token_text(config.get("bos_token")),
            token_text(config.get("eos_token")),
            path.display().to_string(),
        )?;
        // A template that cannot render a plain exchange is refused now, not mid-training.
        template.render(&[Message::new("user", "hello")], true)?;
        Ok(template)
    }

    /// The end-of-sequence text the template knows (`<|im_end|>` for ChatML).
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// `messages` rendered; with `add_generation_prompt` the assistant's turn is left open.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, PolicyError> {
        let err = |e: minijinja::Error| match e.kind() {
            ErrorKind::OutOfFuel => PolicyError::Tokenizer {
                path: self.origin.clone().into(),
                message: format!(
                    "chat template: ran more than {FUEL} instructions for {} messages (a loop \
                     without end?)",
                    messages.len()
                ),
            },
            ErrorKind::WriteFailure => PolicyError::Tokenizer {
                path: self.origin.clone().into(),
                message: format!(
                    "chat template: renders more than {} MiB for {} messages",
                    MAX_RENDERED >> 20,
                    messages.len()
                ),
            },
            _ => template_error(&self.origin, &e),
        };
        let mut out = Bounded(Vec::new());
        self.env
            .get_template(TEMPLATE)
            .map_err(err)?
            .render_captured_to(
                context! {
                    messages => messages,
                    add_generation_prompt => add_generation_prompt,
                    bos_token => self.bos_token,
                    eos_token => self.eos_token,
                },
                &mut out,
            )
            .map_err(err)?;
        String::from_utf8(out.0).map_err(|e| PolicyError::Tokenizer {
            path: self.origin.clone().into(),
            message: format!("chat template: rendered text is not UTF-8: {e}"),
        })
    }

    /// What follows the assistant's turn in a conversation that began with `messages`: the turn's
    /// close, `reply` (an environment's message) and the next assistant turn left open.
    pub fn continuation(
        &self,
        messages: &[Message],
        reply: &Message,
    ) -> Result<String, PolicyError> {
        let mut turns = messages.to_vec();
        turns.push(Message::new("assistant", PLACEHOLDER));
        turns.push(reply.clone());
        let text = self.render(&turns, true)?;
        text.split_once(PLACEHOLDER)
            .map(|(_, after)| after.to_owned())
            .ok_or_else(|| PolicyError::Tokenizer {
                path: self.origin.clone().into(),
                message: "chat template: the assistant's message does not appear in the \
                          rendered conversation"
                    .to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders_as_written_by_hand() -> Result<(), PolicyError> {
        let t = ChatTemplate::chatml()?;
        let messages = [Message::new("system", "S"), Message::new("user", "U")];
        assert_eq!(
            t.render(&messages, true)?,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            t.continuation(&messages, &Message::new("user", "R"))?,
            "<|im_end|>\n<|im_start|>user\nR<|im_end|>\n<|im_start|>assistant\n"
        );
        Ok(())
    }

    #[test]
    fn a_llama3_template_with_python_methods_renders() -> Result<(), PolicyError> {
        let dir = tempfile::tempdir().map_err(|e| PolicyError::io("tmp", e))?;
        // Llama 3's template, as its tokenizer_config.json ships it.
        let template = "{{ bos_token }}{% for message in messages %}{% set content = \
            '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + \
            message['content'] | trim + '<|eot_id|>' %}{{ content }}{% endfor %}\
            {% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
        let config = serde_json::json!({"chat_template": template,
            "bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"}});
        std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string())
            .map_err(|e| PolicyError::io("write", e))?;
        let t = ChatTemplate::from_model_dir(dir.path())?;
        assert_eq!(t.eos_token(), "<|eot_id|>");
        let messages = [Message::new("user", " What is 2 + 3? ")];
        assert_eq!(
            t.render(&messages, true)?,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 3?<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert_eq!(
            t.continuation(&messages, &Message::new("user", "5"))?,
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n5<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        // Python's string methods, as HF templates call them.
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            serde_json::json!({"chat_template":
                "{% for m in messages %}{{ m.content.strip().upper() }}{% endfor %}\
                 {% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}"})
            .to_string(),
        )
        .map_err(|e| PolicyError::io("write", e))?;
        let t = ChatTemplate::from_model_dir(dir.path())?;
        assert_eq!(t.render(&[Message::new("user", " hi ")], false)?, "HI");
        let err = t
            .render(&[Message::new("system", "s")], false)
            .expect_err("raise_exception fails the render");
        assert!(err.to_string().contains("user first"), "{err}");
        Ok(())
    }

    #[test]
    fn a_template_that_loops_or_writes_without_end_is_stopped_by_its_bounds() {
        let dir = tempfile::tempdir().expect("tmp");
        for (template, says) in [
            // 10^10 iterations writing nothing: only the fuel stops it.
            (
                "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                "instructions",
            ),
            // 100 MB per iteration: the output limit stops it on the first.
            (
                "{% for i in range(100000) %}{{ 'x' * 100000000 }}{% endfor %}",
                "MiB",
            ),
        ] {
            std::fs::write(
                dir.path().join("tokenizer_config.json"),
                serde_json::json!({ "chat_template": template }).to_string(),
            )
            .expect("write");
            let err = ChatTemplate::from_model_dir(dir.path()).expect_err(template);
            assert!(err.to_string().contains(says), "{template}: {err}");
        }
    }

    #[test]
    fn a_model_without_a_template_gets_chatml_and_a_broken_one_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let t = ChatTemplate::from_model_dir(dir.path()).expect("no config: ChatML");
        assert_eq!(t.eos_token(), IM_END);
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"chat_template": "{% for m in messages %}{{ m.content "}"#,
        )
        .expect("write");
        let err = ChatTemplate::from_model_dir(dir.path()).expect_err("syntax error");
        assert!(err.to_string().contains("chat template"), "{err}");
    }
}
