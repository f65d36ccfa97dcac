//! Where an outbound call may go: never to loopback, private, link-local (the instance
//! metadata service) or reserved addresses unless `OJS_PUSH_ALLOW_PRIVATE=on`. Checked at
//! registration (the host's addresses now) and at every connection (the resolver below
//! drops forbidden addresses, so a name re-pointed after registration, DNS rebinding
//! included, reaches nothing it should not).

use std::net::SocketAddr;
use std::sync::Arc;

use ojs_core::push::{is_public, PushTarget};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Checks a target as registered: its form (through [`PushTarget::parse`]) and, for a
/// URL with a host name, that the name resolves and only to allowed addresses.
pub async fn check_target(raw: &str, allow_private: bool) -> Result<PushTarget, String> {
    let target = PushTarget::parse(raw, allow_private).map_err(|e| e.message)?;
    let PushTarget::Url(u) = &target else {
        return Ok(target);
    };
    let url = url::Url::parse(u).map_err(|e| e.to_string())?;
    // With private targets allowed (development) there is nothing to refuse, and a name
    // that does not resolve yet is allowed too.
    if allow_private {
        return Ok(target);
    }
    if let Some(url::Host::Domain(host)) = url.host() {
        let port = url.port_or_known_default().unwrap_or(443);
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("endpoint host {host} does not resolve: {e}"))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("endpoint host {host} resolves to no address"));
        }
        if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
            return Err(format!(
                "endpoint host {host} resolves to {}, a loopback, private, link-local or reserved address",
                bad.ip()
            ));
        }
    }
    Ok(target)
}

/// The HTTP client's resolver: the system's, keeping only allowed addresses.
pub(crate) struct GuardedResolver {
    pub(crate) allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = all
                .into_iter()
                .filter(|a| allow_private || is_public(a.ip()))
                .collect();
            if kept.is_empty() {
                return Err(format!(
                    "{host} resolves to no allowed address (loopback, private, link-local and reserved addresses are refused)"
                )
                .into());
            }
            let addrs: Addrs = Box::new(kept.into_iter());
            Ok(addrs)
        })
    }
}

/// The resolver as the client builder takes it.
pub(crate) fn resolver(allow_private: bool) -> Arc<GuardedResolver> {
    Arc::new(GuardedResolver { allow_private })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_resolving_to_loopback_are_refused_unless_allowed() {
        let refused = check_target("https://localhost:8443/", false).await;
        assert!(refused.is_err_and(|e| e.contains("loopback")));
        assert!(check_target("https://localhost:8443/", true).await.is_ok());
        // Plain HTTP only to an IP literal, even when private targets are allowed: a name
        // could point anywhere.
        assert!(check_target("http://localhost:8443/", true).await.is_err());
        assert!(check_target("http://127.0.0.1:8443/", true).await.is_ok());
        // At connection time: the resolver keeps no forbidden address.
        let name: Name = "localhost".parse().unwrap_or_else(|_| unreachable!());
        assert!(resolver(false).resolve(name).await.is_err());
        let name: Name = "localhost".parse().unwrap_or_else(|_| unreachable!());
        let kept: Vec<SocketAddr> = resolver(true)
            .resolve(name)
            .await
            .map(|a| a.collect())
            .unwrap_or_default();
        assert!(!kept.is_empty());
    }
}
