//! Tests of configuration parsing, precedence and validation.

use std::time::Duration;

use clap::Parser;

use super::*;

fn flags() -> Flags {
    Flags::parse_from(["tether"])
}

#[test]
fn defaults_carry_the_seed_routes() {
    let c = Config::load(&flags()).unwrap();
    assert_eq!(c.recorder.window, 4096);
    assert_eq!(c.routes.len(), 4);
    assert_eq!(c.routes[0].kind, RouteKind::Record);
    assert_eq!(c.subject, Subject::None);
    assert_eq!(c.routes[1].methods, ["POST", "GET"]);
    assert!(c.upstream.is_none());
}

#[test]
fn the_sample_file_parses_and_validates() {
    let text = include_str!("../../conf/tether.toml");
    let c = parse_file(text).unwrap().validate().unwrap();
    assert_eq!(c.routes.len(), 5);
    assert_eq!(c.recorder.retention.0, Duration::from_secs(300));
}

#[test]
fn flags_override_the_file() {
    let file = parse_file("[recorder]\nwindow = 10\nretention = \"1m\"\n").unwrap();
    let f = Flags::parse_from(["tether", "--window", "20", "--upstream", "127.0.0.1:9"]);
    let c = Config::from_parts(file, &f).unwrap();
    assert_eq!(c.recorder.window, 20);
    assert_eq!(c.recorder.retention.0, Duration::from_secs(60));
    assert_eq!(
        c.upstream.map(|u| u.to_string()).as_deref(),
        Some("127.0.0.1:9")
    );
}

#[test]
fn unknown_keys_and_bad_values_name_the_key() {
    let e = parse_file("[recorder]\nwindw = 10\n").unwrap_err();
    assert!(e.message.contains("windw"), "{e}");
    let e = parse_file("[recorder]\nwindow = 0\n")
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(e.key, "recorder.window");
    let e = parse_file("[server]\nheartbeat = \"soon\"\n").unwrap_err();
    assert!(e.message.contains("soon"), "{e}");
    let e = parse_file("[[routes]]\nmethods=[\"POST\"]\npath=\"chat\"\nkind=\"record\"\n")
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(e.key, "routes[0].path");
    let e = Flags::try_parse_from(["tether", "--retention", "forever"]).unwrap_err();
    assert!(e.to_string().contains("--retention"), "{e}");
    assert!(e.to_string().contains("forever"), "{e}");
    let e = Flags::try_parse_from(["tether", "--log-format", "xml"]).unwrap_err();
    assert!(e.to_string().contains("--log-format"), "{e}");
}

#[test]
fn buffer_limits_have_safe_defaults_flags_and_floors() {
    let c = FileConf::default().validate().unwrap();
    assert_eq!(c.limits.max_buffered_bytes, 256 << 20);
    assert_eq!(c.limits.max_client_buffer_bytes, 1 << 20);
    let f = Flags::parse_from([
        "tether",
        "--max-buffered-bytes",
        "33554432",
        "--max-client-buffer-bytes",
        "262144",
    ]);
    let c = Config::from_parts(FileConf::default(), &f).unwrap();
    assert_eq!(c.limits.max_buffered_bytes, 32 << 20);
    assert_eq!(c.limits.max_client_buffer_bytes, 256 << 10);
    let e = parse_file("[limits]\nmax_client_buffer_bytes = 1000\n")
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(e.key, "limits.max_client_buffer_bytes");
    // Below one event's cap, every large event would be dropped.
    let e = parse_file("[limits]\nmax_buffered_bytes = 1048576\n")
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(e.key, "limits.max_buffered_bytes");
}

#[test]
fn auth_subject_forms() {
    let c = parse_file("[auth]\nsubject = \"header:X-User\"\n")
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(c.subject, Subject::Header("x-user".into()));
    let c = parse_file("[auth]\nsubject = \"cookie:sid\"\n")
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(c.subject, Subject::Cookie("sid".into()));
    let e = parse_file("[auth]\nsubject = \"ip\"\n")
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(e.key, "auth.subject");
    let f = Flags::parse_from([
        "tether",
        "--auth-subject",
        "authorization",
        "--abandon-after",
        "2m",
    ]);
    let c = Config::from_parts(FileConf::default(), &f).unwrap();
    assert_eq!(c.subject, Subject::Authorization);
    assert_eq!(c.limits.abandon_after.0, Duration::from_secs(120));
}

