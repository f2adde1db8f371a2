//! The judgements of the table, apart from the I/O: whether a sampled figure stays flat after the warm-up, and
//! what a receiver's series miss.

/// A figure sampled over the run: (seconds since the start, value).
pub type Samples = [(f64, f64)];

/// How a figure sampled every 10 s behaved after the warm-up.
#[derive(Debug, Clone, PartialEq)]
pub struct Trend {
    /// The median of the samples of the last minute of the warm-up (or its last sample).
    pub warm: f64,
    /// The highest sample after the warm-up.
    pub peak: f64,
    /// The last sample.
    pub last: f64,
    /// Medians of the middle and the last third of the samples after the warm-up.
    pub middle: f64,
    /// See `middle`.
    pub end: f64,
    /// The least-squares slope after the warm-up, per hour, relative to the median (information).
    pub slope_per_hour: f64,
    /// Flat: the last third's median within `tolerance` of the middle third's, and the peak within 1.5x the
    /// warm-up value.
    pub ok: bool,
}

/// The median of `v` (0 when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Judges `samples` after `warm_up` seconds: flat when the median of the last third of the later samples is
/// at most `tolerance` (relative) plus `slack` (absolute) above the median of the middle third, and the peak
/// is at most 1.5 times the warm-up value (the median of its last minute) plus `slack`.
pub fn trend(samples: &Samples, warm_up: f64, tolerance: f64, slack: f64) -> Trend {
    let before: Vec<f64> =
        samples.iter().filter(|(t, _)| *t <= warm_up && *t > warm_up - 60.0).map(|s| s.1).collect();
    let warm = if before.is_empty() {
        samples.iter().rev().find(|(t, _)| *t <= warm_up).map_or(0.0, |s| s.1)
    } else {
        median(&before)
    };
    let after: Vec<(f64, f64)> = samples.iter().copied().filter(|(t, _)| *t > warm_up).collect();
    let values: Vec<f64> = after.iter().map(|s| s.1).collect();
    let third = values.len() / 3;
    let (middle, end) = if third == 0 {
        (median(&values), median(&values))
    } else {
        (median(&values[third..2 * third]), median(&values[values.len() - third..]))
    };
    let peak = values.iter().copied().fold(0.0, f64::max);
    let slope_per_hour = {
        let n = after.len() as f64;
        let (mt, mv) =
            (after.iter().map(|s| s.0).sum::<f64>() / n.max(1.0), values.iter().sum::<f64>() / n.max(1.0));
        let cov: f64 = after.iter().map(|(t, v)| (t - mt) * (v - mv)).sum();
        let var: f64 = after.iter().map(|(t, _)| (t - mt).powi(2)).sum();
        let med = median(&values);
        if var > 0.0 && med > 0.0 {
            cov / var * 3600.0 / med
        } else {
            0.0
        }
    };
    let ok = !values.is_empty() && end <= middle * (1.0 + tolerance) + slack && peak <= 1.5 * warm + slack;
    Trend { warm, peak, last: values.last().copied().unwrap_or(0.0), middle, end, slope_per_hour, ok }
}

/// Why a receiver may lack samples: windows of documented loss, in Unix ms.
#[derive(Debug, Clone, Default)]
pub struct Losses {
    /// From the SIGKILL (less a batch and a `queue_sync`) to the restarted telemon's first batch.
    pub kill: Vec<(i64, i64)>,
    /// While the queues' disk was full (and a batch after).
    pub disk: Vec<(i64, i64)>,
}

/// Whether `t` (Unix ms) falls in one of `windows` (ends included).
pub fn inside(windows: &[(i64, i64)], t: i64) -> bool {
    windows.iter().any(|(s, e)| t >= *s && t <= *e)
}

/// What one series lacks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gaps {
    /// Seconds from its first sample to its last.
    pub expected: i64,
    /// Samples held (distinct timestamps).
    pub received: i64,
    /// Missing seconds inside the kill windows.
    pub kill: i64,
    /// Missing seconds inside the full-disk windows.
    pub disk: i64,
    /// Missing seconds elsewhere: lost.
    pub lost: i64,
    /// The lost gaps, (from, to) in Unix ms.
    pub lost_at: Vec<(i64, i64)>,
    /// Timestamps held twice.
    pub duplicates: i64,
    /// Timestamps held twice outside `dup_ok`.
    pub bad_duplicates: i64,
    /// The first few of those, in Unix ms.
    pub dup_at: Vec<i64>,
}

