//! Route rules (admit.md §3): which capability a request needs, by method and
//! path.
//!
//! A rule file is line-oriented so that an error can name its line:
//!
//! ```text
//! # METHODS   PATH                 REQUIREMENT              [OPTIONS...]
//! GET,HEAD    /v1/reports/*        database:query:SELECT    roles=analyst,ops  max_rows=100
//! POST        /v1/orders           orders:create
//! *           /healthz             public
//! GET         /files/**            storage:read:*
//! ```
//!
//! A bad file is refused whole ([`Rules::parse`] stops at the first bad
//! line), so the caller keeps the rules in force. First match wins and no
//! match refuses ([`Rules::first_match`] returns `None`). Every rule grants,
//! none denies, so anything this module cannot read unambiguously is refused
//! rather than guessed at: a request path is checked by [`request_path`]
//! before it is matched.

use std::collections::HashSet;

use serde_json::{Map, Number, Value};

/// Largest rule file accepted, in bytes (4 MiB).
pub const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;
/// Longest line accepted, in bytes (without its line ending).
pub const MAX_LINE_BYTES: usize = 4096;
/// Most rules one file may hold.
pub const MAX_RULES: usize = 10_000;
/// Longest capability scheme, in bytes: the AIC's `schemeId` bound, so a rule
/// can never require a capability no credential could carry.
pub const MAX_SCHEME_BYTES: usize = aic::model::bounds::SCHEME_ID.1;
/// Longest capability id, in bytes: the AIC's `capabilityId` bound.
pub const MAX_ID_BYTES: usize = aic::model::bounds::CAPABILITY_ID.1;

/// A parsed rule file: the rules in file order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

/// One rule: the methods and path it applies to and what it requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// 1-based line of the rule in its file (for logs and decisions).
    pub line: usize,
    /// Methods the rule applies to.
    pub methods: Methods,
    /// Path pattern the rule applies to.
    pub path: PathPattern,
    /// What the caller must hold.
    pub requirement: Requirement,
    /// Roles of which the caller needs ANY; empty when the rule names none.
    pub roles: Vec<String>,
    /// Parameter bounds (`max_rows=100` → `{"max_rows": 100}`); empty when none.
    pub params: Map<String, Value>,
}

/// The methods a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Methods {
    /// `*`: any method.
    Any,
    /// Listed methods (uppercase tokens, no duplicates), compared exactly.
    List(Vec<String>),
}

impl Methods {
    /// Whether `method`, as received, is one of these (case-sensitive, as HTTP
    /// methods are).
    pub fn matches(&self, method: &str) -> bool {
        match self {
            Methods::Any => true,
            Methods::List(list) => list.iter().any(|m| m == method),
        }
    }
}

/// What a rule requires of the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `public`: admitted without a credential.
    Public,
    /// A capability `scheme:id`, split at the first colon.
    Capability {
        /// The capability scheme (`database` in `database:query:SELECT`).
        scheme: String,
        /// The capability id (`query:SELECT` in `database:query:SELECT`).
        id: String,
    },
}

/// A rule file refused, with the line that refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct RuleFileError {
    /// 1-based line number; 0 for an error about the whole file (its size).
    pub line: usize,
    /// What is wrong, naming the field.
    pub message: String,
}

impl RuleFileError {
    fn new(line: usize, message: impl Into<String>) -> Self {
        RuleFileError {
            line,
            message: message.into(),
        }
    }
}

/// A path pattern: `/`-separated segments, each a literal, `*` (exactly one
/// non-empty segment) or an in-segment glob (`v*.json`), optionally ending in
/// `**` (zero or more further segments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    source: String,
    segments: Vec<Segment>,
    /// The pattern ended in `**`.
    rest: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Matches exactly this text (the empty literal is a trailing slash, or
    /// the root in `/`).
    Literal(String),
    /// `*`: any one non-empty segment.
    Any,
    /// Literal parts between `*`s, at least two parts: `v*.json` → `["v", ".json"]`.
    Glob(Vec<String>),
}

impl Segment {
    fn matches(&self, seg: &str) -> bool {
        match self {
            Segment::Literal(lit) => lit == seg,
            Segment::Any => !seg.is_empty(),
            Segment::Glob(parts) => glob_matches(parts, seg),
        }
    }
}

/// Whether `s` matches the glob whose literal parts (split at `*`) are `parts`.
///
/// Greedy, without backtracking: the first part must be a prefix and the last
/// a suffix; each middle part is taken at its leftmost occurrence after the
/// previous one. Leftmost is always safe for `*`-only globs (a later
/// occurrence leaves less room for the rest, never more), and `str::find` is
/// linear, so a pattern like `*a*a*a*b` costs O(len(s) + len(pattern)).
fn glob_matches(parts: &[String], s: &str) -> bool {
    let (Some((first, rest)), Some(last)) = (parts.split_first(), parts.last()) else {
        return s.is_empty();
    };
    if parts.len() == 1 {
        return s == first;
    }
    if s.len() < first.len() + last.len() || !s.starts_with(first.as_str()) {
        return false;
    }
    if !s.ends_with(last.as_str()) {
        return false;
    }
    // Both bounds are char boundaries: they end a matched prefix and start a
    // matched suffix, and the length check keeps them in order.
    let Some(mut middle) = s.get(first.len()..s.len() - last.len()) else {
        return false;
    };
    let middles = &rest[..rest.len().saturating_sub(1)];
    for part in middles {
        match middle.find(part.as_str()) {
            Some(at) => middle = &middle[at + part.len()..],
            None => return false,
        }
    }
    true
}

