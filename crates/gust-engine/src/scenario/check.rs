//! Per-step response checks: a status set, JSON pointers that must equal a value or
//! exist, and a substring of the body. A failed check makes the request a failure of
//! its step (and of the run's totals).

use std::collections::BTreeMap;

use crate::scenario::extract::{Response, check_pointer};

/// A step's compiled checks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checks {
    /// Statuses that pass; `None` = the run's `success_status`.
    pub status: Option<Vec<u16>>,
    pub json_equals: Vec<(String, serde_json::Value)>,
    pub json_exists: Vec<String>,
    pub body_contains: Option<String>,
}

/// Which check failed first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckFailure {
    Status(u16),
    JsonEquals(String),
    JsonExists(String),
    BodyContains,
}

impl Checks {
    pub fn compile(
        status: Option<&[u16]>,
        json_equals: &BTreeMap<String, serde_json::Value>,
        json_exists: &[String],
        body_contains: Option<&str>,
    ) -> Result<Self, String> {
        if let Some(s) = status {
            if s.is_empty() {
                return Err("status: empty list (omit it to use success_status)".into());
            }
            if let Some(bad) = s.iter().find(|c| !(100..600).contains(*c)) {
                return Err(format!("status: {bad} is not an HTTP status"));
            }
        }
        for p in json_equals.keys().chain(json_exists) {
            check_pointer(p)?;
        }
        Ok(Self {
            status: status.map(<[u16]>::to_vec),
            json_equals: json_equals
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            json_exists: json_exists.to_vec(),
            body_contains: body_contains.map(str::to_string),
        })
    }

    pub fn needs_body(&self) -> bool {
        !self.json_equals.is_empty() || !self.json_exists.is_empty() || self.body_contains.is_some()
    }

    /// The content checks (everything but the status).
    pub fn evaluate(&self, r: &Response<'_>) -> Result<(), CheckFailure> {
        for (pointer, want) in &self.json_equals {
            let got = r.json().and_then(|v| v.pointer(pointer));
            if !got.is_some_and(|g| json_equal(g, want)) {
                return Err(CheckFailure::JsonEquals(pointer.clone()));
            }
        }
        for pointer in &self.json_exists {
            if r.json().and_then(|v| v.pointer(pointer)).is_none() {
                return Err(CheckFailure::JsonExists(pointer.clone()));
            }
        }
        if let Some(needle) = &self.body_contains
            && !contains(r.body, needle.as_bytes())
        {
            return Err(CheckFailure::BodyContains);
        }
        Ok(())
    }
}

/// Numbers compare by value (`1` equals `1.0`), everything else structurally.
fn json_equal(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a, b) {
        (serde_json::Value::Number(x), serde_json::Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn checks(eq: &[(&str, serde_json::Value)], exists: &[&str], contains: Option<&str>) -> Checks {
        let eq: BTreeMap<String, serde_json::Value> =
            eq.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let exists: Vec<String> = exists.iter().map(|s| s.to_string()).collect();
        Checks::compile(None, &eq, &exists, contains).unwrap()
    }

    #[test]
    fn passing_and_failing_content_checks() {
        let h = HeaderMap::new();
        let body = br#"{"ok":true,"n":1,"name":"x"}"#;
        let r = Response::new(200, &h, body);
        let c = checks(
            &[
                ("/ok", serde_json::json!(true)),
                ("/n", serde_json::json!(1.0)),
            ],
            &["/name"],
            Some("\"name\""),
        );
        assert_eq!(c.evaluate(&r), Ok(()));
        let c = checks(&[("/name", serde_json::json!("y"))], &[], None);
        assert_eq!(
            c.evaluate(&r),
            Err(CheckFailure::JsonEquals("/name".into()))
        );
        let c = checks(&[], &["/absent"], None);
        assert_eq!(
            c.evaluate(&r),
            Err(CheckFailure::JsonExists("/absent".into()))
        );
        let c = checks(&[], &[], Some("nope"));
        assert_eq!(c.evaluate(&r), Err(CheckFailure::BodyContains));
    }

    #[test]
    fn json_checks_fail_on_a_non_json_body() {
        let h = HeaderMap::new();
        let r = Response::new(200, &h, b"<html>");
        let c = checks(&[], &["/a"], None);
        assert!(c.evaluate(&r).is_err());
    }

    #[test]
    fn rejects_empty_status_list_and_bad_codes() {
        let none = BTreeMap::new();
        assert!(Checks::compile(Some(&[]), &none, &[], None).is_err());
        assert!(Checks::compile(Some(&[200, 700]), &none, &[], None).is_err());
    }

    #[test]
    fn rejects_pointer_without_leading_slash() {
        let none = BTreeMap::new();
        assert!(Checks::compile(None, &none, &["a/b".to_string()], None).is_err());
    }
}
