//! Allocation sites: a stack folded to its most telling frame.
//!
//! A captured stack is mostly machinery: the recorder's and the allocator's
//! own frames, the framework's C++ and Python internals, the interpreter.
//! The site is the innermost frame that is none of these, so that the same
//! line of user code is one site however deep the framework's frames below
//! it are. Resolution happens once per stack id and is cached, so the hot
//! path is an array lookup.

use regex::Regex;
use serde::Serialize;
use vramtrace_format::{Frame, FrameId, StackId, SymbolTable};

/// A site's index in a [`SiteFolder`]; [`SiteId::UNKNOWN`] for allocations
/// without a captured stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct SiteId(pub u32);

impl SiteId {
    /// The site of allocations whose stack was not captured.
    pub const UNKNOWN: SiteId = SiteId(0);
}

/// Functions (C++ or Python) that belong to the machinery, not the user:
/// matched against the frame's function name.
pub const DEFAULT_SKIP_FUNCTIONS: &[&str] = &[
    r"^torch::unwind",
    r"CapturedTraceback",
    r"CUDACachingAllocator",
    // Namespaces of the framework's C++, with an optional return type
    // (`void at::native::...`).
    r"^([\w:<>,*&]+\s+)?(c10|at|torch|caffe2|pybind11)::",
    r"^THP",
    r"^_?Py[A-Z_]",
    r"^vramtrace_recorder::",
    r"^std::",
    r"^__libc_",
    r"^_start$",
    r"^__clone",
    r"^pthread_",
    r"^\?\?$",
    r"^$",
];

/// When every frame of a stack is machinery (the autograd engine's thread
/// runs backward without Python frames), the autograd node that allocated
/// names the site (`NllLossBackward0`)...
pub const FALLBACK_PREFERRED: &str = r"^torch::autograd::generated::\w+::apply\(";

/// ...or else the first frame that is none of these: the allocator, stack
/// capture, tensor creation and dispatch wrappers, the runtime.
pub const FALLBACK_SKIP: &[&str] = &[
    r"^torch::unwind",
    r"CapturedTraceback",
    r"gather_with_cpp",
    r"CUDACachingAllocator",
    r"^at::(detail::|native::)?empty",
    r"^c10::impl::",
    r"^at::_ops::",
    r"^_?Py[A-Z_]",
    r"^std::",
    r"^__libc_",
    r"^__clone",
    r"^pthread_",
    r"^_start$",
    r"^\?\?$",
    r"^$",
];

/// Source files of the machinery: matched against the frame's file name.
pub const DEFAULT_SKIP_FILES: &[&str] = &[
    r"[/\\](site|dist)-packages[/\\]torch[/\\]",
    r"^<frozen ",
    r"(^|[/\\])runpy\.py$",
    r"^\?\?$",
];

/// Which frames site folding skips.
#[derive(Clone, Debug)]
pub struct FoldRules {
    functions: Vec<Regex>,
    files: Vec<Regex>,
    extra: Vec<Regex>,
    fallback_preferred: Regex,
    fallback_skip: Vec<Regex>,
}

impl Default for FoldRules {
    fn default() -> Self {
        FoldRules {
            functions: compile(DEFAULT_SKIP_FUNCTIONS),
            files: compile(DEFAULT_SKIP_FILES),
            extra: Vec::new(),
            fallback_preferred: Regex::new(FALLBACK_PREFERRED).expect("valid pattern"),
            fallback_skip: compile(FALLBACK_SKIP),
        }
    }
}

fn compile(patterns: &[&str]) -> Vec<Regex> {
    patterns
        .iter()
        .map(|p| Regex::new(p).expect("built-in patterns are valid"))
        .collect()
}

/// A frame pattern that is not a regular expression.
#[derive(Clone, Debug, thiserror::Error)]
#[error("bad frame pattern '{pattern}': {source}")]
pub struct PatternError {
    /// The pattern as given.
    pub pattern: String,
    /// Why it does not compile.
    #[source]
    pub source: regex::Error,
}

impl FoldRules {
    /// The default rules plus user patterns, each matched against a frame's
    /// rendering `function (file:line)`.
    pub fn with_extra(patterns: &[String]) -> Result<Self, PatternError> {
        let mut rules = FoldRules::default();
        for p in patterns {
            rules
                .extra
                .push(Regex::new(p).map_err(|source| PatternError {
                    pattern: p.clone(),
                    source,
                })?);
        }
        Ok(rules)
    }

    /// The telling frame of a stack whose frames are all machinery: the
    /// autograd node, or the first frame past allocation and dispatch, or the
    /// innermost frame.
    pub fn fallback(&self, symbols: &SymbolTable, frames: &[FrameId]) -> usize {
        let function = |f: FrameId| match symbols.frame(f) {
            Some(Frame::Symbol { function, .. }) => symbols.string_or_unknown(*function),
            _ => "",
        };
        frames
            .iter()
            .position(|&f| self.fallback_preferred.is_match(function(f)))
            .or_else(|| {
                frames.iter().position(|&f| {
                    let name = function(f);
                    !self.fallback_skip.iter().any(|r| r.is_match(name))
                })
            })
            .unwrap_or(0)
    }

