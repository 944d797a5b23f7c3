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

// The direct decoder (`entry::decode`) must log exactly what the generic path does.
#[test]
fn direct_decoding_matches_the_generic_path() {
    use crate::snapshot::pickle::Parser;
    use std::io::Read;

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
    let collect = |bytes: &[u8], direct: bool| {
        let mut parser = Parser::new(bytes, &|_| {});
        let mut c = Collector::new(parser.heap_mut());
        if direct {
            parser.run(&mut c).unwrap();
        } else {
            let mut g = Generic(c);
            parser.run(&mut g).unwrap();
            c = g.0;
        }
        c.finish_parsing();
        // List ids differ (the generic path recycles its dicts): compare the rest.
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
        let seen = (
            entries,
            runs,
            c.stacks.flat,
            c.action_counts,
            (metadata, pools, unread),
        );
        (seen, direct)
    };
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
        let (direct, direct_entries) = collect(&bytes, true);
        let (generic, none) = collect(&bytes, false);
        assert!(!direct.0.is_empty(), "{name}");
        // Nearly all entries take the direct path (not those with new frames).
        assert!(
            small || direct_entries * 10 > direct.0.len() as u64 * 9,
            "{name}"
        );
        assert!(direct_entries > 0, "{name}");
        assert_eq!(none, 0);
        assert!(direct == generic, "{name}");
    }
    // A frame's memo slot overwritten between two frames lists of the same
    // bytes: the second names other frames, which the caches must see. With two
    // frames, and with twenty (40 bytes of references: found by their first
    // bytes, `FramesCache::by_prefix`).
    for frames in [2, 20] {
        let bytes = overwritten_frame_pickle(frames);
        let (direct, direct_entries) = collect(&bytes, true);
        let (generic, _) = collect(&bytes, false);
        assert_eq!(direct_entries, 3);
        assert_eq!(direct.0.len(), 4);
        assert!(direct == generic, "{frames} frames");
    }
    // Entries whose keys leave the learned shape (`entry::Shape`) in every way.
    let bytes = shape_pickle();
    let (direct, direct_entries) = collect(&bytes, true);
    let (generic, _) = collect(&bytes, false);
    // All but the entry with an int key, the one whose first key is not `action`
    // (its list is not known yet: its entries are recorded at its APPENDS), and the
    // one before the BINPUT (the decoder takes no opcode after an entry but the
    // next entry's or the list's).
    assert_eq!(direct_entries, 15);
    assert_eq!(direct.0.len(), 18);
    assert!(direct == generic);
}

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
