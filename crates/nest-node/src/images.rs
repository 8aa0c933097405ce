//! The node's image store: one OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/…`) under
//! `<data>/images`, each image named in the index by its full reference (`org.opencontainers.image.ref.name`, as
//! `docker.io/library/busybox:1.36`). Images come in three ways: [`Store::import`] of an OCI archive (a tar of a
//! layout, as `nest image build` writes and `skopeo copy … oci-archive:` does), [`Store::pull`] from a registry
//! (Docker Registry HTTP API v2 with its token auth, through [oci-client](https://docs.rs/oci-client); every blob's
//! digest checked), and nothing else. Blobs are shared by every image that has them.
//!
//! A container's root filesystem is its image's layers unpacked once per image and namespace user range
//! ([`Store::rootfs`]), owned by the range's users (a file of the image's user 1000 belongs to host user
//! `base + 1000`): the read-only lower directory of each container's writable layer ([`crate::process::layer`]).
//! Unpacking keeps every path beneath the root (no absolute paths, no `..`,
//! no writing through a link the image made), and applies OCI whiteouts.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write as _};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, ImageManifest, MediaType};
use sha2::Digest as _;

/// The index annotation naming an image.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// The most a manifest, an index or a config may be: they are read whole.
const MOST_METADATA: u64 = 4 << 20;

/// The most an image may be unless the node says otherwise (`nest node --image-size-limit`): the sum of its blobs'
/// sizes as pulled, and again the bytes of its files once unpacked.
pub const DEFAULT_SIZE_LIMIT: u64 = 8 << 30;

/// The most files, directories and links an image's layers may make together.
const MOST_ENTRIES: u64 = 1 << 20;

/// Who pulled an image without credentials: anyone may then use it.
const ANONYMOUS: &str = "anonymous";

/// A failure of the store, in full: for the node's log and the `nest image` commands. What a tenant's pod is told of
/// a failed pull is [`ImageError::failure`]'s fixed description instead.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The reference does not parse.
    #[error("invalid image reference {0:?}: {1}")]
    Reference(String, String),
    /// Asking the registry failed: it was not reached, refused, or answered with an error.
    #[error("registry {registry}: {source}")]
    Registry {
        /// The registry asked, `host[:port]`.
        registry: String,
        #[source]
        source: Box<oci_client::errors::OciDistributionError>,
    },
    /// The registry answered, but not with the image asked for (a digest that does not match, no image for this
    /// machine's platform, a manifest that does not parse or is too big).
    #[error("{0}")]
    Answer(String),
    /// The image is bigger than the node allows (`nest node --image-size-limit`).
    #[error("{image} is {size} bytes, more than this node's image size limit of {limit} bytes")]
    TooLarge { image: String, size: u64, limit: u64 },
    /// What the store holds or was given is not a valid image.
    #[error("{0}")]
    Invalid(String),
    /// Reading or writing the store.
    #[error("image store: {0}")]
    Io(#[from] std::io::Error),
}

/// What a tenant is told of a failed pull: a fixed description by kind, never the registry's own words or the
/// transport's, which would tell what answered at an address (a service's error page, "connection refused", a
/// protocol that is not HTTP). The whole error goes to the node's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullFailure {
    /// The registry was not reached, or the connection failed: name resolution, refused, reset, TLS, a timeout,
    /// something that does not speak HTTP.
    Unreachable,
    /// The registry has no such repository, tag, digest or blob.
    NotFound,
    /// The registry asks for credentials the pod did not give, or refuses those it gave.
    Unauthorized,
    /// The image is bigger than the node allows.
    TooLarge { size: u64, limit: u64 },
    /// The registry answered with something other than the image asked for.
    BadAnswer,
    /// The node failed to keep what it pulled (its disk).
    Node,
}

impl PullFailure {
    /// The description a pod's Event and status give, for the image `whole` (its full reference) of `registry`,
    /// worded after containerd's errors as the kubelet passes them on.
    pub fn describe(self, whole: &str, registry: &str) -> String {
        let what = match self {
            PullFailure::Unreachable => format!("cannot reach registry {registry:?}"),
            PullFailure::NotFound => format!("{whole}: not found"),
            PullFailure::Unauthorized => {
                "pull access denied, repository does not exist or may require authorization: unauthorized".to_string()
            }
            PullFailure::TooLarge { size, limit } => {
                format!("the image is {size} bytes, more than this node's image size limit of {limit} bytes")
            }
            PullFailure::BadAnswer => format!("registry {registry:?} did not answer with a usable image"),
            PullFailure::Node => "the node could not store the image".to_string(),
        };
        format!("failed to pull and unpack image {whole:?}: {what}")
    }
}

impl ImageError {
    /// The kind of failure a pull met, for what the tenant is told ([`PullFailure`]).
    pub fn failure(&self) -> PullFailure {
        use oci_client::errors::{OciDistributionError as E, OciErrorCode as Code};
        match self {
            ImageError::Registry { source, .. } => match source.as_ref() {
                E::RequestError(_) => PullFailure::Unreachable,
                E::AuthenticationFailure(_) | E::UnauthorizedError { .. } | E::RegistryTokenDecodeError(_) => {
                    PullFailure::Unauthorized
                }
                E::ImageManifestNotFoundError(_) => PullFailure::NotFound,
                E::ServerError { code: 401 | 403, .. } => PullFailure::Unauthorized,
                E::ServerError { code: 404, .. } => PullFailure::NotFound,
                E::RegistryError { envelope, .. } => {
                    let codes: Vec<&Code> = envelope.errors.iter().map(|e| &e.code).collect();
                    if codes.iter().any(|c| matches!(c, Code::Unauthorized | Code::Denied)) {
                        PullFailure::Unauthorized
                    } else if codes.iter().any(|c| {
                        matches!(c, Code::ManifestUnknown | Code::NameUnknown | Code::BlobUnknown | Code::NotFound)
                    }) {
                        PullFailure::NotFound
                    } else {
                        PullFailure::BadAnswer
                    }
                }
                _ => PullFailure::BadAnswer,
            },
            ImageError::TooLarge { size, limit, .. } => PullFailure::TooLarge { size: *size, limit: *limit },
            ImageError::Answer(_) | ImageError::Invalid(_) | ImageError::Reference(..) => PullFailure::BadAnswer,
            ImageError::Io(_) => PullFailure::Node,
        }
    }
}

/// An image the store holds.
#[derive(Clone, Debug)]
pub struct Image {
    /// The full reference it was found under.
    pub reference: String,
    /// The digest of its manifest: the container status's `imageID`.
    pub id: String,
    pub config: ImageConfiguration,
    pub layers: Vec<Descriptor>,
}

