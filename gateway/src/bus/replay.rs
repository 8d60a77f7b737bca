//! The SSE replay, read from the journal in pages: the first page with the subscription
//! (atomically with the sink's registration), the others only when the client has taken the
//! previous one, so a client that does not read holds one page, not its whole history.

use crate::store::{rows, Db, Store, StoreResult};
use futures::future::BoxFuture;
use vis_companion_api::replay::{ReplayPage, ReplayRest};
use vis_companion_api::Frame;
use vis_events::format_frame;

/// Most frames in one replay page.
pub const REPLAY_PAGE_FRAMES: usize = 256;
/// A replay page ends at the first frame that takes it past this many bytes.
pub const REPLAY_PAGE_BYTES: usize = 128 * 1024;

/// One page of stored events with `after < seq <= upto`.
pub(super) struct Page {
    pub frames: Vec<Frame>,
    /// The session's `trimmed_through` when the page was read.
    pub trimmed: i64,
    /// The last seq this page covers (the next page reads after it).
    pub through: i64,
    /// Nothing stored is left up to `upto`.
    pub done: bool,
}

pub(super) fn read_page(db: &mut Db, sid: &str, after: i64, upto: i64) -> StoreResult<Page> {
    let limit = (REPLAY_PAGE_FRAMES + 1) as i64;
    let trimmed = rows::trimmed_through(db, sid)?;
    let (mut frames, mut bytes, mut done) = (Vec::new(), 0usize, true);
    db.scan(
        "SELECT seq, type, data FROM events WHERE sid = ?1 AND seq > ?2 AND seq <= ?3 \
         ORDER BY seq LIMIT ?4",
        &[&sid, &after, &upto, &limit],
        |r| {
            if frames.len() == REPLAY_PAGE_FRAMES || bytes >= REPLAY_PAGE_BYTES {
                done = false;
                return Ok(false);
            }
            let (seq, kind, data) = rows::stored_event(r)?;
            let text = format_frame(Some(seq), &kind, &data);
            bytes += text.len();
            frames.push(Frame { seq, bytes: text });
            Ok(true)
        },
    )?;
    let through = frames
        .last()
        .map_or(if done { upto } else { after }, |f| f.seq);
    Ok(Page {
        frames,
        trimmed,
        through: through.max(after),
        done,
    })
}

/// The pages after the first, read through the store thread on demand.
pub(super) struct Rest {
    store: Store,
    sid: String,
    upto: i64,
}

impl Rest {
    pub fn boxed(store: Store, sid: &str, upto: i64) -> Box<dyn ReplayRest> {
        Box::new(Rest {
            store,
            sid: sid.to_string(),
            upto,
        })
    }
}

impl ReplayRest for Rest {
    fn page(&self, after: i64) -> BoxFuture<'static, Result<ReplayPage, String>> {
        let (store, sid, upto) = (self.store.clone(), self.sid.clone(), self.upto);
        Box::pin(async move {
            let p = store
                .with(move |db| read_page(db, &sid, after, upto))
                .await
                .map_err(|e| e.to_string())?;
            if p.done {
                trim_heap_soon();
            }
            Ok(ReplayPage {
                // Retention trimmed rows this client had not read yet: say so, as at the start.
                gap: (after < p.trimmed).then_some((after + 1, p.trimmed)),
                frames: p.frames,
                through: p.through,
                done: p.done,
            })
        })
    }
}

/// After a long replay ended (the one that needed pages), gives the heap it freed back to the
/// system at once rather than over the allocator's decay time: at most once per second, on a
/// blocking thread, never on the request path.
fn trim_heap_soon() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static PENDING: AtomicBool = AtomicBool::new(false);
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    rt.spawn(async {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        PENDING.store(false, Ordering::Release);
        let _ = tokio::task::spawn_blocking(crate::heap::release_free).await;
    });
}
