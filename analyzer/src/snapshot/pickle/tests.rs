use super::source::BUF_SIZE;
use super::*;

// Every test's pickle is read both ways, from a reader and in place: the two
// must agree, errors and their offsets included.
fn parse(bytes: &[u8]) -> Result<Value, PickleError> {
    let read = load(bytes);
    let lent = load_lent(bytes);
    assert_eq!(format!("{read:?}"), format!("{lent:?}"));
    read
}

fn load_lent(bytes: &[u8]) -> Result<Value, PickleError> {
    into_value(Parser::over_bytes(bytes, &|_| {}))
}

#[test]
fn a_lent_pickle_is_read_a_window_at_a_time() {
    // A list of 3 million small ints (about 6 MiB): progress is told more than
    // once, with offsets that only grow and that the parser has consumed.
    let n = 3_000_000u32;
    let mut p = vec![0x80, 4, op::EMPTY_LIST, op::MARK];
    for i in 0..n {
        p.extend([op::BININT1, i as u8]);
    }
    p.extend([op::APPENDS, op::STOP]);
    let seen = std::cell::RefCell::new(Vec::new());
    let progress = |b: u64| seen.borrow_mut().push(b);
    let mut parser = Parser::over_bytes(&p, &progress);
    let root = parser.run(&mut KeepAll).unwrap();
    let Val::Obj(list) = root else { panic!() };
    assert_eq!(parser.heap().obj(list).items.len(), n as usize);
    let seen = seen.into_inner();
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]));
    assert!(*seen.last().unwrap() < p.len() as u64);
    // Cut anywhere, it is the same error as from a reader.
    for cut in [1, 2, 3, 1000, p.len() / 2, p.len() - 1] {
        parse(&p[..cut]).unwrap_err();
    }
}

// pickle.dumps({'a': [1, 2**64 - 1, -5, 1.5, None, True, 'x', b'y', (1, 2)]}, protocol=4)
// written out by hand, with a shared (memoized) list.
#[test]
fn reads_basic_values() {
    let mut p = vec![0x80, 4, op::EMPTY_DICT, op::MEMOIZE];
    p.extend([op::SHORT_BINUNICODE, 1, b'a', op::MEMOIZE]);
    p.extend([op::EMPTY_LIST, op::MEMOIZE, op::MARK]);
    p.extend([op::BININT1, 1]);
    p.extend([
        op::LONG1,
        9,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0,
    ]);
    p.extend([op::BININT, 0xfb, 0xff, 0xff, 0xff]);
    p.push(op::BINFLOAT);
    p.extend(1.5f64.to_be_bytes());
    p.extend([op::NONE, op::NEWTRUE]);
    p.extend([op::SHORT_BINUNICODE, 1, b'x', op::MEMOIZE]);
    p.extend([op::SHORT_BINBYTES, 1, b'y', op::MEMOIZE]);
    p.extend([op::BININT1, 1, op::BININT1, 2, op::TUPLE2, op::MEMOIZE]);
    p.extend([op::APPENDS]);
    p.extend([op::SETITEM]);
    p.extend([
        op::SHORT_BINUNICODE,
        1,
        b'b',
        op::BINGET,
        2,
        op::SETITEM,
        op::STOP,
    ]);
    let v = parse(&p).unwrap();
    let list = Value::List(vec![
        Value::Int(1),
        Value::Int(u64::MAX as i128),
        Value::Int(-5),
        Value::Float(1.5),
        Value::None,
        Value::Bool(true),
        Value::Str("x".into()),
        Value::Bytes(b"y".to_vec()),
        Value::Tuple(vec![Value::Int(1), Value::Int(2)]),
    ]);
    assert_eq!(v.get("a"), Some(&list));
    assert_eq!(v.get("b"), Some(&list));
}

