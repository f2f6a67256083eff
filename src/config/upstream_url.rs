//! The backend's address as `--upstream` names it: `host:port` or `http://host[:port]` for plain
//! HTTP/1.1, `https://host[:port]` for HTTPS (port 443 by default; SNI, certificate name and
//! `Host` from the URL's host).

use std::fmt;

/// The backend's address: its host (a name or an IP address), port and whether to speak TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    /// HTTPS (`https://`).
    pub tls: bool,
    /// The host as written (a name, an IPv4 address, or an IPv6 address in brackets).
    pub host: String,
    /// The port.
    pub port: u16,
}

impl UpstreamUrl {
    /// Parses `--upstream`'s value (a trailing slash allowed); the error says what is wrong.
    /// The host is not looked up here.
    pub fn parse(u: &str) -> Result<Self, String> {
        let (tls, rest, default_port) = if let Some(r) = u.strip_prefix("https://") {
            (true, r, Some(443))
        } else if let Some(r) = u.strip_prefix("http://") {
            (false, r, Some(80))
        } else {
            (false, u, None)
        };
        let hostport = rest.trim_end_matches('/');
        let bad = |why: &str| {
            Err(format!(
                "{u:?} must be host:port, http://host[:port] or https://host[:port]: {why}"
            ))
        };
        if hostport.contains(['/', '?', '#', '@']) {
            return bad("no path, query or user part");
        }
        // An IPv6 address is bracketed; its colons are not the port's.
        let (host, port) = match hostport.rfind(':') {
            Some(i) if !hostport[i..].contains(']') => (&hostport[..i], Some(&hostport[i + 1..])),
            _ => (hostport, None),
        };
        if host.is_empty() || host.contains(char::is_whitespace) {
            return bad("no host");
        }
        let port = match (port, default_port) {
            (Some(p), _) => match p.parse::<u16>() {
                Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return bad("the port is not a number from 1 to 65535"),
            },
            (None, Some(d)) => d,
            (None, None) => return bad("no port"),
        };
        Ok(UpstreamUrl {
            tls,
            host: host.to_string(),
            port,
        })
    }

    /// `host:port`, for connecting and logs.
    pub fn hostport(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The name the backend's certificate must carry and SNI sends: the host without brackets.
    pub fn server_name(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// The `Host` header of a request to an HTTPS backend: the host, and the port unless 443.
    pub fn authority(&self) -> String {
        match (self.tls, self.port) {
            (true, 443) | (false, 80) => self.host.clone(),
            _ => self.hostport(),
        }
    }
}

impl fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tls {
            true => write!(f, "https://{}:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_https_forms_parse_with_their_default_ports() {
        let u = UpstreamUrl::parse("https://api.example.com/").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port),
            (true, "api.example.com", 443)
        );
        assert_eq!(u.authority(), "api.example.com");
        assert_eq!(u.to_string(), "https://api.example.com:443");
        let u = UpstreamUrl::parse("https://127.0.0.1:8443").unwrap();
        assert_eq!(
            (u.tls, u.port, u.authority()),
            (true, 8443, "127.0.0.1:8443".into())
        );
        let u = UpstreamUrl::parse("http://backend").unwrap();
        assert_eq!((u.tls, u.port), (false, 80));
        let u = UpstreamUrl::parse("[::1]:80").unwrap();
        assert_eq!(
            (u.host.as_str(), u.server_name(), u.port),
            ("[::1]", "::1", 80)
        );
        assert_eq!(UpstreamUrl::parse("https://[::1]").unwrap().port, 443);
        assert_eq!(
            UpstreamUrl::parse("localhost:3000").unwrap().hostport(),
            "localhost:3000"
        );
    }

    #[test]
    fn a_bad_address_says_what_is_wrong() {
        for (bad, why) in [
            ("host", "no port"),
            ("host:0", "port"),
            ("host:99999", "port"),
            ("https://host:x", "port"),
            (":80", "no host"),
            ("https://", "no host"),
            ("https://h/v1", "path"),
            ("https://user@h", "user"),
        ] {
            let e = UpstreamUrl::parse(bad).unwrap_err();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }
}
