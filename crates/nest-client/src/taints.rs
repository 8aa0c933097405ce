//! Taints and tolerations, matched as `k8s.io/api/core/v1`'s `Toleration.ToleratesTaint` matches them: what the
//! scheduler, the DaemonSet controller and the taint-eviction controller all ask.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether `toleration` tolerates `taint`: same effect (or none given), same key (or none given, which needs
/// `Exists`), and `Exists` or the same value.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    fn given(field: &Option<String>) -> Option<&str> {
        field.as_deref().filter(|v| !v.is_empty())
    }
    if given(&toleration.effect).is_some_and(|e| e != taint.effect)
        || given(&toleration.key).is_some_and(|k| k != taint.key)
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => toleration.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default(),
        "Exists" => true,
        _ => false,
    }
}

/// The first of `taints` with one of `effects` that none of `tolerations` tolerates.
pub fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration], effects: &[&str]) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|taint| effects.contains(&taint.effect.as_str()) && !tolerations.iter().any(|t| tolerates(t, taint)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()).filter(|v: &String| !v.is_empty()),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        let some = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
        Toleration {
            key: some(key),
            operator: some(operator),
            value: some(value),
            effect: some(effect),
            toleration_seconds: None,
        }
    }

    #[test]
    fn a_toleration_matches_by_key_value_and_effect_as_upstream() {
        let gpu = taint("gpu", "yes", "NoSchedule");
        assert!(tolerates(&toleration("gpu", "Equal", "yes", "NoSchedule"), &gpu));
        assert!(tolerates(&toleration("gpu", "", "yes", ""), &gpu), "no operator is Equal; no effect is every effect");
        assert!(!tolerates(&toleration("gpu", "Equal", "no", "NoSchedule"), &gpu));
        assert!(tolerates(&toleration("gpu", "Exists", "", "NoSchedule"), &gpu));
        assert!(!tolerates(&toleration("gpu", "Exists", "", "NoExecute"), &gpu));
        assert!(tolerates(&toleration("", "Exists", "", ""), &gpu), "an empty key with Exists tolerates everything");
        assert!(!tolerates(&toleration("", "Equal", "", ""), &gpu));
        assert!(!tolerates(&toleration("gpu", "Lt", "yes", ""), &gpu), "an unknown operator tolerates nothing");
        let taints = [taint("a", "", "PreferNoSchedule"), gpu.clone(), taint("b", "", "NoExecute")];
        let found = untolerated(&taints, &[toleration("gpu", "Exists", "", "")], &["NoSchedule", "NoExecute"]);
        assert_eq!(found.map(|t| t.key.as_str()), Some("b"));
        assert_eq!(untolerated(&taints, &[toleration("", "Exists", "", "")], &["NoSchedule", "NoExecute"]), None);
    }
}