/// Every replica must key tokens and owner hashes alike: a shared journal with a subject (from
/// the file or `--auth-subject`) and no configured secret is refused, naming `auth.secret`; a
/// secret in the file, or no subject, starts.
#[test]
fn a_shared_journal_with_a_subject_needs_a_configured_secret() {
    assert!(
        flags_secret().is_none(),
        "TETHER_AUTH_SECRET is set in the test environment"
    );
    let cfg = |toml: &str, args: &[&str]| {
        let f = Flags::parse_from(std::iter::once("tether").chain(args.iter().copied()));
        Config::from_parts(parse_file(toml).unwrap(), &f)
    };
    let journal = "[journal]\nurl = \"redis://r:6379\"\n";
    let subject = "[auth]\nsubject = \"header:X-User\"\n";
    let e = cfg(&format!("{journal}{subject}"), &[]).unwrap_err();
    assert_eq!(e.key, "auth.secret", "{e}");
    let e = cfg(journal, &["--auth-subject", "cookie:sid"]).unwrap_err();
    assert_eq!(e.key, "auth.secret", "{e}");
    let e = cfg(subject, &["--journal", "redis://r:6379"]).unwrap_err();
    assert_eq!(e.key, "auth.secret", "{e}");
    let c = cfg(&format!("{journal}{subject}secret = \"shared\"\n"), &[]).unwrap();
    assert_eq!(
        (c.secret.as_slice(), c.secret_configured),
        (&b"shared"[..], true)
    );
    let c = cfg(journal, &[]).unwrap();
    assert_eq!(c.subject, Subject::None);
    assert!(!c.secret_configured);
    let c = cfg(subject, &[]).unwrap();
    assert!(
        c.journal.is_none() && !c.secret_configured,
        "no journal: a random secret"
    );
}

#[test]
fn commit_and_chat_id_forms() {
    let text = "[[routes]]\nmethods=[\"post\"]\npath=\"/x\"\nkind=\"record\"\nchat_id=\"header:X-Chat\"\ncommit=\"event:CUSTOM:persisted\"\n";
    let c = parse_file(text).unwrap().validate().unwrap();
    assert_eq!(c.routes[0].chat_id, KeySource::Header("x-chat".into()));
    assert_eq!(
        c.routes[0].commit,
        Commit::Event {
            ty: "CUSTOM".into(),
            name: Some("persisted".into())
        }
    );
    assert_eq!(c.routes[0].methods, ["POST"]);
}

#[test]
fn prefixed_settings_share_one_grammar_in_file_and_flags() {
    assert_eq!("query:c".parse(), Ok(KeySource::Query("c".into())));
    assert!("form:c".parse::<KeySource>().is_err());
    assert_eq!(
        "event:CUSTOM".parse(),
        Ok(Commit::Event {
            ty: "CUSTOM".into(),
            name: None
        })
    );
    assert!("event:".parse::<Commit>().is_err());
    assert!("event:A:".parse::<Commit>().is_err());
    let f = Flags::try_parse_from(["tether", "--auth-subject", "cookie:sid"]).unwrap();
    assert_eq!(f.auth_subject, Some(Subject::Cookie("sid".into())));
    assert!(Flags::try_parse_from(["tether", "--auth-subject", "ip"]).is_err());
    let f = Flags::try_parse_from(["tether", "--demo-pace", "1h 30m"]).unwrap();
    assert_eq!(f.demo_pace, Duration::from_secs(5400));
}

#[test]
fn the_browser_client_is_served_in_demo_mode_unless_told_otherwise() {
    let load = |toml: &str, args: &[&str]| {
        let argv = std::iter::once("tether").chain(args.iter().copied());
        Config::from_parts(parse_file(toml).unwrap(), &Flags::parse_from(argv))
            .unwrap()
            .serve_client
    };
    let up = ["--upstream", "127.0.0.1:9"];
    assert!(load("", &[]), "demo mode: on by default");
    assert!(!load("", &up), "in front of a backend: off by default");
    assert!(load("[server]\nserve_client = true\n", &up));
    assert!(!load("[server]\nserve_client = false\n", &[]));
    assert!(load("", &["--serve-client", "--upstream", "127.0.0.1:9"]));
    assert!(!load("", &["--serve-client=false"]));
    assert!(!load(
        "[server]\nserve_client = true\n",
        &["--serve-client", "no"]
    ));
    let e = Flags::try_parse_from(["tether", "--serve-client=maybe"]).unwrap_err();
    assert!(e.to_string().contains("--serve-client"), "{e}");
}

fn route(methods: &[&str], path: &str, kind: &str, chat_id: &str) -> String {
    format!("[[routes]]\nmethods={methods:?}\npath={path:?}\nkind={kind:?}\nchat_id={chat_id:?}\n")
}

fn routes(text: &str) -> Result<Vec<Route>, ConfigError> {
    Ok(parse_file(text)?.validate()?.routes)
}

