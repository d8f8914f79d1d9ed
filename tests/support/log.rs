//! Log lines the library writes, captured on the test's thread (a
//! `current_thread` runtime logs there, background tasks included).

use std::sync::{Arc, Mutex};

use tracing_subscriber::util::SubscriberInitExt;

/// A `Write` into a shared buffer, for capturing log lines.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Captures what `filter` (`RUST_LOG` syntax) lets through on this
    /// thread until the guard is dropped.
    pub(crate) fn on_this_thread(filter: &str) -> (Captured, tracing::subscriber::DefaultGuard) {
        let log = Captured::default();
        let writer = log.clone();
        let guard = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_env_filter(filter)
            .finish()
            .set_default();
        (log, guard)
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }

    pub(crate) fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}
