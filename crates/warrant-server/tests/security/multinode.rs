//! See `main.rs`.

#[allow(unused_imports)]
use crate::common::*;
