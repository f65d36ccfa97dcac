//! API key authentication (`Authorization: Bearer <key>`), checked in the response layer
//! before any handler runs, so an unauthenticated request never reaches the store.
//!
//! A key reads `ojs_<id>_<secret>`: `id` (12 hex digits) names its record in the table,
//! `secret` (64 hex digits, 256 random bits) is checked against the record's Argon2id
//! hash. The secret is never stored. A verified key is remembered per instance for
//! [`VERIFIED_TTL`] by the SHA-256 digest of the whole key, so the Argon2 work and the
//! GetItem happen at most once a minute per key and instance; a revocation therefore
//! takes effect within that time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use axum::http::{header, HeaderMap};
use ojs_core::tenant::TenantId;
use ojs_core::{time, ErrorCode, OjsError};
use ojs_store::{ApiKeyRecord, Store, StoreError};
use sha2::{Digest, Sha256};

use crate::scopes::Scopes;

/// How long a verified key is trusted without looking at its record again.
pub const VERIFIED_TTL: Duration = Duration::from_secs(60);
/// How long a key found missing, revoked or wrong is refused without looking again.
const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Most remembered keys per instance and verdict (expired ones go first when full).
const CACHE_CAP: usize = 10_000;
const ID_LEN: usize = 12;
const SECRET_LEN: usize = 64;

/// Whether requests must carry an API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Every request is served (private networks, local development).
    Off,
    /// Every request but the manifest, health and CORS preflights needs a valid key.
    ApiKey,
}

impl AuthMode {
    /// Parses `OJS_AUTH`: `off` or `api-key`; anything else (or nothing) is `api-key`,
    /// so a typo fails closed.
    pub fn parse(value: Option<&str>) -> Self {
        match value.map(str::trim) {
            Some("off") => Self::Off,
            Some("api-key") | None => Self::ApiKey,
            Some(other) => {
                tracing::error!(value = other, "unknown OJS_AUTH value; requiring API keys");
                Self::ApiKey
            }
        }
    }
}

/// A freshly issued key: the only time its secret exists outside the client.
#[derive(Debug, Clone)]
pub struct IssuedKey {
    /// The whole key, to hand to the client once.
    pub key: String,
    /// The stored record (id, name, hash).
    pub record: ApiKeyRecord,
}

/// Creates a data key (no stored scopes) named `name` and stores its hash.
pub async fn issue_key(store: &Store, name: &str) -> Result<IssuedKey, StoreError> {
    issue_scoped_key(store, name, None).await
}

/// Creates a key named `name` with `scopes` (none: a data key) and stores its hash.
pub async fn issue_scoped_key(
    store: &Store,
    name: &str,
    scopes: Option<Scopes>,
) -> Result<IssuedKey, StoreError> {
    issue_tenant_key(store, name, scopes, None).await
}

/// [`issue_scoped_key`] for a key bound to `tenant` (none: a key of any tenant).
pub async fn issue_tenant_key(
    store: &Store,
    name: &str,
    scopes: Option<Scopes>,
    tenant: Option<&TenantId>,
) -> Result<IssuedKey, StoreError> {
    let id = random_hex(ID_LEN / 2);
    let secret = random_hex(SECRET_LEN / 2);
    let hash = hash_secret(&secret)?;
    let names: Option<Vec<String>> =
        scopes.map(|s| s.names().into_iter().map(str::to_owned).collect());
    let record = store
        .api_keys()
        .put_scoped(
            &id,
            name,
            &hash,
            names.as_deref(),
            tenant.map(TenantId::as_str),
            time::now(),
        )
        .await?;
    Ok(IssuedKey {
        key: format!("ojs_{id}_{secret}"),
        record,
    })
}

fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// Argon2id memory (KiB) and passes for new keys. A password hash's cost is there to slow
/// the guessing of secrets people choose; a key's secret is 256 random bits, whose odds no
/// cost setting changes, while the crate's default cost (19 MiB, 2 passes) was most of a
/// cold instance's first authenticated response (61-84 ms here, ~300 ms estimated on a
/// 256 MB Lambda). Hashes carry their parameters, so keys hashed at another cost still
/// verify at the cost they were hashed with.
const KEY_HASH_MEMORY_KIB: u32 = 1024;
const KEY_HASH_PASSES: u32 = 1;