impl Image {
    /// `<registry>/<repository>@<manifest digest>`: what the kubelet reports as a container's `imageID`.
    pub fn image_id(&self) -> String {
        let repository = match self.reference.parse::<oci_client::Reference>() {
            Ok(parsed) => format!("{}/{}", parsed.registry(), parsed.repository()),
            Err(_) => self.reference.clone(),
        };
        format!("{repository}@{}", self.id)
    }
}

/// The full form of `reference` as containerd normalizes it (`ParseDockerRef`): the one place references are
/// named, for the store, pulls and containers' statuses. `busybox` is `docker.io/library/busybox:latest`,
/// `user/app` is `docker.io/user/app:latest`, `index.docker.io/…` is `docker.io/…`, and a reference with a digest
/// keeps the digest alone (`nginx:1.27@sha256:…` is `docker.io/library/nginx@sha256:…`). oci-client's parser
/// (the distribution grammar) does all but the last.
pub fn normalize(reference: &str) -> Result<String, ImageError> {
    let parsed: oci_client::Reference = reference
        .parse()
        .map_err(|e: oci_client::ParseError| ImageError::Reference(reference.into(), e.to_string()))?;
    if let (Some(_), Some(digest)) = (parsed.tag(), parsed.digest()) {
        let by_digest = oci_client::Reference::with_digest(
            parsed.registry().to_string(),
            parsed.repository().to_string(),
            digest.to_string(),
        );
        return Ok(by_digest.whole());
    }
    Ok(parsed.whole())
}

/// A container's `image` as the kubelet reports it from containerd: the normalized reference, or the text as given
/// when it is none (a waiting container whose reference does not parse).
pub fn reported(reference: &str) -> String {
    normalize(reference).unwrap_or_else(|_| reference.to_string())
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// How a layer's bytes are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
}

/// How a layer of `media_type` is compressed, by its exact media type (OCI's, and Docker's schema 2 ones registries
/// still serve); any other type, zstd among them, is refused by name rather than guessed from its suffix.
fn layer_compression(media_type: &MediaType) -> Result<Compression, ImageError> {
    match media_type {
        MediaType::ImageLayer | MediaType::ImageLayerNonDistributable => Ok(Compression::None),
        MediaType::ImageLayerGzip | MediaType::ImageLayerNonDistributableGzip => Ok(Compression::Gzip),
        MediaType::Other(docker)
            if docker == "application/vnd.docker.image.rootfs.diff.tar.gzip"
                || docker == "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" =>
        {
            Ok(Compression::Gzip)
        }
        other => Err(ImageError::Invalid(format!("a layer of media type {other}, which this node cannot unpack"))),
    }
}

/// A descriptor of `size` bytes of `media_type` with `digest`.
fn descriptor(media_type: MediaType, size: u64, digest: &str) -> Result<Descriptor, ImageError> {
    let digest: oci_spec::image::Digest =
        digest.parse().map_err(|e: oci_spec::OciSpecError| ImageError::Invalid(format!("{digest}: {e}")))?;
    Ok(Descriptor::new(media_type, size, digest))
}

/// The node's image store.
pub struct Store {
    dir: PathBuf,
    /// Held while `index.json` or `pulls.json` is read and rewritten, and while a root filesystem is unpacked.
    lock: Mutex<()>,
    /// The most bytes an image may be, pulled and unpacked.
    limit: u64,
}

impl Store {
    /// The store in `dir`, made empty when it does not exist.
    pub fn open(dir: &Path) -> Result<Store, ImageError> {
        std::fs::create_dir_all(dir.join("blobs/sha256"))?;
        std::fs::create_dir_all(dir.join("rootfs"))?;
        if !dir.join("oci-layout").exists() {
            std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        }
        if !dir.join("index.json").exists() {
            std::fs::write(dir.join("index.json"), br#"{"schemaVersion":2,"manifests":[]}"#)?;
        }
        Ok(Store { dir: dir.to_path_buf(), lock: Mutex::new(()), limit: DEFAULT_SIZE_LIMIT })
    }

    /// This store, refusing images of more than `bytes` (their blobs as pulled, their files once unpacked).
    pub fn with_size_limit(mut self, bytes: u64) -> Store {
        self.limit = bytes;
        self
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn blob_path(&self, digest: &str) -> Result<PathBuf, ImageError> {
        let hex = digest.strip_prefix("sha256:").filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        let hex = hex.ok_or_else(|| ImageError::Invalid(format!("unsupported digest {digest:?}")))?;
        Ok(self.dir.join("blobs/sha256").join(hex.to_ascii_lowercase()))
    }

    /// Whether the store holds the blob `digest`.
    pub fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|p| p.is_file())
    }

    /// A blob that is metadata (a manifest, an index, a config), read whole.
    fn metadata_blob(&self, digest: &str) -> Result<Vec<u8>, ImageError> {
        let mut bytes = Vec::new();
        std::fs::File::open(self.blob_path(digest)?)?.take(MOST_METADATA).read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// Adds `bytes` as a blob; returns its digest.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<String, ImageError> {
        let digest = digest_of(bytes);
        let path = self.blob_path(&digest)?;
        if !path.exists() {
            let temporary = path.with_extension(format!("part-{}", std::process::id()));
            std::fs::write(&temporary, bytes)?;
            std::fs::rename(&temporary, &path)?;
        }
        Ok(digest)
    }

    /// Takes the file `temporary` in as the blob `digest`, once its content is checked to be that digest.
    fn adopt_blob(&self, temporary: &Path, digest: &str) -> Result<(), ImageError> {
        let path = self.blob_path(digest)?;
        let mut hasher = sha2::Sha256::new();
        let mut file = std::fs::File::open(temporary)?;
        let mut chunk = vec![0u8; 1 << 16];
        loop {
            let read = file.read(&mut chunk)?;
            if read == 0 {
                break;
            }
            hasher.update(&chunk[..read]);
        }
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != digest {
            let _ = std::fs::remove_file(temporary);
            return Err(ImageError::Invalid(format!("blob {digest} has digest {actual}")));
        }
        std::fs::rename(temporary, &path)?;
        Ok(())
    }

    fn read_index(&self) -> Result<ImageIndex, ImageError> {
        let text = std::fs::read(self.dir.join("index.json"))?;
        serde_json::from_slice(&text).map_err(|e| ImageError::Invalid(format!("index.json: {e}")))
    }

