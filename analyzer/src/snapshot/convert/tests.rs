use super::*;

#[test]
fn log_round_trips() {
    let entries = [
        LogEntry {
            action: Action::Alloc,
            list: 3,
            time_us: Some(1_795_295_545_355_498),
            addr: 0x7f00_0000_0000,
            size: 512,
            stream: 0,
            stack: 7,
        },
        LogEntry {
            action: Action::Oom,
            list: 3,
            time_us: None,
            addr: u64::MAX,
            size: 1 << 40,
            stream: u64::MAX - 1,
            stack: 0,
        },
        LogEntry {
            action: Action::SegmentFree,
            list: 9,
            time_us: Some(1),
            addr: 0,
            size: 0,
            stream: 5,
            stack: u32::MAX,
        },
    ];
    let mut log = EventLog::default();
    for e in &entries {
        log.push(e);
    }
    assert_eq!(log.iter().collect::<Vec<_>>(), entries);
    assert_eq!(log.len(), 3);
    assert_eq!(log.runs.len(), 2);
    assert_eq!(log.run(&log.runs[1]).collect::<Vec<_>>(), &entries[2..]);
    assert_eq!(log.run(&log.runs[0]).collect::<Vec<_>>(), &entries[..2]);
}

// The collector with the direct decoder turned off.
struct Generic(Collector);
impl Hook for Generic {
    fn on_append(&mut self, h: &mut Heap, l: ObjId, i: ObjId) -> Attach {
        self.0.on_append(h, l, i)
    }
    fn on_set(&mut self, h: &mut Heap, d: ObjId, k: Val, v: ObjId) -> Attach {
        self.0.on_set(h, d, k, v)
    }
}

// What a pickle's collection leaves (all but list ids, which differ: the generic
// path recycles its dicts), read with the direct decoder or without it, and how
// many entries it read: logged, and read by the direct decoder. A parse error, as
// text, instead.
type Collected3 = (Seen, usize, u64);

// Everything `try_collect` compares.
type Seen = (
    Vec<LogEntry>,
    Vec<u64>,
    Vec<u32>,
    FxHashMap<StrId, u64>,
    (
        Vec<(u64, StrId)>,
        Vec<(u64, PoolId)>,
        ([u64; 4], FxHashMap<StrId, u64>, FxHashMap<StrId, u64>, u64),
        [u64; 3],
    ),
);

fn try_collect(bytes: &[u8], direct: bool) -> Result<Collected3, String> {
    let mode = if direct { Mode::Direct } else { Mode::Generic };
    try_collect_with(bytes, mode).map(|(collected, _)| collected)
}

// How `try_collect_with` reads entries.
#[derive(Clone, Copy)]
enum Mode {
    // The generic path only.
    Generic,
    // The direct decoder (`entry`), on the parser's thread.
    Direct,
    // The direct decoder, and the entries `ahead` read beforehand for the
    // shape the direct decoder learned.
    Prefilled,
    // The direct decoder, and the read-ahead thread at this pace.
    Ahead(Pace),
}

// `try_collect` in any `Mode`, with the entries taken from the read-ahead thread.
fn try_collect_with(bytes: &[u8], mode: Mode) -> Result<(Collected3, u64), String> {
    use crate::snapshot::pickle::Parser;
    let mut parser = Parser::over_bytes(bytes, &|_| {});
    let mut c = Collector::new(parser.heap_mut());
    let run = |parser: &mut Parser<'_, _>, c: Collector| -> Result<Collector, String> {
        match mode {
            Mode::Generic => {
                let mut g = Generic(c);
                parser.run(&mut g).map_err(|e| e.to_string())?;
                Ok(g.0)
            }
            Mode::Direct | Mode::Prefilled => {
                let mut c = c;
                parser.run(&mut c).map_err(|e| e.to_string())?;
                Ok(c)
            }
            Mode::Ahead(pace) => std::thread::scope(|scope| {
                let mut c = c;
                c.read_ahead(ReadAhead::start(scope, bytes, pace));
                parser.run(&mut c).map_err(|e| e.to_string())?;
                // Stopped before the scope waits for it.
                c.stop_reading_ahead();
                Ok(c)
            }),
        }
    };
    if let Mode::Prefilled = mode {
        c.read_ahead(ReadAhead::prefilled(bytes));
    }
    c = run(&mut parser, c)?;
    c.finish_parsing();
    let entries: Vec<_> = c.log.iter().map(|e| LogEntry { list: 0, ..e }).collect();
    let runs: Vec<_> = c.log.runs.iter().map(|r| r.len).collect();
    let direct = c.direct_entries;
    let mut metadata: Vec<_> = c.extras.metadata.into_iter().collect();
    metadata.sort();
    let mut pools: Vec<_> = c.extras.pools.into_iter().collect();
    pools.sort_by_key(|p| p.0);
    let u = &c.unread;
    let unread = (
        [
            u.compile_context,
            u.forward_frames,
            u.pool_unread,
            u.map_pools,
        ],
        u.internal.clone(),
        u.keys.clone(),
        u.unnamed_keys,
    );
    let logged = entries.len();
    let seen = (
        entries,
        runs,
        c.stacks.flat,
        c.action_counts,
        (
            metadata,
            pools,
            unread,
            [
                c.entries_without_time,
                c.entries_without_frames,
                c.entries_impossible,
            ],
        ),
    );
    Ok(((seen, logged, direct), c.ahead_entries))
}

