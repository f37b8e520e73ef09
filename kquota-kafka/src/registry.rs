//! The open callbacks, by handle. Java holds a handle (a `long`), never a pointer: a call with a
//! closed or made-up handle fails cleanly, and a callback closed while a request is being answered
//! stays alive until that answer is done. Lookups load the table without a lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::callback::Callback;
use crate::settings::Settings;

/// One open callback.
#[derive(Debug)]
pub(crate) struct Instance {
    callback: Arc<Callback>,
    settings: Settings,
    /// The fault drill: while set, every call fails on purpose.
    failing: AtomicBool,
    /// With `kquota.cluster.bootstrap.servers`: the broker among kquota's instances.
    #[cfg(feature = "cluster")]
    link: Option<crate::cluster::Link>,
}

impl Instance {
    pub(crate) fn callback(&self) -> &Callback {
        &self.callback
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The link with the other instances, if the cluster is on.
    #[cfg(feature = "cluster")]
    pub(crate) fn link(&self) -> Option<&crate::cluster::Link> {
        self.link.as_ref()
    }

    pub(crate) fn failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    pub(crate) fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::Relaxed);
    }
}

type Table = Vec<Option<Arc<Instance>>>;

static TABLE: std::sync::LazyLock<ArcSwap<Table>> =
    std::sync::LazyLock::new(|| ArcSwap::from_pointee(Vec::new()));
/// Serializes opening and closing; lookups never take it.
static WRITER: Mutex<()> = Mutex::new(());

/// Opens a callback for the broker `node_id`, and with the cluster settings starts joining the
/// other instances; its handle is its slot plus one (0 is never a handle).
pub(crate) fn open(settings: Settings, node_id: i32) -> std::io::Result<i64> {
    let callback = Arc::new(Callback::new(settings.policy()));
    #[cfg(feature = "cluster")]
    let link = match settings.cluster() {
        Some(cluster) => Some(crate::cluster::Link::start(
            crate::cluster::cluster_config(cluster, node_id),
            &callback,
        )?),
        None => None,
    };
    #[cfg(not(feature = "cluster"))]
    let _ = node_id;
    let instance = Arc::new(Instance {
        callback,
        settings,
        failing: AtomicBool::new(false),
        #[cfg(feature = "cluster")]
        link,
    });
    let _writer = WRITER.lock();
    let mut table = Table::clone(&TABLE.load());
    let slot = match table.iter().position(Option::is_none) {
        Some(free) => {
            table[free] = Some(instance);
            free
        }
        None => {
            table.push(Some(instance));
            table.len() - 1
        }
    };
    TABLE.store(Arc::new(table));
    Ok(slot as i64 + 1)
}

/// Closes `handle`; calls in flight finish with it. The cluster's threads are stopped (bounded)
/// after the handle is gone from the table.
pub(crate) fn close(handle: i64) {
    let closed = {
        let _writer = WRITER.lock();
        let mut table = Table::clone(&TABLE.load());
        let closed = slot(handle)
            .and_then(|s| table.get_mut(s))
            .and_then(Option::take);
        TABLE.store(Arc::new(table));
        closed
    };
    #[cfg(feature = "cluster")]
    if let Some(instance) = closed {
        if let Some(link) = instance.link() {
            link.close(instance.callback());
        }
    }
    #[cfg(not(feature = "cluster"))]
    drop(closed);
}

fn slot(handle: i64) -> Option<usize> {
    usize::try_from(handle).ok()?.checked_sub(1)
}

/// The open callback behind `handle`.
pub(crate) fn get(handle: i64) -> Option<Arc<Instance>> {
    let s = slot(handle)?;
    TABLE.load().get(s).and_then(Clone::clone)
}

/// Calls `f` with the open callback behind `handle` (or `None`), without touching its reference
/// count: the hot path's lookup.
#[inline]
pub(crate) fn with<T>(handle: i64, f: impl FnOnce(Option<&Instance>) -> T) -> T {
    let table = TABLE.load();
    let instance = slot(handle)
        .and_then(|s| table.get(s))
        .and_then(Option::as_deref);
    f(instance)
}

/// Panics inside the library are caught and reported to the Java half; the default hook would
/// print each one to the broker's stderr besides. Installed once, for this library's panics only.
pub(crate) fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}
