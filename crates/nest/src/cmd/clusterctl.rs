//! `nest clusterctl DIR`: writes the provider packaged for clusterctl — components, metadata and cluster template of
//! the infrastructure and control-plane providers `nested` — in the layout of a clusterctl local repository, with a
//! clusterctl configuration naming them.

use std::path::{Path, PathBuf};

use anyhow::Context;
use nest_capn::clusterctl::{self, Provider};
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to write (created when missing).
    #[arg(value_parser = crate::cmd::absolute)]
    dir: PathBuf,
}

fn yaml(objects: &[Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(object)?);
    }
    Ok(out)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", args.dir.display()))?;
    let dir = args.dir.canonicalize()?;
    let release = clusterctl::release();
    let metadata = serde_norway::to_string(&clusterctl::metadata())?;
    let mut config =
        String::from("# clusterctl init --config THIS --infrastructure nested --control-plane nested\nproviders:\n");
    for provider in [Provider::Infrastructure, Provider::ControlPlane] {
        let base = dir.join(provider.label()).join(&release);
        let components = base.join(provider.components_file());
        write(&components, &yaml(&clusterctl::components(provider))?)?;
        write(&base.join("metadata.yaml"), &metadata)?;
        if provider == Provider::Infrastructure {
            write(&base.join("cluster-template.yaml"), &clusterctl::cluster_template())?;
        }
        let kind = match provider {
            Provider::Infrastructure => "InfrastructureProvider",
            Provider::ControlPlane => "ControlPlaneProvider",
        };
        config.push_str(&format!("- name: nested\n  url: file://{}\n  type: {kind}\n", components.display()));
        println!("{}", base.display());
    }
    write(&dir.join("clusterctl.yaml"), &config)?;
    println!("{}", dir.join("clusterctl.yaml").display());
    Ok(())
}
