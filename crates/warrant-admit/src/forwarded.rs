//! The client certificate as a proxy forwards it (admit.md §1): nginx's
//! `$ssl_client_escaped_cert` (URL-encoded PEM) and Envoy's
//! `x-forwarded-client-cert` (XFCC). Pure parsing; error messages never
//! repeat the header's contents, which are credentials.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Headers larger than this are refused before parsing.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardedError {
    /// The proxy verified no client certificate.
    #[error("no client certificate")]
    Absent,
    #[error("header larger than {MAX_HEADER_BYTES} bytes")]
    TooLarge,
    /// What part of the header is wrong (never its contents).
    #[error("malformed client certificate header: {0}")]
    Malformed(String),
}

fn malformed(why: &str) -> ForwardedError {
    ForwardedError::Malformed(why.to_string())
}

/// Percent-decoding that keeps `+` (PEM's base64 holds it).
fn percent_decode(value: &str) -> Result<String, ForwardedError> {
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(value).collect();
    String::from_utf8(bytes).map_err(|_| malformed("not UTF-8 once decoded"))
}

/// The DER of the first CERTIFICATE block of PEM text.
fn pem_certificate(pem: &str) -> Result<Vec<u8>, ForwardedError> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let start = pem
        .find(BEGIN)
        .ok_or_else(|| malformed("no BEGIN CERTIFICATE line"))?
        + BEGIN.len();
    let len = pem[start..]
        .find(END)
        .ok_or_else(|| malformed("no END CERTIFICATE line"))?;
    let b64: String = pem[start..start + len]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let der = STANDARD
        .decode(b64)
        .map_err(|_| malformed("the certificate is not base64"))?;
    if der.is_empty() {
        return Err(malformed("an empty certificate"));
    }
    Ok(der)
}

/// The certificate from nginx's `$ssl_client_escaped_cert`: empty (no
/// certificate) is [`ForwardedError::Absent`].
pub fn nginx_escaped_cert(value: &str) -> Result<Vec<u8>, ForwardedError> {
    if value.len() > MAX_HEADER_BYTES {
        return Err(ForwardedError::TooLarge);
    }
    if value.trim().is_empty() {
        return Err(ForwardedError::Absent);
    }
    pem_certificate(&percent_decode(value.trim())?)
}

/// XFCC elements (one per proxy hop), each its `key=value` pairs with keys
/// lower-cased and values unquoted.
pub fn xfcc_elements(value: &str) -> Result<Vec<Vec<(String, String)>>, ForwardedError> {
    if value.len() > MAX_HEADER_BYTES {
        return Err(ForwardedError::TooLarge);
    }
    let mut elements = Vec::new();
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut chars = value.chars().peekable();
    loop {
        // One pair: key, '=', value (quoted or bare), then ';' ',' or end.
        let mut key = String::new();
        let mut has_equals = false;
        for c in chars.by_ref() {
            if c == '=' {
                has_equals = true;
                break;
            }
            key.push(c);
        }
        let key = key.trim().to_ascii_lowercase();
        if !has_equals || key.is_empty() || key.contains([';', ',', '"']) {
            return Err(malformed("XFCC: a pair without key=value"));
        }
        let mut val = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some(e) => val.push(e),
                        None => break,
                    },
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => val.push(c),
                }
            }
            if !closed {
                return Err(malformed("XFCC: unterminated quote"));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ';' || c == ',' {
                    break;
                }
                if c == '"' {
                    return Err(malformed("XFCC: a quote inside a bare value"));
                }
                val.push(c);
                chars.next();
            }
        }
        if pairs.iter().any(|(k, _)| *k == key) {
            return Err(malformed("XFCC: a key twice in one element"));
        }
        pairs.push((key, val.trim().to_string()));
        match chars.next() {
            Some(';') => {}
            Some(',') => elements.push(std::mem::take(&mut pairs)),
            None => {
                elements.push(pairs);
                return Ok(elements);
            }
            Some(_) => return Err(malformed("XFCC: text after a quoted value")),
        }
    }
}

