//! The tree, proofs and verification against a reference written literally
//! from RFC 9162's recursive definitions over a list of leaves.

use std::convert::Infallible;

use proptest::prelude::*;

use crate::*;

// ---- reference (RFC 9162 §2.1.1, §2.1.3.1, §2.1.4.1) ----------------------

fn k_of(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

fn mth(d: &[Hash]) -> Hash {
    match d.len() {
        0 => empty_root(),
        1 => d[0],
        n => {
            let k = k_of(n);
            node_hash(&mth(&d[..k]), &mth(&d[k..]))
        }
    }
}

fn path(m: usize, d: &[Hash]) -> Vec<Hash> {
    let n = d.len();
    if n == 1 {
        return vec![];
    }
    let k = k_of(n);
    if m < k {
        let mut p = path(m, &d[..k]);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = path(m - k, &d[k..]);
        p.push(mth(&d[..k]));
        p
    }
}

fn subproof(m: usize, d: &[Hash], b: bool) -> Vec<Hash> {
    let n = d.len();
    if m == n {
        return if b { vec![] } else { vec![mth(d)] };
    }
    let k = k_of(n);
    if m <= k {
        let mut p = subproof(m, &d[..k], b);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = subproof(m - k, &d[k..], false);
        p.push(mth(&d[..k]));
        p
    }
}

fn leaves(n: u64) -> Vec<Hash> {
    (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
}

/// An accessor over in-memory leaves that answers perfect nodes only and
/// records what was asked.
fn getter<'a>(
    d: &'a [Hash],
    asked: &'a mut Vec<NodeId>,
) -> impl FnMut(NodeId) -> Result<Hash, Infallible> + 'a {
    move |id| {
        asked.push(id);
        let (s, e) = (id.start() as usize, id.end() as usize);
        assert!(e <= d.len(), "asked for {id:?} past the tree");
        Ok(mth(&d[s..e]))
    }
}

fn flip(h: &Hash, bit: usize) -> Hash {
    let mut h = *h;
    h[bit / 8] ^= 1 << (bit % 8);
    h
}

/// Builds and checks inclusion of `index` in the first `size` leaves of `d`
/// (which holds at least one more).
fn check_inclusion(d: &[Hash], index: u64, size: u64) {
    let t = &d[..size as usize];
    let root = mth(t);
    let mut asked = Vec::new();
    let proof = inclusion_proof(index, size, &mut getter(t, &mut asked)).unwrap();
    assert_eq!(proof, path(index as usize, t), "PATH({index}, {size})");
    assert_eq!(asked, inclusion_nodes(index, size).unwrap());

    let leaf = &t[index as usize];
    verify_inclusion(index, size, leaf, &proof, &root).unwrap();
    assert!(verify_inclusion(index, size, &flip(leaf, 3), &proof, &root).is_err());
    assert!(verify_inclusion(index, size, leaf, &proof, &flip(&root, 200)).is_err());
    for i in 0..proof.len() {
        let mut bad = proof.clone();
        bad[i] = flip(&bad[i], i * 7 % 256);
        assert!(verify_inclusion(index, size, leaf, &bad, &root).is_err());
    }
    if let Some((_, short)) = proof.split_last() {
        assert!(matches!(
            verify_inclusion(index, size, leaf, short, &root),
            Err(VerifyError::WrongProofLength { .. })
        ));
    }
    if size > 1 {
        let other = (index + 1) % size;
        assert!(verify_inclusion(other, size, leaf, &proof, &root).is_err());
    }
    // Another size, with that tree's root. (The same root with another size
    // can pass where both shapes agree, e.g. leaf 0 of 3 or of 4 leaves: the
    // signed checkpoint, not the proof, binds the size to the root.)
    let bigger = size as usize + 1;
    assert!(verify_inclusion(index, size + 1, leaf, &proof, &mth(&d[..bigger])).is_err());
    if size - 1 > index {
        let smaller = &d[..size as usize - 1];
        assert!(verify_inclusion(index, size - 1, leaf, &proof, &mth(smaller)).is_err());
    }
}

