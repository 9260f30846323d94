//! The transparency log: every issuance, refusal, revocation, renewal,
//! JWT, login, token and user change is a leaf of an append-only Merkle
//! tree hashed as RFC 9162 §2.1 (`warrant_tlog`).
//!
//! **Trees.** Every committer of every process start appends to its own
//! tree (`<node>.<run>.<committer>`, a row of `warrant_log_trees`), so a
//! tree has one writer and its leaves are numbered without any lock shared
//! between committers, processes or nodes. Checkpoints name every tree.
//!
//! **Cost.** A certificate row *is* its issuance's leaf ([`leaf`]): the
//! batch that writes it sets its `(log_tree, log_index)` and nothing of its
//! content is stored twice. Other events are rows of `warrant_log_events`.
//! A group commit appends its leaves to the committer's compact range in
//! memory ([`append`]), stores the hashes of the perfect subtrees of
//! [`TILE_LEVEL`] and above that it completed, and the tree's new size and
//! compact range, all in the batch's transaction: a tree's head never runs
//! ahead of its leaves, and after a failed commit the committer rereads it.
//!
//! **Nodes.** Below the tile level a hash is recomputed from the leaves
//! (one block of 2^8 rows, read through the `(log_tree, log_index)` index);
//! at and above it, it is read. When retention removes leaves, the largest
//! subtrees left without a live leaf keep their hashes ([`prune`]), so
//! every remaining leaf still has an inclusion proof, and stored nodes
//! that a larger pruned subtree covers are dropped: the table stays
//! proportional to the live leaves.

pub mod leaf;
mod prune;
mod verify;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use warrant_tlog::{Frontier, Hash, NodeId};

pub use leaf::{CertLeaf, LeafEntry, LeafError};
pub use prune::PrunedLeaf;
pub use verify::{LogBreak, TreeReport};

use crate::error::StoreError;
use crate::sql::SqlCore;

/// Perfect subtrees at this level (2^8 leaves) and above are stored as
/// they complete; below it they are recomputed from one block of rows.
pub const TILE_LEVEL: u8 = 8;
/// Leaves per block.
pub const BLOCK: u64 = 1 << TILE_LEVEL;

/// A tree as its writer holds it between commits.
#[derive(Debug, Clone)]
pub(crate) struct TreeHead {
    pub id: i64,
    pub frontier: Frontier,
}

/// What one batch appends to a tree.
#[derive(Debug)]
pub(crate) struct Appended {
    /// Perfect subtrees at or above [`TILE_LEVEL`] that the batch completed.
    pub nodes: Vec<(NodeId, Hash)>,
    /// The head after the batch.
    pub next: TreeHead,
}

/// Appends `leaves` (their hashes, in order) after `head`.
pub(crate) fn append(head: &TreeHead, leaves: &[Hash]) -> Appended {
    let mut frontier = head.frontier.clone();
    let mut nodes = Vec::new();
    for l in leaves {
        frontier.push(*l, |id, h| {
            if id.level >= TILE_LEVEL {
                nodes.push((id, h));
            }
        });
    }
    Appended {
        nodes,
        next: TreeHead {
            id: head.id,
            frontier,
        },
    }
}

/// A tree as the database holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRow {
    pub id: i64,
    pub name: String,
    pub size: u64,
    pub root: Hash,
    /// The latest checkpoint signed for it (a signed note), if any.
    pub checkpoint: Option<String>,
    pub checkpoint_size: u64,
    /// Unix milliseconds of its last append.
    pub updated_at_ms: i64,
}

/// A leaf as read back, with where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub tree: String,
    pub index: u64,
    pub entry: LeafEntry,
}

