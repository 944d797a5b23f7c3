//! Allocator settings: parsing `PYTORCH_CUDA_ALLOC_CONF`-style strings, the
//! key/value form stored in trace headers, and the size rounding they control.

use std::collections::BTreeMap;
use thiserror::Error;

/// One mebibyte.
pub const MIB: u64 = 1 << 20;
/// Every block size is a multiple of this (PyTorch's `kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Requests up to this size use the small pool (`kSmallSize`).
pub const SMALL_SIZE: u64 = MIB;
/// Segment size of the small pool (`kSmallBuffer`); also the page size of
/// small-pool expandable segments.
pub const SMALL_BUFFER: u64 = 2 * MIB;
/// Segment size for large requests under [`MIN_LARGE_ALLOC`] (`kLargeBuffer`);
/// also the page size of large-pool expandable segments.
pub const LARGE_BUFFER: u64 = 20 * MIB;
/// From this size on, a segment is the request rounded up to [`ROUND_LARGE`]
/// (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// Rounding of segments for requests of [`MIN_LARGE_ALLOC`] and more (`kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 * MIB;
/// The largest block the allocator hands out: 2^62 bytes (4 EiB), far beyond
/// any device, and small enough that rounding it up (to a power-of-two
/// division, or a segment's 2 MiB) and adding it to the bytes reserved cannot
/// overflow. Larger requests are out of memory.
pub const MAX_BLOCK_SIZE: u64 = 1 << 62;
/// Number of power-of-two size intervals (1 MiB to 64 GiB) that
/// `roundup_power2_divisions` can set separately.
pub const ROUNDUP_INTERVALS: usize = 16;

/// A settings string or map that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// A key this allocator does not know.
    #[error("unknown allocator setting `{0}`")]
    UnknownKey(String),
    /// A key whose value is missing or malformed.
    #[error("invalid value `{value}` for allocator setting `{key}`: {reason}")]
    InvalidValue {
        /// The setting.
        key: String,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The string does not have the `key:value,key:value` shape.
    #[error("malformed allocator settings: {0}")]
    Syntax(String),
}

/// The caching allocator's settings, with PyTorch's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorConfig {
    /// Blocks of at least this size are never split (`max_split_size_mb`);
    /// `u64::MAX` means unlimited, the default.
    pub max_split_size: u64,
    /// An oversize cached block serves a request only if it exceeds the
    /// request by less than this (`max_non_split_rounding_mb`, default 20 MiB).
    pub max_non_split_rounding_size: u64,
    /// Divisions per power-of-two interval for size rounding, interval `i`
    /// covering `[2^i MiB, 2^(i+1) MiB)` (the first also covers smaller sizes,
    /// the last larger ones); 0 or 1 means plain 512-byte rounding.
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// Fraction of the allowed memory above which cached blocks are garbage
    /// collected before a new segment is allocated; 0 disables it. As in
    /// PyTorch it only acts when a memory fraction is set.
    pub garbage_collection_threshold: f64,
    /// Grow one segment per stream and pool by mapping pages instead of
    /// allocating a segment per miss.
    pub expandable_segments: bool,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: u64::MAX,
            max_non_split_rounding_size: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
        }
    }
}

/// Keys of a settings map that [`AllocatorConfig::from_settings`] accepted but
/// did not use (they do not change the allocation policy).
pub type IgnoredKeys = Vec<String>;

fn invalid(key: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

// Splits like PyTorch's tokenizer: `,` `:` `[` `]` are tokens of their own and
// spaces are dropped, so `[256:1, >:4]` and `[256:1,>:4]` read the same.
fn tokenize(s: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut buf = String::new();
    for c in s.chars() {
        match c {
            ',' | ':' | '[' | ']' => {
                if !buf.is_empty() {
                    tokens.push(std::mem::take(&mut buf));
                }
                tokens.push(c.to_string());
            }
            ' ' => {}
            _ => buf.push(c),
        }
    }
    if !buf.is_empty() {
        tokens.push(buf);
    }
    tokens
}

fn parse_u64(key: &str, value: &str) -> Result<u64, ConfigError> {
    value
        .parse::<u64>()
        .map_err(|_| invalid(key, value, "expected a non-negative integer"))
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "True" | "true" | "1" => Ok(true),
        "False" | "false" | "0" => Ok(false),
        _ => Err(invalid(key, value, "expected True or False")),
    }
}

