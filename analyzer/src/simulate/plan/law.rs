//! How an allocation's size follows the varied value: a law fitted, exactly,
//! through the sizes the recorded runs asked for.
//!
//! Sizes are whole bytes and the laws are polynomials of degree two at
//! most, so every fit is made in exact rational arithmetic: a law fits only
//! when it gives every recorded size to the byte. The simplest law that
//! fits is taken, in the order of [`LawKind`].

use serde::Serialize;

/// The shape of a [`Law`], from the simplest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LawKind {
    /// The same size in every run (parameters, optimizer state, workspaces).
    Constant,
    /// Proportional to the value: `a·v`.
    Linear,
    /// Proportional to its square: `a·v²` (attention scores over the
    /// sequence length).
    Quadratic,
    /// A constant plus a proportional part: `a + b·v`, both at least 0.
    Affine,
    /// A proportional part plus a square one: `a·v + b·v²`, both at least 0.
    LinearQuadratic,
    /// A full quadratic `a + b·v + c·v²` with no negative coefficient.
    FullQuadratic,
    /// No law above fits every run: the size is read off the runs, along
    /// the line through the two nearest (see [`Law::at`]).
    NoLaw,
    /// The allocation has no partner in every other run: its own size.
    Unmatched,
    /// One run only: assumed linear (activations, temporaries) or constant
    /// (the rest), an estimate.
    Assumed,
}

impl LawKind {
    /// The law in a few words, for tables.
    pub fn words(self) -> &'static str {
        match self {
            LawKind::Constant => "constant",
            LawKind::Linear => "linear",
            LawKind::Quadratic => "quadratic",
            LawKind::Affine => "linear + constant",
            LawKind::LinearQuadratic => "linear + quadratic",
            LawKind::FullQuadratic => "quadratic + linear + constant",
            LawKind::NoLaw => "no simple law",
            LawKind::Unmatched => "in one run only",
            LawKind::Assumed => "assumed",
        }
    }

    /// Whether the kind is a law fitted through the runs.
    pub fn is_fitted(self) -> bool {
        matches!(
            self,
            LawKind::Constant
                | LawKind::Linear
                | LawKind::Quadratic
                | LawKind::Affine
                | LawKind::LinearQuadratic
                | LawKind::FullQuadratic
        )
    }
}

/// Which of `1`, `v`, `v²` a law of a kind is made of.
const fn basis(kind: LawKind) -> &'static [usize] {
    match kind {
        LawKind::Constant => &[0],
        LawKind::Linear => &[1],
        LawKind::Quadratic => &[2],
        LawKind::Affine => &[0, 1],
        LawKind::LinearQuadratic => &[1, 2],
        LawKind::FullQuadratic => &[0, 1, 2],
        _ => &[],
    }
}

/// Every law fitted, simplest first.
pub const FITTED: [LawKind; 6] = [
    LawKind::Constant,
    LawKind::Linear,
    LawKind::Quadratic,
    LawKind::Affine,
    LawKind::LinearQuadratic,
    LawKind::FullQuadratic,
];

/// A size as a function of the varied value `v`:
/// `(c[0] + c[1]·v + c[2]·v²) / den`, exact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Law {
    /// Its shape.
    pub kind: LawKind,
    c: [i128; 3],
    den: i128,
    /// The recorded points, by value, for [`LawKind::NoLaw`].
    points: Vec<(u64, u64)>,
}

impl Law {
    /// The same size at every value.
    pub fn constant(kind: LawKind, size: u64) -> Law {
        Law {
            kind,
            c: [size as i128, 0, 0],
            den: 1,
            points: Vec::new(),
        }
    }

    /// A size proportional to the value, `size` at `value` (an assumption,
    /// for one run).
    pub fn proportional(kind: LawKind, value: u64, size: u64) -> Law {
        Law {
            kind,
            c: [0, size as i128, 0],
            den: value.max(1) as i128,
            points: Vec::new(),
        }
    }

    /// The simplest law through `points` (value, size), at distinct
    /// values, that gives every size to the byte; [`LawKind::NoLaw`] when
    /// none does.
    pub fn fit(points: &[(u64, u64)]) -> Law {
        Law::fit_among(points, &FITTED)
    }

    /// [`Law::fit`] among `kinds` only (in their order, simplest first).
    pub fn fit_among(points: &[(u64, u64)], kinds: &[LawKind]) -> Law {
        let mut points = points.to_vec();
        points.sort_unstable();
        for &kind in kinds {
            let b = basis(kind);
            if b.is_empty() || b.len() > points.len() {
                continue;
            }
            // Solve through the runs of the largest values (the nearest to
            // what a plan looks for), then check every run.
            let through = &points[points.len() - b.len()..];
            let Some((c, den)) = solve(b, through) else {
                continue;
            };
            let law = Law {
                kind,
                c,
                den,
                points: Vec::new(),
            };
            let nonnegative = c.iter().all(|&x| x >= 0) && den > 0;
            if nonnegative
                && points
                    .iter()
                    .all(|&(v, s)| law.exact_at(v) == Some(s as i128))
            {
                return law;
            }
        }
        Law {
            kind: LawKind::NoLaw,
            c: [0; 3],
            den: 1,
            points,
        }
    }

