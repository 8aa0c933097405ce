//! Sandboxes: every container of a process pod runs through an OCI runtime (`runc`, or another with runc's command
//! line, such as `crun`), never as a bare process of the host.
//!
//! - **Namespaces.** Each container gets its own user, mount, PID, IPC, UTS and cgroup namespaces. It is in its
//!   pod's network namespace, which the runtime is started in and the container inherits (so that `runc exec` can
//!   enter it: [`Sandboxed::exec_with`]); on a loopback pod range it shares the node's, where it listens on its
//!   pod's own loopback address (see docs/REFERENCE.md, "Network model").
//! - **Users.** The pods of one namespace map container users 0–65535 onto a range of host users of their own,
//!   allocated by this node and kept in `<data>/users`: root in a container is an unprivileged user of the host, and
//!   two namespaces never share a host user. `runAsUser`, `runAsGroup`, `fsGroup` and `supplementalGroups` choose
//!   the user inside the range.
//! - **Files.** A container of an image has its image's layers beneath a writable layer of its own ([`super::layer`]:
//!   overlayfs, fresh for each run, read-only with `readOnlyRootFilesystem: true`), with the node's `/etc/hosts`,
//!   `/etc/hostname` and `/etc/resolv.conf` over the image's. A container of an allowlisted host executable has a
//!   read-only root: the host's `/usr` (and the `/bin`, `/lib` … links or directories beside it), a generated `/etc`
//!   (users, hosts, resolver), the node's allowlisted executables at their own paths, and nothing else of the host;
//!   its `/tmp` is memory. `/proc`, `/dev` and `/dev/shm` are every container's own. Volumes are bind mounts of the
//!   pod's directories (ConfigMap, Secret, downward API and projected volumes always read-only).
//! - **Privileges.** No capability beyond Pod Security "baseline" (and those only in the container's user namespace),
//!   `no_new_privs`, a seccomp filter refusing what Kubernetes' `RuntimeDefault` refuses (mounts, namespaces, kernel
//!   modules, keyrings, BPF, `io_uring`, …), and cgroup limits: `resources.limits` memory and CPU, and at most
//!   [`PIDS_LIMIT`] processes; a tenant's pods all beneath its tenant's share ([`super::tenants`]). A pod asking for
//!   more (`privileged`, host namespaces, more capabilities, another seccomp profile) is refused with a reason, not
//!   started weaker than it asked.
//! - **Lifetime.** The container's first process is nest's own init ([`super::init`], `/.nest/init`): it forwards
//!   signals to the container's program, reaps orphans and dies with the OCI runtime, which dies with the node, so no
//!   container outlives its node. A container killed for memory is reported `OOMKilled`.
//!
//! Bundles live in `/run/nest/sandboxes/<node>/<pod uid>/<container>/` (their directories must be reachable by the
//! container's root, which the 0700 data directory is not); the runtime's state in `<data>/runc`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Container, Pod, PodSecurityContext, SecurityContext};
use kube::ResourceExt;
use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder, LinuxDeviceCgroupBuilder,
    LinuxIdMappingBuilder, LinuxMemoryBuilder, LinuxNamespaceBuilder, LinuxNamespaceType, LinuxPidsBuilder,
    LinuxResourcesBuilder, LinuxSeccompAction, LinuxSeccompArgBuilder, LinuxSeccompBuilder, LinuxSeccompOperator,
    LinuxSyscallBuilder, Mount, MountBuilder, PosixRlimitBuilder, PosixRlimitType, ProcessBuilder, RootBuilder,
    SpecBuilder, UserBuilder,
};

use super::layer::WritableLayer;
use super::prepare::{Launch, PrepareError};
use super::tenants::{Hierarchy, Placement, Share, Tenants};

/// Where the node's init is mounted in every container.
pub const INIT_PATH: &str = "/.nest/init";
/// Container users and groups a namespace's range holds (0–65535, as Kubernetes' user namespaces).
pub const RANGE: u32 = 65536;
/// The first range starts at host user `FIRST_RANGE × RANGE` (1,048,576), above any user a distribution allocates.
const FIRST_RANGE: u32 = 16;
/// The most processes (and threads) one container may have: a fork bomb stops there.
pub const PIDS_LIMIT: i64 = 4096;
/// The `PATH` of a container that does not set one (the usual image default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Where bundles live: a root-owned directory whose path every container's root may walk.
const BUNDLES: &str = "/run/nest/sandboxes";
/// Where the node's binary's loader and libraries are copied, per node ([`InitLibraries`]).
const INIT_LIBRARIES: &str = "/run/nest/init-libraries";
/// Where they are mounted in a container of an image.
const INIT_LIBRARIES_PATH: &str = "/.nest/lib";

/// The capabilities Pod Security "baseline" lets a container keep or add, and what a container gets unless it drops
/// them.
pub use nest_core::pod_security::BASELINE_CAPABILITIES;

/// System calls the seccomp filter refuses with `EPERM`: those Kubernetes' `RuntimeDefault` (the runtimes' default
/// profiles) does not allow an unprivileged container, by name. Names the host's libseccomp does not know are skipped
/// by the runtime.
const REFUSED_SYSCALLS: &[&str] = &[
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount",
    "mount_setattr",
    "move_mount",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "sysfs",
    "_sysctl",
    "syslog",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
];

/// `clone` flags that make namespaces: refused, as `unshare` and `setns` are.
const NAMESPACE_FLAGS: &[u64] = &[
    0x0002_0000, // CLONE_NEWNS
    0x0200_0000, // CLONE_NEWCGROUP
    0x0400_0000, // CLONE_NEWUTS
    0x0800_0000, // CLONE_NEWIPC
    0x1000_0000, // CLONE_NEWUSER
    0x2000_0000, // CLONE_NEWPID
    0x4000_0000, // CLONE_NEWNET
];

/// The node's sandboxes: the OCI runtime, where bundles and state live, and the user ranges handed out.
pub struct Sandboxes {
    runtime: PathBuf,
    /// `--root` of the runtime: `<data>/runc`.
    state: PathBuf,
    /// `/run/nest/sandboxes/<node>`.
    bundles: PathBuf,
    /// The cgroup (relative to each hierarchy's root) every container of this node is beneath: `nest/<node>`.
    cgroups: PathBuf,
    /// The tenants' cgroup subtrees beneath it.
    tenants: Tenants,
    /// The node's own binary, mounted as every container's init.
    init: PathBuf,
    /// The loader and shared libraries the node's binary runs with, for containers of images, whose own may lack
    /// them (a static busybox has none): `None` when the binary needs none.
    init_libraries: Option<InitLibraries>,
    /// The allowlisted executables, mounted into every container (so exec probes can run them too).
    programs: Vec<PathBuf>,
    users: Mutex<Users>,
}

/// Namespace → range number, as `<data>/users` keeps them.
struct Users {
    file: PathBuf,
    ranges: BTreeMap<String, u32>,
}

impl Users {
    fn load(file: PathBuf) -> Users {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let ranges = text
            .lines()
            .filter_map(|line| {
                let (namespace, range) = line.split_once(' ')?;
                Some((namespace.to_string(), range.parse().ok()?))
            })
            .collect();
        Users { file, ranges }
    }

