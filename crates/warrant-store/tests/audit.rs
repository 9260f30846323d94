//! The audit log's hash chains against every backend (see `common`): rows
//! ride with what they record, a replay writes none, every open (and every
//! committer) has its own chain, a changed byte is named, and retention
//! archives before it deletes.

mod common;

matrix!(
    an_issuance_and_its_audit_row_commit_together,
    a_replayed_nonce_writes_no_audit_row,
    each_open_starts_its_own_chains,
    rejects_a_chain_with_a_changed_byte,
    old_audit_rows_are_archived_then_deleted,
    the_log_filters_by_principal_agent_event_and_time,
);

mod scenarios {
    use std::sync::Arc;

    use crate::common::*;
    use sqlx::Executor;
    use warrant_store::*;

    fn event(kind: &str, principal: &str, agent: &str, at_ms: i64) -> AuditEvent {
        AuditEvent {
            at_ms,
            event: kind.into(),
            actor: "admin".into(),
            principal_uid: principal.into(),
            agent_id: agent.into(),
            ca: String::new(),
            serial: String::new(),
            detail: r#"{"k":1}"#.into(),
        }
    }

    fn now_ms() -> i64 {
        now_unix() * 1000
    }

    /// One committer, so one chain per open (`<name>.<run>.0`); the server
    /// databases run several by default, each with its own chain.
    fn node(name: &str) -> StoreOptions {
        StoreOptions {
            audit_node: Some(name.into()),
            committers: 1,
            ..StoreOptions::default()
        }
    }

    async fn all_rows(s: &Store) -> Vec<AuditRow> {
        s.audit()
            .query(&AuditFilter {
                limit: 10_000,
                ..AuditFilter::default()
            })
            .await
            .unwrap()
    }

