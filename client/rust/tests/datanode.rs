//! A datanode's region engine driving `walclient::greptime` (GreptimeDB's log store trait on
//! walserver) in the order it calls its log store, against walserver on the suite's real Kafka,
//! with a checker of every replay. 1,000 regions on 16 topics, each region's topic its
//! provider, as the datanodes' metasrv places them:
//! - open: a new region's flushed id is its topic's latest entry id
//!   (`Provider::initial_flushed_entry_id`); a region replays from its flushed id plus one, then
//!   `obsolete`s up to it; a batch of regions is opened with one read per topic, its entries
//!   distributed by region (each from its own start), as the region engine's distributor does;
//! - writes: `append_batch` across many regions from several writers at once;
//! - flush: the region's flushed id moves to its last acknowledged entry, then `obsolete`;
//! - drop: `obsolete_all`, twice;
//! - migration: a second datanode, through a sidecar of its own, catches a set of regions up by
//!   reading their topics while the first one writes, then fences the first
//!   (`WalserverLogStore::fence`), reads the tail, and writes on;
//! - crashes: the sidecar killed (-9) and restarted under the writes, then the datanode itself
//!   restarted: every region opened again, by topic, and once more region by region.
//!
//! The checker holds each replay against what the writers were told: every acknowledged entry
//! after the region's flushed id exactly once and in order, none that the fenced datanode wrote
//! after the fence, none of a dropped region, and of the entries whose append failed (outcome
//! unknown) at most one copy, in order.

mod common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Walserver;
use futures_util::{stream, StreamExt};
use walclient::greptime::{
    Entry, EntryId, Error, LogStore, NaiveEntry, Provider, RegionId, WalserverLogStore,
};
use walclient::{Client, ClientOptions, Code};

/// Regions 1..=BIG take 16 KiB entries; the others, most of them, a few hundred bytes.
const BIG: u64 = 10;
/// The topics the regions are placed in, as the datanodes' metasrv places them.
const TOPICS: u64 = 16;
/// What a writer of the datanode may be answered, and fail those writes for.
const RETRIED_LATER: [Code; 3] =
    [Code::Unavailable, Code::DeadlineExceeded, Code::FailedPrecondition];
/// Regions (or topics) opened at once, as a datanode opens them in parallel.
const OPEN_CONCURRENCY: usize = 32;

/// What a replay must do with one append attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Acknowledged: exactly once.
    Must,
    /// Its outcome is unknown (the append failed, or raced the fence): at most once.
    May,
    /// Written by a datanode after it was fenced out: never.
    MustNot,
}

#[derive(Default)]
struct RegionModel {
    /// The flushed entry id: replays start after it. None until the region is first opened.
    checkpoint: Option<EntryId>,
    /// Attempts since the checkpoint, by entry number (each region numbers its entries 1, 2...).
    attempts: Vec<(u64, Expect)>,
    next_number: u64,
    /// The last acknowledged entry and its number, for a flush.
    last_acked: Option<(EntryId, u64)>,
    dropped: bool,
    /// The datanode a new writer fenced out of the region, from when the fence began; and
    /// whether it returned.
    fenced_out: Option<char>,
    fence_done: bool,
}

#[derive(Default)]
struct Model {
    regions: Mutex<HashMap<u64, RegionModel>>,
}

fn data_of(region: u64, number: u64) -> Vec<u8> {
    let size = if region <= BIG { 16 << 10 } else { 100 + (number % 4) as usize * 100 };
    let mut data = format!("{region}:{number}:").into_bytes();
    data.resize(size, b'.');
    data
}

fn bytes_of(entry: &Entry) -> &[u8] {
    match entry {
        Entry::Naive(naive) => &naive.data,
        Entry::MultiplePart(_) => b"",
    }
}

fn number_of(region: u64, entry: &Entry) -> Result<u64, String> {
    let data = bytes_of(entry);
    let text = String::from_utf8_lossy(&data[..data.len().min(40)]).into_owned();
    let mut parts = text.split(':');
    let of_region: u64 = parts.next().and_then(|p| p.parse().ok()).ok_or("no region")?;
    let number: u64 = parts.next().and_then(|p| p.parse().ok()).ok_or("no number")?;
    if of_region != region || entry.region_id() != region {
        return Err(format!(
            "region {region} replayed an entry of region {of_region} ({})",
            entry.region_id()
        ));
    }
    Ok(number)
}

