//! Route paths: an exact path, or a router-style pattern with `{name}` captures and one trailing
//! `{*rest}` catch-all (`/api/chat/{id}/stream`, `/files/{*rest}`), matched with `matchit`.
//!
//! `matchit`'s router picks the most specific of its routes and refuses overlapping ones; tether
//! matches routes in file order instead, so each pattern gets a router of its own holding just
//! that pattern, and routes are tried one after the other. An exact path (no braces) is a plain
//! string comparison. Captures are kept raw, as they appear in the request path
//! (percent-encoded); a key source decodes the one it reads.

use std::sync::Arc;

/// The captures of a matched pattern, in the order of the path: `(name, raw value)`. Empty (and
/// unallocated) for an exact path.
pub type Captures = Vec<(String, String)>;

/// A route's `path`: exact, or a pattern.
#[derive(Debug, Clone)]
pub struct RoutePath {
    text: String,
    /// `None` for an exact path.
    pattern: Option<Pattern>,
}

#[derive(Debug, Clone)]
struct Pattern {
    router: Arc<matchit::Router<()>>,
    names: Vec<String>,
}

/// The capture names of a pattern (`{{` and `}}` are literal braces), or why it is malformed.
fn capture_names(p: &str) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = Vec::new();
    let mut rest = p;
    while let Some(i) = rest.find(['{', '}']) {
        let (brace, after) = (rest.as_bytes()[i], &rest[i + 1..]);
        if after.as_bytes().first() == Some(&brace) {
            rest = &after[1..];
            continue;
        }
        if brace == b'}' {
            return Err(format!(
                "{p:?} has a }} that closes nothing (write }}}} for a literal one)"
            ));
        }
        let end = after
            .find('}')
            .ok_or_else(|| format!("{p:?} has an unclosed {{"))?;
        let name = after[..end].strip_prefix('*').unwrap_or(&after[..end]);
        if name.is_empty() || name.contains(['{', '/']) {
            return Err(format!("{p:?} has a capture without a valid name"));
        }
        if names.iter().any(|n| n == name) {
            return Err(format!("{p:?} captures {name:?} twice"));
        }
        names.push(name.to_string());
        rest = &after[end + 1..];
    }
    Ok(names)
}

impl RoutePath {
    /// Parses a route path: it starts with `/`; braces make it a pattern.
    pub fn parse(p: &str) -> Result<Self, String> {
        if !p.starts_with('/') {
            return Err(format!("{p:?} must start with /"));
        }
        if !p.contains(['{', '}']) {
            return Ok(RoutePath {
                text: p.into(),
                pattern: None,
            });
        }
        let names = capture_names(p)?;
        let mut router = matchit::Router::new();
        router
            .insert(p, ())
            .map_err(|e| format!("{p:?} is not a valid path pattern: {e}"))?;
        Ok(RoutePath {
            text: p.into(),
            pattern: Some(Pattern {
                router: Arc::new(router),
                names,
            }),
        })
    }

    /// The path as configured (the metric label of its runs).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The names of the pattern's captures (none for an exact path).
    pub fn captures(&self) -> &[String] {
        match &self.pattern {
            Some(p) => &p.names,
            None => &[],
        }
    }

    /// The captures when `path` (a request path, query excluded) matches, else `None`.
    pub fn matches(&self, path: &str) -> Option<Captures> {
        let Some(p) = &self.pattern else {
            return (self.text == path).then(Vec::new);
        };
        let m = p.router.at(path).ok()?;
        Some(
            m.params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }
}