    /// Names the manifest `manifest` `reference` (a full reference), replacing what had that name. The index is
    /// rewritten under a lock of the store's directory, so that `nest image import` and the node, two processes,
    /// never lose each other's names.
    pub fn tag(&self, reference: &str, manifest: &Descriptor) -> Result<(), ImageError> {
        let _guard = self.guard();
        let lock =
            std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(self.dir.join("index.lock"))?;
        use std::os::fd::AsRawFd as _;
        // SAFETY: flock(2) on a descriptor this function owns; the lock goes when `lock` is closed.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let mut index = self.read_index()?;
        let mut entries: Vec<Descriptor> = index
            .manifests()
            .iter()
            .filter(|d| d.annotations().as_ref().and_then(|a| a.get(REF_NAME)).map(String::as_str) != Some(reference))
            .cloned()
            .collect();
        let mut named = manifest.clone();
        let mut annotations = named.annotations().clone().unwrap_or_default();
        annotations.insert(REF_NAME.to_string(), reference.to_string());
        named.set_annotations(Some(annotations));
        entries.push(named);
        index.set_manifests(entries);
        let text = serde_json::to_vec(&index).map_err(|e| ImageError::Invalid(e.to_string()))?;
        let temporary = self.dir.join(format!("index.json.part-{}", std::process::id()));
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, self.dir.join("index.json"))?;
        Ok(())
    }

    /// The image named `reference` (any form [`normalize`] takes), if the store holds it and all its blobs. A
    /// reference with a digest is found by that digest in the same repository.
    pub fn lookup(&self, reference: &str) -> Option<Image> {
        let whole = normalize(reference).ok()?;
        let parsed: oci_client::Reference = whole.parse().ok()?;
        let index = self.read_index().ok()?;
        let found = index.manifests().iter().find(|d| {
            let name = d.annotations().as_ref().and_then(|a| a.get(REF_NAME)).cloned().unwrap_or_default();
            match parsed.digest() {
                Some(digest) => {
                    d.digest().to_string() == digest
                        && name
                            .parse::<oci_client::Reference>()
                            .is_ok_and(|n| n.registry() == parsed.registry() && n.repository() == parsed.repository())
                }
                None => name == whole,
            }
        })?;
        self.image(&whole, found.digest().as_ref()).ok()
    }

    fn image(&self, reference: &str, manifest_digest: &str) -> Result<Image, ImageError> {
        let manifest: ImageManifest = serde_json::from_slice(&self.metadata_blob(manifest_digest)?)
            .map_err(|e| ImageError::Invalid(format!("manifest {manifest_digest}: {e}")))?;
        let config_digest = manifest.config().digest().to_string();
        let config: ImageConfiguration = serde_json::from_slice(&self.metadata_blob(&config_digest)?)
            .map_err(|e| ImageError::Invalid(format!("config {config_digest}: {e}")))?;
        if let Some(missing) = manifest.layers().iter().find(|l| !self.has_blob(l.digest().as_ref())) {
            return Err(ImageError::Invalid(format!("layer {} is missing", missing.digest())));
        }
        Ok(Image {
            reference: reference.to_string(),
            id: manifest_digest.to_string(),
            config,
            layers: manifest.layers().clone(),
        })
    }

    /// Adds every image of the OCI archive `archive` (a tar of an OCI image layout); returns their references.
    /// Each blob is checked against its digest, and an image is named only once all its blobs are in.
    pub fn import(&self, archive: &Path) -> Result<Vec<String>, ImageError> {
        let mut index: Option<ImageIndex> = None;
        let mut tar = tar::Archive::new(std::fs::File::open(archive)?);
        for entry in tar.entries()? {
            let mut entry = entry?;
            let path = entry.path()?.into_owned();
            let parts: Vec<String> = path
                .components()
                .filter_map(|c| match c {
                    Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect();
            match parts.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                ["index.json"] => {
                    let mut text = Vec::new();
                    (&mut entry).take(MOST_METADATA).read_to_end(&mut text)?;
                    index = Some(
                        serde_json::from_slice(&text).map_err(|e| ImageError::Invalid(format!("index.json: {e}")))?,
                    );
                }
                ["blobs", algorithm, hex] if entry.header().entry_type().is_file() => {
                    let digest = format!("{algorithm}:{hex}");
                    let target = self.blob_path(&digest)?;
                    if target.exists() {
                        continue;
                    }
                    let temporary = target.with_extension(format!("part-{}", std::process::id()));
                    std::io::copy(&mut entry, &mut std::fs::File::create(&temporary)?)?;
                    self.adopt_blob(&temporary, &digest)?;
                }
                _ => {}
            }
        }
        let index = index.ok_or_else(|| ImageError::Invalid("the archive has no index.json".into()))?;
        let mut references = Vec::new();
        for manifest in index.manifests() {
            let Some(name) = manifest.annotations().as_ref().and_then(|a| a.get(REF_NAME)) else { continue };
            let whole = normalize(name)?;
            self.image(&whole, manifest.digest().as_ref())?;
            self.tag(&whole, manifest)?;
            references.push(whole);
        }
        if references.is_empty() {
            return Err(ImageError::Invalid(
                "the archive names no image (no org.opencontainers.image.ref.name)".into(),
            ));
        }
        Ok(references)
    }

    /// Pulls `reference` from its registry into the store (blobs it holds already are not fetched again); returns
    /// the image. `insecure` registries are spoken to over plain HTTP.
    pub async fn pull(&self, reference: &str, auth: &Auth, insecure: &[String]) -> Result<Image, ImageError> {
        self.pull_through(reference, auth, &Via { insecure: insecure.to_vec(), ..Via::default() }).await
    }

    /// [`Store::pull`], the way `via` says: from a mirror, through a proxy, with the TLS settings of the host.
    pub async fn pull_through(&self, reference: &str, auth: &Auth, via: &Via) -> Result<Image, ImageError> {
        let whole = normalize(reference)?;
        let mut parsed: oci_client::Reference = whole
            .parse()
            .map_err(|e: oci_client::ParseError| ImageError::Reference(reference.into(), e.to_string()))?;
        if let Some(mirror) = &via.mirror {
            parsed.set_mirror_registry(mirror.clone());
        }
        let client = registry_client(via)?;
        let auth = auth.for_registry(parsed.resolve_registry());
        let asked = parsed.resolve_registry().to_string();
        let registry = |e: oci_client::errors::OciDistributionError| ImageError::Registry {
            registry: asked.clone(),
            source: Box::new(e),
        };
        let accepted = [
            oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
            oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
            oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE,
            oci_client::manifest::IMAGE_MANIFEST_LIST_MEDIA_TYPE,
        ];
        let (mut bytes, mut digest) = client.pull_manifest_raw(&parsed, &auth, &accepted).await.map_err(registry)?;
        if let Some(wanted) = parsed.digest()
            && wanted != digest
        {
            return Err(ImageError::Answer(format!("manifest digest {digest} is not the {wanted} asked for")));
        }
        // An index: the manifest for this machine's platform.
        if let Ok(index) = serde_json::from_slice::<ImageIndex>(&bytes)
            && index.manifests().iter().any(|m| m.media_type() == &MediaType::ImageManifest || m.platform().is_some())
        {
            let arch = match std::env::consts::ARCH {
                "x86_64" => "amd64",
                "aarch64" => "arm64",
                other => other,
            };
            let chosen = index
                .manifests()
                .iter()
                .find(|m| {
                    m.platform()
                        .as_ref()
                        .is_some_and(|p| p.os().to_string() == "linux" && p.architecture().to_string() == arch)
                })
                .ok_or_else(|| ImageError::Answer(format!("{whole}: no image for linux/{arch}")))?;
            let mut by_digest = oci_client::Reference::with_digest(
                parsed.registry().to_string(),
                parsed.repository().to_string(),
                chosen.digest().to_string(),
            );
            if let Some(mirror) = &via.mirror {
                by_digest.set_mirror_registry(mirror.clone());
            }
            (bytes, digest) = client.pull_manifest_raw(&by_digest, &auth, &accepted).await.map_err(registry)?;
        }
        if digest_of(&bytes) != digest {
            return Err(ImageError::Answer(format!("the manifest's content is not its digest {digest}")));
        }
        if bytes.len() as u64 > MOST_METADATA {
            return Err(ImageError::Answer(format!("the manifest of {whole} is more than {MOST_METADATA} bytes")));
        }
        let manifest: ImageManifest =
            serde_json::from_slice(&bytes).map_err(|e| ImageError::Answer(format!("manifest of {whole}: {e}")))?;
        self.within_limit(&whole, &manifest)?;
        for blob in std::iter::once(manifest.config()).chain(manifest.layers()) {
            let blob_digest = blob.digest().to_string();
            if self.has_blob(&blob_digest) {
                continue;
            }
            let target = self.blob_path(&blob_digest)?;
            let temporary = target.with_extension(format!("part-{}", std::process::id()));
            let file = Capped::new(tokio::fs::File::create(&temporary).await?, blob.size());
            let descriptor = oci_client::manifest::OciDescriptor {
                media_type: blob.media_type().to_string(),
                digest: blob_digest.clone(),
                size: blob.size() as i64,
                ..Default::default()
            };
            if let Err(error) = client.pull_blob(&parsed, &descriptor, file).await {
                let _ = std::fs::remove_file(&temporary);
                return Err(registry(error));
            }
            self.adopt_blob(&temporary, &blob_digest)?;
        }
        let manifest_digest = self.put_blob(&bytes)?;
        let descriptor = descriptor(MediaType::ImageManifest, bytes.len() as u64, &manifest_digest)?;
        let image = self.image(&whole, &manifest_digest)?;
        self.tag(&whole, &descriptor)?;
        self.record_pull(&image.image_id(), &auth_fingerprint(parsed.resolve_registry(), &auth))?;
        Ok(image)
    }

    /// Refuses `manifest` when its blobs, as the manifest sizes them, come to more than the store's limit.
    fn within_limit(&self, whole: &str, manifest: &ImageManifest) -> Result<(), ImageError> {
        if manifest.config().size() > MOST_METADATA {
            return Err(ImageError::Answer(format!("the config of {whole} is more than {MOST_METADATA} bytes")));
        }
        let total = std::iter::once(manifest.config())
            .chain(manifest.layers())
            .fold(0u64, |sum, blob| sum.saturating_add(blob.size()));
        if total > self.limit {
            return Err(ImageError::TooLarge { image: whole.to_string(), size: total, limit: self.limit });
        }
        Ok(())
    }

    /// Who has pulled the image `image_id` (`<registry>/<repository>@<digest>`: the same content pulled from
    /// elsewhere counts for nothing) from its registry, by the fingerprints of the credentials that succeeded
    /// ([`Auth::fingerprint`]; `anonymous` for none). `None` for an image the store got otherwise (imported or built
    /// on this machine, by its administrator): anyone may use that one.
    fn pulled_with(&self, image_id: &str) -> Option<BTreeSet<String>> {
        let records = self.pull_records();
        records.get(image_id).cloned()
    }

    fn pull_records(&self) -> BTreeMap<String, BTreeSet<String>> {
        std::fs::read(self.dir.join("pulls.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Records that `fingerprint` pulled the image `image_id`.
    fn record_pull(&self, image_id: &str, fingerprint: &str) -> Result<(), ImageError> {
        let _guard = self.guard();
        let mut records = self.pull_records();
        if !records.entry(image_id.to_string()).or_default().insert(fingerprint.to_string()) {
            return Ok(());
        }
        let text = serde_json::to_vec(&records).map_err(|e| ImageError::Invalid(e.to_string()))?;
        let temporary = self.dir.join(format!("pulls.json.part-{}", std::process::id()));
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, self.dir.join("pulls.json"))?;
        Ok(())
    }

    /// Whether a pod holding `auth` may run `image` from the store without the registry being asked again, after
    /// the kubelet's `KubeletEnsureSecretPulledImages` (KEP-2535): an image not pulled here is free to all (the
    /// node's administrator put it there); a pulled one only to pods presenting credentials that pulled it, or to
    /// all once it was pulled with none. Otherwise the node pulls it again with the pod's own credentials (its blobs
    /// are not fetched again), so that one tenant's private image never runs for another who cannot pull it.
    pub fn may_use(&self, image: &Image, auth: &Auth) -> bool {
        let Some(pulled) = self.pulled_with(&image.image_id()) else { return true };
        let registry = image.reference.parse::<oci_client::Reference>().map(|r| r.resolve_registry().to_string());
        let fingerprint = registry.map(|r| auth.fingerprint(&r)).unwrap_or_default();
        pulled.contains(ANONYMOUS) || pulled.contains(&fingerprint)
    }

    /// The root filesystem of `image` for containers of the user range starting at `base`: its layers unpacked in
    /// order once (whiteouts applied, every path beneath the root), owned by the range's users. The files the node
    /// mounts over (`/etc/hosts`, `/etc/hostname`, `/etc/resolv.conf`) exist in it.
    pub fn rootfs(&self, image: &Image, base: u32) -> Result<PathBuf, ImageError> {
        let hex = image.id.trim_start_matches("sha256:");
        let target = self.dir.join("rootfs").join(format!("{hex}-{base}"));
        let _guard = self.guard();
        if target.is_dir() {
            return Ok(target);
        }
        let temporary = self.dir.join("rootfs").join(format!(".{hex}-{base}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&temporary);
        std::fs::create_dir(&temporary)?;
        let mut budget = Budget { bytes: self.limit, entries: MOST_ENTRIES };
        for layer in &image.layers {
            let file = std::fs::File::open(self.blob_path(layer.digest().as_ref())?)?;
            let reader: Box<dyn Read> = match layer_compression(layer.media_type()) {
                Ok(Compression::Gzip) => Box::new(flate2::read::GzDecoder::new(file)),
                Ok(Compression::None) => Box::new(file),
                Err(error) => {
                    let _ = std::fs::remove_dir_all(&temporary);
                    return Err(error);
                }
            };
            if let Err(error) = unpack_layer(reader, &temporary, base, &mut budget) {
                let _ = std::fs::remove_dir_all(&temporary);
                return Err(match error {
                    ImageError::Invalid(what) => ImageError::Invalid(format!("{}: {what}", image.reference)),
                    other => other,
                });
            }
        }
        // The directories every container needs, where the image has none, with the modes a root filesystem gives
        // them: not the node's umask (077), under which a container user other than its root could open nothing
        // in /dev (the runtime keeps the mode of the directory it mounts /dev on) and write nothing in /tmp.
        use std::os::unix::fs::PermissionsExt as _;
        for (dir, mode) in [("etc", 0o755), ("proc", 0o555), ("dev", 0o755), ("tmp", 0o1777), ("sys", 0o555)] {
            let path = temporary.join(dir);
            if std::fs::symlink_metadata(&path).is_err() {
                std::fs::create_dir(&path)?;
                std::os::unix::fs::lchown(&path, Some(base), Some(base))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            }
        }
        for file in ["etc/hosts", "etc/hostname", "etc/resolv.conf"] {
            let path = temporary.join(file);
            if std::fs::symlink_metadata(&path).is_err() {
                std::fs::File::create(&path)?;
            }
        }
        std::os::unix::fs::lchown(&temporary, Some(base), Some(base))?;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&temporary, &target)?;
        Ok(target)
    }
}

/// What unpacking an image's layers may still make: bytes of file content, and entries.
struct Budget {
    bytes: u64,
    entries: u64,
}

/// Unpacks one layer into `root`: entries beneath it only, OCI whiteouts applied, owners moved into the range at
/// `base`, the whole within `budget`.
fn unpack_layer(reader: impl Read, root: &Path, base: u32, budget: &mut Budget) -> Result<(), ImageError> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(false);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let Some(relative) = beneath(&path) else { continue };
        let name = relative.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if let Some(hidden) = name.strip_prefix(".wh.") {
            // `.wh...` would name the parent's parent.
            if hidden.is_empty() || hidden == "." || hidden == ".." {
                continue;
            }
            let parent = root.join(relative.parent().unwrap_or(Path::new("")));
            if !resolved_inside(root, &parent) {
                continue;
            }
            if hidden == ".wh..opq" {
                for child in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
                    remove(&child.path())?;
                }
            } else {
                remove(&parent.join(hidden))?;
            }
            continue;
        }
        let size = entry.header().size().unwrap_or(u64::MAX);
        match (budget.bytes.checked_sub(size), budget.entries.checked_sub(1)) {
            (Some(bytes), Some(entries)) => *budget = Budget { bytes, entries },
            (None, _) => return Err(ImageError::Invalid("unpacked, it is more than the image size limit".into())),
            (_, None) => return Err(ImageError::Invalid(format!("its layers make more than {MOST_ENTRIES} files"))),
        }
        let (uid, gid) = (entry.header().uid().unwrap_or(0), entry.header().gid().unwrap_or(0));
        let shift =
            |id: u64| base + u32::try_from(id).ok().filter(|id| *id < super::process::sandbox::RANGE).unwrap_or(65534);
        if entry.unpack_in(root)? {
            let _ = std::os::unix::fs::lchown(root.join(&relative), Some(shift(uid)), Some(shift(gid)));
        }
    }
    Ok(())
}

