//! The run spec: plain, serialisable data at the bottom of the engine.
//!
//! [`RunSpec`] is the loose form a user writes (CLI flags, a TOML/JSON run spec, the
//! daemon's `POST /runs` body), with the scenario's `[[steps]]` and `[data]` tables
//! ([`steps`]). Every other module reads these types; none of them is read back into
//! here, so this module depends on nothing of the engine but [`ConfigError`].
//! [`RunSpec::validate`](crate::config) turns a spec into a `RunConfig`.

pub mod segment;
pub mod steps;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// One step of a ramp: move linearly from the previous target to `target` over
/// `duration`. The ramp starts from 0 (k6's convention); a zero-length stage is a jump.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    #[serde(with = "duration_serde")]
    pub duration: Duration,
    pub target: f64,
}

/// How requests are issued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase", deny_unknown_fields)]
pub enum LoadModel {
    /// N slots, each sending its next request when the previous completes (plus an
    /// optional think time). Throughput is an output.
    Closed {
        concurrency: usize,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stages: Vec<Stage>,
        #[serde(default)]
        think_time: ThinkTime,
    },
    /// Requests come due on a fixed schedule regardless of responses.
    Open {
        #[serde(default)]
        rate: f64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stages: Vec<Stage>,
    },
}

impl LoadModel {
    /// `concurrency` slots without stages or think time.
    pub fn closed(concurrency: usize) -> Self {
        Self::Closed {
            concurrency,
            stages: Vec::new(),
            think_time: ThinkTime::None,
        }
    }
}

/// Pause between a slot's response and its next request (closed model only). The
/// exponential form gives the Poisson-like "random" mode `warrant bench` needs.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ThinkTime {
    #[default]
    None,
    Fixed {
        #[serde(with = "duration_serde")]
        time: Duration,
    },
    Exponential {
        #[serde(with = "duration_serde")]
        mean: Duration,
    },
}

/// TLS client options.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsOptions {
    /// PEM file of CA certificates to trust instead of the bundled web PKI roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain (mTLS); requires `key_file`.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate. For test targets only.
    #[serde(default)]
    pub insecure: bool,
}

/// Loose run description as a user writes it. Everything optional has a documented
/// default applied by [`RunSpec::validate`].
///
/// Unknown keys are rejected: the flattened [`LoadModel`] denies every key that
/// neither it nor this struct consumed (serde cannot combine `deny_unknown_fields`
/// with `flatten` on the outer struct).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub url: String,
    #[serde(default = "default_method")]
    pub method: String,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Request body, any bytes (an OCSP request, a protobuf). In JSON a
    /// UTF-8 body is a string, any other `{"base64": "…"}`.
    #[serde(default, with = "opt_body_serde")]
    pub body: Option<Vec<u8>>,
    #[serde(flatten)]
    pub model: LoadModel,
    /// Run length. Required unless `iterations` is set (or stages define it).
    #[serde(default, with = "opt_duration_serde")]
    pub duration: Option<Duration>,
    /// Stop after exactly this many requests.
    #[serde(default)]
    pub iterations: Option<u64>,
    /// Worker threads; default: available cores.
    #[serde(default)]
    pub workers: Option<usize>,
    /// Global connection budget. Closed HTTP/1.1: always = concurrency. Open HTTP/1.1:
    /// default = min(max_in_flight, 256). HTTP/2: default = workers.
    #[serde(default)]
    pub connections: Option<usize>,
    #[serde(default, with = "opt_duration_serde")]
    pub timeout: Option<Duration>,
    /// Time allowed to in-flight requests after `duration`; default = timeout.
    #[serde(default, with = "opt_duration_serde")]
    pub grace: Option<Duration>,
    #[serde(default)]
    pub max_body: Option<u64>,
    /// Open model only; default 10,000.
    #[serde(default)]
    pub max_in_flight: Option<usize>,
    #[serde(default)]
    pub http2: bool,
    /// Open a new connection for every request (TCP, and TLS on https://) and close
    /// it after the response; HTTP/1.1 requests carry `Connection: close`.
    #[serde(default)]
    pub no_keepalive: bool,
    #[serde(default)]
    pub tls: TlsOptions,
    /// Live tick period; must divide one second. Default 250 ms.
    #[serde(default, with = "opt_duration_serde")]
    pub tick: Option<Duration>,
    /// Status classes/codes that count as success, e.g. "2xx,3xx" (default) or "200,201".
    #[serde(default)]
    pub success_status: Option<String>,
    /// Scenario steps (`[[steps]]`); see [`crate::scenario`]. Empty: one fixed request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<steps::StepSpec>,
    /// Scenario data file (`[data]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<steps::DataSpec>,
    /// A targets file in vegeta's format, replayed in a cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<PathBuf>,
    /// Target monitoring ([`crate::monitor`]): Prometheus endpoints scraped every second.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub monitor: Vec<String>,
    /// Series kept from `monitor`: names or globs (`warrant_*`); default all, capped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub monitor_metric: Vec<String>,
    /// Local processes whose CPU and RSS are sampled every second.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub monitor_pid: Vec<u32>,
    /// This process's share of a run several generate together ([`segment`]):
    /// `"i/n"` or `"a:b"`. Absent: the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<segment::Segment>,
    /// The instant the run starts (RFC 3339, e.g. `2026-12-07T10:00:00Z`), so the
    /// segments on several machines start together. Absent: at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
}

