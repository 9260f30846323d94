//! The CA hierarchy on disk: Root CA (ECDSA P-384) → issuing CAs (ECDSA
//! P-256; `people` by default). Keys are PKCS#8 PEM files, mode 0600,
//! optionally encrypted (PBES2: PBKDF2-HMAC-SHA256 + AES-256-CBC, readable by
//! `openssl pkey`).
//!
//! Layout under the data dir:
//! ```text
//! ca/root.cert.pem   ca/root.key.pem
//! ca/people.cert.pem ca/people.key.pem
//! ca/<name>.cert.pem ca/<name>.key.pem   (more issuing CAs)
//! ```
//!
//! A key kept in a PKCS#11 token has `<name>.key.uri` instead of
//! `<name>.key.pem`: the RFC 7512 URI of the key, without its PIN.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use der::Decode;
use zeroize::Zeroizing;

use crate::cert;
use crate::derw::{self, TAG_OCTET_STRING, TAG_SEQUENCE};
use crate::error::{CaError, Result};
use crate::keys::{self, CaSigningKey, PublicKeyKind};
use crate::names::{DnAttribute, Subject};
use crate::oids;
use crate::pkcs11::{Pkcs11Access, Pkcs11Key, Pkcs11Uri};
use crate::principal::PrincipalCertCache;
use crate::serial::new_serial;
use crate::tbs::CertFields;

const DAY: u64 = 86_400;
/// The name of the issuing CA `init` creates.
pub const DEFAULT_CA: &str = "people";
const ROOT: &str = "root";
/// PBKDF2 iterations for encrypted key files: OWASP's recommended minimum
/// for PBKDF2-HMAC-SHA256. Paid once per key at start-up.
const PBKDF2_ITERATIONS: u32 = 600_000;

/// Names, lifetimes and key places for a new hierarchy.
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// O= of the CA subjects.
    pub organization: String,
    pub root_validity: Duration,
    pub issuing_validity: Duration,
    /// Where the new CA keys live.
    pub keys: KeyPlacement,
    /// Make the root offline: its key goes only to this export, never to
    /// the data dir (`warrant init --root-offline`).
    pub root_export: Option<RootExport>,
}

/// Where an offline root's key is written, and the passphrase that
/// encrypts it there (required: the export leaves this machine).
#[derive(Clone)]
pub struct RootExport {
    pub dir: PathBuf,
    pub passphrase: Zeroizing<String>,
}

impl std::fmt::Debug for RootExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootExport")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Default for InitOptions {
    fn default() -> Self {
        Self {
            organization: "Warrant".to_string(),
            root_validity: Duration::from_secs(20 * 365 * DAY + 5 * DAY),
            issuing_validity: Duration::from_secs(10 * 365 * DAY + 2 * DAY),
            keys: KeyPlacement::Files,
            root_export: None,
        }
    }
}

/// Where `init` (and `add_issuing_ca`) put a new CA key.
#[derive(Debug, Clone, Default)]
pub enum KeyPlacement {
    /// PKCS#8 files in the data dir.
    #[default]
    Files,
    /// A PKCS#11 token.
    Token(Box<TokenPlacement>),
}

/// New CA keys in a PKCS#11 token. Each CA's key is the one `keys` names
/// for it (by CA name, `root` included), else the token's private key
/// labelled `warrant-<name>`, else a new key generated in the token with
/// that label.
#[derive(Debug, Clone)]
pub struct TokenPlacement {
    pub token: Pkcs11Uri,
    pub keys: BTreeMap<String, Pkcs11Uri>,
    pub access: Pkcs11Access,
}

/// The label of a CA's key in a token, when the operator names none.
pub fn token_key_label(ca_name: &str) -> String {
    format!("warrant-{ca_name}")
}

impl KeyPlacement {
    /// A new key for CA `name`: in memory with its PKCS#8 to write, or in
    /// the token with its URI to record.
    fn new_key(&self, name: &str, kind: PublicKeyKind) -> Result<(CaSigningKey, NewKeyRecord)> {
        match self {
            KeyPlacement::Files => {
                let (key, pkcs8) = CaSigningKey::generate(kind)?;
                Ok((key, NewKeyRecord::Pkcs8(pkcs8)))
            }
            KeyPlacement::Token(placement) => {
                let TokenPlacement {
                    token,
                    keys,
                    access,
                } = placement.as_ref();
                let label = token_key_label(name);
                let existing = match keys.get(name) {
                    Some(uri) => Some(uri.clone()),
                    None => Pkcs11Key::find_labelled(token, &label, access)?,
                };
                let (key, uri) = match existing {
                    Some(uri) => (Pkcs11Key::open(&uri, access)?, uri),
                    None => Pkcs11Key::generate(token, &label, kind, access)?,
                };
                if key.kind() != kind {
                    return Err(CaError::KeyUnavailable {
                        key: uri.to_string(),
                        reason: format!("the {name} CA needs a {kind:?} key, not {:?}", key.kind()),
                    });
                }
                Ok((CaSigningKey::from_token(key), NewKeyRecord::Uri(uri)))
            }
        }
    }
}

/// What the data dir records of a new key.
enum NewKeyRecord {
    Pkcs8(Zeroizing<Vec<u8>>),
    Uri(Pkcs11Uri),
}

/// A CA certificate with the parts issuance and validation need, decoded once.
#[derive(Clone)]
struct CaParts {
    cert_der: Vec<u8>,
    cert_pem: String,
    /// Big-endian magnitude of the certificate's serial number.
    serial: Vec<u8>,
    subject_der: Vec<u8>,
    ski: Vec<u8>,
    not_before: SystemTime,
    not_after: SystemTime,
    spki_der: Vec<u8>,
}

