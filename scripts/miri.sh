#!/usr/bin/env bash
# Runs the unsafe code under Miri (nightly): the library's unit tests that finish in minutes,
# and tests/concurrency.rs::small_races_for_miri under Stacked Borrows and, over four thread
# schedules, Tree Borrows; then the `weak_memory` tests over 32 schedules (orderings that x86-64
# forgives: they pass there whatever the orderings, and fail here when one is too weak). About
# 20-40 min on the shared 2-core VM (see docs/reliability.md).
# Not part of test-all.sh or CI: those machines may not have a nightly toolchain with Miri.
#   rustup toolchain install nightly && rustup +nightly component add miri rust-src
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==== %s\n' "$*"; }

# The library's clock (clock_gettime) needs isolation off. Leaks are not UB, and the tests
# leak on purpose (`rng::seeded_for_test` leaks a 'static source). parking_lot casts integers
# to pointers; permissive provenance accepts that.
base="-Zmiri-disable-isolation -Zmiri-ignore-leaks -Zmiri-permissive-provenance"

# Unit tests left out: loops of thousands of calls, builds or digests that would take Miri
# from ten minutes to an hour each (0.1-34 s natively). (The key digest's empty `asm!`, an
# optimisation barrier Miri cannot run, is compiled out under Miri.)
skip=(
  boundedhash_in_flight_total_survives_updates_racing_calls
  boundedhash_in_flight_totals_survive_updates_racing_first_calls_of_methods
  incremental_build_equals_full_build
  a_reset_racing_reports_never_mixes_windows
  equals_the_walk_for_random_weights_and_counters
  an_unmatched_report_racing_the_spread_is_compensated_once
  reports_without_a_select_never_read_as_a_call_in_flight
  reads_that_began_before_the_spread_count_the_cells
  ceiling_equals_a_full_binary_search
  concurrent_counting_loses_nothing
  picks_equal_the_walk_while_invokers_warm_up_and_finish
  the_walk_by_runs_is_dubbos_walk_and_its_total_the_sum
  a_caught_panic_writes_its_message_like_any_failure
  equals_md5_for_every_length_and_random_contents
  hashing_equals_the_walk_on_md5_rings
  picks_among_candidates_are_the_same_hashed_or_walked
  weights_adding_up_past_the_limit_are_refused
  a_ring_past_its_point_limit_is_refused_and_changes_nothing
  walks_equal_the_reference_on_crowded_rings
  many_methods_are_found_in_few_probes
  concurrent_inserts_across_tables_agree_and_are_found
)
args=()
for t in "${skip[@]}"; do args+=(--skip "$t"); done

step "miri: library unit tests (Stacked Borrows)"
MIRIFLAGS="$base" cargo +nightly miri test --lib -- "${args[@]}"

step "miri: small races: select/report/update/drop and the C ABI (Stacked Borrows)"
MIRIFLAGS="$base" cargo +nightly miri test --test concurrency -- --exact small_races_for_miri

step "miri: the same under Tree Borrows, four schedules"
MIRIFLAGS="$base -Zmiri-tree-borrows -Zmiri-many-seeds=0..4" \
  cargo +nightly miri test --test concurrency -- --exact small_races_for_miri

step "miri: weak-memory orderings (tests named weak_memory), 32 schedules"
MIRIFLAGS="$base -Zmiri-many-seeds=0..32" cargo +nightly miri test --lib -- weak_memory
MIRIFLAGS="$base -Zmiri-many-seeds=0..32" cargo +nightly miri test --test concurrency -- weak_memory
