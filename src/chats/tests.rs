//! Tests of the chats room without a shared journal (the journal's side is in
//! `tests/it/journal`): owners and scopes, lookups, registration by idempotency key, stop
//! targets, go-live and naming.

use std::time::Duration;

use pingora_http::ResponseHeader;

use super::*;
use crate::config::Tokens;
use crate::vocab::end::EndReason;

fn chats(subject: Subject) -> Chats {
    Chats::new(
        Registry::new(Duration::from_secs(60), 100),
        subject,
        b"secret",
        None,
    )
}

fn owner(chats: &Chats, who: &str) -> Owner {
    let mut h = HeaderMap::new();
    h.insert("x-user", who.parse().unwrap());
    chats.owner(&h).unwrap()
}

fn header() -> ResponseHeader {
    let mut h = ResponseHeader::build(200, None).unwrap();
    h.insert_header("content-type", "text/event-stream")
        .unwrap();
    h
}

/// Runs `run_id` live as chat `chat_id`'s current run for `owner`.
async fn live(chats: &Chats, owner: Owner, chat_id: &str, run_id: &str) -> Live {
    let chat = chats.chat(owner, &ChatId::from(chat_id));
    let run_id = RunId::from(run_id);
    let pending = chat.register(&run_id, Admission::Always).await.unwrap();
    let rec = Recording {
        route: "/chat",
        window: 16,
        raw_cap: None,
        tokens: &Tokens::default(),
    };
    chats.go_live(pending, run_id, &rec, &header())
}

#[tokio::test]
async fn a_chat_is_found_by_its_owner_only_and_by_id_with_its_scope() {
    let chats = chats(Subject::Header("x-user".into()));
    let (alice, bob) = (owner(&chats, "alice"), owner(&chats, "bob"));
    let run = live(&chats, alice, "c", "r1").await.run;
    let c = ChatId::from("c");
    let found = chats.chat(alice, &c).current().await.expect("alice's run");
    assert!(Arc::ptr_eq(&found.run, &run));
    assert_eq!(found.scope, *chats.chat(alice, &c).scope());
    assert_ne!(chats.chat(alice, &c).scope(), chats.chat(bob, &c).scope());
    assert!(chats.chat(bob, &c).current().await.is_none());
    let by_id = chats.by_id(alice, &RunId::from("r1")).await.unwrap();
    assert_eq!(by_id.scope, found.scope, "a run by id comes with its chat");
    assert!(chats.by_id(bob, &RunId::from("r1")).await.is_none());
    let name = Name::Run(RunId::from("r1"));
    assert!(chats.lookup(alice, &name).await.is_some());
    assert!(chats.lookup(bob, &Name::Chat(c)).await.is_none());
}

#[tokio::test]
async fn find_or_current_falls_back_to_the_current_run_and_find_does_not() {
    let chats = chats(Subject::None);
    let a = live(&chats, Owner::NONE, "c", "a").await.run;
    let b = live(&chats, Owner::NONE, "c", "b").await.run;
    let chat = chats.chat(Owner::NONE, &ChatId::from("c"));
    let named = chat.find_or_current(Some(&RunId::from("a"))).await;
    assert!(
        Arc::ptr_eq(&named.unwrap().run, &a),
        "a superseded run by id"
    );
    let unknown = chat.find_or_current(Some(&RunId::from("zz"))).await;
    assert!(Arc::ptr_eq(&unknown.unwrap().run, &b));
    assert!(chat.find(&RunId::from("zz")).await.is_none());
    assert!(Arc::ptr_eq(&chat.current_here().unwrap().run, &b));
}

#[tokio::test]
async fn a_single_flight_chat_refuses_a_second_turn_while_one_is_pending() {
    let chats = chats(Subject::None);
    let chat = chats.chat(Owner::NONE, &ChatId::from("c"));
    let first = chat
        .register(&RunId::from("r1"), Admission::SingleFlight)
        .await;
    assert!(first.is_ok());
    let second = chat
        .register(&RunId::from("r2"), Admission::SingleFlight)
        .await;
    assert_eq!(second.unwrap_err(), Busy::Running(RunId::from("r1")));
}

#[tokio::test(start_paused = true)]
async fn an_idempotency_key_joins_its_run_refuses_another_body_and_waits_for_its_first_request() {
    let chats = chats(Subject::None);
    let chat = chats.chat(Owner::NONE, &ChatId::from("c"));
    let key = IdempotencyKey::new("k".into(), b"{}");
    let wait = Duration::from_secs(2);
    let first = chat
        .register_keyed(&RunId::from("r1"), Admission::Always, &key, wait)
        .await
        .unwrap();
    let ByKey::New(pending) = first else {
        panic!("a new key registers: {first:?}");
    };
    // The first request still waits for the backend: a retry waits, then is told so.
    let waited = chat
        .register_keyed(&RunId::from("r2"), Admission::Always, &key, wait)
        .await;
    assert!(matches!(waited, Ok(ByKey::InUse(id)) if id == "r1"));
    let rec = Recording {
        route: "/chat",
        window: 16,
        raw_cap: None,
        tokens: &Tokens::default(),
    };
    let run = chats
        .go_live(pending, RunId::from("r1"), &rec, &header())
        .run;
    let joined = chat
        .register_keyed(&RunId::from("r3"), Admission::Always, &key, wait)
        .await;
    assert!(matches!(joined, Ok(ByKey::Join(r)) if Arc::ptr_eq(&r, &run)));
    let other = IdempotencyKey::new("k".into(), b"{\"x\":1}");
    let reused = chat
        .register_keyed(&RunId::from("r4"), Admission::Always, &other, wait)
        .await;
    assert!(matches!(reused, Ok(ByKey::Reused(id)) if id == "r1"));
    let [plain, with_body] = key.names();
    assert!(with_body.starts_with(&plain) && plain.starts_with("~key:"));
    assert_ne!(key.names(), other.names());
    assert_eq!(key.names()[0], other.names()[0], "the key's own name");
}

