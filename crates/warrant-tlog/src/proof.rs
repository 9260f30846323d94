//! RFC 9162 §2.1.3–2.1.4 inclusion and consistency proofs: building them
//! through a node accessor, and verifying them.
//!
//! Every proof element is MTH of some leaf range `[a, b)` of the tree. Left
//! ranges are perfect subtrees; a right-edge range may not be, and is then
//! folded from its perfect decomposition. So a builder only ever asks its
//! accessor for perfect nodes, and `*_nodes` lists exactly those, letting a
//! database-backed caller fetch them in one go first.

use crate::merkle::{Hash, NodeId, fold_root, node_hash, range_nodes};

/// Sizes or indices that make no proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("leaf {index} is not in a tree of size {size}")]
    IndexOutOfRange { index: u64, size: u64 },
    #[error("no consistency proof from size {from} to {to} (needs 0 < from <= to)")]
    BadSizes { from: u64, to: u64 },
}

/// A proof builder's failure: bad arguments, or the accessor's own error.
#[derive(Debug, thiserror::Error)]
pub enum ProofOrSourceError<E> {
    #[error(transparent)]
    Proof(#[from] ProofError),
    #[error("node source: {0}")]
    Source(#[source] E),
}

/// Why a proof was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("leaf {index} is not in a tree of size {size}")]
    IndexOutOfRange { index: u64, size: u64 },
    #[error("no consistency between size {from} and smaller size {to}")]
    BadSizes { from: u64, to: u64 },
    #[error("the proof has {got} hashes, {expected} expected")]
    WrongProofLength { expected: usize, got: usize },
    #[error("the proof leads to another root")]
    RootMismatch,
    #[error("the proof does not lead to the old root")]
    FromRootMismatch,
    #[error("the proof does not lead to the new root")]
    ToRootMismatch,
}

/// Largest power of two strictly below `n` (`n >= 2`): RFC 9162's split `k`.
fn split(n: u64) -> u64 {
    1 << (63 - (n - 1).leading_zeros())
}

/// The leaf ranges `PATH(index, D[size])` hashes, leaf's sibling first.
/// Requires `index < size`.
fn inclusion_ranges(index: u64, size: u64) -> Vec<(u64, u64)> {
    let (mut lo, mut hi) = (0, size);
    let mut out = Vec::new();
    // Invariant: lo <= index < hi, and [lo, hi) is a subtree of the RFC tree.
    while hi - lo > 1 {
        let mid = lo + split(hi - lo);
        if index < mid {
            out.push((mid, hi));
            hi = mid;
        } else {
            out.push((lo, mid));
            lo = mid;
        }
    }
    out.reverse();
    out
}

/// The leaf ranges `PROOF(from, D[to])` hashes, in proof order.
/// Requires `0 < from <= to` (equal sizes: none).
fn consistency_ranges(from: u64, to: u64) -> Vec<(u64, u64)> {
    let (mut lo, mut hi) = (0, to);
    // RFC 9162's SUBPROOF flag b: false once the recursion went right, when
    // the old tree's own subtree hash is no longer derivable by the verifier.
    let mut whole = true;
    let mut out = Vec::new();
    // Invariant: lo < from <= hi, so hi - lo >= 2 whenever from < hi.
    while from < hi {
        let mid = lo + split(hi - lo);
        if from <= mid {
            out.push((mid, hi));
            hi = mid;
        } else {
            out.push((lo, mid));
            lo = mid;
            whole = false;
        }
    }
    if !whole {
        out.push((lo, hi));
    }
    out.reverse();
    out
}

fn nodes_of(ranges: &[(u64, u64)]) -> Vec<NodeId> {
    ranges
        .iter()
        .flat_map(|&(a, b)| range_nodes(a, b))
        .collect()
}

fn range_hash<E>(
    (a, b): (u64, u64),
    get: &mut impl FnMut(NodeId) -> Result<Hash, E>,
) -> Result<Hash, E> {
    let hashes = range_nodes(a, b)
        .into_iter()
        .map(&mut *get)
        .collect::<Result<Vec<_>, E>>()?;
    Ok(fold_root(&hashes))
}

fn check_inclusion(index: u64, size: u64) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    Ok(())
}

fn check_consistency(from: u64, to: u64) -> Result<(), ProofError> {
    if from == 0 || from > to {
        return Err(ProofError::BadSizes { from, to });
    }
    Ok(())
}

/// The perfect nodes [`inclusion_proof`] asks for.
pub fn inclusion_nodes(index: u64, size: u64) -> Result<Vec<NodeId>, ProofError> {
    check_inclusion(index, size)?;
    Ok(nodes_of(&inclusion_ranges(index, size)))
}

/// The perfect nodes [`consistency_proof`] asks for.
pub fn consistency_nodes(from: u64, to: u64) -> Result<Vec<NodeId>, ProofError> {
    check_consistency(from, to)?;
    Ok(nodes_of(&consistency_ranges(from, to)))
}

/// The perfect nodes [`root_at`] asks for: `range_nodes(0, size)`.
pub fn root_nodes(size: u64) -> Vec<NodeId> {
    range_nodes(0, size)
}

