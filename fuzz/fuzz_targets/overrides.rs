//! libFuzzer target `overrides`: see `clusternet::fuzzing::overrides` for the input layout and the
//! properties checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    clusternet::fuzzing::overrides(data);
});
