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
    let w = spec.resolve(&mut reader, 0).unwrap();
    assert_eq!((w.from_index, w.to_index), (Some(1), Some(3)));
    let (rec, _, _) = run(w);
    assert_eq!(rec.0, vec![1, 2, 3]);
    let spec = window::WindowSpec::parse(Some("nope"), None).unwrap();
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    assert!(matches!(
        spec.resolve(&mut reader, 0),
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
    let w = spec.resolve(&mut reader, 0).unwrap();
    assert_eq!((w.from_index, w.to_index), (Some(2), Some(7)));
}

/// Counts events, and is done, or fails, after `limit` of them.
struct Limited {
    seen: u64,
    limit: u64,
    fail: bool,
    finished: bool,
}

impl Analysis for Limited {
    fn event(&mut self, _: &Step<'_>, _: &ReplayState) -> Result<Flow, AnalysisError> {
        self.seen += 1;
        match (self.seen >= self.limit, self.fail) {
            (false, _) => Ok(Flow::Continue),
            (true, false) => Ok(Flow::Done),
            (true, true) => Err(AnalysisError::Unsupported("too much".into())),
        }
    }
    fn finish(&mut self, _: &ReplayState, _: &SymbolTable) -> Result<(), AnalysisError> {
        self.finished = true;
        Ok(())
    }
}

fn limited(limit: u64, fail: bool) -> Limited {
    Limited {
        seen: 0,
        limit,
        fail,
        finished: false,
    }
}

#[test]
fn a_pass_ends_once_every_analysis_is_done_or_one_fails() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.segment(0, 1 << 20);
    for i in 0..100 {
        b.alloc(i * 512, 512, 512, s).free(i * 512, 512);
    }
    let bytes = b.finish();
    let pass = |analyses: &mut [&mut dyn Analysis]| {
        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        let mut state = ReplayState::default();
        run_pass(&mut reader, &mut state, analyses, &Window::ALL, &NoProgress)
    };
    // One analysis done after 10 events, another after 50: the pass stops
    // at the 50th, and the first saw no more than its 10.
    let (mut early, mut late) = (limited(10, false), limited(50, false));
    let info = pass(&mut [&mut early, &mut late]).unwrap();
    assert_eq!((early.seen, late.seen), (10, 50));
    assert_eq!(info.events_replayed, 50);
    assert!(info.stopped_early);
    assert!(early.finished && late.finished);
    // A failure ends the pass with the analysis's error.
    let mut failing = limited(7, true);
    let e = pass(&mut [&mut failing]).unwrap_err();
    assert!(
        matches!(e, PassError::Analysis(AnalysisError::Unsupported(_))),
        "{e}"
    );
    assert!(!failing.finished);
}

#[test]
fn a_report_of_an_unfinished_pass_is_an_error_not_zeros() {
    use crate::analysis::summary::Summary;
    assert_eq!(
        Summary::new(10).into_report().unwrap_err(),
        AnalysisError::NoResult("summary")
    );
    assert!(leaks::Leaks::new().into_report().is_err());
    assert!(fragmentation::Fragmentation::new(4).into_report().is_err());
}

#[test]
fn each_device_has_its_own_state_and_the_process_phases() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    b.segment(0x1000, 1 << 20).alloc(0x1000, 100, 100, s);
    b.begin("p");
    // Device 1 is first seen inside the phase, at an address device 0 holds.
    b.on_device(1)
        .segment(0x1000, 1 << 20)
        .alloc(0x1000, 50, 50, s);
    b.on_device(0).free(0x1000, 100);
    b.end("p");
    let (bytes, _) = b.finish_symbols();
    let run = |devices: Devices| {
        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        run_device_pass(
            &mut reader,
            ReplayState::default(),
            devices,
            |_| (Recorder(Vec::new(), 0),),
            &Window::ALL,
            &NoProgress,
        )
        .unwrap()
    };
    let apart = run(Devices::Apart);
    assert_eq!(apart.seen, [0, 1]);
    assert_eq!(apart.devices.len(), 2);
    let peaks: Vec<_> = (apart.devices.into_iter())
        .map(|d| {
            assert_eq!(d.state.inconsistency_total(), 0, "device {}", d.device);
            // Each device saw its own events and the process's phases.
            assert_eq!(d.analyses.0.0.len(), if d.device == 0 { 6 } else { 3 });
            (d.device, d.peaks.into_report(d.device).unwrap())
        })
        .collect();
    assert_eq!(peaks[0].1.peak_allocated.bytes, 100);
    assert_eq!(peaks[1].1.peak_allocated.bytes, 50);
    // Device 1's phases began before it was seen: its peak is in `p`.
    assert_eq!(peaks[1].1.peak_allocated.phase, "p");
    assert_eq!(peaks[1].1.peak_reserved.bytes, 1 << 20);

    let only = run(Devices::Only(1));
    assert_eq!(only.seen, [0, 1]);
    assert_eq!(only.devices.len(), 1);
    assert_eq!(only.devices[0].state.totals().allocated, 50);
    assert!(run(Devices::Only(7)).devices.is_empty());

    // Summed, as before: the second device's block lands on the first's.
    let together = run(Devices::Together);
    assert_eq!(together.devices.len(), 1);
    assert_eq!(
        together.devices[0]
            .state
            .inconsistency_count(crate::replay::InconsistencyKind::AllocOverLive),
        1
    );
}

#[test]
fn devices_past_the_bound_are_left_out_and_counted() {
    let mut b = TraceBuilder::new();
    let s = b.site("f", "a.py", 1);
    let devices = MAX_DEVICES + 3;
    for device in 0..devices {
        // Three events each (an allocation, a free request and its
        // completion): the devices past the bound leave out all three.
        b.on_device(device)
            .alloc(0x1000, 10, 10, s)
            .free(0x1000, 10);
    }
    // A device replayed still gets its later events.
    b.on_device(0).alloc(0x2000, 20, 20, s);
    let (bytes, _) = b.finish_symbols();
    let mut reader = TraceReader::new(&bytes[..]).unwrap();
    let passes = run_device_pass(
        &mut reader,
        ReplayState::default(),
        Devices::Apart,
        |_| (Recorder(Vec::new(), 0),),
        &Window::ALL,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(passes.devices.len(), MAX_DEVICES as usize);
    assert_eq!(passes.info.skipped_devices, 3);
    assert_eq!(passes.info.skipped_events, 9);
    assert_eq!(passes.devices[0].analyses.0.0.len(), 4);
    assert_eq!(passes.seen.len(), MAX_DEVICES as usize);
}
