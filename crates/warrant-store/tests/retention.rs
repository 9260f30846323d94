//! Retention by expiry and the archive, against every backend (see
//! `common`). Time is moved by passing a later `now` to `prune`, so the
//! tests wait for nothing.

mod common;

matrix!(
    expired_rows_leave_and_the_archive_holds_exactly_them,
    revoked_rows_stay_on_the_crl_until_they_expire,
    short_lived_rows_leave_with_their_expiry_window,
    a_failed_archive_deletes_nothing,
    a_database_from_before_retention_is_brought_along,
    freed_pages_go_back_to_the_file_system_on_sqlite,
    expired_nonce_rows_are_pruned_in_batches,
);

mod scenarios {
    use std::collections::BTreeSet;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::common::*;
    use warrant_store::*;

    const MINUTE: i64 = 60;

    /// Expiry windows of a minute, as a compressed soak runs them.
    fn options() -> StoreOptions {
        StoreOptions {
            expiry_bucket: Duration::from_secs(MINUTE as u64),
            ..StoreOptions::default()
        }
    }

    /// An agent row created at `created_at`, expiring `life` seconds later.
    fn agent(created_at: i64, life: i64) -> IssuanceRecord {
        let mut rec = agent_issuance("people", "corp:ret:K", unique_bytes32());
        let row = rec.cert_row_mut();
        row.created_at = created_at;
        row.not_before = created_at;
        row.not_after = created_at + life;
        row.der = Vec::new();
        row.capabilities = Some(r#"[{"scheme_id":"s","capability_id":"read"}]"#.into());
        rec
    }

    async fn submit_all(s: &Store, recs: Vec<IssuanceRecord>) -> Vec<String> {
        let mut serials = Vec::new();
        for rec in recs {
            serials.push(rec.cert_row().serial.clone());
            s.issuance().submit(rec).await.unwrap();
        }
        serials
    }

    async fn stored(s: &Store, serials: &[String]) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for serial in serials {
            if is_stored(s, serial).await {
                out.insert(serial.clone());
            }
        }
        out
    }

    /// Rows past the grace leave, in batches smaller than their number;
    /// younger ones stay; the archive holds exactly the rows that left, and
    /// a dropped DER stays dropped in it.
    pub async fn expired_rows_leave_and_the_archive_holds_exactly_them(db: &TestDb) {
        let s = db.open_with(options()).await;
        let now = now_unix();
        // First pass: makes the expiry windows around now (PostgreSQL).
        s.retention().prune(now, 0, 100, None).await.unwrap();
        let old = submit_all(&s, (0..25).map(|_| agent(now, 30)).collect()).await;
        let young = submit_all(&s, (0..5).map(|_| agent(now, 6 * MINUTE)).collect()).await;
        let mut person = person_issuance("people", "corp:ret:K");
        person.cert_row_mut().not_after = now + 10;
        person.cert_row_mut().created_at = now - 30 * 86_400;
        let person = submit_all(&s, vec![person]).await;

        let dir = tempfile::tempdir().unwrap();
        let archive = Arc::new(Archive::open(dir.path()).unwrap());
        // Five minutes later with a grace of one (cutoff: now + 4 min):
        // `old` and the person row expired before it, `young` after.
        let later = now + 5 * MINUTE;
        let out = s
            .retention()
            .prune(later, MINUTE, 10, Some(&archive))
            .await
            .unwrap();
        assert_eq!(out.rows, 26, "{out:?}");
        assert_eq!(out.archived, 26, "{out:?}");
        assert!(stored(&s, &old).await.is_empty());
        assert!(stored(&s, &person).await.is_empty());
        assert_eq!(stored(&s, &young).await.len(), 5);
        if db.kind == BackendKind::Postgres {
            assert!(out.partitions_dropped >= 1, "{out:?}");
        }

        let mut archived = Vec::new();
        for file in archive.day_files().unwrap() {
            archived.extend(archive.read_day(&file).unwrap());
        }
        let archived_serials: BTreeSet<String> =
            archived.iter().map(|a| a.serial.clone()).collect();
        let expected: BTreeSet<String> = old.iter().chain(&person).cloned().collect();
        assert_eq!(archived_serials, expected);
        assert_eq!(archived.len(), 26, "each row once");
        let agent_line = archived.iter().find(|a| a.serial == old[0]).unwrap();
        assert_eq!(agent_line.der, None);
        assert_eq!(agent_line.agent_id.as_deref().map(|_| ()), Some(()));
        assert_eq!(
            agent_line.capabilities.as_deref(),
            Some(r#"[{"scheme_id":"s","capability_id":"read"}]"#)
        );
        let person_line = archived.iter().find(|a| a.serial == person[0]).unwrap();
        assert!(person_line.der.is_some(), "a kept DER is archived");

        // A second pass finds nothing more.
        let again = s
            .retention()
            .prune(later, MINUTE, 10, Some(&archive))
            .await
            .unwrap();
        assert_eq!((again.rows, again.archived), (0, 0), "{again:?}");
        s.shutdown().await;
    }

    /// A revoked certificate stays, and stays on the CRL, until it expires
    /// past the grace; then it leaves like any other.
    pub async fn revoked_rows_stay_on_the_crl_until_they_expire(db: &TestDb) {
        let s = db.open_with(options()).await;
        let now = now_unix();
        s.retention().prune(now, 0, 100, None).await.unwrap();
        let serials = submit_all(&s, vec![agent(now, 30), agent(now, 3 * MINUTE)]).await;
        for serial in &serials {
            s.certs()
                .revoke_cert("people", serial, "keyCompromise", now)
                .await
                .unwrap()
                .unwrap();
        }
        let later = now + 2 * MINUTE;
        s.retention().prune(later, MINUTE, 100, None).await.unwrap();
        let crl: Vec<String> = s
            .certs()
            .list_revoked("people", later)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.serial)
            .collect();
        assert_eq!(crl, vec![serials[1].clone()], "only the unexpired one");
        assert!(is_stored(&s, &serials[1]).await, "revoked, unexpired: kept");

        let much_later = now + 10 * MINUTE;
        s.retention()
            .prune(much_later, MINUTE, 100, None)
            .await
            .unwrap();
        assert!(stored(&s, &serials).await.is_empty());
        s.shutdown().await;
    }

