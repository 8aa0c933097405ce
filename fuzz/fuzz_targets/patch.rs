//! A patch against an object: both JSON documents from the input (split at the first NUL), applied as a merge patch
//! and as a JSON patch. Nothing may panic; every refusal is a 4xx.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nest_apiserver::body::{apply_patch, parse_patch};

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.iter().position(|&b| b == 0) else { return };
    let (doc, patch) = (&data[..split], &data[split + 1..]);
    let Ok(current) = serde_json::from_slice::<serde_json::Value>(doc) else { return };
    for content_type in ["application/merge-patch+json", "application/json-patch+json"] {
        match parse_patch(content_type, patch).and_then(|patch| apply_patch(&patch, &current)) {
            Ok(patched) => assert!(patched.is_object()),
            Err(error) => assert!((400..500).contains(&error.code), "{error:?}"),
        }
    }
});
