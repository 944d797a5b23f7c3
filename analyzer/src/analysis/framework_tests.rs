//! Categories in runs shaped as the frameworks people use shape them:
//! Lightning runs its whole training step (forward, backward and update)
//! inside `optimizer.step(closure)`, so the `Optimizer.step` phase encloses
//! every allocation of an iteration. The figures must be those of a plain
//! loop with the same tensors.

use super::categories::CategoryTable;
use super::summary::SummaryReport;
use super::summary::tests::summarize;
use super::window::Window;
use crate::testing::TraceBuilder;
use vramtrace_format::Category;

/// Sizes of one iteration's blocks (bytes).
const PARAM: u64 = 4096;
const STATE: u64 = 4096; // each of two (Adam's exp_avg and exp_avg_sq)
const BATCH: u64 = 512;
const ACT1: u64 = 8192;
const ACT2: u64 = 16384;
const FWD_TMP: u64 = 1024;
const LOSS: u64 = 256;
const GRAD: u64 = 4096;
const GRAD_TMP: u64 = 2048;
const STEP_TMP: u64 = 4096;

/// How the run is shaped.
#[derive(Clone, Copy)]
struct Shape {
    /// Forward and backward inside the `Optimizer.step` phase (Lightning,
    /// closure optimizers); else a plain loop.
    closure: bool,
    /// The recorder tagged parameters, gradients and optimizer state.
    tagged: bool,
    /// The last iteration runs out of memory in its backward.
    oom_in_backward: bool,
    /// The first forward and the first backward each make a block of a
    /// parameter's size that they keep for good (cuBLAS's workspace of
    /// the main thread and of the autograd engine's).
    workspaces: bool,
}

/// The cuBLAS workspaces' addresses (see [`Shape::workspaces`]).
const FORWARD_WORKSPACE: u64 = 0x50_0000;
const BACKWARD_WORKSPACE: u64 = 0x51_0000;

/// Three iterations of a one-parameter AdamW model.
fn run(shape: Shape) -> Vec<u8> {
    let mut b = if shape.tagged {
        TraceBuilder::tagged()
    } else {
        TraceBuilder::new()
    };
    let adamw = "/venv/site-packages/torch/optim/adamw.py";
    let closure = "/venv/site-packages/lightning/pytorch/loops/optimization/automatic.py";
    let init = b.stack(&[
        (
            "_apply",
            "/venv/site-packages/torch/nn/modules/module.py",
            900,
        ),
        ("main", "train.py", 10),
    ]);
    let data = b.site("main", "train.py", 30);
    // Under a closure, the model's frames sit inside the optimizer's.
    let outer: Vec<(&str, &str, u32)> = if shape.closure {
        vec![
            ("closure", closure, 140),
            ("step", adamw, 200),
            ("fit", "train.py", 5),
        ]
    } else {
        vec![("main", "train.py", 5)]
    };
    let fwd = |b: &mut TraceBuilder, line: u32| {
        let mut frames = vec![("forward", "model.py", line)];
        frames.extend(outer.iter().copied());
        b.stack(&frames)
    };
    let act1 = fwd(&mut b, 20);
    let act2 = fwd(&mut b, 21);
    let fwd_tmp = fwd(&mut b, 22);
    let loss = fwd(&mut b, 23);
    let node = b.stack(&[("MmBackward0", "", 0)]);
    let node_tmp = b.stack(&[("AddmmBackward0", "", 0)]);
    let adam = b.stack(&[
        ("_init_group", adamw, 150),
        ("step", adamw, 200),
        ("fit", "train.py", 5),
    ]);
    let step = "Optimizer.step#AdamW.step";
    b.segment(0, 1 << 30);
    b.alloc(0x1000, PARAM, PARAM, init);
    if shape.tagged {
        b.tag(0x1000, Category::Parameter);
    }
    for it in 0..3u64 {
        let last = it == 2;
        let base = 0x10_0000 * (it + 1);
        b.alloc(base, BATCH, BATCH, data);
        if it > 0 {
            b.free(0x10_0000 * it, BATCH);
        }
        if shape.closure {
            b.begin(step);
        }
        b.alloc(base + 0x1000, ACT1, ACT1, act1);
        if it == 0 && shape.workspaces {
            b.alloc(FORWARD_WORKSPACE, PARAM, PARAM, act2);
        }
        b.alloc(base + 0x4000, ACT2, ACT2, act2);
        b.alloc(base + 0x9000, FWD_TMP, FWD_TMP, fwd_tmp)
            .free(base + 0x9000, FWD_TMP);
        b.alloc(base + 0xa000, LOSS, LOSS, loss);
        if it > 0 {
            // zero_grad(set_to_none=True), before the backward.
            b.free(0x10_0000 * it + 0x10000, GRAD);
        }
        b.on_thread(1);
        b.alloc(base + 0x10000, GRAD, GRAD, node);
        if it == 0 && shape.workspaces {
            b.alloc(BACKWARD_WORKSPACE, GRAD, GRAD, node);
        }
        if last && shape.oom_in_backward {
            b.oom(1 << 40, node_tmp);
            b.on_thread(0);
            return b.finish();
        }
        b.alloc(base + 0x12000, GRAD_TMP, GRAD_TMP, node_tmp)
            .free(base + 0x12000, GRAD_TMP);
        b.free(base + 0x1000, ACT1).free(base + 0x4000, ACT2);
        b.on_thread(0);
        b.free(base + 0xa000, LOSS);
        if !shape.closure {
            b.begin(step);
        }
        if it == 0 {
            b.alloc(0x2000, STATE, STATE, adam)
                .alloc(0x3000, STATE, STATE, adam);
        }
        b.alloc(base + 0x20000, STEP_TMP, STEP_TMP, adam)
            .free(base + 0x20000, STEP_TMP);
        b.end(step);
        if shape.tagged {
            // The recorder tags after the step, from the optimizer's state.
            b.tag(base + 0x10000, Category::Gradient);
            if it == 0 {
                b.tag(0x2000, Category::OptimizerState)
                    .tag(0x3000, Category::OptimizerState);
            }
        }
    }
    b.finish()
}

