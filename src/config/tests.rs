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
    assert_eq!(c.upstream.as_deref(), Some("127.0.0.1:9"));
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
    let c = Config::from_parts(File::default(), &f).unwrap();
    assert_eq!(c.subject, Subject::Authorization);
    assert_eq!(c.limits.abandon_after.0, Duration::from_secs(120));
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