/// Holds region `region`'s replay against the model: see the module's docs.
fn check(region: u64, model: &RegionModel, replayed: &[Entry]) -> Result<(), String> {
    if model.dropped {
        return match replayed.len() {
            0 => Ok(()),
            n => Err(format!("region {region} was dropped, and its replay has {n} entries")),
        };
    }
    let expect: HashMap<u64, Expect> = model.attempts.iter().copied().collect();
    let mut previous = 0;
    let mut seen = HashSet::new();
    for entry in replayed {
        let number = number_of(region, entry)?;
        match expect.get(&number) {
            None => {
                return Err(format!(
                    "region {region}: entry {number} (id {}) replayed, but it was flushed or never \
                     appended (flushed id {:?})",
                    entry.entry_id(),
                    model.checkpoint
                ))
            }
            Some(Expect::MustNot) => {
                return Err(format!(
                    "region {region}: entry {number} was written after its writer was fenced, and \
                     replayed"
                ))
            }
            Some(_) => {}
        }
        if number <= previous {
            return Err(format!("region {region}: entry {number} replayed after {previous}"));
        }
        previous = number;
        seen.insert(number);
    }
    let missing: Vec<u64> = model
        .attempts
        .iter()
        .filter(|(number, expect)| *expect == Expect::Must && !seen.contains(number))
        .map(|(number, _)| *number)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "region {region}: acknowledged entries {missing:?} missing from the replay after \
             flushed id {:?} (replayed {previous} last)",
            model.checkpoint
        ));
    }
    Ok(())
}

/// One datanode: its log store on its sidecar.
struct Datanode {
    name: char,
    store: WalserverLogStore,
    /// The topics' prefix: region r lives in topic `{prefix}_{r % TOPICS}`.
    prefix: String,
    /// Deliberately wrong replay start (the checker's own test): the region's last
    /// acknowledged entry instead of its flushed id plus one.
    broken_replay_start: bool,
}

/// What opening a set of regions took.
struct Opened {
    took: Duration,
    entries: u64,
    bytes: u64,
    /// (region, id) of every entry replayed.
    replayed: BTreeSet<(u64, u64)>,
}

impl Opened {
    fn of(took: Duration, replays: &HashMap<u64, Vec<Entry>>) -> Opened {
        let mut opened = Opened { took, entries: 0, bytes: 0, replayed: BTreeSet::new() };
        for (region, entries) in replays {
            for entry in entries {
                opened.entries += 1;
                opened.bytes += bytes_of(entry).len() as u64;
                opened.replayed.insert((*region, entry.entry_id()));
            }
        }
        opened
    }
}

impl Datanode {
    async fn new(name: char, target: &str, prefix: &str, broken_replay_start: bool) -> Datanode {
        let options =
            ClientOptions { timeout: Duration::from_secs(20), ..ClientOptions::new(target) };
        let client = Client::connect(options).await.unwrap();
        let store = WalserverLogStore::new(client);
        Datanode { name, store, prefix: prefix.to_string(), broken_replay_start }
    }

    fn provider(&self, region: u64) -> Provider {
        Provider::kafka_provider(format!("{}_{}", self.prefix, region % TOPICS))
    }

    /// Where each region's replay starts (its flushed id plus one), a new region getting its
    /// topic's latest entry id as its flushed id first.
    fn starts(&self, model: &Model, regions: &[u64]) -> HashMap<u64, EntryId> {
        let mut state = model.regions.lock().unwrap();
        regions
            .iter()
            .map(|region| {
                let provider = self.provider(*region);
                let region_model = state.entry(*region).or_default();
                let flushed = *region_model
                    .checkpoint
                    .get_or_insert_with(|| provider.initial_flushed_entry_id(&self.store));
                let start = match (self.broken_replay_start, region_model.last_acked) {
                    (true, Some((id, _))) => id,
                    _ => flushed + 1,
                };
                (*region, start)
            })
            .collect()
    }

