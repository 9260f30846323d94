//! Recomputing a tree from what the database holds, and holding it to
//! checkpoints saved elsewhere.
//!
//! A scan reads the tree block by block (2^8 leaves), recomputes each
//! block's hash from its rows (and, for leaves retention removed, from the
//! subtrees it kept), compares it with the hash the writer stored when the
//! block completed, and builds the levels above from the blocks, comparing
//! each with its stored node. Memory is one hash per block.
//!
//! Held to a checkpoint (size m, root R), what is wrong is named:
//! - **truncation**: the tree holds fewer than m leaves, or leaves are gone
//!   with no subtree kept for them;
//! - **a changed leaf**: rows no longer hash to what the writer recorded, or
//!   to R, and no signed checkpoint of the log agrees with them either;
//! - **a reordering**: swapping two leaves back makes them hash to what was
//!   recorded (searched among the leaves of the blocks that disagree);
//! - **a fork**: the rows agree with a checkpoint the log itself signed, yet
//!   differ from R: two different trees were signed for one size.

use std::collections::BTreeMap;

use warrant_tlog::{Hash, NodeId};

use super::{BLOCK, Block, LogError, TILE_LEVEL, TreeRow, low_hash};
use crate::error::StoreError;

/// What a verified tree looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeReport {
    pub tree: String,
    pub size: u64,
    pub root: Hash,
    /// Leaves still in the database.
    pub live_leaves: u64,
}

/// The first thing found wrong with a tree.
#[derive(Debug, thiserror::Error)]
pub enum LogBreak {
    #[error("tree {tree}: truncated: it holds {size} leaves, the checkpoint says {expected}")]
    Truncated {
        tree: String,
        size: u64,
        expected: u64,
    },
    #[error(
        "tree {tree}: truncated: leaves {start}..{end} are gone and no subtree was kept for them"
    )]
    Missing { tree: String, start: u64, end: u64 },
    #[error(
        "tree {tree}: a changed leaf: leaves {start}..{end} no longer hash to what the log recorded"
    )]
    ChangedLeaf { tree: String, start: u64, end: u64 },
    #[error(
        "tree {tree}: a changed leaf: at size {size} its leaves hash to {found}, the checkpoint says {expected}, and no checkpoint the log signed agrees with them"
    )]
    RootMismatch {
        tree: String,
        size: u64,
        found: String,
        expected: String,
    },
    #[error("tree {tree}: reordered: leaves {a} and {b} are swapped")]
    Reordered { tree: String, a: u64, b: u64 },
    #[error(
        "tree {tree}: a fork: at size {size} the log signed root {found}, the checkpoint says {expected}: two different trees for one size"
    )]
    Fork {
        tree: String,
        size: u64,
        found: String,
        expected: String,
    },
    #[error("tree {tree}: its recorded head (size {size}) does not match its leaves")]
    HeadMismatch { tree: String, size: u64 },
    #[error("tree {0} named in the checkpoint is not in the log (truncated)")]
    MissingTree(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<LogError> for LogBreak {
    fn from(e: LogError) -> LogBreak {
        match e {
            LogError::Store(s) => LogBreak::Store(s),
            other => LogBreak::Store(StoreError::Database(other.to_string())),
        }
    }
}

fn b64(h: &Hash) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(h)
}

/// Blocks kept in memory for the reordering search (their leaves).
const SUSPECT_BLOCKS: usize = 2;

/// The first pair of positions whose swap makes `matches` true, trying
/// every pair of `leaves` (positions are offsets into it).
fn find_swap(leaves: &mut [Hash], matches: &dyn Fn(&[Hash]) -> bool) -> Option<(usize, usize)> {
    for a in 0..leaves.len() {
        for b in a + 1..leaves.len() {
            if leaves[a] == leaves[b] {
                continue;
            }
            leaves.swap(a, b);
            let ok = matches(leaves);
            leaves.swap(a, b);
            if ok {
                return Some((a, b));
            }
        }
    }
    None
}

/// MTH of `leaves` placed at `start` (aligned perfect decomposition of
/// `[start, start + len)` folded with `prefix`, the perfect roots left of
/// `start`).
fn root_with(prefix: &[Hash], start: u64, leaves: &[Hash]) -> Hash {
    let end = start + leaves.len() as u64;
    let mut roots: Vec<Hash> = prefix.to_vec();
    for id in warrant_tlog::range_nodes(start, end) {
        roots.push(perfect(leaves, start, id));
    }
    fold(&roots)
}

