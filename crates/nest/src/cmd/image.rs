//! `nest image`: nest's own image, and a node's image store.
//!
//! - `build` writes nest's image as an OCI archive without Docker: one layer holding this `nest` binary at
//!   `/usr/local/bin/nest` with the shared libraries it links (as `ldd` finds them), a `/etc` with a non-root user
//!   (65532, the user the image runs as) and the host's CA bundle; its entrypoint is `nest`, so a pod's `args` are
//!   nest's subcommand (`args: [debug, http-echo, …]`).
//! - `import` adds the images of an OCI archive to a node's store (`<node data dir>/images`).
//! - `push` sends an archive's image to a registry (plain HTTP to one on this machine).
//! - `pull` fetches an image from a registry into a node's store, as the node would (within its size limit).
//! - `list` prints what a node's store holds.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    which: Which,
}

#[derive(clap::Subcommand, Debug)]
enum Which {
    /// Writes nest's own image (this binary and what it needs) as an OCI archive.
    Build {
        /// The archive to write.
        #[arg(value_parser = crate::cmd::absolute, long, short, value_name = "FILE", default_value = "nest-image.tar")]
        output: PathBuf,
        /// The name the archive gives the image.
        #[arg(long, value_name = "REFERENCE", default_value = concat!("nest:", env!("CARGO_PKG_VERSION")))]
        tag: String,
    },
    /// Adds the images of an OCI archive (a tar of an OCI image layout) to a node's image store.
    Import {
        #[arg(value_parser = crate::cmd::absolute, value_name = "FILE")]
        archive: PathBuf,
        /// The node's data directory (`nest up`'s node keeps its own in `<nest up's data dir>/nodes/nest-node-0`).
        #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR", default_value = "nest-data/nodes/nest-node-0")]
        data_dir: PathBuf,
    },
    /// Pushes the image of an OCI archive to a registry as REFERENCE (plain HTTP to a registry on this machine).
    Push {
        #[arg(value_parser = crate::cmd::absolute, value_name = "FILE")]
        archive: PathBuf,
        #[arg(value_name = "REFERENCE")]
        reference: String,
    },
    /// Pulls REFERENCE from its registry (plain HTTP to one on this machine) into a node's image store, anonymously.
    Pull {
        #[arg(value_name = "REFERENCE")]
        reference: String,
        #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR", default_value = "nest-data/nodes/nest-node-0")]
        data_dir: PathBuf,
        /// The most the image may be, pulled and unpacked (as `nest node --image-size-limit`).
        #[arg(long, value_name = "BYTES", default_value = "8Gi", value_parser = crate::cmd::node::parse_bytes)]
        image_size_limit: u64,
    },
    /// Lists the images of a node's image store.
    List {
        #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR", default_value = "nest-data/nodes/nest-node-0")]
        data_dir: PathBuf,
    },
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    match args.which {
        Which::Build { output, tag } => {
            let digest = build(&output, &tag)?;
            println!("{tag} {digest} written to {}", output.display());
        }
        Which::Import { archive, data_dir } => {
            let store = nest_node::images::Store::open(&data_dir.join("images"))?;
            for reference in store.import(&archive).with_context(|| format!("importing {}", archive.display()))? {
                println!("{reference}");
            }
        }
        Which::Push { archive, reference } => {
            let digest = nest_node::images::push(&archive, &reference, &plain_http(&reference)).await?;
            println!("{reference}@{digest}");
        }
        Which::Pull { reference, data_dir, image_size_limit } => {
            let store = nest_node::images::Store::open(&data_dir.join("images"))?.with_size_limit(image_size_limit);
            let auth = nest_node::images::Auth::default();
            let image = store.pull(&reference, &auth, &plain_http(&reference)).await?;
            println!("{} {}", image.reference, image.id);
        }
        Which::List { data_dir } => {
            let index = std::fs::read_to_string(data_dir.join("images/index.json")).unwrap_or_default();
            let index: serde_json::Value = serde_json::from_str(&index).unwrap_or_default();
            for entry in index["manifests"].as_array().into_iter().flatten() {
                let name = entry["annotations"][nest_node::images::REF_NAME].as_str().unwrap_or_default();
                println!("{name} {}", entry["digest"].as_str().unwrap_or_default());
            }
        }
    }
    Ok(())
}

/// The registry of `reference` when it is on this machine (spoken to over plain HTTP), else nothing. The registry is
/// the reference's, by the distribution grammar: `nginx:1.27` names Docker Hub, `localhost:5000/app` this machine.
fn plain_http(reference: &str) -> Vec<String> {
    let Ok(parsed) = reference.parse::<oci_spec::distribution::Reference>() else { return Vec::new() };
    let host = parsed.registry().to_string();
    let name = host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h);
    let local = name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if local { vec![host] } else { Vec::new() }
}

/// Whether `binary` (ELF) asks for a program interpreter, that is, is dynamically linked: read from its program
/// headers rather than from `ldd`'s words.
fn dynamically_linked(binary: &Path) -> anyhow::Result<bool> {
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    let data = std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&*data)
        .map_err(|e| anyhow::anyhow!("{} is no 64-bit ELF executable: {e}", binary.display()))?;
    let endian = header.endian().map_err(|e| anyhow::anyhow!("{}: {e}", binary.display()))?;
    let headers = header.program_headers(endian, &*data).map_err(|e| anyhow::anyhow!("{}: {e}", binary.display()))?;
    Ok(headers.iter().any(|h| h.p_type(endian) == object::elf::PT_INTERP))
}

