//! The Warrant CA server: HTTP API, auth, configuration, metrics and the
//! issuance orchestration that ties the CA, AIC and store crates together.
//!
//! Handlers stay thin: they extract, call a domain function (`issuance`,
//! `policy`, `auth`), and map its error to an [`error::ApiError`].
#![forbid(unsafe_code)]

pub mod api;
pub mod audit;
pub mod auth;
pub mod clock;
pub mod config;
pub mod conn;
pub mod csrf;
pub mod error;
pub mod extract;
pub mod issuance;
pub mod key_life;
pub mod limits;
pub mod login;
pub mod metrics;
pub mod middleware;
pub mod ocsp;
pub mod periodic;
pub mod policy;
pub mod retention;
pub mod server;
pub mod state;
pub mod token;
pub mod transparency;

pub use config::{Config, LoadedConfig};
pub use error::{ApiError, ErrorBody, ErrorKey};
pub use server::{RunningServer, init_if_needed, start};
pub use state::{
    AppState, INIT_KEY_NAMES, InitKeys, InitReport, SharedState, StartError, init_data_dir,
    init_data_dir_with,
};
