//! The recording benchmark's numbers: per-run samples, their medians per
//! (workload, recorder), ratios to native, the table, the JSON document and the
//! issue-9 and issue-14 targets. Pure functions of the samples, so the logic is
//! unit-tested on constructed numbers.

use serde_json::{json, Value};

/// What a workload's headline number is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// The program's own span in seconds (lower is better).
    Time,
    /// Operations per second under a load generator (higher is better).
    Throughput,
}

/// One measured run of one workload under one recorder.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub workload: String,
    pub recorder: String,
    /// The repetition it belongs to (from 0): runs of one repetition are
    /// interleaved, so a recorder's run is compared with the same repetition's
    /// native run for the spread of the loss.
    pub rep: usize,
    /// Seconds of the program's own span (normalized to the full amount of work when
    /// the run did less, see `scale`), or ops/s.
    pub value: f64,
    /// Wall time of the whole command (recorder start to return), seconds.
    pub wall_s: f64,
    /// Operations done in the span (lock/unlock pairs, round trips, ...).
    pub ops: Option<f64>,
    /// Fraction of the full work this run did (helgrind runs fewer iterations).
    pub scale: f64,
    /// memcaslap's average latency and 99th percentile (log2-bucketed), µs.
    pub avg_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// Events the recorder wrote (ordo: trace events; empty probe: probe hits;
    /// LTTng: events in its trace; bpftrace: lines printed).
    pub events: Option<u64>,
    /// Events the recorder reported lost.
    pub lost: Option<u64>,
    /// Trace size on disk, bytes.
    pub bytes: Option<u64>,
    /// Seconds from starting the recorder to the program's first recorded event.
    pub attach_s: Option<f64>,
    /// Seconds from the program's exit (or the stop request, attach mode) to the
    /// recorder returning.
    pub detach_s: Option<f64>,
    /// Seconds the events/s rate is taken over (the span, or the load's duration).
    pub active_s: Option<f64>,
    /// CPU time the program and its recorder took (user and system, every
    /// thread, the recorder's conversion after the load included) per operation
    /// served, µs (servers launched under the recorder).
    pub cpu_us_per_op: Option<f64>,
    /// What the run's recorded throughput is compared with inside the run
    /// itself. Windows workloads: the same server's throughput in the unrecorded
    /// windows around the recorded ones, under the same load (the mean, over the
    /// recorded windows, of the two around each; `value` is the recorded windows'
    /// mean). Alternating workloads: the native server's mean over its turns,
    /// taken beside the recorded server's (`value`).
    pub paired_off: Option<f64>,
    /// Windows workloads: every unrecorded window's throughput in order, and every
    /// recorded one's (recorded window `k` lies between unrecorded `k` and `k+1`).
    /// Alternating workloads: the native server's turns and the recorded one's,
    /// each in order (turn `k` of each lie next to each other).
    pub windows: Option<(Vec<f64>, Vec<f64>)>,
    /// Server workloads launched under the recorder: the share of the machine's
    /// CPU time the hypervisor gave other guests during the load (`steal` in
    /// /proc/stat), %: whether a run's swing came from the neighbours.
    pub steal_pct: Option<f64>,
    /// Alternating workloads: each server process's CPU time per operation over
    /// its own measured turns.
    pub turn_cpu: Option<TurnCpu>,
}

/// CPU time per operation served, µs, of the two servers of an alternating run
/// over their measured turns, from each process's own user and system time
/// (`/proc/PID/stat`, every thread). What the agent adds in the program's
/// threads shows in the user time, read without the throughput's noise: the
/// machine's two speeds move a run's throughput by ~5 %, its user time per
/// operation far less.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TurnCpu {
    pub recorded_user: f64,
    pub recorded_system: f64,
    pub native_user: f64,
    pub native_system: f64,
}

impl Sample {
    /// Adds what one recording of several in a run (`cycle`, its wall time
    /// `wall_s`) saw: events, losses and bytes add up, the slowest attach counts.
    pub fn add_cycle(&mut self, cycle: &Sample, wall_s: f64) {
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        self.events = add(self.events, cycle.events);
        self.lost = add(self.lost, cycle.lost);
        self.bytes = add(self.bytes, cycle.bytes);
        self.attach_s = match (self.attach_s, cycle.attach_s) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.wall_s += wall_s;
    }
}

/// The median of each number of the samples of one (workload, recorder).
#[derive(Clone, Debug)]
pub struct Row {
    pub workload: String,
    pub recorder: String,
    pub metric: Metric,
    pub runs: usize,
    pub value: f64,
    /// value / native value (Time) — or the throughput loss 1 − value/native (Throughput).
    pub vs_native: Option<f64>,
    /// Seconds added over native (Time only).
    pub added_s: Option<f64>,
    pub wall_s: f64,
    pub ops: Option<f64>,
    pub scale: f64,
    pub avg_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// See [`Sample::cpu_us_per_op`].
    pub cpu_us_per_op: Option<f64>,
    pub events: Option<f64>,
    pub events_per_s: Option<f64>,
    pub bytes_per_event: Option<f64>,
    /// The largest loss over the runs (one lossy run is not hidden by a median).
    pub lost_max: Option<u64>,
    /// `vs_native` of each run against the same repetition's native run (how
    /// far the machine's noise spreads the median).
    pub per_rep: Option<PerRep>,
    pub attach_s: Option<f64>,
    pub detach_s: Option<f64>,
}

