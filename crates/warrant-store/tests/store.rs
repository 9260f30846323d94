//! The store's contract, run against every backend (see `common`).

mod common;

use common::CertOf;

matrix!(
    users_are_unique_and_round_trip,
    deleting_a_user_deletes_its_tokens,
    tokens_round_trip_and_expired_ones_are_not_loaded,
    token_for_unknown_user_is_refused,
    every_user_and_token_write_appends_one_auth_change_in_order,
    expired_tokens_are_pruned_in_bounded_batches,
    submitted_certificate_is_readable_and_listed_with_filters,
    revoking_a_principal_cert_cascades_to_its_agent_certs,
    revoke_by_principal_revokes_person_and_agent_certs,
    crl_lists_revoked_certificates_of_one_ca,
    active_agents_count_only_valid_unexpired_agent_certs,
    concurrent_submits_are_grouped_into_few_transactions,
    nonce_already_in_db_fails_only_that_request,
    a_record_the_database_refuses_fails_alone,
    rejects_a_refused_batch_whole_and_leaves_no_transaction_open,
    same_nonce_submitted_concurrently_succeeds_exactly_once,
    consumed_nonce_is_refused_after_reopen,
    rejects_a_nonce_consumed_under_another_expiry,
    two_stores_on_one_database_accept_a_nonce_once,
    full_queue_answers_overloaded_at_once,
    buffered_mode_acknowledges_early_and_persists_on_shutdown,
    shutdown_drains_queue_and_refuses_new_submits,
    expired_nonce_rows_are_pruned,
    reopening_applies_no_migration_twice,
    full_cert_window_evicts_expired_then_answers_overloaded,
    a_revocation_is_seen_by_the_next_standing_read,
    a_nonce_only_record_commits_durably,
    rejects_a_record_with_neither_certificate_nor_nonce,
    rejects_a_nonce_only_record_whose_nonce_a_certificate_consumed,
    rejects_a_certificate_whose_nonce_a_nonce_only_record_consumed,
    a_batch_mixing_nonce_only_and_certificate_records_commits_all,
    two_stores_on_one_database_accept_a_nonce_once_for_a_token_or_a_certificate,
);

/// MySQL commits DDL statement by statement: a process killed inside a
/// migration leaves its schema changes made and its row missing. The next
/// start must finish the migration, not fail on "duplicate key name" or
/// "can't DROP". (SQLite and PostgreSQL migrate in one transaction.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_start_after_a_half_applied_migration_finishes_it() {
    let Some(db) = common::TestDb::mysql().await else {
        return;
    };
    let s = db.open().await;
    s.shutdown().await;
    drop(s);
    // Migrations 2 (CREATE INDEX), 3 (DROP INDEX), 4 (ADD COLUMN), 5 (ADD
    // COLUMN, CREATE INDEX, CREATE TABLE, a seed row) and 6 (ADD COLUMN,
    // CREATE INDEX), 7 and 8 (the log's tables and certificate columns) and
    // 9 (nothing on MySQL) ran; their rows did not land.
    let mut c = <sqlx::MySqlConnection as sqlx::Connection>::connect(&db.dsn)
        .await
        .unwrap();
    sqlx::query("DELETE FROM warrant_schema_migrations WHERE version >= 2")
        .execute(&mut c)
        .await
        .unwrap();
    let s = db.open().await;
    s.issuance()
        .submit(common::agent_issuance(
            "people",
            "corp:m:K",
            common::unique_bytes32(),
        ))
        .await
        .unwrap();
    assert_eq!(
        s.certs()
            .count_active_agents("corp:m:K", warrant_store::now_unix())
            .await
            .unwrap(),
        1
    );
    s.shutdown().await;
    drop(s);
    // The rows of every migration are back.
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM warrant_schema_migrations ORDER BY version")
            .fetch_all(&mut c)
            .await
            .unwrap();
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    drop(c);
    db.cleanup().await;
}

/// A batch abandoned at `statement_timeout` (it waited for another
/// process's write lock) must not leave its transaction open
/// on the write connection: an administrative write acknowledged after it
/// would land inside that transaction and vanish with the next batch's
/// rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_abandoned_batch_leaves_no_transaction_open() {
    use warrant_store::*;
    let db = common::TestDb::sqlite();
    let opts = StoreOptions {
        statement_timeout: std::time::Duration::from_millis(300),
        ..StoreOptions::default()
    };
    let s = db.open_with(opts.clone()).await;
    let mut blocker = <sqlx::SqliteConnection as sqlx::Connection>::connect(&db.dsn)
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut blocker)
        .await
        .unwrap();
    let abandoned = common::person_issuance("people", "corp:abandoned:K");
    let refused = s.issuance().submit(abandoned).await;
    assert!(
        matches!(refused, Err(WriteError::Unavailable(_))),
        "{refused:?}"
    );
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    drop(blocker);

    let user = common::new_user("after-the-abandoned-batch", Role::Operator);
    s.accounts().create_user(&user).await.unwrap();
    let next = common::person_issuance("people", "corp:abandoned:K");
    s.issuance().submit(next.clone()).await.unwrap();
    s.shutdown().await;
    drop(s);

    let s = db.open_with(opts).await;
    assert!(
        s.accounts()
            .get_user_by_name(&user.username)
            .await
            .unwrap()
            .is_some(),
        "the acknowledged user was lost"
    );
    let certs = s.certs();
    assert!(
        certs
            .get_cert("people", &next.cert_row().serial)
            .await
            .unwrap()
            .is_some()
    );
    s.shutdown().await;
}

// Batch sizes are exact only on a single-threaded runtime.
matrix!(
    server_databases_single_threaded: records_of_ready_tasks_share_the_commit,
    a_large_durable_batch_commits_whole_on_server_databases,
);

mod scenarios {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::common::*;
    use warrant_store::*;

