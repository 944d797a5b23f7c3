use super::*;
use crate::device::SimulatedDevice;
use crate::format::EventKind;

fn alloc(config: &str) -> CachingAllocator<SimulatedDevice> {
    CachingAllocator::new(
        SimulatedDevice::unlimited(),
        AllocatorConfig::parse(config).unwrap(),
    )
}

fn segment_sizes(a: &mut CachingAllocator<SimulatedDevice>) -> Vec<(EventKind, u64)> {
    a.drain_events()
        .filter_map(|e| match e {
            EventData::SegmentAlloc(s)
            | EventData::SegmentFree(s)
            | EventData::SegmentMap(s)
            | EventData::SegmentUnmap(s) => Some((e.kind(), s.size)),
            _ => None,
        })
        .collect()
}

#[test]
fn small_requests_share_a_2mib_segment() {
    let mut a = alloc("");
    let x = a.malloc(1, 0).unwrap();
    let y = a.malloc(1000, 0).unwrap();
    assert_eq!((x.size, y.size), (512, 1024));
    assert_eq!(y.addr, x.addr + 512);
    assert_eq!(
        segment_sizes(&mut a),
        vec![(EventKind::SegmentAlloc, SMALL_BUFFER)]
    );
    assert_eq!(a.stats().reserved_bytes.all.current, SMALL_BUFFER);
    assert_eq!(a.stats().allocated_bytes.all.current, 1536);
    assert_eq!(a.stats().requested_bytes.all.current, 1001);
}

#[test]
fn large_requests_get_20mib_or_rounded_segments() {
    let mut a = alloc("");
    a.malloc(10 * MIB, 0).unwrap();
    a.malloc(11 * MIB + 5, 0).unwrap();
    a.malloc(SMALL_SIZE + 1, 0).unwrap();
    assert_eq!(
        segment_sizes(&mut a),
        vec![
            (EventKind::SegmentAlloc, 10 * MIB),
            (EventKind::SegmentAlloc, 12 * MIB),
            (EventKind::SegmentAlloc, LARGE_BUFFER),
        ]
    );
}

#[test]
fn large_remainder_splits_only_above_1mib() {
    let mut a = alloc("");
    // 19 MiB of a 20 MiB segment: the 1 MiB remainder is not split off.
    let x = a.malloc(19 * MIB, 0).unwrap();
    assert_eq!(x.size, 20 * MIB);
    let mut b = alloc("");
    let y = b.malloc(18 * MIB, 0).unwrap();
    assert_eq!(y.size, 18 * MIB);
    let z = b.malloc(2 * MIB - 512, 0).unwrap();
    assert_eq!(z.addr, y.addr + 18 * MIB);
}

#[test]
fn frees_coalesce_and_blocks_are_reused() {
    let mut a = alloc("");
    let x = a.malloc(4 * MIB, 0).unwrap();
    let y = a.malloc(4 * MIB, 0).unwrap();
    a.free(x.addr).unwrap();
    a.free(y.addr).unwrap();
    let z = a.malloc(8 * MIB, 0).unwrap();
    assert_eq!(z.addr, x.addr);
    assert_eq!(a.stats().segment.all.current, 1);
    // A small request never takes a large block.
    let s = a.malloc(100, 0).unwrap();
    assert_eq!(a.stats().segment.all.current, 2);
    a.free(s.addr).unwrap();
    assert_eq!(a.free(s.addr), Err(AllocError::UnknownAddress(s.addr)));
}

#[test]
fn streams_do_not_share_blocks() {
    let mut a = alloc("");
    let x = a.malloc(100, 1).unwrap();
    a.free(x.addr).unwrap();
    let y = a.malloc(100, 2).unwrap();
    assert_ne!(x.addr, y.addr);
    assert_eq!(a.stats().segment.all.current, 2);
}

