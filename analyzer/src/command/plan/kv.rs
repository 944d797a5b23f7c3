//! `plan --kv-cache`: the largest KV cache an inference server fits under a
//! cap or on a card, from one recorded run of it (see
//! [`crate::simulate::kv`] and `docs/pools.md`). The run's CUDA graphs are
//! replayed in their pools, not summed.

use super::read::read_run;
use super::{PlanOptions, target_of};
use crate::Error;
use crate::input::Input;
use crate::progress::Progress;
use crate::simulate::kv::{captures, find_kv_cache, largest_kv_cache, most_captures};
use crate::simulate::plan::PlanError;
pub use crate::simulate::plan::result::{CapturePlan, KvPlace, KvPlanResult};
use crate::simulate::{OomAt, fidelity_under, scenarios};
use vramtrace_format::EventSource;

/// What `plan --kv-cache` looks for.
#[derive(Clone, Debug, Default)]
pub struct KvPlanOptions {
    /// Where to plan for (a device, a cap, else the recorded cap or card),
    /// and the settings.
    pub plan: PlanOptions,
    /// A part of the KV cache's site (`serve.py:31`), when the largest
    /// allocation outside the captures is not it.
    pub site: Option<String>,
    /// A KV block's bytes, when known: the answer is a whole number of them.
    pub block_bytes: Option<u64>,
    /// A KV cache of this many bytes: the question becomes the inverse, how
    /// many of the recorded CUDA graphs fit beside it.
    pub kv_bytes: Option<u64>,
    /// The batch size of each recorded capture, in capture order (a server
    /// captures the largest first), to answer in batch sizes.
    pub captured_batches: Option<Vec<u64>>,
}

