//! Helpers shared by the CLI's integration tests (each test binary uses only some of them).
#![allow(dead_code)]

pub mod generate;
pub mod minilm;
pub mod profiled_train;
pub mod trainer_parity;
