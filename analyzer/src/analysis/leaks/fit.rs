//! The fits of the leak analysis: a robust straight line through a series
//! at the ends of repetitions, and how steadily it explains them.

use super::{MIN_REPETITIONS, MIN_STEADINESS};

/// Series longer than this are fitted by slopes between points half the
/// series apart rather than between every pair.
const PAIRWISE_MAX: usize = 64;

/// A robust slope of `y` over `x` (Theil–Sen): the median of the slopes
/// between every pair of points, or, in a long series, between the points
/// half the series apart (linear in the number of points). `None` with fewer
/// than two points.
pub fn robust_slope(x: &[f64], y: &[f64]) -> Option<f64> {
    let m = x.len().min(y.len());
    if m < 2 {
        return None;
    }
    let mut slopes: Vec<f64> = if m <= PAIRWISE_MAX {
        (0..m)
            .flat_map(|i| (i + 1..m).map(move |j| (i, j)))
            .filter(|&(i, j)| x[j] != x[i])
            .map(|(i, j)| (y[j] - y[i]) / (x[j] - x[i]))
            .collect()
    } else {
        let h = m / 2;
        (0..m - h)
            .filter(|&i| x[i + h] != x[i])
            .map(|i| (y[i + h] - y[i]) / (x[i + h] - x[i]))
            .collect()
    };
    median(&mut slopes)
}

/// The median of `v` (sorted in place), `None` when empty.
pub(super) fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// How much of a series' variation the line of slope `slope` (through the
/// median intercept) explains: 1 − residual / total sum of squares, at
/// least 0; 1 for a series that does not vary.
pub fn steadiness(x: &[f64], y: &[f64], slope: f64) -> f64 {
    let n = x.len().min(y.len());
    if n == 0 {
        return 1.0;
    }
    let mut intercepts: Vec<f64> = (0..n).map(|i| y[i] - slope * x[i]).collect();
    let intercept = median(&mut intercepts).unwrap_or(0.0);
    let mean = y[..n].iter().sum::<f64>() / n as f64;
    let total: f64 = y[..n].iter().map(|v| (v - mean).powi(2)).sum();
    if total == 0.0 {
        return 1.0;
    }
    let residual: f64 = (0..n)
        .map(|i| (y[i] - intercept - slope * x[i]).powi(2))
        .sum();
    (1.0 - residual / total).max(0.0)
}

/// How many leading repetitions a second fit leaves out as warm-up: a
/// fifth, at least one once there are three.
pub fn warmup(repetitions: usize) -> usize {
    if repetitions < 3 {
        0
    } else {
        (repetitions / 5).max(1)
    }
}

/// A straight-line fit of a series at the ends of repetitions.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Fit {
    /// Leading points left out (warm-up).
    pub skipped: usize,
    /// Points fitted.
    pub points: usize,
    /// The robust slope, per repetition.
    pub slope: f64,
    /// The share of the variation the line explains (see [`steadiness`]).
    pub steadiness: f64,
}

impl Fit {
    /// Fits `y` over `x` from point `skipped` on.
    pub fn of(x: &[f64], y: &[f64], skipped: usize) -> Fit {
        let (x, y) = (&x[skipped.min(x.len())..], &y[skipped.min(y.len())..]);
        let slope = robust_slope(x, y).unwrap_or(0.0);
        Fit {
            skipped,
            points: x.len().min(y.len()),
            slope,
            steadiness: steadiness(x, y, slope),
        }
    }

    /// Whether the series changes consistently: a slope of at least a byte,
    /// up or down, over [`MIN_REPETITIONS`] points or more, explaining at
    /// least [`MIN_STEADINESS`] of the variation.
    pub fn is_consistent(&self) -> bool {
        self.points >= MIN_REPETITIONS
            && self.slope.round() != 0.0
            && self.steadiness >= MIN_STEADINESS
    }

    /// The fit of every point if it shows consistent change (`up`: growth;
    /// else a fall), or else of the points after the warm-up, whichever
    /// first does; `None` if neither does.
    pub fn consistent(x: &[f64], y: &[f64], up: bool) -> Option<Fit> {
        let w = warmup(x.len());
        let direction = |f: &Fit| (f.slope > 0.0) == up;
        std::iter::once(0)
            .chain((w > 0).then_some(w))
            .map(|skip| Fit::of(x, y, skip))
            .find(|f| f.is_consistent() && direction(f))
    }
}
