//! ConfigMaps: their data goes down exactly as it is, under the super name [`names::super_config_map`] gives (the
//! tenant's `kube-root-ca.crt` must not take the place of the super cluster's own).

use super::{Kind, resource, with};
use crate::names;

pub fn kind() -> Kind {
    Kind {
        down: |o, m| Some(with(o, m, &["data", "binaryData", "immutable"])),
        content: &["data", "binaryData"],
        verbatim: &["data", "binaryData"],
        super_name: names::super_config_map,
        ..Kind::plain("configmaps", resource("", "v1", "ConfigMap"))
    }
}