fn key_hasher() -> Result<Argon2<'static>, StoreError> {
    let params = argon2::Params::new(KEY_HASH_MEMORY_KIB, KEY_HASH_PASSES, 1, None)
        .map_err(|e| StoreError::Backend(format!("hash parameters: {e}")))?;
    Ok(Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        params,
    ))
}

fn hash_secret(secret: &str) -> Result<String, StoreError> {
    let salt_bytes: [u8; 16] = rand::random();
    let salt = SaltString::encode_b64(&salt_bytes)
        .map_err(|e| StoreError::Backend(format!("salt: {e}")))?;
    key_hasher()?
        .hash_password(secret.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| StoreError::Backend(format!("hashing: {e}")))
}

/// The key id of a well-formed key, for logs (never the secret).
pub fn key_id(key: &str) -> Option<&str> {
    parse_key(key).map(|(id, _)| id)
}

fn parse_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("ojs_")?;
    let (id, secret) = rest.split_once('_')?;
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    (hex(id, ID_LEN) && hex(secret, SECRET_LEN)).then_some((id, secret))
}

/// The bearer token of `Authorization`, if the header is present exactly once and well
/// formed. Keys anywhere else (query strings, other headers) are ignored on purpose.
fn bearer(headers: &HeaderMap) -> Result<&str, &'static str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().ok_or("missing Authorization header")?;
    if values.next().is_some() {
        return Err("more than one Authorization header");
    }
    let value = value
        .to_str()
        .map_err(|_| "malformed Authorization header")?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or("Authorization must be 'Bearer <API key>'")?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err("Authorization must be 'Bearer <API key>'");
    }
    Ok(token.trim())
}

/// Verdicts remembered per instance, by the SHA-256 digest of the whole key. Accepted
/// and refused keys are kept apart (review #19f): a flood of well-formed wrong keys fills
/// and empties only the refused side, never evicting the keys of real clients (which an
/// outsider cannot mint, so that side stays small).
#[derive(Debug, Default)]
struct Verdicts {
    accepted: HashMap<[u8; 32], (Instant, Grant)>,
    refused: HashMap<[u8; 32], Instant>,
}

impl Verdicts {
    /// `Some(Some(grant))` accepted, `Some(None)` refused, `None` not remembered.
    fn get(&self, digest: &[u8; 32], now: Instant) -> Option<Option<Grant>> {
        if let Some((until, grant)) = self.accepted.get(digest) {
            if *until > now {
                return Some(Some(grant.clone()));
            }
        }
        if self.refused.get(digest).is_some_and(|t| *t > now) {
            return Some(None);
        }
        None
    }

    fn put(&mut self, digest: [u8; 32], verdict: Option<Grant>, now: Instant) {
        match verdict {
            Some(grant) => {
                self.refused.remove(&digest);
                if self.accepted.len() >= CACHE_CAP {
                    self.accepted.retain(|_, (until, _)| *until > now);
                    if self.accepted.len() >= CACHE_CAP {
                        self.accepted.clear();
                    }
                }
                self.accepted.insert(digest, (now + VERIFIED_TTL, grant));
            }
            None => {
                self.accepted.remove(&digest);
                if self.refused.len() >= CACHE_CAP {
                    self.refused.retain(|_, until| *until > now);
                    if self.refused.len() >= CACHE_CAP {
                        self.refused.clear();
                    }
                }
                self.refused.insert(digest, now + REFUSED_TTL);
            }
        }
    }
}

/// Who a request comes from: a verified key, its scopes and its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key id (never the secret).
    pub key_id: String,
    /// What the key may do.
    pub scopes: Scopes,
    /// The tenant the key is bound to: it acts for that tenant only, whatever
    /// `X-OJS-Tenant` says (ojs-multi-tenancy.md §5.2, "API key mapping"); `None` for a
    /// key of any tenant (an operator's).
    pub tenant: Option<TenantId>,
}

/// What a verified key grants.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    scopes: Scopes,
    tenant: Option<TenantId>,
}

impl Principal {
    fn of(key_id: &str, grant: Grant) -> Self {
        Self {
            key_id: key_id.to_owned(),
            scopes: grant.scopes,
            tenant: grant.tenant,
        }
    }

