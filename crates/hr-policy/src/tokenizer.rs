//! The HF tokenizer (`tokenizer.json`, pure-Rust `tokenizers` build) and the ChatML chat template
//! Qwen2 and SmolLM2 use.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use crate::PolicyError;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// A loaded `tokenizer.json` with ChatML formatting.
#[derive(Debug, Clone)]
pub struct ChatTokenizer {
    inner: Tokenizer,
    path: PathBuf,
}

/// ChatML's turn markers.
pub const IM_START: &str = "<|im_start|>";
/// ChatML's end-of-turn marker, which also ends a completion.
pub const IM_END: &str = "<|im_end|>";

impl ChatTokenizer {
    /// Loads `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, PolicyError> {
        let inner = Tokenizer::from_file(path).map_err(|e| PolicyError::Tokenizer {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Self {
            inner,
            path: path.to_owned(),
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

    /// The id of a token, if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The ChatML prompt for `messages`, ending with the open assistant turn.
    pub fn chat_prompt(messages: &[Message]) -> String {
        let mut out = String::new();
        for m in messages {
            out.push_str(&format!("{IM_START}{}\n{}{IM_END}\n", m.role, m.content));
        }
        out.push_str(&format!("{IM_START}assistant\n"));
        out
    }

    /// Token ids of the ChatML prompt for `messages`.
    pub fn encode_chat(&self, messages: &[Message]) -> Result<Vec<u32>, PolicyError> {
        self.encode(&Self::chat_prompt(messages))
    }
}
