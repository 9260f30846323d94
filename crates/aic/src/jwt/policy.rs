//! Capability matching and constraint evaluation: pure functions over claims.

use std::net::IpAddr;

use serde_json::Value;

use super::claims::CapabilityClaim;

pub const CONSTRAINT_SCHEME: &str = "varwof/constraint-v1";

/// Whether a granted capability id covers a requested one: equal, or the
/// grant ends in `*` and the request starts with what precedes it
/// (`GET:*` covers `GET:/api/v1/users`; `*` covers everything in the scheme).
pub fn id_covers(granted: &str, requested: &str) -> bool {
    match granted.strip_suffix('*') {
        Some(prefix) => requested.starts_with(prefix),
        None => granted == requested,
    }
}

/// Whether requested parameters stay within granted ones. The grant limits:
/// no grant parameters means unlimited; for each granted key the request may
/// omit it, or give a number ≤ the granted number, a value in a granted
/// array (or an array that is a subset), an equal value, or anything if the
/// grant is `"*"`; nested objects recurse. Keys the grant does not mention
/// are not limited by it.
pub fn params_within(granted: Option<&Value>, requested: Option<&Value>) -> bool {
    let (Some(g), Some(r)) = (granted, requested) else {
        return true;
    };
    value_within(g, r)
}

fn value_within(g: &Value, r: &Value) -> bool {
    match (g, r) {
        (Value::String(s), _) if s == "*" => true,
        (Value::Number(gn), Value::Number(rn)) => match (gn.as_f64(), rn.as_f64()) {
            (Some(a), Some(b)) => b <= a,
            _ => false,
        },
        (Value::Array(ga), Value::Array(ra)) => ra.iter().all(|x| ga.contains(x)),
        (Value::Array(ga), x) => ga.contains(x),
        (Value::Object(go), Value::Object(ro)) => go
            .iter()
            .all(|(k, gv)| ro.get(k).is_none_or(|rv| value_within(gv, rv))),
        _ => g == r,
    }
}

/// Whether `grant` covers `request` (scheme, id pattern, parameters).
pub fn capability_covers(grant: &CapabilityClaim, request: &CapabilityClaim) -> bool {
    grant.scheme == request.scheme
        && id_covers(&grant.id, &request.id)
        && params_within(grant.params.as_ref(), request.params.as_ref())
}

/// Inputs a constraint may depend on, supplied by the caller (the library has no IO and no clock).
#[derive(Debug, Clone, Copy, Default)]
pub struct ConstraintContext {
    pub now: i64,
    pub source_ip: Option<IpAddr>,
    /// Sessions of this agent already in flight, not counting this one.
    pub current_concurrency: Option<u64>,
    /// Permit constraints this verifier does not know (default: deny).
    pub allow_unknown: bool,
}

