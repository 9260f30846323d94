//! `GET /api/v1/audit`: the audit log, filtered and paginated, for callers
//! whose role grants `log:read`.

use crate::audit::{EventKind, detail_json};
use crate::auth::{Caller, Permission};
use crate::error::{ApiError, ErrorKey};
use crate::state::SharedState;
use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use warrant_store::{AuditEntry, AuditFilter, LogError, TreeRow};

#[derive(Deserialize)]
pub(super) struct AuditQuery {
    principal: Option<String>,
    agent: Option<String>,
    event: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
}

/// An RFC 3339 time (whole seconds, or with a fraction) as Unix milliseconds.
fn time_ms(field: &str, v: &str) -> Result<i64, ApiError> {
    let (whole, frac_ms) = match v.split_once('.') {
        Some((head, tail)) => {
            let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
            let zone = &tail[digits.len()..];
            let ms = format!("{digits:0<3}")[..3].parse::<i64>().unwrap_or(0);
            (format!("{head}{zone}"), ms)
        }
        None => (v.to_string(), 0),
    };
    aic::time::parse_rfc3339(&whole)
        .map(|s| s * 1000 + frac_ms)
        .ok_or_else(|| ApiError::field(field, "expected an RFC 3339 time"))
}

impl AuditQuery {
    fn filter(self) -> Result<AuditFilter, ApiError> {
        let given = |v: Option<String>| v.filter(|s| !s.is_empty());
        let event = given(self.event)
            .map(|e| {
                EventKind::parse(&e)
                    .map(|k| k.as_str().to_string())
                    .ok_or_else(|| ApiError::field("event", format!("{e:?} is not an event")))
            })
            .transpose()?;
        let number = |field: &str, v: Option<String>| -> Result<Option<u64>, ApiError> {
            given(v)
                .map(|s| {
                    s.parse()
                        .map_err(|_| ApiError::field(field, "not a non-negative integer"))
                })
                .transpose()
        };
        let limit = number("limit", self.limit)?.unwrap_or(100);
        Ok(AuditFilter {
            principal_uid: given(self.principal),
            agent_id: given(self.agent),
            event,
            since_ms: given(self.since)
                .map(|v| time_ms("since", &v))
                .transpose()?,
            until_ms: given(self.until)
                .map(|v| time_ms("until", &v))
                .transpose()?,
            limit: u32::try_from(limit)
                .unwrap_or(u32::MAX)
                .min(warrant_store::MAX_LIST_LIMIT),
            offset: number("offset", self.offset)?.unwrap_or(0),
        })
    }
}

fn hex(h: &[u8; 32]) -> String {
    aic::hex::encode(h)
}

fn millis_rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let base = crate::clock::rfc3339(secs);
    // `…:05Z` → `…:05.123Z`
    match base.strip_suffix('Z') {
        Some(b) => format!("{b}.{:03}Z", ms.rem_euclid(1000)),
        None => base,
    }
}

fn row_json(r: &AuditEntry) -> Value {
    let mut v = json!({
        "tree": r.tree,
        "index": r.index,
        "at": millis_rfc3339(r.event.at_ms),
        "event": r.event.event,
        "actor": r.event.actor,
        "principal_uid": r.event.principal_uid,
        "agent_id": r.event.agent_id,
        "ca": r.event.ca,
        "serial": r.event.serial,
        "detail": detail_json(&r.event.detail),
        "leaf_hash": hex(&r.leaf_hash),
    });
    if let (Some((prev, hash)), Some(o)) = (&r.legacy, v.as_object_mut()) {
        // A row of the hash chain the log replaced (migration 7).
        o.insert("chain".into(), json!(r.tree));
        o.insert("seq".into(), json!(r.index));
        o.insert("prev_hash".into(), json!(hex(prev)));
        o.insert("hash".into(), json!(hex(hash)));
    }
    v
}

pub(super) async fn list(
    State(state): State<SharedState>,
    caller: Caller,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::LogRead)?;
    let Query(q) = query.map_err(|e| ApiError::field("query", e.body_text()))?;
    let filter = q.filter()?;
    let rows = state.store.audit().query(&filter).await?;
    let events: Vec<Value> = rows.iter().map(row_json).collect();
    Ok(Json(json!({
        "events": events,
        "count": events.len(),
        "limit": filter.limit,
        "offset": filter.offset,
    })))
}

fn b64(h: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(h)
}

