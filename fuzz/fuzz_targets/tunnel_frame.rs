//! libFuzzer target `tunnel_frame`: see `clusternet::fuzzing::tunnel_frame` for the input layout and the
//! properties checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    clusternet::fuzzing::tunnel_frame(data);
});
