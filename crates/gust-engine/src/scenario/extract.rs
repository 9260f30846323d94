//! Extraction of values from a response into scenario variables: a JSON pointer, a
//! header, or a regular expression's capture group.

use std::cell::OnceCell;

use http::HeaderMap;

use crate::spec::steps::ExtractSpec;

/// A compiled extractor.
#[derive(Debug, Clone)]
pub enum Extractor {
    Json(String),
    Header(http::HeaderName),
    Regex {
        re: regex::bytes::Regex,
        group: usize,
    },
}

impl Extractor {
    pub fn compile(spec: &ExtractSpec) -> Result<Self, String> {
        match (&spec.json, &spec.header, &spec.regex) {
            (Some(p), None, None) => {
                if spec.group.is_some() {
                    return Err("group applies to regex only".into());
                }
                check_pointer(p)?;
                Ok(Self::Json(p.clone()))
            }
            (None, Some(h), None) => {
                if spec.group.is_some() {
                    return Err("group applies to regex only".into());
                }
                let name = http::HeaderName::from_bytes(h.as_bytes())
                    .map_err(|_| format!("{h:?} is not a header name"))?;
                Ok(Self::Header(name))
            }
            (None, None, Some(r)) => {
                let re = regex::bytes::Regex::new(r).map_err(|e| format!("bad regex: {e}"))?;
                let groups = re.captures_len() - 1;
                let group = spec.group.unwrap_or(usize::from(groups > 0));
                if group > groups {
                    return Err(format!(
                        "group {group} but the regex has {groups} capture group(s)"
                    ));
                }
                Ok(Self::Regex { re, group })
            }
            _ => Err("give exactly one of json, header or regex".into()),
        }
    }

    /// Whether the response body must be read for this extractor.
    pub fn needs_body(&self) -> bool {
        !matches!(self, Self::Header(_))
    }

    pub fn extract(&self, response: &Response<'_>) -> Option<String> {
        match self {
            Self::Json(pointer) => response.json()?.pointer(pointer).map(json_text),
            Self::Header(name) => response
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            Self::Regex { re, group } => re
                .captures(response.body)?
                .get(*group)
                .map(|m| String::from_utf8_lossy(m.as_bytes()).into_owned()),
        }
    }
}

/// A JSON pointer is empty or starts with `/`.
pub(crate) fn check_pointer(p: &str) -> Result<(), String> {
    if p.is_empty() || p.starts_with('/') {
        Ok(())
    } else {
        Err(format!("JSON pointer {p:?} must start with '/'"))
    }
}

/// A string as itself, anything else as its JSON text.
pub(crate) fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A response as extraction and checks see it; the body is parsed as JSON at most
/// once, on first use.
pub struct Response<'a> {
    pub status: u16,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    json: OnceCell<Option<serde_json::Value>>,
}

impl<'a> Response<'a> {
    pub fn new(status: u16, headers: &'a HeaderMap, body: &'a [u8]) -> Self {
        Self {
            status,
            headers,
            body,
            json: OnceCell::new(),
        }
    }

    pub fn json(&self) -> Option<&serde_json::Value> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.body).ok())
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: Option<&str>, header: Option<&str>, regex: Option<&str>) -> ExtractSpec {
        ExtractSpec {
            json: json.map(str::to_string),
            header: header.map(str::to_string),
            regex: regex.map(str::to_string),
            group: None,
        }
    }

    #[test]
    fn extracts_json_pointer_header_and_regex_group() {
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", "r-17".parse().unwrap());
        let body = br#"{"token":"abc","user":{"id":42}}"#;
        let r = Response::new(200, &headers, body);
        let get = |s: ExtractSpec| Extractor::compile(&s).unwrap().extract(&r);
        assert_eq!(
            get(spec(Some("/token"), None, None)).as_deref(),
            Some("abc")
        );
        assert_eq!(
            get(spec(Some("/user/id"), None, None)).as_deref(),
            Some("42")
        );
        assert_eq!(get(spec(Some("/missing"), None, None)), None);
        assert_eq!(
            get(spec(None, Some("X-Request-Id"), None)).as_deref(),
            Some("r-17")
        );
        assert_eq!(
            get(spec(None, None, Some(r#""id":(\d+)"#))).as_deref(),
            Some("42")
        );
        let mut whole = spec(None, None, Some("tok[a-z]+"));
        whole.group = Some(0);
        assert_eq!(get(whole).as_deref(), Some("token"));
    }

    #[test]
    fn json_of_a_non_json_body_extracts_nothing() {
        let headers = HeaderMap::new();
        let r = Response::new(200, &headers, b"not json");
        let e = Extractor::compile(&spec(Some("/a"), None, None)).unwrap();
        assert_eq!(e.extract(&r), None);
    }

    #[test]
    fn rejects_zero_or_two_sources() {
        assert!(Extractor::compile(&spec(None, None, None)).is_err());
        assert!(Extractor::compile(&spec(Some("/a"), Some("b"), None)).is_err());
    }

    #[test]
    fn rejects_bad_pointer_regex_header_and_group() {
        assert!(Extractor::compile(&spec(Some("token"), None, None)).is_err());
        assert!(Extractor::compile(&spec(None, None, Some("("))).is_err());
        assert!(Extractor::compile(&spec(None, Some("bad header"), None)).is_err());
        let mut s = spec(None, None, Some("(a)"));
        s.group = Some(2);
        assert!(Extractor::compile(&s).is_err());
        let mut s = spec(Some("/a"), None, None);
        s.group = Some(1);
        assert!(Extractor::compile(&s).is_err());
    }
}