    /// Short-lived rows leave with their window: on PostgreSQL a dropped
    /// partition, elsewhere batched deletes; what is counted is what left,
    /// and what lives stays countable.
    pub async fn short_lived_rows_leave_with_their_expiry_window(db: &TestDb) {
        let s = db.open_with(options()).await;
        let now = now_unix();
        s.retention().prune(now, 0, 100, None).await.unwrap();
        let batch: Vec<IssuanceRecord> = (0..40).map(|_| agent(now, 20)).collect();
        let serials = submit_all(&s, batch).await;
        assert_eq!(s.retention().live_rows(now).await.unwrap(), 40);
        let out = s
            .retention()
            .prune(now + 4 * MINUTE, 0, 7, None)
            .await
            .unwrap();
        assert_eq!(out.rows, 40, "{out:?}");
        assert!(stored(&s, &serials).await.is_empty());
        assert_eq!(s.retention().live_rows(now).await.unwrap(), 0);
        // New rows keep landing after partitions were dropped and made.
        let after = submit_all(&s, vec![agent(now_unix(), 20)]).await;
        assert!(is_stored(&s, &after[0]).await);
        s.shutdown().await;
    }

    /// An archive that cannot be written fails the pass and deletes nothing.
    pub async fn a_failed_archive_deletes_nothing(db: &TestDb) {
        let s = db.open_with(options()).await;
        let now = now_unix();
        s.retention().prune(now, 0, 100, None).await.unwrap();
        let serials = submit_all(&s, vec![agent(now, 10)]).await;
        let dir = tempfile::tempdir().unwrap();
        let archive = Arc::new(Archive::open(&dir.path().join("a")).unwrap());
        // The directory is replaced by a file: every append fails.
        std::fs::remove_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a"), b"not a directory").unwrap();
        let err = s
            .retention()
            .prune(now + 5 * MINUTE, 0, 100, Some(&archive))
            .await
            .unwrap_err();
        assert!(matches!(err, RetentionError::Archive(_)), "{err}");
        assert!(is_stored(&s, &serials[0]).await);
        s.shutdown().await;
    }

    /// One SQL statement on its own connection, outside the store.
    async fn exec_raw(db: &TestDb, sql: &str) {
        use sqlx::{Connection, Executor};
        match db.kind {
            BackendKind::Sqlite => {
                let url = format!("sqlite://{}", db.dsn);
                let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
                c.execute(sql).await.unwrap();
                c.close().await.unwrap();
            }
            BackendKind::Postgres => {
                let mut c = sqlx::PgConnection::connect(&db.dsn).await.unwrap();
                c.execute(sql).await.unwrap();
                c.close().await.unwrap();
            }
            BackendKind::MySql => {
                let mut c = sqlx::MySqlConnection::connect(&db.dsn).await.unwrap();
                c.execute(sql).await.unwrap();
                c.close().await.unwrap();
            }
        }
    }

