//! Runnable examples of jobqueue: see the `*.rs` files beside this crate and the README.