/// What one number comes to repetition by repetition: its range, and its
/// geometric mean with a standard error (with two repetitions or more), so a
/// median that meets a target can be told from one the noise put there.
///
/// Each repetition gives a ratio `r` to its own native run (a time's
/// slowdown, or a throughput's `1 − r` loss). The mean is taken of `ln r` and
/// mapped back: the plain mean of `1 − o/n` is biased toward gains whenever
/// the native run is itself noisy (`E[1/n] > 1/E[n]`), by ~0.3 points on this
/// VM's launched memcached (306 repetitions: 4.16 % against 4.46 % as a ratio
/// of means and 4.51 % as a geometric mean), and a log ratio treats a run 10 %
/// slow and one 10 % fast alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerRep {
    /// The smallest and largest repetition's value.
    pub lo: f64,
    pub hi: f64,
    /// The geometric mean, as a loss or a ratio like the values.
    pub mean: f64,
    /// Its standard error, to first order (`e^m · s.e.(ln r)`), for showing.
    pub se: Option<f64>,
    /// The mean two standard errors of `ln r` either way, mapped back (low, high).
    pub bounds: Option<(f64, f64)>,
}

/// The mean of `values` and its standard error (none for fewer than two).
fn mean_and_standard_error(values: &[f64]) -> (f64, Option<f64>) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let se = (values.len() >= 2).then(|| {
        let var = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (var / n).sqrt()
    });
    (mean, se)
}

impl PerRep {
    /// From each repetition's ratio to its native run (non-finite and
    /// non-positive ones left out); `metric` says whether a value is the ratio
    /// (a time) or `1 − ratio` (a throughput's loss). None when none is left.
    pub fn of_ratios(ratios: &[f64], metric: Metric) -> Option<PerRep> {
        let logs: Vec<f64> = ratios
            .iter()
            .copied()
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(f64::ln)
            .collect();
        let (m, se_log) = mean_and_standard_error(&logs);
        let value = |log: f64| match metric {
            Metric::Time => log.exp(),
            Metric::Throughput => 1.0 - log.exp(),
        };
        let values = logs.iter().map(|l| value(*l));
        let bounds = se_log.map(|s| {
            let (a, b) = (value(m - 2.0 * s), value(m + 2.0 * s));
            (a.min(b), a.max(b))
        });
        Some(PerRep {
            lo: values.clone().reduce(f64::min)?,
            hi: values.reduce(f64::max)?,
            mean: value(m),
            se: se_log.map(|s| m.exp() * s),
            bounds,
        })
    }
}

/// The median of a list (the upper one for an even count); None when empty.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

/// The workload whose native run is the baseline of `workload`: attach mode shares
/// launch mode's native memcached.
pub fn baseline_workload(workload: &str) -> &str {
    workload.strip_suffix("-attach").unwrap_or(workload)
}

/// Medians per (workload, recorder), in first-seen order, with ratios to native.
pub fn rows(samples: &[Sample], metric_of: impl Fn(&str) -> Metric) -> Vec<Row> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for s in samples {
        let key = (s.workload.clone(), s.recorder.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut out: Vec<Row> = keys
        .iter()
        .map(|(w, r)| {
            let group: Vec<&Sample> = samples
                .iter()
                .filter(|s| &s.workload == w && &s.recorder == r)
                .collect();
            let med =
                |f: &dyn Fn(&Sample) -> Option<f64>| median(group.iter().filter_map(|s| f(s)));
            let events = med(&|s| s.events.map(|e| e as f64));
            let bytes = med(&|s| s.bytes.map(|b| b as f64));
            Row {
                workload: w.clone(),
                recorder: r.clone(),
                metric: metric_of(w),
                runs: group.len(),
                value: med(&|s| Some(s.value)).unwrap_or(f64::NAN),
                vs_native: None,
                added_s: None,
                wall_s: med(&|s| Some(s.wall_s)).unwrap_or(f64::NAN),
                ops: med(&|s| s.ops),
                scale: med(&|s| Some(s.scale)).unwrap_or(1.0),
                avg_us: med(&|s| s.avg_us),
                p99_us: med(&|s| s.p99_us),
                cpu_us_per_op: med(&|s| s.cpu_us_per_op),
                events,
                events_per_s: med(&|s| Some(s.events? as f64 / s.active_s?)),
                bytes_per_event: bytes.zip(events).map(|(b, e)| b / e.max(1.0)),
                lost_max: group.iter().filter_map(|s| s.lost).max(),
                per_rep: None,
                attach_s: med(&|s| s.attach_s),
                detach_s: med(&|s| s.detach_s),
            }
        })
        .collect();
    let natives: Vec<(String, f64)> = out
        .iter()
        .filter(|r| r.recorder == "native")
        .map(|r| (r.workload.clone(), r.value))
        .collect();
    for row in &mut out {
        let base = baseline_workload(&row.workload);
        let own = natives.iter().find(|(w, _)| *w == row.workload);
        let Some(native) = own
            .or_else(|| natives.iter().find(|(w, _)| w == base))
            .map(|(_, v)| *v)
        else {
            continue;
        };
        match row.metric {
            Metric::Time => {
                row.vs_native = Some(row.value / native);
                row.added_s = Some(row.value - native);
            }
            Metric::Throughput => row.vs_native = Some(1.0 - row.value / native),
        }
        row.per_rep = per_rep(samples, row);
    }
    for row in &mut out {
        within_process_loss(samples, row);
    }
    out
}

/// A windows row's loss: the median, and the range, of each run's recorded window
/// against the mean of the unrecorded windows around it in the same process (for
/// `native`, the middle window is unrecorded too: the method's own noise).
fn within_process_loss(samples: &[Sample], row: &mut Row) {
    let group: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.workload == row.workload && s.recorder == row.recorder)
        .collect();
    let ratios: Option<Vec<f64>> = group
        .iter()
        .map(|s| Some(s.value / s.paired_off?))
        .collect();
    let Some(ratios) = ratios.filter(|r| !r.is_empty()) else {
        return;
    };
    row.vs_native = median(ratios.iter().map(|r| 1.0 - r));
    row.per_rep = PerRep::of_ratios(&ratios, Metric::Throughput);
}

