//! A request body, as any client may send it: decoded as JSON, YAML or Kubernetes protobuf, then checked against a built-in kind's schema
//! (or a custom resource's) and its strategy, as a create would, and read by Pod Security's checks. Nothing may
//! panic; every refusal is a 4xx.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nest_codec::decode_object;
use nest_registry::admission::pod_security::standards::{Level, PodView, describe, evaluate};
use nest_registry::{Catalog, Resource};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else { return };
    let content_type = match selector & 3 {
        0 => "application/json",
        1 => "application/yaml",
        _ => "application/vnd.kubernetes.protobuf",
    };
    let catalog = Catalog::builtin();
    let resources = catalog.resources();
    let info = resources[(selector as usize >> 2) % resources.len()].clone();
    let mut obj = match decode_object(content_type, body) {
        Ok(obj) => obj,
        Err(error) => return assert!((400..500).contains(&error.code), "{error:?}"),
    };
    let resource = Resource::new(info);
    let _ = resource.unknown_fields(&obj);
    match resource.decode(&mut obj) {
        Ok(_) => {
            if obj.is_object() {
                resource.strategy.prepare_for_create(&mut obj);
                let _ = resource.strategy.validate(&obj);
                // Pod Security reads any pod (or pod template) a client writes, at every level and version.
                for pod in [&obj, &obj["spec"]["template"], &obj["spec"]["jobTemplate"]["spec"]["template"]] {
                    let view = PodView { metadata: &pod["metadata"], spec: &pod["spec"] };
                    for level in [Level::Baseline, Level::Restricted] {
                        let _ = describe(&evaluate(level, u32::from(selector) % 40, &view));
                    }
                }
            }
        }
        Err(error) => assert!((400..500).contains(&error.code), "{error:?}"),
    }
});
