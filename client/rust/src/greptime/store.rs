//! [`WalserverLogStore`]: the datanodes' [`LogStore`] on walserver (see the module docs).

use std::collections::hash_map::Entry as Slot;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};

use super::{
    AppendBatchResponse, Entry, EntryId, Error, KafkaProvider, LogStore, NaiveEntry, Provider,
    RegionId, Result, SendableEntryStream, WalIndex,
};
use crate::proto::{self, AppendRequest};
use crate::{Client, Code, ReadItem, ReadSlotOptions, Status};

/// Regions placed (created) at once by one `append_batch`: each is an admin call.
const CONCURRENT_PLACEMENTS: usize = 64;
/// Entries handed out in one batch of a read's stream, at most.
const READ_BATCH_ENTRIES: usize = 1024;

/// The datanodes' log store on walserver.
#[derive(Clone)]
pub struct WalserverLogStore {
    client: Client,
    partition: i32,
    max_request_bytes: usize,
    max_entry_bytes: usize,
    refresh_interval: Duration,
    read_progress_timeout: Duration,
    shared: Arc<Shared>,
}

/// What the clones of a store share.
#[derive(Default)]
struct Shared {
    /// The topic each region lives in, as far as this store learned.
    regions: Mutex<HashMap<RegionId, Arc<KafkaProvider>>>,
    /// Per topic the highest entry id known (appends, reads and GetSlot): latest_entry_id.
    latest: Mutex<HashMap<String, EntryId>>,
    refresher_started: AtomicBool,
    stopped: AtomicBool,
}

impl fmt::Debug for WalserverLogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalserverLogStore")
            .field("client", &self.client)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish_non_exhaustive()
    }
}

impl WalserverLogStore {
    /// A log store on the walserver `client` talks to.
    pub fn new(client: Client) -> WalserverLogStore {
        WalserverLogStore {
            client,
            partition: 0,
            max_request_bytes: 4 << 20,
            max_entry_bytes: 64 << 20,
            refresh_interval: Duration::from_secs(1),
            read_progress_timeout: Duration::from_secs(30),
            shared: Arc::default(),
        }
    }

