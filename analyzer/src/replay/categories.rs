//! What blocks hold: parameters, buffers, gradients, optimizer state,
//! activations, temporaries, or other.
//!
//! A block's category is known **exactly** when the program said it (a
//! `tag` event: the recorder tags parameters, buffers, gradients and
//! optimizer state from PyTorch's own objects) and **inferred** otherwise,
//! from when the block was allocated and freed relative to the training
//! step. A tag, like an inference, holds for the block's whole life, from
//! its allocation: a recorder learns what a gradient is only after the
//! step that used it, and replay learns that a tensor was an activation
//! only when the backward pass frees it. So a block's category can change
//! after the block was counted somewhere (at a peak, in a chart's column):
//! each change is listed ([`ReplayState::recategorized`](super::ReplayState::recategorized))
//! for the event that made it, with the block's allocation, and an analysis
//! that keeps past moments moves the block's bytes in those moments that
//! came after its allocation ([`CategoryBytes::follow`]).
//!
//! # The inference
//!
//! A step is an optimizer step: a phase named `Optimizer.step#...` (PyTorch
//! opens one in every `Optimizer.step`, in snapshots and recordings alike)
//! or `optimizer`. What autograd does decides, not which phase holds a
//! block: Lightning and closure optimizers (LBFGS) run the forward and the
//! backward inside the step phase. A block is allocated in one of four
//! regions:
//!
//! | region | when |
//! |---|---|
//! | backward | by the autograd engine, inside a step or not: its thread, a backward node's frame, `loss.backward()`'s frames, a phase named `backward`; in a PyTorch snapshot, an allocation without frames in a run that has them (the engine's thread has no Python frames) |
//! | step | otherwise inside a step; or by the optimizer's code (`torch/optim/`), as if in one |
//! | forward | anywhere else between steps |
//! | initial | before the trace began (its initial state) |
//!
//! and is settled by what happens next:
//!
//! | born in | freed before the next step ends | alive when the next step ends |
//! |---|---|---|
//! | forward | by the autograd engine: **activation**; else **temporary** | **other** (inputs, outputs kept); born before the first step, alive after the second and of a gradient's size: **parameter** |
//! | backward | **temporary** | **gradient** when of a parameter's size (not the autograd thread's cuBLAS workspace) |
//! | step | by the autograd engine: **activation**; else (in the same step) **temporary** | **optimizer state**; **other** when born before the engine ran in a step that then ran it (a closure's kept outputs) |
//!
//! A block still open when the pass ends (a run stopped by an
//! out-of-memory error mid-iteration) takes the category its site's freed
//! blocks all had, when they agreed ([`Classifier::learned`]).
//!
//! Frames name some blocks outright: a module's `to()`, `cuda()`,
//! initializers and state-dict loads make parameters; DDP's gradient buckets (allocated by
//! `torch/nn/parallel/distributed.py` itself) and FSDP's reduce-scatter
//! buffers are gradients, FSDP's all-gather buffers (unsharded parameters)
//! are parameters. Buffers cannot be told from parameters without tags.
//! In a trace whose recorder tags (header metadata `categories = tags`),
//! parameters, buffers, gradients and optimizer state come from tags alone
//! (but for DDP's and FSDP's buffers, which PyTorch does not expose):
//! an untagged block that inference would call one of them is other.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use vramtrace_format::{Frame, FrameId, Header, StackId, StringId, SymbolTable};

pub use vramtrace_format::Category;

/// The number of categories.
pub const CATEGORIES: usize = Category::COUNT;

/// A block's category, and whether the program said it (`exact`) or replay
/// inferred it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Class {
    /// What the block holds.
    pub category: Category,
    /// Whether a tag said so.
    pub exact: bool,
}

impl Class {
    /// An inferred category.
    pub const fn inferred(category: Category) -> Class {
        Class {
            category,
            exact: false,
        }
    }

    /// A category the program said.
    pub const fn exact(category: Category) -> Class {
        Class {
            category,
            exact: true,
        }
    }
}

impl Default for Class {
    fn default() -> Self {
        Class::inferred(Category::Other)
    }
}

/// Bytes and blocks per category, and how many of the bytes are exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CategoryBytes {
    bytes: [u64; CATEGORIES],
    exact: [u64; CATEGORIES],
    blocks: [u64; CATEGORIES],
}

impl CategoryBytes {
    /// Counts a block of `size` bytes of `class`.
    #[inline]
    pub fn add(&mut self, class: Class, size: u64) {
        let c = class.category as usize;
        self.bytes[c] = self.bytes[c].saturating_add(size);
        self.blocks[c] += 1;
        if class.exact {
            self.exact[c] = self.exact[c].saturating_add(size);
        }
    }

    /// Stops counting a block of `size` bytes of `class`.
    #[inline]
    pub fn remove(&mut self, class: Class, size: u64) {
        let c = class.category as usize;
        self.bytes[c] = self.bytes[c].saturating_sub(size);
        self.blocks[c] = self.blocks[c].saturating_sub(1);
        if class.exact {
            self.exact[c] = self.exact[c].saturating_sub(size);
        }
    }

    /// Counts a block of `size` bytes as `to` rather than `from`.
    #[inline]
    pub fn shift(&mut self, from: Class, to: Class, size: u64) {
        self.remove(from, size);
        self.add(to, size);
    }

    /// Applies a recategorization to these counts if the block was counted
    /// in them: they are the counts after `replayed` events, and the block
    /// was live then if it was allocated by then.
    #[inline]
    pub fn follow(&mut self, replayed: u64, change: &Recategorized) {
        if change.born <= replayed {
            self.shift(change.from, change.to, change.size);
        }
    }

    /// Bytes of a category.
    pub fn bytes(&self, category: Category) -> u64 {
        self.bytes[category as usize]
    }