#[test]
fn empty_cache_returns_only_wholly_free_segments() {
    let mut a = alloc("");
    let x = a.malloc(4 * MIB, 0).unwrap();
    let y = a.malloc(30 * MIB, 0).unwrap();
    a.free(y.addr).unwrap();
    segment_sizes(&mut a);
    a.empty_cache();
    assert_eq!(
        segment_sizes(&mut a),
        vec![(EventKind::SegmentFree, 30 * MIB)]
    );
    a.free(x.addr).unwrap();
    a.empty_cache();
    assert_eq!(
        segment_sizes(&mut a),
        vec![(EventKind::SegmentFree, 20 * MIB)]
    );
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
    assert_eq!(a.stats().reserved_bytes.all.peak, 50 * MIB);
    assert_eq!(a.device().used(), 0);
}

#[test]
fn out_of_memory_releases_the_cache_then_reports() {
    let mut a = CachingAllocator::new(SimulatedDevice::new(64 * MIB), AllocatorConfig::default());
    let x = a.malloc(40 * MIB, 0).unwrap();
    a.free(x.addr).unwrap();
    // 50 MiB does not fit beside the cached 40 MiB segment: it is released.
    let y = a.malloc(50 * MIB, 0).unwrap();
    assert_eq!(a.stats().num_alloc_retries, 1);
    assert_eq!(a.stats().num_device_free, 1);
    let err = a.malloc(20 * MIB, 0).unwrap_err();
    assert_eq!(
        err,
        AllocError::OutOfMemory {
            requested: 20 * MIB,
            free_bytes: 14 * MIB
        }
    );
    assert_eq!(a.stats().num_ooms, 1);
    let oom = a
        .drain_events()
        .filter(|e| e.kind() == EventKind::Oom)
        .count();
    assert_eq!(oom, 1);
    a.free(y.addr).unwrap();
}

#[test]
fn oversize_blocks_are_not_split_and_reused_only_when_close() {
    let mut a = alloc("max_split_size_mb:40");
    let x = a.malloc(100 * MIB, 0).unwrap();
    a.free(x.addr).unwrap();
    // 50 MiB would leave 50 MiB unused: a new segment instead.
    let y = a.malloc(50 * MIB, 0).unwrap();
    assert_ne!(y.addr, x.addr);
    // 90 MiB is within 20 MiB: the whole block is handed out.
    let z = a.malloc(90 * MIB, 0).unwrap();
    assert_eq!((z.addr, z.size), (x.addr, 100 * MIB));
    // A small-enough request never gets an oversize block.
    a.free(z.addr).unwrap();
    let w = a.malloc(30 * MIB, 0).unwrap();
    assert_ne!(w.addr, x.addr);
}

#[test]
fn oversize_release_on_oom_frees_cached_oversize_segments() {
    let mut a = CachingAllocator::new(
        SimulatedDevice::new(200 * MIB),
        AllocatorConfig::parse("max_split_size_mb:40").unwrap(),
    );
    let x = a.malloc(100 * MIB, 0).unwrap();
    let _keep = a.malloc(60 * MIB, 0).unwrap();
    a.free(x.addr).unwrap();
    segment_sizes(&mut a);
    // 80 MiB may not take the 100 MiB block (20 MiB too large) and does not
    // fit beside it: the oversize block alone is released, no full retry.
    a.malloc(80 * MIB, 0).unwrap();
    assert_eq!(
        segment_sizes(&mut a),
        vec![
            (EventKind::SegmentFree, 100 * MIB),
            (EventKind::SegmentAlloc, 80 * MIB)
        ]
    );
    assert_eq!(a.stats().num_alloc_retries, 0);
    assert_eq!(a.stats().num_ooms, 0);
}

#[test]
fn record_stream_defers_free_completion() {
    let mut a = alloc("");
    let x = a.malloc(4096, 0).unwrap();
    a.record_stream(x.addr, 7).unwrap();
    a.record_stream(x.addr, 0).unwrap(); // its own stream: ignored
    a.drain_events().count();
    a.free(x.addr).unwrap();
    let kinds: Vec<_> = a.drain_events().map(|e| e.kind()).collect();
    assert_eq!(kinds, vec![EventKind::FreeRequested]);
    assert_eq!(a.stats().active.all.current, 1);
    // Not yet reusable.
    let y = a.malloc(4096, 0).unwrap();
    assert_ne!(y.addr, x.addr);
    a.synchronize_stream(7);
    let kinds: Vec<_> = a.drain_events().map(|e| e.kind()).collect();
    assert_eq!(kinds, vec![EventKind::Alloc, EventKind::FreeCompleted]);
    let z = a.malloc(4096, 0).unwrap();
    assert_eq!(z.addr, x.addr);
    assert_eq!(a.record_stream(1, 1), Err(AllocError::UnknownAddress(1)));
}

