//! `walclient::greptime` against a real walserver: the datanodes' log store tests re-expressed
//! (shuffled batches of several regions, large entries, reads from an entry id), what the
//! topic-shaped trait needs of walserver, and every refusal.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::Walserver;
use futures_util::StreamExt;
use walclient::greptime::{
    Entry, EntryId, LogStore, MultiplePartEntry, MultiplePartHeader, Provider, RegionId,
    WalserverLogStore,
};
use walclient::Code;

/// A walserver with the datanodes' layout: `topics` topics of one partition each.
fn start(test: &str, topics: usize) -> (Walserver, Vec<Provider>) {
    let server = Walserver::start(test, &[format!("--topic_count={topics}")]);
    let providers =
        (0..topics).map(|t| Provider::kafka_provider(format!("{}_{t}", server.prefix))).collect();
    (server, providers)
}

/// Every entry a read of `provider` from `id` gives.
async fn read_all(store: &WalserverLogStore, provider: &Provider, id: EntryId) -> Vec<Entry> {
    let mut stream = store.read(provider, id, None).await.unwrap();
    let mut entries = Vec::new();
    while let Some(batch) = stream.next().await {
        entries.extend(batch.unwrap());
    }
    entries
}

/// Per region: its entries' (id, data), in the order read.
fn by_region(entries: &[Entry]) -> HashMap<RegionId, Vec<(EntryId, Vec<u8>)>> {
    let mut out: HashMap<RegionId, Vec<(EntryId, Vec<u8>)>> = HashMap::new();
    for entry in entries {
        out.entry(entry.region_id())
            .or_default()
            .push((entry.entry_id(), entry.clone().into_bytes()));
    }
    out
}

