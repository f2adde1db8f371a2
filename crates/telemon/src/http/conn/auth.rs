//! `basic_auth_users` (the users, bcrypt, the cache of checked passwords) and `rate_limit` (a token
//! bucket), which [`super::gate`] applies in front of the whole Router.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use axum::http::HeaderValue;
use base64::Engine;
use subtle::ConstantTimeEq;

use super::settings::RateLimit;

/// The path served without basic auth (liveness checks).
pub const OPEN_PATH: &str = "/healthz";
/// How many (user, password, hash) checks are remembered, so that a scrape does not pay bcrypt
/// each time (a full cache drops an arbitrary entry).
pub const AUTH_CACHE_ENTRIES: usize = 256;

/// The users and the cache of passwords already checked.
pub(crate) struct Auth {
    users: Vec<(String, String)>,
    /// SHA-256 of (user, hash, password) -> whether it was right. Never the password itself.
    cache: Mutex<HashMap<[u8; 32], bool>>,
    /// One bcrypt at a time (it takes tens of milliseconds of CPU at cost 10).
    bcrypt: tokio::sync::Semaphore,
    /// A hash compared against when the user is unknown, so that timing does not tell which users exist.
    decoy: OnceLock<String>,
}

impl Auth {
    pub(crate) fn new(users: Vec<(String, String)>) -> Auth {
        Auth {
            users,
            cache: Mutex::new(HashMap::new()),
            bcrypt: tokio::sync::Semaphore::new(1),
            decoy: OnceLock::new(),
        }
    }

    /// (name, bcrypt hash) pairs, in the file's order.
    pub(crate) fn users(&self) -> &[(String, String)] {
        &self.users
    }

    pub(crate) fn names(&self) -> Vec<&str> {
        self.users.iter().map(|(u, _)| u.as_str()).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `authorization` (the request's header) names a user with the right password.
    pub(crate) async fn check(self: &Arc<Self>, authorization: Option<&HeaderValue>) -> bool {
        let Some((user, password)) = authorization.and_then(basic_credentials) else { return false };
        // Every user is compared, in constant time each, whether or not an earlier one matched.
        let mut found: Option<&str> = None;
        for (name, hash) in &self.users {
            if bool::from(name.as_bytes().ct_eq(user.as_bytes())) {
                found = Some(hash);
            }
        }
        let known = found.is_some();
        let hash = match found {
            Some(h) => h.to_owned(),
            None => self.decoy().to_owned(),
        };
        let key = cache_key(&user, &hash, &password);
        if let Some(ok) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return *ok && known;
        }
        let Ok(_permit) = self.bcrypt.acquire().await else { return false };
        let verified =
            tokio::task::spawn_blocking(move || bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false))
                .await
                .unwrap_or(false);
        let ok = known && verified;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= AUTH_CACHE_ENTRIES {
            if let Some(old) = cache.keys().next().copied() {
                cache.remove(&old);
            }
        }
        cache.insert(key, ok);
        ok
    }

    /// A bcrypt hash with the first user's cost, of a password nobody sends.
    fn decoy(&self) -> &str {
        self.decoy.get_or_init(|| {
            let cost = self
                .users
                .first()
                .and_then(|(_, h)| h.parse::<bcrypt::HashParts>().ok())
                .map_or(bcrypt::DEFAULT_COST, |p| p.get_cost());
            bcrypt::hash("telemon: no such user", cost).unwrap_or_default()
        })
    }

    #[cfg(test)]
    fn cached(&self) -> usize {
        self.cache.lock().unwrap().len()
    }
}

/// The user and password of an `Authorization: Basic ...` header.
fn basic_credentials(value: &HeaderValue) -> Option<(String, String)> {
    let value = value.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// SHA-256 over the three, each length-prefixed (so that no two triples share a key).
fn cache_key(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user, hash, password] {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part.as_bytes());
    }
    let mut key = [0; 32];
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

/// `rate_limit`: a token bucket shared by every connection.
pub(crate) struct RateLimiter {
    limit: RateLimit,
    /// Tokens, and when they were counted.
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub(crate) fn new(limit: RateLimit) -> RateLimiter {
        RateLimiter { limit, state: Mutex::new((f64::from(limit.burst), Instant::now())) }
    }

    /// Takes a token if there is one.
    pub(crate) fn allow(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let earned = now.duration_since(state.1).as_secs_f64() / self.limit.interval.as_secs_f64();
        state.0 = (state.0 + earned).min(f64::from(self.limit.burst));
        state.1 = now;
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn basic(user: &str, password: &str) -> HeaderValue {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {token}")).unwrap()
    }

    #[tokio::test]
    async fn the_right_password_passes_and_checks_are_cached() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        let auth = Arc::new(Auth::new(vec![("alice".into(), hash)]));
        assert!(auth.check(Some(&basic("alice", "secret"))).await);
        assert_eq!(auth.cached(), 1);
        assert!(auth.check(Some(&basic("alice", "secret"))).await, "from the cache");
        assert_eq!(auth.cached(), 1);
        assert!(!auth.check(Some(&basic("alice", "wrong"))).await);
        assert!(!auth.check(Some(&basic("bob", "secret"))).await, "unknown user");
        assert!(!auth.check(Some(&basic("alice", "wrong"))).await, "a cached failure stays a failure");
        assert!(!auth.check(None).await);
        assert!(!auth.check(Some(&HeaderValue::from_static("Bearer x"))).await);
        assert!(!auth.check(Some(&HeaderValue::from_static("Basic !!!"))).await);
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let auth = Arc::new(Auth::new(vec![("alice".into(), bcrypt::hash("secret", 4).unwrap())]));
        for i in 0..AUTH_CACHE_ENTRIES + 20 {
            assert!(!auth.check(Some(&basic("alice", &format!("guess{i}")))).await);
        }
        assert_eq!(auth.cached(), AUTH_CACHE_ENTRIES);
    }

    #[test]
    fn cache_keys_differ_when_any_part_does() {
        assert_ne!(cache_key("ab", "c", "d"), cache_key("a", "bc", "d"));
        assert_ne!(cache_key("a", "b", "c"), cache_key("a", "b", "d"));
        assert_eq!(cache_key("a", "b", "c"), cache_key("a", "b", "c"));
    }

    #[test]
    fn the_bucket_holds_burst_tokens() {
        let limiter = RateLimiter::new(RateLimit { interval: Duration::from_secs(3600), burst: 3 });
        assert!(limiter.allow() && limiter.allow() && limiter.allow());
        assert!(!limiter.allow());
        // burst 0: nothing ever passes (golang.org/x/time/rate's Allow with a burst of 0).
        let limiter = RateLimiter::new(RateLimit { interval: Duration::from_nanos(1), burst: 0 });
        assert!(!limiter.allow() && !limiter.allow());
    }
}