    /// The first host user of `namespace`'s range, handing out the next free range on first use.
    fn base(&mut self, namespace: &str) -> Result<u32, PrepareError> {
        if let Some(range) = self.ranges.get(namespace) {
            return Ok(range * RANGE);
        }
        let used: std::collections::BTreeSet<u32> = self.ranges.values().copied().collect();
        let range = (FIRST_RANGE..u32::MAX / RANGE)
            .find(|r| !used.contains(r))
            .ok_or_else(|| PrepareError::Config("this node has no user range left".into()))?;
        self.ranges.insert(namespace.to_string(), range);
        let text: String = self.ranges.iter().map(|(n, r)| format!("{n} {r}\n")).collect();
        super::paths::write_beneath(
            self.file.parent().unwrap_or(Path::new("/")),
            Path::new(self.file.file_name().unwrap_or_default()),
            text.as_bytes(),
        )?;
        Ok(range * RANGE)
    }
}

/// A failure to set sandboxes up, worded as one line for whoever starts the node.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(String);

/// One container's sandbox, ready to run (again, after each exit).
#[derive(Debug)]
pub struct Sandboxed {
    /// The runtime's container ID: `<pod uid>-<container>`.
    pub id: String,
    bundle: PathBuf,
    runtime: PathBuf,
    state: PathBuf,
    /// The container's cgroup, relative to each hierarchy's root.
    cgroup: PathBuf,
    /// The allowlisted executables: their file name → their path in the container.
    programs: Vec<PathBuf>,
    /// The writable layer over the image, for a container of an image: mounted at each run, removed after it.
    layer: Option<WritableLayer>,
    /// The pod's network namespace, which the runtime is started in (see [`Sandboxed::runtime_command`]).
    netns: Option<PathBuf>,
}