/// Why the log could not answer.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no tree named {0}")]
    UnknownTree(String),
    #[error("no certificate {ca}/{serial} in the log")]
    UnknownSerial { ca: String, serial: String },
    #[error("leaf {index} is not in tree {tree} of size {size}")]
    IndexOutOfRange { tree: String, index: u64, size: u64 },
    #[error(
        "tree {tree}: sizes {from} to {to} do not make a consistency proof (0 < from <= to <= {size})"
    )]
    BadRange {
        tree: String,
        from: u64,
        to: u64,
        size: u64,
    },
    /// A hash the proof needs is gone: retention removed the leaves under
    /// it and kept a larger subtree instead (the archive holds them).
    #[error("tree {tree}: the subtree at level {level} index {index} was pruned")]
    Pruned { tree: String, level: u8, index: u64 },
    #[error("tree {tree}: {detail}")]
    Corrupt { tree: String, detail: String },
}

/// An inclusion proof, ready to serve.
#[derive(Debug, Clone)]
pub struct InclusionProof {
    pub tree: String,
    pub index: u64,
    pub size: u64,
    pub leaf: Vec<u8>,
    pub entry: LeafEntry,
    pub proof: Vec<Hash>,
    pub root: Hash,
}

/// A consistency proof, ready to serve.
#[derive(Debug, Clone)]
pub struct ConsistencyProof {
    pub tree: String,
    pub from: u64,
    pub to: u64,
    pub proof: Vec<Hash>,
    pub from_root: Hash,
    pub to_root: Hash,
}

/// The log's reads: trees, proofs, verification, checkpoints kept.
#[derive(Clone)]
pub struct Log {
    pub(crate) core: Arc<SqlCore>,
}

/// Hashes of perfect subtrees, read or recomputed for one tree.
pub(crate) struct NodeReader<'a> {
    core: &'a SqlCore,
    tree: &'a TreeRow,
    /// Per block: leaf hashes present and stored low nodes.
    blocks: HashMap<u64, Block>,
    known: HashMap<NodeId, Hash>,
}

/// One block's leaves and stored nodes below the tile level.
#[derive(Debug, Default)]
pub(crate) struct Block {
    pub leaves: BTreeMap<u64, Hash>,
    pub low: HashMap<NodeId, Hash>,
}

impl<'a> NodeReader<'a> {
    pub(crate) fn new(core: &'a SqlCore, tree: &'a TreeRow) -> NodeReader<'a> {
        NodeReader {
            core,
            tree,
            blocks: HashMap::new(),
            known: HashMap::new(),
        }
    }

    fn pruned(&self, id: NodeId) -> LogError {
        LogError::Pruned {
            tree: self.tree.name.clone(),
            level: id.level,
            index: id.index,
        }
    }

    /// The hash of perfect subtree `id` (inside the tree's size).
    pub(crate) async fn get(&mut self, id: NodeId) -> Result<Hash, LogError> {
        if let Some(h) = self.known.get(&id) {
            return Ok(*h);
        }
        let h = if id.level >= TILE_LEVEL {
            match self.core.log_node(self.tree.id, id).await? {
                Some(h) => h,
                None => self.compute_high(id).await?,
            }
        } else {
            let block = id.start() / BLOCK;
            if !self.blocks.contains_key(&block) {
                let b = self.load_block(block).await?;
                self.blocks.insert(block, b);
            }
            let b = &self.blocks[&block];
            low_hash(b, id).ok_or_else(|| self.pruned(id))?
        };
        self.known.insert(id, h);
        Ok(h)
    }

    /// A stored node missing: recompute from its children, iteratively
    /// (only reached for a node whose children are themselves present).
    async fn compute_high(&mut self, id: NodeId) -> Result<Hash, LogError> {
        let Some((l, r)) = id.children() else {
            return Err(self.pruned(id));
        };
        let lh = Box::pin(self.get(l)).await?;
        let rh = Box::pin(self.get(r)).await?;
        Ok(warrant_tlog::node_hash(&lh, &rh))
    }

    async fn load_block(&self, block: u64) -> Result<Block, LogError> {
        let start = block * BLOCK;
        let end = (start + BLOCK).min(self.tree.size);
        let leaves = self
            .core
            .log_leaves(self.tree.id, start, end)
            .await?
            .into_iter()
            .map(|(i, e)| (i, e.hash()))
            .collect();
        let low = self
            .core
            .log_low_nodes(self.tree.id, start, start + BLOCK)
            .await?
            .into_iter()
            .collect();
        Ok(Block { leaves, low })
    }

    /// Resolves every id, in order.
    pub(crate) async fn get_all(
        &mut self,
        ids: &[NodeId],
    ) -> Result<HashMap<NodeId, Hash>, LogError> {
        let mut out = HashMap::with_capacity(ids.len());
        for id in ids {
            out.insert(*id, self.get(*id).await?);
        }
        Ok(out)
    }
}

