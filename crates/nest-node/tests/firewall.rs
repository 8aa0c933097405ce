//! The network wall on a real bridge, with real network namespaces and the kernel's nftables: what a pod of each zone
//! reaches, and that a pod taking another's address gets nowhere. The node's own plumbing (CNI, the watches) is
//! left out: the test builds the bridge and the pods' namespaces with `ip`, as the bridge plugin would, and drives
//! [`Firewall`] as the node does. Needs root, as the node does (scripts/check runs as root).

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use nest_node::firewall::{Firewall, Protocol, Shared, Zone};

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A bridge with pods on it, removed when dropped.
struct Lab {
    bridge: String,
    pods: Vec<String>,
    listeners: Vec<std::process::Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.listeners {
            let _ = child.kill();
            let _ = child.wait();
        }
        for pod in &self.pods {
            let _ = Command::new("ip").args(["netns", "delete", pod]).output();
        }
        let _ = Command::new("ip").args(["link", "delete", &self.bridge]).output();
    }
}

impl Lab {
    /// A bridge `10.<n>.0.1/24`, named after this process so that runs do not meet.
    fn new(n: u8) -> Lab {
        let bridge = format!("nestfw{}", std::process::id() % 100_000);
        let _ = Command::new("ip").args(["link", "delete", &bridge]).output();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&["addr", "add", &format!("10.{n}.0.1/24"), "dev", &bridge]);
        ip(&["link", "set", &bridge, "up"]);
        Lab { bridge, pods: Vec::new(), listeners: Vec::new() }
    }

    /// A pod's namespace with `address` on the bridge, listening on TCP port 8000; returns its veth's host side.
    fn pod(&mut self, name: &str, address: Ipv4Addr, gateway: &str) -> String {
        let netns = format!("{}-{name}", self.bridge);
        let veth = format!("v{}{name}", std::process::id() % 10_000);
        let _ = Command::new("ip").args(["netns", "delete", &netns]).output();
        ip(&["netns", "add", &netns]);
        self.pods.push(netns.clone());
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &netns]);
        ip(&["link", "set", &veth, "master", &self.bridge, "up"]);
        ip(&["-n", &netns, "addr", "add", &format!("{address}/24"), "dev", "eth0"]);
        ip(&["-n", &netns, "link", "set", "eth0", "up"]);
        ip(&["-n", &netns, "link", "set", "lo", "up"]);
        ip(&["-n", &netns, "route", "add", "default", "via", gateway]);
        self.listeners.push(listen(Some(&netns), &format!("{address}:8000")));
        veth
    }

    /// Whether a TCP connection from pod `name` (from `source`, when given) to `target` opens within 1 s.
    fn connects(&self, name: &str, source: Option<Ipv4Addr>, target: &str) -> bool {
        let netns = format!("{}-{name}", self.bridge);
        let program = format!(
            "import socket\ns = socket.socket()\ns.settimeout(1)\n{}\ntry:\n    s.connect(({:?}, {}))\n    print('open')\nexcept Exception as e:\n    print('closed', e)",
            source.map_or(String::new(), |s| format!("s.bind(('{s}', 0))")),
            target.split(':').next().unwrap(),
            target.split(':').nth(1).unwrap()
        );
        let out = Command::new("ip").args(["netns", "exec", &netns, "python3", "-c", &program]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).starts_with("open")
    }
}

/// A TCP listener at `address` (in `netns`, when given), accepting and closing connections.
fn listen(netns: Option<&str>, address: &str) -> std::process::Child {
    let (host, port) = address.split_once(':').unwrap();
    let program = format!(
        "import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(({host:?}, {port}))\ns.listen(64)\nwhile True:\n    c, _ = s.accept()\n    c.close()"
    );
    let mut command = match netns {
        Some(netns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", netns, "python3", "-c", &program]);
            command
        }
        None => {
            let mut command = Command::new("python3");
            command.args(["-c", &program]);
            command
        }
    };
    let child = command.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    child
}

