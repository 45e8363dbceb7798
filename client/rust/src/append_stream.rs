//! Appends multiplexed on one `AppendStream` call that all clones of a Client share.
//!
//! Each append attempt is tagged with a request id, queued, and answered once by id. The caller
//! (Client::append) waits with its attempt's deadline and retries on its own, so this file only
//! carries messages. A stream that ends fails every attempt waiting on it (their outcome is
//! unknown: UNAVAILABLE, so they are retried), and the next attempt opens a new stream. An
//! attempt that runs out of time retires its stream too: a walserver that stopped answering, or
//! a connection that stopped moving, must not keep every later append waiting on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::client::{until, Client};
use crate::proto::wal_service_client::WalServiceClient;
use crate::proto::{AppendRequest, AppendStreamRequest, StreamedAppend};

/// walserver refuses more appends than this in one message.
const MAX_APPENDS_PER_MESSAGE: usize = 4096;
/// A message carries at most this many bytes of appends, unless one append alone is larger;
/// requests larger than this go as unary calls (walserver takes at most its entry limit plus
/// 4 MiB in one message, and one large message would hold up the small ones behind it).
pub(crate) const MAX_MESSAGE_BYTES: usize = 4 << 20;

type Answer = oneshot::Sender<Result<Vec<u64>, Status>>;

pub(crate) struct AppendStreamer {
    next_request_id: AtomicU64,
    /// False once walserver answered UNIMPLEMENTED: it has no AppendStream.
    supported: Arc<AtomicBool>,
    current: Mutex<Option<OpenStream>>,
}

/// The stream in use. Dropping it (with the Client) ends the stream once walserver answered.
struct OpenStream {
    outbound: mpsc::UnboundedSender<Queued>,
    waiting: Arc<Waiting>,
    /// Cancels the call: its task owns the response, and the request body with it.
    task: AbortHandle,
}

/// An attempt waiting for its message to be written.
struct Queued {
    request_id: u64,
    request: AppendRequest,
    deadline: Instant,
}

/// Attempts sent on one stream and not yet answered.
#[derive(Default)]
struct Waiting {
    state: Mutex<WaitingState>,
}

#[derive(Default)]
struct WaitingState {
    answers: HashMap<u64, Answer>,
    /// Set once, with why, when the stream ended; later attempts must open a new one.
    ended: Option<Status>,
}

impl Waiting {
    /// Fails every attempt still waiting, and every one that would start waiting later. The
    /// first end wins.
    fn end(&self, status: Status) {
        let answers = {
            let mut state = self.state.lock().unwrap();
            if state.ended.is_some() {
                return;
            }
            state.ended = Some(status.clone());
            std::mem::take(&mut state.answers)
        };
        for (_, answer) in answers {
            let _ = answer.send(Err(status.clone()));
        }
    }

    fn is_waiting(&self, request_id: u64) -> bool {
        self.state.lock().unwrap().answers.contains_key(&request_id)
    }
}

/// Ends the stream's Waiting however its task ends: finished, failed, or dropped with its
/// runtime.
struct EndOnDrop(Arc<Waiting>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end(Status::unavailable("walclient: the append stream ended"));
    }
}

/// Removes an attempt that stopped waiting (its deadline passed, or its future was dropped).
struct StopWaiting<'a> {
    waiting: &'a Waiting,
    request_id: u64,
}

impl Drop for StopWaiting<'_> {
    fn drop(&mut self) {
        self.waiting.state.lock().unwrap().answers.remove(&self.request_id);
    }
}

/// What an ended stream means for the appends it did not answer: their outcome is unknown, and
/// retrying them is safe (same writer id and sequences), so UNAVAILABLE, as walclient in C++
/// says, whatever the transport reported (a reset, a GOAWAY, an oversized message). Only an
/// answer about the caller itself is final, and UNIMPLEMENTED, which sends them as unary calls.
fn stream_end_status(status: Status) -> Status {
    match status.code() {
        Code::Unauthenticated | Code::PermissionDenied | Code::Unimplemented => status,
        _ => Status::unavailable(format!(
            "walclient: the append stream ended ({:?}: {}); the outcome is unknown",
            status.code(),
            status.message()
        )),
    }
}

impl AppendStreamer {
    pub(crate) fn new() -> Self {
        AppendStreamer {
            next_request_id: AtomicU64::new(1),
            supported: Arc::new(AtomicBool::new(true)),
            current: Mutex::new(None),
        }
    }

    pub(crate) fn supported(&self) -> bool {
        self.supported.load(Ordering::Relaxed)
    }

