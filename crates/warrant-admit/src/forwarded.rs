//! How the credential arrives at the admission service (admit.md §1): the
//! client certificate as a proxy forwards it (nginx's
//! `$ssl_client_escaped_cert`, Envoy's `x-forwarded-client-cert`) and an
//! AIC-JWT in `Authorization`. Pure parsing, no IO.
//!
//! Every error names the header part that is wrong and never repeats the
//! header's contents: certificates and tokens are credentials, and errors
//! end up in logs. [`ForwardedError::Malformed`] holds a `&'static str` so
//! that no caller can put header text in it by accident.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::fmt;

/// The largest header value read (64 KiB): a certificate is a few KiB and a
/// token less, so anything larger is refused before it is parsed.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Why a forwarded credential could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardedError {
    /// No credential: the header is empty, or the proxy verified no client
    /// certificate (an XFCC element without `Cert`).
    #[error("no credential presented")]
    Absent,
    /// The header value is larger than [`MAX_HEADER_BYTES`].
    #[error("credential header larger than {MAX_HEADER_BYTES} bytes")]
    TooLarge,
    /// `Authorization` with a scheme other than `Bearer` or `DPoP` (the
    /// scheme itself is not repeated: `Basic` carries a password after it).
    #[error("unsupported Authorization scheme (expected Bearer or DPoP)")]
    UnsupportedScheme,
    /// Which part of which header is wrong, never its contents.
    #[error("malformed credential header: {0}")]
    Malformed(&'static str),
}

const BEGIN_CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----";
const END_CERTIFICATE: &str = "-----END CERTIFICATE-----";

/// The certificate DER from nginx's `$ssl_client_escaped_cert` (the PEM,
/// URL-encoded). An empty or whitespace value is [`ForwardedError::Absent`]:
/// nginx sends an empty header when the client presented no certificate.
pub fn nginx_escaped_cert(value: &str) -> Result<Vec<u8>, ForwardedError> {
    if value.len() > MAX_HEADER_BYTES {
        return Err(ForwardedError::TooLarge);
    }
    if value.trim().is_empty() {
        return Err(ForwardedError::Absent);
    }
    escaped_pem_certificate(value)
}

/// Percent-decodes `escaped`, then reads its first PEM block, which must be
/// a CERTIFICATE.
fn escaped_pem_certificate(escaped: &str) -> Result<Vec<u8>, ForwardedError> {
    // `percent_decode_str`, not form decoding: `+` stays `+`, as PEM's
    // base64 needs (nginx leaves `+` unescaped in
    // `$ssl_client_escaped_cert`). Decoded in one pass into a buffer of the
    // right size: this runs on every request.
    let mut decoded = Vec::with_capacity(escaped.len());
    decoded.extend(percent_encoding::percent_decode_str(escaped));
    let pem = std::str::from_utf8(&decoded)
        .map_err(|_| ForwardedError::Malformed("certificate PEM: not UTF-8 once URL-decoded"))?;
    pem_certificate(pem)
}

/// The DER of the PEM block `pem` starts with (after whitespace). Text
/// after the block (a chain) is not read: the first certificate is the
/// client's.
fn pem_certificate(pem: &str) -> Result<Vec<u8>, ForwardedError> {
    let pem = pem.trim_start();
    // Any other label (a key, a CSR, a CRL) or text before the block is
    // refused rather than skipped: a proxy sends the certificate alone.
    let Some(rest) = pem.strip_prefix(BEGIN_CERTIFICATE) else {
        return Err(ForwardedError::Malformed(
            "certificate PEM: does not start with a BEGIN CERTIFICATE line",
        ));
    };
    let Some(end) = rest.find(END_CERTIFICATE) else {
        return Err(ForwardedError::Malformed(
            "certificate PEM: no END CERTIFICATE line",
        ));
    };
    let mut body = rest.as_bytes()[..end].to_vec();
    body.retain(|b| !b.is_ascii_whitespace());
    if body.is_empty() {
        return Err(ForwardedError::Malformed(
            "certificate PEM: empty certificate block",
        ));
    }
    STANDARD
        .decode(body)
        .map_err(|_| ForwardedError::Malformed("certificate PEM: the block is not base64"))
}

