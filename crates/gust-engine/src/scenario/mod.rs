//! Scripted scenarios: ordered steps per virtual user (VU), with templates,
//! extraction into variables, checks, think times, `once` steps and a data file.
//!
//! [`StepSpec`] and [`DataSpec`] are the loose, serialisable form (the `[[steps]]` and
//! `[data]` tables of a run spec); [`Scenario::compile`] validates them once, before
//! anything runs, into [`Step`]s whose templates are already parsed and whose names
//! (data columns, variables, environment) are already resolved. The runner
//! (`runner/scenario.rs`) only renders, sends, judges and records.
//!
//! Rules a compiled scenario guarantees:
//! - a variable is read only by steps after one that extracts it;
//! - every `{{data.COL}}` names a column of the data file, every `{{env.NAME}}` was set;
//! - every step URL has the run's origin (one connector per run), so only the path
//!   and query vary.

pub mod check;
pub mod data;
pub mod extract;
pub mod targets;
pub mod template;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::ConfigError;
use crate::schedule::Rng;
use crate::source::{Request, RequestSource, ResponseInterest};
use crate::spec::steps::{DataSpec, StepSpec};
use crate::spec::{RunSpec, SuccessStatus, Target, parse_duration, parse_url};

use check::{CheckFailure, Checks};
use data::DataSet;
use extract::{Extractor, Response};
use template::{Names, RenderCtx, Template, TemplateError};

/// A compiled step.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub method: http::Method,
    pub path: Template,
    pub headers: Vec<(String, Template)>,
    pub body: Option<Template>,
    pub once: bool,
    pub think: Option<Duration>,
    /// (variable index, extractor)
    pub extract: Vec<(usize, Extractor)>,
    pub checks: Checks,
    /// What of the response the checks and extractors need.
    pub interest: ResponseInterest,
}

/// How a response fared against its step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepVerdict {
    Passed,
    /// Outside the step's status set (or the run's success set): a plain failure.
    BadStatus,
    /// A content check failed: a failure counted as a check failure.
    Check(CheckFailure),
    /// The variable with this index could not be extracted: counted as a check failure.
    Extract(usize),
}

impl StepVerdict {
    pub fn passed(&self) -> bool {
        matches!(self, Self::Passed)
    }

    pub fn is_check_failure(&self) -> bool {
        matches!(self, Self::Check(_) | Self::Extract(_))
    }
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub steps: Vec<Step>,
    pub data: Option<DataSet>,
    /// Variable names; a VU's variables are indexed like this.
    pub vars: Vec<String>,
}

/// Per-VU state that lives across iterations.
#[derive(Debug, Clone)]
pub struct VuState {
    pub vars: Vec<String>,
    /// Every `once` step has succeeded for this VU.
    pub initialized: bool,
}

fn step_error(step: &str, field: &str, reason: impl std::fmt::Display) -> ConfigError {
    ConfigError::new("steps", format!("step {step:?}: {field}: {reason}"))
}

