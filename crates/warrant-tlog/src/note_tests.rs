//! Signed notes, key strings, checkpoints and cosignatures.

use crate::*;

// The example of Go's golang.org/x/mod/sumdb/note documentation.
const GO_VKEY: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
const GO_SKEY: &str =
    "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
const GO_TEXT: &str = "If you think cryptography is the answer to your problem,\n\
                       then you don't know what your problem is.\n";
const GO_NOTE: &str = "If you think cryptography is the answer to your problem,\n\
                       then you don't know what your problem is.\n\
                       \n\
                       \u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";

const SIG: &str = "\u{2014} ";

fn log_key() -> NoteSigner {
    NoteSigner::from_seed("example.com/log", [7; 32]).unwrap()
}

fn witness_key() -> WitnessSigner {
    WitnessSigner::from_seed("witness.example/w1", [9; 32]).unwrap()
}

fn checkpoint() -> Checkpoint {
    Checkpoint {
        origin: "example.com/log".into(),
        size: 20852163,
        root: [0xab; 32],
        extensions: vec![],
    }
}

fn parse_err(note: &str) -> NoteError {
    SignedNote::parse(note).unwrap_err()
}

// ---- the Go vector ---------------------------------------------------------

#[test]
fn go_vector_verifies_and_reproduces() {
    let signer = NoteSigner::from_private_key_string(GO_SKEY).unwrap();
    assert_eq!(signer.verifier_key(), GO_VKEY);
    assert_eq!(signer.private_key_string(), GO_SKEY);
    assert_eq!(signer.name(), "PeterNeumann");
    assert_eq!(hex::encode(signer.key_id()), "c74f20a3");
    // Ed25519 is deterministic: the same key signs the same text identically.
    assert_eq!(signer.sign(GO_TEXT).unwrap(), GO_NOTE);

    let note = SignedNote::parse(GO_NOTE).unwrap();
    assert_eq!(note.text, GO_TEXT);
    assert_eq!(note.to_string(), GO_NOTE);
    let verifier = NoteVerifier::parse(GO_VKEY).unwrap();
    assert_eq!(verifier.key_id(), signer.key_id());
    verifier.verify(&note).unwrap();
}

// ---- notes -----------------------------------------------------------------

#[test]
fn sign_parse_verify_round_trip() {
    let signer = NoteSigner::generate("example.com/x").unwrap();
    let again = NoteSigner::from_private_key_string(&signer.private_key_string()).unwrap();
    assert_eq!(again.verifier_key(), signer.verifier_key());
    let verifier = NoteVerifier::parse(&signer.verifier_key()).unwrap();
    assert_eq!(verifier.name(), "example.com/x");

    // The text may hold blank lines: the last one separates.
    let text = "hello\n\nworld\n";
    let signed = signer.sign(text).unwrap();
    let note = SignedNote::parse(&signed).unwrap();
    assert_eq!(note.text, text);
    assert_eq!(note.to_string(), signed);
    verifier.verify(&note).unwrap();
}

#[test]
fn other_keys_are_ignored_and_all_matching_lines_must_verify() {
    let (a, b) = (log_key(), NoteSigner::from_seed("other", [1; 32]).unwrap());
    let va = NoteVerifier::parse(&a.verifier_key()).unwrap();
    let vb = NoteVerifier::parse(&b.verifier_key()).unwrap();
    let mut note = SignedNote::parse(&a.sign("t\n").unwrap()).unwrap();
    assert!(matches!(
        vb.verify(&note),
        Err(NoteError::NoMatchingSignature { .. })
    ));
    let b_line = SignedNote::parse(&b.sign("t\n").unwrap())
        .unwrap()
        .signatures[0]
        .to_string();
    note.add_signature_line(&b_line).unwrap();
    va.verify(&note).unwrap();
    vb.verify(&note).unwrap();
    // A line with a's name and another id is someone else's: ignored.
    let mut stranger = note.signatures[1].clone();
    stranger.name = a.name().into();
    note.signatures.push(stranger);
    va.verify(&note).unwrap();
    // A second line with a's name and id that does not verify fails the note.
    let mut forged = note.signatures[0].clone();
    forged.signature[0] ^= 1;
    note.signatures.push(forged);
    assert!(matches!(
        va.verify(&note),
        Err(NoteError::BadSignature { .. })
    ));
}

