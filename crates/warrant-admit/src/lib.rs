//! Admission: per request, whether the agent in front of a service may do
//! what it asks (`shared/spec/admit.md`). Pure decisions over inputs the
//! caller supplies (the credential, the method and path, the client address,
//! the time, the trust and revocation state); the `warrant admit` service and
//! the tower layer are the IO around it.

pub mod engine;
pub mod forwarded;
#[cfg(feature = "tower")]
pub mod layer;
pub mod live;
pub mod reason;
pub mod revocation;
pub mod rules;
mod token;
