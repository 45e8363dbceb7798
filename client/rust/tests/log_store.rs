//! `walclient::log_store` against a real walserver: each way a datanode's log store is called
//! that walserver's plain calls answer differently (see the module's docs).

mod common;

use std::time::{Duration, Instant};

use common::Walserver;
use futures_util::StreamExt;
use walclient::log_store::{entry_id_of, LogEntry, LogStore, LogStoreOptions, ReplayStream};
use walclient::{Client, ClientOptions, Code, Entry, ReadOptions, Status};

fn new_store(client: &Client) -> LogStore {
    LogStore::new(client.clone(), LogStoreOptions::default())
}

async fn replay(stream: ReplayStream) -> Result<Vec<String>, Status> {
    let entries: Vec<Entry> =
        stream.collect::<Vec<_>>().await.into_iter().collect::<Result<_, _>>()?;
    Ok(entries.iter().map(|e| String::from_utf8_lossy(&e.data).into_owned()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regions_are_created_by_their_first_append() {
    let server = Walserver::start("auto_create", &[]);
    let client = server.client().await;
    let store = new_store(&client);

    assert!(store.append_batch(vec![]).await.unwrap().last_entry_ids.is_empty());

    // Region 2 exists, 1 and 3 do not: the batch goes through whole, in order.
    client.create_namespace(2).await.unwrap();
    let last = store
        .append_batch(vec![LogEntry::new(1, "1a"), LogEntry::new(2, "2a"), LogEntry::new(1, "1b")])
        .await
        .unwrap()
        .last_entry_ids;
    assert_eq!(last.len(), 2);
    assert_eq!(replay(store.read(1, 0)).await.unwrap(), ["1a", "1b"]);
    assert_eq!(replay(store.read(2, 0)).await.unwrap(), ["2a"], "region 2's entry written once");
    assert_eq!(store.latest_entry_id(1), last[&1]);
    // The store's ids are walserver's plus one.
    let ids: Vec<u64> = client.read_all(1, 0).await.unwrap().iter().map(|e| e.entry_id).collect();
    assert_eq!(ids.last().map(|id| entry_id_of(*id)), Some(last[&1]));
    // The append sent again after the creations was the same append: the same sequences,
    // none skipped (a region's entries are numbered 1, 2... for a writer).
    let sequences = |n: u64| {
        let client = client.clone();
        async move {
            let entries = client.read_all(n, 0).await.unwrap();
            entries.iter().map(|e| e.sequence).collect::<Vec<_>>()
        }
    };
    assert_eq!(sequences(1).await, [1, 2]);
    assert_eq!(sequences(2).await, [1]);
    // The first entry of the slot has walserver id 0; a region engine that flushed nothing
    // (0) replays from 1, and gets it.
    assert_eq!(ids[0], 0);
    assert_eq!(replay(store.read(1, 1)).await.unwrap(), ["1a", "1b"]);

    // Without auto_create an unknown region fails the batch, and nothing of it is written.
    let strict =
        LogStore::new(client.clone(), LogStoreOptions { auto_create: false, ..Default::default() });
    let status = strict
        .append_batch(vec![LogEntry::new(2, "2b"), LogEntry::new(3, "3a")])
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status}");
    assert_eq!(replay(store.read(2, 0)).await.unwrap(), ["2a"]);
    let listed: Vec<u64> =
        store.list_namespaces().await.unwrap().iter().map(|n| n.namespace_id).collect();
    assert_eq!(listed, [1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_start_wherever_the_checkpoint_says() {
    let server = Walserver::start("replay_start", &[]);
    let client = server.client().await;
    let store = new_store(&client);

    // Never written, or not known at all: empty.
    assert!(replay(store.read(40, 0)).await.unwrap().is_empty());
    client.create_namespace(41).await.unwrap();
    assert!(replay(store.read(41, 0)).await.unwrap().is_empty());
    assert!(replay(store.read(41, 12345)).await.unwrap().is_empty());

    // Another region's entry first, so that no id of 41 is 0 (a start of 0 means "the first").
    client.create_namespace(42).await.unwrap();
    client.append_entries(42, ["x"]).await.unwrap();
    let offsets = client.append_entries(41, ["a", "b", "c", "d"]).await.unwrap();
    assert!(offsets[0] > 0);
    let ids: Vec<u64> = offsets.iter().map(|id| entry_id_of(*id)).collect();
    assert_eq!(replay(store.read(41, ids[2])).await.unwrap(), ["c", "d"]);
    // A checkpoint past the end: empty, where the plain read says OutOfRange.
    let end = client.get_namespace(41).await.unwrap().next_entry_id;
    assert!(replay(store.read(41, end + 100)).await.unwrap().is_empty());
    assert_eq!(client.read_all(41, end + 100).await.unwrap_err().code(), Code::OutOfRange);

    // A checkpoint below what is left after obsolete: from the first entry left.
    store.obsolete(41, ids[1]).await.unwrap();
    assert_eq!(replay(store.read(41, ids[0])).await.unwrap(), ["c", "d"]);
    assert_eq!(replay(store.read(41, 0)).await.unwrap(), ["c", "d"]);
    assert_eq!(client.read_all(41, offsets[0]).await.unwrap_err().code(), Code::OutOfRange);
    // The replay saw the region's last entry.
    assert_eq!(store.latest_entry_id(41), ids[3]);

    // Fully obsolete: empty from anywhere.
    store.obsolete(41, ids[3]).await.unwrap();
    assert!(replay(store.read(41, 0)).await.unwrap().is_empty());
    assert!(replay(store.read(41, ids[1])).await.unwrap().is_empty());

    // Without clamping, the plain read's answers.
    let strict = LogStore::new(
        client.clone(),
        LogStoreOptions { clamp_replay_start: false, ..Default::default() },
    );
    assert_eq!(replay(strict.read(41, ids[1])).await.unwrap_err().code(), Code::OutOfRange);
    assert!(replay(strict.read(40, 0)).await.unwrap().is_empty(), "unknown is still empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_has_no_deadline_but_must_keep_receiving() {
    let server = Walserver::start("replay_deadline", &[]);
    // Every call of this client has 2 s.
    let options = ClientOptions { timeout: Duration::from_secs(2), ..server.options() };
    let client = Client::connect(options).await.unwrap();
    let store = new_store(&client);
    let payload = vec![b'r'; 64 << 10];
    store.append_batch((0..64).map(|_| LogEntry::new(9, payload.clone())).collect()).await.unwrap();

    // walserver frozen for longer than the client's timeout before the replay could begin: the
    // replay waits and completes, a plain read fails (so the first can fail).
    server.pause();
    let replaying = tokio::spawn(replay(store.read(9, 0)));
    let plain = client.clone();
    let reading = tokio::spawn(async move { plain.read_all(9, 0).await });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    server.resume();
    assert_eq!(replaying.await.unwrap().unwrap().len(), 64);
    assert_eq!(reading.await.unwrap().unwrap_err().code(), Code::DeadlineExceeded);

    // A replay whose walserver stops answering ends after the progress timeout.
    let patient = LogStore::new(
        client.clone(),
        LogStoreOptions { replay_progress_timeout: Duration::from_secs(1), ..Default::default() },
    );
    server.pause();
    let started = Instant::now();
    let status = replay(patient.read(9, 0)).await.unwrap_err();
    let took = started.elapsed();
    server.resume();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    assert!(status.message().contains("progress_timeout"), "{status}");
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(2), "{took:?}");
}

/// The next item of a follow read, which must come (an entry or the read's end) within 20 s.
async fn next(follow: &mut walclient::ReadStream) -> Result<Entry, Status> {
    let item = tokio::time::timeout(Duration::from_secs(20), follow.next()).await;
    item.expect("the progress timer never fired").expect("a follow read ends with an error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_progress_timer_starts_again_with_every_message() {
    let server = Walserver::start("progress", &[]);
    let client = server.client().await;
    client.create_namespace(6).await.unwrap();
    client.append_entries(6, ["e0"]).await.unwrap();
    // A follow read with a progress timeout of 3 s, fed an entry every second for 6 s: it gets
    // them all, then ends about 3 s after the last. (Its first entry is there already, so
    // opening the read is not timed against the feed.)
    let mut follow = client.read(ReadOptions {
        follow: true,
        progress_timeout: Some(Duration::from_secs(3)),
        ..ReadOptions::new(6)
    });
    assert_eq!(next(&mut follow).await.unwrap().data, "e0".as_bytes());
    let started = Instant::now();
    let writer = client.clone();
    let feeding = tokio::spawn(async move {
        for i in 1..=6 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            writer.append_entries(6, [format!("e{i}")]).await.unwrap();
        }
    });
    for i in 1..=6 {
        assert_eq!(next(&mut follow).await.unwrap().data, format!("e{i}").as_bytes());
    }
    assert!(started.elapsed() > Duration::from_secs(5), "the entries came over more than 3 s");
    let last = Instant::now();
    let status = next(&mut follow).await.unwrap_err();
    let quiet = last.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(status.message().contains("progress_timeout"), "{status}");
    assert!(quiet >= Duration::from_millis(2700) && quiet < Duration::from_secs(6), "{quiet:?}");
    feeding.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obsolete_and_delete_may_be_called_again() {
    let server = Walserver::start("obsolete", &[]);
    let client = server.client().await;
    let store = new_store(&client);

    // Regions walserver does not know: nothing to do.
    store.obsolete(70, 0).await.unwrap();
    store.obsolete(70, 99).await.unwrap();
    store.delete_namespace(70).await.unwrap();
    store.obsolete_all(70).await.unwrap();

    let last = store
        .append_batch(vec![LogEntry::new(71, "a"), LogEntry::new(71, "b")])
        .await
        .unwrap()
        .last_entry_ids[&71];
    // An id far past the end makes what is there obsolete, not what comes later.
    store.obsolete(71, last + 1_000_000).await.unwrap();
    assert!(replay(store.read(71, 0)).await.unwrap().is_empty());
    store.append_batch(vec![LogEntry::new(71, "c")]).await.unwrap();
    assert_eq!(replay(store.read(71, 0)).await.unwrap(), ["c"]);
    // An older id changes nothing.
    store.obsolete(71, last).await.unwrap();
    assert_eq!(replay(store.read(71, 0)).await.unwrap(), ["c"]);

    // obsolete_all drops the region; again is fine.
    store.obsolete_all(71).await.unwrap();
    store.obsolete_all(71).await.unwrap();
    assert_eq!(client.get_namespace(71).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(store.latest_entry_id(71), 0, "forgotten with the region");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_entry_id_is_answered_from_a_cache_kept_fresh() {
    let server = Walserver::start("latest", &[]);
    let writer = new_store(&server.client().await);
    let every = Duration::from_millis(200);
    let other = LogStore::new(
        server.client().await,
        LogStoreOptions { latest_refresh_interval: every, ..Default::default() },
    );

    let first = writer.append_batch(vec![LogEntry::new(5, "a")]).await.unwrap().last_entry_ids[&5];
    assert_eq!(writer.latest_entry_id(5), first);
    assert_eq!(other.latest_entry_id(5), 0, "a region the store knows nothing of");
    assert_eq!(replay(other.read(5, 0)).await.unwrap(), ["a"]);
    assert_eq!(other.latest_entry_id(5), first, "learnt from the replay");

    // Another store's appends reach this one's cache through the background refresh.
    let later = writer.append_batch(vec![LogEntry::new(5, "b")]).await.unwrap().last_entry_ids[&5];
    let started = Instant::now();
    while other.latest_entry_id(5) < later {
        assert!(started.elapsed() < Duration::from_secs(10), "never refreshed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_happens_when_asked_or_on_replay_when_chosen() {
    let server = Walserver::start("fence_choice", &[]);
    let leader = new_store(&server.client().await);
    leader.open_for_write(3).await.unwrap();
    leader.append_batch(vec![LogEntry::new(3, "a")]).await.unwrap();

    // A follower replays: the leader goes on writing.
    let follower = new_store(&server.client().await);
    assert_eq!(replay(follower.read(3, 0)).await.unwrap(), ["a"]);
    leader.append_batch(vec![LogEntry::new(3, "b")]).await.unwrap();

    // A store that fences on replay takes the region over: the leader is refused from then on.
    let taker = LogStore::new(
        server.client().await,
        LogStoreOptions { fence_on_read: true, ..Default::default() },
    );
    assert_eq!(replay(taker.read(3, 0)).await.unwrap(), ["a", "b"]);
    let before = leader.latest_entry_id(3);
    let status = leader.append_batch(vec![LogEntry::new(3, "c")]).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status}");
    // Fenced, the leader's latest id is asked of walserver in the background: past the fence.
    let started = Instant::now();
    while leader.latest_entry_id(3) <= before {
        assert!(started.elapsed() < Duration::from_secs(10), "never raised past {before}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    taker.append_batch(vec![LogEntry::new(3, "d")]).await.unwrap();
    assert_eq!(replay(follower.read(3, 0)).await.unwrap(), ["a", "b", "d"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_over_64_mib_with_the_limit_raised() {
    // walserver splits an entry over as many Kafka records as it needs; the limit bounds what a
    // read holds in memory, and a datanode with larger entries raises it.
    let entry = vec![b'x'; 70 << 20];
    let server = Walserver::start("large", &["--max_entry_bytes=134217728".to_string()]);
    let store = new_store(&server.client().await);
    store.append_batch(vec![LogEntry::new(8, entry.clone())]).await.unwrap();
    let mut stream = store.read(8, 0);
    let read = stream.next().await.unwrap().unwrap();
    assert_eq!(read.data.len(), entry.len());
    assert!(read.data.iter().all(|b| *b == b'x'));
    assert!(stream.next().await.is_none());

    // At the default limit (64 MiB) an entry just over it is refused, and nothing is written.
    // (Far larger requests meet gRPC's message limit first: ResourceExhausted.)
    let default = Walserver::start("large_default", &[]);
    let store = new_store(&default.client().await);
    let over = vec![b'y'; (64 << 20) + 1];
    let status = store.append_batch(vec![LogEntry::new(8, over)]).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    assert!(replay(store.read(8, 0)).await.unwrap().is_empty());
}