/// A node below the tile level from a block's leaves and stored nodes.
pub(crate) fn low_hash(b: &Block, id: NodeId) -> Option<Hash> {
    if let Some(h) = b.low.get(&id) {
        return Some(*h);
    }
    match id.children() {
        None => b.leaves.get(&id.index).copied(),
        Some((l, r)) => Some(warrant_tlog::node_hash(&low_hash(b, l)?, &low_hash(b, r)?)),
    }
}

fn proof_err(tree: &str, e: impl std::fmt::Display) -> LogError {
    LogError::Corrupt {
        tree: tree.to_string(),
        detail: e.to_string(),
    }
}

impl Log {
    /// Archives (when asked) and reconciles the nodes of leaves about to be
    /// deleted; returns what [`after_prune`](Self::after_prune) needs.
    pub(crate) async fn prepare_prune(
        &self,
        leaves: Vec<(i64, u64, LeafEntry)>,
        archive: Option<&Arc<crate::archive::Archive>>,
    ) -> Result<Vec<PrunedLeaf>, crate::retention::RetentionError> {
        let pruned: Vec<PrunedLeaf> = leaves
            .iter()
            .map(|(tree, index, e)| PrunedLeaf {
                tree: *tree,
                index: *index,
                hash: e.hash(),
            })
            .collect();
        self.before_prune(&pruned).await?;
        if let Some(a) = archive {
            let mut names: HashMap<i64, String> = HashMap::new();
            let mut lines = Vec::with_capacity(leaves.len());
            for (tree, index, e) in &leaves {
                if !names.contains_key(tree) {
                    let name = self
                        .core
                        .log_tree_by_id(*tree)
                        .await?
                        .map(|t| t.name)
                        .unwrap_or_else(|| format!("#{tree}"));
                    names.insert(*tree, name);
                }
                lines.push(crate::archive::ArchivedLeaf::new(
                    &names[tree],
                    *index,
                    &e.encode(),
                ));
            }
            let a = a.clone();
            tokio::task::spawn_blocking(move || a.append_log(&lines))
                .await
                .map_err(|e| crate::retention::RetentionError::Archive(std::io::Error::other(e)))?
                .map_err(crate::retention::RetentionError::Archive)?;
        }
        Ok(pruned)
    }

    /// Every tree, oldest first.
    pub async fn trees(&self) -> Result<Vec<TreeRow>, StoreError> {
        self.core.log_trees().await
    }

    pub async fn tree(&self, name: &str) -> Result<TreeRow, LogError> {
        self.core
            .log_tree_by_name(name)
            .await?
            .ok_or_else(|| LogError::UnknownTree(name.to_string()))
    }

    /// Keeps `note` as `tree`'s latest checkpoint (for `size`), unless a
    /// later one is already kept.
    pub async fn save_checkpoint(
        &self,
        tree_id: i64,
        size: u64,
        note: &str,
    ) -> Result<(), StoreError> {
        self.core.log_save_checkpoint(tree_id, size, note).await
    }

    /// The root of `tree` at `size` (≤ its size).
    pub async fn root_at(&self, tree: &TreeRow, size: u64) -> Result<Hash, LogError> {
        if size > tree.size {
            return Err(LogError::IndexOutOfRange {
                tree: tree.name.clone(),
                index: size,
                size: tree.size,
            });
        }
        if size == tree.size {
            return Ok(tree.root);
        }
        let mut reader = NodeReader::new(&self.core, tree);
        let ids = warrant_tlog::root_nodes(size);
        let known = reader.get_all(&ids).await?;
        warrant_tlog::root_at(size, &mut |id| known.get(&id).copied().ok_or(()))
            .map_err(|e| proof_err(&tree.name, format!("{e:?}")))
    }

