//! What a route hands out or answers: resume-token headers (record routes), the answer shape
//! (stop and status routes) and the cancel id (stop routes).

use super::super::route_conf::RouteKind;
use super::super::{Answer, KeySource, Tokens};
use super::Check;
use crate::error::ConfigError;

/// How long a resume token is valid unless `token_ttl` says.
const DEFAULT_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl Check<'_> {
    /// The resume-token headers and their lifetime.
    pub(super) fn tokens(&self) -> Result<Tokens, ConfigError> {
        let rc = self.rc;
        let tokens = Tokens {
            run_id_header: self.header_name("run_id_header", &rc.run_id_header)?,
            token_header: self.header_name("token_header", &rc.token_header)?,
            ttl: rc.token_ttl.map_or(DEFAULT_TOKEN_TTL, |d| d.0),
        };
        if tokens.ttl.is_zero() {
            return Err(self.err("token_ttl", "must be more than 0s"));
        }
        Ok(tokens)
    }

    /// Key `k`'s header name, lower case.
    fn header_name(&self, k: &str, v: &Option<String>) -> Result<Option<String>, ConfigError> {
        match v {
            Some(h) if http::HeaderName::from_bytes(h.as_bytes()).is_ok() => {
                Ok(Some(h.to_ascii_lowercase()))
            }
            Some(h) => Err(self.err(k, format!("{h:?} is not a header name"))),
            None => Ok(None),
        }
    }

    /// `answer`: a shape for stop and status routes only, `cancel_requested` for stops only.
    pub(super) fn answer(&self) -> Result<(), ConfigError> {
        let rc = self.rc;
        if rc.answer != Answer::Tether && !matches!(rc.kind, RouteKind::Stop | RouteKind::Status) {
            return Err(self.err("answer", "only stop and status routes have an answer shape"));
        }
        if rc.answer == Answer::CancelRequested && rc.kind == RouteKind::Status {
            return Err(self.err("answer", "cancel_requested is a stop answer"));
        }
        Ok(())
    }

    /// `cancel_request_id`: where a stop route reads a retried stop's id.
    pub(super) fn cancel_request_id(&self) -> Result<Option<KeySource>, ConfigError> {
        match &self.rc.cancel_request_id {
            Some(_) if self.rc.kind != RouteKind::Stop => {
                Err(self.err("cancel_request_id", "only stop routes take it"))
            }
            Some(c) => Ok(Some(self.source("cancel_request_id", c)?)),
            None => Ok(None),
        }
    }
}
