//! Method interning: dense ids for method names, and the per-method state each id keeps for the
//! strategy.

use crate::error::{Error, Status};
use crate::strategy::PreparedData;
use parking_lot::Mutex;
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::AtomicU32;
use std::sync::OnceLock;

#[cfg(test)]
thread_local! {
    pub(super) static NAMES_COPIED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Method ids are small integers; this many may be interned per balancer.
pub const MAX_METHODS: u32 = 1 << 20;

/// Per-method state owned by the strategy (round-robin counters, response windows). Kept as
/// [`PreparedData`], so that reading it back is a compare against a constant `TypeId` rather
/// than a virtual `type_id` call (peakewma reads it on every pick and report).
#[derive(Default)]
pub struct MethodState {
    ext: OnceLock<PreparedData>,
}

impl MethodState {
    #[inline]
    pub(crate) fn ext<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> &T {
        self.ext
            .get_or_init(|| PreparedData::new(init()))
            .downcast_ref::<T>()
            .expect("a balancer has one strategy, so one method-state type")
    }

    #[inline]
    pub(crate) fn ext_if_present<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.ext.get()?.downcast_ref::<T>()
    }
}

const SEGMENTS: usize = 21;
/// Methods with ids below this live in one eagerly allocated block (about 3 KB): a lookup is a
/// bounds check and an index. Services rarely have more methods; later ones go to segments.
const SMALL: u32 = 128;

/// Interned method names. Ids are dense; state lives in segments of doubling size so that a
/// lookup by id is two loads and never blocks, and existing entries never move.
#[repr(C)]
pub(super) struct Methods {
    /// First: read on every call, it sits in the balancer's first cache line (see `Inner`).
    count: AtomicU32,
    small: Box<[MethodState]>,
    names: Mutex<HashMap<Box<str>, u32>>,
    segments: [OnceLock<Box<[MethodState]>>; SEGMENTS],
}

impl Methods {
    pub(super) fn new() -> Methods {
        let m = Methods {
            names: Mutex::new(HashMap::new()),
            count: AtomicU32::new(0),
            small: (0..SMALL).map(|_| MethodState::default()).collect(),
            segments: std::array::from_fn(|_| OnceLock::new()),
        };
        m.intern("").expect("the service level always fits");
        m
    }

    /// Segment and offset of a method id at or above `SMALL`.
    fn locate(id: u32) -> (usize, usize) {
        let big = id - SMALL;
        let k = 31 - (big + 1).leading_zeros();
        (k as usize, (big + 1 - (1 << k)) as usize)
    }

    /// True when `id` was interned (ids are dense, and an id's state exists before its count
    /// is published).
    #[inline]
    pub(super) fn is_known(&self, id: u32) -> bool {
        id < self.count.load(std::sync::atomic::Ordering::Acquire)
    }

    #[inline]
    pub(super) fn get(&self, id: u32) -> Option<&MethodState> {
        if !self.is_known(id) {
            return None;
        }
        if id < SMALL {
            return Some(&self.small[id as usize]);
        }
        let (seg, off) = Self::locate(id);
        self.segments[seg].get().map(|s| &s[off])
    }

    pub(super) fn intern(&self, name: &str) -> Result<u32, Error> {
        let mut names = self.names.lock();
        if let Some(&id) = names.get(name) {
            return Ok(id);
        }
        let id = names.len() as u32;
        if id >= MAX_METHODS {
            return Err(Error::new(
                Status::LimitExceeded,
                format!(
                    "too many methods: at most {MAX_METHODS} names may be interned per balancer"
                ),
            ));
        }
        if id >= SMALL {
            let (seg, _) = Self::locate(id);
            self.segments[seg]
                .get_or_init(|| (0..1usize << seg).map(|_| MethodState::default()).collect());
        }
        names.insert(name.into(), id);
        self.count
            .store(id + 1, std::sync::atomic::Ordering::Release);
        Ok(id)
    }

    /// The names of the ids `wanted` reports, sorted by id. Only those are copied: a stats
    /// call that copied every interned name paid for methods no invoker had counters for
    /// (10 ms at 100,000 interned).
    pub(super) fn names_of(&self, wanted: impl Fn(u32) -> bool) -> Vec<(u32, Box<str>)> {
        let names = self.names.lock();
        let mut v: Vec<(u32, Box<str>)> = names
            .iter()
            .filter(|&(_, &id)| wanted(id))
            .map(|(name, &id)| {
                #[cfg(test)]
                NAMES_COPIED.with(|c| c.set(c.get() + 1));
                (id, name.clone())
            })
            .collect();
        v.sort_unstable_by_key(|&(id, _)| id);
        v
    }

    /// Every method interned so far, with its id. An update calls it after publishing its set:
    /// read under the names' lock, the count then either has a method or its interning came
    /// after the publication, so no pick of it can still pin the replaced set (an atomic read
    /// alone may precede the publication's store becoming visible, and miss a method whose
    /// first pick then sees the old set).
    pub(super) fn each(&self, mut f: impl FnMut(u32, &MethodState)) {
        let count = {
            let _names = self.names.lock();
            self.count.load(std::sync::atomic::Ordering::Acquire)
        };
        for id in 0..count {
            if let Some(m) = self.get(id) {
                f(id, m);
            }
        }
    }
}
