//! Kubernetes' `$(VAR)` expansion in container commands, arguments and environment values (after
//! `third_party/forked/golang/expansion/expand.go`, 1.33): `$(NAME)` becomes the variable's value when it is
//! defined and stays as written when it is not; `$$` is a literal `$`; any other `$` is kept.

/// Expands `$(NAME)` references in `input` with `lookup`.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_expand_as_kubernetes_expands_them() {
        let env = |name: &str| match name {
            "POD_IP" => Some("127.1.0.2".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        assert_eq!(expand("--listen=$(POD_IP):8080", env), "--listen=127.1.0.2:8080");
        assert_eq!(expand("$(MISSING) stays", env), "$(MISSING) stays");
        assert_eq!(expand("$$(POD_IP) is escaped", env), "$(POD_IP) is escaped");
        assert_eq!(expand("[$(EMPTY)]", env), "[]");
        assert_eq!(expand("cost: $5 and $(unclosed", env), "cost: $5 and $(unclosed");
        assert_eq!(expand("trailing $", env), "trailing $");
    }
}
