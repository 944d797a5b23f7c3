//! The memory of common GPUs, for `simulate --gpu NAME`.
//!
//! Each figure is the total memory a process sees on the card: what CUDA
//! reports (`torch.cuda.get_device_properties(i).total_memory`, the "total
//! capacity" of PyTorch's out-of-memory message), a little less than the
//! card's nominal size and than `nvidia-smi`'s total, since the driver keeps
//! some for itself. It depends a little on the driver and on ECC, so each
//! preset says where its figure was read. The CUDA context and libraries
//! take their share of it at run time: see [`Reserve`](super::Reserve).

/// One GPU's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuPreset {
    /// The name `--gpu` takes (matched ignoring case, spaces and dashes).
    pub id: &'static str,
    /// Other names it takes.
    pub aliases: &'static [&'static str],
    /// The name verdicts use: `H100 80GB`.
    pub name: &'static str,
    /// The total memory a process sees, in bytes.
    pub usable_bytes: u64,
    /// Where that figure comes from.
    pub source: &'static str,
}

const MIB: u64 = 1 << 20;

/// Hundredths of a GiB, as PyTorch's out-of-memory messages print a total
/// (`79.18 GiB`), to the MiB below.
const fn centi_gib(hundredths: u64) -> u64 {
    (hundredths << 30) / 100 / MIB * MIB
}

/// The presets, largest memory first within a family.
pub const GPUS: &[GpuPreset] = &[
    GpuPreset {
        id: "h200",
        aliases: &["h200-141gb", "h200-sxm"],
        name: "H200 141GB",
        usable_bytes: centi_gib(13980),
        source: "139.80 GiB: total_memory on an NVIDIA H200, driver 580.159.04 (docs/gpu-check.md, this project's GPU check)",
    },
    GpuPreset {
        id: "h100",
        aliases: &["h100-80gb", "h100-sxm", "h100-hbm3"],
        name: "H100 80GB",
        usable_bytes: centi_gib(7918),
        source: "79.18 GiB: total_memory on an NVIDIA H100 80GB HBM3, driver 580.159.04 (docs/gpu-check.md, this project's GPU check)",
    },
    GpuPreset {
        id: "a100-80gb",
        aliases: &["a100-80g", "a100-sxm4-80gb"],
        name: "A100 80GB",
        usable_bytes: centi_gib(7925),
        source: "79.25 GiB: PyTorch's OOM message on an A100 80GB (github.com/levihsu/OOTDiffusion/issues/235)",
    },
    GpuPreset {
        id: "a100-40gb",
        aliases: &["a100-40g", "a100-sxm4-40gb"],
        name: "A100 40GB",
        usable_bytes: 42_298_834_944,
        source: "42,298,834,944 bytes: deviceQuery's total global memory on an A100-SXM4-40GB (github.com/bottlerocket-os/bottlerocket/pull/3873)",
    },
    GpuPreset {
        id: "l40s",
        aliases: &["l40s-48gb"],
        name: "L40S 48GB",
        usable_bytes: centi_gib(4442),
        source: "44.42 GiB: PyTorch's OOM message on an L40S (github.com/stepfun-ai/Step-Video-T2V/issues/8)",
    },
    GpuPreset {
        id: "a30",
        aliases: &["a30-24gb"],
        name: "A30 24GB",
        usable_bytes: centi_gib(2353),
        source: "23.53 GiB: PyTorch's OOM message on an A30 (github.com/google/RB-Modulation/issues/5)",
    },
    GpuPreset {
        id: "a10",
        aliases: &["a10-24gb"],
        name: "A10 24GB",
        usable_bytes: centi_gib(2199),
        source: "21.99 GiB: PyTorch's OOM message on an A10 (github.com/zai-org/CogVLM/issues/236)",
    },
    GpuPreset {
        id: "l4",
        aliases: &["l4-24gb"],
        name: "L4 24GB",
        usable_bytes: 23034 * MIB,
        source: "23,034 MiB: nvidia-smi's total on an L4 (github.com/modal-labs/modal-client/pull/2797); no CUDA figure was found, and CUDA reports a few hundred MiB less",
    },
    GpuPreset {
        id: "rtx4090",
        aliases: &["4090", "rtx-4090", "geforce-rtx-4090"],
        name: "RTX 4090 24GB",
        usable_bytes: centi_gib(2364),
        source: "23.64 GiB: PyTorch's OOM message on an RTX 4090 (github.com/3DTopia/Phidias-Diffusion/issues/8)",
    },
    GpuPreset {
        id: "rtx3090",
        aliases: &["3090", "rtx-3090", "geforce-rtx-3090"],
        name: "RTX 3090 24GB",
        usable_bytes: centi_gib(2370),
        source: "23.70 GiB: PyTorch's OOM message on an RTX 3090 (github.com/GaoLii/DSP/issues/10)",
    },
    GpuPreset {
        id: "v100-32gb",
        aliases: &["v100-32g"],
        name: "V100 32GB",
        usable_bytes: centi_gib(3174),
        source: "31.74 GiB: PyTorch's OOM message on a V100 32GB (github.com/haotian-liu/LLaVA/issues/812)",
    },
    GpuPreset {
        id: "t4",
        aliases: &["t4-16gb"],
        name: "T4 16GB",
        usable_bytes: centi_gib(1475),
        source: "14.75 GiB: PyTorch's OOM message on a T4 (github.com/hpcaitech/Open-Sora/issues/697)",
    },
];