/// Builds and checks consistency from `from` to `to` leaves of `d` (which
/// holds at least one more).
fn check_consistency(d: &[Hash], from: u64, to: u64) {
    let (old, new) = (mth(&d[..from as usize]), mth(&d[..to as usize]));
    let t = &d[..to as usize];
    let mut asked = Vec::new();
    let proof = consistency_proof(from, to, &mut getter(t, &mut asked)).unwrap();
    assert_eq!(
        proof,
        subproof(from as usize, t, true),
        "PROOF({from}, {to})"
    );
    assert_eq!(asked, consistency_nodes(from, to).unwrap());

    verify_consistency(from, to, &old, &new, &proof).unwrap();
    assert!(verify_consistency(from, to, &flip(&old, 9), &new, &proof).is_err());
    assert!(verify_consistency(from, to, &old, &flip(&new, 9), &proof).is_err());
    for i in 0..proof.len() {
        let mut bad = proof.clone();
        bad[i] = flip(&bad[i], i * 5 % 256);
        assert!(verify_consistency(from, to, &old, &new, &bad).is_err());
    }
    if let Some((_, short)) = proof.split_last() {
        assert!(verify_consistency(from, to, &old, &new, short).is_err());
    }
    // Other sizes, with those trees' roots.
    let root = |n: u64| mth(&d[..n as usize]);
    if from < to {
        assert!(verify_consistency(from, to + 1, &old, &root(to + 1), &proof).is_err());
        assert!(verify_consistency(from + 1, to, &root(from + 1), &new, &proof).is_err());
        assert!(verify_consistency(from - 1, to, &root(from - 1), &new, &proof).is_err());
    }
}

// ---- exhaustive small trees -----------------------------------------------

#[test]
fn proofs_match_reference_for_every_size_to_70() {
    let d = leaves(71);
    for size in 1..=70 {
        for index in 0..size {
            check_inclusion(&d, index, size);
        }
        for from in 1..=size {
            check_consistency(&d, from, size);
        }
    }
}

