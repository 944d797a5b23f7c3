//! The plan's sentences: its answer line, the line at a value asked for,
//! its notes, and a report's line on how far the value can go. The JSON
//! keys that carry them (`answer.line`, `at.line`, `notes`,
//! `fits_up_to.line`) are written here too, from the same words.

use crate::command::plan::{
    Answer, AtValue, Basis, FitsUpTo, Framing, Note, Place, Point, request_words,
};
use crate::simulate::plan::{self, Range, Varied};
use crate::units;
use serde::{Serialize, Serializer};

/// Where the plan is for, in words: `under the 20.00 GiB cap`, `on H100 80GB`.
pub fn place(place: &Place) -> String {
    match place {
        Place::Device(name) => format!("on {name}"),
        Place::Limit(l) => format!("under the {}", l.noun()),
        Place::Cap(c) => format!("under a cap of {}", units::capacity(*c)),
        Place::Capacity(c) => format!("in {}", units::capacity(*c)),
    }
}

/// What the answer is with cuDNN's workspaces asked for.
fn workspaces(varied: Varied, kept: &plan::Found, largest: Option<u64>) -> String {
    let what = varied.words();
    let with = match (kept.largest, kept.unbounded) {
        (Some(v), _) if Some(v) == largest => {
            return "; the same with every convolution's cuDNN workspace at the size the runs asked for".into();
        }
        (Some(v), _) => format!("{what} {v}"),
        (None, true) => format!("every {what}"),
        (None, false) => format!("no {what}"),
    };
    format!(
        "; {with} with every convolution's cuDNN workspace at the size the runs asked for (near the limit, cuDNN falls back to algorithms that need less, and are slower)"
    )
}

/// `beyond the recorded 4–8` and the like.
pub fn range(framing: &Framing, range: Range) -> String {
    let (lo, hi) = framing.recorded;
    let recorded = if lo == hi {
        format!("the recorded {lo}")
    } else {
        format!("the recorded {lo}–{hi}")
    };
    match range {
        Range::Within => format!("within {recorded}"),
        Range::Beyond => format!("beyond {recorded}"),
        Range::Below => format!("below {recorded}"),
    }
}

/// How a failing point failed: `at train.py:41 in iter2/backward, asking
/// for 1.2 GiB`.
pub fn failure(p: &Point) -> String {
    match &p.oom {
        Some(o) => format!("at {}", request_words(&o.site, &o.phase, o.requested_bytes)),
        None => "nowhere".into(),
    }
}

/// The answer in one line: the text printer prints exactly this, and JSON
/// carries it as `answer.line`.
pub fn answer(a: &Answer) -> String {
    let mut line = answer_alone(a);
    if let Some(kept) = &a.with_workspaces {
        line.push_str(&workspaces(a.framing.varied, kept, a.largest));
    }
    line
}

/// The answer without what it is with cuDNN's workspaces asked for.
fn answer_alone(a: &Answer) -> String {
    let framing = &a.framing;
    let figures = match framing.basis {
        Basis::OneRun => "estimate: activations and temporaries assumed to scale",
        Basis::Runs => "inferred",
    };
    let what = framing.varied.words();
    let place = place(&framing.place);
    if a.unbounded {
        return format!(
            "memory does not grow with the {what}: every {what} fits {place} as well as any (peak {} reserved, {figures})",
            a.fits
                .as_ref()
                .map_or_else(|| "-".into(), |p| units::bytes(p.peak_reserved_bytes))
        );
    }
    match (a.largest, &a.fits) {
        (Some(v), Some(p)) => {
            let mut line = format!(
                "{what} {v} fits {place} (peak {} reserved, {} to spare, {figures}; {}{})",
                units::bytes(p.peak_reserved_bytes),
                units::bytes(p.spare_bytes),
                range(framing, p.range),
                super::simulate::survived(p.survived_failures)
            );
            match &a.next {
                Some(n) => {
                    line.push_str(&format!("; {} runs out of memory {}", n.value, failure(n)))
                }
                None => line.push_str(&format!(
                    "; the search stops there ({what}s above {} are not tried)",
                    plan::LARGEST_VALUE
                )),
            }
            line
        }
        _ => match &a.next {
            Some(n) => format!(
                "not even {what} {} fits {place}: it runs out of memory {} ({figures})",
                n.value,
                failure(n)
            ),
            None => format!("no {what} fits {place}"),
        },
    }
}