#[test]
fn expandable_segments_map_pages_and_unmap_on_empty_cache() {
    let mut a = alloc("expandable_segments:True");
    let x = a.malloc(49_152_000, 0).unwrap();
    let y = a.malloc(9_437_184, 0).unwrap();
    let s = a.malloc(12_288, 0).unwrap();
    assert_eq!(y.addr, x.addr + x.size);
    assert_eq!(
        segment_sizes(&mut a),
        vec![
            (EventKind::SegmentMap, 60 * MIB),
            (EventKind::SegmentMap, 2 * MIB)
        ]
    );
    // Growing past the mapped pages maps only what is missing.
    let z = a.malloc(10 * MIB, 0).unwrap();
    assert_eq!(z.addr, y.addr + y.size);
    assert_eq!(
        segment_sizes(&mut a),
        vec![(EventKind::SegmentMap, 20 * MIB)]
    );
    a.free(z.addr).unwrap();
    a.free(y.addr).unwrap();
    a.free(s.addr).unwrap();
    a.empty_cache();
    // x's last partial page stays mapped; the rest goes back.
    assert_eq!(
        segment_sizes(&mut a),
        vec![
            (EventKind::SegmentUnmap, 20 * MIB),
            (EventKind::SegmentUnmap, 2 * MIB)
        ]
    );
    assert_eq!(a.stats().reserved_bytes.all.current, 60 * MIB);
    a.free(x.addr).unwrap();
    a.empty_cache();
    assert_eq!(
        segment_sizes(&mut a),
        vec![(EventKind::SegmentUnmap, 60 * MIB)]
    );
    assert_eq!(a.device().used(), 0);
    assert_eq!(a.slab.live(), 0);
}

#[test]
fn garbage_collection_frees_old_cached_segments() {
    let mut a = CachingAllocator::new(
        SimulatedDevice::new(100 * MIB),
        AllocatorConfig::parse("garbage_collection_threshold:0.5").unwrap(),
    );
    a.set_memory_fraction(1.0);
    let x = a.malloc(30 * MIB, 0).unwrap();
    let _y = a.malloc(30 * MIB, 0).unwrap();
    a.free(x.addr).unwrap();
    // 60 MiB reserved > 50 MiB: the next miss collects the cached block
    // before allocating, without any out-of-memory retry.
    a.malloc(40 * MIB, 0).unwrap();
    assert_eq!(a.stats().num_device_free, 1);
    assert_eq!(a.stats().num_alloc_retries, 0);
    assert_eq!(a.stats().reserved_bytes.all.current, 70 * MIB);
}

#[test]
fn no_events_when_logging_is_off() {
    let mut a = alloc("");
    a.set_event_log(false);
    let x = a.malloc(10, 0).unwrap();
    a.free(x.addr).unwrap();
    assert_eq!(a.drain_events().count(), 0);
}

