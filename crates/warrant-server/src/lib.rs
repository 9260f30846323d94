//! The Warrant CA server: HTTP API, auth, configuration, metrics and the
//! issuance orchestration that ties the CA, AIC and store crates together.
//!
//! Handlers stay thin: they extract, call a domain function (`issuance`,
//! `policy`, `auth`), and map its error to an [`error::ApiError`].

pub mod auth;
pub mod config;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod policy;
