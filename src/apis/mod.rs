//! Clusternet API types (placeholder until the typed APIs land).
pub mod known {
    pub const SYSTEM_NAMESPACE: &str = "clusternet-system";
    pub const RESERVED_NAMESPACE: &str = "clusternet-reserved";
    pub const FEATURE_GATES: &[&str] = &[
        "SocketConnection",
        "AppPusher",
        "Deployer",
        "ShadowAPI",
        "FeedInUseProtection",
        "Recovery",
        "FeedInventory",
        "Predictor",
        "MultiClusterService",
        "FailOver",
        "FeasibleClustersToleration",
        "ClusterInit",
    ];
}
