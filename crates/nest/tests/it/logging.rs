//! What nest's components log of what servers answer (issue 18): a response that does not decode is not written to
//! the log whole, since it may hold a Secret's data. A fake API server answers every request with a body that
//! decodes as nothing nest asks for, carrying a secret; `nest cluster list` talks to it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;

const SECRET: &str = "aHVudGVyMi1zZWNyZXQ=";

/// Serves the same undecodable body to every request, until the test ends.
fn fake_api_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let body = format!(
                r#"{{"kind":"List","apiVersion":"v1","items":[{{"metadata":{{"name":"x"}},"data":{{"password":"{SECRET}"}},"spec":7}}],"major":{{}}}}"#
            );
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    port
}

fn cluster_list(kubeconfig: &std::path::Path, rust_log: Option<&str>) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nest"));
    command.args(["cluster", "list", "--kubeconfig"]).arg(kubeconfig).env_remove("RUST_LOG");
    if let Some(filter) = rust_log {
        command.env("RUST_LOG", filter);
    }
    let out = command.output().unwrap();
    assert!(!out.status.success(), "nothing decoded, so the command fails");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_undecodable_answer_is_not_logged_whole() {
    let port = fake_api_server();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"http://127.0.0.1:{port}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let said = cluster_list(&kubeconfig, None);
    assert!(!said.contains(SECRET), "the default log printed the answer: {said}");
    // What the default leaves out: kube-client's warning with the whole body, which asking for warnings shows.
    let verbose = cluster_list(&kubeconfig, Some("warn"));
    assert!(verbose.contains(SECRET), "kube-client no longer logs bodies; the default filter can go: {verbose}");
}