/// The `vs_native` of a row's runs, each against the native run of its own
/// repetition.
fn per_rep(samples: &[Sample], row: &Row) -> Option<PerRep> {
    if row.recorder == "native" {
        return None;
    }
    let (workload, recorder) = (row.workload.as_str(), row.recorder.as_str());
    let base = baseline_workload(workload);
    let ratios: Vec<f64> = samples
        .iter()
        .filter(|s| s.workload == workload && s.recorder == recorder)
        .filter_map(|s| {
            let native = samples
                .iter()
                .find(|n| n.workload == base && n.recorder == "native" && n.rep == s.rep)?;
            Some(s.value / native.value)
        })
        .collect();
    PerRep::of_ratios(&ratios, row.metric)
}

/// The units a target is expressed in, for printing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A fraction printed as a percentage.
    Percent,
    Seconds,
    Nanos,
    /// A plain ratio printed as `N.NN×`.
    Ratio,
    Count,
}

fn show(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Percent => format!("{:.1} %", v * 100.0),
        Unit::Seconds => format!("{v:.3} s"),
        Unit::Nanos => format!("{v:.0} ns"),
        Unit::Ratio => format!("{v:.2}×"),
        Unit::Count => format!("{v:.0}"),
    }
}

/// One target of issue 9 or 14: `measured ≤ limit`.
#[derive(Clone, Debug)]
pub struct Target {
    pub issue: u32,
    pub what: String,
    pub limit: f64,
    pub unit: Unit,
    /// None when it could not be measured (`why` says why).
    pub measured: Option<f64>,
    pub why: String,
    /// For a throughput loss, what the repetitions say on their own
    /// ([`Row::per_rep`]): the verdict adds whether their mean settles it.
    pub per_rep: Option<PerRep>,
}

impl Target {
    pub fn met(&self) -> Option<bool> {
        self.measured.map(|m| m <= self.limit)
    }

    /// "met, 0.12 s under" / "MISSED by 3.2 s (26.7× the limit)" / "not measured: …".
    pub fn verdict(&self) -> String {
        let Some(m) = self.measured else {
            return format!("not measured: {}", self.why);
        };
        let gap = (m - self.limit).abs();
        let gap = if self.unit == Unit::Percent {
            format!("{:.1} points", gap * 100.0)
        } else {
            show(gap, self.unit)
        };
        let median = if m <= self.limit {
            format!("met, {gap} under")
        } else if self.limit > 0.0 {
            format!("MISSED by {gap} ({:.1}× the limit)", m / self.limit)
        } else {
            format!("MISSED by {gap}")
        };
        match self.repetitions() {
            Some(reps) => format!("{median}; {reps}"),
            None => median,
        }
    }

    /// The repetitions' own verdict on a percentage, where there are two or
    /// more: their geometric mean ± standard error, and whether the mean two
    /// standard errors either way ([`PerRep::bounds`]) lies all under the limit,
    /// all over it, or across it.
    fn repetitions(&self) -> Option<String> {
        let p = self.per_rep.filter(|_| self.unit == Unit::Percent)?;
        let (se, (low, high)) = (p.se?, p.bounds?);
        let settled = if high <= self.limit {
            "met"
        } else if low > self.limit {
            "missed"
        } else {
            "not settled"
        };
        Some(format!(
            "per rep {:.1} % ± {:.1} (s.e.; {:.1}–{:.1} %): {settled} at 2 s.e.",
            p.mean * 100.0,
            se * 100.0,
            low * 100.0,
            high * 100.0
        ))
    }

    pub fn to_json(&self) -> Value {
        json!({
            "issue": self.issue,
            "target": self.what,
            "limit": self.limit,
            "measured": self.measured,
            "met": self.met(),
            "per_rep_mean": self.per_rep.map(|p| p.mean),
            "per_rep_standard_error": self.per_rep.and_then(|p| p.se),
            "per_rep_bounds": self.per_rep.and_then(|p| p.bounds).map(|(a, b)| [a, b]),
            "verdict": self.verdict(),
            "shown": format!("{} (limit {})", self.measured.map(|m| show(m, self.unit)).unwrap_or_else(|| "—".into()), show(self.limit, self.unit)),
        })
    }
}

fn find<'a>(rows: &'a [Row], workload: &str, recorder: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.workload == workload && r.recorder == recorder)
}

