//! C2SP signed notes (<https://c2sp.org/signed-note>) with Ed25519 keys, in
//! the key string formats of Go's `golang.org/x/mod/sumdb/note`.

use std::fmt;

use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use sha2::{Digest, Sha256};

/// Starts every signature line: U+2014 EM DASH, then a space.
const SIG_PREFIX: &str = "\u{2014} ";
/// Parsing caps, against notes built to be expensive (the spec asks
/// verifiers for a limit, and at least 16 signatures).
pub(crate) const MAX_NOTE_LEN: usize = 1 << 20;
pub(crate) const MAX_SIGNATURES: usize = 100;

/// Signature type bytes (signed-note §Signature types).
pub(crate) const ALG_ED25519: u8 = 0x01;
pub(crate) const ALG_COSIGNATURE_V1: u8 = 0x04;

/// Why a note, key or signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("the note is over {MAX_NOTE_LEN} bytes")]
    TooLarge,
    #[error("the note has over {MAX_SIGNATURES} signatures")]
    TooManySignatures,
    #[error("the note has an ASCII control character other than newline")]
    ControlCharacter,
    #[error("the note or its text does not end in a newline")]
    NoFinalNewline,
    #[error("no blank line separates the note text from its signatures")]
    NoBlankLine,
    #[error("the note text is empty")]
    EmptyText,
    #[error("the note has no signature lines")]
    NoSignatures,
    #[error("a signature line is not `\u{2014} <name> <base64>`")]
    BadSignatureLine,
    #[error("a key name is empty or holds a space or '+'")]
    BadKeyName,
    #[error("invalid base64")]
    BadBase64,
    #[error("a signature is shorter than 5 bytes (key id and signature)")]
    ShortSignature,
    #[error("malformed key string")]
    BadKeyString,
    #[error("key type {got:#04x} where {want:#04x} was expected")]
    WrongKeyType { got: u8, want: u8 },
    #[error("key id {given} does not match the key's {computed}")]
    KeyIdMismatch { given: String, computed: String },
    #[error("the key material was rejected")]
    BadKey,
    #[error("no randomness for a new key")]
    Random,
    #[error("signing failed")]
    SigningFailed,
    #[error("no signature by {name}+{key_id}")]
    NoMatchingSignature { name: String, key_id: String },
    #[error("a signature by {name}+{key_id} does not verify")]
    BadSignature { name: String, key_id: String },
    #[error("a cosignature timestamp is past 2^63 - 1")]
    BadTimestamp,
}

/// One signature line: the key id is split off the base64 payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    pub name: String,
    pub key_id: [u8; 4],
    /// The bytes after the key id (for cosignatures: timestamp, signature).
    pub signature: Vec<u8>,
}

impl NoteSignature {
    /// Parses `— <name> <base64>` (no newline).
    fn parse(line: &str) -> Result<NoteSignature, NoteError> {
        let rest = line
            .strip_prefix(SIG_PREFIX)
            .ok_or(NoteError::BadSignatureLine)?;
        let (name, b64) = rest
            .split_once(' ')
            .filter(|(_, b64)| !b64.is_empty())
            .ok_or(NoteError::BadSignatureLine)?;
        check_name(name)?;
        // STANDARD requires canonical padding and no trailing bits, so
        // re-encoding gives back the same text.
        let raw = B64.decode(b64).map_err(|_| NoteError::BadBase64)?;
        let (key_id, signature) = raw
            .split_first_chunk::<4>()
            .filter(|(_, sig)| !sig.is_empty())
            .ok_or(NoteError::ShortSignature)?;
        Ok(NoteSignature {
            name: name.to_string(),
            key_id: *key_id,
            signature: signature.to_vec(),
        })
    }
}

/// `— <name> <base64(key_id || signature)>`, without the newline.
impl fmt::Display for NoteSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = self.key_id.to_vec();
        raw.extend_from_slice(&self.signature);
        write!(f, "{SIG_PREFIX}{} {}", self.name, B64.encode(raw))
    }
}

