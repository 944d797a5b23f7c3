//! The scaling check itself: it passes linear work and fails quadratic work.

#![allow(clippy::ptr_arg)] // the check hands the input over as it was built

mod support;

use support::scaling::assert_linear;

fn linear(v: &Vec<u64>) {
    std::hint::black_box(v.iter().fold(0u64, |a, b| a.wrapping_add(*b)));
}

fn quadratic(v: &Vec<u64>) {
    let mut acc = 0u64;
    for a in v {
        for b in v {
            acc = acc.wrapping_add(a ^ b);
        }
    }
    std::hint::black_box(acc);
}

#[test]
fn linear_work_passes() {
    assert_linear("a sum", 200_000, |n| (0..n as u64).collect(), linear);
}

#[test]
#[should_panic(expected = "x is linear")]
fn quadratic_work_fails() {
    assert_linear("all pairs", 300, |n| (0..n as u64).collect(), quadratic);
}
