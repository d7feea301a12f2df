//! What the wait learns from a copy's progress lines: when each new percentage was seen, the
//! copy rate over the recent samples, and from them the window the copy's end can fall in.
//! A percentage is known only to within one step of the log, and its date to within the poll
//! gap that saw it, so the prediction gives both the latest end the samples allow and the
//! earliest; the policy looks densely from the earliest on.

use std::time::Duration;

/// Samples kept (the first is kept too: the rate's long baseline).
const MAX_SAMPLES: usize = 64;
/// History points kept for the report.
const MAX_HISTORY: usize = 200;
/// Progress steps of this many percent or more are coarse (see [`CopyWatch::prediction`]).
const COARSE_STEP: f64 = 5.0;

/// One progress reading: when (the midpoint of the poll gap it was first seen in), how far
/// either way that date may be off, and the percentage.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Duration,
    slack: Duration,
    pct: f64,
}

/// The progress of the copy (or copies) a task reports.
#[derive(Clone, Debug, Default)]
pub(super) struct CopyWatch {
    /// Progress samples, oldest first (at most [`MAX_SAMPLES`]). A new percentage is dated
    /// halfway between the poll that first saw it and the one before, which did not.
    samples: Vec<Sample>,
    /// The smallest step between two percentages seen (how coarse the log's progress is).
    step: Option<f64>,
    /// When the log first said 100 %: the copy is done and the task is finishing.
    copied_at: Option<Duration>,
    /// The progress history for the report: (elapsed, percent) at each new percentage.
    history: Vec<(Duration, f64)>,
    /// The copy stood still at the last look: the rate before it says nothing of the rate
    /// after it.
    was_stalled: bool,
    /// The fastest rate measured so far in this copy (percent per second), and whether the
    /// copy has stalled at all: after a stall it may go back to that rate.
    fastest: f64,
    had_stall: bool,
}

/// What recording a percentage did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Recorded {
    /// Nothing new (the same percentage as before).
    Nothing,
    /// A new percentage of the same copy.
    New,
    /// Progress went back: the next copy has begun (a VM with several imported disks).
    NextCopy,
}

impl CopyWatch {
    /// The latest reported progress, in percent.
    pub(super) fn progress(&self) -> Option<f64> {
        self.samples.last().map(|s| s.pct)
    }

    pub(super) fn history(&self) -> &[(Duration, f64)] {
        &self.history
    }

    pub(super) fn copied_at(&self) -> Option<Duration> {
        self.copied_at
    }

    /// Marks the copy as standing still at this look (see [`CopyWatch::stalled`]).
    pub(super) fn note_stall(&mut self) {
        self.was_stalled = true;
        self.had_stall = true;
    }

    /// When the latest new percentage was seen (its sample's date).
    pub(super) fn last_seen(&self) -> Option<Duration> {
        self.samples.last().map(|s| s.at)
    }

    /// The copy rate in percent per second, from the recent samples: against the newest
    /// earlier sample that is at least a quarter of the copy so far (and 5 s) back, and far
    /// enough back that the samples' dating errors are small beside the time between them, so
    /// a rate that halves or doubles is followed within a few samples. The very first sample
    /// (often a burst) is left out once there are others.
    pub(super) fn rate(&self) -> Option<f64> {
        self.rates().map(|(rate, _)| rate)
    }

