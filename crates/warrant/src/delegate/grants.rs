//! The grant file (`--grants FILE`) and the pure decisions over it: which
//! agent may ask for what, for how long, how often. No IO but [`load`].

use super::da::Cap;
use serde::Deserialize;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// A grant file that cannot be used; names the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum GrantFileError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    #[error("agent[{index}].{field}: {reason}")]
    Field {
        index: usize,
        field: &'static str,
        reason: String,
    },
    #[error("agent[{index}].id: {id:?} is granted twice")]
    Duplicate { index: usize, id: String },
}

/// Delegation mode as the grant file spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Authorized,
    Representative,
}

impl Mode {
    /// The DA's `delegationMode` integer.
    pub fn as_i64(self) -> i64 {
        match self {
            Mode::Authorized => 0,
            Mode::Representative => 1,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    agent: Vec<RawAgent>,
}

#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    id: String,
    #[serde(default)]
    key_sha256: Option<String>,
    capabilities: Vec<String>,
    mode: Mode,
    max_window: String,
    max_da_lifetime: String,
    max_das_per_hour: u32,
}

/// One `[[agent]]` entry, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentGrant {
    pub id: String,
    /// SHA-256 of the agent's SubjectPublicKeyInfo DER, when pinned.
    pub key_sha256: Option<[u8; 32]>,
    pub capabilities: BTreeSet<Cap>,
    pub mode: Mode,
    /// Seconds from the window's start (see [`window_end`]).
    pub max_window: i64,
    pub max_da_lifetime: i64,
    pub max_das_per_hour: u32,
    /// Hex SHA-256 of the entry as written: a changed entry is a new grant
    /// and starts a new window.
    pub fingerprint: String,
}

/// Every agent's grant, by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants {
    pub agents: HashMap<String, AgentGrant>,
}

/// Reads and validates the grant file.
pub fn load(path: &Path) -> Result<Grants, GrantFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| GrantFileError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text)
}

/// Parses a grant file's text: unknown keys, bad durations, bad
/// capabilities and duplicate agents are errors naming the field.
pub fn parse(text: &str) -> Result<Grants, GrantFileError> {
    let raw: RawFile = toml::from_str(text)?;
    let mut agents = HashMap::new();
    for (index, a) in raw.agent.into_iter().enumerate() {
        let field = |field, reason: String| GrantFileError::Field {
            index,
            field,
            reason,
        };
        if a.id.is_empty() || a.id.len() > 256 {
            return Err(field("id", "must be 1 to 256 characters".into()));
        }
        let key_sha256 = match &a.key_sha256 {
            None => None,
            Some(h) => Some(
                hex::decode(h)
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .ok_or_else(|| field("key_sha256", "expected 64 hex digits".into()))?,
            ),
        };
        let mut capabilities = BTreeSet::new();
        for c in &a.capabilities {
            let cap = Cap::parse(c)
                .ok_or_else(|| field("capabilities", format!("{c:?}: expected scheme:id")))?;
            capabilities.insert(cap);
        }
        let max_window = parse_duration(&a.max_window).map_err(|r| field("max_window", r))?;
        let max_da_lifetime =
            parse_duration(&a.max_da_lifetime).map_err(|r| field("max_da_lifetime", r))?;
        if max_da_lifetime > 86_400 {
            return Err(field("max_da_lifetime", "at most 24h".into()));
        }
        if a.max_das_per_hour == 0 {
            return Err(field("max_das_per_hour", "must be at least 1".into()));
        }
        let canonical = serde_json::to_vec(&a).unwrap_or_default();
        let grant = AgentGrant {
            id: a.id.clone(),
            key_sha256,
            capabilities,
            mode: a.mode,
            max_window,
            max_da_lifetime,
            max_das_per_hour: a.max_das_per_hour,
            fingerprint: hex::encode(aic::crypto::sha256(&canonical)),
        };
        if agents.insert(a.id.clone(), grant).is_some() {
            return Err(GrantFileError::Duplicate { index, id: a.id });
        }
    }
    Ok(Grants { agents })
}

/// `90s`, `15m`, `8h`, `2d`: a positive number of seconds.
pub fn parse_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?}: expected a positive duration like 90s, 15m, 8h or 2d");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = s.split_at(split);
    let n: i64 = n.parse().map_err(|_| bad())?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    match n.checked_mul(mult) {
        Some(v) if v > 0 => Ok(v),
        _ => Err(bad()),
    }
}

