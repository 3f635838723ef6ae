//! Multi-cluster services (the SIG-Multicluster MCS API, gate MultiClusterService), both
//! halves: the agent's [`serviceexport`] copies the EndpointSlices of every exported Service in
//! its child into the cluster's dedicated namespace in the parent, and the parent's
//! [`serviceimport`] merges them for each ServiceImport into a derived Service and its slices,
//! which an ordinary Subscription takes to the consumer clusters. Names and labels are
//! upstream's, so either half works with Go Clusternet's other half.

pub mod serviceexport;
pub mod serviceimport;
