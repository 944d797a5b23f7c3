use super::*;
use crate::progress::NoProgress;
use std::io::Write;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(name)
}

#[test]
fn detects_compression_by_content() {
    assert_eq!(detect_compression(&[0x1f, 0x8b, 8]), Compression::Gzip);
    assert_eq!(detect_compression(b"\xfd7zXZ\x00\x00"), Compression::Xz);
    assert_eq!(
        detect_compression(&[0x28, 0xb5, 0x2f, 0xfd]),
        Compression::Zstd
    );
    assert_eq!(detect_compression(b"\x80\x04"), Compression::None);
    assert_eq!(detect_compression(b""), Compression::None);
}

#[test]
fn decompresses_transparently() {
    let data = b"\x80\x04hello".repeat(1000);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&data).unwrap();
    let gz = gz.finish().unwrap();
    let zs = zstd::encode_all(&data[..], 1).unwrap();
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 1);
    xz.write_all(&data).unwrap();
    let xz = xz.finish().unwrap();
    for (bytes, kind) in [
        (gz, Compression::Gzip),
        (zs, Compression::Zstd),
        (xz, Compression::Xz),
        (data.clone(), Compression::None),
    ] {
        let (mut s, c) = decompress(Cursor::new(bytes)).unwrap();
        assert_eq!(c, kind);
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert_eq!(out, data);
    }
}

fn all_events(stream: &mut EventStream) -> Vec<Event> {
    let mut all = Vec::new();
    stream
        .for_each_batch(|events, _| all.extend_from_slice(events))
        .unwrap();
    assert!(stream.is_complete());
    all
}

#[test]
fn an_opened_snapshot_streams_its_events_again() {
    let input = Input::open(fixture("torch/mlp_expandable.pickle.xz"), &NoProgress).unwrap();
    assert_eq!(input.kind(), InputKind::TorchSnapshot);
    assert_eq!(input.compression(), Compression::Xz);
    assert!(input.import_report().is_some());
    let (mut first, mut second) = (input.events().unwrap(), input.events().unwrap());
    assert_eq!(first.header(), second.header());
    let a = all_events(&mut first);
    assert!(!a.is_empty());
    assert_eq!(a, all_events(&mut second));
}

#[test]
fn an_opened_trace_streams_its_events_again_side_by_side() {
    let input = Input::open(fixture("leak.vtrace"), &NoProgress).unwrap();
    assert_eq!(input.kind(), InputKind::Trace);
    assert!(input.import_report().is_none());
    let mut first = input.events().unwrap();
    // A second pass begun before the first ends reads from its own position.
    let mut second = input.events().unwrap();
    let a = all_events(&mut first);
    let b = all_events(&mut second);
    assert!(!a.is_empty());
    assert_eq!(a, b);
    let bytes = std::fs::read(fixture("leak.vtrace")).unwrap();
    let in_memory = Input::from_bytes(bytes, &NoProgress).unwrap();
    assert_eq!(in_memory.path(), Path::new("-"));
    assert_eq!(all_events(&mut in_memory.events().unwrap()), a);
}

#[test]
fn a_snapshot_scans_like_its_imported_trace() {
    let path = fixture("torch/cnn_eval_accumulate.pickle.xz");
    let streamed = Input::open(&path, &NoProgress).unwrap().scan().unwrap();
    let (stream, _) = decompress(File::open(&path).unwrap()).unwrap();
    let imported = snapshot::import(stream, &|_| {}).unwrap();
    let written = Input::from_bytes(imported.trace, &NoProgress)
        .unwrap()
        .scan()
        .unwrap();
    assert_eq!(streamed.counts, written.counts);
    assert_eq!(streamed.counts, imported.report.event_counts);
    assert_eq!(streamed.times, written.times);
    assert!(streamed.times.is_some_and(|(a, b)| a < b));
    assert_eq!(streamed.chunks, None);
    assert_eq!(written.chunks, Some(1));
}

#[test]
fn unknown_content_is_an_error() {
    let e = Input::from_bytes(b"hello world".to_vec(), &NoProgress).unwrap_err();
    assert!(matches!(e, InputError::UnknownFormat { .. }), "{e}");
    let e = Input::from_bytes(Vec::new(), &NoProgress).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}
