//! A log store shaped like the one a Rust datanode keeps its regions' WAL behind (append a
//! batch of several regions, read a region from an id, create, delete and list them, mark a
//! prefix obsolete, ask for the latest id), mapped onto walserver. One namespace per region.
//!
//! ```no_run
//! # async fn run() -> Result<(), walclient::Status> {
//! use walclient::log_store::{LogEntry, LogStore};
//! use walclient::{Client, ClientOptions};
//!
//! let store = LogStore::new(Client::connect(ClientOptions::new("unix:///run/walserver.sock")).await?);
//! store.create_namespace(7).await?;
//! store.open_for_write(7).await?; // fence any writer this region had before
//! let last = store
//!     .append_batch(vec![LogEntry::new(7, "put a 1"), LogEntry::new(8, "put b 2")])
//!     .await?;
//! store.obsolete(7, last[&7]).await?; // flushed: entries up to and including it may go
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;

use crate::proto::{AppendRequest, Entry, Namespace};
use crate::read::{ReadOptions, ReadStream};
use crate::{Client, Code, Status};

/// One entry of [`LogStore::append_batch`]: data for one region's namespace.
#[derive(Clone, Debug)]
pub struct LogEntry {
    /// The region's namespace.
    pub namespace_id: u64,
    /// The entry, as the datanode encoded it.
    pub data: Bytes,
}

impl LogEntry {
    /// An entry of `namespace_id`.
    pub fn new(namespace_id: u64, data: impl Into<Bytes>) -> Self {
        LogEntry { namespace_id, data: data.into() }
    }
}

/// A datanode's WAL on walserver. Thread-safe; share it behind an `Arc`.
pub struct LogStore {
    client: Client,
    /// Per namespace: the highest id this store appended, or learnt from walserver.
    latest: Mutex<HashMap<u64, u64>>,
}

impl LogStore {
    /// A store on `client`.
    pub fn new(client: Client) -> Self {
        LogStore { client, latest: Mutex::new(HashMap::new()) }
    }

    /// The client underneath, for calls the store does not wrap.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Creates a region's namespace. Idempotent: an existing one is returned as it is.
    pub async fn create_namespace(&self, namespace_id: u64) -> Result<Namespace, Status> {
        Ok(self.client.create_namespace(namespace_id).await?.namespace)
    }

    /// Makes this store the region's only writer (a new epoch): a datanode that opens a region
    /// for writing calls it before replaying, so that the region's previous owner can no longer
    /// append (`FailedPrecondition`) and what it still writes is not read.
    pub async fn open_for_write(&self, namespace_id: u64) -> Result<u64, Status> {
        // Another writer may have appended since this store last did.
        self.forget(namespace_id);
        Ok(self.client.acquire_namespace(namespace_id).await?.epoch)
    }

    fn forget(&self, namespace_id: u64) {
        self.latest.lock().unwrap().remove(&namespace_id);
    }

    /// Appends entries of any number of regions in one request and returns, per region, the id
    /// of its last entry in the batch, once Kafka acknowledged all of them. Each region's
    /// entries keep their order. Errors as [`Client::append`]; on an error some entries may be
    /// durable, and appending them again is safe only through [`Client::append`]'s own retries.
    pub async fn append_batch(&self, entries: Vec<LogEntry>) -> Result<HashMap<u64, u64>, Status> {
        let namespaces: Vec<u64> = entries.iter().map(|e| e.namespace_id).collect();
        let request = AppendRequest {
            entries: entries
                .into_iter()
                .map(|e| Entry { namespace_id: e.namespace_id, data: e.data, ..Default::default() })
                .collect(),
            writer_id: 0,
        };
        let ids = match self.client.append(request).await {
            Ok(ids) => ids,
            Err(status) => {
                if status.code() == Code::FailedPrecondition {
                    // Fenced: another writer owns these regions now and appends past our ids.
                    for namespace_id in &namespaces {
                        self.forget(*namespace_id);
                    }
                }
                return Err(status);
            }
        };
        let mut last = HashMap::new();
        for (namespace_id, id) in namespaces.into_iter().zip(ids) {
            let slot = last.entry(namespace_id).or_insert(id);
            *slot = (*slot).max(id);
        }
        let mut latest = self.latest.lock().unwrap();
        for (namespace_id, id) in &last {
            let known = latest.entry(*namespace_id).or_insert(*id);
            *known = (*known).max(*id);
        }
        Ok(last)
    }

    /// A region's entries with id >= `start_entry_id` (0: from the first readable one), in id
    /// order, up to its end as seen when the read began. See [`Client::read`].
    pub fn read(&self, namespace_id: u64, start_entry_id: u64) -> ReadStream {
        self.client.read(ReadOptions { start_entry_id, ..ReadOptions::new(namespace_id) })
    }

    /// Deletes a region's namespace; its records become prunable. Not retried.
    pub async fn delete_namespace(&self, namespace_id: u64) -> Result<(), Status> {
        self.client.delete_namespace(namespace_id).await?;
        self.latest.lock().unwrap().remove(&namespace_id);
        Ok(())
    }

    /// Every live namespace, in id order.
    pub async fn list_namespaces(&self) -> Result<Vec<Namespace>, Status> {
        self.client.list_namespaces().await
    }

    /// The region flushed everything up to and including `entry_id`: those entries become
    /// unreadable and walserver may prune them from Kafka (a truncation at `entry_id + 1`).
    /// Monotonic: an older id is a no-op. `OutOfRange` past the region's end.
    pub async fn obsolete(&self, namespace_id: u64, entry_id: u64) -> Result<(), Status> {
        self.client.truncate(namespace_id, entry_id.saturating_add(1)).await?;
        Ok(())
    }

    /// The latest entry id of a region, from a cached watermark: exact for a region this store
    /// appended to since it last opened it for writing, as long as no other writer appends to
    /// it (the fencing of [`LogStore::open_for_write`] sees to that). For any other region it
    /// asks walserver once and caches `next_entry_id - 1`, an upper bound: the end of the
    /// region's slot, which other regions' entries share, and 0 for a slot never written.
    /// Opening a region for writing, or being fenced out of it, forgets its watermark.
    /// `NotFound` for an unknown region.
    pub async fn latest_entry_id(&self, namespace_id: u64) -> Result<u64, Status> {
        if let Some(id) = self.latest.lock().unwrap().get(&namespace_id) {
            return Ok(*id);
        }
        let namespace = self.client.get_namespace(namespace_id).await?;
        let bound = namespace.next_entry_id.saturating_sub(1);
        let mut latest = self.latest.lock().unwrap();
        let known = latest.entry(namespace_id).or_insert(bound);
        Ok(*known)
    }
}