impl CaParts {
    fn from_der(cert_der: Vec<u8>, path: &Path) -> Result<Self> {
        let bad = |reason: String| CaError::BadCaCert {
            path: path.to_path_buf(),
            reason,
        };
        let raw = cert::parse_cert(&cert_der).map_err(|e| bad(e.to_string()))?;
        if !raw.is_ca() {
            return Err(bad("not a CA certificate".into()));
        }
        let spki = keys::parse_spki(raw.spki, "public_key").map_err(|e| bad(e.to_string()))?;
        let ski = raw
            .subject_key_id()
            .unwrap_or_else(|| keys::key_identifier(spki.key_bits).to_vec());
        let parts = CaParts {
            cert_pem: derw::pem("CERTIFICATE", &cert_der)?,
            serial: raw
                .serial
                .iter()
                .skip_while(|&&b| b == 0)
                .copied()
                .collect(),
            subject_der: raw.subject.to_vec(),
            not_before: raw.not_before,
            not_after: raw.not_after,
            spki_der: raw.spki.to_vec(),
            ski,
            cert_der: Vec::new(),
        };
        Ok(CaParts { cert_der, ..parts })
    }
}

/// An issuing CA, ready to sign. Shared as `Arc<IssuingCa>` across threads;
/// signing needs no lock.
pub struct IssuingCa {
    name: String,
    parts: CaParts,
    chain_pem: String,
    /// `None` for an offline root: its key is not on this machine.
    key: Option<CaSigningKey>,
    /// DER AlgorithmIdentifier of this CA's signatures (from its key type).
    signature_algorithm: Vec<u8>,
    /// `Extension` AKI = this CA's SKI, pre-encoded for every leaf and CRL.
    aki_extension: Vec<u8>,
}

impl std::fmt::Debug for IssuingCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuingCa")
            .field("name", &self.name)
            .field("not_after", &self.parts.not_after)
            .finish_non_exhaustive()
    }
}

impl IssuingCa {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The PKCS#11 URI of this CA's key, when a token holds it.
    pub fn key_uri(&self) -> Option<String> {
        self.key
            .as_ref()
            .and_then(|k| k.token_uri())
            .map(|u| u.to_string())
    }

    /// Whether this CA's key is on this machine (an offline root's is not).
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// Whether the key can sign now (a token key signs a fixed message;
    /// a key in memory always can). An offline root has nothing to check.
    pub fn check_key(&self) -> Result<()> {
        self.key.as_ref().map_or(Ok(()), CaSigningKey::check)
    }

    fn key(&self) -> Result<&CaSigningKey> {
        self.key.as_ref().ok_or_else(|| CaError::KeyOffline {
            ca: self.name.clone(),
        })
    }
    pub fn cert_der(&self) -> &[u8] {
        &self.parts.cert_der
    }
    pub fn cert_pem(&self) -> &str {
        &self.parts.cert_pem
    }
    /// This CA's certificate followed by the root's, PEM: what a client
    /// presents after its leaf, plus the anchor for convenience.
    pub fn chain_pem(&self) -> &str {
        &self.chain_pem
    }
    /// Big-endian magnitude of this CA certificate's serial number.
    pub fn serial(&self) -> &[u8] {
        &self.parts.serial
    }
    /// Subject key identifier (also the AKI of everything it signs).
    pub fn ski(&self) -> &[u8] {
        &self.parts.ski
    }
    pub fn subject_der(&self) -> &[u8] {
        &self.parts.subject_der
    }
    pub fn spki_der(&self) -> &[u8] {
        &self.parts.spki_der
    }
    pub fn not_before(&self) -> SystemTime {
        self.parts.not_before
    }
    pub fn not_after(&self) -> SystemTime {
        self.parts.not_after
    }

    pub(crate) fn aki_extension(&self) -> &[u8] {
        &self.aki_extension
    }

    /// Signs a certificate with the given fields under this CA's name.
    pub(crate) fn sign_certificate(&self, fields: &CertFields<'_>) -> Result<Vec<u8>> {
        self.key()?
            .sign_certificate(&self.parts.subject_der, fields)
    }

    /// Signs any TBS (certificate or CRL) and wraps it.
    pub(crate) fn sign_structure(&self, tbs: &[u8]) -> Result<Vec<u8>> {
        self.key()?.sign_structure(tbs)
    }

    pub(crate) fn signature_algorithm_der(&self) -> &[u8] {
        &self.signature_algorithm
    }
}

/// The root as a signer of its own: its chain is itself. `key` is `None`
/// for an offline root.
fn root_ca(parts: CaParts, key: Option<CaSigningKey>) -> Result<IssuingCa> {
    Ok(IssuingCa {
        name: ROOT.to_string(),
        chain_pem: parts.cert_pem.clone(),
        aki_extension: aki_extension(&parts.ski),
        signature_algorithm: keys::signature_algorithm_of_spki(&parts.spki_der)?,
        parts,
        key,
    })
}

fn aki_extension(ski: &[u8]) -> Vec<u8> {
    derw::extension(
        &oids::EXT_AUTHORITY_KEY_ID,
        false,
        &derw::tlv(TAG_SEQUENCE, &derw::tlv(0x80, ski)),
    )
}

/// Root and issuing CAs, loaded once at start-up.
pub struct Hierarchy {
    /// The root, with its key: it signs issuing CAs and its OCSP
    /// responder.
    root: Arc<IssuingCa>,
    issuing: BTreeMap<String, Arc<IssuingCa>>,
    /// Issuing-CA rotations, by family (the name of its first CA): the
    /// later generations and when each starts issuing, in order.
    rotations: BTreeMap<String, Vec<Generation>>,
    /// Principal certificates whose chain this hierarchy already verified.
    principal_cache: PrincipalCertCache,
}

/// A later generation of an issuing CA: a CA of its own (own name, key and
/// certificate) that takes over its family's new issuance at `activates_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    pub name: String,
    /// Unix seconds.
    pub activates_at: i64,
}

