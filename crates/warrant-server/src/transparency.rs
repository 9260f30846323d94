//! The transparency log's signer: the log key, and the checkpoints it
//! signs (C2SP `tlog-checkpoint` in a C2SP `signed-note`).
//!
//! The key is an Ed25519 note key kept in `ca/log.key` (0600, the Go
//! `sumdb/note` private key text). Its name is the log's name, and each
//! tree's checkpoint has the origin `<log name>/<tree>`. Nodes that share a
//! data dir's `ca/` share the key, so any node signs any tree: every
//! `audit.checkpoint_interval` a node signs each tree that grew since its
//! last checkpoint (its own and other nodes', dead ones included) and keeps
//! the note in the tree's row, where `GET /api/v1/audit/checkpoint` reads it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use warrant_store::{Store, StoreError, TreeRow};
use warrant_tlog::{Checkpoint, Hash, NoteSigner, NoteVerifier};

use crate::state::StartError;

/// The log key, relative to the data dir.
pub const LOG_KEY_FILE: &str = "ca/log.key";

/// Why the log key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LogKeyError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a log key: {detail}")]
    Invalid { path: PathBuf, detail: String },
}

/// Signs checkpoints.
pub struct LogSigner {
    signer: NoteSigner,
}

impl LogSigner {
    /// Reads the data dir's log key.
    pub fn load(data_dir: &Path) -> Result<LogSigner, LogKeyError> {
        let path = data_dir.join(LOG_KEY_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| LogKeyError::Io {
            path: path.clone(),
            source,
        })?;
        let signer =
            NoteSigner::from_private_key_string(text.trim()).map_err(|e| LogKeyError::Invalid {
                path: path.clone(),
                detail: e.to_string(),
            })?;
        Ok(LogSigner { signer })
    }

    /// Reads the log key, or makes one named `warrant-<8 hex digits>` when
    /// the data dir has none (a data dir from before the log).
    pub fn load_or_create(data_dir: &Path) -> Result<LogSigner, StartError> {
        let path = data_dir.join(LOG_KEY_FILE);
        if path.exists() {
            return Self::load(data_dir).map_err(|e| StartError::Other(e.to_string()));
        }
        let mut id = [0u8; 4];
        aws_lc_rs::rand::fill(&mut id).map_err(|_| StartError::Other("no randomness".into()))?;
        let name = format!("warrant-{}", hex::encode(id));
        let signer = NoteSigner::generate(&name).map_err(|e| StartError::Other(e.to_string()))?;
        let io = |source| StartError::Io {
            context: format!("writing {}", path.display()),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        write_private(&path, &format!("{}\n", signer.private_key_string())).map_err(io)?;
        Ok(LogSigner { signer })
    }

    /// The log's name (the key's name, and every origin's prefix).
    pub fn name(&self) -> &str {
        self.signer.name()
    }

    /// The verifier key a third party pins: `<name>+<id>+<key>`.
    pub fn verifier_key(&self) -> String {
        self.signer.verifier_key()
    }

    pub fn verifier(&self) -> Result<NoteVerifier, String> {
        NoteVerifier::parse(&self.verifier_key()).map_err(|e| e.to_string())
    }

    /// The origin of `tree`'s checkpoints.
    pub fn origin(&self, tree: &str) -> String {
        format!("{}/{tree}", self.name())
    }

    /// A signed checkpoint of `tree` at `size` with `root`.
    pub fn sign(&self, tree: &str, size: u64, root: &Hash) -> Result<String, String> {
        Checkpoint {
            origin: self.origin(tree),
            size,
            root: *root,
            extensions: Vec::new(),
        }
        .sign(&self.signer)
        .map_err(|e| e.to_string())
    }
}

#[cfg(unix)]
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}

/// Signs and keeps a checkpoint for every tree that grew since its last
/// one (or has none). Returns how many were signed.
pub async fn checkpoint_trees(store: &Store, signer: &LogSigner) -> Result<usize, StoreError> {
    let mut signed = 0;
    for tree in store.log().trees().await? {
        if tree.checkpoint.is_some() && tree.checkpoint_size >= tree.size {
            continue;
        }
        sign_and_keep(store, signer, &tree).await?;
        signed += 1;
    }
    Ok(signed)
}

async fn sign_and_keep(
    store: &Store,
    signer: &LogSigner,
    tree: &TreeRow,
) -> Result<(), StoreError> {
    let note = signer
        .sign(&tree.name, tree.size, &tree.root)
        .map_err(StoreError::Database)?;
    store.log().save_checkpoint(tree.id, tree.size, &note).await
}

/// Signs checkpoints every `every` until `stop`.
pub fn spawn_checkpointer(
    store: Arc<Store>,
    signer: Arc<LogSigner>,
    every: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    crate::periodic::every(every, stop, move || {
        let store = store.clone();
        let signer = signer.clone();
        async move {
            if let Err(error) = checkpoint_trees(&store, &signer).await {
                tracing::warn!(%error, "checkpoint pass failed; the next pass tries again");
            }
        }
    })
}
