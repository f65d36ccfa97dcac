//! The AWS SDK's configuration, one way for every client of this workspace: the standard
//! environment (`AWS_ENDPOINT_URL*`, region, credentials) with an HTTPS client on rustls
//! and *ring*. The SDKs' own default client (their `default-https-client` feature) brings
//! rustls on aws-lc, whose C library was the slowest unit of the workspace's build (about
//! 46 of its 880 CPU seconds, on its longest chain); reqwest (push delivery, webhooks)
//! already uses *ring*, so one crypto library serves both. Without that feature an SDK
//! client has no HTTP client of its own: every client takes this one through the
//! [`aws_config::SdkConfig`] it is built from (`clippy.toml` refuses the loaders that would
//! skip it).

use aws_config::{BehaviorVersion, ConfigLoader, SdkConfig};
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// The HTTPS client of every SDK client: rustls with *ring*, the SDK's connection pool
/// and its per-client connect and read timeouts.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// The standard environment's loader with [`https_client`], for a caller that sets more
/// (an endpoint of its own) before `load()`.
#[allow(clippy::disallowed_methods)] // the one place allowed: it sets the client
pub fn sdk_loader() -> ConfigLoader {
    aws_config::defaults(BehaviorVersion::latest()).http_client(https_client())
}

/// The SDK configuration of the standard environment, with [`https_client`].
pub async fn sdk_config() -> SdkConfig {
    sdk_loader().load().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A client of [`sdk_loader`] opens HTTPS endpoints with a TLS handshake (no panic for
    /// a missing crypto provider, no plain text): what it first sends to an `https://`
    /// endpoint is a TLS handshake record.
    #[tokio::test]
    async fn clients_speak_tls_to_an_https_endpoint() -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let hello = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await?;
            let mut head = [0u8; 3];
            socket.read_exact(&mut head).await?;
            std::io::Result::Ok(head)
        });
        let sdk = sdk_loader()
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "x", "x", None, None, "test",
            ))
            .endpoint_url(format!("https://127.0.0.1:{port}"))
            .load()
            .await;
        let client = aws_sdk_dynamodb::Client::new(&sdk);
        let call = tokio::spawn(async move { client.list_tables().send().await });
        // A connection to this machine is made in milliseconds; a client that makes none
        // (no HTTP client) fails here instead of waiting forever.
        let head = tokio::time::timeout(std::time::Duration::from_secs(30), hello)
            .await
            .map_err(|_| std::io::Error::other("the client never connected"))???;
        call.abort();
        // A TLS record of type handshake (22), protocol version 3.x.
        assert_eq!(head[..2], [22, 3], "not a TLS handshake: {head:?}");
        Ok(())
    }
}