/// A log error as an answer: unknown names are 404, sizes and indexes
/// outside the tree 400 naming the field, a pruned subtree 404 saying so.
fn log_error(e: LogError) -> ApiError {
    match e {
        LogError::Store(s) => s.into(),
        LogError::UnknownTree(_) | LogError::UnknownSerial { .. } => {
            ApiError::detail(ErrorKey::NotFound, e.to_string())
        }
        LogError::IndexOutOfRange { .. } => ApiError::field("index", e.to_string()),
        LogError::BadRange { .. } => ApiError::field("from", e.to_string()),
        LogError::Pruned { .. } => ApiError::detail(
            ErrorKey::NotFound,
            format!("{e}; the archive holds its leaves"),
        ),
        LogError::Corrupt { .. } => {
            tracing::error!(error = %e, "log read failed");
            ApiError::new(ErrorKey::Internal)
        }
    }
}

fn sign(state: &SharedState, tree: &str, size: u64, root: &[u8; 32]) -> Result<String, ApiError> {
    state.log_signer.sign(tree, size, root).map_err(|e| {
        tracing::error!(error = %e, "checkpoint signing failed");
        ApiError::new(ErrorKey::Internal)
    })
}

#[derive(Deserialize)]
pub(super) struct CheckpointQuery {
    tree: Option<String>,
    fresh: Option<String>,
}

/// `GET /api/v1/audit/checkpoint`: the latest signed checkpoint of every
/// tree (JSON), or of one (`?tree=`, the signed note as text). Public: a
/// checkpoint tells sizes and roots, nothing of the leaves, and a witness
/// needs no account. `?fresh=true` signs the trees that grew first.
pub(super) async fn checkpoint(
    State(state): State<SharedState>,
    query: Result<Query<CheckpointQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let Query(q) = query.map_err(|e| ApiError::field("query", e.body_text()))?;
    let fresh = match q.fresh.as_deref() {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::field("fresh", "expected true or false")),
    };
    if fresh {
        crate::transparency::checkpoint_trees(&state.store, &state.log_signer).await?;
    }
    let trees = state.store.log().trees().await?;
    if let Some(name) = q.tree.filter(|t| !t.is_empty()) {
        let tree = trees
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| ApiError::detail(ErrorKey::NotFound, format!("no tree named {name}")))?;
        let note = tree.checkpoint.clone().ok_or_else(|| {
            ApiError::detail(
                ErrorKey::NotFound,
                format!("tree {name} has no checkpoint yet"),
            )
        })?;
        return Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf-8",
            )],
            note,
        )
            .into_response());
    }
    let list: Vec<Value> = trees
        .iter()
        .filter_map(|t| {
            let note = t.checkpoint.as_ref()?;
            let cp = warrant_tlog::SignedNote::parse(note)
                .ok()
                .and_then(|n| warrant_tlog::Checkpoint::from_text(&n.text).ok())?;
            Some(json!({
                "tree": t.name,
                "origin": cp.origin,
                "size": cp.size,
                "root": b64(&cp.root),
                "checkpoint": note,
            }))
        })
        .collect();
    Ok(Json(json!({
        "log": state.log_signer.name(),
        "key": state.log_signer.verifier_key(),
        "checkpoints": list,
    }))
    .into_response())
}

#[derive(Deserialize)]
pub(super) struct InclusionQuery {
    serial: Option<String>,
    ca: Option<String>,
    tree: Option<String>,
    index: Option<String>,
    size: Option<String>,
}

fn number(field: &str, v: &Option<String>) -> Result<Option<u64>, ApiError> {
    v.as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|_| ApiError::field(field, "not a non-negative integer"))
        })
        .transpose()
}

async fn tree_named(state: &SharedState, name: Option<&str>) -> Result<TreeRow, ApiError> {
    match name.filter(|n| !n.is_empty()) {
        Some(n) => state.store.log().tree(n).await.map_err(log_error),
        None => {
            let mut trees = state.store.log().trees().await?;
            trees.retain(|t| t.size > 0);
            match trees.len() {
                1 => Ok(trees.remove(0)),
                _ => Err(ApiError::field(
                    "tree",
                    "required: the log has several trees (see /api/v1/audit/checkpoint)",
                )),
            }
        }
    }
}

