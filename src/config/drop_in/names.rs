//! What names a route's run: `run` sources (resume, stop and status routes), aliases,
//! `resume_on` and the idempotency key (record routes).

use super::super::route_conf::RouteKind;
use super::super::{Alias, Ids, KeySource};
use super::{check_source, Check, DEFAULT_IDEMPOTENCY_HEADER};
use crate::error::ConfigError;

impl Check<'_> {
    /// `run`: where a resume, stop or status route finds the run it names.
    pub(super) fn run(&self) -> Result<Vec<KeySource>, ConfigError> {
        let Some(r) = &self.rc.run else {
            return Ok(Vec::new());
        };
        if !matches!(
            self.rc.kind,
            RouteKind::Resume | RouteKind::Stop | RouteKind::Status
        ) {
            return Err(self.err("run", "only resume, stop and status routes name a run"));
        }
        r.list()
            .into_iter()
            .map(|v| self.source("run", v))
            .collect()
    }

    /// `aliases`, and the keys only a record route takes (`ids` and the resume-token headers
    /// included, so one family's refusals come in one place).
    pub(super) fn aliases(&self) -> Result<Vec<Alias>, ConfigError> {
        let rc = self.rc;
        let mut aliases = Vec::new();
        for a in &rc.aliases {
            let alias: Alias = a.parse().map_err(|e: String| self.err("aliases", e))?;
            if let Alias::Request(src) = &alias {
                check_source(src, self.path, rc.kind, self.methods)
                    .map_err(|e| self.err("aliases", e))?;
            }
            aliases.push(alias);
        }
        self.record_only("aliases", !aliases.is_empty())?;
        self.record_only("ids", rc.ids != Ids::Upstream)?;
        self.record_only("resume_on", rc.resume_on.is_some())?;
        self.record_only("run_id_header", rc.run_id_header.is_some())?;
        self.record_only("token_header", rc.token_header.is_some())?;
        self.record_only("token_ttl", rc.token_ttl.is_some())?;
        Ok(aliases)
    }

    /// `resume_on = "header:<Name>"`: the header whose frame id makes a record request a resume.
    pub(super) fn resume_on(&self) -> Result<Option<KeySource>, ConfigError> {
        let Some(r) = &self.rc.resume_on else {
            return Ok(None);
        };
        match r.parse::<KeySource>() {
            Ok(KeySource::Header(h)) => Ok(Some(KeySource::Header(h))),
            _ => Err(self.err(
                "resume_on",
                format!("{r:?} must be header:<Name>, e.g. header:Last-Event-ID"),
            )),
        }
    }

    /// `idempotency_key`: where a record route reads a retry's key (`Idempotency-Key` unless
    /// set; an empty value turns it off).
    pub(super) fn idempotency_key(&self) -> Result<Option<KeySource>, ConfigError> {
        let key = self.rc.idempotency_key.as_deref();
        self.record_only("idempotency_key", key.is_some_and(|k| !k.is_empty()))?;
        match (self.rc.kind, key) {
            (RouteKind::Record, None) => {
                Ok(Some(KeySource::Header(DEFAULT_IDEMPOTENCY_HEADER.into())))
            }
            (RouteKind::Record, Some(k)) if !k.is_empty() => {
                Ok(Some(self.source("idempotency_key", k)?))
            }
            _ => Ok(None),
        }
    }
}
