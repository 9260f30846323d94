//! See `main.rs`.
//!
//! Login throttling (issue 29, item 7): the failure count is taken before
//! Argon2 runs, the verifier pool is bounded and answers 503 at once, and
//! the failed-login table cannot grow without bound.

#[allow(unused_imports)]
use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;
use warrant_server::ErrorKey;

/// One login: (status, `Retry-After` seconds, body).
async fn try_login(
    http: &reqwest::Client,
    base: &str,
    username: &str,
    password: &str,
) -> (u16, Option<u64>, Value) {
    let resp = http
        .post(format!("{base}/api/v1/users/login"))
        .json(&json!({"username": username, "password": password}))
        .send()
        .await
        .unwrap();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let (status, body) = decode(resp).await;
    (status, retry_after, body)
}

/// `n` logins fired at once; every one must be answered within 60 s.
async fn burst(srv: &TestServer, logins: Vec<(String, String)>) -> Vec<(u16, Option<u64>, Value)> {
    let tasks: Vec<_> = logins
        .into_iter()
        .map(|(user, password)| {
            let (http, base) = (srv.http.clone(), srv.base.clone());
            tokio::spawn(async move { try_login(&http, &base, &user, &password).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        let got = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("a login hung")
            .unwrap();
        out.push(got);
    }
    out
}

fn key_of(got: &(u16, Option<u64>, Value)) -> String {
    got.2["message"].as_str().unwrap_or_default().to_string()
}

async fn create_user(srv: &TestServer, name: &str, password: &str) {
    let (s, b) = srv
        .post(
            "/api/v1/users",
            &json!({"username": name, "password": password, "role": "operator"}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
}

fn random_name() -> String {
    format!("nobody-{}", hex_of(&random_nonce()[..8]))
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 40 wrong guesses at once with `max_login_failures = 5`: each attempt is
/// counted before Argon2 runs, so exactly 5 are verified (401) and 35 are
/// refused as locked (429). Checked before verifying and counted after, all
/// 40 would have run. Then the right password is refused too.
#[tokio::test]
async fn rejects_parallel_password_guessing() {
    // A verifier pool larger than the burst, so that no guess is turned away
    // by the pool (503) instead of by the lock.
    let srv = TestServer::start_with(None, "[auth]\nmax_concurrent_logins = 64\n").await;
    create_user(&srv, "victim", "right-password-1").await;

    let guesses = (0..40)
        .map(|i| ("victim".to_string(), format!("wrong-guess-{i}")))
        .collect();
    let answers = burst(&srv, guesses).await;
    let failed = answers
        .iter()
        .filter(|a| key_of(a) == ErrorKey::LoginFailed.as_str())
        .count();
    let locked: Vec<_> = answers
        .iter()
        .filter(|a| key_of(a) == ErrorKey::AccountLocked.as_str())
        .collect();
    assert_eq!(
        (failed, locked.len()),
        (5, 35),
        "answers: {:?}",
        answers.iter().map(|a| (a.0, key_of(a))).collect::<Vec<_>>()
    );
    for a in &locked {
        assert_eq!(a.0, 429);
        assert!(
            a.1.is_some_and(|s| s > 0 && s <= 300),
            "Retry-After: {:?}",
            a.1
        );
    }

    // Locked: the right password is refused as well.
    let right = try_login(&srv.http, &srv.base, "victim", "right-password-1").await;
    assert_error(&(right.0, right.2.clone()), ErrorKey::AccountLocked);
    assert!(right.1.is_some(), "429 without Retry-After");
    srv.stop().await;
}

/// A verifier pool of one and a burst of slow (Argon2) logins: the logins
/// that find the pool busy are answered 503 with `Retry-After` at once, the
/// others are verified; none waits in a queue or hangs.
#[tokio::test]
async fn rejects_logins_over_the_verifier_pool() {
    let srv = TestServer::start_with(None, "[auth]\nmax_concurrent_logins = 1\n").await;
    // Distinct usernames, so that the lockout plays no part.
    let logins = (0..24)
        .map(|i| {
            (
                format!("pool-{i}-{}", random_name()),
                "wrong-password".into(),
            )
        })
        .collect();
    let answers = burst(&srv, logins).await;
    let busy: Vec<_> = answers.iter().filter(|a| a.0 == 503).collect();
    let verified = answers
        .iter()
        .filter(|a| key_of(a) == ErrorKey::LoginFailed.as_str())
        .count();
    assert!(
        !busy.is_empty(),
        "no login was turned away by a pool of 1: {:?}",
        answers.iter().map(|a| (a.0, key_of(a))).collect::<Vec<_>>()
    );
    assert!(verified >= 1, "no login was verified");
    assert_eq!(busy.len() + verified, answers.len(), "{answers:?}");
    for a in busy {
        assert_error(&(a.0, a.2.clone()), ErrorKey::Overloaded);
        assert_eq!(a.1, Some(1), "503 without Retry-After: {}", a.2);
    }
    // The pool is free again once the burst is over.
    let again = try_login(&srv.http, &srv.base, "admin", ADMIN_PASSWORD).await;
    assert_eq!(again.0, 200, "{}", again.2);
    srv.stop().await;
}

/// Random usernames are counted like real ones, but the table holding them
/// is capped: with `auth.max_lock_entries = 8`, 40 distinct unknown names
/// leave at most 8 entries, and the names that find the table full of live
/// entries are refused with 503 and `Retry-After` rather than tracked.
#[tokio::test]
async fn lock_table_stays_bounded() {
    let srv = TestServer::start_with(
        None,
        "[auth]\nmax_lock_entries = 8\nmax_concurrent_logins = 64\n",
    )
    .await;
    let state = &srv.server.as_ref().unwrap().state;
    let mut statuses = Vec::new();
    for _ in 0..40 {
        let got = try_login(&srv.http, &srv.base, &random_name(), "guess").await;
        if got.0 == 503 {
            assert_error(&(got.0, got.2.clone()), ErrorKey::Overloaded);
            assert!(got.1.is_some_and(|s| s >= 1), "503 without Retry-After");
        } else {
            assert_error(&(got.0, got.2.clone()), ErrorKey::LoginFailed);
        }
        statuses.push(got.0);
        assert!(
            state.login.tracked() <= 8,
            "{} entries",
            state.login.tracked()
        );
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 401).count(),
        8,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 503).count(),
        32,
        "{statuses:?}"
    );
    assert_eq!(state.login.tracked(), 8);
    srv.stop().await;
}
