use super::*;
use crate::snapshot::pickle::StrId;
use crate::snapshot::pickle::op::{
    APPENDS, BINGET, BININT1, BININT2, EMPTY_DICT, EMPTY_LIST, FRAME, LONG_BINGET, LONG1, MARK,
    MEMOIZE, SETITEM, SETITEMS, SHORT_BINUNICODE,
};

// A shape of the usual keys, memo references 1 to 8 (`action` ... `frames`),
// each read back with BINGET.
fn usual_shape() -> Shape {
    let mut shape = Shape::default();
    for (i, &field) in USUAL.iter().enumerate() {
        assert!(shape.push(&[BINGET, i as u8 + 1], i as StrId, field));
    }
    assert!(shape.is_exactly_usual());
    shape
}

// The bytes of an entry in the usual layout after its EMPTY_DICT: action memo
// 20, addr `addr`, size 512, stream 0, time 7 (LONG1), "N/A", user_metadata
// memo 21, and `frames`.
fn entry(addr: u8, frames: &[u8]) -> Vec<u8> {
    let mut b = vec![MEMOIZE, MARK];
    b.extend([BINGET, 1, BINGET, 20]);
    b.extend([BINGET, 2, LONG1, 6, addr, 0, 0, 0, 0x7f, 0]);
    b.extend([BINGET, 3, BININT2, 0, 2]);
    b.extend([BINGET, 4, BININT1, 0]);
    b.extend([BINGET, 5, LONG1, 1, 7]);
    b.extend([BINGET, 6, SHORT_BINUNICODE, 3, b'N', b'/', b'A', MEMOIZE]);
    b.extend([BINGET, 7, BINGET, 21]);
    b.push(BINGET);
    b.push(8);
    b.extend(frames);
    b.push(SETITEMS);
    b
}

// A fresh frames list of the frames in memo slots `refs`.
fn list(refs: &[u8]) -> Vec<u8> {
    let mut b = vec![EMPTY_LIST, MEMOIZE, MARK];
    for &r in refs {
        b.extend([BINGET, r]);
    }
    b.push(APPENDS);
    b
}

#[test]
fn an_entry_of_the_usual_layout_is_read_with_its_references() {
    let shape = usual_shape();
    let mut lists = Lists::new(shape.epoch());
    // Two entries of one frames list, a third of another, and one sharing a
    // list through the memo, in a batch that ends.
    let mut buf = vec![EMPTY_DICT];
    let mut starts = Vec::new();
    for (addr, frames) in [
        (1, list(&[30, 31])),
        (2, list(&[30, 31])),
        (3, list(&[31])),
        (4, vec![LONG_BINGET, 9, 1, 0, 0]),
    ] {
        starts.push(buf.len());
        buf.extend(entry(addr, &frames));
        buf.push(EMPTY_DICT);
    }
    *buf.last_mut().unwrap() = APPENDS;
    buf.extend([0; 8]);
    let read: Vec<Ahead> = starts
        .iter()
        .map(|&at| read_entry(&buf, at, &shape, &mut lists).unwrap())
        .collect();
    for (i, e) in read.iter().enumerate() {
        assert_eq!(e.start, starts[i] as u64);
        assert_eq!(e.addr, 0x7f_0000_0000 + i as u64 + 1);
        assert_eq!((e.size, e.stream, e.time_us), (512, 0, Some(7)));
        assert_eq!((e.action, e.text, e.impossible), (20, 21, false));
        // It ends after its SETITEMS, where the next begins.
        assert_eq!(buf[e.end as usize - 1], SETITEMS);
    }
    assert_eq!(read[0].end as usize + 1, starts[1]);
    assert_eq!(read[0].frames, Frames::List(0));
    assert_eq!(read[1].frames, Frames::List(0));
    assert_eq!(read[2].frames, Frames::List(1));
    assert_eq!(read[3].frames, Frames::Shared(265));
}