#[test]
fn random_workload_keeps_books_consistent() {
    // A small xorshift keeps the test deterministic without a dependency.
    let mut state = 0x2545F4914F6CDD1Du64;
    let mut rnd = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for conf in [
        "",
        "expandable_segments:True",
        "max_split_size_mb:40",
        "roundup_power2_divisions:4",
    ] {
        let mut a = CachingAllocator::new(
            SimulatedDevice::new(1 << 30),
            AllocatorConfig::parse(conf).unwrap(),
        );
        a.set_event_log(false);
        let mut live: Vec<Allocation> = Vec::new();
        for _ in 0..5000 {
            let r = rnd();
            if r % 3 == 0 && !live.is_empty() {
                let i = (rnd() as usize) % live.len();
                a.free(live.swap_remove(i).addr).unwrap();
            } else if r % 97 == 0 {
                a.empty_cache();
            } else {
                let size = match r % 4 {
                    0 => rnd() % 4096,
                    1 => rnd() % (2 * MIB),
                    2 => rnd() % (16 * MIB),
                    _ => rnd() % (120 * MIB),
                };
                if let Ok(x) = a.malloc(size, rnd() % 2) {
                    assert!(x.size >= size);
                    live.push(x);
                }
            }
            let s = a.stats();
            assert_eq!(
                s.allocated_bytes.all.current,
                live.iter().map(|x| x.size).sum::<u64>()
            );
            assert_eq!(s.reserved_bytes.all.current, a.device().used());
        }
        live.sort_by_key(|x| x.addr);
        for w in live.windows(2) {
            assert!(w[0].addr + w[0].size <= w[1].addr, "overlap under {conf:?}");
        }
        for x in live.drain(..) {
            a.free(x.addr).unwrap();
        }
        a.empty_cache();
        assert_eq!(a.stats().reserved_bytes.all.current, 0, "{conf:?}");
        assert_eq!(a.device().used(), 0);
        assert_eq!(a.slab.live(), 0, "{conf:?}");
    }
}

#[test]
fn events_carry_the_origin_set_before_the_call() {
    let mut a = alloc("");
    let origin = EventOrigin {
        time_ns: 42,
        stack: StackId(7),
        thread: 3,
    };
    a.set_event_origin(origin);
    let x = a.malloc(1 << 20, 0).unwrap();
    a.set_event_origin(EventOrigin {
        time_ns: 50,
        ..origin
    });
    a.free(x.addr).unwrap();
    a.empty_cache();
    let events = std::mem::take(a.event_log_mut());
    let seen: Vec<_> = events
        .iter()
        .map(|e| {
            let (stack, thread) = match &e.data {
                EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                    (b.stack, b.thread)
                }
                EventData::SegmentAlloc(s) | EventData::SegmentFree(s) => (s.stack, s.thread),
                EventData::EmptyCache(c) => (c.stack, c.thread),
                other => panic!("unexpected {other:?}"),
            };
            (e.data.kind(), e.time_ns, stack, thread)
        })
        .collect();
    let s = StackId(7);
    assert_eq!(
        seen,
        vec![
            (EventKind::SegmentAlloc, 42, s, 3),
            (EventKind::Alloc, 42, s, 3),
            (EventKind::FreeRequested, 50, s, 3),
            (EventKind::FreeCompleted, 50, s, 3),
            (EventKind::EmptyCache, 50, s, 3),
            (EventKind::SegmentFree, 50, s, 3),
        ]
    );
    assert_eq!(a.drain_events().count(), 0);
}

#[test]
fn a_loaded_segment_keeps_its_layout_and_serves_from_its_free_space() {
    use crate::format::{BlockState, SegmentState};
    let block = |addr, size, requested, status| BlockState {
        addr,
        size,
        requested,
        status,
        stack: StackId::NONE,
    };
    // Recorded at 0x1000_0000: in use, 4 MiB free (given as two pieces), in
    // use, then free to the end of the 20 MiB segment.
    let base = 0x1000_0000;
    let segment = SegmentState {
        addr: base,
        size: 20 * MIB,
        stream: 7,
        blocks: vec![
            block(base, 2 * MIB, 2 * MIB - 100, BlockStatus::Allocated),
            block(base + 2 * MIB, 3 * MIB, 0, BlockStatus::Free),
            block(base + 5 * MIB, MIB, 0, BlockStatus::Free),
            block(base + 6 * MIB, 4 * MIB, 4 * MIB, BlockStatus::PendingFree),
        ],
        ..Default::default()
    };
    let mut a = alloc("");
    let at = a.load_segment(&segment).unwrap();
    assert_eq!(a.drain_events().count(), 0, "taking over records no event");
    let st = a.stats();
    assert_eq!(st.reserved_bytes.all.current, 20 * MIB);
    assert_eq!(st.allocated_bytes.all.current, 6 * MIB);
    assert_eq!(st.num_device_alloc, 0);
    // The 4 MiB gap, merged, is best fit for 4 MiB on the segment's stream.
    let x = a.malloc(4 * MIB, 7).unwrap();
    assert_eq!(x.addr, at + 2 * MIB);
    assert_eq!(x.size, 4 * MIB);
    // The blocks in use are ordinary blocks: freed, they merge back.
    a.free(at).unwrap();
    a.free(at + 6 * MIB).unwrap();
    a.free(x.addr).unwrap();
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
    assert_eq!(
        segment_sizes(&mut a),
        vec![(EventKind::SegmentFree, 20 * MIB)]
    );

    let overlapping = SegmentState {
        blocks: vec![
            block(base, 2 * MIB, 1, BlockStatus::Allocated),
            block(base + MIB, 2 * MIB, 1, BlockStatus::Allocated),
        ],
        ..segment.clone()
    };
    assert!(matches!(
        a.load_segment(&overlapping),
        Err(AllocError::Unloadable { .. })
    ));
    let expandable = SegmentState {
        expandable: true,
        ..segment
    };
    assert!(a.load_segment(&expandable).is_err());
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
}

