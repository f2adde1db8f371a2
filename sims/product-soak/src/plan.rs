//! The fault schedule: what happens when, scaled to the run's length and drawn from the seed.

use std::fmt::Write as _;

use fleet_soak::Rng;

/// One fault (or chore) of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A tenth of the sims stopped, started again `down_for` seconds later.
    Restarts,
    /// Two sims stopped for `seconds` (long enough for the target-down alert), then started again.
    LongDown {
        /// How long.
        seconds: u64,
    },
    /// VictoriaMetrics stopped for `seconds`.
    ReceiverDown {
        /// How long.
        seconds: u64,
    },
    /// The `[[file_sd]]` file rewritten: a target added, one removed, one relabelled.
    FileSd,
    /// `POST /-/reload` after a config change (a new target), or with a broken config.
    Reload {
        /// The config is broken.
        broken: bool,
    },
    /// telemon killed with SIGKILL and started again.
    Kill,
    /// Bogus connections to the dial-in listeners.
    Burst,
    /// The queues' tmpfs filled for `seconds`, then freed.
    DiskFull {
        /// How long.
        seconds: u64,
    },
}

/// The schedule of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The run's length, in seconds (from when every target is up).
    pub seconds: u64,
    /// The warm-up: the figures' reference value is taken at its end, their slope judged after it.
    pub warm_up: u64,
    /// How long a restarted sim stays stopped.
    pub down_for: u64,
    /// (second, fault), in time order.
    pub faults: Vec<(u64, Fault)>,
}

/// A time near `at`, moved by up to `jitter` seconds either way (drawn from `rng`).
fn near(rng: &mut Rng, at: u64, jitter: u64) -> u64 {
    if jitter == 0 {
        return at;
    }
    (at + rng.below(2 * jitter + 1)).saturating_sub(jitter)
}

impl Plan {
    /// The schedule of a `minutes`-minute run from `seed`. An hour has: restarts every 30 s (20 s down, so that
    /// a 15 s scrape sees each), two long stops of 150 s (the target-down alert), VictoriaMetrics down for 2
    /// minutes twice, the file_sd file rewritten every minute, a reload every 5 minutes (the second broken), one
    /// SIGKILL (in the warm-up, so that the figures are judged on one process), one burst, one full disk of a
    /// minute. A shorter run shortens the periods, and does each kind of fault at least once.
    pub fn new(minutes: f64, seed: u64) -> Plan {
        let mut rng = Rng(seed);
        let seconds = (minutes * 60.0).round().max(120.0) as u64;
        let long = seconds >= 1200;
        let warm_up = if long { 600 } else { seconds / 3 };
        let mut faults = Vec::new();
        let round = 30;
        let mut t = 10;
        while t + 40 < seconds {
            faults.push((t, Fault::Restarts));
            t += round;
        }
        let long_down = if long { 150 } else { 100 };
        faults.push((near(&mut rng, 15, 3), Fault::LongDown { seconds: long_down }));
        if long {
            faults.push((near(&mut rng, seconds / 2, 60), Fault::LongDown { seconds: long_down }));
        }
        let outage = if long { 120 } else { (seconds / 6).max(20) };
        let outages: &[f64] = if long { &[0.35, 0.7] } else { &[0.35] };
        for f in outages {
            let at = near(&mut rng, (seconds as f64 * f) as u64, seconds / 30);
            faults.push((at, Fault::ReceiverDown { seconds: outage }));
        }
        let sd_every = if long { 60 } else { (seconds / 6).max(20) };
        let mut t = 20;
        while t + 20 < seconds {
            faults.push((t, Fault::FileSd));
            t += sd_every;
        }
        let reload_every = if long { 300 } else { (seconds / 4).max(30) };
        let mut t = reload_every;
        let mut n = 0;
        while t + 30 < seconds {
            n += 1;
            // 15 s after a multiple of the period: away from the file_sd rewrites (every 30 s or minute from 20 s).
            faults.push((t + 15, Fault::Reload { broken: n == 2 }));
            t += reload_every;
        }
        faults.push((near(&mut rng, warm_up / 2, warm_up / 10), Fault::Kill));
        // After the warm-up, so that its descriptors are not the warm-up's reference.
        let burst = (seconds * 3 / 10).max(warm_up + seconds / 10);
        faults.push((near(&mut rng, burst, seconds / 30), Fault::Burst));
        let full = if long { 60 } else { (seconds / 9).max(15) };
        faults.push((near(&mut rng, seconds * 55 / 100, seconds / 30), Fault::DiskFull { seconds: full }));
        faults.sort_by_key(|f| f.0);
        Plan { seconds, warm_up, down_for: 20, faults }
    }

    /// The schedule as text, one fault a line (restarts summarised).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let restarts: Vec<u64> = self.faults.iter().filter(|f| f.1 == Fault::Restarts).map(|f| f.0).collect();
        let _ = writeln!(
            out,
            "  restarts of a tenth of the sims ({} s down): {} rounds, every 30 s from +{}s",
            self.down_for,
            restarts.len(),
            restarts.first().unwrap_or(&0)
        );
        for (t, f) in self.faults.iter().filter(|f| f.1 != Fault::Restarts) {
            let what = match f {
                Fault::LongDown { seconds } => {
                    format!("two sims stopped for {seconds} s (target-down alert)")
                }
                Fault::ReceiverDown { seconds } => format!("VictoriaMetrics stopped for {seconds} s"),
                Fault::FileSd => "file_sd file rewritten (one added, one removed, one relabelled)".into(),
                Fault::Reload { broken: false } => "POST /-/reload (a target added)".into(),
                Fault::Reload { broken: true } => "POST /-/reload with a broken config".into(),
                Fault::Kill => "telemon SIGKILLed and started again".into(),
                Fault::Burst => "burst of bogus dial-in connections".into(),
                Fault::DiskFull { seconds } => format!("queues' disk full for {seconds} s"),
                Fault::Restarts => unreachable!(),
            };
            let _ = writeln!(out, "  +{t:>5}s  {what}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_fault_is_in_a_short_run_and_an_hour() {
        for minutes in [3.0, 60.0] {
            let plan = Plan::new(minutes, 7);
            let has = |f: &dyn Fn(&Fault) -> bool| plan.faults.iter().filter(|(_, x)| f(x)).count();
            assert!(has(&|f| *f == Fault::Restarts) >= 3);
            assert!(has(&|f| matches!(f, Fault::LongDown { .. })) >= 1);
            assert!(has(&|f| matches!(f, Fault::ReceiverDown { .. })) >= 1);
            assert!(has(&|f| *f == Fault::FileSd) >= 3);
            assert!(has(&|f| *f == Fault::Reload { broken: false }) >= 1, "{plan:?}");
            assert_eq!(has(&|f| *f == Fault::Reload { broken: true }), 1);
            assert_eq!(has(&|f| *f == Fault::Kill), 1);
            assert_eq!(has(&|f| *f == Fault::Burst), 1);
            assert_eq!(has(&|f| matches!(f, Fault::DiskFull { .. })), 1);
            assert!(plan.faults.iter().all(|(t, _)| *t < plan.seconds));
            assert!(plan.faults.windows(2).all(|w| w[0].0 <= w[1].0));
        }
        let hour = Plan::new(60.0, 7);
        assert_eq!(
            hour.faults.iter().filter(|f| matches!(f.1, Fault::ReceiverDown { seconds: 120 })).count(),
            2
        );
        assert_eq!(hour.warm_up, 600);
    }
}