impl PathPattern {
    /// Parses a pattern; the error says what is wrong (without the field name).
    pub fn parse(source: &str) -> Result<PathPattern, String> {
        let Some(body) = source.strip_prefix('/') else {
            return Err("must start with /".into());
        };
        if let Some(c) = source.chars().find(|c| matches!(c, '%' | '?' | '#' | '\\')) {
            // `%`: a pattern is matched against the path as received, so an
            // encoding in it would match only one spelling of a path; `?`/`#`
            // would be query or fragment, never part of a matched path; a
            // backslash could never match (request_path refuses it).
            return Err(format!("{c:?} is not allowed in a path pattern"));
        }
        let raw: Vec<&str> = body.split('/').collect();
        let last = raw.len() - 1;
        let mut segments = Vec::with_capacity(raw.len());
        let mut rest = false;
        for (i, seg) in raw.iter().enumerate() {
            let seg = *seg;
            if seg.is_empty() {
                // Allowed only last: `/` (the root) and `/a/` (trailing slash).
                if i != last {
                    return Err("empty segment".into());
                }
                segments.push(Segment::Literal(String::new()));
            } else if seg == "." || seg == ".." {
                return Err(format!("{seg:?} segment"));
            } else if seg == "**" {
                if i != last {
                    return Err("** is only allowed as the last segment".into());
                }
                rest = true;
            } else if seg.contains("**") {
                // `**` never spans segments inside a glob; refuse it rather than
                // let `a**b` quietly mean `a*b`.
                return Err(format!(
                    "segment {seg:?}: ** is only allowed as a whole last segment"
                ));
            } else if seg == "*" {
                segments.push(Segment::Any);
            } else if seg.contains('*') {
                segments.push(Segment::Glob(seg.split('*').map(str::to_owned).collect()));
            } else {
                segments.push(Segment::Literal(seg.to_owned()));
            }
        }
        Ok(PathPattern {
            source: source.to_owned(),
            segments,
            rest,
        })
    }

    /// The pattern as written in the rule file.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `path` (already checked by [`request_path`]) matches: one pass
    /// over its segments, no backtracking (`**` is only ever last).
    pub fn matches(&self, path: &str) -> bool {
        let Some(body) = path.strip_prefix('/') else {
            return false;
        };
        let mut segs = body.split('/');
        for pat in &self.segments {
            match segs.next() {
                Some(seg) if pat.matches(seg) => {}
                _ => return false,
            }
        }
        self.rest || segs.next().is_none()
    }
}

impl Rules {
    /// Parses a rule file, refusing it whole on the first bad line. A file with
    /// no rules is valid (and refuses every request).
    pub fn parse(text: &str) -> Result<Rules, RuleFileError> {
        if text.len() > MAX_FILE_BYTES {
            return Err(RuleFileError::new(
                0,
                format!(
                    "rule file is {} bytes, over the limit of {MAX_FILE_BYTES} bytes (4 MiB)",
                    text.len()
                ),
            ));
        }
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut rules = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            if line.len() > MAX_LINE_BYTES {
                return Err(RuleFileError::new(
                    number,
                    format!(
                        "line is {} bytes, over the limit of {MAX_LINE_BYTES} bytes",
                        line.len()
                    ),
                ));
            }
            check_characters(line).map_err(|m| RuleFileError::new(number, m))?;
            let content = line.trim_matches([' ', '\t']);
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            if rules.len() == MAX_RULES {
                return Err(RuleFileError::new(
                    number,
                    format!("more than {MAX_RULES} rules (the limit)"),
                ));
            }
            let rule = parse_rule(number, content).map_err(|m| RuleFileError::new(number, m))?;
            rules.push(rule);
        }
        Ok(Rules { rules })
    }

    /// The first rule whose methods include `method` (as received, compared
    /// exactly) and whose pattern matches `path` (from [`request_path`]);
    /// `None` refuses.
    pub fn first_match(&self, method: &str, path: &str) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|r| r.methods.matches(method) && r.path.matches(path))
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether the file held no rules (every request is refused).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules in file order.
    pub fn iter(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter()
    }
}

/// Refuses control characters (tab is a separator) and whitespace other than
/// space and tab: a no-break space would otherwise glue two fields into one,
/// e.g. a capability id that swallowed its `roles=` option.
fn check_characters(line: &str) -> Result<(), String> {
    match line
        .chars()
        .find(|&c| c != '\t' && (c.is_control() || (c.is_whitespace() && c != ' ')))
    {
        Some(c) => Err(format!(
            "character U+{:04X} is not allowed (separate fields with spaces or tabs)",
            u32::from(c)
        )),
        None => Ok(()),
    }
}

