use super::{AccessLog, Record};
use crate::watched::{OnEnd, Watched};

/// A response body that counts what it hands out and writes the request's line when it
/// ends, or when it is dropped before its end (then marked aborted).
pub type LogBody<B> = Watched<B, LogEnd>;

/// A request's line, written when its body ends.
pub struct LogEnd {
    pub record: Box<Record>,
    pub log: AccessLog,
}

impl OnEnd for LogEnd {
    fn on_end(mut self, bytes: u64, aborted: bool) {
        self.record.bytes = bytes;
        self.record.aborted = aborted;
        self.log.log(&self.record);
    }
}