impl Sandboxes {
    /// The sandboxes of the node keeping its files in `data_dir`, with the OCI runtime `runtime` (looked up on `PATH`
    /// when it has no `/`). Fails, in one line, when the runtime is missing or cannot work here. Containers an earlier
    /// run of this node left are removed. A tenant's pods share `share` unless their annotations say otherwise.
    pub fn new(
        data_dir: &Path,
        runtime: &Path,
        init: &Path,
        programs: Vec<PathBuf>,
        share: Share,
    ) -> Result<Sandboxes, Unavailable> {
        if !crate::prerequisites::answers(runtime, &["--version"]) {
            return Err(Unavailable(format!(
                "the process runtime runs every pod in a sandbox through an OCI runtime, and {:?} does not run: \
                 install runc (Debian and Ubuntu: apt-get install runc) or pass another with --oci-runtime",
                runtime.display().to_string()
            )));
        }
        // SAFETY: geteuid(2) cannot fail and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            return Err(Unavailable(
                "the process runtime must run as root: it gives each pod's users a range of host users of their own"
                    .into(),
            ));
        }
        let tag = format!("{:08x}", crc32fast::hash(data_dir.as_os_str().as_encoded_bytes()));
        let cgroups = Path::new("nest").join(&tag);
        let sandboxes = Sandboxes {
            runtime: runtime.to_path_buf(),
            state: data_dir.join("runc"),
            bundles: Path::new(BUNDLES).join(&tag),
            tenants: Tenants::new(&cgroups, Hierarchy::discover(), share),
            cgroups,
            init: init.to_path_buf(),
            init_libraries: InitLibraries::copy(&Path::new(INIT_LIBRARIES).join(&tag)),
            programs,
            users: Mutex::new(Users::load(data_dir.join("users"))),
        };
        let unavailable = |what: &Path, e: std::io::Error| Unavailable(format!("preparing {}: {e}", what.display()));
        for dir in [Path::new("/run/nest"), Path::new(BUNDLES), &sandboxes.bundles] {
            create_dir(dir, 0o711).map_err(|e| unavailable(dir, e))?;
        }
        create_dir(&sandboxes.state, 0o700).map_err(|e| unavailable(&sandboxes.state, e))?;
        sandboxes.remove_leftovers();
        Ok(sandboxes)
    }

    fn runtime_command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.runtime);
        command.arg("--root").arg(&self.state);
        command
    }

    /// Removes every container, bundle and cgroup of this node (tenants' directories too): none runs when it starts.
    fn remove_leftovers(&self) {
        let listed = self.runtime_command().args(["list", "--quiet"]).output();
        for id in listed.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default().lines() {
            tracing::info!(id, "removing a container left by an earlier run of this node");
            let _ = self.runtime_command().args(["delete", "--force", id]).output();
        }
        if let Ok(entries) = std::fs::read_dir(&self.bundles) {
            for entry in entries.flatten() {
                let uid = entry.file_name().to_string_lossy().into_owned();
                self.remove_pod(&uid);
            }
        }
        self.tenants.remove_all();
    }

    /// Forgets every bundle and cgroup of this node, once its containers have all stopped (the node is stopping;
    /// it makes them again when it starts).
    pub fn forget_all(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.bundles) {
            for entry in entries.flatten() {
                self.remove_pod(&entry.file_name().to_string_lossy());
            }
        }
        super::layer::unmount_beneath(&self.bundles);
        let _ = std::fs::remove_dir(&self.bundles);
        if let Some(libraries) = &self.init_libraries {
            let _ = std::fs::remove_dir_all(&libraries.dir);
        }
        self.tenants.remove_all();
        for hierarchy in cgroup_hierarchies() {
            let _ = std::fs::remove_dir(hierarchy.join(&self.cgroups));
        }
    }

    /// Forgets pod `uid`'s bundles and cgroups (its containers have been deleted when they exited), and its tenant's
    /// directories when it was the tenant's last pod here.
    pub fn remove_pod(&self, uid: &str) {
        // A writable layer still mounted (its run did not end through `finish`) goes first: deleting through it
        // would write whiteouts, not free the disk.
        super::layer::unmount_beneath(&self.bundles.join(uid));
        let _ = std::fs::remove_dir_all(self.bundles.join(uid));
        self.tenants.release(uid);
    }

    /// Where the pod's containers' cgroups go: beneath its tenant's share (made and written now) for a tenant's
    /// workload, else beneath the node's. Until [`Sandboxes::remove_pod`], the pod keeps its tenant's directories.
    pub fn place(&self, pod: &Pod) -> Result<Placement, PrepareError> {
        self.tenants.place(pod)
    }

    /// The first host user of the range of the pod's namespace.
    pub fn base(&self, pod: &Pod) -> Result<u32, PrepareError> {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        users.base(&pod.namespace().unwrap_or_default())
    }

    /// Gives the pod's volumes to its users (host users of `base`'s range): the files the node wrote (ConfigMap,
    /// Secret, downward API and projected volumes) become the pod's user's (`runAsUser` of the pod, else the one its
    /// containers all run as, else the container's root), group `fsGroup` (readable by it) or the user's group; an
    /// emptyDir's or a claim's own directory too (a claim's only when the node has just made it), but never what the
    /// pod's processes left in them.
    pub fn own_volumes(&self, pod: &Pod, pod_dir: &Path, claims_dir: &Path, base: u32) -> Result<(), PrepareError> {
        let spec = pod.spec.clone().unwrap_or_default();
        let (uid, gid, fs_group) = volume_users(pod, base);
        for volume in spec.volumes.iter().flatten() {
            let dir = super::prepare::volume_dir(pod, volume, pod_dir, claims_dir)?;
            let written = volume.config_map.is_some()
                || volume.secret.is_some()
                || volume.downward_api.is_some()
                || volume.projected.is_some();
            let fresh = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == 0);
            if written || volume.persistent_volume_claim.is_none() || fresh {
                own(&dir, uid, gid, fs_group, written)?;
            }
        }
        Ok(())
    }

    /// Who a file the node writes into a running pod's volume belongs to: as [`Sandboxes::own_volumes`] leaves them.
    pub fn volume_owner(&self, pod: &Pod, base: u32) -> super::paths::Owner {
        let (uid, gid, group_reads) = volume_users(pod, base);
        super::paths::Owner { uid, gid, mode: if group_reads { 0o640 } else { 0o600 } }
    }

    /// Writes the bundle of `container` (index `index` of the pod's init containers and containers), whose process is
    /// `launch` and whose cgroup goes where `placement` says ([`Sandboxes::place`]), and checks what it asks of its
    /// sandbox: what a sandbox cannot give is a `CreateContainerConfigError`.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        &self,
        pod: &Pod,
        container: &Container,
        launch: &Launch,
        pod_ip: &str,
        netns: Option<&Path>,
        base: u32,
        placement: &Placement,
    ) -> Result<Sandboxed, PrepareError> {
        let uid = pod.uid().unwrap_or_default();
        let name = super::paths::name(&container.name, "container name")?;
        let spec = pod.spec.clone().unwrap_or_default();
        let pod_context = spec.security_context.clone().unwrap_or_default();
        let context = container.security_context.clone().unwrap_or_default();
        refuse_privileges(&spec, &pod_context, &context)?;
        let user = user(&pod_context, &context, launch.image.as_ref().and_then(|i| i.user))?;
        let capabilities = capabilities(&context)?;

        let bundle = self.bundles.join(super::paths::name(&uid, "pod uid")?).join(name);
        super::layer::unmount_beneath(&bundle);
        let _ = std::fs::remove_dir_all(&bundle);
        create_dir(bundle.parent().unwrap_or(&bundle), 0o711)?;
        create_dir(&bundle, 0o711)?;
        let rootfs = bundle.join("rootfs");
        let hostname = hostname(pod);
        let mut in_container = Vec::new();
        let mut layer = None;
        let (mut mounts, program) = match &launch.image {
            Some(image) => {
                let mut mounts = image_filesystem(&bundle, pod_ip, &hostname)?;
                mounts.push(bind(&self.init, Path::new(INIT_PATH), true)?);
                if let Some(libraries) = &self.init_libraries {
                    mounts.push(bind(&libraries.dir, Path::new(INIT_LIBRARIES_PATH), true)?);
                }
                layer = Some(WritableLayer {
                    lower: image.rootfs.clone(),
                    dir: image.layer.clone(),
                    merged: rootfs.clone(),
                    base,
                });
                (mounts, launch.program.clone())
            }
            None => {
                let mut mounts = root_filesystem(&rootfs, base, pod_ip, &hostname)?;
                mounts.push(bind(&self.init, Path::new(INIT_PATH), true)?);
                for program in &self.programs {
                    let at = self.mount_program(program, &mut mounts)?;
                    in_container.push(at);
                }
                // A program of the container's own, not on the allowlist (none today), is mounted the same way.
                let program = self.mount_program(&launch.program, &mut mounts)?;
                (mounts, program)
            }
        };
        let mut volumes = launch.mounts.clone();
        // Parents before what is mounted beneath them.
        volumes.sort_by_key(|m| Path::new(&m.path).components().count());
        for volume in &volumes {
            let at = mount_path(&volume.path)?;
            mounts.push(bind(&volume.dir, &at, volume.read_only)?);
        }

        let mut env: Vec<String> = launch.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if !launch.env.iter().any(|(k, _)| k == "PATH") {
            env.push(format!("PATH={DEFAULT_PATH}"));
        }
        let mut args = match (&launch.image, &self.init_libraries) {
            (Some(_), Some(libraries)) => libraries.command(),
            _ => Vec::new(),
        };
        args.extend([INIT_PATH.to_string(), program.display().to_string()]);
        args.extend(launch.args.iter().cloned());
        let cwd = launch.working_dir.clone().unwrap_or_else(|| "/".into());
        let cgroup = placement.cgroup.join(name);
        let tenant_quota = placement.tenant.as_ref().map(|(_, share)| share.cpu_quota_us());
        let read_only_root = root_read_only(launch.image.is_some(), &context);
        let files = open_files_limit();
        let config = || -> Result<oci_spec::runtime::Spec, oci_spec::OciSpecError> {
            let caps: oci_spec::runtime::Capabilities = capabilities.iter().copied().collect();
            let process = ProcessBuilder::default()
                // A container with `tty: true` gets a terminal of the runtime's making, which it copies to the
                // node's ([`super::stdio`]).
                .terminal(container.tty.unwrap_or(false))
                .user(user.clone())
                .args(args.clone())
                .env(env.clone())
                .cwd(cwd.clone())
                .no_new_privileges(true)
                .capabilities(
                    LinuxCapabilitiesBuilder::default()
                        .bounding(caps.clone())
                        .effective(caps.clone())
                        .permitted(caps)
                        .inheritable(oci_spec::runtime::Capabilities::new())
                        .ambient(oci_spec::runtime::Capabilities::new())
                        .build()?,
                )
                .rlimits(vec![
                    PosixRlimitBuilder::default().typ(PosixRlimitType::RlimitNofile).hard(files).soft(files).build()?,
                ])
                .build()?;
            let namespaces = [
                LinuxNamespaceType::User,
                LinuxNamespaceType::Mount,
                LinuxNamespaceType::Pid,
                LinuxNamespaceType::Ipc,
                LinuxNamespaceType::Uts,
                LinuxNamespaceType::Cgroup,
            ]
            .into_iter()
            .map(|typ| LinuxNamespaceBuilder::default().typ(typ).build())
            .collect::<Result<Vec<_>, _>>()?;
            let mapping = LinuxIdMappingBuilder::default().container_id(0u32).host_id(base).size(RANGE).build()?;
            let linux = LinuxBuilder::default()
                .namespaces(namespaces)
                .uid_mappings(vec![mapping])
                .gid_mappings(vec![mapping])
                .cgroups_path(PathBuf::from("/").join(&cgroup))
                .resources(resources(container, tenant_quota)?)
                .seccomp(seccomp()?)
                .masked_paths(oci_spec::runtime::get_default_maskedpaths())
                .readonly_paths(oci_spec::runtime::get_default_readonly_paths())
                .build()?;
            SpecBuilder::default()
                .version("1.0.2")
                .root(RootBuilder::default().path("rootfs").readonly(read_only_root).build()?)
                .hostname(hostname.clone())
                .mounts(mounts.clone())
                .process(process)
                .linux(linux)
                .build()
        };
        let config = config().map_err(|e| PrepareError::Config(format!("the container's sandbox: {e}")))?;
        let text = serde_json::to_vec(&config).map_err(|e| PrepareError::Config(e.to_string()))?;
        super::paths::write_beneath(&bundle, Path::new("config.json"), &text)?;
        Ok(Sandboxed {
            id: format!("{uid}-{name}"),
            bundle,
            runtime: self.runtime.clone(),
            state: self.state.clone(),
            cgroup,
            programs: in_container,
            layer,
            netns: netns.map(Path::to_path_buf),
        })
    }

    /// Mounts `program` (a host executable) read-only at its own path, unless the system directories bring it
    /// already; returns its path in the container.
    fn mount_program(&self, program: &Path, mounts: &mut Vec<Mount>) -> Result<PathBuf, PrepareError> {
        let real = std::fs::canonicalize(program)
            .map_err(|e| PrepareError::Config(format!("the executable {}: {e}", program.display())))?;
        if real.starts_with("/usr/") {
            return Ok(program.to_path_buf());
        }
        let at = program.to_path_buf();
        if !mounts.iter().any(|m| m.destination() == &at) {
            mounts.push(bind(&real, &at, true)?);
        }
        Ok(at)
    }
}