/// A parsed signed note. `text` ends in a newline and excludes the blank
/// line; [`Display`](fmt::Display) gives back the exact bytes parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedNote {
    pub text: String,
    pub signatures: Vec<NoteSignature>,
}

impl SignedNote {
    /// Strict parse; signatures are not verified here.
    pub fn parse(note: &str) -> Result<SignedNote, NoteError> {
        if note.len() > MAX_NOTE_LEN {
            return Err(NoteError::TooLarge);
        }
        check_controls(note)?;
        let body = note.strip_suffix('\n').ok_or(NoteError::NoFinalNewline)?;
        // The text may hold blank lines; signature lines are never empty, so
        // the last blank line is the separator.
        let split = note.rfind("\n\n").ok_or(NoteError::NoBlankLine)?;
        let text = &note[..=split];
        let sigs = body.get(split + 2..).unwrap_or("");
        if sigs.is_empty() {
            return Err(NoteError::NoSignatures);
        }
        let mut signatures = Vec::new();
        for line in sigs.split('\n') {
            if signatures.len() == MAX_SIGNATURES {
                return Err(NoteError::TooManySignatures);
            }
            signatures.push(NoteSignature::parse(line)?);
        }
        Ok(SignedNote {
            text: text.to_string(),
            signatures,
        })
    }

    /// Appends one signature line (such as a cosignature), with or without
    /// its final newline.
    pub fn add_signature_line(&mut self, line: &str) -> Result<(), NoteError> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        check_controls(line)?;
        if self.signatures.len() >= MAX_SIGNATURES {
            return Err(NoteError::TooManySignatures);
        }
        let sig = NoteSignature::parse(line)?;
        // Keep the note within what `parse` accepts back.
        if self.to_string().len() + line.len() + 1 > MAX_NOTE_LEN {
            return Err(NoteError::TooLarge);
        }
        self.signatures.push(sig);
        Ok(())
    }
}

impl fmt::Display for SignedNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.text)?;
        for s in &self.signatures {
            writeln!(f, "{s}")?;
        }
        Ok(())
    }
}

fn check_controls(s: &str) -> Result<(), NoteError> {
    if s.chars().any(|c| c < ' ' && c != '\n') {
        return Err(NoteError::ControlCharacter);
    }
    Ok(())
}

/// Note text rules: non-empty, newline-terminated, no control characters.
pub(crate) fn check_text(text: &str) -> Result<(), NoteError> {
    if text.is_empty() {
        return Err(NoteError::EmptyText);
    }
    if !text.ends_with('\n') {
        return Err(NoteError::NoFinalNewline);
    }
    if text.len() > MAX_NOTE_LEN {
        return Err(NoteError::TooLarge);
    }
    check_controls(text)
}

/// Key names: non-empty, no Unicode space, no '+' (the key string separator).
fn check_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '+') {
        return Err(NoteError::BadKeyName);
    }
    Ok(())
}

/// SHA-256(name || "\n" || type || public key)[:4].
fn compute_key_id(name: &str, alg: u8, public: &[u8]) -> [u8; 4] {
    let d = Sha256::new()
        .chain_update(name)
        .chain_update([b'\n', alg])
        .chain_update(public)
        .finalize();
    [d[0], d[1], d[2], d[3]]
}

/// Splits `<name>+<8 hex>+<base64(type || 32 bytes)>` and checks the type.
/// The base64 part may itself hold '+', so only two splits are made.
fn split_key(s: &str, alg: u8) -> Result<(&str, [u8; 4], [u8; 32]), NoteError> {
    let mut parts = s.splitn(3, '+');
    let (Some(name), Some(id), Some(b64)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(NoteError::BadKeyString);
    };
    check_name(name)?;
    let mut key_id = [0u8; 4];
    if id.len() != 8 || hex::decode_to_slice(id, &mut key_id).is_err() {
        return Err(NoteError::BadKeyString);
    }
    let raw = B64.decode(b64).map_err(|_| NoteError::BadBase64)?;
    let Some((&got, key)) = raw.split_first() else {
        return Err(NoteError::BadKeyString);
    };
    if got != alg {
        return Err(NoteError::WrongKeyType { got, want: alg });
    }
    let key: [u8; 32] = key.try_into().map_err(|_| NoteError::BadKeyString)?;
    Ok((name, key_id, key))
}

