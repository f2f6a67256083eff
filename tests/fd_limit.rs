//! Out of file descriptors: a new turn whose backend connection finds none left waits for one
//! to free and then streams, instead of failing with 502; and under a low open-files limit,
//! HTTP/2 clients opening as many streams as they may cannot take the descriptors that other
//! clients' accepts and the admin listener need. Alone in its own test binary, because it
//! lowers the whole process's open-files limit (and starts tether with a low one); its tests
//! take turns.

mod support;

use std::fs::File;
use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use serde_json::Value;
use support::*;
use tokio::net::TcpStream;

/// Held by each test while it runs: they change or need the process's descriptor table.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn a_turn_that_finds_no_free_descriptor_waits_for_one_and_then_streams_the_whole_turn() {
    let _alone = ALONE.lock().await;
    let backend = turn_backend(turn(5), None).await;
    let tether = sidecar(backend.addr, "").await;
    let connects = tether.handle().shared.upstream.clone();

    // A low soft limit, so filling it is quick whatever the machine's limit is.
    let open = std::fs::read_dir("/proc/self/fd").expect("/proc").count() as u64;
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("getrlimit");
    rlimit::setrlimit(rlimit::Resource::NOFILE, open + 64, hard).expect("setrlimit");
    let mut filler = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => filler.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => break,
            Err(e) => panic!("filling the descriptor table: {e}"),
        }
    }
    // Two left: the client's socket and tether's accept. Its backend socket finds none.
    filler.truncate(filler.len() - 2);
    let sock = TcpStream::connect(tether.addr).await.expect("connect");
    let body = chat("c").to_string();
    let streaming = tokio::spawn(async move {
        request_on(
            sock,
            "POST",
            "/chat",
            &[("content-type", "application/json")],
            body.as_bytes(),
        )
        .await
        .frames_to_end()
        .await
    });
    eventually("the turn waits for a descriptor", || {
        connects.connects().waiting() == 1
    })
    .await;
    assert_eq!(connects.connects().out_of_fds(), 1);
    assert_eq!(
        backend.accepted.load(Ordering::SeqCst),
        0,
        "no connection reached the backend yet"
    );

    drop(filler);
    let frames = streaming.await.expect("the turn's task");
    assert_eq!(frames.last().expect("frames").json["persisted"], true);
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&turn(5)));
    assert_eq!(tether.metric("tether_upstream_fd_waits_total").await, 1.0);
    assert_eq!(tether.metric("tether_upstream_connects_waiting").await, 0.0);
    assert_eq!(
        tether
            .metric("tether_upstream_errors_total{kind=\"connect\"}")
            .await,
        0.0
    );
}

/// The tether binary serving HTTPS in front of `upstream` under an open-files limit of `limit`
/// (soft and hard, so it cannot raise it), with its default caps; killed when dropped.
struct Limited {
    child: std::process::Child,
    addr: SocketAddr,
    admin: SocketAddr,
    conf: std::path::PathBuf,
}

