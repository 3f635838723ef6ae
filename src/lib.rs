//! clusternet: Clusternet, the multi-cluster Kubernetes manager, as one all-in-one operator binary.
#![forbid(unsafe_code)]

pub mod apis;
