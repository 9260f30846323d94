//! The transparency log against every backend (see `common`): a certificate
//! row is its own leaf, a replay adds none, every open has its own tree,
//! proofs verify with the RFC 9162 algorithms, verification names a
//! changed leaf, a swapped pair and truncation, and retention keeps every
//! remaining leaf provable while the stored nodes stay few.

mod common;

matrix!(
    an_issuance_is_a_leaf_with_an_inclusion_proof,
    a_replayed_nonce_adds_no_leaf,
    each_open_starts_its_own_tree,
    consistency_proofs_verify_between_any_two_sizes,
    rejects_a_changed_leaf,
    rejects_a_swapped_pair,
    rejects_truncation,
    pruned_leaves_leave_the_rest_provable,
    old_events_are_archived_then_deleted,
    the_log_filters_by_principal_agent_event_and_time,
    pages_of_one_instant_list_every_event_once,
);

mod scenarios {
    use std::collections::BTreeMap;
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

    /// One committer, so one tree per open (`<name>.<run>.0`).
    fn node(name: &str) -> StoreOptions {
        StoreOptions {
            audit_node: Some(name.into()),
            committers: 1,
            ..StoreOptions::default()
        }
    }

    async fn all_rows(s: &Store) -> Vec<AuditEntry> {
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

    async fn only_tree(s: &Store) -> TreeRow {
        let trees: Vec<TreeRow> = s
            .log()
            .trees()
            .await
            .unwrap()
            .into_iter()
            .filter(|t| t.size > 0)
            .collect();
        assert_eq!(trees.len(), 1, "{trees:?}");
        trees.into_iter().next().unwrap()
    }

    /// Issues `n` agent certificates one commit after another (so leaf
    /// order is submission order), returning their serials.
    async fn issue(s: &Store, n: usize) -> Vec<String> {
        let mut serials = Vec::new();
        for _ in 0..n {
            let rec = agent_issuance("people", "corp:a:K", unique_bytes32()).issued_by(Some(1));
            serials.push(rec.cert_row().serial.clone());
            s.issuance().submit(rec).await.unwrap();
        }
        serials
    }

    fn check_inclusion(p: &InclusionProof) {
        let leaf = warrant_tlog::leaf_hash(&p.leaf);
        warrant_tlog::verify_inclusion(p.index, p.size, &leaf, &p.proof, &p.root)
            .unwrap_or_else(|e| panic!("leaf {} of {}: {e:?}", p.index, p.size));
    }

    pub async fn an_issuance_is_a_leaf_with_an_inclusion_proof(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let rec = agent_issuance("people", "corp:a:K", unique_bytes32()).issued_by(Some(1));
        let serial = rec.cert_row().serial.clone();
        s.issuance().submit(rec).await.unwrap();
        s.issuance()
            .submit(IssuanceRecord::audit_only(event("login", "", "", now_ms())))
            .await
            .unwrap();
        let tree = only_tree(&s).await;
        assert_eq!(tree.size, 2);
        assert!(tree.name.starts_with("n1.") && tree.name.ends_with(".0"));
        let (t, index) = s.log().find_cert("people", &serial).await.unwrap();
        assert_eq!((t.name.as_str(), index), (tree.name.as_str(), 0));
        let p = s.log().inclusion(&t, index, None).await.unwrap();
        check_inclusion(&p);
        assert_eq!(p.root, tree.root);
        match &p.entry {
            LeafEntry::Cert(c) => {
                assert_eq!(c.serial, serial);
                assert_eq!(c.issued_by, Some(1));
                assert_eq!(c.key_hash, "07".repeat(32));
            }
            other => panic!("expected a certificate leaf, got {other:?}"),
        }
        // The listing reads the issuance from the certificate row.
        let rows = all_rows(&s).await;
        let kinds: Vec<&str> = rows.iter().map(|r| r.event.event.as_str()).collect();
        assert!(
            kinds.contains(&"issue") && kinds.contains(&"login"),
            "{kinds:?}"
        );
        let report = s
            .log()
            .verify_tree(&t, &[(2, tree.root)], None, None)
            .await
            .unwrap();
        assert_eq!((report.size, report.live_leaves), (2, 2));
        s.shutdown().await;
    }

    pub async fn a_replayed_nonce_adds_no_leaf(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let nonce = unique_bytes32();
        s.issuance()
            .submit(agent_issuance("people", "corp:a:K", nonce))
            .await
            .unwrap();
        // A second store (another node) bypasses the first one's ledger.
        let other = db.open_with(node("n2")).await;
        assert!(matches!(
            other
                .issuance()
                .submit(agent_issuance("people", "corp:a:K", nonce))
                .await,
            Err(WriteError::NonceReplayed)
        ));
        other
            .issuance()
            .submit(IssuanceRecord::audit_only(event("login", "", "", now_ms())))
            .await
            .unwrap();
        let trees = s.log().trees().await.unwrap();
        let sizes: BTreeMap<String, u64> = trees
            .iter()
            .map(|t| (t.name.split('.').next().unwrap().to_string(), t.size))
            .collect();
        assert_eq!(sizes.get("n1"), Some(&1));
        assert_eq!(sizes.get("n2"), Some(&1), "the replay took no leaf");
        for t in &trees {
            s.log().verify_tree(t, &[], None, None).await.unwrap();
        }
        other.shutdown().await;
        s.shutdown().await;
    }

    pub async fn each_open_starts_its_own_tree(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        issue(&s, 3).await;
        s.shutdown().await;
        drop(s);
        let s = db.open_with(node("n1")).await;
        let twin = db.open_with(node("n1")).await;
        issue(&s, 2).await;
        issue(&twin, 2).await;
        let mut sizes: Vec<u64> = s
            .log()
            .trees()
            .await
            .unwrap()
            .iter()
            .map(|t| t.size)
            .collect();
        sizes.sort();
        assert_eq!(sizes, vec![2, 2, 3]);
        twin.shutdown().await;
        s.shutdown().await;
    }

    pub async fn consistency_proofs_verify_between_any_two_sizes(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let mut roots = vec![];
        for _ in 0..12 {
            issue(&s, 1).await;
            let t = only_tree(&s).await;
            roots.push((t.size, t.root));
        }
        let t = only_tree(&s).await;
        for (m, rm) in &roots {
            for (n, rn) in roots.iter().filter(|(n, _)| n >= m) {
                let p = s.log().consistency(&t, *m, Some(*n)).await.unwrap();
                assert_eq!((&p.from_root, &p.to_root), (rm, rn));
                warrant_tlog::verify_consistency(*m, *n, rm, rn, &p.proof)
                    .unwrap_or_else(|e| panic!("{m}..{n}: {e:?}"));
            }
        }
        assert!(matches!(
            s.log().consistency(&t, 0, None).await,
            Err(LogError::BadRange { .. })
        ));
        s.shutdown().await;
    }

    pub async fn rejects_a_changed_leaf(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        // More than a block (2^8 leaves): the block's stored hash names it.
        let serials = issue(&s, 300).await;
        let tree = only_tree(&s).await;
        let root = tree.root;
        s.log()
            .verify_tree(&tree, &[(300, root)], None, None)
            .await
            .unwrap();
        exec(
            db,
            &format!(
                "UPDATE warrant_certs SET capabilities = 'admin:everything' WHERE serial = '{}'",
                serials[10]
            ),
        )
        .await;
        match s.log().verify_tree(&tree, &[(300, root)], None, None).await {
            Err(LogBreak::ChangedLeaf { start, end, .. }) => assert_eq!((start, end), (0, 256)),
            other => panic!("expected a changed leaf, got {other:?}"),
        }
        // In the last, incomplete block: held to the checkpoint's root.
        exec(
            db,
            &format!(
                "UPDATE warrant_certs SET capabilities = 'admin:everything' WHERE serial = '{}'",
                serials[290]
            ),
        )
        .await;
        exec(
            db,
            &format!(
                "UPDATE warrant_certs SET capabilities = NULL WHERE serial = '{}'",
                serials[10]
            ),
        )
        .await;
        match s.log().verify_tree(&tree, &[(300, root)], None, None).await {
            Err(LogBreak::HeadMismatch { .. } | LogBreak::RootMismatch { .. }) => {}
            other => panic!("expected a changed leaf, got {other:?}"),
        }
        s.shutdown().await;
    }

    pub async fn rejects_a_swapped_pair(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let serials = issue(&s, 9).await;
        let tree = only_tree(&s).await;
        // Two rows trade places: the same leaves, in another order.
        exec(
            db,
            &format!(
                "UPDATE warrant_certs SET log_index = 100 WHERE serial = '{}'",
                serials[2]
            ),
        )
        .await;
        exec(
            db,
            &format!(
                "UPDATE warrant_certs SET log_index = 2 WHERE serial = '{}'",
                serials[6]
            ),
        )
        .await;
        exec(
            db,
            &format!(
                "UPDATE warrant_certs SET log_index = 6 WHERE serial = '{}'",
                serials[2]
            ),
        )
        .await;
        match s
            .log()
            .verify_tree(&tree, &[(9, tree.root)], None, None)
            .await
        {
            Err(LogBreak::Reordered { a, b, .. }) => assert_eq!((a, b), (2, 6)),
            other => panic!("expected a reordering, got {other:?}"),
        }
        // Without a saved checkpoint, the writer's recorded head names it.
        match s.log().verify_tree(&tree, &[], None, None).await {
            Err(LogBreak::Reordered { a, b, .. }) => assert_eq!((a, b), (2, 6)),
            other => panic!("expected a reordering, got {other:?}"),
        }
        s.shutdown().await;
    }

    pub async fn rejects_truncation(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let serials = issue(&s, 5).await;
        let tree = only_tree(&s).await;
        // A checkpoint larger than the tree.
        match s
            .log()
            .verify_tree(&tree, &[(7, tree.root)], None, None)
            .await
        {
            Err(LogBreak::Truncated { size, expected, .. }) => assert_eq!((size, expected), (5, 7)),
            other => panic!("expected truncation, got {other:?}"),
        }
        // The newest row deleted behind the log's back.
        exec(
            db,
            &format!("DELETE FROM warrant_certs WHERE serial = '{}'", serials[4]),
        )
        .await;
        match s
            .log()
            .verify_tree(&tree, &[(5, tree.root)], None, None)
            .await
        {
            Err(LogBreak::Missing { start, .. }) => assert_eq!(start, 4),
            other => panic!("expected missing leaves, got {other:?}"),
        }
        s.shutdown().await;
    }

    pub async fn pruned_leaves_leave_the_rest_provable(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let now = now_unix();
        // 600 leaves: most expire long ago, every 37th lives on.
        let mut live = Vec::new();
        for i in 0..600 {
            let mut rec = agent_issuance("people", "corp:a:K", unique_bytes32());
            if i % 37 == 0 {
                live.push(rec.cert_row().serial.clone());
            } else {
                rec.cert_row_mut().not_after = now - 10 * 86_400;
            }
            s.issuance().submit(rec).await.unwrap();
        }
        let tree = only_tree(&s).await;
        let dir = tempfile::tempdir().unwrap();
        let archive = Arc::new(Archive::open(dir.path()).unwrap());
        let out = s
            .retention()
            .prune(now, 86_400, 100, Some(&archive))
            .await
            .unwrap();
        assert_eq!(out.rows, 600 - live.len() as u64);
        // Every certificate left still proves its inclusion in the same root.
        for serial in &live {
            let (t, index) = s.log().find_cert("people", serial).await.unwrap();
            let p = s.log().inclusion(&t, index, None).await.unwrap();
            check_inclusion(&p);
            assert_eq!(p.root, tree.root);
        }
        // The whole tree recomputes from what is left, and from the archive.
        s.log()
            .verify_tree(&tree, &[(600, tree.root)], None, None)
            .await
            .unwrap();
        let archived: BTreeMap<u64, [u8; 32]> = archive
            .read_log()
            .unwrap()
            .into_iter()
            .filter(|l| l.tree == tree.name)
            .map(|l| (l.index, warrant_tlog::leaf_hash(&l.bytes().unwrap())))
            .collect();
        assert_eq!(archived.len(), 600 - live.len());
        s.log()
            .verify_tree(&tree, &[(600, tree.root)], None, Some(&archived))
            .await
            .unwrap();
        // An archived leaf changed is named.
        let mut forged = archived.clone();
        let first = *forged.keys().next().unwrap();
        forged.insert(first, [9; 32]);
        assert!(
            s.log()
                .verify_tree(&tree, &[(600, tree.root)], None, Some(&forged))
                .await
                .is_err()
        );
        s.shutdown().await;
    }

    pub async fn old_events_are_archived_then_deleted(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let day_ms = 86_400_000;
        let now = now_ms();
        for at in [now - 3 * day_ms, now - 2 * day_ms, now] {
            s.issuance()
                .submit(IssuanceRecord::audit_only(event("login", "", "", at)))
                .await
                .unwrap();
        }
        let tree = only_tree(&s).await;
        let dir = tempfile::tempdir().unwrap();
        let archive = Arc::new(Archive::open(dir.path()).unwrap());
        let (deleted, archived) = s
            .retention()
            .prune_log_events(now - day_ms, 1, Some(&archive))
            .await
            .unwrap();
        assert_eq!((deleted, archived), (2, 2));
        let left = all_rows(&s).await;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].index, 2);
        // The leaf left still proves its place in the same root.
        let p = s.log().inclusion(&tree, 2, None).await.unwrap();
        check_inclusion(&p);
        assert_eq!(p.root, tree.root);
        s.log()
            .verify_tree(&tree, &[(3, tree.root)], None, None)
            .await
            .unwrap();
        assert_eq!(archive.read_log().unwrap().len(), 2);
        s.shutdown().await;
    }

    pub async fn the_log_filters_by_principal_agent_event_and_time(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let t = now_ms();
        for (kind, p, a, at) in [
            ("revoke", "corp:a:K", "bot", t - 3000),
            ("refuse", "corp:a:K", "bot", t - 2000),
            ("revoke", "corp:b:K", "other", t - 1000),
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
        // Issuances come from the certificate rows, filtered the same way.
        let rec = agent_issuance("people", "corp:c:K", unique_bytes32());
        s.issuance().submit(rec).await.unwrap();
        let issues = s
            .audit()
            .query(&AuditFilter {
                event: Some("issue".into()),
                principal_uid: Some("corp:c:K".into()),
                limit: 10,
                ..AuditFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(issues.len(), 1);
        s.shutdown().await;
    }

    /// Offset pages across events (and certificates) that share one instant
    /// list each of them exactly once: a page's LIMIT cutting inside the
    /// instant must not keep a different part of it than the next page skips.
    pub async fn pages_of_one_instant_list_every_event_once(db: &TestDb) {
        let s = db.open_with(node("n1")).await;
        let t = now_ms();
        const N: u64 = 30;
        for _ in 0..N {
            s.issuance()
                .submit(IssuanceRecord::audit_only(event("login", "", "", t)))
                .await
                .unwrap();
        }
        for _ in 0..N {
            let rec = agent_issuance("people", "corp:p:K", unique_bytes32());
            s.issuance().submit(rec).await.unwrap();
        }
        for kind in ["login", "issue"] {
            let mut seen = BTreeMap::new();
            for page in 0..(N / 7 + 1) {
                let rows = s
                    .audit()
                    .query(&AuditFilter {
                        event: Some(kind.into()),
                        limit: 7,
                        offset: page * 7,
                        ..AuditFilter::default()
                    })
                    .await
                    .unwrap();
                for r in rows {
                    *seen.entry((r.tree, r.index)).or_insert(0) += 1;
                }
            }
            assert_eq!(seen.len() as u64, N, "{kind}: every event listed");
            assert!(
                seen.values().all(|n| *n == 1),
                "{kind}: listed twice: {seen:?}"
            );
        }
        s.shutdown().await;
    }
}
