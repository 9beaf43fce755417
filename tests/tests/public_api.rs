//! What `jobqueue` exports: every item meant for users resolves (`ui/api/pass`), and the
//! runtime's insides (the store and its protocol steps, the registry's plumbing, the test
//! server's own helpers) do not (`ui/api/fail`), whatever the runtime itself makes `pub`.

#[test]
fn public_api() {
    let t = trybuild::TestCases::new();
    t.pass("ui/api/pass/*.rs");
    t.compile_fail("ui/api/fail/*.rs");
}
