//! The log store of GreptimeDB's datanodes (`store_api::logstore` at commit 7fd0a7bb9877), by
//! the letter, on walserver: the same trait, types, methods and ids, so that a datanode swaps
//! its `KafkaLogStore` for [`WalserverLogStore`] by changing imports and one constructor.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use futures_util::StreamExt;
//! use walclient::greptime::{LogStore, Provider, RegionId, WalserverLogStore};
//! use walclient::{Client, ClientOptions};
//!
//! let client = Client::connect(ClientOptions::new("unix:///run/walserver.sock")).await?;
//! let store = WalserverLogStore::new(client);
//! let provider = Provider::kafka_provider("greptimedb_wal_topic_0".to_string());
//! let region = RegionId::new(1024, 0);
//! let flushed = provider.initial_flushed_entry_id(&store); // a new region: the topic's last id
//! let entry = store.entry(b"put a 1".to_vec(), 0, region, &provider)?;
//! let written = store.append_batch(vec![entry]).await?; // the region is placed in the topic
//! let mut replay = store.read(&provider, flushed + 1, None).await?; // every region of the topic
//! while let Some(entries) = replay.next().await {
//!     for entry in entries? {
//!         if entry.region_id() == region { /* apply it */ }
//!     }
//! }
//! store.obsolete(&provider, region, written.last_entry_ids[&region]).await?; // flushed
//! # Ok(())
//! # }
//! ```
//!
//! # walserver underneath
//!
//! - A `Provider::Kafka(topic)` is walserver's slot (topic, partition 0): run walserver with the
//!   datanodes' topic names (`--topic_prefix=greptimedb_wal_topic --topic_count=64
//!   --partitions_per_topic=1`). A region is walserver's namespace of the same `u64`, created
//!   in its provider's topic by its first append there; appended or obsoleted under another
//!   provider, it is refused (`FailedPrecondition`): a region never moves.
//! - Entry ids are Kafka offsets of the topic, as theirs are: `append_batch` returns the ids
//!   reads give, also after a retried append (walserver writes a retried entry once).
//!   `latest_entry_id` is the topic's last offset, kept fresh in the background. An empty topic
//!   starts with a record that is no region's, so a new region's flushed id (the topic's last
//!   offset) never stands for an entry of it.
//! - `read` is one call for the whole topic, from an offset (walserver's `ReadMany` of a slot):
//!   each region from that offset or from its first entry if that is higher, up to the topic's
//!   end as the read began. A region whose entries past the start are gone from Kafka although
//!   it never obsoleted them fails the stream with `DataLoss`. The `WalIndex` is not needed:
//!   walserver's own index of the topic skips what no region of the read has there.
//! - `obsolete` makes a region's entries up to the id unreadable and prunable (walserver
//!   prunes a topic below what every region still needs); `obsolete_all` deletes the region.
//!   Both are safe to repeat.
//! - Entries of any size up to walserver's limit are stored whole, so `entry` builds
//!   `Entry::Naive` and reads return it; `append_batch` takes batches of any size and sends
//!   them in requests of [`WalserverLogStore::with_max_request_bytes`], each region's entries
//!   in order.
//! - Errors are [`Error`]: walserver's gRPC code and message, and whether retrying may help.
//!   `RaftEngine` and `Noop` providers are refused with `InvalidArgument`.

mod entry;
mod error;
mod provider;
mod region_id;
mod store;

use std::collections::HashMap;
use std::pin::Pin;

use futures_util::Stream;

pub use entry::{Entry, Id, MultiplePartEntry, MultiplePartHeader, NaiveEntry};
pub use error::{Error, Result};
pub use provider::{KafkaProvider, Provider, RaftEngineProvider};
pub use region_id::{RegionGroup, RegionId, RegionNumber, RegionSeq, TableId, MAX_REGION_SEQ};
pub use store::WalserverLogStore;

/// An entry id (the Kafka offset of the entry's first record in its topic).
pub type EntryId = Id;

/// The stream a read returns: batches of entries, or the error that ended it.
pub type SendableEntryStream<'a, I, E> =
    Pin<Box<dyn Stream<Item = std::result::Result<Vec<I>, E>> + Send + 'a>>;

/// Where a region's entries lie in a topic, for a log store that keeps such an index; walserver
/// keeps its own, and takes this for the trait's sake only.
#[derive(Debug, Clone, Copy)]
pub struct WalIndex {
    /// The region.
    pub region_id: RegionId,
    /// Where the index is kept.
    pub location_id: u64,
}

impl WalIndex {
    /// The index of `region_id` kept at `location_id`.
    pub fn new(region_id: RegionId, location_id: u64) -> Self {
        Self { region_id, location_id }
    }
}

/// What one append gave.
#[derive(Debug, Default)]
pub struct AppendResponse {
    /// The id of the entry written.
    pub last_entry_id: EntryId,
}

/// What `append_batch` gave.
#[derive(Debug, Default)]
pub struct AppendBatchResponse {
    /// Per region of the batch: the id of its last entry written.
    pub last_entry_ids: HashMap<RegionId, EntryId>,
}

/// A datanode's WAL: regions' entries kept per provider.
#[async_trait::async_trait]
pub trait LogStore: Send + Sync + 'static + std::fmt::Debug {
    /// The error of every call.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Stops the log store's background work.
    async fn stop(&self) -> std::result::Result<(), Self::Error>;

    /// Appends entries of any regions; per region, the id of its last entry written.
    async fn append_batch(
        &self,
        entries: Vec<Entry>,
    ) -> std::result::Result<AppendBatchResponse, Self::Error>;

    /// Every region's entries of the provider with id >= `id`, up to its end as the read began.
    async fn read(
        &self,
        provider: &Provider,
        id: EntryId,
        index: Option<WalIndex>,
    ) -> std::result::Result<SendableEntryStream<'static, Entry, Self::Error>, Self::Error>;

    /// Makes the provider ready for regions.
    async fn create_namespace(&self, ns: &Provider) -> std::result::Result<(), Self::Error>;

    /// Drops the provider.
    async fn delete_namespace(&self, ns: &Provider) -> std::result::Result<(), Self::Error>;

    /// The providers in use.
    async fn list_namespaces(&self) -> std::result::Result<Vec<Provider>, Self::Error>;

    /// The region's entries with id <= `entry_id` are no longer needed; they go later.
    async fn obsolete(
        &self,
        provider: &Provider,
        region_id: RegionId,
        entry_id: EntryId,
    ) -> std::result::Result<(), Self::Error>;

    /// Every entry of the region is no longer needed, nor the region.
    async fn obsolete_all(
        &self,
        provider: &Provider,
        region_id: RegionId,
    ) -> std::result::Result<(), Self::Error>;

    /// Builds an entry to append.
    fn entry(
        &self,
        data: Vec<u8>,
        entry_id: EntryId,
        region_id: RegionId,
        provider: &Provider,
    ) -> std::result::Result<Entry, Self::Error>;

    /// The provider's latest entry id (0 when none is known).
    fn latest_entry_id(&self, provider: &Provider) -> std::result::Result<EntryId, Self::Error>;
}