    /// Reads the topics of `from`'s regions once each, from the lowest start of their regions,
    /// and hands each region its entries from its own start: the region engine's distributor.
    async fn read_by_topic(
        &self,
        from: &HashMap<u64, EntryId>,
    ) -> Result<HashMap<u64, Vec<Entry>>, String> {
        let mut topics: HashMap<u64, Vec<u64>> = HashMap::new();
        for region in from.keys() {
            topics.entry(region % TOPICS).or_default().push(*region);
        }
        let results: Vec<Result<HashMap<u64, Vec<Entry>>, String>> = stream::iter(topics)
            .map(|(topic, regions)| async move {
                let provider = self.provider(topic);
                let start = regions.iter().map(|r| from[r]).min().unwrap();
                let mut out: HashMap<u64, Vec<Entry>> =
                    regions.iter().map(|r| (*r, Vec::new())).collect();
                let mut read =
                    self.store.read(&provider, start, None).await.map_err(|e| e.to_string())?;
                while let Some(batch) = read.next().await {
                    for entry in batch.map_err(|e| format!("{provider}: {e}"))? {
                        let region = entry.region_id().as_u64();
                        if let Some(entries) = out.get_mut(&region) {
                            if entry.entry_id() >= from[&region] {
                                entries.push(entry);
                            }
                        }
                    }
                }
                Ok(out)
            })
            .buffer_unordered(OPEN_CONCURRENCY)
            .collect()
            .await;
        let mut all = HashMap::new();
        for result in results {
            all.extend(result?);
        }
        Ok(all)
    }

    /// Replays one region alone, as the region engine opens a single region: a read of its
    /// topic from its start, filtered to it.
    async fn read_region(&self, region: u64, start: EntryId) -> Result<Vec<Entry>, String> {
        let provider = self.provider(region);
        let mut read = self.store.read(&provider, start, None).await.map_err(|e| e.to_string())?;
        let mut entries = Vec::new();
        while let Some(batch) = read.next().await {
            let batch = batch.map_err(|e| format!("region {region}: {e}"))?;
            entries.extend(batch.into_iter().filter(|e| e.region_id() == region));
        }
        Ok(entries)
    }

    /// Opens `regions` as the region engine does at start-up: a region to be written here is
    /// fenced first (when `writable`), so that its replay holds everything its earlier writer
    /// wrote; then the regions are replayed by topic (`by_topic`) or one by one, each checked
    /// against the model when `checked` says so (not while another datanode writes them), and
    /// each obsoletes up to its flushed id. Measures the replays.
    async fn open(
        &self,
        model: &Model,
        regions: &[u64],
        checked: bool,
        writable: bool,
        by_topic: bool,
    ) -> Result<Opened, String> {
        if writable {
            let fenced: Vec<Result<u64, Error>> = stream::iter(regions.iter().copied())
                .map(|region| async move {
                    self.store.fence(&self.provider(region), RegionId::from_u64(region)).await
                })
                .buffer_unordered(OPEN_CONCURRENCY)
                .collect()
                .await;
            for result in fenced {
                result.map_err(|e| format!("fence: {e}"))?;
            }
        }
        let starts = self.starts(model, regions);
        let started = Instant::now();
        let replays = if by_topic {
            self.read_by_topic(&starts).await?
        } else {
            let each: Vec<Result<(u64, Vec<Entry>), String>> = stream::iter(starts.clone())
                .map(|(region, start)| async move {
                    Ok((region, self.read_region(region, start).await?))
                })
                .buffer_unordered(OPEN_CONCURRENCY)
                .collect()
                .await;
            each.into_iter().collect::<Result<HashMap<_, _>, String>>()?
        };
        let opened = Opened::of(started.elapsed(), &replays);
        for (region, replayed) in &replays {
            if checked {
                check(*region, &model.regions.lock().unwrap()[region], replayed)?;
            }
        }
        // Opened: what the region flushed is no longer needed.
        let obsoleted: Vec<Result<(), Error>> = stream::iter(regions.iter().copied())
            .map(|region| async move {
                let flushed = model.regions.lock().unwrap()[&region].checkpoint.unwrap();
                let id = RegionId::from_u64(region);
                self.store.obsolete(&self.provider(region), id, flushed).await
            })
            .buffer_unordered(OPEN_CONCURRENCY)
            .collect()
            .await;
        for result in obsoleted {
            result.map_err(|e| format!("obsolete: {e}"))?;
        }
        Ok(opened)
    }

