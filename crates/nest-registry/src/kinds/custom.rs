//! Custom resources: their CRD's structural schema defaults, prunes and validates them ([`crate::schema`]).

use std::sync::Arc;

use serde_json::Value;

use crate::error::Cause;
use crate::schema;
use crate::strategy::Strategy;

/// The custom resource strategy: its CRD's structural schema defaults, prunes and validates them ([`crate::schema`]).
pub struct Custom {
    schema: Option<Arc<Value>>,
}

impl Custom {
    /// The strategy of a custom resource with this structural schema (`openAPIV3Schema`).
    pub fn new(schema: Option<Arc<Value>>) -> Custom {
        Custom { schema }
    }
}

impl Strategy for Custom {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(schema) = &self.schema {
            schema::default(schema, obj);
            schema::prune(schema, obj, true);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        if let Some(schema) = &self.schema {
            schema::validate(schema, obj, "", &mut causes);
        }
        causes
    }
}
