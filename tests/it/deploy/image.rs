//! The Dockerfile and the systemd unit: a cmake build, a non-root runtime, SIGTERM as the stop
//! signal, the ports and config file tether runs with, and a stop timeout longer than the drain.

use std::collections::BTreeSet;

use crate::deploy::{config_from_args, image_entrypoint, read, ADMIN_PORT, PROXY_PORT};

/// The value of `Key=value` lines of a systemd unit (all of them, in order).
fn unit_values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .map(str::trim)
        .collect()
}

#[test]
fn the_image_builds_with_cmake_runs_as_non_root_and_stops_with_sigterm() {
    let dockerfile = read("deploy/Dockerfile");
    let instructions: Vec<(String, &str)> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (word, rest) = l.split_once(char::is_whitespace)?;
            Some((word.to_ascii_uppercase(), rest.trim()))
        })
        .collect();
    let all = |word: &str| -> Vec<&str> {
        instructions
            .iter()
            .filter(|(w, _)| w == word)
            .map(|(_, rest)| *rest)
            .collect()
    };

    assert!(
        dockerfile.contains("apt-get install") && dockerfile.contains("cmake"),
        "the build stage must install cmake (Pingora's zlib-ng build needs it)"
    );
    let froms = all("FROM");
    assert!(froms.len() >= 2, "a multi-stage build is expected");
    assert!(
        froms[0].starts_with("rust:1-bookworm"),
        "build stage: {}",
        froms[0]
    );

    // The runtime stage: everything after the last FROM.
    let runtime = froms.last().expect("a FROM");
    let last_user = all("USER").last().map(|u| u.split(':').next().unwrap_or(u));
    let non_root = match last_user {
        Some(user) => !matches!(user, "root" | "0"),
        None => runtime.contains(":nonroot"),
    };
    assert!(non_root, "the image must run as a non-root user");

    assert_eq!(all("STOPSIGNAL"), ["SIGTERM"]);
    let exposed: BTreeSet<&str> = all("EXPOSE")
        .iter()
        .flat_map(|e| e.split_whitespace())
        .collect();
    assert!(
        exposed.contains("8080") && exposed.contains("9090"),
        "EXPOSE {exposed:?}"
    );
    assert!(
        all("COPY")
            .iter()
            .any(|c| c.ends_with("conf/tether.toml /etc/tether/tether.toml")),
        "conf/tether.toml must be copied to /etc/tether/tether.toml"
    );

    let argv = image_entrypoint();
    assert!(argv[0].ends_with("/tether"), "ENTRYPOINT runs {}", argv[0]);
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    let cfg = config_from_args(&args);
    assert_eq!(cfg.listen.to_string(), format!("0.0.0.0:{PROXY_PORT}"));
    assert_eq!(cfg.admin.to_string(), format!("0.0.0.0:{ADMIN_PORT}"));

    let ignore = read(".dockerignore");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(|l| l.trim().trim_end_matches('/'))
        .collect();
    assert!(
        ignored.contains(&"target") && ignored.contains(&".git"),
        ".dockerignore must leave out target/ and .git"
    );
}

#[test]
fn the_systemd_unit_stops_with_sigterm_after_the_drain_it_configures() {
    let unit = read("deploy/tether.service");
    assert_eq!(unit_values(&unit, "KillSignal"), ["SIGTERM"]);
    assert_eq!(unit_values(&unit, "Type"), ["simple"]);
    assert_eq!(unit_values(&unit, "DynamicUser"), ["yes"]);
    assert_eq!(unit_values(&unit, "NoNewPrivileges"), ["yes"]);
    assert_eq!(unit_values(&unit, "Restart"), ["on-failure"]);
    // A reload is the SIGHUP that reads the listener's certificate again, never a restart.
    assert_eq!(
        unit_values(&unit, "ExecReload"),
        ["/bin/kill -HUP $MAINPID"]
    );

    let exec = unit_values(&unit, "ExecStart");
    assert_eq!(exec.len(), 1, "one ExecStart");
    let argv: Vec<&str> = exec[0].split_whitespace().collect();
    assert_eq!(argv[0], "/usr/local/bin/tether");
    let cfg = config_from_args(&argv[1..]);
    assert_eq!(
        cfg.upstream.map(|u| u.to_string()).as_deref(),
        Some("127.0.0.1:3000")
    );

    let stop = unit_values(&unit, "TimeoutStopSec");
    let stop = humantime::parse_duration(stop.first().expect("TimeoutStopSec is set"))
        .expect("TimeoutStopSec is a duration");
    let drain = cfg.server.drain_timeout.0;
    assert!(
        stop > drain,
        "TimeoutStopSec {stop:?} must exceed the drain timeout {drain:?}, or systemd kills \
         tether mid-drain"
    );
}
