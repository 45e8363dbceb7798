//! A datanode's WAL on walserver, with the semantics of the log store a Rust datanode keeps its
//! regions' WAL behind: one namespace per region (namespace id = region id as `u64`), regions
//! created by their first append, replays that start wherever the region's checkpoint says and
//! run as long as entries keep coming, and `obsolete`, `obsolete_all` and `delete_namespace`
//! that are safe to call again. `client/rust/README.md` maps each method of that trait onto
//! this one.
//!
//! ```no_run
//! # async fn run() -> Result<(), walclient::Status> {
//! use futures_util::StreamExt;
//! use walclient::log_store::{LogEntry, LogStore, LogStoreOptions};
//! use walclient::{Client, ClientOptions};
//!
//! let client = Client::connect(ClientOptions::new("unix:///run/walserver.sock")).await?;
//! let store = LogStore::new(client, LogStoreOptions::default());
//! store.obsolete(7, 0).await?; // a region opens: nothing of it is known yet, which is fine
//! store.open_for_write(7).await?; // it will be written here: fence its earlier writer first
//! let mut replay = store.read(7, 1); // then replay from its checkpoint (0) plus one: empty
//! while let Some(entry) = replay.next().await {
//!     let _ = entry?;
//! }
//! let last = store
//!     .append_batch(vec![LogEntry::new(7, "put a 1"), LogEntry::new(8, "put b 2")])
//!     .await?; // region 8 is created by this first append
//! store.obsolete(7, last.last_entry_ids[&7]).await?; // flushed: entries up to it may go
//! # Ok(())
//! # }
//! ```
//!
//! # Fencing
//!
//! A region has one writer at a time. [`LogStore::open_for_write`] gives this store a new epoch
//! of the region: the region's earlier writer gets `FailedPrecondition` from then on, and what
//! it still manages to write is not read. Call it when the region becomes writable (a leader
//! opening it, a migration target taking over), and replay after it: from the checkpoint, or
//! from where a catch-up replay stopped. A replay ends at the region's end as it was when the
//! replay began, so entries the earlier writer added between a replay and the fence are seen
//! only by a replay after the fence; fencing first and replaying after loses nothing. (A
//! catch-up and its tail are two reads, and each drops repeats only within itself: an append
//! retried after its first attempt was written may come once in each.) Not on
//! every replay: a follower or a migration target catches up while the leader still writes,
//! and fencing there would stop the leader. A datanode whose log-store interface has no "becomes
//! writable" moment (every region it replays, it then writes, and no follower replays) can set
//! [`LogStoreOptions::fence_on_read`], which fences before every replay.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::proto::{AppendRequest, Entry, Namespace};
use crate::read::ReadOptions;
use crate::{Client, Code, Status};

/// An entry id of the log store: walserver's entry id (the Kafka offset of the entry's first
/// record in its slot) plus one, so that 0 never names an entry. A datanode's region engine
/// takes 0 for "nothing flushed yet" and replays from the flushed id plus one; with offsets as
/// ids, the entry at offset 0 of a slot would never be replayed. [`LogStore::read`] hands out
/// entries with these ids in `entry_id`.
pub type EntryId = u64;

/// The log store's id of walserver's entry id `entry_id`.
pub fn entry_id_of(walserver_entry_id: u64) -> EntryId {
    walserver_entry_id + 1
}
/// A namespace id: the region id as `u64`.
pub type NamespaceId = u64;

/// Admin calls (creations, questions) the store makes at once for one of its calls.
const CONCURRENT_ADMIN_CALLS: usize = 16;

/// One entry of [`LogStore::append_batch`]: data for one region's namespace.
#[derive(Clone, Debug)]
pub struct LogEntry {
    /// The region's namespace.
    pub namespace_id: NamespaceId,
    /// The entry, as the datanode encoded it. Up to walserver's `--max_entry_bytes` (64 MiB
    /// unless raised; walserver splits an entry over as many Kafka records as it needs).
    pub data: Bytes,
}

impl LogEntry {
    /// An entry of `namespace_id`.
    pub fn new(namespace_id: NamespaceId, data: impl Into<Bytes>) -> Self {
        LogEntry { namespace_id, data: data.into() }
    }
}

/// What [`LogStore::append_batch`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppendBatchResponse {
    /// Per region of the batch: the id of its last entry in the batch.
    pub last_entry_ids: HashMap<NamespaceId, EntryId>,
}