impl Limited {
    fn start(limit: u32, upstream: SocketAddr, cert: &Issued) -> Limited {
        let conf = cert.cert_pem.with_extension("toml");
        let toml = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n\
             tls_cert = \"{}\"\ntls_key = \"{}\"\n",
            toml_path(&cert.cert_pem),
            toml_path(&cert.key_pem)
        );
        std::fs::write(&conf, toml).unwrap();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_tether"))
            .arg("--config")
            .arg(&conf)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        // "tether on https://ADDR  (admin http://ADDR/metrics)"
        let addr = |scheme: &str| -> SocketAddr {
            line.split(scheme)
                .nth(1)
                .and_then(|s| s.split(|c: char| c.is_whitespace() || c == '/').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no {scheme} address in {line:?}"))
        };
        let (addr, admin) = (addr("https://"), addr("http://"));
        // Drained, so that a line tether prints later never meets a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Limited {
            child,
            addr,
            admin,
            conf,
        }
    }

    /// The value of one sample line of its `/metrics`, 0 when absent.
    async fn metric(&self, sample: &str) -> f64 {
        let mut r = within(
            "the admin listener answers",
            request(self.admin, "GET", "/metrics", &[], b""),
        )
        .await;
        let text = String::from_utf8(r.body_to_end().await.to_vec()).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|v| v.strip_prefix(' ')))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.conf);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_cannot_take_the_descriptors_that_other_clients_and_the_admin_listener_need()
{
    let _alone = ALONE.lock().await;
    // The test process itself holds a connection per held turn: its soft limit back to the hard
    // one, in case the other test lowered it.
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("getrlimit");
    rlimit::setrlimit(rlimit::Resource::NOFILE, hard, hard).expect("setrlimit");
    let gate = Gate::default();
    let be = turn_backend(turn(2), Some((1, gate.clone()))).await;
    let ca = TestCa::new("fd-limit-h2");
    let server = ca.issue("listener", &["localhost"]);
    // With 256 descriptors: 96 client connections and 96 backend requests at most, 64 kept.
    let tether = Limited::start(256, be.addr, &server);
    const SHARE: usize = (256 - 64) / 2;

    // Three connections, each opening as many turns as its SETTINGS allow (100), held open.
    let mut streams = Vec::new();
    for conn in 0..3 {
        let c = within("a client's handshake", H2::connect(tether.addr, &ca)).await;
        for n in 0..100 {
            let mut c = c.clone();
            streams.push(tokio::spawn(async move {
                let id = format!("c{conn}-{n}");
                let mut r = c.post("/chat", &chat(&id)).await;
                let code = match r.status {
                    200 => r.frame().await.map(|f| f.ty().to_string()),
                    _ => {
                        let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
                        v["error"].as_str().map(str::to_string)
                    }
                };
                (id, r.status, code, r)
            }));
        }
    }
    let mut held = Vec::new();
    let mut refused = 0;
    for s in streams {
        match s.await.unwrap() {
            (id, 200, Some(ty), r) if ty == "STREAM_SNAPSHOT" => held.push((id, r)),
            (_, 503, Some(code), _) if code == "at_capacity" => refused += 1,
            (id, status, code, _) => panic!("turn {id} got {status} {code:?}"),
        }
    }
    assert_eq!((held.len(), refused), (SHARE, 300 - SHARE));
    assert_eq!(be.requests.lock().len(), SHARE);

    // Another client completes its handshake and is answered, on HTTP/2 and HTTP/1.1.
    let mut other = within("a fourth client's handshake", H2::connect(tether.addr, &ca)).await;
    let path = |i: usize| format!("/chat/run?chat_id={}", held[i].0);
    let mut status = other.request("GET", &path(0), &[], b"").await;
    assert_eq!(status.status, 200);
    let v: Value = serde_json::from_slice(&status.body_to_end().await).unwrap();
    assert_eq!(v["status"], "running");
    let (_, answer) = https1(
        tether.addr,
        &ca,
        &format!(
            "GET {} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            path(1)
        ),
        b"",
    )
    .await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    // And so does the admin listener, with what happened.
    assert_eq!(tether.metric("tether_accept_errors_total").await, 0.0);
    assert_eq!(
        tether.metric("tether_upstream_requests").await,
        SHARE as f64
    );
    assert_eq!(
        tether
            .metric("tether_upstream_requests_refused_total")
            .await,
        (300 - SHARE) as f64
    );
    assert_eq!(tether.metric("tether_upstream_fd_waits_total").await, 0.0);

    // The held turns end, saved.
    gate.open();
    let ends =
        futures_util::future::join_all(held.iter_mut().map(|(_, r)| r.frames_to_end())).await;
    for frames in ends {
        assert_eq!(frames.last().unwrap().json["persisted"], true);
    }
}
