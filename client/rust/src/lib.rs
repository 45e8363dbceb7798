//! walclient: the Rust client of walserver, the write-ahead-log service on Kafka, for datanodes
//! written in Rust. It has the semantics of the C++ walclient (`client/wal_client.h`).
//!
//! ```no_run
//! # async fn run() -> Result<(), walclient::Status> {
//! use futures_util::StreamExt;
//! use walclient::{Client, ClientOptions, ReadOptions};
//!
//! let client = Client::connect(ClientOptions::new("127.0.0.1:50051")).await?;
//! client.create_namespace(42).await?;
//! client.acquire_namespace(42).await?; // this client becomes region 42's only writer
//! let ids = client.append_entries(42, vec![b"put k1 v1".to_vec(), b"put k2 v2".to_vec()]).await?;
//! let mut entries = client.read(ReadOptions::new(42));
//! while let Some(entry) = entries.next().await {
//!     let entry = entry?;
//!     println!("{} {:?}", entry.entry_id, entry.data);
//! }
//! client.truncate(42, ids[1]).await?; // entries before ids[1] are no longer needed
//! # Ok(())
//! # }
//! ```
//!
//! # Errors
//!
//! Every call returns [`Status`] (tonic's) carrying the gRPC code of walserver's answer:
//!
//! | Code | When |
//! |---|---|
//! | `InvalidArgument` | malformed request: namespace id 0, no entries, an entry over the size limit; a bad option given to [`Client::connect`] |
//! | `NotFound` | unknown or deleted namespace |
//! | `OutOfRange` | a start or truncation point past the end, or a start below `first_entry_id` |
//! | `FailedPrecondition` | the namespace was acquired by another writer (a higher epoch) |
//! | `DataLoss` | records that were never truncated are gone from Kafka, or an entry read does not match its checksum |
//! | `Unavailable` | Kafka or walserver unreachable; safe to retry (see below) |
//! | `ResourceExhausted` | a server limit was reached; retry later |
//! | `DeadlineExceeded` | no answer within the call's deadline |
//! | `Unauthenticated` | no or a wrong bearer token ([`ClientOptions::auth_token`]) |
//! | `Internal` | a bug or a corrupt record |
//!
//! # Deadlines
//!
//! Every call has one deadline, retries included: [`ClientOptions::timeout`] unless the call
//! says otherwise. It is sent to walserver (which stops working on the call when it passes) and
//! enforced here as well, so a call never waits past it for a server that does not answer.
//! Reads without `follow` have the same deadline for the whole stream; follow reads have none
//! unless [`ReadOptions::timeout`] sets one.
//!
//! # Retries
//!
//! Calls that are safe to repeat ([`Client::create_namespace`], [`Client::get_namespace`],
//! [`Client::list_namespaces`], [`Client::truncate`], [`Client::acquire_namespace`], and reads
//! before they delivered anything) are retried on `Unavailable` with exponential backoff and
//! jitter, within the call's deadline; a read (like an append) only while the attempt still has a
//! second after the wait. [`Client::delete_namespace`] is not retried: a retry after a lost
//! answer would report `NotFound`.
//!
//! # Retry-safe appends
//!
//! Every entry this client appends carries the client's writer id and a sequence number per
//! namespace (1, 2, 3...). [`Client::append`] retries after `Unavailable`, and after an attempt
//! ran out of time ([`ClientOptions::append_attempt_timeout`]), with the same writer id and
//! sequences, until the call's deadline, saying when its first attempt was sent. walserver then
//! answers each entry an earlier attempt wrote with that copy's id and writes only the others,
//! also when it restarted in between or the retry reached another walserver on the same topics:
//! the entry is in the log once, and the id an append returns is the one reads give it. Reads
//! still drop a second copy that slipped in (a first copy still on its way in another process
//! when the retry looked), so a retry never shows up twice.
//!
//! # Checksums
//!
//! With [`ClientOptions::checksums`] (the default) every entry this client appends carries the
//! CRC-32C of its data; walserver refuses an entry whose data no longer matches
//! (`InvalidArgument`, nothing written) and keeps the checksum in Kafka with the entry. Every
//! entry read carries its checksum back and the client checks it: a mismatch ends the read with
//! `DataLoss`, never a silently wrong entry.
//!
//! # Fencing
//!
//! [`Client::acquire_namespace`] makes this client the namespace's writer with a new epoch, which
//! the client then sends with every append to that namespace. A writer with an older epoch gets
//! `FailedPrecondition`, and whatever it still manages to write (through a walserver that has
//! not yet heard of the new epoch) is ignored by reads. A client that never acquires sends
//! epoch 0, which works until someone acquires the namespace.
//!
//! # Streams
//!
//! Appends travel on one `AppendStream` call that all clones of a [`Client`] share (fewer calls
//! and wake-ups on both sides than a unary call each); a walserver without it is detected and
//! gets unary `Append` calls. Reads are async [`futures_util::Stream`]s of entries: dropping one
//! cancels its call on walserver. [`Client::read_many`] replays several namespaces on one stream,
//! as a datanode opens its regions.

#![warn(missing_docs)]

mod append_stream;
mod client;
pub mod greptime;
mod read;

/// The generated messages and gRPC stub of walserver's contract (`proto/wal/v1/wal.proto`).
pub mod proto {
    #![allow(missing_docs)]
    tonic::include_proto!("wal.v1");
}

pub use bytes::Bytes;
pub use client::{AcquireResult, Client, ClientOptions, CreateNamespaceResult};
pub use proto::{AppendRequest, Entry, Gap, Namespace, ReadEnd};
pub use read::{
    ReadItem, ReadManyOptions, ReadManyStream, ReadOptions, ReadSlotOptions, ReadStart, ReadStream,
};
pub use tonic::{Code, Status};
