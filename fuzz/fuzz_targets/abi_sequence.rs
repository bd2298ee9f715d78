//! libFuzzer target: byte-driven sequences of C ABI calls (checks in ../targets.rs).
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::abi_sequence(data));
