//! libFuzzer target `plugin_urls`: see `clusternet::fuzzing::plugin_urls` for the input layout and the
//! properties checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    clusternet::fuzzing::plugin_urls(data);
});
