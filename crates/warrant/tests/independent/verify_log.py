#!/usr/bin/env python3
"""Independent ("third party") verifier of Warrant's transparency log.

Written from the specs only (RFC 9162 §2.1, C2SP signed-note, tlog-checkpoint),
sharing no code with the Rust side, so a bug mirrored in both cannot hide. No
networking: it reads HTTP responses the caller saved. Commands: selftest,
checkpoint, inclusion, consistency (see main). Exit 0 with "ok: ..." on stdout,
or exit 1 with "FAIL: ..." on stderr for any failure or malformed input.
"""
import argparse, base64, binascii, hashlib, json, random, re, sys

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

class Fail(Exception):
    """Any verification failure or malformed input; reported as one FAIL line."""

def check(cond, msg):
    if not cond:
        raise Fail(msg)

def b64(s, what, size=None):
    # Strict standard base64: a non-canonical encoding is a different string for
    # the same bytes, which a signed format must not allow.
    check(isinstance(s, str), f"{what}: not a string")
    try:
        raw = base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        raise Fail(f"{what}: bad base64")
    check(base64.b64encode(raw).decode() == s, f"{what}: non-canonical base64")
    check(size is None or len(raw) == size, f"{what}: want {size} bytes, got {len(raw)}")
    return raw

# ---- RFC 9162 §2.1 hashing and proof verification ---------------------------
def sha(b): return hashlib.sha256(b).digest()
def leaf_hash(leaf): return sha(b"\x00" + leaf)
def node_hash(l, r): return sha(b"\x01" + l + r)
EMPTY_ROOT = sha(b"")

def verify_inclusion(index, size, lhash, proof, root):
    """RFC 9162 §2.1.3.2, step by step."""
    if index >= size:                                   # step 1
        return False
    fn, sn, r = index, size - 1, lhash                  # steps 2-3
    for p in proof:                                     # step 4
        if sn == 0:                                     # 4a
            return False
        if fn & 1 or fn == sn:                          # 4b
            r = node_hash(p, r)
            while not (fn & 1 or fn == 0):              # only runs if LSB(fn) unset
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1                       # 4c
    return sn == 0 and r == root                        # step 5

def verify_consistency(first, second, first_root, second_root, proof):
    """RFC 9162 §2.1.4.2. The RFC covers 0 < first < second; the edges follow
    from the definitions: a tree is consistent with itself and with the empty
    tree, and the proof in both cases is empty."""
    if first > second:
        return False
    if first == second:
        return not proof and first_root == second_root
    if first == 0:
        return not proof and first_root == EMPTY_ROOT
    if not proof:                                       # step 1
        return False
    if first & (first - 1) == 0:                        # step 2: power of 2
        proof = [first_root] + list(proof)
    fn, sn = first - 1, second - 1                      # step 3
    while fn & 1:                                       # step 4
        fn, sn = fn >> 1, sn >> 1
    fr = sr = proof[0]                                  # step 5
    for c in proof[1:]:                                 # step 6
        if sn == 0:                                     # 6a
            return False
        if fn & 1 or fn == sn:                          # 6b
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not (fn & 1 or fn == 0):              # only runs if LSB(fn) unset
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1                       # 6c
    return fr == first_root and sr == second_root and sn == 0   # step 7

# ---- C2SP signed-note and tlog-checkpoint -----------------------------------
def parse_vkey(vkey):
    """'<name>+<hex key id>+<base64(0x01 || pubkey)>' -> (name, id, key)."""
    parts = vkey.split("+", 2)        # names cannot contain '+'; base64 can
    check(len(parts) == 3, "verifier key: want name+id+key")
    name, hexid, k = parts
    check(name and not re.search(r"\s", name), "verifier key: bad name")
    check(re.fullmatch(r"[0-9a-f]{8}", hexid), "verifier key: bad key id")
    raw = b64(k, "verifier key", 33)
    check(raw[0] == 1, "verifier key: not an Ed25519 key (type byte != 0x01)")
    keyid = sha(name.encode() + b"\n" + raw)[:4]
    check(keyid.hex() == hexid, "verifier key: key id does not match the key")
    return name, keyid, Ed25519PublicKey.from_public_bytes(raw[1:])

