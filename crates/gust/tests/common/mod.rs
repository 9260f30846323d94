// Each test binary uses the parts it needs.
#[allow(dead_code)]
pub mod daemon;
#[allow(dead_code)]
pub mod nginx;
#[allow(dead_code)]
pub mod process;
