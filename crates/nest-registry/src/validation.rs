//! Name and label rules, as `k8s.io/apimachinery/pkg/util/validation` (1.33) states them. Each returns the message
//! kube-apiserver uses, so clients see the same text.

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn is_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// RFC 1123 label: lower-case alphanumerics and '-', starting and ending with an alphanumeric, at most 63.
pub fn dns1123_label(name: &str) -> Result<(), String> {
    let b = name.as_bytes();
    let shape =
        !b.is_empty() && is_alnum(b[0]) && is_alnum(b[b.len() - 1]) && b.iter().all(|&c| is_alnum(c) || c == b'-');
    if name.len() > DNS1123_LABEL_MAX {
        return Err(format!("must be no more than {DNS1123_LABEL_MAX} characters"));
    }
    if !shape {
        return Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must \
                    start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
                    validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            .into());
    }
    Ok(())
}

/// RFC 1035 label (Service names): like an RFC 1123 label, but starting with a letter.
pub fn dns1035_label(name: &str) -> Result<(), String> {
    dns1123_label(name)?;
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an \
                    alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', \
                    regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
            .into());
    }
    Ok(())
}

/// RFC 1123 subdomain: dot-separated labels, at most 253.
pub fn dns1123_subdomain(name: &str) -> Result<(), String> {
    if name.len() > DNS1123_SUBDOMAIN_MAX {
        return Err(format!("must be no more than {DNS1123_SUBDOMAIN_MAX} characters"));
    }
    let b = name.as_bytes();
    let shape = !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum(c) || c == b'-' || c == b'.')
        && name.split('.').all(|part| !part.is_empty() && part.starts_with(|c: char| c.is_ascii_alphanumeric()));
    if !shape {
        return Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
                    and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
                    validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            .into());
    }
    Ok(())
}

/// A name usable as one path segment (the rule for kinds without a stricter one): not `.` or `..`, no `/` or `%`.
pub fn path_segment(name: &str) -> Result<(), String> {
    if name == "." || name == ".." {
        return Err(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            return Err(format!("may not contain '{bad}'"));
        }
    }
    Ok(())
}

fn qualified_part(part: &str) -> bool {
    let b = part.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// A qualified name (label and annotation keys): an optional DNS subdomain prefix and '/', then a name of at most
/// 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric.
pub fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err("prefix part must be non-empty".into());
        }
        dns1123_subdomain(prefix).map_err(|m| format!("prefix part {m}"))?;
    }
    if !qualified_part(name) {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
                    with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for \
                    validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            .into());
    }
    Ok(())
}

/// A ConfigMap or Secret key, which becomes a file name in a volume: at most 253 alphanumerics, '-', '_' or '.',
/// and not `.`, `..` or anything starting with `..` (`IsConfigMapKey` in k8s.io/apimachinery, 1.33). Every rule
/// broken is one message, as upstream lists them.
pub fn config_map_key(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if key.len() > 253 {
        errors.push("must be no more than 253 characters".to_string());
    }
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
        errors.push(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or \
             'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
                .to_string(),
        );
    }
    match key {
        "." => errors.push("must not be '.'".to_string()),
        ".." => errors.push("must not be '..'".to_string()),
        _ if key.starts_with("..") => errors.push("must not start with '..'".to_string()),
        _ => {}
    }
    errors
}

/// A label value: empty, or at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric.
pub fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || qualified_part(value) {
        Ok(())
    } else {
        Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and \
             must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex \
             used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(dns1123_label("web-1").is_ok());
        assert!(dns1123_label("Web").is_err());
        assert!(dns1123_label("-web").is_err());
        assert!(dns1123_label(&"a".repeat(64)).is_err());
        assert!(dns1123_subdomain("my.config-map").is_ok());
        assert!(dns1123_subdomain("my..map").is_err());
        assert!(dns1123_subdomain("under_score").is_err());
        assert!(path_segment("a:b").is_ok());
        assert!(path_segment("a/b").is_err());
        assert!(path_segment("..").is_err());
    }

    #[test]
    fn keys_and_values() {
        assert!(qualified_name("app.kubernetes.io/name").is_ok());
        assert!(qualified_name("Simple_Key").is_ok());
        assert!(qualified_name("/x").is_err());
        assert!(qualified_name("bad prefix/x").is_err());
        assert!(label_value("").is_ok());
        assert!(label_value("v1.2_3").is_ok());
        assert!(label_value("a b").is_err());
    }
}