    /// Entry bytes per append request (default 4 MiB): a larger batch goes as several requests,
    /// one after another, each region's entries in order. An entry larger than this goes in a
    /// request of its own.
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes.max(1);
        self
    }

    /// The largest entry `entry` builds: walserver's `--max_entry_bytes` (default 64 MiB).
    pub fn with_max_entry_bytes(mut self, bytes: usize) -> Self {
        self.max_entry_bytes = bytes;
        self
    }

    /// How often the topics' latest entry ids are asked of walserver (default 1 s), for
    /// `latest_entry_id`, which never waits.
    pub fn with_latest_refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh_interval = interval;
        self
    }

    /// A read that receives nothing for this long fails with `DeadlineExceeded` (default 30 s);
    /// a read that keeps receiving has no deadline.
    pub fn with_read_progress_timeout(mut self, timeout: Duration) -> Self {
        self.read_progress_timeout = timeout;
        self
    }

    /// The client underneath.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Makes this store the region's only writer (placing the region in the provider's topic
    /// first if it is new): a migration target or a region's new leader calls it before its
    /// replay. The region's earlier writer gets `FailedPrecondition` from then on, and what it
    /// still manages to write is not read. Returns the new epoch.
    pub async fn fence(&self, provider: &Provider, region_id: RegionId) -> Result<u64> {
        let kafka = kafka_of(provider)?;
        self.place(&HashMap::from([(region_id, kafka.clone())])).await?;
        Ok(self.client.acquire_namespace(region_id.as_u64()).await?.epoch)
    }

    /// Asks walserver for the provider's latest entry id now (what `latest_entry_id` gives
    /// from then on, at least).
    pub async fn refresh_latest_entry_id(&self, provider: &Provider) -> Result<EntryId> {
        let kafka = kafka_of(provider)?;
        let slot = self.client.get_slot(&kafka.topic, self.partition).await?;
        self.note_latest(&kafka.topic, slot.next_entry_id.saturating_sub(1));
        self.start_refresher();
        Ok(self.known_latest(&kafka.topic).unwrap_or(0))
    }

    fn note_latest(&self, topic: &str, id: EntryId) {
        let mut latest = self.shared.latest.lock().unwrap();
        let known = latest.entry(topic.to_string()).or_insert(id);
        *known = (*known).max(id);
    }

    fn known_latest(&self, topic: &str) -> Option<EntryId> {
        self.shared.latest.lock().unwrap().get(topic).copied()
    }

    /// Starts (once) the task that keeps every known topic's latest entry id fresh; it ends
    /// with the last clone of the store, or at `stop`.
    fn start_refresher(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if self.shared.stopped.load(Ordering::SeqCst)
            || self.shared.refresher_started.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let shared = Arc::downgrade(&self.shared);
        let store = self.without_shared();
        runtime.spawn(async move {
            // Started again by the next call if this one ends (its runtime shut down).
            let _restart = RestartOnExit(shared.clone());
            loop {
                tokio::time::sleep(store.refresh_interval).await;
                let Some(topics) = topics_of(&shared) else { return };
                for topic in topics {
                    if let Ok(slot) = store.client.get_slot(&topic, store.partition).await {
                        let Some(shared) = shared.upgrade() else { return };
                        let mut latest = shared.latest.lock().unwrap();
                        let known = latest.entry(topic).or_default();
                        *known = (*known).max(slot.next_entry_id.saturating_sub(1));
                    }
                }
            }
        });
    }

    /// A copy of the settings and client for a background task, which must not keep the
    /// shared state alive.
    fn without_shared(&self) -> WalserverLogStore {
        WalserverLogStore { shared: Arc::default(), ..self.clone() }
    }

    /// Makes sure each region lives in the topic given: creates those walserver does not have
    /// there yet; `FailedPrecondition` for one that lives in another.
    async fn place(&self, wanted: &HashMap<RegionId, Arc<KafkaProvider>>) -> Result<()> {
        let mut unknown = Vec::new();
        {
            let regions = self.shared.regions.lock().unwrap();
            for (region, kafka) in wanted {
                match regions.get(region) {
                    Some(known) if known == kafka => {}
                    Some(known) => return Err(elsewhere(*region, known, kafka)),
                    None => unknown.push((*region, kafka.clone())),
                }
            }
        }
        let placed: Vec<Result<(RegionId, Arc<KafkaProvider>)>> =
            futures_util::stream::iter(unknown)
                .map(|(region, kafka)| async move {
                    self.client
                        .create_namespace_in(region.as_u64(), &kafka.topic, self.partition)
                        .await
                        .map_err(|status| placement_error(region, &kafka, status))?;
                    Ok((region, kafka))
                })
                .buffer_unordered(CONCURRENT_PLACEMENTS)
                .collect()
                .await;
        let mut regions = self.shared.regions.lock().unwrap();
        for result in placed {
            let (region, kafka) = result?;
            regions.insert(region, kafka);
        }
        Ok(())
    }

    /// The topic the region lives in, asking walserver when this store does not know; `None`
    /// for a region walserver does not have.
    async fn placement(&self, region: RegionId) -> Result<Option<Arc<KafkaProvider>>> {
        if let Some(known) = self.shared.regions.lock().unwrap().get(&region) {
            return Ok(Some(known.clone()));
        }
        match self.client.get_namespace(region.as_u64()).await {
            Ok(namespace) => {
                let kafka = Arc::new(KafkaProvider::new(namespace.topic));
                self.shared.regions.lock().unwrap().insert(region, kafka.clone());
                Ok(Some(kafka))
            }
            Err(status) if status.code() == Code::NotFound => Ok(None),
            Err(status) => Err(status.into()),
        }
    }

    /// The region's topic is `kafka`, or it does not exist: else `FailedPrecondition`.
    async fn check_placement(&self, region: RegionId, kafka: &Arc<KafkaProvider>) -> Result<bool> {
        match self.placement(region).await? {
            Some(known) if &known == kafka => Ok(true),
            Some(known) => Err(elsewhere(region, &known, kafka)),
            None => Ok(false),
        }
    }

    fn forget(&self, region: RegionId) {
        self.shared.regions.lock().unwrap().remove(&region);
    }

    /// Sends `entries` (checked and placed under `wanted`) in requests of at most
    /// max_request_bytes, one after another; the ids in entry order.
    async fn send(
        &self,
        entries: Vec<(RegionId, Vec<u8>)>,
        wanted: &HashMap<RegionId, Arc<KafkaProvider>>,
    ) -> Result<Vec<EntryId>> {
        let mut ids = Vec::with_capacity(entries.len());
        let mut request = AppendRequest::default();
        let mut bytes = 0;
        let mut entries = entries.into_iter().peekable();
        while let Some((region, data)) = entries.next() {
            bytes += data.len();
            request.entries.push(proto::Entry {
                namespace_id: region.as_u64(),
                data: data.into(),
                ..Default::default()
            });
            let full =
                entries.peek().is_some_and(|(_, next)| bytes + next.len() > self.max_request_bytes);
            if full || entries.peek().is_none() {
                let request = std::mem::take(&mut request);
                ids.extend(self.send_one(request, wanted).await?);
                bytes = 0;
            }
        }
        Ok(ids)
    }

    /// One request; sent again once when a region of it was deleted (obsolete_all) since this
    /// store placed it: placed again first. A refused request wrote nothing, and the requests
    /// before it are not sent again.
    async fn send_one(
        &self,
        request: AppendRequest,
        wanted: &HashMap<RegionId, Arc<KafkaProvider>>,
    ) -> Result<Vec<EntryId>> {
        match self.client.append(request.clone()).await {
            Err(status) if status.code() == Code::NotFound => {
                let mut regions = HashMap::new();
                for entry in &request.entries {
                    let region = RegionId::from_u64(entry.namespace_id);
                    self.forget(region);
                    regions.insert(region, wanted[&region].clone());
                }
                self.place(&regions).await?;
                Ok(self.client.append(request).await?)
            }
            other => Ok(other?),
        }
    }
}

