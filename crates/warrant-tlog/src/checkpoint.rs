//! C2SP checkpoints (<https://c2sp.org/tlog-checkpoint>) and Ed25519
//! cosignatures (<https://c2sp.org/tlog-cosignature>, `cosignature/v1`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::Hash;
use crate::note::{
    ALG_COSIGNATURE_V1, NoteError, NoteSigner, NoteVerifier, SignedNote, SigningKey, VerifyingKey,
};

/// Why a checkpoint body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error(transparent)]
    Note(#[from] NoteError),
    #[error("the checkpoint text does not end in a newline")]
    NoFinalNewline,
    #[error("the checkpoint text has an ASCII control character other than newline")]
    ControlCharacter,
    #[error("a checkpoint has at least three lines")]
    TooFewLines,
    #[error("the origin line is empty")]
    EmptyOrigin,
    #[error("the tree size is not a decimal u64 without leading zeros")]
    BadSize,
    #[error("the root hash is not the base64 of 32 bytes")]
    BadRoot,
    #[error("an extension line is empty")]
    EmptyExtension,
    #[error("a checkpoint field holds a newline")]
    Unrepresentable,
}

/// A log's signed tree head, as the body of a signed note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
    /// Opaque lines after the root, each non-empty and without its newline.
    pub extensions: Vec<String>,
}

impl Checkpoint {
    /// The note text: origin, size, base64 root, then extension lines, each
    /// ending in a newline.
    pub fn text(&self) -> String {
        let mut t = format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root)
        );
        for e in &self.extensions {
            t.push_str(e);
            t.push('\n');
        }
        t
    }

    /// Strict parse of a note text (not a whole signed note).
    pub fn from_text(text: &str) -> Result<Checkpoint, CheckpointError> {
        let body = text
            .strip_suffix('\n')
            .ok_or(CheckpointError::NoFinalNewline)?;
        if body.chars().any(|c| c < ' ' && c != '\n') {
            return Err(CheckpointError::ControlCharacter);
        }
        let mut lines = body.split('\n');
        let origin = lines.next().unwrap_or("");
        if origin.is_empty() {
            return Err(CheckpointError::EmptyOrigin);
        }
        let (Some(size), Some(root)) = (lines.next(), lines.next()) else {
            return Err(CheckpointError::TooFewLines);
        };
        let extensions: Vec<String> = lines.map(str::to_string).collect();
        if extensions.iter().any(String::is_empty) {
            return Err(CheckpointError::EmptyExtension);
        }
        Ok(Checkpoint {
            origin: origin.to_string(),
            size: parse_size(size).ok_or(CheckpointError::BadSize)?,
            root: B64
                .decode(root)
                .ok()
                .and_then(|r| r.try_into().ok())
                .ok_or(CheckpointError::BadRoot)?,
            extensions,
        })
    }

    /// The signed note of this checkpoint. Refuses fields that would not
    /// parse back to themselves (a newline inside a field, an empty origin).
    pub fn sign(&self, signer: &NoteSigner) -> Result<String, CheckpointError> {
        let fields = std::iter::once(&self.origin).chain(&self.extensions);
        if fields.into_iter().any(|f| f.contains('\n')) {
            return Err(CheckpointError::Unrepresentable);
        }
        let text = self.text();
        Checkpoint::from_text(&text)?;
        Ok(signer.sign(&text)?)
    }

    /// Parses a signed note, verifies the log's signature, parses the body.
    /// The origin is not compared with the key name (the spec only says it
    /// SHOULD match); compare it where the caller's policy needs.
    pub fn open(note: &str, verifier: &NoteVerifier) -> Result<Checkpoint, CheckpointError> {
        let note = SignedNote::parse(note)?;
        verifier.verify(&note)?;
        Checkpoint::from_text(&note.text)
    }
}

/// ASCII decimal, no sign, no leading zeros except "0" itself.
fn parse_size(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

/// The message a `cosignature/v1` signs: header, time, whole note text.
fn cosigned_message(timestamp: u64, text: &str) -> String {
    format!("cosignature/v1\ntime {timestamp}\n{text}")
}

/// The spec caps timestamps at 2^63 - 1.
fn check_timestamp(timestamp: u64) -> Result<(), NoteError> {
    if timestamp > i64::MAX as u64 {
        return Err(NoteError::BadTimestamp);
    }
    Ok(())
}

/// A witness's cosigning key (Ed25519, signature type 0x04). The message
/// does not commit to the witness name, so one key must serve one name.
#[derive(Debug)]
pub struct WitnessSigner(SigningKey);

impl WitnessSigner {
    pub fn generate(name: &str) -> Result<WitnessSigner, NoteError> {
        SigningKey::generate(name, ALG_COSIGNATURE_V1).map(WitnessSigner)
    }

    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<WitnessSigner, NoteError> {
        SigningKey::from_seed(name, ALG_COSIGNATURE_V1, seed).map(WitnessSigner)
    }

    /// `PRIVATE+KEY+<name>+<hex id>+<base64(0x04 || seed)>`.
    pub fn from_private_key_string(s: &str) -> Result<WitnessSigner, NoteError> {
        SigningKey::from_private_key_string(s, ALG_COSIGNATURE_V1).map(WitnessSigner)
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

    /// `<name>+<hex id>+<base64(0x04 || public key)>`.
    pub fn verifier_key(&self) -> String {
        self.0.verifier_key()
    }

    /// The cosignature line (with its newline) for a checkpoint's note text,
    /// whose payload is key id || 8-byte big-endian timestamp || signature.
    /// The text must parse as a checkpoint: a witness only vouches for those.
    pub fn cosign(&self, checkpoint_text: &str, timestamp: u64) -> Result<String, CheckpointError> {
        Checkpoint::from_text(checkpoint_text)?;
        check_timestamp(timestamp)?;
        let msg = cosigned_message(timestamp, checkpoint_text);
        Ok(self.0.line(&timestamp.to_be_bytes(), msg.as_bytes())?)
    }
}

/// A witness's cosignature verifier key (signature type 0x04).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessVerifier(VerifyingKey);

impl WitnessVerifier {
    pub fn parse(vkey: &str) -> Result<WitnessVerifier, NoteError> {
        VerifyingKey::parse(vkey, ALG_COSIGNATURE_V1).map(WitnessVerifier)
    }

    pub fn name(&self) -> &str {
        self.0.name()
    }

    pub fn key_id(&self) -> [u8; 4] {
        self.0.key_id()
    }

    /// Checks this witness's cosignature(s) on `note`, as for
    /// [`NoteVerifier::verify`], and returns the latest timestamp.
    pub fn verify(&self, note: &SignedNote) -> Result<u64, NoteError> {
        let mut latest = None;
        for sig in self.0.matching(note) {
            // Exactly a timestamp and an Ed25519 signature.
            let Some((ts, ed)) = sig
                .signature
                .split_first_chunk::<8>()
                .filter(|(_, ed)| ed.len() == 64)
            else {
                return Err(self.0.bad_signature());
            };
            let ts = u64::from_be_bytes(*ts);
            check_timestamp(ts)?;
            self.0
                .check(cosigned_message(ts, &note.text).as_bytes(), ed)?;
            latest = latest.max(Some(ts));
        }
        latest.ok_or_else(|| self.0.no_signature())
    }
}
