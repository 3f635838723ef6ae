//! The in-process hint bus between subsystems of one process.
//!
//! Hints only cut latency ("Subscription default/app was just bound: reconcile now"): everything
//! that matters goes through the API server, so a dropped hint costs a watch round-trip, never
//! correctness. The channel is bounded; a subscriber that lags simply misses old hints.

use tokio::sync::broadcast;

/// Something another subsystem may want to react to sooner than its watch would tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// The scheduler wrote bindingClusters for this Subscription.
    SubscriptionBound { namespace: String, name: String },
    /// A ManagedCluster's status or labels changed.
    ClusterChanged { namespace: String, name: String },
    /// A Description was (re)rendered.
    DescriptionRendered { namespace: String, name: String },
}

#[derive(Clone)]
pub struct Bus {
    tx: broadcast::Sender<Hint>,
}

impl Bus {
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Bus { tx }
    }

    /// Publishes without waiting; returns how many subscribers will see it.
    pub fn publish(&self, hint: Hint) -> usize {
        match self.tx.send(hint) {
            Ok(n) => {
                metrics::counter!("clusternet_bus_hints_total", "outcome" => "sent").increment(1);
                n
            }
            Err(_) => {
                metrics::counter!("clusternet_bus_hints_total", "outcome" => "no_subscriber")
                    .increment(1);
                0
            }
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Hint> {
        self.tx.subscribe()
    }
}

impl Default for Bus {
    fn default() -> Self {
        Bus::new(1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hints_reach_every_subscriber() {
        let bus = Bus::new(4);
        let mut a = bus.subscribe();
        let mut b = bus.subscribe();
        let hint = Hint::SubscriptionBound {
            namespace: "default".into(),
            name: "app".into(),
        };
        assert_eq!(bus.publish(hint.clone()), 2);
        assert_eq!(a.recv().await.ok(), Some(hint.clone()));
        assert_eq!(b.recv().await.ok(), Some(hint));
    }

    #[tokio::test]
    async fn a_lagging_subscriber_loses_old_hints_not_the_bus() {
        let bus = Bus::new(2);
        let mut slow = bus.subscribe();
        for i in 0..5 {
            bus.publish(Hint::ClusterChanged {
                namespace: "ns".into(),
                name: format!("c{i}"),
            });
        }
        assert!(matches!(
            slow.recv().await,
            Err(broadcast::error::RecvError::Lagged(3))
        ));
        assert!(matches!(slow.recv().await, Ok(Hint::ClusterChanged { name, .. }) if name == "c3"));
    }
}