/// `path` as a relative path of plain components, or `None` when it climbs out.
fn beneath(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Whether `path`, with every link in it followed, is beneath `root`.
fn resolved_inside(root: &Path, path: &Path) -> bool {
    match (std::fs::canonicalize(root), std::fs::canonicalize(path)) {
        (Ok(root), Ok(path)) => path.starts_with(root),
        _ => false,
    }
}

fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => Ok(()),
    }
}

fn auth_fingerprint(registry: &str, auth: &oci_client::secrets::RegistryAuth) -> String {
    use oci_client::secrets::RegistryAuth;
    let secret = match auth {
        RegistryAuth::Anonymous => return ANONYMOUS.to_string(),
        RegistryAuth::Basic(user, password) => format!("basic\0{user}\0{password}"),
        RegistryAuth::Bearer(token) => format!("bearer\0{token}"),
    };
    digest_of(format!("{registry}\0{secret}").as_bytes())
}

/// A writer of at most `left` bytes: a registry sending more than a blob's descriptor says fails the pull once it
/// has sent that much, before it fills the disk.
struct Capped<W> {
    inner: W,
    left: u64,
}

impl<W> Capped<W> {
    fn new(inner: W, size: u64) -> Capped<W> {
        Capped { inner, left: size }
    }
}

impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Capped<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if buf.len() as u64 > self.left {
            let error = std::io::Error::other("the registry sent more than the blob's size");
            return std::task::Poll::Ready(Err(error));
        }
        let written = std::task::ready!(std::pin::Pin::new(&mut self.inner).poll_write(cx, buf))?;
        self.left -= written as u64;
        std::task::Poll::Ready(Ok(written))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A client for registries, speaking plain HTTP to `insecure` ones (`host:port`), making every connection through
/// the HTTP proxy `proxy` when given (else as the environment says: `HTTPS_PROXY`).
fn registry_client(via: &Via) -> Result<oci_client::Client, ImageError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certificate = |pem: &Vec<u8>| oci_client::client::Certificate {
        encoding: oci_client::client::CertificateEncoding::Pem,
        data: pem.clone(),
    };
    let config = oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::HttpsExcept(via.insecure.clone()),
        https_proxy: via.proxy.clone(),
        http_proxy: via.proxy.clone(),
        extra_root_certificates: via.ca.iter().map(certificate).collect(),
        accept_invalid_certificates: via.skip_verify,
        ..Default::default()
    };
    // Not `Client::new`, which makes a client without the proxy when the configuration fails.
    oci_client::Client::try_from(config).map_err(|e| ImageError::Invalid(format!("making the registry client: {e}")))
}

