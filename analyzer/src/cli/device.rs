//! The device `simulate` and `plan` work out memory for, one set of flags
//! for both (`#[command(flatten)]`): its size or GPU, the reserve off it,
//! and the allocator's settings.

use vramtrace::command::simulate::Device;
use vramtrace::simulate::gpus::{self, GpuPreset};
use vramtrace::units;
use vramtrace_allocator::AllocatorConfig;

/// The device's flags, shared by `simulate` and `plan`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DeviceArgs {
    /// The device's memory, with its unit: GiB binary (24GiB), GB decimal
    /// (80GB = 74.5 GiB); the reserve comes off it. Without it or --gpu:
    /// `simulate` is unlimited, `plan` takes the cap the runs recorded, else
    /// their card.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_bytes, conflicts_with = "gpu")]
    pub capacity: Option<u64>,
    /// A GPU, by name, whose memory to work out: h100, h200, a100-80gb,
    /// a100-40gb, l40s, a30, a10, l4, rtx4090, rtx3090, v100-32gb, t4
    /// (docs/simulate.md says where each figure comes from).
    #[arg(long, value_name = "NAME", value_parser = parse_gpu)]
    pub gpu: Option<&'static GpuPreset>,
    /// Memory kept off the device for the CUDA context (and NCCL): the
    /// device's memory less this is what the allocator gets. Default:
    /// measured by the recording, else an estimate (512MiB, 1GiB more when
    /// the trace shows NCCL).
    #[arg(long, value_name = "SIZE", value_parser = units::parse_bytes)]
    pub reserve: Option<u64>,
    /// Allocator settings, in PYTORCH_CUDA_ALLOC_CONF syntax
    /// (`expandable_segments:True,max_split_size_mb:128`); repeatable:
    /// `simulate` simulates each as a policy, `plan` plans for the first
    /// and gives each other one's largest value beside it. Default: the
    /// recorded settings.
    #[arg(long = "alloc-conf", value_name = "CONF")]
    pub alloc_conf: Vec<String>,
}

impl DeviceArgs {
    /// The device `--gpu` or `--capacity` names, if either does.
    pub fn device(&self) -> Option<Device> {
        match (self.gpu, self.capacity) {
            (Some(gpu), _) => Some(Device::preset(gpu)),
            (None, Some(bytes)) => Some(Device::of_size(bytes)),
            (None, None) => None,
        }
    }

    /// The `--alloc-conf` values parsed: a bad one is a usage error naming
    /// it.
    pub fn settings(&self) -> anyhow::Result<Vec<AllocatorConfig>> {
        parse_confs(&self.alloc_conf)
    }
}

/// A `--gpu` name: a preset, or an error listing them (or the presets an
/// ambiguous name matches).
fn parse_gpu(name: &str) -> Result<&'static GpuPreset, String> {
    gpus::lookup(name).map_err(|e| e.to_string())
}

/// Parses the `--alloc-conf` values: a bad one is a usage error naming it.
fn parse_confs(confs: &[String]) -> anyhow::Result<Vec<AllocatorConfig>> {
    confs
        .iter()
        .map(|c| {
            AllocatorConfig::parse(c)
                .map_err(|e| anyhow::anyhow!("invalid --alloc-conf '{c}': {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_alloc_conf_names_its_key() {
        let e = parse_confs(&["expandable_segments:True,bogus_key:3".into()]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("bogus_key"), "{text}");
        assert!(!text.contains('\n'));
        assert_eq!(
            parse_confs(&["max_split_size_mb:128".into()])
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn simulate_and_plan_take_the_same_device_flags() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Both {
            #[command(flatten)]
            device: DeviceArgs,
        }
        let b = Both::try_parse_from([
            "x",
            "--gpu",
            "l4",
            "--reserve",
            "1GiB",
            "--alloc-conf",
            "expandable_segments:True",
        ])
        .unwrap();
        assert_eq!(b.device.reserve, Some(1 << 30));
        assert_eq!(b.device.settings().unwrap().len(), 1);
        assert!(b.device.device().is_some());
        assert!(Both::try_parse_from(["x", "--gpu", "l4", "--capacity", "24GiB"]).is_err());
    }
}
