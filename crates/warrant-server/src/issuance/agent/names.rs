//! The names an agent certificate carries (pure). None is free text from
//! the request: the CN is the DA's agent id, O and C come from the server's
//! configuration, the OUs (gateway roles) are picked among the configured
//! ones, and the only SAN is the SPIFFE ID the server builds in its own
//! trust domain.

use crate::error::{ApiError, internal};
use crate::issuance::request::IssueRequest;
use warrant_ca::{DnAttribute, Profile, SanEntry, Subject};

/// An agent certificate's subject and SANs, and its SPIFFE ID if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentNames {
    pub subject: Subject,
    pub san: Vec<SanEntry>,
    pub spiffe_id: Option<String>,
}

/// What the server configures about agent names.
#[derive(Debug, Clone, Copy)]
pub struct NamePolicy<'a> {
    pub default_org: &'a str,
    pub default_country: &'a str,
    pub gateway_roles: &'a [String],
    pub spiffe_trust_domain: &'a str,
}

/// Derives an agent's names (pure). `req.subject` may only pick gateway
/// roles (its OUs) among `policy.gateway_roles` and repeat what the server
/// sets anyway (CN = agent id, O, C); `req.cn` may only repeat the agent id;
/// `req.san` must be empty; `req.spiffe_trust_domain` may only repeat the
/// configured one. Anything else is refused naming the field.
pub fn agent_names(
    req: &IssueRequest,
    agent_id: &str,
    policy: &NamePolicy<'_>,
) -> Result<AgentNames, ApiError> {
    if let Some(cn) = req.cn.as_deref().map(str::trim).filter(|s| !s.is_empty())
        && cn != agent_id
    {
        return Err(ApiError::field(
            "cn",
            "an agent's CN is its agent_id (from the signed delegation); omit cn or repeat agent_id",
        ));
    }
    let mut roles = requested_roles(req.subject.as_deref(), agent_id, policy)?;
    if roles.is_empty() {
        let default = policy
            .gateway_roles
            .first()
            .ok_or_else(|| internal("issuance.agent_gateway_roles is empty"))?;
        roles.push(default);
    }
    if req.san.as_deref().is_some_and(|s| !s.trim().is_empty()) {
        return Err(ApiError::field(
            "san",
            "agent certificates carry no requested SANs (set is_spiffe for a SPIFFE ID)",
        ));
    }
    let spiffe_id = spiffe_id(req, agent_id, policy)?;
    let san = spiffe_id
        .iter()
        .map(|id| SanEntry::Uri(id.clone()))
        .collect();
    let subject = Subject::for_agent(agent_id, &roles, policy.default_org, policy.default_country)?;
    warrant_ca::check_profile_subject(Profile::AgentProxy, &subject)?;
    Ok(AgentNames {
        subject,
        san,
        spiffe_id,
    })
}

/// The gateway roles a requested subject picks (its OUs, in order, without
/// repeats); any other attribute must repeat what the CA sets.
fn requested_roles<'p>(
    subject: Option<&str>,
    agent_id: &str,
    policy: &NamePolicy<'p>,
) -> Result<Vec<&'p str>, ApiError> {
    let mut roles: Vec<&'p str> = Vec::new();
    let Some(text) = subject.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(roles);
    };
    let requested = Subject::parse(text)?;
    for (attr, value) in requested.attributes() {
        let expected = match attr {
            DnAttribute::OrganizationalUnit => {
                let role = granted_role(value, policy)?;
                if !roles.contains(&role) {
                    roles.push(role);
                }
                continue;
            }
            DnAttribute::CommonName => agent_id,
            DnAttribute::Organization => policy.default_org,
            DnAttribute::Country => policy.default_country,
            DnAttribute::State | DnAttribute::Locality => "",
        };
        if value != expected {
            let shown = if expected.is_empty() {
                String::new()
            } else {
                format!(" ({expected:?})")
            };
            return Err(ApiError::field(
                "subject",
                format!(
                    "{}={value:?}: an agent's {} is set by the CA{shown}",
                    attr.key(),
                    attr.key(),
                ),
            ));
        }
    }
    Ok(roles)
}

/// `value` as one of the configured gateway roles.
fn granted_role<'p>(value: &str, policy: &NamePolicy<'p>) -> Result<&'p str, ApiError> {
    policy
        .gateway_roles
        .iter()
        .find(|r| *r == value)
        .map(String::as_str)
        .ok_or_else(|| {
            ApiError::field(
                "subject",
                format!(
                    "OU {value:?} is not a gateway role this CA grants (issuance.agent_gateway_roles: {})",
                    policy.gateway_roles.join(", ")
                ),
            )
        })
}