fn perfect(leaves: &[Hash], base: u64, id: NodeId) -> Hash {
    match id.children() {
        None => leaves[(id.index - base) as usize],
        Some((l, r)) => {
            warrant_tlog::node_hash(&perfect(leaves, base, l), &perfect(leaves, base, r))
        }
    }
}

/// RFC 9162 root from the roots of the perfect subtrees covering
/// `[0, size)`, left to right.
fn fold(roots: &[Hash]) -> Hash {
    let mut it = roots.iter().rev();
    let Some(last) = it.next() else {
        return warrant_tlog::empty_root();
    };
    it.fold(*last, |acc, h| warrant_tlog::node_hash(h, &acc))
}

/// A scan's result: one hash per complete block (`None`: covered only by a
/// larger stored subtree), the partial block's leaves, and suspects.
struct Scan {
    blocks: Vec<Option<Hash>>,
    /// Complete blocks whose rows disagree with their stored hash: their
    /// index, leaf hashes (when all present) and the stored hash.
    suspects: Vec<(u64, Vec<Hash>, Hash)>,
    /// The last, incomplete block's data.
    tail: Block,
    live: u64,
}

impl super::Log {
    async fn scan(
        &self,
        tree: &TreeRow,
        archived: Option<&BTreeMap<u64, Hash>>,
    ) -> Result<Scan, LogBreak> {
        let name = &tree.name;
        let full_blocks = tree.size / BLOCK;
        let mut blocks = Vec::with_capacity(full_blocks as usize);
        let mut suspects = Vec::new();
        let mut live = 0u64;
        let mut first_changed: Option<u64> = None;
        // Stored block hashes, read a page at a time.
        let mut stored: BTreeMap<u64, Hash> = BTreeMap::new();
        const PAGE: u64 = 4096;
        let mut tail = Block::default();
        for b in 0..=full_blocks {
            let start = b * BLOCK;
            let end = (start + BLOCK).min(tree.size);
            if start >= end {
                break;
            }
            if b % PAGE == 0 {
                stored = self
                    .core
                    .log_nodes_at(tree.id, TILE_LEVEL, b, b + PAGE)
                    .await?
                    .into_iter()
                    .map(|(id, h)| (id.index, h))
                    .collect();
            }
            let leaves: BTreeMap<u64, Hash> = self
                .core
                .log_leaves(tree.id, start, end)
                .await?
                .into_iter()
                .map(|(i, e)| (i, e.hash()))
                .collect();
            live += leaves.len() as u64;
            let mut leaves = leaves;
            if let Some(arch) = archived {
                for (i, h) in arch.range(start..end) {
                    match leaves.get(i) {
                        Some(live) if live != h => {
                            return Err(LogBreak::ChangedLeaf {
                                tree: name.clone(),
                                start: *i,
                                end: *i + 1,
                            });
                        }
                        Some(_) => {}
                        None => {
                            leaves.insert(*i, *h);
                        }
                    }
                }
            }
            let complete_leaves = leaves.len() as u64 == end - start;
            let low = self
                .core
                .log_low_nodes(tree.id, start, start + BLOCK)
                .await?
                .into_iter()
                .collect();
            // With every leaf at hand (live or archived), the block is
            // recomputed from leaves alone, so archived leaves are held to
            // what the log recorded.
            let block = if complete_leaves {
                Block {
                    leaves,
                    low: Default::default(),
                }
            } else {
                Block { leaves, low }
            };
            if end - start < BLOCK {
                tail = block;
                break;
            }
            let id = NodeId {
                level: TILE_LEVEL,
                index: b,
            };
            let computed = low_hash(&block, id);
            match (computed, stored.get(&b)) {
                (Some(c), Some(s)) if c != *s => {
                    first_changed.get_or_insert(b);
                    if suspects.len() < SUSPECT_BLOCKS {
                        let all: Option<Vec<Hash>> = (start..end)
                            .map(|i| block.leaves.get(&i).copied())
                            .collect();
                        suspects.push((b, all.unwrap_or_default(), *s));
                    }
                    blocks.push(Some(*s));
                }
                (Some(c), _) => blocks.push(Some(c)),
                (None, Some(s)) if block.leaves.is_empty() => blocks.push(Some(*s)),
                (None, None) if block.leaves.is_empty() => blocks.push(None),
                (None, _) => {
                    let first_missing = (start..end)
                        .find(|i| !block.leaves.contains_key(i))
                        .unwrap_or(start);
                    return Err(LogBreak::Missing {
                        tree: name.clone(),
                        start: first_missing,
                        end,
                    });
                }
            }
        }
        if let Some(b) = first_changed {
            // A swapped pair inside (or across) the blocks that disagree.
            if let Some((a, bpos)) = swap_in_suspects(&mut suspects) {
                return Err(LogBreak::Reordered {
                    tree: name.clone(),
                    a,
                    b: bpos,
                });
            }
            return Err(LogBreak::ChangedLeaf {
                tree: name.clone(),
                start: b * BLOCK,
                end: (b + 1) * BLOCK,
            });
        }
        Ok(Scan {
            blocks,
            suspects,
            tail,
            live,
        })
    }