fn check_key_id(given: [u8; 4], computed: [u8; 4]) -> Result<(), NoteError> {
    if given != computed {
        return Err(NoteError::KeyIdMismatch {
            given: hex::encode(given),
            computed: hex::encode(computed),
        });
    }
    Ok(())
}

/// An Ed25519 private key with its name and signature type: the part
/// [`NoteSigner`] and [`WitnessSigner`](crate::WitnessSigner) share.
pub(crate) struct SigningKey {
    name: String,
    alg: u8,
    key_id: [u8; 4],
    seed: [u8; 32],
    pair: Ed25519KeyPair,
}

const PRIVATE_PREFIX: &str = "PRIVATE+KEY+";

impl SigningKey {
    pub(crate) fn generate(name: &str, alg: u8) -> Result<SigningKey, NoteError> {
        let mut seed = [0u8; 32];
        aws_lc_rs::rand::fill(&mut seed).map_err(|_| NoteError::Random)?;
        SigningKey::from_seed(name, alg, seed)
    }

    pub(crate) fn from_seed(name: &str, alg: u8, seed: [u8; 32]) -> Result<SigningKey, NoteError> {
        check_name(name)?;
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|_| NoteError::BadKey)?;
        let key_id = compute_key_id(name, alg, pair.public_key().as_ref());
        Ok(SigningKey {
            name: name.to_string(),
            alg,
            key_id,
            seed,
            pair,
        })
    }

    pub(crate) fn from_private_key_string(s: &str, alg: u8) -> Result<SigningKey, NoteError> {
        let rest = s
            .strip_prefix(PRIVATE_PREFIX)
            .ok_or(NoteError::BadKeyString)?;
        let (name, key_id, seed) = split_key(rest, alg)?;
        let key = SigningKey::from_seed(name, alg, seed)?;
        check_key_id(key_id, key.key_id)?;
        Ok(key)
    }

    pub(crate) fn private_key_string(&self) -> String {
        format!(
            "{PRIVATE_PREFIX}{}+{}+{}",
            self.name,
            hex::encode(self.key_id),
            B64.encode(typed(self.alg, &self.seed))
        )
    }

    pub(crate) fn verifier_key(&self) -> String {
        format!(
            "{}+{}+{}",
            self.name,
            hex::encode(self.key_id),
            B64.encode(typed(self.alg, self.pair.public_key().as_ref()))
        )
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn key_id(&self) -> [u8; 4] {
        self.key_id
    }

    /// The signature line (with its newline) for `msg`, whose payload is
    /// `prefix || Ed25519(msg)`.
    pub(crate) fn line(&self, prefix: &[u8], msg: &[u8]) -> Result<String, NoteError> {
        let sig = self
            .pair
            .try_sign(msg)
            .map_err(|_| NoteError::SigningFailed)?;
        let mut signature = prefix.to_vec();
        signature.extend_from_slice(sig.as_ref());
        let line = NoteSignature {
            name: self.name.clone(),
            key_id: self.key_id,
            signature,
        };
        Ok(format!("{line}\n"))
    }
}

impl fmt::Debug for SigningKey {
    /// Never prints the seed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("name", &self.name)
            .field("key_id", &hex::encode(self.key_id))
            .finish_non_exhaustive()
    }
}

fn typed(alg: u8, key: &[u8]) -> Vec<u8> {
    let mut v = vec![alg];
    v.extend_from_slice(key);
    v
}

/// An Ed25519 public key with its name and signature type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VerifyingKey {
    name: String,
    key_id: [u8; 4],
    public: [u8; 32],
}

