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
        registrable(host, &addrs)?;
    }
    Ok(target)
}

/// Whether a host name resolving to `addrs` may be registered (private targets not
/// allowed): it resolves, and to allowed addresses only.
fn registrable(host: &str, addrs: &[SocketAddr]) -> Result<(), String> {
    if addrs.is_empty() {
        return Err(format!("endpoint host {host} resolves to no address"));
    }
    if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(format!(
            "endpoint host {host} resolves to {}, a loopback, private, link-local or reserved address",
            bad.ip()
        ));
    }
    Ok(())
}

/// The addresses of `host` a connection may use, of `all` it resolved to at this
/// connection: every one when private targets are allowed, else the allowed ones only
/// (a name re-pointed since its registration, or answering differently each time, never
/// gets a connection to a forbidden address); an error when none is left.
pub(crate) fn connectable(
    host: &str,
    all: Vec<SocketAddr>,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, String> {
    let kept: Vec<SocketAddr> = all
        .into_iter()
        .filter(|a| allow_private || is_public(a.ip()))
        .collect();
    if kept.is_empty() {
        return Err(format!(
            "{host} resolves to no allowed address (loopback, private, link-local and reserved addresses are refused)"
        ));
    }
    Ok(kept)
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
            let kept = connectable(&host, all, allow_private)?;
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

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter()
            .map(|a| a.parse().unwrap_or_else(|e| panic!("{a}: {e}")))
            .collect()
    }

    /// A name that resolves, at delivery time, to forbidden addresses (re-pointed after
    /// its registration, or rebinding): every spelling of one is dropped.
    const FORBIDDEN: [&str; 12] = [
        "127.0.0.1:443",
        "10.0.0.1:443",
        "169.254.169.254:443",
        "100.64.0.1:443",
        "0.0.0.0:443",
        "[::1]:443",
        "[::]:443",
        "[::ffff:169.254.169.254]:443",
        "[64:ff9b::a9fe:a9fe]:443",
        "[2002:7f00:1::]:443",
        "[fd00:ec2::254]:443",
        "[fe80::1]:443",
    ];

    #[test]
    fn connections_use_only_allowed_addresses_of_a_name() {
        let refused = connectable("rebind.example", addrs(&FORBIDDEN), false);
        assert!(refused.is_err_and(|e| e.contains("rebind.example")));
        // Public addresses among them are kept, and only those.
        let mut mixed = addrs(&FORBIDDEN);
        mixed.extend(addrs(&[
            "93.184.215.14:443",
            "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443",
        ]));
        assert_eq!(
            connectable("rebind.example", mixed.clone(), false),
            Ok(addrs(&[
                "93.184.215.14:443",
                "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443"
            ]))
        );
        // Private targets allowed (development): every address is kept.
        assert_eq!(
            connectable("rebind.example", mixed.clone(), true),
            Ok(mixed)
        );
        assert!(connectable("rebind.example", Vec::new(), true).is_err());
    }

    #[test]
    fn registration_needs_every_address_of_a_name_allowed() {
        assert!(registrable("public.example", &addrs(&["93.184.215.14:443"])).is_ok());
        assert!(registrable("public.example", &[]).is_err());
        for bad in FORBIDDEN {
            let mut list = addrs(&["93.184.215.14:443"]);
            list.extend(addrs(&[bad]));
            let refused = registrable("mixed.example", &list);
            assert!(refused.is_err_and(|e| e.contains("loopback")), "{bad}");
        }
    }

    /// Host names that name loopback in other spellings: a trailing dot, upper case,
    /// percent-encoding and IDN mapping all reach the resolver as `localhost`(`.`),
    /// whose addresses are refused.
    #[tokio::test]
    async fn spellings_of_localhost_are_refused_at_registration() {
        for raw in [
            "https://localhost./",
            "https://LOCALHOST/",
            "https://%6c%6f%63%61%6c%68%6f%73%74/",
            "https://\u{24db}\u{24de}\u{24d2}\u{24d0}\u{24db}\u{24d7}\u{24de}\u{24e2}\u{24e3}/",
        ] {
            let refused = check_target(raw, false).await;
            assert!(refused.is_err(), "{raw}");
        }
    }
}