// `try_collect` of a pickle that parses: what it leaves, how many entries it
// logged, how many the direct decoder read.
fn collect(bytes: &[u8], direct: bool) -> Collected3 {
    try_collect(bytes, direct).unwrap()
}

// The direct decoder (`entry::decode`) must log exactly what the generic path does.
#[test]
fn direct_decoding_matches_the_generic_path() {
    use std::io::Read;

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/torch");
    // The newer releases' fields (`pool_id`, metadata) too; their
    // fixtures are too small for the share of direct entries to mean much.
    for (name, small) in [
        ("synthetic/shared_p4.pickle", false),
        ("synthetic/shared_p5.pickle", false),
        ("synthetic/old_no_time_p2.pickle", false),
        ("mlp_expandable.pickle.xz", false),
        ("cnn_eval_accumulate.pickle.xz", false),
        ("synthetic/torch_2_12_p4.pickle", true),
        ("synthetic/torch_2_13_p4.pickle", true),
        ("synthetic/torch_2_15_p4.pickle", true),
        ("synthetic/annotate_p4.pickle", true),
    ] {
        let file = std::fs::File::open(dir.join(name)).unwrap();
        let (mut stream, _) = crate::input::decompress(file).unwrap();
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).unwrap();
        let (direct, logged, direct_entries) = collect(&bytes, true);
        let (generic, _, none) = collect(&bytes, false);
        assert!(logged > 0, "{name}");
        // Nearly all entries take the direct path (not those with new frames).
        assert!(small || direct_entries * 10 > logged as u64 * 9, "{name}");
        assert!(direct_entries > 0, "{name}");
        assert_eq!(none, 0);
        assert!(direct == generic, "{name}");
        // Entries read ahead are what the direct decoder reads, whether all
        // are there when the parser comes (prefilled) or the thread races it.
        let ((ahead, _, _), taken) = try_collect_with(&bytes, Mode::Prefilled).unwrap();
        assert!(ahead == generic, "{name}");
        // All but a few of a real snapshot's entries (the frames lists read
        // first, the entries around a FRAME opcode).
        let real = !name.starts_with("synthetic/");
        assert!(
            !real || taken * 10 > logged as u64 * 8,
            "{name}: {taken} of {logged}"
        );
        let ((racing, _, _), _) = try_collect_with(&bytes, Mode::Ahead(TINY_PACE)).unwrap();
        assert!(racing == generic, "{name}");
    }
    // A frame's memo slot overwritten between two frames lists of the same
    // bytes: the second names other frames, which the caches must see. With two
    // frames, and with twenty (40 bytes of references: found by their first
    // bytes, `FramesCache::by_prefix`).
    for frames in [2, 20] {
        let bytes = overwritten_frame_pickle(frames);
        let (direct, logged, direct_entries) = collect(&bytes, true);
        let (generic, _, _) = collect(&bytes, false);
        assert_eq!(direct_entries, 3);
        assert_eq!(logged, 4);
        assert!(direct == generic, "{frames} frames");
    }
    // Entries whose keys leave the learned shape (`entry::Shape`) in every way.
    let bytes = shape_pickle();
    let (direct, logged, direct_entries) = collect(&bytes, true);
    let (generic, _, _) = collect(&bytes, false);
    // All but the entry with an int key, the one whose first key is not `action`
    // (its list is not known yet: its entries are recorded at its APPENDS), and the
    // one before the BINPUT (the decoder takes no opcode after an entry but the
    // next entry's or the list's).
    assert_eq!(direct_entries, 15);
    assert_eq!(logged, 18);
    assert!(direct == generic);
}

// A pace for small pickles: chunks of a few entries, a few entries ahead.
const TINY_PACE: Pace = Pace {
    first_lead: 512,
    max_lead: 4096,
    max_ahead: 16 << 10,
    chunk: 1024,
};

