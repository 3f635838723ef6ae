//! libFuzzer target `api_validation`: see `clusternet::fuzzing::api_validation` for the input layout and the
//! properties checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    clusternet::fuzzing::api_validation(data);
});