#[test]
fn tampered_text_fails() {
    let signer = log_key();
    let signed = signer.sign("a\nb\n").unwrap().replacen('b', "c", 1);
    let note = SignedNote::parse(&signed).unwrap();
    let v = NoteVerifier::parse(&signer.verifier_key()).unwrap();
    assert!(matches!(
        v.verify(&note),
        Err(NoteError::BadSignature { .. })
    ));
}

#[test]
fn add_signature_line_with_or_without_newline() {
    let mut note = SignedNote::parse(GO_NOTE).unwrap();
    let line = note.signatures[0].to_string();
    note.add_signature_line(&format!("{line}\n")).unwrap();
    note.add_signature_line(&line).unwrap();
    assert_eq!(note.signatures.len(), 3);
    assert_eq!(SignedNote::parse(&note.to_string()).unwrap(), note);
    assert_eq!(
        note.add_signature_line("- x AAAAAAA="),
        Err(NoteError::BadSignatureLine)
    );
    while note.signatures.len() < 100 {
        note.add_signature_line(&line).unwrap();
    }
    assert_eq!(
        note.add_signature_line(&line),
        Err(NoteError::TooManySignatures)
    );
}

#[test]
fn rejects_too_large() {
    let note = format!("{}\n\n{SIG}k AAAAAAA=\n", "a".repeat(1 << 20));
    assert_eq!(parse_err(&note), NoteError::TooLarge);
}

#[test]
fn rejects_too_many_signatures() {
    let line = SignedNote::parse(GO_NOTE).unwrap().signatures[0].to_string();
    let note = format!("{GO_TEXT}\n{}", format!("{line}\n").repeat(101));
    assert_eq!(parse_err(&note), NoteError::TooManySignatures);
    let ok = format!("{GO_TEXT}\n{}", format!("{line}\n").repeat(100));
    assert_eq!(SignedNote::parse(&ok).unwrap().signatures.len(), 100);
}

#[test]
fn rejects_control_character() {
    let note = GO_NOTE.replacen("If", "I\tf", 1);
    assert_eq!(parse_err(&note), NoteError::ControlCharacter);
    assert_eq!(
        parse_err(&GO_NOTE.replace('\n', "\r\n")),
        NoteError::ControlCharacter
    );
}

#[test]
fn rejects_missing_final_newline() {
    assert_eq!(
        parse_err(GO_NOTE.trim_end_matches('\n')),
        NoteError::NoFinalNewline
    );
}

#[test]
fn rejects_missing_blank_line() {
    let note = GO_NOTE.replacen("\n\n", "\n", 1);
    assert_eq!(parse_err(&note), NoteError::NoBlankLine);
}

#[test]
fn rejects_no_signatures() {
    assert_eq!(parse_err(GO_TEXT), NoteError::NoBlankLine);
    assert_eq!(parse_err(&format!("{GO_TEXT}\n")), NoteError::NoSignatures);
    // A trailing blank line leaves the signature block empty.
    assert_eq!(parse_err(&format!("{GO_NOTE}\n")), NoteError::NoSignatures);
}

#[test]
fn rejects_malformed_signature_line() {
    for line in [
        "- PeterNeumann AAAAAAA=",       // hyphen, not em dash
        "\u{2014}PeterNeumann AAAAAAA=", // no space after the dash
        "\u{2014} PeterNeumann",         // no signature
        "\u{2014} PeterNeumann ",        // empty signature
    ] {
        let note = format!("t\n\n{line}\n");
        assert_eq!(parse_err(&note), NoteError::BadSignatureLine, "{line}");
    }
}