/// The elements of an `x-forwarded-client-cert` value, one per proxy hop in
/// the order the hops appended them, each its `key=value` pairs in order
/// with keys lower-cased (XFCC keys are case-insensitive) and values
/// unquoted. An empty value has no elements.
///
/// Inside double quotes `,` `;` `=` are literal and a backslash escapes
/// the next character (`\"` is a quote, `\\` a backslash). Refused: an
/// unterminated quote, a pair without `=`, an empty element or pair, a
/// quote inside an unquoted value, text after a closing quote, the same key
/// twice in one element, and a value over [`MAX_HEADER_BYTES`].
pub fn xfcc_elements(value: &str) -> Result<Vec<Vec<(String, String)>>, ForwardedError> {
    if value.len() > MAX_HEADER_BYTES {
        return Err(ForwardedError::TooLarge);
    }
    let mut elements = Vec::new();
    if value.trim().is_empty() {
        return Ok(elements);
    }
    let is_space = |c: &char| *c == ' ' || *c == '\t';
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut chars = value.chars().peekable();
    loop {
        // The key, up to `=`.
        let mut key = String::new();
        loop {
            match chars.next() {
                Some('=') => break,
                Some(';' | ',') | None => {
                    return Err(ForwardedError::Malformed(
                        "x-forwarded-client-cert: a pair without `=`",
                    ));
                }
                Some(c) => key.push(c),
            }
        }
        let key = key.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ForwardedError::Malformed(
                "x-forwarded-client-cert: a key that is not a name",
            ));
        }
        let key = key.to_ascii_lowercase();

        // The value: quoted, or bare up to `;` or `,`.
        while chars.next_if(is_space).is_some() {}
        let mut val = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(escaped) => val.push(escaped),
                        None => {
                            return Err(ForwardedError::Malformed(
                                "x-forwarded-client-cert: unterminated quote",
                            ));
                        }
                    },
                    Some(c) => val.push(c),
                    None => {
                        return Err(ForwardedError::Malformed(
                            "x-forwarded-client-cert: unterminated quote",
                        ));
                    }
                }
            }
            while chars.next_if(is_space).is_some() {}
            if !matches!(chars.peek(), None | Some(';' | ',')) {
                return Err(ForwardedError::Malformed(
                    "x-forwarded-client-cert: text after a quoted value",
                ));
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ';' && *c != ',') {
                if c == '"' {
                    return Err(ForwardedError::Malformed(
                        "x-forwarded-client-cert: a quote inside an unquoted value",
                    ));
                }
                val.push(c);
            }
            val.truncate(val.trim_end().len());
        }

        // A repeated key would leave "which one?" to the reader; a proxy
        // never repeats one, so refuse rather than pick.
        if pairs.iter().any(|(k, _)| *k == key) {
            return Err(ForwardedError::Malformed(
                "x-forwarded-client-cert: the same key twice in one element",
            ));
        }
        pairs.push((key, val));
        match chars.next() {
            Some(';') => {}
            Some(',') => elements.push(std::mem::take(&mut pairs)),
            None => {
                elements.push(pairs);
                return Ok(elements);
            }
            // The value loops stop only at `;`, `,` or the end.
            Some(_) => {
                return Err(ForwardedError::Malformed(
                    "x-forwarded-client-cert: text after a value",
                ));
            }
        }
    }
}

