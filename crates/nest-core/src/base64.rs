//! Standard base64 (RFC 4648, with padding), as Kubernetes writes `[]byte` fields: Secret data, continue tokens,
//! certificates in kubeconfigs; and base64url without padding, for JSON Web Tokens.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// `bytes` as standard base64 with padding.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    STANDARD.encode(bytes)
}

/// `bytes` as base64url without padding (RFC 4648 §5), as JSON Web Tokens and Keys write them.
pub fn encode_url(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The bytes of base64url without padding (a JSON Web Token's part); `None` for anything else.
pub fn decode_url(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).ok()
}

/// The bytes of standard base64 with padding; `None` for anything else (surrounding white space is not allowed).
pub fn decode(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}

/// The UTF-8 text of base64 `text` (a PEM certificate, a kubeconfig), surrounding white space ignored; `None` when
/// it is not base64 or not UTF-8.
pub fn decode_text(text: &str) -> Option<String> {
    String::from_utf8(decode(text.trim())?).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_as_kubernetes_writes_it() {
        for text in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
            assert_eq!(super::decode(&super::encode(text)).unwrap(), text.as_bytes());
        }
        assert_eq!(super::encode("foobar"), "Zm9vYmFy");
        assert_eq!(super::encode("fo"), "Zm8=");
        assert_eq!(super::decode_text(" Zm8=\n").as_deref(), Some("fo"));
        assert!(super::decode("Zm8").is_none(), "padding is required");
        assert!(super::decode("Z!==").is_none());
        assert!(super::decode_text("/w==").is_none(), "not UTF-8");
        assert_eq!(super::decode_url(&super::encode_url([0xfb, 0xff])).unwrap(), [0xfb, 0xff]);
        assert_eq!(super::encode_url([0xfb, 0xff]), "-_8");
    }
}