/// Requests whose rounding would wrap (from 2^64 − 512 with plain rounding,
/// from about 2^64 − 2 MiB with power-of-two divisions) or whose segment
/// would not fit in 64 bits are out of memory, with an `Oom` event: never a
/// block of 0 bytes at an address in use.
#[test]
fn sizes_that_cannot_be_rounded_are_out_of_memory() {
    for config in [
        "",
        "roundup_power2_divisions:4",
        "expandable_segments:True",
        "max_split_size_mb:20,roundup_power2_divisions:[256:1,512:2,>:8]",
    ] {
        let mut a = alloc(config);
        let held = a.malloc(4096, 0).unwrap();
        for requested in [
            u64::MAX,
            u64::MAX - 511,
            u64::MAX - (2 << 20),
            (1 << 63) + 1,
            MAX_BLOCK_SIZE + 1,
        ] {
            match a.malloc(requested, 0) {
                Err(AllocError::OutOfMemory { requested: r, .. }) => assert_eq!(r, requested),
                other => panic!("{config:?}: malloc({requested}) gave {other:?}"),
            }
        }
        assert_eq!(a.stats().num_ooms, 5, "{config:?}");
        assert_eq!(a.allocation(held.addr).map(|b| b.size), Some(4096));
        assert_eq!(a.stats().allocation.all.current, 1);
        let ooms = a
            .drain_events()
            .filter(|e| matches!(e, EventData::Oom(_)))
            .count();
        assert_eq!(ooms, 5, "{config:?}");
    }
}

#[test]
fn rounding_never_wraps() {
    for config in [
        "",
        "roundup_power2_divisions:4",
        "roundup_power2_divisions:16",
    ] {
        let c = AllocatorConfig::parse(config).unwrap();
        for requested in [MAX_BLOCK_SIZE - 1, MAX_BLOCK_SIZE, MAX_BLOCK_SIZE - 513] {
            let size = c.checked_round_size(requested).unwrap();
            assert!(
                size >= requested && size <= MAX_BLOCK_SIZE,
                "{config}: {requested}"
            );
            assert!(allocation_size(size) >= size);
        }
        for requested in [MAX_BLOCK_SIZE + 1, u64::MAX - 511, u64::MAX] {
            assert_eq!(c.checked_round_size(requested), None);
            assert_eq!(c.round_size(requested), MAX_BLOCK_SIZE);
        }
    }
}

const GRAPH_POOL: PoolId = PoolId(1, 0);
const SHARED_POOL: PoolId = PoolId(0, 1);

