//! Allocation sites: a stack folded to its most telling frame.
//!
//! A captured stack is mostly machinery: the recorder's and the allocator's
//! own frames, the framework's C++ and Python internals, the interpreter.
//! The site is the innermost frame that is none of these, so that the same
//! line of user code is one site however deep the framework's frames below
//! it are. When that frame is library code (a package under `site-packages`,
//! the standard library, C++), the site is attributed to the user's own
//! innermost line too, named first: `train_step (train.py:90) via forward
//! (transformers/.../modeling_gpt2.py:608)` ([`Attribution::User`]).
//! The recorder's own frames (the `vramtrace` package, `runpy`, which
//! `python -m vramtrace run` puts below the program) never show, in sites
//! or in whole stacks. Resolution happens once per stack id and is cached,
//! so the hot path is an array lookup.

use regex::Regex;
use serde::Serialize;
use std::sync::OnceLock;
use vramtrace_format::{Frame, FrameId, StackId, StringId, SymbolTable};

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
    r"^vramtrace_(recorder|allocator)::",
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
    r"^\?\?$",
];

/// Files of the recorder itself, whose frames never show: the `vramtrace`
/// package's modules (`python -m vramtrace run` calls the program from its
/// `__main__.py`; a user's own file in a folder named `vramtrace` is not
/// one of them) and `runpy`, which runs both.
pub const HIDDEN_FILES: &[&str] = &[
    r"(^|[/\\])vramtrace[/\\](__init__|__main__|analysis|_\w+)\.py$",
    r"(^|[/\\])runpy\.py$",
    r"^<frozen runpy>$",
];

/// Functions of the recorder itself (and of the allocator it runs in
/// replacement mode), whose frames never show.
pub const HIDDEN_FUNCTIONS: &[&str] = &[r"^vramtrace_(recorder(_ffi)?|allocator)::"];

/// Files of library code rather than the user's: installed packages, the
/// standard library, frozen modules, and native sources.
pub const LIBRARY_FILES: &[&str] = &[
    r"[/\\](site|dist)-packages[/\\]",
    r"[/\\]lib(64)?[/\\]python[0-9.]*[/\\]",
    r"^<frozen ",
    r"\.(c|cc|cpp|cxx|cu|cuh|h|hpp)$",
    r"^\?\?$",
    r"^$",
];

/// Whom a site in library code is attributed to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attribution {
    /// To the user's own innermost line as well, named first: one site per
    /// library line and user line.
    #[default]
    User,
    /// To the innermost telling frame alone, library code or not.
    Innermost,
}

/// Which frames site folding skips, hides and takes for library code, and
/// whom a site in library code is attributed to.
#[derive(Clone, Debug, Default)]
pub struct FoldRules {
    // The built-in patterns are the process's ([`BUILT_IN`]); only the
    // user's are each rule set's own.
    extra: Vec<Regex>,
    attribution: Attribution,
}

/// The built-in lists, each as one expression (see `compile`).
#[derive(Debug)]
struct BuiltIn {
    functions: Regex,
    files: Regex,
    hidden_functions: Regex,
    hidden_files: Regex,
    library_files: Regex,
    fallback_preferred: Regex,
    fallback_skip: Regex,
}

impl BuiltIn {
    fn compile() -> BuiltIn {
        BuiltIn {
            functions: compile(DEFAULT_SKIP_FUNCTIONS),
            files: compile(DEFAULT_SKIP_FILES),
            hidden_functions: compile(HIDDEN_FUNCTIONS),
            hidden_files: compile(HIDDEN_FILES),
            library_files: compile(LIBRARY_FILES),
            fallback_preferred: Regex::new(FALLBACK_PREFERRED).expect("valid pattern"),
            fallback_skip: compile(FALLBACK_SKIP),
        }
    }
}

/// The built-in patterns, compiled once for the process, when first asked
/// for: by the first stack folded, or beforehand on a thread of its own
/// ([`compile_in_background`]). Compiling them (the `\w` and `\s` classes
/// are Unicode's) costs 11 million instructions, as much as reading 10,000
/// snapshot entries: made while the input is read rather than before, it
/// leaves the critical path (issue #47).
static BUILT_IN: OnceLock<BuiltIn> = OnceLock::new();

/// The built-in patterns, compiled now unless they are (a compilation under
/// way on another thread is waited for).
fn built_in() -> &'static BuiltIn {
    BUILT_IN.get_or_init(BuiltIn::compile)
}

