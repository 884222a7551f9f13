//! What this machine's GPUs are, as the amdgpu driver publishes them (the KFD topology under
//! `/sys/class/kfd`), read with no HIP call: the preload checks a TunableOp file's
//! `GCN_ARCH_NAME` against them, and the command shows them. A machine with no AMD GPU (and
//! refblas), or a container without `/sys/class/kfd`, shows none: nothing is then checked.

use std::path::Path;

/// The KFD topology the amdgpu driver publishes: one folder per node, CPUs included.
pub const KFD_NODES: &str = "/sys/class/kfd/kfd/topology/nodes";

/// `gfx942` of a node's `gfx_target_version` (major * 10000 + minor * 100 + stepping; the
/// name writes minor and stepping as one hex digit each: 90010 is gfx90a, 110000 gfx1100).
/// `None` for 0 (a CPU node) or a number no gfx name has.
pub fn gfx_name(version: u64) -> Option<String> {
    let (major, minor, step) = (version / 10000, version / 100 % 100, version % 100);
    (major > 0 && minor < 16 && step < 16).then(|| format!("gfx{major}{minor:x}{step:x}"))
}

/// The architecture of each AMD GPU of the KFD topology under `nodes`, in node order.
pub fn gpu_archs_in(nodes: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(nodes) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, String)> = rd
        .filter_map(|e| {
            let e = e.ok()?;
            let node: u64 = e.file_name().to_str()?.parse().ok()?;
            let props = std::fs::read_to_string(e.path().join("properties")).ok()?;
            let version = props.lines().find_map(|l| {
                l.strip_prefix("gfx_target_version ")
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })?;
            Some((node, gfx_name(version)?))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, a)| a).collect()
}

/// This machine's AMD GPUs' architectures ([`gpu_archs_in`] of [`KFD_NODES`]).
pub fn gpu_archs() -> Vec<String> {
    gpu_archs_in(Path::new(KFD_NODES))
}

/// The base name of a `GCN_ARCH_NAME` (`gfx942:sramecc+:xnack-` -> `gfx942`).
pub fn arch_base(name: &str) -> &str {
    name.split(':').next().unwrap_or(name).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_architectures_come_from_the_kfd_topology() {
        assert_eq!(gfx_name(90402).as_deref(), Some("gfx942"));
        assert_eq!(gfx_name(90010).as_deref(), Some("gfx90a"));
        assert_eq!(gfx_name(110000).as_deref(), Some("gfx1100"));
        assert_eq!(gfx_name(100300).as_deref(), Some("gfx1030"));
        assert_eq!(gfx_name(0), None, "a CPU node");
        let nodes = std::env::temp_dir().join(format!("tunedblas-kfd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&nodes);
        for (node, version) in [(0, 0), (2, 90010), (1, 90402), (10, 90402)] {
            let d = nodes.join(node.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("properties"),
                format!("cpu_cores_count 0\nsimd_count 0\ngfx_target_version {version}\nvendor_id 4098\n"),
            )
            .unwrap();
        }
        // Nodes in their numeric order (10 after 2), the CPU node left out.
        assert_eq!(gpu_archs_in(&nodes), ["gfx942", "gfx90a", "gfx942"]);
        assert!(gpu_archs_in(&nodes.join("absent")).is_empty());
        let _ = std::fs::remove_dir_all(&nodes);
    }
}
