//! The display form of a principal: `realm:identifier:base64url-nopad(keyHash)`.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};

use crate::DecodeError;
use crate::model::{AlgorithmIdentifier, PrincipalUid};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalUidParseError {
    #[error("principal uid must be realm:identifier:base64url(keyHash)")]
    Format,
    #[error("principal uid keyHash is not unpadded base64url")]
    KeyHashEncoding,
    #[error(transparent)]
    Bounds(#[from] DecodeError),
}

impl PrincipalUid {
    /// Parses the string form. Like the reference, the result carries an explicit
    /// `hashAlgo = sha256` (no NULL), which changes the TBS bytes, so a DA signed
    /// over a UID from this string must be verified against a UID built the same way.
    ///
    /// The realm may not contain ':'; the identifier may (the keyHash is the last field).
    pub fn parse(s: &str) -> Result<PrincipalUid, PrincipalUidParseError> {
        let (rest, hash) = s.rsplit_once(':').ok_or(PrincipalUidParseError::Format)?;
        let (realm, identifier) = rest.split_once(':').ok_or(PrincipalUidParseError::Format)?;
        let key_hash = URL_SAFE_NO_PAD
            .decode(hash)
            .map_err(|_| PrincipalUidParseError::KeyHashEncoding)?;
        PrincipalUid::check_emitted_sizes(realm, identifier, &key_hash)?;
        Ok(PrincipalUid {
            version: 1,
            realm: realm.to_owned(),
            identifier: identifier.to_owned(),
            key_hash,
            hash_algo: Some(AlgorithmIdentifier::sha256()),
        })
    }

    /// `realm:identifier`, the JWT `iss` of a DA and `sub` in representative mode.
    pub fn realm_and_identifier(&self) -> String {
        format!("{}:{}", self.realm, self.identifier)
    }

    /// Whether `keyHash` is the hash (per `hashAlgo`, absent = SHA-256) of this SPKI.
    pub fn key_hash_matches(&self, spki_der: &[u8]) -> bool {
        crate::crypto::hash_with(self.hash_algo.as_ref(), spki_der)
            .is_some_and(|h| h == self.key_hash)
    }
}

impl std::fmt::Display for PrincipalUid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.realm,
            self.identifier,
            URL_SAFE_NO_PAD.encode(&self.key_hash)
        )
    }
}

impl std::str::FromStr for PrincipalUid {
    type Err = PrincipalUidParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PrincipalUid::parse(s)
    }
}

/// Free-function form of [`PrincipalUid::key_hash_matches`].
pub fn key_hash_matches(principal_uid: &PrincipalUid, spki_der: &[u8]) -> bool {
    principal_uid.key_hash_matches(spki_der)
}