/// The shared libraries `binary` links, as `ldd` lists them (the loader included); none when it is static.
fn libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !dynamically_linked(binary)? {
        return Ok(Vec::new());
    }
    let out = std::process::Command::new("ldd").arg(binary).output().context("running ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(out.status.success(), "ldd {}: {}", binary.display(), String::from_utf8_lossy(&out.stderr));
    let mut found = Vec::new();
    for line in text.lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next().filter(|p| p.starts_with('/')),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            found.push(PathBuf::from(path));
        }
    }
    Ok(found)
}

/// Writes nest's image to `output` as `tag`; returns the manifest's digest.
fn build(output: &Path, tag: &str) -> anyhow::Result<String> {
    let nest = std::env::current_exe().context("finding this binary")?;
    let mut layer = tar::Builder::new(Vec::new());
    let mut directories = std::collections::BTreeSet::new();
    let mut directory = |layer: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, owner: u64| -> anyhow::Result<()> {
        let mut at = PathBuf::new();
        for part in Path::new(path).iter() {
            at.push(part);
            if directories.insert(at.clone()) {
                let mut header = tar::Header::new_ustar();
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(if at == Path::new(path) { mode } else { 0o755 });
                header.set_uid(if at == Path::new(path) { owner } else { 0 });
                header.set_gid(if at == Path::new(path) { owner } else { 0 });
                header.set_mtime(0);
                header.set_size(0);
                layer.append_data(&mut header, &at, std::io::empty())?;
            }
        }
        Ok(())
    };
    let file = |layer: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, bytes: &[u8]| -> anyhow::Result<()> {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_size(bytes.len() as u64);
        layer.append_data(&mut header, path, bytes)?;
        Ok(())
    };
    for (dir, mode, owner) in [("tmp", 0o1777, 0), ("etc/ssl/certs", 0o755, 0), ("home/nonroot", 0o700, 65532)] {
        directory(&mut layer, dir, mode, owner)?;
    }
    directory(&mut layer, "usr/local/bin", 0o755, 0)?;
    file(&mut layer, "usr/local/bin/nest", 0o755, &std::fs::read(&nest).context("reading this binary")?)?;
    for library in libraries(&nest)? {
        let inside = library.strip_prefix("/").unwrap_or(&library).to_path_buf();
        if let Some(parent) = inside.parent() {
            directory(&mut layer, &parent.to_string_lossy(), 0o755, 0)?;
        }
        let bytes = std::fs::read(&library).with_context(|| format!("reading {}", library.display()))?;
        file(&mut layer, &inside.to_string_lossy(), 0o755, &bytes)?;
    }
    let passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
    file(&mut layer, "etc/passwd", 0o644, passwd.as_bytes())?;
    file(&mut layer, "etc/group", 0o644, b"root:x:0:\nnonroot:x:65532:\n")?;
    file(&mut layer, "etc/nsswitch.conf", 0o644, b"passwd: files\ngroup: files\nhosts: files dns\n")?;
    for empty in ["etc/hosts", "etc/hostname", "etc/resolv.conf"] {
        file(&mut layer, empty, 0o644, b"")?;
    }
    if let Ok(bundle) = std::fs::read("/etc/ssl/certs/ca-certificates.crt") {
        file(&mut layer, "etc/ssl/certs/ca-certificates.crt", 0o644, &bundle)?;
    }
    let mut layer = layer.into_inner()?;
    layer.flush()?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => oci_spec::image::Arch::Amd64,
        "aarch64" => oci_spec::image::Arch::ARM64,
        other => oci_spec::image::Arch::Other(other.to_string()),
    };
    let config = oci_spec::image::ConfigBuilder::default()
        .user("65532:65532".to_string())
        .entrypoint(vec!["/usr/local/bin/nest".to_string()])
        .env(vec!["PATH=/usr/local/bin:/usr/bin:/bin".to_string()])
        .working_dir("/".to_string())
        .build()?;
    let rootfs = oci_spec::image::RootFsBuilder::default()
        .typ("layers".to_string())
        .diff_ids(vec![nest_node::images::digest_of(&layer)])
        .build()?;
    let configuration = oci_spec::image::ImageConfigurationBuilder::default()
        .architecture(arch)
        .os(oci_spec::image::Os::Linux)
        .config(config)
        .rootfs(rootfs)
        .build()?;
    Ok(nest_node::images::write_archive(output, tag, &configuration, &layer)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reference_whose_registry_is_this_machine_is_spoken_to_over_plain_http() {
        assert_eq!(plain_http("localhost:5000/team/app:1"), vec!["localhost:5000"]);
        assert_eq!(plain_http("127.0.0.1:5000/app"), vec!["127.0.0.1:5000"]);
        // Docker Hub names, whatever their text looks like.
        assert!(plain_http("nginx:1.27").is_empty());
        assert!(plain_http("localhost:5000").is_empty(), "a repository named localhost with tag 5000");
        assert!(plain_http("registry.example:5000/app").is_empty());
    }

    #[test]
    fn a_dynamically_linked_binary_is_told_by_its_program_headers() {
        assert!(dynamically_linked(&std::env::current_exe().unwrap()).unwrap());
        let not_elf = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(not_elf.path(), "statically linked").unwrap();
        assert!(dynamically_linked(not_elf.path()).is_err());
    }
}
