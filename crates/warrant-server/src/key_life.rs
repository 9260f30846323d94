//! How long each CA and token-signing key has left: the gauges of
//! `/metrics` and the warnings of `/readyz`. Pure: the state is sampled by
//! the caller.

use warrant_ca::{Hierarchy, TokenKeyRing};

use crate::clock::unix;

/// One CA's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaEnd {
    pub name: String,
    /// NotAfter, Unix seconds.
    pub not_after: i64,
    pub is_root: bool,
    /// A later generation of its family outlives it: its end needs no
    /// action (it is retiring).
    pub superseded: bool,
}

/// The root's and every issuing CA's NotAfter.
pub fn ca_ends(hierarchy: &Hierarchy) -> Vec<CaEnd> {
    let root = CaEnd {
        name: "root".to_string(),
        not_after: unix(hierarchy.root_not_after()),
        is_root: true,
        superseded: false,
    };
    std::iter::once(root)
        .chain(hierarchy.issuing_cas().map(|ca| {
            let not_after = unix(ca.not_after());
            CaEnd {
                name: ca.name().to_string(),
                not_after,
                is_root: false,
                superseded: hierarchy
                    .family(ca.name())
                    .iter()
                    .any(|g| unix(g.not_after()) > not_after),
            }
        }))
        .collect()
}

/// A token key's times: when it started signing, and when it stops being
/// published (`None` while no later key supersedes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenKeyLife {
    pub kid: String,
    pub activates_at: i64,
    pub retires_at: Option<i64>,
}

pub fn token_key_lives(ring: &TokenKeyRing, now: i64) -> Vec<TokenKeyLife> {
    ring.published(now)
        .into_iter()
        .map(|k| TokenKeyLife {
            kid: k.kid().to_string(),
            activates_at: k.activates_at(),
            retires_at: ring.retires_at(k.activates_at()),
        })
        .collect()
}

/// The `/readyz` warnings at `now`: every CA that ends within `window`
/// seconds (or has ended), soonest first, but those a later generation of
/// their family outlives.
pub fn expiry_warnings(ends: &[CaEnd], now: i64, window: i64) -> Vec<String> {
    let mut soon: Vec<&CaEnd> = ends
        .iter()
        .filter(|e| !e.superseded && e.not_after - now <= window)
        .collect();
    soon.sort_by_key(|e| e.not_after);
    soon.into_iter()
        .map(|e| {
            let what = if e.is_root {
                "the root CA".to_string()
            } else {
                format!("issuing CA {}", e.name)
            };
            let at = humantime_utc(e.not_after);
            if e.not_after <= now {
                format!("{what} ended at {at}")
            } else {
                let days = (e.not_after - now) / 86_400;
                format!("{what} ends in {days} days, at {at}: rotate it (docs/keys.md)")
            }
        })
        .collect()
}

/// RFC 3339 UTC, whole seconds.
fn humantime_utc(unix_secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix_secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| unix_secs.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(name: &str, not_after: i64) -> CaEnd {
        CaEnd {
            name: name.into(),
            not_after,
            is_root: name == "root",
            superseded: false,
        }
    }

    #[test]
    fn warns_only_inside_the_window_soonest_first() {
        let day = 86_400;
        let ends = [
            end("root", 1_000 * day),
            end("people", 40 * day),
            end("devices", 10 * day),
            end("old", -day),
        ];
        let w = expiry_warnings(&ends, 0, 30 * day);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("issuing CA old ended at 1969-12-31T00:00:00Z"),
            "{w:?}"
        );
        assert!(
            w[1].starts_with("issuing CA devices ends in 10 days, at 1970-01-11T00:00:00Z"),
            "{w:?}"
        );
        assert!(expiry_warnings(&ends, 0, 5 * day).len() == 1);
        let all = expiry_warnings(&ends, 0, 2_000 * day);
        assert!(
            all.last()
                .unwrap()
                .starts_with("the root CA ends in 1000 days"),
            "{all:?}"
        );
        // A CA a later generation outlives is retiring: no warning.
        let retiring = [CaEnd {
            superseded: true,
            ..end("devices", 10 * day)
        }];
        assert!(expiry_warnings(&retiring, 0, 30 * day).is_empty());
    }
}
