//! Lines up two runs' allocations: the same sites, in the same phases, in
//! the same order.
//!
//! Runs of one program at two batch sizes make the same calls in the same
//! order, so their allocation sequences are equal but for the sizes, and
//! for the odd allocation one run makes and the other does not (a cuDNN
//! workspace of size 0 at one batch, say; the sort an embedding's backward
//! makes only past some number of indices). The alignment walks both
//! sequences together. Where both hold a group of allocations of one key
//! (site and phase) of different lengths, it pairs them by their sizes:
//! those whose sizes agree with a simple law first, in order (a weighted
//! longest common subsequence over the group). Where the keys differ, it
//! looks a short way ahead in each for the nearest point where they agree
//! again. Linear time in the runs' length, a bounded cost per difference.

/// How far ahead (in allocations, both runs together) a difference is
/// looked past before its allocations are given up as unmatched.
pub const LOOKAHEAD: usize = 64;

/// How many allocations must agree after a difference for the runs to be
/// taken as back in step.
const AGREE: usize = 4;

/// The longest group of one key paired by sizes at once (a longer one is
/// paired in slices of this).
const GROUP: usize = 256;

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
/// linear. `agree(i, j)`: whether the sizes of `a[i]` and `b[j]` follow a
/// simple law, which decides the pairs inside a group of one key whose
/// lengths differ.
pub fn align(
    a: &[u32],
    b: &[u32],
    max_unmatched: usize,
    agree: impl Fn(usize, usize) -> bool,
) -> Alignment {
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
            let la = group(a, i);
            let lb = group(b, j);
            if la == lb {
                for k in 0..la {
                    out.partner[i + k] = Some((j + k) as u32);
                }
            } else {
                out.first_difference.get_or_insert(i);
                let paired = pair_group(i, la, j, lb, &agree);
                for &(x, y) in &paired {
                    out.partner[x] = Some(y as u32);
                }
                out.unmatched_first += la - paired.len();
                out.unmatched_second += lb - paired.len();
            }
            i += la;
            j += lb;
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

/// The length of the group of `keys[at]`'s key from `at`, at most
/// [`GROUP`].
fn group(keys: &[u32], at: usize) -> usize {
    keys[at..]
        .iter()
        .take(GROUP)
        .take_while(|&&k| k == keys[at])
        .count()
}

/// Pairs the allocations `i..i + la` of the first run with `j..j + lb` of
/// the second, in order, most pairs whose sizes agree first, then most
/// pairs: a longest common subsequence where a pair that agrees counts
/// two and one that does not counts one.
fn pair_group(
    i: usize,
    la: usize,
    j: usize,
    lb: usize,
    agree: &impl Fn(usize, usize) -> bool,
) -> Vec<(usize, usize)> {
    let w = lb + 1;
    // best[x * w + y]: the best score of a[x..] against b[y..].
    let mut best = vec![0u32; (la + 1) * w];
    for x in (0..la).rev() {
        for y in (0..lb).rev() {
            let pair = if agree(i + x, j + y) { 2 } else { 1 };
            best[x * w + y] = (pair + best[(x + 1) * w + y + 1])
                .max(best[(x + 1) * w + y])
                .max(best[x * w + y + 1]);
        }
    }
    let mut pairs = Vec::with_capacity(la.min(lb));
    let (mut x, mut y) = (0, 0);
    while x < la && y < lb {
        let pair = if agree(i + x, j + y) { 2 } else { 1 };
        if best[x * w + y] == pair + best[(x + 1) * w + y + 1] {
            pairs.push((i + x, j + y));
            x += 1;
            y += 1;
        } else if best[x * w + y] == best[(x + 1) * w + y] {
            x += 1;
        } else {
            y += 1;
        }
    }
    pairs
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
        let al = align(&a, &a, usize::MAX, |_, _| true);
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
        let al = align(&a, &b, usize::MAX, |_, _| true);
        assert_eq!(al.unmatched_first, 0);
        assert_eq!(al.unmatched_second, 2);
        assert_eq!(al.partner[2], Some(3));
        assert_eq!(al.partner[9], Some(11));
        assert_eq!(al.first_difference, Some(2));
        let back = align(&b, &a, usize::MAX, |_, _| true);
        assert_eq!((back.unmatched_first, back.unmatched_second), (2, 0));
        assert_eq!(back.partner[2], None);
    }

    #[test]
    fn a_group_of_one_key_is_paired_by_the_sizes_that_agree() {
        // An embedding's backward: one gradient at the small batch; at the
        // larger, a sort's temporaries before the same gradient.
        let a = [1, 7, 2];
        let b = [1, 7, 7, 7, 2];
        let size_a = [10, 147, 5];
        let size_b = [20, 3, 4, 147, 10];
        let al = align(&a, &b, usize::MAX, |x, y| {
            size_a[x] == size_b[y] || size_a[x] * 2 == size_b[y]
        });
        assert_eq!(al.partner, vec![Some(0), Some(3), Some(4)]);
        assert_eq!((al.unmatched_first, al.unmatched_second), (0, 2));
        assert_eq!(al.first_difference, Some(1));
        // Without sizes that agree, in order.
        let al = align(&a, &b, usize::MAX, |_, _| false);
        assert_eq!(al.partner, vec![Some(0), Some(1), Some(4)]);
    }

    #[test]
    fn different_programs_leave_most_unmatched_in_linear_time() {
        let a: Vec<u32> = (0..100_000).map(|i| i % 7).collect();
        let b: Vec<u32> = (0..100_000).map(|i| 100 + i % 5).collect();
        let al = align(&a, &b, 1000, |_, _| true);
        assert!(al.gave_up);
        assert_eq!(al.unmatched_first, a.len());
        assert_eq!(al.first_difference, Some(0));
        // A run cut short: the rest of the longer one is unmatched.
        let al = align(&a[..10], &a[..7], usize::MAX, |_, _| true);
        assert_eq!((al.unmatched_first, al.unmatched_second), (3, 0));
        assert_eq!(al.first_difference, Some(7));
    }
}