// `{"device_traces": [[...]]}`, its entries' keys (memo references after their
// first use) in the same order, then in another, one with LONG_BINGET, with an
// extra key, with one missing, with an unknown one, with an int key, and with the
// memo slot of a key made to hold another key's str (BINPUT) before the last
// ones. Each entry's numbers differ, so a value taken for another field shows.
fn shape_pickle() -> Vec<u8> {
    use crate::snapshot::pickle::op;
    #[derive(Clone, Copy, PartialEq)]
    enum K {
        Short,
        Long,
    }
    struct P {
        b: Vec<u8>,
        memo: u32,
        keys: Vec<(&'static str, u32)>,
    }
    impl P {
        fn memoize(&mut self) -> u32 {
            self.b.push(op::MEMOIZE);
            self.memo += 1;
            self.memo - 1
        }
        fn str(&mut self, s: &str) -> u32 {
            self.b.extend([op::SHORT_BINUNICODE, s.len() as u8]);
            self.b.extend(s.as_bytes());
            self.memoize()
        }
        fn get(&mut self, idx: u32, k: K) {
            if k == K::Long {
                self.b.push(op::LONG_BINGET);
                self.b.extend(idx.to_le_bytes());
            } else {
                self.b.extend([op::BINGET, idx as u8]);
            }
        }
        fn key(&mut self, name: &'static str, k: K) {
            match self.keys.iter().find(|(s, _)| *s == name) {
                Some(&(_, idx)) => self.get(idx, k),
                None => {
                    let idx = self.str(name);
                    self.keys.push((name, idx));
                }
            }
        }
    }
    let mut p = P {
        b: vec![op::PROTO, 4, op::EMPTY_DICT],
        memo: 0,
        keys: Vec::new(),
    };
    p.memoize();
    p.b.push(op::MARK);
    p.str("device_traces");
    p.b.push(op::EMPTY_LIST);
    p.memoize();
    p.b.push(op::EMPTY_LIST);
    p.memoize();
    p.b.push(op::MARK);
    let alloc = p.str("alloc");
    p.b.push(op::POP);
    use K::{Long, Short};
    let usual: &[(&str, K)] = &[
        ("action", Short),
        ("addr", Short),
        ("size", Short),
        ("stream", Short),
        ("time_us", Short),
    ];
    let with = |extra: &[(&'static str, K)]| [usual, extra].concat();
    let entries: Vec<Vec<(&str, K)>> = vec![
        usual.to_vec(),
        usual.to_vec(),
        usual.to_vec(),
        // Another order.
        vec![
            ("action", Short),
            ("size", Short),
            ("addr", Short),
            ("stream", Short),
            ("time_us", Short),
        ],
        vec![
            ("action", Short),
            ("size", Short),
            ("addr", Short),
            ("stream", Short),
            ("time_us", Short),
        ],
        usual.to_vec(),
        // The same slot read back with LONG_BINGET.
        vec![
            ("action", Short),
            ("addr", Long),
            ("size", Short),
            ("stream", Short),
            ("time_us", Short),
        ],
        usual.to_vec(),
        // An extra key (a new str the first time), then a known one too.
        with(&[("user_metadata", Short)]),
        with(&[("user_metadata", Short)]),
        with(&[("user_metadata", Short), ("bogus", Short)]),
        with(&[("user_metadata", Short), ("bogus", Short)]),
        // A key missing.
        usual[..4].to_vec(),
        usual[..4].to_vec(),
        // An int key (the direct decoder gives up), then `action` not first.
        with(&[("int", Short)]),
        vec![
            ("addr", Short),
            ("action", Short),
            ("size", Short),
            ("stream", Short),
            ("time_us", Short),
        ],
        usual.to_vec(),
        // After `addr`'s slot was made to hold "size" (its bytes now name size).
        usual.to_vec(),
    ];
    for (n, keys) in entries.iter().enumerate() {
        let n = n as u8;
        if n == 17 {
            let addr = p.keys.iter().find(|k| k.0 == "addr").unwrap().1;
            p.b.extend([op::SHORT_BINUNICODE, 4]);
            p.b.extend(b"size");
            p.b.extend([op::BINPUT, addr as u8, op::POP]);
        }
        p.b.push(op::EMPTY_DICT);
        p.memoize();
        p.b.push(op::MARK);
        for &(key, k) in keys {
            if key == "int" {
                p.b.extend([op::BININT1, 7]);
            } else {
                p.key(key, k);
            }
            match key {
                "action" => p.get(alloc, Short),
                "addr" => p.b.extend([op::BININT2, 0, n + 1]),
                "size" => p.b.extend([op::BININT2, n + 1, 2]),
                "time_us" => p.b.extend([op::BININT2, n, 9]),
                "user_metadata" => {
                    p.str(if n.is_multiple_of(2) { "m" } else { "n" });
                }
                _ => p.b.extend([op::BININT1, n + 3]),
            }
        }
        p.b.push(op::SETITEMS);
    }
    p.b.extend([op::APPENDS, op::APPEND, op::SETITEMS, op::STOP]);
    p.b
}

// `{"device_traces": [[e1, e2, e3, e4]]}`, the entries' frames lists being
// `frames + 1` new frame dicts A, B, ..., Z (e1), then memo references to all
// but Z (e2, e3, e4: the same bytes), with A's slot made to hold Z (BINGET,
// BINPUT, POP) before e4.
fn overwritten_frame_pickle(frames: usize) -> Vec<u8> {
    use crate::snapshot::pickle::op;
    struct P(Vec<u8>, u32);
    impl P {
        fn memoize(&mut self) -> u32 {
            self.0.push(op::MEMOIZE);
            self.1 += 1;
            self.1 - 1
        }
        fn str(&mut self, s: &str) -> u32 {
            self.0.extend([op::SHORT_BINUNICODE, s.len() as u8]);
            self.0.extend(s.as_bytes());
            self.memoize()
        }
        fn get(&mut self, idx: u32) {
            self.0.extend([op::BINGET, idx as u8]);
        }
    }
    let mut p = P(vec![op::PROTO, 4, op::EMPTY_DICT], 0);
    p.memoize();
    p.0.push(op::MARK);
    p.str("device_traces");
    p.0.push(op::EMPTY_LIST);
    p.memoize();
    p.0.push(op::EMPTY_LIST);
    p.memoize();
    p.0.push(op::MARK);
    let mut keys: Vec<(&str, u32)> = Vec::new();
    let mut key = |p: &mut P, k: &'static str| match keys.iter().find(|(s, _)| *s == k) {
        Some(&(_, idx)) => p.get(idx),
        None => {
            let idx = p.str(k);
            keys.push((k, idx));
        }
    };
    let mut dicts = Vec::new();
    let mut alloc = 0;
    for entry in 0..4 {
        if entry == 3 {
            // A's slot holds Z from here on.
            p.get(dicts[frames]);
            p.0.extend([op::BINPUT, dicts[0] as u8, op::POP]);
        }
        p.0.push(op::EMPTY_DICT);
        p.memoize();
        p.0.push(op::MARK);
        key(&mut p, "action");
        if entry == 0 {
            alloc = p.str("alloc");
        } else {
            p.get(alloc);
        }
        key(&mut p, "addr");
        p.0.extend([op::BININT2, 0, entry as u8 + 1]);
        key(&mut p, "size");
        p.0.extend([op::BININT1, 64]);
        key(&mut p, "frames");
        p.0.push(op::EMPTY_LIST);
        p.memoize();
        p.0.push(op::MARK);
        if entry == 0 {
            for i in 0..=frames {
                p.0.push(op::EMPTY_DICT);
                dicts.push(p.memoize());
                p.0.push(op::MARK);
                key(&mut p, "name");
                p.str(&format!("f{i}"));
                key(&mut p, "filename");
                p.str("f.py");
                key(&mut p, "line");
                p.0.extend([op::BININT1, 1]);
                p.0.push(op::SETITEMS);
            }
        } else {
            for &dict in &dicts[..frames] {
                p.get(dict);
            }
        }
        p.0.extend([op::APPENDS, op::SETITEMS]);
    }
    p.0.extend([op::APPENDS, op::APPEND, op::SETITEMS, op::STOP]);
    p.0
}

// The number fields' rules (`EntryFields::set_int`), which the generic path
// (`set`) and the direct decoder share.
#[test]
fn number_fields_keep_their_range() {
    let heap = Heap::default();
    let set = |field: u8, v: Val| {
        let mut f = EntryFields::default();
        f.set(&heap, 0, field, v).unwrap();
        f
    };
    let int = |field: u8, i: i128| {
        let mut f = EntryFields::default();
        f.set_int(field, i);
        f
    };
    let max = u64::MAX as i128;
    for (i, addr, impossible) in [(0, 0, false), (max, u64::MAX, false), (max + 1, 0, true)] {
        for field in [F_ADDR, F_SIZE] {
            let f = int(field, i);
            assert_eq!((f.e.addr.max(f.e.size), f.impossible), (addr, impossible));
        }
    }
    assert!(set(F_ADDR, Val::Int(-1)).impossible);
    assert_eq!(set(F_SIZE, Val::Int(4096)).e.size, 4096);
    assert_eq!(set(F_STREAM, Val::Int(-1)).e.stream, u64::MAX);
    assert_eq!(int(F_STREAM, max + 2).e.stream, 1);
    let t = set(F_TIME, Val::Int(7));
    assert_eq!((t.e.time_us, t.impossible), (Some(7), false));
    for bad in [-1, i64::MAX as i128 + 1] {
        let t = int(F_TIME, bad);
        assert_eq!((t.e.time_us, t.impossible), (None, true), "{bad}");
    }
    // Not a number: read as absent, not as impossible.
    for field in [F_ADDR, F_SIZE, F_STREAM, F_TIME] {
        let f = set(field, Val::None);
        assert_eq!(format!("{f:?}"), format!("{:?}", EntryFields::default()));
    }
}

#[test]
fn stacks_intern_by_content() {
    let mut s = LocalStacks::new();
    assert_eq!(s.intern(&[]), 0);
    let a = s.intern(&[1, 2, 3]);
    assert_eq!(s.intern(&[1, 2, 3]), a);
    assert_ne!(s.intern(&[1, 2]), a);
    assert_eq!(s.get(a), &[1, 2, 3]);
    assert_eq!(s.len(), 3);
}

/// How a key of [`usual_pickle`]'s entries is written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum UKey {
    /// BINGET of the key's str (memoized up front), as CPython writes it.
    Short(&'static str),
    /// LONG_BINGET of the same slot.
    Long(&'static str),
    /// A fresh copy of the str (SHORT_BINUNICODE, MEMOIZE).
    New(&'static str),
}

/// How a value of [`usual_pickle`]'s entries is written.
#[derive(Clone, Debug, PartialEq)]
enum UVal {
    /// These opcodes as they are (ints, None, ...).
    Raw(Vec<u8>),
    /// BINGET of a str memoized up front.
    Ref(&'static str),
    /// LONG_BINGET of the same slot.
    LongRef(&'static str),
    /// A fresh str, then MEMOIZE (as CPython writes `compile_context`'s "N/A").
    New(&'static str),
    /// A fresh str, then BINPUT of the next slot (the same slot as MEMOIZE).
    NewPut(&'static str),
    /// A fresh str, with no memo store after it.
    NewBare(&'static str),
    /// A frames list (EMPTY_LIST, MEMOIZE) of memo references to these of the
    /// two frames memoized up front, in one MARK batch (none: no batch).
    Frames(Vec<u8>),
    /// A memo reference to the frames list written last.
    LastList,
    /// A memo reference to the frame dict (not a list) memoized up front.
    FrameDict,
}

/// One entry of [`usual_pickle`]: its keys and values, and a memo slot to
/// overwrite before it (the slot of that key's str made to hold another str,
/// which changes the memo's epoch).
#[derive(Clone, Debug, PartialEq)]
struct UEntry {
    items: Vec<(UKey, UVal)>,
    overwrite: Option<(&'static str, &'static str)>,
    /// Opcodes written after the entry (after its SETITEMS and any overwrite's
    /// undoing), e.g. to end the list's batch there.
    after: Vec<u8>,
}

/// The keys and values of a trace entry as PyTorch 2.x writes them
/// (`entry::USUAL`), `n` making its numbers differ from the other entries'.
fn usual_entry(n: u8) -> UEntry {
    UEntry {
        items: vec![
            (UKey::Short("action"), UVal::Ref("alloc")),
            (
                UKey::Short("addr"),
                UVal::Raw(vec![op_::LONG1, 6, n, 0, 0, 0, 0x7f, 0]),
            ),
            (UKey::Short("size"), UVal::Raw(vec![op_::BININT2, n, 2])),
            (UKey::Short("stream"), UVal::Raw(vec![op_::BININT1, 0])),
            (
                UKey::Short("time_us"),
                UVal::Raw(vec![op_::LONG1, 7, n, 1, 2, 3, 4, 5, 6]),
            ),
            (UKey::Short("compile_context"), UVal::New("N/A")),
            (UKey::Short("user_metadata"), UVal::Ref("")),
            (UKey::Short("frames"), UVal::Frames(vec![0, 1])),
        ],
        overwrite: None,
        after: Vec::new(),
    }
}

use crate::snapshot::pickle::op as op_;

/// `{"device_traces": [[e0, entries...]]}`: the keys, the actions, a few strs and
/// two frame dicts memoized up front (the frames in `e0`'s frames list, an entry
/// read the generic way), then `entries` as [`UEntry`] says, in one APPENDS batch.
fn usual_pickle(entries: &[UEntry]) -> Vec<u8> {
    use crate::snapshot::pickle::op;
    struct P {
        b: Vec<u8>,
        memo: u32,
        strs: Vec<(&'static str, u32)>,
    }
    impl P {
        fn memoize(&mut self) -> u32 {
            self.b.push(op::MEMOIZE);
            self.memo += 1;
            self.memo - 1
        }
        fn new_str(&mut self, s: &str) {
            self.b.extend([op::SHORT_BINUNICODE, s.len() as u8]);
            self.b.extend(s.as_bytes());
        }
        fn str(&mut self, s: &'static str) -> u32 {
            self.new_str(s);
            let idx = self.memoize();
            self.strs.push((s, idx));
            idx
        }
        fn get(&mut self, idx: u32, long: bool) {
            if long || idx > 255 {
                self.b.push(op::LONG_BINGET);
                self.b.extend(idx.to_le_bytes());
            } else {
                self.b.extend([op::BINGET, idx as u8]);
            }
        }
        fn slot(&self, s: &str) -> u32 {
            self.strs.iter().rev().find(|k| k.0 == s).unwrap().1
        }
    }
    let mut p = P {
        b: vec![op::PROTO, 4, op::EMPTY_DICT],
        memo: 0,
        strs: Vec::new(),
    };
    p.memoize();
    p.b.push(op::MARK);
    p.str("device_traces");
    p.b.push(op::EMPTY_LIST);
    p.memoize();
    p.b.push(op::EMPTY_LIST);
    p.memoize();
    p.b.push(op::MARK);
    // e0, read the generic way (its frame dicts are new): it memoizes every key
    // and str the entries refer to.
    p.b.push(op::EMPTY_DICT);
    p.memoize();
    p.b.push(op::MARK);
    for s in [
        "action",
        "addr",
        "size",
        "stream",
        "time_us",
        "compile_context",
        "user_metadata",
        "pool_id",
        "bogus",
        "name",
        "filename",
        "line",
    ] {
        p.str(s);
        p.b.push(op::NONE);
    }
    for s in ["free_requested", "", "meta", "N/A"] {
        p.str(s);
        p.b.push(op::NONE);
    }
    p.str("action");
    p.str("alloc");
    p.str("frames");
    p.b.push(op::EMPTY_LIST);
    let mut last_list = p.memoize();
    p.b.push(op::MARK);
    let mut frames = Vec::new();
    for i in 0..2 {
        p.b.push(op::EMPTY_DICT);
        frames.push(p.memoize());
        p.b.push(op::MARK);
        p.get(p.slot("name"), false);
        p.new_str(&format!("f{i}"));
        p.memoize();
        p.get(p.slot("filename"), false);
        p.new_str("f.py");
        p.memoize();
        p.get(p.slot("line"), false);
        p.b.extend([op::BININT1, i + 1, op::SETITEMS]);
    }
    p.b.extend([op::APPENDS, op::SETITEMS]);
    for e in entries {
        if let Some((key, other)) = e.overwrite {
            p.new_str(other);
            let slot = p.slot(key);
            p.b.push(op::LONG_BINPUT);
            p.b.extend(slot.to_le_bytes());
            p.b.push(op::POP);
        }
        p.b.push(op::EMPTY_DICT);
        p.memoize();
        p.b.push(op::MARK);
        for (key, value) in &e.items {
            match *key {
                UKey::Short(k) => p.get(p.slot(k), false),
                UKey::Long(k) => p.get(p.slot(k), true),
                UKey::New(k) => {
                    p.new_str(k);
                    p.memoize();
                }
            }
            match value {
                UVal::Raw(b) => p.b.extend(b),
                UVal::Ref(s) => p.get(p.slot(s), false),
                UVal::LongRef(s) => p.get(p.slot(s), true),
                UVal::New(s) => {
                    p.new_str(s);
                    p.memoize();
                }
                UVal::NewPut(s) => {
                    p.new_str(s);
                    let idx = p.memo;
                    p.memo += 1;
                    if idx < 256 {
                        p.b.extend([op::BINPUT, idx as u8]);
                    } else {
                        p.b.push(op::LONG_BINPUT);
                        p.b.extend(idx.to_le_bytes());
                    }
                }
                UVal::NewBare(s) => p.new_str(s),
                UVal::Frames(refs) => {
                    p.b.push(op::EMPTY_LIST);
                    last_list = p.memoize();
                    if !refs.is_empty() {
                        p.b.push(op::MARK);
                        for &r in refs {
                            p.get(frames[r as usize], false);
                        }
                        p.b.push(op::APPENDS);
                    }
                }
                UVal::LastList => p.get(last_list, false),
                UVal::FrameDict => p.get(frames[0], false),
            }
        }
        p.b.push(op::SETITEMS);
        if let Some((key, _)) = e.overwrite {
            // The key's str back in its slot (the epoch changes again).
            p.new_str(key);
            p.b.push(op::LONG_BINPUT);
            p.b.extend(p.slot(key).to_le_bytes());
            p.b.push(op::POP);
        }
        p.b.extend(&e.after);
    }
    p.b.extend([op::APPENDS, op::APPEND, op::SETITEMS, op::STOP]);
    p.b
}

// Every kind of deviation from the usual layout, at every key, between entries
// in it: the direct decoder's fast path (`entry::usual_keys`, `usual_value`)
// must give what the generic path gives, and take the usual entries itself.
#[test]
fn the_usual_layout_and_each_deviation_match_the_generic_path() {
    use UVal::*;
    let usual = usual_entry;
    let mut entries = vec![usual(1), usual(2), usual(3)];
    let mut deviations: Vec<UEntry> = Vec::new();
    let with = |n: u8, i: usize, v: UVal| {
        let mut e = usual(n);
        e.items[i].1 = v;
        e
    };
    // A value of another opcode or width, for each key.
    let ints: Vec<Vec<u8>> = vec![
        vec![op_::BININT1, 9],
        vec![op_::BININT2, 1, 2],
        vec![op_::BININT, 1, 2, 3, 0x80],
        vec![op_::LONG1, 1, 0xff],
        vec![op_::LONG1, 8, 1, 2, 3, 4, 5, 6, 7, 0x80],
        vec![op_::LONG1, 9, 1, 2, 3, 4, 5, 6, 7, 8, 0],
        vec![op_::LONG1, 0],
        vec![op_::NONE],
        vec![op_::NEWTRUE],
    ];
    for i in 1..5 {
        for int in &ints {
            deviations.push(with(4, i, Raw(int.clone())));
        }
        deviations.push(with(4, i, Ref("alloc")));
        deviations.push(with(4, i, New("x")));
    }
    for i in 0..8 {
        for v in [
            Ref("free_requested"),
            LongRef("alloc"),
            Ref(""),
            Ref("meta"),
            LongRef("meta"),
            Ref("N/A"),
            New("N/A"),
            NewPut("N/A"),
            NewBare("N/A"),
            New("N/AB"),
            New(""),
            New("alloc"),
            Raw(vec![op_::BININT1, 1]),
            Raw(vec![op_::NONE]),
            Frames(vec![]),
            Frames(vec![1]),
            Frames(vec![1, 0, 1]),
            LastList,
            FrameDict,
        ] {
            deviations.push(with(5, i, v));
        }
    }
    // A key written otherwise, missing, extra, or in another place.
    for i in 0..8 {
        let mut e = usual(6);
        let name = match e.items[i].0 {
            UKey::Short(k) => k,
            _ => unreachable!(),
        };
        e.items[i].0 = UKey::Long(name);
        deviations.push(e.clone());
        e.items[i].0 = UKey::New(name);
        deviations.push(e);
        let mut e = usual(7);
        e.items.remove(i);
        deviations.push(e);
        let mut e = usual(8);
        e.items
            .insert(i, (UKey::Short("bogus"), Raw(vec![op_::BININT1, 1])));
        deviations.push(e);
        let mut e = usual(9);
        e.items
            .insert(i, (UKey::Short("pool_id"), Raw(vec![op_::NONE])));
        deviations.push(e);
        let mut e = usual(10);
        let item = e.items.remove(i);
        e.items.insert((i + 3) % 8, item);
        deviations.push(e);
        let mut e = usual(11);
        e.items.push(e.items[i].clone());
        deviations.push(e);
        // The memo's epoch changed before the entry, the key's slot holding
        // another key.
        let mut e = usual(12);
        e.overwrite = Some((name, "size"));
        deviations.push(e);
    }
    let count = deviations.len();
    for (n, d) in deviations.into_iter().enumerate() {
        // The deviation between usual entries, and once alone, last.
        entries.push(d.clone());
        entries.push(usual((n % 250) as u8));
        let alone = usual_pickle(&[usual(1), d.clone()]);
        assert!(collect(&alone, true).0 == collect(&alone, false).0, "{d:?}");
    }
    let bytes = usual_pickle(&entries);
    let (direct, logged, direct_entries) = collect(&bytes, true);
    let (generic, _, _) = collect(&bytes, false);
    assert!(direct == generic);
    assert!(logged > count, "{logged}");
    // The usual entries at least took the direct path.
    assert!(direct_entries > (3 + count) as u64, "{direct_entries}");
    // Cut anywhere: the same error (or the same result) either way.
    let short = usual_pickle(&entries[..8]);
    for end in 0..short.len() {
        let cut = &short[..end];
        match (try_collect(cut, true), try_collect(cut, false)) {
            (Ok(a), Ok(b)) => assert!(a.0 == b.0, "{end}"),
            (Err(a), Err(b)) => assert_eq!(a, b, "{end}"),
            _ => panic!("cut at {end}: one path failed"),
        }
    }
}

// The list's batches cut and mixed in every way between entries read directly:
// the run of them that `Collector::on_append_run` logs at once must log what the
// items one by one (and the generic path) log, or fail as they do.
#[test]
fn batches_of_entries_match_the_generic_path() {
    use op_::*;
    // After an entry: (BINGET 0 is the outer dict, a value that is no entry.)
    let arrangements: Vec<Vec<u8>> = vec![
        // the batch ends, another begins;
        vec![APPENDS, MARK],
        // the entry (then read the generic way) appended twice;
        vec![DUP],
        // the entry read directly, appended twice;
        vec![BINGET, 0, POP, DUP],
        // the entries so far in a tuple, dropped, then another batch;
        vec![BINGET, 0, TUPLE, POP, MARK],
        // a value that is no entry among them;
        vec![BINGET, 0],
        // the entry appended on its own;
        vec![BINGET, 0, POP, APPEND],
        // the batch closed on the entry (not a list);
        vec![BINGET, 0, POP, MARK, APPENDS],
        // the entries so far popped, a batch without them;
        vec![BINGET, 0, POP_MARK, MARK],
        // a FRAME of protocol 4 (its length is not checked), then the next entry.
        vec![FRAME, 9, 0, 0, 0, 0, 0, 0, 0],
    ];
    let after = |n: u8, a: &[u8]| {
        let mut e = usual_entry(n);
        e.after = a.to_vec();
        e
    };
    let mut entries = Vec::new();
    for (i, a) in arrangements.iter().enumerate() {
        for (j, b) in arrangements.iter().enumerate() {
            let n = (i * 8 + j) as u8;
            // Alone, between usual entries, and two in a row.
            let one = usual_pickle(&[usual_entry(1), after(2, a), usual_entry(3)]);
            let two = usual_pickle(&[
                usual_entry(1),
                usual_entry(2),
                after(3, a),
                usual_entry(4),
                after(5, b),
                usual_entry(6),
                usual_entry(7),
            ]);
            for bytes in [one, two] {
                match (try_collect(&bytes, true), try_collect(&bytes, false)) {
                    (Ok(x), Ok(y)) => {
                        assert!(x.0 == y.0, "{a:?} {b:?}");
                        let ((ahead, ..), _) = try_collect_with(&bytes, Mode::Prefilled).unwrap();
                        assert!(ahead == y.0, "{a:?} {b:?}");
                    }
                    // At the same byte. (An APPEND(S) onto an entry is told
                    // apart in words, as it was before the runs: the direct
                    // path has no container there, the generic path a dict.)
                    (Err(x), Err(y)) => {
                        assert_eq!(x.split(':').next(), y.split(':').next(), "{a:?} {b:?}")
                    }
                    (x, y) => panic!("{a:?} {b:?}: {:?} {:?}", x.err(), y.err()),
                }
            }
            if i == j {
                entries.push(after(n, a));
                entries.push(usual_entry(n));
            }
        }
    }
    // The arrangements that parse and drop no entry, one after another.
    entries.retain(|e| {
        let drops = [APPENDS, APPEND, TUPLE, POP_MARK];
        !e.after.iter().any(|o| drops.contains(o)) || e.after == [APPENDS, MARK]
    });
    let bytes = usual_pickle(&entries);
    let (direct, logged, direct_entries) = collect(&bytes, true);
    let (generic, _, _) = collect(&bytes, false);
    assert!(direct == generic);
    assert!(logged >= 10, "{logged}");
    assert!(direct_entries >= 10, "{direct_entries}");
    // One batch of more entries than the logger's batch holds (`LOG_BATCH_ENTRIES`),
    // after a few: the run is handed over in parts.
    let mut entries: Vec<_> = (0..5).map(|n| after(n, &[APPENDS, MARK])).collect();
    entries.extend((0..5000).map(|n| usual_entry(n as u8)));
    let bytes = usual_pickle(&entries);
    let (direct, logged, direct_entries) = collect(&bytes, true);
    let (generic, _, _) = collect(&bytes, false);
    assert!(direct == generic);
    assert_eq!((logged, direct_entries), (5006, 5005));
    // Read ahead: all but the entry the layout is learned from, and the first
    // of each frames list, whose stack the parser reads itself.
    let ((ahead, _, direct_entries), taken) = try_collect_with(&bytes, Mode::Prefilled).unwrap();
    assert!(ahead == generic);
    assert_eq!(direct_entries, 5005);
    assert!(taken >= 4990, "{taken}");
    let ((racing, _, _), _) = try_collect_with(&bytes, Mode::Ahead(TINY_PACE)).unwrap();
    assert!(racing == generic);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    // Entries in the usual layout with random values of every kind at random
    // keys, keys dropped or moved: the direct decoder logs what the generic
    // path logs.
    #[test]
    fn random_deviations_match_the_generic_path(
        changes in proptest::collection::vec(
            (0usize..8, 0usize..12, 0u8..255, proptest::bool::ANY), 1..40),
    ) {
        use UVal::*;
        let mut entries = Vec::new();
        for (i, kind, n, keep) in changes {
            let mut e = usual_entry(n);
            let v = match kind {
                0 => Raw(vec![op_::BININT1, n]),
                1 => Raw(vec![op_::LONG1, 2, n, 0x80]),
                2 => Raw(vec![op_::LONG1, 9, n, 0, 0, 0, 0, 0, 0, 0, 1]),
                3 => Ref("meta"),
                4 => Ref("free_requested"),
                5 => New("N/A"),
                6 => NewPut("N/A"),
                7 => Frames(vec![1, 0]),
                8 => LastList,
                9 => FrameDict,
                10 => Raw(vec![op_::NONE]),
                _ => e.items[i].1.clone(),
            };
            e.items[i].1 = v;
            if !keep {
                let item = e.items.remove(i);
                if n % 2 == 0 {
                    e.items.insert(n as usize % 8, item);
                }
            }
            entries.push(e);
            entries.push(usual_entry(n.wrapping_add(1)));
        }
        let bytes = usual_pickle(&entries);
        let (direct, _, _) = collect(&bytes, true);
        let (generic, _, _) = collect(&bytes, false);
        proptest::prop_assert!(direct == generic);
        // Read ahead, what the direct decoder reads (or the parser reads itself).
        let ((ahead, _, _), _) = try_collect_with(&bytes, Mode::Prefilled).unwrap();
        proptest::prop_assert!(ahead == generic);
    }
}

// A FRAME of protocol 4 after an entry (CPython begins one before any object
// once the last holds 64 KiB) leaves the entry to the direct decoder: given up
// on, its frames list's memo slot would be removed, changing the memo's epoch,
// and every cache of the direct decoder, and the entries read ahead, with it.
#[test]
fn a_frame_after_an_entry_keeps_it_direct() {
    let entries: Vec<_> = (0..20)
        .map(|n| {
            let mut e = usual_entry(n);
            if n % 3 == 0 {
                e.after = vec![op_::FRAME, 9, 0, 0, 0, 0, 0, 0, 0];
            }
            e
        })
        .collect();
    let bytes = usual_pickle(&entries);
    let (direct, logged, direct_entries) = collect(&bytes, true);
    let (generic, _, _) = collect(&bytes, false);
    assert!(direct == generic);
    // All but `e0`, which `usual_pickle` has read the generic way.
    assert_eq!((logged, direct_entries), (21, 20));
    let ((ahead, ..), taken) = try_collect_with(&bytes, Mode::Prefilled).unwrap();
    assert!(ahead == generic);
    assert!(taken >= 18, "{taken}");
}
