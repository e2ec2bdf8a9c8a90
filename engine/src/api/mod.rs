//! The API surfaces agents use, as pieces the server composes: structured output
//! ([`constrain`], llguidance token masks), tool calling ([`tools`]: template rendering,
//! forcing grammars, per-family streaming parsers), log-probabilities ([`logprobs`]), and
//! the Anthropic Messages ([`anthropic`]) and OpenAI Responses ([`responses`]) request and
//! response shapes translated onto the chat-completions core.

pub mod anthropic;
pub mod constrain;
pub mod logprobs;
pub mod responses;
pub mod tools;

use tools::Parsed;

/// Why a generation ended, as the surfaces report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// End of generation token (or the grammar completed).
    EndTurn,
    /// `max_tokens` (or the context) reached.
    Length,
    /// A stop string matched (which one, when known).
    StopSequence(Option<String>),
}

/// A finished generation in surface-neutral terms: what was generated (content and tool
/// calls, already parsed), why it stopped, and the token accounting.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub id: String,
    pub model: String,
    pub created: u64,
    pub parts: Vec<Parsed>,
    pub stop: Stop,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

impl Outcome {
    /// Did the model call a tool?
    pub fn has_calls(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Parsed::Call { .. }))
    }
}

/// `(param, message)` of a refused field, shared by the translators.
pub type FieldError = (String, String);