/// The SPIFFE ID, in the configured trust domain only, when `is_spiffe`.
fn spiffe_id(
    req: &IssueRequest,
    agent_id: &str,
    policy: &NamePolicy<'_>,
) -> Result<Option<String>, ApiError> {
    let requested_td = req
        .spiffe_trust_domain
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if requested_td.is_some_and(|td| td != policy.spiffe_trust_domain) {
        return Err(ApiError::field(
            "spiffe_trust_domain",
            "the trust domain is the CA's (issuance.spiffe_trust_domain), not the request's",
        ));
    }
    if !req.is_spiffe.unwrap_or(false) {
        return Ok(None);
    }
    if policy.spiffe_trust_domain.is_empty() {
        return Err(ApiError::field(
            "is_spiffe",
            "this CA has no SPIFFE trust domain (issuance.spiffe_trust_domain)",
        ));
    }
    Ok(Some(warrant_ca::spiffe_id(
        policy.spiffe_trust_domain,
        agent_id,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKey;

    fn roles() -> Vec<String> {
        vec!["gateway:reader".into(), "gateway:writer".into()]
    }

    fn names(req: IssueRequest, td: &str) -> Result<AgentNames, ApiError> {
        let roles = roles();
        agent_names(
            &req,
            "report-bot",
            &NamePolicy {
                default_org: "Example",
                default_country: "US",
                gateway_roles: &roles,
                spiffe_trust_domain: td,
            },
        )
    }

    fn subject(s: &str) -> IssueRequest {
        IssueRequest {
            subject: Some(s.into()),
            ..Default::default()
        }
    }

    fn detail(e: ApiError) -> String {
        assert_eq!(e.key, ErrorKey::InvalidField);
        e.detail.unwrap_or_default()
    }

    #[test]
    fn agent_subject_is_built_by_the_ca() {
        let n = names(IssueRequest::default(), "").unwrap();
        assert_eq!(
            n.subject,
            Subject::parse("/C=US/O=Example/OU=gateway:reader/CN=report-bot").unwrap()
        );
        assert!(n.san.is_empty() && n.spiffe_id.is_none());
        let n = names(
            subject("/O=Example/OU=gateway:writer/OU=gateway:reader/CN=report-bot"),
            "",
        )
        .unwrap();
        let ous: Vec<_> = n.subject.values(DnAttribute::OrganizationalUnit).collect();
        assert_eq!(ous, ["gateway:writer", "gateway:reader"]);
    }

    #[test]
    fn rejects_a_gateway_role_the_ca_does_not_grant() {
        let d = detail(names(subject("/OU=gateway:admin/CN=report-bot"), "").unwrap_err());
        assert!(d.starts_with("subject: OU \"gateway:admin\""), "{d}");
    }

    #[test]
    fn rejects_subject_attributes_other_than_the_cas() {
        for s in [
            "/CN=ceo/OU=gateway:reader",
            "/O=Other/OU=gateway:reader",
            "/C=FR/OU=gateway:reader",
            "/L=Paris/OU=gateway:reader",
        ] {
            let d = detail(names(subject(s), "").unwrap_err());
            assert!(d.starts_with("subject:"), "{s}: {d}");
        }
    }

    #[test]
    fn rejects_a_cn_other_than_the_agent_id() {
        let req = IssueRequest {
            cn: Some("admin".into()),
            ..Default::default()
        };
        assert!(detail(names(req, "").unwrap_err()).starts_with("cn:"));
        let same = IssueRequest {
            cn: Some("report-bot".into()),
            ..Default::default()
        };
        assert!(names(same, "").is_ok());
    }

    #[test]
    fn rejects_requested_sans() {
        let req = IssueRequest {
            san: Some("DNS:bank.example".into()),
            ..Default::default()
        };
        assert!(detail(names(req, "").unwrap_err()).starts_with("san:"));
    }

    #[test]
    fn spiffe_id_is_in_the_configured_trust_domain_only() {
        let req = IssueRequest {
            is_spiffe: Some(true),
            ..Default::default()
        };
        let n = names(req.clone(), "corp.example").unwrap();
        assert_eq!(
            n.spiffe_id.as_deref(),
            Some("spiffe://corp.example/agent/report-bot")
        );
        assert_eq!(
            n.san,
            [SanEntry::Uri(
                "spiffe://corp.example/agent/report-bot".into()
            )]
        );
        let other = IssueRequest {
            spiffe_trust_domain: Some("bank.example".into()),
            ..req.clone()
        };
        assert!(
            detail(names(other, "corp.example").unwrap_err()).starts_with("spiffe_trust_domain:")
        );
        assert!(detail(names(req, "").unwrap_err()).starts_with("is_spiffe:"));
    }
}