    /// One attempt of a stamped append: its ids, its own error as Append would answer it, the
    /// stream's error (UNAVAILABLE: outcome unknown), or DeadlineExceeded at `deadline`.
    pub(crate) async fn append(
        &self,
        client: &Client,
        request: &AppendRequest,
        deadline: Instant,
    ) -> Result<Vec<u64>, Status> {
        let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        let (outbound, waiting) = self.stream(client);
        {
            let mut state = waiting.state.lock().unwrap();
            if let Some(status) = &state.ended {
                return Err(status.clone());
            }
            state.answers.insert(request_id, answer);
        }
        let _stop = StopWaiting { waiting: &waiting, request_id };
        let queued = Queued { request_id, request: request.clone(), deadline };
        if outbound.send(queued).is_err() {
            // The task that owns the receiving end is gone.
            waiting.end(Status::unavailable("walclient: the append stream ended"));
            return Err(Status::unavailable("walclient: the append stream ended"));
        }
        let result = until(Some(deadline), async {
            answered
                .await
                .unwrap_or_else(|_| Err(Status::unavailable("walclient: the append stream ended")))
        })
        .await;
        if matches!(&result, Err(status) if status.code() == Code::DeadlineExceeded) {
            // No answer in a whole attempt's time: the stream is stuck (a frozen walserver, a
            // connection that stopped moving). The retry goes on a new one.
            self.retire(&waiting);
        }
        result
    }

    /// Cancels the stream `waiting` belongs to, if it is still the one in use; the attempts
    /// waiting on it fail with UNAVAILABLE and are retried on the next.
    fn retire(&self, waiting: &Arc<Waiting>) {
        let retired = {
            let mut current = self.current.lock().unwrap();
            match current.as_ref() {
                Some(open) if Arc::ptr_eq(&open.waiting, waiting) => current.take(),
                _ => None,
            }
        };
        if let Some(open) = retired {
            open.task.abort();
            open.waiting.end(Status::unavailable(
                "walclient: no answer on the append stream within an attempt's time",
            ));
        }
    }

    /// The stream in use, or a new one if there is none or it ended.
    fn stream(&self, client: &Client) -> (mpsc::UnboundedSender<Queued>, Arc<Waiting>) {
        let mut current = self.current.lock().unwrap();
        if let Some(open) = current.as_ref() {
            if open.waiting.state.lock().unwrap().ended.is_none() {
                return (open.outbound.clone(), open.waiting.clone());
            }
        }
        let (outbound, queue) = mpsc::unbounded_channel::<Queued>();
        let waiting = Arc::new(Waiting::default());

        let request = client.request(messages(queue, waiting.clone()), None);
        let stub = client.inner.stub.clone();
        let supported = self.supported.clone();
        let answers = EndOnDrop(waiting.clone());
        let task = tokio::spawn(async move {
            let end = read_answers(stub, request, &answers.0).await;
            if end.code() == Code::Unimplemented {
                supported.store(false, Ordering::Relaxed);
            }
            answers.0.end(stream_end_status(end));
        });
        *current = Some(OpenStream {
            outbound: outbound.clone(),
            waiting: waiting.clone(),
            task: task.abort_handle(),
        });
        (outbound, waiting)
    }
}

/// The stream's messages, each built when the connection can take it: what was queued meanwhile
/// goes together, attempts that gave up are left out, and each carries the time it has left
/// from now (walserver counts it from when it reads the message).
fn messages(
    queue: mpsc::UnboundedReceiver<Queued>,
    waiting: Arc<Waiting>,
) -> impl futures_util::Stream<Item = AppendStreamRequest> {
    let state = (queue, waiting, None::<Queued>);
    futures_util::stream::unfold(state, |(mut queue, waiting, carry)| async move {
        let mut appends = Vec::new();
        let mut bytes = 0;
        let mut next = carry;
        loop {
            let queued = match next.take() {
                Some(queued) => queued,
                None if appends.is_empty() => queue.recv().await?,
                None => match queue.try_recv() {
                    Ok(queued) => queued,
                    Err(_) => break,
                },
            };
            let left = queued.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !waiting.is_waiting(queued.request_id) {
                continue;
            }
            let size = queued.request.encoded_len();
            if !appends.is_empty()
                && (bytes + size > MAX_MESSAGE_BYTES || appends.len() >= MAX_APPENDS_PER_MESSAGE)
            {
                next = Some(queued);
                break;
            }
            bytes += size;
            appends.push(StreamedAppend {
                request_id: queued.request_id,
                append: Some(queued.request),
                timeout_ms: left.as_millis().clamp(1, u32::MAX as u128) as u32,
            });
        }
        Some((AppendStreamRequest { appends }, (queue, waiting, next)))
    })
}

/// Opens the stream and hands each answer to its attempt, until the stream ends; returns why
/// it ended.
async fn read_answers<S>(
    mut stub: WalServiceClient<Channel>,
    request: tonic::Request<S>,
    waiting: &Waiting,
) -> Status
where
    S: futures_util::Stream<Item = AppendStreamRequest> + Send + 'static,
{
    let mut inbound = match stub.append_stream(request).await {
        Err(status) => return status,
        Ok(response) => response.into_inner(),
    };
    loop {
        match inbound.message().await {
            Ok(Some(message)) => {
                for result in message.results {
                    let answer = waiting.state.lock().unwrap().answers.remove(&result.request_id);
                    let Some(answer) = answer else { continue }; // that attempt gave up
                    let _ = answer.send(if result.code == 0 {
                        Ok(result.entry_ids)
                    } else {
                        Err(Status::new(Code::from(result.code), result.message))
                    });
                }
            }
            // Ended without error: walserver is shutting down.
            Ok(None) => return Status::unavailable("walserver ended the append stream"),
            Err(status) => return status,
        }
    }
}
