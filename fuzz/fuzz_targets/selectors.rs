//! Label and field selectors from the query string: parsed, then matched against an object. Nothing may panic; every
//! refusal is a 400.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nest_registry::selector::{FieldSelector, LabelSelector};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let labels = [("app".to_string(), "web".to_string()), ("tier".to_string(), "1".to_string())].into();
    match LabelSelector::parse(text) {
        Ok(selector) => {
            let _ = selector.matches(&labels);
        }
        Err(error) => assert_eq!(error.code, 400),
    }
    match FieldSelector::parse(text, &["metadata.name", "metadata.namespace", "spec.nodeName"]) {
        Ok(selector) => {
            let _ = selector.matches(|field| field.len().to_string());
        }
        Err(error) => assert_eq!(error.code, 400),
    }
});