    /// Where certificate `ca`/`serial` sits in the log.
    pub async fn find_cert(&self, ca: &str, serial: &str) -> Result<(TreeRow, u64), LogError> {
        let unknown = || LogError::UnknownSerial {
            ca: ca.to_string(),
            serial: serial.to_string(),
        };
        let (tree_id, index) = self
            .core
            .log_cert_position(ca, serial)
            .await?
            .ok_or_else(unknown)?;
        let tree = self
            .core
            .log_tree_by_id(tree_id)
            .await?
            .ok_or_else(unknown)?;
        Ok((tree, index))
    }

    /// An inclusion proof of leaf `index` of `tree` to the tree at `size`
    /// (`None`: its current size).
    pub async fn inclusion(
        &self,
        tree: &TreeRow,
        index: u64,
        size: Option<u64>,
    ) -> Result<InclusionProof, LogError> {
        let size = size.unwrap_or(tree.size);
        if index >= size || size > tree.size {
            return Err(LogError::IndexOutOfRange {
                tree: tree.name.clone(),
                index,
                size: tree.size.min(size),
            });
        }
        let entry = self
            .core
            .log_leaves(tree.id, index, index + 1)
            .await?
            .into_iter()
            .next()
            .map(|(_, e)| e)
            .ok_or(LogError::Pruned {
                tree: tree.name.clone(),
                level: 0,
                index,
            })?;
        let mut reader = NodeReader::new(&self.core, tree);
        let ids =
            warrant_tlog::inclusion_nodes(index, size).map_err(|e| proof_err(&tree.name, e))?;
        let mut ids = ids;
        ids.extend(warrant_tlog::root_nodes(size));
        let known = reader.get_all(&ids).await?;
        let mut get = |id: NodeId| known.get(&id).copied().ok_or(());
        let proof = warrant_tlog::inclusion_proof(index, size, &mut get)
            .map_err(|e| proof_err(&tree.name, format!("{e:?}")))?;
        let root = warrant_tlog::root_at(size, &mut get)
            .map_err(|e| proof_err(&tree.name, format!("{e:?}")))?;
        Ok(InclusionProof {
            tree: tree.name.clone(),
            index,
            size,
            leaf: entry.encode(),
            entry,
            proof,
            root,
        })
    }

    /// A consistency proof of `tree` from size `from` to `to` (`None`: its
    /// current size).
    pub async fn consistency(
        &self,
        tree: &TreeRow,
        from: u64,
        to: Option<u64>,
    ) -> Result<ConsistencyProof, LogError> {
        let to = to.unwrap_or(tree.size);
        if from == 0 || from > to || to > tree.size {
            return Err(LogError::BadRange {
                tree: tree.name.clone(),
                from,
                to,
                size: tree.size,
            });
        }
        let mut reader = NodeReader::new(&self.core, tree);
        let mut ids =
            warrant_tlog::consistency_nodes(from, to).map_err(|e| proof_err(&tree.name, e))?;
        ids.extend(warrant_tlog::root_nodes(from));
        ids.extend(warrant_tlog::root_nodes(to));
        let known = reader.get_all(&ids).await?;
        let mut get = |id: NodeId| known.get(&id).copied().ok_or(());
        let proof = warrant_tlog::consistency_proof(from, to, &mut get)
            .map_err(|e| proof_err(&tree.name, format!("{e:?}")))?;
        let from_root = warrant_tlog::root_at(from, &mut get)
            .map_err(|e| proof_err(&tree.name, format!("{e:?}")))?;
        let to_root = warrant_tlog::root_at(to, &mut get)
            .map_err(|e| proof_err(&tree.name, format!("{e:?}")))?;
        Ok(ConsistencyProof {
            tree: tree.name.clone(),
            from,
            to,
            proof,
            from_root,
            to_root,
        })
    }
}
