//! `warrant aic …` and `warrant aic-jwt …`: interop debugging tools.

use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum AicCommand {}

#[derive(Subcommand)]
pub enum AicJwtCommand {}

pub fn run_aic(cmd: AicCommand) -> ExitCode {
    match cmd {}
}

pub fn run_aic_jwt(cmd: AicJwtCommand) -> ExitCode {
    match cmd {}
}
