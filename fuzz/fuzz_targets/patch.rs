//! A patch against an object: both JSON documents from the input (split at the first NUL), applied as a merge patch,
//! a JSON patch, and a strategic merge patch to a Pod and to a Deployment. Nothing may panic; every refusal is a 4xx.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nest_codec::{apply_patch, parse_patch};

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.iter().position(|&b| b == 0) else { return };
    let (doc, patch) = (&data[..split], &data[split + 1..]);
    let Ok(current) = serde_json::from_slice::<serde_json::Value>(doc) else { return };
    let pod = nest_openapi::kind_schema("", "v1", "Pod");
    let deployment = nest_openapi::kind_schema("apps", "v1", "Deployment");
    let cases = [
        ("application/merge-patch+json", None),
        ("application/json-patch+json", None),
        ("application/strategic-merge-patch+json", pod.as_deref()),
        ("application/strategic-merge-patch+json", deployment.as_deref()),
    ];
    for (content_type, schema) in cases {
        match parse_patch(content_type, patch, true).and_then(|patch| apply_patch(&patch, &current, schema)) {
            Ok(patched) => assert!(patched.is_object()),
            Err(error) => assert!((400..500).contains(&error.code), "{error:?}"),
        }
    }
});