/// The issues' targets, from the rows. `kernel_ordo` is the recorder label of
/// ordo's eBPF path (issue 9), `default_ordo` the label of plain `ordo record`
/// (issue 14 is about what `ordo record -- prog` does by default). `exact_sites`:
/// whether the empty probes sat at ordo's own sites; the comparison with them means
/// nothing otherwise.
pub fn targets(
    rows: &[Row],
    kernel_ordo: &str,
    default_ordo: &str,
    exact_sites: bool,
) -> Vec<Target> {
    let missing = |w: &str, r: &str| format!("no {r} run of {w}");
    let mut out = Vec::new();
    let per_rep = |w: &str, r: &str| find(rows, w, r).and_then(|row| row.per_rep);
    let mut push = |issue: u32,
                    what: &str,
                    limit: f64,
                    unit: Unit,
                    m: Result<f64, String>,
                    per_rep: Option<PerRep>| {
        let (measured, why) = match m {
            Ok(v) => (Some(v), String::new()),
            Err(e) => (None, e),
        };
        out.push(Target {
            issue,
            what: what.into(),
            limit,
            unit,
            measured,
            why,
            per_rep,
        })
    };
    let loss = |w: &str, r: &str| {
        find(rows, w, r)
            .and_then(|row| row.vs_native)
            .ok_or_else(|| missing(w, r))
    };
    let lost = |w: &str, r: &str| {
        find(rows, w, r)
            .and_then(|row| row.lost_max)
            .map(|l| l as f64)
            .ok_or_else(|| missing(w, r))
    };
    let added = |w: &str, r: &str| {
        find(rows, w, r)
            .and_then(|row| row.added_s)
            .ok_or_else(|| missing(w, r))
    };
    let added_ratio = |w: &str, r: &str, other: &str| -> Result<f64, String> {
        let (a, b) = (added(w, r)?, added(w, other)?);
        if b <= 0.0 {
            return Err(format!("{other} added no measurable time to {w}"));
        }
        Ok(a / b)
    };
    let overhead = |w: &str, r: &str| {
        find(rows, w, r)
            .and_then(|row| row.vs_native)
            .map(|x| x - 1.0)
            .ok_or_else(|| missing(w, r))
    };
    let worst = |pick: fn(&Row) -> Option<f64>| -> Result<f64, String> {
        rows.iter()
            .filter(|r| r.recorder == kernel_ordo)
            .filter_map(pick)
            .max_by(|a, b| a.total_cmp(b))
            .ok_or_else(|| format!("no {kernel_ordo} run"))
    };
    let k = kernel_ordo;
    push(
        9,
        &format!("memcached --pid ({k}): throughput loss ≤ 25 %"),
        0.25,
        Unit::Percent,
        loss("memcached-attach", k),
        per_rep("memcached-attach", k),
    );
    push(
        9,
        &format!("memcached --pid ({k}): events lost at the default buffer = 0"),
        0.0,
        Unit::Count,
        lost("memcached-attach", k),
        None,
    );
    push(
        9,
        &format!("memcached launched ({k}): events lost = 0"),
        0.0,
        Unit::Count,
        lost("memcached", k),
        None,
    );
    push(
        9,
        &format!("lock ({k}): added time ≤ 1/5 of bpftrace's"),
        0.2,
        Unit::Ratio,
        added_ratio("lock", k, "bpftrace"),
        None,
    );
    push(
        9,
        &format!("pigz ({k}): slowdown ≤ 5 %"),
        0.05,
        Unit::Percent,
        overhead("pigz", k),
        None,
    );
    let empty = if exact_sites {
        added_ratio("lock", k, "empty probe")
    } else {
        Err("the empty probes sat at function entries, not at ordo's sites (this ordo has no --list-probes)".into())
    };
    push(
        9,
        &format!("lock ({k}): per-event cost ≤ 1.3× an empty probe's (bare BPF program) at the same sites (added time / ordo's events, the same count for both)"),
        1.3,
        Unit::Ratio,
        empty,
        None,
    );
    push(
        9,
        &format!("attach ({k}, worst workload median) ≤ 0.3 s"),
        0.3,
        Unit::Seconds,
        worst(|r| r.attach_s),
        None,
    );
    push(
        9,
        &format!("detach ({k}, worst workload median) ≤ 0.5 s"),
        0.5,
        Unit::Seconds,
        worst(|r| r.detach_s),
        None,
    );
    let d = default_ordo;
    push(
        14,
        &format!("lock ({d}): added time < 1/2 of LTTng-UST's"),
        0.5,
        Unit::Ratio,
        added_ratio("lock", d, "lttng-ust"),
        None,
    );
    push(
        14,
        &format!("lock ({d}): added time < the TSan build's"),
        1.0,
        Unit::Ratio,
        added_ratio("lock", d, "tsan"),
        None,
    );
    push(
        26,
        &format!(
            "rust-lock ({d}): added time ≤ 2× the C lock benchmark's (same threads and pairs)"
        ),
        2.0,
        Unit::Ratio,
        added("rust-lock", d).and_then(|rust| {
            let c = added("lock", d)?;
            if c <= 0.0 {
                return Err("ordo added no measurable time to lock".into());
            }
            Ok(rust / c)
        }),
        None,
    );
    push(
        26,
        &format!("rust-lock ({d}): events lost = 0"),
        0.0,
        Unit::Count,
        lost("rust-lock", d),
        None,
    );
    let pair = find(rows, "pair", d)
        .and_then(|r| Some(r.value / r.ops?))
        .map(|s| s * 1e9)
        .ok_or_else(|| missing("pair", d));
    push(
        14,
        &format!("pair ({d}): one uncontended lock/unlock pair ≤ 100 ns recorded"),
        100.0,
        Unit::Nanos,
        pair,
        None,
    );
    push(
        14,
        &format!("memcached launched ({d}): throughput loss ≤ 5 %"),
        0.05,
        Unit::Percent,
        loss("memcached", d),
        per_rep("memcached", d),
    );
    push(
        14,
        &format!("memcached launched ({d}): events lost = 0"),
        0.0,
        Unit::Count,
        lost("memcached", d),
        None,
    );
    push(
        14,
        &format!("pigz ({d}): slowdown ≤ 2 %"),
        0.02,
        Unit::Percent,
        overhead("pigz", d),
        None,
    );
    push(
        27,
        &format!("memcached --pid ({d}, in process): throughput loss ≤ 10 %"),
        0.10,
        Unit::Percent,
        loss("memcached-attach", d),
        per_rep("memcached-attach", d),
    );
    push(
        27,
        &format!("memcached --pid ({d}, in process): events lost = 0"),
        0.0,
        Unit::Count,
        lost("memcached-attach", d),
        None,
    );
    push(
        27,
        &format!("memcached --pid ({d}, in process), recorded window against the unrecorded ones around it in the same server: loss ≤ 10 %"),
        0.10,
        Unit::Percent,
        loss("memcached-windows", d),
        per_rep("memcached-windows", d),
    );
    push(
        27,
        &format!("memcached launched ({d}): throughput loss ≤ 5 %"),
        0.05,
        Unit::Percent,
        loss("memcached", d),
        per_rep("memcached", d),
    );
    push(
        27,
        &format!("memcached launched ({d}), its turns against those of a native server started beside it: throughput loss ≤ 5 %"),
        0.05,
        Unit::Percent,
        loss("memcached-alternating", d),
        per_rep("memcached-alternating", d),
    );
    push(
        27,
        &format!("memcached launched beside a native server ({d}): events lost = 0"),
        0.0,
        Unit::Count,
        lost("memcached-alternating", d),
        None,
    );
    out
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

/// The side-by-side table, one line per (workload, recorder).
pub fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<21} {:<19} {:>5} {:>12} {:>12} {:>8} {:>10} {:>10} {:>7} {:>8} {:>7} {:>7} {:>9} {:>9}\n",
        "workload",
        "recorder",
        "runs",
        "median",
        "vs native",
        "wall s",
        "events",
        "events/s",
        "B/ev",
        "lost",
        "attach",
        "detach",
        "p99 µs",
        "CPU µs/op"
    );
    let mut last = String::new();
    for r in rows {
        if r.workload != last && !last.is_empty() {
            s.push('\n');
        }
        last = r.workload.clone();
        let value = match r.metric {
            Metric::Time => format!("{:.1} ms", r.value * 1e3),
            Metric::Throughput => format!("{:.0} op/s", r.value),
        };
        let vs = match r.metric {
            Metric::Time => opt(r.vs_native, |x| format!("{x:.2}×")),
            Metric::Throughput => opt(r.vs_native, |x| format!("{:.1} % loss", x * 100.0)),
        };
        let spread = match (r.per_rep, r.metric) {
            (Some(p), Metric::Throughput) => {
                let mean = match p.se {
                    Some(se) => format!(", geo. mean {:.1} % ± {:.1}", p.mean * 100.0, se * 100.0),
                    None => String::new(),
                };
                format!(" (per rep {:.0}–{:.0} %{mean})", p.lo * 100.0, p.hi * 100.0)
            }
            (Some(p), Metric::Time) => format!(" (per rep {:.2}–{:.2}×)", p.lo, p.hi),
            _ => String::new(),
        };
        let scaled = if r.scale < 1.0 {
            format!(" (1/{:.0} run)", 1.0 / r.scale)
        } else {
            String::new()
        };
        s.push_str(&format!(
            "{:<21} {:<19} {:>5} {:>12} {:>12} {:>8.2} {:>10} {:>10} {:>7} {:>8} {:>7} {:>7} {:>9} {:>9}{}{}\n",
            r.workload,
            r.recorder,
            r.runs,
            value,
            vs,
            r.wall_s,
            opt(r.events, |e| format!("{e:.0}")),
            opt(r.events_per_s, |e| format!("{e:.0}")),
            opt(r.bytes_per_event, |b| format!("{b:.1}")),
            r.lost_max.map(|l| l.to_string()).unwrap_or_else(|| "-".into()),
            opt(r.attach_s, |a| format!("{a:.3}")),
            opt(r.detach_s, |a| format!("{a:.3}")),
            opt(r.p99_us, |p| format!("≤{p:.0}")),
            opt(r.cpu_us_per_op, |c| format!("{c:.2}")),
            scaled,
            spread,
        ));
    }
    s
}