    /// The bytes of a category that tags accounted for.
    pub fn exact_bytes(&self, category: Category) -> u64 {
        self.exact[category as usize]
    }

    /// Blocks of a category.
    pub fn blocks(&self, category: Category) -> u64 {
        self.blocks[category as usize]
    }

    /// Bytes of every category.
    pub fn total(&self) -> u64 {
        self.bytes.iter().sum()
    }

    /// Bytes that tags accounted for, over every category.
    pub fn total_exact(&self) -> u64 {
        self.exact.iter().sum()
    }
}

/// The category with the most of `bytes` (indexed by category code; the
/// first of equals), if any has bytes.
pub fn dominant(bytes: &[u64; CATEGORIES]) -> Option<Category> {
    let (i, &most) = bytes
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))?;
    (most > 0).then(|| Category::ALL[i])
}

/// A block's category changed: what it was counted as since its allocation
/// (`from`), and what it is (`to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recategorized {
    /// The block's address.
    pub addr: u64,
    /// The events replayed when it was allocated (see `LiveAlloc::born`).
    pub born: u64,
    /// Its size.
    pub size: u64,
    /// Its site.
    pub site: crate::sites::SiteId,
    /// What it was counted as.
    pub from: Class,
    /// What it is.
    pub to: Class,
}

/// Where in a training step a block was allocated (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Region {
    /// Before the trace began.
    #[default]
    Initial,
    /// Between steps, not by the autograd engine.
    Forward,
    /// By the autograd engine.
    Backward,
    /// Inside an optimizer step's phase.
    Step,
    /// By the optimizer's code, outside any step phase.
    Optimizer,
}

/// What inference knows of a block's allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Birth {
    /// The region it was allocated in.
    pub region: Region,
    /// Steps begun before it was allocated.
    pub steps: u32,
    /// What its frames say it is, if anything.
    pub hint: Hint,
    /// Whether its category is settled: tagged, or inferred for good.
    pub settled: bool,
    /// Born in a step, outside the autograd engine, before the engine ran
    /// in that step: the step's forward when the step turns out to hold a
    /// backward (Lightning's `optimizer.step(closure)`, LBFGS), the
    /// optimizer's own work when it does not (a plain loop).
    pub before_backward: bool,
}

impl Birth {
    /// A block whose category is settled from the start (inference off).
    pub const fn settled() -> Birth {
        Birth {
            region: Region::Initial,
            steps: 0,
            hint: Hint::None,
            settled: true,
            before_backward: false,
        }
    }
}

/// A category the allocating frames name outright.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hint {
    /// Nothing.
    #[default]
    None,
    /// A module's `to()`/`cuda()`, an initializer, a state-dict load: a
    /// parameter (or a buffer), which a tagged run's tags say better.
    Parameter,
    /// FSDP's all-gather: an unsharded parameter, which no tag names.
    Unsharded,
    /// DDP's gradient buckets, FSDP's reduce-scatter: gradients.
    Gradient,
}

/// How a trace's categories are found: from the header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CategorySource {
    /// Inferred from lifetimes, phases and frames.
    #[default]
    Inferred,
    /// Parameters, buffers, gradients and optimizer state from the
    /// recorder's tags; activations and temporaries inferred.
    Tags,
}

/// What inference assumes of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CategoryOptions {
    /// Whether categories are told apart at all: a pass that shows none
    /// (fragmentation, a timeline by site) spares the inference its cost
    /// (every block is then other, but for tags).
    pub infer: bool,
    /// Where the categories come from.
    pub source: CategorySource,
    /// Frees carry the freeing thread's frames (PyTorch snapshots), so a
    /// free without frames is the autograd engine's.
    pub frees_have_stacks: bool,
}

impl Default for CategoryOptions {
    /// Everything inferred, nothing assumed of the trace.
    fn default() -> Self {
        CategoryOptions {
            infer: true,
            source: CategorySource::Inferred,
            frees_have_stacks: false,
        }
    }
}

impl CategoryOptions {
    /// What a trace's header says: `categories = tags` when its recorder
    /// tagged; `source = torch-snapshot` for PyTorch's frames on frees.
    pub fn of_header(header: &Header) -> CategoryOptions {
        let meta = |key: &str| header.metadata.get(key).map(String::as_str);
        CategoryOptions {
            infer: true,
            source: if meta("categories") == Some("tags") {
                CategorySource::Tags
            } else {
                CategorySource::Inferred
            },
            frees_have_stacks: meta("source") == Some("torch-snapshot"),
        }
    }
}

/// What a phase name says about the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PhaseRole {
    Step,
    Backward,
    None,
}

/// Whether a phase of this name is an optimizer step (`Optimizer.step#...`,
/// `optimizer`, ...).
pub fn is_step_phase(name: &str) -> bool {
    phase_role(name) == PhaseRole::Step
}

fn phase_role(name: &str) -> PhaseRole {
    let lower = name.to_ascii_lowercase();
    let lower = lower.trim();
    if lower.starts_with("optimizer.step")
        || matches!(
            lower,
            "optimizer" | "optimizer_step" | "optimizer-step" | "opt_step" | "optim_step"
        )
    {
        PhaseRole::Step
    } else if lower == "backward" || lower.ends_with("/backward") || lower == "loss.backward" {
        PhaseRole::Backward
    } else {
        PhaseRole::None
    }
}

/// A site whose freed blocks had different categories (see
/// `Classifier::learned`).
const DISAGREED: u8 = u8::MAX;

/// Stack hint bits, computed once per stack.
const COMPUTED: u8 = 1;
const BACKWARD: u8 = 1 << 1;
const OPTIMIZER: u8 = 1 << 2;
const PARAMETER: u8 = 1 << 3;
const GRADIENT: u8 = 1 << 4;
const NO_FRAMES: u8 = 1 << 5;
const UNSHARDED: u8 = 1 << 6;