impl std::fmt::Debug for Hierarchy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hierarchy")
            .field("issuing", &self.issuing.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn ca_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("ca")
}
fn cert_path(data_dir: &Path, name: &str) -> PathBuf {
    ca_dir(data_dir).join(format!("{name}.cert.pem"))
}
fn key_path(data_dir: &Path, name: &str) -> PathBuf {
    ca_dir(data_dir).join(format!("{name}.key.pem"))
}
fn key_uri_path(data_dir: &Path, name: &str) -> PathBuf {
    ca_dir(data_dir).join(format!("{name}.key.uri"))
}
/// Present when the root's key is kept off this machine on purpose: its
/// absence then is not a lost key file.
fn root_offline_marker(data_dir: &Path) -> PathBuf {
    ca_dir(data_dir).join("root.offline")
}
/// A family's rotations: `<generation name> <activates_at>` per line.
fn rotations_path(data_dir: &Path, family: &str) -> PathBuf {
    ca_dir(data_dir).join(format!("{family}.rotations"))
}

/// Parses a `<family>.rotations` file.
fn parse_rotations(text: &str, path: &Path) -> Result<Vec<Generation>> {
    let mut out: Vec<Generation> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |reason: &str| CaError::BadCaCert {
            path: path.to_path_buf(),
            reason: format!("line {}: {reason}", i + 1),
        };
        let (name, at) = line
            .split_once(' ')
            .ok_or_else(|| bad("expected `<CA name> <activation, Unix seconds>`"))?;
        check_ca_name(name).map_err(|e| bad(&e.to_string()))?;
        let activates_at: i64 = at.trim().parse().map_err(|_| bad("bad activation time"))?;
        if out.iter().any(|g| g.name == name) {
            return Err(bad("a generation is listed twice"));
        }
        if out.last().is_some_and(|g| g.activates_at > activates_at) {
            return Err(bad("generations must activate in order"));
        }
        out.push(Generation {
            name: name.to_string(),
            activates_at,
        });
    }
    Ok(out)
}

/// A new issuing CA's key while its certificate is signed elsewhere.
fn pending_dir(data_dir: &Path) -> PathBuf {
    ca_dir(data_dir).join("pending")
}
/// The offline root's CRL, signed on the offline machine, served as is.
pub fn root_crl_path(data_dir: &Path) -> PathBuf {
    ca_dir(data_dir).join("root.crl")
}

/// Writes where a new key is: its (maybe encrypted) PKCS#8 file, or its URI.
fn record_key(
    data_dir: &Path,
    name: &str,
    record: &NewKeyRecord,
    passphrase: Option<&str>,
) -> Result<()> {
    match record {
        NewKeyRecord::Pkcs8(pkcs8) => write_key(&key_path(data_dir, name), pkcs8, passphrase),
        NewKeyRecord::Uri(uri) => write_new(
            &key_uri_path(data_dir, name),
            format!("{uri}\n").as_bytes(),
            0o600,
        ),
    }
}

/// The key of CA `name`: its key file, or the token key its URI file names.
fn load_key(
    data_dir: &Path,
    name: &str,
    passphrase: Option<&str>,
    pkcs11: &Pkcs11Access,
) -> Result<CaSigningKey> {
    let file = key_path(data_dir, name);
    let uri_file = key_uri_path(data_dir, name);
    if !file.exists() && uri_file.exists() {
        let text = fs::read_to_string(&uri_file).map_err(|e| CaError::io(&uri_file, e))?;
        let uri = Pkcs11Uri::parse(text.trim()).map_err(|e| CaError::BadKeyFile {
            path: uri_file.clone(),
            reason: e.to_string(),
        })?;
        return Ok(CaSigningKey::from_token(Pkcs11Key::open(&uri, pkcs11)?));
    }
    read_key(&file, passphrase)
}

/// CA names become file names and URL path segments.
fn check_ca_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != ROOT
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(CaError::field(
            "ca",
            format!("CA name {name:?} must be 1..=64 of a-z 0-9 - _ and not \"root\""),
        ))
    }
}

pub(crate) fn passphrase_of(p: Option<&str>) -> Option<&str> {
    p.filter(|p| !p.is_empty())
}

impl Hierarchy {
    /// Whether `data_dir` already holds a hierarchy (its root certificate).
    pub fn exists(data_dir: &Path) -> bool {
        cert_path(data_dir, ROOT).exists()
    }

    /// Creates Root CA → People CA in `data_dir` with default names. An empty
    /// passphrase means no encryption.
    pub fn init(data_dir: &Path, passphrase: Option<&str>) -> Result<Self> {
        Self::init_with(data_dir, passphrase, &InitOptions::default())
    }

    pub fn init_with(
        data_dir: &Path,
        passphrase: Option<&str>,
        opts: &InitOptions,
    ) -> Result<Self> {
        if Self::exists(data_dir) {
            return Err(CaError::AlreadyInitialized(data_dir.to_path_buf()));
        }
        let dir = ca_dir(data_dir);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| CaError::io(&dir, e))?;

        // An offline root is made in memory whatever the placement of the
        // other keys: it leaves as an encrypted file.
        let (root_key, root_record) = match &opts.root_export {
            None => opts.keys.new_key(ROOT, PublicKeyKind::EcdsaP384)?,
            Some(_) => {
                let (key, pkcs8) = CaSigningKey::generate(PublicKeyKind::EcdsaP384)?;
                (key, NewKeyRecord::Pkcs8(pkcs8))
            }
        };
        let subject = ca_subject(&opts.organization, "Warrant Root CA")?.to_der();
        let root_spki = keys::parse_spki(&root_key.spki_der, "public_key")?;
        let root_ski = keys::key_identifier(root_spki.key_bits);
        let now = derw::whole_seconds(SystemTime::now());
        let not_before = now - Duration::from_secs(60);
        let extensions = ca_extensions(&root_ski, None, None);
        let root_der = root_key.sign_certificate(
            &subject,
            &CertFields {
                serial: &new_serial()?,
                not_before,
                not_after: not_before + opts.root_validity,
                subject_der: &subject,
                spki_der: &root_key.spki_der,
                extensions: &extensions,
            },
        )?;
        let root_pem = derw::pem("CERTIFICATE", &root_der)?;