/// How a pull reaches its registry.
#[derive(Clone, Debug, Default)]
pub struct Via {
    /// A mirror (`HOST[:PORT]`) asked instead of the reference's registry, which it is told with `?ns=` as
    /// containerd tells it.
    pub mirror: Option<String>,
    /// Registries (`HOST[:PORT]`) spoken to over plain HTTP.
    pub insecure: Vec<String>,
    /// The HTTP proxy every connection goes through (the node's [guard](crate::registries::guard), for registries
    /// the admin did not name).
    pub proxy: Option<String>,
    /// CA certificates (PEM) trusted besides the system's.
    pub ca: Vec<Vec<u8>>,
    /// Whether the registry's certificate goes unchecked.
    pub skip_verify: bool,
}

/// Credentials for registries, by registry host, as `imagePullSecrets` give them.
#[derive(Clone, Debug, Default)]
pub struct Auth(BTreeMap<String, (String, String)>);

impl Auth {
    /// The credentials of a `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson` (or a
    /// `kubernetes.io/dockercfg` Secret's `.dockercfg`), added to these.
    pub fn add_docker_config(&mut self, json: &[u8]) {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(json) else { return };
        let auths = value.get("auths").unwrap_or(&value);
        for (registry, entry) in auths.as_object().into_iter().flatten() {
            let host = registry.trim_start_matches("https://").trim_start_matches("http://");
            let host = host.split('/').next().unwrap_or_default().to_string();
            let pair = match (entry["username"].as_str(), entry["password"].as_str()) {
                (Some(user), Some(password)) => Some((user.to_string(), password.to_string())),
                _ => entry["auth"]
                    .as_str()
                    .and_then(nest_core::base64::decode)
                    .and_then(|raw| String::from_utf8(raw).ok())
                    .and_then(|text| text.split_once(':').map(|(u, p)| (u.to_string(), p.to_string()))),
            };
            if let Some(pair) = pair {
                self.0.entry(host).or_insert(pair);
            }
        }
    }

    /// A digest of the credentials these give for `registry` (`anonymous` for none), as the store records pulls.
    pub fn fingerprint(&self, registry: &str) -> String {
        auth_fingerprint(registry, &self.for_registry(registry))
    }

    fn for_registry(&self, registry: &str) -> oci_client::secrets::RegistryAuth {
        let docker_hub = ["index.docker.io", "docker.io", "registry-1.docker.io"];
        let found = self.0.get(registry).or_else(|| {
            docker_hub.contains(&registry).then(|| docker_hub.iter().find_map(|h| self.0.get(*h))).flatten()
        });
        match found {
            Some((user, password)) => oci_client::secrets::RegistryAuth::Basic(user.clone(), password.clone()),
            None => oci_client::secrets::RegistryAuth::Anonymous,
        }
    }
}

/// Writes an OCI archive (a tar of an OCI image layout) at `out` holding one image named `reference`: `layer` (an
/// uncompressed tar) and `config`. Returns the manifest's digest.
pub fn write_archive(
    out: &Path,
    reference: &str,
    config: &ImageConfiguration,
    layer: &[u8],
) -> Result<String, ImageError> {
    let whole = normalize(reference)?;
    let invalid = |e: oci_spec::OciSpecError| ImageError::Invalid(e.to_string());
    let config_bytes = serde_json::to_vec(config).map_err(|e| ImageError::Invalid(e.to_string()))?;
    let config_descriptor = descriptor(MediaType::ImageConfig, config_bytes.len() as u64, &digest_of(&config_bytes))?;
    let layer_descriptor = descriptor(MediaType::ImageLayer, layer.len() as u64, &digest_of(layer))?;
    let manifest = oci_spec::image::ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(config_descriptor)
        .layers(vec![layer_descriptor])
        .build()
        .map_err(invalid)?;
    let manifest_bytes = serde_json::to_vec(&manifest).map_err(|e| ImageError::Invalid(e.to_string()))?;
    let manifest_digest = digest_of(&manifest_bytes);
    let mut named = descriptor(MediaType::ImageManifest, manifest_bytes.len() as u64, &manifest_digest)?;
    named.set_annotations(Some([(REF_NAME.to_string(), whole)].into_iter().collect()));
    let index = oci_spec::image::ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![named])
        .build()
        .map_err(invalid)?;
    let index_bytes = serde_json::to_vec(&index).map_err(|e| ImageError::Invalid(e.to_string()))?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(std::fs::File::create(out)?));
    let mut add = |path: &str, bytes: &[u8]| -> std::io::Result<()> {
        let mut header = tar::Header::new_ustar();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, path, bytes)
    };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    add("index.json", &index_bytes)?;
    for bytes in [&manifest_bytes[..], &config_bytes[..], layer] {
        add(&format!("blobs/sha256/{}", digest_of(bytes).trim_start_matches("sha256:")), bytes)?;
    }
    tar.into_inner()?.flush()?;
    Ok(manifest_digest)
}

