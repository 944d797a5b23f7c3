use super::*;
use crate::testing::TraceBuilder;

#[test]
fn a_site_within_a_width_keeps_the_users_line_first() {
    let site = "<module> (/work/probes/cnn.py:39) via forward (/venv/lib/python3.12/site-packages/torchvision/models/resnet.py:92)";
    assert_eq!(
        site_within(site, 100),
        "<module> (probes/cnn.py:39) via forward (torchvision/models/resnet.py:92)"
    );
    assert_eq!(
        site_within(site, 54),
        "<module> (probes/cnn.py:39) via forward (resnet.py:92)"
    );
    assert_eq!(
        site_within(site, 50),
        "<module> (cnn.py:39) via forward (resnet.py:92)"
    );
    // Short of room, a script's top level (`<module>`, which names
    // nothing) is its line, and the library frame keeps its function:
    // not `<module> (cnn.py:39) via …`.
    assert_eq!(site_within(site, 40), "cnn.py:39 via forward");
    assert_eq!(site_within(site, 15), "cnn.py:39 via …");
    assert_eq!(site_within(site, 14), "cnn.py:39");
    assert_eq!(site_within(site, 8), "…n.py:39");
    // A user's function keeps its name.
    let step = "train_step (/w/train.py:90) via forward (/v/site-packages/transformers/models/gpt2/modeling_gpt2.py:608)";
    assert_eq!(
        site_within(step, 40),
        "train_step (train.py:90) via forward"
    );
    assert_eq!(
        site_lines_within(site, 32),
        ["<module> (probes/cnn.py:39)", "via forward (resnet.py:92)"]
    );
    assert_eq!(
        site_within("forward (/a/b/c/model.py:41)", 20),
        "…rward (model.py:41)"
    );
    assert_eq!(cut_left("abcdef", 4), "…def");
    assert_eq!(cut_left("abc", 4), "abc");
}

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

/// A stack of `python -m vramtrace run train.py` calling into a library.
fn recorded_stack(b: &mut TraceBuilder) -> StackId {
    let venv = "/opt/venv/lib/python3.12/site-packages";
    b.stack(&[
        (
            "forward",
            &format!("{venv}/torch/nn/modules/linear.py"),
            125,
        ),
        (
            "forward",
            &format!("{venv}/transformers/models/gpt2/modeling_gpt2.py"),
            608,
        ),
        ("train_step", "/home/me/train.py", 90),
        ("<module>", "/home/me/train.py", 120),
        ("_run_code", "<frozen runpy>", 88),
        ("run_path", "<frozen runpy>", 287),
        ("main", &format!("{venv}/vramtrace/__main__.py"), 31),
        ("<module>", &format!("{venv}/vramtrace/__main__.py"), 36),
        (
            "start",
            "/home/me/checkout/python/vramtrace/_observer.py",
            40,
        ),
        ("_run_module_as_main", "/usr/lib/python3.12/runpy.py", 198),
    ])
}

#[test]
fn a_portable_name_is_the_same_from_any_folder() {
    let mut b = TraceBuilder::new();
    let torch = "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py";
    let here = b.stack(&[
        ("forward", torch, 125),
        ("step", "python/gpu/check.py", 159),
    ]);
    let there = b.stack(&[
        (
            "forward",
            "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py",
            125,
        ),
        ("step", "/home/me/repo/python/gpu/check.py", 159),
    ]);
    let other_line = b.stack(&[("forward", torch, 125), ("step", "check.py", 160)]);
    let no_file = b.stack(&[("MmBackward0", "", 0)]);
    let (_, symbols) = b.finish_symbols();
    let mut folder = SiteFolder::default();
    let (a, b, c, d) = (
        folder.site(here, &symbols),
        folder.site(there, &symbols),
        folder.site(other_line, &symbols),
        folder.site(no_file, &symbols),
    );
    assert_ne!(folder.name(a, &symbols), folder.name(b, &symbols));
    assert_eq!(folder.name(a, &symbols), "step (python/gpu/check.py:159)");
    assert_eq!(folder.portable_name(a, &symbols), "step (check.py:159)");
    assert_eq!(
        folder.portable_name(a, &symbols),
        folder.portable_name(b, &symbols)
    );
    assert_ne!(
        folder.portable_name(a, &symbols),
        folder.portable_name(c, &symbols)
    );
    assert_eq!(folder.portable_name(d, &symbols), folder.name(d, &symbols));
}