/// RFC 9162 §2.1.3.1 `PATH(index, D[size])`, from the leaf's sibling upward.
pub fn inclusion_proof<E>(
    index: u64,
    size: u64,
    get: &mut impl FnMut(NodeId) -> Result<Hash, E>,
) -> Result<Vec<Hash>, ProofOrSourceError<E>> {
    check_inclusion(index, size)?;
    inclusion_ranges(index, size)
        .into_iter()
        .map(|r| range_hash(r, get).map_err(ProofOrSourceError::Source))
        .collect()
}

/// RFC 9162 §2.1.4.1 `PROOF(from, D[to])` for `0 < from <= to` (empty when
/// equal). `from == 0` is refused: there is nothing to prove.
pub fn consistency_proof<E>(
    from: u64,
    to: u64,
    get: &mut impl FnMut(NodeId) -> Result<Hash, E>,
) -> Result<Vec<Hash>, ProofOrSourceError<E>> {
    check_consistency(from, to)?;
    consistency_ranges(from, to)
        .into_iter()
        .map(|r| range_hash(r, get).map_err(ProofOrSourceError::Source))
        .collect()
}

/// `MTH(D[size])`; [`empty_root`](crate::empty_root) for size 0.
pub fn root_at<E>(size: u64, get: &mut impl FnMut(NodeId) -> Result<Hash, E>) -> Result<Hash, E> {
    range_hash((0, size), get)
}

/// RFC 9162 §2.1.3.2: checks that `leaf_hash` is leaf `index` of the tree of
/// `size` leaves whose root is `root`.
///
/// `size` and `root` must come trusted together (from a signed checkpoint):
/// where two sizes give the path the same shape (leaf 0 of 3 or of 4 leaves)
/// the proof alone does not tell them apart.
pub fn verify_inclusion(
    index: u64,
    size: u64,
    leaf_hash: &Hash,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), VerifyError> {
    if index >= size {
        return Err(VerifyError::IndexOutOfRange { index, size });
    }
    // The length is fixed by (index, size): checking it first names the
    // error, and leaves the RFC's `sn` checks as a guard only.
    let expected = inclusion_ranges(index, size).len();
    if proof.len() != expected {
        return Err(VerifyError::WrongProofLength {
            expected,
            got: proof.len(),
        });
    }
    let (mut fnode, mut snode) = (index, size - 1);
    let mut r = *leaf_hash;
    for p in proof {
        if fnode & 1 == 1 || fnode == snode {
            r = node_hash(p, &r);
            // Skip the levels where this node is a right-edge node with no
            // sibling (the tree's right edge is not perfect).
            while fnode & 1 == 0 && fnode != 0 {
                fnode >>= 1;
                snode >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    if snode != 0 || r != *root {
        return Err(VerifyError::RootMismatch);
    }
    Ok(())
}

/// RFC 9162 §2.1.4.2: checks that the tree of `to` leaves with root
/// `to_root` extends the tree of `from` leaves with root `from_root`.
///
/// `from == to` needs an empty proof and equal roots. `from == 0` needs an
/// empty proof and `from_root` equal to the empty tree's root: anything is
/// consistent with the empty tree, so there is nothing to prove.
pub fn verify_consistency(
    from: u64,
    to: u64,
    from_root: &Hash,
    to_root: &Hash,
    proof: &[Hash],
) -> Result<(), VerifyError> {
    if from > to {
        return Err(VerifyError::BadSizes { from, to });
    }
    let expected = if from == 0 || from == to {
        0
    } else {
        consistency_ranges(from, to).len()
    };
    if proof.len() != expected {
        return Err(VerifyError::WrongProofLength {
            expected,
            got: proof.len(),
        });
    }
    if from == 0 {
        if *from_root != crate::empty_root() {
            return Err(VerifyError::FromRootMismatch);
        }
        return Ok(());
    }
    if from == to {
        if from_root != to_root {
            return Err(VerifyError::RootMismatch);
        }
        return Ok(());
    }
    // When the old tree is a perfect subtree, the proof omits its hash (the
    // verifier has it) and the walk starts from it.
    let mut path = proof.iter();
    let first = if from.is_power_of_two() {
        *from_root
    } else {
        match path.next() {
            Some(h) => *h,
            None => return Err(VerifyError::WrongProofLength { expected, got: 0 }),
        }
    };
    let (mut fnode, mut snode) = (from - 1, to - 1);
    while fnode & 1 == 1 {
        fnode >>= 1;
        snode >>= 1;
    }
    let (mut fr, mut sr) = (first, first);
    for c in path {
        if snode == 0 {
            return Err(VerifyError::WrongProofLength {
                expected,
                got: proof.len(),
            });
        }
        if fnode & 1 == 1 || fnode == snode {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while fnode & 1 == 0 && fnode != 0 {
                fnode >>= 1;
                snode >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    if fr != *from_root {
        return Err(VerifyError::FromRootMismatch);
    }
    if sr != *to_root || snode != 0 {
        return Err(VerifyError::ToRootMismatch);
    }
    Ok(())
}