/// Bytes by category in a table, in [`Category::ALL`] order.
fn bytes(t: &CategoryTable) -> Vec<(Category, u64)> {
    t.0.iter().map(|s| (s.category, s.bytes)).collect()
}

/// What the allocated peak (iteration 1's backward, with the gradient
/// and its temporary live beside the saved activations) holds.
fn expected_at_peak() -> Vec<(Category, u64)> {
    vec![
        (Category::Parameter, PARAM),
        (Category::Buffer, 0),
        (Category::Gradient, GRAD),
        (Category::OptimizerState, 2 * STATE),
        (Category::Activation, ACT1 + ACT2),
        (Category::Temporary, LOSS + GRAD_TMP),
        (Category::Other, BATCH),
    ]
}

fn summary(shape: Shape) -> SummaryReport {
    summarize(&run(shape), Window::ALL)
}

/// Every shape of run (tagged or not, a closure's or a plain loop) with
/// these choices for the rest.
fn shapes(oom_in_backward: bool, workspaces: bool) -> impl Iterator<Item = Shape> {
    [false, true].into_iter().flat_map(move |tagged| {
        [false, true].into_iter().map(move |closure| Shape {
            closure,
            tagged,
            oom_in_backward,
            workspaces,
        })
    })
}

#[test]
fn a_lightning_run_reads_as_a_plain_loop_does() {
    for shape in shapes(false, false) {
        let Shape {
            closure, tagged, ..
        } = shape;
        let r = summary(shape);
        assert_eq!(
            r.peak_allocated_bytes,
            PARAM + 2 * STATE + BATCH + ACT1 + ACT2 + LOSS + GRAD + GRAD_TMP
        );
        assert_eq!(
            bytes(&r.categories.at_allocated_peak),
            expected_at_peak(),
            "closure {closure}, tagged {tagged}"
        );
        let exact = |c| r.categories.at_allocated_peak.get(c).exact_bytes;
        if tagged {
            assert_eq!(exact(Category::Gradient), GRAD);
            assert_eq!(exact(Category::OptimizerState), 2 * STATE);
        } else {
            assert_eq!(exact(Category::Gradient), 0);
        }
        assert_eq!(
            r.categories.dominant.unwrap().category,
            Category::Activation
        );
        let end = &r.categories.at_end;
        assert_eq!(end.get(Category::Gradient).bytes, GRAD);
        assert_eq!(end.get(Category::OptimizerState).bytes, 2 * STATE);
        assert_eq!(end.get(Category::Parameter).bytes, PARAM);
        assert_eq!(end.get(Category::Other).bytes, BATCH);
        assert_eq!(end.get(Category::Activation).bytes, 0);
    }
}

#[test]
fn blocks_a_library_keeps_are_neither_parameters_nor_gradients() {
    // cuBLAS's workspaces (32 MiB on an H100 or H200: the size of a
    // 4096 x 4096 bf16 weight) are made by the first forward and the first
    // backward and kept: the forward's is no parameter (it came after the
    // forward's first activation), the backward's no gradient (one
    // gradient per parameter of its size).
    for shape in shapes(false, true) {
        let Shape {
            closure, tagged, ..
        } = shape;
        let r = summary(shape);
        let mut expected = expected_at_peak();
        expected[6].1 += PARAM + GRAD;
        assert_eq!(
            bytes(&r.categories.at_allocated_peak),
            expected,
            "closure {closure}, tagged {tagged}"
        );
        let end = &r.categories.at_end;
        assert_eq!(end.get(Category::Parameter).bytes, PARAM);
        assert_eq!(end.get(Category::Gradient).bytes, GRAD);
        assert_eq!(end.get(Category::Other).bytes, BATCH + PARAM + GRAD);
    }
}