        match (&opts.root_export, &root_record) {
            (Some(export), NewKeyRecord::Pkcs8(pkcs8)) => {
                if export.passphrase.is_empty() {
                    return Err(CaError::field(
                        "root_passphrase",
                        "an exported root key must be encrypted: give a passphrase",
                    ));
                }
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&export.dir)
                    .map_err(|e| CaError::io(&export.dir, e))?;
                write_key(
                    &export.dir.join("root.key.pem"),
                    pkcs8,
                    Some(export.passphrase.as_str()),
                )?;
                write_new(
                    &export.dir.join("root.cert.pem"),
                    root_pem.as_bytes(),
                    0o644,
                )?;
                write_new(&root_offline_marker(data_dir), b"offline\n", 0o644)?;
            }
            _ => record_key(data_dir, ROOT, &root_record, passphrase_of(passphrase))?,
        }
        write_new(&cert_path(data_dir, ROOT), root_pem.as_bytes(), 0o644)?;
        let root = CaParts::from_der(root_der, &cert_path(data_dir, ROOT))?;

        let mut hierarchy = Hierarchy {
            root: Arc::new(root_ca(root.clone(), Some(root_key))?),
            issuing: BTreeMap::new(),
            rotations: BTreeMap::new(),
            principal_cache: PrincipalCertCache::default(),
        };
        hierarchy.add_issuing_ca(data_dir, DEFAULT_CA, passphrase, opts)?;
        if opts.root_export.is_some() {
            // The key leaves memory with the export written: from here on
            // this hierarchy is what `load` makes of the data dir.
            hierarchy.root = Arc::new(root_ca(root, None)?);
        }
        Ok(hierarchy)
    }

    /// A data dir under a root whose key was never here (a root kept
    /// offline elsewhere, or an enterprise root): its certificate only,
    /// self-signed, and no issuing CA yet. `issuing_ca_csr` and
    /// `install_issuing_ca` add one.
    pub fn init_external_root(data_dir: &Path, root_cert_pem: &str) -> Result<()> {
        if Self::exists(data_dir) {
            return Err(CaError::AlreadyInitialized(data_dir.to_path_buf()));
        }
        let bad = |reason: String| CaError::field("root_cert", reason);
        let (label, der) = der::pem::decode_vec(root_cert_pem.trim().as_bytes())
            .map_err(|e| bad(format!("not PEM: {e}")))?;
        if label != "CERTIFICATE" {
            return Err(bad(format!("PEM label {label:?}, expected CERTIFICATE")));
        }
        let raw = cert::parse_cert(&der).map_err(|e| bad(e.to_string()))?;
        if !raw.is_ca() {
            return Err(bad("not a CA certificate".into()));
        }
        if raw.issuer != raw.subject {
            return Err(bad("not self-signed: give the root itself".into()));
        }
        keys::verify_signature(
            raw.spki,
            &raw.signed.algorithm,
            raw.signed.tbs,
            &raw.signed.signature,
        )
        .map_err(|e| bad(format!("self-signature: {e}")))?;
        keys::signature_algorithm_of_spki(raw.spki)
            .map_err(|_| bad("the root's key must be ECDSA P-256 or P-384".into()))?;
        let dir = ca_dir(data_dir);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| CaError::io(&dir, e))?;
        write_new(&root_offline_marker(data_dir), b"offline\n", 0o644)?;
        write_new(
            &cert_path(data_dir, ROOT),
            derw::pem("CERTIFICATE", &der)?.as_bytes(),
            0o644,
        )
    }

    /// Makes the key of a new issuing CA `name` (placed as `opts.keys`
    /// says, kept under `ca/pending/` until its certificate is installed)
    /// and returns the PEM PKCS#10 request to have it signed by the root,
    /// wherever the root's key is.
    pub fn issuing_ca_csr(
        data_dir: &Path,
        name: &str,
        passphrase: Option<&str>,
        opts: &InitOptions,
    ) -> Result<String> {
        check_ca_name(name)?;
        if !Self::exists(data_dir) {
            return Err(CaError::NotInitialized(data_dir.to_path_buf()));
        }
        if cert_path(data_dir, name).exists() {
            return Err(CaError::field("ca", format!("CA {name:?} already exists")));
        }
        let pending = pending_dir(data_dir);
        if key_path(&pending, name).exists() || key_uri_path(&pending, name).exists() {
            return Err(CaError::field(
                "ca",
                format!("CA {name:?} already has a key waiting for its certificate in ca/pending/"),
            ));
        }
        let (key, record) = opts.keys.new_key(name, PublicKeyKind::EcdsaP256)?;
        let display = format!("Warrant {} CA", title_case(name));
        let subject = ca_subject(&opts.organization, &display)?.to_der();
        let csr = crate::csr::build_csr(&key, &subject)?;
        // `pending/` holds `ca/`-style names: `pending/ca/<name>.key.*`.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(ca_dir(&pending))
            .map_err(|e| CaError::io(&pending, e))?;
        record_key(&pending, name, &record, passphrase_of(passphrase))?;
        derw::pem("CERTIFICATE REQUEST", &csr)
    }

    /// Installs issuing CA `name` from its certificate, signed elsewhere by
    /// this data dir's root over the key `issuing_ca_csr` made: checked
    /// against the root and the waiting key, then moved into place.
    pub fn install_issuing_ca(
        data_dir: &Path,
        name: &str,
        cert_pem: &str,
        passphrase: Option<&str>,
        pkcs11: &Pkcs11Access,
    ) -> Result<()> {
        check_ca_name(name)?;
        let target = cert_path(data_dir, name);
        if target.exists() {
            return Err(CaError::field("ca", format!("CA {name:?} already exists")));
        }
        let bad = |reason: String| CaError::field("cert", reason);
        let (label, der) = der::pem::decode_vec(cert_pem.trim().as_bytes())
            .map_err(|e| bad(format!("not PEM: {e}")))?;
        if label != "CERTIFICATE" {
            return Err(bad(format!("PEM label {label:?}, expected CERTIFICATE")));
        }
        let root_path = cert_path(data_dir, ROOT);
        let root = CaParts::from_der(read_cert_der(&root_path)?, &root_path)?;
        let parts = CaParts::from_der(der.clone(), &target).map_err(|e| bad(e.to_string()))?;
        let raw = cert::parse_cert(&der).map_err(|e| bad(e.to_string()))?;
        if raw.issuer != root.subject_der.as_slice() {
            return Err(bad("not issued by this data dir's root".into()));
        }
        keys::verify_signature(
            &root.spki_der,
            &raw.signed.algorithm,
            raw.signed.tbs,
            &raw.signed.signature,
        )
        .map_err(|e| bad(format!("not signed by this data dir's root ({e})")))?;
        let pending = pending_dir(data_dir);
        let key = load_key(&pending, name, passphrase_of(passphrase), pkcs11).map_err(|e| {
            bad(format!(
                "no key of {name:?} waits for this certificate ({e}); run `warrant ca csr` first"
            ))
        })?;
        if key.spki_der != parts.spki_der {
            return Err(bad(format!(
                "the certificate is for another key than the one {name:?} waits with"
            )));
        }
        // The key first, then the certificate: `load` sees the CA only once
        // both are in place.
        for (from, to) in [
            (key_path(&pending, name), key_path(data_dir, name)),
            (key_uri_path(&pending, name), key_uri_path(data_dir, name)),
        ] {
            if from.exists() {
                fs::rename(&from, &to).map_err(|e| CaError::io(&to, e))?;
            }
        }
        write_new(&target, derw::pem("CERTIFICATE", &der)?.as_bytes(), 0o644)
    }

    /// Creates one more issuing CA (ECDSA P-256, pathLen 0) signed by the root.
    pub fn add_issuing_ca(
        &mut self,
        data_dir: &Path,
        name: &str,
        passphrase: Option<&str>,
        opts: &InitOptions,
    ) -> Result<Arc<IssuingCa>> {
        check_ca_name(name)?;
        if self.issuing.contains_key(name) || cert_path(data_dir, name).exists() {
            return Err(CaError::field("ca", format!("CA {name:?} already exists")));
        }
        let root = &self.root.parts;
        let (key, record) = opts.keys.new_key(name, PublicKeyKind::EcdsaP256)?;
        let display = format!("Warrant {} CA", title_case(name));
        let subject = ca_subject(&opts.organization, &display)?.to_der();
        let spki = keys::parse_spki(&key.spki_der, "public_key")?;
        let ski = keys::key_identifier(spki.key_bits);
        let now = derw::whole_seconds(SystemTime::now());
        let not_before = (now - Duration::from_secs(60)).max(root.not_before);
        let not_after = (not_before + opts.issuing_validity).min(root.not_after);
        let extensions = ca_extensions(&ski, Some(&root.ski), Some(0));
        let der = self.root.sign_certificate(&CertFields {
            serial: &new_serial()?,
            not_before,
            not_after,
            subject_der: &subject,
            spki_der: &key.spki_der,
            extensions: &extensions,
        })?;

        record_key(data_dir, name, &record, passphrase_of(passphrase))?;
        let path = cert_path(data_dir, name);
        write_new(&path, derw::pem("CERTIFICATE", &der)?.as_bytes(), 0o644)?;
        let ca =
            Arc::new(self.issuing_from_parts(name, CaParts::from_der(der, &path)?, key, &path)?);
        self.issuing.insert(name.to_string(), Arc::clone(&ca));
        Ok(ca)
    }

    /// Loads every CA under `data_dir/ca`, checking each issuing CA's
    /// certificate against the root and against its own key.
    pub fn load(data_dir: &Path, passphrase: Option<&str>) -> Result<Self> {
        Self::load_with(data_dir, passphrase, &Pkcs11Access::default())
    }

    /// `load`, with the PIN and module for keys kept in a PKCS#11 token.
    pub fn load_with(
        data_dir: &Path,
        passphrase: Option<&str>,
        pkcs11: &Pkcs11Access,
    ) -> Result<Self> {
        if !Self::exists(data_dir) {
            return Err(CaError::NotInitialized(data_dir.to_path_buf()));
        }
        let passphrase = passphrase_of(passphrase);
        let root_path = cert_path(data_dir, ROOT);
        let root = CaParts::from_der(read_cert_der(&root_path)?, &root_path)?;
        let root_key = if root_offline_marker(data_dir).exists() {
            None
        } else {
            let key = load_key(data_dir, ROOT, passphrase, pkcs11)?;
            if key.spki_der != root.spki_der {
                return Err(CaError::BadCaCert {
                    path: root_path,
                    reason: "does not match the root's key".into(),
                });
            }
            Some(key)
        };
        let mut hierarchy = Hierarchy {
            root: Arc::new(root_ca(root, root_key)?),
            issuing: BTreeMap::new(),
            rotations: BTreeMap::new(),
            principal_cache: PrincipalCertCache::default(),
        };
        let dir = ca_dir(data_dir);
        let entries = fs::read_dir(&dir).map_err(|e| CaError::io(&dir, e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| CaError::io(&dir, e))?;
            let file = entry.file_name();
            if let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".cert.pem"))
                && name != ROOT
                && check_ca_name(name).is_ok()
            {
                names.push(name.to_string());
            }
        }
        for name in names {
            let path = cert_path(data_dir, &name);
            let parts = CaParts::from_der(read_cert_der(&path)?, &path)?;
            let key = load_key(data_dir, &name, passphrase, pkcs11)?;
            let ca = hierarchy.issuing_from_parts(&name, parts, key, &path)?;
            hierarchy.issuing.insert(name, Arc::new(ca));
        }
        for family in hierarchy.issuing.keys().cloned().collect::<Vec<_>>() {
            let path = rotations_path(data_dir, &family);
            let text = match fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(CaError::io(&path, e)),
            };
            let generations = parse_rotations(&text, &path)?;
            for g in &generations {
                if !hierarchy.issuing.contains_key(&g.name) || g.name == family {
                    return Err(CaError::BadCaCert {
                        path: path.clone(),
                        reason: format!(
                            "generation {:?} is not an issuing CA of this data dir",
                            g.name
                        ),
                    });
                }
            }
            hierarchy.rotations.insert(family, generations);
        }
        Ok(hierarchy)
    }

    /// `load` if the data dir has a hierarchy, else `init`.
    pub fn load_or_init(data_dir: &Path, passphrase: Option<&str>) -> Result<(Self, bool)> {
        if Self::exists(data_dir) {
            Ok((Self::load(data_dir, passphrase)?, false))
        } else {
            Ok((Self::init(data_dir, passphrase)?, true))
        }
    }

    fn issuing_from_parts(
        &self,
        name: &str,
        parts: CaParts,
        key: CaSigningKey,
        path: &Path,
    ) -> Result<IssuingCa> {
        let bad = |reason: &str| CaError::BadCaCert {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
        if key.spki_der != parts.spki_der {
            return Err(bad("does not match its key"));
        }
        let raw = cert::parse_cert(&parts.cert_der).map_err(|e| bad(&e.to_string()))?;
        let root = &self.root.parts;
        if raw.issuer != root.subject_der.as_slice() {
            return Err(bad("not issued by this hierarchy's root"));
        }
        keys::verify_signature(
            &root.spki_der,
            &raw.signed.algorithm,
            raw.signed.tbs,
            &raw.signed.signature,
        )
        .map_err(|e| bad(&format!("root signature: {e}")))?;
        let chain_pem = format!("{}{}", parts.cert_pem, root.cert_pem);
        let aki_extension = aki_extension(&parts.ski);
        Ok(IssuingCa {
            name: name.to_string(),
            signature_algorithm: key.algorithm_der.clone(),
            parts,
            chain_pem,
            key: Some(key),
            aki_extension,
        })
    }

    /// The root CA: what it signs are the issuing CAs (and its OCSP
    /// responder); never a leaf.
    pub fn root(&self) -> &Arc<IssuingCa> {
        &self.root
    }

    /// An issuing CA by name.
    pub fn ca(&self, name: &str) -> Option<&Arc<IssuingCa>> {
        self.issuing.get(name)
    }

    /// The `people` CA, or the only/first one if it was renamed: the first
    /// CA of the default family (`issuing_ca_at(None, now)` is the one
    /// that issues for it now).
    pub fn default_ca(&self) -> Option<&Arc<IssuingCa>> {
        self.ca(DEFAULT_CA).or_else(|| {
            self.issuing
                .values()
                .find(|ca| self.family_of(ca.name()) == ca.name())
        })
    }

    /// Checks every CA key a PKCS#11 token holds by signing with it; keys
    /// in memory always pass. The first failure is returned.
    pub fn check_keys(&self) -> Result<()> {
        for ca in std::iter::once(&self.root).chain(self.issuing.values()) {
            ca.check_key()?;
        }
        Ok(())
    }

    /// The family CA `name` belongs to: the CA whose later generation it is,
    /// else itself.
    pub fn family_of<'a>(&'a self, name: &'a str) -> &'a str {
        self.rotations
            .iter()
            .find(|(_, gens)| gens.iter().any(|g| g.name == name))
            .map(|(family, _)| family.as_str())
            .unwrap_or(name)
    }

    /// The CA that issues for `name`'s family at `now` (Unix seconds): its
    /// latest generation already active, else the family's first CA.
    /// `None` names the default CA's family.
    pub fn issuing_ca_at(&self, name: Option<&str>, now: i64) -> Option<&Arc<IssuingCa>> {
        let family = match name {
            Some(n) => self.family_of(n),
            None => self.default_ca()?.name(),
        };
        let active = self
            .rotations
            .get(family)
            .and_then(|gens| gens.iter().rev().find(|g| g.activates_at <= now))
            .map(|g| g.name.as_str())
            .unwrap_or(family);
        self.issuing.get(active)
    }

    /// Every CA of `name`'s family, first CA first: what relying parties
    /// trust for it across rotations.
    pub fn family(&self, name: &str) -> Vec<&Arc<IssuingCa>> {
        let family = self.family_of(name);
        let later = self.rotations.get(family).into_iter().flatten();
        std::iter::once(family)
            .chain(later.map(|g| g.name.as_str()))
            .filter_map(|n| self.issuing.get(n))
            .collect()
    }

    /// The rotations of every family.
    pub fn rotations(&self) -> &BTreeMap<String, Vec<Generation>> {
        &self.rotations
    }

    /// A new generation of issuing CA `family`: a CA named
    /// `<family>-<n>`, signed by the root now (whose key must be here: for
    /// an offline root, `issuing_ca_csr` and `install_issuing_ca`, then
    /// `schedule_rotation`), its key placed as `opts.keys` says, taking
    /// over the family's new issuance at `activates_at`.
    pub fn rotate(
        &mut self,
        data_dir: &Path,
        family: &str,
        passphrase: Option<&str>,
        opts: &InitOptions,
        activates_at: i64,
    ) -> Result<Arc<IssuingCa>> {
        if self.family_of(family) != family || !self.issuing.contains_key(family) {
            return Err(CaError::field(
                "ca",
                format!("{family:?} is not an issuing CA's family here"),
            ));
        }
        if self.root_is_offline() {
            return Err(CaError::KeyOffline {
                ca: ROOT.to_string(),
            });
        }
        let taken = |n: &str| self.issuing.contains_key(n) || cert_path(data_dir, n).exists();
        let name = (2..)
            .map(|n| format!("{family}-{n}"))
            .find(|n| !taken(n))
            .ok_or_else(|| CaError::internal("no free generation name"))?;
        let ca = self.add_issuing_ca(data_dir, &name, passphrase, opts)?;
        Self::schedule_rotation(data_dir, family, &name, activates_at)?;
        self.rotations
            .entry(family.to_string())
            .or_default()
            .push(Generation { name, activates_at });
        Ok(ca)
    }

    /// Records that installed issuing CA `name` takes over `family`'s new
    /// issuance at `activates_at` (appended to `ca/<family>.rotations`,
    /// fsynced). Activations must come in order.
    pub fn schedule_rotation(
        data_dir: &Path,
        family: &str,
        name: &str,
        activates_at: i64,
    ) -> Result<()> {
        check_ca_name(family)?;
        check_ca_name(name)?;
        for n in [family, name] {
            if !cert_path(data_dir, n).exists() {
                return Err(CaError::field("ca", format!("no issuing CA {n:?} here")));
            }
        }
        let path = rotations_path(data_dir, family);
        let existing = match fs::read_to_string(&path) {
            Ok(t) => parse_rotations(&t, &path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(CaError::io(&path, e)),
        };
        if existing.iter().any(|g| g.name == name) {
            return Err(CaError::field(
                "ca",
                format!("{name:?} is already a generation of {family:?}"),
            ));
        }
        if existing
            .last()
            .is_some_and(|g| g.activates_at > activates_at)
        {
            return Err(CaError::field(
                "activates_at",
                "a rotation cannot activate before the previous one",
            ));
        }
        let mut f = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o644)
            .open(&path)
            .map_err(|e| CaError::io(&path, e))?;
        f.write_all(format!("{name} {activates_at}\n").as_bytes())
            .map_err(|e| CaError::io(&path, e))?;
        f.sync_all().map_err(|e| CaError::io(&path, e))
    }

    pub fn issuing_cas(&self) -> impl Iterator<Item = &Arc<IssuingCa>> {
        self.issuing.values()
    }

    pub(crate) fn principal_cache(&self) -> &PrincipalCertCache {
        &self.principal_cache
    }

    /// How many verified principal certificates are cached (bounded by
    /// [`crate::PRINCIPAL_CACHE_CAPACITY`]).
    pub fn cached_principal_certs(&self) -> usize {
        self.principal_cache.len()
    }

    /// Whether the root's key is kept off this machine.
    pub fn root_is_offline(&self) -> bool {
        !self.root.has_key()
    }

    pub fn root_cert_der(&self) -> &[u8] {
        &self.root.parts.cert_der
    }
    pub fn root_cert_pem(&self) -> &str {
        &self.root.parts.cert_pem
    }
    pub fn root_not_after(&self) -> SystemTime {
        self.root.parts.not_after
    }
}