fn parse_rule(line: usize, content: &str) -> Result<Rule, String> {
    let fields: Vec<&str> = content
        .split([' ', '\t'])
        .filter(|f| !f.is_empty())
        .collect();
    let [methods, path, requirement, options @ ..] = fields.as_slice() else {
        return Err(format!(
            "expected at least 3 fields (METHODS PATH REQUIREMENT [OPTIONS...]), found {}",
            fields.len()
        ));
    };
    let methods = parse_methods(methods).map_err(|m| format!("METHODS {methods:?}: {m}"))?;
    let path = PathPattern::parse(path).map_err(|m| format!("PATH {path:?}: {m}"))?;
    let requirement =
        parse_requirement(requirement).map_err(|m| format!("REQUIREMENT {requirement:?}: {m}"))?;

    let mut seen = HashSet::new();
    let mut roles = Vec::new();
    let mut params = Map::new();
    for option in options {
        let fail = |m: String| format!("option {option:?}: {m}");
        let Some((name, value)) = option.split_once('=') else {
            return Err(fail("expected name=value".into()));
        };
        if !is_param_name(name) {
            return Err(fail(format!("name {name:?} is not [A-Za-z_][A-Za-z0-9_]*")));
        }
        if !seen.insert(name) {
            return Err(fail(format!("duplicate option {name:?}")));
        }
        if name == "roles" {
            roles = parse_roles(value).map_err(fail)?;
        } else {
            params.insert(name.to_owned(), parse_param_value(value).map_err(fail)?);
        }
    }
    if requirement == Requirement::Public && (!roles.is_empty() || !params.is_empty()) {
        // A public rule admits without a credential, so there is nothing to
        // check roles or bounds against; refusing says so instead of ignoring
        // what the operator asked for.
        return Err("a public rule may not carry roles or parameter bounds".into());
    }
    Ok(Rule {
        line,
        methods,
        path,
        requirement,
        roles,
        params,
    })
}

fn parse_methods(field: &str) -> Result<Methods, String> {
    if field == "*" {
        return Ok(Methods::Any);
    }
    let mut list: Vec<String> = Vec::new();
    for method in field.split(',') {
        if method.is_empty() {
            return Err("empty method".into());
        }
        if !method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "method {method:?} is not uppercase letters (methods are case-sensitive)"
            ));
        }
        if list.iter().any(|m| m == method) {
            return Err(format!("duplicate method {method:?}"));
        }
        list.push(method.to_owned());
    }
    Ok(Methods::List(list))
}

fn parse_requirement(field: &str) -> Result<Requirement, String> {
    if field == "public" {
        return Ok(Requirement::Public);
    }
    let Some((scheme, id)) = field.split_once(':') else {
        return Err("expected public or a capability scheme:id".into());
    };
    if scheme.is_empty() {
        return Err("empty capability scheme".into());
    }
    if id.is_empty() {
        return Err("empty capability id".into());
    }
    if scheme.len() > MAX_SCHEME_BYTES {
        return Err(format!(
            "capability scheme is {} bytes, over the limit of {MAX_SCHEME_BYTES}",
            scheme.len()
        ));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "capability id is {} bytes, over the limit of {MAX_ID_BYTES}",
            id.len()
        ));
    }
    Ok(Requirement::Capability {
        scheme: scheme.to_owned(),
        id: id.to_owned(),
    })
}

fn parse_roles(value: &str) -> Result<Vec<String>, String> {
    if value.is_empty() {
        return Err("roles= names no role".into());
    }
    let mut roles: Vec<String> = Vec::new();
    for role in value.split(',') {
        if role.is_empty() {
            return Err("empty role name".into());
        }
        if roles.iter().any(|r| r == role) {
            return Err(format!("duplicate role {role:?}"));
        }
        roles.push(role.to_owned());
    }
    Ok(roles)
}

fn is_param_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A JSON number if the value is one, `true`/`false` as bool, otherwise the
/// text as a JSON string (taken as is: `"x"` keeps its quotes).
fn parse_param_value(value: &str) -> Result<Value, String> {
    if value.is_empty() {
        return Err("empty value".into());
    }
    match value {
        "true" => return Ok(Value::Bool(true)),
        "false" => return Ok(Value::Bool(false)),
        _ => {}
    }
    if is_json_number(value) {
        // Written as a number but out of serde_json's range (`1e400`): an
        // error, not a string the bound would then compare against wrongly.
        return value
            .parse::<Number>()
            .map(Value::Number)
            .map_err(|_| format!("number {value:?} is out of range"));
    }
    Ok(Value::String(value.to_owned()))
}

/// JSON's number grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(s: &str) -> bool {
    fn digits(b: &[u8]) -> usize {
        b.iter().take_while(|c| c.is_ascii_digit()).count()
    }
    let b = s.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(c) if c.is_ascii_digit() => i += digits(&b[i..]),
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        let n = digits(&b[i + 1..]);
        if n == 0 {
            return false;
        }
        i += 1 + n;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let n = digits(&b[i..]);
        if n == 0 {
            return false;
        }
        i += n;
    }
    i == b.len()
}

/// Why a request path was refused by [`request_path`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The URI has no path (`""`, or `https://host` with nothing after the host).
    #[error("empty path")]
    Empty,
    /// The path does not start with `/` (asterisk-form `*`, authority-form
    /// `host:443`, a relative reference, a malformed absolute form).
    #[error("path does not start with /")]
    NotAbsolute,
    /// `//`: an empty segment before the last (a trailing `/` is allowed).
    #[error("empty path segment (//)")]
    EmptySegment,
    /// A `.` or `..` segment, also with a `;` parameter (`..;`, which some
    /// servlet containers resolve as `..`).
    #[error("dot segment (. or ..) in path")]
    DotSegment,
    /// A backslash, which some servers read as `/`.
    #[error("backslash in path")]
    Backslash,
    /// A control character anywhere in the URI.
    #[error("control character in request URI")]
    ControlCharacter,
    /// `%2f`, `%5c`, `%2e` or `%25` (any case): an encoded `/`, `\`, `.` or `%`
    /// that a backend might decode into a different path.
    #[error("percent-encoded /, \\, . or % in path")]
    EncodedSeparator,
    /// A `%` not followed by two hex digits, which servers treat differently
    /// (refuse, keep, or decode loosely).
    #[error("malformed percent-encoding in path")]
    MalformedPercent,
    /// A percent-encoded control character (`%00`–`%1f`, `%7f`): `%00`
    /// truncates paths in some backends.
    #[error("percent-encoded control character in path")]
    EncodedControl,
    /// Percent-encoded bytes that are not valid UTF-8, such as the overlong
    /// `%c0%af` that old decoders read as `/`.
    #[error("percent-encoded bytes in path are not valid UTF-8")]
    EncodedInvalidUtf8,
}

