//! libFuzzer target: two balancers' ABI call sequences interleaved on one thread, balancers
//! freed and created between calls (checks in ../targets.rs).
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::abi_pair(data));
