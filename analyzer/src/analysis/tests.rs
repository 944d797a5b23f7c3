use super::*;
use crate::progress::NoProgress;
use crate::testing::TraceBuilder;
use vramtrace_format::TraceReader;

struct Recorder(Vec<u64>, u64);

impl Analysis for Recorder {
    fn begin(&mut self, state: &ReplayState, _: &SymbolTable) {
        self.1 = state.totals().allocated;
    }
    fn event(&mut self, step: &Step<'_>, _: &ReplayState) -> Result<Flow, AnalysisError> {
        self.0.push(step.index);
        Ok(Flow::Continue)
    }
}

#[test]
fn windows_restrict_the_events_analyses_see() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.at(100).alloc(0, 10, 10, s);
    b.at(200).begin("phase").alloc(10, 10, 10, s).end("phase");
    b.at(300).alloc(20, 10, 10, s);
    let bytes = b.finish();
    let run = |window: Window| {
        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        let mut state = ReplayState::default();
        let mut rec = Recorder(Vec::new(), 0);
        let info = run_pass(
            &mut reader,
            &mut state,
            &mut [&mut rec],
            &window,
            &NoProgress,
        )
        .unwrap();
        (rec, info, state.totals().allocated)
    };
    let (rec, info, _) = run(Window::ALL);
    assert_eq!(rec.0, vec![0, 1, 2, 3, 4]);
    assert_eq!(info.duration_ns(), 200);
    assert!(info.complete);
    let (rec, info, allocated) = run(Window {
        from_ns: Some(150),
        to_ns: Some(250),
        ..Window::ALL
    });
    assert_eq!(rec.0, vec![1, 2, 3]);
    assert_eq!(rec.1, 10, "the state at the window's start");
    assert_eq!(allocated, 20, "the pass stops after the window");
    assert!(info.stopped_early);

    let spec = window::WindowSpec::parse(Some("phase"), Some("phase")).unwrap();
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    let w = spec.resolve(&mut reader).unwrap();
    assert_eq!((w.from_index, w.to_index), (Some(1), Some(3)));
    let (rec, _, _) = run(w);
    assert_eq!(rec.0, vec![1, 2, 3]);
    let spec = window::WindowSpec::parse(Some("nope"), None).unwrap();
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    assert!(matches!(
        spec.resolve(&mut reader),
        Err(window::WindowError::NoSuchPhase(name)) if name == "nope"
    ));
}

#[test]
fn phase_bounds_with_hash_match_every_number() {
    let mut b = TraceBuilder::new();
    b.begin("warmup").end("warmup");
    for i in 0..3 {
        let name = format!("step{i}");
        b.begin(&name).end(&name);
    }
    b.begin("eval").end("eval");
    let bytes = b.finish();
    let spec = window::WindowSpec::parse(Some("step#"), Some("step#")).unwrap();
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    let w = spec.resolve(&mut reader).unwrap();
    assert_eq!((w.from_index, w.to_index), (Some(2), Some(7)));
}