/// Files whose code runs optimizers.
const OPTIMIZER_FILES: &[&str] = &[
    "torch/optim/",
    "bitsandbytes/optim/",
    "apex/optimizers/",
    "torchao/optim/",
];

// A frame's own bits: the stack bits above that it sets by itself (the low
// byte), and what the stack's fold needs to know of it.
const FRAME_COMPUTED: u16 = 1 << 8;
/// A frame of Python code (its file a `.py`).
const FRAME_PYTHON: u16 = 1 << 9;
/// DDP's own code, which allocates gradient buckets when it is the innermost
/// Python frame.
const FRAME_DDP: u16 = 1 << 10;

// What a frame's file says (the bits below), worked out once per file:
// frames share files (a file's lines, its functions), and the file's tests
// (a `contains` for each optimizer's folder, a dozen `ends_with`) were half
// of a frame's first sight.
const FILE_COMPUTED: u16 = 1;
/// An optimizer's code ([`OPTIMIZER_FILES`]).
const FILE_OPTIMIZER: u16 = 1 << 1;
/// Python code (a `.py`).
const FILE_PYTHON: u16 = 1 << 2;
/// DDP's own module.
const FILE_DDP: u16 = 1 << 3;
/// FSDP's package.
const FILE_FSDP: u16 = 1 << 4;
/// Where `backward` calls into the engine: `torch/_tensor.py`,
/// `torch/autograd/__init__.py`.
const FILE_BACKWARD: u16 = 1 << 5;
/// `torch/autograd/graph.py` (`_engine_run_backward`).
const FILE_GRAPH: u16 = 1 << 6;
/// `torch/nn/modules/module.py`.
const FILE_MODULE: u16 = 1 << 7;
/// Initializers and `Parameter` itself: every frame of theirs makes one.
const FILE_PARAMETERS: u16 = 1 << 8;
/// A module of `torch/nn/modules/`.
const FILE_NN_MODULES: u16 = 1 << 9;

/// What a frame's file says (the bits above), its `\`s read as `/`.
fn file_hints(file: &str) -> u16 {
    // Windows paths, with `/` for the patterns below (most have none: no
    // copy).
    let file = &*if file.contains('\\') {
        std::borrow::Cow::Owned(file.replace('\\', "/"))
    } else {
        std::borrow::Cow::Borrowed(file)
    };
    let mut hints = FILE_COMPUTED;
    let mut set = |bit: u16, yes: bool| {
        if yes {
            hints |= bit;
        }
    };
    set(
        FILE_OPTIMIZER,
        OPTIMIZER_FILES.iter().any(|f| file.contains(f)),
    );
    set(FILE_PYTHON, file.ends_with(".py"));
    set(FILE_DDP, file.ends_with("torch/nn/parallel/distributed.py"));
    set(FILE_FSDP, file.contains("torch/distributed/fsdp/"));
    set(
        FILE_BACKWARD,
        file.ends_with("torch/_tensor.py") || file.ends_with("torch/autograd/__init__.py"),
    );
    set(FILE_GRAPH, file.ends_with("torch/autograd/graph.py"));
    set(FILE_MODULE, file.ends_with("torch/nn/modules/module.py"));
    set(
        FILE_PARAMETERS,
        file.ends_with("torch/nn/init.py") || file.ends_with("torch/nn/parameter.py"),
    );
    set(FILE_NN_MODULES, file.contains("torch/nn/modules/"));
    hints
}

/// What a frame of `function` in a file with [`file_hints`] `file` says by
/// itself (the stack bits above, and the frame bits). Stacks share frames,
/// so this is worked out once per frame rather than once per frame of
/// every stack: on a snapshot of 6,000 stacks of 30 to 50 frames drawn from
/// 2,500, that was a quarter of the replay's instructions.
fn frame_hints(function: &str, file: u16) -> u16 {
    let mut hints = FRAME_COMPUTED;
    if backward_frame(function, file) {
        hints |= BACKWARD as u16;
    }
    if file & FILE_OPTIMIZER != 0 {
        hints |= OPTIMIZER as u16;
    }
    if parameter_frame(function, file) {
        hints |= PARAMETER as u16;
    }
    if file & FILE_PYTHON != 0 {
        hints |= FRAME_PYTHON;
        if file & FILE_DDP != 0 {
            hints |= FRAME_DDP;
        }
    }
    if file & FILE_FSDP != 0 {
        if function.contains("all_gather") {
            hints |= UNSHARDED as u16;
        } else if function.contains("reduce") {
            hints |= GRADIENT as u16;
        }
    }
    hints
}

/// Whether a stack is a convolution's: PyTorch's `conv*` modules and
/// functions, or their backward node. PyTorch's cuDNN convolution tries
/// its algorithms in turn, and one whose workspace cannot be allocated is
/// skipped for the next (`at::native::cudnn`'s plan loop catches the
/// out-of-memory error).
pub fn is_convolution_stack(stack: StackId, symbols: &SymbolTable) -> bool {
    symbols.stack(stack).iter().any(|&frame| {
        let Some(Frame::Symbol { function, file, .. }) = symbols.frame(frame) else {
            return false;
        };
        let function = symbols.string_or_unknown(*function);
        let file = symbols.string_or_unknown(*file).replace('\\', "/");
        file.ends_with("torch/nn/modules/conv.py")
            || function.contains("ConvolutionBackward")
            || function.contains("cudnn_convolution")
            || matches!(
                function,
                "conv1d" | "conv2d" | "conv3d" | "_conv_forward" | "convolution"
            )
    })
}

/// A frame of the autograd engine, or of a call into it.
#[cfg(test)]
fn is_backward_frame(function: &str, file: &str) -> bool {
    backward_frame(function, file_hints(file))
}

