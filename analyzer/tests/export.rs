//! `export --format pprof` read back as a pprof reader reads it: gunzip,
//! then `perftools.profiles.Profile`; its samples sum to the allocated peak
//! the summary reports, and every id it names exists.

use prost::Message;
use std::io::Read;
use std::path::{Path, PathBuf};
use vramtrace::command::ReplayOptions;
use vramtrace::command::export::pprof;
use vramtrace::command::summary::{SummaryOptions, summary};
use vramtrace::input::Input;
use vramtrace::print::pprof::{Profile, encode, profile};
use vramtrace::progress::NoProgress;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(name)
}

#[test]
fn a_pprof_profile_reads_back_and_holds_the_peak() {
    for name in [
        "leak.vtrace",
        "two-devices.vtrace",
        "torch/gpt2_train.pickle.xz",
    ] {
        let input = Input::open(fixture(name), &NoProgress).unwrap();
        let export = pprof(&input, &ReplayOptions::default(), &NoProgress).unwrap();
        let profile = profile(&export.graphs, export.start_unix_ns);
        let file = encode(&profile).unwrap();
        assert_eq!(
            &file[..2],
            &[0x1f, 0x8b],
            "{name}: gzip, as pprof writes it"
        );
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(&file[..])
            .read_to_end(&mut bytes)
            .unwrap();
        let read = Profile::decode(&bytes[..]).unwrap();
        assert_eq!(read, profile, "{name}");
        let s = |i: i64| read.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = read
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        if name == "two-devices.vtrace" {
            // A reader totals a sample type over every sample: one pair
            // per device, so that no total adds two devices' peaks.
            assert_eq!(
                types,
                [
                    ("inuse_space_device0", "bytes"),
                    ("inuse_objects_device0", "count"),
                    ("inuse_space_device1", "bytes"),
                    ("inuse_objects_device1", "count"),
                ]
            );
        } else {
            assert_eq!(
                types,
                [("inuse_space", "bytes"), ("inuse_objects", "count")]
            );
        }
        let location_ids: Vec<u64> = read.location.iter().map(|l| l.id).collect();
        let function_ids: Vec<u64> = read.function.iter().map(|f| f.id).collect();
        assert!(
            read.sample
                .iter()
                .all(|x| x.location_id.iter().all(|id| location_ids.contains(id)))
        );
        assert!(read.location.iter().all(|l| {
            l.line
                .iter()
                .all(|line| function_ids.contains(&line.function_id))
        }));
        // Each device's samples sum to its allocated peak, and so does
        // its sample type's total, the figure a reader shows.
        let summary = summary(&input, &SummaryOptions::default(), &NoProgress).unwrap();
        for (i, d) in summary.devices.iter().enumerate() {
            let total: i64 = read.sample.iter().map(|x| x.value[2 * i]).sum();
            assert_eq!(
                total as u64,
                d.peaks.peak_allocated.bytes,
                "{name}: the total of {}",
                types[2 * i].0
            );
            let device = d.peaks.device as i64;
            let bytes: i64 = read
                .sample
                .iter()
                .filter(|x| {
                    x.label
                        .iter()
                        .any(|l| s(l.key) == "device" && l.num == device)
                })
                .map(|x| x.value[2 * i])
                .sum();
            assert_eq!(
                bytes as u64, d.peaks.peak_allocated.bytes,
                "{name}, device {device}"
            );
        }
    }
}
