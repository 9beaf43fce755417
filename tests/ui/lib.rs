//! Nothing to build: this package holds the compile-time tests of `#[job]` (`tests/macro_ui.rs`
//! with the cases in `pass/` and `fail/`) and of `jobqueue`'s exports (`tests/public_api.rs`
//! with the cases in `api/`).