    /// Whether a request naming `header` (its `X-OJS-Tenant`, if any) is one this key may
    /// make: a key bound to a tenant acts for no other, the default tenant included.
    pub fn may_act_for(&self, header: Option<&str>) -> bool {
        match (&self.tenant, header) {
            (Some(own), Some(named)) => named.trim() == own.as_str(),
            _ => true,
        }
    }
}

/// Checks API keys against the table, remembering verdicts for a short time.
pub struct Authenticator {
    mode: AuthMode,
    store: Store,
    verdicts: Mutex<Verdicts>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

fn unauthenticated(message: &str) -> OjsError {
    OjsError::new(ErrorCode::Unauthenticated, message)
}

impl Authenticator {
    /// An authenticator in `mode` over `store`'s key records.
    pub fn new(mode: AuthMode, store: Store) -> Self {
        Self {
            mode,
            store,
            verdicts: Mutex::new(Verdicts::default()),
        }
    }

    /// The mode.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// Ok with the key and its scopes (None when auth is off) or the error to answer: 401
    /// `unauthenticated`, or 503 when the key records cannot be read.
    pub async fn check(&self, headers: &HeaderMap) -> Result<Option<Principal>, OjsError> {
        if self.mode == AuthMode::Off {
            return Ok(None);
        }
        let key = bearer(headers).map_err(unauthenticated)?;
        let Some((id, secret)) = parse_key(key) else {
            return Err(unauthenticated("the API key is malformed"));
        };
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let now = Instant::now();
        if let Some(v) = self.remembered(&digest, now) {
            return match v {
                Some(grant) => Ok(Some(Principal::of(id, grant))),
                None => Err(unauthenticated("the API key is not valid")),
            };
        }
        let record = self.store.api_keys().get(id).await.map_err(|e| {
            tracing::error!(cause = %e, "reading API key records");
            OjsError::new(ErrorCode::BackendError, "cannot check the API key; retry")
        })?;
        let verdict = match record {
            Some(r) if r.revoked_at.is_none() && verify(secret, &r.hash) => Some(Grant {
                scopes: Scopes::of_stored(r.scopes.as_deref()),
                // A stored tenant that no longer reads binds the key to nothing it could
                // name: refused below rather than widened to every tenant.
                tenant: match r.tenant.as_deref().map(TenantId::parse) {
                    None => None,
                    Some(Ok(Some(t))) => Some(t),
                    Some(_) => {
                        tracing::error!(key_id = id, "API key bound to an unreadable tenant");
                        return Err(unauthenticated("the API key is not valid"));
                    }
                },
            }),
            _ => None,
        };
        self.remember(digest, verdict.clone(), now);
        if let Some(grant) = verdict {
            Ok(Some(Principal::of(id, grant)))
        } else {
            tracing::warn!(event = "auth.failure", key_id = id, "API key refused");
            Err(unauthenticated("the API key is not valid"))
        }
    }

    fn remembered(&self, digest: &[u8; 32], now: Instant) -> Option<Option<Grant>> {
        self.verdicts.lock().ok()?.get(digest, now)
    }

    fn remember(&self, digest: [u8; 32], verdict: Option<Grant>, now: Instant) {
        if let Ok(mut verdicts) = self.verdicts.lock() {
            verdicts.put(digest, verdict, now);
        }
    }
}

/// Argon2 verification (constant time in the secret), at the parameters the hash names.
fn verify(secret: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|h| {
            Argon2::default()
                .verify_password(secret.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_grant() -> Grant {
        Grant {
            scopes: Scopes::DATA,
            tenant: None,
        }
    }
    use axum::http::HeaderValue;

    const KEY: &str =
        "ojs_0123456789ab_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.append(header::AUTHORIZATION, v);
            }
        }
        h
    }

    #[test]
    fn bearer_takes_exactly_one_well_formed_header() {
        assert_eq!(bearer(&headers(&[&format!("Bearer {KEY}")])), Ok(KEY));
        assert_eq!(bearer(&headers(&[&format!("bearer  {KEY} ")])), Ok(KEY));
        assert!(bearer(&headers(&[])).is_err());
        assert!(bearer(&headers(&[KEY])).is_err());
        assert!(bearer(&headers(&[&format!("Basic {KEY}")])).is_err());
        assert!(bearer(&headers(&["Bearer "])).is_err());
        let two = format!("Bearer {KEY}");
        assert!(bearer(&headers(&[&two, &two])).is_err());
    }