/// [`is_backward_frame`], with what the file says ([`file_hints`]).
fn backward_frame(function: &str, file: u16) -> bool {
    // Node names (`MmBackward0`, as the recorder labels the engine's
    // thread, or `torch::autograd::generated::MmBackward0::apply`).
    // Only a name that holds one of the words can be a node's: the split
    // into words is the costly part, on C++ names of 100 characters.
    let node = (function.contains("Backward") || function.contains("AccumulateGrad"))
        && function
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|word| {
                word.trim_end_matches(|c: char| c.is_ascii_digit())
                    .ends_with("Backward")
                    || word == "AccumulateGrad"
            });
    node || function.contains("autograd::Engine")
        || function.contains("evaluate_function")
        || (function == "backward" && file & FILE_BACKWARD != 0)
        || (function == "_engine_run_backward" && file & FILE_GRAPH != 0)
}

/// A frame that makes or loads a module's parameters and buffers.
#[cfg(test)]
fn is_parameter_frame(function: &str, file: &str) -> bool {
    parameter_frame(function, file_hints(file))
}

/// [`is_parameter_frame`], with what the file says ([`file_hints`]).
fn parameter_frame(function: &str, file: u16) -> bool {
    (file & FILE_MODULE != 0
        && matches!(
            function,
            "_apply"
                | "to"
                | "cuda"
                | "to_empty"
                | "register_parameter"
                | "register_buffer"
                | "_load_from_state_dict"
                | "load_state_dict"
        ))
        || file & FILE_PARAMETERS != 0
        || function == "reset_parameters"
        || (file & FILE_NN_MODULES != 0 && function == "__init__")
        || function == "set_module_tensor_to_device"
}

/// The inference's state: steps so far, the blocks waiting to be settled,
/// and what each stack's frames say. Owned by the replay (see the module
/// docs); the replay asks it what a block is born as and settles blocks at
/// the moments it names.
#[derive(Clone, Debug, Default)]
pub struct Classifier {
    options: CategoryOptions,
    /// Steps begun and ended; the depth of nested step phases.
    steps_begun: u32,
    steps_ended: u32,
    step_depth: u32,
    backward_depth: u32,
    /// Whether the autograd engine ran (allocated, freed, or a backward
    /// phase began) since the current (or last) step began.
    step_backward: bool,
    /// Steps that held a backward (see `step_backward`).
    steps_with_backward: u32,
    roles: FxHashMap<StringId, PhaseRole>,
    /// Hint bits by stack id (0: not computed yet).
    hints: Vec<u8>,
    /// A frame's own hint bits by frame id (0: not computed yet).
    frame_hints: Vec<u16>,
    /// What a file says ([`file_hints`]) by its string id (0: not computed
    /// yet).
    file_hints: Vec<u16>,
    /// Whether an allocation with frames was seen (then one without, in a
    /// snapshot, is the autograd engine's).
    saw_frames: bool,
    /// Blocks born since the last step ended, not settled: `(address, born)`,
    /// kept whole only once a step has ended
    /// ([`waiting_kept`](Self::waiting_kept)).
    pub(super) waiting: Vec<(u64, u64)>,
    /// Whether a step has ended in this state, so that `waiting` is kept
    /// whole. Before the first step's end, the blocks waiting for it are
    /// all the live blocks not settled (a block is settled for good once
    /// settled, and those of the initial state are settled at once): they
    /// are found then, in the live map, and the list is emptied rather
    /// than filtered when it passes its bound. A trace without steps (the
    /// 400k-entry snapshot) filtered it each time it passed twice the live
    /// blocks: 11 M instructions of its summary (issue #47).
    pub(super) waiting_kept: bool,
    /// Blocks born before the first step ended and alive when it ended,
    /// not known to be parameters yet: `(address, born)`.
    pub(super) setup: Vec<(u64, u64)>,
    /// Whether the gradients were counted against the parameters once
    /// they were known (see `ReplayState::settle_extra_gradients`).
    pub(super) gradients_counted: bool,
    /// How the forward pass's blocks freed before a step turned out.
    forward_activations: u64,
    forward_temporaries: u64,
    /// The allocation (event index + 1) of the first forward's first
    /// block that turned out to be an activation (`u64::MAX`: none yet).
    /// Parameters are made before the forward that uses them; a block of
    /// that forward that outlives the step is a library's cache (cuBLAS's
    /// workspace, 32 MiB on an H100 or H200, the size of many a weight).
    first_activation_born: u64,
    /// Requested sizes of the parameters and gradients known so far.
    parameter_sizes: FxHashSet<u64>,
    gradient_sizes: FxHashSet<u64>,
    /// What each site's freed blocks turned out to be, indexed by site id
    /// (dense, as the replay's tables by site are: one index per free
    /// rather than a hash): 0 nothing yet, a category's code plus 1 when
    /// every one of them was that, [`DISAGREED`] when they differed (see
    /// [`learned`](Self::learned)).
    learned: Vec<u8>,
}

impl Classifier {
    /// A classifier for a trace with these options.
    pub fn new(options: CategoryOptions) -> Self {
        Classifier {
            options,
            first_activation_born: u64::MAX,
            ..Classifier::default()
        }
    }

    /// A block allocated by event `born - 1` in the first forward (before
    /// any step) turned out to be an activation.
    pub fn first_forward_activation(&mut self, born: u64) {
        self.first_activation_born = self.first_activation_born.min(born);
    }

    /// The options it was made with.
    pub fn options(&self) -> CategoryOptions {
        self.options
    }

    /// The same phase-derived state (steps so far) and options, no blocks:
    /// for a device first seen mid-trace.
    pub fn fork(&self) -> Classifier {
        Classifier {
            options: self.options,
            steps_begun: self.steps_begun,
            steps_ended: self.steps_ended,
            step_depth: self.step_depth,
            backward_depth: self.backward_depth,
            step_backward: self.step_backward,
            steps_with_backward: self.steps_with_backward,
            roles: self.roles.clone(),
            ..Classifier::default()
        }
    }