impl VerifyingKey {
    pub(crate) fn parse(vkey: &str, alg: u8) -> Result<VerifyingKey, NoteError> {
        let (name, key_id, public) = split_key(vkey, alg)?;
        check_key_id(key_id, compute_key_id(name, alg, &public))?;
        Ok(VerifyingKey {
            name: name.to_string(),
            key_id,
            public,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn key_id(&self) -> [u8; 4] {
        self.key_id
    }

    /// The note's signatures by this key (same name AND key id; the spec has
    /// verifiers ignore every other line).
    pub(crate) fn matching<'a>(
        &'a self,
        note: &'a SignedNote,
    ) -> impl Iterator<Item = &'a NoteSignature> + 'a {
        note.signatures
            .iter()
            .filter(|s| s.name == self.name && s.key_id == self.key_id)
    }

    pub(crate) fn check(&self, msg: &[u8], sig: &[u8]) -> Result<(), NoteError> {
        UnparsedPublicKey::new(&ED25519, &self.public)
            .verify(msg, sig)
            .map_err(|_| self.bad_signature())
    }

    pub(crate) fn no_signature(&self) -> NoteError {
        NoteError::NoMatchingSignature {
            name: self.name.clone(),
            key_id: hex::encode(self.key_id),
        }
    }

    pub(crate) fn bad_signature(&self) -> NoteError {
        NoteError::BadSignature {
            name: self.name.clone(),
            key_id: hex::encode(self.key_id),
        }
    }
}

/// A note signing key (Ed25519, signature type 0x01).
#[derive(Debug)]
pub struct NoteSigner(SigningKey);

impl NoteSigner {
    /// A fresh key from the system's CSPRNG.
    pub fn generate(name: &str) -> Result<NoteSigner, NoteError> {
        SigningKey::generate(name, ALG_ED25519).map(NoteSigner)
    }

    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<NoteSigner, NoteError> {
        SigningKey::from_seed(name, ALG_ED25519, seed).map(NoteSigner)
    }

    /// `PRIVATE+KEY+<name>+<hex id>+<base64(0x01 || seed)>`; the id must match.
    pub fn from_private_key_string(s: &str) -> Result<NoteSigner, NoteError> {
        SigningKey::from_private_key_string(s, ALG_ED25519).map(NoteSigner)
    }

    pub fn private_key_string(&self) -> String {
        self.0.private_key_string()
    }

    pub fn name(&self) -> &str {
        self.0.name()
    }

    pub fn key_id(&self) -> [u8; 4] {
        self.0.key_id()
    }

    /// `<name>+<hex id>+<base64(0x01 || public key)>`.
    pub fn verifier_key(&self) -> String {
        self.0.verifier_key()
    }

    /// The whole signed note: `text`, a blank line, this key's signature line.
    pub fn sign(&self, text: &str) -> Result<String, NoteError> {
        check_text(text)?;
        let line = self.0.line(&[], text.as_bytes())?;
        Ok(format!("{text}\n{line}"))
    }
}

/// A note verifier key (Ed25519, signature type 0x01).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteVerifier(VerifyingKey);

impl NoteVerifier {
    /// `<name>+<8 hex id>+<base64(0x01 || public key)>`; the id must match.
    pub fn parse(vkey: &str) -> Result<NoteVerifier, NoteError> {
        VerifyingKey::parse(vkey, ALG_ED25519).map(NoteVerifier)
    }

    pub fn name(&self) -> &str {
        self.0.name()
    }

    pub fn key_id(&self) -> [u8; 4] {
        self.0.key_id()
    }

    /// Passes when at least one line has this key's name and id and every
    /// such line verifies; other keys' lines are ignored.
    pub fn verify(&self, note: &SignedNote) -> Result<(), NoteError> {
        let mut found = false;
        for sig in self.0.matching(note) {
            self.0.check(note.text.as_bytes(), &sig.signature)?;
            found = true;
        }
        if !found {
            return Err(self.0.no_signature());
        }
        Ok(())
    }
}