    #[test]
    fn keys_parse_only_in_their_exact_shape() {
        assert_eq!(key_id(KEY), Some("0123456789ab"));
        assert_eq!(parse_key(KEY).map(|(_, s)| s.len()), Some(64));
        for bad in [
            "",
            "ojs_",
            &KEY[..KEY.len() - 1],
            &KEY.replace("ojs_", "sk_"),
            &KEY.to_uppercase(),
            &format!("{KEY}0"),
            "ojs_0123456789ab",
            "ojs_0123456789a_b",
        ] {
            assert_eq!(parse_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_hash_verifies_its_secret_and_nothing_else() -> Result<(), StoreError> {
        let secret = random_hex(32);
        let hash = hash_secret(&secret)?;
        assert!(hash.starts_with("$argon2id$v=19$m=1024,t=1,p=1$"), "{hash}");
        assert!(!hash.contains(&secret));
        assert!(verify(&secret, &hash));
        assert!(!verify(&random_hex(32), &hash));
        assert!(!verify(&secret, "not a hash"));
        Ok(())
    }

    #[test]
    fn keys_hashed_at_another_cost_still_verify() -> Result<(), StoreError> {
        // A key created before the cost changed: the crate's default (19 MiB, 2 passes).
        let secret = random_hex(32);
        let salt =
            SaltString::encode_b64(&[7_u8; 16]).map_err(|e| StoreError::Backend(e.to_string()))?;
        let hash = Argon2::default()
            .hash_password(secret.as_bytes(), &salt)
            .map_err(|e| StoreError::Backend(e.to_string()))?
            .to_string();
        assert!(hash.contains("$m=19456,t=2,p=1$"), "{hash}");
        assert!(verify(&secret, &hash));
        assert!(!verify(&random_hex(32), &hash));
        Ok(())
    }

    #[test]
    fn unknown_modes_fail_closed() {
        assert_eq!(AuthMode::parse(Some("off")), AuthMode::Off);
        assert_eq!(AuthMode::parse(Some("api-key")), AuthMode::ApiKey);
        assert_eq!(AuthMode::parse(None), AuthMode::ApiKey);
        assert_eq!(AuthMode::parse(Some("of")), AuthMode::ApiKey);
    }

    #[test]
    fn a_flood_of_wrong_keys_never_evicts_an_accepted_one() {
        let mut v = Verdicts::default();
        let now = Instant::now();
        let good = [7u8; 32];
        v.put(good, Some(data_grant()), now);
        for i in 0..(3 * CACHE_CAP as u32) {
            let mut d = [0u8; 32];
            d[..4].copy_from_slice(&i.to_be_bytes());
            v.put(d, None, now);
            assert!(v.refused.len() <= CACHE_CAP);
        }
        assert_eq!(v.get(&good, now), Some(Some(data_grant())));
        assert_eq!(v.get(&good, now + VERIFIED_TTL), None, "expires");
        let bad = [9u8; 32];
        v.put(bad, None, now);
        assert_eq!(v.get(&bad, now), Some(None));
        assert_eq!(v.get(&bad, now + REFUSED_TTL), None);
        // A key that becomes valid (or is revoked) takes its new verdict.
        v.put(bad, Some(data_grant()), now);
        assert_eq!(v.get(&bad, now), Some(Some(data_grant())));
        v.put(bad, None, now);
        assert_eq!(v.get(&bad, now), Some(None));
    }

    #[test]
    fn a_full_side_drops_its_expired_verdicts_before_the_live_ones() {
        let mut v = Verdicts::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(6);
        let digest = |i: u32| {
            let mut d = [0u8; 32];
            d[..4].copy_from_slice(&i.to_be_bytes());
            d
        };
        let half = CACHE_CAP as u32 / 2;
        for i in 0..half {
            v.put(digest(i), None, t0);
        }
        for i in half..2 * half {
            v.put(digest(i), None, later);
        }
        // The first half ends exactly now; the second half is live and stays.
        let now = t0 + REFUSED_TTL;
        v.put(digest(2 * half), None, now);
        assert_eq!(v.refused.len(), half as usize + 1);
        assert_eq!(v.get(&digest(half), now), Some(None));
        assert_eq!(v.get(&digest(0), now), None);
    }
}
