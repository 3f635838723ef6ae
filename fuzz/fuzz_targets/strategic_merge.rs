//! libFuzzer target `strategic_merge`: see `clusternet::fuzzing::strategic_merge` for the input layout and the
//! properties checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    clusternet::fuzzing::strategic_merge(data);
});