impl Sandboxed {
    /// The container's cgroup, relative to each hierarchy's root (its pod's is the parent).
    pub fn cgroup(&self) -> &Path {
        &self.cgroup
    }

    /// Where the container's writes land, if it has a writable layer (a container of an image).
    pub fn upper(&self) -> Option<PathBuf> {
        self.layer.as_ref().map(WritableLayer::upper)
    }
}

impl Sandboxed {
    /// The runtime's command, started inside the pod's network namespace when it has one. The container inherits
    /// that namespace rather than naming it in its spec: a runtime entering a running container (`exec`) joins
    /// the container's user namespace first (runc 1.1), and from there may no longer join a network namespace the
    /// host's user namespace owns, so the spec names none and `exec` is started where the container already is.
    fn runtime_command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.runtime);
        command.arg("--root").arg(&self.state);
        if let Some(netns) = &self.netns {
            match std::fs::File::open(netns) {
                Ok(namespace) => {
                    // SAFETY: setns(2) is async-signal-safe; the descriptor stays open until the command is dropped.
                    unsafe {
                        command.pre_exec(move || {
                            use std::os::fd::AsRawFd as _;
                            if libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                            Ok(())
                        });
                    }
                }
                // The command then fails to start, rather than start outside the pod's network.
                Err(error) => {
                    // SAFETY: returning an error from pre_exec touches no memory.
                    unsafe {
                        command.pre_exec(move || Err(std::io::Error::new(error.kind(), "the pod's network namespace")))
                    };
                }
            }
        }
        command
    }

    /// Makes the container's bundle join the user and PID namespaces of the running process `pid` (another
    /// container's first process) rather than make its own: an ephemeral container with `targetContainerName` sees
    /// and may signal its target's processes, as upstream's runtimes give it the target's PID namespace. The user
    /// namespace is joined too, since a PID namespace's `/proc` may only be mounted from the user namespace that owns
    /// it; both containers' users are the pod's range either way.
    pub fn join_pid_namespace_of(&self, pid: u32) -> Result<(), PrepareError> {
        let file = self.bundle.join("config.json");
        let text = std::fs::read(&file)?;
        let mut config: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| PrepareError::Config(format!("the container's sandbox: {e}")))?;
        for namespace in config["linux"]["namespaces"].as_array_mut().into_iter().flatten() {
            let kind = namespace["type"].as_str().unwrap_or_default();
            if kind == "user" || kind == "pid" {
                namespace["path"] = serde_json::json!(format!("/proc/{pid}/ns/{kind}"));
            }
        }
        let text = serde_json::to_vec(&config).map_err(|e| PrepareError::Config(e.to_string()))?;
        super::paths::write_beneath(&self.bundle, Path::new("config.json"), &text)?;
        Ok(())
    }

    /// Makes the container's root ready for a run: a fresh writable layer over its image (whatever an earlier run
    /// wrote is gone, as the kubelet starts a new container); nothing for a container of a host executable, whose
    /// root the bundle holds.
    pub fn fresh_root(&self) -> std::io::Result<()> {
        let init_dir =
            Path::new(INIT_PATH).parent().and_then(|p| p.strip_prefix("/").ok()).unwrap_or(Path::new(".nest"));
        match &self.layer {
            Some(layer) => layer.mount_fresh(init_dir),
            None => Ok(()),
        }
    }

    /// The directory the container's writes to its root land in, while it runs: its writable layer's upper one.
    pub fn writable_layer(&self) -> Option<PathBuf> {
        self.layer.as_ref().map(WritableLayer::upper)
    }

    /// The runtime's process running the container once (it ends when the container does): its output is the
    /// container's, its exit status the container's. The container's own first process is written to
    /// [`Sandboxed::pid_file`].
    pub fn run(&self) -> tokio::process::Command {
        let _ = std::fs::remove_file(self.pid_file());
        let _ = std::fs::remove_file(self.bundle.join("runtime.log"));
        let mut command = self.runtime_command();
        command
            .arg("--log")
            .arg(self.bundle.join("runtime.log"))
            .args(["--log-format", "json", "run", "--keep"])
            // A session keyring per container is a key of its host user, and the kernel allows a user 200
            // (kernel.keys.maxkeys): the 201st container of one namespace would not start. The keyring the container
            // inherits instead is out of its reach, since the seccomp filter refuses every keyring call.
            .arg("--no-new-keyring")
            .arg("--bundle")
            .arg(&self.bundle)
            .arg("--pid-file")
            .arg(self.pid_file())
            .arg(&self.id);
        command
    }

    /// The pod's network namespace (a bind mount), where its ports are forwarded to; `None` when it has none of its
    /// own.
    pub fn netns(&self) -> Option<&Path> {
        self.netns.as_deref()
    }

    /// A new file for the runtime to write an exec'd command's host process ID in, in the container's bundle.
    pub fn exec_pid_file(&self) -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.bundle.join(format!("exec-{n}.pid"))
    }

    /// Where the runtime writes the host process ID of the container's first process.
    pub fn pid_file(&self) -> PathBuf {
        self.bundle.join("pid")
    }

    /// The container's first process, once the runtime has written it.
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.pid_file()).ok()?.trim().parse().ok()
    }

    /// Why the runtime failed to start the container: the last error it logged.
    pub fn failure(&self) -> Option<String> {
        let log = std::fs::read_to_string(self.bundle.join("runtime.log")).ok()?;
        log.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|entry| matches!(entry["level"].as_str(), Some("error" | "fatal")))
            .filter_map(|entry| entry["msg"].as_str().map(str::to_string))
            .next_back()
    }

    /// After the container exited: whether the kernel killed it for memory; then the runtime forgets it (killing
    /// whatever of it is left).
    pub async fn finish(&self) -> bool {
        let oom = cgroup_hierarchies().iter().any(|hierarchy| {
            let dir = hierarchy.join(&self.cgroup);
            ["memory.oom_control", "memory.events"].iter().any(|file| {
                std::fs::read_to_string(dir.join(file)).unwrap_or_default().lines().any(|line| {
                    line.strip_prefix("oom_kill ").and_then(|n| n.trim().parse::<u64>().ok()).is_some_and(|n| n > 0)
                })
            })
        });
        let _ = self.runtime_command().args(["delete", "--force"]).arg(&self.id).output().await;
        if let Some(layer) = self.layer.clone() {
            let _ = tokio::task::spawn_blocking(move || layer.remove()).await;
        }
        oom
    }

    /// A command run inside the running container, as its own process is (user, environment, namespaces, limits):
    /// for exec probes. A first word naming an allowlisted executable by file name runs that executable.
    pub fn exec(&self, command: &[String]) -> tokio::process::Command {
        self.exec_with(command, false, None)
    }

    /// [`Sandboxed::exec`], with a terminal in the container when `tty` (the runtime copies between it and its own
    /// standard streams, which must then be a terminal), the command's host process ID written to `pid_file`: for
    /// `kubectl exec`.
    pub fn exec_with(&self, command: &[String], tty: bool, pid_file: Option<&Path>) -> tokio::process::Command {
        let mut args = command.to_vec();
        if let Some(first) = args.first_mut()
            && !first.contains('/')
            && let Some(program) = self.programs.iter().find(|p| p.file_name().is_some_and(|n| n == first.as_str()))
        {
            *first = program.display().to_string();
        }
        let mut run = self.runtime_command();
        run.arg("exec");
        if tty {
            run.arg("--tty");
        }
        if let Some(pid_file) = pid_file {
            run.arg("--pid-file").arg(pid_file);
        }
        run.arg(&self.id).args(args);
        run
    }
}

