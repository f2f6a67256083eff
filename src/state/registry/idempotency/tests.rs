use super::*;
use std::time::Duration;

fn keyed(reg: &Arc<Registry>, id: &str, key: &str, body: &[u8]) -> Keyed {
    reg.register_keyed(
        &Scope::from("c"),
        Owner::NONE,
        &RunId::from(id),
        Admission::Always,
        key,
        body_hash(body),
    )
    .unwrap()
}

#[test]
fn a_key_waits_while_pending_joins_its_run_and_refuses_another_body() {
    let reg = Registry::new(Duration::from_secs(60), 8);
    let Keyed::New(pending) = keyed(&reg, "r1", "k", b"{}") else {
        panic!("a new key registers the request");
    };
    assert!(matches!(keyed(&reg, "r2", "k", b"{}"), Keyed::Wait(id) if id.as_str() == "r1"));
    let run = Arc::new(Run::new("r1", 4));
    reg.go_live(&pending, run.clone());
    drop(pending);
    assert!(matches!(keyed(&reg, "r3", "k", b"{}"), Keyed::Join(r) if Arc::ptr_eq(&r, &run)));
    assert!(
        matches!(keyed(&reg, "r4", "k", b"{\"x\":1}"), Keyed::Reused(id) if id.as_str() == "r1")
    );
    // Another key is another turn.
    assert!(matches!(keyed(&reg, "r5", "other", b"{}"), Keyed::New(_)));
}

#[test]
fn a_key_whose_request_got_no_run_names_nothing() {
    // The backend refused the first request (no run went live): a retry is a new turn.
    let reg = Registry::new(Duration::from_secs(60), 8);
    let Keyed::New(pending) = keyed(&reg, "r1", "k", b"{}") else {
        panic!("a new key registers the request");
    };
    drop(pending);
    assert!(reg
        .keyed(&Scope::from("c"), &Owner::NONE, "k", body_hash(b"{}"))
        .is_none());
    assert!(matches!(keyed(&reg, "r2", "k", b"{}"), Keyed::New(_)));
}

#[test]
fn a_chat_keeps_its_newest_keys() {
    let reg = Registry::new(Duration::from_secs(60), 8);
    let mut held = Vec::new();
    for i in 0..=MAX_KEYS {
        let Keyed::New(p) = keyed(&reg, &format!("r{i}"), &format!("k{i}"), b"{}") else {
            panic!("new");
        };
        held.push(p);
    }
    let scope = Scope::from("c");
    assert!(reg
        .keyed(&scope, &Owner::NONE, "k0", body_hash(b"{}"))
        .is_none());
    assert!(reg
        .keyed(
            &scope,
            &Owner::NONE,
            &format!("k{MAX_KEYS}"),
            body_hash(b"{}")
        )
        .is_some());
}
