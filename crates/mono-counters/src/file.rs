//! The agent's file mode (`address=file://PATH`): a Hello, then Sampling records until EOF.

use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use tokio::io::AsyncRead;
use tokio_util::codec::FramedRead;

use crate::codec::{InspectorCodec, Limits};
use crate::error::ClientError;
use crate::inspector::SampleUpdate;
use crate::message::{AgentMessage, Hello};
use crate::table::CounterTable;

/// Reads a counters file written by an agent in file mode.
///
/// A record cut short at the end of the file is a [`crate::DecodeError::Truncated`] error, after
/// every complete record before it.
pub struct CounterFile<R> {
    framed: FramedRead<R, InspectorCodec>,
    hello: Hello,
    table: Arc<CounterTable>,
}

impl<R> std::fmt::Debug for CounterFile<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterFile").field("hello", &self.hello).finish_non_exhaustive()
    }
}

impl CounterFile<tokio::fs::File> {
    /// Opens a file and reads its Hello.
    pub async fn open(path: impl AsRef<Path>, limits: Limits) -> Result<Self, ClientError> {
        CounterFile::new(tokio::fs::File::open(path).await?, limits).await
    }
}

impl<R: AsyncRead + Unpin> CounterFile<R> {
    /// Reads the Hello from `reader`.
    pub async fn new(reader: R, limits: Limits) -> Result<Self, ClientError> {
        let mut framed = FramedRead::new(reader, InspectorCodec::new(limits));
        let hello = match framed.next().await {
            Some(Ok(AgentMessage::Hello(hello))) => hello,
            Some(Ok(other)) => return Err(ClientError::ExpectedHello(other.kind())),
            Some(Err(e)) => return Err(ClientError::at_start(e, framed.read_buffer())),
            None => return Err(ClientError::ExpectedHello("an empty file")),
        };
        let table = Arc::new(CounterTable::from_hello(&hello));
        Ok(CounterFile { framed, hello, table })
    }

    /// The file's Hello.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// The next record with the full state after it (every record, also one with no value: its
    /// `changed` is empty); `Ok(None)` at the end of the file.
    pub async fn next_sample(&mut self) -> Result<Option<SampleUpdate>, ClientError> {
        match self.framed.next().await {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok(AgentMessage::Sampling(sample))) => {
                let changed = Arc::make_mut(&mut self.table).apply(&sample);
                Ok(Some(SampleUpdate {
                    timestamp: sample.timestamp,
                    changed,
                    table: Arc::clone(&self.table),
                    missed: 0,
                    empty: 0,
                }))
            }
            Some(Ok(other)) => Err(ClientError::Unexpected(other.kind())),
        }
    }
}
