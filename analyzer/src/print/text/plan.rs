//! The fit planner's answer as text.

use super::categories;
use crate::command::plan::KvPlanResult;
use crate::command::plan::{Basis, PlanResult, Point, request_words};
use crate::print::labels::site_label;
use crate::print::table::{Align, Table};
use crate::print::words::kv;
use crate::simulate::kv::KvBasis;
use crate::simulate::plan::Range;
use crate::units;

/// A plan as text: the runs and how the model reproduces them, the answer
/// in one line, the values simulated, how sizes follow the value, and the
/// value asked for in full.
pub fn plan(r: &PlanResult) -> String {
    let mut text = header(r);
    text.push_str(&format!("target     {}\n\n", target_words(r)));
    text.push_str(&runs_table(r));
    text.push_str(&format!(
        "\nanswer     {}\n\n",
        crate::print::words::plan::answer(&r.answer)
    ));
    text.push_str(&points_table(r));
    text.push_str(&laws(r));
    text.push_str(&no_law(r));
    text.push_str(&other_policies(r));
    text.push_str(&at(r));
    for n in &r.notes {
        let n = crate::print::words::plan::note(n);
        text.push_str(&format!("\nnote: {n}"));
    }
    if !r.notes.is_empty() {
        text.push('\n');
    }
    text
}

/// The first line: what is planned, from what, and how far to trust it.
fn header(r: &PlanResult) -> String {
    let what = r.varied.words();
    match r.basis {
        Basis::Runs => {
            let (loose, total) = crate::command::plan::loose_allocations(&r.laws);
            let fitted = if loose == 0 {
                "every allocation's size fitted exactly through every run".to_string()
            } else {
                format!(
                    "{} of {} allocations' sizes fitted exactly through every run, {} read off the runs with no law",
                    units::count((total - loose) as u64),
                    units::count(total as u64),
                    units::count(loose as u64)
                )
            };
            format!(
                "plan       the largest {what} from {} runs ({}: {fitted}, the rest replayed through the allocator)\n",
                r.runs.len(),
                r.figures
            )
        }
        Basis::OneRun => format!(
            "plan       the largest {what} from one run ({}: activations and temporaries assumed to grow in proportion)\n",
            r.figures
        ),
    }
}

/// The runs planned from, and whether the model reproduces each.
fn runs_table(r: &PlanResult) -> String {
    let mut runs = Table::new(&[
        (r.varied.words(), Align::Right),
        ("trace", Align::Left),
        ("allocations", Align::Right),
        ("unmatched", Align::Right),
        ("steps", Align::Right),
        ("peak reserved", Align::Right),
        ("simulated", Align::Right),
        ("model", Align::Right),
        ("reproduced", Align::Left),
    ]);
    for run in &r.runs {
        runs.row([
            run.value.to_string(),
            format!("{}{}", run.path, if run.reference { " *" } else { "" }),
            units::count(run.allocations as u64),
            units::count(run.unmatched as u64),
            units::count(run.steps),
            units::bytes(run.peak_reserved_bytes),
            units::bytes(run.simulated_peak_reserved_bytes),
            units::bytes(run.model_peak_reserved_bytes),
            if run.reproduced {
                "exact".into()
            } else {
                format!(
                    "no: allocated {} against {}",
                    units::bytes(run.model_peak_allocated_bytes),
                    units::bytes(run.simulated_peak_allocated_bytes)
                )
            },
        ]);
    }
    let mut text = runs.render(0);
    text.push_str(
        "* the run replayed (the largest value); simulated: its own requests without a limit; model: the fitted sizes at its value, the same way\n",
    );
    text
}

/// The values simulated: whether each fits, its peaks and its first OOM.
fn points_table(r: &PlanResult) -> String {
    let mut points = Table::new(&[
        (r.varied.words(), Align::Right),
        ("", Align::Left),
        ("peak reserved", Align::Right),
        ("peak allocated", Align::Right),
        ("cached at peak", Align::Right),
        ("range", Align::Left),
        ("first OOM", Align::Left),
    ]);
    for p in &r.points {
        points.row([
            p.value.to_string(),
            if p.fits { "fits" } else { "OOM" }.into(),
            units::bytes(p.peak_reserved_bytes),
            units::bytes(p.peak_allocated_bytes),
            format!(
                "{} ({})",
                units::bytes(p.cached_at_peak_bytes),
                units::percent(p.fragmentation)
            ),
            range_word(p.range).into(),
            oom_words(p),
        ]);
    }
    let mut text = points.render(0);
    text.push_str(&format!(
        "every figure {}; peaks up to the OOM where one comes\n",
        r.figures
    ));
    text
}

/// How sizes follow the value: one row per law (empty without laws).
fn laws(r: &PlanResult) -> String {
    if r.laws.is_empty() {
        return String::new();
    }
    let what = r.varied.words();
    let peak = r
        .answer
        .largest
        .map_or_else(|| "the run replayed".into(), |v| format!("{what} {v}"));
    let mut text = format!("\nhow sizes follow the {what}\n");
    let mut laws = Table::new(&[
        ("law", Align::Left),
        ("set-up", Align::Right),
        ("steady", Align::Right),
        ("live at the peak", Align::Right),
    ]);
    for l in &r.laws {
        laws.row([
            l.words.to_string(),
            units::count(l.setup_allocations as u64),
            units::count(l.steady_allocations as u64),
            units::bytes(l.bytes),
        ]);
    }
    text.push_str(&laws.render(2));
    text.push_str(&format!(
        "  set-up: allocations before the first optimizer step ended; live at the peak: at the peak of allocated memory of {peak}\n"
    ));
    text
}

