//! Versioned packages of manifests, after the declarative add-on pattern: for each flavor, a channel file lists the
//! versions it offers and the package each is rendered from; a package is a directory of templated manifests, one file
//! per component. The packages under `crates/nest-capn/packages/` are built into the binary; a directory given to the
//! manager (`--packages DIR`, laid out the same way) is looked at first, so an operator can add versions or change
//! manifests without a new build.
//!
//! A template is YAML with three additions, all line- or text-based so that the files stay readable YAML:
//! - `{{ name }}` is replaced by the value of `name` (values are plain strings, or JSON, which YAML reads as a flow
//!   value). A document that names a value not known yet (a Service's ClusterIP before the Service exists) is not
//!   rendered; [`Rendered::waiting`] says what it waits for.
//! - Lines `{{#if name}}`, `{{#unless name}}` and `{{/if}}` keep the lines between them only when `name` is set to
//!   something other than `""` or `false` (or, for `unless`, when it is not).
//! - A document starting with the line `#! for-each member` is rendered once per entry of the comma-separated value
//!   `members`, with `member` set to the entry and `ordinal` to its index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::api::Flavor;

/// Why a package cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Error {
    #[error("channel {channel:?} of the {flavor} flavor does not exist")]
    NoChannel { flavor: String, channel: String },
    #[error("channel {channel:?} of the {flavor} flavor does not offer {version} (it offers {offered})")]
    NoVersion { flavor: String, channel: String, version: String, offered: String },
    #[error("package {0} has no manifests for {1}")]
    NoManifest(String, String),
    #[error("{file}: {message}")]
    Template { file: String, message: String },
    #[error("reading {0}: {1}")]
    Read(String, String),
}

/// The packages built into the binary: (path under `packages/`, contents).
const BUILT_IN: &[(&str, &str)] = &[
    ("nest/channels/stable.yaml", include_str!("../packages/nest/channels/stable.yaml")),
    ("nest/1.33/etcd.yaml", include_str!("../packages/nest/1.33/etcd.yaml")),
    ("nest/1.33/apiserver.yaml", include_str!("../packages/nest/1.33/apiserver.yaml")),
    ("nest/1.33/controller-manager.yaml", include_str!("../packages/nest/1.33/controller-manager.yaml")),
    ("kubernetes/channels/stable.yaml", include_str!("../packages/kubernetes/channels/stable.yaml")),
    ("kubernetes/1.33/etcd.yaml", include_str!("../packages/kubernetes/1.33/etcd.yaml")),
    ("kubernetes/1.33/apiserver.yaml", include_str!("../packages/kubernetes/1.33/apiserver.yaml")),
    ("kubernetes/1.33/controller-manager.yaml", include_str!("../packages/kubernetes/1.33/controller-manager.yaml")),
    ("kubernetes/1.34/etcd.yaml", include_str!("../packages/kubernetes/1.34/etcd.yaml")),
    ("kubernetes/1.34/apiserver.yaml", include_str!("../packages/kubernetes/1.34/apiserver.yaml")),
    ("kubernetes/1.34/controller-manager.yaml", include_str!("../packages/kubernetes/1.34/controller-manager.yaml")),
];

/// The channel used when a component names none.
pub const DEFAULT_CHANNEL: &str = "stable";

/// Where packages are read from: a directory first (when given), then the built-in ones.
#[derive(Clone, Debug, Default)]
pub struct Packages {
    pub dir: Option<PathBuf>,
}

#[derive(Deserialize)]
struct Channel {
    versions: Vec<Offered>,
}

#[derive(Deserialize)]
struct Offered {
    version: String,
    package: String,
}

fn flavor_dir(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Nest => "nest",
        Flavor::Kubernetes => "kubernetes",
    }
}

impl Packages {
    fn read(&self, path: &str) -> Result<Option<String>, Error> {
        if let Some(dir) = &self.dir {
            let file = dir.join(path);
            match std::fs::read_to_string(&file) {
                Ok(text) => return Ok(Some(text)),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(Error::Read(file.display().to_string(), error.to_string())),
            }
        }
        Ok(BUILT_IN.iter().find(|(p, _)| *p == path).map(|(_, text)| text.to_string()))
    }

    /// The versions `channel` offers for `flavor`, newest first as the file lists them.
    pub fn offered(&self, flavor: Flavor, channel: &str) -> Result<Vec<String>, Error> {
        Ok(self.channel(flavor, channel)?.versions.into_iter().map(|o| o.version).collect())
    }