/// A small deterministic generator (xorshift), for shuffles and sizes.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// 5 regions of 20 entries each of `size(i)` bytes, shuffled into one batch (as their
/// `test_append_batch_basic` does); appended, then read back from the topic's start.
async fn shuffled_batch_round_trip(test: &str, size: impl Fn(&mut u64) -> usize) {
    let (server, providers) = start(test, 1);
    let store = WalserverLogStore::new(server.client().await);
    let provider = &providers[0];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut entries = Vec::new();
    for region in (0..5).map(|r| RegionId::new(1, r)) {
        for i in 0..20u8 {
            let mut data = vec![i; size(&mut rng)];
            data[0] = region.region_number() as u8;
            entries.push(store.entry(data, 0, region, provider).unwrap());
        }
    }
    // Shuffled, but each region's entries keep their order (a stable sort on a random key
    // per region would not mix them): swap only entries of different regions.
    for i in (1..entries.len()).rev() {
        let j = (next(&mut rng) % (i as u64 + 1)) as usize;
        if entries[i].region_id() != entries[j].region_id() {
            entries.swap(i, j);
        }
    }
    let mut order: HashMap<RegionId, Vec<Vec<u8>>> = HashMap::new();
    for entry in &entries {
        order.entry(entry.region_id()).or_default().push(entry.clone().into_bytes());
    }
    let written = store.append_batch(entries).await.unwrap();
    assert_eq!(written.last_entry_ids.len(), 5);
    let read = by_region(&read_all(&store, provider, 0).await);
    for (region, got) in &read {
        let data: Vec<Vec<u8>> = got.iter().map(|(_, d)| d.clone()).collect();
        assert_eq!(data, order[region], "region {region} in the order appended");
        assert_eq!(got.last().unwrap().0, written.last_entry_ids[region], "the ids appends gave");
    }
    assert_eq!(read.len(), 5);
    // The topic's latest entry id is the last one written (walserver's record at offset 0 begins
    // the topic, so no entry has id 0).
    let latest = store.refresh_latest_entry_id(provider).await.unwrap();
    assert_eq!(latest, *written.last_entry_ids.values().max().unwrap());
    assert_eq!(store.latest_entry_id(provider).unwrap(), latest);
    assert!(read.values().all(|entries| entries[0].0 > 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shuffled_batch_of_five_regions_reads_back_in_each_regions_order() {
    shuffled_batch_round_trip("gt_basic", |_| 1024).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_entries_read_back_whole() {
    // 9-31 KiB entries (theirs split them into parts; walserver stores each whole).
    shuffled_batch_round_trip("gt_large", |rng| (9 + next(rng) % 23) as usize * 1024).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_from_an_entry_id_gives_every_region_from_there() {
    let (server, providers) = start("gt_from_id", 1);
    let store = WalserverLogStore::new(server.client().await);
    let provider = &providers[0];
    let (a, b) = (RegionId::new(7, 0), RegionId::new(7, 1));
    let mut ids = Vec::new();
    for i in 0..6u8 {
        let batch = vec![
            store.entry(vec![b'a', i], 0, a, provider).unwrap(),
            store.entry(vec![b'b', i], 0, b, provider).unwrap(),
        ];
        ids.push(store.append_batch(batch).await.unwrap().last_entry_ids);
    }
    let from = ids[3][&a].min(ids[3][&b]);
    let read = by_region(&read_all(&store, provider, from).await);
    for (region, tag) in [(a, b'a'), (b, b'b')] {
        let want: Vec<(EntryId, Vec<u8>)> =
            (3..6u8).map(|i| (ids[i as usize][&region], vec![tag, i])).collect();
        assert_eq!(read[&region], want);
    }
    // From past the last entry: nothing; past the topic's end: OutOfRange.
    let end = store.refresh_latest_entry_id(provider).await.unwrap() + 1;
    assert!(read_all(&store, provider, end).await.is_empty());
    let mut past = store.read(provider, end + 1, None).await.unwrap();
    let error = past.next().await.unwrap().unwrap_err();
    assert_eq!(error.code(), Code::OutOfRange, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_created_on_an_empty_topic_replays_its_first_entry() {
    let (server, providers) = start("gt_empty_topic", 1);
    let store = WalserverLogStore::new(server.client().await);
    let provider = &providers[0];
    store.create_namespace(provider).await.unwrap();
    // The region engine's flushed id for a new region.
    let flushed = provider.initial_flushed_entry_id(&store);
    assert_eq!(flushed, 0, "the topic holds only the record that begins it");
    let region = RegionId::new(3, 0);
    let entry = store.entry(b"first".to_vec(), 0, region, provider).unwrap();
    store.append_batch(vec![entry]).await.unwrap();
    let replayed = by_region(&read_all(&store, provider, flushed + 1).await);
    assert_eq!(replayed[&region].len(), 1, "the first entry is replayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_any_size_goes_in_several_requests_in_order() {
    let (server, providers) = start("gt_any_size", 2);
    // 10 KiB per request: the batch below takes about 40.
    let store = WalserverLogStore::new(server.client().await).with_max_request_bytes(10 << 10);
    let mut entries = Vec::new();
    for i in 0..100u32 {
        for (r, provider) in providers.iter().enumerate() {
            let region = RegionId::new(9, r as u32);
            let mut data = i.to_be_bytes().to_vec();
            data.resize(2000, b'x');
            entries.push(store.entry(data, 0, region, provider).unwrap());
        }
    }
    let written = store.append_batch(entries).await.unwrap();
    for (r, provider) in providers.iter().enumerate() {
        let region = RegionId::new(9, r as u32);
        let read = by_region(&read_all(&store, provider, 0).await);
        let numbers: Vec<u32> = read[&region]
            .iter()
            .map(|(_, d)| u32::from_be_bytes(d[..4].try_into().unwrap()))
            .collect();
        assert_eq!(numbers, (0..100).collect::<Vec<_>>(), "region {region} in order");
        assert_eq!(read[&region].last().unwrap().0, written.last_entry_ids[&region]);
        assert_eq!(read.len(), 1, "only the region placed in {provider}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obsolete_skips_a_regions_old_entries_and_obsolete_all_twice_is_fine() {
    let (server, providers) = start("gt_obsolete", 1);
    let store = WalserverLogStore::new(server.client().await);
    let provider = &providers[0];
    let (a, b) = (RegionId::new(5, 0), RegionId::new(5, 1));
    let mut last = Vec::new();
    for i in 0..4u8 {
        let batch = vec![
            store.entry(vec![i], 0, a, provider).unwrap(),
            store.entry(vec![i], 0, b, provider).unwrap(),
        ];
        last.push(store.append_batch(batch).await.unwrap().last_entry_ids);
    }
    // Region a flushed up to its second entry; a read of the topic from 0 starts it after that.
    store.obsolete(provider, a, last[1][&a]).await.unwrap();
    store.obsolete(provider, a, last[0][&a]).await.unwrap(); // lower: nothing changes
    let read = by_region(&read_all(&store, provider, 0).await);
    assert_eq!(read[&a].iter().map(|(_, d)| d[0]).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(read[&b].len(), 4);
    // Dropped: gone from reads; again, and for a region never written: OK.
    store.obsolete_all(provider, b).await.unwrap();
    store.obsolete_all(provider, b).await.unwrap();
    store.obsolete_all(provider, RegionId::new(5, 99)).await.unwrap();
    store.obsolete(provider, RegionId::new(5, 98), 10).await.unwrap();
    let read = by_region(&read_all(&store, provider, 0).await);
    assert!(!read.contains_key(&b));
    // Written again after the drop: a new region, from its new entries only.
    let again = store.entry(b"new".to_vec(), 0, b, provider).unwrap();
    store.append_batch(vec![again]).await.unwrap();
    let read = by_region(&read_all(&store, provider, 0).await);
    assert_eq!(read[&b].len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_entry_id_is_kept_fresh_without_waiting() {
    let (server, providers) = start("gt_latest", 1);
    let store = WalserverLogStore::new(server.client().await)
        .with_latest_refresh_interval(Duration::from_millis(100));
    let other = WalserverLogStore::new(server.client().await);
    let provider = &providers[0];
    assert_eq!(
        store.latest_entry_id(provider).unwrap(),
        0,
        "unknown yet: 0, asked in the background"
    );
    // Another datanode writes: this store learns of it, first from the lookup its first call
    // started or from its refresher, then, the topic known, from its refresher alone (it
    // neither appends nor reads).
    let region = RegionId::new(6, 0);
    for data in [b"x", b"y"] {
        let entry = other.entry(data.to_vec(), 0, region, provider).unwrap();
        let id = other.append_batch(vec![entry]).await.unwrap().last_entry_ids[&region];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while store.latest_entry_id(provider).unwrap() < id {
            assert!(tokio::time::Instant::now() < deadline, "latest_entry_id never reached {id}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(store.latest_entry_id(provider).unwrap(), id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_a_clear_error() {
    let (server, providers) = start("gt_refusals", 2);
    let store = WalserverLogStore::new(server.client().await).with_max_entry_bytes(1 << 20);
    let region = RegionId::new(8, 0);
    for foreign in [Provider::raft_engine_provider(region.as_u64()), Provider::noop_provider()] {
        let invalid = |e: walclient::greptime::Error| {
            assert_eq!(e.code(), Code::InvalidArgument, "{e}");
            assert!(e.message().contains("Kafka providers only"), "{e}");
            assert!(!e.is_retryable());
        };
        invalid(store.entry(vec![1], 0, region, &foreign).unwrap_err());
        invalid(store.latest_entry_id(&foreign).unwrap_err());
        invalid(store.read(&foreign, 0, None).await.err().unwrap());
        invalid(store.obsolete(&foreign, region, 1).await.unwrap_err());
        invalid(store.obsolete_all(&foreign, region).await.unwrap_err());
        invalid(store.create_namespace(&foreign).await.unwrap_err());
        let entry = Entry::MultiplePart(MultiplePartEntry {
            provider: foreign.clone(),
            region_id: region,
            entry_id: 0,
            headers: vec![MultiplePartHeader::First, MultiplePartHeader::Last],
            parts: vec![vec![1], vec![2]],
        });
        invalid(store.append_batch(vec![entry]).await.unwrap_err());
        assert_eq!(foreign.initial_flushed_entry_id(&store), 0);
    }
    // A topic walserver does not serve.
    let stranger = Provider::kafka_provider("greptimedb_wal_topic_0".into());
    assert_eq!(store.create_namespace(&stranger).await.unwrap_err().code(), Code::InvalidArgument);
    // A region under two providers: in one batch, and across calls.
    let (p0, p1) = (&providers[0], &providers[1]);
    let two = vec![
        store.entry(vec![1], 0, region, p0).unwrap(),
        store.entry(vec![2], 0, region, p1).unwrap(),
    ];
    assert_eq!(store.append_batch(two).await.unwrap_err().code(), Code::InvalidArgument);
    store.append_batch(vec![store.entry(vec![1], 0, region, p0).unwrap()]).await.unwrap();
    for moved in [
        store.append_batch(vec![store.entry(vec![2], 0, region, p1).unwrap()]).await.unwrap_err(),
        WalserverLogStore::new(server.client().await)
            .append_batch(vec![store.entry(vec![2], 0, region, p1).unwrap()])
            .await
            .unwrap_err(),
        store.obsolete(p1, region, 1).await.unwrap_err(),
        store.obsolete_all(p1, region).await.unwrap_err(),
    ] {
        assert_eq!(moved.code(), Code::FailedPrecondition, "{moved}");
        assert!(moved.message().contains(&format!("region {region}")), "{moved}");
    }
    // An entry over walserver's limit; an incomplete entry in parts.
    let big = store.entry(vec![0; (1 << 20) + 1], 0, region, p0).unwrap_err();
    assert_eq!(big.code(), Code::InvalidArgument, "{big}");
    let torn = Entry::MultiplePart(MultiplePartEntry {
        provider: p0.clone(),
        region_id: region,
        entry_id: 0,
        headers: vec![MultiplePartHeader::First, MultiplePartHeader::Middle(1)],
        parts: vec![vec![1], vec![2]],
    });
    assert_eq!(store.append_batch(vec![torn]).await.unwrap_err().code(), Code::InvalidArgument);
    // Nothing of the refused appends was written.
    let read = by_region(&read_all(&store, p0, 0).await);
    assert_eq!(read[&region], vec![(read[&region][0].0, vec![1])]);
    assert!(read_all(&store, p1, 0).await.is_empty());
}

/// Sets a topic's settings as an operator would (`tests/kafka/kafka.sh topic-config`).
fn topic_config(topic: &str, settings: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/kafka/kafka.sh");
    let brokers = std::env::var("WAL_TEST_BROKERS").unwrap();
    let status = std::process::Command::new("bash")
        .args([script, "topic-config", &brokers, topic, settings])
        .status()
        .unwrap();
    assert!(status.success(), "kafka.sh topic-config {topic} {settings}: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_over_entries_kafka_lost_is_data_loss_unless_the_region_obsoleted_them() {
    let (server, providers) = start("gt_lost", 1);
    let client = server.client().await;
    let store = WalserverLogStore::new(client.clone());
    let provider = &providers[0];
    let topic = &provider.as_kafka_provider().unwrap().topic;
    let (kept, flushed) = (RegionId::new(4, 0), RegionId::new(4, 1));
    let mut batch = Vec::new();
    for i in 0..2u8 {
        batch.push(store.entry(vec![b'k', i], 0, kept, provider).unwrap());
        batch.push(store.entry(vec![b'f', i], 0, flushed, provider).unwrap());
    }
    let written = store.append_batch(batch).await.unwrap();
    store.obsolete(provider, flushed, written.last_entry_ids[&flushed]).await.unwrap();
    // Kafka deletes every record by itself (retention set on the topic by hand).
    let end = client.get_slot(topic, 0).await.unwrap().next_entry_id;
    topic_config(topic, "retention.ms=1000");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while client.get_slot(topic, 0).await.unwrap().low_offset < end {
        assert!(tokio::time::Instant::now() < deadline, "retention deleted nothing in 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    topic_config(topic, "retention.ms=-1");
    let again = store.entry(b"k after".to_vec(), 0, kept, provider).unwrap();
    let after = store.append_batch(vec![again]).await.unwrap().last_entry_ids[&kept];

    // From 0: the region that never obsoleted its entries fails the read.
    let mut read = store.read(provider, 0, None).await.unwrap();
    let mut failure = None;
    while let Some(batch) = read.next().await {
        if let Err(error) = batch {
            failure = Some(error);
            break;
        }
    }
    let failure = failure.expect("a read over lost entries went on");
    assert_eq!(failure.code(), Code::DataLoss, "{failure}");
    assert!(failure.message().contains(&format!("region {kept}")), "{failure}");
    // From past the loss, the rest reads; the region that obsoleted all it had is not in the way.
    let read = by_region(&read_all(&store, provider, after).await);
    assert_eq!(read[&kept], vec![(after, b"k after".to_vec())]);
    assert!(!read.contains_key(&flushed));
    store.obsolete_all(provider, kept).await.unwrap();
    assert!(read_all(&store, provider, 0).await.is_empty(), "only the obsoleted region is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_answer_was_lost_is_written_once_with_the_ids_reads_give() {
    let (server, providers) = start("gt_retry", 1);
    let provider = &providers[0];
    let proxy = common::Proxy::start(&server.addr).await;
    let options = walclient::ClientOptions {
        target: proxy.addr.clone(),
        retry_backoff: Duration::from_millis(50),
        ..server.options()
    };
    let store = WalserverLogStore::new(walclient::Client::connect(options).await.unwrap());
    let (a, b) = (RegionId::new(2, 0), RegionId::new(2, 1));
    let batch = |data: &[u8]| {
        vec![
            store.entry(data.to_vec(), 0, a, provider).unwrap(),
            store.entry(data.to_vec(), 0, b, provider).unwrap(),
        ]
    };
    store.append_batch(batch(b"before")).await.unwrap(); // places both regions
                                                         // The batch reaches walserver, which writes it, but its answer is lost and the connection
                                                         // breaks: the client sends it again, saying it is a retry.
    proxy.start_losing_answers();
    let appending = tokio::spawn({
        let (store, entries) = (store.clone(), batch(b"once"));
        async move { store.append_batch(entries).await }
    });
    proxy.lose_answers_for(Duration::from_millis(1500)).await;
    let written = appending.await.unwrap().expect("the retried batch succeeds");
    let read = by_region(&read_all(&store, provider, 0).await);
    for region in [a, b] {
        let once: Vec<&(EntryId, Vec<u8>)> =
            read[&region].iter().filter(|(_, data)| data == b"once").collect();
        assert_eq!(once.len(), 1, "region {region}: {:?}", read[&region]);
        assert_eq!(once[0].0, written.last_entry_ids[&region], "the id reads give");
    }
}