/// The offline root on its offline machine: its certificate and its
/// exported key, to sign a new issuing CA's request or the root's CRL.
pub struct OfflineRoot {
    ca: IssuingCa,
}

impl OfflineRoot {
    /// Reads the export `warrant init --root-offline` wrote (`root.cert.pem`
    /// and the encrypted `root.key.pem`), checking that they belong together.
    pub fn load(cert_path: &Path, key_path: &Path, passphrase: Option<&str>) -> Result<Self> {
        let parts = CaParts::from_der(read_cert_der(cert_path)?, cert_path)?;
        let key = read_key(key_path, passphrase_of(passphrase))?;
        if key.spki_der != parts.spki_der {
            return Err(CaError::BadCaCert {
                path: cert_path.to_path_buf(),
                reason: format!("does not match the key in {}", key_path.display()),
            });
        }
        Ok(OfflineRoot {
            ca: root_ca(parts, Some(key))?,
        })
    }

    /// The root as a signing CA (for [`crate::build_crl`]).
    pub fn ca(&self) -> &IssuingCa {
        &self.ca
    }

    /// Signs the PEM request of a new issuing CA (from `warrant ca csr`):
    /// a CA certificate (pathLen 0, keyCertSign and cRLSign) for the
    /// request's key and subject, valid `validity` from now and never past
    /// the root's end.
    pub fn sign_issuing_ca(&self, csr_pem: &str, validity: Duration) -> Result<String> {
        let csr = crate::csr::verify_csr(csr_pem)?;
        if !matches!(
            csr.key_kind,
            PublicKeyKind::EcdsaP256 | PublicKeyKind::EcdsaP384
        ) {
            return Err(CaError::field(
                "csr_pem",
                "an issuing CA's key is ECDSA P-256 or P-384",
            ));
        }
        let root = &self.ca.parts;
        let spki = keys::parse_spki(&csr.spki_der, "csr_pem")?;
        let ski = keys::key_identifier(spki.key_bits);
        let now = derw::whole_seconds(SystemTime::now());
        let not_before = (now - Duration::from_secs(60)).max(root.not_before);
        let not_after = (not_before + validity).min(root.not_after);
        let extensions = ca_extensions(&ski, Some(&root.ski), Some(0));
        let der = self.ca.sign_certificate(&CertFields {
            serial: &new_serial()?,
            not_before,
            not_after,
            subject_der: &csr.subject_der,
            spki_der: &csr.spki_der,
            extensions: &extensions,
        })?;
        derw::pem("CERTIFICATE", &der)
    }
}

