//! The crate against a real walserver on the suite's real Kafka broker (see common/mod.rs).

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{unique_prefix, Walserver};
use futures_util::StreamExt;
use walclient::greptime::{LogStore, Provider, RegionId, WalserverLogStore};
use walclient::{
    AppendRequest, Bytes, Client, ClientOptions, Code, Entry, ReadItem, ReadManyOptions,
    ReadOptions, ReadStart,
};

fn datas(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| String::from_utf8_lossy(&e.data).into_owned()).collect()
}

fn entry(namespace_id: u64, data: &str) -> Entry {
    Entry { namespace_id, data: data.as_bytes().to_vec().into(), ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_and_read_round_trip() {
    let server = Walserver::start("round_trip", &[]);
    let client = server.client().await;

    let created = client.create_namespace(11).await.unwrap();
    assert!(created.created);
    assert_eq!(created.namespace.namespace_id, 11);
    assert!(!client.create_namespace(11).await.unwrap().created, "create is idempotent");

    let ids = client.append_entries(11, ["one", "two", "three"]).await.unwrap();
    assert_eq!(ids.len(), 3);
    assert!(ids[0] < ids[1] && ids[1] < ids[2], "ids increase: {ids:?}");

    let all = client.read_all(11, 0).await.unwrap();
    assert_eq!(datas(&all), ["one", "two", "three"]);
    assert_eq!(all.iter().map(|e| e.entry_id).collect::<Vec<_>>(), ids);
    assert!(all.iter().all(|e| e.namespace_id == 11));

    let from_second = client.read_all(11, ids[1]).await.unwrap();
    assert_eq!(datas(&from_second), ["two", "three"]);
    let limited: Vec<_> = client
        .read(ReadOptions { limit: 1, ..ReadOptions::new(11) })
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(datas(&limited), ["one"]);

    // The unary path gives the same answers as the stream.
    let unary =
        Client::connect(ClientOptions { append_stream: false, ..server.options() }).await.unwrap();
    let more = unary.append_entries(11, ["four"]).await.unwrap();
    assert!(more[0] > ids[2]);
    assert_eq!(datas(&client.read_all(11, 0).await.unwrap()), ["one", "two", "three", "four"]);

    let namespace = client.get_namespace(11).await.unwrap();
    assert!(namespace.next_entry_id > more[0]);
    let listed = client.list_namespaces().await.unwrap();
    assert_eq!(listed.iter().map(|n| n.namespace_id).collect::<Vec<_>>(), [11]);

    // Bad input and unknown namespaces: the codes the docs promise, nothing written.
    assert_eq!(client.create_namespace(0).await.unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(client.append_entries(12, ["x"]).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(
        client.append(AppendRequest::default()).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(client.read_all(12, 0).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(
        client.read_all(11, namespace.next_entry_id + 100).await.unwrap_err().code(),
        Code::OutOfRange
    );
    assert_eq!(client.get_namespace(11).await.unwrap().next_entry_id, namespace.next_entry_id);

    client.delete_namespace(11).await.unwrap();
    assert_eq!(client.get_namespace(11).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(client.delete_namespace(11).await.unwrap_err().code(), Code::NotFound);
    assert!(client.list_namespaces().await.unwrap().is_empty());
}

// Over 80 lines on purpose: the cases of one batch across namespaces, one after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_of_several_namespaces() {
    let server = Walserver::start("batches", &[]);
    let client = server.client().await;
    for ns in [1, 2, 3] {
        client.create_namespace(ns).await.unwrap();
    }
    // One request, entries of three namespaces interleaved.
    let mut request = AppendRequest::default();
    for i in 0..4 {
        for ns in [1, 2, 3] {
            request.entries.push(entry(ns, &format!("{ns}-{i}")));
        }
    }
    let ids = client.append(request).await.unwrap();
    assert_eq!(ids.len(), 12);
    for ns in [1u64, 2, 3] {
        let theirs: Vec<u64> = ids.iter().skip(ns as usize - 1).step_by(3).copied().collect();
        assert!(theirs.windows(2).all(|w| w[0] < w[1]), "namespace {ns}: {theirs:?}");
        let read = client.read_all(ns, 0).await.unwrap();
        assert_eq!(datas(&read), (0..4).map(|i| format!("{ns}-{i}")).collect::<Vec<_>>());
        assert_eq!(read.iter().map(|e| e.entry_id).collect::<Vec<_>>(), theirs);
    }

    // Replay of all three on one stream, plus one that does not exist.
    let mut replay = client.read_many(ReadManyOptions {
        namespaces: [1, 2, 3, 99]
            .into_iter()
            .map(|namespace_id| ReadStart { namespace_id, ..Default::default() })
            .collect(),
        ..Default::default()
    });
    let mut got: HashMap<u64, Vec<String>> = HashMap::new();
    let mut ends = HashMap::new();
    while let Some(item) = replay.next().await {
        match item.unwrap() {
            ReadItem::Entry(e) => {
                assert!(!ends.contains_key(&e.namespace_id), "an entry after its namespace's end");
                got.entry(e.namespace_id)
                    .or_default()
                    .push(String::from_utf8_lossy(&e.data).into_owned());
            }
            ReadItem::End(end) => {
                ends.insert(end.namespace_id, end.code);
            }
            ReadItem::Gap(gap) => panic!("a gap without skip_lost: {gap:?}"),
        }
    }
    assert_eq!(ends, HashMap::from([(1, 0), (2, 0), (3, 0), (99, Code::NotFound as i32)]));
    for ns in [1u64, 2, 3] {
        assert_eq!(got[&ns], (0..4).map(|i| format!("{ns}-{i}")).collect::<Vec<_>>());
    }

    // A namespace named twice is the caller's mistake.
    let twice = ReadManyOptions {
        namespaces: vec![ReadStart { namespace_id: 1, ..Default::default() }; 2],
        ..Default::default()
    };
    let first = client.read_many(twice).next().await.unwrap();
    assert_eq!(first.unwrap_err().code(), Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_created_in_a_chosen_slot_stays_there() {
    let prefix = unique_prefix("chosen");
    let server = Walserver::start_on(&prefix, &["--topic_count=3".into()]);
    let client = server.client().await;
    let last = format!("{prefix}_2");
    let created = client.create_namespace_in(7, &last, 0).await.unwrap();
    assert!(created.created);
    assert_eq!(created.namespace.topic, last);
    assert!(!client.create_namespace_in(7, &last, 0).await.unwrap().created);

    let moved = client.create_namespace_in(7, &format!("{prefix}_0"), 0).await.unwrap_err();
    assert_eq!(moved.code(), Code::FailedPrecondition, "{moved:?}");
    assert_eq!(client.get_namespace(7).await.unwrap().topic, last);

    let not_ours = client.create_namespace_in(8, &format!("{prefix}_3"), 0).await.unwrap_err();
    assert_eq!(not_ours.code(), Code::InvalidArgument, "{not_ours:?}");
    assert_eq!(client.get_namespace(8).await.unwrap_err().code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_and_obsolete() {
    let server = Walserver::start("truncate", &[]);
    let client = server.client().await;
    client.create_namespace(5).await.unwrap();
    let ids = client.append_entries(5, ["a", "b", "c", "d", "e"]).await.unwrap();

    let namespace = client.truncate(5, ids[2]).await.unwrap();
    assert_eq!(namespace.first_entry_id, ids[2]);
    assert_eq!(datas(&client.read_all(5, 0).await.unwrap()), ["c", "d", "e"]);
    assert_eq!(client.read_all(5, ids[1]).await.unwrap_err().code(), Code::OutOfRange);

    // Monotonic: a lower point changes nothing.
    assert_eq!(client.truncate(5, ids[0]).await.unwrap().first_entry_id, ids[2]);
    let end = client.get_namespace(5).await.unwrap().next_entry_id;
    assert_eq!(client.truncate(5, end + 1000).await.unwrap_err().code(), Code::OutOfRange);
    assert_eq!(client.truncate(0, 1).await.unwrap_err().code(), Code::InvalidArgument);

    // The datanodes' obsolete(id): that entry and those before it go.
    let store = WalserverLogStore::new(client.clone());
    let namespace = client.get_namespace(5).await.unwrap();
    let provider = Provider::kafka_provider(namespace.topic);
    store.obsolete(&provider, RegionId::from_u64(5), ids[3]).await.unwrap();
    assert_eq!(datas(&client.read_all(5, 0).await.unwrap()), ["e"]);
    assert_eq!(client.get_namespace(5).await.unwrap().first_entry_id, ids[3] + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_epoch_is_fenced_and_its_late_writes_not_read() {
    // Two walservers on the same topics, as two sidecars: the old writer's walserver may not
    // have heard of the new epoch yet when the old writer appends.
    let first = Walserver::start("fencing", &[]);
    let second = Walserver::start_on(&first.prefix, &[]);
    let old_writer = first.client().await;
    let new_writer = second.client().await;

    old_writer.create_namespace(9).await.unwrap();
    let old_epoch = old_writer.acquire_namespace(9).await.unwrap().epoch;
    old_writer.append_entries(9, ["old-1"]).await.unwrap();

    let acquired = new_writer.acquire_namespace(9).await.unwrap();
    assert!(acquired.epoch > old_epoch);
    assert_eq!(acquired.namespace.epoch, acquired.epoch);
    new_writer.append_entries(9, ["new-1"]).await.unwrap();

    // The old writer keeps appending until its walserver refuses: every late write that got
    // through must be invisible to reads.
    let started = Instant::now();
    let mut fenced = false;
    let mut late = 0;
    while started.elapsed() < Duration::from_secs(20) {
        match old_writer.append_entries(9, [format!("late-{late}")]).await {
            Ok(_) => late += 1,
            Err(status) => {
                assert_eq!(status.code(), Code::FailedPrecondition, "{status}");
                fenced = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(fenced, "the old writer was never refused");
    new_writer.append_entries(9, ["new-2"]).await.unwrap();

    // The new writer's walserver refuses the old epoch at once.
    let mut stale = AppendRequest::default();
    stale.entries.push(Entry { epoch: old_epoch, ..entry(9, "stale") });
    assert_eq!(new_writer.append(stale).await.unwrap_err().code(), Code::FailedPrecondition);

    for reader in [&old_writer, &new_writer] {
        assert_eq!(datas(&reader.read_all(9, 0).await.unwrap()), ["old-1", "new-1", "new-2"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_append_is_written_once() {
    let server = Walserver::start("retry", &[]);
    let proxy = common::Proxy::start(&server.addr).await;
    // Through the append stream and as unary calls: each retries on a new connection.
    for (namespace_id, append_stream) in [(3u64, true), (4, false)] {
        let options = ClientOptions {
            target: proxy.addr.clone(),
            append_stream,
            retry_backoff: Duration::from_millis(50),
            ..server.options()
        };
        let client = Client::connect(options).await.unwrap();
        client.create_namespace(namespace_id).await.unwrap();
        client.append_entries(namespace_id, ["before"]).await.unwrap();
        let end_before = client.get_namespace(namespace_id).await.unwrap().next_entry_id;

        // The append reaches walserver, which writes it, but its answer is lost and the
        // connection breaks: the client sends it again, with the same writer id and sequence.
        proxy.start_losing_answers();
        let appending = tokio::spawn({
            let client = client.clone();
            async move { client.append_entries(namespace_id, ["once"]).await }
        });
        proxy.lose_answers_for(Duration::from_millis(1500)).await;
        let ids = appending.await.unwrap().expect("the retried append succeeds");

        // The retries said so, and walserver found the first copy: one copy is in Kafka (the
        // slot holds only this test's namespaces, written one at a time)...
        let end_after = client.get_namespace(namespace_id).await.unwrap().next_entry_id;
        assert_eq!(
            end_after,
            end_before + 1,
            "stream {append_stream}: the retry was written again: slot end {end_before} -> {end_after}"
        );
        // ...and the answer names it, as a read does.
        let read = client.read_all(namespace_id, 0).await.unwrap();
        assert_eq!(datas(&read), ["before", "once"], "stream {append_stream}");
        assert_eq!(read[1].entry_id, ids[0], "the answer names the copy reads deliver");
    }
}

/// A read with `resume` whose connection dropped opens again past what it delivered, as one
/// read: an entry whose writer retried it after the read got it, its copy lying past where the
/// read resumed, is not delivered a second time. Without `resume` the same cut ends the read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_read_delivers_an_entry_retried_past_its_resumption_once() {
    let server = Walserver::start("resume", &[]);
    let writer = server.client().await;
    writer.create_namespace(1).await.unwrap();
    let proxy = common::Proxy::start(&server.addr).await;
    let options = ClientOptions {
        target: proxy.addr.clone(),
        retry_backoff: Duration::from_millis(20),
        ..server.options()
    };
    let reader = Client::connect(options).await.unwrap();
    // As a writer's first attempt and its retry would send it: same writer id and sequence.
    let append = |sequence: u64, data: &'static str| {
        let writer = writer.clone();
        async move {
            let entry = Entry {
                namespace_id: 1,
                data: Bytes::from_static(data.as_bytes()),
                sequence,
                ..Default::default()
            };
            writer
                .append(AppendRequest { entries: vec![entry], writer_id: 77, ..Default::default() })
                .await
                .unwrap()[0]
        }
    };

    let first = append(1, "e").await;
    let mut read = reader.read(ReadOptions { follow: true, resume: true, ..ReadOptions::new(1) });
    let got = read.next().await.unwrap().unwrap();
    assert_eq!((got.data.as_ref(), got.writer_id), (b"e".as_ref(), 77));

    // The read's connection drops; meanwhile a writer that never heard its answer sends "e"
    // again without saying it is a retry (as a client older than first_attempt_age_ms does, so
    // walserver writes a second copy), then appends "f".
    proxy.cut_existing();
    let copy = append(1, "e").await;
    assert!(copy > first);
    let last = append(2, "f").await;
    let got = tokio::time::timeout(Duration::from_secs(30), read.next())
        .await
        .expect("the read did not resume")
        .unwrap()
        .unwrap();
    assert_eq!(got.data.as_ref(), b"f", "entry {} (the copy is {copy})", got.entry_id);
    assert!(proxy.connections() >= 2, "the read never opened again");

    // Without resume, the same cut ends the read.
    let mut plain =
        reader.read(ReadOptions { follow: true, start_entry_id: last, ..ReadOptions::new(1) });
    assert!(plain.next().await.unwrap().is_ok());
    proxy.cut_existing();
    let end = tokio::time::timeout(Duration::from_secs(30), plain.next()).await.unwrap();
    assert_eq!(end.unwrap().unwrap_err().code(), Code::Unavailable);
}

/// A connection cut off without a FIN or RST (a black hole: a dropped NAT entry, a host that lost
/// power) is found by the client's keepalive pings with the default settings: appends with a 5 s
/// deadline work again, and a follow read ends `Unavailable`, both within 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_connection_is_left_within_30_seconds() {
    let server = Walserver::start("black_hole", &[]);
    let proxy = common::Proxy::start(&server.addr).await;
    let options = ClientOptions {
        target: proxy.addr.clone(),
        timeout: Duration::from_secs(5),
        ..ClientOptions::default()
    };
    let client = Client::connect(options).await.unwrap();
    client.create_namespace(9).await.unwrap();
    client.append_entries(9, ["before"]).await.unwrap();
    let mut follower = client.read(ReadOptions { follow: true, ..ReadOptions::new(9) });
    let first = follower.next().await.unwrap().unwrap();
    assert_eq!(first.data.as_ref(), b"before");

    proxy.black_hole_existing();
    let cut = Instant::now();
    let follow_end = tokio::spawn(async move {
        while let Some(item) = follower.next().await {
            if let Err(status) = item {
                return (status.code(), cut.elapsed());
            }
        }
        (Code::Ok, cut.elapsed())
    });
    let mut failed = 0;
    while let Err(status) = client.append_entries(9, ["after"]).await {
        failed += 1;
        assert!(cut.elapsed() < Duration::from_secs(60), "appends still fail: {status}");
    }
    let recovered = cut.elapsed();
    eprintln!("RESULT appends failed for {recovered:?} ({failed} calls) after the black hole");
    assert!(recovered < Duration::from_secs(30));
    let (code, ended_after) = tokio::time::timeout(Duration::from_secs(30), follow_end)
        .await
        .expect("the follow read still waits on the dead connection")
        .unwrap();
    eprintln!("RESULT the follow read ended after {ended_after:?}: {code:?}");
    assert_eq!(code, Code::Unavailable);
    assert!(ended_after < Duration::from_secs(30));
    assert!(proxy.connections() >= 2);

    // A follow read from where it ended gets the entry appended since, on the new connection.
    let start =
        ReadOptions { follow: true, start_entry_id: first.entry_id + 1, ..ReadOptions::new(9) };
    let mut follower = client.read(start);
    let next = follower.next().await.unwrap().unwrap();
    assert_eq!(next.data.as_ref(), b"after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_at_their_deadline() {
    let server = Walserver::start("deadlines", &[]);
    // Set-up with the default patience; the calls under test with 1.5 s.
    let patient = server.client().await;
    patient.create_namespace(4).await.unwrap();
    patient.append_entries(4, ["x"]).await.unwrap();
    let options = ClientOptions { timeout: Duration::from_millis(1500), ..server.options() };
    let client = Client::connect(options).await.unwrap();
    client.get_namespace(4).await.unwrap(); // connected

    // A follow read with a deadline ends with DeadlineExceeded after delivering what there is.
    let started = Instant::now();
    let follow =
        ReadOptions { follow: true, timeout: Some(Duration::from_secs(3)), ..ReadOptions::new(4) };
    let items: Vec<_> = client.read(follow).collect().await;
    let took = started.elapsed();
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap().data.as_ref(), b"x");
    assert_eq!(items[1].as_ref().unwrap_err().code(), Code::DeadlineExceeded);
    // walserver answers a little before the deadline, so that the caller hears why.
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(8), "{took:?}");

    // A walserver that answers nothing: each call ends at its deadline, retries included.
    server.pause();
    for call in ["get_namespace", "append", "read"] {
        let started = Instant::now();
        let status = match call {
            "get_namespace" => client.get_namespace(4).await.map(|_| ()).unwrap_err(),
            "append" => client.append_entries(4, ["y"]).await.map(|_| ()).unwrap_err(),
            _ => client.read_all(4, 0).await.map(|_| ()).unwrap_err(),
        };
        let took = started.elapsed();
        server_check(call, status.code(), took);
    }
    server.resume();
    assert_eq!(client.get_namespace(4).await.unwrap().namespace_id, 4);
}

fn server_check(call: &str, code: Code, took: Duration) {
    assert_eq!(code, Code::DeadlineExceeded, "{call}");
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(4),
        "{call} took {took:?}"
    );
}

// Over 80 lines on purpose: one stalled read and the others beside it, in the order it happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_read_blocks_no_one_and_is_cancelled_when_dropped() {
    let server = Walserver::start("stalled", &[]);
    let client = server.client().await;
    client.create_namespace(6).await.unwrap();
    // 32 MiB: more than the client's HTTP/2 stream window (8 MiB) and walserver's read queue
    // (8 MiB) hold together, so the stalled reader really stalls walserver's side of its stream.
    let payload = vec![b'p'; 4096];
    for _ in 0..40 {
        client.append_entries(6, std::iter::repeat_n(payload.clone(), 200)).await.unwrap();
    }

    let mut stalled = client.read(ReadOptions { follow: true, ..ReadOptions::new(6) });
    assert!(stalled.next().await.unwrap().is_ok());
    // The stalled stream is not polled again; another read of the same slot still completes.
    let started = Instant::now();
    assert_eq!(client.read_all(6, 0).await.unwrap().len(), 8000);
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(server.metric("walserver_reads_in_progress"), 1.0, "the stalled read is open");

    drop(stalled);
    let started = Instant::now();
    while server.metric("walserver_reads_in_progress") != 0.0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the dropped read still runs on walserver"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_and_unix_socket() {
    let dir = std::env::temp_dir().join(common::unique_prefix("auth"));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let socket = dir.join("wal.sock");
    let server = Walserver::start(
        "auth",
        &[
            format!("--auth_token_file={}", token_file.display()),
            format!("--listen=unix://{}", socket.display()),
        ],
    );
    let target = format!("unix://{}", socket.display());

    let anonymous = Client::connect(ClientOptions { target: target.clone(), ..server.options() })
        .await
        .unwrap();
    assert_eq!(anonymous.create_namespace(1).await.unwrap_err().code(), Code::Unauthenticated);
    assert_eq!(anonymous.append_entries(1, ["x"]).await.unwrap_err().code(), Code::Unauthenticated);

    let wrong =
        ClientOptions { target: target.clone(), auth_token: "guess".into(), ..server.options() };
    assert_eq!(
        Client::connect(wrong).await.unwrap().get_namespace(1).await.unwrap_err().code(),
        Code::Unauthenticated
    );

    let options = ClientOptions { target, auth_token: "s3cret".into(), ..server.options() };
    let client = Client::connect(options).await.unwrap();
    client.create_namespace(1).await.unwrap();
    client.append_entries(1, ["x", "y"]).await.unwrap();
    assert_eq!(datas(&client.read_all(1, 0).await.unwrap()), ["x", "y"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(any(feature = "tls-ring", feature = "tls-aws-lc"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls() {
    let dir = std::env::temp_dir().join(common::unique_prefix("tls"));
    std::fs::create_dir_all(&dir).unwrap();
    // A CA and a server certificate for 127.0.0.1 it signed.
    let script = "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca \
        && openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost \
        && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > server.ext \
        && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile server.ext";
    let made =
        std::process::Command::new("sh").arg("-c").arg(script).current_dir(&dir).output().unwrap();
    assert!(made.status.success(), "openssl: {}", String::from_utf8_lossy(&made.stderr));
    let server = Walserver::start(
        "tls",
        &[
            format!("--tls_cert_file={}", dir.join("server.pem").display()),
            format!("--tls_key_file={}", dir.join("server.key").display()),
        ],
    );

    let options = ClientOptions { tls_ca_file: Some(dir.join("ca.pem")), ..server.options() };
    let client = Client::connect(options).await.unwrap();
    client.create_namespace(2).await.unwrap();
    client.append_entries(2, ["secret"]).await.unwrap();
    assert_eq!(datas(&client.read_all(2, 0).await.unwrap()), ["secret"]);

    // Plaintext to a TLS listener fails, and so does a CA that did not sign the server's key.
    let plain = ClientOptions { max_retries: 0, ..server.options() };
    assert_eq!(
        Client::connect(plain).await.unwrap().get_namespace(2).await.unwrap_err().code(),
        Code::Unavailable
    );
    let wrong_ca = ClientOptions {
        tls_ca_file: Some(dir.join("server.pem")),
        max_retries: 0,
        ..server.options()
    };
    assert!(Client::connect(wrong_ca).await.unwrap().get_namespace(2).await.is_err());

    // Options that cannot work are refused at connect.
    let missing = ClientOptions { tls_ca_file: Some(dir.join("nope.pem")), ..server.options() };
    assert_eq!(Client::connect(missing).await.err().unwrap().code(), Code::InvalidArgument);
    let half = ClientOptions { tls_cert_file: Some(dir.join("server.pem")), ..server.options() };
    assert_eq!(Client::connect(half).await.err().unwrap().code(), Code::InvalidArgument);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_greptime_example_runs() {
    let server = Walserver::start("example", &[]);
    let topic = format!("{}_0", server.prefix);
    // cargo test builds the examples next to the test binaries' folder.
    let test_binary = std::env::current_exe().unwrap();
    let example = test_binary.parent().unwrap().parent().unwrap().join("examples/greptime");
    let output = tokio::process::Command::new(&example)
        .args([&server.addr, &topic])
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!("{}: {e} (plain `cargo test` builds the examples)", example.display())
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}: {stdout}{}",
        example.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "writer epoch 1",
        "replay 4398046511104(1024, 0): ",
        "put cpu host=b 0.77",
        "after obsolete: 0 entries",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    let client = server.client().await;
    assert_eq!(client.read_all((1024 << 32) | 1, 0).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_go_on_across_a_walserver_restart() {
    let dir = std::env::temp_dir().join(common::unique_prefix("restart"));
    std::fs::create_dir_all(&dir).unwrap();
    let listen = [format!("--listen=unix://{}", dir.join("wal.sock").display())];
    let first = Walserver::start("restart", &listen);
    let prefix = first.prefix.clone();
    let client = first.client().await;
    client.create_namespace(8).await.unwrap();
    client.append_entries(8, ["before"]).await.unwrap();

    // kill -9 under the client's append stream; the append made meanwhile waits for the next
    // walserver on the same socket and topics, on a new stream.
    drop(first);
    let appending = tokio::spawn({
        let client = client.clone();
        async move { client.append_entries(8, ["during"]).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _second = Walserver::start_on(&prefix, &listen);
    appending.await.unwrap().expect("the append made while walserver restarted");
    client.append_entries(8, ["after"]).await.unwrap();
    assert_eq!(datas(&client.read_all(8, 0).await.unwrap()), ["before", "during", "after"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_large_appends_at_once() {
    // walserver takes at most max_entry_bytes + 4 MiB in one stream message (12 MiB here):
    // 24 appends of 600 KiB made together (14 MiB) must not go as one message.
    let limits =
        ["--max_entry_bytes=8388608".to_string(), "--max_inflight_append_bytes=268435456".into()];
    let server = Walserver::start("large", &limits);
    let client = server.client().await;
    client.create_namespace(1).await.unwrap();
    let appends: Vec<_> = (0..24u8)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { client.append_entries(1, [vec![i; 600 << 10]]).await })
        })
        .collect();
    for append in appends {
        append.await.unwrap().expect("a 600 KiB append among 24");
    }
    // A request larger than a stream message goes as a unary call.
    client.append_entries(1, [vec![b'L'; 5 << 20]]).await.unwrap();
    let read = client.read_all(1, 0).await.unwrap();
    assert_eq!(read.len(), 25);
    assert_eq!(read[24].data.len(), 5 << 20);
    let mut firsts: Vec<u8> = read[..24].iter().map(|e| e.data[0]).collect();
    firsts.sort();
    assert_eq!(firsts, (0..24).collect::<Vec<u8>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksums_travel_end_to_end() {
    let server = Walserver::start("checksums", &[]);
    let client = server.client().await;
    client.create_namespace(2).await.unwrap();
    client.append_entries(2, ["sent with a checksum"]).await.unwrap();
    for entry in client.read_all(2, 0).await.unwrap() {
        assert_eq!(entry.crc32c, Some(crc32c::crc32c(&entry.data)));
    }

    // Data that changed after its checksum was computed is refused, and nothing is written.
    let end = client.get_namespace(2).await.unwrap().next_entry_id;
    let mut corrupted = AppendRequest::default();
    corrupted
        .entries
        .push(Entry { crc32c: Some(crc32c::crc32c(b"original")), ..entry(2, "0riginal") });
    let status = client.append(corrupted).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status}");
    assert!(status.message().contains("crc32c"), "{status}");
    assert_eq!(client.get_namespace(2).await.unwrap().next_entry_id, end);
    assert_eq!(datas(&client.read_all(2, 0).await.unwrap()), ["sent with a checksum"]);
}

/// A record in walserver's format (docs/ARCHITECTURE.md, "Data records") whose data changed
/// after its checksum was computed, written straight into a slot with kcat.
fn write_corrupt_record(topic: &str, partition: i32, key: &str) {
    let (good, bad) = (b"two".as_slice(), b"twO".as_slice());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let mut record = vec![1u8, 1];
    record.extend(76u16.to_be_bytes());
    record.extend(crc32c::crc32c(good).to_be_bytes());
    record.extend((good.len() as u64).to_be_bytes());
    record.extend(4242u64.to_be_bytes()); // nonce
    record.extend(0u32.to_be_bytes()); // chunk index
    record.extend([0u8; 40]); // epoch, writer id, sequence, session, origin
    record.extend((now.as_millis() as i64).to_be_bytes());
    assert_eq!(record.len(), 76);
    record.extend(bad);
    let file = std::env::temp_dir().join(common::unique_prefix("corrupt"));
    std::fs::write(&file, record).unwrap();
    let brokers = std::env::var("WAL_TEST_BROKERS").unwrap();
    let status = std::process::Command::new("kcat")
        .args(["-P", "-b", &brokers, "-t", topic, "-p", &partition.to_string(), "-k", key])
        .arg(&file)
        .status()
        .expect("kcat (scripts/setup.sh --test installs it)");
    assert!(status.success());
    let _ = std::fs::remove_file(file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_a_time_and_past_what_is_lost() {
    let server = Walserver::start("recovery", &[]);
    let client = server.client().await;
    // An id whose 8-byte key reads "ABCDEFGH", so kcat can write to it.
    let ns = u64::from_be_bytes(*b"ABCDEFGH");
    let namespace = client.create_namespace(ns).await.unwrap().namespace;
    client.append_entries(ns, ["old"]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
        as u64;
    tokio::time::sleep(Duration::from_millis(5)).await;
    write_corrupt_record(&namespace.topic, namespace.partition, "ABCDEFGH");
    client.append_entries(ns, ["new"]).await.unwrap();

    // Without skip_lost: the entries before the corrupt one, then DataLoss.
    let items: Vec<_> = client.read(ReadOptions::new(ns)).collect().await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap().data.as_ref(), b"old");
    assert_eq!(items[1].as_ref().unwrap_err().code(), Code::DataLoss);

    // With it: the gap in its place, and the read goes on.
    let options = ReadOptions { skip_lost: true, ..ReadOptions::new(ns) };
    let items: Vec<_> = client.read_with_gaps(options.clone()).collect().await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert!(matches!(&items[0], Ok(ReadItem::Entry(e)) if e.data.as_ref() == b"old"));
    let Ok(ReadItem::Gap(gap)) = &items[1] else { panic!("no gap: {items:?}") };
    assert_eq!(gap.reason(), walclient::proto::gap::Reason::Undecodable);
    assert_eq!(gap.to_entry_id, gap.from_entry_id + 1);
    assert!(matches!(&items[2], Ok(ReadItem::Entry(e)) if e.data.as_ref() == b"new"));
    // read() leaves the gaps out.
    let entries: Vec<_> = client.read(options).collect().await;
    assert_eq!(entries.len(), 2, "{entries:?}");

    // From a time: the first entry appended at or after it (the corrupt entry, also after it,
    // is passed as a gap).
    let from_t = ReadOptions { start_time_ms: t, skip_lost: true, ..ReadOptions::new(ns) };
    assert_eq!(datas(&collect_entries(client.read(from_t)).await), ["new"]);
    let both = ReadOptions { start_time_ms: t, start_entry_id: 1, ..ReadOptions::new(ns) };
    let first = client.read(both).next().await.unwrap();
    assert_eq!(first.unwrap_err().code(), Code::InvalidArgument);
}

async fn collect_entries(stream: walclient::ReadStream) -> Vec<Entry> {
    stream.map(|e| e.unwrap()).collect().await
}
