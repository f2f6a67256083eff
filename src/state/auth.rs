//! Ownership: who the caller is (`[auth] subject`), and the scope a chat id lives in for them.
//!
//! The subject (a header, a cookie or the `Authorization` header) is never stored: tether keeps a
//! keyed BLAKE3 hash of it under a key drawn at start. Chats are scoped by that hash, so one
//! caller's chat ids never name another caller's runs; each run also carries its owner's hash and
//! lookups compare it in constant time. With `subject = "none"` every caller is the same owner:
//! anyone who knows a chat id may read, stop and query its runs.

use http::HeaderMap;

use crate::config::Subject;
use crate::error::{ApiError, Code};
use crate::vocab::{ChatId, RunId, Scope};

/// A caller's identity: the keyed hash of its subject, or none when auth is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Owner(Option<blake3::Hash>);

impl Owner {
    /// The single owner of every chat when auth is off.
    pub const NONE: Owner = Owner(None);

    /// The owner's hash bytes (empty when auth is off), for binding into a resume token.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_ref().map_or(&[], |h| h.as_bytes())
    }

    /// An owner whose hash is that of `subject` (unkeyed; for tests).
    #[cfg(test)]
    pub fn of(subject: &[u8]) -> Owner {
        Owner(Some(blake3::hash(subject)))
    }

    /// The owner's keyed hash in hex (what the admin API shows for an owner; the subject itself
    /// is never kept), or `None` when auth is off.
    pub fn hex(&self) -> Option<String> {
        self.0.as_ref().map(|h| h.to_hex().to_string())
    }

    /// The owner whose keyed hash is `hex` (as [`Owner::hex`] shows it), or `None` when `hex` is
    /// not 64 hex digits.
    pub fn from_hex(hex: &str) -> Option<Owner> {
        blake3::Hash::from_hex(hex).ok().map(|h| Owner(Some(h)))
    }

    /// Whether `other` is the same owner; constant time in the hash.
    pub fn is(&self, other: &Owner) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            // blake3::Hash equality is constant-time.
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }
}

/// Derives owners and scopes from requests.
pub struct Auth {
    subject: Subject,
    key: [u8; 32],
}

impl Auth {
    /// An authenticator for `subject` with a fresh random key.
    pub fn new(subject: Subject) -> Self {
        Auth {
            subject,
            key: rand::random(),
        }
    }

    /// Every value of the subject in a request with these headers.
    fn values(&self, headers: &HeaderMap) -> Vec<Vec<u8>> {
        match &self.subject {
            Subject::None => Vec::new(),
            Subject::Header(h) => all(headers, h.as_str()),
            Subject::Authorization => all(headers, "authorization"),
            Subject::Cookie(name) => headers
                .get_all("cookie")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(cookie::Cookie::split_parse)
                .filter_map(Result::ok)
                .filter(|c| c.name() == name)
                .map(|c| c.value().as_bytes().to_vec())
                .collect(),
        }
    }

    /// The subject of a request with these headers as the run record names its owner: the
    /// value of the configured header or cookie. `None` with no subject, or when the subject
    /// is the `Authorization` header (a credential is never written to a record).
    pub fn subject(&self, headers: &HeaderMap) -> Option<String> {
        if matches!(self.subject, Subject::None | Subject::Authorization) {
            return None;
        }
        match self.values(headers).as_slice() {
            [v] if !v.is_empty() => Some(String::from_utf8_lossy(v).into_owned()),
            _ => None,
        }
    }

    /// The caller of a request with these headers. With a subject configured, a request that
    /// lacks it, or names it more than once (two header lines of its name, two `Authorization`
    /// headers, the cookie twice in one or more `Cookie` headers), gets 401 `unauthenticated`:
    /// behind a gateway that adds the verified identity to what the client sent, the first or
    /// last of several values may be the client's own. A single value is taken whole (a comma
    /// in it is not a list): it hashes to an owner of its own.
    pub fn owner(&self, headers: &HeaderMap) -> Result<Owner, ApiError> {
        if self.subject == Subject::None {
            return Ok(Owner(None));
        }
        let values = self.values(headers);
        match values.as_slice() {
            [v] if !v.is_empty() => Ok(Owner(Some(blake3::keyed_hash(&self.key, v)))),
            [_, _, ..] => Err(ApiError::new(
                Code::Unauthenticated,
                "this request names its caller more than once",
            )),
            _ => Err(ApiError::new(
                Code::Unauthenticated,
                "this request carries no caller identity",
            )),
        }
    }

    /// The owner a caller whose subject is `subject` is (the admin API's owner filter and
    /// erasure), or `None` when auth is off (every caller is then one owner).
    pub fn owner_of(&self, subject: &[u8]) -> Option<Owner> {
        match (&self.subject, subject.is_empty()) {
            (Subject::None, _) | (_, true) => None,
            _ => Some(Owner(Some(blake3::keyed_hash(&self.key, subject)))),
        }
    }

    /// An authenticator for `subject` whose key is derived from `secret`: every replica that
    /// shares the secret derives the same owners (a shared journal needs that).
    pub fn with_secret(subject: Subject, secret: &[u8]) -> Self {
        Auth {
            subject,
            key: blake3::derive_key("tether 2025 owner key", secret),
        }
    }

