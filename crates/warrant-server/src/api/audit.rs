//! `GET /api/v1/audit`: the audit log, filtered and paginated, for callers
//! whose role grants `log:read`.

use crate::audit::{EventKind, detail_json};
use crate::auth::{Caller, Permission};
use crate::error::ApiError;
use crate::state::SharedState;
use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use warrant_store::{AuditFilter, AuditRow};

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

fn row_json(r: &AuditRow) -> Value {
    json!({
        "chain": r.chain,
        "seq": r.seq,
        "at": millis_rfc3339(r.event.at_ms),
        "event": r.event.event,
        "actor": r.event.actor,
        "principal_uid": r.event.principal_uid,
        "agent_id": r.event.agent_id,
        "ca": r.event.ca,
        "serial": r.event.serial,
        "detail": detail_json(&r.event.detail),
        "prev_hash": hex(&r.prev_hash),
        "hash": hex(&r.hash),
    })
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
