//! Server-side apply: the live object and the applied configuration from the input (split at the first NUL), applied
//! to a Deployment and to a Pod by one manager, then again by another with and without force, and recorded as an
//! update. Nothing may panic; every refusal is a 4xx.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nest_registry::apply::{apply, track_update};
use nest_registry::{Catalog, Resource, Subresource};

const NOW: &str = "2026-11-30T00:00:00Z";

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.iter().position(|&b| b == 0) else { return };
    let (live, applied) = (&data[..split], &data[split + 1..]);
    let Ok(live) = serde_json::from_slice::<serde_json::Value>(live) else { return };
    let Ok(applied) = serde_json::from_slice::<serde_json::Value>(applied) else { return };
    let catalog = Catalog::builtin();
    for (group, plural) in [("apps", "deployments"), ("", "pods")] {
        let resource = Resource::new(catalog.find(group, "v1", plural).expect("a built-in"));
        for subresource in [Subresource::Main, Subresource::Status] {
            let first = match apply(&resource, Some(&live), &applied, "a", false, subresource, NOW) {
                Ok(first) => first,
                Err(error) => {
                    assert!((400..500).contains(&error.code), "{error:?}");
                    continue;
                }
            };
            for force in [false, true] {
                if let Err(error) = apply(&resource, Some(&first), &applied, "b", force, subresource, NOW) {
                    assert!((400..500).contains(&error.code), "{error:?}");
                }
            }
            let mut updated = first.clone();
            track_update(&resource, Some(&live), &mut updated, "c", subresource, NOW);
        }
    }
});
