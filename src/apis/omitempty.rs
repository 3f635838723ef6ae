//! Go `encoding/json` `omitempty` predicates for `#[serde(skip_serializing_if = ...)]`.
//!
//! Clusternet's Go types decide key presence with `omitempty`; serde needs a function per zero
//! check, and these are shared by every API module so the rule reads the same everywhere.

// serde passes fields by reference, so these cannot take `Copy` values by value.
#![allow(clippy::trivially_copy_pass_by_ref)]

/// Go omits a `false` bool.
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// Go omits a zero int32.
pub(crate) fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

/// Go omits a zero int64 / int.
pub(crate) fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

/// Go omits a zero uint64.
pub(crate) fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Go omits a zero float32 (positive or negative zero).
pub(crate) fn is_zero_f32(n: &f32) -> bool {
    *n == 0.0
}