    /// The rate (as [`CopyWatch::rate`]) and the fastest rate the same two samples allow: each
    /// is dated only to within its slack, so the copy may have covered the distance between
    /// them in their time apart less both slacks.
    fn rates(&self) -> Option<(f64, f64)> {
        let last = *self.samples.last()?;
        let first_at = self.samples.first()?.at;
        let window = (last.at.saturating_sub(first_at) / 4).max(Duration::from_secs(3));
        let skip_first = usize::from(self.samples.len() >= 3);
        let usable: Vec<&Sample> = self
            .samples
            .iter()
            .skip(skip_first)
            .filter(|s| s.pct < last.pct)
            .collect();
        let far_enough = |s: &&&Sample| {
            let dt = last.at.saturating_sub(s.at);
            dt >= window && dt >= (s.slack + last.slack).saturating_mul(4)
        };
        // Else the oldest sample whose distance still dwarfs the dating errors; none (a copy
        // just begun, or just resumed after a stall): no rate to trust.
        // With four samples or more, twice the dating errors is distance enough: the early
        // polls of a short copy grow apart as fast as the copy goes.
        let factor = if self.samples.len() >= 4 { 2 } else { 4 };
        let base = usable.iter().rev().find(far_enough).or_else(|| {
            usable.iter().find(|s| {
                last.at.saturating_sub(s.at) >= (s.slack + last.slack).saturating_mul(factor)
            })
        });
        match base {
            // Each date errs by up to its slack: the copy may have covered the distance in
            // the time between the samples less both slacks (coarse steps polled far apart
            // make that a tenth or more).
            Some(base) => {
                let dt = last.at.saturating_sub(base.at).as_secs_f64();
                let covered = last.pct - base.pct;
                let shortest = (dt - (base.slack + last.slack).as_secs_f64()).max(dt / 4.0);
                (dt > 0.0).then(|| (covered / dt, covered / shortest))
            }
            // Polls far apart (coarse steps, a paced start): the dates of the crossings are
            // vague, but at the moment each poll saw its percentage the copy stood within one
            // step above it; across three steps or more that bounds the rate well enough.
            None => {
                let base = usable.first()?;
                let step = self.step.unwrap_or(1.0);
                let dt = (last.at + last.slack)
                    .saturating_sub(base.at + base.slack)
                    .as_secs_f64();
                let rate = (last.pct - base.pct) / dt;
                (dt > 0.0 && last.pct - base.pct >= 3.0 * step).then_some((rate, rate))
            }
        }
    }

    /// When (in elapsed time) the copy is predicted to reach 100 %, and the earliest it may.
    /// The last new percentage `p` was crossed between the poll that first saw it and the one
    /// before, so at that poll the copy stood at `p` plus up to the lesser of one step and
    /// what the rate covers in that gap: the end lies in a window of that width.
    pub(super) fn prediction(&self) -> Option<(Duration, Duration)> {
        let last = *self.samples.last()?;
        if last.pct >= 100.0 {
            return None;
        }
        let (rate, fastest_allowed) = self
            .rates()
            .filter(|(r, f)| r.is_finite() && *r > 0.0 && f.is_finite())?;
        let secs = |pct: f64| Duration::try_from_secs_f64((pct / rate).clamp(0.0, 1e7)).ok();
        let seen_at = last.at + last.slack;
        let left = 100.0 - last.pct;
        let ahead = self
            .step
            .unwrap_or(1.0)
            .min(rate * last.slack.as_secs_f64() * 2.0)
            .min(left);
        let latest = seen_at.saturating_add(secs(left)?);
        // The rate itself is known to a few percent: start looking that much earlier. Coarse
        // steps give few samples, each dated only to within a long poll gap, so there the
        // fastest rate their dates allow bounds the earliest end (over a 10-minute copy in
        // 10 % steps the rate is read up to a quarter low).
        let coarse = self.step.unwrap_or(1.0) >= COARSE_STEP;
        let bound = if coarse {
            (rate / 0.96).max(fastest_allowed)
        } else {
            rate / 0.96
        };
        let earliest = seen_at.saturating_add(
            Duration::try_from_secs_f64(((left - ahead) / bound).clamp(0.0, 1e7)).ok()?,
        );
        // After a stall or a slow stretch, the copy may go back to the fastest rate it has
        // shown.
        let fast = if self.had_stall {
            self.fastest.max(rate)
        } else {
            rate
        };
        let earliest_fast = Duration::try_from_secs_f64(((left - ahead) / fast).clamp(0.0, 1e7))
            .map_or(earliest, |d| seen_at.saturating_add(d));
        Some((latest, earliest.min(earliest_fast)))
    }

