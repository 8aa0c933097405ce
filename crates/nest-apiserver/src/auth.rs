//! Authentication: who sent a request.
//!
//! A client certificate verified against the cluster CA names the user (CN) and groups (O); a bearer token is
//! looked up in the static token file (kube-apiserver's `--token-auth-file` format: `token,user,uid,"group1,group2"`).
//! Everyone authenticated is also in `system:authenticated`. What a user may then do is [`crate::authz`]'s to say.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    pub(crate) fn new(name: String, mut groups: Vec<String>) -> User {
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        User { name, groups }
    }
}

/// The user named by a verified client certificate (DER).
pub fn user_from_certificate(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_string)).collect();
    Some(User::new(name, groups))
}

/// Static bearer tokens.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    users: HashMap<String, User>,
}

impl Tokens {
    /// Reads a token file: one `token,user,uid[,"group1,group2"]` per line.
    pub fn load(path: &Path) -> anyhow::Result<Tokens> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading token file {}", path.display()))?;
        let mut users = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (token, rest) = line
                .split_once(',')
                .with_context(|| format!("{}:{}: expected token,user,uid", path.display(), n + 1))?;
            let mut fields = rest.splitn(3, ',');
            let user = fields.next().unwrap_or_default().trim().to_string();
            let _uid = fields.next();
            let groups: Vec<String> = fields
                .next()
                .map(|g| {
                    g.trim()
                        .trim_matches('"')
                        .split(',')
                        .map(|g| g.trim().to_string())
                        .filter(|g| !g.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            anyhow::ensure!(!token.is_empty() && !user.is_empty(), "{}:{}: empty token or user", path.display(), n + 1);
            users.insert(token.trim().to_string(), User::new(user, groups));
        }
        Ok(Tokens { users })
    }

    /// The user of an `Authorization` header value.
    pub fn user(&self, authorization: &str) -> Option<User> {
        let token = authorization.strip_prefix("Bearer ").or_else(|| authorization.strip_prefix("bearer "))?;
        self.users.get(token.trim()).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_use_the_kube_apiserver_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "# comment\nsecret1,alice,1,\"dev,ops\"\nsecret2,bob,2\n").unwrap();
        let tokens = Tokens::load(&path).unwrap();
        let alice = tokens.user("Bearer secret1").unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, ["dev", "ops", "system:authenticated"]);
        assert_eq!(tokens.user("Bearer secret2").unwrap().groups, ["system:authenticated"]);
        assert!(tokens.user("Bearer nope").is_none());
        assert!(tokens.user("Basic secret1").is_none());
    }
}
