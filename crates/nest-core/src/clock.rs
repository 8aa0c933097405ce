//! Time as Kubernetes writes it in objects: RFC 3339 in UTC, whole seconds (`2026-12-01T10:41:50Z`).

use std::time::SystemTime;

/// Now; the epoch when the system clock is before it.
pub fn now() -> jiff::Timestamp {
    jiff::Timestamp::try_from(SystemTime::now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// Now, as Kubernetes writes timestamps.
pub fn rfc3339_now() -> String {
    format(now())
}

/// `seconds` from now (negative: ago), as Kubernetes writes timestamps; clamped to the years 0001 to 9999 that RFC
/// 3339 can write, so that no input gives a time a client cannot read back.
pub fn rfc3339_in(seconds: i64) -> String {
    let then = now().as_second().saturating_add(seconds);
    format(from_seconds(then))
}

/// `seconds` since the epoch, as Kubernetes writes timestamps (clamped as [`rfc3339_in`] clamps).
pub fn rfc3339(seconds: u64) -> String {
    format(from_seconds(i64::try_from(seconds).unwrap_or(i64::MAX)))
}

fn from_seconds(seconds: i64) -> jiff::Timestamp {
    // 0001-01-01T00:00:00Z, the first second RFC 3339 can write, and the last one jiff holds (late on 9999-12-30).
    let (min, max) = (-62_135_596_800, jiff::Timestamp::MAX.as_second());
    jiff::Timestamp::from_second(seconds.clamp(min, max)).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

fn format(at: jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_as_kubernetes_writes_them() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_000_000), "2026-11-30T00:53:20Z");
        let now = rfc3339_now();
        assert_eq!(now.len(), 20, "{now}");
        assert!(rfc3339_in(3600) > now);
        assert!(rfc3339_in(i64::MAX).starts_with("9999-12-"), "far futures are clamped");
        assert!(rfc3339(u64::MAX).starts_with("9999-12-"));
        assert_eq!(rfc3339_in(i64::MIN), "0001-01-01T00:00:00Z", "and far pasts");
    }
}