#[test]
fn anything_off_the_usual_layout_is_left_to_the_parser() {
    let shape = usual_shape();
    let mut lists = Lists::new(shape.epoch());
    let mut read = |bytes: Vec<u8>, next: &[u8]| {
        let mut buf = bytes;
        buf.extend(next);
        buf.extend([0; 16]);
        read_entry(&buf, 0, &shape, &mut lists)
    };
    let usual = entry(1, &list(&[30]));
    assert!(read(usual.clone(), &[EMPTY_DICT]).is_some());
    // After the entry: the next one, the batch's end, a memo reference, or a
    // FRAME before one of these; never more items for the dict.
    assert!(read(usual.clone(), &[APPENDS]).is_some());
    assert!(read(usual.clone(), &[FRAME, 1, 0, 0, 0, 0, 0, 0, 0, EMPTY_DICT]).is_some());
    assert!(read(usual.clone(), &[FRAME, 1, 0, 0, 0, 0, 0, 0, 0, SETITEM]).is_none());
    assert!(read(usual.clone(), &[MARK]).is_none());
    let change = |from: &[u8], to: &[u8]| {
        let at = usual.windows(from.len()).position(|w| w == from).unwrap();
        let mut b = usual.clone();
        b.splice(at..at + from.len(), to.iter().copied());
        b
    };
    // Another key where the shape has `size`, keys read back with LONG_BINGET.
    assert!(read(change(&[BINGET, 3], &[BINGET, 9]), &[EMPTY_DICT]).is_none());
    let long = [LONG_BINGET, 3, 0, 0, 0];
    assert!(read(change(&[BINGET, 3], &long), &[EMPTY_DICT]).is_none());
    // A value of another kind: a str action, a compile context other than
    // "N/A", a frames list of two batches or with a frame dict in it.
    let str_action = [SHORT_BINUNICODE, 1, b'x', MEMOIZE];
    assert!(read(change(&[BINGET, 20], &str_action), &[EMPTY_DICT]).is_none());
    assert!(read(change(b"N/A", b"N/B"), &[EMPTY_DICT]).is_none());
    let two = [APPENDS, MARK, BINGET, 31, APPENDS];
    assert!(read(change(&[APPENDS], &two), &[EMPTY_DICT]).is_none());
    let dict = [MARK, EMPTY_DICT, MEMOIZE];
    assert!(read(change(&[MARK, BINGET, 30], &dict), &[EMPTY_DICT]).is_none());
    // A FRAME inside the entry, and the buffer's end.
    let framed = [FRAME, 1, 0, 0, 0, 0, 0, 0, 0, BINGET, 4];
    assert!(read(change(&[BINGET, 4], &framed), &[EMPTY_DICT]).is_none());
    let mut lists = Lists::new(shape.epoch());
    assert!(read_entry(&usual[..usual.len() - 1], 0, &shape, &mut lists).is_none());
}

// An end whose chunks are given, for `ReadAhead::at`.
fn end_with(chunks: Vec<Vec<u64>>) -> ReadAhead {
    let (tx, rx) = channel();
    for starts in chunks {
        let chunk = starts
            .into_iter()
            .map(|start| Ahead {
                start,
                end: start + 10,
                time_us: None,
                addr: 0,
                size: 0,
                stream: 0,
                impossible: false,
                action: 0,
                text: 0,
                frames: Frames::Shared(0),
            })
            .collect();
        tx.send(chunk).unwrap();
    }
    let (emptied, _) = channel();
    ReadAhead {
        shared: Arc::new(Shared {
            parser_at: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }),
        layout: None,
        chunks: rx,
        emptied,
        chunk: Vec::new(),
        next: 0,
        epoch: Some(0),
        handles: Vec::new(),
        taken: 0,
    }
}

#[test]
fn the_parser_takes_entries_at_its_offsets_only() {
    let mut ahead = end_with(vec![vec![10, 20, 30], vec![50, 60]]);
    let at = |ahead: &mut ReadAhead, offset| ahead.at(offset).map(|e| e.start);
    // Before the first: nothing, and nothing dropped.
    assert_eq!(at(&mut ahead, 5), None);
    assert_eq!(at(&mut ahead, 10), Some(10));
    // Past one the parser never met (read itself, or a false start): dropped.
    assert_eq!(at(&mut ahead, 30), Some(30));
    // An offset between entries read ahead, then into the next chunk.
    assert_eq!(at(&mut ahead, 40), None);
    assert_eq!(at(&mut ahead, 60), Some(60));
    // Each entry is taken once, and none is left.
    assert_eq!(at(&mut ahead, 60), None);
    assert_eq!(at(&mut ahead, 70), None);
}
