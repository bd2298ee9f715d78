//! libFuzzer target: config strings through plb_balancer_new (checks in ../targets.rs).
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::config(data));