    /// Whether the progress has stopped moving: no new percentage for three times the usual
    /// gap between two (and at least 3 s).
    pub(super) fn stalled(&self, elapsed: Duration) -> bool {
        let Some(last) = self.samples.last() else {
            return false;
        };
        let n = self.samples.len();
        let gap = if n >= 2 {
            last.at.saturating_sub(self.samples[0].at) / (n as u32 - 1)
        } else {
            Duration::ZERO
        };
        elapsed.saturating_sub(last.at) > gap.saturating_mul(3).max(Duration::from_secs(3))
    }

    /// Records the percentage seen at `elapsed` (the previous look was at `previous`).
    pub(super) fn record(
        &mut self,
        elapsed: Duration,
        previous: Option<Duration>,
        pct: f64,
    ) -> Recorded {
        // Progress going back means the next copy has begun (a VM with several imported
        // disks): what was learnt about the previous one is dropped.
        let mut outcome = Recorded::New;
        if self.samples.last().is_some_and(|s| pct < s.pct) {
            self.samples.clear();
            self.copied_at = None;
            self.fastest = 0.0;
            self.had_stall = false;
            outcome = Recorded::NextCopy;
        }
        if self.samples.last().is_some_and(|s| pct <= s.pct) {
            return Recorded::Nothing;
        }
        if let Some(prev) = self.samples.last() {
            let d = pct - prev.pct;
            self.step = Some(self.step.map_or(d, |s| s.min(d)));
        }
        if std::mem::take(&mut self.was_stalled) {
            self.samples.clear();
        }
        let since = previous.unwrap_or(elapsed);
        let half = elapsed.saturating_sub(since) / 2;
        self.samples.push(Sample {
            at: since + half,
            slack: half,
            pct,
        });
        if self.samples.len() > MAX_SAMPLES {
            self.samples.remove(1);
        }
        if self.history.len() >= MAX_HISTORY {
            // Keep every other point: the history stays evenly spread and bounded.
            let kept: Vec<_> = self.history.iter().copied().step_by(2).collect();
            self.history = kept;
        }
        self.history.push((elapsed, pct));
        if pct >= 100.0 && self.copied_at.is_none() {
            self.copied_at = Some(elapsed);
        }
        if let Some(r) = self.rate().filter(|r| r.is_finite()) {
            // A rate well below the fastest seen: the copy slowed down or stood still in
            // between, unseen between two polls; it may speed up again.
            if r < self.fastest * 0.6 {
                self.had_stall = true;
            }
            self.fastest = self.fastest.max(r);
        }
        outcome
    }
}

/// The `transferred X of Y (Z%)` of a progress line: an import's or a full clone's, or a
/// disk mirrored by a live migration, whose line names its block job and goes on with the
/// time taken (`drive-scsi0: transferred 1.0 GiB of 2.0 GiB (50.00%) in 3s, ready`,
/// qemu-server QemuServer/BlockJob.pm, monitor).
pub fn transfer_part(line: &str) -> Option<&str> {
    let l = line.trim();
    let l = match l.strip_prefix("drive-") {
        Some(job) => job.split_once(": ")?.1,
        None => l,
    };
    if !l.starts_with("transferred ") {
        return None;
    }
    match l.find("%)") {
        Some(end) => Some(&l[..end + 2]),
        None => Some(l),
    }
}

/// The latest progress percentage in task-log lines (`transferred 1.0 GiB of 2.0 GiB (50.00%)`,
/// or a mirrored disk's, see [`transfer_part`]).
pub fn progress_in(lines: &[String]) -> Option<f64> {
    lines.iter().rev().find_map(|l| {
        let l = transfer_part(l)?;
        let open = l.rfind('(')?;
        // A server's number: only a real percentage counts (no NaN, inf or 1e300).
        l[open + 1..]
            .strip_suffix("%)")?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| (0.0..=100.0).contains(p))
    })
}

/// The total size in bytes from a progress line (`transferred 1.0 GiB of 2.5 GiB (40.00%)`).
pub fn copy_size(line: &str) -> Option<f64> {
    let rest = transfer_part(line)?.strip_prefix("transferred ")?;
    let (_, total) = rest.split_once(" of ")?;
    let total = total.split(" (").next()?;
    let (num, unit) = total.split_once(' ')?;
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let mult = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        "TiB" => 1099511627776.0,
        _ => return None,
    };
    Some(n * mult)
}
