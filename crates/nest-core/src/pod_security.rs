//! What the Pod Security Standards fix as lists, for the API server that admits pods by them and the node that
//! runs them.

/// The capabilities the baseline level lets a container add, which are also what a container keeps unless it drops
/// them (containerd's defaults without `NET_RAW`, which baseline does not allow).
pub const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
