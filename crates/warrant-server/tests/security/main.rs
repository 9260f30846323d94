//! Regression tests for the holes closed by the security pass: each module
//! drives a real server on 127.0.0.1 the way an attacker would (an operator
//! account, one person certificate, a page on another site, a slow client)
//! and asserts the refusal. `SECURITY.md` maps each threat to its test here.

#[path = "../common/mod.rs"]
mod common;

/// 5xx answers and printed configuration leak nothing.
mod errors;
/// CSRF, content types, cookies, slow clients and connection limits.
mod http;
/// Agent identity fields, PA narrowing, delegation lifetime, fail-closed
/// principal rows, check order and nonce reservations; operator certificates.
mod identity;
/// Login throttling, lockout and token lifetimes.
mod login;
/// Users, roles and tokens changed on one node, seen by another.
mod multinode;
/// Storage faults stop the write path.
mod storage;