/// Starts compiling the built-in frame patterns on a thread of their own,
/// so that folding the first stack, usually long after (once the input is
/// read), finds them ready rather than waiting for them. Folding waits for
/// a compilation under way; without this call, it compiles them itself. A
/// thread that cannot start is no error: folding compiles them then.
pub fn compile_in_background() {
    if BUILT_IN.get().is_none() {
        let _ = std::thread::Builder::new()
            .name("frame patterns".into())
            .spawn(built_in);
    }
}

/// What a frame is to site folding, as [`FoldRules::classify`] finds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameClass {
    /// Machinery that folding looks past.
    pub skipped: bool,
    /// The recorder's own, never shown.
    pub hidden: bool,
    /// Library code rather than the user's.
    pub library: bool,
}

/// One expression matching what any of `patterns` matches: their
/// alternation, each in a group of its own (so that its `|` and flags stay
/// its own). A name is then scanned once rather than once per pattern: on a
/// snapshot of 2,500 frames, each frame's 30 matches one by one cost 5,000
/// instructions, a sixth of the replay's (issue #47).
fn compile(patterns: &[&str]) -> Regex {
    let alternation = patterns
        .iter()
        .map(|p| format!("(?:{p})"))
        .collect::<Vec<_>>()
        .join("|");
    Regex::new(&alternation).expect("built-in patterns are valid")
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

    /// The same rules, attributing sites in library code as `attribution`
    /// says.
    pub fn attributing(mut self, attribution: Attribution) -> Self {
        self.attribution = attribution;
        self
    }

    /// Whom sites in library code are attributed to.
    pub fn attribution(&self) -> Attribution {
        self.attribution
    }

    /// The telling frame of a stack whose frames are all machinery: the
    /// autograd node, or the first frame past allocation and dispatch, or the
    /// innermost frame.
    pub fn fallback(&self, symbols: &SymbolTable, frames: &[FrameId]) -> usize {
        let function = |f: FrameId| match symbols.frame(f) {
            Some(Frame::Symbol { function, .. }) => symbols.string_or_unknown(*function),
            _ => "",
        };
        let rules = built_in();
        frames
            .iter()
            .position(|&f| rules.fallback_preferred.is_match(function(f)))
            .or_else(|| {
                frames.iter().position(|&f| {
                    let name = function(f);
                    !rules.fallback_skip.is_match(name)
                })
            })
            .unwrap_or(0)
    }

    /// Whether a frame is machinery that folding looks past (the recorder's
    /// hidden frames included).
    pub fn skips(&self, symbols: &SymbolTable, id: FrameId) -> bool {
        self.classify(symbols, id).skipped
    }

    /// What a frame is: machinery, the recorder's own, library code.
    pub fn classify(&self, symbols: &SymbolTable, id: FrameId) -> FrameClass {
        self.classify_with(symbols, id, |_, file| self.file_class(file))
    }

    /// What a frame's file says of it by itself: whether it is machinery, the
    /// recorder's own, library code.
    fn file_class(&self, file: &str) -> FrameClass {
        let rules = built_in();
        FrameClass {
            skipped: rules.files.is_match(file),
            hidden: rules.hidden_files.is_match(file),
            library: rules.library_files.is_match(file),
        }
    }

    /// [`classify`](Self::classify), with what the frame's file says
    /// ([`file_class`](Self::file_class)) from `file_class` (which may
    /// remember it by the file's id: frames share files).
    fn classify_with(
        &self,
        symbols: &SymbolTable,
        id: FrameId,
        file_class: impl FnOnce(StringId, &str) -> FrameClass,
    ) -> FrameClass {
        match symbols.frame(id) {
            Some(Frame::Symbol { function, file, .. }) => {
                let by_file = file_class(*file, symbols.string_or_unknown(*file));
                let function = symbols.string_or_unknown(*function);
                let rules = built_in();
                let hidden = by_file.hidden || rules.hidden_functions.is_match(function);
                let skipped = hidden
                    || by_file.skipped
                    || rules.functions.is_match(function)
                    || (!self.extra.is_empty() && {
                        let text = symbols.describe_frame(id);
                        self.extra.iter().any(|r| r.is_match(&text))
                    });
                FrameClass {
                    skipped,
                    hidden,
                    library: by_file.library,
                }
            }
            // Native frames carry no name to judge by; neither does a frame
            // of a kind this version does not know.
            _ => FrameClass {
                skipped: true,
                hidden: false,
                library: true,
            },
        }
    }
}

