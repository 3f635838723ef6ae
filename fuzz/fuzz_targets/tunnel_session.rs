//! libFuzzer target `tunnel_session`: see `clusternet::fuzzing::tunnel_session` for the input layout and the
//! properties checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    clusternet::fuzzing::tunnel_session(data);
});