/// The path to match from an original request URI (origin-form `/a/b?x=1`, or
/// absolute-form `https://host/a/b?x`): the query and fragment are removed.
///
/// Fails closed on anything whose meaning a backend might read differently:
/// an empty path, one not starting with `/`, `//`, `.` or `..` segments (also
/// as `..;x`), a backslash, control characters (anywhere in the URI), a
/// malformed `%`, and percent-encodings of `/`, `\`, `.`, `%` (`%2f`, `%5c`,
/// `%2e`, `%25`, any case), of control characters, or of invalid UTF-8. Other
/// percent-encodings are kept as they are and matched literally.
pub fn request_path(uri: &str) -> Result<&str, PathError> {
    if uri.is_empty() {
        return Err(PathError::Empty);
    }
    // Over the whole URI: a CR, LF or NUL in the query is as suspicious as one
    // in the path, and nothing legitimate needs one.
    if uri.chars().any(char::is_control) {
        return Err(PathError::ControlCharacter);
    }
    let from_path = if uri.starts_with('/') {
        uri
    } else {
        after_authority(uri)?
    };
    let end = from_path.find(['?', '#']).unwrap_or(from_path.len());
    let path = &from_path[..end];
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    let Some(body) = path.strip_prefix('/') else {
        return Err(PathError::NotAbsolute);
    };
    if path.contains('\\') {
        return Err(PathError::Backslash);
    }
    let segments: Vec<&str> = body.split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        if seg.is_empty() && i != last {
            return Err(PathError::EmptySegment);
        }
        // `;` starts a path parameter in servlet containers: `..;x` is `..`.
        let name = seg.split(';').next().unwrap_or(seg);
        if name == "." || name == ".." {
            return Err(PathError::DotSegment);
        }
    }
    check_percent(path)?;
    Ok(path)
}

/// From an absolute-form URI (`scheme://authority/path…`), what follows the
/// authority; `NotAbsolute` for anything else.
fn after_authority(uri: &str) -> Result<&str, PathError> {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return Err(PathError::NotAbsolute);
    };
    let mut chars = scheme.chars();
    let scheme_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Err(PathError::NotAbsolute);
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    // URL parsers following WHATWG read `\` as `/` in the authority of http(s)
    // URLs, which would move where the path starts.
    if rest[..end].contains('\\') {
        return Err(PathError::Backslash);
    }
    Ok(&rest[end..])
}

