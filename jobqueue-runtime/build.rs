//! `sqlx::migrate!` embeds the files of `migrations/` at compile time: a new file there must
//! rebuild the crate.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
