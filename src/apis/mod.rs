//! Clusternet API types.
