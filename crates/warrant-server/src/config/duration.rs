//! Duration keys: whole seconds or a string with a unit.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A duration key: an integer is seconds (like every other duration in this
/// file), a string may carry a unit: `250ms`, `5s`, `2m`, `1h`, `500us`.
/// Rendered with the largest unit that is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl ConfigDuration {
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("`{text}` is not a duration (e.g. 250ms, 5s, 2m, 1h)"))?;
        let d = match unit.trim() {
            "" | "s" => Duration::from_secs(n),
            "ms" => Duration::from_millis(n),
            "us" => Duration::from_micros(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            u => {
                return Err(format!(
                    "`{text}`: unknown unit `{u}` (use us, ms, s, m or h)"
                ));
            }
        };
        Ok(ConfigDuration(d))
    }
}

impl std::fmt::Display for ConfigDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = self.0.as_micros();
        match us {
            0 => f.write_str("0s"),
            _ if us.is_multiple_of(3_600_000_000) => write!(f, "{}h", us / 3_600_000_000),
            _ if us.is_multiple_of(60_000_000) => write!(f, "{}m", us / 60_000_000),
            _ if us.is_multiple_of(1_000_000) => write!(f, "{}s", us / 1_000_000),
            _ if us.is_multiple_of(1_000) => write!(f, "{}ms", us / 1_000),
            _ => write!(f, "{us}us"),
        }
    }
}

impl Serialize for ConfigDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ConfigDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("seconds, or a string such as \"250ms\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(|s| ConfigDuration(Duration::from_secs(s)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(ConfigDuration(Duration::from_secs(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                ConfigDuration::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::load;

    #[test]
    fn durations_take_seconds_or_a_unit() {
        let c = load(
            Some("[record_buffer]\nmax_latency = \"250ms\"\n[engine]\ngrace = 2\n"),
            &[],
        )
        .unwrap();
        assert_eq!(
            c.config.record_buffer.max_latency.0,
            Duration::from_millis(250)
        );
        assert_eq!(c.config.engine.grace.0, Duration::from_secs(2));
        assert!(
            c.render()
                .contains("record_buffer.max_latency = \"250ms\"  # warrant.toml")
        );
        let c = load(None, &[("WARRANT_ENGINE_GRACE", "5m")]).unwrap();
        assert_eq!(c.config.engine.grace.0, Duration::from_secs(300));
        let c = load(None, &[("WARRANT_ENGINE_GRACE", "90")]).unwrap();
        assert_eq!(c.config.engine.grace.0, Duration::from_secs(90));
        for (text, shown) in [
            ("1h", "1h"),
            ("120s", "2m"),
            ("1500ms", "1500ms"),
            ("0", "0s"),
        ] {
            assert_eq!(ConfigDuration::parse(text).unwrap().to_string(), shown);
        }
    }
}