    /// A database as release 5 of the schema left it (no capabilities, no
    /// expiry index, PostgreSQL unpartitioned, SQLite without incremental
    /// auto-vacuum) keeps its rows through migration 6, and retention
    /// then works on them.
    pub async fn a_database_from_before_retention_is_brought_along(db: &TestDb) {
        Store::create_schema_version(&db.dsn, 5).await.unwrap();
        let now = now_unix();
        let hex = |h: &str| match db.kind {
            BackendKind::Postgres => format!("decode('{h}', 'hex')"),
            _ => format!("X'{h}'"),
        };
        let (expired, valid) = (unique_hex(40), unique_hex(40));
        for (serial, agent, not_after) in [
            (&expired, "'bot-old'", now - 3600),
            (&valid, "NULL", now + 86_400),
        ] {
            exec_raw(
                db,
                &format!(
                    "INSERT INTO warrant_certs (ca, serial, common_name, profile, status, \
                     not_before, not_after, der, principal_uid, agent_id, key_hash, created_at) \
                     VALUES ('people', '{serial}', 'cn', 'agent-proxy', 'V', {nb}, {not_after}, \
                     {der}, 'corp:old:K', {agent}, {kh}, {nb})",
                    nb = not_after - 7200,
                    der = hex("3082010A"),
                    kh = hex(&"07".repeat(32)),
                ),
            )
            .await;
        }
        if db.kind == BackendKind::Sqlite {
            exec_raw(db, "PRAGMA auto_vacuum = NONE").await;
            exec_raw(db, "VACUUM").await;
        }

        let s = db.open_with(options()).await;
        let row = s.certs().get_cert("people", &valid).await.unwrap().unwrap();
        assert_eq!(row.der, vec![0x30, 0x82, 0x01, 0x0A]);
        assert_eq!(row.capabilities, None);
        let out = s.retention().prune(now, 60, 100, None).await.unwrap();
        assert_eq!(out.rows, 1, "{out:?}");
        assert!(!is_stored(&s, &expired).await);
        assert!(is_stored(&s, &valid).await);
        // New rows land beside the migrated ones.
        let fresh = submit_all(&s, vec![agent(now, 30)]).await;
        assert!(is_stored(&s, &fresh[0]).await);
        s.shutdown().await;
        if db.kind == BackendKind::Sqlite {
            use sqlx::Connection;
            let url = format!("sqlite://{}", db.dsn);
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
                .fetch_one(&mut c)
                .await
                .unwrap();
            assert_eq!(mode, 2, "converted to incremental auto-vacuum");
        }
    }

    /// After a large prune, SQLite hands the freed pages back (the file
    /// shrinks) beyond its reserve; the server backends report none.
    pub async fn freed_pages_go_back_to_the_file_system_on_sqlite(db: &TestDb) {
        let s = db.open_with(options()).await;
        let now = now_unix();
        s.retention().prune(now, 0, 100, None).await.unwrap();
        let mut tasks = Vec::new();
        for _ in 0..2000 {
            let mut rec = agent(now, 20);
            rec.cert_row_mut().der = vec![0x30; 1500];
            let s = s.clone();
            tasks.push(tokio::spawn(async move { s.issuance().submit(rec).await }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let size = || std::fs::metadata(&db.dsn).map(|m| m.len()).unwrap_or(0);
        let out = s
            .retention()
            .prune(now + 5 * MINUTE, 0, 500, None)
            .await
            .unwrap();
        assert_eq!(out.rows, 2000, "{out:?}");
        if db.kind == BackendKind::Sqlite {
            assert!(out.vacuumed_pages > 0, "{out:?}");
            s.shutdown().await;
            // Checkpointed, the file holds far less than the 3 MB of
            // certificates that went through it. The checkpoint is made
            // here rather than left to the store's last connection closing:
            // sqlx's close returns before its connection thread has closed
            // the file, so that one may not have run yet.
            use sqlx::Connection;
            let url = format!("sqlite://{}", db.dsn);
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            let busy: i64 = sqlx::query_scalar("PRAGMA wal_checkpoint(TRUNCATE)")
                .fetch_one(&mut c)
                .await
                .unwrap();
            assert_eq!(busy, 0, "the checkpoint completed");
            c.close().await.unwrap();
            assert!(size() < 2000 * 1500 / 2, "{}", size());
        } else {
            assert_eq!(out.vacuumed_pages, 0);
            s.shutdown().await;
        }
    }

    /// More expired nonce rows than one pruning batch all go, and the
    /// unexpired ones stay.
    pub async fn expired_nonce_rows_are_pruned_in_batches(db: &TestDb) {
        let s = db.open().await;
        let now = now_unix();
        let mut tasks = Vec::new();
        let mut live = Vec::new();
        for i in 0..5000 {
            let nonce = unique_bytes32();
            let mut rec = nonce_only_issuance("corp:n:K", nonce);
            if let Some(n) = rec.nonce.as_mut() {
                // Expired a whole minute ago: SQLite prunes by the minute.
                n.expires_at = if i % 1000 == 0 { now + 600 } else { now - 120 };
            }
            if i % 1000 == 0 {
                live.push(nonce);
            }
            let s = s.clone();
            tasks.push(tokio::spawn(async move { s.issuance().submit(rec).await }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let pruned = s.issuance().prune_expired_nonces(now).await.unwrap();
        assert_eq!(pruned, 4995);
        for n in &live {
            assert!(s.issuance().nonce_consumed(n).await.unwrap());
        }
        assert_eq!(s.issuance().prune_expired_nonces(now).await.unwrap(), 0);
        s.shutdown().await;
    }
}