#[test]
fn roots_match_reference() {
    let d = leaves(70);
    for size in 0..=70u64 {
        let mut asked = Vec::new();
        let t = &d[..size as usize];
        assert_eq!(root_at(size, &mut getter(t, &mut asked)).unwrap(), mth(t));
        assert_eq!(asked, root_nodes(size));
    }
    assert_eq!(
        hex::encode(empty_root()),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn frontier_push_roots_and_completed_nodes() {
    let d = leaves(70);
    let mut f = Frontier::new();
    assert_eq!(f.root(), empty_root());
    for (i, leaf) in d.iter().enumerate() {
        let mut done = Vec::new();
        f.push(*leaf, |id, h| done.push((id, h)));
        let size = i as u64 + 1;
        assert_eq!(f.size(), size);
        assert_eq!(f.root(), mth(&d[..=i]));
        // Completed now: the perfect nodes that end exactly at the new size.
        let want: Vec<NodeId> = (0..64)
            .take_while(|l| size.is_multiple_of(1 << l))
            .map(|l| NodeId {
                level: l,
                index: (size >> l) - 1,
            })
            .collect();
        let got: Vec<NodeId> = done.iter().map(|(id, _)| *id).collect();
        assert_eq!(got, want, "size {size}");
        for (id, h) in &done {
            assert_eq!(*h, mth(&d[id.start() as usize..id.end() as usize]));
        }
        assert_eq!(f.nodes(), root_nodes(size));
        for (id, h) in f.nodes().iter().zip(f.hashes()) {
            assert_eq!(*h, mth(&d[id.start() as usize..id.end() as usize]));
        }
    }
}

#[test]
fn frontier_encode_decode_round_trip() {
    let mut f = Frontier::new();
    assert_eq!(Frontier::decode(&f.encode()).unwrap(), f);
    for leaf in leaves(37) {
        f.push(leaf, |_, _| {});
        let bytes = f.encode();
        assert_eq!(bytes.len(), 8 + 32 * f.size().count_ones() as usize);
        assert_eq!(Frontier::decode(&bytes).unwrap(), f);
    }
    let bytes = f.encode();
    assert!(matches!(
        Frontier::decode(&bytes[..7]),
        Err(FrontierError::BadLength { len: 7 })
    ));
    assert!(matches!(
        Frontier::decode(&bytes[..bytes.len() - 1]),
        Err(FrontierError::BadLength { .. })
    ));
    assert!(matches!(
        Frontier::decode(&bytes[..bytes.len() - 32]),
        Err(FrontierError::WrongHashCount {
            size: 37,
            expected: 3,
            got: 2
        })
    ));
    assert!(Frontier::from_parts(3, vec![[0; 32]]).is_err());
    let rebuilt = Frontier::from_parts(f.size(), f.hashes().to_vec()).unwrap();
    assert_eq!(rebuilt.root(), f.root());
}

#[test]
fn builders_reject_bad_arguments_and_pass_source_errors() {
    let mut none = |_: NodeId| -> Result<Hash, &'static str> { Err("gone") };
    assert_eq!(
        inclusion_nodes(5, 5),
        Err(ProofError::IndexOutOfRange { index: 5, size: 5 })
    );
    assert!(matches!(
        inclusion_proof(0, 0, &mut none),
        Err(ProofOrSourceError::Proof(
            ProofError::IndexOutOfRange { .. }
        ))
    ));
    assert_eq!(
        consistency_nodes(0, 4),
        Err(ProofError::BadSizes { from: 0, to: 4 })
    );
    assert_eq!(
        consistency_nodes(5, 4),
        Err(ProofError::BadSizes { from: 5, to: 4 })
    );
    assert_eq!(consistency_nodes(4, 4), Ok(vec![]));
    assert_eq!(
        consistency_proof(4, 4, &mut none).unwrap(),
        Vec::<Hash>::new()
    );
    assert!(matches!(
        inclusion_proof(1, 5, &mut none),
        Err(ProofOrSourceError::Source("gone"))
    ));
    assert!(matches!(
        consistency_proof(3, 5, &mut none),
        Err(ProofOrSourceError::Source("gone"))
    ));
    assert_eq!(root_at(0, &mut none), Ok(empty_root()));
    assert_eq!(root_at(1, &mut none), Err("gone"));
    // A one-leaf tree's path is empty and asks for nothing.
    assert_eq!(
        inclusion_proof(0, 1, &mut none).unwrap(),
        Vec::<Hash>::new()
    );
}

#[test]
fn verify_edge_cases() {
    let (a, b) = (leaf_hash(b"a"), leaf_hash(b"b"));
    let e = empty_root();
    assert_eq!(
        verify_inclusion(2, 2, &a, &[], &a),
        Err(VerifyError::IndexOutOfRange { index: 2, size: 2 })
    );
    verify_inclusion(0, 1, &a, &[], &a).unwrap();
    assert_eq!(
        verify_inclusion(0, 1, &a, &[b], &a),
        Err(VerifyError::WrongProofLength {
            expected: 0,
            got: 1
        })
    );
    assert_eq!(
        verify_inclusion(0, 1, &a, &[], &b),
        Err(VerifyError::RootMismatch)
    );
    // Anything extends the empty tree; equal sizes need equal roots.
    verify_consistency(0, 9, &e, &b, &[]).unwrap();
    verify_consistency(0, 0, &e, &e, &[]).unwrap();
    assert_eq!(
        verify_consistency(0, 9, &a, &b, &[]),
        Err(VerifyError::FromRootMismatch)
    );
    assert_eq!(
        verify_consistency(0, 9, &e, &b, &[a]),
        Err(VerifyError::WrongProofLength {
            expected: 0,
            got: 1
        })
    );
    verify_consistency(3, 3, &a, &a, &[]).unwrap();
    assert_eq!(
        verify_consistency(3, 3, &a, &b, &[]),
        Err(VerifyError::RootMismatch)
    );
    assert_eq!(
        verify_consistency(3, 3, &a, &a, &[b]),
        Err(VerifyError::WrongProofLength {
            expected: 0,
            got: 1
        })
    );
    assert_eq!(
        verify_consistency(4, 3, &a, &b, &[]),
        Err(VerifyError::BadSizes { from: 4, to: 3 })
    );
    assert!(matches!(
        verify_consistency(3, 5, &a, &b, &[]),
        Err(VerifyError::WrongProofLength { .. })
    ));
}

// ---- node ids and ranges --------------------------------------------------

#[test]
fn node_id_geometry() {
    let n = NodeId { level: 3, index: 5 };
    assert_eq!((n.start(), n.end()), (40, 48));
    assert_eq!(n.parent(), NodeId { level: 4, index: 2 });
    assert_eq!(n.sibling(), NodeId { level: 3, index: 4 });
    assert_eq!(
        n.children(),
        Some((
            NodeId {
                level: 2,
                index: 10
            },
            NodeId {
                level: 2,
                index: 11
            }
        ))
    );
    assert_eq!(NodeId::leaf(7).children(), None);
    assert_eq!(NodeId::leaf(7).sibling(), NodeId::leaf(6));
    assert!(n.contains(40) && n.contains(47) && !n.contains(39) && !n.contains(48));
    // The largest levels saturate rather than overflow.
    let top = NodeId {
        level: 63,
        index: 1,
    };
    assert_eq!((top.start(), top.end()), (1 << 63, u64::MAX));
    assert!(top.contains(u64::MAX) && !top.contains(5));
    let far = NodeId {
        level: 10,
        index: u64::MAX,
    };
    assert_eq!((far.start(), far.end()), (u64::MAX, u64::MAX));
    assert_eq!(far.children(), None);
    // It lies wholly past the last u64 leaf, so holds none.
    assert!(!far.contains(u64::MAX));
}

/// Fewest aligned perfect blocks covering `[s, e)`, by dynamic programming
/// over every choice of block at every position.
fn min_blocks(s: u64, e: u64) -> usize {
    // fewest[p - s]: for [p, e).
    let mut fewest = vec![0usize; (e - s + 1) as usize];
    for p in (s..e).rev() {
        fewest[(p - s) as usize] = (0..64u32)
            .filter(|l| p.is_multiple_of(1 << l) && p + (1 << l) <= e)
            .map(|l| 1 + fewest[(p + (1 << l) - s) as usize])
            .min()
            .unwrap();
    }
    fewest[0]
}

fn assert_decomposition(s: u64, e: u64, nodes: &[NodeId]) {
    let mut at = s;
    for n in nodes {
        assert_eq!(n.start(), at, "contiguous and aligned");
        at = n.end();
    }
    assert_eq!(at, e.max(s), "covers [{s}, {e})");
    // Levels rise then fall, never merging: no two neighbours are siblings.
    for w in nodes.windows(2) {
        assert!(!(w[0].level == w[1].level && w[0].sibling() == w[1]));
    }
}

#[test]
fn range_nodes_cover_exactly_aligned_minimal() {
    for s in 0..=70u64 {
        for e in s..=70 {
            let nodes = range_nodes(s, e);
            assert_decomposition(s, e, &nodes);
            assert_eq!(nodes.len(), min_blocks(s, e), "[{s}, {e})");
        }
    }
    assert!(range_nodes(5, 3).is_empty());
    assert_eq!(range_nodes(0, 8), vec![NodeId { level: 3, index: 0 }]);
    assert_eq!(
        range_nodes(0, u64::MAX).len(),
        64,
        "2^64 - 1 has 64 set bits"
    );
}

// ---- properties for larger trees ------------------------------------------

fn sized_tree() -> impl Strategy<Value = (u64, u64, u64)> {
    (1u64..=5000).prop_flat_map(|n| (Just(n), 0..n, 1..=n))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn large_trees_match_reference((size, index, from) in sized_tree()) {
        let d = leaves(size + 1);
        check_inclusion(&d, index, size);
        check_consistency(&d, from, size);
    }

    #[test]
    fn frontier_root_matches_reference(size in 0u64..=5000) {
        let d = leaves(size);
        let mut f = Frontier::new();
        for leaf in &d {
            f.push(*leaf, |_, _| {});
        }
        prop_assert_eq!(f.root(), mth(&d));
        prop_assert_eq!(Frontier::decode(&f.encode()).unwrap(), f);
    }

    #[test]
    fn range_nodes_any_u64(a in any::<u64>(), b in any::<u64>()) {
        let (s, e) = (a.min(b), a.max(b));
        let nodes = range_nodes(s, e);
        assert_decomposition(s, e, &nodes);
        prop_assert!(nodes.len() <= 128);
    }
}
