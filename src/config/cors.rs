//! `[server.cors]`: which other origins' pages may read tether's own answers, as read
//! ([`CorsConf`]) and checked ([`Cors`]). An origin is matched exactly, as a browser serializes it
//! (`scheme://host[:port]`, lower case, no default port); `"*"` is any origin, without
//! credentials only.

use std::time::Duration;

use serde::Deserialize;

use super::duration::Dur;
use crate::error::ConfigError;

/// `[server.cors]` as read: off while `allow_origins` is empty.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConf {
    /// The origins whose pages may read tether's answers (`--cors-origin`); `["*"]`: any
    /// origin (not with `allow_credentials`); empty: no CORS headers at all.
    pub allow_origins: Vec<String>,
    /// Answer `access-control-allow-credentials: true`, so a page may send cookies or HTTP
    /// authentication and read the answer.
    pub allow_credentials: bool,
    /// Response headers a page may read besides `x-tether-run-id` and the routes' resume-token
    /// headers, which are always exposed.
    pub expose_headers: Vec<String>,
    /// Request headers a page may send to tether's routes besides the ones tether reads there
    /// (for headers the backend wants on a forwarded turn).
    pub allow_headers: Vec<String>,
    /// How long a browser may keep a preflight's answer (`access-control-max-age`).
    pub max_age: Dur,
}

impl Default for CorsConf {
    fn default() -> Self {
        CorsConf {
            allow_origins: Vec::new(),
            allow_credentials: false,
            expose_headers: Vec::new(),
            allow_headers: Vec::new(),
            max_age: Dur(Duration::from_secs(600)),
        }
    }
}

/// Which origins are allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origins {
    /// Any origin (`"*"`): answered `access-control-allow-origin: *`.
    Any,
    /// These origins, each as a browser sends it in `Origin`.
    Listed(Vec<String>),
}

/// `[server.cors]` checked: present only when some origin is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsSettings {
    /// The allowed origins.
    pub origins: Origins,
    /// Whether credentialed requests may read the answers.
    pub credentials: bool,
    /// Extra exposed response headers, lower case.
    pub expose_headers: Vec<String>,
    /// Extra allowed request headers, lower case.
    pub allow_headers: Vec<String>,
    /// The preflight cache lifetime.
    pub max_age: Duration,
}

impl CorsSettings {
    /// Checks `[server.cors]`; `origins_key` names where the origins came from (the file's key,
    /// or `--cors-origin`). `None` when no origin is allowed.
    pub(super) fn check(
        c: &CorsConf,
        origins_key: &str,
    ) -> Result<Option<CorsSettings>, ConfigError> {
        let headers = |key: &str, names: &[String]| -> Result<Vec<String>, ConfigError> {
            let mut out: Vec<String> = Vec::new();
            for n in names {
                let n = n.trim().to_ascii_lowercase();
                if http::HeaderName::from_bytes(n.as_bytes()).is_err() {
                    return Err(ConfigError::new(key, format!("{n:?} is not a header name")));
                }
                if !out.contains(&n) {
                    out.push(n);
                }
            }
            Ok(out)
        };
        let expose_headers = headers("server.cors.expose_headers", &c.expose_headers)?;
        let allow_headers = headers("server.cors.allow_headers", &c.allow_headers)?;
        if c.allow_origins.is_empty() {
            return Ok(None);
        }
        let mut listed: Vec<String> = Vec::new();
        let mut any = false;
        for o in &c.allow_origins {
            match o.trim() {
                "*" => any = true,
                o => {
                    let o = origin(o).map_err(|m| ConfigError::new(origins_key, m))?;
                    if !listed.contains(&o) {
                        listed.push(o);
                    }
                }
            }
        }
        if any && !listed.is_empty() {
            return Err(ConfigError::new(
                origins_key,
                "\"*\" allows every origin: list it alone",
            ));
        }
        if any && c.allow_credentials {
            return Err(ConfigError::new(
                "server.cors.allow_credentials",
                "browsers refuse credentials with any origin (\"*\"): list the origins",
            ));
        }
        if c.max_age.0 > Duration::from_secs(86_400) {
            return Err(ConfigError::new(
                "server.cors.max_age",
                "must be at most 24h",
            ));
        }
        Ok(Some(CorsSettings {
            origins: if any {
                Origins::Any
            } else {
                Origins::Listed(listed)
            },
            credentials: c.allow_credentials,
            expose_headers,
            allow_headers,
            max_age: c.max_age.0,
        }))
    }
}

