//! The log store's error: walserver's gRPC code and message, with whether trying again may
//! help.

use std::fmt;

use crate::{Code, Status};

/// Why a log store call failed.
#[derive(Debug, Clone)]
pub struct Error {
    code: Code,
    message: String,
}

impl Error {
    /// An error of `code` saying `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// A request the log store refuses (a provider it does not serve, a region under two
    /// providers): the same request fails again.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// The gRPC code: walserver's answer, or `InvalidArgument` for a request refused here.
    pub fn code(&self) -> Code {
        self.code
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the same call may succeed later: walserver or Kafka unreachable, out of time, or
    /// at a limit. An append's outcome is then unknown: some entries may be durable.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.code,
            Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted | Code::Aborted
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "walserver log store: {:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

impl From<Status> for Error {
    fn from(status: Status) -> Self {
        Self::new(status.code(), status.message())
    }
}

/// The log store's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