/// How a [`LogStore`] behaves where a datanode's log store and walserver's plain calls differ.
/// [`LogStoreOptions::default`] is what a datanode expects.
#[derive(Clone, Debug)]
pub struct LogStoreOptions {
    /// Create a region's namespace when an append names one walserver does not know, then
    /// send the append again (walserver checks every namespace before it writes anything, so
    /// nothing is written twice). True. An append still in flight when its region is deleted
    /// creates the region again: delete a region once its writes have ended, as a region engine
    /// closes a region before it drops it.
    pub auto_create: bool,
    /// A replay from below the region's first entry starts at its first entry, and one from
    /// past its end is empty, as when a checkpoint lies outside what the region keeps. True.
    /// False: `OutOfRange`, as [`Client::read`].
    pub clamp_replay_start: bool,
    /// A replay ends `DeadlineExceeded` when nothing came from walserver for this long. A
    /// replay has no deadline of its own (a large region takes as long as it takes), but one
    /// that stops receiving fails. Note that walserver sends nothing while it scans other
    /// regions' records of the slot for this one's (at a few hundred MB/s). 60 s; zero is
    /// taken as 60 s.
    pub replay_progress_timeout: Duration,
    /// Deadline of a whole replay; `None`: none. `None`.
    pub replay_timeout: Option<Duration>,
    /// Fence the region's earlier writer ([`LogStore::open_for_write`]) before every replay
    /// (see "Fencing" above for when that is right). False.
    pub fence_on_read: bool,
    /// How often a background task refreshes [`LogStore::latest_entry_id`] from walserver for
    /// the regions the store knows; zero: never. 30 s.
    pub latest_refresh_interval: Duration,
}

impl Default for LogStoreOptions {
    fn default() -> Self {
        LogStoreOptions {
            auto_create: true,
            clamp_replay_start: true,
            replay_progress_timeout: Duration::from_secs(60),
            replay_timeout: None,
            fence_on_read: false,
            latest_refresh_interval: Duration::from_secs(30),
        }
    }
}

/// A datanode's WAL on walserver. Thread-safe and cheap to clone (clones share everything).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    client: Client,
    options: LogStoreOptions,
    /// Per region: an id at or above its last entry, the highest this store appended, read or
    /// heard from walserver. Regions not in it answer 0.
    latest: Mutex<HashMap<NamespaceId, EntryId>>,
}

impl fmt::Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore")
            .field("client", &self.inner.client)
            .field("options", &self.inner.options)
            .field("regions_known", &self.inner.latest.lock().unwrap().len())
            .finish()
    }
}