    /// Runs one statement on the test database outside the store.
    async fn exec(db: &TestDb, sql: &str) {
        match db.kind {
            BackendKind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.dsn))
                    .await
                    .unwrap();
                pool.execute(sql).await.unwrap();
                pool.close().await;
            }
            BackendKind::Postgres => {
                let pool = sqlx::PgPool::connect(&db.dsn).await.unwrap();
                pool.execute(sql).await.unwrap();
                pool.close().await;
            }
            BackendKind::MySql => {
                let pool = sqlx::MySqlPool::connect(&db.dsn).await.unwrap();
                pool.execute(sql).await.unwrap();
                pool.close().await;
            }
        }
    }

    pub async fn an_issuance_and_its_audit_row_commit_together(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let rec = agent_issuance("people", "corp:a:K", unique_bytes32());
        let serial = rec.cert_row().serial.clone();
        let ev = AuditEvent {
            serial: serial.clone(),
            ca: "people".into(),
            ..event("issue", "corp:a:K", "bot", now_ms())
        };
        s.issuance()
            .submit(rec.with_audit(ev.clone()))
            .await
            .unwrap();
        s.issuance()
            .submit(IssuanceRecord::audit_only(event("login", "", "", now_ms())))
            .await
            .unwrap();
        let rows = all_rows(&s).await;
        assert_eq!(rows.len(), 2);
        let issue = rows.iter().find(|r| r.event.event == "issue").unwrap();
        assert_eq!(issue.event, ev);
        assert!(
            issue.chain.starts_with("n1.") && issue.chain.ends_with(".0"),
            "{}",
            issue.chain
        );
        assert!(is_stored(&s, &serial).await);
        let chains = s.audit().verify().await.unwrap();
        assert_eq!(chains.len(), 1);
        assert_eq!((chains[0].first_seq, chains[0].last_seq), (1, 2));
        s.shutdown().await;
    }

    pub async fn a_replayed_nonce_writes_no_audit_row(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let nonce = unique_bytes32();
        let first = agent_issuance("people", "corp:a:K", nonce).with_audit(event(
            "issue",
            "corp:a:K",
            "one",
            now_ms(),
        ));
        s.issuance().submit(first).await.unwrap();
        // A second store (another node) bypasses the first one's ledger.
        let other = db.open_with(node("n2")).await;
        let replay = agent_issuance("people", "corp:a:K", nonce).with_audit(event(
            "issue",
            "corp:a:K",
            "two",
            now_ms(),
        ));
        assert!(matches!(
            other.issuance().submit(replay).await,
            Err(WriteError::NonceReplayed)
        ));
        let agents: Vec<String> = all_rows(&s)
            .await
            .into_iter()
            .map(|r| r.event.agent_id)
            .collect();
        assert_eq!(agents, vec!["one".to_string()]);
        // The replayed batch left n2's chain where it was: it still verifies
        // and continues at row 1.
        other
            .issuance()
            .submit(IssuanceRecord::audit_only(event("login", "", "", now_ms())))
            .await
            .unwrap();
        let chains = s.audit().verify().await.unwrap();
        assert_eq!(chains.len(), 2);
        assert!(chains.iter().all(|c| c.first_seq == 1 && c.rows == 1));
        other.shutdown().await;
        s.shutdown().await;
    }

    pub async fn each_open_starts_its_own_chains(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        for _ in 0..3 {
            s.issuance()
                .submit(IssuanceRecord::audit_only(event("login", "", "", now_ms())))
                .await
                .unwrap();
        }
        s.shutdown().await;
        drop(s);
        // A restart, and a second process under the same node name.
        let s = db.open_with(node("n1")).await;
        let twin = db.open_with(node("n1")).await;
        for store in [&s, &twin] {
            for _ in 0..2 {
                store
                    .issuance()
                    .submit(IssuanceRecord::audit_only(event(
                        "logout",
                        "",
                        "",
                        now_ms(),
                    )))
                    .await
                    .unwrap();
            }
        }
        let mut chains = s.audit().verify().await.unwrap();
        chains.sort_by_key(|c| c.rows);
        assert_eq!(
            chains
                .iter()
                .map(|c| (c.first_seq, c.last_seq))
                .collect::<Vec<_>>(),
            vec![(1, 2), (1, 2), (1, 3)]
        );
        assert!(chains.iter().all(|c| c.chain.starts_with("n1.")));
        twin.shutdown().await;
        s.shutdown().await;
    }

    pub async fn rejects_a_chain_with_a_changed_byte(db: &TestDb) {
        // The default committers: on the server databases, several chains.
        let s = db
            .open_with(StoreOptions {
                audit_node: Some("n1".into()),
                ..StoreOptions::default()
            })
            .await;
        let writes = (0..8).map(|i| {
            let s = s.clone();
            async move {
                s.issuance()
                    .submit(IssuanceRecord::audit_only(event(
                        "issue",
                        "corp:a:K",
                        &format!("bot-{i}"),
                        now_ms(),
                    )))
                    .await
                    .unwrap()
            }
        });
        futures_join_all(writes).await;
        let chains = s.audit().verify().await.unwrap();
        assert_eq!(chains.iter().map(|c| c.rows).sum::<u64>(), 8);
        let target = all_rows(&s)
            .await
            .into_iter()
            .find(|r| r.event.agent_id == "bot-5")
            .unwrap();
        exec(
            db,
            &format!(
                "UPDATE warrant_audit SET agent_id = 'bot-X' WHERE chain = '{}' AND seq = {}",
                target.chain, target.seq
            ),
        )
        .await;
        match s.audit().verify().await {
            Err(AuditVerifyError::Broken(b)) => {
                assert_eq!(b.row(), (target.chain.as_str(), target.seq));
                assert!(matches!(b, ChainBreak::HashMismatch { .. }), "{b}");
            }
            other => panic!("expected a broken chain, got {other:?}"),
        }
        s.shutdown().await;
    }

    async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
        futs: impl Iterator<Item = F>,
    ) {
        let handles: Vec<_> = futs.map(tokio::spawn).collect();
        for h in handles {
            h.await.unwrap();
        }
    }

    pub async fn old_audit_rows_are_archived_then_deleted(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let day_ms = 86_400_000;
        let now = now_ms();
        for at in [now - 3 * day_ms, now - 2 * day_ms, now] {
            s.issuance()
                .submit(IssuanceRecord::audit_only(event("login", "", "", at)))
                .await
                .unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let archive = Arc::new(Archive::open(dir.path()).unwrap());
        let (deleted, archived) = s
            .retention()
            .prune_audit(now - day_ms, 1, Some(&archive))
            .await
            .unwrap();
        assert_eq!((deleted, archived), (2, 2));
        let left = all_rows(&s).await;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].seq, 3);
        // The row left anchors the chain.
        let chains = s.audit().verify().await.unwrap();
        assert_eq!((chains[0].first_seq, chains[0].rows), (3, 1));
        let files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("audit-") && n.ends_with(".jsonl.zst"))
            .collect();
        assert_eq!(files.len(), 2, "{files:?}");
        s.shutdown().await;
    }

    pub async fn the_log_filters_by_principal_agent_event_and_time(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let t = now_ms();
        for (kind, p, a, at) in [
            ("issue", "corp:a:K", "bot", t - 3000),
            ("refuse", "corp:a:K", "bot", t - 2000),
            ("issue", "corp:b:K", "other", t - 1000),
            ("login", "", "", t),
        ] {
            s.issuance()
                .submit(IssuanceRecord::audit_only(event(kind, p, a, at)))
                .await
                .unwrap();
        }
        let q = |f: AuditFilter| {
            let s = s.clone();
            async move {
                s.audit()
                    .query(&AuditFilter {
                        limit: if f.limit == 0 { 100 } else { f.limit },
                        ..f
                    })
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| r.event.at_ms - t)
                    .collect::<Vec<i64>>()
            }
        };
        let all = q(AuditFilter::default()).await;
        assert_eq!(all, vec![0, -1000, -2000, -3000], "newest first");
        let by_principal = q(AuditFilter {
            principal_uid: Some("corp:a:K".into()),
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(by_principal, vec![-2000, -3000]);
        let refusals = q(AuditFilter {
            event: Some("refuse".into()),
            agent_id: Some("bot".into()),
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(refusals, vec![-2000]);
        let window = q(AuditFilter {
            since_ms: Some(t - 2000),
            until_ms: Some(t),
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(window, vec![-1000, -2000]);
        let page = q(AuditFilter {
            limit: 1,
            offset: 1,
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(page, vec![-1000]);
        s.shutdown().await;
    }
}