    fn tagged(&self) -> bool {
        self.options.source == CategorySource::Tags
    }

    // Inlined: asked at every allocation and many frees, and nearly always
    // answered from the table; the first sight of a stack is out of line.
    #[inline(always)]
    fn hints(&mut self, stack: StackId, symbols: &SymbolTable) -> u8 {
        if stack == StackId::NONE {
            return COMPUTED | NO_FRAMES;
        }
        if let Some(&h) = self.hints.get(stack.0 as usize)
            && h != 0
        {
            return h;
        }
        self.first_hints(stack, symbols)
    }

    /// [`hints`](Self::hints) of a stack not asked about before.
    #[inline(never)]
    fn first_hints(&mut self, stack: StackId, symbols: &SymbolTable) -> u8 {
        let i = stack.0 as usize;
        let h = self.stack_hints(stack, symbols);
        // Stack ids are dense, but a hostile one may be huge: only a table
        // as large as the symbols defined.
        if i < symbols.stack_count() {
            if i >= self.hints.len() {
                self.hints.resize(i + 1, 0);
            }
            self.hints[i] = h;
        }
        h
    }

    /// What a stack's frames say (bits above), from each frame's own bits.
    fn stack_hints(&mut self, stack: StackId, symbols: &SymbolTable) -> u8 {
        let mut hints = COMPUTED;
        let frames = symbols.stack(stack);
        if frames.is_empty() {
            hints |= NO_FRAMES;
        }
        let mut all = 0;
        for &frame in frames {
            all |= self.frame_hints(frame, symbols);
        }
        hints |= all as u8;
        // DDP's own code (not the model's forward it calls) allocates its
        // gradient buckets: when it is the innermost Python frame. Looked
        // for only in a stack with a frame of DDP's (a test a frame in every
        // stack cost more than a tenth of a stack's first sight).
        if all & FRAME_DDP != 0 {
            let innermost_python = frames
                .iter()
                .map(|&frame| self.frame_hints(frame, symbols))
                .find(|f| f & FRAME_PYTHON != 0);
            if innermost_python.is_some_and(|f| f & FRAME_DDP != 0) {
                hints |= GRADIENT;
            }
        }
        hints
    }

    // Inlined: asked for every frame of every stack met, and nearly always
    // answered from the table (stacks share frames); out of line, its call
    // was half of a stack's first sight (issue #47).
    #[inline(always)]
    fn frame_hints(&mut self, frame: FrameId, symbols: &SymbolTable) -> u16 {
        if let Some(&h) = self.frame_hints.get(frame.0 as usize)
            && h != 0
        {
            return h;
        }
        self.first_frame_hints(frame, symbols)
    }

    /// [`frame_hints`](Self::frame_hints) of a frame not asked about before.
    #[inline(never)]
    fn first_frame_hints(&mut self, frame: FrameId, symbols: &SymbolTable) -> u16 {
        let i = frame.0 as usize;
        let h = match symbols.frame(frame) {
            Some(Frame::Symbol { function, file, .. }) => {
                let file = self.file_hints(*file, symbols);
                frame_hints(symbols.string_or_unknown(*function), file)
            }
            _ => FRAME_COMPUTED,
        };
        // As for stacks: only a table as large as the frames defined.
        if i < symbols.frame_count() {
            if i >= self.frame_hints.len() {
                self.frame_hints.resize(i + 1, 0);
            }
            self.frame_hints[i] = h;
        }
        h
    }

    /// [`file_hints`] of the file with string id `file`, worked out once.
    fn file_hints(&mut self, file: StringId, symbols: &SymbolTable) -> u16 {
        let j = file.0 as usize;
        if let Some(&h) = self.file_hints.get(j)
            && h != 0
        {
            return h;
        }
        let h = file_hints(symbols.string_or_unknown(file));
        // As for frames: only a table as large as the strings defined.
        if j < symbols.string_count() {
            if j >= self.file_hints.len() {
                self.file_hints.resize(j + 1, 0);
            }
            self.file_hints[j] = h;
        }
        h
    }

    /// What a block of `requested` bytes allocated now, by `thread` with
    /// `stack`, is born as: its birth and its first (provisional) class.
    #[inline]
    pub fn birth(
        &mut self,
        thread: u32,
        stack: StackId,
        requested: u64,
        symbols: &SymbolTable,
    ) -> (Birth, Class) {
        if !self.options.infer {
            return (Birth::settled(), Class::default());
        }
        let hints = self.hints(stack, symbols);
        let no_frames = hints & NO_FRAMES != 0;
        if !no_frames {
            self.saw_frames = true;
        }
        let by_engine = self.backward_depth > 0
            || thread != super::MAIN_THREAD
            || hints & BACKWARD != 0
            || (no_frames && self.options.frees_have_stacks && self.saw_frames);
        // What autograd does decides, not which phase holds the block: a
        // step phase may enclose the forward and backward too (Lightning
        // and closure optimizers run them inside `optimizer.step`), so the
        // engine's blocks are the backward's wherever they are made.
        let region = if self.step_depth > 0 && by_engine {
            self.step_backward = true;
            Region::Backward
        } else if self.step_depth > 0 {
            Region::Step
        } else if hints & OPTIMIZER != 0 {
            Region::Optimizer
        } else if by_engine {
            Region::Backward
        } else {
            Region::Forward
        };
        let before_backward = region == Region::Step && !self.step_backward;
        let hint = if hints & UNSHARDED != 0 {
            Hint::Unsharded
        } else if hints & PARAMETER != 0 {
            Hint::Parameter
        } else if hints & GRADIENT != 0 {
            Hint::Gradient
        } else {
            Hint::None
        };
        let birth = Birth {
            region,
            steps: self.steps_begun,
            hint,
            settled: false,
            before_backward,
        };
        if hint == Hint::Unsharded || (hint == Hint::Parameter && !self.tagged()) {
            // Named by its frames: settled at once.
            self.note(Category::Parameter, requested);
            let settled = Birth {
                settled: true,
                ..birth
            };
            return (settled, Class::inferred(Category::Parameter));
        }
        let provisional = match (hint, region) {
            (Hint::Gradient, _) => Category::Other,
            // What most blocks of the forward pass turned out to be so far
            // (activations when training, temporaries under no_grad): the
            // fewer changes to list when they are freed.
            (_, Region::Forward) if self.forward_temporaries > self.forward_activations => {
                Category::Temporary
            }
            (_, Region::Forward) => Category::Activation,
            (_, Region::Step) if before_backward && self.steps_with_backward > 0 => {
                Category::Activation
            }
            _ => Category::Temporary,
        };
        (birth, Class::inferred(provisional))
    }