fn parse_mb_at_least_20(key: &str, value: &str) -> Result<u64, ConfigError> {
    let mb = parse_u64(key, value)?;
    if mb < LARGE_BUFFER / MIB {
        return Err(invalid(key, value, "must be at least 20 (MiB)"));
    }
    Ok(mb.saturating_mul(MIB))
}

fn parse_gc_threshold(key: &str, value: &str) -> Result<f64, ConfigError> {
    let t: f64 = value
        .parse()
        .map_err(|_| invalid(key, value, "expected a number"))?;
    if !(t > 0.0 && t < 1.0) {
        return Err(invalid(key, value, "must lie in (0, 1)"));
    }
    Ok(t)
}

impl AllocatorConfig {
    /// Parses a `PYTORCH_CUDA_ALLOC_CONF`-style string such as
    /// `expandable_segments:True,max_split_size_mb:128` or
    /// `roundup_power2_divisions:[256:1,512:2,>:4]`. Keys not given keep their
    /// defaults; an unknown key is an error naming it.
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        let mut config = AllocatorConfig::default();
        let tokens = tokenize(s);
        let mut i = 0;
        let value_at = |i: usize, key: &str| -> Result<&str, ConfigError> {
            tokens
                .get(i)
                .map(String::as_str)
                .ok_or_else(|| ConfigError::Syntax(format!("`{key}` has no value")))
        };
        while i < tokens.len() {
            let key = tokens[i].as_str();
            if tokens.get(i + 1).map(String::as_str) != Some(":") {
                return Err(ConfigError::Syntax(format!("expected `:` after `{key}`")));
            }
            i += 2;
            match key {
                "max_split_size_mb" => {
                    config.max_split_size = parse_mb_at_least_20(key, value_at(i, key)?)?
                }
                "max_non_split_rounding_mb" => {
                    config.max_non_split_rounding_size =
                        parse_mb_at_least_20(key, value_at(i, key)?)?
                }
                "garbage_collection_threshold" => {
                    config.garbage_collection_threshold =
                        parse_gc_threshold(key, value_at(i, key)?)?
                }
                "expandable_segments" => {
                    config.expandable_segments = parse_bool(key, value_at(i, key)?)?
                }
                "roundup_power2_divisions" => {
                    let (divisions, end) = parse_divisions(&tokens, i)?;
                    config.roundup_power2_divisions = divisions;
                    i = end;
                }
                _ => return Err(ConfigError::UnknownKey(key.to_string())),
            }
            i += 1;
            match tokens.get(i).map(String::as_str) {
                None => {}
                Some(",") => i += 1,
                Some(t) => {
                    return Err(ConfigError::Syntax(format!(
                        "expected `,` after the value of `{key}`, found `{t}`"
                    )));
                }
            }
        }
        Ok(config)
    }

    /// The size a request of `requested` bytes is rounded up to: at least 512
    /// bytes, a multiple of 512, or the next power-of-two division when
    /// `roundup_power2_divisions` applies to its size. A request beyond
    /// [`MAX_BLOCK_SIZE`] gives [`MAX_BLOCK_SIZE`] (no device holds it: for
    /// working out the size of a block already seen); an allocator asks
    /// [`checked_round_size`](Self::checked_round_size), which refuses it.
    #[inline]
    pub fn round_size(&self, requested: u64) -> u64 {
        self.checked_round_size(requested).unwrap_or(MAX_BLOCK_SIZE)
    }

    /// [`round_size`](Self::round_size), or `None` for a request whose
    /// rounded size (or the segment that would hold it) is beyond
    /// [`MAX_BLOCK_SIZE`]: such a request can only fail, as out of memory.
    #[inline]
    pub fn checked_round_size(&self, requested: u64) -> Option<u64> {
        if requested < MIN_BLOCK_SIZE {
            return Some(MIN_BLOCK_SIZE);
        }
        if requested > MAX_BLOCK_SIZE {
            return None;
        }
        let divisions = self.divisions_for(requested);
        Some(if divisions > 1 && requested > MIN_BLOCK_SIZE * divisions {
            roundup_power2_next_division(requested, divisions)
        } else {
            requested.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
        })
    }

    /// Whether a free block of `block_size` bytes handed out for a request
    /// rounded to `size` is split, leaving the rest cached (PyTorch's
    /// `should_split`). `small` says whether the request is for the small
    /// pool (`size` at most [`SMALL_SIZE`]). Small blocks, and every block
    /// under expandable segments, are split whenever at least
    /// [`MIN_BLOCK_SIZE`] remains; large ones only below `max_split_size` and
    /// when more than [`SMALL_SIZE`] remains, so a slightly larger cached
    /// block is handed out whole.
    #[inline]
    pub fn should_split(&self, small: bool, block_size: u64, size: u64) -> bool {
        let remaining = block_size - size;
        if small || self.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.max_split_size && remaining > SMALL_SIZE
        }
    }

    /// The number of divisions `roundup_power2_divisions` sets for this size.
    #[inline]
    pub fn divisions_for(&self, size: u64) -> u64 {
        let log = 63 - size.max(1).leading_zeros() as usize;
        let index = log.saturating_sub(20).min(ROUNDUP_INTERVALS - 1);
        self.roundup_power2_divisions[index]
    }

    /// The settings as trace headers store them: every policy key, with
    /// values in `PYTORCH_CUDA_ALLOC_CONF` syntax (`max_split_size_mb` and
    /// `max_non_split_rounding_mb` are `unlimited` when unlimited).
    pub fn to_settings(&self) -> BTreeMap<String, String> {
        let mb = |v: u64| {
            if v == u64::MAX {
                "unlimited".to_string()
            } else {
                (v / MIB).to_string()
            }
        };
        let mut m = BTreeMap::new();
        m.insert("max_split_size_mb".into(), mb(self.max_split_size));
        m.insert(
            "max_non_split_rounding_mb".into(),
            mb(self.max_non_split_rounding_size),
        );
        m.insert("roundup_power2_divisions".into(), self.divisions_string());
        m.insert(
            "garbage_collection_threshold".into(),
            self.garbage_collection_threshold.to_string(),
        );
        m.insert(
            "expandable_segments".into(),
            if self.expandable_segments {
                "True"
            } else {
                "False"
            }
            .into(),
        );
        m
    }

    /// The `PYTORCH_CUDA_ALLOC_CONF` string that gives these settings
    /// (non-default keys only; empty for the defaults).
    pub fn to_conf_string(&self) -> String {
        let default = AllocatorConfig::default();
        let settings = self.to_settings();
        let default_settings = default.to_settings();
        settings
            .iter()
            .filter(|(k, v)| default_settings.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn divisions_string(&self) -> String {
        let d = &self.roundup_power2_divisions;
        if d.iter().all(|&x| x == d[0]) {
            return d[0].to_string();
        }
        // Interval starts in MiB: `[1:a,2:b,4:c,...]` sets each interval alone.
        let items: Vec<String> = d
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{}:{v}", 1u64 << i))
            .collect();
        format!("[{}]", items.join(","))
    }

    /// Rebuilds settings from a key/value map: a trace header's (as written by
    /// [`to_settings`](Self::to_settings)) or a PyTorch snapshot's
    /// `allocator_settings`, whose `max_split_size` is in bytes (-1 for
    /// unlimited). Keys that do not affect the policy (`PYTORCH_CUDA_ALLOC_CONF`,
    /// `last_allocator_settings`, `pinned_*`, `release_lock_on_cudamalloc`, ...)
    /// are returned, not rejected, so the caller can report them.
    pub fn from_settings(
        settings: &BTreeMap<String, String>,
    ) -> Result<(Self, IgnoredKeys), ConfigError> {
        let mut config = AllocatorConfig::default();
        let mut ignored = Vec::new();
        for (key, value) in settings {
            let v = value.trim();
            match key.as_str() {
                "max_split_size_mb" | "max_non_split_rounding_mb" => {
                    let bytes = if v == "unlimited" {
                        u64::MAX
                    } else {
                        parse_mb_at_least_20(key, v)?
                    };
                    if key == "max_split_size_mb" {
                        config.max_split_size = bytes;
                    } else {
                        config.max_non_split_rounding_size = bytes;
                    }
                }
                "max_split_size" => {
                    // Snapshots give bytes, with -1 (or SIZE_MAX) for unlimited.
                    config.max_split_size = match v {
                        "-1" => u64::MAX,
                        _ => parse_u64(key, v)?,
                    };
                }
                "garbage_collection_threshold" => {
                    let t: f64 = v
                        .parse()
                        .map_err(|_| invalid(key, v, "expected a number"))?;
                    if !(0.0..1.0).contains(&t) {
                        return Err(invalid(key, v, "must lie in [0, 1)"));
                    }
                    config.garbage_collection_threshold = t;
                }
                "expandable_segments" => config.expandable_segments = parse_bool(key, v)?,
                "roundup_power2_divisions" => {
                    let tokens = tokenize(v);
                    let (divisions, end) = parse_divisions(&tokens, 0)?;
                    if end + 1 != tokens.len() {
                        return Err(invalid(key, v, "trailing text"));
                    }
                    config.roundup_power2_divisions = divisions;
                }
                _ => ignored.push(key.clone()),
            }
        }
        Ok((config, ignored))
    }
}

// PyTorch's roundup_power2_next_division: the smallest multiple of
// (power-of-two floor / divisions) that holds `size`.
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let rounded = size & !(step - 1);
    if rounded == size {
        size
    } else {
        rounded + step
    }
}

