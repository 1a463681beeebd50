//! weir end-to-end tests live in tests/tests/, benchmarks in tests/benches/. This library holds
//! what both use.

pub mod nexmark;