/// Plans the KV cache of the one run in `input`.
pub fn kv_cache(
    input: &Input,
    options: &KvPlanOptions,
    progress: &dyn Progress,
) -> Result<KvPlanResult, Error> {
    if options.block_bytes == Some(0) {
        return Err(PlanError::ZeroBlock.into());
    }
    let run = read_run(input, &options.plan, progress)?;
    let path = input.path().display().to_string();
    let list = &run.extracted.list;
    let state = &run.extracted.state;
    let symbols = run.events.symbols();
    let site_name = |site| state.sites().name(site, symbols);
    let site = match &options.site {
        Some(wanted) => {
            let id = (0..list.allocs.len())
                .map(|i| list.allocs[i].site)
                .find(|&s| site_name(s).contains(wanted.as_str()))
                .ok_or_else(|| PlanError::NoKvSite {
                    path: path.clone(),
                    site: wanted.clone(),
                })?;
            Some(id)
        }
        None => None,
    };
    let kv = find_kv_cache(list, site).ok_or(PlanError::NoKvCache { path: path.clone() })?;
    let recorded = run
        .extracted
        .recorded_config
        .as_ref()
        .map(|(c, _)| c.clone())
        .map_err(|e| e.clone());
    let policies =
        scenarios(&recorded, options.plan.settings.clone(), false).map_err(|source| {
            Error::Simulate {
                path: input.path().to_owned(),
                source,
            }
        })?;
    let config = &policies[0].config;
    let place = target_of(&options.plan, &run)?;
    let unit = options.block_bytes.unwrap_or(1 << 20);
    let fit = largest_kv_cache(list, config, &place.sim, &kv, unit);
    // The recorded run under its own card and cap: does it replay exactly?
    let recorded_cap = run.extracted.limits.cap().map(|l| l.bytes);
    let fidelity = fidelity_under(list, config, run.extracted.recorded_capacity, recorded_cap);
    let basis = if fidelity.exact { "exact" } else { "estimate" };
    let place_of = match (&place.device, place.cap) {
        (Some(d), _) => KvPlace::Device(d.name.clone()),
        (None, Some(cap)) => KvPlace::Cap(cap),
        (None, None) => KvPlace::RecordedCard,
    };
    let blocks = |bytes: u64| options.block_bytes.map(|b| bytes / b);
    let next_oom_site = fit
        .next_oom
        .as_ref()
        .map(|o: &OomAt| crate::sites::site_label(&site_name(o.site)));
    let capture_plan = match options.kv_bytes {
        None => None,
        Some(kv_bytes) => {
            let (_, recorded) = captures(list);
            if recorded == 0 {
                return Err(PlanError::NoCaptures { path }.into());
            }
            if let Some(b) = &options.captured_batches
                && b.len() != recorded
            {
                return Err(PlanError::CaptureCount {
                    path,
                    captures: recorded,
                    given: b.len(),
                }
                .into());
            }
            let fit = most_captures(list, config, &place.sim, &kv, kv_bytes);
            let batches = options.captured_batches.clone();
            let kept = |k: usize| batches.as_ref().map(|b| &b[b.len() - k..]);
            let largest_batch = fit
                .kept
                .filter(|&k| k > 0)
                .and_then(|k| kept(k).and_then(|b| b.iter().max().copied()));
            let next_oom_site =
                (fit.next_oom.as_ref()).map(|o| crate::sites::site_label(&site_name(o.site)));
            Some(CapturePlan {
                kv_bytes,
                fit,
                batches,
                largest_batch,
                basis: "estimate",
                next_oom_site,
            })
        }
    };
    Ok(KvPlanResult {
        path,
        basis,
        fidelity,
        site: site_name(kv.site),
        kv_cache: kv,
        block_bytes: options.block_bytes,
        recorded_blocks: blocks(kv.recorded_bytes),
        largest_blocks: fit.largest_bytes.and_then(blocks),
        next_oom_site,
        place: place_of,
        pools: list.pools.len(),
        fit,
        captures: capture_plan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;
    use crate::testing::{Serving, serving_run};

    const MIB: u64 = 1 << 20;

    fn plan_of(serving: &Serving, options: &KvPlanOptions) -> Result<KvPlanResult, Error> {
        let input = Input::from_bytes(serving_run(serving), &NoProgress).unwrap();
        kv_cache(&input, options, &NoProgress)
    }

    /// The inverse question, whole: a KV cache past the largest that fits
    /// with every graph leaves room for the smallest batches only, named by
    /// the batch sizes given; a wrong count of them is refused.
    #[test]
    fn the_largest_batch_to_capture_beside_a_given_kv_cache() {
        let batches = vec![64, 32, 16, 8, 4, 2, 1];
        let serving = Serving {
            batches: batches.clone(),
            ..Serving::default()
        };
        let base = KvPlanOptions {
            plan: PlanOptions {
                cap: Some(4 << 30),
                ..PlanOptions::default()
            },
            block_bytes: Some(2 * MIB),
            ..KvPlanOptions::default()
        };
        let every = plan_of(&serving, &base).unwrap();
        let tight = every.fit.largest_bytes.unwrap() + 64 * MIB;
        let r = plan_of(
            &serving,
            &KvPlanOptions {
                kv_bytes: Some(tight),
                captured_batches: Some(batches.clone()),
                ..base.clone()
            },
        )
        .unwrap();
        let c = r.captures.as_ref().unwrap();
        let kept = c.fit.kept.unwrap();
        assert!(kept > 0 && kept < batches.len(), "{c:?}");
        assert_eq!(c.largest_batch, Some(batches[batches.len() - kept]));
        let line = crate::print::words::kv::answer(&r);
        assert!(line.starts_with("estimate: "), "{line}");
        assert!(
            line.contains(&format!(
                "capture batch sizes up to {}",
                batches[batches.len() - kept]
            )),
            "{line}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["captures"]["basis"], "estimate");
        // Without it, the JSON has no `captures` (its shape is kept).
        assert!(
            serde_json::to_value(&every)
                .unwrap()
                .get("captures")
                .is_none()
        );
        let wrong = plan_of(
            &serving,
            &KvPlanOptions {
                kv_bytes: Some(tight),
                captured_batches: Some(vec![8, 4]),
                ..base.clone()
            },
        )
        .unwrap_err();
        assert!(
            wrong
                .to_string()
                .contains("captured 7 CUDA graphs, and 2 batch sizes"),
            "{wrong}"
        );
    }
}