// Parses the value of `roundup_power2_divisions` starting at token `i`:
// either one power of two for every interval, or `[MiB:div,...,>:div]`.
// Returns the divisions and the index of the value's last token. Mirrors
// PyTorch: the first entry also fills every interval below it, `>` fills every
// interval after the last one named, and intervals not covered stay 0.
fn parse_divisions(
    tokens: &[String],
    mut i: usize,
) -> Result<([u64; ROUNDUP_INTERVALS], usize), ConfigError> {
    const KEY: &str = "roundup_power2_divisions";
    let mut divisions = [0u64; ROUNDUP_INTERVALS];
    let first = tokens
        .get(i)
        .ok_or_else(|| ConfigError::Syntax(format!("`{KEY}` has no value")))?;
    if first != "[" {
        let v = parse_u64(KEY, first)?;
        // 0 (PyTorch's default, plain rounding) is accepted too, so that the
        // defaults survive a round trip through `to_settings`.
        if v != 0 && !v.is_power_of_two() {
            return Err(invalid(KEY, first, "divisions must be a power of two"));
        }
        return Ok(([v; ROUNDUP_INTERVALS], i));
    }
    let mut first_value = true;
    let mut last_index = 0usize;
    i += 1;
    loop {
        let boundary = tokens
            .get(i)
            .ok_or_else(|| ConfigError::Syntax(format!("`{KEY}` is missing `]`")))?;
        if boundary == "]" {
            return Ok((divisions, i));
        }
        if tokens.get(i + 1).map(String::as_str) != Some(":") {
            return Err(ConfigError::Syntax(format!(
                "expected `:` after `{boundary}` in `{KEY}`"
            )));
        }
        let value_text = tokens
            .get(i + 2)
            .ok_or_else(|| ConfigError::Syntax(format!("`{KEY}` is missing `]`")))?;
        let value = parse_u64(KEY, value_text)?;
        if value != 0 && !value.is_power_of_two() {
            return Err(invalid(
                KEY,
                value_text,
                "divisions must be a power of two or 0",
            ));
        }
        if boundary == ">" {
            for d in divisions.iter_mut().skip(last_index + 1) {
                *d = value;
            }
        } else {
            let b = parse_u64(KEY, boundary)?;
            if !b.is_power_of_two() {
                return Err(invalid(
                    KEY,
                    boundary,
                    "interval starts must be powers of two (MiB)",
                ));
            }
            let index = (63 - b.leading_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
            if first_value {
                for d in divisions.iter_mut().take(index) {
                    *d = value;
                }
                first_value = false;
            }
            divisions[index] = value;
            last_index = index;
        }
        i += 3;
        match tokens.get(i).map(String::as_str) {
            Some(",") => i += 1,
            Some("]") => {}
            Some(t) => {
                return Err(ConfigError::Syntax(format!("unexpected `{t}` in `{KEY}`")));
            }
            None => return Err(ConfigError::Syntax(format!("`{KEY}` is missing `]`"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_to_512() {
        let c = AllocatorConfig::default();
        assert_eq!(c.round_size(0), 512);
        assert_eq!(c.round_size(1), 512);
        assert_eq!(c.round_size(512), 512);
        assert_eq!(c.round_size(513), 1024);
        assert_eq!(c.round_size(1200), 1536);
        assert_eq!(c.round_size(49_152_000), 49_152_000);
    }

    #[test]
    fn power2_divisions_round_up() {
        let c = AllocatorConfig::parse("roundup_power2_divisions:4").unwrap();
        // 5000 lies in [4096, 8192): steps of 1024.
        assert_eq!(c.round_size(5000), 5120);
        assert_eq!(c.round_size(4096), 4096);
        // Sizes up to 512 * divisions keep plain rounding.
        assert_eq!(c.round_size(1200), 1536);
        assert_eq!(c.round_size(5 * MIB + 1), 6 * MIB);
    }

    #[test]
    fn division_list_matches_pytorch() {
        // Cases from PyTorch's AllocatorConfig test.
        let c =
            AllocatorConfig::parse("roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]")
                .unwrap();
        let at = |mb: u64| c.divisions_for(mb * MIB);
        assert_eq!((at(32), at(64), at(128), at(256)), (8, 8, 2, 4));
        assert_eq!((at(512), at(1024), at(2048), at(8192)), (2, 4, 1, 1));
        let c = AllocatorConfig::parse("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]")
            .unwrap();
        let at = |mb: u64| c.divisions_for(mb * MIB);
        assert_eq!((at(64), at(128), at(256), at(512)), (8, 8, 16, 1));
        assert_eq!((at(1024), at(2048), at(4096)), (0, 8, 2));
        let c = AllocatorConfig::parse("roundup_power2_divisions:[256:1, 512:2, >:4]").unwrap();
        assert_eq!(c.divisions_for(MIB), 1);
        assert_eq!(c.divisions_for(512 * MIB), 2);
        assert_eq!(c.divisions_for(1024 * MIB), 4);
    }

    #[test]
    fn parses_every_key() {
        let c = AllocatorConfig::parse(
            "expandable_segments:True,max_split_size_mb:128,garbage_collection_threshold:0.6,max_non_split_rounding_mb:40",
        )
        .unwrap();
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size, 128 * MIB);
        assert_eq!(c.max_non_split_rounding_size, 40 * MIB);
        assert_eq!(c.garbage_collection_threshold, 0.6);
        assert_eq!(
            AllocatorConfig::parse("").unwrap(),
            AllocatorConfig::default()
        );
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(
            AllocatorConfig::parse("expandable_segments:True,foo:1"),
            Err(ConfigError::UnknownKey("foo".into()))
        );
        assert!(matches!(
            AllocatorConfig::parse("max_split_size_mb:10"),
            Err(ConfigError::InvalidValue { .. })
        ));
        assert!(matches!(
            AllocatorConfig::parse("garbage_collection_threshold:1.5"),
            Err(ConfigError::InvalidValue { .. })
        ));
        assert!(matches!(
            AllocatorConfig::parse("roundup_power2_divisions:3"),
            Err(ConfigError::InvalidValue { .. })
        ));
        assert!(matches!(
            AllocatorConfig::parse("expandable_segments"),
            Err(ConfigError::Syntax(_))
        ));
    }

    #[test]
    fn settings_round_trip() {
        let c = AllocatorConfig::parse(
            "roundup_power2_divisions:[256:1,512:2,>:4],max_split_size_mb:200,expandable_segments:True",
        )
        .unwrap();
        let (back, ignored) = AllocatorConfig::from_settings(&c.to_settings()).unwrap();
        assert_eq!(back, c);
        assert!(ignored.is_empty());
        assert_eq!(AllocatorConfig::parse(&c.to_conf_string()).unwrap(), c);
        let d = AllocatorConfig::default();
        assert_eq!(
            AllocatorConfig::from_settings(&d.to_settings()).unwrap().0,
            d
        );
        assert_eq!(d.to_conf_string(), "");
    }

    #[test]
    fn snapshot_settings_are_read_leniently() {
        let mut m = BTreeMap::new();
        m.insert(
            "PYTORCH_CUDA_ALLOC_CONF".to_string(),
            "expandable_segments:True".to_string(),
        );
        m.insert("max_split_size".to_string(), "-1".to_string());
        m.insert("expandable_segments".to_string(), "True".to_string());
        m.insert(
            "garbage_collection_threshold".to_string(),
            "0.0".to_string(),
        );
        m.insert(
            "release_lock_on_cudamalloc".to_string(),
            "False".to_string(),
        );
        m.insert(
            "roundup_power2_divisions".to_string(),
            "[1:0,2:0,4:0,8:0,16:0,32:0,64:0,128:0,256:0,512:0,1024:0,2048:0,4096:0,8192:0,16384:0,32768:0]".to_string(),
        );
        let (c, ignored) = AllocatorConfig::from_settings(&m).unwrap();
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size, u64::MAX);
        assert_eq!(
            ignored,
            vec!["PYTORCH_CUDA_ALLOC_CONF", "release_lock_on_cudamalloc"]
        );
    }
}
