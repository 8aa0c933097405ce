//! Custom resource kinds the syncer is told to sync (`nest syncer --sync-resource`): `spec` down, `status` up.

use super::{Kind, resource, with};

/// A custom resource kind synced like the built-in ones: its `spec` down, its `status` up.
pub fn custom(group: &str, version: &str, kind: &str) -> Kind {
    let resource = resource(group, version, kind);
    // Registered once at start, for the life of the process: the name may live as long.
    let name: &'static str = Box::leak(resource.plural.clone().into_boxed_str());
    Kind {
        down: |o, m| Some(with(o, m, &["spec"])),
        content: &["spec"],
        status_up: true,
        ..Kind::plain(name, resource)
    }
}

/// Parses `group/version/Kind` (`version/Kind` for the core group).
pub fn parse_gvk(text: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = text.split('/').collect();
    match parts[..] {
        [group, version, kind] if !version.is_empty() && !kind.is_empty() => {
            Some((group.to_string(), version.to_string(), kind.to_string()))
        }
        [version, kind] if !version.is_empty() && !kind.is_empty() => {
            Some((String::new(), version.to_string(), kind.to_string()))
        }
        _ => None,
    }
}