/// Whether a process's command line (`/proc/<pid>/cmdline`, its NULs made spaces) is a container's init: the node's
/// binary as `/.nest/init PROGRAM…`, or run through its loader as `/.nest/lib/<loader> … /.nest/init PROGRAM…` (a
/// container of an image).
pub fn runs_init(command_line: &str) -> bool {
    command_line.starts_with(&format!("{INIT_PATH} ")) || command_line.starts_with(&format!("{INIT_LIBRARIES_PATH}/"))
}

/// The dynamic loader and shared libraries the node's binary runs with, copied into a directory every container may
/// read: the init of a container of an image ([`INIT_PATH`]) runs through them (`/.nest/lib/<loader> --library-path
/// /.nest/lib /.nest/init …`), since the image's own libraries may be others or none. The program the init starts
/// runs with the image's own loader and libraries, as the image expects.
#[derive(Debug)]
struct InitLibraries {
    dir: PathBuf,
    /// The loader's file name (`ld-linux-x86-64.so.2`).
    loader: String,
}

impl InitLibraries {
    /// Copies the loader and the libraries this process has mapped (`/proc/self/maps`) into `dir`; `None` for a
    /// binary without a loader (static), or when copying fails (the init then runs directly, as before).
    fn copy(dir: &Path) -> Option<InitLibraries> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let libraries = shared_objects(&maps);
        let loader = libraries.iter().find_map(|path| {
            let name = path.file_name()?.to_str()?;
            name.starts_with("ld-").then(|| name.to_string())
        })?;
        let copied = || -> std::io::Result<()> {
            let _ = std::fs::remove_dir_all(dir);
            // On a machine's first run nothing under /run/nest exists yet: every missing ancestor is made here.
            std::fs::DirBuilder::new().recursive(true).mode(0o711).create(dir.parent().unwrap_or(dir))?;
            create_dir(dir, 0o755)?;
            for library in &libraries {
                let Some(name) = library.file_name() else { continue };
                std::fs::copy(library, dir.join(name))?;
                std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755))?;
            }
            Ok(())
        };
        match copied() {
            Ok(()) => Some(InitLibraries { dir: dir.to_path_buf(), loader }),
            Err(error) => {
                tracing::warn!(%error, dir = %dir.display(), "copying the init's libraries; images without them fail");
                None
            }
        }
    }

    /// The words before the init's own: its loader, told where the libraries are.
    fn command(&self) -> Vec<String> {
        vec![format!("{INIT_LIBRARIES_PATH}/{}", self.loader), "--library-path".into(), INIT_LIBRARIES_PATH.into()]
    }
}

/// The shared objects (`*.so`, `*.so.N`) a `/proc/<pid>/maps` text names, each once.
fn shared_objects(maps: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        let Some(path) = line.split_whitespace().nth(5).filter(|p| p.starts_with('/')) else { continue };
        let path = PathBuf::from(path);
        let shared =
            path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".so") || n.contains(".so."));
        if shared && !found.contains(&path) {
            found.push(path);
        }
    }
    found
}

/// The roots of the cgroup hierarchies the runtime makes a container's cgroup in: each v1 hierarchy, or the one v2
/// hierarchy.
fn cgroup_hierarchies() -> Vec<PathBuf> {
    Hierarchy::discover().into_iter().map(|h| h.root).collect()
}

/// The node's own hard limit of open files: what every container gets (a user namespace cannot raise it).
fn open_files_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit(2) writes only the struct it is given.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if got == 0 { limit.rlim_max } else { 1024 }
}

/// Makes `dir` (if missing) with exactly `mode`, whatever the umask.
/// The directory nest's init is mounted in, made here rather than by the OCI runtime: the runtime would make it
/// under the node's umask (077), and a container user other than its root could not reach its init. The
/// container's root (host user `base`) owns it, as it owns the root, to make the mount point in it.
fn init_mount_point(rootfs: &Path, base: u32) -> std::io::Result<()> {
    let parent = Path::new(INIT_PATH).parent().and_then(|p| p.strip_prefix("/").ok()).unwrap_or(Path::new(".nest"));
    create_dir(&rootfs.join(parent), 0o755)?;
    std::os::unix::fs::lchown(rootfs.join(parent), Some(base), Some(base))
}

fn create_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

/// The host user and group a pod's volumes belong to (in the pod's range from `base`): `runAsUser` of the pod, else
/// the one its containers all run as, else the container's root; group `fsGroup` (which then reads them), else
/// `runAsGroup`, else root's. The third value says whether the group reads them.
fn volume_users(pod: &Pod, base: u32) -> (u32, u32, bool) {
    let spec = pod.spec.clone().unwrap_or_default();
    let context = spec.security_context.clone().unwrap_or_default();
    let users: std::collections::BTreeSet<Option<i64>> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| c.security_context.as_ref().and_then(|s| s.run_as_user))
        .collect();
    let shared = match users.into_iter().collect::<Vec<_>>()[..] {
        [Some(user)] => Some(user),
        _ => None,
    };
    let id = |value: Option<i64>| value.and_then(|v| u32::try_from(v).ok()).filter(|v| *v < RANGE);
    let uid = base + id(context.run_as_user.or(shared)).unwrap_or(0);
    let fs_group = id(context.fs_group);
    let gid = base + fs_group.or(id(context.run_as_group)).unwrap_or(0);
    (uid, gid, fs_group.is_some())
}

/// Gives `path` to `uid`:`gid` (0600/0700, or 0640/0750 when the group reads), everything beneath it too when
/// `deep`; symbolic links are neither followed nor changed.
fn own(path: &Path, uid: u32, gid: u32, group_reads: bool, deep: bool) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    let mode = match (meta.is_dir(), group_reads) {
        (true, false) => 0o700,
        (true, true) => 0o750,
        (false, false) => 0o600,
        (false, true) => 0o640,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if deep && meta.is_dir() {
        for entry in std::fs::read_dir(path)?.flatten() {
            own(&entry.path(), uid, gid, group_reads, true)?;
        }
    }
    Ok(())
}

/// A bind mount of host `source` at `destination`, never with set-user-ID programs or devices.
fn bind(source: &Path, destination: &Path, read_only: bool) -> Result<Mount, PrepareError> {
    let mut options = vec!["rbind".to_string(), "nosuid".into(), "nodev".into()];
    options.push(if read_only { "ro" } else { "rw" }.into());
    mount("bind", source, destination, options)
}

fn mount(typ: &str, source: &Path, destination: &Path, options: Vec<String>) -> Result<Mount, PrepareError> {
    MountBuilder::default()
        .typ(typ)
        .source(source)
        .destination(destination)
        .options(options)
        .build()
        .map_err(|e| PrepareError::Config(format!("mounting {}: {e}", destination.display())))
}

