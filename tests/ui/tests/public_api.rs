//! What `jobqueue` exports: every item meant for users resolves (`api/pass`), and the
//! runtime's insides (the store and its protocol steps, the registry's plumbing, the test
//! server's own helpers) do not (`api/fail`), whatever the runtime itself makes `pub`.

#[test]
fn public_api() {
    let t = trybuild::TestCases::new();
    t.pass("api/pass/*.rs");
    t.compile_fail("api/fail/*.rs");
}