fn valid_step_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Scenario {
    /// Read the data file (if any) and compile. `env` looks up `{{env.NAME}}`.
    pub fn load(
        steps: &[StepSpec],
        data: Option<&DataSpec>,
        target: &Target,
        run_headers: &[(String, String)],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let data =
            match data {
                None => None,
                Some(d) => {
                    let text = std::fs::read_to_string(&d.file).map_err(|e| {
                        ConfigError::new("data", format!("cannot read {}: {e}", d.file.display()))
                    })?;
                    let name = d.file.to_string_lossy();
                    Some(DataSet::parse(&name, &text, d.mode).map_err(|e| {
                        ConfigError::new("data", format!("{}: {e}", d.file.display()))
                    })?)
                }
            };
        Self::compile(steps, data, target, run_headers, env)
    }

    /// Validate and compile already-loaded parts.
    pub fn compile(
        specs: &[StepSpec],
        data: Option<DataSet>,
        target: &Target,
        run_headers: &[(String, String)],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        if specs.is_empty() {
            return Err(ConfigError::new(
                "steps",
                "a scenario needs at least one step",
            ));
        }
        let columns = data.as_ref().map(|d| d.columns.as_slice());
        let mut vars: Vec<String> = Vec::new();
        let mut steps = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let name = spec.name.as_str();
            if !valid_step_name(name) {
                return Err(ConfigError::new(
                    "steps",
                    format!(
                        "step {}: name {name:?} must be letters, digits, '_' or '-'",
                        i + 1
                    ),
                ));
            }
            if specs[..i].iter().any(|s| s.name == spec.name) {
                return Err(ConfigError::new(
                    "steps",
                    format!("step name {name:?} appears twice"),
                ));
            }
            let names = Names {
                env,
                columns,
                vars: &vars,
            };
            let tpl = |field: &str, text: &str| {
                Template::compile(text, &names)
                    .map_err(|e: TemplateError| step_error(name, field, e))
            };
            let method = http::Method::from_bytes(spec.method.as_bytes()).map_err(|_| {
                step_error(name, "method", format!("{:?} is not a method", spec.method))
            })?;
            let path_text = match (&spec.url, &spec.path) {
                (Some(_), Some(_)) => {
                    return Err(step_error(name, "url", "give url or path, not both"));
                }
                (Some(url), None) => same_origin_path(url, target)
                    .map_err(|reason| step_error(name, "url", reason))?,
                (None, Some(p)) => p.clone(),
                (None, None) => target.path.clone(),
            };
            if !path_text.starts_with('/') {
                return Err(step_error(
                    name,
                    "path",
                    format!("{path_text:?} must start with '/'"),
                ));
            }
            if path_text.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(step_error(
                    name,
                    "path",
                    "contains spaces or control characters",
                ));
            }
            let path = tpl("path", &path_text)?;
            let mut headers = Vec::new();
            for (h, v) in run_headers.iter().cloned().chain(spec.headers.pairs()) {
                http::HeaderName::from_bytes(h.as_bytes()).map_err(|_| {
                    step_error(name, "headers", format!("{h:?} is not a header name"))
                })?;
                if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                    return Err(step_error(
                        name,
                        "headers",
                        format!("value of {h:?} has control characters"),
                    ));
                }
                headers.push((h, tpl("headers", &v)?));
            }
            let body = spec.body.as_deref().map(|b| tpl("body", b)).transpose()?;
            let think = spec
                .think
                .as_deref()
                .map(parse_duration)
                .transpose()
                .map_err(|e| step_error(name, "think", e))?;
            let checks = Checks::compile(
                spec.status.as_deref(),
                &spec.json_equals,
                &spec.json_exists,
                spec.body_contains.as_deref(),
            )
            .map_err(|e| step_error(name, "checks", e))?;
            // A step's extractions become visible to the steps after it, not to itself.
            let mut extract = Vec::new();
            for (var, es) in &spec.extract {
                if !template_var_name(var) {
                    return Err(step_error(
                        name,
                        "extract",
                        format!("{var:?} is not a variable name (letters, digits, '_')"),
                    ));
                }
                let ex = Extractor::compile(es)
                    .map_err(|e| step_error(name, "extract", format!("{var}: {e}")))?;
                let index = match vars.iter().position(|v| v == var) {
                    Some(i) => i,
                    None => {
                        vars.push(var.clone());
                        vars.len() - 1
                    }
                };
                extract.push((index, ex));
            }
            let interest = if checks.needs_body() || extract.iter().any(|(_, e)| e.needs_body()) {
                ResponseInterest::Body
            } else if extract.is_empty() {
                ResponseInterest::Nothing
            } else {
                ResponseInterest::Head
            };
            steps.push(Step {
                name: spec.name.clone(),
                method,
                path,
                headers,
                body,
                once: spec.once,
                think,
                extract,
                checks,
                interest,
            });
        }
        Ok(Self { steps, data, vars })
    }

    pub fn step_names(&self) -> Vec<String> {
        self.steps.iter().map(|s| s.name.clone()).collect()
    }

    pub fn new_vu(&self) -> VuState {
        VuState {
            vars: vec![String::new(); self.vars.len()],
            initialized: !self.steps.iter().any(|s| s.once),
        }
    }
}

fn template_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(s, "seq" | "uuid" | "now" | "now_ms" | "rand_int")
}