#[test]
fn activations_held_at_an_oom_in_backward_are_known_by_their_sites() {
    for shape in shapes(true, false) {
        let Shape {
            closure, tagged, ..
        } = shape;
        let r = summary(shape);
        let end = &r.categories.at_end;
        assert_eq!(
            end.get(Category::Activation).bytes,
            ACT1 + ACT2,
            "closure {closure}, tagged {tagged}: the forward's saved tensors, never freed"
        );
        assert_eq!(end.get(Category::Temporary).bytes, LOSS);
        assert_eq!(end.get(Category::OptimizerState).bytes, 2 * STATE);
        let oom = &r.ooms[0];
        let allocated = oom
            .waterfall
            .terms
            .iter()
            .find(|t| t.name == "allocated")
            .unwrap();
        let activations = allocated
            .categories
            .iter()
            .find(|p| p.name == "activations")
            .map(|p| p.bytes);
        assert_eq!(activations, Some(ACT1 + ACT2));
    }
}

/// A closure optimizer (LBFGS): the step phase holds two closures, each a
/// forward, a `zero_grad` and a backward, with the optimizer's own state made
/// between them at the first step; the batch is made once, before the loop.
fn closure_optimizer_run(tagged: bool) -> Vec<u8> {
    let mut b = if tagged {
        TraceBuilder::tagged()
    } else {
        TraceBuilder::new()
    };
    let lbfgs = "/venv/site-packages/torch/optim/lbfgs.py";
    let init = b.stack(&[
        (
            "_apply",
            "/venv/site-packages/torch/nn/modules/module.py",
            900,
        ),
        ("main", "train.py", 10),
    ]);
    let data = b.site("main", "train.py", 30);
    let fwd = |b: &mut TraceBuilder, line: u32| {
        b.stack(&[
            ("forward", "model.py", line),
            ("closure", "train.py", 40),
            ("step", lbfgs, 300),
            ("main", "train.py", 50),
        ])
    };
    let act1 = fwd(&mut b, 20);
    let act2 = fwd(&mut b, 21);
    let loss = fwd(&mut b, 23);
    let node = b.stack(&[("MmBackward0", "", 0)]);
    let node_tmp = b.stack(&[("AddmmBackward0", "", 0)]);
    let history = b.stack(&[("step", lbfgs, 380), ("main", "train.py", 50)]);
    let step = "Optimizer.step#LBFGS.step";
    b.segment(0, 1 << 30);
    b.alloc(0x1000, PARAM, PARAM, init);
    if tagged {
        b.tag(0x1000, Category::Parameter);
    }
    b.alloc(0x8000, BATCH, BATCH, data);
    let mut grad: Option<u64> = None;
    for it in 0..3u64 {
        b.begin(step);
        for closure in 0..2u64 {
            let base = 0x10_0000 * (2 * it + closure + 1);
            b.alloc(base + 0x1000, ACT1, ACT1, act1);
            b.alloc(base + 0x4000, ACT2, ACT2, act2);
            b.alloc(base + 0xa000, LOSS, LOSS, loss);
            if let Some(g) = grad.take() {
                b.free(g, GRAD); // zero_grad(set_to_none=True)
            }
            b.on_thread(1);
            b.alloc(base + 0x10000, GRAD, GRAD, node);
            grad = Some(base + 0x10000);
            b.alloc(base + 0x12000, GRAD_TMP, GRAD_TMP, node_tmp)
                .free(base + 0x12000, GRAD_TMP);
            b.free(base + 0x1000, ACT1).free(base + 0x4000, ACT2);
            b.on_thread(0);
            b.free(base + 0xa000, LOSS);
            if it == 0 && closure == 0 {
                b.alloc(0x2000, STATE, STATE, history)
                    .alloc(0x3000, STATE, STATE, history);
            }
        }
        b.end(step);
        if tagged {
            b.tag(grad.unwrap(), Category::Gradient);
            if it == 0 {
                b.tag(0x2000, Category::OptimizerState)
                    .tag(0x3000, Category::OptimizerState);
            }
        }
    }
    b.finish()
}

#[test]
fn a_closure_optimizers_activations_and_state_are_told_apart() {
    for tagged in [false, true] {
        let r = summarize(&closure_optimizer_run(tagged), Window::ALL);
        assert_eq!(
            bytes(&r.categories.at_allocated_peak),
            expected_at_peak(),
            "tagged {tagged}"
        );
        let end = &r.categories.at_end;
        assert_eq!(end.get(Category::Gradient).bytes, GRAD, "tagged {tagged}");
        assert_eq!(end.get(Category::OptimizerState).bytes, 2 * STATE);
        assert_eq!(end.get(Category::Parameter).bytes, PARAM);
        assert_eq!(end.get(Category::Other).bytes, BATCH);
        assert_eq!(end.get(Category::Activation).bytes, 0);
    }
}