/// The gaps of a series sampled every `step_ms` with timestamps `ts` (sorted): a gap longer than 1.5 steps
/// misses its seconds. Those inside a window of `losses` are documented losses; the others are lost,
/// unless `excused` says so for the gap (the target was down, say). Duplicates are allowed inside the
/// windows of `dup_ok`.
pub fn gaps(
    ts: &[i64],
    step_ms: i64,
    losses: &Losses,
    dup_ok: &[(i64, i64)],
    excused: impl Fn(i64, i64) -> bool,
) -> Gaps {
    let mut g = Gaps::default();
    let (Some(first), Some(last)) = (ts.first(), ts.last()) else { return g };
    g.expected = (last - first) / step_ms + 1;
    for pair in ts.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a == b {
            g.duplicates += 1;
            if !inside(dup_ok, a) {
                g.bad_duplicates += 1;
                if g.dup_at.len() < 3 {
                    g.dup_at.push(a);
                }
            }
            continue;
        }
        g.received += 1;
        if b - a <= step_ms * 3 / 2 {
            continue;
        }
        // The missing seconds, each documented by the first window it falls in; the rest is lost unless
        // excused.
        let missing = (b - a + step_ms / 2) / step_ms - 1;
        let (mut kill, mut disk) = (0, 0);
        for k in 1..=missing {
            let t = a + k * step_ms;
            if inside(&losses.kill, t) {
                kill += 1;
            } else if inside(&losses.disk, t) {
                disk += 1;
            }
        }
        g.kill += kill;
        g.disk += disk;
        let rest = missing - kill - disk;
        if rest > 0 && !excused(a, b) {
            g.lost += rest;
            g.lost_at.push((a, b));
        }
    }
    g.received += 1;
    g
}

/// Whether a series of `telemon_target_up` ended down at `a`: the sample at `a` is a stale marker (a
/// receiver keeps Prometheus' staleness NaN; VictoriaMetrics exports it as `null`) and the last value
/// before it is 0. Telemon forgets a dial-in target only once it has lingered down; the name may then be
/// taken again by a later peer from the same address and port, which starts the series again.
pub fn ended_down(samples: &[(i64, f64)], a: i64) -> bool {
    let mut before: Vec<&(i64, f64)> = samples.iter().filter(|(t, _)| *t <= a).collect();
    before.sort_by_key(|(t, _)| *t);
    match before.as_slice() {
        [.., (_, down), (t, stale)] => *t == a && stale.is_nan() && *down == 0.0,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_figure_passes_and_a_growing_one_fails() {
        let flat: Vec<(f64, f64)> = (0..60).map(|i| (i as f64 * 10.0, 100.0 + (i % 3) as f64)).collect();
        let t = trend(&flat, 200.0, 0.1, 0.0);
        assert!(t.ok, "{t:?}");
        assert!(t.slope_per_hour.abs() < 0.1, "{t:?}");
        let growing: Vec<(f64, f64)> = (0..60).map(|i| (i as f64 * 10.0, 100.0 + 2.0 * i as f64)).collect();
        let t = trend(&growing, 200.0, 0.1, 0.0);
        assert!(!t.ok, "{t:?}");
        let spike: Vec<(f64, f64)> =
            (0..60).map(|i| (i as f64 * 10.0, if i == 40 { 200.0 } else { 100.0 })).collect();
        assert!(!trend(&spike, 200.0, 0.1, 0.0).ok, "a peak over 1.5x the warm-up value fails");
    }

    #[test]
    fn gaps_are_documented_excused_or_lost() {
        let losses = Losses { kill: vec![(10_500, 12_500)], disk: vec![(20_500, 23_500)] };
        let mut ts: Vec<i64> = (0..40).map(|s| s * 1000).filter(|t| !(11_000..=12_000).contains(t)).collect();
        ts.retain(|t| !(21_000..=23_000).contains(t) && *t != 30_000 && !(35_000..=36_000).contains(t));
        ts.push(5_000);
        ts.push(38_000);
        ts.sort();
        let g = gaps(&ts, 1000, &losses, &[(37_000, 39_000)], |a, _| a == 34_000);
        assert_eq!((g.kill, g.disk, g.lost, g.lost_at.clone()), (2, 3, 1, vec![(29_000, 31_000)]), "{g:?}");
        assert_eq!((g.duplicates, g.bad_duplicates), (2, 1));
        assert_eq!(g.expected, 40);
        assert_eq!(g.received, 40 - 2 - 3 - 1 - 2);
        // A gap that outlasts its window: the seconds after it are lost, unless excused.
        let ts = [0, 1000, 9000, 10_000];
        let window = Losses { kill: vec![(1500, 4500)], disk: vec![] };
        let g = gaps(&ts, 1000, &window, &[], |_, _| false);
        assert_eq!((g.kill, g.lost, g.lost_at.clone()), (3, 4, vec![(1000, 9000)]), "{g:?}");
        let g = gaps(&ts, 1000, &window, &[], |_, _| true);
        assert_eq!((g.kill, g.lost), (3, 0), "{g:?}");
    }

    #[test]
    fn a_series_ends_down_only_with_a_zero_then_a_stale_marker() {
        let down = [(1000, 1.0), (2000, 0.0), (3000, f64::NAN), (200_000, 1.0)];
        assert!(ended_down(&down, 3000));
        let up = [(1000, 1.0), (2000, 1.0), (3000, f64::NAN), (200_000, 1.0)];
        assert!(!ended_down(&up, 3000), "it ended up: a loss");
        let cut = [(1000, 0.0), (2000, 0.0), (200_000, 1.0)];
        assert!(!ended_down(&cut, 2000), "no stale marker: telemon did not end it");
        assert!(!ended_down(&[(3000, f64::NAN)], 3000));
    }
}