/// The path-and-query part of `url`, which must have `target`'s scheme, host and port.
pub(crate) fn same_origin_path(url: &str, target: &Target) -> Result<String, String> {
    let scheme_end = url
        .find("://")
        .ok_or("must start with http:// or https://")?
        + 3;
    let path_start = url[scheme_end..]
        .find(['/', '?'])
        .map_or(url.len(), |i| scheme_end + i);
    let origin = parse_url(&url[..path_start]).map_err(|e| e.reason)?;
    if origin.tls != target.tls || origin.host != target.host || origin.port != target.port {
        return Err(format!(
            "{url:?} is not on the run's origin {}",
            target.url_with_path("")
        ));
    }
    let rest = &url[path_start..];
    Ok(match rest.strip_prefix('?') {
        Some(q) => format!("/?{q}"),
        None if rest.is_empty() => "/".to_string(),
        None => rest.to_string(),
    })
}

impl Step {
    /// The request for this step of an iteration.
    pub fn render(&self, ctx: &mut RenderCtx<'_>) -> Request {
        Request {
            method: self.method.clone(),
            path: self.path.render_to_string(ctx),
            headers: self
                .headers
                .iter()
                .map(|(n, v)| (n.clone(), v.render_to_string(ctx)))
                .collect(),
            body: match &self.body {
                None => Bytes::new(),
                Some(t) => Bytes::from(t.render_to_string(ctx)),
            },
        }
    }

    /// Check a response and, if it passed, store its extractions in `vars`.
    pub fn judge(
        &self,
        response: &Response<'_>,
        success: &SuccessStatus,
        vars: &mut [String],
    ) -> StepVerdict {
        let status_ok = match &self.checks.status {
            Some(set) => set.contains(&response.status),
            None => success.is_success(response.status),
        };
        if !status_ok {
            return StepVerdict::BadStatus;
        }
        if let Err(f) = self.checks.evaluate(response) {
            return StepVerdict::Check(f);
        }
        for (index, ex) in &self.extract {
            match ex.extract(response) {
                Some(v) => {
                    if let Some(slot) = vars.get_mut(*index) {
                        *slot = v;
                    }
                }
                None => return StepVerdict::Extract(*index),
            }
        }
        StepVerdict::Passed
    }
}

/// What an iteration of a VU needs to render its steps.
pub fn render_ctx<'a>(
    seq: u64,
    row: Option<&'a [String]>,
    vars: &'a [String],
    rng: &'a mut Rng,
) -> RenderCtx<'a> {
    RenderCtx {
        seq,
        row,
        vars,
        rng,
    }
}