    fn channel(&self, flavor: Flavor, channel: &str) -> Result<Channel, Error> {
        let path = format!("{}/channels/{channel}.yaml", flavor_dir(flavor));
        let no_channel = || Error::NoChannel { flavor: flavor_dir(flavor).into(), channel: channel.into() };
        let text = self.read(&path)?.ok_or_else(no_channel)?;
        serde_norway::from_str(&text).map_err(|e| Error::Template { file: path, message: e.to_string() })
    }

    /// The template of `component` (`etcd`, `apiserver`, `controller-manager`) for `version` in `channel`.
    pub fn template(&self, flavor: Flavor, channel: &str, version: &str, component: &str) -> Result<Template, Error> {
        let offered = self.channel(flavor, channel)?;
        let Some(entry) = offered.versions.iter().find(|o| o.version == version) else {
            return Err(Error::NoVersion {
                flavor: flavor_dir(flavor).into(),
                channel: channel.into(),
                version: version.into(),
                offered: offered.versions.iter().map(|o| o.version.as_str()).collect::<Vec<_>>().join(", "),
            });
        };
        let path = format!("{}/{}/{component}.yaml", flavor_dir(flavor), entry.package);
        let text = self.read(&path)?.ok_or_else(|| Error::NoManifest(entry.package.clone(), component.into()))?;
        Ok(Template { file: path, text })
    }
}

/// One component's templated manifests.
#[derive(Clone, Debug)]
pub struct Template {
    pub file: String,
    pub text: String,
}

/// What rendering a template gave.
#[derive(Debug, Default)]
pub struct Rendered {
    /// The objects, in the template's order.
    pub objects: Vec<Value>,
    /// The values that documents not rendered are waiting for.
    pub waiting: Vec<String>,
}

impl Template {
    /// Renders every document with `values`.
    pub fn render(&self, values: &BTreeMap<String, String>) -> Result<Rendered, Error> {
        let error = |message: String| Error::Template { file: self.file.clone(), message };
        let mut rendered = Rendered::default();
        for document in split_documents(&self.text) {
            let (body, repeat) = match document.strip_prefix("#! for-each member\n") {
                Some(body) => (body, true),
                None => (document.as_str(), false),
            };
            let runs: Vec<BTreeMap<String, String>> = if repeat {
                let members = values.get("members").map(String::as_str).unwrap_or_default();
                members
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .enumerate()
                    .map(|(ordinal, member)| {
                        let mut values = values.clone();
                        values.insert("member".into(), member.into());
                        values.insert("ordinal".into(), ordinal.to_string());
                        values
                    })
                    .collect()
            } else {
                vec![values.clone()]
            };
            for values in runs {
                let text = match fill(body, &values).map_err(error)? {
                    Filled::Text(text) => text,
                    Filled::Missing(name) => {
                        if !rendered.waiting.contains(&name) {
                            rendered.waiting.push(name);
                        }
                        continue;
                    }
                };
                let value: Value = serde_norway::from_str(&text).map_err(|e| error(e.to_string()))?;
                if !value.is_null() {
                    rendered.objects.push(value);
                }
            }
        }
        Ok(rendered)
    }
}

fn split_documents(text: &str) -> Vec<String> {
    let mut documents = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            documents.push(String::new());
        } else {
            let current = documents.last_mut().expect("one document");
            current.push_str(line);
            current.push('\n');
        }
    }
    // Leading comment lines before `#! for-each` are allowed.
    documents
        .into_iter()
        .map(|d| match d.find("#! for-each") {
            Some(at) if d[..at].lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) => {
                d[at..].to_string()
            }
            _ => d,
        })
        .filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')))
        .collect()
}

enum Filled {
    Text(String),
    Missing(String),
}

fn truthy(values: &BTreeMap<String, String>, name: &str) -> bool {
    values.get(name).is_some_and(|v| !v.is_empty() && v != "false")
}