/// Why the signer refused a DA. [`key`](Refusal::key) is the stable error
/// key the agent sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no grant for agent {0:?} (unknown or withdrawn)")]
    UnknownAgent(String),
    #[error("capability {0} is not granted")]
    CapabilityNotGranted(String),
    #[error("the agent key does not match the grant's key_sha256")]
    KeyMismatch,
    #[error("lifetime {requested}s is longer than the grant's max_da_lifetime {max}s")]
    LifetimeTooLong { requested: i64, max: i64 },
    #[error("the grant's window ended at {ended} (unix seconds)")]
    WindowEnded { ended: i64 },
    #[error("{max} DAs in the last hour: the grant's max_das_per_hour")]
    RateExceeded { max: u32 },
}

impl Refusal {
    pub fn key(&self) -> &'static str {
        match self {
            Refusal::UnknownAgent(_) => "grant.unknown_agent",
            Refusal::CapabilityNotGranted(_) => "grant.capability_not_granted",
            Refusal::KeyMismatch => "grant.key_mismatch",
            Refusal::LifetimeTooLong { .. } => "grant.lifetime_too_long",
            Refusal::WindowEnded { .. } => "grant.window_ended",
            Refusal::RateExceeded { .. } => "grant.rate_exceeded",
        }
    }
}

/// What an agent asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub agent_id: String,
    /// Empty: every granted capability.
    pub capabilities: Vec<Cap>,
    /// `None`: the grant's `max_da_lifetime`.
    pub lifetime: Option<i64>,
    pub agent_key_sha256: [u8; 32],
}

/// What the signer already signed for one agent under one grant entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The first DA under this grant entry: the window's start.
    pub window_start: Option<i64>,
    /// Times of the DAs signed in the last hour (older ones may be kept).
    pub recent: Vec<i64>,
}

/// A DA the grant allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved {
    pub capabilities: Vec<Cap>,
    pub mode: Mode,
    /// Clipped so the DA never ends past the window.
    pub lifetime: i64,
}

/// The window ends `max_window` after the first DA under this grant entry
/// (or after `now` for the first one).
pub fn window_end(grant: &AgentGrant, history: &History, now: i64) -> i64 {
    history.window_start.unwrap_or(now) + grant.max_window
}

