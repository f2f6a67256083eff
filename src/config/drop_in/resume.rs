//! A resume route's keys: its dialect, cursor source, compared field, `only_if`, token source and
//! answers to nothing and to an expired cursor.

use super::super::route_conf::RouteKind;
use super::super::{check_pointer, DialectKind, KeySource, OnlyIf, Resume};
use super::Check;
use crate::error::ConfigError;

impl Check<'_> {
    /// The dialect and its options: a resume route needs a dialect, and no other route has one.
    pub(super) fn resume(&self) -> Result<Option<Resume>, ConfigError> {
        let rc = self.rc;
        let d = match (rc.kind, &rc.dialect) {
            (RouteKind::Resume, Some(d)) => d,
            (RouteKind::Resume, None) => return Err(self.err(
                "dialect",
                "a resume route needs a dialect: from_start, last_event_id, frame_index, json_cursor or durable_streams",
            )),
            (_, Some(_)) => return Err(self.err("dialect", "only resume routes have a dialect")),
            (_, None) => return Ok(None),
        };
        let dialect: DialectKind = d.parse().map_err(|e: String| self.err("dialect", e))?;
        let (default_cursor, default_expired) = Resume::defaults(dialect);
        let cursor = self.cursor(dialect, default_cursor)?;
        let cursor_field = self.cursor_field(dialect)?;
        let only_if = match &rc.only_if {
            Some(o) => Some(o.parse::<OnlyIf>().map_err(|e| self.err("only_if", e))?),
            None => None,
        };
        let token = match &rc.token {
            Some(t) => Some(self.source("token", t)?),
            None => None,
        };
        Ok(Some(Resume {
            dialect,
            cursor,
            cursor_field,
            on_nothing: rc.on_nothing,
            completed: rc.completed,
            expired: rc.expired.unwrap_or(default_expired),
            only_if,
            token,
        }))
    }

    /// Where the dialect's cursor is: the route's `cursor`, else the dialect's default.
    fn cursor(
        &self,
        dialect: DialectKind,
        default: Option<KeySource>,
    ) -> Result<Option<KeySource>, ConfigError> {
        let cursor = match &self.rc.cursor {
            Some(_) if dialect == DialectKind::DurableStreams => {
                return Err(self.err(
                    "cursor",
                    "durable_streams reads the protocol's own offset query parameter",
                ))
            }
            Some(c) if dialect == DialectKind::FromStart => {
                return Err(self.err("cursor", format!("from_start takes no cursor ({c:?})")))
            }
            Some(c) => Some(self.source("cursor", c)?),
            None => default,
        };
        if dialect == DialectKind::JsonCursor && cursor.is_none() {
            return Err(self.err(
                "cursor",
                "json_cursor needs a cursor source, e.g. query:starting_after",
            ));
        }
        Ok(cursor)
    }

    /// `cursor_field`: the JSON pointer a `json_cursor` route compares, and only such a route.
    fn cursor_field(&self, dialect: DialectKind) -> Result<Option<String>, ConfigError> {
        match (&self.rc.cursor_field, dialect) {
            (Some(f), DialectKind::JsonCursor) => {
                check_pointer(f).map_err(|e| self.err("cursor_field", e))?;
                Ok(Some(f.clone()))
            }
            (None, DialectKind::JsonCursor) => Err(self.err(
                "cursor_field",
                "json_cursor needs a cursor_field, e.g. /sequence_number",
            )),
            (Some(_), _) => Err(self.err("cursor_field", "only json_cursor compares a field")),
            (None, _) => Ok(None),
        }
    }
}
