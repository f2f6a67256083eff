//! A route's `usage` setting: which event of a stream carries the provider's token usage, and
//! the JSON pointers to read in it. For the formats with no standard usage event (AG-UI, the AI
//! SDK stream); the other formats' usage frames are known to the recorder.

/// Where a stream's token usage is, as a route's `usage` table names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsagePointers {
    /// The event's `type` (`CUSTOM`, `finish`, …).
    pub ty: String,
    /// The event's `name` (an AG-UI `CUSTOM` event's), when the setting requires one.
    pub name: Option<String>,
    /// JSON pointer of the input (prompt) tokens, cached ones included.
    pub input_tokens: Option<String>,
    /// JSON pointer of the output (completion) tokens, reasoning ones included.
    pub output_tokens: Option<String>,
    /// JSON pointer of the input tokens read from a cache.
    pub cached_input_tokens: Option<String>,
    /// JSON pointer of the output tokens spent on reasoning.
    pub reasoning_tokens: Option<String>,
    /// JSON pointer of the model name.
    pub model: Option<String>,
}

impl UsagePointers {
    /// The setting's `event`: `<TYPE>` or `<TYPE>:<name>`, parsed into [`Self::ty`] and
    /// [`Self::name`]; `None` when either part is empty.
    pub fn event(spec: &str) -> Option<(String, Option<String>)> {
        match spec.split_once(':') {
            Some((ty, name)) if !ty.is_empty() && !name.is_empty() => {
                Some((ty.into(), Some(name.into())))
            }
            None if !spec.is_empty() => Some((spec.into(), None)),
            _ => None,
        }
    }

    /// Every pointer set, with the field it fills.
    pub fn pointers(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("input_tokens", &self.input_tokens),
            ("output_tokens", &self.output_tokens),
            ("cached_input_tokens", &self.cached_input_tokens),
            ("reasoning_tokens", &self.reasoning_tokens),
            ("model", &self.model),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
    }
}
