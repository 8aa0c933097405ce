//! The registry's layering, checked on its source: the generic mechanism (the store, the catalogue, the admission
//! chain, the strategy trait and everything else outside `kinds/`, `admission/` and the wiring in `install.rs`)
//! imports nothing of nest's kinds or admission plugins. They are handed to it, as kube-apiserver's
//! `pkg/controlplane` hands the generic registry its storage and admission; an import the other way would make
//! the mechanism and the kinds one import circle again.

use std::path::{Path, PathBuf};

/// Paths a generic module may not name: the folders of kinds and plugins, and the wiring that joins them.
const FORBIDDEN: [&str; 6] =
    ["crate::kinds", "crate::admission", "crate::install", "super::kinds", "super::admission", "super::install"];

/// What is not the generic mechanism, relative to `src/`.
fn wiring(relative: &Path) -> bool {
    relative.starts_with("kinds") || relative.starts_with("admission") || relative == Path::new("install.rs")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_generic_mechanism_imports_no_kind_and_no_plugin() {
    let src = src();
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut generic = 0;
    let mut offences = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        // The crate root only declares the modules.
        if wiring(relative) || relative == Path::new("lib.rs") {
            continue;
        }
        generic += 1;
        let text = std::fs::read_to_string(file).expect("a readable source file");
        for (number, line) in text.lines().enumerate() {
            for path in FORBIDDEN.iter().filter(|path| line.contains(*path)) {
                offences.push(format!("src/{}:{}: {path}", relative.display(), number + 1));
            }
        }
    }
    for must in ["store/mod.rs", "store/write.rs", "catalog.rs", "chain.rs", "strategy.rs", "serving.rs"] {
        assert!(files.contains(&src.join(must)), "src/{must} is checked");
    }
    assert!(generic >= 20, "only {generic} generic files found");
    assert!(offences.is_empty(), "the generic mechanism names the wiring:\n{}", offences.join("\n"));
}

#[test]
fn every_admission_plugin_says_what_it_handles_and_tests_it() {
    let dir = src().join("admission");
    let mut files = Vec::new();
    sources(&dir, &mut files);
    let mut plugins = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let implements = text.contains("impl Mutating for") || text.contains("impl Validating for");
        if !implements {
            continue;
        }
        plugins += 1;
        let name = file.strip_prefix(&dir).expect("under admission").display().to_string();
        // A plugin that is a folder may keep its tests beside it.
        let beside = file.with_file_name("tests.rs");
        let tests =
            if file.ends_with("mod.rs") { std::fs::read_to_string(beside).unwrap_or_default() } else { String::new() };
        assert!(text.contains("fn handles(&self, request: &Request<'_>) -> bool"), "{name} declares no handles");
        assert!(
            text.contains("expect_handled(") || tests.contains("expect_handled("),
            "{name} does not test its handles"
        );
    }
    // Each plugin kube-apiserver names (`PLUGINS`), and the always-on one that records who made a CSR.
    assert_eq!(plugins, nest_registry::admission::PLUGINS.len() + 1, "one file a plugin");
}
