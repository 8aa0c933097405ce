//! Kubernetes resource quantities (`100m`, `1Gi`, `1e3`, `250n`) as plain numbers, which is all the scheduler, quota,
//! limits and the downward API need of them.
//!
//! The grammar is `resource.ParseQuantity`'s (apimachinery 1.33): a signed decimal number, then one suffix — binary
//! (`Ki` … `Ei`), decimal (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal exponent (`e3`, `E-2`).
//! Nothing else is a quantity: not an empty string, not spaces, not `1.5.2` or `lots`. As upstream, no quantity's
//! magnitude is above 2⁶³−1; larger ones are held at it.
//!
//! ```
//! assert_eq!(nest_core::quantity::value("250m"), Some(0.25));
//! assert_eq!(nest_core::quantity::value("8000000000n"), Some(8.0));
//! assert_eq!(nest_core::quantity::value("1e999"), Some(nest_core::quantity::LARGEST));
//! assert_eq!(nest_core::quantity::value("lots"), None);
//! ```

/// The largest magnitude a quantity holds (2⁶³−1).
pub const LARGEST: f64 = 9_223_372_036_854_775_807.0;

/// What upstream answers for text that is no quantity (`resource.ErrFormatWrong`).
pub const FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// The value of `text` as a quantity, or `None` when it is not one by the grammar.
pub fn value(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut at = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    let mut digits = 0;
    let mut points = 0;
    while let Some(&b) = bytes.get(at) {
        match b {
            b'0'..=b'9' => digits += 1,
            b'.' => points += 1,
            _ => break,
        }
        at += 1;
    }
    if digits == 0 || points > 1 {
        return None;
    }
    let number: f64 = text[..at].parse().ok()?;
    let factor = match &text[at..] {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
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
        exponent => {
            let exponent = exponent.strip_prefix(['e', 'E'])?;
            let unsigned = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Past ±400 every number is 0 or held at the largest; the text may be any length.
            let exponent: i32 = exponent
                .parse::<i64>()
                .map_or(if exponent.starts_with('-') { -400 } else { 400 }, |e| e.clamp(-400, 400) as i32);
            10f64.powi(exponent)
        }
    };
    let value = number * factor;
    Some(if value.is_nan() { 0.0 } else { value.clamp(-LARGEST, LARGEST) })
}

/// [`value`], with 0 for what is not a quantity: for places that have only ever seen checked quantities (an API
/// server refuses the others at decode), such as a node's own configuration.
pub fn parse(text: &str) -> f64 {
    value(text).unwrap_or(0.0)
}

/// `value` of quota resource `resource` as upstream prints such quantities in its messages: cores (`cpu`,
/// `requests.cpu`, `limits.cpu`) in whole numbers or millicores, bytes (`memory`, `requests.memory`,
/// `limits.memory`) in the largest binary unit that divides them, anything else (counts) as it is. Values past what
/// an i64 holds are held there.
pub fn show(resource: &str, value: f64) -> String {
    let whole = |v: f64| if v.is_nan() { 0 } else { v.round().clamp(i64::MIN as f64, i64::MAX as f64) as i64 };
    if matches!(resource, "cpu" | "requests.cpu" | "limits.cpu") {
        let milli = whole(value * 1000.0);
        return if milli % 1000 == 0 { (milli / 1000).to_string() } else { format!("{milli}m") };
    }
    if matches!(resource, "memory" | "requests.memory" | "limits.memory") {
        let bytes = whole(value);
        for (suffix, factor) in
            [("Ei", 1i64 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)]
        {
            if bytes != 0 && bytes % factor == 0 {
                return format!("{}{suffix}", bytes / factor);
            }
        }
        return bytes.to_string();
    }
    whole(value).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(parse("100m"), 0.1);
        assert_eq!(parse("1Gi"), 1024f64.powi(3));
        assert_eq!(parse("500M"), 5e8);
        assert_eq!(parse("1e3"), 1000.0);
        assert_eq!(value("250u"), Some(0.00025));
        assert_eq!(value("64000000000n"), Some(64.0));
        assert_eq!(value("+.5"), Some(0.5));
        assert_eq!(value("5."), Some(5.0));
        assert_eq!(value("-1"), Some(-1.0));
        assert_eq!(value("12E-1"), Some(1.2000000000000002));
    }

    #[test]
    fn quota_resources_are_shown_as_upstream_shows_them() {
        assert_eq!(show("requests.cpu", 0.5), "500m");
        assert_eq!(show("limits.cpu", 2.0), "2");
        assert_eq!(show("memory", 1024.0 * 1024.0 * 1024.0), "1Gi");
        assert_eq!(show("requests.memory", 1000.0), "1000");
        assert_eq!(show("pods", 3.0), "3");
        assert_eq!(show("limits.memory", f64::INFINITY), "9223372036854775807");
    }

    #[test]
    fn only_the_grammar_is_a_quantity() {
        for not in [
            "", "lots", " 1", "1 ", "1.5.2", ".", "+", "1Kb", "1e", "1e+", "1ee3", "1mi", "0x10", "1_000", "NaN", "inf",
        ] {
            assert_eq!(value(not), None, "{not:?}");
        }
    }

    #[test]
    fn magnitudes_past_two_to_the_63_are_held_there() {
        assert_eq!(value("1e999"), Some(LARGEST));
        assert_eq!(value("-1e999999999999999999999"), Some(-LARGEST));
        assert_eq!(value("1e-999999999999999999999"), Some(0.0));
        assert_eq!(value("99999999999Ei"), Some(LARGEST));
        assert_eq!(value(&"9".repeat(400)), Some(LARGEST));
    }
}