#[test]
fn rejects_bad_key_name() {
    for name in ["", "a+b", "a\u{a0}b"] {
        let note = format!("t\n\n{SIG}{name} AAAAAAA=\n");
        assert_eq!(parse_err(&note), NoteError::BadKeyName, "{name:?}");
    }
    assert_eq!(
        NoteSigner::generate("a b").unwrap_err(),
        NoteError::BadKeyName
    );
    assert_eq!(
        WitnessSigner::from_seed("a+b", [0; 32]).unwrap_err(),
        NoteError::BadKeyName
    );
}

#[test]
fn rejects_bad_base64() {
    for b64 in ["AAAAAAA", "AAAA AAA=", "AAAAAAB=", "AAAA*AA="] {
        let note = format!("t\n\n{SIG}k {b64}\n");
        assert_eq!(parse_err(&note), NoteError::BadBase64, "{b64:?}");
    }
}

#[test]
fn rejects_short_signature() {
    // 4 bytes: a key id and no signature.
    assert_eq!(
        parse_err(&format!("t\n\n{SIG}k AAAAAA==\n")),
        NoteError::ShortSignature
    );
    SignedNote::parse(&format!("t\n\n{SIG}k AAAAAAA=\n")).unwrap();
}

#[test]
fn rejects_text_without_final_newline_when_signing() {
    let s = log_key();
    assert_eq!(s.sign("no newline"), Err(NoteError::NoFinalNewline));
    assert_eq!(s.sign(""), Err(NoteError::EmptyText));
    assert_eq!(s.sign("a\u{7}\n"), Err(NoteError::ControlCharacter));
}

#[test]
fn rejects_bad_key_strings() {
    let vkey = log_key().verifier_key();
    let skey = log_key().private_key_string();
    let bad = |s: &str| NoteVerifier::parse(s).unwrap_err();
    assert_eq!(bad("nameonly"), NoteError::BadKeyString);
    assert_eq!(bad(&vkey.replacen("+", "+0", 1)), NoteError::BadKeyString);
    assert_eq!(bad(&format!("{vkey}=")), NoteError::BadBase64);
    assert!(matches!(
        bad(&vkey.replacen("example.com/log", "example.com/lag", 1)),
        NoteError::KeyIdMismatch { .. }
    ));
    // The seed's string is no verifier key (same shape, wrong role)...
    assert!(NoteVerifier::parse(skey.trim_start_matches("PRIVATE+KEY+")).is_err());
    // ...and a private key needs its prefix.
    assert_eq!(
        NoteSigner::from_private_key_string(&vkey).unwrap_err(),
        NoteError::BadKeyString
    );
    let wrong_id = skey.replacen(&hex::encode(log_key().key_id()), "00000000", 1);
    assert!(matches!(
        NoteSigner::from_private_key_string(&wrong_id),
        Err(NoteError::KeyIdMismatch { .. })
    ));
}

#[test]
fn rejects_wrong_key_type() {
    let w = witness_key();
    assert_eq!(
        NoteVerifier::parse(&w.verifier_key()).unwrap_err(),
        NoteError::WrongKeyType { got: 4, want: 1 }
    );
    assert_eq!(
        WitnessVerifier::parse(&log_key().verifier_key()).unwrap_err(),
        NoteError::WrongKeyType { got: 1, want: 4 }
    );
    assert_eq!(
        NoteSigner::from_private_key_string(&w.private_key_string()).unwrap_err(),
        NoteError::WrongKeyType { got: 4, want: 1 }
    );
}

// ---- checkpoints -----------------------------------------------------------

#[test]
fn checkpoint_text_round_trip() {
    let mut cp = checkpoint();
    let text = cp.text();
    assert_eq!(
        text,
        "example.com/log\n20852163\nq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=\n"
    );
    assert_eq!(Checkpoint::from_text(&text).unwrap(), cp);
    cp.extensions = vec!["ext one".into(), "ext two".into()];
    cp.size = 0;
    assert_eq!(Checkpoint::from_text(&cp.text()).unwrap(), cp);
}

