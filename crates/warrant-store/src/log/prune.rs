//! What retention keeps of the leaves it removes.
//!
//! Invariant: for every tree, the stored nodes are (a) every complete
//! perfect subtree at or above [`TILE_LEVEL`] that still has a live leaf,
//! and (b) the largest perfect subtrees that have none. Then every sibling
//! on a live leaf's proof path is either recomputable (it has live leaves:
//! from rows below the tile level, stored above it) or is one of (b), so
//! every remaining leaf keeps its inclusion proof, and the stored nodes
//! stay proportional to the live leaves, not to the tree's history.
//!
//! [`Log::before_prune`] runs before rows are deleted (it needs their
//! hashes): inside each touched block it stores the largest subtrees that
//! the deletion leaves without a live leaf, and drops the smaller stored
//! ones they cover. [`Log::after_prune`] runs after: a block left without a
//! live leaf drops its nodes below the tile level (its block node covers
//! it), and going up, two sibling subtrees without a live leaf give way to
//! their parent. Both are idempotent: a crash between them, or between
//! them and the delete, leaves extra nodes, never a missing one.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use warrant_tlog::{Hash, NodeId};

use super::{BLOCK, Block, TILE_LEVEL, low_hash};
use crate::error::StoreError;

/// A leaf about to be removed: its tree, index and hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunedLeaf {
    pub tree: i64,
    pub index: u64,
    pub hash: Hash,
}

/// The largest perfect subtrees inside `[start, end)` (aligned, within
/// one block) that contain no index of `live`. `block_node`: the block's
/// own node when the block is complete (never returned: it is stored).
pub(crate) fn maximal_empty(start: u64, end: u64, live: &BTreeSet<u64>) -> Vec<NodeId> {
    fn walk(id: NodeId, live: &BTreeSet<u64>, out: &mut Vec<NodeId>) {
        if live.range(id.start()..id.end()).next().is_none() {
            out.push(id);
            return;
        }
        if let Some((l, r)) = id.children() {
            walk(l, live, out);
            walk(r, live, out);
        }
    }
    let mut out = Vec::new();
    for id in warrant_tlog::range_nodes(start, end) {
        walk(id, live, &mut out);
    }
    out
}

impl super::Log {
    /// Before `leaves` are deleted: keeps the subtrees their removal
    /// leaves without a live leaf (see the module comment).
    pub async fn before_prune(&self, leaves: &[PrunedLeaf]) -> Result<(), StoreError> {
        let mut by_block: BTreeMap<(i64, u64), Vec<&PrunedLeaf>> = BTreeMap::new();
        for l in leaves {
            by_block
                .entry((l.tree, l.index / BLOCK))
                .or_default()
                .push(l);
        }
        let mut sizes: HashMap<i64, u64> = HashMap::new();
        for ((tree, block), gone) in by_block {
            let size = match sizes.get(&tree) {
                Some(s) => *s,
                None => {
                    let Some(t) = self.core.log_tree_by_id(tree).await? else {
                        continue;
                    };
                    sizes.insert(tree, t.size);
                    t.size
                }
            };
            let start = block * BLOCK;
            let end = (start + BLOCK).min(size);
            if start >= end {
                continue;
            }
            let mut data = Block {
                leaves: self
                    .core
                    .log_leaves(tree, start, end)
                    .await?
                    .into_iter()
                    .map(|(i, e)| (i, e.hash()))
                    .collect(),
                low: self
                    .core
                    .log_low_nodes(tree, start, start + BLOCK)
                    .await?
                    .into_iter()
                    .collect(),
            };
            for l in &gone {
                data.leaves.insert(l.index, l.hash);
            }
            let gone: BTreeSet<u64> = gone.iter().map(|l| l.index).collect();
            let live_after: BTreeSet<u64> = data
                .leaves
                .keys()
                .copied()
                .filter(|i| !gone.contains(i))
                .collect();
            let complete = end - start == BLOCK;
            let mut put = Vec::new();
            for id in maximal_empty(start, end, &live_after) {
                if complete && id.level == TILE_LEVEL {
                    continue; // the block's node is stored already
                }
                if data.low.contains_key(&id) {
                    continue;
                }
                match low_hash(&data, id) {
                    Some(h) => put.push((id, h)),
                    None => tracing::warn!(
                        tree,
                        level = id.level,
                        index = id.index,
                        "log: a subtree's leaves are already gone; its hash cannot be kept"
                    ),
                }
            }
            // Stored nodes now covered by a larger kept one.
            let covers: Vec<NodeId> = put.iter().map(|(id, _)| *id).collect();
            let remove: Vec<NodeId> = data
                .low
                .keys()
                .copied()
                .filter(|n| {
                    (complete && live_after.is_empty())
                        || covers.iter().any(|c| {
                            c.level > n.level && c.start() <= n.start() && n.end() <= c.end()
                        })
                })
                .collect();
            self.core.log_replace_nodes(tree, &put, &remove).await?;
        }
        Ok(())
    }