/// The client certificate DER from an `x-forwarded-client-cert` value: the
/// `Cert` (URL-encoded PEM) of its LAST element.
///
/// The last element is the one appended by the Envoy that talks to us, the
/// closest hop; earlier elements come from hops further away, or from the
/// client itself, which can send any XFCC header it likes. (This holds when
/// that Envoy sanitizes or appends to the header, `SANITIZE_SET` or
/// `APPEND_FORWARD`, with `Cert` among the details it sets; a pass-through
/// mode would hand us the client's own claim.) A last element without
/// `Cert` (or with an empty one), or an empty header, is
/// [`ForwardedError::Absent`]: that proxy verified no client certificate,
/// whatever earlier elements say.
pub fn xfcc_client_cert(value: &str) -> Result<Vec<u8>, ForwardedError> {
    let elements = xfcc_elements(value)?;
    let Some(closest) = elements.last() else {
        return Err(ForwardedError::Absent);
    };
    let Some((_, cert)) = closest.iter().find(|(k, _)| k == "cert") else {
        return Err(ForwardedError::Absent);
    };
    if cert.trim().is_empty() {
        return Err(ForwardedError::Absent);
    }
    escaped_pem_certificate(cert)
}

/// An AIC-JWT from `Authorization`, by scheme. `Debug` does not show the
/// token (it is a credential).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TokenCredential<'a> {
    /// `Bearer <token>`: an unbound token.
    Bearer(&'a str),
    /// `DPoP <token>`: a token bound to a key, to be checked against the
    /// request's `DPoP` proof.
    Dpop(&'a str),
}

impl<'a> TokenCredential<'a> {
    /// The JWS compact serialization, whatever the scheme.
    pub fn token(&self) -> &'a str {
        match self {
            TokenCredential::Bearer(token) | TokenCredential::Dpop(token) => token,
        }
    }
}

impl fmt::Debug for TokenCredential<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self {
            TokenCredential::Bearer(_) => "Bearer",
            TokenCredential::Dpop(_) => "Dpop",
        };
        write!(f, "{scheme}(<{} bytes redacted>)", self.token().len())
    }
}

