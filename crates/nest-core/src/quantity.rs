//! Kubernetes resource quantities (`100m`, `1Gi`, `1e3`) as plain numbers, which is all the scheduler and the
//! downward API need of them.

/// A Kubernetes quantity as a number (`100m` → 0.1, `1Gi` → 2³⁰, `1e3` → 1000); 0 when unreadable.
pub fn parse(text: &str) -> f64 {
    let text = text.trim();
    let split = text.find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E').unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return 0.0,
    };
    number.parse::<f64>().map(|n| n * factor).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(super::parse("100m"), 0.1);
        assert_eq!(super::parse("1Gi"), 1024f64.powi(3));
        assert_eq!(super::parse("500M"), 5e8);
        assert_eq!(super::parse("1e3"), 1000.0);
        assert_eq!(super::parse("lots"), 0.0);
    }
}