#[test]
fn errors_carry_offsets() {
    assert!(matches!(
        parse(b""),
        Err(PickleError::NotAPickle { found: 0 })
    ));
    assert!(matches!(
        parse(b"{}"),
        Err(PickleError::NotAPickle { found: b'{' })
    ));
    let e = parse(&[0x80, 4, op::EMPTY_DICT, 0xff]).unwrap_err();
    assert!(
        matches!(
            e,
            PickleError::UnknownOpcode {
                offset: 3,
                opcode: 0xff
            }
        ),
        "{e}"
    );
    let e = parse(&[0x80, 4, op::SHORT_BINUNICODE, 10, b'a']).unwrap_err();
    assert!(matches!(e, PickleError::Truncated { offset: 5, .. }), "{e}");
    let e = parse(&[0x80, 4, op::BINGET, 7]).unwrap_err();
    assert!(matches!(e, PickleError::Malformed { offset: 2, .. }), "{e}");
    let e = parse(&[0x80, 4, b'c']).unwrap_err();
    assert!(
        matches!(e, PickleError::Unsupported { name: "GLOBAL", .. }),
        "{e}"
    );
    let e = parse(&[0x80, 4, op::APPENDS]).unwrap_err();
    assert_eq!(e.offset(), Some(2));
    let e = parse(&[0x80, 4, op::NONE, op::NONE, op::STOP]).unwrap_err();
    assert!(matches!(e, PickleError::Malformed { .. }), "{e}");
}

// A str read as one expected (`new_str_as`) is the one `new_str` reads: its
// bytes, its memo slot, its place after it.
#[test]
fn a_str_read_as_known_is_the_str_read() {
    let mut heap = Heap::default();
    let na = heap.intern(b"N/A");
    let other = heap.intern(b"x");
    let mut strs = Vec::new();
    for text in ["N/A", "N/AB", "N/", "", "abc"] {
        let mut p = vec![text.len() as u8];
        p.extend(text.as_bytes());
        p.extend([op::MEMOIZE, op::STOP]);
        let mut r = OpReader {
            buf: &p,
            pos: 0,
            heap: &mut heap,
            memo_start: 0,
            offset: 0,
        };
        let id = r.new_str_as(op::SHORT_BINUNICODE, b"N/A", na).unwrap();
        assert_eq!(r.pos(), p.len() - 1, "{text}");
        assert_eq!(r.memo_str(r.memo_len() - 1), Some(id), "{text}");
        assert_eq!(heap.str_bytes(id), text.as_bytes());
        strs.push(id);
    }
    assert_eq!(strs[0], na);
    assert!(!strs[1..].contains(&na) && !strs.contains(&other));
}

#[test]
fn op_reader_reads_long1_like_the_parser() {
    let mut heap = Heap::default();
    for v in [
        0i128,
        1,
        -1,
        255,
        -129,
        1 << 47,
        -(1 << 55),
        i64::MIN as i128,
        1 << 64,
    ] {
        let mut b = v.to_le_bytes().to_vec();
        // Minimal two's complement, as CPython writes it.
        while b.len() > 1
            && ((b[b.len() - 1] == 0 && b[b.len() - 2] < 0x80)
                || (b[b.len() - 1] == 0xff && b[b.len() - 2] >= 0x80))
        {
            b.pop();
        }
        if v == 0 {
            b.clear();
        }
        let mut p = vec![b.len() as u8];
        p.extend(&b);
        p.extend([op::STOP; 8]); // room for the 8-byte window, or not
        for end in [1 + b.len(), p.len()] {
            let mut r = OpReader {
                buf: &p[..end],
                pos: 0,
                heap: &mut heap,
                memo_start: 0,
                offset: 0,
            };
            let got = r.atom(op::LONG1).unwrap();
            assert_eq!(r.pos(), 1 + b.len());
            assert_eq!(r.heap().int(got), Some(v), "{v}");
            // The direct decoders' reader: the same value where it answers, which is
            // for 1 to 8 bytes with their 8-byte window buffered.
            match OpReader::int_at(&p[..end], 0, op::LONG1) {
                Some((i, len)) => {
                    assert_eq!((i as i128, len), (v, 1 + b.len()), "{v}");
                    assert!((1..=8).contains(&b.len()) && end >= 9, "{v}");
                }
                None => assert!(b.is_empty() || b.len() > 8 || end < 9, "{v}"),
            }
        }
    }
}