#[tokio::test]
async fn each_zone_reaches_only_itself_the_shared_services_and_what_the_platform_allows() {
    let mut lab = Lab::new(203);
    let firewall = Firewall::new(&lab.bridge);
    let gateway: Ipv4Addr = "10.203.0.1".parse().unwrap();
    let shared = [Shared { address: gateway, protocol: Protocol::Tcp, ports: 10300..=10399 }];
    firewall.install(&shared).await.unwrap();
    let demo = Zone::Tenant("default-aaaaa-demo".into());
    let acme = Zone::Tenant("default-bbbbb-acme".into());
    let addresses: Vec<Ipv4Addr> = (2..=6).map(|i| Ipv4Addr::new(10, 203, 0, i)).collect();
    for (name, address, zone) in [
        ("d1", addresses[0], &demo),
        ("d2", addresses[1], &demo),
        ("a1", addresses[2], &acme),
        ("p1", addresses[3], &Zone::Platform),
    ] {
        let veth = lab.pod(name, address, "10.203.0.1");
        firewall.admit(address, zone, false, Some(&veth)).await.unwrap();
    }
    // A pod the wall was never told of: nothing it sends passes.
    lab.pod("x1", addresses[4], "10.203.0.1");
    // On the host: a shared service, and something else that listens (an API server, a kubelet).
    lab.listeners.push(listen(None, "10.203.0.1:10300"));
    lab.listeners.push(listen(None, "10.203.0.1:10250"));

    let to = |i: usize| format!("{}:8000", addresses[i]);
    assert!(lab.connects("d1", None, &to(1)), "a tenant's pods reach each other");
    assert!(!lab.connects("d1", None, &to(2)), "demo must not reach acme");
    assert!(!lab.connects("a1", None, &to(0)), "acme must not reach demo");
    assert!(!lab.connects("a1", None, &to(3)), "acme must not reach the platform's pods");
    assert!(lab.connects("p1", None, &to(2)), "the platform's pods reach the tenants'");
    assert!(lab.connects("a1", None, "10.203.0.1:10300"), "a shared service is reached");
    assert!(!lab.connects("a1", None, "10.203.0.1:10250"), "a kubelet port on the host is not");
    assert!(!lab.connects("x1", None, &to(0)), "an address in no zone gets nowhere");

    // Beyond the machine (a namespace of its own behind a veth, routed by the host): reached, until the tenant's
    // egress is turned off; never link-local (cloud metadata) addresses.
    let outside = format!("{}-out", lab.bridge);
    let _ = Command::new("ip").args(["netns", "delete", &outside]).output();
    ip(&["netns", "add", &outside]);
    lab.pods.push(outside.clone());
    let uplink = format!("u{}", std::process::id() % 100_000);
    ip(&["link", "add", &uplink, "type", "veth", "peer", "name", "eth0", "netns", &outside]);
    ip(&["addr", "add", "10.204.0.1/24", "dev", &uplink]);
    ip(&["link", "set", &uplink, "up"]);
    ip(&["-n", &outside, "addr", "add", "10.204.0.2/24", "dev", "eth0"]);
    ip(&["-n", &outside, "link", "set", "eth0", "up"]);
    ip(&["-n", &outside, "route", "add", "default", "via", "10.204.0.1"]);
    lab.listeners.push(listen(Some(&outside), "10.204.0.2:8000"));
    assert!(lab.connects("a1", None, "10.204.0.2:8000"), "acme reaches beyond the machine");
    firewall.admit(addresses[2], &acme, true, None).await.unwrap();
    assert!(!lab.connects("a1", None, "10.204.0.2:8000"), "acme's egress is off");
    assert!(lab.connects("d1", None, "10.204.0.2:8000"), "demo's egress is still on");
    let _ = Command::new("ip").args(["link", "delete", &uplink]).output();

    // acme takes demo's address (as a pod that gained NET_ADMIN would): the bridge drops what it sends.
    ip(&["-n", &format!("{}-a1", lab.bridge), "addr", "add", &format!("{}/32", addresses[1]), "dev", "eth0"]);
    assert!(!lab.connects("a1", Some(addresses[1]), &to(0)), "a taken address gets nowhere");

    // A pod that is gone is out of its zone.
    firewall.forget(addresses[1]).await.unwrap();
    assert!(!lab.connects("d2", None, &to(0)), "a forgotten pod sends nothing");
    firewall.uninstall().await;
}