    /// Replays each region from its start in `from`, by topic, as a follower catching up: per
    /// region, the numbers of the entries read and the id of the last.
    async fn catch_up(&self, from: &HashMap<u64, EntryId>) -> HashMap<u64, (Vec<u64>, EntryId)> {
        let replays = self.read_by_topic(from).await.unwrap();
        replays
            .into_iter()
            .map(|(region, entries)| {
                let numbers = entries.iter().map(|e| number_of(region, e).unwrap()).collect();
                let last = entries.last().map_or(from[&region].saturating_sub(1), Entry::entry_id);
                (region, (numbers, last))
            })
            .collect()
    }

    /// One batch of `regions`, 1 to 3 entries each, recorded in the model.
    async fn write_batch(
        &self,
        model: &Model,
        regions: &[u64],
        rng: &mut u64,
    ) -> Result<(), Error> {
        let mut entries = Vec::new();
        let mut numbers = Vec::new();
        {
            let mut state = model.regions.lock().unwrap();
            for region in regions {
                let region_model = state.entry(*region).or_default();
                let fenced = region_model.fence_done && region_model.fenced_out == Some(self.name);
                for _ in 0..1 + next(rng) % 3 {
                    region_model.next_number += 1;
                    let number = region_model.next_number;
                    // Written after a fence returned: never to be read, whatever the answer.
                    let expect = if fenced { Expect::MustNot } else { Expect::May };
                    region_model.attempts.push((number, expect));
                    let data = data_of(*region, number);
                    let id = RegionId::from_u64(*region);
                    entries.push(self.store.entry(data, 0, id, &self.provider(*region))?);
                    numbers.push((*region, number, fenced));
                }
            }
        }
        let result = self.store.append_batch(entries).await;
        let mut state = model.regions.lock().unwrap();
        if let Ok(response) = &result {
            for (region, number, fenced) in &numbers {
                let region_model = state.get_mut(region).unwrap();
                // Acknowledged, and no fence against this datanode had begun: it must be read.
                if !fenced && region_model.fenced_out != Some(self.name) {
                    for attempt in region_model.attempts.iter_mut().filter(|a| a.0 == *number) {
                        attempt.1 = Expect::Must;
                    }
                }
                // The batch's last entry of the region has its last id, and the highest number.
                // A fenced writer's entries are never read: no checkpoint at one of them.
                let last = (response.last_entry_ids[&RegionId::from_u64(*region)], *number);
                if !fenced && region_model.last_acked.is_none_or(|acked| acked < last) {
                    region_model.last_acked = Some(last);
                }
            }
        }
        result.map(|_| ())
    }

    /// Flushes `region`: its flushed id moves to its last acknowledged entry, then `obsolete`.
    async fn flush(&self, model: &Model, region: u64) -> Result<(), Error> {
        let flushed = {
            let mut regions = model.regions.lock().unwrap();
            let state = regions.get_mut(&region).unwrap();
            let Some((id, number)) = state.last_acked else { return Ok(()) };
            state.checkpoint = Some(id);
            state.attempts.retain(|(n, _)| *n > number);
            id
        };
        self.store.obsolete(&self.provider(region), RegionId::from_u64(region), flushed).await
    }
}