    /// The perfect roots of `[0, size)` from a scan (`size` ≤ the tree's).
    async fn roots_at(
        &self,
        tree: &TreeRow,
        scan: &Scan,
        size: u64,
    ) -> Result<Vec<Hash>, LogBreak> {
        let mut out = Vec::new();
        let tail_start = (tree.size / BLOCK) * BLOCK;
        for id in warrant_tlog::range_nodes(0, size) {
            out.push(self.node_from_scan(tree, scan, id, tail_start).await?);
        }
        Ok(out)
    }

    /// A perfect node from the scan's blocks, stored nodes above them, or
    /// (below the tile level) the block's rows.
    async fn node_from_scan(
        &self,
        tree: &TreeRow,
        scan: &Scan,
        id: NodeId,
        tail_start: u64,
    ) -> Result<Hash, LogBreak> {
        let missing = || LogBreak::Missing {
            tree: tree.name.clone(),
            start: id.start(),
            end: id.end(),
        };
        if id.level < TILE_LEVEL {
            let block = if id.start() >= tail_start {
                None
            } else {
                Some(id.start() / BLOCK)
            };
            let data = match block {
                None => return low_hash(&scan.tail, id).ok_or_else(missing),
                Some(b) => {
                    let start = b * BLOCK;
                    let leaves = self
                        .core
                        .log_leaves(tree.id, start, start + BLOCK)
                        .await?
                        .into_iter()
                        .map(|(i, e)| (i, e.hash()))
                        .collect();
                    let low = self
                        .core
                        .log_low_nodes(tree.id, start, start + BLOCK)
                        .await?
                        .into_iter()
                        .collect();
                    Block { leaves, low }
                }
            };
            return low_hash(&data, id).ok_or_else(missing);
        }
        // At or above the tile level: from the blocks under it.
        let (first, last) = (id.start() / BLOCK, id.end() / BLOCK);
        if let Some(h) = self.core.log_node(tree.id, id).await? {
            // Held to its blocks when they are all known.
            let blocks: Option<Vec<Hash>> = (first..last)
                .map(|b| scan.blocks.get(b as usize).copied().flatten())
                .collect();
            if let Some(blocks) = blocks {
                let computed = merkle_of_blocks(&blocks);
                if computed != h {
                    return Err(LogBreak::ChangedLeaf {
                        tree: tree.name.clone(),
                        start: id.start(),
                        end: id.end(),
                    });
                }
            }
            return Ok(h);
        }
        let blocks: Option<Vec<Hash>> = (first..last)
            .map(|b| scan.blocks.get(b as usize).copied().flatten())
            .collect();
        blocks.map(|b| merkle_of_blocks(&b)).ok_or_else(missing)
    }

    /// Names why the tree at `size` hashes to `found` instead of
    /// `expected`: a swapped pair among the leaves after the last complete
    /// block, a fork (the leaves agree with what the log itself signed), or
    /// a changed leaf.
    async fn classify(
        &self,
        tree: &TreeRow,
        scan: &Scan,
        size: u64,
        found: Hash,
        expected: &Hash,
        signed: Option<(u64, Hash)>,
    ) -> Result<LogBreak, LogBreak> {
        let tail_start = (tree.size / BLOCK) * BLOCK;
        if size > tail_start {
            let prefix = self.roots_at(tree, scan, tail_start).await?;
            let leaves: Option<Vec<Hash>> = (tail_start..size)
                .map(|i| scan.tail.leaves.get(&i).copied())
                .collect();
            if let Some(mut leaves) = leaves
                && let Some((a, b)) = find_swap(&mut leaves, &|l| {
                    root_with(&prefix, tail_start, l) == *expected
                })
            {
                return Ok(LogBreak::Reordered {
                    tree: tree.name.clone(),
                    a: tail_start + a as u64,
                    b: tail_start + b as u64,
                });
            }
        }
        if let Some((s, signed_root)) = signed
            && s >= size
            && fold(&self.roots_at(tree, scan, s).await?) == signed_root
        {
            return Ok(LogBreak::Fork {
                tree: tree.name.clone(),
                size,
                found: b64(&found),
                expected: b64(expected),
            });
        }
        Ok(LogBreak::RootMismatch {
            tree: tree.name.clone(),
            size,
            found: b64(&found),
            expected: b64(expected),
        })
    }

