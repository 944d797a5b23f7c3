//! Hand-written pickles (opcode by opcode) of hostile PyTorch snapshots:
//! shapes CPython never writes but a file can hold. Shared with the
//! end-to-end tests (`tests/tests/hostile_snapshot.rs` includes this file).

#![allow(dead_code)]

/// A pickle being written: protocol 4, no framing, no memo unless asked.
pub struct Pickle(Vec<u8>);

impl Pickle {
    /// PROTO 4.
    pub fn new() -> Self {
        Pickle(vec![0x80, 4])
    }

    /// Raw opcodes.
    pub fn op(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.extend_from_slice(bytes);
        self
    }

    /// A str (SHORT_BINUNICODE).
    pub fn str(&mut self, s: &str) -> &mut Self {
        assert!(s.len() < 256);
        self.0.push(0x8c);
        self.0.push(s.len() as u8);
        self.op(s.as_bytes())
    }

    /// A non-negative int (LONG1 of 8 bytes: any u63).
    pub fn int(&mut self, i: u64) -> &mut Self {
        self.0.extend_from_slice(&[0x8a, 8]);
        self.op(&i.to_le_bytes())
    }

    /// A trace entry dict: `{action, addr, size, stream, time_us}`.
    pub fn entry(&mut self, action: &str, addr: u64, size: u64, time_us: u64) -> &mut Self {
        self.op(b"}(")
            .str("action")
            .str(action)
            .str("addr")
            .int(addr);
        self.str("size").int(size).str("stream").int(0);
        self.str("time_us").int(time_us).op(b"u")
    }

    /// STOP, and the bytes.
    pub fn finish(&mut self) -> Vec<u8> {
        self.op(b".");
        std::mem::take(&mut self.0)
    }
}

/// A snapshot of `devices` device lists holding one alloc each, and, with
/// `segments`, one segment per list on device `i mod 1024`.
pub fn device_lists(devices: usize, segments: bool) -> Vec<u8> {
    let mut p = Pickle::new();
    p.op(b"}(").str("device_traces").op(b"]");
    for i in 0..devices as u64 {
        // One list per device, its one entry appended.
        p.op(b"]")
            .entry("alloc", 0x1000_0000 * (i + 1), 512, 1000 + i)
            .op(b"a");
        p.op(b"a");
    }
    p.str("segments").op(b"]");
    if segments {
        for i in 0..devices as u64 {
            p.op(b"}(").str("device").int(i % 1024).str("address");
            p.int(0x1000_0000 * (i + 1)).str("total_size").int(2 << 20);
            p.str("blocks").op(b"]u").op(b"a");
        }
    }
    p.op(b"u").finish()
}

/// A snapshot of two device lists whose `entries` allocs alternate between
/// them (each list fetched from the memo for its next entry), so each
/// device's log is as many runs as entries.
pub fn interleaved_devices(entries: usize) -> Vec<u8> {
    let mut p = Pickle::new();
    // root, "device_traces", [A, B] with A in memo 0 and B in memo 1.
    p.op(b"}").str("device_traces").op(b"](]\x94]\x94e");
    for i in 0..entries as u64 {
        let list = (i % 2) as u8;
        p.op(&[b'h', list])
            .entry("alloc", 0x1000 * (i + 1), 512, 1000 + i);
        p.op(b"a0");
    }
    p.op(b"s").finish()
}

/// A pickle of one None stored in the memo `puts` times, each index 65,535
/// past the last (LONG_BINPUT): what a dense memo would allocate for is
/// 256 KiB an opcode.
pub fn far_memo_puts(puts: usize) -> Vec<u8> {
    let mut p = Pickle::new();
    p.op(b"N");
    for i in 1..=puts as u32 {
        p.op(b"r").op(&(i * 65_535).to_le_bytes());
    }
    p.finish()
}

/// A snapshot whose one device list holds `nones` Nones (in batches of
/// 1,000, as CPython writes lists).
pub fn none_list(nones: usize) -> Vec<u8> {
    let mut p = Pickle::new();
    p.op(b"}").str("device_traces").op(b"]]");
    let batch: Vec<u8> = std::iter::once(b'(')
        .chain(std::iter::repeat_n(b'N', 1000))
        .chain(std::iter::once(b'e'))
        .collect();
    for _ in 0..nones / 1000 {
        p.op(&batch);
    }
    p.op(b"as").finish()
}

/// A dict of `keys` int keys to None (in batches of 1,000, as CPython
/// writes dicts): each key must be checked against those stored.
pub fn int_keyed_dict(keys: usize) -> Vec<u8> {
    let mut p = Pickle::new();
    p.op(b"}");
    for batch in (0..keys as u64).collect::<Vec<_>>().chunks(1000) {
        p.op(b"(");
        for &k in batch {
            p.int(k).op(b"N");
        }
        p.op(b"u");
    }
    p.finish()
}