#[test]
fn a_private_pool_and_the_default_pools_never_share_free_blocks() {
    let mut a = alloc("");
    let x = a.malloc(4 * MIB, 0).unwrap();
    a.free(x.addr).unwrap();
    // The default pool's free 20 MiB segment does not serve the graph's pool.
    a.begin_allocate_to_pool(GRAPH_POOL);
    let y = a.malloc_in(4 * MIB, 0, GRAPH_POOL).unwrap();
    a.end_allocate_to_pool();
    a.free(y.addr).unwrap();
    // Nor does the graph pool's serve the default pools.
    let z = a.malloc(4 * MIB, 0).unwrap();
    assert_eq!(z.addr, x.addr);
    assert_ne!(y.addr, x.addr);
    let events: Vec<EventData> = a.drain_events().collect();
    let segments = events
        .iter()
        .filter(|e| matches!(e, EventData::SegmentAlloc(_)))
        .count();
    assert_eq!(segments, 2);
    // The graph pool's segment says so, right after its segment_alloc.
    let pooled: Vec<SegmentPoolEvent> = events
        .iter()
        .filter_map(|e| match e {
            EventData::SegmentPool(p) => Some(*p),
            _ => None,
        })
        .collect();
    assert_eq!(pooled.len(), 1);
    assert_eq!(pooled[0].pool, GRAPH_POOL);
    assert_eq!(
        pooled[0].addr & !(LARGE_BUFFER - 1),
        y.addr & !(LARGE_BUFFER - 1)
    );
}

#[test]
fn a_held_pool_survives_empty_cache_and_a_released_one_does_not() {
    let mut a = alloc("");
    a.begin_allocate_to_pool(GRAPH_POOL);
    let y = a.malloc_in(30 * MIB, 0, GRAPH_POOL).unwrap();
    a.end_allocate_to_pool();
    a.free(y.addr).unwrap();
    a.drain_events().for_each(drop);
    a.empty_cache();
    assert_eq!(segment_sizes(&mut a), vec![]);
    assert_eq!(a.pool_usage()[0].reserved, 30 * MIB);
    assert_eq!(a.pool_usage()[0].cached_free, 30 * MIB);
    a.release_pool(GRAPH_POOL);
    a.empty_cache();
    assert_eq!(
        segment_sizes(&mut a),
        vec![(EventKind::SegmentFree, 30 * MIB)]
    );
    assert_eq!(a.pool_usage()[0].reserved, 0);
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
}

#[test]
fn graphs_sharing_a_pool_reuse_each_others_freed_memory() {
    // Two captures of 8 MiB of temporaries each: in one shared pool they
    // need one 20 MiB segment; in a pool each, two.
    let capture = |a: &mut CachingAllocator<SimulatedDevice>, pool| {
        a.begin_allocate_to_pool(pool);
        let t = a.malloc_in(8 * MIB, 7, pool).unwrap();
        a.free(t.addr).unwrap();
        a.end_allocate_to_pool();
    };
    let mut shared = alloc("");
    capture(&mut shared, SHARED_POOL);
    capture(&mut shared, SHARED_POOL);
    assert_eq!(shared.stats().reserved_bytes.all.current, LARGE_BUFFER);
    let mut apart = alloc("");
    capture(&mut apart, PoolId(1, 0));
    capture(&mut apart, PoolId(2, 0));
    assert_eq!(apart.stats().reserved_bytes.all.current, 2 * LARGE_BUFFER);
}

#[test]
fn no_whole_cache_release_while_a_capture_is_under_way() {
    let mut a = CachingAllocator::new(SimulatedDevice::new(64 * MIB), AllocatorConfig::default());
    let x = a.malloc(40 * MIB, 0).unwrap();
    a.free(x.addr).unwrap();
    a.begin_allocate_to_pool(GRAPH_POOL);
    // The default pool's cached 40 MiB would have to go: during a capture
    // PyTorch does not release it, and the allocation fails.
    assert!(a.malloc_in(40 * MIB, 0, GRAPH_POOL).is_err());
    a.end_allocate_to_pool();
    assert!(a.malloc_in(40 * MIB, 0, GRAPH_POOL).is_ok());
}

#[test]
fn private_pools_take_plain_segments_under_expandable_segments() {
    let mut a = alloc("expandable_segments:True");
    a.malloc(4 * MIB, 0).unwrap();
    a.begin_allocate_to_pool(GRAPH_POOL);
    a.malloc_in(4 * MIB, 0, GRAPH_POOL).unwrap();
    a.end_allocate_to_pool();
    let kinds: Vec<EventKind> = segment_sizes(&mut a).into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, vec![EventKind::SegmentMap, EventKind::SegmentAlloc]);
}
