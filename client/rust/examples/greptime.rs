//! A datanode's WAL on walserver through `walclient::greptime`, GreptimeDB's log store trait:
//! two regions placed in one topic by their first batch, a replay of the topic, and what the
//! first region flushed marked obsolete.
//!
//!     cargo run --example greptime -- 127.0.0.1:50051 greptimedb_wal_topic_0
//!
//! The arguments: walserver's address (default 127.0.0.1:50051), the topic (default
//! greptimedb_wal_topic_0, one of walserver's with --topic_prefix=greptimedb_wal_topic), and a
//! bearer token for a walserver started with --auth_token_file.

use futures_util::StreamExt;
use walclient::greptime::{LogStore, Provider, RegionId, WalserverLogStore};
use walclient::{Client, ClientOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut options = ClientOptions::new(args.next().unwrap_or_else(|| "127.0.0.1:50051".into()));
    let topic = args.next().unwrap_or_else(|| "greptimedb_wal_topic_0".into());
    options.auth_token = args.next().unwrap_or_default();
    let store = WalserverLogStore::new(Client::connect(options).await?);
    let provider = Provider::kafka_provider(topic);
    let (cpu, mem) = (RegionId::new(1024, 0), RegionId::new(1024, 1));

    // New regions start from the topic's latest entry id: their replays skip what is before.
    let flushed = store.refresh_latest_entry_id(&provider).await?;
    println!("{provider}: latest entry id {flushed}");
    // Region cpu becomes writable here: fence out any datanode that had it before.
    println!("region {cpu}: writer epoch {}", store.fence(&provider, cpu).await?);

    // One batch for both regions, as the datanode's write path groups them.
    let written = store
        .append_batch(vec![
            store.entry(b"put cpu host=a 0.51".to_vec(), 0, cpu, &provider)?,
            store.entry(b"put mem host=a 1024".to_vec(), 0, mem, &provider)?,
            store.entry(b"put cpu host=b 0.77".to_vec(), 0, cpu, &provider)?,
        ])
        .await?;
    for (region, id) in &written.last_entry_ids {
        println!("region {region}: last entry {id}");
    }

    // Replay the topic from after the flushed id, as when the regions open after a restart.
    let mut replay = store.read(&provider, flushed + 1, None).await?;
    while let Some(entries) = replay.next().await {
        for entry in entries? {
            let (id, region) = (entry.entry_id(), entry.region_id());
            println!("replay {region}: {id} {}", String::from_utf8_lossy(&entry.into_bytes()));
        }
    }

    // Region cpu flushed everything it has: its WAL may go, and a replay now skips it.
    store.obsolete(&provider, cpu, written.last_entry_ids[&cpu]).await?;
    let mut replay = store.read(&provider, flushed + 1, None).await?;
    let mut left = 0;
    while let Some(entries) = replay.next().await {
        left += entries?.iter().filter(|e| e.region_id() == cpu).count();
    }
    println!("region {cpu} after obsolete: {left} entries");
    println!("{provider}: latest entry id {}", store.latest_entry_id(&provider)?);
    Ok(())
}
