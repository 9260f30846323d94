//! RFC 9162 §2.1 hashing, perfect subtrees and compact ranges.

use sha2::{Digest, Sha256};

/// A SHA-256 output: a leaf, node or root hash.
pub type Hash = [u8; 32];

/// SHA-256(0x00 || data): the domain-separated hash of one leaf.
pub fn leaf_hash(data: &[u8]) -> Hash {
    Sha256::new()
        .chain_update([0u8])
        .chain_update(data)
        .finalize()
        .into()
}

/// SHA-256(0x01 || left || right): an interior node.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    Sha256::new()
        .chain_update([1u8])
        .chain_update(left)
        .chain_update(right)
        .finalize()
        .into()
}

/// MTH of zero leaves: SHA-256 of the empty string.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// `x * 2^level`, saturating at `u64::MAX` (only reached by nodes that lie
/// past any tree a u64 can size).
fn shl_sat(x: u64, level: u8) -> u64 {
    if level >= 64 {
        if x == 0 { 0 } else { u64::MAX }
    } else {
        x.saturating_mul(1u64 << level)
    }
}

/// A perfect, aligned subtree: leaves `[index << level, (index + 1) << level)`.
/// Level 0 is a single leaf. Real trees use levels up to 63.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    pub level: u8,
    pub index: u64,
}

impl NodeId {
    pub fn leaf(index: u64) -> NodeId {
        NodeId { level: 0, index }
    }

    /// The first leaf covered.
    pub fn start(self) -> u64 {
        shl_sat(self.index, self.level)
    }

    /// One past the last leaf covered (saturating at `u64::MAX`).
    pub fn end(self) -> u64 {
        shl_sat(self.index.saturating_add(1), self.level)
    }

    /// The subtree one level up that contains this one.
    pub fn parent(self) -> NodeId {
        NodeId {
            level: self.level.saturating_add(1),
            index: self.index >> 1,
        }
    }

    /// Left and right halves; `None` for a leaf (or a node whose children's
    /// indices would not fit a u64).
    pub fn children(self) -> Option<(NodeId, NodeId)> {
        let level = self.level.checked_sub(1)?;
        let left = self.index.checked_mul(2)?;
        let right = left.checked_add(1)?;
        Some((
            NodeId { level, index: left },
            NodeId {
                level,
                index: right,
            },
        ))
    }

    /// The other child of this node's parent.
    pub fn sibling(self) -> NodeId {
        NodeId {
            level: self.level,
            index: self.index ^ 1,
        }
    }

    /// Whether `leaf` lies under this node (exact, no saturation).
    pub fn contains(self, leaf: u64) -> bool {
        if self.level >= 64 {
            self.index == 0
        } else {
            leaf >> self.level == self.index
        }
    }
}

/// The unique minimal decomposition of `[start, end)` into aligned perfect
/// subtrees, left to right (empty when `start >= end`).
///
/// Greedy is minimal: each step takes the largest subtree that is aligned at
/// `start` and still fits, so levels first rise, then fall.
pub fn range_nodes(start: u64, end: u64) -> Vec<NodeId> {
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        // Both bounds are <= 63: `end - at >= 1`, and `at == 0` has 64
        // trailing zeros but is capped by the length.
        let fits = 63 - (end - at).leading_zeros();
        let level = at.trailing_zeros().min(fits);
        out.push(NodeId {
            level: level as u8,
            index: at >> level,
        });
        at += 1u64 << level;
    }
    out
}

/// Why a frontier could not be rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontierError {
    #[error("a frontier of size {size} holds {expected} hashes, not {got}")]
    WrongHashCount {
        size: u64,
        expected: usize,
        got: usize,
    },
    #[error("an encoded frontier is 8 bytes then whole hashes, not {len} bytes")]
    BadLength { len: usize },
}

/// A compact range over `[0, size)`: the hashes of `range_nodes(0, size)`,
/// left to right (one per set bit of `size`, highest level first).
///
/// Invariant: `hashes.len() == size.count_ones()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    hashes: Vec<Hash>,
}

impl Frontier {
    /// The empty tree.
    pub fn new() -> Frontier {
        Frontier::default()
    }

    /// A frontier from stored parts; the hashes are trusted to be the ones of
    /// `range_nodes(0, size)`, only their count is checked.
    pub fn from_parts(size: u64, hashes: Vec<Hash>) -> Result<Frontier, FrontierError> {
        let expected = size.count_ones() as usize;
        if hashes.len() != expected {
            return Err(FrontierError::WrongHashCount {
                size,
                expected,
                got: hashes.len(),
            });
        }
        Ok(Frontier { size, hashes })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn hashes(&self) -> &[Hash] {
        &self.hashes
    }

    /// The ids of [`hashes`](Self::hashes), in the same order.
    pub fn nodes(&self) -> Vec<NodeId> {
        range_nodes(0, self.size)
    }

    /// Appends one leaf hash, handing `completed` every perfect node this
    /// append completed: the leaf itself (level 0) first and then upward, so
    /// a caller can persist the levels it keeps. A callback, not a returned
    /// list: a group commit appends every leaf through here, and most
    /// callers keep none of the nodes.
    ///
    /// # Panics
    /// If the tree already holds `u64::MAX` leaves (2^64 appends: unreachable).
    pub fn push(&mut self, leaf: Hash, mut completed: impl FnMut(NodeId, Hash)) {
        let index = self.size;
        let mut hash = leaf;
        let mut level = 0u8;
        completed(NodeId::leaf(index), hash);
        // Each set low bit of the old size is a held left sibling of the same
        // level: merging them carries upward exactly as binary addition does.
        while (index >> level) & 1 == 1 {
            let Some(left) = self.hashes.pop() else {
                unreachable!("frontier holds one hash per set bit of its size")
            };
            hash = node_hash(&left, &hash);
            level += 1;
            completed(
                NodeId {
                    level,
                    index: index >> level,
                },
                hash,
            );
        }
        self.hashes.push(hash);
        self.size = index.checked_add(1).expect("a u64-sized tree is full");
    }

    /// RFC 9162 MTH of `[0, size)`: the held subtrees folded right to left.
    pub fn root(&self) -> Hash {
        fold_root(&self.hashes)
    }

    /// 8-byte big-endian size, then the hashes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + 32 * self.hashes.len());
        out.extend_from_slice(&self.size.to_be_bytes());
        for h in &self.hashes {
            out.extend_from_slice(h);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Frontier, FrontierError> {
        let bad = || FrontierError::BadLength { len: bytes.len() };
        let (size, rest) = bytes.split_first_chunk::<8>().ok_or_else(bad)?;
        let (chunks, tail) = rest.as_chunks::<32>();
        if !tail.is_empty() {
            return Err(bad());
        }
        Frontier::from_parts(u64::from_be_bytes(*size), chunks.to_vec())
    }
}

/// MTH from the hashes of a right-edge decomposition (levels falling left to
/// right): RFC 9162 splits at the largest power of two, which is exactly the
/// leftmost subtree, so MTH = node_hash(h_0, MTH(rest)).
pub(crate) fn fold_root(hashes: &[Hash]) -> Hash {
    match hashes.split_last() {
        None => empty_root(),
        Some((last, rest)) => rest.iter().rev().fold(*last, |acc, h| node_hash(h, &acc)),
    }
}
