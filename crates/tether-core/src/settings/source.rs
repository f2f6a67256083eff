//! Key sources: where a route reads a request key such as the chat id. One grammar for every key:
//! `path:<capture>`, `json:<JSON pointer>`, `body:<field>` (the same as `json:/<field>`),
//! `query:<name>`, `header:<Name>` or `cookie:<name>`. Parsing only; reading a request is
//! [`crate::request::key`].

use std::str::FromStr;

/// Where a route finds a request key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A capture of the route's path pattern (`{name}` or `{*name}`), percent-decoded.
    Path(String),
    /// A value in the JSON body at an RFC 6901 pointer.
    Json {
        /// The pointer, `/`-prefixed, with `~0`/`~1` escapes.
        pointer: String,
        /// The top-level field for `body:<field>`. A request without a body (a `GET` attach, a
        /// status request) reads the query parameter of that name instead.
        field: Option<String>,
    },
    /// A query parameter, decoded as `application/x-www-form-urlencoded`.
    Query(String),
    /// A request header (the name is kept lower case).
    Header(String),
    /// A cookie of the `Cookie` header (its value as sent, not decoded).
    Cookie(String),
}

impl KeySource {
    /// The `body:<field>` source.
    pub fn body(field: &str) -> Self {
        KeySource::Json {
            pointer: format!("/{}", field.replace('~', "~0").replace('/', "~1")),
            field: Some(field.into()),
        }
    }

    /// The name a client sees in an error message: the field, capture, parameter, header or
    /// cookie name, or the pointer.
    pub fn label(&self) -> &str {
        match self {
            KeySource::Json {
                field: Some(f),
                pointer: _,
            } => f,
            KeySource::Json { pointer, .. } => pointer,
            KeySource::Path(n)
            | KeySource::Query(n)
            | KeySource::Header(n)
            | KeySource::Cookie(n) => n,
        }
    }

    /// Whether the key is read from the JSON body (`json:<pointer>` alone: `body:<field>` falls
    /// back to the query on a request without a body).
    pub fn needs_body(&self) -> bool {
        matches!(self, KeySource::Json { field: None, .. })
    }
}

/// Checks an RFC 6901 pointer: `/`-prefixed tokens in which `~` only starts `~0` or `~1`.
pub fn check_pointer(p: &str) -> Result<(), String> {
    if !p.starts_with('/') {
        return Err(format!("the JSON pointer {p:?} must start with /"));
    }
    let mut bytes = p.bytes().peekable();
    while let Some(b) = bytes.next() {
        if b == b'~' && !matches!(bytes.next(), Some(b'0' | b'1')) {
            return Err(format!(
                "the JSON pointer {p:?} has a ~ that is not ~0 or ~1"
            ));
        }
    }
    Ok(())
}

impl FromStr for KeySource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{s:?} must be path:<capture>, json:<JSON pointer>, body:<field>, query:<name>, \
                 header:<Name> or cookie:<name>"
            )
        };
        let (kind, name) = s.split_once(':').ok_or_else(bad)?;
        if name.is_empty() {
            return Err(bad());
        }
        Ok(match kind {
            "path" => KeySource::Path(name.into()),
            "json" => {
                check_pointer(name)?;
                KeySource::Json {
                    pointer: name.into(),
                    field: None,
                }
            }
            "body" => KeySource::body(name),
            "query" => KeySource::Query(name.into()),
            "header" => {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(format!("{name:?} is not a header name"));
                }
                KeySource::Header(name.to_ascii_lowercase())
            }
            "cookie" => KeySource::Cookie(name.into()),
            _ => return Err(bad()),
        })
    }
}
