//! The stop request (`POST /v1/admin/stop`, a signal) and the stopping state: while the
//! gateway stops, running turns land their terminals and queued turns stay stored.

use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct Shutdown {
    requested: CancellationToken,
    stopping: AtomicBool,
}

impl Shutdown {
    /// Asks the process to stop.
    pub fn request(&self) {
        self.requested.cancel();
    }

    /// Fired once a stop is requested.
    pub fn requested(&self) -> CancellationToken {
        self.requested.clone()
    }

    /// Returns once a stop is requested.
    pub async fn wait(&self) {
        self.requested.cancelled().await
    }

    /// From here on, the gateway is stopping.
    pub fn begin(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
}