impl LogStore {
    /// A store on `client`. Called inside a Tokio runtime, it starts the background refresh of
    /// [`LogStore::latest_entry_id`], which stops when the last clone of the store is dropped.
    pub fn new(client: Client, options: LogStoreOptions) -> Self {
        let store = LogStore {
            inner: Arc::new(StoreInner { client, options, latest: Mutex::new(HashMap::new()) }),
        };
        let every = store.inner.options.latest_refresh_interval;
        if !every.is_zero() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(refresh_latest(Arc::downgrade(&store.inner), every));
            }
        }
        store
    }

    /// The client underneath, for calls the store does not wrap.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The store's options.
    pub fn options(&self) -> &LogStoreOptions {
        &self.inner.options
    }

    /// Creates a region's namespace. Idempotent: an existing one is returned as it is.
    pub async fn create_namespace(&self, namespace_id: NamespaceId) -> Result<Namespace, Status> {
        Ok(self.inner.client.create_namespace(namespace_id).await?.namespace)
    }

    /// Makes this store the region's only writer with a new epoch (see "Fencing" in the module
    /// docs), creating the region first when [`LogStoreOptions::auto_create`] says so. Returns
    /// the epoch.
    pub async fn open_for_write(&self, namespace_id: NamespaceId) -> Result<u64, Status> {
        let client = &self.inner.client;
        let acquired = match client.acquire_namespace(namespace_id).await {
            Err(status) if status.code() == Code::NotFound && self.inner.options.auto_create => {
                client.create_namespace(namespace_id).await?;
                client.acquire_namespace(namespace_id).await
            }
            other => other,
        }?;
        // Another writer may have appended since; the slot's end is above all of it.
        self.forget(namespace_id);
        self.note_latest(namespace_id, acquired.namespace.next_entry_id);
        Ok(acquired.epoch)
    }

    /// Appends entries of any number of regions in one request and returns, per region, the id
    /// of its last entry in the batch, once Kafka acknowledged all of them. Each region's
    /// entries keep their order. An empty batch is answered empty. With
    /// [`LogStoreOptions::auto_create`], regions walserver does not know are created. Errors as
    /// [`Client::append`] (`FailedPrecondition`: fenced by a newer writer of a region); on an
    /// error some entries may be durable, and appending them again is safe only through
    /// [`Client::append`]'s own retries.
    pub async fn append_batch(
        &self,
        entries: Vec<LogEntry>,
    ) -> Result<AppendBatchResponse, Status> {
        if entries.is_empty() {
            return Ok(AppendBatchResponse::default());
        }
        let namespaces: Vec<NamespaceId> = entries.iter().map(|e| e.namespace_id).collect();
        let mut request = AppendRequest {
            entries: entries
                .into_iter()
                .map(|e| Entry { namespace_id: e.namespace_id, data: e.data, ..Default::default() })
                .collect(),
            ..Default::default()
        };
        // Sequences fixed once, so that the append sent again after creating regions is the
        // same append.
        let client = &self.inner.client;
        client.stamp(&mut request);
        let mut result = client.append(request.clone()).await;
        if self.inner.options.auto_create
            && matches!(&result, Err(status) if status.code() == Code::NotFound)
        {
            let distinct: HashSet<NamespaceId> = namespaces.iter().copied().collect();
            let created: Vec<Result<_, Status>> = futures_util::stream::iter(distinct)
                .map(|namespace_id| client.create_namespace(namespace_id))
                .buffer_unordered(CONCURRENT_ADMIN_CALLS)
                .collect()
                .await;
            created.into_iter().try_for_each(|c| c.map(|_| ()))?;
            result = client.append(request).await;
        }
        let ids = match result {
            Ok(ids) => ids,
            Err(status) => {
                if status.code() == Code::FailedPrecondition {
                    // Fenced: another writer owns some of these regions and appends past our
                    // ids. The ends of their slots bound what it wrote: asked in the background,
                    // so that the caller hears of the fence at once.
                    let store = self.clone();
                    let distinct: HashSet<NamespaceId> = namespaces.iter().copied().collect();
                    tokio::spawn(async move {
                        futures_util::stream::iter(distinct)
                            .for_each_concurrent(CONCURRENT_ADMIN_CALLS, |namespace_id| {
                                let store = &store;
                                async move {
                                    let _ = store.refresh_latest_entry_id(namespace_id).await;
                                }
                            })
                            .await;
                    });
                }
                return Err(status);
            }
        };
        let mut last = HashMap::new();
        for (namespace_id, id) in namespaces.into_iter().zip(ids.into_iter().map(entry_id_of)) {
            let slot = last.entry(namespace_id).or_insert(id);
            *slot = (*slot).max(id);
        }
        for (namespace_id, id) in &last {
            self.note_latest(*namespace_id, *id);
        }
        Ok(AppendBatchResponse { last_entry_ids: last })
    }

    /// Replays a region: its entries with id >= `start_entry_id` (0 or 1: from its first) in id
    /// order, up to its end as seen when the replay began. A region walserver does not know
    /// (never written, or deleted) replays as an empty stream; with
    /// [`LogStoreOptions::clamp_replay_start`], so does a start past the region's end, and a
    /// start below its first entry (truncated by `obsolete`) starts at its first entry. No deadline for the whole replay unless
    /// [`LogStoreOptions::replay_timeout`] sets one; [`LogStoreOptions::replay_progress_timeout`]
    /// ends one that stops receiving. Errors: `DataLoss` (entries gone from Kafka, or corrupt),
    /// `DeadlineExceeded`, `Unavailable` (retried while nothing was delivered).
    pub fn read(&self, namespace_id: NamespaceId, start_entry_id: EntryId) -> ReplayStream {
        let replay = Replay { store: self.clone(), namespace_id, start_entry_id, restarts: 0 };
        let stream = futures_util::stream::once(replay.open()).flatten().boxed();
        ReplayStream { inner: stream }
    }

    /// Deletes a region's namespace; its records become prunable. Idempotent: a region
    /// walserver does not know is already deleted.
    pub async fn delete_namespace(&self, namespace_id: NamespaceId) -> Result<(), Status> {
        match self.inner.client.delete_namespace(namespace_id).await {
            Err(status) if status.code() != Code::NotFound => return Err(status),
            _ => {}
        }
        self.inner.latest.lock().unwrap().remove(&namespace_id);
        Ok(())
    }

    /// Every live namespace, in id order.
    pub async fn list_namespaces(&self) -> Result<Vec<Namespace>, Status> {
        self.inner.client.list_namespaces().await
    }

    /// The region flushed everything up to and including `entry_id`: those entries become
    /// unreadable and walserver may prune them from Kafka. Monotonic: an older id is a no-op.
    /// An id at or past the region's end makes all of its entries obsolete (not the ids
    /// after its end, which later appends get); a region walserver does not know has nothing
    /// to make obsolete.
    pub async fn obsolete(
        &self,
        namespace_id: NamespaceId,
        entry_id: EntryId,
    ) -> Result<(), Status> {
        let client = &self.inner.client;
        // Entries with walserver ids below `entry_id` are those with log store ids up to it.
        let result = match client.truncate(namespace_id, entry_id).await {
            Err(status) if status.code() == Code::OutOfRange => {
                // Past the end: truncate at the end as it is now.
                match client.get_namespace(namespace_id).await {
                    Ok(namespace) => {
                        let end = namespace.next_entry_id.min(entry_id);
                        client.truncate(namespace_id, end).await.map(|_| ())
                    }
                    Err(status) => Err(status),
                }
            }
            other => other.map(|_| ()),
        };
        match result {
            Err(status) if status.code() != Code::NotFound => Err(status),
            _ => Ok(()),
        }
    }

    /// The region is dropped: all of its entries are obsolete and its namespace goes
    /// ([`LogStore::delete_namespace`]). Idempotent.
    pub async fn obsolete_all(&self, namespace_id: NamespaceId) -> Result<(), Status> {
        self.delete_namespace(namespace_id).await
    }

    /// The latest entry id of a region, without calling walserver: an id at or above the
    /// region's last entry, the highest this store appended, replayed, or heard from walserver
    /// (at opening for write, and from the background refresh, which gives the end of the
    /// region's slot: other regions' entries share it). 0 for a region the store knows nothing
    /// of, which a new region's replay may start from. Forgotten when the region is deleted or
    /// opened for write again; raised in the background when an append finds this store fenced
    /// out of it.
    pub fn latest_entry_id(&self, namespace_id: NamespaceId) -> EntryId {
        self.inner.latest.lock().unwrap().get(&namespace_id).copied().unwrap_or(0)
    }

    /// Asks walserver for a bound of a region's latest entry id now (the end of its slot) and
    /// caches it; `NotFound` for a region walserver does not know.
    pub async fn refresh_latest_entry_id(
        &self,
        namespace_id: NamespaceId,
    ) -> Result<EntryId, Status> {
        let namespace = self.inner.client.get_namespace(namespace_id).await?;
        // `next_entry_id` bounds walserver's ids from above: as a log store id, it is the
        // last possible one.
        self.note_latest(namespace_id, namespace.next_entry_id);
        Ok(self.latest_entry_id(namespace_id))
    }

    fn note_latest(&self, namespace_id: NamespaceId, id: EntryId) {
        self.inner.note_latest(namespace_id, id);
    }

    fn forget(&self, namespace_id: NamespaceId) {
        self.inner.latest.lock().unwrap().remove(&namespace_id);
    }
}

