//! ServiceAccounts: copied so that the super cluster admits pods that name them; they never get a token there.

use serde_json::json;

use super::{Kind, resource, with};

pub fn kind() -> Kind {
    Kind {
        down: |o, m| {
            // The super cluster issues no tokens for tenant accounts (pods do not mount them either).
            let mut account = with(o, m, &["imagePullSecrets"]);
            account["automountServiceAccountToken"] = json!(false);
            Some(account)
        },
        content: &["imagePullSecrets"],
        ..Kind::plain("serviceaccounts", resource("", "v1", "ServiceAccount"))
    }
}
