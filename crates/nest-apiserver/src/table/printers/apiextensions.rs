//! apiextensions.k8s.io: CustomResourceDefinitions print with the default convertor's `Created At`.

use crate::table::Printer;

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    (kind == "CustomResourceDefinition").then_some(&super::CREATED_AT)
}
