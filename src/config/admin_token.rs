//! The admin API's bearer token: read from `TETHER_ADMIN_TOKEN` or the file `--admin-token`
//! names, checked at start, and kept only as a hash so a comparison takes the same time
//! whatever the caller sent.

use std::path::Path;

use super::{err, ConfigError};

/// The environment variable that gives the admin token itself (never a flag: a secret does not
/// go on a command line).
pub const ADMIN_TOKEN_ENV: &str = "TETHER_ADMIN_TOKEN";

/// The shortest token accepted, in bytes.
pub const MIN_ADMIN_TOKEN_BYTES: usize = 16;

/// The admin API's token, kept as its BLAKE3 hash.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(blake3::Hash);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(…)")
    }
}

impl AdminToken {
    /// The token `text` (surrounding whitespace trimmed), if it is long enough.
    pub fn new(text: &str) -> Result<AdminToken, String> {
        let t = text.trim();
        if t.len() < MIN_ADMIN_TOKEN_BYTES {
            return Err(format!(
                "the admin token must be at least {MIN_ADMIN_TOKEN_BYTES} bytes"
            ));
        }
        Ok(AdminToken(blake3::hash(t.as_bytes())))
    }

    /// Whether `Authorization` header value `header` is `Bearer <this token>`. The time taken
    /// does not depend on how much of the token the caller got right (hashes of both are
    /// compared, and BLAKE3 hashes compare in constant time).
    pub fn accepts(&self, header: Option<&[u8]>) -> bool {
        let given = header
            .and_then(|h| h.strip_prefix(b"Bearer "))
            .unwrap_or_default();
        blake3::hash(given) == self.0
    }
}

/// The admin token from `env` (the value of [`ADMIN_TOKEN_ENV`]) or the file `file`; both set is
/// an error, neither is `None` (the admin API stays off).
pub fn admin_token(
    env: Option<String>,
    file: Option<&Path>,
) -> Result<Option<AdminToken>, ConfigError> {
    const KEY: &str = "server.admin_token";
    match (env.filter(|v| !v.is_empty()), file) {
        (Some(_), Some(_)) => Err(err(
            KEY,
            format!("the admin token is given twice (also {ADMIN_TOKEN_ENV}): keep one"),
        )),
        (Some(v), None) => AdminToken::new(&v)
            .map(Some)
            .map_err(|m| err(ADMIN_TOKEN_ENV, m)),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| err(KEY, format!("{}: {e}", path.display())))?;
            AdminToken::new(&text).map(Some).map_err(|m| err(KEY, m))
        }
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_accepted() {
        let t = AdminToken::new(" 0123456789abcdef\n").unwrap();
        assert!(t.accepts(Some(b"Bearer 0123456789abcdef")));
        for wrong in [
            &b"Bearer 0123456789abcdeF"[..],
            b"Bearer 0123456789abcdef ",
            b"bearer 0123456789abcdef",
            b"0123456789abcdef",
            b"Bearer ",
            b"",
        ] {
            assert!(
                !t.accepts(Some(wrong)),
                "{:?}",
                String::from_utf8_lossy(wrong)
            );
        }
        assert!(!t.accepts(None));
    }

    #[test]
    fn a_short_token_a_missing_file_and_two_sources_are_refused() {
        assert!(AdminToken::new("short").is_err());
        let e = admin_token(Some("x".repeat(16)), Some(Path::new("/nonexistent"))).unwrap_err();
        assert_eq!(e.key, "server.admin_token");
        let e = admin_token(None, Some(Path::new("/nonexistent/token"))).unwrap_err();
        assert_eq!(e.key, "server.admin_token");
        let e = admin_token(Some("short".into()), None).unwrap_err();
        assert_eq!(e.key, ADMIN_TOKEN_ENV);
        assert!(admin_token(None, None).unwrap().is_none());
        assert!(admin_token(Some(String::new()), None).unwrap().is_none());
    }
}