/// Evaluates one constraint; `Err` says why it denies.
pub fn evaluate_constraint(c: &CapabilityClaim, ctx: &ConstraintContext) -> Result<(), String> {
    let name = format!("{}:{}", c.scheme, c.id);
    if c.scheme != CONSTRAINT_SCHEME {
        return if ctx.allow_unknown {
            Ok(())
        } else {
            Err(format!("unknown constraint {name}"))
        };
    }
    let params = c.params.as_ref();
    match c.id.as_str() {
        "allowed-cidr" => {
            let ip = ctx
                .source_ip
                .ok_or_else(|| format!("{name}: no source IP to check"))?;
            let list = params
                .and_then(Value::as_array)
                .ok_or_else(|| format!("{name}: params must be an array of CIDRs"))?;
            for entry in list {
                let cidr = entry
                    .as_str()
                    .ok_or_else(|| format!("{name}: params must be an array of CIDRs"))?;
                if cidr_contains(cidr, ip)
                    .ok_or_else(|| format!("{name}: invalid CIDR {cidr:?}"))?
                {
                    return Ok(());
                }
            }
            Err(format!(
                "{name}: source IP {ip} not in {}",
                Value::Array(list.clone())
            ))
        }
        "time-window" => {
            let field = |k: &str| {
                params
                    .and_then(|p| p.get(k))
                    .and_then(Value::as_str)
                    .and_then(parse_hh_mm)
                    .ok_or_else(|| format!("{name}: params.{k} must be \"HH:MM\""))
            };
            let (start, end) = (field("start")?, field("end")?);
            let minute = (ctx.now.rem_euclid(86_400) / 60) as u32;
            if in_window(start, end, minute) {
                Ok(())
            } else {
                Err(format!(
                    "{name}: {:02}:{:02} UTC outside window",
                    minute / 60,
                    minute % 60
                ))
            }
        }
        "max-concurrent" => {
            let max = params
                .and_then(|p| p.get("max"))
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("{name}: params.max must be a non-negative integer"))?;
            let current = ctx
                .current_concurrency
                .ok_or_else(|| format!("{name}: current concurrency unknown"))?;
            if current < max {
                Ok(())
            } else {
                Err(format!("{name}: {current} sessions in flight, max {max}"))
            }
        }
        _ if ctx.allow_unknown => Ok(()),
        _ => Err(format!("unknown constraint {name}")),
    }
}

/// Window `[start, end)` in minutes of the UTC day; `start > end` crosses
/// midnight; `start == end` is the whole day.
pub fn in_window(start: u32, end: u32, minute: u32) -> bool {
    match start.cmp(&end) {
        std::cmp::Ordering::Less => start <= minute && minute < end,
        std::cmp::Ordering::Greater => minute >= start || minute < end,
        std::cmp::Ordering::Equal => true,
    }
}