/// Pushes the images of the OCI archive `archive` to `reference` (one image: the archive's first) over a
/// registry's API; `insecure` registries over plain HTTP. Returns the manifest's digest.
pub async fn push(archive: &Path, reference: &str, insecure: &[String]) -> Result<String, ImageError> {
    let scratch = tempfile::tempdir()?;
    let store = Store::open(scratch.path())?;
    let references = store.import(archive)?;
    let image = store.lookup(&references[0]).ok_or_else(|| ImageError::Invalid("the archive's image".into()))?;
    let whole = normalize(reference)?;
    let target: oci_client::Reference =
        whole.parse().map_err(|e: oci_client::ParseError| ImageError::Reference(reference.into(), e.to_string()))?;
    let client = registry_client(&Via { insecure: insecure.to_vec(), ..Via::default() })?;
    let asked = target.resolve_registry().to_string();
    let registry = |e: oci_client::errors::OciDistributionError| ImageError::Registry {
        registry: asked.clone(),
        source: Box::new(e),
    };
    client
        .auth(&target, &oci_client::secrets::RegistryAuth::Anonymous, oci_client::RegistryOperation::Push)
        .await
        .map_err(registry)?;
    let manifest_bytes = store.metadata_blob(&image.id)?;
    let manifest: ImageManifest =
        serde_json::from_slice(&manifest_bytes).map_err(|e| ImageError::Invalid(e.to_string()))?;
    for blob in std::iter::once(manifest.config()).chain(manifest.layers()) {
        let digest = blob.digest().to_string();
        let bytes = std::fs::read(store.blob_path(&digest)?)?;
        client.push_blob(&target, bytes, &digest).await.map_err(registry)?;
    }
    let content_type = http::HeaderValue::from_static(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE);
    client.push_manifest_raw(&target, manifest_bytes, content_type).await.map_err(registry)?;
    Ok(image.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer of raw entries (name, kind, link target, content), names written as given, as an attacker would.
    fn layer(entries: &[(&str, tar::EntryType, &str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, kind, link, content) in entries {
            let mut header = tar::Header::new_gnu();
            let bytes = name.as_bytes();
            header.as_gnu_mut().unwrap().name[..bytes.len()].copy_from_slice(bytes);
            header.set_entry_type(*kind);
            header.set_mode(0o755);
            header.set_size(content.len() as u64);
            if !link.is_empty() {
                header.set_link_name(link).unwrap();
            }
            header.set_cksum();
            builder.append(&header, *content).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn plenty() -> Budget {
        Budget { bytes: 1 << 30, entries: 1 << 20 }
    }

    #[test]
    fn a_layer_is_unpacked_by_its_exact_media_type() {
        let of = |media: &str| layer_compression(&MediaType::from(media));
        assert_eq!(of("application/vnd.oci.image.layer.v1.tar").unwrap(), Compression::None);
        assert_eq!(of("application/vnd.oci.image.layer.v1.tar+gzip").unwrap(), Compression::Gzip);
        assert_eq!(of("application/vnd.docker.image.rootfs.diff.tar.gzip").unwrap(), Compression::Gzip);
        // A suffix is no format: zstd, and a made-up type that ends in "gzip", are refused by name.
        for refused in ["application/vnd.oci.image.layer.v1.tar+zstd", "application/x-not-a-layer+gzip"] {
            let message = of(refused).unwrap_err().to_string();
            assert_eq!(message, format!("a layer of media type {refused}, which this node cannot unpack"));
        }
    }

    #[test]
    fn a_layer_cannot_write_or_remove_outside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"mine").unwrap();
        let target = outside.to_str().unwrap();
        let hostile = layer(&[
            ("../escaped", tar::EntryType::Regular, "", b"x"),
            ("/absolute", tar::EntryType::Regular, "", b"x"),
            ("link", tar::EntryType::Symlink, target, b""),
            ("link/through", tar::EntryType::Regular, "", b"x"),
            ("hard", tar::EntryType::Link, "../outside/keep", b""),
            ("link/.wh.keep", tar::EntryType::Regular, "", b""),
            (".wh...", tar::EntryType::Regular, "", b""),
            ("sub/.wh...", tar::EntryType::Regular, "", b""),
        ]);
        let _ = unpack_layer(&hostile[..], &root, 1 << 20, &mut plenty());
        assert_eq!(std::fs::read(outside.join("keep")).unwrap(), b"mine", "a whiteout removed a file outside");
        let mut outside_now: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().map(|e| e.file_name()).collect();
        outside_now.sort();
        assert_eq!(outside_now, ["keep"], "a layer wrote outside its root");
        assert!(!dir.path().join("escaped").exists() && !Path::new("/absolute").exists());
        assert!(root.exists(), "a whiteout removed the root itself");
        use std::os::unix::fs::MetadataExt as _;
        let kept = std::fs::metadata(outside.join("keep")).unwrap();
        assert_eq!(kept.nlink(), 1, "a hard link inside the root reaches a file outside");
        assert_eq!(kept.uid(), 0, "a file outside was given to the range's users");
        // What it may do, it did: `/absolute` lands inside, as `absolute`.
        assert!(root.join("absolute").is_file());
    }

    #[test]
    fn whiteouts_remove_what_lower_layers_made() {
        let dir = tempfile::tempdir().unwrap();
        let lower = layer(&[
            ("etc/", tar::EntryType::Directory, "", b""),
            ("etc/gone", tar::EntryType::Regular, "", b"x"),
            ("var/", tar::EntryType::Directory, "", b""),
            ("var/a", tar::EntryType::Regular, "", b"x"),
            ("var/b", tar::EntryType::Regular, "", b"x"),
        ]);
        let upper = layer(&[
            ("etc/.wh.gone", tar::EntryType::Regular, "", b""),
            ("var/.wh..wh..opq", tar::EntryType::Regular, "", b""),
            ("var/c", tar::EntryType::Regular, "", b"x"),
        ]);
        unpack_layer(&lower[..], dir.path(), 1 << 20, &mut plenty()).unwrap();
        unpack_layer(&upper[..], dir.path(), 1 << 20, &mut plenty()).unwrap();
        assert!(!dir.path().join("etc/gone").exists());
        let mut var: Vec<_> =
            std::fs::read_dir(dir.path().join("var")).unwrap().flatten().map(|e| e.file_name()).collect();
        var.sort();
        assert_eq!(var, ["c"]);
    }

    #[test]
    fn a_failed_pull_is_told_in_fixed_words_never_the_registrys() {
        use oci_client::errors::{OciDistributionError as E, OciEnvelope, OciError, OciErrorCode};
        let whole = "127.0.0.1:5000/x:1";
        let asked = |source: E| ImageError::Registry { registry: "127.0.0.1:5000".into(), source: Box::new(source) };
        let page = "<h1>etcd admin console</h1>";
        let envelope = |code| OciEnvelope {
            errors: vec![OciError { code, message: page.into(), detail: serde_json::Value::Null }],
        };
        let url = "http://127.0.0.1:5000/v2/x/manifests/1".to_string();
        let cases = [
            (asked(E::ServerError { code: 404, url: url.clone(), message: page.into() }), PullFailure::NotFound),
            (asked(E::ServerError { code: 403, url: url.clone(), message: page.into() }), PullFailure::Unauthorized),
            (asked(E::ServerError { code: 502, url: url.clone(), message: page.into() }), PullFailure::BadAnswer),
            (asked(E::UnauthorizedError { url: url.clone() }), PullFailure::Unauthorized),
            (asked(E::ImageManifestNotFoundError(page.into())), PullFailure::NotFound),
            (
                asked(E::RegistryError { envelope: envelope(OciErrorCode::ManifestUnknown), url: url.clone() }),
                PullFailure::NotFound,
            ),
            (
                asked(E::RegistryError { envelope: envelope(OciErrorCode::Denied), url: url.clone() }),
                PullFailure::Unauthorized,
            ),
            (asked(E::GenericError(Some(page.into()))), PullFailure::BadAnswer),
            (ImageError::Answer(format!("manifest of {whole}: {page}")), PullFailure::BadAnswer),
            (
                ImageError::TooLarge { image: whole.into(), size: 10, limit: 5 },
                PullFailure::TooLarge { size: 10, limit: 5 },
            ),
        ];
        for (error, failure) in cases {
            assert_eq!(error.failure(), failure, "{error}");
            let told = failure.describe(whole, "127.0.0.1:5000");
            assert!(told.starts_with("failed to pull and unpack image \"127.0.0.1:5000/x:1\": "), "{told}");
            assert!(!told.contains("etcd") && !told.contains("http://"), "{told}");
        }
        assert_eq!(
            PullFailure::Unreachable.describe(whole, "127.0.0.1:5000"),
            "failed to pull and unpack image \"127.0.0.1:5000/x:1\": cannot reach registry \"127.0.0.1:5000\""
        );
    }

    #[test]
    fn a_pull_through_the_guard_makes_no_connection_it_refuses() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            // A service on loopback that counts the connections it is offered.
            let service = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = service.local_addr().unwrap().port();
            let offered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counting = offered.clone();
            tokio::spawn(async move {
                while service.accept().await.is_ok() {
                    counting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
            let internal = |ip| crate::registries::internal_address(ip, &|_| false);
            let guard = crate::registries::guard::Guard::start(std::sync::Arc::new(internal)).await.unwrap();
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path()).unwrap();
            let reference = format!("127.0.0.1:{port}/x:1");
            let error = store
                .pull_through(&reference, &Auth::default(), &Via { proxy: Some(guard.url()), ..Via::default() })
                .await
                .unwrap_err();
            assert_eq!(error.failure(), PullFailure::Unreachable, "{error}");
            assert_eq!(offered.load(std::sync::atomic::Ordering::SeqCst), 0, "the client went around the guard");
            // Without the guard the same pull reaches the service: the count above means something.
            let _ = store.pull(&reference, &Auth::default(), &[]).await;
            assert!(offered.load(std::sync::atomic::Ordering::SeqCst) > 0);
        });
    }

    #[test]
    fn references_are_named_in_full_as_containerd_names_them() {
        let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let table: &[(&str, String)] = &[
            ("busybox", "docker.io/library/busybox:latest".into()),
            ("nginx:1.27", "docker.io/library/nginx:1.27".into()),
            ("user/app", "docker.io/user/app:latest".into()),
            ("docker.io/nginx", "docker.io/library/nginx:latest".into()),
            ("index.docker.io/library/nginx", "docker.io/library/nginx:latest".into()),
            ("docker.io/library/nginx:latest", "docker.io/library/nginx:latest".into()),
            ("ghcr.io/org/app", "ghcr.io/org/app:latest".into()),
            ("localhost/app:1", "localhost/app:1".into()),
            ("127.0.0.1:5000/tools/echo:v1", "127.0.0.1:5000/tools/echo:v1".into()),
            (&format!("nginx@{digest}"), format!("docker.io/library/nginx@{digest}")),
            // A tag beside a digest is dropped: the digest names the image (containerd's `ParseDockerRef`).
            (&format!("nginx:1.27@{digest}"), format!("docker.io/library/nginx@{digest}")),
        ];
        for (reference, whole) in table {
            assert_eq!(&normalize(reference).unwrap(), whole, "{reference}");
        }
        for bad in ["not an image", "x:", "Nginx", "nginx@sha256:short", ""] {
            assert!(normalize(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unpacking_stops_at_the_size_and_entry_limits() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![0u8; 4096];
        let files = layer(&[("a", tar::EntryType::Regular, "", &big), ("b", tar::EntryType::Regular, "", &big)]);
        let mut budget = Budget { bytes: 6000, entries: 100 };
        let error = unpack_layer(&files[..], dir.path(), 1 << 20, &mut budget).unwrap_err();
        assert!(error.to_string().contains("more than the image size limit"), "{error}");
        assert!(!dir.path().join("b").exists(), "the file over the limit was written");
        let many = layer(&[("x", tar::EntryType::Directory, "", b""), ("y", tar::EntryType::Directory, "", b"")]);
        let mut budget = Budget { bytes: 1 << 20, entries: 1 };
        let error = unpack_layer(&many[..], dir.path(), 1 << 20, &mut budget).unwrap_err();
        assert!(error.to_string().contains("files"), "{error}");
    }

    #[test]
    fn a_registry_sending_more_than_a_blobs_size_is_cut_off() {
        use tokio::io::AsyncWriteExt as _;
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let mut capped = Capped::new(Vec::new(), 10);
            capped.write_all(b"0123456789").await.unwrap();
            assert!(capped.write_all(b"!").await.is_err());
            assert_eq!(capped.inner, b"0123456789");
        });
    }

    #[test]
    fn an_image_pulled_with_credentials_is_for_those_who_hold_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let image = Image {
            reference: "127.0.0.1:5000/private/app:v1".into(),
            id: format!("sha256:{}", "a".repeat(64)),
            config: ImageConfiguration::default(),
            layers: Vec::new(),
        };
        let secret = |user: &str, password: &str| {
            let mut auth = Auth::default();
            let config = format!(r#"{{"auths":{{"127.0.0.1:5000":{{"username":"{user}","password":"{password}"}}}}}}"#);
            auth.add_docker_config(config.as_bytes());
            auth
        };
        let (alice, bob, nobody) = (secret("alice", "s3cret"), secret("alice", "guess"), Auth::default());
        assert!(store.may_use(&image, &nobody), "an image the node was given is for every pod");
        store.record_pull(&image.image_id(), &alice.fingerprint("127.0.0.1:5000")).unwrap();
        let elsewhere = Image { reference: "127.0.0.1:5001/public/app:v1".into(), ..image.clone() };
        store.record_pull(&elsewhere.image_id(), &nobody.fingerprint("127.0.0.1:5001")).unwrap();
        assert!(store.may_use(&elsewhere, &nobody), "pulled from there without credentials");
        assert!(store.may_use(&image, &alice));
        assert!(!store.may_use(&image, &bob), "other credentials for the same registry");
        assert!(!store.may_use(&image, &nobody), "no credentials, though the same content is public elsewhere");
        store.record_pull(&image.image_id(), &nobody.fingerprint("127.0.0.1:5000")).unwrap();
        assert!(store.may_use(&image, &bob), "once pulled without credentials, the image is for every pod");
    }

    #[test]
    fn a_root_gets_the_directories_an_image_lacks_with_a_root_filesystems_modes() {
        // SAFETY: geteuid(2) cannot fail and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: giving a root to a user range needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let image = Image {
            reference: "127.0.0.1:5000/bare:v1".into(),
            id: format!("sha256:{}", "b".repeat(64)),
            config: ImageConfiguration::default(),
            layers: Vec::new(),
        };
        let root = store.rootfs(&image, 1 << 20).unwrap();
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        for (path, mode) in [("dev", 0o755), ("tmp", 0o1777), ("proc", 0o555), ("etc", 0o755)] {
            let meta = std::fs::metadata(root.join(path)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o7777, mode, "/{path}");
            assert_eq!(meta.uid(), 1 << 20, "/{path} belongs to the container's root");
        }
    }
}
