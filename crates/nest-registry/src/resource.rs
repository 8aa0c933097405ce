//! A served resource as one request uses it: its catalogue entry, its strategy, and who asks.

use std::sync::Arc;

use serde_json::Value;

use crate::catalog::ResourceInfo;
use crate::chain::{UserInfo, Warnings};
use crate::error::{ApiError, Result};
use crate::strategy::Strategy;

/// A served resource with its policy, as one request uses it.
pub struct Resource {
    pub info: Arc<ResourceInfo>,
    pub strategy: Arc<dyn Strategy>,
    /// A built-in kind's OpenAPI schema, which every body is decoded against.
    pub schema: Option<Arc<nest_openapi::KindSchema>>,
    /// The field manager writes are recorded for in `managedFields` (`apply::track_update`); `None`
    /// records nothing (the server's own writes, and apply, which records itself).
    pub manager: Option<String>,
    /// Who asks (the server itself when empty), for admission.
    pub user: UserInfo,
    /// What admission warns about, for the response's `Warning` headers.
    pub warnings: Warnings,
}

impl Resource {
    /// `info` served with `strategy`, for a request by the server itself.
    pub fn with_strategy(info: Arc<ResourceInfo>, strategy: Arc<dyn Strategy>) -> Resource {
        let schema = if info.custom { None } else { nest_openapi::kind_schema(&info.group, &info.version, &info.kind) };
        Resource { info, strategy, schema, manager: None, user: UserInfo::default(), warnings: Warnings::default() }
    }

    /// Decodes a request body as kube-apiserver decodes it into the kind's Go type: a field of the wrong type is a
    /// 400 naming the field, and fields the kind does not have are dropped (returned, for `fieldValidation`).
    pub fn decode(&self, obj: &mut Value) -> Result<Vec<String>> {
        let Some(schema) = &self.schema else { return Ok(Vec::new()) };
        let causes = crate::schema::validate_builtin(schema, obj);
        if let Some(first) = causes.first() {
            let kind = &self.info.kind;
            let mut error = ApiError::bad_request(format!(
                "{kind} in version \"{}\" cannot be handled as a {kind}: {}: {}",
                self.info.version, first.field, first.message
            ));
            error.details.kind = Some(self.info.plural.clone());
            error.details.causes = causes;
            return Err(error);
        }
        Ok(crate::schema::prune_builtin(schema, obj))
    }

    /// The fields of `obj` that the kind does not have (for a custom resource, that its schema does not declare), as
    /// `fieldValidation=Strict|Warn` reports them.
    pub fn unknown_fields(&self, obj: &Value) -> Vec<String> {
        let mut copy = obj.clone();
        match (&self.schema, &self.info.schema) {
            (Some(schema), _) => crate::schema::prune_builtin(schema, &mut copy),
            (None, Some(schema)) => crate::schema::prune(schema, &mut copy, true),
            (None, None) => Vec::new(),
        }
    }
}
