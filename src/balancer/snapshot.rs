//! The set snapshot: its members, the snapshot an update swaps in whole (and the balancer's drop
//! empties), and the id index and hasher that find an invoker by id.

use crate::clock::Clock;
use crate::filter::LocalZone;
use crate::stats::InvokerState;
use crate::strategy::{Prepared, Weights, WholeSet};
use std::cell::UnsafeCell;
use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// One invoker of a snapshot. Exactly one cache line, aligned to one: a pick reads a member
/// whole, and unaligned members would straddle two lines.
#[repr(align(64))]
pub(crate) struct Member {
    pub id: u64,
    pub address: Arc<str>,
    pub zone: Option<Arc<str>>,
    pub weight: i32,
    pub start_time_ms: i64,
    /// Resolved: the invoker's own warm-up, or the balancer default when it gave a negative one.
    pub warmup_ms: i32,
    pub state: Arc<InvokerState>,
}

const _: () = assert!(std::mem::size_of::<Member>() == 64);

/// An immutable view of the set. Readers load it without blocking; update swaps a new one in.
pub(crate) struct Snapshot {
    /// Unique in the process, and increasing over one balancer's updates (see `Snapshot::new`).
    pub generation: u64,
    /// Everything else, read through `Deref`. Only the balancer's drop writes it, to empty it
    /// (see `Inner::drop`): threads keep snapshots in their caches past the balancer's life.
    body: UnsafeCell<SnapshotBody>,
}

// SAFETY: the body is `Sync`, and written only by `Snapshot::empty_out`, whose caller
// guarantees that no reference to it exists.
unsafe impl Sync for Snapshot {}

pub(crate) struct SnapshotBody {
    pub members: Box<[Member]>,
    pub by_id: IdIndex,
    /// Positions 0..n, so that "every invoker" is a candidate slice like any other.
    pub all: Box<[u32]>,
    /// Weights depend on time before this instant (ms); `i64::MIN` when no invoker warms up.
    /// (Any invoker with a start time sets it, to the end of its warm-up: for a set from Dubbo
    /// URLs, which all carry a `timestamp`, usually an instant long past.)
    pub time_dependent_until_ms: i64,
    /// The library's clock has passed `time_dependent_until_ms`: set by the update or by the
    /// first call that read the clock past it, so that later calls on the library's clock know
    /// the weights are static without reading it. (Calls that pass their own time compare it
    /// instead: it need not be the library's.)
    pub settled: AtomicBool,
    pub prepared: Prepared,
    /// `prepared` when it is a [`WholeSet`] (`random`, `leastactive`), and when it is
    /// [`Weights`] (`p2c`): the tables `select_drawn` draws from on every pick, found once per
    /// update rather than by `downcast_ref`'s type check (a 128-bit compare) on every pick.
    pub whole_set: Option<Arc<WholeSet>>,
    pub pair_weights: Option<Arc<Weights>>,
    /// With zone preference: the local zone, where picks over the whole set go while no invoker
    /// is ejected. None when they go to the whole set (see `Filter::local_zone`).
    pub local: Option<LocalZone>,
}

impl SnapshotBody {
    fn empty() -> SnapshotBody {
        SnapshotBody {
            members: Box::new([]),
            by_id: IdIndex::new(&[]),
            all: Box::new([]),
            time_dependent_until_ms: i64::MIN,
            settled: AtomicBool::new(true),
            prepared: None,
            whole_set: None,
            pair_weights: None,
            local: None,
        }
    }
}

impl std::ops::Deref for Snapshot {
    type Target = SnapshotBody;

    #[inline(always)]
    fn deref(&self) -> &SnapshotBody {
        // SAFETY: written only by `empty_out`, when no reference to it may exist.
        unsafe { &*self.body.get() }
    }
}

impl Snapshot {
    /// A snapshot of a new generation: every snapshot of every balancer gets its own, so that a
    /// thread's cached snapshot is the current one of a balancer exactly when its generation is
    /// the balancer's (`Inner::pin_cached`: no compare of which balancer it came from).
    pub(super) fn new(body: SnapshotBody) -> Snapshot {
        static GENERATIONS: AtomicU64 = AtomicU64::new(0);
        Snapshot {
            generation: GENERATIONS.fetch_add(1, Relaxed) + 1,
            body: UnsafeCell::new(body),
        }
    }