/// The targets, one line each with met/missed and by how much.
pub fn target_lines(targets: &[Target]) -> String {
    targets
        .iter()
        .map(|t| {
            format!(
                "  issue {:>2}  {:<70} {:>12}  {}\n",
                t.issue,
                t.what,
                t.measured
                    .map(|m| show(m, t.unit))
                    .unwrap_or_else(|| "—".into()),
                t.verdict()
            )
        })
        .collect()
}

pub fn sample_json(s: &Sample) -> Value {
    json!({
        "workload": s.workload, "recorder": s.recorder, "rep": s.rep, "value": s.value, "wall_s": s.wall_s,
        "ops": s.ops, "scale": s.scale, "avg_us": s.avg_us, "p99_us": s.p99_us,
        "events": s.events, "lost": s.lost, "bytes": s.bytes,
        "attach_s": s.attach_s, "detach_s": s.detach_s, "active_s": s.active_s,
        "cpu_us_per_op": s.cpu_us_per_op,
        "paired_off": s.paired_off,
        "steal_pct": s.steal_pct,
        "windows": s.windows.as_ref().map(|(off, on)| json!({"unrecorded": off, "recorded": on})),
        "turn_cpu_us_per_op": s.turn_cpu.map(|c| json!({
            "recorded": {"user": c.recorded_user, "system": c.recorded_system},
            "native": {"user": c.native_user, "system": c.native_system},
        })),
    })
}

/// One line per alternating row whose runs measured their turns' CPU: the
/// recorded server's user and system time per operation against the native
/// server's beside it, and the user time's difference as the runs' mean ± its
/// standard error — the agent's own cost in the program's threads.
pub fn turn_cpu_lines(samples: &[Sample]) -> Vec<String> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for s in samples.iter().filter(|s| s.turn_cpu.is_some()) {
        if !keys.contains(&(s.workload.as_str(), s.recorder.as_str())) {
            keys.push((&s.workload, &s.recorder));
        }
    }
    keys.into_iter()
        .map(|(workload, recorder)| {
            let cpu: Vec<TurnCpu> = samples
                .iter()
                .filter(|s| s.workload == workload && s.recorder == recorder)
                .filter_map(|s| s.turn_cpu)
                .collect();
            let n = cpu.len() as f64;
            let mean = |f: &dyn Fn(&TurnCpu) -> f64| cpu.iter().map(f).sum::<f64>() / n;
            let added: Vec<f64> = cpu.iter().map(|c| c.recorded_user - c.native_user).collect();
            let (added_mean, se) = mean_and_standard_error(&added);
            format!(
                "{workload}, {recorder}: CPU per operation in the servers' turns, user {:.3} µs against {:.3} beside it ({:+.3} µs{}, {} runs), system {:.3} against {:.3}",
                mean(&|c| c.recorded_user),
                mean(&|c| c.native_user),
                added_mean,
                se.map(|e| format!(" ± {e:.3}")).unwrap_or_default(),
                cpu.len(),
                mean(&|c| c.recorded_system),
                mean(&|c| c.native_system),
            )
        })
        .collect()
}

