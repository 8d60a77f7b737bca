//! The extensions' log file: `vis.log` lines and whatever extension code prints (worker
//! stderr) go to `<home>/logs/YYYY-MM-DD/extensions.log` (UTC date), besides the gateway's
//! own tracing output.
//!
//! One writer thread per host owns the file (blocking IO never runs on the async runtime);
//! callers hand it lines through a bounded channel and never wait: when the writer falls
//! 4096 lines behind, further lines are counted and dropped, and the next written line
//! says how many were lost. The thread ends when the host (the last sender) is dropped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

const QUEUE: usize = 4096;

#[derive(Debug)]
struct Line {
    at: SystemTime,
    level: &'static str,
    extension: String,
    session: Option<String>,
    text: String,
}

/// Where extension log lines go. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LogFile {
    tx: SyncSender<Line>,
    dropped: Arc<AtomicU64>,
}

impl LogFile {
    /// Starts the writer thread for `<home>/logs/`. `None` when the thread cannot start
    /// (the lines then only reach the gateway's tracing output).
    pub fn start(home: &Path) -> Option<LogFile> {
        let (tx, rx) = sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let dir = home.join("logs");
        let lost = dropped.clone();
        std::thread::Builder::new()
            .name("vis-ext-log".into())
            .spawn(move || writer(dir, rx, lost))
            .ok()?;
        Some(LogFile { tx, dropped })
    }

    /// Queues one line (never blocks). `level` is one of trace, debug, info, warn, error or
    /// `print` (a line the extension printed).
    pub fn line(&self, level: &str, extension: &str, session: Option<&str>, text: &str) {
        let level = match level {
            "trace" => "TRACE",
            "debug" => "DEBUG",
            "warn" => "WARN",
            "error" => "ERROR",
            "print" => "PRINT",
            _ => "INFO",
        };
        let line = Line {
            at: SystemTime::now(),
            level,
            extension: extension.to_string(),
            session: session.map(str::to_string),
            text: text.to_string(),
        };
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The path of the log file for a UTC day (`days` since 1970-01-01).
pub fn file_for(dir: &Path, days: i64) -> PathBuf {
    let (y, m, d) = civil_from_days(days);
    dir.join(format!("{y:04}-{m:02}-{d:02}"))
        .join("extensions.log")
}

fn writer(dir: PathBuf, rx: Receiver<Line>, dropped: Arc<AtomicU64>) {
    let mut open: Option<(i64, std::fs::File)> = None;
    while let Ok(line) = rx.recv() {
        let since = line.at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = i64::try_from(since.as_secs()).unwrap_or(0);
        let day = secs.div_euclid(86_400);
        if open.as_ref().is_none_or(|(d, _)| *d != day) {
            open = open_day(&dir, day).map(|f| (day, f));
        }
        let Some((_, file)) = open.as_mut() else {
            continue;
        };
        let lost = dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            let _ = writeln!(
                file,
                "{} WARN  [vis] {lost} extension log lines were dropped (the writer fell behind)",
                stamp(secs, since.subsec_millis())
            );
        }
        let session = line
            .session
            .map(|s| format!(" session={s}"))
            .unwrap_or_default();
        // One physical line per log line: embedded newlines are shown as "\n".
        let text = line.text.replace('\n', "\\n");
        let _ = writeln!(
            file,
            "{} {:<5} [{}]{session} {text}",
            stamp(secs, since.subsec_millis()),
            line.level,
            line.extension
        );
    }
}

fn open_day(dir: &Path, day: i64) -> Option<std::fs::File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = file_for(dir, day);
    let parent = path.parent()?;
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .ok()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn stamp(secs: i64, millis: u32) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// (year, month, day) of a day count since 1970-01-01 (proleptic Gregorian calendar).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_map_to_calendar_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        assert_eq!(stamp(86_399, 7), "1970-01-01T23:59:59.007Z");
    }

    #[test]
    fn lines_land_in_the_dated_file_under_the_home_logs_folder() {
        let home = std::env::temp_dir().join(format!("vis-log-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&home).expect("mkdir");
        let log = LogFile::start(&home).expect("writer");
        log.line("warn", "todo", Some("s1"), "two\nlines");
        log.line("nonsense", "todo", None, "plain");
        let day = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64
            / 86_400;
        let path = file_for(&home.join("logs"), day);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut text = String::new();
        while std::time::Instant::now() < deadline {
            text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.lines().count() >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].ends_with("WARN  [todo] session=s1 two\\nlines"),
            "{}",
            lines[0]
        );
        assert!(lines[1].ends_with("INFO  [todo] plain"), "{}", lines[1]);
        let _ = std::fs::remove_dir_all(&home);
    }
}