def verify_note(note, vkey):
    """Return the note text if a signature by vkey verifies over it."""
    name, keyid, pub = parse_vkey(vkey)
    s = note.decode("utf-8")          # UnicodeDecodeError -> FAIL via main
    check(not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", s), "note: control character")
    split = s.rfind("\n\n")           # the last blank line starts the signatures
    check(split >= 0, "note: no signature block")
    text, sigs = s[: split + 1], s[split + 2 :]
    check(sigs.endswith("\n"), "note: signature block must end with a newline")
    good = False
    for line in sigs[:-1].split("\n"):
        m = re.fullmatch(r"\u2014 (\S+) (\S+)", line)
        check(m, f"note: malformed signature line {line!r}")
        sig = b64(m.group(2), "note signature")
        check(len(sig) >= 5, "note: signature too short")
        if m.group(1) != name or sig[:4] != keyid:
            continue                  # someone else's (e.g. a witness cosignature)
        check(len(sig) == 68, "note: Ed25519 signature must be 64 bytes")
        try:
            pub.verify(sig[4:], text.encode())
        except InvalidSignature:
            raise Fail(f"note: signature by {name} does not verify")
        good = True
    check(good, f"note: no signature by {name}+{keyid.hex()}")
    return text

def parse_checkpoint(text):
    """Body: origin, decimal size, base64 root; further lines are extensions."""
    lines = text.split("\n")
    check(len(lines) >= 4, "checkpoint: want origin, size and root lines")
    origin, size, root = lines[:3]
    check(origin != "", "checkpoint: empty origin")
    check(re.fullmatch(r"0|[1-9][0-9]*", size), "checkpoint: bad tree size")
    return origin, int(size), b64(root, "checkpoint root", 32)

# ---- Warrant leaf format ------------------------------------------------------
TAG = b"warrant-log-v1"
FIELDS = {"cert": ["kind", "ca", "serial", "profile", "principal_uid", "agent_id",
                   "capabilities", "key_hash", "not_before", "not_after",
                   "created_at", "lineage_start", "issued_by"],
          "event": ["kind", "at_ms", "event", "actor", "principal_uid",
                    "agent_id", "ca", "serial", "detail"]}

def parse_leaf(leaf):
    check(leaf.startswith(TAG), "leaf: unknown tag")
    pos, out = len(TAG), []
    while pos < len(leaf):
        check(pos + 4 <= len(leaf), "leaf: truncated length")
        n = int.from_bytes(leaf[pos : pos + 4], "big")
        pos += 4
        check(pos + n <= len(leaf), "leaf: truncated field")
        out.append(leaf[pos : pos + n].decode("utf-8"))
        pos += n
    check(out and out[0] in FIELDS, "leaf: unknown kind")
    check(len(out) == len(FIELDS[out[0]]), f"leaf: wrong field count for {out[0]}")
    return dict(zip(FIELDS[out[0]], out))

# ---- input helpers ----------------------------------------------------------
def read(path):
    with open(path, "rb") as f:
        return f.read()

def signed_checkpoint(note, vkey):
    return parse_checkpoint(verify_note(note, vkey))

def field(obj, key, typ):
    check(isinstance(obj, dict) and key in obj, f"response: missing {key!r}")
    v = obj[key]
    # bool is an int in Python; a JSON true is not a tree size.
    check(isinstance(v, typ) and not isinstance(v, bool), f"response: bad {key!r}")
    check(not isinstance(v, int) or v >= 0, f"response: negative {key!r}")
    return v

def proof_list(resp):
    return [b64(p, "proof hash", 32) for p in field(resp, "proof", list)]

# ---- commands -----------------------------------------------------------------
def cmd_checkpoint(a):
    origin, size, root = signed_checkpoint(read(a.note), a.key)
    return f"checkpoint origin={origin} size={size} root={base64.b64encode(root).decode()}"

def cmd_inclusion(a):
    r = json.loads(read(a.response))
    origin, size, root = signed_checkpoint(field(r, "checkpoint", str).encode(), a.key)
    check(origin == field(r, "origin", str), "checkpoint origin != response origin")
    check(size == field(r, "size", int), "checkpoint size != response size")
    index = field(r, "index", int)
    leaf = b64(field(r, "leaf", str), "leaf")
    check(leaf_hash(leaf) == b64(field(r, "leaf_hash", str), "leaf_hash", 32),
          "leaf_hash is not the hash of leaf")
    e = parse_leaf(leaf)
    check(e["kind"] == "cert", "leaf is not a cert entry")
    cert = x509.load_pem_x509_certificate(read(a.cert_pem))
    serial = "%040X" % cert.serial_number
    check(e["serial"].upper() == serial, f"leaf serial {e['serial']} != certificate {serial}")
    spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    check(e["key_hash"] == hashlib.sha256(spki).hexdigest(), "leaf key_hash != certificate key")
    check(verify_inclusion(index, size, leaf_hash(leaf), proof_list(r), root),
          "inclusion proof does not verify")
    return f"serial {serial} included at index {index} of {origin} size {size}"

def cmd_consistency(a):
    o_origin, o_size, o_root = signed_checkpoint(read(a.old), a.key)
    r = json.loads(read(a.response))
    origin, size, root = signed_checkpoint(field(r, "checkpoint", str).encode(), a.key)
    check(o_origin == origin == field(r, "origin", str), "origins differ")
    check(field(r, "from", int) == o_size, "response from != old checkpoint size")
    check(field(r, "to", int) == size, "response to != new checkpoint size")
    check(verify_consistency(o_size, size, o_root, root, proof_list(r)),
          "consistency proof does not verify")
    return f"{origin} size {o_size} is consistent with size {size}"

# Naive reference definitions (RFC 9162 §2.1.1, §2.1.3.1, §2.1.4.1) for selftest.
def split_k(n):                       # largest power of two smaller than n (n > 1)
    return 1 << ((n - 1).bit_length() - 1)

def mth(d):
    if len(d) <= 1:
        return leaf_hash(d[0]) if d else EMPTY_ROOT
    k = split_k(len(d))
    return node_hash(mth(d[:k]), mth(d[k:]))

def path(m, d):
    if len(d) <= 1:
        return []
    k = split_k(len(d))
    return path(m, d[:k]) + [mth(d[k:])] if m < k else path(m - k, d[k:]) + [mth(d[:k])]

def subproof(m, d, b):
    if m == len(d):
        return [] if b else [mth(d)]
    k = split_k(len(d))
    if m <= k:
        return subproof(m, d[:k], b) + [mth(d[k:])]
    return subproof(m - k, d[k:], False) + [mth(d[:k])]

def expect(cond, *what):             # not `assert`: python -O would skip it
    if not cond: raise AssertionError(what or "expectation failed")

def rejects(fn, *args):              # the call must fail verification cleanly
    try:
        fn(*args)
    except Fail:
        return True
    return False

def flipped(proof, j):                # copy of proof with one bit of hash j flipped
    return proof[:j] + [bytes([proof[j][0] ^ 1]) + proof[j][1:]] + proof[j + 1 :]

def cmd_selftest(_):
    vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    note = ("If you think cryptography is the answer to your problem,\n"
            "then you don't know what your problem is.\n\n"
            "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n")
    verify_note(note.encode(), vkey)
    expect(rejects(verify_note, note.replace("answer", "anzwer").encode(), vkey), "text changed")
    expect(rejects(verify_note, note.replace("Neumann x", "Neumann2 x").encode(), vkey), "other signer")
    expect(rejects(parse_vkey, vkey.replace("c74f20a3", "c74f20a4")), "key id mismatch")
    expect(mth([]) == EMPTY_ROOT and EMPTY_ROOT.hex().startswith("e3b0c442"))
    rnd = random.Random(9162)         # fixed seed: failures are reproducible
    for n in range(1, 41):
        d = [rnd.randbytes(rnd.randrange(0, 40)) for _ in range(n)]
        root = mth(d)
        for m in range(n):
            p, lh = path(m, d), leaf_hash(d[m])
            expect(verify_inclusion(m, n, lh, p, root), (n, m))
            expect(not verify_inclusion(m, n, flipped([lh], 0)[0], p, root))
            expect(not verify_inclusion(m + n, n, lh, p, root))
            expect(not verify_inclusion(m, n, lh, p + [root], root))   # too long
            expect(not p or not verify_inclusion(m, n, lh, p[:-1], root))   # too short
            for j in range(len(p)):
                expect(not verify_inclusion(m, n, lh, flipped(p, j), root), (n, m, j))
        for m in range(0, n + 1):
            p, old = subproof(m, d, True) if m else [], mth(d[:m])
            expect(verify_consistency(m, n, old, root, p), (n, m))
            expect(not verify_consistency(m, n, flipped([old], 0)[0], root, p))
            expect(not verify_consistency(m, n, old, root, p + [root]))
            expect(not p or not verify_consistency(m, n, old, root, p[:-1]))
            for j in range(len(p)):
                expect(not verify_consistency(m, n, old, root, flipped(p, j)), (n, m, j))
    enc = lambda fs: TAG + b"".join(len(f).to_bytes(4, "big") + f for f in fs)
    cert = [b"cert"] + [b"x"] * 12
    expect(parse_leaf(enc(cert))["issued_by"] == "x")
    for bad in (enc(cert) + b"\0", enc(cert)[:-1], enc(cert[:-1]), b"warrant-log-v2" + enc(cert)[14:]):
        expect(rejects(parse_leaf, bad), "bad leaf accepted", bad)
    return "selftest passed (note test vector, proofs for trees of 1..40 leaves, leaf parsing)"

class Parser(argparse.ArgumentParser):
    def error(self, message): raise Fail(message)   # usage errors exit 1 too

def main():
    ap = Parser(description="Independent verifier of Warrant's transparency log")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("selftest").set_defaults(fn=cmd_selftest)
    for name, fn, files in (("checkpoint", cmd_checkpoint, ["--note"]),
                            ("inclusion", cmd_inclusion, ["--response", "--cert-pem"]),
                            ("consistency", cmd_consistency, ["--old", "--response"])):
        p = sub.add_parser(name)
        p.set_defaults(fn=fn)
        p.add_argument("--key", required=True)
        for f in files:
            p.add_argument(f, required=True)
    try:
        a = ap.parse_args()
        print("ok: " + a.fn(a))
        return 0
    except Fail as e:
        msg = str(e)
    except (OSError, ValueError) as e:   # unreadable file, bad JSON/PEM/UTF-8
        msg = f"malformed input: {e}"
    except AssertionError as e:          # selftest expectation not met
        msg = f"selftest: {e!r}"
    print(f"FAIL: {msg}", file=sys.stderr)
    return 1

if __name__ == "__main__":
    sys.exit(main())
