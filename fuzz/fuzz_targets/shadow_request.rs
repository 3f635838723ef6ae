//! libFuzzer target `shadow_request`: see `clusternet::fuzzing::shadow_request` for the input layout and the
//! properties checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    clusternet::fuzzing::shadow_request(data);
});