    /// After the rows of `leaves` are deleted: blocks left without a live
    /// leaf drop their low nodes, and stored subtrees without a live leaf
    /// give way to their parent when it has none either.
    pub async fn after_prune(&self, leaves: &[PrunedLeaf]) -> Result<(), StoreError> {
        let blocks: BTreeSet<(i64, u64)> =
            leaves.iter().map(|l| (l.tree, l.index / BLOCK)).collect();
        let mut sizes: HashMap<i64, u64> = HashMap::new();
        let mut done: BTreeSet<(i64, NodeId)> = BTreeSet::new();
        for (tree, block) in blocks {
            let size = match sizes.get(&tree) {
                Some(s) => *s,
                None => {
                    let Some(t) = self.core.log_tree_by_id(tree).await? else {
                        continue;
                    };
                    sizes.insert(tree, t.size);
                    t.size
                }
            };
            let mut node = NodeId {
                level: TILE_LEVEL,
                index: block,
            };
            if node.end() > size
                || self
                    .core
                    .log_any_live(tree, node.start(), node.end())
                    .await?
            {
                continue;
            }
            let low: Vec<NodeId> = self
                .core
                .log_low_nodes(tree, node.start(), node.end())
                .await?
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            self.core.log_replace_nodes(tree, &[], &low).await?;
            loop {
                let parent = node.parent();
                if parent.end() > size
                    || !done.insert((tree, parent))
                    || self
                        .core
                        .log_any_live(tree, parent.start(), parent.end())
                        .await?
                {
                    break;
                }
                // The parent is stored (complete, at or above the tile
                // level) and now the largest empty subtree here.
                if self.core.log_node(tree, parent).await?.is_none() {
                    break;
                }
                let Some((l, r)) = parent.children() else {
                    break;
                };
                self.core.log_replace_nodes(tree, &[], &[l, r]).await?;
                node = parent;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_empty_subtrees_cover_exactly_the_gaps() {
        let live: BTreeSet<u64> = [3, 9].into_iter().collect();
        let got = maximal_empty(0, 16, &live);
        let covered: BTreeSet<u64> = got.iter().flat_map(|n| n.start()..n.end()).collect();
        let expected: BTreeSet<u64> = (0..16).filter(|i| !live.contains(i)).collect();
        assert_eq!(covered, expected);
        // Maximal: no two returned siblings (they would merge).
        for n in &got {
            assert!(!got.contains(&n.sibling()) || n.level == 4);
        }
        assert_eq!(
            maximal_empty(0, 16, &BTreeSet::new()),
            vec![NodeId { level: 4, index: 0 }]
        );
        // A partial block: its perfect pieces.
        assert_eq!(maximal_empty(0, 3, &BTreeSet::new()).len(), 2);
    }
}