#[test]
fn path_patterns_capture_segments_and_a_trailing_catch_all() {
    let p = RoutePath::parse("/api/sessions/{session_id}/runs/{run_id}/resume").unwrap();
    assert_eq!(p.captures(), ["session_id", "run_id"]);
    assert_eq!(
        p.matches("/api/sessions/s%201/runs/r9/resume").unwrap(),
        [
            ("session_id".to_string(), "s%201".to_string()),
            ("run_id".to_string(), "r9".to_string())
        ],
        "captures stay raw; a key source decodes the one it reads"
    );
    assert!(p.matches("/api/sessions/s/runs/r/resume/").is_none());
    assert!(p.matches("/api/sessions/s/runs//resume").is_none());
    let files = RoutePath::parse("/files/{*rest}").unwrap();
    assert_eq!(
        files.matches("/files/a/b.txt").unwrap(),
        [("rest".to_string(), "a/b.txt".to_string())]
    );
    assert!(
        files.matches("/files/").is_none(),
        "a catch-all is never empty"
    );
    assert!(files.matches("/filesx/a").is_none());
    // An exact path is compared as is, and `{{`/`}}` are literal braces.
    let exact = RoutePath::parse("/chat").unwrap();
    assert!(exact.captures().is_empty());
    assert_eq!(exact.matches("/chat"), Some(vec![]));
    assert!(exact.matches("/chat/").is_none());
    let lit = RoutePath::parse("/t/{{x}}/{id}").unwrap();
    assert_eq!(lit.captures(), ["id"]);
    assert!(lit.matches("/t/{x}/7").is_some());
    for bad in [
        "/files/{*rest}/more",
        "/a/{}",
        "/a/{id",
        "/a/id}",
        "/a/{x}/{x}",
        "/a/{x}{y}",
        "/a/{*}",
        "api/{id}",
    ] {
        assert!(RoutePath::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_first_route_in_file_order_wins_whatever_is_more_specific() {
    let text = route(&["POST"], "/api/chat/{id}", "record", "path:id")
        + &route(&["POST"], "/api/chat/stop", "stop", "body:chat_id")
        + &route(&["GET"], "/api/chat/{id}", "status", "path:id")
        + &route(&["GET", "POST"], "/{*rest}", "passthrough", "body:chat_id");
    let rs = routes(&text).unwrap();
    let kind = |m: &str, p: &str| match_route(&rs, m, p).map(|(r, _)| r.kind);
    // matchit alone would prefer the static `/api/chat/stop`; file order says the record route.
    assert_eq!(kind("POST", "/api/chat/stop"), Some(RouteKind::Record));
    assert_eq!(kind("GET", "/api/chat/c1"), Some(RouteKind::Status));
    assert_eq!(kind("GET", "/other/x"), Some(RouteKind::Passthrough));
    assert_eq!(kind("DELETE", "/api/chat/c1"), None);
    let (_, captures) = match_route(&rs, "POST", "/api/chat/c%2F1").unwrap();
    assert_eq!(captures, [("id".to_string(), "c%2F1".to_string())]);
}

#[test]
fn key_sources_are_checked_against_their_route() {
    let e = routes(&route(&["POST"], "/api/chat/{id}", "record", "path:chat")).unwrap_err();
    assert_eq!(e.key, "routes[0].chat_id");
    assert!(e.message.contains("path:chat"), "{e}");
    let e = routes(&route(&["POST"], "/chat", "record", "path:id")).unwrap_err();
    assert_eq!(e.key, "routes[0].chat_id");
    let text = route(&["POST"], "/x", "record", "body:chat_id")
        + &route(&["GET"], "/run", "status", "json:/id");
    assert_eq!(routes(&text).unwrap_err().key, "routes[1].chat_id");
    let e = routes(&route(&["GET", "POST"], "/l", "attach", "json:/a/b")).unwrap_err();
    assert_eq!(e.key, "routes[0].chat_id");
    assert!(routes(&route(&["POST"], "/l", "attach", "json:/a/b")).is_ok());
    assert!(routes(&route(&["GET"], "/run", "status", "body:conversation")).is_ok());
    for bad in [
        "json:a",
        "json:/a~2",
        "json:/a~",
        "header:bad name",
        "form:x",
        "path:",
    ] {
        let e = routes(&route(&["POST"], "/x", "record", bad)).unwrap_err();
        assert_eq!(e.key, "routes[0].chat_id", "{bad}");
    }
    let e = routes(&route(&["POST"], "/x/{*a}/b", "record", "body:chat_id")).unwrap_err();
    assert_eq!(e.key, "routes[0].path");
}

#[test]
fn key_source_forms() {
    assert_eq!("body:a/b~".parse(), Ok(KeySource::body("a/b~")));
    assert_eq!(
        KeySource::body("a/b~"),
        KeySource::Json {
            pointer: "/a~1b~0".into(),
            field: Some("a/b~".into())
        }
    );
    assert_eq!(
        "json:/target/run_id".parse(),
        Ok(KeySource::Json {
            pointer: "/target/run_id".into(),
            field: None
        })
    );
    assert_eq!("path:id".parse(), Ok(KeySource::Path("id".into())));
    assert_eq!("cookie:sid".parse(), Ok(KeySource::Cookie("sid".into())));
    assert_eq!(
        "header:X-Chat".parse(),
        Ok(KeySource::Header("x-chat".into()))
    );
}

fn routes_err(toml: &str) -> ConfigError {
    parse_file(toml).unwrap().validate().unwrap_err()
}

#[test]
fn a_resume_route_reads_its_dialect_and_turns_the_raw_record_on() {
    let c = parse_file(
        r#"
[recorder]
max_raw_bytes_per_run = 4096
[[routes]]
methods = ["POST"]
path = "/v1/responses"
kind = "record"
aliases = ["event:/response/id", "request:header:x-req", "header:x-run"]
[[routes]]
methods = ["GET"]
path = "/v1/responses/{id}"
kind = "resume"
dialect = "json_cursor"
run = "path:id"
cursor = "query:starting_after"
cursor_field = "/sequence_number"
only_if = "query:stream=true"
expired = "openai"
"#,
    )
    .unwrap()
    .validate()
    .unwrap();
    assert_eq!(
        c.raw,
        Some(RawRecord {
            cap: 4096,
            cursor_field: Some("/sequence_number".into())
        })
    );
    assert_eq!(c.routes[0].aliases.len(), 3);
    let r = c.routes[1].resume.as_ref().unwrap();
    assert_eq!(
        (r.dialect, r.expired),
        (DialectKind::JsonCursor, Expired::Openai)
    );
    assert_eq!(r.only_if.as_ref().unwrap().value, "true");
    // Without a verbatim route, no raw record.
    assert_eq!(Config::load(&flags()).unwrap().raw, None);
}

#[test]
fn dialect_mistakes_name_their_key() {
    let resume = |extra: &str| {
        format!("[[routes]]\nmethods = [\"GET\"]\npath = \"/r/{{id}}\"\nkind = \"resume\"\nrun = \"path:id\"\n{extra}")
    };
    assert_eq!(routes_err(&resume("")).key, "routes[0].dialect");
    assert_eq!(
        routes_err(&resume("dialect = \"nope\"")).key,
        "routes[0].dialect"
    );
    assert_eq!(
        routes_err(&resume("dialect = \"json_cursor\"\ncursor = \"query:c\"")).key,
        "routes[0].cursor_field"
    );
    assert_eq!(
        routes_err(&resume("dialect = \"from_start\"\ncursor = \"query:c\"")).key,
        "routes[0].cursor"
    );
    assert_eq!(
        routes_err(&resume("dialect = \"last_event_id\"\nonly_if = \"stream\"")).key,
        "routes[0].only_if"
    );
    assert_eq!(
        routes_err(&resume(
            "dialect = \"durable_streams\"\ncursor = \"query:offset\""
        ))
        .key,
        "routes[0].cursor"
    );
    for ids in ["inject", "unique"] {
        let record = format!(
            "[[routes]]\nmethods = [\"POST\"]\npath = \"/c\"\nkind = \"stop\"\nids = \"{ids}\"\n"
        );
        assert_eq!(routes_err(&record).key, "routes[0].ids");
    }
    let alias = "[[routes]]\nmethods = [\"POST\"]\npath = \"/c\"\nkind = \"record\"\naliases = [\"body\"]\n";
    assert_eq!(routes_err(alias).key, "routes[0].aliases");
}

#[test]
fn every_profile_parses_and_validates() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/profiles");
    let mut names = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap();
        let parsed = parse_file(&text).and_then(FileConf::validate);
        assert!(parsed.is_ok(), "{}: {:?}", e.path().display(), parsed.err());
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    assert_eq!(
        names,
        [
            "ai-sdk.toml",
            "durable-streams.toml",
            "eventsource.toml",
            "igraph-v2.toml",
            "langgraph.toml",
            "native.toml",
            "openai-responses.toml",
            "preview-agents.toml",
            "workflows.toml"
        ]
    );
}

#[test]
fn the_durable_streams_profile_reads_the_window_and_keeps_no_raw_record() {
    let text = include_str!("../../conf/profiles/durable-streams.toml");
    let c = parse_file(text).unwrap().validate().unwrap();
    let dialects: Vec<_> = c
        .routes
        .iter()
        .filter_map(|r| r.resume.as_ref().map(|x| x.dialect))
        .collect();
    assert_eq!(
        dialects,
        [DialectKind::DurableStreams, DialectKind::DurableStreams]
    );
    assert_eq!(c.raw, None);
}

#[test]
fn the_langgraph_profile_makes_its_ids_unique_and_so_keeps_the_raw_record() {
    let text = include_str!("../../conf/profiles/langgraph.toml");
    let c = parse_file(text).unwrap().validate().unwrap();
    assert_eq!(c.routes[0].ids, Ids::Unique);
    // Unique ids alone keep the raw record: the requester reads it.
    let only =
        "[[routes]]\nmethods = [\"POST\"]\npath = \"/c\"\nkind = \"record\"\nids = \"unique\"\n";
    let c = parse_file(only).unwrap().validate().unwrap();
    assert!(c.raw.is_some());
}

#[test]
fn the_journal_names_one_server_or_a_clusters_seed_nodes() {
    let journal = |toml: &str| parse_file(toml).unwrap().validate().map(|c| c.journal);
    let one = journal("[journal]\nurl = \"redis://r:6379/2\"\n")
        .unwrap()
        .unwrap();
    assert_eq!(
        (one.cluster, one.nodes),
        (false, vec!["redis://r:6379/2".to_string()])
    );
    let seeds = "url = \"redis://a:7000, redis://b:7000\"\n";
    let c = journal(&format!("[journal]\ncluster = true\n{seeds}"))
        .unwrap()
        .unwrap();
    assert!(c.cluster);
    assert_eq!(c.nodes, ["redis://a:7000", "redis://b:7000"]);
    let e = journal(&format!("[journal]\n{seeds}")).unwrap_err();
    assert!(
        e.key == "journal.url" && e.message.contains("cluster = true"),
        "{e}"
    );
    let e = journal("[journal]\ncluster = true\nurl = \"redis://a:7000/3\"\n").unwrap_err();
    assert!(e.message.contains("database 0"), "{e}");
    let e = journal("[journal]\ncluster = true\nurl = \"redis://a,rediss://b\"\n").unwrap_err();
    assert!(e.message.contains("TLS"), "{e}");
    let c = journal(
        "[journal]\ncluster = true\nurl = \"rediss://a:1,rediss://b:2\"\nca = \"/ca.pem\"\n",
    )
    .unwrap()
    .unwrap();
    let tls = c.tls.expect("a TLS journal");
    assert_eq!(tls.ca.as_deref(), Some(std::path::Path::new("/ca.pem")));
    assert!(tls.client.is_none());
    for (toml, key) in [
        (
            "[journal]\nurl = \"redis://a:1\"\nca = \"/ca.pem\"\n",
            "journal.ca",
        ),
        (
            "[journal]\nurl = \"rediss://a:1\"\ncert = \"/c.pem\"\n",
            "journal.key",
        ),
    ] {
        assert_eq!(journal(toml).unwrap_err().key, key, "{toml}");
    }
    let f = Flags::parse_from([
        "tether",
        "--journal",
        "rediss://r:6380",
        "--journal-cert",
        "/c.pem",
        "--journal-key",
        "/k.pem",
    ]);
    let c = Config::from_parts(FileConf::default(), &f)
        .unwrap()
        .journal
        .unwrap();
    assert_eq!(
        c.tls.unwrap().client,
        Some(("/c.pem".into(), "/k.pem".into()))
    );
    let f = Flags::parse_from(["tether", "--journal", "redis://a:7000", "--journal-cluster"]);
    let c = Config::from_parts(FileConf::default(), &f)
        .unwrap()
        .journal
        .unwrap();
    assert!(c.cluster);
}

#[test]
fn a_bad_upstream_names_the_flag_or_the_key_it_came_from() {
    for bad in ["host:99999", "host:0", "host:", ":80", "host:http", "host"] {
        let f = Flags::parse_from(["tether", "--upstream", bad]);
        let e = Config::from_parts(FileConf::default(), &f).unwrap_err();
        assert_eq!(e.key, "--upstream", "{bad}: {e}");
        assert!(e.message.contains(bad), "{bad}: {e}");
        let file = parse_file(&format!("[server]\nupstream = \"{bad}\"\n")).unwrap();
        let e = Config::from_parts(file, &flags()).unwrap_err();
        assert_eq!(e.key, "server.upstream", "{bad}: {e}");
    }
    for good in [
        "127.0.0.1:9",
        "http://backend:3000/",
        "[::1]:80",
        "localhost:65535",
    ] {
        let f = Flags::parse_from(["tether", "--upstream", good]);
        assert!(
            Config::from_parts(FileConf::default(), &f).is_ok(),
            "{good}"
        );
    }
    // A host name is looked up at start, not while the file is checked.
    let f = Flags::parse_from(["tether", "--upstream", "nosuchhost.invalid:80"]);
    let c = Config::from_parts(FileConf::default(), &f).unwrap();
    let e = c.resolve_upstream(&f).unwrap_err();
    assert_eq!(e.key, "--upstream");
    assert!(e.message.contains("nosuchhost.invalid:80"), "{e}");
    let f = Flags::parse_from(["tether", "--upstream", "127.0.0.1:9"]);
    let c = Config::from_parts(FileConf::default(), &f).unwrap();
    assert_eq!(
        c.resolve_upstream(&f).unwrap(),
        Some("127.0.0.1:9".parse().unwrap())
    );
    assert_eq!(
        Config::load(&flags())
            .unwrap()
            .resolve_upstream(&flags())
            .unwrap(),
        None
    );
}

#[test]
fn client_connection_limits_have_defaults_flags_and_checks() {
    let c = Config::load(&flags()).unwrap();
    assert_eq!(c.server.header_timeout.0, Duration::from_secs(10));
    assert_eq!(c.server.keepalive_timeout.0, Duration::from_secs(60));
    assert_eq!(c.server.max_connections, None);
    let file = parse_file("[server]\nheader_timeout = \"2s\"\nmax_connections = 5\n").unwrap();
    let f = Flags::parse_from([
        "tether",
        "--keepalive-timeout",
        "3s",
        "--max-connections",
        "7",
    ]);
    let c = Config::from_parts(file, &f).unwrap();
    assert_eq!(c.server.header_timeout.0, Duration::from_secs(2));
    assert_eq!(c.server.keepalive_timeout.0, Duration::from_secs(3));
    assert_eq!(c.server.max_connections, Some(7));
    for (toml, key) in [
        (
            "[server]\nheader_timeout = \"0s\"\n",
            "server.header_timeout",
        ),
        (
            "[server]\nkeepalive_timeout = \"0s\"\n",
            "server.keepalive_timeout",
        ),
        ("[server]\nmax_connections = 0\n", "server.max_connections"),
    ] {
        let e = parse_file(toml).unwrap().validate().unwrap_err();
        assert_eq!(e.key, key);
    }
}

#[test]
fn body_stream_and_backend_request_limits_have_defaults_flags_variables_and_checks() {
    let c = FileConf::default().validate().unwrap();
    assert_eq!(c.server.body_timeout.0, Duration::from_secs(60));
    assert_eq!(c.server.max_streams_per_connection, 100);
    assert_eq!(c.upstream_opts.max_requests, None);
    let file = parse_file(
        "[server]\nbody_timeout = \"5s\"\nmax_streams_per_connection = 8\n\
         [upstream]\nmax_requests = 50\n",
    )
    .unwrap();
    let c = Config::from_parts(file.clone(), &flags()).unwrap();
    assert_eq!(c.server.body_timeout.0, Duration::from_secs(5));
    assert_eq!(c.server.max_streams_per_connection, 8);
    assert_eq!(c.upstream_opts.max_requests, Some(50));
    let f = Flags::parse_from([
        "tether",
        "--body-timeout",
        "2s",
        "--max-streams-per-connection",
        "4",
        "--upstream-max-requests",
        "9",
    ]);
    let c = Config::from_parts(file, &f).unwrap();
    assert_eq!(c.server.body_timeout.0, Duration::from_secs(2));
    assert_eq!(c.server.max_streams_per_connection, 4);
    assert_eq!(c.upstream_opts.max_requests, Some(9));
    let cmd = <Flags as clap::CommandFactory>::command();
    for (flag, var) in [
        ("body_timeout", "TETHER_BODY_TIMEOUT"),
        (
            "max_streams_per_connection",
            "TETHER_MAX_STREAMS_PER_CONNECTION",
        ),
        ("upstream_max_requests", "TETHER_UPSTREAM_MAX_REQUESTS"),
    ] {
        let arg = cmd.get_arguments().find(|a| a.get_id() == flag).unwrap();
        assert_eq!(arg.get_env().and_then(|v| v.to_str()), Some(var));
    }
    for (toml, key) in [
        ("[server]\nbody_timeout = \"0s\"\n", "server.body_timeout"),
        (
            "[server]\nmax_streams_per_connection = 0\n",
            "server.max_streams_per_connection",
        ),
        ("[upstream]\nmax_requests = 0\n", "upstream.max_requests"),
    ] {
        let e = parse_file(toml).unwrap().validate().unwrap_err();
        assert_eq!(e.key, key);
    }
    let e = Flags::try_parse_from(["tether", "--max-streams-per-connection", "lots"]).unwrap_err();
    assert!(
        e.to_string().contains("--max-streams-per-connection"),
        "{e}"
    );
}

#[test]
fn an_https_backend_takes_its_ca_and_client_certificate_and_a_plain_one_refuses_them() {
    let f = Flags::parse_from([
        "tether",
        "--upstream",
        "https://api.example.com",
        "--upstream-ca",
        "/ca.pem",
        "--upstream-cert",
        "/c.pem",
        "--upstream-key",
        "/k.pem",
    ]);
    let c = Config::from_parts(FileConf::default(), &f).unwrap();
    let u = c.upstream.unwrap();
    assert!(u.tls && u.port == 443 && u.host == "api.example.com");
    assert_eq!(
        c.upstream_opts.ca.as_deref(),
        Some(std::path::Path::new("/ca.pem"))
    );
    let file = parse_file("[upstream]\nurl = \"https://b:8443\"\nca = \"/ca.pem\"\n").unwrap();
    let c = Config::from_parts(file, &flags()).unwrap();
    assert_eq!(c.upstream.unwrap().to_string(), "https://b:8443");
    for (toml, key) in [
        (
            "[upstream]\nurl = \"b:80\"\nca = \"/ca.pem\"\n",
            "upstream.ca",
        ),
        (
            "[upstream]\nurl = \"https://b\"\ncert = \"/c.pem\"\n",
            "upstream.key",
        ),
        (
            "[upstream]\nurl = \"https://b\"\nkey = \"/k.pem\"\n",
            "upstream.cert",
        ),
        (
            "[server]\nupstream = \"a:1\"\n[upstream]\nurl = \"b:2\"\n",
            "upstream.url",
        ),
        ("[upstream]\nurl = \"https://b/v1\"\n", "upstream.url"),
    ] {
        let e = Config::from_parts(parse_file(toml).unwrap(), &flags()).unwrap_err();
        assert_eq!(e.key, key, "{toml}: {e}");
    }
    // The flag names the backend even when the file does, in either key.
    let file = parse_file("[upstream]\nurl = \"b:2\"\n").unwrap();
    let f = Flags::parse_from(["tether", "--upstream", "c:3"]);
    assert_eq!(
        Config::from_parts(file, &f).unwrap().upstream.unwrap().port,
        3
    );
}

#[test]
fn a_record_route_reads_the_idempotency_key_from_its_header_unless_told_otherwise() {
    let r = routes(&route(&["POST"], "/chat", "record", "body:chat_id")).unwrap();
    assert_eq!(
        r[0].idempotency_key,
        Some(KeySource::Header("idempotency-key".into()))
    );
    let off = format!(
        "{}idempotency_key = \"\"\n",
        route(&["POST"], "/chat", "record", "body:chat_id")
    );
    assert_eq!(routes(&off).unwrap()[0].idempotency_key, None);
    let attach = format!(
        "{}idempotency_key = \"header:X-Key\"\n",
        route(&["POST"], "/chat/live", "attach", "body:chat_id")
    );
    let e = routes(&attach).unwrap_err();
    assert!(e.key.ends_with("idempotency_key"), "{e}");
    let attach_default = routes(&route(&["POST"], "/chat/live", "attach", "body:chat_id")).unwrap();
    assert_eq!(attach_default[0].idempotency_key, None);
}

fn usage_route(format: &str, kind: &str, usage: &str) -> String {
    format!(
        "[[routes]]\nmethods = [\"POST\"]\npath = \"/c\"\nkind = \"{kind}\"\nformat = \"{format}\"\nusage = {usage}\n"
    )
}

#[test]
fn a_route_reads_agui_or_ai_sdk_usage_at_the_pointers_it_names() {
    let text = usage_route(
        "agui",
        "record",
        r#"{ event = "CUSTOM:usage", input_tokens = "/value/input", output_tokens = "/value/output", model = "/value/model" }"#,
    );
    let r = &routes(&text).unwrap()[0];
    let u = r.usage.as_deref().unwrap();
    assert_eq!(
        (u.ty.as_str(), u.name.as_deref()),
        ("CUSTOM", Some("usage"))
    );
    assert_eq!(u.input_tokens.as_deref(), Some("/value/input"));
    assert_eq!(u.cached_input_tokens, None);
    let text = usage_route(
        "auto",
        "record",
        r#"{ event = "finish", output_tokens = "/messageMetadata/usage/outputTokens" }"#,
    );
    let u = routes(&text).unwrap()[0].usage.clone().unwrap();
    assert_eq!((u.ty.as_str(), u.name.as_deref()), ("finish", None));
    // Off unless set.
    assert!(
        routes(&route(&["POST"], "/c", "record", "body:chat_id")).unwrap()[0]
            .usage
            .is_none()
    );
}

#[test]
fn usage_mistakes_name_their_key() {
    let ok = r#"{ event = "CUSTOM:usage", input_tokens = "/value/input" }"#;
    let e = routes_err(&usage_route("anthropic", "record", ok));
    assert_eq!(e.key, "routes[0].usage");
    assert!(e.message.contains("anthropic reports usage"), "{e}");
    assert_eq!(
        routes_err(&usage_route("agui", "stop", ok)).key,
        "routes[0].usage"
    );
    assert_eq!(
        routes_err(&usage_route(
            "agui",
            "record",
            r#"{ event = "CUSTOM:" , model = "/m" }"#
        ))
        .key,
        "routes[0].usage.event"
    );
    assert_eq!(
        routes_err(&usage_route("agui", "record", r#"{ event = "CUSTOM" }"#)).key,
        "routes[0].usage"
    );
    assert_eq!(
        routes_err(&usage_route(
            "agui",
            "record",
            r#"{ event = "X", output_tokens = "value" }"#
        ))
        .key,
        "routes[0].usage.output_tokens"
    );
    // Unknown keys are refused when the file is read.
    let e = parse_file(&usage_route(
        "agui",
        "record",
        r#"{ event = "X", tokens = "/t" }"#,
    ))
    .unwrap_err();
    assert!(e.message.contains("tokens"), "{e}");
}

#[test]
fn accounting_is_off_by_default_and_checks_its_urls() {
    let c = Config::load(&flags()).unwrap();
    assert_eq!(c.accounting, AccountingSettings::default());
    let text = "[accounting]\nwebhook_url = \"http://127.0.0.1:9/runs\"\nwebhook_queue = 8\notlp_endpoint = \"http://collector:4318/\"\n";
    let c = parse_file(text).unwrap().validate().unwrap();
    let w = c.accounting.webhook.unwrap();
    assert_eq!((w.url.as_str(), w.queue), ("http://127.0.0.1:9/runs", 8));
    assert_eq!(w.timeout, Duration::from_secs(10));
    assert_eq!(
        c.accounting.otlp_traces.as_deref(),
        Some("http://collector:4318/v1/traces")
    );
    for (toml, key) in [
        ("webhook_url = \"ftp://x/\"", "accounting.webhook_url"),
        ("webhook_url = \"/runs\"", "accounting.webhook_url"),
        (
            "webhook_url = \"http://x/\"\nwebhook_queue = 0",
            "accounting.webhook_queue",
        ),
        (
            "otlp_endpoint = \"collector:4318\"",
            "accounting.otlp_endpoint",
        ),
    ] {
        let e = parse_file(&format!("[accounting]\n{toml}\n"))
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(e.key, key, "{toml}");
    }
}

#[test]
fn the_otlp_flag_wins_over_the_otel_variable_which_wins_over_the_file() {
    let file = || parse_file("[accounting]\notlp_endpoint = \"http://file:4318\"\n").unwrap();
    let f = Flags::parse_from(["tether", "--otlp-endpoint", "https://flag:4318"]);
    assert_eq!(
        otlp_flag(&f, Some("http://env:4318".into())),
        Some(("--otlp-endpoint", "https://flag:4318".into()))
    );
    let c = Config::from_parts(file(), &f).unwrap();
    assert_eq!(
        c.accounting.otlp_traces.as_deref(),
        Some("https://flag:4318/v1/traces")
    );
    let none = flags();
    assert_eq!(
        otlp_flag(&none, Some("http://env:4318".into())),
        Some((OTEL_ENDPOINT, "http://env:4318".into()))
    );
    assert_eq!(otlp_flag(&none, Some(" ".into())), None);
    assert_eq!(otlp_flag(&none, None), None);
    // A bad value names the flag that set it.
    let bad = Flags::parse_from(["tether", "--otlp-endpoint", "nope"]);
    assert_eq!(
        Config::from_parts(file(), &bad).unwrap_err().key,
        "--otlp-endpoint"
    );
}

#[test]
fn the_sample_files_commented_usage_table_parses_when_uncommented() {
    let text = include_str!("../../conf/tether.toml");
    let at = text.find("# [routes.usage]").unwrap();
    let table: String = text[at..]
        .lines()
        .take_while(|l| l.starts_with("# "))
        .map(|l| format!("{}\n", &l[2..]))
        .collect();
    let toml = format!(
        "{}{table}",
        route(&["POST"], "/c", "record", "body:chat_id")
    );
    let u = routes(&toml).unwrap()[0].usage.clone().unwrap();
    assert_eq!(
        (u.ty.as_str(), u.name.as_deref()),
        ("CUSTOM", Some("usage"))
    );
    assert_eq!(u.pointers().count(), 5);
}

#[test]
fn the_journal_flush_delay_comes_from_the_file_or_its_flag_and_is_bounded() {
    let journal = |toml: &str| parse_file(toml).unwrap().validate().map(|c| c.journal);
    let url = "[journal]\nurl = \"redis://r:6379\"\n";
    let d = |toml: &str| journal(toml).unwrap().unwrap().flush_delay;
    assert_eq!(d(url), Duration::from_micros(file::FLUSH_DELAY_US));
    assert_eq!(d(&format!("{url}flush_delay = \"0s\"\n")), Duration::ZERO);
    let e = journal(&format!("{url}flush_delay = \"11ms\"\n")).unwrap_err();
    assert_eq!(e.key, "journal.flush_delay", "{e}");
    let f = Flags::parse_from([
        "tether",
        "--journal",
        "redis://r:6379",
        "--journal-flush-delay",
        "500us",
    ]);
    let c = Config::from_parts(FileConf::default(), &f).unwrap();
    let j = c.journal.expect("a journal");
    assert_eq!(j.flush_delay, Duration::from_micros(500));
}