    /// The size at `value`, rounded to the nearest byte; at least 1 (the
    /// allocator is asked for a byte where a law falls to 0 or below), and
    /// `u64::MAX` where it overflows (no device holds that).
    pub fn at(&self, value: u64) -> u64 {
        if self.kind == LawKind::NoLaw {
            return self.read_off(value);
        }
        let v = value as i128;
        let num = v
            .checked_mul(v)
            .and_then(|v2| self.c[2].checked_mul(v2))
            .and_then(|q| self.c[1].checked_mul(v).and_then(|l| l.checked_add(q)))
            .and_then(|x| x.checked_add(self.c[0]));
        match num {
            None => u64::MAX,
            Some(n) => {
                let rounded =
                    (2 * n.clamp(-(1 << 125), 1 << 125) + self.den).div_euclid(2 * self.den);
                rounded.clamp(1, u64::MAX as i128) as u64
            }
        }
    }

    /// The law's value at `v` times its denominator, when whole.
    fn exact_at(&self, v: u64) -> Option<i128> {
        let v = v as i128;
        let num = self.c[0]
            .checked_add(self.c[1].checked_mul(v)?)?
            .checked_add(self.c[2].checked_mul(v.checked_mul(v)?)?)?;
        (num % self.den == 0).then(|| num / self.den)
    }

    /// For [`LawKind::NoLaw`]: the size along the line through the two
    /// recorded points nearest `value` (between them when inside the
    /// runs), rounded, at least 1. Past the largest run, a size whose
    /// growth slowed between the last runs stays at its largest: a kernel
    /// that sizes its workspace by the blocks in flight grows with the
    /// value until the GPU's multiprocessors are full, then stops (the
    /// memory-efficient attention's backward on an H200: 19.7 MB at batch
    /// 16, 38.9 MB at 32, 132 MiB from about 110 on).
    fn read_off(&self, value: u64) -> u64 {
        let p = &self.points;
        match p.len() {
            0 => 1,
            1 => p[0].1.max(1),
            n if n >= 3 && value > p[n - 1].0 && slowed(p[n - 3], p[n - 2], p[n - 1]) => {
                p[n - 1].1.max(1)
            }
            n => {
                let i = p.partition_point(|&(v, _)| v < value).clamp(1, n - 1);
                let ((v0, s0), (v1, s1)) = (p[i - 1], p[i]);
                let (v0, s0, v1, s1, x) = (
                    v0 as i128,
                    s0 as i128,
                    v1 as i128,
                    s1 as i128,
                    value as i128,
                );
                let num = s0 * (v1 - v0) + (s1 - s0) * (x - v0);
                let den = v1 - v0;
                ((2 * num + den).div_euclid(2 * den)).clamp(1, u64::MAX as i128) as u64
            }
        }
    }
}

/// Whether the size grows less per unit of value from `b` to `c` than from
/// `a` to `b` (values increasing).
fn slowed(a: (u64, u64), b: (u64, u64), c: (u64, u64)) -> bool {
    let slope =
        |(v0, s0): (u64, u64), (v1, s1): (u64, u64)| (s1 as i128 - s0 as i128, (v1 - v0) as i128);
    let ((n0, d0), (n1, d1)) = (slope(a, b), slope(b, c));
    n1 * d0 < n0 * d1
}

/// Solves `Σ_k c_k · v^basis[k] = s · den` through `points` (as many as the
/// basis has terms) by Cramer's rule in exact integers; `None` when the
/// system is singular or overflows.
fn solve(basis: &[usize], points: &[(u64, u64)]) -> Option<([i128; 3], i128)> {
    let n = basis.len();
    let pow = |v: u64, e: usize| -> Option<i128> { (v as i128).checked_pow(e as u32) };
    let mut m = [[0i128; 3]; 3];
    for (r, &(v, _)) in points.iter().enumerate() {
        for (k, &e) in basis.iter().enumerate() {
            m[r][k] = pow(v, e)?;
        }
    }
    let whole = det(&m, n)?;
    if whole == 0 {
        return None;
    }
    let mut c = [0i128; 3];
    for (k, &e) in basis.iter().enumerate() {
        let mut mk = m;
        for (r, &(_, s)) in points.iter().enumerate() {
            mk[r][k] = s as i128;
        }
        c[e] = det(&mk, n)?;
    }
    // Keep the denominator positive and the fraction reduced.
    let (mut c, mut den) = (c, whole);
    if den < 0 {
        den = den.checked_neg()?;
        for x in &mut c {
            *x = x.checked_neg()?;
        }
    }
    let g = c.iter().fold(den, |g, &x| gcd(g, x.unsigned_abs() as i128));
    if g > 1 {
        den /= g;
        for x in &mut c {
            *x /= g;
        }
    }
    Some((c, den))
}

