//! The bench harness every protocol crate's criterion bench shares: one case list for criterion and for
//! `cargo xtask bench --table`, which counts each case's instructions with callgrind.
//!
//! Count mode: with `TELEMON_COUNT_LIST=1` a bench binary prints one line per case,
//! `case<TAB>crate<TAB>group<TAB>name<TAB>baseline<TAB>bytes|elements<TAB>per iteration<TAB>iterations`;
//! with `TELEMON_COUNT_CASE=group/name` it runs that case once uncounted, then `TELEMON_COUNT_ITERS` times
//! (default: its group's) through [`telemon_counted`], for `valgrind --tool=callgrind
//! --toggle-collect='*telemon_counted*'`. Set-up runs outside `telemon_counted`, as it runs outside criterion's
//! timing.
//!
//! [`corpus`] is what the tests that replay the fuzz targets' seed corpora share.
//!
//! ```no_run
//! use bench_harness::{Case, Group};
//! fn groups() -> Vec<Group> {
//!     vec![Group::new("sum", criterion::Throughput::Elements(1000), 100)
//!         .case(Case::iter("fold", || (0..1000u64).fold(0, |a, b| a + b)))
//!         .case(Case::iter("sum", || (0..1000u64).sum::<u64>()).vs("fold"))]
//! }
//! bench_harness::main("example", groups);
//! ```

pub mod corpus;

/// A criterion group, its cases and how many iterations count mode runs by default.
pub struct Group {
    name: String,
    throughput: criterion::Throughput,
    count_iters: u64,
    /// Flat sampling with this sample size, for cases too slow for criterion's default 100 linear samples.
    flat: Option<usize>,
    sample_size: Option<usize>,
    cases: Vec<Case>,
}

/// One benchmark, `baseline` naming the case of the same group it is compared with.
pub struct Case {
    name: String,
    baseline: Option<String>,
    time: Box<dyn Fn(&mut criterion::Bencher<'_>)>,
    count: Box<dyn Fn(u64)>,
}

impl Group {
    /// A group of cases measured per `throughput`; count mode runs each `count_iters` times by default.
    pub fn new(name: impl Into<String>, throughput: criterion::Throughput, count_iters: u64) -> Self {
        Group { name: name.into(), throughput, count_iters, flat: None, sample_size: None, cases: Vec::new() }
    }

    /// Flat sampling with `sample_size` samples (for slow cases).
    pub fn flat(mut self, sample_size: usize) -> Self {
        self.flat = Some(sample_size);
        self
    }

    /// Criterion's sample size.
    pub fn sample_size(mut self, n: usize) -> Self {
        self.sample_size = Some(n);
        self
    }

    /// Adds a case.
    pub fn case(mut self, case: Case) -> Self {
        self.cases.push(case);
        self
    }

    /// Runs the group under criterion.
    pub fn bench(&self, c: &mut criterion::Criterion) {
        let mut group = c.benchmark_group(&self.name);
        group.throughput(self.throughput.clone());
        if let Some(n) = self.flat {
            group.sampling_mode(criterion::SamplingMode::Flat).sample_size(n);
        }
        if let Some(n) = self.sample_size {
            group.sample_size(n);
        }
        for case in &self.cases {
            group.bench_function(&case.name, |b| (case.time)(b));
        }
        group.finish();
    }
}

impl Case {
    /// `routine` on a fresh `setup()` per iteration; set-up and drop outside the timing (`iter_batched`).
    pub fn batched<I: 'static, O: 'static>(
        name: &str,
        size: criterion::BatchSize,
        setup: impl Fn() -> I + 'static,
        routine: impl Fn(I) -> O + 'static,
    ) -> Self {
        let (setup, routine) = (std::rc::Rc::new(setup), std::rc::Rc::new(routine));
        let (s, r) = (setup.clone(), routine.clone());
        Case {
            name: name.into(),
            baseline: None,
            time: Box::new(move |b| b.iter_batched(|| s(), |i| r(i), size)),
            count: Box::new(move |iters| {
                drop(routine(setup()));
                for _ in 0..iters {
                    let input = setup();
                    drop(telemon_counted(&*routine, input));
                }
            }),
        }
    }

    /// `routine` timed whole, its result dropped inside the timing (`iter`).
    pub fn iter<O: 'static>(name: &str, routine: impl Fn() -> O + 'static) -> Self {
        let routine = std::rc::Rc::new(routine);
        let r = routine.clone();
        Case {
            name: name.into(),
            baseline: None,
            time: Box::new(move |b| b.iter(|| r())),
            count: Box::new(move |iters| {
                drop(routine());
                for _ in 0..iters {
                    telemon_counted(&|()| drop(routine()), ());
                }
            }),
        }
    }

    /// Names the case of the same group this one is compared with.
    pub fn vs(mut self, baseline: &str) -> Self {
        self.baseline = Some(baseline.into());
        self
    }
}

/// The only code callgrind counts.
#[inline(never)]
pub fn telemon_counted<I, O>(routine: &dyn Fn(I) -> O, input: I) -> O {
    criterion::black_box(routine(criterion::black_box(input)))
}

/// Lists or counts when asked to by the environment; false means: run criterion.
pub fn count_mode(krate: &str, groups: fn() -> Vec<Group>) -> bool {
    let iters = |group: &Group| {
        std::env::var("TELEMON_COUNT_ITERS").ok().and_then(|n| n.parse().ok()).unwrap_or(group.count_iters)
    };
    if std::env::var_os("TELEMON_COUNT_LIST").is_some() {
        for group in groups() {
            let (unit, per_iter) = match group.throughput {
                criterion::Throughput::Bytes(n) | criterion::Throughput::BytesDecimal(n) => ("bytes", n),
                criterion::Throughput::Elements(n) => ("elements", n),
            };
            for case in &group.cases {
                let baseline = case.baseline.as_deref().unwrap_or("");
                let (g, n, i) = (&group.name, &case.name, iters(&group));
                println!("case\t{krate}\t{g}\t{n}\t{baseline}\t{unit}\t{per_iter}\t{i}");
            }
        }
        return true;
    }
    let Some(wanted) = std::env::var_os("TELEMON_COUNT_CASE") else { return false };
    let wanted = wanted.to_string_lossy();
    for group in groups() {
        for case in &group.cases {
            if format!("{}/{}", group.name, case.name) == wanted {
                (case.count)(iters(&group));
                return true;
            }
        }
    }
    panic!("no case {wanted:?} in {krate}'s bench");
}

/// Runs every group under criterion, configured from the command line as `criterion_main!` does.
pub fn run_criterion(groups: fn() -> Vec<Group>) {
    let mut c = criterion::Criterion::default().configure_from_args();
    for group in groups() {
        group.bench(&mut c);
    }
    c.final_summary();
}

/// A bench's whole `main`: count mode when the environment asks for it, else criterion.
pub fn main(krate: &str, groups: fn() -> Vec<Group>) {
    if !count_mode(krate, groups) {
        run_criterion(groups);
    }
}