/// Applies the conditionals, then the substitutions, of one document.
fn fill(text: &str, values: &BTreeMap<String, String>) -> Result<Filled, String> {
    let mut kept = String::new();
    // For each open conditional: whether its lines are kept.
    let mut open: Vec<bool> = Vec::new();
    for line in text.lines() {
        let directive = line.trim();
        if let Some(name) = directive.strip_prefix("{{#if ").and_then(|r| r.strip_suffix("}}")) {
            open.push(truthy(values, name.trim()));
            continue;
        }
        if let Some(name) = directive.strip_prefix("{{#unless ").and_then(|r| r.strip_suffix("}}")) {
            open.push(!truthy(values, name.trim()));
            continue;
        }
        if directive == "{{/if}}" || directive == "{{/unless}}" {
            open.pop().ok_or("a `{{/if}}` without its `{{#if}}`")?;
            continue;
        }
        if open.iter().all(|keep| *keep) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    if !open.is_empty() {
        return Err("an `{{#if}}` is not closed".into());
    }
    let mut out = String::with_capacity(kept.len());
    let mut rest = kept.as_str();
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or("a `{{` without its `}}`")?;
        let name = after[..end].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{{{{ {name} }}}} is not a value name"));
        }
        match values.get(name) {
            Some(value) => out.push_str(value),
            None => return Ok(Filled::Missing(name.to_string())),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(Filled::Text(out))
}

/// Whether `dir` looks like a packages directory (it has a channel for some flavor).
pub fn looks_like_packages(dir: &Path) -> bool {
    ["nest", "kubernetes"].iter().any(|f| dir.join(f).join("channels").is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn templates_substitute_repeat_and_wait() {
        let template = Template {
            file: "t.yaml".into(),
            text: "kind: A\nname: {{ cluster }}\n{{#if etcd}}\nstorage: etcd\n{{/if}}\n{{#unless etcd}}\nstorage: \
                   embedded\n{{/unless}}\n---\n# one per member\n#! for-each member\nkind: B\nname: {{ member }}\n\
                   index: {{ ordinal }}\n---\nkind: C\nip: {{ serviceIP }}\n"
                .into(),
        };
        let rendered = template.render(&values(&[("cluster", "demo"), ("members", "m-0,m-1")])).unwrap();
        assert_eq!(rendered.objects.len(), 3, "{:?}", rendered.objects);
        assert_eq!(rendered.objects[0], serde_json::json!({"kind": "A", "name": "demo", "storage": "embedded"}));
        assert_eq!(rendered.objects[2], serde_json::json!({"kind": "B", "name": "m-1", "index": 1}));
        assert_eq!(rendered.waiting, vec!["serviceIP".to_string()]);
        let with_etcd = template.render(&values(&[("cluster", "x"), ("etcd", "true"), ("serviceIP", "1.2.3.4")]));
        let with_etcd = with_etcd.unwrap();
        assert_eq!(with_etcd.objects[0]["storage"], "etcd");
        assert_eq!(with_etcd.objects[1]["ip"], "1.2.3.4");
        assert!(with_etcd.waiting.is_empty());
    }

    #[test]
    fn broken_templates_say_where() {
        let template = Template { file: "bad.yaml".into(), text: "{{#if x}}\na: 1\n".into() };
        let error = template.render(&BTreeMap::new()).unwrap_err();
        assert!(error.to_string().starts_with("bad.yaml:"), "{error}");
    }

    #[test]
    fn channels_offer_versions_and_refuse_others() {
        let packages = Packages::default();
        for flavor in [Flavor::Nest, Flavor::Kubernetes] {
            let offered = packages.offered(flavor, DEFAULT_CHANNEL).unwrap();
            assert!(offered.contains(&crate::bundle::DEFAULT_VERSION.to_string()), "{offered:?}");
            for version in &offered {
                for component in ["etcd", "apiserver", "controller-manager"] {
                    packages.template(flavor, DEFAULT_CHANNEL, version, component).unwrap();
                }
            }
        }
        let error = packages.template(Flavor::Nest, DEFAULT_CHANNEL, "v1.20.0", "etcd").unwrap_err();
        assert!(matches!(error, Error::NoVersion { .. }), "{error}");
        assert!(error.to_string().contains("v1.33.0"), "{error}");
        let error = packages.template(Flavor::Nest, "nightly", "v1.33.0", "etcd").unwrap_err();
        assert!(matches!(error, Error::NoChannel { .. }), "{error}");
    }

    #[test]
    fn a_directory_overrides_the_built_in_packages() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("nest/channels")).unwrap();
        std::fs::create_dir_all(dir.path().join("nest/custom")).unwrap();
        std::fs::write(
            dir.path().join("nest/channels/edge.yaml"),
            "versions:\n- version: v1.33.9\n  package: custom\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("nest/custom/etcd.yaml"), "kind: Custom\n").unwrap();
        let packages = Packages { dir: Some(dir.path().to_path_buf()) };
        assert!(looks_like_packages(dir.path()));
        let template = packages.template(Flavor::Nest, "edge", "v1.33.9", "etcd").unwrap();
        assert_eq!(template.render(&BTreeMap::new()).unwrap().objects, vec![serde_json::json!({"kind": "Custom"})]);
        // The built-in channels are still there.
        packages.template(Flavor::Nest, DEFAULT_CHANNEL, crate::bundle::DEFAULT_VERSION, "etcd").unwrap();
    }
}
