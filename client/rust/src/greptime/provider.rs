//! Where a region's WAL lives: the provider a datanode gives each write and read. walserver
//! serves Kafka providers; a Kafka topic is walserver's slot (topic, partition 0) when walserver
//! runs with the datanodes' topic names.

use std::fmt;
use std::sync::Arc;

use super::{LogStore, RegionId};

/// A Kafka topic, shared by the regions placed in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KafkaProvider {
    /// The topic's name.
    pub topic: String,
}

impl KafkaProvider {
    /// The provider of `topic`.
    pub fn new(topic: String) -> Self {
        Self { topic }
    }

    /// The provider kind's name.
    pub fn type_name() -> &'static str {
        "KafkaProvider"
    }
}

impl fmt::Display for KafkaProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.topic)
    }
}

/// A region's WAL in a local raft-engine store (not served by walserver).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RaftEngineProvider {
    /// The region's id as `u64`.
    pub id: u64,
}

impl RaftEngineProvider {
    /// The provider of region id `id`.
    pub fn new(id: u64) -> Self {
        Self { id }
    }

    /// The provider kind's name.
    pub fn type_name() -> &'static str {
        "RaftEngineProvider"
    }
}

/// Where a region's WAL lives. walserver serves `Kafka`; the others are refused with
/// `InvalidArgument`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Provider {
    /// A local raft-engine store.
    RaftEngine(RaftEngineProvider),
    /// A Kafka topic (walserver's slot of that topic, partition 0).
    Kafka(Arc<KafkaProvider>),
    /// No WAL.
    Noop,
}

impl Provider {
    /// The flushed entry id a region created from scratch starts with: for Kafka the topic's
    /// latest entry id (0 when it is not known), so that its replays skip what other regions
    /// wrote before it; 0 for the others.
    pub fn initial_flushed_entry_id<S: LogStore>(&self, wal: &S) -> u64 {
        match self {
            Provider::Kafka(_) => wal.latest_entry_id(self).unwrap_or(0),
            _ => 0,
        }
    }

    /// The raft-engine provider of region id `id`.
    pub fn raft_engine_provider(id: u64) -> Provider {
        Provider::RaftEngine(RaftEngineProvider { id })
    }

    /// The Kafka provider of `topic`.
    pub fn kafka_provider(topic: String) -> Provider {
        Provider::Kafka(Arc::new(KafkaProvider { topic }))
    }

    /// The provider of no WAL.
    pub fn noop_provider() -> Provider {
        Provider::Noop
    }

    /// Whether the WAL is remote (Kafka).
    pub fn is_remote_wal(&self) -> bool {
        matches!(self, Provider::Kafka(_))
    }

    /// The provider kind's name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Provider::RaftEngine(_) => RaftEngineProvider::type_name(),
            Provider::Kafka(_) => KafkaProvider::type_name(),
            Provider::Noop => "Noop",
        }
    }

    /// The raft-engine provider, if it is one.
    pub fn as_raft_engine_provider(&self) -> Option<&RaftEngineProvider> {
        match self {
            Provider::RaftEngine(p) => Some(p),
            _ => None,
        }
    }

    /// The Kafka provider, if it is one.
    pub fn as_kafka_provider(&self) -> Option<&Arc<KafkaProvider>> {
        match self {
            Provider::Kafka(p) => Some(p),
            _ => None,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::RaftEngine(p) => write!(f, "RaftEngine(region={})", RegionId::from_u64(p.id)),
            Provider::Kafka(p) => write!(f, "Kafka(topic={})", p.topic),
            Provider::Noop => write!(f, "Noop"),
        }
    }
}