/// Lets the next call start the refresher again once the running one ended.
struct RestartOnExit(Weak<Shared>);

impl Drop for RestartOnExit {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            shared.refresher_started.store(false, Ordering::SeqCst);
        }
    }
}

/// The topics a store knows, while it lives.
fn topics_of(shared: &Weak<Shared>) -> Option<Vec<String>> {
    let shared = shared.upgrade()?;
    if shared.stopped.load(Ordering::SeqCst) {
        return None;
    }
    let topics = shared.latest.lock().unwrap().keys().cloned().collect();
    Some(topics)
}

/// The Kafka provider, or `InvalidArgument` for the kinds walserver does not serve.
fn kafka_of(provider: &Provider) -> Result<&Arc<KafkaProvider>> {
    provider.as_kafka_provider().ok_or_else(|| {
        Error::invalid_argument(format!(
            "walserver keeps the WAL of Kafka providers only, not of {provider} \
             ({}): configure the datanode's WAL as remote (Kafka)",
            provider.type_name()
        ))
    })
}

fn elsewhere(region: RegionId, known: &KafkaProvider, given: &KafkaProvider) -> Error {
    Error::new(
        Code::FailedPrecondition,
        format!(
            "region {region} lives under provider Kafka(topic={known}), not \
             Kafka(topic={given}): a region never moves between providers"
        ),
    )
}

fn placement_error(region: RegionId, kafka: &KafkaProvider, status: Status) -> Error {
    Error::new(
        status.code(),
        format!("placing region {region} under Kafka(topic={kafka}): {}", status.message()),
    )
}