fn title_case(name: &str) -> String {
    let mut c = name.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn ca_subject(org: &str, cn: &str) -> Result<Subject> {
    let s = if org.is_empty() {
        format!("/CN={cn}")
    } else {
        format!(
            "/O={}/CN={cn}",
            org.replace('\\', "\\\\").replace('/', "\\/")
        )
    };
    let subject = Subject::parse(&s)?;
    debug_assert_eq!(subject.values(DnAttribute::CommonName).count(), 1);
    Ok(subject)
}

/// basicConstraints CA (critical, with pathLen for issuing CAs), KU
/// keyCertSign|cRLSign (critical), SKI, AKI (issuing CAs only).
fn ca_extensions(ski: &[u8], issuer_ski: Option<&[u8]>, path_len: Option<u8>) -> Vec<u8> {
    let mut bc = vec![0x01, 0x01, 0xFF];
    if let Some(n) = path_len {
        bc.extend_from_slice(&[0x02, 0x01, n]);
    }
    let mut out = derw::extension(
        &oids::EXT_BASIC_CONSTRAINTS,
        true,
        &derw::tlv(TAG_SEQUENCE, &bc),
    );
    out.extend(derw::extension(
        &oids::EXT_KEY_USAGE,
        true,
        &[0x03, 0x02, 0x01, 0x06],
    ));
    out.extend(derw::extension(
        &oids::EXT_SUBJECT_KEY_ID,
        false,
        &derw::tlv(TAG_OCTET_STRING, ski),
    ));
    if let Some(aki) = issuer_ski {
        out.extend(aki_extension(aki));
    }
    out
}

pub(crate) fn write_new(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| CaError::io(path, e))?;
    f.write_all(contents).map_err(|e| CaError::io(path, e))?;
    f.sync_all().map_err(|e| CaError::io(path, e))
}