    /// Checks a tree end to end and, for each `(size, root)` of `held_to`
    /// (checkpoints saved elsewhere, their signatures already checked),
    /// that the tree at that size has that root. `signed`: the latest
    /// checkpoint the log itself signed for this tree (size, root), also
    /// already checked; it tells a fork from a changed leaf. `archived`:
    /// leaf hashes of this tree read from the retention archive, recomputed
    /// with the live ones where a block has them all.
    pub async fn verify_tree(
        &self,
        tree: &TreeRow,
        held_to: &[(u64, Hash)],
        signed: Option<(u64, Hash)>,
        archived: Option<&BTreeMap<u64, Hash>>,
    ) -> Result<TreeReport, LogBreak> {
        for (size, _) in held_to {
            if *size > tree.size {
                return Err(LogBreak::Truncated {
                    tree: tree.name.clone(),
                    size: tree.size,
                    expected: *size,
                });
            }
        }
        let scan = self.scan(tree, archived).await?;
        for (size, expected) in held_to {
            let found = fold(&self.roots_at(tree, &scan, *size).await?);
            if found != *expected {
                return Err(self
                    .classify(tree, &scan, *size, found, expected, signed)
                    .await?);
            }
        }
        let found = fold(&self.roots_at(tree, &scan, tree.size).await?);
        if found != tree.root {
            return Err(
                match self
                    .classify(tree, &scan, tree.size, found, &tree.root, None)
                    .await?
                {
                    LogBreak::RootMismatch { .. } => LogBreak::HeadMismatch {
                        tree: tree.name.clone(),
                        size: tree.size,
                    },
                    other => other,
                },
            );
        }
        if let Some((s, signed_root)) = signed
            && s <= tree.size
        {
            let found = fold(&self.roots_at(tree, &scan, s).await?);
            if found != signed_root {
                return Err(self
                    .classify(tree, &scan, s, found, &signed_root, None)
                    .await?);
            }
        }
        let _ = &scan.suspects;
        Ok(TreeReport {
            tree: tree.name.clone(),
            size: tree.size,
            root: tree.root,
            live_leaves: scan.live,
        })
    }
}

/// A perfect subtree's hash from its blocks' hashes (a power of two of
/// them).
fn merkle_of_blocks(blocks: &[Hash]) -> Hash {
    if blocks.len() == 1 {
        return blocks[0];
    }
    let (l, r) = blocks.split_at(blocks.len() / 2);
    warrant_tlog::node_hash(&merkle_of_blocks(l), &merkle_of_blocks(r))
}

/// Within the disagreeing blocks (leaf positions absolute), a swap that
/// makes every one of them hash to its stored value.
fn swap_in_suspects(suspects: &mut [(u64, Vec<Hash>, Hash)]) -> Option<(u64, u64)> {
    if suspects.iter().any(|(_, l, _)| l.len() as u64 != BLOCK) {
        return None;
    }
    let mut all: Vec<Hash> = suspects.iter().flat_map(|(_, l, _)| l.clone()).collect();
    let expected: Vec<Hash> = suspects.iter().map(|(_, _, h)| *h).collect();
    let index: Vec<u64> = suspects.iter().map(|(b, _, _)| *b).collect();
    let n = BLOCK as usize;
    let (a, b) = find_swap(&mut all, &|l| {
        expected
            .iter()
            .enumerate()
            .all(|(k, h)| root_with(&[], 0, &l[k * n..(k + 1) * n]) == *h)
    })?;
    let pos = |p: usize| index[p / n] * BLOCK + (p % n) as u64;
    Some((pos(a), pos(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: u64) -> Vec<Hash> {
        (0..n)
            .map(|i| warrant_tlog::leaf_hash(&i.to_be_bytes()))
            .collect()
    }

    #[test]
    fn root_with_matches_the_frontier() {
        for n in 1..40u64 {
            let l = leaves(n);
            let mut f = warrant_tlog::Frontier::new();
            for h in &l {
                f.push(*h, |_, _| {});
            }
            assert_eq!(root_with(&[], 0, &l), f.root());
        }
    }

    #[test]
    fn a_swapped_pair_is_found() {
        let mut l = leaves(20);
        let root = root_with(&[], 0, &l);
        l.swap(3, 11);
        assert_eq!(
            find_swap(&mut l, &|x| root_with(&[], 0, x) == root),
            Some((3, 11))
        );
    }
}