/// The client certificate of the last XFCC element: the one the Envoy in
/// front of us appended (earlier elements come from hops further away,
/// and a client can send its own). No `Cert` there is
/// [`ForwardedError::Absent`].
pub fn xfcc_client_cert(value: &str) -> Result<Vec<u8>, ForwardedError> {
    if value.trim().is_empty() {
        return Err(ForwardedError::Absent);
    }
    let elements = xfcc_elements(value)?;
    let last = elements.last().ok_or(ForwardedError::Absent)?;
    let cert = last
        .iter()
        .find(|(k, _)| k == "cert")
        .map(|(_, v)| v)
        .ok_or(ForwardedError::Absent)?;
    pem_certificate(&percent_decode(cert)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DER: &[u8] = &[0x30, 0x03, 0x02, 0x01, 0xfb, 0xfe, 0xff];

    fn pem() -> String {
        let b64 = STANDARD.encode(DER);
        assert!(b64.contains('+') || b64.contains('/'), "{b64}");
        format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
    }

    fn escaped() -> String {
        percent_encoding::utf8_percent_encode(&pem(), percent_encoding::NON_ALPHANUMERIC)
            .to_string()
            // nginx leaves base64's '+' as is.
            .replace("%2B", "+")
    }

    #[test]
    fn reads_nginxs_escaped_pem_keeping_plus_signs() {
        assert_eq!(nginx_escaped_cert(&escaped()).unwrap(), DER);
        assert_eq!(nginx_escaped_cert(&pem()).unwrap(), DER);
    }

    #[test]
    fn rejects_an_empty_nginx_value_as_absent() {
        assert_eq!(nginx_escaped_cert(""), Err(ForwardedError::Absent));
        assert_eq!(nginx_escaped_cert("  "), Err(ForwardedError::Absent));
    }

    #[test]
    fn rejects_other_pem_and_bad_base64_without_echoing_them() {
        let e = nginx_escaped_cert("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----")
            .unwrap_err();
        assert!(!e.to_string().contains("AAAA"));
        assert!(
            nginx_escaped_cert("-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----")
                .is_err()
        );
        assert_eq!(
            nginx_escaped_cert(&"a".repeat(MAX_HEADER_BYTES + 1)),
            Err(ForwardedError::TooLarge)
        );
    }

    #[test]
    fn takes_the_last_xfcc_elements_cert() {
        let other = STANDARD.encode([0x30, 0x00]);
        let other = format!("-----BEGIN CERTIFICATE-----\n{other}\n-----END CERTIFICATE-----");
        let first =
            percent_encoding::utf8_percent_encode(&other, percent_encoding::NON_ALPHANUMERIC);
        let value = format!(
            "By=spiffe://a;Cert=\"{first}\";Subject=\"CN=x, O=y\",hash=abc;CERT=\"{}\";uri=spiffe://b",
            escaped()
        );
        assert_eq!(xfcc_client_cert(&value).unwrap(), DER);
        let elements = xfcc_elements(&value).unwrap();
        assert_eq!(elements.len(), 2);
        assert_eq!(elements[0][2], ("subject".into(), "CN=x, O=y".into()));
    }

    #[test]
    fn unescapes_quoted_values() {
        let e = xfcc_elements(r#"Subject="a\"b;c=d,e""#).unwrap();
        assert_eq!(
            e,
            vec![vec![("subject".to_string(), "a\"b;c=d,e".to_string())]]
        );
    }

    #[test]
    fn rejects_an_element_without_cert_as_absent() {
        assert_eq!(
            xfcc_client_cert("By=spiffe://a;Hash=abc"),
            Err(ForwardedError::Absent)
        );
        assert_eq!(xfcc_client_cert(""), Err(ForwardedError::Absent));
    }

    #[test]
    fn rejects_unterminated_quote() {
        assert!(matches!(
            xfcc_elements(r#"Cert="abc"#),
            Err(ForwardedError::Malformed(_))
        ));
    }

    #[test]
    fn rejects_pairs_without_equals_and_duplicate_keys() {
        assert!(xfcc_elements("Cert").is_err());
        assert!(xfcc_elements("Hash=a;hash=b").is_err());
        assert!(xfcc_elements("Hash=a;;").is_err());
    }

    #[test]
    fn rejects_oversized_xfcc() {
        let v = format!("Hash={}", "a".repeat(MAX_HEADER_BYTES));
        assert_eq!(xfcc_elements(&v), Err(ForwardedError::TooLarge));
    }
}