pub fn row_json(r: &Row) -> Value {
    json!({
        "workload": r.workload, "recorder": r.recorder,
        "metric": match r.metric { Metric::Time => "seconds", Metric::Throughput => "ops_per_s" },
        "runs": r.runs, "median": r.value,
        "ratio_to_native": if r.metric == Metric::Time { r.vs_native } else { None },
        "throughput_loss": if r.metric == Metric::Throughput { r.vs_native } else { None },
        "per_rep_range": r.per_rep.map(|p| [p.lo, p.hi]),
        "per_rep_mean": r.per_rep.map(|p| p.mean),
        "per_rep_standard_error": r.per_rep.and_then(|p| p.se),
        "per_rep_bounds": r.per_rep.and_then(|p| p.bounds).map(|(a, b)| [a, b]),
        "added_s": r.added_s, "wall_s": r.wall_s, "ops": r.ops, "scale": r.scale,
        "avg_us": r.avg_us, "p99_us_log2_bucket_upper": r.p99_us,
        "events": r.events, "events_per_s": r.events_per_s, "bytes_per_event": r.bytes_per_event,
        "lost_max": r.lost_max, "attach_s": r.attach_s, "detach_s": r.detach_s,
        "cpu_us_per_op": r.cpu_us_per_op,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(w: &str, r: &str, value: f64) -> Sample {
        Sample {
            workload: w.into(),
            recorder: r.into(),
            value,
            wall_s: value + 0.5,
            scale: 1.0,
            ..Sample::default()
        }
    }

    fn metric(w: &str) -> Metric {
        if w.starts_with("memcached") {
            Metric::Throughput
        } else {
            Metric::Time
        }
    }

    #[test]
    fn medians_ratios_and_losses_come_from_the_samples() {
        let mut samples = vec![
            sample("lock", "native", 0.010),
            sample("lock", "native", 0.030),
            sample("lock", "native", 0.020),
            sample("lock", "ordo", 4.020),
            sample("lock", "ordo", 3.020),
            sample("lock", "ordo", 9.0),
            sample("memcached", "native", 80_000.0),
            sample("memcached", "ordo", 60_000.0),
            sample("memcached-attach", "ordo", 20_000.0),
        ];
        samples[3].events = Some(800_000);
        samples[3].lost = Some(0);
        samples[4].lost = Some(7);
        samples[3].bytes = Some(1_600_000);
        samples[3].active_s = Some(4.0);
        let rows = rows(&samples, metric);
        assert_eq!(rows.len(), 5);
        let ordo = &rows[1];
        assert_eq!(ordo.value, 4.020);
        assert!((ordo.vs_native.unwrap() - 201.0).abs() < 1e-9);
        assert!((ordo.added_s.unwrap() - 4.0).abs() < 1e-9);
        assert_eq!(
            ordo.lost_max,
            Some(7),
            "the worst run's loss, not the median's"
        );
        assert_eq!(ordo.bytes_per_event, Some(2.0));
        assert_eq!(ordo.events_per_s, Some(200_000.0));
        assert!((rows[3].vs_native.unwrap() - 0.25).abs() < 1e-9);
        // Attach mode is compared with launch mode's native memcached.
        assert!((rows[4].vs_native.unwrap() - 0.75).abs() < 1e-9);
        let table = table(&rows);
        assert!(table.contains("201.00×"), "{table}");
        assert!(table.contains("75.0 % loss"), "{table}");
    }

    /// A windows run's recordings add up: a loss in any one of them shows.
    #[test]
    fn a_windows_run_adds_up_its_recordings() {
        let mut run = Sample::default();
        assert_eq!(run.lost, None);
        for (events, lost, attach) in [(100, 0, 0.2), (150, 3, 0.1), (120, 0, 0.3)] {
            let cycle = Sample {
                events: Some(events),
                lost: Some(lost),
                bytes: Some(events * 4),
                attach_s: Some(attach),
                ..Sample::default()
            };
            run.add_cycle(&cycle, 8.0);
        }
        assert_eq!(run.events, Some(370));
        assert_eq!(run.lost, Some(3));
        assert_eq!(run.bytes, Some(1480));
        assert_eq!(run.attach_s, Some(0.3));
        assert_eq!(run.wall_s, 24.0);
    }

    #[test]
    fn a_windows_run_is_compared_with_its_own_unrecorded_window() {
        let window = |recorder: &str, rep: usize, off: f64, on: f64| Sample {
            rep,
            paired_off: Some(off),
            ..sample("memcached-windows", recorder, on)
        };
        // Across servers the medians differ by 4 %; within each server the
        // recorded window lost 10 %, 20 % and 5 %.
        let samples = vec![
            window("native", 0, 100_000.0, 101_000.0),
            window("ordo", 0, 100_000.0, 90_000.0),
            window("native", 1, 150_000.0, 147_000.0),
            window("ordo", 1, 150_000.0, 120_000.0),
            window("native", 2, 80_000.0, 80_000.0),
            window("ordo", 2, 80_000.0, 76_000.0),
        ];
        let rows = rows(&samples, metric);
        let (native, ordo) = (&rows[0], &rows[1]);
        assert!((ordo.vs_native.unwrap() - 0.10).abs() < 1e-9, "{ordo:?}");
        let PerRep { lo, hi, .. } = ordo.per_rep.unwrap();
        assert!(
            (lo - 0.05).abs() < 1e-9 && (hi - 0.20).abs() < 1e-9,
            "{lo} {hi}"
        );
        // The control: two unrecorded windows, −1 %, 2 % and 0 %.
        assert!(native.vs_native.unwrap().abs() < 1e-9, "{native:?}");
        let t = targets(&rows, "ordo --probes ebpf", "ordo", true);
        let w = t
            .iter()
            .find(|t| t.what.contains("memcached-windows") || t.what.contains("recorded window"))
            .unwrap();
        assert_eq!(w.met(), Some(true), "{}", w.verdict());
    }

    #[test]
    fn an_alternating_run_is_compared_with_the_native_server_beside_it() {
        let run = |recorder: &str, rep: usize, native: f64, recorded: f64| Sample {
            rep,
            paired_off: Some(native),
            lost: recorder.starts_with("ordo").then_some(0),
            ..sample("memcached-alternating", recorder, recorded)
        };
        // The runs' servers differ by half; beside its own native server the
        // recorded one lost 3 %, 4 % and 5 %, and the control's two native
        // servers differ by −1 %, 0 % and 1 %.
        let samples = vec![
            run("native", 0, 100_000.0, 101_000.0),
            run("ordo", 0, 100_000.0, 97_000.0),
            run("native", 1, 150_000.0, 150_000.0),
            run("ordo", 1, 150_000.0, 144_000.0),
            run("native", 2, 80_000.0, 79_200.0),
            run("ordo", 2, 80_000.0, 76_000.0),
        ];
        let rows = rows(&samples, metric);
        let (native, ordo) = (&rows[0], &rows[1]);
        assert!((ordo.vs_native.unwrap() - 0.04).abs() < 1e-9, "{ordo:?}");
        assert!(native.vs_native.unwrap().abs() < 1e-9, "{native:?}");
        let t = targets(&rows, "ordo --probes ebpf", "ordo", true);
        let get = |what: &str| t.iter().find(|t| t.what.contains(what)).unwrap();
        let loss = get("turns against those of a native server");
        // The median, 4 %, meets it; the runs' own geometric mean says how
        // surely.
        assert_eq!(loss.met(), Some(true), "{}", loss.verdict());
        assert!(
            loss.verdict().contains("per rep 4.0 %"),
            "{}",
            loss.verdict()
        );
        assert_eq!(
            get("beside a native server (ordo): events lost").met(),
            Some(true)
        );
        // Without the workload the target says what is missing.
        let none = targets(&rows[..0], "ordo --probes ebpf", "ordo", true);
        let missing = none
            .iter()
            .find(|t| t.what.contains("turns against those of a native server"))
            .unwrap();
        assert_eq!(missing.met(), None, "{}", missing.verdict());
    }

    #[test]
    fn alternating_runs_give_the_user_time_the_recording_adds_per_operation() {
        let run = |recorded_user: f64| Sample {
            turn_cpu: Some(TurnCpu {
                recorded_user,
                recorded_system: 6.0,
                native_user: 1.0,
                native_system: 5.8,
            }),
            ..sample("memcached-alternating", "ordo", 150_000.0)
        };
        // Added: 0.1, 0.2 and 0.3 µs; mean 0.2, standard error 0.1 / √3.
        let samples = vec![
            run(1.1),
            run(1.2),
            run(1.3),
            sample("memcached", "ordo", 150_000.0),
        ];
        let lines = turn_cpu_lines(&samples);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("memcached-alternating, ordo:"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("user 1.200 µs against 1.000 beside it (+0.200 µs ± 0.058, 3 runs)"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("system 6.000 against 5.800"),
            "{}",
            lines[0]
        );
        assert!(turn_cpu_lines(&samples[3..]).is_empty());
    }

    #[test]
    fn each_run_is_also_compared_with_its_own_repetitions_native_run() {
        let run = |recorder: &str, rep: usize, value: f64| Sample {
            rep,
            ..sample("memcached", recorder, value)
        };
        // The medians' loss is 1 − 150/200 = 25 %; run by run it is 10 %, 40 %
        // and −50 % (a repetition whose native run was slow).
        let samples = vec![
            run("native", 0, 200_000.0),
            run("ordo", 0, 180_000.0),
            run("native", 1, 200_000.0),
            run("ordo", 1, 120_000.0),
            run("native", 2, 100_000.0),
            run("ordo", 2, 150_000.0),
        ];
        let rows = rows(&samples, metric);
        let ordo = &rows[1];
        let PerRep { lo, hi, .. } = ordo.per_rep.unwrap();
        assert!((lo + 0.5).abs() < 1e-9, "{lo}");
        assert!((hi - 0.4).abs() < 1e-9, "{hi}");
        // Their geometric mean is a 6.8 % loss (ratios 0.9, 0.6 and 1.5), its
        // standard error 24.7 points (s.d. of the logs 0.459 over √3, × 0.932).
        let shown = table(&rows);
        assert!(shown.contains("(per rep -50–40 %, geo. mean "), "{shown}");
        assert!(shown.contains("6.8 % ± 24.7)"), "{shown}");
        let t = targets(&rows, "ordo --probes ebpf", "ordo", true);
        let launched = t
            .iter()
            .find(|t| t.issue == 27 && t.what.contains("memcached launched"))
            .unwrap();
        assert_eq!(launched.met(), Some(false));
        assert!(
            launched
                .verdict()
                .ends_with("per rep 6.8 % ± 24.7 (s.e.; -58.4–45.1 %): not settled at 2 s.e."),
            "{}",
            launched.verdict()
        );
        assert_eq!(rows[0].per_rep, None, "native against itself");
        // A time is a ratio per repetition: 11/10 and 30/20 ms.
        let timed = |recorder: &str, rep: usize, value: f64| Sample {
            rep,
            ..sample("lock", recorder, value)
        };
        let samples = [
            timed("native", 0, 0.010),
            timed("ordo", 0, 0.011),
            timed("native", 1, 0.020),
            timed("ordo", 1, 0.030),
        ];
        let timed_rows = super::rows(&samples, metric);
        let PerRep { lo, hi, .. } = timed_rows[1].per_rep.unwrap();
        assert!(
            (lo - 1.1).abs() < 1e-9 && (hi - 1.5).abs() < 1e-9,
            "{lo} {hi}"
        );
        let table = table(&timed_rows);
        assert!(table.contains("(per rep 1.10–1.50×)"), "{table}");
    }

    #[test]
    fn targets_say_met_or_missed_and_by_how_much() {
        let samples = vec![
            sample("lock", "native", 0.020),
            sample("lock", "ordo", 1.020),
            sample("lock", "bpftrace", 4.020),
            sample("lock", "empty probe", 0.520),
            sample("lock", "tsan", 0.220),
            sample("lock", "lttng-ust", 0.180),
            sample("pigz", "native", 6.0),
            sample("pigz", "ordo", 6.12),
        ];
        let rows = rows(&samples, metric);
        let t = targets(&rows, "ordo", "ordo", true);
        let inexact = targets(&rows, "ordo", "ordo", false);
        assert!(inexact
            .iter()
            .any(|t| t.what.contains("empty probe") && t.measured.is_none()));
        let get = |what: &str| t.iter().find(|t| t.what.contains(what)).unwrap();
        let bpf = get("1/5 of bpftrace");
        assert!((bpf.measured.unwrap() - 0.25).abs() < 1e-9);
        assert_eq!(bpf.met(), Some(false));
        assert!(
            bpf.verdict().starts_with("MISSED by 0.05×"),
            "{}",
            bpf.verdict()
        );
        let empty = get("empty probe");
        assert!((empty.measured.unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(empty.met(), Some(false));
        let pigz5 = get("pigz (ordo): slowdown ≤ 5");
        assert_eq!(pigz5.met(), Some(true));
        assert_eq!(pigz5.verdict(), "met, 3.0 points under");
        assert_eq!(get("pigz (ordo): slowdown ≤ 2").met(), Some(false));
        let tsan = get("TSan");
        assert!((tsan.measured.unwrap() - 5.0).abs() < 1e-9);
        let mc = get("memcached --pid");
        assert_eq!(mc.met(), None);
        assert!(
            mc.verdict().contains("no ordo run of memcached-attach"),
            "{}",
            mc.verdict()
        );
        assert!(target_lines(&t).contains("MISSED"));
    }

    #[test]
    fn repetitions_settle_a_loss_target_only_when_their_mean_is_clear_of_it() {
        let verdict = |losses: &[f64]| {
            let ratios: Vec<f64> = losses.iter().map(|l| 1.0 - l).collect();
            let per_rep = PerRep::of_ratios(&ratios, Metric::Throughput);
            Target {
                issue: 27,
                what: "loss ≤ 5 %".into(),
                limit: 0.05,
                unit: Unit::Percent,
                measured: median(losses.iter().copied()),
                why: String::new(),
                per_rep,
            }
            .verdict()
        };
        // Geometric means 2 % ± 0.6, 11 % ± 0.6, 4.1 % ± 3.5.
        let v = verdict(&[0.01, 0.02, 0.03]);
        assert!(
            v.ends_with("per rep 2.0 % ± 0.6 (s.e.; 0.8–3.2 %): met at 2 s.e."),
            "{v}"
        );
        let v = verdict(&[0.10, 0.11, 0.12]);
        assert!(
            v.ends_with("per rep 11.0 % ± 0.6 (s.e.; 9.8–12.2 %): missed at 2 s.e."),
            "{v}"
        );
        let v = verdict(&[-0.02, 0.04, 0.10]);
        assert!(
            v.ends_with("per rep 4.1 % ± 3.5 (s.e.; -3.1–10.8 %): not settled at 2 s.e."),
            "{v}"
        );
        // One repetition has no standard error: the median's verdict alone.
        assert_eq!(verdict(&[0.03]), "met, 2.0 points under");
        assert_eq!(PerRep::of_ratios(&[f64::NAN], Metric::Throughput), None);
        assert_eq!(PerRep::of_ratios(&[0.0, -1.0], Metric::Time), None);
    }

    #[test]
    fn a_noisy_native_run_does_not_pass_for_a_gain() {
        // Recorded and native runs that trade places: the plain mean of the
        // losses (1 − 100/110 and 1 − 110/100) is a 0.45 % gain; the runs say
        // nothing either way, and the geometric mean says 0.
        let p = PerRep::of_ratios(&[100.0 / 110.0, 110.0 / 100.0], Metric::Throughput).unwrap();
        assert!(p.mean.abs() < 1e-12, "{p:?}");
        let plain = ((1.0 - 100.0 / 110.0) + (1.0 - 110.0 / 100.0)) / 2.0;
        assert!(plain < -0.004, "{plain}");
        // A time's ratio the same way: 2× and ½× average to 1×.
        let t = PerRep::of_ratios(&[2.0, 0.5], Metric::Time).unwrap();
        assert!(
            (t.mean - 1.0).abs() < 1e-12 && t.lo == 0.5 && t.hi == 2.0,
            "{t:?}"
        );
    }

    #[test]
    fn median_ignores_non_finite_and_handles_empty() {
        assert_eq!(median([3.0, f64::NAN, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(Vec::<f64>::new()), None);
    }
}
