//! Request templates: `{{seq}}`, `{{uuid}}`, `{{rand_int a b}}`, `{{now}}`,
//! `{{now_ms}}`, `{{env.NAME}}`, `{{data.COL}}` and `{{VAR}}` (a value extracted by an
//! earlier step).
//!
//! A template is parsed once, when the scenario is compiled, into a list of
//! [`Segment`]s; every name is resolved then (environment variables to their value,
//! data columns and variables to indices), so rendering a request is a walk over the
//! segments with no parsing and no lookup by name.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::schedule::Rng;

/// One piece of a compiled template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    /// The iteration's number, unique across the run.
    Seq,
    /// A random (version 4) UUID.
    Uuid,
    /// A uniform integer in `low..=high`.
    RandInt {
        low: i64,
        high: i64,
    },
    /// Unix time in seconds.
    Now,
    /// Unix time in milliseconds.
    NowMs,
    /// Column of the iteration's data row.
    Data(usize),
    /// A variable extracted by an earlier step.
    Var(usize),
}

/// Why a template was refused. The scenario compiler wraps it with the step and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unterminated '{{{{' in {0:?}")]
    Unterminated(String),
    #[error("empty '{{{{}}}}'")]
    Empty,
    #[error("environment variable {0:?} is not set")]
    MissingEnv(String),
    #[error("{{{{data.{0}}}}} names no column of the data file (columns: {1})")]
    UnknownColumn(String, String),
    #[error("{{{{data.{0}}}}} needs a [data] file")]
    NoData(String),
    #[error("variable {0:?} is used before any earlier step extracts it")]
    UnknownVariable(String),
    #[error("bad rand_int in {0:?}: expected '{{{{rand_int LOW HIGH}}}}' with LOW <= HIGH")]
    BadRandInt(String),
    #[error("unknown template function {0:?}")]
    UnknownFunction(String),
}

/// What names a template may refer to while it is compiled.
pub struct Names<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Data file columns; `None` when the scenario has no data file.
    pub columns: Option<&'a [String]>,
    /// Variables extracted by the steps before this one.
    pub vars: &'a [String],
}

/// A compiled template.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template {
    segments: Vec<Segment>,
}

/// What a rendering needs: the values that change per iteration.
pub struct RenderCtx<'a> {
    pub seq: u64,
    pub row: Option<&'a [String]>,
    pub vars: &'a [String],
    pub rng: &'a mut Rng,
}

impl Template {
    pub fn compile(text: &str, names: &Names<'_>) -> Result<Self, TemplateError> {
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            literal.push_str(&rest[..open]);
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| TemplateError::Unterminated(text.to_string()))?;
            let inner = after[..close].trim();
            let segment = compile_expression(inner, names)?;
            match segment {
                Segment::Literal(s) => literal.push_str(&s),
                other => {
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    segments.push(other);
                }
            }
            rest = &after[close + 2..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Self { segments })
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The text, if the template has no placeholders that change per request.
    pub fn as_literal(&self) -> Option<&str> {
        match self.segments.as_slice() {
            [] => Some(""),
            [Segment::Literal(s)] => Some(s),
            _ => None,
        }
    }

    /// Variables this template reads.
    pub fn vars(&self) -> impl Iterator<Item = usize> + '_ {
        self.segments.iter().filter_map(|s| match s {
            Segment::Var(i) => Some(*i),
            _ => None,
        })
    }

    pub fn render(&self, ctx: &mut RenderCtx<'_>, out: &mut String) {
        for segment in &self.segments {
            match segment {
                Segment::Literal(s) => out.push_str(s),
                Segment::Seq => {
                    let _ = write!(out, "{}", ctx.seq);
                }
                Segment::Uuid => write_uuid(ctx.rng, out),
                Segment::RandInt { low, high } => {
                    let span = high.abs_diff(*low).saturating_add(1);
                    let offset = if span == 0 {
                        // low..=high covers every i64.
                        ctx.rng.next_u64()
                    } else {
                        ctx.rng.next_u64() % span
                    };
                    let _ = write!(out, "{}", low.wrapping_add_unsigned(offset));
                }
                Segment::Now => {
                    let _ = write!(out, "{}", unix_now().as_secs());
                }
                Segment::NowMs => {
                    let _ = write!(out, "{}", unix_now().as_millis());
                }
                Segment::Data(col) => {
                    if let Some(v) = ctx.row.and_then(|r| r.get(*col)) {
                        out.push_str(v);
                    }
                }
                Segment::Var(i) => {
                    if let Some(v) = ctx.vars.get(*i) {
                        out.push_str(v);
                    }
                }
            }
        }
    }

    pub fn render_to_string(&self, ctx: &mut RenderCtx<'_>) -> String {
        match self.as_literal() {
            Some(s) => s.to_string(),
            None => {
                let mut out = String::new();
                self.render(ctx, &mut out);
                out
            }
        }
    }
}