#[test]
fn ints_and_memo_references_read_at_a_position() {
    let p = [
        op::BININT1,
        200,
        op::BININT2,
        0x34,
        0x12,
        op::BININT,
        0xfe,
        0xff,
        0xff,
        0xff,
    ];
    assert_eq!(OpReader::int_at(&p, 1, p[0]), Some((200, 1)));
    assert_eq!(OpReader::int_at(&p, 3, p[2]), Some((0x1234, 2)));
    assert_eq!(OpReader::int_at(&p, 6, p[5]), Some((-2, 4)));
    // Truncated arguments and other opcodes are left to `atom`.
    assert_eq!(OpReader::int_at(&p, 4, op::BININT2), Some((0x4a12, 2)));
    assert_eq!(OpReader::int_at(&p, 7, op::BININT), None);
    assert_eq!(OpReader::int_at(&p, 0, op::NONE), None);
    let refs = [
        op::BINGET,
        7,
        op::LONG_BINGET,
        1,
        2,
        0,
        0,
        op::LONG_BINGET,
        1,
    ];
    assert_eq!(OpReader::memo_ref_at(&refs, 0), Some((7, 2)));
    assert_eq!(OpReader::memo_ref_at(&refs, 2), Some((0x201, 7)));
    assert_eq!(OpReader::memo_ref_at(&refs, 7), None);
    assert_eq!(OpReader::memo_ref_at(&refs, 1), None);
    assert_eq!(OpReader::memo_ref_at(&refs, 9), None);
}

#[test]
fn self_reference_is_an_error_not_a_hang() {
    // l = []; l.append(l)
    let p = [
        0x80,
        4,
        op::EMPTY_LIST,
        op::MEMOIZE,
        op::BINGET,
        0,
        op::APPEND,
        op::STOP,
    ];
    assert!(parse(&p).is_err());
}

#[test]
fn small_buffers_and_large_strings() {
    // A string longer than the buffer forces it to grow.
    let s = vec![b'z'; BUF_SIZE + 10];
    let mut p = vec![0x80, 4, op::BINUNICODE8];
    p.extend((s.len() as u64).to_le_bytes());
    p.extend(&s);
    p.push(op::STOP);
    struct OneByte<'a>(&'a [u8]);
    impl Read for OneByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(7);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let v = load(OneByte(&p)).unwrap();
    assert_eq!(v.as_str().map(str::len), Some(s.len()));
}

/// A length no input holds is read as far as the input goes, in a buffer
/// that grows as bytes arrive: a 14-byte pickle claiming a 512 GiB
/// string, or a 10-byte one claiming 4 GiB, fails at once.
#[test]
fn lengths_are_believed_only_as_far_as_the_input_goes() {
    for (opcode, len) in [
        (op::BINUNICODE8, 1u64 << 39),
        (op::BINBYTES8, 1 << 39),
        (op::BYTEARRAY8, (1 << 40) - 1),
        (op::BINUNICODE, 0xffff_ffff),
        (op::BINBYTES, 0xffff_ffff),
    ] {
        let mut p = vec![0x80, 4, opcode];
        if matches!(opcode, op::BINUNICODE | op::BINBYTES) {
            p.extend((len as u32).to_le_bytes());
        } else {
            p.extend(len.to_le_bytes());
        }
        p.extend(b"abc");
        match parse(&p) {
            Err(PickleError::Truncated { offset, .. }) => assert_eq!(offset, p.len() as u64),
            other => panic!("{opcode:#x}: {other:?}"),
        }
    }
}