#[test]
fn checkpoint_sign_and_open() {
    let (log, cp) = (log_key(), checkpoint());
    let note = cp.sign(&log).unwrap();
    let v = NoteVerifier::parse(&log.verifier_key()).unwrap();
    assert_eq!(Checkpoint::open(&note, &v).unwrap(), cp);
    let other =
        NoteVerifier::parse(&NoteSigner::from_seed("x", [2; 32]).unwrap().verifier_key()).unwrap();
    assert!(matches!(
        Checkpoint::open(&note, &other),
        Err(CheckpointError::Note(NoteError::NoMatchingSignature { .. }))
    ));
    let mut bad = cp.clone();
    bad.origin = "two\nlines".into();
    assert_eq!(bad.sign(&log), Err(CheckpointError::Unrepresentable));
    bad.origin = String::new();
    assert_eq!(bad.sign(&log), Err(CheckpointError::EmptyOrigin));
}

#[test]
fn c2sp_example_checkpoint_parses() {
    let note = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n\
                \u{2014} example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n\
                \u{2014} witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n";
    let n = SignedNote::parse(note).unwrap();
    assert_eq!(n.to_string(), note);
    let cp = Checkpoint::from_text(&n.text).unwrap();
    assert_eq!(
        (cp.origin.as_str(), cp.size),
        ("example.com/behind-the-sofa", 20852163)
    );
    // The cosignature payload: 8-byte timestamp (the spec's 1679315147), then
    // a 64-byte Ed25519 signature.
    let cosig = &n.signatures[1].signature;
    assert_eq!(cosig.len(), 72);
    assert_eq!(
        u64::from_be_bytes(cosig[..8].try_into().unwrap()),
        1679315147
    );
}

fn cp_err(text: &str) -> CheckpointError {
    Checkpoint::from_text(text).unwrap_err()
}

#[test]
fn rejects_checkpoint_without_final_newline() {
    assert_eq!(
        cp_err(checkpoint().text().trim_end()),
        CheckpointError::NoFinalNewline
    );
    assert_eq!(cp_err(""), CheckpointError::NoFinalNewline);
}

#[test]
fn rejects_checkpoint_too_few_lines() {
    assert_eq!(cp_err("origin\n5\n"), CheckpointError::TooFewLines);
}

#[test]
fn rejects_checkpoint_empty_origin() {
    let text = checkpoint().text().replacen("example.com/log", "", 1);
    assert_eq!(cp_err(&text), CheckpointError::EmptyOrigin);
}

#[test]
fn rejects_checkpoint_bad_size() {
    for size in [
        "",
        "01",
        "00",
        "+5",
        "-1",
        "1e3",
        " 5",
        "18446744073709551616",
    ] {
        let text = checkpoint().text().replacen("20852163", size, 1);
        assert_eq!(cp_err(&text), CheckpointError::BadSize, "{size:?}");
    }
    let max = checkpoint()
        .text()
        .replacen("20852163", "18446744073709551615", 1);
    assert_eq!(Checkpoint::from_text(&max).unwrap().size, u64::MAX);
}

#[test]
fn rejects_checkpoint_bad_root() {
    let short = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [1u8; 31]);
    let good = checkpoint().text();
    let root_line = good.lines().nth(2).unwrap();
    for root in [
        short.as_str(),
        "not base64!",
        "",
        &root_line[..root_line.len() - 1],
    ] {
        let text = good.replacen(root_line, root, 1);
        assert_eq!(cp_err(&text), CheckpointError::BadRoot, "{root:?}");
    }
}

#[test]
fn rejects_checkpoint_empty_extension() {
    let text = format!("{}ext\n\nmore\n", checkpoint().text());
    assert_eq!(cp_err(&text), CheckpointError::EmptyExtension);
}

#[test]
fn rejects_checkpoint_control_character() {
    let text = checkpoint().text().replacen("example", "exa\u{1}mple", 1);
    assert_eq!(cp_err(&text), CheckpointError::ControlCharacter);
}

// ---- cosignatures ----------------------------------------------------------