fn default_method() -> String {
    "GET".to_string()
}

/// Parsed `http(s)://host[:port][/path]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, always starting with `/`.
    pub path: String,
    /// Every address the host resolved to, used round-robin per connection.
    pub addrs: Vec<SocketAddr>,
    /// How long resolving the host took. The name is resolved once, during
    /// validation (as wrk does): a lookup per connection would measure the local
    /// resolver's cache, not the target. `None` for an IP literal.
    pub resolve_time: Option<Duration>,
}

impl Target {
    /// `scheme://authority` followed by `path` (path and query, starting with `/`).
    pub fn url_with_path(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.authority())
    }

    /// The `Host` header / `:authority` value.
    pub fn authority(&self) -> String {
        let default_port = if self.tls { 443 } else { 80 };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default_port {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Parse a URL without resolving it.
pub fn parse_url(url: &str) -> Result<Target, ConfigError> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return Err(ConfigError::new(
            "url",
            format!("{url:?} must start with http:// or https://"),
        ));
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.contains('@') {
        return Err(ConfigError::new("url", "userinfo in URLs is not supported"));
    }
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let end = v6
            .find(']')
            .ok_or_else(|| ConfigError::new("url", "unterminated IPv6 literal"))?;
        let host = &v6[..end];
        let after = &v6[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => p
                .parse()
                .map_err(|_| ConfigError::new("url", format!("bad port {p:?}")))?,
            None if after.is_empty() => default_port,
            None => return Err(ConfigError::new("url", "garbage after IPv6 literal")),
        };
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (
                h.to_string(),
                p.parse()
                    .map_err(|_| ConfigError::new("url", format!("bad port {p:?}")))?,
            ),
            None => (authority.to_string(), default_port),
        }
    };
    if host.is_empty() {
        return Err(ConfigError::new("url", "missing host"));
    }
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(ConfigError::new(
            "url",
            "path contains spaces or control characters",
        ));
    }
    Ok(Target {
        tls,
        host,
        port,
        path,
        addrs: Vec::new(),
        resolve_time: None,
    })
}

/// Which responses count as success. Everything else (and every transport error)
/// is a failure: the single error-rate definition used by ticks, series and report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuccessStatus {
    ok: [bool; 600],
}

impl SuccessStatus {
    pub fn parse(spec: &str) -> Result<Self, ConfigError> {
        let mut ok = [false; 600];
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let lower = part.to_ascii_lowercase();
            if lower.len() == 3 && lower.ends_with("xx") {
                let class = lower.as_bytes()[0];
                if !(b'1'..=b'5').contains(&class) {
                    return Err(ConfigError::new(
                        "success_status",
                        format!("bad class {part:?}"),
                    ));
                }
                let base = usize::from(class - b'0') * 100;
                ok[base..base + 100].iter_mut().for_each(|v| *v = true);
            } else {
                let code: usize = part
                    .parse()
                    .ok()
                    .filter(|c| (100..600).contains(c))
                    .ok_or_else(|| {
                        ConfigError::new("success_status", format!("bad status {part:?}"))
                    })?;
                ok[code] = true;
            }
        }
        if !ok.iter().any(|v| *v) {
            return Err(ConfigError::new("success_status", "no status selected"));
        }
        Ok(Self { ok })
    }

    pub fn is_success(&self, status: u16) -> bool {
        self.ok.get(usize::from(status)).copied().unwrap_or(false)
    }
}

impl Default for SuccessStatus {
    fn default() -> Self {
        // "2xx,3xx" is a constant spec.
        let mut ok = [false; 600];
        ok[200..400].iter_mut().for_each(|v| *v = true);
        Self { ok }
    }
}

impl RunSpec {
    /// A spec for `url` with the given model and every option at its default.
    pub fn new(url: impl Into<String>, model: LoadModel) -> Self {
        Self {
            url: url.into(),
            method: default_method(),
            headers: Vec::new(),
            body: None,
            model,
            duration: None,
            iterations: None,
            workers: None,
            connections: None,
            timeout: None,
            grace: None,
            max_body: None,
            max_in_flight: None,
            http2: false,
            no_keepalive: false,
            tls: TlsOptions::default(),
            tick: None,
            success_status: None,
            steps: Vec::new(),
            data: None,
            targets: None,
            monitor: Vec::new(),
            monitor_metric: Vec::new(),
            monitor_pid: Vec::new(),
            segment: None,
            start_at: None,
        }
    }
}