#[async_trait::async_trait]
impl LogStore for WalserverLogStore {
    type Error = Error;

    async fn stop(&self) -> Result<()> {
        // The refresher ends at its next look; latest_entry_id then moves only with this
        // store's own appends and reads.
        self.shared.stopped.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn append_batch(&self, entries: Vec<Entry>) -> Result<AppendBatchResponse> {
        if entries.is_empty() {
            return Ok(AppendBatchResponse::default());
        }
        let mut wanted: HashMap<RegionId, Arc<KafkaProvider>> = HashMap::new();
        let mut topics = Vec::with_capacity(entries.len());
        let mut checked = Vec::with_capacity(entries.len());
        for entry in entries {
            let region = entry.region_id();
            let kafka = kafka_of(entry.provider())?.clone();
            match wanted.entry(region) {
                Slot::Occupied(known) if known.get() != &kafka => {
                    return Err(Error::invalid_argument(format!(
                        "region {region} appears under two providers in one batch: \
                         Kafka(topic={}) and Kafka(topic={kafka})",
                        known.get()
                    )));
                }
                Slot::Occupied(_) => {}
                Slot::Vacant(slot) => {
                    slot.insert(kafka.clone());
                }
            }
            if !entry.is_complete() {
                return Err(Error::invalid_argument(format!(
                    "entry of region {region} lacks its first or last part"
                )));
            }
            topics.push(kafka);
            checked.push((region, entry.into_bytes()));
        }
        self.place(&wanted).await?;
        self.start_refresher();
        let regions: Vec<RegionId> = checked.iter().map(|(region, _)| *region).collect();
        let ids = self.send(checked, &wanted).await?;
        let mut last_entry_ids = HashMap::new();
        for ((region, id), kafka) in regions.iter().zip(ids).zip(topics) {
            let last = last_entry_ids.entry(*region).or_insert(id);
            *last = (*last).max(id);
            self.note_latest(&kafka.topic, id);
        }
        Ok(AppendBatchResponse { last_entry_ids })
    }

    async fn read(
        &self,
        provider: &Provider,
        id: EntryId,
        _index: Option<WalIndex>,
    ) -> Result<SendableEntryStream<'static, Entry, Error>> {
        let kafka = kafka_of(provider)?.clone();
        let provider = provider.clone();
        let store = self.clone();
        let topic = kafka.topic.clone();
        let items = self.client.read_slot(ReadSlotOptions {
            topic: kafka.topic.clone(),
            partition: self.partition,
            start_entry_id: id,
            progress_timeout: Some(self.read_progress_timeout),
            ..Default::default()
        });
        let entries = items
            .map_err(Error::from)
            .try_filter_map(move |item| {
                let provider = provider.clone();
                async move {
                    match item {
                        ReadItem::Entry(entry) => Ok(Some(Entry::Naive(NaiveEntry {
                            provider,
                            region_id: RegionId::from_u64(entry.namespace_id),
                            entry_id: entry.entry_id,
                            data: entry.data.to_vec(),
                        }))),
                        ReadItem::End(end) if end.code == 0 => Ok(None),
                        ReadItem::End(end) => Err(Error::new(
                            Code::from_i32(end.code),
                            format!(
                                "reading region {} of {provider}: {}",
                                RegionId::from_u64(end.namespace_id),
                                end.message
                            ),
                        )),
                        ReadItem::Gap(_) => Ok(None), // only with skip_lost, never asked for
                    }
                }
            })
            .ready_chunks(READ_BATCH_ENTRIES)
            .map(move |chunk| {
                let entries = chunk.into_iter().collect::<Result<Vec<Entry>>>()?;
                if let Some(last) = entries.iter().map(Entry::entry_id).max() {
                    store.note_latest(&topic, last);
                }
                Ok(entries)
            });
        Ok(Box::pin(entries))
    }

