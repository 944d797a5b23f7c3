//! Lines up two runs' allocations: the same sites, in the same phases, in
//! the same order.
//!
//! Runs of one program at two batch sizes make the same calls in the same
//! order, so their allocation sequences are equal but for the sizes, and
//! for the odd allocation one run makes and the other does not (a cuDNN
//! workspace of size 0 at one batch, say). The alignment walks both
//! sequences together and, where they differ, looks a short way ahead in
//! each for the nearest point where they agree again: linear time in the
//! runs' length, and a bounded cost per difference.

/// How far ahead (in allocations, both runs together) a difference is
/// looked past before its allocations are given up as unmatched.
pub const LOOKAHEAD: usize = 64;

/// How many allocations must agree after a difference for the runs to be
/// taken as back in step.
const AGREE: usize = 4;

/// Two runs lined up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Alignment {
    /// For each allocation of the first run, its partner in the second.
    pub partner: Vec<Option<u32>>,
    /// Allocations of the first run without a partner.
    pub unmatched_first: usize,
    /// Allocations of the second run without a partner.
    pub unmatched_second: usize,
    /// The first allocation of the first run where the runs differ.
    pub first_difference: Option<usize>,
    /// Whether the walk stopped early, past `max_unmatched` unmatched
    /// allocations (the rest of both runs is counted unmatched).
    pub gave_up: bool,
}

/// Lines up sequences `a` and `b` of allocation keys (site and phase),
/// giving up once more than `max_unmatched` allocations of either run are
/// unmatched: runs that far apart are not lined up, and the walk stays
/// linear.
pub fn align(a: &[u32], b: &[u32], max_unmatched: usize) -> Alignment {
    let mut out = Alignment {
        partner: vec![None; a.len()],
        ..Alignment::default()
    };
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if out.unmatched_first.max(out.unmatched_second) > max_unmatched {
            out.gave_up = true;
            break;
        }
        if a[i] == b[j] {
            out.partner[i] = Some(j as u32);
            i += 1;
            j += 1;
            continue;
        }
        out.first_difference.get_or_insert(i);
        match resync(a, b, i, j) {
            Some((di, dj)) => {
                out.unmatched_first += di;
                out.unmatched_second += dj;
                i += di;
                j += dj;
            }
            None => {
                // No agreement within reach: both allocations are lost,
                // and the walk goes on from the next pair.
                out.unmatched_first += 1;
                out.unmatched_second += 1;
                i += 1;
                j += 1;
            }
        }
    }
    if i < a.len() || j < b.len() {
        out.first_difference.get_or_insert(i);
    }
    out.unmatched_first += a.len() - i;
    out.unmatched_second += b.len() - j;
    out
}

/// The nearest skip `(di, dj)`, by `di + dj`, after which `a` and `b` agree
/// for [`AGREE`] allocations (or to the end of both).
fn resync(a: &[u32], b: &[u32], i: usize, j: usize) -> Option<(usize, usize)> {
    let agrees = |x: usize, y: usize| {
        let n = AGREE.min(a.len() - x).min(b.len() - y);
        n > 0 && (0..n).all(|k| a[x + k] == b[y + k])
    };
    for d in 1..=LOOKAHEAD {
        for di in 0..=d {
            let dj = d - di;
            if i + di < a.len() && j + dj < b.len() && agrees(i + di, j + dj) {
                return Some((di, dj));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_runs_pair_every_allocation() {
        let a = [1, 2, 3, 2, 1];
        let al = align(&a, &a, usize::MAX);
        assert_eq!(
            al.partner,
            vec![Some(0), Some(1), Some(2), Some(3), Some(4)]
        );
        assert_eq!((al.unmatched_first, al.unmatched_second), (0, 0));
        assert_eq!(al.first_difference, None);
    }

    #[test]
    fn an_allocation_one_run_makes_is_left_out() {
        // The second run makes a workspace (9) the first does not, twice.
        let a = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5];
        let b = [1, 2, 9, 3, 4, 5, 1, 2, 9, 3, 4, 5];
        let al = align(&a, &b, usize::MAX);
        assert_eq!(al.unmatched_first, 0);
        assert_eq!(al.unmatched_second, 2);
        assert_eq!(al.partner[2], Some(3));
        assert_eq!(al.partner[9], Some(11));
        assert_eq!(al.first_difference, Some(2));
        let back = align(&b, &a, usize::MAX);
        assert_eq!((back.unmatched_first, back.unmatched_second), (2, 0));
        assert_eq!(back.partner[2], None);
    }

    #[test]
    fn different_programs_leave_most_unmatched_in_linear_time() {
        let a: Vec<u32> = (0..100_000).map(|i| i % 7).collect();
        let b: Vec<u32> = (0..100_000).map(|i| 100 + i % 5).collect();
        let al = align(&a, &b, 1000);
        assert!(al.gave_up);
        assert_eq!(al.unmatched_first, a.len());
        assert_eq!(al.first_difference, Some(0));
        // A run cut short: the rest of the longer one is unmatched.
        let al = align(&a[..10], &a[..7], usize::MAX);
        assert_eq!((al.unmatched_first, al.unmatched_second), (3, 0));
        assert_eq!(al.first_difference, Some(7));
    }
}