    /// What a block of the initial state is: its frames alone can tell.
    pub fn initial(
        &mut self,
        stack: StackId,
        requested: u64,
        symbols: &SymbolTable,
    ) -> (Birth, Class) {
        if !self.options.infer {
            return (Birth::settled(), Class::default());
        }
        let hints = self.hints(stack, symbols);
        // DDP's and FSDP's own buffers are known by their frames alone; the
        // rest, in a tagged run, by tags.
        let category = if hints & UNSHARDED != 0 {
            Category::Parameter
        } else if hints & GRADIENT != 0 {
            Category::Gradient
        } else if self.tagged() {
            Category::Other
        } else if hints & PARAMETER != 0 {
            Category::Parameter
        } else if hints & OPTIMIZER != 0 {
            Category::OptimizerState
        } else {
            Category::Other
        };
        self.note(category, requested);
        let birth = Birth {
            region: Region::Initial,
            steps: 0,
            hint: Hint::None,
            settled: true,
            before_backward: false,
        };
        (birth, Class::inferred(category))
    }

    /// Remembers that a block of `requested` bytes is a parameter or a
    /// gradient: a parameter's gradient has its size (its dtype and shape),
    /// which tells gradients from other blocks the backward pass keeps
    /// (the autograd thread's cuBLAS workspace), and set-up blocks that
    /// are parameters from those that are not.
    pub fn note(&mut self, category: Category, requested: u64) {
        match category {
            Category::Parameter => {
                self.parameter_sizes.insert(requested);
            }
            Category::Gradient => {
                self.gradient_sizes.insert(requested);
            }
            _ => {}
        }
    }

    /// The category of a block of `requested` bytes freed now (by
    /// `thread`, with `stack`) that was not settled before.
    pub fn at_free(
        &mut self,
        birth: &Birth,
        requested: u64,
        thread: u32,
        stack: StackId,
        symbols: &SymbolTable,
    ) -> Category {
        // Whether the autograd engine freed it: asked only where it decides
        // something (a step under way, a forward or step block freed in its
        // own step), since the frames' hints cost a lookup a free.
        let survives = self.steps_begun > birth.steps
            && matches!(
                birth.region,
                Region::Forward | Region::Backward | Region::Optimizer
            );
        let decides = self.step_depth > 0
            || (!survives && matches!(birth.region, Region::Forward | Region::Step));
        let by_engine = decides
            && (self.backward_depth > 0 || thread != super::MAIN_THREAD || {
                let hints = self.hints(stack, symbols);
                hints & BACKWARD != 0
                    || (self.options.frees_have_stacks && self.saw_frames && hints & NO_FRAMES != 0)
            });
        if by_engine && self.step_depth > 0 {
            self.step_backward = true;
        }
        match birth.region {
            // Lived into a step without being settled at its end: freed
            // inside the step, or a set-up block freed before a second step.
            Region::Forward | Region::Backward | Region::Optimizer
                if self.steps_begun > birth.steps =>
            {
                self.survivor(birth, requested)
            }
            // Saved for the backward pass, which freed it: an activation,
            // whether a step phase held its forward (Lightning, LBFGS's
            // closure) or not.
            Region::Forward => {
                if by_engine {
                    self.forward_activations += 1;
                    Category::Activation
                } else {
                    self.forward_temporaries += 1;
                    Category::Temporary
                }
            }
            Region::Step if by_engine && self.steps_ended < birth.steps => {
                self.forward_activations += 1;
                Category::Activation
            }
            Region::Backward | Region::Optimizer => Category::Temporary,
            // Freed in the step it was born in (that step is the
            // `birth.steps`th begun).
            Region::Step if self.steps_ended < birth.steps => {
                if birth.before_backward && self.step_backward {
                    self.forward_temporaries += 1;
                }
                Category::Temporary
            }
            Region::Step => self.survivor(birth, requested),
            Region::Initial => Category::Other,
        }
    }

    /// Remembers what a freed block of `site` turned out to be, so that the
    /// blocks of the same site a run never freed (it stopped at an
    /// out-of-memory error, mid-iteration) read as the completed
    /// iterations' did.
    pub fn learn(&mut self, site: crate::sites::SiteId, category: Category) {
        if site == crate::sites::SiteId::UNKNOWN {
            return;
        }
        let i = site.0 as usize;
        if i >= self.learned.len() {
            self.learned.resize(i + 1, 0);
        }
        let code = category as u8 + 1;
        let seen = &mut self.learned[i];
        if *seen == 0 {
            *seen = code;
        } else if *seen != code {
            *seen = DISAGREED;
        }
    }

    /// What every freed block of `site` turned out to be, when they all
    /// agreed (activations, temporaries).
    pub fn learned(&self, site: crate::sites::SiteId) -> Option<Category> {
        match self.learned.get(site.0 as usize).copied() {
            Some(code) if code != 0 && code != DISAGREED => {
                Category::ALL.get(code as usize - 1).copied()
            }
            _ => None,
        }
    }

