//! The pure core of a transparency log, without IO:
//!
//! - [RFC 9162] §2.1 Merkle tree hashing, compact ranges ([`Frontier`]),
//!   inclusion and consistency proofs built through a node accessor, and
//!   their verification;
//! - [C2SP signed notes], [checkpoints] and Ed25519 [cosignatures].
//!
//! [RFC 9162]: https://www.rfc-editor.org/rfc/rfc9162.html
//! [C2SP signed notes]: https://c2sp.org/signed-note
//! [checkpoints]: https://c2sp.org/tlog-checkpoint
//! [cosignatures]: https://c2sp.org/tlog-cosignature
#![forbid(unsafe_code)]

mod checkpoint;
mod merkle;
mod note;
mod proof;

pub use checkpoint::{Checkpoint, CheckpointError, WitnessSigner, WitnessVerifier};
pub use merkle::{
    Frontier, FrontierError, Hash, NodeId, empty_root, leaf_hash, node_hash, range_nodes,
};
pub use note::{NoteError, NoteSignature, NoteSigner, NoteVerifier, SignedNote};
pub use proof::{
    ProofError, ProofOrSourceError, VerifyError, consistency_nodes, consistency_proof,
    inclusion_nodes, inclusion_proof, root_at, root_nodes, verify_consistency, verify_inclusion,
};

#[cfg(test)]
mod merkle_tests;
#[cfg(test)]
mod note_tests;
