//! `nest render`: prints the manifests the controllers would apply for the NestedControlPlanes read as YAML on stdin
//! (with, optionally, their Cluster, components and Services — a Service's `clusterIP` is what some manifests need),
//! without any API server. Notes on what could not be rendered go to stderr.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A directory of component packages looked at before the built-in ones (as `nest manager --packages`).
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR")]
    packages: Option<PathBuf>,
}

/// Every YAML document of `text`, lists (`kind: List`) opened.
pub fn documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    for document in serde_norway::Deserializer::from_str(text) {
        let value = Value::deserialize(document).context("reading YAML")?;
        match value {
            Value::Null => {}
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                objects.extend(map.get("items").and_then(Value::as_array).cloned().unwrap_or_default());
            }
            value => objects.push(value),
        }
    }
    Ok(objects)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).context("reading stdin")?;
    let objects = documents(&text)?;
    let packages = nest_capn::package::Packages { dir: args.packages };
    let (manifests, notes) = nest_capn::plan::render_objects(&objects, &packages).map_err(anyhow::Error::msg)?;
    for note in notes {
        eprintln!("nest render: {note}");
    }
    let mut out = String::new();
    for manifest in manifests {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(&manifest)?);
    }
    print!("{out}");
    Ok(())
}
