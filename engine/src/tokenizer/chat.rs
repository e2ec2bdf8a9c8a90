//! Chat templates (placeholder while the minijinja renderer is written).

/// One chat message.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// Errors rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("template error: {0}")]
    Render(String),
}

/// A model's chat template.
pub struct ChatTemplate {}