fn unix_now() -> std::time::Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn write_uuid(rng: &mut Rng, out: &mut String) {
    let hi = rng.next_u64();
    let lo = rng.next_u64();
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hi.to_be_bytes());
    bytes[8..].copy_from_slice(&lo.to_be_bytes());
    // RFC 9562 version 4 (random) and variant 10.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        let _ = write!(out, "{b:02x}");
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn compile_expression(inner: &str, names: &Names<'_>) -> Result<Segment, TemplateError> {
    if inner.is_empty() {
        return Err(TemplateError::Empty);
    }
    let mut words = inner.split_whitespace();
    let head = words.next().unwrap_or_default();
    let args: Vec<&str> = words.collect();
    if head == "rand_int" {
        let bad = || TemplateError::BadRandInt(inner.to_string());
        let [low, high] = args.as_slice() else {
            return Err(bad());
        };
        let low: i64 = low.parse().map_err(|_| bad())?;
        let high: i64 = high.parse().map_err(|_| bad())?;
        if low > high {
            return Err(bad());
        }
        return Ok(Segment::RandInt { low, high });
    }
    if !args.is_empty() {
        return Err(TemplateError::UnknownFunction(head.to_string()));
    }
    match head {
        "seq" => return Ok(Segment::Seq),
        "uuid" => return Ok(Segment::Uuid),
        "now" => return Ok(Segment::Now),
        "now_ms" => return Ok(Segment::NowMs),
        _ => {}
    }
    if let Some(name) = head.strip_prefix("env.") {
        return (names.env)(name)
            .map(Segment::Literal)
            .ok_or_else(|| TemplateError::MissingEnv(name.to_string()));
    }
    if let Some(col) = head.strip_prefix("data.") {
        let columns = names
            .columns
            .ok_or_else(|| TemplateError::NoData(col.to_string()))?;
        return columns
            .iter()
            .position(|c| c == col)
            .map(Segment::Data)
            .ok_or_else(|| TemplateError::UnknownColumn(col.to_string(), columns.join(", ")));
    }
    if !is_identifier(head) {
        return Err(TemplateError::UnknownFunction(head.to_string()));
    }
    names
        .vars
        .iter()
        .position(|v| v == head)
        .map(Segment::Var)
        .ok_or_else(|| TemplateError::UnknownVariable(head.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "HOME_DIR").then(|| "/home/gust".to_string())
    }

    fn names<'a>(columns: Option<&'a [String]>, vars: &'a [String]) -> Names<'a> {
        Names {
            env: &env,
            columns,
            vars,
        }
    }

    fn render(t: &Template, seq: u64, row: Option<&[String]>, vars: &[String]) -> String {
        let mut rng = Rng::new(7);
        let mut ctx = RenderCtx {
            seq,
            row,
            vars,
            rng: &mut rng,
        };
        t.render_to_string(&mut ctx)
    }

    #[test]
    fn literal_text_compiles_to_one_segment() {
        let t = Template::compile("/plain/path", &names(None, &[])).unwrap();
        assert_eq!(t.as_literal(), Some("/plain/path"));
    }

    #[test]
    fn env_is_resolved_at_compile_time_into_the_literal() {
        let t = Template::compile("dir={{ env.HOME_DIR }}!", &names(None, &[])).unwrap();
        assert_eq!(t.as_literal(), Some("dir=/home/gust!"));
    }

    #[test]
    fn renders_seq_data_and_variables() {
        let cols = vec!["user".to_string(), "pw".to_string()];
        let vars = vec!["token".to_string()];
        let t = Template::compile(
            "/u/{{data.user}}/{{seq}}?t={{token}}&p={{data.pw}}",
            &names(Some(&cols), &vars),
        )
        .unwrap();
        let row = vec!["alice".to_string(), "s3cret".to_string()];
        let out = render(&t, 42, Some(&row), &["abc".to_string()]);
        assert_eq!(out, "/u/alice/42?t=abc&p=s3cret");
    }

    #[test]
    fn rand_int_stays_in_range() {
        let t = Template::compile("{{rand_int 3 5}}", &names(None, &[])).unwrap();
        let mut rng = Rng::new(1);
        for _ in 0..200 {
            let mut ctx = RenderCtx {
                seq: 0,
                row: None,
                vars: &[],
                rng: &mut rng,
            };
            let n: i64 = t.render_to_string(&mut ctx).parse().unwrap();
            assert!((3..=5).contains(&n), "{n}");
        }
        let t = Template::compile("{{rand_int -2 -2}}", &names(None, &[])).unwrap();
        assert_eq!(render(&t, 0, None, &[]), "-2");
    }

    #[test]
    fn uuid_is_version_4() {
        let t = Template::compile("{{uuid}}", &names(None, &[])).unwrap();
        let u = render(&t, 0, None, &[]);
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
        assert_eq!(u.matches('-').count(), 4);
    }

    #[test]
    fn now_and_now_ms_are_unix_time() {
        let t = Template::compile("{{now}} {{now_ms}}", &names(None, &[])).unwrap();
        let out = render(&t, 0, None, &[]);
        let (s, ms) = out.split_once(' ').unwrap();
        let s: u64 = s.parse().unwrap();
        let ms: u64 = ms.parse().unwrap();
        assert!(s > 1_700_000_000);
        assert!(ms / 1000 >= s);
    }

    #[test]
    fn rejects_missing_env_var_naming_it() {
        let e = Template::compile("{{env.NOPE_TOKEN}}", &names(None, &[])).unwrap_err();
        assert_eq!(e, TemplateError::MissingEnv("NOPE_TOKEN".into()));
        assert!(e.to_string().contains("NOPE_TOKEN"));
    }

    #[test]
    fn rejects_unknown_data_column() {
        let cols = vec!["user".to_string()];
        let e = Template::compile("{{data.password}}", &names(Some(&cols), &[])).unwrap_err();
        assert!(matches!(e, TemplateError::UnknownColumn(c, _) if c == "password"));
    }

    #[test]
    fn rejects_data_column_without_a_data_file() {
        let e = Template::compile("{{data.user}}", &names(None, &[])).unwrap_err();
        assert_eq!(e, TemplateError::NoData("user".into()));
    }

    #[test]
    fn rejects_variable_used_before_extraction() {
        let e = Template::compile("Bearer {{token}}", &names(None, &[])).unwrap_err();
        assert_eq!(e, TemplateError::UnknownVariable("token".into()));
    }

    #[test]
    fn rejects_unterminated_and_empty_placeholders() {
        assert!(matches!(
            Template::compile("/a/{{seq", &names(None, &[])),
            Err(TemplateError::Unterminated(_))
        ));
        assert_eq!(
            Template::compile("{{ }}", &names(None, &[])),
            Err(TemplateError::Empty)
        );
    }

    #[test]
    fn rejects_bad_rand_int_and_unknown_functions() {
        for bad in ["{{rand_int 5 1}}", "{{rand_int 1}}", "{{rand_int a b}}"] {
            assert!(
                matches!(
                    Template::compile(bad, &names(None, &[])),
                    Err(TemplateError::BadRandInt(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Template::compile("{{upper x}}", &names(None, &[])),
            Err(TemplateError::UnknownFunction(_))
        ));
    }
}
