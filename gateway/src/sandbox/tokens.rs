//! Per-session proxy tokens (docs/decisions.md, P2): minted by the gateway, looked up by the proxy,
//! revoked with the session.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use vis_proxy::{Attribution, Lookup, Principal};

/// Programs of one session that get tokens of their own.
pub const MAX_LABELS: usize = 64;

/// Called with a session id when its token is revoked.
pub type OnRevoke = Box<dyn Fn(&str) + Send + Sync>;

#[derive(Default)]
pub struct Tokens {
    by_token: RwLock<HashMap<String, Principal>>,
    by_session: RwLock<HashMap<String, String>>,
    on_revoke: RwLock<Vec<OnRevoke>>,
    /// Tokens handed out for one program of a session: (session, program) → token. Their
    /// decisions name the program (`command`), the evidence of a learned rule.
    labeled: RwLock<HashMap<(String, String), String>>,
    /// A session's own network mode, switched from the phone (docs/decisions.md, L1).
    modes: RwLock<HashMap<String, vis_proxy::policy::Mode>>,
}

impl Tokens {
    /// The session's token, minting one (with its compiled policy) on first use.
    pub fn token_for(&self, principal: impl FnOnce() -> Principal, sid: &str) -> String {
        if let Some(t) = self.by_session.read().get(sid) {
            return t.clone();
        }
        let token = format!("vis-{}", uuid::Uuid::new_v4().simple());
        let p = principal();
        self.by_token.write().insert(token.clone(), p);
        self.by_session
            .write()
            .insert(sid.to_string(), token.clone());
        token
    }

    /// A token of the session for one program (`label`), minted on first use; past
    /// [`MAX_LABELS`] programs a session's children share its own token.
    pub fn token_for_label(
        &self,
        principal: impl FnOnce() -> Principal,
        sid: &str,
        label: &str,
    ) -> String {
        let key = (sid.to_string(), label.to_string());
        if let Some(t) = self.labeled.read().get(&key) {
            return t.clone();
        }
        let mut labeled = self.labeled.write();
        if labeled.keys().filter(|(s, _)| s == sid).count() >= MAX_LABELS {
            drop(labeled);
            return self.token_for(principal, sid);
        }
        let token = format!("vis-{}", uuid::Uuid::new_v4().simple());
        let mut p = principal();
        p.label = Some(Arc::from(label));
        self.by_token.write().insert(token.clone(), p);
        labeled.insert(key, token.clone());
        token
    }

    fn tokens_of(&self, sid: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .by_session
            .read()
            .get(sid)
            .cloned()
            .into_iter()
            .collect();
        out.extend(
            self.labeled
                .read()
                .iter()
                .filter(|((s, _), _)| s == sid)
                .map(|(_, t)| t.clone()),
        );
        out
    }

    pub fn principal_of(&self, sid: &str) -> Option<Principal> {
        let t = self.by_session.read().get(sid).cloned()?;
        self.by_token.read().get(&t).cloned()
    }

    /// The session's own network mode, when one was switched on from the phone.
    pub fn mode_of(&self, sid: &str) -> Option<vis_proxy::policy::Mode> {
        self.modes.read().get(sid).copied()
    }

    /// Sets (or clears) the session's own network mode; takes effect with [`Self::repolicy`].
    pub fn set_mode(&self, sid: &str, mode: Option<vis_proxy::policy::Mode>) {
        match mode {
            Some(m) => self.modes.write().insert(sid.to_string(), m),
            None => self.modes.write().remove(sid),
        };
    }

    /// Replaces the policy of the session's live token (a changed `vis.yml`, a mode switch):
    /// the next request is decided by it.
    pub fn repolicy(&self, sid: &str, policy: Arc<vis_proxy::policy::Policy>) {
        let tokens = self.tokens_of(sid);
        let mut by_token = self.by_token.write();
        for t in tokens {
            if let Some(p) = by_token.get_mut(&t) {
                p.policy = policy.clone();
            }
        }
    }

    /// The sessions with a live token whose project is `root`.
    pub fn sessions_of(&self, root: &std::path::Path) -> Vec<String> {
        self.by_token
            .read()
            .values()
            .filter(|p| p.project.as_deref() == Some(root))
            .map(|p| p.session_id.to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// Forgets the session's token: the proxy answers 407 for it from now on.
    pub fn revoke(&self, sid: &str) {
        for t in self.tokens_of(sid) {
            self.by_token.write().remove(&t);
        }
        self.by_session.write().remove(sid);
        self.labeled.write().retain(|(s, _), _| s != sid);
        for f in self.on_revoke.read().iter() {
            f(sid);
        }
    }

    /// Runs `f` for every revoked session (e.g. to forget its phantom keys).
    pub fn on_revoke(&self, f: OnRevoke) {
        self.on_revoke.write().push(f);
    }
}

/// The proxy's view of the registry.
pub struct TokenLookup(pub Arc<Tokens>);

#[async_trait::async_trait]
impl Attribution for TokenLookup {
    async fn lookup(&self, token: &str) -> Lookup {
        match self.0.by_token.read().get(token) {
            Some(p) => Lookup::Found(p.clone()),
            None => Lookup::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vis_proxy::policy::Policy;

    fn principal() -> Principal {
        Principal {
            session_id: "s1".into(),
            policy: Arc::new(Policy::unrestricted()),
            reserved_ports: Arc::from([]),
            project: None,
            label: None,
        }
    }

    #[tokio::test]
    async fn a_token_resolves_until_its_session_is_revoked() {
        let tokens = Arc::new(Tokens::default());
        let t = tokens.token_for(principal, "s1");
        assert_eq!(
            tokens.token_for(principal, "s1"),
            t,
            "one token per session"
        );
        let lookup = TokenLookup(tokens.clone());
        assert!(matches!(lookup.lookup(&t).await, Lookup::Found(p) if &*p.session_id == "s1"));
        tokens.revoke("s1");
        assert!(matches!(lookup.lookup(&t).await, Lookup::Unknown));
    }

    #[tokio::test]
    async fn a_program_gets_its_own_token_naming_it_and_revoking_the_session_ends_them_all() {
        let tokens = Arc::new(Tokens::default());
        let own = tokens.token_for(principal, "s1");
        let pip = tokens.token_for_label(principal, "s1", "pip");
        assert_ne!(own, pip);
        assert_eq!(tokens.token_for_label(principal, "s1", "pip"), pip);
        let lookup = TokenLookup(tokens.clone());
        let Lookup::Found(p) = lookup.lookup(&pip).await else {
            panic!("the program's token resolves")
        };
        assert_eq!((&*p.session_id, p.label.as_deref()), ("s1", Some("pip")));
        tokens.repolicy("s1", Arc::new(Policy::deny_all(None)));
        let Lookup::Found(p) = lookup.lookup(&pip).await else {
            panic!("still there")
        };
        assert!(
            !p.policy.is_unrestricted(),
            "the program's token follows the session's policy"
        );
        tokens.revoke("s1");
        assert!(matches!(lookup.lookup(&pip).await, Lookup::Unknown));
        assert!(matches!(lookup.lookup(&own).await, Lookup::Unknown));
    }
}