/// Decides one DA request against the grant (`None`: no grant) at `now`.
pub fn authorize(
    grant: Option<&AgentGrant>,
    ask: &Ask,
    history: &History,
    now: i64,
) -> Result<Approved, Refusal> {
    let grant = grant.ok_or_else(|| Refusal::UnknownAgent(ask.agent_id.clone()))?;
    if grant
        .key_sha256
        .is_some_and(|pinned| pinned != ask.agent_key_sha256)
    {
        return Err(Refusal::KeyMismatch);
    }
    if let Some(c) = ask
        .capabilities
        .iter()
        .find(|c| !grant.capabilities.contains(c))
    {
        return Err(Refusal::CapabilityNotGranted(c.to_string()));
    }
    let requested = ask.lifetime.unwrap_or(grant.max_da_lifetime);
    if requested <= 0 || requested > grant.max_da_lifetime {
        return Err(Refusal::LifetimeTooLong {
            requested,
            max: grant.max_da_lifetime,
        });
    }
    let end = window_end(grant, history, now);
    if now >= end {
        return Err(Refusal::WindowEnded { ended: end });
    }
    let in_last_hour = history.recent.iter().filter(|&&t| t > now - 3600).count();
    if in_last_hour >= grant.max_das_per_hour as usize {
        return Err(Refusal::RateExceeded {
            max: grant.max_das_per_hour,
        });
    }
    let capabilities = if ask.capabilities.is_empty() {
        grant.capabilities.iter().cloned().collect()
    } else {
        let set: BTreeSet<Cap> = ask.capabilities.iter().cloned().collect();
        set.into_iter().collect()
    };
    Ok(Approved {
        capabilities,
        mode: grant.mode,
        lifetime: requested.min(end - now),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[[agent]]
id = "report-bot"
capabilities = ["db:read", "db:list"]
mode = "authorized"
max_window = "8h"
max_da_lifetime = "1h"
max_das_per_hour = 2
"#;

    fn grant() -> AgentGrant {
        parse(FILE).unwrap().agents["report-bot"].clone()
    }

    fn ask() -> Ask {
        Ask {
            agent_id: "report-bot".into(),
            capabilities: vec![],
            lifetime: Some(600),
            agent_key_sha256: [7; 32],
        }
    }

    fn cap(s: &str) -> Cap {
        Cap::parse(s).unwrap()
    }

    #[test]
    fn parses_a_grant_file() {
        let g = grant();
        assert_eq!(g.max_window, 8 * 3600);
        assert_eq!(g.max_da_lifetime, 3600);
        assert_eq!(g.mode, Mode::Authorized);
        assert_eq!(g.capabilities.len(), 2);
        assert_eq!(g.key_sha256, None);
    }

    #[test]
    fn rejects_unknown_keys() {
        let err = parse(&FILE.replace("mode =", "colour = \"red\"\nmode =")).unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
    }

    #[test]
    fn rejects_bad_durations_naming_the_field() {
        let err = parse(&FILE.replace("\"8h\"", "\"8 hours\"")).unwrap_err();
        assert!(err.to_string().contains("agent[0].max_window"), "{err}");
        let err = parse(&FILE.replace("\"1h\"", "\"0s\"")).unwrap_err();
        assert!(
            err.to_string().contains("agent[0].max_da_lifetime"),
            "{err}"
        );
    }

    #[test]
    fn rejects_duplicate_agents() {
        let err = parse(&format!("{FILE}{FILE}")).unwrap_err();
        assert!(
            matches!(err, GrantFileError::Duplicate { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn rejects_bad_capabilities_and_key_hashes() {
        let err = parse(&FILE.replace("\"db:list\"", "\"dblist\"")).unwrap_err();
        assert!(err.to_string().contains("agent[0].capabilities"), "{err}");
        let err = parse(&FILE.replace("mode =", "key_sha256 = \"abc\"\nmode =")).unwrap_err();
        assert!(err.to_string().contains("agent[0].key_sha256"), "{err}");
    }

    #[test]
    fn rejects_a_missing_field() {
        let err = parse(&FILE.replace("max_das_per_hour = 2", "")).unwrap_err();
        assert!(err.to_string().contains("max_das_per_hour"), "{err}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("15m"), Ok(900));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        for bad in ["", "h", "1", "-1h", "1w", "0m", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_changed_entry_has_a_new_fingerprint() {
        let other = parse(&FILE.replace("\"8h\"", "\"9h\"")).unwrap();
        assert_ne!(other.agents["report-bot"].fingerprint, grant().fingerprint);
        assert_eq!(
            parse(FILE).unwrap().agents["report-bot"].fingerprint,
            grant().fingerprint
        );
    }

    #[test]
    fn approves_within_the_grant_with_every_capability_by_default() {
        let a = authorize(Some(&grant()), &ask(), &History::default(), 1000).unwrap();
        assert_eq!(a.capabilities, vec![cap("db:list"), cap("db:read")]);
        assert_eq!(a.lifetime, 600);
        assert_eq!(a.mode, Mode::Authorized);
    }

    #[test]
    fn rejects_unknown_agent() {
        let err = authorize(None, &ask(), &History::default(), 0).unwrap_err();
        assert_eq!(err.key(), "grant.unknown_agent");
    }

    #[test]
    fn rejects_capability_not_granted() {
        let mut a = ask();
        a.capabilities = vec![cap("db:read"), cap("db:write")];
        let err = authorize(Some(&grant()), &a, &History::default(), 0).unwrap_err();
        assert_eq!(err, Refusal::CapabilityNotGranted("db:write".into()));
        assert_eq!(err.key(), "grant.capability_not_granted");
    }

    #[test]
    fn rejects_key_mismatch() {
        let mut g = grant();
        g.key_sha256 = Some([8; 32]);
        let err = authorize(Some(&g), &ask(), &History::default(), 0).unwrap_err();
        assert_eq!(err.key(), "grant.key_mismatch");
        g.key_sha256 = Some([7; 32]);
        assert!(authorize(Some(&g), &ask(), &History::default(), 0).is_ok());
    }

    #[test]
    fn rejects_lifetime_too_long() {
        let mut a = ask();
        a.lifetime = Some(3601);
        let err = authorize(Some(&grant()), &a, &History::default(), 0).unwrap_err();
        assert_eq!(err.key(), "grant.lifetime_too_long");
        a.lifetime = Some(0);
        assert!(authorize(Some(&grant()), &a, &History::default(), 0).is_err());
    }

    #[test]
    fn rejects_window_ended() {
        let h = History {
            window_start: Some(1000),
            recent: vec![],
        };
        let end = 1000 + 8 * 3600;
        let err = authorize(Some(&grant()), &ask(), &h, end).unwrap_err();
        assert_eq!(err, Refusal::WindowEnded { ended: end });
        assert_eq!(err.key(), "grant.window_ended");
    }

    #[test]
    fn clips_the_lifetime_to_the_window() {
        let h = History {
            window_start: Some(1000),
            recent: vec![],
        };
        let end = 1000 + 8 * 3600;
        let a = authorize(Some(&grant()), &ask(), &h, end - 100).unwrap();
        assert_eq!(a.lifetime, 100);
    }

    #[test]
    fn rejects_rate_exceeded() {
        let h = History {
            window_start: Some(0),
            recent: vec![100, 200],
        };
        let err = authorize(Some(&grant()), &ask(), &h, 300).unwrap_err();
        assert_eq!(err.key(), "grant.rate_exceeded");
        // An hour after the first, one slot is free again.
        assert!(authorize(Some(&grant()), &ask(), &h, 3700).is_ok());
    }
}