    pub(super) fn empty() -> Snapshot {
        Snapshot::new(SnapshotBody::empty())
    }

    /// Frees what the snapshot holds, leaving an empty set.
    ///
    /// # Safety
    /// No reference to its body exists, nor will until it drops: no call runs or will run on
    /// its balancer (which is being dropped), and the thread caches that hold it read a
    /// snapshot's body only once its generation is the current one of the balancer called
    /// (unique in the process, so never a dropped balancer's).
    pub(super) unsafe fn empty_out(&self) {
        *self.body.get() = SnapshotBody::empty();
    }

    #[inline]
    pub fn position(&self, id: u64) -> Option<usize> {
        self.by_id.get(id)
    }

    /// The position and member of invoker `id`, if it is in the set.
    #[inline]
    pub fn find(&self, id: u64) -> Option<(usize, &Member)> {
        self.position(id).map(|pos| (pos, &self.members[pos]))
    }

    /// `weights_static` when it needs no clock read: no start times, or the library's clock
    /// already seen past every warm-up.
    #[inline]
    pub fn known_static(&self, clock: &Clock) -> bool {
        self.time_dependent_until_ms == i64::MIN
            || (clock.is_library() && self.settled.load(Relaxed))
    }

    /// True when no invoker's weight depends on time for a call at `now_us` (0 = the library's
    /// clock), known without reading a clock; false also when finding out needs a clock read
    /// (the short paths leave that to the general path, which reads it).
    #[inline(always)]
    pub fn weights_settled(&self, now_us: i64) -> bool {
        let until = self.time_dependent_until_ms;
        until == i64::MIN
            || if now_us == 0 {
                self.settled.load(Relaxed)
            } else {
                now_us.div_euclid(1000) >= until
            }
    }

    /// True when no invoker's weight depends on time at `clock`'s instant. Reads the library's
    /// clock only until it has once been past every warm-up.
    // Inline, the clock's read out of line: a call cost peakewma's pick about 5 instructions.
    #[inline(always)]
    pub fn weights_static(&self, clock: &Clock) -> bool {
        self.known_static(clock) || self.past_time_dependence(clock)
    }

    /// `weights_static` when it needs the clock.
    #[inline(never)]
    fn past_time_dependence(&self, clock: &Clock) -> bool {
        let past = clock.now_ms() >= self.time_dependent_until_ms;
        if past && clock.is_library() {
            self.settled.store(true, Relaxed);
        }
        past
    }
}

/// Id → position for one snapshot: open addressing over a power-of-two table at most half
/// full, built once per update, so that a report finds its invoker in about one probe.
pub(crate) struct IdIndex {
    /// `(id, position)`; `EMPTY_ID` marks a free slot (ids are at most `i64::MAX`).
    slots: Box<[(u64, u32)]>,
    shift: u32,
}

const EMPTY_ID: u64 = u64::MAX;

impl IdIndex {
    pub(super) fn new(ids: &[u64]) -> IdIndex {
        let capacity = (ids.len() * 2).next_power_of_two().max(2);
        let mut index = IdIndex {
            slots: vec![(EMPTY_ID, 0); capacity].into_boxed_slice(),
            shift: 64 - capacity.trailing_zeros(),
        };
        let mask = capacity - 1;
        for (pos, &id) in ids.iter().enumerate() {
            let mut slot = index.home(id);
            while index.slots[slot].0 != EMPTY_ID {
                slot = (slot + 1) & mask;
            }
            index.slots[slot] = (id, pos as u32);
        }
        index
    }

    #[inline]
    fn home(&self, id: u64) -> usize {
        // Fibonacci hashing: the top bits of one multiply spread sequential ids evenly.
        (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    fn get(&self, id: u64) -> Option<usize> {
        if id == EMPTY_ID {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut slot = self.home(id);
        loop {
            let (k, pos) = self.slots[slot];
            if k == id {
                return Some(pos as usize);
            }
            if k == EMPTY_ID {
                return None;
            }
            slot = (slot + 1) & mask;
        }
    }
}

/// Ids are caller-chosen integers: one multiply spreads them well enough for a hash table.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 32))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}