    /// The category of a block of `requested` bytes alive when the step
    /// after its birth ended (or at the trace's end), not tagged.
    pub fn survivor(&mut self, birth: &Birth, requested: u64) -> Category {
        let category = match (birth.hint, birth.region) {
            (Hint::Gradient, _) => Category::Gradient,
            (Hint::Parameter, _) if !self.tagged() => Category::Parameter,
            _ if self.tagged() => Category::Other,
            // The forward's outputs kept past a step that held its forward
            // and backward (a closure's loss), not the optimizer's.
            (_, Region::Step) if birth.before_backward && self.step_backward => Category::Other,
            (_, Region::Step | Region::Optimizer) => Category::OptimizerState,
            // A parameter's gradient has a parameter's size, when any
            // parameter is known.
            (_, Region::Backward)
                if self.parameter_sizes.is_empty() || self.parameter_sizes.contains(&requested) =>
            {
                Category::Gradient
            }
            _ => Category::Other,
        };
        self.note(category, requested);
        category
    }

    /// Whether a set-up block of `requested` bytes allocated by event
    /// `born - 1` (before the first step, alive after it) is a parameter:
    /// once it outlived the first step's inputs and outputs (a second step
    /// ended, or the trace did after one), when a gradient of its size was
    /// seen, and when it was allocated before the first forward's first
    /// activation.
    pub fn setup_is_parameter(&mut self, requested: u64, born: u64, at_end: bool) -> bool {
        let outlived = self.steps_ended >= 2 || (at_end && self.steps_ended >= 1);
        let is = outlived
            && !self.tagged()
            && born < self.first_activation_born
            && self.gradient_sizes.contains(&requested);
        if is {
            self.note(Category::Parameter, requested);
        }
        is
    }

    /// Whether set-up blocks can be decided now (see
    /// [`setup_is_parameter`](Self::setup_is_parameter)).
    pub fn setup_decidable(&self) -> bool {
        self.steps_ended >= 2
    }

    /// A phase instance began: returns whether a step began.
    pub fn phase_begin(&mut self, name: StringId, symbols: &SymbolTable) -> bool {
        match self.role(name, symbols) {
            PhaseRole::Step => {
                self.step_depth += 1;
                if self.step_depth == 1 {
                    self.steps_begun += 1;
                    self.step_backward = false;
                    return true;
                }
            }
            PhaseRole::Backward => {
                self.backward_depth += 1;
                if self.step_depth > 0 {
                    self.step_backward = true;
                }
            }
            PhaseRole::None => {}
        }
        false
    }

    /// A phase instance named `name` ended: returns whether a step ended.
    pub fn phase_end(&mut self, name: StringId, symbols: &SymbolTable) -> bool {
        match self.role(name, symbols) {
            PhaseRole::Step if self.step_depth > 0 => {
                self.step_depth -= 1;
                if self.step_depth == 0 {
                    self.steps_ended += 1;
                    if self.step_backward {
                        self.steps_with_backward += 1;
                    }
                    return true;
                }
            }
            PhaseRole::Backward => self.backward_depth = self.backward_depth.saturating_sub(1),
            _ => {}
        }
        false
    }