/// A volume's `mountPath` as a path in the container: absolute, without `..`, and not where the sandbox keeps its
/// own (`/proc`, `/sys`, `/dev`, `/.nest`, or `/` itself).
fn mount_path(path: &str) -> Result<PathBuf, PrepareError> {
    let refuse = |why: &str| Err(PrepareError::Config(format!("volumeMounts mountPath {path:?} {why}")));
    let at = Path::new(path);
    if !at.is_absolute() || path.contains('\0') {
        return refuse("must be an absolute path");
    }
    if at.components().any(|c| c == Component::ParentDir) {
        return refuse("must not contain '..'");
    }
    let first = at.components().find_map(|c| match c {
        Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
        _ => None,
    });
    match first.as_deref() {
        None => refuse("must not be the root directory"),
        Some("proc" | "sys" | ".nest") => refuse("is reserved for the container's sandbox"),
        Some("dev") if at.components().count() == 2 => refuse("is reserved for the container's sandbox"),
        _ => Ok(at.to_path_buf()),
    }
}

/// The host name of the pod's containers: `spec.hostname`, else the pod's name, cut to 63 characters.
fn hostname(pod: &Pod) -> String {
    let name = pod.spec.as_ref().and_then(|s| s.hostname.clone()).unwrap_or_else(|| pod.name_any());
    let mut cut: String = name.chars().take(63).collect();
    while cut.ends_with(['-', '.']) {
        cut.pop();
    }
    cut
}

/// Writes a file of the root filesystem, readable by the container's users.
fn write_public(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    file.write_all(contents)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))
}

