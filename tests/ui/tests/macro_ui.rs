//! Compile-time behaviour of `#[job]`: what it accepts, and the errors it gives for each
//! misuse (`fail/*.stderr` holds the expected messages).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("pass/*.rs");
    t.compile_fail("fail/*.rs");
}