pub(crate) fn write_key(path: &Path, pkcs8_der: &[u8], passphrase: Option<&str>) -> Result<()> {
    let pem = match passphrase {
        None => derw::pem_secret("PRIVATE KEY", pkcs8_der)?,
        Some(pass) => {
            let mut salt = [0u8; 16];
            let mut iv = [0u8; 16];
            aws_lc_rs::rand::fill(&mut salt).map_err(CaError::internal)?;
            aws_lc_rs::rand::fill(&mut iv).map_err(CaError::internal)?;
            let params = pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(
                PBKDF2_ITERATIONS,
                &salt,
                &iv,
            )
            .map_err(CaError::internal)?;
            let info = pkcs8::PrivateKeyInfo::from_der(pkcs8_der).map_err(CaError::internal)?;
            let doc = info
                .encrypt_with_params(params, pass.as_bytes())
                .map_err(CaError::internal)?;
            derw::pem_secret("ENCRYPTED PRIVATE KEY", doc.as_bytes())?
        }
    };
    write_new(path, pem.as_bytes(), 0o600)
}

fn read_key(path: &Path, passphrase: Option<&str>) -> Result<CaSigningKey> {
    let plain = read_pkcs8(path, passphrase)?;
    CaSigningKey::from_pkcs8(&plain).map_err(|reason| CaError::BadKeyFile {
        path: path.to_path_buf(),
        reason,
    })
}