/// Parse "250ms", "10s", "1.5s", "2m", "1h", "500us" (a bare number means seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("bad duration {text:?} (try 10s, 250ms)"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("bad duration unit in {text:?}")),
    };
    let secs = value * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("duration {text:?} out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parse "10s:100,30s:100,5s:0" (duration:target pairs).
pub fn parse_stages(text: &str) -> Result<Vec<Stage>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (d, t) = s
                .split_once(':')
                .ok_or_else(|| format!("stage {s:?} must be DURATION:TARGET"))?;
            let target: f64 = t
                .trim()
                .parse()
                .map_err(|_| format!("bad stage target {t:?}"))?;
            Ok(Stage {
                duration: parse_duration(d)?,
                target,
            })
        })
        .collect()
}

mod duration_serde {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_secs_f64() * 1e3))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// `Option<Duration>` as a human string ("250ms", "10s"), for every crate that reads specs.
pub mod opt_duration_serde {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format!("{}ms", d.as_secs_f64() * 1e3)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| super::parse_duration(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

mod opt_body_serde {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Text(String),
        Binary { base64: String },
    }

    pub fn serialize<S: Serializer>(b: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            None => s.serialize_none(),
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => Wire::Text(text.to_string()).serialize(s),
                Err(_) => Wire::Binary {
                    base64: STANDARD.encode(bytes),
                }
                .serialize(s),
            },
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<Wire>::deserialize(d)?
            .map(|w| match w {
                Wire::Text(t) => Ok(t.into_bytes()),
                Wire::Binary { base64 } => STANDARD
                    .decode(base64)
                    .map_err(|e| serde::de::Error::custom(format!("body.base64: {e}"))),
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_round_trips_as_text_or_base64() {
        let mut spec = RunSpec::new("http://127.0.0.1:1/", LoadModel::closed(1));
        for body in [b"{\"a\": 1}".to_vec(), vec![0x30, 0x82, 0xff, 0x00]] {
            spec.body = Some(body.clone());
            let json = serde_json::to_string(&spec).unwrap();
            let back: RunSpec = serde_json::from_str(&json).unwrap();
            assert_eq!(back.body, Some(body), "{json}");
        }
        assert!(
            serde_json::to_string(&spec)
                .unwrap()
                .contains("\"base64\":\"MIL/AA==\"")
        );
    }

    #[test]
    fn parses_urls_with_ports_paths_and_ipv6() {
        let t = parse_url("http://127.0.0.1:8080/a?b=1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 8080, "/a?b=1")
        );
        let t = parse_url("https://[::1]/").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.tls), ("::1", 443, true));
        assert_eq!(t.authority(), "[::1]");
        let t = parse_url("http://h?x").unwrap();
        assert_eq!(t.path, "/?x");
        assert!(parse_url("ftp://x").is_err());
        assert!(parse_url("http://:80/").is_err());
        assert!(parse_url("http://h:99999/").is_err());
    }

    #[test]
    fn rejects_unknown_mode() {
        let err = serde_json::from_str::<RunSpec>(r#"{"url":"http://127.0.0.1/","mode":"burst"}"#);
        assert!(err.is_err());
    }

    #[test]
    fn deserializes_a_run_spec_and_rejects_unknown_fields() {
        let spec: RunSpec = serde_json::from_str(
            r#"{"url":"http://127.0.0.1:1/","mode":"open","rate":1500.5,"duration":"10s",
                "max_in_flight":100,"headers":[["X-A","1"]]}"#,
        )
        .unwrap();
        assert_eq!(
            spec.model,
            LoadModel::Open {
                rate: 1500.5,
                stages: vec![]
            }
        );
        assert_eq!(spec.duration, Some(Duration::from_secs(10)));
        let spec: RunSpec = serde_json::from_str(
            r#"{"url":"http://127.0.0.1:1/","mode":"closed","concurrency":4,
                "stages":[{"duration":"1s","target":4}],
                "think_time":{"kind":"exponential","mean":"10ms"}}"#,
        )
        .unwrap();
        assert!(matches!(
            spec.model,
            LoadModel::Closed { concurrency: 4, .. }
        ));
        let round_trip: RunSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(round_trip, spec);
        assert!(
            serde_json::from_str::<RunSpec>(
                r#"{"url":"http://127.0.0.1:1/","mode":"closed","concurrency":4,"bogus":1}"#
            )
            .is_err()
        );
    }

    #[test]
    fn rejects_rate_with_closed_model() {
        let err = serde_json::from_str::<RunSpec>(
            r#"{"url":"http://127.0.0.1/","mode":"closed","concurrency":4,"rate":10}"#,
        );
        assert!(err.is_err(), "rate is not a closed-model field");
    }

    #[test]
    fn success_status_parses_classes_and_codes() {
        let s = SuccessStatus::parse("2xx, 404").unwrap();
        assert!(s.is_success(204) && s.is_success(404) && !s.is_success(301));
        assert!(SuccessStatus::parse("6xx").is_err());
        assert!(SuccessStatus::parse("").is_err());
        assert!(SuccessStatus::default().is_success(302));
        assert!(!SuccessStatus::default().is_success(500));
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("3 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
