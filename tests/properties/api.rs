//! Two ways to drive a balancer: the Rust API and the C ABI, behind one interface.

use polylb::ffi::*;
use polylb::{Balancer, Invoker, Outcome};
use std::ptr::{null, null_mut};

pub(crate) trait Api {
    fn upd(&self, set: &[Invoker]) -> Result<(), i32>;
    fn meth(&self, name: &str) -> u32;
    fn pick_among(
        &self,
        m: u32,
        key: &[u8],
        cands: &[u64],
        excl: &[u64],
        now: i64,
    ) -> Result<u64, i32>;
    fn rep(&self, m: u32, id: u64, elapsed: i64, outcome: i32, now: i64) -> Result<(), i32>;
    fn stats_text(&self, now: i64) -> String;
}

impl Api for Balancer {
    fn upd(&self, set: &[Invoker]) -> Result<(), i32> {
        Balancer::update(self, set).map_err(|e| {
            assert!(!e.message.is_empty());
            e.status.code()
        })
    }
    fn meth(&self, name: &str) -> u32 {
        Balancer::method(self, name).unwrap()
    }
    fn pick_among(
        &self,
        m: u32,
        key: &[u8],
        cands: &[u64],
        excl: &[u64],
        now: i64,
    ) -> Result<u64, i32> {
        Balancer::select_among(self, m, key, cands, excl, now).map_err(|s| s.code())
    }
    fn rep(&self, m: u32, id: u64, elapsed: i64, outcome: i32, now: i64) -> Result<(), i32> {
        let outcome = Outcome::from_code(outcome).ok_or(PLB_ERR_UNKNOWN_OUTCOME)?;
        Balancer::report(self, m, id, elapsed, outcome, now).map_err(|s| s.code())
    }
    fn stats_text(&self, now: i64) -> String {
        self.stats_json(now)
    }
}

pub(crate) struct Abi(*mut plb_balancer);

impl Abi {
    pub(crate) fn new(config: &str) -> Abi {
        let mut b = null_mut();
        let s = unsafe {
            plb_balancer_new(
                config.as_ptr(),
                config.len(),
                &mut b,
                null_mut(),
                0,
                null_mut(),
            )
        };
        assert_eq!(s, PLB_OK);
        Abi(b)
    }
}

impl Drop for Abi {
    fn drop(&mut self) {
        unsafe { plb_balancer_free(self.0) }
    }
}

impl Api for Abi {
    fn upd(&self, set: &[Invoker]) -> Result<(), i32> {
        let raw: Vec<plb_invoker> = set
            .iter()
            .map(|i| plb_invoker {
                id: i.id,
                address: i.address.as_ptr(),
                address_len: i.address.len(),
                weight: i.weight,
                start_time_ms: i.start_time_ms,
                warmup_ms: i.warmup_ms,
                zone: i.zone.as_ref().map_or(null(), |z| z.as_ptr()),
                zone_len: i.zone.as_ref().map_or(0, |z| z.len()),
            })
            .collect();
        let mut err = [0u8; 256];
        let mut len = 0usize;
        let s = unsafe {
            plb_balancer_update(
                self.0,
                raw.as_ptr(),
                raw.len(),
                err.as_mut_ptr() as *mut _,
                err.len(),
                &mut len,
            )
        };
        assert_eq!(err[len], 0);
        if s == PLB_OK {
            assert_eq!(len, 0);
            Ok(())
        } else {
            assert!(len > 0, "a rejected update says why");
            Err(s)
        }
    }
    fn meth(&self, name: &str) -> u32 {
        let mut id = u32::MAX;
        let s = unsafe { plb_balancer_method(self.0, name.as_ptr(), name.len(), &mut id) };
        assert_eq!(s, PLB_OK);
        id
    }
    fn pick_among(
        &self,
        m: u32,
        key: &[u8],
        cands: &[u64],
        excl: &[u64],
        now: i64,
    ) -> Result<u64, i32> {
        let r = unsafe {
            plb_select_among(
                self.0,
                m,
                key.as_ptr(),
                key.len(),
                cands.as_ptr(),
                cands.len(),
                excl.as_ptr(),
                excl.len(),
                now,
            )
        };
        if r >= 0 {
            Ok(r as u64)
        } else {
            Err((-r) as i32)
        }
    }
    fn rep(&self, m: u32, id: u64, elapsed: i64, outcome: i32, now: i64) -> Result<(), i32> {
        match unsafe { plb_report(self.0, m, id, elapsed, outcome, now) } {
            PLB_OK => Ok(()),
            s => Err(s),
        }
    }
    fn stats_text(&self, now: i64) -> String {
        let mut len = 0usize;
        let s = unsafe { plb_balancer_stats(self.0, now, null_mut(), 0, &mut len) };
        assert_eq!(s, PLB_ERR_BUFFER_TOO_SMALL);
        let mut buf = vec![0u8; len + 1];
        let needed = len;
        let s = unsafe {
            plb_balancer_stats(self.0, now, buf.as_mut_ptr() as *mut _, buf.len(), &mut len)
        };
        assert_eq!((s, len), (PLB_OK, needed));
        assert_eq!(buf[len], 0);
        buf.truncate(len);
        String::from_utf8(buf).unwrap()
    }
}
