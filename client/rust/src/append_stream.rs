//! Appends multiplexed on one `AppendStream` call that all clones of a Client share.
//!
//! Each append attempt is tagged with a request id, sent, and answered once by id. The caller
//! (Client::append) waits with its attempt's deadline and retries on its own, so this file only
//! carries messages: a stream that fails fails every attempt waiting on it, and the next attempt
//! opens a new stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::{Code, Status};

use crate::client::{until, Client};
use crate::proto::{AppendRequest, AppendStreamRequest, StreamedAppend};

/// walserver refuses more appends than this in one message.
const MAX_APPENDS_PER_MESSAGE: usize = 4096;

type Answer = oneshot::Sender<Result<Vec<u64>, Status>>;

pub(crate) struct AppendStreamer {
    next_request_id: AtomicU64,
    /// False once walserver answered UNIMPLEMENTED: it has no AppendStream.
    supported: Arc<AtomicBool>,
    current: Mutex<Option<OpenStream>>,
}

/// The sending half of the stream in use. Dropping it (with the Client) ends the stream.
struct OpenStream {
    outbound: mpsc::UnboundedSender<StreamedAppend>,
    waiting: Arc<Waiting>,
}

/// Attempts sent on one stream and not yet answered.
#[derive(Default)]
struct Waiting {
    state: Mutex<WaitingState>,
}

#[derive(Default)]
struct WaitingState {
    answers: HashMap<u64, Answer>,
    /// Set once, when the stream ended; later attempts must open a new one.
    closed: bool,
}

impl Waiting {
    /// Fails every attempt still waiting, and every one that would start waiting later.
    fn close(&self, status: &Status) {
        let answers = {
            let mut state = self.state.lock().unwrap();
            state.closed = true;
            std::mem::take(&mut state.answers)
        };
        for (_, answer) in answers {
            let _ = answer.send(Err(status.clone()));
        }
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
    /// stream's error (outcome unknown), or DeadlineExceeded at `deadline`.
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
            if state.closed {
                return Err(Status::unavailable("walclient: the append stream ended"));
            }
            state.answers.insert(request_id, answer);
        }
        let _stop = StopWaiting { waiting: &waiting, request_id };
        let timeout_ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis()
            .clamp(1, u32::MAX as u128) as u32;
        let append = StreamedAppend { request_id, append: Some(request.clone()), timeout_ms };
        if outbound.send(append).is_err() {
            return Err(Status::unavailable("walclient: the append stream ended"));
        }
        until(Some(deadline), async {
            answered
                .await
                .unwrap_or_else(|_| Err(Status::unavailable("walclient: the append stream ended")))
        })
        .await
    }

    /// The stream in use, or a new one if there is none or it ended.
    fn stream(&self, client: &Client) -> (mpsc::UnboundedSender<StreamedAppend>, Arc<Waiting>) {
        let mut current = self.current.lock().unwrap();
        if let Some(open) = current.as_ref() {
            if !open.waiting.state.lock().unwrap().closed {
                return (open.outbound.clone(), open.waiting.clone());
            }
        }
        let (outbound, queue) = mpsc::unbounded_channel::<StreamedAppend>();
        let waiting = Arc::new(Waiting::default());
        *current = Some(OpenStream { outbound: outbound.clone(), waiting: waiting.clone() });
        drop(current);

        // What was queued while the previous message was on the wire goes in one message.
        let messages = futures_util::stream::unfold(queue, |mut queue| async move {
            let mut appends = vec![queue.recv().await?];
            while appends.len() < MAX_APPENDS_PER_MESSAGE {
                match queue.try_recv() {
                    Ok(append) => appends.push(append),
                    Err(_) => break,
                }
            }
            Some((AppendStreamRequest { appends }, queue))
        });
        let request = client.request(messages, None);
        let mut stub = client.inner.stub.clone();
        let supported = self.supported.clone();
        let answers = waiting.clone();
        tokio::spawn(async move {
            let end = match stub.append_stream(request).await {
                Err(status) => status,
                Ok(response) => {
                    let mut inbound = response.into_inner();
                    loop {
                        match inbound.message().await {
                            Ok(Some(message)) => {
                                for result in message.results {
                                    let answer = answers
                                        .state
                                        .lock()
                                        .unwrap()
                                        .answers
                                        .remove(&result.request_id);
                                    let Some(answer) = answer else { continue }; // that attempt gave up
                                    let _ = answer.send(if result.code == 0 {
                                        Ok(result.entry_ids)
                                    } else {
                                        Err(Status::new(Code::from(result.code), result.message))
                                    });
                                }
                            }
                            // Ended without error: walserver is shutting down. The appends not
                            // answered have unknown outcomes, like a lost connection's.
                            Ok(None) => {
                                break Status::unavailable(
                                    "walclient: walserver ended the append stream",
                                )
                            }
                            Err(status) => break status,
                        }
                    }
                }
            };
            if end.code() == Code::Unimplemented {
                supported.store(false, Ordering::Relaxed);
            }
            answers.close(&end);
        });
        (outbound, waiting)
    }
}