/// The container's own `/proc` and `/dev` (with `pts`, `shm` and `mqueue`), and a `/tmp` in memory when `memory_tmp`
/// (a container of an image has its `/tmp` in its writable layer, as under containerd).
fn kernel_filesystems(memory_tmp: bool) -> Result<Vec<Mount>, PrepareError> {
    let options = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut mounts = vec![
        mount("proc", Path::new("proc"), Path::new("/proc"), options(&["nosuid", "noexec", "nodev"]))?,
        mount(
            "tmpfs",
            Path::new("tmpfs"),
            Path::new("/dev"),
            options(&["nosuid", "strictatime", "mode=755", "size=65536k"]),
        )?,
        mount(
            "devpts",
            Path::new("devpts"),
            Path::new("/dev/pts"),
            options(&["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]),
        )?,
        mount(
            "tmpfs",
            Path::new("shm"),
            Path::new("/dev/shm"),
            options(&["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]),
        )?,
        mount("mqueue", Path::new("mqueue"), Path::new("/dev/mqueue"), options(&["nosuid", "noexec", "nodev"]))?,
    ];
    if memory_tmp {
        mounts.push(mount(
            "tmpfs",
            Path::new("tmpfs"),
            Path::new("/tmp"),
            options(&["nosuid", "nodev", "mode=1777", "size=65536k"]),
        )?);
    }
    Ok(mounts)
}

/// Whether the container's root is mounted read-only: always for a container of a host executable (its root is the
/// host's), else as `readOnlyRootFilesystem` says.
fn root_read_only(of_image: bool, context: &SecurityContext) -> bool {
    !of_image || context.read_only_root_filesystem == Some(true)
}

/// Makes the container's root filesystem at `rootfs` (owned by the container's root, host user `base`) and returns
/// the mounts that fill it: the host's system directories read-only, a generated `/etc`, and the container's own
/// `/proc`, `/dev` and `/tmp`.
fn root_filesystem(rootfs: &Path, base: u32, pod_ip: &str, hostname: &str) -> Result<Vec<Mount>, PrepareError> {
    create_dir(rootfs, 0o755)?;
    std::os::unix::fs::lchown(rootfs, Some(base), Some(base))?;
    init_mount_point(rootfs, base)?;
    let mut mounts = kernel_filesystems(true)?;
    mounts.push(bind(Path::new("/usr"), Path::new("/usr"), true)?);
    // Merged-/usr systems link these into /usr; others have them as directories of their own.
    for name in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(name);
        match std::fs::symlink_metadata(&host) {
            Ok(meta) if meta.file_type().is_symlink() => {
                std::os::unix::fs::symlink(std::fs::read_link(&host)?, rootfs.join(name))?;
            }
            Ok(meta) if meta.is_dir() => mounts.push(bind(&host, &host, true)?),
            _ => {}
        }
    }
    let etc = rootfs.join("etc");
    create_dir(&etc, 0o755)?;
    // The container's root makes mount points in it (/etc/ssl below).
    std::os::unix::fs::lchown(&etc, Some(base), Some(base))?;
    let resolver = std::fs::read("/etc/resolv.conf").unwrap_or_default();
    let files: [(&str, Vec<u8>); 6] = [
        (
            "passwd",
            b"root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                .to_vec(),
        ),
        ("group", b"root:x:0:\nnogroup:x:65534:\n".to_vec()),
        (
            "hosts",
            format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{pod_ip}\t{hostname}\n")
                .into_bytes(),
        ),
        ("hostname", format!("{hostname}\n").into_bytes()),
        ("resolv.conf", resolver),
        ("nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n".to_vec()),
    ];
    for (name, contents) in files {
        write_public(&etc.join(name), &contents)?;
    }
    for certificates in ["/etc/ssl/certs", "/etc/ca-certificates"] {
        let host = Path::new(certificates);
        if host.is_dir() {
            mounts.push(bind(host, host, true)?);
        }
    }
    Ok(mounts)
}

/// The mounts that fill the root of a container of an image (its writable layer over the image's, mounted at each
/// run by [`Sandboxed::fresh_root`]): the container's own `/proc` and `/dev`, and its `/etc/hosts`, `/etc/hostname` and
/// `/etc/resolv.conf` (written into the bundle) over the image's, which unpacking made sure exist.
fn image_filesystem(bundle: &Path, pod_ip: &str, hostname: &str) -> Result<Vec<Mount>, PrepareError> {
    let mut mounts = kernel_filesystems(false)?;
    // What the node says of the pod, over the image's own files (which unpacking made sure exist).
    let generated = bundle.join("etc");
    create_dir(&generated, 0o755)?;
    let resolver = std::fs::read("/etc/resolv.conf").unwrap_or_default();
    let files: [(&str, Vec<u8>); 3] = [
        (
            "hosts",
            format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{pod_ip}\t{hostname}\n")
                .into_bytes(),
        ),
        ("hostname", format!("{hostname}\n").into_bytes()),
        ("resolv.conf", resolver),
    ];
    for (name, contents) in files {
        write_public(&generated.join(name), &contents)?;
        mounts.push(bind(&generated.join(name), &Path::new("/etc").join(name), true)?);
    }
    Ok(mounts)
}

/// Refuses what no sandbox here gives: privileged containers, the host's namespaces, and seccomp profiles other than
/// `RuntimeDefault` (which every container gets).
fn refuse_privileges(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    pod: &PodSecurityContext,
    container: &SecurityContext,
) -> Result<(), PrepareError> {
    let refuse = |what: &str| {
        Err(PrepareError::Config(format!("{what}: this node runs every container in a sandbox and cannot give it")))
    };
    if container.privileged == Some(true) {
        return refuse("privileged: true");
    }
    for (asked, what) in
        [(spec.host_network, "hostNetwork: true"), (spec.host_pid, "hostPID: true"), (spec.host_ipc, "hostIPC: true")]
    {
        if asked == Some(true) {
            return refuse(what);
        }
    }
    if container.proc_mount.as_deref().is_some_and(|m| m != "Default") {
        return refuse("procMount: Unmasked");
    }
    for profile in [&pod.seccomp_profile, &container.seccomp_profile].into_iter().flatten() {
        if profile.type_ != "RuntimeDefault" {
            return refuse(&format!("seccompProfile type {}", profile.type_));
        }
    }
    Ok(())
}

/// The container's user inside its range: `runAsUser` and `runAsGroup` (the container's over the pod's, root by
/// default), with `fsGroup` and `supplementalGroups` as further groups; `runAsNonRoot` refuses root.
fn user(
    pod: &PodSecurityContext,
    container: &SecurityContext,
    image: Option<(u32, Option<u32>)>,
) -> Result<oci_spec::runtime::User, PrepareError> {
    let within = |id: i64, what: &str| -> Result<u32, PrepareError> {
        u32::try_from(id).ok().filter(|id| *id < RANGE).ok_or_else(|| {
            PrepareError::Config(format!("{what} {id} is outside the container's users (0 to {})", RANGE - 1))
        })
    };
    let image_uid = image.map(|(uid, _)| i64::from(uid));
    let image_gid = image.and_then(|(_, gid)| gid).map(i64::from);
    let uid = within(container.run_as_user.or(pod.run_as_user).or(image_uid).unwrap_or(0), "runAsUser")?;
    let gid = within(container.run_as_group.or(pod.run_as_group).or(image_gid).unwrap_or(0), "runAsGroup")?;
    if container.run_as_non_root.or(pod.run_as_non_root) == Some(true) && uid == 0 {
        return Err(PrepareError::Config("container has runAsNonRoot and image will run as root".into()));
    }
    let mut groups = Vec::new();
    for group in pod.fs_group.iter().chain(pod.supplemental_groups.iter().flatten()) {
        groups.push(within(*group, "supplemental group")?);
    }
    UserBuilder::default()
        .uid(uid)
        .gid(gid)
        .additional_gids(groups)
        .build()
        .map_err(|e| PrepareError::Config(e.to_string()))
}

/// The container's capabilities: baseline's defaults, minus `drop` (`ALL` drops every one), plus `add`, which may
/// name only capabilities baseline allows.
fn capabilities(context: &SecurityContext) -> Result<Vec<Capability>, PrepareError> {
    let asked = context.capabilities.clone().unwrap_or_default();
    let normal = |name: &str| name.trim_start_matches("CAP_").to_ascii_uppercase();
    let drop: Vec<String> = asked.drop.iter().flatten().map(|n| normal(n)).collect();
    let mut names: Vec<String> = if drop.iter().any(|d| d == "ALL") {
        Vec::new()
    } else {
        BASELINE_CAPABILITIES.iter().map(|c| c.to_string()).filter(|c| !drop.contains(c)).collect()
    };
    for add in asked.add.iter().flatten() {
        let name = normal(add);
        if !BASELINE_CAPABILITIES.contains(&name.as_str()) {
            return Err(PrepareError::Config(format!(
                "capability {add} is not allowed on this node (Pod Security baseline allows {})",
                BASELINE_CAPABILITIES.join(", ")
            )));
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .iter()
        .map(|name| name.parse::<Capability>().map_err(|_| PrepareError::Config(format!("capability {name}"))))
        .collect()
}

/// cgroup limits from `resources.limits`: memory (without swap) and CPU as Kubernetes sets them, and the node's
/// process limit. A CPU limit is held at `tenant_quota`, the CFS quota of the tenant's share the container is beneath
/// (in microseconds a 100 ms period): cgroup v1 refuses a quota above its parent's, and no more is to be had anyway.
fn resources(
    container: &Container,
    tenant_quota: Option<u64>,
) -> Result<oci_spec::runtime::LinuxResources, oci_spec::OciSpecError> {
    let limits = container.resources.as_ref().and_then(|r| r.limits.clone()).unwrap_or_default();
    let mut resources = LinuxResourcesBuilder::default()
        .devices(vec![LinuxDeviceCgroupBuilder::default().allow(false).access("rwm").build()?])
        .pids(LinuxPidsBuilder::default().limit(PIDS_LIMIT).build()?);
    // A limit is a limit however small: a fraction of a byte is a byte, and the smallest CPU quota the kernel takes
    // (1 ms a period); only no limit, or a zero one, leaves the container unlimited here. Rounded up, as the kubelet
    // rounds (`MilliValue`, `Value`).
    if let Some(memory) = limits.get("memory") {
        let bytes = nest_core::quantity::parse(&memory.0).max(0.0).ceil() as i64;
        if bytes > 0 {
            resources = resources.memory(LinuxMemoryBuilder::default().limit(bytes).swap(bytes).build()?);
        }
    }
    if let Some(cpu) = limits.get("cpu") {
        let period = super::tenants::CPU_PERIOD_US;
        let quota = (nest_core::quantity::parse(&cpu.0).max(0.0) * period as f64).ceil() as i64;
        if quota > 0 {
            let most = tenant_quota.map_or(i64::MAX, |q| i64::try_from(q).unwrap_or(i64::MAX));
            let quota = quota.max(1000).min(most);
            resources = resources.cpu(LinuxCpuBuilder::default().quota(quota).period(period).build()?);
        }
    }
    resources.build()
}

/// The seccomp filter: everything is allowed but [`REFUSED_SYSCALLS`], `clone` making namespaces (`EPERM`), and
/// `clone3` (`ENOSYS`, so that C libraries fall back to `clone`, whose flags the filter can see).
fn seccomp() -> Result<oci_spec::runtime::LinuxSeccomp, oci_spec::OciSpecError> {
    let mut syscalls = vec![
        LinuxSyscallBuilder::default()
            .names(REFUSED_SYSCALLS.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(libc::EPERM as u32)
            .build()?,
        LinuxSyscallBuilder::default()
            .names(vec!["clone3".to_string()])
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(libc::ENOSYS as u32)
            .build()?,
    ];
    for flag in NAMESPACE_FLAGS {
        let arg = LinuxSeccompArgBuilder::default()
            .index(0usize)
            .value(*flag)
            .value_two(*flag)
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()?;
        syscalls.push(
            LinuxSyscallBuilder::default()
                .names(vec!["clone".to_string()])
                .action(LinuxSeccompAction::ScmpActErrno)
                .errno_ret(libc::EPERM as u32)
                .args(vec![arg])
                .build()?,
        );
    }
    LinuxSeccompBuilder::default().default_action(LinuxSeccompAction::ScmpActAllow).syscalls(syscalls).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_baselines_less_what_is_dropped_and_nothing_beyond_it() {
        let context = |add: &[&str], drop: &[&str]| -> SecurityContext {
            serde_json::from_value(serde_json::json!({"capabilities": {"add": add, "drop": drop}})).unwrap()
        };
        let all = capabilities(&SecurityContext::default()).unwrap();
        assert_eq!(all.len(), BASELINE_CAPABILITIES.len());
        assert!(!all.contains(&Capability::NetRaw));
        assert!(capabilities(&context(&[], &["ALL"])).unwrap().is_empty());
        assert_eq!(capabilities(&context(&["NET_BIND_SERVICE"], &["ALL"])).unwrap(), vec![Capability::NetBindService]);
        assert_eq!(capabilities(&context(&[], &["CAP_CHOWN"])).unwrap().len(), BASELINE_CAPABILITIES.len() - 1);
        for beyond in ["SYS_ADMIN", "NET_RAW", "CAP_SYS_PTRACE", "BPF"] {
            let error = capabilities(&context(&[beyond], &[])).unwrap_err().to_string();
            assert!(error.contains(beyond), "{error}");
        }
    }

    #[test]
    fn users_stay_in_the_containers_range_and_run_as_non_root_refuses_root() {
        let context = |value: serde_json::Value| -> SecurityContext { serde_json::from_value(value).unwrap() };
        let pod: PodSecurityContext =
            serde_json::from_value(serde_json::json!({"runAsUser": 1000, "fsGroup": 2000})).unwrap();
        let user = user(&pod, &SecurityContext::default(), None).unwrap();
        assert_eq!((user.uid(), user.gid()), (1000, 0));
        assert_eq!(user.additional_gids().clone().unwrap(), vec![2000]);
        let own = user_of(&pod, &context(serde_json::json!({"runAsUser": 7, "runAsGroup": 8})));
        assert_eq!(own, (7, 8), "the container's own setting wins");
        for (value, field) in [
            (serde_json::json!({"runAsUser": 65536}), "runAsUser"),
            (serde_json::json!({"runAsGroup": -1}), "runAsGroup"),
        ] {
            let error = super::user(&PodSecurityContext::default(), &context(value), None).unwrap_err().to_string();
            assert!(error.contains(field), "{error}");
        }
        let error =
            super::user(&PodSecurityContext::default(), &context(serde_json::json!({"runAsNonRoot": true})), None)
                .unwrap_err()
                .to_string();
        assert!(error.contains("runAsNonRoot"), "{error}");
        // An image's numeric user is who the container runs as unless the pod says otherwise; with it, runAsNonRoot
        // holds.
        let nonroot = context(serde_json::json!({"runAsNonRoot": true}));
        let from_image = super::user(&PodSecurityContext::default(), &nonroot, Some((65532, Some(65532)))).unwrap();
        assert_eq!((from_image.uid(), from_image.gid()), (65532, 65532));
        let overridden = super::user(&pod, &SecurityContext::default(), Some((65532, None))).unwrap();
        assert_eq!(overridden.uid(), 1000, "the pod's runAsUser wins over the image's");
    }

    fn user_of(pod: &PodSecurityContext, container: &SecurityContext) -> (u32, u32) {
        let user = user(pod, container, None).unwrap();
        (user.uid(), user.gid())
    }

    #[test]
    fn a_containers_cpu_limit_is_held_at_its_tenants_share() {
        let container: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "resources": {"limits": {"cpu": "2", "memory": "64Mi"}},
        }))
        .unwrap();
        let quota = |tenant: Option<u64>| {
            let resources = resources(&container, tenant).unwrap();
            resources.cpu().as_ref().and_then(|c| c.quota())
        };
        assert_eq!(quota(None), Some(200_000));
        assert_eq!(quota(Some(50_000)), Some(50_000), "v1 refuses a quota above the parent's");
        assert_eq!(quota(Some(1_000_000)), Some(200_000));
        let memory = resources(&container, Some(50_000)).unwrap().memory().as_ref().and_then(|m| m.limit());
        assert_eq!(memory, Some(64 << 20));
    }

    #[test]
    fn an_images_root_is_writable_unless_read_only_root_filesystem_says_and_its_tmp_is_in_it() {
        let read_only: SecurityContext =
            serde_json::from_value(serde_json::json!({"readOnlyRootFilesystem": true})).unwrap();
        assert!(!root_read_only(true, &SecurityContext::default()));
        assert!(root_read_only(true, &read_only));
        assert!(root_read_only(false, &SecurityContext::default()), "a host executable's root is the host's");
        let bundle = tempfile::tempdir().unwrap();
        let mounts = image_filesystem(bundle.path(), "10.0.0.2", "web").unwrap();
        let at: Vec<&Path> = mounts.iter().map(|m| m.destination().as_path()).collect();
        assert!(!at.contains(&Path::new("/tmp")), "/tmp is in the writable layer, as under containerd: {at:?}");
        for own in ["/proc", "/dev", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"] {
            assert!(at.contains(&Path::new(own)), "{own} missing from {at:?}");
        }
        assert!(std::fs::read_to_string(bundle.path().join("etc/hosts")).unwrap().contains("10.0.0.2\tweb"));
        let host = kernel_filesystems(true).unwrap();
        assert!(host.iter().any(|m| m.destination() == Path::new("/tmp")), "a host executable's /tmp is memory");
    }

    #[test]
    fn the_inits_libraries_are_copied_on_a_machine_where_no_run_directory_of_nests_exists_yet() {
        let run = tempfile::tempdir().unwrap();
        let dir = run.path().join("nest/init-libraries/0123abcd");
        let libraries = InitLibraries::copy(&dir).expect("a loader and libraries in the test binary's maps");
        assert!(dir.join(&libraries.loader).is_file(), "{:?}", std::fs::read_dir(&dir).unwrap().collect::<Vec<_>>());
        let mode = std::fs::metadata(run.path().join("nest")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o711, "containers' users may pass through, not list");
    }

    #[test]
    fn the_inits_loader_and_libraries_are_found_in_its_maps() {
        let maps = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 1 /usr/local/bin/nest
7f01-7f02 r--p 00000000 fe:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6
7f02-7f03 r-xp 00001000 fe:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6
7f03-7f04 r--p 00000000 fe:01 3 /usr/lib/x86_64-linux-gnu/libgcc_s.so.1
7f04-7f05 rw-p 00000000 00:00 0
7f05-7f06 r--p 00000000 fe:01 4 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
7ffc-7ffd r-xp 00000000 00:00 0                          [vdso]
";
        let found = shared_objects(maps);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[2].ends_with("ld-linux-x86-64.so.2"));
        let libraries = InitLibraries { dir: "/run/x".into(), loader: "ld-linux-x86-64.so.2".into() };
        assert_eq!(libraries.command(), ["/.nest/lib/ld-linux-x86-64.so.2", "--library-path", "/.nest/lib"]);
        let through_loader = format!("{} {INIT_PATH} /usr/sbin/nginx -g daemon off;", libraries.command().join(" "));
        assert!(runs_init(&through_loader) && runs_init("/.nest/init /usr/bin/python3 app.py"));
        assert!(!runs_init("/usr/sbin/nginx -g daemon off;") && !runs_init("/.nest/initial"));
    }

    #[test]
    fn mount_paths_stay_out_of_the_sandboxs_own_directories() {
        assert_eq!(mount_path("/etc/config").unwrap(), PathBuf::from("/etc/config"));
        assert_eq!(mount_path("/dev/termination-log").unwrap(), PathBuf::from("/dev/termination-log"));
        for bad in ["relative", "/", "/proc", "/proc/sys", "/sys/fs", "/.nest/init", "/dev", "/a/../../etc", "/a\0b"] {
            assert!(mount_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_missing_oci_runtime_is_one_line_saying_what_to_install() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Sandboxes::new(
            dir.path(),
            Path::new("/nonexistent/runc"),
            Path::new("/bin/true"),
            Vec::new(),
            Share::default(),
        );
        let error = missing.err().expect("no sandboxes without a runtime").to_string();
        assert!(error.contains("apt-get install runc") && !error.contains('\n'), "{error}");
    }

    #[test]
    fn user_ranges_are_one_per_namespace_kept_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let mut users = Users::load(dir.path().join("users"));
        let a = users.base("a").unwrap();
        let b = users.base("b").unwrap();
        assert_eq!(a, FIRST_RANGE * RANGE);
        assert_eq!(b, a + RANGE);
        assert_eq!(users.base("a").unwrap(), a);
        let mut again = Users::load(dir.path().join("users"));
        assert_eq!((again.base("b").unwrap(), again.base("c").unwrap()), (b, b + RANGE));
    }
}