    pub async fn users_are_unique_and_round_trip(db: &TestDb) {
        let s = db.open().await;
        let id = s
            .accounts()
            .create_user(&new_user("alice", Role::Admin))
            .await
            .unwrap();
        let id2 = s
            .accounts()
            .create_user(&new_user("bob", Role::Auditor))
            .await
            .unwrap();
        assert_ne!(id, id2);
        assert!(matches!(
            s.accounts()
                .create_user(&new_user("alice", Role::Operator))
                .await,
            Err(StoreError::Conflict("username"))
        ));
        let u = s
            .accounts()
            .get_user_by_name("alice")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (u.id, u.role, u.failed_logins, u.locked_until),
            (id, Role::Admin, 0, None)
        );
        assert!(u.password_hash.starts_with("$argon2id$"));
        assert_eq!(
            s.accounts().get_user(id2).await.unwrap().unwrap().username,
            "bob"
        );
        assert!(
            s.accounts()
                .get_user_by_name("ALICE")
                .await
                .unwrap()
                .is_none(),
            "usernames are case-sensitive"
        );
        assert_eq!(s.accounts().list_users().await.unwrap().len(), 2);
        assert!(
            s.accounts()
                .set_login_state(id, 5, Some(1_800_000_000))
                .await
                .unwrap()
        );
        let u = s.accounts().get_user(id).await.unwrap().unwrap();
        assert_eq!((u.failed_logins, u.locked_until), (5, Some(1_800_000_000)));
        assert!(s.accounts().delete_user(id2).await.unwrap());
        assert!(!s.accounts().delete_user(id2).await.unwrap());
        assert!(s.accounts().get_user(id2).await.unwrap().is_none());
        s.shutdown().await;
    }

    pub async fn deleting_a_user_deletes_its_tokens(db: &TestDb) {
        let s = db.open().await;
        let uid = s
            .accounts()
            .create_user(&new_user("carol", Role::Operator))
            .await
            .unwrap();
        s.accounts()
            .create_token(&NewApiToken {
                token_hash: [1; 32],
                user_id: uid,
                name: "t".into(),
                created_at: 1,
                expires_at: i64::MAX,
                one_time: false,
            })
            .await
            .unwrap();
        assert!(s.accounts().delete_user(uid).await.unwrap());
        assert!(s.accounts().list_tokens(None).await.unwrap().is_empty());
        s.shutdown().await;
    }

    pub async fn tokens_round_trip_and_expired_ones_are_not_loaded(db: &TestDb) {
        let s = db.open().await;
        let a = s
            .accounts()
            .create_user(&new_user("a", Role::Admin))
            .await
            .unwrap();
        let b = s
            .accounts()
            .create_user(&new_user("b", Role::Operator))
            .await
            .unwrap();
        let now = now_unix();
        let t1 = s
            .accounts()
            .create_token(&NewApiToken {
                token_hash: [1; 32],
                user_id: a,
                name: "live".into(),
                created_at: now,
                expires_at: now + 100,
                one_time: false,
            })
            .await
            .unwrap();
        s.accounts()
            .create_token(&NewApiToken {
                token_hash: [2; 32],
                user_id: a,
                name: "dead".into(),
                created_at: now,
                expires_at: now - 1,
                one_time: false,
            })
            .await
            .unwrap();
        s.accounts()
            .create_token(&NewApiToken {
                token_hash: [3; 32],
                user_id: b,
                name: "b".into(),
                created_at: now,
                expires_at: now + 100,
                one_time: false,
            })
            .await
            .unwrap();
        assert!(matches!(
            s.accounts()
                .create_token(&NewApiToken {
                    token_hash: [3; 32],
                    user_id: b,
                    name: "dup".into(),
                    created_at: now,
                    expires_at: now,
                    one_time: false,
                })
                .await,
            Err(StoreError::Conflict("token"))
        ));
        assert_eq!(s.accounts().list_tokens(Some(a)).await.unwrap().len(), 2);
        assert_eq!(s.accounts().list_tokens(None).await.unwrap().len(), 3);
        let live = s.accounts().load_unexpired_tokens(now).await.unwrap();
        let mut hashes: Vec<[u8; 32]> = live.iter().map(|t| t.token_hash).collect();
        hashes.sort();
        assert_eq!(hashes, vec![[1; 32], [3; 32]]);
        let t = s.accounts().get_token(t1).await.unwrap().unwrap();
        assert_eq!(
            (t.user_id, t.name.as_str(), t.expires_at),
            (a, "live", now + 100)
        );
        assert!(s.accounts().delete_token(t1).await.unwrap());
        assert!(!s.accounts().delete_token(t1).await.unwrap());
        s.shutdown().await;
    }

    pub async fn every_user_and_token_write_appends_one_auth_change_in_order(db: &TestDb) {
        let s = db.open().await;
        let head = s.accounts().auth_change_head().await.unwrap();
        let u = s
            .accounts()
            .create_user(&new_user("dave", Role::Admin))
            .await
            .unwrap();
        let t = s
            .accounts()
            .create_token(&NewApiToken {
                token_hash: [7; 32],
                user_id: u,
                name: "t".into(),
                created_at: 1,
                expires_at: i64::MAX,
                one_time: true,
            })
            .await
            .unwrap();
        assert!(
            s.accounts()
                .token_by_hash(&[7; 32])
                .await
                .unwrap()
                .unwrap()
                .one_time
        );
        let role = UserUpdate {
            role: Some(Role::Auditor),
            password_hash: None,
        };
        assert!(s.accounts().update_user(u, &role).await.unwrap());
        assert_eq!(
            s.accounts().get_user(u).await.unwrap().unwrap().role,
            Role::Auditor
        );
        assert!(s.accounts().delete_token(t).await.unwrap());
        // Writes that change nothing append nothing.
        assert!(!s.accounts().delete_token(t).await.unwrap());
        assert!(!s.accounts().update_user(424242, &role).await.unwrap());
        assert!(s.accounts().delete_user(u).await.unwrap());
        assert!(!s.accounts().delete_user(u).await.unwrap());
        let changes = s.accounts().auth_changes_since(head, 100).await.unwrap();
        let got: Vec<(i64, AuthEntity, i64)> = changes
            .iter()
            .map(|c| (c.seq - head, c.entity, c.entity_id))
            .collect();
        assert_eq!(
            got,
            [
                (1, AuthEntity::User, u),
                (2, AuthEntity::Token, t),
                (3, AuthEntity::User, u),
                (4, AuthEntity::Token, t),
                (5, AuthEntity::User, u),
            ]
        );
        assert_eq!(s.accounts().auth_change_head().await.unwrap(), head + 5);
        assert_eq!(
            s.accounts()
                .auth_changes_since(head + 2, 2)
                .await
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            s.accounts()
                .prune_auth_changes(now_unix() + 1)
                .await
                .unwrap(),
            5
        );
        assert!(
            s.accounts()
                .auth_changes_since(head, 100)
                .await
                .unwrap()
                .is_empty()
        );
        s.shutdown().await;
    }

    pub async fn expired_tokens_are_pruned_in_bounded_batches(db: &TestDb) {
        let s = db.open().await;
        let u = s
            .accounts()
            .create_user(&new_user("erin", Role::Operator))
            .await
            .unwrap();
        let now = now_unix();
        for (i, expires_at) in [now - 10, now - 5, now, now + 100].into_iter().enumerate() {
            s.accounts()
                .create_token(&NewApiToken {
                    token_hash: [i as u8 + 20; 32],
                    user_id: u,
                    name: "t".into(),
                    created_at: now - 20,
                    expires_at,
                    one_time: false,
                })
                .await
                .unwrap();
        }
        assert_eq!(s.accounts().prune_expired_tokens(now, 2).await.unwrap(), 2);
        assert_eq!(s.accounts().prune_expired_tokens(now, 2).await.unwrap(), 1);
        assert_eq!(s.accounts().prune_expired_tokens(now, 2).await.unwrap(), 0);
        let left = s.accounts().list_tokens(Some(u)).await.unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].expires_at, now + 100);
        assert!(!left[0].one_time);
        s.shutdown().await;
    }

    pub async fn token_for_unknown_user_is_refused(db: &TestDb) {
        let s = db.open().await;
        let r = s
            .accounts()
            .create_token(&NewApiToken {
                token_hash: [9; 32],
                user_id: 424242,
                name: "x".into(),
                created_at: 0,
                expires_at: 1,
                one_time: false,
            })
            .await;
        assert!(
            matches!(r, Err(StoreError::MissingReference("user"))),
            "{r:?}"
        );
        s.shutdown().await;
    }

    pub async fn submitted_certificate_is_readable_and_listed_with_filters(db: &TestDb) {
        let s = db.open().await;
        let p = person_issuance("people", "corp:alice:AAAA");
        let mut other = person_issuance("other", "corp:bob:BBBB");
        other.cert_row_mut().common_name = "bob".into();
        other.cert_row_mut().created_at += 10;
        s.issuance().submit(p.clone()).await.unwrap();
        s.issuance().submit(other.clone()).await.unwrap();
        let got = s
            .certs()
            .get_cert("people", &p.cert_row().serial)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, p.cert_row());
        assert!(
            s.certs()
                .get_cert("other", &p.cert_row().serial)
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            s.certs()
                .cert_status("people", &p.cert_row().serial)
                .await
                .unwrap(),
            Some(CertStanding {
                status: CertStatus::Valid,
                principal_uid: p.cert_row().principal_uid.clone(),
                bound_user_id: None,
            })
        );
        assert_eq!(s.certs().cert_status("people", "00").await.unwrap(), None);

        let all = s
            .certs()
            .list_certs(&CertFilter {
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            all.iter().map(|c| c.serial.clone()).collect::<Vec<_>>(),
            vec![other.cert_row().serial.clone(), p.cert_row().serial.clone()],
            "newest first"
        );
        let by_ca = s
            .certs()
            .list_certs(&CertFilter {
                ca: Some("other".into()),
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(by_ca.len(), 1);
        let by_cn = s
            .certs()
            .list_certs(&CertFilter {
                common_name: Some("alice".into()),
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(by_cn[0].serial, p.cert_row().serial);
        let by_uid = s
            .certs()
            .list_certs(&CertFilter {
                principal_uid: Some("corp:bob:BBBB".into()),
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(by_uid[0].serial, other.cert_row().serial);
        let revoked = s
            .certs()
            .list_certs(&CertFilter {
                status: Some(CertStatus::Revoked),
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(revoked.is_empty());
        let page = s
            .certs()
            .list_certs(&CertFilter {
                limit: 1,
                offset: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(page[0].serial, p.cert_row().serial);
        // An operator certificate records the user it was issued for.
        let mut bound = person_issuance("people", "corp:bound:K").cert_row().clone();
        bound.principal_uid = None;
        s.certs().insert_bound_cert(&bound, 42).await.unwrap();
        assert_eq!(
            s.certs()
                .cert_status("people", &bound.serial)
                .await
                .unwrap()
                .and_then(|c| c.bound_user_id),
            Some(42)
        );
        assert_eq!(
            s.certs().get_cert("people", &bound.serial).await.unwrap(),
            Some(bound)
        );
        s.shutdown().await;
    }

    pub async fn revoking_a_principal_cert_cascades_to_its_agent_certs(db: &TestDb) {
        let s = db.open().await;
        let uid = "corp:alice:KEYHASH";
        let person = person_issuance("people", uid);
        s.issuance().submit(person.clone()).await.unwrap();
        let a1 = agent_issuance("people", uid, unique_bytes32());
        let a2 = agent_issuance("agents", uid, unique_bytes32());
        let stranger = agent_issuance("people", "corp:bob:OTHER", unique_bytes32());
        for r in [&a1, &a2, &stranger] {
            s.issuance().submit(r.clone()).await.unwrap();
        }
        let out = s
            .certs()
            .revoke_cert(
                "people",
                &person.cert_row().serial,
                "keyCompromise",
                1_800_000_000,
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            out,
            RevokeOutcome {
                already_revoked: false,
                was_principal: true,
                cascade_count: 2
            }
        );
        let a = s
            .certs()
            .get_cert("agents", &a2.cert_row().serial)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.status, a.revoked_at, a.revocation_reason.as_deref()),
            (
                CertStatus::Revoked,
                Some(1_800_000_000),
                Some("keyCompromise")
            )
        );
        assert_eq!(
            s.certs()
                .cert_status("people", &stranger.cert_row().serial)
                .await
                .unwrap()
                .map(|c| c.status),
            Some(CertStatus::Valid)
        );
        let again = s
            .certs()
            .revoke_cert("people", &person.cert_row().serial, "keyCompromise", 1)
            .await
            .unwrap()
            .unwrap();
        assert!(again.already_revoked);
        assert_eq!(again.cascade_count, 0);
        let agent_only = s
            .certs()
            .revoke_cert("people", &stranger.cert_row().serial, "superseded", 1)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            agent_only,
            RevokeOutcome {
                already_revoked: false,
                was_principal: false,
                cascade_count: 0
            }
        );
        assert!(
            s.certs()
                .revoke_cert("people", "DEADBEEF", "unspecified", 1)
                .await
                .unwrap()
                .is_none()
        );
        s.shutdown().await;
    }

    pub async fn revoke_by_principal_revokes_person_and_agent_certs(db: &TestDb) {
        let s = db.open().await;
        let uid = "corp:dave:K";
        for r in [
            person_issuance("people", uid),
            agent_issuance("people", uid, unique_bytes32()),
            person_issuance("people", "corp:eve:K"),
        ] {
            s.issuance().submit(r).await.unwrap();
        }
        assert_eq!(
            s.certs()
                .revoke_by_principal(uid, "cessationOfOperation", 5)
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            s.certs()
                .revoke_by_principal(uid, "cessationOfOperation", 5)
                .await
                .unwrap(),
            0
        );
        let valid = s
            .certs()
            .list_certs(&CertFilter {
                status: Some(CertStatus::Valid),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(valid.len(), 1);
        s.shutdown().await;
    }

    pub async fn crl_lists_revoked_certificates_of_one_ca(db: &TestDb) {
        let s = db.open().await;
        let mut old = person_issuance("people", "u:1:K");
        old.cert_row_mut().not_after = 1000;
        let live = person_issuance("people", "u:2:K");
        let elsewhere = person_issuance("other", "u:3:K");
        for r in [&old, &live, &elsewhere] {
            s.issuance().submit(r.clone()).await.unwrap();
            s.certs()
                .revoke_cert(&r.cert_row().ca, &r.cert_row().serial, "superseded", 77)
                .await
                .unwrap()
                .unwrap();
        }
        let all = s.certs().list_revoked("people", 0).await.unwrap();
        assert_eq!(all.len(), 2);
        let current = s.certs().list_revoked("people", 2000).await.unwrap();
        assert_eq!(
            current,
            vec![RevokedEntry {
                serial: live.cert_row().serial.clone(),
                revoked_at: 77,
                reason: Some("superseded".into()),
                not_after: live.cert_row().not_after
            }]
        );
        s.shutdown().await;
    }

    pub async fn active_agents_count_only_valid_unexpired_agent_certs(db: &TestDb) {
        let s = db.open().await;
        let uid = "corp:frank:K";
        let now = now_unix();
        s.issuance()
            .submit(person_issuance("people", uid))
            .await
            .unwrap();
        for _ in 0..3 {
            s.issuance()
                .submit(agent_issuance("people", uid, unique_bytes32()))
                .await
                .unwrap();
        }
        let mut expired = agent_issuance("people", uid, unique_bytes32());
        expired.cert_row_mut().not_after = now - 10;
        s.issuance().submit(expired).await.unwrap();
        let revoked = agent_issuance("people", uid, unique_bytes32());
        s.issuance().submit(revoked.clone()).await.unwrap();
        s.certs()
            .revoke_cert("people", &revoked.cert_row().serial, "superseded", now)
            .await
            .unwrap();
        assert_eq!(s.certs().count_active_agents(uid, now).await.unwrap(), 3);
        assert_eq!(
            s.certs()
                .count_active_agents("corp:nobody:K", now)
                .await
                .unwrap(),
            0
        );
        s.shutdown().await;
    }

    /// A committer that took a few records yields to the tasks ready to run
    /// and commits what they submit meanwhile in the same transaction; with
    /// `max_gather` zero it commits what it took at once. Exact on a
    /// single-threaded runtime: seven submitters wait on a `Notify`, one
    /// submits, and the notification makes the seven runnable right behind
    /// the committer, which takes the one record and then yields to them.
    pub async fn records_of_ready_tasks_share_the_commit(db: &TestDb) {
        for (max_gather, gathers) in [(Duration::from_secs(30), true), (Duration::ZERO, false)] {
            let s = db
                .open_with(StoreOptions {
                    max_gather,
                    ..StoreOptions::default()
                })
                .await;
            let before = s.issuance().stats();
            let go = Arc::new(tokio::sync::Notify::new());
            let submit = |s: Arc<Store>| async move {
                s.issuance()
                    .submit(person_issuance("people", "corp:gather:K"))
                    .await
            };
            let mut tasks: Vec<_> = (0..7)
                .map(|_| {
                    let (s, go) = (s.clone(), go.clone());
                    tokio::spawn(async move {
                        go.notified().await;
                        submit(s).await
                    })
                })
                .collect();
            tasks.push(tokio::spawn(submit(s.clone())));
            let notifier = tokio::spawn(async move { go.notify_waiters() });
            notifier.await.unwrap();
            for t in tasks {
                t.await.unwrap().unwrap();
            }
            let after = s.issuance().stats();
            assert_eq!(after.rows - before.rows, 8);
            let commits = after.commits - before.commits;
            if gathers {
                assert_eq!(commits, 1, "gathering left records for a later commit");
            } else {
                assert_eq!(
                    commits, 2,
                    "without gathering the first record commits alone"
                );
            }
            s.shutdown().await;
        }
    }

    /// Forty submitters become runnable together, so a committer finds all
    /// forty records queued when it first runs. PostgreSQL and MariaDB
    /// flush inside the commit, so they commit them as one transaction
    /// (SQLite splits such a batch: `writer.rs` tests that).
    pub async fn a_large_durable_batch_commits_whole_on_server_databases(db: &TestDb) {
        let s = db.open().await;
        let before = s.issuance().stats();
        let go = Arc::new(tokio::sync::Notify::new());
        let tasks: Vec<_> = (0..40)
            .map(|_| {
                let (s, go) = (s.clone(), go.clone());
                tokio::spawn(async move {
                    go.notified().await;
                    s.issuance()
                        .submit(person_issuance("people", "corp:split:K"))
                        .await
                })
            })
            .collect();
        tokio::task::yield_now().await;
        go.notify_waiters();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let after = s.issuance().stats();
        assert_eq!(after.rows - before.rows, 40);
        assert_eq!(after.commits - before.commits, 1, "{:?}", db.kind);
        s.shutdown().await;
    }

    pub async fn concurrent_submits_are_grouped_into_few_transactions(db: &TestDb) {
        let s = db.open().await;
        let n = 400;
        let mut tasks = Vec::new();
        let mut serials = Vec::new();
        for i in 0..n {
            let rec = if i % 2 == 0 {
                person_issuance("people", "corp:g:K")
            } else {
                agent_issuance("people", "corp:g:K", unique_bytes32())
            };
            serials.push(rec.cert_row().serial.clone());
            let s = s.clone();
            tasks.push(tokio::spawn(async move { s.issuance().submit(rec).await }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let stats = s.issuance().stats();
        assert_eq!(stats.rows, n as u64);
        assert!(
            stats.commits <= n as u64 / 2,
            "{} commits for {n} rows: not grouped",
            stats.commits
        );
        let listed = s
            .certs()
            .list_certs(&CertFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), n);
        for serial in &serials {
            assert!(
                s.certs()
                    .get_cert("people", serial)
                    .await
                    .unwrap()
                    .is_some()
            );
        }
        s.shutdown().await;
    }

    pub async fn nonce_already_in_db_fails_only_that_request(db: &TestDb) {
        let s = db.open().await;
        let used = unique_bytes32();
        s.issuance()
            .submit(agent_issuance("people", "corp:h:K", used))
            .await
            .unwrap();
        assert!(s.issuance().nonce_consumed(&used).await.unwrap());
        let mut tasks = Vec::new();
        for i in 0..40 {
            let rec = if i % 10 == 3 {
                agent_issuance("people", "corp:h:K", used)
            } else {
                agent_issuance("people", "corp:h:K", unique_bytes32())
            };
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                (
                    rec.cert_row().serial.clone(),
                    i % 10 == 3,
                    s.issuance().submit(rec).await,
                )
            }));
        }
        for t in tasks {
            let (serial, replay, result) = t.await.unwrap();
            let stored = s.certs().get_cert("people", &serial).await.unwrap();
            if replay {
                assert_eq!(result, Err(WriteError::NonceReplayed));
                assert!(
                    stored.is_none(),
                    "a replayed request's certificate must not be stored"
                );
            } else {
                assert_eq!(result, Ok(()));
                assert!(stored.is_some());
            }
        }
        s.shutdown().await;
    }

    /// A record the database refuses (its serial is taken) fails alone: the
    /// records committed beside it, in its batch or not, are stored.
    pub async fn a_record_the_database_refuses_fails_alone(db: &TestDb) {
        let s = db.open().await;
        let first = person_issuance("people", "corp:dup:K");
        let taken = first.cert_row().serial.clone();
        // The same expiry and creation too: on PostgreSQL the key is
        // (ca, serial, expiry partition), so only a row of the same
        // partition collides.
        let (taken_not_after, taken_created_at) =
            (first.cert_row().not_after, first.cert_row().created_at);
        s.issuance().submit(first).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..40 {
            let mut rec = agent_issuance("people", "corp:dup:K", unique_bytes32());
            let bad = i % 10 == 7;
            if bad {
                let row = rec.cert_row_mut();
                row.serial = taken.clone();
                row.not_after = taken_not_after;
                row.created_at = taken_created_at;
            }
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                (
                    rec.cert_row().serial.clone(),
                    bad,
                    s.issuance().submit(rec).await,
                )
            }));
        }
        for t in tasks {
            let (serial, bad, result) = t.await.unwrap();
            if bad {
                assert!(
                    matches!(result, Err(WriteError::Unavailable(_))),
                    "{result:?}"
                );
            } else {
                assert_eq!(result, Ok(()));
                assert!(is_stored(&s, &serial).await);
            }
        }
        let stored = s.certs().get_cert("people", &taken).await.unwrap().unwrap();
        assert_eq!(
            stored.profile, "tls-client",
            "the first holder of the serial stays"
        );
        s.shutdown().await;
    }

    /// A batch the database refuses is rolled back whole before the write
    /// connection serves anyone else: its nonce is not consumed, and the
    /// next write on that connection (an administrative one) commits on its
    /// own and is seen by other connections.
    pub async fn rejects_a_refused_batch_whole_and_leaves_no_transaction_open(db: &TestDb) {
        let s = db.open().await;
        let first = person_issuance("people", "corp:rb:K");
        let taken = first.cert_row().clone();
        s.issuance().submit(first).await.unwrap();
        let nonce = unique_bytes32();
        let mut refused = agent_issuance("people", "corp:rb:K", nonce);
        let row = refused.cert_row_mut();
        row.serial = taken.serial.clone();
        row.not_after = taken.not_after;
        row.created_at = taken.created_at;
        let result = s.issuance().submit(refused).await;
        assert!(
            matches!(result, Err(WriteError::Unavailable(_))),
            "{result:?}"
        );
        s.accounts()
            .create_user(&new_user("after-refusal", Role::Operator))
            .await
            .unwrap();
        assert!(
            s.accounts()
                .get_user_by_name("after-refusal")
                .await
                .unwrap()
                .is_some(),
            "the write after the refused batch is committed"
        );
        let retry = agent_issuance("people", "corp:rb:K", nonce);
        let serial = retry.cert_row().serial.clone();
        assert_eq!(s.issuance().submit(retry).await, Ok(()));
        assert!(is_stored(&s, &serial).await);
        s.shutdown().await;
    }

    pub async fn same_nonce_submitted_concurrently_succeeds_exactly_once(db: &TestDb) {
        let s = db.open().await;
        for _round in 0..5 {
            let nonce = unique_bytes32();
            let mut tasks = Vec::new();
            for _ in 0..8 {
                let rec = agent_issuance("people", "corp:i:K", nonce);
                let s = s.clone();
                tasks.push(tokio::spawn(async move { s.issuance().submit(rec).await }));
            }
            let mut ok = 0;
            for t in tasks {
                match t.await.unwrap() {
                    Ok(()) => ok += 1,
                    Err(e) => assert_eq!(e, WriteError::NonceReplayed),
                }
            }
            assert_eq!(ok, 1);
        }
        s.shutdown().await;
    }

    pub async fn consumed_nonce_is_refused_after_reopen(db: &TestDb) {
        let nonce = unique_bytes32();
        let s = db.open().await;
        s.issuance()
            .submit(agent_issuance("people", "corp:j:K", nonce))
            .await
            .unwrap();
        s.shutdown().await;
        drop(s);
        let s = db.open().await;
        // Reopening warms the in-memory ledger from the database...
        assert!(s.issuance().nonce_held(&nonce, now_unix()));
        // ...and the database refuses the replay regardless.
        let replay = agent_issuance("people", "corp:j:K", nonce);
        assert_eq!(
            s.issuance().submit(replay.clone()).await,
            Err(WriteError::NonceReplayed)
        );
        assert!(!is_stored(&s, &replay.cert_row().serial).await);
        s.shutdown().await;
    }

    /// A second DA reusing a consumed nonce carries another expiry: still a
    /// replay. (SQLite keys nonce rows by expiry minute first; the commit
    /// looks in every live minute, earlier and later ones.)
    pub async fn rejects_a_nonce_consumed_under_another_expiry(db: &TestDb) {
        let s = db.open().await;
        for (first, second) in [(3600, 120), (120, 3600)] {
            let nonce = unique_bytes32();
            let mut consumed = agent_issuance("people", "corp:e:K", nonce);
            consumed.nonce.as_mut().unwrap().expires_at = now_unix() + first;
            s.issuance().submit(consumed).await.unwrap();
            let mut replay = agent_issuance("people", "corp:e:K", nonce);
            replay.nonce.as_mut().unwrap().expires_at = now_unix() + second;
            assert_eq!(
                s.issuance().submit(replay.clone()).await,
                Err(WriteError::NonceReplayed),
                "consumed expiring in {first} s, replayed expiring in {second} s"
            );
            assert!(!is_stored(&s, &replay.cert_row().serial).await);
        }
        s.shutdown().await;
    }

    pub async fn two_stores_on_one_database_accept_a_nonce_once(db: &TestDb) {
        // Two nodes sharing one database: each has its own ledger, so only
        // the database's unique constraint can settle the race.
        let node_a = db.open().await;
        let node_b = db.open().await;
        for _round in 0..20 {
            let nonce = unique_bytes32();
            let ra = agent_issuance("people", "corp:k:K", nonce);
            let rb = agent_issuance("people", "corp:k:K", nonce);
            let (a, b) = tokio::join!(
                {
                    let s = node_a.clone();
                    tokio::spawn(async move { s.issuance().submit(ra).await })
                },
                {
                    let s = node_b.clone();
                    tokio::spawn(async move { s.issuance().submit(rb).await })
                },
            );
            let results = [a.unwrap(), b.unwrap()];
            let ok = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(ok, 1, "{results:?}");
            assert!(results.contains(&Err(WriteError::NonceReplayed)));
        }
        let agents = node_a
            .certs()
            .list_certs(&CertFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(agents.len(), 20);
        node_a.shutdown().await;
        node_b.shutdown().await;
    }

    pub async fn full_queue_answers_overloaded_at_once(db: &TestDb) {
        let s = db
            .open_with(StoreOptions {
                max_pending: 2,
                ..Default::default()
            })
            .await;
        let mut tasks = Vec::new();
        for _ in 0..300 {
            let rec = agent_issuance("people", "corp:l:K", unique_bytes32());
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                // Consume the nonce like the server does, to check that a
                // refused request gives it back.
                s.issuance()
                    .reserve_nonce(
                        &rec.nonce.as_ref().unwrap().nonce,
                        now_unix() + 300,
                        now_unix(),
                    )
                    .unwrap()
                    .hand_over();
                (rec.clone(), s.issuance().submit(rec).await)
            }));
        }
        let mut overloaded = 0;
        for t in tasks {
            let (rec, r) = t.await.unwrap();
            let stored = is_stored(&s, &rec.cert_row().serial).await;
            match r {
                Ok(()) => assert!(stored),
                Err(WriteError::Overloaded { retry_after }) => {
                    overloaded += 1;
                    assert!(retry_after >= Duration::from_secs(1));
                    assert!(!stored);
                    assert!(
                        !s.issuance()
                            .nonce_held(&rec.nonce.unwrap().nonce, now_unix()),
                        "nonce of a refused request is released"
                    );
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert!(
            overloaded > 0,
            "300 concurrent submits never overflowed max_pending = 2"
        );
        assert_eq!(s.issuance().stats().pending, 0);
        s.shutdown().await;
    }

    pub async fn buffered_mode_acknowledges_early_and_persists_on_shutdown(db: &TestDb) {
        let s = db
            .open_with(StoreOptions {
                durability: Durability::Buffered,
                ..Default::default()
            })
            .await;
        let mut serials = Vec::new();
        for _ in 0..200 {
            let rec = agent_issuance("people", "corp:m:K", unique_bytes32());
            serials.push(rec.cert_row().serial.clone());
            s.issuance().submit(rec).await.unwrap();
        }
        s.shutdown().await;
        drop(s);
        let s = db.open().await;
        for serial in &serials {
            assert!(
                s.certs()
                    .get_cert("people", serial)
                    .await
                    .unwrap()
                    .is_some(),
                "buffered record lost at graceful shutdown"
            );
        }
        s.shutdown().await;
    }

    pub async fn shutdown_drains_queue_and_refuses_new_submits(db: &TestDb) {
        let s = db.open().await;
        let mut tasks = Vec::new();
        for _ in 0..100 {
            let s2 = s.clone();
            let rec = person_issuance("people", "corp:n:K");
            tasks.push(tokio::spawn(async move { s2.issuance().submit(rec).await }));
        }
        tokio::task::yield_now().await;
        s.shutdown().await;
        let mut ok = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(()) => ok += 1,
                Err(e) => assert_eq!(e, WriteError::ShuttingDown),
            }
        }
        assert_eq!(
            s.issuance()
                .submit(person_issuance("people", "corp:n:K"))
                .await,
            Err(WriteError::ShuttingDown)
        );
        drop(s);
        let s = db.open().await;
        let stored = s
            .certs()
            .list_certs(&CertFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            stored.len(),
            ok,
            "every acknowledged submit is stored, nothing else"
        );
        s.shutdown().await;
    }

    pub async fn expired_nonce_rows_are_pruned(db: &TestDb) {
        let s = db.open().await;
        let old = unique_bytes32();
        let live = unique_bytes32();
        let mut rec = agent_issuance("people", "corp:o:K", old);
        // Long enough ago that its whole expiry minute has ended (SQLite
        // prunes by the minute).
        rec.nonce.as_mut().unwrap().expires_at = now_unix() - 120;
        s.issuance().submit(rec).await.unwrap();
        s.issuance()
            .submit(agent_issuance("people", "corp:o:K", live))
            .await
            .unwrap();
        assert_eq!(
            s.issuance().prune_expired_nonces(now_unix()).await.unwrap(),
            1
        );
        assert!(!s.issuance().nonce_consumed(&old).await.unwrap());
        assert!(s.issuance().nonce_consumed(&live).await.unwrap());
        s.shutdown().await;
    }

    pub async fn reopening_applies_no_migration_twice(db: &TestDb) {
        let a = db.open().await;
        a.accounts()
            .create_user(&new_user("zed", Role::Admin))
            .await
            .unwrap();
        let b: Arc<Store> = db.open().await;
        assert_eq!(b.accounts().list_users().await.unwrap().len(), 1);
        a.shutdown().await;
        b.shutdown().await;
    }

    pub async fn full_cert_window_evicts_expired_then_answers_overloaded(db: &TestDb) {
        let s = db
            .open_with(StoreOptions {
                max_certs: 2,
                cert_grace: Duration::ZERO,
                ..Default::default()
            })
            .await;
        let mut expired = person_issuance("people", "corp:w:K");
        expired.cert_row_mut().not_after = now_unix() - 10;
        s.issuance().submit(expired).await.unwrap();
        s.issuance()
            .submit(person_issuance("people", "corp:w:K"))
            .await
            .unwrap();
        // Full: the expired certificate makes room.
        s.issuance()
            .submit(person_issuance("people", "corp:w:K"))
            .await
            .unwrap();
        assert_eq!(s.issuance().memory_use().window_evictions, 1);
        // Full of live certificates: refused, not stored, nonce released.
        let nonce = unique_bytes32();
        s.issuance()
            .reserve_nonce(&nonce, now_unix() + 300, now_unix())
            .unwrap()
            .hand_over();
        let refused = agent_issuance("people", "corp:w:K", nonce);
        assert!(matches!(
            s.issuance().submit(refused.clone()).await,
            Err(WriteError::Overloaded { .. })
        ));
        assert!(!is_stored(&s, &refused.cert_row().serial).await);
        assert!(!s.issuance().nonce_held(&nonce, now_unix()));
        assert_eq!(s.issuance().memory_use().recent_certs, 2);
        s.shutdown().await;
    }

    /// A standing read before a revocation (SQLite keeps it in memory) must
    /// not outlive the revocation: not on the node that revoked, and not on
    /// a second store on the same database once it has seen the write.
    pub async fn a_revocation_is_seen_by_the_next_standing_read(db: &TestDb) {
        let s = db.open().await;
        let other = db.open().await;
        let uid = "corp:standing:K";
        let person = person_issuance("people", uid);
        let agent = agent_issuance("people", uid, unique_bytes32());
        s.issuance().submit(person.clone()).await.unwrap();
        s.issuance().submit(agent.clone()).await.unwrap();
        for store in [&s, &other] {
            for serial in [&person.cert_row().serial, &agent.cert_row().serial] {
                let st = store.certs().cert_status("people", serial).await.unwrap();
                assert_eq!(st.unwrap().status, CertStatus::Valid);
            }
        }
        s.certs()
            .revoke_cert(
                "people",
                &person.cert_row().serial,
                "keyCompromise",
                now_unix(),
            )
            .await
            .unwrap()
            .unwrap();
        for serial in [&person.cert_row().serial, &agent.cert_row().serial] {
            let st = s.certs().cert_status("people", serial).await.unwrap();
            assert_eq!(st.unwrap().status, CertStatus::Revoked, "{serial}");
        }
        // The other store notices the foreign commit within its probe period.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let st = other
                .certs()
                .cert_status("people", &agent.cert_row().serial)
                .await
                .unwrap();
            if st.unwrap().status == CertStatus::Revoked {
                break;
            }
            assert!(std::time::Instant::now() < until, "stale standing kept");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        s.shutdown().await;
        other.shutdown().await;
    }

    /// A DA redeemed for a token, reserved and handed over as the server
    /// does: once `submit` answers, the nonce is in the database (and stays
    /// there across a restart) and stays consumed in the ledger, and no
    /// certificate row or window slot was taken.
    pub async fn a_nonce_only_record_commits_durably(db: &TestDb) {
        let nonce = unique_bytes32();
        let s = db.open().await;
        let before = s.issuance().stats();
        let record = nonce_only_issuance("corp:tok:K", nonce);
        let expires_at = record.nonce.as_ref().unwrap().expires_at;
        s.issuance()
            .reserve_nonce(&nonce, expires_at, now_unix())
            .unwrap()
            .hand_over();
        s.issuance().submit(record).await.unwrap();
        assert!(s.issuance().nonce_consumed(&nonce).await.unwrap());
        assert!(s.issuance().nonce_held(&nonce, now_unix()));
        assert_eq!(
            s.issuance()
                .reserve_nonce(&nonce, now_unix() + 300, now_unix())
                .err(),
            Some(NonceError::Replayed)
        );
        let after = s.issuance().stats();
        assert_eq!(after.commits - before.commits, 1);
        assert_eq!(
            after.rows, before.rows,
            "a nonce-only record wrote a certificate row"
        );
        assert_eq!(s.issuance().memory_use().recent_certs, 0);
        let listed = s
            .certs()
            .list_certs(&CertFilter {
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(listed.is_empty(), "{listed:?}");
        s.shutdown().await;
        drop(s);
        let s = db.open().await;
        assert!(s.issuance().nonce_consumed(&nonce).await.unwrap());
        assert_eq!(
            s.issuance()
                .submit(nonce_only_issuance("corp:tok:K", nonce))
                .await,
            Err(WriteError::NonceReplayed)
        );
        s.shutdown().await;
    }

    pub async fn rejects_a_record_with_neither_certificate_nor_nonce(db: &TestDb) {
        let s = db.open().await;
        let empty = IssuanceRecord {
            cert: None,
            nonce: None,
            audit: None,
            issued_by: None,
        };
        assert_eq!(
            s.issuance().submit(empty).await,
            Err(WriteError::EmptyRecord)
        );
        assert_eq!(s.issuance().stats().commits, 0);
        assert!(s.issuance().healthy());
        s.shutdown().await;
    }

    pub async fn rejects_a_nonce_only_record_whose_nonce_a_certificate_consumed(db: &TestDb) {
        let s = db.open().await;
        let nonce = unique_bytes32();
        let agent = agent_issuance("people", "corp:x:K", nonce);
        s.issuance().submit(agent.clone()).await.unwrap();
        assert_eq!(
            s.issuance()
                .submit(nonce_only_issuance("corp:x:K", nonce))
                .await,
            Err(WriteError::NonceReplayed)
        );
        // And after a restart, whose ledger starts from the database.
        s.shutdown().await;
        drop(s);
        let s = db.open().await;
        assert_eq!(
            s.issuance()
                .submit(nonce_only_issuance("corp:x:K", nonce))
                .await,
            Err(WriteError::NonceReplayed)
        );
        assert!(is_stored(&s, &agent.cert_row().serial).await);
        s.shutdown().await;
    }

    pub async fn rejects_a_certificate_whose_nonce_a_nonce_only_record_consumed(db: &TestDb) {
        let s = db.open().await;
        let nonce = unique_bytes32();
        s.issuance()
            .submit(nonce_only_issuance("corp:y:K", nonce))
            .await
            .unwrap();
        let refused = agent_issuance("people", "corp:y:K", nonce);
        assert_eq!(
            s.issuance().submit(refused.clone()).await,
            Err(WriteError::NonceReplayed)
        );
        assert!(
            !is_stored(&s, &refused.cert_row().serial).await,
            "a replayed request's certificate must not be stored"
        );
        assert_eq!(
            s.certs()
                .count_active_agents("corp:y:K", now_unix())
                .await
                .unwrap(),
            0
        );
        s.shutdown().await;
    }

    /// Nonce-only, agent and person records submitted together share
    /// commits and all land: every certificate stored, every nonce
    /// consumed, only certificates counted as rows.
    pub async fn a_batch_mixing_nonce_only_and_certificate_records_commits_all(db: &TestDb) {
        let s = db.open().await;
        let n = 300;
        let mut tasks = Vec::new();
        let (mut serials, mut nonces) = (Vec::new(), Vec::new());
        for i in 0..n {
            let rec = match i % 3 {
                0 => nonce_only_issuance("corp:mix:K", unique_bytes32()),
                1 => agent_issuance("people", "corp:mix:K", unique_bytes32()),
                _ => person_issuance("people", "corp:mix:K"),
            };
            if let Some(c) = &rec.cert {
                serials.push(c.serial.clone());
            }
            if let Some(nr) = &rec.nonce {
                nonces.push(nr.nonce);
            }
            let s = s.clone();
            tasks.push(tokio::spawn(async move { s.issuance().submit(rec).await }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(()));
        }
        let stats = s.issuance().stats();
        assert_eq!(stats.rows, serials.len() as u64);
        assert!(
            stats.commits <= n as u64 / 2,
            "{} commits for {n} records: not grouped",
            stats.commits
        );
        for serial in &serials {
            assert!(
                s.certs()
                    .get_cert("people", serial)
                    .await
                    .unwrap()
                    .is_some()
            );
        }
        for nonce in &nonces {
            assert!(s.issuance().nonce_consumed(nonce).await.unwrap());
        }
        s.shutdown().await;
    }

    /// Two nodes sharing one database race one DA, one redeeming it for a
    /// token and the other for a certificate: each has its own ledger, so
    /// only the database's unique key settles it, and exactly one wins.
    pub async fn two_stores_on_one_database_accept_a_nonce_once_for_a_token_or_a_certificate(
        db: &TestDb,
    ) {
        let node_a = db.open().await;
        let node_b = db.open().await;
        let rounds = 20;
        let mut certs_won = 0;
        for round in 0..rounds {
            let nonce = unique_bytes32();
            let token = nonce_only_issuance("corp:race:K", nonce);
            let cert = agent_issuance("people", "corp:race:K", nonce);
            let serial = cert.cert_row().serial.clone();
            // Each node takes each side in turn.
            let (token_node, cert_node) = if round % 2 == 0 {
                (node_a.clone(), node_b.clone())
            } else {
                (node_b.clone(), node_a.clone())
            };
            let (t, c) = tokio::join!(
                tokio::spawn(async move { token_node.issuance().submit(token).await }),
                tokio::spawn(async move { cert_node.issuance().submit(cert).await }),
            );
            let results = [t.unwrap(), c.unwrap()];
            assert_eq!(
                results.iter().filter(|r| r.is_ok()).count(),
                1,
                "{results:?}"
            );
            assert!(results.contains(&Err(WriteError::NonceReplayed)));
            let stored = is_stored(&node_a, &serial).await;
            assert_eq!(stored, results[1].is_ok(), "{results:?}");
            certs_won += usize::from(stored);
            assert!(node_b.issuance().nonce_consumed(&nonce).await.unwrap());
        }
        let listed = node_a
            .certs()
            .list_certs(&CertFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), certs_won);
        node_a.shutdown().await;
        node_b.shutdown().await;
    }
}
