//! HTTPS backends: a CA and certificates made by the test, a TLS front on loopback before a
//! scripted backend, and tether in front with `[upstream] url = "https://localhost:<port>"`.
//! A turn is recorded over TLS, its connection goes back to the pool and carries the next turn
//! (one handshake for two turns), `Host` is the backend's own name, a pass-through request goes
//! over TLS too, a backend whose certificate the configured CA did not sign is `502
//! upstream_unreachable` counted as `kind="tls"`, and a backend asking for a client certificate
//! gets the configured one (mTLS).
//!
//! One thread, as in `keepalive`: the pool's counts are exact there.

use std::sync::atomic::Ordering;

use crate::support::*;

/// tether in front of `front`, trusting `ca`, with an optional client certificate.
async fn tether_for(front: &TlsFront, ca: &TestCa, client: Option<&Issued>) -> Sidecar {
    let mut toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[upstream]\nurl = \"{}\"\nca = \"{}\"\n",
        front.url(),
        toml_path(&ca.pem)
    );
    if let Some(c) = client {
        toml.push_str(&format!(
            "cert = \"{}\"\nkey = \"{}\"\n",
            toml_path(&c.cert_pem),
            toml_path(&c.key_pem)
        ));
    }
    sidecar_from(&toml).await
}

async fn turn_to_end(tether: &Sidecar, chat_id: &str) -> Vec<Frame> {
    let frames = post(tether.addr, "/chat", &chat(chat_id))
        .await
        .frames_to_end()
        .await;
    let shared = tether.handle().shared.clone();
    eventually("the producer ended", || shared.producers.is_empty()).await;
    frames
}

#[tokio::test]
async fn a_turn_is_recorded_from_an_https_backend_and_its_connection_carries_the_next() {
    let events = turn(5);
    let be = turn_backend(events.clone(), None).await;
    let ca = TestCa::new("https-backend");
    let server = ca.issue("backend", &["localhost"]);
    let front = TlsFront::start(be.addr, &server, None).await;
    let tether = tether_for(&front, &ca, None).await;
    for chat_id in ["a", "b"] {
        let frames = turn_to_end(&tether, chat_id).await;
        assert_eq!(frames.last().unwrap().json["persisted"], true, "{chat_id}");
        let mut state = Reduced::default();
        state.apply_frames(&frames, 0);
        assert_eq!(state, Reduced::of(&events), "{chat_id}");
    }
    assert_eq!(be.requests.lock().len(), 2);
    assert_eq!(
        front.handshakes(),
        1,
        "the pooled TLS connection carried the second turn"
    );
    assert_eq!(be.accepted.load(Ordering::SeqCst), 1);
    let host = format!("localhost:{}", front.addr.port());
    for r in be.requests.lock().iter() {
        assert_eq!(
            r.header("host"),
            Some(host.as_str()),
            "Host is the backend's name"
        );
    }
}

#[tokio::test]
async fn a_pass_through_request_goes_to_the_https_backend_with_its_host() {
    let be = backend(|_| fixed_answer(200, "text/plain", "hello over tls")).await;
    let ca = TestCa::new("https-pass");
    let server = ca.issue("backend", &["localhost"]);
    let front = TlsFront::start(be.addr, &server, None).await;
    let tether = tether_for(&front, &ca, None).await;
    let mut resp = request(tether.addr, "GET", "/other", &[], b"").await;
    let body = resp.body_to_end().await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(&body[..], b"hello over tls");
    let host = format!("localhost:{}", front.addr.port());
    assert_eq!(be.requests.lock()[0].header("host"), Some(host.as_str()));
}

#[tokio::test]
async fn a_backend_certificate_the_ca_did_not_sign_is_refused_as_tls() {
    let be = turn_backend(turn(3), None).await;
    let ours = TestCa::new("trusted");
    let theirs = TestCa::new("stranger");
    let server = theirs.issue("backend", &["localhost"]);
    let front = TlsFront::start(be.addr, &server, None).await;
    let tether = tether_for(&front, &ours, None).await;
    let mut resp = post(tether.addr, "/chat", &chat("c")).await;
    assert_eq!(resp.status, 502);
    let body: serde_json::Value = serde_json::from_slice(&resp.body_to_end().await).unwrap();
    assert_eq!(body["error"], "upstream_unreachable");
    assert_eq!(
        tether
            .metric("tether_upstream_errors_total{kind=\"tls\"}")
            .await,
        1.0
    );
    assert!(be.requests.lock().is_empty(), "nothing reached the backend");
}

#[tokio::test]
async fn a_backend_that_asks_for_a_client_certificate_gets_the_configured_one() {
    let events = turn(3);
    let be = turn_backend(events.clone(), None).await;
    let ca = TestCa::new("mtls");
    let server = ca.issue("backend", &["localhost"]);
    let client = ca.issue("client", &["tether.test"]);
    let front = TlsFront::start(be.addr, &server, Some(&ca)).await;

    // Without a client certificate the handshake fails: 502, counted as tls.
    let plain = tether_for(&front, &ca, None).await;
    let resp = post(plain.addr, "/chat", &chat("c")).await;
    assert_eq!(resp.status, 502);
    assert_eq!(
        plain
            .metric("tether_upstream_errors_total{kind=\"tls\"}")
            .await,
        1.0
    );
    assert!(be.requests.lock().is_empty());

    let with_cert = tether_for(&front, &ca, Some(&client)).await;
    let frames = turn_to_end(&with_cert, "c").await;
    assert_eq!(frames.last().unwrap().json["persisted"], true);
    assert_eq!(be.requests.lock().len(), 1);
}
