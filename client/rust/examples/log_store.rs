//! A datanode's WAL on walserver through `walclient::log_store`: open two regions, write a batch
//! of both (their first append creates them), replay one, mark what was flushed obsolete, and
//! show what is left.
//!
//!     cargo run --example log_store -- 127.0.0.1:50051
//!
//! The first argument is walserver's address (default 127.0.0.1:50051); a second, a bearer
//! token for a walserver started with --auth_token_file.

use futures_util::StreamExt;
use walclient::log_store::{LogEntry, LogStore, LogStoreOptions};
use walclient::{Client, ClientOptions, Status};

#[tokio::main]
async fn main() -> Result<(), Status> {
    let mut args = std::env::args().skip(1);
    let mut options = ClientOptions::new(args.next().unwrap_or_else(|| "127.0.0.1:50051".into()));
    options.auth_token = args.next().unwrap_or_default();
    let store = LogStore::new(Client::connect(options).await?, LogStoreOptions::default());

    // Regions 1001 and 1002 become writable on this datanode: fence out any datanode that had
    // them before (a region not yet on walserver is created).
    for region in [1001, 1002] {
        let epoch = store.open_for_write(region).await?;
        println!("region {region}: writer epoch {epoch}");
    }

    // One batch for both regions, as the datanode's write path groups them.
    let last = store
        .append_batch(vec![
            LogEntry::new(1001, "put cpu host=a 0.51"),
            LogEntry::new(1002, "put mem host=a 1024"),
            LogEntry::new(1001, "put cpu host=b 0.77"),
        ])
        .await?;
    for (region, id) in &last.last_entry_ids {
        println!("region {region}: last entry {id}");
    }

    // Replay region 1001 from its first entry, as when it opens after a restart.
    let mut replay = store.read(1001, 0);
    while let Some(entry) = replay.next().await {
        let entry = entry?;
        println!("replay 1001: {} {}", entry.entry_id, String::from_utf8_lossy(&entry.data));
    }

    // Region 1001 flushed everything it has: its WAL may go.
    store.obsolete(1001, last.last_entry_ids[&1001]).await?;
    println!("region 1001 latest entry id: {}", store.latest_entry_id(1001));
    let left = store.client().read_all(1001, 0).await?;
    println!("region 1001 after obsolete: {} entries", left.len());
    Ok(())
}