impl StoreInner {
    fn note_latest(&self, namespace_id: NamespaceId, id: EntryId) {
        let mut latest = self.latest.lock().unwrap();
        let known = latest.entry(namespace_id).or_insert(id);
        *known = (*known).max(id);
    }
}

/// Every `every`, the slot end of each region the store knows (one listing of walserver's
/// namespaces), until the store is gone (it is held only while a listing runs). Failures wait
/// for the next round.
async fn refresh_latest(store: Weak<StoreInner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = store.upgrade() else { return };
        if inner.latest.lock().unwrap().is_empty() {
            continue;
        }
        let Ok(namespaces) = inner.client.list_namespaces().await else { continue };
        let mut latest = inner.latest.lock().unwrap();
        for namespace in namespaces {
            if let Some(known) = latest.get_mut(&namespace.namespace_id) {
                *known = (*known).max(namespace.next_entry_id);
            }
        }
    }
}

/// The entries of a region's replay, from [`LogStore::read`]: `Ok` entries in id order, ending
/// (`None`) at the region's end as seen when the replay began, or after one `Err`. Dropping it
/// cancels the replay on walserver.
pub struct ReplayStream {
    inner: BoxStream<'static, Result<Entry, Status>>,
}

impl Stream for ReplayStream {
    type Item = Result<Entry, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

/// One replay: reads from `start_entry_id` and, while nothing was delivered, turns "not there"
/// answers into the log store's semantics.
struct Replay {
    store: LogStore,
    namespace_id: NamespaceId,
    start_entry_id: EntryId,
    /// Reads opened again after `OutOfRange`; a truncation racing the replay may need one.
    restarts: u32,
}

enum ReplayStep {
    /// Deliver these and go on.
    Deliver(Entry),
    /// The replay ends here (after an error, if any).
    End(Option<Status>),
}

impl Replay {
    /// The replay as a stream, after fencing when the options say so.
    async fn open(self) -> BoxStream<'static, Result<Entry, Status>> {
        if self.store.inner.options.fence_on_read {
            match self.store.open_for_write(self.namespace_id).await {
                // Unknown, and not to be created: nothing to replay.
                Err(status) if status.code() == Code::NotFound => {
                    return futures_util::stream::empty().boxed()
                }
                Err(status) => return futures_util::stream::once(async { Err(status) }).boxed(),
                Ok(_) => {}
            }
        }
        let state = (self, None::<BoxStream<'static, Result<Entry, Status>>>, false);
        futures_util::stream::unfold(state, |(mut replay, mut reading, delivered)| async move {
            loop {
                let stream = reading.get_or_insert_with(|| replay.begin());
                let step = match stream.next().await {
                    Some(Ok(mut entry)) => {
                        entry.entry_id = entry_id_of(entry.entry_id);
                        ReplayStep::Deliver(entry)
                    }
                    None => ReplayStep::End(None),
                    Some(Err(status)) if delivered => ReplayStep::End(Some(status)),
                    Some(Err(status)) => match replay.before_first_entry(status).await {
                        Ok(true) => {
                            reading = None; // open again, from the adjusted start
                            continue;
                        }
                        Ok(false) => ReplayStep::End(None),
                        Err(status) => ReplayStep::End(Some(status)),
                    },
                };
                return match step {
                    ReplayStep::Deliver(entry) => {
                        replay.store.note_latest(replay.namespace_id, entry.entry_id);
                        Some((Ok(entry), (replay, reading, true)))
                    }
                    // A stream that yields nothing more after its error.
                    ReplayStep::End(Some(status)) => {
                        let finished = futures_util::stream::empty().boxed();
                        Some((Err(status), (replay, Some(finished), true)))
                    }
                    ReplayStep::End(None) => None,
                };
            }
        })
        .boxed()
    }

