//! The workload's allocation sites: Python-like stacks, innermost first,
//! one per kind of tensor so that analyses can tell them apart. PyTorch's
//! frames lie where an installed torch has them (`site-packages/torch/`),
//! the program's (`train.py`, `model.py`) in its own directory, and an
//! autograd node is a frame of its name alone, as the observer records the
//! allocations of the autograd thread.

use crate::format::{StackId, TraceWriter};
use std::io::Write;

type F = (&'static str, &'static str, u32);

/// Where PyTorch's Python files lie in the program's environment.
macro_rules! torch {
    ($path:literal) => {
        concat!("/opt/venv/lib/python3.12/site-packages/torch/", $path)
    };
}

const CALL: [F; 2] = [
    ("_call_impl", torch!("nn/modules/module.py"), 1762),
    ("_wrapped_call_impl", torch!("nn/modules/module.py"), 1751),
];
const MAIN: [F; 2] = [("main", "train.py", 140), ("<module>", "train.py", 152)];
const TRAIN_STEP: F = ("train_step", "train.py", 88);
const LINEAR: F = ("forward", torch!("nn/modules/linear.py"), 125);

/// Stack ids of every site, interned once per trace.
#[derive(Clone, Copy)]
pub(crate) struct Sites {
    pub param_init: StackId,
    pub data_loader: StackId,
    pub data_free: StackId,
    pub embedding: StackId,
    pub norm: StackId,
    pub qkv: StackId,
    pub attn_scores: StackId,
    pub softmax: StackId,
    pub attn_out: StackId,
    pub mlp_up: StackId,
    pub gelu: StackId,
    pub mlp_down: StackId,
    pub head: StackId,
    pub loss: StackId,
    pub grad_head: StackId,
    pub grad_linear: StackId,
    pub grad_attention: StackId,
    pub grad_embedding: StackId,
    pub accumulate_grad: StackId,
    pub autograd_free: StackId,
    pub adam_init: StackId,
    pub adam_step: StackId,
    pub zero_grad: StackId,
    pub leak: StackId,
    pub empty_cache: StackId,
    pub oom_unwind: StackId,
}

/// A forward-pass stack: `inner` frames, then the modules from the innermost
/// (`module_lines`: the line in model.py of each enclosing module's forward)
/// out to the training step.
fn forward(inner: &[F], module_lines: &[u32]) -> Vec<F> {
    let mut frames = inner.to_vec();
    for &line in module_lines {
        frames.extend(CALL);
        frames.push(("forward", "model.py", line));
    }
    frames.extend(CALL);
    frames.push(TRAIN_STEP);
    frames.extend(MAIN);
    frames
}

/// A backward-pass stack: an autograd node (named alone) above
/// `loss.backward()`.
fn backward(function: &'static str) -> Vec<F> {
    let mut frames = vec![(function, "", 0)];
    frames.extend([
        ("_engine_run_backward", torch!("autograd/graph.py"), 825),
        ("backward", torch!("autograd/__init__.py"), 353),
        ("backward", torch!("_tensor.py"), 648),
        ("train_step", "train.py", 90),
    ]);
    frames.extend(MAIN);
    frames
}

fn outer(inner: &[F]) -> Vec<F> {
    let mut frames = inner.to_vec();
    frames.extend(MAIN);
    frames
}

impl Sites {
    pub fn intern<W: Write>(w: &mut TraceWriter<W>) -> Sites {
        let mut i = |frames: Vec<F>| w.intern_symbol_stack(frames);
        // Module nesting: Block.forward at model.py:71-73, Transformer.forward
        // at model.py:112-118.
        let attention = [72, 115];
        Sites {
            param_init: i(outer(&[
                ("__init__", torch!("nn/modules/linear.py"), 106),
                ("__init__", "model.py", 20),
                ("build_model", "train.py", 60),
            ])),
            data_loader: i(outer(&[
                ("pin_memory", torch!("utils/data/_utils/pin_memory.py"), 73),
                ("__next__", torch!("utils/data/dataloader.py"), 708),
                ("prefetch", "train.py", 70),
            ])),
            data_free: i(outer(&[("train_loop", "train.py", 99)])),
            embedding: i(forward(
                &[
                    ("embedding", torch!("nn/functional.py"), 2551),
                    ("forward", torch!("nn/modules/sparse.py"), 190),
                ],
                &[112],
            )),
            norm: i(forward(
                &[
                    ("layer_norm", torch!("nn/functional.py"), 2910),
                    ("forward", torch!("nn/modules/normalization.py"), 217),
                ],
                &[71, 115],
            )),
            qkv: i(forward(&[LINEAR], &[41, 72, 115])),
            attn_scores: i(forward(&[("forward", "model.py", 44)], &attention)),
            softmax: i(forward(
                &[
                    ("softmax", torch!("nn/functional.py"), 2140),
                    ("forward", "model.py", 45),
                ],
                &attention,
            )),
            attn_out: i(forward(&[LINEAR], &[48, 72, 115])),
            mlp_up: i(forward(&[LINEAR], &[58, 73, 115])),
            gelu: i(forward(
                &[("forward", torch!("nn/modules/activation.py"), 734)],
                &[59, 73, 115],
            )),
            mlp_down: i(forward(&[LINEAR], &[60, 73, 115])),
            head: i(forward(&[LINEAR], &[118])),
            loss: i(outer(&[
                ("cross_entropy", torch!("nn/functional.py"), 3494),
                ("train_step", "train.py", 89),
            ])),
            grad_head: i(backward("LogSoftmaxBackward0")),
            grad_linear: i(backward("AddmmBackward0")),
            grad_attention: i(backward("ScaledDotProductAttentionBackward0")),
            grad_embedding: i(backward("EmbeddingBackward0")),
            accumulate_grad: i(backward("AccumulateGrad")),
            autograd_free: i(backward("release_variables")),
            adam_init: i(outer(&[
                ("_init_group", torch!("optim/adam.py"), 167),
                ("step", torch!("optim/adam.py"), 223),
                ("wrapper", torch!("optim/optimizer.py"), 493),
                ("train_step", "train.py", 92),
            ])),
            adam_step: i(outer(&[
                ("_multi_tensor_adam", torch!("optim/adam.py"), 573),
                ("adam", torch!("optim/adam.py"), 840),
                ("step", torch!("optim/adam.py"), 247),
                ("wrapper", torch!("optim/optimizer.py"), 493),
                ("train_step", "train.py", 92),
            ])),
            zero_grad: i(outer(&[
                ("zero_grad", torch!("optim/optimizer.py"), 990),
                ("train_step", "train.py", 93),
            ])),
            leak: i(outer(&[
                ("log_metrics", "train.py", 120),
                ("train_step", "train.py", 95),
            ])),
            empty_cache: i(outer(&[
                ("empty_cache", torch!("cuda/memory.py"), 222),
                ("train_loop", "train.py", 101),
            ])),
            oom_unwind: i(outer(&[("train_loop", "train.py", 97)])),
        }
    }
}