/// The allocations that follow no law, with their sizes in each run.
fn no_law(r: &PlanResult) -> String {
    if r.no_law.is_empty() {
        return String::new();
    }
    let mut text =
        String::from("\nallocations that follow no simple law (read off the runs along a line):\n");
    for s in &r.no_law {
        let sizes: Vec<String> = s
            .sizes
            .iter()
            .map(|(v, b)| format!("{v}: {}", units::bytes(*b)))
            .collect();
        text.push_str(&format!(
            "  {} ({}): {}\n",
            site_label(&s.site),
            units::counted(s.allocations as u64, "allocation", "allocations"),
            sizes.join(", ")
        ));
    }
    text
}

/// The answer under each other policy planned.
fn other_policies(r: &PlanResult) -> String {
    let what = r.varied.words();
    let mut text = String::new();
    for p in &r.other_policies {
        let answer = match (p.largest, p.unbounded) {
            (Some(v), _) => format!("{what} {v} fits"),
            (None, true) => format!("every {what} fits"),
            (None, false) => format!("no {what} fits"),
        };
        text.push_str(&format!("\nwith {}: {answer}\n", p.policy));
    }
    text
}

/// The value asked for with `at`, in full (empty when none was asked).
fn at(r: &PlanResult) -> String {
    let Some(at) = &r.at else {
        return String::new();
    };
    let mut text = format!(
        "\nat {} {}: {}\n",
        r.varied.words(),
        at.point.value,
        crate::print::words::plan::at(at)
    );
    if at.categories.total() > 0 {
        text.push_str(&categories::table(
            &[("at the peak", &at.categories)],
            &[],
            2,
        ));
    }
    text
}

fn target_words(r: &PlanResult) -> String {
    let policy = format!("policy {}", r.policy);
    match (&r.device, &r.reserve, &r.limit, r.cap_bytes) {
        (Some(d), Some(reserve), _, _) => format!(
            "{}, less {} reserved {} = {} for the allocator; {policy}",
            // A preset's name says no size; the others' names do.
            if d.source.is_some() {
                format!("{}: {}", d.name, units::capacity(d.total_bytes))
            } else {
                d.name.clone()
            },
            units::capacity(reserve.bytes),
            reserve.covers,
            units::capacity(r.capacity_bytes)
        ),
        (_, _, Some(limit), _) => format!("the {} (no reserve taken off); {policy}", limit.noun()),
        (_, _, _, Some(cap)) => format!(
            "a cap of {} on the allocator (set_per_process_memory_fraction; no reserve taken off); {policy}",
            units::capacity(cap)
        ),
        _ => format!(
            "{} for the allocator; {policy}",
            units::capacity(r.capacity_bytes)
        ),
    }
}

fn range_word(range: Range) -> &'static str {
    match range {
        Range::Within => "recorded range",
        Range::Beyond => "beyond",
        Range::Below => "below",
    }
}

fn oom_words(p: &Point) -> String {
    p.oom.as_ref().map_or_else(String::new, |o| {
        request_words(&o.site, &o.phase, o.requested_bytes)
    })
}

/// `plan --kv-cache` as text: the answer, how it is known, and the search.
pub fn plan_kv(r: &KvPlanResult) -> String {
    let mut text = format!("trace     {}\n", r.path);
    let how = match r.kv_cache.basis {
        KvBasis::Named => "named",
        KvBasis::Inferred => {
            "inferred: the largest allocation made outside the captures and private pools"
        }
    };
    text.push_str(&format!(
        "kv cache  {} at {} ({how})\n",
        units::bytes(r.kv_cache.recorded_bytes),
        crate::print::labels::site_label(&r.site)
    ));
    if r.pools > 0 {
        text.push_str(&format!(
            "graphs    {} replayed as recorded (exact)\n",
            units::counted(r.pools as u64, "private pool", "private pools")
        ));
    }
    text.push_str(&format!(
        "search    {} simulations, in steps of {}\n",
        units::count(r.fit.runs as u64),
        match r.block_bytes {
            Some(b) => format!("one block ({})", units::bytes(b)),
            None => units::bytes(r.fit.unit_bytes),
        }
    ));
    if let Some(c) = &r.captures {
        text.push_str(&format!(
            "graphs    {} captured; {} more simulations with the KV cache at {}\n",
            units::count(c.fit.captures as u64),
            units::count(c.fit.runs as u64),
            units::bytes(c.kv_bytes)
        ));
        text.push_str(&format!(
            "\nanswer    {}\nbasis     estimate: a graph left out allocates nothing in its pool, but its eager warm-up stays in the replay; {}\n",
            kv::answer(r),
            if r.basis == "exact" {
                "the recorded run itself replays to the byte".to_string()
            } else {
                kv::basis(r)
            }
        ));
        return text;
    }
    text.push_str(&format!(
        "\nanswer    {}\nbasis     {}\n",
        kv::answer(r),
        kv::basis(r)
    ));
    text
}