/// The percent-encoding checks of [`request_path`].
fn check_percent(path: &str) -> Result<(), PathError> {
    if !path.contains('%') {
        return Ok(());
    }
    let b = path.as_bytes();
    let mut decoded = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            decoded.push(b[i]);
            i += 1;
            continue;
        }
        let (Some(hi), Some(lo)) = (
            b.get(i + 1).and_then(|c| hex_value(*c)),
            b.get(i + 2).and_then(|c| hex_value(*c)),
        ) else {
            return Err(PathError::MalformedPercent);
        };
        let byte = (hi << 4) | lo;
        if matches!(byte, b'/' | b'\\' | b'.' | b'%') {
            return Err(PathError::EncodedSeparator);
        }
        if byte < 0x20 || byte == 0x7f {
            return Err(PathError::EncodedControl);
        }
        decoded.push(byte);
        i += 3;
    }
    std::str::from_utf8(&decoded)
        .map(|_| ())
        .map_err(|_| PathError::EncodedInvalidUtf8)
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Rules {
        Rules::parse(text).unwrap()
    }

    fn err(text: &str) -> RuleFileError {
        Rules::parse(text).unwrap_err()
    }

    fn pattern(p: &str) -> PathPattern {
        PathPattern::parse(p).unwrap()
    }

    const EXAMPLE: &str = "\
# comments start with '#', blank lines are ignored
# METHODS   PATH                 REQUIREMENT              [OPTIONS...]
GET,HEAD    /v1/reports/*        database:query:SELECT    roles=analyst,ops  max_rows=100

POST        /v1/orders           orders:create
   # an indented comment
*           /healthz             public
GET\t/files/**\tstorage:read:*
";

    #[test]
    fn parses_the_example() {
        let rules = parse(EXAMPLE);
        assert_eq!(rules.len(), 4);
        assert!(!rules.is_empty());
        let r: Vec<&Rule> = rules.iter().collect();
        assert_eq!(r[0].line, 3);
        assert_eq!(
            r[0].methods,
            Methods::List(vec!["GET".into(), "HEAD".into()])
        );
        assert_eq!(r[0].path.as_str(), "/v1/reports/*");
        assert_eq!(
            r[0].requirement,
            Requirement::Capability {
                scheme: "database".into(),
                id: "query:SELECT".into()
            }
        );
        assert_eq!(r[0].roles, vec!["analyst".to_string(), "ops".to_string()]);
        assert_eq!(r[0].params.get("max_rows"), Some(&json!(100)));
        assert_eq!(r[1].line, 5);
        assert!(r[1].roles.is_empty() && r[1].params.is_empty());
        assert_eq!(r[2].line, 7);
        assert_eq!(r[2].methods, Methods::Any);
        assert_eq!(r[2].requirement, Requirement::Public);
        assert_eq!(r[3].line, 8);
        assert_eq!(
            r[3].requirement,
            Requirement::Capability {
                scheme: "storage".into(),
                id: "read:*".into()
            }
        );
    }

    #[test]
    fn empty_file_has_no_rules_and_matches_nothing() {
        for text in ["", "\n\n", "# only a comment\n   \n\t\n"] {
            let rules = parse(text);
            assert!(rules.is_empty());
            assert_eq!(rules.len(), 0);
            assert!(rules.first_match("GET", "/").is_none());
        }
    }

    #[test]
    fn crlf_and_bom_are_accepted() {
        let rules = parse("\u{feff}GET /a public\r\nPOST /b x:y\r\n");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules.iter().nth(1).map(|r| r.line), Some(2));
    }

    #[test]
    fn first_match_wins() {
        let rules = parse("GET /a/* x:specific\nGET /a/** x:general\n* /** x:fallback\n");
        assert_eq!(rules.first_match("GET", "/a/b").map(|r| r.line), Some(1));
        assert_eq!(rules.first_match("GET", "/a/b/c").map(|r| r.line), Some(2));
        assert_eq!(rules.first_match("POST", "/a/b").map(|r| r.line), Some(3));
    }

    #[test]
    fn no_match_is_none() {
        let rules = parse("GET /a x:y\n");
        assert!(rules.first_match("GET", "/b").is_none());
        assert!(rules.first_match("POST", "/a").is_none());
        assert!(rules.first_match("GET", "/a/").is_none());
        assert!(rules.first_match("GET", "/a/b").is_none());
    }

    #[test]
    fn star_methods_match_any_and_lists_compare_exactly() {
        let rules = parse("* /any public\nGET,DELETE /list x:y\n");
        for m in ["GET", "POST", "PATCH", "BREW"] {
            assert!(rules.first_match(m, "/any").is_some(), "{m}");
        }
        assert!(rules.first_match("DELETE", "/list").is_some());
        assert!(rules.first_match("delete", "/list").is_none());
        assert!(rules.first_match("Get", "/list").is_none());
        assert!(rules.first_match("PUT", "/list").is_none());
    }

    #[test]
    fn literal_and_root_patterns() {
        let root = pattern("/");
        assert!(root.matches("/"));
        assert!(!root.matches("/a"));
        let trailing = pattern("/a/");
        assert!(trailing.matches("/a/"));
        assert!(!trailing.matches("/a"));
        let p = pattern("/v1/orders");
        assert!(p.matches("/v1/orders"));
        assert!(!p.matches("/v1/orders/"));
        assert!(!p.matches("/v1/order"));
        assert!(!p.matches("v1/orders"));
        assert!(!p.matches(""));
    }

    #[test]
    fn single_star_matches_exactly_one_non_empty_segment() {
        let p = pattern("/v1/reports/*");
        assert!(p.matches("/v1/reports/q1"));
        assert!(!p.matches("/v1/reports/"));
        assert!(!p.matches("/v1/reports"));
        assert!(!p.matches("/v1/reports/q1/x"));
        let mid = pattern("/a/*/c");
        assert!(mid.matches("/a/b/c"));
        assert!(!mid.matches("/a//c"));
        assert!(!mid.matches("/a/b/d"));
    }

    #[test]
    fn double_star_matches_zero_and_many_segments() {
        let p = pattern("/files/**");
        for ok in ["/files", "/files/", "/files/a", "/files/a/b/c", "/files/a/"] {
            assert!(p.matches(ok), "{ok}");
        }
        for no in ["/file", "/filesx", "/filesx/a", "/", "/other/files/a"] {
            assert!(!p.matches(no), "{no}");
        }
        let all = pattern("/**");
        for ok in ["/", "/a", "/a/b/c"] {
            assert!(all.matches(ok), "{ok}");
        }
        let after_star = pattern("/t/*/**");
        assert!(after_star.matches("/t/x"));
        assert!(after_star.matches("/t/x/y/z"));
        assert!(!after_star.matches("/t"));
    }

    #[test]
    fn in_segment_glob() {
        let p = pattern("/api/v*.json");
        assert!(p.matches("/api/v1.json"));
        assert!(p.matches("/api/v.json"));
        assert!(p.matches("/api/v2.1.json"));
        assert!(!p.matches("/api/v1.xml"));
        assert!(!p.matches("/api/x1.json"));
        assert!(!p.matches("/api/v1/x.json"), "a glob never crosses /");
        let q = pattern("/a/*x*y*");
        assert!(q.matches("/a/xy"));
        assert!(q.matches("/a/0x1y2"));
        assert!(!q.matches("/a/yx"));
        let pre = pattern("/a/pre*");
        assert!(pre.matches("/a/pre"));
        assert!(pre.matches("/a/prefix"));
        assert!(!pre.matches("/a/pr"));
        let suf = pattern("/a/*.txt");
        assert!(suf.matches("/a/.txt"));
        assert!(!suf.matches("/a/txt"));
        // Prefix and suffix may not overlap.
        assert!(!pattern("/a/ab*ba").matches("/a/aba"));
        assert!(pattern("/a/ab*ba").matches("/a/abba"));
        // Multi-byte text around the star.
        assert!(pattern("/é*ü").matches("/éaü"));
        assert!(!pattern("/é*ü").matches("/éa"));
    }

    #[test]
    fn pathological_glob_is_linear() {
        // Backtracking matchers take exponential time on these, and the
        // two-pointer one O(len(path) * len(pattern)); ours is linear.
        let suffix = pattern(&format!("/{}b", "*a".repeat(1000)));
        let middle = pattern(&format!("/{}*b*", "*a".repeat(1000)));
        let miss = format!("/{}", "a".repeat(100_000));
        let hit = format!("/{}b", "a".repeat(100_000));
        let start = std::time::Instant::now();
        for _ in 0..100 {
            assert!(!suffix.matches(&miss));
            assert!(!middle.matches(&miss));
            assert!(suffix.matches(&hit));
            assert!(middle.matches(&hit));
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "took {:?}",
            start.elapsed()
        );
        assert!(!middle.matches(&format!("/{}b", "a".repeat(999))));
    }

    #[test]
    fn params_have_json_types() {
        let rules = parse(
            "GET /a x:y max_rows=100 ratio=-0.5e2 big=18446744073709551615 \
             ok=true no=false region=eu-west-1 ver=1.2.3 q=\"x\" lead=01\n",
        );
        let p = &rules.iter().next().unwrap().params;
        assert_eq!(p["max_rows"], json!(100));
        assert!(p["max_rows"].is_u64());
        assert_eq!(p["ratio"], json!(-50.0));
        assert_eq!(p["big"], json!(u64::MAX));
        assert_eq!(p["ok"], json!(true));
        assert_eq!(p["no"], json!(false));
        assert_eq!(p["region"], json!("eu-west-1"));
        assert_eq!(p["ver"], json!("1.2.3"));
        assert_eq!(p["q"], json!("\"x\""));
        assert_eq!(p["lead"], json!("01"), "not a JSON number: a string");
        assert_eq!(p.len(), 9);
    }

    #[test]
    fn roles_parsed() {
        let rules = parse("GET /a x:y roles=ops\nGET /b x:y roles=a,b,c k=1\n");
        let r: Vec<&Rule> = rules.iter().collect();
        assert_eq!(r[0].roles, vec!["ops".to_string()]);
        assert_eq!(r[1].roles.len(), 3);
        assert_eq!(r[1].params["k"], json!(1));
        assert!(!r[1].params.contains_key("roles"));
    }

    #[test]
    fn capability_split_at_first_colon_and_length_limits() {
        let r = parse("GET /a a:b:c:d\n");
        assert_eq!(
            r.iter().next().unwrap().requirement,
            Requirement::Capability {
                scheme: "a".into(),
                id: "b:c:d".into()
            }
        );
        let ok = format!(
            "GET /a {}:{}\n",
            "s".repeat(MAX_SCHEME_BYTES),
            "i".repeat(MAX_ID_BYTES)
        );
        assert_eq!(parse(&ok).len(), 1);
    }

    #[test]
    fn whole_line_comments_only() {
        // A `#` field is not a trailing comment: ignoring the rest of the line
        // could drop a `roles=` and widen the rule.
        let e = err("GET /a x:y #roles=admin\n");
        assert_eq!(e.line, 1);
        assert!(e.message.contains("option \"#roles=admin\""), "{e}");
    }

    // ---- refusals of rule files ----

    #[test]
    fn rejects_double_star_not_last() {
        let e = err("# c\nGET /a/**/b x:y\n");
        assert_eq!(e.line, 2);
        assert_eq!(
            e.to_string(),
            "line 2: PATH \"/a/**/b\": ** is only allowed as the last segment"
        );
        assert!(err("GET /a/x**y x:y").message.contains("**"));
        assert!(err("GET /a/**x x:y").message.contains("**"));
    }

    #[test]
    fn rejects_empty_segment_in_pattern() {
        let e = err("\n\nGET /a//b x:y\n");
        assert_eq!(e.to_string(), "line 3: PATH \"/a//b\": empty segment");
    }

    #[test]
    fn rejects_dot_segments_in_pattern() {
        assert_eq!(err("GET /a/./b x:y").line, 1);
        assert!(err("GET /a/../b x:y").message.contains("\"..\" segment"));
        assert!(err("GET /a/.. x:y").message.contains("PATH"));
    }

    #[test]
    fn rejects_pattern_not_starting_with_slash() {
        let e = err("GET a/b x:y");
        assert_eq!(e.to_string(), "line 1: PATH \"a/b\": must start with /");
        assert!(err("GET * x:y").message.contains("must start with /"));
    }

    #[test]
    fn rejects_percent_query_fragment_backslash_in_pattern() {
        for bad in ["/a%2fb", "/a?x", "/a#x", "/a\\b"] {
            let e = err(&format!("GET {bad} x:y"));
            assert_eq!(e.line, 1);
            assert!(e.message.starts_with("PATH"), "{e}");
        }
    }

    #[test]
    fn rejects_lowercase_method() {
        let e = err("get /a x:y");
        assert_eq!(e.line, 1);
        assert!(e.message.starts_with("METHODS \"get\""), "{e}");
        assert!(err("GET,Post /a x:y").message.contains("\"Post\""));
    }

    #[test]
    fn rejects_bad_method_tokens() {
        for bad in ["GET,", ",GET", "GET,,POST", "GET-X", "GET1", "**", "*,GET"] {
            let e = err(&format!("{bad} /a x:y"));
            assert!(e.message.starts_with("METHODS"), "{bad}: {e}");
        }
    }

    #[test]
    fn rejects_duplicate_method() {
        let e = err("GET,POST,GET /a x:y");
        assert_eq!(
            e.to_string(),
            "line 1: METHODS \"GET,POST,GET\": duplicate method \"GET\""
        );
    }

    #[test]
    fn rejects_too_few_fields() {
        let e = err("GET /a x:y\nGET /a\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("found 2"), "{e}");
    }

    #[test]
    fn rejects_bad_requirement() {
        for (bad, what) in [
            ("admin", "expected public"),
            (":id", "empty capability scheme"),
            ("scheme:", "empty capability id"),
            ("Public", "expected public"),
        ] {
            let e = err(&format!("GET /a {bad}"));
            assert_eq!(e.line, 1);
            assert!(e.message.starts_with("REQUIREMENT"), "{e}");
            assert!(e.message.contains(what), "{e}");
        }
    }

    #[test]
    fn rejects_overlong_scheme_and_id() {
        let e = err(&format!("GET /a {}:x", "s".repeat(MAX_SCHEME_BYTES + 1)));
        assert!(e.message.contains("capability scheme is 129 bytes"), "{e}");
        let e = err(&format!("GET /a s:{}", "i".repeat(MAX_ID_BYTES + 1)));
        assert!(e.message.contains("capability id is 257 bytes"), "{e}");
    }

    #[test]
    fn rejects_duplicate_option() {
        let e = err("GET /a x:y k=1 k=2");
        assert_eq!(
            e.to_string(),
            "line 1: option \"k=2\": duplicate option \"k\""
        );
        assert!(
            err("GET /a x:y roles=a roles=b")
                .message
                .contains("duplicate option \"roles\"")
        );
    }

    #[test]
    fn rejects_duplicate_role() {
        assert!(
            err("GET /a x:y roles=a,b,a")
                .message
                .contains("duplicate role \"a\"")
        );
    }

    #[test]
    fn rejects_empty_roles() {
        for bad in ["roles=", "roles=a,", "roles=,a", "roles=a,,b"] {
            let e = err(&format!("GET /a x:y {bad}"));
            assert!(e.message.starts_with("option"), "{bad}: {e}");
        }
    }

    #[test]
    fn rejects_bad_option_names_and_values() {
        for bad in ["k", "=1", "1k=1", "k-x=1", "k.x=1", "k=", "big=1e400"] {
            let e = err(&format!("GET /a x:y {bad}"));
            assert_eq!(e.line, 1);
            assert!(e.message.starts_with(&format!("option {bad:?}")), "{e}");
        }
        assert!(err("GET /a x:y big=1e400").message.contains("out of range"));
    }

    #[test]
    fn rejects_public_with_roles_or_params() {
        let e = err("GET /a public roles=ops");
        assert!(e.message.contains("public rule"), "{e}");
        assert_eq!(err("GET /ok public\nGET /a public max_rows=1").line, 2);
    }

    #[test]
    fn rejects_control_and_odd_whitespace() {
        let e = err("GET /a x:y\u{a0}roles=admin");
        assert!(e.message.contains("U+00A0"), "{e}");
        assert_eq!(err("GET /a\rx x:y").line, 1);
        assert_eq!(err("GET /a x:y\n\u{0}\n").line, 2);
    }

    #[test]
    fn rejects_long_line() {
        let long = format!("GET /{} x:y", "a".repeat(MAX_LINE_BYTES));
        let e = err(&format!("GET /a x:y\n{long}\n"));
        assert_eq!(e.line, 2);
        assert!(e.message.contains("4096"), "{e}");
        // Exactly at the limit is fine.
        let exact = format!("GET /{} x:y", "a".repeat(MAX_LINE_BYTES - 9));
        assert_eq!(exact.len(), MAX_LINE_BYTES);
        assert_eq!(parse(&exact).len(), 1);
    }

    #[test]
    fn rejects_too_many_rules() {
        let ok = "GET /a x:y\n".repeat(MAX_RULES);
        assert_eq!(parse(&ok).len(), MAX_RULES);
        let e = err(&format!("# header\n{ok}GET /b x:y\n"));
        assert_eq!(e.line, MAX_RULES + 2);
        assert!(e.message.contains("10000"), "{e}");
    }

    #[test]
    fn rejects_oversized_file() {
        let big = format!("#{}", "x".repeat(MAX_FILE_BYTES));
        let e = err(&big);
        assert_eq!(e.line, 0);
        assert!(e.message.contains("4 MiB"), "{e}");
        assert!(e.to_string().starts_with("line 0: "));
    }

    #[test]
    fn first_bad_line_refuses_the_whole_file() {
        let e = err("GET /a x:y\nPOST /b\nbad line here too\n");
        assert_eq!(e.line, 2);
    }

    // ---- request paths ----

    #[test]
    fn request_path_strips_query_and_fragment() {
        assert_eq!(request_path("/a/b?x=1&y=/.."), Ok("/a/b"));
        assert_eq!(request_path("/a/b#frag"), Ok("/a/b"));
        assert_eq!(request_path("/a?x#y"), Ok("/a"));
        assert_eq!(request_path("/?x"), Ok("/"));
        assert_eq!(request_path("/"), Ok("/"));
        assert_eq!(request_path("/a/"), Ok("/a/"));
        // Query content is not the path's business (except control characters).
        assert_eq!(request_path("/a?p=%2f%2e..\\"), Ok("/a"));
    }

    #[test]
    fn request_path_absolute_form() {
        assert_eq!(request_path("https://host/a/b?x"), Ok("/a/b"));
        assert_eq!(request_path("http://host:8080/a#f"), Ok("/a"));
        assert_eq!(request_path("https://user@host/a"), Ok("/a"));
        assert_eq!(request_path("https://host/"), Ok("/"));
    }

    #[test]
    fn request_path_keeps_other_percent_encodings() {
        assert_eq!(request_path("/a%20b/%C3%A9"), Ok("/a%20b/%C3%A9"));
        // Patterns may not contain `%`; encoded paths match globs literally.
        assert!(Rules::parse("GET /a%* x:y").is_err());
        let rules = parse("GET /files/* x:y\n");
        assert!(rules.first_match("GET", "/files/a%20b").is_some());
    }

    #[test]
    fn request_path_allows_dots_inside_segments() {
        assert_eq!(request_path("/a/.well-known/x"), Ok("/a/.well-known/x"));
        assert_eq!(request_path("/a/...;/b"), Ok("/a/...;/b"));
        assert_eq!(request_path("/a/v1.json"), Ok("/a/v1.json"));
    }

    #[test]
    fn rejects_encoded_slash_in_request_path() {
        for bad in [
            "/a%2fb",
            "/a%2Fb",
            "/a%5cb",
            "/a%5Cb",
            "/a/%2e%2e/b",
            "/a/%2E",
            "/a%25",
        ] {
            assert_eq!(request_path(bad), Err(PathError::EncodedSeparator), "{bad}");
        }
    }

    #[test]
    fn rejects_empty_request_path() {
        assert_eq!(request_path(""), Err(PathError::Empty));
        assert_eq!(request_path("https://host"), Err(PathError::Empty));
        assert_eq!(request_path("https://host?x=/a"), Err(PathError::Empty));
    }

    #[test]
    fn rejects_request_path_not_starting_with_slash() {
        for bad in [
            "*",
            "a/b",
            "host:443",
            "?x",
            "1http://h/a",
            "ht tp://h/a",
            "://h/a",
        ] {
            assert_eq!(request_path(bad), Err(PathError::NotAbsolute), "{bad}");
        }
    }

    #[test]
    fn rejects_empty_segment_in_request_path() {
        for bad in ["//a", "/a//b", "/a//", "https://h//a"] {
            assert_eq!(request_path(bad), Err(PathError::EmptySegment), "{bad}");
        }
    }

    #[test]
    fn rejects_dot_segments_in_request_path() {
        for bad in [
            "/.", "/..", "/a/./b", "/a/../b", "/a/..", "/a/..;/b", "/a/.;x",
        ] {
            assert_eq!(request_path(bad), Err(PathError::DotSegment), "{bad}");
        }
    }

    #[test]
    fn rejects_backslash_in_request_path() {
        assert_eq!(request_path("/a\\b"), Err(PathError::Backslash));
        assert_eq!(request_path("https://h\\/a"), Err(PathError::Backslash));
    }

    #[test]
    fn rejects_control_characters_in_request_uri() {
        for bad in [
            "/a\nb",
            "/a\0",
            "/a\tb",
            "/a?x=\r\n",
            "/a\u{7f}",
            "/a\u{85}",
        ] {
            assert_eq!(
                request_path(bad),
                Err(PathError::ControlCharacter),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn rejects_malformed_percent_in_request_path() {
        for bad in ["/a%", "/a%2", "/a%zz", "/a%2g/b"] {
            assert_eq!(request_path(bad), Err(PathError::MalformedPercent), "{bad}");
        }
    }

    #[test]
    fn rejects_encoded_control_in_request_path() {
        for bad in ["/a%00", "/a%0a", "/a%0D", "/a%7f", "/a%1F"] {
            assert_eq!(request_path(bad), Err(PathError::EncodedControl), "{bad}");
        }
    }

    #[test]
    fn rejects_overlong_encoding_in_request_path() {
        for bad in [
            "/a%c0%af",
            "/a%C0%AE%C0%AE/b",
            "/a%e0%80%af",
            "/a%ff",
            "/a%c3",
        ] {
            assert_eq!(
                request_path(bad),
                Err(PathError::EncodedInvalidUtf8),
                "{bad}"
            );
        }
    }

    #[test]
    fn path_errors_say_what_is_wrong() {
        assert_eq!(
            PathError::EmptySegment.to_string(),
            "empty path segment (//)"
        );
        assert_eq!(
            PathError::EncodedSeparator.to_string(),
            "percent-encoded /, \\, . or % in path"
        );
    }

    #[test]
    fn request_path_then_first_match() {
        let rules = parse(EXAMPLE);
        let m = |method: &str, uri: &str| {
            request_path(uri)
                .ok()
                .and_then(|p| rules.first_match(method, p))
                .map(|r| r.line)
        };
        assert_eq!(m("GET", "/v1/reports/q1?limit=5"), Some(3));
        assert_eq!(m("HEAD", "https://api.example/v1/reports/q1"), Some(3));
        assert_eq!(m("POST", "/v1/reports/q1"), None);
        assert_eq!(m("OPTIONS", "/healthz"), Some(7));
        assert_eq!(m("GET", "/files"), Some(8));
        assert_eq!(m("GET", "/files/a/b.txt"), Some(8));
        assert_eq!(m("GET", "/healthz/../v1/orders"), None);
        assert_eq!(m("GET", "/files%2f..%2fv1"), None);
    }
}