/// The token of an `Authorization` value `Bearer <token>` or
/// `DPoP <token>` (scheme case-insensitive): exactly one space, then one
/// JWS compact serialization (three non-empty base64url parts separated by
/// dots). Another scheme is [`ForwardedError::UnsupportedScheme`]; an
/// empty value is [`ForwardedError::Absent`]; anything else is
/// [`ForwardedError::Malformed`].
///
/// Only the shape is checked here; the signature and claims are the
/// verifier's.
pub fn authorization_token(value: &str) -> Result<TokenCredential<'_>, ForwardedError> {
    if value.len() > MAX_HEADER_BYTES {
        return Err(ForwardedError::TooLarge);
    }
    if value.trim().is_empty() {
        return Err(ForwardedError::Absent);
    }
    // Strict on spacing: HTTP already strips the value's outer whitespace,
    // so any left is not what a client library sends.
    if value.starts_with(|c: char| c.is_ascii_whitespace())
        || value.ends_with(|c: char| c.is_ascii_whitespace())
    {
        return Err(ForwardedError::Malformed(
            "Authorization: whitespace around the value",
        ));
    }
    let (scheme, rest) = match value.find(|c: char| c.is_ascii_whitespace()) {
        Some(at) => (&value[..at], Some(&value[at..])),
        None => (value, None),
    };
    let dpop = if scheme.eq_ignore_ascii_case("bearer") {
        false
    } else if scheme.eq_ignore_ascii_case("dpop") {
        true
    } else {
        return Err(ForwardedError::UnsupportedScheme);
    };
    let Some(rest) = rest else {
        return Err(ForwardedError::Malformed(
            "Authorization: no token after the scheme",
        ));
    };
    let Some(token) = rest.strip_prefix(' ') else {
        return Err(ForwardedError::Malformed(
            "Authorization: the scheme and token are not separated by one space",
        ));
    };
    if token.starts_with(|c: char| c.is_ascii_whitespace()) {
        return Err(ForwardedError::Malformed(
            "Authorization: more than one space after the scheme",
        ));
    }
    if token.contains(|c: char| c.is_ascii_whitespace()) {
        return Err(ForwardedError::Malformed(
            "Authorization: more than one token",
        ));
    }
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return Err(ForwardedError::Malformed(
            "Authorization: the token is not a JWS compact serialization (three parts)",
        ));
    }
    if parts.iter().any(|part| part.is_empty()) {
        return Err(ForwardedError::Malformed(
            "Authorization: an empty part in the token",
        ));
    }
    // base64url without padding (RFC 7515 §2).
    let base64url = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    if !parts.iter().all(|part| part.bytes().all(base64url)) {
        return Err(ForwardedError::Malformed(
            "Authorization: a token part that is not base64url",
        ));
    }
    Ok(if dpop {
        TokenCredential::Dpop(token)
    } else {
        TokenCredential::Bearer(token)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use percent_encoding::{AsciiSet, CONTROLS, NON_ALPHANUMERIC, utf8_percent_encode};

    /// Fake DER: any bytes do; these encode with `+` and `/`.
    const SHORT_DER: &[u8] = &[0x30, 0x03, 0x02, 0x01, 0xfb, 0xfe, 0xff];

    fn long_der() -> Vec<u8> {
        (0..=255u8).cycle().take(700).collect()
    }

    /// PEM as a TLS library writes it: base64 lines of 64.
    fn pem_of(der: &[u8]) -> String {
        let b64 = STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "{BEGIN_CERTIFICATE}\n{}\n{END_CERTIFICATE}\n",
            lines.join("\n")
        )
    }

    /// What nginx escapes in `$ssl_client_escaped_cert`: controls (the
    /// newlines), space, and a few specials; `+`, `/`, `=` and `-` as is.
    const NGINX_ESCAPED: &AsciiSet = &CONTROLS
        .add(b' ')
        .add(b'"')
        .add(b'#')
        .add(b'%')
        .add(b'\'')
        .add(b'<')
        .add(b'>')
        .add(b'?');

    fn nginx_escape(text: &str) -> String {
        utf8_percent_encode(text, NGINX_ESCAPED).to_string()
    }

    /// Envoy's `Cert`: the URL-encoded PEM (everything but alphanumerics
    /// escaped, the strictest form).
    fn envoy_escape(text: &str) -> String {
        utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
    }

    fn malformed(result: Result<impl fmt::Debug, ForwardedError>) -> bool {
        matches!(result, Err(ForwardedError::Malformed(_)))
    }

    const JWS: &str = "eyJhbGciOiJFUzI1NiIsInR5cCI6ImFpYytqd3QifQ.eyJzdWIiOiJhIn0.c2lnLW5h_dHVyZQ";

    // nginx

    #[test]
    fn nginx_reads_pem_with_escaped_newlines() {
        let value = "-----BEGIN%20CERTIFICATE-----%0AMAMCAfv+/w==%0A-----END%20CERTIFICATE-----%0A";
        assert_eq!(nginx_escaped_cert(value).unwrap(), SHORT_DER);
    }

    #[test]
    fn nginx_round_trips_a_multiline_pem() {
        let der = long_der();
        let pem = pem_of(&der);
        assert!(pem.lines().count() > 5);
        let escaped = nginx_escape(&pem);
        assert!(escaped.contains("%0A") && !escaped.contains('\n'));
        assert_eq!(nginx_escaped_cert(&escaped).unwrap(), der);
        // Fully escaped, and not escaped at all, read the same.
        assert_eq!(nginx_escaped_cert(&envoy_escape(&pem)).unwrap(), der);
        assert_eq!(nginx_escaped_cert(&pem).unwrap(), der);
    }

    #[test]
    fn rejects_plus_as_space() {
        // `+` must survive decoding (it is base64), escaped or not.
        let raw = nginx_escape(&pem_of(SHORT_DER));
        assert!(raw.contains('+'));
        assert_eq!(nginx_escaped_cert(&raw).unwrap(), SHORT_DER);
        let escaped = raw.replace('+', "%2B");
        assert_eq!(nginx_escaped_cert(&escaped).unwrap(), SHORT_DER);
    }

    #[test]
    fn rejects_empty_nginx_value_as_absent() {
        assert_eq!(nginx_escaped_cert(""), Err(ForwardedError::Absent));
        assert_eq!(nginx_escaped_cert(" \t "), Err(ForwardedError::Absent));
    }

    #[test]
    fn rejects_other_pem_labels() {
        for label in ["PRIVATE KEY", "CERTIFICATE REQUEST", "X509 CRL"] {
            let pem = format!("-----BEGIN {label}-----\nMAMCAfv+/w==\n-----END {label}-----\n");
            assert!(
                malformed(nginx_escaped_cert(&nginx_escape(&pem))),
                "{label}"
            );
        }
        // A certificate after another block is not looked for.
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n{}",
            pem_of(SHORT_DER)
        );
        assert!(malformed(nginx_escaped_cert(&nginx_escape(&pem))));
        assert!(malformed(nginx_escaped_cert("not a pem")));
    }

    #[test]
    fn rejects_bad_base64() {
        for body in [
            "MAMC!fv+/w==",
            "MAMCAfv+/w=",
            "MAMC-_v+/w==",
            "MAMCAfv+/w==%00",
        ] {
            let pem = format!("{BEGIN_CERTIFICATE}%0A{body}%0A{END_CERTIFICATE}");
            assert!(malformed(nginx_escaped_cert(&pem)), "{body}");
        }
    }

    #[test]
    fn rejects_empty_or_unterminated_block() {
        let empty = format!("{BEGIN_CERTIFICATE}%0A%0A{END_CERTIFICATE}%0A");
        assert!(malformed(nginx_escaped_cert(&empty)));
        let unterminated = format!("{BEGIN_CERTIFICATE}%0AMAMCAfv+/w==%0A");
        assert!(malformed(nginx_escaped_cert(&unterminated)));
    }

    #[test]
    fn rejects_non_utf8_after_decoding() {
        assert!(malformed(nginx_escaped_cert("%FF%FE")));
    }

    #[test]
    fn rejects_oversized_nginx_value() {
        let value = "A".repeat(MAX_HEADER_BYTES + 1);
        assert_eq!(nginx_escaped_cert(&value), Err(ForwardedError::TooLarge));
    }

    // XFCC

    #[test]
    fn xfcc_takes_the_last_elements_cert() {
        let other = pem_of(&[0x30, 0x00]);
        let value = format!(
            "By=spiffe://far;Hash=aa;Cert=\"{}\",By=spiffe://near;Hash=bb;Cert=\"{}\";Subject=\"CN=agent\"",
            envoy_escape(&other),
            envoy_escape(&pem_of(&long_der())),
        );
        assert_eq!(xfcc_client_cert(&value).unwrap(), long_der());
        let elements = xfcc_elements(&value).unwrap();
        assert_eq!(elements.len(), 2);
        assert_eq!(elements[0][0], ("by".into(), "spiffe://far".into()));
        assert_eq!(elements[1][3], ("subject".into(), "CN=agent".into()));
    }

    #[test]
    fn xfcc_reads_an_unquoted_cert() {
        // URL-encoded PEM has no `,` `;` or `"`, so a proxy may leave it bare.
        let value = format!("Hash=cc;Cert={}", envoy_escape(&pem_of(SHORT_DER)));
        assert_eq!(xfcc_client_cert(&value).unwrap(), SHORT_DER);
    }

    #[test]
    fn xfcc_quoted_values_keep_separators_and_escaped_quotes() {
        let value = r#"Subject="CN=a, O=b; c=d \"q\" \\";URI=spiffe://x/y;DNS=a.example"#;
        assert_eq!(
            xfcc_elements(value).unwrap(),
            vec![vec![
                ("subject".to_string(), r#"CN=a, O=b; c=d "q" \"#.to_string()),
                ("uri".to_string(), "spiffe://x/y".to_string()),
                ("dns".to_string(), "a.example".to_string()),
            ]]
        );
    }

    #[test]
    fn xfcc_keys_are_case_insensitive() {
        let cert = envoy_escape(&pem_of(SHORT_DER));
        for key in ["Cert", "cert", "CERT", "cErT"] {
            let value = format!("HASH=dd;{key}=\"{cert}\"");
            assert_eq!(xfcc_client_cert(&value).unwrap(), SHORT_DER, "{key}");
        }
        let elements = xfcc_elements("By=a;HASH=b;Uri=c").unwrap();
        let keys: Vec<&str> = elements[0].iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["by", "hash", "uri"]);
    }

    #[test]
    fn rejects_element_without_cert_as_absent() {
        assert_eq!(
            xfcc_client_cert("By=spiffe://a;Hash=abc"),
            Err(ForwardedError::Absent)
        );
        assert_eq!(
            xfcc_client_cert("Hash=abc;Cert=\"\""),
            Err(ForwardedError::Absent)
        );
        // A certificate in an earlier element (further away, or the
        // client's own claim) does not stand in for the closest hop's.
        let value = format!(
            "Hash=aa;Cert=\"{}\",By=spiffe://near;Hash=bb",
            envoy_escape(&pem_of(SHORT_DER))
        );
        assert_eq!(xfcc_client_cert(&value), Err(ForwardedError::Absent));
    }

    #[test]
    fn rejects_empty_xfcc_as_absent() {
        assert_eq!(
            xfcc_elements("").unwrap(),
            Vec::<Vec<(String, String)>>::new()
        );
        assert_eq!(xfcc_client_cert(""), Err(ForwardedError::Absent));
        assert_eq!(xfcc_client_cert("  "), Err(ForwardedError::Absent));
    }

    #[test]
    fn rejects_unterminated_quote() {
        assert!(malformed(xfcc_elements(r#"Cert="abc"#)));
        assert!(malformed(xfcc_elements(r#"Cert="abc\""#)));
        assert!(malformed(xfcc_elements(r#"Cert="abc\"#)));
        assert!(malformed(xfcc_client_cert(r#"Hash=a;Cert="abc,Hash=b"#)));
    }

    #[test]
    fn rejects_pair_without_equals() {
        for value in [
            "Cert",
            "Hash=a;Cert",
            "Hash=a,Cert",
            "Hash=a;",
            "Hash=a;;By=b",
            "=a",
        ] {
            assert!(malformed(xfcc_elements(value)), "{value}");
        }
    }

    #[test]
    fn rejects_empty_elements_and_bad_keys() {
        for value in [
            "Hash=a,,Hash=b",
            "Hash=a,",
            ",Hash=a",
            "Ha sh=a",
            "\"Hash\"=a",
        ] {
            assert!(malformed(xfcc_elements(value)), "{value}");
        }
    }

    #[test]
    fn rejects_duplicate_keys_in_one_element() {
        assert!(malformed(xfcc_elements("Hash=a;hash=b")));
        assert!(malformed(xfcc_client_cert("Cert=\"a\";CERT=\"b\"")));
        // The same key in two elements is two hops, not a duplicate.
        assert_eq!(xfcc_elements("Hash=a,Hash=b").unwrap().len(), 2);
    }

    #[test]
    fn rejects_stray_quotes() {
        assert!(malformed(xfcc_elements(r#"Subject="a"b;Hash=c"#)));
        assert!(malformed(xfcc_elements(r#"Subject=a"b";Hash=c"#)));
    }

    #[test]
    fn rejects_oversized_xfcc() {
        let value = format!("Hash={}", "a".repeat(MAX_HEADER_BYTES));
        assert_eq!(xfcc_elements(&value), Err(ForwardedError::TooLarge));
        assert_eq!(xfcc_client_cert(&value), Err(ForwardedError::TooLarge));
    }

    #[test]
    fn rejects_a_bad_cert_in_xfcc() {
        assert!(malformed(xfcc_client_cert("Hash=a;Cert=\"not%20a%20pem\"")));
    }

    // Authorization

    #[test]
    fn parses_bearer_and_dpop() {
        let value = format!("Bearer {JWS}");
        let bearer = authorization_token(&value).unwrap();
        assert_eq!(bearer, TokenCredential::Bearer(JWS));
        assert_eq!(bearer.token(), JWS);
        let value = format!("DPoP {JWS}");
        let dpop = authorization_token(&value).unwrap();
        assert_eq!(dpop, TokenCredential::Dpop(JWS));
        assert_eq!(dpop.token(), JWS);
    }

    #[test]
    fn schemes_are_case_insensitive() {
        for scheme in ["bearer", "BEARER", "bEaReR"] {
            assert_eq!(
                authorization_token(&format!("{scheme} {JWS}")),
                Ok(TokenCredential::Bearer(JWS))
            );
        }
        for scheme in ["dpop", "DPOP", "Dpop"] {
            assert_eq!(
                authorization_token(&format!("{scheme} {JWS}")),
                Ok(TokenCredential::Dpop(JWS))
            );
        }
    }

    #[test]
    fn rejects_basic_scheme() {
        for value in ["Basic dXNlcjpwYXNz", "Negotiate abc", "Token", JWS] {
            assert_eq!(
                authorization_token(value),
                Err(ForwardedError::UnsupportedScheme),
                "{value}"
            );
        }
    }

    #[test]
    fn rejects_extra_spaces() {
        for value in [
            format!("Bearer  {JWS}"),
            format!(" Bearer {JWS}"),
            format!("Bearer {JWS} "),
            format!("Bearer\t{JWS}"),
            format!("Bearer {JWS} {JWS}"),
        ] {
            assert!(malformed(authorization_token(&value)), "{value:?}");
        }
    }

    #[test]
    fn rejects_missing_token() {
        assert!(malformed(authorization_token("Bearer")));
        assert!(malformed(authorization_token("DPoP")));
        assert_eq!(authorization_token(""), Err(ForwardedError::Absent));
        assert_eq!(authorization_token("   "), Err(ForwardedError::Absent));
    }

    #[test]
    fn rejects_tokens_that_are_not_jws() {
        for token in [
            "abc",
            "a.b",
            "a.b.c.d.e",
            "a..c",
            ".b.c",
            "a.b.",
            "a.b.c=",
            "a+b.c.d",
            "a/b.c.d",
            "a.b.c%41",
        ] {
            let value = format!("Bearer {token}");
            assert!(malformed(authorization_token(&value)), "{token}");
        }
    }

    #[test]
    fn rejects_oversized_authorization() {
        let value = format!("Bearer a.b.{}", "c".repeat(MAX_HEADER_BYTES));
        assert_eq!(authorization_token(&value), Err(ForwardedError::TooLarge));
    }

    #[test]
    fn errors_and_debug_never_show_credentials() {
        const SECRET: &str = "SeCrEt";
        let errors = [
            nginx_escaped_cert(&format!(
                "{BEGIN_CERTIFICATE}%0A{SECRET}!%0A{END_CERTIFICATE}"
            ))
            .unwrap_err(),
            nginx_escaped_cert(&format!("-----BEGIN {SECRET}-----")).unwrap_err(),
            xfcc_client_cert(&format!("Cert=\"{SECRET}")).unwrap_err(),
            xfcc_client_cert(&format!("Cert=\"{SECRET}\";cert=x")).unwrap_err(),
            authorization_token(&format!("Basic {SECRET}")).unwrap_err(),
            authorization_token(&format!("{SECRET} a.b.c")).unwrap_err(),
            authorization_token(&format!("Bearer {SECRET}.x")).unwrap_err(),
        ];
        for e in errors {
            assert!(!e.to_string().contains(SECRET), "{e}");
            assert!(!format!("{e:?}").contains(SECRET), "{e:?}");
        }
        let debug = format!("{:?}", authorization_token(&format!("DPoP {JWS}")).unwrap());
        assert!(
            !debug.contains(JWS) && debug.starts_with("Dpop("),
            "{debug}"
        );
    }
}
