//! What a run is known by outside its log, for the admin API: the route that recorded it, the
//! stream format it turned out to be, its replay window, and when it started on the wall clock.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::vocab::kinds::FormatKind;

/// A run's labels; each is set once (a mirror of another replica's run has none of its route
/// or format).
#[derive(Debug)]
pub struct Labels {
    route: OnceLock<Arc<str>>,
    format: OnceLock<FormatKind>,
    window: OnceLock<usize>,
    started_at: SystemTime,
}

impl Labels {
    /// Labels of a run starting now.
    pub fn new() -> Labels {
        Labels {
            route: OnceLock::new(),
            format: OnceLock::new(),
            window: OnceLock::new(),
            started_at: SystemTime::now(),
        }
    }

    /// Sets the path of the route that recorded the run (the first call wins).
    pub fn set_route(&self, path: &str) {
        let _ = self.route.set(Arc::from(path));
    }

    /// Sets the run's stream format, once known (the first call wins).
    pub fn set_format(&self, format: FormatKind) {
        let _ = self.format.set(format);
    }

    /// Sets the run's replay window, in events (the first call wins).
    pub fn set_window(&self, events: usize) {
        let _ = self.window.set(events);
    }

    /// The run's replay window in events, when it was recorded here.
    pub fn window(&self) -> Option<usize> {
        self.window.get().copied()
    }

    /// The path of the route that recorded the run, when it was recorded here.
    pub fn route(&self) -> Option<&str> {
        self.route.get().map(|r| &**r)
    }

    /// The run's stream format, once known.
    pub fn format(&self) -> Option<FormatKind> {
        self.format.get().copied()
    }

    /// When the run started, in milliseconds since the Unix epoch (this host's clock).
    pub fn started_at_ms(&self) -> u64 {
        ms(self.started_at)
    }

    /// The wall-clock time `after` the start, in milliseconds since the Unix epoch.
    pub fn at_ms(&self, after: Duration) -> u64 {
        ms(self.started_at + after)
    }
}

impl Default for Labels {
    fn default() -> Self {
        Labels::new()
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