/// The determinant of the top-left `n`×`n` of `m` (n ≤ 3), checked.
fn det(m: &[[i128; 3]; 3], n: usize) -> Option<i128> {
    let mul = |a: i128, b: i128| a.checked_mul(b);
    match n {
        1 => Some(m[0][0]),
        2 => mul(m[0][0], m[1][1])?.checked_sub(mul(m[0][1], m[1][0])?),
        3 => {
            let minor = |a: usize, b: usize, c: usize, d: usize| {
                mul(m[1][a], m[2][b])?.checked_sub(mul(m[1][c], m[2][d])?)
            };
            mul(m[0][0], minor(1, 2, 2, 1)?)?
                .checked_sub(mul(m[0][1], minor(0, 2, 2, 0)?)?)?
                .checked_add(mul(m[0][2], minor(0, 1, 1, 0)?)?)
        }
        _ => None,
    }
}

fn gcd(a: i128, b: i128) -> i128 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simplest_exact_law_is_taken() {
        assert_eq!(Law::fit(&[(4, 100), (8, 100)]).kind, LawKind::Constant);
        let linear = Law::fit(&[(4, 4096), (8, 8192)]);
        assert_eq!(linear.kind, LawKind::Linear);
        assert_eq!(linear.at(22), 22 * 1024);
        let square = Law::fit(&[(512, 512 * 512 * 24), (1024, 1024 * 1024 * 24)]);
        assert_eq!(square.kind, LawKind::Quadratic);
        assert_eq!(square.at(1536), 1536 * 1536 * 24);
        let affine = Law::fit(&[(4, 4000 + 512), (8, 8000 + 512)]);
        assert_eq!(affine.kind, LawKind::Affine);
        assert_eq!(affine.at(100), 100_000 + 512);
    }

    #[test]
    fn a_third_run_tells_linear_plus_quadratic_from_affine() {
        let size = |s: u64| 3 * s + 5 * s * s;
        let two = Law::fit(&[(512, size(512)), (1024, size(1024))]);
        // Two runs cannot tell: a line through both, nonnegative, fits.
        assert_eq!(two.kind, LawKind::LinearQuadratic);
        let three = Law::fit(&[(256, size(256)), (512, size(512)), (1024, size(1024))]);
        assert_eq!(three.kind, LawKind::LinearQuadratic);
        assert_eq!(three.at(4096), size(4096));
        let full = |s: u64| 7 + 3 * s + 5 * s * s;
        let law = Law::fit(&[(256, full(256)), (512, full(512)), (1024, full(1024))]);
        assert_eq!(law.kind, LawKind::FullQuadratic);
        assert_eq!(law.at(3000), full(3000));
    }

    #[test]
    fn sizes_that_shrink_or_do_not_divide_have_no_law() {
        let shrinking = Law::fit(&[(4, 800), (8, 400)]);
        assert_eq!(shrinking.kind, LawKind::NoLaw);
        // Read off the line through the nearest runs, never below a byte.
        assert_eq!(shrinking.at(6), 600);
        assert_eq!(shrinking.at(100), 1);
        let ragged = Law::fit(&[(1, 10), (2, 17), (3, 30), (4, 31)]);
        assert_eq!(ragged.kind, LawKind::NoLaw);
        assert_eq!(ragged.at(3), 30);
        // Past the runs, growth that slowed (13, then 1) stops.
        assert_eq!(ragged.at(5), 31);
    }

    #[test]
    fn a_size_that_stopped_growing_stays_past_the_largest_run() {
        // An attention backward's workspace on an H200 (recorded): it grows
        // with the batch until the multiprocessors are full.
        let capped = Law::fit(&[(16, 19_660_800), (32, 38_928_384), (137, 138_412_032)]);
        assert_eq!(capped.kind, LawKind::NoLaw);
        assert_eq!(capped.at(152), 138_412_032);
        // Inside the runs, still along the line between the nearest two.
        assert_eq!(capped.at(24), (19_660_800 + 38_928_384) / 2);
        // Growth that speeds up is still extrapolated along the last line.
        let faster = Law::fit(&[(1, 10), (2, 11), (4, 40)]);
        assert_eq!(faster.kind, LawKind::NoLaw);
        assert_eq!(faster.at(6), 69);
    }

    #[test]
    fn huge_values_saturate_instead_of_overflowing() {
        let square = Law::fit(&[(1, 1 << 40), (2, 4 << 40)]);
        assert_eq!(square.kind, LawKind::Quadratic);
        assert_eq!(square.at(u64::MAX), u64::MAX);
        assert_eq!(Law::proportional(LawKind::Assumed, 8, 800).at(12), 1200);
        assert_eq!(Law::constant(LawKind::Unmatched, 0).at(12), 1);
    }
}