/// Opcodes that only push (NONE, MARK) fill the stack up to a bound,
/// whatever the input's length: the stack of a real pickle stays small.
#[test]
fn the_stack_is_bounded() {
    for (opcode, bound) in [(op::NONE, MAX_STACK), (op::MARK, MAX_MARKS)] {
        let mut p = vec![0x80, 4];
        p.resize(2 + bound + 10, opcode);
        p.push(op::STOP);
        match parse(&p) {
            Err(PickleError::Malformed { offset, message }) => {
                assert_eq!(offset, 2 + bound as u64, "{message}");
                assert!(message.contains("pickle stack"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}

/// A list holding the same list twice, forty levels deep (a few hundred
/// bytes, 2^40 values as a tree): building it is refused.
#[test]
fn a_bomb_of_shared_lists_is_refused() {
    let mut p = vec![0x80, 4, op::EMPTY_LIST, op::MEMOIZE, op::POP];
    for level in 0..40u8 {
        // [x, x] where x is the list of the level below (memo `level`).
        p.extend([op::EMPTY_LIST, op::MEMOIZE, op::MARK]);
        p.extend([op::BINGET, level, op::BINGET, level, op::APPENDS]);
        if level < 39 {
            p.push(op::POP);
        }
    }
    p.push(op::STOP);
    assert!(p.len() < 700);
    match parse(&p) {
        Err(PickleError::Malformed { message, .. }) => {
            assert!(message.contains("expands"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

/// Memo indices far apart (80 KB of them once allocated 4 GiB): the memo
/// holds the entries stored, each still read back, and MEMOIZE stores
/// at Python's `len(memo)`.
#[test]
fn the_memo_takes_memory_for_its_entries_not_their_indices() {
    let puts = 16_000u32;
    let mut p = vec![0x80, 4, op::NONE];
    for i in 1..=puts {
        p.push(op::LONG_BINPUT);
        p.extend((i * 65_535).to_le_bytes());
    }
    // Read the last back; MEMOIZE a True at index `puts`.
    p.extend([op::POP, op::LONG_BINGET]);
    p.extend((puts * 65_535).to_le_bytes());
    p.extend([op::POP, op::NEWTRUE, op::MEMOIZE, op::POP, op::LONG_BINGET]);
    p.extend(puts.to_le_bytes());
    p.push(op::STOP);
    let mut parser = Parser::new(&p[..], &|_| {});
    assert_eq!(parser.run(&mut KeepAll).unwrap(), Val::Bool(true));
    let memo = &parser.heap().memo;
    assert_eq!(memo.len(), puts as usize + 1);
    assert!(memo.slots.capacity() < 1024, "{}", memo.slots.capacity());

    // Entries stored ahead join the dense slots as these reach them.
    let p = [
        0x80,
        4,
        op::NONE,
        op::BINPUT,
        2,
        op::BINPUT,
        1,
        op::BINPUT,
        0,
        op::STOP,
    ];
    let mut parser = Parser::new(&p[..], &|_| {});
    parser.run(&mut KeepAll).unwrap();
    let memo = &parser.heap().memo;
    assert_eq!((memo.slots.len(), memo.sparse.len()), (3, 0));
}

/// Storing an out-of-line value (an int) at one index over and over
/// reuses its side entry.
#[test]
fn a_memo_index_stored_again_reuses_its_entry() {
    let mut p = vec![0x80, 4];
    for i in 0..1000u16 {
        p.push(op::BININT2);
        p.extend(i.to_le_bytes());
        p.extend([op::BINPUT, 0, op::POP]);
    }
    p.extend([op::BINGET, 0, op::STOP]);
    let mut parser = Parser::new(&p[..], &|_| {});
    assert_eq!(parser.run(&mut KeepAll).unwrap(), Val::Int(999));
    assert_eq!(parser.heap().memo.side.len(), 1);
}

/// A list of Nones is 16 bytes a value, and the values held at once are
/// bounded: past `MAX_HELD`, an error, not gigabytes.
#[test]
fn the_values_held_are_bounded() {
    assert_eq!(std::mem::size_of::<Val>(), 16);
    let mut p = vec![0x80, 4, op::EMPTY_LIST];
    let batch = 1 << 16;
    for _ in 0..MAX_HELD / batch + 1 {
        p.push(op::MARK);
        p.resize(p.len() + batch, op::NONE);
        p.push(op::APPENDS);
    }
    p.push(op::STOP);
    match parse(&p) {
        Err(PickleError::Malformed { message, .. }) => {
            assert!(message.contains("values held at once"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

/// A dict of many distinct keys is indexed past `SCAN_PAIRS`; a key
/// repeated then still replaces its value.
#[test]
fn a_large_dict_keeps_one_value_per_key() {
    let mut p = vec![0x80, 4, op::EMPTY_DICT, op::MARK];
    for k in 0..100u8 {
        p.extend([op::BININT1, k, op::BININT1, k]);
    }
    p.extend([op::BININT1, 7, op::NONE, op::SETITEMS, op::STOP]);
    let value = load(&p[..]).unwrap();
    let Value::Dict(pairs) = value else {
        panic!("{value:?}")
    };
    assert_eq!(pairs.len(), 100);
    assert_eq!(pairs[7], (Value::Int(7), Value::None));
    assert_eq!(pairs[8], (Value::Int(8), Value::Int(8)));
}

// A memo slot read by its tag (`memo_custom`) is what `memo_value` reads: the
// id of a custom value of that kind, nothing for another kind or anything else.
#[test]
fn a_custom_memo_slot_is_read_by_its_kind() {
    let mut heap = Heap::default();
    let s = heap.intern(b"x");
    for v in [
        Val::Custom { kind: 1, id: 7 },
        Val::Custom { kind: 0, id: 7 },
        Val::Custom { kind: 2, id: 0 },
        Val::Str(s),
        Val::Consumed,
        Val::Int(7),
    ] {
        heap.memo.push(v);
    }
    let r = OpReader {
        buf: &[],
        pos: 0,
        heap: &mut heap,
        memo_start: 0,
        offset: 0,
    };
    for idx in 0..8 {
        for kind in 0..4u8 {
            let want = match r.memo_value(idx) {
                Some(Val::Custom { kind: k, id }) if k == kind => Some(id),
                _ => None,
            };
            assert_eq!(r.memo_custom(idx, kind), want, "slot {idx}, kind {kind}");
        }
    }
    assert_eq!(r.memo_custom(0, 1), Some(7));
}

// A batch's room is reserved up front, but no more than `RESERVE_MAX` a batch:
// a batch of one key repeated (the dict keeps one pair) or of items a hook
// consumes must not leave its whole length as unused storage.
#[test]
fn a_batch_reserves_bounded_room() {
    let mut p = vec![op::PROTO, 4, op::EMPTY_DICT, op::MARK];
    for _ in 0..5000 {
        p.extend([op::BININT1, 7, op::NONE]);
    }
    p.extend([op::SETITEMS, op::STOP]);
    let mut parser = Parser::new(&p[..], &|_| {});
    let Val::Obj(root) = parser.run(&mut KeepAll).unwrap() else {
        panic!("not a container");
    };
    let items = &parser.heap().obj(root).items;
    assert_eq!(items.len(), 2);
    assert!(
        items.capacity() <= 2 * vm::RESERVE_MAX,
        "{}",
        items.capacity()
    );
    // A small dict gets its room in one go, and all of it is used.
    let mut p = vec![op::PROTO, 4, op::EMPTY_DICT, op::MARK];
    for k in 0..6 {
        p.extend([op::BININT1, k, op::NONE]);
    }
    p.extend([op::SETITEMS, op::STOP]);
    let mut parser = Parser::new(&p[..], &|_| {});
    let Val::Obj(root) = parser.run(&mut KeepAll).unwrap() else {
        panic!("not a container");
    };
    let items = &parser.heap().obj(root).items;
    assert_eq!(items.len(), 12);
    assert!(items.capacity() < 16, "{}", items.capacity());
}