    fn role(&mut self, name: StringId, symbols: &SymbolTable) -> PhaseRole {
        *self
            .roles
            .entry(name)
            .or_insert_with(|| phase_role(symbols.string_or_unknown(name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_names() {
        assert_eq!(phase_role("Optimizer.step#AdamW.step"), PhaseRole::Step);
        assert_eq!(phase_role("optimizer"), PhaseRole::Step);
        assert_eq!(
            phase_role("Optimizer.zero_grad#AdamW.zero_grad"),
            PhaseRole::None
        );
        assert_eq!(phase_role("backward"), PhaseRole::Backward);
        assert_eq!(phase_role("train_step"), PhaseRole::None);
        assert_eq!(phase_role("step"), PhaseRole::None);
    }

    #[test]
    fn stack_hints_fold_each_frames_own_bits_in_order() {
        use vramtrace_format::TraceChannel;
        let mut ch = TraceChannel::new(Header::default());
        let frame = |ch: &mut TraceChannel, function: &str, file: &str| {
            let frame = Frame::Symbol {
                function: ch.intern_string(function),
                file: ch.intern_string(file),
                line: 1,
            };
            ch.intern_frame(frame)
        };
        let ddp = frame(&mut ch, "forward", "torch/nn/parallel/distributed.py");
        let model = frame(&mut ch, "forward", "model.py");
        let native = frame(&mut ch, "at::native::empty_cuda", "??");
        let engine = frame(&mut ch, "torch::autograd::Engine::evaluate_function", "??");
        let adam = frame(&mut ch, "step", "torch/optim/adamw.py");
        let windows = frame(&mut ch, "step", r"C:\venv\Lib\torch\optim\adamw.py");
        // DDP's frame gives a gradient only as the innermost Python frame, so
        // the same frames in another order say something else.
        let stacks = [
            ch.intern_stack(&[native, ddp, model]),
            ch.intern_stack(&[native, model, ddp]),
            ch.intern_stack(&[engine, adam]),
            ch.intern_stack(&[]),
            ch.intern_stack(&[windows]),
        ];
        let (_tx, rx) = ch.open(1);
        let symbols = rx.symbols();
        let mut c = Classifier::default();
        let hints: Vec<u8> = stacks.iter().map(|&s| c.hints(s, symbols)).collect();
        assert_eq!(hints[0], COMPUTED | GRADIENT);
        assert_eq!(hints[1], COMPUTED);
        assert_eq!(hints[2], COMPUTED | BACKWARD | OPTIMIZER);
        assert_eq!(hints[3], COMPUTED | NO_FRAMES);
        // A Windows path says what its `/` form does.
        assert_eq!(hints[4], COMPUTED | OPTIMIZER);
        // Each frame was worked out once, and a fresh classifier agrees.
        assert_eq!(c.frame_hints.len(), 6);
        let mut fresh = Classifier::default();
        for &s in stacks.iter().rev() {
            assert_eq!(
                fresh.hints(s, symbols),
                hints[stacks.iter().position(|&x| x == s).unwrap()]
            );
        }
    }

    /// What a file says is worked out once for all its frames, and each
    /// frame still says what its function adds: a module's `to()` makes a
    /// parameter, its `forward` does not; `backward` in PyTorch's own
    /// `_tensor.py` (a Windows path too) calls into the engine, elsewhere
    /// not.
    #[test]
    fn frames_of_one_file_share_what_it_says() {
        use vramtrace_format::TraceChannel;
        let mut ch = TraceChannel::new(Header::default());
        let mut frame = |function: &str, file: &str| {
            let frame = Frame::Symbol {
                function: ch.intern_string(function),
                file: ch.intern_string(file),
                line: 1,
            };
            let id = ch.intern_frame(frame);
            ch.intern_stack(&[id])
        };
        let module = "torch/nn/modules/module.py";
        let to = frame("to", module);
        let forward = frame("forward", module);
        let backward = frame("backward", "torch/_tensor.py");
        let windows = frame("backward", r"C:\venv\Lib\torch\_tensor.py");
        let other = frame("backward", "model.py");
        let (_tx, rx) = ch.open(1);
        let symbols = rx.symbols();
        let mut c = Classifier::default();
        assert_eq!(c.hints(to, symbols), COMPUTED | PARAMETER);
        assert_eq!(c.hints(forward, symbols), COMPUTED);
        assert_eq!(c.hints(backward, symbols), COMPUTED | BACKWARD);
        assert_eq!(c.hints(windows, symbols), COMPUTED | BACKWARD);
        assert_eq!(c.hints(other, symbols), COMPUTED);
        // Four files, each worked out once: `module.py` for both its frames.
        assert_eq!(c.file_hints.iter().filter(|&&h| h != 0).count(), 4);
        let module_bits = file_hints(module);
        assert_ne!(module_bits & FILE_MODULE, 0);
        assert_ne!(module_bits & FILE_NN_MODULES, 0);
        assert_ne!(module_bits & FILE_PYTHON, 0);
        assert_eq!(module_bits & (FILE_OPTIMIZER | FILE_BACKWARD), 0);
    }

    #[test]
    fn backward_frames() {
        assert!(is_backward_frame("MmBackward0", ""));
        assert!(is_backward_frame("torch::autograd::AccumulateGrad", ""));
        assert!(is_backward_frame(
            "torch::autograd::generated::NllLossBackward0::apply(std::vector<at::Tensor>&&)",
            "??"
        ));
        assert!(is_backward_frame(
            "backward",
            "/usr/lib/python3/site-packages/torch/_tensor.py"
        ));
        assert!(!is_backward_frame("forward", "model.py"));
        assert!(!is_backward_frame(
            "torch::autograd::VariableType::(anonymous namespace)::mm(at::Tensor const&)",
            "??"
        ));
        assert!(!is_backward_frame("backward_compat", "model.py"));
        // Holding a node's word is not being one.
        assert!(!is_backward_frame("MyBackwardHook::call", "??"));
        assert!(!is_backward_frame("AccumulateGrads", "??"));
        assert!(is_backward_frame("Backward", "??"));
        assert!(is_backward_frame("f(AccumulateGrad)", "??"));
    }

    #[test]
    fn parameter_frames() {
        assert!(is_parameter_frame(
            "_apply",
            "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py"
        ));
        assert!(!is_parameter_frame(
            "_call_impl",
            "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py"
        ));
        assert!(is_parameter_frame(
            "__init__",
            "site-packages/torch/nn/modules/linear.py"
        ));
        assert!(!is_parameter_frame("__init__", "model.py"));
    }

    #[test]
    fn a_site_is_learned_only_when_its_freed_blocks_agree() {
        use crate::sites::SiteId;
        let mut c = Classifier::default();
        c.learn(SiteId(3), Category::Activation);
        c.learn(SiteId(3), Category::Activation);
        c.learn(SiteId(5), Category::Temporary);
        c.learn(SiteId(5), Category::Other);
        c.learn(SiteId::UNKNOWN, Category::Activation);
        assert_eq!(c.learned(SiteId(3)), Some(Category::Activation));
        assert_eq!(c.learned(SiteId(5)), None, "they disagreed");
        assert_eq!(c.learned(SiteId(4)), None, "nothing freed");
        assert_eq!(c.learned(SiteId(9)), None, "past the table");
        assert_eq!(c.learned(SiteId::UNKNOWN), None, "no frames: no site");
    }

    #[test]
    fn counts_move_between_categories() {
        let mut c = CategoryBytes::default();
        c.add(Class::inferred(Category::Activation), 100);
        c.add(Class::exact(Category::Parameter), 50);
        assert_eq!(c.total(), 150);
        assert_eq!(c.total_exact(), 50);
        let change = Recategorized {
            addr: 0,
            born: 3,
            size: 100,
            site: crate::sites::SiteId(1),
            from: Class::inferred(Category::Activation),
            to: Class::exact(Category::Gradient),
        };
        let mut before = c;
        before.follow(2, &change);
        assert_eq!(
            before, c,
            "a moment before the block's allocation keeps its counts"
        );
        c.follow(3, &change);
        assert_eq!(c.bytes(Category::Activation), 0);
        assert_eq!(c.bytes(Category::Gradient), 100);
        assert_eq!(c.exact_bytes(Category::Gradient), 100);
        assert_eq!(c.blocks(Category::Gradient), 1);
        assert_eq!(c.total(), 150);
    }
}