    /// Whether a frame is machinery that folding looks past.
    pub fn skips(&self, symbols: &SymbolTable, id: FrameId) -> bool {
        match symbols.frame(id) {
            Some(Frame::Symbol { function, file, .. }) => {
                let function = symbols.string_or_unknown(*function);
                let file = symbols.string_or_unknown(*file);
                self.functions.iter().any(|r| r.is_match(function))
                    || self.files.iter().any(|r| r.is_match(file))
                    || (!self.extra.is_empty() && {
                        let text = symbols.describe_frame(id);
                        self.extra.iter().any(|r| r.is_match(&text))
                    })
            }
            // Native frames carry no name to judge by; neither does a frame
            // of a kind this version does not know.
            _ => true,
        }
    }
}

/// What a site is: the frame it is named by and a stack it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteInfo {
    /// The telling frame; `None` for [`SiteId::UNKNOWN`] or a stack with no frames.
    pub frame: Option<FrameId>,
    /// The first stack seen for this site (all of them, with full stacks).
    pub stack: StackId,
    /// Position of `frame` in `stack` (innermost is 0).
    pub depth: usize,
}

/// Folds stacks to sites, caching the result per stack id.
#[derive(Clone, Debug)]
pub struct SiteFolder {
    rules: FoldRules,
    full_stacks: bool,
    by_stack: Vec<u32>,
    by_frame: rustc_hash::FxHashMap<FrameId, u32>,
    skip_cache: Vec<u8>,
    sites: Vec<SiteInfo>,
}

const UNRESOLVED: u32 = u32::MAX;

impl Default for SiteFolder {
    fn default() -> Self {
        SiteFolder::new(FoldRules::default(), false)
    }
}

impl SiteFolder {
    /// A folder with these rules; with `full_stacks`, every distinct stack is
    /// its own site instead of being merged by its telling frame.
    pub fn new(rules: FoldRules, full_stacks: bool) -> Self {
        SiteFolder {
            rules,
            full_stacks,
            by_stack: vec![SiteId::UNKNOWN.0],
            by_frame: Default::default(),
            skip_cache: Vec::new(),
            sites: vec![SiteInfo {
                frame: None,
                stack: StackId::NONE,
                depth: 0,
            }],
        }
    }

    /// Whether sites are whole stacks rather than folded frames.
    pub fn full_stacks(&self) -> bool {
        self.full_stacks
    }

    /// The site of a stack.
    #[inline]
    pub fn site(&mut self, stack: StackId, symbols: &SymbolTable) -> SiteId {
        match self.by_stack.get(stack.0 as usize) {
            Some(&s) if s != UNRESOLVED => SiteId(s),
            _ => self.resolve(stack, symbols),
        }
    }

    #[cold]
    fn resolve(&mut self, stack: StackId, symbols: &SymbolTable) -> SiteId {
        let frames = symbols.stack(stack);
        let site = if frames.is_empty() {
            SiteId::UNKNOWN
        } else {
            // A stack that is machinery through and through still gets a
            // name of its own rather than being lumped with the others.
            let depth = match frames.iter().position(|&f| !self.skip(symbols, f)) {
                Some(d) => d,
                None => self.rules.fallback(symbols, frames),
            };
            let frame = frames[depth];
            let existing = if self.full_stacks {
                None
            } else {
                self.by_frame.get(&frame).copied()
            };
            match existing {
                Some(s) => SiteId(s),
                None => {
                    let id = self.sites.len() as u32;
                    self.sites.push(SiteInfo {
                        frame: Some(frame),
                        stack,
                        depth,
                    });
                    if !self.full_stacks {
                        self.by_frame.insert(frame, id);
                    }
                    SiteId(id)
                }
            }
        };
        let i = stack.0 as usize;
        if i >= symbols.stack_count() {
            // An id the trace never defined (a damaged trace): not cached, so
            // a wild id cannot make the cache huge.
            return site;
        }
        if self.by_stack.len() <= i {
            self.by_stack.resize(i + 1, UNRESOLVED);
        }
        self.by_stack[i] = site.0;
        site
    }

    fn skip(&mut self, symbols: &SymbolTable, frame: FrameId) -> bool {
        let i = frame.0 as usize;
        if self.skip_cache.len() <= i {
            self.skip_cache.resize(i + 1, 0);
        }
        if self.skip_cache[i] == 0 {
            self.skip_cache[i] = if self.rules.skips(symbols, frame) {
                1
            } else {
                2
            };
        }
        self.skip_cache[i] == 1
    }

    /// The number of sites known so far, [`SiteId::UNKNOWN`] included.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// Whether no site but [`SiteId::UNKNOWN`] is known.
    pub fn is_empty(&self) -> bool {
        self.sites.len() <= 1
    }

    /// A site's definition.
    pub fn info(&self, site: SiteId) -> &SiteInfo {
        &self.sites[site.0 as usize]
    }