#[test]
fn the_recorders_own_frames_never_show() {
    let mut b = TraceBuilder::new();
    let stack = recorded_stack(&mut b);
    // A program of the user's in a folder that happens to be named so.
    let users = b.stack(&[("train", "/home/me/vramtrace/train.py", 5)]);
    let (_, symbols) = b.finish_symbols();
    let mut folder = SiteFolder::default();
    let site = folder.site(users, &symbols);
    assert_eq!(
        folder.name(site, &symbols),
        "train (/home/me/vramtrace/train.py:5)"
    );
    for full in [false, true] {
        let mut folder = SiteFolder::new(FoldRules::default(), full);
        let site = folder.site(stack, &symbols);
        let frames = folder.frames(site, &symbols, 10);
        assert!(
            frames
                .iter()
                .all(|f| !f.contains("vramtrace/") && !f.contains("runpy")),
            "{frames:?}"
        );
        assert_eq!(frames.last().unwrap(), "<module> (/home/me/train.py:120)");
    }
    // Replacement mode's native frames: the allocator's, the recorder's
    // and the C library's, above the user's.
    let mut b = TraceBuilder::new();
    let native = b.stack(&[
        (
            "vramtrace_allocator::allocator::CachingAllocator<D>::malloc",
            "allocator/src/allocator/mod.rs",
            300,
        ),
        (
            "vramtrace_recorder::recorder::Recorder<D>::malloc",
            "recorder/src/recorder/mod.rs",
            100,
        ),
        (
            "vramtrace_recorder_ffi::replace::vramtrace_malloc",
            "recorder-ffi/src/replace.rs",
            50,
        ),
        ("train_step", "/home/me/train.py", 90),
    ]);
    let (_, symbols) = b.finish_symbols();
    let mut folder = SiteFolder::new(FoldRules::default(), true);
    let site = folder.site(native, &symbols);
    let frames = folder.frames(site, &symbols, 10);
    assert_eq!(frames, vec!["train_step (/home/me/train.py:90)"]);
}

#[test]
fn a_site_in_library_code_is_attributed_to_the_users_line_first() {
    let mut b = TraceBuilder::new();
    let stack = recorded_stack(&mut b);
    let other_caller = b.stack(&[
        (
            "forward",
            "/opt/venv/lib/python3.12/site-packages/transformers/models/gpt2/modeling_gpt2.py",
            608,
        ),
        ("evaluate", "/home/me/train.py", 140),
    ]);
    let autograd = b.stack(&[("NllLossBackward0", "", 0)]);
    let (_, symbols) = b.finish_symbols();
    let mut folder = SiteFolder::default();
    let site = folder.site(stack, &symbols);
    assert_eq!(
        folder.name(site, &symbols),
        "train_step (/home/me/train.py:90) via forward (/opt/venv/lib/python3.12/site-packages/transformers/models/gpt2/modeling_gpt2.py:608)"
    );
    // The same library line reached from another line of the user's is
    // another site.
    let other = folder.site(other_caller, &symbols);
    assert_ne!(other, site);
    assert!(
        folder
            .name(other, &symbols)
            .starts_with("evaluate (/home/me/train.py:140) via")
    );
    // No user frame to name: the autograd node alone.
    let node = folder.site(autograd, &symbols);
    assert_eq!(folder.name(node, &symbols), "NllLossBackward0");

    let rules = FoldRules::default().attributing(Attribution::Innermost);
    let mut folder = SiteFolder::new(rules, false);
    let site = folder.site(stack, &symbols);
    assert_eq!(folder.site(other_caller, &symbols), site);
    assert_eq!(
        folder.name(site, &symbols),
        "forward (/opt/venv/lib/python3.12/site-packages/transformers/models/gpt2/modeling_gpt2.py:608)"
    );
}

#[test]
fn python_sites_keep_function_package_path_and_line() {
    assert_eq!(
        site_label(
            "forward (/opt/torch/.venv/lib/python3.12/site-packages/torchvision/models/resnet.py:97)"
        ),
        "forward (torchvision/models/resnet.py:97)"
    );
    assert_eq!(
        site_label("<module> (/work/probes/train.py:33)"),
        "<module> (probes/train.py:33)"
    );
    assert_eq!(site_label("step (optim.py:9)"), "step (optim.py:9)");
}

#[test]
fn cpp_sites_lose_namespaces_templates_and_parameters() {
    assert_eq!(
        site_label(
            "torch::autograd::generated::ConvolutionBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&) (??:0)"
        ),
        "ConvolutionBackward0::apply"
    );
    assert_eq!(
        site_label("c10::cuda::malloc(unsigned long)"),
        "cuda::malloc"
    );
    // GCC clones and the anonymous namespace.
    assert_eq!(
        site_label(
            "void at::native::(anonymous namespace)::launch_kernel<float>(at::TensorIterator&) [clone .isra.0] (Loss.cu:0)"
        ),
        "native::launch_kernel (Loss.cu)"
    );
    assert_eq!(
        site_label("at::Tensor::to(c10::TensorOptions) const [clone .cold]"),
        "Tensor::to"
    );
    assert_eq!(site_label("NllLossBackward0"), "NllLossBackward0");
}

#[test]
fn a_site_attributed_to_the_users_line_shows_it_first_both_shortened() {
    assert_eq!(
        site_label(
            "steps (/work/gpt2/train.py:31) via forward (/opt/venv/lib/python3.12/site-packages/transformers/activations.py:66)"
        ),
        "steps (gpt2/train.py:31) via forward (transformers/activations.py:66)"
    );
    assert_eq!(
        site_label("main (train.py:90) via AccumulateGrad"),
        "main (train.py:90) via AccumulateGrad"
    );
    assert_eq!(
        site_label("load (/usr/lib/python3.12/json/decoder.py:353)"),
        "load (json/decoder.py:353)"
    );
}