/// `GET /api/v1/audit/proof/inclusion?serial=S[&ca=C]` or
/// `?tree=T&index=I`, optionally `&size=N`: the leaf, its index and an RFC
/// 9162 inclusion proof to a checkpoint signed for that size. Needs
/// `log:read` (the leaf names principals and agents).
pub(super) async fn inclusion(
    State(state): State<SharedState>,
    caller: Caller,
    query: Result<Query<InclusionQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::LogRead)?;
    let Query(q) = query.map_err(|e| ApiError::field("query", e.body_text()))?;
    let size = number("size", &q.size)?;
    let log = state.store.log();
    let (tree, index) = match (q.serial.as_deref().filter(|s| !s.is_empty()), &q.tree) {
        (Some(serial), _) => {
            let serial = serial.to_ascii_uppercase();
            // By (ca, serial), the certificate table's key: without a CA,
            // each issuing CA in turn.
            let cas: Vec<String> = match q.ca.as_deref().filter(|c| !c.is_empty()) {
                Some(ca) => vec![ca.to_string()],
                None => state
                    .cas()
                    .hierarchy
                    .issuing_cas()
                    .map(|c| c.name().to_string())
                    .collect(),
            };
            let mut found = None;
            for ca in &cas {
                match log.find_cert(ca, &serial).await {
                    Ok(hit) => {
                        found = Some(hit);
                        break;
                    }
                    Err(LogError::UnknownSerial { .. }) => continue,
                    Err(e) => return Err(log_error(e)),
                }
            }
            found.ok_or_else(|| {
                ApiError::detail(
                    ErrorKey::NotFound,
                    format!("no certificate {serial} in the log"),
                )
            })?
        }
        (None, Some(_)) => {
            let tree = tree_named(&state, q.tree.as_deref()).await?;
            let index = number("index", &q.index)?
                .ok_or_else(|| ApiError::field("index", "required with tree"))?;
            (tree, index)
        }
        (None, None) => return Err(ApiError::field("serial", "required (or tree and index)")),
    };
    let p = log.inclusion(&tree, index, size).await.map_err(log_error)?;
    let note = sign(&state, &p.tree, p.size, &p.root)?;
    let entry = match &p.entry {
        warrant_store::LeafEntry::Cert(c) => json!({
            "kind": "cert", "ca": c.ca, "serial": c.serial, "profile": c.profile,
            "principal_uid": c.principal_uid, "agent_id": c.agent_id,
            "capabilities": c.capabilities, "key_hash": c.key_hash,
            "not_before": c.not_before, "not_after": c.not_after, "created_at": c.created_at,
            "lineage_start": c.lineage_start, "issued_by": c.issued_by,
        }),
        warrant_store::LeafEntry::Event(e) => json!({
            "kind": "event", "at": millis_rfc3339(e.at_ms), "event": e.event, "actor": e.actor,
            "principal_uid": e.principal_uid, "agent_id": e.agent_id, "ca": e.ca,
            "serial": e.serial, "detail": detail_json(&e.detail),
        }),
    };
    Ok(Json(json!({
        "tree": p.tree,
        "origin": state.log_signer.origin(&p.tree),
        "index": p.index,
        "size": p.size,
        "leaf": b64(&p.leaf),
        "leaf_hash": b64(&warrant_tlog::leaf_hash(&p.leaf)),
        "proof": p.proof.iter().map(|h| b64(h)).collect::<Vec<_>>(),
        "checkpoint": note,
        "entry": entry,
    })))
}

#[derive(Deserialize)]
pub(super) struct ConsistencyQuery {
    tree: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

/// `GET /api/v1/audit/proof/consistency?tree=T&from=M[&to=N]`: an RFC 9162
/// consistency proof between two sizes of one tree, with a checkpoint
/// signed for `to` (default: the tree's size). Public, like checkpoints.
pub(super) async fn consistency(
    State(state): State<SharedState>,
    query: Result<Query<ConsistencyQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::field("query", e.body_text()))?;
    let from = number("from", &q.from)?.ok_or_else(|| ApiError::field("from", "required"))?;
    let to = number("to", &q.to)?;
    let tree = tree_named(&state, q.tree.as_deref()).await?;
    let p = state
        .store
        .log()
        .consistency(&tree, from, to)
        .await
        .map_err(log_error)?;
    let note = sign(&state, &p.tree, p.to, &p.to_root)?;
    Ok(Json(json!({
        "tree": p.tree,
        "origin": state.log_signer.origin(&p.tree),
        "from": p.from,
        "to": p.to,
        "proof": p.proof.iter().map(|h| b64(h)).collect::<Vec<_>>(),
        "checkpoint": note,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_with_and_without_fractions() {
        let s = time_ms("since", "2026-12-04T22:00:00Z").unwrap();
        assert_eq!(s % 1000, 0);
        assert_eq!(
            time_ms("since", "2026-12-04T22:00:00.123Z").unwrap(),
            s + 123
        );
        assert_eq!(time_ms("since", "2026-12-04T22:00:00.5Z").unwrap(), s + 500);
        assert_eq!(millis_rfc3339(s + 7), "2026-12-04T22:00:00.007Z");
    }

    #[test]
    fn rejects_a_malformed_time_naming_the_field() {
        let e = time_ms("until", "yesterday").unwrap_err();
        assert_eq!(e.detail.as_deref().map(|d| d.contains("until")), Some(true));
    }
}