    /// A site's name: its telling frame as `function (file:line)`.
    pub fn name(&self, site: SiteId, symbols: &SymbolTable) -> String {
        match self.info(site).frame {
            Some(f) => symbols.describe_frame(f),
            None => "<no stack captured>".to_string(),
        }
    }

    /// The frames that describe a site, innermost first: the telling frame
    /// and up to `context` user frames that called it; with full stacks,
    /// every frame of the stack.
    pub fn frames(&self, site: SiteId, symbols: &SymbolTable, context: usize) -> Vec<String> {
        let info = self.info(site);
        let Some(frame) = info.frame else {
            return vec!["<no stack captured>".to_string()];
        };
        if self.full_stacks {
            return symbols
                .stack(info.stack)
                .iter()
                .map(|&f| symbols.describe_frame(f))
                .collect();
        }
        let mut out = vec![symbols.describe_frame(frame)];
        out.extend(
            symbols
                .stack(info.stack)
                .iter()
                .skip(info.depth + 1)
                .filter(|&&f| !self.rules.skips(symbols, f))
                .take(context)
                .map(|&f| symbols.describe_frame(f)),
        );
        out
    }

    /// A site rendered for reports.
    pub fn describe(&self, site: SiteId, symbols: &SymbolTable) -> SiteDescription {
        SiteDescription {
            site: self.name(site, symbols),
            frames: self.frames(site, symbols, 4),
        }
    }
}

/// A site as reports show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteDescription {
    /// The telling frame, `function (file:line)`.
    pub site: String,
    /// The telling frame and its callers (the whole stack with `--full-stacks`).
    pub frames: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TraceBuilder;

    #[test]
    fn folds_past_torch_like_frames() {
        let mut b = TraceBuilder::new();
        let stack = b.stack(&[
            ("torch::unwind::unwind()", "", 0),
            ("torch::CapturedTraceback::gather(bool, bool, bool)", "", 0),
            (
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
                "",
                0,
            ),
            ("at::native::empty_cuda", "", 0),
            ("??", "??", 0),
            ("_PyEval_EvalFrameDefault", "", 0),
            (
                "forward",
                "/usr/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                125,
            ),
            ("forward", "model.py", 41),
            ("train_step", "train.py", 20),
            ("<module>", "<frozen runpy>", 88),
        ]);
        let bare = b.stack(&[("torch::unwind::unwind()", "", 0)]);
        // A backward allocation on the autograd thread (PyTorch 2.11).
        let backward = b.stack(&[
            ("torch::unwind::unwind()", "??", 0),
            ("torch::CapturedTraceback::gather(bool, bool, bool)", "??", 0),
            ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long)", "CUDACachingAllocator.cpp", 0),
            ("at::detail::empty_strided_cuda(c10::ArrayRef<long>)", "??", 0),
            ("at::native::nll_loss_backward_out_cuda(at::Tensor const&)", "??", 0),
            ("c10::impl::wrap_kernel_functor_unboxed_<...>::call(...)", "RegisterCUDA_0.cpp", 0),
            ("at::_ops::nll_loss_backward::call(at::Tensor const&)", "??", 0),
            ("torch::autograd::generated::NllLossBackward0::apply(std::vector<at::Tensor>&&)", "??", 0),
            ("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "??", 0),
            ("std::error_code::default_error_condition() const", "??", 0),
            ("pthread_condattr_setpshared", "??", 0),
            ("__clone", "??", 0),
        ]);
        let runtime_tail = b.stack(&[
            ("torch::unwind::unwind()", "??", 0),
            (
                "at::native::nll_loss_backward_out_cuda(at::Tensor const&)",
                "??",
                0,
            ),
            ("Py_RunMain", "??", 0),
            ("__libc_init_first", "??", 0),
        ]);
        let (_, symbols) = b.finish_symbols();
        let mut folder = SiteFolder::default();
        let site = folder.site(stack, &symbols);
        assert_eq!(folder.name(site, &symbols), "forward (model.py:41)");
        assert_eq!(
            folder.frames(site, &symbols, 4),
            vec!["forward (model.py:41)", "train_step (train.py:20)"]
        );
        assert_eq!(folder.site(stack, &symbols), site);
        assert_eq!(folder.site(StackId::NONE, &symbols), SiteId::UNKNOWN);
        let bare_site = folder.site(bare, &symbols);
        // A frame with no file and no line is named by its function alone.
        assert_eq!(folder.name(bare_site, &symbols), "torch::unwind::unwind()");
        let site = folder.site(backward, &symbols);
        assert!(
            folder
                .name(site, &symbols)
                .starts_with("torch::autograd::generated::NllLossBackward0::apply(")
        );
        let site = folder.site(runtime_tail, &symbols);
        assert!(
            folder
                .name(site, &symbols)
                .starts_with("at::native::nll_loss_backward_out_cuda")
        );

        let rules = FoldRules::with_extra(&["model\\.py".to_string()]).unwrap();
        let mut folder = SiteFolder::new(rules, false);
        let site = folder.site(stack, &symbols);
        assert_eq!(folder.name(site, &symbols), "train_step (train.py:20)");
        assert!(FoldRules::with_extra(&["(".to_string()]).is_err());
    }
}
