//! The HF tokenizer (`tokenizer.json`, pure-Rust `tokenizers` build) with the model's chat
//! template (`tokenizer_config.json` beside it, else ChatML).

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use crate::{ChatTemplate, Message, PolicyError};

/// A loaded `tokenizer.json` with the model's chat template.
#[derive(Debug, Clone)]
pub struct ChatTokenizer {
    inner: Tokenizer,
    path: PathBuf,
    template: ChatTemplate,
}

impl ChatTokenizer {
    /// Loads `tokenizer.json` and the chat template of its folder
    /// ([`ChatTemplate::from_model_dir`]).
    pub fn from_file(path: &Path) -> Result<Self, PolicyError> {
        // The largest published tokenizer.json files are tens of MB.
        let bytes = hr_files::read_bounded(path, 1 << 30).map_err(|e| PolicyError::io(path, e))?;
        let inner = Tokenizer::from_bytes(bytes).map_err(|e| PolicyError::Tokenizer {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let template = ChatTemplate::from_model_dir(path.parent().unwrap_or(Path::new(".")))?;
        Ok(Self {
            inner,
            path: path.to_owned(),
            template,
        })
    }

    fn err(&self, e: &tokenizers::Error) -> PolicyError {
        PolicyError::Tokenizer {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// Token ids of `text`; special tokens written in the text (`<|im_start|>`) are recognised,
    /// none are added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, PolicyError> {
        Ok(self
            .inner
            .encode(text, false)
            .map_err(|e| self.err(&e))?
            .get_ids()
            .to_vec())
    }

    /// Text of `ids`, special tokens dropped.
    pub fn decode(&self, ids: &[u32]) -> Result<String, PolicyError> {
        self.inner.decode(ids, true).map_err(|e| self.err(&e))
    }

    /// Text of `ids` with its special tokens (`<|im_start|>`): a rendered prompt as the model
    /// reads it.
    pub fn decode_with_special(&self, ids: &[u32]) -> Result<String, PolicyError> {
        self.inner.decode(ids, false).map_err(|e| self.err(&e))
    }

    /// The id of a token, if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The chat prompt for `messages`, ending with the open assistant turn.
    pub fn chat_prompt(&self, messages: &[Message]) -> Result<String, PolicyError> {
        self.template.render(messages, true)
    }

    /// Token ids of the chat prompt for `messages`.
    pub fn encode_chat(&self, messages: &[Message]) -> Result<Vec<u32>, PolicyError> {
        self.encode(&self.chat_prompt(messages)?)
    }

    /// Token ids that end an assistant turn: the template's end-of-sequence token (ChatML's
    /// `<|im_end|>`), if the vocabulary has it. The model's own EOS ids come from its config.
    pub fn stop_token_ids(&self) -> Vec<u32> {
        self.token_id(self.template.eos_token())
            .into_iter()
            .collect()
    }

    /// Token ids that follow an assistant turn in a conversation that began with `messages`:
    /// the turn's close, `reply` and the next assistant turn left open. When the turn already
    /// ended with a stop token (`stopped`), the close it wrote is not repeated.
    pub fn encode_continuation(
        &self,
        messages: &[Message],
        reply: &Message,
        stopped: Option<u32>,
    ) -> Result<Vec<u32>, PolicyError> {
        let text = self.template.continuation(messages, reply)?;
        let written = stopped.and_then(|id| self.inner.id_to_token(id));
        let text = match written.as_deref().and_then(|t| text.strip_prefix(t)) {
            Some(rest) => rest,
            // Ended by another stop token (an EOS): the template's own close is not repeated.
            None if stopped.is_some() => text
                .strip_prefix(self.template.eos_token())
                .unwrap_or(&text),
            None => &text,
        };
        self.encode(text)
    }
}
