//! Durations in the file and flags, written the humantime way: `15s`, `5m`, `300ms`.

use std::time::Duration;

use serde::Deserialize;

/// A duration written as `15s`, `5m`, `300ms`, `1h 30m` (humantime syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(Dur)
            .map_err(|e| serde::de::Error::custom(format!("{s:?} is not a duration: {e}")))
    }
}
