//! `sqlx::migrate!` embeds the files of `migrations/mysql/` and `migrations/postgres/` at
//! compile time: a new file there must rebuild the crate.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=migrations/mysql");
    println!("cargo:rerun-if-changed=migrations/postgres");
}