    async fn create_namespace(&self, ns: &Provider) -> Result<()> {
        // The topic must be one walserver serves.
        self.refresh_latest_entry_id(ns).await.map(|_| ())
    }

    async fn delete_namespace(&self, ns: &Provider) -> Result<()> {
        // A topic's regions go with obsolete_all; the topic is walserver's and stays.
        kafka_of(ns).map(|_| ())
    }

    async fn list_namespaces(&self) -> Result<Vec<Provider>> {
        let topics: BTreeSet<String> =
            self.client.list_namespaces().await?.into_iter().map(|ns| ns.topic).collect();
        Ok(topics.into_iter().map(Provider::kafka_provider).collect())
    }

    async fn obsolete(
        &self,
        provider: &Provider,
        region_id: RegionId,
        entry_id: EntryId,
    ) -> Result<()> {
        let kafka = kafka_of(provider)?;
        if !self.check_placement(region_id, kafka).await? {
            return Ok(()); // never written, or deleted: nothing to obsolete
        }
        match self.client.truncate(region_id.as_u64(), entry_id.saturating_add(1)).await {
            Ok(_) => Ok(()),
            Err(status) if status.code() == Code::NotFound => {
                self.forget(region_id);
                Ok(())
            }
            Err(status) => Err(status.into()),
        }
    }

    async fn obsolete_all(&self, provider: &Provider, region_id: RegionId) -> Result<()> {
        let kafka = kafka_of(provider)?;
        if !self.check_placement(region_id, kafka).await? {
            return Ok(());
        }
        let deleted = self.client.delete_namespace(region_id.as_u64()).await;
        self.forget(region_id);
        match deleted {
            Err(status) if status.code() != Code::NotFound => Err(status.into()),
            _ => Ok(()),
        }
    }

    fn entry(
        &self,
        data: Vec<u8>,
        entry_id: EntryId,
        region_id: RegionId,
        provider: &Provider,
    ) -> Result<Entry> {
        kafka_of(provider)?;
        if data.len() > self.max_entry_bytes {
            return Err(Error::invalid_argument(format!(
                "an entry of {} bytes for region {region_id} is over walserver's limit of {} \
                 (--max_entry_bytes; with_max_entry_bytes here)",
                data.len(),
                self.max_entry_bytes
            )));
        }
        Ok(Entry::Naive(NaiveEntry { provider: provider.clone(), region_id, entry_id, data }))
    }

    fn latest_entry_id(&self, provider: &Provider) -> Result<EntryId> {
        let kafka = kafka_of(provider)?;
        if let Some(id) = self.known_latest(&kafka.topic) {
            return Ok(id);
        }
        // Not known yet: 0 until walserver answers, asked now in the background (once), and
        // kept fresh from then on.
        self.note_latest(&kafka.topic, 0);
        self.start_refresher();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = self.clone();
            let provider = provider.clone();
            runtime.spawn(async move {
                let _ = store.refresh_latest_entry_id(&provider).await;
            });
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClientOptions;

    #[tokio::test]
    async fn entry_builds_a_whole_entry_of_a_kafka_provider() {
        // As their log store's test_build_naive_entry; a lazy client needs no server.
        let client = Client::connect(ClientOptions::new("127.0.0.1:1")).await.unwrap();
        let store = WalserverLogStore::new(client).with_max_entry_bytes(100);
        let provider = Provider::kafka_provider("my_topic".into());
        let region = RegionId::new(1, 1);
        let entry = store.entry(vec![1; 100], 1, region, &provider).unwrap();
        let want = NaiveEntry {
            provider: provider.clone(),
            region_id: region,
            entry_id: 1,
            data: vec![1; 100],
        };
        assert_eq!(entry.into_naive_entry(), Some(want));
        let over = store.entry(vec![1; 101], 1, region, &provider).unwrap_err();
        assert_eq!(over.code(), Code::InvalidArgument, "{over}");
    }
}
