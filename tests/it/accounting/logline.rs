//! The run record as the binary logs it with `--log-format json`: one JSON object per line, the
//! record's fields beside `ts`, `level` and `target`.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::*;
use serde_json::{json, Value};

/// The lines a child writes to one of its pipes, as they come.
fn lines(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The first line from `rx` that `pick` takes, each line within 20 s.
fn first<T>(rx: &mpsc::Receiver<String>, what: &str, pick: impl Fn(&str) -> Option<T>) -> T {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("no {what}: {e}"));
        if let Some(v) = pick(&line) {
            return v;
        }
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_log_format_json_each_ended_run_is_one_json_line_of_its_record() {
    let be = turn_backend(turn(3), None).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(["--log-format", "json", "--upstream"])
        .arg(be.addr.to_string())
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = (
        lines(child.stdout.take().unwrap()),
        lines(child.stderr.take().unwrap()),
    );
    let _child = Killed(child);
    let addr: std::net::SocketAddr = within_blocking(move || {
        first(&out, "banner", |l| {
            let rest = l.strip_prefix("tether on http://")?;
            rest.split_whitespace().next()?.parse().ok()
        })
    });
    let mut r = post(addr, "/chat", &json!({"chat_id": "c", "protocol": 1})).await;
    let frames = r.frames_to_end().await;
    let run_id = frames[0].json["run_id"].as_str().unwrap().to_string();
    assert_eq!(frames.last().unwrap().json["persisted"], true);
    let record: Value = within_blocking(move || {
        first(&err, "run_ended line", |l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["event"] == "run_ended").then_some(v)
        })
    });
    assert_eq!(record["run_id"], json!(run_id));
    assert_eq!(record["route"], "/chat");
    assert_eq!(record["format"], "agui");
    assert_eq!(record["outcome"], "persisted");
    assert_eq!(record["persisted"], true);
    assert_eq!(
        record["usage_missing"], true,
        "AG-UI without a usage table reports none"
    );
    assert_eq!(record["level"], "INFO");
    assert_eq!(record["target"], "tether::run");
    assert!(
        record["ts"].is_string() && record["duration_ms"].is_u64(),
        "{record}"
    );
    assert!(
        record["watch"]["observers_max"].as_u64() >= Some(1),
        "{record}"
    );
}