/// The scenario or targets source a run spec asks for, validated. Called by
/// [`RunSpec::validate_with_source`](crate::RunSpec::validate_with_source).
#[allow(clippy::type_complexity)]
pub(crate) fn prepare(
    spec: &RunSpec,
    target: &Target,
    has_source: bool,
) -> Result<(Option<Arc<Scenario>>, Option<Arc<dyn RequestSource>>), ConfigError> {
    if spec.steps.is_empty() {
        if spec.data.is_some() {
            return Err(ConfigError::new(
                "data",
                "a data file needs [[steps]] to use it",
            ));
        }
    } else {
        if spec.targets.is_some() {
            return Err(ConfigError::new(
                "targets",
                "give steps or a targets file, not both",
            ));
        }
        if has_source {
            return Err(ConfigError::new(
                "steps",
                "a request source was given as well",
            ));
        }
        if spec.body.is_some() {
            return Err(ConfigError::new(
                "body",
                "with [[steps]], each step has its own body",
            ));
        }
        let env = |name: &str| std::env::var(name).ok();
        let scenario =
            Scenario::load(&spec.steps, spec.data.as_ref(), target, &spec.headers, &env)?;
        return Ok((Some(Arc::new(scenario)), None));
    }
    let Some(path) = &spec.targets else {
        return Ok((None, None));
    };
    if has_source {
        return Err(ConfigError::new(
            "targets",
            "a request source was given as well",
        ));
    }
    if spec.body.is_some() {
        return Err(ConfigError::new(
            "body",
            "with a targets file, bodies come from @file lines",
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new("targets", format!("cannot read {}: {e}", path.display())))?;
    let dir = path
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let load_body = |p: &str| {
        let file = dir.join(p);
        std::fs::read(&file).map_err(|e| format!("cannot read body {}: {e}", file.display()))
    };
    let mut requests = targets::parse_targets(&text, target, &load_body)
        .map_err(|e| ConfigError::new("targets", format!("{}: {e}", path.display())))?;
    for r in &mut requests {
        let mut headers = spec.headers.clone();
        headers.append(&mut r.headers);
        r.headers = headers;
    }
    Ok((None, Some(Arc::new(targets::TargetsSource::new(requests)))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use crate::spec::steps::{DataMode, ExtractSpec, HeaderSpec};
    use http::HeaderMap;

    fn target() -> Target {
        parse_url("http://127.0.0.1:8080/base").unwrap()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn compile(steps: &[StepSpec]) -> Result<Scenario, ConfigError> {
        Scenario::compile(steps, None, &target(), &[], &no_env)
    }

    fn login_and_issue() -> Vec<StepSpec> {
        let mut login = StepSpec::new("login", "/login");
        login.method = "POST".into();
        login.once = true;
        login.body = Some(r#"{"u":"a"}"#.into());
        login.extract.insert(
            "token".into(),
            ExtractSpec {
                json: Some("/token".into()),
                header: None,
                regex: None,
                group: None,
            },
        );
        let mut issue = StepSpec::new("issue", "/issue/{{seq}}");
        issue.headers = HeaderSpec::Map(BTreeMap::from([(
            "Authorization".to_string(),
            "Bearer {{token}}".to_string(),
        )]));
        issue.status = Some(vec![200, 201]);
        vec![login, issue]
    }

    #[test]
    fn compiles_and_renders_a_login_then_issue_scenario() {
        let s = compile(&login_and_issue()).unwrap();
        assert_eq!(s.vars, vec!["token"]);
        assert_eq!(s.steps[0].interest, ResponseInterest::Body);
        assert_eq!(s.steps[1].interest, ResponseInterest::Nothing);
        let mut vu = s.new_vu();
        assert!(!vu.initialized);
        let h = HeaderMap::new();
        let verdict = s.steps[0].judge(
            &Response::new(200, &h, br#"{"token":"t1"}"#),
            &SuccessStatus::default(),
            &mut vu.vars,
        );
        assert_eq!(verdict, StepVerdict::Passed);
        let mut rng = Rng::new(1);
        let req = s.steps[1].render(&mut render_ctx(9, None, &vu.vars, &mut rng));
        assert_eq!(req.path, "/issue/9");
        assert_eq!(
            req.headers,
            vec![("Authorization".to_string(), "Bearer t1".to_string())]
        );
    }

    #[test]
    fn judge_classifies_status_checks_and_extraction() {
        let s = compile(&login_and_issue()).unwrap();
        let h = HeaderMap::new();
        let ok = SuccessStatus::default();
        let mut vars = vec![String::new()];
        assert_eq!(
            s.steps[0].judge(&Response::new(500, &h, b"{}"), &ok, &mut vars),
            StepVerdict::BadStatus
        );
        let v = s.steps[0].judge(&Response::new(200, &h, b"{}"), &ok, &mut vars);
        assert!(v.is_check_failure());
        // An explicit status set replaces the run's success set.
        assert_eq!(
            s.steps[1].judge(&Response::new(201, &h, b""), &ok, &mut vars),
            StepVerdict::Passed
        );
        assert_eq!(
            s.steps[1].judge(&Response::new(204, &h, b""), &ok, &mut vars),
            StepVerdict::BadStatus
        );
    }

    #[test]
    fn url_on_the_run_origin_becomes_a_path() {
        let mut step = StepSpec::new("a", "/");
        step.path = None;
        step.url = Some("http://127.0.0.1:8080/x?q={{seq}}".into());
        let s = compile(&[step.clone()]).unwrap();
        let mut rng = Rng::new(1);
        let req = s.steps[0].render(&mut render_ctx(3, None, &[], &mut rng));
        assert_eq!(req.path, "/x?q=3");
        step.url = None;
        let s = compile(&[step]).unwrap();
        assert_eq!(s.steps[0].path.as_literal(), Some("/base"));
    }

    #[test]
    fn toml_step_tables_parse() {
        #[derive(Deserialize)]
        struct File {
            steps: Vec<StepSpec>,
            data: Option<DataSpec>,
        }
        let f: File = toml::from_str(
            r#"
            [data]
            file = "users.csv"
            mode = "unique"
            [[steps]]
            name = "login"
            method = "POST"
            path = "/login"
            once = true
            think = "100ms"
            headers = { "Content-Type" = "application/json" }
            extract.token = { json = "/token" }
            extract.id = { regex = "id=(\\d+)", group = 1 }
            status = [200, 201]
            json_equals = { "/ok" = true }
            json_exists = ["/token"]
            body_contains = "token"
            "#,
        )
        .unwrap();
        assert_eq!(f.data.unwrap().mode, DataMode::Unique);
        assert_eq!(f.steps[0].extract.len(), 2);
        assert!(compile(&f.steps).is_ok());
    }

    #[test]
    fn rejects_variable_used_before_it_is_extracted() {
        let mut steps = login_and_issue();
        steps.swap(0, 1);
        let e = compile(&steps).unwrap_err();
        assert!(
            e.reason.contains("issue") && e.reason.contains("token"),
            "{e}"
        );
    }

    #[test]
    fn rejects_a_step_using_its_own_extraction() {
        let mut steps = login_and_issue();
        steps[0].path = Some("/login?t={{token}}".into());
        assert!(compile(&steps).is_err());
    }

    #[test]
    fn rejects_missing_env_var_naming_it() {
        let mut step = StepSpec::new("a", "/");
        step.body = Some("{{env.GUST_TEST_SURELY_UNSET}}".into());
        let e = compile(&[step]).unwrap_err();
        assert!(e.reason.contains("GUST_TEST_SURELY_UNSET"), "{e}");
    }

    #[test]
    fn rejects_unknown_data_column() {
        let data = DataSet::parse("d.csv", "user\nalice\n", DataMode::Sequential).unwrap();
        let step = StepSpec::new("a", "/u/{{data.name}}");
        let e = Scenario::compile(&[step], Some(data), &target(), &[], &no_env).unwrap_err();
        assert!(e.reason.contains("name"), "{e}");
    }

    #[test]
    fn rejects_no_steps_duplicate_and_bad_names() {
        assert!(compile(&[]).is_err());
        let e = compile(&[StepSpec::new("a", "/"), StepSpec::new("a", "/")]).unwrap_err();
        assert!(e.reason.contains("twice"), "{e}");
        assert!(compile(&[StepSpec::new("log.in", "/")]).is_err());
        assert!(compile(&[StepSpec::new("", "/")]).is_err());
    }

    #[test]
    fn rejects_other_origin_and_relative_path() {
        let mut step = StepSpec::new("a", "/");
        step.path = None;
        step.url = Some("http://example.com/x".into());
        let e = compile(&[step]).unwrap_err();
        assert!(e.reason.contains("origin"), "{e}");
        assert!(compile(&[StepSpec::new("a", "x")]).is_err());
        let mut both = StepSpec::new("a", "/");
        both.url = Some("http://127.0.0.1:8080/".into());
        assert!(compile(&[both]).is_err());
    }

    #[test]
    fn rejects_bad_method_header_think_and_variable_name() {
        let mut s = StepSpec::new("a", "/");
        s.method = "GE T".into();
        assert!(compile(&[s]).is_err());
        let mut s = StepSpec::new("a", "/");
        s.headers = HeaderSpec::List(vec![("bad name".into(), "v".into())]);
        assert!(compile(&[s]).is_err());
        let mut s = StepSpec::new("a", "/");
        s.think = Some("soon".into());
        assert!(compile(&[s]).is_err());
        let mut s = StepSpec::new("a", "/");
        s.extract.insert(
            "seq".into(),
            ExtractSpec {
                json: Some("/a".into()),
                header: None,
                regex: None,
                group: None,
            },
        );
        assert!(compile(&[s]).is_err());
    }
}
