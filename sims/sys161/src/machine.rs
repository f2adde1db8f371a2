//! The simulated machine: plausible, mutually consistent counters as a pure function of simulated time.
//!
//! Each activity runs at a rate `a + b·sin(2πt/period)` with `a >= |b|`, so its integral, which has a
//! closed form, never decreases; every counter is the floor of such an integral. The four cycle
//! counters add up to `clock_hz` cycles per simulated second, and the interrupt count follows the timer
//! (100 Hz), the disk and the console. Because the counters depend on the time alone, every client sees
//! the same machine whatever its interval.

use std::f64::consts::TAU;

/// A rate `base + swing·sin(2πt/period)` per simulated second.
#[derive(Debug, Clone, Copy)]
struct Rate {
    base: f64,
    swing: f64,
    period: f64,
}

impl Rate {
    const fn new(base: f64, swing: f64, period: f64) -> Self {
        Rate { base, swing, period }
    }

    /// The integral from 0 to `t` seconds.
    fn integral(self, t: f64) -> f64 {
        self.base * t + self.swing * self.period / TAU * (1.0 - (TAU * t / self.period).cos())
    }
}

// Shares of the cycles (the bases sum to 1, so user instructions keep a positive rate).
const IDLE: Rate = Rate::new(0.30, 0.20, 17.0);
const KERNEL: Rate = Rate::new(0.22, 0.10, 5.3);
const STALLS: Rate = Rate::new(0.03, 0.02, 3.1);
// Events per second.
const TIMER_HZ: f64 = 100.0;
const EXCEPTIONS: Rate = Rate::new(1500.0, 1200.0, 7.7);
const DISK_SECTORS: Rate = Rate::new(60.0, 50.0, 23.0);
const CONSOLE_CHARS: Rate = Rate::new(40.0, 40.0, 11.0);
const EMUFS_OPS: Rate = Rate::new(3.0, 3.0, 13.0);
const NET_PACKETS: Rate = Rate::new(0.5, 0.5, 29.0);

/// The counters' model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Machine {
    /// Processor cycles per simulated second (instructions at full load).
    pub clock_hz: u64,
    /// Where the six 32-bit counters start (near `u32::MAX` to see them wrap soon).
    pub u32_start: u32,
}

impl Default for Machine {
    fn default() -> Self {
        // 25 MHz: what the captured sys161 output shows for a busy kernel.
        Machine { clock_hz: 25_000_000, u32_start: 0 }
    }
}

impl Machine {
    /// The `DATA` values at `nsec` of simulated time, in [`meter161::SYS161_FIELDS`] order.
    pub fn counters_at(&self, nsec: u64) -> [u64; 11] {
        let t = nsec as f64 / 1e9;
        let hz = self.clock_hz as f64;
        let idle = hz * IDLE.integral(t);
        let kinsns = hz * KERNEL.integral(t);
        let udud = hz * STALLS.integral(t);
        let uinsns = (hz * t - idle - kinsns - udud).max(0.0);
        let count = |r: Rate| r.integral(t).floor() as u64;
        let disk = count(DISK_SECTORS);
        let con = count(CONSOLE_CHARS);
        let irqs = (TIMER_HZ * t).floor() as u64 + disk / 4 + con / 32;
        let wrap32 = |v: u64| (u64::from(self.u32_start) + v) & u64::from(u32::MAX);
        [
            nsec,
            kinsns as u64,
            uinsns as u64,
            udud as u64,
            idle as u64,
            wrap32(irqs),
            wrap32(count(EXCEPTIONS)),
            wrap32(disk),
            wrap32(con),
            wrap32(count(EMUFS_OPS)),
            wrap32(count(NET_PACKETS)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_never_decrease_and_cycles_add_up() {
        let m = Machine::default();
        let mut prev = m.counters_at(0);
        assert_eq!(prev, [0; 11]);
        for step in 1..=2000u64 {
            let now = m.counters_at(step * 37_000_000);
            for (i, (a, b)) in prev.iter().zip(&now).enumerate() {
                assert!(b >= a, "field {i} went from {a} to {b}");
            }
            let cycles: u64 = now[1] + now[2] + now[3] + now[4];
            let expected = (step * 37_000_000) as f64 / 1e9 * 25e6;
            assert!((cycles as f64 - expected).abs() <= 4.0, "{cycles} vs {expected}");
            prev = now;
        }
        assert!(prev[5] > 0 && prev[7] > 0 && prev[8] > 0, "irqs, disk and con move: {prev:?}");
    }

    #[test]
    fn u32_counters_wrap() {
        let m = Machine { u32_start: u32::MAX - 10, ..Machine::default() };
        assert_eq!(m.counters_at(0)[5], u64::from(u32::MAX - 10));
        let later = m.counters_at(1_000_000_000);
        assert!(later[5] < 1000, "irqs wrapped: {}", later[5]);
    }
}