fn normalize(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The preset a name means, ignoring case, spaces, dashes and a leading
/// `nvidia`: `H100`, `h100-80gb`, `A100 40GB`, `rtx4090`. A name of a
/// family with several sizes (`a100`) means none: see [`lookup`].
pub fn find(name: &str) -> Option<&'static GpuPreset> {
    let wanted = normalize(name);
    let wanted = wanted.strip_prefix("nvidia").unwrap_or(&wanted);
    GPUS.iter().find(|g| {
        std::iter::once(g.id)
            .chain(g.aliases.iter().copied())
            .chain(std::iter::once(g.name))
            .any(|n| normalize(n) == wanted)
    })
}

/// Why a name is not one preset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuNameError {
    /// No preset has that name.
    #[error("unknown GPU '{name}' (known: {known})")]
    Unknown {
        /// The name given.
        name: String,
        /// Every preset's name.
        known: String,
    },
    /// The name begins the names of several presets, or of one preset of
    /// a family that has other sizes (an A100 has 40 or 80 GB): choosing
    /// would answer for a card the user may not have.
    #[error("GPU '{name}' is ambiguous: {matches}; name one")]
    Ambiguous {
        /// The name given.
        name: String,
        /// The presets it begins, with their memory.
        matches: String,
    },
}

/// The preset a name means, as [`find`]; a name that only begins preset
/// names (`a100`: `a100-80gb`, `a100-40gb`) is refused with them, rather
/// than resolved to one of them.
pub fn lookup(name: &str) -> Result<&'static GpuPreset, GpuNameError> {
    if let Some(gpu) = find(name) {
        return Ok(gpu);
    }
    let wanted = normalize(name);
    let wanted = wanted.strip_prefix("nvidia").unwrap_or(&wanted);
    let matches: Vec<&GpuPreset> = GPUS
        .iter()
        .filter(|g| !wanted.is_empty() && normalize(g.id).starts_with(wanted))
        .collect();
    if matches.is_empty() {
        return Err(GpuNameError::Unknown {
            name: name.to_string(),
            known: names(),
        });
    }
    Err(GpuNameError::Ambiguous {
        name: name.to_string(),
        matches: matches
            .iter()
            .map(|g| format!("{} ({})", g.id, crate::units::bytes(g.usable_bytes)))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The names `--gpu` takes, for an error message.
pub fn names() -> String {
    GPUS.iter().map(|g| g.id).collect::<Vec<_>>().join(", ")
}

/// The smallest preset with at least `bytes` of memory.
pub fn smallest_holding(bytes: u64) -> Option<&'static GpuPreset> {
    GPUS.iter()
        .filter(|g| g.usable_bytes >= bytes)
        .min_by_key(|g| g.usable_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_loosely_and_figures_are_sane() {
        assert_eq!(find("H100").unwrap().id, "h100");
        assert_eq!(find("NVIDIA H100 80GB").unwrap().id, "h100");
        assert_eq!(find("a100 40GB").unwrap().id, "a100-40gb");
        assert_eq!(find("RTX 4090").unwrap().id, "rtx4090");
        assert!(find("h1000").is_none());
        assert!(find("a100").is_none(), "an A100 has 40 or 80 GB");
        assert_eq!(lookup("A100-80GB").unwrap().id, "a100-80gb");
        let Err(GpuNameError::Ambiguous { matches, .. }) = lookup("a100") else {
            panic!("a100 is ambiguous");
        };
        assert!(
            matches.starts_with("a100-80gb (79.2 GiB), a100-40gb ("),
            "{matches}"
        );
        // One preset of a family with other sizes (V100s have 16 or 32 GB).
        assert!(matches!(
            lookup("v100"),
            Err(GpuNameError::Ambiguous { .. })
        ));
        assert!(matches!(lookup("h1000"), Err(GpuNameError::Unknown { .. })));
        assert!(names().contains("h200"));
        for g in GPUS {
            // Below the nominal size, above half of it.
            let nominal: u64 = g
                .name
                .split(' ')
                .next_back()
                .and_then(|n| n.strip_suffix("GB"))
                .and_then(|n| n.parse().ok())
                .unwrap();
            assert!(g.usable_bytes < (nominal + 1) << 30, "{}", g.name);
            assert!(g.usable_bytes > (nominal << 30) * 8 / 10, "{}", g.name);
        }
        assert_eq!(centi_gib(7918), 81_080 * MIB);
        assert_eq!(smallest_holding(20 << 30).unwrap().id, "a10");
        assert!(smallest_holding(200 << 30).is_none());
    }
}