fn next(rng: &mut u64) -> u64 {
    // xorshift64: deterministic and enough to pick regions.
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

/// Writers of one datanode, each on its own share of `regions`, until `stop`; every batch
/// counted in `batches`.
fn start_writers(
    datanode: &Arc<Datanode>,
    model: &Arc<Model>,
    regions: &Arc<Mutex<Vec<u64>>>,
    writers: u64,
    stop: &Arc<AtomicBool>,
    batches: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<Result<(), String>>> {
    (0..writers)
        .map(|w| {
            let (datanode, model, regions) = (datanode.clone(), model.clone(), regions.clone());
            let (stop, batches) = (stop.clone(), batches.clone());
            tokio::spawn(async move {
                let mut rng = 0x9e37_79b9_7f4a_7c15 ^ (w + 1);
                let mut done = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let mine: Vec<u64> = regions
                        .lock()
                        .unwrap()
                        .iter()
                        .copied()
                        .filter(|r| r % writers == w)
                        .collect();
                    let batch: Vec<u64> = (0..16)
                        .map(|_| mine[(next(&mut rng) % mine.len() as u64) as usize])
                        .collect();
                    let mut batch = batch;
                    batch.sort_unstable();
                    batch.dedup();
                    match datanode.write_batch(&model, &batch, &mut rng).await {
                        Ok(()) => {}
                        // The sidecar's restart outlasted the client's retries, or a region of
                        // the batch went to another datanode: the datanode fails these writes
                        // and goes on.
                        Err(s) if RETRIED_LATER.contains(&s.code()) => {}
                        Err(s) => return Err(format!("writer {w}: {s}")),
                    }
                    done += 1;
                    batches.fetch_add(1, Ordering::SeqCst);
                    if done % 20 == 0 {
                        // A flush of a few regions, as memtables fill.
                        // One whose obsolete failed (the sidecar restarting) is done again
                        // at the region's next open; its replay starts after the checkpoint.
                        for region in batch.iter().take(4) {
                            match datanode.flush(&model, *region).await {
                                Err(s) if !RETRIED_LATER.contains(&s.code()) => {
                                    return Err(format!("flush: {s}"))
                                }
                                _ => {}
                            }
                        }
                    }
                }
                Ok(())
            })
        })
        .collect()
}

async fn wait_for_batches(batches: &AtomicU64, at_least: u64) {
    let started = Instant::now();
    while batches.load(Ordering::SeqCst) < at_least {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the writers stopped writing at {} batches",
            batches.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stop_writers(
    stop: &AtomicBool,
    writers: Vec<tokio::task::JoinHandle<Result<(), String>>>,
) {
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.await.unwrap().unwrap();
    }
    stop.store(false, Ordering::SeqCst);
}

fn sidecar_args(socket: &std::path::Path) -> Vec<String> {
    vec![
        format!("--listen=unix://{}", socket.display()),
        // The datanodes' layout: topics of one partition, each shared by about 60 regions.
        format!("--topic_count={TOPICS}"),
        "--partitions_per_topic=1".into(),
    ]
}

// Over 80 lines on purpose: one datanode's life (open, write, crash, replay, migrate) in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datanode_of_1000_regions_through_crashes_and_a_migration() {
    let dir = std::env::temp_dir().join(common::unique_prefix("datanode"));
    std::fs::create_dir_all(&dir).unwrap();
    let (socket_a, socket_b) = (dir.join("a.sock"), dir.join("b.sock"));
    let sidecar_a = Walserver::start("datanode", &sidecar_args(&socket_a));
    let prefix = sidecar_a.prefix.clone();
    let sidecar_b = Walserver::start_on(&prefix, &sidecar_args(&socket_b));
    let target_a = format!("unix://{}", socket_a.display());
    let target_b = format!("unix://{}", socket_b.display());

    let model = Arc::new(Model::default());
    let all: Vec<u64> = (1..=1000).collect();
    // Datanode A opens 1,000 new regions (every replay empty) and leads them.
    let a = Arc::new(Datanode::new('A', &target_a, &prefix, false).await);
    let opened = a.open(&model, &all, true, true, true).await.unwrap();
    assert_eq!(opened.entries, 0);
    let led_by_a = Arc::new(Mutex::new(all.clone()));
    let (stop, batches) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let writers = start_writers(&a, &model, &led_by_a, 4, &stop, &batches);
    wait_for_batches(&batches, 200).await;

    // Migration of regions 1..=40 (ten of them big) to datanode B, through its own sidecar: B
    // catches up by replaying while A writes, then makes them writable, fencing A.
    let migrated: Vec<u64> = (1..=40).collect();
    let b = Arc::new(Datanode::new('B', &target_b, &prefix, false).await);
    let checkpoints: HashMap<u64, EntryId> = {
        let regions = model.regions.lock().unwrap();
        migrated.iter().map(|r| (*r, regions[r].checkpoint.unwrap() + 1)).collect()
    };
    let caught_up = b.catch_up(&checkpoints).await;
    for region in &migrated {
        model.regions.lock().unwrap().get_mut(region).unwrap().fenced_out = Some('A');
        b.store.fence(&b.provider(*region), RegionId::from_u64(*region)).await.unwrap();
        model.regions.lock().unwrap().get_mut(region).unwrap().fence_done = true;
    }
    // Then the tail: from where the catch-up stopped to the fence. Between them, B has read
    // every entry A had acknowledged before the fence began.
    let tail_from: HashMap<u64, EntryId> =
        caught_up.iter().map(|(region, (_, last))| (*region, last + 1)).collect();
    let tail = b.catch_up(&tail_from).await;
    for region in &migrated {
        let (before, after) = (&caught_up[region].0, &tail[region].0);
        let read: HashSet<u64> = before.iter().chain(after).copied().collect();
        assert_eq!(read.len(), before.len() + after.len(), "region {region}: read twice");
        let regions = model.regions.lock().unwrap();
        let attempts: HashMap<u64, Expect> = regions[region].attempts.iter().copied().collect();
        assert!(
            after.iter().all(|n| attempts.get(n) != Some(&Expect::MustNot)),
            "region {region}: the tail holds an entry A wrote after the fence"
        );
        let missed: Vec<u64> = regions[region]
            .attempts
            .iter()
            .filter(|(number, expect)| *expect == Expect::Must && !read.contains(number))
            .map(|(number, _)| *number)
            .collect();
        drop(regions);
        assert!(missed.is_empty(), "region {region}: B never read A's acknowledged {missed:?}");
    }
    led_by_a.lock().unwrap().retain(|r| !migrated.contains(r));
    // A tries them a little longer (its sidecar may not have heard of the fence yet, and may
    // still write what must then never be read).
    // At least 10 tries, and on until its sidecar refused one.
    let mut rng = 7;
    let (mut tries, mut refused) = (0, 0);
    let started = Instant::now();
    while tries < 10 || refused == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "A was never refused after the fence");
        let one = [migrated[(next(&mut rng) % 40) as usize]];
        match a.write_batch(&model, &one, &mut rng).await {
            Err(s) if s.code() == Code::FailedPrecondition => refused += 1,
            other => other.unwrap(),
        }
        tries += 1;
    }
    // What A wrote after the fences is never to be read; the final replays check that.
    let count_fenced = |model: &Model| {
        let regions = model.regions.lock().unwrap();
        regions.values().flat_map(|r| &r.attempts).filter(|(_, e)| *e == Expect::MustNot).count()
    };
    assert!(count_fenced(&model) >= 10);
    let (stop_b, batches_b) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let led_by_b = Arc::new(Mutex::new(migrated.clone()));
    let writers_b = start_writers(&b, &model, &led_by_b, 1, &stop_b, &batches_b);

    // A's sidecar killed under the writes and started again on the same socket.
    let seen = batches.load(Ordering::SeqCst);
    wait_for_batches(&batches, seen + 50).await;
    drop(sidecar_a);
    let sidecar_a = Walserver::start_on(&prefix, &sidecar_args(&socket_a));
    let seen = batches.load(Ordering::SeqCst);
    wait_for_batches(&batches, seen + 200).await;
    wait_for_batches(&batches_b, 100).await;
    stop_writers(&stop, writers).await;
    stop_writers(&stop_b, writers_b).await;

    // Regions dropped by A, once it no longer writes them, as the region engine drops one: its
    // entries obsoleted up to its last, then the region; twice, as a retried drop does.
    let dropped: Vec<u64> = (991..=1000).collect();
    led_by_a.lock().unwrap().retain(|r| !dropped.contains(r));
    for region in &dropped {
        let last = model.regions.lock().unwrap()[region].last_acked;
        if let Some((id, _)) = last {
            a.store.obsolete(&a.provider(*region), RegionId::from_u64(*region), id).await.unwrap();
        }
        for _ in 0..2 {
            a.store.obsolete_all(&a.provider(*region), RegionId::from_u64(*region)).await.unwrap();
        }
        model.regions.lock().unwrap().get_mut(region).unwrap().dropped = true;
    }

    // Datanode A restarts: every region it leads opens again, made writable (a fence each),
    // then replayed by topic, each replay checked; the same replays once more region by region,
    // for comparison (a single region's open). B's regions too, through B's sidecar, and the
    // dropped ones replay empty.
    drop(a);
    let restarted = Datanode::new('A', &target_a, &prefix, false).await;
    let mine: Vec<u64> = led_by_a.lock().unwrap().clone();
    let started = Instant::now();
    let by_topic = restarted.open(&model, &mine, true, true, true).await.unwrap();
    let opened_in = started.elapsed();
    let each = restarted.open(&model, &mine, true, false, false).await.unwrap();
    assert_eq!(each.replayed, by_topic.replayed, "by topic and region by region disagree");
    restarted.open(&model, &dropped, true, false, true).await.unwrap();
    let b_restarted = Datanode::new('B', &target_b, &prefix, false).await;
    let b_opened = b_restarted.open(&model, &migrated, true, true, true).await.unwrap();
    let regions = model.regions.lock().unwrap();
    let acked: usize = regions
        .values()
        .map(|r| r.attempts.iter().filter(|(_, e)| *e == Expect::Must).count())
        .sum();
    let fenced_writes = regions
        .values()
        .map(|r| r.attempts.iter().filter(|(_, e)| *e == Expect::MustNot).count())
        .sum::<usize>();
    eprintln!(
        "datanode restart: {} regions on {TOPICS} topics replayed by topic in {:.2} s (region by \
         region: {:.2} s), opened with fences and obsoletes in {:.2} s, {} entries ({:.1} MiB) \
         replayed; B's {} regions: {} entries in {:.2} s; {acked} acknowledged entries after \
         flushed ids checked, {fenced_writes} written after the fence left out, {} batches",
        mine.len(),
        by_topic.took.as_secs_f64(),
        each.took.as_secs_f64(),
        opened_in.as_secs_f64(),
        by_topic.entries,
        by_topic.bytes as f64 / (1 << 20) as f64,
        migrated.len(),
        b_opened.entries,
        b_opened.took.as_secs_f64(),
        batches.load(Ordering::SeqCst),
    );
    assert!(by_topic.entries > 0 && b_opened.entries > 0);
    drop(regions);
    drop((sidecar_a, sidecar_b));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_finds_a_replay_that_starts_at_the_wrong_entry() {
    let dir = std::env::temp_dir().join(common::unique_prefix("checker"));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("a.sock");
    let _sidecar = Walserver::start("checker", &sidecar_args(&socket));
    let target = format!("unix://{}", socket.display());
    let model = Model::default();
    let regions: Vec<u64> = (1..=20).collect();
    let prefix = _sidecar.prefix.clone();
    let datanode = Datanode::new('A', &target, &prefix, false).await;
    datanode.open(&model, &regions, true, true, true).await.unwrap();
    let mut rng = 11;
    for _ in 0..20 {
        datanode.write_batch(&model, &regions, &mut rng).await.unwrap();
    }
    datanode.flush(&model, 3).await.unwrap();
    datanode.write_batch(&model, &regions, &mut rng).await.unwrap();

    // Right, the checker passes; from the last acknowledged entry, it finds what is missing.
    let again = Datanode::new('A', &target, &prefix, false).await;
    again.open(&model, &regions, true, false, true).await.unwrap();
    let broken = Datanode::new('A', &target, &prefix, true).await;
    let failure = broken.open(&model, &regions, true, false, true).await.err();
    let failure = failure.expect("a replay that starts late went unnoticed");
    assert!(failure.contains("missing from the replay"), "{failure}");
    // And an entry that was flushed, replayed again: a replay from before the checkpoint.
    let mut flushed = RegionModel::default();
    flushed.attempts.push((5, Expect::Must));
    let entry = |n: u64| {
        Entry::Naive(NaiveEntry {
            provider: Provider::kafka_provider("t".into()),
            region_id: RegionId::from_u64(4),
            entry_id: n,
            data: data_of(4, n),
        })
    };
    assert!(check(4, &flushed, &[entry(4), entry(5)]).unwrap_err().contains("flushed"));
    assert!(check(4, &flushed, &[entry(5), entry(5)]).unwrap_err().contains("after 5"));
    assert!(check(4, &flushed, &[entry(5)]).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}