    /// walserver's start: the entry id before `start_entry_id` (0, from the first, for 0 or 1).
    fn start(&self) -> u64 {
        self.start_entry_id.saturating_sub(1)
    }

    fn begin(&self) -> BoxStream<'static, Result<Entry, Status>> {
        let options = &self.store.inner.options;
        let read = ReadOptions {
            start_entry_id: self.start(),
            timeout: options.replay_timeout,
            progress_timeout: Some(if options.replay_progress_timeout.is_zero() {
                LogStoreOptions::default().replay_progress_timeout
            } else {
                options.replay_progress_timeout
            }),
            ..ReadOptions::new(self.namespace_id)
        };
        self.store.inner.client.read(read).boxed()
    }

    /// The replay failed before its first entry with `status`: Ok(true) to read again (from an
    /// adjusted start), Ok(false) for an empty replay, Err to end with an error.
    async fn before_first_entry(&mut self, status: Status) -> Result<bool, Status> {
        match status.code() {
            Code::NotFound => Ok(false),
            Code::OutOfRange
                if self.store.inner.options.clamp_replay_start && self.restarts < 3 =>
            {
                self.restarts += 1;
                let namespace = match self.store.inner.client.get_namespace(self.namespace_id).await
                {
                    Err(status) if status.code() == Code::NotFound => return Ok(false),
                    other => other?,
                };
                if self.start() >= namespace.next_entry_id {
                    return Ok(false); // past the end: nothing to replay
                }
                if self.start() < namespace.first_entry_id {
                    // Below the first entry (a truncation): from the first one.
                    self.start_entry_id = 0;
                }
                // Else the region moved between the read and the question: the same start again.
                Ok(true)
            }
            _ => Err(status),
        }
    }
}
