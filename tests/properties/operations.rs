//! Operations.

use crate::options::*;
use crate::{BASE_US, NAMES};
use polylb::Invoker;
use proptest::prelude::*;

#[derive(Clone, Debug)]
pub(crate) struct Inv {
    pub(crate) id: u64,
    pub(crate) weight: i32,
    pub(crate) addr: u8,
    pub(crate) start_ms: i64,
    pub(crate) warmup_ms: i32,
    /// Index into `ZONES`; None = no zone.
    pub(crate) zone: Option<u8>,
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// `fault`: 0 duplicate id, 1 negative weight, 2 id above INT64_MAX, else none.
    Update {
        set: Vec<Inv>,
        fault: u8,
        at: usize,
    },
    Method(usize),
    Select {
        m: u8,
        key: Vec<u8>,
        dt: i64,
    },
    SelectAmong {
        m: u8,
        key: Vec<u8>,
        cands: Vec<u64>,
        excl: Vec<u64>,
        dt: i64,
    },
    Report {
        pick: usize,
        m: u8,
        id: u64,
        elapsed: i64,
        outcome: i32,
        dt: i64,
    },
    Stats {
        dt: i64,
    },
}

fn arb_set() -> impl Strategy<Value = Vec<Inv>> {
    (proptest::sample::subsequence((0u64..14).collect::<Vec<_>>(), 0..9))
        .prop_shuffle()
        .prop_flat_map(|ids| {
            let n = ids.len();
            (
                Just(ids),
                proptest::collection::vec(
                    (
                        prop_oneof![6 => 0i32..300, 1 => Just(0), 1 => Just(i32::MAX)],
                        0u8..3,
                        prop_oneof![
                            3 => Just(0i64),
                            1 => (-300_000i64..300_000).prop_map(|d| BASE_US / 1000 + d)
                        ],
                        prop_oneof![Just(-1), Just(0), 1000i32..400_000],
                        prop_oneof![1 => Just(None), 3 => (0u8..3).prop_map(Some)],
                    ),
                    n,
                ),
            )
        })
        .prop_map(|(ids, attrs)| {
            ids.into_iter()
                .zip(attrs)
                .map(|(id, (weight, addr, start_ms, warmup_ms, zone))| Inv {
                    id,
                    weight,
                    addr,
                    start_ms,
                    warmup_ms,
                    zone,
                })
                .collect()
        })
}

/// Time steps in µs: mostly forwards, sometimes backwards, sometimes big jumps.
fn arb_dt() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => 0i64..2_000_000,
        1 => -60_000_000i64..0,
        1 => 0i64..400_000_000,
    ]
}

fn arb_ids() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        2 => Just(Vec::new()),
        3 => proptest::collection::vec(0u64..14, 1..5),
    ]
}

pub(crate) fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (arb_set(), 0u8..12, any::<usize>())
            .prop_map(|(set, fault, at)| Op::Update { set, fault, at }),
        1 => (0..NAMES.len()).prop_map(Op::Method),
        6 => (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..12), arb_dt())
            .prop_map(|(m, key, dt)| Op::Select { m, key, dt }),
        3 => (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..12), arb_ids(), arb_ids(), arb_dt())
            .prop_map(|(m, key, cands, excl, dt)| Op::SelectAmong { m, key, cands, excl, dt }),
        7 => (
            any::<usize>(),
            any::<u8>(),
            0u64..16,
            prop_oneof![8 => 0i64..50_000_000, 1 => Just(0), 1 => Just(i64::MAX), 1 => Just(-1)],
            prop_oneof![10 => 0i32..4, 1 => Just(4), 1 => Just(-1)],
            arb_dt(),
        )
            .prop_map(|(pick, m, id, elapsed, outcome, dt)| Op::Report { pick, m, id, elapsed, outcome, dt }),
        1 => arb_dt().prop_map(|dt| Op::Stats { dt }),
    ]
}

pub(crate) fn invokers(set: &[Inv]) -> Vec<Invoker> {
    set.iter()
        .map(|i| {
            let inv = Invoker::new(i.id, format!("10.1.{}.{}:20880", i.addr, i.id))
                .weight(i.weight)
                .start_time_ms(i.start_ms)
                .warmup_ms(i.warmup_ms);
            match i.zone {
                Some(z) => inv.zone(ZONES[z as usize]),
                None => inv,
            }
        })
        .collect()
}
