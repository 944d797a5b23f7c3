// The explorer's model: what the page draws, built from the data's JSON
// and its decoded columns. Event indices and times count from the window's
// first event; the page shows them from the trace's start.
/* global decode */
/* exported model */
const model = (() => {
  const { unzigzag } = decode;
  const QUANTITIES = ["allocated", "reserved", "cached"];
  // The columns of each quantity's last value and its distances to the
  // bucket's highest and lowest (data.rs); "pools" (bytes in private
  // pools) only in a trace that has them.
  const COLUMN_PREFIX = { allocated: "a", reserved: "r", cached: "c", pools: "p" };
  // Coarser levels merge this many buckets of the level below, down to
  // about COARSEST buckets.
  const MERGED = 4, COARSEST = 600;

  function emptyLevel(bucketEvents, buckets, quantities) {
    const level = { bucketEvents, buckets };
    for (const q of quantities) level[q] = { min: new Float64Array(buckets), max: new Float64Array(buckets), last: new Float64Array(buckets) };
    return level;
  }

  // Memory over the events at every resolution: the data's buckets, then
  // levels of MERGED buckets to one, each bucket with each quantity's
  // lowest, highest and last value.
  function levels(data, columns) {
    const buckets = columns.a_last.length;
    const quantities = columns.p_last ? [...QUANTITIES, "pools"] : QUANTITIES;
    const finest = emptyLevel(data.bucket_events, buckets, quantities);
    const last = { allocated: 0, reserved: 0, cached: 0, pools: 0 };
    for (let b = 0; b < buckets; b++) {
      for (const q of quantities) {
        const prefix = COLUMN_PREFIX[q];
        last[q] += unzigzag(columns[prefix + "_last"][b]);
        finest[q].last[b] = last[q];
        finest[q].max[b] = last[q] + columns[prefix + "_hi"][b];
        finest[q].min[b] = last[q] - columns[prefix + "_lo"][b];
      }
    }
    const all = [finest];
    while (all[all.length - 1].buckets > COARSEST) {
      const fine = all[all.length - 1];
      const level = emptyLevel(fine.bucketEvents * MERGED, Math.ceil(fine.buckets / MERGED), quantities);
      for (let b = 0; b < level.buckets; b++) {
        const lo = b * MERGED, hi = Math.min(fine.buckets, lo + MERGED) - 1;
        for (const q of quantities) {
          let min = Infinity, max = -Infinity;
          for (let k = lo; k <= hi; k++) { min = Math.min(min, fine[q].min[k]); max = Math.max(max, fine[q].max[k]); }
          level[q].min[b] = min;
          level[q].max[b] = max;
          level[q].last[b] = fine[q].last[hi];
        }
      }
      all.push(level);
    }
    return all;
  }

  // The knots of the x axes, as data.rs computed them: each bucket's first
  // and last event with its time and busy time (sent as what busy time cut
  // from time), then one past the last event, a little after it.
  function knots(data, columns) {
    const n = columns.kn_index.length;
    const index = new Float64Array(n + 1), time = new Float64Array(n + 1), busy = new Float64Array(n + 1);
    let i = 0, t = 0, cut = 0;
    for (let k = 0; k < n; k++) {
      i += columns.kn_index[k];
      t += unzigzag(columns.kn_time[k]);
      cut += unzigzag(columns.kn_cut[k]);
      index[k] = i; time[k] = t; busy[k] = t - cut;
    }
    index[n] = data.axis_end.index;
    time[n] = data.axis_end.time;
    busy[n] = data.axis_end.busy;
    return { index, time, busy };
  }

  // The allocations kept one by one: when each was made and freed (event
  // and time), and what it was.
  function allocations(data, columns, endTime) {
    const count = columns.al_size.length, events = data.events;
    const kept = {
      count,
      allocEvent: new Float64Array(count),
      freeEvent: new Float64Array(count),
      allocTime: new Float64Array(count),
      freeTime: new Float64Array(count),
      freed: new Uint8Array(count),
      size: columns.al_size,
      site: columns.al_site,
      stack: columns.al_stack,
      // Its phase path's index plus one; 0 for none.
      phase: columns.al_phase,
      initial: columns.al_initial,
      // The category's code, plus 8 when a tag said it.
      category: columns.al_category,
      // Zigzag: its size less its requested size.
      slack: columns.al_slack,
    };
    let index = data.first_index, time = 0;
    for (let k = 0; k < count; k++) {
      index += columns.al_index[k];
      time += unzigzag(columns.al_time[k]);
      const event = index - data.first_index;
      kept.allocEvent[k] = event;
      kept.allocTime[k] = time;
      // Events from its allocation to its free, both counted; 0: never freed.
      const life = columns.al_life[k];
      kept.freed[k] = life > 0 ? 1 : 0;
      kept.freeEvent[k] = life > 0 ? event + life - 1 : events;
      kept.freeTime[k] = life > 0 ? time + unzigzag(columns.al_free_time[k]) : endTime;
    }
    return kept;
  }

  // Stacks: each a list of frame indices, innermost first.
  function stacks(columns) {
    const out = [];
    let at = 0;
    for (let s = 0; s < columns.st_len.length; s++) {
      const length = columns.st_len[s];
      out.push(columns.st_frames.subarray(at, at + length));
      at += length;
    }
    return out;
  }

  // The checkpoints of the JSON, each with its event and its segments and
  // their blocks from the columns.
  function checkpoints(data, columns) {
    const out = data.checkpoints.map((c) => ({ ...c, event: c.index - data.first_index }));
    let segment = 0, block = 0;
    out.forEach((checkpoint, k) => {
      checkpoint.segments = [];
      for (let s = 0; s < columns.cp_segments[k]; s++, segment++) {
        const seg = {
          addr: columns.sg_addr[segment],
          size: columns.sg_size[segment],
          expandable: columns.sg_flags[segment] & 1,
          used: columns.sg_used[segment],
          usedBlocks: columns.sg_used_blocks[segment],
          largestFree: columns.sg_largest_free[segment],
          blocks: [],
        };
        let end = 0;
        for (let j = 0; j < columns.sg_blocks[segment]; j++, block++) {
          const offset = end + unzigzag(columns.bl_gap[block]);
          const size = columns.bl_size[block];
          // `allocation`: its record among the kept allocations, or -1.
          seg.blocks.push({ offset, size, pending: columns.bl_pending[block], stack: columns.bl_stack[block], allocation: columns.bl_alloc[block] - 1 });
          end = offset + size;
        }
        checkpoint.segments.push(seg);
      }
    });
    return out;
  }

  // The phase instances, each with its path (`iter3/forward`), for the
  // leaks section's links.
  function phases(data) {
    const p = data.phases;
    const out = p.name.map((name, k) => ({ name, depth: p.depth[k], begin: p.begin[k], end: p.end[k], tint: p.tint[k] }));
    const open = [];
    for (const phase of out) {
      while (open.length && (open[open.length - 1].depth >= phase.depth || open[open.length - 1].end < phase.begin)) open.pop();
      phase.path = (open.length ? open[open.length - 1].path + "/" : "") + phase.name;
      open.push(phase);
    }
    return out;
  }

  // The buttons that zoom to a repeated phase's repetitions (`want`, its
  // path with numbers as #): one per repetition, named by its path
  // (iter3/forward), where the paths tell them apart; repetitions whose
  // paths are alike, one after another, in one button ("forward ×29")
  // that zooms to them all, not 29 buttons of one name.
  function repetitionChips(phases, want) {
    const normalized = (s) => s.replace(/[0-9]+/g, "#");
    const chips = [];
    for (const p of phases) {
      if (normalized(p.path) !== want) continue;
      const last = chips[chips.length - 1];
      if (last && last.path === p.path) {
        last.count++; last.end = p.end;
        last.label = `${p.path} ×${last.count}`;
      } else chips.push({ path: p.path, label: p.path, count: 1, begin: p.begin, end: p.end });
    }
    return chips;
  }

  // Everything the page draws.
  function build(data, columns) {
    const axisKnots = knots(data, columns);
    return {
      levels: levels(data, columns),
      knots: axisKnots,
      allocations: allocations(data, columns, axisKnots.time[axisKnots.time.length - 1]),
      stacks: stacks(columns),
      checkpoints: checkpoints(data, columns),
      phases: phases(data),
    };
  }

  return { build, levels, knots, allocations, stacks, checkpoints, phases, repetitionChips };
})();