fn parse_hh_mm(s: &str) -> Option<u32> {
    let (h, m) = s.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

/// `Some(contains)` for a valid `addr/len` or bare address; IPv4-mapped IPv6
/// sources are compared as IPv4.
pub fn cidr_contains(cidr: &str, ip: IpAddr) -> Option<bool> {
    let (addr, len) = match cidr.split_once('/') {
        Some((a, l)) => (a.parse::<IpAddr>().ok()?, Some(l.parse::<u32>().ok()?)),
        None => (cidr.parse::<IpAddr>().ok()?, None),
    };
    let ip = ip.to_canonical();
    match (addr, ip) {
        (IpAddr::V4(net), IpAddr::V4(ip)) => {
            let len = len.unwrap_or(32);
            if len > 32 {
                return None;
            }
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            Some(u32::from(net) & mask == u32::from(ip) & mask)
        }
        (IpAddr::V6(net), IpAddr::V6(ip)) => {
            let len = len.unwrap_or(128);
            if len > 128 {
                return None;
            }
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            Some(u128::from(net) & mask == u128::from(ip) & mask)
        }
        (IpAddr::V4(_), IpAddr::V6(_)) | (IpAddr::V6(_), IpAddr::V4(_)) => {
            if len.is_some_and(|l| l > if addr.is_ipv4() { 32 } else { 128 }) {
                return None;
            }
            Some(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(id: &str, params: Value) -> CapabilityClaim {
        CapabilityClaim {
            scheme: CONSTRAINT_SCHEME.into(),
            id: id.into(),
            params: Some(params),
        }
    }

    fn ctx_at(now: i64) -> ConstraintContext {
        ConstraintContext {
            now,
            ..Default::default()
        }
    }

    #[test]
    fn allowed_cidr_matches_v4_v6_and_mapped_addresses() {
        let ctx = |ip: &str| ConstraintContext {
            source_ip: Some(ip.parse().unwrap()),
            ..Default::default()
        };
        let k = c("allowed-cidr", json!(["10.0.0.0/8", "2001:db8::/32"]));
        assert!(evaluate_constraint(&k, &ctx("10.1.2.3")).is_ok());
        assert!(evaluate_constraint(&k, &ctx("::ffff:10.1.2.3")).is_ok());
        assert!(evaluate_constraint(&k, &ctx("2001:db8::1")).is_ok());
        assert!(evaluate_constraint(&k, &ctx("192.168.9.9")).is_err());
        assert!(evaluate_constraint(&k, &ConstraintContext::default()).is_err());
        assert!(
            evaluate_constraint(&c("allowed-cidr", json!(["10.0.0.0/33"])), &ctx("10.0.0.1"))
                .is_err()
        );
        assert_eq!(
            cidr_contains("0.0.0.0/0", "1.2.3.4".parse().unwrap()),
            Some(true)
        );
        assert_eq!(
            cidr_contains("1.2.3.4", "1.2.3.4".parse().unwrap()),
            Some(true)
        );
    }

    #[test]
    fn time_window_may_cross_midnight() {
        let night = c("time-window", json!({"start":"22:00","end":"06:00"}));
        assert!(evaluate_constraint(&night, &ctx_at(23 * 3600)).is_ok());
        assert!(evaluate_constraint(&night, &ctx_at(86_400 + 5 * 3600 + 59 * 60)).is_ok());
        assert!(evaluate_constraint(&night, &ctx_at(6 * 3600)).is_err());
        assert!(evaluate_constraint(&night, &ctx_at(12 * 3600)).is_err());
        let day = c("time-window", json!({"start":"09:00","end":"17:30"}));
        assert!(evaluate_constraint(&day, &ctx_at(9 * 3600)).is_ok());
        assert!(evaluate_constraint(&day, &ctx_at(17 * 3600 + 30 * 60)).is_err());
        assert!(
            evaluate_constraint(
                &c("time-window", json!({"start":"9:00","end":"17:00"})),
                &ctx_at(0)
            )
            .is_err()
        );
    }

    #[test]
    fn max_concurrent_needs_the_current_count() {
        let k = c("max-concurrent", json!({"max": 2}));
        let with = |n| ConstraintContext {
            current_concurrency: Some(n),
            ..Default::default()
        };
        assert!(evaluate_constraint(&k, &with(1)).is_ok());
        assert!(evaluate_constraint(&k, &with(2)).is_err());
        assert!(evaluate_constraint(&k, &ConstraintContext::default()).is_err());
    }

    #[test]
    fn rejects_unknown_constraint_unless_configured() {
        let k = c("geo-fence", json!({}));
        assert!(evaluate_constraint(&k, &ConstraintContext::default()).is_err());
        assert!(
            evaluate_constraint(
                &k,
                &ConstraintContext {
                    allow_unknown: true,
                    ..Default::default()
                }
            )
            .is_ok()
        );
    }

    #[test]
    fn capability_matching_respects_patterns_and_param_limits() {
        let grant = CapabilityClaim {
            scheme: "database".into(),
            id: "query:SELECT".into(),
            params: Some(json!({"max_rows": 100})),
        };
        let req = |id: &str, p: Value| CapabilityClaim {
            scheme: "database".into(),
            id: id.into(),
            params: Some(p),
        };
        assert!(capability_covers(
            &grant,
            &req("query:SELECT", json!({"max_rows": 50}))
        ));
        assert!(!capability_covers(
            &grant,
            &req("query:SELECT", json!({"max_rows": 500}))
        ));
        assert!(!capability_covers(&grant, &req("query:DELETE", json!({}))));
        assert!(id_covers("GET:*", "GET:/api/v1/users"));
        assert!(!id_covers("GET:*", "POST:/api"));
        assert!(params_within(
            Some(&json!({"tables": ["a", "b"]})),
            Some(&json!({"tables": ["a"]}))
        ));
        assert!(!params_within(
            Some(&json!({"tables": ["a", "b"]})),
            Some(&json!({"tables": ["c"]}))
        ));
    }
}
