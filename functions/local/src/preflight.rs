//! What `ojs-local` checks before it talks to AWS: a local endpoint still needs
//! credentials and a region (any values do for DynamoDB Local), and without them the SDK
//! fails deep inside the first call with a page of provider errors (review #23).

use std::path::Path;

/// Why the DynamoDB endpoint cannot be used, in one line, or `None` when it can be tried.
pub fn missing_aws_settings(
    env: impl Fn(&str) -> Option<String>,
    home: Option<&Path>,
) -> Option<String> {
    let endpoint = env("AWS_ENDPOINT_URL_DYNAMODB").or_else(|| env("AWS_ENDPOINT_URL"))?;
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    let aws_file = |name: &str| home.is_some_and(|h| h.join(".aws").join(name).is_file());
    let profile = set("AWS_PROFILE");
    let credentials = (set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY"))
        || profile
        || aws_file("credentials");
    let region = set("AWS_REGION") || set("AWS_DEFAULT_REGION") || profile || aws_file("config");
    let mut missing = Vec::new();
    if !credentials {
        missing.push("credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)");
    }
    if !region {
        missing.push("a region (AWS_REGION)");
    }
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "the DynamoDB endpoint {endpoint} needs {} even when it is local (any values do for \
         DynamoDB Local); set them, or run `make dev`, which does",
        missing.join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(vars: &[(&str, &str)]) -> Option<String> {
        let env = |k: &str| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        };
        missing_aws_settings(env, None)
    }

    #[test]
    fn a_local_endpoint_without_credentials_or_region_is_named_in_one_line() {
        let endpoint = ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000");
        let both = check(&[endpoint]).unwrap_or_default();
        assert!(both.contains("http://127.0.0.1:8000"), "{both}");
        assert!(
            both.contains("credentials") && both.contains("region"),
            "{both}"
        );
        assert!(!both.contains('\n'));
        let keys = [
            endpoint,
            ("AWS_ACCESS_KEY_ID", "local"),
            ("AWS_SECRET_ACCESS_KEY", "local"),
        ];
        let region = check(&keys).unwrap_or_default();
        assert!(
            region.contains("region") && !region.contains("credentials"),
            "{region}"
        );
        let all = [keys[0], keys[1], keys[2], ("AWS_REGION", "us-east-1")];
        assert_eq!(check(&all), None);
        assert_eq!(check(&[endpoint, ("AWS_PROFILE", "dev")]), None);
        let blank = [
            endpoint,
            ("AWS_ACCESS_KEY_ID", " "),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("AWS_REGION", "r"),
        ];
        assert!(check(&blank).is_some(), "a blank key is no key");
        // Without a local endpoint the SDK's own chain (roles, SSO...) is trusted.
        assert_eq!(check(&[]), None);
    }
}