/// What a site is: the frame it is named by and a stack it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteInfo {
    /// The telling frame; `None` for [`SiteId::UNKNOWN`] or a stack with no frames.
    pub frame: Option<FrameId>,
    /// The user's own innermost line beyond it, when the telling frame is
    /// library code and sites are attributed to the user ([`Attribution::User`]).
    pub user_frame: Option<FrameId>,
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
    by_frame: rustc_hash::FxHashMap<(FrameId, Option<FrameId>), u32>,
    class_cache: Vec<Option<FrameClass>>,
    /// What each file says of its frames ([`FoldRules::file_class`]), by
    /// string id: frames of the same file (its lines, its functions) ask
    /// once.
    file_cache: Vec<Option<FrameClass>>,
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
            class_cache: Vec::new(),
            file_cache: Vec::new(),
            sites: vec![SiteInfo {
                frame: None,
                user_frame: None,
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
            let depth = match frames.iter().position(|&f| !self.class(symbols, f).skipped) {
                Some(d) => d,
                None => self.rules.fallback(symbols, frames),
            };
            let frame = frames[depth];
            let user_frame = if self.rules.attribution == Attribution::User
                && self.class(symbols, frame).library
            {
                frames[depth + 1..].iter().copied().find(|&f| {
                    let c = self.class(symbols, f);
                    !c.skipped && !c.library
                })
            } else {
                None
            };
            let key = (frame, user_frame);
            let existing = if self.full_stacks {
                None
            } else {
                self.by_frame.get(&key).copied()
            };
            match existing {
                Some(s) => SiteId(s),
                None => {
                    let id = self.sites.len() as u32;
                    self.sites.push(SiteInfo {
                        frame: Some(frame),
                        user_frame,
                        stack,
                        depth,
                    });
                    if !self.full_stacks {
                        self.by_frame.insert(key, id);
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

    // Inlined: asked for each frame of each stack resolved (the walk to the
    // user's own frame passes every library frame), and nearly always
    // answered from the cache; the first sight of a frame is out of line.
    #[inline(always)]
    fn class(&mut self, symbols: &SymbolTable, frame: FrameId) -> FrameClass {
        match self.class_cache.get(frame.0 as usize) {
            Some(&Some(class)) => class,
            _ => self.first_class(symbols, frame),
        }
    }

    /// [`class`](Self::class) of a frame not asked about before.
    #[inline(never)]
    fn first_class(&mut self, symbols: &SymbolTable, frame: FrameId) -> FrameClass {
        let i = frame.0 as usize;
        if self.class_cache.len() <= i {
            self.class_cache.resize(i + 1, None);
        }
        let (rules, files) = (&self.rules, &mut self.file_cache);
        let class = rules.classify_with(symbols, frame, |id, file| {
            let j = id.0 as usize;
            // Only a table as large as the strings defined: a damaged
            // trace's wild id is not kept.
            if j >= symbols.string_count() {
                return rules.file_class(file);
            }
            if files.len() <= j {
                files.resize(j + 1, None);
            }
            *files[j].get_or_insert_with(|| rules.file_class(file))
        });
        self.class_cache[i] = Some(class);
        class
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

    /// A site's name: its telling frame as `function (file:line)`, after
    /// the user's own line when the site is attributed to it
    /// (`train_step (train.py:90) via forward (modeling_gpt2.py:608)`).
    pub fn name(&self, site: SiteId, symbols: &SymbolTable) -> String {
        let info = self.info(site);
        match (info.frame, info.user_frame) {
            (Some(f), Some(u)) => format!(
                "{}{VIA}{}",
                symbols.describe_frame(u),
                symbols.describe_frame(f)
            ),
            (Some(f), None) => symbols.describe_frame(f),
            (None, _) => NO_STACK.to_string(),
        }
    }

    /// A site's name as [`name`](Self::name) gives it, with each frame's
    /// file cut to its last component (`train_step (train.py:90)`): the
    /// same code recorded from another folder, or started by another path
    /// (`python train.py` against `python /home/me/train.py`), names its
    /// files by other paths, and runs of it must still line up.
    pub fn portable_name(&self, site: SiteId, symbols: &SymbolTable) -> String {
        let info = self.info(site);
        let frame = |f: FrameId| match symbols.frame(f) {
            Some(Frame::Symbol {
                function,
                file,
                line,
            }) if !symbols.string_or_unknown(*file).is_empty() => {
                let file = symbols.string_or_unknown(*file);
                let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
                format!("{} ({base}:{line})", symbols.string_or_unknown(*function))
            }
            _ => symbols.describe_frame(f),
        };
        match (info.frame, info.user_frame) {
            (Some(f), Some(u)) => format!("{}{VIA}{}", frame(u), frame(f)),
            (Some(f), None) => frame(f),
            (None, _) => NO_STACK.to_string(),
        }
    }

    /// The frames that describe a site, innermost first: the telling frame
    /// and up to `context` user frames that called it; with full stacks,
    /// every frame of the stack. The recorder's own frames are left out.
    pub fn frames(&self, site: SiteId, symbols: &SymbolTable, context: usize) -> Vec<String> {
        let info = self.info(site);
        let Some(frame) = info.frame else {
            return vec![NO_STACK.to_string()];
        };
        if self.full_stacks {
            return symbols
                .stack(info.stack)
                .iter()
                .filter(|&&f| !self.rules.classify(symbols, f).hidden)
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

    /// A stack's frames as reports show them, outermost first, without the
    /// recorder's own (hidden) frames; [`NO_STACK`] alone for a block that
    /// came with no stack.
    pub fn stack_frames(&self, stack: StackId, symbols: &SymbolTable) -> Vec<String> {
        let mut frames: Vec<String> = symbols
            .stack(stack)
            .iter()
            .rev()
            .filter(|&&f| !self.rules.classify(symbols, f).hidden)
            .map(|&f| symbols.describe_frame(f))
            .collect();
        if frames.is_empty() {
            frames.push(NO_STACK.to_string());
        }
        frames
    }

    /// A site rendered for reports.
    pub fn describe(&self, site: SiteId, symbols: &SymbolTable) -> SiteDescription {
        SiteDescription {
            site: self.name(site, symbols),
            frames: self.frames(site, symbols, 4),
        }
    }
}

/// What joins the user's line and the library frame in a site's name.
pub const VIA: &str = " via ";

/// The name of the site of allocations that came with no stack.
pub const NO_STACK: &str = "<no stack captured>";

/// A site as reports show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteDescription {
    /// The site's name: its telling frame, `function (file:line)`, after
    /// the user's own line when it is attributed to it (see [`SiteFolder::name`]).
    pub site: String,
    /// The telling frame and its callers (the whole stack with `--full-stacks`).
    pub frames: Vec<String>,
}

// Readable names.

/// Shortens a site `function (file:line)`: the file loses its directories up
/// to `site-packages/` (or all but its last two components), a C++ function
/// loses its namespaces, template and parameter lists and compiler clone
/// suffixes, and an unknown file (`??:0`) is dropped. A site attributed to
/// the user's line (`USER via LIBRARY`) has both parts shortened.
///
/// `forward (/opt/venv/lib/python3.12/site-packages/torchvision/models/resnet.py:97)`
/// becomes `forward (torchvision/models/resnet.py:97)`.
pub fn site_label(site: &str) -> String {
    if let Some((user, library)) = split_via(site) {
        return format!("{}{VIA}{}", frame_label(user), frame_label(library));
    }
    frame_label(site)
}

/// Text within `max` characters, cut from the left (the end of a site, its
/// file and line, tells most): `…rs/models/resnet.py:92)`.
pub fn cut_left(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let tail: String = text.chars().skip(n + 1 - max.max(1)).collect();
    format!("…{tail}")
}

/// A site's name within `max` characters, for a chart, on one line: the
/// first that fits of its name, its name with the library frame's file to
/// its name alone, the same of both frames, the user's line `via …`; else
/// the user's line cut from the left. The user's own line comes first.
///
/// `<module> (/work/probes/cnn.py:39) via forward (…/site-packages/torchvision/models/resnet.py:92)`
/// within 50 is `<module> (cnn.py:39) via forward (resnet.py:92)`.
pub fn site_within(site: &str, max: usize) -> String {
    let Some((user, library)) = split_via(site) else {
        return frame_within(site, max);
    };
    let (user_label, user_compact) = (frame_label(user), compact_frame(user));
    // A script's top level (`<module>`) names nothing: short of room, its
    // line (`train.py:19`) says where, and the library frame's function
    // what; `<module> (train.py:19) via …` said neither.
    let user_short = match split_site(&user_compact) {
        Some(("<module>", location)) => location.to_string(),
        _ => user_compact.clone(),
    };
    let library_function = match split_site(&compact_frame(library)) {
        Some((function, _)) => function.to_string(),
        None => compact_frame(library),
    };
    let library = compact_frame(library);
    [
        site_label(site),
        format!("{user_label}{VIA}{library}"),
        format!("{user_compact}{VIA}{library}"),
        format!("{user_short}{VIA}{library_function}"),
        format!("{user_short}{VIA}…"),
    ]
    .into_iter()
    .find(|name| name.chars().count() <= max)
    .unwrap_or_else(|| cut_left(&user_short, max))
}

/// A site's name for a chart's legend, as lines within `max` characters
/// each: its name when it fits; else the user's own line, and the library
/// frame after `via ` on a second line.
pub fn site_lines_within(site: &str, max: usize) -> Vec<String> {
    let whole = site_label(site);
    if whole.chars().count() <= max {
        return vec![whole];
    }
    match split_via(site) {
        Some((user, library)) => {
            let via = VIA.trim_start();
            vec![
                frame_within(user, max),
                format!(
                    "{via}{}",
                    frame_within(library, max.saturating_sub(via.len()))
                ),
            ]
        }
        None => vec![frame_within(site, max)],
    }
}

/// One frame within `max` characters: its [`frame_label`] if that fits,
/// else with its file to its name alone (`compact_frame`), cut from the
/// left if need be.
pub fn frame_within(frame: &str, max: usize) -> String {
    let label = frame_label(frame);
    if label.chars().count() <= max {
        return label;
    }
    cut_left(&compact_frame(frame), max)
}

/// A frame as [`frame_label`] shortens it, its file to its name alone:
/// `forward (resnet.py:92)`.
fn compact_frame(frame: &str) -> String {
    let label = frame_label(frame);
    match split_site(&label) {
        Some((function, location)) => {
            let file_and_line = location.rsplit('/').next().unwrap_or(location);
            format!("{function} ({file_and_line})")
        }
        None => label,
    }
}

/// A site's name split at [`VIA`] into the user's line and the library
/// frame, when it has both.
fn split_via(site: &str) -> Option<(&str, &str)> {
    let at = site.find(&format!("){VIA}"))?;
    Some((&site[..=at], &site[at + 1 + VIA.len()..]))
}

/// One frame `function (file:line)`, shortened (see [`site_label`]).
pub fn frame_label(frame: &str) -> String {
    let (function, location) = match split_site(frame) {
        Some(parts) => parts,
        None => return simplify_function(frame),
    };
    let function = simplify_function(function);
    let (file, line) = location.rsplit_once(':').unwrap_or((location, ""));
    if file.is_empty() || file == "??" {
        return function;
    }
    let file = shorten_path(file);
    if line.is_empty() || line == "0" {
        format!("{function} ({file})")
    } else {
        format!("{function} ({file}:{line})")
    }
}

/// Splits `function (location)` at the parenthesis that opens the location:
/// the last ` (` whose group runs to the end of the text.
fn split_site(site: &str) -> Option<(&str, &str)> {
    let inner = site.strip_suffix(')')?;
    let open = inner.rfind(" (")?;
    Some((&inner[..open], &inner[open + 2..]))
}

/// A file's path from its package: what follows `site-packages/`,
/// `dist-packages/` or the standard library's `lib/pythonX.Y/`; other paths
/// keep their last two components.
fn shorten_path(file: &str) -> String {
    for marker in ["site-packages/", "dist-packages/"] {
        if let Some(i) = file.rfind(marker) {
            return file[i + marker.len()..].to_string();
        }
    }
    let parts: Vec<&str> = file.split('/').filter(|p| !p.is_empty()).collect();
    let python_version = |p: &str| {
        p.strip_prefix("python")
            .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
    };
    if let Some(i) = parts.iter().rposition(|p| python_version(p))
        && i > 0
        && parts[i - 1].starts_with("lib")
        && i + 1 < parts.len()
    {
        return parts[i + 1..].join("/");
    }
    if parts.len() <= 2 {
        file.to_string()
    } else {
        parts[parts.len() - 2..].join("/")
    }
}

/// `torch::autograd::generated::ConvolutionBackward0::apply(std::vector<..>&&)`
/// becomes `ConvolutionBackward0::apply`; GCC's clone suffixes
/// (`[clone .isra.0]`, `[clone .cold]`) and the anonymous namespace go.
fn simplify_function(function: &str) -> String {
    let mut depth = 0usize;
    let mut plain = String::with_capacity(function.len());
    // Drop everything inside <...>, (...) and [...]: templates, parameters,
    // clone suffixes, ABI tags.
    for c in function.chars() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    // A qualifier after the parameters (`const`, `&&`) and a return type
    // before the name are not the name.
    let plain = plain.trim();
    let plain = plain
        .split(' ')
        .rfind(|w| !w.is_empty() && !matches!(*w, "const" | "volatile" | "&" | "&&" | "noexcept"))
        .unwrap_or(plain);
    let parts: Vec<&str> = plain.split("::").filter(|p| !p.is_empty()).collect();
    match parts.len() {
        0 => function.trim().to_string(),
        1 | 2 => parts.join("::"),
        n => parts[n - 2..].join("::"),
    }
}

#[cfg(test)]
mod tests;