/// The PKCS#8 DER of a key file written by [`write_key`], decrypted with
/// `passphrase` when it is encrypted. A file others can read is refused.
pub(crate) fn read_pkcs8(path: &Path, passphrase: Option<&str>) -> Result<Zeroizing<Vec<u8>>> {
    let bad = |reason: String| CaError::BadKeyFile {
        path: path.to_path_buf(),
        reason,
    };
    // Like ssh with its identity files: a CA key others can read is refused
    // rather than used, so a careless copy or umask cannot go unnoticed.
    let mode = fs::metadata(path)
        .map_err(|e| CaError::io(path, e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(bad(format!(
            "permissions {:04o} are too open; the key must be readable by its owner only (chmod 600)",
            mode & 0o7777
        )));
    }
    let text = Zeroizing::new(fs::read(path).map_err(|e| CaError::io(path, e))?);
    let (label, der) = der::pem::decode_vec(text.trim_ascii()).map_err(|e| bad(e.to_string()))?;
    let der = Zeroizing::new(der);
    let plain = match label {
        "PRIVATE KEY" => Zeroizing::new(der.to_vec()),
        "ENCRYPTED PRIVATE KEY" => {
            let pass = passphrase.ok_or_else(|| CaError::PassphraseRequired(path.to_path_buf()))?;
            let enc =
                pkcs8::EncryptedPrivateKeyInfo::from_der(&der).map_err(|e| bad(e.to_string()))?;
            let doc = enc
                .decrypt(pass.as_bytes())
                .map_err(|_| bad("wrong passphrase or damaged file".into()))?;
            Zeroizing::new(doc.as_bytes().to_vec())
        }
        other => return Err(bad(format!("unexpected PEM label {other:?}"))),
    };
    Ok(plain)
}

fn read_cert_der(path: &Path) -> Result<Vec<u8>> {
    let text = fs::read(path).map_err(|e| CaError::io(path, e))?;
    let (label, der) = der::pem::decode_vec(text.trim_ascii()).map_err(|e| CaError::BadCaCert {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if label != "CERTIFICATE" {
        return Err(CaError::BadCaCert {
            path: path.to_path_buf(),
            reason: format!("unexpected PEM label {label:?}"),
        });
    }
    Ok(der)
}