/// One configured origin checked and written as a browser sends it: `scheme://host[:port]` in
/// lower case, without a path or a default port.
fn origin(o: &str) -> Result<String, String> {
    let bad = |why: &str| format!("{o:?} is not an origin ({why}): write scheme://host[:port]");
    let lower = o.to_ascii_lowercase();
    let Some((scheme, rest)) = lower.split_once("://") else {
        return Err(bad("no scheme"));
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return Err(bad("a bad scheme"));
    }
    if rest.is_empty() {
        return Err(bad("no host"));
    }
    if rest.contains(['/', '?', '#']) {
        return Err(bad("an origin has no path, not even a trailing /"));
    }
    if rest.contains(['@', ' ', '\t', ',']) || rest.chars().any(|c| c.is_ascii_control()) {
        return Err(bad("a bad host"));
    }
    // The port is what follows the last colon outside an IPv6 literal's brackets.
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (rest, None),
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if let Some(p) = port {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err() {
            return Err(bad("a bad port"));
        }
        let default = matches!((scheme, p), ("http", "80") | ("https", "443"));
        if default {
            return Err(format!(
                "{o:?}: a browser sends this origin without its default port :{p}"
            ));
        }
    }
    Ok(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(origins: &[&str]) -> CorsConf {
        CorsConf {
            allow_origins: origins.iter().map(|o| o.to_string()).collect(),
            ..CorsConf::default()
        }
    }

    #[test]
    fn no_origin_means_no_cors() {
        assert_eq!(
            CorsSettings::check(&CorsConf::default(), "k").unwrap(),
            None
        );
    }

    #[test]
    fn origins_are_kept_as_a_browser_sends_them() {
        let c = CorsSettings::check(
            &conf(&[
                "http://127.0.0.2:8081",
                "HTTPS://App.Example.COM",
                "http://[::1]:3000",
                "https://app.example.com",
                "tauri://localhost",
            ]),
            "k",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.origins,
            Origins::Listed(vec![
                "http://127.0.0.2:8081".into(),
                "https://app.example.com".into(),
                "http://[::1]:3000".into(),
                "tauri://localhost".into(),
            ])
        );
        assert_eq!(c.max_age, Duration::from_secs(600));
        assert!(!c.credentials);
    }

    #[test]
    fn what_no_browser_sends_is_refused_naming_the_key() {
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "https://app.example.com/chat",
            "https://",
            "https://:8080",
            "https://a.com:",
            "https://a.com:99999",
            "https://a.com:8o",
            "https://a.com:443",
            "http://a.com:80",
            "https://user@a.com",
            "1http://a.com",
            "null",
            "",
        ] {
            let e = CorsSettings::check(&conf(&[bad]), "--cors-origin").unwrap_err();
            assert_eq!(e.key, "--cors-origin", "{bad:?}");
        }
    }

    #[test]
    fn any_origin_is_alone_and_never_with_credentials() {
        let c = CorsSettings::check(&conf(&["*"]), "k").unwrap().unwrap();
        assert_eq!(c.origins, Origins::Any);
        let e = CorsSettings::check(&conf(&["*", "https://a.com"]), "k").unwrap_err();
        assert_eq!(e.key, "k");
        let mut with_credentials = conf(&["*"]);
        with_credentials.allow_credentials = true;
        let e = CorsSettings::check(&with_credentials, "k").unwrap_err();
        assert_eq!(e.key, "server.cors.allow_credentials");
        with_credentials.allow_origins = vec!["https://a.com".into()];
        assert!(
            CorsSettings::check(&with_credentials, "k")
                .unwrap()
                .unwrap()
                .credentials
        );
    }

    #[test]
    fn header_names_are_checked_and_lower_cased() {
        let mut c = conf(&["https://a.com"]);
        c.expose_headers = vec!["X-Workflow-Run-Id".into(), "x-workflow-run-id".into()];
        c.allow_headers = vec!["X-Api-Key".into()];
        let ok = CorsSettings::check(&c, "k").unwrap().unwrap();
        assert_eq!(ok.expose_headers, ["x-workflow-run-id"]);
        assert_eq!(ok.allow_headers, ["x-api-key"]);
        c.expose_headers = vec!["bad header".into()];
        assert_eq!(
            CorsSettings::check(&c, "k").unwrap_err().key,
            "server.cors.expose_headers"
        );
        c.expose_headers.clear();
        c.allow_headers = vec!["".into()];
        assert_eq!(
            CorsSettings::check(&c, "k").unwrap_err().key,
            "server.cors.allow_headers"
        );
        c.allow_headers.clear();
        c.max_age = Dur(Duration::from_secs(90_000));
        assert_eq!(
            CorsSettings::check(&c, "k").unwrap_err().key,
            "server.cors.max_age"
        );
    }

    #[test]
    fn the_file_table_parses_and_refuses_unknown_keys() {
        use crate::config::parse_file;
        let text = "[server.cors]\nallow_origins = [\"https://a.com\"]\nallow_credentials = true\n\
                    expose_headers = [\"X-Trace\"]\nallow_headers = [\"X-Key\"]\nmax_age = \"2m\"\n";
        let c = parse_file(text).unwrap().validate().unwrap().cors.unwrap();
        assert_eq!(c.origins, Origins::Listed(vec!["https://a.com".into()]));
        assert!(c.credentials);
        assert_eq!(c.expose_headers, ["x-trace"]);
        assert_eq!(c.allow_headers, ["x-key"]);
        assert_eq!(c.max_age, Duration::from_secs(120));
        let e = parse_file("[server.cors]\nallow_origin = [\"https://a.com\"]\n").unwrap_err();
        assert!(e.message.contains("allow_origin"), "{e}");
        let e = parse_file("[server.cors]\nallow_origins = [\"https://a.com/\"]\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(e.key, "server.cors.allow_origins");
        let off = parse_file("").unwrap().validate().unwrap();
        assert_eq!(off.cors, None);
    }

    #[test]
    fn the_flag_repeats_splits_on_commas_and_replaces_the_files_origins() {
        use crate::config::{parse_file, Config, Flags};
        use clap::Parser;
        let f = Flags::parse_from([
            "tether",
            "--cors-origin",
            "https://a.com",
            "--cors-origin",
            "https://b.com,http://127.0.0.2:8000",
        ]);
        assert_eq!(
            f.cors_origins,
            ["https://a.com", "https://b.com", "http://127.0.0.2:8000"]
        );
        let file = parse_file("[server.cors]\nallow_origins = [\"https://file.com\"]\n").unwrap();
        let c = Config::from_parts(file, &f).unwrap().cors.unwrap();
        assert_eq!(
            c.origins,
            Origins::Listed(vec![
                "https://a.com".into(),
                "https://b.com".into(),
                "http://127.0.0.2:8000".into(),
            ])
        );
        // Without the flag, the file's; a bad value from the flag names the flag.
        let file = parse_file("[server.cors]\nallow_origins = [\"https://file.com\"]\n").unwrap();
        let none = Flags::parse_from(["tether"]);
        let c = Config::from_parts(file, &none).unwrap().cors.unwrap();
        assert_eq!(c.origins, Origins::Listed(vec!["https://file.com".into()]));
        // Empty entries (an empty environment variable) name no origin: the file's stand.
        let empty = Flags::parse_from(["tether", "--cors-origin", ",", "--cors-origin", ""]);
        let file = parse_file("[server.cors]\nallow_origins = [\"https://file.com\"]\n").unwrap();
        let c = Config::from_parts(file, &empty).unwrap().cors.unwrap();
        assert_eq!(c.origins, Origins::Listed(vec!["https://file.com".into()]));
        let c = Config::from_parts(parse_file("").unwrap(), &empty).unwrap();
        assert_eq!(c.cors, None);
        let bad = Flags::parse_from(["tether", "--cors-origin", "a.com"]);
        let e = Config::from_parts(parse_file("").unwrap(), &bad).unwrap_err();
        assert_eq!(e.key, "--cors-origin");
    }
}