fn cosigned() -> (String, NoteVerifier, WitnessVerifier) {
    let (log, w) = (log_key(), witness_key());
    let mut note = SignedNote::parse(&checkpoint().sign(&log).unwrap()).unwrap();
    let line = w.cosign(&note.text, 1_679_315_147).unwrap();
    assert!(line.starts_with(SIG) && line.ends_with('\n'));
    note.add_signature_line(&line).unwrap();
    (
        note.to_string(),
        NoteVerifier::parse(&log.verifier_key()).unwrap(),
        WitnessVerifier::parse(&w.verifier_key()).unwrap(),
    )
}

#[test]
fn cosigned_checkpoint_verifies_with_both_keys() {
    let (note, log, witness) = cosigned();
    assert_eq!(Checkpoint::open(&note, &log).unwrap(), checkpoint());
    let parsed = SignedNote::parse(&note).unwrap();
    assert_eq!(witness.verify(&parsed), Ok(1_679_315_147));
    assert_eq!(witness.name(), "witness.example/w1");
    assert_eq!(witness.key_id(), witness_key().key_id());
    let sig = &parsed.signatures[1];
    assert_eq!(sig.signature.len(), 72);
    let w = witness_key();
    assert_eq!(
        WitnessSigner::from_private_key_string(&w.private_key_string())
            .unwrap()
            .verifier_key(),
        w.verifier_key()
    );
}

#[test]
fn keys_do_not_accept_each_others_signatures() {
    // Same name and seed, different type byte: different key ids.
    let log = NoteSigner::from_seed("same", [5; 32]).unwrap();
    let wit = WitnessSigner::from_seed("same", [5; 32]).unwrap();
    assert_ne!(log.key_id(), wit.key_id());
    let (lv, wv) = (
        NoteVerifier::parse(&log.verifier_key()).unwrap(),
        WitnessVerifier::parse(&wit.verifier_key()).unwrap(),
    );
    let text = checkpoint().text();
    let only_log = SignedNote::parse(&log.sign(&text).unwrap()).unwrap();
    let only_wit =
        SignedNote::parse(&format!("{text}\n{}", wit.cosign(&text, 1).unwrap())).unwrap();
    assert!(matches!(
        wv.verify(&only_log),
        Err(NoteError::NoMatchingSignature { .. })
    ));
    assert!(matches!(
        lv.verify(&only_wit),
        Err(NoteError::NoMatchingSignature { .. })
    ));
    // Relabelled with the other key's id, the signature itself fails.
    let mut as_log = only_wit.clone();
    as_log.signatures[0].key_id = log.key_id();
    assert!(matches!(
        lv.verify(&as_log),
        Err(NoteError::BadSignature { .. })
    ));
    let mut as_wit = only_log.clone();
    as_wit.signatures[0].key_id = wit.key_id();
    assert!(matches!(
        wv.verify(&as_wit),
        Err(NoteError::BadSignature { .. })
    ));
}

#[test]
fn tampered_size_fails_both_signatures() {
    let (note, log, witness) = cosigned();
    let tampered = note.replacen("20852163", "20852164", 1);
    assert!(matches!(
        Checkpoint::open(&tampered, &log),
        Err(CheckpointError::Note(NoteError::BadSignature { .. }))
    ));
    let parsed = SignedNote::parse(&tampered).unwrap();
    assert!(matches!(
        witness.verify(&parsed),
        Err(NoteError::BadSignature { .. })
    ));
}

#[test]
fn rejects_cosigning_non_checkpoints_and_bad_timestamps() {
    let w = witness_key();
    assert_eq!(
        w.cosign("just text\n", 1),
        Err(CheckpointError::TooFewLines)
    );
    assert_eq!(
        w.cosign(&checkpoint().text(), 1 << 63),
        Err(CheckpointError::Note(NoteError::BadTimestamp))
    );
    // A timestamp past 2^63 - 1 in a received cosignature is refused too.
    let (note, _, witness) = cosigned();
    let mut parsed = SignedNote::parse(&note).unwrap();
    parsed.signatures[1].signature[0] = 0x80;
    assert_eq!(witness.verify(&parsed), Err(NoteError::BadTimestamp));
    parsed.signatures[1].signature.truncate(7);
    assert!(matches!(
        witness.verify(&parsed),
        Err(NoteError::BadSignature { .. })
    ));
}
