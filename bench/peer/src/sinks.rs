//! The three ways a datanode can get its entries into Kafka, behind one `append` call:
//! rskafka direct (one produce per call), rskafka behind a merging worker (what the datanodes do
//! today: the calls for one topic merged into one produce, one produce in flight per topic), and
//! walserver through the Rust walclient.

use std::sync::Arc;

use chrono::Utc;
use futures_util::future::try_join_all;
use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::client::Client as KafkaClient;
use rskafka::record::Record;
use tokio::sync::{mpsc, oneshot};
use walclient::{AppendRequest, Bytes, Client as WalClient, Entry};

/// The most bytes the merging worker puts into one produce request.
const MERGED_BATCH_BYTES: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    Direct,
    Merged,
    Walserver,
}

impl PathKind {
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Direct => "rskafka",
            PathKind::Merged => "rskafka+worker",
            PathKind::Walserver => "walserver",
        }
    }
}

/// Where region `r`'s entries go.
pub enum Sink {
    /// One partition client per topic; region r writes to topic r % topics.
    Direct { partitions: Vec<Arc<PartitionClient>>, compression: Compression },
    /// One worker per topic, fed through a channel.
    Merged { workers: Vec<mpsc::UnboundedSender<ProduceRequest>> },
    /// Region r is namespace `namespaces[r]`.
    Walserver { client: WalClient, namespaces: Vec<u64> },
}

pub struct ProduceRequest {
    records: Vec<Record>,
    done: oneshot::Sender<Result<(), String>>,
}

impl Sink {
    pub async fn append(&self, region: usize, entries: &[Bytes]) -> Result<(), String> {
        match self {
            Sink::Direct { partitions, compression } => {
                let partition = &partitions[region % partitions.len()];
                partition
                    .produce(records(entries), *compression)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("rskafka produce: {e}"))
            }
            Sink::Merged { workers } => {
                let (done, answer) = oneshot::channel();
                workers[region % workers.len()]
                    .send(ProduceRequest { records: records(entries), done })
                    .map_err(|_| "merging worker gone".to_string())?;
                answer.await.map_err(|_| "merging worker dropped a request".to_string())?
            }
            Sink::Walserver { client, namespaces } => client
                .append_entries(namespaces[region % namespaces.len()], entries.iter().cloned())
                .await
                .map(|_| ())
                .map_err(|s| format!("walserver append: {s}")),
        }
    }
}

impl Sink {
    /// A datanode's write batch: entry i for region `regions[i]`, in one call. rskafka groups
    /// the entries by topic and produces the groups at once (direct, or through the topics'
    /// merging workers); walserver gets one append of every region's entry.
    pub async fn append_regions(&self, regions: &[usize], entries: &[Bytes]) -> Result<(), String> {
        let by_topic = |topics: usize| {
            let mut groups: Vec<Vec<Bytes>> = vec![Vec::new(); topics];
            for (region, entry) in regions.iter().zip(entries) {
                groups[region % topics].push(entry.clone());
            }
            groups.into_iter().enumerate().filter(|(_, g)| !g.is_empty())
        };
        match self {
            Sink::Direct { partitions, compression } => {
                try_join_all(by_topic(partitions.len()).map(|(topic, group)| async move {
                    partitions[topic]
                        .produce(records(&group), *compression)
                        .await
                        .map(|_| ())
                        .map_err(|e| format!("rskafka produce: {e}"))
                }))
                .await
                .map(|_| ())
            }
            Sink::Merged { workers } => {
                let mut answers = Vec::new();
                for (topic, group) in by_topic(workers.len()) {
                    let (done, answer) = oneshot::channel();
                    workers[topic]
                        .send(ProduceRequest { records: records(&group), done })
                        .map_err(|_| "merging worker gone".to_string())?;
                    answers.push(answer);
                }
                for answer in answers {
                    answer.await.map_err(|_| "merging worker dropped a request".to_string())??;
                }
                Ok(())
            }
            Sink::Walserver { client, namespaces } => {
                let entries = regions
                    .iter()
                    .zip(entries)
                    .map(|(region, data)| Entry {
                        namespace_id: namespaces[region % namespaces.len()],
                        data: data.clone(),
                        ..Default::default()
                    })
                    .collect();
                client
                    .append(AppendRequest { entries, ..Default::default() })
                    .await
                    .map(|_| ())
                    .map_err(|s| format!("walserver append: {s}"))
            }
        }
    }
}

// The datanode encodes each entry into a record of its own: one copy of the payload, as here.
fn records(entries: &[Bytes]) -> Vec<Record> {
    let now = Utc::now();
    entries
        .iter()
        .map(|e| Record {
            key: None,
            value: Some(e.to_vec()),
            headers: Default::default(),
            timestamp: now,
        })
        .collect()
}

pub async fn partition_clients(
    kafka: &KafkaClient,
    topics: &[String],
) -> Result<Vec<Arc<PartitionClient>>, String> {
    let mut partitions = Vec::new();
    for topic in topics {
        let p = kafka
            .partition_client(topic.clone(), 0, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| format!("rskafka partition client of {topic}: {e}"))?;
        partitions.push(Arc::new(p));
    }
    Ok(partitions)
}

/// Starts one merging worker per partition.
pub fn merging_workers(
    partitions: &[Arc<PartitionClient>],
    compression: Compression,
) -> Vec<mpsc::UnboundedSender<ProduceRequest>> {
    partitions
        .iter()
        .map(|p| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(merging_worker(Arc::clone(p), compression, rx));
            tx
        })
        .collect()
}

// Takes every request waiting (up to MERGED_BATCH_BYTES), produces them as one batch, answers
// them all, and only then looks at the channel again.
async fn merging_worker(
    partition: Arc<PartitionClient>,
    compression: Compression,
    mut requests: mpsc::UnboundedReceiver<ProduceRequest>,
) {
    while let Some(first) = requests.recv().await {
        let mut bytes: usize = first.records.iter().map(Record::approximate_size).sum();
        let mut batch = vec![first];
        while bytes < MERGED_BATCH_BYTES {
            match requests.try_recv() {
                Ok(next) => {
                    bytes += next.records.iter().map(Record::approximate_size).sum::<usize>();
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        let mut records = Vec::new();
        let mut answers = Vec::with_capacity(batch.len());
        for request in batch {
            records.extend(request.records);
            answers.push(request.done);
        }
        let result = partition
            .produce(records, compression)
            .await
            .map(|_| ())
            .map_err(|e| format!("rskafka produce (merged): {e}"));
        for answer in answers {
            let _ = answer.send(result.clone());
        }
    }
}