#[tokio::test]
async fn a_repeated_cancel_request_id_names_the_run_it_stopped_first() {
    let chats = chats(Subject::None);
    let first = live(&chats, Owner::NONE, "c", "a").await.run;
    let target = StopTarget::Chat {
        chat: ChatId::from("c"),
        run: None,
        cancel: Some("x".into()),
    };
    let found = chats.stop_target(Owner::NONE, &target).await.unwrap();
    assert!(Arc::ptr_eq(&found.run, &first));
    chats
        .stop(&found, target.cancel(), EndReason::Cancelled)
        .await;
    let _second = live(&chats, Owner::NONE, "c", "b").await;
    let again = chats.stop_target(Owner::NONE, &target).await.unwrap();
    assert!(Arc::ptr_eq(&again.run, &first), "not the chat's later run");
    let named = StopTarget::Named {
        chat: Some(ChatId::from("c")),
        run: None,
        cancel: Some("x".into()),
        current: false,
    };
    let by_cancel = chats.stop_target(Owner::NONE, &named).await.unwrap();
    assert!(Arc::ptr_eq(&by_cancel.run, &first));
    assert_eq!(named.named(), None);
}

#[tokio::test]
async fn a_named_stop_finds_its_run_by_alias_and_never_a_later_run_of_the_chat() {
    let chats = chats(Subject::None);
    let a = live(&chats, Owner::NONE, "c", "a").await;
    a.naming.name(&a.run, "backend-1");
    let _b = live(&chats, Owner::NONE, "c", "b").await;
    let named = |run: &str, current| StopTarget::Named {
        chat: Some(ChatId::from("c")),
        run: Some(RunId::from(run)),
        cancel: None,
        current,
    };
    let t = named("backend-1", true);
    let found = chats.stop_target(Owner::NONE, &t).await.unwrap();
    assert!(Arc::ptr_eq(&found.run, &a.run));
    assert_eq!(t.named().map(RunId::as_str), Some("backend-1"));
    assert!(chats
        .stop_target(Owner::NONE, &named("gone", true))
        .await
        .is_none());
    let current = StopTarget::Named {
        chat: Some(ChatId::from("c")),
        run: None,
        cancel: None,
        current: true,
    };
    let found = chats.stop_target(Owner::NONE, &current).await.unwrap();
    assert_eq!(found.run.id(), "b");
}

#[tokio::test]
async fn a_stop_asks_a_run_produced_here_to_stop() {
    let chats = chats(Subject::None);
    let live = live(&chats, Owner::NONE, "c", "a").await;
    let stop = live.run.stop_requested();
    let found = chats
        .chat(Owner::NONE, &ChatId::from("c"))
        .current()
        .await
        .unwrap();
    chats.stop(&found, None, EndReason::Cancelled).await;
    assert_eq!(stop.await, EndReason::Cancelled);
}

#[tokio::test]
async fn a_run_goes_live_as_its_chats_current_run_for_the_owner_that_registered_it() {
    let chats = chats(Subject::None);
    let scope = Scope::from("c");
    let chat = chats.chat(Owner::NONE, &ChatId::from("c"));
    let pending = chat
        .register(&RunId::from("r1"), Admission::Always)
        .await
        .unwrap();
    let tokens = Tokens {
        run_id_header: Some("x-run".into()),
        token_header: None,
        ttl: Duration::from_secs(60),
    };
    let rec = Recording {
        route: "/chat",
        window: 16,
        raw_cap: None,
        tokens: &tokens,
    };
    let live = chats.go_live(pending, RunId::from("r1"), &rec, &header());
    assert_eq!(live.run.id(), "r1");
    assert_eq!(*live.naming.scope(), scope);
    assert_eq!(
        live.run.observers(),
        1,
        "the requester is counted as attached"
    );
    let current = chats.registry().current(&scope, &Owner::NONE).unwrap();
    assert!(Arc::ptr_eq(&current, &live.run));
    assert!(
        super::head::tokens(&live.run).is_some(),
        "the route's token headers are kept"
    );
    assert_eq!(
        super::head::upstream_head(&live.run).map(|h| h.status.as_u16()),
        Some(200),
        "the upstream header is kept for verbatim readers"
    );
}

#[tokio::test]
async fn naming_indexes_the_run_under_its_alias_and_ignores_empty_or_overlong_ones() {
    let chats = chats(Subject::None);
    let live = live(&chats, Owner::NONE, "c", "r1").await;
    let naming = &live.naming;
    naming.name(&live.run, "");
    naming.name(&live.run, &"x".repeat(257));
    naming.name(&live.run, "backend-1");
    naming.index_only(&live.run, "~key:k");
    assert_eq!(live.run.alias().as_deref(), Some("backend-1"));
    let found = chats
        .by_id(Owner::NONE, &RunId::from("backend-1"))
        .await
        .expect("found by its alias");
    assert_eq!(found.scope, Scope::from("c"));
    assert!(Arc::ptr_eq(&found.run, &live.run));
    assert!(chats.by_id(Owner::NONE, &RunId::from("")).await.is_none());
    let by_key = chats.by_id(Owner::NONE, &RunId::from("~key:k")).await;
    assert!(by_key.is_some_and(|f| Arc::ptr_eq(&f.run, &live.run)));
    assert_eq!(
        live.run.alias().as_deref(),
        Some("backend-1"),
        "an index-only name is not an alias"
    );
}