/// The full result at one value in one line.
pub fn at(at: &AtValue) -> String {
    let (p, framing) = (&at.point, &at.framing);
    let figures = match framing.basis {
        Basis::OneRun => "estimate",
        Basis::Runs => "inferred",
    };
    let range = range(framing, p.range);
    let place = place(&framing.place);
    let what = framing.varied.words();
    if p.fits {
        format!(
            "{what} {} fits {place}: peak {} reserved, {} allocated, {} cached at the peak ({figures}; {range})",
            p.value,
            units::bytes(p.peak_reserved_bytes),
            units::bytes(p.peak_allocated_bytes),
            units::percent(p.fragmentation)
        )
    } else {
        format!(
            "{what} {} runs out of memory {place} {} ({figures}; {range})",
            p.value,
            failure(p)
        )
    }
}

/// A plan's note in words.
pub fn note(note: &Note) -> String {
    match note {
        Note::OneRun(varied) => {
            let what = varied.words();
            format!(
                "one run only: activations and temporaries are assumed to grow in proportion to the {what}, everything else to stay; record a second {what} for laws fitted exactly"
            )
        }
        Note::TwoRuns(varied) => format!(
            "two runs: each size is fitted through both exactly; a size whose law changes outside them (the larger of two terms, say) is not seen: a third run at another {} checks it",
            varied.words()
        ),
        Note::Unmatched {
            path,
            unmatched,
            reference_unmatched,
        } => format!(
            "{path}: {unmatched} of its allocations have no partner in the run replayed (left out), which has {reference_unmatched} without one in it (made only above this run's value: left out at it and below; above it, those holding activations or temporaries grow in proportion, the rest keep their size)"
        ),
        Note::Workspaces(n) => format!(
            "{} are cuDNN convolutions' workspaces (made under a convolution, freed before anything else is allocated): the answer and the values simulated leave them out, as when cuDNN falls back to algorithms that need none; where one is asked for and cannot be had, the run goes on, as PyTorch's does",
            units::counted(*n as u64, "allocation", "allocations")
        ),
        Note::MidRun => {
            "the replayed run starts mid-run: the blocks live at its start keep their recorded sizes"
                .into()
        }
        Note::Loose {
            varied,
            loose,
            total,
            next,
        } => format!(
            "{loose} of {total} allocations follow no law through these runs (their sizes past the largest run are guessed along a line): record one more run, at {} {next}, to fit them",
            varied.words()
        ),
        Note::ThirdRun { varied, value } => format!(
            "record one more run, at {} {value} (nine tenths of the answer, which fits), and plan from all three: a size that stops growing past the recorded runs (an attention kernel's workspace sized by the GPU's multiprocessors, say) shows only then",
            varied.words()
        ),
        Note::ReserveOffCap => {
            "the reserve stated is not taken off the recorded cap: a cap bounds the allocator alone"
                .into()
        }
    }
}

/// A report's line on how far the value can go: the plan's answer, or why
/// there is none.
pub fn fits_up_to(f: &FitsUpTo) -> String {
    match &f.planned {
        Ok(a) => answer(a),
        Err(why) => format!("no plan from the two runs: {why}"),
    }
}

/// As JSON: the answer's figures with its sentence, `line`, after `range`.
impl Serialize for Answer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            largest: Option<u64>,
            unbounded: bool,
            at_ceiling: bool,
            range: Option<Range>,
            line: String,
            fits: &'a Option<Point>,
            next: &'a Option<Point>,
            largest_with_workspaces: Option<u64>,
            simulations: u32,
        }
        View {
            largest: self.largest,
            unbounded: self.unbounded,
            at_ceiling: self.at_ceiling,
            range: self.range,
            line: answer(self),
            fits: &self.fits,
            next: &self.next,
            largest_with_workspaces: self.largest_with_workspaces(),
            simulations: self.simulations,
        }
        .serialize(s)
    }
}

/// As JSON: the point's figures, then the categories, the laws and its
/// sentence, `line`.
impl Serialize for AtValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            #[serde(flatten)]
            point: &'a Point,
            categories: &'a crate::analysis::categories::CategoryTable,
            laws: &'a [(crate::simulate::plan::law::LawKind, u64)],
            line: String,
        }
        View {
            point: &self.point,
            categories: &self.categories,
            laws: &self.laws,
            line: at(self),
        }
        .serialize(s)
    }
}

/// As JSON: the note's sentence.
impl Serialize for Note {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&note(self))
    }
}

/// As JSON: `varied`, `largest`, and the sentence, `line`.
impl Serialize for FitsUpTo {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View {
            varied: Option<Varied>,
            largest: Option<u64>,
            line: String,
        }
        View {
            varied: self.varied,
            largest: self.largest,
            line: fits_up_to(self),
        }
        .serialize(s)
    }
}
