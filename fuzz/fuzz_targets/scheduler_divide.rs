//! libFuzzer target `scheduler_divide`: see `clusternet::fuzzing::scheduler_divide` for the input layout and the
//! properties checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    clusternet::fuzzing::scheduler_divide(data);
});