#[test]
fn a_list_of_patterns_compiled_as_one_matches_what_any_of_them_does() {
    let lists: [&[&str]; 6] = [
        DEFAULT_SKIP_FUNCTIONS,
        DEFAULT_SKIP_FILES,
        HIDDEN_FILES,
        HIDDEN_FUNCTIONS,
        LIBRARY_FILES,
        FALLBACK_SKIP,
    ];
    let names = [
        "",
        "??",
        "torch::unwind::unwind()",
        "void at::native::add_out(at::Tensor&)",
        "at::empty_strided",
        "PyObject_Call",
        "_PyEval_EvalFrameDefault",
        "_start",
        "_start_x",
        "std::function<void()>::operator()",
        "forward",
        "train_step",
        "<module>",
        "vramtrace_recorder_ffi::record",
        "/usr/lib/python3.12/site-packages/torch/nn/modules/module.py",
        "C:\\Python\\Lib\\site-packages\\torch\\nn\\functional.py",
        "/usr/lib64/python3.12/runpy.py",
        "<frozen runpy>",
        "<frozen importlib._bootstrap>",
        "/src/vramtrace/__main__.py",
        "/home/me/vramtrace/model.py",
        "/work/train.py",
        "kernel.cu",
        "aten/src/ATen/native/cuda/Blas.cpp",
    ];
    for list in lists {
        let one = compile(list);
        for name in names {
            let any = list.iter().any(|p| Regex::new(p).unwrap().is_match(name));
            assert_eq!(one.is_match(name), any, "{name:?} against {list:?}");
        }
    }
    // A pattern's own alternation stays inside it.
    let one = compile(&["^a|b$", "^c"]);
    assert!(one.is_match("ax") && one.is_match("xb") && one.is_match("cx"));
    assert!(!one.is_match("xa") && !one.is_match("bx") && !one.is_match("xc"));
}

#[test]
fn frames_sharing_a_file_are_classified_each_by_its_own_function() {
    let mut b = TraceBuilder::new();
    let torch = "/v/site-packages/torch/nn/modules/module.py";
    let stack = b.stack(&[
        ("at::native::empty_cuda", "/v/lib/libtorch.cpp", 0),
        ("_call_impl", torch, 1540),
        ("vramtrace_recorder::capture", "/v/lib/libtorch.cpp", 0),
        ("forward", "/v/site-packages/transformers/gpt2.py", 608),
        ("step", "/v/site-packages/transformers/gpt2.py", 90),
        ("train_step", "/w/train.py", 90),
        ("<module>", "/w/train.py", 128),
    ]);
    let (_, symbols) = b.finish_symbols();
    let rules = FoldRules::default();
    let mut folder = SiteFolder::default();
    // Twice: the second time from the file cache.
    for _ in 0..2 {
        for &frame in symbols.stack(stack) {
            let class = folder.class(&symbols, frame);
            assert_eq!(class, rules.classify(&symbols, frame));
            folder.class_cache.clear();
        }
    }
    let classes: Vec<_> = symbols
        .stack(stack)
        .iter()
        .map(|&f| folder.class(&symbols, f))
        .collect();
    let (skipped, hidden, library): (Vec<_>, Vec<_>, Vec<_>) = (
        classes.iter().map(|c| c.skipped).collect(),
        classes.iter().map(|c| c.hidden).collect(),
        classes.iter().map(|c| c.library).collect(),
    );
    assert_eq!(skipped, [true, true, true, false, false, false, false]);
    assert_eq!(hidden, [false, false, true, false, false, false, false]);
    assert_eq!(library, [true, true, true, true, true, false, false]);
}

/// The built-in patterns compiled on a thread of their own are the ones
/// folding uses: the thread sets them (folding does not have to), and a
/// second start while they are there or under way starts nothing new.
#[test]
fn built_in_patterns_compile_in_the_background() {
    compile_in_background();
    compile_in_background();
    let waited = std::time::Instant::now();
    while BUILT_IN.get().is_none() {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "the patterns were never compiled"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let rules = built_in();
    assert!(std::ptr::eq(rules, BUILT_IN.get().unwrap()));
    assert!(
        rules
            .functions
            .is_match("void at::native::copy_(at::Tensor&)")
    );
    assert!(!rules.functions.is_match("train_step"));
    assert!(
        rules
            .library_files
            .is_match("/usr/lib/python3.12/json/decoder.py")
    );
    assert!(
        rules
            .hidden_files
            .is_match("/venv/lib/vramtrace/__main__.py")
    );
    assert!(
        rules
            .fallback_preferred
            .is_match("torch::autograd::generated::MulBackward0::apply(")
    );
    assert!(!rules.fallback_skip.is_match("train_step"));
    compile_in_background();
    assert!(std::ptr::eq(rules, built_in()));
}
