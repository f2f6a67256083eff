//! Out of file descriptors: a new turn whose backend connection finds none left waits for one
//! to free and then streams, instead of failing with 502. Alone in its own test binary, because
//! it lowers the whole process's open-files limit.

mod support;

use std::fs::File;
use std::sync::atomic::Ordering;

use support::*;
use tokio::net::TcpStream;

#[tokio::test]
async fn a_turn_that_finds_no_free_descriptor_waits_for_one_and_then_streams_the_whole_turn() {
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