    /// The registry key of `chat_id` for `owner`.
    pub fn scope(owner: &Owner, chat_id: &ChatId) -> Scope {
        match &owner.0 {
            None => Scope::from(chat_id.as_str()),
            Some(h) => Scope::from(format!("{}/{chat_id}", h.to_hex())),
        }
    }

    /// The owner a scope [`Auth::scope`] made names: the hash it starts with, or
    /// [`Owner::NONE`] when this authenticator has no subject (every scope is then a chat id).
    pub fn owner_in(&self, scope: &Scope) -> Owner {
        if matches!(self.subject, Subject::None) {
            return Owner::NONE;
        }
        let s = scope.as_str();
        match (s.get(..64), s.get(64..65)) {
            (Some(hex), Some("/")) => Owner::from_hex(hex).unwrap_or(Owner::NONE),
            _ => Owner::NONE,
        }
    }

    /// The chat id of `scope`, a scope [`Auth::scope`] made for `owner`.
    pub fn chat_of<'s>(owner: &Owner, scope: &'s Scope) -> &'s str {
        let s = scope.as_str();
        match &owner.0 {
            None => s,
            // 64 hex digits and the `/`.
            Some(_) => s.get(65..).unwrap_or(s),
        }
    }

    /// The id-index key of run id (or alias) `id` for `owner`: the same form as a scope, so an
    /// id is found only by the owner it was indexed for.
    pub fn id_key(owner: &Owner, id: &RunId) -> IdKey {
        IdKey(match &owner.0 {
            None => id.to_string(),
            Some(h) => format!("{}/{id}", h.to_hex()),
        })
    }
}

/// A key of the registry's id index: a run id or alias scoped by the owner it was indexed for
/// ([`Auth::id_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdKey(String);

impl IdKey {
    /// The key's text (what the shared journal's id keys are derived from).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Every value of header `name`, one per header line.
fn all(headers: &HeaderMap, name: &str) -> Vec<Vec<u8>> {
    headers
        .get_all(name)
        .iter()
        .map(|v| v.as_bytes().to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn subjects_hash_per_caller_and_scope_chats_apart() {
        let auth = Auth::new(Subject::Header("x-user".into()));
        let a = auth.owner(&headers(&[("x-user", "alice")])).unwrap();
        let b = auth.owner(&headers(&[("x-user", "bob")])).unwrap();
        assert!(a.is(&auth.owner(&headers(&[("x-user", "alice")])).unwrap()));
        assert!(!a.is(&b));
        assert_ne!(
            Auth::scope(&a, &ChatId::from("c")),
            Auth::scope(&b, &ChatId::from("c"))
        );
        assert!(!Auth::scope(&a, &ChatId::from("c")).contains("alice"));
        assert_eq!(auth.owner(&headers(&[])).unwrap_err().status(), 401);
    }

    #[test]
    fn cookie_and_authorization_subjects() {
        let auth = Auth::new(Subject::Cookie("sid".into()));
        let a = auth.owner(&headers(&[("cookie", "x=1; sid=abc")])).unwrap();
        let b = auth.owner(&headers(&[("cookie", "sid=abc")])).unwrap();
        assert!(a.is(&b));
        assert!(auth.owner(&headers(&[("cookie", "x=1")])).is_err());
        let auth = Auth::new(Subject::Authorization);
        assert!(auth
            .owner(&headers(&[("authorization", "Bearer t")]))
            .is_ok());
        let none = Auth::new(Subject::None).owner(&headers(&[])).unwrap();
        assert_eq!(Auth::scope(&none, &ChatId::from("c")), "c");
    }

    #[test]
    fn a_subject_named_twice_is_refused_and_one_value_is_taken_whole() {
        let auth = Auth::new(Subject::Header("x-user".into()));
        let twice = auth.owner(&headers(&[("x-user", "alice"), ("x-user", "mallory")]));
        assert_eq!(twice.unwrap_err().status(), 401);
        let alice = auth.owner(&headers(&[("x-user", "alice")])).unwrap();
        let merged = auth
            .owner(&headers(&[("x-user", "mallory, alice")]))
            .unwrap();
        assert!(
            !merged.is(&alice),
            "a comma-joined value is an owner of its own"
        );
        let auth = Auth::new(Subject::Authorization);
        let two = headers(&[("authorization", "Bearer a"), ("authorization", "Bearer m")]);
        assert_eq!(auth.owner(&two).unwrap_err().status(), 401);
        let auth = Auth::new(Subject::Cookie("sid".into()));
        for h in [
            headers(&[("cookie", "sid=a; x=1; sid=m")]),
            headers(&[("cookie", "sid=a"), ("cookie", "sid=m")]),
            headers(&[("cookie", "sid=; sid=m")]),
        ] {
            assert_eq!(auth.owner(&h).unwrap_err().status(), 401, "{h:?}");
        }
        assert!(auth
            .owner(&headers(&[("cookie", "sid=a"), ("cookie", "x=1")]))
            .is_ok());
    }
}
